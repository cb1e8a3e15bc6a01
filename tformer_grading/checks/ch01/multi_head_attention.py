"""Checks for exercise ``multi_head_attention`` of chapter 1 (book/ch01_shapes):
``MultiHeadAttention(d_model, n_heads)``, ``forward(query [B, Sq, D], key, value
[B, Sk, D], mask=None) -> [B, Sq, D]``, H heads of scaled dot-product attention
between its own projections.

When no listed pitfall reproduces the outputs, the check *measures* what is off (which
input each projection is applied to, the number the scores were divided by, the axis
the softmax normalised, the head layout), and only when no stage can be isolated does
it say where the outputs differ. Holds the hidden "written by hand" check too; the
behaviour probes are in ``mha_behaviour``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from tformer_ref.heads import merge_heads, split_heads

from ...guard.integrity import seal
from ...pictures.attach import pictured, weights_picture
from ..cases import build_module, randn
from ..delegation import check_not_delegated
from ..diagnosis import (
    Case,
    Diagnosis,
    Pitfall,
    Raised,
    describe_difference,
    fail,
    run,
    single_thread,
)
from ..measure.fit import scale
from ..measure.trace import trace
from .merge_heads import (
    MERGE_DH_MAJOR,
    MERGE_NO_TRANSPOSE,
    merge_dh_major,
    merge_no_transpose,
)
from .mha_behaviour import (
    BATCH_ENTRIES_LEAK,
    DROPOUT_IN_EVAL,
    MIXING_PROBES,
    TOKENS_NEVER_MIX,
    probe_self_attention,
)
from .projections import align, alignment_by_order, load, shared_head_check
from .readings import (
    Reading,
    attend,
    close,
    d_h,
    fit_divisor,
    no_softmax,
    project,
    reference,
    reference_weights,
    scale_name,
    seed_heads,
)
from .sections import S_EINSUM, S_MERGE, S_PROJ, S_SCALE, S_SPLIT
from .split_heads import SPLIT_VIEW_STRAIGHT, split_interleaved, split_view_straight
from .stages import (
    WRONG_FORM,
    Run,
    changed,
    fail_findings,
    form_stage,
    raised_stage,
    snapshot,
    staged,
)

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True

# ---------------------------------------------------------------- multi-head attention
# Functional multi-head attention from the weights a case hands in,
# w = {"q": (weight, bias), "k": ..., "v": ..., "o": ...}: the same numbers are loaded
# into the learner's module, its projections found by what they do (``projections``).


def _mha_scaled_by_sqrt_d_model(w, h, xq, xk, xv):
    q, k, v = (split_heads(t, h) for t in project(w, xq, xk, xv))
    scores = q @ k.transpose(-2, -1) / math.sqrt(xq.size(-1))
    return F.linear(merge_heads(scores.softmax(dim=-1) @ v), *w["o"])


def _mha_unscaled(w, h, xq, xk, xv):
    q, k, v = (split_heads(t, h) for t in project(w, xq, xk, xv))
    scores = q @ k.transpose(-2, -1)
    return F.linear(merge_heads(scores.softmax(dim=-1) @ v), *w["o"])


def _mha_softmax_over_queries(w, h, xq, xk, xv):
    q, k, v = (split_heads(t, h) for t in project(w, xq, xk, xv))
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    return F.linear(merge_heads(scores.softmax(dim=-2) @ v), *w["o"])


def _mha_seed_einsum(w, h, xq, xk, xv):
    """The seed's einsum 'bhqd,bhkd->bhqk' applied to [B, S, H, Dh] tensors."""
    q, k, v = (seed_heads(t, h) for t in project(w, xq, xk, xv))
    energy = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(q.size(-1))
    out = torch.einsum("bhql,bhlv->bhqv", energy.softmax(dim=3), v)
    return F.linear(out.flatten(2), *w["o"])


def _mha_seed_code(w, h, xq, xk, xv):
    """The seed's SelfAttention as written: that einsum, and scores over √embed_size."""
    q, k, v = (seed_heads(t, h) for t in project(w, xq, xk, xv))
    energy = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(xq.size(-1))
    out = torch.einsum("bhql,bhlv->bhqv", energy.softmax(dim=3), v)
    return F.linear(out.flatten(2), *w["o"])


def _mha_split_view_straight(w, h, xq, xk, xv):
    q, k, v = (split_view_straight(t, h) for t in project(w, xq, xk, xv))
    return F.linear(merge_heads(attend(q, k, v)), *w["o"])


def _mha_merged_without_transpose(w, h, xq, xk, xv):
    q, k, v = (split_heads(t, h) for t in project(w, xq, xk, xv))
    return F.linear(merge_no_transpose(attend(q, k, v)), *w["o"])


def _mha_merged_dh_major(w, h, xq, xk, xv):
    q, k, v = (split_heads(t, h) for t in project(w, xq, xk, xv))
    return F.linear(merge_dh_major(attend(q, k, v)), *w["o"])


MHA_PITFALLS = (
    Pitfall(
        "scaled by sqrt(d_model)",
        "Your scores are divided by √d_model, not √d_head. The variance of q·k "
        "grows with the length of the vectors being dotted, which is Dh per head; "
        "dividing by √D makes the logits √H times too small.",
        S_SCALE,
        _mha_scaled_by_sqrt_d_model,
    ),
    Pitfall(
        "no scaling",
        "Your scores are not divided by √d_head at all. Unscaled logits grow like "
        "√Dh and push softmax into saturation: most rows get almost no gradient, a "
        "few near-ties far larger ones.",
        S_SCALE,
        _mha_unscaled,
    ),
    Pitfall(
        "softmax over the query axis",
        "Your softmax normalises over the queries (dim=-2). Each query's weights "
        "over the keys must sum to 1, so softmax over the last axis (dim=-1).",
        S_EINSUM,
        _mha_softmax_over_queries,
    ),
    Pitfall(
        "einsum over the wrong axes (the seed's bug)",
        "Your einsum treats the sequence axis as heads: on [B, S, H, Dh] tensors "
        "'bhqd,bhkd->bhqk' attends across the heads of one token, so tokens never "
        "mix (and cross-attention with Sq != Sk fails). Transpose to [B, H, S, Dh] "
        "first, or label the axes 'bqhd,bkhd->bhqk'.",
        S_EINSUM,
        _mha_seed_einsum,
    ),
    Pitfall(
        "einsum over the wrong axes and scaled by sqrt(d_model) (the seed's code)",
        "This is the seed's SelfAttention: its einsum attends across the heads of "
        "one token instead of across tokens, and it divides by √embed_size instead "
        "of √head_dim.",
        S_EINSUM,
        _mha_seed_code,
    ),
    Pitfall(
        SPLIT_VIEW_STRAIGHT.name,
        "Your heads are split by viewing [B, S, D] straight as [B, H, S, Dh], "
        "which mixes tokens into heads.",
        S_SPLIT,
        _mha_split_view_straight,
    ),
    Pitfall(
        MERGE_NO_TRANSPOSE.name,
        "Your heads are merged by reshaping [B, H, S, Dh] straight to [B, S, D], "
        "which glues different tokens.",
        S_MERGE,
        _mha_merged_without_transpose,
    ),
    Pitfall(
        MERGE_DH_MAJOR.name,
        "Your merge interleaves the heads' features (Dh axis before the head axis).",
        S_MERGE,
        _mha_merged_dh_major,
    ),
)


# Recognised by the parameter shapes (``projections.shared_head_check``).
SHARED_HEAD_LINEAR = Diagnosis(
    "one Linear shared by all heads",
    "Each head must have its own projection of the whole D-dimensional input: use "
    "Linear(d_model, d_model), which is H separate D→Dh projections side by side.",
    S_PROJ,
)


def _mha_cases():
    # (D, H, B, Sq, Sk, dtype); Sq != Sk is cross-attention, with key != value; B == H
    # catches batch/head mix-ups. The first case's sizes are all different, so a crash's
    # numbers decode to one name each (measure.sizes); its seeds come after the others'.
    configs = [
        (20, 4, 2, 3, 7, torch.float32),
        (16, 4, 2, 5, 5, torch.float32),
        (24, 3, 3, 4, 7, torch.float32),
        (12, 2, 2, 6, 6, torch.float64),
        (32, 4, 4, 5, 3, torch.float32),
    ]
    cases = []
    for i, (d, h, b, sq, sk, dtype) in zip((4, 0, 1, 2, 3), configs):

        def make(d=d, h=h, b=b, sq=sq, sk=sk, dtype=dtype, i=i):
            w = {
                n: (
                    randn(d, d, seed=100 * i + j, dtype=dtype) / math.sqrt(d),
                    randn(d, seed=100 * i + j + 50, dtype=dtype) * 0.1,
                )
                for j, n in enumerate("qkvo")
            }
            xq = randn(b, sq, d, seed=1000 + i, dtype=dtype)
            if sq == sk:  # self-attention: one tensor passed three times
                return w, h, xq, xq, xq
            return (
                w,
                h,
                xq,
                randn(b, sk, d, seed=2000 + i, dtype=dtype),
                randn(b, sk, d, seed=3000 + i, dtype=dtype),
            )

        kind = "self-attention" if sq == sk else "cross-attention"
        label = f"{kind} D={d}, H={h}, Dh={d // h}, B={b}, Sq={sq}, Sk={sk}, {dtype}"
        cases.append(Case(label, make))
    return cases


def _build(cls, d_model, n_heads, dtype):
    module = build_module("MultiHeadAttention", cls, (d_model, n_heads), dtype, seed=0)
    return module.eval()


def _forward(module, xq, xk, xv):
    with torch.no_grad():
        return module(xq, xk, xv)


def _mha_run(cls, case: Case) -> Run:
    """Build the learner's module, find its projections, load the case's weights,
    run it."""
    w, h, xq, xk, xv = case.make()
    d = xq.size(-1)
    module = _build(cls, d, h, torch.float64)
    shared_head_check(module, d, h, SHARED_HEAD_LINEAR)
    alignment = align("MultiHeadAttention", module, d)
    module.to(xq.dtype)
    if isinstance(alignment, str):  # no gradient: the registration order, as it says
        alignment = alignment_by_order(module, d, alignment)
    w_eff = load(module, alignment, w)
    ref_args = (w_eff, h, xq.clone(), xk.clone(), xv.clone())
    want = reference(*ref_args)
    args = (xq, xk, xv)
    before = snapshot(args)
    # The softmax outputs are kept for the picture of a failure (pictures.attach).
    with trace(names=("softmax",)) as events:
        got = run(_forward, (module, *args))
    again = run(_forward, (module, *args))
    return Run(
        case.label,
        args,
        got,
        want,
        ref_args,
        changed(args, before, ("query", "key", "value")),
        extra=(module, again, alignment, [e.out for e in events]),
    )


def _weights_picture(runs: Sequence[Run], said: str):
    """The learner's attention weights next to the reference's, for the first case
    the message names: their last softmax output of the reference's shape."""
    wants = [reference_weights(*r.ref_args) for r in runs]
    theirs = [
        next((t for t in reversed(r.extra[3]) if t.shape == want.shape), None)
        for r, want in zip(runs, wants)
    ]
    return weights_picture(theirs, wants, [r.label for r in runs], said=said)


# ------------------------------------------------------------- measuring the attention
# When no listed pitfall reproduces the outputs, the check fits readings of the
# learner's attention: the reference with one part read differently (the softmax axis,
# the head layout, key and value swapped, no split) and the number the scores are
# divided by *measured* per case, not assumed. A reading is reported only when it
# reproduces every case.

WRONG_SCALE = Diagnosis(
    "scores divided by the wrong number",
    "Divide q·kᵀ by √Dh, the square root of the head size: it keeps the logits' "
    "variance at 1 whatever Dh is.",
    S_SCALE,
)
SOFTMAX_AXIS = Diagnosis(
    "softmax over the wrong axis",
    "The scores are [B, H, Sq, Sk]; each query's weights over the keys must sum to 1: "
    "softmax(dim=-1).",
    S_EINSUM,
)
HEAD_LAYOUT = Diagnosis(
    "heads cut or merged in the wrong layout",
    "Head h is features h*Dh:(h+1)*Dh of each token: split with view(B, S, H, Dh)"
    ".transpose(1, 2), merge with the exact inverse.",
    S_SPLIT,
)
KEY_VALUE_SWAPPED = Diagnosis(
    "key and value swapped",
    "The scores compare queries with the projected *key*; the weights then average "
    "the projected *value*.",
    S_PROJ,
)
HEADS_FIXED = Diagnosis(
    "number of heads fixed",
    "Use the n_heads the constructor receives (and Dh = d_model // n_heads), never a "
    "number that happened to fit your first test.",
    S_SPLIT,
)
HEADS_WRONG = Diagnosis(
    "wrong number of heads",
    "The attention runs on H = n_heads heads of Dh = d_model // n_heads features: "
    "split_heads(x, n_heads) takes the head *count*, and the scores are divided by "
    "√Dh of those heads.",
    S_SPLIT,
)
CAUSAL_WITHOUT_MASK = Diagnosis(
    "causal mask without being asked",
    "With mask=None every query attends to every key; masks come in through the mask "
    "argument (chapter 3), never built in.",
    S_EINSUM,
)
HEADS_NEVER_SPLIT = Diagnosis(
    "heads never split",
    "Your module computes one attention over all D features: split Q, K and V into H "
    "heads of Dh features with split_heads, attend per head, then merge.",
    S_SPLIT,
)
WEIGHTS_RESCALED = Diagnosis(
    "attention weights do not sum to 1",
    "Scale the scores *before* the softmax; after it, each query's weights over the "
    "keys must sum to exactly 1.",
    S_SCALE,
)
NO_SOFTMAX = Diagnosis(
    "softmax missing",
    "Your output is linear in the scores: turn the scaled scores into weights with "
    "softmax(dim=-1) before multiplying by V.",
    S_EINSUM,
)
ADDS_INPUT = Diagnosis(
    "an input added to the output",
    "Attention returns the output projection of the merged heads, nothing more; the "
    "residual connection x + attention(x) belongs to the block (chapter 4).",
    S_PROJ,
)


_INTERLEAVED = (
    "your head h takes every H-th feature (h, h+H, ...) instead of the "
    "slice h*Dh:(h+1)*Dh"
)
_STRAIGHT = (
    "your split views [B, S, D] straight as [B, H, S, Dh], mixing tokens into heads"
)
_GLUED = "your merge reshapes [B, H, S, Dh] straight to [B, S, D], gluing tokens"
_DH_MAJOR = "your merge puts the Dh axis before the head axis, interleaving the heads"

READINGS = (
    Reading("", None),
    Reading(
        "your attention weights sum to 1 over axis 2 (the queries) of the scores "
        "[B, H, Sq, Sk], not over the keys (axis 3)",
        SOFTMAX_AXIS,
        axis=-2,
    ),
    Reading(
        "your attention weights sum to 1 over axis 1 (the heads) of the scores "
        "[B, H, Sq, Sk], not over the keys (axis 3)",
        SOFTMAX_AXIS,
        axis=-3,
    ),
    Reading(
        "your attention weights sum to 1 over axis 0 (the batch) of the scores "
        "[B, H, Sq, Sk], not over the keys (axis 3)",
        SOFTMAX_AXIS,
        axis=-4,
    ),
    Reading(_INTERLEAVED, HEAD_LAYOUT, split=split_interleaved),
    Reading(_STRAIGHT, HEAD_LAYOUT, split=split_view_straight),
    Reading(_GLUED, HEAD_LAYOUT, merge=merge_no_transpose),
    Reading(_DH_MAJOR, HEAD_LAYOUT, merge=merge_dh_major),
    Reading(
        "your scores use the projected value and your weights average the "
        "projected key",
        KEY_VALUE_SWAPPED,
        swap_kv=True,
    ),
    Reading(
        "your output is single-head attention over all D features",
        HEADS_NEVER_SPLIT,
        heads=1,
    ),
    Reading("", WEIGHTS_RESCALED, rescaled=True),
    Reading(
        f"{_INTERLEAVED}, and {_DH_MAJOR}",
        HEAD_LAYOUT,
        split=split_interleaved,
        merge=merge_dh_major,
    ),
    Reading(
        f"{_INTERLEAVED}, and {_GLUED}",
        HEAD_LAYOUT,
        split=split_interleaved,
        merge=merge_no_transpose,
    ),
    Reading(
        f"{_STRAIGHT}, and {_DH_MAJOR}",
        HEAD_LAYOUT,
        split=split_view_straight,
        merge=merge_dh_major,
    ),
    Reading(
        f"{_STRAIGHT}, and {_GLUED}",
        HEAD_LAYOUT,
        split=split_view_straight,
        merge=merge_no_transpose,
    ),
    Reading(
        "your attention is causal: query i sees only keys 0..i, though mask=None "
        "asks every query to attend to every key",
        CAUSAL_WITHOUT_MASK,
        causal=True,
    ),
)


def _fit_reading(reading: Reading, runs: Sequence[Run]) -> tuple | None:
    """The measured divisors and weight factors per case, or None when the reading
    misses a case."""
    divisors, factors = [], []
    for r in runs:
        divisor, err, factor = fit_divisor(reading, r)
        if not close(r, err):
            return None
        divisors.append(divisor)
        factors.append(factor)
    return divisors, factors


def _scale_finding(
    runs: Sequence[Run], divisors: list, heads: Sequence[int] | None
) -> str | None:
    """The divisors, unless they are √ of the head size the learner's heads have or
    √Dh (a module with the wrong number of ``heads`` per case is told about that, not
    about a scale it took from d_model // n_heads or from its own heads)."""
    expected = [math.sqrt(d / h) for d, h in map(d_h, runs)]
    heads = heads or [h for _, h in map(d_h, runs)]
    own = [math.sqrt(d / n) for (d, _), n in zip(map(d_h, runs), heads)]
    for right in (own, expected):
        if all(abs(s / e - 1) < 2e-3 for s, e in zip(divisors, right)):
            return None
    shapes = ", ".join(
        f"{s:.4g} (D={d}, H={h})" for s, (d, h) in zip(divisors, map(d_h, runs))
    )
    wanted = ", ".join(f"{e:.4g}" for e in expected)
    return (
        f"your scores are divided by {shapes}{scale_name(runs, divisors)}; "
        f"expected √Dh = {wanted}"
    )


def _fit_weight_sum(r: Run, base: torch.Tensor) -> tuple:
    """(c, largest difference) for got - b_o ≈ c · base (least squares)."""
    got = r.got.detach().double() - r.ref_args[0]["o"][1].double()
    base = base.double()
    c = scale(got, base)
    return c, float((got - c * base).abs().max())


def _weight_sums(runs: Sequence[Run], factors: list) -> str | None:
    if all(abs(c - 1) < 1e-3 for c in factors):
        return None
    sums = ", ".join(
        f"{c:.4g} (D={d}, H={h})" for c, (d, h) in zip(factors, map(d_h, runs))
    )
    return f"each query's weights sum to {sums}, not 1"


def _linear_readings(title: str, runs: Sequence[Run]) -> None:
    """A reading with a closed-form fit: no softmax, output linear in the scores."""
    linear = [_fit_weight_sum(r, no_softmax(r.ref_args)) for r in runs]
    if all(close(r, err) for r, (_, err) in zip(runs, linear)):
        divs = ", ".join(f"{1 / c:.4g}" for c, _ in linear)
        NO_SOFTMAX.fail(
            title,
            f"Measured: your output is exactly that of weights = "
            f"scores / ({divs}) with no softmax.",
        )


def _mha_measure_stage(title: str, runs: Sequence[Run]) -> None:
    _linear_readings(title, runs)
    for reading in READINGS:
        fitted = _fit_reading(reading, runs)
        if fitted is None:
            continue
        divisors, factors = fitted
        findings = [(reading.diagnosis, reading.finding)] if reading.finding else []
        sums = _weight_sums(runs, factors) if reading.rescaled else None
        if sums:
            findings.append((WEIGHTS_RESCALED, sums))
        heads = [reading.heads] * len(runs) if reading.heads else None
        scale = _scale_finding(runs, divisors, heads)
        if scale:
            findings.append((WRONG_SCALE, scale))
        if findings:
            fail_findings(title, findings)
        return
    _head_count_readings(title, runs)


def _fit_heads(r: Run) -> tuple | None:
    """(H', divisor): the first head count H' dividing D (n_heads tried first) with
    which the reference, its divisor fitted, reproduces the case; None if none does."""
    d, h = d_h(r)
    for n in [h] + [n for n in range(1, d + 1) if d % n == 0 and n != h]:
        divisor, err, _ = fit_divisor(Reading("", None, heads=n), r)
        if close(r, err):
            return n, divisor
    return None


def _heads_pattern(runs: Sequence[Run], heads: list) -> tuple:
    """(diagnosis, what the measured head counts have in common, if anything)."""
    sizes = [d // n for (d, _), n in zip(map(d_h, runs), heads)]
    if all(n == d // h for (d, h), n in zip(map(d_h, runs), heads)):
        return HEADS_WRONG, (
            "; that is d_model // n_heads heads: the head size was "
            "passed where the head count goes"
        )
    if len(set(heads)) == 1:
        return (
            HEADS_FIXED,
            f": your module splits into {heads[0]} heads whatever n_heads is",
        )
    if len(set(sizes)) == 1:
        return HEADS_WRONG, (
            f": your heads always have {sizes[0]} features, whatever n_heads is"
        )
    return HEADS_WRONG, ""


def _head_count_readings(title: str, runs: Sequence[Run]) -> None:
    """The attention computed with H' != n_heads heads on some case, H' measured per
    case (the reference with H' heads reproduces every case)."""
    fitted = [_fit_heads(r) for r in runs]
    if any(f is None for f in fitted):
        return
    heads = [n for n, _ in fitted]
    if all(n == h for n, (_, h) in zip(heads, map(d_h, runs))):
        return
    diagnosis, pattern = _heads_pattern(runs, heads)
    measured = ", ".join(
        f"{n} head{'s' * (n != 1)} of {d // n} features (D={d}, H={h})"
        for n, (d, h) in zip(heads, map(d_h, runs))
    )
    wanted = ", ".join(f"{h} of {d // h}" for d, h in map(d_h, runs))
    findings = [
        (
            diagnosis,
            (
                f"the attention was computed with {measured}; expected "
                f"H = n_heads heads of D // H features: {wanted}"
                f"{pattern}"
            ),
        )
    ]
    scale = _scale_finding(runs, [s for _, s in fitted], heads)
    if scale:
        findings.append((WRONG_SCALE, scale))
    fail_findings(title, findings)


def _adds_input_stage(title: str, runs: Sequence[Run]) -> None:
    """The output is the reference's plus one of the inputs."""
    for name, i in (("query", 0), ("key", 1), ("value", 2)):
        if all(
            r.args[i].shape == r.want.shape
            and torch.allclose(r.got - r.want, r.ref_args[2 + i], atol=1e-4, rtol=1e-3)
            for r in runs
        ):
            ADDS_INPUT.fail(
                title,
                f"Measured: your output minus the expected one is "
                f"exactly `{name}` on every case.",
            )


def _determinism_stage(title: str, runs: Sequence[Run]) -> None:
    for r in runs:
        again = r.extra[1]
        if (
            isinstance(r.got, torch.Tensor)
            and isinstance(again, torch.Tensor)
            and r.got.shape == again.shape
            and not torch.equal(r.got, again)
        ):
            DROPOUT_IN_EVAL.fail(
                title,
                f"On case {r.label} two calls in eval mode "
                "with the same inputs gave different outputs.",
            )


def _mha_form_stage(title: str, runs: Sequence[Run]) -> None:
    for r in runs:
        (b, sq, d), sk = r.args[0].shape, r.args[1].size(1)
        if isinstance(r.got, torch.Tensor) and sq != sk and r.got.shape == (b, sk, d):
            WRONG_FORM.fail(
                title,
                f"On case {r.label} your output has one row per "
                f"*key* (Sk = {sk}), not one per query (Sq = {sq}): "
                f"{list(r.got.shape)} instead of {[b, sq, d]}.",
            )
    form_stage(title, runs, S_PROJ)


# The mistakes MIXING_PROBES names, declared by this module too: the book's pitfall
# index lists a module's diagnoses in the order it binds them.
PROBED = (TOKENS_NEVER_MIX, BATCH_ENTRIES_LEAK)


def _mha_probe_stage(title: str, runs: Sequence[Run]) -> None:
    """Behaviour any attention has, on the first case's module."""
    probe_self_attention(title, runs[0].extra[0], runs[0].args[0], MIXING_PROBES)


INPUT_GRADIENT_CUT = Diagnosis(
    "gradient does not reach an input",
    "Training sends the gradient back through the attention to query, key and value "
    "(the embeddings, the encoder, the previous block learn from it): compute with "
    "tensor ops on the inputs themselves, no .detach(), .data or torch.no_grad() in "
    "forward.",
    S_PROJ,
)


def _input_gradients(module, xs: tuple, upstream: torch.Tensor):
    """d sum(module(q, k, v) * upstream) / d(q, k, v), None per input autograd cannot
    reach (None in all when the output carries no gradient)."""
    leaves = [x.detach().clone().requires_grad_(True) for x in xs]
    with torch.enable_grad():
        out = module(*leaves)
        if not isinstance(out, torch.Tensor) or not out.requires_grad:
            return (None,) * len(xs)
        return torch.autograd.grad(out, leaves, upstream, allow_unused=True)


def _reference_gradients(ref_args: tuple, upstream: torch.Tensor) -> tuple:
    w, h, *xs = ref_args
    leaves = [x.detach().clone().requires_grad_(True) for x in xs]
    with torch.enable_grad():
        out = reference(w, h, *leaves)
        return torch.autograd.grad(out, leaves, upstream)


def _mha_gradient_stage(title: str, runs: Sequence[Run]) -> None:
    """Right outputs: the gradient must still reach query, key and value as the
    reference's does (measured on the cross-attention case, key != value)."""
    r = next(r for r in runs if r.args[1].size(1) != r.args[0].size(1))
    upstream = randn(*r.want.shape, seed=77, dtype=r.want.dtype)
    got = run(_input_gradients, (r.extra[0], r.args, upstream))
    if isinstance(got, Raised):
        fail(
            title,
            f"your code raised {got!r} while the check took the gradient "
            f"through your module on case {r.label}.",
            S_PROJ,
        )
    wanted = _reference_gradients(r.ref_args, upstream)
    for name, g, want in zip(("query", "key", "value"), got, wanted):
        if g is None:
            INPUT_GRADIENT_CUT.fail(
                title,
                f"On case {r.label} your output is right "
                f"but no gradient reaches `{name}`.",
            )
        diff = describe_difference(g, want, 1e-4, 1e-3)
        if diff:
            INPUT_GRADIENT_CUT.fail(
                title,
                f"On case {r.label} your output is right "
                f"but the gradient reaching `{name}` "
                f"differs from the reference's: {diff}.",
            )


_MHA_STAGES = (
    raised_stage,
    _determinism_stage,
    _mha_form_stage,
    _mha_measure_stage,
    _adds_input_stage,
    _mha_probe_stage,
)


def check_multi_head_attention(cls) -> None:
    """``cls(d_model, n_heads)`` is an nn.Module whose ``forward(query, key, value,
    mask=None)`` maps query [B, Sq, D], key and value [B, Sk, D] to [B, Sq, D]. Its
    projections are found by what they are applied to (any names, order, fused
    layout, orientation; biases where it has them) and given the cases' weights."""
    with single_thread():
        runs = [_mha_run(cls, case) for case in _mha_cases()]
        known = (
            f"Your projections ({runs[0].extra[2].describe()}) were found by what "
            "they are applied to and given the check's weights. "
        )
        with pictured(lambda said: _weights_picture(runs, said)):
            staged(
                "MultiHeadAttention",
                runs,
                MHA_PITFALLS,
                _MHA_STAGES,
                1e-5,
                1e-4,
                known,
                when_right=_mha_gradient_stage,
            )


def check_multi_head_attention_by_hand(cls) -> None:
    """Hidden test: the forward pass is the learner's own, not PyTorch's or the
    reference's attention."""
    module = _build(cls, 16, 4, torch.float32)
    x = randn(2, 5, 16, seed=8)
    check_not_delegated(
        "MultiHeadAttention",
        lambda: module(x, x, x),
        forbidden=[
            "scaled_dot_product_attention",
            "multi_head_attention_forward",
            "tformer_ref",
        ],
        module=module,
    )


seal(__name__)
