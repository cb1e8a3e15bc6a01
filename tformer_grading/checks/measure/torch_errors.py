"""PyTorch's size errors, read in a case's sizes: what each number of a crash is.

:func:`explain` finds PyTorch's size errors in a failure's message (and the checks' own
"expected shape [...], got [...]"), reads the case's sizes from the same message
(:mod:`.sizes`), and says what each number is: what was measured ("5 (Sq) against 7
(Sk)"), never which one the code meant. :func:`..diagnosis.fail` adds it to every
failure.

Examples::

    >>> print(explain(
    ...     "raised RuntimeError: shape '[2, 5, 512]' is invalid for input of size 120 "
    ...     "while the check ran case x [B=2, S=5, H=3, Dh=4]"))
    The numbers, in this case's sizes (B=2, S=5, H=3, Dh=4): the reshape asks for
    [2, 5, 512] = [B, S, 512] of 120 = B·S·H·Dh elements. 512 is none of the sizes
    named here, nor a product of them.
    >>> print(explain(                   # a causal mask cut from a buffer of 512
    ...     "causal_mask(1100) raised RuntimeError: shape '[1, 1, 1100, 1100]' is "
    ...     "invalid for input of size 262144 for S=1100"))
    The numbers, in this case's sizes (S=1100): the reshape asks for
    [1, 1, 1100, 1100] = [1, 1, S, S] of 262144 = 512² elements. 512 is none of the
    sizes named here, nor a product of them.
    >>> print(explain(
    ...     "The size of tensor a (5) must match the size of tensor b (7) at "
    ...     "non-singleton dimension 3 on case q [B=2, H=3, Sq=5, Dh=4], Sk=7"))
    The numbers, in this case's sizes (B=2, H=3, Sq=5, Dh=4, Sk=7): two tensors met
    with 5 (Sq) against 7 (Sk) on their axis 3.
    >>> explain("an error with no sizes named")
    ''
"""

from __future__ import annotations

import re

from ...guard.integrity import seal
from .plain_errors import read_plain, table
from .sizes import Sizes


def _ints(text: str) -> list[int]:
    return [int(n) for n in re.findall(r"-?\d+", text)]


# A reader gets the case's sizes and PyTorch's match; it returns what it says and the
# numbers in it that should be sizes (those that are none are said once, after).
def _reshape(sizes: Sizes, m: re.Match) -> tuple[str, list[int]]:
    asked, total = _ints(m[1]), int(m[2])
    of, constant = sizes.count(total, seen=asked)
    elements = f"{total} = {of}" if of else str(total)
    return (
        f"the reshape asks for [{m[1]}] = {sizes.shape(asked)} of {elements} elements",
        [n for n in asked if n >= 0] + ([constant] if constant else []),
    )


def _against(text: str, counts: bool = False):
    """A reader of two sizes that should agree (groups ``a``, ``b``, and others);
    with ``counts``, two counts of rows, each any product of the sizes (a flattened
    [B, T] is B·T rows, whatever the sizes' order in the case's label)."""

    def read(sizes: Sizes, m: re.Match) -> tuple[str, list[int]]:
        a, b = int(m["a"]), int(m["b"])
        named = {"a": sizes.number(a, counts), "b": sizes.number(b, counts)}
        said = text.format(**{**m.groupdict(), **named})
        # A count read as a product of sizes is no unknown number.
        read_as = [n for n in (a, b) if counts and sizes.name(n, any_product=True)]
        return said, [n for n in (a, b) if n not in read_as]

    return read


def _shapes(text: str):
    """A reader of the shapes in groups ``got`` and, where there is one, ``want``."""

    def read(sizes: Sizes, m: re.Match) -> tuple[str, list[int]]:
        shapes = {k: _ints(v) for k, v in m.groupdict().items() if k in ("want", "got")}
        # the error may name the axes it expects: B where B == H reads "H or B"
        layout = (m.groupdict().get("layout") or "").split(", ")
        named = {
            k: sizes.shape(v, layout if k == "want" else []) for k, v in shapes.items()
        }
        if m.groupdict().get("names"):  # the check named the expected axes itself
            named["want"] = f"[{m['names']}]"
            shapes.pop("want")
        return text.format(**named), [n for v in shapes.values() for n in v]

    return read


def _split(sizes: Sizes, m: re.Match) -> tuple[str, list[int]]:
    asked, axis = _ints(m[1]), int(m[3])
    return (
        f"the sizes {sizes.shape(asked)} are asked of an axis of {sizes.number(axis)}",
        [n for n in asked if n >= 0] + [axis],
    )


def _index(sizes: Sizes, m: re.Match) -> tuple[str, list[int]]:
    size = int(m["b"])
    said = f"index {m['index']} on axis {m['axis']}, of size {sizes.number(size)}"
    return said, [size]


def _call(sizes: Sizes, m: re.Match) -> tuple[str, list[int]]:
    """The call a crash came from (:mod:`.failing_call`), its shapes and indices in
    the case's sizes: "matmul of [B, H, Sq, Dh] and [Dh, Sk, H, B]"."""

    def name(shape: re.Match) -> str:
        # A shape some of whose numbers are several sizes at once reads no better
        # than its numbers (a case with B == H): it is left as it is.
        named = sizes.shape(_ints(shape[1]))
        return shape[0] if " or " in named else named

    said = re.sub(r"\[(\d+(?:, \d+)*)\]", name, m["call"])
    return ("" if said == m["call"] else f"the call that raised was {said}"), []


_SIZES = r"\[(?P<{}>[\d, ]*)\]"

# PyTorch's size errors (2.x wording): a pattern, and the reader of its numbers.
_SIZE_ERRORS = table(
    (r"shape '\[([-\d, ]+)\]' is invalid for input of size (\d+)", _reshape),
    (
        (
            r"size of tensor a \((?P<a>\d+)\) must match the size of tensor b "
            r"\((?P<b>\d+)\) at non-singleton dimension (?P<axis>\d+)"
        ),
        _against("two tensors met with {a} against {b} on their axis {axis}"),
    ),
    (
        (
            r"shapes cannot be multiplied \((?P<rows>\d+)x(?P<a>\d+) and "
            r"(?P<b>\d+)x(?P<cols>\d+)\)"
        ),
        _against(
            "a matrix product of [{rows}, ..] by [.., {cols}] needs the inner sizes to "
            "agree, and they are {a} and {b}"
        ),
    ),
    (
        r"Expected size for first two dimensions of batch2 tensor to be: "
        + _SIZES.format("want")
        + r" but got: "
        + _SIZES.format("got"),
        _shapes(
            "for the first two axes of a batched product's second operand {want} was "
            "expected and {got} came"
        ),
    ),
    (
        r"Expected target size "
        + _SIZES.format("want")
        + ", got "
        + _SIZES.format("got"),
        _shapes("for the target, {want} was expected and {got} came"),
    ),
    (
        (
            r"except in dimension (?P<axis>\d+)\. Expected size (?P<a>\d+) but got "
            r"size (?P<b>\d+)"
        ),
        _against("the tensors joined differ off axis {axis}: {a} against {b}"),
    ),
    (
        r"stack expects each tensor to be equal size, but got "
        + _SIZES.format("want")
        + r" at entry \d+ and "
        + _SIZES.format("got"),
        _shapes("the tensors stacked have shapes {want} and {got}"),
    ),
    (
        (
            r"Provided sizes \[([-\d, ]+)\] don't multiply up to the size of dim (\d+) "
            r"\((\d+)\)"
        ),
        _split,
    ),
    (
        r"Given normalized_shape=" + _SIZES.format("want") + r", expected input with "
        r"shape \[\*, [\d, ]*\], but got input of size\s?" + _SIZES.format("got"),
        _shapes("a LayerNorm over {want} was given an input of shape {got}"),
    ),
    (
        (
            r"Expected input batch_size \((?P<a>\d+)\) to match target batch_size "
            r"\((?P<b>\d+)\)"
        ),
        _against("cross_entropy was given {a} rows of logits and {b} targets", True),
    ),
    (
        (
            r"index (?P<index>-?\d+) is out of bounds for dimension (?P<axis>\d+) with "
            r"size (?P<b>\d+)"
        ),
        _index,
    ),
    (
        (
            r"expanded size of the tensor \((?P<a>\d+)\) must match the existing size "
            r"\((?P<b>\d+)\) at non-singleton dimension (?P<axis>\d+)"
        ),
        _against("expand asks for {a} on axis {axis}, where the tensor has {b}"),
    ),
    (
        r"shape of the mask " + _SIZES.format("want") + r" at index (?P<axis>\d+) "
        r"does not match the shape of the indexed tensor " + _SIZES.format("got"),
        _shapes("a boolean mask of shape {want} indexes a tensor of shape {got}"),
    ),
    (
        (
            r"subscript (?P<letter>\w) has size (?P<a>\d+) for operand (?P<op>\d+) "
            r"which does not broadcast with previously seen size (?P<b>\d+)"
        ),
        _against("einsum's letter {letter} is {a} in operand {op} but {b} before"),
    ),
    (  # the course's reference, on a mask or an input of the wrong shape
        r"broadcastable to \[(?P<layout>B, H, Sq, Sk)\] = "
        + _SIZES.format("want")
        + r"[^(]*"
        r"got shape \((?P<got>[\d, ]*)\)",
        _shapes("the mask is {got} where attention's weights are {want}"),
    ),
    (
        r"expected a tensor \[[^\]]*\], got shape \((?P<got>[\d, ]*)\)",
        _shapes("the tensor given has shape {got}"),
    ),
)

# The wrong shapes the checks report themselves: read the same way.
_SHAPE_REPORTS = table(
    (
        r"expected shape " + _SIZES.format("want") + ", got " + _SIZES.format("got"),
        _shapes("yours is {got} where {want} is expected"),
    ),
    (  # "has shape [2, 3, 20]; expected [B, S, D] = [2, 4, 15]" too
        r"ha(?:s|ve) shape "
        + _SIZES.format("got")
        + r"[,;] expected (?:\[(?P<names>[A-Za-z_, ·]*)\] = )?"
        + _SIZES.format("want"),
        _shapes("yours is {got} where {want} is expected"),
    ),
)


# The call a crash came from (:mod:`.failing_call`): read in sizes, not a size error.
_CALLS = table((r"\(the call that raised: (?P<call>(?:[^()]|\([^()]*\))*)\)", _call))


def holds_size_error(message: str) -> bool:
    """``message`` holds a PyTorch size error :func:`explain` knows, read or not.

    >>> holds_size_error("shape '[2, 512]' is invalid for input of size 10")
    True
    """
    return any(p.search(message) for p, _ in _SIZE_ERRORS) or bool(read_plain(message))


def explain(message: str) -> str:
    """What the numbers of the size errors in ``message`` are, in the sizes it names;
    "" when it holds no size error this module can read."""
    sizes = Sizes.read(message)
    said, unknown = [], []
    readers = _SIZE_ERRORS + _SHAPE_REPORTS + _CALLS
    for pattern, read in readers if sizes.decodable else ():
        m = pattern.search(message)
        if m:
            text, numbers = read(sizes, m)
            said += [text] if text else []
            unknown += [n for n in numbers if n >= 2 and sizes.name(n) is None]
    plain = read_plain(message)
    out = []
    if said:
        out.append(f"The numbers, in this case's sizes ({sizes}): {'; '.join(said)}.")
    # A sum or a double of two sizes may be chance (a hard-coded 32 where D = 16): it
    # is said as what it may be, after the fact that no size is the number.
    related = {n: sizes.relation(n) for n in dict.fromkeys(unknown)}
    if related:
        listed = " and ".join(str(n) for n in related)
        verb = "is" if len(related) == 1 else "are"
        maybe = [
            f"{'it' if len(related) == 1 else n} may be {r}"
            for n, r in related.items()
            if r
        ]
        # "a product" only when no sizes, adjacent or not, multiply to it (10 = H·S
        # is no axis a reshape merges, but it is a product)
        none_multiply = all(sizes.name(n, any_product=True) is None for n in related)
        out.append(
            f"{listed} {verb} none of the sizes named here"
            + (", nor a product of them" if none_multiply else "")
            + (f"; {' and '.join(maybe)}." if maybe else ".")
        )
    out += [f"{text[0].upper()}{text[1:]}." for text in plain]
    return " ".join(out)


seal(__name__)
