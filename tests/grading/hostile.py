"""Hostile and broken chapter 1 submissions, and the class of fixture learners graded
in one run.

Each learner is a ``Learner``: the answer cells it replaces (the others are the
solution's), the points each test cell must get, what its feedback must contain, and any
edits to the notebook itself. MHA_STANDALONE is a right MultiHeadAttention that does not
call split_heads/merge_heads, so a sabotaged split or merge cell costs exactly its own
points.

The class is graded once per test session by ``graded_class()`` through the instructor
command (``python -m tformer_grading --course ... --submissions ...``), which runs the
real nbgrader autograde, generate_feedback and export. The per-cell timeout is lowered
to TIMEOUT seconds for speed (the course's nbgrader_config.py says 60).
"""

from __future__ import annotations

import functools
import hashlib
import os
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import nbformat

import attacks
import judge_attacks as judged
from course import ROOT, filled, make_course, needs_sandbox, released, solution_sources
from learners import MERGE_NO_TRANSPOSE, MHA_STANDALONE, SPLIT_NO_TRANSPOSE

CHAPTER = "ch01_shapes"
FULL = {
    "test_split_heads": 2,
    "test_merge_heads": 2,
    "test_mha_matches_reference": 4,
    "test_mha_behaviour": 2,
    "test_mha_written_by_hand": 2,
}
MHA = ("test_mha_matches_reference", "test_mha_behaviour", "test_mha_written_by_hand")
TIMEOUT = 15
# The slow learner's six 12 s cells (72 s of sleep) run past NOTEBOOK_TIMEOUT; the loop
# learners, about 25 s each here, stay well under it on a machine twice as loaded.
NOTEBOOK_TIMEOUT = 60

MHA_SCALE_D_MODEL = MHA_STANDALONE.replace("math.sqrt(q.size(-1))", "math.sqrt(d)")

# An endless loop before the function is defined: the cell is interrupted after the
# timeout, the run goes on.
ENDLESS_LOOP = "while True:\n    pass\n" + SPLIT_NO_TRANSPOSE.replace(
    "view(b, s, n_heads, d // n_heads)", "view(b, s, n_heads, -1).transpose(1, 2)"
)
# The kernel dies: every later cell scores 0, earlier ones keep their points, the next
# learner is graded.
KERNEL_CRASH = MHA_STANDALONE + "\nimport os\nos._exit(1)\n"
# A loop that swallows the interrupt: the grader shuts the kernel down.
STUBBORN_LOOP = (
    MHA_STANDALONE
    + """
import time
while True:
    try:
        time.sleep(0.05)
    except KeyboardInterrupt:
        pass
"""
)
# Replace the check with one that prints what a pass prints.
PATCHED_CHECK = (
    SPLIT_NO_TRANSPOSE
    + """
ch01.check_split_heads = lambda fn: print("✓ split_heads: matches the reference on 5 cases")
ch01.check_by_hand = lambda *args: print("✓ split_heads: written by hand, no built-in or reference shortcut")
"""
)
# Patch the machinery under the checks: the comparison and torch.allclose.
PATCHED_INTERNALS = (
    MERGE_NO_TRANSPOSE
    + """
import tformer_grading.checks.diagnosis as diagnosis
diagnosis.compare_to_reference = lambda *args, **kwargs: print("✓ merge_heads: matches the reference on 5 cases")
torch.allclose = lambda *args, **kwargs: True
"""
)
# Rebind the notebook's name `ch01` to a look-alike whose checks call the real success
# printer.
FAKE_MODULE = (
    SPLIT_NO_TRANSPOSE
    + """
import types
from tformer_grading.checks import diagnosis
ch01 = types.SimpleNamespace(**{name: (lambda *args, **kwargs: diagnosis.passed("check", "ok"))
                                for name in dir(ch01) if name.startswith("check_")})
"""
)
# Rewrite every later cell that calls a check into `pass` before IPython runs it.
INPUT_TRANSFORMER = (
    MERGE_NO_TRANSPOSE
    + """
def _skip_checks(lines):
    return ["pass\\n"] if any("check_" in line for line in lines) else lines

get_ipython().input_transformers_cleanup.append(_skip_checks)
"""
)
# Call the reference for what the exercise asks to write (the hidden test must catch
# it).
CALLS_REFERENCE = "from tformer_ref.heads import split_heads\n"
# Leave the check through SystemExit instead of returning a wrong answer.
SYSTEM_EXIT = """
def merge_heads(x):
    raise SystemExit(0)
"""
# 100 MB of output in an answer cell, a right answer after it.
ENORMOUS_OUTPUT = 'print("x" * 20_000_000)\n' + SPLIT_NO_TRANSPOSE.replace(
    "d // n_heads)", "d // n_heads).transpose(1, 2)"
)
# Warnings and stderr writes, at definition time and every time the checks call it:
# still full marks.
WARNS = """
import sys
import warnings
warnings.warn("merge_heads: a learner's own warning at definition time")
print("debug: defining merge_heads", file=sys.stderr)

def merge_heads(x):
    warnings.warn("merge_heads called")
    print("debug: merge_heads", tuple(x.shape), file=sys.stderr)
    b, h, s, dh = x.shape
    return x.transpose(1, 2).reshape(b, s, h * dh)
"""


def _delete_cell(grade_id):
    def edit(nb):
        nb.cells = [
            c
            for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("grade_id") != grade_id
        ]

    return edit


def _edit_cell(grade_id, source):
    def edit(nb):
        for c in nb.cells:
            if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id:
                c.source = source

    return edit


def _insert_first(source):
    """A cell of the learner's own above the locked setup cell."""

    def edit(nb):
        nb.cells.insert(1, nbformat.v4.new_code_cell(source))

    return edit


def _paste_copy(grade_id, extra=""):
    """A copy of a cell, nbgrader metadata and all, pasted right below it."""

    def edit(nb):
        i = next(
            i
            for i, c in enumerate(nb.cells)
            if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id
        )
        copy = nbformat.from_dict(json.loads(json.dumps(nb.cells[i])))
        copy["id"] = "pasted-copy"  # Jupyter gives a pasted cell a new id
        copy.source += extra
        nb.cells.insert(i + 1, copy)

    return edit


def _edit_metadata(nb):
    """Points raised, a grade_id renamed, an extra graded cell, a test cell made
    markdown, another kernel."""
    for c in nb.cells:
        meta = c.metadata.get("nbgrader", {})
        if meta.get("grade_id") == "test_split_heads":
            meta["points"] = 100
        if meta.get("grade_id") == "test_merge_heads":
            c.cell_type = "markdown"
            c.pop("outputs", None), c.pop("execution_count", None)
        if meta.get("grade_id") == "test_mha_behaviour":
            meta["grade_id"] = "test_mha_behaviour_mine"
    bonus = nbformat.v4.new_code_cell("print('bonus')")
    bonus.metadata["nbgrader"] = {
        "grade": True,
        "grade_id": "bonus",
        "locked": False,
        "points": 50,
        "schema_version": 3,
        "solution": False,
    }
    nb.cells.append(bonus)
    nb.metadata["kernelspec"] = {"name": "bash", "display_name": "Bash", "language": ""}


def _slow_everywhere(nb):
    for c in nb.cells:
        if c.metadata.get("nbgrader", {}).get("solution"):
            c.source = attacks.SLOW + c.source
    for _ in range(3):
        nb.cells.insert(1, nbformat.v4.new_code_cell(attacks.SLOW))


def _scores(*zero: str) -> dict[str, int]:
    """Full points, except 0 for the test cells ``zero``."""
    return {cell: 0 if cell in zero else pts for cell, pts in FULL.items()}


ZERO = _scores(*FULL)


class Learner(NamedTuple):
    """A fixture learner; the answer cells it does not name are the solution's."""

    answers: dict[str, str]  # grade_id of an answer cell -> the learner's code for it
    scores: dict[str, int]  # grade_id of every test cell -> the points it must get
    feedback: str  # what the learner's feedback page must contain
    # Changes to the notebook itself (cells deleted or edited), after the answers.
    edits: tuple[Callable[[nbformat.NotebookNode], None], ...] = ()


STANDALONE = {
    "multi_head_attention": MHA_STANDALONE
}  # a wrong split costs only its cell

_JUDGED_BY = "the grader ran this cell's checks again, outside your notebook's kernel"
# name, split_heads cell, merge_heads cell, the other cells it loses, what its
# feedback says (_JUDGED_BY where the kernel's run passed and the judge's did not);
# the MultiHeadAttention cell is MHA_STANDALONE unless JUDGE_MHA says otherwise.
# The attacks on the checks lose other cells where they break them (the mode makes
# the behaviour probe's "changed" read "equal"; a patched torch breaks the kernel's
# integrity); those on the handle lose the rest of the notebook where the kernel is
# stopped.
JUDGE_ATTACKS = (
    ("mode", judged.FUNCTION_MODE, judged.NOT_A_TENSOR, ("test_mha_behaviour",),
     "got Looks"),
    ("trace", judged.SETTRACE, judged.HUGE, (), _JUDGED_BY),
    ("profile", judged.SETPROFILE, judged.WRONG_MERGE, (), _JUDGED_BY),
    ("patched", judged.PATCHED, judged.WRONG_MERGE, MHA, "grading integrity"),
    ("lying", judged.LYING_SUBCLASS, judged.NAN, (),
     "got the tensor subclass Agreeable"),
    ("sniffs", judged.SNIFFS_THE_CHECKS, judged.WRONG_MERGE, MHA, _JUDGED_BY),
    ("forged", judged.FORGED_IN_FUNCTION, judged.AGENT_MALFORMED, MHA,
     "tensors of more than 16,777,216 elements"),
    ("twice_oversized", judged.AGENT_TWICE, judged.AGENT_OVERSIZED, MHA,
     "answered the grader 2 times"),
    ("slow_dies", judged.AGENT_SLOW, judged.AGENT_DIES, MHA,
     "did not answer the grader in time"),
)  # fmt: skip

JUDGE_MHA = {"sniffs": judged.SNIFFING_MHA}

# A patch in an answer cell zeroes the test cells after it; earlier cells keep their
# points.
LEARNERS = {
    "solution": Learner(answers={}, scores=FULL, feedback="matches the reference"),
    "scale_d_model": Learner(
        answers={"multi_head_attention": MHA_SCALE_D_MODEL},
        scores=_scores("test_mha_matches_reference"),
        feedback="scaled by sqrt(d_model)",
    ),
    "loop_and_crash": Learner(
        answers={"split_heads": ENDLESS_LOOP, "multi_head_attention": KERNEL_CRASH},
        scores=_scores("test_split_heads", *MHA),
        feedback="DeadKernelError",
    ),
    "stubborn_loop": Learner(
        answers={"multi_head_attention": STUBBORN_LOOP},
        scores=_scores(*MHA),
        feedback="did not stop when interrupted",
    ),
    "tampered_cells": Learner(
        answers={
            "split_heads": SPLIT_NO_TRANSPOSE,
            "merge_heads": MERGE_NO_TRANSPOSE,
            "multi_head_attention": MHA_STANDALONE,
        },
        scores=_scores("test_split_heads", "test_merge_heads"),
        feedback="view without transpose",
        edits=(
            _delete_cell("test_split_heads"),
            _edit_cell("test_merge_heads", "print('all good')"),
        ),
    ),
    # The split cell is judged outside the kernel (tformer_grading/judge/): the judge
    # runs the real check; the later cells are not judged and get no receipt.
    "patched_check": Learner(
        answers={"split_heads": PATCHED_CHECK, "multi_head_attention": MHA_STANDALONE},
        scores=ZERO,
        feedback="the grader ran this cell's checks again, outside your notebook's "
        "kernel",
    ),
    # split_heads passed before the patch (2 points kept); merge and all after it fail.
    "patched_internals": Learner(
        answers={
            "merge_heads": PATCHED_INTERNALS,
            "multi_head_attention": MHA_STANDALONE,
        },
        scores=_scores("test_merge_heads", *MHA),
        feedback="grading integrity",
    ),
    "fake_module": Learner(
        answers={"split_heads": FAKE_MODULE, "multi_head_attention": MHA_STANDALONE},
        scores=ZERO,
        feedback="the notebook's 'ch01' is not tformer_grading.checks.ch01",
    ),
    # split passed before the transformer; later test cells run `pass` in the kernel.
    # The judge then measures the wrong merge (0) and the right MultiHeadAttention (8
    # points, earned: the by-hand observation that `pass` skipped may only withhold).
    "input_transformer": Learner(
        answers={
            "merge_heads": INPUT_TRANSFORMER,
            "multi_head_attention": MHA_STANDALONE,
        },
        scores=_scores("test_merge_heads"),
        feedback=_JUDGED_BY,
    ),
    "reference_and_exit": Learner(
        answers={
            "split_heads": CALLS_REFERENCE,
            "merge_heads": SYSTEM_EXIT,
            "multi_head_attention": MHA_STANDALONE,
        },
        scores=_scores("test_split_heads", "test_merge_heads"),
        feedback="calls tformer_ref.split_heads",
    ),
    "output_and_warnings": Learner(
        answers={"split_heads": ENORMOUS_OUTPUT, "merge_heads": WARNS},
        scores=FULL,
        feedback="characters of output dropped",
    ),
    # The attacks of tests/grading/attacks.py (asserted in test_sandbox_attacks.py).
    "reads_solutions": Learner(
        answers={"split_heads": attacks.READS_SOLUTIONS, **STANDALONE},
        scores=_scores("test_split_heads"),
        feedback="solutions found: 0",
    ),
    "rewrites_course": Learner(
        answers={"split_heads": attacks.REWRITES_COURSE, **STANDALONE},
        scores=_scores("test_split_heads"),
        feedback="could not write",
    ),
    "outlives_kernel": Learner(
        answers={"merge_heads": attacks.OUTLIVES_KERNEL, **STANDALONE},
        scores=_scores("test_merge_heads"),
        feedback="spy started",
    ),
    "other_kernels": Learner(
        answers={"split_heads": attacks.OTHER_KERNELS, **STANDALONE},
        scores=_scores("test_split_heads"),
        feedback="ports reached: 0",
    ),
    # The look-alike fools the kernel's run of every cell; the judge then measures
    # each: merge_heads is the solution's and earns its points, by its behaviour
    # alone; the solution's MultiHeadAttention calls the wrong split_heads: 0.
    "lookalike_first": Learner(
        answers={"split_heads": SPLIT_NO_TRANSPOSE},
        scores=_scores("test_split_heads", *MHA),
        feedback=_JUDGED_BY,
        edits=(_insert_first(attacks.LOOKALIKE_FIRST),),
    ),
    "import_hook_first": Learner(
        answers={"split_heads": SPLIT_NO_TRANSPOSE, **STANDALONE},
        scores=_scores("test_split_heads"),
        feedback="view without transpose",
        edits=(_insert_first(attacks.IMPORT_HOOK_FIRST),),
    ),
    "edited_metadata": Learner(
        answers={},
        scores=FULL,
        feedback="matches the reference",
        edits=(_edit_metadata,),
    ),
    # An honest learner who pasted a copy of an answer cell to try something.
    "pasted_copy": Learner(
        answers={},
        scores=FULL,
        feedback="matches the reference",
        edits=(_paste_copy("split_heads", "\n# my second try\n"),),
    ),
    "memory_flood": Learner(
        answers={"merge_heads": attacks.MEMORY_FLOOD},
        scores=FULL,
        feedback="allocation refused",
    ),
    "big_message": Learner(
        answers={"split_heads": attacks.BIG_MESSAGE},
        scores=ZERO,
        feedback="the grader stopped the kernel in this cell",
    ),
    "comm_flood": Learner(
        answers={"merge_heads": attacks.COMM_FLOOD},
        scores=_scores("test_merge_heads", *MHA),
        feedback="MB of messages",
    ),
    "metadata_and_name_flood": Learner(
        answers={
            "split_heads": attacks.METADATA_FLOOD,
            "merge_heads": attacks.NAME_FLOOD,
        },
        scores=FULL,
        feedback="characters of output dropped",
    ),
    "error_and_update_flood": Learner(
        answers={"split_heads": attacks.ERROR_AND_UPDATE_FLOOD, **STANDALONE},
        scores=_scores("test_split_heads"),
        feedback="ValueError",
    ),
    # The attacks on the judge (tests/grading/judge_attacks.py): the attacked cells
    # are wrong answers, or right answers whose kernel answers the judge badly; 0 each.
    **{
        f"judge_{name}": Learner(
            answers={
                "split_heads": split,
                "merge_heads": merge,
                "multi_head_attention": JUDGE_MHA.get(name, MHA_STANDALONE),
            },
            scores=_scores("test_split_heads", "test_merge_heads", *lost),
            feedback=feedback,
        )
        for name, split, merge, lost, feedback in JUDGE_ATTACKS
    },
    # A control: the receipt key read from memory signs success lines for every cell,
    # and the judge, which reads no receipt, decides every cell of chapter 1. The
    # wrong MultiHeadAttention (scaled by sqrt(d_model)) keeps only what it earns: its
    # behaviour probes, and the by-hand cell that needs them.
    "judge_key_search": Learner(
        answers={
            "split_heads": judged.KEY_SEARCH,
            "merge_heads": judged.WRONG_MERGE,
            "multi_head_attention": MHA_SCALE_D_MODEL,
        },
        scores=_scores(
            "test_split_heads", "test_merge_heads", "test_mha_matches_reference"
        ),
        feedback=_JUDGED_BY,
    ),
}
# Submissions that cannot be graded: student -> (what the file holds, the reason given).
NOT_GRADABLE = {
    "invalid_json": (b'{"cells": [', "is not valid JSON"),
    "not_utf8": (b'{"cells": [], "x": "\xff\xfe"}', "is not UTF-8 text"),
    "format_3": (b'{"cells": [], "nbformat": 3, "metadata": {}}', "notebook format 3"),
    "ten_thousand_cells": (None, "at most 2,000 are graded"),
    "link_to_passwd": (None, "is a symbolic link"),
    "slow": (None, f"ran past its time limit of {NOTEBOOK_TIMEOUT} s"),
}


def notebook_for(student_nb, learner: str):
    spec = LEARNERS[learner]
    nb = filled(student_nb, {**solution_sources(CHAPTER), **spec.answers})
    for edit in spec.edits:
        edit(nb)
    return nb


def hand_in(collected: Path, student_nb, learners) -> None:
    """Each of ``learners``' notebooks in its own folder of ``collected``, as the
    instructor command finds hand-ins."""
    for learner in learners:
        (collected / learner).mkdir(parents=True)
        nbformat.write(
            notebook_for(student_nb, learner), collected / learner / "exercise.ipynb"
        )


# What must not change while the class is graded: sha256 of every file of the course's
# packages and of the course folder's own files, taken just before the run.
SNAPSHOT: dict[str, str] = {}
# The class command's progress bar (stderr), kept for the tests.
PROGRESS: list[str] = []


def snapshot(course: Path) -> dict[str, str]:
    import tformer_grading
    import tformer_ref

    files = [course / "nbgrader_config.py", *sorted((course / "solutions").rglob("*"))]
    files += [course / "gradebook.db"]
    for package in (tformer_grading, tformer_ref):
        files += sorted(Path(package.__file__).parent.rglob("*.py"))
    return {
        str(f): hashlib.sha256(f.read_bytes()).hexdigest() for f in files if f.is_file()
    }


def class_command(course: Path, collected: Path, out: Path, *flags: str, wait=True):
    """The instructor command on ``collected`` with this module's time limits."""
    args = [sys.executable, "-m", "tformer_grading", "--course", str(course)]
    args += [
        "--assignment",
        CHAPTER,
        "--submissions",
        str(collected),
        "--out",
        str(out),
    ]
    args += ["--timeout", str(TIMEOUT), "--notebook-timeout", str(NOTEBOOK_TIMEOUT)]
    # The attacks are judged on scores, files and the gradebook, not on the checks'
    # pictures: none are drawn (about half a second a kernel, for the suite's time).
    env = {**os.environ, "TFORMER_PICTURES": "off"}
    if not wait:
        return subprocess.Popen(
            [*args, *flags], cwd=ROOT, text=True, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
    return subprocess.run(
        [*args, *flags], cwd=ROOT, capture_output=True, text=True, timeout=900, env=env
    )


@functools.lru_cache(maxsize=None)
def neighbour() -> None:
    """Listen on attacks.NEIGHBOUR_PORT of this machine's loopback for the rest of the
    session, as another learner's kernel would (already taken: someone listens)."""
    import socket
    import threading

    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        server.bind(("127.0.0.1", attacks.NEIGHBOUR_PORT))
    except OSError:
        return
    server.listen()

    def serve():
        while True:
            server.accept()[0].close()

    threading.Thread(target=serve, daemon=True).start()


@functools.lru_cache(maxsize=None)
def graded_class() -> tuple[Path, Path, dict, float]:
    """Grade every fixture learner in one run of the instructor command.

    Returns (course, output folder, the command's JSON table, seconds). Skips, saying
    why, where the sandbox cannot start (the class command refuses to grade then)."""
    needs_sandbox()
    tmp = Path(tempfile.mkdtemp(prefix="tformer-class-"))
    course = make_course(tmp, CHAPTER)
    student_nb = released(course, CHAPTER)
    collected = tmp / "collected"
    hand_in(collected, student_nb, LEARNERS)
    _hand_in_ungradable(collected, student_nb)
    neighbour()
    SNAPSHOT.update(snapshot(course))
    SNAPSHOT.pop(str(course / "gradebook.db"))  # grading writes it, of course
    out = tmp / "grades"
    started = time.perf_counter()
    proc = class_command(course, collected, out, "--jobs", "2", "--json")
    seconds = time.perf_counter() - started
    # 1: some submissions (NOT_GRADABLE) could not be graded; the rest were.
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    PROGRESS.extend(proc.stderr.splitlines())
    return course, out, json.loads(proc.stdout), seconds


# Graded a second time, in a new course: the resource attacks and the attacks on the
# judge, with honest learners (their names sort after the attackers').
AGAIN = (
    "big_message",
    "comm_flood",
    "metadata_and_name_flood",
    *(f"judge_{attack[0]}" for attack in JUDGE_ATTACKS),
    "judge_key_search",
    "scale_d_model",
    "solution",
)


@functools.lru_cache(maxsize=None)
def graded_again() -> tuple[Path, Path, dict, list[str]]:
    """The learners of AGAIN graded by the instructor command in a new course: (course,
    output folder, the command's JSON table, its progress lines)."""
    needs_sandbox()
    tmp = Path(tempfile.mkdtemp(prefix="tformer-class-again-"))
    course = make_course(tmp, CHAPTER)
    collected = tmp / "collected"
    hand_in(collected, released(course, CHAPTER), AGAIN)
    out = tmp / "out"
    proc = class_command(course, collected, out, "--jobs", "2", "--json")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return course, out, json.loads(proc.stdout), proc.stderr.splitlines()


def _hand_in_ungradable(collected: Path, student_nb) -> None:
    for student, (data, _) in NOT_GRADABLE.items():
        (collected / student).mkdir(parents=True)
        if data is not None:
            (collected / student / "exercise.ipynb").write_bytes(data)
    many = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell("pass") for _ in range(10_000)]
    )
    nbformat.write(many, collected / "ten_thousand_cells" / "exercise.ipynb")
    (collected / "link_to_passwd" / "exercise.ipynb").symlink_to("/etc/passwd")
    slow = nbformat.from_dict(
        json.loads(json.dumps(notebook_for(student_nb, "solution")))
    )
    _slow_everywhere(slow)
    nbformat.write(slow, collected / "slow" / "exercise.ipynb")
    # An uploaded folder with a symbolic link loop: its notebook is still graded.
    (collected / "solution" / "loop").symlink_to(".")
