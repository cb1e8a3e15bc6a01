"""Checks for chapter 3, masks (book/ch03_masks).

Convention the exercise uses, as the package does: a bool keep-mask, True = may attend,
broadcastable to the scores' [B, H, Sq, Sk].
"""
from __future__ import annotations

import functools
import math

import torch

from tformer_ref.attention import scaled_dot_product_attention
from tformer_ref.device import get_device
from tformer_ref.masks import causal_mask, padding_mask
from ..guard.integrity import seal
from .cases import randn
from .ch02 import S_SATURATION, part_of_pair
from .delegation import check_not_delegated
from .diagnosis import (Case, Diagnosis, Pitfall, Raised, Section, compare_to_reference,
                        fail, passed, run, run_or_fail)

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


def _causal_reference(size):
    return causal_mask(size, device=get_device())


CAUSAL_PITFALLS = (
    Pitfall("triu instead of tril",
            "Your mask is upper triangular: query i may attend to keys i..S-1, i.e. to "
            "itself and the *future*. With True = attend, the causal mask is "
            "torch.tril (keys 0..i).",
            S_CAUSAL, lambda s: _ones(s).triu().bool()[None, None]),
    Pitfall("mask inverted",
            "Your mask is True where the query must *not* attend (triu(1)): that is "
            "nn.MultiheadAttention's convention (True = ignore). This exercise, like "
            "F.scaled_dot_product_attention, uses True = attend.",
            S_CONVENTIONS, lambda s: _ones(s).triu(1).bool()[None, None]),
    Pitfall("diagonal excluded",
            "Your mask forbids a query to attend to itself (tril(-1)): query 0 then "
            "has nothing to attend to. Query i may attend to keys 0..i, the diagonal "
            "included.",
            S_CAUSAL, lambda s: _ones(s).tril(-1).bool()[None, None]),
    Pitfall("float mask instead of bool",
            "Your mask holds 1.0/0.0 floats. PyTorch *adds* a float mask to the "
            "scores, so a 1/0 mask masks nothing. Return a bool tensor (.bool()).",
            S_CONVENTIONS, lambda s: _ones(s).tril()[None, None]),
)


def check_causal_mask(causal_mask_fn) -> None:
    """``causal_mask_fn(size) -> bool [1, 1, S, S]`` (or [S, S]), True = may attend."""
    __tracebackhide__ = True
    cases = [Case(f"size={s}", lambda s=s: (s,)) for s in (1, 4, 7)]
    compare_to_reference("causal_mask", cases, _as_4d(causal_mask_fn),
                         _causal_reference, CAUSAL_PITFALLS, atol=0, rtol=0)


# --------------------------------------------------------------------------- padding mask

PADDING_PITFALLS = (
    Pitfall("mask broadcast over the wrong axis",
            "Your mask has shape [B, 1, S]. Against the scores [B, H, Sq, Sk] "
            "broadcasting aligns from the right, so it is read as [1, B, 1, S]: its "
            "batch axis lands on the *heads* axis. When B ≠ H it crashes; when B == H "
            "it runs and head h silently uses sequence h's padding. "
            "Return [B, 1, 1, S] (e.g. (tokens != pad_id)[:, None, None, :]).",
            S_PADDING, lambda t, p: (t != p)[:, None, :]),
    Pitfall("mask broadcast over the wrong axis ([B, S])",
            "Your mask has shape [B, S]. Against the scores [B, H, Sq, Sk] it is read "
            "as [1, 1, B, S]: the batch axis lands on the *query* axis. "
            "Return [B, 1, 1, S].",
            S_PADDING, lambda t, p: t != p),
    Pitfall("mask on the query axis",
            "Your mask has shape [B, 1, S, 1]: it removes padded *queries* instead of "
            "padded *keys*. Return [B, 1, 1, S], so that no query attends to a padded "
            "key.",
            S_PADDING, lambda t, p: (t != p)[:, None, :, None]),
    Pitfall("mask inverted",
            "Your mask is True on the padding: that is nn.MultiheadAttention's "
            "key_padding_mask convention (True = ignore). Here, as in "
            "F.scaled_dot_product_attention, True = attend: tokens != pad_id.",
            S_CONVENTIONS, lambda t, p: (t == p)[:, None, None, :]),
    Pitfall("pad id hard-coded",
            "Your mask treats token 0 as padding whatever pad_id is "
            "(the seed's `x != 0`). Compare with pad_id.",
            S_PADDING, lambda t, p: (t != 0)[:, None, None, :]),
    Pitfall("float mask instead of bool",
            "Your mask holds 1.0/0.0 floats. PyTorch *adds* a float mask to the "
            "scores, so a 1/0 mask masks nothing. Return a bool tensor.",
            S_CONVENTIONS, lambda t, p: (t != p)[:, None, None, :].float()),
)


def _padding_cases():
    dev = get_device()
    return [
        Case("tokens [2, 5], pad_id=0",
             lambda: (torch.tensor([[5, 6, 7, 0, 0], [1, 2, 3, 4, 9]], device=dev), 0)),
        Case("tokens [3, 4], pad_id=1 (and 0 is a real token)",
             lambda: (torch.tensor([[0, 3, 1, 1], [2, 0, 5, 1], [4, 4, 4, 4]],
                                   device=dev), 1)),
        Case("tokens [4, 6], pad_id=0 (B == 4 == H in the lesson's model)",
             lambda: (torch.tensor([[1, 2, 0, 0, 0, 0], [3, 3, 3, 3, 3, 0],
                                    [7, 0, 0, 0, 0, 0], [1, 2, 3, 4, 5, 6]],
                                   device=dev), 0)),
    ]


def check_padding_mask(padding_mask_fn) -> None:
    """``padding_mask_fn(tokens [B, S] int, pad_id) -> bool [B, 1, 1, S]``, True on real
    tokens."""
    __tracebackhide__ = True
    compare_to_reference("padding_mask", _padding_cases(), padding_mask_fn,
                         padding_mask, PADDING_PITFALLS, atol=0, rtol=0)


# --------------------------------------------------------------------------- masked attention
# The reference is the package's scaled_dot_product_attention (zeros for a query that
# may attend to no key); each variant below changes one step of it.

def _scaled_scores(q, k):
    return q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))


def _masked_after_softmax(q, k, v, mask):
    weights = _scaled_scores(q, k).softmax(-1).masked_fill(~mask, 0.0)
    return weights @ v, weights


def _masked_where_true(q, k, v, mask):
    scores = _scaled_scores(q, k)
    weights = scores.masked_fill(mask, torch.finfo(scores.dtype).min).softmax(-1)
    return weights @ v, weights


def _masked_with_minus_inf(q, k, v, mask):
    weights = _scaled_scores(q, k).masked_fill(~mask, float("-inf")).softmax(-1)
    return weights @ v, weights


def _masked_with_zero(q, k, v, mask):
    weights = _scaled_scores(q, k).masked_fill(~mask, 0.0).softmax(-1)
    return weights @ v, weights


def _mask_ignored(q, k, v, mask):
    weights = _scaled_scores(q, k).softmax(-1)
    return weights @ v, weights


def _masked_unscaled(q, k, v, mask):
    scores = q @ k.transpose(-2, -1)
    weights = scores.masked_fill(~mask, torch.finfo(scores.dtype).min).softmax(-1)
    return weights @ v, weights


def _masked_with_minus_1e9(q, k, v, mask):
    weights = _scaled_scores(q, k).masked_fill(~mask, -1e9).softmax(-1)
    return weights @ v, weights


NAN_ON_FULLY_MASKED_ROWS = Pitfall(
    "NaN on fully masked rows",
    "Filling with -inf turns a query whose keys are all masked into "
    "softmax(-inf, ..., -inf) = 0/0 = NaN, and the NaN spreads to everything "
    "downstream. Fill with a finite value such as torch.finfo(scores.dtype).min (then "
    "zero such rows, or leave them uniform).",
    S_FILL, _masked_with_minus_inf)

MASKED_PITFALLS = (
    Pitfall("mask applied after softmax",
            "You zeroed the masked weights *after* the softmax, so each row no longer "
            "sums to 1 (the masked keys took their share of the probability and it was "
            "thrown away). Fill the *scores* before softmax.",
            S_FILL, _masked_after_softmax),
    Pitfall("mask inverted",
            "You masked where the mask is True. Here True means *attend* "
            "(F.scaled_dot_product_attention's convention); nn.MultiheadAttention's is "
            "the opposite. Fill where the mask is False: masked_fill(~mask, ...).",
            S_CONVENTIONS, _masked_where_true),
    NAN_ON_FULLY_MASKED_ROWS,
    Pitfall("masked with 0 instead of a large negative number",
            "You set the masked scores to 0. exp(0) = 1, so masked keys still get "
            "weight. The fill must be very negative so that exp() of it is 0.",
            S_FILL, _masked_with_zero),
    Pitfall("mask ignored",
            "Your output is what attention gives without any mask: the mask argument "
            "is not used.",
            S_PADDING, _mask_ignored),
    Pitfall("no scaling",
            "Your scores are not divided by √d_k (chapter 2).",
            S_SATURATION, _masked_unscaled),
)

HALF_PITFALL = Pitfall(
    "fill value that overflows in half precision",
    "Your fill value does not fit in float16, whose range ends at ±65504: -1e9 or "
    "-1e20 becomes -inf (masked_fill refuses it with 'value cannot be converted to "
    "type Half without overflow'), and -inf makes fully masked rows NaN. Use the "
    "dtype's own limit, torch.finfo(scores.dtype).min.",
    S_FILL, _masked_with_minus_1e9)


def _fully_masked(mask, weights_shape):
    """[B, H, Sq, 1] bool: the queries that may attend to no key."""
    return ~mask.expand(weights_shape).any(dim=-1, keepdim=True)


def _zero_finite_empty_rows(part, q, k, mask):
    """``part`` (out or weights) with the *finite* fully masked rows set to zero; NaN
    and inf are left in place so that they are diagnosed."""
    if not isinstance(part, torch.Tensor) or part.dim() != 4:
        return part
    try:
        rows = _fully_masked(mask, (q.size(0), q.size(1), q.size(2), k.size(2)))
        finite = torch.isfinite(part).all(dim=-1, keepdim=True)
        return part.masked_fill(rows & finite, 0.0)
    except RuntimeError:  # the wrong shape: leave it for the comparison to report
        return part


def _lenient(fn, index):
    """``fn``'s output (index 0) or weights (index 1), with a query that may attend to
    no key set to zeros: the exercise accepts zeros or a uniform row there. The
    reference gives zeros there already, so it comes through unchanged."""
    pick = part_of_pair(fn, index)

    def call(q, k, v, mask):
        return _zero_finite_empty_rows(pick(q, k, v, mask), q, k, mask)
    return call


def _pad(tokens):
    return (torch.tensor(tokens, device=get_device()) != 0)[:, None, None, :]


_PER_HEAD_MASK = ((((1, 1, 0, 0), (0, 0, 0, 0), (1, 0, 1, 1)),
                   ((1, 1, 1, 1), (0, 1, 0, 0), (1, 1, 1, 0))),
                  (((0, 0, 0, 1), (1, 1, 1, 1), (1, 1, 0, 0)),
                   ((1, 0, 0, 0), (0, 1, 0, 1), (0, 0, 1, 1))))

# (label, B, H, Sq, Sk, Dh, mask)
_MASKED_SPECS = (
    ("padding mask [2, 1, 1, 6], cross-attention Sq=4", 2, 4, 4, 6, 8,
     lambda: _pad([[3, 4, 5, 0, 0, 0], [1, 2, 3, 4, 5, 6]])),
    ("causal mask [1, 1, 5, 5]", 2, 2, 5, 5, 8, lambda: _causal_reference(5)),
    ("padding & causal [3, 1, 5, 5], B == H == 3, a fully padded sequence "
     "(fully masked rows)", 3, 3, 5, 5, 4,
     lambda: _pad([[1, 2, 3, 0, 0], [0, 0, 0, 0, 0], [4, 5, 6, 7, 8]])
     & _causal_reference(5)),
    ("per-head mask [2, 2, 3, 4] with one fully masked query", 2, 2, 3, 4, 16,
     lambda: torch.tensor(_PER_HEAD_MASK, dtype=torch.bool, device=get_device())),
)
_FULL_DTYPES = (torch.float32, torch.float32, torch.float64, torch.float32)
_HALF_DTYPES = (torch.float16, torch.bfloat16, torch.float16, torch.float16)


def _masked_case(i, spec, dtype):
    label, b, h, sq, sk, dh, mask_fn = spec

    def make():
        return (randn(b, h, sq, dh, seed=100 + 10 * i, dtype=dtype),
                randn(b, h, sk, dh, seed=101 + 10 * i, dtype=dtype),
                randn(b, h, sk, dh, seed=102 + 10 * i, dtype=dtype), mask_fn())
    return Case(f"{label}, {dtype}", make)


def _masked_cases(dtypes=_FULL_DTYPES):
    return [_masked_case(i, spec, dtype)
            for i, (spec, dtype) in enumerate(zip(_MASKED_SPECS, dtypes))]


def _compare_masked(title, cases, fn, pitfalls, atol, rtol):
    __tracebackhide__ = True
    for index, part in ((1, "weights"), (0, "output")):
        compare_to_reference(f"{title} ({part})", cases, fn,
                             scaled_dot_product_attention, pitfalls, atol, rtol,
                             adapt=functools.partial(_lenient, index=index))


def check_masked_attention(masked_attention_fn) -> None:
    """``masked_attention_fn(q [B, H, Sq, Dh], k, v [B, H, Sk, Dh], mask bool
    broadcastable to [B, H, Sq, Sk]) -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])``,
    True = may attend. A query with no key to attend to must give finite values: zeros
    (as the reference) or a uniform row are both accepted."""
    __tracebackhide__ = True
    _compare_masked("masked_attention", _masked_cases(), masked_attention_fn,
                    MASKED_PITFALLS, 1e-5, 1e-4)


def _is_pair(result) -> bool:
    return isinstance(result, (tuple, list)) and len(result) == 2


def _pair_of_tensors(result) -> bool:
    return _is_pair(result) and all(isinstance(t, torch.Tensor) for t in result)


def _all_finite(result) -> bool:
    return isinstance(result, (tuple, list)) and all(
        isinstance(t, torch.Tensor) and torch.isfinite(t).all() for t in result)


def _half_precision_problem(fn, case):
    """(diagnosis, what was seen) when ``fn`` overflows or goes non-finite on a
    half-precision case, else None."""
    got = run(fn, case.make())
    if isinstance(got, Raised):
        if "overflow" in str(got.exc).lower():
            return HALF_PITFALL, f"On case {case.label} your code raised {got!r}."
        return None
    if not _pair_of_tensors(got) or _all_finite(got):
        return None
    q, k, v, mask = case.make()
    if _all_finite(run(fn, (q.float(), k.float(), v.float(), mask))):
        return HALF_PITFALL, (f"On case {case.label} your output has inf or NaN in "
                              f"{q.dtype} but not in float32.")
    return NAN_ON_FULLY_MASKED_ROWS, ""


def check_masked_attention_half_precision(masked_attention_fn) -> None:
    """The same function in float16 and bfloat16: the fill value must not overflow,
    fully masked rows stay finite."""
    __tracebackhide__ = True
    title = "masked_attention in half precision"
    cases = _masked_cases(_HALF_DTYPES)
    for case in cases:
        problem = _half_precision_problem(masked_attention_fn, case)
        if problem is not None:
            diagnosis, seen = problem
            diagnosis.fail(title, seen)
    _compare_masked(title, cases, masked_attention_fn, (HALF_PITFALL, *MASKED_PITFALLS),
                    2e-2, 2e-2)


def check_masked_attention_by_hand(masked_attention_fn) -> None:
    """Hidden test: no call to PyTorch's or the reference's attention."""
    __tracebackhide__ = True
    q, k, v = (randn(2, 2, 3, 4, seed=s) for s in (1, 2, 3))
    mask = _causal_reference(3)
    check_not_delegated("masked_attention", lambda: masked_attention_fn(q, k, v, mask),
                        forbidden=["scaled_dot_product_attention",
                                   "multi_head_attention_forward", "tformer_ref"])


# --------------------------------------------------------------------------- probes
# Behaviour any right answer has, whatever its code, run with the learner's own three
# functions. Each probe returns what it saw go wrong, or None.

class _LearnerMasks:
    """The learner's masked_attention, causal_mask and padding_mask, called as the
    probes need them: a call that raises or returns no pair fails the check at once."""

    def __init__(self, title, attention_fn, causal_mask_fn, padding_mask_fn):
        self.title, self.attention_fn = title, attention_fn
        self.causal_mask_fn, self.padding_mask_fn = causal_mask_fn, padding_mask_fn

    def attend(self, q, k, v, mask):
        """The output (not the weights) of the learner's masked_attention."""
        __tracebackhide__ = True
        result = run(self.attention_fn, (q, k, v, mask))
        if not _is_pair(result):
            fail(self.title,
                 f"masked_attention must return (out, weights); it gave {result!r}")
        return result[0].detach()

    def causal_mask(self, size):
        __tracebackhide__ = True
        return run_or_fail(self.title, _as_4d(self.causal_mask_fn), (size,),
                           f"causal_mask({size})")

    def padding_masks(self, *token_batches):
        __tracebackhide__ = True
        return [run_or_fail(self.title, self.padding_mask_fn, (tokens, 0), "padding_mask")
                for tokens in token_batches]


def _future_changes_past(learner: _LearnerMasks):
    """Changing tokens t.. must leave the outputs of tokens 0..t-1 as they were."""
    b, h, s, dh, t = 2, 2, 6, 8, 3
    q, k, v = (randn(b, h, s, dh, seed=200 + i) for i in range(3))
    mask = learner.causal_mask(s)
    base = learner.attend(q, k, v, mask)
    future = [x.clone() for x in (q, k, v)]
    for x in future:
        x[:, :, t:] += 5.0
    moved = learner.attend(*future, mask)
    if not torch.allclose(base[:, :, :t], moved[:, :, :t], atol=1e-5):
        return f"Changing tokens {t}..{s - 1} changed the outputs of tokens 0..{t - 1}."
    return None


CAUSALITY_VIOLATED = Diagnosis(
    "causality violated",
    "The past must not see the future: check your causal mask (tril, True = attend) "
    "and that masked_attention fills where the mask is False, before the softmax.",
    S_PROBES)


def _padded_batch(learner: _LearnerMasks):
    """Two sequences (pad id 0, B == H == 2), the same with 3 pad tokens appended, their
    masks from the learner, and q, k, v [2, 2, 7, 8] for the longer ones."""
    tokens = torch.tensor([[4, 5, 6, 0], [7, 8, 9, 3]], device=get_device())
    longer = torch.cat([tokens, torch.zeros_like(tokens[:, :3])], dim=1)
    q, k, v = (randn(2, 2, 7, 8, seed=210 + i) for i in range(3))
    short_mask, long_mask = learner.padding_masks(tokens, longer)
    return tokens, longer, (q, k, v), short_mask, long_mask


def _padding_changes_real_tokens(learner: _LearnerMasks):
    """Appending pad tokens must leave the outputs of the real tokens as they were."""
    tokens, _, (q, k, v), short_mask, long_mask = _padded_batch(learner)
    short = learner.attend(q[:, :, :4], k[:, :, :4], v[:, :, :4], short_mask)
    long = learner.attend(q, k, v, long_mask)
    moved = (short - long[:, :, :4]).abs().amax(dim=(1, 3))  # [B, S]
    if not torch.all(moved[tokens != 0] < 1e-5):
        return "Appending padding tokens changed the outputs of real tokens."
    return None


PAD_INVARIANCE_VIOLATED = Diagnosis(
    "pad invariance violated",
    "Padded keys must get zero weight: check the padding mask's shape [B, 1, 1, S] and "
    "its polarity.",
    S_PROBES)


def _padded_values_read(learner: _LearnerMasks):
    """What sits at padded positions must not matter: with a mask on the wrong axis and
    B == H, a sequence is masked with another sequence's padding and reads it."""
    _, longer, (q, k, v), _, long_mask = _padded_batch(learner)
    base = learner.attend(q, k, v, long_mask)
    pads = (longer == 0)[:, None, :, None]  # [B, 1, S, 1]
    garbage = [x.masked_fill(pads, 7.0) for x in (k, v)]
    moved = (learner.attend(q, *garbage, long_mask) - base).abs().amax(dim=(1, 3))
    if not torch.all(moved[longer != 0] < 1e-5):
        return ("Changing the keys and values at padded positions changed the outputs "
                "of real tokens.")
    return None


ATTENDS_TO_PADDING = Diagnosis(
    "attends to padding",
    "Some query attends to padding: check that the padding mask has shape "
    "[B, 1, 1, S] (a [B, 1, S] mask puts the batch on the heads axis, and when B == H "
    "it silently masks each sequence with another one's padding) and that True means "
    "attend.",
    S_PROBES)


MASK_PROBES = (
    (_future_changes_past, CAUSALITY_VIOLATED),
    (_padding_changes_real_tokens, PAD_INVARIANCE_VIOLATED),
    (_padded_values_read, ATTENDS_TO_PADDING),
)


def check_mask_probes(masked_attention_fn, causal_mask_fn, padding_mask_fn) -> None:
    """Behaviour any right answer has, run with the learner's own three functions:
    changing future tokens leaves the past unchanged, and appending padding changes no
    real token's output."""
    __tracebackhide__ = True
    title = "mask probes"
    learner = _LearnerMasks(title, masked_attention_fn, causal_mask_fn, padding_mask_fn)
    for probe, diagnosis in MASK_PROBES:
        seen = probe(learner)
        if seen is not None:
            diagnosis.fail(title, seen)
    passed(title, "the past ignores the future, and padding changes no real token")


seal(__name__)
