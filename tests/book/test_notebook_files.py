"""The committed notebooks: in step with their sources, without outputs, with valid nbgrader metadata."""

import json
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted(
    p
    for d in ("book", "solutions")
    for p in (ROOT / d).rglob("*.ipynb")
    if ".ipynb_checkpoints" not in p.parts
)
SOLUTIONS = sorted((ROOT / "solutions").glob("*/exercise.ipynb"))


def run(*args):
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, capture_output=True, text=True
    )


def test_generated_notebooks_match_their_sources():
    proc = run("tools/nbsync.py", "--check")
    assert proc.returncode == 0, f"run `make notebooks`:\n{proc.stdout}{proc.stderr}"


@pytest.mark.slow
def test_student_versions_match_nbgrader_generate_assignment():
    proc = run("tools/release.py", "--check")
    assert proc.returncode == 0, f"run `make notebooks`:\n{proc.stdout}{proc.stderr}"


def test_every_notebook_has_a_source():
    for nb in NOTEBOOKS:
        rel = nb.relative_to(ROOT)
        if rel.parts[0] == "book" and rel.name == "exercise.ipynb":
            assert (ROOT / "solutions" / rel.parent.name / "exercise.ipynb").exists(), (
                rel
            )
        else:
            assert (ROOT / "nbsrc" / rel).with_suffix(".py").exists(), (
                f"{rel} has no source in nbsrc/"
            )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_committed_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, (
                f"{path.name}: cell with outputs"
            )


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.parent.name)
def test_nbgrader_metadata_is_valid(path):
    nb = nbformat.read(path, as_version=4)
    ids, graded = [], 0
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader")
        if meta is None:
            continue
        assert meta["schema_version"] == 3
        ids.append(meta["grade_id"])
        assert re.fullmatch(r"[A-Za-z0-9_-]+", meta["grade_id"]), meta["grade_id"]
        if meta["solution"]:
            assert cell.cell_type == "code" and not meta["locked"]
            assert (
                "### BEGIN SOLUTION" in cell.source
                and "### END SOLUTION" in cell.source
            ), meta["grade_id"]
        if meta["grade"]:
            graded += 1
            assert (
                meta["locked"]
                and isinstance(meta.get("points"), int)
                and meta["points"] > 0
            ), meta["grade_id"]
            assert "### BEGIN SOLUTION" not in cell.source
        if "BEGIN HIDDEN TESTS" in cell.source:
            assert meta["grade"], (
                f"hidden tests outside a graded cell: {meta['grade_id']}"
            )
    assert len(ids) == len(set(ids)), f"duplicate grade_ids: {ids}"
    assert graded >= 2


def test_toc_lists_existing_files_and_every_chapter_notebook():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = re.findall(r"file: (\S+)", (ROOT / "_toc.yml").read_text())
    assert toc["root"] and files
    for entry in files + [toc["root"]]:
        assert any((ROOT / f"{entry}{ext}").exists() for ext in (".md", ".ipynb")), (
            f"_toc.yml names missing {entry}"
        )
    for nb in NOTEBOOKS:
        rel = nb.relative_to(ROOT).with_suffix("").as_posix()
        if rel.startswith("book/"):
            assert rel in files, (
                f"{rel} is not in _toc.yml, so the book would not build it"
            )
