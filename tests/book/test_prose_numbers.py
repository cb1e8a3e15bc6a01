"""Measured numbers in the lessons' prose come from the executed cells.

The bug this guards against: prose that said one thing ("the time changes little with
H", "a few percent of padding", "measured 1.4x to 2x") while the output right under it
said another (+31 %, 10 %, 2.9x). A number a rerun or a GPU would change is inserted
from the cell that measured it, with myst-nb's ``glue`` (``glue("key", value,
display=False)`` in code, ``{glue:text}`key:.1f``` in markdown), or printed by the cell.

The scan looks for a number next to a unit of time, size, speed or proportion in the
lessons' markdown. Constants that are not measurements (a paper's 4000 warm-up steps, a
pass mark) are allowed below, each with its reason.
"""

from __future__ import annotations

import re

from prose import FENCE, LESSONS, PAGES, ROLE, code_of, markdown_sources

MEASUREMENT = re.compile(
    r"(?<![\w.])[-+−~≈]?\d[\d,]*(?:\.\d+)?(?:[eE][-+−]?\d+)?\s*"
    r"(?:ms|µs|us|s|min|%|×|x|MB|MiB|GB|GiB|KB|KiB|kB|it/s|tokens/s)(?![\w/])"
    r"|\d+(?:\.\d+)?\s*times\s+(?:faster|slower|smaller|larger|bigger|more|less|fewer|as)",
    re.I,
)

# (file, phrase on the same line, reason): the phrase must occur on the line of the hit.
ALLOWED = [
    (
        "book/running.md",
        "2 to 5 GB of disk",
        "an installation requirement (CPU or CUDA build of PyTorch), not a result",
    ),
    (
        "book/instructors.md",
        "per cell (60 s in",
        "settings of nbgrader_config.py (checked by tests/grading/test_preflight.py)",
    ),
    ("book/instructors.md", "(60 s; the tests use 15 s)", "settings, not measurements"),
    (
        "book/instructors.md",
        "more than 2,000 cells or 20 MB",
        "preflight.py's limits (checked by tests/grading/test_preflight.py)",
    ),
    (
        "book/instructors.md",
        "one scratch space of 512 MB",
        "a sandbox.Limits default (checked by tests/grading/test_preflight.py)",
    ),
    (
        "book/instructors.md",
        "per notebook (900 s)",
        "a setting of nbgrader_config.py (checked by tests/grading/test_preflight.py)",
    ),
    (
        "book/instructors.md",
        "32 MB per message and 512 MB per notebook",
        "BoundedKernelClient's settings (checked by tests/grading/test_preflight.py)",
    ),
    (
        "book/instructors.md",
        "6 GB of memory, 512 MB of scratch space, 256 MB per file",
        "sandbox.Limits defaults (checked by tests/grading/test_preflight.py)",
    ),
    (
        "book/instructors.md",
        "(3,072 MB)",
        "classworker.WORKER_MEMORY (checked by tests/grading/test_preflight.py)",
    ),
    (
        "book/instructors.md",
        "6 GB of memory, 256 processes",
        "sandbox.Limits defaults (checked by tests/grading/test_preflight.py)",
    ),
    (
        "book/instructors.md",
        "at most 2 GB for a class and 100 MB for one learner",
        "submissions.py's limits (checked by tests/grading/test_submissions.py)",
    ),
    (
        "book/instructors.md",
        "an error message of 10 MB",
        "the size of an attack, not a result",
    ),
    (
        "book/instructors.md",
        "| 20 MB of output |",
        "the size of an attack, not a result",
    ),
    (
        "book/instructors.md",
        "one message of 40 MB",
        "the size of an attack, not a result",
    ),
    (
        "book/intro.md",
        "a toy task trained to 99 % on a CPU",
        "the capstone's pass mark",
    ),
    ("book/pitfalls.md", "shape 32 × 64 × 512", "the seed's input shape"),
]


def scanned_text(text: str) -> str:
    """Markdown without glued values, seed quotations, code spans, maths or blocks."""
    text = FENCE.sub("", text)
    text = ROLE.sub(
        lambda r: "" if r["name"].startswith(("glue", "seed")) else r[0], text
    )
    text = re.sub(r"`[^`]*`", "", text)
    return re.sub(r"\$[^$]*\$", "", text)


def typed_measurements():
    """(where, hit, line, allow-list entry or None) for every number with a unit."""
    for md in markdown_sources(exercises=False):
        for line in scanned_text(md.text).splitlines():
            for hit in MEASUREMENT.finditer(line):
                entry = next(
                    (a for a in ALLOWED if md.where.startswith(a[0]) and a[1] in line),
                    None,
                )
                yield md.where, hit[0], line.strip(), entry


def test_the_scan_finds_typed_measurements():
    line = (
        "Bucketing leaves 10 % of padding and runs 2.9x faster, 4.07 s against 1.39 s."
    )
    assert [h[0] for h in MEASUREMENT.finditer(line)] == [
        "10 %",
        "2.9x",
        "4.07 s",
        "1.39 s",
    ]
    assert not list(MEASUREMENT.finditer(scanned_text("{glue:text}`speedup:.1f`x")))


def test_no_measurement_is_typed_into_the_prose():
    typed = [
        f"{where}: {hit!r} in: {line[:100]}"
        for where, hit, line, entry in typed_measurements()
        if entry is None
    ]
    assert not typed, (
        "numbers typed into prose (glue them from the cell that measures "
        "them, or allow a constant in ALLOWED with its reason):\n" + "\n".join(typed)
    )


def test_every_allowed_constant_is_still_there():
    used = {entry for *_, entry in typed_measurements() if entry}
    stale = [entry for entry in ALLOWED if entry not in used]
    assert not stale, f"allow-list entries that match nothing any more: {stale}"


GLUE_ROLE = re.compile(r"\{glue(?::\w+)?\}`(?P<key>[^`:]+)")
GLUE_CALL = re.compile(r"\bglue\(\s*(?P<f>f?)[\"'](?P<key>[^\"']+)[\"']")


def test_every_glued_value_is_glued_by_its_page():
    missing = []
    for path in LESSONS:
        calls = [m for m in GLUE_CALL.finditer(code_of(path))]
        literal = {m["key"] for m in calls if not m["f"]}
        patterns = [
            re.compile(re.sub(r"\\\{[^}]*\\\}", ".+", re.escape(m["key"])) + "$")
            for m in calls
            if m["f"]
        ]
        for md in markdown_sources(exercises=False, pages=False):
            if md.path != path:
                continue
            for role in GLUE_ROLE.finditer(md.text):
                key = role["key"]
                if key not in literal and not any(p.match(key) for p in patterns):
                    missing.append(f"{md.where}: {key}")
    assert not missing, "glue keys shown but never glued:\n" + "\n".join(missing)
