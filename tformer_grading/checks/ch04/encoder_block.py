"""Checks for exercise ``encoder_block`` of chapter 4 (book/ch04_blocks):
``EncoderBlock(d_model, n_heads, d_ff, dropout, norm_first)``, ``forward(x [B, S, D],
mask=None) -> [B, S, D]``, Post-LN or Pre-LN, and the hidden "written by hand" check
(its dropout placement is checked in ``dropout_placement``, its behaviour in
``block_behaviour``, its norms read in ``norms``).

The block is built from ``tformer_ref.attention.MultiHeadAttention``, ``nn.LayerNorm``
(or ``F.layer_norm``), the learner's feed-forward and dropout. The checks recompute the
block from the learner's own parts (see ``blocks``), so any right wiring passes whatever
its names, helpers or registration order, and each known wrong wiring is named. When
none is, the block is run once more while its parts are watched (a forward hook on the
attention, the ``layer_norm`` and feed-forward ``linear`` calls recorded as they happen)
and the first stage that departs from the wiring is reported, with what it computed
instead: the residual sum's coefficients, which tensor a sublayer read, the activation
between the Linear layers, the fraction of a branch dropout zeroed.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch
from torch import nn

from tformer_ref.attention import MultiHeadAttention
from tformer_ref.device import get_device

from ...guard.integrity import seal
from ..blocks import (
    Parts,
    attention_sublayers,
    build_block,
    check_block_not_delegated,
    compare_with_roles,
    feed_forward_linears,
    keep,
    norm_orders,
    post_ln,
    pre_ln,
    randomise_norms,
    reject_batchnorm,
)
from ..cases import randn
from ..diagnosis import (
    UNEXPLAINED,
    Case,
    CheckFailure,
    Diagnosis,
    Pitfall,
    Raised,
    fail,
    quiet,
    run,
    single_threaded,
)
from ..measure.fit import describe_sum, same_sum
from ..measure.fit import weighted_sum as fit_sum
from ..measure.probes import observe, share_changed
from ..measure.sizes import named
from ..measure.trace import NORMS, Trace, trace
from .feed_forward import FF_ACTIVATION, FF_WIDTH
from .norms import (
    BATCHNORM,
    NORM_EPS,
    eps_changes_output,
    learner_norms,
)
from .sections import (
    S_PADDING,
    S_PLACEMENT,
    S_RESIDUAL,
)
from .tracing import (
    DROPOUT_IN_EVAL,
    describe_function,
    unrecognised_map,
)

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True

# ------------------------------------------------------------------------- EncoderBlock

MISSING_NORM = Diagnosis(
    "a sublayer without its LayerNorm",
    "Each sublayer has its own LayerNorm: Post-LN x = LayerNorm(x + Sublayer(x)), "
    "Pre-LN x = x + Sublayer(LayerNorm(x)).",
    S_PLACEMENT,
)
WRONG_INPUT = Diagnosis(
    "a sublayer reads the wrong tensor",
    "Post-LN: the attention reads the block's input x and the feed-forward the first "
    "sublayer's result; Pre-LN: each sublayer reads the LayerNorm of the residual "
    "stream.",
    S_PLACEMENT,
)
RESIDUAL_SUM = Diagnosis(
    "the residual sum has the wrong terms",
    "Each sublayer adds its output to its own input exactly once, unscaled: x + "
    "Dropout(Sublayer(...)), the sum normalised after (Post-LN) or kept as the stream "
    "(Pre-LN).",
    S_RESIDUAL,
)
WRONG_OUTPUT = Diagnosis(
    "the block returns the wrong tensor",
    "The block returns the result of its last sublayer: Post-LN LayerNorm(h + "
    "FF(h)), Pre-LN h + FF(LayerNorm(h)).",
    S_PLACEMENT,
)
INPUT_MODIFIED = Diagnosis(
    "the block modifies its input in place",
    "An in-place op on x (x += ..., x.add_(...)) changes the caller's tensor, which "
    "the caller may still use (and autograd may need): write x = x + ... instead.",
    S_RESIDUAL,
)
SUBLAYER_ORDER = Diagnosis(
    "the sublayers in the wrong order",
    "The encoder block runs self-attention first (tokens exchange information), then "
    "the position-wise feed-forward.",
    S_PLACEMENT,
)
MASK_LOST = Diagnosis(
    "the mask does not reach the attention",
    "forward(x, mask) passes the boolean keep-mask (True = attend) on unchanged: "
    "attn(x, x, x, mask=mask).",
    S_PADDING,
)
NOT_SELF_ATTENTION = Diagnosis(
    "query, key and value are not the same tensor",
    "The encoder's attention is self-attention: query, key and value are all the "
    "sublayer's input.",
    S_PLACEMENT,
)


def _check_ff_width(title, module, d_model, d_ff):
    """A block whose feed-forward has another hidden width than d_ff."""
    inside = tuple(
        n + "." for n, m in module.named_modules() if isinstance(m, MultiHeadAttention)
    )
    shapes = [
        tuple(m.weight.shape)
        for n, m in module.named_modules()
        if isinstance(m, nn.Linear) and not n.startswith(inside)
    ]
    widths = sorted({o for o, i in shapes if i == d_model and (d_model, o) in shapes})
    if len(shapes) == 2 and len(widths) == 1 and widths[0] != d_ff:
        FF_WIDTH.fail(
            title,
            f"Built with d_model={d_model}, d_ff={d_ff}, your "
            "block's feed-forward has a hidden layer of "
            f"{widths[0]} features.",
        )


def trace_block(module, x, mask, parts_or_weights):
    """Run ``module(x [B, S, D], mask)`` without gradients and record its attention
    calls ("attn": query, key, value, mask), its norm calls and its feed-forward's
    linear calls ("linear1", "linear2": the weights of ``parts_or_weights``) in order:
    (events, output [B, S, D])."""
    weights = parts_or_weights
    if isinstance(weights, Parts):
        weights = (weights.ff1.weight, weights.ff2.weight)
    attns = [m for m in module.modules() if isinstance(m, MultiHeadAttention)]
    linears = {"linear1": weights[0], "linear2": weights[1]}
    watched = [("attn", m) for m in attns]
    with torch.no_grad(), quiet(), trace(watched, NORMS, linears) as events:
        y = module(x, mask)
    return events, y


def discover(title, module, x, mask, d_ff, norm_first=None) -> Parts:
    """The learner's parts: the attention and the feed-forward's Linear layers by type
    and shape, the norms by watching one eval-mode forward (module or F.layer_norm).
    With ``norm_first``, a wrong number of norms is explained by the stages."""
    reject_batchnorm(title, module, BATCHNORM)
    attns = attention_sublayers(title, module, 1, S_RESIDUAL)
    _check_ff_width(title, module, x.size(-1), d_ff)
    ff1, ff2 = feed_forward_linears(title, module, x.size(-1), d_ff, attns)
    training = module.training
    module.eval()
    try:
        events, y = trace_block(module, x, mask, (ff1.weight, ff2.weight))
    except Exception as exc:  # noqa: BLE001 - the learner's code may raise anything
        fail(
            title,
            f"your block raised {Raised(exc)!r} while the check ran it on x "
            f"[{named(B=x.size(0), S=x.size(1), D=x.size(2))}] (d_ff={d_ff}), "
            f"{x.dtype}, mask "
            f"{None if mask is None else list(mask.shape)}.",
        )
    found = Parts((attns[0][1],), (), ff1, ff2)
    explain = None
    if norm_first is not None:

        def explain():
            _explain_stream(
                title,
                Stream(events, x, y, found),
                mask,
                norm_first,
                f"x {list(x.shape)}, {x.dtype}",
            )

    norms = learner_norms(title, module, events, x, mask, explain)
    module.train(training)
    return Parts((attns[0][1],), norms, ff1, ff2)


def encoder_wired(attn_wiring, ff_wiring, drop=keep, ff=Parts.ff):
    """The encoder block recomputed from the learner's own parts, its attention wrapped
    by ``attn_wiring`` and its feed-forward ``ff(parts, h)`` by ``ff_wiring``:
    ``block(order, module, x, mask, parts)``, ``order`` saying which norm serves which
    sublayer."""

    def block(order, module, x, mask, parts):
        parts = parts.in_role(order)
        attn = parts.attns[0]
        x = attn_wiring(x, lambda h: attn(h, h, h, mask=mask), parts.norms[0], drop)
        return ff_wiring(x, lambda h: ff(parts, h), parts.norms[1], drop)

    return block


def _mask(kind, b, s, device):
    if kind == "pad":  # sequence i keeps its first 2 + i positions
        lengths = (torch.arange(b) % s + 2).clamp(max=s)
        kept = torch.arange(s)[None, :] < lengths[:, None]
        return kept[:, None, None, :].to(device)
    if kind == "causal":
        return torch.ones(s, s, dtype=torch.bool, device=device).tril()[None, None]
    return None


# (D, H, d_ff, B, S, mask, dtype)
BLOCK_CONFIGS = (
    (16, 4, 40, 3, 5, "pad", torch.float32),
    (24, 3, 48, 2, 6, None, torch.float32),
    (12, 2, 20, 2, 4, "causal", torch.float64),
    (16, 4, 32, 4, 5, "pad", torch.float32),
)
#: The case whose stages are measured when a block is wrong (float64: exact fits).
ANALYSIS_CONFIG = ((16, 4, 40, 3, 5, "pad", torch.float64),)


def block_cases(
    cls,
    norm_first,
    dropout=0.1,
    train=False,
    configs=BLOCK_CONFIGS,
    title="EncoderBlock",
):
    cases = []
    for i, (d, h, f, b, s, mask_kind, dtype) in enumerate(configs):

        def make(d=d, h=h, f=f, b=b, s=s, mask_kind=mask_kind, dtype=dtype, i=i):
            torch.manual_seed(1000 + i)
            args = (d, h, f, dropout, norm_first)
            module = build_block(title, cls, args, dtype)
            x = randn(b, s, d, seed=1100 + i, dtype=dtype, device=get_device())
            mask = _mask(mask_kind, b, s, get_device())
            parts = discover(title, module, x, mask, f, norm_first)
            randomise_norms(parts, seed=i)
            module.train(train)
            return module, x, mask, parts

        cases.append(
            Case(
                f"H={h}, d_ff={f}, x [{named(B=b, S=s, D=d)}], mask {mask_kind}, "
                f"{dtype}",
                make,
            )
        )
    return cases


POST_LN_BLOCK = encoder_wired(post_ln, post_ln)
PRE_LN_BLOCK = encoder_wired(pre_ln, pre_ln)


def post_ln_no_residual(x, sublayer, norm, drop):  # LayerNorm(Dropout(Sublayer(x)))
    return norm(drop(sublayer(x)))


def _pre_ln_no_residual(x, sublayer, norm, drop):  # Dropout(Sublayer(LayerNorm(x)))
    return drop(sublayer(norm(x)))


def _norm_on_sublayer(x, sublayer, norm, drop):  # x + LayerNorm(Sublayer(x))
    return x + norm(drop(sublayer(x)))


def _normed_stream(x, sublayer, norm, drop):  # the residual stream replaced by its norm
    h = norm(x)
    return h + drop(sublayer(h))


_MISSING_RESIDUAL = (
    "The block never adds its input back: each sublayer must compute x + "
    "Sublayer(...), so that the input (and its gradient) passes through unchanged next "
    "to the sublayer. Without it a deep stack has no identity path and gradients "
    "vanish."
)

MISSING_RESIDUAL = Pitfall(
    "missing residual",
    _MISSING_RESIDUAL,
    S_RESIDUAL,
    encoder_wired(post_ln_no_residual, post_ln_no_residual),
)
NO_RESIDUAL_AROUND_ATTENTION = Pitfall(
    "missing residual (around the attention)",
    _MISSING_RESIDUAL,
    S_RESIDUAL,
    encoder_wired(post_ln_no_residual, post_ln),
)
NO_RESIDUAL_AROUND_FF = Pitfall(
    "missing residual (around the feed-forward)",
    _MISSING_RESIDUAL,
    S_RESIDUAL,
    encoder_wired(post_ln, post_ln_no_residual),
)
PRE_LN_FOR_POST_LN = Pitfall(
    "LayerNorm in the wrong place (Pre-LN where Post-LN was asked)",
    "With norm_first=False the block is the paper's Post-LN: x = LayerNorm(x + "
    "Dropout(Sublayer(x))). You normalised the sublayer's input instead (Pre-LN).",
    S_PLACEMENT,
    PRE_LN_BLOCK,
)
POST_LN_FOR_PRE_LN = Pitfall(
    "LayerNorm in the wrong place (Post-LN where Pre-LN was asked)",
    "With norm_first=True the block is Pre-LN: x = x + "
    "Dropout(Sublayer(LayerNorm(x))). Your block normalises after the residual add "
    "(Post-LN): does it read its norm_first argument?",
    S_PLACEMENT,
    POST_LN_BLOCK,
)
NORM_ON_SUBLAYER = Pitfall(
    "LayerNorm in the wrong place (x + LayerNorm(sublayer))",
    "You normalised the sublayer's output and then added the input: x + "
    "LayerNorm(Sublayer(x)). The norm goes around the sum in Post-LN, LayerNorm(x + "
    "Sublayer(x)), or on the sublayer's input in Pre-LN, x + Sublayer(LayerNorm(x)).",
    S_PLACEMENT,
    encoder_wired(_norm_on_sublayer, _norm_on_sublayer),
)
NORMED_STREAM = Pitfall(
    "LayerNorm in the wrong place (the residual stream normalised)",
    "You replaced the residual stream by its norm (h = LayerNorm(x); x = h + "
    "Sublayer(h)). In Pre-LN only the sublayer sees the normalised copy: x = x + "
    "Sublayer(LayerNorm(x)).",
    S_PLACEMENT,
    encoder_wired(_normed_stream, _normed_stream),
)

POST_PITFALLS = (
    MISSING_RESIDUAL,
    NO_RESIDUAL_AROUND_ATTENTION,
    NO_RESIDUAL_AROUND_FF,
    PRE_LN_FOR_POST_LN,
    NORM_ON_SUBLAYER,
    NORMED_STREAM,
)
PRE_PITFALLS = (
    POST_LN_FOR_PRE_LN,
    replace(
        MISSING_RESIDUAL, impl=encoder_wired(_pre_ln_no_residual, _pre_ln_no_residual)
    ),
    replace(
        NO_RESIDUAL_AROUND_ATTENTION, impl=encoder_wired(_pre_ln_no_residual, pre_ln)
    ),
    replace(NO_RESIDUAL_AROUND_FF, impl=encoder_wired(pre_ln, _pre_ln_no_residual)),
    NORM_ON_SUBLAYER,
    NORMED_STREAM,
)


def call_block(module, x, mask, parts):
    return module(x, mask)


def reject_input_mutation(title, cls, norm_first, dropout=0.1):
    """The block must leave the caller's x unchanged (no ``x += ...`` on it)."""
    case = block_cases(
        cls, norm_first, dropout, configs=BLOCK_CONFIGS[:1], title=title
    )[0]
    module, x, mask, parts = case.make()
    before = x.clone()
    run(call_block, (module, x, mask, parts))
    if not torch.equal(before, x):
        INPUT_MODIFIED.fail(
            title,
            f"On case {case.label}, the x passed to your block "
            "changed during the call.",
        )


X = "x"
ATTN = "the attention's output"
FF_OUT = "the feed-forward's output"


def _ln_name(k):
    return f"LayerNorm call {k}'s output"


@dataclass(eq=False)
class Stream(Trace):
    """One observed forward of a block: its events in order, the tensors it made under
    the names its messages use, and when each became known (event index)."""

    x: torch.Tensor
    y: object
    parts: Parts
    known: dict = field(default_factory=dict)
    when: dict = field(default_factory=dict)

    def __post_init__(self):
        self.known[X], self.when[X] = self.x, -1
        k = 0
        for i, e in enumerate(self.events):
            name = {"attn": ATTN, "linear2": FF_OUT}.get(e.kind)
            if e.kind == "layer_norm":
                k += 1
                e.info["call"] = f"LayerNorm call {k}"
                name = _ln_name(k)
            if name is None or name in self.known:
                continue
            # A tensor computed twice (norm1(x) called for q, k and v) keeps one name.
            same = [
                n
                for n, t in self.known.items()
                if t.shape == e.out.shape and torch.equal(t, e.out)
            ]
            e.info["name"] = same[0] if same else name
            if not same:
                self.known[name], self.when[name] = e.out, i

    def norms(self):
        return self.of("layer_norm")

    def before(self, event):
        """The named tensors known before ``event`` ran (all of them for None)."""
        i = len(self.events) if event is None else self.index(event)
        return {n: t for n, t in self.known.items() if self.when[n] < i}

    def with_computed_ff(self, named):
        """Without a watched feed-forward (matmul by hand), its output on every known
        tensor and on x + attention, as candidates."""
        if FF_OUT in self.known:
            return named
        extra = dict(named)
        inputs = {n: t for n, t in named.items() if n != ATTN}
        if ATTN in named:
            inputs[f"{X} + {ATTN}"] = self.x + named[ATTN]
        for n, t in inputs.items():
            with torch.no_grad():
                extra[f"the feed-forward of {n}"] = self.parts.ff(t)
        return extra

    def ff_name(self, of):
        return FF_OUT if FF_OUT in self.known else f"the feed-forward of {of}"


def _stage(title, what, target, named, expected, diagnosis, label):
    """Fail when ``target`` is not the weighted sum ``expected`` of the ``named``
    tensors, saying what weighted sum it is (or that it is none, as a fallback)."""
    coefs = fit_sum(target, named)
    if coefs is not None and same_sum(coefs, expected):
        return
    want = describe_sum(expected)
    if coefs is None:
        fail(
            title,
            f"on case {label}, {what} should be {want}, but it is no weighted "
            f"sum of {', '.join(named)}. It {UNEXPLAINED}; this is the first "
            "stage that differs: compare that step with the lesson.",
            diagnosis.section,
        )
    diagnosis.fail(
        title, f"On case {label}, {what} is {describe_sum(coefs)}; expected {want}."
    )


def _stage_mask(title, event, mask, label):
    got = event.args[3]
    if mask is None:
        return
    if isinstance(got, torch.Tensor) and got.dtype != torch.bool:
        MASK_LOST.fail(
            title,
            f"On case {label}, your attention received a {got.dtype} "
            "mask; it takes the boolean keep-mask you were given.",
        )
    if got is None:
        MASK_LOST.fail(
            title,
            f"On case {label}, the block was given a padding mask "
            "but its attention was called with mask=None.",
        )
    try:
        g, m = torch.broadcast_tensors(got.bool(), mask)
        same_mask, inverted = torch.equal(g, m), torch.equal(g, ~m)
    except (RuntimeError, TypeError, AttributeError):
        same_mask = inverted = False
    if not same_mask:
        what = "the inverted mask (~mask)" if inverted else "another mask"
        shape = list(getattr(got, "shape", []))
        MASK_LOST.fail(
            title,
            f"On case {label}, your attention received {what} "
            f"(shape {shape}), not the mask the block was given.",
        )


def _stage_attention(title, st, event, expected, mask, label):
    named = st.before(event)
    for i, what in enumerate(("the attention's query", "its key", "its value")):
        diag = WRONG_INPUT if i == 0 else NOT_SELF_ATTENTION
        _stage(title, what, event.args[i], named, expected, diag, label)
    _stage_mask(title, event, mask, label)


def _stage_activation(title, st, label):
    first, second = st.first("linear1"), st.first("linear2")
    if first is None or second is None:
        return
    act = describe_function(first.out, second.inp)
    if act != "ReLU":
        act = act or unrecognised_map(first.out, second.inp)
        FF_ACTIVATION.fail(
            title,
            f"On case {label}, between your feed-forward's "
            f"Linear layers the hidden features go through "
            f"{act}.",
        )


def _stage_norm_eps(title, st, label):
    for e in st.norms():
        finding = eps_changes_output(e)
        if finding:
            NORM_EPS.fail(title, f"On case {label}: {finding[0].lower()}{finding[1:]}")


def _stage_order(title, st, label):
    """The attention sublayer runs before the feed-forward."""
    attn, lin1 = st.first("attn"), st.first("linear1")
    if lin1 is not None and st.index(lin1) < st.index(attn):
        SUBLAYER_ORDER.fail(
            title,
            f"On case {label}, your block ran its feed-forward before its attention.",
        )


def _missing_norm(title, sublayer, where, label):
    """No norm call where the wiring has the ``sublayer``'s norm."""
    wiring = "Post-LN" if where.startswith("after") else "Pre-LN"
    MISSING_NORM.fail(
        title,
        f"On case {label}, no LayerNorm runs {where}, where "
        f"{wiring} puts the {sublayer} sublayer's norm.",
    )


def _stages_post_ln(title, st, mask, label):
    """Post-LN: attention(x), LN1(x + a), FF(LN1), LN2(LN1 + f), output LN2."""
    attn = st.first("attn")
    _stage_attention(title, st, attn, {X: 1}, mask, label)
    after = [e for e in st.norms() if st.index(e) > st.index(attn)]
    if not after:
        _missing_norm(title, "attention", "after the attention", label)
    n1 = after[0]
    _stage(
        title,
        f"the input of the LayerNorm after the attention ({n1.info['call']})",
        n1.inp,
        st.before(n1),
        {X: 1, ATTN: 1},
        RESIDUAL_SUM,
        label,
    )
    lin1 = st.first("linear1")
    if lin1 is not None:
        _stage(
            title,
            "the feed-forward's input",
            lin1.inp,
            st.before(lin1),
            {n1.info["name"]: 1},
            WRONG_INPUT,
            label,
        )
    _stage_activation(title, st, label)
    if len(after) < 2:
        _missing_norm(title, "feed-forward", "after the feed-forward", label)
    n2 = after[1]
    _stage(
        title,
        f"the input of the LayerNorm after the feed-forward ({n2.info['call']})",
        n2.inp,
        st.with_computed_ff(st.before(n2)),
        {n1.info["name"]: 1, st.ff_name(n1.info["name"]): 1},
        RESIDUAL_SUM,
        label,
    )
    _stage(
        title,
        "the block's output",
        st.y,
        st.with_computed_ff(st.before(None)),
        {n2.info["name"]: 1},
        WRONG_OUTPUT,
        label,
    )


def _stages_pre_ln(title, st, mask, label):
    """Pre-LN: LN1(x), attention(LN1), LN2(x + a), FF(LN2), output x + a + f."""
    attn = st.first("attn")
    before = [e for e in st.norms() if st.index(e) < st.index(attn)]
    if not before:
        _missing_norm(title, "attention", "before the attention", label)
    n1 = before[-1]
    _stage(
        title,
        f"the input of the LayerNorm before the attention ({n1.info['call']})",
        n1.inp,
        st.before(n1),
        {X: 1},
        WRONG_INPUT,
        label,
    )
    _stage_attention(title, st, attn, {n1.info["name"]: 1}, mask, label)
    after = [e for e in st.norms() if st.index(e) > st.index(attn)]
    if not after:
        _missing_norm(title, "feed-forward", "before the feed-forward", label)
    n2 = after[0]
    _stage(
        title,
        f"the input of the LayerNorm before the feed-forward ({n2.info['call']})",
        n2.inp,
        st.before(n2),
        {X: 1, ATTN: 1},
        RESIDUAL_SUM,
        label,
    )
    lin1 = st.first("linear1")
    if lin1 is not None:
        _stage(
            title,
            "the feed-forward's input",
            lin1.inp,
            st.before(lin1),
            {n2.info["name"]: 1},
            WRONG_INPUT,
            label,
        )
    _stage_activation(title, st, label)
    _stage(
        title,
        "the block's output",
        st.y,
        st.with_computed_ff(st.before(None)),
        {X: 1, ATTN: 1, st.ff_name(n2.info["name"]): 1},
        RESIDUAL_SUM,
        label,
    )


def _raise_on_learner_error(title, cases):
    for case in cases:
        got = run(call_block, case.make())
        if isinstance(got, Raised):
            fail(
                title,
                f"your block raised {got!r} while the check ran case {case.label}.",
            )


def _explain_block(title, cls, norm_first):
    """Called when no known wiring reproduces the learner's block: report a learner
    error on any case, else the first stage of the float64 case that departs."""
    _raise_on_learner_error(title, block_cases(cls, norm_first, title=title))
    case = block_cases(cls, norm_first, configs=ANALYSIS_CONFIG, title=title)[0]
    module, x, mask, parts = case.make()
    before = x.clone()
    events, y = trace_block(module, x, mask, parts)
    if not torch.equal(before, x):
        INPUT_MODIFIED.fail(
            title,
            f"On case {case.label}, the x passed to your "
            "block changed during the call.",
        )
    if not isinstance(y, torch.Tensor):
        WRONG_OUTPUT.fail(
            title,
            f"On case {case.label}, your block returned a "
            f"{type(y).__name__}, not the tensor [B, S, D].",
        )
    if not observe(title, deterministic_in_eval, module, x, mask, who="your block"):
        DROPOUT_IN_EVAL.fail(
            title,
            f"On case {case.label}, two calls in eval mode gave different outputs.",
        )
    _explain_stream(title, Stream(events, x, y, parts), mask, norm_first, case.label)


def _explain_stream(title, st, mask, norm_first, label):
    """Fail at the first stage of the observed forward ``st`` that departs from the
    wiring; return when none can be isolated."""
    if st.first("attn") is None or not isinstance(st.y, torch.Tensor):
        return
    if st.y.shape != st.x.shape:
        WRONG_OUTPUT.fail(
            title,
            f"On case {label}, your block returned shape "
            f"{list(st.y.shape)}, expected {list(st.x.shape)}.",
        )
    _stage_norm_eps(title, st, label)
    _stage_order(title, st, label)
    stages = _stages_pre_ln if norm_first else _stages_post_ln
    with quiet():
        try:
            stages(title, st, mask, label)
        except CheckFailure:
            raise
        except Exception:  # noqa: BLE001, S110 - a stage we cannot isolate: fall back
            pass


def deterministic_in_eval(module, *inputs):
    """Two eval-mode calls of ``module(*inputs)`` agree (dropout is off)."""
    module.eval()
    return share_changed(lambda: module(*inputs)) == 0.0


def probe_parts(cls, title="EncoderBlock"):
    block_cases(cls, False, configs=BLOCK_CONFIGS[:1], title=title)[0].make()


@single_threaded
def check_encoder_block(cls, norm_first: bool = False) -> None:
    """``cls(d_model, n_heads, d_ff, dropout, norm_first)``, ``forward(x [B, S, D],
    mask=None) -> [B, S, D]``, compared in eval mode with the Post-LN
    (``norm_first=False``) or Pre-LN wiring of its own parts."""
    title = f"EncoderBlock ({'Pre-LN' if norm_first else 'Post-LN'})"
    probe_parts(cls, title)
    reject_input_mutation(title, cls, norm_first)
    reference = PRE_LN_BLOCK if norm_first else POST_LN_BLOCK
    compare_with_roles(
        title,
        block_cases(cls, norm_first, title=title),
        call_block,
        reference,
        PRE_PITFALLS if norm_first else POST_PITFALLS,
        norm_orders(2),
        explain=lambda: _explain_block(title, cls, norm_first),
    )


@single_threaded
def check_block_by_hand(cls) -> None:
    """Hidden test: the learner wired the block, not PyTorch's
    TransformerEncoderLayer or the reference's."""
    torch.manual_seed(0)
    module = build_block("EncoderBlock", cls, (16, 4, 32, 0.1, False))
    check_block_not_delegated("EncoderBlock", module, randn(2, 5, 16, seed=0))


seal(__name__)
