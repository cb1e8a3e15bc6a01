"""Progress while a self-grade runs: one line per graded cell, as nbgrader finishes it.

Grading a chapter takes seconds per cell; a learner staring at a silent terminal for a
minute cannot tell a slow check from a hung one. :class:`ProgressExecute` (the guarded
executor, :class:`tformer_grading.guard.progress.ProgressExecute`, used by
:mod:`tformer_grading.autograde_one`) prints a marked line for each graded cell it runs;
:func:`parse` reads it back in the parent process. Nothing here imports nbgrader or
torch: the learner's command starts at once.
"""

from __future__ import annotations

from dataclasses import dataclass

MARK = "tformer-progress\t"
#: The line with the gradebook's scores, printed by the grading process once it is done
#: (the parent would spend seconds importing nbgrader's database layer to read them).
SCORES = "tformer-scores\t"
GUARDED = "tformer_grading.guard.execute.GuardedExecute"
PROGRESS = "tformer_grading.guard.progress.ProgressExecute"
#: The title of a check's failure for an exercise still raising its placeholder (here,
#: not in the checks, so the self-grade command reads it without importing torch).
NOT_ANSWERED = "Not answered yet"


@dataclass(frozen=True)
class CellDone:
    """A graded cell nbgrader has run: whether it errored, and whether it was
    unanswered."""

    grade_id: str
    failed: bool
    unanswered: bool
    seconds: float
    #: Only the comments of a hidden test are left in a copy without solutions/: the
    #: cell "passes" whatever the answer, so its line must not say so.
    hidden: bool = False

    def line(self) -> str:
        if self.hidden:
            verdict = "hidden test, not run here"
        elif self.unanswered:
            verdict = "not answered yet"
        else:
            verdict = "fails" if self.failed else "passes"
        return f"  graded {self.grade_id}: {verdict} ({self.seconds:.1f} s)"


def unanswered(cell) -> bool:
    """An answer cell still raising the released placeholder, or a check saying so."""
    for out in cell.get("outputs", []):
        if out.get("output_type") != "error":
            continue
        if out.get("ename") == "NotImplementedError" and not out.get("evalue"):
            return True
        if str(out.get("evalue", "")).startswith(f"{NOT_ANSWERED}: "):
            return True
    return False


def parse(line: str) -> CellDone | None:
    """The :class:`CellDone` a :data:`MARK` line reports, or None for any other line."""
    if not line.startswith(MARK):
        return None
    grade_id, failed, unanswered, seconds = line[len(MARK) :].rstrip("\n").split("\t")
    return CellDone(grade_id, failed == "1", unanswered == "1", float(seconds))
