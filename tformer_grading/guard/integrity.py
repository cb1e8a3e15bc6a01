"""Integrity: was the check machinery changed while the learner's notebook ran?

Learner code shares the kernel with the checks. Before every check and every
success line, :func:`integrity_problems` compares what the checks depend on
with what it was when first seen: every module of ``tformer_ref`` and
``tformer_grading`` (globals, functions, methods, and functions against their
source file), the PyTorch and builtin functions a verdict uses, and the IPython
hooks that decide what a cell runs. It only *returns* problems; the checks
raise on them. This stops patching, not a learner who studies this file to
defeat it (see book/instructors.md for what really isolates).

Rules this imposes on the modules it seals: module globals are not rebound
after import (use immutable values), and decorators use ``functools.wraps``.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import contextvars
import inspect
import os
import sys
import types

import torch

PACKAGES = ("tformer_ref", "tformer_grading")
# The modules of tformer_grading.checks that are shared machinery, not one exercise's
# checks (re-exported as tformer_grading.checks.SHARED_MODULES).
SHARED_CHECK_MODULES = frozenset(
    {"blocks", "cases", "delegation", "diagnosis", "flow", "measure", "pieces"}
)
_MISSING = object()
_SEALS: dict[str, _Seal] = {}
# Functions a verdict depends on, captured when this module is imported (before learner
# code runs).
_WATCHED = {
    "torch.allclose": (lambda: torch.allclose, torch.allclose),
    "torch.equal": (lambda: torch.equal, torch.equal),
    "torch.isnan": (lambda: torch.isnan, torch.isnan),
    "torch.Tensor.__torch_function__": (
        lambda: vars(torch.Tensor).get("__torch_function__"),
        vars(torch.Tensor).get("__torch_function__"),
    ),
    "torch.Tensor.allclose": (
        lambda: vars(torch.Tensor).get("allclose", _MISSING),
        vars(torch.Tensor).get("allclose", _MISSING),
    ),
    **{
        f"builtins.{n}": (lambda n=n: getattr(builtins, n), getattr(builtins, n))
        for n in (
            "isinstance",
            "print",
            "len",
            "all",
            "any",
            "zip",
            "type",
            "getattr",
            "hasattr",
            "__import__",
        )
    },
    "sys.setprofile": (lambda: sys.setprofile, sys.setprofile),
}
_SHELL_METHODS = (
    "run_cell",
    "run_cell_async",
    "run_ast_nodes",
    "run_code",
    "transform_cell",
    "showtraceback",
    "_showtraceback",
    "should_run_async",
    "custom_exceptions",
    "CustomTB",
)
_TRANSFORMERS = (
    "ast_transformers",
    "input_transformers_post",
    "input_transformers_cleanup",
)


def _shell():
    ipython = sys.modules.get("IPython")
    return getattr(ipython, "get_ipython", lambda: None)() if ipython else None


def _shell_state() -> dict | None:
    """The IPython hooks that decide what a cell runs and whether its error counts."""
    shell = _shell()
    if shell is None:
        return None
    state = {m: vars(shell).get(m, _MISSING) for m in _SHELL_METHODS}
    for name in _TRANSFORMERS:
        state[name] = tuple(getattr(shell, name, ()))
    return state


def _compiled_functions(path: str) -> tuple[ast.Module, dict[str, types.CodeType]]:
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    codes: dict[str, types.CodeType] = {}

    def walk(c: types.CodeType) -> None:
        for const in c.co_consts:
            if isinstance(const, types.CodeType):
                codes.setdefault(getattr(const, "co_qualname", const.co_name), const)
                walk(const)

    walk(compile(tree, path, "exec", dont_inherit=True))
    return tree, codes


def _differs_from_file(module, name: str, path: str, codes: dict) -> bool:
    fn = getattr(module, name, _MISSING)
    try:
        fn = inspect.unwrap(fn)  # decorators must use functools.wraps
    except ValueError:
        pass
    if fn is _MISSING:
        return True
    if not isinstance(fn, types.FunctionType):
        return not callable(
            fn
        )  # e.g. a torch.jit function: not comparable, not flagged
    if fn.__code__.co_filename == path:
        return fn.__code__ != codes.get(name)
    # Code from elsewhere: a notebook's function, or a library decorator without
    # functools.wraps.
    return (
        fn.__module__
        in ("__main__", None, module.__name__)  # swapped code claims this module
        or fn.__code__.co_filename.startswith("<")
    )


def _disk_problems(module: types.ModuleType) -> list[str]:
    """Functions of ``module`` whose code differs from its source file (patched before
    or while importing)."""
    path = getattr(module, "__file__", None)
    if not path or not path.endswith(".py"):
        return []
    try:
        tree, codes = _compiled_functions(path)
    except (OSError, SyntaxError, ValueError):
        return [f"{module.__name__} cannot be read back from {path}"]
    return [
        f"{module.__name__}.{node.name} is not the function in {os.path.basename(path)}"
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and _differs_from_file(module, node.name, path, codes)
    ]


class _Seal:
    """A module's globals, functions and methods as first seen, for identity
    comparison."""

    def __init__(self, module: types.ModuleType):
        self.module, self.name = module, module.__name__
        self.values = {k: v for k, v in vars(module).items() if not k.startswith("__")}
        self.functions = {
            k: (v, v.__code__, v.__defaults__, v.__kwdefaults__)
            for k, v in self.values.items()
            if isinstance(v, types.FunctionType)
        }
        self.methods = {
            (k, m): f
            for k, cls in self.values.items()
            if isinstance(cls, type) and cls.__module__ == self.name
            for m, f in vars(cls).items()
            if isinstance(f, types.FunctionType)
        }
        self.problems = _disk_problems(module)

    def compare(self) -> list[str]:
        out = list(self.problems)
        if sys.modules.get(self.name) is not self.module:
            out.append(f"sys.modules['{self.name}'] was replaced")
        now = vars(self.module)
        out += [
            f"{self.name}.{k} was replaced"
            for k, v in self.values.items()
            if now.get(k, _MISSING) is not v
        ]
        out += [
            f"{self.name}.{k} was modified in place"
            for k, (fn, code, d, kd) in self.functions.items()
            if (fn.__code__, fn.__defaults__, fn.__kwdefaults__) != (code, d, kd)
            or fn.__code__ is not code
        ]
        out += [
            f"{self.name}.{k}.{m} was replaced"
            for (k, m), f in self.methods.items()
            if vars(self.values[k]).get(m, _MISSING) is not f
        ]
        return out


_TRUSTED: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "tformer_trusted", default=False
)


@contextlib.contextmanager
def trusted_process():
    """Within it, :func:`integrity_problems` finds none and takes no seal: for the
    judge's run of the checks (:mod:`tformer_grading.judge`), in the grader's own
    process, where no learner code runs and so nothing can patch them. Sealing the
    modules first seen there would cost the judge about 0.2 s a notebook."""
    token = _TRUSTED.set(True)
    try:
        yield
    finally:
        _TRUSTED.reset(token)


def seal(name: str) -> None:
    """Record module ``name`` as it is now; :func:`integrity_problems` then reports any
    change.

    Check modules call ``seal(__name__)`` as their last line, so they are recorded
    before any learner code runs. Modules that do not are sealed when first seen, and
    still compared with their source file.
    """
    if name not in _SEALS and sys.modules.get(name) is not None:
        _SEALS[name] = _Seal(sys.modules[name])


def _ipython_problems() -> list[str]:
    """IPython hooks changed since this module was imported (the setup cell), and
    transformers that are not IPython's own (a transformer can rewrite the test cells
    before they run)."""
    now = _shell_state()
    if now is None or _SHELL_AT_IMPORT is None:
        return []
    out = [
        f"the IPython shell's {name} was changed"
        for name, value in now.items()
        if value is not _SHELL_AT_IMPORT.get(name, _MISSING)
        and not (isinstance(value, tuple) and value == _SHELL_AT_IMPORT.get(name))
    ]
    for fn in (fn for name in _TRANSFORMERS for fn in now[name]):
        if not getattr(fn, "__module__", "").startswith(("IPython.", "ipykernel.")):
            out.append(
                f"an IPython transformer from {getattr(fn, '__module__', '?')} was "
                "registered"
            )
    return out


_SHELL_AT_IMPORT = _shell_state()


def _looks_like_checks(value) -> bool:
    try:
        return isinstance(value, types.ModuleType) or any(
            n.startswith("check_") for n in dir(value)
        )
    except Exception:  # noqa: BLE001 - a hostile object's __dir__
        return True


def _main_problems() -> list[str]:
    """A global of the notebook named like a chapter's check module (``ch01``) must be
    that module."""
    namespaces = [vars(sys.modules.get("__main__", types.ModuleType("__main__")))]
    shell = _shell()
    if shell is not None:
        namespaces.append(shell.user_ns)
    out = []
    for name, seal_ in list(_SEALS.items()):
        short = name.rsplit(".", 1)[-1]
        # Test cells reach the checks through the names of the exercise modules only
        # (`ch01`, `bughunt_attention`, `own_model`, ...); the shared machinery's short
        # names (`blocks`, `cases`) a learner may well use for their own imports.
        if (
            name.count(".") != 2  # the measuring toolkit's modules lie deeper
            or not name.startswith("tformer_grading.checks.")
            or short in SHARED_CHECK_MODULES
        ):
            continue
        for ns in namespaces:
            value = ns.get(short, _MISSING)
            if (
                value is not _MISSING
                and value is not seal_.module
                and _looks_like_checks(value)
            ):
                out.append(f"the notebook's '{short}' is not {name}")
    return out


def _ours(name: str) -> bool:
    # The judge's side in the kernel (tformer_grading.judge) is not sealed: no check
    # depends on it, and the judge trusts nothing it answers (a notebook that replaces
    # it only loses the points the judge could then not measure).
    if name == "tformer_grading.judge" or name.startswith("tformer_grading.judge."):
        return False
    return any(name == p or name.startswith(p + ".") for p in PACKAGES)


def integrity_problems() -> list[str]:
    """Everything changed in the check machinery since it was first seen; empty when
    intact (or in :func:`trusted_process`)."""
    if _TRUSTED.get():
        return []
    for name, module in list(sys.modules.items()):
        if (
            _ours(name)
            and name not in _SEALS
            and module is not None
            and not getattr(getattr(module, "__spec__", None), "_initializing", False)
        ):
            seal(name)
    problems = [p for s in list(_SEALS.values()) for p in s.compare()]
    problems += [
        f"{name} was replaced"
        for name, (now, then) in _WATCHED.items()
        if now() is not then
    ]
    problems += _ipython_problems() + _main_problems()
    return list(dict.fromkeys(problems))


seal(__name__)
