"""How long a learner waits for a check cell's verdict on a wrong answer, against the
same cells on right answers, measured in the same run.

Every test cell of every banked exercise (tests/exercises/**/bank_*.py), run on its own
as a notebook runs it, once per bank answer:

* ours: the slowest cell on a wrong answer, where the checks measure, probe and
  explain (the learner's wait for the message);
* peer: the slowest cell on a right answer, where the checks only compare.

Budget: ratio 2.0, and at most 2 s for ours on an idle 2-core machine (issue 26: "a
check cell answers within 2 s of a learner's wrong answer"). The own-model capstone is
left out: its check trains a model by design (its limit is own_model.SECONDS_LIMIT).
Each exercise's first right answer runs once untimed first, so imports and first-call
set-up are not counted against any answer.
"""

from __future__ import annotations

import contextlib
import io
import sys
import time

from . import ROOT

BANK = ROOT / "tests" / "bank"
LEFT_OUT = {"own_model"}  # trains a model by design
LIMIT_MS = 2000.0


def _seconds(cell, answer) -> float:
    started = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(Exception):
        cell(answer)
    return time.perf_counter() - started


def slowest_cells() -> dict[str, tuple[float, str]]:
    """{"wrong" | "right": (seconds, "bank answer id, cell N")}: the slowest cell."""
    sys.path.insert(0, str(BANK))
    import bank

    slowest = {"wrong": (0.0, ""), "right": (0.0, "")}
    for chapter in bank.chapters():
        if chapter in LEFT_OUT:
            continue
        graders = bank.graders_of(chapter)
        entries = bank.entries(chapter)
        warmed = set()
        for entry in entries:
            if entry.expect is None and entry.exercise not in warmed:
                _seconds(graders[entry.exercise], entry.answer)
                warmed.add(entry.exercise)
        for entry in entries:
            kind = "right" if entry.expect is None else "wrong"
            for index, cell in enumerate(graders[entry.exercise].each_cell()):
                seconds = _seconds(cell, entry.answer)
                if seconds > slowest[kind][0]:
                    slowest[kind] = (seconds, f"{entry.id}, cell {index + 1}")
    return slowest


def run() -> list[dict]:
    slowest = slowest_cells()
    ours, ours_at = slowest["wrong"]
    peer, peer_at = slowest["right"]
    return [
        {
            "benchmark": (
                f"a check cell's verdict on a wrong answer, slowest of the bank "
                f"({ours_at}; limit {LIMIT_MS / 1000:.0f} s) vs on a right one "
                f"({peer_at})"
            ),
            "ours_ms": ours * 1000,
            "peer_ms": peer * 1000,
            "ratio": ours / peer,
            "budget": 2.0,
            "limit_ms": LIMIT_MS,
        }
    ]
