# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise 7 — Mixed precision, accumulation and data-parallel loading
#
# Three pieces of a training loop that scales: a gradient-accumulation step that gives *exactly* the
# big batch's update, one mixed-precision step with a `GradScaler`, and the data loader each DDP
# process uses. The lesson ([lesson.ipynb](lesson.ipynb)) explains every step.
#
# **How to work.** Replace each `# YOUR CODE HERE` / `raise NotImplementedError()` with your code,
# then run the check cell below it. A check trains a tiny model with your code, compares the
# parameters it ends with against the course's reference, and when they differ tells you *which*
# mistake it looks like and which lesson section explains it. Do not edit the check cells: they are
# restored before grading, and some grading cases are hidden. Write the steps yourself: a hidden
# test fails code that calls the course's own training functions.
#
# **Grade yourself** at any time, from the course folder:
# `python -m tformer_grading book/ch07_scale/exercise.ipynb`
#
# Everything runs on the CPU in seconds, and unchanged on a GPU.

# %% nbgrader="locked:setup"
import torch
from torch.utils.data import DataLoader, DistributedSampler

from tformer_grading.checks import ch07
from tformer_ref.device import get_device, seed_everything

seed_everything(0)
device = get_device()
PAD = 0  # the padding token id: targets equal to PAD are not counted


def count_targets(batch):
    """The number of real next-token targets in a token batch [b, S]: the targets are
    batch[:, 1:]."""
    return int((batch[:, 1:] != PAD).sum())


# %% [markdown]
# ## 1. A gradient-accumulation step (4 points)
#
# `accumulation_step(model, micro_batches, optimizer, scheduler, loss_fn)` makes **one** optimizer
# step from a list of micro-batches (token tensors `[b_i, S]`, padded with `PAD`), and must leave the
# model exactly where one step on their concatenation would. `loss_fn(model, batch)` returns
# `(loss_sum, n_tokens)`: the loss *summed* over the batch's real target tokens (a scalar tensor)
# and how many there are (an int).
#
# The big batch's loss is the mean over all its target tokens. The micro-batches hold different
# numbers of real tokens, so think about what to divide by (lesson [§7.3](lesson.ipynb#id-7-3-gradient-accumulation)). `count_targets(batch)`
# above counts a batch's tokens without running the model. Your step must:
#
# 1. zero the gradients once per call: before the first backward (or after the step), never
#    between micro-batches;
# 2. call backward for every micro-batch, so that the gradient `optimizer.step()` uses is the
#    gradient of the big batch's mean loss: every token weighs the same, whichever micro-batch
#    holds it, and nothing rescales it before the step (no clipping: that is not part of
#    this exercise);
# 3. call `optimizer.step()` once, after the last micro-batch, then `scheduler.step()` once (the
#    schedule counts optimizer steps, and the step uses the learning rate before it advances).
#
# It returns nothing. The check records what your step calls on the optimizer and the scheduler,
# the learning rate the step used, and measures the divisor each micro-batch's loss got.


# %% nbgrader="solution:accumulation_step"
def accumulation_step(model, micro_batches, optimizer, scheduler, loss_fn):
    """One optimizer step from ``micro_batches``, equal to one step on their
    concatenation."""
    ### BEGIN SOLUTION
    optimizer.zero_grad()
    n_total = sum(count_targets(batch) for batch in micro_batches)
    for batch in micro_batches:
        loss_sum, _ = loss_fn(model, batch)
        # The k terms add up to (sum of all token losses) / (all tokens): the big
        # batch's mean.
        (loss_sum / n_total).backward()
    optimizer.step()
    scheduler.step()
    ### END SOLUTION


# %% nbgrader="test:test_accumulation_step:4"
ch07.check_accumulation_step(accumulation_step)
### BEGIN HIDDEN TESTS
ch07.check_accumulation_step(accumulation_step, hidden=True)
ch07.check_accumulation_by_hand(accumulation_step)
### END HIDDEN TESTS

# %% [markdown]
# **See it train (optional, not graded).** This cell trains a small model twice, once
# with your `accumulation_step` and once with the reference's, with the same seed,
# data and optimizer, and plots both runs: the held-out loss and next-token accuracy
# (a few seconds). Run it after a failing check to see what the mistake does to
# training.

# %% tags=["nbval-skip"]
from tformer_grading.pictures.training_curves import show_training

show_training("accumulation_step", accumulation_step)

# %% [markdown]
# ## 2. One mixed-precision step (4 points)
#
# `amp_step(model, batch, loss_fn, optimizer, scaler, max_norm)` makes one training step in mixed
# precision; here `loss_fn(model, batch)` returns the mean loss (a scalar tensor). `scaler` is a
# `torch.amp.GradScaler` created for the model's device: use it, do not create another. Your
# step must:
#
# 1. zero the gradients once per step: before the backward (or after the update);
# 2. run the forward (`loss_fn`) under `torch.amp.autocast` for the model's device type, in
#    `torch.bfloat16` on a CPU and `torch.float16` on CUDA (lesson [§7.1](lesson.ipynb#id-7-1-mixed-precision-with-torch-amp): not the seed's deprecated
#    `torch.cuda.amp`). The backward belongs after the block, as PyTorch recommends (the check
#    accepts both);
# 3. backward on `scaler.scale(loss)`, unscale the gradients once (`scaler.unscale_(optimizer)`),
#    clip the norm of all the gradients together to `max_norm` (`clip_grad_norm_`), step through
#    the scaler (`scaler.step(optimizer)` skips a step whose gradients overflowed: do not also call
#    `optimizer.step()`) and update it once (`scaler.update()`), in this order (lesson [§7.2](lesson.ipynb#id-7-2-gradscaler-unscale-and-clipping)):
#    the step uses the gradients as they are when `scaler.step` runs;
# 4. return the loss `loss_fn` returned, unscaled (a tensor or a float): not `scaler.scale(loss)`.
#
# The check records your calls on the scaler and the optimizer, the gradient right after your
# backward and the one the optimizer steps with, and the scale after an overflowing step.


# %% nbgrader="solution:amp_step"
def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm):
    """One mixed-precision training step; returns the loss."""
    ### BEGIN SOLUTION
    device_type = next(model.parameters()).device.type
    dtype = torch.float16 if device_type == "cuda" else torch.bfloat16
    optimizer.zero_grad()
    with torch.amp.autocast(device_type, dtype=dtype):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(
        optimizer
    )  # the gradients are true-sized again: now clipping means what it says
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)  # skipped when a gradient is inf/NaN
    scaler.update()
    return loss.detach()
    ### END SOLUTION


# %% nbgrader="test:test_amp_step:4"
ch07.check_amp_step(amp_step)
### BEGIN HIDDEN TESTS
ch07.check_amp_by_hand(amp_step)
### END HIDDEN TESTS

# %% [markdown]
# **See it train (optional, not graded).** This cell trains a small model twice, once
# with your `amp_step` and once with the reference's, with the same seed, data and
# optimizer, and plots both runs: the held-out loss and next-token accuracy (a few
# seconds). Run it after a failing check to see what the mistake does to training.

# %% tags=["nbval-skip"]
from tformer_grading.pictures.training_curves import show_training

show_training("amp_step", amp_step)

# %% [markdown]
# ## 3. The loader of one DDP process (3 points)
#
# Under DDP every process runs the same script with its own `rank` (0 … `world_size` − 1). Write
# `make_loader(dataset, rank, world_size, epoch, batch_size)`, the `DataLoader` that process `rank`
# iterates in epoch `epoch` (lesson [§7.5](lesson.ipynb#id-7-5-distributedsampler-and-set-epoch)). You need no process group: `DistributedSampler` takes
# `num_replicas` and `rank` as arguments. The check reads which samples every rank gets, epoch by
# epoch:
#
# - each epoch the processes split the dataset between them: together they read every sample once
#   (a `DistributedSampler` may repeat, or with its `drop_last` leave out, fewer than `world_size`
#   samples so that every rank gets as many; do not pass `drop_last=True` to the `DataLoader`);
# - `batch_size` is the batch of one process: every batch but the last holds `batch_size` samples;
# - the order is shuffled and changes from one epoch to the next, and so does which samples each
#   process gets;
# - two calls with the same arguments give the same order: the processes compute the split
#   independently, so the shuffle must be seeded.


# %% nbgrader="solution:make_loader"
def make_loader(dataset, rank, world_size, epoch, batch_size):
    """The DataLoader process ``rank`` of ``world_size`` iterates in epoch ``epoch``."""
    ### BEGIN SOLUTION
    sampler = DistributedSampler(
        dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=0
    )
    sampler.set_epoch(
        epoch
    )  # reseeds the shuffle: without it every epoch has the same order
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)
    ### END SOLUTION


# %% nbgrader="test:test_make_loader:3"
ch07.check_make_loader(make_loader)
### BEGIN HIDDEN TESTS
ch07.check_make_loader(make_loader, world_sizes=(3,), n=20, batch_size=4)
### END HIDDEN TESTS

# %% [markdown]
# ## Done?
#
# Run the self-grading command above. Then read the recap of the lesson once more: the lesson
# runs your kind of loader in two real processes and shows that DDP with accumulation ends with
# the same parameters as one process on the whole batch.
