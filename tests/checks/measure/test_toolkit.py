"""The measuring toolkit's layout (tformer_grading/checks/measure/): every module has
doctested examples and a mirrored test file, and stays small enough to read at once.

Bug this guards against: a measurement written into one chapter's module instead of
here, or a toolkit module that grew into a chapter of its own (the 12 families of
copies counted in the 2026-12-05 aesthetics review).
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil
from pathlib import Path

import pytest

from tformer_grading.checks import measure

MODULES = sorted(m.name for m in pkgutil.iter_modules(measure.__path__))
MAX_LINES = 300


def test_the_toolkit_has_modules():
    assert MODULES


@pytest.mark.parametrize("name", MODULES)
def test_each_module_is_small_documented_and_tested(name):
    module = importlib.import_module(f"{measure.__name__}.{name}")
    result = doctest.testmod(
        module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    )
    assert result.failed == 0 and result.attempted > 0, name
    lines = Path(module.__file__).read_text().count("\n")
    assert lines <= MAX_LINES, f"measure/{name}.py has {lines} lines"
    assert (Path(__file__).parent / f"test_{name}.py").exists()
    assert f"``{name}``" in measure.__doc__, "list it in measure/__init__.py"
