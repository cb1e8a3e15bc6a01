"""Chapter 3's sections: what a failure links to (book/ch03_masks)."""

from __future__ import annotations

from ...guard.integrity import seal
from ..diagnosis import (
    Section,
)

CHAPTER = "ch03_masks"


S_PADDING = Section(CHAPTER, "3.1", "Padding masks")


S_CAUSAL = Section(CHAPTER, "3.2", "The causal mask")


S_COMBINE = Section(CHAPTER, "3.3", "Combining masks")


S_CONVENTIONS = Section(CHAPTER, "3.4", "Three conventions for one mask")


S_FILL = Section(CHAPTER, "3.5", "Fill values, half precision and NaN")


S_PROBES = Section(CHAPTER, "3.6", "Probes: causality and pad invariance")


seal(__name__)
