"""The Transformer's two kinds of layer: the encoder block and the decoder block.

Shape letters: B batch, S (Ss, St) sequence lengths, D = d_model, F = d_ff.

Each sublayer (attention or feed-forward) is wrapped in a residual connection
and a LayerNorm, in one of two arrangements (:class:`SublayerConnection`):

* Post-LN, the paper's (Vaswani et al. 2017, §5.4):
  ``x = LayerNorm(x + Dropout(Sublayer(x)))``. Dropout acts on the sublayer's
  output *before* the residual add, never after the norm.
* Pre-LN (``norm_first=True``, Xiong et al. 2020):
  ``x = x + Dropout(Sublayer(LayerNorm(x)))``. The residual path is never
  normalised, so a stack of them needs one final LayerNorm
  (see :class:`tformer_ref.model.Encoder`).

With the same weights these blocks equal ``nn.TransformerEncoderLayer`` and
``nn.TransformerDecoderLayer`` (``batch_first=True``, ReLU, same ``norm_first``);
tests/reference/test_blocks.py proves it.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from .attention import MultiHeadAttention
from .masks import causal_mask


class FeedForward(nn.Module):
    """Position-wise feed-forward network:
    ``Linear(D, F) -> ReLU -> Dropout -> Linear(F, D)``.

    The same two-layer MLP is applied to every position separately. The paper
    uses F = 4·D (2048 for D = 512), the seed's ``forward_expansion = 4``.
    The inner dropout is PyTorch's (``nn.TransformerEncoderLayer`` has it); the
    paper only drops the sublayer output, which the block does.

    Taught in §4.2 'The feed-forward sublayer' (book/ch04_blocks).

    Args:
        d_model: D. d_ff: F. dropout: on the hidden activations (train mode only).

    Examples::

        >>> ff = FeedForward(8, 32)
        >>> ff(torch.randn(2, 5, 8)).shape
        torch.Size([2, 5, 8])
        >>> sum(p.numel() for p in ff.parameters())  # 2·D·F + F + D
        552
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0):
        super().__init__()
        if d_model <= 0 or d_ff <= 0:
            raise ValueError(
                f"d_model and d_ff must be positive, got d_model={d_model}, d_ff={d_ff}"
            )
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [..., D] -> [..., D]."""
        return self.linear2(self.dropout(F.relu(self.linear1(x))))


class SublayerConnection(nn.Module):
    """The residual connection, LayerNorm and dropout around one sublayer ``f``.

    The Annotated Transformer's ``SublayerConnection``, with both arrangements:

    * Post-LN (``norm_first=False``, the paper): ``norm(x + dropout(f(x)))``;
    * Pre-LN (``norm_first=True``): ``x + dropout(f(norm(x)))``.

    It owns the LayerNorm and the dropout; ``f`` (attention or feed-forward) is
    passed at call time, so one class serves every sublayer of both blocks.

    Taught in §4.5 'Post-LN and Pre-LN' (book/ch04_blocks).

    Args:
        d_model: D, the size of the LayerNorm. dropout: on ``f``'s output.
        norm_first: False for Post-LN, True for Pre-LN.

    Examples::

        >>> x = torch.randn(2, 3, 4)
        >>> pre = SublayerConnection(4, dropout=0.0, norm_first=True)
        >>> torch.equal(pre(x, torch.zeros_like), x)  # f = 0: x passes untouched
        True
        >>> post = SublayerConnection(4, dropout=0.0)
        >>> torch.allclose(post(x, torch.zeros_like), post.norm(x))  # ... or normalised
        True
    """

    def __init__(self, d_model: int, dropout: float = 0.1, *, norm_first: bool = False):
        super().__init__()
        self.norm_first = norm_first
        self.norm = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(
        self, x: torch.Tensor, f: Callable[[torch.Tensor], torch.Tensor]
    ) -> torch.Tensor:
        """x [B, S, D] and the sublayer f ([B, S, D] -> [B, S, D]) -> [B, S, D]."""
        if self.norm_first:
            return x + self.dropout(f(self.norm(x)))
        return self.norm(x + self.dropout(f(x)))


class EncoderBlock(nn.Module):
    """Self-attention then feed-forward, each in a :class:`SublayerConnection`.

    Taught in §4.4 'Where dropout goes' (book/ch04_blocks).

    Args:
        d_model: D. n_heads: H (divides D). d_ff: F.
        dropout: on each sublayer's output (and on the attention weights and the FFN's
            hidden layer).
        norm_first: False for Post-LN (the paper), True for Pre-LN.
        fused: attention through ``F.scaled_dot_product_attention`` (same result,
            faster).

    Examples::

        >>> block = EncoderBlock(8, 2, 32, dropout=0.0).eval()
        >>> x, keep = torch.randn(2, 5, 8), torch.ones(2, 1, 1, 5, dtype=torch.bool)
        >>> block(x, keep).shape
        torch.Size([2, 5, 8])
        >>> block.norm_first, EncoderBlock(8, 2, 32, norm_first=True).norm_first
        (False, True)
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.1,
        norm_first: bool = False,
        *,
        fused: bool = False,
    ):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout, fused=fused)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.attn_sub = SublayerConnection(d_model, dropout, norm_first=norm_first)
        self.ff_sub = SublayerConnection(d_model, dropout, norm_first=norm_first)

    @property
    def norm_first(self) -> bool:
        """True for Pre-LN, False for Post-LN (fixed when the block is built)."""
        return self.attn_sub.norm_first

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None = None, kv=None
    ) -> torch.Tensor:
        """x [B, S, D], mask: bool (True = attend) broadcastable to [B, H, S, Sk]
        (Sk = S, or cached + S with ``kv``, a :class:`~tformer_ref.kv_cache.LayerKV`).
        Returns [B, S, D]."""
        x = self.attn_sub(x, lambda h: self.self_attn(h, h, h, mask=mask, kv=kv))
        return self.ff_sub(x, self.ff)


class DecoderBlock(nn.Module):
    """Masked self-attention, cross-attention to the encoder's output, feed-forward.

    Cross-attention takes its *queries* from the decoder and its *keys and values*
    from the encoder's output (``memory``): that is how the target reads the source.

    Taught in §5.6 'Encoder, decoder and cross-attention' (book/ch05_model).

    Args: as :class:`EncoderBlock`.

    Examples::

        >>> block = DecoderBlock(8, 2, 32, dropout=0.0).eval()
        >>> x, memory = torch.randn(2, 4, 8), torch.randn(2, 6, 8)
        >>> block(x, memory).shape  # no self_mask: the causal mask
        torch.Size([2, 4, 8])
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.1,
        norm_first: bool = False,
        *,
        fused: bool = False,
    ):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout, fused=fused)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout, fused=fused)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.attn_sub = SublayerConnection(d_model, dropout, norm_first=norm_first)
        self.cross_sub = SublayerConnection(d_model, dropout, norm_first=norm_first)
        self.ff_sub = SublayerConnection(d_model, dropout, norm_first=norm_first)

    @property
    def norm_first(self) -> bool:
        """True for Pre-LN, False for Post-LN (fixed when the block is built)."""
        return self.attn_sub.norm_first

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        self_mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
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
        x = self.attn_sub(x, lambda h: self.self_attn(h, h, h, mask=self_mask))
        x = self.cross_sub(x, lambda h: self.cross_attn(h, memory, memory, memory_mask))
        return self.ff_sub(x, self.ff)
