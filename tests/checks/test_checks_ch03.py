"""The chapter 3 checks, tested with banks of wrong implementations (each rejected with its named
diagnosis) and right ones written differently (each accepted)."""

import math

import pytest
import torch
import torch.nn.functional as F

from tformer_grading.checks import CheckFailure, ch03
from tformer_ref.masks import causal_mask, padding_mask

# --------------------------------------------------------------------------- causal mask


@pytest.mark.parametrize(
    "fn",
    [
        lambda s: torch.ones(s, s, dtype=torch.bool).tril()[None, None],
        lambda s: torch.tril(
            torch.ones(s, s)
        ).bool(),  # [S, S] broadcasts the same way: accepted
        lambda s: (torch.arange(s)[:, None] >= torch.arange(s)[None, :]).view(
            1, 1, s, s
        ),
        lambda s: ~torch.ones(1, 1, s, s, dtype=torch.bool).triu(1),
    ],
)
def test_causal_mask_accepts_right_implementations(fn, capsys):
    ch03.check_causal_mask(fn)
    assert "✓ causal_mask" in capsys.readouterr().out


@pytest.mark.parametrize(
    "fn,diagnosis",
    [
        (
            lambda s: torch.triu(torch.ones(s, s)).bool(),
            "triu instead of tril",
        ),  # the future, not the past
        # True = ignore, nn.MultiheadAttention's convention
        (
            lambda s: ~torch.ones(s, s, dtype=torch.bool).tril()[None, None],
            "mask inverted",
        ),
        (
            lambda s: (torch.arange(s)[:, None] < torch.arange(s)).view(1, 1, s, s),
            "mask inverted",
        ),
        # key < query, strictly: nobody attends to itself
        (lambda s: torch.arange(s)[:, None] > torch.arange(s), "diagonal excluded"),
        (
            lambda s: torch.tril(torch.ones(1, 1, s, s)),
            "float mask instead of bool",
        ),  # the seed's tril(ones) as is
    ],
)
def test_causal_mask_rejects_wrong_implementations(fn, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch03.check_causal_mask(fn)


def test_a_mask_right_only_up_to_a_buffer_size_is_named_with_the_size_it_fails():
    """Bug (held-out trial 2026-12-06): a mask sliced from a 256 × 256 buffer passed,
    since every case was shorter. Guard: one case longer than any usual block size."""
    buffer = torch.ones(256, 256).tril().bool()

    def causal_mask(size):
        return buffer[:size, :size].unsqueeze(0).unsqueeze(0)

    with pytest.raises(
        CheckFailure, match=r"long sequences.*returned shape \[1, 1, 256"
    ):
        ch03.check_causal_mask(causal_mask)


# --------------------------------------------------------------------------- padding mask


@pytest.mark.parametrize(
    "fn",
    [
        lambda t, p: (t != p)[:, None, None, :],
        lambda t, p: (
            (t != p).unsqueeze(1).unsqueeze(2)
        ),  # the seed's form, with pad_id instead of 0
        lambda t, p: t.ne(p).view(t.size(0), 1, 1, t.size(1)),
        lambda t, p: ~(t == p).reshape(t.shape[0], 1, 1, -1),
    ],
)
def test_padding_mask_accepts_right_implementations(fn, capsys):
    ch03.check_padding_mask(fn)
    assert "✓ padding_mask" in capsys.readouterr().out


@pytest.mark.parametrize(
    "fn,diagnosis",
    [
        (
            lambda t, p: (t != p).unsqueeze(1),
            "'mask broadcast over the wrong axis'",
        ),  # [B, 1, S]
        # [B, S]: no singleton axes, so the batch lines up with the queries
        (lambda t, p: t.ne(p), r"mask broadcast over the wrong axis \(\[B, S\]\)"),
        # [B, 1, S, 1]: drops padded queries, not padded keys
        (lambda t, p: (t != p).unsqueeze(1).unsqueeze(-1), "mask on the query axis"),
        # True on the padding: key_padding_mask's convention
        (lambda t, p: t.eq(p).view(t.size(0), 1, 1, -1), "mask inverted"),
        (
            lambda t, p: (t != 0).unsqueeze(1).unsqueeze(2),
            "pad id hard-coded",
        ),  # the seed's x != 0
        # 1.0 = keep, 0.0 = drop: PyTorch adds a float mask, so nothing is dropped
        (
            lambda t, p: torch.where(t != p, 1.0, 0.0)[:, None, None],
            "float mask instead of bool",
        ),
    ],
)
def test_padding_mask_rejects_wrong_implementations(fn, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch03.check_padding_mask(fn)


def test_wrong_axis_diagnosis_explains_the_batch_equals_heads_trap():
    with pytest.raises(CheckFailure) as info:
        ch03.check_padding_mask(lambda t, p: (t != p).unsqueeze(1))
    assert "B == H" in str(info.value) and "§3.1 'Padding masks'" in str(info.value)


# --------------------------------------------------------------------------- masked attention: right ones


def masked_min_then_zero(
    q, k, v, mask
):  # the reference's semantics: zeros for fully masked rows
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = scores.softmax(-1).masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return weights @ v, weights


def masked_min_uniform(q, k, v, mask):  # fully masked rows left uniform: accepted
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / q.shape[-1] ** 0.5
    weights = torch.softmax(
        scores.masked_fill(mask.logical_not(), torch.finfo(q.dtype).min), dim=-1
    )
    return torch.einsum("bhqk,bhkd->bhqd", weights, v), weights


def masked_where_minus_1e4(q, k, v, mask):  # -1e4 fits float16 and exp(-1e4) is 0: fine
    scores = q @ k.mT / math.sqrt(q.size(-1))
    weights = torch.where(mask, scores, torch.tensor(-1e4, dtype=scores.dtype)).softmax(
        -1
    )
    return weights @ v, weights


def masked_inf_then_nan_to_num(q, k, v, mask):  # -inf, then NaN rows repaired: fine
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    weights = scores.masked_fill(~mask, float("-inf")).softmax(-1).nan_to_num(0.0)
    return weights @ v, weights


def masked_additive(q, k, v, mask):
    bias = torch.zeros(mask.shape, dtype=q.dtype).masked_fill(
        ~mask, torch.finfo(q.dtype).min
    )
    weights = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)) + bias).softmax(-1)
    return weights @ v, weights


RIGHT_MASKED = [
    masked_min_then_zero,
    masked_min_uniform,
    masked_where_minus_1e4,
    masked_inf_then_nan_to_num,
    masked_additive,
]


@pytest.mark.parametrize("fn", RIGHT_MASKED)
def test_masked_attention_accepts_right_implementations(fn, capsys):
    ch03.check_masked_attention(fn)
    ch03.check_masked_attention_half_precision(fn)
    ch03.check_masked_attention_by_hand(fn)
    ch03.check_mask_probes(fn, causal_mask, padding_mask)
    out = capsys.readouterr().out
    assert out.count("✓ masked_attention") == 5 and "✓ mask probes" in out


# --------------------------------------------------------------------------- masked attention: wrong ones


def _scores(q, k):
    return q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))


def masked_after_softmax(
    q, k, v, mask
):  # zeroes weights after normalising: rows no longer sum to 1
    weights = _scores(q, k).softmax(-1) * mask
    return weights @ v, weights


def masked_inverted(q, k, v, mask):  # treats True as "ignore"
    weights = torch.where(mask, torch.finfo(q.dtype).min, _scores(q, k)).softmax(-1)
    return weights @ v, weights


def masked_minus_inf(q, k, v, mask):  # fully masked rows become NaN
    weights = _scores(q, k).masked_fill(mask == 0, float("-inf")).softmax(-1)
    return weights @ v, weights


def masked_minus_1e9(
    q, k, v, mask
):  # the seed: fine in float32, refused by float16's masked_fill
    weights = _scores(q, k).masked_fill(mask == 0, -1e9).softmax(-1)
    return weights @ v, weights


def masked_minus_1e20(q, k, v, mask):  # the other seed
    weights = F.softmax(_scores(q, k).masked_fill(mask == 0, float("-1e20")), dim=3)
    return weights @ v, weights


def masked_where_1e9(
    q, k, v, mask
):  # torch.where quietly turns -1e9 into -inf in float16: NaN there only
    scores = _scores(q, k)
    weights = torch.where(mask, scores, torch.tensor(-1e9, dtype=scores.dtype)).softmax(
        -1
    )
    return weights @ v, weights


def masked_fill_zero(q, k, v, mask):  # scores times the mask: masked ones 0, exp(0) = 1
    weights = (_scores(q, k) * mask).softmax(-1)
    return weights @ v, weights


def masked_ignores_mask(q, k, v, mask):  # the mask argument is never used
    weights = torch.einsum("bhqd,bhkd->bhqk", q, k).div(q.size(-1) ** 0.5).softmax(-1)
    return torch.einsum("bhqk,bhkd->bhqd", weights, v), weights


def masked_no_scaling(q, k, v, mask):  # chapter 2's bug, back again
    scores = torch.matmul(q, k.mT)  # no / √d_k
    weights = scores.masked_fill(mask.logical_not(), -1e4).softmax(dim=-1)
    return torch.matmul(weights, v), weights


def masked_calls_sdpa(q, k, v, mask):
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask
    ), masked_min_then_zero(q, k, v, mask)[1]


@pytest.mark.parametrize(
    "fn,diagnosis",
    [
        (masked_after_softmax, "mask applied after softmax"),
        (masked_inverted, "mask inverted"),
        (masked_minus_inf, "NaN on fully masked rows"),
        (masked_fill_zero, "masked with 0 instead of a large negative number"),
        (masked_ignores_mask, "mask ignored"),
        (masked_no_scaling, "'no scaling'"),
    ],
)
def test_masked_attention_rejects_wrong_implementations(fn, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch03.check_masked_attention(fn)


@pytest.mark.parametrize("fn", [masked_minus_1e9, masked_minus_1e20, masked_where_1e9])
def test_overflowing_fill_passes_float32_and_fails_half_precision_by_name(fn, capsys):
    ch03.check_masked_attention(fn)  # uniform fully masked rows are accepted in float32
    with pytest.raises(
        CheckFailure, match="fill value that overflows in half precision"
    ):
        ch03.check_masked_attention_half_precision(fn)


@pytest.mark.parametrize(
    "fn,diagnosis",
    [
        (masked_minus_inf, "NaN on fully masked rows"),
        (masked_inverted, "mask inverted"),
    ],
)
def test_half_precision_check_names_other_pitfalls_too(fn, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch03.check_masked_attention_half_precision(fn)


def test_masked_attention_by_hand_fails_an_unfinished_answer():
    def unfinished(q, k, v, mask):  # the untouched student cell
        raise NotImplementedError()

    with pytest.raises(CheckFailure, match="raised NotImplementedError"):
        ch03.check_masked_attention_by_hand(unfinished)


def test_masked_attention_by_hand_rejects_sdpa():
    with pytest.raises(CheckFailure, match="calls scaled_dot_product_attention"):
        ch03.check_masked_attention_by_hand(masked_calls_sdpa)


# --------------------------------------------------------------------------- probes

CAUSAL, PAD = causal_mask, padding_mask


@pytest.mark.parametrize(
    "attn,causal,pad,diagnosis",
    [
        # triu: each query sees itself and the future
        (
            masked_min_then_zero,
            lambda s: torch.ones(s, s, dtype=torch.bool).triu(),
            PAD,
            "'causality violated'. Changing tokens 3..5 changed the outputs of tokens 0..2",
        ),
        # True = ignore (nn.MultiheadAttention's convention) read as True = attend
        (
            masked_min_then_zero,
            lambda s: ~torch.ones(s, s, dtype=torch.bool).tril(),
            PAD,
            "'causality violated'",
        ),
        (masked_inverted, CAUSAL, PAD, "'causality violated'"),
        (masked_ignores_mask, CAUSAL, PAD, "'causality violated'"),
        (masked_fill_zero, CAUSAL, PAD, "'causality violated'"),
        # True on the padding: real tokens attend to the pads appended after them
        (
            masked_min_then_zero,
            CAUSAL,
            lambda t, p: (t == p)[:, None, None, :],
            "'pad invariance violated'. Appending padding tokens",
        ),
        # [B, 1, S] with B == H == 2: runs, but each sequence is masked with the other one's
        # padding, so it reads what sits at its own padded positions.
        (
            masked_min_then_zero,
            CAUSAL,
            lambda t, p: (t != p).unsqueeze(1),
            "'attends to padding'. Changing the keys and values at padded positions",
        ),
    ],
)
def test_probes_reject(attn, causal, pad, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch03.check_mask_probes(attn, causal, pad)


def test_checks_write_nothing_to_stderr(capfd):
    ch03.check_masked_attention(masked_min_then_zero)
    for fn in (masked_minus_1e9, masked_minus_inf):
        with pytest.raises(CheckFailure):
            ch03.check_masked_attention_half_precision(fn)
    assert capfd.readouterr().err == ""
