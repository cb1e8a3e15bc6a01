"""Gradient clipping read back (tformer_grading/checks/measure/clipping.py).

Bug this guards against: train_step and amp_step each re-implemented what
clip_grad_norm_ leaves, a per-tensor clip and a clamp by value.
"""

from __future__ import annotations

import torch
from torch.nn.utils import clip_grad_norm_, clip_grad_value_

from tformer_grading.checks.measure.clipping import (
    clamped_by_value,
    clip_coefficient,
    clipped,
    clipped_per_tensor,
    norm_named,
)


def _params():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    model(torch.randn(5, 4)).pow(2).sum().backward()
    return list(model.parameters())


def _flat(params):
    return torch.cat([p.grad.flatten() for p in params])


def test_clipped_is_what_clip_grad_norm_leaves():
    params = _params()
    want = _flat(params).clone()
    clip_grad_norm_(params, 0.5)
    assert torch.allclose(clipped(want, 0.5), _flat(params))
    assert clip_coefficient(0.1, 0.5) == 1.0


def test_a_clip_in_another_norm_is_named():
    params = _params()
    clip_grad_norm_(params, 0.5, norm_type=float("inf"))
    got = _flat(params)
    assert norm_named(got, lambda v: abs(v - 0.5) < 1e-6) == "max (L-inf)"
    assert norm_named(got, lambda v: False) is None


def test_a_clip_by_value_is_read_and_a_norm_clip_is_not():
    params = _params()
    want = _flat(params).clone()
    clip_grad_value_(params, 0.3)
    assert abs(clamped_by_value(_flat(params), want, 1e-3, 1e-9) - 0.3) < 1e-6
    assert clamped_by_value(clipped(want, 0.3), want, 1e-3, 1e-9) is None


def test_a_per_tensor_clip_is_read():
    params = _params()
    want = _flat(params).clone()
    sizes = tuple(p.numel() for p in params)
    for p in params:
        clip_grad_norm_([p], 0.2)
    assert clipped_per_tensor(_flat(params), want, sizes, 0.2, 1e-3, 1e-9)
    assert not clipped_per_tensor(clipped(want, 0.2), want, sizes, 0.2, 1e-3, 1e-9)
