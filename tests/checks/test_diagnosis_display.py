"""What a learner sees when a check fails: the diagnosis, not the checks' traceback.

IPython shows ``CheckFailure._render_traceback_`` in place of a traceback (JupyterLab and
nbgrader's feedback show what IPython produced), so these lines are the learner's whole view.
"""

from __future__ import annotations

import re

import pytest
import torch

from tformer_grading.anchors import heading_anchor
from tformer_grading.checks import ch01
from tformer_grading.checks.diagnosis import (
    NOT_ANSWERED,
    WRAP,
    CheckFailure,
    Section,
    section_href,
)

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _failure(check, *args) -> CheckFailure:
    with pytest.raises(CheckFailure) as info:
        check(*args)
    return info.value


def split_wrong_view_straight(x, h):  # right shape, but tokens are cut into heads
    return x.view(x.size(0), h, -1, x.size(-1) // h)


def test_a_failing_check_renders_its_diagnosis_without_frames():
    failure = _failure(ch01.check_split_heads, split_wrong_view_straight)
    lines = [ANSI.sub("", line) for line in failure._render_traceback_()]
    text = "\n".join(lines)
    assert failure.section is not None
    assert lines[0] == f"✗ {failure.title}"
    assert failure._render_traceback_()[0].startswith("\x1b[1;31m")  # bold red
    assert "pitfall" in text and lines[-1] == f"Read {failure.section}."
    assert "Traceback" not in text and 'File "' not in text and ".py" not in text
    # The section link JupyterLab opens: the lesson, at the heading's own anchor.
    s = failure.section
    assert section_href(s) == (
        f"../../book/{s.chapter}/{s.page}.ipynb#{heading_anchor(f'{s.number} {s.title}')}"
    )


def test_the_section_link_names_the_heading_jupyterlab_anchors():
    s = Section("ch01_shapes", "1.9", "Scaling by the head size", page="heads")
    assert section_href(s) == (
        "../../book/ch01_shapes/heads.ipynb#id-1-9-scaling-by-the-head-size"
    )
    first = Section("ch01_shapes", "1.1", "Attention as a soft lookup")
    assert section_href(first) == (
        "../../book/ch01_shapes/lesson.ipynb#id-1-1-attention-as-a-soft-lookup"
    )


def test_an_unanswered_exercise_reads_not_answered_yet(capfd):
    def released(x, n_heads):  # the answer cell as the exercise is handed out
        raise NotImplementedError()

    failure = _failure(ch01.check_split_heads, released)
    assert str(failure).startswith(f"{NOT_ANSWERED}: ")
    assert "raise NotImplementedError()" in str(failure)
    assert "wrong on" not in str(failure) and "cases" not in str(failure)
    assert ANSI.sub("", failure._render_traceback_()[0]) == f"✗ {NOT_ANSWERED}"
    assert capfd.readouterr().err == ""


def test_an_unanswered_module_reads_not_answered_yet():
    """Bug (reader review 2026-12-05): an untouched MultiHeadAttention was graded as a
    failed attempt, "MultiHeadAttention(16, 4) raised NotImplementedError:  at line 5".
    Cause: the placeholder sits in the exercise's ``__init__``, and building the module
    was not looked at as an answer at all. Guard: a check that builds the learner's
    module says "not answered yet", as for a function."""

    class MultiHeadAttention(torch.nn.Module):  # the answer cell as handed out
        def __init__(self, d_model, n_heads):
            super().__init__()
            # YOUR CODE HERE
            raise NotImplementedError()

        def forward(self, query, key, value, mask=None):
            # YOUR CODE HERE
            raise NotImplementedError()

    for check in (
        ch01.check_multi_head_attention,
        ch01.check_multi_head_attention_behaviour,
    ):
        failure = _failure(check, MultiHeadAttention)
        assert str(failure).startswith(f"{NOT_ANSWERED}: "), str(failure)
        assert "NotImplementedError:" not in str(failure)


def test_a_not_implemented_op_of_torch_is_not_an_unanswered_exercise():
    def unsupported(x, n_heads):  # torch's NotImplementedError carries a message
        raise NotImplementedError("Could not run 'aten::foo' on this backend")

    failure = _failure(ch01.check_split_heads, unsupported)
    assert NOT_ANSWERED not in str(failure)
    assert "raised NotImplementedError" in str(failure)


def test_rendering_outside_a_kernel_writes_nothing(capfd):
    failure = _failure(ch01.check_split_heads, split_wrong_view_straight)
    failure._render_traceback_()
    failure._render_traceback_()
    out = capfd.readouterr()
    assert out.err == "" and out.out == ""


def test_diagnosis_lines_break_between_words_not_inside_them():
    """Bug (reader review 2026-12-05): JupyterLab broke diagnoses mid-word ("Th|e
    variance", "m|akes"). Cause: its output area wraps a long line anywhere
    (``word-break: break-all``). Guard: the shown lines are at most WRAP columns, broken
    at spaces, so the output area has nothing to wrap; the words are all kept."""
    failure = CheckFailure(
        "Scale: " + " ".join(f"word{i} makes the variance grow" for i in range(20)),
        title="Scale",
        section=Section("ch01_shapes", "1.9", "Scaling by the head size"),
    )
    lines = [ANSI.sub("", line) for line in failure._render_traceback_()]
    assert len(lines) > 3 and all(len(line) <= WRAP for line in lines), lines
    body = str(failure)[len("Scale: ") :]
    assert " ".join(lines[1:]).split() == f"{body} Read {failure.section}.".split()
    assert lines[-1].startswith("Read §1.9")
