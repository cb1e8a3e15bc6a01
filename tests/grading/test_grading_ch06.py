"""Chapter 6 graded with the real nbgrader CLI: generate -> autograde -> feedback.

One autograde run grades a small class: the solution, the untouched student version,
and one buggy submission per diagnosed pitfall. Each must score exactly what it
deserves, and the feedback must name the pitfall.
"""

import pytest

from course import Buggy, GradedChapter

CHAPTER = "ch06_training"
FULL = {
    "test_shift_targets": 2,
    "test_sequence_loss": 3,
    "test_noam_lambda": 2,
    "test_make_scheduler": 2,
    "test_train_step": 3,
    "test_train_step_by_hand": 1,
    "test_greedy_decode": 3,
    "test_greedy_by_hand": 1,
}

# Slices the first axis, as for [St, B] targets: here it drops a batch row.
SHIFT_SEQ_FIRST = """
def shift_targets(tgt):
    return tgt[:-1, :], tgt[1:, :]
"""
# No ignore_index: the padded positions count in the mean.
LOSS_COUNTS_PADDING = """
def sequence_loss(logits, labels, pad_id, label_smoothing):
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1),
                           label_smoothing=label_smoothing)
"""
# The paper's formula on LambdaLR's 0-based step: 0 ** -0.5 at the first step.
NOAM_SEED = """
def noam_lambda(step, d_model, warmup):
    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


def make_scheduler(optimizer, d_model, warmup):
    return LambdaLR(optimizer, lambda step: noam_lambda(step, d_model, warmup))
"""
# The scheduler is an optimizer wrapper: its step() also steps the optimizer.
SCHEDULER_STEPS = """
def noam_lambda(step, d_model, warmup):
    n = step + 1
    return d_model ** -0.5 * min(n ** -0.5, n * warmup ** -1.5)


class AdamWarmup:
    def __init__(self, optimizer, d_model, warmup):
        self.optimizer, self.step_num = optimizer, 0
        self.d_model, self.warmup = d_model, warmup
        for group in optimizer.param_groups:
            group["lr"] = noam_lambda(0, d_model, warmup)

    def step(self):
        self.step_num += 1
        for group in self.optimizer.param_groups:
            group["lr"] = noam_lambda(self.step_num, self.d_model, self.warmup)
        self.optimizer.step()


def make_scheduler(optimizer, d_model, warmup):
    return AdamWarmup(optimizer, d_model, warmup)
"""
# Clips after optimizer.step(): the update used the unclipped gradients.
CLIP_AFTER_STEP = """
def train_step(model, src, tgt, optimizer, scheduler, max_norm, pad_id,
               label_smoothing):
    optimizer.zero_grad()
    tgt_in, labels = shift_targets(tgt)
    loss = sequence_loss(model(src, tgt_in), labels, pad_id, label_smoothing)
    loss.backward()
    optimizer.step()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scheduler.step()
    return loss.item(), norm.item()
"""
# The loop never breaks: it runs max_len steps after every sequence has finished.
GREEDY_NO_STOP = """
def greedy_decode(model, src, max_len, bos_id, eos_id, pad_id):
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            tgt_mask = causal_mask(out.size(1), src.device)
            logits = model.decode(out, memory, src_mask, tgt_mask)
            nxt = logits[:, -1].argmax(-1).masked_fill(done, pad_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            done |= nxt == eos_id
    return out
"""
# The decoder gets no target mask: each position attends to the ones after it.
GREEDY_NO_MASK = """
def greedy_decode(model, src, max_len, bos_id, eos_id, pad_id):
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            logits = model.decode(out, memory, src_mask, None)
            nxt = logits[:, -1].argmax(-1).masked_fill(done, pad_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            done |= nxt == eos_id
            if done.all():
                break
    return out
"""
# Hands the loop to the reference's greedy_decode.
GREEDY_CALLS_REFERENCE = """
def greedy_decode(model, src, max_len, bos_id, eos_id, pad_id):
    from tformer_ref.decoding import greedy_decode as reference
    return reference(model, src, max_len, bos_id, eos_id, pad_id)
"""

BUGGY = {
    "shift_seq_first": Buggy(
        answers={"shift_targets": SHIFT_SEQ_FIRST},
        zero=("test_shift_targets", "test_train_step", "test_train_step_by_hand"),
        feedback="sequence-first slicing on batch-first data",
    ),
    "loss_counts_padding": Buggy(
        answers={"sequence_loss": LOSS_COUNTS_PADDING},
        # The by-hand cell needs a right step too, measured by the judge.
        zero=("test_sequence_loss", "test_train_step", "test_train_step_by_hand"),
        feedback="padding counted in the loss",
    ),
    "noam_seed": Buggy(
        answers={"noam": NOAM_SEED},
        zero=("test_noam_lambda", "test_make_scheduler"),
        feedback="Noam schedule divides by zero at step 0",
    ),
    "scheduler_steps": Buggy(
        answers={"noam": SCHEDULER_STEPS},
        zero=("test_make_scheduler",),
        feedback="scheduler steps the optimizer",
    ),
    "clip_after_step": Buggy(
        answers={"train_step": CLIP_AFTER_STEP},
        zero=("test_train_step", "test_train_step_by_hand"),
        feedback="clipping after the step",
    ),
    "greedy_no_stop": Buggy(
        answers={"greedy_decode": GREEDY_NO_STOP},
        # The by-hand cell needs right behaviour too, measured by the judge.
        zero=("test_greedy_decode", "test_greedy_by_hand"),
        feedback="greedy decoding does not stop at EOS",
    ),
    "greedy_no_mask": Buggy(
        answers={"greedy_decode": GREEDY_NO_MASK},
        # The by-hand cell needs right behaviour too, measured by the judge.
        zero=("test_greedy_decode", "test_greedy_by_hand"),
        feedback="greedy decoding without the causal mask",
    ),
    "greedy_calls_reference": Buggy(
        answers={"greedy_decode": GREEDY_CALLS_REFERENCE},
        zero=("test_greedy_decode", "test_greedy_by_hand"),
        feedback="calls tformer_ref.greedy_decode",
    ),
}


# One autograde run per chapter, on one worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(CHAPTER)]


class TestGrading(GradedChapter):
    chapter, full, buggy = CHAPTER, FULL, BUGGY
    hidden_marker, hidden_student = "check_greedy_by_hand", "greedy_calls_reference"
