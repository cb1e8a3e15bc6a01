"""Stage tracing: the calls a forward run makes, in order, with what went in and out.

A check that must say *which stage* of a learner's module departs first watches one
forward run: forward hooks on chosen modules (an attention's query, key, value and
mask, bound as ``tformer_ref``'s ``MultiHeadAttention`` takes them), and a
``TorchFunctionMode`` that records the calls of named functions (``layer_norm``, ...)
and the ``linear`` calls on chosen weights, whatever module or alias made them. Every
tensor is snapshotted when recorded: a later in-place op (``ReLU(inplace=True)``,
``x += ...``) must not change what was observed.

:func:`trace` records into a list of :class:`Event`; :class:`Trace` reads it back by
kind and order.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import torch

from tformer_ref.attention import MultiHeadAttention

from ...guard.integrity import seal

#: The normalisations a learner's block may call instead of ``layer_norm``.
NORMS = ("layer_norm", "batch_norm", "group_norm", "instance_norm", "rms_norm")


def snapshot(t):
    """A detached copy of a tensor (anything else as it is).

    Examples::

        >>> x = torch.ones(2)
        >>> seen = snapshot(x)
        >>> _ = x.add_(1)  # the learner's in-place op after the call was observed
        >>> seen.tolist(), snapshot("mask")
        ([1.0, 1.0], 'mask')
    """
    return t.detach().clone() if isinstance(t, torch.Tensor) else t


@dataclass(eq=False)  # events are found by identity, never compared by value
class Event:
    """One observed call: ``kind`` (the name it was watched under, or the function's
    name), its arguments (an attention's (query, key, value, mask)), its output, the
    module (for a hooked module) and ``info``, free for the reader's annotations."""

    kind: str
    args: tuple
    kwargs: dict
    out: object
    module: object = None
    info: dict = field(default_factory=dict)

    @property
    def inp(self):
        """The call's first input: its first argument, or first keyword argument."""
        return self.args[0] if self.args else next(iter(self.kwargs.values()), None)


_ATTENTION = inspect.signature(MultiHeadAttention.forward)


def attention_inputs(module, args: tuple, kwargs: dict) -> tuple:
    """(query, key, value, mask) of a ``MultiHeadAttention`` call: key defaults to the
    query and value to the key, as the module's forward has it."""
    bound = _ATTENTION.bind(module, *args, **kwargs)
    bound.apply_defaults()
    query, key, value = (bound.arguments[n] for n in ("query", "key", "value"))
    key = query if key is None else key
    return query, key, key if value is None else value, bound.arguments["mask"]


def _hook(kind: str, events: list):
    def hook(module, args, kwargs, output):
        out = output[0] if isinstance(output, tuple) else output
        if isinstance(module, MultiHeadAttention):
            args, kwargs = attention_inputs(module, args, kwargs), {}
        kept = tuple(snapshot(t) for t in args)
        kwargs = {k: snapshot(v) for k, v in kwargs.items()}
        events.append(Event(kind, kept, kwargs, snapshot(out), module))

    return hook


class FunctionCalls(torch.overrides.TorchFunctionMode):
    """Records the calls of the functions named in ``names`` and the ``linear`` calls
    whose weight is one of ``linears`` ({kind: weight}, matched by identity) as
    events of that kind; the input is snapshotted, the other arguments kept as they
    are (weights are matched by identity)."""

    def __init__(self, events: list, names=NORMS, linears: Mapping | None = None):
        super().__init__()
        self.events, self.names, self.linears = events, names, dict(linears or {})

    def __torch_function__(self, func, types=(), args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.observe(getattr(func, "__name__", ""), args, kwargs, out)
        return out

    def observe(self, name: str, args: tuple, kwargs: dict, out) -> None:
        """Record one call of function ``name`` if it is watched. The judge calls it
        too, for the calls a learner's module made in its kernel
        (:mod:`tformer_grading.judge.mirror`)."""
        kind = name if name in self.names else None
        if kind is None and name == "linear" and len(args) > 1:
            kind = next((k for k, w in self.linears.items() if args[1] is w), None)
        if kind is not None:
            kept = (snapshot(args[0]), *args[1:])
            self.events.append(Event(kind, kept, kwargs, snapshot(out)))


@contextlib.contextmanager
def trace(
    modules: Iterable = (), names: Iterable[str] = (), linears: Mapping | None = None
):
    """Record, in call order, the forward calls of ``modules`` ([(kind, module)]),
    and (when ``names`` or ``linears`` are given) the function calls
    :class:`FunctionCalls` records: yields the list of :class:`Event` it fills. The
    hooks are removed on the way out, whatever happened.

    Examples::

        >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
        <torch._C.Generator object at ...>
        >>> first, second = torch.nn.Linear(4, 8), torch.nn.Linear(8, 4)
        >>> def ff(x):  # a planted mistake: tanh between the layers
        ...     return second(torch.tanh(first(x)))
        >>> x = torch.randn(2, 4)
        >>> with torch.no_grad(), trace([("ff1", first)], linears={
        ...         "ff2": second.weight}) as events:
        ...     _ = ff(x)
        >>> [e.kind for e in events]
        ['ff1', 'ff2']
        >>> torch.equal(events[1].inp, torch.tanh(events[0].out))  # read back
        True
        >>> first._forward_hooks
        OrderedDict()
    """
    events: list = []
    handles = [
        m.register_forward_hook(_hook(kind, events), with_kwargs=True)
        for kind, m in modules
    ]
    try:
        if names or linears:
            with FunctionCalls(events, tuple(names), linears):
                yield events
        else:
            yield events
    finally:
        for handle in handles:
            handle.remove()


@dataclass(eq=False)
class Trace:
    """The events of one traced run, read by kind and order.

    Examples::

        >>> t = Trace([Event(k, (), {}, None) for k in ("attn", "norm", "ff", "norm")])
        >>> first = t.first("attn")
        >>> t.after(first, "norm") is t.events[1], t.index(t.after(first, "ff"))
        (True, 2)
        >>> len(t.of("norm")), len(t.earlier(t.events[3], "norm"))
        (2, 1)
    """

    events: list

    def of(self, kind: str) -> list:
        """The events of ``kind``, in order."""
        return [e for e in self.events if e.kind == kind]

    def first(self, kind: str):
        """The first event of ``kind`` (None: none)."""
        return next((e for e in self.events if e.kind == kind), None)

    def index(self, event) -> int:
        """Where ``event`` (this very object) sits in the run."""
        return next(i for i, e in enumerate(self.events) if e is event)

    def after(self, event, kind: str):
        """The first event of ``kind`` after ``event`` (None: none)."""
        later = self.events[self.index(event) + 1 :]
        return next((e for e in later if e.kind == kind), None)

    def earlier(self, event, kind: str) -> list:
        """The events of ``kind`` before ``event``, in order."""
        return [e for e in self.events[: self.index(event)] if e.kind == kind]


seal(__name__)
