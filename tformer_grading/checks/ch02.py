"""Checks for chapter 2, scaled dot-product attention (book/ch02_attention).

Each public ``check_*`` is what an exercise test cell calls. The private functions
next to each ``Pitfall`` are the known wrong variants a diagnosis can name.
"""
from __future__ import annotations

import functools
import math

import torch

from tformer_ref.attention import scaled_dot_product_attention
from tformer_ref.device import get_device
from ..guard.integrity import seal
from .cases import randn
from .delegation import check_not_delegated
from .diagnosis import Case, Pitfall, Section, compare_to_reference

CHAPTER = "ch02_attention"
S_STEPS = Section(CHAPTER, "2.1", "Attention step by step")
S_VARIANCE = Section(CHAPTER, "2.2", "Why the scores grow with d_k")
S_SATURATION = Section(CHAPTER, "2.3", "Saturation and vanishing gradients")
S_ENTROPY = Section(CHAPTER, "2.4", "Entropy: how peaked is attention")
S_DMODEL = Section(CHAPTER, "2.5", "Scaling by √d_model is a bug")
S_GRADCHECK = Section(CHAPTER, "2.6", "Gradcheck done right")


def part_of_pair(fn, index: int):
    """``fn`` returns the pair (out, weights); keep only ``result[index]``, so that the
    weights (index 1) and the outputs (index 0) are compared in turn. Chapter 3 uses it
    too."""
    def pick(*args):
        result = fn(*args)
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            kind = type(result).__name__
            raise TypeError(f"must return a pair (out, weights), got {kind}")
        return result[index]
    return pick


# --------------------------------------------------------------------------- attention
# The reference is the package's scaled_dot_product_attention; each variant below
# changes one step of it.

def _attention_unscaled(q, k, v):
    weights = (q @ k.transpose(-2, -1)).softmax(dim=-1)
    return weights @ v, weights


def _attention_over_sqrt_d_model(q, k, v):
    d_model = q.size(1) * q.size(-1)
    weights = (q @ k.transpose(-2, -1) / math.sqrt(d_model)).softmax(dim=-1)
    return weights @ v, weights


def _attention_over_d_k(q, k, v):
    weights = (q @ k.transpose(-2, -1) / q.size(-1)).softmax(dim=-1)
    return weights @ v, weights


def _attention_softmax_over_queries(q, k, v):
    weights = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(dim=-2)
    return weights @ v, weights


def _attention_softmax_over_heads(q, k, v):
    weights = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(dim=1)
    return weights @ v, weights


ATTENTION_PITFALLS = (
    Pitfall("no scaling",
            "Your scores are not divided by √d_k. With unit-variance entries var(q·k) "
            "= d_k, so the logits grow like √d_k, softmax saturates to nearly one-hot "
            "rows and its gradients vanish.",
            S_SATURATION, _attention_unscaled),
    Pitfall("scaled by sqrt(d_model)",
            "Your scores are divided by √(H·Dh) = √d_model, not by √d_k = √Dh, the "
            "length of the vectors being dotted. The logits come out √H times too "
            "small and attention is too flat.",
            S_DMODEL, _attention_over_sqrt_d_model),
    Pitfall("scaled by d_k instead of sqrt(d_k)",
            "Your scores are divided by d_k. The standard deviation of q·k is √d_k, so "
            "that is what brings it back to 1; dividing by d_k shrinks the logits √d_k "
            "times too much.",
            S_VARIANCE, _attention_over_d_k),
    Pitfall("softmax over the wrong axis (queries)",
            "Your softmax normalises over the queries (dim=-2). Each query's weights "
            "over the keys must sum to 1: softmax over the last axis, dim=-1.",
            S_STEPS, _attention_softmax_over_queries),
    Pitfall("softmax over the wrong axis (heads)",
            "Your softmax normalises over the heads (dim=1). Each query's weights over "
            "the keys must sum to 1: softmax over the last axis, dim=-1.",
            S_STEPS, _attention_softmax_over_heads),
)


def _attention_cases():
    # (B, H, Sq, Sk, Dh, dtype): Sq != Sk is cross-attention; B == H catches batch/head
    # mix-ups; H != Dh everywhere so that √d_model and d_k scaling cannot coincide.
    configs = [(2, 4, 5, 5, 8, torch.float32), (3, 3, 4, 6, 16, torch.float32),
               (1, 2, 3, 3, 4, torch.float64), (2, 2, 6, 6, 64, torch.float32)]
    cases = []
    for i, (b, h, sq, sk, dh, dtype) in enumerate(configs):
        def make(b=b, h=h, sq=sq, sk=sk, dh=dh, dtype=dtype, i=i):
            return (randn(b, h, sq, dh, seed=10 * i, dtype=dtype),
                    randn(b, h, sk, dh, seed=10 * i + 1, dtype=dtype),
                    randn(b, h, sk, dh, seed=10 * i + 2, dtype=dtype))
        cases.append(Case(f"q [B={b}, H={h}, Sq={sq}, Dh={dh}], "
                          f"k and v [.., Sk={sk}, ..], {dtype}", make))
    return cases


def check_attention(attention_fn) -> None:
    """``attention_fn(q [B, H, Sq, Dh], k [B, H, Sk, Dh], v [B, H, Sk, Dh])
    -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])``."""
    __tracebackhide__ = True
    cases = _attention_cases()
    for index, part in ((1, "weights"), (0, "output")):
        compare_to_reference(f"attention ({part})", cases, attention_fn,
                             scaled_dot_product_attention, ATTENTION_PITFALLS,
                             atol=1e-5, rtol=1e-4,
                             adapt=functools.partial(part_of_pair, index=index))


def check_attention_by_hand(attention_fn) -> None:
    """Hidden test: the learner wrote the computation, not a call to PyTorch's or the
    reference's attention."""
    __tracebackhide__ = True
    q, k, v = (randn(2, 2, 3, 4, seed=s) for s in (1, 2, 3))
    check_not_delegated("attention", lambda: attention_fn(q, k, v),
                        forbidden=["scaled_dot_product_attention",
                                   "multi_head_attention_forward", "tformer_ref"])


# --------------------------------------------------------------------------- entropy

def _entropy(weights):
    return torch.special.entr(weights).sum(dim=-1)


ENTROPY_PITFALLS = (
    Pitfall("0·log 0 gives NaN",
            "Where a weight is exactly 0, w·log(w) is 0·(−inf) = NaN in floating "
            "point, but its limit is 0. Use torch.xlogy(w, w), torch.special.entr(w), "
            "or mask the zeros out before summing.",
            S_ENTROPY, lambda w: -(w * w.log()).sum(dim=-1)),
    Pitfall("log base 2",
            "Your entropy is in bits (log2); the exercise asks for nats (natural log), "
            "like the lesson.",
            S_ENTROPY, lambda w: torch.special.entr(w).sum(dim=-1) / math.log(2)),
    Pitfall("missing minus sign",
            "Entropy is −Σ w·log w, which is ≥ 0: log w ≤ 0 for weights in [0, 1].",
            S_ENTROPY, lambda w: -torch.special.entr(w).sum(dim=-1)),
    Pitfall("sum over the wrong axis",
            "You summed over the queries (dim=-2). The distribution of one query is "
            "its row: sum over the keys, the last axis.",
            S_ENTROPY, lambda w: torch.special.entr(w).sum(dim=-2)),
    Pitfall("mean instead of sum",
            "You averaged w·log w over the keys; entropy is their sum.",
            S_ENTROPY, lambda w: torch.special.entr(w).mean(dim=-1)),
)


def _softmax_weights(shape, seed, dtype=torch.float32, temperature=1.0):
    return lambda: ((randn(*shape, seed=seed, dtype=dtype) * temperature).softmax(-1),)


def _causal_weights():
    scores = randn(2, 3, 5, 5, seed=41)
    keep = torch.ones(5, 5, dtype=torch.bool, device=scores.device).tril()
    # exact zeros above the diagonal
    return (scores.masked_fill(~keep, float("-inf")).softmax(-1),)


def _one_hot_weights():
    return (torch.eye(4, device=get_device())[None, None].repeat(2, 1, 1, 1),)


def _entropy_cases():
    return [
        Case("weights [2, 4, 5, 7] from softmax", _softmax_weights((2, 4, 5, 7), 40)),
        Case("causal weights [2, 3, 5, 5] (exact zeros above the diagonal)",
             _causal_weights),
        Case("one-hot weights [2, 1, 4, 4] (entropy 0)", _one_hot_weights),
        Case("weights [1, 2, 3, 6] float64",
             _softmax_weights((1, 2, 3, 6), 42, torch.float64, 3.0)),
    ]


def check_attention_entropy(entropy_fn) -> None:
    """``entropy_fn(weights [..., Sq, Sk]) -> [..., Sq]``: −Σ w·ln w over the keys, in
    nats, 0·ln 0 = 0."""
    __tracebackhide__ = True
    compare_to_reference("attention_entropy", _entropy_cases(), entropy_fn, _entropy,
                         ENTROPY_PITFALLS, atol=1e-5, rtol=1e-4)


seal(__name__)
