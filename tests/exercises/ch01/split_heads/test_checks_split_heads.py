"""split_heads (chapter 1, book/ch01_shapes): the unit tests of
``ch01.check_split_heads`` and of ``ch01.check_by_hand`` on it.

The bank (bank_split_heads.py) grades literal answers through the notebook's test
cells; these tests pin, beyond the verdicts, what a failure says: the lesson it points
to (§1.5), the shape it reports for an answer that returns its input, the message for
an answer that returns no tensor, and the hidden test's refusal of the reference's own
function.

Each wrong implementation records a bug a learner can make, why it happens, and what
guards against it: the diagnosis the check must print.
"""

import pytest
import torch
from bank_split_heads import split_reshape_permute as split_right_reshape_permute

from tformer_grading.checks import CheckFailure, ch01

# --------------------------------------------------------------------------- split_heads


def split_right_chunk_stack(x, h):
    return torch.stack(x.chunk(h, dim=-1), dim=1)


def split_right_unflatten(x, h):
    return x.unflatten(-1, (h, -1)).transpose(1, 2).contiguous()


def split_wrong_no_transpose(x, h):  # [B, S, H, Dh]: forgot to move the head axis
    return x.unflatten(-1, (h, -1))


def split_wrong_view_straight(x, h):  # right shape, but tokens are cut into heads
    return x.view(x.size(0), h, -1, x.size(-1) // h)


def split_wrong_interleaved(x, h):  # einops' "b s (d h) -> b h s d": every H-th feature
    return torch.einsum("bsdh->bhsd", x.unflatten(-1, (-1, h)))


@pytest.mark.parametrize(
    "fn", [split_right_reshape_permute, split_right_chunk_stack, split_right_unflatten]
)
def test_split_heads_accepts_right_implementations(fn, capsys):
    ch01.check_split_heads(fn)
    assert "✓ split_heads" in capsys.readouterr().out


@pytest.mark.parametrize(
    "fn,diagnosis",
    [
        (split_wrong_no_transpose, "view without transpose"),
        (split_wrong_view_straight, "sequence and head axes confused"),
        (split_wrong_interleaved, "heads interleaved"),
        (lambda x, h: x, r"'axes in the wrong order'.*\[B, S, D\]"),
        (lambda x, h: None, "expected a tensor"),
    ],
)
def test_split_heads_rejects_wrong_implementations(fn, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch01.check_split_heads(fn)


def test_split_heads_failure_points_to_the_lesson():
    with pytest.raises(CheckFailure) as info:
        ch01.check_split_heads(split_wrong_view_straight)
    assert "§1.5 'Splitting into heads' in book/ch01_shapes/heads.ipynb" in str(
        info.value
    )


def test_by_hand_rejects_calling_reference_functions():
    from tformer_ref import heads

    with pytest.raises(CheckFailure, match="calls tformer_ref.split_heads"):
        ch01.check_by_hand("split_heads", heads.split_heads, (torch.randn(2, 3, 8), 2))
