"""attention_entropy (chapter 2, book/ch02_attention): the unit tests of
``ch02.check_attention_entropy``: right entropies written differently accepted, each
wrong one rejected with its diagnosis (the measured ε of ln(w + ε) included), and the
learner's line with the case's shape when their code raises.
"""

import math

import pytest
import torch
from bank_attention_entropy import entropy_masked_log
from bank_attention_entropy import entropy_tiny_clamp as entropy_clamped

from tformer_grading.checks import CheckFailure, ch02

# --------------------------------------------------------------------------- entropy


def entropy_xlogy(w):
    return -torch.xlogy(w, w).sum(-1)


def entropy_nan_to_num(w):
    return -(w * w.log()).nan_to_num(0.0).sum(-1)


@pytest.mark.parametrize(
    "fn", [entropy_xlogy, entropy_masked_log, entropy_clamped, entropy_nan_to_num]
)
def test_entropy_accepts_right_implementations(fn, capsys):
    ch02.check_attention_entropy(fn)
    assert "✓ attention_entropy" in capsys.readouterr().out


@pytest.mark.parametrize(
    "fn,diagnosis",
    [
        (
            lambda w: -(w * torch.log(w)).sum(-1),
            "0·log 0 gives NaN",
        ),  # log(0) = -inf, 0 * -inf = NaN
        (
            lambda w: -torch.xlogy(w, w).sum(-1) / math.log(2),
            "log base 2",
        ),  # bits, not nats
        (lambda w: -(w * w.clamp_min(1e-30).log2()).sum(-1), "log base 2"),
        (lambda w: torch.xlogy(w, w).sum(-1), "missing minus sign"),
        (
            lambda w: -torch.xlogy(w, w).sum(-2),
            "sum over the wrong axis",
        ),  # summed over queries
        (lambda w: -torch.xlogy(w, w).mean(-1), "mean instead of sum"),
        (
            lambda w: -(w * (w + 1e-3).log()).sum(-1),
            r"ln\(w \+ ε\) with ε ≈ 0\.001",
        ),  # eps too large
    ],
)
def test_entropy_rejects_wrong_implementations(fn, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch02.check_attention_entropy(fn)


def test_entropy_reports_the_learners_line_when_it_raises():
    with pytest.raises(
        CheckFailure,
        match=r"raised IndexError.*while the check ran case "
        r"weights \[3, 4, 6\] \(3-D\)",
    ):
        ch02.check_attention_entropy(lambda w: -torch.xlogy(w, w).sum(dim=3))
