"""A keep-mask misread, read back from the weights' nonzero entries
(tformer_grading/checks/measure/mask_misreadings.py).

Bug this guards against: the misreadings listed inside ch03's masked-attention check
only, so that another attention check saw "weights differ from the mask's pattern"
where the mask was simply inverted, transposed or applied to the wrong axis.
"""

from __future__ import annotations

import torch

from tformer_grading.checks.measure.mask_misreadings import (
    misread_patterns,
    misreading,
)

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
