"""Read a submitted notebook before any kernel starts: refuse what cannot be graded,
and put back the nbgrader metadata a learner's editor (or the learner) changed or lost.

Runs in the grader's process on untrusted bytes, without importing nbgrader or
torch, so a learner's self-grade reports a broken notebook at once. What cannot be
graded raises :class:`NotGradable` with a reason a person can act on; what can be
repaired is repaired and said in :attr:`Submission.notes`:

- a graded or answer cell's nbgrader metadata (points, grade flags, schema
  version, cell type) is the assignment's, whatever the submission says;
- a cell whose nbgrader metadata was lost or damaged (an editor that drops it, a
  copy into a new notebook) is matched to the assignment's cell: a locked cell by
  its text, any other by its cell id, an answer cell else by its place between
  matched cells. A notebook none of whose graded or answer cells can be matched is
  not graded, with a reason that says what to do; one that is another chapter's
  notebook is named as such (:class:`WrongChapter`);
- a check cell (graded, locked) that is missing is put back from the assignment,
  where nbgrader would put it (after the cell it follows there; before the next one
  it has when that cell is missing too, where nbgrader itself fails);
- a second cell with the same grade_id (a pasted copy of an answer cell) and a
  cell claiming a grade_id the assignment does not have (and matching none of its
  cells) are graded as ordinary cells: they still run, but carry no points;
- the kernel is the assignment's (a notebook cannot name another one), and saved
  outputs are dropped; a markdown or raw cell's attachments (an image pasted in
  JupyterLab) are kept when they are what Jupyter writes, a name -> {mime type:
  base64 text}, and left out with a note otherwise;
- metadata that Jupyter's own schema refuses (``"tags": "mine"``) or nested deeper
  than :data:`MAX_DEPTH` is left out, with a note: nbgrader refuses the first and
  crashes on the second;
- text that is no Unicode character (a lone surrogate, valid JSON that no editor
  writes) becomes ``?``; a UTF-8 byte-order mark (some Windows editors write one)
  is ignored.
"""

from __future__ import annotations

import base64
import binascii
import copy
import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from .course import GradeError

MAX_BYTES = 20 << 20
MAX_CELLS = 2000
# Nesting of a metadata value: Jupyter's own stays under ten levels; nbgrader copies
# metadata recursively and crashes on 900 levels (Python's recursion limit).
MAX_DEPTH = 32
_CELL_KEYS = {"code": ("outputs", "execution_count"), "markdown": (), "raw": ()}
_ATTACHING = ("markdown", "raw")  # the cells nbformat 4 lets carry attachments
_MARKS = ("nbgrader", "editable", "deletable")
LOST = (
    "the notebook's graded cells have lost their nbgrader marks and could not be "
    "matched to the assignment: download the assignment again and copy your "
    "answers in"
)


# nbgrader's ClearHiddenTests delimiters (its begin_test_delimeter and
# end_test_delimeter; tests/grading/test_preflight.py checks they are nbgrader's). Only
# the delimiter is named here: tools/kit.py refuses a file holding a marker line.
HIDDEN_TESTS = ("BEGIN HIDDEN TESTS", "END HIDDEN TESTS")
_HIDDEN = re.compile(
    rf"^[ \t]*### {HIDDEN_TESTS[0]}[ \t]*\n"
    rf".*?^[ \t]*### {HIDDEN_TESTS[1]}[ \t]*(?:\n|\Z)",
    re.DOTALL | re.MULTILINE,
)


class NotGradable(GradeError):
    """This submission cannot be graded; the message says why."""


class WrongChapter(NotGradable):
    """The notebook is chapter ``found``'s, handed in (or graded) as ``expected``."""

    def __init__(self, found: str, expected: str):
        super().__init__(f"this is the {found} notebook, handed in for {expected}")
        self.found, self.expected = found, expected


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
        nb = json.loads(text.removeprefix("\ufeff"))
    except json.JSONDecodeError as exc:
        raise NotGradable(
            f"{name} is not valid JSON (line {exc.lineno}, column {exc.colno}: "
            f"{exc.msg}); it was probably cut or edited by hand"
        ) from None
    except RecursionError:
        raise NotGradable(
            f"{name} is JSON nested too deeply to be a notebook; it was probably "
            "generated or edited by hand"
        ) from None
    except ValueError:  # Python reads no integer of more than 4,300 digits
        raise NotGradable(
            f"{name} holds a number of thousands of digits, which no notebook has; "
            "it was probably generated or edited by hand"
        ) from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise NotGradable(f"{name} is JSON but not a notebook (no list of cells)")
    if nb.get("nbformat") != 4:
        raise NotGradable(
            f"{name} has notebook format {nb.get('nbformat')!r}; only format 4 "
            "(what Jupyter writes) is graded"
        )
    return nb


def _text(source) -> str | None:
    if isinstance(source, list) and all(isinstance(s, str) for s in source):
        return "".join(source)
    return source if isinstance(source, str) else None


def _cell(raw, index: int) -> dict:
    """A submitted cell's parts that are graded, checked. ``mark`` is the grade_id its
    nbgrader metadata names (None when it names none, or is not nbgrader's);
    ``claims`` whether it has nbgrader metadata at all."""
    if not isinstance(raw, dict) or raw.get("cell_type") not in _CELL_KEYS:
        raise NotGradable(f"cell {index + 1} is not a code, markdown or raw cell")
    source = _text(raw.get("source", ""))
    if source is None:
        raise NotGradable(f"cell {index + 1} has no text as its source")
    metadata = raw.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    meta = metadata.get("nbgrader")
    gid = meta.get("grade_id") if isinstance(meta, dict) else None
    cid = raw.get("id")
    return {
        "cell_type": raw["cell_type"],
        "source": source,
        "metadata": metadata,
        "attachments": raw.get("attachments"),
        "id": cid if isinstance(cid, str) else None,
        "mark": gid if isinstance(gid, str) else None,
        "claims": meta is not None,
        "number": index + 1,
    }


def _source_cells(source_nb: dict) -> list[dict]:
    """The assignment's cells: their text and, for those nbgrader marks, the marks."""
    out = []
    for cell in source_nb.get("cells", []):
        metadata = cell.get("metadata")
        metadata = metadata if isinstance(metadata, dict) else {}
        meta = metadata.get("nbgrader")
        if not (isinstance(meta, dict) and isinstance(meta.get("grade_id"), str)):
            meta = None
        out.append(
            {
                "cell_type": cell.get("cell_type"),
                "source": _text(cell.get("source", "")) or "",
                "metadata": metadata,
                "meta": meta,
                "id": cell.get("id"),
            }
        )
    return out


def _plain(text: str) -> str:
    """A cell's text as released, for comparing: hidden tests out, spaces at line ends
    and blank lines around it ignored."""
    text = _HIDDEN.sub("", text)
    return "\n".join(line.rstrip() for line in text.splitlines()).strip()


def _matters(meta: dict) -> bool:
    return bool(meta.get("grade") or meta.get("solution"))


def _match(cells: list[dict], source: list[dict]) -> tuple[dict[int, str], int]:
    """Submitted cell index -> the grade_id it is; and how many of the assignment's
    cells were recognised by what only this assignment has (a graded or answer cell's
    grade_id, a locked cell's text). 0: none; a grade_id like ``setup`` and cell ids
    (``c001``) are alike in every chapter."""
    index = {s["meta"]["grade_id"]: k for k, s in enumerate(source) if s["meta"]}
    marks: dict[int, str] = {}
    at: dict[int, int] = {}  # source index -> submitted index
    evidence = 0
    for i, cell in enumerate(cells):
        k = index.get(cell["mark"])
        if k is not None and k not in at:
            marks[i], at[k] = cell["mark"], i
            evidence += _matters(source[k]["meta"])

    def free(i: int) -> bool:  # a second copy of a marked cell stays a copy
        return i not in marks and cells[i]["mark"] not in index

    def take(k: int, i: int) -> None:
        marks[i], at[k] = source[k]["meta"]["grade_id"], i

    plain = [_plain(c["source"]) for c in cells]
    for k, s in enumerate(source):  # locked cells by their text, in order
        if not s["meta"] or k in at or not s["meta"].get("locked"):
            continue
        want = _plain(s["source"])
        after = max((at[j] for j in at if j < k), default=-1)
        hits = [i for i in range(after + 1, len(cells)) if free(i) and plain[i] == want]
        if want and hits:
            same = [i for i in hits if cells[i]["id"] == s["id"]]
            take(k, (same or hits)[0])
            evidence += 1
    if not evidence:
        return marks, 0
    for k, s in enumerate(source):  # then by cell id
        if s["meta"] and k not in at and s["id"]:
            hits = [
                i
                for i, c in enumerate(cells)
                if free(i) and c["id"] == s["id"] and c["cell_type"] == s["cell_type"]
            ]
            if len(hits) == 1:
                take(k, hits[0])
    for k, s in enumerate(source):  # answer cells by their place
        if s["meta"] and k not in at and s["meta"].get("solution"):
            _by_place(k, cells, source, at, plain, free, take)
    return marks, evidence


def _by_place(k, cells, source, at, plain, free, take) -> None:
    """Match the answer cells between the matched cells around source cell ``k`` when
    the submission has as many unmatched cells of their type there (the ordinary
    cells the assignment has there, unchanged, not counted)."""
    lo_k = max((j for j in at if j < k), default=-1)
    hi_k = min((j for j in at if j > k), default=len(source))
    lo, hi = at.get(lo_k, -1), at.get(hi_k, len(cells))
    kind = source[k]["cell_type"]
    gap = source[lo_k + 1 : hi_k]
    wanted = [
        j
        for j in range(lo_k + 1, hi_k)
        if source[j]["meta"]
        and j not in at
        and source[j]["meta"].get("solution")
        and source[j]["cell_type"] == kind
    ]
    ordinary = {_plain(s["source"]) for s in gap if not s["meta"]}
    found = [
        i
        for i in range(lo + 1, hi)
        if free(i) and cells[i]["cell_type"] == kind and plain[i] not in ordinary
    ]
    if lo < hi and len(found) == len(wanted):
        for j, i in zip(wanted, found):
            take(j, i)


def _too_deep(value, limit: int = MAX_DEPTH) -> bool:
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > limit:
                return True
            items = item.values() if isinstance(item, dict) else item
            stack.extend((x, depth + 1) for x in items)
    return False


def _shallow(metadata: dict, where: str, notes: list[str]) -> dict:
    kept = {}
    for key, value in metadata.items():
        if _too_deep(value):
            notes.append(
                f"{where}: metadata {key!r}, nested more than {MAX_DEPTH} levels "
                "deep, was left out"
            )
        else:
            kept[key] = value
    return kept


def base64_text(data) -> str | None:
    """``data`` (nbformat's string, or its list of lines) when it is base64, else
    None (the feedback page shows only such attachments)."""
    text = _text(data)
    if text is None:
        return None
    try:
        base64.b64decode("".join(text.split()), validate=True)
    except (binascii.Error, ValueError):
        return None
    return text


def _attachments(cell: dict, notes: list[str]) -> dict | None:
    """The cell's attachments that are what Jupyter writes; a note for the others."""
    value, number = cell["attachments"], cell["number"]
    if value is None:
        return None
    if cell["cell_type"] not in _ATTACHING:
        notes.append(
            f"cell {number}: attachments on a {cell['cell_type']} cell (Jupyter keeps "
            "them on markdown and raw cells only) were left out"
        )
        return None
    if not isinstance(value, dict):
        notes.append(
            f"cell {number}: its attachments are a {type(value).__name__}, not the "
            "name -> {mime type: base64 text} Jupyter writes; they were left out"
        )
        return None
    kept = {}
    for name, bundle in value.items():
        if (
            isinstance(bundle, dict)
            and bundle
            and all(
                isinstance(m, str) and base64_text(d) is not None
                for m, d in bundle.items()
            )
        ):
            kept[name] = bundle
        else:
            notes.append(
                f"cell {number}: attachment {name!r} is not a mime type -> base64 "
                "text, as Jupyter writes it; it was left out"
            )
    return kept or None


def _typed(cell_type: str, metadata: dict, source: str, attachments=None) -> dict:
    out = {"cell_type": cell_type, "metadata": metadata, "source": source}
    if attachments and cell_type in _ATTACHING:
        out["attachments"] = attachments
    if cell_type == "code":
        out.update(outputs=[], execution_count=None)
    return out


def _meaning(meta: dict) -> dict:
    """The nbgrader metadata that decides grading (generate_assignment adds a checksum
    and the cell type to the student version; nbgrader recomputes both)."""
    return {k: v for k, v in meta.items() if k not in ("checksum", "cell_type")}


def graded_cells(source_nb: dict) -> dict[str, tuple[str, dict]]:
    """grade_id -> (cell type, nbgrader metadata) of the assignment's own notebook."""
    return {
        s["meta"]["grade_id"]: (s["cell_type"], s["meta"])
        for s in _source_cells(source_nb)
        if s["meta"]
    }


def _ordinary(cell: dict, known: dict) -> str:
    """Why a cell with nbgrader metadata is graded as an ordinary cell."""
    meta = cell["metadata"]["nbgrader"]
    if cell["mark"] in known:
        why = f"a second copy of {cell['mark']!r}"
    elif cell["mark"] is not None:
        why = f"not one of the graded cells: {cell['mark']!r}"
    elif isinstance(meta, dict):
        why = "nbgrader metadata without a grade_id"
    else:
        why = f"nbgrader metadata that is a {type(meta).__name__}, not nbgrader's"
    return f"cell {cell['number']} ({why}) was graded as an ordinary cell"


def sanitize(
    nb: dict,
    source_nb: dict,
    max_cells: int = MAX_CELLS,
    *,
    assignment: str = "this assignment",
    others: dict[str, Path] | None = None,
) -> Submission:
    """``nb`` with the assignment's metadata put back (see the module docstring).

    ``others``: chapter -> its notebook, to name the chapter of a notebook that is
    none of ``assignment``'s (:class:`WrongChapter`)."""
    if len(nb["cells"]) > max_cells:
        raise NotGradable(
            f"the notebook has {len(nb['cells']):,} cells; at most {max_cells:,} "
            "are graded"
        )
    cells = [_cell(raw, index) for index, raw in enumerate(nb["cells"])]
    source = _source_cells(source_nb)
    marks, evidence = _match(cells, source)
    if not evidence and any(s["meta"] and _matters(s["meta"]) for s in source):
        _refuse(cells, assignment, others or {})
    known = {s["meta"]["grade_id"]: s for s in source if s["meta"]}
    out = Submission({"cells": []})
    relinked = []
    for i, cell in enumerate(cells):
        where = f"cell {cell['number']}"
        metadata = _shallow(cell["metadata"], where, out.notes)
        cell_type, gid = cell["cell_type"], marks.get(i)
        if gid is not None:
            mine, theirs = metadata.get("nbgrader") or {}, known[gid]["meta"]
            if cell["mark"] != gid:
                relinked.append(gid)
            elif _meaning(mine) != _meaning(theirs):
                out.notes.append(
                    f"cell {gid!r}: its nbgrader metadata was put back as the "
                    "assignment has it"
                )
            metadata["nbgrader"] = copy.deepcopy(theirs)
            if cell_type != known[gid]["cell_type"]:
                cell_type = known[gid]["cell_type"]
                out.notes.append(f"cell {gid!r}: graded as a {cell_type} cell again")
        elif cell["claims"]:
            out.notes.append(_ordinary(cell, known))
            metadata = {k: v for k, v in metadata.items() if k not in _MARKS}
        attachments = _attachments(cell, out.notes)
        out.notebook["cells"].append(
            _typed(cell_type, metadata, cell["source"], attachments)
        )
    if relinked:
        plural = "s" if len(relinked) > 1 else ""
        out.notes.append(
            f"the nbgrader marks of {len(relinked)} cell{plural} were lost or "
            "damaged and put back from the assignment, each cell recognised by its "
            "text, its cell id or its place: " + ", ".join(map(repr, relinked))
        )
    out.notebook["metadata"] = _notebook_metadata(nb, source_nb, out.notes)
    out.notebook.update(nbformat=4, nbformat_minor=4)
    _schema_clean(out.notebook, [c["number"] for c in cells], out.notes)
    _put_back_missing(out, source, set(marks.values()))
    return _unicode_only(out)


def _refuse(cells: list[dict], assignment: str, others: dict[str, Path]) -> None:
    """Nothing of the assignment was recognised: say whose notebook it is, or why it
    cannot be graded."""
    for chapter, path in sorted(others.items()):
        try:
            other = _source_cells(json.loads(Path(path).read_text()))
        except (OSError, ValueError):
            continue
        if _match(cells, other)[1]:
            raise WrongChapter(chapter, assignment)
    if not any(c["source"].strip() for c in cells):
        raise NotGradable(
            "the notebook has no cells with text: download the assignment again and "
            "write your answers in it"
        )
    raise NotGradable(LOST)


def _notebook_metadata(nb: dict, source_nb: dict, notes: list[str]) -> dict:
    metadata = nb.get("metadata") if isinstance(nb.get("metadata"), dict) else {}
    theirs = source_nb.get("metadata")
    theirs = theirs if isinstance(theirs, dict) else {}
    named, wanted = metadata.get("kernelspec"), theirs.get("kernelspec")
    if (
        isinstance(named, dict)
        and named
        and isinstance(wanted, dict)
        and named.get("name") != wanted.get("name")
    ):
        notes.append(
            f"the notebook names the kernel {named.get('name')!r}; it was graded with "
            f"the assignment's ({wanted.get('name')!r})"
        )
    metadata = {k: v for k, v in metadata.items() if k not in ("kernelspec",)}
    metadata = _shallow(metadata, "the notebook", notes)
    for key in ("kernelspec", "language_info"):
        if key in theirs:
            metadata[key] = theirs[key]
    return metadata


def _schema_clean(nb: dict, numbers: list[int], notes: list[str]) -> None:
    """Leave out the metadata and attachments that Jupyter's notebook schema refuses:
    nbgrader validates the notebook, and refuses it whole for one such key."""
    from nbformat.validator import get_validator

    validator = get_validator(version=4, version_minor=4, name="jsonschema")
    for _ in range(4):  # a key left out can uncover nothing new, but stay bounded
        dropped = [
            _drop(nb, path, numbers, notes)
            for error in validator.iter_errors(nb)
            for path in _paths(error, nb)
        ]
        if not any(dropped):
            return


def _paths(error, nb: dict):
    """Where ``error`` is, as paths into ``nb``; a cell that matches none of the cell
    schemas is reported by nbformat's schema as a whole: the errors of its own type's
    schema say where."""
    path = list(error.relative_path)
    if len(path) == 2 and path[0] == "cells" and error.validator == "oneOf":
        kind = f"#/definitions/{nb['cells'][path[1]]['cell_type']}_cell"
        branches = [b.get("$ref") for b in error.schema.get("oneOf", [])]
        if kind in branches:
            mine = branches.index(kind)
            for sub in error.context:
                if sub.schema_path and sub.schema_path[0] == mine:
                    yield path + list(sub.relative_path)
            return
    yield path


def _drop(nb: dict, path: list, numbers: list[int], notes: list[str]) -> bool:
    if len(path) >= 2 and path[0] == "metadata":
        if path[1] not in nb["metadata"]:
            return False
        del nb["metadata"][path[1]]
        notes.append(
            f"the notebook's metadata {path[1]!r} is not what Jupyter writes; it was "
            "left out"
        )
        return True
    if len(path) >= 4 and path[0] == "cells" and path[2] in ("metadata", "attachments"):
        cell = nb["cells"][path[1]]
        if path[3] not in cell[path[2]]:
            return False
        del cell[path[2]][path[3]]
        what = "metadata" if path[2] == "metadata" else "attachment"
        notes.append(
            f"cell {numbers[path[1]]}: {what} {path[3]!r} is not what Jupyter writes; "
            "it was left out"
        )
        if path[2] == "attachments" and not cell["attachments"]:
            del cell["attachments"]
        return True
    return False


def _put_back_missing(out: Submission, source: list[dict], present: set[str]) -> None:
    """Put back each check cell the submission lacks, after the cell it follows in
    the assignment, or else before the next one the submission has."""
    cells = out.notebook["cells"]

    def place(gid: str) -> int | None:
        for i, cell in enumerate(cells):
            meta = cell["metadata"].get("nbgrader")
            if isinstance(meta, dict) and meta.get("grade_id") == gid:
                return i
        return None

    order = [s for s in source if s["meta"]]
    for k, s in enumerate(order):
        gid = s["meta"]["grade_id"]
        # An answer that is graded (none in this course) is nbgrader's to put back:
        # its source here would be the instructor's solution.
        if not s["meta"].get("grade") or s["meta"].get("solution") or gid in present:
            continue
        before = order[k - 1]["meta"]["grade_id"] if k else None
        at = place(before) if before in present else None
        if at is not None:
            at += 1
        else:
            later = [place(t["meta"]["grade_id"]) for t in order[k + 1 :]]
            at = next((i for i in later if i is not None), len(cells))
        metadata = copy.deepcopy(s["metadata"])
        cells.insert(at, _typed(s["cell_type"], metadata, s["source"]))
        present.add(gid)
        out.notes.append(f"cell {gid!r} was missing: put back from the assignment")


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


def other_chapters(source: Path) -> dict[str, Path]:
    """chapter -> its notebook, for every chapter beside ``source``'s (the folders
    next to ``<chapter>/exercise.ipynb``)."""
    source = Path(source)
    return {
        p.parent.name: p
        for p in sorted(source.parent.parent.glob(f"*/{source.name}"))
        if p.parent != source.parent
    }


def read_submission(
    path: Path, source: Path, *, max_bytes: int = MAX_BYTES, max_cells: int = MAX_CELLS
) -> Submission:
    """Read, check and repair the submission at ``path`` against the assignment's
    notebook ``source`` (``<chapter>/exercise.ipynb``, the other chapters beside it).
    Raises :class:`NotGradable`."""
    nb = parse(read_bytes(path, max_bytes), path.name)
    source = Path(source)
    return sanitize(
        nb,
        json.loads(source.read_text()),
        max_cells,
        assignment=source.parent.name,
        others=other_chapters(source),
    )


def write(submission: Submission, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(submission.notebook, ensure_ascii=False, indent=1))
