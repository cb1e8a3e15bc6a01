"""Where a tensor's numbers went (tformer_grading/checks/measure/positions.py).

Bug this guards against: ch02's attention check reading "the right numbers in other
positions" and "another batch entry's block" inline, once for the weights and once
for the output, and ch03's masked attention trying axis orders of its own.
"""

from __future__ import annotations

import torch

from tformer_grading.checks.measure.positions import (
    axis_permutations,
    block_mixup,
    same_numbers,
    swapped_last_axes,
    unexpected_zeros,
)


def _weights(seed=0, shape=(2, 3, 4, 4)):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(*shape, generator=g, dtype=torch.float64).softmax(-1)


def test_the_right_numbers_anywhere_are_read_as_the_same_numbers():
    want = _weights()
    assert same_numbers(want.reshape(2, 3, 16).flip(-1).reshape(want.shape), want)
    assert same_numbers(want.transpose(1, 2), want)


def test_other_numbers_are_not_the_same_numbers():
    want = _weights()
    assert not same_numbers(want * 1.01, want)
    assert not same_numbers(_weights(seed=1), want)


def test_swapped_last_axes_are_read_and_the_right_tensor_is_not():
    want = _weights()
    assert swapped_last_axes(want.mT, want)
    assert not swapped_last_axes(want, want)
    assert not swapped_last_axes(want.transpose(1, 2), want)


def test_swapped_last_axes_needs_square_ones():
    want = _weights(shape=(1, 2, 3, 5))
    assert not swapped_last_axes(want.mT.contiguous().view(want.shape), want)


def test_a_planted_block_mixup_names_the_first_moved_block():
    want = _weights()
    got = want.clone()
    got[1, 2], got[0, 1] = want[0, 1], want[1, 2]
    said = block_mixup(got, want)
    assert said.startswith("for batch entry 0, head 1 are the right ones for batch")
    assert "entry 1, head 2" in said


def test_no_mixup_when_the_blocks_are_right_or_wrong():
    want = _weights()
    assert block_mixup(want, want) is None
    wrong = want.clone()
    wrong[0, 0] = wrong[0, 0] * 2
    assert block_mixup(wrong.flip(1), want) is None  # one block is nobody's


def test_axis_permutations_give_each_order_of_the_shape_once():
    t = torch.zeros(2, 3, 3, 4)
    orders = [order for order, moved in axis_permutations(t, (2, 3, 3, 4))]
    assert orders == [(0, 2, 1, 3)]
    moved = dict(axis_permutations(torch.arange(6.0).view(2, 3), (3, 2)))
    assert torch.equal(moved[(1, 0)], torch.arange(6.0).view(2, 3).T)


def test_unexpected_zeros_are_counted_where_the_prediction_is_not_small():
    predicted = _weights()
    got = predicted.clone()
    got[1, 0, 2, 3] = 0.0
    assert unexpected_zeros(got, predicted) == (1, (1, 0, 2, 3))


def test_zeros_the_prediction_underflows_to_are_not_unexpected():
    predicted = _weights()
    predicted[0, 0, 0, 0] = 1e-40
    got = predicted.clone()
    got[0, 0, 0, 0] = 0.0
    assert unexpected_zeros(got, predicted) is None
    assert unexpected_zeros(got, predicted, floor=1e-50) == (1, (0, 0, 0, 0))
