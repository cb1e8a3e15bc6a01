"""The learner's modules as the judge sees them: mirrors whose forward runs in the
kernel.

Calling a learner's class (a :class:`RemoteClass`) builds the object in the kernel.
When it is an ``nn.Module``, the kernel describes its tree (:mod:`.agent`) and the
judge builds a mirror of it here: one :class:`RemoteModule` per learner module, with
the same names, the same parameters and buffers (the judge's own tensors, with the
kernel's first values) and the same train/eval flags. So the checks use it as they use
the learner's module: ``named_parameters()``, ``.to(torch.float64)``, ``.eval()``,
loading weights in place, autograd through it, ``copy.deepcopy``, forward hooks.
A node that is exactly one of PyTorch's layers (``nn.Linear``, ``nn.LayerNorm``, ...)
or of the reference's modules (``MultiHeadAttention``: :func:`.wire.layer_class`) is
that class here, so ``isinstance`` finds it; the learner's own modules are
:class:`RemoteModule`.

While a forward runs in the kernel, what the checks watch inside it (forward hooks on
its submodules, a ``FunctionCalls`` recorder of ``linear`` or ``layer_norm`` calls)
is recorded there and replayed here, in call order, with the judge's own tensors in
place of the tree's (:func:`_replay`). Those observations are the kernel's word: a
check may use them for its message or to withhold points, never to grant them.

A mirror's ``forward`` sends the call's arguments, every parameter and buffer of the
tree as the judge holds them now, the train/eval flags and a seed, and runs the
learner's module in the kernel on exactly those. Its outputs are joined to the judge's
graph (:class:`.remote._Bridge`) with the call's inputs and the parameters as leaves,
so a check's ``backward`` fills the mirror's ``.grad``. A parameter or buffer the
forward changed (a running statistic) is sent back and written into the mirror. What
the module keeps outside its parameters and buffers (a plain tensor attribute) stays
the kernel's, as a forward hook registered in the kernel does.

    >>> import torch
    >>> from .remote import Kernel, LocalLink
    >>> Lin = Kernel(LocalLink({"Lin": torch.nn.Linear})).lookup("Lin")
    >>> layer = Lin(3, 2).double()
    >>> [(name, p.dtype) for name, p in layer.named_parameters()]
    [('weight', torch.float64), ('bias', torch.float64)]
    >>> with torch.no_grad():
    ...     _ = layer.weight.fill_(1.0), layer.bias.zero_()
    >>> out = layer(torch.ones(1, 3, dtype=torch.float64))
    >>> out.sum().backward()
    >>> out.detach(), layer.bias.grad
    (tensor([[3., 3.]], dtype=torch.float64), tensor([1., 1.], dtype=torch.float64))
"""

from __future__ import annotations

import torch

from .wire import (
    WireError,
    bare_module,
    layer_attrs,
    layer_class,
    lent,
    same_bits,
    to_json,
)

#: The most modules one learner's tree may have (the own model has a few dozen).
MAX_MODULES = 4_096


class RemoteClass:
    """A learner's class in the kernel. Calling it builds an object there: a module
    comes back as its mirror (:class:`RemoteModule`), anything else as data or a
    proxy (:mod:`.remote`)."""

    _judge_kernel = None
    _judge_ref = None

    def __new__(cls, *args, **kwargs):
        from .remote import JudgeError, RemoteObject, joined

        kernel = cls._judge_kernel
        found = kernel.call(cls._judge_ref, args, kwargs, op="build")
        value = joined(kernel, found, args, kwargs)
        if "tree" not in found:
            return value
        if not isinstance(value, RemoteObject):
            raise JudgeError("the kernel's answer is not valid: a tree with no module")
        return _mirror(Tree(kernel, value.ref.id, found["tree"]), found["tree"])


def remote_class(kernel, ref) -> type:
    """The judge's stand-in for the learner's class ``ref``: a class, so that the
    checks can test it is one and read its ``__name__``."""
    name = ref.type if ref.type.isidentifier() else "LearnerClass"
    return type(
        name,
        (RemoteClass,),
        {"_judge_kernel": kernel, "_judge_ref": ref, "__module__": "learner"},
    )


class RemoteModule(torch.nn.Module):
    """One module of a learner's tree, mirrored: its forward runs in the kernel."""

    def forward(self, *args, **kwargs):
        return self._judge_tree.run(self, args, kwargs)


class Tree:
    """What the judge knows of one module tree built in the kernel: the kernel, the
    tree's id there, and where each tensor slot is (node, "p" or "b", name). Shared by
    a mirror and its deep copies: the kernel's module runs for whichever calls it,
    on that one's tensors."""

    def __init__(self, kernel, ref: int, described) -> None:
        self.kernel, self.ref = kernel, ref
        self.slots = _slots(described)
        # Each module's submodules as built: a check may replace one (see run).
        self.children = [
            [(name, at) for name, at in n["children"]] for n in described["nodes"]
        ]
        # What the kernel's module holds now, slot by slot: only what differs is sent.
        self.held = [_copy(t) for t in described["state"]]

    def __deepcopy__(self, memo):
        return self

    def _changed(self, state: list) -> list:
        """``state`` with None for each tensor the kernel already holds."""
        sent = []
        for i, t in enumerate(state):
            if _held(t, self.held[i]):
                sent.append(None)
            else:
                sent.append(t)
                self.held[i] = _copy(t)
        return sent

    def _swaps(self, nodes: list, slot_of: dict) -> list:
        """The submodules a check replaced in this mirror (as ``adopt_hand_written_
        norms`` puts an ``nn.LayerNorm`` in place of a norm written by hand):
        ``[(module, name, new submodule, ties)]``, each one of PyTorch's layers the
        judge lends (:data:`.wire.LENDABLE`), for the kernel to use in that forward;
        ``ties`` ``{parameter: slot}`` names those of its parameters that are the
        tree's own (``slot_of``: slot by tensor id), which the kernel then uses as
        they are."""
        swaps = []
        for i, built in enumerate(self.children):
            for name, child in built:
                now = nodes[i]._modules.get(name)
                if now is (None if child is None else nodes[child]):
                    continue
                if now is None or lent(now) is None:
                    raise RuntimeError(
                        f"the judge cannot run your module with its {name!r} "
                        f"replaced by a {type(now).__name__}"
                    )
                ties = {
                    n: slot_of[id(p)]
                    for n, p in now._parameters.items()
                    if id(p) in slot_of
                }
                swaps.append((i, name, now, ties))
        return swaps

    def run(self, module: RemoteModule, args: tuple, kwargs: dict):
        from .remote import indexed_tensors, joined

        nodes = module._judge_nodes
        state = [_slot(nodes, s) for s in self.slots]
        slot_of = {id(t): i for i, t in enumerate(state)}
        watch, recorders = _watching(nodes, module._judge_index, slot_of)
        found = self.kernel.call(
            self.ref,
            args,
            kwargs,
            op="forward",
            swaps=self._swaps(nodes, slot_of),
            node=module._judge_index,
            state=to_json(self._changed(state)),
            training=[n.training for n in nodes],
            grad=torch.is_grad_enabled(),
            **({"trace": watch} if watch else {}),
        )
        params = [t for s, t in zip(self.slots, state) if s[1] == "p"]
        moved = found.get("moved", [])
        for i, new in indexed_tensors(moved, len(state), "moved tensor"):
            with torch.no_grad():
                state[i].data = new.to(state[i].device)
            self.held[i] = _copy(state[i])
        if watch:
            _replay(found.get("events", []), watch, nodes, state, recorders)
        return joined(self.kernel, found, args, kwargs, params)


#: The most watched calls one forward may report.
MAX_EVENTS = 10_000


def _watching(nodes: list, called: int, slot_of: dict):
    """What the checks watch while module ``called`` runs in the kernel: forward
    hooks on the other modules of its tree, and the function-call recorders
    (:class:`~tformer_grading.checks.measure.trace.FunctionCalls`) active now, with
    the ``linear`` weights they watch found among the tree's tensors (``slot_of``:
    slot by tensor id). Returns (the request's ``trace``, or None when nothing is
    watched; the recorders)."""
    from ..checks.measure.trace import FunctionCalls

    stack = torch.overrides._get_current_function_mode_stack()
    recorders = [m for m in stack if isinstance(m, FunctionCalls)]
    hooked = [i for i, n in enumerate(nodes) if i != called and n._forward_hooks]
    if not recorders and not hooked:
        return None, []
    watched = {id(w) for m in recorders for w in m.linears.values()}
    return {
        "hooked": hooked,
        "names": sorted({n for m in recorders for n in m.names}),
        "linears": sorted(slot_of[w] for w in watched if w in slot_of),
    }, recorders


def _replay(events, watch: dict, nodes: list, state: list, recorders: list) -> None:
    """The watched calls the learner's module made in the kernel, replayed here in
    their order: each module call to that mirror's forward hooks, each function call
    to the recorders, with the judge's own tensor wherever the kernel's call used
    one of the tree's. What they observed is the kernel's word: the checks use it
    for their messages, and to withhold points (never to grant them)."""
    from .remote import JudgeError

    try:
        _need(type(events) is list and len(events) <= MAX_EVENTS, "its events")
        calls = [_event(e, watch, state) for e in events]
    except _Malformed as exc:
        raise JudgeError(f"the kernel's answer is not valid: {exc}") from None
    for kind, at, args, kwargs, out in calls:
        if kind == "call":
            for recorder in recorders:
                recorder.observe(at, args, kwargs, out)
            continue
        node = nodes[at]
        for key, hook in list(node._forward_hooks.items()):
            if node._forward_hooks_with_kwargs.get(key, False):
                hook(node, args, kwargs, out)
            else:
                hook(node, args, out)


def _event(event, watch: dict, state: list) -> tuple:
    """One event of the kernel's, checked: (kind, module index or function name,
    args, kwargs, output)."""
    _need(type(event) is list and len(event) == 5, "an event")
    kind, at, args, kwargs, out = event
    if kind == "hook":
        _need(type(at) is int and at in watch["hooked"], "an event's module")
    else:
        _need(kind == "call" and type(at) is str, "an event's kind")
        _need(at in watch["names"] or at == "linear", "an event's function")
    _need(type(args) is list and type(kwargs) is dict, "an event's arguments")

    def value(item):
        _need(type(item) is list and len(item) == 2, "an event's argument")
        mark, got = item
        if mark == "s":
            _need(type(got) is int and 0 <= got < len(state), "an argument's slot")
            return state[got]
        _need(mark == "v", "an argument's mark")
        return got

    kwargs = {k: value(v) for k, v in kwargs.items()}
    return kind, at, tuple(value(a) for a in args), kwargs, out


def _slot(nodes: list, slot: tuple) -> torch.Tensor:
    index, kind, name = slot
    node = nodes[index]
    return (node._parameters if kind == "p" else node._buffers)[name]


def _copy(t: torch.Tensor) -> torch.Tensor:
    return t.detach().clone().requires_grad_(t.requires_grad)


def _held(t: torch.Tensor, held: torch.Tensor) -> bool:
    """Whether the kernel holds ``t`` already: the same bits, dtype, shape, device and
    requires_grad (compared by value: a check may write through ``.data``, which no
    version counter sees)."""
    return (
        t.device == held.device
        and t.requires_grad == held.requires_grad
        and same_bits(t, held)
    )


class _Malformed(Exception):
    pass


def _need(ok: bool, what: str) -> None:
    if not ok:
        raise _Malformed(what)


def _name(name) -> str:
    _need(
        type(name) is str
        and 0 < len(name) <= 200
        and (name.isidentifier() or name.isdigit()),
        f"a module or tensor name {name!r:.40}",
    )
    return name


def _nodes(described) -> list:
    _need(type(described) is dict, "the tree is not an object")
    nodes, state = described.get("nodes"), described.get("state")
    _need(type(nodes) is list and 0 < len(nodes) <= MAX_MODULES, "its modules")
    _need(type(state) is list, "its tensors")
    for node in nodes:
        _need(type(node) is dict, "a module is not an object")
        _need(type(node.get("type")) is str, "a module's type")
        _need(type(node.get("training")) is bool, "a module's training flag")
        for key in ("children", "params", "buffers"):
            _need(type(node.get(key)) is list, f"a module's {key}")
    return nodes


def _slots(described) -> list:
    """Each tensor of the tree's state: (node, kind, name) where it first appears."""
    try:
        nodes, state = _nodes(described), described["state"]
        slots: dict[int, tuple] = {}
        for i, node in enumerate(nodes):
            for kind, key in (("p", "params"), ("b", "buffers")):
                for item in node[key]:
                    _need(type(item) is list and len(item) == 3, "a tensor entry")
                    name, at, flag = item
                    _need(type(at) is int and 0 <= at < len(state), "a tensor index")
                    _need(type(flag) is bool, "a tensor flag")
                    _need(isinstance(state[at], torch.Tensor), "a tensor's value")
                    slot = slots.setdefault(at, (i, kind, _name(name)))
                    _need(slot[1] == kind, "a tensor both parameter and buffer")
        _need(len(slots) == len(state), "a tensor no module holds")
    except _Malformed as exc:
        from .remote import JudgeError

        raise JudgeError(f"the kernel's answer is not valid: {exc}") from None
    return [slots[at] for at in range(len(state))]


def _mirror(tree: Tree, described) -> RemoteModule:
    """The root of a mirror of ``described`` (checked by :func:`_slots`)."""
    from .remote import JudgeError

    nodes_in, state = described["nodes"], described["state"]
    classes: dict[str, type] = {}
    nodes, made = [], {}
    try:
        for node in nodes_in:
            module = _layer(node) if "layer" in node else _remote(node, classes)
            module.training = node["training"]
            nodes.append(module)
        for module, node in zip(nodes, nodes_in):
            _fill(module, node, nodes, state, made)
        _acyclic(nodes_in)
    except (_Malformed, WireError, RuntimeError, TypeError) as exc:
        raise JudgeError(f"the kernel's answer is not valid: {exc}") from None
    for i, module in enumerate(nodes):
        module._judge_tree, module._judge_nodes, module._judge_index = tree, nodes, i
    return nodes[0]


def _remote(node: dict, classes: dict) -> RemoteModule:
    """A node of the learner's: a mirror whose forward runs in the kernel. Its class,
    called (as ``type(node)(...)``), builds another of the learner's class there."""
    kind = node["type"] if node["type"].isidentifier() else "LearnerModule"
    made = node.get("class")
    if not (isinstance(made, type) and issubclass(made, RemoteClass)):
        made = None
    key = (kind, None if made is None else made._judge_ref.id)
    if key not in classes:
        fields = {"__module__": "learner"}
        if made is not None:
            fields["__new__"] = lambda cls, *args, **kwargs: made(*args, **kwargs)
        classes[key] = type(kind, (RemoteModule,), fields)
    module = object.__new__(classes[key])
    torch.nn.Module.__init__(module)
    return module


def _layer(node: dict) -> torch.nn.Module:
    """A node the kernel says is exactly one of PyTorch's layers or of the
    reference's modules (:func:`.wire.layer_class`), built here as that class with
    the attributes the kernel gave. Its parameters, buffers and submodules are filled
    in as any node's are; called by itself, it runs here, as the reference does."""
    cls = layer_class(node["layer"])
    _need(cls is not None, f"a module class {str(node['layer'])!r:.60}")
    return bare_module(cls, layer_attrs(cls, node["attrs"]))


def _fill(module, node: dict, nodes: list, state: list, made: dict) -> None:
    names: set[str] = set()

    def fresh(name) -> str:
        _need(_name(name) not in names, f"the name {name!r:.40} twice in a module")
        names.add(name)
        return name

    for name, at, requires_grad in node["params"]:
        if at not in made:
            made[at] = torch.nn.Parameter(state[at].detach(), requires_grad)
        module._parameters[fresh(name)] = made[at]
    for name, at, persistent in node["buffers"]:
        made.setdefault(at, state[at].detach())
        module._buffers[fresh(name)] = made[at]
        if not persistent:
            module._non_persistent_buffers_set.add(name)
    for item in node.get("none", []):  # a parameter or buffer registered as None
        _need(type(item) is list and len(item) == 2 and item[0] in "pb", "a None")
        table = module._parameters if item[0] == "p" else module._buffers
        table[fresh(item[1])] = None
    for item in node["children"]:
        _need(type(item) is list and len(item) == 2, "a child entry")
        name, at = item
        _need(at is None or (type(at) is int and 0 < at < len(nodes)), "a child")
        module._modules[fresh(name)] = None if at is None else nodes[at]


def _acyclic(nodes_in: list) -> None:
    """Every module reachable from the root, and none its own descendant (PyTorch's
    ``.to()`` would recurse forever)."""
    children = [[c for _, c in n["children"] if c is not None] for n in nodes_in]
    state = [0] * len(nodes_in)  # 0 unseen, 1 on the path, 2 done
    stack = [(0, iter(children[0]))]
    state[0] = 1
    while stack:
        at, rest = stack[-1]
        child = next(rest, None)
        if child is None:
            state[at] = 2
            stack.pop()
            continue
        _need(state[child] != 1, "a module that contains itself")
        if state[child] == 0:
            state[child] = 1
            stack.append((child, iter(children[child])))
    _need(all(state), "a module the root does not hold")
