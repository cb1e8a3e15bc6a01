"""Errors read without a case's sizes (tformer_grading/checks/measure/plain_errors.py):
each planted mistake raises PyTorch's own words, and the reading says what the code
asked of the tensor's axes.

Bug this guards against: "too many indices for tensor of dimension 2" or "0D or 1D
target tensor expected" forwarded alone, which a learner who knows a little PyTorch
cannot map back to the line that indexed or flattened wrongly (held-out crash trial,
issue 26).
"""

from __future__ import annotations

import doctest

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DistributedSampler

from tformer_grading.checks.measure import plain_errors
from tformer_grading.checks.measure.plain_errors import read_plain


def test_examples_run_and_print_what_they_say():
    result = doctest.testmod(
        plain_errors, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    )
    assert result.failed == 0 and result.attempted >= 2


def _tgt():  # [B, St] token ids
    return torch.zeros(3, 7, dtype=torch.long)


PLANTED = [
    (lambda: _tgt()[:, :-1, :], "the code indexes more axes than the tensor's 2"),
    (
        lambda: F.cross_entropy(torch.randn(20, 13), torch.zeros(20, 1).long()),
        "the target given to cross_entropy must hold one class id per row",
    ),
    (lambda: _tgt().sum(dim=2), "the tensor has 2 axes (0 to 1, or -2 to -1)"),
    (lambda: torch.randn(2, 3, 4).transpose(0, 1).view(6, 4), "view reads"),
    # held-out trial 2026-12-06: a softmax kept in float32 on a float64 case
    (
        lambda: torch.randn(2, 3).softmax(-1) @ torch.randn(3, 4, dtype=torch.float64),
        "met a float32 tensor and a float64 one",
    ),
    (
        lambda: F.cross_entropy(
            torch.randn(4, 5), torch.zeros(4).long(), None, None, 0.1
        ),
        "received a float where an int belongs",
    ),
    (
        lambda: DistributedSampler(list(range(6)), 0, 2),  # rank and world_size swapped
        "DistributedSampler was given rank=2 and num_replicas=0",
    ),
]


@pytest.mark.parametrize("planted,reading", PLANTED)
def test_a_planted_error_is_read_back(planted, reading):
    try:
        planted()
    except (RuntimeError, IndexError, ValueError, TypeError) as exc:
        said = read_plain(f"{type(exc).__name__}: {exc}")
    else:
        raise AssertionError("the planted mistake did not raise")
    assert any(reading in s for s in said), said


def test_swapped_sampler_arguments_are_read_with_the_cases_values():
    message = (
        "ValueError: Invalid rank 2, rank should be in the interval [0, -1] at line 4 "
        "of your code while the check ran make_loader(dataset, rank=0, world_size=2, "
        "epoch=0, batch_size=3)."
    )
    (said,) = read_plain(message)
    assert "(this case's world_size and rank): the two arrived in each other's" in said
    other = message.replace("world_size=2", "world_size=4")
    assert read_plain(other) == [
        "DistributedSampler was given rank=2 and num_replicas=0"
    ]


def test_an_unpacked_shape_is_read_from_the_learners_line():
    message = (
        "ValueError: not enough values to unpack (expected 3, got 2) at line 4 of "
        "your code: `b, s, d = x.shape`"
    )
    assert read_plain(message) == [
        "`b, s, d = x.shape` unpacks 3 sizes from a shape with 2 axes"
    ]


def _raised(fn) -> str:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - PyTorch's own words are what is read
        return f"{type(exc).__name__}: {exc}"
    raise AssertionError("expected an error")


def test_a_sampler_given_with_shuffle_is_read():
    # Held-out trial 2026-12-07b, b_loader_shuffle_and_sampler: forwarded bare.
    data = torch.utils.data.TensorDataset(torch.arange(8))
    sampler = DistributedSampler(data, num_replicas=2, rank=0)
    message = _raised(
        lambda: torch.utils.data.DataLoader(data, sampler=sampler, shuffle=True)
    )
    assert read_plain(message) == [
        "a DataLoader shuffles itself (shuffle=True) or follows a sampler, not both: "
        "a DistributedSampler shuffles, so the loader takes no shuffle"
    ]


def test_a_function_lambdalr_calls_with_the_step_alone_is_read():
    # Held-out trial 2026-12-07b, b_noam_lambda_not_bound: forwarded bare.
    def noam(step, d_model, warmup):
        return 1.0

    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    message = _raised(lambda: torch.optim.lr_scheduler.LambdaLR(optimizer, noam))
    (said,) = read_plain(message)
    assert said.startswith(
        "the function noam was called without 'd_model' and 'warmup': whatever "
        "called it passed fewer arguments than it takes"
    )


def test_cuda_asked_for_on_a_machine_without_one_is_read():
    # Held-out trial 2026-12-07b, b_bug_mask_cuda: the words PyTorch uses on a
    # build without CUDA (a GPU machine never raises them).
    message = "AssertionError: Torch not compiled with CUDA enabled at line 14"
    assert read_plain(message)[0].startswith(
        "the code asked for a CUDA device on a machine that has none"
    )
