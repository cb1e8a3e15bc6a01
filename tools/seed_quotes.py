"""Sphinx extension: quotations of the two seed write-ups, marked so a test can check
them.

The course critiques two beginners' write-ups, vendored in ``book/seeds/`` (``000.txt``,
``004.txt``). Whatever the book quotes from them is marked, and
``tests/book/test_seed_quotes.py`` asserts that each mark's text occurs in the seed it
names (whitespace-normalised). A translation is marked as a translation.

- ``{seed}`004:energy = energy.masked_fill(mask == 0, float("-1e20"))``` : an inline
  verbatim quote, shown as code.
- ``{seedtr}`004:the gradients exploded``` : an English translation of a seed's words,
  shown in quotation marks followed by "(translated)".
- A block quote, verbatim::

      ```{seed-quote} 004
      :code: python
      def forward(self, x):
          ...
      ```

  ``:code: LANG`` shows it as a code block; without it, as a block quotation. Either way
  it is followed by "— seed 004, verbatim", linked to the seeds' page.
"""

from __future__ import annotations

import re
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.util.docutils import SphinxDirective, SphinxRole

SEEDS = Path(__file__).resolve().parent.parent / "book" / "seeds"
SEED_IDS = ("000", "004")
_ROLE_TEXT = re.compile(r"^(\d{3}):(.*)$", re.S)


def seed_text(seed_id: str) -> str:
    """The seed's whole text."""
    return (SEEDS / f"{seed_id}.txt").read_text(encoding="utf-8")


def normalise(text: str) -> str:
    """Whitespace collapsed to single spaces, ends stripped."""
    return " ".join(text.split())


def split_role_text(text: str) -> tuple[str, str]:
    """``"004:quoted text"`` -> ``("004", "quoted text")``; a clear error otherwise."""
    match = _ROLE_TEXT.match(text)
    if not match or match.group(1) not in SEED_IDS:
        raise ValueError(
            f"a seed quote reads 'NNN:text' with NNN one of {SEED_IDS}, got {text!r}"
        )
    return match.group(1), match.group(2)


def _seeds_page_ref(text: str) -> nodes.Node:
    """A link to the seeds' page (book/seeds/index), relative to the current page."""
    from sphinx.addnodes import pending_xref

    ref = pending_xref(
        "",
        refdomain="std",
        reftype="doc",
        reftarget="/book/seeds/index",
        refexplicit=True,
        refwarn=True,
    )
    ref += nodes.inline(text, text)
    return ref


class _SeedRole(SphinxRole):
    """A role whose text reads ``NNN:text``; a malformed one is reported where it
    stands."""

    def run(self):
        try:
            seed_id, text = split_role_text(self.text)
        except ValueError as error:
            message = self.inliner.reporter.error(str(error), line=self.lineno)
            return [self.inliner.problematic(self.rawtext, self.rawtext, message)], [
                message
            ]
        return self.nodes(seed_id, text), []


class SeedRole(_SeedRole):
    """``{seed}`NNN:text```: verbatim words of seed NNN, as inline code."""

    def nodes(self, seed_id, text):
        return [nodes.literal(text, text, classes=["seed-quote", f"seed-{seed_id}"])]


class SeedTranslationRole(_SeedRole):
    """``{seedtr}`NNN:text```: an English translation of seed NNN's words."""

    def nodes(self, seed_id, text):
        quoted = nodes.inline("", f"“{text}” ", classes=["seed-translation"])
        note = nodes.inline("", "(translated)", classes=["seed-translation-note"])
        return [quoted, note]


class SeedQuote(SphinxDirective):
    """A block quoted verbatim from a seed, with its attribution."""

    required_arguments = 1
    has_content = True
    option_spec = {"code": directives.unchanged}

    def run(self):
        seed_id = self.arguments[0]
        if seed_id not in SEED_IDS:
            raise self.error(
                f"seed-quote names a seed, one of {SEED_IDS}; got {seed_id!r}"
            )
        text = "\n".join(self.content)
        if "code" in self.options:
            body = nodes.literal_block(
                text, text, language=self.options["code"] or "none"
            )
        else:
            body = nodes.block_quote(
                "", *[nodes.paragraph(p, p) for p in text.split("\n\n") if p.strip()]
            )
        attribution = nodes.paragraph("", "— ", classes=["seed-attribution"])
        attribution += _seeds_page_ref(f"seed {seed_id}")
        attribution += nodes.Text(", verbatim")
        container = nodes.container("", body, attribution, classes=["seed-quote-block"])
        self.set_source_info(container)
        return [container]


def setup(app):
    app.add_role("seed", SeedRole())
    app.add_role("seedtr", SeedTranslationRole())
    app.add_directive("seed-quote", SeedQuote)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
