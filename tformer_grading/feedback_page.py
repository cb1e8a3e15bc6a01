"""The feedback page a learner receives: what it shows, and what stays with the grader.

nbgrader's feedback page (``nbgrader generate_feedback``, and the class command, which
calls it) is an HTML export of the graded notebook. It travels to the learner by mail
or an LMS and is opened alone, offline. ``nbgrader_config.py`` adds
:class:`LearnerFeedback` to its preprocessors, the page template
``feedback_templates/feedback/learner_page.html.j2`` (nbgrader's own with a few
additions) and the filters :func:`page_html` and :func:`page_markdown`, so that the
page:

- links each lesson section it names to the course's published book
  (``<book_url>/book/<chapter>/lesson.html#<anchor>``, the id the built book gives the
  heading, found by the heading in the lesson's source: a notebook's anchors are
  JupyterLab's, not the book's), where the course names that address
  (:attr:`LearnerFeedback.book_url`,
  by default ``html.baseurl`` of the course's ``_config.yml``), and otherwise names the
  file of the course kit as text: a notebook's relative link (``lesson.ipynb``, right
  in JupyterLab) leads nowhere from a page sent on its own, and a link into the
  instructor's disk is no better;
- shows each hidden test as one line saying that it ran, with its score and output
  (nbgrader shows the hidden source, jupyter/nbgrader#917);
- drops the receipt that signs each success line (``VerifyReceipts`` reads them in the
  graded notebook, which keeps them: only the page changes);
- wraps long output lines at word boundaries, so no diagnosis is cut at the box's edge;
- renders its maths with MathJax carried inside the page (SVG output, so no font files),
  compressed, and only on a page that has maths; nbgrader loads MathJax from a CDN;
- shows the images a learner pasted into a markdown cell (cell attachments), each in
  the page; one that a markdown cell or output names but the notebook lacks shows as a
  box saying so (it stopped nbconvert, and the learner got no page).

A feedback page is a web page a stranger wrote, opened by the learner and by whoever
grades the class: it runs nothing of the learner's. Learner markup stays text: both
filters run :mod:`tformer_grading.guard.feedback_html`'s cleaner first, and the page's
template cleans every HTML output, raw cell and markdown output whatever nbconvert's
``sanitize_html`` says, shows an "isolated" HTML output in the page rather than in a
frame, a widget as its text, and a JavaScript output not at all. Behind that, the page
opens with a Content-Security-Policy (:func:`content_security_policy`) that lets run
only its own scripts, named by their hashes (MathJax's, on a page with maths), loads
nothing from outside the page, and allows no ``<base>``, form, frame or plug-in.
"""

from __future__ import annotations

import base64
import functools
import gzip
import hashlib
import html
import json
import posixpath
import re
import unicodedata
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

from jinja2 import pass_context
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Unicode

from .guard.feedback_html import clean_html, markdown_html
from .preflight import base64_text

#: Where the course keeps MathJax's SVG build (see _vendor/README.md).
MATHJAX = Path("_vendor") / "mathjax-3.2.2" / "tex-svg.js"
#: What a page shows in place of a hidden test's source (a comment: shown as code).
HIDDEN_TEST_LINE = "# A hidden test ran here: see the score and the output."
#: The receipt ``tformer_grading.guard.receipts.sign`` appends to a success line.
_RECEIPT = re.compile(r" *\[grader receipt \d+:[0-9a-f]{16}\]")
#: TeX delimiters that MathJax would typeset: a page without them needs no MathJax.
_MATHS = re.compile(r"\$|\\\(|\\\[|\\begin\{")
#: How a markdown cell names one of its attachments (nbconvert's markdown renderer
#: raises InvalidNotebook on a name the cell does not hold).
_ATTACHMENT = re.compile(r"attachment:([^\s()<>\[\]\"']+)")
#: What an attachment may show as: a picture (an SVG in an <img> runs nothing).
_PICTURES = ("image/svg+xml", "image/png", "image/jpeg", "image/gif", "image/webp")
#: The pages a relative link of an exercise may name, as jupyter-book builds them.
_BOOK_PAGE = re.compile(r"^book/[\w.-]+/[\w.-]+\.(?:ipynb|md)$")


# -------------------------------------------------------------------- anchors and links


def _make_id(text: str) -> str:
    """docutils' ``nodes.make_id`` (what jupyter-book's sections are named by),
    without its table of Latin letters that NFKD leaves whole (ø, ß, ...): no heading
    uses one."""
    ident = unicodedata.normalize("NFKD", text.lower()).encode("ascii", "ignore")
    ident = re.sub("[^a-z0-9]+", "-", " ".join(ident.decode("ascii").split()))
    return re.sub("^[-0-9]+|-+$", "", ident)


try:  # docutils comes with jupyter-book; grading alone needs only nbgrader
    from docutils.nodes import make_id
except ImportError:  # pragma: no cover - tested against docutils in the tests
    make_id = _make_id


def section_anchor(number: str, title: str) -> str:
    """The anchor of heading ``## <number> <title>`` in the built book.

    >>> section_anchor("1.10", "Cost: O(n²·d) whatever the number of heads")
    'cost-o-n2d-whatever-the-number-of-heads'
    """
    return make_id(f"{number} {title}")


def _key(anchor: str) -> str:
    """What every style of anchor for one heading shares: its letters and digits. The
    book's ids (docutils: "splitting-into-heads"), JupyterLab's (jupyterlab-myst:
    "id-1-5-splitting-into-heads"; plain JupyterLab: "1.5-Splitting-into-heads") and the
    heading's text ("1.5 Splitting into heads") differ in all else."""
    return re.sub("[^a-z0-9]", "", re.sub(r"^id-(?=[0-9])", "", anchor.lower()))


@functools.lru_cache(maxsize=64)
def _heading_ids(notebook: Path) -> dict[str, str]:
    """``_key`` of each heading of ``notebook`` (with and without its section number)
    -> the id the built book gives that heading."""
    ids: dict[str, str] = {}
    for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        fenced = False
        for line in "".join(cell["source"]).splitlines():
            fenced ^= line.lstrip().startswith(("```", "~~~"))
            heading = None if fenced else re.match(r"#{1,6} (.+?)\s*$", line)
            if heading:
                ident = make_id(heading[1])
                ids.setdefault(_key(heading[1]), ident)
                ids.setdefault(_key(ident), ident)
    return ids


def book_anchor(path: str, fragment: str) -> str:
    """The id the built book gives the heading of book page ``path``
    (``book/<chapter>/<name>.ipynb``) that link fragment ``fragment`` names, in any of
    the styles :func:`_key` reads; "" when the page's source is not found here (the
    course's folder, or the checkout this package is in) or has no such heading."""
    for root in (Path.cwd(), Path(__file__).resolve().parents[1]):
        if (root / path).is_file():
            return _heading_ids((root / path).resolve()).get(_key(fragment), "")
    return ""


def book_target(href: str, folder: str) -> tuple[str, str] | None:
    """``(file, fragment)`` when relative link ``href`` of a notebook in ``folder``
    (``book/<assignment>``) names a page of the book, else None.

    >>> book_target("../ch03_masks/lesson.ipynb#1.5-X", "book/ch03_bughunt")
    ('book/ch03_masks/lesson.ipynb', '1.5-X')
    """
    parts = urlsplit(href)
    if parts.scheme or parts.netloc or not parts.path:
        return None
    path = posixpath.normpath(posixpath.join(folder, unquote(parts.path)))
    if not _BOOK_PAGE.match(path):
        return None
    return path, unquote(parts.fragment)


class _Links(HTMLParser):
    """Copies cleaned HTML, rewriting its links by the rule in the module docstring."""

    def __init__(self, book_url: str, folder: str, named: set[str]):
        super().__init__(convert_charrefs=False)
        self.book_url, self.folder, self.named = book_url, folder, named
        self.out: list[str] = []
        self._text: list[str] | None = None  # the text of a link being turned into text
        self._start = 0
        self._kit = ""

    def handle_starttag(self, tag, attrs):
        href = dict(attrs).get("href") if tag == "a" else None
        if href is None or self._text is not None or href.startswith("#"):
            self.out.append(self.get_starttag_text())  # in-page anchors stay
            return
        if urlsplit(href).scheme in ("http", "https", "mailto"):
            self.out.append(self.get_starttag_text())
            return
        target = book_target(href, self.folder)
        if target and self.book_url:
            path, fragment = target
            # A heading not found: the page itself, never an anchor it may not have.
            anchor = book_anchor(path, fragment) if fragment else ""
            url = f"{self.book_url}/{posixpath.splitext(path)[0]}.html" + (
                f"#{anchor}" if anchor else ""
            )
            attrs = [(k, url if k == "href" else v) for k, v in attrs]
            self.out.append(
                "<a"
                + "".join(
                    f' {k}="{html.escape(v or "", quote=True)}"' for k, v in attrs
                )
                + ">"
            )
            return
        # No page to open: the link's text stays, and names the kit's file if it is one.
        self._text, self._start = [], len(self.out)
        self._kit = target[0] if target else ""

    def handle_endtag(self, tag):
        if tag != "a" or self._text is None:
            self.out.append(f"</{tag}>")
            return
        text, kit = "".join(self._text).strip(), self._kit
        self._text = None
        if not kit:
            return
        # The kit's file is named once a page: an exercise links its lesson often.
        first = kit not in self.named
        self.named.add(kit)
        where = f"<code>{html.escape(kit)}</code>" + (" in your course kit" * first)
        if text in (kit, posixpath.basename(kit)):
            self.out[self._start :] = [where]
        elif first:
            self.out.append(f" ({where})")

    def handle_startendtag(self, tag, attrs):
        self.out.append(self.get_starttag_text())

    def handle_data(self, data):
        self.out.append(data)
        if self._text is not None:
            self._text.append(data)

    def handle_entityref(self, name):
        self.handle_data(f"&{name};")
        if self._text is not None:
            self._text[-1] = html.unescape(self._text[-1])

    def handle_charref(self, name):
        self.handle_data(f"&#{name};")
        if self._text is not None:
            self._text[-1] = html.unescape(self._text[-1])

    def handle_comment(self, data):
        self.out.append(f"<!--{data}-->")

    def handle_decl(self, decl):
        self.out.append(f"<!{decl}>")

    def unknown_decl(self, data):
        self.out.append(f"<![{data}]>")

    def handle_pi(self, data):
        self.out.append(f"<?{data}>")


def rewrite_links(
    cleaned: str, book_url: str, folder: str, named: set[str] | None = None
) -> str:
    """``cleaned`` (HTML from the cleaner) with each link a page sent alone can follow:
    in-page anchors and web addresses kept, a link to a book page sent to the published
    book (``book_url``) or, without one, turned into text naming the kit's file (the
    first time: ``named`` holds the files a page has named so far), and any other
    relative link turned into its text."""
    if "<a" not in cleaned:
        return cleaned
    parser = _Links(book_url.rstrip("/"), folder, set() if named is None else named)
    parser.feed(cleaned)
    parser.close()
    return "".join(parser.out)


def _page(context) -> tuple[str, str, set[str] | None]:
    page = (context.get("resources") or {}).get("tformer_feedback") or {}
    return page.get("book_url", ""), page.get("folder", "book"), page.get("named")


@pass_context
def page_html(context, text) -> str:
    """The ``clean_html`` filter of a feedback page: cleaned, links it can follow."""
    return rewrite_links(clean_html(text), *_page(context))


@pass_context
def page_markdown(context, text) -> str:
    """The ``strip_files_prefix`` filter of a feedback page (nbgrader's template renders
    every markdown cell through it): cleaned, with links it can follow."""
    return rewrite_links(markdown_html(text), *_page(context))


# -------------------------------------------------------------- cell sources, outputs


def hide_hidden_tests(source: str, begin: str, end: str) -> str:
    """``source`` with each region from a line holding ``begin`` to one holding ``end``
    replaced by :data:`HIDDEN_TEST_LINE` (nbgrader's delimiters, found the way its
    ``ClearHiddenTests`` finds them)."""
    out, inside = [], False
    for line in source.splitlines(keepends=True):
        if inside:
            inside = end not in line
        elif begin in line:
            indent = line[: len(line) - len(line.lstrip())]
            out.append(f"{indent}{HIDDEN_TEST_LINE}\n")
            inside = end not in line
        else:
            out.append(line)
    text = "".join(out)
    return text if source.endswith("\n") else text.removesuffix("\n")


def without_receipts(text: str) -> str:
    """``text`` without the receipts at the end of its success lines."""
    return _RECEIPT.sub("", text) if "[grader receipt" in text else text


def _strip_output(output) -> None:
    if "text" in output:
        output["text"] = without_receipts(output["text"])
    for mime in ("text/plain", "text/markdown", "text/html"):
        if isinstance(output.get("data", {}).get(mime), str):
            output["data"][mime] = without_receipts(output["data"][mime])
    if "traceback" in output:
        output["traceback"] = [without_receipts(line) for line in output["traceback"]]
    if "evalue" in output:
        output["evalue"] = without_receipts(output["evalue"])


def _has_maths(nb) -> bool:
    for cell in nb.cells:
        if cell.cell_type == "markdown" and _MATHS.search(cell.source):
            return True
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if any(
                _MATHS.search(str(data.get(m, "")))
                for m in ("text/markdown", "text/latex")
            ):
                return True
    return False


# ------------------------------------------------------------------------ attachments


def _missing_image(name: str) -> dict[str, str]:
    """An attachment that says, in the page, that image ``name`` is not in the
    notebook."""
    label = html.escape(f"image not in the notebook: {name}", quote=True)
    svg = (
        '<svg xmlns="http://www.w3.org/2000/svg" width="360" height="32">'
        '<rect width="360" height="32" fill="#fff" stroke="#c00"/>'
        f'<text x="8" y="21" font-family="sans-serif" font-size="13">{label}</text>'
        "</svg>"
    )
    return {"image/svg+xml": base64.b64encode(svg.encode()).decode("ascii")}


def _markdown_of(cell) -> str:
    """The markdown the page renders for ``cell``: its source, or its outputs'."""
    if cell.cell_type == "markdown":
        return cell.source
    return "".join(
        str(output.get("data", {}).get("text/markdown", ""))
        for output in cell.get("outputs", [])
    )


def page_attachments(source: str, attachments) -> dict[str, dict[str, str]]:
    """The attachments a markdown cell's page shows: those of ``attachments`` that are
    pictures in base64, and one for each name ``source`` gives that the cell lacks
    (found again under its percent-decoded name, else :func:`_missing_image`)."""
    kept: dict[str, dict[str, str]] = {}
    for name, bundle in (attachments if isinstance(attachments, dict) else {}).items():
        if not isinstance(bundle, dict):
            continue
        pictures = {
            mime: text
            for mime, data in bundle.items()
            if mime in _PICTURES and (text := base64_text(data)) is not None
        }
        if pictures:
            kept[name] = pictures
    for name in _ATTACHMENT.findall(source):
        if name not in kept:
            kept[name] = kept.get(unquote(name)) or _missing_image(unquote(name))
    return kept


# ---------------------------------------------------------------- the page's policy


def script_hash(code: str) -> str:
    """The Content-Security-Policy source that lets an inline script of text ``code``
    run."""
    digest = hashlib.sha256(code.encode("utf-8")).digest()
    return f"'sha256-{base64.b64encode(digest).decode('ascii')}'"


def content_security_policy(scripts=()) -> str:
    """The page's policy: only the inline scripts of text ``scripts`` run; styles are
    the page's own (the cleaner drops a learner's ``style`` and ``<style>``, and MathJax
    writes both); images come from inside the page; nothing else loads (fonts, frames,
    plug-ins, fetches: ``default-src``), and there is no ``<base>`` or form target
    (which ``default-src`` does not cover).

    >>> content_security_policy()
    "default-src 'none'; script-src 'none'; style-src 'unsafe-inline'; img-src data:; \
base-uri 'none'; form-action 'none'"
    """
    hashes = " ".join(script_hash(code) for code in scripts) or "'none'"
    return "; ".join(
        (
            "default-src 'none'",
            f"script-src {hashes}",
            "style-src 'unsafe-inline'",
            "img-src data:",
            "base-uri 'none'",
            "form-action 'none'",
        )
    )


#: Bootstrap's icon font, which nbgrader's page inlines with Bootstrap and never uses:
#: the browser still asks for its files beside the page, which the policy refuses (and
#: the console reports), so the page goes without it.
_ICON_FONT = re.compile(r"@font-face\s*\{[^{}]*Glyphicons Halflings[^{}]*\}")


def page_head(head: str, policy: str | None = None) -> str:
    """The ``<head>`` nbgrader's template writes, with the page's policy (``policy``,
    or where no LearnerFeedback set one :func:`content_security_policy` of no script)
    as its first element (a browser applies it to what follows it) and without the icon
    font."""
    policy = policy or content_security_policy()
    meta = (
        f'<meta http-equiv="Content-Security-Policy" content="{html.escape(policy)}">'
    )
    head = re.sub(r"<head>", lambda m: f"<head>\n{meta}", head, count=1)
    return _ICON_FONT.sub("", head)


# ---------------------------------------------------------------------- MathJax, inline


# MathJax as configured here fetches nothing: the TeX packages that would load more from
# the network (autoload, require) are off, and so is the menu, which loads its extras.
# Nor can a learner's maths make a link or set a style: \href, \class, \style and
# \cssId are TeX's html package, which tex-svg.js lacks and autoload would fetch.
_MATHJAX_CONFIG = """<script>
window.MathJax = {
  tex: {
    inlineMath: [["$", "$"], ["\\\\(", "\\\\)"]],
    processEscapes: true,
    packages: {"[-]": ["autoload", "require"]}
  },
  options: {enableMenu: false},
  svg: {fontCache: "global"}
};
</script>"""
# The browser inflates the packed MathJax itself (DecompressionStream: Chrome 80,
# Firefox 113, Safari 16.4); without it, the maths stays as TeX.
_MATHJAX_LOADER = """<script>
(function () {
  var packed = document.getElementById("tformer-mathjax");
  if (!packed || !window.DecompressionStream) return;
  var bytes = Uint8Array.from(atob(packed.textContent.trim()), function (c) {
    return c.charCodeAt(0);
  });
  var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
  new Response(stream).text().then(function (code) {
    var script = document.createElement("script");
    script.textContent = code;
    document.head.appendChild(script);
  });
})();
</script>"""


def _script_text(element: str) -> str:
    return element.removeprefix("<script>").removesuffix("</script>")


@functools.lru_cache(maxsize=4)
def mathjax_html(path: Path) -> tuple[str, tuple[str, ...]]:
    """The page's MathJax: its configuration, the script gzipped in base64 (0.9 MB for
    the 2.1 MB of ``tex-svg.js``) and the loader that unpacks and runs it; and the text
    of each script that runs (the policy names them by hash: the loader runs MathJax as
    an inline script of ``tex-svg.js``'s text)."""
    code = path.read_bytes()
    packed = gzip.compress(code, compresslevel=9, mtime=0)
    page = (
        f"{_MATHJAX_CONFIG}\n"
        '<script type="application/octet-stream" id="tformer-mathjax">'
        f"{base64.b64encode(packed).decode('ascii')}</script>\n{_MATHJAX_LOADER}"
    )
    scripts = (
        _script_text(_MATHJAX_CONFIG),
        _script_text(_MATHJAX_LOADER),
        code.decode("utf-8"),
    )
    return page, scripts


def _configured_baseurl(config: Path) -> str | None:
    """``html.baseurl`` of jupyter-book's ``config``, or None."""
    try:
        import yaml

        settings = yaml.safe_load(config.read_text(encoding="utf-8")) or {}
    except (OSError, ImportError, ValueError):
        return None
    value = (settings.get("html") or {}).get("baseurl")
    return value if isinstance(value, str) else None


def _hidden_test_delimiters(config) -> tuple[str, str]:
    """nbgrader's hidden-test delimiters, as the course configures them."""
    from nbgrader.preprocessors import ClearHiddenTests

    return tuple(
        config.ClearHiddenTests.get(name, getattr(ClearHiddenTests, name).default_value)
        for name in ("begin_test_delimeter", "end_test_delimeter")
    )


class LearnerFeedback(NbGraderPreprocessor):
    """Readies a graded notebook for its feedback page (the rules in the module
    docstring). The notebook on disk is not changed: only what the page shows."""

    book_url = Unicode(
        None,
        allow_none=True,
        help="the web address of the course's published book (its root, where "
        "book/ch01_shapes/lesson.html is found): lesson sections link there. "
        "Default: html.baseurl of the course's _config.yml; '' names them as text",
    ).tag(config=True)
    mathjax_js = Unicode(
        "",
        help="MathJax 3's tex-svg.js, carried inside each page that has maths. "
        f"Default: {MATHJAX} in the course, or beside this package",
    ).tag(config=True)

    def _book_url(self) -> str:
        url = self.book_url
        if url is None:  # the course's folder is the working directory here
            url = _configured_baseurl(Path("_config.yml"))
        url = (url or "").strip().rstrip("/")
        if url and urlsplit(url).scheme not in ("http", "https"):
            self.log.warning(
                "feedback pages name lesson sections as text: the book's address %r "
                "is not a web address (http or https) that a learner can open",
                url,
            )
            return ""
        return url

    def _mathjax(self) -> tuple[str, tuple[str, ...]]:
        candidates = (
            [Path(self.mathjax_js)]
            if self.mathjax_js
            else [MATHJAX, Path(__file__).resolve().parents[1] / MATHJAX]
        )
        for path in candidates:
            if path.is_file():
                return mathjax_html(path.resolve())
        self.log.warning(
            "feedback pages show their maths as TeX: no MathJax at %s",
            ", ".join(str(p) for p in candidates),
        )
        return "", ()

    def preprocess(self, nb, resources):
        delimiters = _hidden_test_delimiters(self.config)
        assignment = (resources.get("nbgrader") or {}).get("assignment", "")
        mathjax, scripts = self._mathjax() if _has_maths(nb) else ("", ())
        resources["tformer_feedback"] = {
            "book_url": self._book_url(),
            "folder": f"book/{assignment}" if assignment else "book",
            "mathjax": mathjax,
            "csp": content_security_policy(scripts),
            "named": set(),  # the kit files the page has named (rewrite_links)
        }
        for cell in nb.cells:
            # nbconvert renders a markdown output with its code cell's attachments.
            attachments = page_attachments(_markdown_of(cell), cell.get("attachments"))
            if attachments or "attachments" in cell:
                cell.attachments = attachments
            if cell.cell_type != "code":
                continue
            meta = cell.metadata.get("nbgrader", {})
            if meta.get("grade") and not meta.get("solution"):
                cell.source = hide_hidden_tests(cell.source, *delimiters)
            for output in cell.get("outputs", []):
                _strip_output(output)
        return nb, resources
