"""train_step (chapter 6, book/ch06_training): the unit tests of
``ch06.check_train_step`` and its hidden ``check_train_step_by_hand``, with wrong steps
(each rejected with its named diagnosis) and right ones written differently (each
accepted); the hidden test accepts the lesson's step and refuses the reference's.

Each wrong one says what bug it is, spelled as a learner might, not as the check's own
variant is.
"""

import pytest
import torch
import torch.nn.functional as F
from units_ch06 import step_clips_after_update, step_scheduler_first

from tformer_grading.checks import CheckFailure, ch06
from tformer_ref import training

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


def step_loss_writes_into_the_labels(
    model, src, tgt, opt, sched, max_norm, pad_id, eps
):
    """Wrong: the labels, a view of tgt, get -100 written into them in place, so the
    decoder input tgt[:, :-1] (another view of it) changes before backward needs it."""
    model.train()
    opt.zero_grad()
    tgt_in, labels = tgt[:, :-1], tgt[:, 1:]
    logits = model(src, tgt_in)
    labels[labels == pad_id] = -100
    loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), label_smoothing=eps)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    sched.step()
    return loss.item(), norm.item()


def test_a_crash_names_the_decoder_input_only_when_its_shape_is_wrong():
    # Bug: a step that raised after changing tgt in place was told its decoder read
    # "a tensor of shape [4, 6]": its input had the right shape, the values compared
    # were the ones the step had overwritten.
    with pytest.raises(CheckFailure) as raised:
        ch06.check_train_step(step_loss_writes_into_the_labels)
    assert "raised" in str(raised.value)
    assert "decoder read" not in str(raised.value)
