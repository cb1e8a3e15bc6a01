"""The chapter 7 checks, tested with banks of wrong implementations (each rejected with
its named diagnosis) and right ones written differently (each accepted). Each wrong one
says what bug it is, spelled as a learner might, not as the check's own variant is."""

import math
import sys

import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler, Subset

from tformer_grading.checks import CheckFailure, ch07
from tformer_grading.checks.ch07 import accumulation_step, amp_step
from tformer_ref.device import get_device

PAD = 0


def _n_targets(batch):
    return int((batch[:, 1:] != PAD).sum())


# -------------------------------------------------------------------- accumulation_step


def accum_right(model, micro_batches, optimizer, scheduler, loss_fn):
    """Counts the step's real targets first, then divides each summed loss by them."""
    optimizer.zero_grad()
    n_total = sum(_n_targets(b) for b in micro_batches)
    for batch in micro_batches:
        loss_sum, _ = loss_fn(model, batch)
        (loss_sum / n_total).backward()
    optimizer.step()
    scheduler.step()


def accum_right_divide_grads_after(model, micro_batches, optimizer, scheduler, loss_fn):
    """Sums first, divides the accumulated gradients by the token count at the end."""
    n_total = 0
    for batch in micro_batches:
        loss_sum, n = loss_fn(model, batch)
        loss_sum.backward()
        n_total += n
    for p in model.parameters():
        p.grad /= n_total
    optimizer.step()
    optimizer.zero_grad()  # zeroing after the step is as good as before
    scheduler.step()


def accum_right_one_backward(model, micro_batches, optimizer, scheduler, loss_fn):
    """All forwards first (more memory, same gradient), then one backward."""
    optimizer.zero_grad(set_to_none=False)
    results = [loss_fn(model, b) for b in micro_batches]
    total = sum(n for _, n in results)
    (sum(s for s, _ in results) / total).backward()
    optimizer.step()
    scheduler.step()


def accum_right_weighted_means(model, micro_batches, optimizer, scheduler, loss_fn):
    """In the loop: each micro-batch's mean loss times its share of the tokens."""
    for p in model.parameters():
        p.grad = None
    counts = [int(b[:, 1:].ne(PAD).sum()) for b in micro_batches]
    step_tokens = sum(counts)
    for batch, count in zip(micro_batches, counts):
        loss_sum, n = loss_fn(model, batch)
        mean = loss_sum / n
        (mean * (count / step_tokens)).backward()
    optimizer.step()
    scheduler.step()


def accum_right_running_total(model, micro_batches, optimizer, scheduler, loss_fn):
    """Backward on the undivided sums, then the gradients multiplied by 1 / tokens."""
    optimizer.zero_grad()
    tokens = 0
    for batch in micro_batches:
        loss_sum, n = loss_fn(model, batch)
        tokens += n
        loss_sum.backward()
    with torch.no_grad():
        for p in model.parameters():
            p.grad.mul_(1.0 / tokens)
    optimizer.step()
    scheduler.step()


def accum_not_divided(model, micro_batches, optimizer, scheduler, loss_fn):
    # Bug: backward on each micro-batch's own mean: the k means add up, k times too big.
    for batch in micro_batches:
        total, count = loss_fn(model, batch)
        mean_loss = total / count
        mean_loss.backward()
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()


def accum_summed(model, micro_batches, optimizer, scheduler, loss_fn):
    # Bug: backward on the summed token loss, never divided at all.
    optimizer.zero_grad()
    for batch in micro_batches:
        loss_fn(model, batch)[0].backward()
    optimizer.step()
    scheduler.step()


def accum_seed_style(model, micro_batches, optimizer, scheduler, loss_fn):
    # Bug (the seed's): loss / accumulation_steps weighs short micro-batches as much as
    # long ones.
    accumulation_steps = len(micro_batches)
    for i, batch in enumerate(micro_batches):
        loss_sum, n = loss_fn(model, batch)
        (loss_sum / n / accumulation_steps).backward()
        if (i + 1) % accumulation_steps == 0:
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()


def accum_mean_of_means(model, micro_batches, optimizer, scheduler, loss_fn):
    # Bug: the mean of the micro-batch means is not the mean over all tokens.
    optimizer.zero_grad()
    means = torch.stack([s / n for s, n in (loss_fn(model, b) for b in micro_batches)])
    means.mean().backward()
    optimizer.step()
    scheduler.step()


def accum_zero_each(model, micro_batches, optimizer, scheduler, loss_fn):
    # Bug: model.zero_grad() in the loop wipes the earlier micro-batches' gradients.
    n_total = sum(_n_targets(b) for b in micro_batches)
    for batch in micro_batches:
        model.zero_grad()
        (loss_fn(model, batch)[0] / n_total).backward()
    optimizer.step()
    scheduler.step()


def accum_scheduler_each(model, micro_batches, optimizer, scheduler, loss_fn):
    # Bug: the schedule advances once per micro-batch, k times too fast.
    for p in model.parameters():
        p.grad = None
    n_total = sum(_n_targets(b) for b in micro_batches)
    for i, batch in enumerate(micro_batches):
        (loss_fn(model, batch)[0] / n_total).backward()
        scheduler.step()
    optimizer.step()


def accum_optimizer_each(model, micro_batches, optimizer, scheduler, loss_fn):
    # Bug: k small optimizer steps instead of one big one.
    optimizer.zero_grad()
    counts = [_n_targets(b) for b in micro_batches]
    for batch in micro_batches:
        loss_sum, _ = loss_fn(model, batch)
        (loss_sum / sum(counts)).backward()
        optimizer.step()
    scheduler.step()


def accum_never_zeroed(model, micro_batches, optimizer, scheduler, loss_fn):
    # Bug: no zero_grad anywhere, so each step adds the previous steps' gradients.
    sums, counts = zip(*(loss_fn(model, b) for b in micro_batches))
    (sum(sums) / sum(counts)).backward()
    optimizer.step()
    scheduler.step()


def accum_first_batch_tokens(model, micro_batches, optimizer, scheduler, loss_fn):
    # Bug: divides by the first micro-batch's tokens times k (the check measures it).
    optimizer.zero_grad()
    n_first = _n_targets(micro_batches[0])
    for batch in micro_batches:
        (loss_fn(model, batch)[0] / n_first / len(micro_batches)).backward()
    optimizer.step()
    scheduler.step()


def accum_counts_padding(model, micro_batches, optimizer, scheduler, loss_fn):
    # Bug: divides by every target position, padding included (the check measures it).
    optimizer.zero_grad()
    positions = sum(b[:, 1:].numel() for b in micro_batches)
    for batch in micro_batches:
        (loss_fn(model, batch)[0] / positions).backward()
    optimizer.step()
    scheduler.step()


@pytest.mark.parametrize(
    "fn",
    [
        accum_right,
        accum_right_divide_grads_after,
        accum_right_one_backward,
        accum_right_weighted_means,
        accum_right_running_total,
    ],
)
def test_accumulation_accepts_right_implementations(fn, capsys):
    ch07.check_accumulation_step(fn)
    ch07.check_accumulation_step(fn, hidden=True)
    assert capsys.readouterr().out.count("✓ accumulation_step") == 2


@pytest.mark.parametrize(
    "fn,diagnosis",
    [
        (accum_not_divided, "loss not divided under accumulation"),
        (accum_summed, "loss summed, not averaged"),
        (accum_seed_style, "divided by micro-batches, not by tokens"),
        (accum_mean_of_means, "divided by micro-batches, not by tokens"),
        (accum_zero_each, "zero_grad every micro-step"),
        (accum_scheduler_each, "scheduler stepped every micro-step"),
        (accum_optimizer_each, "optimizer stepped every micro-step"),
        (accum_never_zeroed, "gradients never zeroed"),
        (accum_first_batch_tokens, r"summed loss was divided by 27; expected 45"),
        (
            accum_counts_padding,
            r"divided by 90, which is every target position of the "
            r"step, padding included",
        ),
        (lambda *args: None, r"optimizer.step\(\) ran 0 times"),
    ],
)
def test_accumulation_rejects_wrong_implementations(fn, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch07.check_accumulation_step(fn)


def test_accumulation_failure_points_to_the_lesson():
    with pytest.raises(CheckFailure) as info:
        ch07.check_accumulation_step(accum_zero_each)
    lesson = "§7.3 'Gradient accumulation' in book/ch07_scale/lesson.ipynb"
    assert lesson in str(info.value)


# ----------------------------------------------------------------------------- amp_step


def _dtype_for(device_type):
    return torch.float16 if device_type == "cuda" else torch.bfloat16


def amp_right(model, batch, loss_fn, optimizer, scaler, max_norm):
    """The lesson's order: zero, autocast forward, scaled backward, unscale_, clip,
    step, update."""
    device_type = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.amp.autocast(device_type, dtype=_dtype_for(device_type)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss


def amp_right_manual_clip(model, batch, loss_fn, optimizer, scaler, max_norm):
    """Backward inside the autocast block (allowed), clipping written by hand."""
    device = next(model.parameters()).device
    for p in model.parameters():
        p.grad = None
    with torch.autocast(device_type=device.type, dtype=_dtype_for(device.type)):
        loss = loss_fn(model, batch)
        scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    norm = torch.sqrt(sum((g.double() ** 2).sum() for g in grads))
    coef = min(1.0, max_norm / (float(norm) + 1e-6))
    for g in grads:
        g.mul_(coef)
    scaler.step(optimizer)
    scaler.update()
    return loss.item()


def amp_right_zero_at_the_end(model, batch, loss_fn, optimizer, scaler, max_norm):
    """Zeroes after the update, not before; clips the optimizer's parameter list."""
    kind = next(model.parameters()).device.type
    half = {"cuda": torch.float16}.get(kind, torch.bfloat16)
    with torch.autocast(kind, dtype=half):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    params = [p for group in optimizer.param_groups for p in group["params"]]
    torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=False)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    return loss.detach()


def amp_clip_scaled_by_hand(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Bug: a hand-written clip while the gradients are still scaled; unscale_ after it.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_dtype_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    grads = [p.grad for p in model.parameters()]
    norm = torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))
    if norm > max_norm:
        for g in grads:
            g.mul_(max_norm / norm)
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
    return loss


def amp_clip_then_let_step_unscale(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Bug: no unscale_: clips the scaled gradients (scaler.step unscales them later).
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_dtype_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(optimizer.param_groups[0]["params"], max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss


def amp_forgets_to_clip(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Bug: max_norm is never used.
    kind = next(model.parameters()).device.type
    model.zero_grad()
    with torch.autocast(device_type=kind, dtype=_dtype_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
    return loss.item()


def amp_plain_optimizer_step(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Bug: optimizer.step() does not skip the step whose gradients overflowed.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_dtype_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    for group in optimizer.param_groups:
        torch.nn.utils.clip_grad_norm_(group["params"], max_norm)
    optimizer.step()
    scaler.update()
    return loss


def amp_scaled_then_plain_loop(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Bug: scales the loss, then steps as if there were no scaler: no unscale_, no clip.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_dtype_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    optimizer.step()
    scaler.update()
    return loss


def amp_forgets_update(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Bug: no scaler.update(), so the scale never drops after an overflow.
    kind = next(model.parameters()).device.type
    for p in model.parameters():
        p.grad = None
    with torch.autocast(kind, dtype=_dtype_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    return loss.detach()


def amp_unscaled_backward(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Bug: loss.backward() inside autocast, without scaler.scale.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_dtype_for(kind)):
        loss = loss_fn(model, batch)
        loss.backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss


def amp_forgets_zero_grad(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Bug: nothing zeroes the gradients, so the second step adds the first step's.
    kind = next(model.parameters()).device.type
    with torch.autocast(kind, dtype=_dtype_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss


def amp_no_autocast(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Bug: the forward runs in float32; everything after it is right.
    optimizer.zero_grad()
    loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss


def amp_swapped_dtypes(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Bug: the two dtypes swapped (float16 on a CPU, bfloat16 on CUDA).
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    wrong = torch.bfloat16 if kind == "cuda" else torch.float16
    with torch.autocast(kind, dtype=wrong):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss


def amp_seed_import(model, batch, loss_fn, optimizer, scaler, max_norm):
    """The seed's `from torch.cuda.amp import autocast`: on a CPU model it autocasts
    nothing."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # it is deprecated, and says so
        from torch.cuda.amp import autocast

        ctx = autocast()
    optimizer.zero_grad()
    with ctx:
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss


@pytest.mark.parametrize(
    "fn", [amp_right, amp_right_manual_clip, amp_right_zero_at_the_end]
)
def test_amp_step_accepts_right_implementations(fn, capsys):
    ch07.check_amp_step(fn)
    assert "✓ amp_step" in capsys.readouterr().out


@pytest.mark.parametrize(
    "fn,diagnosis",
    [
        (amp_clip_scaled_by_hand, r"clipping before unscale_"),
        (amp_clip_then_let_step_unscale, r"clipping before unscale_"),
        (amp_forgets_to_clip, "gradients not clipped"),
        (amp_plain_optimizer_step, r"optimizer.step\(\) instead of scaler.step"),
        (amp_scaled_then_plain_loop, r"optimizer.step\(\) instead of scaler.step"),
        (amp_forgets_update, r"scaler.update\(\) missing"),
        (amp_unscaled_backward, "loss not scaled"),
        (amp_forgets_zero_grad, "zero_grad missing"),
        (amp_no_autocast, "forward not under autocast"),
        (amp_swapped_dtypes, "wrong autocast dtype"),
    ],
)
def test_amp_step_rejects_wrong_implementations(fn, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch07.check_amp_step(fn)


@pytest.mark.skipif(
    get_device().type == "cuda", reason="on CUDA the deprecated import still autocasts"
)
def test_amp_step_rejects_the_seeds_cuda_only_autocast_on_cpu():
    with pytest.raises(CheckFailure, match="forward not under autocast") as info:
        ch07.check_amp_step(amp_seed_import)
    assert "torch.cuda.amp.autocast is deprecated" in str(info.value)


def test_amp_step_reports_a_crash():
    def crashes(model, batch, loss_fn, optimizer, scaler, max_norm):
        raise NotImplementedError()

    with pytest.raises(CheckFailure, match="raised NotImplementedError"):
        ch07.check_amp_step(crashes)


# -------------------------------------------------------------------------- make_loader


def loader_right(dataset, rank, world_size, epoch, batch_size):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


def loader_right_by_hand(dataset, rank, world_size, epoch, batch_size):
    """A shared permutation seeded by the epoch, every world_size-th element for this
    rank."""
    g = torch.Generator().manual_seed(1234 + epoch)
    order = torch.randperm(len(dataset), generator=g)[rank::world_size].tolist()
    return DataLoader(Subset(dataset, order), batch_size=batch_size)


def loader_right_drop_last(dataset, rank, world_size, epoch, batch_size):
    sampler = DistributedSampler(
        dataset, num_replicas=world_size, rank=rank, seed=7, drop_last=True
    )
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, num_workers=0)


def loader_right_contiguous_chunks(dataset, rank, world_size, epoch, batch_size):
    """A shared permutation per epoch cut into world_size contiguous chunks; a list as
    sampler."""
    g = torch.Generator()
    g.manual_seed(epoch)
    chunk = torch.randperm(len(dataset), generator=g).tensor_split(world_size)[rank]
    return DataLoader(dataset, sampler=chunk.tolist(), batch_size=batch_size)


def loader_no_sampler(dataset, rank, world_size, epoch, batch_size):
    # Bug: every rank reads everything.
    return DataLoader(dataset, batch_size=batch_size, shuffle=True)


def loader_no_set_epoch(dataset, rank, world_size, epoch, batch_size):
    # Bug: the same shuffle every epoch.
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


def loader_no_shuffle(dataset, rank, world_size, epoch, batch_size):
    # Bug: the sorted order every epoch.
    sampler = DistributedSampler(
        dataset, num_replicas=world_size, rank=rank, shuffle=False
    )
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


def loader_seed_per_rank(dataset, rank, world_size, epoch, batch_size):
    # Bug: each rank shuffles with its own seed, so the shares overlap.
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, seed=rank)
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


def loader_contiguous_slices(dataset, rank, world_size, epoch, batch_size):
    # Bug: a fixed, sorted slice per rank, never shuffled.
    per = math.ceil(len(dataset) / world_size)
    mine = range(rank * per, min(len(dataset), (rank + 1) * per))
    return DataLoader(Subset(dataset, mine), batch_size=batch_size)


def loader_unseeded(dataset, rank, world_size, epoch, batch_size):
    # Bug: each call a fresh random order, so the ranks disagree on the split.
    order = torch.randperm(len(dataset))[rank::world_size].tolist()
    return DataLoader(Subset(dataset, order), batch_size=batch_size)


def loader_shuffle_and_sampler(dataset, rank, world_size, epoch, batch_size):
    # Bug: shuffle=True beside a sampler, which the DataLoader refuses.
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, shuffle=True)


def loader_world_counted_twice(dataset, rank, world_size, epoch, batch_size):
    # Bug: twice as many replicas as processes, so half of each epoch is never read.
    sampler = DistributedSampler(dataset, num_replicas=2 * world_size, rank=rank)
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


def loader_global_batch(dataset, rank, world_size, epoch, batch_size):
    # Bug: multiplies batch_size by the world size (the global batch), per process.
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size * world_size, sampler=sampler)


@pytest.mark.parametrize(
    "fn",
    [
        loader_right,
        loader_right_by_hand,
        loader_right_drop_last,
        loader_right_contiguous_chunks,
    ],
)
def test_make_loader_accepts_right_implementations(fn, capsys):
    ch07.check_make_loader(fn)
    ch07.check_make_loader(fn, world_sizes=(3,), n=20, batch_size=4)
    assert capsys.readouterr().out.count("✓ make_loader") == 2


@pytest.mark.parametrize(
    "fn,diagnosis",
    [
        (loader_no_sampler, "no DistributedSampler"),
        (loader_no_set_epoch, "no set_epoch"),
        (loader_no_shuffle, "no shuffling"),
        (loader_seed_per_rank, "ranks overlap"),
        (loader_contiguous_slices, "no shuffling"),
        (loader_unseeded, "ranks overlap|different orders"),
        (loader_shuffle_and_sampler, "mutually exclusive"),
        (loader_world_counted_twice, "epoch misses samples"),
        (loader_global_batch, "batches larger than batch_size"),
    ],
)
def test_make_loader_rejects_wrong_implementations(fn, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch07.check_make_loader(fn)


def test_make_loader_diagnoses_point_to_the_lesson():
    with pytest.raises(CheckFailure) as info:
        ch07.check_make_loader(loader_no_set_epoch)
    assert "§7.5 'DistributedSampler and set_epoch'" in str(info.value)


def test_checks_write_nothing_to_stderr(capfd):
    """nbgrader gives a test cell zero when it writes to stderr, even if it passes."""
    ch07.check_amp_step(amp_right)
    with pytest.raises(CheckFailure):
        on_cpu = get_device().type == "cpu"
        ch07.check_amp_step(amp_seed_import if on_cpu else amp_clip_scaled_by_hand)
    with pytest.raises(CheckFailure):
        ch07.check_amp_step(amp_scaled_then_plain_loop)  # GradScaler raises inside it
    with pytest.raises(CheckFailure):
        ch07.check_accumulation_step(accum_seed_style)
    with pytest.raises(CheckFailure):
        ch07.check_make_loader(loader_no_sampler)
    assert capfd.readouterr().err == ""


# ------------------------------------------------------- written by hand (hidden tests)


@pytest.mark.parametrize(
    "fn", [accum_right, accum_right_one_backward, accum_right_weighted_means]
)
def test_accumulation_by_hand_accepts_own_code(fn, capsys):
    ch07.check_accumulation_by_hand(fn)
    assert "✓ accumulation_step: written by hand" in capsys.readouterr().out


@pytest.mark.parametrize(
    "fn", [amp_right, amp_right_manual_clip, amp_right_zero_at_the_end]
)
def test_amp_by_hand_accepts_own_code(fn, capsys):
    ch07.check_amp_by_hand(fn)
    assert "✓ amp_step: written by hand" in capsys.readouterr().out


def accum_delegates(model, micro_batches, optimizer, scheduler, loss_fn):
    # Calls the course's accumulation instead of writing it.
    from tformer_ref.accumulation import train_accumulated

    train_accumulated(
        model,
        micro_batches,
        optimizer,
        loss_fn,
        scheduler=scheduler,
        count_tokens=lambda b: int((b[:, 1:] != PAD).sum()),
    )


def accum_delegates_to_big_batch(model, micro_batches, optimizer, scheduler, loss_fn):
    # Right, but not by hand: the course's big-batch step on the joined micro-batches.
    from tformer_ref import accumulation

    big = torch.cat(micro_batches)
    accumulation.train_big_batch(model, big, optimizer, loss_fn, scheduler)


def accum_switches_recorder_off(model, micro_batches, optimizer, scheduler, loss_fn):
    # Hides what it calls by switching the profiler off.
    sys.setprofile(None)
    accum_delegates(model, micro_batches, optimizer, scheduler, loss_fn)


def amp_delegates(model, batch, loss_fn, optimizer, scaler, max_norm):
    # The unscale/clip/step/update part left to the course's optimizer_step.
    from tformer_ref.amp import optimizer_step

    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_dtype_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    optimizer_step(optimizer, model.parameters(), scaler, max_norm)
    return loss


@pytest.mark.parametrize(
    "fn,name",
    [
        (accum_delegates, "tformer_ref.accumulation.train_accumulated"),
        (accum_delegates_to_big_batch, "tformer_ref.accumulation.train_big_batch"),
        (accumulation_step.accum_reference, "the check's own reference"),
    ],
)
def test_accumulation_by_hand_rejects_delegation(fn, name):
    ch07.check_accumulation_step(fn)  # it is right: only the hidden test catches it
    with pytest.raises(CheckFailure, match=f"your code calls {name}"):
        ch07.check_accumulation_by_hand(fn)


@pytest.mark.parametrize(
    "fn,name",
    [
        (amp_delegates, "tformer_ref.amp.optimizer_step"),
        (amp_step.amp_reference, "the check's own reference"),
    ],
)
def test_amp_by_hand_rejects_delegation(fn, name):
    ch07.check_amp_step(fn)  # it is right: only the hidden test catches it
    with pytest.raises(CheckFailure, match=f"your code calls {name}"):
        ch07.check_amp_by_hand(fn)


def test_by_hand_rejects_switching_the_recorder_off():
    with pytest.raises(CheckFailure, match="changed sys.setprofile"):
        ch07.check_accumulation_by_hand(accum_switches_recorder_off)


def test_checks_restore_the_thread_count():
    threads = torch.get_num_threads()
    ch07.check_accumulation_step(accum_right)
    ch07.check_amp_by_hand(amp_right)
    assert torch.get_num_threads() == threads
