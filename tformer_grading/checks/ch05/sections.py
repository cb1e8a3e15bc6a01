"""Chapter 5's sections: what a failure links to (book/ch05_model)."""

from __future__ import annotations

from ...guard.integrity import seal
from ..diagnosis import Section

CHAPTER = "ch05_model"
S_ORDER = Section(CHAPTER, "5.1", "Attention ignores order")
S_SINUSOID = Section(CHAPTER, "5.2", "Sinusoidal positional encoding")
S_LEARNED = Section(CHAPTER, "5.3", "Learned positions and max_length")
S_EXTRAPOLATE = Section(CHAPTER, "5.4", 'What "extrapolates" means')
S_EMBED = Section(CHAPTER, "5.5", "Embeddings scaled by sqrt(d_model)")
S_DECODER = Section(CHAPTER, "5.6", "Encoder, decoder and cross-attention")
S_COUNT = Section(CHAPTER, "5.7", "The seed's model, counted")
S_LM = Section(CHAPTER, "5.8", "A decoder-only model")
# The blocks' own lessons (S_RESIDUAL, S_PLACEMENT, BATCHNORM's) are chapter 4's.


seal(__name__)
