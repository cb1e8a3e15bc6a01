"""Chapter 8's sections: what a failure links to (book/ch08_generation), and the
sections of chapters 4 and 5 that some of its diagnoses point to."""

from __future__ import annotations

from ...guard.integrity import seal
from ..diagnosis import Section

CHAPTER = "ch08_generation"
# Some diagnoses point to chapter 5's sections: the pitfall index still lists them
# under this exercise.
ASSIGNMENT = "ch08_generation"
S_TEMPERATURE = Section(CHAPTER, "8.5", "Temperature")
S_TOP_P = Section(CHAPTER, "8.6", "Top-k and top-p")
S_CACHE = Section(CHAPTER, "8.7", "The KV cache")
S_CACHE_PITFALLS = Section(CHAPTER, "8.8", "Decoding with a cache: three pitfalls")
# The model's own parts are chapter 5's lessons.
S_EMBED = Section("ch05_model", "5.5", "Embeddings scaled by sqrt(d_model)")
S_LM = Section("ch05_model", "5.8", "A decoder-only model")
# Where dropout goes is chapter 4's lesson.
S_DROPOUT = Section("ch04_blocks", "4.4", "Where dropout goes")

seal(__name__)
