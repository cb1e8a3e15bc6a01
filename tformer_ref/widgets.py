"""ipywidgets helpers the lessons use to explore attention interactively.

The explorers are built so that they also work in the static HTML book, where no
Python kernel is running: every picture is rendered in advance and the controls
are linked to the pictures in the browser (``jslink``), so the saved widget state
is enough to move the slider and see the other heads.

Shape letters: H heads, Sq query length, Sk key length.
"""

from __future__ import annotations

from typing import Sequence

import ipywidgets as widgets

from .plotting import _as_maps, attention_png


class HeadExplorer(widgets.VBox):
    """A slider that picks a head, above that head's attention map.

    Used in §1.12 'Explore: one head's attention map' (book/ch01_shapes).

    Attributes:
        slider: ``IntSlider`` over 0..H-1.
        stack: ``Stack`` of H ``Image`` widgets; ``stack.selected_index`` is the head
            shown.
        images: the H ``Image`` widgets, ``images[h]`` showing head h's [Sq, Sk] map as
            PNG.
        link: the browser-side link from ``slider.value`` to ``stack.selected_index``.

    Examples::

        >>> explorer = HeadExplorer([[[1.0]], [[1.0]], [[1.0]]], ["a"])  # H = 3, S = 1
        >>> explorer.slider.max, len(explorer.images)
        (2, 3)
    """

    def __init__(
        self,
        weights,
        tokens: Sequence[str] | None = None,
        *,
        key_tokens: Sequence[str] | None = None,
        description: str = "head",
    ):
        """Args:
        weights: attention weights of one batch entry, [H, Sq, Sk].
        tokens: labels of the query positions (and of the keys, unless
            ``key_tokens`` is given).
        key_tokens: labels of the key positions, for cross-attention.
        """
        w = _as_maps(weights)
        n_heads = w.size(0)
        # One colour scale for all heads, so that a brighter map really means sharper
        # attention.
        vmax = float(w.max()) or 1.0
        pngs = [
            attention_png(
                w[h], tokens, key_tokens=key_tokens, title=f"head {h}", vmax=vmax
            )
            for h in range(n_heads)
        ]
        self.images = [widgets.Image(value=png, format="png") for png in pngs]
        self.slider = widgets.IntSlider(
            value=0,
            min=0,
            max=n_heads - 1,
            step=1,
            description=description,
            continuous_update=True,
        )
        self.stack = widgets.Stack(self.images, selected_index=0)
        # jslink runs in the browser: the explorer keeps working in the book, without a
        # kernel.
        self.link = widgets.jslink(
            (self.slider, "value"), (self.stack, "selected_index")
        )
        # The same link on the Python side, so that code moving the slider also sees the
        # right head.
        self.slider.observe(self._on_slider, names="value")
        super().__init__([self.slider, self.stack])

    def _on_slider(self, change) -> None:
        self.stack.selected_index = change["new"]

    @property
    def head(self) -> int:
        """The head whose map is shown."""
        return self.stack.selected_index

    def show_head(self, head: int) -> None:
        """Select ``head`` from Python (moves the slider and the picture together)."""
        if not 0 <= head < len(self.images):
            raise ValueError(f"head must be in 0..{len(self.images) - 1}, got {head}")
        self.slider.value = head


def head_explorer(
    weights, tokens: Sequence[str] | None = None, **kwargs
) -> HeadExplorer:
    """An interactive view of one batch entry's attention weights [H, Sq, Sk]: pick a
    head, see its map.

    Display the returned widget as the last expression of a notebook cell.

    Used in §1.12 'Explore: one head's attention map' (book/ch01_shapes).

    Examples::

        >>> weights = [[[0.5, 0.5], [0.5, 0.5]], [[1.0, 0.0], [0.0, 1.0]]]  # [2, 2, 2]
        >>> explorer = head_explorer(weights, ["a", "b"])
        >>> explorer.show_head(1)
        >>> explorer.head, len(explorer.images)
        (1, 2)
    """
    return HeadExplorer(weights, tokens, **kwargs)
