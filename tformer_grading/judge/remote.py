"""The learner's functions as the judge sees them: proxies that call into the kernel.

A :class:`Kernel` wraps a link (anything with ``ask(request: str) -> str``: the
grading kernel's, :class:`.link.KernelLink`, or :class:`LocalLink` in tests). A name
of the notebook looked up through it is data (tensors, numbers, strings ...) or a
:class:`RemoteCallable`. Calling one sends the judge's arguments to the kernel, runs
the learner's function there, and reads back its result as data. What the learner's
code raised is raised again here, as an exception of the same builtin class where
there is one (else a plain ``Exception`` subclass of the same name), so the checks
read it as they read a local one.

Gradients cross too: when an argument requires grad, the result's tensors are joined
to the judge's graph by :class:`_Bridge`, whose ``backward`` asks the kernel for the
vector-Jacobian product of that call.

    >>> import torch
    >>> kernel = Kernel(LocalLink({"square": lambda x: x * x}))
    >>> square = kernel.lookup("square")
    >>> x = torch.tensor([3.0], requires_grad=True)
    >>> y = square(x)
    >>> y.backward()
    >>> y.detach(), x.grad
    (tensor([9.]), tensor([6.]))
"""

from __future__ import annotations

import builtins
import contextlib
import json
from dataclasses import replace

import torch
from torch.autograd.function import once_differentiable

from .wire import (
    CALLED_BACK,
    ITERATORS,
    Judged,
    Lent,
    Raised,
    Ref,
    WireError,
    changed_params,
    decode,
    lent,
    lent_tensors,
    plain_value,
    snapshot,
    swapped,
    tensors_in,
    to_json,
)


class JudgeError(BaseException):
    """The kernel did not answer the judge as it must (malformed, late, dead): the
    cell scores 0 with this message. A BaseException, so that no check's
    ``except Exception`` reads it as an error of the learner's code."""


class KernelGone(JudgeError):
    """The kernel was stopped or died while the judge asked it: no later cell runs."""


class Kernel:
    """The judge's handle on one kernel."""

    def __init__(self, link) -> None:
        self.link = link
        # The judge's objects given to the learner's code, by number (a check's
        # recording model): the kernel calls them back (:meth:`called_back`).
        self.judged: dict[int, object] = {}
        # Of those, the parameters the kernel holds stand-ins for, as last sent or
        # received: only what changed since crosses (:meth:`_params_out`).
        self.synced: dict[int, tuple] = {}
        # The outputs of the judge's objects that carry a graph, by number: the
        # kernel's backward through them comes back as a "backward" call.
        self.graphs: dict[int, list] = {}
        link.on_callback = self.called_back

    def _ask(self, request: dict):
        reply = self.link.ask(json.dumps(request))
        try:
            found = decode(reply, resolve=self._proxy)
        except WireError as exc:
            raise JudgeError(f"the kernel's answer is not valid: {exc}") from None
        if type(found) is not dict:
            raise JudgeError("the kernel's answer is not valid: not an object")
        if "error" in found:
            raise JudgeError(f"the kernel could not answer: {found['error']!s:.300}")
        if "value" not in found:
            raise JudgeError("the kernel's answer is not valid: it has no value")
        return found

    def _proxy(self, ref: Ref):
        if isinstance(ref, Lent):
            raise WireError("a lent module, which only the judge sends")
        if isinstance(ref, Judged):
            if ref.id not in self.judged:
                raise WireError(f"no object of the judge's numbered {ref.id}")
            return self.judged[ref.id]
        if ref.kind == "class":
            from .mirror import remote_class

            return remote_class(self, ref)
        if ref.kind == "callable":
            return RemoteCallable(self, ref)
        return RemoteObject(ref)

    def lookup(self, name: str):
        """The value of ``name`` in the notebook; KeyError when it has none."""
        found = self._ask({"op": "lookup", "name": name})
        if "missing" in found:
            raise KeyError(name)
        return found["value"]

    def call(
        self, ref: Ref, args: tuple, kwargs: dict, op="call", swaps=(), **fields
    ) -> dict:
        """The kernel's answer to calling kept object ``ref`` (``op`` "call"), building
        with class ``ref`` ("build") or running a module of tree ``ref`` ("forward",
        ``fields`` saying what with, and ``swaps`` the submodules to replace for it,
        ``[(module, name, PyTorch's layer), ...]``), with the judge's randomness.
        The arguments the learner's code changed in place are changed here too."""
        lent_out: list = []  # the modules of PyTorch's lent to the learner's code
        request = {
            "op": op,
            "ref": ref if type(ref) is int else ref.id,
            "args": _sendable(list(args), lent_out, self),
            "kwargs": _sendable(kwargs, lent_out, self),
            **fields,
        }
        if swaps:
            request["swaps"] = _sendable([list(s) for s in swaps], lent_out)
        if op == "build":
            # A module's first weights, as the same class built here would draw them;
            # the judge's state then moves on, so that a second build draws others.
            request["rng"] = to_json(torch.get_rng_state())
            torch.rand(1)
        else:
            # Drawn from the judge's random state, which so moves on as it would were
            # the learner's code drawing here: two calls of a dropout differ, and a
            # second grading draws the same numbers.
            request["seed"] = int(torch.randint(0, 2**62, (1,)))
        if params := self._params_out():
            request["params"] = to_json(params)
        found = self._ask(request)
        self._params_in(found.get("params", []))
        number = found.get("call")
        if number is not None and type(number) is not int:
            raise JudgeError("the kernel's answer is not valid: a call number")
        _write_back(tensors_in((args, kwargs)), found.get("changed", []))
        _write_back(lent_tensors(lent_out), found.get("lent", []))
        found["lent_params"] = [
            t for m in lent_out for t in m._parameters.values() if t is not None
        ]
        return found

    def vjp(self, number: int, grads) -> list:
        found = self._ask({"op": "vjp", "call": number, "grads": _sendable(grads)})
        return found["value"]

    def forget(self) -> None:
        """Let the kernel drop what it keeps for the judge."""
        self._ask({"op": "forget"})
        self.judged.clear()
        self.synced.clear()
        self.graphs.clear()

    def judge_object(self, obj) -> Judged:
        """``obj``, which stays here, as the kernel is given it."""
        for number, kept in self.judged.items():
            if kept is obj:
                return Judged(number, type(obj).__name__)
        number = len(self.judged) + 1
        self.judged[number] = obj
        return Judged(number, type(obj).__name__)

    def called_back(self, text: str) -> str:
        """The judge's reply to the kernel's call of one of its objects (the
        learner's code calling ``model.decode(...)``, or the kernel's backward
        through what one returned), run here: ``{"value": ...}``, or ``{"raised":
        ...}`` when the judge's object raised, with the judge's parameters that
        changed (``params``) and, when the value carries a graph, its number
        (``graph``). A request that is malformed is a JudgeError; one for a method
        out of :data:`.wire.CALLED_BACK`, or an attribute that is not a plain value,
        is an AttributeError in the learner's code."""
        try:
            request = decode(text, resolve=self._proxy)
        except WireError as exc:
            raise JudgeError(f"the kernel's call to the grader is not valid: {exc}")
        op = request.get("op") if type(request) is dict else None
        args, kwargs = request.get("args", []), request.get("kwargs", {})
        if not (
            op in ("call", "getattr", "backward")
            and (op == "backward" or request.get("id") in self.judged)
            and (op == "backward" or type(request.get("name")) is str)
            and type(request.get("grad", False)) is bool
            and type(args) is list
            and type(kwargs) is dict
        ):
            raise JudgeError("the kernel's call to the grader is not valid")
        self._params_in(request.get("params", []))
        if op == "backward":
            return self._backward(request.get("graph"), request.get("grads"))
        obj, name = self.judged[request["id"]], request["name"]
        grad = request.get("grad", False)
        try:
            if op == "getattr":
                return self._reply(_lent_attribute(obj, name))
            if name not in CALLED_BACK:
                raise _not_lent(obj, name)
            with torch.set_grad_enabled(grad):
                value = _method(obj, name)(*args, **kwargs)
            if name in ITERATORS:
                value = list(value)
            return self._reply(value, grad=grad)
        except Exception as exc:  # noqa: BLE001 - raised in the learner's code
            raised = Raised(type(exc).__name__, str(exc)[:4000], "", "")
            if op == "call" and name in CALLED_BACK and not kwargs:
                with torch.set_grad_enabled(grad):
                    raised = replace(raised, call=_failing_call(obj, name, args, exc))
            return self._reply(None, raised=raised)

    def _reply(self, value, *, grad=False, raised: Raised | None = None) -> str:
        """A call back's reply: ``value`` (its parameters as the kernel's stand-ins
        for them, its other objects of the judge's as such) or ``raised``, the
        judge's parameters that changed, and the number of the graph its tensors
        carry when it has one."""
        if raised is not None:
            reply = {"raised": to_json(raised)}
        else:
            value = self._marked(value)
            reply = {"value": to_json(value, refer=self._refer_back)}
            outputs = [t for t in tensors_in(value) if t.requires_grad]
            if outputs and grad:
                number = len(self.graphs) + 1
                self.graphs[number] = outputs
                reply["graph"] = number
        if params := self._params_out():
            reply["params"] = to_json(params)
        return json.dumps(reply)

    def _marked(self, value):
        """``value`` with each parameter (``model.parameters()``) as the number the
        kernel knows it by: the kernel keeps a stand-in for it, synced both ways."""
        if isinstance(value, torch.nn.Parameter):
            return self.judge_object(value)
        if type(value) in (list, tuple):
            return type(value)(self._marked(v) for v in value)
        if type(value) is dict:
            return {k: self._marked(v) for k, v in value.items()}
        return value

    def _backward(self, number, grads) -> str:
        """The kernel's backward through the outputs of graph ``number``, given
        their gradients ``grads``: run here, into the judge's parameters."""
        outputs = self.graphs.get(number) if type(number) is int else None
        if outputs is None or type(grads) is not list or len(grads) != len(outputs):
            raise JudgeError("the kernel's backward to the grader is not valid")
        pairs = [(o, g) for o, g in zip(outputs, grads) if g is not None]
        if not all(
            isinstance(g, torch.Tensor) and g.shape == o.shape for o, g in pairs
        ):
            raise JudgeError("the kernel's backward gave gradients of the wrong shape")
        try:
            # Kept: the kernel's engine, not this one, says when a graph is freed (a
            # second backward without retain_graph fails there, as it would here).
            torch.autograd.backward(
                [o for o, _ in pairs],
                [g.to(o.device, o.dtype) for o, g in pairs],
                retain_graph=True,
            )
        except Exception as exc:  # noqa: BLE001 - a second backward, say
            return self._reply(None, raised=Raised(type(exc).__name__, str(exc)))
        return self._reply(None)

    def _params_out(self) -> list:
        """``[[number, value, grad], ...]`` of the judge's parameters the kernel
        holds stand-ins for, each that changed since it last crossed."""
        params = {
            n: p for n, p in self.judged.items() if isinstance(p, torch.nn.Parameter)
        }
        return changed_params(params, self.synced)

    def _params_in(self, items) -> None:
        """The kernel's stand-ins that the learner's code changed (``[[number, value,
        grad], ...]``), written into the judge's parameters."""
        if type(items) is not list:
            raise JudgeError("the kernel's answer is not valid: its parameters")
        for item in items:
            if not (
                type(item) is list
                and len(item) == 3
                and type(item[0]) is int
                and isinstance(self.judged.get(item[0]), torch.nn.Parameter)
                and isinstance(item[1], torch.Tensor)
                and (item[2] is None or isinstance(item[2], torch.Tensor))
            ):
                raise JudgeError("the kernel's answer is not valid: a parameter")
            param, value, grad = self.judged[item[0]], item[1], item[2]
            if value.shape != param.shape or (
                grad is not None and grad.shape != param.shape
            ):
                raise JudgeError(
                    "the kernel's answer is not valid: a parameter of another shape"
                )
            with torch.no_grad():
                param.copy_(value.to(param.dtype))
            param.grad = None if grad is None else grad.to(param.device, param.dtype)
            self.synced[item[0]] = snapshot(param)

    def _refer_back(self, obj):
        if _callable_back(obj):
            return self.judge_object(obj)
        raise WireError(f"the grader cannot give a {type(obj).__name__} to the kernel")


def indexed_tensors(items, count: int, what: str) -> list:
    """The kernel's ``[[index, tensor], ...]`` about ``count`` tensors of the judge's,
    as (index, tensor) pairs; a JudgeError naming ``what`` when it is malformed."""
    if type(items) is not list:
        raise JudgeError(f"the kernel's answer is not valid: its {what}s")
    for item in items:
        if not (
            type(item) is list
            and len(item) == 2
            and type(item[0]) is int
            and 0 <= item[0] < count
            and isinstance(item[1], torch.Tensor)
        ):
            raise JudgeError(f"the kernel's answer is not valid: a {what}")
    return [(i, t) for i, t in items]


def _write_back(given: list, changed) -> None:
    """Change the judge's arguments as the learner's code changed its copies in the
    kernel, so that a check sees an input changed in place."""
    for i, new in indexed_tensors(changed, len(given), "changed input"):
        target = given[i]
        with torch.no_grad():
            if target.shape != new.shape:
                target.resize_(new.shape)
            target.copy_(new.to(target.dtype))


def _sendable(value, lent_out: list | None = None, kernel: Kernel | None = None):
    """``value`` as a request's JSON: the learner's objects as references, and (into
    a call's arguments, collected in ``lent_out``) PyTorch's modules as lent ones;
    any other module of the judge's (a check's recording model) as one the kernel
    calls back (``kernel``'s :meth:`Kernel.judge_object`)."""

    def refer(obj):
        if isinstance(obj, (RemoteCallable, RemoteObject)):
            return obj.ref
        module = lent_out is not None and isinstance(obj, torch.nn.Module)
        if module and (made := lent(obj)) is not None:
            lent_out.append(obj)
            return made
        if lent_out is not None and kernel is not None and _callable_back(obj):
            return kernel.judge_object(obj)
        raise WireError(f"the judge cannot send a {type(obj).__name__} to the kernel")

    return to_json(value, refer=refer)


def _callable_back(obj) -> bool:
    """Whether the judge gives the kernel ``obj`` to call back: a module of its own
    (not holding a mirror), an optimizer or a scheduler."""
    if isinstance(obj, torch.nn.Module):
        return not _mirrored(obj)
    schedulers = torch.optim.lr_scheduler.LRScheduler
    return isinstance(obj, (torch.optim.Optimizer, schedulers))


def _mirrored(module: torch.nn.Module) -> bool:
    """Whether ``module`` holds a mirror of the learner's (:mod:`.mirror`), whose
    forward runs in the kernel: called back from the kernel, it would ask the kernel
    while the kernel waits for it."""
    return any(hasattr(m, "_judge_tree") for m in module.modules())


def _method(obj, name: str):
    return obj if name == "__call__" else getattr(obj, name)


def _failing_call(obj, name: str, args: list, exc: Exception) -> str:
    """What the PyTorch call that raised in the judge's ``obj.name(*args)`` was given
    (:func:`~tformer_grading.checks.measure.failing_call.failing_call`), read on a
    copy of ``obj``: a run on ``obj`` itself would add to a check's record."""
    import copy

    from ..checks.measure.failing_call import failing_call

    try:
        return failing_call(_method(copy.deepcopy(obj), name), tuple(args), exc)
    except Exception:  # noqa: BLE001 - only the message would say less
        return ""


def _lent_attribute(obj, name: str):
    """Attribute ``name`` of the judge's ``obj`` for the kernel: public, and a plain
    value (a number, a string, a flag, a dtype, a device); else the AttributeError
    the learner's code then raises."""
    if name.startswith("_") or not name.isidentifier():
        raise _not_lent(obj, name)
    if name == "param_groups" and isinstance(obj, torch.optim.Optimizer):
        # To read (the rate it will use): each group's parameters, as the kernel's
        # stand-ins, and plain settings; the kernel's copy cannot be written.
        return [
            {k: v for k, v in group.items() if k == "params" or plain_value(v)}
            for group in obj.param_groups
        ]
    value = getattr(obj, name)  # an AttributeError of the object's own when none
    if not isinstance(value, (bool, int, float, str, torch.dtype, torch.device)):
        raise _not_lent(obj, name)
    return value


def _not_lent(obj, name: str) -> AttributeError:
    return AttributeError(
        f"the grader's {type(obj).__name__} given to your code lends it only its "
        f"methods {', '.join(sorted(CALLED_BACK - {'__call__'}))}, calling it, and "
        f"its plain attributes, not {name!r:.40}"
    )


class RemoteObject:
    """An object of the learner's that stays in the kernel (not callable)."""

    def __init__(self, ref: Ref) -> None:
        self.ref = ref

    def __repr__(self) -> str:
        return f"<{self.ref.type} in the learner's kernel>"


class RemoteCallable(RemoteObject):
    """A function (or class) of the learner's, called in the kernel."""

    def __init__(self, kernel: Kernel, ref: Ref) -> None:
        super().__init__(ref)
        self.kernel = kernel
        self.__name__ = self.__qualname__ = ref.type

    def __call__(self, *args, **kwargs):
        return joined(
            self.kernel, self.kernel.call(self.ref, args, kwargs), args, kwargs
        )


def joined(kernel: Kernel, found: dict, args: tuple, kwargs: dict, params=()):
    """The value of the kernel's answer ``found`` to a call with ``args``, ``kwargs``
    (and, for a module, ``params``): what the learner's code raised is raised here;
    tensors that carry a gradient are joined to the judge's graph, with the
    arguments that require grad, then ``params`` that do, then the parameters of
    the modules lent to the call that do, as their leaves."""
    value, number = found["value"], found.get("call")
    if isinstance(value, Raised):
        raise rebuilt(value)
    leaves = [t for t in tensors_in((args, kwargs)) if t.requires_grad]
    leaves += [p for p in [*params, *found["lent_params"]] if p.requires_grad]
    outputs = [t for t in tensors_in(value) if t.requires_grad]
    for t in outputs:
        t.requires_grad_(False)
    if not (outputs and leaves and number and torch.is_grad_enabled()):
        return value
    joined = _Bridge.apply(_Call(kernel, number, leaves), *outputs, *leaves)
    swap = {id(old): new for old, new in zip(outputs, joined)}
    return swapped(value, swap)


class _Call:
    def __init__(self, kernel: Kernel, number: int, leaves: list) -> None:
        self.kernel, self.number, self.leaves = kernel, number, leaves


class _Bridge(torch.autograd.Function):
    """Outputs of a call made in the kernel, joined to the judge's graph: their
    gradient flows to the call's inputs through the kernel's own backward."""

    @staticmethod
    def forward(ctx, call: _Call, *tensors):
        ctx.call = call
        count = len(tensors) - len(call.leaves)
        return tuple(t.clone() for t in tensors[:count])

    @staticmethod
    @once_differentiable
    def backward(ctx, *grads):
        call = ctx.call
        found = call.kernel.vjp(call.number, list(grads))
        if isinstance(found, Raised):
            raise rebuilt(found)
        if type(found) is not list or len(found) != len(call.leaves):
            raise RuntimeError("the kernel's backward gave the wrong number of grads")
        for leaf, grad in zip(call.leaves, found):
            if grad is not None and (
                not isinstance(grad, torch.Tensor) or grad.shape != leaf.shape
            ):
                raise RuntimeError(
                    f"the kernel's backward gave a gradient of "
                    f"{getattr(grad, 'shape', type(grad).__name__)} for an input of "
                    f"shape {list(leaf.shape)}"
                )
        found = [
            g if g is None else g.to(leaf.dtype) for g, leaf in zip(found, call.leaves)
        ]
        return (None, *([None] * len(grads)), *found)


_BUILTIN_ERRORS = {
    name: cls
    for name, cls in vars(builtins).items()
    if isinstance(cls, type)
    and issubclass(cls, Exception)
    and not issubclass(cls, (OSError, UnicodeError))
}


def rebuilt(raised: Raised) -> Exception:
    """An exception like the one the learner's code raised in the kernel. It carries
    what the kernel said of where it was raised (``kernel_where``, ``kernel_call``),
    which the checks' messages quote in place of reading frames the judge has not."""
    name = raised.type if raised.type.isidentifier() else "LearnerError"
    cls = _BUILTIN_ERRORS.get(name)
    if cls is None:
        cls = type(name, (Exception,), {"__module__": "learner"})
    try:
        exc = cls(raised.message)
    except Exception:  # noqa: BLE001 - a builtin class with another signature
        exc = type(name, (Exception,), {"__module__": "learner"})(raised.message)
    exc.kernel_where, exc.kernel_call = raised.where, raised.call
    return exc


class LocalLink:
    """A link to :mod:`.agent` in this process, over the same wire (for tests and
    doctests: the same requests and answers, without a kernel)."""

    def __init__(self, namespace: dict) -> None:
        self.namespace = namespace
        self.on_callback = None  # set by the Kernel that uses this link

    def ask(self, request: str) -> str:
        from .agent import answer

        try:
            with _modes_set_aside() as modes:

                def call_back(text: str) -> str:
                    # The judge's objects run in the judge's world, its modes on.
                    with _modes_put_back(modes):
                        return self.on_callback(text)

                return answer(json.loads(request), self.namespace, call_back)
        except Exception as exc:  # noqa: BLE001 - as agent.serve does
            return json.dumps({"error": f"{type(exc).__name__}: {exc}"})


@contextlib.contextmanager
def _modes_set_aside():
    """The judge's torch-function modes (a check's recorder) off while the agent
    answers in this process: a kernel is another process, which they do not
    reach, and what they watch there comes back as the kernel's events."""
    modes = []
    while torch._C._len_torch_function_stack() > 0:
        modes.append(torch._C._pop_torch_function_stack())
    try:
        yield modes
    finally:
        for mode in reversed(modes):
            torch._C._push_on_torch_function_stack(mode)


@contextlib.contextmanager
def _modes_put_back(modes: list):
    """``modes`` (set aside) on again, the agent's own modes aside, for a while."""
    with _modes_set_aside():
        for mode in reversed(modes):
            torch._C._push_on_torch_function_stack(mode)
        try:
            yield
        finally:
            for _ in modes:
                torch._C._pop_torch_function_stack()
