"""The whole model: encoder, decoder, encoder-decoder Transformer, decoder-only LM.

Shape letters: B batch, Ss source length, St target length, S length, D = d_model,
V vocabulary size.

Choices, each one a keyword argument (after the sizes, so that two bools cannot swap):

* ``norm_first``: Post-LN (the paper) or Pre-LN blocks, see :mod:`tformer_ref.blocks`.
* ``final_norm``: a LayerNorm after the last block of each stack. Pre-LN needs one
  (its residual stream is never normalised otherwise); the paper's Post-LN has none,
  since every block already ends with a norm. ``None`` (the default) means exactly
  that: ``final_norm = norm_first``. ``nn.Transformer`` always adds one, for both
  settings; pass ``final_norm=True`` to match it.
* ``positions``: ``"sinusoidal"`` (the paper) or ``"learned"`` (a table of ``max_len``
  rows). The tokens are scaled by √D either way, so a learned table, drawn from
  N(0, 1/D) like the token table, starts about √D times shorter than the tokens and
  has to grow in training (§5.5 'Embeddings scaled by sqrt(d_model)').
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
from .positions import make_positions, validate_positions


def _uses_final_norm(norm_first: bool, final_norm: bool | None) -> bool:
    """The one place that reads ``final_norm=None`` as "exactly when Pre-LN"."""
    return norm_first if final_norm is None else final_norm


def _final_norm(d_model: int, norm_first: bool, final_norm: bool | None) -> nn.Module:
    use = _uses_final_norm(norm_first, final_norm)
    return nn.LayerNorm(d_model) if use else nn.Identity()


class Encoder(nn.Module):
    """A stack of :class:`EncoderBlock` (on embeddings, not token ids):
    [B, S, D] -> [B, S, D].

    Taught in §5.6 'Encoder, decoder and cross-attention' (book/ch05_model).

    Args:
        d_model: D. n_heads: H. n_layers: how many blocks. d_ff: F.
        dropout, norm_first, fused: as :class:`EncoderBlock`.
        final_norm: a LayerNorm after the last block; None means ``norm_first``.

    Examples::

        >>> encoder = Encoder(8, 2, 3, 16, dropout=0.0).eval()
        >>> encoder(torch.randn(2, 5, 8)).shape
        torch.Size([2, 5, 8])
        >>> len(encoder.layers), type(encoder.norm).__name__  # Post-LN: no final norm
        (3, 'Identity')
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_layers: int,
        d_ff: int,
        *,
        dropout: float = 0.1,
        norm_first: bool = False,
        final_norm: bool | None = None,
        fused: bool = False,
    ):
        super().__init__()
        self.layers = nn.ModuleList(
            EncoderBlock(
                d_model, n_heads, d_ff, dropout, norm_first=norm_first, fused=fused
            )
            for _ in range(n_layers)
        )
        self.norm = _final_norm(d_model, norm_first, final_norm)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None = None, cache=None
    ) -> torch.Tensor:
        """x [B, S, D]; mask: bool keep-mask broadcastable to [B, H, S, Sk]
        (the padding mask [B, 1, 1, S]); cache: a :class:`~tformer_ref.kv_cache.KVCache`
        whose layer i serves block i (then Sk = cached + S)."""
        for i, layer in enumerate(self.layers):
            x = layer(x, mask) if cache is None else layer(x, mask, cache.layer(i))
        return self.norm(x)


class Decoder(nn.Module):
    """A stack of :class:`DecoderBlock`: x [B, St, D], memory [B, Ss, D] -> [B, St, D].

    Taught in §5.6 'Encoder, decoder and cross-attention' (book/ch05_model).

    Args: as :class:`Encoder`.

    Examples::

        >>> decoder = Decoder(8, 2, 2, 16, dropout=0.0, final_norm=True).eval()
        >>> decoder(torch.randn(2, 4, 8), torch.randn(2, 6, 8)).shape
        torch.Size([2, 4, 8])
        >>> type(decoder.norm).__name__
        'LayerNorm'
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_layers: int,
        d_ff: int,
        *,
        dropout: float = 0.1,
        norm_first: bool = False,
        final_norm: bool | None = None,
        fused: bool = False,
    ):
        super().__init__()
        self.layers = nn.ModuleList(
            DecoderBlock(
                d_model, n_heads, d_ff, dropout, norm_first=norm_first, fused=fused
            )
            for _ in range(n_layers)
        )
        self.norm = _final_norm(d_model, norm_first, final_norm)

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        self_mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """self_mask broadcastable to [B, H, St, St] (None: causal);
        memory_mask to [B, H, St, Ss]."""
        for layer in self.layers:
            x = layer(x, memory, self_mask, memory_mask)
        return self.norm(x)


def _check_tokens(tokens, name: str) -> None:
    if not isinstance(tokens, torch.Tensor):
        raise TypeError(
            f"{name} must be a LongTensor of token ids [B, S], "
            f"got {type(tokens).__name__}"
        )
    if tokens.dtype not in (torch.int64, torch.int32):
        raise TypeError(
            f"{name} must hold integer token ids (torch.long) [B, S], got "
            f"dtype {tokens.dtype}; a float tensor such as "
            "torch.ones(1, 1).fill_(SOS) cannot index an embedding"
        )
    if tokens.dim() != 2:
        raise ValueError(f"{name} must have shape [B, S], got {tuple(tokens.shape)}")


def xavier_init_(module: nn.Module) -> None:
    """The course's initialisation: Xavier-uniform for every Linear weight, zero biases,
    N(0, 1/D) for embeddings (so that embedding·√D has unit variance), LayerNorm at
    (1, 0).

    The seed's loop (``xavier_uniform_`` on every parameter with ``dim() > 1``) also
    hits the embedding tables, and with them a tied output projection.

    Taught in §4.6 'Xavier initialisation' (book/ch04_blocks).

    Examples::

        >>> linear, table = nn.Linear(512, 2048), nn.Embedding(1000, 64)
        >>> xavier_init_(nn.ModuleList([linear, table]))
        >>> linear.weight.abs().max().item() <= (6 / (512 + 2048)) ** 0.5
        True
        >>> round(table.weight.std().item() * 64 ** 0.5, 1)  # embedding·√D: unit size
        1.0
    """
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.xavier_uniform_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=m.embedding_dim**-0.5)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


class Transformer(nn.Module):
    """The encoder-decoder Transformer of Vaswani et al. 2017 (defaults: the seed's
    8-head, 2-layer model).

    ``forward(src [B, Ss], tgt_in [B, St]) -> logits [B, St, tgt_vocab]``: token ids in,
    padding masks built from ``pad_id``, the causal mask built for the decoder.

    Taught in §5.6 'Encoder, decoder and cross-attention' (book/ch05_model).

    Args:
        src_vocab, tgt_vocab: vocabulary sizes. d_model: D. n_heads: H.
        n_layers: blocks per stack.
        d_ff: F (the seed's ``forward_expansion * embed_size``; 4·D in the paper).
        dropout: on embeddings+positions and on every sublayer output.
        max_len: rows of a learned position table (a sinusoidal one is precomputed to
            this length, and computed beyond it).
        pad_id: the padding token id.
        norm_first, positions, tie_embeddings, final_norm: see the module doc.
        fused: attention through ``F.scaled_dot_product_attention`` (same result as the
            plain path).

    Examples::

        >>> model = Transformer(11, 13, d_model=8, n_heads=2, n_layers=1, d_ff=16)
        >>> src, tgt_in = torch.tensor([[5, 6, 7, 0]]), torch.tensor([[1, 4, 9]])
        >>> model.eval()(src, tgt_in).shape
        torch.Size([1, 3, 13])
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
        tie_embeddings: bool | str = False,
        fused: bool = True,
        final_norm: bool | None = None,
    ):
        super().__init__()
        if tie_embeddings not in (False, True, "all"):
            raise ValueError(
                f"tie_embeddings must be False, True or 'all', got {tie_embeddings!r}"
            )
        if tie_embeddings == "all" and src_vocab != tgt_vocab:
            raise ValueError(
                f"tie_embeddings='all' needs one shared vocabulary, got "
                f"src_vocab={src_vocab}, tgt_vocab={tgt_vocab}"
            )
        self.d_model, self.pad_id, self.tie_embeddings = d_model, pad_id, tie_embeddings
        self.src_embed = nn.Embedding(src_vocab, d_model)
        self.tgt_embed = nn.Embedding(tgt_vocab, d_model)
        self.src_pos = make_positions(positions, d_model, max_len)
        self.tgt_pos = make_positions(positions, d_model, max_len)
        self.dropout = nn.Dropout(dropout)
        stack = dict(
            dropout=dropout, norm_first=norm_first, final_norm=final_norm, fused=fused
        )
        self.encoder = Encoder(d_model, n_heads, n_layers, d_ff, **stack)
        self.decoder = Decoder(d_model, n_heads, n_layers, d_ff, **stack)
        self.generator = nn.Linear(d_model, tgt_vocab)
        xavier_init_(self)
        # Tie after initialising: one Parameter object, seen once by parameters() and
        # the optimizer.
        if tie_embeddings:
            self.generator.weight = self.tgt_embed.weight
        if tie_embeddings == "all":
            self.src_embed.weight = self.tgt_embed.weight

    def embed(
        self, tokens: torch.Tensor, table: nn.Embedding, positions: nn.Module
    ) -> torch.Tensor:
        """tokens [B, S] -> Dropout(table(tokens)·√D + positions) [B, S, D]
        (the paper's §3.4 and §5.4)."""
        return self.dropout(positions(table(tokens) * math.sqrt(self.d_model)))

    def encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """src [B, Ss] -> (memory [B, Ss, D], src_mask [B, 1, 1, Ss])."""
        _check_tokens(src, "src")
        src_mask = padding_mask(src, self.pad_id)
        x = self.embed(src, self.src_embed, self.src_pos)
        return self.encoder(x, src_mask), src_mask

    def decode(
        self, tgt_in: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor | None
    ) -> torch.Tensor:
        """tgt_in [B, St], memory [B, Ss, D], src_mask [B, 1, 1, Ss]
        -> logits [B, St, tgt_vocab]."""
        _check_tokens(tgt_in, "tgt_in")
        causal = causal_mask(tgt_in.size(1), device=tgt_in.device)
        self_mask = padding_mask(tgt_in, self.pad_id) & causal
        x = self.embed(tgt_in, self.tgt_embed, self.tgt_pos)
        return self.generator(self.decoder(x, memory, self_mask, src_mask))

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """src [B, Ss], tgt_in [B, St] (the target shifted right)
        -> logits [B, St, tgt_vocab]."""
        memory, src_mask = self.encode(src)
        return self.decode(tgt_in, memory, src_mask)


class DecoderOnlyLM(nn.Module):
    """A decoder-only language model (GPT's shape): causal self-attention blocks, no
    encoder, no cross-attention. A decoder-only block *is* an :class:`EncoderBlock`
    given the causal mask.

    ``forward(tokens [B, S]) -> logits [B, S, vocab]``; position i only sees tokens
    0..i. Arguments as :class:`Transformer`; ``pad_id=None`` masks no token (one
    stream of text has no padding, and a pad id that is also a real token's id would
    hide that token from every query).

    ``forward(tokens, cache=cache)`` decodes incrementally: ``tokens`` are the next S
    tokens after the ``cache.length`` ones the :class:`~tformer_ref.kv_cache.KVCache`
    holds, and the cache grows by S.

    Taught in §5.8 'A decoder-only model' (book/ch05_model).
    The cache: §8.7 'The KV cache' (book/ch08_generation).

    Examples::

        >>> lm = DecoderOnlyLM(17, d_model=8, n_heads=2, n_layers=1, d_ff=16).eval()
        >>> tokens = torch.tensor([[3, 4, 5, 6]])
        >>> changed = torch.tensor([[3, 4, 5, 9]])  # only the last token differs
        >>> torch.allclose(lm(tokens)[:, :3], lm(changed)[:, :3])  # the past: unchanged
        True
    """

    def __init__(
        self,
        vocab: int,
        d_model: int = 512,
        n_heads: int = 8,
        n_layers: int = 2,
        d_ff: int = 2048,
        *,
        dropout: float = 0.1,
        max_len: int = 512,
        pad_id: int | None = 0,
        norm_first: bool = False,
        positions: str = "sinusoidal",
        tie_embeddings: bool = False,
        fused: bool = True,
        final_norm: bool | None = None,
    ):
        super().__init__()
        if tie_embeddings not in (False, True):
            raise ValueError(
                f"tie_embeddings must be False or True, got {tie_embeddings!r}"
            )
        self.d_model, self.pad_id, self.max_len = d_model, pad_id, max_len
        self.tok_embed = nn.Embedding(vocab, d_model)
        self.pos = make_positions(positions, d_model, max_len)
        self.dropout = nn.Dropout(dropout)
        # An Encoder is the right stack: self-attention only; forward() hands it the
        # causal mask, which is all that makes its blocks "decoder" blocks here.
        self.blocks = Encoder(
            d_model,
            n_heads,
            n_layers,
            d_ff,
            dropout=dropout,
            norm_first=norm_first,
            final_norm=final_norm,
            fused=fused,
        )
        self.lm_head = nn.Linear(d_model, vocab)
        xavier_init_(self)
        if tie_embeddings:
            self.lm_head.weight = self.tok_embed.weight

    def forward(self, tokens: torch.Tensor, cache=None) -> torch.Tensor:
        """tokens [B, S] -> logits [B, S, vocab]; with ``cache``, the S tokens come
        after the cached ones."""
        _check_tokens(tokens, "tokens")
        past = 0 if cache is None else cache.length
        if cache is not None and self.pad_id is not None:
            raise ValueError(
                "a KV cache needs a model built with pad_id=None: the cache keeps no "
                "padding mask for the past tokens "
                f"(this model has pad_id={self.pad_id})"
            )
        mask = causal_mask(tokens.size(1), device=tokens.device, past=past)
        if self.pad_id is not None:
            mask = padding_mask(tokens, self.pad_id) & mask
        # √D with learned positions too: they start √D times shorter (§5.5).
        x = self.tok_embed(tokens) * math.sqrt(self.d_model)
        x = self.dropout(self.pos(x, start=past))
        return self.lm_head(self.blocks(x, mask, cache))


# ------------------------------------------------------------------ parameter counting


def count_parameters(model: nn.Module, trainable_only: bool = False) -> int:
    """Number of scalars in the model's parameters; a tied Parameter counts once
    (buffers never).

    Taught in §4.7 'Weight tying' (book/ch04_blocks).

    Examples::

        >>> count_parameters(nn.Linear(4, 3))
        15
        >>> tied = nn.ModuleList([nn.Embedding(10, 4), nn.Linear(4, 10, bias=False)])
        >>> tied[1].weight = tied[0].weight
        >>> count_parameters(tied)  # one [10, 4] matrix, counted once
        40
    """
    return sum(
        p.numel() for p in model.parameters() if p.requires_grad or not trainable_only
    )


def attention_parameter_count(d_model: int) -> int:
    """Four Linear(D, D) with biases: 4·(D² + D), whatever the number of heads.

    Taught in §4.2 'The feed-forward sublayer' (book/ch04_blocks).

    Examples::

        >>> attention_parameter_count(512)
        1050624
    """
    return 4 * (d_model * d_model + d_model)


def feed_forward_parameter_count(d_model: int, d_ff: int) -> int:
    """Linear(D, F) + Linear(F, D): 2·D·F + F + D.

    Taught in §4.2 'The feed-forward sublayer' (book/ch04_blocks).

    Examples::

        >>> feed_forward_parameter_count(512, 2048)
        2099712
    """
    return 2 * d_model * d_ff + d_ff + d_model


def encoder_block_parameter_count(d_model: int, d_ff: int) -> int:
    """Attention + feed-forward + two LayerNorms (2·D each).

    Taught in §4.2 'The feed-forward sublayer' (book/ch04_blocks).

    Examples::

        >>> encoder_block_parameter_count(512, 2048)
        3152384
    """
    sublayers = attention_parameter_count(d_model) + feed_forward_parameter_count(
        d_model, d_ff
    )
    return sublayers + 2 * 2 * d_model


def decoder_block_parameter_count(d_model: int, d_ff: int) -> int:
    """Two attentions + feed-forward + three LayerNorms.

    Taught in §5.7 'The seed's model, counted' (book/ch05_model).

    Examples::

        >>> decoder_block_parameter_count(512, 2048)
        4204032
    """
    sublayers = 2 * attention_parameter_count(d_model) + feed_forward_parameter_count(
        d_model, d_ff
    )
    return sublayers + 3 * 2 * d_model


def _position_count(positions: str, d_model: int, max_len: int) -> int:
    validate_positions(positions)
    # A sinusoidal table is a buffer, not a parameter.
    return max_len * d_model if positions == "learned" else 0


def transformer_parameter_count(
    src_vocab: int,
    tgt_vocab: int,
    d_model: int = 512,
    n_layers: int = 2,
    d_ff: int = 2048,
    max_len: int = 512,
    *,
    norm_first: bool = False,
    positions: str = "sinusoidal",
    tie_embeddings: bool | str = False,
    final_norm: bool | None = None,
) -> int:
    """The closed formula for :class:`Transformer`'s parameter count (no n_heads: it
    changes nothing).

    Taught in §5.7 'The seed's model, counted' (book/ch05_model).
    Also used in §4.7 'Weight tying'.

    Examples::

        >>> transformer_parameter_count(10_000, 10_000)  # the seed's model
        30082832
        >>> transformer_parameter_count(1000, 1000, 64, 1, 128)  # §4.7's untied model
        276712
        >>> transformer_parameter_count(1000, 1000, 64, 1, 128, tie_embeddings=True)
        212712
    """
    tied_source = tie_embeddings == "all"
    embeddings = tgt_vocab * d_model + (0 if tied_source else src_vocab * d_model)
    generator = tgt_vocab + (0 if tie_embeddings else tgt_vocab * d_model)
    blocks = encoder_block_parameter_count(
        d_model, d_ff
    ) + decoder_block_parameter_count(d_model, d_ff)
    final = 2 * 2 * d_model if _uses_final_norm(norm_first, final_norm) else 0
    return (
        embeddings
        + 2 * _position_count(positions, d_model, max_len)
        + n_layers * blocks
        + final
        + generator
    )


def decoder_only_parameter_count(
    vocab: int,
    d_model: int = 512,
    n_layers: int = 2,
    d_ff: int = 2048,
    max_len: int = 512,
    *,
    norm_first: bool = False,
    positions: str = "sinusoidal",
    tie_embeddings: bool = False,
    final_norm: bool | None = None,
) -> int:
    """The closed formula for :class:`DecoderOnlyLM`'s parameter count.

    Taught in §5.8 'A decoder-only model' (book/ch05_model).

    Examples::

        >>> decoder_only_parameter_count(50, 32, 2, 64, 16, positions="learned",
        ...                              tie_embeddings=True)
        19250
    """
    final = 2 * d_model if _uses_final_norm(norm_first, final_norm) else 0
    head = vocab + (0 if tie_embeddings else vocab * d_model)
    return (
        vocab * d_model
        + _position_count(positions, d_model, max_len)
        + n_layers * encoder_block_parameter_count(d_model, d_ff)
        + final
        + head
    )
