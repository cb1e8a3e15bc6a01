# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Chapter 3 — Masks
#
# A mask says which keys a query may look at. Transformers need two: a **padding mask**, so that no
# query attends to the filler tokens that make sequences of a batch the same length, and a **causal
# mask**, so that a decoder cannot read the future it is asked to predict. Seed 000's padding mask
# is
#
# ```{seed-quote} 000
# :code: python
# # 创建 padding 掩码 [32,64]
# mask = (x != 0).unsqueeze(1).unsqueeze(2)  # [32,1,1,64]
#
# # 计算注意力时应用
# scores = scores.masked_fill(mask == 0, -1e9)
# ```
#
# (its comments: {seedtr}`000:create the padding mask [32,64]` and
# {seedtr}`000:apply it when computing attention`), and seed 004 builds its causal mask as
# {seed}`004:torch.tril(torch.ones((trg_len, trg_len)))`. That is correct, with three caveats this
# chapter demonstrates: the pad id is hard-coded to 0 (§3.1); PyTorch's own APIs disagree about
# what `True` means (§3.4); and `-1e9` does not exist in float16 (§3.5). (A fourth, about
# devices: seed 004 builds its causal mask without a device, so it sits on the CPU, and on a GPU
# it meets CUDA scores; the chapter 6 {doc}`bug hunt <../ch06_bughunt/exercise>` grades it.)
# The seed's mask has all four axes; a common variant with one axis too few,
# `(x != 0).unsqueeze(1)`, still "works" when the batch size equals the number of heads — with
# wrong values (§3.1). Then two probes that catch the usual masking bugs by behaviour (§3.6), and
# an explorer to play with (§3.7).
#
# **Convention of this course** (and of `F.scaled_dot_product_attention`): a bool mask, **True = may
# attend**, broadcastable to the scores `[B, H, Sq, Sk]`.

# %% [markdown]
# ```{figure} ../figures/model_ch03.svg
# :alt: Diagram of the encoder–decoder Transformer with its mask inputs highlighted: a padding mask into the encoder's self-attention, a causal mask combined with padding into the decoder's masked self-attention, and the source padding mask into cross-attention.
# :name: fig-model-ch03
# :width: 100%
#
# The whole model; this chapter builds the highlighted part: the padding mask, the causal mask, and where each one enters an attention sublayer.
# ```

# %%
import math

import matplotlib.pyplot as plt
import tformer_ref.plotting  # noqa: F401  importing it applies the book style
import torch
import torch.nn as nn
import torch.nn.functional as F
from IPython.display import display
from matplotlib.figure import Figure
from myst_nb import glue

from tformer_ref.attention import (
    MultiHeadAttention,
    masked_fill_value,
    scaled_dot_product_attention,
)
from tformer_ref.device import get_device, seed_everything
from tformer_ref.masks import (
    causal_mask,
    combine_masks,
    from_ignore_mask,
    padding_mask,
    to_additive_mask,
    to_ignore_mask,
    to_mha_masks,
)
from tformer_ref.widgets import PictureGrid, figure_png

seed_everything(0)
device = get_device()
print("device:", device)

# %% [markdown]
# ## 3.1 Padding masks
#
# Three sentences of lengths 3, 5 and 1, padded to 5 with the pad id 0:

# %%
PAD = 0
tokens = torch.tensor(
    [[5, 6, 7, 0, 0], [1, 2, 3, 4, 9], [8, 0, 0, 0, 0]], device=device
)
pad_mask = padding_mask(tokens, pad_id=PAD)  # [B, 1, 1, S]
print(tuple(pad_mask.shape))
print(pad_mask[:, 0, 0].int())

# %% [markdown]
# Why `[B, 1, 1, S]`? The scores are `[B, H, Sq, Sk]` and the mask is about *keys*, so it lives on the
# last axis; it is the same for every head and every query, so those axes are 1 and broadcasting copies
# it. Broadcasting aligns shapes **from the right**, and this is where a mask with one axis too few
# goes wrong. `(tokens != 0).unsqueeze(1)` is `[B, 1, S]`; against `[B, H, Sq, Sk]` it is read as
# `[1, B, 1, S]` — its batch axis sits on the **heads** axis. With 3 sequences and 2 heads, PyTorch
# refuses:

# %%
H, Dh = 2, 4
q, k, v = (torch.randn(3, H, 5, Dh, device=device) for _ in range(3))
scores = q @ k.transpose(-2, -1) / math.sqrt(Dh)
wrong_mask = (tokens != PAD).unsqueeze(1)  # [B, 1, S]
try:
    scores.masked_fill(~wrong_mask, -1e4)
    raise AssertionError("expected a broadcasting error")
except RuntimeError as exc:
    print("RuntimeError:", exc)

# %% [markdown]
# With 3 heads — **B == H** — the shapes fit and nothing complains. Head *h* of every sequence is masked
# with sequence *h*'s padding: sequence 1 (no padding) has heads that ignore some of its real tokens
# (head 2, masked like sequence 2, ignores tokens 1..4), and sequence 2 has heads that read its padding.

# %%
H = 3
q, k, v = (torch.randn(3, H, 5, Dh, device=device) for _ in range(3))
scores = q @ k.transpose(-2, -1) / math.sqrt(Dh)
silent = scores.masked_fill(~wrong_mask, -1e4).softmax(-1)  # runs!
right = scores.masked_fill(~pad_mask, -1e4).softmax(-1)
print(
    "sequence 2, head 1, query 0 — wrong mask:",
    [round(p, 2) for p in silent[2, 1, 0].tolist()],
)
print(
    "sequence 2, head 1, query 0 — right mask:",
    [round(p, 2) for p in right[2, 1, 0].tolist()],
)
assert not torch.allclose(silent, right)
try:  # the package refuses a mask that is not 4-dimensional, whatever the sizes
    scaled_dot_product_attention(q, k, v, wrong_mask)
except ValueError as exc:
    print("tformer_ref:", str(exc).split(";")[0])

# %% [markdown]
# Exercise checks therefore always include a case with B == H. A caveat of seed 000's snippet
# itself: {seed}`000:(x != 0)` assumes the pad id is 0.
# Tokenizers choose their own (often 1, or the last id); pass it in.

# %%
other_tokens = torch.tensor(
    [[0, 3, 1, 1]], device=device
)  # pad id 1; 0 is a real token here
print("pad_id=1:    ", padding_mask(other_tokens, pad_id=1)[0, 0, 0].int().tolist())
print("seed's x != 0:", (other_tokens != 0)[0].int().tolist())

# %% [markdown]
# ## 3.2 The causal mask
#
# Query *i* may attend to keys 0..*i*. As a keep-mask that is the lower triangle, **`tril`**:

# %%
S = 5
causal = causal_mask(S, device=device)  # [1, 1, S, S]
print("tril (query i sees keys 0..i):")
print(causal[0, 0].int())
print("triu (query i sees keys i..S-1, the future!):")
print(torch.ones(S, S, dtype=torch.int64).triu())

# %% [markdown]
# `triu` is its mirror image: the first query sees everything and the last only itself — the model
# could read the word it must predict. `triu(diagonal=1)` is something else again: the *ignore*-mask of
# the causal pattern (True above the diagonal), which is what `nn.MultiheadAttention` wants (§3.4).
# The attention weights with the causal mask have zeros above the diagonal:

# %%
x = torch.randn(1, 1, S, 8, device=device)
_, w = scaled_dot_product_attention(x, x, x, causal)
print(w[0, 0].round(decimals=2))
assert torch.all(w[0, 0].triu(1) == 0)

# %% [markdown]
# ## 3.3 Combining masks
#
# A decoder needs both masks: a query may attend to a key only if the key is real **and** not in the
# future. With keep-masks that is a logical AND, and broadcasting does the shapes:
# `[B, 1, 1, S] & [1, 1, S, S] -> [B, 1, S, S]`.
#
# ```{figure} ../figures/mask_patterns.svg
# :alt: Three 5 by 5 grids of queries (rows) by keys (columns) for the tokens the, cat, sat, PAD, PAD: the padding mask masks the two PAD columns, the causal mask masks every cell above the diagonal, and their AND masks both, leaving a lower triangle over the first three keys.
# :name: fig-mask-patterns
# :width: 100%
#
# The padding mask, the causal mask and their AND for one sequence of three tokens padded to five, like sequence 0 below: ✓ may attend (True), hatched × masked (False). The last two rows are padded queries, and they still attend to the real keys.
# ```

# %%
both = combine_masks(pad_mask, causal)  # the same as pad_mask & causal
assert torch.equal(both, pad_mask & causal)
print(tuple(both.shape))
print("sequence 0 (length 3):")
print(both[0, 0].int())

# %% [markdown]
# Look at rows 3 and 4 of sequence 0: they are padded *queries*, and they still attend (to the real
# keys). That is fine — their outputs are ignored by the loss. Which means that a padded query that can
# see **no** key at all is possible (left padding, or a sequence that is all padding), and §3.5 shows what
# it does to softmax.

# %% [markdown]
# ## 3.4 Three conventions for one mask
#
# PyTorch has three ways to say "do not attend", and two of them are each other's opposite:
#
# | API | bool mask means | float mask |
# |---|---|---|
# | `F.scaled_dot_product_attention(attn_mask=)` | **True = attend** | added to the scores |
# | `nn.MultiheadAttention(key_padding_mask=, attn_mask=)` | **True = ignore** | added to the scores |
# | `nn.Transformer*` (`src_key_padding_mask`, `mask`) | True = ignore | added to the scores |
#
# In code: the same keep-mask gives the right answer with SDPA, and the *opposite* masking with
# `nn.MultiheadAttention`.

# %%
torch.manual_seed(0)
ours = MultiHeadAttention(8, 2).eval().to(device)
theirs = nn.MultiheadAttention(8, 2, batch_first=True).eval().to(device)
with (
    torch.no_grad()
):  # the same weights in both (nn.MultiheadAttention packs q, k, v together)
    theirs.in_proj_weight.copy_(
        torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight])
    )
    theirs.in_proj_bias.copy_(
        torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias])
    )
    theirs.out_proj.load_state_dict(ours.out_proj.state_dict())

xs = torch.randn(1, 4, 8, device=device)
keep = causal_mask(4, device=device)
with torch.no_grad():
    reference = ours(xs, mask=keep)
    confused, confused_w = theirs(
        xs, xs, xs, attn_mask=keep[0, 0]
    )  # a keep-mask where it wants ignore
    converted, _ = theirs(xs, xs, xs, attn_mask=to_ignore_mask(keep)[0, 0])
print(
    "nn.MultiheadAttention given the keep-mask, weights of query 0:",
    [round(p, 2) for p in confused_w[0, 0].tolist()],
)
assert torch.allclose(converted, reference, atol=1e-5)
assert not torch.allclose(confused[:, :3], reference[:, :3], atol=1e-3)

# %% [markdown]
# Query 0 attends to keys 1..3 — the future — and not to itself. The conversion is a `~`, which
# `to_ignore_mask` / `from_ignore_mask` spell out.
# For a mask that differs per sequence, `nn.MultiheadAttention`
# takes either `key_padding_mask` `[B, S]` (True = pad) or an `attn_mask` of shape `[B·H, Sq, Sk]`
# (`to_mha_masks`):

# %%
x3 = torch.randn(3, 5, 8, device=device)
with torch.no_grad():
    ref3 = ours(x3, mask=both)
    via_kpm, _ = theirs(
        x3,
        x3,
        x3,
        key_padding_mask=to_ignore_mask(pad_mask)[:, 0, 0],
        attn_mask=to_ignore_mask(causal)[0, 0],
        need_weights=False,
    )
    via_attn_mask, _ = theirs(
        x3, x3, x3, attn_mask=to_mha_masks(both, n_heads=2), need_weights=False
    )
assert torch.allclose(via_kpm, ref3, atol=1e-5) and torch.allclose(
    via_attn_mask, ref3, atol=1e-5
)
assert torch.equal(from_ignore_mask(to_ignore_mask(both)), both)
print("keep-mask -> ignore-masks: nn.MultiheadAttention agrees with the reference")

# %% [markdown]
# The third convention: a **float** mask is *added* to the scores, so it must hold 0 where attended and a
# very negative number elsewhere (`to_additive_mask`). Seed 004's causal mask,
# {seed}`004:torch.tril(torch.ones((trg_len, trg_len)))`, is a float 1/0 tensor, and the seed uses
# it correctly: {seed}`004:energy.masked_fill(mask == 0, float("-1e20"))` compares it with 0 first,
# which makes it a bool mask. But if you passed that float tensor as `attn_mask` to SDPA or
# `nn.MultiheadAttention`, it would be *added*: 1 to the allowed scores and 0 to the future ones,
# which masks nothing.

# %%
qs = torch.randn(1, 1, 4, 8, device=device)
float_tril = torch.tril(torch.ones(4, 4, device=device))  # seed 004's 1/0 pattern
leaky = F.scaled_dot_product_attention(qs, qs, qs, attn_mask=float_tril)
proper = F.scaled_dot_product_attention(
    qs, qs, qs, attn_mask=to_additive_mask(keep, qs.dtype)
)
assert torch.allclose(
    proper, F.scaled_dot_product_attention(qs, qs, qs, attn_mask=keep), atol=1e-6
)
assert torch.allclose(
    proper, scaled_dot_product_attention(qs, qs, qs, keep)[0], atol=1e-6
)
print(
    "float 1/0 mask differs from the causal result by",
    (leaky - proper).abs().max().item(),
)
print("additive mask:\n", to_additive_mask(keep, torch.float16)[0, 0])

# %% [markdown]
# PyTorch can also make the causal mask for you, in three places, and each has a catch:
#
# * `F.scaled_dot_product_attention(q, k, v, is_causal=True)` applies the triangle without a mask
#   tensor. With fewer queries than keys its triangle starts at the **top left**: query 0 sees
#   key 0 alone. When decoding with a cache, the new query comes *last* and should see every key,
#   so `is_causal=True` is wrong there; chapter 8 (§8.8) builds the mask aligned at the bottom
#   right.
# * `nn.MultiheadAttention(...)(x, x, x, is_causal=True)` is only a **hint**: without an
#   `attn_mask` it raises an error. The mask decides; the hint may only let PyTorch pick a faster
#   kernel. It must be the causal mask: PyTorch may use the hint in place of the mask, and a
#   wrong hint can give wrong results {cite:p}`pytorchdocs`.
# * `nn.Transformer.generate_square_subsequent_mask(S)` returns the causal mask in the third
#   convention: a float mask, 0 where a query may attend and `-inf` above the diagonal.

# %%
qc, kc, vc = (torch.randn(1, 1, n, 8, device=device) for n in (2, 4, 4))
flag = F.scaled_dot_product_attention(qc, kc, vc, is_causal=True)
top_left = torch.ones(2, 4, dtype=torch.bool, device=device).tril()
bottom_right = torch.ones(2, 4, dtype=torch.bool, device=device).tril(diagonal=2)
print("is_causal=True with 2 queries and 4 keys attends like\n", top_left.int())
assert torch.allclose(
    flag, F.scaled_dot_product_attention(qc, kc, vc, attn_mask=top_left), atol=1e-6
)
assert not torch.allclose(
    flag, F.scaled_dot_product_attention(qc, kc, vc, attn_mask=bottom_right), atol=1e-3
)

try:
    theirs(xs, xs, xs, is_causal=True)
    raise AssertionError("expected an error")
except RuntimeError as exc:
    print("nn.MultiheadAttention, is_causal=True alone:", str(exc).split(".")[0])

square = nn.Transformer.generate_square_subsequent_mask(4, device=device)
print("generate_square_subsequent_mask(4):\n", square)
assert square.dtype == torch.float32 and torch.equal(square == 0, keep[0, 0])
with torch.no_grad():
    hinted, _ = theirs(xs, xs, xs, attn_mask=square, is_causal=True)
assert torch.allclose(hinted, reference, atol=1e-5)

# %% [markdown]
# ## 3.5 Fill values, half precision and NaN
#
# A masked score must become so negative that `exp()` of it is 0. The seeds use `-1e9` (seed 000's
# snippet at the top of this chapter) and `-1e20`: seed 004's `SelfAttention`, whose first three
# bugs chapter 1 hunted (§1.12), masks with
#
# ```{seed-quote} 004
# :code: python
# energy = energy.masked_fill(mask == 0, float("-1e20"))
# ```
#
# and that line is its fourth bug. In float32 (largest value about 3.4·10³⁸) both values work. But
# float16's range ends at ±65504, and under mixed precision (chapter 7) the scores are float16:

# %%
for dtype in (torch.float16, torch.bfloat16, torch.float32):
    print(
        f"{str(dtype):15s} largest {torch.finfo(dtype).max:10.4g}   "
        f"-1e9 becomes {torch.tensor(-1e9, dtype=dtype).item():.4g}   "
        f"-1e20 becomes {torch.tensor(-1e20, dtype=dtype).item():.4g}"
    )
assert torch.isinf(torch.tensor(-1e9).half())
assert torch.isinf(torch.tensor(-1e20).half())
half_scores = torch.randn(4, dtype=torch.float16)
for fill in (-1e9, float("-1e20")):
    try:
        half_scores.masked_fill(torch.tensor([False, False, True, True]), fill)
        raise AssertionError("expected an overflow error")
    except RuntimeError as exc:
        print(f"masked_fill({fill:g}) in float16:", exc)

# %% [markdown]
# `masked_fill` refuses; written another way (`torch.where`, an additive mask built in float16) the
# `-1e9` silently becomes `-inf`. And `-inf` is only harmless while a row keeps at least one real key:
# when *every* key of a query is masked, softmax computes `exp(-inf) / Σ exp(-inf) = 0 / 0 = NaN`, and the
# NaN spreads through everything downstream (the next layer mixes it into every token).

# %%
row = torch.tensor([[1.0, 2.0, 3.0]])
nothing = torch.tensor([[False, False, False]])
print("all masked, -inf fill:   ", row.masked_fill(~nothing, float("-inf")).softmax(-1))
print(
    "all masked, finite fill: ",
    row.masked_fill(~nothing, masked_fill_value(row.dtype)).softmax(-1),
)
assert torch.isnan(row.masked_fill(~nothing, float("-inf")).softmax(-1)).all()

# %% [markdown]
# So seed 004's fourth bug has a one-line fix that needs no literal at all: fill with the most negative
# *finite* value of the scores' own dtype (−65504 in float16),
#
# ```python
# energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
# ```
#
# In float16, with one query that may see two of its four keys and one that may see none (the graded
# bug hunt, [exercise `ch03_bughunt`](../ch03_bughunt/exercise.ipynb), gives you the seed's
# `SelfAttention` with all four bugs to fix):

# %%
energy16 = torch.randn(2, 4, dtype=torch.float16)  # [queries, keys]
mask01 = torch.tensor([[1, 1, 0, 0], [0, 0, 0, 0]])  # the seed's: 0 = masked
fixed16 = energy16.masked_fill(mask01 == 0, torch.finfo(energy16.dtype).min)
weights16 = fixed16.float().softmax(dim=-1)
print("weights:\n", weights16)
assert torch.isfinite(weights16).all() and torch.all(weights16[0, 2:] == 0)
assert torch.allclose(weights16[1], torch.full((4,), 0.25))  # no key: a uniform row

# %% [markdown]
# A finite fill gives a uniform row instead — finite, but it averages the padding. The reference
# fills with the dtype's own minimum, `torch.finfo(dtype).min`, and then sets the weights of a query
# with no key to zero. `masked_fill` *replaces* the score, so that value fits every dtype.
#
# An **additive** mask is another matter: it is *added* to the scores, and in float16 a score of
# −16 or less plus −65504 lies past the end of the range. It becomes `-inf`, and a fully masked row is
# NaN again, exactly what the finite value was meant to avoid:

# %%
# One query whose three keys are all masked:
scores16 = torch.tensor([-20.0, -30.0, -40.0], dtype=torch.float16)
fill16 = torch.finfo(torch.float16).min
added16 = scores16 + fill16
print(
    "float16 scores + finfo(float16).min:",
    added16,
    "-> softmax",
    added16.float().softmax(-1),
)
added32 = scores16.float() + fill16  # the same mask added to float32 scores
moderate = scores16 + torch.tensor(-1e4, dtype=torch.float16)  # a moderate fill
print("added in float32:", added32, "-> softmax", added32.softmax(-1))
print("-1e4 in float16: ", moderate, "-> softmax", moderate.float().softmax(-1))
assert torch.isinf(added16).all() and torch.isnan(added16.float().softmax(-1)).all()
assert torch.isfinite(added32.softmax(-1)).all()
assert torch.isfinite(moderate.float().softmax(-1)).all()
# finite, but not masked: the fully masked row follows its original scores
assert torch.allclose(added32.softmax(-1), scores16.float().softmax(-1))

# %% [markdown]
# So the rule for additive masks: add them to **float32** scores, or, when the scores must stay in
# float16, use a moderate value such as −1e4, whose `exp()` is still exactly 0 next to any ordinary
# score. For `masked_fill` the dtype's own minimum is always safe. Both fixes only keep the row
# finite: a fully masked row under an additive mask still follows its original scores (the weights
# printed above), so a query with no key still needs its weights set to zero.
# `nn.MultiheadAttention` returns NaN for a fully padded sequence on its default path, and on
# its inference fast path (eval mode under `torch.no_grad()`) whatever `need_weights` says.
# `F.scaled_dot_product_attention` returns zeros for such a query instead, with a bool mask and
# with a `-inf` additive mask alike (measured below on the CPU, torch
# {glue:text}`ch03_torch_version`). Its documentation does not promise this, and versions
# released before a 2024 change returned NaN {cite:p}`pytorch133882`: a hand-written softmax
# still needs the care above. The
# reference gives a query with no key zero attention, so its output is just the output
# projection's bias — finite, in every precision:

# %%
fully_padded = torch.tensor([[3, 4, 0], [0, 0, 0]], device=device)
x2 = torch.randn(2, 3, 8, device=device)
with torch.no_grad():
    torch_out, _ = theirs(x2, x2, x2, key_padding_mask=fully_padded == PAD)
    ours_out = ours(x2, mask=padding_mask(fully_padded, PAD))
print("nn.MultiheadAttention, sequence 1, token 0:", torch_out[1, 0, :4])
print("tformer_ref,           sequence 1, token 0:", ours_out[1, 0, :4])
assert torch.isnan(torch_out[1]).all() and torch.isfinite(ours_out).all()
q_cpu = torch.randn(1, 1, 2, 4)
no_key = torch.tensor([[True, False], [False, False]])  # query 1 sees no key
for sdpa_mask in (no_key, torch.zeros(2, 2).masked_fill(~no_key, float("-inf"))):
    sdpa_out = F.scaled_dot_product_attention(q_cpu, q_cpu, q_cpu, attn_mask=sdpa_mask)
    assert torch.all(sdpa_out[0, 0, 1] == 0)
print("F.scaled_dot_product_attention, a query with no key:", sdpa_out[0, 0, 1])
assert torch.allclose(ours_out[1], ours.out_proj.bias.expand(3, 8))
for dtype in (torch.float16, torch.bfloat16):
    qh = torch.randn(2, 2, 3, 4, dtype=dtype)
    out_h, w_h = scaled_dot_product_attention(
        qh, qh, qh, padding_mask(fully_padded.cpu(), PAD)
    )
    assert torch.isfinite(out_h).all() and torch.all(w_h[1] == 0)
print("float16 and bfloat16: finite, and zero weights for the fully padded sequence")


# %% tags=["remove-cell"]
# The numbers the text quotes, for the book (this cell is hidden there).
glue("ch03_torch_version", torch.__version__.split("+")[0], display=False)

# %% [markdown]
# ## 3.6 Probes: causality and pad invariance
#
# Two properties any correct masking has, whatever the code, which make good tests:
#
# * **Causality.** Change the tokens after position *t*: the outputs at positions 0..*t* must not move.
# * **Pad invariance.** Append more padding, or change what sits at padded positions: the outputs of the
#   real tokens must not move.


# %%
def causality_probe(module, mask, t=3, S=6):
    x = torch.randn(2, S, 8, device=device)
    changed = x.clone()
    changed[:, t + 1 :] = torch.randn_like(changed[:, t + 1 :])
    with torch.no_grad():
        return (
            (module(x, mask=mask) - module(changed, mask=mask))[:, : t + 1]
            .abs()
            .max()
            .item()
        )


tril6 = causal_mask(6, device=device)
triu6 = torch.ones(1, 1, 6, 6, dtype=torch.bool, device=device).triu()
print(f"tril: the past moved by {causality_probe(ours, tril6):.1e}")
print(f"triu: the past moved by {causality_probe(ours, triu6):.1e}")
assert causality_probe(ours, tril6) < 1e-6 and causality_probe(ours, triu6) > 1e-3


# %%
def pad_probe(module, make_mask):
    short = torch.tensor([[4, 5, 6, 0], [7, 8, 9, 3]], device=device)
    long = torch.cat([short, torch.full((2, 3), PAD, device=device)], dim=1)
    x = torch.randn(2, 7, 8, device=device)
    garbage = x.masked_fill(
        (long == PAD)[..., None], 5.0
    )  # different content at padded positions
    with torch.no_grad():
        a = module(x[:, :4], mask=make_mask(short))
        b = module(x, mask=make_mask(long))[:, :4]
        c = module(garbage, mask=make_mask(long))[:, :4]
    real = short != PAD
    return max((a - b)[real].abs().max().item(), (a - c)[real].abs().max().item())


def wrong_axis(t):
    """[B, 1, S] placed as [1, B, 1, S]: with B == H == 2 it runs."""
    return (t != PAD)[None, :, None, :]


print(
    "padding mask [B, 1, 1, S]: real tokens moved by "
    f"{pad_probe(ours, lambda t: padding_mask(t, PAD)):.1e}"
)
print(
    f"mask on the heads axis:   real tokens moved by {pad_probe(ours, wrong_axis):.1e}"
)
assert (
    pad_probe(ours, lambda t: padding_mask(t, PAD)) < 1e-5
    and pad_probe(ours, wrong_axis) > 1e-3
)

# %% [markdown]
# (The wrong-axis mask is written out as `[1, B, 1, S]` because the package refuses 3-dimensional masks;
# it is exactly what a `[B, 1, S]` mask broadcasts to.) The exercise's checks run these probes on your
# functions.

# %% [markdown]
# ## 3.7 Mask explorer
#
# A batch of two sequences padded to 8: choose the length of sequence A (B has length 3) and whether
# the mask is causal. Left, A's combined keep-mask (white = attend); right, the attention weights of one
# head. Padded query rows still attend; a fully masked row is all zero. Every setting was drawn when the
# lesson ran and your browser switches between the pictures, so the controls work in the static book too.

# %%
explorer_q = torch.randn(2, 1, 8, 16, device=device)
explorer_k = torch.randn(2, 1, 8, 16, device=device)


def explore_masks(len_a=5, len_b=3, causal_on=True, sequence=0, ax_pair=None):
    lengths = torch.tensor([len_a, len_b], device=device)
    ids = torch.where(
        torch.arange(8, device=device) < lengths[:, None], 1, PAD
    )  # 1 = some real token
    mask = padding_mask(ids, PAD)
    if causal_on:
        mask = combine_masks(mask, causal_mask(8, device=device))
    _, weights = scaled_dot_product_attention(explorer_q, explorer_k, explorer_k, mask)
    show = ax_pair is None
    if show:
        _, ax_pair = plt.subplots(1, 2, figsize=(8, 3.6))
    ax_pair[0].imshow(
        mask.expand(2, 1, 8, 8)[sequence, 0].cpu(), cmap="gray", vmin=0, vmax=1
    )
    ax_pair[0].set_title(
        f"mask, sequence {sequence} (length {(len_a, len_b)[sequence]})"
    )
    ax_pair[1].imshow(weights[sequence, 0].cpu(), cmap="viridis", vmin=0, vmax=1)
    ax_pair[1].set_title("attention weights")
    for ax in ax_pair:
        ax.set_xlabel("key")
        ax.set_ylabel("query")
    if show:
        plt.tight_layout()
        plt.show()


def mask_png(len_a: int, causal_on: bool) -> bytes:
    fig = Figure(figsize=(8, 3.6))
    # A fixed layout: solving one per picture would triple the time to draw them.
    fig.subplots_adjust(left=0.07, right=0.98, bottom=0.14, top=0.92, wspace=0.25)
    explore_masks(len_a, 3, causal_on, 0, ax_pair=fig.subplots(1, 2))
    return figure_png(fig)


lengths_a = range(9)
display(
    PictureGrid(
        ["padding only", "padding and causal"],
        [str(n) for n in lengths_a],
        [[mask_png(n, causal_on) for n in lengths_a] for causal_on in (False, True)],
        row_description="mask",
        column_description="length A",
        row=1,
        column=5,
    )
)

# %% [markdown]
# Three settings side by side: padding only, causal and padding, and a sequence of
# length 0 (every row fully masked: zero weights, no NaN).

# %% mystnb={"figure": {"caption": "Masks (left, white = may attend) and the attention weights they give (right): padding only, padding with the causal mask, and a sequence of length 0 whose rows are all masked and get zero weights.", "name": "fig-ch03-masks"}, "image": {"alt": "Three rows of two images: a padding mask and its weights; a combined padding and causal mask and its triangular weights; an all-masked sequence with all-zero weights."}}
fig, axes = plt.subplots(3, 2, figsize=(7, 9.5))
explore_masks(5, 3, False, 0, ax_pair=axes[0])
explore_masks(5, 3, True, 0, ax_pair=axes[1])
explore_masks(5, 0, True, 1, ax_pair=axes[2])
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 3.8 Recap
#
# * Padding mask: `(tokens != pad_id)[:, None, None, :]`, shape `[B, 1, 1, S]`, with the pad id passed in.
#   A `[B, 1, S]` mask puts the batch on the heads axis: an error when B ≠ H, silently wrong when B == H.
# * Causal mask: `tril` (query *i* sees keys 0..*i*). `triu` shows it the future; `triu(1)` is the
#   ignore-form of the causal mask.
# * Combine keep-masks with `&`; broadcasting gives `[B, 1, S, S]`.
# * `F.scaled_dot_product_attention`: True = attend. `nn.MultiheadAttention` and
#   `nn.Transformer`: True = ignore. A float mask is *added*: a 1/0 mask passed as `attn_mask`
#   masks nothing.
# * SDPA's `is_causal=True` aligns its triangle top left when queries are fewer than keys;
#   `nn.MultiheadAttention`'s `is_causal` is a hint that still needs the `attn_mask`;
#   `generate_square_subsequent_mask` gives a float 0/`-inf` causal mask.
# * `-1e9` overflows float16; `-inf` turns a fully masked row into NaN. `masked_fill` with
#   `torch.finfo(dtype).min`, and give rows with no key zero weight. An *additive* mask of that
#   value overflows when added to float16 scores: add it in float32, or use −1e4 in float16.
# * Test masking by behaviour: the causality probe and the pad-invariance probe.
#
# Next: the exercise ([exercise.ipynb](exercise.ipynb)).

# %% [markdown]
# ## Check your understanding
#
# **1.** A colleague's padding mask is `(tokens != pad_id).unsqueeze(1)`, of shape `[B, 1, S]`.
# Their test, with a batch of 4 sequences and 4 heads, runs without an error and returns the
# right shape. What is wrong, and which probe shows it?
#
# :::{dropdown} Answer
# Broadcasting aligns shapes from the right, so against scores `[B, H, Sq, Sk]` a `[B, 1, S]`
# mask is read as `[1, B, 1, S]`: its batch axis lands on the heads axis. With B ≠ H that is an
# error; with B == H it runs, and head h of every sequence is masked with sequence h's padding.
# The mask must be `[B, 1, 1, S]`: `(tokens != pad_id)[:, None, None, :]`. The pad-invariance
# probe shows it: append padding, or change what sits at the padded positions, and the real
# tokens' outputs must not move; with the mask on the heads axis they do. That is why the
# exercise's checks always include a case with B == H. Read §3.1 'Padding masks' and §3.6
# 'Probes: causality and pad invariance'.
# :::
#
# **2.** Which triangle is the causal keep-mask (True = may attend)? What do `triu()` and
# `triu(diagonal=1)` give instead?
#
# :::{dropdown} Answer
# `tril`: query i sees keys 0..i. `triu()` is its mirror image: the first query sees every key
# and the last one only itself, so the model can read the token it must predict. The causality
# probe catches it: change the tokens after position t, and the outputs at 0..t must not move;
# with `triu` they do. `triu(diagonal=1)` is the *ignore*-form of the causal mask, True above the
# diagonal, which is what `nn.MultiheadAttention` wants. Read §3.2 'The causal mask' and §3.6
# 'Probes: causality and pad invariance'.
# :::
#
# **3.** You pass the course's causal keep-mask unchanged as `attn_mask` to
# `F.scaled_dot_product_attention` and to `nn.MultiheadAttention`. Which result is right? And
# what would seed 004's float causal mask, {seed}`004:torch.tril(torch.ones((trg_len, trg_len)))`,
# do if you passed it as `attn_mask` to SDPA?
#
# :::{dropdown} Answer
# SDPA reads a bool mask as True = attend, so it is right. `nn.MultiheadAttention` (like
# `nn.Transformer`) reads True as *ignore*: the same mask masks exactly the opposite, and in the
# lesson query 0 attended to the future keys and not to itself. Convert with `~`
# (`to_ignore_mask`). A float `attn_mask` is *added* to the scores: the 1/0 tensor would add 1 to
# the allowed scores and 0 to the future ones, so it would mask nothing. (The seed itself uses it
# correctly, through `masked_fill(mask == 0, ...)`, which compares it with 0 first.) An additive
# mask holds 0 where a query may attend and a very negative number elsewhere.
# Read §3.4 'Three conventions for one
# mask'.
# :::
#
# **4.** A model runs in float32 but fails in float16 at `scores.masked_fill(~mask, -1e9)` (or at
# the seed's `float("-1e20")`). Why, and why is `float("-inf")` not the fix?
#
# :::{dropdown} Answer
# Float16's range ends at ±65504: neither `-1e9` nor `-1e20` exists there. `masked_fill` refuses
# them; written another way (`torch.where`, an additive mask built in float16) they silently
# become `-inf`. And `-inf` is harmless only while a row keeps at least one real key: for a
# query whose keys are all masked, softmax computes 0 / 0 = NaN, and the next layer spreads the
# NaN to every token. Fill with `torch.finfo(dtype).min`, which `masked_fill` can write in every
# dtype because it replaces the score, and give a row with no key zero weight. (Added as an
# additive mask to float16 scores, that value would overflow to `-inf` too: add in float32, or use
# −1e4.)
# Read §3.5 'Fill values, half precision and NaN'.
# :::
#
# **5.** In the combined padding-and-causal mask, the padded *query* rows of a short sequence
# still attend to its real keys. Is that a bug?
#
# :::{dropdown} Answer
# No. Those rows are the outputs of padded positions, which the loss ignores. The rows to worry
# about are queries that can see no key at all (left padding, or a sequence that is all padding):
# those are the rows that must get zero weight instead of NaN (§3.5). Read §3.3 'Combining
# masks'.
# :::
