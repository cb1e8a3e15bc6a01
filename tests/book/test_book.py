"""The book builds with warnings as errors, and its HTML holds together without a browser.

The build runs once per session (tests/book/book.py) and tests/book/test_browser.py reuses it.
"""

from __future__ import annotations

import hashlib
import html
import re
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import yaml

from book import HTML, ROOT, build_book, has_widget_state, pages, parse

VENDOR = ROOT / "_vendor"
CDN_HOSTS = ("jsdelivr", "unpkg", "cdnjs", "cloudflare", "googleapis", "mathjax.org")


def test_vendored_browser_code_is_the_pinned_release():
    """_vendor/ holds exactly the files SHA256SUMS lists, unmodified."""
    listed = {}
    for line in (VENDOR / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        listed[name.lstrip("*")] = digest
    present = {
        p.relative_to(VENDOR).as_posix() for p in VENDOR.rglob("*") if p.is_file()
    } - {"README.md", "SHA256SUMS"}
    assert present == set(listed), (
        f"files not in SHA256SUMS: {present - set(listed)}; missing: {set(listed) - present}"
    )
    for name, digest in listed.items():
        assert hashlib.sha256((VENDOR / name).read_bytes()).hexdigest() == digest, (
            f"_vendor/{name} was modified"
        )


# The book is built once per worker process, so under pytest-xdist all its users share one worker.
pytestmark = pytest.mark.xdist_group("book")


@pytest.fixture(scope="module")
def built():
    proc = build_book()
    assert proc.returncode == 0, f"jupyter-book build failed:\n{proc.stdout[-8000:]}"
    return proc


@pytest.mark.slow
def test_book_builds_without_warnings(built):
    assert "build succeeded" in built.stdout
    # Sphinx's own messages ("file:line: WARNING: ..."); --warningiserror makes them fail the build too,
    # this names them. A kernel's log lines in the execution output are not the book's warnings.
    warnings = [
        line
        for line in built.stdout.splitlines()
        if re.search(r"\b(WARNING|ERROR|CRITICAL):", line)
    ]
    assert not warnings, "\n".join(warnings)
    # tools/preexecute.py filled myst-nb's cache under the key myst-nb computes: the build
    # itself executed nothing.
    assert "Executing notebook" not in built.stdout
    for page in (
        "book/intro",
        "book/running",
        "book/notation",
        "book/pitfalls",
        "book/references",
    ):
        assert (HTML / f"{page}.html").exists(), page


def _local_targets(page: Path):
    """(attribute value, resolved file, fragment) of every link and resource on ``page`` that stays in the book."""
    for tag, attrs, _ in parse(page).tags:
        for key in ("href", "src"):
            value = attrs.get(key)
            if not value or tag in ("a",) and key == "src":
                continue
            parts = urlsplit(value)
            if parts.scheme or value.startswith(
                ("//", "data:", "mailto:", "javascript:")
            ):
                continue
            target = (
                page
                if not parts.path
                else (page.parent / unquote(parts.path)).resolve()
            )
            yield value, target, parts.fragment


@pytest.mark.slow
def test_every_internal_link_and_resource_resolves(built):
    broken = []
    for page in pages():
        for value, target, fragment in _local_targets(page):
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{page.relative_to(HTML)}: {value} (no such file)")
            elif (
                fragment
                and target.suffix == ".html"
                and unquote(fragment) not in parse(target).ids
            ):
                broken.append(
                    f"{page.relative_to(HTML)}: {value} (no id '{fragment}' in {target.name})"
                )
    assert not broken, "broken links:\n" + "\n".join(sorted(set(broken)))


@pytest.mark.slow
def test_no_page_loads_code_from_a_cdn(built):
    """MathJax and the widget manager come from the book's own _static/, so it works offline."""
    remote = []
    for page in pages():
        for tag, attrs, _ in parse(page).tags:
            url = (
                attrs.get("src", "")
                if tag == "script"
                else attrs.get("href", "")
                if tag == "link"
                else ""
            )
            if urlsplit(url).scheme in ("http", "https") or url.startswith("//"):
                remote.append(f"{page.relative_to(HTML)}: <{tag}> {url}")
        if any(
            host in page.read_text(encoding="utf-8")
            for host in (
                "cdn.jsdelivr.net/npm/@jupyter-widgets",
                "unpkg.com/@jupyter-widgets",
            )
        ):
            remote.append(
                f"{page.relative_to(HTML)}: names a CDN copy of the widget manager"
            )
    assert not remote, "\n".join(remote)
    widget_pages = [p for p in pages() if has_widget_state(p)]
    for page in widget_pages:
        scripts = [a.get("src", "") for t, a, _ in parse(page).tags if t == "script"]
        assert any("_static/jupyter-widgets/html-manager-" in s for s in scripts), (
            f"{page.relative_to(HTML)} has widget state but does not load the book's widget manager"
        )


@pytest.mark.slow
def test_the_book_ships_only_the_mathjax_it_loads(built):
    """MathJax's SVG build (2.1 MB) is for feedback pages only: _config.yml's
    exclude_patterns keep it out of the book's _static/ (a build into an older _build/
    may still hold a copy: `make clean`)."""
    mathjax = HTML / "_static" / "mathjax-3.2.2"
    assert (mathjax / "tex-chtml-full.js").is_file()
    assert not (mathjax / "tex-svg.js").exists()


@pytest.mark.slow
def test_pages_that_show_widgets_carry_their_saved_state(built):
    """A widget output is only a reference to a model; executing a lesson must store the models' state
    in the notebook (nbclient does), or the book shows nothing where the widget was."""
    shown = 0
    for page in pages():
        text = page.read_text(encoding="utf-8")
        if "application/vnd.jupyter.widget-view+json" in text:
            shown += 1
            assert has_widget_state(page), (
                f"{page.relative_to(HTML)} shows widgets but has no saved widget state"
            )
    assert shown, (
        "no page shows a widget: the lessons' explorers are missing from the book"
    )


@pytest.mark.slow
def test_pitfall_index_lists_every_diagnosis_the_checks_name(built):
    """book/pitfalls.md's generated table covers every chapter's named pitfalls (tools/pitfall_index.py)."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        from pitfall_index import collect_pitfalls
    finally:
        sys.path.remove(str(ROOT / "tools"))
    found = collect_pitfalls()
    assert found, "no check module names a pitfall"
    text = html.unescape(
        re.sub(
            r"<[^>]+>",
            "",
            (HTML / "book" / "pitfalls.html").read_text(encoding="utf-8"),
        )
    )
    text = text.replace("\u2019", "'").replace("\u2018", "'")  # Sphinx's smart quotes
    for module, pitfall in found:
        assert pitfall.name in text, (
            f"{module}: '{pitfall.name}' is missing from the pitfall index"
        )
        assert f"§{pitfall.section.number} {pitfall.section.title}" in text, (
            pitfall.section
        )


def _content_images(page: Path):
    for tag, attrs, enclosing in parse(page).tags:
        if tag == "img" and any(
            "bd-article" in a.get("class", "") for _, a in enclosing
        ):
            yield attrs, enclosing


@pytest.mark.slow
def test_figures_have_alt_text_and_captions(built):
    """Every picture in a page says what it shows: alt text for screen readers, a caption for everyone.

    A notebook output image gets both from its cell's metadata (CONTRIBUTING.md, "Figures").
    """
    problems = []
    for page in pages():
        for attrs, enclosing in _content_images(page):
            src, alt = attrs.get("src", ""), attrs.get("alt", "").strip()
            name = f"{page.relative_to(HTML)}: {Path(src).name}"
            if (
                not alt
                or alt == src
                or alt.endswith((".png", ".svg", ".jpg", ".jpeg", ".gif"))
            ):
                problems.append(f"{name} has no alt text (alt={alt!r})")
            in_output = any("cell_output" in a.get("class", "") for _, a in enclosing)
            if in_output and not any(t == "figure" for t, _ in enclosing):
                problems.append(f"{name} is a notebook output without a figure caption")
    assert not problems, "\n".join(problems)


@pytest.mark.slow
def test_pages_name_no_author_and_no_doubled_title(built):
    """The reader review found "By The course authors" in every footer and the home page's tab
    title doubled ("Transformers from scratch … — Transformers from scratch …")."""
    index = (HTML / "book" / "intro.html").read_text(encoding="utf-8")
    title = html.unescape(
        re.search(r"<title>(.*?)</title>", index, re.S).group(1)
    ).strip()
    book_title = "Transformers from scratch, pitfall by pitfall"
    assert title.count(book_title) == 1, title
    for page in pages():
        text = page.read_text(encoding="utf-8")
        assert not re.search(
            r">\s*By\s", re.sub(r"<script.*?</script>", "", text, flags=re.S)
        ), page


@pytest.mark.slow
def test_pages_show_a_repository_only_when_one_is_set(built):
    """The reader review found a placeholder repository address on every page (see
    tests/book/test_repository_address.py): with ``repository: url:`` empty, no page
    has a repository button or the old address, and the landing page says how the
    course is had."""
    url = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    for page in pages():
        text = page.read_text(encoding="utf-8")
        assert "tformer-course" not in text, page
        if not url:
            assert "repository-button" not in text, page
    intro = (HTML / "book" / "intro.html").read_text(encoding="utf-8")
    assert (url or "no public repository") in intro


@pytest.mark.slow
def test_seed_quotations_are_attributed_and_the_seeds_are_in_the_book(built):
    """Every {seed-quote} block ends with its attribution, linked to the seeds' page."""
    seeds = (HTML / "book" / "seeds" / "index.html").read_text(encoding="utf-8")
    assert (
        "关于Transformer 架构的几点记录" in seeds and "从零实现8头自注意力机制" in seeds
    )
    blocks = 0
    for page in pages():
        text = page.read_text(encoding="utf-8")
        for start in (m.start() for m in re.finditer("seed-quote-block", text)):
            blocks += 1
            after = text[start : start + 60000]
            credit = after.find("seed-attribution")
            assert credit >= 0 and "seeds/index.html" in after[credit : credit + 600], (
                page
            )
    assert blocks >= 1
