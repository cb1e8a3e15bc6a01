"""Chapter 5's learner answers that the tests of several test files share: the
seed's positional encoding and its sin/cos swap (graded by the sinusoidal_encoding
tests and the chapter's stderr test), and the right decoder block with its
feed-forward (graded by the decoder_block tests and the chapter's stderr test; the
wrong decoder blocks derive from it).
"""

import math

import torch
from torch import nn

from tformer_ref.attention import MultiHeadAttention


def pe_right_div_term(n, d):  # the seed's PositionalEncoding, the usual way
    pe = torch.zeros(n, d)
    position = torch.arange(0, n, dtype=torch.float).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d, 2).float() * (-math.log(10000.0) / d))
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


def pe_swapped(n, d):  # cos in the even columns
    pe = pe_right_div_term(n, d)
    return pe.view(n, d // 2, 2).flip(-1).reshape(n, d)


class FF(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(d_model, d_ff),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(d_ff, d_model),
        )

    def forward(self, x):
        return self.net(x)


class Dec(nn.Module):
    """A right decoder block; the wrong ones override one step."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = FF(d_model, d_ff, dropout)
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.drop = nn.Dropout(dropout)

    def self_mask(self, x):
        s = x.size(1)
        return torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]

    def cross(self, x, memory, src_mask):
        return self.cross_attn(x, memory, memory, mask=src_mask)

    def forward(self, x, memory, src_mask=None):
        x = self.norm1(x + self.drop(self.self_attn(x, x, x, mask=self.self_mask(x))))
        x = self.norm2(x + self.drop(self.cross(x, memory, src_mask)))
        return self.norm3(x + self.drop(self.ff(x)))
