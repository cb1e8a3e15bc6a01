"""Draw the book's diagrams into book/figures/ as deterministic SVGs.

The lessons show these with MyST ``{figure}`` directives (``../figures/NAME.svg``):

* ``model_chNN.svg`` (and ``model_capstone.svg``): the whole encoder–decoder
  Transformer, the same drawing for every chapter, with the part that chapter
  builds in the accent colour (thick outline, bold label) and the rest grey;
* ``blocks_post_pre_ln.svg``: an encoder block and a decoder block, Post-LN and
  Pre-LN side by side;
* ``heads_split_merge.svg``: splitting ``[B, S, D]`` into heads and merging them
  back, the shape written on every arrow;
* ``mask_patterns.svg``: the padding mask, the causal mask and their AND, as
  queries × keys grids marked ✓/× (not by colour alone).

Text is stored as paths (no font needed to view them) with matplotlib's bundled
DejaVu fonts, the SVG hash salt is fixed and no date is written, so a run
rewrites every file byte for byte. A drawing whose text does not fit its box
raises instead of being written (``_check_fits``).

Usage:
    python tools/figures.py           rewrite book/figures/*.svg
    python tools/figures.py --check   exit 1, listing every figure that differs
                                      from a fresh drawing (nothing is written)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import io
import textwrap

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch, Rectangle

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "book" / "figures"

RC = {
    "svg.hashsalt": "tformer-book-figures",
    "svg.fonttype": "path",
    "font.family": "DejaVu Sans",
    "mathtext.fontset": "dejavusans",
    "path.simplify": False,
}
WIDTH = 7.0  # inches: ~100 px per inch in the book's ~700 px column, so 9 pt ≈ 12 px

# Okabe–Ito vermillion for "this chapter"; grey for everything else.
ACCENT_EDGE, ACCENT_FILL, ACCENT_TEXT = "#c44e00", "#fde3cc", "#000000"
GREY_EDGE, GREY_FILL, GREY_TEXT = "#a8a8a8", "#f3f3f3", "#5e5e5e"
INK = "#333333"
MIN_PT = 9


class Canvas:
    """A figure whose data units are inches (origin bottom left), with the boxes
    drawn so far, to check afterwards that their text fits."""

    def __init__(self, width: float, height: float):
        self.fig = Figure(figsize=(width, height), facecolor="white")
        FigureCanvasAgg(self.fig)  # measures text for _check_fits; savefig writes SVG
        self.ax = self.fig.add_axes((0, 0, 1, 1))
        self.ax.set_xlim(0, width)
        self.ax.set_ylim(0, height)
        self.ax.set_axis_off()
        self.boxes: list[tuple[FancyBboxPatch, list]] = []

    def text(self, x, y, s, size=10, on=None, bold=False, mono=False, **kw):
        kw.setdefault("ha", "center")
        kw.setdefault("va", "center")
        default = INK if on is None else (ACCENT_TEXT if on else GREY_TEXT)
        color = kw.pop("color", default)
        weight = "bold" if bold or on else "normal"
        family = "DejaVu Sans Mono" if mono else "DejaVu Sans"
        assert size >= MIN_PT, f"{s!r}: {size} pt is below the book's {MIN_PT} pt"
        return self.ax.text(
            x, y, s, fontsize=size, color=color, fontweight=weight, family=family, **kw
        )

    def box(self, x, y, w, h, lines, on, sizes=(10, 9), dashed=False):
        """A rounded box with centre (x, y); ``lines`` are drawn top to bottom, the
        first at ``sizes[0]`` pt and the others at ``sizes[1]``."""
        patch = FancyBboxPatch(
            (x - w / 2, y - h / 2),
            w,
            h,
            boxstyle="round,pad=0,rounding_size=0.06",
            facecolor=ACCENT_FILL if on else GREY_FILL,
            edgecolor=ACCENT_EDGE if on else GREY_EDGE,
            linewidth=2.0 if on else 1.0,
            linestyle=(0, (4, 2)) if dashed else "solid",
            zorder=2,
        )
        self.ax.add_patch(patch)
        lines = [lines] if isinstance(lines, str) else list(lines)
        step = 0.19
        top = y + step * (len(lines) - 1) / 2
        texts = []
        for i, line in enumerate(lines):
            size = sizes[0] if i == 0 else sizes[1]
            texts.append(
                self.text(
                    x,
                    top - i * step,
                    line,
                    size=size,
                    on=on,
                    bold=on and i == 0,
                    zorder=3,
                )
            )
            if i > 0 and on:
                texts[-1].set_fontweight("normal")
        self.boxes.append((patch, texts))
        return patch

    def line(self, points, on=None, halo=False):
        """A polyline through ``points``, with an arrow head at the last one; with
        ``halo`` it is drawn over a white band, to cross other lines visibly."""
        color = INK if on is None else (ACCENT_EDGE if on else GREY_EDGE)
        lw = 2.0 if on else 1.2
        z = 1.8 if halo else 1.5
        xs, ys = zip(*points)
        if halo:
            # From the second point (the first may sit on the outline it leaves) to
            # short of the arrow head, whose own white stroke would hide the shaft.
            end_x = xs[-1] - 0.12 * _sign(xs[-1] - xs[-2])
            end_y = ys[-1] - 0.12 * _sign(ys[-1] - ys[-2])
            self.ax.plot(
                xs[1:-1] + (end_x,),
                ys[1:-1] + (end_y,),
                color="white",
                lw=lw + 5,
                zorder=z - 0.1,
                solid_capstyle="butt",
            )
        if len(points) > 2:
            self.ax.plot(
                xs[:-1], ys[:-1], color=color, lw=lw, zorder=z, solid_capstyle="butt"
            )
        head = "-|>,head_length=5,head_width=2.6"
        self.ax.add_patch(
            FancyArrowPatch(
                points[-2],
                points[-1],
                arrowstyle=head,
                mutation_scale=1.6,
                color=color,
                lw=lw,
                shrinkA=0,
                shrinkB=0,
                zorder=z + 0.1,
            )
        )


def _sign(v: float) -> float:
    return (v > 0) - (v < 0)


def _check_fits(canvas: Canvas, name: str) -> None:
    """Raise when a box's text runs over its edges or two labels overlap."""
    renderer = canvas.fig.canvas.get_renderer()
    problems = []
    for patch, texts in canvas.boxes:
        outer = patch.get_window_extent(renderer)
        for t in texts:
            inner = t.get_window_extent(renderer)
            if (
                inner.x0 < outer.x0 + 2
                or inner.x1 > outer.x1 - 2
                or inner.y0 < outer.y0
                or inner.y1 > outer.y1
            ):
                problems.append(t.get_text())
    if problems:
        raise ValueError(f"{name}: text does not fit its box: {problems}")
    extents = [
        (t.get_text(), t.get_window_extent(renderer).shrunk(0.98, 0.9))
        for t in canvas.ax.texts
        if t.get_text().strip()
    ]
    clashes = [
        (a, b)
        for i, (a, ea) in enumerate(extents)
        for b, eb in extents[i + 1 :]
        if ea.overlaps(eb)
    ]
    if clashes:
        raise ValueError(f"{name}: labels overlap: {clashes}")


# --------------------------------------------------------------------------- model

# What each chapter builds, as groups of the model drawing.
ALL_PARTS = {
    "embed",
    "pe",
    "enc_attn",
    "dec_attn",
    "cross_attn",
    "addnorm",
    "ffn",
    "pad_mask",
    "causal_mask",
    "stacks",
    "memory",
    "linear",
    "loss",
    "decoding",
    "inputs",
}
ATTENTION = {"enc_attn", "dec_attn", "cross_attn"}
CHAPTERS = {
    "ch01": ("Chapter 1: multi-head attention", ATTENTION),
    "ch02": ("Chapter 2: scaled dot-product attention", ATTENTION),
    "ch03": ("Chapter 3: the masks", {"pad_mask", "causal_mask"}),
    "ch04": ("Chapter 4: residuals, LayerNorm, feed-forward", {"addnorm", "ffn"}),
    "ch05": (
        "Chapter 5: positions and the whole model",
        {"embed", "pe", "stacks", "memory", "cross_attn"},
    ),
    "ch06": (
        "Chapter 6: training and decoding",
        {"inputs", "linear", "loss", "decoding"},
    ),
    "ch07": ("Chapter 7: the whole model, trained at scale", ALL_PARTS),
    "ch08": (
        "Chapter 8: the decoder alone, generating text",
        {"embed", "pe", "dec_attn", "causal_mask", "ffn", "linear", "decoding"},
    ),
    "capstone": ("Capstone: the whole model, trained", ALL_PARTS),
}

EX, DX, BW = 2.25, 4.78, 2.0  # encoder and decoder column centres, box width
SUB_H, AN_H, GAP = 0.46, 0.28, 0.16  # sublayer box, add & norm box, vertical gap
SIDE_W = 1.0  # mask and positional-encoding boxes in the margins


def _sublayers(canvas, cx, y0, units, resid_x, parts, formula):
    """Stack ``units`` = [(group, lines)] of sublayer + add & norm from ``y0`` up,
    residual lines at ``resid_x``; returns each sublayer's centre y and the top."""
    on_an = "addnorm" in parts
    centres = []
    y = y0
    for group, lines in units:
        on = group in parts
        if formula and group in ATTENTION:
            lines = [lines[0], r"$\mathrm{softmax}(QK^{\top}\!/\sqrt{d_k})\,V$"]
        sub_y = y + SUB_H / 2
        canvas.box(cx, sub_y, BW, SUB_H, lines, on)
        canvas.line([(cx, y - GAP), (cx, y)])
        an_y = y + SUB_H + GAP + AN_H / 2
        canvas.line([(cx, y + SUB_H), (cx, an_y - AN_H / 2)])
        canvas.box(cx, an_y, BW, AN_H, "add & norm", on_an)
        branch = y - GAP / 2
        edge = cx + (BW / 2 if resid_x > cx else -BW / 2)
        canvas.line(
            [(cx, branch), (resid_x, branch), (resid_x, an_y), (edge, an_y)], on=on_an
        )
        centres.append(sub_y)
        y = an_y + AN_H / 2 + GAP
    return centres, y - GAP


def _side_box(canvas, x, y, lines, on, target_x):
    """A margin box (mask, positional encoding) with an arrow to ``target_x``."""
    canvas.box(x, y, SIDE_W, 0.46, lines, on, sizes=(9, 9))
    start = x + SIDE_W / 2 if target_x > x else x - SIDE_W / 2
    canvas.line([(start, y), (target_x, y)], on=on)


def draw_model(chapter: str) -> Canvas:
    title, parts = CHAPTERS[chapter]
    formula = chapter == "ch02"
    c = Canvas(WIDTH, 7.2)
    on = parts.__contains__

    # inputs, embeddings, positions
    c.text(EX, 0.26, "source tokens", size=10, on=on("inputs"))
    c.text(
        DX, 0.26, "target tokens, shifted right: tgt[:, :-1]", size=10, on=on("inputs")
    )
    emb_y, pe_y = 0.8, 1.32
    for cx in (EX, DX):
        c.line([(cx, 0.4), (cx, emb_y - 0.2)])
        c.box(
            cx,
            emb_y,
            BW,
            0.4,
            r"embedding $\times\sqrt{d_{\mathrm{model}}}$",
            on("embed"),
        )
        c.line([(cx, emb_y + 0.2), (cx, pe_y - 0.12)])
        c.ax.add_patch(
            Circle(
                (cx, pe_y),
                0.12,
                facecolor="white",
                zorder=2,
                lw=1.6 if on("pe") else 1,
                edgecolor=ACCENT_EDGE if on("pe") else GREY_EDGE,
            )
        )
        c.text(cx, pe_y + 0.005, "+", size=12, on=on("pe"), zorder=3)
    _side_box(c, 0.55, pe_y, ["positional", "encoding"], on("pe"), EX - 0.12)
    _side_box(c, 6.45, pe_y, ["positional", "encoding"], on("pe"), DX + 0.12)

    # the two stacks
    y0 = 1.78
    enc_units = [
        ("enc_attn", ["self-attention", "Q, K, V from the source"]),
        ("ffn", ["feed-forward", "linear, ReLU, linear"]),
    ]
    dec_units = [
        ("dec_attn", ["masked self-attention", "Q, K, V from the target"]),
        ("cross_attn", ["cross-attention", "Q: target; K, V: encoder"]),
        ("ffn", ["feed-forward", "linear, ReLU, linear"]),
    ]
    enc_res, dec_res = EX + BW / 2 + 0.09, DX - BW / 2 - 0.09
    enc_y, enc_top = _sublayers(c, EX, y0, enc_units, enc_res, parts, formula)
    dec_y, dec_top = _sublayers(c, DX, y0, dec_units, dec_res, parts, formula)
    c.line([(EX, pe_y + 0.12), (EX, y0 - GAP)])
    c.line([(DX, pe_y + 0.12), (DX, y0 - GAP)])
    stack_on = on("stacks")
    for x0, x1, top, nx, label in (
        (EX - BW / 2 - 0.1, enc_res + 0.08, enc_top, 0.55, "encoder"),
        (dec_res - 0.08, DX + BW / 2 + 0.1, dec_top, 6.45, "decoder"),
    ):
        c.ax.add_patch(
            FancyBboxPatch(
                (x0, y0 - 0.12),
                x1 - x0,
                top - y0 + 0.26,
                boxstyle="round,pad=0,rounding_size=0.1",
                facecolor="none",
                zorder=1,
                edgecolor=ACCENT_EDGE if stack_on else GREY_EDGE,
                linewidth=2.0 if stack_on else 1.0,
            )
        )
        ny = (y0 + top) / 2 + (0.45 if label == "encoder" else 0.9)
        c.text(nx, ny + 0.12, "N×", size=13, on=stack_on, bold=True)
        c.text(
            nx,
            ny - 0.17,
            f"{label}\nblocks",
            size=9,
            on=stack_on,
            linespacing=1.1,
            va="top",
        )

    # masks
    _side_box(c, 0.55, enc_y[0], ["padding", "mask"], on("pad_mask"), EX - BW / 2)
    _side_box(
        c,
        6.45,
        dec_y[0],
        ["causal mask", "(& padding)"],
        on("causal_mask"),
        DX + BW / 2,
    )
    _side_box(c, 6.45, dec_y[1], ["padding", "mask"], on("pad_mask"), DX + BW / 2)

    # encoder output into cross-attention
    mem_x, mem_y = (enc_res + dec_res) / 2, enc_top + 0.4
    c.line(
        [
            (EX, enc_top + 0.14),
            (EX, mem_y),
            (mem_x, mem_y),
            (mem_x, dec_y[1]),
            (DX - BW / 2, dec_y[1]),
        ],
        on=on("memory"),
        halo=True,
    )
    c.text(
        mem_x - 0.08,
        mem_y + 0.17,
        "encoder output (memory)",
        size=9,
        on=on("memory"),
        ha="right",
    )

    # output layer, loss, decoding
    lin_y, sm_y, loss_y = dec_top + 0.42, dec_top + 0.95, dec_top + 1.6
    c.line([(DX, dec_top + 0.14), (DX, lin_y - 0.18)])
    c.box(DX, lin_y, BW, 0.36, "linear: D → vocabulary", on("linear"))
    c.line([(DX, lin_y + 0.18), (DX, sm_y - 0.18)])
    c.box(DX, sm_y, BW, 0.36, "softmax", on("linear"))
    c.line([(DX, sm_y + 0.18), (DX, loss_y - 0.23)], on=on("loss"))
    c.box(
        DX,
        loss_y,
        BW,
        0.46,
        ["training: cross-entropy", "padding positions ignored"],
        on("loss"),
    )
    _side_box(c, 6.45, loss_y, ["targets", "tgt[:, 1:]"], on("loss"), DX + BW / 2)
    c.line([(DX - BW / 2, sm_y), (EX + BW / 2, sm_y)], on=on("decoding"))
    c.box(
        EX,
        sm_y,
        BW,
        0.46,
        ["inference: decoding", "greedy or beam search"],
        on("decoding"),
    )

    # key
    c.text(0.12, 7.0, title, size=11, bold=True, ha="left")
    key = ((True, "built in this chapter"), (False, "built in other chapters"))
    if parts == ALL_PARTS:
        key = ((True, "every part: the whole model"),)
    for i, (swatch_on, label) in enumerate(key):
        x = 0.12 + i * 1.75
        c.ax.add_patch(
            Rectangle(
                (x, 6.6),
                0.26,
                0.18,
                zorder=2,
                facecolor=ACCENT_FILL if swatch_on else GREY_FILL,
                edgecolor=ACCENT_EDGE if swatch_on else GREY_EDGE,
                lw=2.0 if swatch_on else 1.0,
            )
        )
        c.text(x + 0.34, 6.69, label, size=9, ha="left")
    return c


# --------------------------------------------------------------------------- blocks

BLOCK_W = 1.24


def _norm_block(c, cx, y0, units, pre_ln, resid_side):
    """One block drawn as its operations, bottom to top; returns the centre y of
    every sublayer and the top. Each unit: Post-LN sublayer, dropout, +, LayerNorm;
    Pre-LN LayerNorm, sublayer, dropout, +. ``units`` are the sublayers' label
    lines."""
    w, hn, r, gap = BLOCK_W, 0.26, 0.1, 0.11
    rx = cx + resid_side * (w / 2 + 0.09)
    centres, y = [], y0
    for lines in units:
        hs = 0.5 if "\n" in lines[0] else 0.34
        branch = y - gap / 2
        if pre_ln:
            steps = [("norm", hn), ("sub", hs), ("drop", hn), ("add", 2 * r)]
        else:
            steps = [("sub", hs), ("drop", hn), ("add", 2 * r), ("norm", hn)]
        for kind, h in steps:
            mid = y + h / 2
            c.line([(cx, y - gap), (cx, y)])
            if kind == "add":
                c.ax.add_patch(
                    Circle(
                        (cx, mid), r, facecolor="white", edgecolor=INK, lw=1.2, zorder=2
                    )
                )
                c.text(cx, mid + 0.005, "+", size=11, color=INK)
                c.line(
                    [(cx, branch), (rx, branch), (rx, mid), (cx + resid_side * r, mid)]
                )
            elif kind == "sub":
                c.box(cx, mid, w, h, lines, True, sizes=(9, 9))
                centres.append(mid)
            else:
                label = "LayerNorm" if kind == "norm" else "dropout"
                c.box(cx, mid, w, h, label, False, sizes=(9, 9))
            y += h + gap
    return centres, y - gap


def draw_blocks() -> Canvas:
    c = Canvas(WIDTH, 7.0)
    y0, pad = 0.75, 0.12
    enc_units = [["self-attention"], ["feed-forward"]]
    dec_units = [["masked\nself-attention"], ["cross-attention"], ["feed-forward"]]
    for pre_ln, x_off in ((False, 0.0), (True, 3.5)):
        ex, dx, mem_x = x_off + 0.92, x_off + 2.6, x_off + 1.76
        enc_y, enc_top = _norm_block(c, ex, y0, enc_units, pre_ln, -1)
        dec_y, dec_top = _norm_block(c, dx, y0, dec_units, pre_ln, +1)
        for cx, top, label, side in (
            (ex, enc_top, "N × encoder block", -1),
            (dx, dec_top, "N × decoder block", +1),
        ):
            left = cx - BLOCK_W / 2 - (0.2 if side < 0 else 0.09)
            right = cx + BLOCK_W / 2 + (0.2 if side > 0 else 0.09)
            c.ax.add_patch(
                FancyBboxPatch(
                    (left, y0 - pad),
                    right - left,
                    top - y0 + 2 * pad,
                    boxstyle="round,pad=0,rounding_size=0.1",
                    facecolor="none",
                    edgecolor=GREY_EDGE,
                    lw=1.0,
                )
            )
            c.text(cx, y0 - pad - 0.22, label, size=10, bold=True)
        out_e, out_d = enc_top + pad, dec_top + pad
        if pre_ln:  # the residual stream is normalised once, after the last block
            c.line([(ex, out_e), (ex, out_e + 0.14)])
            c.box(
                ex,
                out_e + 0.28,
                BLOCK_W,
                0.28,
                "final LayerNorm",
                False,
                sizes=(9, 9),
                dashed=True,
            )
            out_e += 0.42
            # The decoder's norm is a branch off the last "+", not a step between
            # blocks: only the N-th block's output goes through it.
            nx, nw, fork = x_off + 1.05, 1.45, out_d + 0.12
            c.line([(dx, fork), (nx + nw / 2, fork)])
            c.box(
                nx,
                fork,
                nw,
                0.42,
                ["final LayerNorm", "after the N-th block"],
                False,
                sizes=(9, 9),
                dashed=True,
            )
            c.line([(nx, fork + 0.21), (nx, fork + 0.45)])
            c.text(nx, fork + 0.57, "output projection", size=9)
        c.line(
            [
                (ex, out_e),
                (ex, out_e + 0.2),
                (mem_x, out_e + 0.2),
                (mem_x, dec_y[1]),
                (dx - BLOCK_W / 2, dec_y[1]),
            ]
        )
        c.text((ex + mem_x) / 2, out_e + 0.34, "memory", size=9)
        c.line([(dx, out_d), (dx, out_d + 0.3)])
        c.text(dx, out_d + 0.42, "to the next block", size=9)
        if pre_ln:
            title = "Pre-LN (GPT-2 and most models since)"
            rule = "x ← x + Dropout(Sublayer(LayerNorm(x)))"
        else:
            title = "Post-LN (the paper)"
            rule = "x ← LayerNorm(x + Dropout(Sublayer(x)))"
        c.text(x_off + 1.75, 6.8, title, size=11, bold=True)
        c.text(x_off + 1.75, 6.52, rule, size=9.5)
    c.ax.plot([3.5, 3.5], [0.2, 6.95], color=GREY_EDGE, lw=0.8, ls=(0, (3, 3)))
    return c


# --------------------------------------------------------------------------- heads


def draw_heads() -> Canvas:
    c = Canvas(WIDTH, 6.75)
    cx, w, arrow = 1.95, 2.3, 0.5
    steps = [  # (box lines, accent, shape on the arrow below, note on the right)
        (
            ["linear W_q: D → D"],
            False,
            "[B, S, D]",
            "The same for K and V. D = H · Dh: each head gets Dh of the D features.",
        ),
        (
            ["view(B, S, H, Dh)"],
            True,
            "[B, S, H, Dh]",
            "Splits the last axis into H blocks of Dh. No copy: the memory is read in "
            "the same order.",
        ),
        (
            ["transpose(1, 2)"],
            True,
            "[B, H, S, Dh]",
            "Heads become a batch axis, so one matmul serves every head. The result is "
            "a strided view, no longer contiguous.",
        ),
        (
            [
                "attention in every head",
                r"$\mathrm{softmax}(QK^{\top}\!/\sqrt{D_h})\,V$",
            ],
            False,
            "[B, H, S, Dh]",
            "Scores [B, H, S, S]: one S × S map per head, each head on its own Dh "
            "features.",
        ),
        (
            ["transpose(1, 2)"],
            True,
            "[B, S, H, Dh]",
            "Back to one row per token, the heads side by side. Not contiguous.",
        ),
        (
            ["reshape(B, S, D)", "= .contiguous().view(B, S, D)"],
            True,
            "[B, S, D]",
            "Concatenates the heads. reshape copies here; view alone raises, because "
            "the tensor is not contiguous.",
        ),
        (["linear W_o: D → D"], False, None, "Mixes the heads' outputs."),
    ]
    y = 6.6
    c.text(cx, y - 0.08, "x", size=10, mono=True, bold=True)
    y -= 0.2
    _shape_arrow(c, cx, y, arrow, "[B, S, D]")
    y -= arrow
    centres = {}
    for i, (lines, on, shape, note) in enumerate(steps):
        h = 0.36 if len(lines) == 1 else 0.5
        mid = y - h / 2
        c.box(cx, mid, w, h, lines, on, sizes=(10, 9.5))
        centres[i] = mid
        c.text(3.45, mid, _wrap(note, 48), size=9, ha="left", linespacing=1.25)
        y -= h
        if shape:
            _shape_arrow(c, cx, y, arrow, shape)
            y -= arrow
    for first, last, label in ((1, 2, "split"), (4, 5, "merge")):
        top, bottom = centres[first] + 0.18, centres[last] - 0.18
        x = cx - w / 2 - 0.12
        c.ax.plot(
            [x + 0.06, x, x, x + 0.06],
            [top, top, bottom, bottom],
            color=ACCENT_EDGE,
            lw=1.5,
        )
        c.text(
            x - 0.08,
            (top + bottom) / 2,
            label,
            size=10,
            color=ACCENT_EDGE,
            bold=True,
            ha="right",
        )
    return c


def _shape_arrow(c, x, y, length, shape):
    """An arrow down from (x, y) with a tensor shape written on it."""
    c.line([(x, y), (x, y - length)])
    c.text(
        x,
        y - length / 2,
        shape,
        size=9.5,
        mono=True,
        bold=True,
        zorder=4,
        bbox=dict(boxstyle="square,pad=0.15", fc="white", ec="none"),
    )


def _wrap(text: str, width: int) -> str:
    return "\n".join(textwrap.wrap(text, width))


# --------------------------------------------------------------------------- masks

TOKENS = ["the", "cat", "sat", "PAD", "PAD"]  # sequence 0 of chapter 3: length 3 of 5


def draw_masks() -> Canvas:
    c = Canvas(WIDTH, 3.7)
    n, cell, real = len(TOKENS), 0.34, 3
    grids = [
        (
            "padding mask",
            "the key is a real token",
            "[B, 1, 1, S]",
            lambda q, k: k < real,
        ),
        (
            "causal mask",
            "the key is not in the future",
            "[1, 1, S, S]",
            lambda q, k: k <= q,
        ),
        (
            "padding AND causal",
            "what the decoder uses",
            "[B, 1, S, S]",
            lambda q, k: k < real and k <= q,
        ),
    ]
    top = 2.75
    for g, (title, subtitle, shape, allowed) in enumerate(grids):
        x0 = 0.78 + g * 2.2
        mid = x0 + n * cell / 2
        c.text(mid, top + 0.78, title, size=10.5, bold=True)
        c.text(mid, top + 0.55, subtitle, size=9)
        for k, tok in enumerate(TOKENS):
            c.text(x0 + (k + 0.5) * cell, top + 0.18, tok, size=9)
        if g == 0:
            for q, tok in enumerate(TOKENS):
                c.text(x0 - 0.06, top - (q + 0.5) * cell, tok, size=9, ha="right")
        for q in range(n):
            for k in range(n):
                _cell(c, x0 + k * cell, top - (q + 1) * cell, cell, allowed(q, k))
        c.text(mid, top - n * cell - 0.2, shape, size=9.5, mono=True)
    c.text(0.12, top + 0.18, "keys →", size=9, ha="left", color=GREY_TEXT)
    y = 0.2
    _cell(c, 0.78, y - 0.15, 0.3, True)
    c.text(1.16, y, "may attend (True)", size=9.5, ha="left")
    _cell(c, 2.9, y - 0.15, 0.3, False)
    c.text(3.28, y, "masked (False): the key gets weight 0", size=9.5, ha="left")
    c.text(
        0.12,
        0.55,
        "rows: queries; columns: keys. One sequence of length 3 padded to 5.",
        size=9,
        ha="left",
        color=GREY_TEXT,
    )
    return c


def _cell(c, x, y, size, allowed):
    c.ax.add_patch(
        Rectangle(
            (x, y),
            size,
            size,
            lw=0.8,
            edgecolor="#777777",
            facecolor="white" if allowed else "#d6d6d6",
            hatch=None if allowed else "////",
            zorder=2,
        )
    )
    c.text(
        x + size / 2,
        y + size / 2,
        "✓" if allowed else "×",
        size=10,
        color="#1b5e20" if allowed else "#444444",
        zorder=3,
    )


FIGURES = {f"model_{ch}": (lambda ch=ch: draw_model(ch)) for ch in CHAPTERS}
FIGURES["blocks_post_pre_ln"] = draw_blocks
FIGURES["heads_split_merge"] = draw_heads
FIGURES["mask_patterns"] = draw_masks


def render(name: str) -> bytes:
    """The SVG bytes of one figure, drawn afresh."""
    with matplotlib.rc_context(RC):
        canvas = FIGURES[name]()
        _check_fits(canvas, name)
        buf = io.BytesIO()
        canvas.fig.savefig(buf, format="svg", metadata={"Date": None})
    return buf.getvalue()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check",
        action="store_true",
        help="compare with the committed files; write nothing",
    )
    parser.add_argument(
        "--out", type=Path, default=OUT, help="folder to write (default book/figures)"
    )
    args = parser.parse_args(argv)
    if args.check:
        stale = []
        with tempfile.TemporaryDirectory() as tmp:
            for name in FIGURES:
                fresh = Path(tmp) / f"{name}.svg"
                fresh.write_bytes(render(name))
                committed = OUT / f"{name}.svg"
                if (
                    not committed.exists()
                    or committed.read_bytes() != fresh.read_bytes()
                ):
                    stale.append(str(committed.relative_to(ROOT)))
        extra = sorted(p.name for p in OUT.glob("*.svg") if p.stem not in FIGURES)
        if stale or extra:
            if stale:
                print(
                    "figures differ from a fresh drawing "
                    "(run `python tools/figures.py`):",
                    *stale,
                    sep="\n  ",
                )
            if extra:
                print("figures tools/figures.py does not draw:", *extra, sep="\n  ")
            return 1
        print(f"{len(FIGURES)} figures up to date")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    for name in FIGURES:
        (args.out / f"{name}.svg").write_bytes(render(name))
        print(f"wrote {args.out / name}.svg")
    return 0


if __name__ == "__main__":
    sys.exit(main())
