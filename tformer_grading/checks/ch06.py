"""Checks for chapter 6, training pitfalls and decoding (book/ch06_training).

Each public ``check_*`` is what an exercise test cell calls. The private functions
near each are the known wrong variants a diagnosis can name. Greedy decoding is
judged from behaviour too: the learner's loop runs on a model that records how it
is used, and each probe reads one thing that record (or the output) shows.
"""
from __future__ import annotations

import math
import types
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.lr_scheduler import LambdaLR

from tformer_ref.device import get_device
from tformer_ref.training import noam_lambda
from ..guard.integrity import seal
from .cases import randn
# Unused here: the exercise's test cells call it as ch06.check_by_hand.
from .delegation import check_by_hand, check_not_delegated  # noqa: F401
from .diagnosis import (Case, CheckFailure, Diagnosis, Pitfall, Raised, Section,
                        compare_to_reference, fail, passed, quiet, run, run_or_fail,
                        single_threaded)

CHAPTER = "ch06_training"
S_TASK = Section(CHAPTER, "6.1", "The toy task")
S_SHIFT = Section(CHAPTER, "6.2", "Teacher forcing and the shift")
S_LOSS = Section(CHAPTER, "6.3", "A loss that ignores padding")
S_LR = Section(CHAPTER, "6.4", "Learning rate and warm-up")
S_CLIP = Section(CHAPTER, "6.5", "Exploding gradients and clipping")
S_PAD = Section(CHAPTER, "6.6", "Dynamic padding and bucketing")
S_DECODE = Section(CHAPTER, "6.7", "Greedy and beam decoding")


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _tokens(b: int, s: int, seed: int, pad_id: int = 0, vocab: int = 13
            ) -> torch.Tensor:
    """[B, S] batch-first targets: BOS=1, random tokens, EOS=2, then padding (rows of
    varying length)."""
    g = _gen(seed)
    out = torch.full((b, s), pad_id, dtype=torch.long)
    for i in range(b):
        n = s if i == 0 else int(torch.randint(3, s + 1, (1,), generator=g))
        out[i, :n] = torch.randint(4, vocab, (n,), generator=g)
        out[i, 0], out[i, n - 1] = 1, 2
    return out.to(get_device())


# ------------------------------------------------------------------------ shift_targets

def _stacked_pair(fn):
    """Wrap ``fn(tgt) -> (tgt_in, labels)`` to return the pair stacked into one tensor,
    which compare_to_reference can diff."""
    def run_stacked(tgt):
        out = fn(tgt)
        if not (isinstance(out, (tuple, list)) and len(out) == 2
                and all(isinstance(t, torch.Tensor) for t in out)):
            raise CheckFailure("shift_targets: must return a pair (decoder input, "
                               f"labels) of tensors, got {type(out).__name__}")
        return torch.stack([out[0], out[1]])  # raises when the two shapes differ
    return run_stacked


def _shift_ref(tgt):
    return tgt[:, :-1], tgt[:, 1:]


SHIFT_PITFALLS = [
    Pitfall("sequence-first slicing on batch-first data",
            "You sliced axis 0 (tgt[:-1], tgt[1:]), as the seed does. That is the time "
            "axis only for sequence-first [St, B] tensors; on batch-first [B, St] data "
            "it drops the last and first *sequences* of the batch instead of shifting "
            "in time. Slice axis 1: tgt[:, :-1] and tgt[:, 1:].",
            S_SHIFT, lambda tgt: (tgt[:-1], tgt[1:])),
    Pitfall("targets shifted the wrong way",
            "Your decoder input is tgt[:, 1:] and your labels tgt[:, :-1]: the model "
            "would be asked to predict each token from the *next* one. The decoder "
            "reads BOS y1 .. yn (tgt[:, :-1]) and predicts y1 .. yn EOS (tgt[:, 1:]).",
            S_SHIFT, lambda tgt: (tgt[:, 1:], tgt[:, :-1])),
    Pitfall("labels not shifted",
            "Your decoder input and labels are the same tokens, so with the causal "
            "mask the model just copies its input (the loss drops to 0 and nothing is "
            "learned). The labels are the input moved one step left: tgt[:, :-1] in, "
            "tgt[:, 1:] out.",
            S_SHIFT, lambda tgt: (tgt[:, :-1], tgt[:, :-1])),
    Pitfall("no shift at all",
            "You feed the whole target and use it as labels: nothing is shifted. "
            "Decoder input tgt[:, :-1], labels tgt[:, 1:].",
            S_SHIFT, lambda tgt: (tgt, tgt)),
]


def _shift_cases():
    # (6, 7): B = St - 1 catches axis mix-ups that keep the shapes right.
    shapes = [(3, 7), (4, 5), (6, 7), (1, 4), (5, 9)]
    return [Case(f"tgt [B={b}, St={s}]", lambda b=b, s=s, i=i: (_tokens(b, s, seed=i),))
            for i, (b, s) in enumerate(shapes)]


@single_threaded
def check_shift_targets(shift_fn) -> None:
    """``shift_fn(tgt [B, St]) -> (tgt_in [B, St-1], labels [B, St-1])``, on
    batch-first tensors."""
    __tracebackhide__ = True
    compare_to_reference("shift_targets", _shift_cases(), shift_fn, _shift_ref,
                         SHIFT_PITFALLS, atol=0, rtol=0, adapt=_stacked_pair)


# ------------------------------------------------------------------------ sequence_loss

def _ce(logits, labels, **kw):
    vocab = logits.size(-1)
    return F.cross_entropy(logits.reshape(-1, vocab), labels.reshape(-1), **kw)


def _loss_ref(logits, labels, pad_id, eps):
    return _ce(logits, labels, ignore_index=pad_id, label_smoothing=eps)


def _loss_counts_padding(logits, labels, pad_id, eps):
    return _ce(logits, labels, label_smoothing=eps)


def _loss_mean_over_all(logits, labels, pad_id, eps):
    total = _loss_sum(logits, labels, pad_id, eps)
    return total / labels.numel()


def _loss_no_smoothing(logits, labels, pad_id, eps):
    return _ce(logits, labels, ignore_index=pad_id)


def _loss_pad_zero(logits, labels, pad_id, eps):
    return _ce(logits, labels, ignore_index=0, label_smoothing=eps)


def _loss_sum(logits, labels, pad_id, eps):
    return _ce(logits, labels, ignore_index=pad_id, label_smoothing=eps,
               reduction="sum")


def _loss_counts_padding_no_smoothing(logits, labels, pad_id, eps):
    return _ce(logits, labels)


LOSS_PITFALLS = [
    Pitfall("padding counted in the loss",
            "Your loss includes the padding positions: the model is trained to predict "
            "PAD after EOS, and batches with more padding weigh more. Pass "
            "ignore_index=pad_id to cross_entropy (or mask those positions out of both "
            "the sum and the count).",
            S_LOSS, _loss_counts_padding),
    Pitfall("padding counted in the loss and no label smoothing",
            "Your loss includes the padding positions and ignores label_smoothing. "
            "Pass ignore_index=pad_id and label_smoothing=label_smoothing to "
            "cross_entropy.",
            S_LOSS, _loss_counts_padding_no_smoothing),
    Pitfall("padding counted in the mean",
            "You left the padding out of the sum but still divide by all B·St "
            "positions, so the loss shrinks as padding grows. Divide by the number of "
            "real tokens (cross_entropy with ignore_index does).",
            S_LOSS, _loss_mean_over_all),
    Pitfall("pad id hard-coded to 0",
            "You ignore token 0 instead of the pad_id you were given (the seed's masks "
            "hard-code 0 too). Use the pad_id argument.", S_LOSS, _loss_pad_zero),
    Pitfall("label smoothing ignored",
            "Your loss ignores the label_smoothing argument. cross_entropy takes it "
            "directly: label_smoothing=label_smoothing.", S_LOSS, _loss_no_smoothing),
    Pitfall("summed, not averaged",
            "Your loss is the sum over tokens, not the mean: its size (and the "
            "gradient's) grows with the batch and the learning rate no longer means "
            "the same thing. Average over the real tokens.", S_LOSS, _loss_sum),
]

# Recognised from the returned tensor itself, before any value is compared.
LOSS_NOT_SCALAR = Diagnosis(
    "loss not reduced to a scalar",
    "The loss must be a scalar tensor that gradients can flow back through: one "
    "number, the mean over the real tokens (cross_entropy's default reduction, with "
    "ignore_index).", S_LOSS)
LOSS_DETACHED = Diagnosis(
    "loss detached from the graph",
    "The loss must be a scalar tensor that gradients can flow back through. Do not "
    "call .item() or wrap it in torch.tensor(...).", S_LOSS)


def _loss_cases():
    configs = [  # (B, St, V, pad_id, label_smoothing, dtype)
        (3, 6, 11, 0, 0.0, torch.float32), (4, 5, 13, 0, 0.1, torch.float32),
        (2, 7, 9, 3, 0.0, torch.float32), (5, 4, 17, 0, 0.2, torch.float64),
        (4, 6, 10, 3, 0.1, torch.float32),
    ]
    cases = []
    for i, (b, s, v, pad, eps, dtype) in enumerate(configs):
        def make(b=b, s=s, v=v, pad=pad, eps=eps, dtype=dtype, i=i):
            labels = torch.randint(4, v, (b, s), generator=_gen(100 + i))
            for r in range(1, b):  # every row but the first ends in padding
                labels[r, s - 1 - r % (s - 1):] = pad
            logits = randn(b, s, v, seed=200 + i, dtype=dtype)
            return logits, labels.to(get_device()), pad, eps
        label = f"logits [{b}, {s}, {v}] {dtype}, pad_id={pad}, label_smoothing={eps}"
        cases.append(Case(label, make))
    return cases


@single_threaded
def check_sequence_loss(loss_fn) -> None:
    """``loss_fn(logits [B, St, V], labels [B, St], pad_id, label_smoothing) -> scalar
    tensor``."""
    __tracebackhide__ = True
    logits, labels, pad, eps = _loss_cases()[1].make()
    out = run(loss_fn, (logits.requires_grad_(True), labels, pad, eps))
    if isinstance(out, (float, int)):  # a loss.item() returned
        LOSS_DETACHED.fail("sequence_loss", f"Yours is a Python {type(out).__name__}.")
    if isinstance(out, torch.Tensor):  # anything else: compare_to_reference reports it
        if out.dim() != 0:
            LOSS_NOT_SCALAR.fail("sequence_loss", f"Yours has shape {list(out.shape)}.")
        if not out.requires_grad:
            LOSS_DETACHED.fail("sequence_loss", "Yours has requires_grad=False.")
    compare_to_reference("sequence_loss", _loss_cases(), loss_fn, _loss_ref,
                         LOSS_PITFALLS, atol=1e-5, rtol=1e-4)


# -------------------------------------------------------------------------- noam_lambda

def _paper(n, d, w):
    return d ** -0.5 * min(n ** -0.5, n * w ** -1.5)


def _noam_off_by_one_guarded(step, d, w):
    return _paper(max(step, 1), d, w)


def _noam_zero_at_start(step, d, w):
    return 0.0 if step == 0 else _paper(step, d, w)


def _noam_plus_two(step, d, w):
    return _paper(step + 2, d, w)


def _noam_warmup_exponent(step, d, w):
    n = step + 1
    return d ** -0.5 * min(n ** -0.5, n * w ** -0.5)


def _noam_no_d_model(step, d, w):
    n = step + 1
    return min(n ** -0.5, n * w ** -1.5)


def _noam_max(step, d, w):
    n = step + 1
    return d ** -0.5 * max(n ** -0.5, n * w ** -1.5)


def _rates(fn):
    """``fn(step, d_model, warmup)`` -> (d_model, warmup, steps) -> float64 tensor of
    its rates."""
    def rates(d, w, steps):
        return torch.tensor([float(fn(s, d, w)) for s in steps], dtype=torch.float64)
    return rates


NOAM_PITFALLS = [
    Pitfall("Noam schedule off by one",
            "Your rate at LambdaLR's step s is the paper's rate for update s (or a "
            "guard such as max(step, 1)): LambdaLR counts from 0 and step 0 *is* the "
            "first update, so use n = step + 1.",
            S_LR, _noam_off_by_one_guarded),
    Pitfall("Noam schedule off by one",
            "Your first update gets learning rate 0 and every later one the rate of "
            "the update before it: LambdaLR's step 0 is the first update, so use n = "
            "step + 1 (no special case needed).",
            S_LR, _noam_zero_at_start),
    Pitfall("Noam schedule off by one",
            "Your rates are one update ahead: LambdaLR's step 0 is update n = 1, so "
            "n = step + 1, not step + 2.",
            S_LR, _noam_plus_two),
    Pitfall("warm-up exponent wrong",
            "The warm-up branch is n · warmup^-1.5 (so the two branches meet at n = "
            "warmup); you used warmup^-0.5.",
            S_LR, _noam_warmup_exponent),
    Pitfall("missing the d_model^-0.5 factor",
            "The whole schedule is scaled by d_model^-0.5: wider models take smaller "
            "steps.",
            S_LR, _noam_no_d_model),
    Pitfall("max instead of min",
            "The rate is the *minimum* of the two branches: it rises linearly while n "
            "< warmup, then decays like n^-0.5. With max it starts huge and never "
            "warms up.",
            S_LR, _noam_max),
]

# Recognised at step 0 alone: an exception or an infinite rate has no values to compare.
NOAM_DIVIDES_BY_ZERO = Diagnosis(
    "Noam schedule divides by zero at step 0",
    "LambdaLR calls your function with step 0 before the first update (the seed's "
    "formula uses step^-0.5). Use n = step + 1.", S_LR)


def _noam_cases():
    configs = [(512, 4000), (64, 200), (128, 50), (32, 1)]
    return [Case(f"d_model={d}, warmup={w}",
                 lambda d=d, w=w: (d, w, [0, 1, 2, 3, w - 1, w, w + 1, 3 * w, 10 * w]))
            for d, w in configs]


def _rate_at_step_zero_breaks(noam_fn) -> str | None:
    """What goes wrong with ``noam_fn(0, 64, 200)``, or None when it is a finite
    number."""
    first = run(lambda: float(noam_fn(0, 64, 200)), ())
    arithmetic = (ZeroDivisionError, ValueError, OverflowError, FloatingPointError)
    if isinstance(first, Raised) and isinstance(first.exc, arithmetic):
        return f"noam_lambda(0, 64, 200) raised {first!r}."
    if isinstance(first, float) and not math.isfinite(first):
        return f"noam_lambda(0, 64, 200) returned {first}."
    return None  # any other exception: compare_to_reference reports it


@single_threaded
def check_noam_lambda(noam_fn) -> None:
    """``noam_fn(step, d_model, warmup) -> float``: the LambdaLR multiplier for step 0,
    1, ... (base lr 1.0)."""
    __tracebackhide__ = True
    broken = _rate_at_step_zero_breaks(noam_fn)
    if broken is not None:
        NOAM_DIVIDES_BY_ZERO.fail("noam_lambda", broken)
    compare_to_reference("noam_lambda", _noam_cases(), noam_fn, noam_lambda,
                         NOAM_PITFALLS, atol=1e-12, rtol=1e-6, adapt=_rates)


# ----------------------------------------------------------------------- make_scheduler

# Recognised from what the scheduler does to an optimizer that counts its step() calls.
SCHEDULER_STEPS_OPTIMIZER = Diagnosis(
    "scheduler steps the optimizer",
    "That is the seed's AdamWarmup: next to the loop's own optimizer.step() every "
    "batch is applied twice, and under AMP it bypasses GradScaler.step. A scheduler "
    "only sets the learning rate; torch.optim.lr_scheduler.LambdaLR does exactly that.",
    S_LR)
SCHEDULER_RATE_SET_LATE = Diagnosis(
    "Noam schedule off by one",
    "The first update runs at the optimizer's initial lr (1.0) because your scheduler "
    "sets the rate only in step(). Set the rate for step 0 when the scheduler is "
    "created (LambdaLR does).", S_LR)
SCHEDULER_RATES_AHEAD = Diagnosis(
    "Noam schedule off by one",
    "Your rates run one update ahead: the first update must run at noam_lambda(0, "
    "d_model, warmup).", S_LR)


def _counting_sgd(params, lr):
    """SGD whose step() calls are counted, whoever makes them (``opt.calls``).

    The counter wraps the *instance's* step: a subclass would not do, since PyTorch
    replaces an optimizer class's step with a profiling wrapper when the first instance
    is made."""
    opt = torch.optim.SGD(params, lr=lr)
    opt.calls = 0
    inner = opt.step

    def step(self, *args, **kwargs):
        self.calls += 1
        return inner(*args, **kwargs)

    # A bound method, as LambdaLR's own wrapper expects.
    opt.step = types.MethodType(step, opt)
    return opt


def _build_scheduler(title, make_scheduler, opt, d, w):
    __tracebackhide__ = True
    sched = run_or_fail(title, make_scheduler, (opt, d, w),
                        f"make_scheduler(optimizer, {d}, {w})")
    if not callable(getattr(sched, "step", None)):
        fail(title, "make_scheduler must return a scheduler with a step() method, got "
                    f"{type(sched).__name__}")
    return sched


def _rates_while_training(title, make_scheduler, d, w, n) -> list[float]:
    """The learning rates of n + 1 updates, each optimizer.step() (the loop's) followed
    by one scheduler.step(); fails as soon as scheduler.step() moves the weights."""
    __tracebackhide__ = True
    weight = nn.Parameter(torch.ones(3, device=get_device()))
    opt = _counting_sgd([weight], lr=1.0)
    sched = _build_scheduler(title, make_scheduler, opt, d, w)
    rates = [opt.param_groups[0]["lr"]]
    for k in range(1, n + 1):
        weight.grad = torch.ones_like(weight)
        with quiet():
            opt.step()  # the training loop's own call
        calls, before = opt.calls, weight.detach().clone()
        run_or_fail(title, sched.step, (), "scheduler.step()")
        if opt.calls != calls or not torch.equal(weight.detach(), before):
            SCHEDULER_STEPS_OPTIMIZER.fail(
                title, f"Your scheduler.step() number {k} updated the weights.")
        rates.append(opt.param_groups[0]["lr"])
    return rates


def _close(got, want) -> bool:
    return len(got) == len(want) and all(math.isclose(a, b, rel_tol=1e-6)
                                         for a, b in zip(got, want))


def _rate_set_only_in_step(rates, want) -> bool:
    return rates[0] == 1.0 and _close(rates[1:], want[:len(rates) - 1])


def _rates_one_ahead(rates, want) -> bool:
    return _close(rates, want[1:len(rates) + 1])


_SCHEDULER_RATE_MISTAKES = ((_rate_set_only_in_step, SCHEDULER_RATE_SET_LATE),
                            (_rates_one_ahead, SCHEDULER_RATES_AHEAD))


@single_threaded
def check_noam_scheduler(make_scheduler) -> None:
    """``make_scheduler(optimizer, d_model, warmup)`` returns a scheduler whose
    ``step()`` sets the Noam rate for the next update and does nothing else. The
    optimizer is created with lr=1.0."""
    __tracebackhide__ = True
    title, d, w, n = "make_scheduler", 64, 5, 12
    rates = _rates_while_training(title, make_scheduler, d, w, n)
    # One rate more than the updates, to recognise rates that run ahead.
    want = [noam_lambda(s, d, w) for s in range(n + 2)]
    if _close(rates, want[:n + 1]):
        passed(title, f"sets the Noam rate for {n + 1} updates and never steps the "
                      "optimizer")
        return
    for looks_like, diagnosis in _SCHEDULER_RATE_MISTAKES:
        if looks_like(rates, want):
            diagnosis.fail(title)
    s = next(i for i, (a, b) in enumerate(zip(rates, want))
             if not math.isclose(a, b, rel_tol=1e-6))
    fail(title, f"the learning rate for update {s} (after {s} scheduler steps) is "
                f"{rates[s]:.6g}, expected {want[s]:.6g} = noam_lambda({s}, {d}, {w}) "
                "with the optimizer's lr at 1.0.", S_LR)


# --------------------------------------------------------------------------- train_step

def _small_model(seed: int = 0, dropout: float = 0.0, vocab: int = 13):
    from tformer_ref.baselines import TorchTransformer

    torch.manual_seed(seed)
    return TorchTransformer(vocab, vocab, d_model=16, n_heads=8, n_layers=2, d_ff=32,
                            dropout=dropout, max_len=32).to(get_device())


def _teacher_forced_loss(model, src, tgt, pad_id, eps):
    tgt_in, labels = _shift_ref(tgt)
    return _loss_ref(model(src, tgt_in), labels, pad_id, eps)


def _train_step_reference(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    """zero_grad, forward, loss, backward, clip, optimizer.step, scheduler.step."""
    model.train()
    opt.zero_grad()
    loss = _teacher_forced_loss(model, src, tgt, pad_id, eps)
    loss.backward()
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    sched.step()
    return loss.item(), float(norm)


def _train_clip_before_backward(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    model.train()
    opt.zero_grad()
    loss = _teacher_forced_loss(model, src, tgt, pad_id, eps)
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    loss.backward()
    opt.step()
    sched.step()
    return loss.item(), float(norm)


CLIP_BEFORE_BACKWARD = Pitfall(
    "clipping before backward",
    "You clip before loss.backward(): there are no gradients yet (or only last "
    "batch's, about to be zeroed), so nothing is clipped and the norm you report is 0. "
    "Order: zero_grad, forward, loss, backward, clip_grad_norm_, optimizer.step, "
    "scheduler.step.",
    S_CLIP, _train_clip_before_backward)


def _train_clip_before_zero_grad(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    model.train()
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.zero_grad()
    loss = _teacher_forced_loss(model, src, tgt, pad_id, eps)
    loss.backward()
    opt.step()
    sched.step()
    return loss.item(), float(norm)


CLIP_BEFORE_ZERO_GRAD = Pitfall(
    "clipping before backward",
    "You clip before zero_grad and backward, i.e. last batch's gradients: this batch's "
    "update is never clipped. Clip right after loss.backward() and before "
    "optimizer.step().",
    S_CLIP, _train_clip_before_zero_grad)


def _train_clip_after_step(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    model.train()
    opt.zero_grad()
    loss = _teacher_forced_loss(model, src, tgt, pad_id, eps)
    loss.backward()
    opt.step()
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    sched.step()
    return loss.item(), float(norm)


CLIP_AFTER_STEP = Pitfall(
    "clipping after the step",
    "You clip after optimizer.step(): the weights have already moved by the unclipped "
    "gradient, so clipping changes nothing. Clip between loss.backward() and "
    "optimizer.step().", S_CLIP, _train_clip_after_step)


def _train_without_zero_grad(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    model.train()
    loss = _teacher_forced_loss(model, src, tgt, pad_id, eps)
    loss.backward()
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    sched.step()
    return loss.item(), float(norm)


GRADIENTS_NEVER_ZEROED = Pitfall(
    "gradients never zeroed",
    "Your gradients accumulate across steps: call optimizer.zero_grad() at the start "
    "of each step.", S_CLIP, _train_without_zero_grad)


def _train_without_scheduler(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    model.train()
    opt.zero_grad()
    loss = _teacher_forced_loss(model, src, tgt, pad_id, eps)
    loss.backward()
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    return loss.item(), float(norm)


SCHEDULER_NOT_STEPPED = Pitfall(
    "scheduler not stepped",
    "The learning rate never changes: call scheduler.step() once per update, after "
    "optimizer.step().", S_LR, _train_without_scheduler)


def _train_scheduler_before_optimizer(model, src, tgt, opt, sched, max_norm, pad_id,
                                      eps):
    model.train()
    opt.zero_grad()
    loss = _teacher_forced_loss(model, src, tgt, pad_id, eps)
    loss.backward()
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    sched.step()
    opt.step()
    return loss.item(), float(norm)


SCHEDULER_BEFORE_OPTIMIZER = Pitfall(
    "scheduler stepped before the optimizer",
    "You call scheduler.step() before optimizer.step(), so the first update already "
    "uses the second rate (and PyTorch warns). Step the optimizer first, then the "
    "scheduler.",
    S_LR, _train_scheduler_before_optimizer)


def _train_loss_counts_padding(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    model.train()
    opt.zero_grad()
    tgt_in, labels = _shift_ref(tgt)
    loss = _loss_counts_padding(model(src, tgt_in), labels, pad_id, eps)
    loss.backward()
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    sched.step()
    return loss.item(), float(norm)


TRAIN_LOSS_COUNTS_PADDING = Pitfall(
    "padding counted in the loss",
    "Your training step's loss includes padding positions: use your sequence_loss with "
    "pad_id.",
    S_LOSS, _train_loss_counts_padding)


def _train_shifted_the_wrong_way(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    model.train()
    opt.zero_grad()
    loss = _loss_ref(model(src, tgt[:, 1:]), tgt[:, :-1], pad_id, eps)
    loss.backward()
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    sched.step()
    return loss.item(), float(norm)


TRAIN_SHIFTED_WRONG_WAY = Pitfall(
    "targets shifted the wrong way",
    "Your training step feeds tgt[:, 1:] and predicts tgt[:, :-1]: use your "
    "shift_targets.",
    S_SHIFT, _train_shifted_the_wrong_way)

TRAIN_PITFALLS = (CLIP_BEFORE_BACKWARD, CLIP_BEFORE_ZERO_GRAD, CLIP_AFTER_STEP,
                  GRADIENTS_NEVER_ZEROED, SCHEDULER_NOT_STEPPED,
                  SCHEDULER_BEFORE_OPTIMIZER, TRAIN_LOSS_COUNTS_PADDING,
                  TRAIN_SHIFTED_WRONG_WAY)


def _train_run(step_fn):
    """Run ``step_fn`` for three updates on a fresh model; flatten what it reports and
    what it did."""
    def three_steps(seed, pad_id, eps):
        model = _small_model(seed)
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        sched = LambdaLR(opt, lambda s: 0.5 ** s)
        results = []
        for i in range(3):
            src = _tokens(4, 6, seed=10 * seed + i, pad_id=pad_id)
            tgt = _tokens(4, 7, seed=10 * seed + i + 5, pad_id=pad_id)
            out = step_fn(model, src, tgt, opt, sched, 0.5, pad_id, eps)
            if not (isinstance(out, (tuple, list)) and len(out) == 2):
                raise CheckFailure("train_step: must return (loss, grad_norm), got "
                                   f"{type(out).__name__}")
            results += [float(out[0]), float(out[1])]
        results.append(opt.param_groups[0]["lr"])
        flat = torch.cat([p.detach().flatten().double().cpu()
                          for p in model.parameters()])
        return torch.cat([torch.tensor(results, dtype=torch.float64), flat])
    return three_steps


def _train_cases():
    return [Case("3 steps, pad_id=0, label_smoothing=0", lambda: (0, 0, 0.0)),
            Case("3 steps, pad_id=3, label_smoothing=0.1", lambda: (1, 3, 0.1))]


@single_threaded
def check_train_step(step_fn) -> None:
    """``step_fn(model, src, tgt, optimizer, scheduler, max_norm, pad_id,
    label_smoothing) -> (loss, grad_norm)``, the norm being the gradients' total norm
    before clipping."""
    __tracebackhide__ = True
    compare_to_reference("train_step", _train_cases(), step_fn, _train_step_reference,
                         TRAIN_PITFALLS, atol=1e-5, rtol=1e-4, adapt=_train_run)


# ------------------------------------------------------------------------ greedy_decode

def _keep_mask(tgt_mask, st):
    """A learner's ``tgt_mask`` as a bool [st, st] mask (True = may attend)."""
    if (not isinstance(tgt_mask, torch.Tensor) or tgt_mask.dtype != torch.bool
            or tgt_mask.numel() != st * st):
        got = (f"{tgt_mask.dtype} {tuple(tgt_mask.shape)}"
               if isinstance(tgt_mask, torch.Tensor) else type(tgt_mask).__name__)
        raise TypeError(f"tgt_mask must be a bool mask [{st}, {st}] or [1, 1, {st}, "
                        f"{st}] (True = may attend), got {got}")
    return tgt_mask.reshape(st, st)


def _causal(t, device):
    """The [t, t] causal keep-mask (True = may attend), lower triangular."""
    return torch.ones(t, t, dtype=torch.bool, device=device).tril()


class DecodingModel(nn.Module):
    """An encoder–decoder whose ``decode`` takes the target mask explicitly, as
    nn.TransformerDecoder does.

    ``encode(src [B, Ss]) -> (memory [B, Ss, D], src_mask [B, 1, 1, Ss])``;
    ``decode(tgt_in [B, St], memory, src_mask, tgt_mask=None) -> logits [B, St, V]``
    where ``tgt_mask`` is a bool [St, St] or [1, 1, St, St] mask, True = may attend. No
    ``tgt_mask`` means no mask at all. It records how it is used, so a check can say
    what a decoding loop did."""

    def __init__(self, eos_bias: float = 0.0, seed: int = 0, dropout: float = 0.3):
        super().__init__()
        self.inner = _small_model(seed, dropout=dropout)
        with torch.no_grad():
            self.inner.out.bias[2] += eos_bias
            # Never generates PAD or BOS, so outputs with or without BOS compare.
            self.inner.out.bias[:2] = -1e4
        self.reset()

    def reset(self):
        self.encoded_rows, self.calls = 0, []

    def encode(self, src):
        self.encoded_rows += src.size(0)
        return self.inner.encode(src)

    def decode(self, tgt_in, memory, src_mask, tgt_mask=None):
        st = tgt_in.size(1)
        if tgt_mask is None:
            kind = "none"
            keep = torch.ones(st, st, dtype=torch.bool, device=tgt_in.device)
        else:
            keep = _keep_mask(tgt_mask, st)
            tril = _causal(st, keep.device)
            kind = ("causal" if torch.equal(keep, tril)
                    else "triu" if torch.equal(keep, tril.T)
                    else "none" if keep.all() else "other")
        self.calls.append({"training": self.training, "grad": torch.is_grad_enabled(),
                           "mask": kind, "length": st})
        return self.inner.decode(tgt_in, memory, src_mask, tgt_mask=keep)

    def forward(self, src, tgt_in):
        memory, src_mask = self.encode(src)
        st = tgt_in.size(1)
        causal = _causal(st, src.device)
        return self.decode(tgt_in, memory, src_mask, causal)


def _greedy_reference(model, src, max_len, bos_id, eos_id, pad_id):
    """Greedy loop for :class:`DecodingModel`: eval, no grad, encode once, causal mask,
    argmax of the last position, PAD after a row's EOS, stop once every row ended."""
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            mask = _causal(out.size(1), src.device)
            logits = model.decode(out, memory, src_mask, mask)
            nxt = logits[:, -1].argmax(-1).masked_fill(done, pad_id)
            out = torch.cat([out, nxt[:, None]], 1)
            done |= nxt == eos_id
            if done.all():
                break
    return out


def _greedy_stops_at_first_eos(model, src, max_len, bos_id, eos_id, pad_id):
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        for _ in range(max_len):
            mask = _causal(out.size(1), src.device)
            logits = model.decode(out, memory, src_mask, mask)
            nxt = logits[:, -1].argmax(-1)
            out = torch.cat([out, nxt[:, None]], 1)
            if (nxt == eos_id).any():
                break
    return out


STOPS_AT_FIRST_EOS = Pitfall(
    "stops the whole batch at the first EOS",
    "You break as soon as any sequence ends; the others are cut short. Stop when every "
    "row has produced EOS.", S_DECODE, _greedy_stops_at_first_eos)


def _greedy_first_position(model, src, max_len, bos_id, eos_id, pad_id):
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            mask = _causal(out.size(1), src.device)
            logits = model.decode(out, memory, src_mask, mask)
            nxt = logits[:, 0].argmax(-1).masked_fill(done, pad_id)
            out = torch.cat([out, nxt[:, None]], 1)
            done |= nxt == eos_id
            if done.all():
                break
    return out


ARGMAX_OF_FIRST_POSITION = Pitfall(
    "argmax of the first position",
    "You take the argmax of the *first* position's logits at every step. The next "
    "token is predicted by the last position: logits[:, -1].",
    S_DECODE, _greedy_first_position)

# Recognised from what the recording model saw, not by matching a wrong loop's output.
ENCODES_EVERY_STEP = Diagnosis(
    "source encoded at every step",
    "Encode the source once before the loop and reuse the memory at every step "
    "(calling model(src, tgt) at each step re-encodes it).", S_DECODE)
NO_CAUSAL_MASK = Diagnosis(
    "greedy decoding without the causal mask",
    "Each step must decode with the same causal mask as training (causal_mask / tril, "
    "True = may attend): without it, earlier positions see later ones inside the "
    "decoder, and from the second layer on the last position's output is not what the "
    "model was trained to produce.", S_DECODE)
UPPER_TRIANGULAR_MASK = Diagnosis(
    "upper triangular target mask",
    "Your target mask is upper triangular (triu): each position may attend only to the "
    "*future*. The causal mask is lower triangular (tril).", S_DECODE)
DECODES_IN_TRAINING_MODE = Diagnosis(
    "decoding in training mode",
    "The model decoded in training mode, so dropout was on and the output is random. "
    "Call model.eval() before decoding.", S_DECODE)
DECODES_WITH_GRADIENTS = Diagnosis(
    "decoding with gradients enabled",
    "Decoding with gradients enabled builds an autograd graph at every step for "
    "nothing. Wrap the loop in torch.no_grad() (or torch.inference_mode()).", S_DECODE)
NO_STOP_AT_EOS = Diagnosis(
    "greedy decoding does not stop at EOS",
    "Track which rows are finished, pad them, and break when all are.", S_DECODE)

_BOS, _EOS, _PAD = 1, 2, 0
_DECODE_CASES = (  # (label, eos_bias, batch, max_len, seed)
    ("rows ending at different steps", 0.0, 6, 12, 0),
    ("every row ends early", 0.5, 6, 12, 0),
    ("a batch of one", 0.0, 1, 10, 3),
)


def _rows(out):
    """[B, T] -> per row: (tokens up to and including the first EOS, BOS dropped; the
    tokens after it that are not PAD)."""
    rows = []
    for r in out.tolist():
        if r and r[0] == _BOS:
            r = r[1:]
        if _EOS in r:
            k = r.index(_EOS)
            rows.append((r[: k + 1], [x for x in r[k + 1:] if x != _PAD]))
        else:
            rows.append((r, []))
    return rows


def _decoded_tokens(rows):
    return [tokens for tokens, _ in rows]


def _decode_inputs(eos_bias, b, seed):
    model = DecodingModel(eos_bias=eos_bias).to(get_device())
    src = torch.randint(3, 13, (b, 5), generator=_gen(seed)).to(get_device())
    return model, src


@dataclass(frozen=True)
class _Decoding:
    """One case of the learner's loop: what it returned, and what the model recorded."""

    label: str
    model: DecodingModel
    src: torch.Tensor
    max_len: int
    batch: int
    rows: list  # _rows of the learner's output
    want: list  # _rows of the reference's output
    want_steps: int  # decode calls the reference made
    calls: tuple  # the model's record of each decode call the learner made
    encoded_rows: int


def _decode_case(title, greedy_fn, label, eos_bias, batch, max_len, seed) -> _Decoding:
    """Run the reference, then the learner, on a fresh model left in training mode."""
    __tracebackhide__ = True
    model, src = _decode_inputs(eos_bias, batch, seed)
    model.train()  # as a model is left after training
    want = _rows(_greedy_reference(model, src, max_len, _BOS, _EOS, _PAD))
    want_steps = len(model.calls)
    model.reset()
    model.train()
    out = run_or_fail(title, greedy_fn, (model, src, max_len, _BOS, _EOS, _PAD),
                      f"case {label}: your code")
    if not isinstance(out, torch.Tensor) or out.dim() != 2 or out.size(0) != batch:
        got = (f"shape {list(out.shape)}" if isinstance(out, torch.Tensor)
               else type(out).__name__)
        fail(title, f"case {label}: expected a LongTensor [B={batch}, T] of token ids, "
                    f"got {got}")
    return _Decoding(label, model, src, max_len, batch, _rows(out.long()), want,
                     want_steps, tuple(model.calls), model.encoded_rows)


# Each probe returns what it saw the learner's loop do wrong in one case, or None.

def _encoded_more_than_once(seen: _Decoding) -> str | None:
    if seen.encoded_rows > seen.batch:
        return (f"In case {seen.label}, {seen.encoded_rows} source rows were encoded "
                f"for a batch of {seen.batch}.")
    return None


def _first_masked_step(seen: _Decoding, kinds) -> dict | None:
    """The first decode call past the first token whose mask is one of ``kinds``."""
    return next((c for c in seen.calls if c["length"] > 1 and c["mask"] in kinds), None)


def _decoded_without_causal_mask(seen: _Decoding) -> str | None:
    call = _first_masked_step(seen, ("none", "other"))
    if call is None:
        return None
    mask = "None (or all True)" if call["mask"] == "none" else "neither tril nor triu"
    return (f"At the step that decoded {call['length']} tokens, your target mask was "
            f"{mask}.")


def _decoded_with_triu_mask(seen: _Decoding) -> str | None:
    call = _first_masked_step(seen, ("triu",))
    if call is None:
        return None
    return (f"At the step that decoded {call['length']} tokens, your target mask was "
            "triu.")


def _decoded_in_training_mode(seen: _Decoding) -> str | None:
    n = sum(c["training"] for c in seen.calls)
    if n:
        return f"{n} of your {len(seen.calls)} decode calls ran in training mode."
    return None


def _decoded_with_gradients(seen: _Decoding) -> str | None:
    n = sum(c["grad"] for c in seen.calls)
    if n:
        return f"{n} of your {len(seen.calls)} decode calls ran with gradients on."
    return None


def _decoded_past_eos(seen: _Decoding) -> str | None:
    longest = max((c["length"] for c in seen.calls), default=0)
    if longest > seen.want_steps:
        return (f"In case {seen.label}, every sequence had ended after "
                f"{seen.want_steps} steps but your loop went on to decode a prefix of "
                f"{longest} tokens.")
    after = [(i, extra) for i, (_, extra) in enumerate(seen.rows) if extra]
    if after:
        row, extra = after[0]
        return f"In case {seen.label}, row {row} goes on after its EOS with {extra}."
    return None


def _rows_match(seen: _Decoding, variant) -> bool:
    """The learner's tokens are wrong, and ``variant`` gives them on the same model."""
    if _decoded_tokens(seen.rows) == _decoded_tokens(seen.want):
        return False
    seen.model.reset()
    theirs = variant(seen.model, seen.src, seen.max_len, _BOS, _EOS, _PAD)
    return _decoded_tokens(_rows(theirs)) == _decoded_tokens(seen.rows)


def _stopped_at_first_eos(seen: _Decoding) -> str | None:
    if _rows_match(seen, STOPS_AT_FIRST_EOS.impl):
        return (f"In case {seen.label}, every row stops at the step where the first "
                "EOS appears.")
    return None


def _took_first_position(seen: _Decoding) -> str | None:
    if _rows_match(seen, ARGMAX_OF_FIRST_POSITION.impl):
        return f"In case {seen.label}, your tokens are logits[:, 0].argmax(-1)."
    return None


# In this order: a mask or mode mistake explains any wrong tokens that follow from it.
DECODE_PROBES = (
    (_encoded_more_than_once, ENCODES_EVERY_STEP),
    (_decoded_without_causal_mask, NO_CAUSAL_MASK),
    (_decoded_with_triu_mask, UPPER_TRIANGULAR_MASK),
    (_decoded_in_training_mode, DECODES_IN_TRAINING_MODE),
    (_decoded_with_gradients, DECODES_WITH_GRADIENTS),
    (_decoded_past_eos, NO_STOP_AT_EOS),
    (_stopped_at_first_eos, STOPS_AT_FIRST_EOS),
    (_took_first_position, ARGMAX_OF_FIRST_POSITION),
)


def _fail_first_wrong_row(title, seen: _Decoding) -> None:
    __tracebackhide__ = True
    got, want = _decoded_tokens(seen.rows), _decoded_tokens(seen.want)
    i = next(i for i, (g, w) in enumerate(zip(got, want)) if g != w)
    fail(title, f"case {seen.label}: row {i} decoded to {got[i]}, expected {want[i]} "
                "(tokens after BOS up to EOS). Take the argmax of the last position's "
                "logits at each step and append it.", S_DECODE)


@single_threaded
def check_greedy_decode(greedy_fn) -> None:
    """``greedy_fn(model, src [B, Ss], max_len, bos_id, eos_id, pad_id) -> [B, T]`` (BOS
    first, PAD after EOS), for a model like :class:`DecodingModel`."""
    __tracebackhide__ = True
    title = "greedy_decode"
    for case in _DECODE_CASES:
        seen = _decode_case(title, greedy_fn, *case)
        for probe, diagnosis in DECODE_PROBES:
            observed = probe(seen)
            if observed is not None:
                diagnosis.fail(title, observed)
        if _decoded_tokens(seen.rows) != _decoded_tokens(seen.want):
            _fail_first_wrong_row(title, seen)
    passed(title, f"matches the reference on {len(_DECODE_CASES)} cases: eval mode, no "
                  "grad, encodes once, causal mask, stops at EOS")


# ------------------------------------------------------------------------- hidden tests


@single_threaded
def check_train_step_by_hand(step_fn) -> None:
    """Hidden test: the learner's step, not the reference's train_step (calling the
    model is fine)."""
    __tracebackhide__ = True
    model = _small_model(0)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = LambdaLR(opt, lambda s: 1.0)
    src, tgt = _tokens(2, 5, seed=1), _tokens(2, 6, seed=2)
    check_not_delegated("train_step",
                        lambda: step_fn(model, src, tgt, opt, sched, 1.0, 0, 0.0),
                        forbidden=["tformer_ref.train_step", "tformer_ref.fit"])


@single_threaded
def check_greedy_by_hand(greedy_fn) -> None:
    """Hidden test: the learner's loop, not the reference's greedy_decode."""
    __tracebackhide__ = True
    model, src = _decode_inputs(0.5, 2, 0)
    # The model itself is reference code the learner is meant to call: profile only the
    # learner's loop.
    check_not_delegated("greedy_decode", lambda: greedy_fn(model, src, 8, 1, 2, 0),
                        forbidden=["tformer_ref.greedy_decode",
                                   "tformer_ref.beam_search"])


seal(__name__)
