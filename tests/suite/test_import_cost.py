"""Regression: every process that reads a notebook paid 2.4 s before doing anything.

The bug: ``nbgrader --version`` took 4.6 s here, and every nbgrader command, grading
worker, pytest worker and book build paid the same. ``import nbformat`` imports
jsonschema, whose format checkers (from 4.25, with the ``format-nongpl`` extra that
jupyter-events asks for) import ``rfc3987_syntax``, and that package builds a Lark
Earley parser for the IRI grammar when it is imported: 2.4 s of a 2-core machine's
time, for a format ("iri") that no notebook schema uses. The cause was found with
``python -X importtime -m nbgrader --version``. Upstream:
python-jsonschema/jsonschema#1428.

The guard: jsonschema is pinned to 4.24.0, the newest release whose extra does not
pull the package in, and requirements.txt lists neither it nor Lark. This test fails
when reading a notebook loads either again.
"""

import subprocess
import sys

PROBE = """
import sys
import nbformat
from nbgrader.api import Gradebook
print(*sorted({"rfc3987_syntax", "lark"} & set(sys.modules)) or ["none"])
"""


def test_reading_a_notebook_builds_no_grammar():
    proc = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["none"], (
        f"importing nbformat and nbgrader loaded {proc.stdout.strip()}: about 2 s more "
        "for every nbgrader command and grading worker (see this file's docstring)"
    )
