"""Checks for exercise ``split_heads`` of chapter 1 (book/ch01_shapes):
``split_heads(x [B, S, D], n_heads) -> [B, H, S, Dh]``, head h the features
h*Dh:(h+1)*Dh of each token.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import torch

from tformer_ref.heads import merge_heads, split_heads

from ...guard.integrity import seal
from ..cases import randn
from ..diagnosis import Case, Diagnosis, Pitfall, single_thread
from .sections import S_SPLIT
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


def _split_no_transpose(x, h):
    b, s, d = x.shape
    return x.view(b, s, h, d // h)


def split_view_straight(x, h):
    b, s, d = x.shape
    return x.reshape(b, h, s, d // h)


def split_interleaved(x, h):
    b, s, d = x.shape
    return x.reshape(b, s, d // h, h).permute(0, 3, 1, 2)


SPLIT_VIEW_STRAIGHT = Pitfall(
    "sequence and head axes confused",
    "You viewed [B, S, D] straight as [B, H, S, Dh]. The shape is right but the "
    "numbers are not: memory holds each token's D features together, so the view mixes "
    "tokens into heads. View as [B, S, H, Dh] first, then transpose(1, 2).",
    S_SPLIT,
    split_view_straight,
)

SPLIT_PITFALLS = (
    Pitfall(
        "view without transpose",
        "You reshaped [B, S, D] to [B, S, H, Dh] but did not move the head axis: "
        "the result must be [B, H, S, Dh], so add .transpose(1, 2).",
        S_SPLIT,
        _split_no_transpose,
    ),
    SPLIT_VIEW_STRAIGHT,
    Pitfall(
        "heads interleaved",
        "You cut D into Dh groups of H (view(B, S, Dh, H)) instead of H groups of "
        "Dh: head h must be the contiguous slice x[..., h*Dh:(h+1)*Dh].",
        S_SPLIT,
        split_interleaved,
    ),
)


WRONG_SHAPE = Diagnosis(
    "wrong output shape",
    "With n_heads = H, D is cut into H heads of Dh = D // H features: use the n_heads "
    "argument and the input's own sizes, never fixed numbers.",
    S_SPLIT,
)


TOKENS_INTO_HEADS = Diagnosis(
    "tokens mixed into the heads",
    "Every row [b, h, s, :] must hold features of token s only. Memory holds each "
    "token's D features together: view as [B, S, H, Dh] first, then transpose(1, 2).",
    S_SPLIT,
)
WRONG_FEATURES = Diagnosis(
    "features assigned to the wrong heads",
    "Head h is the contiguous slice x[..., h*Dh:(h+1)*Dh], in the order of the heads: "
    "view(B, S, H, Dh) (H before Dh), then transpose(1, 2).",
    S_SPLIT,
)


def _split_shape_stage(title: str, r: Run) -> None:
    (b, s, d), h = r.args[0].shape, r.args[1]
    if not isinstance(r.got, torch.Tensor) or r.got.shape == r.want.shape:
        return
    letters = axis_letters(r.got.shape, {"B": b, "H": h, "S": s, "Dh": d // h, "D": d})
    where = f"On case {r.label} your output has shape {list(r.got.shape)}"
    _head_count_stage(title, r, where)
    if letters and r.got.numel() == r.want.numel():
        AXES_IN_WRONG_ORDER.fail(
            title,
            f"{where}, i.e. [{letters}]; expected "
            f"[B, H, S, Dh] = {list(r.want.shape)}.",
        )
    named = f", i.e. [{letters}]" if letters else ""
    WRONG_SHAPE.fail(
        title,
        f"{where}{named}; expected [B, H, S, Dh] = "
        f"{list(r.want.shape)} (n_heads = {h}, so Dh = {d // h}).",
    )


def _head_count_stage(title: str, r: Run, where: str) -> None:
    """[B, n, S, m] with n * m = D, each row a run of consecutive features: the split
    made n heads of m features, not n_heads heads of D // n_heads."""
    (b, s, d), h = r.args[0].shape, r.args[1]
    got = r.got
    if (
        got.dim() != 4
        or (got.size(0), got.size(2)) != (b, s)
        or got.size(1) * got.size(3) != d
    ):
        return
    src = sources(got, r.ref_args[0])
    if src is not None and bool((src[2].diff(dim=-1) == 1).all()):
        WRONG_SHAPE.fail(
            title,
            f"{where}: {got.size(1)} heads of {got.size(3)} "
            f"features each. n_heads = {h} asks for {h} heads of "
            f"Dh = {d // h}.",
        )


def _split_sources_stage(title: str, r: Run) -> None:
    """Name the first thing the code case shows out of place: batch, token,
    feature."""
    x, h = r.args
    (b, s, _), dh = x.shape, x.size(-1) // h
    src = sources(r.got, r.ref_args[0])
    if src is None:
        values_stage(title, r)
    sb, ss, sf = src
    ib = torch.arange(b, device=x.device).view(b, 1, 1, 1)
    i_s = torch.arange(s, device=x.device).view(1, 1, s, 1)
    batch_and_token_stage(title, r, src, (sb, ib), (ss, i_s), TOKENS_INTO_HEADS)
    want = torch.arange(h, device=x.device).view(h, 1) * dh + torch.arange(
        dh, device=x.device
    )
    for head in range(h):
        if not torch.equal(sf[0, head, 0], want[head]):
            holds = sf[0, head, 0].tolist()
            WRONG_FEATURES.fail(
                title,
                f"On case {r.label} your head "
                f"{head} holds features {holds} of each token; "
                f"expected {want[head].tolist()}.",
            )


def _split_layout_stage(title: str, runs: Sequence[Run]) -> None:
    """Where the code case's values went (the last case; measured before any other
    case's exception, which it usually explains), then exceptions, then the form."""
    r = runs[-1]
    if type(r.got) is torch.Tensor and not is_right(r, 0, 0):  # subclasses: form
        _split_shape_stage(title, r)
        if r.got.dtype == r.want.dtype:
            _split_sources_stage(title, r)
    raised_stage(title, runs)
    form_stage(title, runs, S_SPLIT)


def _split_cases():
    shapes = [(2, 5, 12, 3), (1, 7, 8, 2), (3, 4, 16, 4), (4, 6, 24, 4)]
    cases = [
        Case(
            f"x [B={b}, S={s}, D={d}], n_heads={h} (Dh={d // h})",
            lambda b=b, s=s, d=d, h=h, i=i: (randn(b, s, d, seed=i), h),
        )
        for i, (b, s, d, h) in enumerate(shapes)
    ]
    cases.append(
        Case(
            "x [2, 3, 6] float64, n_heads=3",
            lambda: (randn(2, 3, 6, seed=9, dtype=torch.float64), 3),
        )
    )
    # Last: every value a distinct code, B, S, H and Dh all different (see sources).
    cases.append(
        Case(
            "x [B=2, S=3, D=20] of distinct codes, n_heads=4",
            lambda: (codes(2, 3, 20), 4),
        )
    )
    return cases


def check_split_heads(split_heads_fn) -> None:
    """``split_heads_fn(x [B, S, D], n_heads) -> [B, H, S, Dh]``."""
    with single_thread():
        runs = [
            run_function(c, split_heads_fn, split_heads, ("x", "n_heads"))
            for c in _split_cases()
        ]
        gradient = partial(gradient_stage, split_heads_fn, _merge_back)
        staged(
            "split_heads",
            runs,
            SPLIT_PITFALLS,
            (_split_layout_stage,),
            0,
            0,
            when_right=gradient,
        )


def _merge_back(g: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """The gradient a split hands back to x: the upstream [B, H, S, Dh] merged."""
    return merge_heads(g)


seal(__name__)
