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
# [capstone](capstone.ipynb) then trains the seed's 8-head, 2-layer model to 99 % exact match.
#
# **The seed claims this chapter checks.**
#
# | claim | verdict | section |
# |---|---|---|
# | `model(src, trg[:-1, :])`, loss on `trg[1:, :]`, with a batch-first model | wrong slices: those are for sequence-first tensors | 6.2 |
# | (implicit) the loss averages over every position | padding must be left out | 6.3 |
# | "1e-3 oscillated, 1e-4 worked"; use the paper's warm-up schedule | right idea; the seed's scheduler divides by zero at step 0 and steps the optimizer itself | 6.4 |
# | without clipping the gradients became NaN at batch 10; clip at 1.0 | clipping is right, and must come between `backward` and `step` | 6.5 |
# | pad each batch to its own longest sequence, and use `pack_padded_sequence` | dynamic padding is right; `pack_padded_sequence` is for RNNs only | 6.6 |
# | greedy decoding with `model.decoder.create_trg_mask`, start token `torch.ones(1, 1).fill_(SOS_IDX).long().to(device)`; beam search is better | no such method (the seed's `create_trg_mask` is a free function, and builds its mask without a device); the start token is right; eval mode, no grad, encode once, stop at EOS | 6.7, bug hunt |
#
# Everything runs on the CPU in under a minute, and unchanged on a GPU.

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
import math
import statistics
import time

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from tformer_ref.data import (BOS, EOS, PAD, BucketBatchSampler, CharVocab, Collate, PairDataset, make_pairs)
from tformer_ref.decoding import beam_search, evaluate_accuracy, greedy_decode, sequence_accuracy, strip
from tformer_ref.device import get_device, seed_everything
from tformer_ref.model import Transformer
from tformer_ref.training import (fit, noam_lambda, noam_scheduler, sequence_loss, shift_targets, train_step)

seed_everything(0)
device = get_device()
torch.set_num_threads(1)  # tiny tensors: a second thread only waits for the first (and on a busy machine, much worse)

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
# training, in any style, so 99 % on them means the model learned the rule, not the examples.
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
assert max(src_lengths) - min(src_lengths) >= 8 and max(tgt_lengths) - min(tgt_lengths) >= 7
assert not {t for _, t in train_pairs} & {t for _, t in test_pairs}  # held-out dates are new dates

# %% [markdown]
# A small model keeps the lesson fast: `d_model = 32`, 8 heads, 2 layers (the seed's shape,
# narrower). Every run below starts from the same initial weights and sees the same batches.

# %%
BATCH = 32
collate = Collate()
test_batches = list(DataLoader(test_set, batch_size=len(test_set), collate_fn=collate))


def make_model(seed=0, **kw):
    torch.manual_seed(seed)
    config = dict(d_model=32, n_heads=8, n_layers=2, d_ff=64, dropout=0.0, max_len=40) | kw
    return Transformer(len(vocab), len(vocab), **config).to(device)


def loader(pad_to=None, seed=0):
    if pad_to is None:  # bucketed batches, each padded to its own longest sequence
        sampler = BucketBatchSampler(train_set.lengths(), BATCH, seed=seed)
        return DataLoader(train_set, batch_sampler=sampler, collate_fn=collate)
    return DataLoader(train_set, batch_size=BATCH, shuffle=True, collate_fn=Collate(pad_to=pad_to),
                      generator=torch.Generator().manual_seed(seed))


def accuracy(model):
    return evaluate_accuracy(model, test_batches, max_len=20)


def next_token_accuracy(model):
    """Held-out, teacher-forced: how often the argmax at position t is the *next* character t+1 (padding
    excluded). This is what decoding relies on: each step predicts the next token from the past."""
    src, tgt = test_batches[0]
    tgt_in, labels = shift_targets(tgt.to(device))
    model.eval()
    with torch.no_grad():
        pred = model(src.to(device), tgt_in).argmax(-1)
    keep = labels != PAD
    return (pred == labels)[keep].float().mean().item()


def char_accuracy(model):
    """Greedy decoding of the held-out sources: the fraction of target characters right at their position."""
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
assert torch.equal(tgt_in[:, 1:], labels[:, :-1]) and tgt.shape[1] - 1 == tgt_in.shape[1]

# %% [markdown]
# The seed writes `model(src, trg[:-1, :])` and the loss on `trg[1:, :]`. Those slices cut axis 0.
# That is time only for **sequence-first** tensors `[St, B]` (PyTorch's old default, `batch_first=False`).
# On batch-first `[B, St]` data they drop the last and the first *sentence* of the batch:

# %%
src, tgt = next(iter(loader()))
print("batch-first tgt:", list(tgt.shape), "-> seed's decoder input", list(tgt[:-1, :].shape))
try:
    make_model()(src, tgt[:-1, :])
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


shifts = {"right: tgt[:, :-1] -> tgt[:, 1:]": shift_targets,
          "wrong way: tgt[:, 1:] -> tgt[:, :-1]": lambda t: (t[:, 1:], t[:, :-1]),
          "labels not shifted": lambda t: (t[:, :-1], t[:, :-1])}
shift_runs = {name: run_shift(fn) for name, fn in shifts.items()}
fig, ax = plt.subplots(figsize=(7, 3))
for name, (losses, acc) in shift_runs.items():
    ax.plot(losses, label=f"{name}: next character right {acc:.0%}")
ax.set_xlabel("step")
ax.set_ylabel("training loss")
ax.set_yscale("log")
ax.legend(fontsize=8)
plt.show()
right, wrong, same = shift_runs.values()
for name, (losses, acc) in shift_runs.items():
    print(f"{name:>36}: final loss {losses[-1]:.3f}, next character right {acc:.0%}")
assert wrong[0][-1] < right[0][-1] and same[0][-1] < right[0][-1]  # the broken runs have the *lower* loss
assert right[1] > 2 * max(wrong[1], same[1])  # and decode far worse

# %% [markdown]
# The two broken runs reach a **lower** loss than the right one and are useless for decoding.
# Shifted the wrong way, position $t$ reads token $t+1$ and must output token $t$, which it read one
# position earlier; unshifted, it must output the token it is reading. Both tasks are copying, not
# translation, and neither model has learned to predict what comes *next*. A loss that falls too
# fast is a symptom; a held-out measure of what decoding needs is the test.

# %% [markdown]
# ## 6.3 A loss that ignores padding
#
# A batch is padded to its longest sequence. The padded label positions are not tokens, and the loss
# must leave them out of both the sum and the count. `F.cross_entropy(..., ignore_index=PAD)` does;
# `label_smoothing=0.1` (used by Vaswani et al., §5.4) moves 10 % of each target's probability onto
# the whole vocabulary, which keeps the model from becoming over-confident.

# %%
model = make_model()
src, tgt = collate([train_set[i] for i in range(64)])
tgt_in, labels = shift_targets(tgt)
with torch.no_grad():
    logits = model(src, tgt_in)
counted = F.cross_entropy(logits.flatten(0, 1), labels.flatten())
ignored = sequence_loss(logits, labels, PAD)
pad_share = (labels == PAD).float().mean().item()
print(f"padding is {pad_share:.0%} of the label positions; loss with padding {counted:.3f}, without {ignored:.3f}")

# %% [markdown]
# What does counting padding do to training? Pad every batch to a fixed 32 tokens, as a tokenizer's
# `padding="max_length"` would, and train once with padding counted and once without. Both runs are
# then scored on held-out dates by the fraction of characters greedy decoding gets right:

# %% mystnb={"figure": {"caption": "Reported loss when padding is counted and when it is ignored: counting it makes the loss look better and the model worse.", "name": "fig-ch06-padding-loss"}, "image": {"alt": "Two loss curves on a log scale; the padding-counted curve sits lower, while its legend shows fewer characters right."}}
def run_padding(count_padding, steps=60):
    model = make_model()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    reported = []
    for step, (src, tgt) in zip(range(steps), loader(pad_to=(32, 32))):
        model.train()
        tgt_in, labels = shift_targets(tgt.to(device))
        logits = model(src.to(device), tgt_in)
        if count_padding:
            loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten())
        else:
            loss = sequence_loss(logits, labels, PAD)
        opt.zero_grad()
        loss.backward()
        opt.step()
        reported.append(loss.item())
    return reported, char_accuracy(model)


pad_runs = {"padding counted": run_padding(True), "padding ignored": run_padding(False)}
fig, ax = plt.subplots(figsize=(7, 3))
for name, (losses, acc) in pad_runs.items():
    ax.plot(losses, label=f"{name}: characters right {acc:.0%}")
ax.set_xlabel("step")
ax.set_ylabel("reported training loss")
ax.set_yscale("log")
ax.legend(fontsize=8)
plt.show()
(counted_losses, counted_acc), (ignored_losses, ignored_acc) = pad_runs.values()
print(f"characters right: padding counted {counted_acc:.1%}, ignored {ignored_acc:.1%}")
assert counted_losses[-1] < ignored_losses[-1]  # the padded loss *reads* better ...
assert counted_acc < ignored_acc  # ... and the model is worse

# %% [markdown]
# With padding counted, more than half of each batch's "tokens" are PAD after EOS, which are trivially
# predictable: the reported loss looks better and says little, and the real tokens get less than half
# of the gradient's weight. The padded model ends up *worse* on held-out data.

# %% [markdown]
# ## 6.4 Learning rate and warm-up
#
# The seed found that 1e-3 "oscillated" and 1e-4 worked, and quotes the schedule of Vaswani et al.
# (§5.3): with updates counted $n = 1, 2, \dots$
#
# $$\text{lr}(n) = d_\text{model}^{-0.5} \cdot \min(n^{-0.5},\ n \cdot \text{warmup}^{-1.5}),$$
#
# a linear warm-up to a peak at $n = \text{warmup}$, then a decay like $1/\sqrt n$. For
# $d_\text{model} = 512$ and 4000 warm-up steps the peak is about $7 \cdot 10^{-4}$.
#
# Two details of the seed's version break it. It computes `step ** -0.5` with the step counter at 0
# for the first call, which divides by zero, and its `step()` also calls `optimizer.step()`: next to
# the training loop's own call, every batch is applied twice (and under mixed precision it bypasses
# `GradScaler`). In PyTorch a schedule is a `LambdaLR`: it multiplies the optimizer's lr (set it to
# 1.0) by `lr_lambda(step)`, with `step` counted from 0, so use $n = \text{step} + 1$:

# %%
rates = [noam_lambda(s, 512, 4000) for s in range(20000)]
print(f"step 0: {rates[0]:.2e}, peak {max(rates):.2e} at step {rates.index(max(rates))} (update n = 4000)")
assert rates[0] > 0 and rates.index(max(rates)) == 3999 and abs(max(rates) - 7e-4) < 2e-5
try:
    512 ** -0.5 * min(0 ** -0.5, 0 * 4000 ** -1.5)  # the seed's formula at LambdaLR's first step
except ZeroDivisionError as exc:
    print("the seed's formula at step 0:", type(exc).__name__, exc)

# %% [markdown]
# Now the symptom the seed saw. A Post-LN Transformer (the paper's and the seed's layout) is
# fragile at the start, when its weights are random: a large learning rate from the first step
# can push it into a bad region it never leaves. Three runs, same model, same batches, Adam with
# the paper's betas: a constant 1e-2 from step 0, a constant 1e-3, and the Noam schedule *peaking
# at 1e-2* after 60 warm-up steps. Each run is scored by the fraction of held-out characters that
# greedy decoding gets right at their position (exact match needs many more steps).

# %% mystnb={"figure": {"caption": "Constant learning rates against Noam warm-up: loss (left) and learning rate (right) per step.", "name": "fig-ch06-lr"}, "image": {"alt": "Left: three loss curves, the Noam warm-up curve lowest at the end. Right: two flat learning-rate lines and the Noam schedule rising then decaying."}}
def run_lr(lr=None, warmup=None, steps=150, post_ln=True):
    model = make_model(norm_first=not post_ln)
    if warmup is None:
        opt = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.98), eps=1e-9)
        sched = None
    else:  # peak lr(warmup) = factor · d^-0.5 · warmup^-0.5, so choose factor to peak at `lr`
        opt = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
        sched = noam_scheduler(opt, 32, warmup, factor=lr * math.sqrt(32 * warmup))
    history = fit(model, loader(), opt, sched, max_steps=steps, max_norm=None, progress=False)
    return history, char_accuracy(model), model


lr_runs = {"constant 1e-2, no warm-up": run_lr(1e-2), "constant 1e-3": run_lr(1e-3),
           "Noam, 60 warm-up steps, peak 1e-2": run_lr(1e-2, warmup=60)}
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3))
for name, (h, acc, _) in lr_runs.items():
    ax1.plot(h.step, h.loss, label=f"{name}: characters right {acc:.0%}")
    ax2.plot(h.step, h.lr, label=name)
ax1.set(xlabel="step", ylabel="training loss", yscale="log")
ax2.set(xlabel="step", ylabel="learning rate", yscale="log")
ax1.legend(fontsize=7)
plt.show()
(h_hot, acc_hot, _), (h_slow, acc_slow, _), (h_noam, acc_noam, noam_model) = lr_runs.values()
print({name: (f"final loss {statistics.mean(h.loss[-30:]):.3f}", f"characters right {acc:.0%}") for name, (h, acc, _) in lr_runs.items()})
assert acc_noam > acc_hot and acc_noam > acc_slow
assert statistics.mean(h_noam.loss[-50:]) < statistics.mean(h_hot.loss[-50:])

# %% [markdown]
# Warm-up reaches the same peak rate and ends far better: by the time the rate is large, Adam's
# second-moment estimates and the LayerNorm statistics have settled. A small constant rate is
# safe but slow. (Pre-LN layers, chapter 4, tolerate large early rates much better.)

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
# On this small model, with LayerNorm in every block, gradient norms stay within a few units even at
# high learning rates; the seed's NaN came from a larger, less well-initialised model. What does
# happen in every real run is the occasional **bad batch** whose loss, and so gradient, is far larger
# than usual (here: one batch at step 50 whose loss is multiplied by 1000, as an unnormalised sum over
# a long batch would be). Without clipping, that one gradient floods Adam's running averages: its
# second-moment estimate becomes huge and then shrinks every normal step to almost nothing for dozens
# of steps. With clipping at 1.0 the bad batch counts as an ordinary one:

# %% mystnb={"figure": {"caption": "One bad batch at step 50: the gradient norm (left) and the loss (right), without clipping and clipped at 1.0.", "name": "fig-ch06-clipping"}, "image": {"alt": "Left: gradient norms on a log scale with a spike at step 50. Right: loss curves; after step 50 the unclipped run's loss jumps and stays higher than the clipped run's."}}
def run_clip(max_norm, steps=120, spike_at=50, spike=1000.0):
    model = make_model()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98), eps=1e-9)
    norms, losses = [], []
    for step, (src, tgt) in zip(range(steps), loader()):
        model.train()
        opt.zero_grad()
        tgt_in, labels = shift_targets(tgt.to(device))
        loss = sequence_loss(model(src.to(device), tgt_in), labels, PAD)
        (loss * (spike if step == spike_at else 1.0)).backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)  # after backward, before step
        opt.step()
        norms.append(norm.item())
        losses.append(loss.item())
    return norms, losses, next_token_accuracy(model)


clip_runs = {"no clipping": run_clip(float("inf")), "clipped at 1.0": run_clip(1.0)}
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3))
for name, (norms, losses, acc) in clip_runs.items():
    ax1.plot(norms, label=name, lw=0.8)
    ax2.plot(losses, label=f"{name}: next character right {acc:.0%}", lw=0.8)
ax1.axhline(1.0, color="k", ls=":", lw=0.8)
ax1.set(xlabel="step", ylabel="gradient norm (before clipping)", yscale="log")
ax2.axvline(50, color="k", ls=":", lw=0.8)
ax2.set(xlabel="step", ylabel="training loss", yscale="log")
ax2.legend(fontsize=8)
plt.show()
(n_free, l_free, acc_free), (n_clip, l_clip, acc_clip) = clip_runs.values()
print(f"gradient norm at the bad batch: {n_free[50]:.0f} (typical: {statistics.median(n_free[:50]):.2f}); "
      f"loss 20 steps later: {l_free[70]:.3f} unclipped, {l_clip[70]:.3f} clipped")
assert n_free[50] > 100 * statistics.median(n_free[:50])
assert statistics.mean(l_clip[-20:]) < statistics.mean(l_free[-20:]) and acc_clip > acc_free

# %% [markdown]
# One bad batch costs the unclipped run dozens of steps. Clipping caps the *size* of each update
# while keeping its direction; log the norm `clip_grad_norm_` returns, and spikes show up at once.
# Clipping treats the symptom; the seed's other remedies, a smaller rate and warm-up (§6.4), treat the
# cause of gradients that are large all the time.

# %% [markdown]
# ## 6.6 Dynamic padding and bucketing
#
# Attention costs grow with the padded length of the batch, not with the real lengths. Two remedies:
#
# - **dynamic padding** — `collate_fn` pads each batch to *its own* longest sequence (the seed's
#   `pad_sequence(..., batch_first=True)`), instead of a fixed maximum;
# - **length bucketing** — a batch sampler groups sequences of similar length, so even that padding
#   is small (`BucketBatchSampler`: shuffle, sort within pools of 50 batches, shuffle the batches).
#
# The seed also recommends `pack_padded_sequence`. That is an **RNN** utility: it returns a
# `PackedSequence` that only `nn.RNN`/`nn.LSTM`/`nn.GRU` understand. An attention layer takes the
# padded tensor plus a padding mask:

# %%
packed = torch.nn.utils.rnn.pack_padded_sequence(src, (src != PAD).sum(1), batch_first=True, enforce_sorted=False)
try:
    make_model().encode(packed)
except (TypeError, AttributeError) as exc:
    print(type(packed).__name__, "->", type(exc).__name__ + ":", str(exc)[:100])
else:
    raise AssertionError("a PackedSequence should be refused")

# %% [markdown]
# How much does dynamic padding save? One epoch over the same examples, the seed's 8-head
# 2-layer model at `d_model = 64`, with every batch padded to the model's 32 positions, and with
# bucketed dynamic padding. The two are interleaved and each timed twice, keeping the faster run:

# %% mystnb={"figure": {"caption": "Time for 25 training batches padded to 32 positions and with dynamic padding plus length bucketing.", "name": "fig-ch06-dynamic-padding"}, "image": {"alt": "Horizontal bar chart: the dynamic padding bar is shorter than the pad-to-32 bar."}}
def padded_tokens(batches):
    real = total = 0
    for src, tgt in batches:
        real += (src != PAD).sum().item() + (tgt != PAD).sum().item()
        total += src.numel() + tgt.numel()
    return real, total


def epoch_seconds(batches, n_batches=25):
    model = make_model(d_model=64, d_ff=256)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    start = time.perf_counter()
    for src, tgt in batches[:n_batches]:
        train_step(model, src.to(device), tgt.to(device), opt)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


fixed_batches, dynamic_batches = list(loader(pad_to=(32, 32))), list(loader())
times = {"pad to 32": [], "dynamic + bucketing": []}
for _ in range(2):
    times["pad to 32"].append(epoch_seconds(fixed_batches))
    times["dynamic + bucketing"].append(epoch_seconds(dynamic_batches))
best = {k: min(v) for k, v in times.items()}
shares = {k: padded_tokens(b) for k, b in (("pad to 32", fixed_batches), ("dynamic + bucketing", dynamic_batches))}
fig, ax = plt.subplots(figsize=(6, 2.2))
ax.barh(list(best), list(best.values()))
ax.set_xlabel("seconds for 25 batches")
plt.show()
for k in best:
    real, total = shares[k]
    print(f"{k:>20}: {best[k]:.2f} s, padding {1 - real / total:.0%} of the positions")
speedup = best["pad to 32"] / best["dynamic + bucketing"]
print(f"speed-up {speedup:.1f}x")
pad_share = {k: 1 - real / total for k, (real, total) in shares.items()}
assert pad_share["dynamic + bucketing"] < pad_share["pad to 32"] / 3
assert speedup > 1.1  # a timing: the margin allows for a busy machine (measured 1.4x to 2x)

# %% [markdown]
# Bucketing by source length leaves a few percent of padding (a little more on the target side,
# which is not what the buckets sort by), and the epoch is correspondingly faster. Buckets change the
# batch composition a little (similar lengths together), which does not hurt here; sorting the whole
# dataset would, since every batch would then be of one length only.

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
# The seed's loop has this shape, but it calls `model.decoder.create_trg_mask`, which does not
# exist: the seed defines `create_trg_mask` as a free function, which builds its mask on the CPU
# whatever the device, and the loop passes `None` as the source mask, so the decoder attends to
# the source's padding. Fixing them is the graded {doc}`bug hunt <../ch06_bughunt/exercise>`.
# Its start token, `torch.ones(1, 1).fill_(SOS_IDX).long().to(device)`, is right, and the
# `.long()` in it matters: `nn.Embedding` only takes integer ids. Without it:

# %%
try:
    noam_model.decode(torch.ones(1, 1).fill_(BOS), *noam_model.encode(test_batches[0][0][:1]))
except (RuntimeError, TypeError) as exc:
    print(type(exc).__name__ + ":", str(exc).splitlines()[0][:110])
else:
    raise AssertionError("a float tensor should not index an embedding")  # why .long()

# %% [markdown]
# **Greedy** decoding takes the most likely token at each step. **Beam search** keeps the `k` most
# likely prefixes and can recover when the best first step leads nowhere. On the half-trained model
# of §6.4 (the Noam run), on the held-out dates:

# %% mystnb={"figure": {"caption": "Log-probability of the greedy output against the beam-search output for 100 sources: points above the diagonal are where beam search found a more likely output.", "name": "fig-ch06-beam"}, "image": {"alt": "Scatter plot of beam-search log-probability against greedy log-probability, most points on or above the dotted diagonal."}}
def sequence_logprob(model, src, out):
    """Log-probability of each decoded row (up to its EOS) under the model: what both searches maximise."""
    model.eval()
    with torch.no_grad():
        logp = model(src, out[:, :-1]).log_softmax(-1).gather(-1, out[:, 1:, None])[..., 0]
    keep = torch.ones_like(out[:, 1:], dtype=torch.bool)
    for i, row in enumerate(out.tolist()):
        if EOS in row[1:]:
            keep[i, row[1:].index(EOS) + 1:] = False
    return (logp * keep).sum(-1)


src_test, tgt_test = test_batches[0]
src_test, tgt_test = src_test[:100].to(device), tgt_test[:100].to(device)
start = time.perf_counter()
greedy = greedy_decode(noam_model, src_test, 20)
greedy_s = time.perf_counter() - start
start = time.perf_counter()
beam = beam_search(noam_model, src_test, 20, beam_size=4)
beam_s = time.perf_counter() - start
scores = {"greedy": sequence_logprob(noam_model, src_test, greedy), "beam 4": sequence_logprob(noam_model, src_test, beam)}
acc = {"greedy": sequence_accuracy(greedy, tgt_test), "beam 4": sequence_accuracy(beam, tgt_test)}
fig, ax = plt.subplots(figsize=(4.5, 4))
ax.scatter(scores["greedy"].cpu(), scores["beam 4"].cpu(), s=8)
lims = [min(s.min().item() for s in scores.values()), 0]
ax.plot(lims, lims, "k:", lw=0.8)
ax.set(xlabel="log p(greedy output)", ylabel="log p(beam output)")
plt.show()
print(f"greedy: exact match {acc['greedy']:.1%} in {greedy_s:.2f} s; beam 4: {acc['beam 4']:.1%} in {beam_s:.2f} s")
print(f"beam found a more likely output for {(scores['beam 4'] > scores['greedy'] + 1e-4).sum().item()} of "
      f"{len(src_test)} sources, a less likely one for {(scores['beam 4'] < scores['greedy'] - 1e-4).sum().item()}")
assert scores["beam 4"].mean() >= scores["greedy"].mean()
example = vocab.decode(beam[0])
print(f"{vocab.decode(src_test[0])!r} -> {example!r}")

# %% [markdown]
# Beam search's outputs are at least as likely on average, at a few times the cost. Whether they
# are more *correct* depends on the model: once it is well trained (the capstone) greedy is already
# right 99 % of the time on this task, and beam search rarely changes anything. On open-ended
# tasks, beam search prefers short outputs unless scores are normalised by length
# (`length_penalty`).

# %% [markdown]
# ## 6.8 Why so many heads?
#
# The seed ends with its author sending the working model to a supervisor:
#
# > 那次把 Transformer 跑通后，我发给导师看。导师回了句：“代码写得还行，但你知道为什么这么多头吗？”
#
# ("Once the Transformer ran, I sent it to my supervisor, who replied: 'The code is not bad, but
# do you know why there are so many heads?'") The seed's own answer, given earlier without a
# measurement, is
#
# > 单头 Attention 只能在一个子空间里计算相似度，Multi-Head 让模型能在多个子空间里关注不同信息。
#
# ("Single-head attention can only compute similarity in one subspace; multi-head attention lets
# the model attend to different information in several subspaces.")
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
#   seed's `trg[:-1, :]` is for sequence-first data. A wrong shift gives a *low* loss and a model that
#   cannot predict the next token: measure what decoding needs, on held-out data.
# - The loss ignores padding (`ignore_index=pad_id`), or padding dilutes the gradient and flatters the
#   loss. Label smoothing is one argument of `cross_entropy`.
# - Warm-up lets a Post-LN Transformer take large steps later. Noam as a `LambdaLR` with
#   $n = \text{step} + 1$; the scheduler sets the rate and never steps the optimizer.
# - Clip between `backward` and `step`; log the norm `clip_grad_norm_` returns.
# - Dynamic padding plus length bucketing: less padding, faster epochs. `pack_padded_sequence` is for
#   RNNs.
# - Decoding: eval mode, no grad, encode once, causal mask, stop at EOS. Beam search finds more
#   likely outputs; a well-trained model rarely needs it.
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
# than the first. Are they better? And what do the seed's slices `trg[:-1, :]` and `trg[1:, :]`
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
# No, worse. The padding is counted: the PAD labels after EOS are trivially predictable, so they
# make the average look better, and the real tokens get a smaller share of the gradient. In the
# lesson the model trained on the padded loss got fewer held-out characters right. Leave padding
# out of both the sum and the count: `ignore_index=pad_id`. Read §6.3 'A loss that ignores
# padding'.
# :::
#
# **3.** The seed's Noam schedule computes `step ** -0.5` with the step counter starting at 0,
# and its `step()` calls `optimizer.step()` itself. What goes wrong, and how is the schedule
# written in PyTorch?
#
# :::{dropdown} Answer
# At step 0, `0 ** -0.5` raises `ZeroDivisionError`; and next to the training loop's own
# `optimizer.step()`, every batch is applied twice (and under mixed precision the `GradScaler` is
# bypassed). In PyTorch the schedule is a `LambdaLR` on an optimizer whose lr is 1.0, with n =
# step + 1 because `LambdaLR` counts from 0; the scheduler sets the rate and never steps the
# optimizer. Warm-up is what lets a Post-LN model take large steps later: in the lesson the Noam
# run peaking at 1e-2 ended better than both a constant 1e-2 and a constant 1e-3. Read §6.4
# 'Learning rate and warm-up'.
# :::
#
# **4.** Where in a training step does `clip_grad_norm_` go, and what should you do with the
# number it returns?
#
# :::{dropdown} Answer
# After `loss.backward()` and before `optimizer.step()`: before `backward` there are no gradients
# yet (or last batch's), after `step` it is too late. It rescales all gradients together when
# their total norm exceeds `max_norm`, keeping their direction, and returns the norm *before*
# clipping: log it, and a bad batch shows up at once. In the lesson one bad batch without
# clipping flooded Adam's second-moment estimate and cost the run dozens of steps; clipped, it
# counted as an ordinary batch. Read §6.5 'Exploding gradients and clipping'.
# :::
#
# **5.** Besides taking the most likely token at each step, what must a correct greedy decoding
# loop do? The seed builds its start token with `torch.ones(1, 1).fill_(SOS_IDX).long()`: why
# does the `.long()` matter?
#
# :::{dropdown} Answer
# Put the model in eval mode and turn gradients off; encode the source once and reuse the memory
# at every step; decode the whole prefix with the causal mask, as in training; stop when every
# sequence has produced EOS, padding the finished ones. `torch.ones` makes a float tensor, and
# `nn.Embedding` only takes integer indices: without `.long()` the first decoder call fails. Beam search finds
# outputs that are at least as likely on average, at a few times the cost; a well-trained model
# rarely needs it. Read §6.7 'Greedy and beam decoding'.
# :::
