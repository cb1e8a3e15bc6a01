"""tools/kit_lessons.py: the kit's notebooks get the values of the book's MyST roles.

Bug (issue 29, reader review 2026-12-05, problem 1): the kit's lessons showed
``{glue:text}`ch01_where:s``` and other roles as raw text in JupyterLab, where only the
book's build can resolve them. Guard: the kit writes them out (see the module's
docstring). These tests check the writing on small notebooks, without a book build;
tests/book/test_jupyterlab_lessons.py reads the built kit in JupyterLab.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

from kit_lessons import KitLessonError, KitNotebooks

LESSON = Path("book/ch01_shapes/lesson.ipynb")


class Glued(KitNotebooks):
    """The course's notebooks writer, with glued values given instead of executed."""

    def __init__(self, values: dict[str, str], root: Path = ROOT):
        super().__init__(root)
        self.values = values

    def _executed_glue(self, rel, source):
        return {
            key: {"data": {"text/plain": plain}} for key, plain in self.values.items()
        }


def notebook(*markdown: str, **metadata) -> bytes:
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell(text, id=f"c{i}", metadata=metadata)
        for i, text in enumerate(markdown)
    ]
    nb.cells.append(nbformat.v4.new_code_cell("x = 1", id="code"))
    return nbformat.writes(nb).encode()


def cells(data: bytes) -> list[str]:
    return [c.source for c in nbformat.reads(data.decode(), as_version=4).cells]


def test_a_glued_value_is_written_as_the_book_formats_it():
    writer = Glued({"ms": "280.8312", "where": "'one CPU thread'", "share": "0.7812"})
    out = writer.rewrite(
        LESSON,
        notebook(
            "# Title",
            "Takes {glue:text}`ms:.1f` ms on {glue:text}`where:s`, "
            "{glue:text}`share:.0%` of it; {glue}`where`.",
        ),
    )
    title, note, text, code = cells(out)
    assert text == "Takes 280.8 ms on one CPU thread, 78% of it; one CPU thread."
    # Whose numbers these are, said once, under the title.
    assert (
        title == "# Title" and note.startswith(":::{note}") and "run that built" in note
    )
    assert code == "x = 1"
    # The same sources give the same kit, byte for byte.
    assert writer.rewrite(LESSON, notebook("# Title", "{glue}`where`")) == (
        writer.rewrite(LESSON, notebook("# Title", "{glue}`where`"))
    )


def test_a_glued_value_stays_text():
    writer = Glued({"n": "3", "v": "'a | b *c*'"})
    _, _, text, _ = cells(
        writer.rewrite(LESSON, notebook("# T", "{glue:text}`n:d`. a"))
    )
    # At the start of a line "3." would begin a numbered list.
    assert text == "3\\. a"
    _, _, text, _ = cells(writer.rewrite(LESSON, notebook("# T", "{glue:text}`n:d`")))
    assert text == "3"
    _, _, text, _ = cells(writer.rewrite(LESSON, notebook("# T", "| {glue}`v` |")))
    assert text == "| a \\| b \\*c\\* |"


def test_a_missing_value_fails_naming_it():
    writer = Glued({"ch01_where": "'one CPU thread'"})
    with pytest.raises(KitLessonError, match="'ch01_speed'.*make book") as error:
        writer.rewrite(LESSON, notebook("{glue:text}`ch01_speed:.1f` it/s"))
    assert str(LESSON) in str(error.value)


def test_a_notebook_not_executed_fails(tmp_path):
    nb = notebook("on {glue:text}`ch01_where:s`")
    with pytest.raises(KitLessonError, match="no execution cache.*make book"):
        KitNotebooks(tmp_path).rewrite(LESSON, nb)
    from jupyter_cache import get_cache

    get_cache(str(tmp_path / "_build" / ".jupyter_cache")).list_cache_records()
    with pytest.raises(KitLessonError, match="not executed for its current code"):
        KitNotebooks(tmp_path).rewrite(LESSON, nb)


def test_citations_read_as_in_the_book():
    out = KitNotebooks().rewrite(
        LESSON,
        notebook(
            "the paper {cite}`vaswani2017attention`, as {cite:t}`xiong2020layer` show "
            "{cite:p}`vaswani2017attention,xiong2020layer`"
        ),
    )
    text, _, references = cells(out)
    assert text == (
        "the paper \\[Vaswani et al., 2017\\], as Xiong et al. \\[2020\\] show "
        "\\[Vaswani et al., 2017, Xiong et al., 2020\\]"
    )
    assert references.startswith("## References")
    assert "\\[Vaswani et al., 2017\\] Ashish Vaswani, Noam Shazeer" in references
    assert references.count("\n- ") == 2


def test_seed_quotations():
    out = KitNotebooks().rewrite(
        LESSON,
        notebook(
            "it writes {seed}`004:energy = energy / (self.embed_size ** (1/2))` and "
            "says {seedtr}`004:the gradients exploded`",
            "```{seed-quote} 004\n:code: python\nx = 1\n```",
            "```{seed-quote} 000\n第一段\n\n第二段\n```",
        ),
    )
    said, code, quoted, _ = cells(out)
    assert said == (
        "it writes `energy = energy / (self.embed_size ** (1/2))` and "
        "says “the gradients exploded” (translated)"
    )
    assert code == "```python\nx = 1\n```\n\n— [seed 004](../seeds/004.txt), verbatim"
    assert quoted == "> 第一段\n>\n> 第二段\n\n— [seed 000](../seeds/000.txt), verbatim"


def test_links_to_pages():
    out = KitNotebooks().rewrite(
        Path("book/ch06_training/lesson.ipynb"),
        notebook(
            "{doc}`heads`, the {doc}`bug hunt <../ch06_bughunt/exercise>`, "
            "{doc}`/book/running` and {section}`5.8`"
        ),
    )
    text = cells(out)[0]
    assert text.startswith(
        "[Why so many heads? A measured ablation](heads.ipynb), "
        "the [bug hunt](../ch06_bughunt/exercise.ipynb), "
        "“Running the course” (a page of the book) and [§5.8 "
    ), text
    assert "](../ch05_model/lesson.ipynb#id-5-8-" in text


def test_directives_jupyterlab_renders_keep_their_form():
    source = (
        ":::{dropdown} Answer\nIt is {seed}`004:a`.\n\n"
        "```python\n{seed}`004:b`\n```\n:::"
    )
    figure = "```{figure} ../figures/model_ch01.svg\n:alt: A diagram\n\nThe model.\n```"
    dropdown, kept, _ = cells(KitNotebooks().rewrite(LESSON, notebook(source, figure)))
    # The answer is written out and stays folded; code inside it is code.
    assert (
        dropdown
        == ":::{dropdown} Answer\nIt is `a`.\n\n```python\n{seed}`004:b`\n```\n:::"
    )
    assert kept == figure


def test_code_is_left_as_it_is():
    text = "Write ``{glue:text}`key` `` in a cell, or:\n\n```md\n{cite}`x`\n```"
    data = notebook(text)
    assert KitNotebooks().rewrite(LESSON, data) == data


def test_what_jupyterlab_cannot_render_fails_naming_it():
    with pytest.raises(KitLessonError, match=r"cell 0: the role \{pitfall\}"):
        KitNotebooks().rewrite(LESSON, notebook("{pitfall}`x`"))
    with pytest.raises(KitLessonError, match=r"the directive \{margin\}"):
        KitNotebooks().rewrite(LESSON, notebook(":::{margin}\nx\n:::"))
    with pytest.raises(KitLessonError, match="needs the book's cross-references"):
        KitNotebooks().rewrite(LESSON, notebook("{numref}`fig-model-ch01`"))


def test_graded_cells_are_never_changed():
    locked = notebook("{seed}`004:a`", nbgrader={"grade_id": "x", "locked": True})
    with pytest.raises(KitLessonError, match="nbgrader cell"):
        KitNotebooks().rewrite(Path("book/ch03_bughunt/exercise.ipynb"), locked)


def test_folded_code_stays_folded():
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(
            "answer = 42", id="a", metadata={"tags": ["hide-input"]}
        )
    ]
    out = nbformat.reads(
        KitNotebooks().rewrite(LESSON, nbformat.writes(nb).encode()).decode(), 4
    )
    assert out.cells[0].metadata["jupyter"] == {"source_hidden": True}


def test_the_books_plumbing_is_left_out():
    """Issue 28 (item 6): the lessons' 235 glue(...) calls sat in the code a learner
    reads and copies. They now live in cells tagged remove-cell, which the book hides
    and the kit leaves out (its markdown has the values written in)."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("answer = 42", id="a"),
        nbformat.v4.new_code_cell(
            'glue("answer", answer, display=False)',
            id="b",
            metadata={"tags": ["remove-cell"]},
        ),
    ]
    out = nbformat.reads(
        KitNotebooks().rewrite(LESSON, nbformat.writes(nb).encode()).decode(), 4
    )
    assert [c.source for c in out.cells] == ["answer = 42"]
    # An error past a cell left out names the cell as the book's notebook counts it.
    nb.cells.append(nbformat.v4.new_markdown_cell("{pitfall}`x`", id="c"))
    with pytest.raises(KitLessonError, match=r"cell 2: the role \{pitfall\}"):
        KitNotebooks().rewrite(LESSON, nbformat.writes(nb).encode())


def _code_cells(path: Path) -> list[tuple[bool, ast.Module]]:
    """(hidden by the book, parsed source) for each code cell of a lesson notebook."""
    nb = nbformat.read(path, as_version=4)
    return [
        (
            "remove-cell" in c.metadata.get("tags", []),
            ast.parse(
                "\n".join(
                    line
                    for line in c.source.splitlines()
                    if not line.lstrip().startswith(("%", "!"))
                )
            ),
        )  # fmt: skip
        for c in nb.cells
        if c.cell_type == "code"
    ]


def _names(tree: ast.AST, ctx: type) -> set[str]:
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
            and isinstance(n.ctx, ctx)}  # fmt: skip


LESSONS = sorted(p for p in (ROOT / "book").glob("ch*/*.ipynb")
                 if p.name != "exercise.ipynb")  # fmt: skip


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_lesson_code_glues_only_in_cells_the_book_hides(path):
    """No visible code cell calls glue; a hidden cell sets no name that a later
    visible cell reads (the kit leaves the hidden cells out), unless a visible cell
    sets it too."""
    cells = _code_cells(path)
    for hidden, tree in cells:
        calls = {
            n.func.id
            for n in ast.walk(tree)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
        }
        assert hidden or "glue" not in calls, ast.unparse(tree)[:300]
    visible_sets = set().union(*(_names(t, ast.Store) for h, t in cells if not h))
    for i, (hidden, tree) in enumerate(cells):
        if not hidden:
            continue
        later = set().union(
            set(), *(_names(t, ast.Load) for h, t in cells[i + 1 :] if not h)
        )
        leaked = (_names(tree, ast.Store) & later) - visible_sets
        assert not leaked, f"{path.name}: the kit leaves out what sets {leaked}"


def test_other_files_ship_as_they_are():
    plain = notebook("# Title", "Plain *markdown*, $x^2$ and a [link](exercise.ipynb).")
    assert KitNotebooks().rewrite(LESSON, plain) == plain
    assert KitNotebooks().rewrite(Path("tools/learner_lab.py"), b"{seed}`x`") == (
        b"{seed}`x`"
    )
