"""The Transformer's two kinds of layer: the encoder block and the decoder block.

Shape letters: B batch, S (Ss, St) sequence lengths, D = d_model, F = d_ff.

Each sublayer (attention or feed-forward) is wrapped in a residual connection
and a LayerNorm, in one of two arrangements:

* Post-LN, the paper's (Vaswani et al. 2017, §5.4): ``x = LayerNorm(x + Dropout(Sublayer(x)))``.
  Dropout acts on the sublayer's output *before* the residual add, never after the norm.
* Pre-LN (``norm_first=True``, Xiong et al. 2020): ``x = x + Dropout(Sublayer(LayerNorm(x)))``.
  The residual path is never normalised, so a stack of them needs one final LayerNorm
  (see :class:`tformer_ref.model.Encoder`).

With the same weights these blocks equal ``nn.TransformerEncoderLayer`` and
``nn.TransformerDecoderLayer`` (``batch_first=True``, ReLU, same ``norm_first``);
tests/reference/test_blocks.py proves it.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .attention import MultiHeadAttention
from .masks import causal_mask


class FeedForward(nn.Module):
    """Position-wise feed-forward network: ``Linear(D, F) -> ReLU -> Dropout -> Linear(F, D)``.

    The same two-layer MLP is applied to every position separately. The paper
    uses F = 4·D (2048 for D = 512), the seed's ``forward_expansion = 4``.
    The inner dropout is PyTorch's (``nn.TransformerEncoderLayer`` has it); the
    paper only drops the sublayer output, which the block does.

    Args:
        d_model: D. d_ff: F. dropout: on the hidden activations (train mode only).
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0):
        super().__init__()
        if d_model <= 0 or d_ff <= 0:
            raise ValueError(f"d_model and d_ff must be positive, got d_model={d_model}, d_ff={d_ff}")
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [..., D] -> [..., D]."""
        return self.linear2(self.dropout(F.relu(self.linear1(x))))


class EncoderBlock(nn.Module):
    """Self-attention then feed-forward, each with residual, LayerNorm and dropout.

    Args:
        d_model: D. n_heads: H (divides D). d_ff: F.
        dropout: on each sublayer's output (and on the attention weights and the FFN's hidden layer).
        norm_first: False for Post-LN (the paper), True for Pre-LN.
        fused: attention through ``F.scaled_dot_product_attention`` (same result, faster).
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1,
                 norm_first: bool = False, fused: bool = False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout, fused=fused)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """x [B, S, D], mask bool (True = attend) broadcastable to [B, H, S, S] -> [B, S, D]."""
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.dropout1(self.self_attn(h, h, h, mask=mask))
            return x + self.dropout2(self.ff(self.norm2(x)))
        x = self.norm1(x + self.dropout1(self.self_attn(x, x, x, mask=mask)))
        return self.norm2(x + self.dropout2(self.ff(x)))


class DecoderBlock(nn.Module):
    """Masked self-attention, cross-attention to the encoder's output, feed-forward.

    Cross-attention takes its *queries* from the decoder and its *keys and values*
    from the encoder's output (``memory``): that is how the target reads the source.

    Args: as :class:`EncoderBlock`.
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1,
                 norm_first: bool = False, fused: bool = False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout, fused=fused)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout, fused=fused)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, memory: torch.Tensor, self_mask: torch.Tensor | None = None,
                memory_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Decode one layer.

        Args:
            x: target states [B, St, D]. memory: encoder output [B, Ss, D].
            self_mask: bool keep-mask broadcastable to [B, H, St, St]; when None the
                causal mask is used (a decoder must never see the future).
            memory_mask: bool keep-mask broadcastable to [B, H, St, Ss], usually the
                source padding mask [B, 1, 1, Ss].

        Returns:
            [B, St, D].
        """
        if self_mask is None:
            self_mask = causal_mask(x.size(1), device=x.device)
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.dropout1(self.self_attn(h, h, h, mask=self_mask))
            x = x + self.dropout2(self.cross_attn(self.norm2(x), memory, memory, mask=memory_mask))
            return x + self.dropout3(self.ff(self.norm3(x)))
        x = self.norm1(x + self.dropout1(self.self_attn(x, x, x, mask=self_mask)))
        x = self.norm2(x + self.dropout2(self.cross_attn(x, memory, memory, mask=memory_mask)))
        return self.norm3(x + self.dropout3(self.ff(x)))
