"""The kit's notebooks as the book shows them: what only its build knows, written out.

A learner reads the lessons in JupyterLab, whose ``jupyterlab-myst`` extension (in the
learner's requirements) renders MyST markdown: figures, admonitions, dropdowns (closed
until opened), maths, tables. It knows nothing of what the book's Sphinx build adds,
and shows that as raw text or as a role's bare content ("ch01_where:s"). So
``tools/kit.py`` passes every file it ships through :meth:`KitNotebooks.rewrite`,
which writes out, in the kit's copy of each notebook under ``book/`` only:

- ``{glue:text}`key:fmt```, ``{glue}``, ``{glue:md}``: the value the book shows,
  formatted as myst-nb formats it, from the execution the book shows (myst-nb's cache,
  ``_build/.jupyter_cache``, filled by ``make book``) of the notebook's current code. A
  notebook without one fails the kit build, naming it: the kit never ships a
  placeholder. A note under the title says whose run the numbers are.
- ``{cite}``, ``{cite:p}``, ``{cite:t}``: the book's author-year text ("[Vaswani et
  al., 2017]", "Vaswani et al. [2017]"), by sphinxcontrib-bibtex's own style from the
  book's ``.bib``, and a "References" cell at the end with the full entries.
- ``{doc}`` and ``{section}``: a link to the notebook in the kit, or the page's title
  in words where the kit does not ship the page.
- the seed quotations of ``tools/seed_quotes.py``: ``{seed}`` as inline code,
  ``{seedtr}`` in quotation marks with "(translated)", ``{seed-quote}`` as a code block
  or a quotation followed by "— seed NNN, verbatim", linked to the seed's text.
- a ``hide-input`` tag (code the book folds): the input collapsed in JupyterLab.
- a ``remove-cell`` tag: the cell left out. The lessons keep their ``glue`` calls, the
  book's plumbing, in such cells (hidden in the book too); the kit has the values
  written out, so a learner never meets them.

Any other role or directive that JupyterLab does not render fails the build, naming
it and the notebook. The notebooks in ``book/`` stay as they are (the book builds from
them); one with nothing to write out ships byte for byte. A cell with nbgrader metadata
is never changed (its checksum would no longer match): one that would need it fails.
"""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path, PurePosixPath

import nbformat
import pitfall_refs  # tools/, beside this file: the {section} role's targets
import seed_quotes  # tools/, beside this file: the seed roles' syntax
import yaml

from tformer_grading.anchors import heading_anchor

ROOT = Path(__file__).resolve().parent.parent

# Roles and directives jupyterlab-myst renders by itself (checked in JupyterLab, see
# tests/book/test_jupyterlab_lessons.py): left as they are.
NATIVE_ROLES = {"math", "sub", "sup", "abbr", "kbd", "u", "eq"}
ADMONITIONS = {
    "admonition",
    "attention",
    "caution",
    "danger",
    "error",
    "hint",
    "important",
    "note",
    "seealso",
    "tip",
    "warning",
}
NATIVE_DIRECTIVES = ADMONITIONS | {"figure", "image", "dropdown", "math", "table"}
CODE_DIRECTIVES = {"code", "code-block", "code-cell", "sourcecode"}
# Characters that markdown would read as markup in a value pasted into the text.
_MARKUP = re.compile(r"([\\`*_\[\]<>|$~])")
_ROLE = re.compile(r"\{(?P<name>[A-Za-z][\w:+-]*)\}(?P<ticks>`+)")
_TICKS = re.compile(r"`+")
_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,}|:{3,})(?P<info>.*)$")
_DIRECTIVE = re.compile(r"^\{(?P<name>[\w:-]+)\}\s*(?P<argument>.*)$")
_OPTION = re.compile(r"^:(?P<key>[\w-]+):\s*(?P<value>.*)$")
_TITLED = re.compile(r"^(?P<text>.*?)\s*<(?P<target>[^<>]+)>$", re.DOTALL)
_CITE_KEY = re.compile(
    r"^(?:\{(?P<pre>[^}]*)\})?(?P<key>[^{}]+?)(?:\{(?P<post>[^}]*)\})?$"
)

NOTE = (
    ":::{note}\n"
    "The measured numbers in this text (times, losses, counts) are those of the run "
    "that built the book, as the book shows them. Running the cells here prints your "
    "own run's numbers, which may differ.\n"
    ":::"
)


class KitLessonError(SystemExit):
    """A notebook the kit cannot ship as the book shows it; the message says why."""

    def __init__(self, message: str):
        super().__init__(f"kit: {message}")


def escape(text: str) -> str:
    """``text`` as literal markdown: what the book shows as plain text stays plain."""
    return _MARKUP.sub(r"\\\1", text)


def code_span(text: str) -> str:
    """Inline code holding ``text`` whatever backticks it contains."""
    longest = max((len(run) for run in _TICKS.findall(text)), default=0)
    ticks = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def role_text(content: str) -> str:
    # markdown-it turns the line endings inside a role's backticks into spaces.
    return content.replace("\r\n", " ").replace("\n", " ")


@dataclass
class _Page:
    """One notebook being rewritten: what its roles need to know."""

    rel: PurePosixPath  # e.g. book/ch01_shapes/lesson.ipynb
    source: str  # the notebook's text, for the execution cache
    cited: list[str] = field(default_factory=list)
    glued: bool = False

    def relative(self, target: PurePosixPath) -> str:
        return os.path.relpath(target, self.rel.parent).replace(os.sep, "/")


class KitNotebooks:
    """Rewrites the kit's copy of the book's notebooks (see the module's docstring)."""

    def __init__(self, root: Path = ROOT):
        self.root = root
        # Where myst-nb keeps the executions the book shows (tools/preexecute.py too).
        self.cache_path = root / "_build" / ".jupyter_cache"
        self._glue: dict[PurePosixPath, dict] = {}

    # ------------------------------------------------------------------ the notebook
    def rewrite(self, rel: Path, data: bytes) -> bytes:
        """The kit's copy of the file ``rel`` (from the course root), from its bytes."""
        rel = PurePosixPath(Path(rel).as_posix())
        if rel.suffix != ".ipynb" or rel.parts[0] != "book":
            return data
        nb = nbformat.reads(data.decode("utf-8"), as_version=4)
        page = _Page(rel, data.decode("utf-8"))
        # An error names a cell by its index in the book's notebook, hidden cells
        # counted.
        indexed = [(i, c) for i, c in enumerate(nb.cells) if not _book_only(c)]
        changed = len(indexed) < len(nb.cells)
        nb.cells = [cell for _, cell in indexed]
        for index, cell in indexed:
            if cell.cell_type == "markdown":
                try:
                    text = self.markdown(cell.source, page)
                except (KeyError, ValueError) as error:
                    raise KitLessonError(f"{rel}, cell {index}: {error}") from None
                if text != cell.source:
                    if "nbgrader" in cell.metadata:
                        raise KitLessonError(
                            f"{rel}, cell {index}: an nbgrader cell holds MyST the kit "
                            "must write out, and its checksum would no longer match"
                        )
                    cell.source = text
                    changed = True
            changed |= _fold(cell)
        # Fixed ids, not nbformat's random ones: the same sources give the same kit.
        if page.glued:
            note = nbformat.v4.new_markdown_cell(NOTE, id="kit-note")
            nb.cells.insert(min(1, len(nb.cells)), note)
        if page.cited:
            references = self.references(page.cited)
            nb.cells.append(
                nbformat.v4.new_markdown_cell(references, id="kit-references")
            )
        if not (changed or page.glued or page.cited):
            return data
        return (nbformat.writes(nb) + "\n").encode("utf-8")

    # ------------------------------------------------------------------ markdown
    def markdown(self, text: str, page: _Page) -> str:
        """``text`` with every role and directive the kit must write out written out."""
        lines = text.split("\n")
        out: list[str] = []
        i = 0
        while i < len(lines):
            match = _FENCE.match(lines[i])
            if not match:
                j = i
                while j < len(lines) and not _FENCE.match(lines[j]):
                    j += 1
                out.append(self.inline("\n".join(lines[i:j]), page))
                i = j
                continue
            indent, fence, info = match["indent"], match["fence"], match["info"].strip()
            end = i + 1
            while end < len(lines) and not _closes(lines[end], fence):
                end += 1
            body = lines[i + 1 : end]
            closing = lines[end] if end < len(lines) else None
            out.append(self.fenced(indent, fence, info, body, closing, page))
            i = end + 1
        return "\n".join(out)

    def fenced(self, indent, fence, info, body, closing, page) -> str:
        directive = _DIRECTIVE.match(info)
        tail = [] if closing is None else [closing]
        if directive is None or directive["name"] in CODE_DIRECTIVES:
            if fence.startswith(":") and directive is None:
                raise ValueError(f"a ':::' fence without a directive: {info!r}")
            return "\n".join([indent + fence + info, *body, *tail])
        name = directive["name"]
        if name == "seed-quote":
            return self.seed_quote(indent, directive["argument"].strip(), body, page)
        if name not in NATIVE_DIRECTIVES:
            raise ValueError(
                f"the directive {{{name}}} does not render in JupyterLab: write it "
                "out in tools/kit_lessons.py"
            )
        options, content = _split_options(body)
        if name == "math":
            rendered = content
        else:
            rendered = self.markdown("\n".join(content), page).split("\n")
        return "\n".join([indent + fence + info, *options, *rendered, *tail])

    def inline(self, text: str, page: _Page) -> str:
        """Roles written out; code spans and everything else left as they are."""
        out, pos = [], 0
        while True:
            role = _ROLE.search(text, pos)
            span = _TICKS.search(text, pos)
            if span is None:
                break
            if role is not None and role.end() - len(role["ticks"]) == span.start():
                ticks = role["ticks"]
                close = _closing_ticks(text, role.end(), len(ticks))
                if close is None:
                    break
                before = text[pos : role.start()]
                out.append(before)
                written = self.role(role["name"], text[role.end() : close], page)
                if written is None:
                    written = text[role.start() : close + len(ticks)]
                pos = close + len(ticks)
                if not "".join(out).rpartition("\n")[2].strip():
                    # With the character after it: "3" then "." is a numbered list.
                    after = text[pos : pos + 1]
                    guarded = _guard_line_start(written + after)
                    written = guarded[: len(guarded) - len(after)]
                out.append(written)
                continue
            # A code span: its text is literal.
            close = _closing_ticks(text, span.end(), len(span.group()))
            end = span.end() if close is None else close + len(span.group())
            out.append(text[pos:end])
            pos = end
        out.append(text[pos:])
        return "".join(out)

    def role(self, name: str, content: str, page: _Page) -> str | None:
        """What the book shows for the role, in markdown; None: JupyterLab's own."""
        if name in NATIVE_ROLES:
            return None
        if name in ("glue", "glue:any", "glue:text", "glue:md"):
            page.glued = True
            return self.glue(name, role_text(content).strip(), page)
        if name == "cite" or name.startswith("cite:"):
            return escape(self.cite(name, role_text(content), page))
        if name == "doc":
            return self.doc(role_text(content), page)
        if name == "section":
            return self.section(role_text(content), page)
        if name in ("ref", "numref"):
            titled = _TITLED.match(role_text(content))
            if titled and "%s" not in titled["text"] and "{" not in titled["text"]:
                return escape(titled["text"])
            raise ValueError(
                f"{{{name}}}`{content}` needs the book's cross-references: give it an "
                "explicit title, or write it out in tools/kit_lessons.py"
            )
        if name == "seed":
            _, text = seed_quotes.split_role_text(role_text(content))
            return code_span(text)
        if name == "seedtr":
            _, text = seed_quotes.split_role_text(role_text(content))
            return f"“{escape(text)}” (translated)"
        raise ValueError(
            f"the role {{{name}}} does not render in JupyterLab: write it out in "
            "tools/kit_lessons.py"
        )

    # ------------------------------------------------------------------ glue
    def glue(self, name: str, content: str, page: _Page) -> str:
        # myst-nb's syntax: [path::]key, and {glue:text} a format after the last ":".
        doc, _, key = content.rpartition("::")
        fmt = ""
        if name == "glue:text":
            key, _, fmt = key.rpartition(":") if ":" in key else (key, "", "s")
        target = (
            PurePosixPath(os.path.normpath(page.rel.parent / doc)).with_suffix(".ipynb")
            if doc
            else page.rel
        )
        outputs = self.glue_data(target, page.source if not doc else None)
        if key not in outputs:
            raise KitLessonError(
                f"{page.rel}: the glued value {key!r} is not in {target}'s executed "
                f"outputs (it glues {', '.join(sorted(outputs)) or 'nothing'}): run "
                "`make book` after changing the notebook"
            )
        data = outputs[key]["data"]
        if name == "glue:text":
            from myst_nb.core.variables import format_plain_text

            return escape(format_plain_text(data["text/plain"], fmt))
        if name == "glue:md" or "text/markdown" in data:
            if "text/markdown" not in data:
                raise KitLessonError(f"{page.rel}: {key!r} has no text/markdown")
            return data["text/markdown"]
        if "text/plain" not in data:
            raise KitLessonError(
                f"{page.rel}: {key!r} is not text ({', '.join(data)}): use "
                "{glue:text} or write it out in tools/kit_lessons.py"
            )
        plain = data["text/plain"]
        try:
            value = ast.literal_eval(plain)
        except (SyntaxError, ValueError):
            value = plain
        return escape(str(value))

    def glue_data(self, rel: PurePosixPath, source: str | None = None) -> dict:
        """Every value ``rel`` glues, from the execution the book shows."""
        if rel not in self._glue:
            path = self.root / rel
            if source is None:
                if not path.is_file():
                    raise KitLessonError(f"{rel} does not exist (glued from)")
                source = path.read_text(encoding="utf-8")
            self._glue[rel] = self._executed_glue(rel, source)
        return self._glue[rel]

    def _executed_glue(self, rel: PurePosixPath, source: str) -> dict:
        if not self.cache_path.is_dir():
            raise KitLessonError(
                f"{rel} glues values from its execution, and there is no execution "
                f"cache ({self.cache_path}): build the book first (`make book`)"
            )
        from jupyter_cache import get_cache
        from myst_nb.ext.glue import extract_glue_data_cell

        nb = nbformat.reads(source, as_version=4)
        try:
            _, executed = get_cache(str(self.cache_path)).merge_match_into_notebook(nb)
        except KeyError:
            raise KitLessonError(
                f"{rel} was not executed for its current code (no match in "
                f"{self.cache_path}), so its glued values are unknown: run `make book`"
            ) from None
        found = {}
        for cell in executed.cells:
            if cell.cell_type == "code":
                found.update(extract_glue_data_cell(cell))
        return found

    # ------------------------------------------------------------------ citations
    @cached_property
    def _bibliography(self):
        import pybtex.database
        import pybtex.plugin
        import sphinxcontrib.bibtex.plugin as bibtex_plugins

        config = yaml.safe_load((self.root / "_config.yml").read_text(encoding="utf-8"))
        sphinx = (config.get("sphinx") or {}).get("config") or {}
        entries = {}
        for name in config.get("bibtex_bibfiles") or sphinx.get("bibtex_bibfiles", []):
            entries.update(pybtex.database.parse_file(self.root / name).entries)
        style = pybtex.plugin.find_plugin(
            "pybtex.style.formatting", sphinx.get("bibtex_default_style", "alpha")
        )()
        formatted = {
            entry.key: entry for entry in style.format_entries(entries.values())
        }
        reference_style = bibtex_plugins.find_plugin(
            "sphinxcontrib.bibtex.style.referencing",
            sphinx.get("bibtex_reference_style", "label"),
        )()
        return entries, formatted, reference_style

    def cite(self, name: str, content: str, page: _Page) -> str:
        """The citation as the book's sphinxcontrib-bibtex writes it, as plain text."""
        import types

        import pybtex_docutils
        from sphinxcontrib.bibtex.style.referencing import format_references
        from sphinxcontrib.bibtex.style.template import SphinxReferenceInfo

        entries, formatted, style = self._bibliography
        role = name.partition(":")[2] or "p"
        if role not in style.role_names():
            raise ValueError(f"{{{name}}} is not a citation role of the book's style")
        # The reference node wants a builder to link with; only its text is kept.
        builder = types.SimpleNamespace(name="html", get_relative_uri=lambda *_: "")
        references = []
        for item in content.split(","):
            match = _CITE_KEY.match(item.strip())
            key = match["key"].strip() if match else item.strip()
            if key not in entries:
                raise ValueError(f"{{{name}}}`{content}`: no entry {key!r} in the .bib")
            if key not in page.cited:
                page.cited.append(key)
            info = SphinxReferenceInfo(
                builder, "", "", key, None, match["pre"] or "", match["post"] or ""
            )
            references.append((entries[key], formatted[key], info))
        nodes = format_references(style, role, references).render(
            pybtex_docutils.Backend()
        )
        return "".join(node.astext() for node in nodes)

    def references(self, keys: list[str]) -> str:
        """The "References" cell: each work the notebook cites, as the book lists it."""
        _, formatted, _ = self._bibliography
        lines = ["## References", ""]
        for key in keys:
            label = self.cite("cite:p", key, _Page(PurePosixPath("book/x.ipynb"), ""))
            text = formatted[key].text.render_as("text").replace("\\url ", "")
            lines.append(f"- {escape(label)} {escape(text)}")
        return "\n".join(lines)

    # ------------------------------------------------------------------ links
    def doc(self, content: str, page: _Page) -> str:
        titled = _TITLED.match(content)
        text, target = (titled["text"], titled["target"]) if titled else ("", content)
        target = target.strip()
        docname = (
            PurePosixPath(target.lstrip("/"))
            if target.startswith("/")
            else PurePosixPath(os.path.normpath(page.rel.parent / target))
        )
        notebook = self.root / docname.with_suffix(".ipynb")
        if notebook.is_file():
            title = text or _title(notebook)
            return f"[{escape(title)}]({page.relative(docname.with_suffix('.ipynb'))})"
        markdown = self.root / docname.with_suffix(".md")
        if not markdown.is_file():
            raise ValueError(f"{{doc}}`{content}`: no page {docname}")
        # A page the kit does not ship (the book's .md pages): named, in words.
        return f"“{escape(text or _title(markdown))}” (a page of the book)"

    def section(self, content: str, page: _Page) -> str:
        section = pitfall_refs.resolve_section(content)
        # The heading's id in jupyterlab-myst and in the book, as the diagnoses link it.
        anchor = heading_anchor(f"{section.number} {section.title}")
        target = page.relative(PurePosixPath(section.doc).with_suffix(".ipynb"))
        return f"[{escape(section.label)}]({target}#{anchor})"

    # ------------------------------------------------------------------ seeds
    def seed_quote(self, indent: str, seed_id: str, body: list[str], page: _Page):
        if seed_id not in seed_quotes.SEED_IDS:
            raise ValueError(f"seed-quote names a seed, one of {seed_quotes.SEED_IDS}")
        options, content = _split_options(body)
        language = next(
            (
                m["value"]
                for m in map(_OPTION.match, options)
                if m and m["key"] == "code"
            ),
            None,
        )
        strip = len(indent)
        text = "\n".join(
            line[strip:] if line[:strip].isspace() else line for line in content
        )
        link = page.relative(PurePosixPath(f"book/seeds/{seed_id}.txt"))
        if language is not None:
            fence = "`" * max(3, 1 + max(map(len, _TICKS.findall(text)), default=0))
            block = f"{fence}{language or 'text'}\n{text}\n{fence}"
        else:
            paragraphs = [p.strip() for p in text.split("\n\n") if p.strip()]
            block = "\n>\n".join(
                "\n".join("> " + line for line in p.split("\n")) for p in paragraphs
            )
        attribution = f"— [seed {seed_id}]({link}), verbatim"
        return "\n".join(
            indent + line if line else line
            for line in f"{block}\n\n{attribution}".split("\n")
        )


def _guard_line_start(text: str) -> str:
    """A value that starts a line must not start a list, a heading or a quotation."""
    text = re.sub(r"^(\d+)([.)])", r"\1\\\2", text)
    return re.sub(r"^([-+*#>=])", r"\\\1", text)


def _closes(line: str, fence: str) -> bool:
    stripped = line.strip()
    return len(stripped) >= len(fence) and set(stripped) == {fence[0]}


def _closing_ticks(text: str, start: int, count: int) -> int | None:
    """Where the run of ``count`` backticks closing a span opened at ``start`` is."""
    for run in _TICKS.finditer(text, start):
        if len(run.group()) == count:
            return run.start()
    return None


def _split_options(body: list[str]) -> tuple[list[str], list[str]]:
    """A directive's ``:key: value`` (or ``---`` YAML) lines, then its content."""
    if body and body[0].strip() == "---":
        end = next((i for i in range(1, len(body)) if body[i].strip() == "---"), None)
        if end is not None:
            return body[: end + 1], body[end + 1 :]
    count = 0
    while count < len(body) and _OPTION.match(body[count].strip()):
        count += 1
    return body[:count], body[count:]


def _title(path: Path) -> str:
    """A page's title: its first level-1 heading."""
    if path.suffix == ".ipynb":
        nb = nbformat.read(path, as_version=4)
        text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    else:
        text = path.read_text(encoding="utf-8")
    match = re.search(r"^# (.+?)\s*$", text, re.MULTILINE)
    return match.group(1) if match else path.stem


def _book_only(cell) -> bool:
    """A cell the book hides whole (``remove-cell``): in the lessons, their glue."""
    tags = cell.metadata.get("tags", [])
    return "remove-cell" in tags or "remove_cell" in tags


def _fold(cell) -> bool:
    """The book's hide-input (its folded code) as JupyterLab's collapsed input."""
    tags = set(cell.metadata.get("tags", []))
    if cell.cell_type != "code" or not tags & {"hide-input", "hide-cell"}:
        return False
    cell.metadata.setdefault("jupyter", {})["source_hidden"] = True
    return True
