"""Chapter 2 graded with the real nbgrader CLI: generate -> autograde -> feedback.

One autograde run grades a small class: the solution, the untouched student version,
and one buggy submission per diagnosed pitfall. Each must score exactly what it
deserves, and the feedback must name the pitfall.
"""
import pytest

from course import autograde, feedback_text, filled, make_course, nbgrader, released, scores, solution_sources, submit

CHAPTER = "ch02_attention"
FULL = {"test_attention": 4, "test_attention_by_hand": 1, "test_attention_entropy": 2}

ATTENTION = '''
def attention(q, k, v):
    scores = {scores}
    weights = scores.softmax(dim={dim})
    return {out}, weights
'''
RIGHT_SCORES = "q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))"
NO_SCALING = ATTENTION.format(scores="q @ k.transpose(-2, -1)", dim=-1, out="weights @ v")
SQRT_D_MODEL = ATTENTION.format(scores="q @ k.transpose(-2, -1) / math.sqrt(q.size(1) * q.size(-1))", dim=-1,
                                out="weights @ v")
SOFTMAX_QUERIES = ATTENTION.format(scores=RIGHT_SCORES, dim=2, out="weights @ v")
CALLS_SDPA = ATTENTION.format(scores=RIGHT_SCORES, dim=-1,
                              out="torch.nn.functional.scaled_dot_product_attention(q, k, v)")
ENTROPY_NAN = '''
def attention_entropy(weights):
    return -(weights * weights.log()).sum(dim=-1)
'''

# student -> (answer cells replaced, cells that must score 0, text the feedback must contain)
BUGGY = {
    "no_scaling": ({"attention": NO_SCALING}, ("test_attention",), "'no scaling'"),
    "sqrt_d_model": ({"attention": SQRT_D_MODEL}, ("test_attention",), "'scaled by sqrt(d_model)'"),
    "softmax_queries": ({"attention": SOFTMAX_QUERIES}, ("test_attention",), "'softmax over the wrong axis (queries)'"),
    "calls_sdpa": ({"attention": CALLS_SDPA}, ("test_attention_by_hand",), "calls scaled_dot_product_attention"),
    "entropy_nan": ({"attention_entropy": ENTROPY_NAN}, ("test_attention_entropy",), "'0·log 0 gives NaN'"),
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    course = make_course(tmp_path_factory.mktemp("ch02"), CHAPTER)
    student_nb = released(course, CHAPTER)
    right = solution_sources(CHAPTER)
    submit(course, CHAPTER, "solution", filled(student_nb, right))
    submit(course, CHAPTER, "untouched", student_nb)
    for student, (answers, _, _) in BUGGY.items():
        submit(course, CHAPTER, student, filled(student_nb, {**right, **answers}))
    autograde(course, CHAPTER)
    nbgrader(course, "generate_feedback", CHAPTER, "--force")
    return course, scores(course, CHAPTER)


pytestmark = pytest.mark.slow


def test_solution_scores_full_marks(graded):
    _, got = graded
    assert got["solution"] == FULL


def test_untouched_student_version_scores_zero(graded):
    _, got = graded
    assert got["untouched"] == {cell: 0 for cell in FULL}


@pytest.mark.parametrize("student", sorted(BUGGY))
def test_buggy_submission_loses_exactly_its_cells(graded, student):
    course, got = graded
    _, broken, diagnosis = BUGGY[student]
    assert got[student] == {cell: (0 if cell in broken else pts) for cell, pts in FULL.items()}
    assert diagnosis in feedback_text(course, CHAPTER, student)


def test_hidden_tests_are_not_in_the_student_version_but_are_graded(graded):
    course, _ = graded
    text = (course / "release" / CHAPTER / "exercise.ipynb").read_text()
    assert "check_attention_by_hand" not in text and "BEGIN HIDDEN TESTS" not in text
    assert "check_attention_by_hand" in (course / "autograded" / "calls_sdpa" / CHAPTER / "exercise.ipynb").read_text()
