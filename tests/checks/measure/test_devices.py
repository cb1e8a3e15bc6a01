"""Where tensors live, read while a learner's code runs a model
(tformer_grading/checks/measure/devices.py).

Bug this guards against: the seed's decoding loop builds its causal mask with
``torch.ones((t, t))``, on the CPU whatever the model's device; on a GPU that raises,
on a CPU nothing shows. The recorder was written inside the bug hunt's check
(bughunt_decoding.py) and tested only through it; here it is tested on its own, on
the CPU and on the meta device (which raises as CUDA does).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tformer_grading.checks.measure.devices import (
    MIXING_ALLOWED,
    Placement,
    Where,
    forward_codes,
)


def _run(fn, device="cpu"):
    """``fn(model, x)`` under a Placement of a Linear and its input on ``device``."""
    model = nn.Linear(3, 3).to(device)
    x = torch.ones(1, 3, device=device)
    with Placement(model, [x], fn.__code__) as placement:
        try:
            fn(model, x)
        except RuntimeError:  # the meta device raises where a GPU would
            pass
    return placement.meeting


def bias_without_device(model, x):
    bias = torch.zeros(3)
    return model(x) + bias


def bias_on_the_input_device(model, x):
    bias = torch.zeros(3, device=x.device)
    return model(x) + bias


def bias_moved(model, x):
    bias = torch.zeros(3).to(x.device)
    return model(x) + bias


def bias_moved_like(model, x):
    bias = torch.zeros(3).to(x)
    return model(x) + bias


def bias_put_on_the_cpu(model, x):
    bias = torch.zeros(3, device=x.device).cpu()
    return model(x) + bias


def bias_made_on_the_cpu_by_name(model, x):
    bias = torch.zeros(3, device="cpu")
    return model(x) + bias


def bias_computed_from_a_loose_one(model, x):
    ones = torch.ones(3)
    bias = (ones * 2).neg()
    return model(x) + bias


def scalar_without_device(model, x):
    scale = torch.tensor(2.0)
    return model(x) * scale


def indexed_with_cpu_indices(model, x):
    keep = torch.tensor([0, 2])
    return model(x)[:, keep]


def written_into_a_placed_buffer(model, x):
    buffer = torch.empty(3, 3, device=x.device)
    torch.tril(torch.ones(3, 3, device=x.device), out=buffer)
    return model(x) @ buffer


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_a_tensor_made_without_a_device_is_read_where_it_met_the_model(device):
    meeting = _run(bias_without_device, device)
    assert meeting == (
        "The tensor made without a device in bias_without_device: "
        "`bias = torch.zeros(3)` met the model's tensors (in add) during "
        "`return model(x) + bias`, without having been moved to the model's device."
    )


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize(
    "fn",
    [
        bias_on_the_input_device,
        bias_moved,
        bias_moved_like,
        scalar_without_device,
        indexed_with_cpu_indices,
        written_into_a_placed_buffer,
    ],
)
def test_tensors_placed_on_the_models_device_are_accepted(fn, device):
    assert _run(fn, device) is None


def test_a_tensor_put_on_the_cpu_by_name_is_read_even_on_the_cpu():
    meeting = _run(bias_put_on_the_cpu)
    assert meeting.startswith(
        "The tensor put on the CPU by name (cpu) in bias_put_on_the_cpu: "
        "`bias = torch.zeros(3, device=x.device).cpu()`"
    )


def test_a_tensor_made_on_the_cpu_by_name_is_read_even_on_the_cpu():
    meeting = _run(bias_made_on_the_cpu_by_name)
    assert "made on the CPU by name (zeros)" in meeting


def test_a_tensor_computed_from_a_loose_one_is_read_at_the_line_that_made_it():
    meeting = _run(bias_computed_from_a_loose_one)
    assert "`ones = torch.ones(3)`" in meeting


def test_tensors_the_model_makes_without_a_device_are_not_the_learners():
    class Masked(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(3, 3)

        def forward(self, x):
            return self.linear(x) * torch.ones(3)  # the course's, not followed

    def loop(model, x):
        return model(x)

    model, x = Masked(), torch.ones(1, 3)
    with Placement(model, [x], loop.__code__) as placement:
        loop(model, x)
    assert placement.meeting is None
    assert Masked.forward.__code__ in forward_codes(model)


def test_only_the_first_meeting_is_kept():
    def two(model, x):
        first = torch.zeros(3)
        second = torch.ones(3)
        return model(x) + first - second

    model, x = nn.Linear(3, 3), torch.ones(1, 3)
    with Placement(model, [x], two.__code__) as placement:
        two(model, x)
    assert "`first = torch.zeros(3)`" in placement.meeting


def test_where_says_the_function_and_line():
    where = Where("mask = torch.ones(t, t)", "create_trg_mask")
    assert str(where) == "in create_trg_mask: `mask = torch.ones(t, t)`"
    assert where.how == "made without a device"
    assert Where.of(None) is None


def test_copies_and_indexing_may_mix_devices():
    assert {"to", "copy_", "__getitem__"} <= MIXING_ALLOWED
    assert "add" not in MIXING_ALLOWED and "masked_fill" not in MIXING_ALLOWED


def test_a_result_written_into_a_loose_buffer_is_read_at_the_buffers_line():
    def loop(model, x):
        buffer = torch.empty(3, 3)
        torch.tril(torch.ones(3, 3), out=buffer)
        return model(x) @ buffer

    meeting = _run(loop)
    assert "in loop: `buffer = torch.empty(3, 3)` met the model's tensors" in meeting
