"""The examples in tformer_grading.pictures' docstrings run, as the checks' do."""

import doctest
import importlib
import pkgutil

import pytest

import tformer_grading.pictures as pictures

MODULES = [m.name for m in pkgutil.iter_modules(pictures.__path__)]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(f"tformer_grading.pictures.{name}")
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0, f"{name} has no example"
    assert result.failed == 0
