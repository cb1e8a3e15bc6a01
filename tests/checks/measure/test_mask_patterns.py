"""Attention masks read back as keep patterns and named
(tformer_grading/checks/measure/mask_patterns.py).

Bug this guards against: each check spelling out a learner's mask and comparing it
with tril or a padding mask its own way (ch05's decoder block, the decoding bug hunt,
ch03's causal mask), so that a mask of another shape that means the same, or a
float 0/1 mask, was read differently from one check to the next.
"""

from __future__ import annotations

import pytest
import torch

from tformer_grading.checks.measure.mask_patterns import (
    causal_keep,
    causal_reading,
    keep_pattern,
    kept_keys,
    padding_reading,
    uniform_pattern,
)

S = 5


def _src(*lengths, sk=S):
    """A padding keep-mask [B, 1, 1, Sk]: sequence b keeps its first lengths[b]."""
    kept = torch.arange(sk)[None, :] < torch.tensor(lengths)[:, None]
    return kept[:, None, None, :]


def test_causal_keep_is_the_lower_triangle():
    assert torch.equal(causal_keep(S), torch.tril(torch.ones(S, S)).bool())
    assert causal_keep(S).dtype == torch.bool


@pytest.mark.parametrize(
    "mask",
    [
        None,
        torch.ones(1, 1, 1, 1, dtype=torch.bool),
        torch.ones(S, S, dtype=torch.bool),
        torch.ones(2, 3, S, S),  # a float 0/1 mask
    ],
)
def test_every_shape_of_a_keep_everything_mask_reads_the_same(mask):
    got = keep_pattern(mask, 2, 3, S, S)
    assert got.shape == (2, 3, S, S) and got.dtype == torch.bool and got.all()


def test_a_mask_that_does_not_broadcast_raises():
    with pytest.raises(RuntimeError):
        keep_pattern(torch.ones(S + 1, S, dtype=torch.bool), 2, 3, S, S)


@pytest.mark.parametrize(
    "mask",
    [causal_keep(S), causal_keep(S)[None, None], causal_keep(S).float()[None]],
)
def test_the_causal_mask_is_accepted_in_any_broadcastable_shape(mask):
    assert causal_reading(keep_pattern(mask, 2, 3, S, S)) == "causal"


@pytest.mark.parametrize(
    ("planted", "reading"),
    [
        (causal_keep(S).T, "triu"),
        (~causal_keep(S), "inverted"),
        (causal_keep(S).tril(-1), "no diagonal"),
        (torch.ones(S, S, dtype=torch.bool), "all visible"),
        (torch.eye(S, dtype=torch.bool), None),
        (causal_keep(S).flip(-1), None),
    ],
)
def test_a_wrong_causal_mask_is_named(planted, reading):
    assert causal_reading(keep_pattern(planted[None, None], 2, 3, S, S)) == reading


def test_a_mask_that_differs_between_rows_is_not_named():
    keep = causal_keep(S).expand(2, 3, S, S).clone()
    keep[1] = True  # row 1 sees everything, row 0 is causal
    assert uniform_pattern(keep) is None
    assert causal_reading(keep) is None


def test_the_uniform_pattern_of_a_broadcast_mask_is_its_square():
    keep = keep_pattern(causal_keep(S).T[None, None], 2, 3, S, S)
    assert torch.equal(uniform_pattern(keep), causal_keep(S).T)


def test_the_padding_mask_itself_is_the_same():
    want = keep_pattern(_src(2, 4), 2, 3, 4, S)
    assert padding_reading(keep_pattern(_src(2, 4), 2, 3, 4, S), want) == "same"
    # the same mask spelt out per query and head is the same too
    assert padding_reading(want.clone(), want) == "same"


@pytest.mark.parametrize(
    ("planted", "reading"),
    [
        (~_src(2, 4), "inverted"),
        (_src(2, 4) & causal_keep(S)[:4], "causal added"),
        (causal_keep(S)[:4][None, None], "causal instead"),
        (None, None),  # the padding ignored
        (_src(3, 4), None),  # another length
    ],
)
def test_a_wrong_padding_mask_is_named(planted, reading):
    want = keep_pattern(_src(2, 4), 2, 3, 4, S)
    assert padding_reading(keep_pattern(planted, 2, 3, 4, S), want) == reading


def test_kept_keys_writes_the_first_rows():
    assert kept_keys(causal_keep(S)) == (
        "query 0: keys [0]; query 1: keys [0, 1]; query 2: keys [0, 1, 2]"
    )
    assert kept_keys(causal_keep(S).T, rows=1) == "query 0: keys [0, 1, 2, 3, 4]"
    assert kept_keys(torch.zeros(2, 3, dtype=torch.bool)) == (
        "query 0: keys []; query 1: keys []"
    )
