"""Errors read without a case's sizes: what the code asked of a tensor's axes.

An axis that does not exist, a shape unpacked into the wrong number of names, a view of
a transposed tensor, a permute of the wrong length: PyTorch's words say what happened,
and :func:`read_plain` says it in the exercise's terms. :mod:`.torch_errors` adds these
readings to the size readings of a failure.

Examples::

    >>> read_plain("IndexError: Dimension out of range (expected to be in range of "
    ...            "[-3, 2], but got 3)")
    ['the tensor has 3 axes (0 to 2, or -3 to -1) and the code asked for axis 3']
    >>> read_plain("RuntimeError: Invalid rank 2, rank should be in the interval "
    ...            "[0, -1] while the check ran make_loader(rank=0, world_size=2)")
    ... # doctest: +NORMALIZE_WHITESPACE
    ["DistributedSampler was given rank=2 and num_replicas=0 (this case's world_size
      and rank): the two arrived in each other's places; pass them by name,
      num_replicas=world_size, rank=rank"]
    >>> read_plain("TypeError: rate() missing 1 required positional argument: "
    ...            "'warmup' at line 3 of your code")  # doctest: +ELLIPSIS
    ["the function rate was called without 'warmup': whatever called it ..."]
    >>> read_plain("a weight of 0.3")
    []
"""

from __future__ import annotations

import re

from ...guard.integrity import seal


def table(*rows) -> tuple:
    """Rows of (pattern, reader) with each pattern compiled."""
    return tuple((re.compile(pattern), read) for pattern, read in rows)


def _axis(m: re.Match) -> str:
    axes = int(m[1])
    return (
        f"the tensor has {axes} axes (0 to {axes - 1}, or -{axes} to -1) and the code "
        f"asked for axis {m[3]}"
    )


def _unpack(m: re.Match) -> str:
    axes = f"{m[2]} axes" if m[2] else "more axes"
    return f"`{m[3]}` unpacks {m[1]} sizes from a shape with {axes}"


# PyTorch's names of dtypes in its errors, as the code writes them.
_DTYPES = {
    "Float": "float32",
    "Double": "float64",
    "Half": "float16",
    "BFloat16": "bfloat16",
    "Long": "int64",
    "Int": "int32",
    "Bool": "bool",
    "float": "float32",
    "double": "float64",
    "half": "float16",
}


def _dtypes(m: re.Match) -> str:
    a, b = (_DTYPES.get(name, name) for name in m.groups())
    return (
        f"one operation met a {a} tensor and a {b} one: some tensor of the code was "
        f"made {a} or {b} on its own (a .float(), a dtype= argument, a new tensor made "
        "without the inputs' dtype) instead of following the inputs' dtype"
    )


def _sampler(m: re.Match) -> str:
    got_rank, replicas = int(m[1]), int(m[2]) + 1
    said = f"DistributedSampler was given rank={got_rank} and num_replicas={replicas}"
    if m[3] is not None and (got_rank, replicas) == (int(m[4]), int(m[3])):
        said += (
            " (this case's world_size and rank): the two arrived in each other's "
            "places; pass them by name, num_replicas=world_size, rank=rank"
        )
    return said


def _a(word: str) -> str:
    return f"{'an' if word[:1] in 'aeiou' else 'a'} {word}"


def _said(text: str):
    """A reader that says ``text``, filled with the match's groups."""
    return lambda m: text.format(*m.groups())


_PLAIN = table(
    (
        (
            r"Dimension out of range \(expected to be in range of \[-(\d+), (\d+)\], "
            r"but got (-?\d+)\)"
        ),
        _axis,
    ),
    (  # the learner's line, quoted, shows what was unpacked
        (
            r"(?:not enough|too many) values to unpack "
            r"\(expected (\d+)(?:, got (\d+))?\)[^`]*`([^`]*\.(?:shape|size\(\))[^`]*)`"
        ),
        _unpack,
    ),
    (
        r"view size is not compatible with input tensor's size and stride",
        _said(
            "view reads the tensor's memory in place, and after a transpose or permute "
            "that memory is not in the new shape's order: reshape copies when it must"
        ),
    ),
    (
        r"input\.dim\(\) = (\d+) is not equal to len\(dims\) = (\d+)",
        _said("the tensor has {0} axes and the permute lists {1}"),
    ),
    (
        r"batch1 must be a 3D tensor",
        _said(
            "the tensors given to torch.bmm must be 3-D; @ (torch.matmul) takes "
            "[B, H, S, Dh] too, treating the leading axes as batches"
        ),
    ),
    (
        r"too many indices for tensor of dimension (\d+)",
        _said("the code indexes more axes than the tensor's {0}"),
    ),
    (r"expected scalar type (\w+) but found (\w+)", _dtypes),
    (r"expected m1 and m2 to have the same dtype, but got: (\w+) != (\w+)", _dtypes),
    (
        (
            r"(?:mat1 and mat2|self and mat2) must have the same dtype, but got (\w+) "
            r"and (\w+)"
        ),
        _dtypes,
    ),
    (
        r"argument '(\w+)' \(position (\d+)\) must be (\w+), not (\w+)",
        lambda m: (
            f"`{m[1]}` (argument {m[2]} of that function) received {_a(m[4])} where "
            f"{_a(m[3])} belongs: check which of your values the call passes there"
        ),
    ),
    (
        (
            r"Invalid rank (\d+), rank should be in the interval \[0, (-?\d+)\]"
            r"(?:.*?\brank=(\d+), world_size=(\d+))?"
        ),
        _sampler,
    ),
    (
        r"Torch not compiled with CUDA enabled|Found no NVIDIA driver",
        _said(
            "the code asked for a CUDA device on a machine that has none (a .cuda() "
            "or device='cuda' written in): put new tensors on the device of the ones "
            "it was given, .to(x.device)"
        ),
    ),
    (
        r"sampler option is mutually exclusive with shuffle",
        _said(
            "a DataLoader shuffles itself (shuffle=True) or follows a sampler, not "
            "both: a DistributedSampler shuffles, so the loader takes no shuffle"
        ),
    ),
    (
        r"(\w+)\(\) missing (\d+) required positional arguments?: (.+?)(?: at line|$)",
        lambda m: (
            f"the function {m[1]} was called without {m[3]}: whatever called it "
            "passed fewer "
            "arguments than it takes (PyTorch calls a function you hand it with its "
            "own arguments only: LambdaLR calls lr_lambda(step); bind the others, "
            f"lambda step: {m[1]}(step, ...))"
        ),
    ),
    (
        r"0D or 1D target tensor expected, multi-target not supported",
        _said(
            "the target given to cross_entropy must hold one class id per row of "
            "logits, [N]; this one has a second axis"
        ),
    ),
)


def read_plain(message: str) -> list[str]:
    """What each error of ``message`` that needs no sizes says, in plain terms."""
    found = (
        read(m) for pattern, read in _PLAIN for m in [pattern.search(message)] if m
    )
    return [text for text in found if text]


seal(__name__)
