"""Checks for chapter 1, shapes and heads (book/ch01_shapes).

Each public ``check_*`` is what an exercise test cell calls. The private functions
next to each ``Pitfall`` are the known wrong variants a diagnosis can name.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from tformer_ref.heads import merge_heads, split_heads
from ..guard.integrity import seal
from .cases import build_module, randn
# Test cells call ch01.check_by_hand: it is re-exported here.
from .delegation import check_by_hand, check_not_delegated  # noqa: F401
from .diagnosis import (Case, Diagnosis, Pitfall, Section, compare_to_reference, fail,
                        passed, probe_batch_independence, probe_eval_determinism,
                        probe_token_mixing)

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


SPLIT_VIEW_STRAIGHT = Pitfall(
    "sequence and head axes confused",
    "You viewed [B, S, D] straight as [B, H, S, Dh]. The shape is right but the "
    "numbers are not: memory holds each token's D features together, so the view mixes "
    "tokens into heads. View as [B, S, H, Dh] first, then transpose(1, 2).",
    S_SPLIT, _split_view_straight)

SPLIT_PITFALLS = (
    Pitfall("view without transpose",
            "You reshaped [B, S, D] to [B, S, H, Dh] but did not move the head axis: "
            "the result must be [B, H, S, Dh], so add .transpose(1, 2).",
            S_SPLIT, _split_no_transpose),
    SPLIT_VIEW_STRAIGHT,
    Pitfall("heads interleaved",
            "You cut D into Dh groups of H (view(B, S, Dh, H)) instead of H groups of "
            "Dh: head h must be the contiguous slice x[..., h*Dh:(h+1)*Dh].",
            S_SPLIT, _split_interleaved),
)


def _split_cases():
    shapes = [(2, 5, 12, 3), (1, 7, 8, 2), (3, 4, 16, 4), (4, 6, 24, 4)]
    cases = [Case(f"x [B={b}, S={s}, D={d}], n_heads={h}",
                  lambda b=b, s=s, d=d, h=h, i=i: (randn(b, s, d, seed=i), h))
             for i, (b, s, d, h) in enumerate(shapes)]
    cases.append(Case("x [2, 3, 6] float64, n_heads=3",
                      lambda: (randn(2, 3, 6, seed=9, dtype=torch.float64), 3)))
    return cases


def check_split_heads(split_heads_fn) -> None:
    """``split_heads_fn(x [B, S, D], n_heads) -> [B, H, S, Dh]``."""
    __tracebackhide__ = True
    compare_to_reference("split_heads", _split_cases(), split_heads_fn, split_heads,
                         SPLIT_PITFALLS, atol=0, rtol=0)


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


MERGE_NO_TRANSPOSE = Pitfall(
    "merged without transpose",
    "You reshaped [B, H, S, Dh] straight to [B, S, D]: that glues rows of *different "
    "tokens* together. Transpose back to [B, S, H, Dh] first.",
    S_MERGE, _merge_no_transpose)

MERGE_DH_MAJOR = Pitfall(
    "heads merged in the wrong order",
    "You put the Dh axis before the head axis (e.g. permute(0, 2, 3, 1)), so the "
    "features of the heads are interleaved. merge_heads must undo split_heads exactly: "
    "head h back at x[..., h*Dh:(h+1)*Dh].",
    S_MERGE, _merge_dh_major)

MERGE_PITFALLS = (
    MERGE_NO_TRANSPOSE,
    MERGE_DH_MAJOR,
    Pitfall("view on a non-contiguous tensor",
            "After transpose the tensor is no longer contiguous in memory and .view() "
            "refuses it. Use .contiguous().view(...) or .reshape(...).",
            S_MERGE, _merge_view_after_transpose),
)


def _merge_cases():
    shapes = [(2, 3, 5, 4), (1, 2, 7, 4), (3, 4, 4, 4), (4, 4, 6, 2)]
    cases = [Case(f"x [B={b}, H={h}, S={s}, Dh={dh}]",
                  lambda b=b, h=h, s=s, dh=dh, i=i: (randn(b, h, s, dh, seed=10 + i),))
             for i, (b, h, s, dh) in enumerate(shapes)]
    # What split_heads really hands over: a transposed, non-contiguous view.
    cases.append(Case("a non-contiguous x, as split_heads returns it",
                      lambda: (split_heads(randn(2, 5, 12, seed=20), 3),)))
    return cases


def check_merge_heads(merge_heads_fn) -> None:
    """``merge_heads_fn(x [B, H, S, Dh]) -> [B, S, D]``, the inverse of split_heads."""
    __tracebackhide__ = True
    compare_to_reference("merge_heads", _merge_cases(), merge_heads_fn, merge_heads,
                         MERGE_PITFALLS, atol=0, rtol=0)


# --------------------------------------------------------------------------- multi-head attention
# Functional multi-head attention from the weights a case hands in,
# w = {"q": (weight, bias), "k": ..., "v": ..., "o": ...}: the same numbers are loaded
# into the learner's module.

def _project(w, xq, xkv):
    """The query, key and value projections [B, S, D], before the split into heads."""
    return F.linear(xq, *w["q"]), F.linear(xkv, *w["k"]), F.linear(xkv, *w["v"])


def _attend(q, k, v):
    """softmax(q kᵀ / √Dh) v on heads [B, H, S, Dh]."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    return scores.softmax(dim=-1) @ v


def _mha_reference(w, h, xq, xkv):
    q, k, v = (split_heads(t, h) for t in _project(w, xq, xkv))
    return F.linear(merge_heads(_attend(q, k, v)), *w["o"])


def _mha_scaled_by_sqrt_d_model(w, h, xq, xkv):
    q, k, v = (split_heads(t, h) for t in _project(w, xq, xkv))
    scores = q @ k.transpose(-2, -1) / math.sqrt(xq.size(-1))
    return F.linear(merge_heads(scores.softmax(dim=-1) @ v), *w["o"])


def _mha_unscaled(w, h, xq, xkv):
    q, k, v = (split_heads(t, h) for t in _project(w, xq, xkv))
    scores = q @ k.transpose(-2, -1)
    return F.linear(merge_heads(scores.softmax(dim=-1) @ v), *w["o"])


def _mha_softmax_over_queries(w, h, xq, xkv):
    q, k, v = (split_heads(t, h) for t in _project(w, xq, xkv))
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    return F.linear(merge_heads(scores.softmax(dim=-2) @ v), *w["o"])


def _seed_heads(t, h):
    """The seed's heads: [B, S, D] viewed as [B, S, H, Dh], the head axis not moved."""
    b, s, d = t.shape
    return t.reshape(b, s, h, d // h)


def _mha_seed_einsum(w, h, xq, xkv):
    """The seed's einsum 'bhqd,bhkd->bhqk' applied to [B, S, H, Dh] tensors."""
    q, k, v = (_seed_heads(t, h) for t in _project(w, xq, xkv))
    energy = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(q.size(-1))
    out = torch.einsum("bhql,bhlv->bhqv", energy.softmax(dim=3), v)
    return F.linear(out.flatten(2), *w["o"])


def _mha_seed_code(w, h, xq, xkv):
    """The seed's SelfAttention as written: that einsum, and scores over √embed_size."""
    q, k, v = (_seed_heads(t, h) for t in _project(w, xq, xkv))
    energy = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(xq.size(-1))
    out = torch.einsum("bhql,bhlv->bhqv", energy.softmax(dim=3), v)
    return F.linear(out.flatten(2), *w["o"])


def _mha_split_view_straight(w, h, xq, xkv):
    q, k, v = (_split_view_straight(t, h) for t in _project(w, xq, xkv))
    return F.linear(merge_heads(_attend(q, k, v)), *w["o"])


def _mha_merged_without_transpose(w, h, xq, xkv):
    q, k, v = (split_heads(t, h) for t in _project(w, xq, xkv))
    return F.linear(_merge_no_transpose(_attend(q, k, v)), *w["o"])


def _mha_merged_dh_major(w, h, xq, xkv):
    q, k, v = (split_heads(t, h) for t in _project(w, xq, xkv))
    return F.linear(_merge_dh_major(_attend(q, k, v)), *w["o"])


MHA_PITFALLS = (
    Pitfall("scaled by sqrt(d_model)",
            "Your scores are divided by √d_model, not √d_head. The variance of q·k "
            "grows with the length of the vectors being dotted, which is Dh per head; "
            "dividing by √D makes the logits √H times too small.",
            S_SCALE, _mha_scaled_by_sqrt_d_model),
    Pitfall("no scaling",
            "Your scores are not divided by √d_head at all. Unscaled logits grow like "
            "√Dh and push softmax into saturation, where its gradients vanish.",
            S_SCALE, _mha_unscaled),
    Pitfall("softmax over the query axis",
            "Your softmax normalises over the queries (dim=-2). Each query's weights "
            "over the keys must sum to 1, so softmax over the last axis (dim=-1).",
            S_EINSUM, _mha_softmax_over_queries),
    Pitfall("einsum over the wrong axes (the seed's bug)",
            "Your einsum treats the sequence axis as heads: on [B, S, H, Dh] tensors "
            "'bhqd,bhkd->bhqk' attends across the heads of one token, so tokens never "
            "mix (and cross-attention with Sq != Sk fails). Transpose to [B, H, S, Dh] "
            "first, or label the axes 'bqhd,bkhd->bhqk'.",
            S_EINSUM, _mha_seed_einsum),
    Pitfall("einsum over the wrong axes and scaled by sqrt(d_model) (the seed's code)",
            "This is the seed's SelfAttention: its einsum attends across the heads of "
            "one token instead of across tokens, and it divides by √embed_size instead "
            "of √head_dim.",
            S_EINSUM, _mha_seed_code),
    Pitfall(SPLIT_VIEW_STRAIGHT.name,
            "Your heads are split by viewing [B, S, D] straight as [B, H, S, Dh], "
            "which mixes tokens into heads.",
            S_SPLIT, _mha_split_view_straight),
    Pitfall(MERGE_NO_TRANSPOSE.name,
            "Your heads are merged by reshaping [B, H, S, Dh] straight to [B, S, D], "
            "which glues different tokens.",
            S_MERGE, _mha_merged_without_transpose),
    Pitfall(MERGE_DH_MAJOR.name,
            "Your merge interleaves the heads' features (Dh axis before the head "
            "axis).",
            S_MERGE, _mha_merged_dh_major),
)

# Recognised by the parameter shapes: such a module has no [D, D] projections to load
# the cases' weights into, so its outputs cannot be compared.
SHARED_HEAD_LINEAR = Diagnosis(
    "one Linear shared by all heads",
    "Each head must have its own projection of the whole D-dimensional input: use "
    "Linear(d_model, d_model), which is H separate D→Dh projections side by side.",
    S_PROJ)


def _weights_qkvo(matrices, d_model: int, listing: str) -> list:
    """The four projection weights: four [D, D], or one [3D, D] and one [D, D]."""
    __tracebackhide__ = True
    shapes = [tuple(p.shape) for p in matrices]
    if shapes == [(d_model, d_model)] * 4:
        return list(matrices)
    if shapes == [(3 * d_model, d_model), (d_model, d_model)]:
        return [*matrices[0].chunk(3, dim=0), matrices[1]]
    fail("MultiHeadAttention",
         "cannot find the projections. Expected four nn.Linear(d_model, d_model) "
         "registered in the order query, key, value, output (or one "
         "nn.Linear(d_model, 3*d_model) for q, k, v, then the output one). "
         f"Found parameters: {listing}.", S_PROJ)


def _biases_qkvo(vectors, d_model: int, listing: str) -> list:
    """The four projection biases, matched like the weights (four None when there are
    none)."""
    __tracebackhide__ = True
    if not vectors:
        return [None] * 4
    sizes = [p.numel() for p in vectors]
    if sizes == [d_model] * 4:
        return list(vectors)
    if sizes == [3 * d_model, d_model]:
        return [*vectors[0].chunk(3), vectors[1]]
    fail("MultiHeadAttention",
         f"cannot match the biases to the projections. Found parameters: {listing}.",
         S_PROJ)


def _find_projections(module, d_model: int, n_heads: int):
    """The learner's (weight, bias) pairs in the order q, k, v, o, from the layouts the
    exercise allows: four Linear(D, D), or one Linear(D, 3D) for q, k, v followed by one
    Linear(D, D). Parameters are taken in the order the module registers them."""
    __tracebackhide__ = True
    d_head = d_model // n_heads
    named = list(module.named_parameters())
    listing = ", ".join(f"{n} {list(p.shape)}" for n, p in named) or "none"
    matrices = [p for _, p in named if p.dim() == 2]
    if d_head != d_model and any(p.shape == (d_head, d_head) for p in matrices):
        total = sum(p.numel() for _, p in named)
        SHARED_HEAD_LINEAR.fail(
            "MultiHeadAttention",
            f"It is the seed's bug: your module has a [{d_head}, {d_head}] weight, "
            "i.e. a Linear(d_head, d_head) applied to every head's slice, and "
            f"{total:,} parameters; per-head projections from d_model need "
            f"4·(D²+D) = {4 * (d_model**2 + d_model):,}.")
    vectors = [p for _, p in named if p.dim() == 1]
    return list(zip(_weights_qkvo(matrices, d_model, listing),
                    _biases_qkvo(vectors, d_model, listing)))


def _load_weights(module, weights: dict, d_model: int, n_heads: int) -> None:
    """Copy ``weights`` into the learner's module (biases only where it has some)."""
    slots = _find_projections(module, d_model, n_heads)
    with torch.no_grad():
        for name, (w_slot, b_slot) in zip("qkvo", slots):
            w, b = weights[name]
            w_slot.copy_(w)
            if b_slot is not None:
                b_slot.copy_(b)


def _with_zero_biases(fn):
    """``fn`` with the case's biases zeroed: what a module without biases computes."""
    def call(w, h, xq, xkv):
        unbiased = {n: (weight, torch.zeros_like(b)) for n, (weight, b) in w.items()}
        return fn(unbiased, h, xq, xkv)
    return call


def _mha_cases():
    # (D, H, B, Sq, Sk, dtype); Sq != Sk is cross-attention; B == H catches batch/head
    # mix-ups.
    configs = [(16, 4, 2, 5, 5, torch.float32), (24, 3, 3, 4, 7, torch.float32),
               (12, 2, 2, 6, 6, torch.float64), (32, 4, 4, 5, 3, torch.float32)]
    cases = []
    for i, (d, h, b, sq, sk, dtype) in enumerate(configs):
        def make(d=d, h=h, b=b, sq=sq, sk=sk, dtype=dtype, i=i):
            w = {n: (randn(d, d, seed=100 * i + j, dtype=dtype) / math.sqrt(d),
                     randn(d, seed=100 * i + j + 50, dtype=dtype) * 0.1)
                 for j, n in enumerate("qkvo")}
            xq = randn(b, sq, d, seed=1000 + i, dtype=dtype)
            xkv = xq if sq == sk else randn(b, sk, d, seed=2000 + i, dtype=dtype)
            return w, h, xq, xkv
        kind = "self-attention" if sq == sk else "cross-attention"
        label = f"{kind} D={d}, H={h}, B={b}, Sq={sq}, Sk={sk}, {dtype}"
        cases.append(Case(label, make))
    return cases


def _build(cls, d_model, n_heads, dtype):
    __tracebackhide__ = True
    module = build_module("MultiHeadAttention", cls, (d_model, n_heads), dtype, seed=0)
    return module.eval()


def check_multi_head_attention(cls) -> None:
    """``cls(d_model, n_heads)`` is an nn.Module whose ``forward(query, key, value,
    mask=None)`` maps query [B, Sq, D], key and value [B, Sk, D] to [B, Sq, D]."""
    __tracebackhide__ = True

    def learner(w, h, xq, xkv):
        d = xq.size(-1)
        module = _build(cls, d, h, xq.dtype)
        _load_weights(module, w, d, h)
        with torch.no_grad():
            return module(xq, xkv, xkv)

    # The learner decides whether biases exist; reference and pitfalls follow them.
    has_bias = any(p.dim() == 1 for p in _build(cls, 16, 4, torch.float32).parameters())
    compare_to_reference("MultiHeadAttention", _mha_cases(), learner, _mha_reference,
                         MHA_PITFALLS, atol=1e-5, rtol=1e-4,
                         adapt=(lambda fn: fn) if has_bias else _with_zero_biases)


TOKENS_NEVER_MIX = Diagnosis(
    "tokens never mix",
    "The scores must contract over the feature axis and range over key *positions*: check the "
    "axes of your matmul/einsum (the seed's einsum labels the sequence axis as heads).",
    S_EINSUM)
BATCH_ENTRIES_LEAK = Diagnosis(
    "batch entries leak into each other",
    "Check that no reshape/view mixes the batch axis with the head or sequence axis, and that "
    "batch-first tensors go to modules built with batch_first=True.", S_SPLIT)
DROPOUT_IN_EVAL = Diagnosis(
    "dropout on in eval mode",
    "Dropout must be off in eval mode: use nn.Dropout or pass "
    "`dropout_p if self.training else 0.0`.", S_PROJ)


def check_multi_head_attention_behaviour(cls) -> None:
    """Probes any correct attention passes: tokens mix, batch entries stay apart, eval
    mode is deterministic."""
    __tracebackhide__ = True
    module = _build(cls, 16, 4, torch.float32)
    x = randn(4, 6, 16, seed=7)

    def self_attend(t):
        with torch.no_grad():
            return module(t, t, t)

    # Determinism first: the other probes compare two calls.
    probe_eval_determinism("MultiHeadAttention", module, (x, x, x), DROPOUT_IN_EVAL)
    probe_token_mixing("MultiHeadAttention", self_attend, x, TOKENS_NEVER_MIX)
    probe_batch_independence("MultiHeadAttention", self_attend, x, BATCH_ENTRIES_LEAK)
    passed("MultiHeadAttention",
           "mixes tokens, keeps batch entries apart, deterministic in eval mode")


def check_multi_head_attention_by_hand(cls) -> None:
    """Hidden test: the forward pass is the learner's own, not PyTorch's or the
    reference's attention."""
    __tracebackhide__ = True
    module = _build(cls, 16, 4, torch.float32)
    x = randn(2, 5, 16, seed=8)
    check_not_delegated(
        "MultiHeadAttention", lambda: module(x, x, x),
        forbidden=["scaled_dot_product_attention", "multi_head_attention_forward",
                   "tformer_ref"],
        module=module)


seal(__name__)
