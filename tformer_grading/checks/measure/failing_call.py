"""The PyTorch call a crash came from: its operands' shapes, and how each was made.

PyTorch's size errors give two numbers ("3 must match 5 at dimension 1"); they do not
say which call met them, nor that an operand was ``k.T``. :class:`Calls` is a
``TorchFunctionMode`` that keeps every call that raised, and for each tensor made by a
call that moves or cuts axes (``.T``, ``transpose``, ``permute``, indexing, ``view``
...) or changes the dtype, that call and the shape it was applied to.
:meth:`Calls.describe` says, in numbers, what the call behind an error was given;
:mod:`.torch_errors` names the numbers in the case's sizes.

:func:`failing_call` runs the learner's function again under it, after it raised,
only when that run can change nothing the check goes on to measure: its arguments are
tensors (cloned), modules without hooks (copied) and plain values, and the random
state is restored (``torch.random.fork_rng``). A step given an optimizer or a cache is
not run again (it would step or grow them twice); recording every first run instead
doubled grading time.

Example: ``.T`` on a 4-D key tensor reverses all four axes::

    >>> import torch
    >>> def attention(q, k):
    ...     return q @ k.T
    >>> q, k = torch.ones(2, 3, 4, 8), torch.ones(2, 3, 5, 8)
    >>> from tformer_grading.checks.diagnosis import run  # as a check runs it
    >>> print(run(attention, (q, k)).call)
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

import copy
import warnings
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode, resolve_name

from ...guard.integrity import seal

# Calls that move or cut axes: an operand they made is described by the call.
_LAYOUT = frozenset(
    ("T", "mT", "transpose", "swapaxes", "swapdims", "permute", "movedim")
    + ("__getitem__", "view", "reshape", "expand", "unsqueeze", "squeeze")
    + ("flatten", "unflatten")
)
_ORDINAL = ("first", "second", "third", "fourth")


_NAMES: dict = {}  # func -> its name: resolve_name is slow, and runs per call


def _name(func: Callable) -> str:
    """ "matmul" for torch.Tensor.matmul, "T" for the property Tensor.T."""
    name = _NAMES.get(func)
    if name is None:
        parts = (resolve_name(func) or getattr(func, "__name__", "") or "").split(".")
        name = parts[-2] if parts[-1] in ("__get__", "__set__") else parts[-1]
        _NAMES[func] = name
    return name


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
    return "..." if item is Ellipsis else repr(item)  # a tensor: _Tensor, by _light


def _shown(value: Any) -> str:
    return str(list(value)) if isinstance(value, torch.Size) else repr(value)


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


class _Tensor:
    """A tensor among a call's other arguments, kept without the tensor."""

    def __repr__(self) -> str:
        return "a tensor"


def _light(value: Any) -> Any:
    """``value`` with every tensor in it replaced (nothing kept alive by a record)."""
    if isinstance(value, torch.Tensor):
        return _Tensor()
    if isinstance(value, (tuple, list)):
        return type(value)(_light(v) for v in value)
    if isinstance(value, dict):
        return {k: _light(v) for k, v in value.items()}
    return value


def _made(name: str, source: tuple, rest: tuple, kwargs: dict, dtype) -> str:
    """How a call made a tensor of ``dtype`` from one of shape and dtype ``source``,
    when it moved or cut axes or changed the dtype: "`.T` of [2, 3, 5, 8], which
    reverses all 4 axes", "`float()` of [3] float64". Code is in backquotes: a case's
    sizes are never read from it (:mod:`.sizes`)."""
    shape, source_dtype = source
    said = f"`{_call(name, rest, kwargs)}` of {list(shape)}"
    if dtype != source_dtype:
        return f"{said} {str(source_dtype).removeprefix('torch.')}"
    if name == "T" and len(shape) > 2:
        said += f", which reverses all {len(shape)} axes"
    return said


class Calls(TorchFunctionMode):
    """Records, while active, how each tensor a PyTorch call returned was made
    (:func:`_made`) and every call that raised.

    >>> x = torch.ones(2, 4, 8)
    >>> with Calls() as calls:
    ...     try:
    ...         x + torch.zeros(50, 8)[: x.size(0)]  # a table cut by the batch size
    ...     except RuntimeError as exc:
    ...         print(calls.describe(exc))
    the call that raised: add of [2, 4, 8] and [2, 8]; the second made by `[:2]` of
    [50, 8]
    >>> calls.describe(RuntimeError("raised by no call it saw"))
    ''
    """

    def __init__(self):
        super().__init__()
        # id(tensor) -> (a weak reference to it, what made it): weak, so a long run
        # (a training loop) keeps no tensor alive, and a reused id is seen as such.
        # ``cast``: the call that gave it its dtype, however many calls ago.
        self.made: dict[int, tuple] = {}
        self.cast: dict[int, tuple] = {}
        self.raised: list[tuple[str, list[torch.Tensor], BaseException]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        try:
            out = func(*args, **kwargs)
        except Exception as exc:
            self.raised.append((_name(func), _tensors(args), exc))
            raise
        # Only what a description may need is kept, and written out only then.
        if isinstance(out, torch.Tensor) and args and isinstance(args[0], torch.Tensor):
            name, source = _name(func), args[0]
            cast = out.dtype != source.dtype
            if name in _LAYOUT or cast:
                record = (name, (tuple(source.shape), source.dtype), _light(args[1:]))
                record += (_light(kwargs), out.dtype)
                self.made[id(out)] = (weakref.ref(out), record)
            inherited = None if cast else self._of(self.cast, source)
            if cast or inherited:
                self.cast[id(out)] = (weakref.ref(out), record if cast else inherited)
        return out

    @staticmethod
    def _of(table: dict, tensor: torch.Tensor) -> tuple | None:
        found = table.get(id(tensor))  # a record of this very tensor, or None
        return found[1] if found is not None and found[0]() is tensor else None

    def describe(self, error: BaseException) -> str:
        """What the PyTorch call that raised ``error`` was given: "the call that
        raised: matmul of [2, 3, 4, 8] and [8, 5, 3, 2]; the second made by `.T` of
        [2, 3, 5, 8] ...". "" when no call seen raised it (an error of Python's, or
        one the learner's code raised in place of torch's)."""
        found = [r for r in self.raised if r[2] is error]
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
            who = f"the {place}" if len(operands) > 1 else "it was"
            made, cast = self._of(self.made, operand), self._of(self.cast, operand)
            if made:
                said += f"; {who} made by {_made(*made)}"
            if dtypes and cast and cast != made:  # cast some calls before
                said += f"; the {place}'s {str(operand.dtype)[6:]} comes from "
                said += _made(*cast)
        return said


_PLAIN = (int, float, bool, str, type(None), torch.dtype, torch.device)


def _again(value: Any) -> Any:
    """A fresh copy of an argument for the second run; ``_Tensor`` (no second run)
    for anything a run could change and a copy could not protect."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone().requires_grad_(value.requires_grad)
    if isinstance(value, torch.nn.Module) and not _hooked(value):
        try:
            return copy.deepcopy(value)
        except Exception:  # noqa: BLE001 - a module a copy cannot protect
            return _Tensor()
    if isinstance(value, (tuple, list)):
        items = [_again(v) for v in value]
        return _Tensor() if any(isinstance(v, _Tensor) for v in items) else items
    return value if isinstance(value, _PLAIN) else _Tensor()


def _hooked(module: torch.nn.Module) -> bool:
    """A hook on it may be a check's recorder: a copy would still call it."""
    kinds = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks")
    return any(getattr(m, k, None) for m in module.modules() for k in kinds)


def failing_call(fn: Callable, args: tuple, error: BaseException) -> str:
    """What the PyTorch call that raised ``error`` in ``fn(*args)`` was given, read by
    running ``fn`` again under :class:`Calls` (see the module's docstring for when it
    is not run again). "" when it is not, or when the second run raises nothing or
    something else.

    >>> def step(model, optimizer, x):          # an optimizer: not run again
    ...     optimizer.step()
    ...     return model(x.T)
    >>> model, x = torch.nn.Linear(4, 3), torch.ones(2, 4)
    >>> optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    >>> try:
    ...     step(model, optimizer, x)
    ... except RuntimeError as exc:
    ...     failing_call(step, (model, optimizer, x), exc)
    ''
    """
    if isinstance(getattr(error, "kernel_call", None), str):  # read in the kernel
        return error.kernel_call
    again = _again(tuple(args))
    if isinstance(again, _Tensor):
        return ""
    calls, second = Calls(), None
    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    devices = range(torch.cuda.device_count()) if cuda else []
    with torch.random.fork_rng(devices=devices), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with calls:
                fn(*again)
        except Exception as exc:  # noqa: BLE001 - the learner's code may raise anything
            second = exc
    if type(second) is not type(error) or str(second) != str(error):
        return ""
    return calls.describe(second)


seal(__name__)
