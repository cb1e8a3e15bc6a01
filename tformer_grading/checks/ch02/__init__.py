"""Checks for chapter 2, scaled dot-product attention (book/ch02_attention): one
module per exercise.

``attention``
    ``check_attention`` and the hidden ``check_attention_by_hand``.
``attention_large_scores``
    ``check_attention``'s last stage: scores large enough to overflow exp.
``attention_entropy``
    ``check_attention_entropy``.
``sections``
    the lesson's sections a failure links to.

Test cells call ``ch02.check_...``: the names below are what they reach.
"""

from ...guard.integrity import seal
from ..flow import part_of_pair
from ..pieces import wrap_checks
from .attention import check_attention, check_attention_by_hand
from .attention_entropy import check_attention_entropy
from .sections import (
    CHAPTER,
    S_DMODEL,
    S_ENTROPY,
    S_GRADCHECK,
    S_SATURATION,
    S_STEPS,
    S_VARIANCE,
)

# The exercises' modules in the order the chapter sets them (the pitfall index's rows).
MODULES = ("attention", "attention_large_scores", "attention_entropy")

__all__ = [
    "CHAPTER",
    "S_DMODEL",
    "S_ENTROPY",
    "S_GRADCHECK",
    "S_SATURATION",
    "S_STEPS",
    "S_VARIANCE",
    "check_attention",
    "check_attention_by_hand",
    "check_attention_entropy",
    "part_of_pair",
]

wrap_checks(globals())  # one diagnosis per submission (pieces.py)
seal(__name__)
