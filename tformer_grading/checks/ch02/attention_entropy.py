"""Checks for exercise ``attention_entropy`` of chapter 2 (book/ch02_attention):
``attention_entropy(weights [..., Sq, Sk]) -> [..., Sq]``, −Σ w·ln w over the keys.

A listed pitfall is named only when its variant reproduces every output; otherwise the
quantity that is off is measured: a factor (a logarithm's base), an offset, the size of
an ε, the rows that came out NaN.
"""

from __future__ import annotations

import math

import torch

from tformer_ref.device import get_device

from ...guard.integrity import seal
from ..cases import randn
from ..diagnosis import (
    Case,
    Diagnosis,
    Pitfall,
    fail,
    passed,
    single_threaded,
    verify_integrity,
)
from ..flow import (
    changed_input,
    fail_if_raised,
    fallback,
    largest_difference,
    listed_pitfall,
    matches,
    run_cases,
)
from ..measure.formulas import number, numbers
from .attention import MUTATES_INPUT
from .sections import S_ENTROPY

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True


def _entropy(weights):
    return torch.special.entr(weights).sum(dim=-1)


ENTROPY_PITFALLS = (
    Pitfall(
        "0·log 0 gives NaN",
        "Where a weight is exactly 0, w·log(w) is 0·(−inf) = NaN in floating "
        "point, but its limit is 0. Use torch.xlogy(w, w), torch.special.entr(w), "
        "or mask the zeros out before summing.",
        S_ENTROPY,
        lambda w: -(w * w.log()).sum(dim=-1),
    ),
    Pitfall(
        "log base 2",
        "Your entropy is in bits (log2); the exercise asks for nats (natural log), "
        "like the lesson.",
        S_ENTROPY,
        lambda w: torch.special.entr(w).sum(dim=-1) / math.log(2),
    ),
    Pitfall(
        "missing minus sign",
        "Entropy is −Σ w·log w, which is ≥ 0: log w ≤ 0 for weights in [0, 1].",
        S_ENTROPY,
        lambda w: -torch.special.entr(w).sum(dim=-1),
    ),
    Pitfall(
        "sum over the wrong axis",
        "You summed over the queries (dim=-2). The distribution of one query is "
        "its row: sum over the keys, the last axis.",
        S_ENTROPY,
        lambda w: torch.special.entr(w).sum(dim=-2),
    ),
    Pitfall(
        "mean instead of sum",
        "You averaged w·log w over the keys; entropy is their sum.",
        S_ENTROPY,
        lambda w: torch.special.entr(w).mean(dim=-1),
    ),
)

NAN_AT_ZEROS = Diagnosis(
    "NaN where a weight is 0",
    "0·ln 0 must count as 0 (its limit), but w * w.log() computes 0·(−inf) = NaN. Use "
    "torch.xlogy(w, w) or torch.special.entr(w), or mask the zeros before summing.",
    S_ENTROPY,
)
ENTROPY_FACTOR = Diagnosis(
    "entropy off by a constant factor",
    "The entropy is −Σ w·ln w: natural logarithm (nats), a minus sign so that it is "
    "≥ 0, and nothing else multiplying it.",
    S_ENTROPY,
)
ENTROPY_DIVIDED = Diagnosis(
    "entropy divided by a size",
    "The entropy of a row is the sum of −w·ln w over its keys, not their mean, and not "
    "normalised by ln Sk.",
    S_ENTROPY,
)
ENTROPY_EPS = Diagnosis(
    "ε in the logarithm biases the entropy",
    "Adding ε (or clamping at ε) to dodge log 0 changes every term: the bias grows "
    "with ε and with the number of keys. torch.xlogy(w, w) or torch.special.entr(w) "
    "give 0·ln 0 = 0 exactly; a clamp at ε ≤ 1e-12 is harmless.",
    S_ENTROPY,
)
ENTROPY_OFFSET = Diagnosis(
    "entropy shifted by a constant",
    "The entropy is −Σ w·ln w alone: 0 for a one-hot row, ln Sk for a uniform one; "
    "nothing is added or subtracted.",
    S_ENTROPY,
)
ENTROPY_PRECISION = Diagnosis(
    "entropy computed in low precision",
    "Compute in the dtype of the weights: half or bfloat16 keep only 3 or 2 "
    "significant digits.",
    S_ENTROPY,
)
ZERO_ROWS = Diagnosis(
    "0·ln 0 handled wrongly",
    "A weight of exactly 0 contributes 0 to the entropy (the limit of w·ln w) and the "
    "rest of its row counts as usual: zero that one term, not the whole row.",
    S_ENTROPY,
)
ENTROPY_AXES = Diagnosis(
    "entropy reduced over the wrong axes",
    "weights [..., Sq, Sk] gives one entropy per query: sum over the keys (the last "
    "axis) only, without keepdim, shape [..., Sq].",
    S_ENTROPY,
)


def _softmax_weights(shape, seed, dtype=torch.float32, temperature=1.0):
    return lambda: ((randn(*shape, seed=seed, dtype=dtype) * temperature).softmax(-1),)


def _causal_weights():
    scores = randn(2, 3, 5, 5, seed=41)
    keep = torch.ones(5, 5, dtype=torch.bool, device=scores.device).tril()
    # exact zeros above the diagonal
    return (scores.masked_fill(~keep, float("-inf")).softmax(-1),)


def _one_hot_weights():
    return (torch.eye(4, device=get_device())[None, None].repeat(2, 1, 1, 1),)


def _entropy_cases():
    # Sq != Sk where the axis matters; 2-D and 3-D inputs because the exercise says
    # [..., Sq, Sk]: any number of leading axes.
    return [
        Case("weights [2, 4, 5, 7] from softmax", _softmax_weights((2, 4, 5, 7), 40)),
        Case(
            "causal weights [2, 3, 5, 5] (exact zeros above the diagonal)",
            _causal_weights,
        ),
        Case("one-hot weights [2, 1, 4, 4] (entropy 0)", _one_hot_weights),
        Case(
            "weights [1, 2, 3, 6] float64",
            _softmax_weights((1, 2, 3, 6), 42, torch.float64, 3.0),
        ),
        Case("weights [3, 4, 6] (3-D)", _softmax_weights((3, 4, 6), 43)),
        Case("weights [5, 3] (2-D: [Sq, Sk])", _softmax_weights((5, 3), 44)),
        # Rows long enough for an ε inside the log to show: its bias is about Sk·ε
        # (4e-3 at ε = 1e-6), the tolerance 1e-5 + 1e-4·ln Sk (8.4e-4).
        Case("weights [1, 2, 4096] (long rows)", _softmax_weights((1, 2, 4096), 45)),
    ]


def _call_entropy(title: str, fn, cases) -> list:
    """[(weights, result)] per case; fails on an exception, a non-tensor, or weights
    changed in place."""
    for done in (runs := run_cases(fn, cases)):
        case, got = done.case, done.result
        fail_if_raised(title, got, f"while the check ran case {case.label}")
        if changed_input(done, ["weights"]):
            MUTATES_INPUT.fail(
                title,
                f"On case {case.label} your function changed the weights it was given.",
            )
        if type(got) not in (torch.Tensor, torch.nn.Parameter):
            fail(
                title,
                f"on case {case.label} expected a plain torch.Tensor, got "
                f"{type(got).__name__}.",
                S_ENTROPY,
            )
    return [(done.case.make()[0], done.result) for done in runs]


# (what the learner did, dims reduced (None: all), keepdim)
REDUCTIONS = (
    ("over the keys, with keepdim=True (shape [..., Sq, 1])", (-1,), True),
    ("over the queries (axis -2) instead of the keys", (-2,), False),
    ("over the queries and the keys: one number per head/sequence", (-2, -1), False),
    ("to a single number over every axis", None, False),
    ("over nothing: one term per weight, no sum", (), False),
)


def _reduced_shape(shape, dims, keepdim) -> list:
    n = len(shape)
    dims = set(range(n)) if dims is None else {d % n for d in dims}
    return [
        1 if i in dims else s for i, s in enumerate(shape) if keepdim or i not in dims
    ]


def _check_entropy_dtypes(title: str, calls, cases) -> None:
    for case, (w, g) in zip(cases, calls):
        if g.dtype != w.dtype or g.device != w.device:
            fail(
                title,
                f"on case {case.label} expected a {w.dtype} tensor on "
                f"{w.device} (like the weights), got {g.dtype} on {g.device}.",
                S_ENTROPY,
            )


def _check_entropy_shapes(title: str, calls, cases) -> None:
    """Fail when the entropy's shape, dtype or device is not the weights' [..., Sq]."""
    if all(list(g.shape) == list(w.shape[:-1]) for w, g in calls):
        _check_entropy_dtypes(title, calls, cases)
        return
    for text, dims, keepdim in REDUCTIONS:
        if all(
            list(g.shape) == _reduced_shape(w.shape, dims, keepdim) for w, g in calls
        ):
            ENTROPY_AXES.fail(
                title,
                f"Your entropy is reduced {text}: on case "
                f"{cases[0].label} it has shape "
                f"{list(calls[0][1].shape)}, expected "
                f"{list(calls[0][0].shape[:-1])}.",
            )
    case, (w, g) = next(
        (c, wg)
        for c, wg in zip(cases, calls)
        if list(wg[1].shape) != list(wg[0].shape[:-1])
    )
    _fail_shape_of_one_case(title, case, w, g)


def _fail_shape_of_one_case(title: str, case, w, g) -> None:
    """The entropy g has the wrong shape on this case of weights w: say how."""
    if list(g.shape) == [n for n in w.shape[:-1] if n != 1]:
        ENTROPY_AXES.fail(
            title,
            f"On case {case.label} your entropy has shape "
            f"{list(g.shape)}, expected {list(w.shape[:-1])}: the "
            "axes of size 1 are gone (a squeeze()?).",
        )
    removed = [
        d
        for d in range(w.dim())
        for keep in (False, True)
        if list(g.shape) == _reduced_shape(w.shape, (d,), keep)
    ]
    if removed:
        ENTROPY_AXES.fail(
            title,
            f"On case {case.label} your entropy has shape "
            f"{list(g.shape)}: the weights' shape {list(w.shape)} "
            f"reduced over axis {removed[0]} (of {w.dim()}), not "
            f"over the last one, {w.dim() - 1}: a hard-coded dim?",
        )
    fail(
        title,
        f"on case {case.label} your entropy has shape {list(g.shape)}, "
        f"expected {list(w.shape[:-1])} = [..., Sq]: one entropy per query.",
        S_ENTROPY,
    )


def _nan_finding(calls, refs):
    """(Diagnosis, detail) when the entropy is NaN/inf on exactly the rows that hold a
    zero weight. When the other rows are wrong too, what is wrong with them is measured
    and reported first."""
    rows, kind = 0, "NaN"
    for (w, g), r in zip(calls, refs):
        bad = ~torch.isfinite(g.detach())
        if not torch.equal(bad, (w == 0).any(-1)):
            return None
        rows += int(bad.sum())
        kind = "NaN" if torch.isnan(g).any() else "inf" if bad.any() else kind
    if not rows:
        return None
    nan = (
        f"{kind} on exactly the {rows} rows that have a weight equal to 0 (0·ln 0 "
        "computed as 0·(−inf))."
    )
    finite = [
        ((w, g[~(w == 0).any(-1)]), r[~(w == 0).any(-1)])
        for (w, g), r in zip(calls, refs)
    ]
    if all(torch.allclose(g.detach(), r, atol=1e-5, rtol=1e-4) for (_, g), r in finite):
        return NAN_AT_ZEROS, f"Your entropy is {nan} Every other row is right."
    ratios = _ratios([c for c, _ in finite], [r for _, r in finite])
    if ratios:
        diagnosis, detail = _ratio_finding(ratios)
        detail = detail[0].lower() + detail[1:]
        return diagnosis, (
            f"On the rows without a zero weight, {detail} Besides, your "
            f"entropy is {nan}"
        )
    return None


def _zero_rows_finding(calls, refs):
    """(Diagnosis, detail) when every row without a zero weight is right and some rows
    with one are wrong: the handling of 0·ln 0 is the mistake."""
    wrong_rows, example = 0, None
    for (w, g), r in zip(calls, refs):
        g64, r64 = g.detach().double(), r.double()
        ok = (g64 - r64).abs() <= 1e-5 + 1e-4 * r64.abs()
        zero_rows = (w == 0).any(-1)
        if not ok[~zero_rows].all():
            return None
        bad = ~ok & zero_rows
        wrong_rows += int(bad.sum())
        if example is None and bad.any():
            idx = tuple(bad.nonzero()[0].tolist())
            example = (
                f"on weights {list(w.shape)} row {idx}: yours "
                f"{g64[idx].item():.6g}, expected {r64[idx].item():.6g}"
            )
    if not wrong_rows:
        return None
    return ZERO_ROWS, (
        f"Your entropy is right on every row without a zero weight and "
        f"wrong on {wrong_rows} rows that have one ({example})."
    )


def _ratios(calls, refs):
    """The constant got/ref per case, or None when some case's ratio is not constant
    or every one is 1 within 1e-3 (what differs then is no factor: an ε, an offset)."""
    out = []
    for (w, g), r in zip(calls, refs):
        g64, r64 = g.detach().double(), r.double()
        rows = r64.abs() > 1e-3
        if not rows.any():
            if not torch.allclose(g64, r64, atol=1e-5):
                return None
            continue
        ratio = g64[rows] / r64[rows]
        c = ratio.mean().item()
        if (ratio - c).abs().max() > 1e-3 * abs(c) or not torch.allclose(
            g64, c * r64, atol=1e-5, rtol=1e-4
        ):
            return None
        out.append((c, w))
    if all(math.isclose(c, 1, rel_tol=1e-3) for c, _ in out):
        return None
    return out


def _ratio_finding(ratios):
    """(Diagnosis, detail) for an entropy that is a constant times the right one."""
    cs = [c for c, _ in ratios]
    if all(math.isclose(c, cs[0], rel_tol=1e-3) for c in cs):
        return ENTROPY_FACTOR, _factor_detail(cs[0])
    sizes = [
        {"Sk": w.size(-1), "Sq": w.size(-2), "ln Sk": math.log(w.size(-1))}
        for _, w in ratios
    ]
    divisors = [1 / c for c in cs]
    for name in ("Sk", "Sq", "ln Sk"):
        if all(math.isclose(d, s[name], rel_tol=1e-3) for d, s in zip(divisors, sizes)):
            what = {
                "Sk": "the mean over the keys instead of their sum",
                "Sq": "a division by the number of queries",
                "ln Sk": "the entropy normalised by ln Sk, its largest value",
            }[name]
            return ENTROPY_DIVIDED, (
                f"Your entropy is the right one divided by "
                f"{numbers(divisors)} on the cases, which is "
                f"{name}: {what}."
            )
    return ENTROPY_FACTOR, (
        f"Your entropy is the right one times {numbers(cs)} on the "
        "cases: a factor that changes with the input's size."
    )


def _factor_detail(c: float) -> str:
    text = f"Your entropy is {number(c)} × −Σ w·ln w on every case."
    if c < 0:
        text += " It is negative: the minus sign is missing (or doubled)."
    if not math.isclose(abs(c), 1, rel_tol=1e-3):
        base = math.exp(1 / abs(c))
        text += (
            f" That factor is what a logarithm in base {number(base)} gives "
            "(log2: 1.443, log10: 0.4343); expected the natural log, base e."
        )
    return text


def _offset_finding(calls, refs):
    """(Diagnosis, detail) when the entropy is the right one plus a constant per
    case."""
    offsets = []
    for (w, g), r in zip(calls, refs):
        diff = g.detach().double() - r.double()
        c = diff.mean().item()
        if (diff - c).abs().max() > 1e-5 + 1e-4 * abs(c):
            return None
        offsets.append((c, w.size(-1)))
    if all(abs(c) <= 1e-5 for c, _ in offsets):
        return None
    text = (
        f"Your entropy is the right one plus {numbers(c for c, _ in offsets)} on "
        "the cases"
    )
    if all(math.isclose(-c, math.log(sk), rel_tol=1e-3) for c, sk in offsets):
        text += ", which is −ln Sk: the entropy minus that of a uniform row"
    return ENTROPY_OFFSET, text + "."


def _close_finding(calls, refs):
    """(Diagnosis, detail) when the entropy is everywhere within 1 % of the right one,
    but not within the tolerance: a precision problem, measured."""
    worst = 0.0
    for (_, g), r in zip(calls, refs):
        diff = (g.detach().double() - r.double()).abs()
        if not torch.isfinite(diff).all() or (diff > 1e-2 * (r.abs() + 1e-3)).any():
            return None
        worst = max(worst, diff.max().item())
    return ENTROPY_PRECISION, (
        f"Your entropy is everywhere within {worst:.2g} of the "
        "right one, but not within the tolerance (1e-5 + "
        "1e-4·|H|): a computation in a lower precision (half, "
        "bfloat16)?"
    )


EPS_MODELS = (
    ("−Σ w·ln(w + ε)", lambda w, e: -(w * (w + e).log()).sum(-1)),
    ("−Σ w·ln(max(w, ε)), a clamp", lambda w, e: -(w * w.clamp_min(e).log()).sum(-1)),
    ("−Σ (w + ε)·ln(w + ε)", lambda w, e: -((w + e) * (w + e).log()).sum(-1)),
)


def _eps_error(model, calls, log_eps: float) -> float:
    """Largest |learner − model(ε)| over the cases, ε = 10**log_eps."""
    return max(
        (g.detach().double() - model(w.double(), 10.0**log_eps)).abs().max().item()
        for w, g in calls
    )


def _fit_eps(model, calls) -> tuple:
    """(log10 ε, error) minimising the model's largest error: a grid, then refined."""
    grid = [x / 10 for x in range(-160, 1)]
    best = min(grid, key=lambda x: _eps_error(model, calls, x))
    lo, hi = best - 0.1, best + 0.1
    for _ in range(30):  # ternary search: the error is unimodal near its minimum
        a, b = lo + (hi - lo) / 3, hi - (hi - lo) / 3
        if _eps_error(model, calls, a) < _eps_error(model, calls, b):
            hi = b
        else:
            lo = a
    x = (lo + hi) / 2
    return x, _eps_error(model, calls, x)


def _eps_finding(calls, refs):
    """(Diagnosis, detail) when the entropy is −Σ w ln w biased by an ε of a measured
    size."""
    bias = max(
        (g.detach().double() - r.double()).abs().max().item()
        for (_, g), r in zip(calls, refs)
    )
    for name, model in EPS_MODELS:
        log_eps, err = _fit_eps(model, calls)
        if err <= max(2e-6, 1e-2 * bias):
            return ENTROPY_EPS, (
                f"Your entropy matches {name} with ε ≈ "
                f"{10**log_eps:.2g}: it is off by up to {bias:.3g} "
                "from −Σ w·ln w."
            )
    return None


@single_threaded
def check_attention_entropy(entropy_fn) -> None:
    """``entropy_fn(weights [..., Sq, Sk]) -> [..., Sq]``: −Σ w·ln w over the keys, in
    nats, 0·ln 0 = 0."""
    verify_integrity()
    title, cases = "attention_entropy", _entropy_cases()
    calls = _call_entropy(title, entropy_fn, cases)
    refs = [_entropy(w) for w, _ in calls]
    if matches([g for _, g in calls], refs, 1e-5, 1e-4):
        passed(title, f"matches the reference on {len(cases)} cases")
        return
    theirs = [g for _, g in calls]
    pitfall = listed_pitfall(ENTROPY_PITFALLS, cases, theirs, 1e-5, 1e-4)
    if pitfall is not None:
        pitfall.fail(title)
    _check_entropy_shapes(title, calls, cases)
    _explain_entropy(title, calls, refs, cases)


def _explain_entropy(title: str, calls, refs, cases) -> None:
    found = _nan_finding(calls, refs)
    if found is None and all(torch.isfinite(g).all() for _, g in calls):
        ratios = _ratios(calls, refs)
        found = (
            _ratio_finding(ratios)
            if ratios
            # an ε's bias is nearly constant along a row: the ε is read first
            else _eps_finding(calls, refs) or _offset_finding(calls, refs)
        )
    found = found or _zero_rows_finding(calls, refs) or _close_finding(calls, refs)
    if found is not None:
        found[0].fail(title, found[1])
    for case, (_, g), r in zip(cases, calls, refs):
        size, where = largest_difference(g, r, at="row")
        if size > (1e-5 + 1e-4 * r.abs().max()).item():
            fallback(
                title,
                f"wrong on case {case.label}: {where}",
                S_ENTROPY,
                advice="compare your code with −Σ w·ln w over the last axis",
            )


seal(__name__)
