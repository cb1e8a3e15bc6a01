"""Sphinx extension: the ``{pitfall-index}`` directive, a chapter's table of every
diagnosis the checks can name, and the ``{section}`` and ``{check}`` roles of the
hand-written pitfall tables (resolved by ``tools/pitfall_refs.py``: a reference to a
section or check that does not exist is an error).

It reads the ``Diagnosis`` objects (``Pitfall`` among them) of every check module
(``pitfall_refs.index_rows``). Each row is one mistake of one chapter: the lesson
section that explains it, the name the checks give it and the graded checks that can
name it. ``tests/book/test_pitfall_tables.py`` checks that the page has a table for
every chapter.
"""

from __future__ import annotations


from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective, SphinxRole

import pitfall_refs
from pitfall_refs import check_modules, module_diagnoses


def collect_pitfalls():
    """[(module, Diagnosis)] for every check module, in course order, no duplicates."""
    found = []
    for module in check_modules():
        seen = set()
        for item in module_diagnoses(module):
            if (item.name, item.section) not in seen:
                seen.add((item.name, item.section))
                found.append((module, item))
    return found


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def index_table(chapter: str) -> list[str]:
    """The MyST table of ``chapter``'s mistakes: one row per mistake, its section
    written once above the mistakes it explains, the graded checks that can name it in
    the row. Sections and checks are ``{section}`` and ``{checks}`` references, so a
    diagnosis that points at a section or check that does not exist fails the build."""
    rows = pitfall_refs.index_rows().get(chapter)
    if not rows:
        raise pitfall_refs.UnresolvedReference(f"no check names a mistake of {chapter}")
    lines = [
        "| explained in | mistake (what the check says) | checks that may name it |",
        "|---|---|---|",
    ]
    previous = None
    for row in rows:
        where = ", ".join(f"{{section}}`{number}`" for number in row.sections)
        checks = f"{{checks}}`{', '.join(row.checks)}`" if row.checks else ""
        lines.append(
            f"| {where if where != previous else ''} | {_cell(row.name)} "
            f"| {checks or 'no graded check'} |"
        )
        previous = where
    return lines


class PitfallIndex(SphinxDirective):
    """``{pitfall-index} ch03_masks``: the table of a chapter's mistakes."""

    has_content = False
    required_arguments = 1

    def run(self):
        # Re-read this page whenever the checks may have changed (see _always_outdated).
        if not hasattr(self.env, "tformer_pitfall_docs"):
            self.env.tformer_pitfall_docs = set()
        self.env.tformer_pitfall_docs.add(self.env.docname)
        try:
            rows = index_table(self.arguments[0])
        except pitfall_refs.UnresolvedReference as error:
            raise self.error(str(error))
        container = nodes.container(classes=["pitfall-index"])
        self.state.nested_parse(
            StringList(rows, source=self.env.docname), self.content_offset, container
        )
        return container.children


def _always_outdated(app, env, added, changed, removed):
    # The table comes from Python modules, not from the page: rebuild it on every build
    # (it is cheap).
    return sorted(getattr(env, "tformer_pitfall_docs", set()) - set(removed))


def _merge(app, env, docnames, other):
    # Parallel reads: gather the pages that use the directive from every worker.
    env.tformer_pitfall_docs = getattr(env, "tformer_pitfall_docs", set()) | getattr(
        other, "tformer_pitfall_docs", set()
    )


def _doc_link(target: str, label: str, env) -> nodes.Node:
    from sphinx.addnodes import pending_xref

    ref = pending_xref(
        "",
        refdomain="std",
        reftype="doc",
        reftarget="/" + target,
        refexplicit=True,
        refwarn=True,
        refdoc=env.docname,
    )
    ref += nodes.inline(label, label)
    return ref


class _ReferenceRole(SphinxRole):
    def run(self):
        try:
            return self.nodes(), []
        except pitfall_refs.UnresolvedReference as error:
            message = self.inliner.reporter.error(str(error), line=self.lineno)
            return [self.inliner.problematic(self.rawtext, self.rawtext, message)], [
                message
            ]


class SectionRole(_ReferenceRole):
    """``{section}`3.5```: a link to the lesson section, with its title."""

    def nodes(self):
        section = pitfall_refs.resolve_section(self.text)
        return [_doc_link(section.doc, section.label, self.env)]


class CheckRole(_ReferenceRole):
    """``{check}`check_fn``` or ``{check}`check_fn: diagnosis```: the exercise and
    check."""

    def nodes(self):
        check = pitfall_refs.resolve_check(self.text)
        out = [
            _doc_link(check.doc, check.exercise_label, self.env),
            nodes.Text(": "),
            nodes.literal(check.function, check.function),
        ]
        if check.diagnosis:
            out.append(nodes.Text(f" names “{check.diagnosis}”"))
        return out


class ChecksRole(_ReferenceRole):
    """``{checks}`check_a, check_b```: each exercise once, then its checks."""

    def nodes(self):
        by_exercise = {}
        for text in self.text.split(","):
            check = pitfall_refs.resolve_check(text)
            by_exercise.setdefault((check.doc, check.exercise_label), []).append(check)
        out = []
        for (doc, label), checks in by_exercise.items():
            if out:
                out.append(nodes.Text("; "))
            out += [_doc_link(doc, label, self.env), nodes.Text(": ")]
            for i, check in enumerate(checks):
                if i:
                    out.append(nodes.Text(", "))
                out.append(nodes.literal(check.function, check.function))
        return out


def setup(app):
    app.add_directive("pitfall-index", PitfallIndex)
    app.add_role("section", SectionRole())
    app.add_role("check", CheckRole())
    app.add_role("checks", ChecksRole())
    app.connect("env-get-outdated", _always_outdated)
    app.connect("env-merge-info", _merge)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
