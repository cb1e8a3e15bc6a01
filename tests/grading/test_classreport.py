"""tformer_grading.classreport: each lost cell is put under the mistake that cost it."""

from collections import Counter

from tformer_grading import classreport as report


def test_a_named_pitfall_is_counted_under_its_name():
    text = (
        "CheckFailure: split_heads: this looks like the pitfall 'view without "
        "transpose'. You reshaped ..."
    )
    assert report.mistake(text) == "view without transpose"


def test_other_failures_are_counted_by_kind():
    assert report.mistake("CheckFailure: x: matches none of the known pitfalls") == (
        report.NOT_NAMED
    )
    assert report.mistake("NotImplementedError: ") == report.NOT_ANSWERED
    assert report.mistake("GradingIntegrityError: this test cell ...") == (
        report.INTEGRITY
    )
    assert report.mistake("NameError: name 'split_heads' is not defined") == (
        report.ERRORED
    )


def test_counts_cover_graded_learners_who_lost_the_cell_only():
    why = "CheckFailure: s: this looks like the pitfall 'p'."
    table = {
        "a": {
            "status": "graded",
            "cells": {"t": 0.0},
            "max_cells": {"t": 2.0},
            "diagnoses": {"t": why},
        },
        "b": {
            "status": "graded",
            "cells": {"t": 2.0},
            "max_cells": {"t": 2.0},
            "diagnoses": {"t": why},  # a warning-like diagnosis on a full cell
        },
        "c": {"status": "not graded", "cells": {}, "diagnoses": {"t": why}},
    }
    assert report.pitfall_counts(table) == Counter({("t", "p"): 1})


def test_a_mistake_that_reads_as_tex_or_a_formula_is_written_as_text(tmp_path):
    """Bug (issue 31): a learner's exception text with ``$\\frac{$`` became a plot
    label, matplotlib parsed it as TeX and the class command exited 3. Guard: labels
    are plain text, CSV cells that a spreadsheet would run are quoted."""
    counts = Counter({("test_a", "$\\frac{$"): 1, ("test_b", "=HYPERLINK(1)"): 2})
    report.write_pitfalls(tmp_path, counts, learners=3)
    assert (tmp_path / "pitfalls.png").read_bytes()[:4] == b"\x89PNG"
    rows = (tmp_path / "pitfalls.csv").read_text().splitlines()
    assert rows == [
        "test_cell,mistake,learners,of_graded",
        "test_b,'=HYPERLINK(1),2,3",
        "test_a,$\\frac{$,1,3",
    ]
