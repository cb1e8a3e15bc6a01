"""The built book in a real browser (headless Chromium), with the network closed.

Every page of ``_build/html`` is served on localhost and opened; pages are discovered from the
build, so new chapters are covered without changing this file. A screenshot of the top of every
page, and of the first widget of every page with widgets, is written to _build/screenshots/.
"""

from __future__ import annotations

import re

import pytest

from book import (
    HTML,
    SCREENSHOTS,
    build_book,
    has_maths,
    has_widget_state,
    notebook_pages,
    pages,
    parse,
)
from browser import (
    chromium,
    console_errors,
    require_chromium,
    outside_requests,
    requested_urls,
    serve_directory,
    wait_for,
)

# xdist_group: the book is built once per worker process, so all its users share one worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("book")]

# Resolves once the page's MathJax has typeset it (or at once where the page has no MathJax).
MATHJAX_DONE = """
const done = arguments[arguments.length - 1];
if (!window.MathJax || !MathJax.startup || !MathJax.startup.promise) { done("no mathjax"); return; }
MathJax.startup.promise.then(() => done("typeset"), (e) => done("error: " + e));
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """(base URL of the served book, a Chromium with the network closed)."""
    require_chromium()  # skip before spending time on the build
    proc = build_book()
    assert proc.returncode == 0, f"jupyter-book build failed:\n{proc.stdout[-8000:]}"
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with (
        serve_directory(HTML) as base,
        chromium(tmp_path_factory.mktemp("chromium")) as driver,
    ):
        yield base, driver


def open_page(site, relpath: str):
    """Load ``relpath``, wait until it and its maths are done; return (console errors, outside requests)."""
    base, driver = site
    driver.get_log("browser"), driver.get_log("performance")  # forget the previous page
    driver.get(base + relpath)
    wait_for(
        driver, "return document.readyState === 'complete'", what="the page to load"
    )
    state = driver.execute_async_script(MATHJAX_DONE)
    assert not state.startswith("error"), f"{relpath}: MathJax failed: {state}"
    return driver


def screenshot(driver, name: str):
    path = SCREENSHOTS / f"{name}.png"
    driver.save_screenshot(str(path))
    return path


def _name(relpath: str) -> str:
    return re.sub(
        r"[^A-Za-z0-9]+", "-", relpath.removesuffix(".html").removeprefix("book/")
    ).strip("-")


def test_the_network_is_closed(site):
    """The browser of these tests cannot reach a CDN, and the tests notice a page that tries."""
    driver = open_page(site, "book/intro.html")
    result = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "fetch('https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-mml-chtml.js', {mode: 'no-cors'})"
        ".then(() => done('reached'), (e) => done('blocked: ' + e))"
    )
    assert result.startswith("blocked"), result
    assert outside_requests(requested_urls(driver)) == [
        "https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-mml-chtml.js"
    ]
    console_errors(driver)  # the blocked fetch's error is expected here


def check_page(site, relpath: str) -> list[str]:
    """What is wrong with one page: JavaScript errors, requests that leave the machine, images that did
    not load, maths not typeset."""
    problems = []
    driver = open_page(site, relpath)
    if has_maths(HTML / relpath):
        found, typeset, errors = driver.execute_script(
            "return [document.querySelectorAll('.math').length, document.querySelectorAll('mjx-container').length,"
            " document.querySelectorAll('mjx-merror').length]"
        )
        if typeset < found:
            problems.append(f"{found} maths elements but {typeset} typeset")
        if errors:
            problems.append(f"{errors} TeX errors")
    broken = driver.execute_script(
        "return Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src)"
    )
    if broken:
        problems.append(f"images that did not load: {broken}")
    outside = outside_requests(requested_urls(driver))
    if outside:
        problems.append(f"tried to reach the network: {outside}")
    problems += [f"console: {e}" for e in console_errors(driver)]
    screenshot(driver, _name(relpath))
    display = driver.find_elements("css selector", "mjx-container[display='true']")
    if display:
        driver.execute_script(
            "arguments[0].scrollIntoView({block: 'center'})", display[0]
        )
        screenshot(driver, _name(relpath) + "-maths")
    return [f"{relpath}: {p}" for p in problems]


def test_every_page_renders_offline_without_errors(site):
    """Every page of the build (found at run time, so new chapters are included)."""
    relpaths = [p.relative_to(HTML).as_posix() for p in pages()]
    assert "book/intro.html" in relpaths
    problems = [
        problem for relpath in relpaths for problem in check_page(site, relpath)
    ]
    assert not problems, "\n".join(problems)
    # MathJax really ran somewhere: the notation page is full of maths.
    assert has_maths(HTML / "book/notation.html")


def check_widgets(site, relpath: str) -> None:
    """The book's own widget manager turns every saved widget view into live controls, with no kernel
    and no network; a slider linked in the browser still drives what it is linked to."""
    driver = open_page(site, relpath)
    n_views = driver.execute_script(
        "return document.querySelectorAll('script[type=\"application/vnd.jupyter.widget-view+json\"]').length"
    )
    assert n_views > 0, f"{relpath} has widget state but no widget view"
    wait_for(
        driver,
        "return document.querySelectorAll('.widget-subarea > *').length >= arguments[0]",
        what=f"{n_views} widget views to render",
        args=(n_views,),
    )
    heights = driver.execute_script(
        "return Array.from(document.querySelectorAll('.widget-subarea')).map(e => e.getBoundingClientRect().height)"
    )
    assert len(heights) >= n_views and all(h > 0 for h in heights), (
        f"{relpath}: widget heights {heights}"
    )
    # Widget images (e.g. a head's attention map) are decoded from the saved state.
    broken = driver.execute_script(
        "return Array.from(document.querySelectorAll('.widget-subarea img'))"
        ".filter(i => i.offsetParent !== null && !(i.complete && i.naturalWidth > 0)).length"
    )
    assert broken == 0, f"{relpath}: {broken} widget images did not load"
    # A slider moves with the keyboard; its readout follows, and so does whatever jslink ties to it.
    handles = driver.find_elements(
        "css selector", ".widget-subarea .widget-slider .noUi-handle"
    )
    if handles:
        from selenium.webdriver.common.keys import Keys

        readout = driver.find_elements(
            "css selector", ".widget-subarea .widget-readout"
        )
        before = readout[0].text if readout else None
        driver.execute_script(
            "arguments[0].scrollIntoView({block: 'center'})", handles[0]
        )
        handles[0].click()
        handles[0].send_keys(Keys.ARROW_RIGHT)
        if readout:
            wait_for(
                driver,
                "return arguments[0].textContent.trim() !== arguments[1]",
                args=(readout[0], before),
                what="the slider's readout to change",
            )
    widget = driver.find_element("css selector", ".widget-subarea")
    driver.execute_script(
        "arguments[0].scrollIntoView({block: 'start'}); window.scrollBy(0, -80)", widget
    )
    screenshot(driver, _name(relpath) + "-widget")
    errors, outside = console_errors(driver), outside_requests(requested_urls(driver))
    assert not outside and not errors, (
        f"{relpath}: outside requests {outside}, console errors {errors}"
    )


def test_widgets_render_from_saved_state_offline(site):
    widget_pages = [
        p.relative_to(HTML).as_posix() for p in pages() if has_widget_state(p)
    ]
    # The lessons show interactive widgets; none with saved state means execution stopped saving it.
    assert widget_pages, "no page of the book has saved widget state"
    for relpath in widget_pages:
        check_widgets(site, relpath)


def test_search_finds_mask(site):
    driver = open_page(site, "search.html?q=mask")
    wait_for(
        driver,
        "return document.querySelectorAll('#search-results li, ul.search li').length > 0",
        what="search results for 'mask'",
    )
    hits = driver.execute_script(
        "return Array.from(document.querySelectorAll('#search-results li a, ul.search li a')).map(a => a.href)"
    )
    assert any("/book/" in h for h in hits), hits
    screenshot(driver, "search-mask")
    assert not console_errors(driver)


def test_notebook_pages_have_download_and_no_launch_buttons(site):
    found = notebook_pages()
    assert found, "no page was built from a notebook"
    for page, _ in found:
        relpath = page.relative_to(HTML).as_posix()
        driver = open_page(site, relpath)
        download = driver.execute_script(
            "return Array.from(document.querySelectorAll('.dropdown-download-buttons a'))"
            ".map(a => a.href).filter(h => h.endsWith('.ipynb'))"
        )
        assert download, f"{relpath}: no 'download .ipynb' button"
        status = driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "fetch(arguments[0]).then(r => done(r.status), e => done(String(e)))",
            download[0],
        )
        assert status == 200, (
            f"{relpath}: the download button's {download[0]} answers {status}"
        )
        # No "launch" entry: it pointed at a local JupyterLab most readers do not run.
        launch = driver.execute_script(
            "return document.querySelectorAll('.dropdown-launch-buttons a').length"
        )
        assert launch == 0, f"{relpath}: {launch} launch buttons"
        screenshot(driver, _name(relpath))


def test_every_page_links_the_course_kit(site):
    kit = HTML / "course-kit.zip"
    assert kit.is_file(), "the build has no course kit (tools/kit.py)"
    # Every page's HTML links the kit from its announcement bar, by a path that resolves...
    for page in pages():
        if 'http-equiv="Refresh"' in page.read_text()[:500]:
            continue  # the root index.html only redirects to book/intro.html
        hrefs = [
            attrs["href"]
            for tag, attrs, _ in parse(page).tags
            if tag == "a" and "tformer-kit-link" in attrs.get("class", "")
        ]
        assert hrefs, f"{page.relative_to(HTML)}: no link to the course kit"
        assert (page.parent / hrefs[0]).resolve() == kit.resolve(), (page, hrefs)
    # ...and a reader sees it, with what a lesson's download needs, and gets the zip.
    for relpath in ["book/intro.html", "book/ch02_attention/lesson.html"]:
        driver = open_page(site, relpath)
        link = driver.find_element("css selector", ".bd-header-announcement a")
        assert link.text.strip() == "Download the course kit", link.text
        assert link.is_displayed(), relpath
        bar = driver.find_element("css selector", ".bd-header-announcement").text
        assert "download (.ipynb) button" in bar and "kit is installed" in bar, bar
        size = driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "fetch(arguments[0]).then(r => r.blob())"
            ".then(b => done(b.size), e => done(String(e)))",
            link.get_attribute("href"),
        )
        assert size == kit.stat().st_size, f"{relpath}: the kit link gives {size}"


def test_landing_page_shows_the_course_map(site):
    driver = open_page(site, "book/intro.html")
    text = driver.find_element("css selector", "article").text
    for words in ("Prerequisites", "Course map", "Attention, then heads", "Masks"):
        assert words in text, words
    path = screenshot(driver, "intro")
    assert path.stat().st_size > 10_000


def test_report_screenshots(site, capsys):
    """Last: name the screenshots, so a person can look at them."""
    shots = sorted(SCREENSHOTS.glob("*.png"))
    assert shots
    with capsys.disabled():
        print(
            f"\nscreenshots of the book in {SCREENSHOTS}: "
            + ", ".join(p.name for p in shots)
        )
