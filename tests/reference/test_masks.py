"""Masks and their conventions, with F.scaled_dot_product_attention and nn.MultiheadAttention as oracles."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from tformer_ref.attention import (
    MultiHeadAttention,
    masked_fill_value,
    scaled_dot_product_attention,
)
from tformer_ref.masks import (
    causal_mask,
    combine_masks,
    from_additive_mask,
    from_ignore_mask,
    padding_mask,
    to_additive_mask,
    to_ignore_mask,
    to_mha_masks,
)

TOKENS = torch.tensor([[5, 6, 7, 0, 0], [1, 2, 3, 4, 9], [8, 0, 0, 0, 0]])  # pad id 0


def qkv(b, h, sq, sk, dh=8, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(b, h, s, dh, generator=g).to(dtype) for s in (sq, sk, sk))


def test_padding_mask_is_b11s_and_true_on_real_tokens():
    mask = padding_mask(TOKENS, pad_id=0)
    assert mask.shape == (3, 1, 1, 5) and mask.dtype == torch.bool
    assert mask[:, 0, 0].tolist() == [
        [True] * 3 + [False] * 2,
        [True] * 5,
        [True] + [False] * 4,
    ]
    # The pad id is an argument, not a hard-coded 0.
    assert padding_mask(torch.tensor([[0, 3, 1, 1]]), pad_id=1)[0, 0, 0].tolist() == [
        True,
        True,
        False,
        False,
    ]


def test_causal_mask_is_tril_and_triu_is_its_opposite():
    mask = causal_mask(4)
    assert mask.shape == (1, 1, 4, 4) and mask.dtype == torch.bool
    assert torch.equal(mask[0, 0], torch.tril(torch.ones(4, 4)).bool())
    assert mask[0, 0, 0].tolist() == [
        True,
        False,
        False,
        False,
    ]  # the first query sees only itself
    # triu lets every query see itself and the future: exactly what a causal mask must forbid.
    assert torch.triu(torch.ones(4, 4)).bool()[0].tolist() == [True] * 4
    assert torch.equal(~mask[0, 0], torch.ones(4, 4).triu(1).bool())


def test_combine_masks_is_an_and_with_broadcast_shape():
    both = combine_masks(padding_mask(TOKENS, 0), causal_mask(5))
    assert both.shape == (3, 1, 5, 5)
    assert torch.equal(both, padding_mask(TOKENS, 0) & causal_mask(5))
    assert not both[0, 0, 4, 3] and both[0, 0, 4, 2] and not both[1, 0, 1, 2]
    assert torch.equal(combine_masks(None, causal_mask(3), None), causal_mask(3))
    assert combine_masks(None) is None


def test_ignore_and_keep_conventions_are_each_others_not():
    keep = padding_mask(TOKENS, 0)
    assert torch.equal(to_ignore_mask(keep), ~keep)
    assert torch.equal(from_ignore_mask(to_ignore_mask(keep)), keep)


@pytest.mark.parametrize(
    "dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64]
)
def test_additive_mask_is_finite_in_every_dtype_and_round_trips(dtype):
    keep = combine_masks(padding_mask(TOKENS, 0), causal_mask(5))
    add = to_additive_mask(keep, dtype)
    assert add.dtype == dtype and torch.isfinite(add).all()
    assert torch.all(add[keep] == 0) and torch.all(add[~keep] == torch.finfo(dtype).min)
    assert torch.equal(from_additive_mask(add), keep)
    assert torch.equal(
        from_additive_mask(torch.tensor([0.0, float("-inf"), -1e9])),
        torch.tensor([True, False, False]),
    )


def test_minus_1e9_overflows_float16_but_the_package_fill_does_not():
    assert torch.tensor(-1e9).half().isinf()
    with pytest.raises(RuntimeError, match="overflow"):
        torch.zeros(2, dtype=torch.float16).masked_fill(
            torch.tensor([True, False]), -1e9
        )
    for dtype in (torch.float16, torch.bfloat16):
        assert torch.isfinite(
            torch.zeros(2, dtype=dtype).masked_fill(
                torch.tensor([True, False]), masked_fill_value(dtype)
            )
        ).all()


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize(
    "b,h", [(3, 2), (3, 3)]
)  # B == H: a mask on the wrong axis would still broadcast
def test_plain_attention_with_masks_equals_torch_sdpa(dtype, tol, b, h):
    tokens = TOKENS[:b]
    keep = combine_masks(padding_mask(tokens, 0), causal_mask(5))
    q, k, v = qkv(b, h, 5, 5, dtype=dtype)
    out, weights = scaled_dot_product_attention(q, k, v, keep)
    torch.testing.assert_close(
        out, F.scaled_dot_product_attention(q, k, v, attn_mask=keep), atol=tol, rtol=tol
    )
    additive = to_additive_mask(keep, dtype)
    torch.testing.assert_close(
        out,
        F.scaled_dot_product_attention(q, k, v, attn_mask=additive),
        atol=tol,
        rtol=tol,
    )
    assert torch.all(weights[~keep.expand_as(weights)] == 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_fully_masked_rows_give_zeros_not_nan(dtype):
    q, k, v = qkv(2, 2, 3, 4, dtype=dtype)
    keep = torch.ones(2, 1, 3, 4, dtype=torch.bool)
    keep[0, :, 1] = False  # batch 0, query 1 may attend to nothing
    out, weights = scaled_dot_product_attention(q, k, v, keep)
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()
    assert torch.all(out[0, :, 1] == 0) and torch.all(weights[0, :, 1] == 0)
    torch.testing.assert_close(
        weights[0, :, 0].float().sum(-1), torch.ones(2), atol=1e-2, rtol=0
    )
    # PyTorch's SDPA (torch >= 2.5) also returns zeros for a query with no key left.
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(
        out, F.scaled_dot_product_attention(q, k, v, attn_mask=keep), atol=tol, rtol=tol
    )
    # With -inf as the fill, the same row is 0/0 = NaN.
    scores = (q @ k.transpose(-2, -1)).float().masked_fill(~keep, float("-inf"))
    assert torch.isnan(scores.softmax(-1)[0, :, 1]).all()


def test_mask_on_the_wrong_axis_is_silent_when_batch_equals_heads():
    """A [B, 1, S] padding mask lines B up with the heads axis of [B, H, Sq, Sk]. When B == H the
    shapes fit and the values are wrong; the package refuses such a mask."""
    b = h = 3
    q, k, v = qkv(b, h, 5, 5)
    right = padding_mask(TOKENS, 0)  # [B, 1, 1, S]
    wrong = (TOKENS != 0).unsqueeze(1)  # [B, 1, S]
    scores = q @ k.transpose(-2, -1) / 8**0.5
    silently_wrong = (
        scores.masked_fill(~wrong, -1e4).softmax(-1) @ v
    )  # broadcasts as [1, B, 1, S]
    assert not torch.allclose(
        silently_wrong, scaled_dot_product_attention(q, k, v, right)[0], atol=1e-3
    )
    with pytest.raises(ValueError, match="exactly 4 dims"):
        scaled_dot_product_attention(q, k, v, wrong)


def copy_to_torch(ours: MultiHeadAttention) -> nn.MultiheadAttention:
    theirs = nn.MultiheadAttention(ours.d_model, ours.n_heads, batch_first=True)
    with torch.no_grad():
        theirs.in_proj_weight.copy_(
            torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight])
        )
        theirs.in_proj_bias.copy_(
            torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias])
        )
        theirs.out_proj.load_state_dict(ours.out_proj.state_dict())
    return theirs.eval()


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 3e-2)])
def test_mha_masks_equal_nn_multihead_attention(dtype, tol):
    torch.manual_seed(0)
    ours = MultiHeadAttention(12, 3).eval()
    theirs = copy_to_torch(ours).to(dtype)
    ours = ours.to(dtype)
    x = torch.randn(3, 5, 12).to(dtype)  # B == H == 3
    keep = combine_masks(padding_mask(TOKENS, 0), causal_mask(5))
    want, _ = theirs(x, x, x, attn_mask=to_mha_masks(keep, 3), need_weights=False)
    torch.testing.assert_close(ours(x, mask=keep), want, atol=tol, rtol=tol)
    # The same through key_padding_mask (True = ignore) and a shared [Sq, Sk] causal ignore-mask.
    want2, _ = theirs(
        x,
        x,
        x,
        key_padding_mask=to_ignore_mask(padding_mask(TOKENS, 0))[:, 0, 0],
        attn_mask=to_mha_masks(causal_mask(5), 3),
        need_weights=False,
    )
    torch.testing.assert_close(want2, want, atol=tol, rtol=tol)


def test_mha_given_a_keep_mask_masks_the_opposite_keys():
    """Passing a keep-mask where nn.MultiheadAttention expects an ignore-mask inverts the masking."""
    torch.manual_seed(0)
    ours = MultiHeadAttention(8, 2).eval()
    theirs = copy_to_torch(ours)
    x = torch.randn(1, 4, 8)
    keep = causal_mask(4)
    confused, _ = theirs(x, x, x, attn_mask=keep[0, 0], need_weights=False)
    right, _ = theirs(x, x, x, attn_mask=to_mha_masks(keep, 2), need_weights=False)
    torch.testing.assert_close(right, ours(x, mask=keep), atol=1e-5, rtol=1e-5)
    assert not torch.allclose(confused[:, :3], right[:, :3], atol=1e-3)


def test_nn_multihead_attention_gives_nan_on_fully_padded_sequences_the_package_does_not():
    torch.manual_seed(0)
    ours = MultiHeadAttention(8, 2).eval()
    theirs = copy_to_torch(ours)
    tokens = torch.tensor([[3, 4, 0], [0, 0, 0]])
    x = torch.randn(2, 3, 8)
    # With the default need_weights=True it takes the plain path: 0/0 in the fully padded row.
    want, _ = theirs(x, x, x, key_padding_mask=tokens == 0)
    assert torch.isnan(want[1]).all()
    got = ours(x, mask=padding_mask(tokens, 0))
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got[0], want[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "call,error,message",
    [
        (
            lambda: padding_mask(torch.tensor([1, 2, 0]), 0),
            ValueError,
            "tokens must have shape [B, S], got (3,)",
        ),
        (lambda: padding_mask([[1, 2]], 0), TypeError, "got list"),
        (lambda: causal_mask(0), ValueError, "size must be a positive int, got 0"),
        (
            lambda: combine_masks(causal_mask(3), torch.ones(1, 1, 3, 3)),
            TypeError,
            "got dtype torch.float32",
        ),
        (
            lambda: combine_masks(causal_mask(3), causal_mask(4)),
            ValueError,
            "must broadcast together",
        ),
        (
            lambda: combine_masks(torch.ones(2, 3, dtype=torch.bool)),
            ValueError,
            "got shape (2, 3)",
        ),
        (lambda: to_ignore_mask(torch.ones(3)), TypeError, "got dtype torch.float32"),
        (
            lambda: to_additive_mask(causal_mask(2), torch.int64),
            TypeError,
            "floating point dtype, got torch.int64",
        ),
        (
            lambda: from_additive_mask(causal_mask(2)),
            TypeError,
            "floating point tensor, got torch.bool",
        ),
        (
            lambda: to_mha_masks(torch.ones(2, 4, 3, 3, dtype=torch.bool), 2),
            ValueError,
            "H=2 or 1",
        ),
    ],
)
def test_bad_input_gets_a_clear_error(call, error, message):
    with pytest.raises(error) as info:
        call()
    assert message in str(info.value)
