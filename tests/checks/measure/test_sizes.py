"""Coded dimensions (tformer_grading/checks/measure/sizes.py): a case's sizes read from
its label, and a number read back as one of them, a product of them, or none.

Bug this guards against: a reading that names a size the number is not (a hard-coded
8 shown as "H·B" only because 4·2 = 8 in that case: products are of sizes named next
to each other), or a learner's own code taken for the case's sizes.
"""

from __future__ import annotations

import doctest
import math

import pytest

from tformer_grading.checks.measure import sizes
from tformer_grading.checks.measure.sizes import Sizes, named

CASE = named(B=2, H=3, Sq=4, Sk=5, Dh=8)


def test_examples_run_and_print_what_they_say():
    result = doctest.testmod(
        sizes, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    )
    assert result.failed == 0 and result.attempted >= 5


def test_a_merged_axis_is_read_as_neighbours_in_the_label():
    given = Sizes.read(CASE)
    assert given.name(6) == "B·H" and given.name(40) == "Sk·Dh"
    assert given.name(10) is None  # B·Sk, but B and Sk are not named side by side


def test_a_count_of_elements_is_read_as_any_product():
    given = Sizes.read(CASE)
    assert given.name(10, any_product=True) == "B·Sk"
    assert given.name(2 * 3 * 4 * 8, any_product=True) == "B·H·Sq·Dh"


@pytest.mark.parametrize("count", [1, 2, 3])
def test_every_product_of_neighbours_is_read_back(count):
    given = Sizes.read(CASE)
    for i in range(len(given.named) - count + 1):
        group = given.named[i : i + count]
        assert given.name(math.prod(v for _, v in group)) is not None, group


def test_a_typed_constant_is_no_size():
    # 8 = H·B in this case, but H and B are not neighbours: a typed 8 reads as 8.
    given = Sizes.read("D=20, H=4, Dh=5, B=2, Sq=3, Sk=7")
    assert given.shape([2, 3, 8, 64]) == "[B, Sq, 8, 64]"


def test_code_quoted_from_the_learner_names_no_size():
    text = "raised X at line 3 of your code: `x.view(b, n_heads=8)` on case B=2"
    assert Sizes.read(text).named == (("B", 2),)


def test_sizes_that_coincide_are_said_to():
    assert Sizes.read("B=2, H=2, S=5").name(2) == "B or H"


def test_a_count_of_a_buffer_built_for_another_size_reads_its_constant():
    # A causal mask cut from a [512, 512] buffer, one from [S, 1024], a [B, D] x 5.
    given = Sizes.read("x [B=2, S=7, D=12]")
    assert given.count(512 * 512) == ("512²", 512)
    assert given.count(7 * 1024) == ("S·1024", 1024)
    assert given.count(2 * 12 * 5, seen=[2, 5]) == ("B·D·5", 5)


def test_a_count_the_sizes_read_has_no_constant():
    given = Sizes.read("x [B=2, S=7, D=12]")
    assert given.count(2 * 7 * 12) == ("B·S·D", None)
    assert given.count(49) == ("S²", None)
    assert given.count(101) == ("", None)  # prime: no size, no buffer reads it
    assert Sizes.read("B=2, H=2").count(4) == ("B·H", None)


def test_a_number_that_is_a_size_doubled_or_two_sizes_added_is_said_so():
    # Held-out trial 2026-12-07b: a mask over T + S keys and one over 2·S were each
    # said to be "none of the sizes", true but no help.
    cached = Sizes.read("V=11, D=16, H=2, Dh=8, T=4, B=3, S=5")
    assert cached.relation(9) == "T + S"
    assert Sizes.read("V=11, D=16, H=2, Dh=8, B=3, S=5").relation(10) == "twice S"
    assert cached.relation(101) is None
