"""The judge's verdict on a test cell (tformer_grading/judge/cells.py), with the
learner's code behind a link in this process."""

import torch

from tformer_grading.judge.cells import judge, judge_cell
from tformer_grading.judge.plan import plan
from tformer_grading.judge.remote import Kernel, LocalLink


def causal_mask(size):
    return torch.ones(size, size, dtype=torch.bool).tril()[None, None]


def causal_mask_triu(size):
    return torch.ones(size, size, dtype=torch.bool).triu()[None, None]


def test_a_right_answer_passes_and_prints_what_the_checks_print():
    verdict = judge(
        plan("ch03.check_causal_mask(causal_mask)"),
        Kernel(LocalLink({"causal_mask": causal_mask})),
    )
    assert verdict.failure is None and "✓ causal_mask" in verdict.output


def test_a_wrong_answer_fails_with_the_checks_message_and_the_judges_words():
    verdict = judge_cell(
        "ch03.check_causal_mask(causal_mask)",
        LocalLink({"causal_mask": causal_mask_triu}),
    )
    assert verdict.failure.startswith(
        "the grader ran this cell's checks again, outside your notebook's kernel"
    )
    assert "'triu instead of tril'" in verdict.failure


def test_a_name_the_notebook_lacks_fails_saying_so():
    verdict = judge_cell("ch03.check_causal_mask(causal_mask)", LocalLink({}))
    assert "found no `causal_mask` in your notebook" in verdict.failure


def test_a_kernel_that_cannot_answer_fails_the_cell():
    class Broken:
        def ask(self, request):
            return '{"error": "the agent was replaced"}'

    verdict = judge_cell("ch03.check_causal_mask(causal_mask)", Broken())
    assert verdict.failure == (
        "the grader could not judge this cell: the kernel could not answer: the agent "
        "was replaced. This cell scores 0."
    )


def test_a_crash_of_the_checks_scores_0_as_the_courses_error(monkeypatch):
    """Closed, not open: a cell the judge could not measure does not score, and the
    learner is told it is not their mistake."""
    from tformer_grading.judge import cells

    def crash(calls, kernel, passed=None):
        raise RuntimeError("boom")

    monkeypatch.setattr(cells, "judge", crash)
    verdict = cells.judge_cell("ch03.check_causal_mask(causal_mask)", LocalLink({}))
    assert (
        "RuntimeError: boom. This is the course's error, not yours" in verdict.failure
    )


def test_the_judge_neither_seals_nor_compares_the_checks(monkeypatch):
    """The seals protect the checks from learner code in the kernel; in the grader's
    process no learner code runs, so the judge skips them (about 0.2 s a notebook):
    with the check machinery patched here, the judge still passes a right answer,
    where the seal fails every check anywhere else."""
    from tformer_grading.checks.ch03 import causal_mask as module
    from tformer_grading.guard import integrity

    integrity.integrity_problems()  # every module seen so far sealed
    monkeypatch.setattr(module, "check_causal_mask", lambda *args, **kwargs: None)
    assert any("check_causal_mask" in p for p in integrity.integrity_problems())
    with integrity.trusted_process():
        assert integrity.integrity_problems() == []
    verdict = judge(
        plan("ch03.check_causal_mask(causal_mask)"),
        Kernel(LocalLink({"causal_mask": causal_mask})),
    )
    assert verdict.failure is None


def test_a_check_call_that_passed_is_not_measured_again_on_the_same_objects():
    """A by-hand cell right after the behaviour cell it maps to: the grader keeps the
    check calls that passed since the learner's code last ran
    (GuardedExecute._passed), and the judge does not run them again."""
    calls = []

    def counted(size):
        calls.append(size)
        return causal_mask(size)

    link = LocalLink({"causal_mask": counted})
    passed = set()
    for _ in range(2):
        verdict = judge_cell("ch03.check_causal_mask(causal_mask)", link, passed)
        assert verdict.failure is None
    ran = len(calls)
    assert ran and passed == {repr(plan("ch03.check_causal_mask(causal_mask)")[0])}
    judge_cell("ch03.check_causal_mask(causal_mask)", link, set())
    assert len(calls) == 2 * ran  # without it, measured again
