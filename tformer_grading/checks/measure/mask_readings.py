"""Attention masks read back: which keys each query may see, and what that pattern is.

A keep-mask (True = attend) reaches an attention in any shape that broadcasts to the
scores [B, H, Sq, Sk]: :func:`keep_pattern` spells it out there, so two masks of
different shapes that mean the same compare equal. The pattern is then named against
what it should have been: :func:`causal_reading` against the causal lower triangle of
a self-attention (a mask of the learner's own batch and heads axes read by
:func:`shared_pattern`), :func:`padding_reading` against a padding mask the check handed
over, and :func:`kept_keys` writes its first rows out when no name fits.

A float mask is read as its non-zero entries (``mask.bool()``): an additive mask of 0
and -inf reads as the inverse of the keep-mask it stands for, which it is, for an
attention that takes True as "attend".

Examples (a causal mask built with triu, and a padding mask passed inverted)::

    >>> triu = torch.ones(4, 4, dtype=torch.bool).triu()  # a planted mistake
    >>> causal_reading(keep_pattern(triu[None, None], 2, 3, 4, 4))
    'triu'
    >>> src = torch.tensor([[True, True, False]])[:, None, None, :]  # [B, 1, 1, Sk]
    >>> want = keep_pattern(src, 1, 2, 4, 3)
    >>> padding_reading(keep_pattern(~src, 1, 2, 4, 3), want)  # a planted mistake
    'inverted'

A keep-mask misread (:func:`misreading`) is read back from where the weights are not
zero: an attention that uses its mask the wrong way still zeroes weights, only not the
right ones. :func:`misread_patterns` lists the keep patterns each misreading gives (True
taken as "ignore", the mask transposed, its batch and heads axes swapped, one
sequence's or one head's mask used for all), with the queries on which it can be told
from the right pattern.

A padding mask [B, 1, 1, Sk] applied with batch and heads swapped::

    >>> mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0]]).bool()[:, None, None, :]
    >>> kept = mask.transpose(0, 1).expand(2, 2, 3, 4)    # a planted mistake
    >>> misreading(kept, mask).split(":")[0]
    'your weights follow the mask with its batch and heads axes swapped'
"""

from __future__ import annotations

import torch

from ...guard.integrity import seal
from .softmax import AXIS_NAMES


def read_as_bool(t: torch.Tensor):
    """(keep, how) for a non-bool mask: 1/0 read as multiplicative (1 = attend), 0 and
    large negative numbers as additive (0 = attend); (None, None) when neither fits."""
    v = t.detach().double()
    if bool(((v == 0) | (v == 1)).all()):
        return v == 1, "1 = attend, 0 = masked"
    if bool((v <= 0).all()):
        return v > -1e4, "0 = attend, a large negative number = masked (additive)"
    return None, None


def causal_keep(size: int, device=None) -> torch.Tensor:
    """The causal keep-mask [S, S]: query i sees keys 0..i (``tril``).

    Examples::

        >>> causal_keep(3).int().tolist()
        [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
    """
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()


def keep_pattern(mask, b: int, h: int, sq: int, sk: int) -> torch.Tensor:
    """The keep pattern [B, H, Sq, Sk] (bool, on the CPU) that ``mask`` means when
    broadcast to the scores; None keeps everything. Raises as ``broadcast_to`` does
    when the mask does not broadcast.

    Examples::

        >>> keep_pattern(None, 1, 1, 2, 2).all().item()
        True
        >>> src = torch.tensor([[1.0, 0.0]])[:, None, None, :]  # a float 0/1 mask
        >>> keep_pattern(src, 1, 2, 3, 2).shape, keep_pattern(src, 1, 2, 3, 2)[0, 1, 2]
        (torch.Size([1, 2, 3, 2]), tensor([ True, False]))
    """
    if mask is None:
        return torch.ones(b, h, sq, sk, dtype=torch.bool)
    return torch.broadcast_to(mask.bool().cpu(), (b, h, sq, sk))


def uniform_pattern(pattern: torch.Tensor) -> torch.Tensor | None:
    """The one [Sq, Sk] pattern that every batch row and head of ``pattern``
    [..., Sq, Sk] sees, or None when they differ.

    Examples::

        >>> keep = causal_keep(3).expand(2, 4, 3, 3).clone()
        >>> uniform_pattern(keep).int().tolist()
        [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
        >>> keep[1, 2, 0, 2] = True  # a planted mistake: one head of one row sees more
        >>> uniform_pattern(keep) is None
        True
    """
    first = pattern.reshape(-1, *pattern.shape[-2:])[0]
    return first if bool((pattern == first).all()) else None


def shared_pattern(mask, sq: int, sk: int) -> torch.Tensor | None:
    """The one [Sq, Sk] keep pattern (:func:`keep_pattern`) that ``mask`` of up to 4
    axes means for each of its own batch rows and heads, whatever the attention's B
    and H; None when it has more axes, does not broadcast to [.., Sq, Sk] or differs
    between rows or heads.

    Examples::

        >>> future = ~causal_keep(3)  # an additive causal mask: -inf on the future
        >>> additive = torch.zeros(2, 3, 3).masked_fill(future, float("-inf"))
        >>> causal_reading(shared_pattern(additive, 3, 3))  # its non-zero entries
        'inverted'
        >>> shared_pattern(causal_keep(2), 3, 3) is None  # built for another length
        True
    """
    if mask.dim() > 4:
        return None
    mask = mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))
    try:
        pattern = keep_pattern(mask, mask.size(0), mask.size(1), sq, sk)
    except RuntimeError:
        return None
    return uniform_pattern(pattern)


def causal_reading(pattern: torch.Tensor) -> str | None:
    """What a self-attention's keep pattern [..., S, S] is, against the causal
    ``tril``: 'causal'; the same pattern for every row and head that is 'triu' (each
    query sees itself and the future), 'inverted' (the future only: the complement
    of the keep-mask, True taken as "hide"), 'no diagonal' (``tril(-1)``: no query
    sees itself) or 'all visible'; None for anything else.

    Examples::

        >>> causal_reading(causal_keep(4).expand(2, 3, 4, 4))
        'causal'
        >>> causal_reading(~causal_keep(4))  # a planted mistake: True meant "hide"
        'inverted'
        >>> everything = torch.ones(4, 4, dtype=torch.bool)
        >>> causal_reading(causal_keep(4).tril(-1)), causal_reading(everything)
        ('no diagonal', 'all visible')
        >>> causal_reading(torch.eye(4, dtype=torch.bool)) is None
        True
    """
    tril = causal_keep(pattern.size(-1), pattern.device)
    if torch.equal(pattern, tril.expand_as(pattern)):
        return "causal"
    first = uniform_pattern(pattern)
    if first is None:
        return None
    named = (("triu", tril.T), ("inverted", ~tril), ("no diagonal", tril.tril(-1)))
    found = next((name for name, p in named if torch.equal(first, p)), None)
    if found is None and first.all():
        return "all visible"
    return found


def padding_reading(got: torch.Tensor, want: torch.Tensor) -> str | None:
    """What the keep pattern ``got`` [B, H, Sq, Sk] is, against the padding pattern
    ``want`` of the same shape: 'same'; 'inverted' (``~want``: the padding kept, the
    real keys hidden); 'causal added' (``want`` and the causal triangle, as if the
    keys were a target sequence); 'causal instead' (the triangle alone); None for
    anything else.

    Examples::

        >>> src = torch.tensor([[True, True, True, False]])[:, None, None, :]
        >>> want = keep_pattern(src, 1, 2, 3, 4)
        >>> padding_reading(want.clone(), want)
        'same'
        >>> both = src & causal_keep(4)[:3]  # a planted mistake: the causal mask added
        >>> padding_reading(keep_pattern(both, 1, 2, 3, 4), want)
        'causal added'
        >>> padding_reading(keep_pattern(None, 1, 2, 3, 4), want) is None
        True
    """
    if torch.equal(got, want):
        return "same"
    if torch.equal(got, ~want):
        return "inverted"
    sq, sk = got.shape[-2:]
    causal = torch.ones(sq, sk, dtype=torch.bool, device=got.device).tril()
    if torch.equal(got, (want & causal).expand_as(got)):
        return "causal added"
    if torch.equal(got, causal.expand_as(got)):
        return "causal instead"
    return None


def kept_keys(pattern: torch.Tensor, rows: int = 3) -> str:
    """A keep pattern [Sq, Sk] written out for its first ``rows`` queries.

    Examples::

        >>> kept_keys(causal_keep(4).T)  # a planted mistake: triu
        'query 0: keys [0, 1, 2, 3]; query 1: keys [1, 2, 3]; query 2: keys [2, 3]'
    """
    shown = [
        f"query {i}: keys {row.nonzero().flatten().tolist()}"
        for i, row in enumerate(pattern[:rows])
    ]
    return "; ".join(shown)


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
