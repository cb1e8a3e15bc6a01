"""Checks for chapter 6, training pitfalls and decoding (book/ch06_training): one
module per exercise.

``shift_targets``, ``sequence_loss``, ``train_step``, ``greedy_decode``
    each exercise's checks (``train_step`` and ``greedy_decode`` hold their hidden
    "written by hand" checks too).
``noam``
    ``noam_lambda`` and ``make_scheduler``, the learning-rate schedule and the
    scheduler that applies it.
``references``
    seeded inputs, the reference shift and loss, a small model and the first-problem
    failure, shared by the exercises.
``sections``
    the lesson's sections a failure links to.

Test cells call ``ch06.check_...``: the names below are what they reach
(``check_by_hand`` included; ``bughunt_decoding`` and ``own_model`` reach a diagnosis
and sections too).
"""

from ...guard.integrity import seal

# Unused here: the exercise's test cells call it as ch06.check_by_hand.
from ..delegation import check_by_hand
from ..pieces import wrap_checks
from .greedy_decode import (
    DECODE_PROBES,
    DECODES_IN_TRAINING_MODE,
    check_greedy_by_hand,
    check_greedy_decode,
)
from .noam import check_noam_lambda, check_noam_scheduler
from .sections import (
    CHAPTER,
    S_CLIP,
    S_DECODE,
    S_LOSS,
    S_LR,
    S_PAD,
    S_SHIFT,
    S_TASK,
)
from .sequence_loss import check_sequence_loss
from .shift_targets import check_shift_targets
from .train_step import check_train_step, check_train_step_by_hand

# The exercises' modules in the order the chapter sets them (the pitfall index's rows).
MODULES = (
    "references",
    "shift_targets",
    "sequence_loss",
    "noam",
    "train_step",
    "greedy_decode",
)

__all__ = [
    "CHAPTER",
    "DECODES_IN_TRAINING_MODE",
    "DECODE_PROBES",
    "S_CLIP",
    "S_DECODE",
    "S_LOSS",
    "S_LR",
    "S_PAD",
    "S_SHIFT",
    "S_TASK",
    "check_by_hand",
    "check_greedy_by_hand",
    "check_greedy_decode",
    "check_noam_lambda",
    "check_noam_scheduler",
    "check_sequence_loss",
    "check_shift_targets",
    "check_train_step",
    "check_train_step_by_hand",
]

wrap_checks(globals())  # one diagnosis per submission (pieces.py)
seal(__name__)
