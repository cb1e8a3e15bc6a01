"""Every chapter's checks are tested with a bank of wrong and of right implementations (tools/bank_counts.py)."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import bank_counts  # noqa: E402


def test_every_chapter_with_an_exercise_has_both_banks():
    table = bank_counts.counts()
    exercises = sorted(p.parent.name[:4] for p in (ROOT / "solutions").glob("*/exercise.ipynb"))
    assert exercises and set(exercises) <= set(table), f"chapters without tests/test_checks_chNN.py: {set(exercises) - set(table)}"
    for chapter in exercises:
        assert table[chapter]["wrong"] >= 5 and table[chapter]["right"] >= 3, (chapter, table[chapter])


def test_the_script_prints_a_table():
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "bank_counts.py")], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout
    assert out.splitlines()[0].split()[0] == "chapter" and "ch01" in out
