"""Checks for exercise ``train_step`` of chapter 6 (book/ch06_training):
``train_step(model, src, tgt, optimizer, scheduler, max_norm, pad_id, label_smoothing)
-> (loss, grad_norm)``, one clipped, scheduled update on the shifted, padding-free loss.
"""

from __future__ import annotations

import numbers

import torch
from torch.optim.lr_scheduler import LambdaLR

from ...guard.integrity import seal

# What the recording model, optimizer and scheduler of a step show (ch06_loop).
from ..ch06_loop import (
    StepCase,
    build_models,
    close,
    mix_fit,
    observe,
    per_tensor_scales,
    slice_name,
)
from ..delegation import check_not_delegated
from ..diagnosis import (
    UNEXPLAINED,
    Diagnosis,
    fail,
    passed,
    single_threaded,
)
from ..measure.clipping import (
    NORM_TYPES,
    clamped_by_value,
    clipped,
    norm_named,
    norms,
)
from ..measure.losses import gradient_labels, normaliser_kind, reached
from .references import small_model, tokens
from .sections import S_CLIP, S_LOSS, S_LR, S_SHIFT

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True

CLIP_BEFORE_BACKWARD = Diagnosis(
    "clipping before backward",
    "You clip before loss.backward(): there are no gradients yet (or only last "
    "batch's, about to be zeroed), so nothing is clipped and the norm you report is 0. "
    "Order: zero_grad, forward, loss, backward, clip_grad_norm_, optimizer.step, "
    "scheduler.step.",
    S_CLIP,
)


CLIP_AFTER_STEP = Diagnosis(
    "clipping after the step",
    "You clip after optimizer.step(): the weights have already moved by the unclipped "
    "gradient, so clipping changes nothing. Clip between loss.backward() and "
    "optimizer.step().",
    S_CLIP,
)


GRADIENTS_NEVER_ZEROED = Diagnosis(
    "gradients never zeroed",
    "Your gradients accumulate across steps: call optimizer.zero_grad() at the start "
    "of each step.",
    S_CLIP,
)


SCHEDULER_NOT_STEPPED = Diagnosis(
    "scheduler not stepped",
    "The learning rate never changes: call scheduler.step() once per update, after "
    "optimizer.step().",
    S_LR,
)


SCHEDULER_BEFORE_OPTIMIZER = Diagnosis(
    "scheduler stepped before the optimizer",
    "You call scheduler.step() before optimizer.step(), so the first update already "
    "uses the second rate (and PyTorch warns). Step the optimizer first, then the "
    "scheduler.",
    S_LR,
)


TRAIN_LOSS_COUNTS_PADDING = Diagnosis(
    "padding counted in the loss",
    "Your training step's loss includes padding positions: use your sequence_loss with "
    "pad_id.",
    S_LOSS,
)


TRAIN_SHIFTED_WRONG_WAY = Diagnosis(
    "targets shifted the wrong way",
    "Your training step feeds tgt[:, 1:] and predicts tgt[:, :-1]: use your "
    "shift_targets.",
    S_SHIFT,
)

# What the step's text asks for, quoted by the failures that enforce it.
_DUTIES = (
    'The exercise says: "train_step must: put the model in training mode, zero '
    "the gradients, compute the loss of shift_targets/sequence_loss, backward, "
    'clip to max_norm, optimizer.step(), then scheduler.step(), once each."'
)

# Recognised by measuring what the recording model, optimizer and scheduler saw.
TRAIN_EVAL_MODE = Diagnosis(
    "training step in eval mode",
    "The check hands train_step a model left in eval mode, as after an evaluation; "
    "with dropout that trains a different model than the one you meant. Call "
    "model.train() at the start of the step. " + _DUTIES,
    S_CLIP,
)
TRAIN_MODEL_NOT_CALLED = Diagnosis(
    "model never called",
    "The loss must come from model(src, tgt_in) on this batch. " + _DUTIES,
    S_CLIP,
)
TRAIN_NO_GRADIENT = Diagnosis(
    "no gradient from the loss",
    "No gradient reached the model's logits: backward was not called on the loss "
    "tensor, or the loss was detached (.item(), torch.tensor(...), .detach()) before "
    "it. Call loss.backward() on the tensor sequence_loss returns.",
    S_LOSS,
)
TRAIN_BACKWARD_TWICE = Diagnosis(
    "backward run more than once",
    "Each backward adds the loss's gradient again: call loss.backward() once per step.",
    S_CLIP,
)
TRAIN_GRAD_SCALED = Diagnosis(
    "gradient scaled",
    "The gradient optimizer.step() applies must be the loss's own gradient, clipped "
    "to max_norm when its norm is larger, never enlarged.",
    S_CLIP,
)
TRAIN_RETURN_ORDER = Diagnosis(
    "returned in the wrong order",
    "train_step returns (loss, grad_norm), in that order.",
    S_CLIP,
)
TRAIN_DECODER_INPUT = Diagnosis(
    "wrong decoder input",
    "The decoder reads tgt[:, :-1] (BOS y1 .. yn): use your shift_targets.",
    S_SHIFT,
)
TRAIN_LABELS_NOT_SHIFTED = Diagnosis(
    "labels not shifted",
    "Your loss compares the logits with the decoder input itself; the labels are "
    "tgt[:, 1:], the input moved one step left (shift_targets).",
    S_SHIFT,
)
TRAIN_WRONG_LABELS = Diagnosis(
    "wrong labels",
    "The labels of position t are tgt[:, t + 1] (shift_targets' second output).",
    S_SHIFT,
)
TRAIN_DROPS_TOKENS = Diagnosis(
    "real tokens left out of the loss",
    "Every real label (everything but pad_id, EOS included) must count in the loss.",
    S_LOSS,
)
TRAIN_NOT_CROSS_ENTROPY = Diagnosis(
    "loss is not the cross-entropy",
    "The gradient your loss sends to the logits is not that of a cross-entropy "
    "(softmax minus the smoothed one-hot): use sequence_loss on the raw logits.",
    S_LOSS,
)
TRAIN_SMOOTHING = Diagnosis(
    "label smoothing not the one given",
    "Pass the label_smoothing argument through to sequence_loss.",
    S_LOSS,
)
TRAIN_LOSS_SUMMED = Diagnosis(
    "summed, not averaged",
    "Your loss is the sum over tokens: the gradient grows with the batch. Average "
    "over the real tokens (cross_entropy's default reduction with ignore_index).",
    S_LOSS,
)
TRAIN_PADDING_IN_MEAN = Diagnosis(
    "padding counted in the mean",
    "You divide by all B·(St-1) positions, padding included, so the loss shrinks as "
    "padding grows. Divide by the number of real tokens.",
    S_LOSS,
)
TRAIN_PER_SEQUENCE = Diagnosis(
    "every sequence weighted equally",
    "You average each sequence's tokens, then the sequences: a token of a short "
    "sequence weighs more than one of a long one. Take one mean over all the real "
    "tokens of the batch.",
    S_LOSS,
)
TRAIN_LOSS_SCALE = Diagnosis(
    "loss scaled",
    "The loss you backpropagate must be the mean over the real tokens, unscaled.",
    S_LOSS,
)
TRAIN_STEPS = Diagnosis(
    "optimizer.step() not called once",
    "Each training step updates the weights exactly once. " + _DUTIES,
    S_CLIP,
)
TRAIN_ZEROED_BEFORE_STEP = Diagnosis(
    "gradients zeroed before the step",
    "The gradients were all zero when optimizer.step() ran, so the weights did not "
    "learn from this batch. zero_grad belongs before the forward pass (or after the "
    "step), never between backward and step.",
    S_CLIP,
)
TRAIN_NOT_CLIPPED = Diagnosis(
    "gradients not clipped",
    "Call torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm) between "
    "loss.backward() and optimizer.step().",
    S_CLIP,
)
TRAIN_CLIP_NORM = Diagnosis(
    "clipped to the wrong norm",
    "clip_grad_norm_ rescales all the gradients together to total norm max_norm, "
    "only when their norm exceeds it: use the max_norm argument.",
    S_CLIP,
)
TRAIN_CLIP_NORM_TYPE = Diagnosis(
    "clipped in another norm than the 2-norm",
    "clip_grad_norm_ measures the total norm with norm_type=2 by default (the "
    "Euclidean norm of all the gradients together), and the exercise clips that: "
    "leave norm_type at its default, clip_grad_norm_(model.parameters(), max_norm).",
    S_CLIP,
)
TRAIN_CLIP_PER_TENSOR = Diagnosis(
    "each parameter clipped on its own",
    "You clipped each parameter's gradient separately, which changes the update's "
    "direction. Clip them together: clip_grad_norm_(model.parameters(), max_norm).",
    S_CLIP,
)
TRAIN_CLIP_BY_VALUE = Diagnosis(
    "gradients clipped element by element",
    "You clamped each gradient element (clip_grad_value_ or clamp), which changes the "
    "update's direction. Clip the total norm: clip_grad_norm_(model.parameters(), "
    "max_norm).",
    S_CLIP,
)
TRAIN_WEIGHTS_MOVED = Diagnosis(
    "weights changed outside optimizer.step()",
    "Only optimizer.step() may change the weights, once per training step.",
    S_CLIP,
)
TRAIN_SCHEDULER_COUNT = Diagnosis(
    "scheduler.step() not called once",
    "Call scheduler.step() once per update, right after optimizer.step().",
    S_LR,
)
TRAIN_RETURNS_TENSORS = Diagnosis(
    "returns tensors, not floats",
    "train_step returns (loss, grad_norm) as two Python floats: loss.item() and "
    "norm.item() (a kept loss tensor holds on to the whole graph).",
    S_CLIP,
)
TRAIN_RETURNED_LOSS = Diagnosis(
    "returned loss is not the batch's loss",
    "Return loss.item() of the loss you backpropagated: the mean over the real "
    "tokens, computed before the update, unscaled.",
    S_LOSS,
)
TRAIN_NORM_AFTER_CLIP = Diagnosis(
    "norm measured after clipping",
    "Return the total norm *before* clipping, which clip_grad_norm_ returns: that is "
    "the number to log to see gradient spikes.",
    S_CLIP,
)
TRAIN_WRONG_NORM = Diagnosis(
    "wrong gradient norm returned",
    "Return the total 2-norm of all the gradients before clipping (what "
    "clip_grad_norm_ returns).",
    S_CLIP,
)

_STEP_CASES = (  # the first clips to below most gradient elements
    StepCase("pad_id=3, label_smoothing=0.1, max_norm=0.05", 1, 3, 0.1, 0.05),
    StepCase("pad_id=0, label_smoothing=0, max_norm=1.0", 0, 0, 0.0, 1.0),
    StepCase(
        "pad_id=0, label_smoothing=0, max_norm=100 (no clipping)",
        2,
        0,
        0.0,
        100.0,
        updates=1,
    ),
)


def _step_not_called(seen):
    if not seen.events("forward"):
        return TRAIN_MODEL_NOT_CALLED, f"{seen.where()}, your step never ran the model."
    return None


def _ran_in_eval_mode(seen):
    if not seen.traced().training:  # the forward the loss came from
        return TRAIN_EVAL_MODE, (
            f"{seen.where()}, your model's forward ran in eval mode."
        )
    return None


def _no_gradient(seen):
    if seen.traced() is None:
        return TRAIN_NO_GRADIENT, (
            f"{seen.where()}, backward never reached the logits "
            "of any of your model calls."
        )
    return None


def _backward_twice(seen):
    n = len(seen.traced().grads)
    if n > 1:
        return TRAIN_BACKWARD_TWICE, (
            f"{seen.where()}, backward reached your logits {n} times."
        )
    return None


def _wrong_decoder_input(seen):
    call, tgt = seen.traced(), seen.tgt
    if call.tgt_in.shape == tgt[:, :-1].shape and torch.equal(call.tgt_in, tgt[:, :-1]):
        return None
    name = slice_name(tgt, call.tgt_in)
    hit, labels = reached(call.grads[0]), gradient_labels(call.grads[0])
    if (
        name == "tgt[:, 1:]"
        and torch.equal(labels[hit], tgt[:, :-1][hit])
        and call.is_cross_entropy_of(labels, hit)
    ):
        return TRAIN_SHIFTED_WRONG_WAY, (
            f"{seen.where()}, the decoder read tgt[:, 1:] "
            "and your loss's labels were tgt[:, :-1]."
        )
    return TRAIN_DECODER_INPUT, f"{seen.where()}, the decoder read {name}."


def _wrong_labels(seen):
    call = seen.traced()
    got, want, hit = (
        gradient_labels(call.grads[0]),
        seen.want.labels,
        reached(call.grads[0]),
    )
    bad = hit & seen.want.real & (got != want)
    if not bad.any() or not call.is_cross_entropy_of(got, bad):
        return None  # right, or not a cross-entropy: a later stage says so
    if torch.equal(got[hit], call.tgt_in[hit]):
        return TRAIN_LABELS_NOT_SHIFTED, (
            f"{seen.where()}, your loss's labels were the decoder input tgt[:, :-1]."
        )
    r, t = (int(i) for i in bad.nonzero()[0])
    return TRAIN_WRONG_LABELS, (
        f"{seen.where()}, the label your loss used at row {r}, "
        f"position {t} was token {int(got[r, t])}, expected "
        f"{int(want[r, t])} = tgt[{r}, {t + 1}]."
    )


def _padding_positions(seen):
    hit, real = reached(seen.traced().grads[0]), seen.want.real
    pad = seen.case.pad_id
    if (hit & ~real).any():
        n, total = int((hit & ~real).sum()), int((~real).sum())
        return TRAIN_LOSS_COUNTS_PADDING, (
            f"{seen.where()}, {n} of the {total} "
            f"padding positions (pad_id={pad}) got "
            "gradient."
        )
    if (real & ~hit).any():
        n = int((real & ~hit).sum())
        return TRAIN_DROPS_TOKENS, (
            f"{seen.where()}, {n} real label positions got no gradient."
        )
    return None


def _not_cross_entropy(seen):
    _, _, res = seen.fit_loss()
    if res > 1e-3:
        return TRAIN_NOT_CROSS_ENTROPY, (
            f"{seen.where()}, the gradient at the logits "
            "departs from softmax minus the one-hot by "
            f"{res:.2g} (relative)."
        )
    return None


def _wrong_smoothing(seen):
    _, eps, _ = seen.fit_loss()
    got, want = float(eps.nanmedian()), seen.case.eps
    if abs(got - want) > 2e-3:
        return TRAIN_SMOOTHING, (
            f"{seen.where()}, your loss's label smoothing "
            f"measures {got:.3g}; label_smoothing={want}."
        )
    return None


def _wrong_normaliser(seen):
    big_n, _, _ = seen.fit_loss()
    real = seen.want.real
    count, got, kind = int(real.sum()), big_n[real], normaliser_kind(big_n, real)
    where, b = seen.where(), real.size(0)
    if kind == "real tokens":
        return None
    if kind == "1":
        return TRAIN_LOSS_SUMMED, f"{where}, your loss divides by 1, not {count}."
    if kind == "all positions":
        return TRAIN_PADDING_IN_MEAN, (
            f"{where}, your loss divides by {real.numel()} "
            f"positions, not the {count} real tokens."
        )
    if kind == "per sequence":
        return TRAIN_PER_SEQUENCE, (
            f"{where}, each row's tokens are divided by {b} × that row's length."
        )
    if kind == "constant":
        n = float(got.mean())
        return TRAIN_LOSS_SCALE, (
            f"{where}, your loss is the token sum divided by "
            f"{n:.4g}, expected {count} (real tokens): "
            f"{count / n:.4g} × the mean."
        )
    return TRAIN_LOSS_SCALE, (
        f"{where}, your loss weights tokens unequally (divisors "
        f"from {float(got.min()):.4g} to {float(got.max()):.4g}; "
        f"expected {count} for every real token)."
    )


def _step_count(seen):
    n = len(seen.events("step"))
    if n != 1:
        return TRAIN_STEPS, f"{seen.where()}, optimizer.step() ran {n} times."
    return None


def _scheduler_calls(seen):
    order = seen.order()
    if order == ["step", "sched"]:
        return None
    if "sched" not in order:
        return SCHEDULER_NOT_STEPPED, f"{seen.where()}, scheduler.step() never ran."
    if order == ["sched", "step"]:
        lr = seen.events("step")[0].lr
        return SCHEDULER_BEFORE_OPTIMIZER, (
            f"{seen.where()}, scheduler.step() ran "
            f"before optimizer.step(), which then used "
            f"lr {lr:g} instead of {seen.lr:g}."
        )
    return TRAIN_SCHEDULER_COUNT, (
        f"{seen.where()}, the calls were {', '.join(order)} (step = optimizer.step())."
    )


def _clipping_of(seen, got):
    """The gradient at the step is this batch's times alpha: was it clipped right?"""
    want, m = seen.want, seen.case.max_norm
    alpha, expect = float(got.norm()) / want.norm, min(1.0, m / (want.norm + 1e-6))
    if close(alpha, expect):
        return None
    where = (
        f"{seen.where()}, the gradient at optimizer.step() had norm {got.norm():.4g}"
    )
    if alpha > 1.0 + 2e-3:
        return TRAIN_GRAD_SCALED, (
            f"{where}: {alpha:.4g} × the gradient of this "
            f"batch's loss (norm {want.norm:.4g})."
        )
    if close(alpha, 1.0):
        return _why_unclipped(seen, where)
    # The norm of the clipped gradient that equals max_norm: the norm_type it used.
    norm_type = norm_named(got, lambda value: close(value, m, rel=1e-3))
    if norm_type is not None and norm_type != "L2":
        return TRAIN_CLIP_NORM_TYPE, (
            f"{where}: its {norm_type} norm is {norms(got)[norm_type]:.4g} = "
            f"max_norm={m:g}, its L2 norm {got.norm():.4g}: you clipped the "
            f"{norm_type} norm (norm_type={NORM_TYPES[norm_type]})."
        )
    return TRAIN_CLIP_NORM, (
        f"{where}: you clipped to total norm {got.norm():.4g}; "
        f"with max_norm={m:g} and a norm of {want.norm:.4g} "
        f"before clipping it should be {min(want.norm, m):.4g}."
    )


def _why_unclipped(seen, where):
    m, norm = seen.case.max_norm, seen.returned_number(1)
    end = clipped(seen.want.grad, m)
    detail = f"{where}, above max_norm={m:g}: not clipped"
    if torch.allclose(seen.end, end, rtol=1e-3, atol=1e-9):
        return CLIP_AFTER_STEP, f"{detail} before the step, but after it."
    before = (float(seen.left.norm()), 0.0)
    if norm is not None and any(close(norm, b, abs_=1e-6) for b in before):
        return CLIP_BEFORE_BACKWARD, (
            f"{detail}; the norm you returned, {norm:.4g}, "
            "is that of the gradients before backward."
        )
    return TRAIN_NOT_CLIPPED, f"{detail}."


def _gradient_at_step(seen):
    got, want = seen.events("step")[0].grad, seen.want
    if float(got.norm()) <= 1e-12:
        return TRAIN_ZEROED_BEFORE_STEP, (
            f"{seen.where()}, every gradient was 0 at optimizer.step()."
        )
    alpha, beta, res = mix_fit(got, want.grad, seen.left)
    if res < 1e-3 and abs(beta) * float(seen.left.norm()) > 1e-3 * float(got.norm()):
        return GRADIENTS_NEVER_ZEROED, (
            f"{seen.where()}, the gradient at optimizer.step() was {alpha:.3g} × this "
            f"batch's + {beta:.3g} × the gradient left from the update before."
        )
    if res < 1e-3:
        return _clipping_of(seen, got)
    return _misshapen_gradient(seen, got)


def _misshapen_gradient(seen, got):
    """The gradient at the step points elsewhere than this batch's."""
    want, where = seen.want.grad, seen.where()
    scales, worst = per_tensor_scales(got, want, seen.slices)
    if worst < 1e-3:
        return TRAIN_CLIP_PER_TENSOR, (
            f"{where}, each parameter's gradient was scaled "
            f"by its own factor (from {min(scales):.3g} to "
            f"{max(scales):.3g})."
        )
    c = clamped_by_value(got, want, rtol=1e-3, atol=1e-7)
    if c is not None:
        return TRAIN_CLIP_BY_VALUE, (
            f"{where}, every gradient element was clamped to ±{c:.3g}."
        )
    cos = float(got @ want) / float(got.norm() * want.norm())
    fail(
        "train_step",
        f"{where}, the gradient at optimizer.step() is not a multiple "
        f"of this batch's (cosine {cos:.4f}, norm {got.norm():.4g} vs "
        f"{want.norm():.4g}). It {UNEXPLAINED}. {_DUTIES}",
        S_CLIP,
    )


def _weights_moved(seen):
    call = seen.events("step")[0]
    expect = seen.before - call.lr * call.grad
    if not torch.allclose(seen.after, expect, rtol=1e-4, atol=1e-7):
        diff = float((seen.after - expect).abs().max())
        return TRAIN_WEIGHTS_MOVED, (
            f"{seen.where()}, the weights differ by up to "
            f"{diff:.3g} from one SGD step with the gradient "
            "optimizer.step() saw."
        )
    return None


def _returned_pair(seen):
    out = seen.out
    if not (isinstance(out, (tuple, list)) and len(out) == 2):
        fail(
            "train_step",
            f"{seen.where()}: must return (loss, grad_norm), got "
            f"{type(out).__name__}. {_DUTIES}",
            S_CLIP,
        )
    kinds = [type(x).__name__ for x in out]
    # A Python (or NumPy) number, as .item() or float() gives; not a tensor.
    if not all(isinstance(x, numbers.Real) and not isinstance(x, bool) for x in out):
        return TRAIN_RETURNS_TENSORS, (
            f"{seen.where()}, yours returned ({', '.join(kinds)})."
        )
    return None


def _returned_loss(seen):
    got, want = seen.out[0], seen.want.loss
    if close(got, want, rel=1e-4, abs_=1e-6):
        return None
    after = seen.loss_after()
    detail = (
        f"{seen.where()}, you returned loss {got:.6g}; the batch's loss is {want:.6g}"
    )
    if close(got, seen.want.norm, rel=1e-4) and close(seen.out[1], want, rel=1e-4):
        return TRAIN_RETURN_ORDER, f"{detail}: you returned (grad_norm, loss)."
    if close(got, after, rel=1e-4, abs_=1e-6):
        return TRAIN_RETURNED_LOSS, (
            f"{detail}, and {after:.6g} after the update: yours."
        )
    return TRAIN_RETURNED_LOSS, f"{detail} ({got / want:.4g} × it)."


def _returned_norm(seen):
    got, want = seen.out[1], seen.want.norm
    if close(got, want, rel=1e-4, abs_=1e-6):
        return None
    clip = float(seen.events("step")[0].grad.norm())
    detail = (
        f"{seen.where()}, you returned grad_norm {got:.6g}; the norm before "
        f"clipping was {want:.6g}"
    )
    if close(got, clip, rel=1e-4, abs_=1e-6):
        return TRAIN_NORM_AFTER_CLIP, f"{detail}, after clipping {clip:.6g}."
    other = norm_named(
        seen.want.grad, lambda v: close(got, v, rel=1e-4, abs_=1e-6), skip=("L2",)
    )
    if other is not None:
        return TRAIN_WRONG_NORM, f"{detail}: yours is its {other} norm."
    return TRAIN_WRONG_NORM, f"{detail} (yours is {got / want:.4g} × it)."


# The stages of a step in the order it runs them; the first that departs is reported.
# The mode comes last: with the check's dropout-free model it changes no number the
# other stages measure, so any of their findings is the mistake to fix first.
STEP_STAGES = (
    _step_not_called,
    _no_gradient,
    _backward_twice,
    _wrong_decoder_input,
    _wrong_labels,
    _padding_positions,
    _not_cross_entropy,
    _wrong_smoothing,
    _wrong_normaliser,
    _step_count,
    _gradient_at_step,
    _weights_moved,
    _scheduler_calls,
    _returned_pair,
    _returned_loss,
    _returned_norm,
    _ran_in_eval_mode,
)


@single_threaded
def check_train_step(step_fn) -> None:
    """``step_fn(model, src, tgt, optimizer, scheduler, max_norm, pad_id,
    label_smoothing) -> (loss, grad_norm)`` as floats, the norm being the gradients'
    total norm before clipping. Every update of every case is recorded first; then
    each stage, in the order a step runs, is judged on all of them."""
    title = "train_step"
    model, twin, start = build_models(0)
    seen = [
        one
        for case in _STEP_CASES
        for one in observe(title, step_fn, case, model, twin, start)
    ]
    for stage in STEP_STAGES:
        for one in seen:
            found = stage(one)
            if found is not None:
                found[0].fail(title, found[1])
    passed(
        title,
        f"{len(seen)} updates in {len(_STEP_CASES)} cases: train mode, "
        "zeroed, shifted, loss over the real tokens, clipped, one step each",
    )


@single_threaded
def check_train_step_by_hand(step_fn) -> None:
    """Hidden test: the learner's step, not the reference's train_step (calling the
    model is fine)."""
    model = small_model(0)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = LambdaLR(opt, lambda s: 1.0)
    src, tgt = tokens(2, 5, seed=1), tokens(2, 6, seed=2)
    check_not_delegated(
        "train_step",
        lambda: step_fn(model, src, tgt, opt, sched, 1.0, 0, 0.0),
        forbidden=["tformer_ref.train_step", "tformer_ref.fit"],
    )


seal(__name__)
