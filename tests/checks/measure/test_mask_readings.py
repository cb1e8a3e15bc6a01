"""Attention masks read back as keep patterns and named, and a keep-mask misread read
back from the weights' nonzero entries (tformer_grading/checks/measure/mask_readings.py).

Bug this guards against: each check spelling out a learner's mask and comparing it
with tril or a padding mask its own way (ch05's decoder block, the decoding bug hunt,
ch03's causal mask), so that a mask of another shape that means the same, or a
float 0/1 mask, was read differently from one check to the next.

And a second bug: the misreadings were listed inside ch03's masked-attention check
only, so that another attention check saw "weights differ from the mask's pattern"
where the mask was simply inverted, transposed or applied to the wrong axis.
"""

from __future__ import annotations

import pytest
import torch

from tformer_grading.checks.measure.mask_readings import (
    causal_keep,
    causal_reading,
    keep_pattern,
    kept_keys,
    misread_patterns,
    misreading,
    padding_reading,
    shared_pattern,
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


# ----------------------------------------------------------------- misreadings
B, H, SQ = 2, 2, 3


def _padding(*lengths, sk=4):
    """A padding keep-mask [B, 1, 1, Sk]: sequence b keeps its first lengths[b] keys."""
    kept = torch.arange(sk)[None, :] < torch.tensor(lengths)[:, None]
    return kept[:, None, None, :]


def _causal(s=4):
    return torch.ones(s, s, dtype=torch.bool).tril()[None, None]


def test_true_read_as_ignore_is_named():
    mask = _padding(2, 3)
    kept = ~mask.expand(B, H, SQ, 4)
    assert "you read True as 'ignore'" in misreading(kept, mask)


def test_a_transposed_causal_mask_is_named():
    mask = _causal()
    kept = mask.mT.expand(B, H, 4, 4)
    assert misreading(kept, mask).startswith("your weights follow the mask transposed")


def test_batch_and_heads_swapped_is_named():
    mask = _padding(1, 3)
    kept = mask.transpose(0, 1).expand(B, H, SQ, 4)
    assert "batch and heads axes swapped" in misreading(kept, mask)


def test_sequence_zeros_mask_for_every_sequence_is_named():
    mask = _padding(3, 2, 4)
    kept = mask[:1].expand(3, H, SQ, 4)
    said = misreading(kept, mask)
    assert said.startswith("your weights follow sequence 0's mask for every sequence")
    assert "axis 0 (batch)" in said


def test_a_pattern_no_misreading_gives_is_not_named():
    mask = _causal()
    kept = torch.eye(4, dtype=torch.bool).expand(B, H, 4, 4)
    assert misreading(kept, mask) is None


def test_the_rows_limit_where_a_misreading_is_judged():
    mask = _padding(2, 3)
    kept = (~mask).expand(B, H, SQ, 4).clone()
    kept[0, 0, 0] = True  # one query off the inverted pattern
    assert misreading(kept, mask) is None
    rows = torch.ones(B, H, SQ, dtype=torch.bool)
    rows[0, 0, 0] = False
    assert "you read True as 'ignore'" in misreading(kept, mask, rows)


def test_a_transposed_reading_needs_square_scores():
    mask = _padding(2, 3)
    keep = mask.expand(B, H, SQ, 4)
    words = [what for what, _, _ in misread_patterns(mask, keep)]
    assert not any("transposed" in w for w in words)
    assert any("sequence 0's mask" in w for w in words)


def test_a_mask_is_read_whatever_its_own_batch_and_heads_axes():
    """The decoding bug hunt reads a recorded target mask without knowing B and H (its
    twin of this reading, ``_pattern``, was removed)."""
    for mask in (
        causal_keep(S),
        causal_keep(S)[None, None],
        causal_keep(S).repeat(3, 1, 1),
    ):
        assert torch.equal(shared_pattern(mask, S, S), causal_keep(S))
    varies = causal_keep(S).repeat(2, 1, 1)
    varies[1] = ~varies[1]  # a planted mistake: one row of the batch inverted
    assert shared_pattern(varies, S, S) is None
    assert shared_pattern(causal_keep(S - 1), S, S) is None  # another length
    assert shared_pattern(torch.ones(1, 1, 1, S, S, dtype=torch.bool), S, S) is None
