# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Chapter 5 — Positions and the whole model
#
# Chapter 4 built the blocks. This chapter gives them positions, stacks them into an encoder and a
# decoder joined by cross-attention, and builds the seed's model: 8 heads, 2 layers, d_model = 512.
# Along the way we check the seeds' claims:
#
# * seed 004 on the sinusoidal encoding:
#   {seedtr}`004:every position gets a unique code, and it can extrapolate to sequences longer than those seen in training`.
#   The first half is right; the second is only a hope in the paper (§3.5), and a trained model
#   does not get it for free {cite:p}`press2022train` (§5.4);
# * seed 004's `Encoder` uses a learned table for positions,
#   {seed}`004:self.position_embedding = nn.Embedding(max_length, embed_size)`: fine, until a
#   sequence is longer than `max_length` (§5.3);
# * it adds {seed}`004:self.word_embedding(x) + self.position_embedding(positions)` without the
#   paper's √d_model scale (§5.5).
#
# Shape letters: B batch, S sequence length (Ss source, St target), D = d_model, H heads, V vocabulary.

# %% [markdown]
# ```{figure} ../figures/model_ch05.svg
# :alt: Diagram of the encoder–decoder Transformer with the token embeddings scaled by √d_model, the positional encodings added to them, the two stacks of N blocks and the encoder output feeding the decoder's cross-attention highlighted.
# :name: fig-model-ch05
# :width: 100%
#
# The whole model; this chapter builds the highlighted part: embeddings and positional encoding, the encoder and decoder stacks, and the cross-attention that joins them.
# ```

# %%
import math

import matplotlib.pyplot as plt
import tformer_ref.plotting  # noqa: F401  importing it applies the book style
import torch
import torch.nn as nn
from myst_nb import glue

from tformer_ref.device import get_device, seed_everything
from tformer_ref.masks import causal_mask, padding_mask
from tformer_ref.model import (
    Decoder,
    DecoderOnlyLM,
    Encoder,
    Transformer,
    count_parameters,
    decoder_only_parameter_count,
    transformer_parameter_count,
)
from tformer_ref.positions import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    sinusoidal_encoding,
)
from tformer_ref.torch_compat import stacks_to_torch

seed_everything(0)
device = get_device()
print("device:", device)

# %% [markdown]
# ## 5.1 Attention ignores order
#
# Self-attention compares every token with every other one, by content. Nothing in it knows which
# token came first: permute the input tokens and the outputs are permuted the same way
# ("permutation equivariance"). "dog bites man" and "man bites dog" would get the same set of vectors.

# %%
torch.manual_seed(0)
encoder = Encoder(d_model=32, n_heads=4, n_layers=2, d_ff=64).to(device).eval()
x = torch.randn(1, 6, 32, device=device)
perm = torch.tensor([3, 0, 5, 1, 4, 2], device=device)
with torch.no_grad():
    out, out_of_permuted = encoder(x), encoder(x[:, perm])
assert torch.allclose(out[:, perm], out_of_permuted, atol=1e-5)
print(
    "encoder(permuted x) == permuted encoder(x): order is invisible without positions"
)

# %% [markdown]
# So position has to be put into the input: each token's vector gets a position-dependent vector
# added to it before the first block.
#
# ## 5.2 Sinusoidal positional encoding
#
# The paper (§3.5) adds a fixed table:
#
# $$PE_{(pos,\,2i)} = \sin\!\left(\frac{pos}{10000^{2i/D}}\right),\qquad
#   PE_{(pos,\,2i+1)} = \cos\!\left(\frac{pos}{10000^{2i/D}}\right).$$
#
# Each pair of columns $(2i, 2i+1)$ is a point turning on a circle as the position grows, at angular
# frequency $\omega_i = 10000^{-2i/D}$: the first pair turns by one radian per position (wavelength
# $2\pi$), the last one so slowly that its wavelength is $2\pi \cdot 10000^{(D-2)/D}$, which is
# {glue:text}`ch05_longest_wavelength:,.0f` positions for D = 64 (it approaches
# $2\pi \cdot 10000$ only as D grows). Read
# across a row, the fast pairs tell nearby positions apart and the slow pairs say roughly *where* in
# a long sequence we are, like the hands of a clock.

# %% mystnb={"figure": {"caption": "The sinusoidal positional encoding for 100 positions and D = 64: the low dimensions (top rows) oscillate fast, the high dimensions (bottom rows) slowly.", "name": "fig-ch05-sinusoidal"}, "image": {"alt": "Heat map with positions on the horizontal axis and dimensions on the vertical axis, dimension 0 at the top: fast stripes in the top rows, slowly varying bands towards the bottom."}}
pe = sinusoidal_encoding(100, 64)  # [100, 64]
fig, ax = plt.subplots(figsize=(7, 3.5))
im = ax.imshow(pe.T, aspect="auto", cmap="RdBu", vmin=-1, vmax=1)
ax.set_xlabel("position")
ax.set_ylabel("dimension")
ax.set_title("Sinusoidal positional encoding, D = 64")
fig.colorbar(im, ax=ax)
plt.show()

wavelengths = 2 * math.pi * 10000 ** (torch.arange(0, 64, 2) / 64)
print(
    f"wavelengths of the 32 pairs: from {wavelengths[0]:.2f} "
    f"to {wavelengths[-1]:,.0f} positions"
)
assert math.isclose(
    wavelengths[-1].item(), 2 * math.pi * 10000 ** (62 / 64), rel_tol=1e-5
)
assert torch.allclose(pe[0, 0::2], torch.zeros(32)) and torch.allclose(
    pe[0, 1::2], torch.ones(32)
)


# %% tags=["remove-cell"]
# The numbers the text quotes, for the book (this cell is hidden there).
glue("ch05_longest_wavelength", wavelengths[-1].item(), display=False)

# %% [markdown]
# Row 0 of the table, position 0 (the left edge of the heat map), is `[0, 1, 0, 1, ...]` (sin 0,
# cos 0). The top rows of the heat map (dimension 0 and the other fast pairs) alternate quickly; the
# bottom ones are almost constant over 100 positions.
#
# Because a sine and its cosine share a frequency, moving $k$ positions is the *same rotation* for every
# starting position: $PE_{pos+k} = PE_{pos}\,R_k$ with a block-diagonal rotation $R_k$ that does not
# depend on $pos$. That is why the paper hoped the model could learn to attend by *relative* position.
# A consequence: the dot product of two encodings depends only on their distance.


# %%
def rotation(k, d_model):
    """[D, D] block-diagonal R_k with PE[pos + k] = PE[pos] @ R_k: pair i turned by the
    angle k·ω_i."""
    omega = 10000 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    r = torch.zeros(d_model, d_model, dtype=torch.float64)
    c, s = torch.cos(k * omega), torch.sin(k * omega)
    r[0::2, 0::2], r[0::2, 1::2] = torch.diag(c), torch.diag(-s)
    r[1::2, 0::2], r[1::2, 1::2] = torch.diag(s), torch.diag(c)
    return r


pe64 = sinusoidal_encoding(100, 64, dtype=torch.float64)
k = 7
assert torch.allclose(
    pe64[k:], pe64[:-k] @ rotation(k, 64), atol=1e-9
)  # one matrix for every position
dots = pe64 @ pe64.T
assert torch.allclose(dots[10, 17], dots[50, 57]) and torch.allclose(
    dots[10, 17], dots[80, 87]
)
print(
    f"PE[10]·PE[17] = {dots[10, 17]:.4f} = PE[50]·PE[57] = {dots[50, 57]:.4f}: "
    "only the distance matters"
)

# %% [markdown]
# The table is a **buffer** of `SinusoidalPositionalEncoding`: it moves with `.to(device)` but it is not a
# parameter, so the optimizer never changes it. `tformer_ref` also registers it with
# `persistent=False`, so it is not saved in the state dict: the formula rebuilds it from D, and a
# checkpoint loads into a model with another `max_len`. A plain buffer, such as seed 004's
# {seed}`004:self.register_buffer('pe', pe)`, is saved, and loading it into a model with
# another `max_len` fails on the shape:

# %%
module = SinusoidalPositionalEncoding(64, max_len=100)
assert list(module.parameters()) == [] and dict(module.named_buffers())["pe"].shape == (
    100,
    64,
)
print(
    "parameters:",
    len(list(module.parameters())),
    "| buffers:",
    [n for n, _ in module.named_buffers()],
    "| saved:",
    list(module.state_dict()),
)
# persistent=False: a model with another max_len loads the (empty) state dict.
SinusoidalPositionalEncoding(64, max_len=200).load_state_dict(module.state_dict())
saved, longer = nn.Module(), nn.Module()
saved.register_buffer("pe", sinusoidal_encoding(100, 64))  # persistent, as the seed's
longer.register_buffer("pe", sinusoidal_encoding(200, 64))
try:
    longer.load_state_dict(saved.state_dict())
    load_error = None
except RuntimeError as exc:
    load_error = str(exc)
assert load_error is not None and "size mismatch" in load_error
print("a persistent buffer, max_len 100 -> 200:", load_error.splitlines()[-1].strip())

# %% [markdown]
# ## 5.3 Learned positions and max_length
#
# Seed 004's encoder learns its positions instead,
# {seed}`004:self.position_embedding = nn.Embedding(max_length, embed_size)`: one trained vector per
# position, as BERT and GPT-2 do. Oddly, the same write-up also defines a sinusoidal
# `PositionalEncoding` class (the one whose extrapolation it praises), but its `Encoder` never uses
# it: the model it builds has the learned table, and the learned table's limit. That table has
# `max_length` rows and nothing after them, so a longer sequence fails.
# With a bare `nn.Embedding` the error is an obscure
# `IndexError` (on a GPU, a device-side assert that can take the whole process down):

# %%
max_length = 8
seed_positions = nn.Embedding(max_length, 16)
try:
    seed_positions(torch.arange(0, 10))  # a sequence of 10 tokens
    message = None
except IndexError as exc:
    message = str(exc)
print("the seed's table, 10 positions:", message)
assert message is not None

learned = LearnedPositionalEmbedding(max_len=8, d_model=16)
try:
    learned(torch.zeros(1, 10, 16))
    message = None
except ValueError as exc:
    message = str(exc)
print("tformer_ref's table:", message)
assert "past max_len=8" in message

# %% [markdown]
# `tformer_ref` checks the length first and says what to do. Either way, a learned table cannot say
# anything about positions it never trained: their rows do not exist.
#
# ## 5.4 What "extrapolates" means
#
# Seed 004 says the sinusoids
# {seedtr}`004:can extrapolate to sequences longer than those seen in training`. Two different
# things hide in that sentence:
#
# 1. **The formula has a value at every position.** True: `SinusoidalPositionalEncoding` computes rows
#    past its precomputed `max_len` on the fly, and nothing crashes.
# 2. **A model trained on short sequences works on longer ones.** That is an empirical claim about the
#    trained model, and mostly false. The paper only says the sinusoids "may allow" it (§3.5), and
#    found learned and sinusoidal positions "nearly identical" on its task.
#    {cite:t}`press2022train` measured it: a sinusoidal language model's perplexity degrades
#    quickly once the input is longer than the training length (their ALiBi was designed to fix
#    this).
#
# This chapter does not train a model on short sequences and test it on long ones; that
# degradation is Press et al.'s measurement, cited, not shown. What we can show is a reason to
# expect it, a proxy: past the training length the encodings are not just new positions, they are
# *new kinds of vectors*, with angles some pairs never reached in training. Count, for positions
# 64..255 of a model trained on lengths up to 64, the dimensions whose values go more than 0.1
# outside the range that dimension took during training:

# %%
train_len, d_model = 64, 64
module = SinusoidalPositionalEncoding(d_model, max_len=train_len)
long_input = torch.zeros(1, 4 * train_len, d_model)
table = module(long_input)[
    0
]  # [256, 64]: rows past max_len computed on the fly, no error
seen, unseen = table[:train_len], table[train_len:]
outside = (unseen < seen.min(0).values - 0.1) | (
    unseen > seen.max(0).values + 0.1
)  # [192, 64]
dims_outside = outside.any(0).nonzero().flatten().tolist()
print(
    f"{len(dims_outside)} of {d_model} dimensions leave their training range: "
    f"dims {dims_outside}"
)
assert table.shape == (256, 64) and len(dims_outside) >= 16 and min(dims_outside) >= 16
assert max(dims_outside) < d_model - 4  # the slowest pairs stay in range too
# The wavelength of each pair:
period = 2 * math.pi * 10000 ** (torch.arange(0, d_model, 2) / d_model)


# %% tags=["remove-cell"]
# The numbers the text quotes, for the book (this cell is hidden there).
glue("ch05_outside_count", len(dims_outside), display=False)
glue("ch05_outside_first", min(dims_outside), display=False)
glue("ch05_outside_last", max(dims_outside), display=False)
glue("ch05_inside_slow", max(dims_outside) + 1, display=False)
glue("ch05_outside_first_wl", period[min(dims_outside) // 2].item(), display=False)
glue("ch05_outside_last_wl", period[max(dims_outside) // 2].item(), display=False)

# %% [markdown]
# The dimensions that leave their range are neither the fastest nor the slowest: dims
# {glue:text}`ch05_outside_first:d` to {glue:text}`ch05_outside_last:d`
# ({glue:text}`ch05_outside_count:d` of them, listed above), pairs whose wavelengths run from
# {glue:text}`ch05_outside_first_wl:,.0f` to {glue:text}`ch05_outside_last_wl:,.0f` positions. The
# faster pairs went round most or all of their circle during the 64 training positions, so their
# values are not new. The slowest ones (dims {glue:text}`ch05_inside_slow:d` to 63) turn so little
# that even by position 255 they stay within 0.1 of what training saw. The pairs in between move
# into a region of input space the trained weights were never fitted to, and nothing guarantees
# sensible outputs there. So: sinusoids *compute* everywhere, learned tables do not; neither makes
# a trained model *work* beyond its training length.
#
# The remedies change how positions enter attention. ALiBi {cite:p}`press2022train` adds a
# distance penalty to the scores instead of adding vectors to the input, and was built to
# extrapolate. Rotary embeddings (RoPE), used by most recent language models, extrapolate only
# somewhat better than sinusoids in Press et al.'s measurements; RoPE models are run on longer
# inputs by rescaling their positions or frequencies, with position interpolation
# {cite:p}`chen2023extending` or NTK-aware scaling and YaRN {cite:p}`peng2024yarn`, usually with
# some fine-tuning at the new length. All of this is beyond this course.
#
# ## 5.5 Embeddings scaled by sqrt(d_model)
#
# The paper multiplies the token embeddings by $\sqrt{D}$ before adding the positions (§3.4); seed 004
# does not. Why it matters is a matter of sizes, and they depend on how the embedding table was
# initialised. A sinusoidal row has length $\sqrt{D/2}$ (16 for D = 512): half its entries are
# sines, half cosines, and $\sin^2 + \cos^2 = 1$ for each pair. A token vector with $N(0, \sigma^2)$
# entries has length about $\sigma\sqrt{D}$, and three choices of $\sigma$ are common:
#
# * $N(0, 1/D)$, tensor2tensor's {cite:p}`vaswani2018tensor2tensor` and the course's
#   (`xavier_init_`): length about 1, and $\sqrt{D}$ after the scale;
# * $N(0, 0.02^2)$, GPT-2's and BERT's (as in nanoGPT {cite:p}`karpathy2022nanogpt`), which add
#   learned positions and no scale;
# * $N(0, 1)$, the default of `nn.Embedding` {cite:p}`pytorchdocs`, and what seed 004's tables
#   get, since the write-up initialises nothing: length about $\sqrt{D}$, and about $D$ after the
#   scale.

# %%
D, V = 512, 1000
tokens = torch.randint(0, V, (4, 50))
pe512 = sinusoidal_encoding(50, D)
position_len = pe512.norm(dim=-1).mean().item()
print(f"length of a positional encoding: {position_len:.1f}")
INITS = (
    ("N(0, 1/D)", D**-0.5),
    ("N(0, 0.02²)", 0.02),
    ("N(0, 1), nn.Embedding's default", 1.0),
)
lengths = {}
for name, std in INITS:
    table = nn.Embedding(V, D)
    if std != 1.0:  # N(0, 1) is what nn.Embedding already drew
        nn.init.normal_(table.weight, std=std)
    with torch.no_grad():
        unscaled = table(tokens).norm(dim=-1).mean().item()
    lengths[name] = (unscaled, unscaled * math.sqrt(D))
    print(
        f"token embedding, {name:32s}: length {unscaled:6.2f} unscaled, "
        f"{unscaled * math.sqrt(D):6.1f} scaled by √D"
    )
small_unscaled, small_scaled = lengths["N(0, 1/D)"]
big_unscaled, big_scaled = lengths["N(0, 1), nn.Embedding's default"]
assert small_unscaled < 0.1 * position_len and 1.0 < small_scaled / position_len < 2.0
assert big_scaled > 20 * position_len  # the default, scaled: tokens drown the positions


# %% tags=["remove-cell"]
# The numbers the text quotes, for the book (this cell is hidden there).
glue("ch05_pe_len", position_len, display=False)
glue("ch05_small_unscaled", small_unscaled, display=False)
glue("ch05_small_scaled", small_scaled, display=False)
glue("ch05_gpt_unscaled", lengths["N(0, 0.02²)"][0], display=False)
glue("ch05_big_unscaled", big_unscaled, display=False)
glue("ch05_big_scaled", big_scaled, display=False)

# %% [markdown]
# With $N(0, 1/D)$, unscaled, a token's vector has length {glue:text}`ch05_small_unscaled:.2f`
# against the position's {glue:text}`ch05_pe_len:.1f`: the positions drown the tokens. Scaled by √D
# it has length {glue:text}`ch05_small_scaled:.1f`, a bit more than its position: the two are of
# comparable size, and neither drowns the other.
# The opposite trap is the default: `nn.Embedding`'s $N(0, 1)$ scaled by √D gives tokens of length
# {glue:text}`ch05_big_scaled:.0f`, and the positions, of length {glue:text}`ch05_pe_len:.1f`,
# drown in them. The √D scale belongs with an $N(0, 1/D)$ table; with the default
# initialisation, scaling makes things worse. (GPT-2's $N(0, 0.02^2)$, length
# {glue:text}`ch05_gpt_unscaled:.2f`, goes with learned positions of the same small size, and no
# scale.) Seed 004's own model adds two tables left at $N(0, 1)$, tokens and learned positions,
# both of length about $\sqrt{D}$: there the missing scale does no harm. It matters as soon as
# one side changes, such as sinusoidal positions with an $N(0, 1/D)$ table. `Transformer.embed` does `Dropout(table(tokens) · √D + PE)`: dropout on the sum, as in
# §5.4 of the paper.
#
# The course's own models break this rule once. With `positions="learned"` (§5.8, and the
# model chapter 8 trains), `Transformer` and `DecoderOnlyLM` keep the √D, and `xavier_init_`
# draws the position table, like the token table, from $N(0, 1/D)$. At chapter 8's D = 64:

# %%
lm_lengths = []
for seed in range(5):
    torch.manual_seed(seed)
    lm = DecoderOnlyLM(100, 64, 4, 1, 128, max_len=64, positions="learned")
    with torch.no_grad():
        token_len = (lm.tok_embed.weight * math.sqrt(64)).norm(dim=-1).mean().item()
        pos_len = lm.pos.embedding.weight.norm(dim=-1).mean().item()
    lm_lengths.append((token_len, pos_len))
    print(
        f"seed {seed}: token·√D length {token_len:.2f}, learned position {pos_len:.2f}"
    )
ratios = [t / p for t, p in lm_lengths]
assert all(6 < r < 10 for r in ratios)  # about √64 = 8 with every seed


# %% tags=["remove-cell"]
# The numbers the text quotes, for the book (this cell is hidden there).
glue("ch05_lm_token_len", lm_lengths[0][0], display=False)
glue("ch05_lm_pos_len", lm_lengths[0][1], display=False)
glue("ch05_lm_ratio_lo", min(ratios), display=False)
glue("ch05_lm_ratio_hi", max(ratios), display=False)

# %% [markdown]
# The tokens start {glue:text}`ch05_lm_ratio_lo:.1f` to {glue:text}`ch05_lm_ratio_hi:.1f`
# times longer than the positions (seeds 0–4; with seed 0, {glue:text}`ch05_lm_token_len:.2f`
# against {glue:text}`ch05_lm_pos_len:.2f`): at the start, the positions are nearly drowned.
# The course keeps it so, one embedding rule for both kinds of position: the table is a
# parameter, and training has to grow it. GPT-2's recipe, both tables at $N(0, 0.02^2)$ and
# no scale, avoids the mismatch from the start.
#
# ## 5.6 Encoder, decoder and cross-attention
#
# The **encoder** is a stack of encoder blocks (chapter 4) over the embedded source; its output, one
# vector per source token, is called the *memory*. The **decoder** block has three sublayers:
#
# 1. **masked self-attention** over the target so far, with the causal mask (position i sees 0..i);
# 2. **cross-attention**: queries from the decoder, **keys and values from the memory**, masked with
#    the source padding mask. This is the only place where the target reads the source;
# 3. the feed-forward.
#
# `tformer_ref` gives the masked self-attention the causal mask AND the target padding mask;
# the exercise's block uses the causal mask alone. Both are right for targets padded on the
# right: the pads come after every real token, so the causal mask already hides them from
# every real query. Only the pad positions' own outputs differ, and the loss ignores those
# (chapter 6).
#
# `tformer_ref.model.Transformer` builds the masks itself from `pad_id`: `encode(src)` returns the
# memory and the source mask, `decode(tgt_in, memory, src_mask)` the logits.

# %%
torch.manual_seed(0)
small = (
    Transformer(src_vocab=20, tgt_vocab=24, d_model=32, n_heads=4, n_layers=2, d_ff=64)
    .to(device)
    .eval()
)
src = torch.tensor(
    [[5, 6, 7, 8, 0, 0], [3, 4, 9, 9, 9, 2]], device=device
)  # 0 = padding
tgt_in = torch.tensor([[1, 11, 12, 13], [1, 14, 15, 0]], device=device)
with torch.no_grad():
    memory, src_mask = small.encode(src)
    logits = small.decode(tgt_in, memory, src_mask)
    # The first decoder layer's cross-attention weights [B, H, St, Ss]:
    x = small.embed(tgt_in, small.tgt_embed, small.tgt_pos)
    layer = small.decoder.layers[0]
    self_mask = padding_mask(tgt_in, 0) & causal_mask(4, device=device)
    h = layer.attn_sub.norm(x + layer.self_attn(x, mask=self_mask))
    _, cross_weights = layer.cross_attn(
        h, memory, memory, mask=src_mask, return_weights=True
    )
print(
    "memory",
    tuple(memory.shape),
    "| src_mask",
    tuple(src_mask.shape),
    "| logits",
    tuple(logits.shape),
)
print(
    "cross-attention weights",
    tuple(cross_weights.shape),
    "| weight on the source padding:",
    cross_weights[0, :, :, 4:].abs().max().item(),
)
assert logits.shape == (2, 4, 24) and cross_weights.shape == (2, 4, 4, 6)
assert (
    cross_weights[0, :, :, 4:].abs().max() == 0
)  # padding of source 0 gets no attention

# %% [markdown]
# Two probes any right encoder–decoder passes. Changing a *later* target token must not change the
# earlier positions' logits (causality), and adding more source padding must change nothing.

# %%
with torch.no_grad():
    base = small(src, tgt_in)
    later = tgt_in.clone()
    later[:, 3] = 5
    assert torch.allclose(small(src, later)[:, :3], base[:, :3], atol=1e-5)
    more_padding = torch.cat(
        [src, torch.zeros(2, 3, dtype=torch.long, device=device)], dim=1
    )
    assert torch.allclose(small(more_padding, tgt_in), base, atol=1e-5)
print("causal: the future never changes the past; source padding is invisible")

# %% [markdown]
# ## 5.7 The seed's model, counted
#
# The seeds' model: 8 heads, 2 encoder and 2 decoder layers, d_model = 512, d_ff = 4·512 = 2048. They
# give no vocabulary, so we take 10 000 tokens on each side. Nor could seed 004's own translation
# model be run as printed: its `Transformer.forward` calls {seed}`004:src_mask = create_src_mask(src)`,
# a function the write-up never defines, and builds a `Decoder` class it never shows (only
# `DecoderBlock` appears). So we count the model the seeds describe, built from `tformer_ref`'s
# pieces. Counting by hand, per piece:
#
# | piece | formula | D = 512, F = 2048 |
# |---|---|---|
# | attention (4 Linear(D, D) with biases) | $4(D^2 + D)$ | 1,050,624 |
# | feed-forward | $2DF + F + D$ | 2,099,712 |
# | LayerNorm | $2D$ | 1,024 |
# | encoder layer | attention + FF + 2 LN | 3,152,384 |
# | decoder layer | 2 attention + FF + 3 LN | 4,204,032 |
# | embeddings, source and target | $2VD$ | 10,240,000 |
# | output projection | $VD + V$ | 5,130,000 |
#
# Sinusoidal positions add nothing (a buffer); a learned table would add `max_len·D` per side.

# %%
seed_model = Transformer(10_000, 10_000, d_model=512, n_heads=8, n_layers=2, d_ff=2048)
attn, ff, ln = 4 * (512**2 + 512), 2 * 512 * 2048 + 2048 + 512, 2 * 512
by_hand = (
    2 * 10_000 * 512
    + 2 * (attn + ff + 2 * ln)
    + 2 * (2 * attn + ff + 3 * ln)
    + 10_000 * 512
    + 10_000
)
counted = count_parameters(seed_model)
print(
    f"counted {counted:,} = by hand {by_hand:,} = "
    f"formula {transformer_parameter_count(10_000, 10_000):,}"
)
assert counted == by_hand == transformer_parameter_count(10_000, 10_000) == 30_082_832

one_head = Transformer(10_000, 10_000, d_model=512, n_heads=1, n_layers=2, d_ff=2048)
assert count_parameters(one_head) == counted
print(
    "with 1 head instead of 8: the same count; heads are slices of the same projections"
)
tied = transformer_parameter_count(10_000, 10_000, tie_embeddings="all")
print(
    f"with all three matrices tied (one shared vocabulary, the paper's §3.4): {tied:,}"
)
del seed_model, one_head

# %% [markdown]
# The number of heads does not appear in any formula (chapter 1): 8 heads of 64 dimensions are one
# `Linear(512, 512)` per role, cut into slices. Seed 004's own `SelfAttention`, with one
# {seed}`004:nn.Linear(self.head_dim, self.head_dim, bias=False)` per role shared by all heads,
# has $3 \cdot 64^2 + 512^2 + 512 = 274{,}944$ parameters instead of 1,050,624: across the model's
# six attention sublayers (2 in the encoder, 4 in the decoder) that is 4,654,080 parameters fewer,
# and a different model, in which every head applies the same 64-by-64 map to its slice.

# %%
assert 6 * (4 * (512**2 + 512) - (3 * 64**2 + 512**2 + 512)) == 4_654_080

# %% [markdown]
# **Equal to PyTorch's own.** With the weights copied across, our encoder and decoder stacks compute
# what `nn.Transformer(batch_first=True)` computes, given the same masks (PyTorch's masks say True =
# *ignore*, ours True = *attend*). One design choice has to be stated: `nn.Transformer` ends both
# stacks with a LayerNorm, for Post-LN too. The paper's Post-LN has no final norm (every block already
# ends with one), and neither does ours by default (`final_norm=None` means "only for Pre-LN"); for the
# comparison we build ours with `final_norm=True`. One more trap: run the comparison with autograd on.
# Under `torch.no_grad()` in eval mode, `nn.TransformerEncoder` takes a "fast path" through nested
# tensors that returns zeros at padded source positions (with a warning), where ours returns ordinary
# vectors; both are ignored downstream, but an exact comparison would fail there.

# %%
torch.manual_seed(1)
enc = Encoder(32, 4, 2, 64, final_norm=True).to(device).eval()
dec = Decoder(32, 4, 2, 64, final_norm=True).to(device).eval()
theirs = stacks_to_torch(enc, dec)
src_tokens = torch.tensor([[5, 6, 7, 0], [1, 2, 3, 4]], device=device)
tgt_tokens = torch.tensor([[1, 4, 5], [1, 7, 0]], device=device)
src_x, tgt_x = (
    torch.randn(2, 4, 32, device=device),
    torch.randn(2, 3, 32, device=device),
)
src_keep, tgt_keep = (
    padding_mask(src_tokens, 0),
    padding_mask(tgt_tokens, 0) & causal_mask(3, device=device),
)
ours = dec(tgt_x, enc(src_x, src_keep), tgt_keep, src_keep)
pytorch = theirs(
    src_x,
    tgt_x,
    tgt_mask=~causal_mask(3, device=device)[0, 0],
    src_key_padding_mask=src_tokens == 0,
    tgt_key_padding_mask=tgt_tokens == 0,
    memory_key_padding_mask=src_tokens == 0,
)
difference = (ours - pytorch).abs().max().item()
print(f"largest difference from nn.Transformer: {difference:.1e}")
assert difference < 1e-5

# %% [markdown]
# ## 5.8 A decoder-only model
#
# GPT-style language models drop the encoder and the cross-attention: a stack of self-attention
# blocks with the causal mask, reading and predicting one sequence. Such a block is exactly chapter 4's
# encoder block given the causal mask.
# `tformer_ref.model.DecoderOnlyLM(vocab, d_model, n_heads, n_layers, d_ff, *, dropout,
# max_len, pad_id, ...)` maps tokens [B, S] to next-token logits [B, S, V]; everything
# after the sizes is passed by name.

# %%
torch.manual_seed(0)
lm = (
    DecoderOnlyLM(
        vocab=50,
        d_model=32,
        n_heads=4,
        n_layers=2,
        d_ff=64,
        max_len=16,
        positions="learned",
        tie_embeddings=True,
    )
    .to(device)
    .eval()
)
tokens = torch.tensor([[3, 4, 5, 6, 7], [8, 9, 10, 0, 0]], device=device)
with torch.no_grad():
    logits = lm(tokens)
    changed = tokens.clone()
    changed[:, 3:] = 11
    assert torch.allclose(lm(changed)[:, :3], logits[:, :3], atol=1e-5)
formula = decoder_only_parameter_count(
    50, 32, 2, 64, 16, positions="learned", tie_embeddings=True
)
print(
    "logits",
    tuple(logits.shape),
    f"| {count_parameters(lm):,} parameters = formula {formula:,}",
)
assert logits.shape == (2, 5, 50) and count_parameters(lm) == formula

# %% [markdown]
# ## 5.9 Recap
#
# * Attention is **permutation-equivariant**: without positions, order is invisible.
# * **Sinusoidal** encoding: pair i turns at frequency $10000^{-2i/D}$, sin in even columns, cos in odd
#   ones; shifting by k is one rotation for every position, and the table is a buffer, not a parameter.
# * **Learned** positions have `max_len` rows and nothing more: a longer input is an error (a clear one
#   in `tformer_ref`).
# * Extrapolation: sinusoids *compute* at any position; a trained model does not thereby *work* at
#   lengths it never saw. We showed a proxy (the intermediate-frequency dimensions leave the range
#   seen in training); the degradation itself is measured by {cite:t}`press2022train`. ALiBi, or
#   position interpolation for RoPE, is the remedy.
# * Multiply token embeddings by **√d_model**, then add positions; dropout on the sum. The scale
#   assumes an $N(0, 1/D)$ table: with `nn.Embedding`'s default $N(0, 1)$ it drowns the positions.
# * **Cross-attention**: queries from the decoder, keys and values from the encoder's memory, with the
#   source padding mask; decoder self-attention is always **causal**.
# * The seed's model (8 heads, 2+2 layers, D = 512, F = 2048, V = 10 000) has **30,082,832**
#   parameters; heads change nothing in the count. Its encoder and decoder stacks equal
#   `nn.Transformer`'s, given `final_norm=True`.
# * A **decoder-only** model is a causal stack of encoder blocks.
#
# The exercise ([exercise.ipynb](exercise.ipynb)) has you write the sinusoidal table, the embedding
# step and the decoder block. Chapter 6 trains this model.

# %% [markdown]
# ## Check your understanding
#
# **1.** Feed an encoder that has no positional encoding the tokens of "dog bites man", then
# those of "man bites dog". What comes out?
#
# :::{dropdown} Answer
# The same set of vectors, permuted: self-attention compares tokens by content only, so permuting
# the input permutes the outputs the same way (permutation equivariance); the lesson asserted it
# for a 2-layer encoder. Order has to be put into the input, by adding a position-dependent
# vector to each token before the first block. Read §5.1 'Attention ignores order'.
# :::
#
# **2.** What makes the sinusoidal encoding suited to relative positions? And why is its table a
# buffer rather than a parameter?
#
# :::{dropdown} Answer
# Each column pair (2i, 2i+1) turns on a circle at its own frequency, so moving k positions is
# the same rotation R_k whatever the starting position: PE[pos + k] = PE[pos] R_k, and the dot
# product of two encodings depends only on their distance. The table is a fixed function of D: as
# a buffer it moves with `.to(device)`, but the optimizer never changes it and it adds no
# parameters. Read §5.2 'Sinusoidal positional encoding'.
# :::
#
# **3.** Seed 004 says the sinusoidal encoding
# {seedtr}`004:can extrapolate to sequences longer than those seen in training`. Which part of
# that is true? And what does its learned `nn.Embedding(max_length, embed_size)` do with a longer
# input?
#
# :::{dropdown} Answer
# The formula has a value at every position, so nothing crashes; the learned table has
# `max_length` rows and nothing after them, so a longer input fails (an `IndexError`, a
# device-side assert on a GPU). But neither makes a trained model *work* past its training
# length: dimensions of intermediate frequency reach values never seen in training (the lesson
# counted the dimensions that leave their training range, a proxy), and
# {cite:t}`press2022train` measured a sinusoidal model's perplexity degrading quickly beyond it.
# {cite:t}`vaswani2017attention` only say the
# sinusoids "may allow" it. Read §5.3 'Learned positions and max_length' and §5.4 'What
# "extrapolates" means'.
# :::
#
# **4.** Seed 004 computes {seed}`004:self.word_embedding(x) + self.position_embedding(positions)`.
# With embeddings initialised at N(0, 1/D) and sinusoidal positions, why does the missing √D
# matter? And what would the √D do to a table left at `nn.Embedding`'s default N(0, 1)?
#
# :::{dropdown} Answer
# A token's embedding then has a length of about 1 and a sinusoidal row a length of √(D/2), 16 at
# D = 512: unscaled, the positions drown the tokens. Multiply the token embeddings by √D first,
# which makes a token carry a bit more weight than its position, then add the positions, and
# apply dropout to the sum. With the default N(0, 1), a token already has a length of about √D,
# and the scale makes it about D (512): now the tokens drown the positions. Read §5.5
# 'Embeddings scaled by sqrt(d_model)'.
# :::
#
# **5.** In a decoder block's cross-attention, where do the queries, the keys and the values come
# from, and which mask does it take? Which mask does the decoder's self-attention always take?
#
# :::{dropdown} Answer
# The queries come from the decoder (the output of its masked self-attention sublayer), the keys
# and values from the encoder's output, the memory, masked with the source padding mask: this is
# the only place where the target reads the source. The decoder's self-attention always takes the
# causal mask (combined with the target padding mask), so that position i sees 0..i. Two probes
# check both: changing a later target token must not change earlier logits, and extra source
# padding must change nothing. Read §5.6 'Encoder, decoder and cross-attention'.
# :::
