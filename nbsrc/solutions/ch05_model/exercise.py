# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise 5 — Positions and the whole model
#
# You will write the sinusoidal positional encoding, the embedding step that feeds the encoder and the
# decoder, and the decoder block with its masked self-attention and its cross-attention to the encoder.
# The lesson ([lesson.ipynb](lesson.ipynb)) explains every step.
#
# **How to work.** Replace each `# YOUR CODE HERE` / `raise NotImplementedError()` with your code, then
# run the check cell below it. When a check disagrees it tells you which mistake it looks like and which
# lesson section explains it. Do not edit the check cells: they are restored before grading, and some
# grading cases are hidden.
#
# **Grade yourself** at any time, from the course folder:
# `python -m tformer_grading book/ch05_model/exercise.ipynb`
#
# Shape letters: B batch, S sequence length (St target, Ss source), D = d_model, H heads, V vocabulary.

# %% nbgrader="locked:setup"
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from tformer_ref.attention import MultiHeadAttention
from tformer_grading.checks import ch05
from tformer_ref.device import get_device, seed_everything

seed_everything(0)
device = get_device()

# %% [markdown]
# ## 1. Sinusoidal positional encoding (3 points)
#
# `sinusoidal_encoding(n_positions, d_model)` returns a `torch.Tensor` of shape `[n_positions, d_model]`
# (no batch axis), float32 or float64, on any device, with
#
# $$PE_{(pos,\,2i)} = \sin\!\left(pos / 10000^{2i/D}\right), \qquad
#   PE_{(pos,\,2i+1)} = \cos\!\left(pos / 10000^{2i/D}\right)$$
#
# for positions `0 .. n_positions-1` (row 0 is `[0, 1, 0, 1, ...]`) and `d_model` even: sines in the
# even columns, cosines in the odd ones, amplitude 1. Lesson [§5.2](lesson.ipynb#id-5-2-sinusoidal-positional-encoding). When the table is wrong, the check
# fits your table (which columns hold sines, the base and exponent of the frequencies, where the
# positions start, the amplitude) and says which of these differ.


# %% nbgrader="solution:sinusoidal_encoding"
def sinusoidal_encoding(n_positions, d_model):
    """-> [n_positions, d_model]."""
    ### BEGIN SOLUTION
    position = torch.arange(n_positions, dtype=torch.float64)[:, None]  # [N, 1]
    inv_freq = torch.pow(
        10000.0, -torch.arange(0, d_model, 2, dtype=torch.float64) / d_model
    )  # [D/2]
    pe = torch.zeros(n_positions, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(position * inv_freq)
    pe[:, 1::2] = torch.cos(position * inv_freq)
    return pe.float()
    ### END SOLUTION


# %% nbgrader="test:test_sinusoidal:3"
ch05.check_sinusoidal_encoding(sinusoidal_encoding)
### BEGIN HIDDEN TESTS
ch05.check_by_hand("sinusoidal_encoding", sinusoidal_encoding, (12, 8))
### END HIDDEN TESTS

# %% [markdown]
# ## 2. Embedding the tokens (2 points)
#
# `embed(tokens, table, pe)` takes token ids `tokens [B, S]`, an embedding `table = nn.Embedding(V, D)`
# and a positional table `pe [max_len, D]` (at least S rows), and returns what the first block reads,
# `[B, S, D]`: the token embeddings scaled as in the paper, plus the encoding of each position.
# Lesson [§5.5](lesson.ipynb#id-5-5-embeddings-scaled-by-sqrt-d-model). The result keeps the table's dtype and device; `embed` applies no dropout (the model
# applies it afterwards) and must not change `table` or `pe` in place. When the result is wrong, the
# check measures the factor your embeddings were multiplied by and which rows of `pe` you added.


# %% nbgrader="solution:embed"
def embed(tokens, table, pe):
    """tokens [B, S] long, table nn.Embedding(V, D), pe [max_len, D] -> [B, S, D]."""
    ### BEGIN SOLUTION
    return table(tokens) * math.sqrt(table.embedding_dim) + pe[: tokens.size(1)]
    ### END SOLUTION


# %% nbgrader="test:test_embed:2"
ch05.check_embed(embed)

# %% [markdown]
# ## 3. The decoder block (7 points)
#
# `DecoderBlock(d_model, n_heads, d_ff, dropout=0.1)` is an `nn.Module` whose
# `forward(x, memory, src_mask=None)` maps the target states `x [B, St, D]` and the encoder's output
# `memory [B, Ss, D]` to `[B, St, D]`. It is Post-LN (chapter 4), with three sublayers in this order:
#
# 1. **masked self-attention** over `x`: the block builds the causal keep-mask itself
#    (`[1, 1, St, St]`, True = attend): position i may attend to positions 0..i only (no
#    target padding mask: for targets padded on the right the causal mask is enough, §5.6);
# 2. **cross-attention**: queries from the decoder, keys and values from `memory`, masked with
#    `src_mask` (the source padding mask `[B, 1, 1, Ss]`, or None);
# 3. the **feed-forward** `Linear(d_model, d_ff) -> ReLU -> Linear(d_ff, d_model)`.
#
# Each is wrapped as `x = LayerNorm(x + Dropout(Sublayer(x)))`, with x that sublayer's own input, before
# the next one starts: the dropout (rate `dropout`) acts on *each* of the three sublayers' outputs,
# cross-attention included (the check runs the block in train mode at dropout 0.3 and 0.5 and
# measures that about that fraction of every sublayer's output is zeroed, the rest scaled by
# 1/(1-p)). Use two `MultiHeadAttention` (called as `attn(query, key, value, mask=...)`) and
# three `nn.LayerNorm(d_model)` (with their weight and bias; a LayerNorm module written by hand
# with its own gain and bias also does), each module used for one sublayer only.
# `forward(x, memory)` without a mask must work (`src_mask` defaults to None), `forward` leaves `x` and
# `memory` as they were (no `x += ...` on the input), and in eval mode the block is deterministic.
# Names and registration order are yours: the check finds the parts by type, and when the block is
# wrong it watches each sublayer's inputs and outputs with forward hooks to say which stage departs
# (it sees the modules you call as `self.attn(...)`, not through `.forward(...)`). Lesson [§5.6](lesson.ipynb#id-5-6-encoder-decoder-and-cross-attention).


# %% nbgrader="solution:decoder_block"
class DecoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        ### BEGIN SOLUTION
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (
            nn.LayerNorm(d_model),
            nn.LayerNorm(d_model),
            nn.LayerNorm(d_model),
        )
        self.dropout = nn.Dropout(dropout)
        ### END SOLUTION

    def forward(self, x, memory, src_mask=None):
        """x [B, St, D], memory [B, Ss, D], src_mask [B, 1, 1, Ss] or None
        -> [B, St, D]."""
        ### BEGIN SOLUTION
        st = x.size(1)
        causal = torch.ones(st, st, dtype=torch.bool, device=x.device).tril()[
            None, None
        ]
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        x = self.norm2(
            x + self.dropout(self.cross_attn(x, memory, memory, mask=src_mask))
        )
        return self.norm3(x + self.dropout(self.ff(x)))
        ### END SOLUTION


# %% [markdown]
# ### Against the reference wiring (4 points)

# %% nbgrader="test:test_decoder_block:4"
ch05.check_decoder_block(DecoderBlock)

# %% [markdown]
# ### Behaviour (2 points)
#
# Any right decoder block is causal (changing later target positions leaves earlier outputs alone),
# reads the encoder's output, and ignores masked source positions.

# %% nbgrader="test:test_decoder_behaviour:2"
ch05.check_decoder_behaviour(DecoderBlock)

# %% nbgrader="test:test_decoder_by_hand:1"
# Hidden test: your block must be your own wiring, not PyTorch's TransformerDecoderLayer
# or the reference's.
### BEGIN HIDDEN TESTS
ch05.check_decoder_by_hand(DecoderBlock)
### END HIDDEN TESTS

# %% [markdown]
# ## Done?
#
# Run the self-grading command above. With `sinusoidal_encoding`, `embed`, the encoder block of
# exercise 4 and this decoder block you have every piece of the model the lesson counts in [§5.7](lesson.ipynb#id-5-7-the-seeds-model-counted).
