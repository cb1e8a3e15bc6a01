"""Every test file under tests/ has a name of its own.

Bug: the toolkit's mirrored tests (tests/checks/measure/test_decoding.py,
test_masks.py) took the names of tests/reference's, and pytest, which imports test
files by their basename (tests/ has no packages), stopped collecting both reference
files with "import file mismatch". Cause: two folders mirroring two packages with
modules of the same name. Guard: no two test files share a basename.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_two_test_files_share_a_name():
    found = defaultdict(list)
    for path in TESTS.rglob("test_*.py"):
        found[path.name].append(str(path.relative_to(TESTS)))
    twice = {name: paths for name, paths in found.items() if len(paths) > 1}
    assert not twice, f"test files with the same name (rename one): {twice}"
