"""Chapter 5's measured bank for decoder_block (the format: tests/bank/bank.py).

Each answer is literal learner code; a comment says what the mistake is and why a
learner would make it.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

from bank import GENERIC, right, wrong  # noqa: F401
from exercise_cells import graders
from tformer_ref.attention import MultiHeadAttention

GRADERS = graders("ch05_model", {"decoder_block": "DecoderBlock"})


# ------------------------------------------------------------------------ right ones


@right("decoder_block")
class DecoderBlockPlain(nn.Module):  # the lesson's wiring, one nn.Dropout
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        st = x.size(1)
        causal = torch.ones(st, st, dtype=torch.bool, device=x.device).tril()
        causal = causal[None, None]
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        c = self.cross_attn(x, memory, memory, mask=src_mask)
        x = self.norm2(x + self.dropout(c))
        return self.norm3(x + self.dropout(self.ff(x)))


@right("decoder_block")
# cross-attention and last norm first
class DecoderBlockCrossFirstRegistered(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.ln_ff = nn.LayerNorm(d_model)
        self.enc_dec = MultiHeadAttention(d_model, n_heads, fused=True)
        self.masked = MultiHeadAttention(d_model, n_heads)
        self.ln_self, self.ln_cross = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.w1, self.w2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.p = dropout

    def forward(self, x, memory, src_mask=None):
        from tformer_ref.masks import causal_mask

        drop = lambda t: F.dropout(t, self.p, self.training)  # noqa: E731
        causal = causal_mask(x.size(1), x.device)
        x = self.ln_self(x + drop(self.masked(x, mask=causal)))
        x = self.ln_cross(x + drop(self.enc_dec(x, memory, memory, src_mask)))
        return self.ln_ff(x + drop(self.w2(torch.relu(self.w1(x)))))


@right("decoder_block")
class DecoderBlockModuleLists(nn.Module):  # ModuleLists, no biases, ~triu(1) mask
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.attns = nn.ModuleList(
            [
                MultiHeadAttention(d_model, n_heads, dropout),
                MultiHeadAttention(d_model, n_heads, bias=False),
            ]
        )
        self.lns = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(3))
        self.up = nn.Linear(d_model, d_ff, bias=False)
        self.down = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        cross, masked = self.attns
        s = x.size(1)
        ones = torch.ones(s, s, dtype=torch.bool, device=x.device)
        future = torch.triu(ones, diagonal=1)
        x = self.lns[0](x + self.dropout(masked(x, x, x, mask=~future[None, None])))
        x = self.lns[1](x + self.dropout(cross(x, memory, memory, mask=src_mask)))
        return self.lns[2](x + self.dropout(self.down(F.relu(self.up(x)))))


@right("decoder_block")
class DecoderBlockBufferMask(nn.Module):  # a causal buffer built once, sliced per call
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, max_len=256):
        super().__init__()
        self.attention = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.source_attention = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.feed_forward = nn.Sequential(
            nn.Linear(d_model, d_ff),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(d_ff, d_model),
        )
        self.norms = nn.ModuleDict({k: nn.LayerNorm(d_model) for k in ("a", "b", "c")})
        self.drop = nn.Dropout(dropout)
        self.register_buffer("tril", torch.tril(torch.ones(max_len, max_len)).bool())

    def forward(self, x, memory, src_mask=None):
        n = x.shape[1]
        mask = self.tril[:n, :n].view(1, 1, n, n)
        a = self.attention(query=x, key=x, value=x, mask=mask)
        x = self.norms["a"](x + self.drop(a))
        h = self.source_attention(query=x, key=memory, value=memory, mask=src_mask)
        x = self.norms["b"](x + self.drop(h))
        return self.norms["c"](x + self.drop(self.feed_forward(x)))


@right("decoder_block")
class DecoderBlockSublayerHelper(nn.Module):  # one helper for "LN(x + drop(f(x)))"
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.sa = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ca = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.l1 = nn.Linear(d_model, d_ff)
        self.l2 = nn.Linear(d_ff, d_model)
        self.n = nn.ModuleList(
            [nn.LayerNorm(d_model), nn.LayerNorm(d_model), nn.LayerNorm(d_model)]
        )
        self.dropout = dropout

    def sublayer(self, i, x, f):
        return self.n[i](x + F.dropout(f(x), self.dropout, self.training))

    def forward(self, x, memory, src_mask=None):
        t = x.shape[-2]
        keep = torch.ones(1, 1, t, t, device=x.device).tril() == 1
        x = self.sublayer(0, x, lambda h: self.sa(h, h, h, keep))
        x = self.sublayer(1, x, lambda h: self.ca(h, memory, memory, src_mask))
        return self.sublayer(2, x, lambda h: self.l2(F.relu(self.l1(h))))


@right("decoder_block")
class DecoderBlockReturnWeights(nn.Module):  # asks for the weights, keeps the output
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attention = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.memory_attention = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.fc1, self.fc2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.ln_1 = nn.LayerNorm(d_model)
        self.ln_2 = nn.LayerNorm(d_model)
        self.ln_3 = nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)
        self.last_cross_weights = None

    def forward(self, x, memory, src_mask=None):
        L = x.size(1)
        idx = torch.arange(L, device=x.device)
        causal = (idx[None, :] <= idx[:, None])[None, None]
        a, _ = self.self_attention(x, x, x, mask=causal, return_weights=True)
        x = self.ln_1(x + self.drop(a))
        c, self.last_cross_weights = self.memory_attention(
            x, memory, memory, mask=src_mask, return_weights=True
        )
        x = self.ln_2(x + self.drop(c))
        return self.ln_3(x + self.drop(self.fc2(self.fc1(x).clamp(min=0))))


@right("decoder_block")
class DecoderBlockExpandedMask(nn.Module):  # the causal mask expanded to [B, 1, St, St]
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.mha_self = MultiHeadAttention(
            d_model, n_heads, dropout=dropout, fused=True
        )
        self.mha_cross = MultiHeadAttention(
            d_model, n_heads, dropout=dropout, fused=True
        )
        self.ffn = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(inplace=True), nn.Linear(d_ff, d_model)
        )
        self.norm_a = nn.LayerNorm(d_model)
        self.norm_b = nn.LayerNorm(d_model)
        self.norm_c = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, x, memory, src_mask=None):
        b, t, _ = x.shape
        mask = torch.tril(torch.ones(t, t, device=x.device)).bool().expand(b, 1, t, t)
        residual = x
        x = self.norm_a(residual + self.dropout(self.mha_self(x, x, x, mask)))
        residual = x
        c = self.mha_cross(x, memory, memory, src_mask)
        x = self.norm_b(residual + self.dropout(c))
        residual = x
        return self.norm_c(residual + self.dropout(self.ffn(x)))


@right("decoder_block")
# the mask from a comparison of float positions
class DecoderBlockFloat64Mask(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.ff_in = nn.Linear(d_model, d_ff)
        self.ff_out = nn.Linear(d_ff, d_model)
        self.norm3 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.cross = MultiHeadAttention(d_model, n_heads, dropout)
        self.masked_self = MultiHeadAttention(d_model, n_heads, dropout)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        pos = torch.arange(x.size(1), device=x.device, dtype=torch.float64)
        causal = (pos.view(-1, 1) - pos.view(1, -1) >= 0).unsqueeze(0).unsqueeze(0)
        y = self.norm1(x + self.drop(self.masked_self(x, x, x, mask=causal)))
        z = self.norm2(y + self.drop(self.cross(y, memory, memory, mask=src_mask)))
        return self.norm3(z + self.drop(self.ff_out(F.relu(self.ff_in(z)))))


# ------------------------------------------------------------------------- listed ones
# Each is the plain block with one line changed.


@wrong(
    "decoder_block", r"'decoder self-attention without the causal mask'", listed=True
)
class DecoderNoCausalMask(nn.Module):  # the encoder block copied, mask forgotten
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x)))
        c = self.cross_attn(x, memory, memory, mask=src_mask)
        x = self.norm2(x + self.dropout(c))
        return self.norm3(x + self.dropout(self.ff(x)))


@wrong("decoder_block", r"'causal mask built with triu instead of tril'", listed=True)
class DecoderTriuMask(nn.Module):  # triu and tril confused
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norms = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu()[None, None]
        x = self.norms[0](x + self.dropout(self.self_attn(x, x, x, mask=mask)))
        c = self.cross_attn(x, memory, memory, mask=src_mask)
        x = self.norms[1](x + self.dropout(c))
        return self.norms[2](x + self.dropout(self.ff(x)))


@wrong(
    "decoder_block",
    r"'cross-attention taking keys/values from the decoder'",
    listed=True,
)
class DecoderCrossSelf(nn.Module):  # the seed's argument slots: attends to itself
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        x = self.norm2(x + self.dropout(self.cross_attn(x, x, x)))
        return self.norm3(x + self.dropout(self.ff(x)))


@wrong(
    "decoder_block",
    r"'cross-attention taking keys/values from the decoder'",
    listed=True,
)
# same, keeps the src_mask (shape happens to fit)
class DecoderCrossSelfMasked(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        x = self.norm2(x + self.dropout(self.cross_attn(x, x, x, mask=src_mask)))
        return self.norm3(x + self.dropout(self.ff(x)))


@wrong(
    "decoder_block", r"'cross-attention ignores the source padding mask'", listed=True
)
class DecoderNoSourceMask(nn.Module):  # src_mask accepted and dropped
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        x = self.norm2(x + self.dropout(self.cross_attn(x, memory, memory)))
        return self.norm3(x + self.dropout(self.ff(x)))


@wrong("decoder_block", r"'cross-attention before self-attention'", listed=True)
class DecoderCrossFirst(nn.Module):  # "read the source first"
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        c = self.cross_attn(x, memory, memory, mask=src_mask)
        x = self.norm1(x + self.dropout(c))
        x = self.norm2(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        return self.norm3(x + self.dropout(self.ff(x)))


@wrong("decoder_block", r"'missing residual'", listed=True)
class DecoderNoResidual(nn.Module):  # "the norm already keeps the scale"
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        x = self.norm1(self.dropout(self.self_attn(x, x, x, mask=causal)))
        x = self.norm2(self.dropout(self.cross_attn(x, memory, memory, mask=src_mask)))
        return self.norm3(self.dropout(self.ff(x)))


@wrong("decoder_block", r"Pre-LN where Post-LN was asked", listed=True)
class DecoderPreLN(nn.Module):  # the GPT-2 habit
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        h = self.norm1(x)
        x = x + self.dropout(self.self_attn(h, h, h, mask=causal))
        h = self.norm2(x)
        x = x + self.dropout(self.cross_attn(h, memory, memory, mask=src_mask))
        return x + self.dropout(self.ff(self.norm3(x)))


# ----------------------------------------------------------------------- unlisted ones


@wrong("decoder_block", r"hides the diagonal", listed=False)
class DecoderStrictlyLowerMask(nn.Module):  # "a token must not see itself"
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        ones = torch.ones(s, s, dtype=torch.bool, device=x.device)
        mask = torch.tril(ones, diagonal=-1)
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=mask[None, None])))
        c = self.cross_attn(x, memory, memory, mask=src_mask)
        x = self.norm2(x + self.dropout(c))
        return self.norm3(x + self.dropout(self.ff(x)))


@wrong("decoder_block", r"True on the future positions only", listed=False)
class DecoderFutureMask(nn.Module):  # PyTorch's convention (True = masked) carried over
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        future = torch.triu(torch.ones(s, s, device=x.device), diagonal=1).bool()
        a = self.self_attn(x, x, x, mask=future[None, None])
        x = self.norm1(x + self.dropout(a))
        c = self.cross_attn(x, memory, memory, mask=src_mask)
        x = self.norm2(x + self.dropout(c))
        return self.norm3(x + self.dropout(self.ff(x)))


@wrong("decoder_block", r"mask is ~src_mask", listed=False)
class DecoderInvertedSourceMask(nn.Module):  # src_mask "inverted to mark the padding"
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        pad = None if src_mask is None else ~src_mask
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        x = self.norm2(x + self.dropout(self.cross_attn(x, memory, memory, mask=pad)))
        return self.norm3(x + self.dropout(self.ff(x)))


@wrong("decoder_block", r"includes the causal triangle", listed=False)
# "the decoder must never look ahead" applied twice
class DecoderCausalCross(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        st, ss = x.size(1), memory.size(1)
        causal = torch.ones(st, st, dtype=torch.bool, device=x.device).tril()
        causal = causal[None, None]
        ahead = torch.ones(st, ss, dtype=torch.bool, device=x.device).tril()[None, None]
        cross_mask = ahead if src_mask is None else ahead & src_mask
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        c = self.cross_attn(x, memory, memory, mask=cross_mask)
        x = self.norm2(x + self.dropout(c))
        return self.norm3(x + self.dropout(self.ff(x)))


@wrong("decoder_block", r"queries are the block's input x", listed=False)
class DecoderStaleQuery(nn.Module):  # new names per step, the old one used by mistake
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        h1 = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        c = self.cross_attn(x, memory, memory, mask=src_mask)
        h2 = self.norm2(h1 + self.dropout(c))
        return self.norm3(h2 + self.dropout(self.ff(h2)))


@wrong("decoder_block", r"reads x_in \+ cross-attention", listed=False)
# residual = the block's input, kept in a name
class DecoderResidualFromInput(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        residual = x
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        x = self.norm1(residual + self.dropout(self.self_attn(x, x, x, mask=causal)))
        c = self.cross_attn(x, memory, memory, mask=src_mask)
        x = self.norm2(residual + self.dropout(c))
        return self.norm3(x + self.dropout(self.ff(x)))


@wrong("decoder_block", r"same module as an earlier sublayer", listed=False)
class DecoderOneNormUsedTwice(nn.Module):  # copy-pasted line, norm1 kept
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        c = self.cross_attn(x, memory, memory, mask=src_mask)
        x = self.norm1(x + self.dropout(c))
        return self.norm3(x + self.dropout(self.ff(x)))


@wrong("decoder_block", r"same MultiHeadAttention module", listed=False)
class DecoderOneAttentionTwice(nn.Module):  # self_attn reused for the cross-attention
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        c = self.self_attn(x, memory, memory, mask=src_mask)
        x = self.norm2(x + self.dropout(c))
        return self.norm3(x + self.dropout(self.ff(x)))


@wrong("decoder_block", r"you apply GELU", listed=False)
class DecoderGelu(nn.Module):  # BERT/GPT's activation
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        c = self.cross_attn(x, memory, memory, mask=src_mask)
        x = self.norm2(x + self.dropout(c))
        return self.norm3(x + self.dropout(self.ff(x)))


@wrong("decoder_block", r"you apply no activation", listed=False)
class DecoderLinearFeedForward(nn.Module):  # the ReLU forgotten in forward
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        c = self.cross_attn(x, memory, memory, mask=src_mask)
        x = self.norm2(x + self.dropout(c))
        return self.norm3(x + self.dropout(self.linear2(self.linear1(x))))


@wrong("decoder_block", r"feed-forward reads the block's input x", listed=False)
class DecoderFeedForwardOnInput(nn.Module):  # "x" kept for the input, new names after
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        a = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        c = self.cross_attn(a, memory, memory, mask=src_mask)
        b = self.norm2(a + self.dropout(c))
        return self.norm3(b + self.dropout(self.ff(x)))


@wrong("decoder_block", r"returns 1·LayerNorm₃\(...\) \+ 1·", listed=False)
# one more residual "around the whole block"
class DecoderExtraOuterResidual(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        c = self.cross_attn(x, memory, memory, mask=src_mask)
        x = self.norm2(x + self.dropout(c))
        return x + self.norm3(x + self.dropout(self.ff(x)))


@wrong("decoder_block", r"reads 1·x \+ 2·self-attention", listed=False)
class DecoderSublayerAddedTwice(nn.Module):  # x updated, then the sum taken again
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        a = self.dropout(self.self_attn(x, x, x, mask=causal))
        x = x + a
        x = self.norm1(x + a)
        c = self.cross_attn(x, memory, memory, mask=src_mask)
        x = self.norm2(x + self.dropout(c))
        return self.norm3(x + self.dropout(self.ff(x)))


@wrong("decoder_block", r"dropout still on in eval mode", listed=False)
class DecoderFunctionalDropoutAlwaysOn(nn.Module):  # F.dropout without training=
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.p = dropout

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        x = self.norm1(x + F.dropout(self.self_attn(x, x, x, mask=causal), self.p))
        c = self.cross_attn(x, memory, memory, mask=src_mask)
        x = self.norm2(x + F.dropout(c, self.p))
        return self.norm3(x + F.dropout(self.ff(x), self.p))


@wrong("decoder_block", r"No LayerNorm runs after the feed-forward", listed=False)
class DecoderLastNormForgotten(nn.Module):  # norm3 built, never applied
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        c = self.cross_attn(x, memory, memory, mask=src_mask)
        x = self.norm2(x + self.dropout(c))
        return x + self.dropout(self.ff(x))


@wrong("decoder_block", r"feed-forward runs before the cross-attention", listed=False)
class DecoderFeedForwardSecond(nn.Module):  # the encoder block's order, cross appended
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        x = self.norm2(x + self.dropout(self.ff(x)))
        c = self.cross_attn(x, memory, memory, mask=src_mask)
        return self.norm3(x + self.dropout(c))


@wrong("decoder_block", r"feed-forward reads a LayerNorm of its input", listed=False)
class DecoderPreLNFeedForwardOnly(nn.Module):  # Post-LN attention, Pre-LN feed-forward
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        c = self.cross_attn(x, memory, memory, mask=src_mask)
        x = self.norm2(x + self.dropout(c))
        return x + self.dropout(self.ff(self.norm3(x)))


@wrong("decoder_block", r"a ReLU after the sublayer's output", listed=False)
class DecoderReluAfterFeedForward(nn.Module):  # a trailing ReLU in the Sequential
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model), nn.ReLU()
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        c = self.cross_attn(x, memory, memory, mask=src_mask)
        x = self.norm2(x + self.dropout(c))
        return self.norm3(x + self.dropout(self.ff(x)))


@wrong(
    "decoder_block",
    r"raised ValueError: mask must be .* exactly 4 dims.* at line \d+ of "
    r"your code",
    listed=False,
)
class DecoderTwoDimMask(nn.Module):  # the [St, St] mask of chapter 2, no [1, 1, ...]
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        c = self.cross_attn(x, memory, memory, mask=src_mask)
        x = self.norm2(x + self.dropout(c))
        return self.norm3(x + self.dropout(self.ff(x)))


@wrong("decoder_block", r"without src_mask raised TypeError", listed=False)
class DecoderSourceMaskRequired(nn.Module):  # src_mask given no default
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        c = self.cross_attn(x, memory, memory, mask=src_mask)
        x = self.norm2(x + self.dropout(c))
        return self.norm3(x + self.dropout(self.ff(x)))


@wrong(
    "decoder_block",
    r"raised TypeError: mask must be .*dtype torch.float32",
    listed=False,
)
class DecoderFloatMask(nn.Module):  # a 0/1 float mask, as in some tutorials
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.tril(torch.ones(1, 1, s, s, device=x.device))
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        c = self.cross_attn(x, memory, memory, mask=src_mask)
        x = self.norm2(x + self.dropout(c))
        return self.norm3(x + self.dropout(self.ff(x)))


@wrong("decoder_block", r"queries from memory|raised", listed=False)
class DecoderCrossArgumentsSwapped(nn.Module):  # (memory, x, x): query and key mixed up
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        x = self.norm2(x + self.dropout(self.cross_attn(memory, x, x)))
        return self.norm3(x + self.dropout(self.ff(x)))


@wrong("decoder_block", r"changed its input x in place", listed=False)
class DecoderInPlaceResidual(
    nn.Module
):  # x += ... "saves memory", writes into the input
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        x += self.dropout(self.self_attn(x, x, x, mask=causal))
        x = self.norm1(x)
        c = self.cross_attn(x, memory, memory, mask=src_mask)
        x = self.norm2(x + self.dropout(c))
        return self.norm3(x + self.dropout(self.ff(x)))


@wrong("decoder_block", r"elementwise_affine=False", listed=False)
class DecoderPlainNorms(nn.Module):  # "no parameters in the norm, fewer to train"
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norms = nn.ModuleList(
            nn.LayerNorm(d_model, elementwise_affine=False) for _ in range(3)
        )
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        x = self.norms[0](x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        c = self.cross_attn(x, memory, memory, mask=src_mask)
        x = self.norms[1](x + self.dropout(c))
        return self.norms[2](x + self.dropout(self.ff(x)))


@wrong(
    "decoder_block",
    r"0% of the cross-attention's output was zeroed.*expected "
    r"about 30%",
    listed=False,
)
class DecoderNoCrossDropout(nn.Module):  # dropout forgotten on the middle sublayer
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        st = x.size(1)
        causal = torch.tril(torch.ones(st, st, dtype=torch.bool, device=x.device))[
            None, None
        ]
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        x = self.norm2(x + self.cross_attn(x, memory, memory, mask=src_mask))
        return self.norm3(x + self.dropout(self.ff(x)))


@wrong(
    "decoder_block",
    r"\d+% of the feed-forward's output was zeroed.*expected "
    r"about 30%",
    listed=False,
)
class DecoderFixedFFDropout(nn.Module):  # "0.1 like the paper", hard-coded in one place
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.p = dropout
        self.attn1 = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.attn2 = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.lin1, self.lin2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.ln = nn.ModuleList([nn.LayerNorm(d_model) for _ in range(3)])

    def forward(self, x, memory, src_mask=None):
        n = x.shape[1]
        keep = torch.ones(n, n, device=x.device).tril().bool().view(1, 1, n, n)
        a = F.dropout(self.attn1(x, x, x, mask=keep), self.p, self.training)
        x = self.ln[0](x + a)
        c = F.dropout(
            self.attn2(x, memory, memory, mask=src_mask), self.p, self.training
        )
        x = self.ln[1](x + c)
        f = F.dropout(self.lin2(F.relu(self.lin1(x))), 0.1, self.training)
        return self.ln[2](x + f)


@wrong("decoder_block", r"'self-attention inputs wrong'", listed=False)
class DecoderSelfAttentionCopiedFromCross(nn.Module):  # the cross line pasted twice
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        a = self.self_attn(x, memory, memory, mask=src_mask)
        x = self.norm1(x + self.dropout(a))
        c = self.cross_attn(x, memory, memory, mask=src_mask)
        x = self.norm2(x + self.dropout(c))
        return self.norm3(x + self.dropout(self.ff(x)))
