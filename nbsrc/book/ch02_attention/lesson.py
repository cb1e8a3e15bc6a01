# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Chapter 2 — Scaled dot-product attention
#
# $$\operatorname{Attention}(Q, K, V) = \operatorname{softmax}\!\left(\frac{QK^\top}{\sqrt{d_k}}\right) V$$
#
# Chapter 1 computed it for one query by hand (§1.1), wrote it in code for one head and compared it
# with PyTorch's (§1.3), and stated the one fact about the scale that multi-head attention needs
# (§1.9). This chapter is about that division by $\sqrt{d_k}$. Both seed write-ups quote the formula
# and say something about the $\sqrt{d_k}$; this chapter measures what they claim:
#
# * Seed 004 left the scaling out at first, and
#   {seedtr}`004:halfway through training the gradients exploded`; it then explains this by
#   saturation, {seedtr}`004:softmax enters its saturated region and the gradient is close to 0`.
#   Both are right, two sides of one problem: without the scaling most query rows saturate and get
#   almost no gradient, while the few rows whose top scores nearly tie get much larger ones, and
#   the total gradient on the query and key weights **grows** (§2.3). How much depends on the
#   head size, and this chapter measures it.
# * Seed 000 says the scaling {seedtr}`000:in practice improves accuracy by about 2-3%`. The paper
#   {cite}`vaswani2017attention` (§3.2.1, footnote 4) gives the variance argument (§2.2) and no
#   accuracy figure.
# * Seed 004 divides by {seed}`004:energy = energy / (self.embed_size ** (1/2))` — that is
#   $\sqrt{d_\text{model}}$, not $\sqrt{d_k}$ (§2.5).
# * Seed 000 checks its gradients with
#   {seed}`000:test = gradcheck(MultiHeadAttention(), input, eps=1e-6, atol=1e-4)`, on an input of
#   shape `[32, 64, 512]` in double precision. That call cannot work, for two reasons; a third
#   waits for the first module you check that has dropout (§2.6).
#
# Shape letters: B batch, H heads, Sq and Sk query and key lengths, Dh = $d_k$ the size of one head,
# D = $d_\text{model}$ = H·Dh.

# %% [markdown]
# ```{figure} ../figures/model_ch02.svg
# :alt: Diagram of the encoder–decoder Transformer with its three attention sublayers (encoder self-attention, masked decoder self-attention and cross-attention) highlighted and labelled softmax(QKᵀ/√d_k)V, everything else grey.
# :name: fig-model-ch02
# :width: 100%
#
# The whole model; this chapter builds the highlighted part: the scaled dot-product attention $\operatorname{softmax}(QK^\top/\sqrt{d_k})V$ that every head of all three attention sublayers computes.
# ```

# %%
import math
import warnings

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from IPython.display import display

from myst_nb import glue

from tformer_ref.attention import MultiHeadAttention, scaled_dot_product_attention
from tformer_ref.device import get_device, seed_everything
from tformer_ref.plotting import COLUMN_INCHES, attention_png
from tformer_ref.widgets import PictureSlider

seed_everything(0)
device = get_device()
print("device:", device)

# %% [markdown]
# ## 2.1 Attention step by step
#
# The three steps of chapter 1 (§1.1 by hand, §1.3 for one head): scores $q \cdot k_j / \sqrt{d_k}$, a
# softmax over the keys, the weighted average of the values. Here they run for every batch entry, head
# and query at once, on the multi-head layout of chapter 1 (§1.4): `q` of shape `[B, H, Sq, Dh]` and
# `k`, `v` of shape `[B, H, Sk, Dh]`, where the number of keys `Sk` may differ from the number of
# queries `Sq` (as in cross-attention):

# %%
B, H, Sq, Sk, Dh = 2, 4, 5, 7, 16
q = torch.randn(B, H, Sq, Dh, device=device)
k = torch.randn(B, H, Sk, Dh, device=device)
v = torch.randn(B, H, Sk, Dh, device=device)

scores = q @ k.transpose(-2, -1) / math.sqrt(Dh)  # [B, H, Sq, Sk]: contract over Dh
weights = scores.softmax(dim=-1)  # over the keys: each query's row sums to 1
out = weights @ v  # [B, H, Sq, Dh]

print(
    "scores",
    tuple(scores.shape),
    "-> weights",
    tuple(weights.shape),
    "-> out",
    tuple(out.shape),
)
assert torch.allclose(weights.sum(dim=-1), torch.ones(B, H, Sq, device=device))

# %% [markdown]
# Softmax runs over the **last** axis, the keys. Over `dim=-2` it would make each *key's* column sum to
# 1, which means nothing: a query's weights would no longer be a distribution. PyTorch's fused
# `F.scaled_dot_product_attention` and the course's reference compute the same thing:

# %%
torch_out = F.scaled_dot_product_attention(q, k, v)
ref_out, ref_weights = scaled_dot_product_attention(q, k, v)
assert torch.allclose(out, torch_out, atol=1e-5) and torch.allclose(
    out, ref_out, atol=1e-6
)
wrong_axis = scores.softmax(dim=-2) @ v
print("largest difference from PyTorch:", (out - torch_out).abs().max().item())
print(
    "softmax over the wrong axis is off by", (wrong_axis - torch_out).abs().max().item()
)

# %% [markdown]
# Written by hand, the softmax is `e = scores.exp()` then `e / e.sum(dim=-1, keepdim=True)`: right on
# paper, and wrong in float32 as soon as a score is large. `exp(100)` is beyond the largest float32
# (`torch.finfo(torch.float32).max`), so it becomes `inf`, and `inf / inf` is NaN. Softmax does not
# change when one number is subtracted from a whole row, so subtract each row's maximum first: every
# exponent is then at most 0. `softmax` itself gives the finite answer:

# %%
big = torch.tensor([[100.0, 90.0, 0.0]], device=device)  # float32 scores of one query
e = big.exp()
naive = e / e.sum(dim=-1, keepdim=True)
shifted = (big - big.amax(dim=-1, keepdim=True)).exp()
stable = shifted / shifted.sum(dim=-1, keepdim=True)
print("exp:", e.tolist(), "-> by the formula:", naive.tolist())
print("max subtracted first:", stable.tolist())
assert torch.isinf(e[0, 0]) and torch.isnan(naive).any()
assert torch.allclose(stable, big.softmax(dim=-1)) and torch.isfinite(stable).all()

# %% [markdown]
# ## 2.2 Why the scores grow with d_k
#
# Take $q$ and $k$ with independent entries of mean 0 and variance 1. Then
# $q \cdot k = \sum_{i=1}^{d_k} q_i k_i$ is a sum of $d_k$ independent terms of variance 1, so
#
# $$\operatorname{var}(q \cdot k) = d_k, \qquad \operatorname{std}(q\cdot k) = \sqrt{d_k}.$$
#
# Dividing by $\sqrt{d_k}$ brings the standard deviation back to 1 whatever the head size. Measured:

# %% mystnb={"figure": {"caption": "The variance of q·k grows like d_k; dividing by √d_k brings it back to 1. Measured on random unit-variance vectors.", "name": "fig-ch02-variance"}, "image": {"alt": "Log-log plot: measured variance of q·k follows the dashed line d_k; the scaled variance stays flat at 1."}}
dims = [4, 16, 64, 256, 1024]
n_pairs = 4000
measured, measured_scaled = [], []
for d_k in dims:
    a, b = (
        torch.randn(n_pairs, d_k, device=device),
        torch.randn(n_pairs, d_k, device=device),
    )
    dots = (a * b).sum(dim=-1)
    measured.append(dots.var().item())
    measured_scaled.append((dots / math.sqrt(d_k)).var().item())
for d_k, var, var_s in zip(dims, measured, measured_scaled):
    print(
        f"d_k={d_k:5d}  var(q·k)={var:8.1f} (predicted {d_k})  "
        f"var(q·k/√d_k)={var_s:.2f}"
    )
    assert abs(var / d_k - 1) < 0.15 and abs(var_s - 1) < 0.15

fig, ax = plt.subplots(figsize=(5, 3.2))
ax.loglog(dims, dims, "k--", label="predicted: d_k")
ax.loglog(dims, measured, "o", label="measured var(q·k)")
ax.loglog(dims, measured_scaled, "s", label="measured var(q·k / √d_k)")
ax.set_xlabel("d_k")
ax.set_ylabel("variance")
ax.legend()
plt.tight_layout()
plt.show()

# %% [markdown]
# The seed's example is right on this point: at $d_k = 512$ the unscaled scores have standard deviation
# $\sqrt{512} \approx 22.6$. What that does to the gradients takes two measurements.

# %% [markdown]
# ## 2.3 Saturation and the gradients
#
# Softmax of scores with a standard deviation of 22 puts most of the weight on one key (on average
# {glue:text}`ch02_maxw_unscaled512:.0%` of it, in the table below). At that point
# softmax is *flat*: its Jacobian $\partial p_i / \partial s_j = p_i(\delta_{ij} - p_j)$ is nearly 0 when one
# $p$ is nearly 1 and the others nearly 0. Small changes to the scores change almost nothing, so
# little gradient flows back through that row: this is the seed's
# {seedtr}`004:the gradient is close to 0`. It is half of the story, and the second measurement
# below follows the gradient on to the queries, the keys and their weights.
#
# Below, rows of 16 scores with standard deviation `std` (1 is what scaling gives; 8 is an unscaled
# head of size 64, the head size of seed 000's 8-head model of width 512; √512 ≈ 22.6 is an
# unscaled head of size 512, seed 004's example). For each we measure the largest weight (mean over rows) and the size of
# the softmax Jacobian for a typical row (median over rows: the mean is dominated by the rare rows whose
# two largest scores happen to tie; we come back to them).


# %% mystnb={"figure": {"caption": "Larger scores saturate softmax: its Jacobian for a typical row (left) shrinks by orders of magnitude and the largest weight (right) approaches 1. Unscaled scores at d_k = 512 sit deep in that region. At d_k = 64 (std 8) the Jacobian is only a few times smaller than with scaling.", "name": "fig-ch02-saturation"}, "image": {"alt": "Left: median Jacobian norm of softmax falling steeply as the score standard deviation grows, with markers at 1, 8 and √512. Right: mean largest attention weight rising towards 1."}}
def softmax_jacobian_norm(s: torch.Tensor) -> torch.Tensor:
    """s [N, S] scores -> [N], the Frobenius norm of d softmax(s) / d s for every
    row."""
    p = s.softmax(dim=-1)
    jac = torch.diag_embed(p) - p[:, :, None] * p[:, None, :]  # [N, S, S]
    return jac.flatten(1).norm(dim=-1)


stds = [0.25, 0.5, 1, 2, 4, 8, 16, math.sqrt(512), 32]
base = torch.randn(2000, 16, device=device)
jac_norms = [softmax_jacobian_norm(base * s).median().item() for s in stds]
max_weights = [(base * s).softmax(-1).amax(-1).mean().item() for s in stds]
for s, j, m in zip(stds, jac_norms, max_weights):
    print(f"std={s:6.2f}  mean largest weight={m:.3f}  median |Jacobian|={j:.2e}")

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(COLUMN_INCHES, 3.8), layout="constrained")
ax1.loglog(stds, jac_norms, "o-")
ax1.axvline(1, color="g", ls=":", label="scaled (std 1)")
ax1.axvline(8, color="orange", ls=":", label="unscaled, d_k = 64")
ax1.axvline(math.sqrt(512), color="r", ls=":", label="unscaled, d_k = 512")
ax1.set_xlabel("std of the scores")
ax1.set_ylabel("median |d softmax / d scores|")
fig.legend(loc="outside lower center", ncols=3)
ax2.semilogx(stds, max_weights, "o-")
ax2.set_xlabel("std of the scores")
ax2.set_ylabel("mean largest weight")
plt.show()
jac_scaled, jac_64, jac_512 = (jac_norms[stds.index(s)] for s in (1, 8, math.sqrt(512)))
assert jac_scaled > 100 * jac_512  # a typical row saturates at d_k = 512
assert 1.5 < jac_scaled / jac_64 < 10  # at Dh = 64: smaller, by a few times only


# %% tags=["remove-cell"]
# The numbers the text quotes, for the book (this cell is hidden there).
for name, value in (
    ("jac_scaled", jac_scaled),
    ("jac_unscaled64", jac_64),
    ("jac_unscaled512", jac_512),
    ("jac_ratio64", jac_scaled / jac_64),
    ("jac_ratio512", jac_scaled / jac_512),
    ("maxw_scaled", max_weights[stds.index(1)]),
    ("maxw_unscaled64", max_weights[stds.index(8)]),
    ("maxw_unscaled512", max_weights[stds.index(math.sqrt(512))]),
):
    glue(f"ch02_{name}", float(value), display=False)

# %% [markdown]
# At seed 004's example, $d_k = 512$, the median Jacobian is
# {glue:text}`ch02_jac_unscaled512:.2e` against {glue:text}`ch02_jac_scaled:.2e` with the
# scaling, {glue:text}`ch02_jac_ratio512:.0f` times smaller, and the largest weight is
# {glue:text}`ch02_maxw_unscaled512:.2f` on average. But in seed 000's 8-head model of width 512
# a head has $D_h = 64$, so the unscaled scores have a standard deviation of 8: there the
# Jacobian is only {glue:text}`ch02_jac_ratio64:.1f` times smaller
# ({glue:text}`ch02_jac_unscaled64:.2e`) and the largest weight
# {glue:text}`ch02_maxw_unscaled64:.2f` (against {glue:text}`ch02_maxw_scaled:.2f` with the
# scaling).
#
# So does the gradient vanish, as the seed's explanation says, or explode, as its symptom says?
# The Jacobian is only one link of the chain, and two more follow:
#
# 1. Without the division a score is $s = q \cdot k$ instead of $q \cdot k / \sqrt{d_k}$, so
#    $\partial s / \partial q = k$ instead of $k / \sqrt{d_k}$, and the same for the keys.
#    Whatever gets through the softmax reaches the queries and keys $\sqrt{d_k}$ times larger:
#    $\sqrt{64} = 8$, $\sqrt{512} \approx 22.6$.
# 2. The gradient on the query weights is a **sum over all query rows**,
#    $\nabla W_q = \sum_i x_i^\top \, \partial L / \partial q_i$ (and the same for $W_k$). The
#    rows the median leaves out, those whose two largest scores nearly tie, still have a large
#    Jacobian, so they get the largest gradients, and they dominate the sum.
#
# The cell below follows the gradient to the weights, for one head at initialisation: inputs of
# variance 1, projections $W_q$, $W_k$, $W_v$ that give queries and keys of variance 1 (the setting
# above), 64 sequences of 16 tokens, and a random linear loss standing for whatever the model does
# after the attention. It compares the unscaled head with the scaled one on the same numbers, for
# $d_k = 64$ and $d_k = 512$, on five seeds, and asserts what the next paragraphs say on every one
# of them.


# %% mystnb={"figure": {"caption": "The gradient that reaches each query row, at initialisation (seed 0), with and without the scaling. Without it the rows spread over many orders of magnitude: at d_k = 512 about a third of them get almost nothing, while the top rows get more than any scaled row. Rows below 1e-12 are drawn at 1e-12.", "name": "fig-ch02-row-gradients"}, "image": {"alt": "Two histograms of the gradient norm of each query row on a log axis, for d_k = 64 and d_k = 512. The scaled rows form a narrow peak near 1. The unscaled rows spread from 1e-12 to above 10, most widely at d_k = 512."}}
def qk_gradients(d_k, scaled, seed, init_var=1.0, n_seq=64, seq_len=16):
    """One head of size d_k at initialisation, on random inputs, with a random linear
    loss. Returns the norm of dL/dq for every query row [n_seq * seq_len] and the norms
    of the gradients on W_q and W_k."""
    g = torch.Generator().manual_seed(seed)  # CPU: the same numbers on every machine
    x = torch.randn(n_seq, 1, seq_len, d_k, generator=g)  # [B, H=1, S, Dh]
    # Weights of variance init_var / d_k give q, k, v of variance init_var: 1 is
    # Xavier's (the unit-variance setting above), 1/3 PyTorch's default nn.Linear.
    w_std = math.sqrt(init_var / d_k)
    w_q, w_k, w_v = (
        (torch.randn(d_k, d_k, generator=g) * w_std).requires_grad_() for _ in range(3)
    )
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    q.retain_grad()
    # Leaving out the division by √d_k is the same as multiplying q by √d_k first.
    out, _ = scaled_dot_product_attention(q if scaled else q * math.sqrt(d_k), k, v)
    upstream = torch.randn(out.shape, generator=g)  # a random dL/d(out)
    (out * upstream).sum().backward()
    return q.grad.flatten(0, 2).norm(dim=-1), w_q.grad.norm(), w_k.grad.norm()


settings = {"64": (64, 1.0), "512": (512, 1.0), "64init": (64, 1 / 3)}
ratios = {name: {} for name in settings}  # unscaled / scaled, one value per seed
rows_seed0 = {}
for name, (d_k, init_var) in settings.items():
    for seed in range(5):
        rows_s, wq_s, wk_s = qk_gradients(d_k, True, seed, init_var)
        rows_u, wq_u, wk_u = qk_gradients(d_k, False, seed, init_var)
        if seed == 0:
            rows_seed0[name] = rows_s, rows_u
        typical = rows_s.median()  # a typical row's gradient with the scaling
        assert (rows_s < 1e-3 * typical).float().mean() < 0.01  # scaled: none starve
        for stat, value in {
            "median": rows_u.median() / typical,
            "mean": rows_u.mean() / rows_s.mean(),
            "p99": rows_u.quantile(0.99) / rows_s.quantile(0.99),
            # share of the rows that get less than a thousandth of a typical scaled row
            "starved": (rows_u < 1e-3 * typical).float().mean(),
            "wq": wq_u / wq_s,
            "wk": wk_u / wk_s,
        }.items():
            ratios[name].setdefault(stat, []).append(value.item())

print("unscaled / scaled on seeds 0-4 (starved: share of the unscaled rows)")
for name, (d_k, init_var) in settings.items():
    print(f"d_k={d_k}, var(q)={init_var:.2f}")
    for stat, values in ratios[name].items():
        per_seed = " ".join(f"{value:7.3f}" for value in values)
        print(f"  {stat:8s}{per_seed}   range {min(values):.3f}-{max(values):.3f}")

# What the text says, on every seed.
at64, at512, at64init = ratios["64"], ratios["512"], ratios["64init"]
assert max(at512["median"]) < 0.1  # at d_k = 512 a typical row gets far less,
assert min(at512["starved"]) > 0.25  # over a quarter of the rows almost nothing,
assert min(at512["p99"]) > 10  # the top rows far more,
assert min(at512["wq"] + at512["wk"]) > 8  # and W_q, W_k much more
assert min(at64["median"]) > 1  # at Dh = 64 even a typical row gets more
assert min(at64["wq"] + at64["wk"] + at64init["wq"] + at64init["wk"]) > 4
assert max(at64init["starved"]) == 0  # default init: no row starves

# PyTorch's default init: scores of std 1/3 with the scaling, 8/3 without.
jac_third, jac_8thirds = (
    softmax_jacobian_norm(base * s).median().item() for s in (1 / 3, 8 / 3)
)
assert jac_8thirds > jac_third  # the unscaled softmax passes more, not less

fig, axes = plt.subplots(1, 2, figsize=(COLUMN_INCHES, 3.4), layout="constrained")
bins = torch.logspace(-12, 2, 57).tolist()
for ax, name in zip(axes, ("64", "512")):
    for rows, label in zip(rows_seed0[name], ("scaled", "unscaled")):
        ax.hist(rows.clamp(min=bins[0]).tolist(), bins=bins, alpha=0.6, label=label)
    ax.set_xscale("log")
    ax.set_title(f"d_k = {name}")
    ax.set_xlabel("|dL/dq| of one query row")
axes[0].set_ylabel("rows")
fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncols=2)
plt.show()


# %% tags=["remove-cell"]
# The numbers the text quotes, for the book (this cell is hidden there).
for name, stats in ratios.items():
    for stat, values in stats.items():
        glue(f"ch02_grad{name}_{stat}_lo", min(values), display=False)
        glue(f"ch02_grad{name}_{stat}_hi", max(values), display=False)
glue("ch02_jac_std_third", jac_third, display=False)
glue("ch02_jac_std_8thirds", jac_8thirds, display=False)

# %% [markdown]
# Both halves of the seed's account are there. At $d_k = 512$ a typical query row gets
# {glue:text}`ch02_grad512_median_lo:.2f` to {glue:text}`ch02_grad512_median_hi:.2f` of the
# gradient it gets with the scaling (the range over the five seeds), and
# {glue:text}`ch02_grad512_starved_lo:.0%` to {glue:text}`ch02_grad512_starved_hi:.0%` of the
# rows get less than a thousandth of it: for them the gradient is indeed close to 0, and they learn
# nothing. But the 99th percentile of the row gradients is {glue:text}`ch02_grad512_p99_lo:.0f` to
# {glue:text}`ch02_grad512_p99_hi:.0f` times larger than with the scaling, and these few rows
# dominate the sum: the gradient on $W_q$ is {glue:text}`ch02_grad512_wq_lo:.1f` to
# {glue:text}`ch02_grad512_wq_hi:.1f` times larger (on $W_k$,
# {glue:text}`ch02_grad512_wk_lo:.1f` to {glue:text}`ch02_grad512_wk_hi:.1f` times). At
# $D_h = 64$ the softmax saturates less and the factor $\sqrt{64} = 8$ wins even for a typical row,
# which gets {glue:text}`ch02_grad64_median_lo:.1f` to {glue:text}`ch02_grad64_median_hi:.1f`
# times more; the gradient on $W_q$ is {glue:text}`ch02_grad64_wq_lo:.1f` to
# {glue:text}`ch02_grad64_wq_hi:.1f` times larger, and still
# {glue:text}`ch02_grad64_starved_lo:.0%` to {glue:text}`ch02_grad64_starved_hi:.0%` of the rows
# get almost nothing.
#
# So the seed's {seedtr}`004:the gradients exploded` and its
# {seedtr}`004:the gradient is close to 0` are not a symptom and an explanation that contradict
# each other: they are two sides of one problem. Without the scaling most rows saturate and learn
# nothing, while a few near-ties get far larger gradients, and the total gradient on $W_q$ and
# $W_k$ grows. Large attention logits and nearly one-hot attention are a documented cause of
# training divergence. When vision Transformers were scaled up to 22 billion parameters, the
# large ones diverged because their attention logits grew very large, which made the attention
# nearly one-hot {cite:p}`dehghani2023scaling`; small models show the same instability at high
# learning rates {cite:p}`wortsman2023small`; and a collapse of the attention entropy (nearly
# one-hot attention) goes with oscillating or diverging losses {cite:p}`zhai2023stabilizing`. The
# fixes bound the logits: a LayerNorm on the queries and keys (QK-LayerNorm) in the first two,
# a reparametrisation of the weights by their spectral norm (σReparam) in the third. The division by
# $\sqrt{d_k}$ is the simplest step of the same kind: it keeps the logits at standard deviation 1
# at initialisation. Other causes of exploding gradients exist too (a too large learning rate
# without warm-up, Post-LN in deep stacks, chapters 4 and 6).
#
# This lesson trains nothing: it shows the gradients at initialisation, not what they do to a
# training curve, which also depends on the learning rate and on how far the logits grow during
# training. And it takes queries and keys of unit variance, what Xavier-initialised projections of
# unit-variance inputs give. PyTorch's default `nn.Linear` initialisation gives them a variance of
# about 1/3, so an unscaled head of size 64 starts with scores of standard deviation 8/3, and a
# scaled one with 1/3. That is no saturation at all: the median Jacobian is
# {glue:text}`ch02_jac_std_8thirds:.2e` at 8/3, *larger* than {glue:text}`ch02_jac_std_third:.2e`
# at 1/3, no row starves (the last block of the table), and the gradient on $W_q$ is
# {glue:text}`ch02_grad64init_wq_lo:.1f` to {glue:text}`ch02_grad64init_wq_hi:.1f` times larger
# than with the scaling. Saturation comes later, if training lets the logits grow. And seed 000's
# figure of {seedtr}`000:about 2-3%` more accuracy has no source: it is not in the paper.

# %% [markdown]
# ## 2.4 Entropy: how peaked is attention
#
# The entropy of a query's weights, $-\sum_j w_j \ln w_j$, measures how spread they are: $\ln S_k$ for a
# uniform row, 0 for a one-hot row (with $0 \ln 0 = 0$: `torch.xlogy(w, w)` handles it, while
# `w * w.log()` gives `0 · (−inf) = NaN`). Multiply the scaled scores by a factor and watch it.


# %%
def attention_entropy(weights: torch.Tensor) -> torch.Tensor:
    """weights [..., Sq, Sk] -> entropy of every row [..., Sq], in nats."""
    return -torch.xlogy(weights, weights).sum(dim=-1)


S = 12
q1 = torch.randn(1, 1, S, 64, device=device)
k1 = torch.randn(1, 1, S, 64, device=device)
unit_scores = q1 @ k1.transpose(-2, -1) / math.sqrt(64)  # std about 1


def entropy_png(factor: float) -> bytes:
    w = (unit_scores * factor).softmax(-1)[0, 0]
    ent = attention_entropy(w).mean().item()
    title = (
        f"scores × {factor:.2f}\nmean entropy {ent:.2f} (uniform: {math.log(S):.2f})"
    )
    return attention_png(w, title=title, vmax=1.0)


# Powers of 2, and the two factors §2.5 meets: 1/√8 and √512.
slider_factors = sorted(
    {2.0**p for p in range(-3, 5)} | {1 / math.sqrt(8), math.sqrt(512)}
)
display(
    PictureSlider(
        [f"{f:.2f}" for f in slider_factors],
        [entropy_png(f) for f in slider_factors],
        description="factor",
        index=slider_factors.index(1.0),
    )
)

# %% [markdown]
# Every setting of the slider was drawn when the lesson ran, and your browser switches between the pictures,
# so the slider works in the static book too. Below are the curve and four of its settings.
# $1/\sqrt{8}$ is what dividing by $\sqrt{d_\text{model}}$ does with 8 heads (§2.5). Forgetting
# the scaling multiplies the scores by $\sqrt{d_k}$: by 8 for seed 000's heads of size 64, and by
# $\sqrt{512} \approx 22.6$ for one head of size 512, the extreme case. Over seeds 0–4 (12 random
# queries and keys each) the mean entropy is {glue:text}`ch02_ent_scaled_lo:.2f` to
# {glue:text}`ch02_ent_scaled_hi:.2f` nats with the scaling, {glue:text}`ch02_ent_x8_lo:.2f` to
# {glue:text}`ch02_ent_x8_hi:.2f` without it at $d_k = 64$, and
# {glue:text}`ch02_ent_x22_lo:.2f` to {glue:text}`ch02_ent_x22_hi:.2f` at $d_k = 512$: both
# unscaled heads are already peaked, the larger one more.

# %% mystnb={"figure": {"caption": "Attention entropy against the factor on the scores, and the weights with √d_model scaling, the right √d_k scaling, and no scaling at d_k = 64 and at d_k = 512.", "name": "fig-ch02-entropy"}, "image": {"alt": "Top: mean entropy falling from ln S towards 0 as the factor grows. Below: four heat maps of attention weights, from nearly uniform to nearly one-hot."}}
factors = torch.logspace(-1.5, math.log10(32), 40).tolist()
entropies = [
    attention_entropy((unit_scores * f).softmax(-1)).mean().item() for f in factors
]
fig, axes = plt.subplot_mosaic(
    [["curve"] * 4, ["a", "b", "c", "d"]],
    figsize=(COLUMN_INCHES, 5.6),
    height_ratios=[1.4, 1],
)
axes["curve"].semilogx(factors, entropies)
axes["curve"].axhline(math.log(S), color="k", ls="--", label="uniform, ln S")
axes["curve"].set_xlabel("factor on the scaled scores")
axes["curve"].set_ylabel("mean entropy (nats)")
axes["curve"].legend()
panels = {
    "÷√d_model\n(H=8)": 1 / math.sqrt(8),
    "÷√d_k": 1.0,
    "none,\nd_k = 64": 8.0,
    "none,\nd_k = 512": math.sqrt(512),
}
for ax, (name, f) in zip((axes[key] for key in "abcd"), panels.items()):
    w = (unit_scores * f).softmax(-1)[0, 0].cpu()
    ax.imshow(w, vmin=0, vmax=1, cmap="viridis")
    ax.set_title(f"{name}\nentropy {attention_entropy(w).mean().item():.2f}")
    ax.set_xticks([])
    ax.set_yticks([])
plt.tight_layout()
plt.show()
assert entropies[0] > entropies[-1] and entropies[-1] < 0.5

# The ordering of the four panels, on five seeds (CPU generator: the same everywhere).
panel_entropy = {name: [] for name in panels}
for seed in range(5):
    g = torch.Generator().manual_seed(seed)
    qe, ke = (torch.randn(S, 64, generator=g) for _ in range(2))
    for name, f in panels.items():
        we = (qe @ ke.T / 8 * f).softmax(-1)
        panel_entropy[name].append(attention_entropy(we).mean().item())
e_model, e_scaled, e_x8, e_x22 = panel_entropy.values()
for seed in range(5):
    assert e_model[seed] > e_scaled[seed] + 0.2
    assert e_scaled[seed] > e_x8[seed] + 1.0
    assert e_x8[seed] > e_x22[seed] + 0.1
print(
    "mean entropy on seeds 0-4:",
    {
        name.replace("\n", " "): [round(e, 2) for e in v]
        for name, v in panel_entropy.items()
    },
)


# %% tags=["remove-cell"]
# The numbers the text quotes, for the book (this cell is hidden there).
for key, values in zip(("scaled", "x8", "x22"), (e_scaled, e_x8, e_x22)):
    glue(f"ch02_ent_{key}_lo", min(values), display=False)
    glue(f"ch02_ent_{key}_hi", max(values), display=False)

# %% [markdown]
# ## 2.5 Scaling by √d_model is a bug
#
# In multi-head attention each head dots vectors of size $D_h = d_\text{model} / H$, so $d_k = D_h$. Seed
# 004 divides by `self.embed_size ** (1/2)`, that is $\sqrt{d_\text{model}} = \sqrt{H}\sqrt{D_h}$: the
# logits come out $\sqrt{H}$ times too small, as if the softmax ran at a temperature of $\sqrt{H}$, and
# attention starts flatter, closer to a plain average. The cell below measures it for $H = 8$: the mean
# entropy rises from {glue:text}`ch02_entropy_dhead:.2f` nats with the right scaling to
# {glue:text}`ch02_entropy_dmodel:.2f` with $\sqrt{d_\text{model}}$, where a plain average (uniform
# weights) has {glue:text}`ch02_entropy_uniform:.2f`. (The entropy does not grow by a factor of
# $\sqrt{H}$; it is the logits that shrink by it.) The code runs and trains (the model can learn larger
# weights to compensate), which is why the bug survives; but it is not the paper's parametrisation:
# it starts flatter, and its query and key weights must grow to make up the factor $\sqrt{H}$ before
# it computes what the paper's would. The checks of chapter 1 name it.

# %%
d_model, n_heads = 512, 8
d_head = d_model // n_heads
qh = torch.randn(1, n_heads, 32, d_head, device=device)
kh = torch.randn(1, n_heads, 32, d_head, device=device)
raw = qh @ kh.transpose(-2, -1)
entropy = {}
for name, divisor in [
    ("dhead", math.sqrt(d_head)),
    ("dmodel", math.sqrt(d_model)),
    ("none", 1.0),
]:
    s = raw / divisor
    entropy[name] = attention_entropy(s.softmax(-1)).mean().item()
    label = {"dhead": "÷√d_head", "dmodel": "÷√d_model", "none": "none"}[name]
    print(
        f"{label:10s} std of logits {s.std().item():5.2f}   "
        f"mean entropy {entropy[name]:.2f} "
        f"(uniform {math.log(32):.2f})"
    )
ratio = (raw / math.sqrt(d_head)).std() / (raw / math.sqrt(d_model)).std()
assert abs(ratio.item() - math.sqrt(n_heads)) < 1e-3  # exactly √H times smaller
assert entropy["none"] + 1 < entropy["dhead"] < entropy["dmodel"] - 0.1 < math.log(32)


# %% tags=["remove-cell"]
# The numbers the text quotes, for the book (this cell is hidden there).
for name, value in entropy.items():
    glue(f"ch02_entropy_{name}", float(value), display=False)
glue("ch02_entropy_uniform", math.log(32), display=False)

# %% [markdown]
# ## 2.6 Gradcheck done right
#
# `torch.autograd.gradcheck` compares the gradients autograd computes with finite differences
# $(f(x+\varepsilon) - f(x-\varepsilon)) / 2\varepsilon$, one input entry at a time. Seed 000 calls it on
# its `MultiHeadAttention` (chapter 1 runs that module, verbatim, in §1.9):
#
# ```{seed-quote} 000
# :code: python
# input = torch.randn(32,64,512, requires_grad=True, dtype=torch.double)
# test = gradcheck(MultiHeadAttention(), input, eps=1e-6, atol=1e-4)
# ```
#
# Two things are wrong with that call, and a third waits for the next module you check: the seed's
# module has no dropout and its input is already in double precision, but most modules have dropout,
# and inputs are float32 by default.
#
# **1. The dtypes do not match.** The module's weights are float32; the input is float64. The first
# matmul refuses:

# %%
mha32 = MultiHeadAttention(16, 4)
x64 = torch.randn(2, 3, 16, dtype=torch.double, requires_grad=True)
try:
    torch.autograd.gradcheck(mha32, (x64,))
    raise AssertionError("expected a dtype error")
except RuntimeError as exc:
    print("RuntimeError:", str(exc).splitlines()[0])

# %% [markdown]
# **2. The size.** Finite differences need two forward passes *per input entry*:
# $32 \cdot 64 \cdot 512 \approx 1.05$ million entries, so two million forward passes of the whole module, and Jacobians
# (numerical and analytical) of 10¹² entries each. `gradcheck` keeps the numerical one in memory,
# one column per input entry: 8 TiB in double precision. It cannot finish. (We do not run it.) A
# gradient check needs tiny shapes.
#
# **3. Dropout and precision (not in the seed's call).** With dropout active every call draws a new mask, so $f(x+\varepsilon)$ and
# $f(x-\varepsilon)$ are different functions and the check fails for the wrong reason; the module must be
# in `eval()` mode. And in float32 a step of $\varepsilon = 10^{-6}$ is only a few rounding steps of
# the outputs, so the finite differences are mostly rounding noise and even a correct module fails:

# %%
seed_everything(0)
x_small = torch.randn(2, 3, 8, dtype=torch.double, requires_grad=True)
with_dropout = MultiHeadAttention(8, 2, dropout=0.5).double().train()
print(
    "double, tiny, dropout on:",
    torch.autograd.gradcheck(with_dropout, (x_small,), raise_exception=False),
)
in_float32 = MultiHeadAttention(8, 2).eval()
x32 = x_small.detach().float().requires_grad_()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    print(
        "float32, tiny, eval:     ",
        torch.autograd.gradcheck(in_float32, (x32,), raise_exception=False),
    )
print("gradcheck warned:", str(caught[0].message).split(".")[0])

# %% [markdown]
# The right call: tiny shapes, everything in double precision, dropout off.

# %%
module = MultiHeadAttention(8, 2, dropout=0.5).double().eval()
ok = torch.autograd.gradcheck(module, (x_small,), eps=1e-6, atol=1e-4)
print("double, tiny, eval:      ", ok)
assert ok
assert not torch.autograd.gradcheck(with_dropout, (x_small,), raise_exception=False)

# %% [markdown]
# ## 2.7 Recap
#
# * Attention is `softmax(q kᵀ / √d_k) v`, softmax over the **keys** (the last axis); `F.scaled_dot_product_attention`
#   computes the same thing.
# * A softmax written by hand subtracts each row's maximum before `exp`: in float32, `exp` of a large
#   score is `inf`, and the row becomes NaN.
# * $\operatorname{var}(q\cdot k) = d_k$ for unit-variance entries (measured above); dividing by $\sqrt{d_k}$
#   keeps the logits at standard deviation 1.
# * Without it softmax saturates, and the gradients both vanish and grow: most query rows get
#   almost no gradient, while the few rows whose top scores nearly tie get far larger ones, and
#   the total gradient on $W_q$ and $W_k$ grows (the chain rule multiplies whatever gets through
#   the softmax by $\sqrt{d_k}$).
#   Large attention logits are a documented cause of training divergence, and the fixes bound
#   them. Saturation grows fast with the head size: modest at $D_h = 64$, severe at
#   $d_k = 512$. The paper gives no accuracy figure for the scaling.
# * $d_k$ is the head size. Dividing by $\sqrt{d_\text{model}}$ makes the logits $\sqrt{H}$ times too
#   small (a softmax temperature of $\sqrt{H}$), and attention flatter: a higher entropy.
# * `gradcheck` wants tiny shapes, double precision throughout (weights and input), and `eval()` mode
#   when the module has dropout.
#
# Next: the exercise ([exercise.ipynb](exercise.ipynb)), then masks in chapter 3.

# %% [markdown]
# ## Check your understanding
#
# **1.** A colleague computes the weights with `scores.softmax(dim=-2)` on scores of shape `[B,
# H, Sq, Sk]`. The output still has the shape `[B, H, Sq, Dh]`. What is wrong, and which one-line
# assertion catches it?
#
# :::{dropdown} Answer
# `dim=-2` normalises over the *queries*: each key's column sums to 1, so a query's weights are
# no longer a distribution over the keys and its output is not a weighted average of the values.
# Softmax runs over the last axis, the keys. `assert torch.allclose(weights.sum(-1),
# torch.ones(B, H, Sq))` catches it: every query's row must sum to 1. Against
# `F.scaled_dot_product_attention` the right axis agrees to rounding and the wrong one is clearly
# off. Read §2.1 'Attention step by step'.
# :::
#
# **2.** The entries of `q` and `k` are independent, with mean 0 and variance 1, and a head has
# Dh = 64. What is the standard deviation of one score `q · k`, and why divide by √Dh?
#
# :::{dropdown} Answer
# `q · k` is a sum of 64 independent products of variance 1, so its variance is 64 and its
# standard deviation 8 (√d_k in general). Dividing by √d_k brings the standard deviation back to
# 1 *whatever the head size*, so softmax works in the same regime for every model width: the
# lesson's measured variances follow the line d_k, and the scaled ones stay at 1. This is the
# argument of {cite:t}`vaswani2017attention` (their footnote 4). Read §2.2 'Why the scores grow
# with d_k'.
# :::
#
# **3.** Seed 004 says that without the scaling {seedtr}`004:the gradients exploded`. What does the
# missing scaling really do to the gradients, and why?
#
# :::{dropdown} Answer
# Both: most rows get almost nothing, and the weights get more. Unscaled scores of a head of
# size 512 have a standard deviation of about √512 ≈ 22.6, so softmax puts most of each row's
# weight on one key. There its Jacobian, p_i(δ_ij − p_j), is nearly zero, and that row gets
# almost no gradient: in the lesson {glue:text}`ch02_grad512_starved_lo:.0%` to
# {glue:text}`ch02_grad512_starved_hi:.0%` of the rows got less than a thousandth of a typical
# scaled row's. That is the seed's {seedtr}`004:the gradient is close to 0`. But the rows whose
# two largest scores nearly tie keep a large Jacobian, and without the division the chain rule
# multiplies every gradient that reaches q and k by √d_k. The gradient on W_q and W_k is a sum
# over the rows, dominated by those near-ties: it came out {glue:text}`ch02_grad512_wq_lo:.1f` to
# {glue:text}`ch02_grad512_wq_hi:.1f` times larger at d_k = 512, and
# {glue:text}`ch02_grad64_wq_lo:.1f` to {glue:text}`ch02_grad64_wq_hi:.1f` times at Dh = 64.
# The median Jacobian alone ({glue:text}`ch02_jac_ratio512:.0f` times smaller at d_k = 512) shows
# only the first half. Large logits and nearly one-hot attention are a documented cause of
# training divergence, which fits the seed's {seedtr}`004:the gradients exploded`. The paper
# gives no accuracy figure for the scaling. Read §2.3 'Saturation and the gradients'.
# :::
#
# **4.** An 8-head model with D = 512 divides its scores by `self.embed_size ** 0.5`. What is d_k
# here, what does this divisor do to the attention, and why does the bug survive?
#
# :::{dropdown} Answer
# d_k is the size of one head, Dh = 512 / 8 = 64, not D. Dividing by √512 = √8 · √64 makes every
# logit √H = √8 times too small, so attention starts too flat, closer to a plain average of the
# values: its entropy is nearer the uniform ln S than with √Dh (the lesson printed the entropies
# for √Dh, √D and no scaling). It runs and trains, because the model can learn larger weights to
# make up for it, which is why nobody notices; but it is not the paper's parametrisation: it starts
# flatter, and its query and key weights must grow to make up the factor √H. Read §2.5
# 'Scaling by √d_model is a bug', and §2.4 'Entropy: how peaked is attention' for the entropy.
# :::
#
# **5.** Seed 000 runs `gradcheck` on its `MultiHeadAttention()` (width 512, float32 weights) with
# an input of shape `[32, 64, 512]` in double precision. Why can that not work? Write a call that
# does.
#
# :::{dropdown} Answer
# Two reasons, and a third for other modules. (1) The module's weights are float32 and the input
# float64: the first matmul raises a dtype error. (2) Finite differences need two forward passes
# per input entry, and this input has about a million entries: two million forward passes, and a
# Jacobian of 10¹² entries (8 TiB in double precision) to hold. It cannot finish. (3) Not in this
# call, since the seed's module has no dropout and its input is already double, but next time:
# with dropout active every call draws a new mask, so f(x + ε) and f(x − ε) are different
# functions; and in float32 a step of 1e-6 is mostly rounding noise, so even a correct module
# fails. Use tiny shapes, double
# precision throughout and eval mode: `gradcheck(MultiHeadAttention(8, 2).double().eval(),
# (torch.randn(2, 3, 8, dtype=torch.double, requires_grad=True),))`. Read §2.6 'Gradcheck done
# right'.
# :::
