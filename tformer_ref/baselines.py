"""PyTorch's own ``nn.Transformer`` behind the course's model interface.

The peer that the reference model is measured against (``make bench``), and a
model the training and decoding code can be developed against: anything with
``forward(src, tgt_in)``, ``encode(src)`` and ``decode(tgt_in, memory, src_mask)``
trains and decodes with :mod:`tformer_ref.training` and :mod:`tformer_ref.decoding`.

Shape letters: B batch, Ss source length, St target length, D = d_model, V vocabulary.
Masks follow the package convention (True = may attend); ``nn.Transformer`` wants
the opposite (True = ignore), so they are inverted right where they are handed over.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from .masks import padding_mask


def sinusoidal_table(max_len: int, d_model: int) -> torch.Tensor:
    """[max_len, D]: PE(p, 2i) = sin(p / 10000^(2i/D)), PE(p, 2i+1) = cos(same)
    (Vaswani et al. §3.5), computed independently of :mod:`tformer_ref.positions`.

    Used in §6.5 'Exploding gradients and clipping' (book/ch06_training).
    (Inside :class:`TorchTransformer`, which the exercise's train_step checks train.)

    Examples::

        >>> from tformer_ref.positions import sinusoidal_encoding
        >>> ours = sinusoidal_encoding(50, 16)
        >>> torch.allclose(sinusoidal_table(50, 16), ours, atol=1e-5)
        True
    """
    pos = torch.arange(max_len, dtype=torch.float32)[:, None]
    pairs = torch.arange(0, d_model, 2, dtype=torch.float32)
    freq = torch.exp(pairs * (-math.log(10000.0) / d_model))
    table = torch.zeros(max_len, d_model)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq)[:, : d_model // 2]
    return table


class TokenEmbedding(nn.Module):
    """Token ids [B, S] -> [B, S, D]: embedding × √D plus positions (sinusoidal or
    learned), then dropout.

    Used in §6.5 'Exploding gradients and clipping' (book/ch06_training).
    (Inside :class:`TorchTransformer`, which the exercise's train_step checks train.)

    Examples::

        >>> embed = TokenEmbedding(10, 8, 6, dropout=0.0, positions="learned", pad_id=0)
        >>> embed(torch.tensor([[3, 4, 0]])).shape
        torch.Size([1, 3, 8])
    """

    def __init__(
        self,
        vocab: int,
        d_model: int,
        max_len: int,
        dropout: float,
        positions: str,
        pad_id: int,
    ):
        super().__init__()
        if positions not in ("sinusoidal", "learned"):
            raise ValueError(
                f"positions must be 'sinusoidal' or 'learned', got {positions!r}"
            )
        self.tokens = nn.Embedding(vocab, d_model, padding_idx=pad_id)
        self.max_len, self.scale = max_len, math.sqrt(d_model)
        if positions == "learned":
            self.positions = nn.Embedding(max_len, d_model)
        else:
            table = sinusoidal_table(max_len, d_model)
            self.register_buffer("table", table, persistent=False)
            self.positions = None
        self.dropout = nn.Dropout(dropout)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if ids.size(1) > self.max_len:
            raise ValueError(
                f"sequence length must be <= max_len={self.max_len}, got {ids.size(1)}"
            )
        table = self.positions.weight if self.positions is not None else self.table
        pos = table[: ids.size(1)]
        return self.dropout(self.tokens(ids) * self.scale + pos)


def _check_ids(name: str, ids: torch.Tensor) -> None:
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.dtype != torch.long:
        is_tensor = isinstance(ids, torch.Tensor)
        got = f"{tuple(ids.shape)} {ids.dtype}" if is_tensor else type(ids).__name__
        raise TypeError(f"{name} must be a LongTensor of token ids [B, S], got {got}")


class TorchTransformer(nn.Module):
    """Encoder–decoder built on ``nn.Transformer(batch_first=True)``, with the course
    model's interface.

    Args:
        src_vocab, tgt_vocab: vocabulary sizes.
        d_model, n_heads, n_layers, d_ff, dropout: as in ``nn.Transformer``
            (n_layers for both encoder and decoder).
        max_len: longest sequence.
        pad_id: padding token id (masked as a key, ignored nowhere else).
        norm_first: Pre-LN.
        positions: "sinusoidal" or "learned".
        tie_embeddings: the output projection shares the target embedding's weight.
        fused: accepted for interface compatibility (PyTorch's layers always use their
            fused kernels).

    Used in §6.5 'Exploding gradients and clipping' (book/ch06_training).
    (The exercise's train_step checks train it.)

    Examples::

        >>> model = TorchTransformer(11, 13, d_model=8, n_heads=2, n_layers=1, d_ff=16)
        >>> model.eval()(torch.tensor([[5, 6, 0]]), torch.tensor([[1, 4]])).shape
        torch.Size([1, 2, 13])
    """

    def __init__(
        self,
        src_vocab: int,
        tgt_vocab: int,
        d_model: int = 512,
        n_heads: int = 8,
        n_layers: int = 2,
        d_ff: int = 2048,
        *,
        dropout: float = 0.1,
        max_len: int = 512,
        pad_id: int = 0,
        norm_first: bool = False,
        positions: str = "sinusoidal",
        tie_embeddings: bool = False,
        fused: bool = True,
    ):
        super().__init__()
        if n_heads <= 0 or d_model % n_heads:
            raise ValueError(
                "d_model must be divisible by n_heads, "
                f"got d_model={d_model}, n_heads={n_heads}"
            )
        self.d_model, self.n_heads, self.n_layers = d_model, n_heads, n_layers
        self.pad_id = pad_id
        embedding = dict(dropout=dropout, positions=positions, pad_id=pad_id)
        self.src_embed = TokenEmbedding(src_vocab, d_model, max_len, **embedding)
        self.tgt_embed = TokenEmbedding(tgt_vocab, d_model, max_len, **embedding)
        enc_layer = nn.TransformerEncoderLayer(
            d_model, n_heads, d_ff, dropout, batch_first=True, norm_first=norm_first
        )
        # enable_nested_tensor=False: the nested-tensor fast path warns for Pre-LN and
        # we never want warnings.
        encoder = nn.TransformerEncoder(
            enc_layer, n_layers, nn.LayerNorm(d_model), enable_nested_tensor=False
        )
        self.transformer = nn.Transformer(
            d_model,
            n_heads,
            n_layers,
            n_layers,
            d_ff,
            dropout,
            batch_first=True,
            norm_first=norm_first,
            custom_encoder=encoder,
        )
        self.out = nn.Linear(d_model, tgt_vocab)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        # Tie after initialising, so both names point at the same initialised Parameter.
        if tie_embeddings:
            self.out.weight = self.tgt_embed.tokens.weight

    def encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """src [B, Ss] -> (memory [B, Ss, D], src_mask [B, 1, 1, Ss], True = real
        token)."""
        _check_ids("src", src)
        src_mask = padding_mask(src, self.pad_id)
        memory = self.transformer.encoder(
            self.src_embed(src), src_key_padding_mask=~src_mask[:, 0, 0]
        )
        return memory, src_mask

    def decode(
        self,
        tgt_in: torch.Tensor,
        memory: torch.Tensor,
        src_mask: torch.Tensor,
        tgt_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """tgt_in [B, St], memory [B, Ss, D], src_mask [B, 1, 1, Ss]
        -> logits [B, St, V].

        ``tgt_mask`` ([1, 1, St, St] or [St, St] bool, True = may attend) defaults to
        the causal mask.
        """
        _check_ids("tgt_in", tgt_in)
        st = tgt_in.size(1)
        if tgt_mask is None:
            ignore = torch.ones(st, st, dtype=torch.bool, device=tgt_in.device).triu(1)
            causal = True
        else:
            ignore = ~tgt_mask.reshape(st, st)
            causal = False
        out = self.transformer.decoder(
            self.tgt_embed(tgt_in),
            memory,
            tgt_mask=ignore,
            tgt_is_causal=causal,
            tgt_key_padding_mask=tgt_in == self.pad_id,
            memory_key_padding_mask=~src_mask[:, 0, 0],
        )
        return self.out(out)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """src [B, Ss], tgt_in [B, St] -> logits [B, St, V] (teacher forcing)."""
        memory, src_mask = self.encode(src)
        return self.decode(tgt_in, memory, src_mask)
