"""tformer_grading.preflight: what cannot be graded is refused with a reason, what
can be repaired is, and a notebook nobody tampered with goes through unchanged.

Issue 32, item 4 (honest notebooks fell through), measured on main:
- a pasted image (JupyterLab keeps it as the cell's attachment) left the learner
  graded without a feedback page. Cause: the preflight dropped attachments; the
  page's markdown then named a missing image. Guard: attachments Jupyter writes are
  kept; others are left out with a note.
- a notebook whose nbgrader metadata was lost was "not graded" (nbgrader's KeyError
  'split_heads'). Cause: nbgrader puts a missing graded cell after the cell before
  it, and that one was unmarked too. Guard: cells are matched to the assignment's
  (locked text, cell id, place) and their marks put back; a missing graded cell is
  put back by the preflight; nothing matched is one reason a learner can act on.
- a chapter-1 notebook graded as chapter 2 failed the same way. Guard: a notebook
  none of whose cells are the assignment's, but another chapter's, is named so.
- metadata Jupyter's schema refuses (``"tags": "mine"``) or nested 900 deep made
  nbgrader print its traceback; a grade_id that is a list, JSON nested 100,000 deep
  and a 5,000-digit number crashed the preflight ("a bug in the course's grader").
  Guard: such metadata is left out with a note; such JSON is refused with a reason;
  every malformed kind below is graded or refused, never a crash.
"""

import base64
import copy
import json
import re

import nbformat
import pytest
from course import ROOT, filled, solution_sources
from nbconvert.preprocessors import ClearMetadataPreprocessor

from tformer_grading.preflight import (
    LOST,
    MAX_DEPTH,
    NotGradable,
    Submission,
    WrongChapter,
    other_chapters,
    parse,
    read_bytes,
    sanitize,
)

SOURCE = json.loads((ROOT / "solutions" / "ch01_shapes" / "exercise.ipynb").read_text())
RELEASED = json.loads((ROOT / "book" / "ch01_shapes" / "exercise.ipynb").read_text())


def graded(nb, grade_id):
    return [
        c
        for c in nb["cells"]
        if c["metadata"].get("nbgrader", {}).get("grade_id") == grade_id
    ]


def test_the_released_notebook_goes_through_without_a_note():
    out = sanitize(copy.deepcopy(RELEASED), SOURCE)
    assert out.notes == []
    assert [c["source"] for c in out.notebook["cells"]] == [
        "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
        for c in RELEASED["cells"]
    ]


@pytest.mark.parametrize(
    "data, reason",
    [
        (b'{"cells": [', "is not valid JSON (line 1, column 12"),
        (b'\xff{"cells": []}', "is not UTF-8 text (byte 0xff at offset 0)"),
        (b'{"cells": [], "nbformat": 3}', "notebook format 3"),
        (b'{"cells": [], "nbformat": 5}', "notebook format 5"),
        (b"[1, 2]", "JSON but not a notebook"),
        (
            b'{"cells": [{"cell_type": "python"}], "nbformat": 4}',
            "cell 1 is not a code",
        ),
        (b"", "is not valid JSON (line 1, column 1"),
        (
            b'{"cells": [], "nbformat": 4, "x": '
            + b"[" * 100_000
            + b"]" * 100_000
            + b"}",
            "JSON nested too deeply to be a notebook",
        ),
        (
            b'{"cells": [], "nbformat": 4, "x": 1' + b"0" * 5000 + b"}",
            "holds a number of thousands of digits",
        ),
    ],
)
def test_what_cannot_be_read_is_refused_with_the_reason(data, reason):
    with pytest.raises(NotGradable, match=re.escape(reason)):
        sanitize(parse(data), SOURCE)


def test_too_many_cells_and_too_many_bytes_are_refused(tmp_path):
    nb = copy.deepcopy(RELEASED)
    nb["cells"] = nb["cells"] * 1000
    with pytest.raises(NotGradable, match="at most 2,000 are graded"):
        sanitize(nb, SOURCE)
    big = tmp_path / "exercise.ipynb"
    big.write_bytes(b" " * (2 << 20))
    with pytest.raises(NotGradable, match="at most 1 MB are graded"):
        read_bytes(big, max_bytes=1 << 20)


def test_a_link_or_a_folder_is_not_read(tmp_path):
    (tmp_path / "link.ipynb").symlink_to("/etc/passwd")
    with pytest.raises(NotGradable, match="is a symbolic link"):
        read_bytes(tmp_path / "link.ipynb")
    (tmp_path / "dir.ipynb").mkdir()
    with pytest.raises(NotGradable, match="not a regular file"):
        read_bytes(tmp_path / "dir.ipynb")


def test_changed_points_type_and_kernel_are_put_back():
    nb = copy.deepcopy(RELEASED)
    graded(nb, "test_split_heads")[0]["metadata"]["nbgrader"]["points"] = 100
    test = graded(nb, "test_merge_heads")[0]
    test["cell_type"] = "markdown"
    graded(nb, "split_heads")[0]["metadata"]["nbgrader"]["schema_version"] = 99
    nb["metadata"]["kernelspec"] = {"name": "bash", "display_name": "Bash"}
    out = sanitize(nb, SOURCE)
    points = graded(out.notebook, "test_split_heads")[0]["metadata"]["nbgrader"]
    assert points["points"] == 2
    assert graded(out.notebook, "test_merge_heads")[0]["cell_type"] == "code"
    meta = graded(out.notebook, "split_heads")[0]["metadata"]["nbgrader"]
    assert meta["schema_version"] == 3
    assert out.notebook["metadata"]["kernelspec"]["name"] == "python3"
    assert len(out.notes) == 4, out.notes


def test_a_pasted_copy_and_an_unknown_graded_cell_become_ordinary_cells():
    nb = copy.deepcopy(RELEASED)
    answer = graded(nb, "split_heads")[0]
    nb["cells"].insert(nb["cells"].index(answer) + 1, copy.deepcopy(answer))
    extra = copy.deepcopy(graded(nb, "test_split_heads")[0])
    extra["metadata"]["nbgrader"].update(grade_id="bonus", points=50)
    nb["cells"].append(extra)
    out = sanitize(nb, SOURCE)
    assert len(graded(out.notebook, "split_heads")) == 1
    assert graded(out.notebook, "bonus") == []
    assert len(out.notebook["cells"]) == len(nb["cells"])  # both still run
    assert any("second copy of 'split_heads'" in n for n in out.notes)
    assert any("not one of the graded cells: 'bonus'" in n for n in out.notes)


def test_the_instructors_page_states_the_limits_the_code_sets():
    """book/instructors.md types the limits in its prose: they must be the code's."""
    from traitlets.config.loader import PyFileConfigLoader

    from tformer_grading import preflight
    from tformer_grading.classworker import WORKER_MEMORY
    from tformer_grading.guard.message_bound import BoundedKernelClient
    from tformer_grading.sandbox import Limits

    page = " ".join((ROOT / "book" / "instructors.md").read_text().split())
    limits = Limits()
    config = PyFileConfigLoader("nbgrader_config.py", path=str(ROOT)).load_config()
    stated = [
        f"{limits.memory >> 30} GB of memory, {limits.processes} processes",
        f"{limits.cpu_seconds // 60} CPU minutes, {limits.file_size >> 20} MB per file",
        f"one scratch space of {limits.scratch >> 20} MB",
        f"more than {preflight.MAX_CELLS:,} cells or {preflight.MAX_BYTES >> 20} MB",
        f"per cell ({config.Execute.timeout} s in",
        f"per notebook ({config.GuardedExecute.notebook_timeout} s)",
        f"{config.GuardedExecute.max_output_chars:,} characters per cell and "
        f"{config.GuardedExecute.max_notebook_output_chars:,} per notebook",
        f"{BoundedKernelClient.max_message_bytes.default_value >> 20} MB per message "
        f"and {BoundedKernelClient.max_notebook_bytes.default_value >> 20} MB per "
        "notebook",
        f"`--worker-memory MB` ({WORKER_MEMORY >> 20:,} MB)",
        f"{limits.memory >> 30} GB of memory, {limits.scratch >> 20} MB of scratch",
    ]
    assert [s for s in stated if s not in page] == []


def test_a_lone_surrogate_becomes_a_question_mark_with_a_note(tmp_path):
    """Bug: a markdown cell holding ``"\\udce9"`` (valid JSON, no character) made
    the class command fail to write the copy it grades. Guard: it is replaced."""
    nb = copy.deepcopy(RELEASED)
    nb["cells"].insert(
        1, {"cell_type": "markdown", "metadata": {}, "source": "caf\udce9"}
    )
    out = sanitize(parse(json.dumps(nb).encode()), SOURCE)
    assert out.notebook["cells"][1]["source"] == "caf?"
    assert out.notes == [
        "text that is no Unicode character (a lone surrogate, which Jupyter cannot "
        "save) was replaced by '?'"
    ]
    json.dumps(out.notebook, ensure_ascii=False).encode("utf-8")


# --------------------------------------------------------------------------- issue 32

# A 1x1 PNG as JupyterLab stores a pasted image: base64 text under its mime type.
PNG = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
        "0000000d49444154789c6360f80f0000010101005a4d6c9e0000000049454e44ae426082"
    )
).decode()
PASTED = {
    "attachments": {"image.png": {"image/png": PNG}},
    "cell_type": "markdown",
    "id": "5b1e0c62-8d3e-4c4e-9b8f-0a4b9f3c2d71",
    "metadata": {},
    "source": ["My sketch of the heads:\n", "\n", "![image.png](attachment:image.png)"],
}


def right_notebook() -> dict:
    """A learner's ch01 notebook with every answer right, as nbformat writes it."""
    student = nbformat.read(ROOT / "book" / "ch01_shapes" / "exercise.ipynb", 4)
    return json.loads(nbformat.writes(filled(student, solution_sources("ch01_shapes"))))


def marks(nb: dict) -> list:
    return [c["metadata"].get("nbgrader", {}).get("grade_id") for c in nb["cells"]]


def test_a_pasted_image_is_kept_as_jupyter_wrote_it():
    nb = right_notebook()
    nb["cells"].insert(2, copy.deepcopy(PASTED))
    out = sanitize(nb, SOURCE)
    assert out.notes == []
    assert out.notebook["cells"][2]["attachments"] == PASTED["attachments"]
    nbformat.validate(nbformat.from_dict(out.notebook))


NOT_JUPYTERS = (
    "is not a mime type -> base64 text, as Jupyter writes it; it was left out"
)


def test_attachments_jupyter_does_not_write_are_left_out_with_a_note():
    nb = right_notebook()
    odd = copy.deepcopy(PASTED)
    odd["attachments"].update(
        {"b64.png": {"image/png": "not base64!"}, "flat.png": "iVBORw0KGgo="}
    )
    code = nbformat.v4.new_code_cell("x = 1")
    code["attachments"] = copy.deepcopy(PASTED["attachments"])
    nb["cells"][2:2] = [
        odd,
        code,
        {"cell_type": "markdown", "metadata": {}, "source": "a", "attachments": "a"},
    ]
    out = sanitize(nb, SOURCE)
    cells = out.notebook["cells"]
    assert cells[2]["attachments"] == PASTED["attachments"]  # the good one stays
    assert "attachments" not in cells[3] and "attachments" not in cells[4]
    assert out.notes == [
        "cell 3: attachment 'b64.png' " + NOT_JUPYTERS,
        "cell 3: attachment 'flat.png' " + NOT_JUPYTERS,
        (
            "cell 4: attachments on a code cell (Jupyter keeps them on markdown and "
            "raw cells only) were left out"
        ),
        (
            "cell 5: its attachments are a str, not the name -> {mime type: base64 "
            "text} Jupyter writes; they were left out"
        ),
    ]
    nbformat.validate(nbformat.from_dict(out.notebook))


def test_marks_a_tool_cleared_are_matched_to_the_assignment_by_text_and_id():
    """nbconvert's ClearMetadataPreprocessor (as a pre-commit hook runs it) clears
    every cell's metadata and keeps cell ids; the learner also added a cell of their
    own below the first answer."""
    nb = right_notebook()
    released = marks(nb)
    node = nbformat.from_dict(nb)
    node.cells.insert(4, nbformat.v4.new_code_cell("print(split_heads)"))
    cleared, _ = ClearMetadataPreprocessor().preprocess(node, {})
    assert not any(marks(cleared))
    out = sanitize(json.loads(nbformat.writes(cleared)), SOURCE)
    assert marks(out.notebook) == released[:4] + [None] + released[4:]
    assert len(out.notes) == 1 and out.notes[0].startswith(
        "the nbgrader marks of 9 cells were lost or damaged and put back from the "
        "assignment"
    )


def test_marks_lost_with_new_ids_are_matched_by_text_and_place():
    """Each cell's text pasted into a fresh notebook: new ids, no metadata. The answer
    cells are the only new code cells between the locked cells around them."""
    nb = right_notebook()
    released = marks(nb)
    for i, cell in enumerate(nb["cells"]):
        cell.update(metadata={}, id=f"fresh-{i}")
    out = sanitize(nb, SOURCE)
    assert marks(out.notebook) == released


def test_a_check_cell_deleted_from_a_notebook_without_marks_is_put_back():
    """nbgrader would put it back after the answer cell before it, and fails with
    KeyError when that cell is unmarked too (measured: "nbgrader could not grade it:
    KeyError: 'split_heads'")."""
    nb = right_notebook()
    released = marks(nb)
    for cell in nb["cells"]:
        cell["metadata"] = {}
    del nb["cells"][released.index("test_split_heads")]
    out = sanitize(nb, SOURCE)
    assert marks(out.notebook) == released
    assert out.notes[-1] == (
        "cell 'test_split_heads' was missing: put back from the assignment"
    )


def test_damaged_marks_are_repaired_and_foreign_ones_graded_as_ordinary_cells():
    nb = right_notebook()
    released = marks(nb)
    answer = nb["cells"][released.index("split_heads")]
    answer["metadata"]["nbgrader"]["grade_id"] = ["split_heads"]  # once a crash
    nb["cells"][0]["metadata"]["nbgrader"] = "yes"
    out = sanitize(nb, SOURCE)
    assert marks(out.notebook) == released
    assert out.notes == [
        (
            "cell 1 (nbgrader metadata that is a str, not nbgrader's) was graded as an "
            "ordinary cell"
        ),
        (
            "the nbgrader marks of 1 cell were lost or damaged and put back from the "
            "assignment, each cell recognised by its text, its cell id or its place: "
            "'split_heads'"
        ),
    ]


def test_a_notebook_whose_cells_cannot_be_matched_is_refused_with_what_to_do():
    nb = right_notebook()
    answers = [
        c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("solution")
    ]
    nb["cells"] = [nbformat.v4.new_code_cell("".join(c["source"])) for c in answers]
    with pytest.raises(NotGradable, match=re.escape(LOST)):
        sanitize(nb, SOURCE)
    with pytest.raises(NotGradable, match="the notebook has no cells with text"):
        sanitize({**nb, "cells": [nbformat.v4.new_markdown_cell("")]}, SOURCE)


def test_another_chapters_notebook_is_named_in_one_line():
    ch02 = ROOT / "solutions" / "ch02_attention" / "exercise.ipynb"
    others = other_chapters(ch02)
    assert "ch01_shapes" in others and "ch02_attention" not in others
    with pytest.raises(WrongChapter) as refused:
        sanitize(
            right_notebook(),
            json.loads(ch02.read_text()),
            assignment="ch02_attention",
            others=others,
        )
    assert str(refused.value) == (
        "this is the ch01_shapes notebook, handed in for ch02_attention"
    )
    # The same notebook handed in for its own chapter is graded.
    out = sanitize(right_notebook(), SOURCE, assignment="ch01_shapes", others=others)
    assert out.notes == []


def test_metadata_jupyters_schema_refuses_or_too_deep_is_left_out():
    nb = right_notebook()
    nb["cells"][0]["metadata"]["tags"] = "mine"
    nb["cells"][1]["metadata"]["jupyter"] = []
    nb["cells"].insert(2, {"cell_type": "raw", "metadata": {"format": 5}, "source": ""})
    deep: list = []
    for _ in range(MAX_DEPTH):
        deep = [deep]
    nb["metadata"]["toc"] = deep
    nb["cells"][0]["metadata"]["shallow"] = deep[0]  # MAX_DEPTH levels: kept
    out = sanitize(nb, SOURCE)
    assert out.notes == [
        "the notebook: metadata 'toc', nested more than 32 levels deep, was left out",
        "cell 1: metadata 'tags' is not what Jupyter writes; it was left out",
        "cell 2: metadata 'jupyter' is not what Jupyter writes; it was left out",
        "cell 3: metadata 'format' is not what Jupyter writes; it was left out",
    ]
    assert out.notebook["cells"][0]["metadata"] == {"shallow": deep[0]}
    nbformat.validate(nbformat.from_dict(out.notebook))


def test_a_byte_order_mark_is_ignored():
    """Some Windows editors start a UTF-8 file with one; json refuses it."""
    data = json.dumps(RELEASED).encode()
    assert parse(b"\xef\xbb\xbf" + data) == parse(data)


def _malformed(change):
    nb = right_notebook()
    change(nb)
    return nb


def _set(path, value):
    def change(nb):
        *where, key = path
        target = nb
        for step in where:
            target = target[step]
        target[key] = value

    return change


def _add(cell):
    return lambda nb: nb["cells"].insert(1, cell)


# Kinds of malformed notebook: (change, None when it is graded, else the reason).
MALFORMED = {
    "no cells": (lambda nb: nb.pop("cells"), "no list of cells"),
    "cells a dict": (_set(["cells"], {"0": {}}), "no list of cells"),
    "a cell without source": (_add({"cell_type": "markdown", "metadata": {}}), None),
    "source a number": (
        _add({"cell_type": "markdown", "metadata": {}, "source": 3}),
        "cell 2 has no text as its source",
    ),
    "cell metadata a list": (_set(["cells", 0, "metadata"], []), None),
    "notebook metadata a list": (_set(["metadata"], []), None),
    "nbgrader metadata a string": (
        _set(["cells", 1, "metadata", "nbgrader"], "x"),
        None,
    ),
    "grade_id a list": (
        _set(["cells", 3, "metadata", "nbgrader", "grade_id"], ["split_heads"]),
        None,
    ),
    "grade_id a number": (
        _set(["cells", 3, "metadata", "nbgrader", "grade_id"], 7),
        None,
    ),
    "points a string": (
        _set(["cells", 4, "metadata", "nbgrader", "points"], "2"),
        None,
    ),
    "no nbformat_minor": (lambda nb: nb.pop("nbformat_minor"), None),
    "nbformat 4.0 without cell ids": (
        lambda nb: [nb.update(nbformat_minor=0)] + [c.pop("id") for c in nb["cells"]],
        None,
    ),
    "a markdown cell with outputs": (
        _add({"cell_type": "markdown", "metadata": {}, "source": "", "outputs": []}),
        None,
    ),
    "tags a string": (_set(["cells", 0, "metadata", "tags"], "mine"), None),
    "kernelspec a string": (_set(["metadata", "kernelspec"], "python3"), None),
    "cell id a number": (_set(["cells", 0, "id"], 5), None),
    "every cell id the same": (
        lambda nb: [c.update(id="same") for c in nb["cells"]],
        None,
    ),
    "a null character in markdown": (
        _add({"cell_type": "markdown", "metadata": {}, "source": "a\0b"}),
        None,
    ),
}


@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_a_malformed_notebook_is_graded_or_refused_never_a_crash(kind):
    """Each kind either comes out as a notebook Jupyter's schema accepts, graded
    cells marked as released, or is refused with its reason: nothing else escapes
    (a TypeError here was "a bug in the course's grader")."""
    change, reason = MALFORMED[kind]
    nb = _malformed(change)
    data = json.dumps(nb).encode()
    if reason:
        with pytest.raises(NotGradable, match=re.escape(reason)):
            sanitize(parse(data), SOURCE)
        return
    out = sanitize(parse(data), SOURCE)
    assert isinstance(out, Submission)
    nbformat.validate(nbformat.from_dict(out.notebook))
    assert [m for m in marks(out.notebook) if m] == [m for m in marks(RELEASED) if m]


def test_the_hidden_test_delimiters_are_nbgraders():
    """The preflight takes hidden tests out of the assignment's cells to match a
    learner's; it must use the delimiters nbgrader's ClearHiddenTests uses."""
    from nbgrader.preprocessors import ClearHiddenTests

    from tformer_grading.preflight import HIDDEN_TESTS

    traits = ClearHiddenTests.class_traits()
    assert HIDDEN_TESTS == (
        traits["begin_test_delimeter"].default_value,
        traits["end_test_delimeter"].default_value,
    )
