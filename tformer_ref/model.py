"""The whole model: encoder, decoder, the encoder-decoder Transformer, and a decoder-only LM.

Shape letters: B batch, Ss source length, St target length, S length, D = d_model,
V vocabulary size.

Choices, each one an argument:

* ``norm_first``: Post-LN (the paper) or Pre-LN blocks, see :mod:`tformer_ref.blocks`.
* ``final_norm``: a LayerNorm after the last block of each stack. Pre-LN needs one
  (its residual stream is never normalised otherwise); the paper's Post-LN has none,
  since every block already ends with a norm. ``None`` (the default) means exactly
  that: ``final_norm = norm_first``. ``nn.Transformer`` always adds one, for both
  settings; pass ``final_norm=True`` to match it.
* ``positions``: ``"sinusoidal"`` (the paper) or ``"learned"`` (a table of ``max_len`` rows).
* ``tie_embeddings``: ``False``; ``True`` shares one Parameter between the target
  embedding and the output projection; ``"all"`` also shares it with the source
  embedding (the paper, §3.4, with one vocabulary for both languages).
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn

from .blocks import DecoderBlock, EncoderBlock
from .masks import causal_mask, padding_mask
from .positions import make_positions


def _final_norm(d_model: int, norm_first: bool, final_norm: bool | None) -> nn.Module:
    use = norm_first if final_norm is None else final_norm
    return nn.LayerNorm(d_model) if use else nn.Identity()


class Encoder(nn.Module):
    """A stack of :class:`EncoderBlock` (on embeddings, not token ids): x [B, S, D] -> [B, S, D]."""

    def __init__(self, d_model: int, n_heads: int, n_layers: int, d_ff: int, dropout: float = 0.1,
                 norm_first: bool = False, final_norm: bool | None = None, fused: bool = False):
        super().__init__()
        self.layers = nn.ModuleList(EncoderBlock(d_model, n_heads, d_ff, dropout, norm_first, fused)
                                    for _ in range(n_layers))
        self.norm = _final_norm(d_model, norm_first, final_norm)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """x [B, S, D]; mask bool keep-mask broadcastable to [B, H, S, S] (the padding mask [B, 1, 1, S])."""
        for layer in self.layers:
            x = layer(x, mask)
        return self.norm(x)


class Decoder(nn.Module):
    """A stack of :class:`DecoderBlock`: x [B, St, D], memory [B, Ss, D] -> [B, St, D]."""

    def __init__(self, d_model: int, n_heads: int, n_layers: int, d_ff: int, dropout: float = 0.1,
                 norm_first: bool = False, final_norm: bool | None = None, fused: bool = False):
        super().__init__()
        self.layers = nn.ModuleList(DecoderBlock(d_model, n_heads, d_ff, dropout, norm_first, fused)
                                    for _ in range(n_layers))
        self.norm = _final_norm(d_model, norm_first, final_norm)

    def forward(self, x: torch.Tensor, memory: torch.Tensor, self_mask: torch.Tensor | None = None,
                memory_mask: torch.Tensor | None = None) -> torch.Tensor:
        """self_mask broadcastable to [B, H, St, St] (None: causal); memory_mask to [B, H, St, Ss]."""
        for layer in self.layers:
            x = layer(x, memory, self_mask, memory_mask)
        return self.norm(x)


def _check_tokens(tokens, name: str) -> None:
    if not isinstance(tokens, torch.Tensor):
        raise TypeError(f"{name} must be a LongTensor of token ids [B, S], got {type(tokens).__name__}")
    if tokens.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"{name} must hold integer token ids (torch.long) [B, S], got dtype {tokens.dtype}; "
                        "a float tensor such as torch.ones(1, 1).fill_(SOS) cannot index an embedding")
    if tokens.dim() != 2:
        raise ValueError(f"{name} must have shape [B, S], got {tuple(tokens.shape)}")


def xavier_init_(module: nn.Module) -> None:
    """The course's initialisation: Xavier-uniform for every Linear weight, zero biases,
    N(0, 1/D) for embeddings (so that embedding·√D has unit variance), LayerNorm at (1, 0).

    The seed's loop (``xavier_uniform_`` on every parameter with ``dim() > 1``) also
    hits the embedding tables, and with them a tied output projection.
    """
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.xavier_uniform_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=m.embedding_dim ** -0.5)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


class Transformer(nn.Module):
    """The encoder-decoder Transformer of Vaswani et al. 2017 (defaults: the seed's 8-head, 2-layer model).

    ``forward(src [B, Ss], tgt_in [B, St]) -> logits [B, St, tgt_vocab]``: token ids in,
    padding masks built from ``pad_id``, the causal mask built for the decoder.

    Args:
        src_vocab, tgt_vocab: vocabulary sizes. d_model: D. n_heads: H. n_layers: blocks per stack.
        d_ff: F (the seed's ``forward_expansion * embed_size``; 4·D in the paper).
        dropout: on embeddings+positions and on every sublayer output. max_len: rows of a learned
            position table (a sinusoidal one is precomputed to this length, and computed beyond it).
        pad_id: the padding token id. norm_first, positions, tie_embeddings, final_norm: see the module doc.
        fused: attention through ``F.scaled_dot_product_attention`` (same result as the plain path).
    """

    def __init__(self, src_vocab: int, tgt_vocab: int, d_model: int = 512, n_heads: int = 8, n_layers: int = 2,
                 d_ff: int = 2048, dropout: float = 0.1, max_len: int = 512, pad_id: int = 0,
                 norm_first: bool = False, positions: str = "sinusoidal", tie_embeddings: bool | str = False,
                 fused: bool = True, final_norm: bool | None = None):
        super().__init__()
        if tie_embeddings not in (False, True, "all"):
            raise ValueError(f"tie_embeddings must be False, True or 'all', got {tie_embeddings!r}")
        if tie_embeddings == "all" and src_vocab != tgt_vocab:
            raise ValueError(f"tie_embeddings='all' needs one shared vocabulary, got src_vocab={src_vocab}, "
                             f"tgt_vocab={tgt_vocab}")
        self.d_model, self.pad_id, self.tie_embeddings = d_model, pad_id, tie_embeddings
        self.src_embed = nn.Embedding(src_vocab, d_model)
        self.tgt_embed = nn.Embedding(tgt_vocab, d_model)
        self.src_pos = make_positions(positions, d_model, max_len)
        self.tgt_pos = make_positions(positions, d_model, max_len)
        self.dropout = nn.Dropout(dropout)
        self.encoder = Encoder(d_model, n_heads, n_layers, d_ff, dropout, norm_first, final_norm, fused)
        self.decoder = Decoder(d_model, n_heads, n_layers, d_ff, dropout, norm_first, final_norm, fused)
        self.generator = nn.Linear(d_model, tgt_vocab)
        xavier_init_(self)
        # Tie after initialising: one Parameter object, seen once by parameters() and the optimizer.
        if tie_embeddings:
            self.generator.weight = self.tgt_embed.weight
        if tie_embeddings == "all":
            self.src_embed.weight = self.tgt_embed.weight

    def embed(self, tokens: torch.Tensor, table: nn.Embedding, positions: nn.Module) -> torch.Tensor:
        """tokens [B, S] -> Dropout(table(tokens)·√D + positions) [B, S, D] (the paper's §3.4 and §5.4)."""
        return self.dropout(positions(table(tokens) * math.sqrt(self.d_model)))

    def encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """src [B, Ss] -> (memory [B, Ss, D], src_mask [B, 1, 1, Ss])."""
        _check_tokens(src, "src")
        src_mask = padding_mask(src, self.pad_id)
        return self.encoder(self.embed(src, self.src_embed, self.src_pos), src_mask), src_mask

    def decode(self, tgt_in: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor | None) -> torch.Tensor:
        """tgt_in [B, St], memory [B, Ss, D], src_mask [B, 1, 1, Ss] -> logits [B, St, tgt_vocab]."""
        _check_tokens(tgt_in, "tgt_in")
        self_mask = padding_mask(tgt_in, self.pad_id) & causal_mask(tgt_in.size(1), device=tgt_in.device)
        x = self.decoder(self.embed(tgt_in, self.tgt_embed, self.tgt_pos), memory, self_mask, src_mask)
        return self.generator(x)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """src [B, Ss], tgt_in [B, St] (the target shifted right) -> logits [B, St, tgt_vocab]."""
        memory, src_mask = self.encode(src)
        return self.decode(tgt_in, memory, src_mask)


class DecoderOnlyLM(nn.Module):
    """A decoder-only language model (GPT's shape): causal self-attention blocks, no encoder,
    no cross-attention. A decoder-only block *is* an :class:`EncoderBlock` given the causal mask.

    ``forward(tokens [B, S]) -> logits [B, S, vocab]``; position i only sees tokens 0..i.
    Arguments as :class:`Transformer`.
    """

    def __init__(self, vocab: int, d_model: int = 512, n_heads: int = 8, n_layers: int = 2, d_ff: int = 2048,
                 dropout: float = 0.1, max_len: int = 512, pad_id: int = 0, norm_first: bool = False,
                 positions: str = "sinusoidal", tie_embeddings: bool = False, fused: bool = True,
                 final_norm: bool | None = None):
        super().__init__()
        if tie_embeddings not in (False, True):
            raise ValueError(f"tie_embeddings must be False or True, got {tie_embeddings!r}")
        self.d_model, self.pad_id = d_model, pad_id
        self.tok_embed = nn.Embedding(vocab, d_model)
        self.pos = make_positions(positions, d_model, max_len)
        self.dropout = nn.Dropout(dropout)
        self.blocks = Encoder(d_model, n_heads, n_layers, d_ff, dropout, norm_first, final_norm, fused)
        self.lm_head = nn.Linear(d_model, vocab)
        xavier_init_(self)
        if tie_embeddings:
            self.lm_head.weight = self.tok_embed.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens [B, S] -> logits [B, S, vocab]."""
        _check_tokens(tokens, "tokens")
        mask = padding_mask(tokens, self.pad_id) & causal_mask(tokens.size(1), device=tokens.device)
        x = self.dropout(self.pos(self.tok_embed(tokens) * math.sqrt(self.d_model)))
        return self.lm_head(self.blocks(x, mask))


# --------------------------------------------------------------------------- parameter counting

def count_parameters(model: nn.Module, trainable_only: bool = False) -> int:
    """Number of scalars in the model's parameters; a tied Parameter counts once (buffers never)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


def attention_parameter_count(d_model: int) -> int:
    """Four Linear(D, D) with biases: 4·(D² + D), whatever the number of heads."""
    return 4 * (d_model * d_model + d_model)


def feed_forward_parameter_count(d_model: int, d_ff: int) -> int:
    """Linear(D, F) + Linear(F, D): 2·D·F + F + D."""
    return 2 * d_model * d_ff + d_ff + d_model


def encoder_block_parameter_count(d_model: int, d_ff: int) -> int:
    """Attention + feed-forward + two LayerNorms (2·D each)."""
    return attention_parameter_count(d_model) + feed_forward_parameter_count(d_model, d_ff) + 2 * 2 * d_model


def decoder_block_parameter_count(d_model: int, d_ff: int) -> int:
    """Two attentions + feed-forward + three LayerNorms."""
    return 2 * attention_parameter_count(d_model) + feed_forward_parameter_count(d_model, d_ff) + 3 * 2 * d_model


def _position_count(positions: str, d_model: int, max_len: int) -> int:
    make_positions(positions, 2, 1)  # validates the name
    return max_len * d_model if positions == "learned" else 0  # a sinusoidal table is a buffer


def transformer_parameter_count(src_vocab: int, tgt_vocab: int, d_model: int = 512, n_layers: int = 2,
                                d_ff: int = 2048, max_len: int = 512, norm_first: bool = False,
                                positions: str = "sinusoidal", tie_embeddings: bool | str = False,
                                final_norm: bool | None = None) -> int:
    """The closed formula for :class:`Transformer`'s parameter count (no n_heads: it changes nothing)."""
    use_final = norm_first if final_norm is None else final_norm
    embeddings = tgt_vocab * d_model + (0 if tie_embeddings == "all" else src_vocab * d_model)
    generator = tgt_vocab + (0 if tie_embeddings else tgt_vocab * d_model)
    return (embeddings + 2 * _position_count(positions, d_model, max_len)
            + n_layers * (encoder_block_parameter_count(d_model, d_ff) + decoder_block_parameter_count(d_model, d_ff))
            + (2 * 2 * d_model if use_final else 0) + generator)


def decoder_only_parameter_count(vocab: int, d_model: int = 512, n_layers: int = 2, d_ff: int = 2048,
                                 max_len: int = 512, norm_first: bool = False, positions: str = "sinusoidal",
                                 tie_embeddings: bool = False, final_norm: bool | None = None) -> int:
    """The closed formula for :class:`DecoderOnlyLM`'s parameter count."""
    use_final = norm_first if final_norm is None else final_norm
    return (vocab * d_model + _position_count(positions, d_model, max_len)
            + n_layers * encoder_block_parameter_count(d_model, d_ff)
            + (2 * d_model if use_final else 0) + vocab + (0 if tie_embeddings else vocab * d_model))
