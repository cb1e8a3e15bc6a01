"""causal_mask (chapter 3, book/ch03_masks): the unit tests of
``ch03.check_causal_mask``, with wrong masks (each rejected with its named diagnosis)
and right ones written differently (each accepted).

Beyond the bank (bank_causal_mask.py): a mask right only up to a buffer's size is named
with the size where it fails.
"""

import pytest
import torch

from tformer_grading.checks import CheckFailure, ch03

# --------------------------------------------------------------------------- causal mask


@pytest.mark.parametrize(
    "fn",
    [
        lambda s: torch.ones(s, s, dtype=torch.bool).tril()[None, None],
        lambda s: torch.tril(
            torch.ones(s, s)
        ).bool(),  # [S, S] broadcasts the same way: accepted
        lambda s: (torch.arange(s)[:, None] >= torch.arange(s)[None, :]).view(
            1, 1, s, s
        ),
        lambda s: ~torch.ones(1, 1, s, s, dtype=torch.bool).triu(1),
    ],
)
def test_causal_mask_accepts_right_implementations(fn, capsys):
    ch03.check_causal_mask(fn)
    assert "✓ causal_mask" in capsys.readouterr().out


@pytest.mark.parametrize(
    "fn,diagnosis",
    [
        (
            lambda s: torch.triu(torch.ones(s, s)).bool(),
            "triu instead of tril",
        ),  # the future, not the past
        # True = ignore, nn.MultiheadAttention's convention
        (
            lambda s: ~torch.ones(s, s, dtype=torch.bool).tril()[None, None],
            "mask inverted",
        ),
        (
            lambda s: (torch.arange(s)[:, None] < torch.arange(s)).view(1, 1, s, s),
            "mask inverted",
        ),
        # key < query, strictly: nobody attends to itself
        (lambda s: torch.arange(s)[:, None] > torch.arange(s), "diagonal excluded"),
        (
            lambda s: torch.tril(torch.ones(1, 1, s, s)),
            "float mask instead of bool",
        ),  # the seed's tril(ones) as is
    ],
)
def test_causal_mask_rejects_wrong_implementations(fn, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch03.check_causal_mask(fn)


def test_a_mask_right_only_up_to_a_buffer_size_is_named_with_the_size_it_fails():
    """Bug (held-out trial 2026-12-06): a mask sliced from a 256 × 256 buffer passed,
    since every case was shorter. Guard: one case longer than any usual block size."""
    buffer = torch.ones(256, 256).tril().bool()

    def causal_mask(size):
        return buffer[:size, :size].unsqueeze(0).unsqueeze(0)

    with pytest.raises(
        CheckFailure, match=r"long sequences.*returned shape \[1, 1, 256"
    ):
        ch03.check_causal_mask(causal_mask)
