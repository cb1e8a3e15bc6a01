"""Chapter 2's sections: what a failure links to (book/ch02_attention)."""

from __future__ import annotations

from ...guard.integrity import seal
from ..diagnosis import Section

CHAPTER = "ch02_attention"
S_STEPS = Section(CHAPTER, "2.1", "Attention step by step")
S_VARIANCE = Section(CHAPTER, "2.2", "Why the scores grow with d_k")
S_SATURATION = Section(CHAPTER, "2.3", "Saturation and the gradients")
S_ENTROPY = Section(CHAPTER, "2.4", "Entropy: how peaked is attention")
S_DMODEL = Section(CHAPTER, "2.5", "Scaling by √d_model is a bug")
S_GRADCHECK = Section(CHAPTER, "2.6", "Gradcheck done right")

seal(__name__)
