"""Every chapter's checks are tested with a bank of wrong and of right implementations (tools/bank_counts.py)."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_chapter_with_an_exercise_has_both_banks():
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "bank_counts.py"), "--json"], capture_output=True,
                         text=True, cwd=ROOT, check=True).stdout
    table = json.loads(out)
    print(table)
    exercises = sorted(p.parent.name[:4] for p in (ROOT / "solutions").glob("*/exercise.ipynb"))
    assert exercises and set(exercises) <= set(table), f"chapters without tests/checks/test_checks_chNN.py: {set(exercises) - set(table)}"
    for chapter in exercises:
        assert table[chapter]["wrong"] >= 5 and table[chapter]["right"] >= 3, (chapter, table[chapter])
