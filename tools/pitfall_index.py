"""Sphinx extension: the ``{pitfall-index}`` directive, a table of every diagnosis the checks can name,
and the ``{section}`` and ``{check}`` roles of the hand-written pitfall tables (resolved by
``tools/pitfall_refs.py``: a reference to a section or check that does not exist is an error).

It reads the ``Diagnosis`` objects (``Pitfall`` among them) of every ``tformer_grading.checks.chNN`` module, so a new chapter's
checks appear in the book's pitfall index without any edit here. Each row gives the diagnosis,
the lesson section that explains it (a link when that lesson is in the book) and the exercise.
"""

from __future__ import annotations


from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective, SphinxRole

import pitfall_refs
from pitfall_refs import assignment_of, check_modules, module_diagnoses


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


class PitfallIndex(SphinxDirective):
    has_content = False

    def run(self):
        # Re-read this page whenever the checks may have changed (see _always_outdated).
        if not hasattr(self.env, "tformer_pitfall_docs"):
            self.env.tformer_pitfall_docs = set()
        self.env.tformer_pitfall_docs.add(self.env.docname)
        docs = self.env.found_docs
        here = self.env.docname.rsplit("/", 1)[0]
        rows = [
            "| chapter | diagnosis (what the check says) | explained in | exercise |",
            "|---|---|---|---|",
        ]
        for module, pitfall in collect_pitfalls():
            section = pitfall.section
            assignment = assignment_of(module) or section.chapter
            lesson = f"book/{section.chapter}/lesson"
            exercise = f"book/{assignment}/exercise"
            where = f"§{section.number} {_cell(section.title)}"
            if lesson in docs:
                where = f"{{doc}}`§{section.number} {_cell(section.title)} <{lesson.removeprefix(here + '/')}>`"
            ex = assignment
            if exercise in docs:
                ex = f"{{doc}}`{assignment} <{exercise.removeprefix(here + '/')}>`"
            name = module.__name__.rsplit(".", 1)[1]
            rows.append(f"| {name} | {_cell(pitfall.name)} | {where} | {ex} |")
        if len(rows) == 2:
            return [nodes.paragraph(text="No check names a pitfall yet.")]
        container = nodes.container()
        self.state.nested_parse(
            StringList(rows, source=self.env.docname), self.content_offset, container
        )
        return container.children


def _always_outdated(app, env, added, changed, removed):
    # The table comes from Python modules, not from the page: rebuild it on every build (it is cheap).
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
    """``{check}`check_fn``` or ``{check}`check_fn: diagnosis```: the exercise and check."""

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


def setup(app):
    app.add_directive("pitfall-index", PitfallIndex)
    app.add_role("section", SectionRole())
    app.add_role("check", CheckRole())
    app.connect("env-get-outdated", _always_outdated)
    app.connect("env-merge-info", _merge)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
