"""Chapter 1's sections: what a failure links to (book/ch01_shapes)."""

from __future__ import annotations

from ...guard.integrity import seal
from ..diagnosis import Section

CHAPTER = "ch01_shapes"
S_SPLIT = Section(CHAPTER, "1.5", "Splitting into heads", page="heads")
S_MERGE = Section(CHAPTER, "1.6", "Merging heads back", page="heads")
S_EINSUM = Section(CHAPTER, "1.7", "einsum and matmul", page="heads")
S_PROJ = Section(CHAPTER, "1.8", "Per-head projections", page="heads")
S_SCALE = Section(CHAPTER, "1.9", "Scaling by the head size", page="heads")

seal(__name__)
