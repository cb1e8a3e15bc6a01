"""Watching a forward run and reading what it computed, shared by chapter 4's
``feed_forward`` and ``encoder_block`` checks (book/ch04_blocks): a tensor fitted as a
weighted sum of named ones, the elementwise function that maps one tensor to another,
the recorder of the ``layer_norm``-like and feed-forward ``linear`` calls, and what
dropout did (the share of activations zeroed, the scale of the kept ones, and
``DROPOUT_IN_EVAL``, which both exercises name).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from ...guard.integrity import seal
from ..diagnosis import Diagnosis
from .sections import S_DROPOUT

# ------------------------------------------------------------ measuring a computation


def fit_sum(target, named: dict):
    """``target`` [...] as a weighted sum of the tensors in ``named`` (those of its
    shape), by least squares: {name: coefficient} without the ~0 ones, or None when
    no weighted sum fits (relative residual above 1e-6)."""
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
    """{name: c} as 'c·name + ...' ('0' for the empty sum)."""
    terms = [(name if c == 1 else f"{c:g}·{name}") for name, c in coefs.items()]
    return " + ".join(terms).replace("+ -", "- ") or "0"


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


# ------------------------------------------------------------------ recording the calls


class Recorder(torch.overrides.TorchFunctionMode):
    """Records, in call order, the ``layer_norm``-like calls and the ``linear`` calls
    whose weight is one of ``weights`` (the feed-forward's): [(kind, args, kwargs,
    output)]."""

    NORMS = ("layer_norm", "batch_norm", "group_norm", "instance_norm", "rms_norm")

    def __init__(self, events: list, weights: tuple = ()):
        super().__init__()
        self.events, self.weights = events, weights

    def __torch_function__(self, func, types=(), args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = getattr(func, "__name__", "")
        if name in self.NORMS:
            self.events.append(Event(name, _kept(args), kwargs, snapshot(out)))
        elif name == "linear" and len(args) > 1:
            which = [i for i, w in enumerate(self.weights) if args[1] is w]
            if which:
                self.events.append(
                    Event(f"linear{which[0] + 1}", _kept(args), kwargs, snapshot(out))
                )
        return out


def snapshot(t):
    """A snapshot: later in-place ops (ReLU(inplace=True), +=) must not change what
    was observed."""
    return t.detach().clone() if isinstance(t, torch.Tensor) else t


def _kept(args):
    """The call's arguments with its input snapshotted (the weights kept as they are:
    they are matched by identity)."""
    return (snapshot(args[0]), *args[1:])


@dataclass
class Event:
    """One observed call: ``kind`` ('attn', 'layer_norm', 'linear1', ...), its
    arguments and its output."""

    kind: str
    args: tuple
    kwargs: dict
    out: object
    info: dict = field(default_factory=dict)

    @property
    def inp(self):
        return self.args[0]


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
