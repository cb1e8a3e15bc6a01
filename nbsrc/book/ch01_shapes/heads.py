# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Heads and shapes
#
# {doc}`lesson` computed attention for one head. This page runs `H` heads side by side,
# in one `[B, H, S, Dh]` tensor: the shapes on the way (§1.4), splitting and merging
# (§1.5, §1.6), `einsum` (§1.7), per-head projections and their scale (§1.8, §1.9), the
# cost (§1.10), a look at one head (§1.11) and a bug hunt in a seed's code (§1.12).
# Almost every bug of a first implementation lives here, and most of them do not crash.

# %%
# %matplotlib inline
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from tformer_ref.attention import MultiHeadAttention
from tformer_grading.checks.ch01 import (
    check_multi_head_attention,
    check_multi_head_attention_behaviour,
)
from tformer_grading.checks.diagnosis import CheckFailure
from tformer_ref.device import get_device, seed_everything
from tformer_ref.heads import merge_heads, split_heads
from tformer_ref.plotting import attention_heatmaps
from tformer_ref.widgets import head_explorer

device = get_device()  # CUDA when available; set TFORMER_DEVICE=cpu to override
seed_everything(0)
torch.set_grad_enabled(False)  # this page only inspects forward values
print(f"device: {device}, torch {torch.__version__}")

# %% [markdown]
# ## 1.4 From [B, S, D] to heads
#
# The letters used throughout the course (§1.3 has already used four of them):
#
# | letter | meaning | the seed's example |
# |---|---|---|
# | B | batch size: sequences processed together | 32 |
# | S | sequence length (Sq for queries and Sk for keys when they differ) | 64 |
# | D | model width, `d_model` | 512 |
# | H | number of heads | 8 |
# | Dh | size of one head, $D_h = D / H$ (the paper's $d_k$) | 64 |
#
# A multi-head self-attention layer takes `x` of shape `[B, S, D]` and returns the same
# shape. On the way, every head gets its own `Dh`-dimensional query, key and value for
# every token, and does §1.3's computation with them; all heads at once:
#
# ```text
# x                                [B, S, D]
# q = x Wqᵀ + bq                   [B, S, D]      (same for k and v)
# q.view(B, S, H, Dh)              [B, S, H, Dh]  each token's D features in H slices
# .transpose(1, 2)                 [B, H, S, Dh]  heads in front: [S, Dh] per head
# scores = q @ kᵀ / √Dh            [B, H, S, S]   one S×S score matrix per head
# weights = softmax(scores, -1)    [B, H, S, S]   each row sums to 1
# out = weights @ v                [B, H, S, Dh]
# out.transpose(1, 2)              [B, S, H, Dh]
# .reshape(B, S, D)                [B, S, D]      heads side by side again
# y = out Woᵀ + bo                 [B, S, D]
# ```
#
# Let us walk this path by hand with tiny sizes, using the weights of the course's
# reference `MultiHeadAttention`, and assert every shape on the way.

# %%
B, S, D, H = 2, 5, 12, 3
Dh = D // H

seed_everything(0)
mha = MultiHeadAttention(D, H).to(device).eval()
x = torch.randn(B, S, D, device=device)
assert x.shape == (B, S, D)

q, k, v = mha.q_proj(x), mha.k_proj(x), mha.v_proj(x)
assert q.shape == k.shape == v.shape == (B, S, D)

q4, k4, v4 = (t.view(B, S, H, Dh) for t in (q, k, v))
assert q4.shape == (B, S, H, Dh)

qh, kh, vh = (t.transpose(1, 2) for t in (q4, k4, v4))
assert qh.shape == (B, H, S, Dh)

scores = qh @ kh.transpose(-2, -1) / math.sqrt(Dh)
assert scores.shape == (B, H, S, S)

weights = scores.softmax(dim=-1)
assert weights.shape == (B, H, S, S)

out_h = weights @ vh
assert out_h.shape == (B, H, S, Dh)

merged = out_h.transpose(1, 2).reshape(B, S, D)
assert merged.shape == (B, S, D)

y = mha.out_proj(merged)
assert y.shape == (B, S, D)

# The walk by hand is exactly what the reference module computes.
assert torch.allclose(y, mha(x), atol=1e-6)
print(
    "x",
    tuple(x.shape),
    "-> q",
    tuple(q4.shape),
    "->",
    tuple(qh.shape),
    "-> scores",
    tuple(scores.shape),
    "-> out",
    tuple(out_h.shape),
    "-> y",
    tuple(y.shape),
)

# %% [markdown]
# ## 1.5 Splitting into heads
#
# ```{figure} ../figures/heads_split_merge.svg
# :alt: A vertical flow with the shape written on every arrow: x [B, S, D] goes through the linear W_q to [B, S, D], view(B, S, H, Dh) to [B, S, H, Dh], transpose(1, 2) to [B, H, S, Dh], attention in every head to [B, H, S, Dh], transpose(1, 2) back to [B, S, H, Dh], reshape(B, S, D) to [B, S, D] and the output linear W_o; the view and transpose steps are bracketed as split, the last transpose and reshape as merge.
# :name: fig-heads-split-merge
# :width: 100%
#
# Splitting into heads and merging them back. `view` cuts each token's `D` features into `H` slices of `Dh`; `transpose` brings the heads in front so that each head attends over the sequence on its own; after attention the same two steps, undone in reverse order, glue the heads side by side again.
# ```
#
# **How a tensor sits in memory.** A contiguous `[B, S, D]` tensor stores, for each
# token, its `D` features one after the other; then the next token. Its *strides*
# say how many elements to skip to move one step along each axis: `(S·D, D, 1)`.
#
# **`view` vs `reshape`.** Both fill the shape you ask for with the elements in the
# tensor's *logical* order: the order its indices count in, last axis fastest. For a
# contiguous tensor that is the order of memory. `view` never copies: it only gives the
# same memory new strides, and raises an error when no strides can do it. `reshape`
# returns a view when it can; otherwise it copies the elements, in logical order, into
# fresh memory. The point to remember: **on a contiguous `[B, S, D]`, the shape you ask
# for is cut out of memory in order.** So `view(B, H, S, Dh)` cuts it in the wrong
# places (below), while §1.6's `transpose(1, 2).reshape(...)` merges correctly, because
# `reshape` reads the transposed tensor in its new order.
#
# - `view(B, S, H, Dh)` cuts each token's `D` features into `H` consecutive slices of
#   `Dh`. Head `h` gets features `h·Dh … (h+1)·Dh − 1` of every token: correct.
# - `transpose(1, 2)` then swaps the S and H axes by swapping their strides: no copy,
#   the same numbers, now indexed `[b, h, s, :]`.
# - `view(B, H, S, Dh)` straight away has the right *shape* but reads memory as if
#   the first `S·Dh` numbers belonged to head 0, which are the first `S/H` tokens' features.
#
# Small integers make this visible: one sequence of 3 tokens, `D = 4`, 2 heads.

# %%
x_small = torch.arange(3 * 4, dtype=torch.float32, device=device).view(
    1, 3, 4
)  # [B=1, S=3, D=4]
print("x_small [1, 3, 4], token s holds features 4s … 4s+3:\n", x_small[0])
print("strides:", x_small.stride())

right = x_small.view(1, 3, 2, 2).transpose(1, 2)  # [B, S, H, Dh] -> [B, H, S, Dh]
wrong = x_small.view(1, 2, 3, 2)  # straight to [B, H, S, Dh]
assert right.shape == wrong.shape == (1, 2, 3, 2)
print("head 0, right split (first two features of each token):\n", right[0, 0])
print(
    "head 0, viewed straight to [B, H, S, Dh] (tokens cut in half and re-glued):\n",
    wrong[0, 0],
)

# Same shape, different numbers: the straight view mixes tokens into heads.
assert not torch.equal(right, wrong)
# reshape is no cure: x_small is contiguous, so it reads the same order as view.
assert torch.equal(x_small.reshape(1, 2, 3, 2), wrong)
# view and transpose copy nothing: all three share one block of memory.
assert right.data_ptr() == wrong.data_ptr() == x_small.data_ptr()

# %% [markdown]
# The correct split is what the reference `tformer_ref.heads.split_heads` does.
# Check it on the random `x` of §1.4, and check the meaning of a head: head `h` is
# the slice `x[..., h·Dh:(h+1)·Dh]` of every token.

# %%
heads = split_heads(x, H)  # [B, H, S, Dh]
assert heads.shape == (B, H, S, Dh)
assert torch.equal(heads, x.view(B, S, H, Dh).transpose(1, 2))
for h in range(H):
    assert torch.equal(heads[:, h], x[..., h * Dh : (h + 1) * Dh])
assert not torch.equal(
    heads, x.view(B, H, S, Dh)
)  # the straight view is wrong here too
print(
    "split_heads:", tuple(x.shape), "->", tuple(heads.shape), "strides", heads.stride()
)

# %% [markdown]
# ## 1.6 Merging heads back
#
# After attention, each head's output is `[B, H, S, Dh]` and we need `[B, S, D]` again:
# transpose back to `[B, S, H, Dh]`, then glue the heads side by side.
#
# The attention output `weights @ v` is a fresh tensor, contiguous in the
# `[B, H, S, Dh]` order. Its transpose is **not contiguous**: walking it in
# `[B, S, H, Dh]` order jumps around memory. `view` needs memory it can walk with
# fixed strides, so it refuses to glue the last two axes.

# %%
back = out_h.transpose(1, 2)  # [B, S, H, Dh], a view of out_h
assert back.shape == (B, S, H, Dh)
print(
    "out_h contiguous:",
    out_h.is_contiguous(),
    "| after transpose:",
    back.is_contiguous(),
    "| strides",
    back.stride(),
)
assert out_h.is_contiguous() and not back.is_contiguous()

raised = False
try:
    back.view(B, S, D)
except RuntimeError as err:
    raised = True
    print("RuntimeError:", err)
assert raised, "view on a non-contiguous tensor should have raised"

# Two fixes that give the same tensor: copy into the new order first, or let reshape
# copy.
via_contiguous = back.contiguous().view(B, S, D)
via_reshape = back.reshape(B, S, D)
assert torch.equal(via_contiguous, via_reshape)
assert torch.equal(via_reshape, merge_heads(out_h))
assert via_reshape.data_ptr() != out_h.data_ptr()  # here reshape had to copy

# %% [markdown]
# Seed 000's merge,
# {seed}`000:output = output.transpose(1, 2).contiguous().view(batch_size, -1, self.num_heads * self.d_head)`,
# is therefore right. The
# reference `merge_heads` uses `reshape`, which copies only when it must.
#
# Merging must undo splitting exactly. And skipping the transpose, reshaping
# `[B, H, S, Dh]` straight to `[B, S, D]`, again gives the right shape and the wrong
# numbers: it glues rows of *different tokens* of one head into one "token".

# %%
fresh = split_heads(
    x, H
).contiguous()  # [B, H, S, Dh], laid out like an attention output
assert torch.equal(merge_heads(fresh), x)  # merge ∘ split == identity
assert torch.equal(merge_heads(split_heads(x, H)), x)

no_transpose = fresh.reshape(B, S, D)  # right shape ...
assert no_transpose.shape == x.shape
assert not torch.equal(no_transpose, x)  # ... wrong numbers
# Its first "token" is tokens 0, 1 and 2 of head 0, glued together:
assert torch.equal(no_transpose[:, 0], fresh[:, 0, :3].reshape(B, 3 * Dh))
print(
    "merge(split(x)) == x; reshape without transpose differs by up to",
    f"{(no_transpose - x).abs().max().item():.2f}",
)

# %% [markdown]
# ## 1.7 einsum and matmul
#
# `torch.einsum` names every axis with a letter; letters that appear in the inputs
# but not in the output are summed over. On `[B, H, S, Dh]` tensors the scores are
# `'bhqd,bhkd->bhqk'`: for every batch `b` and head `h`, sum over the feature `d`,
# for every query position `q` and key position `k`. That is exactly
# `q @ k.transpose(-2, -1)`.

# %%
s_matmul = qh @ kh.transpose(-2, -1)  # [B, H, S, S]
s_einsum = torch.einsum("bhqd,bhkd->bhqk", qh, kh)  # [B, H, S, S]
assert s_matmul.shape == s_einsum.shape == (B, H, S, S)
assert torch.allclose(s_matmul, s_einsum, atol=1e-6)

# %% [markdown]
# **The letters are names, not meanings.** `einsum` does not know that you *meant*
# `h` to be the heads; it takes the axes in the order the tensor has them. The seed's
# `SelfAttention` (§1.12) applies the same subscripts,
# {seed}`004:"bhqd, bhkd -> bhqk"`, to tensors still laid out as
# `[B, S, H, Dh]` (it never transposes). Then `b` = batch, `h` = **sequence**, `q` and
# `k` = **heads**, `d` = head features. The "scores" are `[B, S, H, H]`: for each token,
# how much each of its heads attends to its *other heads*. No token ever looks at
# another token.
#
# The shape looks plausible, and after the second einsum and the final reshape the
# layer even returns `[B, S, D]`. A probe exposes it: change token 0 and check the
# outputs at the other positions.


# %%
def seed_einsum_attention(q, k, v):
    """The seed's two einsums, applied to q [B, Sq, H, Dh], k and v [B, Sk, H, Dh]
    (BUGGY).

    Returns [B, Sq, H, Dh]; its "attention" runs across the heads of one token.
    """
    energy = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(
        q.size(-1)
    )  # [B, S, H, H] !
    return torch.einsum("bhql,bhlv->bhqv", energy.softmax(dim=3), v)


def correct_attention(q, k, v):
    """q [B, Sq, H, Dh], k and v [B, Sk, H, Dh] -> [B, Sq, H, Dh].

    Attends across positions.
    """
    qh, kh, vh = (t.transpose(1, 2) for t in (q, k, v))  # [B, H, S, Dh]
    w = (qh @ kh.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(
        dim=-1
    )  # [B, H, Sq, Sk]
    return (w @ vh).transpose(1, 2)


def layer(x_in, attention):
    """Project x_in [B, S, D] with mha's weights, attend in the [B, S, H, Dh] layout,
    project back."""
    b, s, _ = x_in.shape
    q, k, v = (
        proj(x_in).view(b, s, H, Dh) for proj in (mha.q_proj, mha.k_proj, mha.v_proj)
    )
    return mha.out_proj(attention(q, k, v).reshape(b, s, D))


assert torch.einsum("bhqd,bhkd->bhqk", q4, k4).shape == (B, S, H, H)  # not [B, H, S, S]

x_changed = x.clone()
x_changed[:, 0] = torch.randn(B, D, device=device)  # a different token 0
change = {}
for name, attention in (
    ("seed einsum", seed_einsum_attention),
    ("correct", correct_attention),
):
    before, after = layer(x, attention), layer(x_changed, attention)  # [B, S, D] each
    assert before.shape == after.shape == (B, S, D)
    change[name] = (
        (after - before)[:, 1:].abs().amax(dim=-1)
    )  # [B, S-1]: change at positions 1..
    print(
        f"{name:12s}: largest change at positions 1..{S - 1} = "
        f"{change[name].max().item():.2e}"
    )

# With the seed's einsum, positions 1.. do not notice token 0 at all: tokens never mix.
assert (change["seed einsum"] < 1e-6).all()
# Real attention: every other position's output depends on token 0.
assert (change["correct"] > 1e-3).all()
# The reference agrees with the correct version.
assert torch.allclose(layer(x, correct_attention), mha(x), atol=1e-6)

# %% [markdown]
# In cross-attention the queries come from one sequence and the keys from another,
# so `Sq ≠ Sk`. The seed's einsum then reads the two different lengths as the same
# letter `h` and fails (it only "works" by accident when the lengths match).

# %%
memory = torch.randn(B, 7, H, Dh, device=device)  # keys/values from a 7-token sequence
raised = False
try:
    seed_einsum_attention(q4, memory, memory)  # q4: [B, 5, H, Dh]
except RuntimeError as err:
    raised = True
    print("RuntimeError:", err)
assert raised
assert correct_attention(q4, memory, memory).shape == (B, S, H, Dh)

# %% [markdown]
# `einsum` is fine when the letters name the axes as they really are. On the
# untransposed `[B, S, H, Dh]` layout the scores are `'bqhd,bkhd->bhqk'`, and the
# weighted sum can even land straight back in `[B, S, H, Dh]` with
# `'bhqk,bkhd->bqhd'`: no transpose needed at all.

# %%
s_labelled = torch.einsum("bqhd,bkhd->bhqk", q4, k4)  # q4, k4: [B, S, H, Dh]
assert s_labelled.shape == (B, H, S, S)
assert torch.allclose(s_labelled, s_matmul, atol=1e-6)

w_labelled = (s_labelled / math.sqrt(Dh)).softmax(dim=-1)
out_labelled = torch.einsum("bhqk,bkhd->bqhd", w_labelled, v4)  # [B, S, H, Dh]
assert torch.allclose(out_labelled.reshape(B, S, D), merged, atol=1e-6)

# %% [markdown]
# **Softmax over the keys.** Row `i` of a head's `[Sq, Sk]` weight matrix is query
# `i`'s distribution over the keys, so the softmax runs over the last axis (`dim=-1`;
# the seed's `dim=3` on a 4-D tensor is the same). `dim=-2` makes each *key's* column
# sum to 1 instead, and the rows do not.

# %%
rows_ok = scores.softmax(dim=-1)  # [B, H, S, S]
cols = scores.softmax(dim=-2)
assert torch.allclose(rows_ok.sum(dim=-1), torch.ones(B, H, S, device=device))
assert not torch.allclose(cols.sum(dim=-1), torch.ones(B, H, S, device=device))
print("row sums with dim=-2:", cols[0, 0].sum(dim=-1))

# %% [markdown]
# ## 1.8 Per-head projections
#
# In the paper {cite}`vaswani2017attention`, head $i$ has its own projections
# $W_i^Q, W_i^K, W_i^V \in \mathbb{R}^{D \times D_h}$ of the **whole** `D`-dimensional
# input. Stacking the H matrices side by side gives one `D × D` matrix, which is why
# a single `Linear(D, D)` followed by a split is the standard implementation: rows
# `h·Dh … (h+1)·Dh − 1` of its weight are head `h`'s own projection.

# %%
W, b = mha.q_proj.weight, mha.q_proj.bias  # [D, D], [D]
q_heads = split_heads(mha.q_proj(x), H)  # [B, H, S, Dh]
for h in range(H):
    rows = slice(h * Dh, (h + 1) * Dh)
    q_h = F.linear(x, W[rows], b[rows])  # head h alone: [B, S, D] -> [B, S, Dh]
    assert q_h.shape == (B, S, Dh)
    assert torch.allclose(q_h, q_heads[:, h], atol=1e-6)
print(f"Linear({D}, {D}) == {H} separate Linear({D}, {Dh}) projections, one per head")

# %% [markdown]
# The seed's `SelfAttention` instead cuts `x` into heads *first* and applies one
# `Linear(Dh, Dh)` to every slice. Head `h` then sees only features `h·Dh … (h+1)·Dh − 1`
# of each token, and all heads share the same matrix. As a `D × D` matrix, that is
# a block-diagonal one with H identical blocks:

# %%
shared = nn.Linear(Dh, Dh, bias=False).to(
    device
)  # the seed's: one [Dh, Dh] weight for all heads
q_seed = shared(x.view(B, S, H, Dh))  # [B, S, H, Dh]
as_big = torch.block_diag(
    *[shared.weight] * H
)  # [D, D], zero outside the diagonal blocks
assert torch.allclose(F.linear(x, as_big).view(B, S, H, Dh), q_seed, atol=1e-6)
print(
    "non-zero entries of the equivalent D×D matrix:",
    int((as_big != 0).sum()),
    "of",
    D * D,
)

# %% [markdown]
# So it is a different and much smaller model, not another way of writing the same
# one. At the seed's size, `D = 512`, `H = 8`: its three `Linear(64, 64)` have no bias,
# its output `Linear(512, 512)` has one.
#
# $$\underbrace{3 \cdot 64^2}_{\text{q, k, v shared}} + \underbrace{512^2 + 512}_{\text{output projection}} = 274{,}944
# \qquad\text{vs}\qquad
# \underbrace{4\,(512^2 + 512)}_{\text{per-head q, k, v, out}} = 1{,}050{,}624$$

# %%
d, h = 512, 8
seed_layers = [nn.Linear(d // h, d // h, bias=False) for _ in range(3)] + [
    nn.Linear(d, d)
]
seed_count = sum(p.numel() for layer_ in seed_layers for p in layer_.parameters())
ref_count = sum(p.numel() for p in MultiHeadAttention(d, h).parameters())
assert seed_count == 3 * (d // h) ** 2 + d * d + d == 274_944
assert ref_count == 4 * (d * d + d) == 1_050_624
print(
    f"seed's shared projections: {seed_count:,} parameters; "
    f"per-head projections: {ref_count:,}"
)

# %% [markdown]
# **Checking against PyTorch.** `torch.nn.MultiheadAttention` computes the same thing.
# It packs the three input projections into one `in_proj_weight` of shape `[3D, D]`
# (rows: q, then k, then v) and `in_proj_bias` `[3D]`. Two traps: it defaults to
# `batch_first=False` (it would read our `[B, S, D]` as `[S, B, D]` and attend across
# the batch), and it averages the attention weights over the heads unless told
# `average_attn_weights=False`.

# %%
seed_everything(1)
ours = MultiHeadAttention(D, H).to(device).eval()
theirs = nn.MultiheadAttention(D, H, batch_first=True).to(device).eval()
theirs.in_proj_weight.copy_(
    torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight])
)  # [3D, D]
theirs.in_proj_bias.copy_(
    torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias])
)  # [3D]
theirs.out_proj.weight.copy_(ours.out_proj.weight)
theirs.out_proj.bias.copy_(ours.out_proj.bias)

x_kv = torch.randn(B, 7, D, device=device)  # a second sequence, for cross-attention
for xq, xkv in ((x, x), (x, x_kv)):
    y_ours, w_ours = ours(
        xq, xkv, xkv, return_weights=True
    )  # [B, Sq, D], [B, H, Sq, Sk]
    y_theirs, w_theirs = theirs(
        xq, xkv, xkv, need_weights=True, average_attn_weights=False
    )
    assert y_ours.shape == y_theirs.shape == (B, S, D)
    assert w_ours.shape == w_theirs.shape == (B, H, S, xkv.size(1))
    assert torch.allclose(y_ours, y_theirs, atol=1e-5)
    assert torch.allclose(w_ours, w_theirs, atol=1e-5)
print(
    "tformer_ref MultiHeadAttention == nn.MultiheadAttention(batch_first=True), "
    "self- and cross-attention"
)

# %% [markdown]
# ## 1.9 Scaling by the head size
#
# Chapter 2 is all about the scale; here is the one fact this chapter needs. If the
# entries of `q` and `k` have mean 0 and variance 1, the dot product
# $q \cdot k = \sum_{j=1}^{D_h} q_j k_j$ is a sum of $D_h$ independent terms of
# variance 1, so $\operatorname{var}(q \cdot k) = D_h$ and its standard deviation is
# $\sqrt{D_h}$. Dividing by $\sqrt{D_h}$ brings the scores back to variance 1.
# (Chapter 2 §2.2 measures it, for head sizes from 4 to 1024.)
#
# The vectors being dotted belong to **one head**: their length is $D_h$, not $D$.
# Seed 004 is right that $\sqrt{512} \approx 22.6$, but in an 8-head model of width 512,
# such as seed 000's, a head's $d_k$ is $64$; dividing by $\sqrt{D} = \sqrt{512}$ makes
# the scores $\sqrt{H} \approx 2.8$ times too small, and the attention flatter
# (chapter 2 §2.5 measures how much).

# %% [markdown]
# **Seed 000's own module gets all of this right.** Its `MultiHeadAttention` projects
# the whole input with `Linear(d_model, d_model)`, splits with `view` then
# `transpose(1, 2)`, divides by $\sqrt{D_h}$ (`self.d_head`) and merges with
# `transpose(1, 2).contiguous().view(...)`. The cell below holds its class token for
# token (only its line breaks and spacing follow the book's 88 columns), Chinese
# comments included. The cell after it runs the class through the check of the
# chapter 1 exercise. The seed's `forward(x, mask=None)` is self-attention only, while
# the check also tries cross-attention, so a small adapter, not part of the seed, hands
# each projection its own input; its code is folded, as it uses PyTorch hooks, which
# this course does not need elsewhere.


# %%
# Seed 000's MultiHeadAttention (book/seeds/000.txt), only the class: every token as
# the seed wrote it; line breaks and spacing laid out for the book's 88 columns
# ("fmt: off" keeps the formatter from adding parentheses the seed does not have).
# fmt: off
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model=512, num_heads=8):
        super().__init__()
        assert d_model % num_heads == 0  # 确保可以整除
        self.d_head = d_model // num_heads
        self.num_heads = num_heads

        # 初始化 QKV 投影矩阵
        self.W_q = nn.Linear(d_model, d_model)
        self.W_k = nn.Linear(d_model, d_model)
        self.W_v = nn.Linear(d_model, d_model)

        # 输出投影
        self.W_o = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        # x: [batch, seq_len, d_model]
        batch_size = x.size(0)

        # 1. 投影 QKV [32,64,512] → [32,64,512]
        Q = self.W_q(x)
        K = self.W_k(x)
        V = self.W_v(x)

        # 2. 分割多头 [32,64,512] → [32,64,8,64] → [32,8,64,64]
        Q = Q.view(batch_size, -1, self.num_heads, self.d_head).transpose(1, 2)
        K = K.view(batch_size, -1, self.num_heads, self.d_head).transpose(1, 2)
        V = V.view(batch_size, -1, self.num_heads, self.d_head).transpose(1, 2)

        # 3. 计算缩放点积注意力
        scores = torch.matmul(Q, K.transpose(-2, -1)) / torch.sqrt(
            torch.tensor(self.d_head, dtype=torch.float32)
        )
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        attn = F.softmax(scores, dim=-1)
        output = torch.matmul(attn, V)  # [32,8,64,64]

        # 4. 合并多头 [32,8,64,64] → [32,64,512]
        output = output.transpose(1, 2).contiguous() \
            .view(batch_size, -1, self.num_heads * self.d_head)

        return self.W_o(output)
# fmt: on


# %% tags=["hide-input"]
# The adapter (folded in the book): not the seed's code.
SeedMultiHeadAttention = MultiHeadAttention
from tformer_ref.attention import MultiHeadAttention  # noqa: E402  the reference again


class SeedForTheCheck(SeedMultiHeadAttention):
    """Adapter, not seed code: forward(query, key, value, mask=None) as the check calls
    it.

    Each of W_q, W_k, W_v receives its own input through a forward pre-hook, then the
    seed's forward(x, mask) runs unchanged (x = query gives the batch size).
    """

    def forward(self, query, key, value, mask=None):
        inputs = {self.W_q: query, self.W_k: key, self.W_v: value}
        hooks = [
            proj.register_forward_pre_hook(lambda proj, args: (inputs[proj],))
            for proj in inputs
        ]
        try:
            return super().forward(query, mask)
        finally:
            for hook in hooks:
                hook.remove()


check_multi_head_attention(SeedForTheCheck)
check_multi_head_attention_behaviour(SeedForTheCheck)

# %% [markdown]
# ## 1.10 Cost: O(n²·d) whatever the number of heads
#
# Seed 000 says that a single head costs $O(n^2 d)$ and that, with $d$ split into $h$
# heads of $d / h$ dimensions each,
# {seedtr}`000:the computational complexity becomes O(n²d/h); through parallelisation it is actually faster`.
# The first half is true **per head**. But there are $h$ heads, and running them in
# parallel does not make their work disappear.
#
# Count the floating-point operations (a multiply and an add per term) for a batch of
# $B$ sequences of length $n = S$. Per head, $QK^\top$ multiplies an $n \times D_h$
# matrix by a $D_h \times n$ one: $2 n^2 D_h$ FLOPs; the weighted sum $AV$ is another
# $2 n^2 D_h$. Over $H$ heads, since $H \cdot D_h = D$:
#
# $$\text{FLOPs}_{QK^\top + AV} = B \cdot H \cdot 4 n^2 D_h = 4 B n^2 D,$$
#
# the same for every $H$: $O(n^2 d)$, as in Table 1 of the paper
# {cite}`vaswani2017attention`. The four projections add $4 \cdot 2 B n D^2 = 8 B n D^2$,
# which do not depend on $H$ either. What *does* grow with $H$ is the score tensor: the
# plain implementation stores $B \cdot H \cdot n^2$ scores (and as many weights).
#
# PyTorch can count the FLOPs of what actually runs: `FlopCounterMode` records every
# matrix product. The projections are `addmm`, the attention products `bmm`.

# %%
Bc, n, d = 1, 256, 512
x_cost = torch.randn(Bc, n, d, device=device)
print("  H    Dh   QKᵀ+AV FLOPs   projection FLOPs   scores [B,H,n,n] (MiB)")
attention_flops = {}
for h in (1, 2, 4, 8, 16):
    module = MultiHeadAttention(d, h).to(device).eval()
    with FlopCounterMode(display=False) as counter:
        module(x_cost)
    counts = {str(op): c for op, c in counter.get_flop_counts()["Global"].items()}
    attention_flops[h] = counts["aten.bmm"]
    score_mib = Bc * h * n * n * 4 / 2**20
    print(
        f"{h:3d} {d // h:5d} {counts['aten.bmm']:14,d} "
        f"{counts['aten.addmm']:18,d} {score_mib:14.2f}"
    )
    assert counts["aten.bmm"] == h * Bc * 4 * n * n * (d // h) == 4 * Bc * n * n * d
    assert counts["aten.addmm"] == 8 * Bc * n * d * d

assert len(set(attention_flops.values())) == 1  # the same for every number of heads
print(
    f"attention's share of the FLOPs at n={n}, d={d}: "
    f"{n / (n + 2 * d):.0%} (= n / (n + 2d))"
)

# %% [markdown]
# Heads are there for *quality*: each head can attend to a different position for a
# different reason {cite}`vaswani2017attention`. They are not a speed-up.
#
# How many, then? Seed 000 says
# {seedtr}`000:8 heads is an empirical value: it works well in models such as BERT, balancing expressiveness and computational cost`.
# Eight is the paper's choice for its base model {cite}`vaswani2017attention`, but not
# BERT's: BERT-base has 12 heads and BERT-large 16 {cite}`devlin2019bert` (widths 768
# and 1024, so 64 features per head in both). The evidence for a head count is an
# ablation: in row (A) of Table 3 of {cite:t}`vaswani2017attention`, at a fixed width,
# one head is 0.9 BLEU worse than eight, and 32 heads of 16 features are worse too.
# Chapter 6 runs such an ablation on this course's task: {doc}`../ch06_training/heads`.
#
# Note also the share: $4Bn^2D$ against $8BnD^2$ makes attention proper
# $\frac{n}{n + 2D}$ of the layer's matrix FLOPs. Only when $n$ is comparable to $D$
# or larger does the $n^2$ term dominate.
#
# What more heads do cost, in memory and time on a real machine, is measured on the
# optional page {doc}`timing`.

# %% [markdown]
# ## 1.11 Explore: one head's attention map
#
# Each head produces one `[S, S]` matrix of weights per sequence: row `i` says how query
# `i` spreads its attention over the keys. Let us look at the maps of a small layer
# (`D = 16`, `H = 4`) on a ten-word sentence. The words get random embeddings (one per
# distinct word); there are no position encodings yet (chapter 5).
#
# **This layer is untrained.** Its weights are random, so its maps show what an
# attention map is, not what a head learns: its patterns mean nothing. An untrained
# layer also attends almost uniformly; to make the differences between heads visible
# we scale its query weights up by 4, as training typically sharpens them. For the
# maps of a trained model, which show where each output character reads the source,
# see "Where the decoder looks" in {doc}`chapter 6's capstone <../ch06_training/capstone>`.

# %%
tokens = "the cat sat on the mat because it was warm".split()
vocab = {word: i for i, word in enumerate(sorted(set(tokens)))}
ids = torch.tensor([[vocab[t] for t in tokens]], device=device)  # [1, S]

seed_everything(0)
D9, H9 = 16, 4
embed = nn.Embedding(len(vocab), D9).to(device)
small = MultiHeadAttention(D9, H9).to(device).eval()
small.q_proj.weight.mul_(4.0)
x9 = embed(ids)  # [1, S, D]
y9, attn = small(x9, return_weights=True)  # [1, S, D], [1, H, S, S]

S9 = len(tokens)
assert y9.shape == (1, S9, D9)
assert attn.shape == (1, H9, S9, S9)
assert torch.allclose(
    attn.sum(dim=-1), torch.ones(1, H9, S9, device=device), atol=1e-6
)  # each row sums to 1
# Without positions, the two "the" (positions 0 and 4) are indistinguishable:
# identical query rows, identical key columns, in every head.
assert torch.allclose(attn[0, :, 0], attn[0, :, 4], atol=1e-6)
assert torch.allclose(attn[0, :, :, 0], attn[0, :, :, 4], atol=1e-6)

# %% [markdown]
# Move the slider to pick a head. (The pictures are rendered in advance and the slider
# is linked to them in the browser, so this also works in the web version of the book,
# without a running kernel.)

# %%
head_explorer(attn[0], tokens)

# %% [markdown]
# The same four maps side by side, on one colour scale:

# %% mystnb={"figure": {"caption": "Attention weights of the four heads of an untrained layer, on one colour scale.", "name": "fig-ch01-heatmaps"}, "image": {"alt": "Four heat maps, one per head: queries in rows, keys in columns."}}
attention_heatmaps(
    attn[0],
    tokens,
    title="Attention weights of an untrained 4-head layer (rows: queries)",
)

# %% [markdown]
# Things to notice: each row is a probability distribution over the ten keys; the
# heads differ from each other because each has its own projections (§1.8); and the
# two rows for "the", like its two columns, are identical in every head. Attention by
# itself does not know word order.

# %% [markdown]
# ## 1.12 Bug hunt: the seed's SelfAttention
#
# Here is the `SelfAttention` class from the second seed, copied as it is (its
# comments translated). **It is buggy.** It runs, and for self-attention it returns a
# tensor of the right shape. Before reading on, look for three bugs, using what §1.7,
# §1.8 and §1.9 have shown; each answer below stays folded until you open it.
#
# The class has a fourth bug, in its mask line, which shows only in float16:
# chapter 3 hunts it, in §3.5, once masks have been introduced. The graded bug hunt,
# [exercise `ch03_bughunt`](../ch03_bughunt/exercise.ipynb), gives you
# this very code with all four bugs to fix, and grades each fix.


# %%
class SelfAttention(nn.Module):
    """THE SEED'S CODE, BUGGY: kept as is for the bug hunt. Do not use."""

    def __init__(self, embed_size, heads):
        super(SelfAttention, self).__init__()
        self.embed_size = embed_size
        self.heads = heads
        self.head_dim = embed_size // heads

        assert self.head_dim * heads == embed_size, (
            "Embed size needs to be div by heads"
        )

        # linear maps producing Q, K, V
        self.values = nn.Linear(self.head_dim, self.head_dim, bias=False)
        self.keys = nn.Linear(self.head_dim, self.head_dim, bias=False)
        self.queries = nn.Linear(self.head_dim, self.head_dim, bias=False)

        # output projection
        self.fc_out = nn.Linear(heads * self.head_dim, embed_size)

    def forward(self, values, keys, query, mask):
        N = query.shape[0]
        value_len, key_len, query_len = values.shape[1], keys.shape[1], query.shape[1]

        # split into heads
        values = values.reshape(N, value_len, self.heads, self.head_dim)
        keys = keys.reshape(N, key_len, self.heads, self.head_dim)
        query = query.reshape(N, query_len, self.heads, self.head_dim)

        # linear maps
        values = self.values(values)
        keys = self.keys(keys)
        query = self.queries(query)

        # attention scores
        # einsum: b=batch, h=heads, q=query_len, k=key_len, d=head_dim
        energy = torch.einsum("bhqd, bhkd -> bhqk", [query, keys])

        # scaling
        energy = energy / (self.embed_size ** (1 / 2))

        # optional mask
        if mask is not None:
            energy = energy.masked_fill(mask == 0, float("-1e20"))

        # softmax gives the attention weights
        attention = torch.softmax(energy, dim=3)

        # weighted sum
        out = torch.einsum("bhql, bhlv -> bhqv", [attention, values])

        # concatenate the heads
        out = out.reshape(N, query_len, self.heads * self.head_dim)

        return self.fc_out(out)


seed_everything(0)
buggy = SelfAttention(D, H).to(device).eval()
y_buggy = buggy(x, x, x, None)
assert y_buggy.shape == (B, S, D)  # the shape gives nothing away
print("seed's SelfAttention:", tuple(x.shape), "->", tuple(y_buggy.shape))

# %% [markdown]
# :::{dropdown} Bug 1 — look at the einsum
# **The einsum attends across heads, not tokens (§1.7).** `values`, `keys` and `query`
# are `[N, L, H, Dh]` when the einsum reads them as `bhqd`: `h` is the sequence, `q` and
# `k` are heads. Probe: change token 0; nothing else changes. And with a different key
# length (as in the decoder's encoder–decoder attention), it fails. The cell below
# (its code is folded too) runs both probes.
# :::

# %% tags=["hide-input"]
y_changed = buggy(x_changed, x_changed, x_changed, None)
assert torch.allclose(y_buggy[:, 1:], y_changed[:, 1:], atol=1e-6)  # tokens never mix
print(
    "largest change at positions 1..:",
    f"{(y_buggy - y_changed)[:, 1:].abs().max().item():.1e}",
)

encoder_out = torch.randn(
    B, 7, D, device=device
)  # keys/values of length 7, queries of length 5
raised = False
try:
    buggy(encoder_out, encoder_out, x, None)
except RuntimeError as err:
    raised = True
    print("cross-attention, RuntimeError:", err)
assert raised

# %% [markdown]
# :::{dropdown} Bug 2 — look at the three projections
# **One `Linear(head_dim, head_dim)` shared by all heads (§1.8).** Each head sees only its
# own slice of the embedding, through the same matrix as every other head. The course's
# exercise check recognises this by the parameter shapes and says so in the cell below.
# :::

# %% tags=["hide-input"]
assert sum(p.numel() for p in SelfAttention(512, 8).parameters()) == 274_944
assert sum(p.numel() for p in MultiHeadAttention(512, 8).parameters()) == 1_050_624
try:
    check_multi_head_attention(SelfAttention)
except CheckFailure as failure:
    print(failure)
else:
    raise AssertionError("the check should have rejected the seed's SelfAttention")

# %% [markdown]
# :::{dropdown} Bug 3 — look at the scaling
# **Divided by `embed_size ** (1/2)` instead of `head_dim ** 0.5` (§1.9):**
# {seed}`004:energy = energy / (self.embed_size ** (1/2))`. The scores
# come out $\sqrt{H} = \sqrt{8} \approx 2.8$ times too small, as §1.9 says, and the
# attention starts flatter; chapter 2 §2.5 measures by how much.
# :::

# %% [markdown]
# :::{dropdown} The corrected version
# Project the whole input first, then split; label the einsum axes as they really are;
# divide by $\sqrt{D_h}$. We also put the arguments in PyTorch's order
# `(query, key, value)`. The `mask` argument is left to chapter 3, which adds it together
# with the fix of the fourth bug. The cell below (folded) defines the class and checks it
# against the reference and against the exercise's checks.
# :::


# %% tags=["hide-input"]
class FixedSelfAttention(nn.Module):
    """The seed's SelfAttention with bugs 1 to 3 fixed (no mask yet: chapter 3).

    forward(query [N, Lq, D], keys [N, Lk, D], values [N, Lk, D]) -> [N, Lq, D].
    """

    def __init__(self, embed_size, heads):
        super().__init__()
        assert embed_size % heads == 0, "embed_size must be divisible by heads"
        self.embed_size, self.heads, self.head_dim = (
            embed_size,
            heads,
            embed_size // heads,
        )
        # Fix 2: each projection sees the whole embedding; Linear(D, D) = H per-head
        # D -> Dh maps.
        self.queries = nn.Linear(embed_size, embed_size)
        self.keys = nn.Linear(embed_size, embed_size)
        self.values = nn.Linear(embed_size, embed_size)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, query, keys, values, mask=None):
        if mask is not None:
            raise NotImplementedError("masks: chapter 3 (§3.5 fixes the mask line)")
        N, query_len, key_len = query.shape[0], query.shape[1], keys.shape[1]
        # Project first, then split: [N, L, D] -> [N, L, H, Dh].
        q = self.queries(query).reshape(N, query_len, self.heads, self.head_dim)
        k = self.keys(keys).reshape(N, key_len, self.heads, self.head_dim)
        v = self.values(values).reshape(N, key_len, self.heads, self.head_dim)
        # Fix 1: the letters name the axes of [N, L, H, Dh] as they are; scores are
        # [N, H, Lq, Lk].
        energy = torch.einsum("nqhd,nkhd->nhqk", q, k)
        energy = energy / math.sqrt(
            self.head_dim
        )  # Fix 3: the size of the vectors being dotted
        attention = energy.softmax(dim=-1)  # over the keys
        out = torch.einsum("nhqk,nkhd->nqhd", attention, v).reshape(
            N, query_len, self.embed_size
        )
        return self.fc_out(out)


seed_everything(0)
fixed = FixedSelfAttention(D, H).to(device).eval()
reference = MultiHeadAttention(D, H).to(device).eval()
for mine, ref in (
    (fixed.queries, reference.q_proj),
    (fixed.keys, reference.k_proj),
    (fixed.values, reference.v_proj),
    (fixed.fc_out, reference.out_proj),
):
    ref.weight.copy_(mine.weight)
    ref.bias.copy_(mine.bias)

y_fixed = fixed(x, x, x)
assert torch.allclose(y_fixed, reference(x), atol=1e-5)  # self-attention
assert torch.allclose(
    fixed(x, encoder_out, encoder_out),
    reference(x, encoder_out, encoder_out),
    atol=1e-5,
)  # cross-attention
y_fixed_changed = fixed(x_changed, x_changed, x_changed)
assert not torch.allclose(
    y_fixed_changed[:, 1:], y_fixed[:, 1:], atol=1e-3
)  # tokens mix
print(
    "FixedSelfAttention == tformer_ref MultiHeadAttention (self- and cross-attention)"
)

# The exercise's checks accept it, including the behaviour probes
# (tokens mix, batch entries stay apart, eval mode is deterministic).
check_multi_head_attention(FixedSelfAttention)
check_multi_head_attention_behaviour(FixedSelfAttention)

# %% [markdown]
# ## 1.13 Recap
#
# - Shapes: `[B, S, D]` → `view` → `[B, S, H, Dh]` → `transpose(1, 2)` → `[B, H, S, Dh]`
#   → scores `[B, H, Sq, Sk]` → `[B, H, Sq, Dh]` → `transpose(1, 2)` → `reshape` → `[B, S, D]`.
#   Write the shape next to every line.
# - `view` and `reshape` read a tensor in its logical order, last axis fastest; on a
#   contiguous tensor that is memory order. `view` refuses when it cannot, `reshape`
#   copies. To split, view to `[B, S, H, Dh]` first, then transpose. Viewing straight
#   to `[B, H, S, Dh]` gives the right shape and wrong numbers.
# - After `transpose` a tensor is not contiguous: use `.contiguous().view(...)` or
#   `.reshape(...)` to merge. Merging must undo splitting exactly; skipping the transpose
#   glues different tokens together.
# - `einsum` letters are names for axes *in the order the tensor has them*. On
#   `[B, H, S, Dh]` use `'bhqd,bhkd->bhqk'`; on `[B, S, H, Dh]` use `'bqhd,bkhd->bhqk'`.
#   The wrong labels can attend across heads: probe that changing one token changes
#   the others' outputs. Softmax over the last (key) axis.
# - `Linear(D, D)` is H per-head `D → Dh` projections side by side. One shared
#   `Linear(Dh, Dh)` is a different model (274,944 vs 1,050,624 parameters at 512/8).
#   `nn.MultiheadAttention` packs q, k, v into `in_proj_weight` `[3D, D]`; use `batch_first=True`.
# - Divide the scores by $\sqrt{D_h}$, the size of a head, not $\sqrt{D}$.
# - Cost is $O(n^2 d)$ for any number of heads; heads are for quality. What grows with
#   $H$ is the score tensor, $B \cdot H \cdot n^2$, and the softmax's work on it
#   ({doc}`timing` measures what that costs). BERT uses 12 or 16 heads, the paper 8;
#   the evidence for a number is an ablation.
# - The seed's `SelfAttention` has a fourth bug, in its mask line: chapter 3 §3.5.
#
# **Now practise:** open [the chapter 1 exercise](exercise.ipynb) in this folder. You will
# write `split_heads`, `merge_heads` and a `MultiHeadAttention`; its check cells tell you
# which of this chapter's pitfalls you hit and send you back to the right section.

# %% [markdown]
# ## Check your understanding
#
# **1.** A colleague splits into heads with `x.view(B, H, S, Dh)`. The output has the right
# shape. What is wrong, and what shows it? And why does `out.transpose(1, 2).view(B, S, D)` raise
# an error when merging back?
#
# :::{dropdown} Answer
# `view`, like `reshape`, reads the tensor in its logical order, last axis fastest, and on a
# contiguous tensor that is the order of memory. A contiguous `[B, S, D]` tensor stores each
# token's D features one after the other, so viewing it straight as `[B, H, S, Dh]` gives head 0
# the first S·Dh numbers: the features of the first few tokens, cut and re-glued, instead of the
# first Dh features of every token. The right split is `x.view(B, S, H, Dh).transpose(1, 2)`. It
# shows on a small `arange` input, and in the test that head h equals `x[..., h*Dh:(h+1)*Dh]` for
# every token. After `transpose` the tensor is not contiguous, so `view` cannot glue its last two
# axes: merge with `.contiguous().view(B, S, D)` or `.reshape(B, S, D)`, and check that merging a
# split gives `x` back. Skipping the transpose glues rows of different tokens together. Read §1.5
# 'Splitting into heads' and §1.6 'Merging heads back'.
# :::
#
# **2.** The seed's `SelfAttention` computes its scores with
# {seed}`004:energy = torch.einsum("bhqd, bhkd -> bhqk", [query, keys])`, where `query` and
# `keys` have the shape `[B, S, H, Dh]`. What does it compute, and which probe shows it?
#
# :::{dropdown} Answer
# `einsum` takes the axes in the order the tensor has them, whatever the letters were meant to
# say: here `h` is the sequence axis and `q`, `k` are the heads. The "scores" are `[B, S, H, H]`,
# each token's heads attending to its own other heads, and no token ever looks at another; the
# layer still returns `[B, S, D]`. The probe: change token 0 and look at the outputs at the other
# positions. With the seed's einsum they do not move at all; with real attention every one of
# them does. (With Sq ≠ Sk, as in cross-attention, the seed's einsum fails outright.) On `[B, S,
# H, Dh]` the right labels are `'bqhd,bkhd->bhqk'`. Read §1.7 'einsum and matmul'.
# :::
#
# **3.** In an 8-head layer with D = 512, what does each head project a token to, and by what are
# its scores divided? What does the seed's single shared `Linear(Dh, Dh)` change?
#
# :::{dropdown} Answer
# Each head has its own projections of the whole 512-feature token to Dh = 64 features; one
# `Linear(D, D)` followed by a split is exactly H such projections side by side (rows h·Dh …
# (h+1)·Dh − 1 of its weight are head h's). The scores are divided by √Dh = 8, the size of the
# vectors being dotted: dividing by √D makes them √H times too small and the attention too flat.
# The seed cuts `x` into heads first and applies one shared `Linear(Dh, Dh)` to every slice: a
# block-diagonal D × D matrix with H identical blocks, where each head sees only its own 64
# features of the token. That is a different and much smaller model, with 274,944 parameters
# against 1,050,624. Read §1.8 'Per-head projections' and §1.9 'Scaling by the head size'.
# :::
#
# **4.** Seed 000 says that splitting d into h heads makes attention cost O(n² d / h), and so,
# run in parallel, more heads are faster. What is the cost, and what does grow with the number
# of heads?
#
# :::{dropdown} Answer
# O(n² d) for any h. Each head costs 4 n² Dh FLOPs for QKᵀ and AV, and H heads of Dh = D / H
# features add up to 4 n² D per sequence, as in Table 1 of {cite:t}`vaswani2017attention`; the
# four projections do not depend on H either. `FlopCounterMode` counted the same attention FLOPs
# for every number of heads. Heads are there for quality, not speed. What grows with H is the
# score tensor `[B, H, n, n]` that the plain implementation stores, and the number of matrix
# products, each smaller and often less efficient, and the softmax's work on H times more
# scores. Read §1.10 'Cost: O(n²·d) whatever the number of
# heads' and the optional page {doc}`timing`.
# :::
