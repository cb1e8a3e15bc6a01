"""The picture of a wrong attention map: the learner's next to the right one.

:func:`draw_weights` and :func:`draw_mask` draw one map of one head, [Sq, Sk], twice
side by side, on one scale: the learner's on the left with its wrong cells marked
(:mod:`.cells`), the right one on the right. Keys a query may not attend are hatched
on both. The :class:`Picture` carries the PNG, a caption that says in words what is
marked, and alt text that lists the marked cells.

The figure follows the book's style (``tformer_ref.plotting``): as wide as the
notebook's column, labels no smaller than its small print. Drawing is quiet: no
warning and nothing on stderr (nbgrader would score the cell 0), no pyplot state and
no change to the learner's matplotlib settings.

>>> import torch
>>> right = torch.tensor([[1.0, 0.0], [0.5, 0.5]])
>>> mine = torch.tensor([[0.6, 0.4], [0.5, 0.5]])
>>> allowed = torch.tensor([[True, False], [True, True]])
>>> picture = draw_weights(mine, right, allowed, where="case 2 keys, batch 0, head 0")
>>> picture.png[:4]
b'\\x89PNG'
>>> print(picture.caption)
Your weights (left) and the right ones (right), case 2 keys, batch 0, head 0. \
Hatched: keys the mask forbids. ✕ 1 cell gives weight to a key the mask forbids. \
• 1 other cell differs from the right weight.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import html
import io
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..guard.integrity import seal
from .cells import MARKS, MapCells, mask_cells, weight_cells

#: The largest map drawn whole; a larger one is shown as a window this size around
#: its first marked cell, labelled with the true positions.
WINDOW = 16

#: How each mark is drawn and said: (marker, colour, sentence for one, for several).
#: Marker shapes differ as well as colours, so the marks read without colour.
_STYLE = {
    "attends_masked": ("X", "#d62728", "gives weight to a key the mask forbids"),
    "ignores_allowed": ("o", "#ff7f0e", "gives no weight to a key it may attend"),
    "not_finite": ("s", "#000000", "is NaN or infinite"),
    "differs": (".", "#e377c2", "differs from the right weight"),
}
_MASK_WORDS = {
    "attends_masked": "lets the query attend a key it must not",
    "ignores_allowed": "blocks a key the query may attend",
}
_INFLUENCE_WORDS = {
    "attends_masked": "shows a new token influenced by a position it must not see",
    "ignores_allowed": "shows a new token not influenced by a position it should see",
}
_SYMBOL = {
    "attends_masked": "✕",
    "ignores_allowed": "○",
    "not_finite": "■",
    "differs": "•",
}


@dataclass(frozen=True)
class Picture:
    """A picture: a ``caption`` (what it shows, in words), ``alt`` text (the same for a
    reader who cannot see it, with the cells), the ``cells`` it marks (None for a
    picture of curves), and its ``png`` bytes, which ``render`` makes when first asked
    for (what is marked and said is known before anything is drawn)."""

    render: Callable[[], bytes] = field(repr=False)
    caption: str
    alt: str
    cells: MapCells | None

    @functools.cached_property
    def png(self) -> bytes:
        return self.render()

    def bundle(self) -> tuple[dict, dict]:
        """(data, metadata) for IPython's display: a figure with its caption in HTML
        (JupyterLab, the feedback page), the PNG alone, and the caption as text."""
        data = base64.b64encode(self.png).decode("ascii")
        figure = (
            '<figure class="tformer-picture" style="margin: 0.5em 0">'
            f'<img src="data:image/png;base64,{data}" '
            f'alt="{html.escape(self.alt, quote=True)}" style="max-width: 100%">'
            f"<figcaption>{html.escape(self.caption)}</figcaption></figure>"
        )
        return (
            {"text/html": figure, "image/png": data, "text/plain": self.caption},
            {"image/png": {"alt": self.alt}},
        )


def draw_weights(
    got: torch.Tensor,
    want: torch.Tensor | None,
    allowed: torch.Tensor | None = None,
    *,
    where: str,
    atol: float = 1e-5,
    rtol: float = 1e-4,
) -> Picture:
    """The learner's weights ``got`` [Sq, Sk] next to the right ones ``want``;
    ``allowed`` [Sq, Sk] (True = may attend) when the exercise masks. ``where`` says
    which case, batch entry and head the map is. With no ``want`` (a check that never
    sees the right weights) the right panel shows where the mask lets weight go."""
    cells = weight_cells(got, want, allowed, atol, rtol)
    g = got.detach().double().cpu()
    shown = torch.nan_to_num(g, nan=0.0, posinf=1.0, neginf=0.0)
    if want is None:
        right = allowed.bool().cpu().expand_as(g).double()
        lines = [
            f"Your weights (left) and where the mask lets weight go (right), {where}."
        ]
        titles = ("your weights", "may attend")
    else:
        right = want.detach().double().cpu()
        lines = [f"Your weights (left) and the right ones (right), {where}."]
        titles = ("your weights", "right weights")
    # The scale of the larger panel: weights spread over many keys stay apart.
    top = max(float(right.max()), float(shown.max())) or 1.0
    if allowed is not None:
        lines.append("Hatched: keys the mask forbids.")
    lines += _mark_sentences(cells, _STYLE, g.numel())
    if cells.rows_off:
        sums = ", ".join(f"{cells.row_sums[i]:.3g}" for i in cells.rows_off[:6])
        rows = ", ".join(map(str, cells.rows_off[:6]))
        many = "s" if len(cells.rows_off) > 1 else ""
        lines.append(
            f"◀ Row{many} {rows} of yours sum{'' if many else 's'} to {sums}, not 1."
        )
    forbidden = None if allowed is None else ~allowed.bool().cpu().expand_as(g)
    png = functools.partial(
        _draw,
        (shown, right),
        forbidden,
        cells,
        top,
        titles,
        "attention weight",
        skip=g.numel(),
        right_is_mask=want is None,
    )
    return Picture(png, " ".join(lines), _alt(lines, cells, "weights"), cells)


def draw_mask(got: torch.Tensor, want: torch.Tensor, *, where: str) -> Picture:
    """The learner's mask ``got`` [Sq, Sk] (bool, True = may attend) next to the right
    one ``want``. ``where`` says which case, batch entry and head the map is."""
    lead = (
        f"Your mask (left) and the right one (right), {where}. Hatched: masked; "
        "the rest may attend."
    )
    return _keep_picture(got, want, lead, ("your mask", "right mask"), _MASK_WORDS)


def draw_influence(
    got: torch.Tensor, want: torch.Tensor, *, where: str, first: int = 0
) -> Picture:
    """Which positions each new token's output is influenced by, measured on the
    learner's code (``got`` [S, past + S] bool), next to those it should see
    (``want``); ``first`` is the position of the first new token."""
    lead = (
        f"The positions each new token is influenced by, measured on your code "
        f"(left), and those it should see (right), {where}. Hatched: not seen. A "
        "token always influences its own output, through the residual path."
    )
    return _keep_picture(
        got,
        want,
        lead,
        ("yours, measured", "right"),
        _INFLUENCE_WORDS,
        labels=("position", "new token at position", first),
    )


def _keep_picture(got, want, lead: str, titles, said: dict, labels=None) -> Picture:
    cells = mask_cells(got, want)
    words = {k: (*v[:2], said.get(k, v[2])) for k, v in _STYLE.items()}
    lines = [lead, *_mark_sentences(cells, words)]
    g, w = got.bool().cpu(), want.bool().cpu()
    png = functools.partial(
        _draw,
        (g.double(), w.double()),
        (~g, ~w),
        cells,
        1.0,
        titles,
        None,
        labels=labels,
    )
    return Picture(png, " ".join(lines), _alt(lines, cells, "mask"), cells)


def _mark_sentences(cells: MapCells, style: dict, size: int = 0) -> list[str]:
    """A sentence per kind of mark; ``size`` the map's number of cells (a kind that
    covers them all is said so, and not drawn: :func:`_everywhere`)."""
    said = []
    others = any(cells.marked[name] for name in MARKS if name != "differs")
    for name, found in cells.marked.items():
        if not found:
            continue
        if _everywhere(cells, name, size):
            said.append(f"Every cell {style[name][2]}.")
            continue
        n = len(found)
        noun = "cell" if n == 1 else "cells"
        verb = style[name][2]
        if n > 1:
            verb = verb.replace("gives ", "give ").replace("differs", "differ")
            verb = verb.replace("lets ", "let ").replace("blocks ", "block ")
            verb = verb.replace("is NaN", "are NaN").replace("shows ", "show ")
        other = " other" if name == "differs" and others else ""
        said.append(f"{_SYMBOL[name]} {n}{other} {noun} {verb}.")
    return said


def _everywhere(cells: MapCells, name: str, size: int) -> bool:
    """Mark ``name`` is on every cell of a map of ``size`` cells: a mark everywhere
    hides what it marks, so it is said, not drawn."""
    return name == "differs" and size > 0 and len(cells.marked[name]) == size


def _alt(lines: list[str], cells: MapCells, what: str) -> str:
    """The caption, then the marked cells as (query, key), at most eight a mark."""
    listed = []
    for name, found in cells.marked.items():
        if found:
            shown = ", ".join(f"(query {i}, key {j})" for i, j in found[:8])
            more = f" and {len(found) - 8} more" if len(found) > 8 else ""
            listed.append(f"{_SYMBOL[name]} at {shown}{more}.")
    return f"Two {what} maps side by side. " + " ".join(lines + listed)


def _window(cells: MapCells, sq: int, sk: int) -> tuple[slice, slice]:
    """The rows and columns drawn: all, or :data:`WINDOW` of them around the first
    marked cell of a larger map."""
    first = next(
        (c for found in cells.marked.values() for c in found[:1]),
        (cells.rows_off[0], 0) if cells.rows_off else (0, 0),
    )

    def around(at: int, n: int) -> slice:
        start = min(max(0, at - WINDOW // 2), max(0, n - WINDOW))
        return slice(start, min(n, start + WINDOW))

    return around(first[0], sq), around(first[1], sk)


def quiet_figure(plot, height: float) -> bytes:
    """A PNG of a figure as wide as the notebook's column and ``height`` inches tall,
    in the book's style, that ``plot(figure)`` fills; quietly (module docstring)."""
    with contextlib.redirect_stderr(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # Imported here: a check that passes never pays for matplotlib.
        import matplotlib
        from matplotlib.figure import Figure

        from tformer_ref.plotting import BOOK_STYLE, COLUMN_INCHES

        with matplotlib.rc_context(BOOK_STYLE):
            fig = Figure(figsize=(COLUMN_INCHES, height), layout="constrained")
            plot(fig)
            buffer = io.BytesIO()
            fig.savefig(buffer, format="png")
            return buffer.getvalue()


def _draw(
    maps,
    forbidden,
    cells: MapCells,
    top: float,
    titles,
    bar,
    *,
    skip: int = 0,
    right_is_mask: bool = False,
    labels=None,
) -> bytes:
    """The two maps, side by side (module docstring). ``skip``: the map's number of
    cells, a mark on all of them is not drawn; ``right_is_mask``: the right panel is a
    pattern, outside the colour bar's scale; ``labels``: (x label, y label, first row's
    number) when not keys and queries from 0."""
    sq, sk = maps[0].shape
    rows, cols = _window(cells, sq, sk)
    height = min(3.6, 1.4 + 2.4 * (rows.stop - rows.start) / (cols.stop - cols.start))

    def plot(fig):
        axes = fig.subplots(1, 2)
        images = []
        for k, (ax, values, title) in enumerate(zip(axes, maps, titles)):
            part = values[rows, cols].float().numpy()
            vmax = 1.0 if k == 1 and right_is_mask else top
            images.append(
                ax.imshow(part, cmap="viridis", vmin=0.0, vmax=vmax, aspect="equal")
            )
            pair = forbidden if isinstance(forbidden, tuple) else (forbidden,) * 2
            if pair[k] is not None:
                _hatch(ax, pair[k][rows, cols])
            _ticks(ax, rows, cols, labels)
            ax.set_title(title)
            if k == 0:
                _marks(ax, cells, rows, cols, skip)
        if bar:
            scaled = [axes[0]] if right_is_mask else list(axes)
            fig.colorbar(images[0], ax=scaled, label=bar, shrink=0.8)

    return quiet_figure(plot, max(1.8, height))


def _hatch(ax, forbidden: torch.Tensor) -> None:
    from matplotlib.patches import Rectangle

    for i, j in forbidden.nonzero().tolist():
        ax.add_patch(
            Rectangle(
                (j - 0.5, i - 0.5),
                1,
                1,
                fill=False,
                hatch="///",
                edgecolor="#bbbbbb",
                linewidth=0,
            )
        )


def _ticks(ax, rows: slice, cols: slice, labels=None) -> None:
    """Every position labelled when there are few, else every other one."""
    xlabel, ylabel, first = labels or ("key", "query", 0)
    for set_ticks, set_labels, part, start in (
        (ax.set_xticks, ax.set_xticklabels, cols, 0),
        (ax.set_yticks, ax.set_yticklabels, rows, first),
    ):
        step = 1 if part.stop - part.start <= 10 else 2
        at = range(0, part.stop - part.start, step)
        set_ticks(list(at))
        set_labels([str(start + part.start + i) for i in at])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)


def _marks(ax, cells: MapCells, rows: slice, cols: slice, skip: int = 0) -> None:
    def inside(i, j):
        return rows.start <= i < rows.stop and cols.start <= j < cols.stop

    for name, found in cells.marked.items():
        marker, colour, _ = _STYLE[name]
        at = [(j - cols.start, i - rows.start) for i, j in found if inside(i, j)]
        if not at or _everywhere(cells, name, skip):
            continue
        xs, ys = zip(*at)
        if marker == "o":  # a ring, as the caption's ○
            ax.scatter(
                xs,
                ys,
                marker="o",
                s=80,
                facecolors="none",
                edgecolors=colour,
                linewidths=2.2,
            )
            continue
        ax.scatter(
            xs, ys, marker=marker, s=70, c=colour, edgecolors="white", linewidths=0.8
        )
    width = cols.stop - cols.start
    for i in cells.rows_off:
        if rows.start <= i < rows.stop:
            ax.annotate(
                "◀",
                (width - 0.5, i - rows.start),
                xytext=(4, 0),
                textcoords="offset points",
                va="center",
                color="#d62728",
                annotation_clip=False,
            )


seal(__name__)
