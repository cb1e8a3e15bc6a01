"""Checks for chapter 3, masks (book/ch03_masks): one module per exercise.

``causal_mask``, ``padding_mask``, ``masked_attention``
    each exercise's checks (``masked_attention`` holds the hidden "written by hand"
    check too).
``masked_attention_half``
    ``masked_attention`` in float16 and bfloat16, a test cell of its own.
``mask_probes``
    the learner's masked attention with their own masks, judged by behaviour.
``reading``
    reading a returned mask, shared by the three mask exercises.
``sections``
    the lesson's sections a failure links to.

Test cells call ``ch03.check_...``: the names below are what they reach.
"""

from ...guard.integrity import seal
from ..pieces import wrap_checks
from .causal_mask import check_causal_mask
from .mask_probes import check_mask_probes
from .masked_attention import check_masked_attention, check_masked_attention_by_hand
from .masked_attention_half import check_masked_attention_half_precision
from .padding_mask import check_padding_mask
from .sections import (
    CHAPTER,
    S_CAUSAL,
    S_COMBINE,
    S_CONVENTIONS,
    S_FILL,
    S_PADDING,
    S_PROBES,
)

# The exercises' modules in the order the chapter sets them (the pitfall index's rows).
MODULES = (
    "reading",
    "causal_mask",
    "padding_mask",
    "masked_attention",
    "masked_attention_half",
    "mask_probes",
)

__all__ = [
    "CHAPTER",
    "S_CAUSAL",
    "S_COMBINE",
    "S_CONVENTIONS",
    "S_FILL",
    "S_PADDING",
    "S_PROBES",
    "check_causal_mask",
    "check_mask_probes",
    "check_masked_attention",
    "check_masked_attention_by_hand",
    "check_masked_attention_half_precision",
    "check_padding_mask",
]

wrap_checks(globals())  # one diagnosis per submission (pieces.py)
seal(__name__)
