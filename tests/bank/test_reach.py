"""Every mistake a check can name is named for some wrong answer of the bank, and every
wrong variant of a check reproduces some wrong answer of the bank.

Bug: diagnoses and wrong variants that no test and no bank answer ever reached (the
review of 2026-12-05 counted 26 variants, about 220 lines; 29 diagnoses of the banked
chapters on 2026-12-06): a message nobody had read, or dead code. Cause: the banks grew
from the mistakes their authors thought of and the checks from others, and nothing
compared the two. Guard: for each check module of a chapter with a bank, every
``Diagnosis`` it declares (a ``Pitfall`` too) appears as "the pitfall '<name>'" in the
message of some wrong answer, each test cell of the answer's exercise run on its own:
a notebook runs every graded cell, so a later cell's diagnosis reaches a learner even
when an earlier cell failed first.

A named diagnosis does not prove its variant ran: on 2026-12-07, 16 variants were named
by the stage that measures their mistake before the comparison that runs the variant
ever could (ch07's accumulation and AMP steps, three others): about 190 lines that no
answer reproduced. Guard: every ``Pitfall`` whose variant a banked module defines is
in ``flow.REPRODUCED`` once its chapter's bank is graded (the checks record a variant
that gave a learner's outputs on every case there).

A check module without a bank is listed in ``NO_BANK_YET`` with its reason.
"""

from __future__ import annotations

import functools
import types
from pathlib import Path

import pytest
from bank import EXERCISES
from test_bank import ALL, CHAPTERS, group, messages

from tformer_grading import checks
from tformer_grading.checks import flow
from tformer_grading.checks.diagnosis import Diagnosis, Pitfall, declared


def _chapter(module) -> str:
    """The folder of tests/exercises a check module's answers are in: ch06.noam ->
    ch06, ch06_loop -> ch06, bughunt_attention -> bughunt_attention,
    own_model_training -> own_model (its own name, or the chapter it begins with)."""
    name = module.__name__.split(".checks.", 1)[1].split(".")[0]
    return next((c for c in CHAPTERS if name == c or name.startswith(c + "_")), name)


def _bank_of(module) -> str:
    """Where the answers that reach ``module``'s diagnoses go: its exercise's bank
    (ch06.noam -> tests/exercises/ch06/noam/bank_noam.py), else its chapter's folder."""
    chapter = _chapter(module)
    exercise = module.__name__.rsplit(".", 1)[1]
    for bank in (f"{exercise}/bank_{exercise}.py", f"bank_{chapter}.py"):
        if (EXERCISES / chapter / bank).exists():
            return f"tests/exercises/{chapter}/{bank}"
    return f"a bank_<exercise>.py under tests/exercises/{chapter}/"


# Check modules whose exercise has no bank yet, and why.
NO_BANK_YET: dict[str, str] = {}
BANKED = [m for m in checks.exercise_modules() if _chapter(m) in CHAPTERS]


@functools.cache
def bank_text(chapter: str | None) -> str:
    """Every message of every test cell for every wrong answer of ``chapter``'s bank
    (None: of every bank). A chapter's messages are those ``test_bank`` computes for
    its verdicts, on the same worker: read, not run again."""
    wrong = [e for e in ALL if e.expect is not None and chapter in (None, e.chapter)]
    return "\n".join(m for e in wrong for m in messages(e))


# Diagnoses no bank answer can reach on the machine the suite runs on, each with the
# unit test that reaches it instead and why the bank cannot.
REACHED_ELSEWHERE = {
    # A CPU-only machine has one device: a learner's .cpu() moves nothing there.
    "tensors moved to another device": "tests/exercises/ch06/shift_targets/"
    "test_checks_shift_targets.py::"
    "test_shift_names_slices_moved_to_another_device",
    # The notebook's own lm_step wrong under a right loop: a bank answer binds only
    # generate_greedy, whose lm_step is the bank module's (a right one).
    "the step's logits are wrong": "tests/exercises/ch08/generate_greedy/"
    "test_checks_generate_greedy.py::"
    "test_generate_greedy_rejects_wrong_implementations",
}


def unreached(module, chapter: str | None = None, *, others: bool = True) -> list[str]:
    """The names of ``module``'s diagnoses that no message of the bank gives: its
    chapter's bank first; the others' (another exercise's cells may name it) only
    for what that leaves, unless ``others`` is False."""
    names = [
        n
        for n in dict.fromkeys(d.name for d in declared(module, Diagnosis))
        if n not in REACHED_ELSEWHERE
    ]
    places = [chapter or _chapter(module)] + ([None] if others else [])
    for where in places:
        names = [n for n in names if f"the pitfall '{n}'" not in bank_text(where)]
    return names


@pytest.mark.parametrize(
    "module",
    [pytest.param(m, marks=group(_chapter(m))) for m in BANKED],
    ids=lambda m: m.__name__.split(".checks.", 1)[1],
)
def test_every_diagnosis_is_named_for_some_bank_answer(module):
    missing = unreached(module)
    assert missing == [], (
        f"{module.__name__} can name mistakes that no wrong answer of the bank gets: "
        f"{missing}. Add the answer that makes each ({_bank_of(module)}), or delete "
        "a diagnosis no learner code can reach."
    )


@group("ch02")
def test_the_guard_reports_a_diagnosis_no_answer_gets():
    from tformer_grading.checks.ch02 import attention

    planted = types.ModuleType("planted")
    planted.NEVER = Diagnosis("a mistake no check names", "", attention.S_STEPS)
    planted.ALSO = [attention.WRONG_SCALE]  # in a list, as checks keep their Pitfalls
    assert unreached(planted, "ch02", others=False) == ["a mistake no check names"]


def _home(pitfall: Pitfall) -> str | None:
    """The module that defines ``pitfall``'s variant (a partial's function's)."""
    impl = pitfall.impl
    while isinstance(impl, functools.partial):
        impl = impl.func
    return getattr(impl, "__module__", None)


def unreproduced(modules) -> list[str]:
    """ "<module>: <name>" for each Pitfall whose variant one of ``modules`` defines and
    no learner's outputs graded in this process were reproduced by."""
    found = {
        p: m.__name__
        for m in modules
        for p in declared(m, Pitfall)
        if p.impl is not None and _home(p) == m.__name__
    }
    return [f"{m}: {p.name}" for p, m in found.items() if p not in flow.REPRODUCED]


@pytest.mark.parametrize("chapter", [pytest.param(c, marks=group(c)) for c in CHAPTERS])
def test_every_variant_reproduces_some_bank_answer(chapter):
    bank_text(chapter)  # the chapter's wrong answers, graded in this process
    missing = unreproduced(m for m in BANKED if _chapter(m) == chapter)
    assert missing == [], (
        f"wrong variants no answer of the {chapter} bank reproduces: {missing}. Add "
        "the answer each stands for, or, where a stage names the mistake from what "
        "it measured first, make it a Diagnosis and delete the variant."
    )


@group("ch02")
def test_the_guard_reports_a_variant_no_answer_reproduces():
    from tformer_grading.checks.ch02 import attention

    planted = types.ModuleType("planted")

    def attention_times_two(q, k, v):
        return 2 * (q @ k.transpose(-2, -1))

    attention_times_two.__module__ = "planted"  # as if the planted module defined it
    planted.TWICE = Pitfall(
        "scores doubled", "", attention.S_STEPS, attention_times_two
    )
    assert unreproduced([planted]) == ["planted: scores doubled"]
    flow.reproduced(planted.TWICE)
    assert unreproduced([planted]) == []


def test_each_diagnosis_reached_elsewhere_has_its_test():
    for name, where in REACHED_ELSEWHERE.items():
        path, test = where.split("::")
        source = (Path(__file__).parents[2] / path).read_text(encoding="utf-8")
        assert f"def {test}(" in source and name in source, where


def test_every_check_module_has_a_bank_or_a_reason():
    unbanked = {_chapter(m) for m in checks.exercise_modules()} - set(CHAPTERS)
    assert unbanked == set(NO_BANK_YET), (
        "check modules without a bank (tests/exercises/<chapter>/<exercise>/"
        f"bank_<exercise>.py): {unbanked}"
    )
