"""Chapter 7's measured bank: accumulation_step, amp_step and make_loader (see bank.py).

The accumulation probe's first step has 3 micro-batches with 9, 21 and 15 real target
tokens (45 in all, 90 target positions, 10 sequences): the measured divisors below are
those numbers. The amp probe clips at max_norm 0.05 with the scale 1024.
"""

import random

import torch
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, Subset

from bank import GENERIC, right, wrong  # noqa: F401
from exercise_cells import graders

GRADERS = graders(
    "ch07_scale",
    {
        "accumulation_step": "accumulation_step",
        "amp_step": "amp_step",
        "make_loader": "make_loader",
    },
)
PAD = 0


# ==================================================================== accumulation_step


@right("accumulation_step")
def accum_reference_style(model, micro_batches, optimizer, scheduler, loss_fn):
    optimizer.zero_grad()
    n_total = sum(int((b[:, 1:] != PAD).sum()) for b in micro_batches)
    for batch in micro_batches:
        loss_sum, _ = loss_fn(model, batch)
        (loss_sum / n_total).backward()
    optimizer.step()
    scheduler.step()


@right("accumulation_step")
def accum_divide_grads_at_the_end(model, micro_batches, optimizer, scheduler, loss_fn):
    n_total = 0
    for batch in micro_batches:
        loss_sum, n = loss_fn(model, batch)
        loss_sum.backward()
        n_total += n
    for p in model.parameters():
        p.grad /= n_total
    optimizer.step()
    optimizer.zero_grad()  # zeroing after the step leaves the next call clean too
    scheduler.step()


@right("accumulation_step")
def accum_one_backward(model, micro_batches, optimizer, scheduler, loss_fn):
    optimizer.zero_grad(set_to_none=False)
    results = [loss_fn(model, b) for b in micro_batches]
    total = sum(n for _, n in results)
    (sum(s for s, _ in results) / total).backward()
    optimizer.step()
    scheduler.step()


@right("accumulation_step")
def accum_token_share_of_means(model, micro_batches, optimizer, scheduler, loss_fn):
    for p in model.parameters():
        p.grad = None
    counts = [int(b[:, 1:].ne(PAD).sum()) for b in micro_batches]
    for batch, count in zip(micro_batches, counts):
        loss_sum, n = loss_fn(model, batch)
        (loss_sum / n * (count / sum(counts))).backward()
    optimizer.step()
    scheduler.step()


@right("accumulation_step")
def accum_concatenated(model, micro_batches, optimizer, scheduler, loss_fn):
    model.zero_grad()
    loss_sum, n = loss_fn(model, torch.cat(micro_batches, dim=0))
    (loss_sum / n).backward()
    optimizer.step()
    scheduler.step()


@right("accumulation_step")
def accum_autograd_backward_list(model, micro_batches, optimizer, scheduler, loss_fn):
    optimizer.zero_grad()
    n_total = sum((b[:, 1:] != 0).sum().item() for b in micro_batches)
    losses = [loss_fn(model, b)[0] / n_total for b in micro_batches]
    torch.autograd.backward(losses)
    optimizer.step()
    scheduler.step()


@right("accumulation_step")
def accum_mul_grads_in_no_grad(model, micro_batches, optimizer, scheduler, loss_fn):
    optimizer.zero_grad()
    tokens = 0
    for batch in micro_batches:
        loss_sum, n = loss_fn(model, batch)
        tokens += n
        loss_sum.backward()
    with torch.no_grad():
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.grad.mul_(1.0 / tokens)
    optimizer.step()
    scheduler.step()


@right("accumulation_step")
def accum_counts_first_then_loops(model, micro_batches, optimizer, scheduler, loss_fn):
    counts = []
    for b in micro_batches:
        targets = b[:, 1:]
        counts.append(targets.numel() - int((targets == PAD).sum()))
    denominator = float(sum(counts))
    optimizer.zero_grad()
    for i in range(len(micro_batches)):
        summed, _ = loss_fn(model, micro_batches[i])
        loss = summed / denominator
        loss.backward()
    optimizer.step()
    scheduler.step()


@wrong("accumulation_step", r"'loss not divided under accumulation'", listed=True)
def accum_backward_each_mean(model, micro_batches, optimizer, scheduler, loss_fn):
    # The single-batch habit: backward on each micro-batch's mean, k means add up.
    optimizer.zero_grad()
    for batch in micro_batches:
        total, count = loss_fn(model, batch)
        (total / count).backward()
    optimizer.step()
    scheduler.step()


@wrong("accumulation_step", r"'loss summed, not averaged'", listed=True)
def accum_backward_sums(model, micro_batches, optimizer, scheduler, loss_fn):
    # Took "loss_sum" as the loss to minimise and forgot the mean altogether.
    optimizer.zero_grad()
    for batch in micro_batches:
        loss_fn(model, batch)[0].backward()
    optimizer.step()
    scheduler.step()


@wrong("accumulation_step", r"'divided by micro-batches, not by tokens'", listed=True)
def accum_seed_divides_by_steps(model, micro_batches, optimizer, scheduler, loss_fn):
    # The seed's loss / accumulation_steps, copied from a fixed-length tutorial.
    accumulation_steps = len(micro_batches)
    for i, batch in enumerate(micro_batches):
        loss_sum, n = loss_fn(model, batch)
        (loss_sum / n / accumulation_steps).backward()
        if (i + 1) % accumulation_steps == 0:
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()


@wrong("accumulation_step", r"'divided by micro-batches, not by tokens'", listed=True)
def accum_mean_of_means(model, micro_batches, optimizer, scheduler, loss_fn):
    # The mean of the micro-batch means looks like "the mean", but weighs batches alike.
    optimizer.zero_grad()
    means = torch.stack([s / n for s, n in (loss_fn(model, b) for b in micro_batches)])
    means.mean().backward()
    optimizer.step()
    scheduler.step()


@wrong("accumulation_step", r"'zero_grad every micro-step'", listed=True)
def accum_zero_in_loop(model, micro_batches, optimizer, scheduler, loss_fn):
    # zero_grad kept at the top of the loop body, as in a plain training loop.
    n_total = sum(int((b[:, 1:] != PAD).sum()) for b in micro_batches)
    for batch in micro_batches:
        model.zero_grad()
        (loss_fn(model, batch)[0] / n_total).backward()
    optimizer.step()
    scheduler.step()


@wrong("accumulation_step", r"'gradients never zeroed'", listed=True)
def accum_no_zero_grad(model, micro_batches, optimizer, scheduler, loss_fn):
    # "Accumulating" taken literally: nothing ever clears .grad.
    sums, counts = zip(*(loss_fn(model, b) for b in micro_batches))
    (sum(sums) / sum(counts)).backward()
    optimizer.step()
    scheduler.step()


@wrong("accumulation_step", r"'optimizer stepped every micro-step'", listed=True)
def accum_step_in_loop(model, micro_batches, optimizer, scheduler, loss_fn):
    # optimizer.step() indented one level too deep.
    optimizer.zero_grad()
    n_total = sum(int((b[:, 1:] != PAD).sum()) for b in micro_batches)
    for batch in micro_batches:
        (loss_fn(model, batch)[0] / n_total).backward()
        optimizer.step()
    scheduler.step()


@wrong("accumulation_step", r"'scheduler stepped every micro-step'", listed=True)
def accum_scheduler_in_loop(model, micro_batches, optimizer, scheduler, loss_fn):
    # scheduler.step() inside the loop: the schedule counts micro-batches.
    for p in model.parameters():
        p.grad = None
    n_total = sum(int((b[:, 1:] != PAD).sum()) for b in micro_batches)
    for batch in micro_batches:
        (loss_fn(model, batch)[0] / n_total).backward()
        scheduler.step()
    optimizer.step()


@wrong(
    "accumulation_step",
    r"divided by 90, which is every target position of the "
    r"step, padding included",
    listed=False,
)
def accum_counts_padding(model, micro_batches, optimizer, scheduler, loss_fn):
    # Counts every target position, forgetting that padded targets are ignored.
    optimizer.zero_grad()
    positions = sum(b[:, 1:].numel() for b in micro_batches)
    for batch in micro_batches:
        (loss_fn(model, batch)[0] / positions).backward()
    optimizer.step()
    scheduler.step()


@wrong(
    "accumulation_step",
    r"divided by 55, which is the step's real tokens, the "
    r"first",
    listed=False,
)
def accum_counts_inputs_too(model, micro_batches, optimizer, scheduler, loss_fn):
    # Counts the real tokens of the batch, not the targets batch[:, 1:].
    optimizer.zero_grad()
    n_total = sum(int((b != PAD).sum()) for b in micro_batches)
    for batch in micro_batches:
        (loss_fn(model, batch)[0] / n_total).backward()
    optimizer.step()
    scheduler.step()


@wrong(
    "accumulation_step",
    r"divided by 10, which is the step's number of sequences",
    listed=False,
)
def accum_divides_by_sequences(model, micro_batches, optimizer, scheduler, loss_fn):
    # "The big batch's mean" read as the mean over sequences.
    optimizer.zero_grad()
    n_seqs = sum(len(b) for b in micro_batches)
    for batch in micro_batches:
        (loss_fn(model, batch)[0] / n_seqs).backward()
    optimizer.step()
    scheduler.step()


@wrong(
    "accumulation_step",
    r"divided by 2025, which is the step's target tokens "
    r"squared",
    listed=False,
)
def accum_divides_twice(model, micro_batches, optimizer, scheduler, loss_fn):
    # Divides the loss by the token count, and then the gradients again "to average".
    optimizer.zero_grad()
    n_total = sum(int((b[:, 1:] != PAD).sum()) for b in micro_batches)
    for batch in micro_batches:
        (loss_fn(model, batch)[0] / n_total).backward()
    for p in model.parameters():
        p.grad.div_(n_total)
    optimizer.step()
    scheduler.step()


@wrong(
    "accumulation_step",
    r"divided by 135, which is the step's target tokens "
    r"times k",
    listed=False,
)
def accum_tokens_and_k(model, micro_batches, optimizer, scheduler, loss_fn):
    # Right divisor, plus the seed's / accumulation_steps kept "to be safe".
    optimizer.zero_grad()
    n_total = sum(int((b[:, 1:] != PAD).sum()) for b in micro_batches)
    k = len(micro_batches)
    for batch in micro_batches:
        (loss_fn(model, batch)[0] / n_total / k).backward()
    optimizer.step()
    scheduler.step()


@wrong("accumulation_step", r"summed loss was divided by 27; expected 45", listed=False)
def accum_first_batch_count(model, micro_batches, optimizer, scheduler, loss_fn):
    # Assumes every micro-batch has as many tokens as the first one.
    optimizer.zero_grad()
    n_first = int((micro_batches[0][:, 1:] != PAD).sum())
    for batch in micro_batches:
        (loss_fn(model, batch)[0] / (n_first * len(micro_batches))).backward()
    optimizer.step()
    scheduler.step()


@wrong(
    "accumulation_step",
    r"by \[2, 5, 3\]\. Each micro-batch was divided by its own "
    r"number of sequences",
    listed=False,
)
def accum_mean_per_sequence(model, micro_batches, optimizer, scheduler, loss_fn):
    # Each micro-batch's loss averaged over its sequences, like a per-sample loss.
    optimizer.zero_grad()
    for batch in micro_batches:
        loss_sum, _ = loss_fn(model, batch)
        (loss_sum / batch.shape[0]).backward()
    optimizer.step()
    scheduler.step()


@wrong(
    "accumulation_step",
    r"by \[18, 45, 27\]\. Each micro-batch was divided by its "
    r"own target positions, padding included",
    listed=False,
)
def accum_own_positions(model, micro_batches, optimizer, scheduler, loss_fn):
    # A per-micro-batch mean over every position, padding included.
    optimizer.zero_grad()
    for batch in micro_batches:
        loss_sum, _ = loss_fn(model, batch)
        (loss_sum / batch[:, 1:].numel()).backward()
    optimizer.step()
    scheduler.step()


@wrong(
    "accumulation_step", r"by \[9, 30, 45\]\. Expected all divided by 45", listed=False
)
def accum_running_count(model, micro_batches, optimizer, scheduler, loss_fn):
    # Divides by the tokens counted so far instead of the step's total.
    optimizer.zero_grad()
    seen = 0
    for batch in micro_batches:
        loss_sum, n = loss_fn(model, batch)
        seen += n
        (loss_sum / seen).backward()
    optimizer.step()
    scheduler.step()


@wrong(
    "accumulation_step",
    r"by \[15, 22\.5, 45\]\. Expected all divided by 45",
    listed=False,
)
def accum_backward_running_total(model, micro_batches, optimizer, scheduler, loss_fn):
    # Backward on the running total every iteration: early micro-batches count again.
    optimizer.zero_grad()
    n_total = sum(int((b[:, 1:] != PAD).sum()) for b in micro_batches)
    total = 0
    for batch in micro_batches:
        total = total + loss_fn(model, batch)[0] / n_total
        total.backward(retain_graph=True)
    optimizer.step()
    scheduler.step()


@wrong("accumulation_step", r"Micro-batches \[3\] of 3 added nothing", listed=False)
def accum_skips_last(model, micro_batches, optimizer, scheduler, loss_fn):
    # Off by one: range(len(...) - 1) leaves the last micro-batch out.
    optimizer.zero_grad()
    n_total = sum(int((b[:, 1:] != PAD).sum()) for b in micro_batches)
    for i in range(len(micro_batches) - 1):
        (loss_fn(model, micro_batches[i])[0] / n_total).backward()
    optimizer.step()
    scheduler.step()


@wrong("accumulation_step", r"Micro-batches \[3\] of 3 added nothing", listed=False)
def accum_pairs_drop_remainder(model, micro_batches, optimizer, scheduler, loss_fn):
    # Walks the micro-batches in pairs (zip), silently dropping an odd one out.
    optimizer.zero_grad()
    n_total = sum(int((b[:, 1:] != PAD).sum()) for b in micro_batches)
    for first, second in zip(micro_batches[::2], micro_batches[1::2]):
        both = loss_fn(model, first)[0] + loss_fn(model, second)[0]
        (both / n_total).backward()
    optimizer.step()
    scheduler.step()


@wrong(
    "accumulation_step", r"Micro-batches \[1, 2, 3\] of 3 added nothing", listed=False
)
def accum_zero_before_step(model, micro_batches, optimizer, scheduler, loss_fn):
    # zero_grad placed just before the step "to start clean": the step sees nothing.
    n_total = sum(int((b[:, 1:] != PAD).sum()) for b in micro_batches)
    for batch in micro_batches:
        (loss_fn(model, batch)[0] / n_total).backward()
    optimizer.zero_grad()
    optimizer.step()
    scheduler.step()


@wrong(
    "accumulation_step",
    r"'scheduler stepped before the optimizer'.*learning rate "
    r"0\.25",
    listed=False,
)
def accum_scheduler_first(model, micro_batches, optimizer, scheduler, loss_fn):
    # The old PyTorch order: scheduler.step() before optimizer.step().
    optimizer.zero_grad()
    n_total = sum(int((b[:, 1:] != PAD).sum()) for b in micro_batches)
    for batch in micro_batches:
        (loss_fn(model, batch)[0] / n_total).backward()
    scheduler.step()
    optimizer.step()


@wrong("accumulation_step", r"'learning rate changed'", listed=False)
def accum_scales_lr_by_k(model, micro_batches, optimizer, scheduler, loss_fn):
    # The "linear scaling rule": k micro-batches make a k times bigger batch, so it
    # multiplies the learning rate by k before stepping.
    optimizer.zero_grad()
    n_total = sum(int((b[:, 1:] != PAD).sum()) for b in micro_batches)
    for batch in micro_batches:
        (loss_fn(model, batch)[0] / n_total).backward()
    for group in optimizer.param_groups:
        group["lr"] *= len(micro_batches)
    optimizer.step()
    scheduler.step()


@wrong("accumulation_step", r"scheduler\.step\(\) ran 0 times", listed=False)
def accum_forgets_scheduler(model, micro_batches, optimizer, scheduler, loss_fn):
    # The scheduler argument is never used.
    optimizer.zero_grad()
    n_total = sum(int((b[:, 1:] != PAD).sum()) for b in micro_batches)
    for batch in micro_batches:
        (loss_fn(model, batch)[0] / n_total).backward()
    optimizer.step()


@wrong("accumulation_step", r"optimizer\.step\(\) ran 0 times", listed=False)
def accum_fixed_accumulation_steps(model, micro_batches, optimizer, scheduler, loss_fn):
    # A hard-coded accumulation_steps = 4: with 3 micro-batches it never steps.
    accumulation_steps = 4
    n_total = sum(int((b[:, 1:] != PAD).sum()) for b in micro_batches)
    optimizer.zero_grad()
    for i, batch in enumerate(micro_batches):
        (loss_fn(model, batch)[0] / n_total).backward()
        if (i + 1) % accumulation_steps == 0:
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()


@wrong("accumulation_step", r"optimizer\.step\(\) ran 2 times", listed=False)
def accum_steps_twice(model, micro_batches, optimizer, scheduler, loss_fn):
    # Steps at the last micro-batch inside the loop, and once more after it.
    optimizer.zero_grad()
    n_total = sum(int((b[:, 1:] != PAD).sum()) for b in micro_batches)
    for i, batch in enumerate(micro_batches):
        (loss_fn(model, batch)[0] / n_total).backward()
        if i == len(micro_batches) - 1:
            optimizer.step()
    optimizer.step()
    scheduler.step()


@wrong("accumulation_step", r"scheduler\.step\(\) ran 2 times", listed=False)
def accum_scheduler_twice(model, micro_batches, optimizer, scheduler, loss_fn):
    # scheduler.step() both after the step and in a "finally" clean-up.
    try:
        optimizer.zero_grad()
        n_total = sum(int((b[:, 1:] != PAD).sum()) for b in micro_batches)
        for batch in micro_batches:
            (loss_fn(model, batch)[0] / n_total).backward()
        optimizer.step()
        scheduler.step()
    finally:
        scheduler.step()


@wrong("accumulation_step", r"raised TypeError.*at line \d+ of your code", listed=False)
def accum_divides_by_tuple(model, micro_batches, optimizer, scheduler, loss_fn):
    # Treats loss_fn's (loss_sum, n_tokens) pair as a tensor.
    optimizer.zero_grad()
    n_total = sum(int((b[:, 1:] != PAD).sum()) for b in micro_batches)
    for batch in micro_batches:
        (loss_fn(model, batch) / n_total).backward()
    optimizer.step()
    scheduler.step()


@wrong(
    "accumulation_step",
    r"by \[22\.5, 45, 45\]\. Expected all divided by 45",
    listed=False,
)
def accum_first_backward_twice(model, micro_batches, optimizer, scheduler, loss_fn):
    # A debugging backward left in: the first micro-batch's gradient counts twice.
    optimizer.zero_grad()
    n_total = sum(int((b[:, 1:] != PAD).sum()) for b in micro_batches)
    for i, batch in enumerate(micro_batches):
        loss = loss_fn(model, batch)[0] / n_total
        loss.backward(retain_graph=True)
        if i == 0:
            loss.backward()
    optimizer.step()
    scheduler.step()


@wrong(
    "accumulation_step",
    r"'gradient rescaled as a whole \(clipped\)'.*rescaled as "
    r"a whole to norm 1 ",
    listed=False,
)
def accum_clips(model, micro_batches, optimizer, scheduler, loss_fn):
    # Held out: clips the gradient to 1.0 before the step (a train_step habit).
    optimizer.zero_grad()
    n_total = sum(int((b[:, 1:] != PAD).sum()) for b in micro_batches)
    for b in micro_batches:
        loss_sum, _ = loss_fn(model, b)
        (loss_sum / n_total).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()


@wrong(
    "accumulation_step",
    r"'gradient rescaled as a whole \(clipped\)'.*rescaled as "
    r"a whole to norm 0\.5 ",
    listed=False,
)
def accum_normalises_gradient(model, micro_batches, optimizer, scheduler, loss_fn):
    # Hand-written "stabiliser": scales the summed gradient down to norm 0.5.
    for p in model.parameters():
        p.grad = None
    total = sum(n for _, n in (loss_fn(model, b) for b in micro_batches))
    for b in micro_batches:
        (loss_fn(model, b)[0] / total).backward()
    norm = torch.sqrt(sum((p.grad**2).sum() for p in model.parameters()))
    if norm > 0.5:
        for p in model.parameters():
            p.grad.mul_(0.5 / norm)
    optimizer.step()
    scheduler.step()


@wrong(
    "accumulation_step",
    r"'gradient rescaled as a whole \(clipped\)'.*rescaled as "
    r"a whole to norm 0\.577\d? ",
    listed=False,
)
def accum_clip_per_sqrt_k(model, micro_batches, optimizer, scheduler, loss_fn):
    # Clips at 1 / sqrt(k) "because the k micro-batch gradients add up".
    optimizer.zero_grad()
    counts = [int((b[:, 1:] != PAD).sum()) for b in micro_batches]
    for b in micro_batches:
        loss_fn(model, b)[0].mul(1.0 / sum(counts)).backward()
    params = list(model.parameters())
    torch.nn.utils.clip_grad_norm_(params, len(micro_batches) ** -0.5)
    optimizer.step()
    scheduler.step()


@wrong(
    "accumulation_step", r"'only the last micro-batch reached the step'", listed=False
)
def accum_autograd_overwrites(model, micro_batches, optimizer, scheduler, loss_fn):
    # Held out: torch.autograd.grad per micro-batch, p.grad = g keeps only the last.
    optimizer.zero_grad()
    params = [p for p in model.parameters() if p.requires_grad]
    n_total = sum(int((b[:, 1:] != PAD).sum()) for b in micro_batches)
    for b in micro_batches:
        loss_sum, _ = loss_fn(model, b)
        grads = torch.autograd.grad(loss_sum / n_total, params, allow_unused=True)
        for p, g in zip(params, grads):
            p.grad = g
    optimizer.step()
    scheduler.step()


@wrong(
    "accumulation_step", r"'only the last micro-batch reached the step'", listed=False
)
def accum_grad_none_each_batch(model, micro_batches, optimizer, scheduler, loss_fn):
    # Sets .grad to None by hand before each backward "to save memory".
    n = sum(int((b[:, 1:] != PAD).sum()) for b in micro_batches)
    for b in micro_batches:
        for p in model.parameters():
            p.grad = None
        loss_fn(model, b)[0].div(n).backward()
    optimizer.step()
    scheduler.step()


@right("accumulation_step")
def accum_two_pass(model, micro_batches, optimizer, scheduler, loss_fn):
    # Held out: counts tokens with a no-grad pass of loss_fn, then backward per batch.
    with torch.no_grad():
        total = sum(loss_fn(model, b)[1] for b in micro_batches)
    for p in model.parameters():
        p.grad = None
    for b in micro_batches:
        s, _ = loss_fn(model, b)
        s.div(total).backward()
    optimizer.step()
    scheduler.step()


# ============================================================================= amp_step


@right("amp_step")
def amp_lesson_order(model, batch, loss_fn, optimizer, scaler, max_norm):
    device_type = next(model.parameters()).device.type
    dtype = torch.float16 if device_type == "cuda" else torch.bfloat16
    optimizer.zero_grad()
    with torch.amp.autocast(device_type, dtype=dtype):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()


@right("amp_step")
def amp_autograd_grad(model, batch, loss_fn, optimizer, scaler, max_norm):
    # the gradients by torch.autograd.grad, written into .grad by hand
    device_type = next(model.parameters()).device.type
    dtype = torch.float16 if device_type == "cuda" else torch.bfloat16
    optimizer.zero_grad()
    with torch.amp.autocast(device_type, dtype=dtype):
        loss = loss_fn(model, batch)
    params = [p for p in model.parameters() if p.requires_grad]
    grads = torch.autograd.grad(scaler.scale(loss), params)
    for p, g in zip(params, grads):
        p.grad = g
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()


@right("amp_step")
def amp_backward_inside_autocast_manual_clip(
    model, batch, loss_fn, optimizer, scaler, max_norm
):
    device = next(model.parameters()).device
    for p in model.parameters():
        p.grad = None
    half = torch.float16 if device.type == "cuda" else torch.bfloat16
    with torch.autocast(device_type=device.type, dtype=half):
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


@right("amp_step")
def amp_zero_at_the_end(model, batch, loss_fn, optimizer, scaler, max_norm):
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


@right("amp_step")
def amp_default_autocast_dtype(model, batch, loss_fn, optimizer, scaler, max_norm):
    # torch.autocast's default dtype is bfloat16 on a CPU and float16 on CUDA.
    device_type = batch.device.type
    model.zero_grad(set_to_none=True)
    with torch.autocast(device_type):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss


@right("amp_step")
def amp_vector_norm_clip(model, batch, loss_fn, optimizer, scaler, max_norm):
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.amp.autocast(
        device_type=kind,
        dtype=torch.float16 if kind == "cuda" else torch.bfloat16,
        enabled=True,
    ):
        loss = loss_fn(model, batch)
    scaled = scaler.scale(loss)
    scaled.backward()
    scaler.unscale_(optimizer)
    grads = [p.grad for p in model.parameters()]
    total = torch.linalg.vector_norm(
        torch.stack([torch.linalg.vector_norm(g) for g in grads])
    )
    factor = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    torch._foreach_mul_(grads, factor)
    scaler.step(optimizer)
    scaler.update()
    return loss.detach().float()


@right("amp_step")
def amp_clip_param_groups(model, batch, loss_fn, optimizer, scaler, max_norm):
    on_gpu = next(model.parameters()).is_cuda
    optimizer.zero_grad(set_to_none=False)
    ctx = torch.amp.autocast(
        "cuda" if on_gpu else "cpu", dtype=torch.float16 if on_gpu else torch.bfloat16
    )
    with ctx:
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(
        [p for g in optimizer.param_groups for p in g["params"]],
        max_norm,
        error_if_nonfinite=False,
    )
    scaler.step(optimizer)
    scaler.update()
    return loss


@right("amp_step")
def amp_skips_overflow_by_hand(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Checks the unscaled gradients itself instead of letting scaler.step do it.
    kind = next(model.parameters()).device.type
    dtype = torch.float16 if kind == "cuda" else torch.bfloat16
    optimizer.zero_grad()
    with torch.amp.autocast(kind, dtype=dtype):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    if torch.isfinite(norm):
        optimizer.step()
    scaler.update()
    return loss


@right("amp_step")
def amp_returns_float(model, batch, loss_fn, optimizer, scaler, max_norm):
    device_type = str(next(model.parameters()).device).split(":")[0]
    optimizer.zero_grad()
    low = torch.bfloat16 if device_type == "cpu" else torch.float16
    with torch.autocast(device_type=device_type, dtype=low):
        step_loss = loss_fn(model, batch)
    scaler.scale(step_loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm, norm_type=2.0)
    scaler.step(optimizer)
    scaler.update()
    return float(step_loss)


def _half_for(kind):
    return torch.float16 if kind == "cuda" else torch.bfloat16


@wrong("amp_step", r"'no backward'.*no parameter got a gradient", listed=False)
def amp_backward_not_called(model, batch, loss_fn, optimizer, scaler, max_norm):
    # .backward without its parentheses: the method is looked up, never called
    device_type = next(model.parameters()).device.type
    dtype = torch.float16 if device_type == "cuda" else torch.bfloat16
    optimizer.zero_grad()
    with torch.amp.autocast(device_type, dtype=dtype):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()


@wrong("amp_step", r"'clipping before unscale_'", listed=True)
def amp_clip_then_unscale(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Clips right after backward, as in an fp32 loop, then unscales.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
    return loss


@wrong("amp_step", r"'clipping before unscale_'", listed=True)
def amp_clip_no_unscale(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Leaves unscaling to scaler.step, so the clip sees the scaled gradients.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(optimizer.param_groups[0]["params"], max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss


@wrong("amp_step", r"'gradients not clipped'", listed=True)
def amp_max_norm_unused(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Forgot the clipping line entirely.
    kind = next(model.parameters()).device.type
    model.zero_grad()
    with torch.autocast(device_type=kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
    return loss.item()


@wrong("amp_step", r"optimizer\.step\(\) instead of scaler\.step", listed=True)
def amp_optimizer_step_after_unscale(
    model, batch, loss_fn, optimizer, scaler, max_norm
):
    # Unscales and clips, then steps the optimizer directly: no overflow skip.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    scaler.update()
    return loss


@wrong("amp_step", r"optimizer\.step\(\) instead of scaler\.step", listed=True)
def amp_plain_step_scaled(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Scales the loss, then finishes as if there were no scaler.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    optimizer.step()
    scaler.update()
    return loss


@wrong("amp_step", r"'scaler\.update\(\) missing'", listed=True)
def amp_no_update(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Thought scaler.step also updates the scale.
    kind = next(model.parameters()).device.type
    for p in model.parameters():
        p.grad = None
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    return loss.detach()


@wrong("amp_step", r"'loss not scaled'", listed=True)
def amp_plain_backward(model, batch, loss_fn, optimizer, scaler, max_norm):
    # loss.backward() out of habit; the scaler only used for the step.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    loss.backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss


@wrong("amp_step", r"'zero_grad missing'", listed=True)
def amp_never_zeroes(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Nothing clears the gradients between steps.
    kind = next(model.parameters()).device.type
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss


@wrong("amp_step", r"'forward not under autocast'", listed=True)
def amp_fp32_forward(model, batch, loss_fn, optimizer, scaler, max_norm):
    # The scaler is there, the autocast block is not.
    optimizer.zero_grad()
    loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss


@wrong("amp_step", r"'wrong autocast dtype'", listed=True)
def amp_dtypes_swapped(model, batch, loss_fn, optimizer, scaler, max_norm):
    # float16 and bfloat16 the wrong way round.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    wrong_dtype = torch.bfloat16 if kind == "cuda" else torch.float16
    with torch.autocast(kind, dtype=wrong_dtype):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss


@wrong(
    "amp_step", r"'forward not under autocast'|autocast in torch\.float32", listed=False
)
def amp_autocast_float32(model, batch, loss_fn, optimizer, scaler, max_norm):
    # "Mixed precision" with float32 as the low precision: autocast changes nothing.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=torch.float32):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss


@wrong("amp_step", r"'gradients clipped by value'.*clamped to ±0\.05", listed=False)
def amp_clip_by_value(model, batch, loss_fn, optimizer, scaler, max_norm):
    # clip_grad_value_ picked from autocomplete instead of clip_grad_norm_.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_value_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss


@wrong("amp_step", r"'each parameter clipped on its own'", listed=False)
def amp_clip_each_parameter(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Clips in a loop, one parameter at a time: each tensor's own norm is clipped.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    for p in model.parameters():
        torch.nn.utils.clip_grad_norm_(p, max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss


@wrong(
    "amp_step",
    r"optimizer stepped with gradient norm 0\.2\d* .*clipped at "
    r"max_norm=0\.05 it is 0\.05",
    listed=False,
)
def amp_clip_inf_norm(model, batch, loss_fn, optimizer, scaler, max_norm):
    # norm_type=inf: the largest element, not the Euclidean norm, is clipped.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm, norm_type=float("inf"))
    scaler.step(optimizer)
    scaler.update()
    return loss


@wrong("amp_step", r"'gradients unscaled twice'", listed=False)
def amp_divides_by_scale_again(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Unscales with unscale_ and then once more by hand, "to be sure".
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    for p in model.parameters():
        p.grad /= scaler.get_scale()
    scaler.step(optimizer)
    scaler.update()
    return loss


@wrong("amp_step", r"'gradients unscaled twice'", listed=False)
def amp_unscales_by_hand(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Divides by the scale by hand, not knowing scaler.step unscales too.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    inv = 1.0 / scaler.get_scale()
    for p in model.parameters():
        p.grad.mul_(inv)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss


@wrong("amp_step", r"'gradients unscaled twice'", listed=False)
def amp_update_before_step(model, batch, loss_fn, optimizer, scaler, max_norm):
    # update() right after unscale_, step last: step then unscales a second time.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.update()
    scaler.step(optimizer)
    return loss


@wrong("amp_step", r"'overflowing step not skipped'", listed=False)
def amp_zeroes_bad_gradients(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Replaces NaN/inf gradients by 0 right after the backward "so that one bad batch
    # cannot break the model": the scaler never sees the overflow.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    for p in model.parameters():
        if p.grad is not None:
            p.grad.nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0)
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss


@wrong("amp_step", r"scaler\.update\(\) ran 2 times", listed=False)
def amp_update_twice(model, batch, loss_fn, optimizer, scaler, max_norm):
    # An extra update() left over from a copy-paste.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    scaler.update()
    return loss


@wrong("amp_step", r"optimizer\.step\(\) ran 2 times", listed=False)
def amp_steps_twice(model, batch, loss_fn, optimizer, scaler, max_norm):
    # scaler.step(optimizer) and optimizer.step(): two steps per call.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    optimizer.step()
    scaler.update()
    return loss


@wrong(
    "amp_step", r"returned \d[\d.e+]*, 1024 × the loss: the scaled loss", listed=False
)
def amp_returns_scaled_loss(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Returns the tensor it called backward on.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    scaled = scaler.scale(loss)
    scaled.backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return scaled.detach()


@wrong("amp_step", r"returned NoneType, not the loss", listed=False)
def amp_returns_nothing(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Forgot the return statement.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()


@wrong(
    "amp_step",
    r"after your backward were 1\.04858e\+06 × the loss's gradient; the "
    r"scaler's scale was 1024",
    listed=False,
)
def amp_scales_twice(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Scales inside the autocast block and again at backward.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = scaler.scale(loss_fn(model, batch))
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss / scaler.get_scale()


@wrong(
    "amp_step",
    r"after your backward were 1024 × the loss's gradient; the scaler's "
    r"scale was 512",
    listed=False,
)
def amp_hard_coded_scale(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Multiplies by a fixed 1024 instead of the scaler's current scale.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    (loss * 1024.0).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss


@wrong(
    "amp_step",
    r"'clipped after the optimizer step'.*gradient norm 1\.[78]\d* ",
    listed=False,
)
def amp_clip_after_step(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Clips after the step: the update already used the unclipped gradients.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.update()
    return loss


@wrong(
    "amp_step",
    r"'gradients zeroed before the step'.*gradient norm 0 \(0 × the "
    r"true gradient",
    listed=False,
)
def amp_zero_grad_after_backward(model, batch, loss_fn, optimizer, scaler, max_norm):
    # zero_grad moved next to the step, after the backward it wipes out.
    kind = next(model.parameters()).device.type
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    optimizer.zero_grad(set_to_none=False)
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss


@wrong(
    "amp_step",
    r"raised RuntimeError: unscale_\(\) has already been called",
    listed=False,
)
def amp_unscale_twice(model, batch, loss_fn, optimizer, scaler, max_norm):
    # unscale_ before clipping and again before the step.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
    return loss


@wrong(
    "amp_step",
    r"raised RuntimeError: element 0 of tensors does not require grad",
    listed=False,
)
def amp_detached_loss(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Detaches the loss "to save memory" before calling backward on it.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch).detach()
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss


@wrong(
    "amp_step",
    r"after your backward still held 0\.5\d* × step 1's gradient",
    listed=False,
)
def amp_halves_old_gradients(model, batch, loss_fn, optimizer, scaler, max_norm):
    # "Momentum by hand": halves the old gradients instead of zeroing them.
    kind = next(model.parameters()).device.type
    for p in model.parameters():
        if p.grad is not None:
            p.grad.mul_(0.5)
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss


@wrong(
    "amp_step",
    r"after your backward were 65536 × the loss's gradient; the scaler's "
    r"scale was 1024",
    listed=False,
)
def amp_new_scaler_each_step(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Builds its own GradScaler (the seed's habit) and ignores the one it was given.
    kind = next(model.parameters()).device.type
    scaler = torch.amp.GradScaler(kind)
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss


@wrong(
    "amp_step",
    r"optimizer stepped with gradient norm 1 \(0\.5\d* × the true "
    r"gradient",
    listed=False,
)
def amp_clip_hard_coded_one(model, batch, loss_fn, optimizer, scaler, max_norm):
    # clip_grad_norm_(..., 1.0) from a tutorial: max_norm is ignored.
    kind = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    return loss


@wrong(
    "amp_step",
    r"'clipped after the optimizer step'.*scaler\.step → .*"
    r"scaler\.unscale_",
    listed=False,
)
def amp_unscale_after_step(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Held out: unscale_ + clip placed after scaler.step (the step saw unclipped grads).
    dt = next(model.parameters()).device.type
    optimizer.zero_grad()
    half = torch.float16 if dt == "cuda" else torch.bfloat16
    with torch.amp.autocast(dt, dtype=half):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.update()
    return loss


@wrong(
    "amp_step",
    r"'clipped after the optimizer step'.*a change of the gradients",
    listed=False,
)
def amp_unscale_step_then_clip(model, batch, loss_fn, optimizer, scaler, max_norm):
    # Unscales in the right place but clips once the step is done ("tidy up at the end")
    kind = next(model.parameters()).device.type
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device_type=kind, dtype=_half_for(kind)):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
    torch.nn.utils.clip_grad_norm_(list(model.parameters()), max_norm)
    return loss.detach()


# ========================================================================== make_loader


@right("make_loader")
def loader_distributed_sampler(dataset, rank, world_size, epoch, batch_size):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


@right("make_loader")
def loader_shared_permutation_strided(dataset, rank, world_size, epoch, batch_size):
    g = torch.Generator().manual_seed(1234 + epoch)
    order = torch.randperm(len(dataset), generator=g)[rank::world_size].tolist()
    return DataLoader(Subset(dataset, order), batch_size=batch_size)


@right("make_loader")
def loader_sampler_drop_last(dataset, rank, world_size, epoch, batch_size):
    sampler = DistributedSampler(
        dataset, num_replicas=world_size, rank=rank, seed=7, drop_last=True
    )
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, num_workers=0)


@right("make_loader")
def loader_contiguous_chunks(dataset, rank, world_size, epoch, batch_size):
    g = torch.Generator()
    g.manual_seed(epoch)
    chunk = torch.randperm(len(dataset), generator=g).tensor_split(world_size)[rank]
    return DataLoader(dataset, sampler=chunk.tolist(), batch_size=batch_size)


@right("make_loader")
def loader_seed_is_the_epoch(dataset, rank, world_size, epoch, batch_size):
    # seed=epoch instead of set_epoch: a new, shared shuffle every epoch all the same.
    sampler = DistributedSampler(dataset, world_size, rank, shuffle=True, seed=epoch)
    return DataLoader(dataset, batch_size, sampler=sampler)


@right("make_loader")
def loader_batch_sampler(dataset, rank, world_size, epoch, batch_size):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, seed=3)
    sampler.set_epoch(epoch)
    batches = BatchSampler(sampler, batch_size=batch_size, drop_last=False)
    return DataLoader(dataset, batch_sampler=batches)


@right("make_loader")
def loader_python_random(dataset, rank, world_size, epoch, batch_size):
    indices = list(range(len(dataset)))
    random.Random(100 + epoch).shuffle(indices)
    mine = indices[rank : len(indices) : world_size]
    return DataLoader(Subset(dataset, mine), batch_size=batch_size, shuffle=False)


@right("make_loader")
def loader_sampler_indices_as_subset(dataset, rank, world_size, epoch, batch_size):
    sampler = DistributedSampler(
        dataset,
        num_replicas=world_size,
        rank=rank,
        shuffle=True,
        seed=0,
        drop_last=False,
    )
    sampler.set_epoch(epoch)
    return DataLoader(
        Subset(dataset, list(iter(sampler))), batch_size=batch_size, pin_memory=False
    )


@wrong("make_loader", r"'no DistributedSampler'", listed=True)
def loader_plain_shuffle(dataset, rank, world_size, epoch, batch_size):
    # The single-process loader, unchanged.
    return DataLoader(dataset, batch_size=batch_size, shuffle=True)


@wrong("make_loader", r"'no set_epoch'", listed=True)
def loader_forgets_set_epoch(dataset, rank, world_size, epoch, batch_size):
    # The epoch argument is never used.
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


@wrong("make_loader", r"'no shuffling'", listed=True)
def loader_shuffle_false(dataset, rank, world_size, epoch, batch_size):
    # shuffle=False, as an evaluation loader would have.
    sampler = DistributedSampler(
        dataset, num_replicas=world_size, rank=rank, shuffle=False
    )
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


@wrong("make_loader", r"'batches larger than batch_size'", listed=True)
def loader_global_batch(dataset, rank, world_size, epoch, batch_size):
    # Reads batch_size as the global batch and multiplies it by the world size.
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size * world_size, sampler=sampler)


@wrong("make_loader", r"'epoch misses samples'.*each rank \[6, 6\]", listed=True)
def loader_replicas_doubled(dataset, rank, world_size, epoch, batch_size):
    # num_replicas counts two processes per "world" slot.
    sampler = DistributedSampler(dataset, num_replicas=2 * world_size, rank=rank)
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


@wrong(
    "make_loader",
    r"'ranks overlap'.*7 samples were read by more than one rank",
    listed=True,
)
def loader_seed_from_rank(dataset, rank, world_size, epoch, batch_size):
    # A "different seed per process" habit from data augmentation.
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, seed=rank)
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


@wrong("make_loader", r"'shuffle not seeded'|'ranks overlap'", listed=True)
def loader_unseeded_randperm(dataset, rank, world_size, epoch, batch_size):
    # A fresh unseeded permutation per call: the processes cannot agree on it.
    order = torch.randperm(len(dataset))[rank::world_size].tolist()
    return DataLoader(Subset(dataset, order), batch_size=batch_size)


@wrong("make_loader", r"'DistributedSampler not told the world'", listed=False)
def loader_one_replica(dataset, rank, world_size, epoch, batch_size):
    # num_replicas=1 copied from a single-GPU example.
    sampler = DistributedSampler(dataset, num_replicas=1, rank=0)
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


@wrong(
    "make_loader",
    r"'rank not used'.*all 2 ranks read the same 12 samples",
    listed=False,
)
def loader_rank_zero(dataset, rank, world_size, epoch, batch_size):
    # rank=0 hard-coded while testing on one machine.
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=0)
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


@wrong("make_loader", r"'rank not used'", listed=False)
def loader_first_share_for_all(dataset, rank, world_size, epoch, batch_size):
    # A shared shuffle, but every rank takes the first 1/world_size of it.
    g = torch.Generator().manual_seed(epoch)
    order = torch.randperm(len(dataset), generator=g)
    share = len(dataset) // world_size
    return DataLoader(Subset(dataset, order[:share].tolist()), batch_size=batch_size)


@wrong(
    "make_loader", r"'batches smaller than batch_size'.*held \[1, 1, 1", listed=False
)
def loader_batch_divided_by_world(dataset, rank, world_size, epoch, batch_size):
    # Divides the batch between the processes, taking batch_size as the global batch.
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    sampler.set_epoch(epoch)
    return DataLoader(
        dataset, batch_size=max(1, batch_size // world_size), sampler=sampler
    )


@wrong("make_loader", r"'last batch dropped'.*each rank \[4, 4, 4\]", listed=False)
def loader_dataloader_drop_last(dataset, rank, world_size, epoch, batch_size):
    # drop_last=True on the DataLoader, "so every step has a full batch".
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=True)


@wrong("make_loader", r"'last batch dropped'", listed=False)
def loader_batch_sampler_drop_last(dataset, rank, world_size, epoch, batch_size):
    # A BatchSampler with drop_last=True on top of the right sampler.
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    sampler.set_epoch(epoch)
    return DataLoader(
        dataset, batch_sampler=BatchSampler(sampler, batch_size, drop_last=True)
    )


@wrong("make_loader", r"'ranks overlap'", listed=False)
def loader_set_epoch_rank(dataset, rank, world_size, epoch, batch_size):
    # set_epoch(rank): the rank and the epoch arguments mixed up.
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    sampler.set_epoch(rank)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


@wrong("make_loader", r"'ranks overlap'", listed=False)
def loader_generator_per_rank(dataset, rank, world_size, epoch, batch_size):
    # Seeds the shared permutation with rank + epoch: each rank shuffles differently.
    g = torch.Generator().manual_seed(rank + 10 * epoch)
    order = torch.randperm(len(dataset), generator=g)[rank::world_size]
    return DataLoader(Subset(dataset, order.tolist()), batch_size=batch_size)


@wrong("make_loader", r"'epochs repeat an order'.*epochs 0 and 2", listed=False)
def loader_epoch_mod_two(dataset, rank, world_size, epoch, batch_size):
    # set_epoch(epoch % 2), copied from a two-phase schedule.
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    sampler.set_epoch(epoch % 2)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


@wrong("make_loader", r"'no set_epoch'", listed=False)
def loader_fixed_generator(dataset, rank, world_size, epoch, batch_size):
    # A seeded permutation, but seeded with a constant: every epoch the same.
    g = torch.Generator().manual_seed(0)
    order = torch.randperm(len(dataset), generator=g)[rank::world_size].tolist()
    return DataLoader(Subset(dataset, order), batch_size=batch_size)


@wrong("make_loader", r"'split never reshuffled'", listed=False)
def loader_shuffle_own_share(dataset, rank, world_size, epoch, batch_size):
    # Shards first, then shuffles each rank's fixed share with the epoch's seed.
    share = Subset(dataset, list(range(rank, len(dataset), world_size)))
    g = torch.Generator().manual_seed(epoch)
    return DataLoader(share, batch_size=batch_size, shuffle=True, generator=g)


@wrong("make_loader", r"'split never reshuffled'", listed=False)
def loader_contiguous_block_shuffled(dataset, rank, world_size, epoch, batch_size):
    # Each rank owns a contiguous block and reorders it with the epoch's seed.
    per = -(-len(dataset) // world_size)
    block = list(range(rank * per, min(len(dataset), (rank + 1) * per)))
    random.Random(epoch).shuffle(block)
    return DataLoader(Subset(dataset, block), batch_size=batch_size)


@wrong("make_loader", r"'shuffle not seeded'", listed=False)
def loader_unseeded_within_share(dataset, rank, world_size, epoch, batch_size):
    # The right share, then shuffle=True with the DataLoader's unseeded generator.
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    sampler.set_epoch(epoch)
    return DataLoader(
        Subset(dataset, list(sampler)), batch_size=batch_size, shuffle=True
    )


@wrong("make_loader", r"raised ValueError: Invalid rank 2", listed=False)
def loader_ranks_from_one(dataset, rank, world_size, epoch, batch_size):
    # Counts ranks from 1, so the last rank is out of range.
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank + 1)
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


@wrong(
    "make_loader",
    r"raised ValueError: Invalid rank.*at line \d+ of your code",
    listed=False,
)
def loader_positional_arguments_swapped(dataset, rank, world_size, epoch, batch_size):
    # DistributedSampler(dataset, rank, world_size): the positional order is replicas,
    # then rank.
    sampler = DistributedSampler(dataset, rank, world_size)
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


@wrong(
    "make_loader",
    r"raised ValueError: sampler option is mutually exclusive with "
    r"shuffle",
    listed=False,
)
def loader_sampler_and_shuffle(dataset, rank, world_size, epoch, batch_size):
    # shuffle=True kept next to the sampler.
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, shuffle=True)


@wrong("make_loader", r"expected batches of sample tensors, got int", listed=False)
def loader_returns_sampler(dataset, rank, world_size, epoch, batch_size):
    # Returns the sampler: it yields indices, not batches of samples.
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    sampler.set_epoch(epoch)
    return sampler


@wrong("make_loader", r"'epochs repeat an order'.*epochs 0 and 1", listed=False)
def loader_epoch_halved(dataset, rank, world_size, epoch, batch_size):
    # set_epoch(epoch // 2): a new shuffle only every second epoch.
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    sampler.set_epoch(epoch // 2)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


@wrong("make_loader", r"'epoch misses samples'.*each rank \[8, 8\]", listed=False)
def loader_share_off_by_one(dataset, rank, world_size, epoch, batch_size):
    # Cuts the shared permutation into world_size + 1 pieces (fence-post mistake).
    g = torch.Generator().manual_seed(epoch)
    order = torch.randperm(len(dataset), generator=g)
    share = len(dataset) // (world_size + 1)
    mine = order[rank * share : (rank + 1) * share]
    return DataLoader(Subset(dataset, mine.tolist()), batch_size=batch_size)
