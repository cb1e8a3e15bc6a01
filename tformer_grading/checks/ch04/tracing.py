"""Reading what a watched forward computed, shared by chapter 4's ``feed_forward`` and
``encoder_block`` checks (book/ch04_blocks): the elementwise function that maps one
tensor to another, and what dropout did (the share of activations zeroed, the scale of
the kept ones, and ``DROPOUT_IN_EVAL``, which both exercises name). The calls are
recorded with ``measure.trace``; the weighted sums are fitted with ``measure.fit``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ...guard.integrity import seal
from ..diagnosis import Diagnosis
from .sections import S_DROPOUT

# ------------------------------------------------------------ measuring a computation


def _slopes(t, u):
    """Slopes (positive side, negative side) when ``u`` is piecewise linear in ``t``
    through 0, else None."""
    pos, neg = t > 1e-3, t < -1e-3
    out = []
    for side in (pos, neg):
        if side.sum() < 2:
            return None
        x, y = t[side].double(), u[side].double()
        s = float((x * y).sum() / (x * x).sum())
        if (y - s * x).abs().max() > 1e-5 * (1 + y.abs().max()):
            return None
        out.append(round(s, 3))
    return tuple(out)


def _relu_squared(t):
    return F.relu(t) ** 2


SMOOTH = (
    ("GELU", F.gelu),
    ("GELU (tanh approximation)", lambda t: F.gelu(t, approximate="tanh")),
    ("SiLU", F.silu),
    ("sigmoid", torch.sigmoid),
    ("tanh", torch.tanh),
    ("softplus", F.softplus),
    ("ELU", F.elu),
    ("ReLU6", F.relu6),
    ("squared ReLU", _relu_squared),
    ("Mish", F.mish),
    ("Hardswish", F.hardswish),
    ("softsign", F.softsign),
    ("softmax over the hidden features", lambda t: torch.softmax(t, -1)),
)


def describe_function(t, u) -> str | None:
    """What elementwise function maps ``t`` to ``u`` (same shape [...]): 'ReLU', 'no
    activation', 'LeakyReLU with slope 0.2 ...', 'GELU', ... or None when none of
    these does."""
    if u.shape != t.shape:
        return None
    t, u = t.detach(), u.detach()
    slopes = _slopes(t, u)
    if slopes is not None:
        names = {
            (1.0, 0.0): "ReLU",
            (1.0, 1.0): "no activation",
            (1.0, -1.0): "the absolute value",
        }
        if slopes in names:
            return names[slopes]
        if slopes[0] == slopes[1]:
            return f"a multiplication by {slopes[0]:g}"
        if slopes[1] == 0:
            return f"ReLU scaled by {slopes[0]:g}"
        if slopes[0] == 1:
            return f"LeakyReLU with slope {slopes[1]:g} on negative inputs"
        return f"a piecewise-linear map with slopes {slopes[0]:g} / {slopes[1]:g}"
    for name, fn in SMOOTH:
        if torch.allclose(u.double(), fn(t.double()), atol=1e-5, rtol=1e-4):
            return name
    return None


def unrecognised_map(t, u) -> str:
    """Where ``u`` departs most from ReLU(``t``), in numbers."""
    if u.shape != t.shape:
        return f"a map from shape {list(t.shape)} to {list(u.shape)}"
    gap = (u.double() - F.relu(t.double())).abs().reshape(-1)
    i = int(gap.argmax())
    z, got = t.reshape(-1)[i].item(), u.reshape(-1)[i].item()
    return (
        f"a map that is not ReLU (hidden value {z:.4g} became {got:.4g}, ReLU "
        f"gives {max(z, 0.0):.4g})"
    )


# -------------------------------------------------------------------- dropout, measured

DROPOUT_IN_EVAL = Diagnosis(
    "dropout still on in eval mode",
    "Dropout must be off in eval mode: use nn.Dropout or pass "
    "`dropout_p if self.training else 0.0`.",
    S_DROPOUT,
)


def zeroed_share(z, u) -> float | None:
    """The share of the positive hidden activations relu(z) (the first Linear's output)
    that reach the second Linear (as its input ``u``) as exactly 0; None when none is
    positive."""
    positive = F.relu(z) > 1e-6
    if not positive.any():
        return None
    return ((u == 0) & positive).sum().item() / positive.sum().item()


def kept_scale(branch, before):
    """Median of branch / before where the branch was kept (None without both)."""
    if branch is None or before is None or branch.shape != before.shape:
        return None
    kept = (branch != 0) & (before.abs() > 1e-6)
    if kept.sum() < 10:
        return None
    return float((branch[kept] / before[kept]).median())


seal(__name__)
