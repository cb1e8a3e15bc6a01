"""Checks for chapter 7, mixed precision, accumulation and DDP (book/ch07_scale): one
module per exercise.

``accumulation_step``
    ``check_accumulation_step`` and the hidden ``check_accumulation_by_hand``.
``amp_step``
    ``check_amp_step`` and the hidden ``check_amp_by_hand``.
``make_loader``
    ``check_make_loader``, a behaviour check: which samples each rank reads in each
    epoch.
``step_probe``
    the toy model and the least-squares fit that measure a training step, shared by
    the two step exercises (the tape they write on: measure/tape.py).
``sections``
    the lesson's sections a failure links to.

Test cells call ``ch07.check_...``: the names below are what they reach.
"""

from ...guard.integrity import seal
from ..pieces import wrap_checks
from .accumulation_step import check_accumulation_by_hand, check_accumulation_step
from .amp_step import check_amp_by_hand, check_amp_step
from .make_loader import check_make_loader
from .sections import CHAPTER, S_ACCUM, S_AMP, S_DDP, S_SAMPLER, S_SCALER

# The exercises' modules in the order the chapter sets them (the pitfall index's rows).
MODULES = ("step_probe", "accumulation_step", "amp_step", "make_loader")

__all__ = [
    "CHAPTER",
    "S_ACCUM",
    "S_AMP",
    "S_DDP",
    "S_SAMPLER",
    "S_SCALER",
    "check_accumulation_by_hand",
    "check_accumulation_step",
    "check_amp_by_hand",
    "check_amp_step",
    "check_make_loader",
]

wrap_checks(globals())  # one diagnosis per submission (pieces.py)
seal(__name__)
