"""Checks for exercise ``decoder_block`` of chapter 5 (book/ch05_model):
``DecoderBlock(d_model, n_heads, d_ff, dropout)``,
``forward(x, memory, src_mask=None)``, a Post-LN decoder block built from
``tformer_ref.attention.MultiHeadAttention``, ``nn.LayerNorm`` and a feed-forward:
causal self-attention, cross-attention to ``memory``, feed-forward.

``check_decoder_block`` first compares with the reference and names a known wrong
variant that reproduces the learner's outputs on every case (for some assignment of the
learner's attentions and norms to their roles). Otherwise the block is traced with
forward hooks, sublayer by sublayer, to the first stage that departs; in train mode
each sublayer's dropout is measured. The behaviour probes (``check_decoder_behaviour``)
and the hidden "written by hand" check (``check_decoder_by_hand``) are here too.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from tformer_ref.attention import MultiHeadAttention
from tformer_ref.device import get_device

from ...guard.integrity import seal
from ..blocks import (
    Parts,
    build_block,
    check_block_not_delegated,
    find_parts,
    keep,
    norm_orders,
    post_ln,
    pre_ln,
    randomise_norms,
)
from ..cases import randn
from ..ch04 import BATCHNORM, DROPOUT_IN_EVAL, S_DROPOUT, S_PLACEMENT, S_RESIDUAL
from ..diagnosis import (
    UNEXPLAINED,
    Case,
    Diagnosis,
    Pitfall,
    Raised,
    fail,
    fail_unexplained,
    passed,
    quiet,
    run,
    same,
    single_threaded,
    verify_integrity,
)
from ..measure.sizes import named
from .grading import fail_if_raised, first_wrong, is_right
from .sections import (
    S_DECODER,
)

# A decoder variant is ``fn(role, module, x, memory, src_mask)``. ``role`` = (attention
# order, norm order) says which of the learner's attentions is the self-attention and
# which norm serves which sublayer.


def decoder_parts(module, d_model, d_ff=None) -> Parts:
    return find_parts("DecoderBlock", module, d_model, d_ff, 2, 3, BATCHNORM, S_DECODER)


def _in_role(role, module, x) -> Parts:
    """The learner's parts as ``role`` assigns them: ``attns`` = (self, cross).
    ``module`` may be the block or its parts, found once."""
    attn_order, norm_order = role
    parts = module if isinstance(module, Parts) else decoder_parts(module, x.size(-1))
    return parts.in_role(norm_order, attn_order)


def _decoder(parts, x, first, second, wiring=post_ln):
    """Sublayers ``first``, ``second``, then the feed-forward, each wrapped by
    ``wiring`` with the next norm (eval mode: no dropout)."""
    for sublayer, norm in zip((first, second, parts.ff), parts.norms):
        x = wiring(x, sublayer, norm, keep)
    return x


def _lower_triangle(h):
    s = h.size(1)
    return torch.ones(s, s, dtype=torch.bool, device=h.device).tril()[None, None]


def _masked_self(p):
    return lambda h: p.attns[0](h, h, h, mask=_lower_triangle(h))


def _cross(p, memory, src_mask):
    return lambda h: p.attns[1](h, memory, memory, mask=src_mask)


def decoder_block(role, module, x, memory, src_mask):
    """The Post-LN decoder block from the learner's parts: causal self-attention,
    cross-attention to ``memory``, feed-forward."""
    p = _in_role(role, module, x)
    return _decoder(p, x, _masked_self(p), _cross(p, memory, src_mask))


def _unmasked_self(role, module, x, memory, src_mask):
    p = _in_role(role, module, x)
    return _decoder(p, x, lambda h: p.attns[0](h, h, h), _cross(p, memory, src_mask))


def _upper_triangle(h):  # triu(): each position keeps itself and the future
    s = h.size(1)
    return torch.ones(s, s, dtype=torch.bool, device=h.device).triu()[None, None]


def _triu_self(role, module, x, memory, src_mask):
    p = _in_role(role, module, x)
    upper = lambda h: p.attns[0](h, h, h, mask=_upper_triangle(h))
    return _decoder(p, x, upper, _cross(p, memory, src_mask))


def _cross_from_decoder(role, module, x, memory, src_mask):
    p = _in_role(role, module, x)
    own = lambda h: p.attns[1](h, h, h, mask=src_mask)
    return _decoder(p, x, _masked_self(p), own)


def _cross_from_decoder_unmasked(role, module, x, memory, src_mask):
    p = _in_role(role, module, x)
    return _decoder(p, x, _masked_self(p), lambda h: p.attns[1](h, h, h))


def _cross_without_src_mask(role, module, x, memory, src_mask):
    p = _in_role(role, module, x)
    return _decoder(p, x, _masked_self(p), _cross(p, memory, None))


def _cross_before_self(role, module, x, memory, src_mask):
    p = _in_role(role, module, x)
    return _decoder(p, x, _cross(p, memory, src_mask), _masked_self(p))


def _post_ln_no_residual(x, sublayer, norm, drop):  # LayerNorm(Dropout(Sublayer(x)))
    return norm(drop(sublayer(x)))


def _decoder_no_residual(role, module, x, memory, src_mask):
    p = _in_role(role, module, x)
    return _decoder(
        p, x, _masked_self(p), _cross(p, memory, src_mask), _post_ln_no_residual
    )


def _decoder_pre_ln(role, module, x, memory, src_mask):
    p = _in_role(role, module, x)
    return _decoder(p, x, _masked_self(p), _cross(p, memory, src_mask), pre_ln)


NO_CAUSAL_MASK = Pitfall(
    "decoder self-attention without the causal mask",
    "The decoder's self-attention is not masked, so position i reads the target tokens "
    "after it: in training it copies the answer instead of predicting it, and at "
    "generation time those tokens do not exist yet. Self-attention in the decoder "
    "always uses the causal (lower-triangular) mask.",
    S_DECODER,
    _unmasked_self,
)
TRIU_MASK = Pitfall(
    "causal mask built with triu instead of tril",
    "Your self-attention mask keeps the upper triangle: each position attends to "
    "itself and the *future*. The keep-mask is lower triangular, "
    "torch.ones(S, S).tril().",
    S_DECODER,
    _triu_self,
)
CROSS_FROM_DECODER = Pitfall(
    "cross-attention taking keys/values from the decoder",
    "Your cross-attention takes its keys and values from the decoder's own states, so "
    "the target never reads the source. Queries come from the decoder, keys and values "
    "from the encoder's output: cross_attn(x, memory, memory, "
    "mask=src_mask).",
    S_DECODER,
    _cross_from_decoder,
)
SOURCE_PADDING_SEEN = Pitfall(
    "cross-attention ignores the source padding mask",
    "Your cross-attention reads the encoder's padding positions: pass the source mask "
    "(src_mask, [B, 1, 1, Ss]) to it.",
    S_DECODER,
    _cross_without_src_mask,
)
CROSS_FIRST = Pitfall(
    "cross-attention before self-attention",
    "The decoder block runs masked self-attention first, then cross-attention "
    "to the encoder, then the feed-forward.",
    S_DECODER,
    _cross_before_self,
)
MISSING_RESIDUAL = Pitfall(
    "missing residual",
    "Each of the three sublayers is wrapped as LayerNorm(x + "
    "Dropout(Sublayer(x))): the input is added "
    "back.",
    S_RESIDUAL,
    _decoder_no_residual,
)
PRE_LN_FOR_POST_LN = Pitfall(
    "LayerNorm in the wrong place (Pre-LN where Post-LN was asked)",
    "This block is Post-LN: x = LayerNorm(x + Dropout(Sublayer(x))) for each sublayer.",
    S_PLACEMENT,
    _decoder_pre_ln,
)

DECODER_PITFALLS = (
    NO_CAUSAL_MASK,
    TRIU_MASK,
    CROSS_FROM_DECODER,
    replace(CROSS_FROM_DECODER, impl=_cross_from_decoder_unmasked),
    SOURCE_PADDING_SEEN,
    CROSS_FIRST,
    MISSING_RESIDUAL,
    PRE_LN_FOR_POST_LN,
)
DECODER_ROLES = tuple(
    (attns, norms) for attns in ((0, 1), (1, 0)) for norms in norm_orders(3)
)


def _decoder_cases(cls):
    # (D, H, d_ff, B, St, Ss, source padding?, dtype); Ss != St catches keys taken from
    # the wrong side.
    configs = [
        (16, 4, 40, 2, 5, 7, True, torch.float32),
        (24, 3, 48, 3, 4, 4, True, torch.float32),
        (12, 2, 20, 2, 6, 3, False, torch.float64),
        (16, 4, 32, 4, 5, 6, True, torch.float32),
    ]
    cases = []
    for i, (d, h, f, b, st, ss, pad, dtype) in enumerate(configs):

        def make(d=d, h=h, f=f, b=b, st=st, ss=ss, pad=pad, dtype=dtype, i=i):
            torch.manual_seed(2000 + i)
            module = build_block("DecoderBlock", cls, (d, h, f, 0.1), dtype).eval()
            randomise_norms(decoder_parts(module, d, f), seed=20 + i)
            x = randn(b, st, d, seed=2100 + i, dtype=dtype)
            memory = randn(b, ss, d, seed=2200 + i, dtype=dtype)
            return module, x, memory, _source_mask(b, ss) if pad else None

        cases.append(
            Case(
                f"H={h}, d_ff={f}, x [{named(B=b, St=st, D=d)}], "
                f"memory [.., Ss={ss}, ..], source padding "
                f"{'yes' if pad else 'no'}, {dtype}",
                make,
            )
        )
    return cases


def _source_mask(b, ss):
    """Source sequence i keeps its first 2 + i positions: [B, 1, 1, Ss]."""
    lengths = (torch.arange(b) % ss + 2).clamp(max=ss)
    kept = torch.arange(ss)[None, :] < lengths[:, None]
    return kept[:, None, None, :].to(get_device())


def _call_decoder(module, x, memory, src_mask):
    return module(x, memory, src_mask)


def _probe(cls):
    __tracebackhide__ = True
    torch.manual_seed(0)
    module = build_block("DecoderBlock", cls, (16, 4, 40, 0.1)).eval()
    decoder_parts(module, 16, 40)
    _require_affine_norms(module)
    return module


def _require_affine_norms(module):
    """The exercise's nn.LayerNorm(d_model) has a weight and a bias (the check sets
    them, so that it can tell the norms apart)."""
    __tracebackhide__ = True
    for name, norm in module.named_modules():
        affine = getattr(norm, "weight", None) is not None and norm.bias is not None
        if isinstance(norm, nn.LayerNorm) and not affine:
            fail(
                "DecoderBlock",
                f"your LayerNorm '{name}' has no weight or no bias "
                "(elementwise_affine=False or bias=False): the "
                "exercise asks for nn.LayerNorm(d_model), with both.",
                S_DECODER,
            )


# The trace: forward hooks record each call of the learner's attentions, norms and
# feed-forward layers, in order, with what went in and what came out.


@dataclass(frozen=True, eq=False)  # calls are compared by identity
class Call:
    """One sublayer call: ``kind`` is "attn", "norm", "ff1" or "ff2"; ``inputs`` the
    attention's (query, key, value, mask) or the layer's (input,)."""

    kind: str
    module: nn.Module
    inputs: tuple
    output: torch.Tensor


_ATTN_SIGNATURE = inspect.signature(MultiHeadAttention.forward)


def _attn_inputs(module, args, kwargs):
    bound = _ATTN_SIGNATURE.bind(module, *args, **kwargs)
    bound.apply_defaults()
    query, key, value = (
        bound.arguments["query"],
        bound.arguments["key"],
        bound.arguments["value"],
    )
    key = query if key is None else key
    return query, key, key if value is None else value, bound.arguments["mask"]


def _recorder(kind, calls):
    def hook(module, args, kwargs, output):
        out = output[0] if isinstance(output, tuple) else output
        inputs = (
            _attn_inputs(module, args, kwargs)
            if kind == "attn"
            else (args or tuple(kwargs.values()))[:1]
        )
        # Copies: the learner's code may change a tensor in place after this call.
        kept = tuple(
            t.detach().clone() if isinstance(t, torch.Tensor) else t for t in inputs
        )
        calls.append(Call(kind, module, kept, out.detach().clone()))

    return hook


def trace_block(module, parts, x, memory, src_mask):
    """(output or Raised, [Call]) of one eval-mode call of the learner's block."""
    calls = []
    watched = [("attn", m) for m in parts.attns] + [("norm", m) for m in parts.norms]
    watched += [("ff1", parts.ff1), ("ff2", parts.ff2)]
    handles = [
        m.register_forward_hook(_recorder(kind, calls), with_kwargs=True)
        for kind, m in watched
    ]
    try:
        with torch.no_grad():
            out = run(module, (x, memory, src_mask))
    finally:
        for handle in handles:
            handle.remove()
    return out, calls


def _close(a, b) -> bool:
    return (
        isinstance(a, torch.Tensor)
        and isinstance(b, torch.Tensor)
        and a.shape == b.shape
        and torch.allclose(a.double(), b.double(), atol=1e-5, rtol=1e-4)
    )


def _combination(target, first, second):
    """(a, b) with target ≈ a·first + b·second (least squares), or None."""
    if not all(
        isinstance(t, torch.Tensor) and t.shape == target.shape for t in (first, second)
    ):
        return None
    basis = torch.stack([first.double().flatten(), second.double().flatten()], 1).cpu()
    goal = target.double().flatten()[:, None].cpu()
    coef = torch.linalg.lstsq(basis, goal).solution
    if (basis @ coef - goal).abs().max() > 1e-4 * (1 + goal.abs().max().item()):
        return None
    return round(coef[0].item(), 3), round(coef[1].item(), 3)


# The stages, in the order the block runs them. Each fails naming what it observed, or
# returns the stream that the next stage reads.

MASK_WRONG = Diagnosis(
    "causal mask wrong",
    "The self-attention's keep-mask is torch.ones(St, St).tril()[None, None] (True = "
    "attend): position i attends to positions 0..i, itself included.",
    S_DECODER,
)
SELF_INPUTS_WRONG = Diagnosis(
    "self-attention inputs wrong",
    "The decoder's first sublayer is self-attention over the target: query, key and "
    "value are all the block's input x, self_attn(x, x, x, mask=causal).",
    S_DECODER,
)
NORM_MISSING = Diagnosis(
    "LayerNorm missing after a sublayer",
    "Each of the three sublayers is wrapped as x = LayerNorm(x + "
    "Dropout(Sublayer(x))): three norms, each used once.",
    S_PLACEMENT,
)
CROSS_INPUTS_WRONG = Diagnosis(
    "cross-attention inputs wrong",
    "Cross-attention takes its queries from the decoder stream (the self-attention "
    "sublayer's output) and its keys and values from the encoder's output: "
    "cross_attn(x, memory, memory, mask=src_mask).",
    S_DECODER,
)
SOURCE_MASK_WRONG = Diagnosis(
    "cross-attention masked wrongly",
    "The cross-attention's mask is src_mask, passed as it is ([B, 1, 1, Ss], True = "
    "a real source token); the causal mask belongs to the self-attention only.",
    S_DECODER,
)
ORDER_WRONG = Diagnosis(
    "sublayers out of order",
    "The block runs masked self-attention, then cross-attention, then the "
    "feed-forward, one after the other, each as x = LayerNorm(x + "
    "Dropout(Sublayer(x))) before the next one starts.",
    S_DECODER,
)
RESIDUAL_WRONG = Diagnosis(
    "residual wrong",
    "Each sublayer is wrapped as LayerNorm(x + Dropout(Sublayer(x))), x being that "
    "sublayer's own input: the input is added back once, unscaled.",
    S_RESIDUAL,
)
PRE_LN_STAGE = Diagnosis(
    "LayerNorm before the sublayer",
    "This block is Post-LN: the sublayer reads the stream x itself, and the norm comes "
    "after the residual sum, x = LayerNorm(x + Dropout(Sublayer(x))).",
    S_PLACEMENT,
)
NORM_SHARED = Diagnosis(
    "one LayerNorm for several sublayers",
    "Each of the three sublayers has its own nn.LayerNorm(d_model), with its own "
    "weights: three modules, each used once.",
    S_PLACEMENT,
)
ATTENTION_SHARED = Diagnosis(
    "one attention for both sublayers",
    "Self-attention and cross-attention are two MultiHeadAttention modules with their "
    "own weights.",
    S_DECODER,
)
FF_WRONG = Diagnosis(
    "feed-forward wrong",
    "The feed-forward is Linear(d_model, d_ff) -> ReLU -> Linear(d_ff, d_model), on "
    "the cross-attention sublayer's output.",
    S_DECODER,
)
OUTPUT_WRONG = Diagnosis(
    "block output wrong",
    "The block returns the last LayerNorm's output, LayerNorm(x + Dropout(FF(x))), "
    "nothing added or changed after it.",
    S_RESIDUAL,
)


@dataclass(frozen=True)
class Trace:
    """One traced call: the block's inputs and output, and its sublayer calls."""

    x: torch.Tensor
    memory: torch.Tensor
    src_mask: torch.Tensor | None
    out: torch.Tensor
    calls: tuple

    def after(self, call, kind):
        """The first call of ``kind`` after ``call`` (None: none)."""
        later = self.calls[self.calls.index(call) + 1 :]
        return next((c for c in later if c.kind == kind), None)

    def before(self, call, kind):
        return [c for c in self.calls[: self.calls.index(call)] if c.kind == kind]


def _pattern(mask, b, h, sq, sk):
    """The keep pattern [B, H, Sq, Sk] a mask means (None: keep everything)."""
    if mask is None:
        return torch.ones(b, h, sq, sk, dtype=torch.bool)
    return torch.broadcast_to(mask.bool().cpu(), (b, h, sq, sk))


def _rows(pattern):
    """[Sq, Sk] bool -> "query 0: keys [..]; query 1: ..." for the first rows."""
    shown = [
        f"query {i}: keys {row.nonzero().flatten().tolist()}"
        for i, row in enumerate(pattern[:3])
    ]
    return "; ".join(shown)


def _self_mask_problem(mask, q, heads):
    """The self-attention's mask against tril, in words; None when it is tril."""
    b, st = q.size(0), q.size(1)
    if mask is None:
        return NO_CAUSAL_MASK, "Your self-attention was called with mask=None."
    got = _pattern(mask, b, heads, st, st)
    tril = torch.ones(st, st, dtype=torch.bool).tril()
    if torch.equal(got, tril.expand_as(got)):
        return None
    first = got[0, 0]
    if (got == first).all():
        if torch.equal(first, tril.T):
            return TRIU_MASK, "Your self-attention's mask is the upper triangle (triu)."
        if torch.equal(first, ~tril):
            return MASK_WRONG, (
                "Your self-attention's mask is True on the future "
                "positions only (triu(diagonal=1)), the complement of "
                "the keep-mask: True must mean 'attend'."
            )
        if torch.equal(first, tril.tril(-1)):
            return MASK_WRONG, (
                "Your self-attention's mask hides the diagonal "
                "(tril(diagonal=-1)): position i must attend to itself "
                "too, and position 0 is left with no key at all."
            )
        if first.all():
            return NO_CAUSAL_MASK, "Your self-attention's mask keeps every position."
    return MASK_WRONG, (
        f"Your self-attention's mask keeps, for sequence 0: "
        f"{_rows(first)}; expected query i: keys 0..i."
    )


def _cross_mask_problem(mask, src_mask, q, k, heads):
    b, sq, sk = q.size(0), q.size(1), k.size(1)
    want = _pattern(src_mask, b, heads, sq, sk)
    if mask is None and src_mask is not None:
        return SOURCE_PADDING_SEEN, "Your cross-attention was called with mask=None."
    got = _pattern(mask, b, heads, sq, sk)
    if torch.equal(got, want):
        return None
    if src_mask is not None and torch.equal(got, ~want):
        return SOURCE_MASK_WRONG, (
            "Your cross-attention's mask is ~src_mask: it keeps "
            "the padding and hides the real source tokens."
        )
    causal = torch.ones(sq, sk, dtype=torch.bool).tril()
    if torch.equal(got, (want & causal).expand_as(got)) or torch.equal(
        got, causal.expand_as(got)
    ):
        return SOURCE_MASK_WRONG, (
            "Your cross-attention's mask includes the causal "
            "triangle: a target position may read every source "
            "token (the source is all known)."
        )
    return SOURCE_MASK_WRONG, (
        f"Your cross-attention keeps, for sequence 0: "
        f"{_rows(got[0, 0])}; src_mask keeps "
        f"{_rows(want[0, 0])}."
    )


def _stage_self(t, heads):
    """Stage 1: the first attention call is the masked self-attention on x."""
    call = next(c for c in t.calls if c.kind == "attn")
    q, k, v, mask = call.inputs
    second = [c for c in t.calls if c.kind == "attn"][1]
    if _close(k, t.memory) or _close(q, t.memory):
        if _close(second.inputs[1], t.memory):
            return SELF_INPUTS_WRONG, (
                "Both of your attention calls read the "
                "encoder's output (memory): the first one, "
                "the self-attention, must read x only."
            )
        return ORDER_WRONG, (
            "Your first attention call reads the encoder's output "
            "(memory): the cross-attention runs before the "
            "self-attention."
        )
    if not _close(q, t.x):
        earlier = [c for c in t.before(call, "norm") if _close(q, c.output)]
        if earlier:
            return PRE_LN_STAGE, (
                "Your self-attention reads LayerNorm(x), not the "
                "block's input x (Pre-LN placement)."
            )
        return None, "the self-attention's query is not the block's input x"
    if not (_close(k, q) and _close(v, q)):
        return SELF_INPUTS_WRONG, (
            "Your self-attention's keys or values are not its queries (x)."
        )
    return _self_mask_problem(mask, q, heads)


def _stage_wrapped(t, call, stream, name, used):
    """The norm after ``call`` reads stream + call's output; -> (problem, norm call)."""
    norm = t.after(call, "norm")
    nxt = t.after(call, "attn") if call.kind == "attn" else None
    if norm is None:
        return (NORM_MISSING, f"No LayerNorm runs after the {name}."), norm
    if nxt is not None and t.calls.index(nxt) < t.calls.index(norm):
        return (
            ORDER_WRONG,
            (
                f"The next attention starts before a LayerNorm has run "
                f"on the {name}'s sum."
            ),
        ), norm
    if norm.module in used:
        return (
            NORM_SHARED,
            (
                f"The LayerNorm after the {name} is the same module as "
                "an earlier sublayer's."
            ),
        ), norm
    read, y = norm.inputs[0], call.output
    if _close(read, stream + y):
        return None, norm
    if stream is not t.x and _close(read, t.x + y):
        return (
            RESIDUAL_WRONG,
            (
                f"The LayerNorm after the {name} reads x_in + "
                f"{name}(...), with x_in the block's input, not the "
                f"{name}'s own input."
            ),
        ), norm
    if _close(read, stream + torch.relu(y)):
        return (
            FF_WRONG if call.kind == "ff2" else RESIDUAL_WRONG,
            (
                f"The LayerNorm after the {name} reads x + ReLU({name}(x)): a ReLU "
                "after the sublayer's output."
            ),
        ), norm
    return _residual_reading(read, stream, y, name), norm


def _residual_reading(read, stream, y, name):
    coef = _combination(read, stream, y)
    if coef is None:
        return None, f"the LayerNorm after the {name} does not read x + {name}(x)"
    a, b = coef
    if abs(a) < 1e-3 and abs(b - 1) < 1e-3:
        return MISSING_RESIDUAL, (
            f"The LayerNorm after the {name} reads {name}(x) "
            "alone: x is not added back."
        )
    if abs(a - 1) < 1e-3 and abs(b) < 1e-3:
        return RESIDUAL_WRONG, (
            f"The LayerNorm after the {name} reads x alone: the "
            f"{name}'s output is never added."
        )
    return RESIDUAL_WRONG, (
        f"The LayerNorm after the {name} reads {a:g}·x + "
        f"{b:g}·{name}(x); expected 1·x + 1·{name}(x)."
    )


def _stage_cross(t, first, h1, heads):
    """Stage 3: the second attention call: queries h1, keys/values memory, src_mask."""
    attns = [c for c in t.calls if c.kind == "attn"]
    call = attns[1]
    if any(c.kind == "ff1" for c in t.before(call, "ff1")):
        return (ORDER_WRONG, "Your feed-forward runs before the cross-attention."), call
    if call.module is first.module:
        return (
            ATTENTION_SHARED,
            "Both attention calls use the same MultiHeadAttention module.",
        ), call
    q, k, v, mask = call.inputs
    if _close(q, t.memory):
        return (
            CROSS_INPUTS_WRONG,
            (
                "Your cross-attention takes its queries from "
                "memory: query is the decoder stream, key and "
                "value are memory."
            ),
        ), call
    if not _close(k, t.memory) and (_close(k, h1) or _close(k, t.x)):
        return (
            CROSS_FROM_DECODER,
            "Your cross-attention's keys are the decoder's states, not memory.",
        ), call
    if not (_close(k, t.memory) and _close(v, t.memory)):
        return (
            CROSS_INPUTS_WRONG,
            (
                "Your cross-attention's keys or values are not the "
                "encoder's output (memory)."
            ),
        ), call
    if _close(q, t.x) and not _close(q, h1):
        return (
            CROSS_INPUTS_WRONG,
            (
                "Your cross-attention's queries are the block's "
                "input x, not the self-attention sublayer's output "
                "(x was not updated between the sublayers)."
            ),
        ), call
    if not _close(q, h1):
        if any(_close(q, c.output) for c in t.before(call, "norm")):
            return (
                PRE_LN_STAGE,
                (
                    "Your cross-attention reads a LayerNorm of its input "
                    "(Pre-LN placement)."
                ),
            ), call
        return (
            None,
            "the cross-attention's query is not the self-attention sublayer's output",
        ), call
    return _cross_mask_problem(mask, t.src_mask, q, k, heads), call


def _stage_ff(t, after, h2):
    """Stage 5: Linear -> ReLU -> Linear on h2; -> (problem, second Linear's call)."""
    if not any(c.kind == "ff2" for c in t.calls):
        return (
            None,
            (
                "the feed-forward's Linear modules were never called (hooks "
                "cannot see F.linear on their weights)"
            ),
        ), None
    ff1 = t.after(after, "ff1")
    ff2 = t.after(ff1, "ff2") if ff1 is not None else None
    if ff1 is None or ff2 is None:
        return (
            ORDER_WRONG,
            "The feed-forward's layers do not run after the cross-attention sublayer.",
        ), None
    if not _close(ff1.inputs[0], h2):
        if any(_close(ff1.inputs[0], c.output) for c in t.before(ff1, "norm")[2:]):
            return (
                PRE_LN_STAGE,
                "Your feed-forward reads a LayerNorm of its input (Pre-LN placement).",
            ), ff2
        reads = (
            "the block's input x" if _close(ff1.inputs[0], t.x) else "something else"
        )
        return (
            FF_WRONG,
            (
                f"Your feed-forward reads {reads}, not the cross-attention "
                "sublayer's output."
            ),
        ), ff2
    hidden, given = ff1.output, ff2.inputs[0]
    if _close(given, torch.relu(hidden)):
        return None, ff2
    for name, act in (
        ("no activation", hidden),
        ("GELU", F.gelu(hidden)),
        ("tanh", torch.tanh(hidden)),
        ("sigmoid", torch.sigmoid(hidden)),
        ("LeakyReLU", F.leaky_relu(hidden)),
        ("SiLU", F.silu(hidden)),
        ("ELU", F.elu(hidden)),
    ):
        if _close(given, act):
            return (
                FF_WRONG,
                (
                    f"Between the feed-forward's layers you apply {name}; "
                    "the exercise asks for ReLU."
                ),
            ), ff2
    return (None, "the feed-forward's second Linear does not read ReLU(first)"), ff2


def _stage_output(t, last_norm, h2):
    if _close(t.out, last_norm.output):
        return None
    coef = _combination(t.out, last_norm.output, h2)
    if coef is not None:
        return OUTPUT_WRONG, (
            f"Your block returns {coef[0]:g}·LayerNorm₃(...) + "
            f"{coef[1]:g}·(the feed-forward's input), not the last "
            "LayerNorm's output."
        )
    return OUTPUT_WRONG, "Your block does not return the last LayerNorm's output."


def _walk(t, heads):
    """(Diagnosis or None, what was observed) at the first stage that departs, or
    None when every stage matches."""
    found = _stage_self(t, heads)
    if found:
        return found
    first = next(c for c in t.calls if c.kind == "attn")
    found, n1 = _stage_wrapped(t, first, t.x, "self-attention", ())
    if found:
        return found
    found, cross = _stage_cross(t, first, n1.output, heads)
    if found:
        return found
    found, n2 = _stage_wrapped(t, cross, n1.output, "cross-attention", (n1.module,))
    if found:
        return found
    found, ff2 = _stage_ff(t, n2, n2.output)
    if found:
        return found
    found, n3 = _stage_wrapped(
        t, ff2, n2.output, "feed-forward", (n1.module, n2.module)
    )
    return found or _stage_output(t, n3, n2.output)


def _trace_case(title, case):
    """Fail at the first stage of the learner's block that departs on ``case``."""
    __tracebackhide__ = True
    module, x, memory, src_mask = case.make()
    parts = decoder_parts(module, x.size(-1))
    out, calls = trace_block(module, parts, x.clone(), memory.clone(), src_mask)
    if isinstance(out, Raised):
        fail(title, f"your block raised {out!r} while the check ran case {case.label}.")
    if type(out) is not torch.Tensor or out.shape != x.shape:
        what = list(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        fail(
            title,
            f"on case {case.label}: your block returned {what}; forward "
            f"returns one tensor [B, St, D] = {list(x.shape)}.",
            S_DECODER,
        )
    attns = [c for c in calls if c.kind == "attn"]
    if len(attns) != 2 or not any(c.kind == "norm" for c in calls):
        # A module run through .forward() or functions on its weights is invisible to
        # hooks: say what was seen, claim nothing.
        norms = sum(c.kind == "norm" for c in calls)
        fail(
            title,
            f"on case {case.label} the forward hooks saw {len(attns)} "
            f"attention call(s) (expected 2) and {norms} LayerNorm call(s) "
            f"(expected 3). It {UNEXPLAINED}.",
            S_DECODER,
        )
    heads = attns[0].module.n_heads
    found = _walk(Trace(x, memory, src_mask, out, tuple(calls)), heads)
    if found is None:
        return
    diagnosis, observed = found
    if diagnosis is None:
        fail(
            title,
            f"on case {case.label}, the first stage that departs: {observed} "
            f"(observed with forward hooks). It {UNEXPLAINED}.",
            S_DECODER,
        )
    diagnosis.fail(title, f"On case {case.label}: {observed}")


def _without_src_mask(title, cls):
    """forward(x, memory) must work (src_mask defaults to None) and leave its inputs
    as they were."""
    __tracebackhide__ = True
    module = _probe(cls)
    x, memory = randn(2, 4, 16, seed=41), randn(2, 3, 16, seed=42)
    before = (x.clone(), memory.clone())
    with torch.no_grad():
        got = run(module, (x, memory))
        want = run(module, (x.clone(), memory.clone(), None))
    for name, old, new in zip(("x", "memory"), before, (x, memory)):
        if not isinstance(got, Raised) and not torch.equal(old, new):
            fail(
                title,
                f"your forward changed its input {name} in place (x += ..., "
                "or an in-place op on it): write x = x + ..., so that the "
                "caller's tensor stays as it was.",
                S_DECODER,
            )
    if isinstance(got, Raised):
        fail(
            title,
            f"forward(x, memory) without src_mask raised {got!r}. The "
            "exercise's signature is forward(x, memory, src_mask=None).",
            S_DECODER,
        )
    if not _close(got, want):
        fail(
            title,
            "forward(x, memory) and forward(x, memory, None) differ: src_mask "
            "defaults to None (no source padding).",
            S_DECODER,
        )


def _fail_if_random(title, case):
    """In eval mode two calls must agree: dropout off."""
    __tracebackhide__ = True
    module, x, memory, src_mask = case.make()
    with torch.no_grad():
        observed = run(_deterministic, (module, x, memory, src_mask))
    if isinstance(observed, str):
        DROPOUT_IN_EVAL.fail(title, f"On case {case.label}: {observed}")


def _agrees(got, want) -> bool:
    """``same`` without its description of the difference (this runs for every role of
    every pitfall)."""
    if isinstance(got, Raised) or isinstance(want, Raised):
        return same(got, want, 1e-5, 1e-4)
    return (
        type(got) is torch.Tensor
        and type(want) is torch.Tensor
        and got.shape == want.shape
        and got.dtype == want.dtype
        and torch.allclose(got, want, atol=1e-5, rtol=1e-4)
    )


def _matches_some_role(theirs, made, fn, agree) -> bool:
    """Whether ``fn(role, *inputs)`` agrees with the learner on every case for some
    role. ``made``: each case's inputs, built once (the recomputations only read the
    learner's parts)."""
    return any(
        all(agree(g, run(fn, (role, *inputs))) for g, inputs in zip(theirs, made))
        for role in DECODER_ROLES
    )


def _grade_decoder(title, cls):
    __tracebackhide__ = True
    cases = _decoder_cases(cls)
    theirs = [run(_call_decoder, case.make()) for case in cases]
    made = [
        (decoder_parts(m, x.size(-1)), x, memory, mask)
        for m, x, memory, mask in (case.make() for case in cases)
    ]
    ours = [run(decoder_block, (DECODER_ROLES[0], *inputs)) for inputs in made]
    right = lambda g, w: is_right(g, w, 1e-5, 1e-4)
    if _matches_some_role(theirs, made, decoder_block, right):
        return
    agree = _agrees
    for pitfall in DECODER_PITFALLS:
        if _matches_some_role(theirs, made, pitfall.impl, agree):
            pitfall.fail(title)
    fail_if_raised(title, cases, theirs)
    case, _, _ = first_wrong(cases, theirs, ours, 1e-5, 1e-4)
    _fail_if_random(title, case)
    _trace_case(title, case)
    fail_unexplained(title, cases, theirs, ours, 1e-5, 1e-4)


@single_threaded
def check_decoder_block(cls) -> None:
    """``cls(d_model, n_heads, d_ff, dropout)``, ``forward(x [B, St, D],
    memory [B, Ss, D], src_mask=None) -> [B, St, D]``: Post-LN, causal self-attention,
    cross-attention to ``memory``, feed-forward."""
    __tracebackhide__ = True
    title = "DecoderBlock"
    verify_integrity()
    _probe(cls)
    _grade_decoder(title, cls)
    _without_src_mask(title, cls)
    _check_sublayer_dropout(title, cls)
    passed(
        title,
        "matches the reference on 4 cases; in train mode each sublayer's "
        "output is dropped at the block's rate",
    )


# ------------------------------------------------------- decoder dropout, train mode
# Eval mode hides dropout, so the block also runs in train mode at a moderate rate. In
# a Post-LN block norm k reads stream_k + Dropout(sublayer_k(...)), so its input minus
# the stream it started from is the dropped branch: the fraction of the sublayer's
# output zeroed there is measured for each of the three sublayers.

DROPOUT_PS = (0.3, 0.5)
#: (D, H, d_ff, B, St, Ss): 4·8·16 = 512 entries per branch, so the measured fraction
#: is within ±0.1 of p by far (its standard deviation is about 0.02).
DROPOUT_CONFIG = (16, 4, 32, 4, 8, 6)
SUBLAYERS = ("the masked self-attention", "the cross-attention", "the feed-forward")

SUBLAYER_DROPOUT = Diagnosis(
    "sublayer dropout missing or at the wrong rate",
    "Each of the three sublayers is wrapped as LayerNorm(x + Dropout(Sublayer(x))): "
    "in train mode dropout zeroes a fraction p (the block's `dropout`) of *every* "
    "sublayer's output, self-attention, cross-attention and feed-forward alike, and "
    "scales the rest by 1/(1-p) (nn.Dropout(dropout), or F.dropout(t, dropout, "
    "self.training)).",
    S_DROPOUT,
)


def _train_trace(title, cls, p):
    """(label, x, the calls) of one train-mode call of ``cls(D, H, d_ff, p)`` in
    float64 on x [B, St, D], memory [B, Ss, D], no source mask."""
    __tracebackhide__ = True
    d, h, f, b, st, ss = DROPOUT_CONFIG
    label = (
        f"D={d}, H={h}, d_ff={f}, x [{b}, {st}, {d}], memory [{b}, {ss}, {d}], "
        f"torch.float64, dropout={p}, train mode"
    )
    module = build_block("DecoderBlock", cls, (d, h, f, p), torch.float64, seed=51)
    x = randn(b, st, d, seed=510, dtype=torch.float64)
    memory = randn(b, ss, d, seed=511, dtype=torch.float64)
    with torch.random.fork_rng(devices=[]), quiet():
        torch.manual_seed(52)
        out, calls = trace_block(
            module.train(), decoder_parts(module, d, f), x, memory, None
        )
    if isinstance(out, Raised):
        fail(
            title,
            f"your block raised {out!r} in train mode on case {label}.",
            S_DECODER,
        )
    return label, x, calls


def _branches(x, calls):
    """[(sublayer name, what was added to the stream, the sublayer's output)] for the
    three sublayers, read from the calls in order; [] when they cannot be read."""
    attns = [c.output for c in calls if c.kind == "attn"]
    ff2 = [c.output for c in calls if c.kind == "ff2"]
    norms = [c for c in calls if c.kind == "norm"]
    if len(attns) != 2 or len(ff2) != 1 or len(norms) != 3:
        return []
    streams = (x, norms[0].output, norms[1].output)
    return [
        (name, norm.inputs[0] - stream, before)
        for name, norm, stream, before in zip(
            SUBLAYERS, norms, streams, (*attns, ff2[0])
        )
        if isinstance(norm.inputs[0], torch.Tensor)
        and norm.inputs[0].shape == before.shape == stream.shape
    ]


def _branch_rates(x, calls):
    """[(sublayer name, fraction of its output zeroed on the branch, kept scale)]."""
    found = []
    for name, branch, before in _branches(x, calls):
        alive = before.abs() > 1e-6
        zeroed = float(
            ((branch == 0) & alive).double().sum() / alive.double().sum().clamp_min(1)
        )
        kept = (branch != 0) & alive
        scale = (
            float((branch[kept] / before[kept]).median()) if kept.sum() >= 10 else None
        )
        found.append((name, zeroed, scale))
    return found


def _rate_problem(name, zeroed, scale, p) -> str | None:
    """What is off in one sublayer's measured dropout at rate ``p``, or None."""
    if abs(zeroed - p) > 0.1:
        return (
            f"{zeroed:.0%} of {name}'s output was zeroed on its way into the "
            f"residual sum, expected about {p:.0%} (p = {p})"
        )
    if scale is not None and abs(scale * (1 - p) - 1) > 0.02:
        return (
            f"the kept entries of {name}'s output were multiplied by "
            f"{scale:.3g}, expected 1/(1-p) = {1 / (1 - p):.3g}"
        )
    return None


def _check_sublayer_dropout(title, cls):
    """At dropout 0.3 and 0.5 in train mode each sublayer's output loses about that
    fraction on its way into the residual sum, the kept values scaled by 1/(1-p)."""
    __tracebackhide__ = True
    for p in DROPOUT_PS:
        label, x, calls = _train_trace(title, cls, p)
        for name, zeroed, scale in _branch_rates(x, calls):
            problem = _rate_problem(name, zeroed, scale, p)
            if problem:
                SUBLAYER_DROPOUT.fail(title, f"On case {label}: {problem}.")


# -------------------------------------------------------------------- decoder behaviour
# Probes on one block in eval mode: ``probe(module, x, memory, src_mask)`` returns what
# it observed when the property fails, else None.


def _deterministic(module, x, memory, src_mask):
    a = module(x.clone(), memory.clone(), src_mask)
    b = module(x.clone(), memory.clone(), src_mask)
    if torch.equal(a, b):
        return None
    differ = (a != b).double().mean().item()
    return (
        f"Two calls in eval mode gave different outputs ({differ:.0%} of the "
        "entries differ)."
    )


def _reads_memory(module, x, memory, src_mask):
    base = module(x.clone(), memory.clone(), src_mask)
    if not torch.allclose(module(x.clone(), memory + 1.0, src_mask), base, atol=1e-5):
        return None
    return "Changing the encoder's output (memory) changed nothing."


def _past_ignores_future(module, x, memory, src_mask):
    future = x.clone()
    future[:, 3:] = future[:, 3:] * 2.0 + 1.0
    base = module(x.clone(), memory.clone(), src_mask)
    changed = (module(future, memory.clone(), src_mask)[:, :3] - base[:, :3]).abs()
    if changed.max() <= 1e-5:
        return None
    moved = [i for i in range(3) if changed[:, i].max() > 1e-5]
    return (
        f"Changing target positions 3..5 changed the outputs at positions {moved} "
        f"(by up to {changed.max().item():.3g}): the past sees the future."
    )


def _masked_source_invisible(module, x, memory, src_mask):
    hidden = memory.clone()
    hidden[0, 3:] = 100.0  # masked source positions of sequence 0
    base = module(x.clone(), memory.clone(), src_mask)
    changed = (module(x.clone(), hidden, src_mask) - base).abs().max().item()
    if changed <= 1e-5:
        return None
    return (
        "Changing the masked (padding) source positions 3..4 of sequence 0 "
        f"changed its output by up to {changed:.3g}."
    )


DECODER_PROBES = (
    (_deterministic, DROPOUT_IN_EVAL),
    (_reads_memory, CROSS_FROM_DECODER),
    (_past_ignores_future, NO_CAUSAL_MASK),
    (_masked_source_invisible, SOURCE_PADDING_SEEN),
)


def _observe(title, probe, *args):
    """What ``probe`` observed (None: the property holds); the learner's exception
    fails the check naming their line and the probe."""
    __tracebackhide__ = True
    with torch.no_grad(), quiet():
        try:
            return probe(*args)
        except Exception as exc:  # noqa: BLE001 - the learner's code may raise anything
            name = probe.__name__.strip("_").replace("_", " ")
            fail(
                title,
                f"your block raised {Raised(exc)!r} while the check ran the "
                f"probe '{name}' (x [B=2, St=6, D=16], memory [.., Ss=5, ..], "
                "src_mask [2, 1, 1, 5]).",
            )


@single_threaded
def check_decoder_behaviour(cls) -> None:
    """Probes any right decoder block passes: the future never changes the past, the
    output reads the memory, masked source positions are invisible, eval mode is
    deterministic."""
    __tracebackhide__ = True
    title = "DecoderBlock behaviour"
    module = _probe(cls)
    x, memory = randn(2, 6, 16, seed=31), randn(2, 5, 16, seed=32)
    src_mask = torch.tensor(
        [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool, device=get_device()
    )[:, None, None, :]
    for probe, diagnosis in DECODER_PROBES:
        observed = _observe(title, probe, module, x, memory, src_mask)
        if observed:
            diagnosis.fail(title, observed)
    passed(
        title,
        "causal, reads the memory, ignores source padding, deterministic in eval mode",
    )


@single_threaded
def check_decoder_by_hand(cls) -> None:
    """Hidden test: the learner wired the block, not PyTorch's
    TransformerDecoderLayer or the reference's."""
    __tracebackhide__ = True
    torch.manual_seed(0)
    module = build_block("DecoderBlock", cls, (16, 4, 40, 0.1))
    x, memory = randn(2, 5, 16, seed=0), randn(2, 7, 16, seed=1)
    check_block_not_delegated("DecoderBlock", module, x, memory)


seal(__name__)
