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
# returns the tuple `(tgt_in, labels)`, both `[B, St-1]` and batch-first: the decoder reads
# `BOS y1 … yn` and must predict `y1 … yn EOS`. `tgt_in` is `tgt` without its last position and
# `labels` is `tgt` without its first: the shift only slices, so every token keeps its id and its
# dtype (BOS, EOS and PAD included: the loss leaves the PAD labels out), and `tgt` itself is left
# unchanged. The seed's slices `trg[:-1, :]` / `trg[1:, :]` are for sequence-first tensors.
# Lesson [§6.2](lesson.ipynb#id-6-2-teacher-forcing-and-the-shift).


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
# **See it train (optional, not graded).** This cell trains a small model twice, once
# with your `shift_targets` and once with the reference's, with the same seed, data
# and optimizer, and plots both runs: the held-out loss and next-token accuracy (a few
# seconds). Run it after a failing check to see what the mistake does to training.

# %% tags=["nbval-skip"]
from tformer_grading.pictures.training_curves import show_training

show_training("shift_targets", shift_targets)

# %% [markdown]
# ## 2. A loss that ignores padding (3 points)
#
# `sequence_loss(logits, labels, pad_id, label_smoothing)` takes `logits [B, St, V]` (raw scores,
# before any softmax) and `labels [B, St]` and returns the mean cross-entropy over the real label
# tokens: every label that is not `pad_id` counts once and equally (a mean over tokens, not over
# sequences), every `pad_id` label not at all. Return it as a scalar tensor in the logits' dtype that
# gradients flow through (no `.item()`), and leave `logits` and `labels` unchanged (write into
# neither: no `labels[...] = ...`, no in-place ops on them). Label smoothing is PyTorch's: with
# `label_smoothing` $= \varepsilon$ the target puts $1 - \varepsilon$ on the label and spreads
# $\varepsilon$ evenly over all $V$ classes, the label included ($\varepsilon / V$ each), exactly as
# `F.cross_entropy(..., label_smoothing=ε)` does; the loss is the cross-entropy to that target (not
# the KL divergence, which is smaller by the target's entropy). Lesson [§6.3](lesson.ipynb#id-6-3-a-loss-that-ignores-padding).


# %% nbgrader="solution:sequence_loss"
def sequence_loss(logits, labels, pad_id, label_smoothing):
    """logits [B, St, V], labels [B, St] -> scalar."""
    ### BEGIN SOLUTION
    return F.cross_entropy(
        logits.reshape(-1, logits.size(-1)),
        labels.reshape(-1),
        ignore_index=pad_id,
        label_smoothing=label_smoothing,
    )
    ### END SOLUTION


# %% nbgrader="test:test_sequence_loss:3"
ch06.check_sequence_loss(sequence_loss)
### BEGIN HIDDEN TESTS
ch06.check_by_hand(
    "sequence_loss",
    sequence_loss,
    (torch.randn(2, 3, 5), torch.tensor([[3, 4, 0], [4, 0, 0]]), 0, 0.1),
)
### END HIDDEN TESTS

# %% [markdown]
# **See it train (optional, not graded).** This cell trains a small model twice, once
# with your `sequence_loss` and once with the reference's (the dashed line is the loss
# your function reports), with the same seed, data and optimizer, and plots both runs:
# the held-out loss and next-token accuracy (a few seconds). Run it after a failing
# check to see what the mistake does to training.

# %% tags=["nbval-skip"]
from tformer_grading.pictures.training_curves import show_training

show_training("sequence_loss", sequence_loss)

# %% [markdown]
# ## 3. The Noam schedule (2 + 2 points)
#
# Vaswani et al. ([§5.3](../ch05_model/lesson.ipynb#id-5-3-learned-positions-and-max-length)) set the learning rate of update $n = 1, 2, \dots$ to
# $\text{lr}(n) = d_\text{model}^{-0.5}\,\min(n^{-0.5},\; n \cdot \text{warmup}^{-1.5})$.
#
# `noam_lambda(step, d_model, warmup)` returns the multiplier `LambdaLR` should use at its `step`
# (0, 1, 2, …; step 0 is the first update, $n = 1$; step 0 must not divide by zero). The optimizer's
# own lr is 1.0, so the multiplier *is* the learning rate: multiply in no other factor or base rate.
# `make_scheduler(optimizer, d_model, warmup)` returns a scheduler for that optimizer (leave its lr
# at 1.0) that sets `noam_lambda(0, d_model, warmup)` for the first update as soon as it is created,
# and whose every `step()` moves on by exactly one step, sets the rate for the next update and does
# nothing else (it never calls `optimizer.step()`); the training loop calls `optimizer.step()` then
# `scheduler.step()`. Lesson [§6.4](lesson.ipynb#id-6-4-learning-rate-and-warm-up).


# %% nbgrader="solution:noam"
def noam_lambda(step, d_model, warmup):
    """LambdaLR multiplier for 0-based ``step``."""
    ### BEGIN SOLUTION
    n = step + 1
    return d_model**-0.5 * min(n**-0.5, n * warmup**-1.5)
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
# update on the batch `src [B, Ss]`, `tgt [B, St]`; `model(src, tgt_in)` returns logits
# `[B, St-1, V]`. train_step must: put the model in training mode, zero the gradients, compute the
# loss of shift_targets/sequence_loss, backward, clip to max_norm, optimizer.step(), then
# scheduler.step(), once each. In detail:
#
# 1. `model.train()`: the model may come to you in eval mode (after an evaluation, say);
# 2. zero the gradients (`optimizer.zero_grad()`), so that nothing of an earlier batch is added to
#    this one's (clearing them right after the update works too);
# 3. feed the decoder `tgt_in` from your `shift_targets(tgt)` and take your
#    `sequence_loss(logits, labels, pad_id, label_smoothing)`, unscaled;
# 4. `loss.backward()`, once;
# 5. `torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)`: all the gradients together, to
#    total norm `max_norm` (not element by element, not each parameter on its own), the norm
#    being the 2-norm (`clip_grad_norm_`'s default `norm_type=2`);
# 6. `optimizer.step()` once, then `scheduler.step()` once.
#
# Return `(loss, grad_norm)` as two Python floats (`loss.item()`, `norm.item()`, not tensors): the
# loss of this batch before the update, and the total gradient norm *before* clipping (what
# `clip_grad_norm_` returns). Lesson [§6.5](lesson.ipynb#id-6-5-exploding-gradients-and-clipping).


# %% nbgrader="solution:train_step"
def train_step(
    model, src, tgt, optimizer, scheduler, max_norm, pad_id, label_smoothing
):
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
# **See it train (optional, not graded).** This cell trains a small model twice, once
# with your `train_step` and once with the reference's, with the same seed, data and
# optimizer, and plots both runs: the held-out loss and next-token accuracy (a few
# seconds). Run it after a failing check to see what the mistake does to training.

# %% tags=["nbval-skip"]
from tformer_grading.pictures.training_curves import show_training

show_training("train_step", train_step)

# %% [markdown]
# ## 5. Greedy decoding (4 points)
#
# greedy_decode(model, src, max_len, bos_id, eos_id, pad_id) returns a LongTensor [B, T] whose first
# column is bos_id, followed by at most max_len new tokens per row; after a row's eos_id come
# pad_id tokens. So `T <= max_len + 1`, and a row that never produces `eos_id` gets exactly
# `max_len` new tokens. Use the ids you are given, not the usual 1, 2, 0. The model has
# `encode(src) -> (memory, src_mask)` and `decode(tgt_in, memory, src_mask, tgt_mask) -> logits
# [B, t, V]`, where `tgt_in` is a LongTensor of token ids and `tgt_mask` a bool mask (True = may
# attend) that you build, e.g. with `causal_mask(t, device)` from `tformer_ref.masks`; like
# `nn.TransformerDecoder`, no mask means *no* masking. Put the model in eval mode, turn gradients
# off, encode once and pass that memory to every step, feed the decoder the whole prefix so far
# (BOS and every token since: there is no cache), append the argmax over the vocabulary of the last
# position at each step (one id in 0 .. V-1 per row), and stop as soon as every row has produced
# EOS (or after `max_len` new tokens). Lesson [§6.7](lesson.ipynb#id-6-7-greedy-and-beam-decoding).
#
# **Which model.** The check runs your function on its own small model with exactly the
# interface above: four arguments to `decode`, and no causal mask unless you pass one. The
# lesson's `tformer_ref.model.Transformer` is different: its `decode(tgt_in, memory, src_mask)`
# takes three arguments and builds the causal mask itself, so your four-argument call raises a
# `TypeError` on it. To try your loop on a lesson model, give it a `decode` that takes the mask
# and leaves it to the model, for example
# `model.decode = lambda tgt_in, memory, src_mask, tgt_mask=None: Transformer.decode(model, tgt_in, memory, src_mask)`
# (with `from tformer_ref.model import Transformer`).


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
            logits = model.decode(
                out, memory, src_mask, causal_mask(out.size(1), src.device)
            )
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
# train the seed's 8-head, 2-layer model until it gets nearly every held-out date exactly right.
