"""Learner text (folder names, exception messages, diagnoses) made safe to show.

A class report shows text that learners chose: a folder's name, the message of an
exception their code raised, which the diagnoses quote. Each place that shows it
reads some text as instructions of its own: a terminal runs escape sequences, a
spreadsheet runs a cell that starts with ``=``, matplotlib parses ``$...$`` as TeX,
a file system refuses some names. Everything here turns learner text into data for
one of those places; nothing here judges it.

>>> student_id(b"jos\\xe9")
'jos%E9'
>>> name_of(student_id(b"jos\\xe9"))
b'jos\\xe9'
>>> shown(b"a\\nb\\xff")
'a\\\\nb\\\\xff'
>>> csv_cell("=HYPERLINK(1)")
"'=HYPERLINK(1)"
"""

from __future__ import annotations

import hashlib
import os
import re
import urllib.parse

# Bytes a student id keeps as they are: what nbgrader, a shell and a spreadsheet read
# alike. Everything else, '%' included, is percent-encoded, so the encoding is
# reversible (:func:`name_of`) and two names never share an id.
_KEEP = re.compile(rb"[A-Za-z0-9_.@-]")
# Ids longer than this (a 255-byte name of emoji is 765 characters encoded) keep a
# readable head and a hash of the whole name: nbgrader's student id column holds 128.
MAX_ID = 100
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def student_id(name: bytes | str) -> str:
    """A safe, reversible gradebook id for a folder or file name of any bytes.

    Letters, digits and ``_.@-`` stay; every other byte becomes ``%XX``, and so does a
    first character that a shell or spreadsheet would read as an option or formula
    (``-``, ``.``, ``@``)."""
    raw = os.fsencode(name)
    out = []
    for i, byte in enumerate(raw):
        char = bytes([byte])
        keep = _KEEP.fullmatch(char) and not (i == 0 and char in b"-.@")
        out.append(char.decode() if keep else f"%{byte:02X}")
    sid = "".join(out) or "%00"  # an empty name cannot come from a folder
    if len(sid) > MAX_ID:
        digest = hashlib.sha256(raw).hexdigest()[:16]
        head = sid[: MAX_ID - 20]
        if "%" in head[-2:]:  # never cut an escape in two
            head = head[: head.rindex("%")]
        sid = f"{head}~{digest}"
    return sid


def name_of(sid: str) -> bytes:
    """The name :func:`student_id` encoded (not for ids shortened with a hash)."""
    return urllib.parse.unquote_to_bytes(sid)


def printable(text: str) -> str:
    """``text`` with every character a terminal or a log would act on escaped
    (``\\n``, ``\\x1b``, ``\\u202e``, lone surrogates), the rest as it is."""
    return "".join(
        c
        if c.isprintable()
        else c.encode("unicode_escape", "backslashreplace").decode()
        for c in text
    )


def shown(name: bytes | str) -> str:
    """A name (bytes as Linux gives them) as one printable line: UTF-8 where it is,
    ``\\xNN`` for bytes that are not, control characters escaped."""
    raw = os.fsencode(name)
    return printable(raw.decode("utf-8", "backslashreplace"))


def csv_cell(value):
    """A value for a CSV cell that a spreadsheet shows as text, never runs: a string
    starting with ``= + - @``, a tab or a carriage return gets a leading ``'``
    (numbers are left alone); lone surrogates are escaped so the file stays UTF-8."""
    if not isinstance(value, str):
        return value
    value = value.encode("utf-8", "backslashreplace").decode("utf-8")
    return "'" + value if value.startswith(_FORMULA_START) else value


def plain_label(text: str, limit: int = 60) -> str:
    """A one-line plot label: printable, at most ``limit`` characters. Draw it with
    ``parse_math=False`` so that ``$`` is a dollar sign, not TeX."""
    text = printable(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"
