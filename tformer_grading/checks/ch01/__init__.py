"""Checks for chapter 1, shapes and heads (book/ch01_shapes): one module per exercise.

``split_heads``, ``merge_heads``, ``multi_head_attention``
    each exercise's checks (``multi_head_attention`` holds the hidden "written by
    hand" check too).
``mha_behaviour``
    ``multi_head_attention``'s behaviour probes (tokens mix, batch entries apart,
    eval mode deterministic, training mode the same computation but for dropout).
``stages``
    the staged comparison the three exercises share, and what ``split_heads`` and
    ``merge_heads`` share (where each value came from, the gradient).
``sections``
    the lesson's sections a failure links to.

Test cells call ``ch01.check_...``: the names below are what they reach.
"""

from ...guard.integrity import seal

# Test cells call ch01.check_by_hand: it is re-exported here.
from ..delegation import check_by_hand
from ..pieces import wrap_checks
from .merge_heads import check_merge_heads
from .mha_behaviour import check_multi_head_attention_behaviour
from .multi_head_attention import (
    check_multi_head_attention,
    check_multi_head_attention_by_hand,
)
from .sections import CHAPTER, S_EINSUM, S_MERGE, S_PROJ, S_SCALE, S_SPLIT
from .split_heads import check_split_heads

# The exercises' modules in the order the chapter sets them (the pitfall index's rows).
MODULES = (
    "stages",
    "split_heads",
    "merge_heads",
    "projections",
    "readings",
    "multi_head_attention",
    "mha_behaviour",
)

__all__ = [
    "CHAPTER",
    "S_EINSUM",
    "S_MERGE",
    "S_PROJ",
    "S_SCALE",
    "S_SPLIT",
    "check_by_hand",
    "check_merge_heads",
    "check_multi_head_attention",
    "check_multi_head_attention_behaviour",
    "check_multi_head_attention_by_hand",
    "check_split_heads",
]

wrap_checks(globals())  # one diagnosis per submission (pieces.py)
seal(__name__)
