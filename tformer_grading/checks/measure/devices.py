"""Where tensors live: for every tensor a learner's code makes or passes while a model
runs, whether its device was chosen, where the learner's code made it, and where it was
moved.

On a GPU, a tensor made without a device (``torch.ones(t, t)``, on the CPU) raises when
it meets the model's CUDA tensors; on a CPU nothing shows. :class:`Placement` reads the
mistake on any machine: it follows each tensor from the line that made it and says the
first op where one that never got the model's device meets the model's tensors. The
meta device stands in for a GPU in the examples: it raises as CUDA does.
"""

from __future__ import annotations

import linecache
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from ...guard.integrity import seal
from ..diagnosis import NOT_THE_LEARNERS

#: Ops that may mix devices on a GPU without error (copying, indexing with CPU indices).
MIXING_ALLOWED = frozenset(
    ("to", "copy_", "type_as", "__getitem__", "__setitem__", "index_put_")
    + tuple(f"new_{kind}" for kind in ("ones", "zeros", "full", "empty", "tensor"))
)


@dataclass(frozen=True)
class Where:
    """A line of the learner's code, and how the tensor made there got its device."""

    text: str
    function: str
    how: str = "made without a device"

    @classmethod
    def of(cls, frame, how: str = "made without a device") -> Where | None:
        if frame is None:
            return None
        text = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
        return cls(text, frame.f_code.co_name, how)

    def __str__(self) -> str:
        return f"in {self.function}: `{self.text}`"


def learner_frame(model_codes: frozenset):
    """The innermost frame of the learner's code (outside torch, the course's packages
    and the standard library), or None when the tensor is being made below one of
    ``model_codes`` (the model's own tensors). A course function the learner calls
    directly, such as ``causal_mask(t)`` without a device, counts as the learner's line.
    """
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code in model_codes:
            return None
        if not frame.f_code.co_filename.startswith(NOT_THE_LEARNERS):
            return frame
        frame = frame.f_back
    return None


def _device_of(value) -> torch.device | None:
    """The device a ``.to(...)`` argument names, or None (a dtype, a flag)."""
    if isinstance(value, torch.Tensor):
        return value.device
    if isinstance(value, bool) or not isinstance(value, (torch.device, str, int)):
        return None
    try:
        return torch.device(value)
    except (RuntimeError, TypeError):
        return None


def forward_codes(model: nn.Module) -> frozenset:
    """The code of every ``forward`` of ``model``'s modules."""
    forwards = (getattr(type(m).forward, "__code__", None) for m in model.modules())
    return frozenset(code for code in forwards if code is not None)


class Placement(TorchFunctionMode):
    """Records, for every tensor the code run under it touches, whether its device was
    chosen.

    A tensor is *placed* when it is one of the model's, one of ``inputs``, made with
    ``device=`` (the model's), moved with ``.to(...)``/``.cuda()`` to the model's
    device, or computed from a placed tensor; it is *loose* when the learner's code made
    it without a device (``torch.ones(3, 3)``), moved it elsewhere (``.cpu()``), or
    computed it from loose tensors only. Tensors made below ``model_codes`` (default:
    the forwards of the model's modules) without a device are not followed. The first
    op that mixes a loose tensor (not a 0-dim scalar) with a placed one is said in
    ``meeting``: on a GPU that op raises. ``loop_code``: the learner's function, whose
    line running at the meeting is said too.

    Examples::

        >>> model = nn.Linear(4, 4).to("meta")  # stands in for a GPU
        >>> def step(model, x):  # planted: the mask is made on the CPU
        ...     mask = torch.ones(4, 4).tril()
        ...     return model(x).masked_fill(mask[:1] == 0, 0.0)
        >>> x = torch.ones(1, 4, device="meta")
        >>> with Placement(model, [x], step.__code__) as placement:
        ...     step(model, x)  # raises, as it would on a GPU
        Traceback (most recent call last):
        RuntimeError: ...device...
        >>> print(placement.meeting)  # the line that made the mask is read back
        The tensor made without a device in step: `mask = torch.ones(4, 4).tril()` met
        the model's tensors (in masked_fill) during `return
        model(x).masked_fill(mask[:1] == 0, 0.0)`, without having been moved to the
        model's device.

    On the CPU nothing raises, and the mask is read all the same; made on the model's
    device, it is not::

        >>> model, x = nn.Linear(4, 4), torch.ones(1, 4)
        >>> with Placement(model, [x], step.__code__) as placement:
        ...     _ = step(model, x)
        >>> placement.meeting.split(" met ")[0]
        'The tensor made without a device in step: `mask = torch.ones(4, 4).tril()`'
        >>> def fixed(model, x):
        ...     mask = torch.ones(4, 4, device=x.device).tril()
        ...     return model(x).masked_fill(mask[:1] == 0, 0.0)
        >>> with Placement(model, [x], fixed.__code__) as placement:
        ...     _ = fixed(model, x)
        >>> print(placement.meeting)
        None
    """

    def __init__(
        self,
        model: nn.Module,
        inputs: Sequence[torch.Tensor] = (),
        loop_code=None,
        model_codes: frozenset | None = None,
    ):
        super().__init__()
        tensors = [*model.parameters(), *model.buffers(), *inputs]
        self.device, self.loop_code = tensors[0].device, loop_code
        self.model_codes = forward_codes(model) if model_codes is None else model_codes
        # Tensors are kept with their ids, so that no id is reused while looked up.
        self.loose: dict[int, tuple[torch.Tensor, Where]] = {}
        self.placed = {id(t): t for t in tensors}
        self.meeting: str | None = None

    def _meet(self, op: str, made: Where) -> str:
        frame = sys._getframe(1)
        while frame is not None and frame.f_code is not self.loop_code:
            frame = frame.f_back
        during = Where.of(frame)
        text = f"The tensor {made.how} {made} met the model's tensors (in {op})"
        if during is not None and during.text != made.text:
            text += f" during `{during.text}`"
        return text + ", without having been moved to the model's device."

    def _mark(self, out, origin) -> None:
        """origin: True = placed, None = not followed, a Where = loose (made there)."""
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            self.placed.pop(id(t), None)
            self.loose.pop(id(t), None)
            if origin is True:
                self.placed[id(t)] = t
            elif origin is not None:
                self.loose[id(t)] = (t, origin)

    def _moved(self, device: torch.device, how: str = ""):
        """Placed when ``device`` is the model's (and not named as "the CPU" whatever
        the model's device: ``how`` says so), else loose, where the learner moved it."""
        indices = {device.index, self.device.index} - {None}
        if not how and device.type == self.device.type and len(indices) < 2:
            return True
        return Where.of(learner_frame(self.model_codes), how or f"put on {device}")

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", str(func))
        flat = tree_flatten((args, kwargs))[0]
        inputs = [t for t in flat if isinstance(t, torch.Tensor)]
        placed = any(id(t) in self.placed for t in inputs)
        loose = [
            self.loose[id(t)][1] for t in inputs if id(t) in self.loose and t.dim() > 0
        ]
        if self.meeting is None and placed and loose and name not in MIXING_ALLOWED:
            self.meeting = self._meet(name, loose[0])
        out = func(*args, **kwargs)
        self._mark(out, self._origin(name, args, kwargs, inputs, placed))
        return out

    def _origin(self, name, args, kwargs, inputs, placed):
        if name in ("to", "cuda", "cpu"):
            named = [*args[1:], kwargs.get("device")]
            by_name = any(isinstance(a, str) and a.strip() == "cpu" for a in named)
            if name == "cpu" or by_name:  # the CPU by name: wrong once on a GPU
                how = f"put on the CPU by name ({name})"
                return self._moved(torch.device("cpu"), how)
            target = (
                torch.device("cuda")
                if name == "cuda"
                else next((d for d in map(_device_of, named) if d is not None), None)
            )
            if target is not None:
                return self._moved(target)
        elif kwargs.get("device") is not None:
            named = kwargs["device"]
            by_name = isinstance(named, str) and named.strip() == "cpu"
            how = f"made on the CPU by name ({name})" if by_name else ""
            return self._moved(torch.device(named), how)
        elif isinstance(kwargs.get("out"), torch.Tensor):
            out = kwargs["out"]
            if id(out) in self.placed:
                return True
            return self.loose.get(id(out), (out, None))[1]
        if not inputs:  # made from nothing: a factory without a device
            return Where.of(learner_frame(self.model_codes))
        if placed:
            return True
        return next((self.loose[id(t)][1] for t in inputs if id(t) in self.loose), None)


seal(__name__)
