"""Figures are legible where the book shows them, and open at full size on a click.

Every plot in a cell's output of every page is measured in Chromium at 1280 px: its
natural width against its displayed width. Its smallest label, SMALLEST_FONT_PT points
at the PNG's own dpi (which must be the book style's FIGURE_DPI, from
tformer_ref/plotting.py), scaled by displayed/natural, must be at least as tall as the
page's small print (the computed font size of a ``<small>`` in the article's text).
"""

from __future__ import annotations

import struct
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from tests.book.book import HTML, build_book, pages
from tests.book.browser import chromium, require_chromium, serve_directory
from tformer_ref.plotting import FIGURE_DPI, SMALLEST_FONT_PT

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("book")]

# Plots in cell outputs are files under _images/ (a widget's picture is a blob: URL).
MEASURE_JS = """
const small = document.createElement("small");
small.textContent = "x";
const host = document.querySelector("article.bd-article p") || document.body;
host.appendChild(small);
const smallPx = parseFloat(getComputedStyle(small).fontSize);
small.remove();
const figures = [...document.querySelectorAll(".cell_output img")]
  .filter((img) => new URL(img.src).pathname.includes("/_images/"))
  .map((img) => ({
    src: img.src,
    natural: img.naturalWidth,
    displayed: img.getBoundingClientRect().width,
    link: img.closest("a") ? img.closest("a").href : null,
  }));
return {smallPx, figures};
"""


def png_dpi(path: Path) -> float:
    """Horizontal resolution in dots per inch from a PNG's pHYs chunk (0 if none)."""
    data = path.read_bytes()
    at = data.find(b"pHYs")
    if at < 0:
        return 0.0
    per_unit, _, unit = struct.unpack(">IIB", data[at + 4 : at + 13])
    return per_unit * 0.0254 if unit == 1 else 0.0


def local_file(url: str, root: Path) -> Path:
    return root / unquote(urlsplit(url).path).lstrip("/")


def measure_page(driver, url: str, root: Path) -> tuple[float, list[dict]]:
    """(small print in px, one record per figure) for the page at ``url``."""
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(url)
    WebDriverWait(driver, 60).until(
        lambda d: d.execute_script(
            "return document.readyState === 'complete' && [...document"
            ".querySelectorAll('.cell_output img')].every((i) => i.complete)"
        )
    )
    found = driver.execute_script(MEASURE_JS)
    for figure in found["figures"]:
        dpi = png_dpi(local_file(figure["src"], root))
        figure["dpi"] = dpi
        figure["label_px"] = (
            SMALLEST_FONT_PT * dpi / 72 * figure["displayed"] / figure["natural"]
        )
    return found["smallPx"], found["figures"]


def opens_full_size(driver, figure: dict) -> bool:
    """Click the figure; True if a new tab shows its image at the natural width."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    page = driver.current_window_handle
    before = set(driver.window_handles)
    name = urlsplit(figure["src"]).path.rsplit("/", 1)[-1]
    img = driver.find_element(By.CSS_SELECTOR, f'.cell_output img[src$="{name}"]')
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", img)
    img.click()
    WebDriverWait(driver, 20).until(lambda d: len(d.window_handles) > len(before))
    (tab,) = set(driver.window_handles) - before
    driver.switch_to.window(tab)
    try:
        WebDriverWait(driver, 20).until(
            lambda d: d.execute_script(
                "const i = document.images[0]; return i && i.complete"
            )
        )
        shown = driver.execute_script("return document.images[0].naturalWidth")
        return driver.current_url == figure["src"] and shown == figure["natural"]
    finally:
        driver.close()
        driver.switch_to.window(page)


@pytest.fixture(scope="module")
def figures(tmp_path_factory):
    """Every figure of the built book, measured at 1280 px: (page, small px, record)."""
    require_chromium()
    proc = build_book()
    assert proc.returncode == 0, f"jupyter-book build failed:\n{proc.stdout[-8000:]}"
    measured = []
    with (
        serve_directory(HTML) as base,
        chromium(tmp_path_factory.mktemp("chromium"), width=1280) as driver,
    ):
        for page in pages():
            relpath = page.relative_to(HTML).as_posix()
            small_px, records = measure_page(driver, base + relpath, HTML)
            for record in records:
                record["opens_full_size"] = opens_full_size(driver, record)
                measured.append((relpath, small_px, record))
    report = "\n".join(
        f"{page}: {Path(r['src']).name[:12]} natural {r['natural']} px, displayed "
        f"{r['displayed']:.0f} px, dpi {r['dpi']:.0f}, label {r['label_px']:.1f} px "
        f"(small print {small:.1f} px)"
        for page, small, r in measured
    )
    print("\nfigures at 1280 px:\n" + report)
    return measured


def test_the_book_has_figures(figures):
    assert len({page for page, _, _ in figures}) >= 5, figures


def test_figures_are_drawn_in_the_book_style(figures):
    wrong = [
        (page, r["src"], r["dpi"])
        for page, _, r in figures
        if abs(r["dpi"] - FIGURE_DPI) > 0.5
    ]
    assert not wrong, f"figures not at the book's FIGURE_DPI={FIGURE_DPI}: {wrong}"


def test_labels_are_no_smaller_than_small_print(figures):
    small = [
        f"{page}: {r['src']} natural {r['natural']} px shown at {r['displayed']:.0f} "
        f"px: labels {r['label_px']:.1f} px < small print {small_px:.1f} px"
        for page, small_px, r in figures
        if r["label_px"] < small_px - 0.05
    ]
    assert not small, "\n".join(small)


def test_a_click_opens_the_figure_at_full_size(figures):
    closed = [(page, r["src"]) for page, _, r in figures if not r["opens_full_size"]]
    assert not closed, closed
