"""sinusoidal_encoding (chapter 5, book/ch05_model): the unit tests of
``ch05.check_sinusoidal_encoding`` and of ``ch05.check_by_hand`` on it, with wrong
tables (each rejected with its named diagnosis) and right ones written differently
(each accepted).

Beyond the bank (bank_sinusoidal_encoding.py): the lesson a failure points to (§5.2),
the reference refused by the hidden test, and the fit that reads a table's layout,
start and amplitude.
"""

import math

import pytest
import torch
from units_ch05 import pe_right_div_term, pe_swapped

from tformer_grading.checks import CheckFailure, ch05
from tformer_grading.checks.ch05.sinusoidal_encoding import (
    EXPECTED_LAYOUT,
    fit_problems,
    fit_sinusoids,
)

# --------------------------------------------------------------------------- sinusoidal_encoding


def pe_right_loops(n, d):  # straight from the formula, in float64
    pe = torch.zeros(n, d, dtype=torch.float64)
    for pos in range(n):
        for i in range(d // 2):
            pe[pos, 2 * i] = math.sin(pos / 10000 ** (2 * i / d))
            pe[pos, 2 * i + 1] = math.cos(pos / 10000 ** (2 * i / d))
    return pe


def pe_right_stack(
    n, d
):  # sin and cos stacked on a new last axis, then flattened (interleaves them)
    angle = torch.arange(n)[:, None] / torch.pow(10000.0, torch.arange(0, d, 2) / d)
    return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(1)


def pe_exponent_i(n, d):  # 10000^(i/d) with i the pair index
    angle = torch.arange(n)[:, None] / torch.pow(10000.0, torch.arange(d // 2) / d)
    return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(1)


def pe_no_minus(n, d):  # div_term without the minus sign
    position = torch.arange(n, dtype=torch.float).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d, 2).float() * (math.log(10000.0) / d))
    pe = torch.zeros(n, d)
    pe[:, 0::2], pe[:, 1::2] = (
        torch.sin(position * div_term),
        torch.cos(position * div_term),
    )
    return pe


def pe_per_column(n, d):  # every column its own exponent j/d
    angle = torch.arange(n)[:, None] / torch.pow(10000.0, torch.arange(d) / d)
    pe = angle.clone()
    pe[:, 0::2], pe[:, 1::2] = angle[:, 0::2].sin(), angle[:, 1::2].cos()
    return pe


def pe_no_log(n, d):  # forgot math.log(10000.0)
    position = torch.arange(n, dtype=torch.float).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d, 2).float() * (-1.0 / d))
    pe = torch.zeros(n, d)
    pe[:, 0::2], pe[:, 1::2] = (
        torch.sin(position * div_term),
        torch.cos(position * div_term),
    )
    return pe


def pe_concat(n, d):  # [sin | cos]
    angle = torch.arange(n)[:, None] / torch.pow(10000.0, torch.arange(0, d, 2) / d)
    return torch.cat([angle.sin(), angle.cos()], dim=1)


def pe_from_one(n, d):  # positions 1..n
    return pe_right_div_term(n + 1, d)[1:]


def pe_zeros(n, d):  # the table allocated but never filled
    return torch.zeros(n, d)


@pytest.mark.parametrize("fn", [pe_right_div_term, pe_right_loops, pe_right_stack])
def test_sinusoidal_accepts_right_implementations(fn, capsys):
    ch05.check_sinusoidal_encoding(fn)
    ch05.check_by_hand("sinusoidal_encoding", fn, (10, 8))
    assert capsys.readouterr().out.count("✓ sinusoidal_encoding") == 2


@pytest.mark.parametrize(
    "fn,diagnosis",
    [
        (pe_swapped, "sin and cos swapped"),
        (pe_exponent_i, r"wrong frequencies \(exponent i/D, not 2i/D\)"),
        (pe_no_minus, r"wrong frequencies \(positions multiplied"),
        (pe_per_column, r"wrong frequencies \(one exponent per column\)"),
        (pe_no_log, r"wrong frequencies \(the base 10000 left out\)"),
        (pe_concat, "sin and cos concatenated, not interleaved"),
        (pe_from_one, "positions start at 1"),
        (pe_zeros, "your table is all zeros"),
    ],
)
def test_sinusoidal_rejects_wrong_implementations(fn, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch05.check_sinusoidal_encoding(fn)


def test_sinusoidal_failure_points_to_the_lesson():
    with pytest.raises(CheckFailure) as info:
        ch05.check_sinusoidal_encoding(pe_swapped)
    assert (
        "§5.2 'Sinusoidal positional encoding' in book/ch05_model/lesson.ipynb"
        in str(info.value)
    )


def test_by_hand_rejects_the_reference():
    from tformer_ref.positions import sinusoidal_encoding

    with pytest.raises(CheckFailure, match="calls tformer_ref.sinusoidal_encoding"):
        ch05.check_by_hand(
            "sinusoidal_encoding", lambda n, d: sinusoidal_encoding(n, d), (10, 8)
        )


# ------------------------------------------------------------------------ measurements


def test_fit_reads_the_parameters_of_a_table():
    fit = fit_sinusoids(pe_right_div_term(64, 16))
    assert fit.layout == EXPECTED_LAYOUT and fit_problems(fit, 16, 64) == []
    wrong = fit_sinusoids(pe_from_one(64, 16) * 2)
    problems = " ".join(fit_problems(wrong, 16, 64))
    assert "row 0 is position 1" in problems and "amplitude 2" in problems
