"""One diagnosis per submission: a check that fails because an earlier piece of the
learner's notebook is wrong says so, and names that piece.

A notebook's exercises build on each other: ``MultiHeadAttention`` calls the learner's
``split_heads``, a training step calls their ``shift_targets``. When ``split_heads``
fails its own check, the attention's check fails too, and diagnosing the attention
again sends the learner to the wrong cell. :func:`one_diagnosis` wraps each check a
test cell calls: it remembers the code of every piece whose check failed, and when a
later check fails *and ran that code* (recorded with ``sys.settrace`` while the
check runs, only while some piece has failed), its message starts by naming the
piece. Running the code is the observation; a piece the later check never ran is not
named. A piece whose check passes again is forgotten.

Example (a split that forgets the transpose, then an attention that calls it)::

    >>> import torch
    >>> from tformer_grading.checks import ch01
    >>> forget()  # a fresh notebook
    >>> def split_heads(x, n_heads):
    ...     b, s, d = x.shape
    ...     return x.reshape(b, n_heads, s, d // n_heads)  # no transpose
    >>> try:
    ...     ch01.check_split_heads(split_heads)
    ... except AssertionError:
    ...     pass
    >>> failed_pieces()
    ['split_heads']
"""

from __future__ import annotations

import functools
import inspect
import sys
import types
from collections.abc import Callable
from typing import Any

from ..guard.integrity import seal
from .diagnosis import CheckFailure

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True

# check -> (the piece's name, the code objects of the learner's piece it failed on).
_FAILED: dict[str, tuple[str, frozenset]] = {}
_DEPTH = [0]  # a check that another check calls is the caller's business


def _codes(value: Any) -> frozenset:
    """The code objects a learner's function or class runs (methods, properties,
    nested functions); none for anything else."""
    if isinstance(value, types.MethodType):
        value = value.__func__
    if isinstance(value, types.FunctionType):
        code = value.__code__
        nested = [c for c in code.co_consts if isinstance(c, types.CodeType)]
        return frozenset([code, *nested])
    if inspect.isclass(value):
        found: set = set()
        for cls in value.__mro__:
            if cls.__module__.split(".")[0] in ("torch", "builtins", "tformer_ref"):
                continue
            for item in vars(cls).values():
                item = getattr(item, "__func__", item)  # staticmethod, classmethod
                if isinstance(item, property):
                    item = item.fget
                found |= _codes(item) if callable(item) else set()
        return frozenset(found)
    return frozenset()


def _piece(args: tuple) -> tuple[str, frozenset]:
    """The name and code of what a check was given: every function or class among its
    arguments (a check of ``noam`` gets two functions)."""
    given = [a for a in args if isinstance(a, types.FunctionType) or inspect.isclass(a)]
    codes = frozenset().union(*(_codes(a) for a in given))
    return " and ".join(a.__name__ for a in given), codes


def failed_pieces() -> list[str]:
    """The names of the pieces whose last check failed, in the order they failed."""
    return [name for name, _ in _FAILED.values()]


def forget() -> None:
    """Forget every failed piece (a new notebook, or a test of its own)."""
    _FAILED.clear()


def _watching(codes: frozenset, seen: set) -> Callable:
    # A global trace function runs on each Python call only (a profile function
    # also on every C call: the own model's check took 11 % longer). It traces no
    # lines (returns None), and stops once every piece watched has run.
    def trace(frame, event, arg):
        if frame.f_code in codes:
            seen.add(frame.f_code)
            if seen >= codes:
                sys.settrace(None)

    return trace


def _named(failure: CheckFailure, pieces: list[str]) -> CheckFailure:
    """``failure`` with the earlier pieces it ran named first."""
    text, title = str(failure), failure.title or ""
    rest = text[len(title) + 2 :] if title and text.startswith(f"{title}: ") else text
    if len(pieces) == 1:
        said = (
            f"your {pieces[0]} failed its own check (its test cell above) and ran in "
            f"this one: fix {pieces[0]} first; what follows may come from it."
        )
    else:
        said = (
            f"your {' and your '.join(pieces)} failed their own checks (their test "
            "cells above) and ran in this one: fix them first; what follows may come "
            "from them."
        )
    said = f"{said} {rest[:1].upper()}{rest[1:]}"
    return CheckFailure(
        f"{title}: {said}" if title else said,
        title=failure.title,
        section=failure.section,
    )


def one_diagnosis(check: Callable) -> Callable:
    """Wrap a check a test cell calls (see the module's docstring)."""

    @functools.wraps(check)
    def run(*args, **kwargs):
        if _DEPTH[0]:
            return check(*args, **kwargs)
        key = f"{check.__module__}.{check.__qualname__}"
        name, mine = _piece(args)
        earlier = {
            k: (n, c) for k, (n, c) in _FAILED.items() if k != key and not c & mine
        }
        codes = frozenset().union(*(c for _, c in earlier.values()))
        seen: set = set()
        old = sys.gettrace()
        _DEPTH[0] += 1
        if codes:
            sys.settrace(_watching(codes, seen))
        try:
            result = check(*args, **kwargs)
        except CheckFailure as failure:
            if mine:
                _FAILED[key] = (name, mine)
            ran = [n for n, c in earlier.values() if c & seen]
            if ran:
                raise _named(failure, ran) from None
            raise
        finally:
            if codes:
                sys.settrace(old)
            _DEPTH[0] -= 1
        _FAILED.pop(key, None)
        return result

    return run


def wrap_checks(namespace: dict) -> None:
    """Wrap every ``check_*`` function of a module's namespace (called by each module
    a test cell imports, before it is sealed)."""
    for name, value in list(namespace.items()):
        wrapped = getattr(value, "_one_diagnosis", False)
        if name.startswith("check_") and callable(value) and not wrapped:
            namespace[name] = one_diagnosis(value)
            namespace[name]._one_diagnosis = True


seal(__name__)
