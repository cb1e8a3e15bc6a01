"""Matplotlib helpers the lessons use to draw attention maps and measurements.

The lessons import these rather than teach them. Every function builds a
:class:`matplotlib.figure.Figure` directly (no ``pyplot`` state), so nothing is
drawn twice in a notebook and tests need not close windows. A figure returned as
the last expression of a notebook cell is displayed by Jupyter.

Shape letters: H heads, Sq query length, Sk key length.
"""

from __future__ import annotations

import io
from typing import Sequence

import matplotlib
import torch
from matplotlib.figure import Figure

# The book's size rules for figures, in one place (tests/book/test_browser_figures.py
# checks the built pages against them). The text column is 672 px wide in a
# 1280 px window; a figure no wider than that is shown at its natural size, so a
# label of SMALLEST_FONT_PT points is SMALLEST_FONT_PT * FIGURE_DPI / 72 px tall on
# the page: about 14.6 px, no smaller than the body's small print.
FIGURE_DPI = 100
COLUMN_PX = 650
COLUMN_INCHES = COLUMN_PX / FIGURE_DPI
SMALLEST_FONT_PT = 10.5
BOOK_STYLE = {
    "figure.dpi": FIGURE_DPI,
    "savefig.dpi": FIGURE_DPI,
    "font.size": 11.0,
    "axes.titlesize": 12.0,
    "axes.labelsize": 11.0,
    "xtick.labelsize": SMALLEST_FONT_PT,
    "ytick.labelsize": SMALLEST_FONT_PT,
    "legend.fontsize": SMALLEST_FONT_PT,
    "legend.title_fontsize": SMALLEST_FONT_PT,
    "figure.titlesize": 12.0,
    "figure.labelsize": 11.0,
}


def use_book_style() -> None:
    """Apply :data:`BOOK_STYLE` to every later figure (a lesson's set-up cell calls it).

    A figure for the column is ``COLUMN_INCHES`` wide (or less), with at most two
    panels a row and its legends outside the curves.

    Every lesson that draws a figure uses it, first:

    Used in §1.11 'Explore: one head's attention map' (book/ch01_shapes/heads).
    """
    matplotlib.rcParams.update(BOOK_STYLE)


def _as_maps(weights) -> "torch.Tensor":
    """Attention weights as a float CPU tensor [H, Sq, Sk] (a map [Sq, Sk]: H = 1)."""
    w = torch.as_tensor(weights).detach().to("cpu", torch.float32)
    if w.dim() == 2:
        w = w[None]
    if w.dim() != 3:
        raise ValueError(
            f"weights must have shape [H, Sq, Sk] or [Sq, Sk], got {tuple(w.shape)}"
        )
    return w


def _check_tokens(tokens, n: int, name: str) -> None:
    if tokens is not None and len(tokens) != n:
        raise ValueError(
            f"{name} must have one label per position ({n}), got {len(tokens)}"
        )


def _draw_map(ax, w: torch.Tensor, q_tokens, k_tokens, vmax: float, title: str):
    """Draw one [Sq, Sk] map on ``ax``: queries down the rows, keys along the
    columns."""
    image = ax.imshow(w.numpy(), cmap="viridis", vmin=0.0, vmax=vmax, aspect="equal")
    sq, sk = w.shape
    ax.set_xticks(range(sk))
    ax.set_yticks(range(sq))
    labels = [str(t) for t in (k_tokens if k_tokens is not None else range(sk))]
    # Characters and small numbers read best upright; words are turned to fit.
    ax.set_xticklabels(labels, rotation=0 if max(map(len, labels)) <= 2 else 90)
    ax.set_yticklabels(q_tokens if q_tokens is not None else range(sq))
    ax.set_xlabel("key")
    ax.set_ylabel("query")
    ax.set_title(title)
    return image


def attention_heatmaps(
    weights,
    tokens: Sequence[str] | None = None,
    *,
    key_tokens: Sequence[str] | None = None,
    title: str | None = None,
    max_cols: int = 2,
) -> Figure:
    """One heatmap per head, on a shared colour scale.

    Used in §1.11 'Explore: one head's attention map' (book/ch01_shapes/heads).
    The capstone's "Where the decoder looks" uses it too.

    Args:
        weights: attention weights of one batch entry, [H, Sq, Sk] (or one map
            [Sq, Sk]); row i is query i's distribution over the keys.
        tokens: labels of the Sq query positions (and of the keys too, unless
            ``key_tokens`` is given).
        key_tokens: labels of the Sk key positions, for cross-attention.
        title: the figure's title.
        max_cols: heads per row of panels (two fit the book's column).

    Returns:
        A Figure with H image axes (one ``AxesImage`` each) and one colour bar.

    Examples::

        >>> fig = attention_heatmaps(torch.full((3, 4, 4), 0.25), list("abcd"))
        >>> len(fig.axes)  # three heads and a colour bar
        4
    """
    w = _as_maps(weights)
    n_heads, sq, sk = w.shape
    key_tokens = tokens if key_tokens is None else key_tokens
    _check_tokens(tokens, sq, "tokens")
    _check_tokens(key_tokens, sk, "key_tokens")
    cols = min(n_heads, max_cols)
    rows = -(-n_heads // cols)
    use_book_style()
    # Panels share the column's width; one panel alone keeps a square's width.
    width = min(COLUMN_INCHES, 3.4 * cols + 0.9)
    panel = (width - 0.9) / cols
    height = panel * rows * min(1.0, max(sq / sk, 0.5)) + 0.7 * rows + 0.5
    fig = Figure(figsize=(width, height), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False)
    vmax = float(w.max()) or 1.0
    image = None
    for h, ax in enumerate(axes.flat):
        if h < n_heads:
            image = _draw_map(ax, w[h], tokens, key_tokens, vmax, f"head {h}")
        else:
            fig.delaxes(ax)
    fig.colorbar(
        image,
        ax=[ax for ax in axes.flat[:n_heads]],
        label="attention weight",
        shrink=0.8,
    )
    if title:
        fig.suptitle(title)
    return fig


def attention_png(
    weights,
    tokens: Sequence[str] | None = None,
    *,
    key_tokens: Sequence[str] | None = None,
    title: str = "",
    vmax: float | None = None,
    dpi: int = 80,
) -> bytes:
    """PNG bytes of a single attention map [Sq, Sk], for an ``ipywidgets.Image``.

    ``vmax`` fixes the top of the colour scale, so that maps of different heads compare.

    Used in §1.11 'Explore: one head's attention map' (book/ch01_shapes/heads).
    (Through :func:`tformer_ref.widgets.head_explorer`.)

    Examples::

        >>> attention_png(torch.eye(3), list("abc"))[:4]
        b'\x89PNG'
    """
    w = _as_maps(weights)
    if w.size(0) != 1:
        raise ValueError(
            f"attention_png draws one map [Sq, Sk], got {w.size(0)} of them"
        )
    w = w[0]
    key_tokens = tokens if key_tokens is None else key_tokens
    _check_tokens(tokens, w.size(0), "tokens")
    _check_tokens(key_tokens, w.size(1), "key_tokens")
    fig = Figure(figsize=(3.6, 3.4), layout="constrained")
    ax = fig.subplots()
    top = float(w.max()) if vmax is None else vmax
    image = _draw_map(ax, w, tokens, key_tokens, top, title)
    fig.colorbar(image, ax=ax, shrink=0.8)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()


def heads_cost_figure(
    heads: Sequence[int],
    ms_per_iter: Sequence[float],
    score_mib: Sequence[float],
    *,
    title: str = "Multi-head attention: cost vs number of heads",
) -> Figure:
    """Two panels against the number of heads: time per iteration, and size of the score
    tensor.

    Used in 'Heads, memory and speed, re-measured' (book/ch01_shapes/timing).

    Args:
        heads: the numbers of heads measured, e.g. (1, 8, 16).
        ms_per_iter: milliseconds per forward+backward iteration, one per entry of
            ``heads``.
        score_mib: size in MiB (2**20 bytes) of the attention-score tensor [B, H, S, S],
            one per entry of ``heads``.

    Returns:
        A Figure with two axes, each holding one line.

    Examples::

        >>> fig = heads_cost_figure([1, 8, 16], [2.0, 2.5, 3.1], [0.5, 4.0, 8.0])
        >>> [len(ax.lines) for ax in fig.axes]
        [1, 1]
    """
    if not len(heads) == len(ms_per_iter) == len(score_mib):
        raise ValueError(
            f"heads, ms_per_iter and score_mib must have the same length, "
            f"got {len(heads)}, {len(ms_per_iter)}, {len(score_mib)}"
        )
    use_book_style()
    fig = Figure(figsize=(COLUMN_INCHES, 3.4), layout="constrained")
    ax_time, ax_mem = fig.subplots(1, 2)
    ax_time.plot(heads, ms_per_iter, "o-")
    ax_time.set_xlabel("number of heads H")
    ax_time.set_ylabel("ms per forward+backward")
    ax_time.set_ylim(bottom=0)
    ax_time.set_title("time per iteration")
    ax_mem.plot(heads, score_mib, "s-", color="tab:red")
    ax_mem.set_xlabel("number of heads H")
    ax_mem.set_ylabel("MiB")
    ax_mem.set_ylim(bottom=0)
    ax_mem.set_title("scores [B, H, S, S]")
    for ax in (ax_time, ax_mem):
        ax.set_xticks(list(heads))
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    return fig


# Importing this module is how a lesson takes the book's style (the set-up cell imports
# COLUMN_INCHES from here); the helpers above apply it again, in case rcParams changed.
use_book_style()
