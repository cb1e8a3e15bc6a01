"""The judge (tformer_grading/judge/) against the checks in the kernel alone, on the
same notebooks, measured in the same run.

* self-grade: ``python -m tformer_grading <notebook>`` on the solution of each chapter
  with judged cells, with the judge (ours) and with ``TFORMER_JUDGE=off`` (peer): the
  cells then score from the kernel's run and its receipts, as before the judge.
* class grading: the instructor command on CLASS_SUBMISSIONS copies of a chapter's
  solution with ``--jobs 1``, the same two ways: chapter 3 (every test cell judged)
  and chapter 1 (a module exercise, ``MultiHeadAttention``, judged through its
  mirror: ``tformer_grading/judge/mirror.py``).

Budget, from the issue: the judge costs at most 1.25x per notebook. The judge runs a
cell's checks a second time, in the grading process, with every call of the learner's
code a round trip to the kernel; the grading process also imports PyTorch and the
checks, which nbgrader alone does not.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
from pathlib import Path

from . import ROOT, timed_module

CHAPTERS = (
    "ch01_shapes",
    "ch02_attention",
    "ch03_masks",
    "ch03_bughunt",
    "ch04_blocks",
    "ch05_model",
    "ch06_training",
)
CLASS_CHAPTERS = ("ch01_shapes", "ch03_masks")
CLASS_SUBMISSIONS = 3
OFF = {"TFORMER_JUDGE": "off"}


def _learner_course(tmp: Path, chapter: str) -> Path:
    course = tmp / chapter
    (course / "book" / chapter).mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(ROOT / "solutions" / chapter, course / "solutions" / chapter)
    solution = ROOT / "solutions" / chapter / "exercise.ipynb"
    shutil.copy(solution, course / "book" / chapter / "mine.ipynb")
    return course / "book" / chapter / "mine.ipynb"


def _class(tmp: Path, chapter: str) -> tuple[Path, Path]:
    course, collected = tmp / "course", tmp / "collected"
    (course / "solutions" / chapter).mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", course)
    solution = ROOT / "solutions" / chapter / "exercise.ipynb"
    shutil.copy(solution, course / "solutions" / chapter)
    for i in range(CLASS_SUBMISSIONS):
        (collected / f"learner{i}").mkdir(parents=True)
        shutil.copy(solution, collected / f"learner{i}" / "exercise.ipynb")
    return course, collected


def _grade_class(tmp: Path, chapter: str, env: dict) -> float:
    shutil.rmtree(tmp, ignore_errors=True)
    course, collected = _class(tmp, chapter)
    args = ["--course", str(course), "--assignment", chapter, "--jobs", "1"]
    args += ["--submissions", str(collected), "--out", str(tmp / "out")]
    return timed_module(["tformer_grading", *args], ROOT, env=env)


def run(rounds: int = 3) -> list[dict]:
    results = []
    with tempfile.TemporaryDirectory(prefix="tformer-bench-judge-") as tmp:
        tmp = Path(tmp)
        for chapter in CHAPTERS:
            mine = _learner_course(tmp, chapter)
            course = mine.parents[2]
            times = {"ours": [], "peer": []}
            grade = ["tformer_grading", str(mine)]
            for _ in range(rounds):  # alternated, so that load drifts hit both
                times["ours"].append(timed_module(grade, course))
                times["peer"].append(timed_module(grade, course, env=OFF))
            ours, peer = (statistics.median(times[k]) for k in ("ours", "peer"))
            results.append(
                {
                    "benchmark": f"self-grade {chapter} with the judge "
                    f"({ours:.1f} s) vs the checks in the kernel alone ({peer:.1f} s)",
                    "ours_ms": ours * 1e3,
                    "peer_ms": peer * 1e3,
                    "ratio": ours / peer,
                    "budget": 1.25,
                }
            )
        results += [_class_result(tmp, chapter) for chapter in CLASS_CHAPTERS]
    return results


def _class_result(tmp: Path, chapter: str) -> dict:
    judged = _grade_class(tmp / "class", chapter, {})
    alone = _grade_class(tmp / "class", chapter, OFF)
    n = CLASS_SUBMISSIONS
    return {
        "benchmark": f"class grading of {n} {chapter} notebooks, --jobs 1, "
        f"with the judge ({judged / n:.1f} s a notebook) vs the checks in the "
        f"kernel alone ({alone / n:.1f} s a notebook)",
        "ours_ms": judged * 1e3,
        "peer_ms": alone * 1e3,
        "ratio": judged / alone,
        "budget": 1.25,
    }


if __name__ == "__main__":
    for result in run():
        print(result)
