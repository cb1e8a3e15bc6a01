"""Learner self-grading: ``python -m tformer_grading NOTEBOOK`` on a copy of the course.

The same notebook is graded twice: with solutions/ present (hidden tests included) and
in a copy of the course without solutions/ (visible checks only, and the report says
so).

Issue 32, item 4: honest notebooks fell through, measured on main. A chapter-1
notebook in the chapter-2 folder printed 55 lines of nbgrader's traceback (KeyError:
'attention'), as did one whose nbgrader marks were lost (57 lines, KeyError:
'split_heads') and one whose tags Jupyter's schema refuses (59 lines); four malformed
notebooks were "a bug in the course's grader, not in your notebook": a grade_id that
is a list (TypeError), cell metadata that is a list in a notebook outside a chapter
folder (AttributeError), JSON nested 100,000 deep (RecursionError), a 5,001-digit
number (ValueError); in the learner kit, a notebook whose marks were lost was graded
"Total: 0 / 0" without a word. Cause: the preflight passed what nbgrader then failed
on, and the command printed nbgrader's log whatever failed. Guard: the preflight
repairs what it can and names what it cannot in one line, before any process starts;
what nbgrader still fails on is the grader's, said so in one line, its log in a file.
"""

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from course import PASTED_IMAGE, ROOT, filled, solution_sources
from learners import MERGE_NO_TRANSPOSE, MHA_CALLS_SDPA

from tformer_grading import selfgrade
from tformer_grading.course import chapter_of, chapters

CHAPTER = "ch01_shapes"
# merge_heads without transpose: its own cell and the MHA comparison fail; the behaviour
# probes still pass.
# The MHA calls PyTorch's attention: only the hidden test sees it.
EXPECTED_HIDDEN = {
    "test_split_heads": 2,
    "test_merge_heads": 0,
    "test_mha_matches_reference": 0,
    "test_mha_behaviour": 2,
    "test_mha_written_by_hand": 0,
}


# A learner's own cell between the first two graded cells: the two progress lines are
# at least this far apart only if each is printed as its cell finishes.
PAUSE = 1.5
SCRATCH = f"import time\ntime.sleep({PAUSE})  # my own cell: trying things out"


def _course_copy(
    tmp_path,
    with_solutions: bool,
    unanswered: tuple[str, ...] = (),
    scratch_after: str | None = None,
):
    course = tmp_path / "course"
    (course / "book" / CHAPTER).mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copy(ROOT / "book" / CHAPTER / "exercise.ipynb", course / "book" / CHAPTER)
    if with_solutions:
        shutil.copytree(ROOT / "solutions" / CHAPTER, course / "solutions" / CHAPTER)
    student = nbformat.read(ROOT / "book" / CHAPTER / "exercise.ipynb", as_version=4)
    mine = course / "book" / CHAPTER / "my_attempt.ipynb"
    answers = {
        **solution_sources(CHAPTER),
        "merge_heads": MERGE_NO_TRANSPOSE,
        "multi_head_attention": MHA_CALLS_SDPA,
    }
    for cell in unanswered:  # left as released: the placeholder still raises
        answers.pop(cell)
    attempt = filled(student, answers)
    if scratch_after:
        at = next(
            i
            for i, cell in enumerate(attempt.cells)
            if cell.metadata.get("nbgrader", {}).get("grade_id") == scratch_after
        )
        attempt.cells.insert(at + 1, nbformat.v4.new_code_cell(SCRATCH))
    nbformat.write(attempt, mine)
    return course, mine


def _grade(mine, *extra):
    """Run the learner's command; also return when each line of its output arrived."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tformer_grading", str(mine), *extra],
        cwd=mine.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    arrivals = [(time.perf_counter() - started, line) for line in proc.stdout]
    stderr = proc.stderr.read()
    proc.wait(timeout=600)
    out = "".join(line for _, line in arrivals)
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, stderr)
    return done, time.perf_counter() - started, arrivals


@pytest.mark.slow
def test_self_grading_prints_points_total_and_diagnoses(tmp_path):
    first = next(iter(EXPECTED_HIDDEN))
    course, mine = _course_copy(tmp_path, with_solutions=True, scratch_after=first)
    proc, seconds, arrivals = _grade(mine)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    print(out, f"\nwall time {seconds:.1f} s")
    assert "Hidden tests included" in out
    report = out.split("\nGrading ", 1)[1]  # after the progress lines
    for cell, points in EXPECTED_HIDDEN.items():
        max_points = {"test_mha_matches_reference": 4}.get(cell, 2)
        assert (
            f"{cell}" in report
            and f" {points} / {max_points}" in report.split(cell, 1)[1].splitlines()[0]
        )
    assert "Total: 4 / 12" in out
    assert "merged without transpose" in out and "§1.6 'Merging heads back'" in out
    assert "calls scaled_dot_product_attention" in out
    assert proc.stderr == ""
    from tformer_grading.sandbox import availability

    sandbox = "Graded in a sandbox" if availability() is None else "Not sandboxed: "
    assert sandbox in out
    # Progress: a line per graded cell, in the notebook's order, each printed as
    # nbgrader finishes the cell (not all at once at the end): the learner's sleeping
    # cell separates the first two lines. A wall-time gap to the report was measured
    # here before, and failed on a fast run (0.91 s < 1 s): a pause the test sets
    # itself can only be widened by a slower machine.
    progress = [
        (at, line.split(":")[0].split()[-1])
        for at, line in arrivals
        if line.startswith("  graded ")
    ]
    assert [cell for _, cell in progress] == list(EXPECTED_HIDDEN)
    assert "graded test_merge_heads: fails" in out
    assert "graded test_split_heads: passes" in out
    assert progress[1][0] - progress[0][0] >= PAUSE, arrivals


@pytest.mark.slow
def test_without_solutions_only_visible_checks_run_and_the_report_says_so(tmp_path):
    # merge_heads is left as released: its check and the MHA checks that call it are
    # "not answered yet", not a list of wrong cases.
    course, mine = _course_copy(
        tmp_path, with_solutions=False, unanswered=("merge_heads",)
    )
    proc, _, _ = _grade(mine, "--json", "--timeout", "30", "--no-sandbox")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["hidden_tests"] is False
    assert result["sandboxed"] is False  # asked for: the report says "Not sandboxed"
    cells = {c["grade_id"]: c["score"] for c in result["cells"]}
    # The hidden delegation test did not run: its cell "passes" with nothing in it, so
    # it is marked hidden and its points are left out of the total.
    assert cells == {
        **EXPECTED_HIDDEN,
        "test_mha_written_by_hand": 2,
        "test_mha_behaviour": 0,
    }
    hidden = {c["grade_id"] for c in result["cells"] if c["hidden"]}
    assert hidden == {"test_mha_written_by_hand"}
    assert result["max_score"] == 10 and result["score"] == 2
    blank = {c["grade_id"] for c in result["cells"] if c["unanswered"]}
    assert blank == {
        "test_merge_heads",
        "test_mha_matches_reference",
        "test_mha_behaviour",
    }
    assert all(
        "Not answered yet" in c["diagnosis"] for c in result["cells"] if c["unanswered"]
    )
    text = selfgrade.report(
        selfgrade.Result(
            result["chapter"],
            result["hidden_tests"],
            [selfgrade.CellResult(**c) for c in result["cells"]],
        ),
        mine,
    )
    assert "Visible checks only" in text and "Total: 2 / 10" in text
    # The notebook's headings promise 12 points: the total says where the other 2 are.
    assert "the exercise's 12 points include 2 for hidden tests" in text
    by_hand = next(line for line in text.splitlines() if "written_by_hand" in line)
    assert "hidden test, not run here" in by_hand
    merge = next(line for line in text.splitlines() if "test_merge_heads" in line)
    assert "not answered yet" in merge
    assert "wrong on" not in text and "cases" not in text


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
    notebook = ROOT / "book" / CHAPTER / "exercise.ipynb"
    assert chapter_of(notebook, ROOT, chapters(ROOT)) == CHAPTER


def _python(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """This interpreter run with ``args`` in ``cwd``, its output captured."""
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_a_notebook_outside_a_course_is_a_clear_error(tmp_path):
    path = tmp_path / "exercise.ipynb"
    shutil.copy(ROOT / "book" / CHAPTER / "exercise.ipynb", path)
    proc = _python(tmp_path, "-m", "tformer_grading", str(path))
    assert proc.returncode == 2 and "no nbgrader_config.py" in proc.stderr


# Runs the learner's command, then says how many processes it started (nbgrader and
# the kernel run in child processes) and which heavy modules it had imported itself.
_STARTED_AT_EXIT = """
import runpy, subprocess, sys
started = []
_init = subprocess.Popen.__init__
def _record(self, args, *rest, **kwargs):
    started.append(args)
    _init(self, args, *rest, **kwargs)
subprocess.Popen.__init__ = _record
sys.argv[0] = "tformer_grading"
try:
    runpy.run_module("tformer_grading", run_name="__main__", alter_sys=True)
finally:
    heavy = {"torch", "nbgrader", "jupyter_client", "nbclient"} & set(sys.modules)
    print(f"processes started: {len(started)}; heavy modules:", *sorted(heavy))
"""


@pytest.mark.parametrize(
    "content, extra, message",
    [
        (None, (), "no such notebook"),
        (b'{"cells": [', (), "is not valid JSON (line 1, column 12"),
        (b'\xff\xfe{"cells": []}', (), "is not UTF-8 text (byte 0xff at offset 0)"),
        (b'{"cells": [], "nbformat": 3}', (), "only format 4"),
        pytest.param(
            b'{"cells": [], "nbformat": 4, "x": ' + b"[" * 10**5 + b"]" * 10**5 + b"}",
            (),
            "JSON nested too deeply to be a notebook",
            id="nested-100000-deep",
        ),
        pytest.param(
            b'{"cells": [], "nbformat": 4, "x": 1' + b"0" * 5000 + b"}",
            (),
            "holds a number of thousands of digits",
            id="a-5001-digit-number",
        ),
        (
            None,
            ("--chapter", "ch99_nothing"),
            "--chapter ch99_nothing: no such chapter",
        ),
    ],
)
def test_a_broken_notebook_is_a_clear_error_before_any_kernel(
    tmp_path, content, extra, message
):
    """Said before nbgrader, a kernel or PyTorch starts, and without a traceback.

    Guards against a learner waiting for a kernel to tell them their file is not a
    notebook. Shown by what the command had started and imported when it exited: a
    time limit would fail on a loaded machine and pass a slow path that runs fast."""
    course, mine = _course_copy(tmp_path, with_solutions=False)
    if content is not None:
        mine.write_bytes(content)
    elif not extra:
        mine.unlink()
    proc = _python(course, "-c", _STARTED_AT_EXIT, str(mine), *extra)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    said = proc.stdout.splitlines()[-1]
    assert said == "processes started: 0; heavy modules:", proc.stdout


@pytest.mark.slow
def test_a_hidden_test_that_did_not_run_is_not_said_to_pass(tmp_path):
    """Bug (issue 29, reader review 2026-12-05 §10): without solutions/, the progress
    line said "graded test_mha_written_by_hand: passes" and the summary "hidden test,
    not run here". Cause: only the comments of a hidden test are left, so the cell runs
    clean. Guard: the progress line says what the summary says."""
    course, mine = _course_copy(tmp_path, with_solutions=False)
    seen = []
    selfgrade.grade_notebook(mine, on_cell=seen.append, sandbox=False)
    lines = {cell.grade_id: cell.line() for cell in seen}
    assert "hidden test, not run here" in lines["test_mha_written_by_hand"]
    assert "graded test_split_heads: passes" in lines["test_split_heads"]


def test_a_learner_without_a_sandbox_is_told_plainly_not_alarmed(monkeypatch):
    """Bug (reader review 2026-12-05): on a Mac, or on Linux without bubblewrap, the
    self-grade of a learner's own notebook printed "UNPROTECTED ... apt install
    bubblewrap". Cause: the report used the class command's refusal tone for a learner
    who has nothing to be protected from. Guard: the report says it ran unsandboxed and
    that this is fine for one's own code; off Linux it does not suggest apt."""
    from tformer_grading.sandbox import bwrap

    bwrap.availability.cache_clear()
    monkeypatch.setattr(bwrap.sys, "platform", "darwin")
    try:
        why = bwrap.availability()
    finally:
        bwrap.availability.cache_clear()
    assert why == "bubblewrap, the grading sandbox, runs on Linux only"
    result = selfgrade.Result("ch01_shapes", False, unsandboxed=why)
    text = selfgrade.report(result, Path("exercise.ipynb"))
    assert "Not sandboxed: bubblewrap, the grading sandbox, runs on Linux only." in text
    assert "fine for your own notebook" in text
    assert "UNPROTECTED" not in text and "apt" not in text
    assert not [line for line in text.splitlines() if line[:12].isupper()]


# --------------------------------------------------------------------------- issue 32
# (the module docstring says what each test below guards)


def _right(chapter: str = CHAPTER) -> nbformat.NotebookNode:
    student = nbformat.read(ROOT / "book" / chapter / "exercise.ipynb", as_version=4)
    return filled(student, solution_sources(chapter))


def _with_chapter_two(course: Path) -> None:
    for folder in ("book", "solutions"):
        (course / folder / "ch02_attention").mkdir(parents=True)
        shutil.copy(
            ROOT / folder / "ch02_attention" / "exercise.ipynb",
            course / folder / "ch02_attention",
        )


def _one_line_error(proc) -> str:
    """The command's error, which must be one line and no traceback."""
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


@pytest.mark.parametrize("asked", [(), ("--chapter", "ch02_attention")])
def test_another_chapters_notebook_is_named_in_one_line_before_any_process(
    tmp_path, asked
):
    course, _ = _course_copy(tmp_path, with_solutions=True)
    _with_chapter_two(course)
    folder = "ch01_shapes" if asked else "ch02_attention"
    mine = course / "book" / folder / "my_ch01.ipynb"
    nbformat.write(_right(), mine)
    proc = _python(course, "-c", _STARTED_AT_EXIT, str(mine), *asked)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    where = (
        "not ch02_attention's:"
        if asked
        else "found in the ch02_attention folder: move it to book/ch01_shapes/, or"
    )
    assert _one_line_error(proc) == (
        f"error: this is the ch01_shapes notebook, {where} grade it with --chapter "
        "ch01_shapes"
    )
    assert proc.stdout.splitlines()[-1] == "processes started: 0; heavy modules:"


@pytest.mark.slow
def test_an_odd_but_honest_notebook_is_graded_in_full_with_notes(tmp_path):
    """A right notebook as a learner's tools left it: saved with a byte-order mark, a
    pasted image, every cell's metadata cleared (nbconvert's ClearMetadata, as a
    pre-commit hook runs it) and then an answer cell's grade_id a list, and tags that
    are a string. Graded 12 / 12, each repair a note."""
    from nbconvert.preprocessors import ClearMetadataPreprocessor

    _, mine = _course_copy(tmp_path, with_solutions=True)
    nb, _ = ClearMetadataPreprocessor().preprocess(_right(), {})
    nb.cells.insert(2, nbformat.from_dict(PASTED_IMAGE))
    answer = next(c for c in nb.cells if "def split_heads" in "".join(c.source))
    answer.metadata["nbgrader"] = {"grade_id": ["split_heads"]}
    nb.cells[0].metadata["tags"] = "mine"
    mine.write_bytes(b"\xef\xbb\xbf" + nbformat.writes(nb).encode())
    proc, seconds, _ = _grade(mine)
    print(proc.stdout, f"\nwall time {seconds:.1f} s")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert "Total: 12 / 12" in proc.stdout
    assert (
        "Note: the nbgrader marks of 9 cells were lost or damaged and put back from "
        "the assignment" in proc.stdout
    )
    assert "Note: cell 1: metadata 'tags' is not what Jupyter writes" in proc.stdout


def test_a_notebook_outside_a_chapter_folder_with_odd_metadata_is_placed(tmp_path):
    nb = json.loads(nbformat.writes(_right()))
    nb["cells"][0]["metadata"] = []
    nb["cells"][2]["metadata"] = {"nbgrader": "mine"}
    mine = tmp_path / "my_copy.ipynb"
    mine.write_bytes(b"\xef\xbb\xbf" + json.dumps(nb).encode())
    assert chapter_of(mine, ROOT, chapters(ROOT)) == CHAPTER


def _with_config(course: Path, line: str) -> None:
    with open(course / "nbgrader_config.py", "a") as f:
        f.write(f"\n{line}\n")


@pytest.mark.slow
def test_when_nbgrader_fails_the_grader_is_blamed_in_one_line_with_its_log(tmp_path):
    """An instructor's typo in nbgrader_config.py: nbgrader fails on a right notebook.
    The learner reads whose problem it is, and where nbgrader's log is to report."""
    course, mine = _course_copy(tmp_path, with_solutions=True)
    _with_config(
        course, 'c.Autograde.autograde_preprocessors = ["tformer_grading.no_such.Step"]'
    )
    proc, _, _ = _grade(mine)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    line = _one_line_error(proc)
    assert line.startswith(
        "error: the grader failed (ModuleNotFoundError: No module named "
        "'tformer_grading.no_such'). This is a bug in the course's grader, not in "
        "your notebook: please report it, with nbgrader's log: "
    )
    log = Path(line.rsplit(": ", 1)[1])
    try:
        assert "Traceback" in log.read_text()
    finally:
        log.unlink()


@pytest.mark.slow
def test_a_notebook_past_its_time_limit_is_the_notebooks_problem(tmp_path):
    course, mine = _course_copy(tmp_path, with_solutions=True)
    _with_config(course, "c.GuardedExecute.notebook_timeout = 3")
    nb = _right()
    nb.cells.insert(2, nbformat.v4.new_code_cell("import time\ntime.sleep(6)"))
    nbformat.write(nb, mine)
    proc, _, _ = _grade(mine)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert _one_line_error(proc) == (
        "error: my_attempt.ipynb could not be graded: the notebook ran past its time "
        "limit of 3 s"
    )


def test_a_kit_notebook_that_lost_its_marks_says_what_to_do(tmp_path):
    """In a copy of the course without solutions/ nor git (the learner kit), the
    learner's own exercise.ipynb is all there is to restore the checks from: with its
    marks lost, nothing can be matched. Said in one line, before any kernel."""
    from nbconvert.preprocessors import ClearMetadataPreprocessor

    course, _ = _course_copy(tmp_path, with_solutions=False)
    mine = course / "book" / CHAPTER / "exercise.ipynb"
    lost, _ = ClearMetadataPreprocessor().preprocess(_right(), {})
    nbformat.write(lost, mine)
    proc = _python(course, "-m", "tformer_grading", str(mine))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert _one_line_error(proc) == (
        "error: exercise.ipynb has no graded cells (their nbgrader marks were lost), "
        "and this copy of the course has neither solutions/ nor the exercise as "
        "released to match them with: download the assignment again and copy your "
        "answers in"
    )


@pytest.mark.slow
def test_a_failed_checks_picture_is_saved_and_its_path_printed(tmp_path):
    """A terminal shows no picture: the self-grade saves each failed check's picture
    beside the notebook and prints where."""
    chapter = "ch03_masks"
    course = tmp_path / "course"
    (course / "book" / chapter).mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(ROOT / "solutions" / chapter, course / "solutions" / chapter)
    student = nbformat.read(ROOT / "book" / chapter / "exercise.ipynb", as_version=4)
    answers = solution_sources(chapter)
    mine = course / "book" / chapter / "my_attempt.ipynb"
    answers["causal_mask"] = answers["causal_mask"].replace(".tril()", ".triu()")
    nbformat.write(filled(student, answers), mine)
    proc, _, _ = _grade(mine)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    saved = course / "book" / chapter / "my_attempt_pictures" / "test_causal_mask.png"
    assert f"Picture (open it to see): {saved}" in proc.stdout
    assert saved.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(list(saved.parent.iterdir())) == 1  # the probes' failure draws none


def test_grading_again_replaces_the_last_pictures(tmp_path):
    from tformer_grading.selfgrade import (
        CellResult,
        Result,
        _save_pictures,
        pictures_folder,
    )

    notebook = tmp_path / "exercise.ipynb"
    folder = pictures_folder(notebook)
    folder.mkdir()
    (folder / "test_causal_mask.png").write_bytes(b"\x89PNG old")
    result = Result("ch03_masks", True)
    result.cells = [
        CellResult("test_causal_mask", 2, 2),  # passes now: its old picture goes
        CellResult("test_padding_mask", 0, 2),
    ]
    _save_pictures(result, {"test_padding_mask": [b"\x89PNG new"]}, notebook)
    assert sorted(p.name for p in folder.iterdir()) == ["test_padding_mask.png"]
    assert result.cells[1].pictures == [str(folder / "test_padding_mask.png")]
