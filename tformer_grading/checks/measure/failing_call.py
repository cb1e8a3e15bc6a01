"""The PyTorch call a crash came from: its operands' shapes, and how each was made.

PyTorch's size errors give two numbers ("3 must match 5 at dimension 1"); they do not
say which call met them, nor that an operand was ``k.T``. :func:`failing_call` runs
the learner's function again under a ``TorchFunctionMode`` that records every PyTorch
call: the one that raised the same error, the shapes it was given, and for each
operand made by a call that moves axes or cuts them (``.T``, ``transpose``,
``permute``, indexing, ``view`` ...), that call and the shape it was applied to. It
says what happened, in numbers; :mod:`.torch_errors` names the numbers in the case's
sizes. The random state is restored after the second run, so the check's later
draws are the ones it would have made.

Example: ``.T`` on a 4-D key tensor reverses all four axes::

    >>> import torch
    >>> def attention(q, k):
    ...     return q @ k.T
    >>> q, k = torch.ones(2, 3, 4, 8), torch.ones(2, 3, 5, 8)
    >>> try:
    ...     attention(q, k)
    ... except RuntimeError as exc:
    ...     print(failing_call(attention, (q, k), exc))
    the call that raised: matmul of [2, 3, 4, 8] and [8, 5, 3, 2]; the second made by
    `.T` of [2, 3, 5, 8], which reverses all 4 axes

A float32 operand among float64 ones: their dtypes, and the call that changed it::

    >>> def weights_times_values(scores, v):
    ...     return scores.softmax(-1, dtype=torch.float32) @ v
    >>> s = torch.ones(2, 3, dtype=torch.float64)
    >>> v = torch.ones(3, 4, dtype=torch.float64)
    >>> try:
    ...     weights_times_values(s, v)
    ... except RuntimeError as exc:
    ...     print(failing_call(weights_times_values, (s, v), exc))
    the call that raised: matmul of [2, 3] float32 and [3, 4] float64; the first made
    by `softmax(-1, dtype=torch.float32)` of [2, 3] float64
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode, resolve_name

from ...guard.integrity import seal

# Calls that move or cut axes: an operand they made is described by the call.
_LAYOUT = frozenset(
    {
        "T",
        "mT",
        "transpose",
        "swapaxes",
        "swapdims",
        "permute",
        "movedim",
        "__getitem__",
        "view",
        "reshape",
        "expand",
        "unsqueeze",
        "squeeze",
        "flatten",
        "unflatten",
    }
)
_ORDINAL = ("first", "second", "third", "fourth")


def _name(func: Callable) -> str:
    """ "matmul" for torch.Tensor.matmul, "T" for the property Tensor.T."""
    parts = resolve_name(func) or getattr(func, "__name__", "") or ""
    parts = parts.split(".")
    return parts[-2] if parts[-1] in ("__get__", "__set__") else parts[-1]


def _tensors(args: tuple) -> list[torch.Tensor]:
    """The tensors among ``args``, one level of lists included (cat, stack)."""
    found = []
    for arg in args:
        items = arg if isinstance(arg, (list, tuple)) else (arg,)
        found += [a for a in items if isinstance(a, torch.Tensor)]
    return found


def _index(item: Any) -> str:
    """An indexing argument as the learner writes it: slice(None, 2) -> ":2"."""
    if isinstance(item, tuple):
        return ", ".join(_index(i) for i in item)
    if isinstance(item, slice):
        parts = [
            "" if p is None else str(p) for p in (item.start, item.stop, item.step)
        ]
        return ":".join(parts[:2] if item.step is None else parts)
    if item is Ellipsis:
        return "..."
    return "a tensor" if isinstance(item, torch.Tensor) else repr(item)


def _shown(value: Any) -> str:
    if isinstance(value, torch.Size):
        return str(list(value))
    return "a tensor" if isinstance(value, torch.Tensor) else repr(value)


def _call(name: str, rest: tuple, kwargs: dict) -> str:
    """The call as the learner writes it: ".T", "[:2]", "softmax(-1, dtype=...)"."""
    if name in ("T", "mT"):
        return f".{name}"
    if name == "__getitem__":
        return f"[{_index(rest[0] if len(rest) == 1 else rest)}]"
    if len(rest) == 1 and isinstance(rest[0], (tuple, list)):
        rest = tuple(rest[0])  # permute((0, 2, 1, 3)) is written permute(0, 2, 1, 3)
    shown = [_shown(a) for a in rest] + [f"{k}={_shown(v)}" for k, v in kwargs.items()]
    return f"{name}({', '.join(shown)})"


def _made(name: str, args: tuple, kwargs: dict, out: torch.Tensor) -> str | None:
    """How a call made ``out``, when it moved or cut axes or changed the dtype:
    "`.T` of [2, 3, 5, 8], which reverses all 4 axes", "`float()` of [3] float64".
    Code is in backquotes: a case's sizes are never read from it (:mod:`.sizes`)."""
    source = args[0] if args and isinstance(args[0], torch.Tensor) else None
    if source is None:
        return None
    if out.dtype != source.dtype:
        said = f"`{_call(name, args[1:], kwargs)}` of {list(source.shape)}"
        return f"{said} {str(source.dtype).removeprefix('torch.')}"
    if name not in _LAYOUT:
        return None
    said = f"`{_call(name, args[1:], kwargs)}` of {list(source.shape)}"
    if name == "T" and source.dim() > 2:
        said += f", which reverses all {source.dim()} axes"
    return said


class _Recorder(TorchFunctionMode):
    """How each tensor a PyTorch call returned was made (:func:`_made`), and the
    calls that raised."""

    def __init__(self):
        super().__init__()
        self.made: dict[int, str] = {}
        self.kept: list[torch.Tensor] = []  # alive, so no id is reused
        self.raised: list[tuple[str, list[torch.Tensor], BaseException]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        try:
            out = func(*args, **kwargs)
        except Exception as exc:
            self.raised.append((_name(func), _tensors(args), exc))
            raise
        if isinstance(out, torch.Tensor):
            made = _made(_name(func), args, kwargs, out)
            if made:
                self.made[id(out)] = made
                self.kept.append(out)
        return out


@contextlib.contextmanager
def _same_random_state():
    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    cpu = torch.get_rng_state()
    gpus = torch.cuda.get_rng_state_all() if cuda else None
    try:
        yield
    finally:
        torch.set_rng_state(cpu)
        if gpus is not None:
            torch.cuda.set_rng_state_all(gpus)


def failing_call(fn: Callable, args: tuple, error: BaseException) -> str:
    """What the PyTorch call that raised ``error`` in ``fn(*args)`` was given: "the
    call that raised: matmul of [2, 3, 4, 8] and [8, 5, 3, 2]; the second made by
    `.T` of [2, 3, 5, 8] ...". "" when a second run raises nothing, something else, or
    not in a PyTorch call (the first run may have changed what the second sees).

    >>> def add_table(x):
    ...     table = torch.zeros(50, 8)
    ...     return x + table[: x.size(0)]
    >>> x = torch.ones(2, 4, 8)
    >>> try:
    ...     add_table(x)
    ... except RuntimeError as exc:
    ...     print(failing_call(add_table, (x,), exc))
    the call that raised: add of [2, 4, 8] and [2, 8]; the second made by `[:2]` of
    [50, 8]
    >>> failing_call(lambda x: x + 1, (x,), RuntimeError("not from this call"))
    ''
    """
    recorder, again = _Recorder(), None
    with _same_random_state(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with recorder:
                fn(*args)
        except Exception as exc:  # noqa: BLE001 - the learner's code may raise anything
            again = exc
    if type(again) is not type(error) or str(again) != str(error):
        return ""
    # The call whose error reached the learner's caller (one their code caught and
    # replaced is not it).
    found = [r for r in recorder.raised if r[2] is again]
    if not found or not found[-1][1]:
        return ""
    name, operands, _ = found[-1]
    dtypes = len({t.dtype for t in operands}) > 1  # shown only when they differ
    shapes = " and ".join(
        str(list(t.shape)) + (f" {str(t.dtype)[6:]}" if dtypes else "")
        for t in operands
    )
    said = f"the call that raised: {name} of {shapes}"
    for place, operand in zip(_ORDINAL, operands):
        if id(operand) in recorder.made:
            who = f"the {place}" if len(operands) > 1 else "it was"
            said += f"; {who} made by {recorder.made[id(operand)]}"
    return said


seal(__name__)
