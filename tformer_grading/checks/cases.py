"""Inputs for checks: seeded tensors and learner modules built the same way
everywhere."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from tformer_ref.device import get_device

from ..guard.integrity import seal
from .diagnosis import Raised, fail, fail_unanswered, unanswered

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True


def randn(
    *shape: int,
    seed: int,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """A normal tensor from its own generator (the learner's random state is left
    alone), on ``device`` (default: the course's device)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=dtype).to(device or get_device())


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def build_module(
    title: str,
    cls: type,
    args: Sequence,
    dtype: torch.dtype = torch.float32,
    seed: int | None = None,
) -> torch.nn.Module:
    """``cls(*args)`` on the course's device in ``dtype``; a learner's error becomes a
    failure that says which call raised. With ``seed``, built under that seed without
    disturbing the notebook's random state."""
    if not isinstance(cls, type):
        fail(
            title,
            f"expected a class (an nn.Module subclass) to build, got "
            f"{type(cls).__name__} {_short(cls)}: pass the class itself, not an "
            "instance of it or the result of a call.",
        )
    call = f"{cls.__name__}({', '.join(map(repr, args))})"
    try:
        if seed is None:
            module = cls(*args)
        else:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                module = cls(*args)
    except Exception as exc:  # noqa: BLE001 - the learner's code may raise anything
        if unanswered(exc):  # the exercise's constructor is still the placeholder
            fail_unanswered(exc)
        fail(title, f"{call} raised {Raised(exc)!r}")
    if not isinstance(module, torch.nn.Module):
        fail(
            title,
            f"{cls.__name__} must be an nn.Module subclass, got "
            f"{type(module).__name__}",
        )
    return module.to(device=get_device(), dtype=dtype)


seal(__name__)
