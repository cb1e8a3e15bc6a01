"""Checks for chapter 8, generation (book/ch08_generation): one module per exercise.

``next_token_probs``, ``lm_step``, ``generate_greedy``
    each exercise's checks, with its hidden "written by hand" check
    (``generate_greedy``'s asks ``lm_step``'s whether the learner's step is right).
``harness``
    the tolerance, the notebook's random state, tokens as text and the tiny seeded
    models and token ids, shared by the three exercises; the runner of a cached step,
    shared by ``lm_step`` and ``generate_greedy``.
``sections``
    the lesson's sections a failure links to.

Test cells call ``ch08.check_...``: the names below are what they reach.
"""

from ...guard.integrity import seal
from ..pieces import wrap_checks
from .generate_greedy import (
    check_generate_greedy,
    check_generate_greedy_by_hand,
    gen_cases,
)
from .lm_step import check_lm_step, check_lm_step_by_hand, step_cases
from .next_token_probs import (
    EXACT_PROBS,
    LARGE,
    check_next_token_probs,
    check_next_token_probs_by_hand,
    prob_cases,
)
from .sections import (
    ASSIGNMENT,
    CHAPTER,
    S_CACHE,
    S_CACHE_PITFALLS,
    S_DROPOUT,
    S_EMBED,
    S_LM,
    S_TEMPERATURE,
    S_TOP_P,
)

# The exercises' modules in the order the chapter sets them (the pitfall index's rows).
MODULES = ("harness", "next_token_probs", "lm_step", "generate_greedy")

__all__ = [
    "ASSIGNMENT",
    "CHAPTER",
    "EXACT_PROBS",
    "LARGE",
    "S_CACHE",
    "S_CACHE_PITFALLS",
    "S_DROPOUT",
    "S_EMBED",
    "S_LM",
    "S_TEMPERATURE",
    "S_TOP_P",
    "check_generate_greedy",
    "check_generate_greedy_by_hand",
    "check_lm_step",
    "check_lm_step_by_hand",
    "check_next_token_probs",
    "check_next_token_probs_by_hand",
    "gen_cases",
    "prob_cases",
    "step_cases",
]

wrap_checks(globals())  # one diagnosis per submission (pieces.py)
seal(__name__)
