"""Coded dimensions: what the numbers in a crash or in a wrong shape stand for.

A case's label names its sizes (``q [B=2, H=3, Sq=5, Dh=4], k and v [.., Sk=7, ..]``),
all different, so a number in PyTorch's error decodes to one of them, to a product of
them (``H·Dh``), or to none of the sizes named. :func:`explain` finds PyTorch's size
errors in a failure's message, reads the sizes from the same message, and says what each
number is: what was measured ("5 (Sq) against 7 (Sk)"), never which one the code meant.

Examples::

    >>> print(explain(
    ...     "raised RuntimeError: shape '[2, 5, 512]' is invalid for input of size 120 "
    ...     "while the check ran case x [B=2, S=5, H=3, Dh=4]"))
    The numbers, in this case's sizes (B=2, S=5, H=3, Dh=4): the reshape asks for
    [2, 5, 512] = [B, S, 512] of 120 = B·S·H·Dh elements. 512 is none of the sizes
    named here, nor a product of them.
    >>> print(explain(
    ...     "The size of tensor a (5) must match the size of tensor b (7) at "
    ...     "non-singleton dimension 3 on case q [B=2, H=3, Sq=5, Dh=4], Sk=7"))
    The numbers, in this case's sizes (B=2, H=3, Sq=5, Dh=4, Sk=7): two tensors met
    with 5 (Sq) against 7 (Sk) on their axis 3.
    >>> explain("an error with no sizes named")
    ''
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass

from ...guard.integrity import seal

# "Sq=5" in a case's label: a name, then an integer that is not part of a float. Code
# quoted from the learner (between backquotes) names no size of the case.
_NAMED = re.compile(r"(?<![\w.\-])([A-Za-z_]\w*)\s?=\s?(\d+)(?![\w.])")
_QUOTED = re.compile(r"`[^`]*`")


@dataclass(frozen=True)
class Sizes:
    """A case's named sizes, in the order its label gives them.

    >>> sizes = Sizes.read("q [B=2, H=3, Sq=5, Dh=4], k and v [.., Sk=7, ..], p=0.1")
    >>> sizes.name(7), sizes.name(12), sizes.name(4 * 3 * 2), sizes.name(11)
    ('Sk', 'H·Dh', 'B·H·Dh', None)
    >>> Sizes.read("B=2, H=2, S=5").name(2)                 # not all different
    'B or H'
    """

    named: tuple[tuple[str, int], ...]

    @classmethod
    def read(cls, text: str) -> Sizes:
        """The sizes ``text`` names (``name=integer``), first value of each name."""
        found: dict[str, int] = {}
        for name, value in _NAMED.findall(_QUOTED.sub("", text)):
            found.setdefault(name, int(value))
        return cls(tuple(found.items()))

    def __str__(self) -> str:
        return named(**dict(self.named))

    @property
    def decodable(self) -> tuple[tuple[str, int], ...]:
        # 0 and 1 are everywhere (a singleton axis, a first index): they decode nothing.
        return tuple((n, v) for n, v in self.named if v >= 2)

    def name(self, number: int) -> str | None:
        """What ``number`` is in this case: a size's name, a product of the fewest
        sizes (``H·Dh``), alternatives joined by "or", or None."""
        if number < 2:
            return None
        for count in (1, 2, 3, 4):
            found = [
                "·".join(n for n, _ in group)
                for group in itertools.combinations(self.decodable, count)
                if math.prod(v for _, v in group) == number
            ]
            if found:  # every size equal to it; products: the first two
                return " or ".join(found if count == 1 else found[:2])
        return None

    def number(self, number: int) -> str:
        """``number`` with what it is: "5 (Sq)", or "512" when it is no size."""
        what = self.name(number)
        return f"{number} ({what})" if what else str(number)

    def shape(self, numbers: list[int]) -> str:
        """A shape written with the sizes' names: [2, 5, 512] -> "[B, S, 512]"."""
        return "[" + ", ".join(self.name(n) or str(n) for n in numbers) + "]"


def named(**sizes: int) -> str:
    """A case label's sizes, written so that :func:`explain` can read them back.

    >>> named(B=2, H=3, Sq=4, Sk=6, Dh=8)
    'B=2, H=3, Sq=4, Sk=6, Dh=8'
    """
    return ", ".join(f"{name}={value}" for name, value in sizes.items())


def _ints(text: str) -> list[int]:
    return [int(n) for n in re.findall(r"-?\d+", text)]


# A reader gets the case's sizes and PyTorch's match; it returns what it says and the
# numbers in it that should be sizes (those that are none are said once, after).
def _reshape(sizes: Sizes, m: re.Match) -> tuple[str, list[int]]:
    asked, total = _ints(m[1]), int(m[2])
    of = sizes.name(total)
    elements = f"{total} = {of}" if of else str(total)
    return (
        f"the reshape asks for [{m[1]}] = {sizes.shape(asked)} of {elements} elements",
        [n for n in asked if n >= 0],
    )


def _against(text: str):
    """A reader of two sizes that should agree (groups ``a``, ``b``, and others)."""

    def read(sizes: Sizes, m: re.Match) -> tuple[str, list[int]]:
        a, b = int(m["a"]), int(m["b"])
        said = text.format(
            **{**m.groupdict(), "a": sizes.number(a), "b": sizes.number(b)}
        )
        return said, [a, b]

    return read


def _shapes(text: str):
    """A reader of two shapes (groups ``want`` and ``got``)."""

    def read(sizes: Sizes, m: re.Match) -> tuple[str, list[int]]:
        want, got = _ints(m["want"]), _ints(m["got"])
        return text.format(want=sizes.shape(want), got=sizes.shape(got)), want + got

    return read


def _split(sizes: Sizes, m: re.Match) -> tuple[str, list[int]]:
    asked, axis = _ints(m[1]), int(m[3])
    return (
        f"the sizes {sizes.shape(asked)} are asked of an axis of {sizes.number(axis)}",
        [n for n in asked if n >= 0] + [axis],
    )


def _table(*rows) -> tuple:
    return tuple((re.compile(pattern), read) for pattern, read in rows)


_SIZES = r"\[(?P<{}>[\d, ]*)\]"

# PyTorch's size errors (2.x wording): a pattern, and the reader of its numbers.
_SIZE_ERRORS = _table(
    (r"shape '\[([-\d, ]+)\]' is invalid for input of size (\d+)", _reshape),
    (
        (
            r"size of tensor a \((?P<a>\d+)\) must match the size of tensor b "
            r"\((?P<b>\d+)\) at non-singleton dimension (?P<axis>\d+)"
        ),
        _against("two tensors met with {a} against {b} on their axis {axis}"),
    ),
    (
        (
            r"shapes cannot be multiplied \((?P<rows>\d+)x(?P<a>\d+) and "
            r"(?P<b>\d+)x(?P<cols>\d+)\)"
        ),
        _against(
            "a matrix product of [{rows}, ..] by [.., {cols}] needs the inner sizes to "
            "agree, and they are {a} and {b}"
        ),
    ),
    (
        r"Expected size for first two dimensions of batch2 tensor to be: "
        + _SIZES.format("want")
        + r" but got: "
        + _SIZES.format("got"),
        _shapes(
            "for the first two axes of a batched product's second operand {want} was "
            "expected and {got} came"
        ),
    ),
    (
        r"Expected target size "
        + _SIZES.format("want")
        + ", got "
        + _SIZES.format("got"),
        _shapes("for the target, {want} was expected and {got} came"),
    ),
    (
        (
            r"except in dimension (?P<axis>\d+)\. Expected size (?P<a>\d+) but got size "
            r"(?P<b>\d+)"
        ),
        _against("the tensors joined differ off axis {axis}: {a} against {b}"),
    ),
    (
        r"stack expects each tensor to be equal size, but got "
        + _SIZES.format("want")
        + r" at entry \d+ and "
        + _SIZES.format("got"),
        _shapes("the tensors stacked have shapes {want} and {got}"),
    ),
    (
        (
            r"Provided sizes \[([-\d, ]+)\] don't multiply up to the size of dim (\d+) "
            r"\((\d+)\)"
        ),
        _split,
    ),
)

# The wrong shapes the checks report themselves: read the same way.
_SHAPE_REPORTS = _table(
    (
        r"expected shape " + _SIZES.format("want") + ", got " + _SIZES.format("got"),
        _shapes("yours is {got} where {want} is expected"),
    ),
    (
        r"ha(?:s|ve) shape "
        + _SIZES.format("got")
        + ", expected "
        + _SIZES.format("want"),
        _shapes("yours is {got} where {want} is expected"),
    ),
)


def _axis(sizes: Sizes, m: re.Match) -> tuple[str, list[int]]:
    axes = int(m[1])
    return (
        f"the tensor has {axes} axes (0 to {axes - 1}, or -{axes} to -1) and the code "
        f"asked for axis {m[3]}"
    ), []


def _unpack(sizes: Sizes, m: re.Match) -> tuple[str, list[int]]:
    axes = f"{m[2]} axes" if m[2] else "more axes"
    return f"`{m[3]}` unpacks {m[1]} sizes from a shape with {axes}", []


# Errors read without the case's sizes: an axis that does not exist, or a shape
# unpacked into the wrong number of names (the learner's line, quoted, shows which).
_PLAIN = _table(
    (
        (
            r"Dimension out of range \(expected to be in range of \[-(\d+), (\d+)\], "
            r"but got (-?\d+)\)"
        ),
        _axis,
    ),
    (
        (
            r"(?:not enough|too many) values to unpack \(expected (\d+)(?:, got (\d+))?\)"
            r"[^`]*`([^`]*\.(?:shape|size\(\))[^`]*)`"
        ),
        _unpack,
    ),
)


def holds_size_error(message: str) -> bool:
    """``message`` holds a PyTorch size error :func:`explain` knows, read or not.

    >>> holds_size_error("shape '[2, 512]' is invalid for input of size 10")
    True
    """
    return any(p.search(message) for p, _ in _SIZE_ERRORS + _PLAIN)


def explain(message: str) -> str:
    """What the numbers of the size errors in ``message`` are, in the sizes it names;
    "" when it holds no size error this module can read."""
    sizes = Sizes.read(message)
    said, unknown = [], []
    for pattern, read in _SIZE_ERRORS + _SHAPE_REPORTS if sizes.decodable else ():
        m = pattern.search(message)
        if m:
            text, numbers = read(sizes, m)
            said.append(text)
            unknown += [n for n in numbers if n >= 2 and sizes.name(n) is None]
    plain = [read(sizes, m)[0] for p, read in _PLAIN for m in [p.search(message)] if m]
    out = []
    if said:
        out.append(f"The numbers, in this case's sizes ({sizes}): {'; '.join(said)}.")
    if unknown:
        listed = " and ".join(str(n) for n in dict.fromkeys(unknown))
        verb = "is" if len(set(unknown)) == 1 else "are"
        out.append(
            f"{listed} {verb} none of the sizes named here, nor a product of them."
        )
    out += [f"{text[0].upper()}{text[1:]}." for text in plain]
    return " ".join(out)


seal(__name__)
