"""Learner text shown as data: ids for any folder name, escapes for terminal and CSV.

Bug (issue 31): a folder named ``jos\\xe9`` (a zip made by a Latin-1 tool) stopped the
class command with exit 3; names with a newline or a leading ``-`` were not graded.
Cause: the folder name was the gradebook id and the terminal's text as it was.
Guard: :func:`student_id` (safe, reversible) and :func:`shown` (escaped), tested here
on every kind of name Linux allows.
"""

import os
import re

import pytest

from tformer_grading.learner_text import (
    MAX_ID,
    csv_cell,
    name_of,
    plain_label,
    printable,
    shown,
    student_id,
)

NAMES = [
    b"alice",
    b"jos\xe9",  # Latin-1, not UTF-8
    "josé".encode(),
    b"new\nline",
    b"--rf",
    b"-x",
    b"two words",
    "emoji 😀".encode(),
    b"=cmd|' /C calc'!A0",
    b"@SUM(1)",
    b".hidden-looking",
    b"%41",  # must not meet "A"
    b"A",
    b"tab\there",
    b"\x1b[2Jclear",
    b"a+b*c?[d]",
    b"x" * 255,
    "é".encode() * 127,
]


def test_every_name_gets_a_distinct_safe_id():
    ids = [student_id(name) for name in NAMES]
    assert len(set(ids)) == len(ids)
    for sid in ids:
        assert re.fullmatch(r"[A-Za-z0-9_%][A-Za-z0-9_.@%~-]*", sid), sid
        assert len(sid) <= MAX_ID


@pytest.mark.parametrize("name", [n for n in NAMES if len(n) < 30])
def test_a_short_name_is_read_back_from_its_id(name):
    assert name_of(student_id(name)) == name


def test_a_name_as_python_lists_it_gives_the_same_id():
    """os.listdir gives a str with surrogates for bytes that are not UTF-8."""
    assert student_id(os.fsdecode(b"jos\xe9")) == student_id(b"jos\xe9") == "jos%E9"


def test_shown_names_are_one_printable_line():
    assert shown(b"jos\xe9") == "jos\\xe9"
    assert shown("josé".encode()) == "josé"
    assert shown(b"new\nline") == "new\\nline"
    assert shown(b"\x1b[2Jclear") == "\\x1b[2Jclear"
    assert shown("emoji 😀".encode()) == "emoji 😀"
    for name in NAMES:
        assert shown(name).isprintable(), name


def test_printable_escapes_what_a_terminal_would_act_on():
    assert printable("red \x1b[31m") == "red \\x1b[31m"
    assert printable("rtl \u202e") == "rtl \\u202e"
    assert printable("cr\rlf\n") == "cr\\rlf\\n"
    assert printable("\udce9") == "\\udce9"
    assert printable("plain text, ünïcode") == "plain text, ünïcode"


@pytest.mark.parametrize(
    "text", ["=1+1", "+1", "-1", "@SUM(A1)", "\tx", "\r=x", '=HYPERLINK("x")']
)
def test_a_csv_cell_that_a_spreadsheet_would_run_is_text(text):
    assert csv_cell(text) == "'" + text


def test_other_csv_cells_are_left_as_they_are():
    assert csv_cell("alice") == "alice"
    assert csv_cell("scaled by sqrt(d_model)") == "scaled by sqrt(d_model)"
    assert csv_cell(-1.5) == -1.5  # a number is a number
    assert csv_cell("lone \udce9") == "lone \\udce9"  # the file stays UTF-8


def test_plot_labels_are_short_and_printable():
    assert plain_label("a\nb") == "a\\nb"
    label = plain_label("x" * 100, limit=20)
    assert len(label) == 20 and label.endswith("…")
