"""The diagrams in book/figures/: exactly what tools/figures.py draws, small, and shown
by the lessons as MyST figures with alt text and a caption; every lesson opens with
the whole-model diagram of its own chapter. No book build needed."""

import functools
import re
import subprocess
import sys
from pathlib import Path

import jupytext
import pytest

ROOT = Path(__file__).resolve().parents[2]
FIGURES = ROOT / "book" / "figures"
SOURCES = sorted((ROOT / "nbsrc" / "book").glob("ch*/*.py"))  # lessons and the capstone
LESSONS = sorted((ROOT / "nbsrc" / "book").glob("ch*/lesson.py"))

# ```{figure} SRC (or a ::: colon fence), its :option: lines, then the caption.
FIGURE = re.compile(
    r"^(?P<fence>`{3,}|:{3,})\{figure\}[ \t]*(?P<src>\S*)[ \t]*\n"
    r"(?P<options>(?:[ \t]*:[\w-]+:[^\n]*\n)*)"
    r"(?P<caption>.*?)^(?P=fence)[ \t]*$",
    re.M | re.S,
)


@functools.lru_cache(maxsize=None)
def cells_of(path):
    return tuple(jupytext.read(path).cells)


def figures_in(cells):
    """(src, options, caption) of every {figure} directive in the markdown cells."""
    found = []
    for cell in cells:
        if cell.cell_type != "markdown":
            continue
        for m in FIGURE.finditer(cell.source + "\n"):
            options = dict(
                re.match(r"\s*:([\w-]+):[ \t]*(.*)", line).groups()
                for line in m["options"].splitlines()
            )
            found.append((m["src"], options, m["caption"].strip()))
    return found


def all_figures():
    return [(path, *fig) for path in SOURCES for fig in figures_in(cells_of(path))]


def test_committed_figures_match_a_fresh_drawing():
    proc = subprocess.run(
        [sys.executable, "tools/figures.py", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, (
        f"run `python tools/figures.py`:\n{proc.stdout}{proc.stderr}"
    )


def test_figures_are_small_self_contained_svgs():
    svgs = sorted(FIGURES.glob("*.svg"))
    assert svgs, "no figures in book/figures/"
    for svg in svgs:
        data = svg.read_bytes()
        text = data.decode("utf-8")
        assert len(data) < 200_000, f"{svg.name}: {len(data)} bytes"
        assert "<text" not in text, f"{svg.name}: text not stored as paths needs a font"
        assert "<dc:date>" not in text, f"{svg.name}: a date makes every run differ"
        assert "<image" not in text and 'href="http' not in text, svg.name


def test_every_figure_file_is_drawn_by_the_script_and_shown():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import figures
    finally:
        sys.path.pop(0)
    committed = {p.stem for p in FIGURES.glob("*.svg")}
    assert committed == set(figures.FIGURES), "book/figures/ != what the script draws"
    shown = {Path(src).stem for _, src, _, _ in all_figures()}
    assert committed <= shown, f"figures no lesson shows: {sorted(committed - shown)}"


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.parent.name)
def test_every_lesson_opens_with_its_model_diagram(path):
    chapter = path.parent.name.split("_")[0]  # ch01
    wanted = f"../figures/model_{chapter}.svg"
    opening = figures_in(cells_of(path)[:3])
    found = [(options, caption) for src, options, caption in opening if src == wanted]
    assert found, f"{path.parent.name}: no {{figure}} {wanted} in the first three cells"
    options, caption = found[0]
    assert options.get("alt"), f"{path.parent.name}: {wanted} has no :alt:"
    assert caption, f"{path.parent.name}: {wanted} has no caption"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_figure_exists_with_alt_text_and_a_caption(path):
    for src, options, caption in figures_in(cells_of(path)):
        # the notebook is book/<chapter>/<name>.ipynb: its paths start there
        target = (ROOT / "book" / path.parent.name / src).resolve()
        assert target.parent == FIGURES and target.is_file(), (
            f"{path.parent.name}: {src} is not a file in book/figures/"
        )
        assert options.get("alt"), f"{path.parent.name}: {src} has no :alt:"
        assert caption, f"{path.parent.name}: {src} has no caption"


def test_figure_names_are_unique():
    names = [options["name"] for _, _, options, _ in all_figures() if "name" in options]
    repeated = sorted({n for n in names if names.count(n) > 1})
    assert not repeated, repeated
