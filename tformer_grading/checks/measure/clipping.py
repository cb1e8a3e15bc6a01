"""Gradient clipping read back from the gradient a step used: what
``clip_grad_norm_`` leaves, the norms a clip may have measured, and the two wrong
shapes of a clip (each parameter clipped on its own, each element clamped).

Shapes: flat gradients [P] (every parameter's gradient, flattened and concatenated).
"""

from __future__ import annotations

import torch

from ...guard.integrity import seal

# The norms a clip may measure, by name, with clip_grad_norm_'s norm_type for each.
NORM_TYPES = {"L1": "1", "L2": "2", "max (L-inf)": "inf"}


def clip_coefficient(norm: float, max_norm: float) -> float:
    """What clip_grad_norm_ multiplies a gradient of total norm ``norm`` by.

    Examples::

        >>> clip_coefficient(10.0, 1.0), clip_coefficient(0.5, 1.0)
        (0.09999999000000101, 1.0)
    """
    return min(1.0, max_norm / (norm + 1e-6))


def clipped(grad: torch.Tensor, max_norm: float) -> torch.Tensor:
    """What clip_grad_norm_ leaves of ``grad`` [P].

    Examples::

        >>> round(float(clipped(torch.tensor([3.0, 4.0]), 1.0).norm()), 5)
        1.0
    """
    return grad * clip_coefficient(float(grad.norm()), max_norm)


def norms(grad: torch.Tensor) -> dict:
    """The flat gradient's norms, by the names of :data:`NORM_TYPES`.

    Examples::

        >>> g = torch.tensor([3.0, -4.0])
        >>> bad = g * 1.0 / float(g.abs().sum())  # planted: clipped in the L1 norm
        >>> [name for name, v in norms(bad).items() if abs(v - 1.0) < 1e-6]
        ['L1']
    """
    return {
        "L1": float(grad.abs().sum()),
        "L2": float(grad.norm()),
        "max (L-inf)": float(grad.abs().max()),
    }


def norm_named(grad: torch.Tensor, matches, skip=()) -> str | None:
    """The name of the first of ``grad``'s :func:`norms` (not in ``skip``) whose value
    ``matches(value)``, or None: which norm a clip measured, or a reported norm is.

    Examples::

        >>> g = torch.tensor([3.0, -4.0])
        >>> norm_named(g, lambda v: abs(v - 4.0) < 1e-6)  # planted: the max norm
        'max (L-inf)'
    """
    return next(
        (n for n, v in norms(grad).items() if n not in skip and matches(v)), None
    )


def clamped_by_value(got, want, rtol: float, atol: float) -> float | None:
    """The bound c when ``got`` [P] is ``want`` [P] with every element clamped to
    ±c (clip_grad_value_), else None.

    Examples::

        >>> want = torch.tensor([0.5, -2.0, 3.0])
        >>> clamped_by_value(want.clamp(-1.0, 1.0), want, 1e-3, 1e-9)  # planted
        1.0
        >>> clamped_by_value(want * 0.5, want, 1e-3, 1e-9) is None
        True
    """
    c = float(got.abs().max())
    return c if torch.allclose(got, want.clamp(-c, c), rtol=rtol, atol=atol) else None


def clipped_per_tensor(got, want, sizes, max_norm, rtol, atol) -> bool:
    """``got`` [P] is ``want`` [P] with each parameter's own gradient (of ``sizes``
    elements, in order) clipped to ``max_norm``: one clip per tensor.

    Examples::

        >>> a, b = torch.tensor([3.0, 4.0]), torch.tensor([0.1])
        >>> got = torch.cat([clipped(a, 1.0), clipped(b, 1.0)])  # planted
        >>> clipped_per_tensor(got, torch.cat([a, b]), (2, 1), 1.0, 1e-3, 1e-9)
        True
        >>> clipped_per_tensor(clipped(torch.cat([a, b]), 1.0), torch.cat([a, b]),
        ...                    (2, 1), 1.0, 1e-3, 1e-9)
        False
    """
    pieces = zip(want.split(list(sizes)), got.split(list(sizes)))
    return all(
        torch.allclose(
            g_got,
            g * clip_coefficient(float(g.norm()), max_norm),
            rtol=rtol,
            atol=atol,
        )
        for g, g_got in pieces
    )


seal(__name__)
