# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise 3 — Masks
#
# You will build the two masks every Transformer needs (causal and padding) and attention that
# respects them, in every precision. The lesson ([lesson.ipynb](lesson.ipynb)) explains every step.
#
# **How to work.** Replace each `# YOUR CODE HERE` / `raise NotImplementedError()` with your code,
# then run the check cell below it. A check runs your code on several cases, compares it with the
# course's reference, and when it disagrees tells you *which* mistake it looks like and which lesson
# section explains it. Do not edit the check cells: they are restored before grading, and some
# grading cases are hidden.
#
# **Grade yourself** at any time, from the course folder:
# `python -m tformer_grading book/ch03_masks/exercise.ipynb`
#
# **Convention.** Every mask here is a `bool` tensor with **True = may attend** (the convention of
# `F.scaled_dot_product_attention`; `nn.MultiheadAttention` uses the opposite, lesson [§3.4](lesson.ipynb#id-3-4-three-conventions-for-one-mask)), shaped so
# that it broadcasts against the scores `[B, H, Sq, Sk]`.

# %% nbgrader="locked:setup"
import math

import torch

from tformer_grading.checks import ch03
from tformer_ref.device import get_device, seed_everything

seed_everything(0)
device = get_device()

# %% [markdown]
# ## 1. The causal mask (2 points)
#
# `causal_mask(size)` returns a bool tensor of shape `[1, 1, S, S]` in which query `i` may attend to
# keys `0..i`: itself and the past, never the future (lesson [§3.2](lesson.ipynb#id-3-2-the-causal-mask)).
#
# * An `[S, S]` or `[1, S, S]` tensor broadcasts against the scores the same way and is
#   accepted too; any other shape is not, nor is a float or int tensor, even with the
#   right 1/0 pattern.
# * Build it on `device`.


# %% nbgrader="solution:causal_mask"
def causal_mask(size):
    """-> bool [1, 1, S, S], True where key j <= query i."""
    ### BEGIN SOLUTION
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()[None, None]
    ### END SOLUTION


# %% nbgrader="test:test_causal_mask:2"
ch03.check_causal_mask(causal_mask)

# %% [markdown]
# ## 2. The padding mask (2 points)
#
# `padding_mask(tokens, pad_id)` takes token ids of shape `[B, S]` and returns a bool mask of shape
# `[B, 1, 1, S]`, True where the key is a real token (not `pad_id`). The two singleton axes are the heads
# and the queries: no head of any query may attend to a padded key (lesson [§3.1](lesson.ipynb#id-3-1-padding-masks)).
#
# * A token is padding exactly when it equals `pad_id`, wherever it sits: the check uses
#   pad ids other than 0 (with 0 a real token) and a left-padded batch, where the
#   padding comes first.
# * Do not modify `tokens` (no in-place ops on it): the caller still needs it.


# %% nbgrader="solution:padding_mask"
def padding_mask(tokens, pad_id):
    """tokens [B, S] -> bool [B, 1, 1, S], True on real tokens."""
    ### BEGIN SOLUTION
    return (tokens != pad_id)[:, None, None, :]
    ### END SOLUTION


# %% nbgrader="test:test_padding_mask:2"
ch03.check_padding_mask(padding_mask)

# %% [markdown]
# ## 3. Masked attention (7 points)
#
# Write `masked_attention(q, k, v, mask)`: scaled dot-product attention (exercise 2) where a key may
# only be attended where `mask` is True. `q` is `[B, H, Sq, Dh]`, `k` and `v` are `[B, H, Sk, Dh]`,
# `mask` is bool and broadcasts to `[B, H, Sq, Sk]`. Return `(out [B, H, Sq, Dh], weights [B, H, Sq, Sk])`.
#
# * The scores are `q @ kᵀ / √Dh` (exercise 2). For every query that may attend to at
#   least one key: its masked keys get weight exactly 0, its weights over the keys (the
#   last axis) sum to 1, and its output is `weights @ v` (lesson [§3.5](lesson.ipynb#id-3-5-fill-values-half-precision-and-nan)). No dropout.
# * It must work in `float16` and `bfloat16` too (the check runs it there): choose a fill
#   value that fits every dtype, and return `out` and `weights` in the dtype of `q`
#   (lesson [§3.5](lesson.ipynb#id-3-5-fill-values-half-precision-and-nan)).
# * A query whose keys are **all** masked (a fully padded sequence, say) has nothing to
#   attend to, and the rules above cannot all hold for it. Its weights and its output
#   must be finite, never NaN, and its weights must be either all zeros (what the
#   course's reference returns) or non-negative and summing to 1 (a finite fill gives a
#   uniform row). Nothing else is checked for such a query.
# * Do not modify `q`, `k`, `v` or `mask` in place (`q /= ...`, `mask.logical_not_()`):
#   the caller still uses them.
#
# Write the computation yourself: a hidden test fails a function that calls PyTorch's attention.


# %% nbgrader="solution:masked_attention"
def masked_attention(q, k, v, mask):
    """q [B, H, Sq, Dh], k and v [B, H, Sk, Dh], mask bool broadcastable to
    [B, H, Sq, Sk] (True = attend)
    -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])."""
    ### BEGIN SOLUTION
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # [B, H, Sq, Sk]
    # The dtype's own most negative value: -1e9 would overflow float16 to -inf.
    scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = scores.softmax(dim=-1)
    # A query with no key left would spread its weight uniformly over masked keys: make
    # it zero.
    weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return weights @ v, weights
    ### END SOLUTION


# %% nbgrader="test:test_masked_attention:4"
ch03.check_masked_attention(masked_attention)

# %% nbgrader="test:test_masked_attention_half:2"
ch03.check_masked_attention_half_precision(masked_attention)

# %% nbgrader="test:test_masked_attention_by_hand:1"
# Hidden test: your attention must be your own code, not PyTorch's or the reference's.
### BEGIN HIDDEN TESTS
ch03.check_masked_attention_by_hand(masked_attention)
### END HIDDEN TESTS

# %% [markdown]
# ## 4. The probes (2 points)
#
# Nothing new to write: this check runs your three functions together. Changing future tokens must not
# change the past, and appending padding must not change any real token's output (lesson [§3.6](lesson.ipynb#id-3-6-probes-causality-and-pad-invariance)).

# %% nbgrader="test:test_mask_probes:2"
ch03.check_mask_probes(masked_attention, causal_mask, padding_mask)
