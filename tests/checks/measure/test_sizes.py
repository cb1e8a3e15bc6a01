"""Coded dimensions (tformer_grading/checks/measure/sizes.py): a planted shape error is
read back as the case's sizes, and nothing is read where nothing can be.

Bug this guards against: a crash forwarded with PyTorch's numbers alone ("shape
'[2, 5, 3, 170]' is invalid for input of size 120"), which leaves the learner to work
out which of their sizes each number is; and its opposite, a decoding that names a size
the number is not. The checks' own use is in the banks (tests/bank/bank_ch01.py
`split_hard_coded_d_model`, bank_ch02.py `attention_dot_T`, ...).
"""

from __future__ import annotations

import doctest
import itertools
import math
import warnings

import pytest
import torch

from tformer_grading.checks.diagnosis import CheckFailure, Raised, fail
from tformer_grading.checks.measure import sizes
from tformer_grading.checks.measure.sizes import Sizes, explain, named

CASE = named(B=2, H=3, Sq=4, Sk=5, Dh=8)


def test_examples_run_and_print_what_they_say():
    result = doctest.testmod(
        sizes, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    )
    assert result.failed == 0 and result.attempted >= 5


def _raised(fn) -> str:
    """The text a check forwards: PyTorch's error as a Raised value, and the case."""
    try:
        fn()
    except RuntimeError as exc:
        return f"your code raised {Raised(exc)!r} while the check ran case {CASE}"
    raise AssertionError("the planted mistake did not raise")


def _inputs():
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 3, 4, 8, generator=g)
    k = torch.randn(2, 3, 5, 8, generator=g)
    return q, k


def test_k_dot_T_on_four_axes_reads_as_heads_against_keys():
    q, k = _inputs()
    with warnings.catch_warnings():  # PyTorch deprecates .T on 4 axes, once per process
        warnings.simplefilter("ignore")
        said = explain(_raised(lambda: q @ k.T))  # k.T reverses all four axes
    assert "3 (H) against 5 (Sk)" in said


def test_a_row_sum_without_keepdim_reads_as_keys_against_queries():
    q, k = _inputs()
    scores = q @ k.transpose(-2, -1)
    said = explain(_raised(lambda: scores / scores.sum(-1)))
    assert "5 (Sk) against 4 (Sq) on their axis 3" in said


def test_a_hard_coded_width_is_read_as_no_size():
    q, _ = _inputs()
    said = explain(_raised(lambda: q.reshape(2, 4, 512)))
    assert "[2, 4, 512] = [B, Sq, 512]" in said
    assert "of 192 = B·H·Sq·Dh elements" in said
    assert "512 is none of the sizes named here" in said


def test_a_product_is_read_with_the_fewest_sizes():
    assert Sizes.read(CASE).name(24) == "H·Dh"
    assert Sizes.read(CASE).name(40) == "Sk·Dh"


@pytest.mark.parametrize("count", [1, 2, 3])
def test_every_product_of_distinct_sizes_is_read_back(count):
    given = Sizes.read(CASE)
    for group in itertools.combinations(given.named, count):
        number = math.prod(v for _, v in group)
        assert given.name(number) is not None, group


def test_code_quoted_from_the_learner_names_no_size():
    text = "raised X at line 3 of your code: `x.view(b, n_heads=8)` on case B=2"
    assert Sizes.read(text).named == (("B", 2),)


def test_sizes_that_coincide_are_said_to():
    assert Sizes.read("B=2, H=2, S=5").name(2) == "B or H"


def test_no_size_error_or_no_sizes_reads_nothing():
    assert explain(f"your weights sum to 1.3 on case {CASE}") == ""
    assert explain("The size of tensor a (5) must match the size of tensor b (4)") == ""


def test_an_axis_that_does_not_exist_needs_no_sizes():
    w = torch.rand(3, 4, 6)
    try:
        w.sum(dim=3)
    except IndexError as exc:
        said = explain(f"your code raised {Raised(exc)!r}")
    assert (
        said
        == "The tensor has 3 axes (0 to 2, or -3 to -1) and the code asked for axis 3."
    )


def test_a_failure_carries_the_reading():
    with pytest.raises(CheckFailure) as info:
        fail("attention", _raised(lambda: torch.randn(2, 3, 4, 8).reshape(2, 4, 512)))
    assert str(info.value).endswith(
        "512 is none of the sizes named here, nor a product of them."
    )
