"""Checks for exercise ``masked_attention`` of chapter 3 (book/ch03_masks):
``masked_attention(q, k, v, mask) -> (out, weights)`` with a bool keep-mask.

When an answer departs from the reference, the check first asks whether one of the
listed pitfalls reproduces it on every case (then it names it), and otherwise observes
it stage by stage (its shape and dtype, the weights' normalisation, their zeros, the
scale and the fill value read off the weights, the output) and reports the first stage
that departs, with the quantity measured there.
"""

from __future__ import annotations

import functools
import itertools
import math

import torch

from tformer_ref.attention import scaled_dot_product_attention
from tformer_ref.device import get_device

from ...guard.integrity import seal
from ...pictures.attach import attention_picture, pictured
from ..cases import randn
from ..ch02 import S_SATURATION
from ..delegation import check_not_delegated
from ..diagnosis import (
    Case,
    Diagnosis,
    Pitfall,
    Raised,
    passed,
    run,
    run_or_fail,
    same,
    single_threaded,
    verify_integrity,
)
from ..flow import (
    Run,
    changed_input,
    fallback,
    first_finding,
    listed_pitfall,
    pair_of_tensors,
    part_of_pair,
)
from ..measure.fills import fill_probe, implied_fill, read_fill
from ..measure.mask_readings import misreading
from ..measure.positions import axis_permutations
from ..measure.softmax import AXIS_NAMES, pooled_divisor
from .causal_mask import causal_reference
from .masked_attention_cases import masked_cases
from .padding_mask import INPUT_MODIFIED
from .reading import fail_stage, ints_text
from .sections import S_CONVENTIONS, S_FILL, S_PADDING

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True


def _variant(fill, *, where_true=False, scaled=True):
    """The reference with one step changed (a listed pitfall): the masked scores (where
    the mask is True if ``where_true``) set to ``fill``, a number, "lowest" (the dtype's
    minimum) or None (no mask); the scores not divided by √Dh unless ``scaled``."""

    def attention(q, k, v, mask):
        scores = q @ k.transpose(-2, -1)
        if scaled:
            scores = scores / math.sqrt(q.size(-1))
        if fill is not None:
            value = torch.finfo(scores.dtype).min if fill == "lowest" else fill
            scores = scores.masked_fill(mask if where_true else ~mask, value)
        weights = scores.softmax(-1)
        return weights @ v, weights

    return attention


def _masked_after_softmax(q, k, v, mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    weights = scores.softmax(-1).masked_fill(~mask, 0.0)
    return weights @ v, weights


NAN_ON_FULLY_MASKED_ROWS = Pitfall(
    "NaN on fully masked rows",
    "Filling with -inf (or with a value that becomes -inf: -1e9 in float16, float64's "
    "minimum cast to float32) turns a query whose keys are all masked into "
    "softmax(-inf, ..., -inf) = 0/0 = NaN, and the NaN spreads to everything "
    "downstream. Fill with a finite value such as torch.finfo(scores.dtype).min (then "
    "zero such rows, or leave them uniform).",
    S_FILL,
    _variant(float("-inf")),
)
MASK_INVERTED = Pitfall(
    "mask inverted",
    "You masked where the mask is True. Here True means *attend* "
    "(F.scaled_dot_product_attention's convention); nn.MultiheadAttention's is "
    "the opposite. Fill where the mask is False: masked_fill(~mask, ...).",
    S_CONVENTIONS,
    _variant("lowest", where_true=True),
)

MASKED_PITFALLS = (
    Pitfall(
        "mask applied after softmax",
        "You zeroed the masked weights *after* the softmax, so each row no longer "
        "sums to 1 (the masked keys took their share of the probability and it was "
        "thrown away). Fill the *scores* before softmax.",
        S_FILL,
        _masked_after_softmax,
    ),
    MASK_INVERTED,
    NAN_ON_FULLY_MASKED_ROWS,
    Pitfall(
        "masked with 0 instead of a large negative number",
        "You set the masked scores to 0. exp(0) = 1, so masked keys still get "
        "weight. The fill must be very negative so that exp() of it is 0.",
        S_FILL,
        _variant(0.0),
    ),
    Pitfall(
        "mask ignored",
        "Your output is what attention gives without any mask: the mask argument "
        "is not used.",
        S_PADDING,
        _variant(None),
    ),
    Pitfall(
        "no scaling",
        "Your scores are not divided by √d_k (chapter 2).",
        S_SATURATION,
        _variant("lowest", scaled=False),
    ),
)

HALF_PITFALL = Diagnosis(
    "fill value that overflows in half precision",
    "Your fill value does not fit in float16, whose range ends at ±65504: -1e9 or "
    "-1e20 becomes -inf (masked_fill refuses it with 'value cannot be converted to "
    "type Half without overflow'), and -inf makes fully masked rows NaN. Use the "
    "dtype's own limit, torch.finfo(scores.dtype).min.",
    S_FILL,
)


def _lenient(fn, index):
    """``fn``'s output (index 0) or weights (index 1), with a query that may attend to
    no key set to zeros: the exercise accepts zeros or a uniform row there (the stages
    below check that it is one of the two). The reference gives zeros there already,
    so it comes through unchanged. NaN and inf are left in place, to be diagnosed."""
    pick = part_of_pair(fn, index)

    def call(q, k, v, mask):
        part = pick(q, k, v, mask)
        if not isinstance(part, torch.Tensor) or part.dim() != 4:
            return part
        try:
            shape = (q.size(0), q.size(1), q.size(2), k.size(2))
            rows = ~mask.expand(shape).any(dim=-1, keepdim=True)  # may attend to none
            finite = torch.isfinite(part).all(dim=-1, keepdim=True)
            return part.masked_fill(rows & finite, 0.0)
        except RuntimeError:  # the wrong shape: leave it for the comparison to report
            return part

    return call


WRONG_RESULT = Diagnosis(
    "weights or output of the wrong shape or dtype",
    "masked_attention returns (out [B, H, Sq, Dh], weights [B, H, Sq, Sk]) in the "
    "dtype of q: a float32 constant or mask.float() mixed into float16 scores "
    "promotes them to float32; an extra unsqueeze or a mask broadcast the wrong way "
    "adds an axis.",
    S_FILL,
)
NAN_IN_ATTENDED_ROWS = Diagnosis(
    "NaN where a query has keys to attend",
    "Queries with at least one allowed key got NaN or inf. The usual causes: 0 × inf = "
    "NaN (an additive mask made by multiplying a 0/1 mask by -inf), inf - inf "
    "(subtracting a row maximum that is -inf), or a fill that overflows the dtype. Use "
    "masked_fill(~mask, torch.finfo(scores.dtype).min) on the scores.",
    S_FILL,
)
WRONG_AXIS = Diagnosis(
    "weights normalised over the wrong axis",
    "Each query's weights over the *keys* must sum to 1: softmax over the last axis "
    "(dim=-1) of the scores [B, H, Sq, Sk].",
    S_FILL,
)
NOT_RENORMALISED = Diagnosis(
    "weights not renormalised after masking",
    "Masked keys get weight 0, but the allowed keys' weights must still sum to 1: "
    "mask the *scores* (masked_fill before softmax), not the weights after it; or, "
    "zeroing after the softmax, divide each row by its new sum.",
    S_FILL,
)
MASKED_KEYS_WEIGHTED = Diagnosis(
    "masked keys keep some weight",
    "A masked key must get weight exactly 0, so its score must be replaced by a value "
    "whose exp() is 0 next to the real scores: masked_fill(~mask, "
    "torch.finfo(scores.dtype).min). A small fill (0, -1, -10), or adding the mask to "
    "the scores, leaves the masked keys part of the softmax.",
    S_FILL,
)
MASK_MISREAD = Diagnosis(
    "mask applied to the wrong entries",
    "The weights must be 0 exactly where the mask, broadcast to the scores [B, H, Sq, "
    "Sk], is False: the mask's last axis is the keys (a padding mask hides keys, not "
    "queries), True = attend, and the mask is used as it comes (no transpose, no "
    "reshape).",
    S_CONVENTIONS,
)
WRONG_SCALE = Diagnosis(
    "scores scaled by the wrong factor",
    "The scores are q·kᵀ divided by √Dh, the square root of the size of the vectors "
    "being dotted (chapter 2): math.sqrt(q.size(-1)).",
    S_SATURATION,
)
EMPTY_ROWS = Diagnosis(
    "fully masked queries neither zero nor a distribution",
    "A query whose keys are all masked has nothing to attend to: its weights must be "
    "finite and either all zeros (what the reference returns) or a row that sums to 1 "
    "like any other (a finite fill gives a uniform one).",
    S_FILL,
)
ALLOWED_KEYS_ZEROED = Diagnosis(
    "allowed keys zeroed",
    "Some keys the mask allows got weight exactly 0 although their scores give them a "
    "real share: something zeroes weights after the softmax (dropout left on: "
    "F.dropout defaults to training=True, the exercise has no dropout), or a second "
    "mask is applied.",
    S_FILL,
)
ROWS_ZEROED = Diagnosis(
    "whole rows of weights zeroed",
    "Only a query that may attend to no key (its mask row all False, ~mask.any(-1)) "
    "may get all-zero weights; every other query's weights over its allowed keys sum "
    "to 1. Zero exactly the rows where ~mask.any(dim=-1, keepdim=True) is True (not "
    "mask.all(-1), not rows that contain a masked key).",
    S_FILL,
)
OUTPUT_NOT_WEIGHTS_V = Diagnosis(
    "output not computed from the returned weights",
    "The output is the returned weights times the values: out = weights @ v, with the "
    "weights after masking.",
    S_FILL,
)


def _structure_stage(case: Case, args, result):
    if isinstance(result, Raised):
        q, k, _, mask = args
        return None, (
            f"your code raised {result!r} while the check ran case "
            f"{case.label} (q {list(q.shape)}, k and v {list(k.shape)}, mask "
            f"{list(mask.shape)})"
        )
    if not pair_of_tensors(result):
        kind = (
            f"a {type(result).__name__} of {len(result)}"
            if isinstance(result, (tuple, list))
            else type(result).__name__
        )
        return None, (
            f"masked_attention must return the pair (out, weights) of "
            f"tensors; on case {case.label} it returned {kind}"
        )
    name = changed_input(Run(case, args, result), ("q", "k", "v", "mask"))
    if name == "mask":
        return INPUT_MODIFIED, f"On case {case.label}: it changed its input mask."
    if name is not None:
        return INPUT_MODIFIED, (
            f"On case {case.label}: your masked_attention changed its input {name}."
        )
    return None


# float32 mixed into float64 gives float64: float32 out of float64 in was made.
_CAST_DOWN = (
    " No promotion gives float32 from float64: your code makes a float32 tensor "
    "(.float(), dtype=torch.float32, or torch.zeros/empty without dtype=) and returns "
    "it without casting back to q.dtype."
)


def _shape_stage(case: Case, q, k, result):
    out, weights = result
    want_w = [q.size(0), q.size(1), q.size(2), k.size(2)]
    want_o = [*q.shape]
    if list(out.shape) == want_w and list(weights.shape) == want_o != want_w:
        return WRONG_RESULT, (
            f"On case {case.label}: you return (weights, out): the "
            "pair is (out, weights)."
        )
    for name, got, want in (("weights", weights, want_w), ("output", out, want_o)):
        if list(got.shape) != want:
            return WRONG_RESULT, (
                f"On case {case.label}: your {name} have shape "
                f"{list(got.shape)}, expected {want}."
            )
    for name, got in (("weights", weights), ("output", out)):
        down = got.dtype == torch.float32 and q.dtype == torch.float64
        if got.dtype != q.dtype or got.device != q.device:
            return WRONG_RESULT, (
                f"On case {case.label}: your {name} are {got.dtype} on {got.device} "
                f"for {q.dtype} inputs on {q.device}." + (_CAST_DOWN if down else "")
            )
    return None


class _Seen:
    """One case's inputs and the learner's (out, weights), in float64 for measuring:
    q [B, H, Sq, Dh], k and v [B, H, Sk, Dh], keep [B, H, Sq, Sk] (the mask broadcast),
    empty [B, H, Sq] (queries with no key allowed), dots = q·kᵀ (unscaled)."""

    def __init__(self, case: Case, result):
        q, k, v, mask = case.make()
        self.label = case.label
        self.loose = q.dtype in (torch.float16, torch.bfloat16)
        self.d_head, self.heads = q.size(-1), q.size(1)
        self.q, self.k, self.v = q.double(), k.double(), v.double()
        self.mask = mask
        self.dots = self.q @ self.k.transpose(-2, -1)
        self.keep = mask.expand(self.dots.shape)
        self.empty = ~self.keep.any(-1)
        self.out, self.weights = (t.detach().double() for t in result)
        self.tol = 3e-2 if self.loose else 1e-4

    def attended(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` [B, H, Sq, ...] at the queries that have a key to attend to."""
        return t[~self.empty]


def _finite_stage(seen: _Seen):
    bad = ~(torch.isfinite(seen.weights).all(-1) & torch.isfinite(seen.out).all(-1))
    if not bad.any():
        return None
    if not (bad & ~seen.empty).any():
        return NAN_ON_FULLY_MASKED_ROWS, (
            f"On case {seen.label}, {int(bad.sum())} of the {int(seen.empty.sum())} "
            "queries that may attend to no key have NaN or inf weights or output; "
            "every other query is finite."
        )
    rows = int((bad & ~seen.empty).sum())
    return NAN_IN_ATTENDED_ROWS, (
        f"On case {seen.label}, {rows} of the {int((~seen.empty).sum())} queries that "
        f"have keys to attend to got NaN or inf (first at query "
        f"{tuple((bad & ~seen.empty).nonzero()[0].tolist())})."
    )


def _span(t: torch.Tensor) -> str:
    lo, hi = t.min().item(), t.max().item()
    return f"{lo:.4g}" if abs(hi - lo) < 5e-5 else f"{lo:.4g} to {hi:.4g}"


def _zeroed_rows_stage(seen: _Seen):
    """Queries that have keys to attend to but whose weights are all (practically)
    zero, while no other row has an allowed key zeroed: something zeroed whole rows
    after the softmax. Named by which keys those queries may see (all, or some)."""
    zero = seen.weights.abs() < 1e-7
    zeroed = zero.all(-1) & ~seen.empty
    if not zeroed.any():
        return None
    if (zero & seen.keep & ~zeroed[..., None]).any():
        # Allowed keys zeroed here and there in other rows too: zeros scattered at
        # random (dropout) also empty a short row now and then, so the rows say
        # nothing of their own; the allowed-keys stage reads the scattered zeros.
        return None
    full = seen.keep.all(-1)
    kinds = [
        ("every key visible", zeroed & full),
        ("only some keys visible", zeroed & ~full),
    ]
    kinds = [what for what, rows in kinds if rows.any()]
    first = tuple(zeroed.nonzero()[0].tolist())
    return ROWS_ZEROED, (
        f"On case {seen.label}: rows of queries with {' and with '.join(kinds)} have "
        f"all-zero weights ({int(zeroed.sum())} of the {int((~seen.empty).sum())} "
        f"queries that may attend to some key; first at {first}, whose mask row is "
        f"{ints_text(seen.keep[first].int().tolist())})."
    )


def _inverted_stage(seen: _Seen):
    """Queries that may attend to some keys and not others: all their weight on the
    keys the mask marks False, none on those it marks True (whatever the fill)."""
    mixed = seen.keep.any(-1) & ~seen.keep.all(-1)
    if not mixed.any():
        return None
    w, keep = seen.weights[mixed], seen.keep[mixed]
    on_allowed, on_masked = (w * keep).abs().sum(-1), (w * ~keep).abs().sum(-1)
    if bool((on_allowed < seen.tol).all()) and bool((on_masked > seen.tol).any()):
        return MASK_INVERTED, (
            f"On case {seen.label}, the {int(mixed.sum())} queries that may attend to "
            "some keys and not others put no weight on the keys the mask marks True, "
            "only on those it marks False."
        )
    return None


def _axis_stage(seen: _Seen):
    sums = seen.attended(seen.weights.sum(-1))
    if bool(((sums - 1).abs() < seen.tol).all()):
        return None
    for axes in _AXIS_SETS:
        if all(seen.weights.size(a) > 1 for a in axes) and bool(
            ((seen.weights.sum(axes) - 1).abs() < seen.tol).all()
        ):
            names = ", ".join(f"{a} ({AXIS_NAMES[a]})" for a in sorted(axes))
            return WRONG_AXIS, (
                f"On case {seen.label}: your weights sum to 1 over axis {names}, not "
                "over the keys (axis 3) alone: a query's weights over the keys sum to "
                f"{_span(sums)}."
            )
    return None


# Where else a softmax or a division may have normalised: one axis, or several at once
# (the whole tensor, a whole head's [Sq, Sk] map).
_AXIS_SETS = tuple(
    axes
    for n in (1, 2, 3, 4)
    for axes in itertools.combinations((2, 1, 0, 3), n)
    if axes != (3,)
)


def _pattern_stage(seen: _Seen):
    """The masked keys must get no weight. (Allowed keys may underflow to 0 when the
    scores are scaled wrong: the value stage measures that.)"""
    kept, rows = seen.weights > 1e-7, ~seen.empty  # 1e-7: practically zero
    if not (kept & ~seen.keep)[rows].any():
        return None
    if kept[rows].all():
        return _masked_weight_stage(seen)
    what = misreading(kept, seen.mask, rows)
    if what is not None:
        return MASK_MISREAD, f"On case {seen.label}: {what}."
    wrong = (kept != seen.keep) & rows[..., None]
    at = tuple(wrong.nonzero()[0].tolist())
    weight, allowed = seen.weights[at].item(), bool(seen.keep[at])
    return None, (
        f"on case {seen.label} your weights differ from the mask's pattern "
        f"at {int(wrong.sum())} entries; first at {at} (query {at[2]}, key "
        f"{at[3]}): weight {weight:.3g} where the mask says "
        f"{'attend' if allowed else 'hidden'}"
    )


def _scale_words(seen: _Seen, c: float) -> str:
    dh, h = seen.d_head, seen.heads
    words = f"your scores are divided by {c:.4g}; expected √Dh = √{dh} = {dh**0.5:.4g}"
    named = {
        1.0: "not scaled at all",
        float(dh): "Dh, not √Dh",
        (h * dh) ** 0.5: "√(H·Dh) = √d_model, not √Dh",
    }
    for value, name in named.items():
        if abs(c / value - 1) < 2e-2 and abs(value / dh**0.5 - 1) > 2e-2:
            words += f" ({name})"
    return words


def _masked_weight_stage(seen: _Seen):
    """Masked keys got weight: measure what their scores were."""
    fit = pooled_divisor(seen.weights, seen.dots, seen.keep)
    c = fit[0] if fit is not None and fit[1] < 10 * seen.tol else seen.d_head**0.5
    (fill, fill_spread), (shift, shift_spread) = implied_fill(
        seen.weights, seen.dots / c, seen.keep
    )
    right = abs(c / seen.d_head**0.5 - 1) < 2e-2
    scale = "" if right else f" Also {_scale_words(seen, c)}."
    limit = 0.1 if seen.loose else 1e-2
    if shift_spread < limit and abs(shift) < limit:
        what = (
            "the masked keys get the weight they would get with no mask at all: "
            "the mask is not applied to the scores"
        )
    elif shift_spread <= fill_spread and shift_spread < limit:
        what = (
            f"the masked keys' scores are their true scores shifted by {shift:.4g} "
            "(a mask added to the scores instead of a fill)"
        )
    elif fill_spread < limit:
        what = (
            f"the masked keys' scores are all {fill:.4g} (your fill value): exp of "
            "it is not 0 next to the real scores"
        )
    else:
        return None, (
            f"on case {seen.label} the masked keys get nonzero weight (up to "
            f"{(seen.weights * ~seen.keep).max().item():.3g}), and their "
            "scores fit neither a constant fill nor a shift"
        )
    return MASKED_KEYS_WEIGHTED, f"On case {seen.label}: {what}.{scale}"


def _zeroed_allowed_keys(seen: _Seen, c: float) -> str | None:
    """What was seen when allowed keys that softmax(q·kᵀ / c) gives a real share of
    the weight got exactly 0 (dropout left on, an extra mask)."""
    allowed = seen.keep & ~seen.empty[..., None]
    scores = (seen.dots / c).masked_fill(~seen.keep, -math.inf)
    expected = scores.softmax(-1).nan_to_num(0.0)
    zeroed = allowed & (seen.weights == 0) & (expected > 1e-4)
    if not zeroed.any():
        return None
    share = 100 * zeroed.sum().item() / allowed.sum().item()
    return (
        f"your weights are exactly 0 at {int(zeroed.sum())} of the "
        f"{int(allowed.sum())} allowed keys ({share:.0f}%), where the softmax "
        f"gives them up to {expected[zeroed].max().item():.3g}"
    )


def _value_stage(seen: _Seen):
    """Masked keys get nothing: the allowed keys' weights must be softmax(q·kᵀ / √Dh)
    over them. Fit the scale c of softmax(q·kᵀ / c) to the weights; when they are not
    a softmax of the scores at all (the fit is poor), say so."""
    sums = seen.attended(seen.weights.sum(-1))
    fit = pooled_divisor(seen.weights, seen.dots, seen.keep & ~seen.empty[..., None])
    softmax_like = fit is not None and fit[1] < (5e-2 if seen.loose else 1e-2)
    tight = 5e-2 if seen.loose else 1e-3
    right = softmax_like and abs(fit[0] / seen.d_head**0.5 - 1) < tight
    scale = "" if right or not softmax_like else f" Also {_scale_words(seen, fit[0])}."
    if softmax_like:
        zeroed = _zeroed_allowed_keys(seen, fit[0])
        if zeroed is not None:
            return ALLOWED_KEYS_ZEROED, f"On case {seen.label}: {zeroed}.{scale}"
    if not bool(((sums - 1).abs() < seen.tol).all()):
        if not softmax_like:
            return None, (
                f"on case {seen.label} your weights are 0 on the masked "
                f"keys, but a query's weights sum to {_span(sums)}, not 1, "
                "and are not in the ratios of a softmax of the scores"
            )
        return NOT_RENORMALISED, (
            f"On case {seen.label}: your weights are 0 on the masked keys and in the "
            "right ratios, but a query's weights on the allowed keys sum to "
            f"{_span(sums)}, not 1.{scale}"
        )
    if softmax_like and not right:
        return WRONG_SCALE, f"On case {seen.label}: {_scale_words(seen, fit[0])}."
    return None


def _empty_rows_stage(seen: _Seen):
    if not seen.empty.any():
        return None
    rows = seen.weights[seen.empty]
    zero = (rows.abs() < seen.tol).all(-1)
    distribution = ((rows.sum(-1) - 1).abs() < seen.tol) & (rows > -seen.tol).all(-1)
    if bool((zero | distribution).all()):
        return None
    bad = rows[~(zero | distribution)][0]
    return EMPTY_ROWS, (
        f"On case {seen.label}: a query that may attend to no key has "
        f"the weights {[round(x, 3) for x in bad.tolist()]} (sum "
        f"{bad.sum().item():.3g}), neither zeros nor summing to 1."
    )


def _output_candidates(seen: _Seen):
    unmasked = (seen.dots / seen.d_head**0.5).softmax(-1)
    yield "the weights before masking @ v", unmasked @ seen.v
    yield "weights @ k instead of weights @ v", seen.weights @ seen.k
    for order, moved in axis_permutations(seen.weights @ seen.v, seen.out.shape):
        axes = ", ".join(AXIS_NAMES[i] if i < 3 else "features" for i in order)
        yield f"weights @ v with its axes permuted to [{axes}] (.permute{order})", moved


def _output_stage(seen: _Seen):
    rows = ~seen.empty
    want = (seen.weights @ seen.v)[rows]
    close = functools.partial(torch.allclose, atol=seen.tol, rtol=seen.tol)
    if close(seen.out[rows], want):
        return None
    for what, candidate in _output_candidates(seen):
        if close(seen.out[rows], candidate[rows]):
            return OUTPUT_NOT_WEIGHTS_V, (
                f"On case {seen.label}: your output is {what}, not your weights @ v."
            )
    gap = (seen.out[rows] - want).abs().max().item()
    return None, (
        f"on case {seen.label} your weights are right but your output is not "
        f"weights @ v (largest difference {gap:.3g})"
    )


_MEASURING_STAGES = (
    _finite_stage,
    _inverted_stage,
    _zeroed_rows_stage,
    _axis_stage,
    _pattern_stage,
    _value_stage,
    _empty_rows_stage,
    _output_stage,
)


def _attention_problem(case: Case, fn, matched: bool, runs: list):
    """(Diagnosis or None, what was seen) for the first stage of ``fn`` on ``case``
    that departs, or None when every stage is right. On a case that ``matched`` the
    reference within tolerance only what the comparison cannot see is checked: the
    inputs left as they were, and the fully masked queries (which it zeroes). The
    call's result is added to ``runs``."""
    args = case.make()
    result = run(fn, args)
    runs.append(result)
    problem = _structure_stage(case, args, result)
    if problem is None:
        problem = _shape_stage(case, args[0], args[1], result)
    if problem is not None:
        return problem
    stages = (_empty_rows_stage,) if matched else _MEASURING_STAGES
    return first_finding(stages, _Seen(case, result))


def _case_matches(fn, case: Case, atol, rtol) -> bool:
    """Weights and output match the reference within tolerance (fully masked queries
    compared leniently)."""
    return all(
        same(
            run(_lenient(fn, i), case.make()),
            run(_lenient(scaled_dot_product_attention, i), case.make()),
            atol,
            rtol,
        )
        for i in (1, 0)
    )


def judge_masked(title, cases, fn, pitfalls, atol, rtol) -> None:
    """Fail naming the first stage that departs (a listed pitfall only when it
    reproduces both outputs on every case); pass the weights, then the output, when
    every case is right."""
    verify_integrity()
    matched = [_case_matches(fn, case, atol, rtol) for case in cases]
    runs = []
    problems = [
        p
        for case, ok in zip(cases, matched)
        if (p := _attention_problem(case, fn, ok, runs))
    ]
    if not problems and all(matched):
        for part in ("weights", "output"):
            passed(f"{title} ({part})", f"matches the reference on {len(cases)} cases")
        return
    picture = functools.partial(
        attention_picture, cases, runs, scaled_dot_product_attention, 3, atol, rtol
    )
    with pictured(picture):
        pitfall = _reproduced_pair(fn, cases, pitfalls, atol, rtol)
        if pitfall is not None:
            pitfall.fail(title, _fill_note(pitfall, fn).strip())
        if problems:
            diagnosis, seen = problems[0]
            fail_stage(title, diagnosis, seen + _fill_note(diagnosis, fn), S_FILL)
        fallback(
            title,
            "your weights pass every stage this check measures, but differ from the "
            "reference beyond tolerance",
            S_FILL,
            advice="",
        )


def _fill_note(diagnosis, fn) -> str:
    """The fill value measured, for the mistakes that are about it."""
    if diagnosis in (NAN_ON_FULLY_MASKED_ROWS, HALF_PITFALL, MASKED_PITFALLS[3]):
        return fill_estimate(fn)[0]
    return ""


def _reproduced_pair(fn, cases, pitfalls, atol, rtol):
    """The first listed pitfall that reproduces the learner's weights and output on
    every case, or None. The learner's code runs again for each comparison, as the
    variant does (an answer that draws random numbers draws them in the same order)."""
    theirs = [run(fn, c.make()) for c in cases]
    if not all(pair_of_tensors(t) for t in theirs):
        return None
    for pitfall in pitfalls:
        if all(
            listed_pitfall(
                [pitfall],
                [c],
                [run(_lenient(fn, i), c.make())],
                atol,
                rtol,
                functools.partial(_lenient, index=i),
            )
            for c in cases
            for i in (1, 0)
        ):
            return pitfall
    return None


@single_threaded
def check_masked_attention(masked_attention_fn) -> None:
    """``masked_attention_fn(q [B, H, Sq, Dh], k, v [B, H, Sk, Dh], mask bool
    broadcastable to [B, H, Sq, Sk]) -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])``,
    True = may attend, out = weights @ v in q's dtype, inputs left unmodified. A query
    with no key to attend to must give finite values: zero weights (as the reference)
    or a row summing to 1 (a finite fill gives a uniform one) are both accepted."""
    title, cases = "masked_attention", masked_cases()
    judge_masked(title, cases, masked_attention_fn, MASKED_PITFALLS, 1e-5, 1e-4)


def fill_estimate(fn):
    """(sentence, upper bound) for the learner's fill value, measured in float32 on the
    probe of :mod:`..measure.fills`: the fill is at most the bound; ('', None) when it
    cannot be measured."""
    got = run(fn, fill_probe(get_device()))
    return read_fill(got[1]) if pair_of_tensors(got) else ("", None)


@single_threaded
def check_masked_attention_by_hand(masked_attention_fn) -> None:
    """Hidden test: no call to PyTorch's or the reference's attention."""
    q, k, v = (randn(2, 2, 3, 4, seed=s) for s in (1, 2, 3))
    mask = causal_reference(3)
    # An answer that raises fails here, saying where, rather than inside the recorder.
    run_or_fail(
        "masked_attention",
        masked_attention_fn,
        (q, k, v, mask),
        "masked_attention(q [2, 2, 3, 4], k, v, causal mask [1, 1, 3, 3])",
    )
    check_not_delegated(
        "masked_attention",
        lambda: masked_attention_fn(q, k, v, mask),
        forbidden=[
            "scaled_dot_product_attention",
            "multi_head_attention_forward",
            "tformer_ref",
        ],
    )


seal(__name__)
