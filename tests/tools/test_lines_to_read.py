"""``tools/lines_to_read.py``: what a maintainer reads to change one exercise's grading.

The figure goes into notes as evidence that the rebuild made grading easier to change,
so it must count what is reached and nothing else: a definition imported from a shared
module (counted, with what it uses), a re-export through a package's ``__init__``
(followed to its definition), another exercise's check that is only called (not
counted).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import lines_to_read  # noqa: E402

import tformer_grading.checks as checks  # noqa: E402

CHECKS = Path(checks.__file__).parent


def _lines(relative: str) -> int:
    return len((CHECKS / relative).read_text(encoding="utf-8").splitlines())


def test_the_exercise_module_is_read_whole_and_first():
    files = lines_to_read.reading("tformer_grading.checks.ch03.causal_mask")
    assert files[0] == ("ch03/causal_mask.py", _lines("ch03/causal_mask.py"))


def test_a_shared_module_counts_only_the_definitions_reached():
    files = dict(lines_to_read.reading("tformer_grading.checks.ch03.causal_mask"))
    # causal_mask imports some of ch03/reading.py's helpers, not all of them.
    assert 0 < files["ch03/reading.py"] < _lines("ch03/reading.py")
    # Four one-line definitions: the two Sections causal_mask imports, the one a
    # helper it uses from reading.py imports (S_COMBINE), and CHAPTER, which all use.
    assert files["ch03/sections.py"] == 4


def test_names_bound_together_are_followed():
    # own_model binds `S_DECODER, S_ORDER = ch05.S_DECODER, ch05.S_ORDER`.
    files = dict(lines_to_read.reading("tformer_grading.checks.own_model"))
    assert "ch05/sections.py" in files


def test_another_exercises_check_is_called_not_read():
    # own_model runs the chapters' checks; their modules are not what it reads.
    files = dict(lines_to_read.reading("tformer_grading.checks.own_model"))
    assert not any(f.startswith("ch04/encoder_block") for f in files)


def test_every_exercise_module_has_a_row():
    names = {m.__name__ for m in checks.exercise_modules()}
    for name in names:
        rows = lines_to_read.reading(name)
        assert rows[0][1] > 0 and all(n > 0 for _, n in rows)


def test_read_by_interface_the_toolkit_counts_signatures_and_docstrings():
    # ch02.attention reaches measure/softmax.py's functions; by interface each is
    # its signature and docstring, and what their bodies call is not followed.
    name = "tformer_grading.checks.ch02.attention"
    whole, by_interface = (
        dict(lines_to_read.reading(name)),
        dict(lines_to_read.reading(name, interface=True)),
    )
    assert 0 < by_interface["measure/softmax.py"] < whole["measure/softmax.py"]
    # The exercise's own module, and another exercise's module it reads, stay whole.
    assert by_interface["ch02/attention.py"] == whole["ch02/attention.py"]
    assert (
        by_interface["ch02/attention_large_scores.py"]
        == (whole["ch02/attention_large_scores.py"])
    )


def test_an_interface_is_the_signature_and_the_docstring():
    import ast

    source = '''
@decorated
def documented(a,
               b):
    """One line,
    then two."""
    return a + b


class Kept:
    """A class."""

    size: int = 3

    def method(self):
        return 1
'''
    tree = ast.parse(source)
    assert lines_to_read._interface(tree.body[0]) == 5  # decorator, 2 + 2 lines
    assert lines_to_read._interface(tree.body[1]) == 2 + 1 + 1  # doc, field, def
