"""Checks for exercise ``encoder_block`` of chapter 4 (book/ch04_blocks):
``EncoderBlock(d_model, n_heads, d_ff, dropout, norm_first)``, ``forward(x [B, S, D],
mask=None) -> [B, S, D]``, Post-LN or Pre-LN; with its dropout placement, its
behaviour (padding, batch, train and eval mode) and the hidden "written by hand" check.

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

import inspect
from dataclasses import dataclass, field, replace

import torch
import torch.nn.functional as F
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
    holds,
    keep,
    norm_orders,
    post_ln,
    pre_ln,
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
    passed,
    quiet,
    run,
    single_threaded,
)
from ..measure.sizes import named
from .feed_forward import FF_ACTIVATION, FF_WIDTH
from .sections import (
    S_DROPOUT,
    S_NORM,
    S_PADDING,
    S_PLACEMENT,
    S_RESIDUAL,
)
from .tracing import (
    DROPOUT_IN_EVAL,
    Event,
    Recorder,
    describe_function,
    describe_sum,
    fit_sum,
    kept_scale,
    snapshot,
    unrecognised_map,
    zeroed_share,
)

#: The exercise's sentence on the norms, quoted when a block breaks it.
NORM_RULE = (
    "two nn.LayerNorm(d_model) (or F.layer_norm with your own weight and bias "
    "of shape [D], or a LayerNorm module written by hand with its own gain and bias), "
    "one per sublayer, with their learnable gain and bias"
)


def same_sum(a: dict, b: dict) -> bool:
    return set(a) == set(b) and all(abs(a[k] - b[k]) < 2e-3 for k in a)


# ------------------------------------------------------------------------- EncoderBlock

BATCHNORM = Diagnosis(
    "BatchNorm instead of LayerNorm",
    "BatchNorm normalises each feature with statistics taken across the batch (and the "
    "positions): padding tokens pollute them, a batch of one sentence at decoding time "
    "has no statistics to speak of, and eval mode switches to running averages that "
    "the training batches never matched. LayerNorm normalises each token's own D "
    "features: use nn.LayerNorm(d_model).",
    S_NORM,
)
OTHER_NORM = Diagnosis(
    "another normalisation instead of LayerNorm",
    f"The block normalises with LayerNorm: the exercise asks for {NORM_RULE}.",
    S_NORM,
)
NORM_SHAPE = Diagnosis(
    "LayerNorm over the wrong shape",
    "nn.LayerNorm(d_model) normalises each token over its own D features; a wider "
    "normalized_shape mixes positions (and breaks on other lengths).",
    S_NORM,
)
NO_AFFINE = Diagnosis(
    "LayerNorm without its gain and bias",
    f"The exercise asks for {NORM_RULE}: nn.LayerNorm(d_model) keeps the default "
    "elementwise_affine=True, so each feature gets its learnable scale and shift back "
    "after the normalisation.",
    S_NORM,
)
NORM_IN_FORWARD = Diagnosis(
    "a LayerNorm created inside forward",
    "A norm built in forward gets fresh weights on every call: they are not the "
    "block's parameters, so the optimizer never sees them. Create the two "
    "nn.LayerNorm(d_model) in __init__.",
    S_NORM,
)
SHARED_NORM = Diagnosis(
    "one LayerNorm for both sublayers",
    "Each sublayer has its own LayerNorm (its own gain and bias): create two "
    "nn.LayerNorm(d_model) and use each once.",
    S_NORM,
)
NORM_EPS = Diagnosis(
    "LayerNorm eps",
    "The exercise asks for nn.LayerNorm(d_model) with its default eps = 1e-5 inside "
    "the square root (a smaller one, such as 1e-6, changes nothing measurable); an eps "
    "this large changes the outputs, and no longer normalises small activations.",
    S_NORM,
)
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
    __tracebackhide__ = True
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


class LearnerNorm:
    """One of the learner's norms, seen through its ``layer_norm`` call: its own gain,
    bias and eps (an eps the checks accept, :func:`_check_eps`)."""

    def __init__(self, weight, bias, eps=1e-5):
        self.weight, self.bias, self.eps = weight, bias, eps

    def __call__(self, t):
        return F.layer_norm(t, (t.size(-1),), self.weight, self.bias, self.eps)


_MHA_FORWARD = inspect.signature(MultiHeadAttention.forward)


def _attn_hook(events):
    def hook(module, args, kwargs, out):
        bound = _MHA_FORWARD.bind(module, *args, **kwargs).arguments
        q = bound["query"]
        k = q if bound.get("key") is None else bound["key"]
        v = k if bound.get("value") is None else bound["value"]
        out = out[0] if isinstance(out, tuple) else out
        q, k, v, out = snapshot(q), snapshot(k), snapshot(v), snapshot(out)
        events.append(
            Event(
                "attn",
                (q,),
                {},
                out,
                {"q": q, "k": k, "v": v, "mask": bound.get("mask")},
            )
        )

    return hook


def trace_block(module, x, mask, parts_or_weights):
    """Run ``module(x [B, S, D], mask)`` without gradients and record its attention
    calls, its norm calls and its feed-forward's linear calls (the weights of
    ``parts_or_weights``) in order: (events, output [B, S, D])."""
    weights = parts_or_weights
    if isinstance(weights, Parts):
        weights = (weights.ff1.weight, weights.ff2.weight)
    events = []
    attns = [m for m in module.modules() if isinstance(m, MultiHeadAttention)]
    handles = [
        m.register_forward_hook(_attn_hook(events), with_kwargs=True) for m in attns
    ]
    try:
        with torch.no_grad(), quiet(), Recorder(events, weights):
            y = module(x, mask)
    finally:
        for handle in handles:
            handle.remove()
    return events, y


def _norm_args(event):
    """(normalized_shape, weight, bias, eps) of a layer_norm call."""
    args, kwargs = event.args, event.kwargs
    names = ("input", "normalized_shape", "weight", "bias", "eps")
    got = [args[i] if len(args) > i else kwargs.get(n) for i, n in enumerate(names)]
    return (
        tuple(got[1]) if got[1] is not None else None,
        got[2],
        got[3],
        1e-5 if got[4] is None else got[4],
    )


def _batch_dependent(module, x, mask):
    """In eval mode, does sequence 0's output depend on the other sequences?"""
    changed = x.clone()
    changed[1:] = changed[1:] * 3.0 + 1.0
    module.eval()
    with torch.no_grad(), quiet():
        return not torch.allclose(
            module(x, mask)[0], module(changed, mask)[0], atol=1e-5
        )


def _reject_other_norms(title, calls):
    """BatchNorm, GroupNorm, RMSNorm ... calls instead of layer_norm."""
    __tracebackhide__ = True
    others = sorted({e.kind for e in calls if e.kind != "layer_norm"})
    if "batch_norm" in others:
        BATCHNORM.fail(title, "Your block calls batch_norm.")
    if others:
        OTHER_NORM.fail(title, f"Your block calls {', '.join(others)}.")


def _eps_changes_output(event) -> str:
    """What a layer_norm call's eps does to its output, on the check's own input,
    against the default 1e-5: "" when no more than the checks' tolerance (1e-6 or
    1e-12 change unit-scale tokens by about 5e-6), else the finding (0.1: about 5 %)."""
    shape, weight, bias, eps = _norm_args(event)
    if not isinstance(eps, (int, float)) or not eps > 0:
        return f"Your LayerNorm uses eps = {eps!r}."
    if abs(eps / 1e-5 - 1) < 1e-3:
        return ""
    with torch.no_grad():
        default = F.layer_norm(event.inp, shape, weight, bias, 1e-5)
    gap = float((event.out - default).abs().max())
    if gap <= 1e-4 * (1 + float(default.abs().max())):
        return ""
    return (
        f"Your LayerNorm uses eps = {eps:g}: on the check's input its output differs "
        f"from eps = 1e-5 by up to {gap:.1e}."
    )


def _check_eps(title, event):
    """Its eps changes nothing measurable (:func:`_eps_changes_output`)."""
    __tracebackhide__ = True
    finding = _eps_changes_output(event)
    if finding:
        NORM_EPS.fail(title, finding)


def _check_norm_calls(title, calls, d_model, module):
    """Each layer_norm call normalises the D features with a gain and a bias that are
    parameters of the block."""
    __tracebackhide__ = True
    params = {id(p) for p in module.parameters()}
    for e in calls:
        shape, weight, bias, _ = _norm_args(e)
        if shape != (d_model,):
            NORM_SHAPE.fail(
                title,
                "Your block calls layer_norm with normalized_shape="
                f"{list(shape or ())} on x [B, S, D={d_model}].",
            )
        if weight is None or bias is None:
            missing = "gain (weight=None" if weight is None else "bias (bias=None"
            NO_AFFINE.fail(
                title,
                f"Your LayerNorm has no learnable {missing}, as "
                "elementwise_affine=False gives).",
            )
        _check_eps(title, e)
        if id(weight) not in params or id(bias) not in params:
            NORM_IN_FORWARD.fail(
                title, "Your LayerNorm's gain or bias is not a parameter of the block."
            )


def _no_layer_norm(title, module, x, mask):
    """A block without a layer_norm call: BatchNorm by hand, or a hand-written norm."""
    __tracebackhide__ = True
    if _batch_dependent(module, x, mask):
        BATCHNORM.fail(
            title,
            "Your block makes no layer_norm call, and in eval mode "
            "sequence 0's output changes with the other sequences: "
            "its norms take statistics across the batch.",
        )
    fail(
        title,
        "expected 2 nn.LayerNorm(d_model) modules, one per sublayer: your "
        "block makes no layer_norm call, and none of its modules normalises each "
        "token's features with its own gain and bias (a norm written by hand counts "
        f"when it does). The exercise asks for {NORM_RULE}.",
        S_NORM,
    )


def _learner_norms(title, module, events, x, mask, explain=None):
    """The learner's distinct norms, in the order their first call ran, or fail saying
    which requirement on the norms the block breaks (``explain()`` first, when the
    count is off)."""
    __tracebackhide__ = True
    calls = [e for e in events if e.kind in Recorder.NORMS]
    _reject_other_norms(title, calls)
    _check_norm_calls(title, calls, x.size(-1), module)
    if not calls:
        _no_layer_norm(title, module, x, mask)
    norms = {}
    for e in calls:
        norms.setdefault(id(_norm_args(e)[1]), _norm_args(e)[1:4])
    if len(norms) == 1 and len(calls) >= 2:
        SHARED_NORM.fail(
            title,
            f"Your block calls the same LayerNorm {len(calls)} times per forward.",
        )
    if len(norms) != 2 and explain is not None:
        explain()
    if len(norms) != 2:
        fail(
            title,
            f"expected 2 nn.LayerNorm(d_model) modules, one per sublayer: your "
            f"block normalises with {len(norms)} distinct LayerNorm(s) in "
            f"{len(calls)} layer_norm call(s). The exercise asks for "
            f"{NORM_RULE}.",
            S_NORM,
        )
    return tuple(LearnerNorm(w, b, eps) for w, b, eps in norms.values())


def discover(title, module, x, mask, d_ff, norm_first=None) -> Parts:
    """The learner's parts: the attention and the feed-forward's Linear layers by type
    and shape, the norms by watching one eval-mode forward (module or F.layer_norm).
    With ``norm_first``, a wrong number of norms is explained by the stages."""
    __tracebackhide__ = True
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

    norms = _learner_norms(title, module, events, x, mask, explain)
    module.train(training)
    return Parts((attns[0][1],), norms, ff1, ff2)


def randomise_learner_norms(parts: Parts, seed: int) -> None:
    """LayerNorms start as the identity affine map, which would hide which norm sits
    where."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for norm in parts.norms:
            w = torch.rand(norm.weight.shape, generator=g) + 0.5
            b = torch.randn(norm.bias.shape, generator=g) * 0.3
            norm.weight.copy_(w.to(norm.weight))
            norm.bias.copy_(b.to(norm.bias))


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


def _block_cases(
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
            randomise_learner_norms(parts, seed=i)
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


def _call_block(module, x, mask, parts):
    return module(x, mask)


def _reject_input_mutation(title, cls, norm_first, dropout=0.1):
    """The block must leave the caller's x unchanged (no ``x += ...`` on it)."""
    __tracebackhide__ = True
    case = _block_cases(
        cls, norm_first, dropout, configs=BLOCK_CONFIGS[:1], title=title
    )[0]
    module, x, mask, parts = case.make()
    before = x.clone()
    run(_call_block, (module, x, mask, parts))
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


@dataclass
class Stream:
    """One observed forward of a block: its events in order, the tensors it made under
    the names its messages use, and when each became known (event index)."""

    events: list
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

    def first(self, kind):
        found = [e for e in self.events if e.kind == kind]
        return found[0] if found else None

    def index(self, event):
        return next(i for i, e in enumerate(self.events) if e is event)

    def norms(self):
        return [e for e in self.events if e.kind == "layer_norm"]

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
    __tracebackhide__ = True
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
    __tracebackhide__ = True
    got = event.info["mask"]
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
    __tracebackhide__ = True
    named = st.before(event)
    for role in ("q", "k", "v"):
        what = {"q": "the attention's query", "k": "its key", "v": "its value"}[role]
        diag = WRONG_INPUT if role == "q" else NOT_SELF_ATTENTION
        _stage(title, what, event.info[role], named, expected, diag, label)
    _stage_mask(title, event, mask, label)


def _stage_activation(title, st, label):
    __tracebackhide__ = True
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
    __tracebackhide__ = True
    for e in st.norms():
        finding = _eps_changes_output(e)
        if finding:
            NORM_EPS.fail(title, f"On case {label}: {finding[0].lower()}{finding[1:]}")


def _stage_order(title, st, label):
    """The attention sublayer runs before the feed-forward."""
    __tracebackhide__ = True
    attn, lin1 = st.first("attn"), st.first("linear1")
    if lin1 is not None and st.index(lin1) < st.index(attn):
        SUBLAYER_ORDER.fail(
            title,
            f"On case {label}, your block ran its feed-forward before its attention.",
        )


def _missing_norm(title, sublayer, where, label):
    """No norm call where the wiring has the ``sublayer``'s norm."""
    __tracebackhide__ = True
    wiring = "Post-LN" if where.startswith("after") else "Pre-LN"
    MISSING_NORM.fail(
        title,
        f"On case {label}, no LayerNorm runs {where}, where "
        f"{wiring} puts the {sublayer} sublayer's norm.",
    )


def _stages_post_ln(title, st, mask, label):
    """Post-LN: attention(x), LN1(x + a), FF(LN1), LN2(LN1 + f), output LN2."""
    __tracebackhide__ = True
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
    __tracebackhide__ = True
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
    __tracebackhide__ = True
    for case in cases:
        got = run(_call_block, case.make())
        if isinstance(got, Raised):
            fail(
                title,
                f"your block raised {got!r} while the check ran case {case.label}.",
            )


def _explain_block(title, cls, norm_first):
    """Called when no known wiring reproduces the learner's block: report a learner
    error on any case, else the first stage of the float64 case that departs."""
    __tracebackhide__ = True
    _raise_on_learner_error(title, _block_cases(cls, norm_first, title=title))
    case = _block_cases(cls, norm_first, configs=ANALYSIS_CONFIG, title=title)[0]
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
    if not holds(title, _deterministic_in_eval, module, x, mask):
        DROPOUT_IN_EVAL.fail(
            title,
            f"On case {case.label}, two calls in eval mode gave different outputs.",
        )
    _explain_stream(title, Stream(events, x, y, parts), mask, norm_first, case.label)


def _explain_stream(title, st, mask, norm_first, label):
    """Fail at the first stage of the observed forward ``st`` that departs from the
    wiring; return when none can be isolated."""
    __tracebackhide__ = True
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


def _probe_parts(cls, title="EncoderBlock"):
    __tracebackhide__ = True
    _block_cases(cls, False, configs=BLOCK_CONFIGS[:1], title=title)[0].make()


@single_threaded
def check_encoder_block(cls, norm_first: bool = False) -> None:
    """``cls(d_model, n_heads, d_ff, dropout, norm_first)``, ``forward(x [B, S, D],
    mask=None) -> [B, S, D]``, compared in eval mode with the Post-LN
    (``norm_first=False``) or Pre-LN wiring of its own parts."""
    __tracebackhide__ = True
    title = f"EncoderBlock ({'Pre-LN' if norm_first else 'Post-LN'})"
    _probe_parts(cls, title)
    _reject_input_mutation(title, cls, norm_first)
    reference = PRE_LN_BLOCK if norm_first else POST_LN_BLOCK
    compare_with_roles(
        title,
        _block_cases(cls, norm_first, title=title),
        _call_block,
        reference,
        PRE_PITFALLS if norm_first else POST_PITFALLS,
        norm_orders(2),
        explain=lambda: _explain_block(title, cls, norm_first),
    )


# -------------------------------------------------------------------- dropout placement
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
        ("input", "the attention's query input", attn.info["q"], 0, None),
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
        __tracebackhide__ = True
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
    __tracebackhide__ = True
    name = "Pre-LN" if norm_first else "Post-LN"
    case = _block_cases(cls, norm_first, p, True, DROPOUT_PROBE_CONFIG, title)[0]
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
    with torch.random.fork_rng(devices=[]), torch.no_grad(), quiet():
        torch.manual_seed(0)
        module.train()
        with Recorder(events, (ff1.weight, ff2.weight)):
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
    __tracebackhide__ = True
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
    __tracebackhide__ = True
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
    __tracebackhide__ = True
    title = "EncoderBlock dropout"
    _probe_parts(cls, title)
    rounds = [r for r in DROPOUT_ROUNDS if r[0] in layouts]
    for _, norm_first, *_ in rounds:
        _reject_input_mutation(title, cls, norm_first, P_PROBE)
    for name, norm_first, reference, pitfalls, configs in rounds:
        finding = _measure_dropout(title, cls, norm_first) or _measure_dropout(
            title, cls, norm_first, P_SECOND
        )
        cases = [
            Case(f"{case.label}, {name}, dropout=1, train mode", case.make)
            for case in _block_cases(cls, norm_first, 1.0, True, configs, title)
        ]
        compare_with_roles(
            title,
            cases,
            _call_block,
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


# --------------------------------------------------------------------------- behaviour
# Properties any right block has, probed on one block at dropout 0.

PADDING_VISIBLE = Diagnosis(
    "padding changes the real tokens",
    "Padding must be invisible. Pass the mask to the attention, and normalise each "
    "token on its own features (LayerNorm), never with statistics taken across "
    "positions.",
    S_NORM,
)


RANDOM_AT_RATE_ZERO = Diagnosis(
    "random in train mode at dropout 0",
    "Built with dropout=0, the block must compute the same output on every call in "
    "train mode: every dropout takes its rate from the block's dropout argument "
    "(nn.Dropout(dropout)), never a number of its own (Dropout(0.1)) or another "
    "function of it (Dropout(1 - dropout)).",
    S_DROPOUT,
)
SEQUENCES_MIX = Diagnosis(
    "the sequences of a batch mix",
    "Each sequence of a batch x [B, S, D] is a sentence of its own: the block must "
    "compute sequence 0's output from sequence 0 alone. Attention runs over the "
    "positions S of one sequence, never over the batch axis (batch first, [B, S, D]).",
    S_NORM,
)
TRAIN_EVAL_DIFFER = Diagnosis(
    "train and eval mode differ at dropout 0",
    "At dropout=0 nothing may depend on the mode: dropout at rate 0 keeps everything, "
    "and a LayerNorm has no running statistics. Give every dropout the block's "
    "dropout argument as its rate (a rate of 1 - dropout drops everything at 0).",
    S_DROPOUT,
)


def _same_twice_in_train(module, x):
    """Two train-mode calls on one input agree (dropout 0: nothing random may run)."""
    module.train()
    return torch.equal(module(x.clone()), module(x.clone()))


def _batch_independent(module, x):
    """In train mode (where BatchNorm uses batch statistics) and in eval mode, sequence
    0's output ignores the other sequences, and a batch of one gives it too."""
    changed = x.clone()
    changed[1:] = changed[1:] * 3.0 + 1.0
    for train in (True, False):
        module.train(train)
        base, other, one = module(x.clone()), module(changed), module(x[:1].clone())
        if not (
            torch.allclose(other[0], base[0], atol=1e-5)
            and torch.allclose(one[0], base[0], atol=1e-5)
        ):
            return False
    return True


def _others_tokens_unseen(module, x):
    """In eval mode, reversing the positions of the other sequences leaves sequence 0's
    output unchanged: it reads no token of theirs (statistics over the batch and the
    positions, which a batch norm takes, do not change under that reordering)."""
    module.eval()
    reordered = x.clone()
    reordered[1:] = reordered[1:].flip(1)
    return torch.allclose(module(reordered)[0], module(x.clone())[0], atol=1e-5)


def _padding_invisible(module, x):
    """Three more (masked) pad positions leave the real positions unchanged."""
    module.train()
    b, s, d = x.shape
    padded = torch.cat([x, randn(b, 3, d, seed=8, device=x.device) * 10], dim=1)
    mask = torch.tensor([[True] * s + [False] * 3], device=x.device)[:, None, None, :]
    short = module(x, torch.ones(b, 1, 1, s, dtype=torch.bool, device=x.device))
    long = module(padded, mask.expand(b, 1, 1, s + 3))
    return torch.allclose(long[:, :s], short, atol=1e-5)


def _same_in_train_and_eval(module, x):
    module.train()
    trained = module(x)
    module.eval()
    return torch.allclose(module(x), trained, atol=1e-5)


def _deterministic_in_eval(module, *inputs):
    module.eval()
    return torch.equal(module(*inputs), module(*inputs))


# In this order, each probe run only when the ones before it held: a cause is named
# only where the earlier probes rule out the others (randomness makes sequence 0 look
# batch-dependent; a batch norm reads the other sequences through statistics only).
BEHAVIOUR_PROBES = (
    (
        _same_twice_in_train,
        RANDOM_AT_RATE_ZERO,
        (
            "Built with dropout=0, two train-mode calls on the same input gave "
            "different outputs."
        ),
    ),
    (
        _others_tokens_unseen,
        SEQUENCES_MIX,
        (
            "Reversing the positions of the other sequences of the batch changed "
            "sequence 0's output (in eval mode)."
        ),
    ),
    (
        _batch_independent,
        BATCHNORM,
        (
            "Sequence 0's output changes when the other sequences of the batch are "
            "scaled, but not when their positions are reordered: statistics taken over "
            "the batch."
        ),
    ),
    (
        _padding_invisible,
        PADDING_VISIBLE,
        "Adding masked padding positions changed the outputs of the real tokens.",
    ),
    (
        _same_in_train_and_eval,
        TRAIN_EVAL_DIFFER,
        (
            "Built with dropout=0, the block's output in train mode differs from its "
            "output in eval mode (each the same on every call, and no sequence depends "
            "on another)."
        ),
    ),
)


@single_threaded
def check_block_behaviour(cls) -> None:
    """Properties any right block has: each sequence normalised on its own (no
    BatchNorm), padding invariance, batch of one, the same output in train and eval mode
    at dropout 0, determinism in eval."""
    __tracebackhide__ = True
    title = "EncoderBlock behaviour"
    torch.manual_seed(0)
    module = build_block(title, cls, (16, 4, 32, 0.0, False))
    reject_batchnorm(title, module, BATCHNORM)
    x = randn(4, 5, 16, seed=7)
    for probe, diagnosis, observed in BEHAVIOUR_PROBES:
        if not holds(title, probe, module, x):
            diagnosis.fail(title, observed)
    dropped = build_block(title, cls, (16, 4, 32, 0.5, False))
    if not holds(title, _deterministic_in_eval, dropped, x):
        DROPOUT_IN_EVAL.fail(title, "Two calls in eval mode gave different outputs.")
    passed(
        title,
        "normalises each token on its own, ignores padding, same in train "
        "and eval mode at dropout 0",
    )


@single_threaded
def check_block_by_hand(cls) -> None:
    """Hidden test: the learner wired the block, not PyTorch's
    TransformerEncoderLayer or the reference's."""
    __tracebackhide__ = True
    torch.manual_seed(0)
    module = build_block("EncoderBlock", cls, (16, 4, 32, 0.1, False))
    check_block_not_delegated("EncoderBlock", module, randn(2, 5, 16, seed=0))


seal(__name__)
