"""Recording a learner's calls on the optimizer and scheduler a check hands it
(tformer_grading/checks/measure/recorders.py).

Bug this guards against: 13 recorders in 4 chapters, two of them handling the same
PyTorch quirk in opposite ways (a subclass marked as hooked, an instance method
wrapped; 2026-12-05 aesthetics review, family F7). A recorder that subclassed SGD had
its step replaced by PyTorch's profiling wrapper when the first instance was made, and
a scheduler built on a recorded optimizer must still see its own step counter.
"""

from __future__ import annotations

import pytest
import torch
from torch.optim.lr_scheduler import LambdaLR

from tformer_grading.checks.measure.recorders import (
    record_calls,
    recording_grad_scaler,
    recording_lambda_lr,
    recording_sgd,
)


def _weight():
    return torch.ones(3, requires_grad=True)


def test_the_rate_of_each_step_is_read_back_under_a_scheduler():
    rates = []
    opt = recording_sgd(
        [_weight()], 1.0, on_step=lambda o: rates.append(o.param_groups[0]["lr"])
    )
    sched = LambdaLR(opt, lambda step: 1 / (step + 1))
    for _ in range(4):
        opt.step()
        sched.step()
    assert rates == pytest.approx([1.0, 1 / 2, 1 / 3, 1 / 4])


def test_a_scheduler_stepped_before_its_optimizer_still_warns_as_pytorch_does():
    # LambdaLR wraps the recorded step again: its order check must still see it.
    opt = recording_sgd([_weight()], 1.0, on_step=lambda o: None)
    sched = LambdaLR(opt, lambda step: 1.0)
    with pytest.warns(UserWarning, match="before `optimizer.step\\(\\)`"):
        sched.step()


def test_the_objects_stay_plain_pytorch_classes():
    opt = recording_sgd([_weight()], 0.1, on_step=lambda o: None)
    sched = recording_lambda_lr(opt, lambda s: 1.0, on_step=lambda s: None)
    assert type(opt) is torch.optim.SGD and type(sched) is LambdaLR


def test_the_calls_are_recorded_in_the_order_made():
    calls = []
    opt = recording_sgd(
        [_weight()],
        0.1,
        on_step=lambda o: calls.append("step"),
        on_zero_grad=lambda o: calls.append("zero_grad"),
    )
    sched = recording_lambda_lr(opt, lambda s: 1.0, lambda s: calls.append("sched"))
    opt.zero_grad()
    opt.step()
    sched.step()
    assert calls == ["zero_grad", "step", "sched"]


def test_the_scheduler_built_records_none_of_its_own_first_step():
    steps = []
    recording_lambda_lr(
        torch.optim.SGD([_weight()], lr=1.0), lambda s: 1.0, steps.append
    )
    assert steps == []


def test_arguments_reach_the_recorder_and_the_method():
    seen = []
    opt = torch.optim.SGD([_weight()], lr=0.1)
    record_calls(opt, "zero_grad", lambda o, *a, **k: seen.append((a, k)))
    opt.zero_grad(set_to_none=False)
    assert seen == [((), {"set_to_none": False})]
    assert all(
        p.grad is None or not p.grad.any() for p in opt.param_groups[0]["params"]
    )


def test_a_grad_scaler_records_its_calls_and_what_runs_inside_its_step():
    weight = _weight()
    opt = torch.optim.SGD([weight], lr=0.1)
    inside, seen = [], []
    record_calls(opt, "step", lambda o: seen.append(("opt.step", bool(inside))))
    scaler = recording_grad_scaler(
        "cpu",
        4.0,
        lambda name, s, *a: (seen.append((name, bool(inside))), inside.append(name)),
        lambda name, s: inside.pop(),
    )
    scaler.scale(weight.sum()).backward()
    scaler.unscale_(opt)
    scaler.step(opt)
    scaler.update()
    assert seen == [
        ("scale", False),
        ("unscale_", False),
        ("step", False),
        ("opt.step", True),
        ("update", False),
    ]
    assert type(scaler) is torch.amp.GradScaler and not inside
