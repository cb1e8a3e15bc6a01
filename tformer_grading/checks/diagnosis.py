"""What every exercise check is built from: the check author's API.

A check runs the learner's code on several :class:`Case` inputs, compares each
output with the reference, and on a mismatch runs the known wrong variants
(:class:`Pitfall`) on the same cases: when one of them reproduces the learner's
output on every case, the failure names that pitfall and the lesson
:class:`Section` that explains it. Otherwise it reports the case, the shapes,
the largest difference and where it is.

A check prints one line on success (:func:`passed`) and raises
:class:`CheckFailure` (an ``AssertionError``, so nbgrader marks the cell failed)
on failure. It never writes to stderr: nbgrader gives a test cell zero points
when it does. Learner code is run through :func:`run`, which turns an exception
into a value and keeps warnings and stderr out of the cell.

The guards (``tformer_grading.guard``) touch this module in two places only:
:func:`verify_integrity` before a check and :func:`passed` after it.
"""

from __future__ import annotations

import contextlib
import functools
import html
import io
import linecache
import os
import sys
import sysconfig
import textwrap
import traceback
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..anchors import heading_anchor
from ..guard.integrity import integrity_problems, seal
from ..guard.receipts import sign
from ..progress import NOT_ANSWERED
from .measure.closeness import tensors_near
from .measure.failing_call import failing_call
from .measure.torch_errors import explain

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True


class CheckFailure(AssertionError):
    """A check found a mistake. The message says which, and where to read about it.

    In a notebook IPython shows :meth:`_render_traceback_` instead of a traceback: the
    frames would be the checks' internals, which say nothing about the learner's code.
    ``picture`` is what the check drew of the mistake, or None
    (:mod:`tformer_grading.pictures.attach`): drawn when first asked for, so that a
    failure nobody shows costs nothing.
    """

    def __init__(
        self, text: str, *, title: str | None = None, section: Section | None = None
    ):
        super().__init__(text)
        self.title, self.section = title, section
        self._picture, self._draw = None, None

    @property
    def picture(self):
        if self._draw is not None:
            draw, self._draw = self._draw, None
            self._picture = draw()
        return self._picture

    def will_picture(self, draw: Callable[[], Any]) -> None:
        """Draw ``draw()`` as this failure's picture when it is first asked for."""
        self._picture, self._draw = None, draw

    @property
    def pictured(self) -> bool:
        """A picture is drawn or will be (without drawing it)."""
        return self._draw is not None or self._picture is not None

    def _render_traceback_(self) -> list[str]:
        """The diagnosis as IPython shows a failed cell: a bold red title, the message
        and the lesson section, no frames. The picture and the link to the section are
        shown above it."""
        if not getattr(self, "_link_shown", False):
            # IPython renders an error twice (to show it, then to store it in history):
            # the picture and link belong above the first rendering only.
            self._link_shown = True
            from ..pictures.attach import show

            show(self.picture)
            _show_section_link(self.section)
        return diagnosis_lines(self)


#: ANSI bold red and reset: how a failure's title stands out in JupyterLab and in
#: nbgrader's feedback (both turn ANSI colours into HTML).
_RED, _RESET = "\x1b[1;31m", "\x1b[0m"
_READ = "\n    Read "


def diagnosis_lines(failure: CheckFailure) -> list[str]:
    """The lines a learner reads for ``failure``: title, message, where to read about
    it."""
    text = str(failure)
    body = text.split(_READ)[0]
    title = failure.title or "Check failed"
    if failure.title and body.startswith(f"{failure.title}: "):
        body = body[len(failure.title) + 2 :]
    lines = body.splitlines()
    if failure.section is not None:
        lines.append(f"Read {failure.section}.")
    elif _READ in text:
        lines.append("Read " + text.split(_READ, 1)[1])
    shown = [part for line in lines for part in _wrapped(line)]
    return [f"{_RED}✗ {title}{_RESET}", *shown]


#: Where a diagnosis line is broken. JupyterLab wraps a long output line anywhere,
#: mid-word ("Th|e variance"): lines this short are never wrapped there at the
#: notebook's usual width, and break between words. The failure's own text stays one
#: line per paragraph (the class report reads it).
WRAP = 88


def _wrapped(line: str) -> list[str]:
    if len(line) <= WRAP:
        return [line]
    indent = line[: len(line) - len(line.lstrip())]
    return textwrap.wrap(
        line,
        WRAP,
        subsequent_indent=indent,
        break_long_words=False,
        break_on_hyphens=False,
    )


def section_href(section: Section) -> str:
    """The section's address relative to an exercise notebook (book/<chapter>/), with
    the anchor JupyterLab (jupyterlab-myst) and the book give the heading
    "## <number> <title>" (tformer_grading/anchors.py)."""
    anchor = heading_anchor(f"{section.number} {section.title}")
    return f"../../{section.notebook}#{anchor}"


def _show_section_link(section: Section | None) -> None:
    """In a Jupyter kernel, display a link to ``section``: JupyterLab opens the lesson
    at that heading on click (an error's text links only web addresses). Nothing
    elsewhere."""
    shell = _ipython_shell()
    if section is None or shell is None or not hasattr(shell, "kernel"):
        return
    from IPython.display import display

    href = html.escape(section_href(section), quote=True)
    where = html.escape(f"§{section.number} '{section.title}'")
    display(
        {
            "text/html": f'<p class="tformer-lesson-link">The lesson explains this: '
            f'<a href="{href}">{where}</a></p>',
            "text/plain": f"The lesson explains this: {section}",
        },
        raw=True,
    )


def _ipython_shell():
    ipython = sys.modules.get("IPython")
    return getattr(ipython, "get_ipython", lambda: None)() if ipython else None


#: The words every failure that names no mistake carries. The grading report counts a
#: rejection as generic by them, so a fallback must say them (through
#: :func:`fail_unexplained`) and a diagnosis never does.
UNEXPLAINED = "matches none of the known pitfalls"


@dataclass(frozen=True)
class Section:
    """A place in the book: section ``number`` of chapter ``chapter`` (its folder under
    ``book/``), on the chapter's page ``page`` (``lesson``, or a further page such as
    chapter 1's ``heads``).

    >>> str(Section("ch01_shapes", "1.5", "Splitting into heads", page="heads"))
    "§1.5 'Splitting into heads' in book/ch01_shapes/heads.ipynb"
    """

    chapter: str
    number: str
    title: str
    page: str = "lesson"

    @property
    def notebook(self) -> str:
        """The page's notebook, from the course's root:
        ``book/<chapter>/<page>.ipynb``."""
        return f"book/{self.chapter}/{self.page}.ipynb"

    def __str__(self) -> str:
        return f"§{self.number} '{self.title}' in {self.notebook}"


@dataclass(frozen=True)
class Diagnosis:
    """A mistake a check can name: what the learner reads, and where it is taught.

    Checks that recognise a mistake from behaviour (a probe) use a Diagnosis; the
    book's pitfall index lists every Diagnosis of every chapter.
    """

    name: str
    explanation: str
    section: Section

    def fail(self, title: str, detail: str = "") -> None:
        """Raise the failure that names this mistake; ``detail`` is what was
        observed."""
        observed = f"{detail} " if detail else ""
        fail(
            title,
            f"this looks like the pitfall '{self.name}'. {observed}{self.explanation}",
            self.section,
        )


@dataclass(frozen=True)
class Pitfall(Diagnosis):
    """A Diagnosis with a wrong variant that reproduces it.

    ``impl`` takes the same arguments as the reference; when it reproduces a
    learner's outputs on every case, the check names this pitfall.
    """

    impl: Callable[..., Any] = None


def declared(module, kind: type) -> list:
    """Every ``kind`` (``Section``, ``Diagnosis``) a check module defines at its top
    level, alone or in a list or tuple, in order: what the book's pitfall index and the
    tests of section links read.

    >>> from tformer_grading.checks import ch01
    >>> ch01.S_SPLIT in declared(ch01, Section)
    True
    """
    found = []
    for value in vars(module).values():
        items = value if isinstance(value, (list, tuple)) else [value]
        found += [item for item in items if isinstance(item, kind)]
    return found


def sections_named(module) -> set:
    """Every lesson ``Section`` a check module can send a learner to: its own, and those
    of its diagnoses."""
    return {
        *declared(module, Section),
        *(d.section for d in declared(module, Diagnosis)),
    }


@dataclass(frozen=True)
class Case:
    """One input to try. ``make`` builds fresh arguments each call (learners may modify
    inputs in place)."""

    label: str
    make: Callable[[], tuple]


# Code that is not the learner's (torch, the course's packages, the standard library):
# frames there are skipped when saying where in the learner's code an error came from.
_COURSE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NOT_THE_LEARNERS = tuple(
    os.path.join(folder, "")
    for folder in (
        os.path.dirname(os.path.abspath(torch.__file__)),
        os.path.join(_COURSE, "tformer_grading"),
        os.path.join(_COURSE, "tformer_ref"),
        sysconfig.get_paths()["stdlib"],
    )
)


def learner_line(exc: BaseException) -> str:
    """Where in the learner's code ``exc`` was raised:
    " at line N of your code: `text`", or "" when no frame of the traceback is theirs
    (the error came from torch on bad input). When it was raised in a function of
    theirs that another of theirs called, it names both and the shapes of the tensors
    the raising one was given (:func:`_called_with`)."""
    if isinstance(getattr(exc, "kernel_where", None), str):  # read in the kernel
        return exc.kernel_where
    frames = [
        (frame, lineno)
        for frame, lineno in traceback.walk_tb(exc.__traceback__)
        if not os.path.abspath(frame.f_code.co_filename).startswith(NOT_THE_LEARNERS)
    ]
    if not frames:
        return ""
    return f" at line {_line(*frames[-1])}{_called_with(frames)}"


def _line(frame, lineno: int) -> str:
    text = linecache.getline(frame.f_code.co_filename, lineno).strip()
    return f"{lineno} of your code" + (f": `{text}`" if text else "")


_NOT_A_NAME = ("<module>", "<lambda>", "<listcomp>", "<genexpr>", "<dictcomp>")


def _called_with(frames: list) -> str:
    """ ", in your lm_step, called at line 6 of your code: `...`; lm_step's tensor
    arguments when it raised: tokens [3]": what a crash inside one function of the
    learner's, called from another, was given (the caller handed the wrong thing
    more often than the callee is wrong). "" for a crash in the function the check
    called itself."""
    inner = frames[-1][0].f_code
    caller = next(
        ((f, n) for f, n in reversed(frames[:-1]) if f.f_code is not inner), None
    )
    if caller is None or inner.co_name in _NOT_A_NAME:
        return ""
    count = inner.co_argcount + inner.co_kwonlyargcount
    given = [
        f"{name} {list(value.shape)}"
        for name in inner.co_varnames[:count]
        if isinstance(value := frames[-1][0].f_locals.get(name), torch.Tensor)
    ][:4]
    tensors = (
        f"; {inner.co_name}'s tensor arguments when it raised: {', '.join(given)}"
        if given
        else ""
    )
    return f", in your {inner.co_name}, called at line {_line(*caller)}{tensors}"


class Raised:
    """The exception a call raised, kept as a value so variants can be compared on it
    too; ``call`` is what :func:`.measure.failing_call.failing_call` read of the
    PyTorch call it came from ("" when nothing was read), read when first asked for:
    a check that runs many cases shows one crash of them."""

    def __init__(self, exc: BaseException, call: str | Callable[[], str] = ""):
        self.exc = exc
        self._call = call

    @property
    def call(self) -> str:
        if callable(self._call):
            self._call = self._call()
        return self._call

    def __repr__(self) -> str:
        message = str(self.exc)
        if (
            len(message) > 300
        ):  # a flood of text is the learner's, not the reader's, problem
            message = message[:300] + " …"
        said = f": {message}" if message else ""
        call = f" ({self.call})" if self.call else ""
        return f"{type(self.exc).__name__}{said}{learner_line(self.exc)}{call}"


def fail(title: str, message: str, section: Section | None = None) -> None:
    """Raise a :class:`CheckFailure` formatted the same way everywhere. When the message
    forwards a size error of the learner's code (or reports a wrong shape) and names the
    case's sizes, it says what each number of the error is (:mod:`.measure.sizes`)."""
    text = f"{title}: {message}"
    numbers = explain(message)
    if numbers:
        text = f"{text.rstrip()}{'' if text.rstrip().endswith('.') else '.'} {numbers}"
    if section is not None:
        text += f"{_READ}{section}."
    raise CheckFailure(text, title=title, section=section)


def verify_integrity() -> None:
    """Raise :class:`CheckFailure` when the check machinery was patched (no check can be
    trusted then)."""
    problems = integrity_problems()
    if problems:
        shown = "; ".join(problems[:4])
        if len(problems) > 4:
            shown += f"; and {len(problems) - 4} more"
        raise CheckFailure(
            "grading integrity: the course's check code was changed while your "
            f"notebook ran ({shown}). No check can be trusted after that, so every "
            "check from here on fails. Remove the code that patches tformer_ref, "
            "tformer_grading, torch or IPython, restart the kernel and run all cells "
            "again."
        )


def passed(title: str, detail: str) -> None:
    """Print the success line of a check (signed while grading), after verifying
    nothing was patched."""
    verify_integrity()
    print(sign(f"✓ {title}: {detail}"))


# ----------------------------------------------------------------- running learner code


@contextlib.contextmanager
def single_thread():
    """Tiny tensors gain nothing from intra-op threads, and on a busy machine the
    threads' spin-waits make every small op ten times slower: run the many small
    comparisons on one thread."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def single_threaded(check: Callable) -> Callable:
    """Decorator: run a whole check on one thread (see :func:`single_thread`)."""

    @functools.wraps(check)
    def run_check(*args, **kwargs):
        with single_thread():
            return check(*args, **kwargs)

    return run_check


@contextlib.contextmanager
def quiet():
    """Run learner code without letting it reach stderr: nbgrader zeroes a test cell
    that writes there, even when the answer is right. Warnings are ignored and stderr
    writes discarded."""
    with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        try:
            yield
        except NotImplementedError as exc:
            if unanswered(exc):
                fail_unanswered(exc)
            raise


def run(fn: Callable, args: tuple) -> Any:
    """Call ``fn(*args)`` quietly; an exception becomes a :class:`Raised` value, with
    the PyTorch call it came from where it can be read
    (:func:`.measure.failing_call.failing_call`)."""
    with quiet():
        try:
            return fn(*args)
        except CheckFailure:
            raise
        except Exception as exc:  # noqa: BLE001 - the learner's code may raise anything
            if unanswered(exc):
                fail_unanswered(exc)
            return Raised(exc, functools.partial(failing_call, fn, args, exc))


def unanswered(exc: BaseException) -> bool:
    """``exc`` is the placeholder an exercise is released with (a bare
    ``raise NotImplementedError()`` line), not an error of the learner's code or of
    torch (which raises NotImplementedError, with a message, for an op a backend
    lacks)."""
    if type(exc) is not NotImplementedError or str(exc):
        return False
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return False
    last = frames[-1]
    text = (last.line or linecache.getline(last.filename, last.lineno)).strip()
    return text.startswith("raise NotImplementedError")


def fail_unanswered(exc: BaseException) -> None:
    """Fail saying the exercise is still the placeholder: counting its cases as wrong
    would send the learner looking for a mistake they have not had the chance to
    make."""
    fail(
        NOT_ANSWERED,
        f"your code raised NotImplementedError{learner_line(exc)}, the placeholder the "
        "exercise comes with. Write your answer in its place, run that cell, then run "
        "this check again.",
    )


def run_or_fail(title: str, fn: Callable, args: tuple, call: str) -> Any:
    """``fn(*args)`` quietly; when the learner's code raises, the check fails saying
    which ``call`` raised what."""
    result = run(fn, args)
    if isinstance(result, Raised):
        fail(title, f"{call} raised {result!r}")
    return result


# -------------------------------------------------------------------- comparing outputs


def describe_difference(
    got: Any, want: torch.Tensor, atol: float, rtol: float
) -> str | None:
    """None when ``got`` equals ``want`` within tolerance, else a sentence saying how
    it differs."""
    if isinstance(got, Raised):
        return f"your code raised {got!r}"
    problem = flow.form_problem(got, want.shape, want.dtype, want.device)
    if problem is not None:
        return problem
    got_d, want_d = got.detach(), want.detach()
    nan_got = torch.isnan(got_d)
    if nan_got.any() and not torch.isnan(want_d).any():
        where = tuple(nan_got.nonzero()[0].tolist())
        return (
            f"your output has NaN (first at index {where}) where the reference has none"
        )
    if torch.allclose(got_d, want_d, atol=atol, rtol=rtol, equal_nan=True):
        return None
    return f"values differ: {flow.largest_difference(got_d, want_d)[1]}"


def same(a: Any, b: Any, atol: float, rtol: float) -> bool:
    """Two outputs agree: equal tensors, or the same kind of exception."""
    if isinstance(a, Raised) or isinstance(b, Raised):
        return (
            isinstance(a, Raised)
            and isinstance(b, Raised)
            and type(a.exc) is type(b.exc)
        )
    # describe_difference(a, b, atol, rtol) is None, without writing the description
    # (this runs for every role of every listed mistake)
    return tensors_near(a, b, atol, rtol)


def _identity(fn: Callable) -> Callable:
    return fn


def compare_to_reference(
    title: str,
    cases: Sequence[Case],
    learner: Callable,
    reference: Callable,
    pitfalls: Sequence[Pitfall] = (),
    atol: float = 1e-5,
    rtol: float = 1e-4,
    adapt: Callable[[Callable], Callable] = _identity,
) -> None:
    """Run ``learner`` and ``reference`` on every case; on a mismatch, name the pitfall
    that explains it. The whole flow of :mod:`.flow` for a function with a reference.

    ``adapt`` wraps learner, reference and every pitfall alike (say, to keep one output
    of a pair, or to call a module with weights the case supplies).
    """
    verify_integrity()
    learner, reference = adapt(learner), adapt(reference)
    ours = flow.reference_outputs(reference, cases)
    theirs = [done.result for done in flow.run_cases(learner, cases)]
    if flow.matches(theirs, ours, atol, rtol):
        passed(title, f"matches the reference on {len(cases)} cases")
        return
    pitfall = flow.listed_pitfall(pitfalls, cases, theirs, atol, rtol, adapt)
    if pitfall is not None:
        pitfall.fail(title)
    fail_unexplained(title, cases, theirs, ours, atol, rtol)


def fail_unexplained(
    title: str,
    cases: Sequence[Case],
    theirs: list,
    ours: list,
    atol: float,
    rtol: float,
) -> None:
    """The failure when no known pitfall explains the learner's outputs: where, not
    why."""
    problems = [
        (case, msg)
        for case, got, want in zip(cases, theirs, ours)
        if (msg := describe_difference(got, want, atol, rtol)) is not None
    ]
    case, msg = problems[0]
    flow.fallback(
        title,
        f"wrong on {len(problems)} of {len(cases)} cases. First: case {case.label}: "
        f"{msg}",
    )


# The flow's steps build on this module's primitives, and compare_to_reference is made
# of them: imported last, once every name they need here is defined.
from . import flow

seal(__name__)
