"""Checks for exercise ``masked_attention`` of chapter 3 (book/ch03_masks) in half
precision, the notebook's ``test_masked_attention_half`` cell: the same function on the
same cases in float16 and bfloat16 (the fill value must not overflow, fully masked rows
stay finite), judged by the stages of :mod:`.masked_attention` with half-precision
tolerances, after what only half precision shows: an overflow, float32 mixed in, NaN or
inf that float32 does not have.
"""

from __future__ import annotations

import math

import torch

from ...guard.integrity import seal
from ..diagnosis import Case, Diagnosis, Raised, run, single_threaded
from ..flow import pair_of_tensors
from .masked_attention import (
    HALF_PITFALL,
    MASKED_PITFALLS,
    fill_estimate,
    judge_masked,
)
from .masked_attention_cases import masked_cases
from .sections import S_FILL

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True

# One dtype per case of masked_cases: bfloat16 has float32's range, float16 ends at
# ±65504.
_HALF_DTYPES = (torch.float16, torch.bfloat16, torch.float16, torch.float16)


HALF_NON_FINITE = Diagnosis(
    "NaN or inf in half precision only",
    "Your code is finite in float32 but not in float16, whose range ends at ±65504 "
    "and whose smallest number is about 6e-8: a float32 constant beyond that range "
    "(-1e9, torch.finfo(torch.float32).min) becomes -inf, an epsilon such as 1e-9 "
    "becomes 0 (so 0 / (0 + eps) is NaN on a fully masked row). Use constants of the "
    "scores' own dtype: torch.finfo(scores.dtype).min and .tiny.",
    S_FILL,
)


HALF_MIXED_DTYPES = Diagnosis(
    "float32 mixed into half precision",
    "Your code works in float32 but raises in half precision: something in it is "
    "float32 whatever the inputs (mask.float(), torch.tensor(...) or torch.zeros(...) "
    "without dtype=, a float32 constant) and meets the float16 tensors, which promotes "
    "some of them and not others. Build every tensor in q.dtype (mask.to(q.dtype), "
    "dtype=scores.dtype).",
    S_FILL,
)


def _in_float32(case: Case):
    q, k, v, mask = case.make()
    return q.float(), k.float(), v.float(), mask


def _half_precision_problem(fn, case):
    """(diagnosis, what was seen) when ``fn`` overflows, mixes dtypes or goes
    non-finite on a half-precision case but not in float32, else None."""
    got = run(fn, case.make())
    if isinstance(got, Raised):
        if "overflow" in str(got.exc).lower():
            return HALF_PITFALL, (
                f"On case {case.label}: your code raised {got!r}."
                + fill_estimate(fn)[0]
            )
        if not isinstance(run(fn, _in_float32(case)), Raised):
            return HALF_MIXED_DTYPES, (
                f"On case {case.label}: your code raised "
                f"{got!r}; the same case in float32 runs."
            )
        return None
    if not pair_of_tensors(got) or _all_finite(got):
        return None
    if _all_finite(run(fn, _in_float32(case))):
        fill, bound = fill_estimate(fn)
        seen = (
            f"On case {case.label}: your output has inf or NaN in {got[0].dtype} "
            f"but not in float32.{fill}"
        )
        finite_overflow = bound is not None and -math.inf < bound < -65504
        return (HALF_PITFALL if finite_overflow else HALF_NON_FINITE), seen
    return None


@single_threaded
def check_masked_attention_half_precision(masked_attention_fn) -> None:
    """The same function in float16 and bfloat16: the fill value must not overflow,
    fully masked rows stay finite."""
    title = "masked_attention in half precision"
    cases = masked_cases(_HALF_DTYPES)
    for case in cases:
        problem = _half_precision_problem(masked_attention_fn, case)
        if problem is not None:
            diagnosis, seen = problem
            diagnosis.fail(title, seen)
    judge_masked(title, cases, masked_attention_fn, MASKED_PITFALLS, 2e-2, 2e-2)


def _all_finite(result) -> bool:
    return isinstance(result, (tuple, list)) and all(
        isinstance(t, torch.Tensor) and torch.isfinite(t).all() for t in result
    )


seal(__name__)
