"""tformer_grading.pictures.cells: each wrong cell of a map gets the one mark that
says how it is wrong, and a query with no key to attend is judged as the checks judge
it (zeros or a uniform row)."""

import torch

from tformer_grading.pictures.cells import mask_cells, weight_cells

CAUSAL = torch.ones(4, 4, dtype=torch.bool).tril()


def _causal_weights(scores: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    return scores.masked_fill(~keep, float("-inf")).softmax(-1)


def test_a_mask_that_lets_the_future_in_marks_the_future():
    cells = mask_cells(torch.ones(4, 4, dtype=torch.bool), CAUSAL)
    future = [(i, j) for i in range(4) for j in range(4) if j > i]
    assert cells.marked["attends_masked"] == future
    assert cells.marked["ignores_allowed"] == []


def test_a_strictly_lower_mask_marks_the_diagonal_it_blocks():
    cells = mask_cells(torch.ones(4, 4, dtype=torch.bool).tril(-1), CAUSAL)
    assert cells.marked["ignores_allowed"] == [(i, i) for i in range(4)]
    assert cells.marked["attends_masked"] == []


def test_weights_on_masked_keys_and_rows_that_do_not_sum_to_one():
    scores = torch.randn(4, 4, generator=torch.Generator().manual_seed(0))
    right = _causal_weights(scores, CAUSAL)
    after = scores.softmax(-1) * CAUSAL  # masked after the softmax: rows sum below 1
    cells = weight_cells(after, right, CAUSAL)
    assert cells.rows_off == [0, 1, 2]  # the last row has every key: it is right
    assert cells.marked["attends_masked"] == []
    assert {i for i, _ in cells.marked["differs"]} == {0, 1, 2}
    leaked = weight_cells(scores.softmax(-1), right, CAUSAL)
    future = [(i, j) for i in range(4) for j in range(4) if j > i]
    assert leaked.marked["attends_masked"] == future


def test_a_fully_masked_query_may_be_zeros_or_uniform_but_not_nan():
    keep = CAUSAL.clone()
    keep[2] = False
    right = _causal_weights(torch.zeros(4, 4), keep).nan_to_num(0.0)
    uniform = right.clone()
    uniform[2] = 0.25
    assert weight_cells(uniform, right, keep).count == 0
    nan = right.clone()
    nan[2] = float("nan")
    cells = weight_cells(nan, right, keep)
    assert cells.marked["not_finite"] == [(2, j) for j in range(4)]
    assert cells.rows_off == [2]


def test_right_weights_mark_nothing():
    w = torch.rand(3, 5).softmax(-1)
    assert weight_cells(w.clone(), w).count == 0
    assert mask_cells(CAUSAL.clone(), CAUSAL).count == 0
