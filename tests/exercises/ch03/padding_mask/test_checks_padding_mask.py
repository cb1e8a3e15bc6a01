"""padding_mask (chapter 3, book/ch03_masks): the unit tests of
``ch03.check_padding_mask``, with wrong masks (each rejected with its named diagnosis)
and right ones written differently (each accepted).

Beyond the bank (bank_padding_mask.py): the wrong-axis diagnosis explains the B == H
trap and points to the lesson (§3.1).
"""

import pytest
import torch

from tformer_grading.checks import CheckFailure, ch03

# --------------------------------------------------------------------------- padding mask


@pytest.mark.parametrize(
    "fn",
    [
        lambda t, p: (t != p)[:, None, None, :],
        lambda t, p: (
            (t != p).unsqueeze(1).unsqueeze(2)
        ),  # the seed's form, with pad_id instead of 0
        lambda t, p: t.ne(p).view(t.size(0), 1, 1, t.size(1)),
        lambda t, p: ~(t == p).reshape(t.shape[0], 1, 1, -1),
    ],
)
def test_padding_mask_accepts_right_implementations(fn, capsys):
    ch03.check_padding_mask(fn)
    assert "✓ padding_mask" in capsys.readouterr().out


@pytest.mark.parametrize(
    "fn,diagnosis",
    [
        (
            lambda t, p: (t != p).unsqueeze(1),
            "'mask broadcast over the wrong axis'",
        ),  # [B, 1, S]
        # [B, S]: no singleton axes, so the batch lines up with the queries
        (lambda t, p: t.ne(p), r"mask broadcast over the wrong axis \(\[B, S\]\)"),
        # [B, 1, S, 1]: drops padded queries, not padded keys
        (lambda t, p: (t != p).unsqueeze(1).unsqueeze(-1), "mask on the query axis"),
        # True on the padding: key_padding_mask's convention
        (lambda t, p: t.eq(p).view(t.size(0), 1, 1, -1), "mask inverted"),
        (
            lambda t, p: (t != 0).unsqueeze(1).unsqueeze(2),
            "pad id hard-coded",
        ),  # the seed's x != 0
        # 1.0 = keep, 0.0 = drop: PyTorch adds a float mask, so nothing is dropped
        (
            lambda t, p: torch.where(t != p, 1.0, 0.0)[:, None, None],
            "float mask instead of bool",
        ),
    ],
)
def test_padding_mask_rejects_wrong_implementations(fn, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch03.check_padding_mask(fn)


def test_wrong_axis_diagnosis_explains_the_batch_equals_heads_trap():
    with pytest.raises(CheckFailure) as info:
        ch03.check_padding_mask(lambda t, p: (t != p).unsqueeze(1))
    assert "B == H" in str(info.value) and "§3.1 'Padding masks'" in str(info.value)
