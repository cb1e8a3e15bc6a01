"""Hostile and broken chapter 1 submissions, and the class of fixture learners graded in one run.

Each learner is a ``Learner``: the answer cells it replaces (the others are the
solution's), the points each test cell must get, what its feedback must contain, and any
edits to the notebook itself. MHA_STANDALONE is a right MultiHeadAttention that does not
call split_heads/merge_heads, so a sabotaged split or merge cell costs exactly its own
points.

The class is graded once per test session by ``graded_class()`` through the instructor command
(``python -m tformer_grading --course ... --submissions ...``), which runs the real nbgrader
autograde, generate_feedback and export. The per-cell timeout is lowered to TIMEOUT
seconds for speed (the course's nbgrader_config.py says 60).
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import nbformat

from course import ROOT, filled, make_course, released, solution_sources
from learners import MERGE_NO_TRANSPOSE, mha

CHAPTER = "ch01_shapes"
FULL = {
    "test_split_heads": 2,
    "test_merge_heads": 2,
    "test_mha_matches_reference": 4,
    "test_mha_behaviour": 2,
    "test_mha_written_by_hand": 2,
}
MHA = ("test_mha_matches_reference", "test_mha_behaviour", "test_mha_written_by_hand")
TIMEOUT = 20

MHA_STANDALONE = mha("""
    def forward(self, query, key, value, mask=None):
        b, sq, d = query.shape
        q = self.q(query).view(b, sq, self.h, -1).transpose(1, 2)
        k = self.k(key).view(b, key.size(1), self.h, -1).transpose(1, 2)
        v = self.v(value).view(b, value.size(1), self.h, -1).transpose(1, 2)
        w = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(-1)
        return self.o((w @ v).transpose(1, 2).reshape(b, sq, d))
""")
MHA_SCALE_D_MODEL = MHA_STANDALONE.replace("math.sqrt(q.size(-1))", "math.sqrt(d)")
SPLIT_NO_TRANSPOSE = """
def split_heads(x, n_heads):
    b, s, d = x.shape
    return x.view(b, s, n_heads, d // n_heads)
"""

# An endless loop before the function is defined: the cell is interrupted after the timeout, the run goes on.
ENDLESS_LOOP = "while True:\n    pass\n" + SPLIT_NO_TRANSPOSE.replace(
    "view(b, s, n_heads, d // n_heads)", "view(b, s, n_heads, -1).transpose(1, 2)"
)
# The kernel dies: every later cell scores 0, earlier ones keep their points, the next learner is graded.
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
# Rebind the notebook's name `ch01` to a look-alike whose checks call the real success printer.
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
# Call the reference for what the exercise asks to write (the hidden test must catch it).
CALLS_REFERENCE = "from tformer_ref.heads import split_heads\n"
# Leave the check through SystemExit instead of returning a wrong answer.
SYSTEM_EXIT = """
def merge_heads(x):
    raise SystemExit(0)
"""
# 100 MB of output in an answer cell, a right answer after it.
ENORMOUS_OUTPUT = 'print("x" * 100_000_000)\n' + SPLIT_NO_TRANSPOSE.replace(
    "d // n_heads)", "d // n_heads).transpose(1, 2)"
)
# Warnings and stderr writes, at definition time and every time the checks call it: still full marks.
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
    "patched_check": Learner(
        answers={"split_heads": PATCHED_CHECK, "multi_head_attention": MHA_STANDALONE},
        scores=ZERO,
        feedback="GradingIntegrityError",
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
    # split passed before the transformer; later test cells run `pass`: no receipt.
    "input_transformer": Learner(
        answers={
            "merge_heads": INPUT_TRANSFORMER,
            "multi_head_attention": MHA_STANDALONE,
        },
        scores=_scores("test_merge_heads", *MHA),
        feedback="GradingIntegrityError",
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
}


def notebook_for(student_nb, learner: str):
    spec = LEARNERS[learner]
    nb = filled(student_nb, {**solution_sources(CHAPTER), **spec.answers})
    for edit in spec.edits:
        edit(nb)
    return nb


@functools.lru_cache(maxsize=None)
def graded_class() -> tuple[Path, Path, dict, float]:
    """Grade every fixture learner in one run of the instructor command.

    Returns (course, output folder, the command's JSON table, seconds)."""
    tmp = Path(tempfile.mkdtemp(prefix="tformer-class-"))
    course = make_course(tmp, CHAPTER)
    student_nb = released(course, CHAPTER)
    collected = tmp / "collected"
    for learner in LEARNERS:
        (collected / learner).mkdir(parents=True)
        nbformat.write(
            notebook_for(student_nb, learner), collected / learner / "exercise.ipynb"
        )
    out = tmp / "grades"
    started = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tformer_grading",
            "--course",
            str(course),
            "--assignment",
            CHAPTER,
            "--submissions",
            str(collected),
            "--out",
            str(out),
            "--timeout",
            str(TIMEOUT),
            "--json",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    seconds = time.perf_counter() - started
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return course, out, json.loads(proc.stdout), seconds
