"""The large-scores stage of exercise ``attention`` of chapter 2 (book/ch02_attention),
run by ``check_attention`` once the usual cases pass: q and k scaled up until exp of
the scores overflows float32, so that a softmax written without its max shift, or one
that clamps the scores, shows.
"""

from __future__ import annotations

import math

import torch

from tformer_ref.attention import scaled_dot_product_attention

from ...guard.integrity import seal
from ..cases import randn
from ..diagnosis import Diagnosis, fail, passed, run
from ..flow import fail_if_raised, fallback, largest_difference
from ..measure.sizes import named
from ..measure.softmax import clamp_bound, overflowed
from .sections import S_STEPS

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True

OVERFLOW = Diagnosis(
    "softmax overflows on large scores",
    "exp(x) is inf in float32 once x passes log(torch.finfo(torch.float32).max), and "
    "inf / inf is NaN. Softmax does not change when one number is subtracted from a "
    "whole row: subtract each row's maximum before exp (scores - scores.amax(dim=-1, "
    "keepdim=True)), or call softmax, which gives the finite answer.",
    S_STEPS,
)
CLAMPED = Diagnosis(
    "scores clamped",
    "A clamp keeps exp from overflowing, but it changes which key wins: every score "
    "above the bound counts as the bound. Subtract each row's maximum instead (softmax "
    "does not change when one number is subtracted from a whole row), or call softmax.",
    S_STEPS,
)


# Scores q·kᵀ/√Dh up to about ±150: exp overflows float32 above about 88.7.
LARGE = 8.0


def judge_large_scores(fn) -> None:
    """The usual cases keep the scores small; here q and k are scaled by LARGE, so a
    softmax written without its max shift, or one that clamps the scores, shows."""
    title = "attention (large scores)"
    sizes = named(B=2, H=3, Sq=4, Sk=5, Dh=8)
    q, k, v = (randn(2, 3, n, 8, seed=90 + i) for i, n in enumerate((4, 5, 5)))
    q, k = q * LARGE, k * LARGE
    scores = q @ k.mT / math.sqrt(8)
    label = f"q, k, v [{sizes}], torch.float32, q and k scaled by {LARGE:g}"
    label += f" (the scores q·kᵀ/√Dh reach {scores.abs().max().item():.0f})"
    result = run(fn, (q, k, v))
    fail_if_raised(title, result, f"on case {label}", S_STEPS)
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        fail(title, f"on case {label} attention returned no pair (out, weights).")
    w, want = result[1], scaled_dot_product_attention(q, k, v)[1]
    if overflowed(w, scores):
        rows = int((~torch.isfinite(w.detach()).all(-1)).sum())
        OVERFLOW.fail(
            title,
            f"On case {label} your weights are NaN or inf in {rows} of "
            f"{w.shape[:-1].numel()} query rows: exactly the rows whose largest score "
            "is above log(torch.finfo(torch.float32).max), where exp overflows.",
        )
    if not torch.allclose(w.detach(), want, atol=1e-5, rtol=1e-4, equal_nan=False):
        bound = clamp_bound(w.detach(), scores)
        if bound is not None:
            CLAMPED.fail(
                title,
                f"On case {label} your weights are the softmax of the scores clamped "
                f"at {bound:g}: every score above {bound:g} counts as {bound:g}.",
            )
        fallback(
            title,
            f"on case {label} your weights differ from the softmax of the scores by "
            f"up to {largest_difference(w, want)[0]:.3g}, though they matched on the "
            "usual cases, whose scores stay small: something changes the scores only "
            "when they are large (a clamp?)",
            S_STEPS,
            advice="",
        )
    passed(title, f"match the reference with scores up to {scores.abs().max():.0f}")


seal(__name__)
