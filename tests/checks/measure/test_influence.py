"""Which input positions change which outputs
(tformer_grading/checks/measure/influence.py).

Bug this guards against: the probe "which earlier tokens each new query is influenced
by", and the positions written as "0..6" or "[0, 6]", lived inside chapter 8's
``lm_step`` check, where no other check could read a mask's rows back with it.
"""

from __future__ import annotations

import torch

from tformer_grading.checks.measure.influence import (
    influence,
    output_changes,
    positions_text,
)

TOKENS = torch.tensor([[1, 2, 3, 4, 0], [4, 3, 2, 1, 0]])


def _attend(keep: torch.Tensor):
    """Outputs [B, S, 2]: output i reads the tokens that row i of ``keep`` [S, T]
    lets it see, each with a weight of its own."""
    weights = torch.tensor([1.0, 10.0, 100.0, 1000.0, 10000.0])

    def f(tokens):
        seen = (tokens.float() * weights)[:, None, :] * keep
        out = seen.sum(-1)
        return torch.stack([out, -out], dim=-1)

    return f


def test_a_causal_mask_is_read_back_row_by_row():
    keep = torch.ones(5, 5, dtype=torch.bool).tril()
    got = influence(_attend(keep), TOKENS, vocab=5)
    assert got == [set(range(i + 1)) for i in range(5)]


def test_a_query_that_sees_the_future_is_read_back():
    keep = torch.ones(5, 5, dtype=torch.bool).tril()
    keep[1, 3] = True  # the planted mistake: query 1 attends to token 3
    got = influence(_attend(keep), TOKENS, vocab=5)
    assert got[1] == {0, 1, 3} and got[0] == {0}


def test_the_first_rows_of_a_full_mask_are_read_as_such():
    """Two new queries after three cached tokens given rows 0 and 1 of the [5, 5]
    causal mask instead of rows 3 and 4: they see too little."""
    rows = torch.ones(5, 5, dtype=torch.bool).tril()[:2]
    got = influence(_attend(rows), TOKENS, vocab=5)
    assert [positions_text(s) for s in got] == ["0", "0..1"]


def test_how_far_each_output_moved_is_measured_per_position():
    keep = torch.ones(5, 5, dtype=torch.bool).tril()
    (moved,) = output_changes(_attend(keep), TOKENS, 5, positions=[2])
    assert moved.shape == (5,)
    assert moved[:2].eq(0).all() and moved[2:].gt(0).all()


def test_an_output_that_cannot_be_read_gives_none():
    assert influence(lambda t: None, TOKENS, vocab=5) is None
    shrinks = lambda t: t.float()[:, : 2 + int(t[0, 0] == 1)]
    assert output_changes(shrinks, TOKENS, 5) is None


def test_the_function_gets_a_copy_it_may_change():
    def spoils(tokens):
        out = tokens.float().cumsum(1)
        tokens.zero_()
        return out

    assert influence(spoils, TOKENS, vocab=5) == [set(range(i + 1)) for i in range(5)]
    assert TOKENS[0, 0] == 1


def test_positions_are_written_as_runs_or_lists():
    assert positions_text(range(3, 7)) == "3..6"
    assert positions_text([4]) == "4"
    assert positions_text({0, 6}) == "[0, 6]"
    assert positions_text([]) == "none"
