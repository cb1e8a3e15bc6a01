"""A graded test cell read as the check calls the judge makes for it.

A test cell is the instructor's (nbgrader puts its source back from the gradebook),
and reads like ``ch03.check_causal_mask(causal_mask)``. The judge does not run its
source: it reads it, and only a cell made of calls to checks it knows
(:mod:`.registry`), with arguments that are names of the notebook, constants, tuples
and lists of them, or a few tensor constructors (``torch.randn(2, 3)``), is judged.
A cell with anything else is not (:func:`plan` gives None), and is graded in the
kernel as before. So a learner who makes a cell look like a test cell gets nothing
run by the judge but the course's checks. Reading a cell imports nothing heavy: the
grader reads a notebook's cells before it loads the checks.

    >>> [(c.name, c.args) for c in plan("ch03.check_causal_mask(causal_mask)  # why")]
    [('ch03.check_causal_mask', (Name('causal_mask'),))]
    >>> plan("import os; ch03.check_causal_mask(causal_mask)") is None
    True
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field, replace

from .registry import BEHAVIOUR, OBSERVATION

_CONSTRUCTORS = {"randn", "rand", "randint", "tensor", "ones", "zeros", "arange"}


@dataclass(frozen=True)
class Name:
    """A name of the notebook, looked up in the kernel."""

    name: str

    def __repr__(self) -> str:
        return f"Name({self.name!r})"


@dataclass(frozen=True)
class Call:
    """One check call of a test cell, its arguments read from the source."""

    module: str
    check: str
    args: tuple
    kwargs: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.module}.{self.check}"


class _NotJudged(Exception):
    pass


def plan(
    source: str, behaviour=BEHAVIOUR, observation=OBSERVATION
) -> list[Call] | None:
    """The check calls the judge makes for a test cell, or None when it does not
    judge it: every call in ``source`` must be to a check of ``behaviour`` (run as
    written) or ``observation`` (left to the kernel, or replaced by the behaviour
    check it names), and one at least must be measured."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    try:
        calls = [_statement(s) for s in tree.body]
    except _NotJudged:
        return None
    judged = []
    for call in calls:
        if call.name in behaviour:
            judged.append(call)
        elif call.name not in observation:
            return None
        elif observation[call.name] is not None:
            module, check = observation[call.name].split(".")
            judged.append(replace(call, module=module, check=check))
    return judged or None


def _statement(node: ast.stmt) -> Call:
    if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)):
        raise _NotJudged
    call = node.value
    target = call.func
    if not (
        isinstance(target, ast.Attribute)
        and isinstance(target.value, ast.Name)
        and target.attr.startswith("check_")
    ):
        raise _NotJudged
    if any(k.arg is None for k in call.keywords):
        raise _NotJudged
    return Call(
        target.value.id,
        target.attr,
        tuple(_argument(a) for a in call.args),
        {k.arg: _argument(k.value) for k in call.keywords},
    )


def _argument(node: ast.expr):
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return Name(node.id)
    if isinstance(node, (ast.Tuple, ast.List)):
        items = [_argument(e) for e in node.elts]
        return tuple(items) if isinstance(node, ast.Tuple) else items
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        value = _argument(node.operand)
        if isinstance(value, (int, float)):
            return -value
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "torch"
        and node.func.attr in _CONSTRUCTORS
        and not node.keywords
    ):
        args = [_argument(a) for a in node.args]
        if all(isinstance(a, (int, float, list, tuple)) for a in args):
            return Made(node.func.attr, tuple(args))
    raise _NotJudged


@dataclass(frozen=True)
class Made:
    """A tensor the judge makes itself, ``torch.<fn>(*args)``."""

    fn: str
    args: tuple
