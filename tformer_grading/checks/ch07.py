"""Checks for chapter 7, mixed precision, accumulation and DDP (book/ch07_scale).

The learner's training code is run on a tiny causal language model with the
inputs of each case; the parameters it ends with (and the GradScaler's scale)
are compared with the reference's. On a mismatch the known wrong variants are
run on the same inputs: the one that reproduces the learner's parameters names
the pitfall. Each wrong variant is the private function just above its
``Pitfall``. The data-loading check is a behaviour check: it reads which samples
each rank gets in each epoch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.nn.utils import clip_grad_norm_
from torch.optim.lr_scheduler import LambdaLR
from torch.utils.data import Dataset

from tformer_ref.device import get_device
from tformer_ref.toy_lm import TinyCausalLM, count_targets, lm_loss_sum, make_token_data
from ..guard.integrity import seal
from .delegation import check_not_delegated
from .diagnosis import (Case, Diagnosis, Pitfall, Raised, Section, compare_to_reference,
                        fail, passed, quiet, run, single_threaded)

CHAPTER = "ch07_scale"
S_AMP = Section(CHAPTER, "7.1", "Mixed precision with torch.amp")
S_SCALER = Section(CHAPTER, "7.2", "GradScaler, unscale_ and clipping")
S_ACCUM = Section(CHAPTER, "7.3", "Gradient accumulation")
S_DDP = Section(CHAPTER, "7.4", "DistributedDataParallel is data parallel")
S_SAMPLER = Section(CHAPTER, "7.5", "DistributedSampler and set_epoch")
PAD = 0


def _model(dtype=torch.float64, seed=0):
    torch.manual_seed(seed)
    model = TinyCausalLM(vocab=12, d_model=16, n_heads=2, max_len=10, pad_id=PAD)
    return model.to(get_device(), dtype)


def _flat(model, *extra):
    return torch.cat([p.detach().flatten().double().cpu() for p in model.parameters()]
                     + [torch.tensor(list(extra), dtype=torch.float64)])


# ---------------------------------------------------------------- gradient accumulation

def _loss_fn(model, batch):
    return lm_loss_sum(model, batch, PAD)


def _accum_reference(model, micro_batches, optimizer, scheduler, loss_fn):
    optimizer.zero_grad()
    n_total = sum(count_targets(b, PAD) for b in micro_batches)
    for batch in micro_batches:
        loss_sum, _ = loss_fn(model, batch)
        # The k terms add up to (all token losses) / (all tokens): the big batch's mean.
        (loss_sum / n_total).backward()
    optimizer.step()
    scheduler.step()


def _accum_mean_per_micro_batch(model, micro_batches, optimizer, scheduler, loss_fn):
    optimizer.zero_grad()
    for batch in micro_batches:
        loss_sum, n = loss_fn(model, batch)
        (loss_sum / n).backward()
    optimizer.step()
    scheduler.step()


MEAN_NOT_DIVIDED = Pitfall(
    "loss not divided under accumulation",
    "Each micro-batch's mean loss goes into backward undivided, so the k gradients add "
    "up to k times the big batch's gradient: the same as multiplying the learning rate "
    "by k. Divide so that the k losses add up to the big batch's mean: by the step's "
    "total number of target tokens.",
    S_ACCUM, _accum_mean_per_micro_batch)


def _accum_sum_undivided(model, micro_batches, optimizer, scheduler, loss_fn):
    optimizer.zero_grad()
    for batch in micro_batches:
        loss_sum, _ = loss_fn(model, batch)
        loss_sum.backward()
    optimizer.step()
    scheduler.step()


SUM_NOT_DIVIDED = Pitfall(
    "loss summed, not averaged",
    "You call backward on the summed token loss of each micro-batch without dividing "
    "at all: the gradient is N_tokens times the big batch's mean-loss gradient. Divide "
    "each micro-batch's summed loss by the total number of target tokens of the step.",
    S_ACCUM, _accum_sum_undivided)


def _accum_mean_over_k(model, micro_batches, optimizer, scheduler, loss_fn):
    optimizer.zero_grad()
    k = len(micro_batches)
    for batch in micro_batches:
        loss_sum, n = loss_fn(model, batch)
        (loss_sum / n / k).backward()
    optimizer.step()
    scheduler.step()


DIVIDED_BY_K = Pitfall(
    "divided by micro-batches, not by tokens",
    "You divide each micro-batch's mean loss by k (the seed's loss / "
    "accumulation_steps). That equals the big batch only when every micro-batch holds "
    "the same number of real tokens; with padding they do not, and short micro-batches "
    "weigh as much as long ones. Divide each micro-batch's summed loss by the total "
    "number of target tokens of the whole step.",
    S_ACCUM, _accum_mean_over_k)


def _accum_zero_grad_inside_loop(model, micro_batches, optimizer, scheduler, loss_fn):
    n_total = sum(count_targets(b, PAD) for b in micro_batches)
    for batch in micro_batches:
        optimizer.zero_grad()
        loss_sum, _ = loss_fn(model, batch)
        (loss_sum / n_total).backward()
    optimizer.step()
    scheduler.step()


ZERO_EACH_MICRO_STEP = Pitfall(
    "zero_grad every micro-step",
    "optimizer.zero_grad() inside the micro-batch loop wipes what the earlier "
    "micro-batches accumulated: the step uses only the last micro-batch. Zero once per "
    "optimizer step, before the loop (or after the step).",
    S_ACCUM, _accum_zero_grad_inside_loop)


def _accum_never_zeroed(model, micro_batches, optimizer, scheduler, loss_fn):
    n_total = sum(count_targets(b, PAD) for b in micro_batches)
    for batch in micro_batches:
        loss_sum, _ = loss_fn(model, batch)
        (loss_sum / n_total).backward()
    optimizer.step()
    scheduler.step()


NEVER_ZEROED = Pitfall(
    "gradients never zeroed",
    "Nothing zeroes the gradients between optimizer steps, so each step also adds "
    "every earlier step's gradients. Call optimizer.zero_grad() once per optimizer "
    "step.",
    S_ACCUM, _accum_never_zeroed)


def _accum_optimizer_inside_loop(model, micro_batches, optimizer, scheduler, loss_fn):
    optimizer.zero_grad()
    n_total = sum(count_targets(b, PAD) for b in micro_batches)
    for batch in micro_batches:
        loss_sum, _ = loss_fn(model, batch)
        (loss_sum / n_total).backward()
        optimizer.step()
    scheduler.step()


OPTIMIZER_EACH_MICRO_STEP = Pitfall(
    "optimizer stepped every micro-step",
    "optimizer.step() inside the micro-batch loop makes k small steps instead of one "
    "big one: that is training with the small batch, not accumulating. Step once, "
    "after the last micro-batch.",
    S_ACCUM, _accum_optimizer_inside_loop)


def _accum_scheduler_inside_loop(model, micro_batches, optimizer, scheduler, loss_fn):
    optimizer.zero_grad()
    n_total = sum(count_targets(b, PAD) for b in micro_batches)
    for batch in micro_batches:
        loss_sum, _ = loss_fn(model, batch)
        (loss_sum / n_total).backward()
        scheduler.step()
    optimizer.step()


SCHEDULER_EACH_MICRO_STEP = Pitfall(
    "scheduler stepped every micro-step",
    "scheduler.step() inside the micro-batch loop advances the learning-rate schedule "
    "k times per optimizer step (warm-up ends k times too early). The schedule counts "
    "optimizer steps: step it once, after optimizer.step().",
    S_ACCUM, _accum_scheduler_inside_loop)

ACCUM_PITFALLS = (MEAN_NOT_DIVIDED, SUM_NOT_DIVIDED, DIVIDED_BY_K, ZERO_EACH_MICRO_STEP,
                  NEVER_ZEROED, OPTIMIZER_EACH_MICRO_STEP, SCHEDULER_EACH_MICRO_STEP)


def _accum_case(seed, sizes, steps, min_len, momentum=0.0):
    """Several optimizer steps, each on micro-batches of the given sizes; SGD with a
    warm-up schedule."""
    def make():
        model = _model(seed=seed)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=momentum)
        warm_up = LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 4))
        data = make_token_data(sum(sizes) * steps, 10, vocab=12, pad_id=PAD,
                               min_len=min_len, seed=seed).to(get_device())
        plan = [list(step.split(list(sizes))) for step in data.split(sum(sizes))]
        return model, plan, optimizer, warm_up
    return make


def _accum_cases(hidden=False):
    configs = [(1, (4, 4, 4, 4), 2, 2), (2, (3, 5), 2, 3), (3, (8,), 2, 2)]
    if hidden:
        configs = [(4, (2, 6, 4), 3, 2), (5, (5, 5), 3, 9)]
    cases = []
    for seed, sizes, steps, min_len in configs:
        lengths = "equal" if min_len == 10 else "varying"
        label = (f"{steps} steps of {len(sizes)} micro-batches of sizes {list(sizes)}, "
                 f"{lengths} lengths")
        momentum = 0.9 if hidden else 0.0
        cases.append(Case(label, _accum_case(seed, sizes, steps, min_len, momentum)))
    return cases


def _simulate_accum(fn):
    def simulate(model, plan, optimizer, scheduler):
        for micro in plan:
            fn(model, micro, optimizer, scheduler, _loss_fn)
        return _flat(model, optimizer.param_groups[0]["lr"])
    return simulate


@single_threaded
def check_accumulation_step(accumulation_step, hidden: bool = False) -> None:
    """``accumulation_step(model, micro_batches, optimizer, scheduler, loss_fn)``: one
    optimizer step from the list ``micro_batches`` (token tensors [b_i, S]) equal to one
    step on their concatenation, where
    ``loss_fn(model, batch) -> (loss_sum, n_tokens)``."""
    __tracebackhide__ = True
    compare_to_reference("accumulation_step", _accum_cases(hidden), accumulation_step,
                         _accum_reference, ACCUM_PITFALLS, atol=1e-9, rtol=1e-7,
                         adapt=_simulate_accum)


# ------------------------------------------------------------- one mixed-precision step

def _amp_dtype(device_type):
    return torch.float16 if device_type == "cuda" else torch.bfloat16


def _autocast_loss(model, batch, loss_fn):
    """The forward under autocast, in the course's dtype for the model's device."""
    device_type = next(model.parameters()).device.type
    with torch.amp.autocast(device_type, dtype=_amp_dtype(device_type)):
        return loss_fn(model, batch)


def _amp_reference(model, batch, loss_fn, optimizer, scaler, max_norm):
    optimizer.zero_grad()
    loss = _autocast_loss(model, batch, loss_fn)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)  # true-sized gradients: now max_norm means what it says
    clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)  # skipped when a gradient is inf/NaN
    scaler.update()
    return loss.detach()


def _amp_clip_scaled_gradients(model, batch, loss_fn, optimizer, scaler, max_norm):
    optimizer.zero_grad()
    loss = _autocast_loss(model, batch, loss_fn)
    scaler.scale(loss).backward()
    clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()


CLIPPED_SCALED = Pitfall(
    "clipping before unscale_",
    "You clip while the gradients are still multiplied by the scaler's scale (e.g. "
    "1024), so they are clipped at max_norm / scale and the update is far too small. "
    "Call scaler.unscale_(optimizer) first, then clip, then scaler.step(optimizer).",
    S_SCALER, _amp_clip_scaled_gradients)


def _amp_clip_then_unscale(model, batch, loss_fn, optimizer, scaler, max_norm):
    optimizer.zero_grad()
    loss = _autocast_loss(model, batch, loss_fn)
    scaler.scale(loss).backward()
    clip_grad_norm_(model.parameters(), max_norm)
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()


CLIPPED_THEN_UNSCALED = Pitfall(
    "clipping before unscale_",
    "You clip before scaler.unscale_(optimizer), while the gradients are still "
    "multiplied by the scale: they are clipped at max_norm / scale. Unscale first, "
    "then clip.",
    S_SCALER, _amp_clip_then_unscale)


def _amp_no_clipping(model, batch, loss_fn, optimizer, scaler, max_norm):
    optimizer.zero_grad()
    loss = _autocast_loss(model, batch, loss_fn)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()


NOT_CLIPPED = Pitfall(
    "gradients not clipped",
    "The gradient norm is never clipped to max_norm: after scaler.unscale_(optimizer), "
    "call torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm).",
    S_SCALER, _amp_no_clipping)


def _amp_optimizer_step(model, batch, loss_fn, optimizer, scaler, max_norm):
    optimizer.zero_grad()
    loss = _autocast_loss(model, batch, loss_fn)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    scaler.update()
    return loss.detach()


OPTIMIZER_STEP = Pitfall(
    "optimizer.step() instead of scaler.step(optimizer)",
    "optimizer.step() steps even when the gradients overflowed to inf/NaN, and the "
    "parameters become NaN. scaler.step(optimizer) checks for inf/NaN and skips that "
    "step.",
    S_SCALER, _amp_optimizer_step)


def _amp_optimizer_step_on_scaled(model, batch, loss_fn, optimizer, scaler, max_norm):
    optimizer.zero_grad()
    loss = _autocast_loss(model, batch, loss_fn)
    scaler.scale(loss).backward()
    optimizer.step()
    scaler.update()  # no inf check was recorded: GradScaler raises
    return loss.detach()


OPTIMIZER_STEP_SCALED = Pitfall(
    "optimizer.step() instead of scaler.step(optimizer)",
    "optimizer.step() on gradients that were never unscaled steps with gradients "
    "multiplied by the scale, and it does not skip overflowed steps. Use "
    "scaler.unscale_, clip, scaler.step(optimizer).",
    S_SCALER, _amp_optimizer_step_on_scaled)


def _amp_no_update(model, batch, loss_fn, optimizer, scaler, max_norm):
    optimizer.zero_grad()
    loss = _autocast_loss(model, batch, loss_fn)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    return loss.detach()


NO_UPDATE = Pitfall(
    "scaler.update() missing",
    "Without scaler.update() the scale never changes: after an overflow it must be "
    "lowered (and it grows back after a run of good steps). Call scaler.update() after "
    "scaler.step(optimizer).",
    S_SCALER, _amp_no_update)


def _amp_unscaled_backward(model, batch, loss_fn, optimizer, scaler, max_norm):
    optimizer.zero_grad()
    loss = _autocast_loss(model, batch, loss_fn)
    loss.backward()
    scaler.unscale_(optimizer)
    clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()


LOSS_NOT_SCALED = Pitfall(
    "loss not scaled",
    "You call loss.backward() instead of scaler.scale(loss).backward(): unscale_ then "
    "divides unscaled gradients by the scale, and in float16 the small ones would have "
    "underflowed anyway.",
    S_SCALER, _amp_unscaled_backward)


def _amp_no_zero_grad(model, batch, loss_fn, optimizer, scaler, max_norm):
    loss = _autocast_loss(model, batch, loss_fn)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()


AMP_NOT_ZEROED = Pitfall(
    "zero_grad missing",
    "The gradients are never zeroed, so every step adds the earlier steps' gradients. "
    "Call optimizer.zero_grad() at the start of each step.",
    S_SCALER, _amp_no_zero_grad)

AMP_PITFALLS = (CLIPPED_SCALED, CLIPPED_THEN_UNSCALED, NOT_CLIPPED, OPTIMIZER_STEP,
                OPTIMIZER_STEP_SCALED, NO_UPDATE, LOSS_NOT_SCALED, AMP_NOT_ZEROED)

# Seen from behaviour (the autocast state inside loss_fn), before any comparison.
NO_AUTOCAST = Diagnosis(
    "forward not under autocast",
    "Wrap the forward in torch.amp.autocast(device_type, dtype=...). The seed's "
    "torch.cuda.amp.autocast is deprecated and does nothing for a CPU model.",
    S_AMP)
WRONG_AUTOCAST_DTYPE = Diagnosis(
    "wrong autocast dtype",
    "The course uses bfloat16 on a CPU (float32's range, no scaler needed) and float16 "
    "with a GradScaler on CUDA.",
    S_AMP)


class _Recorder:
    """The check's loss_fn: mean token loss, recording whether the forward ran under
    autocast and in which dtype. With ``overflow`` the first call returns an infinite
    loss (as an fp16 overflow would)."""

    def __init__(self, overflow: bool):
        self.overflow, self.calls, self.states = overflow, 0, []

    def __call__(self, model, batch):
        device_type = next(model.parameters()).device.type
        enabled = torch.is_autocast_enabled(device_type)
        dtype = torch.get_autocast_dtype(device_type) if enabled else None
        self.states.append((enabled, dtype))
        loss_sum, n = lm_loss_sum(model, batch, PAD)
        loss = loss_sum / n
        self.calls += 1
        return loss * float("inf") if (self.overflow and self.calls == 1) else loss


def _amp_case(seed, overflow, max_norm):
    def make():
        device = get_device()
        model = _model(torch.float32, seed=seed)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
        scaler = torch.amp.GradScaler(device.type, init_scale=2.0 ** 10)
        scaler.scale(torch.ones((), device=device))  # a first step creates the scale
        batches = [make_token_data(6, 10, vocab=12, pad_id=PAD, min_len=3,
                                   seed=seed + s).to(device) for s in range(2)]
        return model, batches, optimizer, scaler, max_norm, _Recorder(overflow)
    return make


def _amp_cases():
    return [Case("two steps, gradients clipped at 0.05", _amp_case(1, False, 0.05)),
            Case("an overflowing step, then a normal one", _amp_case(2, True, 0.05)),
            Case("two steps, max_norm 1e6 (no clipping needed)",
                 _amp_case(3, False, 1e6))]


def _simulate_amp(fn):
    def simulate(model, batches, optimizer, scaler, max_norm, loss_fn):
        for batch in batches:
            fn(model, batch, loss_fn, optimizer, scaler, max_norm)
        return _flat(model, math.log2(scaler.get_scale()))
    return simulate


def _autocast_in_loss_fn(title, amp_step):
    """(enabled, dtype): the autocast state of the learner's first call of loss_fn."""
    __tracebackhide__ = True
    model, batches, optimizer, scaler, max_norm, loss_fn = _amp_case(1, False, 0.05)()
    out = run(amp_step, (model, batches[0], loss_fn, optimizer, scaler, max_norm))
    if not loss_fn.states:
        fail(title, f"your code raised {out!r}" if isinstance(out, Raised)
             else "your step never called loss_fn(model, batch).")
    return loss_fn.states[0]


@single_threaded
def check_amp_step(amp_step) -> None:
    """``amp_step(model, batch, loss_fn, optimizer, scaler, max_norm)``: one
    mixed-precision training step."""
    __tracebackhide__ = True
    title = "amp_step"
    device_type = get_device().type
    want = _amp_dtype(device_type)
    enabled, dtype = _autocast_in_loss_fn(title, amp_step)
    if not enabled:
        NO_AUTOCAST.fail(title, f"loss_fn ran without {device_type} autocast; here "
                                f"that is torch.amp.autocast('{device_type}', "
                                f"dtype={want}).")
    if dtype != want:
        WRONG_AUTOCAST_DTYPE.fail(title, f"The forward ran under autocast in {dtype}, "
                                         f"not {want}.")
    compare_to_reference(title, _amp_cases(), amp_step, _amp_reference, AMP_PITFALLS,
                         atol=1e-6, rtol=1e-5, adapt=_simulate_amp)


# ----------------------------------------------------- DistributedSampler and set_epoch

EPOCHS = 3


class IndexDataset(Dataset):
    """Sample i is the tensor i: a loader's batches then say which samples it read."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        return torch.tensor(i)


BATCH_TOO_BIG = Diagnosis(
    "batches larger than batch_size",
    "Each rank's DataLoader must yield at most batch_size samples at a time: pass "
    "batch_size=batch_size to the DataLoader.",
    S_SAMPLER)


def _read(title, make_loader, n, rank, world, epoch, batch_size):
    """The sample indices, in order, of what ``make_loader`` gives ``rank``."""
    __tracebackhide__ = True
    call = (f"make_loader(dataset, rank={rank}, world_size={world}, epoch={epoch}, "
            f"batch_size={batch_size})")
    try:
        with quiet():  # a warning on stderr would make nbgrader zero the cell
            batches = list(make_loader(IndexDataset(n), rank, world, epoch, batch_size))
        batches = [b[0] if isinstance(b, (list, tuple)) and len(b) == 1 else b
                   for b in batches]
        for batch in batches:
            if not isinstance(batch, torch.Tensor):
                raise TypeError("expected batches of sample tensors, got "
                                f"{type(batch).__name__}")
    except Exception as exc:  # the learner's code may raise anything
        fail(title, f"{call} failed: {type(exc).__name__}: {exc}")
    biggest = max((b.numel() for b in batches), default=0)
    if biggest > batch_size:
        BATCH_TOO_BIG.fail(title, f"{call} gave batches of {biggest} samples.")
    return [i for batch in batches for i in batch.flatten().tolist()]


@dataclass(frozen=True)
class _Reads:
    """What each rank read in each epoch (``order[rank, epoch]``), and rank 0's epoch 1
    read a second time (``again``)."""

    world: int
    n: int
    order: dict
    again: list

    def together(self, epoch):
        return [i for rank in range(self.world) for i in self.order[rank, epoch]]


def _read_all(title, make_loader, world, n, batch_size) -> _Reads:
    __tracebackhide__ = True
    order = {(rank, epoch): _read(title, make_loader, n, rank, world, epoch, batch_size)
             for epoch in range(EPOCHS) for rank in range(world)}
    again = _read(title, make_loader, n, 0, world, 1, batch_size)
    return _Reads(world, n, order, again)


# Each probe returns what it saw when the loader shows its mistake, else None.

def _every_rank_reads_everything(reads):
    everything = list(range(reads.n))
    if all(sorted(reads.order[rank, 0]) == everything for rank in range(reads.world)):
        return f"Each of the {reads.world} ranks read all {reads.n} samples in epoch 0"
    return None


NO_SAMPLER = Diagnosis(
    "no DistributedSampler",
    "Every rank reads the whole dataset, so the processes compute the same gradients "
    "and DDP buys nothing. Pass sampler=DistributedSampler(dataset, "
    "num_replicas=world_size, rank=rank) to the DataLoader (and no shuffle=True: the "
    "sampler shuffles).",
    S_SAMPLER)


def _samples_read_twice(reads):
    for epoch in range(EPOCHS):
        together = reads.together(epoch)
        repeats = len(together) - len(set(together))
        # DistributedSampler pads with repeats (or drops, with drop_last) up to
        # world_size - 1 samples so that every rank gets as many: more overlap means the
        # ranks disagree.
        if repeats >= reads.world:
            return f"In epoch {epoch} {repeats} samples were read by more than one rank"
    return None


RANKS_OVERLAP = Diagnosis(
    "ranks overlap",
    "Several ranks read the same samples in one epoch. Every rank must shuffle with "
    "the same seed (the DistributedSampler's default) and then take its own share.",
    S_SAMPLER)


def _samples_missed(reads):
    for epoch in range(EPOCHS):
        distinct = len(set(reads.together(epoch)))
        if distinct <= reads.n - reads.world:
            return (f"In epoch {epoch} the ranks together read only {distinct} of the "
                    f"{reads.n} samples")
    return None


EPOCH_INCOMPLETE = Diagnosis(
    "epoch misses samples",
    "Each epoch the ranks together must read the whole dataset; DistributedSampler "
    "gives every rank its share (padding, or with drop_last dropping, fewer than "
    "world_size samples).",
    S_SAMPLER)


def _order_changes_on_repeat(reads):
    if reads.again != reads.order[0, 1]:
        return "Two calls for the same rank and epoch gave different orders"
    return None


UNSEEDED_SHUFFLE = Diagnosis(
    "shuffle not seeded",
    "The ranks are separate processes: they agree on how to split an epoch only when "
    "each computes the same shuffle, so the shuffle must be seeded "
    "(DistributedSampler(..., seed=...) does it).",
    S_SAMPLER)


def _sorted_every_epoch(reads):
    first = reads.order[0, 0]
    if first == sorted(first) and reads.order[0, 1] == first:
        return f"Rank 0 read {first} in epochs 0 and 1"
    return None


NO_SHUFFLE = Diagnosis(
    "no shuffling",
    "Every epoch reads the samples in the same, sorted order. Use "
    "DistributedSampler(..., shuffle=True) (its default) and sampler.set_epoch(epoch).",
    S_SAMPLER)


def _same_order_every_epoch(reads):
    first = reads.order[0, 0]
    if reads.order[0, 1] == first and reads.order[0, 2] == first:
        return f"Rank 0 read {first} in epochs 0, 1 and 2"
    return None


NO_SET_EPOCH = Diagnosis(
    "no set_epoch",
    "The order is shuffled but the same in every epoch. DistributedSampler seeds its "
    "shuffle with seed + epoch, and the epoch only changes when you call "
    "sampler.set_epoch(epoch) before iterating.",
    S_SAMPLER)

# In this order: the first probe that sees a mistake names it.
LOADER_PROBES = ((_every_rank_reads_everything, NO_SAMPLER),
                 (_samples_read_twice, RANKS_OVERLAP),
                 (_samples_missed, EPOCH_INCOMPLETE),
                 (_order_changes_on_repeat, UNSEEDED_SHUFFLE),
                 (_sorted_every_epoch, NO_SHUFFLE),
                 (_same_order_every_epoch, NO_SET_EPOCH))


def check_make_loader(make_loader, world_sizes=(2, 4), n: int = 24,
                      batch_size: int = 3) -> None:
    """``make_loader(dataset, rank, world_size, epoch, batch_size)``: the DataLoader
    rank ``rank`` uses in epoch ``epoch``. Each epoch the ranks must split the dataset
    between them (no sample read twice), in a shuffled order that changes from epoch to
    epoch and is the same whenever asked again."""
    __tracebackhide__ = True
    title = "make_loader"
    for world in world_sizes:
        reads = _read_all(title, make_loader, world, n, batch_size)
        for probe, diagnosis in LOADER_PROBES:
            seen = probe(reads)
            if seen is not None:
                diagnosis.fail(title, f"{seen} (world_size={world}, {n} samples).")
    passed(title, f"ranks split each epoch's samples, reshuffled every epoch "
                  f"(world sizes {list(world_sizes)})")


# --------------------------------------------------------------------- written by hand?

def _shortcuts() -> dict:
    """The code objects a step written by hand never enters: the course's training
    code."""
    from tformer_ref import accumulation, amp

    course = (accumulation.train_accumulated, accumulation.train_big_batch,
              amp.optimizer_step)
    codes = {fn.__code__: f"{fn.__module__}.{fn.__name__}" for fn in course}
    # _autocast_loss too: it is part of the reference's step.
    for fn in (_accum_reference, _amp_reference, _autocast_loss):
        codes[fn.__code__] = "the check's own reference"
    return codes


@single_threaded
def check_accumulation_by_hand(accumulation_step) -> None:
    """Hidden test: ``accumulation_step`` does not call the course's training code."""
    __tracebackhide__ = True
    model, plan, optimizer, scheduler = _accum_cases()[1].make()
    args = (model, plan[0], optimizer, scheduler, _loss_fn)
    check_not_delegated("accumulation_step", lambda: run(accumulation_step, args),
                        forbidden_code=_shortcuts())


@single_threaded
def check_amp_by_hand(amp_step) -> None:
    """Hidden test: ``amp_step`` does not call the course's training code."""
    __tracebackhide__ = True
    model, batches, optimizer, scaler, max_norm, loss_fn = _amp_case(1, False, 0.05)()
    args = (model, batches[0], loss_fn, optimizer, scaler, max_norm)
    check_not_delegated("amp_step", lambda: run(amp_step, args),
                        forbidden_code=_shortcuts())


seal(__name__)
