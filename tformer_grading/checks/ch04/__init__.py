"""Checks for chapter 4, blocks (book/ch04_blocks): one module per exercise.

``feed_forward``
    ``check_feed_forward``.
``encoder_block``
    ``check_encoder_block`` (Post-LN and Pre-LN) and the hidden ``check_block_by_hand``;
    the same exercise's ``check_dropout_placement`` is in ``dropout_placement``, its
    ``check_block_behaviour`` in ``block_behaviour``, and ``norms`` reads the block's
    LayerNorms off its forward.
``tracing``
    reading what a watched forward computed, shared by the two exercises.
``sections``
    the lesson's sections a failure links to.

Test cells call ``ch04.check_...``: the names below are what they reach (chapter 5's
checks reuse ``BATCHNORM``, ``DROPOUT_IN_EVAL`` and the sections).
"""

from ...guard.integrity import seal
from ..pieces import wrap_checks
from .block_behaviour import check_block_behaviour
from .dropout_placement import check_dropout_placement
from .encoder_block import check_block_by_hand, check_encoder_block
from .feed_forward import check_feed_forward
from .norms import BATCHNORM
from .sections import (
    CHAPTER,
    S_DROPOUT,
    S_FF,
    S_NORM,
    S_PADDING,
    S_PLACEMENT,
    S_RESIDUAL,
    S_TYING,
    S_XAVIER,
)
from .tracing import DROPOUT_IN_EVAL

# The exercises' modules in the order the chapter sets them (the pitfall index's rows).
MODULES = (
    "tracing",
    "feed_forward",
    "norms",
    "encoder_block",
    "dropout_placement",
    "block_behaviour",
)

__all__ = [
    "BATCHNORM",
    "CHAPTER",
    "DROPOUT_IN_EVAL",
    "S_DROPOUT",
    "S_FF",
    "S_NORM",
    "S_PADDING",
    "S_PLACEMENT",
    "S_RESIDUAL",
    "S_TYING",
    "S_XAVIER",
    "check_block_behaviour",
    "check_block_by_hand",
    "check_dropout_placement",
    "check_encoder_block",
    "check_feed_forward",
]

wrap_checks(globals())  # one diagnosis per submission (pieces.py)
seal(__name__)
