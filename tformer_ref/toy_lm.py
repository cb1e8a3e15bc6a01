"""A tiny causal language model and synthetic token data, for chapter 7.

Chapter 7 is about *how* a model is trained (precision, accumulation, several
processes), not about the model. These few lines give every test, check and
the DDP entry point a small, deterministic model to train in well under a
second, built from the course's own :class:`~tformer_ref.attention.MultiHeadAttention`.

Shape letters: B batch, S sequence length, D = d_model, V vocabulary size.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .attention import MultiHeadAttention
from .masks import causal_mask, padding_mask


class TinyCausalLM(nn.Module):
    """Embedding + learned positions -> one pre-LN causal self-attention block
    -> logits.

    Taught in §7.1 'Mixed precision with torch.amp' (book/ch07_scale).

    Args:
        vocab: V. d_model: D. n_heads: must divide D. max_len: longest sequence.
        pad_id: the padding token; padded keys are masked.
        dropout: on the attention weights.
        fused: use ``F.scaled_dot_product_attention`` inside the attention.

    Examples::

        >>> model = TinyCausalLM(vocab=16, max_len=8)
        >>> tokens = torch.tensor([[3, 4, 5, 6], [7, 8, 0, 0]])  # 0 = padding
        >>> model(tokens).shape  # [B, S, V]
        torch.Size([2, 4, 16])
    """

    def __init__(
        self,
        vocab: int = 16,
        d_model: int = 32,
        n_heads: int = 4,
        max_len: int = 32,
        *,
        pad_id: int = 0,
        dropout: float = 0.0,
        fused: bool = False,
    ):
        super().__init__()
        self.pad_id, self.max_len = pad_id, max_len
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.attn = MultiHeadAttention(d_model, n_heads, dropout=dropout, fused=fused)
        self.norm2 = nn.LayerNorm(d_model)
        self.ff = nn.Sequential(
            nn.Linear(d_model, 2 * d_model), nn.GELU(), nn.Linear(2 * d_model, d_model)
        )
        self.head = nn.Linear(d_model, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens [B, S] (int64) -> logits [B, S, V]; position i sees tokens 0..i
        only."""
        if tokens.dim() != 2 or tokens.dtype != torch.long:
            raise TypeError(
                "tokens must be an int64 tensor [B, S], "
                f"got {tokens.dtype} {tuple(tokens.shape)}"
            )
        if tokens.size(1) > self.max_len:
            raise ValueError(
                f"sequence length {tokens.size(1)} is past max_len={self.max_len}"
            )
        s = tokens.size(1)
        x = self.embed(tokens) + self.pos(torch.arange(s, device=tokens.device))
        # Bool keep-masks (True = attend): the attention fills with dtype's own minimum,
        # so they are safe under fp16 and bf16 autocast, where -1e9 would overflow.
        mask = padding_mask(tokens, self.pad_id) & causal_mask(s, device=tokens.device)
        x = x + self.attn(self.norm1(x), mask=mask)
        x = x + self.ff(self.norm2(x))
        return self.head(x)


def make_token_data(
    n: int = 64,
    seq_len: int = 12,
    vocab: int = 16,
    pad_id: int = 0,
    min_len: int = 4,
    seed: int = 0,
) -> torch.Tensor:
    """[n, seq_len] int64 sequences of varying length, padded with ``pad_id`` at the
    end.

    Each sequence counts upwards modulo ``vocab - 1`` from a random start (skipping
    the pad id), so the next token is learnable and the loss can fall fast.
    Lengths are drawn from ``min_len..seq_len``, so batches hold different
    numbers of real tokens (what token-normalised accumulation is about).

    Taught in §7.3 'Gradient accumulation' (book/ch07_scale).

    Examples::

        >>> make_token_data(n=3, seq_len=8, seed=0)  # 15 is followed by 1: 0 is the pad
        tensor([[15,  1,  2,  3,  0,  0,  0,  0],
                [10, 11, 12, 13, 14, 15,  1,  0],
                [ 9, 10, 11, 12, 13, 14, 15,  1]])
    """
    if not 2 <= min_len <= seq_len:
        raise ValueError(
            f"need 2 <= min_len <= seq_len, got min_len={min_len}, seq_len={seq_len}"
        )
    g = torch.Generator().manual_seed(seed)
    start = torch.randint(0, vocab - 1, (n, 1), generator=g)
    body = (start + torch.arange(seq_len)) % (vocab - 1)
    body = body + (body >= pad_id).long()  # skip the pad id
    lengths = torch.randint(min_len, seq_len + 1, (n, 1), generator=g)
    return body.masked_fill(torch.arange(seq_len) >= lengths, pad_id)


def lm_loss_sum(
    model: nn.Module, tokens: torch.Tensor, pad_id: int = 0
) -> tuple[torch.Tensor, int]:
    """Next-token loss of ``tokens`` [B, S]: (sum over real target tokens (scalar
    tensor), their count).

    The loss is computed in (at least) float32 even under autocast (cross-entropy of
    low-precision logits loses accuracy); padding targets are ignored.

    Taught in §7.3 'Gradient accumulation' (book/ch07_scale).

    Examples::

        >>> tokens = torch.tensor([[3, 4, 5, 6], [7, 8, 0, 0]])
        >>> loss_sum, n_tokens = lm_loss_sum(TinyCausalLM(), tokens)
        >>> loss_sum.shape, n_tokens  # a summed scalar, and 3 + 1 real targets
        (torch.Size([]), 4)
    """
    logits = model(tokens[:, :-1])  # [B, S-1, V]
    targets = tokens[:, 1:]  # [B, S-1]
    # fp16/bf16 -> fp32; fp64 stays.
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    loss_sum = F.cross_entropy(
        logits.flatten(0, 1), targets.flatten(), ignore_index=pad_id, reduction="sum"
    )
    return loss_sum, count_targets(tokens, pad_id)


def count_targets(tokens: torch.Tensor, pad_id: int = 0) -> int:
    """Number of real (non-pad) next-token targets in ``tokens`` [B, S].

    Taught in §7.3 'Gradient accumulation' (book/ch07_scale).

    Examples::

        >>> count_targets(torch.tensor([[3, 4, 5, 6], [7, 8, 0, 0]]))  # 3 + 1
        4
    """
    return int((tokens[:, 1:] != pad_id).sum())
