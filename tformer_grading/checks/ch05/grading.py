"""The grading flow shared by chapter 5's exercises (book/ch05_model): compare with
the reference, then name a listed pitfall that reproduces every case, then the learner's
exception, then a measurement, then the where-not-why fallback. ``sinusoidal_encoding``
and ``embed`` run the whole flow (``grade_function``); ``decoder_block`` uses its steps
(``is_right``, ``fail_if_raised``, ``first_wrong``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ...guard.integrity import seal
from ..diagnosis import (
    Case,
    Pitfall,
    Raised,
    describe_difference,
    fail,
    fail_unexplained,
    passed,
    run,
    same,
    verify_integrity,
)

# compare -> a listed pitfall that reproduces every case -> the learner's exception ->
# a measurement (``measure`` raises when it can say what is off) -> the fallback.


def _identity(fn):
    return fn


def is_right(got, want, atol, rtol) -> bool:
    return describe_difference(got, want, atol, rtol) is None


def fail_if_raised(title: str, cases: Sequence[Case], theirs: list) -> None:
    """The learner's exception, with their line and the case that triggered it."""
    __tracebackhide__ = True
    for case, got in zip(cases, theirs):
        if isinstance(got, Raised):
            fail(
                title,
                f"your code raised {got!r} while the check ran case {case.label}.",
            )


def grade_function(
    title: str,
    cases: Sequence[Case],
    learner: Callable,
    reference: Callable,
    pitfalls: Sequence[Pitfall],
    measure: Callable,
    atol: float,
    rtol: float,
    adapt: Callable = _identity,
) -> None:
    """Pass, or fail naming a listed pitfall, the learner's exception or what
    ``measure(title, cases, theirs, ours)`` found; else the where-not-why fallback."""
    __tracebackhide__ = True
    verify_integrity()
    learner, reference = adapt(learner), adapt(reference)
    ours = [run(reference, case.make()) for case in cases]
    for case, want in zip(cases, ours):
        if isinstance(want, Raised):  # a broken case is the course's bug
            raise RuntimeError(  # noqa: TRY004 - the course's bug, not a type
                f"reference failed on case {case.label}: {want!r}"
            )
    theirs = [run(learner, case.make()) for case in cases]
    if all(is_right(g, w, atol, rtol) for g, w in zip(theirs, ours)):
        passed(title, f"matches the reference on {len(cases)} cases")
        return
    for pitfall in pitfalls:
        variant = [run(adapt(pitfall.impl), case.make()) for case in cases]
        if all(same(g, v, atol, rtol) for g, v in zip(theirs, variant)):
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


seal(__name__)
