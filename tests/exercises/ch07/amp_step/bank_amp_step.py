"""Chapter 7's measured bank for amp_step (the format: tests/bank/bank.py).

The amp probe clips at max_norm 0.05 with the scale 1024.
"""

import torch

from bank import GENERIC, right, wrong  # noqa: F401
from exercise_cells import graders

GRADERS = graders("ch07_scale", {"amp_step": "amp_step"})


@right("amp_step")
def amp_lesson_order(model, batch, loss_fn, optimizer, scaler, max_norm):
    device_type = next(model.parameters()).device.type
    dtype = torch.float16 if device_type == "cuda" else torch.bfloat16
    optimizer.zero_grad()
    with torch.amp.autocast(device_type, dtype=dtype):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()


@right("amp_step")
def amp_autograd_grad(model, batch, loss_fn, optimizer, scaler, max_norm):
    # the gradients by torch.autograd.grad, written into .grad by hand
    device_type = next(model.parameters()).device.type
    dtype = torch.float16 if device_type == "cuda" else torch.bfloat16
    optimizer.zero_grad()
    with torch.amp.autocast(device_type, dtype=dtype):
        loss = loss_fn(model, batch)
    params = [p for p in model.parameters() if p.requires_grad]
    grads = torch.autograd.grad(scaler.scale(loss), params)
    for p, g in zip(params, grads):
        p.grad = g
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()


@right("amp_step")
def amp_backward_inside_autocast_manual_clip(
    model, batch, loss_fn, optimizer, scaler, max_norm
):
    device = next(model.parameters()).device
    for p in model.parameters():
        p.grad = None
    half = torch.float16 if device.type == "cuda" else torch.bfloat16
    with torch.autocast(device_type=device.type, dtype=half):
        loss = loss_fn(model, batch)
        scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    norm = torch.sqrt(sum((g.double() ** 2).sum() for g in grads))
    coef = min(1.0, max_norm / (float(norm) + 1e-6))
    for g in grads:
        g.mul_(coef)
    scaler.step(optimizer)
    scaler.update()
    return loss.item()


@right("amp_step")
def amp_zero_at_the_end(model, batch, loss_fn, optimizer, scaler, max_norm):
    kind = next(model.parameters()).device.type
    half = {"cuda": torch.float16}.get(kind, torch.bfloat16)
    with torch.autocast(kind, dtype=half):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    params = [p for group in optimizer.param_groups for p in group["params"]]
    torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=False)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    return loss.detach()


@right("amp_step")
def amp_default_autocast_dtype(model, batch, loss_fn, optimizer, scaler, max_norm):
    # torch.autocast's default dtype is bfloat16 on a CPU and float16 on CUDA.
    device_type = batch.device.type
    model.zero_grad(set_to_none=True)
    with torch.autocast(device_type):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss


@right("amp_step")
def amp_vector_norm_clip(model, batch, loss_fn, optimizer, scaler, max_norm):
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.amp.autocast(
        device_type=kind,
        dtype=torch.float16 if kind == "cuda" else torch.bfloat16,
        enabled=True,
    ):
        loss = loss_fn(model, batch)
    scaled = scaler.scale(loss)
    scaled.backward()
    scaler.unscale_(optimizer)
    grads = [p.grad for p in model.parameters()]
    total = torch.linalg.vector_norm(
        torch.stack([torch.linalg.vector_norm(g) for g in grads])
    )
    factor = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    torch._foreach_mul_(grads, factor)
    scaler.step(optimizer)
    scaler.update()
    return loss.detach().float()


@right("amp_step")
def amp_clip_param_groups(model, batch, loss_fn, optimizer, scaler, max_norm):
    on_gpu = next(model.parameters()).is_cuda
    optimizer.zero_grad(set_to_none=False)
    ctx = torch.amp.autocast(
        "cuda" if on_gpu else "cpu", dtype=torch.float16 if on_gpu else torch.bfloat16
    )
    with ctx:
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(
        [p for g in optimizer.param_groups for p in g["params"]],
        max_norm,
        error_if_nonfinite=False,
    )
    scaler.step(optimizer)
    scaler.update()
    return loss


@right("amp_step")
def amp_skips_overflow_by_hand(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Checks the unscaled gradients itself instead of letting scaler.step do it.
    kind = next(model.parameters()).device.type
    dtype = torch.float16 if kind == "cuda" else torch.bfloat16
    optimizer.zero_grad()
    with torch.amp.autocast(kind, dtype=dtype):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    if torch.isfinite(norm):
        optimizer.step()
    scaler.update()
    return loss


@right("amp_step")
def amp_returns_float(model, batch, loss_fn, optimizer, scaler, max_norm):
    device_type = str(next(model.parameters()).device).split(":")[0]
    optimizer.zero_grad()
    low = torch.bfloat16 if device_type == "cpu" else torch.float16
    with torch.autocast(device_type=device_type, dtype=low):
        step_loss = loss_fn(model, batch)
    scaler.scale(step_loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm, norm_type=2.0)
    scaler.step(optimizer)
    scaler.update()
    return float(step_loss)


def _half_for(kind):
    return torch.float16 if kind == "cuda" else torch.bfloat16


@wrong("amp_step", r"'no backward'.*no parameter got a gradient", listed=False)
def amp_backward_not_called(model, batch, loss_fn, optimizer, scaler, max_norm):
    # .backward without its parentheses: the method is looked up, never called
    device_type = next(model.parameters()).device.type
    dtype = torch.float16 if device_type == "cuda" else torch.bfloat16
    optimizer.zero_grad()
    with torch.amp.autocast(device_type, dtype=dtype):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()


@wrong("amp_step", r"'clipping before unscale_'", listed=True)
def amp_clip_then_unscale(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Clips right after backward, as in an fp32 loop, then unscales.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
    return loss


@wrong("amp_step", r"'clipping before unscale_'", listed=True)
def amp_clip_no_unscale(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Leaves unscaling to scaler.step, so the clip sees the scaled gradients.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(optimizer.param_groups[0]["params"], max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss


@wrong("amp_step", r"'gradients not clipped'", listed=True)
def amp_max_norm_unused(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Forgot the clipping line entirely.
    kind = next(model.parameters()).device.type
    model.zero_grad()
    with torch.autocast(device_type=kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
    return loss.item()


@wrong("amp_step", r"optimizer\.step\(\) instead of scaler\.step", listed=True)
def amp_optimizer_step_after_unscale(
    model, batch, loss_fn, optimizer, scaler, max_norm
):
    # Unscales and clips, then steps the optimizer directly: no overflow skip.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    scaler.update()
    return loss


@wrong("amp_step", r"optimizer\.step\(\) instead of scaler\.step", listed=True)
def amp_plain_step_scaled(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Scales the loss, then finishes as if there were no scaler.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    optimizer.step()
    scaler.update()
    return loss


@wrong("amp_step", r"'scaler\.update\(\) missing'", listed=True)
def amp_no_update(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Thought scaler.step also updates the scale.
    kind = next(model.parameters()).device.type
    for p in model.parameters():
        p.grad = None
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    return loss.detach()


@wrong("amp_step", r"'loss not scaled'", listed=True)
def amp_plain_backward(model, batch, loss_fn, optimizer, scaler, max_norm):
    # loss.backward() out of habit; the scaler only used for the step.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    loss.backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss


@wrong("amp_step", r"'zero_grad missing'", listed=True)
def amp_never_zeroes(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Nothing clears the gradients between steps.
    kind = next(model.parameters()).device.type
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss


@wrong("amp_step", r"'forward not under autocast'", listed=True)
def amp_fp32_forward(model, batch, loss_fn, optimizer, scaler, max_norm):
    # The scaler is there, the autocast block is not.
    optimizer.zero_grad()
    loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss


@wrong("amp_step", r"'wrong autocast dtype'", listed=True)
def amp_dtypes_swapped(model, batch, loss_fn, optimizer, scaler, max_norm):
    # float16 and bfloat16 the wrong way round.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    wrong_dtype = torch.bfloat16 if kind == "cuda" else torch.float16
    with torch.autocast(kind, dtype=wrong_dtype):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss


@wrong(
    "amp_step", r"'forward not under autocast'|autocast in torch\.float32", listed=False
)
def amp_autocast_float32(model, batch, loss_fn, optimizer, scaler, max_norm):
    # "Mixed precision" with float32 as the low precision: autocast changes nothing.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=torch.float32):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss


@wrong("amp_step", r"'gradients clipped by value'.*clamped to ±0\.05", listed=False)
def amp_clip_by_value(model, batch, loss_fn, optimizer, scaler, max_norm):
    # clip_grad_value_ picked from autocomplete instead of clip_grad_norm_.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_value_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss


@wrong("amp_step", r"'each parameter clipped on its own'", listed=False)
def amp_clip_each_parameter(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Clips in a loop, one parameter at a time: each tensor's own norm is clipped.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    for p in model.parameters():
        torch.nn.utils.clip_grad_norm_(p, max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss


@wrong(
    "amp_step",
    r"optimizer stepped with gradient norm 0\.2\d* .*clipped at "
    r"max_norm=0\.05 it is 0\.05",
    listed=False,
)
def amp_clip_inf_norm(model, batch, loss_fn, optimizer, scaler, max_norm):
    # norm_type=inf: the largest element, not the Euclidean norm, is clipped.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm, norm_type=float("inf"))
    scaler.step(optimizer)
    scaler.update()
    return loss


@wrong("amp_step", r"'gradients unscaled twice'", listed=False)
def amp_divides_by_scale_again(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Unscales with unscale_ and then once more by hand, "to be sure".
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    for p in model.parameters():
        p.grad /= scaler.get_scale()
    scaler.step(optimizer)
    scaler.update()
    return loss


@wrong("amp_step", r"'gradients unscaled twice'", listed=False)
def amp_unscales_by_hand(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Divides by the scale by hand, not knowing scaler.step unscales too.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    inv = 1.0 / scaler.get_scale()
    for p in model.parameters():
        p.grad.mul_(inv)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss


@wrong("amp_step", r"'gradients unscaled twice'", listed=False)
def amp_update_before_step(model, batch, loss_fn, optimizer, scaler, max_norm):
    # update() right after unscale_, step last: step then unscales a second time.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.update()
    scaler.step(optimizer)
    return loss


@wrong("amp_step", r"'overflowing step not skipped'", listed=False)
def amp_zeroes_bad_gradients(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Replaces NaN/inf gradients by 0 right after the backward "so that one bad batch
    # cannot break the model": the scaler never sees the overflow.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    for p in model.parameters():
        if p.grad is not None:
            p.grad.nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0)
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss


@wrong("amp_step", r"scaler\.update\(\) ran 2 times", listed=False)
def amp_update_twice(model, batch, loss_fn, optimizer, scaler, max_norm):
    # An extra update() left over from a copy-paste.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    scaler.update()
    return loss


@wrong("amp_step", r"optimizer\.step\(\) ran 2 times", listed=False)
def amp_steps_twice(model, batch, loss_fn, optimizer, scaler, max_norm):
    # scaler.step(optimizer) and optimizer.step(): two steps per call.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    optimizer.step()
    scaler.update()
    return loss


@wrong(
    "amp_step", r"returned \d[\d.e+]*, 1024 × the loss: the scaled loss", listed=False
)
def amp_returns_scaled_loss(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Returns the tensor it called backward on.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    scaled = scaler.scale(loss)
    scaled.backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return scaled.detach()


@wrong("amp_step", r"returned NoneType, not the loss", listed=False)
def amp_returns_nothing(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Forgot the return statement.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()


@wrong(
    "amp_step",
    r"after your backward were 1\.04858e\+06 × the loss's gradient; the "
    r"scaler's scale was 1024",
    listed=False,
)
def amp_scales_twice(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Scales inside the autocast block and again at backward.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = scaler.scale(loss_fn(model, batch))
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss / scaler.get_scale()


@wrong(
    "amp_step",
    r"after your backward were 1024 × the loss's gradient; the scaler's "
    r"scale was 512",
    listed=False,
)
def amp_hard_coded_scale(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Multiplies by a fixed 1024 instead of the scaler's current scale.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    (loss * 1024.0).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss


@wrong(
    "amp_step",
    r"'clipped after the optimizer step'.*gradient norm 1\.[78]\d* ",
    listed=False,
)
def amp_clip_after_step(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Clips after the step: the update already used the unclipped gradients.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.update()
    return loss


@wrong(
    "amp_step",
    r"'gradients zeroed before the step'.*gradient norm 0 \(0 × the "
    r"true gradient",
    listed=False,
)
def amp_zero_grad_after_backward(model, batch, loss_fn, optimizer, scaler, max_norm):
    # zero_grad moved next to the step, after the backward it wipes out.
    kind = next(model.parameters()).device.type
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    optimizer.zero_grad(set_to_none=False)
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss


@wrong(
    "amp_step",
    r"raised RuntimeError: unscale_\(\) has already been called",
    listed=False,
)
def amp_unscale_twice(model, batch, loss_fn, optimizer, scaler, max_norm):
    # unscale_ before clipping and again before the step.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
    return loss


@wrong(
    "amp_step",
    r"raised RuntimeError: element 0 of tensors does not require grad",
    listed=False,
)
def amp_detached_loss(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Detaches the loss "to save memory" before calling backward on it.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch).detach()
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss


@wrong(
    "amp_step",
    r"after your backward still held 0\.5\d* × step 1's gradient",
    listed=False,
)
def amp_halves_old_gradients(model, batch, loss_fn, optimizer, scaler, max_norm):
    # "Momentum by hand": halves the old gradients instead of zeroing them.
    kind = next(model.parameters()).device.type
    for p in model.parameters():
        if p.grad is not None:
            p.grad.mul_(0.5)
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss


@wrong(
    "amp_step",
    r"after your backward were 65536 × the loss's gradient; the scaler's "
    r"scale was 1024",
    listed=False,
)
def amp_new_scaler_each_step(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Builds its own GradScaler (the seed's habit) and ignores the one it was given.
    kind = next(model.parameters()).device.type
    scaler = torch.amp.GradScaler(kind)
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss


@wrong(
    "amp_step",
    r"optimizer stepped with gradient norm 1 \(0\.5\d* × the true "
    r"gradient",
    listed=False,
)
def amp_clip_hard_coded_one(model, batch, loss_fn, optimizer, scaler, max_norm):
    # clip_grad_norm_(..., 1.0) from a tutorial: max_norm is ignored.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    return loss


@wrong(
    "amp_step",
    r"'clipped after the optimizer step'.*scaler\.step → .*"
    r"scaler\.unscale_",
    listed=False,
)
def amp_unscale_after_step(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Held out: unscale_ + clip placed after scaler.step (the step saw unclipped grads).
    dt = next(model.parameters()).device.type
    optimizer.zero_grad()
    half = torch.float16 if dt == "cuda" else torch.bfloat16
    with torch.amp.autocast(dt, dtype=half):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.update()
    return loss


@wrong(
    "amp_step",
    r"'clipped after the optimizer step'.*a change of the gradients",
    listed=False,
)
def amp_unscale_step_then_clip(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Unscales in the right place but clips once the step is done ("tidy up at the end")
    kind = next(model.parameters()).device.type
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device_type=kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
    torch.nn.utils.clip_grad_norm_(list(model.parameters()), max_norm)
    return loss.detach()


@wrong(
    "amp_step",
    r"'gradients unscaled twice'.*Your calls were .*scaler\.update → scaler\.step",
    listed=False,
)
def amp_update_then_step(model, batch, loss_fn, optimizer, scaler, max_norm):
    # "update the scale, then step with it": update() forgets the unscale_, so
    # step() unscales the clipped gradients a second time
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.update()
    scaler.step(optimizer)
    return loss.detach()
