"""Execute lesson sources and report how long each code cell takes.

The book and nbval give every cell the same timeout (``execute.timeout`` in
``_config.yml``). A cell that needs a large share of it times out on a busy
machine, so each lesson cell should take at most a third of it on an idle one,
and a whole lesson under a minute. The limit per cell is 40 s: a third of the
120 s the book once allowed (the timeout is now larger, for busy machines).
This tool measures both; the numbers go in closing notes, never into a timed
test.

Usage: python tools/cell_times.py nbsrc/book/ch06_training/lesson.py [...]
       [--top 5] [--budget 60]
Exit status 1 when a cell takes more than 40 s or a notebook more than
``--budget`` seconds.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import jupytext
import yaml
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
CELL_LIMIT_S = 40.0


def book_timeout() -> int:
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    return int(config["execute"]["timeout"])


class TimedClient(NotebookClient):
    """A client that records each code cell's wall-clock time."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.times: list[tuple[int, float, str]] = []

    async def async_execute_cell(self, cell, cell_index, *args, **kwargs):
        start = time.perf_counter()
        result = await super().async_execute_cell(cell, cell_index, *args, **kwargs)
        if cell.cell_type == "code":
            first = next(
                (line for line in cell.source.splitlines() if line.strip()), ""
            )
            self.times.append((cell_index, time.perf_counter() - start, first[:60]))
        return result


def time_notebook(source: Path, timeout: int) -> TimedClient:
    nb = jupytext.read(source)
    client = TimedClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(ROOT / "book" / source.parent.name)}},
    )
    client.execute()
    return client


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sources", nargs="+", type=Path)
    parser.add_argument("--top", type=int, default=5)
    parser.add_argument("--budget", type=float, default=60.0)
    args = parser.parse_args(argv)
    timeout = book_timeout()
    status = 0
    for source in args.sources:
        started = time.perf_counter()
        client = time_notebook(source, timeout)
        total = time.perf_counter() - started
        cells = sum(t for _, t, _ in client.times)
        print(
            f"{source}: {total:.1f} s in all ({cells:.1f} s in {len(client.times)} "
            f"code cells; cell timeout {timeout} s)"
        )
        for index, seconds, first in sorted(client.times, key=lambda x: -x[1])[
            : args.top
        ]:
            over = seconds > CELL_LIMIT_S
            flag = f"  <-- over {CELL_LIMIT_S:.0f} s" if over else ""
            print(
                f"  cell {index:3d}: {seconds:6.1f} s ({seconds / timeout:4.0%} of the "
                f"timeout) {first}{flag}"
            )
            status |= over
        if total > args.budget:
            print(f"  over the {args.budget:.0f} s budget for a lesson")
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
