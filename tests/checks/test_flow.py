"""The flow every check runs, one step per function (tformer_grading/checks/flow.py).

Bug this guards against: the flow "run the cases, compare, name the listed pitfall
that reproduces every case, fall back to 'where, not why'" written once per exercise
(2026-12-05 aesthetics review, family F1: 33 copies), each copy with its own idea of
an unchanged input, a deterministic result or a reproduced pitfall.
"""

from __future__ import annotations

import pytest
import torch

from tformer_grading.checks import flow
from tformer_grading.checks.diagnosis import (
    UNEXPLAINED,
    Case,
    CheckFailure,
    Diagnosis,
    Pitfall,
    Raised,
    Section,
    compare_to_reference,
)

CPU = torch.device("cpu")
S = Section("ch02_attention", "2.1", "Scaled dot-product attention")
CASES = [
    Case("x [2, 3]", lambda: (torch.arange(6.0).view(2, 3),)),
    Case("x [1, 4]", lambda: (torch.arange(4.0).view(1, 4) - 2,)),
]


def _double(x):
    return 2 * x


def _fails(step, *args, **kwargs) -> str:
    with pytest.raises(CheckFailure) as caught:
        step(*args, **kwargs)
    return str(caught.value)


def test_runs_keep_the_learners_exception_as_a_value():
    runs = flow.run_cases(lambda x: x[5], CASES)
    assert [type(r.result) for r in runs] == [Raised, Raised]
    said = _fails(flow.fail_if_raised, "t", runs[0].result, "on case x [2, 3]")
    assert said.startswith("t: your code raised IndexError") and "x [2, 3]" in said


def test_a_right_result_is_not_a_raise():
    flow.fail_if_raised("t", torch.ones(1), "on case x")


def test_a_reference_that_raises_is_the_courses_bug():
    with pytest.raises(RuntimeError, match="reference failed on case x"):
        flow.reference_outputs(lambda x: x[5], CASES)
    assert torch.equal(
        flow.reference_outputs(_double, CASES)[0], 2 * CASES[0].make()[0]
    )


@pytest.mark.parametrize(
    "got, said",
    [
        ([1.0], "expected a tensor of shape [2], got list"),
        (torch.ones(3), "expected shape [2], got [3]"),
        (torch.ones(2, dtype=torch.float64), "expected dtype torch.float32, got"),
        (torch.ones(2).as_subclass(type("Sub", (torch.Tensor,), {})), "subclass Sub"),
    ],
)
def test_the_form_step_reads_each_wrong_form(got, said):
    assert said in flow.form_problem(got, [2], torch.float32, CPU)


def test_the_form_step_accepts_the_right_form_and_takes_its_own_words():
    assert flow.form_problem(torch.ones(2), (2,), torch.float32, CPU) is None
    words = {**flow.FORM_WORDS, "dtype": "want {want} (the dtype of q), not {got}"}
    said = flow.form_problem(torch.ones(2).half(), [2], torch.float32, CPU, words)
    assert said == "want torch.float32 (the dtype of q), not torch.float16"


def test_an_input_changed_in_place_is_named():
    runs = flow.run_cases(lambda x: x.mul_(2), CASES)
    assert flow.changed_input(runs[0], "x") == "x"
    assert flow.changed_input(flow.run_cases(_double, CASES)[0], "x") is None


def test_a_result_that_depends_on_chance_names_the_diagnosis():
    chance = Diagnosis("depends on chance", "No randomness.", S)
    first = flow.run_cases(torch.rand_like, CASES[:1])[0].result
    said = _fails(
        flow.check_deterministic, "t", torch.rand_like, CASES[0], first, chance
    )
    assert "'depends on chance'" in said and "gave different results" in said
    flow.check_deterministic("t", _double, CASES[0], 2 * CASES[0].make()[0], chance)


def test_same_bits_is_exact_and_reads_pairs():
    a = torch.tensor([1.0, float("nan")])
    assert flow.same_bits((a, a), [a.clone(), a.clone()])
    assert not flow.same_bits((a, a), (a, a + 1e-7))
    assert not flow.same_bits(a, (a, a))


def test_the_pitfall_that_reproduces_every_case_is_found():
    halve = Pitfall("halved", "x / 2.", S, lambda x: x / 2)
    triple = Pitfall("tripled", "3x.", S, lambda x: 3 * x)
    theirs = [case.make()[0] / 2 for case in CASES]
    assert flow.listed_pitfall([triple, halve], CASES, theirs, 1e-5, 1e-4) is halve
    wrong_once = [theirs[0], theirs[1] + 1]
    assert flow.listed_pitfall([triple, halve], CASES, wrong_once, 1e-5, 1e-4) is None


def test_a_check_with_its_own_runs_says_how_to_run_and_compare_a_variant():
    halve = Pitfall("halved", "x / 2.", S, lambda x: x / 2)
    # runs of its own: (label, args) pairs, compared by their sums only
    runs = [("a", (torch.ones(2),)), ("b", (torch.full((3,), 4.0),))]
    theirs = [1.0, 6.0]

    def run_on(fn, done):
        return fn(*done[1])

    def alike(got, variant):
        return got == variant.sum().item()

    found = flow.listed_pitfall([halve], runs, theirs, 0, 0, flow.as_is, run_on, alike)
    assert found is halve
    wrong_once = [1.0, 7.0]
    said = flow.listed_pitfall(
        [halve], runs, wrong_once, 0, 0, run_on=run_on, alike=alike
    )
    assert said is None


def test_pairs_are_compared_part_by_part():
    pick = flow.part_of_pair(lambda x: (x, 2 * x), 1)
    assert torch.equal(pick(torch.ones(2)), 2 * torch.ones(2))
    with pytest.raises(TypeError, match="must return a pair"):
        flow.part_of_pair(_double, 0)(torch.ones(2))
    assert flow.agree(
        (torch.ones(2), torch.ones(1)), [torch.ones(2), torch.ones(1)], 0, 0
    )
    assert flow.pair_of_tensors((torch.ones(1), torch.ones(1)))
    assert not flow.pair_of_tensors((torch.ones(1), 1.0))


def test_a_finding_is_named_only_when_it_explains_every_wrong_case():
    a, b = Diagnosis("a", "A.", S), Diagnosis("b", "B.", S)
    assert flow.one_finding([(a, "one"), (a, "two")]) == (a, "one")
    assert flow.one_finding([(a, "one"), (b, "two")]) is None
    assert flow.one_finding([(a, "one"), None]) is None


def test_the_largest_difference_says_where():
    size, said = flow.largest_difference(
        torch.tensor([1.0, 2.0]), torch.tensor([1.0, 1.5])
    )
    assert size == 0.5
    assert said == "largest difference 0.5 at index (1,) (yours 2, expected 1.5)"


def test_the_fallback_says_unexplained():
    said = _fails(flow.fallback, "t", "on case x, largest difference 1", S)
    assert UNEXPLAINED in said and "step by step" in said and "§2.1" in said
    assert _fails(flow.fallback, "t", "seen", advice="").endswith(f"{UNEXPLAINED}.")
    said = _fails(flow.fallback, "t", "Seen twice.", advice="", stop="")
    assert said.endswith(f"Seen twice. It {UNEXPLAINED}.")


def test_compare_to_reference_is_the_whole_flow(capsys):
    halve = Pitfall("halved", "x / 2.", S, lambda x: x / 2)
    compare_to_reference("t", CASES, _double, _double, [halve])
    assert "matches the reference on 2 cases" in capsys.readouterr().out
    said = _fails(compare_to_reference, "t", CASES, lambda x: x / 2, _double, [halve])
    assert "pitfall 'halved'" in said
    said = _fails(compare_to_reference, "t", CASES, lambda x: x + 1, _double, [halve])
    assert said.startswith("t: wrong on 2 of 2 cases. First: case x [2, 3]: values")
    assert UNEXPLAINED in said


def test_the_first_stage_that_departs_is_reported():
    def shape(x):
        return None

    def sign(x):
        return ("negative", x) if x < 0 else None

    def size(x):
        return ("large", x) if abs(x) > 10 else None

    assert flow.first_finding([shape, sign, size], -20) == ("negative", -20)
    assert flow.first_finding([shape, sign, size], 20) == ("large", 20)
    assert flow.first_finding([shape, sign], 1) is None
