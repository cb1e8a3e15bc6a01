"""Chapter 6's measured bank for train_step (the format: tests/bank/bank.py).

In the notebook a learner's train_step calls their own shift_targets and sequence_loss;
the two right ones below stand for them.
"""

import torch
import torch.nn.functional as F

from bank import GENERIC, right, wrong  # noqa: F401
from exercise_cells import graders
from tformer_ref.baselines import TorchTransformer

GRADERS = graders("ch06_training", {"train_step": "train_step"})


def shift_targets(tgt):
    return tgt[:, :-1], tgt[:, 1:]


def sequence_loss(logits, labels, pad_id, label_smoothing):
    return F.cross_entropy(
        logits.reshape(-1, logits.size(-1)),
        labels.reshape(-1),
        ignore_index=pad_id,
        label_smoothing=label_smoothing,
    )


# ------------------------------------------------------------------------------- right


@right("train_step")
def step_as_in_the_text(
    model, src, tgt, optimizer, scheduler, max_norm, pad_id, label_smoothing
):
    model.train()
    optimizer.zero_grad()
    tgt_in, labels = shift_targets(tgt)
    loss = sequence_loss(model(src, tgt_in), labels, pad_id, label_smoothing)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    scheduler.step()
    return loss.item(), norm.item()


@right("train_step")
def step_zero_grad_last(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    model.train()
    logits = model(src, tgt[:, :-1])
    loss = F.cross_entropy(
        logits.flatten(0, 1),
        tgt[:, 1:].flatten(),
        ignore_index=pad_id,
        label_smoothing=eps,
    )
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    sched.step()
    opt.zero_grad(set_to_none=True)  # cleared after the update instead of before
    return float(loss), float(norm)


@right("train_step")
def step_clips_by_hand(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    model.train(True)
    opt.zero_grad(set_to_none=False)
    logits = model(src, tgt[:, :-1])
    loss = F.cross_entropy(
        logits.permute(0, 2, 1), tgt[:, 1:], ignore_index=pad_id, label_smoothing=eps
    )
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    total = torch.sqrt(sum((g.double() ** 2).sum() for g in grads))
    scale = min(1.0, max_norm / (float(total) + 1e-6))
    for g in grads:
        g.mul_(scale)
    opt.step()
    sched.step()
    return float(loss), float(total)


@right("train_step")
def step_nll_of_log_softmax(
    model, src, tgt, optimizer, scheduler, max_norm, pad_id, label_smoothing
):
    model.train()
    model.zero_grad()
    dec_in, dec_out = tgt[:, :-1], tgt[:, 1:]
    logp = model(src, dec_in).log_softmax(-1)
    keep = dec_out != pad_id
    nll = -logp.gather(-1, dec_out.unsqueeze(-1)).squeeze(-1)
    smooth = -logp.mean(-1)
    per_token = (1 - label_smoothing) * nll + label_smoothing * smooth
    loss = per_token[keep].mean()
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    scheduler.step()
    return loss.item(), norm.item()


@right("train_step")
def step_set_grads_to_none(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    model.train()
    for p in model.parameters():
        p.grad = None
    tgt_in, labels = shift_targets(tgt)
    out = model(src, tgt_in)
    mask = (labels != pad_id).float()
    ce = F.cross_entropy(
        out.transpose(1, 2), labels, reduction="none", label_smoothing=eps
    )
    loss = (ce * mask).sum() / mask.sum()
    loss.backward()
    params = [p for p in model.parameters() if p.requires_grad]
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type=2.0)
    opt.step()
    sched.step()
    return loss.detach().item(), norm.item()


@right("train_step")
def step_total_norm_then_clip(
    model, src, tgt, optimizer, scheduler, max_norm, pad_id, label_smoothing
):
    model.train()
    optimizer.zero_grad(set_to_none=True)
    tgt_in, labels = shift_targets(tgt)
    loss = sequence_loss(model(src, tgt_in), labels, pad_id, label_smoothing)
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    total = torch.nn.utils.get_total_norm(grads)
    torch.nn.utils.clip_grads_with_norm_(model.parameters(), max_norm, total)
    optimizer.step()
    scheduler.step()
    return loss.item(), total.item()


@right("train_step")
def step_view_and_contiguous(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    opt.zero_grad()
    model.train()
    logits = model.forward(src, tgt[:, :-1].contiguous())
    vocab = logits.shape[-1]
    loss = F.cross_entropy(
        logits.contiguous().view(-1, vocab),
        tgt[:, 1:].contiguous().view(-1),
        ignore_index=pad_id,
        label_smoothing=eps,
        reduction="mean",
    )
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(list(model.parameters()), max_norm=max_norm)
    opt.step()
    sched.step()
    loss_value, norm_value = loss.item(), norm.item()
    return loss_value, norm_value


@right("train_step")
def step_norm_by_stacking(
    model, src, tgt, optimizer, scheduler, max_norm, pad_id, label_smoothing
):
    model.train()
    optimizer.zero_grad()
    inp, gold = tgt[:, :-1], tgt[:, 1:]
    logits = model(src, inp)
    loss = F.cross_entropy(
        logits.reshape(-1, logits.size(2)),
        gold.reshape(-1),
        ignore_index=pad_id,
        label_smoothing=label_smoothing,
    )
    loss.backward()
    norms = torch.stack(
        [p.grad.norm(2) for p in model.parameters() if p.grad is not None]
    )
    norm = norms.norm(2)
    coef = (max_norm / (norm + 1e-6)).clamp(max=1.0)
    for p in model.parameters():
        if p.grad is not None:
            p.grad.detach().mul_(coef)
    optimizer.step()
    scheduler.step()
    return loss.item(), norm.item()


# ------------------------------------------------------------------ wrong, listed


@wrong("train_step", r"'clipping after the step'", listed=True)
def step_clips_after_update(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    # "clip the gradients, then step" read backwards: the update used them unclipped
    model.train()
    opt.zero_grad()
    tgt_in, labels = shift_targets(tgt)
    loss = sequence_loss(model(src, tgt_in), labels, pad_id, eps)
    loss.backward()
    opt.step()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    sched.step()
    return loss.item(), norm.item()


@wrong("train_step", r"'gradients never zeroed'.*this batch's \+", listed=True)
def step_never_zeroes(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    # forgot zero_grad: PyTorch adds every backward to the gradients already there
    model.train()
    tgt_in, labels = shift_targets(tgt)
    loss = sequence_loss(model(src, tgt_in), labels, pad_id, eps)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    sched.step()
    return loss.item(), norm.item()


@wrong("train_step", r"'scheduler not stepped'", listed=True)
def step_without_scheduler(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    # the scheduler was passed in but never used
    model.train()
    opt.zero_grad()
    tgt_in, labels = shift_targets(tgt)
    loss = sequence_loss(model(src, tgt_in), labels, pad_id, eps)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    return loss.item(), norm.item()


@wrong("train_step", r"'scheduler stepped before the optimizer'.*lr 0\.25", listed=True)
def step_scheduler_first(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    # "set the rate, then step": the update already runs at the next rate
    model.train()
    opt.zero_grad()
    tgt_in, labels = shift_targets(tgt)
    loss = sequence_loss(model(src, tgt_in), labels, pad_id, eps)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    sched.step()
    opt.step()
    return loss.item(), norm.item()


@wrong("train_step", r"'padding counted in the loss'", listed=True)
def step_loss_with_padding(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    # plain cross_entropy: the PAD positions are trained to predict PAD
    model.train()
    opt.zero_grad()
    tgt_in, labels = shift_targets(tgt)
    logits = model(src, tgt_in)
    loss = F.cross_entropy(
        logits.reshape(-1, logits.size(-1)), labels.reshape(-1), label_smoothing=eps
    )
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    sched.step()
    return loss.item(), norm.item()


@wrong("train_step", r"'clipping before backward'", listed=True)
def step_clips_before_backward(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    # clipped right after zero_grad, "to get it out of the way": nothing to clip yet
    model.train()
    opt.zero_grad()
    tgt_in, labels = shift_targets(tgt)
    loss = sequence_loss(model(src, tgt_in), labels, pad_id, eps)
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    loss.backward()
    opt.step()
    sched.step()
    return loss.item(), float(norm)


@wrong("train_step", r"'targets shifted the wrong way'", listed=True)
def step_shift_backwards(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    # the two slices swapped: predicts each token from the next one
    model.train()
    opt.zero_grad()
    loss = sequence_loss(model(src, tgt[:, 1:]), tgt[:, :-1], pad_id, eps)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    sched.step()
    return loss.item(), norm.item()


# ---------------------------------------------------------------- wrong, unlisted


@wrong("train_step", r"'gradients clipped element by element'.*±0\.05", listed=False)
def step_clip_grad_value(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    # the other clipping function in torch.nn.utils: clamps each element
    model.train()
    opt.zero_grad()
    tgt_in, labels = shift_targets(tgt)
    loss = sequence_loss(model(src, tgt_in), labels, pad_id, eps)
    loss.backward()
    norm = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
    torch.nn.utils.clip_grad_value_(model.parameters(), max_norm)
    opt.step()
    sched.step()
    return loss.item(), norm.item()


@wrong("train_step", r"'clipped to the wrong norm'.*total norm 1\b", listed=False)
def step_clips_at_one(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    # the lesson clips at 1.0, so 1.0 it is, whatever max_norm says
    model.train()
    opt.zero_grad()
    tgt_in, labels = shift_targets(tgt)
    loss = sequence_loss(model(src, tgt_in), labels, pad_id, eps)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    return loss.item(), norm.item()


@wrong("train_step", r"'each parameter clipped on its own'", listed=False)
def step_clips_each_parameter(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    # clip_grad_norm_ called per tensor in a loop: each gets its own factor
    model.train()
    opt.zero_grad()
    tgt_in, labels = shift_targets(tgt)
    loss = sequence_loss(model(src, tgt_in), labels, pad_id, eps)
    loss.backward()
    norms = [torch.nn.utils.clip_grad_norm_(p, max_norm) for p in model.parameters()]
    norm = torch.stack(norms).norm()
    opt.step()
    sched.step()
    return loss.item(), norm.item()


@wrong("train_step", r"'gradients zeroed before the step'", listed=False)
def step_zero_grad_before_step(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    # "zero the gradients before stepping" taken literally
    model.train()
    tgt_in, labels = shift_targets(tgt)
    loss = sequence_loss(model(src, tgt_in), labels, pad_id, eps)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.zero_grad()
    opt.step()
    sched.step()
    return loss.item(), norm.item()


@wrong("train_step", r"'training step in eval mode'", listed=False)
def step_without_train_mode(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    # the model is assumed to be in training mode already; after evaluation it is not
    opt.zero_grad()
    tgt_in, labels = shift_targets(tgt)
    loss = sequence_loss(model(src, tgt_in), labels, pad_id, eps)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    sched.step()
    return loss.item(), norm.item()


@wrong("train_step", r"'training step in eval mode'", listed=False)
def step_in_eval_for_determinism(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    # model.eval() "so the loss is reproducible": dropout is off while training
    model.eval()
    opt.zero_grad()
    tgt_in, labels = shift_targets(tgt)
    loss = sequence_loss(model(src, tgt_in), labels, pad_id, eps)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    sched.step()
    return loss.item(), norm.item()


@wrong(
    "train_step",
    r"'scheduler.step\(\) not called once'.*step, sched, sched",
    listed=False,
)
def step_scheduler_twice(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    # an extra scheduler.step() left over from an epoch-level schedule
    model.train()
    opt.zero_grad()
    tgt_in, labels = shift_targets(tgt)
    loss = sequence_loss(model(src, tgt_in), labels, pad_id, eps)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    sched.step()
    sched.step()
    return loss.item(), norm.item()


@wrong("train_step", r"'optimizer.step\(\) not called once'.*ran 0 times", listed=False)
def step_own_optimizer(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    # builds a fresh optimizer instead of using the one passed in
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=opt.param_groups[0]["lr"])
    optimizer.zero_grad()
    tgt_in, labels = shift_targets(tgt)
    loss = sequence_loss(model(src, tgt_in), labels, pad_id, eps)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    sched.step()
    return loss.item(), norm.item()


@wrong("train_step", r"'returns tensors, not floats'.*\(Tensor, Tensor\)", listed=False)
def step_returns_tensors(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    # returns the tensors themselves: a list of losses then keeps every graph alive
    model.train()
    opt.zero_grad()
    tgt_in, labels = shift_targets(tgt)
    loss = sequence_loss(model(src, tgt_in), labels, pad_id, eps)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    sched.step()
    return loss, norm


@wrong("train_step", r"'returns tensors, not floats'.*\(float, Tensor\)", listed=False)
def step_returns_norm_tensor(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    # .item() on the loss only: clip_grad_norm_'s result is a tensor too
    model.train()
    opt.zero_grad()
    tgt_in, labels = shift_targets(tgt)
    loss = sequence_loss(model(src, tgt_in), labels, pad_id, eps)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    sched.step()
    return loss.item(), norm


@wrong("train_step", r"'norm measured after clipping'", listed=False)
def step_norm_after_clipping(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    # measures the norm for the log once clipping is done
    model.train()
    opt.zero_grad()
    tgt_in, labels = shift_targets(tgt)
    loss = sequence_loss(model(src, tgt_in), labels, pad_id, eps)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    norm = torch.norm(torch.stack([p.grad.norm() for p in model.parameters()]))
    opt.step()
    sched.step()
    return loss.item(), norm.item()


@wrong(
    "train_step",
    r"'returned loss is not the batch's loss'.*after the update",
    listed=False,
)
def step_reports_loss_after_update(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    # recomputes the loss for the log after stepping, "to see the improvement"
    model.train()
    opt.zero_grad()
    tgt_in, labels = shift_targets(tgt)
    loss = sequence_loss(model(src, tgt_in), labels, pad_id, eps)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    sched.step()
    with torch.no_grad():
        after = sequence_loss(model(src, tgt_in), labels, pad_id, eps)
    return after.item(), norm.item()


@wrong("train_step", r"'loss scaled'.*4 × the mean", listed=False)
def step_loss_times_batch(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    # scales the loss by the batch size "so the gradient does not vanish"
    model.train()
    opt.zero_grad()
    tgt_in, labels = shift_targets(tgt)
    loss = sequence_loss(model(src, tgt_in), labels, pad_id, eps) * src.size(0)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    sched.step()
    return loss.item() / src.size(0), norm.item()


@wrong("train_step", r"'summed, not averaged'", listed=False)
def step_sum_reduction(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    # reduction="sum" and the mean reported only for the log
    model.train()
    opt.zero_grad()
    tgt_in, labels = shift_targets(tgt)
    logits = model(src, tgt_in)
    total = F.cross_entropy(
        logits.reshape(-1, logits.size(-1)),
        labels.reshape(-1),
        ignore_index=pad_id,
        label_smoothing=eps,
        reduction="sum",
    )
    total.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    sched.step()
    return total.item() / (labels != pad_id).sum().item(), norm.item()


@wrong("train_step", r"'padding counted in the mean'.*divides by 24", listed=False)
def step_masked_mean_over_all(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    # zeroes the padding's loss but still takes the mean over every position
    model.train()
    opt.zero_grad()
    tgt_in, labels = shift_targets(tgt)
    ce = F.cross_entropy(
        model(src, tgt_in).transpose(1, 2),
        labels,
        reduction="none",
        label_smoothing=eps,
    )
    loss = (ce * (labels != pad_id)).mean()
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    sched.step()
    return loss.item(), norm.item()


@wrong("train_step", r"'every sequence weighted equally'", listed=False)
def step_mean_per_sequence(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    # each sentence's mean loss, then the mean over sentences
    model.train()
    opt.zero_grad()
    tgt_in, labels = shift_targets(tgt)
    ce = F.cross_entropy(
        model(src, tgt_in).transpose(1, 2),
        labels,
        reduction="none",
        label_smoothing=eps,
    )
    real = (labels != pad_id).float()
    loss = ((ce * real).sum(1) / real.sum(1)).mean()
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    sched.step()
    return loss.item(), norm.item()


@wrong(
    "train_step",
    r"'label smoothing not the one given'.*measures (0|-?\d\.\d+e-)",
    listed=False,
)
def step_forgets_smoothing(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    # the argument is passed to train_step but not on to the loss
    model.train()
    opt.zero_grad()
    tgt_in, labels = shift_targets(tgt)
    loss = sequence_loss(model(src, tgt_in), labels, pad_id, 0.0)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    sched.step()
    return loss.item(), norm.item()


@wrong("train_step", r"'labels not shifted'", listed=False)
def step_labels_are_input(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    # shifts the decoder input but compares with the same tokens
    model.train()
    opt.zero_grad()
    tgt_in = tgt[:, :-1]
    loss = sequence_loss(model(src, tgt_in), tgt_in, pad_id, eps)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    sched.step()
    return loss.item(), norm.item()


@wrong("train_step", r"'wrong decoder input'.*rows dropped", listed=False)
def step_sequence_first_shift(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    # the seed's trg[:-1] / trg[1:], for [St, B] tensors, on batch-first ones
    model.train()
    opt.zero_grad()
    loss = sequence_loss(model(src[:-1], tgt[:-1]), tgt[1:], pad_id, eps)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    sched.step()
    return loss.item(), norm.item()


@wrong("train_step", r"'padding counted in the loss'.*pad_id=3", listed=False)
def step_pad_zero_hard_coded(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    # PAD is 0 everywhere in the course, so 0 is written in
    model.train()
    opt.zero_grad()
    tgt_in, labels = shift_targets(tgt)
    loss = sequence_loss(model(src, tgt_in), labels, 0, eps)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    sched.step()
    return loss.item(), norm.item()


@wrong("train_step", r"'no gradient from the loss'", listed=False)
def step_loss_rewrapped(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    # .item() first, then a fresh tensor "so backward works": cut off from the model
    model.train()
    opt.zero_grad()
    tgt_in, labels = shift_targets(tgt)
    value = sequence_loss(model(src, tgt_in), labels, pad_id, eps).item()
    loss = torch.tensor(value, requires_grad=True)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    sched.step()
    return value, norm.item()


@wrong("train_step", r"'wrong gradient norm returned'", listed=False)
def step_squared_norm(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    # the sum of squares, no square root
    model.train()
    opt.zero_grad()
    tgt_in, labels = shift_targets(tgt)
    loss = sequence_loss(model(src, tgt_in), labels, pad_id, eps)
    loss.backward()
    squares = sum((p.grad**2).sum() for p in model.parameters())
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    sched.step()
    return loss.item(), squares.item()


@wrong("train_step", r"'backward run more than once'", listed=False)
def step_backward_twice(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    # a second backward "to make sure the gradients are there"
    model.train()
    opt.zero_grad()
    tgt_in, labels = shift_targets(tgt)
    loss = sequence_loss(model(src, tgt_in), labels, pad_id, eps)
    loss.backward(retain_graph=True)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    sched.step()
    return loss.item(), norm.item()


@wrong("train_step", r"'returned in the wrong order'", listed=False)
def step_returns_norm_first(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    # the two numbers swapped
    model.train()
    opt.zero_grad()
    tgt_in, labels = shift_targets(tgt)
    loss = sequence_loss(model(src, tgt_in), labels, pad_id, eps)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    sched.step()
    return norm.item(), loss.item()


@wrong(
    "train_step",
    r"'clipped in another norm than the 2-norm'.*its max \(L-inf\) "
    r"norm is 0\.05 = max_norm=0\.05.*\(norm_type=inf\)",
    listed=False,
)
def step_inf_norm_clip(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    # norm_type=inf: clips the largest element to max_norm, not the total norm
    model.train()
    opt.zero_grad()
    tgt_in, labels = shift_targets(tgt)
    loss = sequence_loss(model(src, tgt_in), labels, pad_id, eps)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(
        model.parameters(), max_norm, norm_type=float("inf")
    )
    opt.step()
    sched.step()
    return loss.item(), norm.item()


@wrong("train_step", r"'loss scaled'.*0\.25 × the mean", listed=False)
def step_accumulation_scaling(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    # divides by 4 accumulation steps copied from a gradient-accumulation loop
    model.train()
    opt.zero_grad()
    tgt_in, labels = shift_targets(tgt)
    loss = sequence_loss(model(src, tgt_in), labels, pad_id, eps)
    (loss / 4).backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    sched.step()
    return loss.item(), norm.item()


@wrong("train_step", r"'clipping before backward'", listed=True)
def step_clips_last_batch(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    # clips first thing, i.e. the previous batch's gradients, then clears them
    model.train()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.zero_grad()
    tgt_in, labels = shift_targets(tgt)
    loss = sequence_loss(model(src, tgt_in), labels, pad_id, eps)
    loss.backward()
    opt.step()
    sched.step()
    return loss.item(), norm.item()


@wrong(
    "train_step", r"'label smoothing not the one given'.*measures 0\.2;", listed=False
)
def step_smoothing_doubled(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    # "smoothing on both sides": 2 * eps
    model.train()
    opt.zero_grad()
    tgt_in, labels = shift_targets(tgt)
    loss = sequence_loss(model(src, tgt_in), labels, pad_id, 2 * eps)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    sched.step()
    return loss.item(), norm.item()


@wrong("train_step", r"'loss is not the cross-entropy'", listed=False)
def step_squared_error(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    # squared error between probabilities and one-hot labels
    model.train()
    opt.zero_grad()
    tgt_in, labels = shift_targets(tgt)
    logits = model(src, tgt_in)
    onehot = F.one_hot(labels, logits.size(-1)).float()
    loss = ((logits.softmax(-1) - onehot) ** 2)[labels != pad_id].mean()
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    sched.step()
    return loss.item(), norm.item()


@wrong("train_step", r"'real tokens left out of the loss'", listed=False)
def step_ignores_eos(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    # EOS treated like padding, "it carries no content"
    model.train()
    opt.zero_grad()
    tgt_in, labels = shift_targets(tgt)
    labels = labels.masked_fill(labels == 2, pad_id)
    loss = sequence_loss(model(src, tgt_in), labels, pad_id, eps)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    sched.step()
    return loss.item(), norm.item()


@wrong("train_step", r"'weights changed outside optimizer.step\(\)'", listed=False)
def step_decay_by_hand(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    # weight decay added by hand after the step
    model.train()
    opt.zero_grad()
    tgt_in, labels = shift_targets(tgt)
    loss = sequence_loss(model(src, tgt_in), labels, pad_id, eps)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1 - 1e-3)
    sched.step()
    return loss.item(), norm.item()


@wrong(
    "train_step",
    r"'clipped in another norm than the 2-norm'.*its L1 norm is "
    r"0\.05 = max_norm=0\.05.*\(norm_type=1\)",
    listed=False,
)
def step_l1_norm(
    model, src, tgt, optimizer, scheduler, max_norm, pad_id, label_smoothing
):  # norm_type=1 "to be robust to outliers"
    model.train()
    optimizer.zero_grad()
    tgt_in, labels = shift_targets(tgt)
    loss = sequence_loss(model(src, tgt_in), labels, pad_id, label_smoothing)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm, norm_type=1)
    optimizer.step()
    scheduler.step()
    return loss.item(), norm.item()


@wrong(
    "train_step",
    r"'clipped in another norm than the 2-norm'.*its L1 norm is "
    r"0\.05 = max_norm=0\.05",
    listed=False,
)
def step_manual_l1_clip(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    # hand-written clipping with "the size" of the gradient as its sum of magnitudes
    model.train()
    opt.zero_grad(set_to_none=True)
    tgt_in, labels = shift_targets(tgt)
    loss = sequence_loss(model(src, tgt_in), labels, pad_id, eps)
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    total = sum(g.abs().sum() for g in grads)
    if total > max_norm:
        for g in grads:
            g.mul_(max_norm / total)
    opt.step()
    sched.step()
    return loss.item(), float(total)


# The notebook's model, built in a cell before the step: a step that reads this
# global instead of its argument trains the wrong model.
torch.manual_seed(0)
model = TorchTransformer(
    13, 13, d_model=16, n_heads=8, n_layers=2, d_ff=32, dropout=0.0, max_len=32
)


@wrong("train_step", r"'model never called'.*never ran the model", listed=False)
def step_reads_the_notebook_model(net, src, tgt, opt, sched, max_norm, pad_id, eps):
    # the argument is called net, but the body was copied from a cell using `model`
    model.train()
    opt.zero_grad()
    tgt_in, labels = shift_targets(tgt)
    loss = sequence_loss(model(src, tgt_in), labels, pad_id, eps)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    sched.step()
    return loss.item(), norm.item()


@wrong("train_step", r"'gradient scaled'.*no clipping", listed=False)
def step_rescales_every_time(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    # clipping by hand: scale the gradient to max_norm (the min(1, ...) left out)
    model.train()
    opt.zero_grad()
    tgt_in, labels = shift_targets(tgt)
    loss = sequence_loss(model(src, tgt_in), labels, pad_id, eps)
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    norm = torch.sqrt(sum((g**2).sum() for g in grads))
    for g in grads:
        g.mul_(max_norm / norm)
    opt.step()
    sched.step()
    return loss.item(), norm.item()


@wrong("train_step", r"'wrong labels'.*expected 10 = tgt\[0, 1\]", listed=False)
def step_rolls_the_batch(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    # the next token by torch.roll, along dim 0 (the batch) instead of 1 (time)
    model.train()
    opt.zero_grad()
    tgt_in = tgt[:, :-1]
    labels = torch.roll(tgt, -1, 0)[:, 1:]
    loss = sequence_loss(model(src, tgt_in), labels, pad_id, eps)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    sched.step()
    return loss.item(), norm.item()


@wrong(
    "train_step",
    r"your model's decoder read the whole tgt \(not shifted\), where the decoder "
    r"input is tgt\[:, :-1\].*cross_entropy was given 28 \(B·St\) rows of logits "
    r"and 24 \(B·T\) targets",
    listed=False,
)
def step_decoder_reads_all_of_tgt(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    # shifts the labels but gives the decoder the whole target
    model.train()
    opt.zero_grad()
    logits = model(src, tgt)
    loss = F.cross_entropy(
        logits.flatten(0, 1),
        tgt[:, 1:].flatten(),
        ignore_index=pad_id,
        label_smoothing=eps,
    )
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    sched.step()
    return loss.item(), float(norm)


@wrong(
    "train_step",
    r"sequence_loss's tensor arguments when it raised: logits \[4, 7, 13\].*"
    r"your model's decoder read the whole tgt \(not shifted\)",
    listed=False,
)
def step_shifts_only_the_labels(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    # "the model sees the target, the loss compares with the next token"
    model.train()
    opt.zero_grad()
    _, labels = shift_targets(tgt)
    loss = sequence_loss(model(src, tgt), labels, pad_id, eps)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    sched.step()
    return loss.item(), norm.item()
