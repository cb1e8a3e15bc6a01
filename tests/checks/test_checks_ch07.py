"""The chapter 7 checks, tested with banks of wrong implementations (each rejected with its named
diagnosis) and right ones written differently (each accepted)."""
import math

import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler, Subset

from tformer_grading.checks import CheckFailure, ch07
from tformer_ref.device import get_device

PAD = 0


def _n_targets(batch):
    return int((batch[:, 1:] != PAD).sum())


# --------------------------------------------------------------------------- accumulation_step

def accum_right(model, micro_batches, optimizer, scheduler, loss_fn):
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


def accum_not_divided(model, micro_batches, optimizer, scheduler, loss_fn):  # mean per micro-batch, no / k
    optimizer.zero_grad()
    for batch in micro_batches:
        loss_sum, n = loss_fn(model, batch)
        (loss_sum / n).backward()
    optimizer.step()
    scheduler.step()


def accum_summed(model, micro_batches, optimizer, scheduler, loss_fn):  # never divided at all
    optimizer.zero_grad()
    for batch in micro_batches:
        loss_fn(model, batch)[0].backward()
    optimizer.step()
    scheduler.step()


def accum_seed_style(model, micro_batches, optimizer, scheduler, loss_fn):  # the seed: loss / accumulation_steps
    accumulation_steps = len(micro_batches)
    for i, batch in enumerate(micro_batches):
        loss_sum, n = loss_fn(model, batch)
        (loss_sum / n / accumulation_steps).backward()
        if (i + 1) % accumulation_steps == 0:
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()


def accum_zero_each(model, micro_batches, optimizer, scheduler, loss_fn):  # wipes earlier micro-batches
    n_total = sum(_n_targets(b) for b in micro_batches)
    for batch in micro_batches:
        optimizer.zero_grad()
        (loss_fn(model, batch)[0] / n_total).backward()
    optimizer.step()
    scheduler.step()


def accum_scheduler_each(model, micro_batches, optimizer, scheduler, loss_fn):  # schedule runs k times too fast
    optimizer.zero_grad()
    n_total = sum(_n_targets(b) for b in micro_batches)
    for batch in micro_batches:
        (loss_fn(model, batch)[0] / n_total).backward()
        scheduler.step()
    optimizer.step()


def accum_never_zeroed(model, micro_batches, optimizer, scheduler, loss_fn):
    n_total = sum(_n_targets(b) for b in micro_batches)
    for batch in micro_batches:
        (loss_fn(model, batch)[0] / n_total).backward()
    optimizer.step()
    scheduler.step()


def accum_first_batch_tokens(model, micro_batches, optimizer, scheduler, loss_fn):  # an unlisted bug
    optimizer.zero_grad()
    n_first = _n_targets(micro_batches[0])
    for batch in micro_batches:
        (loss_fn(model, batch)[0] / n_first / len(micro_batches)).backward()
    optimizer.step()
    scheduler.step()


@pytest.mark.parametrize("fn", [accum_right, accum_right_divide_grads_after, accum_right_one_backward])
def test_accumulation_accepts_right_implementations(fn, capsys):
    ch07.check_accumulation_step(fn)
    ch07.check_accumulation_step(fn, hidden=True)
    assert capsys.readouterr().out.count("✓ accumulation_step") == 2


@pytest.mark.parametrize("fn,diagnosis", [
    (accum_not_divided, "loss not divided under accumulation"),
    (accum_summed, "loss summed, not averaged"),
    (accum_seed_style, "divided by micro-batches, not by tokens"),
    (accum_zero_each, "zero_grad every micro-step"),
    (accum_scheduler_each, "scheduler stepped every micro-step"),
    (accum_never_zeroed, "gradients never zeroed"),
    (accum_first_batch_tokens, "matches none of the known pitfalls"),
    (lambda *args: None, "matches none of the known pitfalls"),
])
def test_accumulation_rejects_wrong_implementations(fn, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch07.check_accumulation_step(fn)


def test_accumulation_failure_points_to_the_lesson():
    with pytest.raises(CheckFailure) as info:
        ch07.check_accumulation_step(accum_zero_each)
    assert "§7.3 'Gradient accumulation' in book/ch07_scale/lesson.ipynb" in str(info.value)


# --------------------------------------------------------------------------- amp_step

def _dtype_for(device_type):
    return torch.float16 if device_type == "cuda" else torch.bfloat16


def amp_right(model, batch, loss_fn, optimizer, scaler, max_norm):
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


def _amp_wrong(*, autocast="right", unscale=True, clip="after", scaler_step=True, update=True, scale_loss=True):
    def step(model, batch, loss_fn, optimizer, scaler, max_norm):
        device_type = next(model.parameters()).device.type
        optimizer.zero_grad()
        if autocast == "right":
            ctx = torch.amp.autocast(device_type, dtype=_dtype_for(device_type))
        elif autocast == "other dtype":
            ctx = torch.amp.autocast(device_type, dtype=torch.bfloat16 if device_type == "cuda" else torch.float16)
        else:
            ctx = torch.autocast(device_type, enabled=False)
        with ctx:
            loss = loss_fn(model, batch)
        (scaler.scale(loss) if scale_loss else loss).backward()
        if clip == "before":
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        if unscale:
            scaler.unscale_(optimizer)
        if clip == "after":
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer) if scaler_step else optimizer.step()
        if update:
            scaler.update()
        return loss
    return step


def amp_seed_import(model, batch, loss_fn, optimizer, scaler, max_norm):
    """The seed's `from torch.cuda.amp import autocast`: on a CPU model it autocasts nothing."""
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


@pytest.mark.parametrize("fn", [amp_right, amp_right_manual_clip])
def test_amp_step_accepts_right_implementations(fn, capsys):
    ch07.check_amp_step(fn)
    assert "✓ amp_step" in capsys.readouterr().out


@pytest.mark.parametrize("fn,diagnosis", [
    (_amp_wrong(clip="before"), r"clipping before unscale_"),
    (_amp_wrong(unscale=False, clip="before"), r"clipping before unscale_"),
    (_amp_wrong(clip="none"), "gradients not clipped"),
    (_amp_wrong(scaler_step=False), r"optimizer.step\(\) instead of scaler.step\(optimizer\)"),
    (_amp_wrong(update=False), r"scaler.update\(\) missing"),
    (_amp_wrong(scale_loss=False), "loss not scaled"),
    (_amp_wrong(autocast="none"), "forward not under autocast"),
    (_amp_wrong(autocast="other dtype"), "wrong autocast dtype"),
])
def test_amp_step_rejects_wrong_implementations(fn, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch07.check_amp_step(fn)


@pytest.mark.skipif(get_device().type == "cuda", reason="on CUDA the deprecated import still autocasts")
def test_amp_step_rejects_the_seeds_cuda_only_autocast_on_cpu():
    with pytest.raises(CheckFailure, match="forward not under autocast") as info:
        ch07.check_amp_step(amp_seed_import)
    assert "torch.cuda.amp.autocast is deprecated" in str(info.value)


def test_amp_step_reports_a_crash():
    def crashes(model, batch, loss_fn, optimizer, scaler, max_norm):
        raise NotImplementedError()

    with pytest.raises(CheckFailure, match="raised NotImplementedError"):
        ch07.check_amp_step(crashes)


# --------------------------------------------------------------------------- make_loader

def loader_right(dataset, rank, world_size, epoch, batch_size):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


def loader_right_by_hand(dataset, rank, world_size, epoch, batch_size):
    """A shared permutation seeded by the epoch, every world_size-th element for this rank."""
    g = torch.Generator().manual_seed(1234 + epoch)
    order = torch.randperm(len(dataset), generator=g)[rank::world_size].tolist()
    return DataLoader(Subset(dataset, order), batch_size=batch_size)


def loader_right_drop_last(dataset, rank, world_size, epoch, batch_size):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, seed=7, drop_last=True)
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, num_workers=0)


def loader_no_sampler(dataset, rank, world_size, epoch, batch_size):  # every rank reads everything
    return DataLoader(dataset, batch_size=batch_size, shuffle=True)


def loader_no_set_epoch(dataset, rank, world_size, epoch, batch_size):  # same shuffle every epoch
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


def loader_no_shuffle(dataset, rank, world_size, epoch, batch_size):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=False)
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


def loader_seed_per_rank(dataset, rank, world_size, epoch, batch_size):  # ranks shuffle differently
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, seed=rank)
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


def loader_contiguous_slices(dataset, rank, world_size, epoch, batch_size):  # a fixed slice per rank
    per = math.ceil(len(dataset) / world_size)
    return DataLoader(Subset(dataset, range(rank * per, min(len(dataset), (rank + 1) * per))), batch_size=batch_size)


def loader_unseeded(dataset, rank, world_size, epoch, batch_size):  # each call a fresh random order
    order = torch.randperm(len(dataset))[rank::world_size].tolist()
    return DataLoader(Subset(dataset, order), batch_size=batch_size)


def loader_shuffle_and_sampler(dataset, rank, world_size, epoch, batch_size):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, shuffle=True)


@pytest.mark.parametrize("fn", [loader_right, loader_right_by_hand, loader_right_drop_last])
def test_make_loader_accepts_right_implementations(fn, capsys):
    ch07.check_make_loader(fn)
    ch07.check_make_loader(fn, world_sizes=(3,), n=20, batch_size=4)
    assert capsys.readouterr().out.count("✓ make_loader") == 2


@pytest.mark.parametrize("fn,diagnosis", [
    (loader_no_sampler, "no DistributedSampler"),
    (loader_no_set_epoch, "no set_epoch"),
    (loader_no_shuffle, "no shuffling"),
    (loader_seed_per_rank, "ranks overlap"),
    (loader_contiguous_slices, "no shuffling"),
    (loader_unseeded, "ranks overlap|different orders"),
    (loader_shuffle_and_sampler, "mutually exclusive"),
])
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
        ch07.check_amp_step(amp_seed_import if get_device().type == "cpu" else _amp_wrong(clip="before"))
    with pytest.raises(CheckFailure):
        ch07.check_accumulation_step(accum_seed_style)
    assert capfd.readouterr().err == ""


@pytest.mark.parametrize("fn,kind", [(accum_right, "accumulation_step"), (accum_right_one_backward, "accumulation_step"),
                                     (amp_right, "amp_step"), (amp_right_manual_clip, "amp_step")])
def test_written_by_hand_accepts_own_code(fn, kind, capsys):
    ch07.check_written_by_hand(fn, kind)
    assert f"✓ {kind}: written by hand" in capsys.readouterr().out


def accum_delegates(model, micro_batches, optimizer, scheduler, loss_fn):
    from tformer_ref.accumulation import train_accumulated

    train_accumulated(model, micro_batches, optimizer, loss_fn, scheduler=scheduler,
                      count_tokens=lambda b: int((b[:, 1:] != PAD).sum()))


def amp_delegates(model, batch, loss_fn, optimizer, scaler, max_norm):
    from tformer_ref.amp import optimizer_step

    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_dtype_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    optimizer_step(optimizer, model.parameters(), scaler, max_norm)
    return loss


@pytest.mark.parametrize("fn,kind,name", [
    (accum_delegates, "accumulation_step", "tformer_ref.accumulation.train_accumulated"),
    (amp_delegates, "amp_step", "tformer_ref.amp.optimizer_step"),
    (ch07._accum_reference, "accumulation_step", "the check's own reference"),
])
def test_written_by_hand_rejects_delegation(fn, kind, name):
    ch07.check_accumulation_step(accum_delegates)  # it is right: only the hidden test catches it
    with pytest.raises(CheckFailure, match=f"your code calls {name}"):
        ch07.check_written_by_hand(fn, kind)


def test_checks_restore_the_thread_count():
    threads = torch.get_num_threads()
    ch07.check_accumulation_step(accum_right)
    assert torch.get_num_threads() == threads
