"""Errors read without a case's sizes: what the code asked of a tensor's axes.

An axis that does not exist, a shape unpacked into the wrong number of names, a view of
a transposed tensor, a permute of the wrong length: PyTorch's words say what happened,
and :func:`read_plain` says it in the exercise's terms. :mod:`.torch_errors` adds these
readings to the size readings of a failure.

Examples::

    >>> read_plain("IndexError: Dimension out of range (expected to be in range of "
    ...            "[-3, 2], but got 3)")
    ['the tensor has 3 axes (0 to 2, or -3 to -1) and the code asked for axis 3']
    >>> read_plain("a weight of 0.3")
    []
"""

from __future__ import annotations

import re

from ...guard.integrity import seal


def table(*rows) -> tuple:
    """Rows of (pattern, reader) with each pattern compiled."""
    return tuple((re.compile(pattern), read) for pattern, read in rows)


def _axis(m: re.Match) -> str:
    axes = int(m[1])
    return (
        f"the tensor has {axes} axes (0 to {axes - 1}, or -{axes} to -1) and the code "
        f"asked for axis {m[3]}"
    )


def _unpack(m: re.Match) -> str:
    axes = f"{m[2]} axes" if m[2] else "more axes"
    return f"`{m[3]}` unpacks {m[1]} sizes from a shape with {axes}"


def _said(text: str):
    """A reader that says ``text``, filled with the match's groups."""
    return lambda m: text.format(*m.groups())


_PLAIN = table(
    (
        (
            r"Dimension out of range \(expected to be in range of \[-(\d+), (\d+)\], "
            r"but got (-?\d+)\)"
        ),
        _axis,
    ),
    (  # the learner's line, quoted, shows what was unpacked
        (
            r"(?:not enough|too many) values to unpack "
            r"\(expected (\d+)(?:, got (\d+))?\)[^`]*`([^`]*\.(?:shape|size\(\))[^`]*)`"
        ),
        _unpack,
    ),
    (
        r"view size is not compatible with input tensor's size and stride",
        _said(
            "view reads the tensor's memory in place, and after a transpose or permute "
            "that memory is not in the new shape's order: reshape copies when it must"
        ),
    ),
    (
        r"input\.dim\(\) = (\d+) is not equal to len\(dims\) = (\d+)",
        _said("the tensor has {0} axes and the permute lists {1}"),
    ),
    (
        r"batch1 must be a 3D tensor",
        _said(
            "the tensors given to torch.bmm must be 3-D; @ (torch.matmul) takes "
            "[B, H, S, Dh] too, treating the leading axes as batches"
        ),
    ),
    (
        r"too many indices for tensor of dimension (\d+)",
        _said("the code indexes more axes than the tensor's {0}"),
    ),
    (
        r"0D or 1D target tensor expected, multi-target not supported",
        _said(
            "the target given to cross_entropy must hold one class id per row of "
            "logits, [N]; this one has a second axis"
        ),
    ),
)


def read_plain(message: str) -> list[str]:
    """What each error of ``message`` that needs no sizes says, in plain terms."""
    return [read(m) for pattern, read in _PLAIN for m in [pattern.search(message)] if m]


seal(__name__)
