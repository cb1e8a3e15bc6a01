"""Chapter 7's sections: what a failure links to (book/ch07_scale)."""

from __future__ import annotations

from ...guard.integrity import seal
from ..diagnosis import Section

CHAPTER = "ch07_scale"
S_AMP = Section(CHAPTER, "7.1", "Mixed precision with torch.amp")
S_SCALER = Section(CHAPTER, "7.2", "GradScaler, unscale_ and clipping")
S_ACCUM = Section(CHAPTER, "7.3", "Gradient accumulation")
S_DDP = Section(CHAPTER, "7.4", "DistributedDataParallel is data parallel")
S_SAMPLER = Section(CHAPTER, "7.5", "DistributedSampler and set_epoch")


seal(__name__)
