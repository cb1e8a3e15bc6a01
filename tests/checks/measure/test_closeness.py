"""Whether two measured things are the same
(tformer_grading/checks/measure/closeness.py).

Bug this guards against: eight private ``_close`` predicates, one per chapter, each
with its own rule (relative to the expected number, to the larger one, with or without
an absolute floor; tensors compared in float64 or refused by dtype), so that one
measured divisor could be "close" in one check and not in the next.
"""

from __future__ import annotations

import functools
import math

import torch

from tformer_grading.checks.measure.closeness import all_near, near, tensors_near


def test_numbers_are_near_relative_to_the_larger_one():
    assert near(1.0005, 1.0, rel=1e-3) and near(1.0, 1.0005, rel=1e-3)
    assert not near(1.002, 1.0, rel=1e-3)


def test_an_absolute_floor_decides_near_zero():
    assert not near(1e-9, 0.0, rel=1e-3)
    assert near(1e-9, 0.0, rel=1e-3, abs_=1e-7)


def test_nan_and_infinities_are_read_as_math_isclose_reads_them():
    assert not near(math.nan, math.nan)
    assert near(math.inf, math.inf) and not near(math.inf, 1e308)


def test_a_named_tolerance_is_a_partial_whose_keywords_a_caller_can_override():
    float32_step = functools.partial(near, rel=2e-3, abs_=1e-7)
    assert float32_step(1.001, 1.0)
    assert not float32_step(1.001, 1.0, rel=1e-4)


def test_sequences_are_near_element_by_element_and_of_one_length():
    rates = [0.0, 0.25, 0.5]
    assert all_near([0.0, 0.25, 0.5 * (1 + 1e-9)], rates)
    assert not all_near(rates[:2], rates)
    assert not all_near([0.0, 0.25, 0.51], rates)


def test_tensors_are_near_only_with_one_shape_dtype_and_device():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 4, generator=g)
    assert tensors_near(x, x + 1e-6)
    assert not tensors_near(x, x + 1e-2)
    assert not tensors_near(x, x.view(2, 12))
    assert not tensors_near(x, x.double())
    assert not tensors_near(x, x.tolist())


def test_nan_in_both_at_one_place_is_near_and_in_one_only_is_not():
    x = torch.tensor([1.0, math.nan])
    assert tensors_near(x, x.clone())
    assert not tensors_near(x, torch.tensor([1.0, 2.0]))


def test_a_tensor_subclass_is_never_near():
    class Agreeable(torch.Tensor):
        pass

    x = torch.zeros(3)
    assert not tensors_near(x.as_subclass(Agreeable), x)


def test_tolerances_scale_with_the_expected_values():
    big = torch.full((4,), 1e4)
    assert tensors_near(big + 0.5, big)
    assert not tensors_near(big + 5.0, big)
