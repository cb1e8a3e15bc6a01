"""The kernel's side of the judge's handle: it runs the learner's code when asked.

The judge (:mod:`.link`) sends a request as one message on a comm of target
:data:`TARGET` (registered by :func:`listen`), handled by :func:`serve`; the answer
goes back as one display output of type :data:`MIME`. Nothing here is trusted by
the judge: a notebook may replace this module, and whatever it then answers is read
as data, within bounds, and is only ever the learner's own result (:mod:`.wire`).
Requests, each a JSON object with ``op``:

- ``lookup`` ``name``: the value of a name in the notebook's namespace;
- ``call`` ``ref``, ``args``, ``kwargs``: call an object the kernel keeps; the tensors
  of the arguments that require grad are leaves here, and when the result has tensors
  that require grad the call is kept for ``vjp``;
- ``vjp`` ``call``, ``grads``: the gradients of a kept call's inputs, given those of
  its outputs (what the judge's autograd asks for in ``backward``);
- ``build`` ``ref``, ``args``, ``kwargs``: call a kept class; when it makes an
  ``nn.Module``, the answer describes its tree (``tree``: its modules, their
  parameters and buffers, and every tensor's value) for the judge to mirror
  (:mod:`.mirror`); a module that is exactly one of PyTorch's layers or of the
  reference's modules (:func:`.wire.layer_class`) says which (``layer``) and its
  plain attributes (``attrs``);
- ``forward`` ``ref``, ``node``, ``args``, ``kwargs``, ``state``, ``training``,
  ``grad``: run module ``node`` of a built tree on the judge's parameters and
  buffers (``state``) and train/eval flags; the parameters that require grad are
  inputs for ``vjp`` too, and a tensor of ``state`` the forward changed is sent back;
  with ``trace``, the calls the judge's checks watch (of submodules, of functions,
  of ``linear`` on given weights) are recorded and sent back as ``events``
  (:func:`_watched`), for the judge to replay into its hooks and recorders; with
  ``swaps``, submodules the judge's checks replaced by one of PyTorch's layers are
  lent for that forward (:func:`_swapped`);
- ``forget``: drop every object and call kept for the judge (after each cell).

An object of the judge's given to the learner's code (``{"$": "judged"}``: a check's
recording model) stays in the judge's process: the learner's code gets a
:class:`JudgeObject`, whose methods (:data:`.wire.CALLED_BACK`) and plain attributes
are asked of the judge while the request is answered. Such a call goes out as one
display output of type :data:`CALLBACK`, and the judge's reply comes back on the
kernel's stdin channel, as an ``input_reply`` (the way ``input()`` is answered), so
the kernel can wait for it in the middle of a request.

``call`` and ``forward`` may carry ``seed``, drawn from the judge's random state, and
``build`` carries ``rng``, that state itself: the learner's code draws its random
numbers (a dropout, a module's first weights: the same as in the judge's process) from
them, and the kernel's own random state is left as it was.

Example, without a kernel (``answer`` is what the display output would carry)::

    >>> import json
    >>> namespace = {"double": lambda x: 2 * x}
    >>> ref = json.loads(answer({"op": "lookup", "name": "double"}, namespace))
    >>> ref["value"]["kind"]
    'callable'
    >>> call = {"op": "call", "ref": ref["value"]["id"], "args": [21], "kwargs": {}}
    >>> json.loads(answer(call, namespace))["value"]
    42
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import sys

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
    bare_module,
    changed_params,
    from_json,
    layer_class,
    lent_tensors,
    plain_attrs,
    qualified_name,
    same_bits,
    snapshot,
    swapped,
    tensors_in,
    to_json,
)

MIME = "application/vnd.tformer.judge+json"
CALLBACK = "application/vnd.tformer.judge-callback+json"
TARGET = "tformer.judge"

_KEPT: dict[int, object] = {}
_CALLS: dict[int, tuple[list, list]] = {}
_TREES: dict[int, tuple[list, list]] = {}  # a built module's id: (modules, slots)
_NUMBERS = itertools.count(1)


def listen() -> None:
    """Let the judge open its comm to this kernel (run once, by the judge)."""
    from IPython import get_ipython

    get_ipython().kernel.comm_manager.register_target(TARGET, _opened)


def _opened(comm, message) -> None:
    comm.on_msg(_received)


def _received(message) -> None:
    request = message.get("content", {}).get("data", {}).get("request")
    # serve looked up at each request: whatever this module's serve is then answers.
    sys.modules[__name__].serve(request if isinstance(request, str) else "")


def serve(request: str) -> None:
    """Answer ``request`` with one display output (called by the judge in the
    kernel)."""
    from IPython import get_ipython
    from IPython.display import publish_display_data

    shell = get_ipython()
    namespace = shell.user_ns if shell is not None else {}
    try:
        text = answer(json.loads(request), namespace, _ask_judge)
    except Exception as exc:  # noqa: BLE001 - said to the judge, which fails the cell
        text = json.dumps({"error": f"{type(exc).__name__}: {exc}"[:2000]})
    publish_display_data({MIME: text})


def _ask_judge(text: str) -> str:
    """The judge's reply to ``text``, a call of one of its objects: sent as a display
    output, answered on the kernel's stdin channel."""
    import zmq
    from IPython import get_ipython
    from IPython.display import publish_display_data

    kernel = get_ipython().kernel
    while kernel.session.recv(kernel.stdin_socket)[1] is not None:
        pass  # a stale reply (to a call back the notebook forged) is not this one's
    publish_display_data({CALLBACK: text})
    while True:
        # A short wait at a time, so that an interrupt (the cell's time) gets through.
        readable, _, _ = zmq.select([kernel.stdin_socket], [], [], 0.05)
        if readable:
            _, reply = kernel.session.recv(kernel.stdin_socket)
            if reply is not None and reply.get("msg_type") == "input_reply":
                return reply["content"]["value"]


class JudgeObject:
    """An object of the judge's given to the learner's code (a check's recording
    model), which stays in the judge's process: its methods of
    :data:`.wire.CALLED_BACK` and its plain attributes are asked of the judge
    (``call_back(text) -> text``), with tensors as data.

        >>> import torch
        >>> def judge(text):  # what the judge does with a call of its Linear
        ...     request = json.loads(text)
        ...     x = from_json(request["args"])[0]
        ...     return json.dumps({"value": to_json(x * 2)})
        >>> model = JudgeObject(Judged(1, "Linear"), judge)
        >>> model(torch.tensor([1.5]))
        tensor([3.])
    """

    def __init__(self, judged: Judged, call_back) -> None:
        object.__setattr__(self, "_judged", judged)
        object.__setattr__(self, "_call_back", call_back)

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        if name in CALLED_BACK:
            return functools.partial(self._judge_ask, "call", name)
        return self._judge_ask("getattr", name)

    def __call__(self, *args, **kwargs):
        return self._judge_ask("call", "__call__", *args, **kwargs)

    def __repr__(self) -> str:
        return f"<the grader's {self._judged.type}>"

    def _judge_ask(self, op: str, name: str, *args, **kwargs):
        def refer(obj):
            if isinstance(obj, JudgeObject):
                return obj._judged
            raise TypeError(
                f"the grader's {self._judged.type} cannot be given a "
                f"{type(obj).__name__}"
            )

        request = {
            "op": op,
            "id": self._judged.id,
            "name": name,
            "args": to_json(list(args), refer=refer),
            "kwargs": to_json(kwargs, refer=refer),
            "grad": torch.is_grad_enabled(),
        }
        value = _ask_back(self._call_back, request)
        if name == "param_groups" and type(value) is list:
            return [_ReadOnlyGroup(g) if type(g) is dict else g for g in value]
        return iter(value) if name in ITERATORS else value


class _ReadOnlyGroup(dict):
    """One of the judge's optimizer's ``param_groups``, lent to read: a write here
    would change nothing there, so it is refused."""

    def _refused(self, *args, **kwargs):
        raise TypeError(
            "the grader's optimizer lends its param_groups to read, not to change: "
            "let the scheduler set the rate (scheduler.step())"
        )

    __setitem__ = __delitem__ = update = pop = clear = setdefault = _refused


# The judge's parameters the learner's code was given (``model.parameters()``), by the
# judge's number: a stand-in here for each, and each as last synced with the judge.
_MIRRORS: dict[int, torch.nn.Parameter] = {}
_SYNCED: dict[int, tuple] = {}


def _ask_back(call_back, request: dict):
    """The value of the judge's reply to ``request``, a call back: the stand-ins the
    learner's code changed go with it, and those the judge changed come back; a
    graph the value carries is joined to this kernel's (:class:`_FromJudge`)."""
    from .remote import rebuilt

    request["params"] = to_json(changed_params(_MIRRORS, _SYNCED))
    reply = json.loads(call_back(json.dumps(request)))
    _params_in(from_json(reply.get("params", [])))
    if "raised" in reply:
        exc = rebuilt(from_json(reply["raised"]))
        # Raised here, in the learner's code: its frames are read here (the PyTorch
        # call that raised, in the judge's object, was read there).
        del exc.kernel_where
        raise exc
    value = from_json(reply["value"], resolve=lambda j: _stand_in(j, call_back))
    outputs = [t for t in tensors_in(value) if t.requires_grad]
    if "graph" not in reply or not outputs or not torch.is_grad_enabled():
        return value
    for t in outputs:
        t.requires_grad_(False)
    anchor = torch.zeros((), requires_grad=True)  # makes the outputs require grad
    joined = _FromJudge.apply(call_back, reply["graph"], anchor, *outputs)
    return swapped(value, {id(old): new for old, new in zip(outputs, joined)})


def _stand_in(judged: Judged, call_back):
    if judged.type != "Parameter":
        return JudgeObject(judged, call_back)
    if judged.id not in _MIRRORS:
        raise WireError(f"no parameter of the judge's numbered {judged.id}")
    return _MIRRORS[judged.id]


class _FromJudge(torch.autograd.Function):
    """Outputs of a judge's object, joined to the learner's graph here: a backward
    through them is run by the judge, into its parameters (their stand-ins here
    are synced when it answers)."""

    @staticmethod
    def forward(ctx, call_back, number, anchor, *outputs):
        ctx.call_back, ctx.number, ctx.count = call_back, number, len(outputs)
        return tuple(o.clone() for o in outputs)

    @staticmethod
    @once_differentiable
    def backward(ctx, *grads):
        request = {"op": "backward", "graph": ctx.number, "grads": to_json(list(grads))}
        _ask_back(ctx.call_back, request)
        return (None, None, None, *([None] * ctx.count))


def _params_in(items) -> None:
    """The judge's parameters as it holds them now, into their stand-ins."""
    if type(items) is not list:
        raise WireError("the judge's parameters must be a list")
    for number, value, grad in items:
        mirror = _MIRRORS.get(number)
        if mirror is None:
            mirror = torch.nn.Parameter(value.detach(), value.requires_grad)
            _MIRRORS[number] = mirror
        else:
            mirror.data = value.detach()
        mirror.grad = None if grad is None else grad.detach()
        _SYNCED[number] = snapshot(mirror)


def answer(request: dict, namespace: dict, call_back=None) -> str:
    """The JSON reply to one request (a dict), names looked up in ``namespace``;
    ``call_back(text) -> text`` asks the judge about its objects."""
    op = request.get("op")
    if op == "forget":
        _KEPT.clear()
        _CALLS.clear()
        _TREES.clear()
        _MIRRORS.clear()
        _SYNCED.clear()
        return json.dumps({"value": None})
    if op == "lookup":
        name = request["name"]
        if name not in namespace:
            return json.dumps({"value": None, "missing": name})
        return _reply(namespace[name])
    if op == "call":
        return _call(request, call_back)
    if op == "vjp":
        return _vjp(request)
    if op == "build":
        return _build(request, call_back)
    if op == "forward":
        return _forward(request, call_back)
    raise WireError(f"unknown request {op!r}")


def _keep(obj) -> Ref:
    number = next(_NUMBERS)
    _KEPT[number] = obj
    kind = (
        "class" if isinstance(obj, type) else "callable" if callable(obj) else "object"
    )
    name = getattr(obj, "__name__", None) if kind != "object" else None
    return Ref(number, kind, name if isinstance(name, str) else type(obj).__name__)


def _reply(value, **extra) -> str:
    return json.dumps({"value": to_json(value, refer=_keep), **extra})


@contextlib.contextmanager
def _randomness(request: dict):
    """The judge's seed or random state, when it sent one, for the learner's code
    only."""
    seed, state = request.get("seed"), request.get("rng")
    if seed is None and state is None:
        yield
        return
    if seed is not None and type(seed) is not int:
        raise WireError(f"a seed must be an int, got {type(seed).__name__}")
    with torch.random.fork_rng(devices=[]):
        if state is not None:
            torch.set_rng_state(from_json(state))
        else:
            # The CPU generator alone: torch.manual_seed also queues a seed for every
            # accelerator PyTorch knows, which costs about 1.5 ms a request.
            torch.default_generator.manual_seed(seed)
            if torch.cuda.is_available() and torch.cuda.is_initialized():
                torch.cuda.manual_seed_all(seed)
        yield


def _run(request: dict, target, call_back, *, grad=True, params=(), around=None):
    """``target(*args, **kwargs)`` of ``request``, within the context
    ``around(swaps)`` if given (``swaps``: the request's, its lent modules built):
    (result, reply extras). The arguments that require grad, then ``params`` that
    do, then the parameters of the modules lent to the call that do, are the call's
    inputs."""
    lent: list = []
    _params_in(from_json(request.get("params", [])))

    def resolve(found):
        return _resolve(found, lent, call_back)

    args = from_json(request["args"], resolve=resolve)
    kwargs = from_json(request["kwargs"], resolve=resolve)
    swaps = from_json(request.get("swaps", []), resolve=resolve)
    given = tensors_in((args, kwargs))
    before = [t.detach().clone() for t in given]
    inputs = [t for t in given if t.requires_grad]
    inputs += [p for p in params if p.requires_grad]
    inputs += [p for m in lent for p in m._parameters.values() if p.requires_grad]
    held = [t.detach().clone() for t in lent_tensors(lent)]
    try:
        with (
            _randomness(request),
            torch.set_grad_enabled(grad),
            around(swaps) if around else contextlib.nullcontext(),
        ):
            result = target(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the learner's code may raise anything
        result = _raised(exc, target, args if not kwargs else None)
    # An argument the learner's code changed in place is sent back: the judge's
    # checks look for that mistake on their own tensors.
    changed = [
        [i, t] for i, (t, b) in enumerate(zip(given, before)) if not same_bits(t, b)
    ]
    extra = {"changed": to_json(changed)} if changed else {}
    now = lent_tensors(lent)
    moved = [[i, t] for i, (t, b) in enumerate(zip(now, held)) if not same_bits(t, b)]
    if moved:  # a lent module's weights the learner's code changed in place
        extra["lent"] = to_json(moved)
    # The judge's parameters, as the learner's code left their stand-ins.
    if params := changed_params(_MIRRORS, _SYNCED):
        extra["params"] = to_json(params)
    outputs = [t for t in tensors_in(result) if t.requires_grad]
    if outputs:
        extra["call"] = number = next(_NUMBERS)
        _CALLS[number] = (inputs, outputs)
    return result, extra


def _call(request: dict, call_back) -> str:
    result, extra = _run(request, _KEPT[request["ref"]], call_back)
    return _reply(result, **extra)


def _build(request: dict, call_back) -> str:
    made, extra = _run(request, _KEPT[request["ref"]], call_back)
    if not isinstance(made, torch.nn.Module):
        return _reply(made, **extra)
    ref = _keep(made)
    modules, slots, tree = _describe(made)
    _TREES[ref.id] = (modules, slots)
    return _reply(ref, tree=to_json(tree, refer=_keep), **extra)


def _describe(root: torch.nn.Module):
    """``root``'s modules (each once, in ``named_modules`` order), its tensor slots
    ``(module, "p" or "b", name)`` (a shared parameter once), and the tree as data."""
    modules = [m for _, m in root.named_modules()]
    index = {id(m): i for i, m in enumerate(modules)}
    slots, seen, nodes, state = [], {}, [], []
    for m in modules:
        node = {
            "type": type(m).__name__,
            "training": bool(m.training),
            "children": [
                [name, None if c is None else index[id(c)]]
                for name, c in m._modules.items()
            ],
            "params": [],
            "buffers": [],
        }
        # One of PyTorch's layers or of the reference's modules: the judge builds it
        # as that class.
        name = qualified_name(type(m))
        if layer_class(name) is type(m) and (attrs := plain_attrs(m)) is not None:
            node["layer"], node["attrs"] = name, attrs
        else:  # the learner's: a check may build another of its class
            node["class"] = type(m)
        for kind, table in (("p", m._parameters), ("b", m._buffers)):
            for name, t in table.items():
                if t is None:  # registered as None (Linear(bias=False)'s bias)
                    node.setdefault("none", []).append([kind, name])
                    continue
                if id(t) not in seen:
                    seen[id(t)] = len(slots)
                    slots.append((m, kind, name))
                    state.append(t)
                flag = (
                    t.requires_grad
                    if kind == "p"
                    else name not in (m._non_persistent_buffers_set)
                )
                node["params" if kind == "p" else "buffers"].append(
                    [name, seen[id(t)], bool(flag)]
                )
        nodes.append(node)
    return modules, slots, {"nodes": nodes, "state": state}


def _slot(slot) -> torch.Tensor | None:
    module, kind, name = slot
    return (module._parameters if kind == "p" else module._buffers).get(name)


def _forward(request: dict, call_back) -> str:
    modules, slots = _TREES[request["ref"]]
    state = from_json(request["state"])
    flags = request["training"]
    if len(state) != len(slots) or len(flags) != len(modules):
        raise WireError("the judge's state does not fit the module's tree")
    # None: the module holds that tensor already (what was sent last, or moved).
    for slot, value in zip(slots, state):
        t = _slot(slot)
        if t is None or value is None:
            continue
        t.data = value.detach()
        if slot[1] == "p":
            t.requires_grad_(value.requires_grad)
    for m, flag in zip(modules, flags):
        m.training = bool(flag)
    params = [t for s in slots if s[1] == "p" and (t := _slot(s)) is not None]
    before = [None if (t := _slot(s)) is None else t.detach().clone() for s in slots]
    events: list = []
    watch = request.get("trace")

    def around(swaps):
        watched = _watched(watch, modules, slots, events)
        return _swapped(modules, slots, swaps, watched or contextlib.nullcontext())

    result, extra = _run(
        request,
        modules[request["node"]],
        call_back,
        grad=bool(request["grad"]),
        params=params,
        around=around,
    )
    if events:
        extra["events"] = to_json(events, refer=_keep)
    # A parameter or buffer the forward changed (a running statistic, an in-place
    # update) is sent back, as a changed argument is.
    moved = [
        [i, t]
        for i, (s, b) in enumerate(zip(slots, before))
        if (t := _slot(s)) is not None and b is not None and not same_bits(t, b)
    ]
    if moved:
        extra["moved"] = to_json(moved)
    return _reply(result, **extra)


@contextlib.contextmanager
def _swapped(modules: list, slots: list, swaps, inner):
    """Within ``inner``, the submodules the judge's checks replaced (``swaps``:
    ``[[module, name, lent module, {parameter: slot}], ...]``) in place for one
    forward, then put back. A parameter tied to a slot is the tree's own tensor."""
    if not (
        type(swaps) is list
        and all(
            type(s) is list
            and len(s) == 4
            and type(s[0]) is int
            and 0 <= s[0] < len(modules)
            and s[1] in modules[s[0]]._modules
            and type(s[3]) is dict
            and all(
                type(j) is int and 0 <= j < len(slots) and slots[j][1] == "p"
                for j in s[3].values()
            )
            for s in swaps
        )
    ):
        raise WireError("the judge's swaps are not valid")
    before = [(modules[s[0]], s[1], modules[s[0]]._modules[s[1]]) for s in swaps]
    try:
        for i, name, module, ties in swaps:
            for param, j in ties.items():
                module._parameters[param] = _slot(slots[j])
            modules[i]._modules[name] = module
        with inner:
            yield
    finally:
        for parent, name, module in reversed(before):
            parent._modules[name] = module


def _watched(watch, modules: list, slots: list, events: list):
    """What the judge's checks watch during a forward (``trace`` of a request), as a
    context that records it into ``events``, in call order: ``["hook", module,
    args, kwargs, output]`` for each call of a module of ``hooked``, ``["call",
    name, args, kwargs, output]`` for each call of a function of ``names`` and each
    ``linear`` whose weight is a slot of ``linears``. A tensor argument that is one
    of the tree's tensors is sent as ``["s", slot]``, any other as ``["v", value]``,
    so that the judge puts its own tensor there. None when nothing is watched."""
    if watch is None:
        return None
    hooked, names, linears = (watch.get(k) for k in ("hooked", "names", "linears"))
    if not (
        all(type(x) is list for x in (hooked, names, linears))
        and all(type(i) is int and 0 <= i < len(modules) for i in hooked)
        and all(type(i) is int and 0 <= i < len(slots) for i in linears)
        and all(type(n) is str for n in names)
    ):
        raise WireError("the judge's trace request is not valid")
    at = {id(t): i for i, s in enumerate(slots) if (t := _slot(s)) is not None}
    watched_weights = {id(_slot(slots[i])) for i in linears}

    def marked(value):
        if isinstance(value, torch.Size):  # layer_norm's normalized_shape
            return ["v", tuple(value)]
        if isinstance(value, torch.Tensor):
            if id(value) in at:
                return ["s", at[id(value)]]
            return ["v", value.detach().clone()]
        return ["v", value]

    def kept(out):
        if isinstance(out, torch.Tensor):
            return out.detach().clone()
        if type(out) in (tuple, list):
            return type(out)(kept(o) for o in out)
        return out

    def hook(i):
        def record(module, args, kwargs, out):
            events.append(
                [
                    "hook",
                    i,
                    [marked(a) for a in args],
                    {k: marked(v) for k, v in kwargs.items()},
                    kept(out),
                ]
            )

        return record

    class Calls(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types=(), args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            name = getattr(func, "__name__", "")
            weight = args[1] if name == "linear" and len(args) > 1 else None
            if name in names or id(weight) in watched_weights:
                events.append(
                    [
                        "call",
                        name,
                        [marked(a) for a in args],
                        {k: marked(v) for k, v in kwargs.items()},
                        kept(out),
                    ]
                )
            return out

    @contextlib.contextmanager
    def watching():
        handles = [
            modules[i].register_forward_hook(hook(i), with_kwargs=True)
            for i in sorted(set(hooked))
        ]
        try:
            with Calls():
                yield
        finally:
            for handle in handles:
                handle.remove()

    return watching()


def _resolve(found, lent_out: list, call_back):
    """A reference's kept object, a module like the one the judge lends, or a stand-in
    for an object of the judge's."""
    if isinstance(found, Ref):
        return _KEPT[found.id]
    if isinstance(found, Judged):
        if call_back is None:
            raise WireError("an object of the judge's, with no way to call it back")
        return _stand_in(found, call_back)
    lent_out.append(module := _lend(found))
    return module


def _lend(spec: Lent) -> torch.nn.Module:
    module = bare_module(getattr(torch.nn, spec.type), spec.attrs)
    module.training = spec.training
    for name, t in spec.params:
        module._parameters[name] = torch.nn.Parameter(t.detach(), t.requires_grad)
    for name, t in spec.buffers:
        module._buffers[name] = t
    return module


def _raised(exc: BaseException, target=None, args=None) -> Raised:
    """``exc`` as data, with what the checks' messages say of a crash, read here where
    the learner's frames are (their lines, the PyTorch call that raised)."""
    try:
        message = str(exc)
    except Exception:  # noqa: BLE001 - a learner's exception whose str raises
        message = "<the exception's message could not be read>"
    where = call = ""
    try:
        from ..checks.diagnosis import learner_line
        from ..checks.measure.failing_call import failing_call

        where = learner_line(exc)
        if target is not None and args is not None:
            call = failing_call(target, tuple(args), exc)
    except Exception:  # noqa: BLE001, S110 - only the message would say less
        pass
    return Raised(type(exc).__name__, message[:4000], where, call)


def _vjp(request: dict) -> str:
    inputs, outputs = _CALLS[request["call"]]
    grads = from_json(request["grads"])
    pairs = [(o, g) for o, g in zip(outputs, grads) if g is not None]
    if not inputs or not pairs:
        return _reply([None] * len(inputs))
    try:
        found = torch.autograd.grad(
            [o for o, _ in pairs],
            inputs,
            [g.to(o.device, o.dtype) for o, g in pairs],
            retain_graph=True,
            allow_unused=True,
        )
    except Exception as exc:  # noqa: BLE001 - a backward of the learner's may raise
        return _reply(_raised(exc))
    return _reply(list(found))
