"""Every widget of the built book responds in a browser with no kernel and no network.

The pages with saved widget state are found in the build, and their controls on the
page (sliders, toggle buttons, dropdowns, checkboxes), so future widgets are covered
without changing this file. Each control is moved once, and the picture its widget
shows must change: its visible image gets another source and other bytes. Screenshots
of the first widget of each page, before and after its first control moves, are
written to _build/screenshots/.
"""

from __future__ import annotations

import re

import pytest
from browser import chromium, require_chromium, serve_directory, wait_for

from book import HTML, SCREENSHOTS, build_book, has_widget_state, pages

# xdist_group: the book is built once per worker process, so all its users share one
# worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("book")]

# One entry per control of the page: (kind, the control's element, its widget's
# element). The widget is the outermost widget view around the control (a
# `.widget-subarea`'s child), so a control and the pictures it switches are found
# together.
CONTROLS = """
const found = [];
const kinds = [
  ["slider", ".widget-slider .noUi-handle"],
  ["toggle", ".widget-toggle-buttons"],
  ["dropdown", ".widget-dropdown select"],
  ["checkbox", ".widget-checkbox input[type=checkbox]"],
];
for (const area of document.querySelectorAll(".widget-subarea")) {
  const widget = area.firstElementChild;
  if (!widget) continue;
  for (const [kind, selector] of kinds) {
    for (const el of widget.querySelectorAll(selector)) found.push([kind, el, widget]);
  }
}
return found;
"""

# The visible picture of a widget: [src, a hash of its bytes], or null while none is
# shown.
PICTURE = """
const done = arguments[arguments.length - 1];
const shown = Array.from(arguments[0].querySelectorAll("img")).filter(
  (i) => i.offsetParent !== null && i.complete && i.naturalWidth > 0);
if (shown.length !== 1) { done(null); return; }
fetch(shown[0].src).then((r) => r.arrayBuffer()).then((buffer) => {
  let h = 2166136261;  // FNV-1a over the image's bytes
  for (const b of new Uint8Array(buffer)) h = Math.imul(h ^ b, 16777619) >>> 0;
  done([shown[0].src, buffer.byteLength + ":" + h]);
}, (e) => done(["error", String(e)]));
"""


def picture(driver, widget):
    """(src, bytes hash) of the one image ``widget`` shows; waits for it to be drawn."""
    wait_for(
        driver,
        "return Array.from(arguments[0].querySelectorAll('img'))"
        ".filter(i => i.offsetParent !== null && i.complete && i.naturalWidth > 0)"
        ".length === 1",
        args=(widget,),
        what="the widget to show exactly one picture",
        timeout=30,
    )
    shown = driver.execute_async_script(PICTURE, widget)
    assert shown and shown[0] != "error", f"could not read the picture shown: {shown}"
    return tuple(shown)


def move(driver, kind: str, control) -> str:
    """Move one control as a reader would; returns what was done."""
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", control)
    if kind == "slider":
        at_end = control.get_attribute("aria-valuenow") == control.get_attribute(
            "aria-valuemax"
        )
        key = Keys.ARROW_LEFT if at_end else Keys.ARROW_RIGHT
        control.click()
        control.send_keys(key)
        return "slider: " + ("left" if at_end else "right") + " arrow key"
    if kind == "toggle":
        others = control.find_elements(
            "css selector", "button:not(.mod-active):not([disabled])"
        )
        assert others, "toggle buttons with no other option to pick"
        others[0].click()
        return f"toggle: picked {others[0].text!r}"
    if kind == "dropdown":
        select = Select(control)
        current = select.first_selected_option.get_attribute("value")
        other = next(o for o in select.options if o.get_attribute("value") != current)
        select.select_by_value(other.get_attribute("value"))
        return f"dropdown: picked {other.text!r}"
    control.click()
    return "checkbox: clicked"


def _name(relpath: str) -> str:
    return re.sub(
        r"[^A-Za-z0-9]+", "-", relpath.removesuffix(".html").removeprefix("book/")
    ).strip("-")


def check_widgets_respond(driver, url: str, name: str, screenshots=None) -> list[str]:
    """Open ``url``, move every control of its widgets once; returns one line per
    control moved. Fails where a move leaves the picture unchanged."""
    driver.get(url)
    wait_for(
        driver, "return document.readyState === 'complete'", what="the page to load"
    )
    n_views = driver.execute_script(
        "return document.querySelectorAll("
        "'script[type=\"application/vnd.jupyter.widget-view+json\"]').length"
    )
    wait_for(
        driver,
        "return document.querySelectorAll('.widget-subarea > *').length"
        " >= arguments[0]",
        what=f"{n_views} widget views to render",
        args=(n_views,),
    )
    controls = driver.execute_script(CONTROLS)
    assert controls, f"{name}: widget state but no control to move"
    moved = []
    for i, (kind, control, widget) in enumerate(controls):
        before = picture(driver, widget)
        first = screenshots is not None and i == 0
        if first:
            driver.execute_script(
                "arguments[0].scrollIntoView({block: 'start'});"
                " window.scrollBy(0, -80)",
                widget,
            )
            driver.save_screenshot(str(screenshots / f"{name}-widget-before.png"))
        action = move(driver, kind, control)
        wait_for(
            driver,
            "const i = Array.from(arguments[0].querySelectorAll('img')).filter("
            "i => i.offsetParent !== null); return i.length === 1 && "
            "i[0].src !== arguments[1]",
            args=(widget, before[0]),
            what=f"{name}: the picture to change after {action}",
            timeout=20,
        )
        after = picture(driver, widget)
        assert after[1] != before[1], (
            f"{name}: after {action} another image shows the same picture"
        )
        if first:
            driver.save_screenshot(str(screenshots / f"{name}-widget-after.png"))
        moved.append(f"{name}: {action} changed the picture")
    return moved


def test_every_widget_responds_offline(tmp_path_factory):
    require_chromium()  # skip before spending time on the build
    proc = build_book()
    assert proc.returncode == 0, f"jupyter-book build failed:\n{proc.stdout[-8000:]}"
    widget_pages = [
        p.relative_to(HTML).as_posix() for p in pages() if has_widget_state(p)
    ]
    assert widget_pages, "no page of the book has saved widget state"
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    moved = []
    with (
        serve_directory(HTML) as base,
        chromium(tmp_path_factory.mktemp("chromium")) as driver,
    ):
        for relpath in widget_pages:
            moved += check_widgets_respond(
                driver, base + relpath, _name(relpath), SCREENSHOTS
            )
    # Every page with widgets had a control that moved its picture.
    assert {line.split(":")[0] for line in moved} == {_name(p) for p in widget_pages}
