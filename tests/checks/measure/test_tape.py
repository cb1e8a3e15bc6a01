"""The tape a learner's training step writes on (tformer_grading/checks/measure/tape.py).

Bug this guards against: two step exercises each kept their own taped optimizer,
GradScaler subclass and zero_grad stand-in (2026-12-05 aesthetics review, family F7);
a scaler's own unscale_ inside scaler.step must still read as made by scaler.step.
"""

from __future__ import annotations

import copy

import torch

from tformer_grading.checks.measure.tape import (
    Tape,
    TapedLoss,
    TapedZeroGrad,
    calls_text,
    grad_vector,
    tape_backward,
    taped_scaler,
    taped_sgd,
)


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 1))


def test_an_unscale_left_to_scaler_step_is_marked_as_made_by_it():
    model, tape = _model(), Tape()
    opt = taped_sgd(model.parameters(), tape, lr=0.1)
    scaler = taped_scaler("cpu", tape, init_scale=8.0)
    scaler.scale(model(torch.ones(1, 3)).sum()).backward()
    scaler.step(opt)
    scaler.update()
    assert tape.events == [
        "scaler.scale",
        "scaler.step",
        "scaler.unscale_ by scaler.step",
        "optimizer.step by scaler.step",
        "scaler.update",
    ]
    assert not tape.in_scaler_step


def test_the_step_records_the_unscaled_gradient_and_its_rate():
    model, tape = _model(), Tape()
    opt = taped_sgd(model.parameters(), tape, lr=0.1)
    scaler = taped_scaler("cpu", tape, init_scale=8.0)
    scaler.scale(model(torch.ones(1, 3)).sum()).backward()
    scaler.unscale_(opt)
    scaler.step(opt)
    assert torch.allclose(tape.at_unscale[0], 8.0 * tape.steps[0][1])
    assert tape.steps[0][0] == 0.1


def test_a_gradient_after_backward_is_read_per_parameter():
    model, tape = _model(), Tape()
    tape_backward(model, tape)
    sizes = tuple(p.numel() for p in model.parameters())
    assert tape.gradient_after_backward(sizes) is None
    model(torch.ones(1, 3)).sum().backward()
    assert torch.equal(
        tape.gradient_after_backward(sizes), grad_vector(model.parameters())
    )
    assert tape.events == ["backward"]


def test_a_deep_copy_zeroes_itself_not_the_original():
    model, tape = _model(), Tape()
    model.zero_grad = TapedZeroGrad(model, tape)
    model(torch.ones(1, 3)).sum().backward()
    twin = copy.deepcopy(model)
    twin.zero_grad()
    assert all(p.grad is not None for p in model.parameters())
    assert tape.events == []


def test_the_loss_records_autocast_and_can_overflow_once():
    model = _model()
    loss_fn = TapedLoss(lambda m, b: m(b).mean(), overflow=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        first = loss_fn(model, torch.ones(1, 3))
    second = loss_fn(model, torch.ones(1, 3))
    assert loss_fn.states[0][:2] == (True, torch.bfloat16)
    assert loss_fn.states[1] == (False, None, ())
    assert torch.isinf(first) and torch.isfinite(second)


def test_the_calls_read_without_the_loss():
    assert calls_text(["loss_fn"]) == "none"
    assert calls_text(["optimizer.zero_grad", "loss_fn", "backward"]) == (
        "optimizer.zero_grad → backward"
    )
