"""Build the book once per test session and share the result.

``jupyter-book build`` runs with warnings as errors, into the default ``_build/`` so that the
execution cache of ``make book`` (``_build/.jupyter_cache``) is reused: lessons whose code did not
change are not executed again. tests/book/test_book.py asserts on the build, tests/book/test_browser.py
opens its HTML.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "_build"
HTML = BUILD / "html"
SCREENSHOTS = BUILD / "screenshots"
# Folders of the built site that hold assets, not pages.
ASSET_DIRS = ("_static", "_sources", "_images", "_downloads")


def _build() -> subprocess.CompletedProcess:
    jupyter_book = Path(sys.executable).parent / "jupyter-book"
    # As `make book`, the notebooks are executed into the build's cache first, but one at a
    # time: under `make test` the other cores already run kernels (nbval, nbgrader), and more
    # kernels starting at once make jupyter_client's port choice race (a kernel that dies
    # before kernel_info). A notebook that fails is not cached, so the build runs it again
    # and reports myst-nb's own error.
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools" / "preexecute.py"),
            "--jobs",
            "1",
            "--threads",
            "1",
        ],
        cwd=ROOT,
        timeout=1200,
    )
    book = subprocess.run(
        [
            str(jupyter_book),
            "build",
            ".",
            "--warningiserror",
            "--nitpick",
            "--keep-going",
        ],
        cwd=ROOT,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=1200,
    )
    # As `make book`: the learner kit that every page links to.
    kit = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "kit.py")],
        cwd=ROOT,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=300,
    )
    return subprocess.CompletedProcess(
        book.args, book.returncode or kit.returncode, book.stdout + kit.stdout
    )


@functools.cache
def build_book() -> subprocess.CompletedProcess:
    """Run the build of `make book` once per test run; later calls return the same result.

    Under pytest-xdist every worker process may ask for it: a file lock lets the first build and
    the others reuse its result (keyed by the run's id), so two builds never write `_build` at once.
    """
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if not run_id:
        return _build()
    from filelock import FileLock  # a dependency of torch, pinned in requirements.txt

    BUILD.mkdir(exist_ok=True)
    marker = BUILD / f".built-{run_id}.json"
    with FileLock(str(BUILD / ".build.lock")):
        if marker.exists():
            saved = json.loads(marker.read_text())
            return subprocess.CompletedProcess(
                saved["args"], saved["returncode"], saved["stdout"]
            )
        proc = _build()
        marker.write_text(
            json.dumps(
                {
                    "args": proc.args,
                    "returncode": proc.returncode,
                    "stdout": proc.stdout,
                }
            )
        )
        return proc


def pages() -> list[Path]:
    """Every HTML page of the built book (not the theme's assets)."""
    return sorted(
        p
        for p in HTML.rglob("*.html")
        if p.relative_to(HTML).parts[0] not in ASSET_DIRS
        # A dot folder (.pytest_cache/) is never a page of the book: one left by an
        # older build must not count as one.
        and not p.relative_to(HTML).parts[0].startswith(".")
    )


def notebook_pages() -> list[tuple[Path, Path]]:
    """(page, downloadable notebook) for every page built from a notebook."""
    found = []
    for source in sorted((HTML / "_sources").rglob("*.ipynb")):
        page = HTML / source.relative_to(HTML / "_sources").with_suffix(".html")
        if page.exists():
            found.append((page, source))
    return found


class Tags(HTMLParser):
    """Collects (tag, attributes, enclosing tags) for the tags of one page."""

    VOID = {
        "area",
        "base",
        "br",
        "col",
        "embed",
        "hr",
        "img",
        "input",
        "link",
        "meta",
        "source",
        "track",
        "wbr",
    }

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict, tuple]] = []
        self.ids: set[str] = set()
        self._stack: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        attrs = {k: (v or "") for k, v in attrs}
        self.tags.append((tag, attrs, tuple(self._stack)))
        for key in ("id", "name"):
            if attrs.get(key):
                self.ids.add(attrs[key])
        if tag not in self.VOID:
            self._stack.append((tag, attrs))

    def handle_endtag(self, tag):
        for i in range(len(self._stack) - 1, -1, -1):
            if self._stack[i][0] == tag:
                del self._stack[i:]
                break


@functools.cache
def parse(page: Path) -> Tags:
    tags = Tags()
    tags.feed(page.read_text(encoding="utf-8"))
    return tags


def has_widget_state(page: Path) -> bool:
    return "application/vnd.jupyter.widget-state+json" in page.read_text(
        encoding="utf-8"
    )


def has_maths(page: Path) -> bool:
    return (
        re.search(r'class="[^"]*\bmath\b', page.read_text(encoding="utf-8")) is not None
    )
