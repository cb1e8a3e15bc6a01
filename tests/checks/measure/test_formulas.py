"""Naming the formula behind measured numbers (tformer_grading/checks/measure/
formulas.py): a divisor planted as a formula of the case's sizes is named back, and a
number no formula gives is named by none.

Bug this guards against: a formula named from one case where it fits only by chance
(every case must agree), and the formula tables copied per chapter (2026-12-05
aesthetics review, family F3).
"""

from __future__ import annotations

import math

import pytest

from tformer_grading.checks.measure.formulas import (
    name_of,
    names_of,
    number,
    numbers,
    powers,
)

TABLE = powers(("B", "H", "Sq", "Sk", "Dh"), products={"d_model": ("H", "Dh")})
CASES = [
    {"B": 2, "H": 3, "Sq": 4, "Sk": 5, "Dh": 8},
    {"B": 2, "H": 4, "Sq": 5, "Sk": 5, "Dh": 8},
    {"B": 3, "H": 3, "Sq": 4, "Sk": 6, "Dh": 16},
]


@pytest.mark.parametrize(
    ("formula", "name"),
    [
        (lambda s: 1.0, "1 (no scaling)"),
        (lambda s: math.sqrt(s["Dh"]), "√Dh"),
        (lambda s: s["Dh"], "Dh"),
        (lambda s: math.sqrt(s["H"] * s["Dh"]), "√(H·Dh = d_model)"),
        (lambda s: 2 * math.sqrt(s["Dh"]), "2·√Dh"),
        (lambda s: s["Sk"] ** 0.5, "√Sk"),
        (lambda s: 1 / math.sqrt(s["Dh"]), "1/√Dh"),
    ],
)
def test_a_planted_formula_is_named_back(formula, name):
    assert name_of([formula(s) for s in CASES], CASES, TABLE) == name


def test_a_formula_true_on_one_case_only_is_not_named():
    values = [math.sqrt(s["Dh"]) for s in CASES]
    values[2] *= 1.1
    assert name_of(values, CASES, TABLE) is None


def test_a_hard_coded_constant_is_named_by_no_formula():
    assert name_of([8.0, 8.0, 8.0], CASES, TABLE) is None  # Dh is 16 in case 3


def test_numbers_are_written_with_four_significant_digits():
    assert number(math.sqrt(8)) == "2.828" and numbers([64, 0.5]) == "64, 0.5"


def test_every_formula_the_sizes_cannot_tell_apart_is_named():
    one_case = [{"B": 2, "H": 4, "Sq": 4, "Sk": 5, "Dh": 16}]
    assert {"√Dh", "2·B", "H", "Sq"} <= set(names_of([4.0], one_case, TABLE))
    assert names_of([math.sqrt(s["Dh"]) for s in CASES], CASES, TABLE)[0] == "√Dh"
    assert names_of([5.0, 5.0, 5.0], CASES, TABLE) == []
