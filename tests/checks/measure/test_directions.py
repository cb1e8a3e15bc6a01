"""How many directions an output moves when one input changes
(tformer_grading/checks/measure/directions.py).

Bug this guards against: the held-out trial of 2026-12-07 found an attention whose
output einsum summed the values' head axis away ('nhqk,nkgd->nqhd'); no check measured
that each head averages its own head's values. Such a narrow point (every head reading
the same head_dim numbers of a value token) is read back as the number of directions
the output moves in, whatever the code that makes it.
"""

from __future__ import annotations

import pytest
import torch

from tformer_grading.checks.measure.directions import (
    changes_spread,
    spread,
    with_changes,
)

F64 = torch.float64


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _attention(heads: int, dh: int, summed: bool):
    """f(values [B, L, H·Dh]) -> [B, H·Dh]: each head's average of the L tokens with
    weights of its own; ``summed`` plants the mistake, the heads' values summed."""
    weights = torch.softmax(torch.randn(heads, 3, generator=_gen(5), dtype=F64), -1)

    def f(v):
        v = v.view(len(v), 3, heads, dh)
        if summed:
            v = v.sum(2, keepdim=True).expand(-1, -1, heads, -1)
        return torch.einsum("hk,nkhd->nhd", weights, v).flatten(1)

    return f


def _token_0_changes(n: int, d: int) -> torch.Tensor:
    changes = torch.zeros(n, 3, d, dtype=F64)
    changes[:, 0] = torch.randn(n, d, generator=_gen(2), dtype=F64)
    return changes


@pytest.mark.parametrize("heads,dh", [(4, 2), (3, 4), (2, 3)])
def test_values_summed_over_the_heads_are_read_as_one_heads_width(heads, dh):
    x = torch.randn(3, heads * dh, generator=_gen(1), dtype=F64)
    changes = _token_0_changes(heads * dh, heads * dh)
    gap, rank = changes_spread(_attention(heads, dh, True), x, changes, dh)
    assert rank == dh and gap < 1e-12


@pytest.mark.parametrize("heads,dh", [(4, 2), (3, 4), (2, 3)])
def test_heads_that_keep_their_own_values_move_in_every_direction(heads, dh):
    x = torch.randn(3, heads * dh, generator=_gen(1), dtype=F64)
    changes = _token_0_changes(heads * dh, heads * dh)
    gap, rank = changes_spread(_attention(heads, dh, False), x, changes, dh)
    assert rank == heads * dh and gap > 1e-3


def test_an_output_that_cannot_be_read_or_does_not_move_gives_none():
    x = torch.zeros(3, 4, dtype=F64)
    changes = _token_0_changes(4, 4)
    assert changes_spread(lambda v: None, x, changes, 2) is None
    assert changes_spread(lambda v: torch.ones(len(v), 4), x, changes, 2) is None


def test_nothing_moved_is_judged_against_the_outputs_size():
    tiny = torch.eye(4, dtype=F64) * 1e-8
    assert spread(tiny, 2) is not None
    assert spread(tiny, 2, scale=1e3) is None


def test_the_rank_counts_the_directions_above_the_noise():
    basis = torch.linalg.qr(torch.randn(6, 6, generator=_gen(3), dtype=F64))[0]
    moves = torch.randn(10, 3, generator=_gen(4), dtype=F64) @ basis[:3]
    gap, rank = spread(moves, 3)
    assert rank == 3 and gap < 1e-12
    gap, rank = spread(moves, 2)
    assert rank == 3 and gap > 1e-3


def test_the_batch_holds_the_input_first_then_each_changed_copy():
    x = torch.arange(3.0)
    batch = with_changes(x, torch.eye(3))
    assert batch.shape == (4, 3)
    assert torch.equal(batch[0], x) and torch.equal(batch[2], x + torch.eye(3)[1])
