"""The banks grade with the exercises' own test cells (tests/bank/exercise_cells.py):
every test cell of a banked exercise notebook is run by some bank, hidden tests
included, so a check added to a notebook is graded on the bank at once.

Bug this guards against: a check added to an exercise's test cells but not to its
bank's hand-typed list (or the other way round), so the bank measured a grader the
learner never meets.
"""

from __future__ import annotations

import pytest

from bank import graders_of
from exercise_cells import cells
from test_bank import CHAPTERS


BANKED = sorted({g.chapter for c in CHAPTERS for g in graders_of(c).values()})


@pytest.mark.parametrize("folder", BANKED)
def test_every_test_cell_of_a_banked_exercise_is_graded_by_a_bank(folder):
    graded = {
        cell.name
        for chapter in CHAPTERS
        for grader in graders_of(chapter).values()
        if grader.chapter == folder
        for cell in grader.cells
    }
    tests = [cell.name for cell in cells(folder) if cell.kind == "test"]
    assert tests and [name for name in tests if name not in graded] == []


def test_a_cells_hidden_tests_are_read_with_it():
    split = next(c for c in cells("ch01_shapes") if c.name == "test_split_heads")
    assert "check_split_heads(split_heads)" in split.code
    assert 'check_by_hand("split_heads"' in split.code  # the hidden test
    assert "HIDDEN" not in split.code and "split_heads" in split.names
