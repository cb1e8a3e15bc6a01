"""masked_attention (chapter 3, book/ch03_masks): the unit tests of
``ch03.check_masked_attention``, its half-precision cell
(``check_masked_attention_half_precision``), its hidden "written by hand" test, and the
mask probes (``check_mask_probes``: the learner's masked attention with their own
masks, judged by behaviour), with wrong implementations (each rejected with its named
diagnosis) and right ones written differently (each accepted).

Beyond the bank (bank_masked_attention.py): a fill value that passes float32 and is
named in half precision, an unfinished answer and SDPA refused by the hidden test, the
probes' messages for wrong masks, and silence on stderr (nbgrader gives a test cell
zero when it writes there).
"""

import math

import pytest
import torch
import torch.nn.functional as F
from bank_masked_attention import (
    _scores,
    masked_after_softmax,
    masked_fill_zero,
    masked_ignores_mask,
    masked_inf_then_nan_to_num,
    masked_inverted,
    masked_min_then_zero,
    masked_minus_1e9,
    masked_minus_inf,
    masked_no_scaling,
)

from tformer_grading.checks import CheckFailure, ch03
from tformer_ref.masks import causal_mask, padding_mask

# --------------------------------------------------------------------------- masked attention: right ones


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


def _masked_times_minus_inf(q, k, v, mask):
    scores = q @ k.transpose(-2, -1) / q.size(-1) ** 0.5
    weights = (scores + (~mask) * float("-inf")).softmax(-1)
    return weights @ v, weights


def test_probes_read_nan_outputs_as_a_change():
    """Bug: 0 * -inf is NaN on every kept key, every output is NaN, and the causality
    probe, looking for a change of at least 1e-5, found none and crashed on an empty
    index. Cause: NaN compares False both ways. Guard: NaN counts as changed."""
    with pytest.raises(
        CheckFailure, match=r"causality violated.*token 0: its output is NaN"
    ):
        ch03.check_mask_probes(_masked_times_minus_inf, CAUSAL, PAD)


def test_checks_write_nothing_to_stderr(capfd):
    ch03.check_masked_attention(masked_min_then_zero)
    for fn in (masked_minus_1e9, masked_minus_inf):
        with pytest.raises(CheckFailure):
            ch03.check_masked_attention_half_precision(fn)
    assert capfd.readouterr().err == ""
