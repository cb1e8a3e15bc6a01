"""Chapter 7's measured bank for accumulation_step (the format: tests/bank/bank.py).

The accumulation probe's first step has 3 micro-batches with 9, 21 and 15 real target
tokens (45 in all, 90 target positions, 10 sequences): the measured divisors below are
those numbers.
"""

import torch

from bank import GENERIC, right, wrong  # noqa: F401
from exercise_cells import graders

GRADERS = graders("ch07_scale", {"accumulation_step": "accumulation_step"})


PAD = 0


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
