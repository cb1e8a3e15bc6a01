"""Least-squares fits of a learner's numbers: a tensor as a weighted sum of named ones
(``x + 0.5·attn``) and how such a sum is written; a tensor as a scale of another, a
line (scale and offset), a scale per candidate about a fixed origin.

Each returns the fitted numbers only; the caller judges the residual with its own
tolerance, since what "fits" depends on what was computed (float32 weights, float64
probes). All fits run in the dtype they are given: a check passes float64.

Examples (a tensor planted as 0.5 × another, then as 2 × another + 0.1)::

    >>> x = torch.randn(3, 4, dtype=torch.float64)
    >>> round(scale(0.5 * x, x), 6)
    0.5
    >>> [round(v, 6) for v in line(2 * x + 0.1, x)]
    [2.0, 0.1]
"""

from __future__ import annotations

import torch

from ...guard.integrity import seal


def weighted_sum(target, named: dict):
    """``target`` [...] as a weighted sum of the tensors in ``named`` (those of its
    shape), by least squares: {name: coefficient} without the ~0 ones, or None when
    no weighted sum fits (relative residual above 1e-6).

    >>> x, a = torch.randn(4, 3), torch.randn(4, 3)
    >>> weighted_sum(x + 0.5 * a, {"x": x, "attn": a, "other": torch.randn(2)})
    {'x': 1.0, 'attn': 0.5}
    """
    names = [n for n, t in named.items() if t is not None and t.shape == target.shape]
    if not names:
        return None
    a = torch.stack([named[n].detach().reshape(-1).double().cpu() for n in names], 1)
    b = target.detach().reshape(-1, 1).double().cpu()
    coef = torch.linalg.lstsq(a, b, driver="gelsd").solution[:, 0]
    if (a @ coef[:, None] - b).norm() > 1e-6 * b.norm().clamp_min(1e-12):
        return None
    return {n: round(c, 3) for n, c in zip(names, coef.tolist()) if abs(c) > 1e-3}


def describe_sum(coefs: dict) -> str:
    """{name: c} as 'c·name + ...' ('0' for the empty sum).

    >>> describe_sum({"x": 1.0, "attn": 0.5}), describe_sum({})
    ('x + 0.5·attn', '0')
    """
    terms = [(name if c == 1 else f"{c:g}·{name}") for name, c in coefs.items()]
    return " + ".join(terms).replace("+ -", "- ") or "0"


def same_sum(a: dict, b: dict) -> bool:
    """Two sums of :func:`weighted_sum` have the same terms, within 2e-3 each.

    >>> same_sum({"x": 1.0005}, {"x": 1}), same_sum({"x": 1.0, "a": 0.5}, {"x": 1})
    (True, False)
    """
    return set(a) == set(b) and all(abs(a[k] - b[k]) < 2e-3 for k in a)


def two_terms(target, first, second):
    """(a, b) with target ≈ a·first + b·second (least squares, rounded to 3 decimals),
    or None (a tensor of another shape, or a residual above 1e-4 of the target).

    >>> x = torch.linspace(-2, 2, 5); y = x * x
    >>> two_terms(0.5 * x + 2 * y, x, y), two_terms(x.exp(), x, y)
    ((0.5, 2.0), None)
    """
    if not all(
        isinstance(t, torch.Tensor) and t.shape == target.shape for t in (first, second)
    ):
        return None
    basis = torch.stack([first.double().flatten(), second.double().flatten()], 1).cpu()
    goal = target.double().flatten()[:, None].cpu()
    coef = torch.linalg.lstsq(basis, goal).solution
    if (basis @ coef - goal).abs().max() > 1e-4 * (1 + goal.abs().max().item()):
        return None
    return round(coef[0].item(), 3), round(coef[1].item(), 3)


def scale(y: torch.Tensor, x: torch.Tensor) -> float:
    """The c for which c·x is closest to y (same shapes), by least squares.

    >>> scale(torch.tensor([2.0, 4.0]), torch.tensor([1.0, 2.0]))
    2.0
    """
    return ((y * x).sum() / (x * x).sum()).item()


def line(y: torch.Tensor, x: torch.Tensor) -> tuple:
    """(a, b) for which a·x + b is closest to y (same shapes), by least squares.

    >>> line(torch.tensor([1.0, 3.0, 5.0]), torch.tensor([0.0, 1.0, 2.0]))
    (2.0, 1.0)
    """
    xc, yc = x - x.mean(), y - y.mean()
    a = ((xc * yc).sum() / (xc * xc).sum()).item()
    return a, (y.mean() - a * x.mean()).item()


def scales_about(candidates: torch.Tensor, target: torch.Tensor, origin: torch.Tensor):
    """Per candidate of ``candidates`` [G, *shape], the c for which
    origin + c·(candidate - origin) is closest to ``target`` [*shape] (``origin``
    broadcasts to it): (c [G], those rescaled candidates [G, *shape]). A bias that a
    scale does not touch (an output projection's) is the origin.

    >>> bias = torch.tensor([1.0, 1.0])
    >>> c, fitted = scales_about(torch.tensor([[2.0, 3.0], [1.0, 2.0]]),
    ...                          torch.tensor([3.0, 5.0]), bias)
    >>> c.tolist(), fitted[0].tolist()                      # candidate 0 doubled
    ([2.0, 4.0], [3.0, 5.0])
    """
    base, aim = (candidates - origin).flatten(1), (target - origin).flatten()
    c = (base @ aim) / (base * base).sum(dim=1)
    return c, origin + c.view(-1, *[1] * target.dim()) * (candidates - origin)


seal(__name__)
