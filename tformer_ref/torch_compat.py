"""Copy the course's blocks and models into PyTorch's own modules, weight for weight.

Used as the oracle: with the same weights, ``nn.TransformerEncoderLayer``,
``nn.TransformerDecoderLayer`` and ``nn.Transformer`` (all ``batch_first=True``,
ReLU) compute what :mod:`tformer_ref.blocks` and :mod:`tformer_ref.model` compute.
PyTorch's masks mean the opposite of ours (True = ignore), and ``nn.Transformer``
always ends both stacks with a LayerNorm: build ours with ``final_norm=True``.
Compare with autograd enabled: under ``torch.no_grad()`` in eval mode PyTorch's
encoder takes a nested-tensor fast path that outputs zeros at padded positions.
"""

from __future__ import annotations

import warnings

import torch
import torch.nn as nn

from .attention import MultiHeadAttention
from .blocks import DecoderBlock, EncoderBlock
from .model import Decoder, Encoder


@torch.no_grad()
def _copy_attention(ours: MultiHeadAttention, theirs: nn.MultiheadAttention) -> None:
    # nn.MultiheadAttention packs q, k, v into one in_proj_weight [3D, D].
    theirs.in_proj_weight.copy_(
        torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight])
    )
    theirs.in_proj_bias.copy_(
        torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias])
    )
    theirs.out_proj.weight.copy_(ours.out_proj.weight)
    theirs.out_proj.bias.copy_(ours.out_proj.bias)


@torch.no_grad()
def _copy_linear_or_norm(ours: nn.Module, theirs: nn.Module) -> None:
    theirs.weight.copy_(ours.weight)
    theirs.bias.copy_(ours.bias)


def _norms(block: EncoderBlock | DecoderBlock) -> list[nn.LayerNorm]:
    """Our block's LayerNorms in PyTorch's order: norm1, norm2 (decoder: norm3)."""
    subs = (block.attn_sub, getattr(block, "cross_sub", None), block.ff_sub)
    return [sub.norm for sub in subs if sub is not None]


def _copy_common(ours: EncoderBlock | DecoderBlock, theirs: nn.Module) -> None:
    _copy_attention(ours.self_attn, theirs.self_attn)
    _copy_linear_or_norm(ours.ff.linear1, theirs.linear1)
    _copy_linear_or_norm(ours.ff.linear2, theirs.linear2)
    for i, norm in enumerate(_norms(ours), start=1):
        _copy_linear_or_norm(norm, getattr(theirs, f"norm{i}"))


def _sizes(block) -> tuple[int, int, int]:
    attn = block.self_attn
    return attn.d_model, attn.n_heads, block.ff.linear1.out_features


def encoder_block_to_torch(block: EncoderBlock) -> nn.TransformerEncoderLayer:
    """An ``nn.TransformerEncoderLayer`` with ``block``'s weights, in eval mode.

    Used in §4.5 'Post-LN and Pre-LN' (book/ch04_blocks).

    Examples::

        >>> ours = EncoderBlock(8, 2, 16, norm_first=True).eval()
        >>> x = torch.randn(2, 5, 8)
        >>> torch.allclose(ours(x), encoder_block_to_torch(ours)(x), atol=1e-5)
        True
    """
    d, h, f = _sizes(block)
    theirs = nn.TransformerEncoderLayer(
        d, h, f, dropout=0.0, batch_first=True, norm_first=block.norm_first
    )
    _copy_common(block, theirs)
    return theirs.to(block.ff.linear1.weight).eval()


def decoder_block_to_torch(block: DecoderBlock) -> nn.TransformerDecoderLayer:
    """An ``nn.TransformerDecoderLayer`` with ``block``'s weights, in eval mode.

    Used in §5.6 'Encoder, decoder and cross-attention' (book/ch05_model).

    Examples::

        >>> ours = DecoderBlock(8, 2, 16).eval()
        >>> x, memory = torch.randn(2, 4, 8), torch.randn(2, 6, 8)
        >>> future = torch.ones(4, 4, dtype=torch.bool).triu(1)  # True = ignore
        >>> theirs = decoder_block_to_torch(ours)(x, memory, tgt_mask=future)
        >>> torch.allclose(ours(x, memory), theirs, atol=1e-5)
        True
    """
    d, h, f = _sizes(block)
    theirs = nn.TransformerDecoderLayer(
        d, h, f, dropout=0.0, batch_first=True, norm_first=block.norm_first
    )
    _copy_common(block, theirs)
    _copy_attention(block.cross_attn, theirs.multihead_attn)
    return theirs.to(block.ff.linear1.weight).eval()


def stacks_to_torch(encoder: Encoder, decoder: Decoder) -> nn.Transformer:
    """An ``nn.Transformer`` with the weights of ``encoder`` and ``decoder`` (both built
    with a final norm).

    Used in §5.7 'The seed's model, counted' (book/ch05_model).

    Examples::

        >>> enc = Encoder(8, 2, 1, 16, final_norm=True).eval()
        >>> dec = Decoder(8, 2, 1, 16, final_norm=True).eval()
        >>> src, tgt = torch.randn(2, 5, 8), torch.randn(2, 3, 8)
        >>> future = torch.ones(3, 3, dtype=torch.bool).triu(1)
        >>> theirs = stacks_to_torch(enc, dec)(src, tgt, tgt_mask=future)
        >>> torch.allclose(dec(tgt, enc(src)), theirs, atol=1e-5)
        True
    """
    for name, stack in (("encoder", encoder), ("decoder", decoder)):
        if not isinstance(stack.norm, nn.LayerNorm):
            raise ValueError(
                f"nn.Transformer ends its {name} with a LayerNorm; "
                "build ours with final_norm=True"
            )
    first = encoder.layers[0]
    d, h, f = _sizes(first)
    with warnings.catch_warnings():
        # Pre-LN makes PyTorch warn that its nested-tensor fast path is off: nothing to
        # act on here.
        warnings.filterwarnings("ignore", message="enable_nested_tensor is True")
        theirs = nn.Transformer(
            d,
            h,
            len(encoder.layers),
            len(decoder.layers),
            f,
            dropout=0.0,
            batch_first=True,
            norm_first=first.norm_first,
        )
    for ours, layer in zip(encoder.layers, theirs.encoder.layers):
        _copy_common(ours, layer)
    for ours, layer in zip(decoder.layers, theirs.decoder.layers):
        _copy_common(ours, layer)
        _copy_attention(ours.cross_attn, layer.multihead_attn)
    _copy_linear_or_norm(encoder.norm, theirs.encoder.norm)
    _copy_linear_or_norm(decoder.norm, theirs.decoder.norm)
    return theirs.to(first.ff.linear1.weight).eval()
