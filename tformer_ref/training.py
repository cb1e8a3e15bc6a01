"""Training an encoder–decoder: target shift, loss, Noam schedule, one step, the loop.

Shape letters: B batch, Ss source length, St target length (BOS ... EOS, padded), V
vocabulary. All tensors are batch-first.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.lr_scheduler import LambdaLR


def shift_targets(tgt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Teacher forcing: tgt [B, St] -> (decoder input [B, St-1], labels [B, St-1]).

    The decoder reads ``BOS y1 .. yn`` and must predict ``y1 .. yn EOS``: position t's
    label is the token at t+1. Slice the *time* axis, which is axis 1 for batch-first
    tensors; the seed's ``trg[:-1, :]`` / ``trg[1:, :]`` slices axis 0, the batch, and
    is only right for sequence-first [St, B] tensors.

    Taught in §6.2 'Teacher forcing and the shift' (book/ch06_training).

    Examples::

        >>> tgt_in, labels = shift_targets(torch.tensor([[1, 7, 8, 2]]))  # BOS 7 8 EOS
        >>> tgt_in, labels
        (tensor([[1, 7, 8]]), tensor([[7, 8, 2]]))
    """
    if not isinstance(tgt, torch.Tensor) or tgt.dim() != 2:
        got = tuple(tgt.shape) if isinstance(tgt, torch.Tensor) else type(tgt).__name__
        raise ValueError(f"tgt must be a batch-first tensor [B, St], got {got}")
    if tgt.size(1) < 2:
        raise ValueError(
            "tgt must hold at least BOS and one more token (St >= 2), "
            f"got St={tgt.size(1)}"
        )
    return tgt[:, :-1], tgt[:, 1:]


def sequence_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    pad_id: int = 0,
    label_smoothing: float = 0.0,
) -> torch.Tensor:
    """Mean cross-entropy over the real (non-pad) label tokens.

    logits [B, St, V], labels [B, St] -> scalar. Padding positions are left out of both
    the sum and the count (``ignore_index``); label smoothing spreads
    ``label_smoothing`` of each target's probability over the whole vocabulary.

    Taught in §6.3 'A loss that ignores padding' (book/ch06_training).

    Examples::

        >>> logits = torch.zeros(1, 3, 5)  # uniform over V = 5: ln 5 per real token
        >>> round(sequence_loss(logits, torch.tensor([[4, 2, 0]])).item(), 4)  # 0 = PAD
        1.6094
    """
    if logits.dim() != 3 or labels.shape != logits.shape[:2]:
        raise ValueError(
            "expected logits [B, St, V] and labels [B, St], "
            f"got {tuple(logits.shape)} and {tuple(labels.shape)}"
        )
    return F.cross_entropy(
        logits.reshape(-1, logits.size(-1)),
        labels.reshape(-1),
        ignore_index=pad_id,
        label_smoothing=label_smoothing,
    )


def noam_lambda(step: int, d_model: int, warmup: int, factor: float = 1.0) -> float:
    """The learning rate for LambdaLR's ``step`` (0 = the first optimizer step), with
    base lr 1.

    Vaswani et al. §5.3: lr(n) = factor · D^-0.5 · min(n^-0.5, n · warmup^-1.5) for
    update n = 1, 2, ... LambdaLR counts from 0, so n = step + 1: no division by zero,
    and the first update gets lr(1), not 0. The rate rises linearly for ``warmup``
    steps, peaks, then decays like 1/√n.

    Taught in §6.4 'Learning rate and warm-up' (book/ch06_training).

    Examples::

        >>> noam_lambda(0, d_model=512, warmup=4000) == 512**-0.5 * 4000**-1.5  # n = 1
        True
        >>> max(range(8000), key=lambda s: noam_lambda(s, 512, 4000))  # n = warmup
        3999
    """
    if d_model <= 0 or warmup <= 0:
        raise ValueError(
            "d_model and warmup must be positive, "
            f"got d_model={d_model}, warmup={warmup}"
        )
    n = step + 1
    return factor * d_model**-0.5 * min(n**-0.5, n * warmup**-1.5)


def noam_scheduler(
    optimizer: torch.optim.Optimizer, d_model: int, warmup: int, factor: float = 1.0
) -> LambdaLR:
    """A LambdaLR following :func:`noam_lambda`. The optimizer's lr must be 1.0
    (LambdaLR multiplies it).

    It only *sets* the learning rate: call ``optimizer.step()`` then
    ``scheduler.step()`` once per update. (The seed's scheduler also stepped the
    optimizer: called next to ``optimizer.step()`` that updates twice, and under AMP it
    bypasses ``GradScaler.step``.)

    Taught in §6.4 'Learning rate and warm-up' (book/ch06_training).

    Examples::

        >>> opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
        >>> sched = noam_scheduler(opt, d_model=512, warmup=4000)
        >>> opt.param_groups[0]["lr"] == noam_lambda(0, 512, 4000)  # set for update 1
        True
    """
    for group in optimizer.param_groups:
        if group["lr"] != 1.0:
            raise ValueError(
                "noam_scheduler needs the optimizer's lr set to 1.0 "
                f"(LambdaLR multiplies it), got {group['lr']}"
            )
    return LambdaLR(optimizer, lambda step: noam_lambda(step, d_model, warmup, factor))


def train_step(
    model: nn.Module,
    src: torch.Tensor,
    tgt: torch.Tensor,
    optimizer: torch.optim.Optimizer,
    scheduler=None,
    max_norm: float | None = 1.0,
    pad_id: int = 0,
    label_smoothing: float = 0.0,
) -> tuple[float, float]:
    """One update on a batch: src [B, Ss], tgt [B, St] -> (loss, gradient norm before
    clipping).

    Order matters: zero the gradients, forward, loss, backward, *then* clip (there are
    no gradients before backward), then step the optimizer (clipping after it changes
    nothing), then the scheduler.

    Taught in §6.5 'Exploding gradients and clipping' (book/ch06_training).

    Examples::

        >>> from tformer_ref.model import Transformer
        >>> model = Transformer(9, 9, d_model=8, n_heads=2, n_layers=1, d_ff=16)
        >>> src, tgt = torch.tensor([[4, 5, 2]]), torch.tensor([[1, 5, 4, 2]])
        >>> optimizer = torch.optim.SGD(model.parameters())
        >>> loss, grad_norm = train_step(model, src, tgt, optimizer)
        >>> loss > 0 and grad_norm > 0
        True
    """
    model.train()
    optimizer.zero_grad(set_to_none=True)
    tgt_in, labels = shift_targets(tgt)
    loss = sequence_loss(model(src, tgt_in), labels, pad_id, label_smoothing)
    loss.backward()
    params = [p for p in model.parameters() if p.grad is not None]
    if max_norm is not None:
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
    else:
        norms = torch.stack([p.grad.detach().norm() for p in params])
        norm = torch.linalg.vector_norm(norms)
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    return loss.item(), norm.item()


@dataclass
class History:
    """What :func:`fit` records, one entry per step (``step``, ``loss``, ``grad_norm``,
    ``lr``, ``time``) and one per evaluation (``eval_step``, ``eval_acc``).

    Taught in §6.4 'Learning rate and warm-up' (book/ch06_training).

    Examples::

        >>> history = History(step=[1, 2], time=[0.5, 1.2])
        >>> history.eval_step, history.eval_acc = [2], [0.9]
        >>> history.time_to(0.8), history.time_to(0.95)  # 1.2 s to 80 %; 95 %: never
        (1.2, None)
    """

    step: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    grad_norm: list[float] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)
    time: list[float] = field(default_factory=list)
    eval_step: list[int] = field(default_factory=list)
    eval_acc: list[float] = field(default_factory=list)

    def time_to(self, accuracy: float) -> float | None:
        """Seconds of training until the first evaluation reached ``accuracy``, or
        None."""
        for s, a in zip(self.eval_step, self.eval_acc):
            if a >= accuracy:
                return self.time[s - 1] if s > 0 else 0.0
        return None


def fit(
    model: nn.Module,
    loader: Iterable,
    optimizer: torch.optim.Optimizer,
    scheduler=None,
    *,
    epochs: int = 1,
    max_steps: int | None = None,
    max_norm: float | None = 1.0,
    pad_id: int = 0,
    label_smoothing: float = 0.0,
    device=None,
    evaluate: Callable[[nn.Module], float] | None = None,
    eval_every: int = 100,
    target: float | None = None,
    time_budget: float | None = None,
    progress: bool = True,
    history: History | None = None,
) -> History:
    """Train for ``epochs`` passes over ``loader`` (batches of (src, tgt)), or
    ``max_steps`` updates.

    ``evaluate(model) -> accuracy`` runs every ``eval_every`` steps and at the end;
    training stops early once it reaches ``target``, or once ``time_budget`` seconds of
    training have passed. The clock (``history.time``) counts training steps only, not
    evaluations. A tqdm bar shows progress (tqdm.auto: a widget in notebooks, text in a
    terminal); ``progress=False`` turns it off.

    Taught in §6.4 'Learning rate and warm-up' (book/ch06_training).

    Examples::

        >>> from tformer_ref.model import Transformer
        >>> model = Transformer(9, 9, d_model=8, n_heads=2, n_layers=1, d_ff=16)
        >>> batches = [(torch.tensor([[4, 5, 2]]), torch.tensor([[1, 5, 4, 2]]))] * 3
        >>> optimizer = torch.optim.Adam(model.parameters())
        >>> fit(model, batches, optimizer, progress=False).step
        [1, 2, 3]
    """
    from tqdm.auto import tqdm

    history = history if history is not None else History()
    device = device if device is not None else next(model.parameters()).device
    total = max_steps if max_steps is not None else epochs * len(loader)
    bar = tqdm(total=total, disable=not progress, leave=False, desc="training")
    elapsed = history.time[-1] if history.time else 0.0
    step = history.step[-1] if history.step else 0
    done = False

    def run_eval():
        acc = evaluate(model)
        history.eval_step.append(step)
        history.eval_acc.append(acc)
        shown = f"{history.loss[-1]:.3f}" if history.loss else "-"
        bar.set_postfix(loss=shown, acc=f"{acc:.3f}")
        return target is not None and acc >= target

    for epoch in range(epochs if max_steps is None else 10**9):
        if hasattr(getattr(loader, "batch_sampler", None), "set_epoch"):
            loader.batch_sampler.set_epoch(epoch)
        for src, tgt in loader:
            t0 = time.perf_counter()
            loss, norm = train_step(
                model,
                src.to(device),
                tgt.to(device),
                optimizer,
                scheduler,
                max_norm=max_norm,
                pad_id=pad_id,
                label_smoothing=label_smoothing,
            )
            if device.type == "cuda":
                torch.cuda.synchronize()
            elapsed += time.perf_counter() - t0
            step += 1
            history.step.append(step)
            history.loss.append(loss)
            history.grad_norm.append(norm)
            history.lr.append(optimizer.param_groups[0]["lr"])
            history.time.append(elapsed)
            bar.update(1)
            if not math.isfinite(loss):
                done = True
            elif evaluate is not None and step % eval_every == 0 and run_eval():
                done = True
            if max_steps is not None and step >= max_steps:
                done = True
            if time_budget is not None and elapsed >= time_budget:
                done = True
            if done:
                break
        if done or max_steps is None and epoch + 1 >= epochs:
            break
    evaluated_last = history.eval_step and history.eval_step[-1] == step
    if evaluate is not None and not evaluated_last:
        run_eval()
    bar.close()
    return history
