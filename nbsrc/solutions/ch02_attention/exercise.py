# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise 2 — Scaled dot-product attention
#
# You will write scaled dot-product attention itself, and a small tool to measure how peaked
# attention is (its entropy). The lesson ([lesson.ipynb](lesson.ipynb)) explains every step.
#
# **How to work.** Replace each `# YOUR CODE HERE` / `raise NotImplementedError()` with your code,
# then run the check cell below it. A check runs your code on several shapes and dtypes, compares it
# with the course's reference, and when it disagrees tells you *which* mistake it looks like and which
# lesson section explains it. Do not edit the check cells: they are restored before grading, and some
# grading cases are hidden.
#
# **Grade yourself** at any time, from the course folder:
# `python -m tformer_grading book/ch02_attention/exercise.ipynb`
#
# Shape letters: B batch, H heads, Sq query length, Sk key length, Dh = d_k the size of one head.

# %% nbgrader="locked:setup"
import math

import torch

from tformer_grading.checks import ch02
from tformer_ref.device import get_device, seed_everything

seed_everything(0)
device = get_device()

# %% [markdown]
# ## 1. Attention (5 points)
#
# Write `attention(q, k, v)` for `q` of shape `[B, H, Sq, Dh]` and `k`, `v` of shape `[B, H, Sk, Dh]`.
# It returns the pair `(out, weights)`:
#
# $$\text{weights} = \operatorname{softmax}\!\left(\frac{q k^\top}{\sqrt{d_k}}\right) \quad [B, H, S_q, S_k],
# \qquad \text{out} = \text{weights}\; v \quad [B, H, S_q, D_h].$$
#
# Here $d_k$ is the size of the vectors being dotted, `Dh` (lesson [§2.2](lesson.ipynb#id-2-2-why-the-scores-grow-with-d-k), [§2.5](lesson.ipynb#id-2-5-scaling-by-d-model-is-a-bug)), and each query's
# weights over the keys sum to 1 (lesson [§2.1](lesson.ipynb#id-2-1-attention-step-by-step)). No mask in this chapter. Write the computation
# yourself: a hidden test fails a function that calls PyTorch's or the reference's attention.
#
# What the check requires, all of it:
#
# - `Sq` and `Sk` may differ (cross-attention), and the inputs may be `float32` or `float64`:
#   return `out` and `weights` in the dtype and on the device of `q`;
# - both must match the reference to within `1e-5 + 1e-4·|value|`, also on one case whose scores
#   are large (`q` and `k` scaled by 8): a softmax written by hand subtracts each row's maximum
#   before `exp` (lesson [§2.1](lesson.ipynb#id-2-1-attention-step-by-step));
# - do not modify `q`, `k` or `v` in place (the caller still needs them), and no dropout or other
#   randomness: the same inputs give the same outputs.
#
# When your function is wrong, the check says which stage is off first (the call, the shapes, the
# weights, the output) and measures what is off from your own numbers: the factor your scores are
# divided by, the axis your weights sum to 1 over, the vectors your output mixes.


# %% nbgrader="solution:attention"
def attention(q, k, v):
    """q [B, H, Sq, Dh], k and v [B, H, Sk, Dh]
    -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])."""
    ### BEGIN SOLUTION
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # [B, H, Sq, Sk]
    weights = scores.softmax(dim=-1)
    return weights @ v, weights
    ### END SOLUTION


# %% nbgrader="test:test_attention:4"
ch02.check_attention(attention)

# %% nbgrader="test:test_attention_by_hand:1"
# Hidden test: your attention must be your own code, not PyTorch's or the reference's.
### BEGIN HIDDEN TESTS
ch02.check_attention_by_hand(attention)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. Attention entropy (2 points)
#
# Write `attention_entropy(weights)`: for weights of shape `[..., Sq, Sk]` (each row a probability
# distribution over the keys), return the entropy of every row, shape `[..., Sq]`, in nats:
#
# $$H = -\sum_{j} w_j \ln w_j, \qquad \text{with } 0 \ln 0 = 0.$$
#
# A uniform row over $S_k$ keys has entropy $\ln S_k$; a one-hot row has 0 (lesson [§2.4](lesson.ipynb#id-2-4-entropy-how-peaked-is-attention)). Careful:
# weights can be exactly 0 (a causal mask makes many of them so).
#
# What the check requires, all of it:
#
# - any number of leading axes, none included: `[Sq, Sk]`, `[B, Sq, Sk]` and `[B, H, Sq, Sk]` all
#   work, and the result has the input's shape without its last axis (no `keepdim`);
# - the dtype and device of `weights`, values within `1e-5 + 1e-4·|H|` of $-\sum_j w_j \ln w_j$: an
#   $\varepsilon$ added inside the logarithm to dodge $\ln 0$ biases every row by about
#   $S_k\,\varepsilon$, so it must be tiny ($\le 10^{-12}$; one case has rows of 4,096 keys, where
#   $10^{-6}$ already shows), or use `torch.xlogy` / `torch.special.entr`;
# - do not modify `weights` in place.


# %% nbgrader="solution:attention_entropy"
def attention_entropy(weights):
    """weights [..., Sq, Sk] -> entropy per query [..., Sq], in nats."""
    ### BEGIN SOLUTION
    return -torch.xlogy(weights, weights).sum(dim=-1)
    ### END SOLUTION


# %% nbgrader="test:test_attention_entropy:2"
ch02.check_attention_entropy(attention_entropy)

# %% [markdown]
# ## Try it
#
# Unscaled scores of size `Dh = 64` give nearly one-hot rows; scaled ones do not. (Not graded.)

# %%
q, k, v = (torch.randn(1, 1, 6, 64, device=device) for _ in range(3))
scaled_entropy = attention_entropy(attention(q, k, v)[1]).mean().item()
unscaled_entropy = (
    attention_entropy((q @ k.transpose(-2, -1)).softmax(-1)).mean().item()
)
print(
    f"mean entropy, scaled: {scaled_entropy:.2f} nats; "
    f"unscaled: {unscaled_entropy:.2f} nats; "
    f"uniform would be ln 6 = {math.log(6):.2f}"
)
