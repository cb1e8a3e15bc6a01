"""Count, per chapter, the wrong and the right implementations the check banks test.

Convention (CONTRIBUTING.md): in tests/checks/test_checks_chNN.py, a test whose name contains ``reject``
runs wrong implementations (one per parametrized case, each must be rejected with its diagnosis),
and a test whose name contains ``accept`` runs right ones written differently (each must pass).
Collected with pytest, so what is counted is what runs.

Usage: python tools/bank_counts.py [--json]
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def collect(path: Path) -> list[str]:
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", str(path)],
                          cwd=ROOT, capture_output=True, text=True)
    return [line.strip() for line in proc.stdout.splitlines() if "::" in line]


def counts() -> dict[str, dict[str, int]]:
    result = {}
    for path in sorted((ROOT / "tests" / "checks").glob("test_checks_ch[0-9][0-9].py")):
        chapter = re.search(r"ch\d\d", path.name).group(0)
        ids = collect(path)
        names = [i.split("::", 1)[1].split("[", 1)[0] for i in ids]
        result[chapter] = {"wrong": sum("reject" in n for n in names), "right": sum("accept" in n for n in names)}
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    table = counts()
    if args.json:
        print(json.dumps(table))
    else:
        print(f"{'chapter':<8} {'wrong (rejected)':>17} {'right (accepted)':>17}")
        for chapter, row in table.items():
            print(f"{chapter:<8} {row['wrong']:>17} {row['right']:>17}")
        print(f"{'total':<8} {sum(r['wrong'] for r in table.values()):>17} {sum(r['right'] for r in table.values()):>17}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
