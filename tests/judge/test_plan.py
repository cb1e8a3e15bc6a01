"""Which test cells the judge judges, read from their source
(tformer_grading/judge/plan.py)."""

import pytest

from tformer_grading.judge.plan import Call, Made, Name, plan


def test_a_test_cell_is_read_as_its_check_calls():
    source = (
        "ch06.check_shift_targets(shift_targets)\n"
        "### BEGIN HIDDEN TESTS\n"
        'ch06.check_by_hand("shift_targets", shift_targets, '
        "(torch.tensor([[1, 5, 2, 0]]),))\n"
        "### END HIDDEN TESTS\n"
    )
    assert plan(source) == [
        Call("ch06", "check_shift_targets", (Name("shift_targets"),))
    ]


def test_a_by_hand_cell_of_its_own_is_judged_by_its_exercises_behaviour():
    assert plan("ch02.check_attention_by_hand(attention)") == [
        Call("ch02", "check_attention", (Name("attention"),))
    ]


def test_arguments_may_be_constants_tuples_and_tensors_the_judge_makes():
    calls = plan(
        "ch03.check_causal_mask(causal_mask, (1, -2.5, 'a'), [torch.randn(2, 3)])"
    )
    assert calls[0].args[1:] == ((1, -2.5, "a"), [Made("randn", (2, 3))])


@pytest.mark.parametrize(
    "source",
    [
        "",  # no check
        "import os\nch03.check_causal_mask(causal_mask)",
        "ch03.check_causal_mask(causal_mask); x = 1",
        "ch03.check_causal_mask(__import__('os'))",
        "ch03.check_causal_mask(causal_mask.__class__)",
        "ch03.check_causal_mask(lambda s: s)",
        "ch03.check_causal_mask(*args)",
        "ch03.check_causal_mask(**kwargs)",
        "ch03.check_causal_mask(torch.load('x'))",
        "ch03.check_causal_mask(torch.randn(2, dtype=torch.half))",
        "ch03.check_everything(causal_mask)",  # not a check the judge knows
        "os.check_causal_mask(causal_mask)",
        "ch07.check_make_loader(make_loader)",  # not moved to the judge yet
        "ch01.check_by_hand('split_heads', split_heads, (2,))",  # observation alone
        "ch03.check_causal_mask(causal_mask",  # not Python
    ],
)
def test_anything_else_is_not_judged(source):
    """A learner who makes a cell look like a test cell gets nothing run by the
    judge but the course's checks; nbgrader does not score such a cell either."""
    assert plan(source) is None
