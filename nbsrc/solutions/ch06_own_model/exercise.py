# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise 6b — Train your own Transformer
#
# Every piece of a Transformer is now yours: attention (exercises 1–3), masks (exercise 3), the
# blocks (exercises 4 and 5) and positions (exercise 5). Here you put them together into one
# encoder–decoder, and a check trains it on the date task of lesson [§6.1](../ch06_training/lesson.ipynb#id-6-1-the-toy-task)
# (`"2021-03-03" -> "3 March 2021"`). When it learns, it is your Transformer that learned.
#
# **How to work.** Paste your own answers from exercises 1–5 into the answer cells below (the
# names and signatures are those of the exercises; a cell says what to change, when anything),
# then write the assembly in the last answer cell. Run each check cell below its answer cell.
# Do not edit the check cells: they are restored before grading.
#
# **A piece you did not get right is no dead end.** Each answer cell says how to take the
# course's reference (`tformer_ref`) for that piece instead, in one line. A reference piece earns
# nothing and costs nothing: its own check cell scores 0 (it says so), and the model check still
# counts in full for your assembly. Only what is yours is graded.
#
# **Points.** One check per piece, graded only when the piece is your own code and passes its
# chapter's checks again (attention 2, masks 1, blocks 2, positions 1), and 6 points for the model:
# the check builds your `OwnTransformer`, trains it with a fixed recipe for a fixed number of steps,
# and asks for a stated exact-match accuracy on dates it has never seen. Before training it probes
# the assembled model (the source mask reaching the decoder, the loss leaving padding out, every
# block registered): a model can learn the dates with those wrong, so learning alone earns nothing.
# When a probe fails or the model does not learn, the check runs each chapter's pitfall probes on
# your pieces too and tells you which piece is at fault, and where to read about it.
#
# **Grade yourself** at any time, from the course folder:
# `python -m tformer_grading book/ch06_own_model/exercise.ipynb`
#
# Shape letters: B batch, S length (Ss source, St target), D = d_model, H heads, Dh = D // H,
# F = d_ff, V vocabulary.

# %% nbgrader="locked:setup"
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from tformer_grading.checks import own_model
from tformer_ref.device import get_device, seed_everything

seed_everything(0)
device = get_device()

# %% [markdown]
# ## 1. Attention (2 points)
#
# Paste your `split_heads` and `merge_heads` (exercise 1), your `masked_attention` (exercise 3)
# and your `MultiHeadAttention` (exercise 1), with two changes to the class:
#
# * `__init__(self, d_model, n_heads, dropout=0.0)`: the blocks build it with a `dropout`
#   argument (exercise 4). The model trains at dropout 0, so you may ignore it.
# * `forward(query, key, value, mask=None)` now uses the mask: compute the heads' attention with
#   your `masked_attention(q, k, v, mask)` when a mask is given (your unmasked attention, or
#   `masked_attention` with an all-True mask, when it is None).
#
# The check runs the checks of exercises 1 and 3 on these four again, and one more: your
# `MultiHeadAttention` given a causal or a padding mask must obey it (lesson [§3.6](../ch03_masks/lesson.ipynb#id-3-6-probes-causality-and-pad-invariance)).
#
# **To use the reference instead**, replace the whole cell with:
#
# ```python
# from tformer_ref.heads import split_heads, merge_heads
# from tformer_ref.attention import scaled_dot_product_attention as masked_attention
# from tformer_ref.attention import MultiHeadAttention
# ```


# %% nbgrader="solution:own_attention"
### BEGIN SOLUTION
def split_heads(x, n_heads):
    """[B, S, D] -> [B, H, S, Dh]."""
    batch, seq, d_model = x.shape
    return x.view(batch, seq, n_heads, d_model // n_heads).transpose(1, 2)


def merge_heads(x):
    """[B, H, S, Dh] -> [B, S, D]."""
    batch, n_heads, seq, d_head = x.shape
    return x.transpose(1, 2).reshape(batch, seq, n_heads * d_head)


def masked_attention(q, k, v, mask):
    """q [B, H, Sq, Dh], k and v [B, H, Sk, Dh], mask bool (True = attend)
    -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = scores.softmax(dim=-1)
    weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return weights @ v, weights


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.0):
        super().__init__()
        assert d_model % n_heads == 0, "d_model must be divisible by n_heads"
        self.n_heads = n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        """query [B, Sq, D], key and value [B, Sk, D] -> [B, Sq, D]."""
        q = split_heads(self.q_proj(query), self.n_heads)
        k = split_heads(self.k_proj(key), self.n_heads)
        v = split_heads(self.v_proj(value), self.n_heads)
        if mask is None:  # every query attends to every key
            mask = torch.ones(q.size(2), k.size(2), dtype=torch.bool, device=q.device)
            mask = mask[None, None]
        out, _ = masked_attention(q, k, v, mask)
        return self.out_proj(merge_heads(out))


### END SOLUTION


# %% nbgrader="test:test_own_attention:2"
own_model.check_own_attention(
    split_heads, merge_heads, masked_attention, MultiHeadAttention
)

# %% [markdown]
# ## 2. Masks (1 point)
#
# Paste your `causal_mask(size)` and `padding_mask(tokens, pad_id)` from exercise 3, unchanged
# (bool, True = may attend; `[1, 1, S, S]` and `[B, 1, 1, S]`). The decoder block below builds its
# causal mask with your `causal_mask`, and the model its source padding mask with your
# `padding_mask`.
#
# **To use the reference instead**, replace the whole cell with
# `from tformer_ref.masks import causal_mask, padding_mask`.


# %% nbgrader="solution:own_masks"
### BEGIN SOLUTION
def causal_mask(size):
    """-> bool [1, 1, S, S], True where key j <= query i."""
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()[None, None]


def padding_mask(tokens, pad_id):
    """tokens [B, S] -> bool [B, 1, 1, S], True on real tokens."""
    return (tokens != pad_id)[:, None, None, :]


### END SOLUTION


# %% nbgrader="test:test_own_masks:1"
own_model.check_own_masks(causal_mask, padding_mask)

# %% [markdown]
# ## 3. Blocks (2 points)
#
# Paste your `FeedForward` and `EncoderBlock` (exercise 4) and your `DecoderBlock` (exercise 5).
# They now build *your* `MultiHeadAttention` (the name refers to the class of section 1). One change
# to the decoder block: build its causal mask with your mask function, as
# `causal_mask(x.size(1)).to(x.device)` (the `.to` is for the reference's `causal_mask`, which
# builds on the CPU unless told otherwise).
#
# The check runs the checks of exercises 4 and 5 on the three classes again (the Post-LN encoder
# block). To judge your wiring alone, it runs them with the reference's attention and causal mask
# in place of yours: a mistake in those is section 1's or section 2's, not this one's.
#
# **To use the reference instead**, replace the whole cell with:
#
# ```python
# from tformer_ref.blocks import FeedForward, EncoderBlock
# from tformer_grading.checks.own_model import ReferenceDecoderBlock as DecoderBlock
# ```
#
# (`ReferenceDecoderBlock` is `tformer_ref.blocks.DecoderBlock` called as in exercise 5,
# `forward(x, memory, src_mask=None)`.)


# %% nbgrader="solution:own_blocks"
### BEGIN SOLUTION
class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        """x [..., D] -> [..., D]."""
        return self.linear2(self.dropout(torch.relu(self.linear1(x))))


class EncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        """x [B, S, D], mask bool broadcastable to [B, H, S, S] -> [B, S, D]."""
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.dropout1(self.self_attn(h, h, h, mask=mask))
            return x + self.dropout2(self.ff(self.norm2(x)))
        x = self.norm1(x + self.dropout1(self.self_attn(x, x, x, mask=mask)))
        return self.norm2(x + self.dropout2(self.ff(x)))


class DecoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        """x [B, St, D], memory [B, Ss, D], src_mask [B, 1, 1, Ss] or None
        -> [B, St, D]."""
        causal = causal_mask(x.size(1)).to(x.device)
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        read = self.cross_attn(x, memory, memory, mask=src_mask)
        x = self.norm2(x + self.dropout(read))
        return self.norm3(x + self.dropout(self.ff(x)))


### END SOLUTION


# %% nbgrader="test:test_own_blocks:2"
own_model.check_own_blocks(FeedForward, EncoderBlock, DecoderBlock)

# %% [markdown]
# ## 4. Positions (1 point)
#
# Paste your `sinusoidal_encoding(n_positions, d_model)` and `embed(tokens, table, pe)` from
# exercise 5, unchanged.
#
# **To use the reference instead**, replace the whole cell with:
#
# ```python
# from tformer_ref.positions import sinusoidal_encoding
# from tformer_grading.checks.own_model import reference_embed as embed
# ```


# %% nbgrader="solution:own_positions"
### BEGIN SOLUTION
def sinusoidal_encoding(n_positions, d_model):
    """-> [n_positions, d_model]."""
    position = torch.arange(n_positions, dtype=torch.float64)[:, None]
    pairs = torch.arange(0, d_model, 2, dtype=torch.float64)
    inv_freq = torch.pow(10000.0, -pairs / d_model)
    pe = torch.zeros(n_positions, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(position * inv_freq)
    pe[:, 1::2] = torch.cos(position * inv_freq)
    return pe.float()


def embed(tokens, table, pe):
    """tokens [B, S] long, table nn.Embedding(V, D), pe [max_len, D] -> [B, S, D]."""
    return table(tokens) * math.sqrt(table.embedding_dim) + pe[: tokens.size(1)]


### END SOLUTION


# %% nbgrader="test:test_own_positions:1"
own_model.check_own_positions(sinusoidal_encoding, embed)

# %% [markdown]
# ## 5. Your Transformer (6 points)
#
# Assemble the pieces, in this cell, into `OwnTransformer(vocab_size, d_model, n_heads, d_ff,
# n_layers)`, an `nn.Module` whose `forward(src, tgt_in)` maps source ids `src [B, Ss]` and the
# decoder's input `tgt_in [B, St]` to logits `[B, St, V]` (one vocabulary, of size `vocab_size`,
# serves both sides; the padding id is `PAD = 0`). Lesson [§5.6](../ch05_model/lesson.ipynb#id-5-6-encoder-decoder-and-cross-attention) draws it:
#
# 1. one `nn.Embedding(vocab_size, d_model)` per side, and a positional table from your
#    `sinusoidal_encoding` of 64 rows, kept with `self.register_buffer("pe", ...)` so that it
#    moves to the model's device with `model.to(device)`;
# 2. the encoder: `n_layers` of your `EncoderBlock(d_model, n_heads, d_ff, dropout=0.0)`
#    (Post-LN) applied to `embed(src, ...)`, each given the source padding mask
#    `padding_mask(src, PAD)`;
# 3. the decoder: `n_layers` of your `DecoderBlock(d_model, n_heads, d_ff, dropout=0.0)` applied
#    to `embed(tgt_in, ...)`, each reading the encoder's output with the same source padding mask
#    (the blocks build their own causal mask);
# 4. a final `nn.Linear(d_model, vocab_size)` to the logits.
#
# Keep the blocks in an `nn.ModuleList` (a plain list hides their weights from the optimizer).
# Dropout stays at 0: the check trains on 4000 noise-free dates, for about ten passes over
# them (600 batches of 64), where dropout would only slow learning.
#
# Then write `batch_loss(model, src, tgt)`, the loss of one training batch with teacher forcing
# (lesson [§6.2](../ch06_training/lesson.ipynb#id-6-2-teacher-forcing-and-the-shift), [§6.3](../ch06_training/lesson.ipynb#id-6-3-a-loss-that-ignores-padding)): `tgt [B, St]` is `BOS y1 .. yn EOS` padded with `PAD`; the decoder reads
# `tgt` without its last position and must predict `tgt` without its first, and the loss is the
# mean cross-entropy over the real (non-`PAD`) label tokens. Return the scalar tensor (the check
# calls `.backward()` on it).
#
# **What the check does.** It builds `OwnTransformer(vocab_size, 32, 4, 64, 1)` with a fixed seed,
# gives it the course's Xavier initialisation (lesson [§4.6](../ch04_blocks/lesson.ipynb#id-4-6-xavier-initialisation), so that your choice of initialisation
# does not matter), and trains it with your `batch_loss`: Adam, a short warm-up then a linear
# decay, batches of 64 from 4000 training dates, a fixed number of steps, one CPU thread. Then it
# decodes dates never seen in training, greedily, and counts the exact matches. A right model
# clears the bar with a wide margin (the check prints its accuracy and time). When yours does not,
# the check runs every piece's chapter checks again and probes the assembled model (does the
# decoder see the future? does padding the source change anything? does the order of the tokens
# matter? is the target shifted?) and names what it found.

# %% nbgrader="solution:own_model"
PAD = 0


### BEGIN SOLUTION
class OwnTransformer(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers):
        super().__init__()
        self.src_embed = nn.Embedding(vocab_size, d_model)
        self.tgt_embed = nn.Embedding(vocab_size, d_model)
        self.register_buffer("pe", sinusoidal_encoding(64, d_model))
        self.encoder = nn.ModuleList(
            EncoderBlock(d_model, n_heads, d_ff, dropout=0.0) for _ in range(n_layers)
        )
        self.decoder = nn.ModuleList(
            DecoderBlock(d_model, n_heads, d_ff, dropout=0.0) for _ in range(n_layers)
        )
        self.generator = nn.Linear(d_model, vocab_size)

    def forward(self, src, tgt_in):
        """src [B, Ss], tgt_in [B, St] -> logits [B, St, V]."""
        src_mask = padding_mask(src, PAD)  # [B, 1, 1, Ss]
        memory = embed(src, self.src_embed, self.pe)
        for block in self.encoder:
            memory = block(memory, src_mask)
        x = embed(tgt_in, self.tgt_embed, self.pe)
        for block in self.decoder:
            x = block(x, memory, src_mask)
        return self.generator(x)


def batch_loss(model, src, tgt):
    """src [B, Ss], tgt [B, St] (BOS ... EOS, padded) -> scalar loss."""
    tgt_in, labels = tgt[:, :-1], tgt[:, 1:]  # teacher forcing: predict the next token
    logits = model(src, tgt_in)  # [B, St-1, V]
    return F.cross_entropy(
        logits.reshape(-1, logits.size(-1)), labels.reshape(-1), ignore_index=PAD
    )


### END SOLUTION


# %% nbgrader="test:test_own_model_learns:6"
own_model.check_own_model_learns(
    OwnTransformer,
    batch_loss,
    attention=(split_heads, merge_heads, masked_attention, MultiHeadAttention),
    masks=(causal_mask, padding_mask),
    blocks=(FeedForward, EncoderBlock, DecoderBlock),
    positions=(sinusoidal_encoding, embed),
)

# %% [markdown]
# **See it train (optional, not graded).** This cell trains a small model twice, once
# as your `OwnTransformer` with your `batch_loss` and once as the course's Transformer
# with its loss, on the same sequence-reversal task, with the same seed, data and
# optimizer, and plots both runs: the held-out loss and next-token accuracy (a few
# seconds). Run it after a failing check to see what the mistake does to training.

# %% tags=["nbval-skip"]
from tformer_grading.pictures.training_curves import show_training

show_training("own_model", OwnTransformer, batch_loss)

# %% [markdown]
# ## Done?
#
# Run the self-grading command above. Your pieces, your assembly, your model: it translates dates
# it has never seen. Chapter 6's capstone trains the seeds' larger model (8 heads, 2 layers each
# side) the same way, on more data, to a higher bar.
