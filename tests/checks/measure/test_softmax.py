"""Reading a softmax back (tformer_grading/checks/measure/softmax.py): the axis its
weights sum to 1 over and the factor on its scores, planted and read back.

Bug this guards against: four copies of the same reading in four chapters, each with
its own tolerance (2026-12-05 aesthetics review, families F2 and F8); a factor read
wrongly where a weight underflowed to 0, or where a row has a single usable weight.
"""

from __future__ import annotations

import math

import pytest
import torch

from tformer_grading.checks.measure.softmax import (
    FIT_RTOL,
    SEVERAL_AXES,
    SINGLE_AXES,
    axes_name,
    clamp_bound,
    divisor_search,
    double_centred,
    key_shift_divisors,
    mixing,
    normalised_over,
    pooled_divisor,
    row_scales,
    softmax_source,
    varying_axes,
)

SHAPE = (2, 3, 4, 5)


def scores(seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*SHAPE, generator=g, dtype=torch.float64)


@pytest.mark.parametrize("dim", [0, 1, 2, 3])
def test_the_axis_a_softmax_ran_over_is_read_back(dim):
    w = scores().softmax(dim=dim)
    assert normalised_over(w, SINGLE_AXES) == (dim,)


def test_weights_normalised_over_several_axes_together():
    s = scores()
    w = s.flatten(2).softmax(-1).view(SHAPE)  # queries and keys together
    assert normalised_over(w, SINGLE_AXES) is None
    assert normalised_over(w, SEVERAL_AXES) == (2, 3)
    assert axes_name((2, 3)) == "axes 2, 3 (queries, keys) together"


def test_negative_or_unnormalised_weights_sum_to_1_over_no_axis():
    w = scores().softmax(-1)
    assert normalised_over(w * 1.5, SINGLE_AXES + SEVERAL_AXES) is None
    assert normalised_over(w - w.mean(), SINGLE_AXES + SEVERAL_AXES) is None


@pytest.mark.parametrize("divisor", [1.0, 2.0, math.sqrt(8), 8.0, 64.0])
def test_the_divisor_of_the_scores_is_read_back_whatever_it_is(divisor):
    s = scores(1)
    c, residual = row_scales((s / divisor).softmax(-1), s)
    assert residual < FIT_RTOL
    assert torch.allclose(1 / c, torch.full_like(c, divisor), rtol=1e-6)
    assert varying_axes(c) == []


def test_a_divisor_that_changes_with_the_head_is_said_to():
    s = scores(2)
    per_head = torch.tensor([1.0, 2.0, 4.0], dtype=torch.float64).view(1, 3, 1, 1)
    c, residual = row_scales((s / per_head).softmax(-1), s)
    assert residual < FIT_RTOL and varying_axes(c) == ["heads"]


def test_underflowed_weights_do_not_bias_the_reading():
    s = scores(3) * 200  # most weights underflow to exactly 0 in float64
    w = s.softmax(-1)
    assert (w == 0).any()
    c, residual = row_scales(w, s)
    usable = ~torch.isnan(c)
    assert usable.any() and torch.allclose(c[usable], torch.ones_like(c[usable]))


def test_scores_of_other_vectors_do_not_fit():
    s, other = scores(4), scores(5)
    _, residual = row_scales(s.softmax(-1), other)
    assert residual > 100 * FIT_RTOL


def test_a_term_per_query_and_per_key_is_centred_away():
    s = scores(6)
    shifted = (
        s
        + torch.randn(*SHAPE[:3], 1, dtype=s.dtype)
        + torch.randn(*SHAPE[:2], 1, SHAPE[3], dtype=s.dtype)
    )
    assert torch.allclose(double_centred(shifted), double_centred(s))


def test_an_output_is_solved_back_for_the_weights_it_applied():
    g = torch.Generator().manual_seed(7)
    v = torch.randn(2, 3, 4, 6, generator=g, dtype=torch.float64)  # S=4 <= Dh=6
    w = torch.rand(2, 3, 5, 4, generator=g, dtype=torch.float64)
    assert torch.allclose(mixing(w @ v, v), w)
    assert mixing(torch.randn(2, 3, 5, 6, generator=g, dtype=torch.float64), v) is None


def test_a_divisor_pooled_over_the_allowed_entries_is_read_back():
    s = scores(8)
    keep = torch.ones(SHAPE[2:], dtype=torch.bool).tril()
    w = (s / 3).masked_fill(~keep, -math.inf).softmax(-1)
    d, residual = pooled_divisor(w, s, keep.expand(SHAPE))
    assert abs(d - 3) < 1e-9 and residual < 1e-9
    # no row with two allowed keys: nothing to fit
    assert pooled_divisor(w, s, torch.zeros(SHAPE, dtype=torch.bool)) is None


def test_a_divisor_is_found_from_an_output_alone():
    s, v = scores(9), scores(10).mT  # v [B, H, Sk=5, 4]

    def outputs_at(divisors):
        return (s / divisors.view(-1, 1, 1, 1, 1)).softmax(-1) @ v

    d, err, factor = divisor_search(outputs_at, outputs_at(torch.tensor([11.0]))[0])
    assert abs(d / 11 - 1) < 1e-5 and err < 1e-6 and factor == 1.0


def test_a_per_key_shift_and_a_clamp_are_read_back():
    s = scores(11)
    shifted = (s / 4 + torch.randn(*SHAPE[:2], 1, SHAPE[3], dtype=s.dtype)).softmax(-1)
    assert torch.allclose(
        key_shift_divisors(shifted, s), torch.full((6,), 4.0, dtype=s.dtype)
    )
    assert key_shift_divisors(torch.rand(SHAPE, dtype=s.dtype), s) is None
    big = s * 20
    assert clamp_bound(big.clamp(max=7.5).softmax(-1), big) == 7.5


def test_softmax_source_names_the_scores_a_softmax_was_made_of():
    g = torch.Generator().manual_seed(3)
    s, t = torch.randn(2, *SHAPE, generator=g, dtype=torch.float64)
    name, c = softmax_source((t / 4).softmax(-1), [("s", s), ("t", t)])
    assert name == "t" and torch.allclose(c, torch.full_like(c, 0.25))
    assert softmax_source((s * s).softmax(-1), [("s", s), ("t", t)]) is None
    assert softmax_source(s.softmax(-2), [("s", s)]) is None  # over the queries
