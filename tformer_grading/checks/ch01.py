"""Checks for chapter 1, shapes and heads (book/ch01_shapes).

Each public ``check_*`` is what an exercise test cell calls. The private
functions below them are the known wrong variants a diagnosis can name.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from tformer_ref.device import get_device
from tformer_ref.heads import merge_heads, split_heads
from ..guard.integrity import seal
from .cases import build_module, randn
from .delegation import check_by_hand, check_not_delegated
from .diagnosis import (Case, Pitfall, Section, compare_to_reference, fail, passed,
                        probe_batch_independence, probe_eval_determinism, probe_token_mixing)

CHAPTER = "ch01_shapes"
S_SPLIT = Section(CHAPTER, "1.2", "Splitting into heads")
S_MERGE = Section(CHAPTER, "1.3", "Merging heads back")
S_EINSUM = Section(CHAPTER, "1.4", "einsum and matmul")
S_PROJ = Section(CHAPTER, "1.5", "Per-head projections")
S_SCALE = Section(CHAPTER, "1.6", "Scaling by the head size")



# --------------------------------------------------------------------------- split_heads

def _split_no_transpose(x, h):
    b, s, d = x.shape
    return x.view(b, s, h, d // h)


def _split_view_straight(x, h):
    b, s, d = x.shape
    return x.reshape(b, h, s, d // h)


def _split_interleaved(x, h):
    b, s, d = x.shape
    return x.reshape(b, s, d // h, h).permute(0, 3, 1, 2)


SPLIT_PITFALLS = [
    Pitfall("view without transpose",
            "You reshaped [B, S, D] to [B, S, H, Dh] but did not move the head axis: "
            "the result must be [B, H, S, Dh], so add .transpose(1, 2).", S_SPLIT, _split_no_transpose),
    Pitfall("sequence and head axes confused",
            "You viewed [B, S, D] straight as [B, H, S, Dh]. The shape is right but the numbers are not: "
            "memory holds each token's D features together, so the view mixes tokens into heads. "
            "View as [B, S, H, Dh] first, then transpose(1, 2).", S_SPLIT, _split_view_straight),
    Pitfall("heads interleaved",
            "You cut D into Dh groups of H (view(B, S, Dh, H)) instead of H groups of Dh: head h must be "
            "the contiguous slice x[..., h*Dh:(h+1)*Dh].", S_SPLIT, _split_interleaved),
]


def _split_cases():
    shapes = [(2, 5, 12, 3), (1, 7, 8, 2), (3, 4, 16, 4), (4, 6, 24, 4)]
    cases = [Case(f"x [B={b}, S={s}, D={d}], n_heads={h}", lambda b=b, s=s, d=d, h=h, i=i: (randn(b, s, d, seed=i), h))
             for i, (b, s, d, h) in enumerate(shapes)]
    cases.append(Case("x [2, 3, 6] float64, n_heads=3", lambda: (randn(2, 3, 6, seed=9, dtype=torch.float64), 3)))
    return cases


def check_split_heads(split_heads_fn) -> None:
    """``split_heads_fn(x [B, S, D], n_heads) -> [B, H, S, Dh]``."""
    __tracebackhide__ = True
    compare_to_reference("split_heads", _split_cases(), split_heads_fn, split_heads, SPLIT_PITFALLS, atol=0, rtol=0)


# --------------------------------------------------------------------------- merge_heads

def _merge_no_transpose(x):
    b, h, s, dh = x.shape
    return x.reshape(b, s, h * dh)


def _merge_dh_major(x):
    b, h, s, dh = x.shape
    return x.permute(0, 2, 3, 1).reshape(b, s, h * dh)


def _merge_view_after_transpose(x):
    b, h, s, dh = x.shape
    return x.transpose(1, 2).view(b, s, h * dh)


MERGE_PITFALLS = [
    Pitfall("merged without transpose",
            "You reshaped [B, H, S, Dh] straight to [B, S, D]: that glues rows of *different tokens* together. "
            "Transpose back to [B, S, H, Dh] first.", S_MERGE, _merge_no_transpose),
    Pitfall("heads merged in the wrong order",
            "You put the Dh axis before the head axis (e.g. permute(0, 2, 3, 1)), so the features of the heads "
            "are interleaved. merge_heads must undo split_heads exactly: head h back at x[..., h*Dh:(h+1)*Dh].",
            S_MERGE, _merge_dh_major),
    Pitfall("view on a non-contiguous tensor",
            "After transpose the tensor is no longer contiguous in memory and .view() refuses it. "
            "Use .contiguous().view(...) or .reshape(...).", S_MERGE, _merge_view_after_transpose),
]


def _merge_cases():
    shapes = [(2, 3, 5, 4), (1, 2, 7, 4), (3, 4, 4, 4), (4, 4, 6, 2)]
    cases = [Case(f"x [B={b}, H={h}, S={s}, Dh={dh}]", lambda b=b, h=h, s=s, dh=dh, i=i: (randn(b, h, s, dh, seed=10 + i),))
             for i, (b, h, s, dh) in enumerate(shapes)]
    # What split_heads really hands over: a transposed, non-contiguous view.
    cases.append(Case("a non-contiguous x, as split_heads returns it",
                      lambda: (split_heads(randn(2, 5, 12, seed=20), 3),)))
    return cases


def check_merge_heads(merge_heads_fn) -> None:
    """``merge_heads_fn(x [B, H, S, Dh]) -> [B, S, D]``, the inverse of split_heads."""
    __tracebackhide__ = True
    compare_to_reference("merge_heads", _merge_cases(), merge_heads_fn, merge_heads, MERGE_PITFALLS, atol=0, rtol=0)


# --------------------------------------------------------------------------- multi-head attention

def _mha(w, h, xq, xkv, *, split=split_heads, merge=merge_heads, scale=None, softmax_dim=-1):
    """Functional multi-head attention from explicit weights; the wrong variants swap one step."""
    q, k, v = (split(F.linear(x, *w[name]), h) for name, x in (("q", xq), ("k", xkv), ("v", xkv)))
    d_head = q.size(-1)
    scores = q @ k.transpose(-2, -1) / (math.sqrt(d_head) if scale is None else scale(xq.size(-1), d_head))
    out = scores.softmax(dim=softmax_dim) @ v
    return F.linear(merge(out), *w["o"])


def _mha_reference(w, h, xq, xkv):
    return _mha(w, h, xq, xkv)


def _mha_seed_einsum(w, h, xq, xkv, scale_by_d_model=False):
    """The seed's SelfAttention: einsum('bhqd,bhkd->bhqk') applied to [B, S, H, Dh] tensors."""
    b, sq, d = xq.shape
    q, k, v = (F.linear(x, *w[name]).reshape(b, x.size(1), h, d // h) for name, x in (("q", xq), ("k", xkv), ("v", xkv)))
    energy = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(d if scale_by_d_model else d // h)
    out = torch.einsum("bhql,bhlv->bhqv", energy.softmax(dim=3), v)
    return F.linear(out.reshape(b, sq, d), *w["o"])


MHA_PITFALLS = [
    Pitfall("scaled by sqrt(d_model)",
            "Your scores are divided by √d_model, not √d_head. The variance of q·k grows with the length of the "
            "vectors being dotted, which is Dh per head; dividing by √D makes the logits √H times too small.",
            S_SCALE, lambda w, h, xq, xkv: _mha(w, h, xq, xkv, scale=lambda d, dh: math.sqrt(d))),
    Pitfall("no scaling",
            "Your scores are not divided by √d_head at all. Unscaled logits grow like √Dh and push softmax "
            "into saturation, where its gradients vanish.",
            S_SCALE, lambda w, h, xq, xkv: _mha(w, h, xq, xkv, scale=lambda d, dh: 1.0)),
    Pitfall("softmax over the query axis",
            "Your softmax normalises over the queries (dim=-2). Each query's weights over the keys must sum to "
            "1, so softmax over the last axis (dim=-1).",
            S_EINSUM, lambda w, h, xq, xkv: _mha(w, h, xq, xkv, softmax_dim=-2)),
    Pitfall("einsum over the wrong axes (the seed's bug)",
            "Your einsum treats the sequence axis as heads: on [B, S, H, Dh] tensors 'bhqd,bhkd->bhqk' attends "
            "across the heads of one token, so tokens never mix (and cross-attention with Sq != Sk fails). "
            "Transpose to [B, H, S, Dh] first, or label the axes 'bqhd,bkhd->bhqk'.",
            S_EINSUM, _mha_seed_einsum),
    Pitfall("einsum over the wrong axes and scaled by sqrt(d_model) (the seed's code)",
            "This is the seed's SelfAttention: its einsum attends across the heads of one token instead of across "
            "tokens, and it divides by √embed_size instead of √head_dim.",
            S_EINSUM, lambda w, h, xq, xkv: _mha_seed_einsum(w, h, xq, xkv, scale_by_d_model=True)),
    Pitfall("sequence and head axes confused",
            "Your heads are split by viewing [B, S, D] straight as [B, H, S, Dh], which mixes tokens into heads.",
            S_SPLIT, lambda w, h, xq, xkv: _mha(w, h, xq, xkv, split=_split_view_straight)),
    Pitfall("merged without transpose",
            "Your heads are merged by reshaping [B, H, S, Dh] straight to [B, S, D], which glues different tokens.",
            S_MERGE, lambda w, h, xq, xkv: _mha(w, h, xq, xkv, merge=_merge_no_transpose)),
    Pitfall("heads merged in the wrong order",
            "Your merge interleaves the heads' features (Dh axis before the head axis).",
            S_MERGE, lambda w, h, xq, xkv: _mha(w, h, xq, xkv, merge=_merge_dh_major)),
]


def _find_projections(module, d_model: int, n_heads: int):
    """The learner's (weight, bias) pairs in the order q, k, v, o, from the layouts the exercise allows:
    four Linear(D, D), or one Linear(D, 3D) for q, k, v followed by one Linear(D, D).
    Parameters are taken in the order the module registers them."""
    d_head = d_model // n_heads
    named = list(module.named_parameters())
    matrices = [(n, p) for n, p in named if p.dim() == 2]
    vectors = [(n, p) for n, p in named if p.dim() == 1]
    listing = ", ".join(f"{n} {list(p.shape)}" for n, p in named) or "none"
    if any(p.shape == (d_head, d_head) for _, p in matrices) and d_head != d_model:
        total = sum(p.numel() for _, p in named)
        per_head = 4 * (d_model * d_model + d_model)
        fail("MultiHeadAttention",
             f"this looks like the pitfall 'one Linear shared by all heads' (the seed's bug). Your module has "
             f"a [{d_head}, {d_head}] weight, i.e. a Linear(d_head, d_head) applied to every head's slice, and "
             f"{total:,} parameters; per-head projections from d_model need 4·(D²+D) = {per_head:,}. Each head must "
             "have its own projection of the whole D-dimensional input: use Linear(d_model, d_model), which is H "
             "separate D→Dh projections side by side.", S_PROJ)
    shapes = [tuple(p.shape) for _, p in matrices]
    if shapes == [(d_model, d_model)] * 4:
        weights = [p for _, p in matrices]
    elif shapes == [(3 * d_model, d_model), (d_model, d_model)]:
        weights = [*matrices[0][1].chunk(3, dim=0), matrices[1][1]]
    else:
        fail("MultiHeadAttention",
             f"cannot find the projections. Expected four nn.Linear(d_model, d_model) registered in the order "
             f"query, key, value, output (or one nn.Linear(d_model, 3*d_model) for q, k, v, then the output one). "
             f"Found parameters: {listing}.", S_PROJ)
    if not vectors:
        return [(w, None) for w in weights]
    sizes = [p.numel() for _, p in vectors]
    if sizes == [d_model] * 4:
        biases = [p for _, p in vectors]
    elif sizes == [3 * d_model, d_model]:
        biases = [*vectors[0][1].chunk(3), vectors[1][1]]
    else:
        fail("MultiHeadAttention", f"cannot match the biases to the projections. Found parameters: {listing}.", S_PROJ)
    return list(zip(weights, biases))


def _load_weights(module, weights: dict, d_model: int, n_heads: int) -> dict:
    """Copy ``weights`` into the learner's module; return the weights it really uses (zero biases when it has none)."""
    slots = _find_projections(module, d_model, n_heads)
    used = {}
    with torch.no_grad():
        for name, (w_slot, b_slot) in zip("qkvo", slots):
            w, b = weights[name]
            w_slot.copy_(w)
            if b_slot is None:
                b = torch.zeros_like(b)
            else:
                b_slot.copy_(b)
            used[name] = (w, b)
    return used


def _mha_cases():
    # (D, H, B, Sq, Sk, dtype); Sq != Sk is cross-attention; B == H catches batch/head mix-ups.
    configs = [(16, 4, 2, 5, 5, torch.float32), (24, 3, 3, 4, 7, torch.float32),
               (12, 2, 2, 6, 6, torch.float64), (32, 4, 4, 5, 3, torch.float32)]
    cases = []
    for i, (d, h, b, sq, sk, dtype) in enumerate(configs):
        def make(d=d, h=h, b=b, sq=sq, sk=sk, dtype=dtype, i=i):
            w = {n: (randn(d, d, seed=100 * i + j, dtype=dtype) / math.sqrt(d), randn(d, seed=100 * i + j + 50, dtype=dtype) * 0.1)
                 for j, n in enumerate("qkvo")}
            xq = randn(b, sq, d, seed=1000 + i, dtype=dtype)
            xkv = xq if sq == sk else randn(b, sk, d, seed=2000 + i, dtype=dtype)
            return w, h, xq, xkv
        kind = "self-attention" if sq == sk else "cross-attention"
        cases.append(Case(f"{kind} D={d}, H={h}, B={b}, Sq={sq}, Sk={sk}, {dtype}", make))
    return cases


def _build(cls, d_model, n_heads, dtype):
    __tracebackhide__ = True
    return build_module("MultiHeadAttention", cls, (d_model, n_heads), dtype, seed=0).eval()


def check_multi_head_attention(cls) -> None:
    """``cls(d_model, n_heads)`` is an nn.Module whose ``forward(query, key, value, mask=None)``
    maps query [B, Sq, D], key and value [B, Sk, D] to [B, Sq, D]."""
    __tracebackhide__ = True
    state = {}

    def learner(w, h, xq, xkv):
        d = xq.size(-1)
        module = _build(cls, d, h, xq.dtype)
        state["used"] = used = _load_weights(module, w, d, h)
        w.update(used)  # a module without biases is compared with a reference without biases
        with torch.no_grad():
            return module(xq, xkv, xkv)

    cases = _mha_cases()
    # The learner decides whether biases exist; the reference follows what the learner's module has.
    probe = _build(cls, 16, 4, torch.float32)
    has_bias = any(p.dim() == 1 for p in probe.parameters())

    def reference(w, h, xq, xkv):
        if not has_bias:
            w = {n: (wb[0], torch.zeros_like(wb[1])) for n, wb in w.items()}
        return _mha_reference(w, h, xq, xkv)

    def unbiased(fn):
        return lambda w, h, xq, xkv: fn(w if has_bias else {n: (wb[0], torch.zeros_like(wb[1])) for n, wb in w.items()}, h, xq, xkv)

    pitfalls = [Pitfall(p.name, p.explanation, p.section, unbiased(p.impl)) for p in MHA_PITFALLS]
    compare_to_reference("MultiHeadAttention", cases, learner, reference, pitfalls, atol=1e-5, rtol=1e-4)


def check_multi_head_attention_behaviour(cls) -> None:
    """Probes any correct attention passes: tokens mix, batch entries stay apart, eval mode is deterministic."""
    __tracebackhide__ = True
    module = _build(cls, 16, 4, torch.float32)
    x = randn(4, 6, 16, seed=7)

    def self_attend(t):
        with torch.no_grad():
            return module(t, t, t)

    # Determinism first: the other probes compare two calls.
    probe_eval_determinism("MultiHeadAttention", module, (x, x, x), S_PROJ)
    probe_token_mixing("MultiHeadAttention", self_attend, x, S_EINSUM)
    probe_batch_independence("MultiHeadAttention", self_attend, x, S_SPLIT)
    passed("MultiHeadAttention", "mixes tokens, keeps batch entries apart, deterministic in eval mode")


def check_multi_head_attention_by_hand(cls) -> None:
    """Hidden test: the forward pass is the learner's own, not PyTorch's or the reference's attention."""
    __tracebackhide__ = True
    module = _build(cls, 16, 4, torch.float32)
    x = randn(2, 5, 16, seed=8)
    check_not_delegated(
        "MultiHeadAttention", lambda: module(x, x, x),
        forbidden=["scaled_dot_product_attention", "multi_head_attention_forward", "tformer_ref"], module=module,
    )



seal(__name__)
