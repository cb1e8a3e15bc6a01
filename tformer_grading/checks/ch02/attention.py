"""Checks for exercise ``attention`` of chapter 2 (book/ch02_attention):
``attention(q, k, v) -> (out, weights)``, scaled dot-product attention.

The check runs the learner's code on the cases, then looks at what it returned stage by
stage (the call itself, shapes, the weights, the output) and reports the first stage
that departs from the reference, with the quantity that is off *measured* from the
learner's own numbers (the divisor of the scores, the axis the weights sum to 1 over).
A listed pitfall is named only when its variant reproduces every output of the learner.
The last stage, scores large enough to overflow exp, is :mod:`.attention_large_scores`.
"""

from __future__ import annotations

import math

import torch

from tformer_ref.attention import scaled_dot_product_attention

from ...guard.integrity import seal
from ...pictures.attach import attention_picture, pictured
from ..cases import randn
from ..delegation import check_not_delegated
from ..diagnosis import (
    Case,
    Diagnosis,
    Pitfall,
    fail,
    passed,
    run,
    single_threaded,
    verify_integrity,
)
from ..flow import (
    FORM_WORDS,
    changed_input,
    check_deterministic,
    fail_if_raised,
    fallback,
    form_problem,
    largest_difference,
    listed_pitfall,
    matches,
    one_finding,
    run_cases,
)
from ..measure.fit import line, scale
from ..measure.formulas import name_of, number, numbers, powers
from ..measure.positions import (
    block_mixup,
    same_numbers,
    swapped_last_axes,
    unexpected_zeros,
)
from ..measure.softmax import (
    FIT_RTOL,
    SEVERAL_AXES,
    SINGLE_AXES,
    SUM_ATOL,
    axes_name,
    key_shift_divisors,
    mixing,
    normalised_over,
    softmax_source,
    varying_axes,
)
from .attention_large_scores import judge_large_scores
from .sections import S_DMODEL, S_SATURATION, S_STEPS, S_VARIANCE

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True

# The divisors a learner may have used: a power of one size (or of d_model = H·Dh)
# times 1, 2 or ½.
DIVISOR_FORMULAS = powers(
    ("B", "H", "Sq", "Sk", "Dh"), products={"d_model": ("H", "Dh")}
)


# The reference is the package's scaled_dot_product_attention; each variant changes
# one step of it: what divides the scores, or the axis of the softmax.


def _variant(divisor, dim=-1):
    def attention(q, k, v):
        weights = (q @ k.transpose(-2, -1) / divisor(q)).softmax(dim=dim)
        return weights @ v, weights

    return attention


def _sqrt_d_k(q):
    return math.sqrt(q.size(-1))


ATTENTION_PITFALLS = (
    Pitfall(
        "no scaling",
        "Your scores are not divided by √d_k. With unit-variance entries var(q·k) "
        "= d_k, so the logits grow like √d_k and softmax saturates to nearly one-hot "
        "rows: most rows get almost no gradient, a few near-ties far larger ones.",
        S_SATURATION,
        _variant(lambda q: 1),
    ),
    Pitfall(
        "scaled by sqrt(d_model)",
        "Your scores are divided by √(H·Dh) = √d_model, not by √d_k = √Dh, the "
        "length of the vectors being dotted. The logits come out √H times too "
        "small and attention is too flat.",
        S_DMODEL,
        _variant(lambda q: math.sqrt(q.size(1) * q.size(-1))),
    ),
    Pitfall(
        "scaled by d_k instead of sqrt(d_k)",
        "Your scores are divided by d_k. The standard deviation of q·k is √d_k, so "
        "that is what brings it back to 1; dividing by d_k shrinks the logits √d_k "
        "times too much.",
        S_VARIANCE,
        _variant(lambda q: q.size(-1)),
    ),
    Pitfall(
        "softmax over the wrong axis (queries)",
        "Your softmax normalises over the queries (dim=-2). Each query's weights "
        "over the keys must sum to 1: softmax over the last axis, dim=-1.",
        S_STEPS,
        _variant(_sqrt_d_k, dim=-2),
    ),
    Pitfall(
        "softmax over the wrong axis (heads)",
        "Your softmax normalises over the heads (dim=1). Each query's weights over "
        "the keys must sum to 1: softmax over the last axis, dim=-1.",
        S_STEPS,
        _variant(_sqrt_d_k, dim=1),
    ),
)


def _attention_cases():
    # (B, H, Sq, Sk, Dh, dtype): Sq != Sk is cross-attention; B == H catches batch/head
    # mix-ups; H != Dh everywhere so that √d_model and d_k scaling cannot coincide.
    # Sk < Dh everywhere: the rows of v are then independent, so the weights an output
    # applies to v can be solved back from the output (see _mixing).
    # The first case's sizes are all different, so the numbers of a crash decode to one
    # name each (measure.sizes); its seeds come after the others' (seed index 4).
    configs = [
        (2, 3, 4, 5, 8, torch.float32),
        (2, 4, 5, 5, 8, torch.float32),
        (3, 3, 4, 6, 16, torch.float32),
        (1, 2, 3, 3, 4, torch.float64),
        (2, 2, 6, 6, 64, torch.float32),
    ]
    cases = []
    for i, (b, h, sq, sk, dh, dtype) in zip((4, 0, 1, 2, 3), configs):

        def make(b=b, h=h, sizes=(sq, sk, sk), dh=dh, dtype=dtype, i=i):
            return tuple(
                randn(b, h, n, dh, seed=10 * i + j, dtype=dtype)
                for j, n in enumerate(sizes)
            )

        label = f"q [B={b}, H={h}, Sq={sq}, Dh={dh}], k and v [.., Sk={sk}, ..]"
        cases.append(Case(f"{label}, {dtype}", make))
    return cases


# ------------------------------------------------------ attention: what is measured
# Diagnoses found by measuring the learner's numbers, not by reproducing them.

WRONG_SCALE = Diagnosis(
    "scores scaled by the wrong factor",
    "The scores q·kᵀ must be divided by √d_k = √Dh, the length of the vectors being "
    "dotted: var(q·k) = Dh for unit-variance entries, and √Dh brings the standard "
    "deviation back to 1 (too large a factor saturates softmax, too small flattens "
    "it).",
    S_VARIANCE,
)
SCALE_NOT_CONSTANT = Diagnosis(
    "scale not constant",
    "The scores of every query are divided by the same constant √Dh; a factor that "
    "changes from row to row (a norm, a max, a per-head size) is not scaled attention.",
    S_VARIANCE,
)
WRONG_AXIS = Diagnosis(
    "weights normalised over the wrong axis",
    "Each query's weights over the keys must sum to 1: softmax over the last axis "
    "(dim=-1), the keys.",
    S_STEPS,
)
NOT_NORMALISED = Diagnosis(
    "weights do not sum to 1",
    "Softmax makes each query's weights positive and sum to 1 over the keys; a row of "
    "attention weights is a probability distribution.",
    S_STEPS,
)
NO_SOFTMAX = Diagnosis(
    "softmax missing",
    "The weights are softmax(q·kᵀ/√Dh); the scaled scores themselves are not weights.",
    S_STEPS,
)
LOG_WEIGHTS = Diagnosis(
    "log-weights instead of weights",
    "log_softmax returns the logarithm of the weights; attention needs softmax.",
    S_STEPS,
)
WRONG_VECTORS = Diagnosis(
    "scores from the wrong vectors",
    "weights[b, h, i, j] = softmax over j of q_i·k_j / √Dh: queries index the rows, "
    "keys the columns, and the values play no part in the scores.",
    S_STEPS,
)
TRANSPOSED = Diagnosis(
    "weights transposed",
    "weights has shape [B, H, Sq, Sk]: one row per query, one column per key.",
    S_STEPS,
)
SCRAMBLED = Diagnosis(
    "right numbers in the wrong places",
    "A view/reshape/transpose moved entries between axes: view() reinterprets memory, "
    "it does not move axes (chapter 1).",
    S_STEPS,
)
PRECISION = Diagnosis(
    "precision lost",
    "Compute in the dtype of the inputs: a cast to a lower precision and back loses "
    "digits the reference keeps.",
    S_STEPS,
)
RANDOM = Diagnosis(
    "result depends on chance",
    "Attention in this exercise has no dropout and no randomness: the same inputs must "
    "give the same outputs.",
    S_STEPS,
)
MUTATES_INPUT = Diagnosis(
    "input modified in place",
    "Your function changed a tensor it was given (an in-place op such as div_, mul_, "
    "/= or a slice assignment). The caller still needs it: use out-of-place ops.",
    S_STEPS,
)
PAIR_ORDER = Diagnosis(
    "pair in the wrong order",
    "attention returns (out, weights): the output first, then the weights.",
    S_STEPS,
)
OUTPUT_WRONG_ROWS = Diagnosis(
    "output mixes the wrong vectors",
    "out = weights @ v: each output is the weighted average of the values.",
    S_STEPS,
)
OUTPUT_RESCALED = Diagnosis(
    "output rescaled",
    "out = weights @ v, nothing more: the weights already sum to 1.",
    S_STEPS,
)
PAIR_MISMATCH = Diagnosis(
    "output and weights do not match",
    "out must be the weights you return applied to v (out = weights @ v): compute both "
    "from one softmax.",
    S_STEPS,
)

NOT_FINITE = Diagnosis(
    "NaN or inf in the weights",
    "softmax of finite scores is finite: a division by a row sum that can be 0, or an "
    "exp that overflows (subtract the row's max first), gives NaN or inf.",
    S_STEPS,
)
BLOCKS_MIXED = Diagnosis(
    "batch entries or heads mixed up",
    "Each (batch entry, head) computes its own attention from its own q, k and v: an "
    "index, a view or a broadcast took another one's.",
    S_STEPS,
)
WEIGHTS_SHIFTED = Diagnosis(
    "weights shifted",
    "The weights are the softmax itself: adding an ε (even renormalised) moves weight "
    "onto every key.",
    S_STEPS,
)
MASKED = Diagnosis(
    "weights masked",
    "This exercise has no mask: every query attends to every key (masks are "
    "chapter 3).",
    S_STEPS,
)
KEY_SHIFT = Diagnosis(
    "scores shifted per key",
    "Softmax over the keys is unchanged by a constant per query (subtracting each "
    "row's max is safe), but a term that varies from key to key changes the weights: "
    "take a max for stability over dim=-1, keepdim=True.",
    S_STEPS,
)


def _sizes(q, k) -> dict:
    b, h, sq, dh = q.shape
    return {"B": b, "H": h, "Sq": sq, "Sk": k.size(2), "Dh": dh}


def _score_sources(q, k, v) -> list:
    """(name, [B, H, Sq, Sk] tensor) for the score matrices a learner may have used."""
    q, k, v = q.double(), k.double(), v.double()
    sources = [
        ("q·kᵀ", q @ k.mT),
        ("q·vᵀ (v used as the keys)", q @ v.mT),
        (
            "the attention weights (softmax applied twice)",
            (q @ k.mT / math.sqrt(q.size(-1))).softmax(-1),
        ),
    ]
    if q.size(2) == k.size(2):
        sources += [
            ("k·qᵀ (keys and queries swapped)", k @ q.mT),
            ("q·qᵀ (q used as the keys)", q @ q.mT),
            ("k·kᵀ (k used as the queries)", k @ k.mT),
        ]
    return sources


def _structure_of_weights(w, ref, q, k, v):
    """What is structurally wrong with weights w [B, H, Sq, Sk] (ref: the right ones),
    as (Diagnosis, detail), or ("scale", c) when w is a softmax of c·q·kᵀ with one
    constant c, or None when nothing could be isolated. The stages in order: layout,
    an offset on the weights, normalisation, then the scores."""
    w64, ref64 = w.detach().double(), ref.detach().double()
    return (
        _layout_problem(w64, ref64)
        or _affine_of_softmax(w64, q, k)
        or _normalisation_problem(w64, q, k, v)
        or _scores_problem(w64, q, k, v)
    )


def _layout_problem(w64, ref64):
    """NaN/inf, transposed or permuted weights [B, H, Sq, Sk], or None."""
    if not torch.isfinite(w64).all():
        bad = ~torch.isfinite(w64)
        return NOT_FINITE, (
            f"Your weights are NaN or inf at {int(bad.sum())} of "
            f"{bad.numel()} positions (first at "
            f"{tuple(bad.nonzero()[0].tolist())})."
        )
    if swapped_last_axes(w64, ref64):
        return TRANSPOSED, (
            "Your weights are the right ones transposed: "
            "weights[.., j, i] holds query i's weight on key j."
        )
    if same_numbers(w64, ref64):
        return SCRAMBLED, (
            "Your weights hold exactly the right numbers, but in other positions."
        )
    mixed = block_mixup(w64, ref64)
    if mixed:
        return BLOCKS_MIXED, f"Your weights {mixed}."
    return None


def _normalisation_problem(w64, q, k, v):
    """Weights [B, H, Sq, Sk] that do not sum to 1 over the keys, or None."""
    dims = normalised_over(w64, SINGLE_AXES)
    sums = w64.sum(-1)
    if dims is None and torch.allclose(
        sums, sums.mean().expand_as(sums), rtol=1e-4, atol=0
    ):
        return _unnormalised(w64, q, k, v)  # rows sum to one constant, not 1
    dims = dims or normalised_over(w64, SEVERAL_AXES)
    if dims is None:
        return _unnormalised(w64, q, k, v)
    if dims != (3,):
        return WRONG_AXIS, (
            f"Your attention weights sum to 1 over "
            f"{axes_name(dims)}, not over the keys (axis 3)."
        )
    return None


def _scores_problem(w64, q, k, v):
    """For weights [B, H, Sq, Sk] that are a softmax over the keys: of what scores, with
    what factor (("scale", c) when only the constant c is left to judge)."""
    found = softmax_source(w64, _score_sources(q, k, v))
    if found is None:
        return _key_shift(w64, q, k)
    name, c = found
    if name != "q·kᵀ":
        return WRONG_VECTORS, (
            f"Your weights are a softmax over the keys of {name}, not of q·kᵀ."
        )
    masked = _masked(w64, c, q, k)
    if masked:
        return MASKED, masked
    varying = varying_axes(c)
    if varying:
        d = 1 / c[~torch.isnan(c)]
        return SCALE_NOT_CONSTANT, (
            "The factor your scores are divided by changes across the "
            f"{', '.join(varying)} (from {number(d.min().item())} to "
            f"{number(d.max().item())}); expected the constant √Dh = "
            f"{number(math.sqrt(q.size(-1)))}."
        )
    return "scale", c.nanmean().item()


def _masked(w64, c, q, k) -> str | None:
    """What was observed when w64 [B, H, Sq, Sk], a softmax of c·q·kᵀ (c per row
    [B, H, Sq]), is exactly 0 where that softmax is not small enough to underflow."""
    predicted = (c.nanmean() * (q.double() @ k.double().mT)).softmax(-1)
    zeros = unexpected_zeros(w64, predicted)
    if zeros is None:
        return None
    return (
        f"Your weights are exactly 0 at {zeros[0]} positions (first at "
        f"{zeros[1]}) where a softmax of your own scores is not: a mask."
    )


def _affine_of_softmax(w64, q, k):
    """(Diagnosis, detail) when w64 [B, H, Sq, Sk] = a·(the right weights) + b."""
    p = (q.double() @ k.double().mT / math.sqrt(q.size(-1))).softmax(-1)
    a, b = line(w64, p)
    residual = (w64 - a * p - b).norm()
    # the shift must explain nearly all of the departure (rounding noise does not fit)
    if residual > 1e-2 * (w64 - p).norm() or abs(b) < 1e-6 or not 0.5 < a < 1.5:
        return None
    return WEIGHTS_SHIFTED, (
        f"Your weights are {number(a)} × the right weights + "
        f"{b:.3g}: a constant was added to every weight."
    )


def _key_shift(w64, q, k):
    """(Diagnosis, detail) when log w64 [B, H, Sq, Sk] = c·q·kᵀ + (a term per row) +
    (a term per key, the same for every query): the softmax saw a per-key shift."""
    d = key_shift_divisors(w64, q.double() @ k.double().mT)
    if d is None:
        return None
    return KEY_SHIFT, (
        "Your log-weights are q·kᵀ divided by "
        f"{number(d.mean().item())} plus a term that depends on the key "
        "alone (the same for every query): something computed over "
        "the queries (a max or mean along dim -2, a bias per key) "
        "entered the scores before the softmax."
    )


def _unnormalised(w64, q, k, v):
    """(Diagnosis, detail) for weights w64 [B, H, Sq, Sk] that sum to 1 over no axis."""
    if torch.allclose(w64.exp().sum(-1), w64.new_ones(()), atol=SUM_ATOL, rtol=0):
        return (
            LOG_WEIGHTS,
            "exp(your weights) sums to 1 over the keys: they are log-probabilities.",
        )
    s = q.double() @ k.double().mT
    c = scale(w64, s)
    if (w64 - c * s).norm() <= FIT_RTOL * w64.norm() and c != 0:
        return NO_SOFTMAX, (
            f"Your weights are the scores q·kᵀ divided by "
            f"{number(1 / c)}, with no softmax."
        )
    sums = w64.sum(-1)
    found = softmax_source(w64, _score_sources(q, k, v))
    shape = (
        " They are proportional to exp(c·q·kᵀ) along each row, so the division "
        "by the row's sum is what is missing or wrong."
        if found
        else ""
    )
    total = sums.mean().item()
    if found and torch.allclose(sums, torch.full_like(sums, total), rtol=1e-4, atol=0):
        return NOT_NORMALISED, (
            f"Every row of your weights sums to {number(total)} "
            f"(= 1/{number(1 / total)}) instead of 1: they are the softmax multiplied "
            f"by {number(total)}, e.g. a scale applied after the softmax instead of to "
            "the scores."
        )
    return NOT_NORMALISED, (
        f"Your weights sum over the keys to values from "
        f"{number(sums.min().item())} to {number(sums.max().item())}, "
        f"and to 1 over no axis.{shape}"
    )


def _scale_detail(factors: list, sizes: list) -> str:
    """The message for weights that are softmax(c·q·kᵀ) with the wrong constant c per
    case (factors: c per case)."""
    divisors = [1 / c if c != 0 else math.inf for c in factors]
    expected = [math.sqrt(s["Dh"]) for s in sizes]
    text = (
        f"Your scores q·kᵀ are divided by {numbers(divisors)} on the {len(sizes)} "
        f"cases (Dh = {', '.join(str(s['Dh']) for s in sizes)}); expected √d_k = "
        f"√Dh = {numbers(expected)}."
    )
    if any(c == 0 for c in factors):
        return text + " Your weights are uniform: the scores play no part."
    formula = name_of(divisors, sizes, DIVISOR_FORMULAS)
    if formula is not None:
        text += f" On every case your divisor is {formula}."
    elif all(math.isclose(d, divisors[0], rel_tol=2e-3) for d in divisors):
        text += (
            " It is the same constant on every case, whatever Dh: a hard-coded number?"
        )
    elif all(c < 0 for c in factors):
        text += " The factor is negative: the scores' sign is flipped."
    else:
        text += " No simple formula of B, H, Sq, Sk, Dh gives that divisor."
    return text


def _explain_weights(got: list, refs: list, args: list, labels: list):
    """(Diagnosis, detail) explaining wrong weights, or None. got/refs: weights per
    case, args: (q, k, v) per case."""
    found = [
        None
        if torch.allclose(w.detach(), r, atol=1e-5, rtol=1e-4)
        else _structure_of_weights(w, r, *a) or (None, "")
        for w, r, a in zip(got, refs, args)
    ]
    named = [
        (f[0], f"On case {label}: {f[1]}")
        for f, label in zip(found, labels)
        if f is not None and f[0] != "scale"
    ]
    if any(d is NOT_FINITE for d, _ in named):  # a fact to fix first, whatever else
        return next(f for f in named if f[0] is NOT_FINITE)
    if named:  # named only when the same mistake explains every case that is wrong
        wrong = sum(f is not None for f in found)
        same_kind = all(d is named[0][0] is not None for d, _ in named)
        return named[0] if same_kind and len(named) == wrong else None
    sizes = [_sizes(q, k) for q, k, _ in args]
    factors = [
        1 / math.sqrt(s["Dh"]) if f is None else f[1] for f, s in zip(found, sizes)
    ]
    if all(
        math.isclose(c * math.sqrt(s["Dh"]), 1, rel_tol=FIT_RTOL)
        for c, s in zip(factors, sizes)
    ):
        return _precision(got, refs)
    return WRONG_SCALE, _scale_detail(factors, sizes)


def _precision(got: list, refs: list):
    """The scale is right and the weights are close: digits were lost (or None when
    they are far off: something else is wrong)."""
    worst = max((g.double() - r.double()).abs().max().item() for g, r in zip(got, refs))
    if worst > 1e-2:
        return None
    return PRECISION, (
        f"Your weights are softmax(q·kᵀ/√Dh) but only to about "
        f"{worst:.2g} (largest difference from the reference)."
    )


# ---------------------------------------------------------------- attention: the output


def _explain_output(out, w, ref_out, q, k, v):
    """(Diagnosis, detail) explaining a wrong output out [B, H, Sq, Dh] when the
    weights w were right, or None."""
    found = _output_shortcut(out, w, ref_out, q, k, v)
    if found is not None:
        return found
    mix = mixing(out, v)
    if mix is None:
        return None
    found = _structure_of_weights(mix, w, q, k, v)
    if found is None:
        return PAIR_MISMATCH, (
            "Your output mixes the rows of v with weights that are "
            "not the ones you return."
        )
    if found[0] == "scale":
        found = WRONG_SCALE, _scale_detail([found[1]], [_sizes(q, k)])
    return PAIR_MISMATCH, (
        "The weights you return are right, but your output is not "
        "weights @ v: it mixes v with other weights. About those: "
        f"{found[0].name}. {found[1]}"
    )


def _output_shortcut(out, w, ref_out, q, k, v):
    """An output out [B, H, Sq, Dh] that is weights @ v rescaled, permuted, plus an
    input, or a mix of the wrong rows; None otherwise."""
    out64, wv = out.detach().double(), w.detach().double() @ v.double()
    c = scale(out64, wv)
    if (out64 - c * wv).norm() <= FIT_RTOL * out64.norm():
        return OUTPUT_RESCALED, f"Your output is {number(c)} × weights @ v."
    if same_numbers(out64, ref_out.double()):
        return SCRAMBLED, (
            "Your output holds exactly the right numbers, but in other positions."
        )
    for name, extra in (("q", q), ("k", k), ("v", v)):
        if extra.shape == out.shape and torch.allclose(
            out64 - wv, extra.double(), atol=1e-5, rtol=1e-4
        ):
            return OUTPUT_WRONG_ROWS, (
                f"Your output is weights @ v + {name}: a "
                "residual connection belongs to the block "
                "(chapter 4), not to attention."
            )
    mixed = block_mixup(out64, ref_out.double())
    if mixed:
        return BLOCKS_MIXED, f"Your outputs {mixed}."
    for name, rows in (("k", k), ("q", q)):
        if rows.size(2) <= rows.size(3) and mixing(out, rows) is not None:
            return OUTPUT_WRONG_ROWS, (
                f"Your output is a weighted sum of the rows of "
                f"{name}, not of v: weights @ {name}."
            )
    return None


# -------------------------------------------------------------- attention: the checks

#: The form step's words for attention's results: they take q's dtype and device.
_FORM_WORDS = {
    **FORM_WORDS,
    "subclass": "expected a plain torch.Tensor, got the subclass {got}",
    "shape": "expected shape {want} [B, H, ...], got {got}",
    "dtype": "expected dtype {want} (the dtype of q), got {got}",
    "device": "expected a tensor on {want} (where q is), not {got}",
}


def _call_all(title: str, fn, cases) -> list:
    """Run fn on every case: [(args, result)]. Fails on an exception, a result that is
    not a pair, or inputs changed in place."""
    for done in (runs := run_cases(fn, cases)):
        label, result = done.case.label, done.result
        fail_if_raised(title, result, f"while the check ran case {label}")
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            fail(
                title,
                f"attention must return a pair (out, weights), got "
                f"{type(result).__name__} on case {label}.",
                S_STEPS,
            )
        name = changed_input(done, "qkv")
        if name is not None:
            MUTATES_INPUT.fail(
                title, f"On case {label} your function changed its argument {name}."
            )
    return [(done.case.make(), tuple(done.result)) for done in runs]


def _check_types(title: str, calls, cases) -> None:
    """Fail when an element of a pair is not a plain tensor of the right shape, dtype
    and device."""
    for case, ((q, k, v), (out, w)) in zip(cases, calls):
        b, h, sq, dh = q.shape
        want_out, want_w = [b, h, sq, dh], [b, h, sq, k.size(2)]
        if not all(isinstance(t, torch.Tensor) for t in (out, w)):
            fail(
                title,
                f"on case {case.label} the pair holds {type(out).__name__} and "
                f"{type(w).__name__}; expected two tensors (out, weights).",
                S_STEPS,
            )
        if [list(out.shape), list(w.shape)] == [want_w, want_out] != [want_out, want_w]:
            PAIR_ORDER.fail(
                title,
                f"On case {case.label} your first tensor has the "
                f"weights' shape {want_w}, the second the output's "
                f"{want_out}.",
            )
        if list(w.shape) == [b, h, k.size(2), sq] and sq != k.size(2):
            TRANSPOSED.fail(
                title,
                f"On case {case.label} your weights have shape "
                f"{list(w.shape)} = [B, H, Sk, Sq]; expected "
                f"{want_w}.",
            )
        for part, got, want in (("weights", w, want_w), ("output", out, want_out)):
            problem = form_problem(got, want, q.dtype, q.device, _FORM_WORDS)
            if problem:
                fail(
                    f"{title} ({part})",
                    f"on case {case.label} your {part}: {problem}.",
                    S_STEPS,
                )


@single_threaded
def check_attention(attention_fn) -> None:
    """``attention_fn(q [B, H, Sq, Dh], k [B, H, Sk, Dh], v [B, H, Sk, Dh])
    -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])``."""
    verify_integrity()
    cases = _attention_cases()
    calls = _call_all("attention", attention_fn, cases)
    _check_types("attention", calls, cases)
    ref = [scaled_dot_product_attention(*a) for a, _ in calls]
    outs, ws = [r[0] for _, r in calls], [r[1] for _, r in calls]
    if not matches(ws, [r[1] for r in ref], 1e-5, 1e-4):
        results = [result for _, result in calls]
        with pictured(
            lambda said: attention_picture(
                cases, results, scaled_dot_product_attention, said=said
            )
        ):
            _fail_weights(attention_fn, calls, cases, ws, ref)
    passed("attention (weights)", f"match the reference on {len(cases)} cases")
    if not matches(outs, [r[0] for r in ref], 1e-5, 1e-4):
        _fail_output(attention_fn, calls, cases, outs, ref)
    passed("attention (output)", f"matches the reference on {len(cases)} cases")
    judge_large_scores(attention_fn)


def _fail_weights(fn, calls, cases, ws, ref) -> None:
    """The weights are wrong: name the pitfall that reproduces everything, else what is
    measured, else where."""
    title = "attention (weights)"
    check_deterministic(title, fn, cases[0], calls[0][1], RANDOM)
    refs = [r[1] for r in ref]
    found = _explain_weights(ws, refs, [a for a, _ in calls], [c.label for c in cases])
    detail = "" if found is None else found[1] + _pair_note(calls)
    pitfall = listed_pitfall(
        ATTENTION_PITFALLS, cases, [r for _, r in calls], 1e-5, 1e-4
    )
    if pitfall is not None:
        pitfall.fail(title, detail)
    if found is None:
        _fail_where("weights", cases, ws, refs, _weights_stage(ws))
    found[0].fail(title, detail)


def _pair_note(calls) -> str:
    """A second problem worth knowing about: the output is not the returned weights
    applied to v."""
    for (_, _, v), (out, w) in calls:
        wv = w.detach().double() @ v.double()
        if not torch.allclose(out.detach().double(), wv, atol=1e-5, rtol=1e-4):
            return (
                " Besides, your output is not weights @ v with the weights you "
                "return: compute both from one softmax."
            )
    return ""


def _fail_output(fn, calls, cases, outs, ref) -> None:
    """The weights are right, the output is not: what is measured, else where."""
    title = "attention (output)"
    check_deterministic(title, fn, cases[0], calls[0][1], RANDOM)
    wrong = [
        (case, _explain_output(out, w, ref_out, q, k, v))
        for case, ((q, k, v), (out, w)), (ref_out, _) in zip(cases, calls, ref)
        if not torch.allclose(out.detach(), ref_out, atol=1e-5, rtol=1e-4)
    ]
    found = one_finding([f for _, f in wrong])
    if found is not None:
        found[0].fail(title, f"On case {wrong[0][0].label}: {found[1]}")
    _fail_where("output", cases, outs, [r[0] for r in ref])


def _fail_where(part: str, cases, got: list, refs: list, stage: str = "") -> None:
    """The fallback: which case, which stage, how far; names no mistake."""
    for case, g, r in zip(cases, got, refs):
        size, where = largest_difference(g, r)
        if size > (1e-5 + 1e-4 * r.abs().max()).item():
            fallback(
                f"attention ({part})",
                f"the first stage that differs is the {part}{stage}: on case "
                f"{case.label}, {where}",
                S_STEPS,
            )
    fallback(
        f"attention ({part})",
        f"your {part} differ from the reference",
        S_STEPS,
        advice="",
    )


def _weights_stage(ws: list) -> str:
    """Where in the weights the departure lies, when nothing could be isolated."""
    if all(normalised_over(w.detach().double(), SINGLE_AXES) == (3,) for w in ws):
        return (
            " (they sum to 1 over the keys like a softmax, but of scores that are "
            "not a multiple of q·kᵀ)"
        )
    return ""


def check_attention_by_hand(attention_fn) -> None:
    """Hidden test: the learner wrote the computation, not a call to PyTorch's or the
    reference's attention."""
    q, k, v = (randn(2, 2, 3, 4, seed=s) for s in (1, 2, 3))
    result = run(attention_fn, (q.clone(), k.clone(), v.clone()))
    fail_if_raised(
        "attention", result, "while the check ran q, k, v [B=2, H=2, S=3, Dh=4]"
    )
    check_not_delegated(
        "attention",
        lambda: attention_fn(q, k, v),
        forbidden=[
            "scaled_dot_product_attention",
            "multi_head_attention_forward",
            "tformer_ref",
        ],
    )


seal(__name__)
