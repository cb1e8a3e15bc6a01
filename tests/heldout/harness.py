"""Held-out trial: answers written without reading the checks, each replacing one
solution cell of an exercise notebook (as a learner's notebook would), graded by
running the notebook's own test cells in order (hidden tests included).

Writers call ``wrong(chapter, cell, mistake, code)`` and ``right(chapter, cell, code)``.

The trial of 2026-12-06 (trial_2026_12_06/): answers_a.py (chapters 1-4 and the
attention bug hunt) and answers_b.py (chapters 5-8, the decoding bug hunt, the own
model), written by two writers who did not read the checks; results.json is the first
failure each got on the grader of commit 93f7e95, judgement.json an independent
judge's verdict on each message (named, partial, misnamed, generic). Rerun:

    python tests/heldout/harness.py tests/heldout/trial_2026_12_06/answers_*.py out.json

The trial of 2026-12-07 (trial_2026_12_07/), the same way with two new writers and a
new judge: 183 wrong and 42 right answers; results.json holds every failing cell of
each (grader of commit 7aaadcf), judgement.json the judge's verdict on the first.
Figures before any fix: 182 wrong rejected, 169 named, 10 partial, 1 misnamed,
2 generic, 1 let through; 42 right accepted; no check crashed.

The trial of 2026-12-07b (trial_2026_12_07b/): two new writers (no check, bank, unit
test or earlier trial read) wrote 196 wrong and 47 right answers over every exercise;
results.json is every failing cell of each on the grader of commit abfc9fd,
judgement.json a new judge's verdict on the first. Figures before any fix: 196 wrong
rejected, 185 named (94.4 %), 7 partial, 4 generic, 0 misnamed, 0 let through;
47 right accepted; no check crashed. judgement_after.json: the same judge's reading
of the 14 first messages the fixes of commit 69b289e changed. judgement_after_2.json:
a new judge (who read no check) on the 19 first messages that differed from
results.json on commit 2d1961c's checks: 18 named, 1 partial (b_step_full_tgt_to_model).
judgement_after_3.json: a third judge on the 4 first messages changed after that:
4 named (one sentence flagged, "nor a product of them" where 10 = H·S, mended in
f534922). With the latest verdict of each answer: 196 of 196 named. These are the
answers the fixes were made from: the held-out figure is the one before any fix.

These answers are known now: the next trial needs new writers and new answers.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import textwrap
from dataclasses import dataclass

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "bank"))
sys.path.insert(0, str(ROOT))

ANSWERS: list = []


@dataclass
class Answer:
    chapter: str
    cell: str
    mistake: str | None
    code: str
    name: str


def wrong(chapter, cell, mistake, code, name=None):
    ANSWERS.append(Answer(chapter, cell, mistake, textwrap.dedent(code), name or ""))


def right(chapter, cell, code, name=None):
    ANSWERS.append(Answer(chapter, cell, None, textwrap.dedent(code), name or ""))


def grade(a: Answer) -> dict:
    from exercise_cells import cells

    from tformer_grading.checks import pieces
    from tformer_grading.checks.diagnosis import CheckFailure

    pieces.forget()  # each answer is a notebook of its own

    all_cells = cells(a.chapter)
    names = [c.name for c in all_cells if c.kind == "solution"]
    if a.cell not in names:
        raise SystemExit(f"{a.chapter} has no solution cell {a.cell!r}: {names}")
    ns: dict = {"__name__": "__main__"}
    failures = []
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for c in all_cells:
            code = a.code if (c.kind == "solution" and c.name == a.cell) else c.code
            try:
                exec(compile(code, f"<{c.name}>", "exec"), ns)  # noqa: S102
            except CheckFailure as f:
                failures.append((c.name, "failed", str(f)))
            except Exception as e:  # noqa: BLE001
                kind = "answer raised" if c.kind != "test" else "crashed"
                failures.append((c.name, kind, f"{type(e).__name__}: {e}"))
    return {"failures": failures}


if __name__ == "__main__":
    import importlib.util
    import pathlib

    sys.path.insert(0, str(pathlib.Path(__file__).parent))

    for path in sys.argv[1:-1]:
        spec = importlib.util.spec_from_file_location(pathlib.Path(path).stem, path)
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
    import harness

    results = []
    for a in harness.ANSWERS:
        r = grade(a)
        results.append({**a.__dict__, **r})
        ok = "PASS" if not r["failures"] else r["failures"][0][0]
        print(
            a.chapter,
            a.cell,
            a.name,
            "wrong" if a.mistake else "right",
            "->",
            ok,
            file=sys.stderr,
        )
    pathlib.Path(sys.argv[-1]).write_text(json.dumps(results, indent=1))
