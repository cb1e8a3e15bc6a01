"""Class grading never loses, misdates or drops an honest learner's work (issue 31).

Bugs, found by an instructor's trial on the landed main, with the sandbox on:
- pointed at nbgrader's own ``submitted/`` folder (``--submissions submitted``), the
  command deleted every learner's notebook before reading it. Cause: it used the
  course's ``submitted/`` as its working folder and emptied each learner's folder
  first. Guard: the copies it grades go to ``<out>/submitted``; each layout below is
  hashed before and after grading.
- every on-time learner was graded late. Cause: the command wrote the time it graded
  into ``timestamp.txt``. Guard: the hand-in time is read (nbgrader's
  ``timestamp.txt``, else the file's time); a due date and nbgrader's late penalty
  grade an on-time and a late learner apart.
- one folder named ``jos\\xe9`` stopped the class (exit 3), names with a newline or a
  leading ``-`` or a link were "not graded", and a learner's exception text with
  ``$\\frac{$`` crashed the plot. Guard: safe ids, text written as data, one
  learner's failure is that learner's status; the class is graded twice, the same.

Issue 32, item 4, measured on main: honest notebooks fell through. A pasted image
(JupyterLab keeps it as the cell's attachment) was graded without a feedback page
("nbgrader could not write its page"); a notebook whose nbgrader marks were lost was
"not graded: nbgrader could not grade it: KeyError: 'split_heads'"; one whose tags
Jupyter's schema refuses, "NotebookValidationError"; one whose grade_id is a list,
"the grader failed on this submission (TypeError: unhashable type: 'list')"; a
chapter-2 notebook handed in for chapter 1, "KeyError: 'split_heads'" and five notes.
Guard: the preflight keeps attachments, matches lost or damaged marks to the
assignment's cells, leaves out refused metadata, and names another chapter's
notebook; the odd class (honest learners first and last) has one learner of each,
graded twice.

Every run here is the real instructor command with the real nbgrader and sandbox.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import signal
import subprocess
import time
import zipfile
from pathlib import Path

import nbformat
import pytest
from nbconvert.preprocessors import ClearMetadataPreprocessor

from course import (
    PASTED_IMAGE,
    ROOT,
    filled,
    make_course,
    nbgrader,
    needs_sandbox,
    released,
    solution_sources,
)
from hostile import CHAPTER, class_command
from tformer_grading.course import read_scores
from tformer_grading.learner_text import shown, student_id

pytestmark = pytest.mark.slow
ON_TIME = "2026-11-29 10:00:00.000000 UTC"  # the due date below is 2026-11-30
LATE = "2026-12-02 09:00:00.000000 UTC"


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    needs_sandbox()
    return make_course(tmp_path_factory.mktemp("classgrade"), CHAPTER)


def right(course: Path) -> bytes:
    nb = filled(released(course, CHAPTER), solution_sources(CHAPTER))
    return nbformat.writes(nb).encode()


def untouched(course: Path) -> bytes:
    return nbformat.writes(released(course, CHAPTER)).encode()


def put(path: Path, data: bytes, when: str | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    if when:
        (path.parent / "timestamp.txt").write_text(when)


def fingerprint(path: Path) -> dict:
    """Every entry under ``path`` (or the file itself): bytes, mode and mtime."""
    if path.is_file():
        return {str(path): (hashlib.sha256(path.read_bytes()).hexdigest(),)}
    out = {}
    for entry in sorted(path.rglob("*")):
        info = entry.lstat()
        body = entry.read_bytes() if entry.is_file() and not entry.is_symlink() else b""
        out[str(entry)] = (
            hashlib.sha256(body).hexdigest(),
            info.st_mode,
            info.st_mtime_ns,
        )
    return out


def grades(out: Path) -> dict[str, dict]:
    with open(out / "grades.csv", newline="") as f:
        return {row["student_id"]: row for row in csv.DictReader(f)}


# Each layout: (the --submissions path, built under tmp) -> {learner id: raw score}.
def nbgrader_submitted(course, tmp):
    put(
        course / "submitted" / "sub_ann" / CHAPTER / "exercise.ipynb",
        right(course),
        when=ON_TIME,
    )
    return course / "submitted", {"sub_ann": 12.0}


def exchange_inbound(course, tmp):
    inbound = tmp / "exchange" / "course101" / "inbound"
    old = inbound / f"inb_ann+{CHAPTER}+2026-11-28 08:00:00.000000 UTC+cmFuZG9t"
    new = inbound / f"inb_ann+{CHAPTER}+{ON_TIME}+b3RoZXI="
    put(old / "exercise.ipynb", untouched(course), when="2026-11-28 08:00:00 UTC")
    put(new / "exercise.ipynb", right(course), when=ON_TIME)
    return inbound, {"inb_ann": 12.0}  # the newest hand-in, not the untouched one


def folder_per_learner(course, tmp):
    put(tmp / "collected" / "flat_ann" / "exercise.ipynb", right(course))
    return tmp / "collected", {"flat_ann": 12.0}


def lms_files(course, tmp):
    put(tmp / "canvas" / "leeann_4417_90210_exercise.ipynb", right(course))
    return tmp / "canvas", {"leeann_4417_90210": 12.0}


def lms_folders(course, tmp):
    folder = tmp / "moodle" / "Ann Lee_77_assignsubmission_file_"
    put(folder / "ann_lee_exercise.ipynb", right(course))
    return tmp / "moodle", {"Ann%20Lee_77_assignsubmission_file_": 12.0}


def class_zip(course, tmp):
    with zipfile.ZipFile(tmp / "class.zip", "w") as zf:
        zf.writestr(f"download/zip_ann/{CHAPTER}/exercise.ipynb", right(course))
        zf.writestr(f"download/zip_ann/{CHAPTER}/timestamp.txt", ON_TIME)
    return tmp / "class.zip", {"zip_ann": 12.0}


def zip_per_learner(course, tmp):
    (tmp / "zips").mkdir()
    with zipfile.ZipFile(tmp / "zips" / "zips_ann.zip", "w") as zf:
        zf.writestr("zips_ann/exercise.ipynb", right(course))
    return tmp / "zips", {"zips_ann": 12.0}


LAYOUTS = [
    nbgrader_submitted,
    exchange_inbound,
    folder_per_learner,
    lms_files,
    lms_folders,
    class_zip,
    zip_per_learner,
]


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda f: f.__name__)
def test_each_layout_is_graded_and_left_as_it_was(course, tmp_path, layout):
    submissions, expected = layout(course, tmp_path)
    before = fingerprint(submissions)
    proc = class_command(course, submissions, tmp_path / "out", "--jobs", "1")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert fingerprint(submissions) == before, "the submissions were changed"
    rows = grades(tmp_path / "out")
    assert {s: float(rows[s]["raw_score"]) for s in rows} == expected
    for student in expected:  # nbgrader's own folders hold the graded copy
        copy = tmp_path / "out" / "submitted" / student / CHAPTER / "exercise.ipynb"
        assert copy.is_file()


def test_a_submissions_folder_the_command_writes_into_is_refused(course, tmp_path):
    put(tmp_path / "collected" / "ann" / "exercise.ipynb", right(course))
    before = fingerprint(tmp_path / "collected")
    out = tmp_path / "collected" / "grades"
    proc = class_command(course, tmp_path / "collected", out)
    assert proc.returncode == 2
    assert "never writes where the submissions are" in proc.stderr
    assert fingerprint(tmp_path / "collected") == before


@pytest.fixture(scope="module")
def late_course(tmp_path_factory) -> Path:
    """A course with a due date and nbgrader's late penalty: a late hand-in gets 0."""
    needs_sandbox()
    course = make_course(tmp_path_factory.mktemp("late"), CHAPTER)
    nbgrader(
        course, "db", "assignment", "add", CHAPTER, "--duedate=2026-11-30 00:00:00 UTC"
    )
    with open(course / "nbgrader_config.py", "a") as f:
        f.write('\nc.LateSubmissionPlugin.penalty_method = "zero"\n')
    return course


def test_lateness_is_judged_by_the_time_handed_in(late_course, tmp_path):
    collected = tmp_path / "collected"
    nb = right(late_course)
    put(collected / "early" / "exercise.ipynb", nb, when=ON_TIME)
    put(collected / "tardy" / "exercise.ipynb", nb, when=LATE)
    put(collected / "file_early" / "exercise.ipynb", nb)
    put(collected / "file_late" / "exercise.ipynb", nb)
    os.utime(collected / "file_early" / "exercise.ipynb", (1_795_860_000,) * 2)
    os.utime(collected / "file_late" / "exercise.ipynb", (1_796_292_000,) * 2)
    proc = class_command(late_course, collected, tmp_path / "out", "--jobs", "2")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = grades(tmp_path / "out")
    score = {s: (float(r["raw_score"]), float(r["score"])) for s, r in rows.items()}
    assert score == {
        "early": (12.0, 12.0),
        "tardy": (12.0, 0.0),
        "file_early": (12.0, 12.0),  # 2026-11-28 10:00 UTC
        "file_late": (12.0, 0.0),  # 2026-12-03 10:00 UTC
    }
    assert rows["early"]["timestamp"].startswith("2026-11-29 10:00:00")
    assert rows["tardy"]["timestamp"].startswith("2026-12-02 09:00:00")
    assert rows["early"]["time_from"] == rows["tardy"]["time_from"] == "timestamp.txt"
    assert rows["file_late"]["time_from"] == "file time"


# A learner whose own exception messages and markdown would be markup elsewhere:
# TeX to matplotlib, a formula to a spreadsheet, a script to a browser.
MARKUP_SPLIT = """
def split_heads(x, n_heads):
    raise ValueError("the pitfall '$\\\\frac{$' \\x1b[2J")
"""
MARKUP_MERGE = """
def merge_heads(x):
    raise ValueError("the pitfall '=HYPERLINK(\\"http://x\\")'")
"""
SCRIPT = "Done! <script>alert('xss')</script><img src=x onerror=alert(2)>"
# Folder names Linux allows; each holds a right notebook.
ODD = [b"jos\xe9", b"new\nline", b"--rf", "two words 😀".encode(), b"=cmd\x1b[2J"]
HONEST = [b"aa_first", b"zz_last"]


def _odd_class(course: Path, tmp: Path) -> Path:
    collected, nb = tmp / "collected", right(course)
    for name in HONEST + ODD:
        put(
            Path(os.fsdecode(os.fsencode(collected) + b"/" + name)) / "exercise.ipynb",
            nb,
        )
    (collected / "link_inside").symlink_to("aa_first")
    put(tmp / "elsewhere" / "exercise.ipynb", nb)
    (collected / "link_outside").symlink_to(tmp / "elsewhere")
    markup = filled(
        released(course, CHAPTER),
        {
            **solution_sources(CHAPTER),
            "split_heads": MARKUP_SPLIT,
            "merge_heads": MARKUP_MERGE,
        },
    )
    markup.cells.insert(1, nbformat.v4.new_markdown_cell(SCRIPT))
    put(collected / "markup" / "exercise.ipynb", nbformat.writes(markup).encode())
    for name, data in _honest_but_odd(course).items():
        put(collected / name / "exercise.ipynb", data)
    return collected


def _honest_but_odd(course: Path) -> dict[str, bytes]:
    """Right notebooks as a learner's tools leave them (issue 32), and a right chapter-2
    notebook handed in for chapter 1."""
    nb = filled(released(course, CHAPTER), solution_sources(CHAPTER))
    pasted = nbformat.from_dict(json.loads(nbformat.writes(nb)))
    pasted.cells.insert(2, nbformat.from_dict(PASTED_IMAGE))
    # nbconvert's ClearMetadata, as a pre-commit hook runs it: ids kept, marks gone.
    lost, _ = ClearMetadataPreprocessor().preprocess(nbformat.from_dict(nb), {})
    damaged = json.loads(nbformat.writes(nb))
    damaged["cells"][0]["metadata"]["tags"] = "mine"
    for cell in damaged["cells"]:
        meta = cell["metadata"].get("nbgrader", {})
        if meta.get("grade_id") == "split_heads":
            meta["grade_id"] = ["split_heads"]
    chapter_two = nbformat.read(
        ROOT / "book" / "ch02_attention" / "exercise.ipynb", as_version=4
    )
    chapter_two = filled(chapter_two, solution_sources("ch02_attention"))
    return {
        "img_pasted": nbformat.writes(pasted).encode(),
        "marks_lost": nbformat.writes(lost).encode(),
        # saved by a Windows editor, with a byte-order mark
        "marks_damaged": b"\xef\xbb\xbf" + json.dumps(damaged).encode(),
        "other_chapter": nbformat.writes(chapter_two).encode(),
    }


@pytest.fixture(scope="module")
def odd_class(course, tmp_path_factory):
    """The class graded twice, into two output folders, with its two command runs."""
    tmp = tmp_path_factory.mktemp("odd")
    collected = _odd_class(course, tmp)
    # The course's other chapters sit beside the assignment, as in the repository.
    other = course / "solutions" / "ch02_attention"
    other.mkdir(exist_ok=True)
    (other / "exercise.ipynb").write_bytes(
        (ROOT / "solutions" / "ch02_attention" / "exercise.ipynb").read_bytes()
    )
    runs = []
    for k in (1, 2):
        proc = class_command(course, collected, tmp / f"out{k}", "--jobs", "2")
        runs.append((proc, tmp / f"out{k}", read_scores(course, CHAPTER)))
    return runs


@pytest.mark.xdist_group("odd_class")  # one worker grades it, twice
def test_any_folder_name_is_graded_under_a_safe_id(odd_class):
    proc, out, _ = odd_class[0]
    # 1: link_outside is not graded; every other learner is.
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = grades(out)
    for name in HONEST + ODD + [b"link_inside"]:
        row = rows[student_id(name)]
        assert (row["status"], row["raw_score"]) == ("graded", "12.0"), name
        assert row["submitted_as"].lstrip("'") == shown(name), name
    outside = rows["link_outside"]
    assert outside["status"] == "not graded" and outside["raw_score"] == ""
    assert "outside the submissions folder, not followed" in outside["reason"]


@pytest.mark.parametrize("run", [0, 1])
@pytest.mark.xdist_group("odd_class")  # one worker grades it, twice
def test_honest_but_odd_notebooks_are_graded_with_their_page(odd_class, run):
    proc, out, _ = odd_class[run]
    rows = grades(out)
    for name in ("aa_first", "img_pasted", "marks_lost", "marks_damaged", "zz_last"):
        assert (rows[name]["status"], rows[name]["raw_score"]) == ("graded", "12.0")
        assert (out / "feedback" / name / "exercise.html").is_file(), name
    page = (out / "feedback" / "img_pasted" / "exercise.html").read_text()
    assert "My sketch of the heads:" in page
    said = proc.stdout
    assert "note: the nbgrader marks of 9 cells were lost or damaged" in said
    assert "note: cell 1: metadata 'tags' is not what Jupyter writes" in said
    assert "note: the nbgrader marks of 1 cell were lost or damaged" in said
    other = rows["other_chapter"]
    assert (other["status"], other["raw_score"]) == ("not graded", "")
    assert other["reason"] == (
        "this is the ch02_attention notebook, handed in for ch01_shapes"
    )


@pytest.mark.xdist_group("odd_class")  # one worker grades it, twice
def test_grading_the_class_again_gives_the_same_gradebook(odd_class):
    (first, out1, scores1), (second, out2, scores2) = odd_class
    assert second.returncode == first.returncode == 1
    assert scores2 == scores1
    assert (out2 / "grades.csv").read_text() == (out1 / "grades.csv").read_text()


@pytest.mark.xdist_group("odd_class")  # one worker grades it, twice
def test_learner_text_is_data_in_every_report(odd_class):
    proc, out, _ = odd_class[0]
    rows = grades(out)
    assert rows["markup"]["status"] == "graded"
    assert float(rows["markup"]["raw_score"]) < 12
    # The plot is drawn although a named mistake reads as TeX.
    assert (out / "pitfalls.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with open(out / "pitfalls.csv", newline="") as f:
        mistakes = {row["mistake"] for row in csv.DictReader(f)}
    assert "$\\frac{$" in mistakes
    assert '\'=HYPERLINK("http://x")' in mistakes  # a spreadsheet shows it as text
    # grades.csv: the name "=cmd..." as text, not as a formula
    assert rows[student_id(b"=cmd\x1b[2J")]["submitted_as"] == "'=cmd\\x1b[2J"
    # The terminal: no escape sequence, no name broken over two lines.
    said = proc.stdout + proc.stderr
    assert "\x1b" not in said
    assert "new\\nline" in said and "jos\\xe9" in said
    # The feedback page shows the learner's markdown; nothing of it runs.
    page = (out / "feedback" / "markup" / "exercise.html").read_text()
    assert "Done!" in page
    assert "<script>alert" not in page and "onerror" not in page
    json.loads((out / "results.json").read_text())


def test_a_feedback_page_that_cannot_be_written_is_said_and_the_grade_kept(
    course, tmp_path
):
    """Bug: when nbgrader's generate_feedback failed, the worker ignored its result,
    and the learner was "graded" with no page and nothing said. Guard: the grade
    stands, and the row carries a note the command prints."""
    put(tmp_path / "collected" / "nofb_ann" / "exercise.ipynb", right(course))
    blocker = course / "feedback" / "nofb_ann"  # a file where the page's folder goes
    blocker.parent.mkdir(exist_ok=True)
    blocker.write_text("not a folder")
    try:
        proc = class_command(course, tmp_path / "collected", tmp_path / "out")
    finally:
        blocker.unlink()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    row = grades(tmp_path / "out")["nofb_ann"]
    assert (row["status"], row["raw_score"]) == ("graded", "12.0")
    note = (
        "note: no feedback page: nbgrader could not write its page: NotADirectoryError"
    )
    assert note in proc.stdout, proc.stdout
    assert not (tmp_path / "out" / "feedback" / "nofb_ann").exists()


# Issue 32, item 1, measured on main: a kernel that floods widget messages grew its
# grading worker to 5.1 GB, and one 600 MB message cost the worker 2 GB; with --jobs
# the learners graded beside it could go down with it. The bounds on what the grader
# reads are tested with the hostile class (test_sandbox_attacks.py); these are the
# backstops behind them, with honest learners before and after in one worker's queue.
HOG = 'print("x" * 400_000_000)\n'  # one 400 MB message
SLEEPER = "import time\ntime.sleep(60)\n"


def test_a_worker_short_of_memory_or_killed_costs_at_most_one_learner(tmp_path):
    """Two backstops, in one worker's queue (a_ann, b_hog, c_sleeper, d_cai):

    - with the per-message bound off (as a careless config would have it), b_hog's
      400 MB message does not fit the worker's 700 MB: ZeroMQ drops the connection it
      came on, the kernel is stopped with the reason, and the worker goes on;
    - Bug: a worker that died (killed, as the system's out-of-memory killer would)
      left every learner still in its queue "not graded". Guard: only c_sleeper, the
      learner it was grading, is "not graded" with the reason; a new worker grades
      d_cai."""
    course = make_course(tmp_path, CHAPTER)
    with open(course / "nbgrader_config.py", "a") as config:
        config.write("\nc.BoundedKernelClient.max_message_bytes = -1\n")
    collected = tmp_path / "collected"
    put(collected / "a_ann" / "exercise.ipynb", right(course))
    for student, first_cell in (("b_hog", HOG), ("c_sleeper", SLEEPER)):
        nb = filled(released(course, CHAPTER), solution_sources(CHAPTER))
        nb.cells.insert(0, nbformat.v4.new_code_cell(first_cell))
        put(collected / student / "exercise.ipynb", nbformat.writes(nb).encode())
    put(collected / "d_cai" / "exercise.ipynb", right(course))
    out = tmp_path / "out"
    proc = class_command(
        course, collected, out, "--jobs", "1", "--worker-memory", "700", wait=False
    )
    sleeper = course / "autograded" / "c_sleeper"
    deadline = time.monotonic() + 300
    while not sleeper.exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(3)  # c_sleeper's kernel is sleeping in its first cell
    workers = subprocess.run(  # this command's own worker, not another test's
        ["pgrep", "-P", str(proc.pid), "-f", "tformer_grading.classworker"],
        capture_output=True,
        text=True,
    ).stdout.split()
    for pid in workers:
        os.kill(int(pid), signal.SIGKILL)
    output, _ = proc.communicate(timeout=600)
    assert workers, "no worker found to kill"
    table = json.loads((out / "results.json").read_text())
    scores = {s: row["score"] for s, row in table.items() if s != "c_sleeper"}
    assert scores == {"a_ann": 12, "b_hog": 0, "d_cai": 12}, output[-3000:]
    page = (out / "feedback" / "b_hog" / "exercise.html").read_text()
    assert "too large for the grader to hold" in page
    assert max(table[s]["grader_mb"] for s in scores) < 700
    assert table["c_sleeper"]["status"] == "not graded", table["c_sleeper"]
    reason = table["c_sleeper"]["reason"]
    assert "the grading worker stopped (exit status -9)" in reason, reason
