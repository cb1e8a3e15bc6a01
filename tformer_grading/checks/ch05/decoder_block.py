"""Checks for exercise ``decoder_block`` of chapter 5 (book/ch05_model), Post-LN:
``DecoderBlock(d_model, n_heads, d_ff, dropout)``, ``forward(x, memory,
src_mask=None)``: causal self-attention, cross-attention to ``memory``, feed-forward.

``check_decoder_block`` names a known wrong variant that reproduces the learner's
outputs on every case (for some assignment of their attentions and norms to roles);
else it traces the block sublayer by sublayer to the first stage that departs, masks
read back with ``measure.mask_readings``. Dropout: ``sublayer_dropout``; behaviour
probes: ``decoder_behaviour``; the hidden ``check_decoder_by_hand`` is here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from tformer_ref.device import get_device

from ...guard.integrity import seal
from .. import flow
from ..blocks import (
    Parts,
    build_block,
    check_block_not_delegated,
    keep,
    norm_orders,
    post_ln,
    pre_ln,
    randomise_norms,
)
from ..cases import randn
from ..ch04 import DROPOUT_IN_EVAL, S_PLACEMENT, S_RESIDUAL
from ..ch04.encoder_block import post_ln_no_residual
from ..diagnosis import (
    Case,
    Diagnosis,
    Pitfall,
    Raised,
    fail,
    fail_unexplained,
    passed,
    run,
    same,
    single_threaded,
    verify_integrity,
)
from ..measure.closeness import tensors_near
from ..measure.fit import two_terms
from ..measure.mask_readings import (
    causal_reading,
    keep_pattern,
    kept_keys,
    padding_reading,
)
from ..measure.probes import share_changed
from ..measure.sizes import named
from ..measure.trace import Trace
from .grading import fail_if_raised, first_wrong, is_right, matches_some_role
from .sections import (
    S_DECODER,
)
from .sublayer_dropout import check_sublayer_dropout, decoder_parts, trace_block

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True

# A decoder variant is ``fn(role, module, x, memory, src_mask)``. ``role`` = (attention
# order, norm order) says which of the learner's attentions is the self-attention and
# which norm serves which sublayer.


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


def _decoder_no_residual(role, module, x, memory, src_mask):
    p = _in_role(role, module, x)
    return _decoder(
        p, x, _masked_self(p), _cross(p, memory, src_mask), post_ln_no_residual
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
    "from the encoder's output: cross_attn(x, memory, memory, mask=src_mask).",
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
    "Each of the three sublayers is wrapped as LayerNorm(x + Dropout(Sublayer(x))): "
    "the input is added back.",
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


def probe_block(cls):
    torch.manual_seed(0)
    module = build_block("DecoderBlock", cls, (16, 4, 40, 0.1)).eval()
    decoder_parts(module, 16, 40)
    _require_affine_norms(module)
    return module


def _require_affine_norms(module):
    """The exercise's nn.LayerNorm(d_model) has a weight and a bias (the check sets
    them, so that it can tell the norms apart)."""
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


# The trace (``trace_block``): forward hooks record each call of the learner's
# attentions, norms and feed-forward layers, in order, with what went in and what came
# out. The stages read it in the order the block runs; each returns (Diagnosis or None,
# what it observed) when it departs, else None. The mistakes they name:

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


@dataclass(eq=False)
class DecoderTrace(Trace):
    """One traced call: its sublayer calls (``events``), the block's inputs and
    output."""

    x: torch.Tensor
    memory: torch.Tensor
    src_mask: torch.Tensor | None
    out: torch.Tensor


def _stage_self(t, first, cross, heads):
    """Stage 1: the first attention call is the masked self-attention on x."""
    q, k, v, mask = first.args
    if tensors_near(k, t.memory) or tensors_near(q, t.memory):
        if tensors_near(cross.args[1], t.memory):
            return SELF_INPUTS_WRONG, (
                "Both of your attention calls read the encoder's output (memory): the "
                "first one, the self-attention, must read x only."
            )
        return ORDER_WRONG, (
            "Your first attention call reads the encoder's output (memory): the "
            "cross-attention runs before the self-attention."
        )
    if not tensors_near(q, t.x):
        if any(tensors_near(q, c.out) for c in t.earlier(first, "norm")):
            return PRE_LN_STAGE, (
                "Your self-attention reads LayerNorm(x), not the block's input x "
                "(Pre-LN placement)."
            )
        return None, "the self-attention's query is not the block's input x"
    if not (tensors_near(k, q) and tensors_near(v, q)):
        return SELF_INPUTS_WRONG, (
            "Your self-attention's keys or values are not its queries (x)."
        )
    return _self_mask_problem(mask, q, heads)


def _self_mask_problem(mask, q, heads):
    """The self-attention's mask against tril (``mask_readings.causal_reading``), in
    words; None when it is tril."""
    if mask is None:
        return NO_CAUSAL_MASK, "Your self-attention was called with mask=None."
    got = keep_pattern(mask, q.size(0), heads, q.size(1), q.size(1))
    reading = causal_reading(got)
    if reading == "causal":
        return None
    if reading == "triu":
        return TRIU_MASK, "Your self-attention's mask is the upper triangle (triu)."
    if reading == "inverted":
        return MASK_WRONG, (
            "Your self-attention's mask is True on the future positions only "
            "(triu(diagonal=1)), the complement of the keep-mask: True must mean "
            "'attend'."
        )
    if reading == "no diagonal":
        return MASK_WRONG, (
            "Your self-attention's mask hides the diagonal (tril(diagonal=-1)): "
            "position i must attend to itself too, and position 0 is left with no key "
            "at all."
        )
    if reading == "all visible":
        return NO_CAUSAL_MASK, "Your self-attention's mask keeps every position."
    return MASK_WRONG, (
        f"Your self-attention's mask keeps, for sequence 0: {kept_keys(got[0, 0])}; "
        "expected query i: keys 0..i."
    )


def _stage_wrapped(t, call, norm, stream, name, used):
    """The norm after ``call`` reads stream + call's output."""
    nxt = t.after(call, "attn") if call.kind == "attn" else None
    if norm is None:
        return NORM_MISSING, f"No LayerNorm runs after the {name}."
    if nxt is not None and t.index(nxt) < t.index(norm):
        return ORDER_WRONG, (
            f"The next attention starts before a LayerNorm has run on the {name}'s sum."
        )
    if norm.module in used:
        return NORM_SHARED, (
            f"The LayerNorm after the {name} is the same module as an earlier "
            "sublayer's."
        )
    read, y = norm.inp, call.out
    if tensors_near(read, stream + y):
        return None
    if stream is not t.x and tensors_near(read, t.x + y):
        return RESIDUAL_WRONG, (
            f"The LayerNorm after the {name} reads x_in + {name}(...), with x_in the "
            f"block's input, not the {name}'s own input."
        )
    if tensors_near(read, stream + torch.relu(y)):
        wrong = FF_WRONG if call.kind == "ff2" else RESIDUAL_WRONG
        return wrong, (
            f"The LayerNorm after the {name} reads x + ReLU({name}(x)): a ReLU after "
            "the sublayer's output."
        )
    return _residual_reading(read, stream, y, name)


def _residual_reading(read, stream, y, name):
    coef = two_terms(read, stream, y)
    if coef is None:
        return None, f"the LayerNorm after the {name} does not read x + {name}(x)"
    a, b = coef
    if abs(a) < 1e-3 and abs(b - 1) < 1e-3:
        return MISSING_RESIDUAL, (
            f"The LayerNorm after the {name} reads {name}(x) alone: x is not added "
            "back."
        )
    if abs(a - 1) < 1e-3 and abs(b) < 1e-3:
        return RESIDUAL_WRONG, (
            f"The LayerNorm after the {name} reads x alone: the {name}'s output is "
            "never added."
        )
    return RESIDUAL_WRONG, (
        f"The LayerNorm after the {name} reads {a:g}·x + {b:g}·{name}(x); expected "
        f"1·x + 1·{name}(x)."
    )


def _stage_cross(t, first, call, h1, heads):
    """Stage 3: the second attention call: queries h1, keys/values memory, src_mask."""
    if any(c.kind == "ff1" for c in t.earlier(call, "ff1")):
        return ORDER_WRONG, "Your feed-forward runs before the cross-attention."
    if call.module is first.module:
        return ATTENTION_SHARED, (
            "Both attention calls use the same MultiHeadAttention module."
        )
    q, k, v, mask = call.args
    if tensors_near(q, t.memory):
        return CROSS_INPUTS_WRONG, (
            "Your cross-attention takes its queries from memory: query is the decoder "
            "stream, key and value are memory."
        )
    if not tensors_near(k, t.memory) and (tensors_near(k, h1) or tensors_near(k, t.x)):
        return CROSS_FROM_DECODER, (
            "Your cross-attention's keys are the decoder's states, not memory."
        )
    if not (tensors_near(k, t.memory) and tensors_near(v, t.memory)):
        return CROSS_INPUTS_WRONG, (
            "Your cross-attention's keys or values are not the encoder's output "
            "(memory)."
        )
    if tensors_near(q, t.x) and not tensors_near(q, h1):
        return CROSS_INPUTS_WRONG, (
            "Your cross-attention's queries are the block's input x, not the "
            "self-attention sublayer's output (x was not updated between the "
            "sublayers)."
        )
    if not tensors_near(q, h1):
        if any(tensors_near(q, c.out) for c in t.earlier(call, "norm")):
            return PRE_LN_STAGE, (
                "Your cross-attention reads a LayerNorm of its input (Pre-LN "
                "placement)."
            )
        return None, (
            "the cross-attention's query is not the self-attention sublayer's output"
        )
    return _cross_mask_problem(mask, t.src_mask, q, k, heads)


def _cross_mask_problem(mask, src_mask, q, k, heads):
    """The cross-attention's mask against src_mask (``padding_reading``),
    in words; None when they agree."""
    if mask is None and src_mask is not None:
        return SOURCE_PADDING_SEEN, "Your cross-attention was called with mask=None."
    shape = q.size(0), heads, q.size(1), k.size(1)
    got, want = keep_pattern(mask, *shape), keep_pattern(src_mask, *shape)
    reading = padding_reading(got, want)
    if reading == "same":
        return None
    if reading == "inverted" and src_mask is not None:
        return SOURCE_MASK_WRONG, (
            "Your cross-attention's mask is ~src_mask: it keeps the padding and hides "
            "the real source tokens."
        )
    if reading in ("causal added", "causal instead"):
        return SOURCE_MASK_WRONG, (
            "Your cross-attention's mask includes the causal triangle: a target "
            "position may read every source token (the source is all known)."
        )
    return SOURCE_MASK_WRONG, (
        f"Your cross-attention keeps, for sequence 0: {kept_keys(got[0, 0])}; "
        f"src_mask keeps {kept_keys(want[0, 0])}."
    )


def _stage_ff(t, ff1, ff2, h2):
    """Stage 5: Linear -> ReLU -> Linear on h2 (``ff1``, ``ff2``: the Linears' calls
    after the cross-attention's norm)."""
    if not any(c.kind == "ff2" for c in t.events):
        return None, (
            "the feed-forward's Linear modules were never called (hooks cannot see "
            "F.linear on their weights)"
        )
    if ff1 is None or ff2 is None:
        return ORDER_WRONG, (
            "The feed-forward's layers do not run after the cross-attention sublayer."
        )
    if not tensors_near(ff1.inp, h2):
        if any(tensors_near(ff1.inp, c.out) for c in t.earlier(ff1, "norm")[2:]):
            return PRE_LN_STAGE, (
                "Your feed-forward reads a LayerNorm of its input (Pre-LN placement)."
            )
        reads = (
            "the block's input x" if tensors_near(ff1.inp, t.x) else "something else"
        )
        return FF_WRONG, (
            f"Your feed-forward reads {reads}, not the cross-attention sublayer's "
            "output."
        )
    hidden, given = ff1.out, ff2.inp
    if tensors_near(given, torch.relu(hidden)):
        return None
    for name, act in (
        ("no activation", hidden),
        ("GELU", F.gelu(hidden)),
        ("tanh", torch.tanh(hidden)),
        ("sigmoid", torch.sigmoid(hidden)),
        ("LeakyReLU", F.leaky_relu(hidden)),
        ("SiLU", F.silu(hidden)),
        ("ELU", F.elu(hidden)),
    ):
        if tensors_near(given, act):
            return FF_WRONG, (
                f"Between the feed-forward's layers you apply {name}; the exercise "
                "asks for ReLU."
            )
    return None, "the feed-forward's second Linear does not read ReLU(first)"


def _stage_output(t, last_norm, h2):
    if tensors_near(t.out, last_norm.out):
        return None
    coef = two_terms(t.out, last_norm.out, h2)
    if coef is not None:
        return OUTPUT_WRONG, (
            f"Your block returns {coef[0]:g}·LayerNorm₃(...) + {coef[1]:g}·(the "
            "feed-forward's input), not the last LayerNorm's output."
        )
    return OUTPUT_WRONG, "Your block does not return the last LayerNorm's output."


def _walk(t, heads):
    """(Diagnosis or None, what was observed) at the first stage that departs, or
    None when every stage matches. The calls, in the order the block makes them: the
    self-attention and its norm, the cross-attention and its norm, the feed-forward's
    two Linears and the last norm."""
    first, cross = t.of("attn")
    n1 = t.after(first, "norm")
    found = _stage_self(t, first, cross, heads)
    found = found or _stage_wrapped(t, first, n1, t.x, "self-attention", ())
    if found:
        return found
    n2 = t.after(cross, "norm")
    found = _stage_cross(t, first, cross, n1.out, heads)
    used = (n1.module,)
    found = found or _stage_wrapped(t, cross, n2, n1.out, "cross-attention", used)
    if found:
        return found
    ff1 = t.after(n2, "ff1")
    ff2 = t.after(ff1, "ff2") if ff1 is not None else None
    n3 = t.after(ff2, "norm") if ff2 is not None else None
    used = (n1.module, n2.module)
    found = _stage_ff(t, ff1, ff2, n2.out)
    found = found or _stage_wrapped(t, ff2, n3, n2.out, "feed-forward", used)
    return found or _stage_output(t, n3, n2.out)


def _trace_case(title, case):
    """Fail at the first stage of the learner's block that departs on ``case``."""
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
        flow.fallback(
            title,
            f"on case {case.label} the forward hooks saw {len(attns)} attention "
            f"call(s) (expected 2) and {norms} LayerNorm call(s) (expected 3)",
            S_DECODER,
            advice="",
        )
    heads = attns[0].module.n_heads
    found = _walk(DecoderTrace(list(calls), x, memory, src_mask, out), heads)
    if found is None:
        return
    diagnosis, observed = found
    if diagnosis is None:
        flow.fallback(
            title,
            f"on case {case.label}, the first stage that departs: {observed} "
            "(observed with forward hooks)",
            S_DECODER,
            advice="",
        )
    diagnosis.fail(title, f"On case {case.label}: {observed}")


def _without_src_mask(title, cls):
    """forward(x, memory) must work (src_mask defaults to None) and leave its inputs
    as they were."""
    module = probe_block(cls)
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
    if not tensors_near(got, want):
        fail(
            title,
            "forward(x, memory) and forward(x, memory, None) differ: src_mask "
            "defaults to None (no source padding).",
            S_DECODER,
        )


def _fail_if_random(title, case):
    """In eval mode two calls must agree: dropout off."""
    module, x, memory, src_mask = case.make()
    with torch.no_grad():
        observed = run(deterministic, (module, x, memory, src_mask))
    if isinstance(observed, str):
        DROPOUT_IN_EVAL.fail(title, f"On case {case.label}: {observed}")


def _grade_decoder(title, cls):
    cases = _decoder_cases(cls)
    theirs = [run(_call_decoder, case.make()) for case in cases]
    made = [
        (decoder_parts(m, x.size(-1)), x, memory, mask)
        for m, x, memory, mask in (case.make() for case in cases)
    ]
    ours = [run(decoder_block, (DECODER_ROLES[0], *inputs)) for inputs in made]
    right = lambda g, w: is_right(g, w, 1e-5, 1e-4)
    if matches_some_role(theirs, made, decoder_block, DECODER_ROLES, right):
        return
    agree = lambda g, w: same(g, w, 1e-5, 1e-4)
    for pitfall in DECODER_PITFALLS:
        if matches_some_role(theirs, made, pitfall.impl, DECODER_ROLES, agree):
            flow.reproduced(pitfall).fail(title)
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
    title = "DecoderBlock"
    verify_integrity()
    probe_block(cls)
    _grade_decoder(title, cls)
    _without_src_mask(title, cls)
    check_sublayer_dropout(title, cls)
    passed(
        title,
        "matches the reference on 4 cases; in train mode each sublayer's "
        "output is dropped at the block's rate",
    )


def deterministic(module, x, memory, src_mask):
    differ = share_changed(lambda: module(x.clone(), memory.clone(), src_mask))
    if not differ:
        return None
    return (
        f"Two calls in eval mode gave different outputs ({differ:.0%} of the "
        "entries differ)."
    )


@single_threaded
def check_decoder_by_hand(cls) -> None:
    """Hidden test: the learner wired the block, not PyTorch's
    TransformerDecoderLayer or the reference's."""
    torch.manual_seed(0)
    module = build_block("DecoderBlock", cls, (16, 4, 40, 0.1))
    x, memory = randn(2, 5, 16, seed=0), randn(2, 7, 16, seed=1)
    check_block_not_delegated("DecoderBlock", module, x, memory)


seal(__name__)
