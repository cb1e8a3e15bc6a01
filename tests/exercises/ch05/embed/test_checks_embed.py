"""embed (chapter 5, book/ch05_model): the unit tests of ``ch05.check_embed``,
with wrong embeddings (each rejected with its named diagnosis) and right ones written
differently (each accepted).

Beyond the bank (bank_embed.py): the fit that reads an embedding's scale, its position
rows and whether the positions are scaled too.
"""

import pytest
import torch.nn.functional as F
from bank_embed import embed_arange_lookup as embed_right_arange
from bank_embed import embed_divided, embed_times_d, embed_unscaled
from bank_embed import embed_forgot_positions as embed_no_positions
from bank_embed import embed_pe_by_token as embed_by_token_id
from bank_embed import embed_plain as embed_right
from bank_embed import embed_sum_scaled as embed_positions_scaled

from tformer_grading.checks import CheckFailure, ch05
from tformer_grading.checks.ch05.embed import embed_probe, fit_embed

# --------------------------------------------------------------------------- embed


def embed_right_functional(
    tokens, table, pe
):  # F.embedding, d from pe, positions broadcast by unsqueeze
    d = pe.size(-1)
    return F.embedding(tokens, table.weight) * d**0.5 + pe[: tokens.shape[1]].unsqueeze(
        0
    )


@pytest.mark.parametrize(
    "fn", [embed_right, embed_right_functional, embed_right_arange]
)
def test_embed_accepts_right_implementations(fn, capsys):
    ch05.check_embed(fn)
    assert "✓ embed" in capsys.readouterr().out


@pytest.mark.parametrize(
    "fn,diagnosis",
    [
        (embed_unscaled, "missing √d_model embedding scale"),
        (embed_times_d, r"scaled by d_model, not √d_model"),
        (embed_divided, r"divided by √d_model"),
        (embed_positions_scaled, "positions scaled too"),
        (embed_by_token_id, "positions looked up by token id"),
        (embed_no_positions, "no positional encoding is added"),
    ],
)
def test_embed_rejects_wrong_implementations(fn, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch05.check_embed(fn)


def test_embed_fit_reads_scale_and_rows():
    tokens, table, pe = embed_probe(0)()
    got = table(tokens) * 3.0 + pe[1 : tokens.size(1) + 1]
    fit = fit_embed(got, tokens, table, pe)
    assert abs(fit.scale - 3.0) < 1e-4 and fit.rows == tuple(range(1, 7))
    assert abs(fit.pos_scale - 1.0) < 1e-4 and fit.shared
