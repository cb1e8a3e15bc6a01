"""The chapter 6 checks, tested with banks of wrong implementations (each rejected with
its named diagnosis) and right ones written differently (each accepted). Each wrong one
says what bug it is, spelled as a learner might, not as the check's own variant is."""

import math
import re

import pytest
import torch
import torch.nn.functional as F
from torch.optim.lr_scheduler import LambdaLR

from tformer_ref import training
from tformer_grading.checks import CheckFailure, ch06
from tformer_ref.masks import causal_mask

# ------------------------------------------------------------------------ shift_targets

RIGHT_SHIFT = [
    training.shift_targets,
    lambda t: (t[..., :-1], t[..., 1:]),
    lambda t: (t.narrow(1, 0, t.size(1) - 1), t.narrow(1, 1, t.size(1) - 1)),
    # Slices sequence-first after transposing, and transposes back.
    lambda t: tuple(x.transpose(0, 1) for x in (t.T[:-1], t.T[1:])),
]


@pytest.mark.parametrize("fn", RIGHT_SHIFT)
def test_shift_accepts_right_implementations(fn, capsys):
    ch06.check_shift_targets(fn)
    assert "✓ shift_targets" in capsys.readouterr().out


def shift_seed_style(tgt):  # the seed's slices: on batch-first data axis 0 is the batch
    return tgt[:-1, :], tgt[1:, :]


def shift_narrow_first_axis(tgt):  # the same axis mix-up, written with narrow
    n = len(tgt) - 1
    return tgt.narrow(0, 0, n), tgt.narrow(0, 1, n)


def shift_backwards(tgt):  # decoder input and labels swapped
    labels, decoder_in = tgt[:, :-1], tgt[:, 1:]
    return decoder_in, labels


def shift_labels_forgotten(tgt):  # the labels are the decoder input itself
    decoder_in = tgt[:, :-1]
    return decoder_in, decoder_in.clone()


def shift_nothing(tgt):  # the whole target goes in and comes out
    return tgt.clone(), tgt.clone()


def shift_by_two(tgt):  # two steps instead of one: no known pitfall
    return tgt[:, :-2], tgt[:, 2:]


def shift_returns_input_only(tgt):  # forgot to return the labels
    return tgt[:, :-1]


@pytest.mark.parametrize(
    "fn,diagnosis",
    [
        (shift_seed_style, "sequence-first slicing on batch-first data"),
        (shift_narrow_first_axis, "sequence-first slicing on batch-first data"),
        (shift_backwards, "targets shifted the wrong way"),
        (shift_labels_forgotten, "labels not shifted"),
        (shift_nothing, "no shift at all"),
        (shift_by_two, r"labels are 2 position\(s\) after"),
        (shift_returns_input_only, "does not return a pair"),
    ],
)
def test_shift_rejects_wrong_implementations(fn, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch06.check_shift_targets(fn)


def test_shift_names_slices_moved_to_another_device():
    # On a GPU a learner's `.cpu()` moves the slices off tgt's device. A CPU-only
    # machine has no second real device (`.cpu()` moves nothing there), so the bank
    # cannot hold this answer; the meta device stands in for the GPU here.
    def shift_targets(tgt):
        return tgt[:, :-1].to("meta"), tgt[:, 1:].to("meta")

    with pytest.raises(CheckFailure, match=r"'tensors moved to another device'.*meta"):
        ch06.check_shift_targets(shift_targets)


def test_shift_failure_points_to_the_lesson():
    with pytest.raises(CheckFailure) as info:
        ch06.check_shift_targets(shift_seed_style)
    where = "§6.2 'Teacher forcing and the shift' in book/ch06_training/lesson.ipynb"
    assert where in str(info.value)


# ------------------------------------------------------------------------ sequence_loss


def loss_masked_by_hand(logits, labels, pad_id, eps):
    """Smoothed cross-entropy written out: (1-eps)·NLL + eps·mean over the vocabulary of
    -log p."""
    logp = logits.log_softmax(-1)
    nll = -logp.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    per_token = (1 - eps) * nll - eps * logp.mean(-1)
    keep = labels != pad_id
    return per_token[keep].sum() / keep.sum()


def loss_transposed(logits, labels, pad_id, eps):
    return F.cross_entropy(
        logits.transpose(1, 2), labels, ignore_index=pad_id, label_smoothing=eps
    )


def loss_module(logits, labels, pad_id, eps):
    crit = torch.nn.CrossEntropyLoss(ignore_index=pad_id, label_smoothing=eps)
    return crit(logits.view(-1, logits.shape[-1]), labels.flatten())


@pytest.mark.parametrize(
    "fn", [training.sequence_loss, loss_masked_by_hand, loss_transposed, loss_module]
)
def test_loss_accepts_right_implementations(fn, capsys):
    ch06.check_sequence_loss(fn)
    assert "✓ sequence_loss" in capsys.readouterr().out


def loss_counts_padding(logits, labels, pad_id, eps):  # no ignore_index
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), label_smoothing=eps)


def loss_plain_cross_entropy(logits, labels, pad_id, eps):
    # Neither ignore_index nor label_smoothing.
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten())


def loss_divides_by_everything(logits, labels, pad_id, eps):
    # The pads are zeroed in the sum but still counted in the mean.
    per = F.cross_entropy(
        logits.flatten(0, 1), labels.flatten(), reduction="none", label_smoothing=eps
    )
    return (per * (labels.flatten() != pad_id)).mean()


def loss_hard_coded_pad(logits, labels, pad_id, eps):  # the seed's "x != 0"
    return F.cross_entropy(
        logits.flatten(0, 1), labels.flatten(), ignore_index=0, label_smoothing=eps
    )


def loss_no_smoothing(logits, labels, pad_id, eps):
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=pad_id)


def loss_summed(logits, labels, pad_id, eps):
    return F.cross_entropy(
        logits.flatten(0, 1),
        labels.flatten(),
        ignore_index=pad_id,
        label_smoothing=eps,
        reduction="sum",
    )


def loss_item(logits, labels, pad_id, eps):  # a float, detached from the graph
    return torch.tensor(training.sequence_loss(logits, labels, pad_id, eps).item())


def loss_as_float(logits, labels, pad_id, eps):  # nothing left to call backward on
    loss = F.cross_entropy(
        logits.flatten(0, 1), labels.flatten(), ignore_index=pad_id, label_smoothing=eps
    )
    return loss.item()


def loss_per_token(logits, labels, pad_id, eps):  # one loss per position
    return F.cross_entropy(
        logits.transpose(1, 2),
        labels,
        ignore_index=pad_id,
        label_smoothing=eps,
        reduction="none",
    )


def loss_wrong_axis(logits, labels, pad_id, eps):
    # logits [B, St, V] passed as if [N, C, d]: a shape error.
    return F.cross_entropy(logits, labels, ignore_index=pad_id)


@pytest.mark.parametrize(
    "fn,diagnosis",
    [
        (loss_counts_padding, "padding counted in the loss"),
        (
            loss_plain_cross_entropy,
            "padding counted in the loss and no label smoothing",
        ),
        (loss_divides_by_everything, "padding counted in the mean"),
        (loss_hard_coded_pad, "pad id hard-coded to 0"),
        (loss_no_smoothing, "label smoothing ignored"),
        (loss_summed, "summed, not averaged"),
        (loss_item, "loss detached from the graph"),
        (loss_as_float, "loss detached from the graph"),
        (loss_per_token, "loss not reduced to a scalar"),
        (loss_wrong_axis, "your code raised"),
    ],
)
def test_loss_rejects_wrong_implementations(fn, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch06.check_sequence_loss(fn)


# -------------------------------------------------------------------------- noam_lambda


def noam_numpy(step, d_model, warmup):
    import numpy as np

    n = np.float64(step + 1)
    return float(np.minimum(n**-0.5, n / warmup**1.5) / np.sqrt(d_model))


def noam_branches(step, d_model, warmup):
    n = step + 1
    rate = n * warmup**-1.5 if n < warmup else n**-0.5
    return rate / math.sqrt(d_model)


@pytest.mark.parametrize("fn", [training.noam_lambda, noam_numpy, noam_branches])
def test_noam_accepts_right_implementations(fn, capsys):
    ch06.check_noam_lambda(fn)
    assert "✓ noam_lambda" in capsys.readouterr().out


def noam_seed(step, d_model, warmup):  # the seed's formula with LambdaLR's 0-based step
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def noam_numpy_inf(step, d_model, warmup):
    # numpy: 0 ** -0.5 is inf (with a warning), not an exception.
    import numpy as np

    n = np.float64(step)
    return float(d_model**-0.5 * np.minimum(n**-0.5, n * warmup**-1.5))


def noam_guarded(step, d_model, warmup):
    # max(step, 1) hides the division by zero, not the off-by-one.
    step = max(step, 1)
    return min(1 / math.sqrt(step), step / warmup**1.5) / math.sqrt(d_model)


def noam_skips_step_zero(step, d_model, warmup):
    # Rate 0 for the first update, then one update behind.
    if step == 0:
        return 0.0
    return min(step**-0.5, step / (warmup * math.sqrt(warmup))) / math.sqrt(d_model)


def noam_two_ahead(step, d_model, warmup):  # adds one to a count that starts at one
    update = step + 1
    n = update + 1
    return (1 / math.sqrt(d_model)) * min(1 / math.sqrt(n), n * warmup**-1.5)


def noam_warmup_sqrt(step, d_model, warmup):
    # The warm-up branch is n / sqrt(warmup) instead of n / warmup^1.5.
    n = step + 1
    return min(n**-0.5, n / math.sqrt(warmup)) / math.sqrt(d_model)


def noam_no_width_factor(step, d_model, warmup):  # forgot d_model^-0.5
    n = step + 1
    return min(1 / math.sqrt(n), n / warmup**1.5)


def noam_max(step, d_model, warmup):  # max where the formula has min
    n = step + 1
    return max(n**-0.5, n / warmup**1.5) / d_model**0.5


def noam_constant(step, d_model, warmup):  # a fixed rate: no known pitfall
    return 1e-3


@pytest.mark.parametrize(
    "fn,diagnosis",
    [
        (noam_seed, "divides by zero at step 0"),
        (noam_numpy_inf, "off by one"),  # min(inf, 0) = 0: the first update gets rate 0
        (noam_guarded, "off by one"),
        (noam_skips_step_zero, "off by one"),
        (noam_two_ahead, "off by one"),
        (noam_warmup_sqrt, "warm-up exponent wrong"),
        (noam_no_width_factor, r"missing the d_model\^-0.5 factor"),
        (noam_max, "max instead of min"),
        (noam_constant, r"your rate goes like n\^0,"),
    ],
)
def test_noam_rejects_wrong_implementations(fn, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch06.check_noam_lambda(fn)


# ----------------------------------------------------------------------- make_scheduler


class NoamByHand:
    """A scheduler class that only sets the rate (right, without LambdaLR)."""

    def __init__(self, optimizer, d_model, warmup):
        self.opt, self.d, self.w, self.n = optimizer, d_model, warmup, 0
        self._set()

    def _set(self):
        self.n += 1
        for g in self.opt.param_groups:
            g["lr"] = self.d**-0.5 * min(self.n**-0.5, self.n * self.w**-1.5)

    def step(self):
        self._set()


class SeedAdamWarmup:
    """The seed's AdamWarmup: sets the rate, then steps the optimizer itself."""

    def __init__(self, optimizer, d_model, warmup):
        self.optimizer, self.model_size = optimizer, d_model
        self.warmup_steps, self.current_step = warmup, 0

    def step(self):
        self.current_step += 1
        n, w = self.current_step, self.warmup_steps
        lr = self.model_size**-0.5 * min(n**-0.5, n * w**-1.5)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.step()


class NoamThatAlsoSteps(LambdaLR):
    """LambdaLR with a "convenient" step() that applies the update too."""

    def __init__(self, optimizer, d_model, warmup):
        super().__init__(optimizer, lambda s: training.noam_lambda(s, d_model, warmup))

    def step(self, *args, **kwargs):
        self.optimizer.step()
        super().step(*args, **kwargs)


class LateNoam(NoamByHand):
    """Sets the rate only in step(): the first update runs at the initial lr."""

    def __init__(self, optimizer, d_model, warmup):
        self.opt, self.d, self.w, self.n = optimizer, d_model, warmup, 0


def scheduler_one_ahead(optimizer, d_model, warmup):  # noam_lambda already adds one
    return LambdaLR(optimizer, lambda s: training.noam_lambda(s + 1, d_model, warmup))


def scheduler_seed_formula(optimizer, d_model, warmup):
    # step ** -0.5 at LambdaLR's first call, step 0.
    def rate(step):
        return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)

    return LambdaLR(optimizer, rate)


def scheduler_constant(optimizer, d_model, warmup):  # half the base rate, always
    return LambdaLR(optimizer, lambda step: 0.5)


def scheduler_forgot_return(optimizer, d_model, warmup):  # built it, returned nothing
    LambdaLR(optimizer, lambda step: training.noam_lambda(step, d_model, warmup))


def scheduler_lr_lambda_list(optimizer, d_model, warmup):
    """Right, written differently: a list with one rate function per parameter group."""

    def rate(s):
        return (d_model**-0.5) * min((s + 1) ** -0.5, (s + 1) * warmup**-1.5)

    return LambdaLR(optimizer, lr_lambda=[rate])


@pytest.mark.parametrize(
    "make",
    [
        lambda o, d, w: training.noam_scheduler(o, d, w),
        lambda o, d, w: LambdaLR(o, lambda s: training.noam_lambda(s, d, w)),
        scheduler_lr_lambda_list,
        NoamByHand,
    ],
)
def test_scheduler_accepts_right_implementations(make, capsys):
    ch06.check_noam_scheduler(make)
    assert "✓ make_scheduler" in capsys.readouterr().out


@pytest.mark.parametrize(
    "make,diagnosis",
    [
        (SeedAdamWarmup, "scheduler steps the optimizer"),
        (NoamThatAlsoSteps, "scheduler steps the optimizer"),
        (LateNoam, "off by one"),
        (scheduler_one_ahead, "off by one"),
        (scheduler_seed_formula, "raised ZeroDivisionError"),
        (scheduler_constant, "learning rate never changes.*stayed 0.5"),
        (scheduler_forgot_return, "step\\(\\) method"),
    ],
)
def test_scheduler_rejects_wrong_implementations(make, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch06.check_noam_scheduler(make)


# --------------------------------------------------------------------------- train_step


def step_as_in_the_lesson(
    model, src, tgt, optimizer, scheduler, max_norm, pad_id, label_smoothing
):
    """Wrong since the text asks for training mode: the lesson's order, but no
    model.train(), and the check hands over a model left in eval mode."""
    optimizer.zero_grad()
    tgt_in, labels = training.shift_targets(tgt)
    loss = training.sequence_loss(model(src, tgt_in), labels, pad_id, label_smoothing)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    scheduler.step()
    return loss.item(), norm.item()


def step_right_functional(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    """Wrong (no model.train()), otherwise right written differently: zero_grad
    without set_to_none, loss on transposed logits, norm by hand."""
    opt.zero_grad(set_to_none=False)
    logits = model(src, tgt[:, :-1])
    loss = F.cross_entropy(
        logits.permute(0, 2, 1), tgt[:, 1:], ignore_index=pad_id, label_smoothing=eps
    )
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    norm = torch.sqrt(sum((g.double() ** 2).sum() for g in grads))
    scale = min(1.0, max_norm / (float(norm) + 1e-6))
    for g in grads:
        g.mul_(scale)
    opt.step()
    sched.step()
    return float(loss), float(norm)


def step_zeroes_at_the_end(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    """Right, written differently: the gradients are cleared after the update, not
    before."""
    model.train()
    dec_in, dec_out = tgt[:, :-1], tgt[:, 1:]
    logits = model(src, dec_in)
    loss = F.cross_entropy(
        logits.reshape(-1, logits.size(-1)),
        dec_out.reshape(-1),
        ignore_index=pad_id,
        label_smoothing=eps,
    )
    loss.backward()
    params = [p for p in model.parameters() if p.requires_grad]
    total = torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type=2.0)
    opt.step()
    sched.step()
    opt.zero_grad(set_to_none=True)
    return float(loss.detach()), float(total)


@pytest.mark.parametrize("fn", [training.train_step, step_zeroes_at_the_end])
def test_train_step_accepts_right_implementations(fn, capsys):
    ch06.check_train_step(fn)
    assert "✓ train_step" in capsys.readouterr().out


def step_clips_before_backward(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    opt.zero_grad()
    tgt_in, labels = training.shift_targets(tgt)
    loss = training.sequence_loss(model(src, tgt_in), labels, pad_id, eps)
    # No gradients exist yet.
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    loss.backward()
    opt.step()
    sched.step()
    return loss.item(), norm.item()


def step_clips_stale_gradients(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    # Clips last batch's gradients, which zero_grad is about to clear.
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.zero_grad()
    tgt_in, labels = training.shift_targets(tgt)
    loss = training.sequence_loss(model(src, tgt_in), labels, pad_id, eps)
    loss.backward()
    opt.step()
    sched.step()
    return loss.item(), norm.item()


def step_clips_after_update(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    opt.zero_grad()
    logits = model(src, tgt[:, :-1])
    loss = training.sequence_loss(logits, tgt[:, 1:], pad_id, eps)
    loss.backward()
    opt.step()
    # The weights have already moved by the unclipped gradient.
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    sched.step()
    return loss.item(), norm.item()


def step_never_zeroes(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    # No zero_grad: the gradients pile up across steps.
    tgt_in, labels = training.shift_targets(tgt)
    loss = training.sequence_loss(model(src, tgt_in), labels, pad_id, eps)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    sched.step()
    return loss.item(), norm.item()


def step_no_sched(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    # Forgot scheduler.step().
    opt.zero_grad()
    tgt_in, labels = training.shift_targets(tgt)
    loss = training.sequence_loss(model(src, tgt_in), labels, pad_id, eps)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    return loss.item(), norm.item()


def step_scheduler_first(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    opt.zero_grad()
    tgt_in, labels = training.shift_targets(tgt)
    loss = training.sequence_loss(model(src, tgt_in), labels, pad_id, eps)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    sched.step()  # before the optimizer: the first update already uses the second rate
    opt.step()
    return loss.item(), norm.item()


def step_loss_with_padding(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    opt.zero_grad()
    tgt_in, labels = training.shift_targets(tgt)
    logits = model(src, tgt_in)
    # No ignore_index: the padding is in the loss.
    loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), label_smoothing=eps)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    sched.step()
    return loss.item(), norm.item()


def step_shift_swapped(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    opt.zero_grad()
    labels, tgt_in = training.shift_targets(tgt)  # the pair unpacked in the wrong order
    loss = training.sequence_loss(model(src, tgt_in), labels, pad_id, eps)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    sched.step()
    return loss.item(), norm.item()


def step_reports_clipped_norm(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    opt.zero_grad()
    tgt_in, labels = training.shift_targets(tgt)
    loss = training.sequence_loss(model(src, tgt_in), labels, pad_id, eps)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    # The norm measured after clipping, not before.
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    norm = torch.norm(torch.stack([g.norm() for g in grads]))
    opt.step()
    sched.step()
    return loss.item(), norm.item()


def step_returns_loss_only(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    loss, _ = training.train_step(model, src, tgt, opt, sched, max_norm, pad_id, eps)
    return loss


@pytest.mark.parametrize(
    "fn,diagnosis",
    [
        (step_clips_before_backward, "clipping before backward"),
        (step_clips_stale_gradients, "clipping before backward"),
        (step_clips_after_update, "clipping after the step"),
        (step_never_zeroes, "gradients never zeroed"),
        (step_no_sched, "scheduler not stepped"),
        (step_scheduler_first, "scheduler stepped before the optimizer"),
        (step_loss_with_padding, "padding counted in the loss"),
        (step_shift_swapped, "targets shifted the wrong way"),
        (step_reports_clipped_norm, "norm measured after clipping"),
        (step_as_in_the_lesson, "training step in eval mode"),
        (step_right_functional, "training step in eval mode"),
        (step_returns_loss_only, r"must return \(loss, grad_norm\)"),
    ],
)
def test_train_step_rejects_wrong_implementations(fn, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch06.check_train_step(fn)


def test_train_step_by_hand():
    ch06.check_train_step_by_hand(step_as_in_the_lesson)
    with pytest.raises(CheckFailure, match="calls tformer_ref.train_step"):
        ch06.check_train_step_by_hand(training.train_step)


# ------------------------------------------------------------------------ greedy_decode


def greedy_as_in_the_lesson(model, src, max_len, bos_id, eos_id, pad_id):
    """Right: eval, no grad, encode once, causal mask, last position, pad finished rows,
    stop when all have ended."""
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        finished = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            mask = causal_mask(out.size(1), src.device)
            logits = model.decode(out, memory, src_mask, mask)
            nxt = logits[:, -1].argmax(dim=-1).masked_fill(finished, pad_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            finished |= nxt == eos_id
            if finished.all():
                break
    return out


def greedy_per_row(model, src, max_len, bos_id, eos_id, pad_id):
    """Wrong since the text asks for the leading BOS: one sequence at a time, padded
    to a common width, returned without BOS."""
    model.eval()
    rows = []
    with torch.inference_mode():
        for i in range(src.size(0)):
            memory, src_mask = model.encode(src[i : i + 1])
            ys = [bos_id]
            for _ in range(max_len):
                n = len(ys)
                mask = torch.tril(torch.ones(n, n)).bool()[None, None]
                logits = model.decode(torch.tensor([ys]), memory, src_mask, mask)
                ys.append(int(logits[0, -1].argmax()))
                if ys[-1] == eos_id:
                    break
            rows.append(ys[1:])
    width = max(len(r) for r in rows)
    return torch.tensor([r + [pad_id] * (width - len(r)) for r in rows])


@torch.no_grad()
def greedy_while_loop(model, src, max_len, bos_id, eos_id, pad_id):
    """Right, written differently: a while loop over a list of columns, torch.where for
    the padding."""
    model.eval()
    memory, src_mask = model.encode(src)
    columns = [torch.full((src.shape[0],), bos_id, dtype=torch.long)]
    alive = torch.ones(src.shape[0], dtype=torch.bool)
    while alive.any() and len(columns) <= max_len:
        ys = torch.stack(columns, dim=1)
        t = ys.shape[1]
        keep = torch.ones(t, t, dtype=torch.bool).tril()
        scores = model.decode(ys, memory, src_mask, keep)[:, t - 1, :]
        padding = torch.full_like(alive, pad_id, dtype=torch.long)
        token = torch.where(alive, scores.argmax(-1), padding)
        columns.append(token)
        alive &= token != eos_id
    return torch.stack(columns, dim=1)


@pytest.mark.parametrize("fn", [greedy_as_in_the_lesson, greedy_while_loop])
def test_greedy_accepts_right_implementations(fn, capsys):
    ch06.check_greedy_decode(fn)
    ch06.check_greedy_by_hand(fn)
    assert capsys.readouterr().out.count("✓ greedy_decode") == 2


def greedy_without_mask(model, src, max_len, bos_id, eos_id, pad_id):
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
        finished = torch.zeros(src.size(0), dtype=torch.bool)
        for _ in range(max_len):
            # No tgt_mask: every position sees all the others.
            logits = model.decode(out, memory, src_mask)
            nxt = logits[:, -1].argmax(-1).masked_fill(finished, pad_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            finished |= nxt == eos_id
            if finished.all():
                break
    return out


def greedy_inverted_mask(model, src, max_len, bos_id, eos_id, pad_id):
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
        finished = torch.zeros(src.size(0), dtype=torch.bool)
        for _ in range(max_len):
            # True = masked, another library's convention: the opposite of tril.
            mask = ~causal_mask(out.size(1))
            nxt = model.decode(out, memory, src_mask, mask)[:, -1].argmax(-1)
            nxt[finished] = pad_id
            out = torch.cat([out, nxt[:, None]], dim=1)
            finished |= nxt == eos_id
            if finished.all():
                break
    return out


def greedy_triu_mask(model, src, max_len, bos_id, eos_id, pad_id):
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
        finished = torch.zeros(src.size(0), dtype=torch.bool)
        for _ in range(max_len):
            t = out.size(1)
            mask = torch.triu(torch.ones(t, t)).bool()  # the future, not the past
            logits = model.decode(out, memory, src_mask, mask)
            nxt = logits[:, -1].argmax(-1).masked_fill(finished, pad_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            finished |= nxt == eos_id
            if finished.all():
                break
    return out


def greedy_float_mask(model, src, max_len, bos_id, eos_id, pad_id):
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
        for _ in range(max_len):
            # An additive float mask (0 / -inf) where the model takes a bool one.
            mask = torch.nn.Transformer.generate_square_subsequent_mask(out.size(1))
            nxt = model.decode(out, memory, src_mask, mask)[:, -1].argmax(-1)
            out = torch.cat([out, nxt[:, None]], dim=1)
    return out


def greedy_runs_to_max_len(model, src, max_len, bos_id, eos_id, pad_id):
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
        finished = torch.zeros(src.size(0), dtype=torch.bool)
        for _ in range(max_len):  # pads the finished rows but never breaks
            logits = model.decode(out, memory, src_mask, causal_mask(out.size(1)))
            nxt = logits[:, -1].argmax(-1).masked_fill(finished, pad_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            finished |= nxt == eos_id
    return out


def greedy_ignores_eos(model, src, max_len, bos_id, eos_id, pad_id):
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
        for _ in range(max_len):  # never looks at eos_id: tokens keep coming after EOS
            logits = model.decode(out, memory, src_mask, causal_mask(out.size(1)))
            out = torch.cat([out, logits[:, -1:].argmax(-1)], dim=1)
    return out


def greedy_stops_at_any_eos(model, src, max_len, bos_id, eos_id, pad_id):
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
        for _ in range(max_len):
            logits = model.decode(out, memory, src_mask, causal_mask(out.size(1)))
            nxt = logits[:, -1].argmax(-1)
            out = torch.cat([out, nxt[:, None]], dim=1)
            if eos_id in nxt.tolist():  # one row ended, so the whole batch stops
                break
    return out


def greedy_any_finished(model, src, max_len, bos_id, eos_id, pad_id):
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
        finished = torch.zeros(src.size(0), dtype=torch.bool)
        for _ in range(max_len):
            logits = model.decode(out, memory, src_mask, causal_mask(out.size(1)))
            nxt = logits[:, -1].argmax(-1).masked_fill(finished, pad_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            finished |= nxt == eos_id
            if finished.any():  # any instead of all
                break
    return out


def greedy_train_mode(model, src, max_len, bos_id, eos_id, pad_id):
    with torch.no_grad():  # no model.eval(): dropout stays on
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
        finished = torch.zeros(src.size(0), dtype=torch.bool)
        for _ in range(max_len):
            logits = model.decode(out, memory, src_mask, causal_mask(out.size(1)))
            nxt = logits[:, -1].argmax(-1).masked_fill(finished, pad_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            finished |= nxt == eos_id
            if finished.all():
                break
    return out


def greedy_with_autograd(model, src, max_len, bos_id, eos_id, pad_id):
    model.eval()  # but no torch.no_grad(): a graph is built at every step
    memory, src_mask = model.encode(src)
    out = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
    finished = torch.zeros(src.size(0), dtype=torch.bool)
    for _ in range(max_len):
        logits = model.decode(out, memory, src_mask, causal_mask(out.size(1)))
        nxt = logits[:, -1].argmax(-1).masked_fill(finished, pad_id)
        out = torch.cat([out, nxt[:, None]], dim=1)
        finished |= nxt == eos_id
        if finished.all():
            break
    return out


def greedy_calls_the_model(model, src, max_len, bos_id, eos_id, pad_id):
    model.eval()
    with torch.no_grad():
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
        finished = torch.zeros(src.size(0), dtype=torch.bool)
        for _ in range(max_len):
            logits = model(src, out)  # the full forward re-encodes the source each time
            nxt = logits[:, -1].argmax(-1).masked_fill(finished, pad_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            finished |= nxt == eos_id
            if finished.all():
                break
    return out


def greedy_first_position(model, src, max_len, bos_id, eos_id, pad_id):
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
        finished = torch.zeros(src.size(0), dtype=torch.bool)
        for _ in range(max_len):
            logits = model.decode(out, memory, src_mask, causal_mask(out.size(1)))
            # Position 0 (BOS) predicts the first token, at every step.
            nxt = logits[:, 0, :].argmax(-1)
            nxt = torch.where(finished, pad_id, nxt)
            out = torch.cat([out, nxt[:, None]], dim=1)
            finished |= nxt == eos_id
            if finished.all():
                break
    return out


def greedy_last_token_only(model, src, max_len, bos_id, eos_id, pad_id):
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
        finished = torch.zeros(src.size(0), dtype=torch.bool)
        for _ in range(max_len):
            # Feeds only the newest token: the decoder forgets the history.
            logits = model.decode(out[:, -1:], memory, src_mask, causal_mask(1))
            nxt = logits[:, -1].argmax(-1).masked_fill(finished, pad_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            finished |= nxt == eos_id
            if finished.all():
                break
    return out


def greedy_returns_lists(model, src, max_len, bos_id, eos_id, pad_id):
    # A list of rows, not a tensor.
    out = greedy_as_in_the_lesson(model, src, max_len, bos_id, eos_id, pad_id)
    return out.tolist()


WRONG_GREEDY = [
    (greedy_without_mask, "greedy decoding without the causal mask"),
    (greedy_inverted_mask, "greedy decoding without the causal mask"),
    (greedy_triu_mask, "upper triangular"),
    (greedy_float_mask, "your code raised TypeError"),
    (greedy_runs_to_max_len, "greedy decoding does not stop at EOS"),
    (greedy_ignores_eos, "greedy decoding does not stop at EOS"),
    (greedy_stops_at_any_eos, "stops the whole batch at the first EOS"),
    (greedy_any_finished, "stops the whole batch at the first EOS"),
    (greedy_train_mode, "decoding in training mode"),
    (greedy_with_autograd, "decoding with gradients enabled"),
    (greedy_calls_the_model, "source encoded at every step"),
    (greedy_first_position, "argmax of the first position"),
    (greedy_last_token_only, "decoder fed only the newest token"),
    (greedy_per_row, "output without the leading BOS"),
    (greedy_returns_lists, "expected a LongTensor"),
]


@pytest.mark.parametrize("fn,diagnosis", WRONG_GREEDY)
def test_greedy_rejects_wrong_implementations(fn, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch06.check_greedy_decode(fn)


def test_every_decoding_diagnosis_has_a_wrong_learner_in_the_bank():
    """Each diagnosis check_greedy_decode can name is expected by some WRONG_GREEDY
    entry or some greedy_decode entry of the measured bank (tests/bank, whose tests
    show that entry gets it)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bank"))
    from bank import entries

    expected = [pattern for _, pattern in WRONG_GREEDY]
    measured = [
        re.search(r"'([^']+)'", e.expect)
        for e in entries("ch06_loop")
        if e.exercise == "greedy_decode" and e.expect
    ]
    names = {m.group(1) for m in measured if m}
    for _, diagnosis in ch06.DECODE_PROBES:
        assert diagnosis.name in names or any(
            re.search(p, diagnosis.name) for p in expected
        ), diagnosis.name


def test_greedy_by_hand_rejects_the_reference():
    from tformer_ref.decoding import greedy_decode

    def delegating(model, src, max_len, bos_id, eos_id, pad_id):
        return greedy_decode(model, src, max_len, bos_id, eos_id, pad_id)

    with pytest.raises(CheckFailure, match="calls tformer_ref.greedy_decode"):
        ch06.check_greedy_by_hand(delegating)


def test_checks_write_nothing_to_stderr(capfd):
    ch06.check_train_step(training.train_step)
    ch06.check_noam_scheduler(training.noam_scheduler)
    for fn in (step_scheduler_first, step_clips_after_update):
        with pytest.raises(CheckFailure):
            ch06.check_train_step(fn)
    with pytest.raises(CheckFailure):
        ch06.check_greedy_decode(greedy_with_autograd)
    with pytest.raises(CheckFailure):
        ch06.check_noam_lambda(noam_numpy_inf)  # numpy warns on 0 ** -0.5
    assert capfd.readouterr().err == ""
