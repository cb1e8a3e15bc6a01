"""JupyterLab as a learner uses it: open an exercise, Run All Cells, read the checks' diagnoses.

A temporary copy of the course is served by a real JupyterLab on localhost and driven by headless
Chromium (tests/book/browser.py), with the network closed. The exercise is the student version with
every answer filled in correctly except the last, which has a known bug: its check cell must name
the pitfall and the lesson section, the checks before it must pass, and an ipywidget displayed in
the notebook must render.
"""

from __future__ import annotations

import shutil
import time

import nbformat
import pytest
from browser import (
    chromium,
    jupyterlab,
    outside_requests,
    requested_urls,
    require_chromium,
    wait_for,
)
from course import ROOT, filled, solution_sources

from book import SCREENSHOTS

pytestmark = pytest.mark.slow

CHAPTER = "ch01_shapes"
# The learner divides the scores by √D instead of √Dh; the check must name that pitfall. The bug is in
# the last graded answer because Run All Cells stops at the first failing cell.
BUGGY_ANSWER = "multi_head_attention"
RIGHT, WRONG = "/ math.sqrt(q.size(-1))", "/ math.sqrt(query.size(-1))  # D, not Dh"
DIAGNOSIS = "scaled by sqrt(d_model)"
WIDGET_CELL = """import ipywidgets as widgets

widgets.IntSlider(value=4, min=1, max=16, description="heads")"""


def learner_notebook() -> nbformat.NotebookNode:
    student = nbformat.read(ROOT / "book" / CHAPTER / "exercise.ipynb", as_version=4)
    answers = solution_sources(CHAPTER)
    assert RIGHT in answers[BUGGY_ANSWER], (
        "the chapter 1 solution changed: update the bug this test plants"
    )
    answers[BUGGY_ANSWER] = answers[BUGGY_ANSWER].replace(RIGHT, WRONG)
    nb = filled(student, answers)
    # A learner trying a widget right after the set-up cell (Run All stops at the failing check).
    setup = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
    nb.cells.insert(setup + 1, nbformat.v4.new_code_cell(WIDGET_CELL))
    return nb


@pytest.fixture
def lab(tmp_path):
    """A JupyterLab on 127.0.0.1 serving a copy of the course; yields (base URL, token, course folder)."""
    require_chromium()
    course = tmp_path / "course"
    shutil.copytree(
        ROOT / "tformer_ref",
        course / "tformer_ref",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    nbformat.write(learner_notebook(), course / "exercise.ipynb")
    with jupyterlab(course, tmp_path, {"PYTHONPATH": str(course)}) as (base, token):
        yield base, token, course


# nbgrader's Create Assignment panel (a tab of the right side bar) and the Validate button of
# the notebook toolbar, which a learner's JupyterLab does not show.
INSTRUCTOR_PANELS = (
    "return Array.from(document.querySelectorAll('.lm-TabBar-tab, .jp-Toolbar-item'))"
    ".filter(e => /Create Assignment|Validate/.test((e.title || '') + ' ' + e.innerText))"
    ".map(e => e.title || e.innerText)"
)
# Whitespace folded: a diagnosis is broken into lines between words (diagnosis.WRAP).
OUTPUT_TEXT = (
    "return Array.from(document.querySelectorAll('.jp-OutputArea-output'))"
    ".map(e => e.innerText).join(' ').replace(/\\s+/g, ' ')"
)
# The error output of the failing check, and the links in every output (resolved).
DIAGNOSIS_OUTPUT = (
    'return Array.from(document.querySelectorAll(".jp-OutputArea-output'
    "[data-mime-type='application/vnd.jupyter.stderr']\"))"
    ".map(e => e.innerText).join(' ').replace(/\\s+/g, ' ')"
)
# The failing check's error output: its text lines, and the rows the browser drew for
# them (more rows than lines: the output area wrapped a line, mid-word).
DIAGNOSIS_ROWS = (
    'const pre = document.querySelector(".jp-OutputArea-output'
    "[data-mime-type='application/vnd.jupyter.stderr'] pre\");"
    "const rows = pre.getClientRects()[0].height"
    " / parseFloat(getComputedStyle(pre).lineHeight);"
    "return [pre.innerText.trimEnd().split('\\n').length, Math.round(rows)]"
)
# The picture a failing check displayed: its image as loaded, and its caption.
PICTURE = """
const figure = document.querySelector('.jp-OutputArea-output figure.tformer-picture');
if (figure === null) return null;
const img = figure.querySelector('img');
return {natural: img.naturalWidth, width: img.getBoundingClientRect().width,
        area: figure.closest('.jp-OutputArea').getBoundingClientRect().width,
        alt: img.alt, caption: figure.querySelector('figcaption').innerText};
"""
OUTPUT_LINKS = (
    "return Array.from(document.querySelectorAll('.jp-OutputArea-output a'))"
    ".map(a => a.href)"
)


def test_learner_runs_an_exercise_in_jupyterlab(lab, tmp_path, capsys):
    base, token, _ = lab
    with chromium(tmp_path / "chromium", width=1400, height=1000) as driver:
        driver.get(f"{base}lab/tree/exercise.ipynb?token={token}")
        # The notebook is open and its kernel is ready.
        wait_for(
            driver,
            "return document.querySelector('.jp-NotebookPanel .jp-Cell') !== null",
            timeout=120,
            what="the notebook to open",
        )
        wait_for(
            driver,
            "const s = document.querySelector('.jp-NotebookPanel-toolbar .jp-Notebook-ExecutionIndicator');"
            "return s !== null && s.getAttribute('data-status') === 'idle'",
            timeout=120,
            what="the kernel to be idle",
        )
        # Run > Run All Cells, as a learner would.
        menu = [
            e
            for e in driver.find_elements("css selector", ".lm-MenuBar-item")
            if e.text.strip() == "Run"
        ]
        assert menu, "no Run menu in JupyterLab's menu bar"
        # The learner set-up: nbgrader's instructor tools are hidden, the learner's stay.
        menus = [
            e.text.strip()
            for e in driver.find_elements("css selector", ".lm-MenuBar-item")
        ]
        assert "Nbgrader" not in menus, menus
        assert not driver.execute_script(INSTRUCTOR_PANELS), (
            "nbgrader's instructor panels are shown"
        )
        menu[0].click()
        item = wait_for(
            driver,
            "return Array.from(document.querySelectorAll('#jp-mainmenu-run .lm-Menu-item'))"
            ".find(e => e.innerText.trim().startsWith('Run All Cells'))",
            what="the 'Run All Cells' menu item",
        )
        item.click()
        wait_for(
            driver,
            OUTPUT_TEXT.replace("return ", "return (") + ").includes(arguments[0])",
            timeout=120,
            what=f"the diagnosis '{DIAGNOSIS}'",
            args=(DIAGNOSIS,),
        )
        # The widget displayed by the last cell renders as a live slider.
        wait_for(
            driver,
            "return document.querySelector('.jp-OutputArea-output .widget-slider .noUi-handle, "
            ".jp-OutputArea-output .jupyter-widgets.widget-slider') !== null",
            timeout=120,
            what="the ipywidget to render",
        )
        # Everything has run once the kernel is idle again.
        wait_for(
            driver,
            "const s = document.querySelector('.jp-NotebookPanel-toolbar .jp-Notebook-ExecutionIndicator');"
            "return s.getAttribute('data-status') === 'idle'",
            timeout=120,
            what="the run to finish",
        )
        outputs = driver.execute_script(OUTPUT_TEXT)
        assert DIAGNOSIS in outputs and "§1.9" in outputs, outputs[-3000:]
        # The diagnosis, not a traceback through the checks' code; the section is a link
        # that opens the lesson at its heading.
        shown = driver.execute_script(DIAGNOSIS_OUTPUT)
        assert DIAGNOSIS in shown and "§1.9" in shown, shown
        assert "Traceback" not in shown and 'File "' not in shown, shown
        assert "tformer_grading" not in shown, shown
        lines, rows = driver.execute_script(DIAGNOSIS_ROWS)
        assert rows == lines, f"{lines} lines of diagnosis drawn on {rows} rows"
        links = driver.execute_script(OUTPUT_LINKS)
        # JupyterLab resolves the link to its own address for the file, anchor kept.
        assert any(
            "/book/ch01_shapes/heads.ipynb" in href
            and href.endswith("#id-1-9-scaling-by-the-head-size")
            for href in links
        ), links
        # The other answers are right, so their checks pass and say so.
        assert outputs.count("✓") >= 2, outputs[-3000:]
        assert "NotImplementedError" not in outputs, outputs[-3000:]
        assert not outside_requests(requested_urls(driver))
        # No "get notified about official Jupyter news?" question over the notebook.
        page_text = driver.execute_script("return document.body.innerText")
        assert "Jupyter news" not in page_text, page_text[-2000:]
        # Above the diagnosis, the check's picture of the learner's attention weights
        # next to the right ones (tformer_grading.pictures), at the notebook's width.
        picture = driver.execute_script(PICTURE)
        assert picture is not None, "the failing check shows no picture"
        assert picture["natural"] == 650 and 0 < picture["width"] <= picture["area"]
        assert picture["alt"].startswith("Two weights maps side by side.")
        assert picture["caption"].startswith("Your weights (left) and the right ones")
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        failing = driver.find_element(
            "css selector",
            ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']",
        )
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", failing)
        time.sleep(0.5)
        driver.save_screenshot(str(SCREENSHOTS / "jupyterlab-exercise-diagnosis.png"))
        slider = driver.find_element(
            "css selector", ".jp-OutputArea-output .widget-slider"
        )
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", slider)
        time.sleep(0.5)
        driver.save_screenshot(str(SCREENSHOTS / "jupyterlab-exercise-widget.png"))
    with capsys.disabled():
        print(
            f"\nscreenshots of JupyterLab in {SCREENSHOTS}: jupyterlab-exercise-diagnosis.png, "
            "jupyterlab-exercise-widget.png"
        )
