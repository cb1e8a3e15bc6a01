"""The fill value of a masked softmax read back (tformer_grading/checks/measure/fills.py).

Bug this guards against: the fill probe and the reading of implied scores written
inside ch03's masked-attention check, where the half-precision check and any other
masked attention (a bug hunt's) could not reuse them; a fill read wrongly at the edge
of float32's range, or a finite fill taken for -inf.
"""

from __future__ import annotations

import math

import pytest
import torch

from tformer_grading.checks.measure.fills import (
    FILL_LEVELS,
    fill_probe,
    implied_fill,
    read_fill,
)


def _probe_weights(fill):
    q, k, _, mask = fill_probe()
    return (q @ k.mT).masked_fill(~mask, fill).softmax(-1)


@pytest.mark.parametrize("fill", [-3.0, -12.0, -1e4])
def test_a_fill_at_or_near_a_level_is_read_back(fill):
    said, bound = read_fill(_probe_weights(fill))
    assert bound == pytest.approx(fill, rel=1e-3)
    assert said.startswith(" Measured in float32, your fill value is")


def test_a_fill_between_levels_is_bounded_by_them():
    said, bound = read_fill(_probe_weights(-3e9))
    assert said.endswith("between -1e+10 and -1e+09.")
    assert bound == -1e9  # the fill is at most this


def test_minus_inf_and_float32_min_are_told_apart():
    said, bound = read_fill(_probe_weights(-math.inf))
    assert "-inf (a query with every key masked gets NaN)" in said
    said, bound = read_fill(_probe_weights(torch.finfo(torch.float32).min))
    assert "below -1e+38" in said and bound == -math.inf


def test_no_fill_reading_for_weights_of_another_shape():
    assert read_fill(torch.rand(1, 1, 4, 4)) == ("", None)


def test_the_probe_keeps_one_key_per_level_and_none_for_the_last_query():
    q, _, _, mask = fill_probe()
    n = len(FILL_LEVELS)
    assert q.shape == (1, 1, n + 1, 1) and mask.shape == (1, 1, n + 1, 4)
    assert mask[0, 0, :n].sum(-1).eq(1).all() and not mask[0, 0, n].any()


def _scores(seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(2, 3, 5, generator=g, dtype=torch.float64)


def _keep():
    keep = torch.ones(2, 3, 5, dtype=torch.bool)
    keep[..., 3:] = False
    keep[1, 2] = False  # a query with no key: not read
    return keep


def test_a_constant_fill_is_read_from_the_weights():
    s, keep = _scores(), _keep()
    (fill, spread), (_, shift_spread) = implied_fill(
        s.masked_fill(~keep, -4.0).softmax(-1), s, keep
    )
    assert fill == pytest.approx(-4.0) and spread < 1e-9 and shift_spread > 1e-2


def test_a_mask_added_to_the_scores_reads_as_a_shift():
    s, keep = _scores(), _keep()
    added = torch.where(keep, 0.0, -3.0)
    (_, spread), (shift, shift_spread) = implied_fill((s + added).softmax(-1), s, keep)
    assert shift == pytest.approx(-3.0) and shift_spread < 1e-9 and spread > 1e-2
