"""tformer_ref's heads and multi-head attention against PyTorch as the oracle."""

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from tformer_ref.attention import MultiHeadAttention, scaled_dot_product_attention
from tformer_ref.heads import merge_heads, split_heads
from tformer_ref.masks import causal_mask, padding_mask


def copy_to_torch(ours: MultiHeadAttention) -> nn.MultiheadAttention:
    """An nn.MultiheadAttention holding the same weights (it packs q, k, v into in_proj_weight [3D, D])."""
    theirs = nn.MultiheadAttention(ours.d_model, ours.n_heads, batch_first=True)
    with torch.no_grad():
        theirs.in_proj_weight.copy_(
            torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight])
        )
        theirs.in_proj_bias.copy_(
            torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias])
        )
        theirs.out_proj.weight.copy_(ours.out_proj.weight)
        theirs.out_proj.bias.copy_(ours.out_proj.bias)
    return theirs.eval()


def test_split_then_merge_is_identity_and_heads_are_contiguous_slices():
    x = torch.randn(2, 5, 12)
    heads = split_heads(x, 3)
    assert heads.shape == (2, 3, 5, 4)
    assert torch.equal(
        heads[:, 1], x[..., 4:8]
    )  # head 1 is features 4..7 of every token
    assert torch.equal(merge_heads(heads), x)


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize(
    "d_model,n_heads,sq,sk", [(16, 4, 5, 5), (24, 3, 4, 7), (32, 8, 6, 6)]
)
def test_equals_nn_multihead_attention(fused, d_model, n_heads, sq, sk):
    ours = MultiHeadAttention(d_model, n_heads, fused=fused).eval()
    theirs = copy_to_torch(ours)
    q, kv = torch.randn(3, sq, d_model), torch.randn(3, sk, d_model)
    key = q if sq == sk else kv
    got = ours(q, key, key)
    want, _ = theirs(q, key, key, need_weights=False)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("fused", [False, True])
def test_equals_nn_multihead_attention_with_masks(fused):
    """Our keep-mask (True = attend) is the logical NOT of nn.MultiheadAttention's ignore-masks."""
    torch.manual_seed(1)
    ours = MultiHeadAttention(16, 4, fused=fused).eval()
    theirs = copy_to_torch(ours)
    tokens = torch.tensor([[5, 6, 7, 0, 0], [1, 2, 3, 4, 9]])
    x = torch.randn(2, 5, 16)
    keep = padding_mask(tokens, pad_id=0) & causal_mask(5)  # [2, 1, 5, 5]
    got = ours(x, mask=keep)
    want, _ = theirs(
        x,
        x,
        x,
        key_padding_mask=tokens == 0,
        attn_mask=~causal_mask(5)[0, 0],
        need_weights=False,
    )
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_plain_and_fused_paths_agree_and_weights_are_exposed():
    torch.manual_seed(2)
    plain = MultiHeadAttention(16, 4).eval()
    fused = MultiHeadAttention(16, 4, fused=True).eval()
    fused.load_state_dict(plain.state_dict())
    x = torch.randn(2, 6, 16)
    mask = causal_mask(6)
    out, weights = plain(x, mask=mask, return_weights=True)
    torch.testing.assert_close(fused(x, mask=mask), out, atol=1e-6, rtol=1e-5)
    assert weights.shape == (2, 4, 6, 6)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4, 6))
    assert torch.all(weights.triu(1) == 0)  # nobody attends to the future


def test_scaled_dot_product_attention_equals_torch_sdpa():
    q, k, v = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 6, 8), torch.randn(2, 3, 6, 8)
    out, _ = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(
        out, F.scaled_dot_product_attention(q, k, v), atol=1e-6, rtol=1e-5
    )


@pytest.mark.parametrize("fused", [False, True])
def test_gradcheck_in_double_precision(fused):
    """The seed's gradcheck (float32 module, [32, 64, 512] input, dropout on) cannot work; tiny, double, eval can."""
    torch.manual_seed(3)
    module = MultiHeadAttention(8, 2, dropout=0.1, fused=fused).double().eval()
    x = torch.randn(2, 3, 8, dtype=torch.double, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda t: module(t, mask=causal_mask(3)), (x,), eps=1e-6, atol=1e-4
    )


@pytest.mark.parametrize("fused", [False, True])
def test_fully_masked_rows_give_zeros_not_nan(fused):
    module = MultiHeadAttention(8, 2, fused=fused).eval()
    x = torch.randn(1, 3, 8, requires_grad=True)
    mask = torch.ones(1, 1, 3, 3, dtype=torch.bool)
    mask[..., 1, :] = False  # query 1 may attend to nothing
    _, weights = module(x, mask=mask, return_weights=True)
    out = module(x, mask=mask)
    assert torch.all(weights[..., 1, :] == 0)
    assert torch.isfinite(out).all()
    out.sum().backward()
    assert torch.isfinite(x.grad).all()


def test_dropout_only_in_training_mode():
    module = MultiHeadAttention(8, 2, dropout=0.5)
    x = torch.randn(2, 4, 8)
    module.eval()
    assert torch.equal(module(x), module(x))
    module.train()
    assert not torch.equal(module(x), module(x))


@pytest.mark.parametrize(
    "build,call,error,message",
    [
        (
            lambda: MultiHeadAttention(10, 3),
            None,
            ValueError,
            "d_model must be divisible by n_heads, got d_model=10, n_heads=3",
        ),
        (
            lambda: MultiHeadAttention(8, 2),
            lambda m: m(torch.randn(4, 8)),
            ValueError,
            "query must have shape [B, S, D=8], got (4, 8)",
        ),
        (
            lambda: MultiHeadAttention(8, 2),
            lambda m: m(torch.randn(2, 4, 6)),
            ValueError,
            "query must have shape [B, S, D=8], got (2, 4, 6)",
        ),
        (
            lambda: MultiHeadAttention(8, 2),
            lambda m: m(torch.randn(2, 4, 8), torch.randn(3, 4, 8)),
            ValueError,
            "query, key and value must share the batch size B, got 2, 3, 3",
        ),
        (
            lambda: MultiHeadAttention(8, 2),
            lambda m: m(
                torch.randn(2, 4, 8), torch.randn(2, 5, 8), torch.randn(2, 6, 8)
            ),
            ValueError,
            "key and value must have the same length Sk, got 5 and 6",
        ),
        (
            lambda: MultiHeadAttention(8, 2),
            lambda m: m(torch.randn(2, 4, 8), mask=torch.ones(2, 1, 1, 4)),
            TypeError,
            "got dtype torch.float32",
        ),
        (
            lambda: MultiHeadAttention(8, 2),
            lambda m: m(
                torch.randn(2, 4, 8), mask=torch.ones(2, 1, 4, dtype=torch.bool)
            ),
            ValueError,
            "with exactly 4 dims, got shape (2, 1, 4)",
        ),
        (
            lambda: MultiHeadAttention(8, 2),
            lambda m: m(
                torch.randn(2, 4, 8), mask=torch.ones(3, 1, 1, 4, dtype=torch.bool)
            ),
            ValueError,
            "broadcastable to [B, H, Sq, Sk] = [2, 2, 4, 4], got shape (3, 1, 1, 4)",
        ),
        (
            lambda: None,
            lambda _: split_heads(torch.randn(2, 3, 10), 4),
            ValueError,
            "got d_model=10, n_heads=4",
        ),
        (
            lambda: None,
            lambda _: merge_heads(torch.randn(2, 3, 10)),
            ValueError,
            "[B, H, S, Dh] (4 dims), got (2, 3, 10)",
        ),
    ],
)
def test_bad_input_gets_a_clear_error(build, call, error, message):
    with pytest.raises(error) as info:
        module = build()
        call(module)
    assert message in str(info.value)


def test_half_precision_mask_fill_is_finite():
    """-1e9 overflows float16 to -inf; the package fills with the dtype's own minimum instead."""
    from tformer_ref.attention import masked_fill_value

    assert torch.tensor(-1e9).half().isinf()
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        assert torch.isfinite(torch.tensor(masked_fill_value(dtype), dtype=dtype))
    module = MultiHeadAttention(8, 2).to(torch.bfloat16).eval()
    out = module(torch.randn(2, 3, 8, dtype=torch.bfloat16), mask=causal_mask(3))
    assert torch.isfinite(out).all()
