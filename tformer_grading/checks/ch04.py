"""Checks for chapter 4, blocks (book/ch04_blocks).

The exercise builds a ``FeedForward`` and an ``EncoderBlock(d_model, n_heads, d_ff,
dropout, norm_first)`` from ``tformer_ref.attention.MultiHeadAttention``,
``nn.LayerNorm``, ``nn.Linear`` and dropout. The checks recompute the block from
the learner's own parts (see ``_blocks``), so any right wiring passes whatever
its names, helpers or registration order, and each known wrong wiring is named.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from tformer_ref.device import get_device
from . import blocks
from .cases import build_module, randn
from .diagnosis import single_threaded
from .blocks import Parts, compare_with_roles, find_parts, norm_orders, randomise_norms, sublayer
from ..guard.integrity import seal
from .diagnosis import (Case, Pitfall, Section, compare_to_reference, fail, passed,
                        probe_eval_determinism)

CHAPTER = "ch04_blocks"
S_RESIDUAL = Section(CHAPTER, "4.1", "Residual connections")
S_FF = Section(CHAPTER, "4.2", "The feed-forward sublayer")
S_NORM = Section(CHAPTER, "4.3", "LayerNorm, not BatchNorm")
S_DROPOUT = Section(CHAPTER, "4.4", "Where dropout goes")
S_PLACEMENT = Section(CHAPTER, "4.5", "Post-LN and Pre-LN")
S_XAVIER = Section(CHAPTER, "4.6", "Xavier initialisation")
S_TYING = Section(CHAPTER, "4.7", "Weight tying")


# --------------------------------------------------------------------------- FeedForward

def _ff_linears(title, module, d_model, d_ff):
    __tracebackhide__ = True
    linears = [(n, m) for n, m in module.named_modules() if isinstance(m, nn.Linear)]
    shapes = [tuple(m.weight.shape) for _, m in linears]
    if sorted(shapes) != sorted([(d_ff, d_model), (d_model, d_ff)]):
        listing = ", ".join(f"{n} {list(m.weight.shape)}" for n, m in linears) or "none"
        fail(title, f"expected exactly two nn.Linear layers, Linear(d_model={d_model}, d_ff={d_ff}) then "
                    f"Linear(d_ff, d_model); found: {listing}.", S_FF)
    first = next(m for _, m in linears if tuple(m.weight.shape) == (d_ff, d_model))
    second = next(m for _, m in linears if tuple(m.weight.shape) == (d_model, d_ff))
    return first, second


def _ff_cases(cls):
    configs = [(8, 32, (2, 5), torch.float32), (12, 20, (3, 4), torch.float32), (6, 24, (2, 3), torch.float64),
               (16, 40, (1, 7), torch.float32)]
    cases = []
    for i, (d, f, lead, dtype) in enumerate(configs):
        def make(d=d, f=f, lead=lead, dtype=dtype, i=i):
            torch.manual_seed(40 + i)
            module = build_module("FeedForward", cls, (d, f), dtype).eval()
            return module, randn(*lead, d, seed=400 + i, dtype=dtype, device=get_device())
        cases.append(Case(f"D={d}, d_ff={f}, x {list(lead) + [d]}, {dtype}", make))
    return cases


def _ff_reference(module, x, style="relu"):
    d = x.size(-1)
    f = max(m.out_features for m in module.modules() if isinstance(m, nn.Linear))
    l1, l2 = _ff_linears("FeedForward", module, d, f)
    h = torch.nn.functional.linear(x, l1.weight, l1.bias)
    if style != "no_activation":
        h = torch.relu(h)
    out = torch.nn.functional.linear(h, l2.weight, l2.bias)
    return torch.relu(out) if style == "relu_at_output" else out


FF_PITFALLS = [
    Pitfall("no activation between the two Linear layers",
            "Without the ReLU the two Linear layers collapse into one linear map (W2·W1): the sublayer can no "
            "longer compute anything a single matrix could not. FFN(x) = max(0, x·W1 + b1)·W2 + b2.",
            S_FF, lambda m, x: _ff_reference(m, x, "no_activation")),
    Pitfall("ReLU after the output layer",
            "The feed-forward ends with the second Linear, no activation after it: a ReLU there would make "
            "every update the sublayer adds to the residual stream non-negative.",
            S_FF, lambda m, x: _ff_reference(m, x, "relu_at_output")),
]


@single_threaded
def check_feed_forward(cls) -> None:
    """``cls(d_model, d_ff)``: an nn.Module mapping x [..., D] to [..., D] (Linear, ReLU, Linear)."""
    __tracebackhide__ = True
    cases = _ff_cases(cls)
    module, _ = cases[0].make()  # fails early, and clearly, when the layers cannot be found
    _ff_linears("FeedForward", module, 8, 32)
    compare_to_reference("FeedForward", cases, lambda m, x: m(x), _ff_reference, FF_PITFALLS)


# --------------------------------------------------------------------------- EncoderBlock

def encoder_parts(module, d_model, d_ff=None) -> Parts:
    return find_parts("EncoderBlock", module, d_model, d_ff, 1, 2, S_NORM, S_RESIDUAL)


def encoder_forward(parts: Parts, order, x, mask, styles, drop=lambda t: t, ff_inner_dropped=False):
    """The encoder block from the learner's parts; ``order`` says which norm serves which sublayer."""
    attn, norms = parts.attns[0], [parts.norms[i] for i in order]
    x = sublayer(styles[0], x, lambda h: attn(h, h, h, mask=mask), norms[0], drop)
    return sublayer(styles[1], x, lambda h: parts.ff(h, ff_inner_dropped), norms[1], drop)


def _block_cases(cls, norm_first, dropout=0.1, train=False, configs=None):
    configs = configs or [(16, 4, 40, 3, 5, "pad", torch.float32), (24, 3, 48, 2, 6, None, torch.float32),
                          (12, 2, 20, 2, 4, "causal", torch.float64), (16, 4, 32, 4, 5, "pad", torch.float32)]
    device = get_device()
    cases = []
    for i, (d, h, f, b, s, mask_kind, dtype) in enumerate(configs):
        def make(d=d, h=h, f=f, b=b, s=s, mask_kind=mask_kind, dtype=dtype, i=i):
            torch.manual_seed(1000 + i)
            module = build_module("EncoderBlock", cls, (d, h, f, dropout, norm_first), dtype)
            module.train(train)
            randomise_norms(encoder_parts(module, d, f), seed=i)
            x = randn(b, s, d, seed=1100 + i, dtype=dtype, device=device)
            if mask_kind == "pad":
                lengths = torch.arange(b) % s + 2
                mask = (torch.arange(s)[None, :] < lengths.clamp(max=s)[:, None])[:, None, None, :].to(device)
            elif mask_kind == "causal":
                mask = torch.ones(s, s, dtype=torch.bool, device=device).tril()[None, None]
            else:
                mask = None
            return module, x, mask
        cases.append(Case(f"D={d}, H={h}, d_ff={f}, x [{b}, {s}, {d}], mask {mask_kind}, {dtype}", make))
    return cases


def _variant(styles, **kw):
    def impl(order, module, x, mask):
        return encoder_forward(encoder_parts(module, x.size(-1)), order, x, mask, styles, **kw)
    return impl


_MISSING_RESIDUAL = ("The block never adds its input back: each sublayer must compute x + Sublayer(...), so that "
                     "the input (and its gradient) passes through unchanged next to the sublayer. Without it a "
                     "deep stack has no identity path and gradients vanish.")
_NORM_ON_SUBLAYER = ("You normalised the sublayer's output and then added the input: x + LayerNorm(Sublayer(x)). "
                     "The norm goes around the sum in Post-LN, LayerNorm(x + Sublayer(x)), or on the sublayer's "
                     "input in Pre-LN, x + Sublayer(LayerNorm(x)).")
_NORMED_STREAM = ("You replaced the residual stream by its norm (h = LayerNorm(x); x = h + Sublayer(h)). In "
                  "Pre-LN only the sublayer sees the normalised copy: x = x + Sublayer(LayerNorm(x)).")

POST_PITFALLS = [
    Pitfall("missing residual", _MISSING_RESIDUAL, S_RESIDUAL, _variant(("post_no_residual", "post_no_residual"))),
    Pitfall("missing residual (around the attention)", _MISSING_RESIDUAL, S_RESIDUAL,
            _variant(("post_no_residual", "post"))),
    Pitfall("missing residual (around the feed-forward)", _MISSING_RESIDUAL, S_RESIDUAL,
            _variant(("post", "post_no_residual"))),
    Pitfall("LayerNorm in the wrong place (Pre-LN where Post-LN was asked)",
            "With norm_first=False the block is the paper's Post-LN: x = LayerNorm(x + Dropout(Sublayer(x))). "
            "You normalised the sublayer's input instead (Pre-LN).", S_PLACEMENT, _variant(("pre", "pre"))),
    Pitfall("LayerNorm in the wrong place (x + LayerNorm(sublayer))", _NORM_ON_SUBLAYER, S_PLACEMENT,
            _variant(("norm_on_sublayer", "norm_on_sublayer"))),
    Pitfall("LayerNorm in the wrong place (the residual stream normalised)", _NORMED_STREAM, S_PLACEMENT,
            _variant(("normed_stream", "normed_stream"))),
]

PRE_PITFALLS = [
    Pitfall("LayerNorm in the wrong place (Post-LN where Pre-LN was asked)",
            "With norm_first=True the block is Pre-LN: x = x + Dropout(Sublayer(LayerNorm(x))). Your block "
            "normalises after the residual add (Post-LN): does it read its norm_first argument?",
            S_PLACEMENT, _variant(("post", "post"))),
    Pitfall("missing residual", _MISSING_RESIDUAL, S_RESIDUAL, _variant(("pre_no_residual", "pre_no_residual"))),
    Pitfall("missing residual (around the attention)", _MISSING_RESIDUAL, S_RESIDUAL,
            _variant(("pre_no_residual", "pre"))),
    Pitfall("missing residual (around the feed-forward)", _MISSING_RESIDUAL, S_RESIDUAL,
            _variant(("pre", "pre_no_residual"))),
    Pitfall("LayerNorm in the wrong place (x + LayerNorm(sublayer))", _NORM_ON_SUBLAYER, S_PLACEMENT,
            _variant(("norm_on_sublayer", "norm_on_sublayer"))),
    Pitfall("LayerNorm in the wrong place (the residual stream normalised)", _NORMED_STREAM, S_PLACEMENT,
            _variant(("normed_stream", "normed_stream"))),
]


def _probe_parts(cls):
    __tracebackhide__ = True
    torch.manual_seed(0)
    module = build_module("EncoderBlock", cls, (16, 4, 40, 0.1, False))
    encoder_parts(module, 16, 40)


@single_threaded
def check_encoder_block(cls, norm_first: bool = False) -> None:
    """``cls(d_model, n_heads, d_ff, dropout, norm_first)``, ``forward(x [B, S, D], mask=None) -> [B, S, D]``,
    compared in eval mode with the Post-LN (``norm_first=False``) or Pre-LN wiring of its own parts."""
    __tracebackhide__ = True
    title = f"EncoderBlock ({'Pre-LN' if norm_first else 'Post-LN'})"
    _probe_parts(cls)
    styles = ("pre", "pre") if norm_first else ("post", "post")
    compare_with_roles(title, _block_cases(cls, norm_first), lambda m, x, mask: m(x, mask), _variant(styles),
                       PRE_PITFALLS if norm_first else POST_PITFALLS, norm_orders(2))


# --------------------------------------------------------------------------- dropout placement

def _zero(t):
    return torch.zeros_like(t)


def _dropout_variant(post_style, pre_style, **kw):
    def impl(order, module, x, mask, norm_first):
        styles = (pre_style,) * 2 if norm_first else (post_style,) * 2
        return encoder_forward(encoder_parts(module, x.size(-1)), order, x, mask, styles, drop=_zero, **kw)
    return impl


DROPOUT_PITFALLS = [
    Pitfall("dropout after the norm (the seed's block)",
            "Your block computes Dropout(LayerNorm(x + Sublayer(x))), as the seed's TransformerBlock does. Dropout "
            "belongs on the sublayer's output *before* the residual add: LayerNorm(x + Dropout(Sublayer(x))) "
            "(Vaswani et al. §5.4). After the norm it zeroes features of the whole residual stream, input "
            "included, and rescales the rest by 1/(1-p).", S_DROPOUT,
            _dropout_variant("dropout_after_norm", "pre_dropout_after_norm")),
    Pitfall("dropout on the residual sum",
            "Your block applies dropout to x + Sublayer(x), which drops the residual path too. Only the "
            "sublayer's output is dropped: x + Dropout(Sublayer(...)).", S_DROPOUT,
            _dropout_variant("dropout_on_sum", "pre_dropout_on_sum")),
    Pitfall("no dropout on the sublayer outputs",
            "Your block never applies dropout to the sublayer outputs (the dropout argument has no effect "
            "there). The paper's regularisation is Dropout(Sublayer(x)) before each residual add.", S_DROPOUT,
            _dropout_variant("post_no_dropout", "pre_no_dropout")),
    Pitfall("no dropout on the sublayer outputs", "Your block never applies dropout to the sublayer outputs (only "
            "inside the feed-forward). The paper's regularisation is Dropout(Sublayer(x)) before each residual add.",
            S_DROPOUT, _dropout_variant("post_no_dropout", "pre_no_dropout", ff_inner_dropped=True)),
]


@single_threaded
def check_dropout_placement(cls) -> None:
    """Dropout sits on each sublayer's output, before the residual add.

    Probed in train mode with ``dropout = 1``: every dropped path is then exactly
    zero, so the output shows where dropout sits (Post-LN: norm2(norm1(x)); Pre-LN: x)."""
    __tracebackhide__ = True
    _probe_parts(cls)
    configs = {False: [(16, 4, 40, 3, 5, "pad", torch.float32), (12, 2, 20, 2, 4, None, torch.float64)],
               True: [(16, 4, 32, 2, 5, "pad", torch.float32), (8, 2, 24, 3, 3, None, torch.float32)]}

    def reference(order, module, x, mask, norm_first):
        return _dropout_variant("post", "pre")(order, module, x, mask, norm_first)

    # Post-LN first (the seed's block), then Pre-LN: each arrangement is diagnosed on its own.
    for norm_first, conf in configs.items():
        cases = [Case(case.label + (", Pre-LN" if norm_first else ", Post-LN") + ", dropout=1, train mode",
                      lambda make=case.make, nf=norm_first: (*make(), nf))
                 for case in _block_cases(cls, norm_first, dropout=1.0, train=True, configs=conf)]
        compare_with_roles("EncoderBlock dropout", cases, lambda m, x, mask, nf: m(x, mask), reference,
                           DROPOUT_PITFALLS, norm_orders(2), announce=False)
    passed("EncoderBlock dropout", "on each sublayer's output, before the residual add (Post-LN and Pre-LN)")


# --------------------------------------------------------------------------- LayerNorm, not BatchNorm

def _batch_dependence(title):
    fail(title, blocks.batchnorm_pitfall(S_NORM), S_NORM)


@single_threaded
def check_block_behaviour(cls) -> None:
    """Properties any right block has: each sequence normalised on its own (no BatchNorm), padding
    invariance, batch of one, the same output in train and eval mode at dropout 0, determinism in eval."""
    __tracebackhide__ = True
    title = "EncoderBlock behaviour"
    device = get_device()
    torch.manual_seed(0)
    module = build_module(title, cls, (16, 4, 32, 0.0, False))
    for name, sub in module.named_modules():
        if isinstance(sub, nn.modules.batchnorm._BatchNorm):
            fail(title, blocks.batchnorm_pitfall(S_NORM) + f" (found {type(sub).__name__} at '{name}')", S_NORM)
    module.train()
    x = randn(4, 5, 16, seed=7, device=device)
    with torch.no_grad():
        try:
            base = module(x.clone())
            changed = x.clone()
            changed[1:] = changed[1:] * 3.0 + 1.0
            other = module(changed)
            one = module(x[:1].clone())
        except Exception as exc:
            fail(title, f"your block raised {type(exc).__name__}: {exc}")
    if not torch.allclose(other[0], base[0], atol=1e-5) or not torch.allclose(one[0], base[0], atol=1e-5):
        fail(title, "in train mode, the output for sequence 0 depends on the other sequences of the batch. "
                    + blocks.batchnorm_pitfall(S_NORM), S_NORM)
    # Padding invariance: three more (masked) pad positions must not change the real positions.
    mask = torch.tensor([[True] * 5 + [False] * 3], device=device)[:, None, None, :].expand(4, 1, 1, 8)
    padded = torch.cat([x, randn(4, 3, 16, seed=8, device=device) * 10], dim=1)
    with torch.no_grad():
        short = module(x, torch.ones(4, 1, 1, 5, dtype=torch.bool, device=device))
        long = module(padded, mask)
    if not torch.allclose(long[:, :5], short, atol=1e-5):
        fail(title, "adding masked padding positions changed the outputs of the real tokens: padding must be "
                    "invisible. Pass the mask to the attention, and normalise each token on its own features "
                    "(LayerNorm), never with statistics taken across positions.", S_NORM)
    module.eval()
    with torch.no_grad():
        evaluated = module(x)
    if not torch.allclose(evaluated, base, atol=1e-5):
        fail(title, "at dropout 0 the block gives different outputs in train and eval mode (a train/eval "
                    "mismatch). " + blocks.batchnorm_pitfall(S_NORM), S_NORM)
    dropped = build_module(title, cls, (16, 4, 32, 0.5, False))
    probe_eval_determinism(title, dropped, (x,), S_DROPOUT)
    passed(title, "normalises each token on its own, ignores padding, same in train and eval mode at dropout 0")


@single_threaded
def check_block_by_hand(cls) -> None:
    """Hidden test: the learner wired the block, not PyTorch's TransformerEncoderLayer or the reference's."""
    __tracebackhide__ = True
    torch.manual_seed(0)
    blocks.check_block_not_delegated("EncoderBlock", build_module("EncoderBlock", cls, (16, 4, 32, 0.1, False)))


seal(__name__)
