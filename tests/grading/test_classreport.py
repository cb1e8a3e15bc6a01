"""tformer_grading.classreport: each lost cell is put under the mistake that cost it."""

from collections import Counter

import pytest

from tformer_grading import classreport as report


def test_a_named_pitfall_is_counted_under_its_name():
    text = (
        "CheckFailure: split_heads: this looks like the pitfall 'view without "
        "transpose'. You reshaped ..."
    )
    assert report.mistakes(text) == ["view without transpose"]


def test_other_failures_are_counted_by_kind():
    assert report.mistakes("CheckFailure: x: matches none of the known pitfalls") == [
        report.NOT_NAMED
    ]
    assert report.mistakes("NotImplementedError: ") == [report.NOT_ANSWERED]
    assert report.mistakes("GradingIntegrityError: this test cell ...") == [
        report.INTEGRITY
    ]
    assert report.mistakes("NameError: name 'split_heads' is not defined") == [
        report.ERRORED
    ]


# A learner's answer with two slips: softmax over the queries (dim=-2) and scores
# divided by sqrt(d_model) instead of sqrt(head size).
TWO_SLIPS = """
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h, self.d = n_heads, d_model
        self.q, self.k, self.v, self.o = (nn.Linear(d_model, d_model) for _ in range(4))

    def forward(self, query, key, value, mask=None):
        q = split_heads(self.q(query), self.h)
        k = split_heads(self.k(key), self.h)
        v = split_heads(self.v(value), self.h)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d)
        return self.o(merge_heads(torch.softmax(scores, dim=-2) @ v))
"""


def test_a_diagnosis_of_two_mistakes_counts_each():
    """Bug (reader review 2026-12-05 §6): a cell that showed two mistakes at once was
    counted as "a mistake the checks did not name". Cause: only "the pitfall '…'" was
    read. Guard: the check's own two-mistake diagnosis, counted under both names."""
    import math

    import torch
    from torch import nn

    from tformer_grading.checks import ch01
    from tformer_grading.checks.diagnosis import CheckFailure
    from tformer_ref.heads import merge_heads, split_heads

    scope = dict(math=math, torch=torch, nn=nn)
    scope.update(split_heads=split_heads, merge_heads=merge_heads)
    exec(TWO_SLIPS, scope)
    with pytest.raises(CheckFailure) as failed:
        ch01.check_multi_head_attention(scope["MultiHeadAttention"])
    why = f"CheckFailure: {failed.value}"
    names = report.mistakes(why)
    assert names == [
        "softmax over the wrong axis",
        "scores divided by the wrong number",
    ]
    row = {"status": "graded", "cells": {"t": 0.0}, "max_cells": {"t": 4.0}}
    table = {"bob": {**row, "diagnoses": {"t": why}}}
    assert report.pitfall_counts(table) == Counter({("t", n): 1 for n in names})


def test_a_count_that_does_not_match_the_names_is_not_guessed():
    why = "CheckFailure: M: this looks like 3 mistakes at once: 'a': x; 'b': y."
    assert report.mistakes(why) == [report.NOT_NAMED]


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


def test_long_mistake_names_leave_the_bars_most_of_the_plot(tmp_path):
    """Bug (reader review 2026-12-05 §6): one-line labels such as "heads cut or merged
    in the wrong layout  (test_mha_matches_reference)" left the bars the right quarter
    of pitfalls.png. Guard: the bars' colour starts in the left half of the image."""
    import matplotlib.image

    counts = Counter(
        {
            (
                "test_mha_matches_reference",
                "heads cut or merged in the wrong layout",
            ): 3,
            ("test_mha_written_by_hand", "a mistake the checks did not name"): 1,
            ("test_split_heads", "the learner's code raised an error " * 3): 1,
        }
    )
    report.write_pitfalls(tmp_path, counts, learners=4)
    image = matplotlib.image.imread(tmp_path / "pitfalls.png")[..., :3]
    bar = (abs(image - [0x44 / 255, 0x77 / 255, 0xAA / 255]) < 0.02).all(axis=-1)
    columns = bar.any(axis=0).nonzero()[0]
    assert columns[0] < 0.5 * image.shape[1]
    assert columns[-1] - columns[0] > 0.4 * image.shape[1]  # 3 of 4 learners' bar
