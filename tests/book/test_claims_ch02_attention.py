"""Chapter 2's random-experiment claims, rerun at small sizes over seeds.

The lesson: ``nbsrc/book/ch02_attention/lesson.py``. How claims are found and listed:
``tests/book/seed_claims.py``. The lesson's experiments are already small; where a
smaller one would change the claim, the test keeps the lesson's size.
"""

import math

import pytest
import torch

from tests.book.seed_claims import Claim, NotRandom
from tformer_ref.attention import scaled_dot_product_attention

SEEDS = range(5)
PAGE = "ch02_attention/lesson"

CLAIMS = [
    Claim(
        PAGE,
        ("abs(var / d_k - 1) < 0.15 and abs(var_s - 1) < 0.15",),
        "var(q·k) is d_k within 15 %, and var(q·k / √d_k) is 1 within 15 %",
        "test_dot_product_variance_grows_like_d_k",
    ),
    Claim(
        PAGE,
        ("jac_scaled > 100 * jac_512", "1.5 < jac_scaled / jac_64 < 10"),
        "a typical row's softmax Jacobian is over 100 times smaller at score std √512 "
        "than at std 1, and only 1.5 to 10 times smaller at std 8",
        "test_unscaled_softmax_saturates_with_the_head_size",
    ),
    Claim(
        PAGE,
        ("jac_8thirds > jac_third",),
        "at PyTorch's default init (score std 8/3 unscaled, 1/3 scaled) the unscaled "
        "softmax's typical Jacobian is the larger",
        "test_default_init_does_not_saturate",
    ),
    Claim(
        PAGE,
        (
            "(rows_s < 0.001 * typical).float().mean() < 0.01",
            "max(at512['median']) < 0.1",
            "min(at512['starved']) > 0.25",
            "min(at512['p99']) > 10",
            "min(at512['wq'] + at512['wk']) > 8",
            "min(at64['median']) > 1",
            "min(at64['wq'] + at64['wk'] + at64init['wq'] + at64init['wk']) > 4",
        ),
        "without the scaling, at d_k = 512 a typical query row gets under 0.1 of its "
        "scaled gradient, over a quarter of the rows starve, the 99th percentile gets "
        "over 10 times more and W_q, W_k over 8 times more; at d_k = 64 even a typical "
        "row gets more and W_q, W_k over 4 times more; with the scaling under 1 % of "
        "the rows starve",
        "test_unscaled_gradients_both_vanish_and_grow",
    ),
    Claim(
        PAGE,
        ("entropies[0] > entropies[-1] and entropies[-1] < 0.5",),
        "attention entropy falls as the scores are multiplied, to under 0.5 nats at "
        "32 times the scaled scores",
        "test_entropy_falls_with_the_factor",
    ),
    Claim(
        PAGE,
        (
            "e_model[seed] > e_scaled[seed] + 0.2",
            "e_scaled[seed] > e_x8[seed] + 1.0",
            "e_x8[seed] > e_x22[seed] + 0.1",
        ),
        "mean entropy: ÷√d_model (H = 8) is over 0.2 nats above ÷√d_k, which is over "
        "1.0 above no scaling at d_k = 64, which is over 0.1 above no scaling at 512",
        "test_panel_entropies_are_ordered",
    ),
    Claim(
        PAGE,
        (
            (
                "entropy['none'] + 1 < entropy['dhead'] < entropy['dmodel'] - 0.1 < "
                "math.log(32)"
            ),
        ),
        "for 8 heads of 64, dividing by √d_model leaves attention flatter (over 0.1 "
        "nats more entropy) than √d_head, and no scaling over 1 nat more peaked",
        "test_dmodel_scaling_flattens_attention",
    ),
]

NOT_RANDOM: list[NotRandom] = []


@pytest.fixture(autouse=True)
def _one_thread():
    """Small experiments: a second intra-op thread costs more than it saves, and on a
    shared 2-core machine waiting for it multiplies the time."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _jacobian_norm(s: torch.Tensor) -> torch.Tensor:
    """s [N, S] scores -> [N], the Frobenius norm of d softmax(s) / d s per row."""
    p = s.softmax(dim=-1)
    jac = torch.diag_embed(p) - p[:, :, None] * p[:, None, :]
    return jac.flatten(1).norm(dim=-1)


def _entropy(weights: torch.Tensor) -> torch.Tensor:
    return -torch.xlogy(weights, weights).sum(dim=-1)


@pytest.mark.parametrize("seed", SEEDS)
def test_dot_product_variance_grows_like_d_k(seed):
    """var/d_k (and var of the scaled dots, the same numbers) 0.947–1.061 over seeds
    0–4 and d_k 4–1024 (4000 pairs, as in the lesson; 50 seeds stay within 9 %)."""
    torch.manual_seed(seed)
    for d_k in (4, 16, 64, 256, 1024):
        dots = (torch.randn(4000, d_k) * torch.randn(4000, d_k)).sum(dim=-1)
        var, var_s = dots.var().item(), (dots / math.sqrt(d_k)).var().item()
        assert abs(var / d_k - 1) < 0.15 and abs(var_s - 1) < 0.15


@pytest.mark.parametrize("seed", SEEDS)
def test_unscaled_softmax_saturates_with_the_head_size(seed):
    """Median Jacobian ratio, std 1 over std √512: 403–1484; over std 8: 2.6–3.7,
    over seeds 0–4 (1000 rows of 16; at 200 rows the first falls to 60 on some)."""
    torch.manual_seed(seed)
    base = torch.randn(1000, 16)
    jac_scaled, jac_64, jac_512 = (
        _jacobian_norm(base * s).median().item() for s in (1, 8, math.sqrt(512))
    )
    assert jac_scaled > 100 * jac_512
    assert 1.5 < jac_scaled / jac_64 < 10


@pytest.mark.parametrize("seed", SEEDS)
def test_default_init_does_not_saturate(seed):
    """Median Jacobian at std 8/3 over that at 1/3: 1.39–1.43 over seeds 0–4."""
    torch.manual_seed(seed)
    base = torch.randn(1000, 16)
    jac_third, jac_8thirds = (
        _jacobian_norm(base * s).median().item() for s in (1 / 3, 8 / 3)
    )
    assert jac_8thirds > jac_third


def _row_gradients(d_k, init_var, n_seq=64, seq_len=16):
    """One head at init, drawn once, run with and without the scaling: for each,
    |dL/dq| of every query row and the norms of the gradients on W_q and W_k."""
    w_std = math.sqrt(init_var / d_k)
    w_q, w_k, w_v = (torch.randn(d_k, d_k) * w_std for _ in range(3))
    x = torch.randn(n_seq, 1, seq_len, d_k)  # [B, H=1, S, Dh]
    upstream = torch.randn(n_seq, 1, seq_len, d_k)  # a random dL/d(out)
    x_rows = x.flatten(0, 2)
    q0, k0, v = x @ w_q, x @ w_k, x @ w_v
    results = {}
    for scaled in (True, False):
        q, k = q0.clone().requires_grad_(), k0.clone().requires_grad_()
        out, _ = scaled_dot_product_attention(q if scaled else q * math.sqrt(d_k), k, v)
        dq, dk = torch.autograd.grad((out * upstream).sum(), (q, k))
        dq, dk = dq.flatten(0, 2), dk.flatten(0, 2)
        # dL/dW_q = Σ_rows xᵀ dL/dq, and the same for W_k
        results[scaled] = (
            dq.norm(dim=-1),
            (x_rows.T @ dq).norm(),
            (x_rows.T @ dk).norm(),
        )
    return results


@pytest.mark.parametrize("seed", SEEDS)
def test_unscaled_gradients_both_vanish_and_grow(seed):
    """Unscaled/scaled over seeds 0–4 (64 sequences of 16, the lesson's size: at 16
    sequences W_q's ratio at d_k = 512 drops below 8 on some seeds): d_k = 512 median
    0.012–0.028, starved 0.36–0.40, p99 25–28, W_q and W_k 11.3–12.3; d_k = 64 median
    1.55–1.82, W_q and W_k 5.5–6.3 (default init 9.5–10.2); scaled rows starved 0."""
    torch.manual_seed(seed)
    ratios = {}
    for name, d_k, init_var in (
        ("64", 64, 1.0),
        ("512", 512, 1.0),
        ("64init", 64, 1 / 3),
    ):
        got = _row_gradients(d_k, init_var)
        (rows_s, wq_s, wk_s), (rows_u, wq_u, wk_u) = got[True], got[False]
        typical = rows_s.median()
        assert (rows_s < 1e-3 * typical).float().mean() < 0.01
        ratios[name] = {
            "median": (rows_u.median() / typical).item(),
            "p99": (rows_u.quantile(0.99) / rows_s.quantile(0.99)).item(),
            "starved": (rows_u < 1e-3 * typical).float().mean().item(),
            "wq": (wq_u / wq_s).item(),
            "wk": (wk_u / wk_s).item(),
        }
    at64, at512, at64init = ratios["64"], ratios["512"], ratios["64init"]
    assert at512["median"] < 0.1
    assert at512["starved"] > 0.25
    assert at512["p99"] > 10
    assert min(at512["wq"], at512["wk"]) > 8
    assert at64["median"] > 1
    assert min(at64["wq"], at64["wk"], at64init["wq"], at64init["wk"]) > 4


@pytest.mark.parametrize("seed", SEEDS)
def test_entropy_falls_with_the_factor(seed):
    """12 queries and keys of 64 (the lesson's size): entropy at factor 10^-1.5 minus
    at 32 is 2.38–2.48 nats, and at 32 it is 0.002–0.11, over seeds 0–4."""
    torch.manual_seed(seed)
    q, k = torch.randn(12, 64), torch.randn(12, 64)
    unit_scores = q @ k.T / 8
    first, last = (
        _entropy((unit_scores * f).softmax(-1)).mean().item() for f in (10**-1.5, 32)
    )
    assert first > last and last < 0.5


@pytest.mark.parametrize("seed", SEEDS)
def test_panel_entropies_are_ordered(seed):
    """12 queries and keys of 64 (the lesson's size), drawn keys first (the lesson's
    own loop draws queries first): margins over seeds 0–4 ÷√d_model − ÷√d_k
    0.30–0.44, ÷√d_k − ×8 1.57–1.79, ×8 − ×√512 0.19–0.28. Of 200 seeds of the
    lesson's draw, the last margin fell below 0.1 on 3 (lowest 0.087)."""
    torch.manual_seed(seed)
    k, q = torch.randn(12, 64), torch.randn(12, 64)
    e_model, e_scaled, e_x8, e_x22 = (
        _entropy((q @ k.T / 8 * f).softmax(-1)).mean().item()
        for f in (1 / math.sqrt(8), 1.0, 8.0, math.sqrt(512))
    )
    assert e_model > e_scaled + 0.2
    assert e_scaled > e_x8 + 1.0
    assert e_x8 > e_x22 + 0.1


@pytest.mark.parametrize("seed", SEEDS)
def test_dmodel_scaling_flattens_attention(seed):
    """8 heads of 64, 32 queries and keys (the lesson's size): ÷√d_head − none
    2.47–2.54 nats, ÷√d_model − ÷√d_head 0.377–0.392, over seeds 0–4."""
    torch.manual_seed(seed)
    q, k = torch.randn(1, 8, 32, 64), torch.randn(1, 8, 32, 64)
    raw = q @ k.transpose(-2, -1)
    entropy = {
        name: _entropy((raw / divisor).softmax(-1)).mean().item()
        for name, divisor in (("dhead", 8.0), ("dmodel", math.sqrt(512)), ("none", 1.0))
    }
    assert (
        entropy["none"] + 1 < entropy["dhead"] < entropy["dmodel"] - 0.1 < math.log(32)
    )
