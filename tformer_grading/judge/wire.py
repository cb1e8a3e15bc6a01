"""Values between the judge and the learner's kernel, as data that cannot run code.

A message is one JSON document. Plain values are themselves (``None``, ``bool``,
``int``, ``float``, ``str``, lists and string-keyed dicts); the rest is an object with
one ``"$"`` key naming its kind:

========================  ==========================================================
``{"$": "tensor"}``       ``dtype`` (a name from :data:`DTYPES`), ``shape``,
                          ``device``, ``requires_grad``, ``data`` (base64 of the
                          raw little-endian bytes, C order)
``{"$": "float"}``        ``value`` "nan", "inf" or "-inf" (JSON has no such numbers)
``{"$": "tuple"}``        ``items``
``{"$": "dtype"}``        ``name``; ``{"$": "device"}``: ``name``
``{"$": "ref"}``          ``id``, ``kind`` ("callable", "class" or "object"), ``type``:
                          an object that stays in the kernel (:mod:`.remote`)
``{"$": "raised"}``       ``type``, ``message``, ``where``, ``call``: an exception
                          the learner's code raised
``{"$": "lent"}``         ``type``, ``attrs``, ``training``, ``params``,
                          ``buffers``: a module of PyTorch's the judge lends the
                          learner's code (:class:`Lent`)
``{"$": "judged"}``       ``id``, ``type``: an object that stays in the judge's
                          process (a check's recording model), which the learner's
                          code calls back (:class:`Judged`); of type "Parameter",
                          one of its parameters, which the kernel holds a stand-in
                          for (:mod:`.agent`)
========================  ==========================================================

Nothing is unpickled, and :func:`decode` checks every bound before it builds
anything: the document's size, its depth, how many items and tensors it holds, each
tensor's element count and that its bytes are exactly ``shape`` × the dtype's size.
A message that breaks a bound or the grammar raises :class:`WireError`, which the
judge turns into a failed cell with that message.

    >>> import torch
    >>> text = encode({"out": torch.tensor([[1.5, float("nan")]]), "n": (2, None)})
    >>> back = decode(text)
    >>> back["out"], back["n"]
    (tensor([[1.5000,    nan]]), (2, None))
    >>> try:
    ...     decode('{"$": "tensor", "dtype": "float32", "shape": [3], "data": "AAAA"}')
    ... except WireError as exc:
    ...     print(exc)
    a float32 tensor of shape [3] needs 12 bytes, and 3 came
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from dataclasses import dataclass

import torch

DTYPES = {
    str(d).removeprefix("torch."): d
    for d in (
        torch.float16,
        torch.bfloat16,
        torch.float32,
        torch.float64,
        torch.uint8,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.bool,
        torch.complex64,
        torch.complex128,
    )
}


@dataclass(frozen=True)
class Bounds:
    """What one message may hold. The defaults fit every exercise's largest value
    (a 1100 × 1100 mask, a model's parameters) many times over."""

    chars: int = 48 << 20
    depth: int = 24
    items: int = 100_000
    tensors: int = 4_096
    elements: int = 16 << 20  # in all the message's tensors


BOUNDS = Bounds()


class WireError(ValueError):
    """A message that is malformed, of a kind not allowed, or over a bound."""


@dataclass(frozen=True)
class Ref:
    """An object that stays in the kernel: ``kind`` is "callable", "class" or
    "object", ``type`` its class's name (as the kernel says: not trusted)."""

    id: int
    kind: str
    type: str


@dataclass(frozen=True)
class Raised:
    """An exception the learner's code raised in the kernel, as the kernel reported
    it: its class's name and its message, and for the judge's messages only, where in
    the learner's code it was raised and what the PyTorch call that raised was given
    (:func:`tformer_grading.checks.diagnosis.learner_line`,
    :func:`tformer_grading.checks.measure.failing_call.failing_call`)."""

    type: str
    message: str
    where: str = ""
    call: str = ""


@dataclass(frozen=True)
class Lent:
    """A module of PyTorch's (one of :data:`LENDABLE`, with no submodules) that the
    judge passes to the learner's code, as data: its class's name, its plain
    attributes, its train/eval flag, and its parameters and buffers as
    ``((name, tensor), ...)``. The kernel builds one like it for the call."""

    type: str
    attrs: dict
    training: bool
    params: tuple
    buffers: tuple


@dataclass(frozen=True)
class Judged:
    """An object of the judge's that the learner's code is given but that stays in
    the judge's process: the kernel reaches it by calling back (:mod:`.remote`), and
    only through :data:`CALLED_BACK` and plain attributes. ``type`` is its class's
    name."""

    id: int
    type: str


#: The methods of a :class:`Judged` object the learner's code may call: a model's
#: (``model(src, tgt)``, ``encode``, ``decode``, ``eval`` ...), an optimizer's and a
#: scheduler's (``step``, ``zero_grad``). Anything else of the judge's objects (a
#: check's record, its ``reset``) is out of the kernel's reach.
CALLED_BACK = frozenset(
    {
        "__call__",
        "forward",
        "encode",
        "decode",
        "eval",
        "train",
        "parameters",
        "named_parameters",
        "to",
        "zero_grad",
        "step",
        "get_last_lr",
    }
)

#: Of those, the ones that return an iterator (sent as a list, iterated in the
#: kernel).
ITERATORS = frozenset({"parameters", "named_parameters"})


#: The modules the judge lends: PyTorch's own, whose forward reads only their
#: parameters, buffers and plain attributes.
LENDABLE = ("Embedding", "Linear", "LayerNorm", "Dropout", "ReLU", "GELU", "Identity")


#: PyTorch's modules the judge builds as themselves in a mirror (:mod:`.mirror`):
#: those it lends, other norms and activations, and the containers.
LAYERS = (
    *LENDABLE,
    "BatchNorm1d",
    "BatchNorm2d",
    "GroupNorm",
    "RMSNorm",
    "InstanceNorm1d",
    "Softmax",
    "Tanh",
    "Sigmoid",
    "SiLU",
    "ReLU6",
    "LeakyReLU",
    "Sequential",
    "ModuleList",
    "ModuleDict",
)

#: The modules of the course's reference whose classes the judge rebuilds as such.
REFERENCE_MODULES = (
    "tformer_ref.attention",
    "tformer_ref.blocks",
    "tformer_ref.positions",
    "tformer_ref.model",
)


def layer_class(name) -> type | None:
    """The class a module's qualified ``name`` says, when it is one the judge builds
    as itself: one of PyTorch's :data:`LAYERS` (``torch.nn.Linear``), or a
    module class of the reference (:data:`REFERENCE_MODULES`). None for any other.

        >>> layer_class("torch.nn.Linear"), layer_class("os.system")
        (<class 'torch.nn.modules.linear.Linear'>, None)
    """
    if type(name) is not str:
        return None
    where, _, short = name.rpartition(".")
    if where == "torch.nn":
        return getattr(torch.nn, short) if short in LAYERS else None
    if where not in REFERENCE_MODULES:
        return None
    import importlib

    cls = getattr(importlib.import_module(where), short, None)
    if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
        return None
    return cls if cls.__module__ == where else None


def qualified_name(cls: type) -> str:
    """``cls``'s name as :func:`layer_class` reads it (PyTorch's by ``torch.nn``)."""
    if getattr(torch.nn, cls.__name__, None) is cls:
        return f"torch.nn.{cls.__name__}"
    return f"{cls.__module__}.{cls.__qualname__}"


def layer_attrs(cls: type, attrs) -> dict:
    """``attrs`` checked as the plain attributes of a ``cls`` the other side built:
    public names the class does not define itself (so none hides a method), with
    plain values. WireError otherwise.

        >>> layer_attrs(torch.nn.Dropout, {"p": 0.1, "inplace": False})
        {'p': 0.1, 'inplace': False}
        >>> layer_attrs(torch.nn.Linear, {"forward": 1})
        Traceback (most recent call last):
        ...
        tformer_grading.judge.wire.WireError: Linear has no attribute 'forward' to set
    """
    name = cls.__name__
    if type(attrs) is not dict:
        raise WireError(f"the attributes of a {name} must be an object")
    for key, value in attrs.items():
        if (
            not key.isidentifier()
            or key.startswith("_")
            or key == "training"
            or hasattr(cls, key)
        ):
            raise WireError(f"{name} has no attribute {key!r:.40} to set")
        if not plain_value(value):
            raise WireError(f"a {name}'s attribute {key} must be a plain value")
    return attrs


def plain_attrs(module: torch.nn.Module) -> dict | None:
    """``module``'s public attributes (but ``training``), or None when one is not a
    plain value (such a module is not rebuilt as its class: see :mod:`.mirror`)."""
    attrs = _public_attrs(module)
    return attrs if all(plain_value(v) for v in attrs.values()) else None


def bare_module(cls: type, attrs: dict) -> torch.nn.Module:
    """A ``cls`` with plain attributes ``attrs`` and, as yet, no parameters, buffers
    or submodules: how each side builds a module the other described (its
    ``__init__`` is not run, so nothing of the description runs code)."""
    module = cls.__new__(cls)
    torch.nn.Module.__init__(module)
    for key, value in attrs.items():
        object.__setattr__(module, key, value)
    return module


def _public_attrs(module: torch.nn.Module) -> dict:
    return {
        k: v
        for k, v in vars(module).items()
        if not k.startswith("_") and k != "training"
    }


def lent(module: torch.nn.Module) -> Lent | None:
    """``module`` as a :class:`Lent`, or None when it is not one the judge lends."""
    cls = type(module)
    if (
        cls.__name__ not in LENDABLE
        or getattr(torch.nn, cls.__name__) is not cls
        or module._modules
    ):
        return None
    attrs = {k: v for k, v in _public_attrs(module).items() if plain_value(v)}
    return Lent(
        cls.__name__,
        attrs,
        module.training,
        tuple((n, t) for n, t in module._parameters.items() if t is not None),
        tuple((n, t) for n, t in module._buffers.items() if t is not None),
    )


def lent_tensors(modules: list) -> list:
    """The parameters, then the buffers, of each module of ``modules``: how the judge
    and the kernel number a lent module's tensors to say which the call changed."""
    return [
        t
        for m in modules
        for table in (m._parameters, m._buffers)
        for t in table.values()
        if t is not None
    ]


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors are equal bit for bit, dtype and shape too (a NaN that
    stayed a NaN is the same; ``torch.equal`` would say it changed)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    a, b = a.detach().contiguous().reshape(-1), b.detach().contiguous().reshape(-1)
    return torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def plain_value(v) -> bool:
    """Whether ``v`` is a plain value: None, a bool, int, float or str, or a tuple of
    them."""
    if v is None or type(v) in (bool, int, float, str):
        return True
    return type(v) is tuple and all(plain_value(x) for x in v)


def encode(value, *, refer=None) -> str:
    """``value`` as one JSON document. ``refer(obj) -> Ref`` is asked for any object
    that is not data (the kernel keeps it); without it such an object is a
    :class:`WireError`."""
    return json.dumps(to_json(value, refer=refer), allow_nan=False)


def to_json(value, *, refer=None):
    """:func:`encode`'s document before it is written out: for a value that goes
    into a larger message (a request's arguments, an answer's value), which is then
    written once."""
    return _to_json(value, refer, 0)


def _to_json(value, refer, depth: int):
    if depth > BOUNDS.depth:
        raise WireError(f"a value nested deeper than {BOUNDS.depth} levels")
    if value is None or type(value) in (bool, str):
        return value
    if isinstance(value, int):
        return int(value)  # an IntEnum is sent as its number
    if isinstance(value, str):
        return str(value)  # a str subclass as its text
    if isinstance(value, float):
        value = float(value)
        return value if math.isfinite(value) else {"$": "float", "value": str(value)}
    if isinstance(value, torch.Tensor):
        return _tensor_json(value)
    if isinstance(value, torch.dtype):
        return {"$": "dtype", "name": str(value).removeprefix("torch.")}
    if isinstance(value, torch.device):
        return {"$": "device", "name": str(value)}
    if isinstance(value, Raised):
        return {"$": "raised", **vars(value)}
    if isinstance(value, Ref):
        return {"$": "ref", "id": value.id, "kind": value.kind, "type": value.type}
    if isinstance(value, Judged):
        return {"$": "judged", "id": value.id, "type": value.type}
    if isinstance(value, Lent):
        return {
            "$": "lent",
            "type": value.type,
            "attrs": _to_json(value.attrs, None, depth + 1),
            "training": value.training,
            "params": [[n, _tensor_json(t)] for n, t in value.params],
            "buffers": [[n, _tensor_json(t)] for n, t in value.buffers],
        }
    if type(value) in (list, tuple):
        items = [_to_json(v, refer, depth + 1) for v in value]
        return items if type(value) is list else {"$": "tuple", "items": items}
    if type(value) is dict and all(type(k) is str and k != "$" for k in value):
        return {k: _to_json(v, refer, depth + 1) for k, v in value.items()}
    if refer is None:
        raise WireError(f"a {type(value).__name__} cannot be sent as data")
    return _to_json(refer(value), None, depth)


def _tensor_json(tensor: torch.Tensor) -> dict:
    # A subclass is sent as the plain tensor it holds: its methods stay behind.
    plain = torch.Tensor.as_subclass(tensor.detach(), torch.Tensor)
    name = str(plain.dtype).removeprefix("torch.")
    if name not in DTYPES:
        raise WireError(f"a tensor of dtype {name} cannot be sent")
    if plain.layout != torch.strided:
        plain = plain.to_dense()
    cpu = plain.cpu().contiguous()
    raw = cpu.reshape(-1).view(torch.uint8) if cpu.numel() else torch.empty(0)
    data = bytes(raw.numpy().tobytes()) if cpu.numel() else b""
    return {
        "$": "tensor",
        "dtype": name,
        "shape": list(cpu.shape),
        "device": str(tensor.device),
        "requires_grad": bool(tensor.requires_grad),
        "data": base64.b64encode(data).decode("ascii"),
    }


def decode(text, *, bounds: Bounds = BOUNDS, resolve=None):
    """The value ``text`` (a JSON document from :func:`encode`) holds, checked against
    ``bounds``. ``resolve(Ref)`` turns a reference into an object (the judge's proxy);
    without it a :class:`Ref` is returned as is."""
    if not isinstance(text, str):
        raise WireError(f"expected a JSON text, got a {type(text).__name__}")
    if len(text) > bounds.chars:
        raise WireError(
            f"a message of {len(text):,} characters, over the bound of {bounds.chars:,}"
        )
    try:
        document = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise WireError(f"not a JSON document: {exc}") from None
    return from_json(document, bounds=bounds, resolve=resolve)


def from_json(document, *, bounds: Bounds = BOUNDS, resolve=None):
    """:func:`decode` of a document already parsed from JSON."""
    counts = {"items": 0, "tensors": 0, "elements": 0}
    return _from_json(document, bounds, counts, resolve, 0)


def tensors_in(value) -> list[torch.Tensor]:
    """The tensors in ``value``, in the order :func:`encode` writes them (lists,
    tuples and dicts looked into; the judge and the kernel pair gradients by it)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if type(value) in (list, tuple):
        return [t for v in value for t in tensors_in(v)]
    if type(value) is dict:
        return [t for v in value.values() for t in tensors_in(v)]
    return []


def changed_params(params: dict, synced: dict) -> list:
    """``[[number, value, grad], ...]`` of the parameters of ``params`` (by number)
    that changed since ``synced`` (by number: their :func:`snapshot` as last sent or
    received), which is brought up to date: what one side sends the other of the
    parameters the kernel holds stand-ins for. A value keeps its requires_grad (the
    stand-in is made alike)."""
    out = []
    for number, param in params.items():
        now = snapshot(param)
        if not same_snapshot(now, synced.get(number)):
            value = param.detach().requires_grad_(param.requires_grad)
            grad = None if param.grad is None else param.grad.detach()
            out.append([number, value, grad])
            synced[number] = now
    return out


def snapshot(param: torch.Tensor) -> tuple:
    """(value, grad) of a parameter, copied: how each side remembers what it last
    sent or received of a parameter the other holds a stand-in for."""
    grad = param.grad
    return param.detach().clone(), None if grad is None else grad.detach().clone()


def same_snapshot(a: tuple, b: tuple | None) -> bool:
    """Whether two :func:`snapshot` are equal bit for bit (None: never taken)."""
    if b is None or (a[1] is None) != (b[1] is None):
        return False
    return same_bits(a[0], b[0]) and (a[1] is None or same_bits(a[1], b[1]))


def swapped(value, swap: dict):
    """``value`` with each tensor whose id is a key of ``swap`` replaced by its value
    (lists, tuples and dicts rebuilt, as :func:`tensors_in` reads them)."""
    if isinstance(value, torch.Tensor):
        return swap.get(id(value), value)
    if type(value) in (list, tuple):
        return type(value)(swapped(v, swap) for v in value)
    if type(value) is dict:
        return {k: swapped(v, swap) for k, v in value.items()}
    return value


def _no_constant(name: str):
    raise WireError(f"{name} is not JSON (a non-finite float is sent as an object)")


def _from_json(value, bounds: Bounds, counts: dict, resolve, depth: int):
    if depth > bounds.depth:
        raise WireError(f"a value nested deeper than {bounds.depth} levels")
    counts["items"] += 1
    if counts["items"] > bounds.items:
        raise WireError(f"more than {bounds.items:,} values in one message")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, list):
        return [_from_json(v, bounds, counts, resolve, depth + 1) for v in value]
    if not isinstance(value, dict):
        raise WireError(f"unexpected JSON value {value!r:.40}")
    kind = value.get("$")
    if kind is None:
        return {
            k: _from_json(v, bounds, counts, resolve, depth + 1)
            for k, v in value.items()
        }
    if kind == "tuple":
        items = _field(value, "items", list)
        return tuple(_from_json(v, bounds, counts, resolve, depth + 1) for v in items)
    if kind == "tensor":
        return _tensor(value, bounds, counts)
    if kind == "float":
        text = _field(value, "value", str)
        if text not in ("nan", "inf", "-inf"):
            raise WireError(f"a float object holds {text!r:.20}, not nan or ±inf")
        return float(text)
    if kind == "dtype":
        name = _field(value, "name", str)
        if name not in DTYPES:
            raise WireError(f"unknown dtype {name!r:.40}")
        return DTYPES[name]
    if kind == "device":
        return _device(_field(value, "name", str))
    if kind == "raised":
        return Raised(
            _field(value, "type", str)[:200],
            _field(value, "message", str),
            str(value.get("where", ""))[:2000],
            str(value.get("call", ""))[:2000],
        )
    if kind == "ref":
        ref = Ref(
            _field(value, "id", int),
            _field(value, "kind", str)[:20],
            _field(value, "type", str)[:200],
        )
        if ref.kind not in ("callable", "class", "object"):
            raise WireError(f"unknown reference kind {ref.kind!r}")
        return ref if resolve is None else resolve(ref)
    if kind == "lent":
        made = _lent(value, bounds, counts, depth)
        return made if resolve is None else resolve(made)
    if kind == "judged":
        made = Judged(_field(value, "id", int), _field(value, "type", str)[:200])
        return made if resolve is None else resolve(made)
    raise WireError(f"unknown kind {kind!r:.40}")


def _lent(value: dict, bounds: Bounds, counts: dict, depth: int) -> Lent:
    name = _field(value, "type", str)
    if name not in LENDABLE:
        raise WireError(f"a module of type {name!r:.40} is not lent")
    attrs = _from_json(_field(value, "attrs", dict), bounds, counts, None, depth + 1)
    layer_attrs(getattr(torch.nn, name), attrs)
    tables = []
    for key in ("params", "buffers"):
        table = []
        for item in _field(value, key, list):
            if not (
                type(item) is list
                and len(item) == 2
                and type(item[0]) is str
                and type(item[1]) is dict
            ):
                raise WireError(f"a lent module's {key} must be [name, tensor] pairs")
            table.append((item[0], _tensor(item[1], bounds, counts)))
        tables.append(tuple(table))
    return Lent(name, attrs, _field(value, "training", bool), *tables)


def _field(value: dict, name: str, kind: type):
    got = value.get(name)
    if type(got) is not kind:
        raise WireError(
            f"a {value.get('$')!r:.20} object needs {name!r} as a {kind.__name__}, "
            f"got {type(got).__name__}"
        )
    return got


def _device(name: str) -> torch.device:
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise WireError(f"unknown device {name!r:.40}") from None
    if device.type not in ("cpu", "cuda"):
        raise WireError(f"a device of type {device.type!r:.20} is not expected")
    return device


def _tensor(value: dict, bounds: Bounds, counts: dict) -> torch.Tensor:
    name = _field(value, "dtype", str)
    if name not in DTYPES:
        raise WireError(f"a tensor of unknown dtype {name!r:.40}")
    shape = _field(value, "shape", list)
    if len(shape) > 16 or not all(type(n) is int and 0 <= n for n in shape):
        raise WireError(
            f"a tensor shape must be at most 16 sizes ≥ 0, got {shape!r:.80}"
        )
    numel = math.prod(shape)
    counts["tensors"] += 1
    counts["elements"] += numel
    if counts["tensors"] > bounds.tensors:
        raise WireError(f"more than {bounds.tensors:,} tensors in one message")
    if counts["elements"] > bounds.elements:
        raise WireError(
            f"tensors of more than {bounds.elements:,} elements in all in one message"
        )
    dtype = DTYPES[name]
    size = torch.empty((), dtype=dtype).element_size()
    text = _field(value, "data", str)
    if len(text) > (numel * size + 2) // 3 * 4 + 4:
        raise WireError(f"a {name} tensor of shape {shape} with too much data")
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise WireError("a tensor's data is not base64") from None
    if len(data) != numel * size:
        raise WireError(
            f"a {name} tensor of shape {shape} needs {numel * size} bytes, and "
            f"{len(data)} came"
        )
    flat = torch.frombuffer(bytearray(data), dtype=dtype) if numel else None
    tensor = flat.reshape(shape) if numel else torch.empty(shape, dtype=dtype)
    device = _device(_field(value, "device", str))
    if device.type == "cuda" and torch.cuda.is_available():
        tensor = tensor.to(device)
    differentiable = dtype.is_floating_point or dtype.is_complex
    if value.get("requires_grad") is True and differentiable:
        tensor.requires_grad_(True)
    return tensor
