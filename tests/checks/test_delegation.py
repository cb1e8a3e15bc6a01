"""The hidden "written by hand" tests (tformer_grading/checks/delegation.py) give their
point only for code that runs.

Bug this guards against: a hidden test that records what the learner's code calls
passed code that raised on its inputs (nothing called, so nothing forbidden), or let
the learner's exception through as a bare traceback. Found by the held-out crash trial
of issue 26: a block with its feed-forward's arguments swapped, a next_token_probs
that scatters along the batch axis, a split_heads that transposes before a view.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from tformer_grading.checks import ch01, ch04, ch05, ch08
from tformer_grading.checks.diagnosis import CheckFailure
from tformer_ref.attention import MultiHeadAttention

RAN = r"raised \w+Error.*when this test ran it to see what it calls"


def split_heads(x, n_heads):  # transposes first, then views the strided result
    b, s, d = x.shape
    return x.transpose(0, 1).view(b, n_heads, s, d // n_heads)


class EncoderBlock(nn.Module):  # a LayerNorm over d_ff where d_model belongs
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2 = nn.LayerNorm(d_ff), nn.LayerNorm(d_ff)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        x = self.norm1(x + self.drop(self.attn(x, x, x, mask=mask)))
        return self.norm2(x + self.drop(self.ff(x)))


class DecoderBlock(nn.Module):  # cross-attention given (memory, x, x)
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norms = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(3))

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
        x = self.norms[0](x + self.self_attn(x, x, x, mask=causal))
        x = self.norms[1](x + self.cross_attn(memory, x, x, mask=src_mask))
        return self.norms[2](x + self.ff(x))


def next_token_probs(logits, temperature=1.0, top_p=1.0):  # scatter along dim 0
    probs = F.softmax(logits / temperature, dim=-1)
    sorted_p, order = probs.sort(dim=-1, descending=True)
    keep_sorted = sorted_p.cumsum(-1) - sorted_p < top_p
    keep = torch.zeros_like(keep_sorted).scatter(0, order, keep_sorted)
    probs = probs * keep
    return probs / probs.sum(-1, keepdim=True)


@pytest.mark.parametrize(
    "hidden_test",
    [
        lambda: ch01.check_by_hand(
            "split_heads", split_heads, (torch.randn(2, 3, 8), 2)
        ),
        lambda: ch04.check_block_by_hand(EncoderBlock),
        lambda: ch05.check_decoder_by_hand(DecoderBlock),
        lambda: ch08.check_next_token_probs_by_hand(next_token_probs),
    ],
    ids=["split_heads", "encoder_block", "decoder_block", "next_token_probs"],
)
def test_a_hidden_test_fails_code_that_raises(hidden_test, capsys):
    with pytest.raises(CheckFailure, match=RAN):
        hidden_test()
    assert capsys.readouterr().err == ""
