"""Chapter 2's measured bank: attention and attention_entropy (see bank.py)."""
import math

import torch

from bank import GENERIC, right, wrong  # noqa: F401
from tformer_grading.checks import ch02

GRADERS = {
    "attention": lambda fn: (ch02.check_attention(fn), ch02.check_attention_by_hand(fn)),
    "attention_entropy": ch02.check_attention_entropy,
}


@right("attention")
def attention_matmul(q, k, v):
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), dim=-1)
    return weights @ v, weights


@wrong("attention", r"'no scaling'", listed=True)
def attention_forgot_scale(q, k, v):
    weights = torch.softmax(q @ k.transpose(-2, -1), dim=-1)
    return weights @ v, weights
