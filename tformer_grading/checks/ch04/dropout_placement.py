"""Checks for exercise ``encoder_block`` of chapter 4 (book/ch04_blocks), its dropout:
``check_dropout_placement``. Dropout sits on each sublayer's output, before the
residual add, at the block's rate; the attention and the feed-forward get that rate
too.

Probed in train mode at dropout 1, where every dropped path is exactly zero and each
known wrong placement is recomputed from the learner's own parts (``encoder_block``'s
wirings); measured at a moderate rate, where the zeroed fraction of each tensor the
block makes (read from one traced forward) says where dropout acts: a listed
placement is named only when the measurement agrees with it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import nn

from tformer_ref.attention import MultiHeadAttention

from ...guard.integrity import seal
from ..blocks import (
    attention_sublayers,
    build_block,
    compare_with_roles,
    feed_forward_linears,
    norm_orders,
    post_ln,
    pre_ln,
)
from ..cases import randn
from ..diagnosis import (
    Case,
    Diagnosis,
    Pitfall,
    Raised,
    fail,
    passed,
    quiet,
    run,
    single_threaded,
)
from ..measure.trace import NORMS, FunctionCalls
from .encoder_block import (
    Stream,
    block_cases,
    call_block,
    encoder_wired,
    probe_parts,
    reject_input_mutation,
    trace_block,
)
from .sections import S_DROPOUT, S_RESIDUAL
from .tracing import kept_scale, zeroed_share

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True

# Probed in train mode at dropout 1: every dropped path is then exactly zero.


def _zero(t):
    return torch.zeros_like(t)


def _dropout_after_norm(x, sublayer, norm, drop):  # the seed's Drop(LN(x + f(x)))
    return drop(norm(x + sublayer(x)))


def _pre_ln_input_dropped(x, sublayer, norm, drop):  # the seed's habit in Pre-LN
    return x + sublayer(drop(norm(x)))


def _dropout_on_sum(x, sublayer, norm, drop):  # the residual path dropped too
    return norm(drop(x + sublayer(x)))


def _pre_ln_dropout_on_sum(x, sublayer, norm, drop):
    return drop(x + sublayer(norm(x)))


def _post_ln_no_dropout(x, sublayer, norm, drop):
    return norm(x + sublayer(x))


def _pre_ln_no_dropout(x, sublayer, norm, drop):
    return x + sublayer(norm(x))


def _ff_hidden_dropped(parts, x):
    """The feed-forward with its own hidden layer dropped at p = 1: only the output
    bias is left."""
    bias = parts.ff2.bias
    return bias.expand_as(x) if bias is not None else torch.zeros_like(x)


SEED_DROPOUT = Pitfall(
    "dropout after the norm (the seed's block)",
    "Your block computes Dropout(LayerNorm(x + Sublayer(x))), as the seed's "
    "TransformerBlock does. Dropout belongs on the sublayer's output *before* the "
    "residual add: LayerNorm(x + Dropout(Sublayer(x))) (Vaswani et al. §5.4). After "
    "the norm it zeroes features of the whole residual stream, input included, and "
    "rescales the rest by 1/(1-p).",
    S_DROPOUT,
    encoder_wired(_dropout_after_norm, _dropout_after_norm, drop=_zero),
)
DROPOUT_ON_SUM = Pitfall(
    "dropout on the residual sum",
    "Your block applies dropout to x + Sublayer(x), which drops the residual path too. "
    "Only the sublayer's output is dropped: x + Dropout(Sublayer(...)).",
    S_DROPOUT,
    encoder_wired(_dropout_on_sum, _dropout_on_sum, drop=_zero),
)
NO_DROPOUT = Pitfall(
    "no dropout on the sublayer outputs",
    "Your block never applies dropout to the sublayer outputs (the dropout argument "
    "has no effect there). The paper's regularisation is Dropout(Sublayer(x)) before "
    "each residual add.",
    S_DROPOUT,
    encoder_wired(_post_ln_no_dropout, _post_ln_no_dropout, drop=_zero),
)
ONLY_FF_DROPOUT = Pitfall(
    "no dropout on the sublayer outputs",
    "Your block never applies dropout to the sublayer outputs (only inside the "
    "feed-forward). The paper's regularisation is Dropout(Sublayer(x)) before each "
    "residual add.",
    S_DROPOUT,
    encoder_wired(
        _post_ln_no_dropout, _post_ln_no_dropout, drop=_zero, ff=_ff_hidden_dropped
    ),
)

POST_DROPOUT_PITFALLS = (SEED_DROPOUT, DROPOUT_ON_SUM, NO_DROPOUT, ONLY_FF_DROPOUT)
PRE_DROPOUT_PITFALLS = (
    replace(
        SEED_DROPOUT,
        impl=encoder_wired(_pre_ln_input_dropped, _pre_ln_input_dropped, drop=_zero),
    ),
    replace(
        DROPOUT_ON_SUM,
        impl=encoder_wired(_pre_ln_dropout_on_sum, _pre_ln_dropout_on_sum, drop=_zero),
    ),
    replace(
        NO_DROPOUT,
        impl=encoder_wired(_pre_ln_no_dropout, _pre_ln_no_dropout, drop=_zero),
    ),
    replace(
        ONLY_FF_DROPOUT,
        impl=encoder_wired(
            _pre_ln_no_dropout, _pre_ln_no_dropout, drop=_zero, ff=_ff_hidden_dropped
        ),
    ),
)

# Post-LN first (the seed's block), then Pre-LN: each one is diagnosed on its own.
DROPOUT_ROUNDS = (
    (
        "Post-LN",
        False,
        encoder_wired(post_ln, post_ln, drop=_zero),
        POST_DROPOUT_PITFALLS,
        (
            (16, 4, 40, 3, 5, "pad", torch.float32),
            (12, 2, 20, 2, 4, None, torch.float64),
        ),
    ),
    (
        "Pre-LN",
        True,
        encoder_wired(pre_ln, pre_ln, drop=_zero),
        PRE_DROPOUT_PITFALLS,
        (
            (16, 4, 32, 2, 5, "pad", torch.float32),
            (8, 2, 24, 3, 3, None, torch.float32),
        ),
    ),
)


# Then measured at a moderate p in train mode: the fraction of each branch's activations
# that came out zeroed, and the scale of the kept ones.

P_PROBE = 0.3
DROPOUT_PROBE_CONFIG = ((16, 4, 32, 4, 8, None, torch.float64),)

DROPOUT_MEASURED = Diagnosis(
    "dropout in the wrong place or at the wrong rate",
    "Dropout(p) acts on each sublayer's output, before the residual add, at the "
    "block's dropout rate: it zeroes a fraction p of that branch's activations and "
    "scales the others by 1/(1-p) (nn.Dropout(dropout) or F.dropout(t, dropout, "
    "self.training)); the input, the residual path, the residual sum and the "
    "normalised stream are never dropped.",
    S_DROPOUT,
)


def _zeroed(t) -> float:
    return float((t == 0).double().mean())


def _dropout_observations(st, norm_first, p=P_PROBE):
    """[(key, what, tensor, expected zeroed fraction, tensor before dropout)] in the
    order the block computes them; ``key`` says which kind of placement a departure
    there shows."""
    attn = st.first("attn")
    norms = [e for e in st.norms() if st.index(e) > st.index(attn)]
    lin1, lin2 = st.first("linear1"), st.first("linear2")
    if not norms or (not norm_first and len(norms) < 2):
        return []
    s1 = norms[0].inp
    h = (lin1.inp if lin1 is not None else norms[0].out) if not norm_first else s1
    s2 = st.y if norm_first else norms[1].inp
    f = lin2.out if lin2 is not None else None
    ff_in = (
        []
        if lin1 is None
        else [
            (
                "after_norm" if not norm_first else "input",
                "the feed-forward's input",
                lin1.inp,
                0,
                None,
            )
        ]
    )
    ff_res = (
        []
        if f is None
        else [
            (
                "residual",
                "the residual path the feed-forward's output is added to",
                s2 - f,
                0,
                None,
            )
        ]
    )
    # Everything that is never dropped first, then the two branches.
    return [
        ("input", "the attention's query input", attn.args[0], 0, None),
        ("sum", "the residual sum x + attention", s1, 0, None),
        *ff_in,
        ("sum", "the residual sum h + feed-forward", s2, 0, None),
        ("after_norm", "the block's output", st.y, 0, None),
        (
            "residual",
            "the residual path the attention's output is added to",
            s1 - attn.out,
            0,
            None,
        ),
        *ff_res,
        ("branch", "the attention branch (what is added to x)", s1 - st.x, p, attn.out),
        ("branch", "the feed-forward branch (what is added to h)", s2 - h, p, f),
    ]


@dataclass(frozen=True)
class Finding:
    """The first measured departure: its kind (``key``) and what the learner reads."""

    key: str
    detail: str
    title: str

    def fail(self):
        DROPOUT_MEASURED.fail(self.title, self.detail)


def _departure(key, what, t, want, before, name, p=P_PROBE):
    """A Finding when ``t``'s zeroed fraction (or its kept scale) is off, else None."""
    got = _zeroed(t)
    where = f"In the {name} block at p = {p} in train mode"
    if abs(got - want) > (0.1 if want else 0.05):
        expected = f"about {want:.0%}" if want else "none"
        kind = "branch_none" if want and got < 0.02 else key
        return kind, f"{where}, {got:.0%} of {what} were zeroed, expected {expected}."
    scale = kept_scale(t, before) if want else None
    if scale is not None and abs(scale * (1 - p) - 1) > 0.02:
        return "scale", (
            f"{where}, the kept activations of {what} were multiplied by "
            f"{scale:.3g}, expected 1/(1-p) = {1 / (1 - p):.3g}."
        )
    return None


def _measure_dropout(title, cls, norm_first, p=P_PROBE):
    """At dropout p = 0.3 in train mode, the first observed tensor whose zeroed
    fraction (or kept scale) is off, as a Finding; None when all are as expected or
    the block cannot be observed."""
    name = "Pre-LN" if norm_first else "Post-LN"
    case = block_cases(cls, norm_first, p, True, DROPOUT_PROBE_CONFIG, title)[0]
    module, x, mask, parts = case.make()
    torch.manual_seed(7)
    try:
        events, y = trace_block(module, x, mask, parts)
    except Exception as exc:  # noqa: BLE001 - the learner's code may raise anything
        fail(
            title,
            f"your block raised {Raised(exc)!r} in train mode on case {case.label}.",
        )
    st = Stream(events, x, y, parts)
    if st.first("attn") is None or not isinstance(y, torch.Tensor):
        return None
    for key, what, t, want, before in _dropout_observations(st, norm_first, p):
        found = _departure(key, what, t, want, before, name, p)
        if found:
            return Finding(found[0], found[1], title)
    return None


# The placements each listed pitfall shows at p = 0.3: it is named only when the
# measured first departure is one of them.
DROPOUT_SIGNATURES = (
    (SEED_DROPOUT.name, frozenset({"after_norm", "input"})),
    (DROPOUT_ON_SUM.name, frozenset({"sum"})),
    (NO_DROPOUT.name, frozenset({"branch_none"})),
    (ONLY_FF_DROPOUT.name, frozenset({"branch_none"})),
)


def _consistent(pitfalls, finding):
    """The pitfalls whose placement agrees with the measured ``finding``."""
    if finding is None:
        return pitfalls
    return tuple(
        p for p in pitfalls if finding.key in dict(DROPOUT_SIGNATURES).get(p.name, ())
    )


#: A second rate: a dropout constant that happens to equal P_PROBE is caught there.
P_SECOND = 0.5

ATTENTION_DROPOUT = Diagnosis(
    "the attention's dropout is not the block's rate",
    "The exercise asks for MultiHeadAttention(d_model, n_heads, dropout=dropout): the "
    "attention drops its weights at the block's rate too (its `dropout` argument, "
    "default 0.0, is the rate on the attention weights).",
    S_DROPOUT,
)


def _attention_rate(title, cls, p):
    """The rate the block's MultiHeadAttention drops its weights at (its ``dropout``)
    when the block is built with ``dropout=p``; None when it cannot be seen."""
    module = build_block(title, cls, (16, 4, 32, p, False), seed=0)
    attns = [m for m in module.modules() if isinstance(m, MultiHeadAttention)]
    rate = getattr(attns[0], "dropout", None) if len(attns) == 1 else None
    return float(rate) if isinstance(rate, (int, float)) else None


FF_RATE_NOT_PASSED = Diagnosis(
    "the feed-forward's dropout is not the block's rate",
    "The exercise asks for your FeedForward(d_model, d_ff, dropout): the block hands "
    "its rate on, and FeedForward(d_model, d_ff) leaves it at the default 0.0, so "
    "the hidden layer is never dropped.",
    S_DROPOUT,
)


def _hidden_share_zeroed(module, ff1, ff2, *inputs) -> float | None:
    """In train mode, :func:`zeroed_share` of ``module(*inputs)``'s feed-forward (its
    Linears ``ff1`` and ``ff2``, recorded as the tracer records them); None when the
    two were not both run."""
    events = []
    linears = {"linear1": ff1.weight, "linear2": ff2.weight}
    with torch.random.fork_rng(devices=[]), torch.no_grad(), quiet():
        torch.manual_seed(0)
        module.train()
        with FunctionCalls(events, NORMS, linears):
            run(module, inputs)
    first = [e.out for e in events if e.kind == "linear1"]
    second = [e.inp for e in events if e.kind == "linear2"]
    if not first or not second or first[0].shape != second[0].shape:
        return None
    return zeroed_share(first[0], second[0])


def _check_ff_rate(title, cls):
    """The block gives its FeedForward its rate: measured when the learner's
    FeedForward, built on its own with that rate, drops its hidden layer at all (the
    feed-forward exercise allows one without dropout)."""
    p, d, f = P_PROBE, 16, 32
    block = build_block(title, cls, (d, 4, f, p, False), seed=0)
    ff1, ff2 = feed_forward_linears(
        title, block, d, f, attention_sublayers(title, block, 1, S_RESIDUAL)
    )
    holder = min(
        (
            m
            for m in block.modules()
            if m is not block and ff1 in set(m.modules()) and ff2 in set(m.modules())
        ),
        key=lambda m: sum(1 for _ in m.modules()),
        default=None,
    )
    if holder is None or type(holder).__module__.startswith("torch."):
        return
    x = randn(8, 10, d, seed=3)
    alone = run(type(holder), (d, f, p))
    if not isinstance(alone, nn.Module):
        return
    own = [m for m in alone.modules() if isinstance(m, nn.Linear)]
    if len(own) != 2:
        return
    rate_alone = _hidden_share_zeroed(alone, own[0], own[1], x)
    rate_inside = _hidden_share_zeroed(block, ff1, ff2, x)
    if rate_alone is None or rate_inside is None or rate_alone < p / 2:
        return
    if rate_inside < p / 2:
        FF_RATE_NOT_PASSED.fail(
            title,
            f"Your {type(holder).__name__}({d}, {f}, {p}) on its own drops "
            f"{rate_alone:.0%} of its hidden activations in train mode; inside your "
            f"block built with dropout={p} it drops {rate_inside:.0%}.",
        )


def _check_attention_rate(title, cls):
    """The attention is built with the block's rate, at both probe rates."""
    for p in (P_PROBE, P_SECOND):
        rate = _attention_rate(title, cls, p)
        if rate is not None and abs(rate - p) > 1e-9:
            ATTENTION_DROPOUT.fail(
                title,
                f"Built with dropout={p}, your block's "
                "MultiHeadAttention drops its attention "
                f"weights at p = {rate:g}.",
            )


@single_threaded
def check_dropout_placement(cls, layouts=("Post-LN", "Pre-LN")) -> None:
    """Dropout sits on each sublayer's output, before the residual add, in each of
    ``layouts`` (the own-model exercise asks for the Post-LN block alone).

    Measured at ``dropout = 0.3`` in train mode (the zeroed fraction of each branch
    and of everything else, the kept activations' scale), and probed at ``dropout =
    1`` (every dropped path is then exactly zero: Post-LN gives norm2(norm1(x)),
    Pre-LN x), where a known wrong placement consistent with the measurement is
    named."""
    title = "EncoderBlock dropout"
    probe_parts(cls, title)
    rounds = [r for r in DROPOUT_ROUNDS if r[0] in layouts]
    for _, norm_first, *_ in rounds:
        reject_input_mutation(title, cls, norm_first, P_PROBE)
    for name, norm_first, reference, pitfalls, configs in rounds:
        finding = _measure_dropout(title, cls, norm_first) or _measure_dropout(
            title, cls, norm_first, P_SECOND
        )
        cases = [
            Case(f"{case.label}, {name}, dropout=1, train mode", case.make)
            for case in block_cases(cls, norm_first, 1.0, True, configs, title)
        ]
        compare_with_roles(
            title,
            cases,
            call_block,
            reference,
            _consistent(pitfalls, finding),
            norm_orders(2),
            announce=False,
            explain=finding and finding.fail,
        )
        if finding is not None:
            finding.fail()
    _check_attention_rate(title, cls)
    _check_ff_rate(title, cls)
    passed(
        title,
        "on each sublayer's output, before the residual add "
        f"({' and '.join(layouts)}), at the block's rate: at p = 0.3 and 0.5 each "
        "branch loses "
        "about 30 % and 50 %, and the attention drops its weights at p",
    )


seal(__name__)
