# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Chapter 6 — Training pitfalls and decoding
#
# A Transformer that is right layer by layer can still fail to learn: the targets are shifted the
# wrong way, the loss counts padding, the learning rate is too large before the weights have
# settled, one bad batch sends the gradients through the roof, or decoding never stops. None of
# these crash. The loss curve looks plausible, and the model translates nothing.
#
# This chapter trains a small encoder–decoder on a toy translation task that is generated on the
# spot, and shows each pitfall as a **measured, plotted run** next to the right way. The
# [capstone](capstone.ipynb) then trains the seed's 8-head, 2-layer model until it gets nearly every
# held-out date exactly right.
#
# **The seed claims this chapter checks** (seed 004, its training section).
#
# | claim | verdict | section |
# |---|---|---|
# | {seed}`004:output = model(src, trg[:-1, :])`, loss on {seed}`004:trg[1:, :]`, with a batch-first model | wrong slices: those are for sequence-first tensors | 6.2 |
# | (implicit) the loss averages over every position | padding must be left out | 6.3 |
# | {seedtr}`004:with 0.001 the loss kept oscillating; with 0.0001 it began to fall normally`; the paper's warm-up schedule, as a class `AdamWarmup` | right idea; the class counts from 1 and works as a *replacement* for `optimizer.step()`, but it ties the schedule to the update (called next to `optimizer.step()` it steps twice; it cannot go through a `GradScaler`); the same formula in a `LambdaLR` divides by zero unless $n = \text{step} + 1$ | 6.4 |
# | {seedtr}`004:without gradient clipping, the gradients became NaN at the 10th batch`; clip at 1.0 | clipping is right, and must come between `backward` and `step` | 6.5 |
# | dynamic padding with {seed}`004:pad_sequence(src_batch, batch_first=True, padding_idx=PAD_IDX)`, and `pack_padded_sequence` | dynamic padding is right, but `pad_sequence` has no `padding_idx` (the seed's `collate_fn` raises `TypeError`); `pack_padded_sequence` is for RNNs only | 6.6 |
# | greedy decoding with {seed}`004:model.decoder.create_trg_mask(trg)`, start token {seed}`004:torch.ones(1, 1).fill_(SOS_IDX).long().to(device)`; beam search is better | a method the seed never defines (its `create_trg_mask` is a free function, and builds its mask without a device); no source mask; the start token is right, and so are the eval mode, the `no_grad` and the stop at EOS | 6.7, bug hunt |
#
# Everything runs on the CPU, and unchanged on a GPU. The longer experiments (warm-up against
# Post-LN and Pre-LN, §6.4) have their own page, {doc}`schedules`.

# %% [markdown]
# ```{figure} ../figures/model_ch06.svg
# :alt: Diagram of the encoder–decoder Transformer with its output path highlighted: the decoder's input shifted right, the final linear layer and softmax, the cross-entropy loss against the targets tgt[:, 1:] with padding ignored, and greedy or beam decoding.
# :name: fig-model-ch06
# :width: 100%
#
# The whole model; this chapter builds the highlighted part: shifted targets, the output layer, a loss that ignores padding, and decoding.
# ```

# %%
# %matplotlib inline
import inspect
import math
import statistics
import time

import matplotlib.pyplot as plt
from tformer_ref.plotting import COLUMN_INCHES  # the import applies the book style
import torch
import torch.nn.functional as F
from myst_nb import glue
from torch.utils.data import DataLoader

from tformer_ref.data import (
    BOS,
    EOS,
    PAD,
    BucketBatchSampler,
    CharVocab,
    Collate,
    PairDataset,
    make_pairs,
)
from tformer_ref.decoding import beam_search, greedy_decode, sequence_accuracy, strip
from tformer_ref.device import get_device, seed_everything
from tformer_ref.model import Transformer
from tformer_ref.training import (
    noam_lambda,
    noam_scheduler,
    sequence_loss,
    shift_targets,
    train_step,
)

seed_everything(0)
device = get_device()
# tiny tensors: a second thread only waits for the first (and on a busy machine, much
# worse)
torch.set_num_threads(1)

# %% [markdown]
# ## 6.1 The toy task
#
# We need a task that is generated locally (no download), quick to learn on a CPU, and still a real
# *translation*: the output must depend on the whole input, in a different order, with different
# lengths on both sides. Dates do all that. The source is a date in one of seven styles, the target
# always the same spelled-out style:

# %%
vocab = CharVocab.for_dates()
train_pairs, test_pairs = make_pairs(6000, 300, seed=0)
for src, tgt in train_pairs[:6]:
    print(f"{src!r:>22} -> {tgt!r}")
print(f"vocabulary: {len(vocab)} characters including PAD, BOS, EOS, UNK")

# %% [markdown]
# The month number must become a name (`03` → `March`), the day moves to the front and loses its
# leading zero, the year moves to the end. The held-out pairs use dates that never occur in
# training, in any style, so a high score on them means the model learned the rule, not the examples.
#
# Tokens are characters. A source is `text EOS`, a target `BOS text EOS`. Both vary in length:

# %% mystnb={"figure": {"caption": "Lengths of the source and target sequences of the toy task: they vary, which is what makes dynamic padding pay.", "name": "fig-ch06-lengths"}, "image": {"alt": "Histogram of sequence lengths in tokens for sources and targets, spread over about ten lengths."}}
train_set, test_set = PairDataset(train_pairs, vocab), PairDataset(test_pairs, vocab)
src_lengths = train_set.lengths()
tgt_lengths = [len(t) for _, t in train_set]
fig, ax = plt.subplots(figsize=(6, 2.6))
ax.hist([src_lengths, tgt_lengths], bins=range(8, 22), label=["source", "target"])
ax.set_xlabel("tokens")
ax.set_ylabel("examples")
ax.legend()
plt.show()
assert (
    max(src_lengths) - min(src_lengths) >= 8
    and max(tgt_lengths) - min(tgt_lengths) >= 7
)
assert not {t for _, t in train_pairs} & {
    t for _, t in test_pairs
}  # held-out dates are new dates

# %% [markdown]
# A small model keeps the lesson fast: `d_model = 32`, 8 heads, 2 layers (the seed's shape,
# narrower). Within each comparison below, every run starts from the same initial weights and
# sees the same batches.

# %%
BATCH = 32
collate = Collate()
test_batches = list(DataLoader(test_set, batch_size=len(test_set), collate_fn=collate))


def make_model(seed=0, **kw):
    torch.manual_seed(seed)
    config = (
        dict(d_model=32, n_heads=8, n_layers=2, d_ff=64, dropout=0.0, max_len=40) | kw
    )
    return Transformer(len(vocab), len(vocab), **config).to(device)


def loader(pad_to=None, seed=0):
    if pad_to is None:  # bucketed batches, each padded to its own longest sequence
        sampler = BucketBatchSampler(train_set.lengths(), BATCH, seed=seed)
        return DataLoader(train_set, batch_sampler=sampler, collate_fn=collate)
    return DataLoader(
        train_set,
        batch_size=BATCH,
        shuffle=True,
        collate_fn=Collate(pad_to=pad_to),
        generator=torch.Generator().manual_seed(seed),
    )


def next_token_accuracy(model):
    """Held-out, teacher-forced: how often the argmax at position t is the *next*
    character t+1 (padding excluded). This is what decoding relies on: each step
    predicts the next token from the past."""
    src, tgt = test_batches[0]
    tgt_in, labels = shift_targets(tgt.to(device))
    model.eval()
    with torch.no_grad():
        pred = model(src.to(device), tgt_in).argmax(-1)
    keep = labels != PAD
    return (pred == labels)[keep].float().mean().item()


def char_accuracy(model):
    """Greedy decoding of the held-out sources: the fraction of target characters right
    at their position."""
    src, tgt = test_batches[0]
    pred = greedy_decode(model, src.to(device), 20).cpu()
    hits = total = 0
    for p, t in zip(pred, tgt):
        p, t = strip(p), strip(t)
        hits += sum(a == b for a, b in zip(p, t))
        total += len(t)
    return hits / total


# %% [markdown]
# ## 6.2 Teacher forcing and the shift
#
# During training the decoder reads the *right* previous tokens (teacher forcing) and predicts the
# next one at every position at once; the causal mask keeps position $t$ from seeing $t+1$. For a
# target `BOS y1 … yn EOS` the decoder input is everything but the last token, the labels everything
# but the first:

# %%
_, tgt = collate([train_set[0], train_set[1]])
tgt_in, labels = shift_targets(tgt)  # tgt[:, :-1], tgt[:, 1:]
print("tgt    ", tgt[0].tolist())
print("tgt_in ", tgt_in[0].tolist())
print("labels ", labels[0].tolist())
assert (
    torch.equal(tgt_in[:, 1:], labels[:, :-1]) and tgt.shape[1] - 1 == tgt_in.shape[1]
)

# %% [markdown]
# The seed writes {seed}`004:output = model(src, trg[:-1, :])` and takes the loss on
# {seed}`004:trg[1:, :].reshape(-1)`. Those slices cut axis 0. That is time only for
# **sequence-first** tensors `[St, B]`, which is still PyTorch's default layout:
# `nn.MultiheadAttention`, `nn.Transformer` and its layers, and `nn.RNN`/`nn.LSTM`/`nn.GRU` all
# take `batch_first=False` unless told otherwise. Hand such a layer batch-first data and it
# attends *across the batch*: each sentence's output then depends on the other sentences.

# %%
print(
    "nn.MultiheadAttention:",
    inspect.signature(torch.nn.MultiheadAttention).parameters["batch_first"],
)
print(
    "nn.Transformer:       ",
    inspect.signature(torch.nn.Transformer).parameters["batch_first"],
)
torch.manual_seed(0)
x = torch.randn(3, 5, 8)  # meant as [B=3 sentences, S=5 tokens, D=8]
x_edit = x.clone()
x_edit[1] += 1.0  # change sentence 1 only
for batch_first in (False, True):
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=batch_first).eval()
    with torch.no_grad():
        drift = (
            (mha(x_edit, x_edit, x_edit)[0][0] - mha(x, x, x)[0][0]).abs().max().item()
        )
    print(f"batch_first={batch_first}: sentence 0's output moved by {drift:.3g}")
    assert (drift > 1e-3) if not batch_first else (drift < 1e-6)

# %% [markdown]
# With the default, sentence 0's output moves when only sentence 1 changes: the layer read the
# 3 sentences as 3 time steps. The course's model is batch-first throughout, so on its
# `[B, St]` data the seed's slices drop the last and the first *sentence* of the batch:

# %%
src, tgt = next(iter(loader()))
print(
    "batch-first tgt:",
    list(tgt.shape),
    "-> seed's decoder input",
    list(tgt[:-1, :].shape),
)
try:
    make_model()(src.to(device), tgt[:-1, :].to(device))
except (RuntimeError, ValueError) as exc:
    print("the model refuses it:", type(exc).__name__, str(exc).splitlines()[0][:110])
else:
    raise AssertionError("expected a batch-size mismatch")

# %% [markdown]
# Here it crashes, which is the lucky case. Two silent variants train without a complaint: shifting
# the wrong way (input `tgt[:, 1:]`, labels `tgt[:, :-1]`) and not shifting the labels at all. Let us
# train all three for the same 60 steps (far from converged) and measure the training loss and, on
# held-out dates, how often the model predicts the *next* character from the ones before it, which is
# all that decoding asks of it:


# %% mystnb={"figure": {"caption": "Training loss with the right target shift and two wrong ones: the wrong ones reach a lower loss yet predict the next character far worse.", "name": "fig-ch06-shift"}, "image": {"alt": "Three loss curves on a log scale; the two wrong shifts fall below the right one, while the legend shows their next-character accuracy far lower."}}
def run_shift(shift, steps=60):
    model = make_model()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for step, (src, tgt) in zip(range(steps), loader()):
        model.train()
        tgt_in, labels = shift(tgt.to(device))
        loss = sequence_loss(model(src.to(device), tgt_in), labels, PAD)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, next_token_accuracy(model)


shifts = {
    "right: tgt[:, :-1] -> tgt[:, 1:]": shift_targets,
    "wrong way: tgt[:, 1:] -> tgt[:, :-1]": lambda t: (t[:, 1:], t[:, :-1]),
    "labels not shifted": lambda t: (t[:, :-1], t[:, :-1]),
}
shift_runs = {name: run_shift(fn) for name, fn in shifts.items()}
fig, ax = plt.subplots(figsize=(7, 3))
for name, (losses, acc) in shift_runs.items():
    ax.plot(losses, label=f"{name}: next character right {acc:.0%}")
ax.set_xlabel("step")
ax.set_ylabel("training loss")
ax.set_yscale("log")
ax.legend()
plt.show()
right, wrong, same = shift_runs.values()
for name, (losses, acc) in shift_runs.items():
    print(f"{name:>36}: final loss {losses[-1]:.3f}, next character right {acc:.0%}")
final = {name: statistics.mean(run[0][-10:]) for name, run in shift_runs.items()}
right_loss, wrong_loss, same_loss = final.values()
assert (
    max(wrong_loss, same_loss) < 0.8 * right_loss
)  # the broken runs: the *lower* loss
assert right[1] > 2 * max(wrong[1], same[1])  # and decode far worse


# %% tags=["remove-cell"]
# The numbers the text quotes, for the book (this cell is hidden there).
glue("ch06_shift_acc_right", float(right[1]), display=False)
glue("ch06_shift_acc_wrong", float(wrong[1]), display=False)
glue("ch06_shift_acc_same", float(same[1]), display=False)

# %% [markdown]
# The two broken runs reach a **lower** loss than the right one and are useless for decoding: they
# predict the next held-out character {glue:text}`ch06_shift_acc_wrong:.0%` and
# {glue:text}`ch06_shift_acc_same:.0%` of the time, the right one {glue:text}`ch06_shift_acc_right:.0%`.
# Shifted the wrong way, position $t$ reads token $t+1$ and must output token $t$, which it read one
# position earlier; unshifted, it must output the token it is reading. Both tasks are copying, not
# translation, and neither model has learned to predict what comes *next*. A loss that falls too
# fast is a symptom; a held-out measure of what decoding needs is the test.

# %% [markdown]
# ## 6.3 A loss that ignores padding
#
# A batch is padded to its longest sequence. The padded label positions are not tokens, and the loss
# must leave them out of both the sum and the count. `F.cross_entropy(..., ignore_index=PAD)` does;
# `label_smoothing=` $\varepsilon$ (Vaswani et al., §5.4, use $\varepsilon = 0.1$) gives each target
# $1 - \varepsilon$ on its label plus $\varepsilon / V$ on every class, which keeps the model from
# becoming over-confident.

# %%
model = make_model()
src, tgt = collate([train_set[i] for i in range(64)])
tgt_in, labels = shift_targets(tgt.to(device))
with torch.no_grad():
    logits = model(src.to(device), tgt_in)
counted = F.cross_entropy(logits.flatten(0, 1), labels.flatten())
ignored = sequence_loss(logits, labels, PAD)
pad_share = (labels == PAD).float().mean().item()
print(
    f"padding is {pad_share:.0%} of the label positions; "
    f"loss with padding {counted:.3f}, without {ignored:.3f}"
)

# %% [markdown]
# Older code, the Annotated Transformer among it {cite:p}`rush2018annotated`, writes label
# smoothing by hand: build the smoothed target distribution and take the KL divergence to the
# model's. Is the one-argument version the same thing? Its `LabelSmoothing` spreads
# $\varepsilon$ over the $V - 2$ classes that are neither the label nor PAD and gives PAD nothing,
# where PyTorch gives $\varepsilon / V$ to every class, PAD included. The cell below writes that
# loss (as a mean over the real tokens, as the Annotated Transformer's loss computation divides
# by their number) and compares both on the untrained model's logits, then on the same logits
# with the PAD logit lowered by 100:


# %%
def hand_smoothed_kl(logits, labels, pad_id, eps):
    """After the Annotated Transformer's LabelSmoothing: KL(target || model), mean over
    the real tokens. Target: 1 - eps on the label, eps / (V - 2) on the rest but PAD,
    0 on PAD."""
    logp = logits.log_softmax(-1)
    target = torch.full_like(logp, eps / (logp.size(-1) - 2))
    target.scatter_(-1, labels[:, None], 1 - eps)
    target[:, pad_id] = 0.0
    target[labels == pad_id] = 0.0  # padded positions have no target at all
    return F.kl_div(logp, target, reduction="sum") / (labels != pad_id).sum()


def smoothed_target_entropy(eps, V):
    """Entropy of PyTorch's smoothed target: 1 - eps + eps/V on the label, eps/V on the
    rest."""
    q = torch.full((V,), eps / V, dtype=torch.float64)
    q[0] += 1 - eps
    return -(q * q.log()).sum().item()


EPS = 0.1
flat_labels = labels.flatten()
z0 = logits.flatten(0, 1).double()
z_low = z0.clone()
LOWER = 100.0
z_low[:, PAD] -= LOWER  # the same logits, with PAD made far less likely
compare = {}
for name, z in (("untrained model", z0), (f"PAD logit lowered by {LOWER:.0f}", z_low)):
    z = z.clone().requires_grad_()
    ours = F.cross_entropy(z, flat_labels, ignore_index=PAD, label_smoothing=EPS)
    theirs = hand_smoothed_kl(z, flat_labels, PAD, EPS)
    (g_ours,) = torch.autograd.grad(ours, z)
    (g_theirs,) = torch.autograd.grad(theirs, z)
    cosine = F.cosine_similarity(g_ours.flatten(), g_theirs.flatten(), 0).item()
    compare[name] = (ours.item(), theirs.item(), g_ours - g_theirs, cosine)
    print(
        f"{name:>24}: cross_entropy(label_smoothing={EPS}) {ours.item():.4f}, "
        f"hand-written KL {theirs.item():.4f}, difference "
        f"{ours.item() - theirs.item():.4f}; gradient cosine {cosine:.4f}"
    )
(l1, k1, dg1, cos1), (l2, k2, dg2, cos2) = compare.values()
h_target = smoothed_target_entropy(EPS, len(vocab))
print(f"entropy of PyTorch's smoothed target: {h_target:.4f}")
assert l2 > l1 and k2 < k1  # lowering PAD: PyTorch's loss rises, the hand-written falls
# ... and their difference grows by exactly LOWER * eps / V:
assert abs((l2 - k2) - (l1 - k1) - LOWER * EPS / len(vocab)) < 1e-6
assert torch.allclose(dg1, dg2)  # the gradients differ by the same fixed offset on both
assert min(cos1, cos2) > 0.9
# PyTorch's version *is* the KL divergence to its own target plus that target's entropy:
real = flat_labels != PAD
q = torch.full_like(z0, EPS / len(vocab)).scatter_add_(
    -1, flat_labels[:, None], torch.full_like(z0[:, :1], 1 - EPS)
)
kl_own = F.kl_div(z0.log_softmax(-1)[real], q[real], reduction="batchmean")
assert abs(l1 - (kl_own.item() + h_target)) < 1e-6


# %% tags=["remove-cell"]
# The numbers the text quotes, for the book (this cell is hidden there).
glue("ch06_ls_ours_a", l1, display=False)
glue("ch06_ls_ours_b", l2, display=False)
glue("ch06_ls_theirs_a", k1, display=False)
glue("ch06_ls_theirs_b", k2, display=False)
glue("ch06_ls_cos", min(cos1, cos2), display=False)
glue("ch06_ls_entropy", float(h_target), display=False)

# %% [markdown]
# As training signals they are close, not identical; as numbers they are not close at all. PyTorch's
# `label_smoothing` is exactly the KL divergence to *its* target plus that target's entropy
# ({glue:text}`ch06_ls_entropy:.4f` nats here, a constant; the cell checks it), so as a training
# signal it is a smoothed KL loss with the ε/V target. The hand-written loss uses another
# target, and the two gradients differ by a fixed offset at each real position, the difference
# of the two targets, whatever the logits; they point in nearly the same direction (cosine at
# least {glue:text}`ch06_ls_cos:.6f`). The two targets differ everywhere, a little: the label
# gets $1 - \varepsilon$ instead of $1 - \varepsilon + \varepsilon / V$, the other classes
# $\varepsilon / (V - 2)$ instead of $\varepsilon / V$, and PAD nothing instead of
# $\varepsilon / V$. PAD is the difference that matters. Lowering the PAD logit by 100 raises
# PyTorch's loss (from {glue:text}`ch06_ls_ours_a:.4f` to
# {glue:text}`ch06_ls_ours_b:.4f`), which wants ε/V on PAD, and lowers the hand-written one (from
# {glue:text}`ch06_ls_theirs_a:.4f` to {glue:text}`ch06_ls_theirs_b:.4f`), which drives the PAD
# logit down without limit. Their difference grows by exactly $100 \cdot \varepsilon / V$:
# PyTorch charges $\varepsilon / V$ for each nat by which $\log p(\text{PAD})$ falls (the cell
# checks it). So the two losses do not differ by a constant, and their values are not comparable
# across code bases.
#
# What does counting padding do to training? Pad every batch to a fixed 32 tokens, as a tokenizer's
# `padding="max_length"` would, and train once with padding counted and once without, for the same
# steps. The counted run also records its loss on the real tokens alone, the number the other run
# reports:


# %% mystnb={"figure": {"caption": "Reported training loss when padding is counted and when it is ignored, and the padding-counted run's loss on its real tokens alone.", "name": "fig-ch06-padding-loss"}, "image": {"alt": "Three loss curves on a log scale; the padding-counted reported loss sits far below the same run's loss on real tokens and below the padding-ignored run's loss."}}
def run_padding(count_padding, steps=50):
    model = make_model()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    reported, real_only, pad_frac = [], [], []
    for step, (src, tgt) in zip(range(steps), loader(pad_to=(32, 32))):
        model.train()
        tgt_in, labels = shift_targets(tgt.to(device))
        logits = model(src.to(device), tgt_in)
        real_loss = sequence_loss(logits, labels, PAD)
        counted = F.cross_entropy(logits.flatten(0, 1), labels.flatten())
        loss = counted if count_padding else real_loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        reported.append(loss.item())
        real_only.append(real_loss.item())
        pad_frac.append((labels == PAD).float().mean().item())
    return reported, real_only, char_accuracy(model), statistics.mean(pad_frac)


pad_runs = {"padding counted": run_padding(True), "padding ignored": run_padding(False)}
counted_rep, counted_real, counted_acc, label_pad = pad_runs["padding counted"]
ignored_rep, _, ignored_acc, _ = pad_runs["padding ignored"]
fig, ax = plt.subplots(figsize=(7, 3))
ax.plot(counted_rep, label="padding counted: reported loss")
ax.plot(counted_real, label="padding counted: loss on the real tokens", ls="--")
ax.plot(ignored_rep, label="padding ignored: reported loss")
ax.set_xlabel("step")
ax.set_ylabel("training loss")
ax.set_yscale("log")
ax.legend()
plt.show()
tail = {
    "counted_rep": statistics.mean(counted_rep[-10:]),
    "counted_real": statistics.mean(counted_real[-10:]),
    "ignored": statistics.mean(ignored_rep[-10:]),
}
print(
    f"last 10 steps: padding counted reports {tail['counted_rep']:.3f}, "
    "its real tokens "
    f"{tail['counted_real']:.3f}; padding ignored {tail['ignored']:.3f}"
)
print(
    f"characters right on held-out dates: padding counted {counted_acc:.1%}, "
    f"ignored {ignored_acc:.1%}"
)
assert tail["counted_rep"] < 0.75 * tail["counted_real"]  # the counted loss reads lower
assert (
    tail["counted_rep"] < 0.9 * tail["ignored"]
)  # and than the other run's (0.7 here)


# %% tags=["remove-cell"]
# The numbers the text quotes, for the book (this cell is hidden there).
glue("ch06_pad_label_share", label_pad, display=False)
glue("ch06_pad_rep", tail["counted_rep"], display=False)
glue("ch06_pad_real", tail["counted_real"], display=False)
glue("ch06_pad_ignored", tail["ignored"], display=False)
glue("ch06_pad_acc_counted", float(counted_acc), display=False)
glue("ch06_pad_acc_ignored", float(ignored_acc), display=False)
glue(
    "ch06_pad_acc_word", "fewer" if counted_acc < ignored_acc else "more", display=False
)
glue(
    "ch06_pad_real_word",
    "above" if tail["counted_real"] > tail["ignored"] else "below",
    display=False,
)

# %% [markdown]
# The counted loss is an average in which {glue:text}`ch06_pad_label_share:.0%` of the label
# positions are PAD after EOS, and those are trivially predictable: the model soon gives them almost all its probability, and the
# average falls. Over the last steps the counted run *reports* {glue:text}`ch06_pad_rep:.3f`,
# while its loss on the real tokens is {glue:text}`ch06_pad_real:.3f` (the run that ignores
# padding: {glue:text}`ch06_pad_ignored:.3f`). With padding counted, the loss rewards predicting
# PAD, and the number you watch no longer says how well the model translates.
#
# Counting padding also gives the real tokens a smaller share of the gradient. Adam divides each
# update by a running estimate of the gradient's size, which undoes a constant scale, but not
# the PAD positions' own pull on the weights while the model is learning to predict PAD. In
# this short run the padding-counted model's loss on the real tokens stayed
# {glue:text}`ch06_pad_real_word:s` that of the run that ignores padding, and it got
# {glue:text}`ch06_pad_acc_word:s` held-out characters right
# ({glue:text}`ch06_pad_acc_counted:.1%` against {glue:text}`ch06_pad_acc_ignored:.1%`). Both
# models are far from trained, and whether the gap lasts is not measured here. The harm that does
# not depend on the run is the misleading number.

# %% [markdown]
# ## 6.4 Learning rate and warm-up
#
# Every model in this chapter trains with Adam {cite:p}`kingma2015adam`, and what a learning
# rate does depends on Adam's update rule. For each parameter $\theta$ (each coordinate on its
# own), with gradient $g_t$ at update $t = 1, 2, \dots$ and $m_0 = v_0 = 0$:
#
# $$m_t = \beta_1 m_{t-1} + (1 - \beta_1)\, g_t, \qquad
# v_t = \beta_2 v_{t-1} + (1 - \beta_2)\, g_t^2,$$
#
# $$\hat m_t = \frac{m_t}{1 - \beta_1^t}, \qquad \hat v_t = \frac{v_t}{1 - \beta_2^t}, \qquad
# \theta_t = \theta_{t-1} - \text{lr} \cdot \frac{\hat m_t}{\sqrt{\hat v_t} + \epsilon}.$$
#
# - $m$, the **first moment**, is a running mean of the gradient: it sets the step's direction.
# - $v$, the **second moment**, is a running mean of the gradient's square: $\sqrt v$ is the
#   gradient's typical size, and dividing by it makes each coordinate's step about
#   $\text{lr}$ long, whatever the gradient's scale.
# - The division by $1 - \beta^t$, the **bias correction**, undoes the start at zero: without
#   it the first steps would be far too short.
#
# The paper, and this chapter, use $\beta_1 = 0.9$, $\beta_2 = 0.98$, $\epsilon = 10^{-9}$.
# AdamW {cite:p}`loshchilov2019decoupled` adds *decoupled* weight decay: each update also
# subtracts $\text{lr} \cdot \lambda \cdot \theta_{t-1}$, outside the ratio (ch08 uses it).
# The cell writes the rule out and compares it with `torch.optim.Adam`, then feeds the same
# gradients multiplied by 1000:

# %%
b1, b2, eps, lr = 0.9, 0.98, 1e-9, 1e-3
gen = torch.Generator().manual_seed(0)
grads = [torch.randn(5, generator=gen) for _ in range(4)]


def adam_by_hand(grads, scale=1.0):
    theta, m, v = torch.zeros(5), torch.zeros(5), torch.zeros(5)
    for t, g in enumerate(grads, start=1):
        m = b1 * m + (1 - b1) * scale * g
        v = b2 * v + (1 - b2) * (scale * g) ** 2
        m_hat, v_hat = m / (1 - b1**t), v / (1 - b2**t)
        theta = theta - lr * m_hat / (v_hat.sqrt() + eps)
    return theta


w = torch.nn.Parameter(torch.zeros(5))
adam = torch.optim.Adam([w], lr=lr, betas=(b1, b2), eps=eps)
for g in grads:
    w.grad = g.clone()
    adam.step()
by_hand, scaled = adam_by_hand(grads), adam_by_hand(grads, 1000.0)
print("by hand, in units of lr:   ", [round(x, 3) for x in (by_hand / lr).tolist()])
print("torch.optim.Adam:          ", [round(x, 3) for x in (w.detach() / lr).tolist()])
print("gradients x 1000, by hand: ", [round(x, 3) for x in (scaled / lr).tolist()])
assert torch.allclose(by_hand, w.detach(), rtol=1e-5, atol=1e-9)
# the gradient's scale cancels in m / sqrt(v) (up to eps)
assert torch.allclose(by_hand, scaled, rtol=1e-5, atol=1e-9)

# %% [markdown]
# Multiplying every gradient by 1000 changes nothing: the scale cancels in
# $\hat m / \sqrt{\hat v}$. So with Adam the learning rate, not the gradient's size, sets how far the weights move
# at each step; what a large gradient can still do is dominate $m$ and $v$ for a while (§6.5).
#
# The seed reports {seedtr}`004:at first I used a learning rate of 0.001, and during training the loss kept oscillating and would not come down; after I changed it to 0.0001 the loss began to fall normally`,
# and turns to the schedule of Vaswani et al. (§5.3): with updates counted $n = 1, 2, \dots$
#
# $$\text{lr}(n) = d_\text{model}^{-0.5} \cdot \min(n^{-0.5},\ n \cdot \text{warmup}^{-1.5}),$$
#
# a linear warm-up to a peak at $n = \text{warmup}$, then a decay like $1/\sqrt n$. For
# $d_\text{model} = 512$ and 4000 warm-up steps the peak is about $7 \cdot 10^{-4}$. The seed's
# version of it:
#
# ```{seed-quote} 004
# :code: python
# class AdamWarmup:
#     def __init__(self, model_size, warmup_steps, optimizer):
#         self.model_size = model_size
#         self.warmup_steps = warmup_steps
#         self.optimizer = optimizer
#         self.current_step = 0
#         self.lr = 0
#
#     def step(self):
#         self.current_step += 1
#         self.lr = self.model_size ** (-0.5) * min(
#             self.current_step ** (-0.5),
#             self.current_step * self.warmup_steps ** (-1.5)
#         )
#
#         for param_group in self.optimizer.param_groups:
#             param_group['lr'] = self.lr
#
#         self.optimizer.step()
# ```
#
# Its formula is right, and so is its counting: `step()` increments `current_step` *before* the
# formula, so the first call uses $n = 1$ and nothing divides by zero. The class is a wrapper that
# *replaces* `optimizer.step()` (the seed does not show the call): the loop calls `warmup.step()`
# instead, as with the Annotated Transformer's `NoamOpt` {cite:p}`rush2018annotated`. What is wrong with it is the coupling of the
# schedule with the update:
#
# - used the way PyTorch's schedulers are used, next to the loop's own `optimizer.step()`, it
#   applies every batch twice;
# - under mixed precision the update must go through `scaler.step(optimizer)`, which unscales the
#   gradients and skips the steps whose gradients overflowed (ch07); a wrapper that calls
#   `optimizer.step()` itself cannot do that;
# - it has no `state_dict`, so a resumed run starts its warm-up again.
#
# The cell runs the seed's class, token for token, on one parameter with a constant gradient of 1 and
# plain SGD, where an update moves the parameter by exactly the learning rate:


# %%
# The seed's class, token for token (line breaks laid out for the book's 88 columns):
class AdamWarmup:
    def __init__(self, model_size, warmup_steps, optimizer):
        self.model_size = model_size
        self.warmup_steps = warmup_steps
        self.optimizer = optimizer
        self.current_step = 0
        self.lr = 0

    def step(self):
        self.current_step += 1
        self.lr = self.model_size ** (-0.5) * min(
            self.current_step ** (-0.5), self.current_step * self.warmup_steps ** (-1.5)
        )

        for param_group in self.optimizer.param_groups:
            param_group["lr"] = self.lr

        self.optimizer.step()


def seed_updates(alongside):
    """How far one batch moves the parameter, in units of lr(1), with the seed's class
    in place of optimizer.step(), or next to it like a PyTorch scheduler."""
    w = torch.nn.Parameter(torch.zeros(1))
    w.grad = torch.ones(1)
    opt = torch.optim.SGD([w], lr=noam_lambda(0, 512, 4000))  # the rate of update 1
    warmup = AdamWarmup(512, 4000, opt)
    if alongside:
        opt.step()  # the training loop's own update ...
    warmup.step()  # ... then the "scheduler", which steps the optimizer once more
    return -w.item() / noam_lambda(0, 512, 4000)


print(f"seed's class in place of optimizer.step(): {seed_updates(False):.0f} update")
print(f"seed's class next to optimizer.step():     {seed_updates(True):.0f} updates")
assert round(seed_updates(False)) == 1 and round(seed_updates(True)) == 2

# %% [markdown]
# PyTorch's way keeps the two apart. A scheduler only *sets* the rate; the loop calls
# `optimizer.step()` (or `scaler.step(optimizer)`), then `scheduler.step()`. `LambdaLR`
# multiplies the optimizer's lr (set it to 1.0) by `lr_lambda(step)`, with `step` counted from 0,
# and it calls `lr_lambda(0)` as soon as it is built. Moved into a `LambdaLR` as it stands, with
# `step` for $n$, the seed's formula divides by zero there; use $n = \text{step} + 1$:

# %%
rates = [noam_lambda(s, 512, 4000) for s in range(20000)]
print(
    f"step 0: {rates[0]:.2e}, peak {max(rates):.2e} at step "
    f"{rates.index(max(rates))} (update n = 4000)"
)
assert (
    rates[0] > 0 and rates.index(max(rates)) == 3999 and abs(max(rates) - 7e-4) < 2e-5
)
opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
try:  # the seed's formula with LambdaLR's step in place of the seed's current_step
    torch.optim.lr_scheduler.LambdaLR(
        opt, lambda step: 512**-0.5 * min(step**-0.5, step * 4000**-1.5)
    )
except ZeroDivisionError as exc:
    print("the seed's formula in a LambdaLR, as it is built:", type(exc).__name__, exc)
else:
    raise AssertionError("LambdaLR calls lr_lambda(0) when it is built")
sched = noam_scheduler(opt, 512, 4000)  # tformer_ref: n = step + 1
print(f"noam_scheduler: lr for the first update {opt.param_groups[0]['lr']:.2e}")

# %% [markdown]
# Does warm-up matter? The seed's symptom, oscillation at 1e-3 on a model it does not describe,
# is not reproduced here. What can be measured is warm-up's effect on a Post-LN Transformer (the
# paper's and the seed's layout) at a high rate, against the same rate from the first step and
# against Pre-LN (ch04). The paper's schedule also decays after its peak, which would confound
# the comparison, so the experiment warms up and then holds the rate. It takes longer than this
# page's time budget and has its own page: {doc}`schedules`. There, the Post-LN run without
# warm-up ends with a far higher training loss than the same model warmed up to the same rate,
# and than Pre-LN without warm-up.

# %% [markdown]
# ## 6.5 Exploding gradients and clipping
#
# One training step, in an order that matters:
#
# 1. `optimizer.zero_grad()` — otherwise gradients add up across batches;
# 2. forward, loss, `loss.backward()` — only now do gradients exist;
# 3. `clip_grad_norm_(model.parameters(), max_norm)` — rescales *all* gradients together when their
#    total norm exceeds `max_norm`, and returns the norm *before* clipping (log it);
# 4. `optimizer.step()`, then `scheduler.step()`.
#
# Clipping before `backward` clips nothing (there are no gradients yet, or last batch's); clipping
# after `step` is too late. `tformer_ref.training.train_step` does exactly the list above.
#
# The seed reports {seedtr}`004:the first time I trained, without gradient clipping, the gradients became NaN by the 10th batch`.
# It gives no model, data or rate for that run; a higher rate, a larger model or a different
# initialisation are all possible causes. Nothing in this book reproduces it: at the high rate
# of {doc}`schedules` this small model fails without warm-up too, but by getting stuck at a high
# loss, not by gradients that grow until they overflow. What real runs do meet is the occasional **bad batch**
# whose loss, and so gradient, is far larger than usual (here: one batch at step 50 whose loss is
# multiplied by 1000, as an unnormalised sum over a long batch would be). The cell trains the
# same model with and without clipping at 1.0, and records, besides the loss and the gradient
# norm, the size of each Adam update (its root mean square per parameter, in units of the
# learning rate) and its cosine with the update made at the bad batch:

# %% mystnb={"figure": {"caption": "One bad batch at step 50, without clipping and clipped at 1.0: the gradient norm (top), the size of Adam's update in units of the learning rate (middle) and the loss (bottom).", "name": "fig-ch06-clipping"}, "image": {"alt": "Top: gradient norms on a log scale with a spike at step 50. Middle: update sizes; the unclipped run's jumps at step 50, then falls below the clipped run's. Bottom: loss curves; after step 50 the unclipped run's loss jumps and stays higher than the clipped run's."}}
SPIKE_AT = 50


def run_clip(max_norm, steps=100, spike_at=SPIKE_AT, spike=1000.0, lr=3e-3):
    model = make_model()
    params = list(model.parameters())
    opt = torch.optim.Adam(params, lr=lr, betas=(0.9, 0.98), eps=1e-9)
    norms, losses, sizes, cosines, spike_update = [], [], [], [], None
    for step, (src, tgt) in zip(range(steps), loader()):
        model.train()
        opt.zero_grad()
        tgt_in, labels = shift_targets(tgt.to(device))
        loss = sequence_loss(model(src.to(device), tgt_in), labels, PAD)
        (loss * (spike if step == spike_at else 1.0)).backward()
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)  # after backward
        before = torch.cat([p.detach().flatten() for p in params])
        opt.step()
        update = torch.cat([p.detach().flatten() for p in params]) - before
        spike_update = update if step == spike_at else spike_update
        sizes.append((update.pow(2).mean().sqrt() / lr).item())
        cosines.append(
            F.cosine_similarity(update, spike_update, 0).item()
            if spike_update is not None
            else float("nan")
        )
        norms.append(norm.item())
        losses.append(loss.item())
    return dict(
        norm=norms,
        loss=losses,
        size=sizes,
        cos=cosines,
        acc=next_token_accuracy(model),
        model=model,
    )


clip_runs = {"no clipping": run_clip(float("inf")), "clipped at 1.0": run_clip(1.0)}
fig, axes = plt.subplots(3, 1, figsize=(COLUMN_INCHES, 8.0), layout="constrained")
for name, r in clip_runs.items():
    axes[0].plot(r["norm"], label=name, lw=0.8)
    axes[1].plot(r["size"], label=name, lw=0.8)
    label = f"{name}: next character right {r['acc']:.0%}"
    axes[2].plot(r["loss"], label=label, lw=0.8)
axes[0].axhline(1.0, color="k", ls=":", lw=0.8)
axes[0].set(xlabel="step", ylabel="gradient norm\n(before clipping)", yscale="log")
axes[1].set(xlabel="step", ylabel="update RMS / lr", yscale="log")
for ax in axes[1:]:
    ax.axvline(SPIKE_AT, color="k", ls=":", lw=0.8)
axes[2].set(xlabel="step", ylabel="training loss", yscale="log")
# One legend above the panels, where it covers no curve.
fig.legend(*axes[2].get_legend_handles_labels(), loc="outside upper center")
plt.show()
free, clip = clip_runs.values()
S = SPIKE_AT
typical = statistics.median(free["norm"][:S])
print(
    f"gradient norm at the bad batch: {free['norm'][S]:.0f} (before it: median "
    f"{typical:.2f}, largest {max(free['norm'][:S]):.2f}); loss 20 steps later: "
    f"{free['loss'][S + 20]:.3f} "
    f"unclipped, {clip['loss'][S + 20]:.3f} clipped"
)
print("unclipped run, after the bad batch:")
for k in (0, 1, 5, 10, 20, 30, 45):
    print(
        f"  step {S + k:3d}: update RMS {free['size'][S + k]:.3f} lr, cosine with the "
        f"bad batch's update {free['cos'][S + k]:+.2f}   "
        f"(clipped run: {clip['size'][S + k]:.3f} lr)"
    )
before_size = statistics.median(free["size"][S - 10 : S])
late = slice(S + 30, len(free["size"]))
assert free["norm"][S] > 100 * typical
# the jump: a large update, then several in the bad batch's direction
assert free["size"][S] > 1.5 * before_size and min(free["cos"][S + 1 : S + 6]) > 0.7
# the slow part: smaller updates long after
assert statistics.median(free["size"][late]) < 0.75 * statistics.median(
    clip["size"][late]
)
assert statistics.mean(clip["loss"][-20:]) < statistics.mean(free["loss"][-20:])
assert clip["acc"] > free["acc"]
# clipped or not, ordinary steps are the same size: Adam undoes the gradient's scale
clipped_share = sum(n > 1.0 for n in clip["norm"][:S]) / S
assert 0.8 < statistics.median(clip["size"][S - 10 : S]) / before_size < 1.25
trained_model = clip["model"]  # decoded in §6.7


# %% tags=["remove-cell"]
# The numbers the text quotes, for the book (this cell is hidden there).
glue("ch06_clip_spike", free["norm"][S], display=False)
glue("ch06_clip_typical", typical, display=False)
glue("ch06_clip_largest", max(free["norm"][:S]), display=False)
glue("ch06_clip_size_before", before_size, display=False)
glue("ch06_clip_size_spike", free["size"][S], display=False)
glue("ch06_clip_cos5", free["cos"][S + 5], display=False)
glue("ch06_clip_cos10", free["cos"][S + 10], display=False)
glue("ch06_clip_cos20", free["cos"][S + 20], display=False)
glue("ch06_clip_late_free", statistics.median(free["size"][late]), display=False)
glue("ch06_clip_late_clip", statistics.median(clip["size"][late]), display=False)
glue("ch06_clip_loss_free", free["loss"][S + 20], display=False)
glue("ch06_clip_loss_clip", clip["loss"][S + 20], display=False)
glue("ch06_clip_share", clipped_share, display=False)
glue(
    "ch06_clip_size_before_clip",
    statistics.median(clip["size"][S - 10 : S]),
    display=False,
)

# %% [markdown]
# Before the bad batch the gradient norms had a median of {glue:text}`ch06_clip_typical:.2f` and
# never exceeded {glue:text}`ch06_clip_largest:.2f`; the bad batch's was
# {glue:text}`ch06_clip_spike:.0f`. Twenty steps later the unclipped run's loss is
# {glue:text}`ch06_clip_loss_free:.3f`, the clipped run's {glue:text}`ch06_clip_loss_clip:.3f`.
# Adam's two running averages explain the two phases:
#
# - **The jump: the first moment.** With $\beta_1 = 0.9$, the running mean $m$ takes a tenth of
#   the bad gradient, $0.1 \cdot 1000\,g$, which swamps everything else in it; the second moment
#   $v$ takes $0.02 \cdot (1000\,g)^2$. Their ratio $m / \sqrt v$ is then about the same in
#   *every* coordinate, $0.1 / \sqrt{0.02} \approx 0.71$, with the sign of the bad batch's
#   gradient. Adam's bias correction multiplies it, at this 51st update, by
#   $\sqrt{1 - 0.98^{51}} / (1 - 0.9^{51}) \approx 0.81$, to about 0.57: the update at
#   step 50 has a root mean square of {glue:text}`ch06_clip_size_spike:.2f` learning rates, against
#   {glue:text}`ch06_clip_size_before:.2f` just before. And $m$ forgets slowly (by 0.9 a step), so
#   the following updates keep pointing the same way: their cosine with the bad batch's update is
#   {glue:text}`ch06_clip_cos5:.2f` five steps later, {glue:text}`ch06_clip_cos10:.2f` ten steps
#   later and {glue:text}`ch06_clip_cos20:.2f` twenty steps later. For some ten to twenty steps,
#   one batch chooses the direction.
# - **The slow recovery: the second moment.** $v$ forgets more slowly (by 0.98 a step), and while
#   it holds the bad gradient's square, the ordinary gradients that follow are divided by a large
#   $\sqrt v$. From step 80 on, the unclipped run's updates have a median size of
#   {glue:text}`ch06_clip_late_free:.3f` learning rates, the clipped run's
#   {glue:text}`ch06_clip_late_clip:.3f`: the unclipped model learns with smaller steps, from a
#   worse place.
#
# With clipping at 1.0 the bad batch's gradient is scaled down to an ordinary size before Adam sees
# it, and counts as an ordinary batch.
#
# Clipping caps the *gradient's* norm while keeping its direction. With SGD, whose step is the
# gradient times the rate, that caps the step. With Adam it does not: the step is about
# $\text{lr}$ per coordinate whatever the gradient's scale (§6.4). What clipping does for Adam is
# keep one batch from dominating $m$ and $v$. At 1.0 this run clipped
# {glue:text}`ch06_clip_share:.0%` of its ordinary steps before step 50 too, and harmlessly: its
# updates just before the bad batch had a median size of
# {glue:text}`ch06_clip_size_before_clip:.2f` learning rates, the unclipped run's
# {glue:text}`ch06_clip_size_before:.2f`. Log the norm `clip_grad_norm_` returns, and spikes
# show up at once. Clipping treats the symptom; the seed's
# other remedies, a smaller rate and a better initialisation (and warm-up, §6.4), act on the
# cause of gradients that are large all the time.

# %% [markdown]
# ## 6.6 Dynamic padding and bucketing
#
# Attention costs grow with the padded length of the batch, not with the real lengths. Two remedies:
#
# - **dynamic padding** — `collate_fn` pads each batch to *its own* longest sequence, instead of a
#   fixed maximum;
# - **length bucketing** — a batch sampler groups sequences of similar length, so even that padding
#   is small (`BucketBatchSampler`: shuffle, sort within pools of 50 batches, shuffle the batches).
#
# The seed does the first, and also recommends `pack_padded_sequence`:
#
# ```{seed-quote} 004
# :code: python
# from torch.nn.utils.rnn import pad_sequence, pack_padded_sequence
#
# # 动态 padding 到 batch 内最大长度
# def collate_fn(batch):
#     src_batch = [item['src'] for item in batch]
#     trg_batch = [item['trg'] for item in batch]
#
#     src_batch = pad_sequence(src_batch, batch_first=True, padding_idx=PAD_IDX)
#     trg_batch = pad_sequence(trg_batch, batch_first=True, padding_idx=PAD_IDX)
#
#     return {
#         'src': src_batch,
#         'trg': trg_batch
#     }
#
# # DataLoader 里用 collate_fn
# train_loader = DataLoader(train_dataset, batch_size=32, collate_fn=collate_fn)
# ```
#
# The idea is right, the code does not run: `pad_sequence` has no `padding_idx` argument (its
# padding value is `padding_value`, default 0), so the first batch raises a `TypeError`. The
# cell runs the seed's function, token for token, on two of our examples:

# %%
from torch.nn.utils.rnn import pad_sequence

PAD_IDX = PAD


# The seed's collate_fn, token for token (line breaks laid out for 88 columns):
def collate_fn(batch):
    src_batch = [item["src"] for item in batch]
    trg_batch = [item["trg"] for item in batch]

    src_batch = pad_sequence(src_batch, batch_first=True, padding_idx=PAD_IDX)
    trg_batch = pad_sequence(trg_batch, batch_first=True, padding_idx=PAD_IDX)

    return {"src": src_batch, "trg": trg_batch}


print("pad_sequence" + str(inspect.signature(pad_sequence)))
two = [{"src": s, "trg": t} for s, t in (train_set[0], train_set[1])]
try:
    collate_fn(two)
except TypeError as exc:
    print("the seed's collate_fn:", type(exc).__name__ + ":", exc)
else:
    raise AssertionError("pad_sequence has no padding_idx")
srcs = [item["src"] for item in two]
fixed_two = pad_sequence(srcs, batch_first=True, padding_value=PAD_IDX)
print("with padding_value=PAD_IDX:", list(fixed_two.shape))

# %% [markdown]
# With `padding_value=PAD_IDX` it works. Its `DataLoader` has no `shuffle=True`
# ({seed}`004:train_loader = DataLoader(train_dataset, batch_size=32, collate_fn=collate_fn)`), so
# every epoch sees the same batches in the same order; shuffle the training set.
#
# `pack_padded_sequence` is an **RNN** utility: it returns a `PackedSequence` that only
# `nn.RNN`/`nn.LSTM`/`nn.GRU` understand. An attention layer takes the padded tensor plus a
# padding mask:

# %%
src, _ = next(iter(loader()))
packed = torch.nn.utils.rnn.pack_padded_sequence(
    src, (src != PAD).sum(1), batch_first=True, enforce_sorted=False
)
try:
    make_model().encode(packed)
except (TypeError, AttributeError) as exc:
    print(type(packed).__name__, "->", type(exc).__name__ + ":", str(exc)[:100])
else:
    raise AssertionError("a PackedSequence should be refused")

# %% [markdown]
# How much does dynamic padding save? First the padding itself, over one whole epoch of the
# 6000 training pairs: every batch padded to the model's 32 positions, dynamic padding of
# shuffled batches, and dynamic padding of bucketed batches. Then the time of the same
# {glue:text}`ch06_bucket_batches:d` bucketed batches (the same examples, in the same groups),
# padded to 32 and padded dynamically, with the seed's 8-head 2-layer model at `d_model = 64`;
# the two are interleaved and each timed twice, keeping the faster run. On a CPU the clock is
# the process's CPU time, so that other programs on the machine do not count:


# %% mystnb={"figure": {"caption": "Time for the same training batches padded to 32 positions and with dynamic padding (bucketed batches).", "name": "fig-ch06-dynamic-padding"}, "image": {"alt": "Horizontal bar chart of the time for the same batches padded to 32 positions and padded dynamically."}}
def padding_share(batches):
    """Fraction of the source and target positions that are padding."""
    real = total = 0
    for src, tgt in batches:
        real += (src != PAD).sum().item() + (tgt != PAD).sum().item()
        total += src.numel() + tgt.numel()
    return 1 - real / total


# On a CPU, the process's own CPU time: other programs on a busy machine do not count.
# On a GPU, wall-clock time, waiting for the queued kernels to finish.
clock = time.process_time if device.type == "cpu" else time.perf_counter


def train_seconds(batches):
    model = make_model(d_model=64, d_ff=256)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    start = clock()
    for src, tgt in batches:
        train_step(model, src.to(device), tgt.to(device), opt)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return clock() - start


shares = {
    "pad to 32": padding_share(loader(pad_to=(32, 32))),
    "dynamic, shuffled batches": padding_share(
        DataLoader(
            train_set,
            batch_size=BATCH,
            shuffle=True,
            collate_fn=collate,
            generator=torch.Generator().manual_seed(0),
        )
    ),
    "dynamic + bucketing": padding_share(loader()),
}
for name, share in shares.items():
    print(f"{name:>26}: padding is {share:.0%} of the positions in one epoch")
N_TIMED = 15
groups = list(BucketBatchSampler(train_set.lengths(), BATCH, seed=0))[:N_TIMED]
fixed32 = Collate(pad_to=(32, 32))
same = {
    "pad to 32": [fixed32([train_set[i] for i in g]) for g in groups],
    "dynamic + bucketing": [collate([train_set[i] for i in g]) for g in groups],
}
times = {k: [] for k in same}
for _ in range(2):
    for k, batches in same.items():
        times[k].append(train_seconds(batches))
best = {k: min(v) for k, v in times.items()}
fig, ax = plt.subplots(figsize=(6, 2.2))
ax.barh(list(best), list(best.values()))
ax.set_xlabel(f"seconds for the same {N_TIMED} batches")
plt.show()
speedup = best["pad to 32"] / best["dynamic + bucketing"]
for k in best:
    print(
        f"{k:>20}: {best[k]:.2f} s, padding {padding_share(same[k]):.0%} of these "
        "batches' positions"
    )
print(f"time ratio, padded to 32 over dynamic: {speedup:.1f} on {device.type}")
assert (
    shares["dynamic + bucketing"] < shares["pad to 32"] / 3
)  # the data: deterministic
assert shares["dynamic + bucketing"] < shares["dynamic, shuffled batches"]
# A CPU's time follows the positions; a small model on a GPU is bound by kernel
# launches, and may show no speed-up at all.
if device.type == "cpu":  # measured 1.4 to 2.0 here, on a busy machine
    assert speedup > 1.1


# %% tags=["remove-cell"]
# The numbers the text quotes, for the book (this cell is hidden there).
glue("ch06_bucket_batches", N_TIMED, display=False)
glue("ch06_pad_fixed", shares["pad to 32"], display=False)
glue("ch06_pad_shuffled", shares["dynamic, shuffled batches"], display=False)
glue("ch06_pad_bucketed", shares["dynamic + bucketing"], display=False)
glue("ch06_bucket_speedup", float(speedup), display=False)
glue("ch06_bucket_device", device.type, display=False)

# %% [markdown]
# Over an epoch, padding to 32 makes {glue:text}`ch06_pad_fixed:.0%` of the positions padding;
# dynamic padding of shuffled batches {glue:text}`ch06_pad_shuffled:.0%`; bucketing by source
# length {glue:text}`ch06_pad_bucketed:.0%`. On this run ({glue:text}`ch06_bucket_device:s`) the same batches took
# {glue:text}`ch06_bucket_speedup:.1f` times as long padded to 32 as padded dynamically. That
# ratio is the machine's, not the data's: a CPU's time grows with the number of positions it
# computes (and attention's with their square), while a GPU running a model this small spends
# most of its time launching kernels, whatever their size, and may show little difference.
# Buckets also change what a batch holds: similar lengths together. On this task a date's style
# fixes most of its length, so a bucketed batch holds only a few of the seven styles; the
# {doc}`capstone <capstone>` counts them, and trains on shuffled batches for that reason. This
# lesson's short runs do not measure whether it hurts. Sorting the whole dataset would go
# further still: every batch would then be of one length only.

# %% [markdown]
# ## 6.7 Greedy and beam decoding
#
# At inference there are no target tokens to feed. The decoder starts from `BOS` and appends one
# token at a time. A correct loop:
#
# - puts the model in **eval mode** (dropout off) and turns gradients off (`torch.no_grad()`);
# - **encodes the source once** and reuses the memory at every step;
# - decodes the whole prefix with the **causal mask**, as in training (without it, in a 2-layer
#   decoder, earlier positions see later ones in layer 1, and the last position's output is not
#   what the model learned to produce);
# - **stops** when every sequence has produced `EOS`, padding the finished ones.
#
# The seed's loop has this shape: it calls `model.eval()` and `torch.no_grad()`, encodes once and
# stops at EOS. But it calls {seed}`004:trg_mask = model.decoder.create_trg_mask(trg)`, a method
# the seed never defines (its `Decoder` class is not shown): the seed defines `create_trg_mask`
# as a free function, which builds its mask on the CPU whatever the device; and it encodes with
# {seed}`004:enc_src = model.encoder(src, None)`, passing no source mask to the encoder or the
# decoder. For one unpadded sentence that changes nothing; a source that ends with padding (a
# row taken from a padded batch) then has its padding attended to. Fixing them is the
# graded {doc}`bug hunt <../ch06_bughunt/exercise>`. Its start token,
# {seed}`004:trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)`, is right, and the `.long()`
# in it matters: `torch.ones` makes a float tensor, and `nn.Embedding` only takes integer ids.
# Without it:

# %%
try:
    torch.nn.Embedding(len(vocab), 8)(torch.ones(1, 1).fill_(BOS))  # no .long()
except RuntimeError as exc:
    print(type(exc).__name__ + ":", str(exc).splitlines()[0][:110])
else:
    raise AssertionError("a float tensor should not index an embedding")  # why .long()
start_token = torch.ones(1, 1).fill_(BOS).long()
print("with .long():", list(torch.nn.Embedding(len(vocab), 8)(start_token).shape))

# %% [markdown]
# **Greedy** decoding takes the most likely token at each step. The seed adds
# {seedtr}`004:greedy decoding is used to generate text; beam search can also be used to improve quality`.
# What we want is the output with the highest probability, the product of its tokens'
# probabilities, or the highest *score*, the sum of their log-probabilities. Greedy can miss it:
# the most likely first token may lead only to unlikely continuations. **Beam search**, as
# `tformer_ref.decoding.beam_search` does it, keeps the `k` best prefixes (the *beam*) and at
# each step:
#
# 1. extends every live prefix by every token of the vocabulary and scores each candidate: the
#    prefix's score plus the token's log-probability ($k \cdot V$ candidates);
# 2. takes the best $2k$ of them. A candidate that ends in EOS is *finished* and set aside with
#    its score; the best $k$ of the others are the new beam. Why $2k$: each prefix has one EOS
#    ending, so at most $k$ of the $2k$ are finished, and $k$ live ones remain;
# 3. stops when it holds $k$ finished outputs that beat every live prefix (with $\alpha = 0$
#    below, adding a token only lowers a score, so a prefix that is already worse can never
#    win), or after `max_len` steps;
# 4. returns the finished output with the best score divided by $\text{length}^\alpha$, where
#    $\alpha$ is `length_penalty`.
#
# A worked example with a stand-in model: two tokens `a` and `b` besides EOS, with next-token
# probabilities fixed by a table. The cell prints the second step of a beam of 2, then runs the
# reference's greedy and beam search on it:

# %%
TOK_A, TOK_B = 4, 5  # two toy tokens besides PAD, BOS, EOS
NAMES = {TOK_A: "a", TOK_B: "b", EOS: "EOS"}
TOY = {  # prefix after BOS -> probabilities of the next token
    (): {TOK_A: 0.5, TOK_B: 0.4, EOS: 0.1},
    (TOK_A,): {EOS: 0.4, TOK_A: 0.3, TOK_B: 0.3},
    (TOK_B,): {TOK_A: 0.9, EOS: 0.05, TOK_B: 0.05},
    (TOK_B, TOK_A): {EOS: 0.6, TOK_A: 0.4},
    (TOK_B, TOK_A, TOK_A): {TOK_A: 0.95, EOS: 0.05},
}
OTHER = {EOS: 0.9, TOK_A: 0.05, TOK_B: 0.05}  # every other prefix


class ToyModel(torch.nn.Module):
    """Stands in for a trained model: the next token's probabilities come from TOY."""

    def encode(self, src):  # nothing to encode; beam_search only copies these per beam
        return src, torch.ones(src.size(0), 1, 1, src.size(1), dtype=torch.bool)

    def decode(self, tgt_in, memory, src_mask):
        logits = torch.full((*tgt_in.shape, 6), -30.0)  # tokens not in the table
        for i, row in enumerate(tgt_in.tolist()):
            prefix = tuple(t for t in row[1:] if t != PAD)
            for tok, p in TOY.get(prefix, OTHER).items():
                logits[i, -1, tok] = math.log(p)
        return logits


def toy_text(prefix):
    return " ".join(NAMES[t] for t in prefix) or "(empty)"


def toy_prob(prefix):
    """Probability of a whole output: its tokens' probabilities multiplied, EOS
    included."""
    p, seen = 1.0, ()
    for tok in [*prefix, EOS]:
        p, seen = p * TOY.get(seen, OTHER)[tok], (*seen, tok)
    return p


# Step 2 of a beam of k = 2, by hand: the beam after step 1 is "a" and "b".
k = 2
cands = [  # (prefix + token, score = log p(prefix) + log p(token | prefix))
    ((*prefix, tok), math.log(TOY[()][prefix[0]]) + math.log(p))
    for prefix in [(TOK_A,), (TOK_B,)]
    for tok, p in TOY[prefix].items()
]
cands.sort(key=lambda c: -c[1])
print(f"step 2: {len(cands)} candidates in the table; the best 2k = {2 * k}:")
kept = 0
for cand, score in cands[: 2 * k]:
    if cand[-1] == EOS:
        fate = "finished: set aside"
    else:
        fate = "kept in the beam" if kept < k else "dropped: the beam is full"
        kept += 1
    print(
        f"  {toy_text(cand):9} score {score:+.3f} (p = {math.exp(score):.3f}): {fate}"
    )

toy_src = torch.tensor([[TOK_A]])
outputs = {
    "greedy": greedy_decode(ToyModel(), toy_src, 6),
    "beam 2, alpha 0": beam_search(ToyModel(), toy_src, 6, beam_size=2),
    "beam 2, alpha 1": beam_search(
        ToyModel(), toy_src, 6, beam_size=2, length_penalty=1
    ),
}
for name, out in outputs.items():
    ids = strip(out[0])
    per_token = math.log(toy_prob(ids)) / (len(ids) + 1)
    print(
        f"{name:>15}: {toy_text(ids):9} p = {toy_prob(ids):.3f}, {len(ids) + 1} tokens "
        f"with EOS, log p per token {per_token:+.3f}"
    )
found = {name: strip(out[0]) for name, out in outputs.items()}
assert found == {
    "greedy": [TOK_A],
    "beam 2, alpha 0": [TOK_B, TOK_A],
    "beam 2, alpha 1": [TOK_B, TOK_A, TOK_A, TOK_A],
}

# %% [markdown]
# Greedy takes `a`, the likeliest first token, after which EOS is only fairly likely. The beam
# also keeps `b`, less likely but almost always followed by `a`: `b a` is the more probable
# output, and beam search with $\alpha = 0$ returns it. Every token multiplies in a probability
# below one, so the plain sum of log-probabilities favours short outputs, on any task. Dividing
# by the length ($\alpha = 1$, the mean log-probability per token) lets the longer `b a a a`,
# whose tokens are likelier on average, win. The paper decodes translations with a beam of 4 and
# $\alpha = 0.6$, on a slightly different length term {cite:p}`vaswani2017attention`; the
# reference's default is $\alpha = 0$, the plain sum.
#
# Now both searches on the clipped model of §6.5, which is far from trained, on 100 held-out
# dates, with a beam of 4:


# %% mystnb={"figure": {"caption": "Log-probability of the greedy output against the beam-search output for 100 sources, on an under-trained model: points above the diagonal are where beam search found a more likely output.", "name": "fig-ch06-beam"}, "image": {"alt": "Scatter plot of beam-search log-probability against greedy log-probability for 100 sources, with the diagonal dotted."}}
def sequence_logprob(model, src, out):
    """Log-probability of each decoded row (up to its EOS) under the model: what both
    searches maximise."""
    model.eval()
    with torch.no_grad():
        logp = (
            model(src, out[:, :-1]).log_softmax(-1).gather(-1, out[:, 1:, None])[..., 0]
        )
    keep = torch.ones_like(out[:, 1:], dtype=torch.bool)
    for i, row in enumerate(out.tolist()):
        if EOS in row[1:]:
            keep[i, row[1:].index(EOS) + 1 :] = False
    return (logp * keep).sum(-1)


src_test, tgt_test = test_batches[0]
src_test, tgt_test = src_test[:100].to(device), tgt_test[:100].to(device)
start = time.perf_counter()
greedy = greedy_decode(trained_model, src_test, 20)
greedy_s = time.perf_counter() - start
start = time.perf_counter()
beam = beam_search(trained_model, src_test, 20, beam_size=4)
beam_s = time.perf_counter() - start
scores = {
    "greedy": sequence_logprob(trained_model, src_test, greedy),
    "beam 4": sequence_logprob(trained_model, src_test, beam),
}
acc = {
    "greedy": sequence_accuracy(greedy, tgt_test),
    "beam 4": sequence_accuracy(beam, tgt_test),
}
fig, ax = plt.subplots(figsize=(4.5, 4))
ax.scatter(scores["greedy"].cpu(), scores["beam 4"].cpu(), s=8)
lims = [min(s.min().item() for s in scores.values()), 0]
ax.plot(lims, lims, "k:", lw=0.8)
ax.set(xlabel="log p(greedy output)", ylabel="log p(beam output)")
plt.show()
more = (scores["beam 4"] > scores["greedy"] + 1e-4).sum().item()
less = (scores["beam 4"] < scores["greedy"] - 1e-4).sum().item()
print(
    f"greedy: exact match {acc['greedy']:.1%} in {greedy_s:.2f} s; "
    f"beam 4: {acc['beam 4']:.1%} in {beam_s:.2f} s"
)
print(
    f"beam found a more likely output for {more} of {len(src_test)} sources, "
    f"a less likely one for {less}"
)
assert scores["beam 4"].mean() >= scores["greedy"].mean()
example = vocab.decode(beam[0])
print(f"{vocab.decode(src_test[0])!r} -> {example!r}")
# the same beam, its finished outputs ranked by mean log-probability per token
beam_lp = beam_search(trained_model, src_test, 20, beam_size=4, length_penalty=1.0)
rows_lp, rows_beam = [strip(r) for r in beam_lp], [strip(r) for r in beam]
lp_differ = sum(a != b for a, b in zip(rows_lp, rows_beam))
mean_len = {
    "alpha 0": statistics.mean(map(len, rows_beam)),
    "alpha 1": statistics.mean(map(len, rows_lp)),
}
print(
    f"beam 4, length_penalty=1: {lp_differ} outputs differ from alpha 0; mean length "
    f"{mean_len['alpha 1']:.2f} against {mean_len['alpha 0']:.2f} characters; exact "
    f"match {sequence_accuracy(beam_lp, tgt_test):.1%}"
)


# %% tags=["remove-cell"]
# The numbers the text quotes, for the book (this cell is hidden there).
glue("ch06_beam_greedy_acc", float(acc["greedy"]), display=False)
glue("ch06_beam_acc", float(acc["beam 4"]), display=False)
glue("ch06_beam_more", int(more), display=False)
glue("ch06_beam_less", int(less), display=False)
glue("ch06_beam_cost", beam_s / greedy_s, display=False)
glue("ch06_beam_lp_differ", lp_differ, display=False)
glue("ch06_beam_lp_acc", float(sequence_accuracy(beam_lp, tgt_test)), display=False)
glue("ch06_beam_len0", mean_len["alpha 0"], display=False)
glue("ch06_beam_len1", mean_len["alpha 1"], display=False)

# %% [markdown]
# Beam search found a more likely output for {glue:text}`ch06_beam_more:d` of the 100 sources and
# a less likely one for {glue:text}`ch06_beam_less:d`, and took {glue:text}`ch06_beam_cost:.1f`
# times as long as greedy decoding on this run. More likely is not more correct on a model this
# young: exact match is {glue:text}`ch06_beam_greedy_acc:.0%` greedy and
# {glue:text}`ch06_beam_acc:.0%` with beam search, both from a model that has mostly not learned
# the task. Ranked by the mean log-probability per token ($\alpha = 1$), the beam's outputs
# changed for {glue:text}`ch06_beam_lp_differ:d` of the 100 dates, with a mean length of
# {glue:text}`ch06_beam_len1:.2f` characters against {glue:text}`ch06_beam_len0:.2f`, and an exact
# match of {glue:text}`ch06_beam_lp_acc:.0%`. The {doc}`capstone <capstone>` compares greedy and
# beam search on the fully trained model.

# %% [markdown]
# ## 6.8 Why so many heads?
#
# The seed ends with its author sending the working model to a supervisor:
#
# ```{seed-quote} 004
# 那次把 Transformer 跑通后，我发给导师看。导师回了句：“代码写得还行，但你知道为什么这么多头吗？”
# ```
#
# In English: {seedtr}`004:Once the Transformer ran, I sent it to my supervisor, who replied: the code is not bad, but do you know why there are so many heads?`
# The seed's own answer, given earlier without a measurement, is
#
# ```{seed-quote} 004
# 单头 Attention 只能在一个子空间里计算相似度，Multi-Head 让模型能在多个子空间里关注不同信息。
# ```
#
# that is, {seedtr}`004:single-head attention can only compute similarity in one subspace; multi-head attention lets the model attend to different information in several subspaces`.
#
# Chapter 1 showed what heads do *not* change: at a fixed width $D$, the projections are the same
# four `D × D` matrices and the matrix FLOPs are the same for every number of heads $H$. Heads
# only decide how the $D$ features are cut up: $H$ softmaxes, each over dot products of size
# $D_h = D / H$. With one head, a query gets one set of weights, so what it needs from two
# different positions arrives as one weighted average; with many heads each head's dot products
# are shorter. The paper's reason is the first point: "Multi-head attention allows the model to
# jointly attend to information from different representation subspaces at different positions.
# With a single attention head, averaging inhibits this." ({cite:t}`vaswani2017attention`,
# §3.2.2)
#
# Since no weight depends on $H$, the same seed gives the *same* model for every $H$, down to the
# initial weights; only the split differs. The cell checks that, and counts what does grow with $H$: the attention scores,
# $B \cdot H \cdot S^2$ per attention layer, against $B \cdot S \cdot D$ numbers in one activation.

# %%
from tformer_ref.model import count_parameters

HEADS = (1, 2, 4, 8)
by_heads = {h: make_model(n_heads=h, n_layers=1) for h in HEADS}
first = by_heads[1].state_dict()
for h, m in by_heads.items():  # Linear(D, D) is H projections of size Dh side by side
    assert all(torch.equal(first[k], v) for k, v in m.state_dict().items())
width = by_heads[1].d_model
src, _ = next(iter(loader()))
B, S = src.shape
n_params = count_parameters(by_heads[1])
print(f"every model: {n_params:,} parameters, the same initial weights")
print(f"one batch: B={B}, S={S} source tokens, D={width}")
print("  H  Dh   scores [B, H, S, S] per layer   one activation [B, S, D]")
for h in HEADS:
    print(f"{h:3d} {width // h:3d} {B * h * S * S:31,d} {B * S * width:26,d}")
assert B * 8 * S * S > B * S * width  # at 8 heads: more scores than activation entries
print(f"at 8 heads: {8 * S / width:.1f} scores per entry of an activation")

# %% [markdown]
# Whether the split matters is an experiment: the same model trained with 1, 2, 4 and 8 heads,
# two seeds each, against what the paper measured at full scale. It has its own page,
# {doc}`heads`, so that this lesson stays within its time budget.

# %% [markdown]
# ## 6.9 Recap
#
# - Teacher forcing on batch-first tensors: decoder input `tgt[:, :-1]`, labels `tgt[:, 1:]`. The
#   seed's {seed}`004:trg[:-1, :]` is for sequence-first data. A wrong shift gives a *low* loss and a model that
#   cannot predict the next token: measure what decoding needs, on held-out data.
# - The loss ignores padding (`ignore_index=pad_id`), or it counts predictable PAD positions and
#   reads better than the model is. Label smoothing is one argument of `cross_entropy`; a
#   hand-written smoothed KL loss is close to it, not identical (its target gives PAD nothing).
# - Warm-up: at a high rate from the first step, a Post-LN model went wrong and stayed wrong, while
#   the same rate after a warm-up, or Pre-LN, kept learning ({doc}`schedules`). Write Noam as a
#   `LambdaLR` with $n = \text{step} + 1$; the scheduler sets the rate and never steps the
#   optimizer (the seed's class steps it itself).
# - Adam moves each coordinate by about lr per step, whatever the gradient's scale: $m$ sets the
#   direction, $\sqrt v$ divides out the size.
# - Clip between `backward` and `step`; log the norm `clip_grad_norm_` returns. Clipping caps the
#   gradient, not Adam's step: unclipped, one bad batch steers Adam's first moment for many steps
#   and inflates its second moment for longer.
# - Dynamic padding plus length bucketing: much less padding (on a CPU, faster epochs); the seed's
#   `pad_sequence(..., padding_idx=...)` does not exist, its argument is `padding_value`.
#   `pack_padded_sequence` is for RNNs.
# - Decoding: eval mode, no grad, encode once, causal mask, stop at EOS. Beam search keeps the
#   $k$ best prefixes, takes the best $2k$ extensions and sets the EOS endings aside; it finds
#   more likely outputs, and without a length penalty it favours short ones. Whether they are
#   more often right depends on the model (capstone).
# - Heads: at a fixed width every head count has the same parameters and matrix FLOPs; only the
#   split of $D$ into $H$ heads of size $D/H$ changes. Compare head counts against seed noise
#   (several seeds, each giving every head count the same weights and batches). The paper found
#   one head worse and too many heads worse too (Table 3, rows (A)).
#
# Next: the [exercise](exercise.ipynb), then the [capstone](capstone.ipynb).

# %% [markdown]
# ## Check your understanding
#
# **1.** Three runs differ only in the target shift: input `tgt[:, :-1]` with labels `tgt[:,
# 1:]`, the reverse, and labels not shifted at all. Two of them reach a *lower* training loss
# than the first. Are they better? And what do the seed's slices {seed}`004:trg[:-1, :]` and {seed}`004:trg[1:, :]`
# do to batch-first tensors?
#
# :::{dropdown} Answer
# No: the two low-loss runs are the broken ones, and they predict the next character far worse on
# held-out dates. Shifted the wrong way, position t reads token t+1 and must output token t,
# which it read one position earlier; unshifted, it must output the token it is reading. Both are
# copying, not predicting what comes next. A loss that falls too fast is a symptom; the test is a
# held-out measure of what decoding needs, such as next-token accuracy. The seed's slices cut
# axis 0, which is time only for sequence-first tensors `[S, B]`; on batch-first `[B, S]` data
# they drop the last and the first sentence of the batch, and the model refuses the mismatched
# batches. Read §6.2 'Teacher forcing and the shift'.
# :::
#
# **2.** Every batch is padded to 32 tokens and the loss is `F.cross_entropy(logits.flatten(0,
# 1), labels.flatten())`. It reads lower than the loss with `ignore_index=pad_id`. Is the model
# better?
#
# :::{dropdown} Answer
# Not as far as that number says. The padding is counted: the PAD labels after EOS are trivially
# predictable, so they pull the average down, and the loss rewards predicting PAD. In the lesson
# the padding-counted run reported a loss far below its own loss on the real tokens. The real
# tokens also get a smaller share of the gradient (Adam's rescaling softens that, not entirely).
# Leave padding out of both the sum and the count: `ignore_index=pad_id`. Read §6.3 'A loss
# that ignores padding'.
# :::
#
# **3.** The seed's `AdamWarmup.step()` counts the step, sets the Noam rate and then calls
# `optimizer.step()` itself. What happens if it is used like a PyTorch scheduler, next to the
# loop's own `optimizer.step()`? What else does the design get in the way of? And what happens if
# its formula is moved into a `LambdaLR` as it stands?
#
# :::{dropdown} Answer
# Used as a replacement for `optimizer.step()` it works (it counts from 1, so nothing divides by
# zero); used next to the loop's own `optimizer.step()`, every batch is applied twice. It also
# cannot go through `GradScaler` under mixed precision (`scaler.step(optimizer)` must do the
# update) and keeps no `state_dict`. `LambdaLR` calls `lr_lambda(0)` when it is built, so the
# formula with `step` for n divides by zero at once: use n = step + 1, on an optimizer whose lr
# is 1.0. The scheduler sets the rate and never steps the optimizer. On the schedules page, a
# Post-LN model at a high rate without warm-up ended with a far higher loss than the same model
# warmed up to the same rate. Read §6.4 'Learning rate and warm-up'.
# :::
#
# **4.** Where in a training step does `clip_grad_norm_` go, and what should you do with the
# number it returns?
#
# :::{dropdown} Answer
# After `loss.backward()` and before `optimizer.step()`: before `backward` there are no gradients
# yet (or last batch's), after `step` it is too late. It rescales all gradients together when
# their total norm exceeds `max_norm`, keeping their direction, and returns the norm *before*
# clipping: log it, and a bad batch shows up at once. With Adam it caps the gradient that enters
# $m$ and $v$, not the step, which is about lr per coordinate anyway. In the lesson one bad batch without
# clipping entered Adam's first moment, which then moved every coordinate by about 0.6 learning
# rates in that batch's direction, and kept that direction for some ten to twenty steps (the loss
# jumped), and its second moment, which shrank every later step (the slow recovery); clipped, it
# counted as an ordinary batch. Read §6.5 'Exploding
# gradients and clipping'.
# :::
#
# **5.** Besides taking the most likely token at each step, what must a correct greedy decoding
# loop do? The seed builds its start token with {seed}`004:torch.ones(1, 1).fill_(SOS_IDX).long()`: why
# does the `.long()` matter?
#
# :::{dropdown} Answer
# Put the model in eval mode and turn gradients off; encode the source once and reuse the memory
# at every step; decode the whole prefix with the causal mask, as in training; stop when every
# sequence has produced EOS, padding the finished ones. `torch.ones` makes a float tensor, and
# `nn.Embedding` only takes integer indices: without `.long()` the first decoder call fails. The
# seed's loop does all of this except the masks: it calls a `create_trg_mask` method that the
# seed never defines, and passes no source mask (the bug hunt). Beam search finds outputs that are at least as
# likely on average, at a higher cost; on an under-trained model more likely is not more correct.
# Read §6.7 'Greedy and beam decoding'.
# :::
