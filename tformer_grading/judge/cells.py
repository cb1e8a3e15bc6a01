"""A graded test cell, judged in the grader's process.

:func:`judge` calls the check calls a test cell is read as (:mod:`.plan`) here, with
the learner's objects looked up in the kernel (:mod:`.remote`); a check that only
observes the learner's code from inside (by hand, delegation) is left to the kernel's
run, which may withhold the cell's points but not grant them.
"""

from __future__ import annotations

import contextlib
import importlib
import io
from dataclasses import dataclass

import torch

from ..checks import pieces
from ..checks.diagnosis import CheckFailure
from ..guard.integrity import trusted_process
from .plan import Call, Made, Name, plan
from .remote import JudgeError, Kernel, KernelGone


@dataclass
class Verdict:
    """What the judge measured in one cell: ``failure`` is None when every check it
    ran passed; ``output`` is what the checks printed."""

    failure: str | None
    output: str


def judge(calls: list[Call], kernel: Kernel, passed: set | None = None) -> Verdict:
    """Run the behaviour checks of ``calls`` here, on the learner's objects in
    ``kernel``. A :class:`JudgeError` (the kernel did not answer as it must) goes to
    the caller. ``passed``: the check calls that passed on the same objects since the
    learner's code last ran (a by-hand cell after the behaviour cell it maps to), not
    run again, and to which each call that passes here is added."""
    printed = io.StringIO()
    torch.manual_seed(0)  # the judge's inputs do not depend on the notebook
    pieces.forget()  # nor on another notebook this process judged before
    try:
        with contextlib.redirect_stdout(printed), trusted_process():
            for call in calls:
                if passed is not None and repr(call) in passed:
                    continue
                check = getattr(
                    importlib.import_module(f"tformer_grading.checks.{call.module}"),
                    call.check,
                )
                args = [_value(a, kernel) for a in call.args]
                kwargs = {k: _value(v, kernel) for k, v in call.kwargs.items()}
                check(*args, **kwargs)
                if passed is not None:
                    passed.add(repr(call))  # its arguments may be lists: unhashable
    except CheckFailure as failure:
        verdict = Verdict(str(failure), printed.getvalue())
    else:
        verdict = Verdict(None, printed.getvalue())
    kernel.forget()  # not after a JudgeError: the kernel did not answer then
    return verdict


_JUDGED = (
    "the grader ran this cell's checks again, outside your notebook's kernel, on "
    "your code, and they failed there (the cell scores only when both runs pass): "
)


def judge_cell(source: str, link, passed: set | None = None) -> Verdict | None:
    """The judge's verdict on the test cell ``source`` over ``link``, its failure
    worded for the learner; None when the judge does not judge such a cell.
    ``passed``: as :func:`judge`'s."""
    calls = plan(source)
    if calls is None:
        return None
    try:
        verdict = judge(calls, Kernel(link), passed)
    except Exception as exc:  # noqa: BLE001 - the course's own error, said as such
        # Closed, not open: a cell the judge cannot measure does not score.
        return Verdict(
            f"the grader could not judge this cell: its check failed with "
            f"{type(exc).__name__}: {exc}. This is the course's error, not yours: "
            "tell your instructor. This cell scores 0.",
            "",
        )
    except JudgeError as exc:
        return unjudged(exc)
    if verdict.failure is not None:
        verdict.failure = _JUDGED + verdict.failure
    return verdict


def unjudged(exc: JudgeError) -> Verdict:
    """The verdict on a cell whose kernel did not answer the judge as it must."""
    later = " and every later cell" if isinstance(exc, KernelGone) else ""
    return Verdict(
        f"the grader could not judge this cell: {exc}. This cell{later} scores 0.", ""
    )


def _value(argument, kernel: Kernel):
    if isinstance(argument, Name):
        try:
            return kernel.lookup(argument.name)
        except KeyError:
            raise CheckFailure(
                f"the judge found no `{argument.name}` in your notebook: run the cell "
                "that defines it before this check"
            ) from None
    if isinstance(argument, list):
        return [_value(a, kernel) for a in argument]
    if isinstance(argument, Made):
        return getattr(torch, argument.fn)(*argument.args)
    if isinstance(argument, tuple):
        return tuple(_value(a, kernel) for a in argument)
    return argument
