"""Naming the formula behind measured numbers: the one expression of a case's sizes
that gives the measured value on every case.

A table is a tuple of (name, f(sizes)) where sizes is a dict of the case's named
sizes. :func:`powers` builds the usual table: each size (and each named product of
sizes) to the powers ½, 1, −½, −1 and 2, times 1, 2 or ½.

Examples (a divisor that is the head size, measured on three cases)::

    >>> table = powers(("H", "Dh"), products={"d_model": ("H", "Dh")})
    >>> cases = [{"H": 2, "Dh": 8}, {"H": 3, "Dh": 16}, {"H": 2, "Dh": 4}]
    >>> name_of([8, 16, 4], cases, table), name_of([4, 6.928, 2.828], cases, table)
    ('Dh', '√(H·Dh = d_model)')
    >>> name_of([5, 5, 5], cases, table) is None
    True
"""

from __future__ import annotations

import math

from ...guard.integrity import seal

_POWERS = ((0.5, "√{}"), (1.0, "{}"), (-0.5, "1/√{}"), (-1.0, "1/{}"), (2.0, "{}²"))
_FACTORS = ((1.0, ""), (2.0, "2·"), (0.5, "½·"))


def number(x: float) -> str:
    """A measured number as the messages write it: four significant digits.

    >>> number(2.8284271), numbers([8, 0.125])
    ('2.828', '8, 0.125')
    """
    return f"{x:.4g}"


def numbers(xs) -> str:
    return ", ".join(number(x) for x in xs)


def _size(name: str):
    return lambda s: s[name]


def _product(names: tuple):
    return lambda s: math.prod(s[n] for n in names)


def _term(size, p: float, factor: float):
    return lambda s: factor * size(s) ** p


def powers(names: tuple, products: dict | None = None) -> tuple:
    """The table: "1 (no scaling)", then for each size of ``names`` and each product of
    ``products`` (name -> the sizes multiplied), its powers times 1, 2 and ½.

    >>> table = powers(("Dh",))
    >>> [name for name, _ in table][:5], len(table)
    (['1 (no scaling)', '√Dh', '2·√Dh', '½·√Dh', 'Dh'], 16)
    """
    out = [("1 (no scaling)", lambda s: 1.0)]
    bases = [(n, _size(n)) for n in names]
    for name, factors in (products or {}).items():
        bases.append((f"{'·'.join(factors)} = {name}", _product(factors)))
    for (name, size), (p, form) in ((b, p) for b in bases for p in _POWERS):
        for factor, prefix in _FACTORS:
            label = prefix + form.format(f"({name})" if "=" in name else name)
            out.append((label, _term(size, p, factor)))
    return tuple(out)


def name_of(values: list, sizes: list, table: tuple, rel_tol: float = 2e-3):
    """The name of the first formula of ``table`` that gives ``values`` on every case
    (``sizes``: the named sizes per case), or None.

    >>> name_of([2.0, 4.0], [{"Dh": 4}, {"Dh": 16}], powers(("Dh",)))
    '√Dh'
    """
    for name, formula in table:
        if all(
            math.isclose(v, formula(s), rel_tol=rel_tol) for v, s in zip(values, sizes)
        ):
            return name
    return None


def names_of(values: list, sizes: list, table: tuple, rel_tol: float = 0.01) -> list:
    """Every formula of ``table`` whose ratio to ``values`` is within ``rel_tol`` of 1
    on every case, in table order: several when the cases' sizes cannot tell them
    apart (at H = 4, Dh = 8, 2·H, ½·H² and Dh are all 8).

    >>> table = powers(("H", "Dh"))
    >>> names_of([8.0], [{"H": 4, "Dh": 8}], table)
    ['2·H', '½·H²', 'Dh']
    >>> names_of([8.0, 16.0], [{"H": 4, "Dh": 8}, {"H": 4, "Dh": 16}], table)
    ['Dh']
    """
    return [
        name
        for name, formula in table
        if all(abs(v / formula(s) - 1) < rel_tol for v, s in zip(values, sizes))
    ]


seal(__name__)
