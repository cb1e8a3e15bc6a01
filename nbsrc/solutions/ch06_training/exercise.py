# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise 6 — Training and decoding
#
# You will write the pieces of a training loop that the seed got wrong or left out: the teacher-forcing
# shift for batch-first tensors, a loss that ignores padding, the Noam learning-rate schedule, one
# training step with gradient clipping, and greedy decoding. The lesson
# ([lesson.ipynb](lesson.ipynb)) explains every step; the [capstone](capstone.ipynb) puts them together.
#
# **How to work.** Replace each `# YOUR CODE HERE` / `raise NotImplementedError()` with your code,
# then run the check cell below it. A check runs your code on several cases, compares it with the
# course's reference, and when it disagrees tells you *which* mistake it looks like and which lesson
# section explains it. Do not edit the check cells: they are restored before grading, and some
# grading cases are hidden.
#
# **Grade yourself** at any time, from the course folder:
# `python -m tformer_grading book/ch06_training/exercise.ipynb`
#
# Shape letters: B batch, Ss source length, St target length, V vocabulary. Every tensor is
# batch-first. Token ids: PAD = 0 unless a `pad_id` is given, BOS = 1, EOS = 2.

# %% nbgrader="locked:setup"
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.lr_scheduler import LambdaLR

from tformer_grading.checks import ch06
from tformer_ref.device import get_device, seed_everything
from tformer_ref.masks import causal_mask

seed_everything(0)
device = get_device()

# %% [markdown]
# ## 1. Shift the targets (2 points)
#
# A target row is `BOS y1 … yn EOS PAD …`. `shift_targets(tgt)` takes `tgt` of shape `[B, St]` and
# returns `(tgt_in, labels)`, both `[B, St-1]`: the decoder reads `BOS y1 … yn` and must predict
# `y1 … yn EOS`. The seed's slices `trg[:-1, :]` / `trg[1:, :]` are for sequence-first tensors.
# Lesson §6.2.

# %% nbgrader="solution:shift_targets"
def shift_targets(tgt):
    """tgt [B, St] -> (decoder input [B, St-1], labels [B, St-1])."""
    ### BEGIN SOLUTION
    return tgt[:, :-1], tgt[:, 1:]
    ### END SOLUTION


# %% nbgrader="test:test_shift_targets:2"
ch06.check_shift_targets(shift_targets)
### BEGIN HIDDEN TESTS
ch06.check_by_hand("shift_targets", shift_targets, (torch.tensor([[1, 5, 2, 0]]),))
### END HIDDEN TESTS

# %% [markdown]
# ## 2. A loss that ignores padding (3 points)
#
# `sequence_loss(logits, labels, pad_id, label_smoothing)` takes `logits [B, St, V]` and
# `labels [B, St]` and returns the mean cross-entropy over the real (non-pad) label tokens, as a
# scalar tensor that gradients flow through, with label smoothing. Lesson §6.3.

# %% nbgrader="solution:sequence_loss"
def sequence_loss(logits, labels, pad_id, label_smoothing):
    """logits [B, St, V], labels [B, St] -> scalar."""
    ### BEGIN SOLUTION
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1),
                           ignore_index=pad_id, label_smoothing=label_smoothing)
    ### END SOLUTION


# %% nbgrader="test:test_sequence_loss:3"
ch06.check_sequence_loss(sequence_loss)
### BEGIN HIDDEN TESTS
ch06.check_by_hand("sequence_loss", sequence_loss, (torch.randn(2, 3, 5), torch.tensor([[3, 4, 0], [4, 0, 0]]), 0, 0.1))
### END HIDDEN TESTS

# %% [markdown]
# ## 3. The Noam schedule (2 + 2 points)
#
# Vaswani et al. (§5.3) set the learning rate of update $n = 1, 2, \dots$ to
# $\text{lr}(n) = d_\text{model}^{-0.5}\,\min(n^{-0.5},\; n \cdot \text{warmup}^{-1.5})$.
#
# `noam_lambda(step, d_model, warmup)` returns the multiplier `LambdaLR` should use at its `step`
# (0, 1, 2, …; step 0 is the first update). The optimizer's own lr is 1.0, so the multiplier *is* the
# learning rate. `make_scheduler(optimizer, d_model, warmup)` returns a scheduler whose `step()`
# sets the rate for the next update and does nothing else; the training loop calls
# `optimizer.step()` then `scheduler.step()`. Lesson §6.4.

# %% nbgrader="solution:noam"
def noam_lambda(step, d_model, warmup):
    """LambdaLR multiplier for 0-based ``step``."""
    ### BEGIN SOLUTION
    n = step + 1
    return d_model ** -0.5 * min(n ** -0.5, n * warmup ** -1.5)
    ### END SOLUTION


def make_scheduler(optimizer, d_model, warmup):
    """A scheduler that sets the Noam rate (the optimizer's lr is 1.0)."""
    ### BEGIN SOLUTION
    return LambdaLR(optimizer, lambda step: noam_lambda(step, d_model, warmup))
    ### END SOLUTION


# %% nbgrader="test:test_noam_lambda:2"
ch06.check_noam_lambda(noam_lambda)

# %% nbgrader="test:test_make_scheduler:2"
ch06.check_noam_scheduler(make_scheduler)

# %% [markdown]
# ## 4. One training step (4 points)
#
# `train_step(model, src, tgt, optimizer, scheduler, max_norm, pad_id, label_smoothing)` does one
# update on the batch `src [B, Ss]`, `tgt [B, St]` and returns `(loss, grad_norm)` as two floats, where
# `grad_norm` is the total gradient norm *before* clipping (what `clip_grad_norm_` returns). `model(src,
# tgt_in)` returns logits `[B, St-1, V]`. Use your `shift_targets` and `sequence_loss`, clip the
# gradients to `max_norm`, step the optimizer, then the scheduler. Lesson §6.5.

# %% nbgrader="solution:train_step"
def train_step(model, src, tgt, optimizer, scheduler, max_norm, pad_id, label_smoothing):
    """One update -> (loss, gradient norm before clipping)."""
    ### BEGIN SOLUTION
    model.train()
    optimizer.zero_grad()
    tgt_in, labels = shift_targets(tgt)
    loss = sequence_loss(model(src, tgt_in), labels, pad_id, label_smoothing)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    scheduler.step()
    return loss.item(), norm.item()
    ### END SOLUTION


# %% nbgrader="test:test_train_step:3"
ch06.check_train_step(train_step)

# %% nbgrader="test:test_train_step_by_hand:1"
# Hidden test: your step must be your own code, not the reference's train_step.
### BEGIN HIDDEN TESTS
ch06.check_train_step_by_hand(train_step)
### END HIDDEN TESTS

# %% [markdown]
# ## 5. Greedy decoding (4 points)
#
# `greedy_decode(model, src, max_len, bos_id, eos_id, pad_id)` translates `src [B, Ss]` and returns a
# LongTensor `[B, T]` that starts with `bos_id`; after a row's `eos_id` come `pad_id` tokens. The
# model has `encode(src) -> (memory, src_mask)` and
# `decode(tgt_in, memory, src_mask, tgt_mask) -> logits [B, t, V]`, where `tgt_mask` is a bool mask
# (True = may attend) that you build, e.g. with `causal_mask(t, device)` from `tformer_ref.masks`;
# like `nn.TransformerDecoder`, no mask means *no* masking. Put the model in eval mode, turn gradients
# off, encode once, add the argmax of the last position at each step, and stop as soon as every
# row has produced EOS (or after `max_len` new tokens). Lesson §6.7.

# %% nbgrader="solution:greedy_decode"
def greedy_decode(model, src, max_len, bos_id, eos_id, pad_id):
    """src [B, Ss] -> [B, T] token ids: BOS, the decoded tokens, EOS, then padding."""
    ### BEGIN SOLUTION
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        finished = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            logits = model.decode(out, memory, src_mask, causal_mask(out.size(1), src.device))
            nxt = logits[:, -1].argmax(dim=-1).masked_fill(finished, pad_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            finished |= nxt == eos_id
            if finished.all():
                break
    return out
    ### END SOLUTION


# %% nbgrader="test:test_greedy_decode:3"
ch06.check_greedy_decode(greedy_decode)

# %% nbgrader="test:test_greedy_by_hand:1"
# Hidden test: your loop must be your own, not the reference's greedy_decode.
### BEGIN HIDDEN TESTS
ch06.check_greedy_by_hand(greedy_decode)
### END HIDDEN TESTS

# %% [markdown]
# ## Done?
#
# Run the self-grading command above. Then open the [capstone](capstone.ipynb): the same pieces
# train the seed's 8-head, 2-layer model to 99 % exact match in about a minute on a laptop CPU.
