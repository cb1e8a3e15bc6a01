"""A keep-mask misread, read back from where the weights are not zero: True taken as
"ignore", the mask transposed, its batch and heads axes swapped, or one sequence's
(one head's) mask used for all.

An attention that uses its mask the wrong way still zeroes weights, only not the right
ones. :func:`misread_patterns` lists the keep patterns [B, H, Sq, Sk] that each
misreading of a mask gives, with the queries on which it can be told from the right
pattern; :func:`misreading` names the first one that the weights' nonzero entries
follow. (Naming a pattern against the causal triangle or a padding mask is
:mod:`.masks`'s.)

Examples (a padding mask [B, 1, 1, Sk] applied with batch and heads swapped)::

    >>> mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0]]).bool()[:, None, None, :]
    >>> kept = mask.transpose(0, 1).expand(2, 2, 3, 4)    # a planted mistake
    >>> misreading(kept, mask).split(":")[0]
    'your weights follow the mask with its batch and heads axes swapped'
"""

from __future__ import annotations

import torch

from ...guard.integrity import seal
from .softmax import AXIS_NAMES


def misread_patterns(mask: torch.Tensor, keep: torch.Tensor):
    """(what the learner did, the keep pattern it gives, the queries [B, H, Sq] to
    compare on) for each misreading of ``mask``, whose right pattern is ``keep`` (the
    mask broadcast to the scores [B, H, Sq, Sk]).

    >>> mask = torch.ones(3, 3, dtype=torch.bool).tril()[None, None]
    >>> [p.int()[0, 0, 0].tolist() for _, p, _ in misread_patterns(mask, mask)]
    [[0, 1, 1], [1, 1, 1], [1, 0, 0]]
    """
    yield (
        (
            "your weights are 0 exactly on the keys the mask allows (True) and nonzero "
            "on the ones it hides: you read True as 'ignore'"
        ),
        ~keep,
        keep.any(-1) & ~keep.all(-1),
    )
    if keep.size(-1) == keep.size(-2):
        flipped = mask.transpose(-2, -1).expand(keep.shape)
        yield (
            (
                "your weights follow the mask transposed (queries and keys swapped): "
                "you masked queries instead of keys"
            ),
            flipped,
            flipped.any(-1),
        )
    if (
        mask.dim() == 4
        and mask.size(0) in (1, keep.size(1))
        and mask.size(1) in (1, keep.size(0))
    ):
        swapped = mask.transpose(0, 1).expand(keep.shape)
        yield (
            (
                "your weights follow the mask with its batch and heads axes swapped: "
                "sequence b's mask was applied to head b"
            ),
            swapped,
            swapped.any(-1),
        )
    for axis in (0, 1):
        if mask.dim() == 4 and mask.size(axis) > 1:
            first = mask.narrow(axis, 0, 1).expand(keep.shape)
            what = ("sequence", "head")[axis]
            yield (
                (
                    f"your weights follow {what} 0's mask for every {what}: the mask "
                    f"was sliced or broadcast along axis {axis} ({AXIS_NAMES[axis]})"
                ),
                first,
                first.any(-1),
            )


def misreading(kept: torch.Tensor, mask: torch.Tensor, rows=None) -> str | None:
    """The first misreading of ``mask`` (:func:`misread_patterns`) whose pattern
    ``kept`` [B, H, Sq, Sk] (True where the weights are not 0) follows on the queries
    it can be compared on, within ``rows`` [B, H, Sq] (all when None); None when none
    fits.

    >>> mask = torch.ones(3, 3, dtype=torch.bool).tril()[None, None]
    >>> misreading(~mask, mask).split(":")[1]             # planted: True as "ignore"
    " you read True as 'ignore'"
    >>> misreading(torch.eye(3, dtype=torch.bool)[None, None], mask) is None
    True
    """
    keep = mask.expand(kept.shape)
    for what, pattern, compare in misread_patterns(mask, keep):
        if rows is not None:
            compare = compare & rows
        if compare.any() and torch.equal(kept[compare], pattern[compare]):
            return what
    return None


seal(__name__)
