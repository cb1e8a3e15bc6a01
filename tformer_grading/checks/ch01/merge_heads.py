"""Checks for exercise ``merge_heads`` of chapter 1 (book/ch01_shapes):
``merge_heads(x [B, H, S, Dh]) -> [B, S, D]``, the exact inverse of ``split_heads``.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import torch

from tformer_ref.heads import merge_heads, split_heads

from ...guard.integrity import seal
from ..cases import randn
from ..diagnosis import Case, Diagnosis, Pitfall, single_thread
from .sections import S_MERGE
from .stages import (
    AXES_IN_WRONG_ORDER,
    Run,
    axis_letters,
    batch_and_token_stage,
    codes,
    form_stage,
    gradient_stage,
    is_right,
    raised_stage,
    run_function,
    sources,
    staged,
    values_stage,
)

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True


def _split_back(g: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """The gradient a merge hands back to x [B, H, S, Dh]: the upstream split."""
    return split_heads(g, x.size(1))


def merge_no_transpose(x):
    b, h, s, dh = x.shape
    return x.reshape(b, s, h * dh)


def merge_dh_major(x):
    b, h, s, dh = x.shape
    return x.permute(0, 2, 3, 1).reshape(b, s, h * dh)


def merge_shape_unpacked_as_output(x):
    # the output's order, read off an input laid out [B, H, S, Dh]
    b, s, h, dh = x.shape
    return x.transpose(1, 2).contiguous().view(b, s, h * dh)


def _merge_view_after_transpose(x):
    b, h, s, dh = x.shape
    return x.transpose(1, 2).view(b, s, h * dh)


MERGE_NO_TRANSPOSE = Pitfall(
    "merged without transpose",
    "You reshaped [B, H, S, Dh] straight to [B, S, D]: that glues rows of *different "
    "tokens* together. Transpose back to [B, S, H, Dh] first.",
    S_MERGE,
    merge_no_transpose,
)

MERGE_DH_MAJOR = Pitfall(
    "heads merged in the wrong order",
    "You put the Dh axis before the head axis (e.g. permute(0, 2, 3, 1)), so the "
    "features of the heads are interleaved. merge_heads must undo split_heads exactly: "
    "head h back at x[..., h*Dh:(h+1)*Dh].",
    S_MERGE,
    merge_dh_major,
)

MERGE_PITFALLS = (
    MERGE_NO_TRANSPOSE,
    MERGE_DH_MAJOR,
    Pitfall(
        "shape unpacked in the wrong order",
        "You unpacked x.shape as (B, S, H, Dh), but x is [B, H, S, Dh]: your S holds H "
        "and your H holds S, so the result is [B, H, S·Dh] (right only when H = S). "
        "Unpack in the input's order: b, h, s, dh = x.shape.",
        S_MERGE,
        merge_shape_unpacked_as_output,
    ),
    Pitfall(
        "view on a non-contiguous tensor",
        "After transpose the tensor is no longer contiguous in memory and .view() "
        "refuses it. Use .contiguous().view(...) or .reshape(...).",
        S_MERGE,
        _merge_view_after_transpose,
    ),
)

MERGE_WRONG_SHAPE = Diagnosis(
    "wrong merged shape",
    "merge_heads returns [B, S, D] with D = H * Dh, read from the input's own shape: "
    "no fixed numbers, no axis left over.",
    S_MERGE,
)
MERGE_TOKENS_GLUED = Diagnosis(
    "tokens glued together",
    "Row [b, s, :] of the merge must hold the H heads of token s only: move the head "
    "axis back next to Dh (transpose(1, 2)) before flattening.",
    S_MERGE,
)
MERGE_WRONG_PLACES = Diagnosis(
    "head features put in the wrong places",
    "merge_heads must undo split_heads exactly: feature h*Dh + j of each token is "
    "x[b, h, s, j], heads in order, each head's Dh features together.",
    S_MERGE,
)


def _merge_shape_stage(title: str, r: Run) -> None:
    if not isinstance(r.got, torch.Tensor) or r.got.shape == r.want.shape:
        return
    b, h, s, dh = r.args[0].shape
    sizes = {"B": b, "H": h, "S": s, "Dh": dh, "D": h * dh}
    letters = axis_letters(r.got.shape, sizes)
    where = f"On case {r.label} your output has shape {list(r.got.shape)}"
    if letters and r.got.numel() == r.want.numel():
        AXES_IN_WRONG_ORDER.fail(
            title,
            f"{where}, i.e. [{letters}]; expected [B, S, D] = {list(r.want.shape)}.",
        )
    named = f", i.e. [{letters}]" if letters else ""
    MERGE_WRONG_SHAPE.fail(
        title, f"{where}{named}; expected [B, S, D] = {list(r.want.shape)}."
    )


def _merge_sources_stage(title: str, r: Run) -> None:
    """Name the first thing the code case shows out of place: batch, token,
    feature."""
    b, h, s, dh = r.args[0].shape
    src = sources(r.got, r.ref_args[0])
    if src is None:
        values_stage(title, r)
    sb, sh, ss, sj = src
    dev = r.args[0].device
    ib = torch.arange(b, device=dev).view(b, 1, 1)
    i_s = torch.arange(s, device=dev).view(1, s, 1)
    batch_and_token_stage(title, r, src, (sb, ib), (ss, i_s), MERGE_TOKENS_GLUED)
    f = torch.arange(h * dh, device=dev)
    if not (torch.equal(sh[0, 0], f // dh) and torch.equal(sj[0, 0], f % dh)):
        pairs = ", ".join(
            f"({a}, {c})" for a, c in zip(sh[0, 0, :6].tolist(), sj[0, 0, :6].tolist())
        )
        MERGE_WRONG_PLACES.fail(
            title,
            f"On case {r.label} features 0-5 "
            f"of each token come from (head, feature) "
            f"{pairs}; expected (0, 0), (0, 1), (0, 2), ...",
        )


def _merge_layout_stage(title: str, runs: Sequence[Run]) -> None:
    """As _split_layout_stage, for merge_heads."""
    r = runs[-1]
    if type(r.got) is torch.Tensor and not is_right(r, 0, 0):  # subclasses: form
        _merge_shape_stage(title, r)
        if r.got.dtype == r.want.dtype:
            _merge_sources_stage(title, r)
    raised_stage(title, runs)
    form_stage(title, runs, S_MERGE)


def _noncontiguous(x: torch.Tensor) -> torch.Tensor:
    """``x`` [B, H, S, Dh] with the same values, laid out as split_heads returns it."""
    return x.transpose(1, 2).contiguous().transpose(1, 2)


def _merge_cases():
    shapes = [(2, 3, 5, 4), (1, 2, 7, 4), (3, 4, 4, 4), (4, 4, 6, 2)]
    cases = [
        Case(
            f"x [B={b}, H={h}, S={s}, Dh={dh}] (D={h * dh})",
            lambda b=b, h=h, s=s, dh=dh, i=i: (randn(b, h, s, dh, seed=10 + i),),
        )
        for i, (b, h, s, dh) in enumerate(shapes)
    ]
    # What split_heads really hands over: a transposed, non-contiguous view.
    cases.append(
        Case(
            "a non-contiguous x, as split_heads returns it",
            lambda: (split_heads(randn(2, 5, 12, seed=20), 3),),
        )
    )
    cases.append(
        Case(
            "x [2, 3, 6, 2] float64",
            lambda: (randn(2, 3, 6, 2, seed=21, dtype=torch.float64),),
        )
    )
    # Last: every value a distinct code, B, H, S, Dh and D all different (see sources).
    cases.append(
        Case(
            "x [B=2, H=3, S=4, Dh=5] of distinct codes, non-contiguous",
            lambda: (_noncontiguous(codes(2, 3, 4, 5)),),
        )
    )
    return cases


def check_merge_heads(merge_heads_fn) -> None:
    """``merge_heads_fn(x [B, H, S, Dh]) -> [B, S, D]``, the inverse of split_heads."""
    with single_thread():
        runs = [
            run_function(c, merge_heads_fn, merge_heads, ("x",)) for c in _merge_cases()
        ]
        gradient = partial(gradient_stage, merge_heads_fn, _split_back)
        staged(
            "merge_heads",
            runs,
            MERGE_PITFALLS,
            (_merge_layout_stage,),
            0,
            0,
            when_right=gradient,
        )


seal(__name__)
