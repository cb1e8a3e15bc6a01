"""Least-squares fits of a measured tensor as a weighted sum of named ones
(tformer_grading/checks/measure/fit.py).

Bug this guards against: the same fit written once per chapter (ch04's ``fit_sum``,
ch05's ``_combination``; 2026-12-05 aesthetics review, family F4), each with its own
idea of when "no weighted sum fits".
"""

from __future__ import annotations

import torch

from tformer_grading.checks.measure.fit import (
    describe_sum,
    line,
    same_sum,
    scale,
    scales_about,
    two_terms,
    weighted_sum,
)


def _pair(seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(3, 4, 8, generator=g), torch.randn(3, 4, 8, generator=g)


def test_a_planted_weighted_sum_is_read_back():
    x, a = _pair()
    assert weighted_sum(2 * x - 0.25 * a, {"x": x, "a": a}) == {"x": 2.0, "a": -0.25}


def test_tensors_of_another_shape_or_none_are_not_candidates():
    x, a = _pair()
    got = weighted_sum(x, {"x": x, "wide": torch.randn(3, 4, 9), "none": None})
    assert got == {"x": 1.0}


def test_no_weighted_sum_is_none():
    x, a = _pair()
    assert weighted_sum(torch.relu(x) + a, {"x": x, "a": a}) is None
    assert weighted_sum(x, {"other": torch.randn(5)}) is None


def test_the_sum_is_written_as_the_messages_show_it():
    assert describe_sum({"x": 1.0, "a": 1.0}) == "x + a"
    assert describe_sum({"x": 2.0, "a": -1.0}) == "2·x - 1·a"


def test_sums_compare_by_terms_within_tolerance():
    assert same_sum({"x": 1.0005}, {"x": 1})
    assert not same_sum({"x": 1.01}, {"x": 1})
    assert not same_sum({"x": 1.0, "a": 0.5}, {"x": 1.0})


def test_two_terms_reads_both_coefficients_or_none():
    x, y = _pair(1)
    assert two_terms(0.5 * x + 2 * y, x, y) == (0.5, 2.0)
    assert two_terms(y, x, y) == (0.0, 1.0)
    assert two_terms(x.exp(), x, y) is None
    assert two_terms(x, x, torch.randn(2)) is None


def test_a_planted_scale_and_line_are_read_back():
    x, a = _pair(2)
    x, a = x.double(), a.double()
    assert abs(scale(-0.125 * x, x) + 0.125) < 1e-12
    slope, offset = line(3 * x - 0.5, x)
    assert abs(slope - 3) < 1e-12 and abs(offset + 0.5) < 1e-12
    # a scale leaves what it does not explain: the caller judges the residual
    c = scale(x + a, x)
    assert ((x + a) - c * x).norm() > 0.5 * a.norm()


def test_a_scale_about_an_origin_is_read_per_candidate():
    x, a = _pair(3)
    x, a = x.double(), a.double()
    bias = torch.full((8,), 0.3, dtype=torch.float64)
    target = bias + 2.5 * (x - bias)
    c, fitted = scales_about(torch.stack([x, a]), target, bias)
    assert abs(c[0].item() - 2.5) < 1e-12 and torch.allclose(fitted[0], target)
    assert not torch.allclose(fitted[1], target)
