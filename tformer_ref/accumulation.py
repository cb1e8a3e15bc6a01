"""Gradient accumulation: k micro-batches, one optimizer step, the same update as one big batch.

Gradients add up across ``backward`` calls until they are zeroed. So k
micro-batches give the gradient of one batch k times the size, *provided* each
micro-batch's loss is scaled so that the k losses add up to the big batch's loss:

- big-batch loss = (sum of all token losses) / (all tokens). Each micro-batch
  therefore contributes ``loss_sum_i / N_total``, N_total counted over all k
  micro-batches (and over all processes under DDP) before the first backward.
- dividing each micro-batch's *mean* loss by k is the same only when every
  micro-batch holds the same number of tokens; with padding it usually does not.
- not dividing at all makes the gradient k times too large (k× the learning rate).

Zero the gradients once per optimizer step (not per micro-batch: that keeps only
the last micro-batch), step the scheduler once per optimizer step (its step
counts updates, not micro-batches), and under DDP skip the gradient all-reduce on
all but the last micro-batch with ``model.no_sync()``: the accumulated gradients
are then reduced once.
"""
from __future__ import annotations

import contextlib
from typing import Callable, Sequence

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from .amp import autocast, optimizer_step

LossFn = Callable[[torch.nn.Module, object], "tuple[torch.Tensor, int]"]


def _is_ddp(model) -> bool:
    return isinstance(model, DistributedDataParallel)


def global_count(n: int, device) -> int:
    """``n`` summed over all processes (just ``n`` without a process group)."""
    if not (dist.is_available() and dist.is_initialized()):
        return n
    t = torch.tensor([n], dtype=torch.int64, device=device)
    dist.all_reduce(t)  # SUM by default
    return int(t.item())


def train_accumulated(model: torch.nn.Module, micro_batches: Sequence, optimizer: torch.optim.Optimizer,
                      loss_fn: LossFn, *, count_tokens: Callable[[object], int] | None = None,
                      scheduler=None, scaler: torch.amp.GradScaler | None = None, max_norm: float | None = None,
                      amp_dtype: torch.dtype | None = None) -> float:
    """One optimizer step from ``micro_batches``; returns the step's mean token loss (this process's).

    Args:
        model: any module, or a ``DistributedDataParallel`` wrapping one.
        micro_batches: the k batches of this step (e.g. token tensors [b, S]).
        loss_fn: ``loss_fn(model, batch) -> (loss_sum, n_tokens)``: the *summed* loss over the
            batch's real tokens (scalar tensor) and how many there are (int).
        count_tokens: ``count_tokens(batch) -> int`` without running the model. Given, the loss is
            normalised by the total number of tokens of the step (over all processes under DDP),
            which equals the big batch exactly. Omitted, each micro-batch's mean loss is divided
            by k, which equals the big batch only when all micro-batches hold as many tokens.
        scheduler: stepped once, after the optimizer step (not when a GradScaler skipped it).
        scaler: a ``torch.amp.GradScaler`` (fp16); gradients are unscaled before clipping.
        max_norm: clip the gradient norm to this value.
        amp_dtype: run forward passes under autocast with this dtype (None: no autocast).
    """
    micro_batches = list(micro_batches)
    k = len(micro_batches)
    if k == 0:
        raise ValueError("micro_batches is empty: expected at least one batch")
    params = list(model.parameters())
    device = params[0].device
    world = dist.get_world_size() if _is_ddp(model) else 1
    if count_tokens is not None:
        n_total = global_count(sum(int(count_tokens(b)) for b in micro_batches), device)
        if n_total == 0:
            raise ValueError("the micro-batches hold no target tokens (count_tokens summed to 0)")
    optimizer.zero_grad(set_to_none=True)
    loss_total, tokens_total = 0.0, 0
    for i, batch in enumerate(micro_batches):
        last = i == k - 1
        # Under DDP, all-reduce only once, on the last backward of the step.
        sync = contextlib.nullcontext() if (last or not _is_ddp(model)) else model.no_sync()
        with sync:
            with (autocast(device, amp_dtype) if amp_dtype is not None else contextlib.nullcontext()):
                loss_sum, n_tokens = loss_fn(model, batch)
            if count_tokens is not None:
                # DDP averages gradients over the world, so multiply back by its size.
                loss = loss_sum * (world / n_total)
            else:
                loss = loss_sum / max(int(n_tokens), 1) / k
            (scaler.scale(loss) if scaler is not None else loss).backward()
        loss_total += float(loss_sum.detach())
        tokens_total += int(n_tokens)
    stepped = optimizer_step(optimizer, params, scaler, max_norm)
    if scheduler is not None and stepped:
        scheduler.step()
    return loss_total / max(tokens_total, 1)


def train_big_batch(model: torch.nn.Module, batch, optimizer: torch.optim.Optimizer, loss_fn: LossFn,
                    scheduler=None, max_norm: float | None = None) -> float:
    """The reference the accumulation is compared with: one step on the whole batch, mean token loss."""
    optimizer.zero_grad(set_to_none=True)
    loss_sum, n_tokens = loss_fn(model, batch)
    (loss_sum / max(int(n_tokens), 1)).backward()
    optimizer_step(optimizer, model.parameters(), None, max_norm)
    if scheduler is not None:
        scheduler.step()
    return float(loss_sum.detach()) / max(int(n_tokens), 1)
