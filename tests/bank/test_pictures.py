"""The pictures the checks draw for the bank's wrong answers: one for every answer of
an exercise with attention weights or masks whose first failure is about their values,
of the case the message names, marking at least one cell; and for answers whose mistake
has a known shape (a triangle, a row, the masked keys), exactly those cells.

Each answer is graded as in test_bank.py; the failure object carries the picture, whose
PNG is drawn only when asked for: here once an exercise (tests/pictures test drawing).
"""

from __future__ import annotations

import re

import pytest
import torch
from bank import entries, failure_of, graders_of

from tformer_grading.checks import pieces
from tformer_grading.checks.diagnosis import CheckFailure
from tformer_grading.pictures.attach import shown_order

#: chapter -> exercise -> (at least this many of its wrong answers carry a picture).
#: The others fail on what a picture cannot show: a crash, a shape, a dtype, the output.
PICTURED = {
    "ch01": {"multi_head_attention": 15},
    "ch02": {"attention": 30},
    "ch03": {"causal_mask": 15, "padding_mask": 15, "masked_attention": 25},
    "bughunt_attention": {"self_attention": 8},
    "ch08": {"lm_step": 2},
}


def _failure(entry, graders) -> CheckFailure:
    pieces.forget()  # each answer is a notebook of its own
    failure = failure_of(graders[entry.exercise], entry.answer)
    assert failure is not None, f"{entry.id} was accepted"
    return failure


@pytest.fixture(scope="module", params=sorted(PICTURED))
def failures(request):
    chapter = request.param
    graders = graders_of(chapter)
    wrong = [
        e
        for e in entries(chapter)
        if e.expect is not None and e.exercise in PICTURED[chapter]
    ]
    return chapter, {e.name: (e, _failure(e, graders)) for e in wrong}


def test_wrong_answers_carry_a_picture_of_the_case_their_message_names(failures):
    chapter, found = failures
    counts = dict.fromkeys(PICTURED[chapter], 0)
    for name, (entry, failure) in found.items():
        picture = failure.picture
        if picture is None:
            continue
        if not counts[entry.exercise]:  # drawn once an exercise (a kernel draws each)
            assert picture.png[:8] == b"\x89PNG\r\n\x1a\n", name
        counts[entry.exercise] += 1
        assert picture.cells.count > 0, name
        case = re.search(r"case (.+?)(, batch \d+, head \d+)?\.", picture.caption)
        if case:  # the bug hunt's one probe has no case label
            # A message that names cases is pictured on one of them (shown_order).
            labels = [case.group(1), "<none>"]
            assert shown_order(labels, str(failure)) in ([0], [0, 1]), (name, failure)
    short = {x: n for x, n in counts.items() if n < PICTURED[chapter][x]}
    assert not short, f"too few pictures (found, by exercise): {short}"


def _marked(failures, name, mark):
    return failures[1][name][1].picture.cells.marked[mark]


def _upper(size, offset=1, width=None):
    """The cells (query, key) with key >= query + offset, of a [size, width] map."""
    keys = range(width or size)
    return [(i, j) for i in range(size) for j in keys if j >= i + offset]


def test_the_marked_cells_are_the_mistake(failures):
    chapter, found = failures
    if chapter == "ch01":
        # A causal mask where there should be none: the future keys get nothing.
        causal = found["MHAAlwaysCausal"][1].picture.cells.marked
        assert causal["ignores_allowed"] == _upper(3, 1, width=7)
        return
    if chapter == "bughunt_attention":
        # Filling with 0: in sequence 2, the one the message names, the masked keys
        # (all but the last) keep weight.
        picture = found["FillZero"][1].picture
        assert "sequence 2, head 0" in picture.caption
        assert picture.cells.marked["attends_masked"] == [
            (i, j) for i in range(4) for j in range(3)
        ]
        return
    if chapter == "ch08":
        # The mask's first rows, not its last: the new token (position 6) is measured
        # to see position 0 and itself (the residual path), not positions 1 to 5.
        _, failure = found["step_mask_top_rows"]
        assert "influenced by the tokens at positions [0, 6]" in str(failure)
        rows = failure.picture.cells.marked
        assert rows["ignores_allowed"] == [(0, j) for j in range(1, 6)]
        return
    if chapter == "ch02":
        # Softmax over the queries: every row's sum is off, and the picture says so.
        picture = found["attention_softmax_dim2"][1].picture
        assert picture.cells.rows_off == [0, 1, 2, 3]
        assert "not 1" in picture.caption
        return
    # triu for tril: the largest size (7) is shown, the future let in, the past shut.
    triu = found["causal_triu"][1].picture.cells.marked
    assert triu["attends_masked"] == _upper(7)
    assert triu["ignores_allowed"] == sorted((j, i) for i, j in _upper(7))
    # A [B, 1, S, 1] padding mask: padded queries blocked, padded keys let in.
    query_axis = found["padding_query_axis"][1]
    tokens = torch.tensor([5, 6, 7, 0, 0])  # the message's case, sequence 0
    assert "tokens [2, 5], pad_id=0" in query_axis.picture.caption
    pad = (tokens == 0).tolist()
    assert query_axis.picture.cells.marked["attends_masked"] == [
        (i, j) for i in range(5) for j in range(5) if pad[j] and not pad[i]
    ]
    # A bool mask added to the scores: every masked key keeps weight.
    added = found["masked_adds_bool_mask"][1].picture.cells.marked["attends_masked"]
    assert added == [(i, j) for i in range(4) for j in range(3, 6)]
