"""Coded dimensions: a case's sizes, and what a number is in them.

A case's label names its sizes (``q [B=2, H=3, Sq=5, Dh=4], k and v [.., Sk=7, ..]``),
all different, so a number in a learner's crash or wrong shape decodes to one of them,
to a product of them (``H·Dh``), or to none of the sizes named; a count of elements
also to sizes times a constant that is none of them (``512²``: a buffer built for 512
positions). :mod:`.torch_errors` reads PyTorch's messages with it.

Examples::

    >>> sizes = Sizes.read("x [B=2, S=5, D=12], n_heads=3 (Dh=4)")
    >>> sizes.shape([2, 5, 3, 4]), sizes.shape([10, 12]), sizes.shape([2, 5, 512])
    ('[B, S, n_heads, Dh]', '[B·S, D]', '[B, S, 512]')
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

from ...guard.integrity import seal

# "Sq=5" in a case's label: a name, then an integer that is not part of a float. Code
# quoted from the learner (between backquotes) names no size of the case.
_NAMED = re.compile(r"(?<![\w.\-])([A-Za-z_]\w*)\s?=\s?(\d+)(?![\w.])")
_QUOTED = re.compile(r"`[^`]*`")


@dataclass(frozen=True)
class Sizes:
    """A case's named sizes, in the order its label gives them.

    >>> sizes = Sizes.read("q [B=2, H=3, Sq=4, Dh=5], k and v [.., Sk=7, ..], p=0.1")
    >>> sizes.name(7), sizes.name(12), sizes.name(4 * 2), sizes.name(11)
    ('Sk', 'H·Sq', None, None)
    >>> sizes.name(4 * 2, any_product=True)                  # a count of elements
    'B·Sq'
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

    def name(self, number: int, any_product: bool = False) -> str | None:
        """What ``number`` is in this case: a size's name, else a product of the fewest
        sizes (``H·Dh``), alternatives joined by "or", or None. Products are of sizes
        named next to each other (axes merged by a reshape), unless ``any_product``
        (a count of elements, which is the product of every axis)."""
        if number < 2:
            return None
        named = self.decodable
        for count in (1, 2, 3, 4):
            groups = (
                itertools.combinations(named, count)
                if any_product or count == 1
                else (named[i : i + count] for i in range(len(named) - count + 1))
            )
            found = [
                "·".join(n for n, _ in group)
                for group in groups
                if math.prod(v for _, v in group) == number
            ]
            if found:  # every size equal to it; products: the first two
                return " or ".join(found if count == 1 else found[:2])
        return None

    def count(self, number: int, seen: Iterable[int] = ()) -> tuple[str, int | None]:
        """What a count of elements is, and the constant in it (None when there is
        none): a product of sizes ("B·S·D"); else sizes times one constant that is none
        of them, as in a tensor built for another size: one of ``seen`` (the error's
        other numbers), a square ("512²"), or the largest size it is a multiple of
        ("S·1024"). ("", None) when nothing reads it.

        >>> sizes = Sizes.read("x [B=2, S=7, D=12]")
        >>> sizes.count(168), sizes.count(512 * 512), sizes.count(7 * 1024)
        (('B·S·D', None), ('512²', 512), ('S·1024', 1024))
        >>> sizes.count(2 * 12 * 5, seen=[5]), sizes.count(7 * 7), sizes.count(101)
        (('B·D·5', 5), ('S²', None), ('', None))
        """
        products = self.name(number, any_product=True)
        if products:
            return products, None
        for constant in dict.fromkeys(n for n in seen if n >= 2 and not self.name(n)):
            rest = number // constant
            if rest * constant == number and self.name(rest, any_product=True):
                return f"{self.name(rest, any_product=True)}·{constant}", constant
        root = math.isqrt(number)
        if root >= 2 and root * root == number:
            what = self.name(root)
            if what is None:
                return f"{root}²", root
            return (f"{what}²" if what.isidentifier() else f"({what})²"), None
        for name, value in sorted(self.decodable, key=lambda nv: -nv[1]):
            constant, left = divmod(number, value)
            if not left and constant >= 2 and not self.name(constant, any_product=True):
                return f"{name}·{constant}", constant
        return "", None

    def relation(self, number: int) -> str | None:
        """A number that is no size nor product of sizes may still be two sizes added
        or a size doubled (a length counted twice, a cache read after it grew): "T + S",
        "twice S", two readings joined by "or"; None when it is neither.

        >>> sizes = Sizes.read("T=4, B=2, S=3, D=16")
        >>> sizes.relation(7), sizes.relation(101)
        ('T + S', None)
        >>> Sizes.read("B=3, S=5").relation(10)      # a mask [S, 2·S]
        'twice S'
        """
        named = self.decodable
        found = [f"twice {n}" for n, v in named if 2 * v == number]
        found = (
            found
            or [  # a size doubled first: a sum is likelier by chance
                f"{a} + {b}"
                for i, (a, va) in enumerate(named)
                for b, vb in named[i + 1 :]
                if va + vb == number
            ]
        )
        return " or ".join(found[:2]) or None

    def number(self, number: int, any_product: bool = False) -> str:
        """``number`` with what it is: "5 (Sq)", or "512" when it is no size
        (``any_product``: as :meth:`name`, for a count of rows or elements)."""
        what = self.name(number, any_product)
        return f"{number} ({what})" if what else str(number)

    def shape(self, numbers: list[int], layout: list[str] = ()) -> str:
        """A shape written with the sizes' names: [2, 5, 512] -> "[B, S, 512]". Where a
        number is several sizes ("H or B"), the axis's name in ``layout`` decides,
        when it is one of them.

        >>> Sizes.read("B=2, H=2, S=3").shape([2, 2, 3, 7], ["B", "H", "Sq", "Sk"])
        '[B, H, S, 7]'
        """
        named = [self.name(n) or str(n) for n in numbers]
        for i, axis in enumerate(layout[: len(named)]):
            if axis in named[i].split(" or "):
                named[i] = axis
        return "[" + ", ".join(named) + "]"


def named(**sizes: int) -> str:
    """A case label's sizes, written as :func:`.torch_errors.explain` reads them.

    >>> named(B=2, H=3, Sq=4, Sk=6, Dh=8)
    'B=2, H=3, Sq=4, Sk=6, Dh=8'
    """
    return ", ".join(f"{name}={value}" for name, value in sizes.items())


seal(__name__)
