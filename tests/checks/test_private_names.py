"""No module of the grading package reaches another module's private names.

Bug: the attention bug hunt read six private helpers of ch01 (``ch01._align``,
``ch01._fit_divisor``, ...), and ch04 imported ``blocks._attentions``, so a change
that looked local to one module (renaming or reshaping a ``_helper``) broke another
one without a hint at the definition. Cause: helpers shared by several modules were
never given a public name in a module that says it is shared. Guard: an import of a
``_name`` from one of the course's modules, or ``module._name`` on an imported course
module, fails here; a shared helper gets a public name (``ch03/reading.py`` shows how).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import tformer_grading

PACKAGE = Path(tformer_grading.__file__).parent
OURS = ("tformer_ref", "tformer_grading")
MODULES = sorted(PACKAGE.rglob("*.py"))


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_reaches(source: str) -> list[str]:
    """Each private name of a course module that ``source`` imports or reads."""
    tree = ast.parse(source)
    found, modules = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level == 0 and (node.module or "").split(".")[0] not in OURS:
                continue
            where = "." * node.level + (node.module or "")
            for alias in node.names:
                if _private(alias.name):
                    found.append(
                        f"line {node.lineno}: from {where} import {alias.name}"
                    )
                modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in OURS:
                    modules.add((alias.asname or alias.name).split(".")[0])
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
            and _private(node.attr)
        ):
            found.append(f"line {node.lineno}: {node.value.id}.{node.attr}")
    return sorted(found)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_private_name_of_another_module(path):
    reaches = private_reaches(path.read_text(encoding="utf-8"))
    assert not reaches, (
        f"{path.relative_to(PACKAGE)} reaches private names of other modules "
        f"(give a shared helper a public name): {reaches}"
    )


@pytest.mark.parametrize(
    "source, expected",
    [
        ("from .ch01 import _align, Run", ["line 1: from .ch01 import _align"]),
        ("from . import ch01\nch01._load(1)\nch01.Run", ["line 2: ch01._load"]),
        ("from .. import ch04 as c\nc._x", ["line 2: c._x"]),
        ("import tformer_ref.masks\ntformer_ref._y", ["line 2: tformer_ref._y"]),
        # Other packages' private names are theirs to keep stable, not ours.
        ("import torch\ntorch._C", []),
        ("from torch.nn import _reduction", []),
        ("from .diagnosis import __all__", []),
    ],
)
def test_the_guard_reads_each_way_in(source, expected):
    assert private_reaches(source) == expected
