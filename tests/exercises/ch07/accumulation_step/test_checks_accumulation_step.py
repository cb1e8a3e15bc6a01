"""accumulation_step (chapter 7, book/ch07_scale): the unit tests of
``ch07.check_accumulation_step`` and its hidden ``check_accumulation_by_hand``, with
wrong steps (each rejected with its named diagnosis or the measured divisor) and right
ones written differently (each accepted).

Beyond the bank (bank_accumulation_step.py): the lesson a failure points to (§7.3), and
the hidden test: own code accepted, delegation to the course's accumulation or the
check's own reference refused, a learner who switches the profiler off named.

Each wrong one says what bug it is, spelled as a learner might, not as the check's own
variant is.
"""

import sys

import pytest
import torch
from bank_accumulation_step import accum_backward_sums as accum_summed
from bank_accumulation_step import accum_counts_padding, accum_mean_of_means
from bank_accumulation_step import (
    accum_divide_grads_at_the_end as accum_right_divide_grads_after,
)
from bank_accumulation_step import accum_no_zero_grad as accum_never_zeroed
from bank_accumulation_step import accum_one_backward as accum_right_one_backward
from units_ch07 import PAD, _n_targets, accum_right, accum_seed_style

from tformer_grading.checks import CheckFailure, ch07
from tformer_grading.checks.ch07 import accumulation_step

# -------------------------------------------------------------------- accumulation_step


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


def accum_first_batch_tokens(model, micro_batches, optimizer, scheduler, loss_fn):
    # Bug: divides by the first micro-batch's tokens times k (the check measures it).
    optimizer.zero_grad()
    n_first = _n_targets(micro_batches[0])
    for batch in micro_batches:
        (loss_fn(model, batch)[0] / n_first / len(micro_batches)).backward()
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


# ------------------------------------------------------- written by hand (hidden tests)


@pytest.mark.parametrize(
    "fn", [accum_right, accum_right_one_backward, accum_right_weighted_means]
)
def test_accumulation_by_hand_accepts_own_code(fn, capsys):
    ch07.check_accumulation_by_hand(fn)
    assert "✓ accumulation_step: written by hand" in capsys.readouterr().out


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


def test_by_hand_rejects_switching_the_recorder_off():
    with pytest.raises(CheckFailure, match="changed sys.setprofile"):
        ch07.check_accumulation_by_hand(accum_switches_recorder_off)
