"""The whole model against nn.Transformer (same weights, same masks), and its parameter count."""

import math

import pytest
import torch
import torch.nn as nn

from tformer_ref.masks import causal_mask, padding_mask
from tformer_ref.model import (
    Decoder,
    DecoderOnlyLM,
    Encoder,
    Transformer,
    count_parameters,
    decoder_only_parameter_count,
    transformer_parameter_count,
)
from tformer_ref.torch_compat import stacks_to_torch

SRC = torch.tensor([[5, 6, 7, 0, 0], [1, 2, 3, 4, 9], [3, 3, 0, 0, 0]])
TGT = torch.tensor([[1, 4, 5, 6], [1, 7, 8, 0], [1, 2, 0, 0]])


def randomise_norms(module):
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0, 0.1)
    return module


@pytest.mark.parametrize("norm_first", [False, True])
def test_stacks_equal_nn_transformer(norm_first):
    torch.manual_seed(0)
    enc = randomise_norms(
        Encoder(16, 4, 2, 40, norm_first=norm_first, final_norm=True)
    ).eval()
    dec = randomise_norms(
        Decoder(16, 4, 2, 40, norm_first=norm_first, final_norm=True)
    ).eval()
    theirs = stacks_to_torch(enc, dec)
    src, tgt = torch.randn(3, 5, 16), torch.randn(3, 4, 16)
    src_keep, tgt_keep = padding_mask(SRC, 0), padding_mask(TGT, 0) & causal_mask(4)
    got = dec(tgt, enc(src, src_keep), tgt_keep, src_keep)
    want = theirs(
        src,
        tgt,
        tgt_mask=~causal_mask(4)[0, 0],
        src_key_padding_mask=SRC == 0,
        tgt_key_padding_mask=TGT == 0,
        memory_key_padding_mask=SRC == 0,
    )
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("positions", ["sinusoidal", "learned"])
@pytest.mark.parametrize("norm_first", [False, True])
def test_whole_model_equals_embeddings_plus_nn_transformer(norm_first, positions):
    """Ours end to end = embedding·√D + positions -> nn.Transformer -> the same output Linear."""
    torch.manual_seed(1)
    model = randomise_norms(
        Transformer(
            11,
            13,
            d_model=16,
            n_heads=4,
            n_layers=2,
            d_ff=40,
            max_len=8,
            norm_first=norm_first,
            positions=positions,
            final_norm=True,
        )
    ).eval()
    theirs = stacks_to_torch(model.encoder, model.decoder)
    src = model.src_pos(model.src_embed(SRC) * math.sqrt(16))
    tgt = model.tgt_pos(model.tgt_embed(TGT) * math.sqrt(16))
    hidden = theirs(
        src,
        tgt,
        tgt_mask=~causal_mask(4)[0, 0],
        src_key_padding_mask=SRC == 0,
        tgt_key_padding_mask=TGT == 0,
        memory_key_padding_mask=SRC == 0,
    )
    torch.testing.assert_close(
        model(SRC, TGT), model.generator(hidden), atol=1e-5, rtol=1e-5
    )


def test_fused_and_plain_models_agree_and_encode_decode_compose():
    torch.manual_seed(2)
    fused = Transformer(
        11, 13, d_model=16, n_heads=4, n_layers=2, d_ff=32, fused=True
    ).eval()
    plain = Transformer(
        11, 13, d_model=16, n_heads=4, n_layers=2, d_ff=32, fused=False
    ).eval()
    plain.load_state_dict(fused.state_dict())
    logits = fused(SRC, TGT)
    assert logits.shape == (3, 4, 13)
    torch.testing.assert_close(plain(SRC, TGT), logits, atol=1e-5, rtol=1e-5)
    memory, src_mask = fused.encode(SRC)
    assert memory.shape == (3, 5, 16) and src_mask.shape == (3, 1, 1, 5)
    torch.testing.assert_close(fused.decode(TGT, memory, src_mask), logits)


def test_decoder_is_causal_and_ignores_source_padding():
    torch.manual_seed(3)
    model = Transformer(11, 13, d_model=16, n_heads=4, n_layers=2, d_ff=32).eval()
    src, tgt = torch.tensor([[5, 6, 7, 0, 0]]), torch.tensor([[1, 4, 5, 6]])
    base = model(src, tgt)
    future = tgt.clone()
    future[0, 3] = 9
    torch.testing.assert_close(model(src, future)[:, :3], base[:, :3])
    more_pad = torch.tensor([[5, 6, 7, 0, 0, 0, 0]])
    torch.testing.assert_close(model(more_pad, tgt), base, atol=1e-5, rtol=1e-5)


def test_decoder_only_lm_is_causal():
    torch.manual_seed(4)
    lm = DecoderOnlyLM(
        17, d_model=16, n_heads=4, n_layers=2, d_ff=32, max_len=10
    ).eval()
    tokens = torch.tensor([[3, 4, 5, 6, 7], [8, 9, 1, 0, 0]])
    logits = lm(tokens)
    assert logits.shape == (2, 5, 17)
    changed = tokens.clone()
    changed[:, 3:] = 2
    torch.testing.assert_close(lm(changed)[:, :3], logits[:, :3])


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"tie_embeddings": True},
        {"tie_embeddings": "all"},
        {"positions": "learned", "max_len": 64},
        {"norm_first": True},
        {"final_norm": True},
    ],
)
def test_parameter_count_equals_the_closed_formula(kwargs):
    small = dict(d_model=16, n_layers=3, d_ff=24)
    model = Transformer(20, 20, n_heads=4, **small, **kwargs)
    assert count_parameters(model) == transformer_parameter_count(
        20, 20, **small, **kwargs
    )


def test_the_seeds_model_has_the_formulas_parameter_count():
    """8 heads, 2 layers, d=512, d_ff = 4·512; with 1000-token vocabularies."""
    model = Transformer(1000, 1000, d_model=512, n_heads=8, n_layers=2, d_ff=2048)
    attn, ff, ln = 4 * (512 * 512 + 512), 2 * 512 * 2048 + 2048 + 512, 2 * 512
    enc_layer, dec_layer = attn + ff + 2 * ln, 2 * attn + ff + 3 * ln
    expected = 2 * 1000 * 512 + 2 * (enc_layer + dec_layer) + 1000 * 512 + 1000
    assert expected == 16_249_832
    assert (
        count_parameters(model) == transformer_parameter_count(1000, 1000) == expected
    )
    # The number of heads changes nothing: every head is a slice of the same D x D projections.
    assert count_parameters(Transformer(1000, 1000, n_heads=1)) == expected


def test_decoder_only_parameter_count():
    for kwargs in (
        {},
        {"tie_embeddings": True, "positions": "learned", "norm_first": True},
    ):
        lm = DecoderOnlyLM(
            30, d_model=16, n_heads=2, n_layers=2, d_ff=40, max_len=12, **kwargs
        )
        assert count_parameters(lm) == decoder_only_parameter_count(
            30, 16, 2, 40, 12, **kwargs
        )


def test_weight_tying_shares_one_parameter():
    model = Transformer(
        20, 20, d_model=16, n_heads=4, n_layers=1, d_ff=24, tie_embeddings="all"
    )
    assert model.generator.weight is model.tgt_embed.weight is model.src_embed.weight
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    assert sum(
        p.numel() for g in optimizer.param_groups for p in g["params"]
    ) == count_parameters(model)


def test_xavier_initialisation():
    torch.manual_seed(5)
    model = Transformer(50, 50, d_model=32, n_heads=4, n_layers=1, d_ff=64)
    w = model.encoder.layers[0].ff.linear1.weight  # [64, 32]
    bound = math.sqrt(6 / (32 + 64))
    assert w.abs().max() <= bound and w.abs().max() > 0.9 * bound
    assert model.encoder.layers[0].ff.linear1.bias.abs().max() == 0
    assert abs(model.src_embed.weight.std().item() - 32**-0.5) < 0.02


@pytest.mark.parametrize(
    "bad,error,match",
    [
        (lambda m: m(SRC.float(), TGT), TypeError, "integer token ids"),
        (lambda m: m(SRC[0], TGT), ValueError, r"shape \[B, S\]"),
        (lambda m: m(SRC, "tokens"), TypeError, "LongTensor"),
    ],
)
def test_bad_input_raises_clear_errors(bad, error, match):
    model = Transformer(11, 13, d_model=16, n_heads=4, n_layers=1, d_ff=32)
    with pytest.raises(error, match=match):
        bad(model)


def test_bad_configuration_raises():
    with pytest.raises(ValueError, match="one shared vocabulary"):
        Transformer(10, 12, d_model=16, n_heads=4, tie_embeddings="all")
    with pytest.raises(ValueError, match="divisible"):
        Transformer(10, 12, d_model=16, n_heads=5)
    with pytest.raises(ValueError, match="positions must be"):
        Transformer(10, 12, d_model=16, n_heads=4, positions="rope")
    learned = Transformer(
        10,
        12,
        d_model=16,
        n_heads=4,
        n_layers=1,
        d_ff=16,
        positions="learned",
        max_len=4,
    )
    with pytest.raises(ValueError, match="past max_len=4"):
        learned(torch.ones(1, 6, dtype=torch.long), torch.ones(1, 3, dtype=torch.long))


@pytest.mark.parametrize(
    "build",
    [
        lambda: Encoder(
            16, 4, 2, 40, 0.1
        ),  # dropout and the flags after it: by name only
        lambda: Decoder(16, 4, 2, 40, 0.1, True),
        lambda: Transformer(11, 13, 16, 4, 1, 32, 0.1),
        lambda: DecoderOnlyLM(17, 16, 4, 1, 32, 0.1),
        lambda: transformer_parameter_count(11, 13, 16, 1, 32, 8, True),
        lambda: decoder_only_parameter_count(17, 16, 1, 32, 8, True),
    ],
)
def test_options_after_the_sizes_must_be_named(build):
    """Bug this guards against: two adjacent bools (norm_first, final_norm) passed by
    position and silently swapped."""
    with pytest.raises(TypeError):
        build()


def test_parameter_counts_reject_an_unknown_kind_of_positions():
    with pytest.raises(ValueError, match="positions must be 'sinusoidal' or 'learned'"):
        transformer_parameter_count(10, 10, positions="rope")
    with pytest.raises(ValueError, match="positions must be 'sinusoidal' or 'learned'"):
        decoder_only_parameter_count(10, positions=None)
