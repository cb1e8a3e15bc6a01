"""The judge's thread and its link to the kernel (tformer_grading/judge/link.py); the
requests themselves go to a real kernel in tests/grading/test_judge_attacks.py."""

import asyncio
import time

import pytest

from tformer_grading.judge import link
from tformer_grading.judge.remote import JudgeError


def test_a_judge_that_never_ends_fails_its_cell_and_may_ask_nothing_more(monkeypatch):
    """Bug this guards against: a judge thread past its time, still asking the kernel,
    would read the messages of the next cell nbgrader runs."""
    seen = []

    def stuck(source, kernel_link, passed=None):
        seen.append(kernel_link)
        time.sleep(0.6)  # asyncio.run waits for the thread before it returns

    monkeypatch.setattr(link, "_GRACE", 0.2)
    monkeypatch.setattr(link, "_judge", stuck)

    async def judge():
        return await link.judge_in_thread(None, "ch03.check_x(f)", time.monotonic())

    verdict = asyncio.run(judge())
    assert "past the cell's time limit. This cell scores 0." in verdict.failure
    with pytest.raises(JudgeError, match="stopped judging this cell"):
        seen[0].ask("{}")


def test_a_request_after_the_deadline_is_not_sent():
    class Nobody:
        kc = None  # sending would fail: nothing may be sent

    async def ask():
        return await link.ask_kernel(Nobody(), "{}", time.monotonic() - 1)

    with pytest.raises(JudgeError, match="did not answer the grader in time"):
        asyncio.run(ask())
