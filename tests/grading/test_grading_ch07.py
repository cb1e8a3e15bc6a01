"""Chapter 7 graded with the real nbgrader CLI: generate -> autograde -> feedback.

One autograde run grades a small class: the solution, the untouched student
version, and one buggy submission per diagnosed pitfall the issue names. Each
must score exactly what it deserves, and the feedback must name the pitfall.
"""

import pytest

from course import Buggy, GradedChapter

CHAPTER = "ch07_scale"
FULL = {"test_accumulation_step": 4, "test_amp_step": 4, "test_make_loader": 3}

# Each micro-batch's mean loss backpropagated as is: the gradients add up k means.
ACCUM_NOT_DIVIDED = """
def accumulation_step(model, micro_batches, optimizer, scheduler, loss_fn):
    optimizer.zero_grad()
    for batch in micro_batches:
        loss_sum, n = loss_fn(model, batch)
        (loss_sum / n).backward()
    optimizer.step()
    scheduler.step()
"""
# zero_grad inside the loop: only the last micro-batch's gradients reach the step.
ACCUM_ZERO_EACH = """
def accumulation_step(model, micro_batches, optimizer, scheduler, loss_fn):
    n_total = sum(count_targets(b) for b in micro_batches)
    for batch in micro_batches:
        optimizer.zero_grad()
        loss_sum, _ = loss_fn(model, batch)
        (loss_sum / n_total).backward()
    optimizer.step()
    scheduler.step()
"""
# The seed's loop: each micro-batch's mean divided by k, which weighs the micro-batches
# alike however many real tokens each holds.
ACCUM_SEED = """
def accumulation_step(model, micro_batches, optimizer, scheduler, loss_fn):
    accumulation_steps = len(micro_batches)
    for i, batch in enumerate(micro_batches):
        loss_sum, n = loss_fn(model, batch)
        loss = loss_sum / n
        loss = loss / accumulation_steps
        loss.backward()
        if (i + 1) % accumulation_steps == 0:
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
"""
# Clips the still-scaled gradients: the threshold is compared with scale times the norm.
AMP_CLIP_BEFORE_UNSCALE = """
def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm):
    kind = next(model.parameters()).device.type
    half = torch.float16 if kind == "cuda" else torch.bfloat16
    optimizer.zero_grad()
    with torch.autocast(kind, dtype=half):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
    return loss
"""
# A plain shuffled DataLoader: every process iterates the whole dataset.
LOADER_NO_SAMPLER = """
def make_loader(dataset, rank, world_size, epoch, batch_size):
    return DataLoader(dataset, batch_size=batch_size, shuffle=True)
"""
# The sampler is never told the epoch: each epoch repeats the same order.
LOADER_NO_SET_EPOCH = """
def make_loader(dataset, rank, world_size, epoch, batch_size):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)
"""

# The three cells are graded independently, so one learner can carry one bug per cell:
# fewer notebooks keep the real autograde run short.
BUGGY = {
    "not_divided_clip_first_no_sampler": Buggy(
        answers={
            "accumulation_step": ACCUM_NOT_DIVIDED,
            "amp_step": AMP_CLIP_BEFORE_UNSCALE,
            "make_loader": LOADER_NO_SAMPLER,
        },
        zero=("test_accumulation_step", "test_amp_step", "test_make_loader"),
        feedback=(
            "loss not divided under accumulation",
            "clipping before unscale_",
            "no DistributedSampler",
        ),
    ),
    "zero_grad_each_no_set_epoch": Buggy(
        answers={
            "accumulation_step": ACCUM_ZERO_EACH,
            "make_loader": LOADER_NO_SET_EPOCH,
        },
        zero=("test_accumulation_step", "test_make_loader"),
        feedback=("zero_grad every micro-step", "no set_epoch"),
    ),
    "seed_divides_by_k": Buggy(
        answers={"accumulation_step": ACCUM_SEED},
        zero=("test_accumulation_step",),
        feedback=("divided by micro-batches, not by tokens",),
    ),
}


# One autograde run per chapter, on one worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(CHAPTER)]


class TestGrading(GradedChapter):
    chapter, full, buggy = CHAPTER, FULL, BUGGY
    hidden_marker, hidden_student = "hidden=True", "solution"
