"""Learner self-grading: ``python -m tformer_grading NOTEBOOK`` on a copy of the course.

The same notebook is graded twice: with solutions/ present (hidden tests included) and in a copy of
the course without solutions/ (visible checks only, and the report says so).
"""

import json
import shutil
import subprocess
import sys
import time

import nbformat
import pytest

from course import ROOT, filled, solution_sources
from learners import MERGE_NO_TRANSPOSE, MHA_CALLS_SDPA
from tformer_grading import selfgrade
from tformer_grading.course import chapter_of, chapters

CHAPTER = "ch01_shapes"
# merge_heads without transpose: its own cell and the MHA comparison fail; the behaviour probes still pass.
# The MHA calls PyTorch's attention: only the hidden test sees it.
EXPECTED_HIDDEN = {
    "test_split_heads": 2,
    "test_merge_heads": 0,
    "test_mha_matches_reference": 0,
    "test_mha_behaviour": 2,
    "test_mha_written_by_hand": 0,
}


def _course_copy(tmp_path, with_solutions: bool):
    course = tmp_path / "course"
    (course / "book" / CHAPTER).mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copy(ROOT / "book" / CHAPTER / "exercise.ipynb", course / "book" / CHAPTER)
    if with_solutions:
        shutil.copytree(ROOT / "solutions" / CHAPTER, course / "solutions" / CHAPTER)
    student = nbformat.read(ROOT / "book" / CHAPTER / "exercise.ipynb", as_version=4)
    mine = course / "book" / CHAPTER / "my_attempt.ipynb"
    nbformat.write(
        filled(
            student,
            {
                **solution_sources(CHAPTER),
                "merge_heads": MERGE_NO_TRANSPOSE,
                "multi_head_attention": MHA_CALLS_SDPA,
            },
        ),
        mine,
    )
    return course, mine


def _grade(mine, *extra):
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "tformer_grading", str(mine), *extra],
        cwd=mine.parent,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return proc, time.perf_counter() - started


@pytest.mark.slow
def test_self_grading_prints_points_total_and_diagnoses(tmp_path):
    course, mine = _course_copy(tmp_path, with_solutions=True)
    proc, seconds = _grade(mine)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    print(out, f"\nwall time {seconds:.1f} s")
    assert "Hidden tests included" in out
    for cell, points in EXPECTED_HIDDEN.items():
        max_points = {"test_mha_matches_reference": 4}.get(cell, 2)
        assert (
            f"{cell}" in out
            and f" {points} / {max_points}" in out.split(cell, 1)[1].splitlines()[0]
        )
    assert "Total: 4 / 12" in out
    assert "merged without transpose" in out and "§1.6 'Merging heads back'" in out
    assert "calls scaled_dot_product_attention" in out
    assert proc.stderr == ""


@pytest.mark.slow
def test_without_solutions_only_visible_checks_run_and_the_report_says_so(tmp_path):
    course, mine = _course_copy(tmp_path, with_solutions=False)
    proc, _ = _grade(mine, "--json", "--timeout", "30")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["hidden_tests"] is False
    cells = {c["grade_id"]: c["score"] for c in result["cells"]}
    # The hidden delegation test did not run, so that cell passes here although the instructor's grade is 0.
    assert cells == {**EXPECTED_HIDDEN, "test_mha_written_by_hand": 2}
    text = selfgrade.report(
        selfgrade.Result(
            result["chapter"],
            result["hidden_tests"],
            [selfgrade.CellResult(**c) for c in result["cells"]],
        ),
        mine,
    )
    assert "VISIBLE CHECKS ONLY" in text and "Total: 6 / 12" in text


def test_an_edited_check_cell_cannot_pass_in_visible_only_mode(tmp_path):
    student = nbformat.read(ROOT / "book" / CHAPTER / "exercise.ipynb", as_version=4)
    for cell in student.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "test_split_heads":
            cell.source = "pass"
    path = tmp_path / "exercise.ipynb"
    nbformat.write(student, path)
    source = selfgrade._visible_source(path)
    cell = next(
        c
        for c in source.cells
        if c.metadata.get("nbgrader", {}).get("grade_id") == "test_split_heads"
    )
    assert cell.source.startswith("raise AssertionError('this check cell was edited")


def test_chapters_are_discovered_from_the_solutions_folder():
    assert CHAPTER in chapters(ROOT)
    assert chapter_of(ROOT / "book" / CHAPTER / "exercise.ipynb", ROOT) == CHAPTER


def test_a_notebook_outside_a_course_is_a_clear_error(tmp_path):
    path = tmp_path / "exercise.ipynb"
    shutil.copy(ROOT / "book" / CHAPTER / "exercise.ipynb", path)
    proc = subprocess.run(
        [sys.executable, "-m", "tformer_grading", str(path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "no nbgrader_config.py" in proc.stderr
