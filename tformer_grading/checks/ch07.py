"""Checks for chapter 7, mixed precision, accumulation and DDP (book/ch07_scale).

The learner's training code is run on a tiny causal language model with the
inputs of each case; the parameters it ends with (and the GradScaler's scale)
are compared with the reference's. On a mismatch the known wrong variants are
run on the same inputs: the one that reproduces the learner's parameters names
the pitfall. The data-loading check is a behaviour check: it reads which
samples each rank gets in each epoch.
"""
from __future__ import annotations

import math
import sys
import warnings

import torch
from torch.utils.data import Dataset

from tformer_ref.device import get_device
from tformer_ref.toy_lm import TinyCausalLM, count_targets, lm_loss_sum, make_token_data
from ..guard.integrity import seal
from .diagnosis import (Case, Pitfall, Raised, Section, compare_to_reference, fail, passed, run,
                        single_threaded)

CHAPTER = "ch07_scale"
S_AMP = Section(CHAPTER, "7.1", "Mixed precision with torch.amp")
S_SCALER = Section(CHAPTER, "7.2", "GradScaler, unscale_ and clipping")
S_ACCUM = Section(CHAPTER, "7.3", "Gradient accumulation")
S_DDP = Section(CHAPTER, "7.4", "DistributedDataParallel is data parallel")
S_SAMPLER = Section(CHAPTER, "7.5", "DistributedSampler and set_epoch")
PAD = 0

# Diagnosed from behaviour (the autocast state seen inside loss_fn, the samples each rank reads)
# rather than by matching a wrong variant's output; listed here so the book's pitfall index has them.
NO_AUTOCAST = Pitfall(
    "forward not under autocast",
    "Wrap the forward in torch.amp.autocast(device_type, dtype=...). The seed's torch.cuda.amp.autocast is "
    "deprecated and does nothing for a CPU model.", S_AMP, None)
WRONG_AUTOCAST_DTYPE = Pitfall(
    "wrong autocast dtype",
    "The course uses bfloat16 on a CPU (float32's range, no scaler needed) and float16 with a GradScaler on CUDA.",
    S_AMP, None)
NO_SAMPLER = Pitfall(
    "no DistributedSampler",
    "Every rank reads the whole dataset, so the processes compute the same gradients and DDP buys nothing. Pass "
    "sampler=DistributedSampler(dataset, num_replicas=world_size, rank=rank) to the DataLoader (and no "
    "shuffle=True: the sampler shuffles).", S_SAMPLER, None)
RANKS_OVERLAP = Pitfall(
    "ranks overlap",
    "Several ranks read the same samples in one epoch. Every rank must shuffle with the same seed (the "
    "DistributedSampler's default) and then take its own share.", S_SAMPLER, None)
NO_SHUFFLE = Pitfall(
    "no shuffling",
    "Every epoch reads the samples in the same, sorted order. Use DistributedSampler(..., shuffle=True) (its "
    "default) and sampler.set_epoch(epoch).", S_SAMPLER, None)
NO_SET_EPOCH = Pitfall(
    "no set_epoch",
    "The order is shuffled but the same in every epoch. DistributedSampler seeds its shuffle with seed + epoch, and "
    "the epoch only changes when you call sampler.set_epoch(epoch) before iterating.", S_SAMPLER, None)
BEHAVIOUR_PITFALLS = [NO_AUTOCAST, WRONG_AUTOCAST_DTYPE, NO_SAMPLER, RANKS_OVERLAP, NO_SHUFFLE, NO_SET_EPOCH]


def _named(title: str, pitfall: Pitfall, detail: str) -> None:
    __tracebackhide__ = True
    fail(title, f"this looks like the pitfall '{pitfall.name}'. {detail} {pitfall.explanation}", pitfall.section)


def _model(dtype=torch.float64, seed=0):
    torch.manual_seed(seed)
    return TinyCausalLM(vocab=12, d_model=16, n_heads=2, max_len=10, pad_id=PAD).to(get_device(), dtype)


def _flat(model, *extra):
    return torch.cat([p.detach().flatten().double().cpu() for p in model.parameters()]
                     + [torch.tensor(list(extra), dtype=torch.float64)])


# --------------------------------------------------------------------------- gradient accumulation

def _loss_fn(model, batch):
    return lm_loss_sum(model, batch, PAD)


def _accum_reference(model, micro_batches, optimizer, scheduler, loss_fn):
    optimizer.zero_grad()
    n_total = sum(count_targets(b, PAD) for b in micro_batches)
    for batch in micro_batches:
        loss_sum, _ = loss_fn(model, batch)
        (loss_sum / n_total).backward()
    optimizer.step()
    scheduler.step()


def _accum_variant(*, divide="tokens", zero_each=False, zero=True, sched_each=False, step_each=False):
    def impl(model, micro_batches, optimizer, scheduler, loss_fn):
        k = len(micro_batches)
        n_total = sum(count_targets(b, PAD) for b in micro_batches)
        if zero:
            optimizer.zero_grad()
        for batch in micro_batches:
            if zero_each:
                optimizer.zero_grad()
            loss_sum, n = loss_fn(model, batch)
            loss = {"tokens": loss_sum / n_total, "batches": loss_sum / n / k,
                    "mean": loss_sum / n, "sum": loss_sum}[divide]
            loss.backward()
            if step_each:
                optimizer.step()
            if sched_each:
                scheduler.step()
        if not step_each:
            optimizer.step()
        if not sched_each:
            scheduler.step()
    return impl


ACCUM_PITFALLS = [
    Pitfall("loss not divided under accumulation",
            "Each micro-batch's mean loss goes into backward undivided, so the k gradients add up to k times the "
            "big batch's gradient: the same as multiplying the learning rate by k. Divide so that the k losses add "
            "up to the big batch's mean: by the step's total number of target tokens.",
            S_ACCUM, _accum_variant(divide="mean")),
    Pitfall("loss summed, not averaged",
            "You call backward on the summed token loss of each micro-batch without dividing at all: the gradient "
            "is N_tokens times the big batch's mean-loss gradient. Divide each micro-batch's summed loss by the "
            "total number of target tokens of the step.",
            S_ACCUM, _accum_variant(divide="sum")),
    Pitfall("divided by micro-batches, not by tokens",
            "You divide each micro-batch's mean loss by k (the seed's loss / accumulation_steps). That equals the "
            "big batch only when every micro-batch holds the same number of real tokens; with padding they do "
            "not, and short micro-batches weigh as much as long ones. Divide each micro-batch's summed loss by "
            "the total number of target tokens of the whole step.",
            S_ACCUM, _accum_variant(divide="batches")),
    Pitfall("zero_grad every micro-step",
            "optimizer.zero_grad() inside the micro-batch loop wipes what the earlier micro-batches accumulated: "
            "the step uses only the last micro-batch. Zero once per optimizer step, before the loop (or after "
            "the step).", S_ACCUM, _accum_variant(zero_each=True)),
    Pitfall("gradients never zeroed",
            "Nothing zeroes the gradients between optimizer steps, so each step also adds every earlier step's "
            "gradients. Call optimizer.zero_grad() once per optimizer step.", S_ACCUM, _accum_variant(zero=False)),
    Pitfall("optimizer stepped every micro-step",
            "optimizer.step() inside the micro-batch loop makes k small steps instead of one big one: that is "
            "training with the small batch, not accumulating. Step once, after the last micro-batch.",
            S_ACCUM, _accum_variant(step_each=True)),
    Pitfall("scheduler stepped every micro-step",
            "scheduler.step() inside the micro-batch loop advances the learning-rate schedule k times per "
            "optimizer step (warm-up ends k times too early). The schedule counts optimizer steps: step it once, "
            "after optimizer.step().", S_ACCUM, _accum_variant(sched_each=True)),
]


def _accum_case(seed, sizes, steps, min_len, momentum=0.0):
    """Two or three optimizer steps, each on micro-batches of the given sizes, SGD with a warm-up schedule."""
    def make():
        device = get_device()
        model = _model(seed=seed)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=momentum)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 4))
        data = make_token_data(sum(sizes) * steps, 10, vocab=12, pad_id=PAD, min_len=min_len, seed=seed).to(device)
        plan = []
        for step in data.split(sum(sizes)):
            plan.append(list(step.split(list(sizes))))
        return model, plan, optimizer, scheduler
    return make


def _accum_cases(hidden=False):
    configs = [(1, (4, 4, 4, 4), 2, 2), (2, (3, 5), 2, 3), (3, (8,), 2, 2)]
    if hidden:
        configs = [(4, (2, 6, 4), 3, 2), (5, (5, 5), 3, 9)]
    cases = []
    for seed, sizes, steps, min_len in configs:
        lengths = "equal" if min_len == 10 else "varying"
        cases.append(Case(f"{steps} steps of {len(sizes)} micro-batches of sizes {list(sizes)}, {lengths} lengths",
                          _accum_case(seed, sizes, steps, min_len, momentum=0.9 if hidden else 0.0)))
    return cases


def _simulate_accum(fn):
    def run(model, plan, optimizer, scheduler):
        for micro in plan:
            fn(model, micro, optimizer, scheduler, _loss_fn)
        return _flat(model, optimizer.param_groups[0]["lr"])
    return run


@single_threaded
def check_accumulation_step(accumulation_step, hidden: bool = False) -> None:
    """``accumulation_step(model, micro_batches, optimizer, scheduler, loss_fn)``: one optimizer step from the
    list ``micro_batches`` (token tensors [b_i, S]) equal to one step on their concatenation, where
    ``loss_fn(model, batch) -> (loss_sum, n_tokens)``."""
    __tracebackhide__ = True
    pitfalls = [Pitfall(p.name, p.explanation, p.section, _simulate_accum(p.impl)) for p in ACCUM_PITFALLS]
    compare_to_reference("accumulation_step", _accum_cases(hidden), _simulate_accum(accumulation_step),
                         _simulate_accum(_accum_reference), pitfalls, atol=1e-9, rtol=1e-7)


# --------------------------------------------------------------------------- one mixed-precision step

def _amp_reference(model, batch, loss_fn, optimizer, scaler, max_norm):
    device_type = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.amp.autocast(device_type, dtype=torch.float16 if device_type == "cuda" else torch.bfloat16):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()


def _amp_variant(*, unscale=True, clip="after", scaler_step=True, update=True, scale_loss=True, zero=True):
    def impl(model, batch, loss_fn, optimizer, scaler, max_norm):
        device_type = next(model.parameters()).device.type
        if zero:
            optimizer.zero_grad()
        with torch.amp.autocast(device_type, dtype=torch.float16 if device_type == "cuda" else torch.bfloat16):
            loss = loss_fn(model, batch)
        (scaler.scale(loss) if scale_loss else loss).backward()
        if clip == "before":
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        if unscale:
            scaler.unscale_(optimizer)
        if clip == "after":
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        if scaler_step:
            scaler.step(optimizer)
        else:
            optimizer.step()
        if update:
            scaler.update()
        return loss.detach()
    return impl


AMP_PITFALLS = [
    Pitfall("clipping before unscale_",
            "You clip while the gradients are still multiplied by the scaler's scale (e.g. 1024), so they are "
            "clipped at max_norm / scale and the update is far too small. Call scaler.unscale_(optimizer) first, "
            "then clip, then scaler.step(optimizer).", S_SCALER, _amp_variant(unscale=False, clip="before")),
    Pitfall("clipping before unscale_",
            "You clip before scaler.unscale_(optimizer), while the gradients are still multiplied by the scale: "
            "they are clipped at max_norm / scale. Unscale first, then clip.",
            S_SCALER, _amp_variant(clip="before")),
    Pitfall("gradients not clipped",
            "The gradient norm is never clipped to max_norm: after scaler.unscale_(optimizer), call "
            "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm).", S_SCALER, _amp_variant(clip="none")),
    Pitfall("optimizer.step() instead of scaler.step(optimizer)",
            "optimizer.step() steps even when the gradients overflowed to inf/NaN, and the parameters become NaN. "
            "scaler.step(optimizer) checks for inf/NaN and skips that step.",
            S_SCALER, _amp_variant(scaler_step=False)),
    Pitfall("optimizer.step() instead of scaler.step(optimizer)",
            "optimizer.step() on gradients that were never unscaled steps with gradients multiplied by the scale, "
            "and it does not skip overflowed steps. Use scaler.unscale_, clip, scaler.step(optimizer).",
            S_SCALER, _amp_variant(unscale=False, clip="none", scaler_step=False)),
    Pitfall("scaler.update() missing",
            "Without scaler.update() the scale never changes: after an overflow it must be lowered (and it grows "
            "back after a run of good steps). Call scaler.update() after scaler.step(optimizer).",
            S_SCALER, _amp_variant(update=False)),
    Pitfall("loss not scaled",
            "You call loss.backward() instead of scaler.scale(loss).backward(): unscale_ then divides unscaled "
            "gradients by the scale, and in float16 the small ones would have underflowed anyway.",
            S_SCALER, _amp_variant(scale_loss=False)),
    Pitfall("zero_grad missing",
            "The gradients are never zeroed, so every step adds the earlier steps' gradients. Call "
            "optimizer.zero_grad() at the start of each step.", S_SCALER, _amp_variant(zero=False)),
]


class _Recorder:
    """The check's loss_fn: mean token loss, recording whether the forward ran under autocast and in which dtype.
    With ``overflow`` the first call returns an infinite loss (as an fp16 overflow would)."""

    def __init__(self, overflow: bool):
        self.overflow, self.calls, self.states = overflow, 0, []

    def __call__(self, model, batch):
        device_type = next(model.parameters()).device.type
        enabled = torch.is_autocast_enabled(device_type)
        self.states.append((enabled, torch.get_autocast_dtype(device_type) if enabled else None))
        loss_sum, n = lm_loss_sum(model, batch, PAD)
        loss = loss_sum / n
        self.calls += 1
        return loss * float("inf") if (self.overflow and self.calls == 1) else loss


def _amp_case(seed, overflow, max_norm):
    def make():
        model = _model(torch.float32, seed=seed)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
        scaler = torch.amp.GradScaler(get_device().type, init_scale=2.0 ** 10)
        scaler.scale(torch.ones((), device=get_device()))  # creates the scale tensor, as a first step would
        batches = [make_token_data(6, 10, vocab=12, pad_id=PAD, min_len=3, seed=seed + s).to(get_device())
                   for s in range(2)]
        return model, batches, optimizer, scaler, max_norm, _Recorder(overflow)
    return make


def _amp_cases():
    return [Case("two steps, gradients clipped at 0.05", _amp_case(1, False, 0.05)),
            Case("an overflowing step, then a normal one", _amp_case(2, True, 0.05)),
            Case("two steps, max_norm 1e6 (no clipping needed)", _amp_case(3, False, 1e6))]


def _simulate_amp(fn):
    def run(model, batches, optimizer, scaler, max_norm, loss_fn):
        for batch in batches:
            fn(model, batch, loss_fn, optimizer, scaler, max_norm)
        return _flat(model, math.log2(scaler.get_scale()))
    return run


@single_threaded
def check_amp_step(amp_step) -> None:
    """``amp_step(model, batch, loss_fn, optimizer, scaler, max_norm)``: one mixed-precision training step."""
    __tracebackhide__ = True
    title = "amp_step"
    device_type = get_device().type
    want = torch.float16 if device_type == "cuda" else torch.bfloat16
    model, batches, optimizer, scaler, max_norm, loss_fn = _amp_case(1, False, 0.05)()
    out = run(amp_step, (model, batches[0], loss_fn, optimizer, scaler, max_norm))
    if not loss_fn.states:
        fail(title, f"your code raised {out!r}" if isinstance(out, Raised)
             else "your step never called loss_fn(model, batch).")
    enabled, dtype = loss_fn.states[0]
    if not enabled:
        _named(title, NO_AUTOCAST, f"loss_fn ran without {device_type} autocast; here that is "
                                   f"torch.amp.autocast('{device_type}', dtype={want}).")
    if dtype != want:
        _named(title, WRONG_AUTOCAST_DTYPE, f"The forward ran under autocast in {dtype}, not {want}.")
    pitfalls = [Pitfall(p.name, p.explanation, p.section, _simulate_amp(p.impl)) for p in AMP_PITFALLS]
    compare_to_reference(title, _amp_cases(), _simulate_amp(amp_step), _simulate_amp(_amp_reference), pitfalls,
                         atol=1e-6, rtol=1e-5)


# --------------------------------------------------------------------------- DistributedSampler and set_epoch

class IndexDataset(Dataset):
    """Sample i is the tensor i: a loader's batches then say which samples it read."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        return torch.tensor(i)


def _read(make_loader, n, rank, world, epoch, batch_size):
    """The sample indices ``make_loader`` yields, in order, and the batch sizes."""
    with warnings.catch_warnings():  # a warning on stderr would make nbgrader zero the cell
        warnings.simplefilter("ignore")
        loader = make_loader(IndexDataset(n), rank, world, epoch, batch_size)
        batches = list(loader)
    order, sizes = [], []
    for batch in batches:
        if isinstance(batch, (list, tuple)) and len(batch) == 1:
            batch = batch[0]
        if not isinstance(batch, torch.Tensor):
            raise TypeError(f"expected batches of sample tensors, got {type(batch).__name__}")
        order += batch.flatten().tolist()
        sizes.append(batch.numel())
    return order, sizes


def check_make_loader(make_loader, world_sizes=(2, 4), n: int = 24, batch_size: int = 3) -> None:
    """``make_loader(dataset, rank, world_size, epoch, batch_size)``: the DataLoader rank ``rank`` uses in
    epoch ``epoch``. Each epoch the ranks must split the dataset between them (no sample read twice), in a
    shuffled order that changes from epoch to epoch and is the same whenever asked again."""
    __tracebackhide__ = True
    title = "make_loader"
    for world in world_sizes:
        seen = {}
        for epoch in range(3):
            for rank in range(world):
                try:
                    order, sizes = _read(make_loader, n, rank, world, epoch, batch_size)
                except Exception as exc:  # the learner's code may raise anything
                    fail(title, f"make_loader(dataset, rank={rank}, world_size={world}, epoch={epoch}, "
                                f"batch_size={batch_size}) failed: {type(exc).__name__}: {exc}")
                if any(s > batch_size for s in sizes):
                    fail(title, f"batches of {max(sizes)} samples, expected at most batch_size={batch_size}.")
                seen[rank, epoch] = order
        where = f"(world_size={world}, {n} samples)"
        first = seen[0, 0]
        if len(first) == n and all(sorted(seen[r, 0]) == list(range(n)) for r in range(world)):
            _named(title, NO_SAMPLER, f"Each of the {world} ranks read all {n} samples in epoch 0 {where}.")
        for epoch in range(3):
            ranks = [seen[r, epoch] for r in range(world)]
            together = [i for order in ranks for i in order]
            distinct = len(set(together))
            # DistributedSampler pads with repeats (or drops, with drop_last) up to world_size - 1 samples
            # so that every rank gets as many: more overlap than that means the ranks disagree.
            if len(together) - distinct >= world:
                _named(title, RANKS_OVERLAP, f"In epoch {epoch} {where} {len(together) - distinct} samples were "
                                             "read by more than one rank.")
            if distinct <= n - world:
                fail(title, f"in epoch {epoch} {where} the ranks together read only {distinct} of the {n} "
                            "samples: each epoch must cover the dataset.", S_SAMPLER)
        again, _ = _read(make_loader, n, 0, world, 1, batch_size)
        if again != seen[0, 1]:
            fail(title, f"two calls for the same rank and epoch gave different orders {where}: the shuffle must "
                        "be seeded (DistributedSampler(..., seed=...) does it), or the ranks disagree on it.",
                 S_SAMPLER)
        if first == sorted(first) and seen[0, 1] == first:
            _named(title, NO_SHUFFLE, f"Rank 0 read {first} in epochs 0 and 1 {where}.")
        if seen[0, 1] == first and seen[0, 2] == first:
            _named(title, NO_SET_EPOCH, f"Rank 0 read {first} in epochs 0, 1 and 2 {where}.")
    passed(title, f"ranks split each epoch's samples, reshuffled every epoch (world sizes {list(world_sizes)})")


# --------------------------------------------------------------------------- written by hand?

def _entered_code(fn, args) -> set:
    """The code objects Python enters while ``fn(*args)`` runs."""
    entered = set()

    def profile(frame, event, arg):
        if event == "call":
            entered.add(frame.f_code)

    old = sys.getprofile()
    sys.setprofile(profile)
    try:
        run(fn, args)
    finally:
        sys.setprofile(old)
    return entered


def _forbidden_code() -> dict:
    from tformer_ref import accumulation, amp
    fns = {"tformer_ref.accumulation.train_accumulated": accumulation.train_accumulated,
           "tformer_ref.accumulation.train_big_batch": accumulation.train_big_batch,
           "tformer_ref.amp.optimizer_step": amp.optimizer_step,
           "the check's own reference": _accum_reference}
    codes = {f.__code__: name for name, f in fns.items()}
    codes[_amp_reference.__code__] = "the check's own reference"
    return codes


@single_threaded
def check_written_by_hand(fn, kind: str) -> None:
    """Hidden test: ``fn`` (an ``accumulation_step`` or ``amp_step``) does not call the reference's training code."""
    __tracebackhide__ = True
    if kind == "accumulation_step":
        model, plan, optimizer, scheduler = _accum_cases()[1].make()
        args = (model, plan[0], optimizer, scheduler, _loss_fn)
    elif kind == "amp_step":
        model, batches, optimizer, scaler, max_norm, loss_fn = _amp_case(1, False, 0.05)()
        args = (model, batches[0], loss_fn, optimizer, scaler, max_norm)
    else:
        raise ValueError(f"kind must be 'accumulation_step' or 'amp_step', got {kind!r}")
    forbidden = _forbidden_code()
    used = sorted({forbidden[c] for c in _entered_code(fn, args) if c in forbidden})
    if used:
        fail(kind, f"your code calls {', '.join(used)}: the exercise is to write the step yourself.")
    passed(kind, "written by hand, no reference shortcut")


seal(__name__)
