"""Gradient accumulation: k micro-batches, one step, the update of one big batch.

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

from contextlib import nullcontext
from typing import Callable, Sequence

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from .amp import autocast, optimizer_step

LossFn = Callable[[torch.nn.Module, object], "tuple[torch.Tensor, int]"]


def _is_ddp(model) -> bool:
    return isinstance(model, DistributedDataParallel)


def global_count(n: int, device) -> int:
    """``n`` summed over all processes (just ``n`` without a process group).

    Taught in §7.4 'DistributedDataParallel is data parallel' (book/ch07_scale).

    Examples::

        >>> global_count(12, "cpu")  # no process group: this process's own count
        12
    """
    if not (dist.is_available() and dist.is_initialized()):
        return n
    t = torch.tensor([n], dtype=torch.int64, device=device)
    dist.all_reduce(t)  # SUM by default
    return int(t.item())


def train_accumulated(
    model: torch.nn.Module,
    micro_batches: Sequence,
    optimizer: torch.optim.Optimizer,
    loss_fn: LossFn,
    *,
    count_tokens: Callable[[object], int] | None = None,
    scheduler=None,
    scaler: torch.amp.GradScaler | None = None,
    max_norm: float | None = None,
    amp_dtype: torch.dtype | None = None,
) -> float:
    """One optimizer step from ``micro_batches``; returns the step's mean token loss
    (this process's).

    Taught in §7.3 'Gradient accumulation' (book/ch07_scale).

    Args:
        model: any module, or a ``DistributedDataParallel`` wrapping one.
        micro_batches: the k batches of this step (e.g. token tensors [b, S]).
        loss_fn: ``loss_fn(model, batch) -> (loss_sum, n_tokens)``: the *summed* loss
            over the batch's real tokens (scalar tensor) and how many there are (int).
        count_tokens: ``count_tokens(batch) -> int`` without running the model. Given,
            the loss is normalised by the total number of tokens of the step (over all
            processes under DDP), which equals the big batch exactly. Omitted, each
            micro-batch's mean loss is divided by k, which equals the big batch only
            when all micro-batches hold as many tokens.
        scheduler: stepped once, after the optimizer step (not when a GradScaler
            skipped it).
        scaler: a ``torch.amp.GradScaler`` (fp16); gradients are unscaled before
            clipping.
        max_norm: clip the gradient norm to this value.
        amp_dtype: run forward passes under autocast with this dtype (None: no
            autocast).

    Examples::

        >>> from tformer_ref.toy_lm import (TinyCausalLM, count_targets, lm_loss_sum,
        ...                                 make_token_data)
        >>> model, micro_batches = TinyCausalLM(), make_token_data(8).split(4)  # k = 2
        >>> opt = torch.optim.SGD(model.parameters(), lr=0.1)
        >>> loss = train_accumulated(model, micro_batches, opt, lm_loss_sum,
        ...                          count_tokens=count_targets)
        >>> 1.0 < loss < 5.0  # near ln 16 at initialisation
        True
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
            raise ValueError(
                "the micro-batches hold no target tokens (count_tokens summed to 0)"
            )
    optimizer.zero_grad(set_to_none=True)
    loss_total, tokens_total = 0.0, 0
    for i, batch in enumerate(micro_batches):
        last = i == k - 1
        # Under DDP, all-reduce only once, on the last backward of the step.
        sync = nullcontext() if last or not _is_ddp(model) else model.no_sync()
        cast = nullcontext() if amp_dtype is None else autocast(device, amp_dtype)
        with sync:
            with cast:
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


def train_big_batch(
    model: torch.nn.Module,
    batch,
    optimizer: torch.optim.Optimizer,
    loss_fn: LossFn,
    scheduler=None,
    max_norm: float | None = None,
) -> float:
    """The reference the accumulation is compared with: one step on the whole batch,
    mean token loss.

    Taught in §7.3 'Gradient accumulation' (book/ch07_scale).

    Examples::

        >>> import copy
        >>> from tformer_ref.toy_lm import (TinyCausalLM, count_targets, lm_loss_sum,
        ...                                 make_token_data)
        >>> data, big = make_token_data(8), TinyCausalLM()
        >>> acc = copy.deepcopy(big)
        >>> opts = [torch.optim.SGD(m.parameters(), lr=0.5) for m in (big, acc)]
        >>> loss_big = train_big_batch(big, data, opts[0], lm_loss_sum)
        >>> loss_acc = train_accumulated(acc, data.split(3), opts[1], lm_loss_sum,
        ...                              count_tokens=count_targets)  # 3 + 3 + 2 rows
        >>> same_step = torch.allclose(big.head.weight, acc.head.weight)
        >>> abs(loss_big - loss_acc) < 1e-6, same_step
        (True, True)
    """
    optimizer.zero_grad(set_to_none=True)
    loss_sum, n_tokens = loss_fn(model, batch)
    (loss_sum / max(int(n_tokens), 1)).backward()
    optimizer_step(optimizer, model.parameters(), None, max_norm)
    if scheduler is not None:
        scheduler.step()
    return float(loss_sum.detach()) / max(int(n_tokens), 1)
