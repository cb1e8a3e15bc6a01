"""Which cells of one attention map are wrong, and how: what a picture marks.

A map is one head of one batch entry, [Sq, Sk]: row i is query i, column j key j.
For weights, :func:`weight_cells` compares the learner's map with the right one
(and, where the exercise has one, the mask that says which keys each query may
attend); for masks, :func:`mask_cells` compares two masks (True = may attend). Each
cell gets at most one mark, the first that applies:

- ``attends_masked``: the learner gives weight to a key the mask forbids, or their
  mask lets a query attend a key it must not (the future, a padded key);
- ``ignores_allowed``: the learner gives no weight to a key the right map attends,
  or their mask blocks a key the query may attend;
- ``not_finite``: the learner's weight is NaN or infinite;
- ``differs``: any other weight farther from the right one than the tolerance.

Rows of the learner's weights whose sum differs from the right row's (1) are listed
apart, in ``rows_off``. A query the mask leaves no key to attend may have zero weights
or a uniform row (both are accepted): only a NaN or infinity is marked there.

>>> import torch
>>> right = torch.tensor([[1.0, 0.0], [0.5, 0.5]])
>>> mine = torch.tensor([[0.6, 0.4], [0.5, 0.5]])
>>> allowed = torch.tensor([[True, False], [True, True]])
>>> cells = weight_cells(mine, right, allowed)
>>> cells.marked["attends_masked"], cells.marked["differs"], cells.rows_off
([(0, 1)], [(0, 0)], [])
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..guard.integrity import seal

#: The marks, in the order a cell is given the first that applies.
MARKS = ("attends_masked", "ignores_allowed", "not_finite", "differs")


@dataclass(frozen=True)
class MapCells:
    """The wrong cells of one map, by mark (each a list of (query, key), row by row),
    and the rows whose sums are off (``rows_off``, with ``row_sums`` the learner's
    sum of each)."""

    marked: dict[str, list[tuple[int, int]]]
    rows_off: list[int] = field(default_factory=list)
    row_sums: list[float] = field(default_factory=list)

    @property
    def count(self) -> int:
        """How many cells and rows are marked."""
        return sum(map(len, self.marked.values())) + len(self.rows_off)


def _cells(where: torch.Tensor) -> list[tuple[int, int]]:
    return [(int(i), int(j)) for i, j in where.nonzero().tolist()]


def _mark(masks: dict[str, torch.Tensor]) -> dict[str, list[tuple[int, int]]]:
    """Each cell under its first mark (``masks`` in the order of :data:`MARKS`)."""
    taken = None
    marked = {}
    for name in MARKS:
        where = masks[name] if taken is None else masks[name] & ~taken
        marked[name] = _cells(where)
        taken = where if taken is None else taken | where
    return marked


def weight_cells(
    got: torch.Tensor,
    want: torch.Tensor | None,
    allowed: torch.Tensor | None = None,
    atol: float = 1e-5,
    rtol: float = 1e-4,
) -> MapCells:
    """The wrong cells of the learner's weights ``got`` [Sq, Sk] against ``want``
    [Sq, Sk]; ``allowed`` [Sq, Sk] (True = may attend) when the exercise masks. A
    weight counts as given when it is above ``atol`` + ``rtol``. With no ``want``
    (a check that never sees the right weights) only the mask judges: a row sums to
    1, masked keys get nothing and allowed keys something."""
    g = got.detach().double().cpu()
    given = g.abs() > atol + rtol
    finite = torch.isfinite(g)
    forbidden = (
        torch.zeros_like(given)
        if allowed is None
        else ~allowed.cpu().bool().expand_as(g)
    )
    if want is None:
        w = (~forbidden).double() / (~forbidden).sum(-1, keepdim=True).clamp(min=1)
        far = torch.zeros_like(given)
    else:
        w = want.detach().double().cpu()
        far = (g - w).abs() > atol + rtol * w.abs()
    attended = ~forbidden & (w > atol + rtol)
    # A query with no key to attend may give zeros or a uniform row: either is right.
    judged = ~forbidden.all(-1, keepdim=True)
    marked = _mark(
        {
            "attends_masked": forbidden & given & finite & judged,
            "ignores_allowed": attended & ~given & finite,
            "not_finite": ~finite,
            "differs": far & finite & judged,
        }
    )
    sums = g.sum(-1)
    wrong_sum = (sums - w.sum(-1)).abs() > 1e-3
    off = (wrong_sum & judged[:, 0]) | ~torch.isfinite(sums)
    rows = [int(i) for i in off.nonzero().flatten().tolist()]
    return MapCells(marked, rows, sums.tolist())


def mask_cells(got: torch.Tensor, want: torch.Tensor) -> MapCells:
    """The wrong cells of the learner's mask ``got`` [Sq, Sk] against ``want``
    [Sq, Sk] (both bool, True = may attend)."""
    g, w = got.bool().cpu(), want.bool().cpu()
    none = torch.zeros_like(g)
    return MapCells(
        _mark(
            {
                "attends_masked": g & ~w,
                "ignores_allowed": ~g & w,
                "not_finite": none,
                "differs": none,
            }
        )
    )


seal(__name__)
