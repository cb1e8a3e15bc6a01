"""Every docstring example of the checks runs and prints what it says.

Bug: ``checks.exercise_modules()`` showed, in its example, a module list that the
split of ch01 into one module per exercise had changed; nothing ran the example, so
it went on telling maintainers the old layout. Cause: only the measuring toolkit's
examples were run (tests/checks/measure/test_toolkit.py). Guard: every module of
``tformer_grading.checks`` is run through doctest here, as tformer_ref's are in
tests/reference/test_doctests.py.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import tformer_grading.checks as checks

MODULES = [checks.__name__] + sorted(
    m.name for m in pkgutil.walk_packages(checks.__path__, checks.__name__ + ".")
)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run_and_print_what_they_say(name, monkeypatch):
    # The examples build CPU tensors; the course's device must not leak into them.
    monkeypatch.setenv("TFORMER_DEVICE", "cpu")
    module = importlib.import_module(name)
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    result = doctest.testmod(module, optionflags=flags)
    assert result.failed == 0, f"{result.failed} example(s) of {name} fail"
