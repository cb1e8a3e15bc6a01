"""The learner kit as a learner meets it: unpack, install, open an exercise, grade it.

The kit of the shared book build (tools/kit.py, run by `make book`; every page of the book
links to its zip: it writes the book's executed values into the lessons, so it needs the
build) is checked for anything that would publish a solution, unpacked into a clean
folder and installed, not editable, into a fresh virtual environment, so that the kit's own
copy of the packages is what runs. Its third-party packages come from the course's environment
through a .pth file: installing torch and the rest again would take minutes and the network.
An exercise copied as it was released, nothing filled in, is then self-graded with the kit's
command: only the visible checks can run (the kit has no solutions/), and the report says so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import nbformat
import pytest
import yaml
from course import ROOT

from book import HTML, build_book

# The kit comes from the book's build, built once per worker: all its users share one.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("book")]

CHAPTER = "ch01_shapes"
SETUP = [
    "python3 -m venv .venv && source .venv/bin/activate",
    "pip install -r requirements.txt && python tools/learner_lab.py",
]
FORBIDDEN = ["### BEGIN SOLUTION", "### BEGIN HIDDEN TESTS", "### END SOLUTION"]


def _run(args, cwd, env=None, timeout=180) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="module")
def kit() -> Path:
    proc = build_book()
    assert proc.returncode == 0, f"the book or its kit failed:\n{proc.stdout[-8000:]}"
    return HTML / "course-kit.zip"


def _as_released(data: bytes) -> list:
    """The cells that grading reads: every code cell and every cell nbgrader knows."""
    nb = nbformat.reads(data.decode(), as_version=4)
    return [
        (c.cell_type, c.source, c.metadata)
        for c in nb.cells
        if c.cell_type == "code" or "nbgrader" in c.metadata
    ]


def _members(kit: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(kit) as archive:
        top = {name.split("/")[0] for name in archive.namelist()}
        assert len(top) == 1, f"the kit unpacks into one folder, not {sorted(top)}"
        return {
            name.split("/", 1)[1]: archive.read(name)
            for name in archive.namelist()
            if not name.endswith("/")
        }


def test_kit_has_the_course_and_no_solutions(kit):
    files = _members(kit)
    assert not [n for n in files if n.startswith("solutions/")]
    leaks = [n for n, data in files.items() for m in FORBIDDEN if m.encode() in data]
    assert not leaks, f"solution or hidden-test code in the kit: {leaks}"
    for name in [
        "README.md",
        "AGENTS.md",
        "requirements.txt",
        "pyproject.toml",
        "nbgrader_config.py",
        "tools/learner_lab.py",
        "tformer_ref/__init__.py",
        "tformer_grading/__main__.py",
        f"book/{CHAPTER}/lesson.ipynb",
    ]:
        assert name in files, f"the kit lacks {name}"
    # Every exercise the course grades, as released to learners: only its plain text may
    # differ, where the kit writes out the book's MyST roles (tools/kit_lessons.py).
    for solution in sorted((ROOT / "solutions").glob("*/exercise.ipynb")):
        released = f"book/{solution.parent.name}/exercise.ipynb"
        assert released in files, released
        assert _as_released(files[released]) == _as_released(
            (ROOT / released).read_bytes()
        ), released
    assert files["book/ch06_training/capstone.ipynb"]
    readme = files["README.md"].decode()
    for command in SETUP:
        assert command in readme, f"README lacks the set-up command {command!r}"
    # An address only when the course has one (issue 29: a placeholder was shown).
    url = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    if url:
        assert url in readme
    else:
        assert "github" not in readme.lower() and "source:" not in readme
    # A learner's packages only (requirements by purpose), not the book's and tests'.
    assert files["requirements.txt"] == (ROOT / "requirements/learner.txt").read_bytes()
    for tool in ("pytest", "jupyter-book", "selenium", "ruff", "psycopg2"):
        assert f"\n{tool}" not in files["requirements.txt"].decode(), tool


def _fresh_venv(folder: Path) -> Path:
    """A new venv that sees the course environment's third-party packages, not its own."""
    _run([sys.executable, "-m", "venv", "--without-pip", folder], folder.parent)
    python = folder / "bin" / "python"
    site = Path(
        _run(
            [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            folder,
        ).stdout.strip()
    )
    # A path line, not site.addsitedir: the course environment's own .pth files (its editable
    # install of this repository) must not be processed.
    (site / "course-env.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return python


def _clean_env(venv: Path) -> dict:
    env = {
        k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")
    }
    # The console scripts the grading calls by name (alembic) were not installed in the
    # fresh venv (its requirements were not): they come from the course's environment,
    # as their packages do.
    env["PATH"] = os.pathsep.join(
        [str(venv / "bin"), str(Path(sys.executable).parent), os.environ["PATH"]]
    )
    return env


def test_kit_installs_and_self_grades_an_exercise(kit, tmp_path):
    with zipfile.ZipFile(kit) as archive:
        archive.extractall(tmp_path / "unpacked")
    (folder,) = (tmp_path / "unpacked").iterdir()
    python = _fresh_venv(tmp_path / "venv")
    env = _clean_env(tmp_path / "venv")
    install = _run(
        [
            *(python, "-m", "pip", "install", "--quiet", "--no-deps"),
            *("--no-build-isolation", "--ignore-installed", folder),
        ],
        tmp_path,
        env,
    )
    assert install.returncode == 0, install.stdout
    where = _run(
        [
            python,
            "-c",
            (
                "import json, tformer_ref, tformer_grading;"
                "from importlib.resources import files;"
                "corpus = files('tformer_ref') / 'corpora' / 'devils_dictionary.txt';"
                "print(json.dumps([tformer_ref.__file__, tformer_grading.__file__,"
                " corpus.is_file()]))"
            ),
        ],
        tmp_path,
        env,
    )
    assert where.returncode == 0, where.stdout
    ref, grading, corpus = json.loads(where.stdout.splitlines()[-1])
    # The installed copy, not this repository's nor the unpacked folder's.
    for package in (ref, grading):
        assert Path(package).is_relative_to(tmp_path / "venv"), package
    assert corpus, "the installed tformer_ref lacks chapter 8's corpus"

    # The rest of the second set-up command: JupyterLab set up for a learner in this venv.
    lab = _run([python, "tools/learner_lab.py"], folder, env)
    assert lab.returncode == 0, lab.stdout
    settings = tmp_path / "venv" / "share" / "jupyter" / "lab" / "settings"
    overrides = json.loads((settings / "overrides.json").read_text())
    assert (
        overrides["@jupyterlab/apputils-extension:notification"]["fetchNews"] == "false"
    )
    disabled = json.loads((settings / "page_config.json").read_text())
    assert "@jupyter/nbgrader:create-assignment" in disabled["disabledExtensions"]

    # A learner's copy of the released exercise, nothing filled in yet.
    mine = folder / "my_ch01.ipynb"
    mine.write_bytes((folder / "book" / CHAPTER / "exercise.ipynb").read_bytes())
    graded = _run(
        [python, "-m", "tformer_grading", mine.name], folder, env, timeout=240
    )
    out = graded.stdout
    assert graded.returncode == 0, out
    assert f"({CHAPTER})" in out and "Visible checks only" in out, out
    released = json.loads(mine.read_text())["cells"]
    checks = [
        c["metadata"]["nbgrader"]["grade_id"]
        for c in released
        if c["metadata"].get("nbgrader", {}).get("grade")
    ]
    assert checks, "the released exercise has no graded cells"
    # Each graded cell has its line; the unanswered ones lost their points and say why.
    for grade_id in checks:
        assert f" {grade_id} " in out, f"{grade_id} missing from the report:\n{out}"
    # Unanswered cells lost their points; a cell whose test is hidden (not in the kit)
    # is not scored at all, rather than passing with nothing in it.
    hidden = [line for line in out.splitlines() if "hidden test, not run here" in line]
    assert len(hidden) >= 1, out
    assert out.count("✗ ") >= len(checks) - len(hidden) - 1, out
    assert "not answered yet" in out.lower(), out
    total = next(line for line in out.splitlines() if line.startswith("Total:"))
    scored, _, possible = total.split()[1:4]
    assert float(possible) > 0 and float(scored) < float(possible) / 2, total
