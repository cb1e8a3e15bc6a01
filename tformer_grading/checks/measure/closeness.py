"""Whether two measured things are the same: one rule for numbers, one for tensors.

A check reads numbers back from the learner's code (a divisor from a gradient, a rate
from an optimizer, a norm, a scale) and asks whether one is a candidate's. Numbers
follow Python's :func:`math.isclose`: relative to the larger of the two, with an
absolute floor for numbers near zero. Each caller names its tolerance from the noise of
what it measures (a rate computed in float64: ``rel=1e-6``; a number read back from a
float32 step: ``rel=2e-3``), usually once, as a ``functools.partial``.

>>> near(3.0001, 3.0, rel=1e-3), near(3.1, 3.0, rel=1e-3), near(float("nan"), 1.0)
(True, False, False)
>>> all_near([1.0, 0.5], [1.0, 0.5 + 1e-9]), all_near([1.0], [1.0, 0.5])
(True, False)

Tensors agree when they have one shape, dtype and device and are equal within the
checks' default tolerances, NaN where NaN is; a planted offset is read back:

>>> x = torch.linspace(0, 1, 6).view(2, 3)
>>> tensors_near(x, x + 1e-7), tensors_near(x, x + 1e-3), tensors_near(x, x.double())
(True, False, False)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ...guard.integrity import seal

#: The checks' tolerances for float32 tensors a learner's code and the reference
#: compute by different routes (other summation orders, fused kernels).
ATOL, RTOL = 1e-5, 1e-4


def near(a: float, b: float, rel: float = 1e-6, abs_: float = 0.0) -> bool:
    """``a`` and ``b`` are within ``rel`` of the larger of them, or within ``abs_``."""
    return math.isclose(a, b, rel_tol=rel, abs_tol=abs_)


def all_near(
    got: Sequence[float], want: Sequence[float], rel: float = 1e-6, abs_: float = 0.0
) -> bool:
    """As many numbers in ``got`` as in ``want``, each :func:`near` its own."""
    return len(got) == len(want) and all(
        near(a, b, rel, abs_) for a, b in zip(got, want)
    )


def tensors_near(a, b, atol: float = ATOL, rtol: float = RTOL) -> bool:
    """Both plain tensors of one shape, dtype and device, equal within ``atol +
    rtol·|b|`` everywhere (NaN only where the other has NaN). Anything else (a
    different dtype included) is not near: nothing here raises."""
    return (
        type(a) in (torch.Tensor, torch.nn.Parameter)
        and type(b) in (torch.Tensor, torch.nn.Parameter)
        and a.shape == b.shape
        and a.dtype == b.dtype
        and a.device == b.device
        and torch.allclose(a.detach(), b.detach(), atol=atol, rtol=rtol, equal_nan=True)
    )


seal(__name__)
