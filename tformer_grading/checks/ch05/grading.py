"""The grading flow shared by chapter 5's exercises (book/ch05_model): compare with
the reference, then name a listed pitfall that reproduces every case, then the learner's
exception, then a measurement, then the where-not-why fallback. ``sinusoidal_encoding``
and ``embed`` run the whole flow (``grade_function``); ``decoder_block`` uses its steps
(``is_right``, ``fail_if_raised``, ``first_wrong``) and tries each assignment of the
learner's parts to their roles (``matches_some_role``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ...guard.integrity import seal
from .. import flow
from ..diagnosis import (
    Case,
    Pitfall,
    describe_difference,
    fail_unexplained,
    passed,
    run,
    verify_integrity,
)

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True

# compare -> a listed pitfall that reproduces every case -> the learner's exception ->
# a measurement (``measure`` raises when it can say what is off) -> the fallback: the
# steps of :mod:`..flow`, with the exercise's measurement between the last two.


def is_right(got, want, atol, rtol) -> bool:
    return describe_difference(got, want, atol, rtol) is None


def fail_if_raised(title: str, cases: Sequence[Case], theirs: list) -> None:
    """The learner's exception, with their line and the case that triggered it."""
    for case, got in zip(cases, theirs):
        flow.fail_if_raised(title, got, f"while the check ran case {case.label}")


def grade_function(
    title: str,
    cases: Sequence[Case],
    learner: Callable,
    reference: Callable,
    pitfalls: Sequence[Pitfall],
    measure: Callable,
    atol: float,
    rtol: float,
    adapt: Callable = flow.as_is,
) -> None:
    """Pass, or fail naming a listed pitfall, the learner's exception or what
    ``measure(title, cases, theirs, ours)`` found; else the where-not-why fallback."""
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
    fail_if_raised(title, cases, theirs)
    measure(title, cases, theirs, ours)
    fail_unexplained(title, cases, theirs, ours, atol, rtol)


def first_wrong(cases, theirs, ours, atol, rtol):
    """(case, got, want) of the first case the learner gets wrong."""
    return next(
        (c, g, w)
        for c, g, w in zip(cases, theirs, ours)
        if not is_right(g, w, atol, rtol)
    )


def matches_some_role(theirs, made, fn, roles, agree) -> bool:
    """Whether ``fn(role, *inputs)`` agrees with the learner on every case for some
    role. ``made``: each case's inputs, built once (the recomputations only read the
    learner's parts)."""
    return any(
        all(agree(g, run(fn, (role, *inputs))) for g, inputs in zip(theirs, made))
        for role in roles
    )


seal(__name__)
