"""merge_heads (chapter 1, book/ch01_shapes): the unit tests of
``ch01.check_merge_heads``: right merges written differently accepted, each wrong one
rejected with its diagnosis (the bank, bank_merge_heads.py, holds many more).

Each wrong implementation records a bug a learner can make, why it happens, and what
guards against it: the diagnosis the check must print.
"""

import pytest
import torch
from bank_merge_heads import merge_cat_heads as merge_right_cat
from bank_merge_heads import merge_contiguous_view as merge_right_contiguous_view

from tformer_grading.checks import CheckFailure, ch01

# --------------------------------------------------------------------------- merge_heads


def merge_right_permute_flatten(x):
    return x.permute(0, 2, 1, 3).flatten(2)


def merge_wrong_no_transpose(x):  # [B, H, S, Dh] memory read as [B, S, D]: glues tokens
    return x.contiguous().view(x.size(0), x.size(2), -1)


def merge_wrong_order(x):  # [B, S, Dh, H] flattened: the heads' features interleaved
    return x.movedim(1, -1).flatten(2)


def merge_wrong_order_einsum(x):  # einops' "b h s d -> b s (d h)", the letters swapped
    return torch.einsum("bhsd->bsdh", x).flatten(2)


def merge_wrong_view(x):  # view after permute: refused unless x came from split_heads
    return x.permute(0, 2, 1, 3).view(x.size(0), x.size(2), -1)


@pytest.mark.parametrize(
    "fn", [merge_right_cat, merge_right_permute_flatten, merge_right_contiguous_view]
)
def test_merge_heads_accepts_right_implementations(fn, capsys):
    ch01.check_merge_heads(fn)
    assert "✓ merge_heads" in capsys.readouterr().out


@pytest.mark.parametrize(
    "fn,diagnosis",
    [
        (merge_wrong_no_transpose, "merged without transpose"),
        (merge_wrong_order, "heads merged in the wrong order"),
        (merge_wrong_order_einsum, "heads merged in the wrong order"),
        (merge_wrong_view, "view on a non-contiguous tensor"),
    ],
)
def test_merge_heads_rejects_wrong_implementations(fn, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch01.check_merge_heads(fn)
