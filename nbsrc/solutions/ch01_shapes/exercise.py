# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise 1 — Attention heads and shapes
#
# You will write the three pieces of multi-head attention that are all about shapes:
# `split_heads`, `merge_heads` and a `MultiHeadAttention` module with per-head projections.
# The lesson explains every step: [lesson.ipynb](lesson.ipynb), attention for one head, then
# [heads.ipynb](heads.ipynb), heads and shapes.
#
# **How to work.** Replace each `# YOUR CODE HERE` / `raise NotImplementedError()` with your code,
# then run the check cell below it. A check runs your code on several shapes and dtypes, compares it
# with the course's reference, and when it disagrees tells you *which* mistake it looks like and which
# lesson section explains it. Do not edit the check cells: they are restored before grading, and some
# grading cases are hidden.
#
# **Grade yourself** at any time, from the course folder:
# `python -m tformer_grading book/ch01_shapes/exercise.ipynb`
#
# Shape letters: B batch, S sequence length, D = d_model, H heads, Dh = D // H.

# %% nbgrader="locked:setup"
import math

import torch
import torch.nn as nn

from tformer_grading.checks import ch01
from tformer_ref.device import get_device, seed_everything

seed_everything(0)
device = get_device()

# %% [markdown]
# ## 1. Split into heads (2 points)
#
# `split_heads(x, n_heads)` takes `x` of shape `[B, S, D]` and returns `[B, H, S, Dh]`, where head `h`
# holds the features `x[..., h*Dh:(h+1)*Dh]`. Lesson [§1.5](heads.ipynb#id-1-5-splitting-into-heads).
#
# Read every size from `x` and from `n_heads` (the check tries several shapes, a float64 input and
# an input whose values are their own positions, to see where each number went). Only rearrange the
# numbers: no arithmetic on them, the input's dtype kept, and `x` itself left unchanged (no in-place
# ops such as `resize_` or `transpose_` on it). Return one tensor.
#
# The model is trained through this function, so it must be differentiable: the gradient flows
# back to `x` unchanged in layout (the gradient of a rearrangement is the upstream gradient
# rearranged back). Rearrange `x` itself with tensor ops: no `.detach()`, `.data`,
# `torch.no_grad()` or copies through NumPy or lists. The check takes that gradient too.


# %% nbgrader="solution:split_heads"
def split_heads(x, n_heads):
    """[B, S, D] -> [B, H, S, Dh]."""
    ### BEGIN SOLUTION
    batch, seq, d_model = x.shape
    return x.view(batch, seq, n_heads, d_model // n_heads).transpose(1, 2)
    ### END SOLUTION


# %% nbgrader="test:test_split_heads:2"
ch01.check_split_heads(split_heads)
### BEGIN HIDDEN TESTS
ch01.check_by_hand("split_heads", split_heads, (torch.randn(2, 3, 8), 2))
### END HIDDEN TESTS

# %% [markdown]
# ## 2. Merge the heads back (2 points)
#
# `merge_heads(x)` takes `[B, H, S, Dh]` and returns `[B, S, D]`: the exact inverse of `split_heads`.
# Careful: what `split_heads` returns is not contiguous in memory. Lesson [§1.6](heads.ipynb#id-1-6-merging-heads-back).
#
# As for `split_heads`: sizes from `x`, numbers only rearranged, dtype kept, `x` left unchanged,
# one tensor returned, and the gradient flowing back to `x` (the upstream gradient split again).


# %% nbgrader="solution:merge_heads"
def merge_heads(x):
    """[B, H, S, Dh] -> [B, S, D]."""
    ### BEGIN SOLUTION
    batch, n_heads, seq, d_head = x.shape
    return x.transpose(1, 2).reshape(batch, seq, n_heads * d_head)
    ### END SOLUTION


# %% nbgrader="test:test_merge_heads:2"
ch01.check_merge_heads(merge_heads)
### BEGIN HIDDEN TESTS
ch01.check_by_hand("merge_heads", merge_heads, (torch.randn(2, 2, 3, 4),))
### END HIDDEN TESTS

# %% [markdown]
# ## 3. Multi-head attention (8 points)
#
# Write `MultiHeadAttention(d_model, n_heads)`, an `nn.Module` whose
# `forward(query, key, value, mask=None)` maps `query [B, Sq, D]`, `key` and `value [B, Sk, D]`
# to `[B, Sq, D]`:
#
# 1. project the query, key and value, each with its own `nn.Linear(d_model, d_model)` (lesson [§1.8](heads.ipynb#id-1-8-per-head-projections));
# 2. split each into `n_heads` heads of `Dh = d_model // n_heads` features with your `split_heads`
#    (it takes the head *count*);
# 3. scores $= QK^\top / \sqrt{D_h}$, softmax over the keys, weights $\times V$ (lesson [§1.3](lesson.ipynb#id-1-3-one-head-of-attention-in-code), [§1.7](heads.ipynb#id-1-7-einsum-and-matmul), [§1.9](heads.ipynb#id-1-9-scaling-by-the-head-size));
# 4. merge the heads and apply the output projection `nn.Linear(d_model, d_model)`.
#
# Name, order and lay out the projections as you like: four `nn.Linear(d_model, d_model)` in any
# registration order, or one `nn.Linear(d_model, 3 * d_model)` for q, k and v together (stacked
# `[q; k; v]` or per head), or your own `nn.Parameter` weights used as `x @ W`; biases on any of them
# or on none. The check finds each projection by *what it is applied to* (it runs your module once
# and reads which input each weight acts on), copies its own weights into yours, and compares the
# outputs. So each of `query`, `key` and `value` must go through its own projection: the check
# passes different tensors for them (cross-attention, with `Sq != Sk` and `key != value`), in
# float32 and float64.
#
# `forward` returns one tensor `[B, Sq, D]` with the dtype of `query`, leaves its arguments
# unchanged (no in-place ops on them), and gives the same output twice in a row in eval mode
# (dropout, if any, only in training). With `mask=None` every query attends to every key: you may
# ignore `mask` in this chapter (chapter 3 is about masks), but do not build one in. Training sends
# the gradient back through `forward` to `query`, `key` and `value`: no `.detach()`, `.data` or
# `torch.no_grad()` on them (the check compares those gradients with the reference's).
# Write the attention yourself: a hidden test fails a module that calls PyTorch's or the reference's.


# %% nbgrader="solution:multi_head_attention"
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        ### BEGIN SOLUTION
        assert d_model % n_heads == 0, "d_model must be divisible by n_heads"
        self.n_heads = n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        ### END SOLUTION

    def forward(self, query, key, value, mask=None):
        """query [B, Sq, D], key and value [B, Sk, D] -> [B, Sq, D]."""
        ### BEGIN SOLUTION
        q = split_heads(self.q_proj(query), self.n_heads)  # [B, H, Sq, Dh]
        k = split_heads(self.k_proj(key), self.n_heads)  # [B, H, Sk, Dh]
        v = split_heads(self.v_proj(value), self.n_heads)  # [B, H, Sk, Dh]
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # [B, H, Sq, Sk]
        weights = scores.softmax(dim=-1)
        return self.out_proj(merge_heads(weights @ v))  # [B, Sq, D]
        ### END SOLUTION


# %% nbgrader="test:test_mha_matches_reference:4"
ch01.check_multi_head_attention(MultiHeadAttention)

# %% nbgrader="test:test_mha_behaviour:2"
ch01.check_multi_head_attention_behaviour(MultiHeadAttention)

# %% nbgrader="test:test_mha_written_by_hand:2"
# Hidden test: your forward pass must be your own code, not PyTorch's or the reference's
# attention.
### BEGIN HIDDEN TESTS
ch01.check_multi_head_attention_by_hand(MultiHeadAttention)
### END HIDDEN TESTS

# %% [markdown]
# ## Done?
#
# Run the self-grading command above. When every check passes, read the recap of the lesson once more:
# the same shape mistakes come back in every later chapter.
