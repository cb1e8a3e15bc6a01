"""Chapter 7's learner answers and helpers that the tests of several test files
share: each answer is graded by its exercise's tests and by the chapter's tests
(test_checks_ch07.py: stderr silence, the thread count); ``PAD``, ``_n_targets`` and
``_dtype_for`` are what the accumulation and AMP answers are written with. Two answers
are the measured banks' own, imported from there under the names these tests use.
"""

import torch
from bank_accumulation_step import (
    accum_seed_divides_by_steps as accum_seed_style,  # noqa: F401
)
from bank_make_loader import loader_plain_shuffle as loader_no_sampler  # noqa: F401

PAD = 0


def _n_targets(batch):
    return int((batch[:, 1:] != PAD).sum())


def accum_right(model, micro_batches, optimizer, scheduler, loss_fn):
    """Counts the step's real targets first, then divides each summed loss by them."""
    optimizer.zero_grad()
    n_total = sum(_n_targets(b) for b in micro_batches)
    for batch in micro_batches:
        loss_sum, _ = loss_fn(model, batch)
        (loss_sum / n_total).backward()
    optimizer.step()
    scheduler.step()


def _dtype_for(device_type):
    return torch.float16 if device_type == "cuda" else torch.bfloat16


def amp_right(model, batch, loss_fn, optimizer, scaler, max_norm):
    """The lesson's order: zero, autocast forward, scaled backward, unscale_, clip,
    step, update."""
    device_type = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.amp.autocast(device_type, dtype=_dtype_for(device_type)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss


def amp_clip_scaled_by_hand(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Bug: a hand-written clip while the gradients are still scaled; unscale_ after it.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_dtype_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    grads = [p.grad for p in model.parameters()]
    norm = torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))
    if norm > max_norm:
        for g in grads:
            g.mul_(max_norm / norm)
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
    return loss


def amp_scaled_then_plain_loop(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Bug: scales the loss, then steps as if there were no scaler: no unscale_, no clip.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_dtype_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    optimizer.step()
    scaler.update()
    return loss


def amp_seed_import(model, batch, loss_fn, optimizer, scaler, max_norm):
    """The seed's `from torch.cuda.amp import autocast`: on a CPU model it autocasts
    nothing."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # it is deprecated, and says so
        from torch.cuda.amp import autocast

        ctx = autocast()
    optimizer.zero_grad()
    with ctx:
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss
