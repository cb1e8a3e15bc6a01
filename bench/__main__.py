"""Run every benchmark, print a table, write bench/results/latest.json. Exit 1 if a
budget is missed."""

import json
import sys
from pathlib import Path

from . import (
    attention,
    classgrade,
    feedback,
    generation,
    judge,
    pictures,
    selfgrade,
    training,
)

BENCHMARKS = [
    attention.run,
    training.run,
    generation.run,
    selfgrade.run,
    classgrade.run,
    judge.run,
    feedback.run,
    pictures.run,
]


def main() -> int:
    results = [r for bench in BENCHMARKS for r in bench()]
    missed = []
    for r in results:
        budget = r.get("budget")
        verdict = (
            "" if budget is None else ("ok" if r["ratio"] <= budget else "OVER BUDGET")
        )
        if r.get("limit_ms") is not None and r["ours_ms"] > r["limit_ms"]:
            verdict = "OVER BUDGET"  # an absolute limit the learner feels
        if verdict == "OVER BUDGET":
            missed.append(r["benchmark"])
        print(
            f"{r['benchmark']}: ours {r['ours_ms']:.2f} ms, peer {r['peer_ms']:.2f} "
            f"ms, ratio {r['ratio']:.3f}"
            + (f" (budget {budget}: {verdict})" if budget else "")
        )
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "latest.json").write_text(json.dumps(results, indent=2))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
