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
# The chapter has two pages and an optional third:
#
# - **this page, attention for one head**: compute attention for one query by hand
#   (§1.1), average the past with a lower-triangular matrix, the idea behind the causal
#   attention of chapter 3 (§1.2), and write one head of scaled dot-product attention,
#   every shape asserted, against PyTorch's (§1.3);
# - **{doc}`heads`**: follow one batch through multi-head attention (§1.4); split into
#   heads and merge back, and see why `view`, `transpose`, `reshape` and `.contiguous()`
#   appear where they do (§1.5, §1.6); compute the scores with `matmul` and with `einsum`,
#   and break `einsum` the way one seed does (§1.7); give each head its own projections
#   and scale its scores by its own size (§1.8, §1.9); count the FLOPs (§1.10); explore
#   one head's attention map and hunt three bugs in a seed's code (§1.11, §1.12);
# - **{doc}`timing`** (optional): how the number of heads changes memory and speed,
#   re-measured on the machine at hand, and why.
#
# The chapter's exercise, [`ch01_shapes`](exercise.ipynb), comes after the second page.
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
# | a table of memory and training speed for 1, 8 and 16 heads | no set-up given; re-measured here | {doc}`timing` |
#
# Every page runs on the CPU in under a minute, and unchanged on a GPU.

# %%
# %matplotlib inline
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from tformer_ref.device import get_device, seed_everything

device = get_device()  # CUDA when available; set TFORMER_DEVICE=cpu to override
seed_everything(0)
# This page only inspects forward values.
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
# Python loop over the heads would work; the next page, {doc}`heads`, does it for all
# heads at once with a 4-dimensional tensor `[B, H, S, Dh]`, and that is where the shape
# bugs live.

# %% [markdown]
# **In short.**
#
# - Attention is a soft lookup: scores $q \cdot k_j$, softmax weights that are positive
#   and sum to 1, a weighted average of the values.
# - A lower-triangular matrix of row-normalised ones averages the past; softmax over
#   scores with $-\infty$ above the diagonal gives the same weights, and with real scores
#   it is causal attention (chapter 3).
# - One head: `q, k, v = x Wq, x Wk, x Wv` `[B, S, Dh]`; `softmax(q @ kᵀ / √Dh, dim=-1) @ v`;
#   `F.scaled_dot_product_attention` computes the same thing.
#
# Next: {doc}`heads`, then the chapter's exercise.

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
# to 1 instead, and the rows do not. Read §1.1 'Attention as a soft lookup' and §1.3 'One head of
# attention in code'.
# :::
