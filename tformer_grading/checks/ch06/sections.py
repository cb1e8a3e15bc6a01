"""Chapter 6's sections: what a failure links to (book/ch06_training)."""

from __future__ import annotations

from ...guard.integrity import seal
from ..diagnosis import Section

CHAPTER = "ch06_training"
S_TASK = Section(CHAPTER, "6.1", "The toy task")
S_SHIFT = Section(CHAPTER, "6.2", "Teacher forcing and the shift")
S_LOSS = Section(CHAPTER, "6.3", "A loss that ignores padding")
S_LR = Section(CHAPTER, "6.4", "Learning rate and warm-up")
S_CLIP = Section(CHAPTER, "6.5", "Exploding gradients and clipping")
S_PAD = Section(CHAPTER, "6.6", "Dynamic padding and bucketing")
S_DECODE = Section(CHAPTER, "6.7", "Greedy and beam decoding")


seal(__name__)
