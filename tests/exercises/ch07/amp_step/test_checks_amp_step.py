"""amp_step (chapter 7, book/ch07_scale): the unit tests of ``ch07.check_amp_step``
and its hidden ``check_amp_by_hand``, with wrong steps (each rejected with its named
diagnosis) and right ones written differently (each accepted).

Beyond the bank (bank_amp_step.py): the seed's CUDA-only autocast named on a CPU, a
crash reported, and the hidden test: own code accepted, delegation to the course's
optimizer_step or the check's own reference refused.

Each wrong one says what bug it is, spelled as a learner might, not as the check's own
variant is.
"""

import pytest
import torch
from bank_amp_step import amp_fp32_forward as amp_no_autocast
from bank_amp_step import amp_zero_at_the_end as amp_right_zero_at_the_end
from units_ch07 import (
    _dtype_for,
    amp_clip_scaled_by_hand,
    amp_right,
    amp_scaled_then_plain_loop,
    amp_seed_import,
)

from tformer_grading.checks import CheckFailure, ch07
from tformer_grading.checks.ch07 import amp_step
from tformer_ref.device import get_device

# ----------------------------------------------------------------------------- amp_step


def amp_right_manual_clip(model, batch, loss_fn, optimizer, scaler, max_norm):
    """Backward inside the autocast block (allowed), clipping written by hand."""
    device = next(model.parameters()).device
    for p in model.parameters():
        p.grad = None
    with torch.autocast(device_type=device.type, dtype=_dtype_for(device.type)):
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


def amp_clip_then_let_step_unscale(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Bug: no unscale_: clips the scaled gradients (scaler.step unscales them later).
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_dtype_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(optimizer.param_groups[0]["params"], max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss


def amp_forgets_to_clip(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Bug: max_norm is never used.
    kind = next(model.parameters()).device.type
    model.zero_grad()
    with torch.autocast(device_type=kind, dtype=_dtype_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
    return loss.item()


def amp_plain_optimizer_step(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Bug: optimizer.step() does not skip the step whose gradients overflowed.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_dtype_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    for group in optimizer.param_groups:
        torch.nn.utils.clip_grad_norm_(group["params"], max_norm)
    optimizer.step()
    scaler.update()
    return loss


def amp_forgets_update(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Bug: no scaler.update(), so the scale never drops after an overflow.
    kind = next(model.parameters()).device.type
    for p in model.parameters():
        p.grad = None
    with torch.autocast(kind, dtype=_dtype_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    return loss.detach()


def amp_unscaled_backward(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Bug: loss.backward() inside autocast, without scaler.scale.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_dtype_for(kind)):
        loss = loss_fn(model, batch)
        loss.backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss


def amp_forgets_zero_grad(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Bug: nothing zeroes the gradients, so the second step adds the first step's.
    kind = next(model.parameters()).device.type
    with torch.autocast(kind, dtype=_dtype_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss


def amp_swapped_dtypes(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Bug: the two dtypes swapped (float16 on a CPU, bfloat16 on CUDA).
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    wrong = torch.bfloat16 if kind == "cuda" else torch.float16
    with torch.autocast(kind, dtype=wrong):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss


@pytest.mark.parametrize(
    "fn", [amp_right, amp_right_manual_clip, amp_right_zero_at_the_end]
)
def test_amp_step_accepts_right_implementations(fn, capsys):
    ch07.check_amp_step(fn)
    assert "✓ amp_step" in capsys.readouterr().out


@pytest.mark.parametrize(
    "fn,diagnosis",
    [
        (amp_clip_scaled_by_hand, r"clipping before unscale_"),
        (amp_clip_then_let_step_unscale, r"clipping before unscale_"),
        (amp_forgets_to_clip, "gradients not clipped"),
        (amp_plain_optimizer_step, r"optimizer.step\(\) instead of scaler.step"),
        (amp_scaled_then_plain_loop, r"optimizer.step\(\) instead of scaler.step"),
        (amp_forgets_update, r"scaler.update\(\) missing"),
        (amp_unscaled_backward, "loss not scaled"),
        (amp_forgets_zero_grad, "zero_grad missing"),
        (amp_no_autocast, "forward not under autocast"),
        (amp_swapped_dtypes, "wrong autocast dtype"),
    ],
)
def test_amp_step_rejects_wrong_implementations(fn, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch07.check_amp_step(fn)


@pytest.mark.skipif(
    get_device().type == "cuda", reason="on CUDA the deprecated import still autocasts"
)
def test_amp_step_rejects_the_seeds_cuda_only_autocast_on_cpu():
    with pytest.raises(CheckFailure, match="forward not under autocast") as info:
        ch07.check_amp_step(amp_seed_import)
    assert "torch.cuda.amp.autocast is deprecated" in str(info.value)


def test_amp_step_reports_a_crash():
    def crashes(model, batch, loss_fn, optimizer, scaler, max_norm):
        raise NotImplementedError()

    with pytest.raises(CheckFailure, match="raised NotImplementedError"):
        ch07.check_amp_step(crashes)


@pytest.mark.parametrize(
    "fn", [amp_right, amp_right_manual_clip, amp_right_zero_at_the_end]
)
def test_amp_by_hand_accepts_own_code(fn, capsys):
    ch07.check_amp_by_hand(fn)
    assert "✓ amp_step: written by hand" in capsys.readouterr().out


def amp_delegates(model, batch, loss_fn, optimizer, scaler, max_norm):
    # The unscale/clip/step/update part left to the course's optimizer_step.
    from tformer_ref.amp import optimizer_step

    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_dtype_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    optimizer_step(optimizer, model.parameters(), scaler, max_norm)
    return loss


@pytest.mark.parametrize(
    "fn,name",
    [
        (amp_delegates, "tformer_ref.amp.optimizer_step"),
        (amp_step.amp_reference, "the check's own reference"),
    ],
)
def test_amp_by_hand_rejects_delegation(fn, name):
    ch07.check_amp_step(fn)  # it is right: only the hidden test catches it
    with pytest.raises(CheckFailure, match=f"your code calls {name}"):
        ch07.check_amp_by_hand(fn)
