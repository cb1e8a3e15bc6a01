"""What a maintainer reads to change how one exercise is graded: its module, whole, and
in every other module of the checks the definitions it reaches (the names it imports,
and what those use in turn, across files), with their lines.

Issue 26 measured 1,270-1,920 lines in 4-5 files for ch02 ``attention``, ch04
``encoder_block`` and ch06 ``train_step`` before the rebuild. Only top-level
definitions are followed (a function, a class, a constant), whole; the guard and the
reference package are not counted: they are not the grading, and neither is another
exercise's ``check_*`` that one calls (own_model runs the chapters' checks): what it
accepts is that exercise's specification.

A second count reads the shared machinery (``checks.SHARED_MODULES``: the measuring
toolkit, the flow, the diagnosis API, the cases) as one reads a library: by the
signature and docstring of each definition the exercise reaches, not its body, nor
what the body calls in turn.

Usage: python tools/lines_to_read.py [--markdown]
"""

from __future__ import annotations

import argparse
import ast
import functools
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tformer_grading import checks

PACKAGE = "tformer_grading.checks"


@dataclass(frozen=True)
class Definition:
    lines: int
    uses: frozenset  # names read inside it: "x", or "module.x" for an attribute
    interface: int  # its signature and docstring (a class: its methods' too)


@dataclass(frozen=True)
class Module:
    path: Path
    lines: int
    definitions: dict  # name -> Definition
    imported: dict  # local name -> (module, name or None for the module itself)


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:  # a name inside a module, not a module
        return False


def _uses(node: ast.AST) -> frozenset:
    found = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            found.add(sub.id)
        elif isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name):
            found.add(f"{sub.value.id}.{sub.attr}")
    return frozenset(found)


def _interface(node: ast.stmt) -> int:
    """The lines a caller reads of a definition: decorators, signature and docstring
    (a class: also each method's, and its fields); a constant, whole."""
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return node.end_lineno - first + 1
    body = node.body
    documented = (
        isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    )
    head = (body[0].end_lineno if documented else body[0].lineno - 1) - first + 1
    if isinstance(node, ast.ClassDef):
        head += sum(_interface(n) for n in body[documented:] if _bound(n))
    return head


def _bound(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.Assign):  # `A = ...` and `A, B = ...`
        targets = [e for t in node.targets for e in getattr(t, "elts", [t])]
        return [t.id for t in targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


@functools.cache
def parse(name: str) -> Module | None:
    """The module ``name`` of the checks, read; None for any other."""
    if not name.startswith(PACKAGE) or not _is_module(name):
        return None
    path = Path(importlib.util.find_spec(name).origin)
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    definitions, imported = {}, {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            source = ".".join(p for p in (base, node.module) if p)
            for alias in node.names:
                local = alias.asname or alias.name
                if _is_module(f"{source}.{alias.name}"):
                    imported[local] = (f"{source}.{alias.name}", None)
                else:
                    imported[local] = (source, alias.name)
            continue
        first = min(
            [node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))]
        )
        for bound in _bound(node):
            definitions[bound] = Definition(
                node.end_lineno - first + 1, _uses(node), _interface(node)
            )
    return Module(path, len(text.splitlines()), definitions, imported)


def _shared(module: str) -> bool:
    """A module of the shared machinery (the toolkit, the flow, the diagnosis API)."""
    return module[len(PACKAGE) + 1 :].split(".")[0] in checks.SHARED_MODULES


def _follow(module: str, name: str, seen: set, interface: bool) -> None:
    """Add (module, name) and everything its definition reaches to ``seen``; with
    ``interface``, a shared module's definition is read by its interface, and what
    its body uses is not followed."""
    parsed = parse(module)
    if parsed is None or (module, name) in seen:
        return
    seen.add((module, name))
    if name in parsed.imported:  # a re-export: the definition is elsewhere
        source, inner = parsed.imported[name]
        if inner is not None:
            _follow(source, inner, seen, interface)
        return
    definition = parsed.definitions.get(name)
    if interface and _shared(module):
        return
    # Another exercise's check is called, not read: what it accepts is its own spec.
    if definition is not None and not name.startswith("check_"):
        for use in definition.uses:
            _reach(module, use, seen, interface)


def _reach(module: str, use: str, seen: set, interface: bool) -> None:
    parsed = parse(module)
    head, _, attr = use.partition(".")
    if head in parsed.imported:
        source, inner = parsed.imported[head]
        if inner is None and attr:  # `ch01.check_x` on an imported module
            _follow(source, attr, seen, interface)
        elif inner is not None:
            _follow(source, inner, seen, interface)
    elif head in parsed.definitions:
        _follow(module, head, seen, interface)


def reading(module_name: str, interface: bool = False) -> list[tuple[str, int]]:
    """[(file, lines read)]: the exercise module whole, then the other files. With
    ``interface``, the shared machinery is read as a toolkit is: by the signature
    and docstring of each definition the exercise reaches, not its body."""
    own = parse(module_name)
    seen: set = set()
    # Every use of the module's own definitions, its checks' included (_follow stops
    # at a check_* only because another exercise's check is called, not read).
    for definition in own.definitions.values():
        for use in definition.uses:
            _reach(module_name, use, seen, interface)
    per_file: dict[Path, int] = {}
    for module, name in sorted(seen):
        parsed = parse(module)
        if module == module_name or parsed.path.name == "__init__.py":
            continue
        definition = parsed.definitions.get(name)
        if definition is not None and not name.startswith("check_"):
            read = definition.lines
            if interface and _shared(module):
                read = definition.interface
            per_file[parsed.path] = per_file.get(parsed.path, 0) + read
    base = Path(checks.__file__).parent
    return [
        (str(own.path.relative_to(base)), own.lines),
        *((str(p.relative_to(base)), n) for p, n in per_file.items()),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--markdown", action="store_true", help="a table for a note")
    markdown = parser.parse_args().markdown
    if markdown:
        print(
            "| exercise module | own lines | files | lines to read "
            "| toolkit by interface | elsewhere |"
        )
        print("|---|---:|---:|---:|---:|---|")
    for module in checks.exercise_modules():
        name = module.__name__[len(PACKAGE) + 1 :]
        files = reading(module.__name__)
        total = sum(n for _, n in files)
        by_interface = sum(n for _, n in reading(module.__name__, interface=True))
        others = ", ".join(f"{f} {n}" for f, n in files[1:])
        if markdown:
            print(
                f"| {name} | {files[0][1]} | {len(files)} | {total:,} "
                f"| {by_interface:,} | {others} |"
            )
        else:
            print(
                f"{name:26} {files[0][1]:5} own {len(files):3} files {total:6,} "
                f"lines, {by_interface:6,} with the toolkit read by interface"
            )
            print(f"    {others}")


if __name__ == "__main__":
    main()
