"""Requirements by purpose: a learner installs what the kit's code imports, and no more.

Bug (issue 29, reader review 2026-12-05): the kit installed the whole development
toolchain, 174 packages and a 1.5 GB environment, for a learner who needs PyTorch,
JupyterLab, matplotlib, ipywidgets and the self-grade. Cause: one requirements file
served every purpose. Guard: ``requirements/learner.txt`` (what the kit ships),
``instructor.txt`` (adds the shared gradebook's driver) and ``requirements.txt`` (adds
the book and the tests); these tests hold each list closed under its packages' own
requirements, and the learner's list sufficient for every import of the code a learner
runs.
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import json
import re
import sys
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
FILES = {
    "learner": ROOT / "requirements" / "learner.txt",
    "instructor": ROOT / "requirements" / "instructor.txt",
    "everything": ROOT / "requirements.txt",
}
OWN = {"tformer_ref", "tformer_grading"}
# Come with the virtual environment and pip (pip freeze leaves them out of the pins).
INSTALLER = {"pip", "setuptools", "wheel"}


def _name(text: str) -> str:
    return re.sub(r"[-_.]+", "-", text).lower()


def pins(path: Path) -> dict[str, str]:
    """name -> version of every ``name==version`` line, following ``-r`` includes."""
    found: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line.startswith("-r "):
            found.update(pins(path.parent / line[3:].strip()))
        elif "==" in line:
            name, version = line.split("==")
            assert _name(name) not in found, f"{name} pinned twice ({path.name})"
            found[_name(name)] = version
        else:
            assert line in ("", "-e ."), f"{path.name}: an unpinned line {line!r}"
    return found


def _needs(dist: str) -> set[str]:
    """The distributions ``dist`` requires here (markers of this Python, no extras)."""
    needed = set()
    for text in md.requires(dist) or []:
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            needed.add(_name(req.name))
    return needed


def test_each_list_holds_the_one_before_it_and_pins_everything():
    learner, instructor, everything = (pins(p) for p in FILES.values())
    assert learner.items() <= instructor.items() <= everything.items()
    assert "psycopg2-binary" in instructor and "psycopg2-binary" not in learner
    for tool in ("pytest", "jupyter-book", "selenium", "ruff", "nbval"):
        assert tool in everything and tool not in instructor, tool
    assert len(learner) < len(everything) - 30


def test_each_list_is_closed_under_its_packages_requirements():
    for purpose, path in FILES.items():
        listed = pins(path)
        missing = {
            f"{dist} needs {need}"
            for dist in listed
            for need in _needs(dist)
            if need not in listed and need not in INSTALLER
        }
        assert not missing, f"{purpose}: {sorted(missing)}"


def _imports(source: str) -> set[str]:
    # Notebook magics and shell lines are not Python.
    code = "\n".join(
        "" if line.lstrip().startswith(("%", "!")) else line
        for line in source.splitlines()
    )
    found = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def _learner_code() -> set[str]:
    """Top-level modules imported by what a learner runs: the two packages, the lab
    set-up, the course's nbgrader config, and every notebook of the book."""
    modules: set[str] = set()
    files = [ROOT / "tools" / "learner_lab.py", ROOT / "nbgrader_config.py"]
    for package in OWN:
        files += sorted((ROOT / package).rglob("*.py"))
    for path in files:
        modules |= _imports(path.read_text())
    for path in sorted((ROOT / "book").glob("*/*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] == "code":
                modules |= _imports("".join(cell["source"]))
    return modules - OWN - set(sys.stdlib_module_names)


def test_the_learner_list_provides_every_import_of_the_learners_code():
    learner = pins(FILES["learner"])
    providers = md.packages_distributions()
    unprovided = {
        module: providers.get(module, ["(no installed distribution)"])
        for module in _learner_code()
        if not any(_name(d) in learner for d in providers.get(module, []))
    }
    assert not unprovided, (
        f"imported by the kit's code, not in learner.txt: {unprovided}"
    )
