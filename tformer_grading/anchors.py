"""The anchor a lesson heading gets, the same in JupyterLab and in the book.

JupyterLab renders the lessons with jupyterlab-myst, whose heading ids follow mystmd:
quotes dropped, lower case, every other character outside ``[a-z0-9-]`` a dash, runs
of dashes one, ``id-`` before a leading digit ("5.7 The seed’s model, counted" ->
``id-5-7-the-seeds-model-counted``). The book's build uses this function as MyST's
``heading_slug_func`` (``_config.yml``), so a link ``lesson.ipynb#<anchor>`` in an
exercise or a check's diagnosis opens the section in both
(tests/book/test_section_links.py).

>>> heading_anchor("5.5 Embeddings scaled by sqrt(d_model)")
'id-5-5-embeddings-scaled-by-sqrt-d-model'
>>> heading_anchor("What “extrapolates” means")
'what-extrapolates-means'
"""

from __future__ import annotations

import re


def heading_anchor(text: str) -> str:
    """The id of a heading whose text is ``text``."""
    label = re.sub(r"['‘’\"“”]+", "", re.sub(r"\s+", " ", text)).strip().lower()
    anchor = re.sub(r"[^a-z0-9-]", "-", label)
    anchor = re.sub(r"^([0-9-])", r"id-\1", anchor)
    return re.sub(r"-{2,}", "-", anchor).strip("-")
