"""attention (chapter 2, book/ch02_attention): the unit tests of
``ch02.check_attention`` and its hidden ``check_attention_by_hand``, with wrong
implementations (each rejected with its named diagnosis) and right ones written
differently (each accepted).

Beyond the bank (bank_attention.py): the lesson a failure points to (§2.5), the
learner's line and the case's sizes when their code raises, an exception in the hidden
test reported rather than crashing it, delegation to PyTorch's or the course's
attention, and the large-scores case that names a softmax without its max shift.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from bank_attention import attention_sqrt_d_model
from bank_attention import attention_stable_exp_by_hand as attention_exp_by_hand
from bank_attention import attention_weights_at_k as attention_no_transpose_of_v
from units_ch02 import attention_matmul, attention_no_scaling

from tformer_grading.checks import CheckFailure, ch02

# --------------------------------------------------------------------------- attention: right ones


def attention_einsum_prescaled(q, k, v):
    q = q * q.shape[-1] ** -0.5  # scaling q first is the same maths
    weights = torch.einsum("bhqd,bhkd->bhqk", q, k).softmax(-1)
    return torch.einsum("bhqk,bhkd->bhqd", weights, v), weights


def attention_bmm(q, k, v):
    b, h, sq, dh = q.shape
    flat = lambda t: t.reshape(b * h, t.size(2), dh)
    weights = torch.bmm(flat(q), flat(k).transpose(1, 2)).div(math.sqrt(dh)).softmax(-1)
    return torch.bmm(weights, flat(v)).view(b, h, sq, dh), weights.view(b, h, sq, -1)


@pytest.mark.parametrize(
    "fn",
    [
        attention_matmul,
        attention_einsum_prescaled,
        attention_exp_by_hand,
        attention_bmm,
    ],
)
def test_attention_accepts_right_implementations(fn, capsys):
    ch02.check_attention(fn)
    ch02.check_attention_by_hand(fn)
    out = capsys.readouterr().out
    assert (
        "✓ attention (weights)" in out
        and "✓ attention (output)" in out
        and "written by hand" in out
    )


# --------------------------------------------------------------------------- attention: wrong ones


def attention_divided_by_dk(q, k, v):  # forgot the square root
    w = F.softmax(torch.matmul(q, k.transpose(2, 3)) / q.shape[3], dim=3)
    return w @ v, w


def attention_softmax_queries(q, k, v):  # dim=2 looks like "the sequence axis"
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) * q.size(-1) ** -0.5
    w = F.softmax(scores, dim=2)
    return w @ v, w


def attention_softmax_heads(q, k, v):  # dim=1, as one would for [B, S, S] scores
    w = q.matmul(k.mT).div(math.sqrt(q.size(-1))).softmax(dim=1)
    return w.matmul(v), w


def attention_returns_only_output(q, k, v):
    w = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(-1)
    return w @ v


def attention_weights_first(q, k, v):  # the pair in the wrong order
    out, w = attention_matmul(q, k, v)
    return w, out


def attention_calls_sdpa(q, k, v):
    w = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(-1)
    return F.scaled_dot_product_attention(q, k, v), w


def attention_calls_reference(q, k, v):
    from tformer_ref.attention import scaled_dot_product_attention

    return scaled_dot_product_attention(q, k, v)


@pytest.mark.parametrize(
    "fn,diagnosis",
    [
        (attention_no_scaling, "'no scaling'"),
        (attention_sqrt_d_model, r"'scaled by sqrt\(d_model\)'"),
        (attention_divided_by_dk, r"'scaled by d_k instead of sqrt\(d_k\)'"),
        (attention_softmax_queries, r"'softmax over the wrong axis \(queries\)'"),
        (attention_softmax_heads, r"'softmax over the wrong axis \(heads\)'"),
        (attention_returns_only_output, r"must return a pair \(out, weights\)"),
        (attention_weights_first, "'pair in the wrong order'"),
        (
            attention_no_transpose_of_v,
            r"attention \(output\).*weighted sum of the rows of k",
        ),
    ],
)
def test_attention_rejects_wrong_implementations(fn, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch02.check_attention(fn)


def test_attention_failures_point_to_the_lesson():
    with pytest.raises(CheckFailure) as info:
        ch02.check_attention(attention_sqrt_d_model)
    assert (
        "§2.5 'Scaling by √d_model is a bug' in book/ch02_attention/lesson.ipynb"
        in str(info.value)
    )


@pytest.mark.parametrize(
    "fn,diagnosis",
    [
        (attention_calls_sdpa, "calls scaled_dot_product_attention"),
        (attention_calls_reference, "calls tformer_ref.scaled_dot_product_attention"),
    ],
)
def test_attention_by_hand_rejects_delegation(fn, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch02.check_attention_by_hand(fn)


# --------------------------------------------------------------------------- clean failures


def attention_raises_on_cross_attention(q, k, v):  # assumes Sq == Sk
    w = (q @ q.mT / math.sqrt(q.size(-1))).softmax(-1)
    return w @ v, w


def test_attention_reports_the_learners_line_when_it_raises():
    with pytest.raises(
        CheckFailure,
        match=r"your code raised RuntimeError: .* at line \d+ of "
        r"your code: `return w @ v, w` \(the call that raised: matmul of "
        r"\[2, 3, 4, 4\] and \[2, 3, 5, 8\]\) while the check "
        r"ran case q \[B=2, H=3, Sq=4.*for the first two axes of a batched "
        r"product's second operand \[B·H, Sq\] was expected and \[B·H, Sk\] came; "
        r"the call that raised was matmul of \[B, H, Sq, Sq\] and \[B, H, Sk, Dh\]",
    ):
        ch02.check_attention(attention_raises_on_cross_attention)


def test_attention_by_hand_reports_an_exception_instead_of_crashing():
    def raises(q, k, v):
        raise ValueError("not yet")

    with pytest.raises(CheckFailure, match=r"your code raised ValueError: not yet"):
        ch02.check_attention_by_hand(raises)


def attention_softmax_by_formula(q, k, v):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    exps = scores.exp()
    weights = exps / exps.sum(-1, keepdim=True)
    return weights @ v, weights


def attention_softmax_shifted_by_hand(q, k, v):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    exps = (scores - scores.max(dim=-1, keepdim=True).values).exp()
    weights = exps / exps.sum(-1, keepdim=True)
    return weights @ v, weights


def test_a_softmax_without_its_max_shift_is_named_on_large_scores(capsys):
    """Bug (held-out trial 2026-12-06): exp(scores) / sum passed, since the cases'
    scores stayed far below where exp overflows float32. Guard: a case whose scores
    reach about 190, after the usual ones; the shifted softmax by hand passes it."""
    with pytest.raises(CheckFailure, match="softmax overflows on large scores"):
        ch02.check_attention(attention_softmax_by_formula)
    ch02.check_attention(attention_softmax_shifted_by_hand)
    assert "✓ attention (large scores)" in capsys.readouterr().out
