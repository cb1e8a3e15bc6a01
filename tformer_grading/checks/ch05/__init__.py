"""Checks for chapter 5, positions and the whole model (book/ch05_model): one module
per exercise.

``sinusoidal_encoding``, ``embed``, ``decoder_block``
    each exercise's checks (``decoder_block`` holds the hidden "written by hand"
    check too; its train-mode dropout is measured in ``sublayer_dropout``, its
    behaviour probed in ``decoder_behaviour``).
``grading``
    the grading flow (compare, a listed pitfall, the learner's exception, a
    measurement, the fallback), shared by the three exercises.
``sections``
    the lesson's sections a failure links to.

Test cells call ``ch05.check_...`` and ``ch05.check_by_hand``: the names below are
what they reach.
"""

from ...guard.integrity import seal
from ..delegation import check_by_hand
from ..pieces import wrap_checks
from .decoder_behaviour import check_decoder_behaviour
from .decoder_block import check_decoder_block, check_decoder_by_hand
from .embed import check_embed
from .sections import (
    CHAPTER,
    S_COUNT,
    S_DECODER,
    S_EMBED,
    S_EXTRAPOLATE,
    S_LEARNED,
    S_LM,
    S_ORDER,
    S_SINUSOID,
)
from .sinusoidal_encoding import check_sinusoidal_encoding

# The exercises' modules in the order the chapter sets them (the pitfall index's rows).
MODULES = (
    "grading",
    "sinusoidal_encoding",
    "embed",
    "decoder_block",
    "sublayer_dropout",
    "decoder_behaviour",
)

__all__ = [
    "CHAPTER",
    "S_COUNT",
    "S_DECODER",
    "S_EMBED",
    "S_EXTRAPOLATE",
    "S_LEARNED",
    "S_LM",
    "S_ORDER",
    "S_SINUSOID",
    "check_by_hand",
    "check_decoder_behaviour",
    "check_decoder_block",
    "check_decoder_by_hand",
    "check_embed",
    "check_sinusoidal_encoding",
]

wrap_checks(globals())  # one diagnosis per submission (pieces.py)
seal(__name__)
