"""Benchmarks: each reports a ratio against a peer measured in the same run
(`make bench`)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed_module(
    args: list[str],
    cwd: Path,
    timeout: int = 1200,
    status: int = 0,
    env: dict | None = None,
) -> float:
    """Seconds that ``python -m ARGS`` takes in ``cwd`` with the grading environment
    (and ``env`` on top). Any exit status but ``status`` raises with the end of its
    output (a bench never times a run that did something else)."""
    from tformer_grading.course import grading_env

    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", *args],
        cwd=cwd,
        env={**grading_env(ROOT), **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    seconds = time.perf_counter() - started
    if proc.returncode != status:
        raise RuntimeError(
            f"{args} failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
        )
    return seconds
