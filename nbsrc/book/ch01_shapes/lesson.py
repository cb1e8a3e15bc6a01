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
# # Chapter 1 — Attention, then heads

# %% [markdown]
# ```{figure} ../figures/model_ch01.svg
# :alt: Diagram of the encoder–decoder Transformer: on the left the encoder stack (embedding, positional encoding, then N blocks of self-attention and feed-forward, each followed by add & norm), on the right the decoder stack (masked self-attention, cross-attention over the encoder output, feed-forward) topped by a linear layer and softmax, with its three multi-head attention sublayers highlighted and everything else grey.
# :name: fig-model-ch01
# :width: 100%
#
# The whole model. This chapter builds the highlighted part, multi-head attention: first one head, then many side by side.
# ```

# %% [markdown]
# Attention lets every token of a sequence look at the other tokens and take in what
# it finds useful. This chapter first shows what attention computes, for one head, on
# numbers small enough to follow by hand. Then it builds multi-head attention, which
# is the same computation for several heads side by side, and that is where the
# **shapes and axes** come in. Almost every bug in a first implementation is a bug of
# shapes: a `view` that cuts memory in the wrong places, an `einsum` whose letters name
# the wrong axes, a projection that gives each head less than it should see. Such bugs
# often do not crash where you first try them: the output has the right shape, and
# nothing says that, for instance, no token ever looks at another one (§1.7). Some fail
# only later, on an input of another shape: the same `einsum` bug raises an error as
# soon as queries and keys have different lengths, as in cross-attention (§1.7).
#
# In this chapter you will:
#
# - compute attention for one query by hand: scores, softmax weights, a weighted
#   average of values (§1.1);
# - average the past with a lower-triangular matrix, the idea behind the causal
#   attention of chapter 3 (§1.2);
# - write one head of scaled dot-product attention, assert every shape, and compare it
#   with PyTorch's (§1.3);
# - follow one batch through multi-head attention and write down every shape (§1.4);
# - split a tensor into heads and merge it back, and see why `view`, `transpose`,
#   `reshape` and `.contiguous()` appear where they do (§1.5, §1.6);
# - compute attention scores with `matmul` and with `einsum`, and break `einsum` the
#   way one of the seed write-ups does (§1.7);
# - give each head its own projections and scale its scores by its own size, then run
#   one seed's multi-head attention, verbatim, through the exercise's check (§1.8, §1.9);
# - count FLOPs, and re-measure how heads affect speed and memory (§1.10, §1.11);
# - explore one head's attention map, then hunt three bugs in the seed's code (§1.12, §1.13).
#
# **The seed claims this chapter checks.** The course grew out of two beginners' write-ups,
# one of them about an 8-head, 2-layer Transformer. This chapter checks the following claims
# of theirs:
#
# | claim | verdict | section |
# |---|---|---|
# | softmax turns the similarities into a probability distribution (paraphrased) | right: positive weights that sum to 1 | 1.1 |
# | $\operatorname{Attention}(Q, K, V) = \operatorname{softmax}(QK^\top / \sqrt{d_k})\,V$ | right: written out for one head and compared with PyTorch's | 1.3 |
# | split `[B, S, D]` → `[B, S, H, Dh]` → `[B, H, S, Dh]`; call `.contiguous()` after `transpose` | right | 1.5, 1.6 |
# | {seedtr}`000:einsum is concise but it is easy to get the order of the dimensions wrong` | right — and the other seed's `SelfAttention` does exactly that | 1.7, 1.13 |
# | one `Linear(head_dim, head_dim)` shared by all heads | a different, much smaller model | 1.8 |
# | with $d_k = 512$ the dot products have standard deviation $\sqrt{512} \approx 22.6$ | right, but a head's $d_k$ is $D_h$, not $D$ | 1.9 |
# | seed 000's `MultiHeadAttention` class | right: run verbatim (a small adapter adds cross-attention), it passes the exercise's check | 1.9 |
# | multi-head attention costs $O(n^2 d / h)$, so more heads are faster | wrong: $O(n^2 d)$ for any $h$ | 1.10 |
# | 8 heads is an empirical value that works well in BERT and similar models (paraphrased) | BERT uses 12 and 16; the evidence for a head count is an ablation | 1.10 |
# | a table of memory and training speed for 1, 8 and 16 heads | no set-up given; re-measured here | 1.11 |
#
# Everything runs on the CPU in under a minute, and unchanged on a GPU.

# %%
# %matplotlib inline
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from myst_nb import glue
from torch.utils.flop_counter import FlopCounterMode

from tformer_ref.attention import MultiHeadAttention
from tformer_grading.checks.ch01 import (
    check_multi_head_attention,
    check_multi_head_attention_behaviour,
)
from tformer_grading.checks.diagnosis import CheckFailure
from tformer_ref.device import get_device, seed_everything
from tformer_ref.heads import merge_heads, split_heads
from tformer_ref.plotting import attention_heatmaps, heads_cost_figure
from tformer_ref.widgets import head_explorer

device = get_device()  # CUDA when available; set TFORMER_DEVICE=cpu to override
seed_everything(0)
# This lesson only inspects forward values; §1.11 switches gradients back on to time
# backward passes.
torch.set_grad_enabled(False)
print(f"device: {device}, torch {torch.__version__}")

# %% [markdown]
# ## 1.1 Attention as a soft lookup
#
# A Python `dict` is a *hard* lookup: you give it a key, and you get back the value
# stored under exactly that key. Attention is a *soft* lookup. A **query** is compared
# with every **key**; each comparison becomes a weight; and what comes back is a
# weighted average of all the **values**, with most of the weight on the values whose
# keys match the query best. Queries, keys and values are vectors of numbers.
#
# Three steps, for one query $q$ and keys $k_1 \dots k_n$ with values $v_1 \dots v_n$:
#
# 1. **scores**: how well each key matches the query, the dot product $s_j = q \cdot k_j$;
# 2. **weights**: softmax turns the scores into positive weights that sum to 1,
#    $w_j = e^{s_j} / \sum_i e^{s_i}$ (a larger score, a larger weight);
# 3. **output**: the weighted average of the values, $\sum_j w_j v_j$.
#
# Here are one query, four keys and four values, each a vector of two numbers, picked
# so that you can follow them by hand. The dot products are $2 \cdot 1 + 1 \cdot 0 = 2$,
# then $1$, $-2$ and $2 \cdot 1 + 1 \cdot 1 = 3$: the last key matches best.

# %%
query = torch.tensor([2.0, 1.0])  # [2]
keys = torch.tensor(
    [
        [1.0, 0.0],  # [4, 2]: one row per key
        [0.0, 1.0],
        [-1.0, 0.0],
        [1.0, 1.0],
    ]
)
values = torch.tensor(
    [
        [10.0, 0.0],  # [4, 2]: the value under each key
        [0.0, 10.0],
        [-10.0, 0.0],
        [5.0, 5.0],
    ]
)

scores_1q = keys @ query  # [4]: one score per key
assert torch.equal(scores_1q, torch.tensor([2.0, 1.0, -2.0, 3.0]))

weights_1q = scores_1q.exp() / scores_1q.exp().sum()  # [4]: softmax, written out
assert torch.allclose(weights_1q, scores_1q.softmax(dim=0))
assert (weights_1q > 0).all() and torch.isclose(weights_1q.sum(), torch.tensor(1.0))
assert torch.equal(weights_1q.argsort(), scores_1q.argsort())  # the scores' order

output_1q = weights_1q @ values  # [2]: weighted average of values
by_hand = sum(w * v for w, v in zip(weights_1q, values))
assert torch.allclose(output_1q, by_hand)

print("scores :", scores_1q.tolist())
print(
    "weights:",
    [round(w, 3) for w in weights_1q.tolist()],
    f"(sum {weights_1q.sum().item():.3f})",
)
print("output :", [round(o, 3) for o in output_1q.tolist()])
print("hard lookup of the best key:", values[scores_1q.argmax()].tolist())

# %% [markdown]
# The best-matching key gets the largest weight, but not all of it: the output is
# pulled towards that key's value `[5, 5]` and still takes in a little of every other
# value. Make the scores larger and the softmax gets sharper; multiplied by 10, it is
# almost a hard lookup. (Chapter 2 shows why so sharp a softmax is bad for training:
# most rows get almost no gradient, while a few get far larger ones.)

# %%
sharp = (10 * scores_1q).softmax(dim=0)  # [4]
print("weights with the scores × 10:", [f"{w:.1e}" for w in sharp.tolist()])
assert torch.allclose(sharp @ values, values[3], atol=1e-3)

# %% [markdown]
# In self-attention, every token of a sequence is at once a query, a key and a value:
# each token looks up the others. Where the three vectors come from is §1.3.

# %% [markdown]
# ## 1.2 Averaging the past
#
# A language model predicts each token from the tokens before it, so token $t$ may look
# at tokens $0 \dots t$ and never at the future. The simplest way to let a token take in
# its past is to average it: output $t$ = the mean of tokens $0 \dots t$. Andrej
# Karpathy's lecture "Let's build GPT: from scratch, in code, spelled out"
# {cite}`karpathy2023gpt` builds attention from exactly this trick: the running mean
# is a matrix product.
#
# Take four tokens of two features each. The loop is the definition; a lower-triangular
# matrix of ones with each row divided by its sum computes the same thing in one product.

# %%
T = 4
tokens_t = torch.tensor(
    [
        [1.0, 2.0],  # [T, 2]: token t in row t
        [3.0, 0.0],
        [5.0, 4.0],
        [-1.0, 6.0],
    ]
)
running_mean = torch.stack([tokens_t[: t + 1].mean(dim=0) for t in range(T)])  # [T, 2]

tril = torch.tril(torch.ones(T, T))  # [T, T]: ones in columns 0..t
average = tril / tril.sum(dim=1, keepdim=True)  # each row sums to 1
assert torch.allclose(average @ tokens_t, running_mean)
print("averaging weights (row t: query t, column s: token s):\n", average)
print("average @ tokens == running mean:\n", average @ tokens_t)

# %% [markdown]
# Row $t$ of that matrix is a set of weights, like §1.1's: positive, summing to 1, equal
# for every past token and 0 for the future. Softmax produces the same weights from
# scores that are all equal, once every score above the diagonal (a future token) is
# replaced by $-\infty$, because $e^{-\infty} = 0$:

# %%
flat_scores = torch.zeros(T, T)  # [T, T]: no token preferred
flat_scores = flat_scores.masked_fill(tril == 0, float("-inf"))  # ... no looking ahead
softmax_weights = flat_scores.softmax(dim=-1)
assert torch.allclose(softmax_weights, average)
print("scores:\n", flat_scores)

# %% [markdown]
# Attention makes one change: the zeros become real scores $q_t \cdot k_s$, computed from
# the tokens, so each token chooses *which* past tokens to average and how much. The
# $-\infty$ above the diagonal stays: that is **causal** self-attention, the decoder's
# (chapter 3 §3.2). The diagonal is never masked, so every row keeps at least one finite
# score; chapter 3 §3.5 shows what goes wrong when a whole row is $-\infty$.

# %% [markdown]
# ## 1.3 One head of attention in code
#
# A real layer gets its queries, keys and values from the tokens themselves. Each token
# (a vector of `D` features) goes through three learned linear maps: its **query** (what
# it looks for), its **key** (what it can be found by) and its **value** (what it hands
# over when found), each of `Dh` features. Then it is §1.1 for every query at once:
#
# $$\operatorname{Attention}(Q, K, V) = \operatorname{softmax}\!\left(\frac{QK^\top}{\sqrt{D_h}}\right) V$$
#
# This is the formula of the paper {cite}`vaswani2017attention`, whose $d_k$ is our $D_h$.
# The division by $\sqrt{D_h}$ keeps the scores at the same scale whatever the size of the
# vectors (§1.9 gives the one fact this chapter needs; chapter 2, the whole story).
#
# A batch of `B = 2` sequences of `S = 5` tokens, `D = 12` features each, and one head of
# `Dh = 4` features. Every step's shape is asserted:

# %%
B, S, D, Dh = 2, 5, 12, 4
seed_everything(0)
x_one = torch.randn(B, S, D, device=device)  # [B, S, D]: the tokens
to_query, to_key, to_value = (nn.Linear(D, Dh, bias=False).to(device) for _ in range(3))

q1, k1, v1 = to_query(x_one), to_key(x_one), to_value(x_one)
assert q1.shape == k1.shape == v1.shape == (B, S, Dh)

scores1 = q1 @ k1.transpose(-2, -1) / math.sqrt(Dh)  # [B, S, S]: query i · key j
assert scores1.shape == (B, S, S)

weights1 = scores1.softmax(dim=-1)  # over the keys: row i for query i
assert weights1.shape == (B, S, S)
assert torch.allclose(weights1.sum(dim=-1), torch.ones(B, S, device=device))

out1 = weights1 @ v1  # [B, S, Dh]: an average per query
assert out1.shape == (B, S, Dh)
# Row 2 of sequence 0 is §1.1's weighted average, for query 2:
row2 = (weights1[0, 2, :, None] * v1[0]).sum(dim=0)  # [Dh]
assert torch.allclose(out1[0, 2], row2, atol=1e-6)

# PyTorch's fused function computes the same thing.
torch_out1 = F.scaled_dot_product_attention(q1, k1, v1)
assert torch.allclose(out1, torch_out1, atol=1e-5)
print(
    "x",
    tuple(x_one.shape),
    "-> q, k, v",
    tuple(q1.shape),
    "-> scores",
    tuple(scores1.shape),
    "-> out",
    tuple(out1.shape),
)
print(
    "largest difference from F.scaled_dot_product_attention:",
    f"{(out1 - torch_out1).abs().max().item():.1e}",
)

# %% [markdown]
# And §1.2's $-\infty$ above the diagonal turns it into causal attention, which PyTorch's
# function computes when asked with `is_causal=True` (chapter 3, §3.4, shows its
# catches):

# %%
# [S, S]: True above the diagonal, where the key is in the query's future
future = torch.ones(S, S, dtype=torch.bool, device=device).triu(diagonal=1)
causal_weights1 = scores1.masked_fill(future, float("-inf")).softmax(dim=-1)  # [B,S,S]
causal_out1 = causal_weights1 @ v1  # [B, S, Dh]
torch_causal = F.scaled_dot_product_attention(q1, k1, v1, is_causal=True)
assert torch.allclose(causal_out1, torch_causal, atol=1e-5)
assert torch.allclose(causal_out1[:, 0], v1[:, 0], atol=1e-6)  # token 0: itself only

# %% [markdown]
# That is one head. **Multi-head attention** runs `H` such heads side by side, each with
# its own projections of the whole token to `Dh = D / H` features, so that each head can
# look for something different, and glues their `H` outputs back into `D` features. A
# Python loop over the heads would work; the rest of the chapter does it for all heads at
# once with a 4-dimensional tensor `[B, H, S, Dh]`, and that is where the shape bugs live.

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
# `SelfAttention` (§1.13) applies the same subscripts,
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
#
# The vectors being dotted belong to **one head**: their length is $D_h$, not $D$.
# Seed 004 is right that $\sqrt{512} \approx 22.6$, but in an 8-head model of width 512,
# such as seed 000's, a head's $d_k$ is $64$; dividing by $\sqrt{D} = \sqrt{512}$ makes
# the scores $\sqrt{H} \approx 2.8$ times too small, and the attention flatter
# (chapter 2 §2.5 measures how much).

# %%
n_samples = 20_000
print(" Dh   var(q·k)  var(q·k/√Dh)  var(q·k/√D) with D = 8·Dh")
for dh in (16, 64, 256):
    qs = torch.randn(
        n_samples, dh, device=device
    )  # [n_samples, Dh], unit-variance entries
    ks = torch.randn(n_samples, dh, device=device)
    dots = (qs * ks).sum(dim=-1)  # [n_samples]
    var = dots.var().item()
    var_head = (dots / math.sqrt(dh)).var().item()
    var_model = (dots / math.sqrt(8 * dh)).var().item()
    print(f"{dh:4d} {var:9.1f} {var_head:12.3f} {var_model:12.3f}")
    assert abs(var / dh - 1) < 0.10  # var(q·k) = Dh, within 10 %
    assert abs(var_head - 1) < 0.10  # scaled by √Dh: variance 1
    assert abs(var_model * 8 - 1) < 0.10  # scaled by √D: variance 1/H

# %% [markdown]
# **Seed 000's own module gets all of this right.** Its `MultiHeadAttention` projects
# the whole input with `Linear(d_model, d_model)`, splits with `view` then
# `transpose(1, 2)`, divides by $\sqrt{D_h}$ (`self.d_head`) and merges with
# `transpose(1, 2).contiguous().view(...)`. The cell below holds its class token for
# token (only its line breaks and spacing follow the book's 88 columns),
# Chinese comments included, and runs it through the check of the chapter 1 exercise.
# The seed's `forward(x, mask=None)` is self-attention only, while the check calls
# `forward(query, key, value)` and also tries cross-attention; a small adapter, outside
# the seed's lines, hands each projection its own input (a forward pre-hook replaces
# the argument a module receives) and calls the seed's `forward` unchanged.


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

# %% [markdown]
# ## 1.11 Heads, memory and speed, re-measured
#
# Seed 000 reports a table for `B = 32, S = 64, d = 512`, without saying on what hardware,
# for which model, in which precision or how memory was measured (its columns: heads,
# memory in MB, training speed in iterations per second):
#
# ```{seed-quote} 000
# :code: text
# 头数	显存占用(MB)	训练速度(iter/s)
# 1	1200	85
# 8	1800	78
# 16	2500	65
# ```
#
# We cannot check those numbers, so we measure what we can, on the machine running
# this notebook: one `tformer_ref` `MultiHeadAttention` layer (plain matmul–softmax–matmul
# path, float32), forward + backward on `[32, 64, 512]`. Each time is the fastest of 7
# runs after a warm-up, the head counts taking turns: other programs on the machine can
# only slow a run down, so the fastest run is the least disturbed one. On a CPU the cell
# times with **one thread**: the machines that build this book are shared, and one
# thread is far less disturbed by other programs than two that keep waiting for each
# other. Next to the whole layer we time three of its parts on their own, for every `H`
# (each forward + backward): the four projections, the two batched products $QK^\top$
# and $AV$, and the scaling and softmax of the `[B, H, S, S]` scores. What is left of the
# layer's time is the rest: the copies that split and merge the heads, and autograd's
# bookkeeping. For memory we compute the part that grows with `H`, the score
# tensor `[B, H, S, S]` of float32: $B \cdot H \cdot S^2 \cdot 4$ bytes (a MiB is $2^{20}$
# bytes). On a GPU the notebook also reports the peak memory PyTorch allocated.


# %%
def synchronize():
    """Wait for queued GPU work, so that the timer measures the work and not only its
    launch."""
    if device.type == "cuda":
        torch.cuda.synchronize()


def milliseconds(step):
    """Milliseconds for one call of step(), GPU work included."""
    synchronize()
    start = time.perf_counter()
    step()
    synchronize()
    return 1000 * (time.perf_counter() - start)


def layer_step(module, x_in):
    """One forward + backward pass of the whole layer on x_in [B, S, D]."""
    module.zero_grad(set_to_none=True)
    module(x_in).sum().backward()


def projections_step(module, x_in):
    """Forward + backward of the layer's four D×D projections alone (no attention)."""
    outs = [
        proj(x_in)
        for proj in (module.q_proj, module.k_proj, module.v_proj, module.out_proj)
    ]
    torch.autograd.grad(sum(o.sum() for o in outs), list(module.parameters()))


def products_step(q, k, v, w, upstream):
    """Forward + backward of the two batched products alone: q k^T and w v, where
    q, k, v are [B, H, S, Dh] and w, upstream are [B, H, S, S] and [B, H, S, Dh]."""
    scores_, out_ = q @ k.transpose(-2, -1), w @ v
    torch.autograd.grad((scores_, out_), (q, k, v, w), (w, upstream))


def softmax_step(scores_in, upstream):
    """Forward + backward of the scaling and softmax alone, on scores_in
    [B, H, S, S]."""
    weights_ = (scores_in / math.sqrt(D8 // scores_in.size(1))).softmax(dim=-1)
    torch.autograd.grad(weights_, scores_in, upstream)


def ms_text(ms):
    """Three significant digits, at least one decimal: 129.6, 14.1, 0.392."""
    return f"{ms:.{max(1, 2 - math.floor(math.log10(ms)))}f}"


B8, S8, D8 = 32, 64, 512
head_counts = (1, 8, 16)
parts = ("layer", "projections", "products", "softmax")
seed_everything(0)
x8 = torch.randn(B8, S8, D8, device=device)  # [B, S, D]
modules = {h: MultiHeadAttention(D8, h).to(device).train() for h in head_counts}
steps = {}
for h in head_counts:
    dh = D8 // h
    q8, k8, v8 = (
        torch.randn(B8, h, S8, dh, device=device, requires_grad=True) for _ in range(3)
    )  # [B, H, S, Dh]
    w8 = torch.randn(B8, h, S8, S8, device=device, requires_grad=True)  # [B, H, S, S]
    up8 = torch.randn(B8, h, S8, dh, device=device)  # [B, H, S, Dh]
    steps[h] = {
        "layer": lambda h=h: layer_step(modules[h], x8),
        "projections": lambda h=h: projections_step(modules[h], x8),
        "products": lambda q=q8, k=k8, v=v8, w=w8, u=up8: products_step(q, k, v, w, u),
        "softmax": lambda w=w8: softmax_step(w, w.detach()),
    }
times = {(h, part): [] for h in head_counts for part in parts}
threads = torch.get_num_threads()
torch.set_num_threads(1)  # CPU: one thread, less disturbed
with torch.enable_grad():
    for h in head_counts:  # warm-up: first calls pay for allocations
        for part in parts:
            steps[h][part]()
    for _ in range(7):  # round robin, so that a slow moment hits every H
        for part in parts:  # a part's head counts run back to back
            for h in head_counts:
                times[h, part].append(milliseconds(steps[h][part]))
torch.set_num_threads(threads)
best = {key: min(ms) for key, ms in times.items()}  # the least disturbed run
for h in head_counts:  # the three parts together
    best[h, "parts"] = sum(best[h, part] for part in parts[1:])
ms_per_iter = [best[h, "layer"] for h in head_counts]

score_mib, peak_mib = [], []
for h in head_counts:
    _, w = modules[h](
        x8, return_weights=True
    )  # [B, H, S, S]: the score-sized tensor the plain path builds
    score_bytes = B8 * h * S8 * S8 * 4
    assert w.shape == (B8, h, S8, S8)
    assert w.numel() * w.element_size() == score_bytes
    score_mib.append(score_bytes / 2**20)
    if device.type == "cuda":  # a GPU can also report what was really allocated
        torch.cuda.reset_peak_memory_stats()
        with torch.enable_grad():
            modules[h](x8).sum().backward()
        peak_mib.append(torch.cuda.max_memory_allocated() / 2**20)

assert score_mib == [0.5, 4.0, 8.0]  # grows linearly with H: B·H·S²·4 bytes
activation_mib = (
    B8 * S8 * D8 * 4 / 2**20
)  # one [B, S, D] float32 tensor: x, q, k, v, ...
weight_mib = sum(p.numel() * 4 for p in modules[1].parameters()) / 2**20
print(
    f"one [B, S, D] activation: {activation_mib:.1f} MiB, the layer's weights: "
    f"{weight_mib:.1f} MiB (neither depends on H)"
)
where = "one CPU thread" if device.type == "cpu" else device.type
print(f"fastest of 7 runs on {where}, forward + backward, in ms:")
print(
    " heads   layer    it/s   projections   QKᵀ and AV   softmax   the three   "
    "scores (MiB)" + ("   peak CUDA (MiB)" if peak_mib else "")
)
for i, h in enumerate(head_counts):
    extra = f"   {peak_mib[i]:15.1f}" if peak_mib else ""
    print(
        f"{h:6d} {best[h, 'layer']:7.2f} {1000 / best[h, 'layer']:7.1f} "
        f"{best[h, 'projections']:13.2f} {best[h, 'products']:12.2f} "
        f"{best[h, 'softmax']:9.2f} {best[h, 'parts']:11.2f} "
        f"{score_mib[i]:13.1f}{extra}"
    )

# %% [markdown]
# The numbers above, read in words. This cell computes the words from the numbers, so
# that the text below says what this run measured, on whatever machine built the page.


# %%
def change(before, after):
    """'rises from 14.1 to 18.2 ms (×1.29)': the direction is computed, not assumed."""
    ratio = after / before
    if abs(ratio - 1) < 0.05:
        return f"stays at about {ms_text(before)} ms (×{ratio:.2f})"
    word = "rises" if after > before else "falls"
    return f"{word} from {ms_text(before)} to {ms_text(after)} ms (×{ratio:.2f})"


layer_ms = [best[h, "layer"] for h in head_counts]


# The machine's own variation: the projections do identical work for every H, so the
# spread of their times is the band within which a change of the layer's time is noise.
projection_ms = [best[h, "projections"] for h in head_counts]
noise_band = max(0.01, max(projection_ms) / min(projection_ms) - 1)


def step_direction(before, after):
    """+1 or -1 for a change larger than the noise band, 0 within it."""
    ratio = after / before
    return 0 if abs(ratio - 1) <= noise_band else (1 if ratio > 1 else -1)


layer_steps = [
    step_direction(a, b) for a, b in zip(layer_ms, layer_ms[1:])
]  # 1->8, 8->16
layer_overall = step_direction(layer_ms[0], layer_ms[-1])  # 1->16
if layer_steps == [1, 1]:
    layer_trend = "rises with every step in the number of heads"
elif layer_steps == [-1, -1]:
    layer_trend = "falls with every step in the number of heads"
elif layer_overall == 0 and layer_steps == [0, 0]:
    layer_trend = (
        "changes no more than the projections' identical work does from one "
        "head count to the next"
    )
elif layer_overall == 1 and -1 not in layer_steps:
    layer_trend = "is higher with 16 heads than with 1, but not clearly at every step"
elif layer_overall == -1 and 1 not in layer_steps:
    layer_trend = "is lower with 16 heads than with 1, but not clearly at every step"
else:
    layer_trend = "does not move steadily with the number of heads"
its = {h: 1000 / best[h, "layer"] for h in head_counts}
its_drop = 1 - its[16] / its[1]  # relative loss of speed, 1 -> 16 heads
seed_its = {1: 85, 8: 78, 16: 65}  # the seed's table
seed_drop = 1 - seed_its[16] / seed_its[1]
if its_drop <= 0:
    versus_seed = "no drop at all, unlike the seed's table"
elif abs(its_drop - seed_drop) < 0.05:
    versus_seed = "about the same relative drop as the seed's"
elif its_drop > seed_drop:
    versus_seed = "a larger relative drop than the seed's"
else:
    versus_seed = "a smaller relative drop than the seed's"
speed_change = f"{its_drop:.0%} fewer" if its_drop >= 0 else f"{-its_drop:.0%} more"
layer_delta = best[16, "layer"] - best[1, "layer"]  # ms gained (or lost) by 16 heads

rest_delta = layer_delta - (
    best[16, "parts"] - best[1, "parts"]
)  # not timed on its own
print(
    f"layer: {layer_trend}, {change(best[1, 'layer'], best[16, 'layer'])} from 1 to 16 "
    f"heads; it/s: {speed_change} (seed: {seed_drop:.0%} fewer), {versus_seed}; "
    f"noise band from the projections: ±{noise_band:.1%}"
)
for part in ("projections", "products", "softmax", "parts"):
    print(f"{part:11s} {change(best[1, part], best[16, part])} from 1 to 16 heads")


# %% tags=["remove-cell"]
# The numbers the text quotes, for the book (this cell is hidden there).
for part in ("projections", "products", "softmax", "parts"):
    glue(f"ch01_{part}_change", change(best[1, part], best[16, part]), display=False)
    delta = best[16, part] - best[1, part]
    glue(
        f"ch01_{part}_delta", f"{delta:+.{1 if abs(delta) >= 1 else 3}f}", display=False
    )
glue("ch01_where", where, display=False)
glue("ch01_layer_trend", layer_trend, display=False)
glue("ch01_speed_change", speed_change, display=False)
glue("ch01_seed_drop", float(seed_drop), display=False)
glue("ch01_versus_seed", versus_seed, display=False)
glue(
    "ch01_layer_delta",
    f"{layer_delta:+.{1 if abs(layer_delta) >= 1 else 3}f}",
    display=False,
)
glue(
    "ch01_rest_delta",
    f"{rest_delta:+.{1 if abs(rest_delta) >= 1 else 3}f}",
    display=False,
)
for h in head_counts:
    glue(f"ch01_layer_ms_{h}", ms_text(best[h, "layer"]), display=False)
    glue(f"ch01_its_{h}", float(its[h]), display=False)
glue(
    "ch01_projections_share_1",
    float(best[1, "projections"] / best[1, "layer"]),
    display=False,
)
glue(
    "ch01_softmax_share_16",
    float(best[16, "softmax"] / best[16, "layer"]),
    display=False,
)
glue("ch01_activation_mib", float(activation_mib), display=False)
glue("ch01_weight_mib", float(weight_mib), display=False)
for h, mib in zip(head_counts, score_mib):
    glue(f"ch01_score_mib_{h}", float(mib), display=False)

# %% mystnb={"figure": {"caption": "Time per forward+backward step and size of the attention-score tensor for 1, 8 and 16 heads, measured on the machine that built this page.", "name": "fig-ch01-heads-cost"}, "image": {"alt": "Two panels: left, milliseconds per iteration against the number of heads; right, megabytes of attention scores growing linearly with the number of heads."}}
heads_cost_figure(
    head_counts,
    ms_per_iter,
    score_mib,
    title=(
        f"One attention layer, B={B8}, S={S8}, D={D8}, "
        f"forward+backward on {device.type}"
    ),
)

# %% [markdown]
# **What this run shows** (on {glue:text}`ch01_where:s`). One forward + backward step
# takes {glue:text}`ch01_layer_ms_1:s` ms with one head, {glue:text}`ch01_layer_ms_8:s`
# ms with 8 and {glue:text}`ch01_layer_ms_16:s` ms with 16: the time
# {glue:text}`ch01_layer_trend:s`. In the seed's unit that is
# {glue:text}`ch01_its_1:.1f`, {glue:text}`ch01_its_8:.1f` and {glue:text}`ch01_its_16:.1f`
# iterations per second, {glue:text}`ch01_speed_change:s` at 16 heads than at 1. The seed's
# table goes from {seed}`000:85` to {seed}`000:65` it/s, {glue:text}`ch01_seed_drop:.0%`
# fewer: this run shows {glue:text}`ch01_versus_seed:s`. The absolute speeds cannot be
# compared (one layer here, an unknown model on unknown hardware there), and neither,
# strictly, can the trends.
#
# **What drives these numbers.** From 1 to 16 heads the layer's time changes by
# {glue:text}`ch01_layer_delta:s` ms. The parts, timed on their own:
#
# - **The four projections**: their time {glue:text}`ch01_projections_change:s`. Their work is
#   identical for every `H` (the same four `D × D` matrices on the same input), so this
#   row is the yardstick of how much the machine itself varies between runs. At
#   `S = 64, D = 512` they are most of the layer's matrix FLOPs: attention proper is
#   only $\frac{64}{64 + 1024} \approx 6\,\%$ of them (§1.10). Here they take
#   {glue:text}`ch01_projections_share_1:.0%` of the layer's time with one head.
# - **The two batched products** $QK^\top$ and $AV$: their time
#   {glue:text}`ch01_products_change:s`. Their FLOPs do not depend on `H` (§1.10),
#   but with `H = 16` they are B·H = 512 products of `Dh = 32` features instead of 32
#   of 512. Smaller matrix products can use the hardware less efficiently, and this row
#   measures how much that costs here.
# - **The scaling and softmax** of the `[B, H, S, S]` scores: their time
#   {glue:text}`ch01_softmax_change:s`, and at 16 heads they take
#   {glue:text}`ch01_softmax_share_16:.0%` of the layer's time. They do only a few
#   operations per score (a division, an exponential, a sum), which §1.10's count of
#   matrix FLOPs leaves out, but they read and write every score, forward and backward,
#   and there are `H` times more scores with `H` heads: this work grows with `H`,
#   although the matrix FLOPs do not. Dropout on the weights, in training, would add
#   the same kind of work.
# - **Together** the three parts change by {glue:text}`ch01_parts_delta:s` ms, against
#   the layer's {glue:text}`ch01_layer_delta:s` ms. The remaining
#   {glue:text}`ch01_rest_delta:s` ms is not timed on its own here. It is the machine's
#   noise, whose size the projections' row shows, plus what the parts leave out that
#   depends on `H`: chiefly the copies that bring q, k, v (and, backward, their
#   gradients) into the order the batched products need and merge the heads back. With
#   one head there is nothing to copy; the parts were timed on tensors already in that
#   order. (Autograd's bookkeeping is no part of the difference: the layer runs the same
#   operations whatever `H`.)
#
# On a GPU these tensors are so small that every operation costs little more than its
# launch, and the picture can differ; that is why this text is computed from the run,
# and why the notebook asserts no timing.
#
# **Memory that grows with H is the scores**: {glue:text}`ch01_score_mib_1:.1f` →
# {glue:text}`ch01_score_mib_8:.1f` → {glue:text}`ch01_score_mib_16:.1f` MiB here, next to
# {glue:text}`ch01_activation_mib:.1f` MiB for *each* `[B, S, D]` activation (x, q, k, v,
# the merged output, …) and {glue:text}`ch01_weight_mib:.1f` MiB of weights. At `S = 64`
# it is a small part; it grows as $H \cdot S^2$, so for long sequences it dominates. Fused
# attention kernels (`F.scaled_dot_product_attention` with a flash or memory-efficient
# backend, chapter 7) never materialise it.
#
# The seed's absolute figures (from {seed}`000:1200` to {seed}`000:2500` MB) must include
# much more than one layer — a whole model, optimizer state, the CUDA context and the
# allocator's cache — and their trend cannot be separated from that set-up. What holds in
# general: more heads cost no extra matrix FLOPs, but `B·H·S²` extra memory in the plain
# implementation, `H` times more work on the scores, smaller products and head-layout
# copies; how much time those cost depends on the hardware, and this run shows it for one
# machine.

# %% [markdown]
# ## 1.12 Explore: one head's attention map
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
# ## 1.13 Bug hunt: the seed's SelfAttention
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
# come out $\sqrt{H}$ times too small. The cell below measures it at the seed's size.
# :::

# %% tags=["hide-input"]
qs = torch.randn(
    n_samples, 64, device=device
)  # [n_samples, Dh = 64]: one head at the seed's size
ks = torch.randn(n_samples, 64, device=device)
std_right = ((qs * ks).sum(-1) / math.sqrt(64)).std().item()
std_seed = ((qs * ks).sum(-1) / math.sqrt(512)).std().item()
print(
    f"score std: {std_right:.2f} with √head_dim, {std_seed:.2f} with √embed_size "
    f"(ratio {std_right / std_seed:.2f} = √8)"
)
assert abs(std_right - 1) < 0.05  # unit scale, as intended
assert abs(std_seed * math.sqrt(8) - 1) < 0.05  # √8 ≈ 2.8 times too small

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
# ## 1.14 Recap
#
# - Attention is a soft lookup: scores $q \cdot k_j$, softmax weights that are positive
#   and sum to 1, a weighted average of the values.
# - A lower-triangular matrix of row-normalised ones averages the past; softmax over
#   scores with $-\infty$ above the diagonal gives the same weights, and with real scores
#   it is causal attention (chapter 3).
# - One head: `q, k, v = x Wq, x Wk, x Wv` `[B, S, Dh]`; `softmax(q @ kᵀ / √Dh, dim=-1) @ v`;
#   `F.scaled_dot_product_attention` computes the same thing.
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
# - Cost is $O(n^2 d)$ for any number of heads; heads are for quality. The plain
#   implementation's score memory grows as $B \cdot H \cdot n^2$, and so does the work of
#   its softmax; with the smaller products and the copies that split and merge the heads,
#   that is what more heads cost in time (§1.11
#   measures how much on the machine at hand). BERT uses 12 or 16 heads, the paper 8;
#   the evidence for a number is an ablation.
# - The seed's `SelfAttention` has a fourth bug, in its mask line: chapter 3 §3.5.
#
# **Now practise:** open [the chapter 1 exercise](exercise.ipynb) in this folder. You will
# write `split_heads`, `merge_heads` and a `MultiHeadAttention`; its check cells tell you
# which of this chapter's pitfalls you hit and send you back to the right section.

# %% [markdown]
# ## Check your understanding
#
# **1.** One query scores [2, 1, −2, 3] against four keys. Does attention return the value of the
# best key? And in a `[B, H, Sq, Sk]` score tensor, over which axis does the softmax run?
#
# :::{dropdown} Answer
# No: it returns a weighted average of *all* the values. Softmax turns the scores into positive
# weights that sum to 1, in the order of the scores, so the output is pulled towards the fourth
# key's value and still takes in a little of every other value: a soft lookup, not a hard one
# (scores ten times larger make it almost hard). The softmax runs over the last axis, the keys
# (`dim=-1`): row i is query i's distribution over the keys. With `dim=-2` each key's column sums
# to 1 instead, and the rows do not. Read §1.1 'Attention as a soft lookup' and §1.7 'einsum and
# matmul'.
# :::
#
# **2.** A colleague splits into heads with `x.view(B, H, S, Dh)`. The output has the right
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
# **3.** The seed's `SelfAttention` computes its scores with
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
# **4.** In an 8-head layer with D = 512, what does each head project a token to, and by what are
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
# **5.** Seed 000 says that splitting d into h heads makes attention cost O(n² d / h), and so,
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
# heads' and §1.11 'Heads, memory and speed, re-measured'.
# :::
