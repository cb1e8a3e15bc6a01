"""tformer_ref's blocks and positions against PyTorch as the oracle (fp32, eval mode, atol 1e-5)."""

import math

import pytest
import torch
import torch.nn as nn

from tformer_ref.blocks import (
    DecoderBlock,
    EncoderBlock,
    FeedForward,
    SublayerConnection,
)
from tformer_ref.masks import causal_mask, padding_mask
from tformer_ref.positions import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    make_positions,
    sinusoidal_encoding,
)
from tformer_ref.torch_compat import decoder_block_to_torch, encoder_block_to_torch

TOKENS = torch.tensor([[5, 6, 7, 0, 0], [1, 2, 3, 4, 9], [3, 3, 0, 0, 0]])  # 0 = pad


def randomise_norms(module):
    """LayerNorms start at (1, 0), which would hide a mapping mistake between norm1/norm2/norm3."""
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0, 0.1)
    return module


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_block_equals_nn_transformer_encoder_layer(norm_first, fused):
    torch.manual_seed(0)
    ours = randomise_norms(
        EncoderBlock(16, 4, 40, dropout=0.1, norm_first=norm_first, fused=fused)
    ).eval()
    theirs = encoder_block_to_torch(ours)
    x = torch.randn(3, 5, 16)
    keep = padding_mask(TOKENS, 0)
    got = ours(x, keep)
    # PyTorch's masks are True = ignore; run with grad enabled so its nested-tensor fast path stays off.
    want = theirs(x, src_key_padding_mask=TOKENS == 0)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_block_equals_nn_transformer_decoder_layer(norm_first, fused):
    torch.manual_seed(1)
    ours = randomise_norms(
        DecoderBlock(16, 4, 40, dropout=0.1, norm_first=norm_first, fused=fused)
    ).eval()
    theirs = decoder_block_to_torch(ours)
    tgt = torch.tensor([[4, 5, 6, 0], [7, 8, 9, 2], [1, 0, 0, 0]])
    x, memory = torch.randn(3, 4, 16), torch.randn(3, 5, 16)
    got = ours(
        x, memory, padding_mask(tgt, 0) & causal_mask(4), padding_mask(TOKENS, 0)
    )
    want = theirs(
        x,
        memory,
        tgt_mask=~causal_mask(4)[0, 0],
        tgt_key_padding_mask=tgt == 0,
        memory_key_padding_mask=TOKENS == 0,
    )
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_decoder_block_is_causal_by_default():
    torch.manual_seed(2)
    block = DecoderBlock(16, 4, 32).eval()
    x, memory = torch.randn(2, 6, 16), torch.randn(2, 3, 16)
    changed = x.clone()
    changed[:, 4:] += 1.0  # the future of positions 0..3
    torch.testing.assert_close(block(x, memory)[:, :4], block(changed, memory)[:, :4])
    torch.testing.assert_close(block(x, memory), block(x, memory, causal_mask(6)))


def test_cross_attention_reads_the_memory():
    torch.manual_seed(3)
    block = DecoderBlock(16, 4, 32).eval()
    x, memory = torch.randn(2, 4, 16), torch.randn(2, 7, 16)
    assert not torch.allclose(block(x, memory), block(x, memory + 1.0))


def test_post_ln_dropout_sits_before_the_residual_add():
    """With p = 1 every dropped path is zero: a Post-LN block becomes norm2(norm1(x))."""
    torch.manual_seed(4)
    block = randomise_norms(EncoderBlock(16, 4, 32, dropout=1.0)).train()
    x = torch.randn(2, 5, 16)
    torch.testing.assert_close(block(x), block.ff_sub.norm(block.attn_sub.norm(x)))
    pre = EncoderBlock(16, 4, 32, dropout=1.0, norm_first=True).train()
    pre.load_state_dict(block.state_dict())
    # Pre-LN: both sublayers dropped, the residual stream passes untouched.
    torch.testing.assert_close(pre(x), x)


def test_sublayer_connection_wires_post_ln_and_pre_ln():
    torch.manual_seed(5)
    x = torch.randn(2, 5, 16)
    f = nn.Linear(16, 16)
    post = randomise_norms(SublayerConnection(16, dropout=0.0)).eval()
    pre = randomise_norms(SublayerConnection(16, dropout=0.0, norm_first=True)).eval()
    torch.testing.assert_close(post(x, f), post.norm(x + f(x)))
    torch.testing.assert_close(pre(x, f), x + f(pre.norm(x)))


def test_blocks_keep_their_arrangement_and_keyword_only_fused():
    assert EncoderBlock(16, 4, 32, 0.1, True).norm_first  # positional, as in exercise 4
    assert not DecoderBlock(16, 4, 32).norm_first
    with pytest.raises(TypeError):
        EncoderBlock(16, 4, 32, 0.1, False, True)  # fused must be named
    with pytest.raises(AttributeError):
        EncoderBlock(16, 4, 32).norm_first = True  # fixed when built: build another


def test_feed_forward_is_position_wise():
    torch.manual_seed(5)
    ff = FeedForward(8, 32).eval()
    x = torch.randn(2, 5, 8)
    torch.testing.assert_close(ff(x)[:, 2], ff(x[:, 2:3])[:, 0])
    assert sum(p.numel() for p in ff.parameters()) == 2 * 8 * 32 + 32 + 8


# --------------------------------------------------------------------------- positions


def test_sinusoidal_table_matches_the_papers_formula():
    n, d = 50, 16
    pe = sinusoidal_encoding(n, d)
    for pos in (0, 1, 7, 49):
        for i in range(d // 2):
            angle = pos / 10000 ** (2 * i / d)
            assert math.isclose(pe[pos, 2 * i].item(), math.sin(angle), abs_tol=1e-6)
            assert math.isclose(
                pe[pos, 2 * i + 1].item(), math.cos(angle), abs_tol=1e-6
            )


def test_sinusoidal_is_a_buffer_not_a_parameter_and_extends_past_max_len():
    module = SinusoidalPositionalEncoding(16, max_len=10)
    assert list(module.parameters()) == [] and "pe" in dict(module.named_buffers())
    assert "pe" not in module.state_dict()
    x = torch.zeros(2, 25, 16)
    torch.testing.assert_close(module(x)[0], sinusoidal_encoding(25, 16))


def test_learned_positions_raise_a_clear_error_past_max_len():
    module = LearnedPositionalEmbedding(max_len=8, d_model=16)
    assert module(torch.zeros(1, 8, 16)).shape == (1, 8, 16)
    with pytest.raises(ValueError, match="sequence length 9 is past max_len=8"):
        module(torch.zeros(1, 9, 16))


@pytest.mark.parametrize(
    "bad,error",
    [
        (lambda: sinusoidal_encoding(10, 15), ValueError),
        (lambda: sinusoidal_encoding(10.0, 16), TypeError),
        (lambda: make_positions("rotary", 16, 8), ValueError),
        (lambda: SinusoidalPositionalEncoding(16)(torch.zeros(2, 3, 8)), ValueError),
        (lambda: LearnedPositionalEmbedding(8, 16)([1, 2]), TypeError),
    ],
)
def test_bad_input_raises_clear_errors(bad, error):
    with pytest.raises(error, match="got"):
        bad()
