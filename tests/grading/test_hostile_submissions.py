"""Hostile and broken submissions: none crashes the run, none earns points it did not earn.

Two layers. The fixture learners of tests/grading/hostile.py go through the real nbgrader CLI (one
autograde run, shared with tests/grading/test_instructor_workflow.py). The in-process tests below
exercise each guard of tformer_grading.guard on its own, quickly.
"""

import re
import sys
import types

import pytest
import torch

from tformer_grading.checks import CheckFailure, ch01, diagnosis
from tformer_grading.guard import integrity, receipts
from tformer_grading.guard.receipts import expected_receipts, valid_receipts

from course import page_text
from hostile import CHAPTER, LEARNERS, graded_class


def split_right(x, h):
    b, s, d = x.shape
    return x.view(b, s, h, d // h).transpose(1, 2)


# --------------------------------------------------------------------------- through the real nbgrader CLI


@pytest.mark.slow
@pytest.mark.xdist_group("hostile_class")  # graded_class() runs once per worker
@pytest.mark.parametrize("learner", sorted(LEARNERS))
def test_each_learner_scores_exactly_what_it_earned(learner):
    course, out, table, _ = graded_class()
    spec = LEARNERS[learner]
    assert table[learner]["cells"] == spec.scores
    text = page_text(out / "feedback" / learner / "exercise.html")
    assert " ".join(spec.feedback.split()) in text, spec.feedback


@pytest.mark.slow
@pytest.mark.xdist_group("hostile_class")  # graded_class() runs once per worker
def test_enormous_output_is_capped_in_the_graded_notebook():
    course, _, _, _ = graded_class()
    nb = course / "autograded" / "output_and_warnings" / CHAPTER / "exercise.ipynb"
    assert nb.stat().st_size < 1_000_000


@pytest.mark.slow
@pytest.mark.xdist_group("hostile_class")  # graded_class() runs once per worker
def test_a_warning_in_an_answer_cell_does_not_zero_the_test_cell():
    course, _, _, _ = graded_class()
    import json

    cells = json.loads(
        (
            course / "autograded" / "output_and_warnings" / CHAPTER / "exercise.ipynb"
        ).read_text()
    )["cells"]
    answer = next(
        c
        for c in cells
        if c["metadata"].get("nbgrader", {}).get("grade_id") == "merge_heads"
    )
    test = next(
        c
        for c in cells
        if c["metadata"].get("nbgrader", {}).get("grade_id") == "test_merge_heads"
    )
    assert any(
        o.get("name") == "stderr" for o in answer["outputs"]
    )  # the learner's warning is shown where it was made
    assert not any(
        o.get("name") == "stderr" or o["output_type"] == "error"
        for o in test["outputs"]
    )


# --------------------------------------------------------------------------- in process: each guard


@pytest.fixture
def restore():
    """Undo whatever a test patched, and forget the seals, so later tests see a clean package."""
    saved_ch01, saved_diagnosis = dict(vars(ch01)), dict(vars(diagnosis))
    saved_allclose = torch.allclose
    yield
    vars(ch01).update(saved_ch01)
    vars(diagnosis).update(saved_diagnosis)
    torch.allclose = saved_allclose
    assert integrity.integrity_problems() == []


def test_intact_package_has_no_integrity_problems():
    assert integrity.integrity_problems() == []


def test_replaced_check_function_is_detected(restore):
    ch01.check_by_hand = lambda *args: None
    with pytest.raises(CheckFailure, match="ch01.check_by_hand was replaced"):
        ch01.check_split_heads(split_right)


def _do_nothing_code(fn):
    """A code object that does nothing and fits ``fn``'s closure, as a learner's swap
    must: the checks a test cell calls are closures (checks/pieces.py wraps them)."""
    free = fn.__code__.co_freevars
    if not free:
        return (lambda *args, **kwargs: None).__code__
    names = ", ".join(free)
    namespace: dict = {}
    exec(  # noqa: S102 - builds the attacker's code object
        f"def outer({names}):\n    def fake(*a, **k):\n        {names}\n"
        "        return None\n    return fake",
        namespace,
    )
    return namespace["outer"](*([None] * len(free))).__code__


def test_code_swapped_in_place_is_detected(restore):
    original = ch01.check_by_hand.__code__
    try:
        ch01.check_by_hand.__code__ = _do_nothing_code(ch01.check_by_hand)
        with pytest.raises(CheckFailure, match="check_by_hand was modified in place"):
            ch01.check_split_heads(split_right)
    finally:
        ch01.check_by_hand.__code__ = original


def test_patched_diagnosis_and_torch_are_detected(restore):
    diagnosis.describe_difference = lambda *args: None
    torch.allclose = lambda *args, **kwargs: True
    with pytest.raises(
        CheckFailure,
        match=r"diagnosis.describe_difference was replaced.*torch.allclose was replaced",
    ):
        ch01.check_split_heads(lambda x, h: x)


def test_a_lookalike_module_in_the_notebook_namespace_is_detected(restore, monkeypatch):
    main = sys.modules["__main__"]
    monkeypatch.setattr(
        main,
        "ch01",
        type("Fake", (), {"check_split_heads": staticmethod(lambda fn: None)}),
        raising=False,
    )
    with pytest.raises(
        CheckFailure, match="the notebook's 'ch01' is not tformer_grading.checks.ch01"
    ):
        diagnosis.passed("split_heads", "ok")


def test_a_tensor_subclass_cannot_fake_equality():
    class AlwaysEqual(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if func in (torch.allclose, torch.equal):
                return True
            return super().__torch_function__(func, types, args, kwargs or {})

    def cheat(x, h):
        return torch.zeros(
            x.size(0), h, x.size(1), x.size(2) // h, dtype=x.dtype
        ).as_subclass(AlwaysEqual)

    with pytest.raises(CheckFailure, match="tensor subclass AlwaysEqual"):
        ch01.check_split_heads(cheat)


def test_switching_off_the_call_recorder_is_detected():
    from tformer_ref import heads

    def sneaky(x, h):
        sys.setprofile(None)
        return heads.split_heads(x, h)

    with pytest.raises(CheckFailure, match="changed sys.setprofile"):
        ch01.check_by_hand("split_heads", sneaky, (torch.randn(2, 3, 8), 2))


def test_learner_stderr_and_warnings_do_not_reach_stderr(capfd):
    import warnings

    def noisy(x, h):
        warnings.warn("learner warning")
        print("learner debug", file=sys.stderr)
        return split_right(x, h)

    ch01.check_split_heads(noisy)
    ch01.check_by_hand("split_heads", noisy, (torch.randn(2, 3, 8), 2))
    captured = capfd.readouterr()
    assert captured.err == "" and captured.out.count("✓ split_heads") == 2


def test_receipts_are_signed_only_with_the_grading_key():
    sign, install_key = receipts._make_signer()  # what the grader's kernel holds
    assert sign("✓ split_heads: ok") == "✓ split_heads: ok"  # no key: unsigned
    install_key("k" * 32)
    with pytest.raises(RuntimeError, match="set once"):
        install_key("x" * 32)  # a notebook cannot put in a key of its own
    text = sign("✓ split_heads: ok") + "\n" + sign("✓ split_heads: ok") + "\n"
    assert valid_receipts(text, "k" * 32) == [1, 2]
    assert valid_receipts(text, "x" * 32) == []
    forged = re.sub(r":[0-9a-f]{16}\]", ":0123456789abcdef]", text)
    assert valid_receipts(forged, "k" * 32) == []
    assert (
        valid_receipts("✓ split_heads: ok\n", "k" * 32) == []
    )  # an unsigned success line counts for nothing


def test_expected_receipts_count_the_check_calls_of_a_cell():
    assert (
        expected_receipts(
            "ch01.check_split_heads(split_heads)\n### BEGIN HIDDEN TESTS\n"
            "ch01.check_by_hand('s', split_heads, (x, 2))\n### END HIDDEN TESTS"
        )
        == 2
    )
    assert (
        expected_receipts("# Hidden test: ch01.check_x(y) is in a comment\nprint(1)")
        == 0
    )


def test_a_reference_function_patched_before_it_was_sealed_is_found_from_its_source():
    """The seal of a module records it as first seen; its functions are also compared with the file."""
    from tformer_ref import heads

    original = heads.merge_heads.__code__
    try:
        heads.merge_heads.__code__ = (lambda x: x).__code__
        assert integrity._disk_problems(heads) == [
            "tformer_ref.heads.merge_heads is not the function in heads.py"
        ]
    finally:
        heads.merge_heads.__code__ = original
    assert integrity._disk_problems(heads) == []


def test_a_helper_module_global_rebound_before_the_first_check_is_detected():
    """Bug: only chNN.py sealed itself at import, so the shared helpers were first recorded
    at the first check, after the answer cells had run; a rebound global (here the folder
    the delegation recorder treats as the reference) became the baseline. Guard: every
    module of the check machinery ends with seal(__name__)."""
    from tformer_grading.checks import delegation

    saved = delegation.REFERENCE_DIR
    try:
        delegation.REFERENCE_DIR = "/nowhere/"
        with pytest.raises(CheckFailure, match="delegation.REFERENCE_DIR was replaced"):
            ch01.check_split_heads(split_right)
    finally:
        delegation.REFERENCE_DIR = saved
    assert integrity.integrity_problems() == []


def test_a_learners_own_module_named_like_a_helper_is_not_a_lookalike(monkeypatch):
    """Only the notebook's chNN names are the checks' names: `from tformer_ref import blocks`
    in a chapter-4 notebook must not make every check fail."""
    import tformer_ref.blocks

    monkeypatch.setattr(
        sys.modules["__main__"], "blocks", tformer_ref.blocks, raising=False
    )
    monkeypatch.setattr(
        sys.modules["__main__"],
        "cases",
        types.SimpleNamespace(check_x=1),
        raising=False,
    )
    assert integrity.integrity_problems() == []
