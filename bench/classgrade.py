"""Class grading: throughput with one job and with two, and what the sandbox costs.

* throughput: the instructor command grades SUBMISSIONS copies of chapter 1's solution
  with ``--jobs 1`` and then ``--jobs 2`` (a fresh gradebook each time); ours is two
  jobs, the peer one. Budget: two jobs take at most 0.8x the time of one on a 2-core
  machine (grading is parallel over cores; a kernel starting and importing PyTorch is
  most of each notebook's time).
* sandbox: the same command on SANDBOX_SUBMISSIONS notebooks with ``--jobs 1``, in the
  bubblewrap sandbox (ours) and with ``--unsafe-no-sandbox`` (peer). Budget 1.25x.

Each label also gives submissions per minute and seconds per submission.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from . import ROOT, timed_module

CHAPTER = "ch01_shapes"
SUBMISSIONS = 6
SANDBOX_SUBMISSIONS = 3


def _course(tmp: Path, learners: int) -> tuple[Path, Path]:
    course = tmp / "course"
    shutil.rmtree(tmp, ignore_errors=True)
    (course / "solutions" / CHAPTER).mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", course)
    solution = ROOT / "solutions" / CHAPTER / "exercise.ipynb"
    shutil.copy(solution, course / "solutions" / CHAPTER)
    collected = tmp / "collected"
    for i in range(learners):
        (collected / f"learner{i:02d}").mkdir(parents=True)
        shutil.copy(solution, collected / f"learner{i:02d}" / "exercise.ipynb")
    return course, collected


def _grade(tmp: Path, learners: int, *flags: str) -> float:
    course, collected = _course(tmp, learners)
    args = ["--course", str(course), "--assignment", CHAPTER]
    args += ["--submissions", str(collected), "--out", str(tmp / "out"), *flags]
    return timed_module(["tformer_grading", *args], ROOT)


def run() -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="tformer-bench-class-") as tmp:
        tmp = Path(tmp) / "run"
        one = _grade(tmp, SUBMISSIONS, "--jobs", "1")
        two = _grade(tmp, SUBMISSIONS, "--jobs", "2")
        boxed = _grade(tmp, SANDBOX_SUBMISSIONS, "--jobs", "1")
        bare = _grade(tmp, SANDBOX_SUBMISSIONS, "--jobs", "1", "--unsafe-no-sandbox")
    per_min = lambda seconds, n: 60 * n / seconds  # noqa: E731
    return [
        {
            "benchmark": f"class grading, {SUBMISSIONS} notebooks: --jobs 2 "
            f"({per_min(two, SUBMISSIONS):.1f}/min) vs --jobs 1 "
            f"({per_min(one, SUBMISSIONS):.1f}/min)",
            "ours_ms": two * 1e3,
            "peer_ms": one * 1e3,
            "ratio": two / one,
            "budget": 0.8,
        },
        {
            "benchmark": f"class grading of {SANDBOX_SUBMISSIONS} notebooks in the "
            f"sandbox ({boxed:.1f} s) vs without ({bare:.1f} s): "
            f"{(boxed - bare) / SANDBOX_SUBMISSIONS:.1f} s more per notebook",
            "ours_ms": boxed * 1e3,
            "peer_ms": bare * 1e3,
            "ratio": boxed / bare,
            "budget": 1.25,
        },
    ]


if __name__ == "__main__":
    for result in run():
        print(result)
