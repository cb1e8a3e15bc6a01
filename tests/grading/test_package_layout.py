"""The grading side imports the reference, never the reverse; the kernel side needs no nbgrader.

Bug this guards against: grading machinery living inside the package a learner studies, so that
"do not call tformer_ref" needed path-prefix exceptions, and nbgrader became an undeclared
dependency of the reference.
"""

import ast
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import tformer_grading.checks
import tformer_ref

ROOT = Path(__file__).resolve().parents[2]


def _imported_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_no_reference_module_names_the_grading_package():
    offenders = {
        str(p.relative_to(ROOT)): sorted(
            n
            for n in _imported_names(p)
            if n.split(".")[0] in ("tformer_grading", "nbgrader")
        )
        for p in (ROOT / "tformer_ref").rglob("*.py")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def _modules_loaded_by(code: str) -> list[str]:
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            code + "\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    ).stdout
    return json.loads(out.splitlines()[-1])


def test_importing_every_reference_module_loads_no_grading_code():
    names = [
        f"tformer_ref.{m.name}" for m in pkgutil.iter_modules(tformer_ref.__path__)
    ]
    loaded = _modules_loaded_by("\n".join(f"import {n}" for n in names))
    assert set(names) <= set(loaded)
    assert [
        m for m in loaded if m.split(".")[0] in ("tformer_grading", "nbgrader")
    ] == []


def test_the_checks_a_kernel_imports_need_no_nbgrader():
    checks = [
        f"tformer_grading.checks.{m.name}"
        for m in pkgutil.iter_modules(tformer_grading.checks.__path__)
    ]
    loaded = _modules_loaded_by("\n".join(f"import {n}" for n in checks))
    assert set(checks) <= set(loaded)
    assert [
        m for m in loaded if m.split(".")[0] in ("nbgrader", "nbclient", "nbconvert")
    ] == []


def test_the_grading_package_does_import_the_reference():
    # The direction is one-way, not absent: the checks compare against tformer_ref.
    uses = set().union(
        *(_imported_names(p) for p in (ROOT / "tformer_grading").rglob("*.py"))
    )
    assert any(n.split(".")[0] == "tformer_ref" for n in uses)
