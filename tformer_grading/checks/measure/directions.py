"""How many directions an output moves when one input changes: the singular values
of the changes, read as a rank and as the gap after the k-th.

A computation that passes through k numbers (one head's share of a projection, the
heads' values summed into one head's width) moves its output within k directions,
whatever the change made upstream of that narrow point; a computation that keeps all
d numbers moves it in up to d. So changing an input in many random directions at once
(one batch row each) and counting the directions the output moved in reads a narrow
point back without knowing the code.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ...guard.integrity import seal


def with_changes(x: torch.Tensor, changes: torch.Tensor) -> torch.Tensor:
    """[n + 1, *x.shape]: ``x``, then ``x + changes[i]`` for each of the n changes
    (``changes`` [n, *x.shape]): one call of the measured function on the flattened
    batch gives the base output and every changed one.

    Examples::

        >>> with_changes(torch.zeros(2), torch.eye(2))
        tensor([[0., 0.],
                [1., 0.],
                [0., 1.]])
    """
    return torch.cat([x[None], x[None] + changes])


def spread(moves: torch.Tensor, k: int, scale: float = 1.0) -> tuple | None:
    """(σ_{k+1} / σ_1, rank) of the rows of ``moves`` [n, d] (the output changes):
    the first is ~1e-16 in float64 when every change lies within k directions, the
    rank counts the singular values above 1e-8·σ_1. None when nothing moved (σ_1 at
    most 1e-9·``scale``, the outputs' size).

    Examples::

        >>> g = torch.Generator().manual_seed(0)
        >>> changes = torch.randn(8, 8, generator=g, dtype=torch.float64)
        >>> heads_kept = changes  # 4 heads of 2 features, each its own
        >>> gap, rank = spread(heads_kept, 2)
        >>> rank, gap > 1e-3
        (8, True)
        >>> summed = changes.view(8, 4, 2).sum(1).repeat(1, 4)  # planted: heads summed
        >>> gap, rank = spread(summed, 2)
        >>> rank, gap < 1e-12
        (2, True)
        >>> spread(torch.zeros(3, 8), 2) is None
        True
    """
    sv = torch.linalg.svdvals(moves)
    if float(sv[0]) <= 1e-9 * scale:
        return None
    return float(sv[k] / sv[0]), int((sv > 1e-8 * sv[0]).sum())


def changes_spread(
    f: Callable, x: torch.Tensor, changes: torch.Tensor, k: int
) -> tuple | None:
    """:func:`spread` of how the outputs of ``f`` move when ``x`` changes by each of
    ``changes`` [n, *x.shape] (after k directions, every output row's moves taken
    together). ``f`` gets the batch [n + 1, *x.shape] of :func:`with_changes` and
    returns [n + 1, ..., d], or None when it cannot be read (then None).

    Examples::

        >>> g = torch.Generator().manual_seed(1)
        >>> x = torch.randn(3, 8, generator=g, dtype=torch.float64)  # 3 value tokens
        >>> changes = torch.zeros(8, 3, 8, dtype=torch.float64)
        >>> changes[:, 0] = torch.randn(8, 8, generator=g, dtype=torch.float64)
        >>> weights = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
        >>> def heads(v, summed):  # 4 heads of 2 features average the tokens
        ...     v = v.view(len(v), 3, 4, 2)
        ...     if summed:  # planted: the values' head axis summed away
        ...         v = v.sum(2, keepdim=True).expand(-1, -1, 4, -1)
        ...     return torch.einsum("k,nkhd->nhd", weights, v).flatten(1)
        >>> changes_spread(lambda v: heads(v, False), x, changes, 2)[1]
        8
        >>> changes_spread(lambda v: heads(v, True), x, changes, 2)[1]
        2
        >>> changes_spread(lambda v: None, x, changes, 2) is None
        True
    """
    got = f(with_changes(x, changes))
    if got is None:
        return None
    moves = (got[1:] - got[:1]).reshape(-1, got.size(-1))
    return spread(moves, k, 1 + float(got.abs().max()))


seal(__name__)
