"""What a picture adds to a failed check (tformer_grading.pictures), measured in the
same run as the check without it (``TFORMER_PICTURES=off``).

* every failing cell of the bank's answers that draws a picture (:data:`CHAPTERS`),
  with its picture against without: the most a picture adds to one cell;
* the first picture of a fresh process (matplotlib imported then), against the same
  cell without it, each in a process of its own: the time the picture adds.

* an exercise's optional training cell (pictures.training_curves), each kind with a
  right piece: the slowest, trained and drawn, against the reference's run alone.

Budget: at most 1 s added to one failing cell, in both (issue 30: "add at most 1 s to
a failing check"), and at most 10 s for a training cell ("at most 10 s on 2 cores").
A check fails in about 10 ms and a picture takes about 100: the ratios are large and
printed, not budgeted.
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
    "ch01": ("multi_head_attention",),
    "ch02": ("attention",),
    "ch03": ("causal_mask", "padding_mask", "masked_attention"),
    "bughunt_attention": ("self_attention",),
    "ch08": ("lm_step",),
}
LIMIT_MS = 1000.0
TRAINING_LIMIT_MS = 10_000.0
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
    if failure.picture is not None:  # drawn as a kernel shows the failure
        failure.picture.png
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
            # Drawn as a kernel shows the failure.
            drawn = failure.picture is not None and bool(failure.picture.png)
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


def _right_pieces() -> dict:
    """A right piece of each kind of training cell: the reference's functions, the
    bank's first right answers for chapter 7, the reference's model for the own one."""
    sys.path.insert(0, str(BANK))
    import bank

    from tformer_ref import training
    from tformer_ref.model import Transformer

    ch07 = bank.entries("ch07")
    first = {
        x: next(e.answer for e in ch07 if e.exercise == x and e.expect is None)
        for x in ("accumulation_step", "amp_step")
    }

    def model(vocab, d_model, heads, d_ff, layers):
        return Transformer(vocab, vocab, d_model, heads, layers, d_ff, dropout=0.0)

    def batch_loss(model, src, tgt):
        tgt_in, labels = training.shift_targets(tgt)
        return training.sequence_loss(model(src, tgt_in), labels, 0, 0.0)

    return {
        "shift_targets": training.shift_targets,
        "sequence_loss": training.sequence_loss,
        "train_step": training.train_step,
        **first,
        "own_model": (model, batch_loss),
    }


def slowest_training() -> tuple[float, float, str]:
    """(seconds to train both runs and draw, seconds of the reference's run alone,
    kind) of the slowest kind of training cell."""
    from tformer_grading.checks.diagnosis import single_thread
    from tformer_grading.pictures import training_curves as curves

    slowest = (0.0, 1.0, "")
    for kind, piece in _right_pieces().items():
        started = time.perf_counter()
        curves.draw(curves.train(kind, piece))
        both = time.perf_counter() - started
        started = time.perf_counter()
        with single_thread():
            curves._run(kind, None, curves.STEPS)
        alone = time.perf_counter() - started
        if both > slowest[0]:
            slowest = (both, alone, kind)
    return slowest


def run() -> list[dict]:
    with_, without, cells = most_added()
    first = min(cold(True) for _ in range(2))
    plain = min(cold(False) for _ in range(2))
    both, alone, kind = slowest_training()
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
        {
            "benchmark": (
                f"an optional training cell, slowest kind ({kind}: both runs and "
                f"the picture; limit {TRAINING_LIMIT_MS / 1000:.0f} s) vs the "
                "reference's run alone"
            ),
            "ours_ms": both * 1000,
            "peer_ms": alone * 1000,
            "ratio": both / alone,
            "limit_ms": TRAINING_LIMIT_MS,
        },
    ]
