"""Checks for chapter 3, masks (book/ch03_masks).

Convention the exercise uses, as the package does: a bool keep-mask, True = may attend,
broadcastable to the scores' [B, H, Sq, Sk].
"""
from __future__ import annotations

import math

import torch

from tformer_ref.attention import scaled_dot_product_attention
from tformer_ref.device import get_device
from tformer_ref.masks import causal_mask, padding_mask
from ..guard.integrity import seal
from .cases import randn
from .delegation import check_not_delegated
from .diagnosis import Case, Pitfall, Raised, Section, compare_to_reference, fail, passed, run
from .ch02 import S_SATURATION, _pair

CHAPTER = "ch03_masks"
S_PADDING = Section(CHAPTER, "3.1", "Padding masks")
S_CAUSAL = Section(CHAPTER, "3.2", "The causal mask")
S_COMBINE = Section(CHAPTER, "3.3", "Combining masks")
S_CONVENTIONS = Section(CHAPTER, "3.4", "Three conventions for one mask")
S_FILL = Section(CHAPTER, "3.5", "Fill values, half precision and NaN")
S_PROBES = Section(CHAPTER, "3.6", "Probes: causality and pad invariance")



# --------------------------------------------------------------------------- causal mask

def _as_4d(fn):
    """Accept a [S, S] answer as well as [1, 1, S, S]: both broadcast the same way."""
    def call(size):
        out = fn(size)
        if isinstance(out, torch.Tensor) and out.dim() == 2:
            out = out[None, None]
        return out
    return call


def _ones(size):
    return torch.ones(size, size, device=get_device())


CAUSAL_PITFALLS = [
    Pitfall("triu instead of tril",
            "Your mask is upper triangular: query i may attend to keys i..S-1, i.e. to itself and the *future*. "
            "With True = attend, the causal mask is torch.tril (keys 0..i).", S_CAUSAL,
            lambda s: _ones(s).triu().bool()[None, None]),
    Pitfall("mask inverted",
            "Your mask is True where the query must *not* attend (triu(1)): that is nn.MultiheadAttention's "
            "convention (True = ignore). This exercise, like F.scaled_dot_product_attention, uses True = attend.",
            S_CONVENTIONS, lambda s: _ones(s).triu(1).bool()[None, None]),
    Pitfall("diagonal excluded",
            "Your mask forbids a query to attend to itself (tril(-1)): query 0 then has nothing to attend to. "
            "Query i may attend to keys 0..i, the diagonal included.", S_CAUSAL,
            lambda s: _ones(s).tril(-1).bool()[None, None]),
    Pitfall("float mask instead of bool",
            "Your mask holds 1.0/0.0 floats. PyTorch *adds* a float mask to the scores, so a 1/0 mask masks "
            "nothing. Return a bool tensor (.bool()).", S_CONVENTIONS,
            lambda s: _ones(s).tril()[None, None]),
]


def check_causal_mask(causal_mask_fn) -> None:
    """``causal_mask_fn(size) -> bool [1, 1, S, S]`` (or [S, S]), True = may attend."""
    __tracebackhide__ = True
    cases = [Case(f"size={s}", lambda s=s: (s,)) for s in (1, 4, 7)]
    compare_to_reference("causal_mask", cases, _as_4d(causal_mask_fn),
                         lambda s: causal_mask(s, device=get_device()), CAUSAL_PITFALLS, atol=0, rtol=0)


# --------------------------------------------------------------------------- padding mask

PADDING_PITFALLS = [
    Pitfall("mask broadcast over the wrong axis",
            "Your mask has shape [B, 1, S]. Against the scores [B, H, Sq, Sk] broadcasting aligns from the right, "
            "so it is read as [1, B, 1, S]: its batch axis lands on the *heads* axis. When B ≠ H it crashes; when "
            "B == H it runs and head h silently uses sequence h's padding. Return [B, 1, 1, S] "
            "(e.g. (tokens != pad_id)[:, None, None, :]).", S_PADDING,
            lambda t, p: (t != p)[:, None, :]),
    Pitfall("mask broadcast over the wrong axis ([B, S])",
            "Your mask has shape [B, S]. Against the scores [B, H, Sq, Sk] it is read as [1, 1, B, S]: the batch "
            "axis lands on the *query* axis. Return [B, 1, 1, S].", S_PADDING,
            lambda t, p: t != p),
    Pitfall("mask on the query axis",
            "Your mask has shape [B, 1, S, 1]: it removes padded *queries* instead of padded *keys*. "
            "Return [B, 1, 1, S], so that no query attends to a padded key.", S_PADDING,
            lambda t, p: (t != p)[:, None, :, None]),
    Pitfall("mask inverted",
            "Your mask is True on the padding: that is nn.MultiheadAttention's key_padding_mask convention "
            "(True = ignore). Here, as in F.scaled_dot_product_attention, True = attend: tokens != pad_id.",
            S_CONVENTIONS, lambda t, p: (t == p)[:, None, None, :]),
    Pitfall("pad id hard-coded",
            "Your mask treats token 0 as padding whatever pad_id is (the seed's `x != 0`). Compare with pad_id.",
            S_PADDING, lambda t, p: (t != 0)[:, None, None, :]),
    Pitfall("float mask instead of bool",
            "Your mask holds 1.0/0.0 floats. PyTorch *adds* a float mask to the scores, so a 1/0 mask masks "
            "nothing. Return a bool tensor.", S_CONVENTIONS,
            lambda t, p: (t != p)[:, None, None, :].float()),
]


def _padding_cases():
    dev = get_device()
    return [
        Case("tokens [2, 5], pad_id=0", lambda: (torch.tensor([[5, 6, 7, 0, 0], [1, 2, 3, 4, 9]], device=dev), 0)),
        Case("tokens [3, 4], pad_id=1 (and 0 is a real token)",
             lambda: (torch.tensor([[0, 3, 1, 1], [2, 0, 5, 1], [4, 4, 4, 4]], device=dev), 1)),
        Case("tokens [4, 6], pad_id=0 (B == 4 == H in the lesson's model)",
             lambda: (torch.tensor([[1, 2, 0, 0, 0, 0], [3, 3, 3, 3, 3, 0], [7, 0, 0, 0, 0, 0], [1, 2, 3, 4, 5, 6]],
                                   device=dev), 0)),
    ]


def check_padding_mask(padding_mask_fn) -> None:
    """``padding_mask_fn(tokens [B, S] int, pad_id) -> bool [B, 1, 1, S]``, True on real tokens."""
    __tracebackhide__ = True
    compare_to_reference("padding_mask", _padding_cases(), padding_mask_fn, padding_mask, PADDING_PITFALLS,
                         atol=0, rtol=0)


# --------------------------------------------------------------------------- masked attention

def _masked(q, k, v, mask, *, fill="min", after_softmax=False, invert=False, scale=True):
    if mask is None:
        raise ValueError("mask is required")
    scores = q @ k.transpose(-2, -1)
    if scale:
        scores = scores / math.sqrt(q.size(-1))
    drop = mask if invert else ~mask
    if after_softmax:
        weights = scores.softmax(-1).masked_fill(drop, 0.0)
    else:
        value = {"min": torch.finfo(scores.dtype).min, "-inf": float("-inf"), "-1e9": -1e9, "zero": 0.0}[fill]
        weights = scores.masked_fill(drop, value).softmax(-1)
    return weights @ v, weights


MASKED_PITFALLS = [
    Pitfall("mask applied after softmax",
            "You zeroed the masked weights *after* the softmax, so each row no longer sums to 1 (the masked keys "
            "took their share of the probability and it was thrown away). Fill the *scores* before softmax.",
            S_FILL, lambda q, k, v, m: _masked(q, k, v, m, after_softmax=True)),
    Pitfall("mask inverted",
            "You masked where the mask is True. Here True means *attend* (F.scaled_dot_product_attention's "
            "convention); nn.MultiheadAttention's is the opposite. Fill where the mask is False: masked_fill(~mask, ...).",
            S_CONVENTIONS, lambda q, k, v, m: _masked(q, k, v, m, invert=True)),
    Pitfall("NaN on fully masked rows",
            "Filling with -inf turns a query whose keys are all masked into softmax(-inf, ..., -inf) = 0/0 = NaN, "
            "and the NaN spreads to everything downstream. Fill with a finite value such as "
            "torch.finfo(scores.dtype).min (then zero such rows, or leave them uniform).", S_FILL,
            lambda q, k, v, m: _masked(q, k, v, m, fill="-inf")),
    Pitfall("masked with 0 instead of a large negative number",
            "You set the masked scores to 0. exp(0) = 1, so masked keys still get weight. The fill must be very "
            "negative so that exp() of it is 0.", S_FILL,
            lambda q, k, v, m: _masked(q, k, v, m, fill="zero")),
    Pitfall("mask ignored",
            "Your output is what attention gives without any mask: the mask argument is not used.", S_PADDING,
            lambda q, k, v, m: _masked(q, k, v, torch.ones_like(m))),
    Pitfall("no scaling",
            "Your scores are not divided by √d_k (chapter 2).", S_SATURATION,
            lambda q, k, v, m: _masked(q, k, v, m, scale=False)),
]

HALF_PITFALL = Pitfall(
    "fill value that overflows in half precision",
    "Your fill value does not fit in float16, whose range ends at ±65504: -1e9 or -1e20 becomes -inf "
    "(masked_fill refuses it with 'value cannot be converted to type Half without overflow'), and -inf makes "
    "fully masked rows NaN. Use the dtype's own limit, torch.finfo(scores.dtype).min.", S_FILL,
    lambda q, k, v, m: _masked(q, k, v, m, fill="-1e9"))


def _fully_masked(mask, weights_shape):
    """[B, H, Sq, 1] bool: the queries that may attend to no key."""
    return ~mask.expand(weights_shape).any(dim=-1, keepdim=True)


def _lenient(fn, index):
    """``fn``'s output (index 0) or weights (index 1), with *finite* fully masked rows set to zero.

    The exercise accepts zeros or a uniform row for a query that has nothing to attend to;
    NaN and inf are left in place so that they are diagnosed."""
    def call(q, k, v, mask):
        result = fn(q, k, v, mask)
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            raise TypeError(f"must return a pair (out, weights), got {type(result).__name__}")
        part = result[index]
        if not isinstance(part, torch.Tensor) or part.dim() != 4:
            return part
        shape = (q.size(0), q.size(1), q.size(2), k.size(2))
        try:
            rows = _fully_masked(mask, shape)
            finite = torch.isfinite(part).all(dim=-1, keepdim=True)
            return part.masked_fill(rows & finite, 0.0)
        except RuntimeError:  # the wrong shape: leave it for the comparison to report
            return part
    return call


def _masked_cases(dtypes=(torch.float32, torch.float32, torch.float64, torch.float32)):
    dev = get_device()

    def pad(tokens):
        return (torch.tensor(tokens, device=dev) != 0)[:, None, None, :]

    def make_case(i, b, h, sq, sk, dh, mask_fn, dtype):
        def make():
            return (randn(b, h, sq, dh, seed=100 + 10 * i, dtype=dtype), randn(b, h, sk, dh, seed=101 + 10 * i, dtype=dtype),
                    randn(b, h, sk, dh, seed=102 + 10 * i, dtype=dtype), mask_fn())
        return make

    specs = [
        ("padding mask [2, 1, 1, 6], cross-attention Sq=4", 2, 4, 4, 6, 8,
         lambda: pad([[3, 4, 5, 0, 0, 0], [1, 2, 3, 4, 5, 6]])),
        ("causal mask [1, 1, 5, 5]", 2, 2, 5, 5, 8, lambda: causal_mask(5, device=dev)),
        ("padding & causal [3, 1, 5, 5], B == H == 3, a fully padded sequence (fully masked rows)", 3, 3, 5, 5, 4,
         lambda: pad([[1, 2, 3, 0, 0], [0, 0, 0, 0, 0], [4, 5, 6, 7, 8]]) & causal_mask(5, device=dev)),
        ("per-head mask [2, 2, 3, 4] with one fully masked query", 2, 2, 3, 4, 16,
         lambda: torch.tensor([[[[1, 1, 0, 0], [0, 0, 0, 0], [1, 0, 1, 1]], [[1, 1, 1, 1], [0, 1, 0, 0], [1, 1, 1, 0]]],
                               [[[0, 0, 0, 1], [1, 1, 1, 1], [1, 1, 0, 0]], [[1, 0, 0, 0], [0, 1, 0, 1], [0, 0, 1, 1]]]],
                              dtype=torch.bool, device=dev)),
    ]
    return [Case(f"{label}, {dtype}", make_case(i, b, h, sq, sk, dh, mask_fn, dtype))
            for i, ((label, b, h, sq, sk, dh, mask_fn), dtype) in enumerate(zip(specs, dtypes))]


def _compare_masked(title, cases, fn, pitfalls, atol, rtol):
    __tracebackhide__ = True
    for index, part in ((1, "weights"), (0, "output")):
        wrapped = [Pitfall(p.name, p.explanation, p.section, _lenient(p.impl, index)) for p in pitfalls]
        compare_to_reference(f"{title} ({part})", cases, _lenient(fn, index),
                             _pair(scaled_dot_product_attention, index), wrapped, atol=atol, rtol=rtol)


def check_masked_attention(masked_attention_fn) -> None:
    """``masked_attention_fn(q [B, H, Sq, Dh], k, v [B, H, Sk, Dh], mask bool broadcastable to [B, H, Sq, Sk])
    -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])``, True = may attend. A query with no key to attend to
    must give finite values: zeros (as the reference) or a uniform row are both accepted."""
    __tracebackhide__ = True
    _compare_masked("masked_attention", _masked_cases(), masked_attention_fn, MASKED_PITFALLS, 1e-5, 1e-4)


def check_masked_attention_half_precision(masked_attention_fn) -> None:
    """The same function in float16 and bfloat16: the fill value must not overflow, fully masked rows stay finite."""
    __tracebackhide__ = True
    title = "masked_attention in half precision"
    cases = _masked_cases((torch.float16, torch.bfloat16, torch.float16, torch.float16))
    for case in cases:
        got = run(masked_attention_fn, case.make())
        bad = None
        if isinstance(got, Raised):
            if "overflow" in str(got.exc).lower():
                bad = f"on case {case.label} your code raised {got!r}"
        elif isinstance(got, (tuple, list)) and len(got) == 2 and all(isinstance(t, torch.Tensor) for t in got):
            if not all(torch.isfinite(t).all() for t in got):
                q, k, v, mask = case.make()
                wide = run(masked_attention_fn, (q.float(), k.float(), v.float(), mask))
                finite_in_fp32 = (not isinstance(wide, Raised) and isinstance(wide, (tuple, list))
                                  and all(isinstance(t, torch.Tensor) and torch.isfinite(t).all() for t in wide))
                if finite_in_fp32:
                    bad = f"on case {case.label} your output has inf or NaN in {q.dtype} but not in float32"
                else:
                    p = MASKED_PITFALLS[2]
                    fail(title, f"this looks like the pitfall '{p.name}'. {p.explanation}", p.section)
        if bad:
            fail(title, f"this looks like the pitfall '{HALF_PITFALL.name}': {bad}. {HALF_PITFALL.explanation}",
                 HALF_PITFALL.section)
    _compare_masked(title, cases, masked_attention_fn, [HALF_PITFALL, *MASKED_PITFALLS], 2e-2, 2e-2)


def check_masked_attention_by_hand(masked_attention_fn) -> None:
    """Hidden test: no call to PyTorch's or the reference's attention."""
    __tracebackhide__ = True
    q, k, v = (randn(2, 2, 3, 4, seed=s) for s in (1, 2, 3))
    mask = causal_mask(3, device=get_device())
    check_not_delegated("masked_attention", lambda: masked_attention_fn(q, k, v, mask),
                        forbidden=["scaled_dot_product_attention", "multi_head_attention_forward", "tformer_ref"])


# --------------------------------------------------------------------------- probes

def check_mask_probes(masked_attention_fn, causal_mask_fn, padding_mask_fn) -> None:
    """Behaviour any right answer has, run with the learner's own three functions:
    changing future tokens leaves the past unchanged, and appending padding changes no real token's output."""
    __tracebackhide__ = True
    title = "mask probes"
    b, h, s, dh = 2, 2, 6, 8
    q, k, v = (randn(b, h, s, dh, seed=200 + i) for i in range(3))

    def out(q, k, v, mask):
        result = run(masked_attention_fn, (q, k, v, mask))
        if isinstance(result, Raised) or not isinstance(result, (tuple, list)) or len(result) != 2:
            fail(title, f"masked_attention must return (out, weights); it gave {result!r}")
        return result[0].detach()

    mask = run(_as_4d(causal_mask_fn), (s,))
    if isinstance(mask, Raised):
        fail(title, f"causal_mask({s}) raised {mask!r}")
    t = 3
    base = out(q, k, v, mask)
    future = [x.clone() for x in (q, k, v)]
    for x in future:
        x[:, :, t:] += 5.0
    moved = out(*future, mask)
    if not torch.allclose(base[:, :, :t], moved[:, :, :t], atol=1e-5):
        fail(title, f"causality: changing tokens {t}..{s - 1} changed the outputs of tokens 0..{t - 1}. "
                    "The past must not see the future: check your causal mask (tril, True = attend) and that "
                    "masked_attention fills where the mask is False, before the softmax.", S_PROBES)

    tokens = torch.tensor([[4, 5, 6, 0], [7, 8, 9, 3]], device=get_device())
    longer = torch.cat([tokens, torch.zeros(2, 3, dtype=tokens.dtype, device=tokens.device)], dim=1)
    qq, kk, vv = (randn(2, h, 7, dh, seed=210 + i) for i in range(3))
    short_mask = run(padding_mask_fn, (tokens, 0))
    long_mask = run(padding_mask_fn, (longer, 0))
    if isinstance(short_mask, Raised) or isinstance(long_mask, Raised):
        fail(title, f"padding_mask raised {short_mask if isinstance(short_mask, Raised) else long_mask!r}")
    short = out(qq[:, :, :4], kk[:, :, :4], vv[:, :, :4], short_mask)
    long = out(qq, kk, vv, long_mask)
    real = tokens != 0  # [B, S]: compare the outputs of real tokens only
    diff = (short - long[:, :, :4]).abs().amax(dim=(1, 3))
    if not torch.all(diff[real] < 1e-5):
        fail(title, "pad invariance: appending padding tokens changed the outputs of real tokens. Padded keys "
                    "must get zero weight: check the padding mask's shape [B, 1, 1, S] and its polarity.", S_PROBES)
    # What sits at padded positions must not matter either. With a mask on the wrong axis and B == H,
    # a sequence is masked with another sequence's padding and reads this garbage.
    pads = (longer == 0)[:, None, :, None]  # [B, 1, S, 1]
    garbage = [x.masked_fill(pads, 7.0) for x in (kk, vv)]
    other = out(qq, *garbage, long_mask)
    diff = (other - long).abs().amax(dim=(1, 3))
    if not torch.all(diff[longer != 0] < 1e-5):
        fail(title, "pad invariance: changing the keys and values at padded positions changed the outputs of "
                    "real tokens, so some query attends to padding. Check that the padding mask has shape "
                    "[B, 1, 1, S] (a [B, 1, S] mask puts the batch on the heads axis, and when B == H it "
                    "silently masks each sequence with another one's padding) and that True means attend.", S_PROBES)
    passed(title, "the past ignores the future, and padding changes no real token")


seal(__name__)
