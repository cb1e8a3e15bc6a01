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
# # Chapter 7 — Mixed precision, accumulation and DDP
#
# The model of the previous chapters trains on one CPU core. Real models do not fit
# that budget, and three techniques stretch it: **mixed precision** (do most arithmetic in
# 16 bits), **gradient accumulation** (a big batch built from several small ones) and
# **DistributedDataParallel** (several processes, each on its own slice of the data). Each
# is a few lines, and each has a way to be silently wrong: the model still trains, just not
# the way you think.
#
# In this chapter you will:
#
# - run a model under `torch.amp` autocast (bfloat16 on a CPU, float16 with a `GradScaler`
#   on a GPU) and measure what it saves here;
# - see why a `GradScaler` needs `unscale_` before clipping;
# - prove, with numbers, that accumulated micro-batches give the big batch's gradient, and
#   what to divide by when the micro-batches hold different numbers of tokens;
# - start two real processes with `torchrun`, train with DDP, and check that they end with
#   the same parameters as one process on the whole batch;
# - measure fused attention against the plain $O(n^2)$ scores as the sequence grows;
# - keep a block's input instead of its activations with gradient checkpointing, and measure
#   what that saves and costs.
#
# **The seed claims this chapter checks.** One seed write-up ends with a section on
# {seedtr}`004:performance optimisation experience`: mixed precision, gradient accumulation and
# {seedtr}`004:model parallelism`, and lists what Hugging Face offers instead
# (gradient checkpointing among them).
#
# | claim or code | verdict | section |
# |---|---|---|
# | `from torch.cuda.amp import autocast, GradScaler`; `with autocast():` | works on CUDA but deprecated (it warns); on a CPU it warns and disables itself. Use `torch.amp.autocast(device_type, dtype)` | 7.1 |
# | {seedtr}`004:FP16 for most of the computation, FP32 only where necessary` | right; autocast decides per operation, and the weights stay float32 | 7.1 |
# | {seedtr}`004:mixed precision speeds training up significantly` | depends on the hardware: measured here | 7.1 |
# | `scaler.scale(loss).backward(); scaler.step(optimizer); scaler.update()` | right, but clipping (which the seed does elsewhere, at 1.0) must come after `scaler.unscale_` | 7.2 |
# | accumulation: `loss = loss / accumulation_steps`, step every k batches | right only when every micro-batch holds as many tokens; no scheduler step shown; when the epoch's batch count is not a multiple of k, the last micro-batches leak into the next epoch | 7.3 |
# | DDP listed under {seedtr}`004:model parallelism: when one card's memory is not enough, split the model across several cards` | wrong: DDP is *data* parallel, every process holds the whole model; the data-parallel answer to a model that does not fit is to shard it (FSDP, ZeRO) | 7.4 |
# | DDP loop: no `DistributedSampler`, no `zero_grad`; `mp` imported, never spawned | every rank reads the whole dataset; gradients pile up; nothing starts the processes | 7.4, 7.5 |
# | {seedtr}`004:the communication overhead is large; with a small model it may be slower than one card` | plausible, not measured here (two CPU processes are not a GPU interconnect) | 7.4 |
# | gradient checkpointing, listed among Hugging Face's optimisations | one call, `torch.utils.checkpoint`: memory for a second forward | 7.7 |
#
# Everything runs on a CPU, and unchanged on a GPU.

# %% [markdown]
# ```{figure} ../figures/model_ch07.svg
# :alt: Diagram of the encoder–decoder Transformer with every part highlighted, since this chapter trains the whole model with mixed precision, gradient accumulation and DistributedDataParallel.
# :name: fig-model-ch07
# :width: 100%
#
# The whole model; this chapter builds the highlighted part, which is all of it: the same model, trained with mixed precision, gradient accumulation and several processes.
# ```

# %%
# %matplotlib inline
import copy
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import matplotlib.pyplot as plt
from tformer_ref.plotting import COLUMN_INCHES  # the import applies the book style
import torch
import torch.nn.functional as F
from myst_nb import glue
from torch.utils.checkpoint import checkpoint

from tformer_ref import distributed as ddp_demo
from tformer_ref.accumulation import train_accumulated, train_big_batch
from tformer_ref.amp import (
    amp_dtype,
    autocast,
    make_grad_scaler,
    optimizer_step,
    saved_activation_bytes,
)
from tformer_ref.attention import scaled_dot_product_attention
from tformer_ref.device import get_device, seed_everything
from tformer_ref.model import DecoderOnlyLM
from tformer_ref.toy_lm import TinyCausalLM, count_targets, lm_loss_sum, make_token_data

device = get_device()  # CUDA when available; set TFORMER_DEVICE=cpu to override
seed_everything(0)
# This chapter's CPU work is many small operations, for which waking a second thread
# costs more than it saves (and on a shared machine it waits for a free core): one
# thread is faster here.
# Every comparison below runs both sides on the same setting.
torch.set_num_threads(1)
print(
    f"device: {device}, torch {torch.__version__}, "
    f"{torch.get_num_threads()} CPU threads"
)


def synchronize():
    """Wait for queued GPU work, so that a timer measures the work and not only its
    launch."""
    if device.type == "cuda":
        torch.cuda.synchronize()


def median_ms(fn, repeats=5):
    """Median wall time of fn() in milliseconds, after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        synchronize()
        start = time.perf_counter()
        fn()
        synchronize()
        times.append(1000 * (time.perf_counter() - start))
    return statistics.median(times)


# %% [markdown]
# Two models serve this chapter: chapter 5's `DecoderOnlyLM` where we measure, and a
# deliberately tiny one, `TinyCausalLM` (in `tformer_ref/toy_lm.py`: an embedding, one pre-LN
# causal self-attention block built from the course's `MultiHeadAttention`, an output layer),
# where we compare training runs number for number and start processes. The data are token
# sequences of varying length, padded with token 0 at the end; the task is to predict each
# next token.

# %%
tokens = make_token_data(n=4, seq_len=12, seed=0)  # [4, 12], padded with 0
print(tokens)
print("real next-token targets per sequence:", (tokens[:, 1:] != 0).sum(1).tolist())

# %% [markdown]
# ## 7.1 Mixed precision with torch.amp
#
# Two 16-bit formats exist, and they fail differently:

# %%
print(" dtype        max          smallest normal   eps (step after 1.0)")
for dt in (torch.float32, torch.float16, torch.bfloat16):
    fi = torch.finfo(dt)
    print(f" {str(dt):15s} {fi.max:10.3g}   {fi.tiny:10.3g}        {fi.eps:.3g}")

tiny_grad, big_logit = torch.tensor(1e-8), torch.tensor(70000.0)
print(
    "1e-8 in float16:",
    tiny_grad.half().item(),
    "  in bfloat16:",
    tiny_grad.bfloat16().item(),
)
print(
    "70000 in float16:",
    big_logit.half().item(),
    "  -1e9 in float16:",
    torch.tensor(-1e9).half().item(),
)
assert (
    tiny_grad.half() == 0
    and big_logit.half().isinf()
    and torch.tensor(-1e9).half().isinf()
)
assert tiny_grad.bfloat16() > 0 and big_logit.bfloat16().isfinite()

# %% [markdown]
# **float16** has a narrow range: gradients below about $3\cdot10^{-8}$ become 0 (below its
# smallest normal number, the table's 6.1e-05, they already lose digits) and values
# past 65504 become infinite (so does the classic mask value −1e9: the course's masks fill
# with `torch.finfo(dtype).min` instead, chapter 3). **bfloat16** keeps float32's exponent
# range with fewer digits: its smallest normal number is float32's (the table's 1.18e-38), so
# gradients practically never underflow, and no loss scaling is needed. GPUs have fast
# float16 (and, since Ampere, bfloat16); some x86 CPUs have bfloat16 matrix instructions
# (AVX-512 BF16, AMX). The course uses **bfloat16 on a CPU** (no scaler to get wrong) **and float16 + `GradScaler` on CUDA**
# (`tformer_ref.amp.amp_dtype`); whether bfloat16 is fast on a given CPU is measured below.
#
# The seed writes `from torch.cuda.amp import autocast` and `with autocast():`. That API is
# deprecated, and it only ever affects CUDA operations. It does not fail quietly, though: the
# cell below runs the seed's `with autocast():` on a `Linear` and prints the warnings it
# raises (caught, so that none reaches the notebook's error stream). The current API names
# the device: `torch.amp.autocast(device_type, dtype=...)`.

# %%
layer = torch.nn.Linear(8, 8).to(device)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with (
        torch.cuda.amp.autocast()
    ):  # the seed's API (its `from torch.cuda.amp import autocast`)
        seed_out = layer(torch.randn(2, 8, device=device))
for w in caught:
    print(f"{w.category.__name__}: {w.message}")
print(f"on {device.type}: the Linear's output is {seed_out.dtype}")
assert any("deprecated" in str(w.message) for w in caught)
if device.type == "cpu":  # a CPU operation: torch.cuda.amp never touches it
    assert seed_out.dtype == torch.float32
    assert any("Disabling autocast" in str(w.message) for w in caught)

# %% [markdown]
# On a CPU the seed's block warns twice: the API is deprecated, and CUDA is not available, so
# autocast disables itself; the `Linear` stays float32. On a GPU only the deprecation warning
# comes, and the `Linear` runs in float16.
#
# Autocast does not convert the model. The weights stay float32 (the "master weights" the
# optimizer updates); inside the `with` block, each operation picks its precision from a
# per-device list: matrix products (`Linear`, `matmul`) run in 16 bits, operations that need
# range or accuracy run in float32. Which ones differs by device: on CUDA softmax,
# log-softmax, layer norm and the losses; on the CPU the losses (softmax stays bfloat16
# there). That is one reason `lm_loss_sum` casts the logits to float32 itself.
#
# Autocast is not the only way to mix precisions. Some current training code sets one
# compute dtype and casts by hand instead. nanochat keeps float32 weights for the
# optimizer, and its own `Linear` casts them to a global `COMPUTE_DTYPE` (bfloat16 on
# recent GPUs) in the forward: `F.linear(x, self.weight.to(dtype=x.dtype))`
# {cite:p}`karpathy2025nanochat`. Its log gives the reason: autocast picks each operation's
# precision from lists the code does not control, and in that model the only cast it made
# was the `Linear` weights'. The price is that every operation that needs float32 must ask
# for it, as `lm_loss_sum` does for the loss.

# %%
seed_everything(0)
model = TinyCausalLM().to(device)
batch = make_token_data(8, 12, seed=1).to(device)
dtype = amp_dtype(device)
with torch.amp.autocast(device.type, dtype=dtype):
    logits = model(batch[:, :-1])  # [8, 11, V]
    loss = F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten(), ignore_index=0)
print(f"autocast dtype on {device.type}: {dtype}")
print(
    "weights:",
    model.head.weight.dtype,
    "| logits (a Linear):",
    logits.dtype,
    "| cross_entropy:",
    loss.dtype,
)
assert (
    model.head.weight.dtype == torch.float32
    and logits.dtype == dtype
    and loss.dtype == torch.float32
)

# %% [markdown]
# **What it saves here.** Memory first: the course's decoder-only model from chapter 5,
# `DecoderOnlyLM` (2 layers, 4 heads, `d_model = 256`, `d_ff = 1024`, fused attention), on 16
# sequences of 128 tokens, in float32 and under autocast. We count the bytes autograd keeps
# for the backward pass (the activations, which is what grows with batch and sequence) with
# `saved_activation_bytes`, a hook on every saved tensor; the weights are not counted. Then
# time, as the seed's claim is about training: training steps of the same model (forward,
# backward, Adam) on 8 of the sequences, in float32 and under autocast, alternated in 5
# pairs so that a busy moment of the machine hits both sides. Last, one square matrix
# product, the operation autocast is for, in float32 and in the autocast dtype
# ($256 \times 256$ on a CPU, $4096 \times 4096$ on a GPU), median of 3 runs.

# %%
seed_everything(0)
big_model = DecoderOnlyLM(
    vocab=512, d_model=256, n_heads=4, n_layers=2, d_ff=1024, dropout=0.0, max_len=128
).to(device)
big_batch = make_token_data(16, 129, vocab=512, min_len=100, seed=2).to(device)
half = amp_dtype(device)
half_name = str(half).replace("torch.", "")
saved_mib = {}
for name, dt in (("float32", None), (half_name, half)):
    with autocast(device, dt, enabled=dt is not None):
        _, saved = saved_activation_bytes(
            lm_loss_sum, big_model, big_batch, exclude=big_model.parameters()
        )
    saved_mib[name] = saved / 2**20
mem_ratio = saved_mib[half_name] / saved_mib["float32"]
print(
    f"saved activations: float32 {saved_mib['float32']:.1f} MiB, "
    f"{half_name} {saved_mib[half_name]:.1f} MiB (ratio {mem_ratio:.2f})"
)
assert mem_ratio < 0.75  # the activations really are kept in 16 bits


def cpu_flags():
    """The CPU's instruction-set flags (Linux; empty elsewhere)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return set()
    return {
        f
        for line in lines
        if line.startswith("flags")
        for f in line.split(":")[1].split()
    }


# A copy, so that the steps below leave big_model's weights as they are for §7.7.
step_model = copy.deepcopy(big_model)
step_opt = torch.optim.Adam(step_model.parameters(), lr=1e-4)
step_scaler = make_grad_scaler(device)  # enabled for float16 only


def train_step_ms(dt):
    """Wall time of one training step in milliseconds; dt None means float32."""
    synchronize()
    start = time.perf_counter()
    step_opt.zero_grad()
    with autocast(device, dt, enabled=dt is not None):
        loss_sum, n = lm_loss_sum(step_model, big_batch[:8])
    scaler = step_scaler if dt is not None else None
    if scaler is not None:
        scaler.scale(loss_sum / n).backward()
    else:
        (loss_sum / n).backward()
    optimizer_step(step_opt, step_model.parameters(), scaler)
    synchronize()
    return 1000 * (time.perf_counter() - start)


(
    train_step_ms(None),
    train_step_ms(half),
)  # warm-up: first calls allocate and pick kernels
pairs = [(train_step_ms(None), train_step_ms(half)) for _ in range(5)]
step_ms = {
    "float32": statistics.median(p[0] for p in pairs),
    half_name: statistics.median(p[1] for p in pairs),
}
pair_ratios = [h / f for f, h in pairs]
step_ratio = step_ms[half_name] / step_ms["float32"]
print(
    f"training step, 8 x 128 tokens: float32 {step_ms['float32']:.0f} ms, "
    f"{half_name} {step_ms[half_name]:.0f} ms (median of 5 pairs; {half_name} / "
    f"float32 per pair {min(pair_ratios):.2f} to {max(pair_ratios):.2f})"
)

n_mm = 4096 if device.type == "cuda" else 256
a32, b32 = (torch.randn(n_mm, n_mm, device=device) for _ in range(2))
a16, b16 = a32.to(half), b32.to(half)
mm_ms = {
    "float32": median_ms(lambda: a32 @ b32, repeats=3),
    half_name: median_ms(lambda: a16 @ b16, repeats=3),
    # what an emulation would do: convert both to float32, multiply, round back
    "convert": median_ms(lambda: (a16.float() @ b16.float()).to(half), repeats=3),
}
mm_ratio = mm_ms[half_name] / mm_ms["float32"]
flags = cpu_flags()
bf16_flags = ", ".join(
    f"{f}: {'yes' if f in flags else 'no'}"
    for f in ("avx512f", "avx512_bf16", "amx_bf16")
)
print(
    f"{n_mm} x {n_mm} matrix product on {device.type}: "
    f"float32 {mm_ms['float32']:.2f} ms, "
    f"{half_name} {mm_ms[half_name]:.2f} ms ({mm_ratio:.1f} times as long); "
    f"convert + float32 product + round back {mm_ms['convert']:.2f} ms"
)
print(f"CPU flags: {bf16_flags}")
if device.type == "cpu" and not flags & {"avx512f", "avx512_bf16", "amx_bf16"}:
    # no bfloat16 (nor AVX-512) instructions: PyTorch's generic bfloat16 kernel
    assert mm_ratio > 2 and mm_ms["convert"] < mm_ms[half_name] / 2
if device.type == "cpu" and mm_ratio > 1:
    # The case the emulation argument is about: the 16-bit product was the slow one.
    convert_note = (
        "It is not the conversions that cost: converting both operands to float32, "
        f"multiplying in float32 and rounding the result back took "
        f"{mm_ms['convert']:.2f} ms, against {mm_ms[half_name]:.2f} ms for the "
        f"{half_name} product."
    )
else:
    convert_note = (
        "On this run the 16-bit product was not the slow one, so that case is not "
        "measured here."
    )
print(convert_note)


# %% tags=["remove-cell"]
# The numbers the text quotes, for the book (this cell is hidden there).
glue("ch07_amp_name", half_name, display=False)
glue("ch07_amp_mem_ratio", float(mem_ratio), display=False)
glue("ch07_mm_n", n_mm, display=False)
glue("ch07_mm_fp32_ms", float(mm_ms["float32"]), display=False)
glue("ch07_mm_half_ms", float(mm_ms[half_name]), display=False)
glue("ch07_mm_ratio", float(mm_ratio), display=False)
glue("ch07_step_fp32_ms", float(step_ms["float32"]), display=False)
glue("ch07_step_half_ms", float(step_ms[half_name]), display=False)
glue("ch07_step_ratio", float(step_ratio), display=False)
glue("ch07_step_ratio_min", float(min(pair_ratios)), display=False)
glue("ch07_step_ratio_max", float(max(pair_ratios)), display=False)
# Both words come from the same measurement, so prose and numbers cannot disagree.
glue("ch07_step_word", "slower" if step_ratio > 1 else "faster", display=False)
glue("ch07_convert_note", convert_note, display=False)
glue("ch07_device", device.type, display=False)
glue("ch07_cpu_flags", bf16_flags, display=False)

# %% [markdown]
# Under autocast the activations take {glue:text}`ch07_amp_mem_ratio:.2f` of their float32
# size, not half: the float32 parts stay (the logits the loss reads, and the layer norms,
# which read the float32 residual stream), and the
# 16-bit copies of the weights that autocast makes for the matrix products are kept for the
# backward too (a fixed cost, which weighs less as the batch grows).
#
# The speed depends on the hardware. On this run ({glue:text}`ch07_device:s`), a training
# step took {glue:text}`ch07_step_fp32_ms:.0f` ms in float32 and
# {glue:text}`ch07_step_half_ms:.0f` ms under {glue:text}`ch07_amp_name:s` autocast (medians):
# {glue:text}`ch07_step_ratio:.2f` times as long, so {glue:text}`ch07_step_word:s`; pair by
# pair the ratio ran from {glue:text}`ch07_step_ratio_min:.2f` to
# {glue:text}`ch07_step_ratio_max:.2f`. The matrix products are what autocast moves to 16 bits: one
# {glue:text}`ch07_mm_n:d`-square product took {glue:text}`ch07_mm_fp32_ms:.2f` ms in float32
# and {glue:text}`ch07_mm_half_ms:.2f` ms in {glue:text}`ch07_amp_name:s`
# ({glue:text}`ch07_mm_ratio:.1f` times as long). The CPU's flags here:
# {glue:text}`ch07_cpu_flags:s`. A CPU without bfloat16 instructions (AVX512-BF16, AMX) has
# no hardware path for a bfloat16 matrix product: PyTorch emulates it, or on a CPU without
# AVX-512 at all, like many AMD and older Intel ones, runs a generic kernel (on such a CPU
# the cell asserts that the bfloat16 product takes more than twice as long as float32).
# {glue:text}`ch07_convert_note:s` On such a CPU autocast saves memory and costs time. On
# CPUs with those instructions, and on GPUs with float16 tensor cores (where this cell
# times a larger product), the 16-bit product is the fast one. Measure on your machine
# before you believe a speed claim, the seed's {seedtr}`004:significantly faster` included;
# this notebook asserts no speed-up.
#
# Mixed precision still trains. Fifty steps of bfloat16 autocast on the CPU (or float16 with
# a scaler on a GPU), on a small `DecoderOnlyLM`:

# %%
seed_everything(0)
model = DecoderOnlyLM(
    vocab=16, d_model=32, n_heads=4, n_layers=2, d_ff=64, dropout=0.0, max_len=16
).to(device)
data = make_token_data(32, 12, seed=3).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
scaler = make_grad_scaler(
    device
)  # enabled for float16 only; a pass-through for bfloat16
losses = []
for step in range(50):
    optimizer.zero_grad()
    with autocast(device):
        loss_sum, n = lm_loss_sum(model, data)
    loss = loss_sum / n
    scaler.scale(loss).backward()
    optimizer_step(optimizer, model.parameters(), scaler, max_norm=1.0)
    losses.append(loss.item())
print(
    f"scaler enabled: {scaler.is_enabled()}; loss {losses[0]:.3f} -> {losses[-1]:.3f}"
)
assert all(torch.isfinite(torch.tensor(losses))) and losses[-1] < 0.5 * losses[0]

# %% [markdown]
# ## 7.2 GradScaler, unscale_ and clipping
#
# With float16, small gradients underflow to zero. The `GradScaler` multiplies the loss by a
# large factor $s$ (65536 to start) before `backward`, so every gradient is $s$ times larger
# and stays representable; before the optimizer uses them they must be divided by $s$ again.
# `scaler.step(optimizer)` does that division (if it was not done yet), *checks for inf/NaN*
# and skips the step when it finds one (the scale was too large), and `scaler.update()` then
# halves $s$ (and doubles it again after 2000 good steps).
#
# Clipping is where the order matters. `clip_grad_norm_(params, 1.0)` on gradients that are
# still multiplied by $s$ clips them at $1/s$ of what you asked for. So:
#
# ```python
# scaler.scale(loss).backward()
# scaler.unscale_(optimizer)                # gradients are true-sized again
# torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
# scaler.step(optimizer)                    # no second unscale; skips inf/NaN steps
# scaler.update()
# ```
#
# The GradScaler works on a CPU too (`torch.amp.GradScaler("cpu")`), which lets us show the
# pitfall here, with a float32 model and a scale of 1024:


# %%
def one_step(unscale_first, poison=False):
    """One SGD step of a small Linear with an enabled GradScaler.

    Returns (update norm, scale after, stepped).
    """
    seed_everything(0)
    layer = torch.nn.Linear(8, 4).to(device)
    before = torch.cat([p.detach().flatten() for p in layer.parameters()])
    opt = torch.optim.SGD(layer.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler(device.type, init_scale=1024.0)
    loss = layer(torch.randn(16, 8, device=device)).pow(2).mean() * (
        float("inf") if poison else 1.0
    )
    scaler.scale(loss).backward()
    if unscale_first:
        scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(layer.parameters(), max_norm=0.5)
    scaler.step(opt)
    scaler.update()
    after = torch.cat([p.detach().flatten() for p in layer.parameters()])
    return (
        (after - before).norm().item(),
        scaler.get_scale(),
        not torch.equal(after, before),
    )


right, _, _ = one_step(unscale_first=True)
wrong, _, _ = one_step(unscale_first=False)
print(
    f"update norm, unscale_ then clip: {right:.4f}  (lr 0.1 x clipped norm 0.5 = 0.05)"
)
print(f"update norm, clip then unscale:  {wrong:.6f}  ({right / wrong:.0f}x too small)")
assert abs(right - 0.05) < 1e-4 and wrong < right / 500
_, scale_after, stepped = one_step(unscale_first=True, poison=True)
print(f"an inf gradient: step taken? {stepped}; scale 1024 -> {scale_after:.0f}")
assert not stepped and scale_after == 512

# %% [markdown]
# `tformer_ref.amp.optimizer_step` packages this order and reports whether the step was
# taken: a learning-rate scheduler should only advance when it was. (The seed's Noam class,
# chapter 6, calls `optimizer.step()` itself; under AMP that bypasses the scaler, which is one
# more reason to keep the schedule separate from the optimizer.)
#
# ## 7.3 Gradient accumulation
#
# `backward` *adds* into `.grad` until something zeroes it. So k micro-batches, each followed
# by `backward`, leave the sum of their gradients; one optimizer step then uses a batch k
# times larger than fits in memory. The seed's version, verbatim:
#
# ```{seed-quote} 004
# :code: python
# accumulation_steps = 4
#
# for i, batch in enumerate(train_loader):
#     with autocast():
#         output = model(src, trg[:-1, :])
#         loss = criterion(output.reshape(-1, output.shape[2]), trg[1:, :].reshape(-1))
#         loss = loss / accumulation_steps
#
#     scaler.scale(loss).backward()
#
#     if (i + 1) % accumulation_steps == 0:
#         scaler.step(optimizer)
#         scaler.update()
#         optimizer.zero_grad()
# ```
#
# Is it the big batch? The big batch's loss is the mean over **all its target tokens**,
# $\frac{1}{N}\sum_{t} \ell_t$. Micro-batch $i$ holds $n_i$ tokens and its mean loss is
# $\frac{1}{n_i}\sum_{t \in i}\ell_t$. Dividing by k gives
# $\frac{1}{k}\sum_i \frac{1}{n_i}\sum_{t\in i}\ell_t$, which equals the big batch only when
# every $n_i = N/k$. With padding, micro-batches hold different numbers of real tokens, and
# the right weight is $\frac{1}{N}$ for every token: divide each micro-batch's **summed** loss
# by the step's total token count $N$ (counted before the first backward). Let us check both,
# on gradients, first with sequences that all have the full length:


# %%
def grads_of(model):
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def fresh_model():
    seed_everything(0)
    return TinyCausalLM().to(device)


def big_batch_grads(batch):
    model = fresh_model()
    loss_sum, n = lm_loss_sum(model, batch)
    (loss_sum / n).backward()
    return grads_of(model)


def accumulated_grads(batch, k, by_tokens):
    model = fresh_model()
    frozen = torch.optim.SGD(
        model.parameters(), lr=0.0
    )  # a no-op step: the gradients stay to compare
    train_accumulated(
        model,
        batch.chunk(k),
        frozen,
        lm_loss_sum,
        count_tokens=count_targets if by_tokens else None,
    )
    return grads_of(model)


equal = make_token_data(16, 12, min_len=12, seed=4).to(
    device
)  # every sequence full length
varied = make_token_data(16, 12, min_len=3, seed=4).to(device)  # lengths 3..12
print("tokens per micro-batch, equal: ", [count_targets(m) for m in equal.chunk(4)])
print("tokens per micro-batch, varied:", [count_targets(m) for m in varied.chunk(4)])
grad_diff = {}
for name, batch in [("equal", equal), ("varied", varied)]:
    want = big_batch_grads(batch)
    for by_tokens in (False, True):
        diff = (accumulated_grads(batch, 4, by_tokens) - want).abs().max().item()
        grad_diff[name, by_tokens] = diff
        how = "sum / N_total" if by_tokens else "mean / k     "
        print(
            f"{name:6s} lengths, k=4, {how}: max |grad - big-batch grad| = {diff:.2e}"
        )

assert torch.allclose(
    accumulated_grads(equal, 4, False), big_batch_grads(equal), atol=1e-6
)
assert torch.allclose(
    accumulated_grads(varied, 4, True), big_batch_grads(varied), atol=1e-6
)
assert not torch.allclose(
    accumulated_grads(varied, 4, False), big_batch_grads(varied), atol=1e-4
)


# %% tags=["remove-cell"]
# The numbers the text quotes, for the book (this cell is hidden there).
glue(
    "ch07_acc_equal_diff",
    max(grad_diff["equal", False], grad_diff["equal", True]),
    display=False,
)
glue("ch07_acc_varied_mean_diff", grad_diff["varied", False], display=False)

# %% [markdown]
# With equal lengths both agree with the big batch to float32 rounding (a largest difference
# of {glue:text}`ch07_acc_equal_diff:.1e` here). With varied lengths only the token-normalised
# version does; dividing by k (off by up to {glue:text}`ch07_acc_varied_mean_diff:.1e`) gives
# the tokens of short micro-batches more weight than those of long ones.
#
# Three more things make a whole step right:
#
# - **zero once per optimizer step**, not per micro-batch (that keeps only the last one);
# - **step the scheduler once per optimizer step**: a schedule counts updates; stepping it
#   per micro-batch ends a warm-up k times too early;
# - **under AMP, unscale before clipping**, once, after the last micro-batch.
#
# `tformer_ref.accumulation.train_accumulated` does all of it. Four optimizer steps with
# momentum, clipping and a warm-up schedule, accumulated over 4 micro-batches, against the
# same four steps on the whole batch:


# %%
def params_of(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


warmup = lambda step: min(1.0, (step + 1) / 3)  # noqa: E731
big, acc = fresh_model(), fresh_model()
opt_big, opt_acc = (
    torch.optim.SGD(m.parameters(), lr=0.5, momentum=0.9) for m in (big, acc)
)
sch_big, sch_acc = (
    torch.optim.lr_scheduler.LambdaLR(o, warmup) for o in (opt_big, opt_acc)
)
for step in range(4):
    batch = make_token_data(16, 12, min_len=3, seed=10 + step).to(device)
    loss_big = train_big_batch(big, batch, opt_big, lm_loss_sum, sch_big, max_norm=1.0)
    loss_acc = train_accumulated(
        acc,
        batch.chunk(4),
        opt_acc,
        lm_loss_sum,
        count_tokens=count_targets,
        scheduler=sch_acc,
        max_norm=1.0,
    )
    print(
        f"step {step}: loss big batch {loss_big:.5f}, accumulated {loss_acc:.5f}, "
        f"lr now {sch_acc.get_last_lr()[0]:.3f}"
    )
diff = (params_of(acc) - params_of(big)).abs().max().item()
print(f"after 4 steps: max |parameter difference| = {diff:.2e}")
assert diff < 1e-5 and sch_acc.last_epoch == sch_big.last_epoch == 4

# %% [markdown]
# **The epoch's last micro-batches.** The seed steps when `(i + 1) % accumulation_steps == 0`.
# When the loader's length is not a multiple of k, the last `len(loader) % k` micro-batches
# of an epoch run `backward` but no step follows, and nothing zeroes their gradients: they are
# added into the first step of the next epoch, which then holds more micro-batches than k.
# Below is a loop of the seed's shape over 10 micro-batches per epoch with k = 4, on a
# one-parameter model whose every micro-batch adds exactly 1/k to the gradient, so that the
# gradient times k counts the micro-batches each optimizer step used. Two fixes follow: step
# at the epoch's last batch too, or zero the gradients when an epoch starts (which drops the
# tail).


# %%
def micro_batches_per_step(n_batches, k, epochs=2, fix=None):
    """The seed's accumulation loop; returns how many micro-batches each step's gradient
    sums."""
    w = torch.nn.Parameter(torch.zeros((), device=device))
    opt = torch.optim.SGD([w], lr=0.0)  # lr 0: we only read the gradient
    loader = range(n_batches)
    counts = []
    for epoch in range(epochs):
        if fix == "zero_grad at epoch start":
            opt.zero_grad()
        for i, _ in enumerate(loader):
            loss = (
                w / k
            )  # each micro-batch's loss / accumulation_steps: d loss / dw = 1/k
            loss.backward()
            last = fix == "step at the last batch" and i + 1 == len(loader)
            if (i + 1) % k == 0 or last:
                counts.append(round(w.grad.item() * k))
                opt.step()
                opt.zero_grad()
    return counts


leak = {
    fix: micro_batches_per_step(10, 4, fix=fix)
    for fix in (None, "step at the last batch", "zero_grad at epoch start")
}
for fix, counts in leak.items():
    label = fix or "the seed's loop"
    print(f"{label:26s}: micro-batches per optimizer step, 2 epochs: {counts}")
assert leak[None] == [4, 4, 6, 4]  # epoch 2's first step holds epoch 1's last two too
assert leak["step at the last batch"] == [4, 4, 2, 4, 4, 2]
assert leak["zero_grad at epoch start"] == [4, 4, 4, 4]

# %% [markdown]
# In the seed's loop the first step of the second epoch sums six micro-batches (the first
# epoch's two leftovers and four new ones), and the learning-rate schedule sees one step fewer than
# the data suggest. Stepping at the last batch keeps every micro-batch and makes the
# tail a short step; dividing each step's summed loss by that step's own token count (the
# rule above) then weights it right, where the seed's division by k would leave it at 2/4 of
# its size. Zeroing at each epoch's start is the simpler fix when dropping a few examples
# per epoch does not matter. (`train_accumulated` takes the micro-batches of one step as a
# list, so a step never spans two epochs.)

# %% [markdown]
# ## 7.4 DistributedDataParallel is data parallel
#
# The seed files DDP under {seed}`004:3. 模型并行`, {seedtr}`004:model parallelism`, with
# {seedtr}`004:when one card's memory is not enough, the model can be split across several cards`.
# That is a different technique. The two:
#
# | | data parallel (DDP) | sharded data parallel (FSDP, ZeRO) | model parallel (tensor / pipeline) |
# |---|---|---|---|
# | each process holds | the **whole** model, its gradients and optimizer state | **a 1/W shard** of the weights, of the gradients and of the optimizer state | a part of the model (some layers, or a slice of each matrix) |
# | each process reads | **its own slice of every batch** | its own slice of every batch | the same batch |
# | processes exchange | gradients, once per backward (an all-reduce that averages them) | each layer's weights, gathered just before the layer runs (forward and backward); gradients, reduced onto their shards | activations, at every layer boundary |
# | it helps when | the model, its gradients and optimizer state fit one device, and you want more throughput | they do not fit one device, but one layer's full weights do | the model does not fit one device |
#
# The seed's problem, one card's memory not enough, is what the middle column is for. With
# Adam and mixed precision, the weights, gradients and optimizer state take 16 bytes per
# parameter: 2 for the 16-bit weights, 2 for their gradients, and 12 for the float32 master
# weights and Adam's two moments. DDP keeps all 16 on every device. ZeRO shards them over
# the W devices, so each keeps about 16/W bytes per parameter
# {cite:p}`rajbhandari2020zero`. PyTorch's version is Fully Sharded Data Parallel (FSDP,
# `torch.distributed.fsdp.fully_shard`): it gathers a layer's full weights just before the
# layer runs, frees them after, and reduce-scatters the gradients, so that each rank keeps
# only its shard {cite:p}`zhao2023pytorch,pytorchdocs`. The loop around it is DDP's: each
# rank reads its own data through a `DistributedSampler`, and all ranks step on the same
# averaged gradient. This chapter runs DDP only.
#
# DDP's promise: after the all-reduce every process holds the same averaged gradient, takes
# the same step, and the replicas stay identical, so training on W processes with batch b
# each is training on one batch of W·b. Three details make that promise true:
#
# - **Each process must read different data**: a `DistributedSampler` (§7.5). The seed has
#   none, so every rank reads the whole dataset, and the all-reduce averages W identical
#   gradients: W times the work for nothing. (Its loop also never calls `zero_grad`. And it
#   writes {seed}`004:import torch.multiprocessing as mp` but never calls `mp.spawn`, so
#   nothing ever starts its `train(rank, world_size)`: one process per rank must be started,
#   by `mp.spawn(train, args=(world_size,), nprocs=world_size)` or by `torchrun`, as below.)
# - **The loss normalisation must match the big batch.** DDP *averages* gradients across W
#   processes. With token normalisation each process divides its summed loss by the global
#   token count (one `all_reduce` of an integer) and multiplies by W, which the averaging
#   undoes.
# - **Accumulation under DDP**: every `backward` of a DDP model all-reduces. With k
#   micro-batches, wrap the first k−1 backwards in `with model.no_sync():`, so the
#   accumulated gradients are reduced once, on the last one.
#
# The backend: **gloo** for CPU processes, **NCCL** for GPUs (one process per GPU).
# `tformer_ref/distributed.py` is a complete training script for `torchrun`, which starts the
# processes and gives each its `RANK`, `WORLD_SIZE` and the address to meet at. We run it for
# real: 2 processes, 4 optimizer steps of 2 micro-batches of 4 sequences per process, on
# 127.0.0.1 only (`launch` runs the command below with a timeout). Rank 0 saves its final
# parameters; then one process trains on exactly the batches the two ranks read together.

# %%
args = ["--steps", "4", "--micro-batch", "4", "--accum", "2", "--n-data", "48"]
print(
    "python -m torch.distributed.run --nproc_per_node=2 "
    "--master_addr=127.0.0.1 --master_port=<free> "
    "-m tformer_ref.distributed " + " ".join(args)
)
with tempfile.TemporaryDirectory() as tmp:
    out_file = Path(tmp) / "final.pt"
    start = time.perf_counter()
    # Two processes on one GPU would compete for it: on CUDA they run on the CPU with
    # gloo here.
    proc = ddp_demo.launch(
        2, [*args, "--out", str(out_file)], timeout=180, env={"TFORMER_DEVICE": "cpu"}
    )
    seconds = time.perf_counter() - start
    print(proc.stdout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ddp_result = torch.load(out_file)
# no_sync on the first micro-batch of each step: one gradient all-reduce per step, not
# one per micro-batch
assert proc.stdout.count("gradient all-reduces: 4 in 4 steps of 2 micro-batches") == 2
print(f"2 processes, {ddp_result['backend']}: {seconds:.1f} s including starting them")

single = ddp_demo.reference_run(ddp_demo.parse_args(args), world_size=2)
diff = max(
    (ddp_result["state_dict"][k] - v).abs().max().item()
    for k, v in single["state_dict"].items()
)
print(f"max |DDP parameters - single-process parameters| = {diff:.2e}")
assert diff < 1e-6

# %% [markdown]
# Each rank read different samples at every step (their lists never overlap), each printed
# the loss of its own half, and yet both ended with parameters equal, to float32 rounding,
# to one process training on the union of their batches with the same schedule. That is the
# data-parallel contract. (The losses the ranks print differ: each sees only its half.) The
# script counts DDP's gradient all-reduces with a communication hook: 4 in 4 steps of 2
# micro-batches, because the first micro-batch of each step ran under `no_sync()`; without
# it there would be 8, each sending every gradient.
#
# The seed also says that {seedtr}`004:the communication overhead is large, and with a small
# model it may be slower than a single card`. That is plausible (each step waits for an
# all-reduce of every gradient, and a small model has little computation to hide it behind),
# but this run cannot test it: its two processes share this machine's CPU cores and talk
# through gloo on the loopback interface, which is neither a second card nor a GPU
# interconnect, and the time printed above includes starting both processes. A claim about
# cards needs a run on cards: the same steps on one GPU and on two, timed per step.
#
# ## 7.5 DistributedSampler and set_epoch
#
# `DistributedSampler(dataset, num_replicas=W, rank=r)` shuffles the indices with a seed
# every rank shares, pads the list to a multiple of W (or drops the tail with
# `drop_last=True`), and gives rank r every W-th index starting at r. The shuffle's seed is
# `seed + epoch`, and the epoch only changes when you call `sampler.set_epoch(epoch)` before
# iterating. No process group is needed to try it:

# %%
from torch.utils.data import DataLoader, DistributedSampler  # noqa: E402

samples = list(range(12))


def order_read(rank, epoch, *, sampler=True, set_epoch=True):
    if not sampler:
        g = torch.Generator().manual_seed(
            0
        )  # a seeded shuffle, no sharding: what the seed's loop amounts to
        return [
            int(i)
            for i in DataLoader(samples, batch_size=12, shuffle=True, generator=g)
            .__iter__()
            .__next__()
        ]
    s = DistributedSampler(samples, num_replicas=2, rank=rank, shuffle=True, seed=0)
    if set_epoch:
        s.set_epoch(epoch)
    return list(s)


for title, kwargs in [
    ("DistributedSampler + set_epoch", {}),
    ("no set_epoch", {"set_epoch": False}),
    ("no DistributedSampler", {"sampler": False}),
]:
    print(title)
    for epoch in range(2):
        print(
            f"  epoch {epoch}: rank 0 reads {order_read(0, epoch, **kwargs)}, "
            f"rank 1 reads {order_read(1, epoch, **kwargs)}"
        )

r0, r1 = order_read(0, 0), order_read(1, 0)
assert sorted(r0 + r1) == samples  # together the ranks read each sample once per epoch
assert order_read(0, 0) != order_read(0, 1)  # set_epoch: a new order every epoch
assert order_read(0, 0, set_epoch=False) == order_read(
    0, 1, set_epoch=False
)  # without it: the same order
assert (
    sorted(order_read(0, 0, sampler=False)) == samples
)  # without a sampler: rank 0 reads everything

# %% [markdown]
# Without `set_epoch` every epoch repeats epoch 0's order (SGD sees the same sequence of
# batches again and again); without a `DistributedSampler` every rank reads everything. Do
# not also pass `shuffle=True` to the `DataLoader`: the sampler shuffles, and PyTorch refuses
# both. A sharded evaluation loop needs care too: the padding repeats a few samples, so exact
# metrics use `drop_last=False` and count each sample once.
#
# ## 7.6 Fused attention against the O(n²) scores
#
# Plain attention builds the score matrix `[B, H, S, S]`, softmaxes it into weights of the
# same size, and keeps the weights for the backward pass: memory grows as $S^2$.
# `F.scaled_dot_product_attention` dispatches to fused kernels (FlashAttention and the
# memory-efficient kernel on GPUs, a flash-style kernel on CPUs) that walk over key blocks
# with a running softmax and never store the whole matrix; the backward recomputes what it
# needs. The FLOPs are the same $O(S^2 D)$; the memory is $O(S \cdot D)$.
#
# We measure one attention call, `B = 1, H = 4, Dh = 32`, as the sequence grows: the bytes
# kept for backward (as in §7.1), and the forward + backward time.

# %%
seq_lens = [128, 256, 512, 1024, 2048]
B6, H6, DH6 = 1, 4, 32
mem = {"plain": [], "fused": []}
ms = {"plain": [], "fused": []}
for s in seq_lens:
    seed_everything(0)
    q, k, v = (
        torch.randn(B6, H6, s, DH6, device=device, requires_grad=True) for _ in range(3)
    )
    runs = {
        "plain": lambda: scaled_dot_product_attention(q, k, v)[0],
        "fused": lambda: F.scaled_dot_product_attention(q, k, v),
    }
    for name, fn in runs.items():
        out, saved = saved_activation_bytes(fn, exclude=(q, k, v))
        mem[name].append(saved / 2**20)
        ms[name].append(median_ms(lambda: fn().sum().backward(), repeats=3))
print("     S   scores [B,H,S,S] (MiB)   kept for backward (MiB)      fwd+bwd (ms)")
print("                                    plain      fused          plain   fused")
for i, s in enumerate(seq_lens):
    scores_mib = B6 * H6 * s * s * 4 / 2**20
    print(
        f"{s:6d} {scores_mib:16.2f} {mem['plain'][i]:17.2f} {mem['fused'][i]:10.3f} "
        f"{ms['plain'][i]:14.1f} {ms['fused'][i]:7.1f}"
    )

# Doubling S: the plain path's memory grows ~4x (S²), the fused one's ~2x (S).
assert (
    mem["plain"][-1] / mem["plain"][-2] > 3.5
    and mem["fused"][-1] / mem["fused"][-2] < 2.5
)
assert mem["plain"][-1] >= B6 * H6 * seq_lens[-1] ** 2 * 4 / 2**20


# %% tags=["remove-cell"]
# The numbers the text quotes, for the book (this cell is hidden there).
glue("ch07_attn_S", seq_lens[-1], display=False)
glue("ch07_attn_plain_mib", mem["plain"][-1], display=False)
glue("ch07_attn_fused_mib", mem["fused"][-1], display=False)
glue("ch07_attn_mem_ratio", mem["plain"][-1] / mem["fused"][-1], display=False)
glue("ch07_attn_plain_ms", ms["plain"][-1], display=False)
glue("ch07_attn_fused_ms", ms["fused"][-1], display=False)
glue("ch07_attn_plain_growth", ms["plain"][-1] / ms["plain"][-2], display=False)
glue("ch07_attn_fused_growth", ms["fused"][-1] / ms["fused"][-2], display=False)
glue("ch07_attn_time_ratio", ms["plain"][-1] / ms["fused"][-1], display=False)
glue(
    "ch07_attn_time_word",
    "less" if ms["fused"][-1] < ms["plain"][-1] else "more",
    display=False,
)

# %% mystnb={"figure": {"caption": "Plain attention keeps one score-sized tensor for backward, so its memory grows as S squared; the fused kernel's grows as S. Both take time roughly quadratic in S.", "name": "fig-ch07-fused-vs-plain"}, "image": {"alt": "Two log-log panels, one above the other, against sequence length 128 to 2048: top, memory kept for backward, the plain line on the dotted score-tensor line with slope 2 and the fused line far below with slope 1; bottom, forward plus backward milliseconds, both rising."}}
fig, (ax_mem, ax_time) = plt.subplots(
    2, 1, figsize=(COLUMN_INCHES, 6.4), layout="constrained"
)
for name, style in (("plain", "o-"), ("fused", "s-")):
    ax_mem.plot(seq_lens, mem[name], style, label=f"{name} attention")
    ax_time.plot(seq_lens, ms[name], style, label=f"{name} attention")
ax_mem.plot(
    seq_lens,
    [B6 * H6 * s * s * 4 / 2**20 for s in seq_lens],
    "k:",
    label="one [B,H,S,S] fp32 tensor",
)
for ax, ylabel in (
    (ax_mem, "MiB kept for backward"),
    (ax_time, "forward + backward (ms)"),
):
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequence length S")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
ax_mem.legend()
fig.suptitle(f"Attention, B={B6}, H={H6}, Dh={DH6}, float32, on {device.type}")
plt.show()

# %% [markdown]
# On a log–log plot a slope of 2 is quadratic and a slope of 1 is linear. What the plain
# path keeps besides q, k and v is exactly one score-sized tensor, the softmax weights that
# the backward needs: it lies on the dotted line, {glue:text}`ch07_attn_plain_mib:.1f` MiB at
# S = {glue:text}`ch07_attn_S:d`. The fused kernel keeps the output and one log-sum-exp per
# row, and recomputes the scores block by block in the backward: linear in S,
# {glue:text}`ch07_attn_fused_mib:.2f` MiB, {glue:text}`ch07_attn_mem_ratio:.0f` times less
# at S = {glue:text}`ch07_attn_S:d` here.
#
# Time is $O(S^2)$ for both, since both compute every score: from S = 1024 to 2048 the plain
# path's time grew {glue:text}`ch07_attn_plain_growth:.1f` times and the fused kernel's
# {glue:text}`ch07_attn_fused_growth:.1f` times (exactly quadratic growth would be 4; more
# than 4 means each score got dearer, as when the plain path's score tensors outgrow the
# caches and every pass over them goes to main memory; three timings on a shared machine are
# also noisy, so read the growth as rough). At S = {glue:text}`ch07_attn_S:d` the fused kernel took
# {glue:text}`ch07_attn_fused_ms:.1f` ms against {glue:text}`ch07_attn_plain_ms:.1f` ms,
# {glue:text}`ch07_attn_time_word:s` time on this run ({glue:text}`ch07_device:s`). What it
# saves is memory traffic: the plain path writes the score matrix, reads it for the softmax,
# writes the weights and reads them again in the backward, while the fused kernel keeps each
# block in cache or on-chip memory; it pays with the recomputation in the backward. On a GPU,
# where memory bandwidth is usually the limit, that trade tends to favour the fused kernel; on
# a CPU the balance depends on the kernel and the sizes, so read the table rather than a
# rule. The reference `MultiHeadAttention(..., fused=True)` uses this kernel; the lessons use
# the plain path because it shows the weights.
#
# ## 7.7 Gradient checkpointing
#
# The seed lists gradient checkpointing among what Hugging Face offers. It trades time for
# memory, one block at a time: run the block's forward without keeping its activations, keep
# only its input, and in the backward run the forward once more to get them back. PyTorch has it
# as `torch.utils.checkpoint.checkpoint(block, *inputs, use_reentrant=False)`. We measure one
# block of the chapter's `DecoderOnlyLM` on 4 sequences of 128 tokens: the bytes kept for the
# backward (as in §7.1, the block's weights excluded) and the forward + backward time.

# %%
block = big_model.blocks.layers[0]
x_ck = torch.randn(4, 128, 256, device=device, requires_grad=True)
ck_runs = {
    "plain": lambda: block(x_ck, None),
    "checkpointed": lambda: checkpoint(block, x_ck, None, use_reentrant=False),
}
ck_mib, ck_ms = {}, {}
for name, fn in ck_runs.items():
    _, saved = saved_activation_bytes(fn, exclude=block.parameters())
    ck_mib[name] = saved / 2**20
    ck_ms[name] = median_ms(lambda: fn().sum().backward(), repeats=3)
    print(
        f"{name:13s}: kept for backward {ck_mib[name]:6.2f} MiB, "
        f"fwd+bwd {ck_ms[name]:6.1f} ms"
    )
x_mib = x_ck.numel() * x_ck.element_size() / 2**20
print(f"the block's input alone: {x_mib:.2f} MiB")
# Checkpointed, the block keeps only its input; its forward runs twice.
assert ck_mib["checkpointed"] <= x_mib + 1e-6 and ck_mib["plain"] > 4 * x_mib


# %% tags=["remove-cell"]
# The numbers the text quotes, for the book (this cell is hidden there).
glue("ch07_ck_plain_mib", ck_mib["plain"], display=False)
glue("ch07_ck_mib", ck_mib["checkpointed"], display=False)
glue("ch07_ck_time_ratio", ck_ms["checkpointed"] / ck_ms["plain"], display=False)

# %% [markdown]
# Checkpointed, the block kept {glue:text}`ch07_ck_mib:.2f` MiB for its backward instead of
# {glue:text}`ch07_ck_plain_mib:.2f` MiB: at most its input, which the previous block's output
# is anyway. The price is a second forward in the backward pass: forward + backward took
# {glue:text}`ch07_ck_time_ratio:.2f` times as long on this run. In a deep model one wraps
# every block (`for layer in layers: x = checkpoint(layer, x, mask, use_reentrant=False)`),
# and the activations kept shrink from all the blocks' internals to one input per block,
# plus one block's internals during its recomputation. It composes with autocast and DDP;
# `use_reentrant=False` is the variant PyTorch recommends (leaving the argument out warns and
# falls back to the older, reentrant variant, which gives the block's weights no gradient when
# none of its inputs requires one).
#
# ## 7.8 Recap
#
# - `torch.amp.autocast(device_type, dtype=...)`, not `torch.cuda.amp` (deprecated, and on a
#   CPU it warns and disables itself). bfloat16 on CPUs (float32's range, no scaler), float16
#   on GPUs with a `torch.amp.GradScaler`. Weights stay float32; the memory kept for the
#   backward shrinks, here to {glue:text}`ch07_amp_mem_ratio:.2f` of float32's. Whether it is faster depends
#   on the hardware: on a CPU without bfloat16 instructions it is slower; measure.
# - With a scaler: `scale(loss).backward()` → `unscale_` → clip → `scaler.step` →
#   `scaler.update`. Clipping before `unscale_` clips at `max_norm / scale`. `scaler.step`
#   skips steps with inf/NaN gradients; step the scheduler only when the optimizer stepped.
# - Accumulation equals the big batch when the micro-batch losses add up to the big batch's
#   loss: divide each summed loss by the step's total token count (dividing the mean by k is
#   right only for equal token counts). Zero once per step, step the scheduler once per step,
#   and do not let an epoch's leftover micro-batches leak into the next epoch's first step.
# - DDP is data parallel: whole model everywhere, different data per rank, gradients averaged.
#   When the model, its gradients and optimizer state do not fit one device, shard them
#   (FSDP, ZeRO), or split the model itself.
#   `DistributedSampler` + `set_epoch(epoch)`; `no_sync()` on all but the last micro-batch;
#   gloo on CPUs, NCCL on GPUs; started by `torchrun`. Two processes ended with the same
#   parameters as one process on the whole batch.
# - Fused attention (`F.scaled_dot_product_attention`) has the same FLOPs as the plain scores
#   but memory linear in the sequence length instead of quadratic.
# - Gradient checkpointing keeps a block's input instead of its activations and pays with a
#   second forward of the block in the backward pass.
#
# **Now practise:** open [the chapter 7 exercise](exercise.ipynb) in this folder. You will
# write an accumulation step, a mixed-precision step and a DDP loader; its check cells tell
# you which of this chapter's pitfalls you hit and send you back to the right section.

# %% [markdown]
# ## Check your understanding
#
# **1.** On a machine without a GPU, a colleague trains inside `with autocast():`, imported from
# `torch.cuda.amp`, and sees no change at all. Why? What does the current API look like, and
# which dtype do the weights have inside it?
#
# :::{dropdown} Answer
# `torch.cuda.amp.autocast` is deprecated and only ever affects CUDA operations: on a CPU it
# warns that it is deprecated and that CUDA is not available, and disables itself, so the
# colleague's computation runs in float32 exactly as before. The current API names the device: `torch.amp.autocast(device_type,
# dtype=...)`, with bfloat16 on a CPU. Autocast does not convert the model: the weights stay
# float32 (the master weights the optimizer updates), matrix products run in 16 bits, and
# operations that need range, such as the losses, run in float32; in the lesson the logits came
# out in the autocast dtype and the loss in float32. Read §7.1 'Mixed precision with torch.amp'.
# :::
#
# **2.** Why does float16 training need a `GradScaler` and bfloat16 training does not?
#
# :::{dropdown} Answer
# Float16 has a narrow range: values below about 3e-8 underflow to 0 (the lesson's 1e-8 became 0)
# and values past 65504 become infinite. Bfloat16 keeps float32's exponent range with fewer
# digits (the same smallest normal number, about 1.2e-38), so gradients practically never
# underflow and need no scaling. The scaler multiplies the loss by a large
# factor s so that the gradients stay representable, and divides them by s again before the
# optimizer uses them. Read §7.1 'Mixed precision with torch.amp' and §7.2 'GradScaler, unscale_
# and clipping'.
# :::
#
# **3.** With a `GradScaler`, a colleague calls `clip_grad_norm_(params, 1.0)` right after
# `scaler.scale(loss).backward()`. What does that clip at? What is the right order, and when
# should the scheduler step?
#
# :::{dropdown} Answer
# The gradients are still multiplied by the scale s, so clipping them at 1.0 clips the true
# gradients at 1/s: in the lesson the update came out smaller than the right one by the scale
# factor. The order is `scaler.scale(loss).backward()`, `scaler.unscale_(optimizer)`, clip,
# `scaler.step(optimizer)` (which does not unscale twice, and skips a step whose gradients hold
# an inf or NaN), `scaler.update()`. Step the scheduler only when the optimizer really stepped.
# Read §7.2 'GradScaler, unscale_ and clipping'.
# :::
#
# **4.** The seed accumulates gradients with `loss = loss / accumulation_steps`, where `loss` is
# the mean over each micro-batch's tokens. When does that give the big batch's gradient, and what
# is right in general? What else happens once per optimizer step?
#
# :::{dropdown} Answer
# Only when every micro-batch holds the same number of target tokens. The big batch weights every
# token by 1/N; the mean divided by k gives the tokens of short micro-batches more weight than
# those of long ones. In general, divide each micro-batch's *summed* loss by the total token
# count N of the whole step, counted before the first backward: in the lesson only that version
# matched the big batch's gradients when the lengths varied. Zero the gradients once per
# optimizer step (zeroing per micro-batch keeps only the last one), step the scheduler once per
# optimizer step, and under AMP unscale and clip once, after the last micro-batch. Read §7.3
# 'Gradient accumulation'.
# :::
#
# **5.** The seed lists DistributedDataParallel under {seedtr}`004:model parallelism`, splitting
# the model across cards, and its DDP loop has no `DistributedSampler`. What does DDP really do? What do the
# sampler and `set_epoch` fix?
#
# :::{dropdown} Answer
# DDP is data parallel: every process holds the whole model and reads its own slice of every
# batch, and an all-reduce averages the gradients after each backward, so the replicas take
# identical steps; the lesson's two processes ended with the same parameters as one process
# trained on the union of their batches. Without a `DistributedSampler` every rank reads the
# whole dataset and the all-reduce averages identical gradients: the extra processes do the same
# work for nothing. `sampler.set_epoch(epoch)` gives every epoch a new shuffle; without it every
# epoch repeats epoch 0's order. With accumulation, run all but the last micro-batch's backward
# under `model.no_sync()`. Read §7.4 'DistributedDataParallel is data parallel' and §7.5
# 'DistributedSampler and set_epoch'.
# :::
