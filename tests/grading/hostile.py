"""Hostile and broken chapter 1 submissions, and the class of fixture learners graded in one run.

Each learner is (answer cells replaced, notebook edits, expected score per test cell, text the
feedback must contain). The answer cells not replaced are the solution's. MHA_STANDALONE is a right
MultiHeadAttention that does not call split_heads/merge_heads, so a sabotaged split or merge cell
costs exactly its own points.

The class is graded once per test session by ``graded_class()`` through the instructor command
(``python -m tformer_grading --course ... --submissions ...``), which runs the real nbgrader
autograde, generate_feedback and export. The per-cell timeout is lowered to 10 s for speed
(``--timeout 20``; the course's nbgrader_config.py says 60).
"""
from __future__ import annotations

import functools
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat

from course import ROOT, filled, make_course, released, solution_sources

CHAPTER = "ch01_shapes"
FULL = {"test_split_heads": 2, "test_merge_heads": 2, "test_mha_matches_reference": 4,
        "test_mha_behaviour": 2, "test_mha_written_by_hand": 2}
MHA = ("test_mha_matches_reference", "test_mha_behaviour", "test_mha_written_by_hand")
TIMEOUT = 20

MHA_STANDALONE = '''
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.q, self.k, self.v, self.o = (nn.Linear(d_model, d_model) for _ in range(4))

    def forward(self, query, key, value, mask=None):
        b, sq, d = query.shape
        q = self.q(query).view(b, sq, self.h, -1).transpose(1, 2)
        k = self.k(key).view(b, key.size(1), self.h, -1).transpose(1, 2)
        v = self.v(value).view(b, value.size(1), self.h, -1).transpose(1, 2)
        w = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(-1)
        return self.o((w @ v).transpose(1, 2).reshape(b, sq, d))
'''
SPLIT_NO_TRANSPOSE = '''
def split_heads(x, n_heads):
    b, s, d = x.shape
    return x.view(b, s, n_heads, d // n_heads)
'''
MERGE_NO_TRANSPOSE = '''
def merge_heads(x):
    b, h, s, dh = x.shape
    return x.reshape(b, s, h * dh)
'''
MERGE_RIGHT = '''
def merge_heads(x):
    b, h, s, dh = x.shape
    return x.transpose(1, 2).reshape(b, s, h * dh)
'''

# An endless loop before the function is defined: the cell is interrupted after the timeout, the run goes on.
ENDLESS_LOOP = "while True:\n    pass\n" + SPLIT_NO_TRANSPOSE.replace("view(b, s, n_heads, d // n_heads)", "view(b, s, n_heads, -1).transpose(1, 2)")
# The kernel dies: every later cell scores 0, earlier ones keep their points, the next learner is graded.
KERNEL_CRASH = MHA_STANDALONE + "\nimport os\nos._exit(1)\n"
# A loop that swallows the interrupt: the grader shuts the kernel down.
STUBBORN_LOOP = MHA_STANDALONE + '''
import time
while True:
    try:
        time.sleep(0.05)
    except KeyboardInterrupt:
        pass
'''
# Replace the check with one that prints what a pass prints.
PATCHED_CHECK = SPLIT_NO_TRANSPOSE + '''
ch01.check_split_heads = lambda fn: print("✓ split_heads: matches the reference on 5 cases")
ch01.check_by_hand = lambda *args: print("✓ split_heads: written by hand, no built-in or reference shortcut")
'''
# Patch the machinery under the checks: the comparison and torch.allclose.
PATCHED_INTERNALS = MERGE_NO_TRANSPOSE + '''
import tformer_grading.checks.diagnosis as diagnosis
diagnosis.compare_to_reference = lambda *args, **kwargs: print("✓ merge_heads: matches the reference on 5 cases")
torch.allclose = lambda *args, **kwargs: True
'''
# Rebind the notebook's name `ch01` to a look-alike whose checks call the real success printer.
FAKE_MODULE = SPLIT_NO_TRANSPOSE + '''
import types
from tformer_grading.checks import diagnosis
ch01 = types.SimpleNamespace(**{name: (lambda *args, **kwargs: diagnosis.passed("check", "ok"))
                                for name in dir(ch01) if name.startswith("check_")})
'''
# Rewrite every later cell that calls a check into `pass` before IPython runs it.
INPUT_TRANSFORMER = MERGE_NO_TRANSPOSE + '''
def _skip_checks(lines):
    return ["pass\\n"] if any("check_" in line for line in lines) else lines

get_ipython().input_transformers_cleanup.append(_skip_checks)
'''
# Call the reference for what the exercise asks to write (the hidden test must catch it).
CALLS_REFERENCE = "from tformer_ref.heads import split_heads\n"
# Leave the check through SystemExit instead of returning a wrong answer.
SYSTEM_EXIT = '''
def merge_heads(x):
    raise SystemExit(0)
'''
# 100 MB of output in an answer cell, a right answer after it.
ENORMOUS_OUTPUT = 'print("x" * 100_000_000)\n' + SPLIT_NO_TRANSPOSE.replace("d // n_heads)", "d // n_heads).transpose(1, 2)")
# Warnings and stderr writes, at definition time and every time the checks call it: still full marks.
WARNS = '''
import sys
import warnings
warnings.warn("merge_heads: a learner's own warning at definition time")
print("debug: defining merge_heads", file=sys.stderr)

def merge_heads(x):
    warnings.warn("merge_heads called")
    print("debug: merge_heads", tuple(x.shape), file=sys.stderr)
    b, h, s, dh = x.shape
    return x.transpose(1, 2).reshape(b, s, h * dh)
'''


def _delete_cell(grade_id):
    def edit(nb):
        nb.cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") != grade_id]
    return edit


def _edit_cell(grade_id, source):
    def edit(nb):
        for c in nb.cells:
            if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id:
                c.source = source
    return edit


def _insert_first(source):
    def edit(nb):
        nb.cells.insert(0, nbformat.v4.new_code_cell(source))
    return edit


def _scores(**zero_or_points):
    return {cell: zero_or_points.get(cell, pts) for cell, pts in FULL.items()}


ZERO = {cell: 0 for cell in FULL}

# learner -> (answers, edits, expected scores, feedback must contain)
LEARNERS = {
    "solution": ({}, [], dict(FULL), "matches the reference"),
    "scale_d_model": ({"multi_head_attention": MHA_STANDALONE.replace("math.sqrt(q.size(-1))", "math.sqrt(d)")}, [],
                      _scores(test_mha_matches_reference=0), "scaled by sqrt(d_model)"),
    "loop_and_crash": ({"split_heads": ENDLESS_LOOP, "multi_head_attention": KERNEL_CRASH}, [],
                       _scores(test_split_heads=0, **{c: 0 for c in MHA}), "DeadKernelError"),
    "stubborn_loop": ({"multi_head_attention": STUBBORN_LOOP}, [], _scores(**{c: 0 for c in MHA}), "did not stop when interrupted"),
    "tampered_cells": ({"split_heads": SPLIT_NO_TRANSPOSE, "merge_heads": MERGE_NO_TRANSPOSE, "multi_head_attention": MHA_STANDALONE},
                       [_delete_cell("test_split_heads"), _edit_cell("test_merge_heads", "print('all good')")],
                       _scores(test_split_heads=0, test_merge_heads=0), "view without transpose"),
    "patched_check": ({"split_heads": SPLIT_NO_TRANSPOSE, "multi_head_attention": MHA_STANDALONE}, [], dict(ZERO),
                      "GradingIntegrityError"),
    "patched_internals": ({"merge_heads": MERGE_NO_TRANSPOSE, "multi_head_attention": MHA_STANDALONE}, [],
                          _scores(test_merge_heads=0, **{c: 0 for c in MHA}), "grading integrity"),
    "fake_module": ({"split_heads": SPLIT_NO_TRANSPOSE, "multi_head_attention": MHA_STANDALONE}, [], dict(ZERO),
                    "the notebook's 'ch01' is not tformer_grading.checks.ch01"),
    "input_transformer": ({"merge_heads": MERGE_NO_TRANSPOSE, "multi_head_attention": MHA_STANDALONE}, [],
                          _scores(test_merge_heads=0, **{c: 0 for c in MHA}), "GradingIntegrityError"),
    "reference_and_exit": ({"split_heads": CALLS_REFERENCE, "merge_heads": SYSTEM_EXIT, "multi_head_attention": MHA_STANDALONE}, [],
                           _scores(test_split_heads=0, test_merge_heads=0), "calls tformer_ref.split_heads"),
    "output_and_warnings": ({"split_heads": ENORMOUS_OUTPUT, "merge_heads": WARNS}, [], dict(FULL),
                            "characters of output dropped"),
}
# The patches live in answer cells: the cells before keep the points they earned.
LEARNERS["patched_check"][0]["split_heads"] = PATCHED_CHECK
LEARNERS["patched_internals"][0]["merge_heads"] = PATCHED_INTERNALS
LEARNERS["fake_module"][0]["split_heads"] = FAKE_MODULE
LEARNERS["input_transformer"][0]["merge_heads"] = INPUT_TRANSFORMER
# patched_internals: split_heads passed before the patch (2 points kept); merge and everything after fail.
# input_transformer: split passed before the transformer; later test cells run `pass` and print no receipt.


def notebook_for(student_nb, learner: str):
    answers, edits, _, _ = LEARNERS[learner]
    nb = filled(student_nb, {**solution_sources(CHAPTER), **answers})
    for edit in edits:
        edit(nb)
    return nb


@functools.lru_cache(maxsize=None)
def graded_class() -> tuple[Path, Path, dict, float]:
    """Grade every fixture learner in one run of the instructor command.

    Returns (course, output folder, the command's JSON table, seconds)."""
    import time

    tmp = Path(tempfile.mkdtemp(prefix="tformer-class-"))
    course = make_course(tmp, CHAPTER)
    student_nb = released(course, CHAPTER)
    collected = tmp / "collected"
    for learner in LEARNERS:
        (collected / learner).mkdir(parents=True)
        nbformat.write(notebook_for(student_nb, learner), collected / learner / "exercise.ipynb")
    out = tmp / "grades"
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "tformer_grading", "--course", str(course), "--assignment", CHAPTER,
                           "--submissions", str(collected), "--out", str(out), "--timeout", str(TIMEOUT), "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    seconds = time.perf_counter() - started
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return course, out, json.loads(proc.stdout), seconds
