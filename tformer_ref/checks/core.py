"""The machinery every exercise check is built from.

A check runs the learner's code on several cases, compares each output with
the reference, and on a mismatch runs the *known wrong variants* (pitfalls) on
the same cases: when one of them reproduces the learner's output, the failure
names that pitfall and the lesson section that explains it. Otherwise it reports
the case, the shapes, the largest difference and where it is.

A check prints one line on success and raises :class:`CheckFailure` (an
``AssertionError``, so nbgrader marks the cell failed) on failure. It never
writes to stderr: nbgrader gives a test cell zero points when it does.

Grading guards (see book/instructors.md, "Hostile submissions"): learner code
runs in the same Python process as the checks, so before every check and every
success line the check machinery verifies it has not been patched
(:func:`verify_integrity`), and while grading each success line carries a
receipt signed with a key only the grader knows, which
``tformer_ref.grading.GuardedExecute`` verifies outside the kernel. Neither
makes the kernel a sandbox; they stop the easy ways to fake a pass.
"""
from __future__ import annotations

import ast
import builtins
import contextlib
import functools
import hashlib
import hmac
import inspect
import io
import os
import sys
import types
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_CHECKS_DIR = os.path.dirname(os.path.abspath(__file__))
# Reference code a learner may call freely inside an exercise (it teaches nothing the exercise asks for).
# Immutable on purpose: integrity checks compare module globals by identity, which cannot see a set mutated in place.
_ALLOWED_FILES = frozenset({os.path.join(_PACKAGE_DIR, "device.py")})


class CheckFailure(AssertionError):
    """A check found a mistake. The message says which, and where to read about it."""


@dataclass(frozen=True)
class Section:
    """A place in the book: lesson ``chapter`` (its folder under ``book/``), section ``number``."""

    chapter: str
    number: str
    title: str

    def __str__(self) -> str:
        return f"§{self.number} '{self.title}' in book/{self.chapter}/lesson.ipynb"


@dataclass(frozen=True)
class Pitfall:
    """A known wrong variant of a reference function.

    ``impl`` takes the same arguments as the reference; when it reproduces a
    learner's outputs on every case, ``explanation`` is what the learner reads.
    """

    name: str
    explanation: str
    section: Section
    impl: Callable[..., Any]


@dataclass(frozen=True)
class Case:
    """One input to try. ``make`` builds fresh arguments each call (learners may modify inputs in place)."""

    label: str
    make: Callable[[], tuple]


class _Raised:
    def __init__(self, exc: BaseException):
        self.exc = exc

    def __repr__(self) -> str:
        return f"{type(self.exc).__name__}: {self.exc}"


def fail(title: str, message: str, section: Section | None = None) -> None:
    """Raise a :class:`CheckFailure` formatted the same way everywhere."""
    text = f"{title}: {message}"
    if section is not None:
        text += f"\n    Read {section}."
    raise CheckFailure(text)


# ---------------------------------------------------------------------------
# Receipts: while grading, a success line is signed with a key the grader put in the
# kernel's environment. The grader (tformer_ref.grading) counts the valid receipts of each
# test cell outside the kernel, so a test cell whose checks were skipped, replaced or
# silenced scores zero even though it raised nothing.

GRADING_KEY_ENV = "TFORMER_REF_GRADING_KEY"
RECEIPT_PATTERN = r"^(✓ .*?)  \[grader receipt (\d+):([0-9a-f]{16})\]$"


def receipt_mac(key: str, number: int, line: str) -> str:
    """The 16 hex digits that sign success line ``line``, the ``number``-th of the kernel."""
    return hmac.new(key.encode(), f"{number}|{line}".encode(), hashlib.sha256).hexdigest()[:16]


def _make_signer() -> Callable[[str], str]:
    # Read once and removed from os.environ, so code that runs later does not find it there.
    key = os.environ.pop(GRADING_KEY_ENV, "")
    count = [0]

    def sign(line: str) -> str:
        if not key:
            return line
        count[0] += 1
        return f"{line}  [grader receipt {count[0]}:{receipt_mac(key, count[0], line)}]"

    return sign


_sign = _make_signer()


def passed(title: str, detail: str) -> None:
    """Print the success line of a check (signed while grading), after verifying nothing was patched."""
    __tracebackhide__ = True
    verify_integrity()
    print(_sign(f"✓ {title}: {detail}"))


@contextlib.contextmanager
def single_thread():
    """Tiny tensors gain nothing from intra-op threads, and on a busy machine the threads' spin-waits
    make every small op ten times slower: run the many small comparisons on one thread."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def single_threaded(check: Callable) -> Callable:
    """Decorator: run a whole check on one thread (see :func:`single_thread`)."""
    @functools.wraps(check)
    def run(*args, **kwargs):
        __tracebackhide__ = True
        with single_thread():
            return check(*args, **kwargs)
    return run


@contextlib.contextmanager
def _quiet():
    """Run learner code without letting it reach stderr: nbgrader zeroes a test cell that writes there,
    even when the answer is right. Warnings are ignored and stderr writes discarded."""
    with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


def _run(fn: Callable, args: tuple) -> Any:
    """Call ``fn``; an exception becomes a value so that variants can be compared on it too."""
    with _quiet():
        try:
            return fn(*args)
        except CheckFailure:
            raise
        except Exception as exc:  # the learner's code may raise anything
            return _Raised(exc)


# ---------------------------------------------------------------------------
# Integrity: learner code shares the kernel with the checks. Every check first verifies
# that no tformer_ref module, no function the verdict depends on and no IPython hook was
# changed. This stops patching, not a learner who studies this file to defeat it
# (see book/instructors.md for what really isolates).

_MISSING = object()
_SEALS: dict[str, "_Seal"] = {}
# Functions a verdict depends on, captured when this module is imported (before learner code runs).
_WATCHED = {
    "torch.allclose": (lambda: torch.allclose, torch.allclose),
    "torch.equal": (lambda: torch.equal, torch.equal),
    "torch.isnan": (lambda: torch.isnan, torch.isnan),
    "torch.Tensor.__torch_function__": (lambda: vars(torch.Tensor).get("__torch_function__"),
                                        vars(torch.Tensor).get("__torch_function__")),
    "torch.Tensor.allclose": (lambda: vars(torch.Tensor).get("allclose", _MISSING),
                              vars(torch.Tensor).get("allclose", _MISSING)),
    **{f"builtins.{n}": (lambda n=n: getattr(builtins, n), getattr(builtins, n))
       for n in ("isinstance", "print", "len", "all", "any", "zip", "type", "getattr", "hasattr", "__import__")},
    "sys.setprofile": (lambda: sys.setprofile, sys.setprofile),
}
_SHELL_METHODS = ("run_cell", "run_cell_async", "run_ast_nodes", "run_code", "transform_cell", "showtraceback",
                  "_showtraceback", "should_run_async", "custom_exceptions", "CustomTB")


def _shell_state() -> dict | None:
    """The IPython hooks that decide what a cell runs and whether its error counts."""
    ipython = sys.modules.get("IPython")
    shell = getattr(ipython, "get_ipython", lambda: None)() if ipython else None
    if shell is None:
        return None
    state = {m: vars(shell).get(m, _MISSING) for m in _SHELL_METHODS}
    for name in ("ast_transformers", "input_transformers_post", "input_transformers_cleanup"):
        state[name] = tuple(getattr(shell, name, ()))
    return state


def _disk_problems(module: types.ModuleType) -> list[str]:
    """Functions of ``module`` whose code differs from its source file (patched before or while importing)."""
    path = getattr(module, "__file__", None)
    if not path or not path.endswith(".py"):
        return []
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        code = compile(tree, path, "exec", dont_inherit=True)
    except (OSError, SyntaxError, ValueError):
        return [f"{module.__name__} cannot be read back from {path}"]
    codes: dict[str, types.CodeType] = {}

    def walk(c: types.CodeType) -> None:
        for const in c.co_consts:
            if isinstance(const, types.CodeType):
                codes.setdefault(const.co_qualname, const)
                walk(const)

    walk(code)
    problems = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            fn = getattr(module, node.name, _MISSING)
            try:
                fn = inspect.unwrap(fn)  # decorators must use functools.wraps
            except ValueError:
                pass
            if fn is _MISSING:
                changed = True
            elif not isinstance(fn, types.FunctionType):
                changed = not callable(fn)  # e.g. a torch.jit function: not comparable, not flagged
            elif fn.__code__.co_filename == path:
                changed = fn.__code__ != codes.get(node.name)
            else:  # code from elsewhere: a notebook's function, or a library decorator without functools.wraps
                changed = (fn.__module__ in ("__main__", None, module.__name__)  # swapped code claims this module
                           or fn.__code__.co_filename.startswith("<"))
            if changed:
                problems.append(f"{module.__name__}.{node.name} is not the function in {os.path.basename(path)}")
    return problems


class _Seal:
    """A module's globals, functions and methods as they were when first seen, for identity comparison."""

    def __init__(self, module: types.ModuleType):
        self.module, self.name = module, module.__name__
        self.values = {k: v for k, v in vars(module).items() if not k.startswith("__")}
        self.functions = {k: (v, v.__code__, v.__defaults__, v.__kwdefaults__)
                          for k, v in self.values.items() if isinstance(v, types.FunctionType)}
        self.methods = {(k, m): f for k, cls in self.values.items()
                        if isinstance(cls, type) and cls.__module__ == self.name
                        for m, f in vars(cls).items() if isinstance(f, types.FunctionType)}
        self.problems = _disk_problems(module)

    def compare(self) -> list[str]:
        out = list(self.problems)
        if sys.modules.get(self.name) is not self.module:
            out.append(f"sys.modules['{self.name}'] was replaced")
        now = vars(self.module)
        out += [f"{self.name}.{k} was replaced" for k, v in self.values.items() if now.get(k, _MISSING) is not v]
        out += [f"{self.name}.{k} was modified in place" for k, (fn, code, d, kd) in self.functions.items()
                if (fn.__code__, fn.__defaults__, fn.__kwdefaults__) != (code, d, kd)
                or fn.__code__ is not code]
        out += [f"{self.name}.{k}.{m} was replaced" for (k, m), f in self.methods.items()
                if vars(self.values[k]).get(m, _MISSING) is not f]
        return out


def seal(name: str) -> None:
    """Record module ``name`` as it is now; :func:`verify_integrity` then reports any change to it.
    Check modules call ``seal(__name__)`` as their last line; modules that do not are sealed when
    first seen by :func:`verify_integrity`, still compared with their source file."""
    if name not in _SEALS and sys.modules.get(name) is not None:
        _SEALS[name] = _Seal(sys.modules[name])


def _ipython_problems() -> list[str]:
    """IPython hooks changed since this module was imported (the setup cell), and transformers that are
    not IPython's own (a transformer can rewrite the test cells before they run)."""
    now = _shell_state()
    if now is None or _SHELL_AT_IMPORT is None:
        return []
    out = [f"the IPython shell's {name} was changed" for name, value in now.items()
           if value is not _SHELL_AT_IMPORT.get(name, _MISSING)
           and not (isinstance(value, tuple) and value == _SHELL_AT_IMPORT.get(name))]
    for fn in now["ast_transformers"] + now["input_transformers_post"] + now["input_transformers_cleanup"]:
        if not getattr(fn, "__module__", "").startswith(("IPython.", "ipykernel.")):
            out.append(f"an IPython transformer from {getattr(fn, '__module__', '?')} was registered")
    return out


_SHELL_AT_IMPORT = _shell_state()


def _main_problems() -> list[str]:
    """A global of the notebook named like a check module (``ch01``, ``core``) must be that module."""
    namespaces = [vars(sys.modules.get("__main__", types.ModuleType("__main__")))]
    ipython = sys.modules.get("IPython")
    shell = getattr(ipython, "get_ipython", lambda: None)() if ipython else None
    if shell is not None:
        namespaces.append(shell.user_ns)
    out = []
    for (name, seal_), ns in [(item, ns) for item in _SEALS.items() for ns in namespaces]:
        if not name.startswith(__package__ + "."):
            continue
        short = name.rsplit(".", 1)[1]
        value = ns.get(short, _MISSING)
        if value is _MISSING or value is seal_.module:
            continue
        try:
            looks_like_checks = isinstance(value, types.ModuleType) or any(n.startswith("check_") for n in dir(value))
        except Exception:
            looks_like_checks = True
        if looks_like_checks:
            out.append(f"the notebook's '{short}' is not {name}")
    return out


def integrity_problems() -> list[str]:
    """Everything that was changed in the check machinery since it was imported; empty when intact."""
    for name, module in list(sys.modules.items()):
        if (name == "tformer_ref" or name.startswith("tformer_ref.")) and name not in _SEALS and module is not None:
            if not getattr(getattr(module, "__spec__", None), "_initializing", False):
                seal(name)
    problems = [p for s in list(_SEALS.values()) for p in s.compare()]
    problems += [f"{name} was replaced" for name, (now, then) in _WATCHED.items() if now() is not then]
    problems += _ipython_problems() + _main_problems()
    return list(dict.fromkeys(problems))


def verify_integrity() -> None:
    """Raise :class:`CheckFailure` when the check machinery was patched (no check can be trusted then)."""
    __tracebackhide__ = True
    problems = integrity_problems()
    if problems:
        shown = "; ".join(problems[:4]) + (f"; and {len(problems) - 4} more" if len(problems) > 4 else "")
        raise CheckFailure(
            f"grading integrity: the course's check code was changed while your notebook ran ({shown}). "
            "No check can be trusted after that, so every check from here on fails. Remove the code that "
            "patches tformer_ref, torch or IPython, restart the kernel and run all cells again.")


def describe_difference(got: Any, want: torch.Tensor, atol: float, rtol: float) -> str | None:
    """None when ``got`` equals ``want`` within tolerance, else a sentence saying how it differs."""
    if isinstance(got, _Raised):
        return f"your code raised {got!r}"
    if not isinstance(got, torch.Tensor):
        return f"expected a tensor of shape {list(want.shape)}, got {type(got).__name__}"
    if type(got) not in (torch.Tensor, torch.nn.Parameter):
        # A subclass can override __torch_function__ and make any comparison say "equal".
        return f"expected a plain torch.Tensor, got the tensor subclass {type(got).__name__}"
    if got.shape != want.shape:
        return f"expected shape {list(want.shape)}, got {list(got.shape)}"
    if got.dtype != want.dtype:
        return f"expected dtype {want.dtype}, got {got.dtype}"
    if got.device != want.device:
        return f"expected a tensor on {want.device}, got one on {got.device}"
    got_d, want_d = got.detach(), want.detach()
    nan_got = torch.isnan(got_d)
    if nan_got.any() and not torch.isnan(want_d).any():
        where = tuple(nan_got.nonzero()[0].tolist())
        return f"your output has NaN (first at index {where}) where the reference has none"
    if torch.allclose(got_d, want_d, atol=atol, rtol=rtol, equal_nan=True):
        return None
    diff = (got_d.double() - want_d.double()).abs().nan_to_num(nan=float("inf"))
    idx = tuple(torch.unravel_index(diff.argmax(), diff.shape))
    idx = tuple(int(i) for i in idx)
    return (
        f"values differ: largest difference {diff.max().item():.3g} at index {idx} "
        f"(yours {got_d[idx].item():.6g}, expected {want_d[idx].item():.6g})"
    )


def _same(a: Any, b: Any, atol: float, rtol: float) -> bool:
    if isinstance(a, _Raised) or isinstance(b, _Raised):
        return isinstance(a, _Raised) and isinstance(b, _Raised) and type(a.exc) is type(b.exc)
    return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and describe_difference(a, b, atol, rtol) is None


def compare_to_reference(
    title: str,
    cases: Sequence[Case],
    learner: Callable,
    reference: Callable,
    pitfalls: Sequence[Pitfall] = (),
    atol: float = 1e-5,
    rtol: float = 1e-4,
) -> None:
    """Run ``learner`` and ``reference`` on every case; on a mismatch, name the pitfall that explains it."""
    __tracebackhide__ = True
    verify_integrity()
    ours = [_run(reference, case.make()) for case in cases]
    for case, want in zip(cases, ours):
        if isinstance(want, _Raised):  # a broken case is the course's bug, not the learner's
            raise RuntimeError(f"reference failed on case {case.label}: {want!r}")
    theirs = [_run(learner, case.make()) for case in cases]
    problems = [
        (case, msg)
        for case, got, want in zip(cases, theirs, ours)
        if (msg := describe_difference(got, want, atol, rtol)) is not None
    ]
    if not problems:
        passed(title, f"matches the reference on {len(cases)} cases")
        return
    for pitfall in pitfalls:
        variant = [_run(pitfall.impl, case.make()) for case in cases]
        if all(_same(g, v, atol, rtol) for g, v in zip(theirs, variant)):
            fail(title, f"this looks like the pitfall '{pitfall.name}'. {pitfall.explanation}", pitfall.section)
    case, msg = problems[0]
    fail(
        title,
        f"wrong on {len(problems)} of {len(cases)} cases. First: case {case.label}: {msg}. "
        "It matches none of the known pitfalls; compare your code with the lesson step by step.",
    )


# ---------------------------------------------------------------------------
# Behaviour probes: properties any correct implementation has, whatever its code.


def probe_token_mixing(title: str, fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, section: Section) -> None:
    """Changing token j must change the output at some other position i: attention mixes tokens."""
    __tracebackhide__ = True
    changed = x.clone()
    j = x.size(1) - 1
    changed[:, j] = changed[:, j] + 1.0
    with _quiet():
        base, out = fn(x.clone()).detach(), fn(changed).detach()
    others = [i for i in range(x.size(1)) if i != j]
    if torch.allclose(out[:, others], base[:, others], atol=1e-6):
        fail(
            title,
            f"changing token {j} changed no other position's output, so tokens never exchange information. "
            "The scores must contract over the feature axis and range over key *positions*: "
            "check the axes of your matmul/einsum (the seed's einsum labels the sequence axis as heads).",
            section,
        )


def probe_batch_independence(title: str, fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, section: Section) -> None:
    """Changing batch entry 1 must leave batch entry 0's output unchanged."""
    __tracebackhide__ = True
    if x.size(0) < 2:
        raise ValueError("probe_batch_independence needs a batch of at least 2")
    changed = x.clone()
    changed[1:] = changed[1:] + 1.0
    with _quiet():
        base, out = fn(x.clone()).detach(), fn(changed).detach()
    if not torch.allclose(out[0], base[0], atol=1e-6):
        fail(
            title,
            "changing the other sequences of the batch changed the output for sequence 0: "
            "batch entries are leaking into each other. Check that no reshape/view mixes the batch axis "
            "with the head or sequence axis, and that batch-first tensors go to modules built with batch_first=True.",
            section,
        )


def probe_eval_determinism(title: str, module: torch.nn.Module, inputs: tuple, section: Section) -> None:
    """In eval mode two identical calls must give identical outputs (dropout off)."""
    __tracebackhide__ = True
    module.eval()
    with torch.no_grad(), _quiet():
        a, b = module(*inputs), module(*inputs)
    if not torch.equal(a, b):
        fail(
            title,
            "two calls in eval mode gave different outputs. Dropout must be off in eval mode: "
            "use nn.Dropout or pass `dropout_p if self.training else 0.0`.",
            section,
        )


# ---------------------------------------------------------------------------
# "Did you implement it, or call it?"


def _is_reference(path: str) -> bool:
    return path.startswith(_PACKAGE_DIR) and not path.startswith(_CHECKS_DIR) and path not in _ALLOWED_FILES


@contextlib.contextmanager
def _record_calls():
    """Record PyTorch functions called (through any alias) and tformer_ref code entered."""
    called: set[str] = set()

    class _Mode(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            called.add(getattr(func, "__name__", str(func)))
            return func(*args, **(kwargs or {}))

    def _profile(frame, event, arg):
        if event == "call":
            path = frame.f_code.co_filename
            caller = frame.f_back.f_code.co_filename if frame.f_back else ""
            # Only entries into the package from outside it: its own internal calls are not the learner's.
            if _is_reference(path) and not _is_reference(caller):
                called.add(f"tformer_ref.{frame.f_code.co_name}")

    old = sys.getprofile()
    sys.setprofile(_profile)
    try:
        with _Mode():
            yield called
        if sys.getprofile() is not _profile:  # the learner's code switched the recorder off
            called.add("<sys.setprofile>")
    finally:
        sys.setprofile(old)


def check_not_delegated(title: str, run: Callable[[], Any], forbidden: Sequence[str], module: torch.nn.Module | None = None) -> None:
    """Fail when ``run()`` calls any of ``forbidden`` (PyTorch function names or
    ``"tformer_ref"`` for any reference code), or when ``module`` contains a
    reference or built-in attention module."""
    __tracebackhide__ = True
    verify_integrity()
    if module is not None:
        for name, sub in module.named_modules():
            kind = type(sub)
            if kind.__module__.startswith("tformer_ref") or kind is torch.nn.MultiheadAttention:
                fail(title, f"your module contains {kind.__module__}.{kind.__name__} (at '{name or 'self'}'): "
                            "the exercise is to write it yourself, not to wrap the reference or PyTorch's own.")
    with _record_calls() as called:
        with _quiet():
            run()
    if "<sys.setprofile>" in called:
        fail(title, "your code changed sys.setprofile while it was being checked, which hides what it calls.")
    used = sorted(c for c in called if c in forbidden or ("tformer_ref" in forbidden and c.startswith("tformer_ref.")))
    if used:
        fail(title, f"your code calls {', '.join(used)}: the exercise is to write that computation yourself.")
    passed(title, "written by hand, no built-in or reference shortcut")


seal(__name__)
