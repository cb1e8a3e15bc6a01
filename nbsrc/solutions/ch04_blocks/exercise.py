# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise 4 — Blocks
#
# You will build the Transformer's encoder block: a feed-forward sublayer, then the block itself, which
# wraps self-attention and the feed-forward in residual connections, LayerNorm and dropout, in the
# paper's Post-LN arrangement or in Pre-LN. The lesson ([lesson.ipynb](lesson.ipynb)) explains every step.
#
# **How to work.** Replace each `# YOUR CODE HERE` / `raise NotImplementedError()` with your code, then
# run the check cell below it. The checks build your block, recompute it from *your own* parts wired the
# right way, and when it disagrees tell you which mistake it looks like and which lesson section explains
# it. Do not edit the check cells: they are restored before grading, and some grading cases are hidden.
#
# **Grade yourself** at any time, from the course folder:
# `python -m tformer_grading book/ch04_blocks/exercise.ipynb`
#
# Shape letters: B batch, S sequence length, D = d_model, H heads, F = d_ff.

# %% nbgrader="locked:setup"
import torch
import torch.nn as nn
import torch.nn.functional as F

from tformer_ref.attention import MultiHeadAttention
from tformer_grading.checks import ch04
from tformer_ref.device import get_device, seed_everything

seed_everything(0)
device = get_device()

# %% [markdown]
# ## 1. The feed-forward sublayer (2 points)
#
# `FeedForward(d_model, d_ff, dropout=0.0)` maps `x [..., D]` (any number of leading dimensions) to
# the same shape: $\mathrm{FFN}(x) = \max(0,\ xW_1 + b_1)\,W_2 + b_2$, with `nn.Linear(d_model, d_ff)`
# then `nn.Linear(d_ff, d_model)`: the hidden width is the argument `d_ff`, the activation is ReLU (not
# GELU or another), and nothing comes after the second Linear (no ReLU, no residual: the block adds
# that). Leave `x` unchanged (no in-place op on it). A dropout is allowed on the hidden layer only
# (between the ReLU and the second Linear, as in PyTorch's own layer), at the rate `dropout` given to
# the constructor (`nn.Dropout(dropout)`, never a constant), and off in eval mode; nothing is dropped
# before the first Linear or after the second. The check also runs it in train mode at `dropout=0.2`
# and `0.5` and measures the fraction of hidden activations zeroed: none, or about the rate given.
# Lesson [§4.2](lesson.ipynb#id-4-2-the-feed-forward-sublayer).


# %% nbgrader="solution:feed_forward"
class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        ### BEGIN SOLUTION
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)
        ### END SOLUTION

    def forward(self, x):
        """x [..., D] -> [..., D]."""
        ### BEGIN SOLUTION
        return self.linear2(self.dropout(torch.relu(self.linear1(x))))
        ### END SOLUTION


# %% nbgrader="test:test_feed_forward:2"
ch04.check_feed_forward(FeedForward)

# %% [markdown]
# ## 2. The encoder block (12 points)
#
# `EncoderBlock(d_model, n_heads, d_ff, dropout=0.1, norm_first=False)` is an `nn.Module` whose
# `forward(x, mask=None)` maps `x [B, S, D]` to `[B, S, D]`; `mask` is a boolean keep-mask
# (True = attend) that you pass on to the attention. Build it from:
#
# * one `MultiHeadAttention(d_model, n_heads, dropout=dropout)` (imported above; call it as
#   `attn(h, h, h, mask=mask)`, self-attention, with the `mask` you were given, unchanged); pass
#   `dropout=dropout`: the attention drops its weights at the block's rate (its default is 0.0),
# * your `FeedForward(d_model, d_ff, dropout)` (hidden width `d_ff`),
# * two nn.LayerNorm(d_model), one per sublayer, with their learnable gain and bias: create them
#   in `__init__` and give each sublayer its own (never one shared norm). `F.layer_norm` with your
#   own weight and bias of shape [D] also does, and so does a LayerNorm module you write by hand
#   with its own gain and bias (the Annotated Transformer's, say). The default `eps=1e-5` is the
#   paper's; a smaller eps, such as 1e-6, changes nothing the checks can measure, a large one does;
# * dropout at the rate `dropout` (`nn.Dropout(dropout)` or `F.dropout(t, dropout, self.training)`),
#   off in eval mode.
#
# The checks find your parts by what they are, not by their names: the attention is the
# `MultiHeadAttention` instance, the feed-forward the two `nn.Linear` layers of shapes [F, D] and
# [D, F], the norms are seen through their `layer_norm` calls, or, for a module you wrote by hand,
# by its outputs: each token's D features normalised, then scaled by its gain and shifted by its
# bias.
#
# Each sublayer (attention, then feed-forward) is wrapped as:
#
# * `norm_first=False`, **Post-LN** (the paper, lesson [§4.5](lesson.ipynb#id-4-5-post-ln-and-pre-ln)): `x = LayerNorm(x + Dropout(Sublayer(x)))`;
# * `norm_first=True`, **Pre-LN**: `x = x + Dropout(Sublayer(LayerNorm(x)))`.
#
# Mind the seed's block (lesson [§4.4](lesson.ipynb#id-4-4-where-dropout-goes)): dropout goes on the sublayer's output, before the residual add,
# never after the norm, nor on the residual sum, nor on the sublayer's input. And LayerNorm, not
# BatchNorm (lesson [§4.3](lesson.ipynb#id-4-3-layernorm-not-batchnorm)). `forward` returns the tensor `[B, S, D]` and leaves the `x` it was given
# unchanged (write `x = x + ...`, not `x += ...`). Name your attributes as you like.


# %% nbgrader="solution:encoder_block"
class EncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        ### BEGIN SOLUTION
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        ### END SOLUTION

    def forward(self, x, mask=None):
        """x [B, S, D], mask bool broadcastable to [B, H, S, S] -> [B, S, D]."""
        ### BEGIN SOLUTION
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.dropout1(self.self_attn(h, h, h, mask=mask))
            return x + self.dropout2(self.ff(self.norm2(x)))
        x = self.norm1(x + self.dropout1(self.self_attn(x, x, x, mask=mask)))
        return self.norm2(x + self.dropout2(self.ff(x)))
        ### END SOLUTION


# %% [markdown]
# ### Post-LN (4 points)

# %% nbgrader="test:test_post_ln:4"
ch04.check_encoder_block(EncoderBlock, norm_first=False)

# %% [markdown]
# ### Pre-LN (3 points)

# %% nbgrader="test:test_pre_ln:3"
ch04.check_encoder_block(EncoderBlock, norm_first=True)

# %% [markdown]
# ### Dropout placement (2 points)
#
# In eval mode dropout does nothing, so the checks above cannot see where it sits. This one runs your
# block in train mode with `dropout=0.3` and measures, on each path, the fraction of activations that
# came out zeroed: about 30 % of each sublayer's output (the others scaled by 1/(1-p), as `nn.Dropout`
# does), none of the input, the residual sums or the normalised stream; and again with `dropout=0.5`
# (about 50 %), so the rate must follow the `dropout` argument. Then it runs it with `dropout=1.0`,
# where every dropped path is exactly zero and the output shows where the dropout is. Last, it checks
# that your `MultiHeadAttention` was built with `dropout=dropout`.

# %% nbgrader="test:test_dropout_placement:2"
ch04.check_dropout_placement(EncoderBlock)

# %% [markdown]
# ### Behaviour (2 points)
#
# Any right block normalises each token on its own: the other sequences of the batch, extra padding
# and the train/eval switch (at dropout 0) change nothing.

# %% nbgrader="test:test_block_behaviour:2"
ch04.check_block_behaviour(EncoderBlock)

# %% nbgrader="test:test_block_by_hand:1"
# Hidden test: your block must be your own wiring, not PyTorch's TransformerEncoderLayer
# or the reference's.
### BEGIN HIDDEN TESTS
ch04.check_block_by_hand(EncoderBlock)
### END HIDDEN TESTS

# %% [markdown]
# ## Done?
#
# Run the self-grading command above. Then try the lesson's [§4.5](lesson.ipynb#id-4-5-post-ln-and-pre-ln) experiment with your own block: stack
# six of them and compare the gradient norms per layer for `norm_first=False` and `True`.
