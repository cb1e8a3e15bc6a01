"""Read a submitted notebook before any kernel starts: refuse what cannot be graded,
and put back the nbgrader metadata a learner's editor (or the learner) changed.

Runs in the grader's process on untrusted bytes, without importing nbgrader or
torch, so a learner's self-grade reports a broken notebook at once. What cannot be
graded raises :class:`NotGradable` with a reason a person can act on; what can be
repaired is repaired and said in :attr:`Submission.notes`:

- a graded or answer cell's nbgrader metadata (points, grade flags, schema
  version, cell type) is the assignment's, whatever the submission says;
- a second cell with the same grade_id (a pasted copy of an answer cell) and a
  cell claiming a grade_id the assignment does not have are graded as ordinary
  cells: they still run, but carry no points;
- the kernel is the assignment's (a notebook cannot name another one), and saved
  outputs are dropped;
- text that is no Unicode character (a lone surrogate, valid JSON that no editor
  writes) becomes ``?``.
"""

from __future__ import annotations

import copy
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from .course import GradeError

MAX_BYTES = 20 << 20
MAX_CELLS = 2000
_CELL_KEYS = {"code": ("outputs", "execution_count"), "markdown": (), "raw": ()}


class NotGradable(GradeError):
    """This submission cannot be graded; the message says why."""


@dataclass
class Submission:
    notebook: dict
    notes: list[str] = field(default_factory=list)


def read_bytes(path: Path, max_bytes: int = MAX_BYTES) -> bytes:
    """The file's bytes: a regular file (not a link, folder or device), not too big."""
    try:
        info = os.lstat(path)
    except OSError as exc:
        raise NotGradable(f"cannot read {path.name}: {exc.strerror}") from None
    if stat.S_ISLNK(info.st_mode):
        raise NotGradable(f"{path.name} is a symbolic link, not a notebook file")
    if not stat.S_ISREG(info.st_mode):
        raise NotGradable(f"{path.name} is not a regular file")
    if info.st_size > max_bytes:
        raise NotGradable(
            f"{path.name} is {info.st_size / 2**20:.1f} MB; at most "
            f"{max_bytes / 2**20:.0f} MB are graded (clear its outputs)"
        )
    with open(path, "rb") as f:
        return f.read(max_bytes + 1)


def parse(data: bytes, name: str = "the notebook") -> dict:
    """The notebook as JSON, or NotGradable naming what is wrong with it."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NotGradable(
            f"{name} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
            f"{exc.start}): save it again from Jupyter"
        ) from None
    try:
        nb = json.loads(text)
    except json.JSONDecodeError as exc:
        raise NotGradable(
            f"{name} is not valid JSON (line {exc.lineno}, column {exc.colno}: "
            f"{exc.msg}); it was probably cut or edited by hand"
        ) from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise NotGradable(f"{name} is JSON but not a notebook (no list of cells)")
    if nb.get("nbformat") != 4:
        raise NotGradable(
            f"{name} has notebook format {nb.get('nbformat')!r}; only format 4 "
            "(what Jupyter writes) is graded"
        )
    return nb


def _cell(cell, index: int) -> dict:
    if not isinstance(cell, dict) or cell.get("cell_type") not in _CELL_KEYS:
        raise NotGradable(f"cell {index + 1} is not a code, markdown or raw cell")
    source = cell.get("source", "")
    if isinstance(source, list) and all(isinstance(s, str) for s in source):
        source = "".join(source)
    if not isinstance(source, str):
        raise NotGradable(f"cell {index + 1} has no text as its source")
    metadata = cell.get("metadata")
    return {
        "cell_type": cell["cell_type"],
        "source": source,
        "metadata": metadata if isinstance(metadata, dict) else {},
    }


def _typed(cell: dict, cell_type: str) -> dict:
    out = {"cell_type": cell_type, "metadata": cell["metadata"]}
    out["source"] = cell["source"]
    if cell_type == "code":
        out.update(outputs=[], execution_count=None)
    return out


def _meaning(meta: dict) -> dict:
    """The nbgrader metadata that decides grading (generate_assignment adds a checksum
    and the cell type to the student version; nbgrader recomputes both)."""
    return {k: v for k, v in meta.items() if k not in ("checksum", "cell_type")}


def graded_cells(source_nb: dict) -> dict[str, tuple[str, dict]]:
    """grade_id -> (cell type, nbgrader metadata) of the assignment's own notebook."""
    found = {}
    for cell in source_nb["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader")
        if meta and meta.get("grade_id"):
            found[meta["grade_id"]] = (cell["cell_type"], meta)
    return found


def sanitize(nb: dict, source_nb: dict, max_cells: int = MAX_CELLS) -> Submission:
    """``nb`` with the assignment's metadata put back (see the module docstring)."""
    cells = nb["cells"]
    if len(cells) > max_cells:
        raise NotGradable(
            f"the notebook has {len(cells):,} cells; at most {max_cells:,} are graded"
        )
    known = graded_cells(source_nb)
    seen: set[str] = set()
    out = Submission({**nb, "cells": []})
    for index, raw in enumerate(cells):
        cell = _cell(raw, index)
        meta = cell["metadata"].get("nbgrader")
        gid = meta.get("grade_id") if isinstance(meta, dict) else None
        if meta is not None and (gid not in known or gid in seen):
            why = "a second copy of" if gid in seen else "not one of the graded cells:"
            out.notes.append(
                f"cell {index + 1} ({why} {gid!r}) was graded as an ordinary cell"
            )
            cell["metadata"] = {
                k: v
                for k, v in cell["metadata"].items()
                if k not in ("nbgrader", "editable", "deletable")
            }
        elif meta is not None:
            seen.add(gid)
            cell_type, source_meta = known[gid]
            if _meaning(meta) != _meaning(source_meta):
                out.notes.append(
                    f"cell {gid!r}: its nbgrader metadata was put back as the "
                    "assignment has it"
                )
            cell["metadata"]["nbgrader"] = copy.deepcopy(source_meta)
            if cell["cell_type"] != cell_type:
                out.notes.append(f"cell {gid!r}: graded as a {cell_type} cell again")
                cell["cell_type"] = cell_type
        out.notebook["cells"].append(_typed(cell, cell["cell_type"]))
    metadata = nb.get("metadata") if isinstance(nb.get("metadata"), dict) else {}
    named = metadata.get("kernelspec")
    wanted = source_nb.get("metadata", {}).get("kernelspec")
    if (
        named
        and wanted
        and isinstance(named, dict)
        and named.get("name") != wanted.get("name")
    ):
        out.notes.append(
            f"the notebook names the kernel {named.get('name')!r}; it was graded with "
            f"the assignment's ({wanted.get('name')!r})"
        )
    metadata = {k: v for k, v in metadata.items() if k not in ("kernelspec",)}
    for key in ("kernelspec", "language_info"):
        if key in source_nb.get("metadata", {}):
            metadata[key] = source_nb["metadata"][key]
    out.notebook.update(metadata=metadata, nbformat=4, nbformat_minor=4)
    return _unicode_only(out)


def _unicode_only(out: Submission) -> Submission:
    """A lone surrogate (``"\\udce9"`` in the JSON) is valid JSON but no character:
    nbgrader cannot save it, and the copy to grade could not be written. It becomes
    ``?``, and the notes say so."""
    text = json.dumps(out.notebook, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        out.notebook = json.loads(text.encode("utf-8", "replace").decode("utf-8"))
        out.notes.append(
            "text that is no Unicode character (a lone surrogate, which Jupyter "
            "cannot save) was replaced by '?'"
        )
    return out


def read_submission(
    path: Path, source: Path, *, max_bytes: int = MAX_BYTES, max_cells: int = MAX_CELLS
) -> Submission:
    """Read, check and repair the submission at ``path`` against the assignment's
    notebook ``source``. Raises :class:`NotGradable`."""
    nb = parse(read_bytes(path, max_bytes), path.name)
    return sanitize(nb, json.loads(Path(source).read_text()), max_cells)


def write(submission: Submission, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(submission.notebook, ensure_ascii=False, indent=1))
