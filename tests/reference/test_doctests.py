"""Every ``Examples::`` block in ``tformer_ref`` runs and prints what it says.

PyTorch's style (``Examples::`` with ``>>>`` lines), checked the way
``pytest --doctest-modules`` would, one test per module. Bug this guards against: a
docstring example that drifted from the code (a renamed argument, a changed default, a
different output), which a reader copies and finds broken. Every module a lesson teaches
must have examples.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import tformer_ref

# Support code the lessons use without teaching it: examples welcome, not required.
SUPPORT = {"baselines", "device", "plotting", "torch_compat", "widgets"}
MODULES = sorted(m.name for m in pkgutil.iter_modules(tformer_ref.__path__))
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run_and_print_what_they_say(name, monkeypatch):
    # The examples build CPU tensors; the course's device must not leak into them.
    monkeypatch.setenv("TFORMER_DEVICE", "cpu")
    module = importlib.import_module(f"tformer_ref.{name}")
    result = doctest.testmod(module, optionflags=FLAGS)
    assert result.failed == 0, f"{result.failed} example(s) of tformer_ref.{name} fail"
    if name not in SUPPORT:
        assert result.attempted > 0, f"tformer_ref.{name} is taught but has no Examples"
