"""tformer_grading.preflight: what cannot be graded is refused with a reason, what
can be repaired is, and a notebook nobody tampered with goes through unchanged."""

import copy
import re
import json

import pytest

from course import ROOT
from tformer_grading.preflight import NotGradable, parse, read_bytes, sanitize

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
    from tformer_grading import preflight
    from tformer_grading.sandbox import Limits
    from traitlets.config.loader import PyFileConfigLoader

    page = " ".join((ROOT / "book" / "instructors.md").read_text().split())
    limits = Limits()
    config = PyFileConfigLoader("nbgrader_config.py", path=str(ROOT)).load_config()
    stated = [
        f"{limits.memory >> 30} GB of memory, {limits.processes} processes",
        f"{limits.cpu_seconds // 60} CPU minutes, {limits.file_size >> 20} MB per file",
        f"of {limits.scratch >> 20} MB each",
        f"more than {preflight.MAX_CELLS:,} cells or {preflight.MAX_BYTES >> 20} MB",
        f"per cell ({config.Execute.timeout} s in",
        f"per notebook ({config.GuardedExecute.notebook_timeout} s)",
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
