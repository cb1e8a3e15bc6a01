"""Checks for chapter 4, blocks (book/ch04_blocks).

The exercise builds a ``FeedForward`` and an ``EncoderBlock(d_model, n_heads, d_ff,
dropout, norm_first)`` from ``tformer_ref.attention.MultiHeadAttention``,
``nn.LayerNorm``, ``nn.Linear`` and dropout. The checks recompute the block from
the learner's own parts (see ``blocks``), so any right wiring passes whatever
its names, helpers or registration order, and each known wrong wiring is named.
"""
from __future__ import annotations

from dataclasses import replace

import torch
import torch.nn as nn
import torch.nn.functional as F

from tformer_ref.device import get_device
from ..guard.integrity import seal
from .blocks import (Parts, check_block_not_delegated, compare_with_roles, find_parts,
                     holds, keep, norm_orders, post_ln, pre_ln, randomise_norms,
                     reject_batchnorm)
from .cases import build_module, randn
from .diagnosis import (Case, Diagnosis, Pitfall, Section, compare_to_reference, fail,
                        passed, single_threaded)

CHAPTER = "ch04_blocks"
S_RESIDUAL = Section(CHAPTER, "4.1", "Residual connections")
S_FF = Section(CHAPTER, "4.2", "The feed-forward sublayer")
S_NORM = Section(CHAPTER, "4.3", "LayerNorm, not BatchNorm")
S_DROPOUT = Section(CHAPTER, "4.4", "Where dropout goes")
S_PLACEMENT = Section(CHAPTER, "4.5", "Post-LN and Pre-LN")
S_XAVIER = Section(CHAPTER, "4.6", "Xavier initialisation")
S_TYING = Section(CHAPTER, "4.7", "Weight tying")


# -------------------------------------------------------------------------- FeedForward

def _ff_linears(title, module, d_model, d_ff):
    __tracebackhide__ = True
    linears = [(n, m) for n, m in module.named_modules() if isinstance(m, nn.Linear)]
    shapes = [tuple(m.weight.shape) for _, m in linears]
    if sorted(shapes) != sorted([(d_ff, d_model), (d_model, d_ff)]):
        listing = ", ".join(f"{n} {list(m.weight.shape)}" for n, m in linears) or "none"
        fail(title, f"expected exactly two nn.Linear layers, Linear(d_model={d_model}, "
                    f"d_ff={d_ff}) then Linear(d_ff, d_model); found: {listing}.", S_FF)
    first = next(m for _, m in linears if tuple(m.weight.shape) == (d_ff, d_model))
    second = next(m for _, m in linears if tuple(m.weight.shape) == (d_model, d_ff))
    return first, second


def _ff_cases(cls):
    configs = [(8, 32, (2, 5), torch.float32), (12, 20, (3, 4), torch.float32),
               (6, 24, (2, 3), torch.float64), (16, 40, (1, 7), torch.float32)]
    cases = []
    for i, (d, f, lead, dtype) in enumerate(configs):
        def make(d=d, f=f, lead=lead, dtype=dtype, i=i):
            torch.manual_seed(40 + i)
            module = build_module("FeedForward", cls, (d, f), dtype).eval()
            return module, randn(*lead, d, seed=400 + i, dtype=dtype)
        cases.append(Case(f"D={d}, d_ff={f}, x {list(lead) + [d]}, {dtype}", make))
    return cases


def _ff_layers(module, x):
    """The learner's two Linear layers, found by shape (d_ff is the wider side)."""
    d_ff = max(m.out_features for m in module.modules() if isinstance(m, nn.Linear))
    return _ff_linears("FeedForward", module, x.size(-1), d_ff)


def _ff_reference(module, x):
    """FFN(x) = max(0, x·W1 + b1)·W2 + b2 with the learner's weights."""
    l1, l2 = _ff_layers(module, x)
    return F.linear(torch.relu(F.linear(x, l1.weight, l1.bias)), l2.weight, l2.bias)


def _ff_without_activation(module, x):  # two Linear layers, nothing between them
    l1, l2 = _ff_layers(module, x)
    return F.linear(F.linear(x, l1.weight, l1.bias), l2.weight, l2.bias)


def _ff_relu_at_output(module, x):  # a ReLU after the second layer too
    return torch.relu(_ff_reference(module, x))


FF_PITFALLS = (
    Pitfall("no activation between the two Linear layers",
            "Without the ReLU the two Linear layers collapse into one linear map "
            "(W2·W1): the sublayer can no longer compute anything a single matrix "
            "could not. FFN(x) = max(0, x·W1 + b1)·W2 + "
            "b2.", S_FF, _ff_without_activation),
    Pitfall("ReLU after the output layer",
            "The feed-forward ends with the second Linear, no activation after it: a "
            "ReLU there would make every update the sublayer adds to the residual "
            "stream non-negative.",
            S_FF, _ff_relu_at_output),
)


def _call_ff(module, x):
    return module(x)


@single_threaded
def check_feed_forward(cls) -> None:
    """``cls(d_model, d_ff)``: an nn.Module mapping x [..., D] to [..., D] (Linear,
    ReLU, Linear)."""
    __tracebackhide__ = True
    cases = _ff_cases(cls)
    module, _ = cases[0].make()  # fails early, and clearly, without the two layers
    _ff_linears("FeedForward", module, 8, 32)
    compare_to_reference("FeedForward", cases, _call_ff, _ff_reference, FF_PITFALLS)


# ------------------------------------------------------------------------- EncoderBlock

BATCHNORM = Diagnosis(
    "BatchNorm instead of LayerNorm",
    "BatchNorm normalises each feature with statistics taken across the batch (and the "
    "positions): padding tokens pollute them, a batch of one sentence at decoding time "
    "has no statistics to speak of, and eval mode switches to running averages that "
    "the training batches never matched. LayerNorm normalises each token's own D "
    "features: use nn.LayerNorm(d_model).", S_NORM)


def encoder_parts(module, d_model, d_ff=None) -> Parts:
    return find_parts("EncoderBlock", module, d_model, d_ff, 1, 2, BATCHNORM,
                      S_RESIDUAL)


def encoder_wired(attn_wiring, ff_wiring, drop=keep, ff=Parts.ff):
    """The encoder block recomputed from the learner's own parts, its attention wrapped
    by ``attn_wiring`` and its feed-forward ``ff(parts, h)`` by ``ff_wiring``:
    ``block(order, module, x, mask)``, ``order`` saying which norm serves which
    sublayer."""
    def block(order, module, x, mask):
        parts = encoder_parts(module, x.size(-1)).in_role(order)
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
BLOCK_CONFIGS = ((16, 4, 40, 3, 5, "pad", torch.float32),
                 (24, 3, 48, 2, 6, None, torch.float32),
                 (12, 2, 20, 2, 4, "causal", torch.float64),
                 (16, 4, 32, 4, 5, "pad", torch.float32))


def _block_cases(cls, norm_first, dropout=0.1, train=False, configs=BLOCK_CONFIGS):
    cases = []
    for i, (d, h, f, b, s, mask_kind, dtype) in enumerate(configs):
        def make(d=d, h=h, f=f, b=b, s=s, mask_kind=mask_kind, dtype=dtype, i=i):
            torch.manual_seed(1000 + i)
            args = (d, h, f, dropout, norm_first)
            module = build_module("EncoderBlock", cls, args, dtype)
            module.train(train)
            randomise_norms(encoder_parts(module, d, f), seed=i)
            x = randn(b, s, d, seed=1100 + i, dtype=dtype, device=get_device())
            return module, x, _mask(mask_kind, b, s, get_device())
        cases.append(Case(f"D={d}, H={h}, d_ff={f}, x [{b}, {s}, {d}], mask "
                          f"{mask_kind}, {dtype}", make))
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
    "vanish.")

MISSING_RESIDUAL = Pitfall("missing residual", _MISSING_RESIDUAL, S_RESIDUAL,
                           encoder_wired(post_ln_no_residual, post_ln_no_residual))
NO_RESIDUAL_AROUND_ATTENTION = Pitfall(
    "missing residual (around the attention)", _MISSING_RESIDUAL, S_RESIDUAL,
    encoder_wired(post_ln_no_residual, post_ln))
NO_RESIDUAL_AROUND_FF = Pitfall(
    "missing residual (around the feed-forward)", _MISSING_RESIDUAL, S_RESIDUAL,
    encoder_wired(post_ln, post_ln_no_residual))
PRE_LN_FOR_POST_LN = Pitfall(
    "LayerNorm in the wrong place (Pre-LN where Post-LN was asked)",
    "With norm_first=False the block is the paper's Post-LN: x = LayerNorm(x + "
    "Dropout(Sublayer(x))). You normalised the sublayer's input instead (Pre-LN).",
    S_PLACEMENT, PRE_LN_BLOCK)
POST_LN_FOR_PRE_LN = Pitfall(
    "LayerNorm in the wrong place (Post-LN where Pre-LN was asked)",
    "With norm_first=True the block is Pre-LN: x = x + "
    "Dropout(Sublayer(LayerNorm(x))). Your block normalises after the residual add "
    "(Post-LN): does it read its norm_first argument?",
    S_PLACEMENT, POST_LN_BLOCK)
NORM_ON_SUBLAYER = Pitfall(
    "LayerNorm in the wrong place (x + LayerNorm(sublayer))",
    "You normalised the sublayer's output and then added the input: x + "
    "LayerNorm(Sublayer(x)). The norm goes around the sum in Post-LN, LayerNorm(x + "
    "Sublayer(x)), or on the sublayer's input in Pre-LN, x + Sublayer(LayerNorm(x)).",
    S_PLACEMENT, encoder_wired(_norm_on_sublayer, _norm_on_sublayer))
NORMED_STREAM = Pitfall(
    "LayerNorm in the wrong place (the residual stream normalised)",
    "You replaced the residual stream by its norm (h = LayerNorm(x); x = h + "
    "Sublayer(h)). In Pre-LN only the sublayer sees the normalised copy: x = x + "
    "Sublayer(LayerNorm(x)).",
    S_PLACEMENT, encoder_wired(_normed_stream, _normed_stream))

POST_PITFALLS = (MISSING_RESIDUAL, NO_RESIDUAL_AROUND_ATTENTION, NO_RESIDUAL_AROUND_FF,
                 PRE_LN_FOR_POST_LN, NORM_ON_SUBLAYER, NORMED_STREAM)
PRE_PITFALLS = (
    POST_LN_FOR_PRE_LN,
    replace(MISSING_RESIDUAL,
            impl=encoder_wired(_pre_ln_no_residual, _pre_ln_no_residual)),
    replace(NO_RESIDUAL_AROUND_ATTENTION,
            impl=encoder_wired(_pre_ln_no_residual, pre_ln)),
    replace(NO_RESIDUAL_AROUND_FF, impl=encoder_wired(pre_ln, _pre_ln_no_residual)),
    NORM_ON_SUBLAYER, NORMED_STREAM)


def _call_block(module, x, mask):
    return module(x, mask)


def _probe_parts(cls):
    __tracebackhide__ = True
    torch.manual_seed(0)
    module = build_module("EncoderBlock", cls, (16, 4, 40, 0.1, False))
    encoder_parts(module, 16, 40)


@single_threaded
def check_encoder_block(cls, norm_first: bool = False) -> None:
    """``cls(d_model, n_heads, d_ff, dropout, norm_first)``, ``forward(x [B, S, D],
    mask=None) -> [B, S, D]``, compared in eval mode with the Post-LN
    (``norm_first=False``) or Pre-LN wiring of its own parts."""
    __tracebackhide__ = True
    title = f"EncoderBlock ({'Pre-LN' if norm_first else 'Post-LN'})"
    _probe_parts(cls)
    reference = PRE_LN_BLOCK if norm_first else POST_LN_BLOCK
    compare_with_roles(title, _block_cases(cls, norm_first), _call_block, reference,
                       PRE_PITFALLS if norm_first else POST_PITFALLS, norm_orders(2))


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
    "rescales the rest by 1/(1-p).", S_DROPOUT,
    encoder_wired(_dropout_after_norm, _dropout_after_norm, drop=_zero))
DROPOUT_ON_SUM = Pitfall(
    "dropout on the residual sum",
    "Your block applies dropout to x + Sublayer(x), which drops the residual path too. "
    "Only the sublayer's output is dropped: x + Dropout(Sublayer(...)).", S_DROPOUT,
    encoder_wired(_dropout_on_sum, _dropout_on_sum, drop=_zero))
NO_DROPOUT = Pitfall(
    "no dropout on the sublayer outputs",
    "Your block never applies dropout to the sublayer outputs (the dropout argument "
    "has no effect there). The paper's regularisation is Dropout(Sublayer(x)) before "
    "each residual add.", S_DROPOUT,
    encoder_wired(_post_ln_no_dropout, _post_ln_no_dropout, drop=_zero))
ONLY_FF_DROPOUT = Pitfall(
    "no dropout on the sublayer outputs",
    "Your block never applies dropout to the sublayer outputs (only inside the "
    "feed-forward). The paper's regularisation is Dropout(Sublayer(x)) before each "
    "residual add.", S_DROPOUT,
    encoder_wired(_post_ln_no_dropout, _post_ln_no_dropout, drop=_zero,
                  ff=_ff_hidden_dropped))

POST_DROPOUT_PITFALLS = (SEED_DROPOUT, DROPOUT_ON_SUM, NO_DROPOUT, ONLY_FF_DROPOUT)
PRE_DROPOUT_PITFALLS = (
    replace(SEED_DROPOUT, impl=encoder_wired(
        _pre_ln_input_dropped, _pre_ln_input_dropped, drop=_zero)),
    replace(DROPOUT_ON_SUM, impl=encoder_wired(
        _pre_ln_dropout_on_sum, _pre_ln_dropout_on_sum, drop=_zero)),
    replace(NO_DROPOUT, impl=encoder_wired(
        _pre_ln_no_dropout, _pre_ln_no_dropout, drop=_zero)),
    replace(ONLY_FF_DROPOUT, impl=encoder_wired(
        _pre_ln_no_dropout, _pre_ln_no_dropout, drop=_zero, ff=_ff_hidden_dropped)))

# Post-LN first (the seed's block), then Pre-LN: each one is diagnosed on its own.
DROPOUT_ROUNDS = (
    ("Post-LN", False, encoder_wired(post_ln, post_ln, drop=_zero),
     POST_DROPOUT_PITFALLS, ((16, 4, 40, 3, 5, "pad", torch.float32),
                             (12, 2, 20, 2, 4, None, torch.float64))),
    ("Pre-LN", True, encoder_wired(pre_ln, pre_ln, drop=_zero),
     PRE_DROPOUT_PITFALLS, ((16, 4, 32, 2, 5, "pad", torch.float32),
                            (8, 2, 24, 3, 3, None, torch.float32))),
)


@single_threaded
def check_dropout_placement(cls) -> None:
    """Dropout sits on each sublayer's output, before the residual add.

    Probed in train mode with ``dropout = 1``: every dropped path is then exactly
    zero, so the output shows where dropout sits (Post-LN: norm2(norm1(x));
    Pre-LN: x)."""
    __tracebackhide__ = True
    _probe_parts(cls)
    for name, norm_first, reference, pitfalls, configs in DROPOUT_ROUNDS:
        cases = [Case(f"{case.label}, {name}, dropout=1, train mode", case.make)
                 for case in _block_cases(cls, norm_first, 1.0, True, configs)]
        compare_with_roles("EncoderBlock "
                           "dropout", cases, _call_block, reference, pitfalls,
                           norm_orders(2), announce=False)
    passed("EncoderBlock dropout",
           "on each sublayer's output, before the residual add (Post-LN and Pre-LN)")


# --------------------------------------------------------------------------- behaviour
# Properties any right block has, probed on one block at dropout 0.

PADDING_VISIBLE = Diagnosis(
    "padding changes the real tokens",
    "Padding must be invisible. Pass the mask to the attention, and normalise each "
    "token on its own features (LayerNorm), never with statistics taken across "
    "positions.", S_NORM)
DROPOUT_IN_EVAL = Diagnosis(
    "dropout still on in eval mode",
    "Dropout must be off in eval mode: use nn.Dropout or pass "
    "`dropout_p if self.training else 0.0`.", S_DROPOUT)


def _batch_independent(module, x):
    """In train mode (where BatchNorm uses batch statistics), sequence 0's output
    ignores the other sequences, and a batch of one gives it too."""
    module.train()
    changed = x.clone()
    changed[1:] = changed[1:] * 3.0 + 1.0
    base, other, one = module(x.clone()), module(changed), module(x[:1].clone())
    return (torch.allclose(other[0], base[0], atol=1e-5)
            and torch.allclose(one[0], base[0], atol=1e-5))


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


BEHAVIOUR_PROBES = (
    (_batch_independent, BATCHNORM,
     "In train mode, the output for sequence 0 depends on the other sequences of the "
     "batch."),
    (_padding_invisible, PADDING_VISIBLE,
     "Adding masked padding positions changed the outputs of the real tokens."),
    (_same_in_train_and_eval, BATCHNORM,
     "At dropout 0 the block gives different outputs in train and eval mode (a "
     "train/eval mismatch)."),
)


@single_threaded
def check_block_behaviour(cls) -> None:
    """Properties any right block has: each sequence normalised on its own (no
    BatchNorm), padding invariance, batch of one, the same output in train and eval mode
    at dropout 0, determinism in eval."""
    __tracebackhide__ = True
    title = "EncoderBlock behaviour"
    torch.manual_seed(0)
    module = build_module(title, cls, (16, 4, 32, 0.0, False))
    reject_batchnorm(title, module, BATCHNORM)
    x = randn(4, 5, 16, seed=7)
    for probe, diagnosis, observed in BEHAVIOUR_PROBES:
        if not holds(title, probe, module, x):
            diagnosis.fail(title, observed)
    dropped = build_module(title, cls, (16, 4, 32, 0.5, False))
    if not holds(title, _deterministic_in_eval, dropped, x):
        DROPOUT_IN_EVAL.fail(title, "Two calls in eval mode gave different outputs.")
    passed(title, "normalises each token on its own, ignores padding, same in train "
                  "and eval mode at dropout 0")


@single_threaded
def check_block_by_hand(cls) -> None:
    """Hidden test: the learner wired the block, not PyTorch's
    TransformerEncoderLayer or the reference's."""
    __tracebackhide__ = True
    torch.manual_seed(0)
    module = build_module("EncoderBlock", cls, (16, 4, 32, 0.1, False))
    check_block_not_delegated("EncoderBlock", module)


seal(__name__)
