# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Chapter 4 — Blocks
#
# Attention (chapters 1–3) is one sublayer. A Transformer *block* wraps it, and a feed-forward network,
# in three more pieces: a residual connection, a LayerNorm and dropout. This chapter builds the block
# and checks what the seed write-ups say about it:
#
# * seed 004's `TransformerBlock` computes
#   {seed}`004:x = self.dropout(self.norm1(attention + query))`: the residual and the norm are in
#   the paper's places, **dropout is not** (§4.4);
# * seed 004 prefers LayerNorm to BatchNorm because
#   {seedtr}`004:BatchNorm depends on batch statistics, while the sequence length may vary, which makes the normalisation unstable`:
#   true, but the stronger reasons are padding, batches of one and the train/eval switch (§4.3);
# * the residual connection, in seed 004's words,
#   {seedtr}`004:adds the original input to the output, helping the gradients flow and avoiding vanishing gradients in deep networks`:
#   true, and we show what goes wrong without it (§4.1);
# * seed 000's Xavier loop,
#   {seed}`000:for p in model.parameters(): if p.dim() > 1: nn.init.xavier_uniform_(p)`: fine for
#   the Linear layers, but it also re-initialises the embedding tables (§4.6).
#
# We also compare the paper's Post-LN block with the Pre-LN block, which moves the LayerNorm to
# the input of each sublayer: GPT-2 did so ({cite:t}`radford2019language`, §2.3), most large
# models since do the same, and {cite:t}`xiong2020layer` analyse why it can train without
# warm-up (§4.5). Finally we see what weight tying really shares (§4.7).
#
# Shape letters: B batch, S sequence length, D = d_model, H heads, F = d_ff.

# %% [markdown]
# ```{figure} ../figures/model_ch04.svg
# :alt: Diagram of the encoder–decoder Transformer with every add & norm box, the residual connections that feed them, and every feed-forward sublayer highlighted, the attention sublayers grey.
# :name: fig-model-ch04
# :width: 100%
#
# The whole model; this chapter builds the highlighted part: the residual connections, LayerNorm and dropout (add & norm) and the feed-forward sublayer that turn attention into encoder and decoder blocks.
# ```

# %%
import math

import matplotlib.pyplot as plt
import tformer_ref.plotting  # noqa: F401  importing it applies the book style
import torch
import torch.nn as nn
import torch.nn.functional as F
from myst_nb import glue

from tformer_ref.attention import MultiHeadAttention
from tformer_ref.blocks import EncoderBlock, FeedForward
from tformer_ref.device import get_device, seed_everything
from tformer_ref.model import Transformer, count_parameters, xavier_init_
from tformer_ref.torch_compat import encoder_block_to_torch

seed_everything(0)
device = get_device()
print("device:", device)

# %% [markdown]
# ## 4.1 Residual connections
#
# A residual connection adds a sublayer's input back to its output: `x + Sublayer(x)`. The sublayer then
# only has to learn a *correction* to its input, and the input (and its gradient) always has a direct
# path through the block.
#
# What happens without it? Stack six attention sublayers, each followed by a LayerNorm, once with and
# once without the residual, and measure how alike the 50 tokens' vectors become (mean cosine
# similarity between different tokens; 0 = unrelated, 1 = identical). Each attention output is an
# average of value vectors, and averages of averages converge: without the residual the tokens become
# indistinguishable within a few layers (what {cite:t}`dong2021attention` call the rank collapse of
# pure attention). The weights and the input are random, so we run the experiment with five seeds
# and claim only what holds for all five.

# %%
D, LAYERS, SEEDS = 64, 6, range(5)


def token_similarity(h):
    """Mean cosine similarity between different tokens of h [1, S, D]."""
    sim = F.cosine_similarity(h[0, :, None], h[0, None], dim=-1)
    return sim[~torch.eye(h.size(1), dtype=torch.bool, device=h.device)].mean().item()


def similarity_per_layer(seed):
    """Token similarity and query-weight gradient norm after each layer of one random
    stack: two dicts {residual: [LAYERS]}."""
    torch.manual_seed(seed)
    attns = nn.ModuleList(MultiHeadAttention(D, 4) for _ in range(LAYERS)).to(device)
    norms = nn.ModuleList(nn.LayerNorm(D) for _ in range(LAYERS)).to(device)
    xavier_init_(attns)
    x = torch.randn(1, 50, D, device=device)
    target = torch.randn(1, 50, D, device=device)  # any loss will do for the gradients
    rows, grads = {}, {}
    for residual in (False, True):
        h, rows[residual] = x, []
        for attn, norm in zip(attns, norms):
            h = norm(h + attn(h)) if residual else norm(attn(h))
            rows[residual].append(token_similarity(h))
        attns.zero_grad()
        F.mse_loss(h, target).backward()
        grads[residual] = [a.q_proj.weight.grad.norm().item() for a in attns]
    return rows, grads


runs, grad_runs = zip(*(similarity_per_layer(seed) for seed in SEEDS))
for seed, rows in zip(SEEDS, runs):
    for residual in (False, True):
        print(
            f"seed {seed}, residual={residual!s:5}: similarity after each layer",
            [round(s, 3) for s in rows[residual]],
        )

plain_last = [rows[False][-1] for rows in runs]
res_first = [rows[True][0] for rows in runs]
res_last = [rows[True][-1] for rows in runs]
# For every seed, not one lucky draw: without residuals the tokens become one vector;
assert min(plain_last) > 0.99
assert max(res_last) < 0.8  # with them they are still told apart...
assert all(
    last > 2 * first for first, last in zip(res_first, res_last)
)  # ...but closer


# %% tags=["remove-cell"]
# The numbers the text quotes, for the book (this cell is hidden there).
glue("ch04_sim_plain_last", min(plain_last), display=False)
glue("ch04_sim_res_first_lo", min(res_first), display=False)
glue("ch04_sim_res_first_hi", max(res_first), display=False)
glue("ch04_sim_res_last_lo", min(res_last), display=False)
glue("ch04_sim_res_last_hi", max(res_last), display=False)

# %% [markdown]
# With every seed, the six layers without residuals have turned 50 different tokens into one
# vector (after the sixth layer the lowest similarity of the five is
# {glue:text}`ch04_sim_plain_last:.3f`): nothing the following layers compute can tell the
# positions apart any more. With residuals the
# similarity still climbs, from between {glue:text}`ch04_sim_res_first_lo:.3f` and
# {glue:text}`ch04_sim_res_first_hi:.3f` after the first layer to between
# {glue:text}`ch04_sim_res_last_lo:.2f` and {glue:text}`ch04_sim_res_last_hi:.2f` after the sixth
# (the range over the five seeds): residuals *slow* the collapse, they do not stop it. In a full
# block the feed-forward sublayer slows it further {cite:p}`dong2021attention`.
#
# The same identity path carries the gradient backwards, seed 004's point about vanishing
# gradients. The cell above also backpropagated a made-up loss (the distance to a random
# target) through both stacks and kept the gradient norm of each layer's query weights
# $W_q$, first layer to sixth:

# %%
for seed, grads in zip(SEEDS, grad_runs):
    for residual in (False, True):
        print(
            f"seed {seed}, residual={residual!s:5}: |grad W_q| in each layer",
            [f"{g:.0e}" for g in grads[residual]],
        )
plain_ratio = [grads[False][-1] / grads[False][0] for grads in grad_runs]
res_ratio = [grads[True][-1] / grads[True][0] for grads in grad_runs]
# Sixth layer against first, on every seed: without residuals the gradient is gone...
assert max(plain_ratio) < 1e-4
assert min(res_ratio) > 0.3  # ...with them it is of the same order


# %% tags=["remove-cell"]
# The numbers the text quotes, for the book (this cell is hidden there).
glue("ch04_grad_plain_ratio", max(plain_ratio), display=False)
glue("ch04_grad_res_ratio_lo", min(res_ratio), display=False)
glue("ch04_grad_res_ratio_hi", max(res_ratio), display=False)

# %% [markdown]
# Without residuals, the sixth layer's $W_q$ receives at most
# {glue:text}`ch04_grad_plain_ratio:.0e` times the first layer's gradient, on every seed:
# nothing. Its input tokens are all one vector, so whatever the queries are, every token
# attends to copies of the same vector, and the loss cannot tell one $W_q$ from another.
# Every layer whose input has collapsed gets next to nothing (the rows above): it cannot
# learn where to attend. With residuals the sixth layer gets between
# {glue:text}`ch04_grad_res_ratio_lo:.2f` and {glue:text}`ch04_grad_res_ratio_hi:.2f` times
# the first layer's gradient: every layer keeps learning.
#
# ## 4.2 The feed-forward sublayer
#
# The second sublayer is a two-layer MLP applied to every position on its own
# (Vaswani et al. §3.3): $\mathrm{FFN}(x) = \max(0,\ xW_1 + b_1)W_2 + b_2$, with an inner width
# $F = 4D$ (2048 for D = 512). Seed 004's `forward_expansion` is that factor
# ({seed}`004:nn.Linear(embed_size, forward_expansion * embed_size)`; its classifier passes 4).

# %%
ff = FeedForward(512, 4 * 512).to(device).eval()
x = torch.randn(2, 7, 512, device=device)
with torch.no_grad():
    whole = ff(x)
    one_position = ff(x[:, 3:4])  # position 3 alone
assert torch.allclose(
    whole[:, 3:4], one_position, atol=1e-5
)  # position-wise: no token mixing here

ff_params = count_parameters(ff)
attn_params = count_parameters(MultiHeadAttention(512, 8))
assert ff_params == 2 * 512 * 2048 + 2048 + 512 == 2_099_712
assert attn_params == 4 * (512 * 512 + 512) == 1_050_624
print(f"feed-forward: {ff_params:,} parameters; attention: {attn_params:,}")

# %% [markdown]
# Attention is where tokens exchange information; the feed-forward is where each token is processed, and it
# holds two thirds of an encoder block's parameters.
#
# ## 4.3 LayerNorm, not BatchNorm
#
# Both normalise to zero mean and unit variance, then apply a learned scale and shift. They differ in
# *what they average over*:
#
# * **BatchNorm** normalises each feature using statistics over the batch (and the positions), and in
#   eval mode switches to running averages collected during training;
# * **LayerNorm** normalises each token over its own D features: no other token, no other sequence, and
#   the same computation in train and eval mode.
#
# Seed 004 says that LayerNorm {seedtr}`004:normalises within each sample`. More exactly, within each
# *token*: a sample is a whole sequence, and LayerNorm does not mix its positions either; each
# token's D features are normalised on their own (the first cell below checks it). And it says
# BatchNorm is unstable because the sequence length may vary. Here is what that means in practice,
# in three measurable failures. We use `BatchNorm1d(D)` on [B, D, S] (its layout), against
# `LayerNorm(D)`.

# %%
torch.manual_seed(0)
D = 16
batch_norm = nn.BatchNorm1d(D).to(device)
layer_norm = nn.LayerNorm(D).to(device)


def bn(x):
    """BatchNorm1d wants [B, D, S]: statistics per feature over the batch and the
    positions."""
    return batch_norm(x.transpose(1, 2)).transpose(1, 2)


sentence = torch.randn(1, 4, D, device=device) + 2.0  # one real sentence of 4 tokens
neighbour = torch.randn(1, 4, D, device=device) + 2.0  # and its neighbour in the batch
short_batch = torch.cat([sentence, neighbour])
# The same two sentences padded to length 12 (a fixed maximum length, say): 8 pads
# (zeros) each. Only the padding differs between the two batches.
long_batch = torch.cat([short_batch, torch.zeros(2, 8, D, device=device)], dim=1)

batch_norm.train()
bn_short, bn_long = bn(short_batch)[0], bn(long_batch)[0, :4]
ln_short, ln_long = layer_norm(short_batch)[0], layer_norm(long_batch)[0, :4]
bn_change = (bn_short - bn_long).abs().max().item()
ln_change = (ln_short - ln_long).abs().max().item()
print(
    f"(1) same sentence, different padding: BatchNorm output moves by {bn_change:.3f}, "
    f"LayerNorm by {ln_change:.1e}"
)
assert bn_change > 0.1 and ln_change < 1e-6
# LayerNorm works per token: the first token alone is normalised exactly as inside its
# sentence.
assert torch.allclose(layer_norm(sentence[:, :1]), layer_norm(sentence)[:, :1])

# %% [markdown]
# **(1) Padding pollutes the batch statistics.** The pad vectors enter BatchNorm's mean and variance, so
# the *same sentence*, next to the same neighbour, is normalised differently depending on how much
# padding the batch carries. Masking the attention does not help: the norm does not see the mask.

# %%
try:
    batch_norm(
        torch.randn(1, D, 1, device=device)
    )  # one sequence of one token, train mode
    raised = None
except ValueError as exc:
    raised = str(exc)
print("(2) batch of one token, train mode:", raised)
assert raised is not None and "more than 1 value per channel" in raised
# One sequence of ten tokens is fine: the statistics run over the positions too.
one_sequence = bn(torch.randn(1, 10, D, device=device))
print(
    "    BatchNorm on a batch of one sequence of 10 tokens: fine, shape",
    tuple(one_sequence.shape),
)
with torch.no_grad():
    one = layer_norm(torch.randn(1, 1, D, device=device))
print("    LayerNorm on a batch of one token: fine, shape", tuple(one.shape))
batch_norm.eval()  # generation runs in eval mode: running statistics, no batch needed
with torch.no_grad():
    one_bn = batch_norm(torch.randn(1, D, 1, device=device))
batch_norm.train()  # back to train mode for (3)
print(
    "    BatchNorm in eval mode on a batch of one token: fine, shape",
    tuple(one_bn.shape),
)

# %% [markdown]
# **(2) A batch of one token.** BatchNorm takes its statistics over the batch *and* the positions,
# so a batch of one sequence trains fine. A batch of one token leaves one value per feature, and
# there are no statistics to take: BatchNorm refuses outright in train mode, and with a few values
# (a small batch of short sequences) its statistics are noise. Generating text, a decoder does
# see one sequence growing one token at a time, but generation runs in eval mode, where BatchNorm
# uses its running statistics and accepts a batch of one token, as the cell shows. The problem at generation time is (3) below. LayerNorm needs
# nothing but the token itself, in either mode.

# %%
with torch.no_grad():
    for _ in range(
        20
    ):  # a short "training": running averages drift towards the batches seen
        bn(torch.randn(8, 10, D, device=device) * 3 + 1)
    test = torch.randn(2, 5, D, device=device)
    batch_norm.train()
    bn_train = bn(test)
    batch_norm.eval()
    bn_eval = bn(test)
    layer_norm.train()
    ln_train = layer_norm(test)
    layer_norm.eval()
    ln_eval = layer_norm(test)
bn_gap, ln_gap = (
    (bn_train - bn_eval).abs().max().item(),
    (ln_train - ln_eval).abs().max().item(),
)
print(
    f"(3) train vs eval mode on the same input: BatchNorm differs by {bn_gap:.3f}, "
    f"LayerNorm by {ln_gap:.1e}"
)
assert bn_gap > 0.1 and ln_gap == 0.0

# %% [markdown]
# **(3) Train/eval mismatch.** In eval mode BatchNorm uses the running averages of the training batches,
# which need not match the data it now sees. Seed 004's experience,
# {seedtr}`004:in training it worked all right, but at inference the results were unstable`, is most
# likely this.
# LayerNorm computes the same thing in both modes.
#
# ## 4.4 Where dropout goes
#
# The paper (§5.4): "We apply dropout to the output of each sub-layer, before it is added to the
# sub-layer input and normalized." So a Post-LN sublayer is
#
# $$x \leftarrow \mathrm{LayerNorm}\big(x + \mathrm{Dropout}(\mathrm{Sublayer}(x))\big).$$
#
# Seed 004's block writes {seed}`004:x = self.dropout(self.norm1(attention + query))`: dropout *after* the norm.
# That drops features of the whole residual stream, the input included, and the next block receives a
# vector with holes in it. One way to see where dropout sits, whatever the code looks like: set
# `p = 1` in train mode. Every dropped path is then exactly zero. In the paper's block both sublayers
# vanish and what is left is `norm2(norm1(x))`; in the seed's block *everything* vanishes.


# %%
class SeedBlock(EncoderBlock):
    """The seed's placement: Dropout(LayerNorm(x + Sublayer(x)))."""

    def forward(self, x, mask=None):
        attn, ff = self.attn_sub, self.ff_sub  # each has its own LayerNorm and Dropout
        x = attn.dropout(attn.norm(x + self.self_attn(x, x, x, mask=mask)))
        return ff.dropout(ff.norm(x + self.ff(x)))


torch.manual_seed(0)
paper = EncoderBlock(16, 4, 64, dropout=1.0).to(device).train()
seed_block = SeedBlock(16, 4, 64, dropout=1.0).to(device).train()
seed_block.load_state_dict(paper.state_dict())
x = torch.randn(2, 5, 16, device=device)
with torch.no_grad():
    norm2_of_norm1 = paper.ff_sub.norm(paper.attn_sub.norm(x))
    assert torch.allclose(paper(x), norm2_of_norm1, atol=1e-6)
    assert torch.count_nonzero(seed_block(x)) == 0
print(
    "p = 1: the paper's block returns norm2(norm1(x)); "
    "the seed's block returns all zeros"
)

# %% [markdown]
# With the usual `p = 0.1` the difference is a matter of degree, and just as visible: the seed's block
# outputs exact zeros in {glue:text}`ch04_zeros_seed:.1%` of the output features (dropout with
# p = 0.1 zeroes a tenth of them), the paper's block in {glue:text}`ch04_zeros_paper:.1%`.

# %%
for block in (paper, seed_block):
    block.attn_sub.dropout.p = block.ff_sub.dropout.p = 0.1
x = torch.randn(8, 20, 16, device=device)
with torch.no_grad():
    zeros_paper = (paper(x) == 0).float().mean().item()
    zeros_seed = (seed_block(x) == 0).float().mean().item()
print(
    f"share of exact zeros in the output: paper {zeros_paper:.1%}, "
    f"seed {zeros_seed:.1%}"
)
assert zeros_paper == 0.0 and 0.05 < zeros_seed < 0.15


# %% tags=["remove-cell"]
# The numbers the text quotes, for the book (this cell is hidden there).
glue("ch04_zeros_seed", zeros_seed, display=False)
glue("ch04_zeros_paper", zeros_paper, display=False)

# %% [markdown]
# In eval mode dropout is the identity, so the two blocks agree there: a bug that no inference test
# can see. (The exercise's checks use the `p = 1` probe for that reason.)
#
# One dropout that eval mode does **not** switch off: the `dropout_p` argument of
# `F.scaled_dot_product_attention`. SDPA is a function, not a module, so it does not know the
# module's mode; its documentation's reference implementation applies
# `torch.dropout(attn_weight, dropout_p, train=True)` whatever the mode {cite:p}`pytorchdocs`. An
# attention module that passes `dropout_p=self.p` keeps dropping attention weights in eval mode:


# %%
class SdpaAttention(nn.Module):
    """Single-head self-attention through SDPA, with attention dropout p."""

    def __init__(self, p, guard):
        super().__init__()
        self.p, self.guard = p, guard

    def forward(self, x):
        p = (self.p if self.training else 0.0) if self.guard else self.p
        return F.scaled_dot_product_attention(x, x, x, dropout_p=p)


torch.manual_seed(0)
x = torch.randn(2, 1, 6, 16, device=device)  # [B, H, S, Dh]
naive = SdpaAttention(0.1, guard=False).eval()
guarded = SdpaAttention(0.1, guard=True).eval()
with torch.no_grad():
    naive_gap = (naive(x) - naive(x)).abs().max().item()  # two eval-mode calls
    guarded_gap = (guarded(x) - guarded(x)).abs().max().item()
print(
    f"eval mode, two calls, one input: dropout_p=self.p differs by {naive_gap:.3f}; "
    f"dropout_p=self.p if self.training else 0.0 by {guarded_gap:.1e}"
)
assert naive_gap > 1e-3 and guarded_gap == 0.0

# %% [markdown]
# The fix is one expression: `dropout_p=self.p if self.training else 0.0`, as
# `tformer_ref.attention` does. The checks of exercises 1 and 4 catch the bug by behaviour: in eval
# mode, two calls on the same input must give the same output.
#
# ## 4.5 Post-LN and Pre-LN
#
# Where does the LayerNorm go? Two arrangements are in use:
#
# | | one sublayer | after the last block |
# |---|---|---|
# | **Post-LN** (the paper) | $x \leftarrow \mathrm{LN}(x + \mathrm{Drop}(F(x)))$ | nothing needed: every block ends with a norm |
# | **Pre-LN** (GPT-2 and most models since) | $x \leftarrow x + \mathrm{Drop}(F(\mathrm{LN}(x)))$ | one final LN: the residual stream is never normalised otherwise |
#
# `tformer_ref.blocks.EncoderBlock(..., norm_first=False)` is Post-LN, `norm_first=True` Pre-LN. With
# the same weights both equal PyTorch's `nn.TransformerEncoderLayer(..., norm_first=...)`;
# `tformer_ref.torch_compat.encoder_block_to_torch` copies a block's weights into PyTorch's
# layer, so we can check:

# %%
torch.manual_seed(0)
x = torch.randn(2, 5, 16, device=device)
for norm_first in (False, True):
    ours = EncoderBlock(16, 4, 64, norm_first=norm_first).to(device).eval()
    gap = (ours(x) - encoder_block_to_torch(ours)(x)).abs().max().item()
    print(f"norm_first={norm_first!s:5}: largest difference from PyTorch {gap:.1e}")
    assert gap < 1e-5

# %% [markdown]
# ```{figure} ../figures/blocks_post_pre_ln.svg
# :alt: Four block diagrams: a Post-LN encoder block and decoder block, where each sublayer is followed by dropout, the residual addition and a LayerNorm, and a Pre-LN encoder block and decoder block, where a LayerNorm comes before each sublayer and the residual addition comes last; one final LayerNorm follows the last block of each stack, before the memory and before the output projection.
# :name: fig-blocks-post-pre-ln
# :width: 100%
#
# An encoder block and a decoder block, Post-LN as in the paper (left) and Pre-LN (right); the sublayers are highlighted, and the residual connections run beside them. A Pre-LN stack needs the final LayerNorm (dashed), once, after its N-th block, because its residual stream is never normalised otherwise.
# ```
#
# {cite:t}`xiong2020layer` showed why Post-LN needs a learning-rate warm-up: at initialisation, the gradient
# of the parameters *near the output* is large, and it shrinks layer by layer towards the input; in
# Pre-LN the gradient norm is about the same in every layer. We can measure that: a 6-layer
# encoder–decoder at initialisation, one batch of random tokens, and the norm of the gradient of each
# decoder layer's feed-forward weight $W_2$ (their Figure 3 plots such per-layer gradient norms).
# One random initialisation can exaggerate or hide the effect, so we repeat it with five seeds, each
# with its own weights and batch, and claim only what holds for all five.


# %% mystnb={"figure": {"caption": "Gradient norm of each decoder layer's feed-forward weight at initialisation, mean over five seeds (shaded: smallest to largest): Post-LN grows towards the output with every seed, Pre-LN stays within a small factor (the qualitative result of Xiong et al. 2020).", "name": "fig-ch04-postln-preln"}, "image": {"alt": "Line plot over six decoder layers with shaded bands: the Post-LN curve rises several-fold from layer 1 to layer 6, the Pre-LN curve changes far less, drifting gently downwards."}}
def ffn_grad_norms(norm_first, seed):
    """Gradient norm of each layer's W2, {"encoder": [6], "decoder": [6]}, at init."""
    torch.manual_seed(seed)
    model = Transformer(
        100,
        100,
        d_model=64,
        n_heads=4,
        n_layers=6,
        d_ff=256,
        dropout=0.0,
        norm_first=norm_first,
    ).to(device)
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(1, 100, (16, 20), generator=g).to(device)
    tgt = torch.randint(1, 100, (16, 21), generator=g).to(device)
    logits = model(src, tgt[:, :-1])
    F.cross_entropy(logits.reshape(-1, 100), tgt[:, 1:].reshape(-1)).backward()
    return {
        stack: [layer.ff.linear2.weight.grad.norm().item() for layer in blocks.layers]
        for stack, blocks in (("encoder", model.encoder), ("decoder", model.decoder))
    }


SEEDS = range(5)
post = [ffn_grad_norms(False, seed) for seed in SEEDS]
pre = [ffn_grad_norms(True, seed) for seed in SEEDS]
post_dec = torch.tensor([run["decoder"] for run in post])  # [seed, layer]
pre_dec = torch.tensor([run["decoder"] for run in pre])

layers = range(1, 7)
fig, ax = plt.subplots(figsize=(6, 3.5))
for norms, style, label in (
    (post_dec, "o-", "Post-LN (the paper)"),
    (pre_dec, "s-", "Pre-LN"),
):
    (line,) = ax.plot(layers, norms.mean(0), style, label=label)
    ax.fill_between(
        layers,
        norms.min(0).values,
        norms.max(0).values,
        alpha=0.2,
        color=line.get_color(),
    )
ax.set_xlabel("decoder layer (1 = nearest the input)")
ax.set_ylabel(r"$\|\nabla W_2\|$ at initialisation")
ax.set_title("Gradient norm per layer at initialisation, five seeds")
ax.legend()
plt.show()

post_growth = post_dec[:, -1] / post_dec[:, 0]  # top layer / bottom layer, per seed
pre_spread = pre_dec.max(1).values / pre_dec.min(1).values  # largest / smallest
enc_growth = torch.tensor([run["encoder"][-1] / run["encoder"][0] for run in post])
for seed in SEEDS:
    print(
        f"seed {seed}: Post-LN top/bottom {post_growth[seed]:5.2f}; "
        f"Pre-LN largest/smallest {pre_spread[seed]:.2f}, "
        f"top/bottom {pre_dec[seed, -1] / pre_dec[seed, 0]:.2f}; "
        f"Post-LN encoder top/bottom {enc_growth[seed]:.2f}"
    )
# The claim must hold for every seed: Post-LN grows more than 2x towards the output,
# Pre-LN's layers stay within 2x of each other, drifting down.
assert post_growth.min() > 2 > pre_spread.max()
assert (pre_dec[:, -1] < pre_dec[:, 0]).all()
assert enc_growth.max() < post_growth.min()  # in the encoder: no such growth


# %% tags=["remove-cell"]
# The numbers the text quotes, for the book (this cell is hidden there).
glue("ch04_post_growth_lo", post_growth.min().item(), display=False)
glue("ch04_post_growth_hi", post_growth.max().item(), display=False)
glue("ch04_pre_spread_lo", pre_spread.min().item(), display=False)
glue("ch04_pre_spread_hi", pre_spread.max().item(), display=False)
glue("ch04_enc_growth_lo", enc_growth.min().item(), display=False)
glue("ch04_enc_growth_hi", enc_growth.max().item(), display=False)

# %% [markdown]
# The qualitative result of Xiong et al. holds for all five seeds: Post-LN's gradients grow from
# the bottom decoder layer to the top one, by a factor of {glue:text}`ch04_post_growth_lo:.1f` to
# {glue:text}`ch04_post_growth_hi:.1f` depending on the seed, while Pre-LN's largest and smallest
# differ by a factor of only {glue:text}`ch04_pre_spread_lo:.2f` to
# {glue:text}`ch04_pre_spread_hi:.2f`, drifting gently downwards. How *much* Post-LN's gradients
# grow is a matter of the seed, which is why one run is not enough. The growth is measured in the
# stack next to the output: in the encoder of the same models, whose top layer reaches the loss only
# through the decoder's cross-attention, Post-LN's top-to-bottom ratio is
# {glue:text}`ch04_enc_growth_lo:.2f` to {glue:text}`ch04_enc_growth_hi:.2f`, nothing like the
# decoder's.
#
# With a large learning rate from step one, the top of a Post-LN model takes steps that are too
# big, which is why the paper needs warm-up (§5.3 of the paper; chapter 6). {cite:t}`xiong2020layer` report that Pre-LN trains without warm-up (this chapter
# only measures the gradients; chapter 6 compares the two in training), although
# {cite:t}`liu2020understanding` find that a well-tuned Post-LN model can end slightly better:
# this is a trade-off, not a verdict.
#
# The course keeps the paper's Post-LN as the default, and `final_norm=None` means "a final LayerNorm
# after the stack exactly when Pre-LN needs it". PyTorch's `nn.Transformer` always adds one, for both
# arrangements: to compare with it, build ours with `final_norm=True` (chapter 5).
#
# ## 4.6 Xavier initialisation
#
# Seed 000 initialises with
#
# ```{seed-quote} 000
# :code: python
# for p in model.parameters():
#     if p.dim() > 1:
#         nn.init.xavier_uniform_(p)
# ```
#
# Xavier (Glorot) uniform draws a weight of shape [fan_out, fan_in] from
# $U(-a, a)$ with $a = \sqrt{6/(\text{fan\_in} + \text{fan\_out})}$, so that the variance of the
# activations (forward) and of the gradients (backward) stays about the same from layer to layer.
# For the Linear layers that is what we want. PyTorch's default for `nn.Linear` is a uniform bound
# of $1/\sqrt{\text{fan\_in}}$, which is smaller than Xavier's only when fan_out < 5·fan_in: for the
# feed-forward's `Linear(512, 2048)` the default bound is {glue:text}`ch04_default_ff:.4f` against
# Xavier's {glue:text}`ch04_xavier_ff:.4f`, but for an output projection `Linear(512, 10000)` Xavier's
# {glue:text}`ch04_xavier_out:.4f` is the smaller of the two (the default stays
# {glue:text}`ch04_default_ff:.4f`, as it depends on fan_in alone).
#
# But `p.dim() > 1` is also true of the embedding tables [V, D]. Xavier gives them a spread that depends
# on the vocabulary size, which has nothing to do with how embeddings are used: with V = 10 000 and
# D = 512 the entries get a standard deviation of {glue:text}`ch04_xavier_embed_std:.4f`, so even
# after the paper's √D scale (chapter 5) a token's entries have a spread of
# {glue:text}`ch04_seed_scale:.2f`, against {glue:text}`ch04_pe_scale:.2f` for the positional
# encoding added to them. The course's `xavier_init_` uses Xavier for Linear weights, zero biases,
# and $N(0, 1/D)$ for embeddings, so that `embedding · √D` has unit-size entries.

# %%
V, D = 10_000, 512
table = torch.empty(V, D)
nn.init.xavier_uniform_(table)
embed_std = table.std().item()
seed_scale = (table * math.sqrt(D)).std().item()
ours = nn.Embedding(V, D)
xavier_init_(ours)
our_scale = (ours.weight * math.sqrt(D)).std().item()
pe_scale = math.sqrt(0.5)  # std of sin/cos values over many positions
print(
    f"entries of embedding·√D: seed's loop {seed_scale:.2f}, "
    f"course's init {our_scale:.2f}; "
    f"positional encoding {pe_scale:.2f}"
)
assert seed_scale < 0.4 and abs(our_scale - 1.0) < 0.05


def default_bound(fan_in):
    """nn.Linear's default, kaiming_uniform_(a=√5): U(-1/√fan_in, 1/√fan_in)."""
    return 1 / math.sqrt(fan_in)


def xavier_bound(fan_in, fan_out):
    return math.sqrt(6 / (fan_in + fan_out))


for fan_out in (2048, 10_000):
    linear = nn.Linear(512, fan_out)
    default_max = linear.weight.abs().max().item()  # the largest weight PyTorch drew
    xavier_init_(linear)
    print(
        f"Linear(512, {fan_out}): default bound {default_bound(512):.4f} "
        f"(largest weight drawn {default_max:.4f}), "
        f"Xavier bound {xavier_bound(512, fan_out):.4f}"
    )
    assert default_max <= default_bound(512)
    assert linear.weight.abs().max().item() <= xavier_bound(512, fan_out)
assert default_bound(512) < xavier_bound(
    512, 2048
)  # fan_out < 5·fan_in: default smaller
assert xavier_bound(512, 10_000) < default_bound(512)  # fan_out > 5·fan_in: Xavier is


# %% tags=["remove-cell"]
# The numbers the text quotes, for the book (this cell is hidden there).
glue("ch04_xavier_embed_std", embed_std, display=False)
glue("ch04_seed_scale", seed_scale, display=False)
glue("ch04_pe_scale", pe_scale, display=False)
glue("ch04_default_ff", default_bound(512), display=False)
glue("ch04_xavier_ff", xavier_bound(512, 2048), display=False)
glue("ch04_xavier_out", xavier_bound(512, 10_000), display=False)

# %% [markdown]
# ## 4.7 Weight tying
#
# The paper shares one matrix between the target embedding [V, D] and the output projection
# (the `Linear(D, V)` before the softmax, whose weight is also [V, D]); with one vocabulary for both
# languages, the source embedding too (§3.4). *Sharing* means one `nn.Parameter` object used in two
# places, not two equal copies:

# %%
model = Transformer(
    1000, 1000, d_model=64, n_heads=4, n_layers=1, d_ff=128, tie_embeddings=True
).to(device)
untied = Transformer(1000, 1000, d_model=64, n_heads=4, n_layers=1, d_ff=128).to(device)
assert model.generator.weight is model.tgt_embed.weight  # one object
saved = count_parameters(untied) - count_parameters(model)
print(f"tying saves {saved:,} parameters = V·D = {1000 * 64:,}")
assert saved == 1000 * 64

# A copy is not a tie: after one optimiser step the two matrices differ.
copy = Transformer(1000, 1000, d_model=64, n_heads=4, n_layers=1, d_ff=128).to(device)
copy.generator.weight = nn.Parameter(
    copy.tgt_embed.weight.detach().clone()
)  # equal values, two objects
for m in (model, copy):
    opt = torch.optim.SGD(m.parameters(), lr=0.5)
    src = torch.randint(1, 1000, (2, 6), device=device)
    m(src, src).logsumexp(-1).mean().backward()
    opt.step()
assert torch.equal(model.generator.weight, model.tgt_embed.weight)
assert not torch.equal(copy.generator.weight, copy.tgt_embed.weight)
print("tied: still one matrix after a step; copied: two different matrices")

# %% [markdown]
# `parameters()` yields a shared Parameter once, so the optimizer updates it once, with the sum of the
# gradients from both uses.
#
# For the same reason a loop over `parameters()`, like seed 000's, meets a tied matrix once. A loop
# over *modules* (`model.modules()`, or `model.apply(fn)`) meets it twice, once as the embedding and
# once as the output Linear, and whichever rule it applies last wins. That matters when the
# initialiser treats `Embedding` and `Linear` differently, as the course's `xavier_init_` does:
# then tie *after* initialising, as `tformer_ref.model.Transformer` does. (An initialiser with one
# rule for both can tie first: nanoGPT ties, then draws Linear and Embedding weights alike from a
# normal distribution with standard deviation 0.02 {cite:p}`karpathy2022nanogpt`.) Run
# `xavier_init_`, a loop over modules, on the tied model again: it visits `generator` after `tgt_embed`, so the embedding ends with the Linear's
# Xavier scale, the problem of §4.6 (seed 000's loop gives it that scale too, tied or not):


# %%
def embed_spread(m):
    """Spread of the target embedding's entries after the √D scale (chapter 5)."""
    return (m.tgt_embed.weight * math.sqrt(m.d_model)).std().item()


torch.manual_seed(0)
tied_model = Transformer(
    1000, 1000, d_model=64, n_heads=4, n_layers=1, d_ff=128, tie_embeddings=True
)
before = embed_spread(tied_model)  # initialised, then tied
xavier_init_(tied_model)  # initialised again, after the tie
after = embed_spread(tied_model)
print(
    f"spread of embedding·√D entries: tied after init {before:.2f}; "
    f"init run again after the tie {after:.2f}"
)
assert tied_model.generator.weight is tied_model.tgt_embed.weight
assert abs(before - 1.0) < 0.05 and after < 0.5


# %% tags=["remove-cell"]
# The numbers the text quotes, for the book (this cell is hidden there).
glue("ch04_tie_before", before, display=False)
glue("ch04_tie_after", after, display=False)

# %% [markdown]
# The embedding's entries went from {glue:text}`ch04_tie_before:.2f` to
# {glue:text}`ch04_tie_after:.2f`: the loop's embedding rule ran, and then the output Linear's rule
# overwrote it on the same matrix. With an initialiser that treats the two differently, initialise
# first, then tie.
#
# ## 4.8 Recap
#
# * A block is two sublayers (self-attention, feed-forward), each wrapped in a **residual**
#   connection, a **LayerNorm** and **dropout**. Without residuals, stacked attention collapses all
#   tokens to one vector within a few layers; residuals slow that collapse.
# * The feed-forward is a per-position MLP with $F = 4D$; it holds two thirds of a block's parameters.
# * **LayerNorm** (per token), not BatchNorm: BatchNorm's statistics are polluted by padding,
#   undefined for a batch of one token in training, and different between train and eval mode.
# * **Dropout** goes on each sublayer's output *before* the residual add,
#   $\mathrm{LN}(x + \mathrm{Drop}(F(x)))$; the seed's $\mathrm{Drop}(\mathrm{LN}(x + F(x)))$ drops the
#   residual stream itself, invisibly in eval mode.
# * **Post-LN vs Pre-LN**: at initialisation Post-LN's gradients grow towards the output layers (hence
#   warm-up), with every seed we tried; Pre-LN's stay within a small factor, and Pre-LN needs a
#   final LayerNorm.
# * **SDPA's `dropout_p`** drops attention weights whatever the module's mode: pass
#   `dropout_p=self.p if self.training else 0.0`.
# * **Xavier** for the Linear layers; not for embeddings (the seed's loop hits those too).
# * **Weight tying** shares one Parameter object, after initialisation (a loop over modules meets
#   it twice); a copy is not a tie.
#
# Next, chapter 5 adds positions and assembles the whole model. The exercise
# ([exercise.ipynb](exercise.ipynb)) has you build the block and its checks name each of these
# pitfalls.

# %% [markdown]
# ## Check your understanding
#
# **1.** Stack six attention sublayers, each followed by a LayerNorm, without residual
# connections. What happens to the tokens' vectors, and why?
#
# :::{dropdown} Answer
# They collapse into one vector: in the lesson the mean cosine similarity between different
# tokens climbed to nearly 1 within a few layers, while with residuals the tokens stayed
# distinct, although they too grew more alike layer by layer (residuals slow the collapse).
# Each attention output is an average of value vectors, and averages of averages
# converge. The residual `x + Sublayer(x)` keeps every token's own input on a direct path through
# the block, and the same path carries the gradient back: without it, the query weights of the
# collapsed layers received essentially no gradient. Read §4.1 'Residual connections'.
# :::
#
# **2.** Seed 004 says BatchNorm is unstable in a Transformer because the sequence length may
# vary. Name three concrete ways in which BatchNorm fails and LayerNorm does not.
#
# :::{dropdown} Answer
# (1) Padding pollutes its batch statistics: the same sentence is normalised differently
# depending on how much padding the batch carries, and the attention mask never
# reaches the norm. (2) A batch of one token in training: BatchNorm refuses it in train mode,
# and few values make noisy statistics. (Generation runs in eval mode, where a batch of one is
# accepted.) (3) Train and eval mode compute different things: eval mode uses the running
# averages of the training batches, which is what goes wrong at generation time.
# LayerNorm normalises each token
# over its own D features, the same way in both modes. Read §4.3 'LayerNorm, not BatchNorm'.
# :::
#
# **3.** Seed 004's block computes {seed}`004:x = self.dropout(self.norm1(attention + query))`. What is
# wrong, why does no inference test notice, and which probe does?
#
# :::{dropdown} Answer
# Dropout comes *after* the norm, so it drops features of the whole residual stream, input
# included. The paper applies it to each sublayer's output before the residual add: `LayerNorm(x +
# Dropout(Sublayer(x)))`. In eval mode dropout is the identity, so both blocks agree at
# inference. The probe: set p = 1 in train mode. The paper's block then returns `norm2(norm1(x))`
# (both sublayers dropped), the seed's block returns all zeros. Read §4.4 'Where dropout goes'.
# :::
#
# **4.** At initialisation, in which arrangement, Post-LN or Pre-LN, do the gradients grow
# towards the output layers? What does that arrangement need in training, and what does the other
# one need in the model?
#
# :::{dropdown} Answer
# Post-LN, the paper's: the lesson measured the feed-forward weights' gradient norms growing
# from the bottom decoder layer to the top one with each of five seeds (by how much depended on
# the seed), while Pre-LN's stayed within a small factor of each other, the qualitative result of
# {cite:t}`xiong2020layer`. Post-LN therefore
# needs a learning-rate warm-up (chapter 6). Pre-LN trains without one, Xiong et al. report, but
# needs a final LayerNorm after the stack, since otherwise its residual stream is never
# normalised. {cite:t}`liu2020understanding` find that a well-tuned Post-LN model can end
# slightly better: a trade-off, not a verdict. Read §4.5 'Post-LN and Pre-LN'.
# :::
#
# **5.** To tie the output projection to the target embedding, a colleague writes
# `generator.weight = nn.Parameter(tgt_embed.weight.detach().clone())`. Is that a tie? And why
# must tying come after an initialisation loop such as the course's `xavier_init_`?
#
# :::{dropdown} Answer
# No: it is a copy, two Parameters that start equal and differ after one optimiser step. A tie is
# one Parameter object used in both places (`model.generator.weight is model.tgt_embed.weight`):
# `parameters()` yields it once, the optimizer updates it once with the sum of both gradients,
# and it saves V·D parameters. Tie *after* initialising whenever the initialiser treats embeddings
# and Linear layers differently: a loop over modules that runs afterwards meets the shared matrix
# twice and re-initialises it as whichever module it visits last; in the lesson, running
# `xavier_init_` again after the tie gave the embedding the output Linear's Xavier scale, the
# problem of §4.6 'Xavier initialisation'. (A loop over `parameters()` meets it once.) Read §4.7
# 'Weight tying'.
# :::
