"""One diagnosis per submission (tformer_grading/checks/pieces.py): a check that ran a
piece of the learner's notebook whose own check failed names that piece first.

Bug: a learner whose ``split_heads`` forgot the transpose saw its check fail, then the
attention's check fail with a diagnosis of the attention ("heads cut or merged in the
wrong layout"), and went looking for a mistake in a class that had none. Cause: each
check diagnosed its own exercise, blind to the earlier cells. Guard: a later check that
ran the failed piece's code says so before its own reading; one that did not run it
says nothing of it.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from tformer_grading.checks import ch01, pieces
from tformer_grading.checks.diagnosis import CheckFailure


def split_heads(x, n_heads):
    b, s, d = x.shape
    return x.reshape(b, n_heads, s, d // n_heads)  # the transpose forgotten


def merge_heads(x):
    b, h, s, dh = x.shape
    return x.transpose(1, 2).reshape(b, s, h * dh)


class MultiHeadAttention(nn.Module):
    """Right in itself: it calls the notebook's split_heads, which is wrong."""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        q = split_heads(self.q_proj(query), self.n_heads)
        k = split_heads(self.k_proj(key), self.n_heads)
        v = split_heads(self.v_proj(value), self.n_heads)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        return self.out_proj(merge_heads(scores.softmax(dim=-1) @ v))


class OwnSplitAttention(MultiHeadAttention):
    """Splits the heads itself: the notebook's split_heads never runs."""

    def forward(self, query, key, value, mask=None):
        b, h = query.size(0), self.n_heads

        def heads(x):
            return x.view(b, x.size(1), h, -1).transpose(1, 2)

        q, k, v = (
            heads(self.q_proj(query)),
            heads(self.k_proj(key)),
            heads(self.v_proj(value)),
        )
        w = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(-1)
        return self.out_proj(merge_heads(w @ v))


def _message(check, answer) -> str:
    with pytest.raises(CheckFailure) as failure:
        check(answer)
    return str(failure.value)


def test_a_check_that_ran_a_failed_piece_names_it_first():
    _message(ch01.check_split_heads, split_heads)
    message = _message(ch01.check_multi_head_attention, MultiHeadAttention)
    assert message.startswith(
        "MultiHeadAttention: your split_heads failed its own check (its test cell "
        "above) and ran in this one: fix split_heads first"
    ), message


def test_a_check_that_never_ran_the_failed_piece_says_nothing_of_it():
    _message(ch01.check_split_heads, split_heads)
    torch.manual_seed(0)
    ch01.check_multi_head_attention(OwnSplitAttention)  # right: it passes
    assert pieces.failed_pieces() == ["split_heads"]


def test_a_piece_whose_check_passes_again_is_forgotten():
    from tformer_ref import split_heads as right_split_heads

    _message(ch01.check_split_heads, split_heads)
    ch01.check_split_heads(right_split_heads)
    assert pieces.failed_pieces() == []


def test_a_failure_with_no_earlier_failed_piece_is_left_as_it_is():
    message = _message(ch01.check_split_heads, split_heads)
    assert "failed its own check" not in message
    assert message.startswith("split_heads: ")


def test_every_check_a_test_cell_calls_is_wrapped():
    from tformer_grading import checks

    for module in checks.exercise_modules():
        top = module.__name__.split(".")[2]
        reached = getattr(checks, top, None) or module
        for name in dir(reached):
            if name.startswith("check_"):
                assert getattr(getattr(reached, name), "_one_diagnosis", False), (
                    f"{reached.__name__}.{name} is not wrapped by pieces.wrap_checks"
                )
