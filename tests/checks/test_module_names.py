"""No check module binds a top-level name twice.

Bug: ch04 defined ``FF_DROPOUT`` twice, 1,400 lines apart (the feed-forward's
"dropout in the wrong place or at the wrong rate" and the block's "dropout is not the
block's rate"). The second rebound the first, so a FeedForward that dropped its output
was told that the block did not hand its rate on (held-out trial 2026-12-06). Cause: one
module holding several exercises, each with its own Diagnosis names. Guard: every
top-level function, class and assignment of a check module has a name of its own.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import tformer_grading.checks as checks

MODULES = sorted(Path(checks.__file__).parent.rglob("*.py"))


def _bound(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


@pytest.mark.parametrize(
    "path", MODULES, ids=lambda p: str(p.relative_to(MODULES[0].parents[1]))
)
def test_each_top_level_name_is_bound_once(path):
    first: dict[str, int] = {}
    twice = []
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        for name in _bound(node):
            if name in first:
                twice.append(f"{name} (lines {first[name]} and {node.lineno})")
            first.setdefault(name, node.lineno)
    assert not twice, f"{path.name} binds twice: {', '.join(twice)}"


def test_the_guard_sees_a_name_bound_twice():
    tree = ast.parse("A = 1\ndef f(): pass\nA = 2\n")
    names = [n for node in tree.body for n in _bound(node)]
    assert names.count("A") == 2
