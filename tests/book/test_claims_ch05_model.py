"""Chapter 5's random-experiment claims, rerun at small sizes over seeds.

The lesson: ``nbsrc/book/ch05_model/lesson.py``. How claims are found and listed:
``tests/book/seed_claims.py``.
"""

import math

import pytest
import torch
from torch import nn

from tests.book.seed_claims import Claim, NotRandom
from tformer_ref.model import DecoderOnlyLM
from tformer_ref.positions import sinusoidal_encoding

SEEDS = range(5)

CLAIMS = [
    Claim(
        "ch05_model/lesson",
        ("all(6 < r < 10 for r in ratios)",),
        "with learned positions, a token row scaled by √D is about √D = 8 times as long "
        "as a position row",
        "test_learned_positions_are_shorter_than_scaled_tokens",
    ),
    Claim(
        "ch05_model/lesson",
        (
            (
                "small_unscaled < 0.1 * position_len and "
                "1.0 < small_scaled / position_len < 2.0"
            ),
            "big_scaled > 20 * position_len",
        ),
        "against a sinusoidal row, an N(0, 1/D) token row is drowned unscaled and of "
        "comparable length scaled by √D, while an N(0, 1) row scaled by √D drowns it",
        "test_token_lengths_against_a_sinusoidal_position",
    ),
]

NOT_RANDOM = [
    NotRandom(
        "ch05_model/lesson",
        (
            (
                "table.shape == (256, 64) and len(dims_outside) >= 16 and "
                "min(dims_outside) >= 16"
            ),
            "max(dims_outside) < d_model - 4",
        ),
        "the sinusoidal table is a formula of the position and the dimension: which "
        "dimensions leave their training range involves no random draw",
    ),
]


@pytest.mark.parametrize("seed", SEEDS)
def test_learned_positions_are_shorter_than_scaled_tokens(seed):
    """At the lesson's size (D = 64): ratio 7.9-8.3 over seeds 0-4."""
    torch.manual_seed(seed)
    lm = DecoderOnlyLM(100, 64, 4, 1, 128, max_len=64, positions="learned")
    with torch.no_grad():
        token = (lm.tok_embed.weight * math.sqrt(64)).norm(dim=-1).mean().item()
        position = lm.pos.embedding.weight.norm(dim=-1).mean().item()
    assert 6 < token / position < 10


@pytest.mark.parametrize("seed", SEEDS)
def test_token_lengths_against_a_sinusoidal_position(seed):
    """At the lesson's size (D = 512, 1000 tokens, 4 x 50 looked up), seeds 0-4:
    N(0, 1/D) unscaled 0.062-0.063 of the position's length, scaled 1.41-1.42 times
    it; N(0, 1) scaled 31.9-32.2 times it (about sqrt(2D) = 32)."""
    torch.manual_seed(seed)
    D, V = 512, 1000
    tokens = torch.randint(0, V, (4, 50))
    position_len = sinusoidal_encoding(50, D).norm(dim=-1).mean().item()
    lengths = {}
    for std in (D**-0.5, 1.0):
        table = nn.Embedding(V, D)
        if std != 1.0:
            nn.init.normal_(table.weight, std=std)
        with torch.no_grad():
            lengths[std] = table(tokens).norm(dim=-1).mean().item()
    small_unscaled, big_unscaled = lengths[D**-0.5], lengths[1.0]
    small_scaled, big_scaled = (
        small_unscaled * math.sqrt(D),
        big_unscaled * math.sqrt(D),
    )
    assert small_unscaled < 0.1 * position_len
    assert 1.0 < small_scaled / position_len < 2.0
    assert big_scaled > 20 * position_len
