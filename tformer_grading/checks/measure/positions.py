"""Where a tensor's numbers went: the right numbers in other positions, the last two
axes swapped, each [b, h] block the right one of another (b, h), the axes permuted,
and the positions that are exactly 0 where a prediction is not.

A check compares a learner's tensor with the right one; when they differ, these say
whether the numbers themselves are right and only their places wrong (a view where a
transpose was meant, an index that took another batch entry's block). Tensors are
compared within atol 1e-5, rtol 1e-4; a check passes float64.

Examples (the right weights [B, H, Sq, Sk] with the heads of batch entry 0 swapped)::

    >>> want = torch.rand(2, 2, 3, 3, dtype=torch.float64)
    >>> got = want.clone(); got[0] = want[0].flip(0)      # a planted mix-up
    >>> same_numbers(got, want), swapped_last_axes(got, want)
    (True, False)
    >>> block_mixup(got, want).split(":")[0]
    'for batch entry 0, head 0 are the right ones for batch entry 0, head 1'
"""

from __future__ import annotations

import itertools

import torch

from ...guard.integrity import seal
from .closeness import tensors_near


def same_numbers(got: torch.Tensor, want: torch.Tensor) -> bool:
    """``got`` holds the numbers of ``want`` (as many elements), in any positions.

    >>> want = torch.arange(6.0).view(2, 3)
    >>> same_numbers(want.view(3, 2), want), same_numbers(want + 1, want)
    (True, False)
    """
    return tensors_near(got.flatten().sort().values, want.flatten().sort().values)


def swapped_last_axes(got: torch.Tensor, want: torch.Tensor) -> bool:
    """``got`` [..., S, S] is ``want`` with its last two axes swapped (weights[.., j, i]
    holding query i's weight on key j).

    >>> want = torch.rand(1, 2, 3, 3)
    >>> swapped_last_axes(want.mT, want), swapped_last_axes(torch.rand(3, 2), want)
    (True, False)
    """
    return (
        got.size(-1) == got.size(-2)
        and got.shape == want.shape
        and tensors_near(got, want.mT)
    )


def block_mixup(got: torch.Tensor, want: torch.Tensor) -> str | None:
    """When every [b, h] block of ``got`` [B, H, ...] is the right block (of ``want``)
    of some (b, h), and one is another's: the first such, in words; None otherwise.

    >>> want = torch.rand(2, 1, 3)
    >>> block_mixup(want.flip(0), want)                   # batch entries swapped
    'for batch entry 0, head 0 are the right ones for batch entry 1, head 0: batch
    entries or heads got mixed up'
    >>> block_mixup(want, want) is None, block_mixup(want + 1, want) is None
    (True, True)
    """
    b_size, h_size = got.shape[:2]
    first = None
    for b in range(b_size):
        for h in range(h_size):
            match = [
                (b2, h2)
                for b2 in range(b_size)
                for h2 in range(h_size)
                if tensors_near(got[b, h], want[b2, h2])
            ]
            if not match:
                return None
            if (b, h) not in match and first is None:
                first = (b, h, *match[0])
    if first is None:
        return None
    b, h, b2, h2 = first
    return (
        f"for batch entry {b}, head {h} are the right ones for batch entry {b2}, "
        f"head {h2}: batch entries or heads got mixed up"
    )


def axis_permutations(t: torch.Tensor, shape):
    """(order, ``t.permute(order)``) for every order but the identity that gives
    ``shape``: the tensors a learner's misplaced permute or transpose may have made.

    >>> t = torch.zeros(2, 3, 3)
    >>> [order for order, _ in axis_permutations(t, (2, 3, 3))]
    [(0, 2, 1)]
    """
    identity = tuple(range(t.dim()))
    for order in itertools.permutations(identity):
        moved = t.permute(order)
        if order != identity and moved.shape == shape:
            yield order, moved


def unexpected_zeros(got: torch.Tensor, predicted: torch.Tensor, floor=1e-30):
    """(how many, first position) where ``got`` is exactly 0 and ``predicted`` (the same
    shape) is above ``floor`` (too large to underflow to 0): a mask or a dropout the
    prediction does not have. None when there is no such position.

    >>> p = torch.full((2, 3), 0.5)
    >>> unexpected_zeros(p.masked_fill(torch.eye(2, 3).bool(), 0.0), p)  # planted
    (2, (0, 0))
    >>> unexpected_zeros(p, p) is None
    True
    """
    zeros = (got == 0) & (predicted > floor)
    if not zeros.any():
        return None
    return int(zeros.sum()), tuple(zeros.nonzero()[0].tolist())


seal(__name__)
