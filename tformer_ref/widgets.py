"""ipywidgets helpers the lessons use to explore attention interactively.

The explorers are built so that they also work in the static HTML book, where no
Python kernel is running: every picture is rendered in advance and the controls
are linked to the pictures in the browser (``jslink``), so the saved widget state
is enough to move the controls and see the other pictures.

Shape letters: H heads, Sq query length, Sk key length.
"""

from __future__ import annotations

import io
from typing import Sequence

import ipywidgets as widgets

from .plotting import _as_maps, attention_png


class HeadExplorer(widgets.VBox):
    """A slider that picks a head, above that head's attention map.

    Used in §1.11 'Explore: one head's attention map' (book/ch01_shapes/heads).

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

    Used in §1.11 'Explore: one head's attention map' (book/ch01_shapes/heads).

    Examples::

        >>> weights = [[[0.5, 0.5], [0.5, 0.5]], [[1.0, 0.0], [0.0, 1.0]]]  # [2, 2, 2]
        >>> explorer = head_explorer(weights, ["a", "b"])
        >>> explorer.show_head(1)
        >>> explorer.head, len(explorer.images)
        (1, 2)
    """
    return HeadExplorer(weights, tokens, **kwargs)


def figure_png(fig, *, dpi: int = 80) -> bytes:
    """PNG bytes of a matplotlib ``Figure``, for an ``ipywidgets.Image``.

    The mask explorer draws its pictures with it, for :class:`PictureGrid`.

    Used in §3.7 'Mask explorer' (book/ch03_masks).
    """
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()


def _check_pictures(labels: Sequence[str], pngs: Sequence[bytes], what: str) -> None:
    if len(labels) == 0:
        raise ValueError(f"{what}: at least one state is needed, got none")
    if len(pngs) != len(labels):
        raise ValueError(
            f"{what}: one picture per state is needed, got {len(pngs)} pictures "
            f"for {len(labels)} labels"
        )
    if len(set(labels)) != len(labels):
        raise ValueError(f"{what}: the labels must differ, got {list(labels)}")


def _image_stack(pngs: Sequence[bytes], index: int) -> widgets.Stack:
    return widgets.Stack(
        [widgets.Image(value=png, format="png") for png in pngs],
        selected_index=index,
    )


class PictureSlider(widgets.VBox):
    """A slider over named states, above the picture of the state it is on.

    Every picture is rendered in advance and the slider's ``index`` is linked to a
    ``Stack`` of ``Image`` widgets in the browser (``jslink``), so the slider works
    in the static book, without a kernel, as well as in JupyterLab.

    It shows the factor on the scores, and the attention it gives.

    Used in §2.4 'Entropy: how peaked is attention' (book/ch02_attention).

    Attributes:
        slider: ``SelectionSlider`` whose options are the labels.
        stack: ``Stack`` of the ``Image`` widgets; ``stack.selected_index`` is the
            state shown.
        images: the ``Image`` widgets, ``images[i]`` showing state i.
        link: the browser-side link from ``slider.index`` to
            ``stack.selected_index``.
    """

    def __init__(
        self,
        labels: Sequence[str],
        pngs: Sequence[bytes],
        *,
        description: str = "",
        index: int = 0,
    ):
        """Args:
        labels: the states' names, shown as the slider's readout.
        pngs: one PNG per state, in the order of ``labels``.
        index: the state shown first.
        """
        labels = list(labels)
        _check_pictures(labels, pngs, "PictureSlider")
        if not 0 <= index < len(labels):
            raise ValueError(f"index must be in 0..{len(labels) - 1}, got {index}")
        self.slider = widgets.SelectionSlider(
            options=labels, index=index, description=description
        )
        self.stack = _image_stack(pngs, index)
        self.images = list(self.stack.children)
        # In the browser: the book has no kernel to run a callback.
        self.link = widgets.jslink(
            (self.slider, "index"), (self.stack, "selected_index")
        )
        # In Python: code that moves the slider sees the right picture too.
        widgets.dlink((self.slider, "index"), (self.stack, "selected_index"))
        super().__init__([self.slider, self.stack])


class PictureGrid(widgets.VBox):
    """Two controls over a grid of pictures: buttons pick a row, a slider a column.

    The buttons' ``index`` selects one of the outer ``Stack``'s children, each an
    inner ``Stack`` of ``Image`` widgets whose ``selected_index`` follows the
    slider's ``index``. All links run in the browser (``jslink``), so the grid works
    in the static book, without a kernel, as well as in JupyterLab.

    It shows padding and causal masks, and the weights they give.

    Used in §3.7 'Mask explorer' (book/ch03_masks).

    Attributes:
        buttons: ``ToggleButtons`` over the row labels.
        slider: ``SelectionSlider`` over the column labels.
        stack: the outer ``Stack``, one inner ``Stack`` per row.
        rows: the inner stacks; ``rows[r].children[c]`` shows state (r, c).
        links: the browser-side links: ``buttons`` to ``stack``, then ``slider`` to
            each inner stack.
    """

    def __init__(
        self,
        row_labels: Sequence[str],
        column_labels: Sequence[str],
        pngs: Sequence[Sequence[bytes]],
        *,
        row_description: str = "",
        column_description: str = "",
        row: int = 0,
        column: int = 0,
    ):
        """Args:
        row_labels, column_labels: the states' names along each control.
        pngs: ``pngs[r][c]``, the picture of row r and column c.
        row, column: the state shown first.
        """
        row_labels, column_labels = list(row_labels), list(column_labels)
        _check_pictures(row_labels, pngs, "PictureGrid rows")
        for r, row_pngs in enumerate(pngs):
            _check_pictures(column_labels, row_pngs, f"PictureGrid row {r}")
        if not (0 <= row < len(row_labels) and 0 <= column < len(column_labels)):
            raise ValueError(
                f"(row, column) must be in (0..{len(row_labels) - 1}, "
                f"0..{len(column_labels) - 1}), got {(row, column)}"
            )
        self.buttons = widgets.ToggleButtons(
            options=row_labels, index=row, description=row_description
        )
        self.slider = widgets.SelectionSlider(
            options=column_labels, index=column, description=column_description
        )
        self.rows = [_image_stack(row_pngs, column) for row_pngs in pngs]
        self.stack = widgets.Stack(self.rows, selected_index=row)
        self.links = [
            widgets.jslink((self.buttons, "index"), (self.stack, "selected_index"))
        ] + [
            widgets.jslink((self.slider, "index"), (inner, "selected_index"))
            for inner in self.rows
        ]
        widgets.dlink((self.buttons, "index"), (self.stack, "selected_index"))
        for inner in self.rows:
            widgets.dlink((self.slider, "index"), (inner, "selected_index"))
        super().__init__([self.buttons, self.slider, self.stack])

    @property
    def state(self) -> tuple[int, int]:
        """(row, column) of the picture shown."""
        return self.stack.selected_index, self.rows[0].selected_index
