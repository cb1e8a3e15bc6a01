"""feed_forward (chapter 4, book/ch04_blocks): the unit tests of
``ch04.check_feed_forward``, with wrong feed-forwards (each rejected with its named
diagnosis) and a right one (accepted). Each wrong one says in a comment what bug it is.

Beyond the bank (bank_feed_forward.py): a module that does not take the exercise's
``FeedForward(d_model, d_ff, dropout)`` is told so, and a feed-forward without its
biases is named while zero-initialised biases are not.
"""

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from units_ch04 import FF

from tformer_grading.checks import CheckFailure, ch04

# --------------------------------------------------------------------------- FeedForward


class FFSequential(nn.Module):
    """Written as nn.Sequential, second layer registered first (a right one)."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(d_model, d_ff),
            nn.ReLU(),
            nn.Dropout(0.1),
            nn.Linear(d_ff, d_model),
        )

    def forward(self, x):
        return self.net(x)


class FFClamp(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.down = nn.Linear(d_ff, d_model)
        self.up = nn.Linear(d_model, d_ff)

    def forward(self, x):
        return self.down(self.up(x).clamp(min=0))


class FFMatmul(nn.Module):
    """Right: the layers' weights used by hand, ReLU as a maximum with zero."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        h = x @ self.fc1.weight.T + self.fc1.bias
        return torch.maximum(h, torch.zeros_like(h)) @ self.fc2.weight.T + self.fc2.bias


class FFNoActivation(FF):  # forgot the ReLU
    def forward(self, x):
        return self.l2(self.l1(x))


class FFReluAtOutput(FF):  # ReLU after both layers
    def forward(self, x):
        return F.relu(self.l2(F.relu(self.l1(x))))


class FFSquareMatrices(nn.Module):  # d_ff ignored: Linear(D, D) twice
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.l1, self.l2 = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)

    def forward(self, x):
        return self.l2(F.relu(self.l1(x)))


@pytest.mark.parametrize("cls", [FF])
def test_feed_forward_accepts_right_implementations(cls, capsys):
    ch04.check_feed_forward(cls)
    assert "✓ FeedForward" in capsys.readouterr().out


@pytest.mark.parametrize(
    "cls,diagnosis",
    [
        (FFNoActivation, "no activation between the two Linear layers"),
        (FFReluAtOutput, "ReLU after the output layer"),
        (FFSquareMatrices, "expected exactly two nn.Linear layers"),
        # The text gives FeedForward(d_model, d_ff, dropout=0.0): the rate is an argument.
        (FFSequential, r"does not take the exercise's FeedForward\(d_model, d_ff"),
        (FFClamp, r"does not take the exercise's FeedForward\(d_model, d_ff"),
        (FFMatmul, r"does not take the exercise's FeedForward\(d_model, d_ff"),
    ],
)
def test_feed_forward_rejects_wrong_implementations(cls, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch04.check_feed_forward(cls)


class FFWithoutBiases(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.w1 = nn.Linear(d_model, d_ff, bias=False)  # "the bias is redundant"
        self.w2 = nn.Linear(d_ff, d_model, bias=False)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        return self.w2(self.drop(torch.relu(self.w1(x))))


class FFZeroInitBiases(FF):  # right: biases that start at 0 are still parameters
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__(d_model, d_ff, dropout)
        for layer in (self.l1, self.l2):
            nn.init.zeros_(layer.bias)


def test_a_feed_forward_without_biases_is_named_and_zero_biases_are_not():
    """Bug (held-out trial 2026-12-06): Linear(..., bias=False) twice passed, since the
    check compared with the formula on the learner's own layers. Guard: with random
    parameters FeedForward(0) must not be exactly 0."""
    with pytest.raises(CheckFailure, match="without its biases.*exactly 0"):
        ch04.check_feed_forward(FFWithoutBiases)
    ch04.check_feed_forward(FFZeroInitBiases)
