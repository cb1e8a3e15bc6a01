"""Chapter 4's sections: what a failure links to (book/ch04_blocks)."""

from __future__ import annotations

from ...guard.integrity import seal
from ..diagnosis import Section

CHAPTER = "ch04_blocks"
S_RESIDUAL = Section(CHAPTER, "4.1", "Residual connections")
S_FF = Section(CHAPTER, "4.2", "The feed-forward sublayer")
S_NORM = Section(CHAPTER, "4.3", "LayerNorm, not BatchNorm")
S_DROPOUT = Section(CHAPTER, "4.4", "Where dropout goes")
S_PLACEMENT = Section(CHAPTER, "4.5", "Post-LN and Pre-LN")
S_XAVIER = Section(CHAPTER, "4.6", "Xavier initialisation")
S_TYING = Section(CHAPTER, "4.7", "Weight tying")
# Passing the mask on is chapter 3's lesson.
S_PADDING = Section("ch03_masks", "3.1", "Padding masks")


seal(__name__)
