"""What a picture adds to a failed check (tformer_grading.pictures), measured in the
same run as the check without it (``TFORMER_PICTURES=off``).

* every failing cell of the bank's answers that draws a picture (ch02 attention, ch03
  masks and masked attention), with its picture against without: the most a picture
  adds to one cell;
* the first picture of a fresh process (matplotlib imported then), against the same
  cell without it, each in a process of its own: the time the picture adds.

Budget: at most 1 s added to one failing cell, in both (issue 30: "add at most 1 s to
a failing check"). A check fails in about 10 ms and a picture takes about 100: the
ratios are large and printed, not budgeted.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import time

from . import ROOT

BANK = ROOT / "tests" / "bank"
CHAPTERS = {
    "ch02": ("attention",),
    "ch03": ("causal_mask", "padding_mask", "masked_attention"),
}
LIMIT_MS = 1000.0
SWITCH = "TFORMER_PICTURES"
#: One answer, graded in a fresh process: a causal mask built with triu.
COLD = f"""
import sys, time, contextlib, io
sys.path.insert(0, {str(BANK)!r})
import bank
graders = bank.graders_of("ch03")
entry = next(e for e in bank.entries("ch03") if e.name == "causal_triu")
from tformer_grading.checks.diagnosis import CheckFailure
started = time.perf_counter()
try:
    with contextlib.redirect_stdout(io.StringIO()):
        graders["causal_mask"](entry.answer)
except CheckFailure as failure:
    failure.picture  # drawn as a kernel shows the failure
print(time.perf_counter() - started)
"""


def _seconds(cell, answer) -> tuple[float, bool]:
    """(seconds, whether the failure carried a picture)."""
    from tformer_grading.checks.diagnosis import CheckFailure

    started = time.perf_counter()
    drawn = False
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            cell(answer)
        except CheckFailure as failure:
            drawn = failure.picture is not None
        except Exception:  # noqa: BLE001, S110 - a crash is the bank's business
            pass
    return time.perf_counter() - started, drawn


@contextlib.contextmanager
def _pictures(on: bool):
    before = os.environ.get(SWITCH)
    os.environ[SWITCH] = "on" if on else "off"
    try:
        yield
    finally:
        if before is None:
            del os.environ[SWITCH]
        else:
            os.environ[SWITCH] = before


def most_added() -> tuple[float, float, int]:
    """(seconds with its picture, without, pictured cells) of the failing cell whose
    picture adds the most; each cell is run with and without in turn (the picture is
    drawn when the failure is shown: here, when the timed call asks for it)."""
    sys.path.insert(0, str(BANK))
    import bank

    worst, cells = (0.0, 0.0), 0
    for chapter, exercises in CHAPTERS.items():
        graders = bank.graders_of(chapter)
        for entry in bank.entries(chapter):
            if entry.expect is None or entry.exercise not in exercises:
                continue
            for cell in graders[entry.exercise].each_cell():
                with _pictures(True):
                    seconds, drawn = _seconds(cell, entry.answer)
                if not drawn:
                    continue
                with _pictures(False):
                    plain, _ = _seconds(cell, entry.answer)
                cells += 1
                if seconds - plain > worst[0] - worst[1]:
                    worst = (seconds, plain)
    return *worst, cells


def cold(on: bool) -> float:
    """Seconds of the COLD answer's check in a fresh process."""
    env = {**os.environ, SWITCH: "on" if on else "off", "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", COLD],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        cwd=ROOT,
    ).stdout
    return float(out.split()[-1])


def run() -> list[dict]:
    with_, without, cells = most_added()
    first = min(cold(True) for _ in range(2))
    plain = min(cold(False) for _ in range(2))
    return [
        {
            "benchmark": (
                f"the most a picture adds to a failing cell, of {cells} (limit "
                f"{LIMIT_MS / 1000:.0f} s) vs that cell without it"
            ),
            "ours_ms": (with_ - without) * 1000,
            "peer_ms": without * 1000,
            "ratio": with_ / without,
            "limit_ms": LIMIT_MS,
        },
        {
            "benchmark": (
                "the time a fresh process's first picture adds to its failing cell "
                f"(limit {LIMIT_MS / 1000:.0f} s) vs that cell without it"
            ),
            "ours_ms": max(0.0, first - plain) * 1000,
            "peer_ms": plain * 1000,
            "ratio": first / plain,
            "limit_ms": LIMIT_MS,
        },
    ]
