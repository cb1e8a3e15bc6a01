"""Checks for chapter 6, training pitfalls and decoding (book/ch06_training).

Each public ``check_*`` is what an exercise test cell calls. The private functions
near each are the known wrong variants a diagnosis can name.
"""
from __future__ import annotations

import math
import types
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.lr_scheduler import LambdaLR

from tformer_ref.device import get_device
from tformer_ref.training import noam_lambda
from ..guard.integrity import seal
from .delegation import check_by_hand, check_not_delegated
from .diagnosis import (Case, CheckFailure, Pitfall, Section, compare_to_reference, fail, passed,
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


def _tokens(b: int, s: int, seed: int, pad_id: int = 0, vocab: int = 13) -> torch.Tensor:
    """[B, S] batch-first targets: BOS=1, random tokens, EOS=2, then padding (rows of varying length)."""
    g = _gen(seed)
    out = torch.full((b, s), pad_id, dtype=torch.long)
    for i in range(b):
        n = s if i == 0 else int(torch.randint(3, s + 1, (1,), generator=g))
        out[i, :n] = torch.randint(4, vocab, (n,), generator=g)
        out[i, 0], out[i, n - 1] = 1, 2
    return out.to(get_device())


# --------------------------------------------------------------------------- shift_targets

def _pair(fn):
    """Wrap ``fn(tgt) -> (tgt_in, labels)`` so the pair is one tensor that compare_to_reference can diff."""
    def run(tgt):
        out = fn(tgt)
        if not (isinstance(out, (tuple, list)) and len(out) == 2 and all(isinstance(t, torch.Tensor) for t in out)):
            raise CheckFailure(f"shift_targets: must return a pair (decoder input, labels) of tensors, "
                               f"got {type(out).__name__}")
        return torch.stack([out[0], out[1]])  # raises when the two shapes differ
    return run


def _shift_ref(tgt):
    return tgt[:, :-1], tgt[:, 1:]


SHIFT_PITFALLS = [
    Pitfall("sequence-first slicing on batch-first data",
            "You sliced axis 0 (tgt[:-1], tgt[1:]), as the seed does. That is the time axis only for sequence-first "
            "[St, B] tensors; on batch-first [B, St] data it drops the last and first *sequences* of the batch "
            "instead of shifting in time. Slice axis 1: tgt[:, :-1] and tgt[:, 1:].",
            S_SHIFT, lambda tgt: (tgt[:-1], tgt[1:])),
    Pitfall("targets shifted the wrong way",
            "Your decoder input is tgt[:, 1:] and your labels tgt[:, :-1]: the model would be asked to predict each "
            "token from the *next* one. The decoder reads BOS y1 .. yn (tgt[:, :-1]) and predicts y1 .. yn EOS "
            "(tgt[:, 1:]).", S_SHIFT, lambda tgt: (tgt[:, 1:], tgt[:, :-1])),
    Pitfall("labels not shifted",
            "Your decoder input and labels are the same tokens, so with the causal mask the model just copies its "
            "input (the loss drops to 0 and nothing is learned). The labels are the input moved one step left: "
            "tgt[:, :-1] in, tgt[:, 1:] out.", S_SHIFT, lambda tgt: (tgt[:, :-1], tgt[:, :-1])),
    Pitfall("no shift at all",
            "You feed the whole target and use it as labels: nothing is shifted. Decoder input tgt[:, :-1], labels "
            "tgt[:, 1:].", S_SHIFT, lambda tgt: (tgt, tgt)),
]


def _shift_cases():
    shapes = [(3, 7), (4, 5), (6, 7), (1, 4), (5, 9)]  # (6, 7): B = St - 1 catches axis mix-ups that keep shapes
    return [Case(f"tgt [B={b}, St={s}]", lambda b=b, s=s, i=i: (_tokens(b, s, seed=i),)) for i, (b, s) in enumerate(shapes)]


@single_threaded
def check_shift_targets(shift_fn) -> None:
    """``shift_fn(tgt [B, St]) -> (tgt_in [B, St-1], labels [B, St-1])``, batch-first."""
    __tracebackhide__ = True
    pitfalls = [Pitfall(p.name, p.explanation, p.section, _pair(p.impl)) for p in SHIFT_PITFALLS]
    compare_to_reference("shift_targets", _shift_cases(), _pair(shift_fn), _pair(_shift_ref), pitfalls, atol=0, rtol=0)


# --------------------------------------------------------------------------- sequence_loss

def _ce(logits, labels, **kw):
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1), **kw)


def _loss_ref(logits, labels, pad_id, eps):
    return _ce(logits, labels, ignore_index=pad_id, label_smoothing=eps)


def _loss_counts_padding(logits, labels, pad_id, eps):
    return _ce(logits, labels, label_smoothing=eps)


def _loss_mean_over_all(logits, labels, pad_id, eps):
    return _ce(logits, labels, ignore_index=pad_id, label_smoothing=eps, reduction="sum") / labels.numel()


def _loss_no_smoothing(logits, labels, pad_id, eps):
    return _ce(logits, labels, ignore_index=pad_id)


def _loss_pad_zero(logits, labels, pad_id, eps):
    return _ce(logits, labels, ignore_index=0, label_smoothing=eps)


def _loss_sum(logits, labels, pad_id, eps):
    return _ce(logits, labels, ignore_index=pad_id, label_smoothing=eps, reduction="sum")


def _loss_counts_padding_no_smoothing(logits, labels, pad_id, eps):
    return _ce(logits, labels)


LOSS_PITFALLS = [
    Pitfall("padding counted in the loss",
            "Your loss includes the padding positions: the model is trained to predict PAD after EOS, and batches "
            "with more padding weigh more. Pass ignore_index=pad_id to cross_entropy (or mask those positions "
            "out of both the sum and the count).", S_LOSS, _loss_counts_padding),
    Pitfall("padding counted in the loss and no label smoothing",
            "Your loss includes the padding positions and ignores label_smoothing. Pass ignore_index=pad_id and "
            "label_smoothing=label_smoothing to cross_entropy.", S_LOSS, _loss_counts_padding_no_smoothing),
    Pitfall("padding counted in the mean",
            "You left the padding out of the sum but still divide by all B·St positions, so the loss shrinks "
            "as padding grows. Divide by the number of real tokens (cross_entropy with ignore_index does).",
            S_LOSS, _loss_mean_over_all),
    Pitfall("pad id hard-coded to 0",
            "You ignore token 0 instead of the pad_id you were given (the seed's masks hard-code 0 too). "
            "Use the pad_id argument.", S_LOSS, _loss_pad_zero),
    Pitfall("label smoothing ignored",
            "Your loss ignores the label_smoothing argument. cross_entropy takes it directly: "
            "label_smoothing=label_smoothing.", S_LOSS, _loss_no_smoothing),
    Pitfall("summed, not averaged",
            "Your loss is the sum over tokens, not the mean: its size (and the gradient's) grows with the batch "
            "and the learning rate no longer means the same thing. Average over the real tokens.", S_LOSS, _loss_sum),
]


def _loss_cases():
    configs = [  # (B, St, V, pad_id, label_smoothing, dtype)
        (3, 6, 11, 0, 0.0, torch.float32), (4, 5, 13, 0, 0.1, torch.float32), (2, 7, 9, 3, 0.0, torch.float32),
        (5, 4, 17, 0, 0.2, torch.float64), (4, 6, 10, 3, 0.1, torch.float32),
    ]
    cases = []
    for i, (b, s, v, pad, eps, dtype) in enumerate(configs):
        def make(b=b, s=s, v=v, pad=pad, eps=eps, dtype=dtype, i=i):
            g = _gen(100 + i)
            labels = torch.randint(4, v, (b, s), generator=g)
            for r in range(1, b):  # every row but the first ends in padding
                labels[r, s - 1 - r % (s - 1):] = pad
            logits = torch.randn(b, s, v, generator=g, dtype=dtype)
            return logits.to(get_device()), labels.to(get_device()), pad, eps
        cases.append(Case(f"logits [{b}, {s}, {v}] {dtype}, pad_id={pad}, label_smoothing={eps}", make))
    return cases


@single_threaded
def check_sequence_loss(loss_fn) -> None:
    """``loss_fn(logits [B, St, V], labels [B, St], pad_id, label_smoothing) -> scalar tensor``."""
    __tracebackhide__ = True
    logits, labels, pad, eps = _loss_cases()[1].make()
    logits.requires_grad_(True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            out = loss_fn(logits, labels, pad, eps)
        except Exception:
            out = None  # compare_to_reference below reports the exception
    if isinstance(out, torch.Tensor) and (out.dim() != 0 or not out.requires_grad):
        fail("sequence_loss", f"the loss must be a scalar tensor that gradients can flow back through; got shape "
                              f"{list(out.shape)}, requires_grad={out.requires_grad}. Do not call .item() or wrap it "
                              "in torch.tensor(...).", S_LOSS)
    compare_to_reference("sequence_loss", _loss_cases(), loss_fn, _loss_ref, LOSS_PITFALLS, atol=1e-5, rtol=1e-4)


# --------------------------------------------------------------------------- noam_lambda

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
    """``fn(step, d_model, warmup)`` -> (d_model, warmup, steps) -> float64 tensor of its rates."""
    def run(d, w, steps):
        return torch.tensor([float(fn(s, d, w)) for s in steps], dtype=torch.float64)
    return run


NOAM_PITFALLS = [
    Pitfall("Noam schedule off by one",
            "Your rate at LambdaLR's step s is the paper's rate for update s (or a guard such as max(step, 1)): "
            "LambdaLR counts from 0 and step 0 *is* the first update, so use n = step + 1.",
            S_LR, _noam_off_by_one_guarded),
    Pitfall("Noam schedule off by one",
            "Your first update gets learning rate 0 and every later one the rate of the update before it: "
            "LambdaLR's step 0 is the first update, so use n = step + 1 (no special case needed).",
            S_LR, _noam_zero_at_start),
    Pitfall("Noam schedule off by one",
            "Your rates are one update ahead: LambdaLR's step 0 is update n = 1, so n = step + 1, not step + 2.",
            S_LR, _noam_plus_two),
    Pitfall("warm-up exponent wrong",
            "The warm-up branch is n · warmup^-1.5 (so the two branches meet at n = warmup); you used warmup^-0.5.",
            S_LR, _noam_warmup_exponent),
    Pitfall("missing the d_model^-0.5 factor",
            "The whole schedule is scaled by d_model^-0.5: wider models take smaller steps.", S_LR, _noam_no_d_model),
    Pitfall("max instead of min",
            "The rate is the *minimum* of the two branches: it rises linearly while n < warmup, then decays like "
            "n^-0.5. With max it starts huge and never warms up.", S_LR, _noam_max),
]


def _noam_cases():
    configs = [(512, 4000), (64, 200), (128, 50), (32, 1)]
    return [Case(f"d_model={d}, warmup={w}", lambda d=d, w=w: (d, w, [0, 1, 2, 3, w - 1, w, w + 1, 3 * w, 10 * w]))
            for d, w in configs]


@single_threaded
def check_noam_lambda(noam_fn) -> None:
    """``noam_fn(step, d_model, warmup) -> float``: the LambdaLR multiplier for step 0, 1, ... (base lr 1.0)."""
    __tracebackhide__ = True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            first = float(noam_fn(0, 64, 200))
        except (ZeroDivisionError, ValueError, OverflowError, FloatingPointError) as exc:
            fail("noam_lambda", "this looks like the pitfall 'Noam schedule divides by zero at step 0'. "
                                f"noam_lambda(0, 64, 200) raised {type(exc).__name__}: {exc}. LambdaLR calls your "
                                "function with step 0 before the first update (the seed's formula uses step^-0.5). "
                                "Use n = step + 1.", S_LR)
        except Exception:
            first = None  # compare_to_reference reports it
    if first is not None and not math.isfinite(first):
        fail("noam_lambda", f"this looks like the pitfall 'Noam schedule divides by zero at step 0': "
                            f"noam_lambda(0, 64, 200) returned {first}. Use n = step + 1.", S_LR)
    pitfalls = [Pitfall(p.name, p.explanation, p.section, _rates(p.impl)) for p in NOAM_PITFALLS]
    compare_to_reference("noam_lambda", _noam_cases(), _rates(noam_fn), _rates(noam_lambda), pitfalls,
                         atol=1e-12, rtol=1e-6)


# --------------------------------------------------------------------------- make_scheduler

def _counting_sgd(params, lr):
    """SGD whose step() calls are counted, whoever makes them (``opt.calls``).

    The counter wraps the *instance's* step: a subclass would not do, since PyTorch replaces an
    optimizer class's step with a profiling wrapper when the first instance is made."""
    opt = torch.optim.SGD(params, lr=lr)
    opt.calls = 0
    inner = opt.step

    def step(self, *args, **kwargs):
        self.calls += 1
        return inner(*args, **kwargs)

    opt.step = types.MethodType(step, opt)  # a bound method, as LambdaLR's own wrapper expects
    return opt


@single_threaded
def check_noam_scheduler(make_scheduler) -> None:
    """``make_scheduler(optimizer, d_model, warmup)`` returns a scheduler whose ``step()`` sets the Noam rate
    for the next update and does nothing else. The optimizer is created with lr=1.0."""
    __tracebackhide__ = True
    title = "make_scheduler"
    d, w, n = 64, 5, 12
    weight = nn.Parameter(torch.ones(3, device=get_device()))
    opt = _counting_sgd([weight], lr=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            sched = make_scheduler(opt, d, w)
        except Exception as exc:
            fail(title, f"make_scheduler(optimizer, {d}, {w}) raised {type(exc).__name__}: {exc}")
        if not callable(getattr(sched, "step", None)):
            fail(title, f"make_scheduler must return a scheduler with a step() method, got {type(sched).__name__}")
        rates, calls_by_scheduler = [opt.param_groups[0]["lr"]], 0
        for _ in range(n):
            weight.grad = torch.ones_like(weight)
            opt.step()  # the training loop's own call
            before_calls, before_w = opt.calls, weight.detach().clone()
            try:
                sched.step()
            except Exception as exc:
                fail(title, f"scheduler.step() raised {type(exc).__name__}: {exc}")
            calls_by_scheduler += opt.calls - before_calls
            if calls_by_scheduler or not torch.equal(weight.detach(), before_w):
                fail(title, "this looks like the pitfall 'scheduler steps the optimizer' (the seed's AdamWarmup). "
                            "scheduler.step() updated the weights: next to the loop's own optimizer.step() every "
                            "batch is applied twice, and under AMP it bypasses GradScaler.step. A scheduler only "
                            "sets the learning rate; torch.optim.lr_scheduler.LambdaLR does exactly that.", S_LR)
            rates.append(opt.param_groups[0]["lr"])
    want = [noam_lambda(s, d, w) for s in range(n + 1)]
    if all(math.isclose(a, b, rel_tol=1e-6) for a, b in zip(rates, want)):
        passed(title, f"sets the Noam rate for {n + 1} updates and never steps the optimizer")
        return
    if rates[0] == 1.0 and all(math.isclose(a, b, rel_tol=1e-6) for a, b in zip(rates[1:], want)):
        fail(title, "this looks like the pitfall 'Noam schedule off by one': the first update runs at the "
                    "optimizer's initial lr (1.0) because your scheduler sets the rate only in step(). Set the rate "
                    "for step 0 when the scheduler is created (LambdaLR does).", S_LR)
    if all(math.isclose(a, b, rel_tol=1e-6) for a, b in zip(rates, want[1:] + [noam_lambda(n + 1, d, w)])):
        fail(title, "this looks like the pitfall 'Noam schedule off by one': your rates run one update ahead.", S_LR)
    s = next(i for i, (a, b) in enumerate(zip(rates, want)) if not math.isclose(a, b, rel_tol=1e-6))
    fail(title, f"the learning rate for update {s} (after {s} scheduler steps) is {rates[s]:.6g}, expected "
                f"{want[s]:.6g} = noam_lambda({s}, {d}, {w}) with the optimizer's lr at 1.0.", S_LR)


# --------------------------------------------------------------------------- train_step

def _small_model(seed: int = 0, dropout: float = 0.0, vocab: int = 13):
    from tformer_ref.baselines import TorchTransformer

    torch.manual_seed(seed)
    return TorchTransformer(vocab, vocab, d_model=16, n_heads=8, n_layers=2, d_ff=32, dropout=dropout,
                            max_len=32).to(get_device())


def _train_ref(model, src, tgt, opt, sched, max_norm, pad_id, eps, *, order="right", zero=True,
               shift=_shift_ref, loss=_loss_ref):
    """One training step; ``order`` names where the clipping (or the scheduler step) goes."""
    model.train()
    if zero:
        opt.zero_grad()
    params = list(model.parameters())
    if order == "clip_before_zero":
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        opt.zero_grad()
    tgt_in, labels = shift(tgt)
    value = loss(model(src, tgt_in), labels, pad_id, eps)
    if order == "clip_before_backward":
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
    value.backward()
    if order in ("right", "sched_first", "no_sched"):
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
    if order == "sched_first":
        sched.step()
    if order == "clip_after_step":
        opt.step()
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
    else:
        opt.step()
    if order not in ("sched_first", "no_sched"):
        sched.step()
    return value.item(), float(norm)


def _train_run(step_fn):
    """Run ``step_fn`` for three updates on a fresh model; flatten what it reports and what it did."""
    def run(seed, pad_id, eps):
        model = _small_model(seed)
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        sched = LambdaLR(opt, lambda s: 0.5 ** s)
        results = []
        for i in range(3):
            src = _tokens(4, 6, seed=10 * seed + i, pad_id=pad_id)
            tgt = _tokens(4, 7, seed=10 * seed + i + 5, pad_id=pad_id)
            out = step_fn(model, src, tgt, opt, sched, 0.5, pad_id, eps)
            if not (isinstance(out, (tuple, list)) and len(out) == 2):
                raise CheckFailure(f"train_step: must return (loss, grad_norm), got {type(out).__name__}")
            results += [float(out[0]), float(out[1])]
        results.append(opt.param_groups[0]["lr"])
        flat = torch.cat([p.detach().flatten().double().cpu() for p in model.parameters()])
        return torch.cat([torch.tensor(results, dtype=torch.float64), flat])
    return run


def _variant(**kw):
    return _train_run(lambda *a: _train_ref(*a, **kw))


TRAIN_PITFALLS = [
    Pitfall("clipping before backward",
            "You clip before loss.backward(): there are no gradients yet (or only last batch's, about to be "
            "zeroed), so nothing is clipped and the norm you report is 0. Order: zero_grad, forward, loss, "
            "backward, clip_grad_norm_, optimizer.step, scheduler.step.", S_CLIP, _variant(order="clip_before_backward")),
    Pitfall("clipping before backward",
            "You clip before zero_grad and backward, i.e. last batch's gradients: this batch's update is never "
            "clipped. Clip right after loss.backward() and before optimizer.step().", S_CLIP,
            _variant(order="clip_before_zero")),
    Pitfall("clipping after the step",
            "You clip after optimizer.step(): the weights have already moved by the unclipped gradient, so "
            "clipping changes nothing. Clip between loss.backward() and optimizer.step().", S_CLIP,
            _variant(order="clip_after_step")),
    Pitfall("gradients never zeroed",
            "Your gradients accumulate across steps: call optimizer.zero_grad() at the start of each step.",
            S_CLIP, _variant(zero=False)),
    Pitfall("scheduler not stepped",
            "The learning rate never changes: call scheduler.step() once per update, after optimizer.step().",
            S_LR, _variant(order="no_sched")),
    Pitfall("scheduler stepped before the optimizer",
            "You call scheduler.step() before optimizer.step(), so the first update already uses the second "
            "rate (and PyTorch warns). Step the optimizer first, then the scheduler.", S_LR,
            _variant(order="sched_first")),
    Pitfall("padding counted in the loss",
            "Your training step's loss includes padding positions: use your sequence_loss with pad_id.", S_LOSS,
            _variant(loss=_loss_counts_padding)),
    Pitfall("targets shifted the wrong way",
            "Your training step feeds tgt[:, 1:] and predicts tgt[:, :-1]: use your shift_targets.", S_SHIFT,
            _variant(shift=lambda t: (t[:, 1:], t[:, :-1]))),
]


def _train_cases():
    return [Case("3 steps, pad_id=0, label_smoothing=0", lambda: (0, 0, 0.0)),
            Case("3 steps, pad_id=3, label_smoothing=0.1", lambda: (1, 3, 0.1))]


@single_threaded
def check_train_step(step_fn) -> None:
    """``step_fn(model, src, tgt, optimizer, scheduler, max_norm, pad_id, label_smoothing) -> (loss, grad_norm)``,
    the norm being the gradients' total norm before clipping."""
    __tracebackhide__ = True
    compare_to_reference("train_step", _train_cases(), _train_run(step_fn), _variant(), TRAIN_PITFALLS,
                         atol=1e-5, rtol=1e-4)


# --------------------------------------------------------------------------- greedy_decode

class DecodingModel(nn.Module):
    """An encoder–decoder whose ``decode`` takes the target mask explicitly, as nn.TransformerDecoder does.

    ``encode(src [B, Ss]) -> (memory [B, Ss, D], src_mask [B, 1, 1, Ss])``;
    ``decode(tgt_in [B, St], memory, src_mask, tgt_mask=None) -> logits [B, St, V]`` where ``tgt_mask`` is a
    bool [St, St] or [1, 1, St, St] mask, True = may attend. No ``tgt_mask`` means no mask at all.
    It records how it is used, so a check can say what a decoding loop did.
    """

    def __init__(self, eos_bias: float = 0.0, seed: int = 0, dropout: float = 0.3):
        super().__init__()
        self.inner = _small_model(seed, dropout=dropout)
        with torch.no_grad():
            self.inner.out.bias[2] += eos_bias
            self.inner.out.bias[:2] = -1e4  # never generates PAD or BOS, so outputs with or without BOS compare
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
            if not isinstance(tgt_mask, torch.Tensor) or tgt_mask.dtype != torch.bool or tgt_mask.numel() != st * st:
                got = f"{tgt_mask.dtype} {tuple(tgt_mask.shape)}" if isinstance(tgt_mask, torch.Tensor) else type(tgt_mask).__name__
                raise TypeError(f"tgt_mask must be a bool mask [{st}, {st}] or [1, 1, {st}, {st}] (True = may attend), "
                                f"got {got}")
            keep = tgt_mask.reshape(st, st)
            tril = torch.ones(st, st, dtype=torch.bool, device=keep.device).tril()
            kind = "causal" if torch.equal(keep, tril) else "triu" if torch.equal(keep, tril.T) else \
                "none" if keep.all() else "other"
        self.calls.append({"training": self.training, "grad": torch.is_grad_enabled(), "mask": kind,
                           "length": st})
        return self.inner.decode(tgt_in, memory, src_mask, tgt_mask=keep)

    def forward(self, src, tgt_in):
        memory, src_mask = self.encode(src)
        st = tgt_in.size(1)
        return self.decode(tgt_in, memory, src_mask, torch.ones(st, st, dtype=torch.bool, device=src.device).tril())


def _greedy(model, src, max_len, bos_id, eos_id, pad_id, *, stop="all", position=-1):
    """Reference greedy loop for :class:`DecodingModel`; the keywords produce the wrong variants."""
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            t = out.size(1)
            mask = torch.ones(t, t, dtype=torch.bool, device=src.device).tril()
            nxt = model.decode(out, memory, src_mask, mask)[:, position].argmax(-1)
            nxt = nxt.masked_fill(done, pad_id)
            out = torch.cat([out, nxt[:, None]], 1)
            done |= nxt == eos_id
            if (stop == "all" and done.all()) or (stop == "any" and done.any()):
                break
    return out


def _rows(out, bos_id, eos_id, pad_id):
    """[B, T] -> per row: (tokens up to and including the first EOS, BOS dropped; tokens after it that are not pad)."""
    rows = []
    for r in out.tolist():
        if r and r[0] == bos_id:
            r = r[1:]
        if eos_id in r:
            k = r.index(eos_id)
            rows.append((r[: k + 1], [x for x in r[k + 1:] if x != pad_id]))
        else:
            rows.append((r, []))
    return rows


_DECODE_CASES = [  # (label, eos_bias, batch, max_len, seed)
    ("rows ending at different steps", 0.0, 6, 12, 0),
    ("every row ends early", 0.5, 6, 12, 0),
    ("a batch of one", 0.0, 1, 10, 3),
]


def _decode_inputs(eos_bias, b, seed):
    model = DecodingModel(eos_bias=eos_bias).to(get_device())
    src = torch.randint(3, 13, (b, 5), generator=_gen(seed)).to(get_device())
    return model, src


@single_threaded
def check_greedy_decode(greedy_fn) -> None:
    """``greedy_fn(model, src [B, Ss], max_len, bos_id, eos_id, pad_id) -> [B, T]`` (BOS first, PAD after EOS),
    for a model like :class:`DecodingModel`."""
    __tracebackhide__ = True
    title = "greedy_decode"
    bos, eos, pad = 1, 2, 0
    for label, eos_bias, b, max_len, seed in _DECODE_CASES:
        model, src = _decode_inputs(eos_bias, b, seed)
        model.train()  # as a model is left after training
        want = _rows(_greedy(model, src, max_len, bos, eos, pad), bos, eos, pad)
        want_steps = len(model.calls)
        model.reset()
        model.train()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                out = greedy_fn(model, src, max_len, bos, eos, pad)
            except CheckFailure:
                raise
            except Exception as exc:
                fail(title, f"case {label}: your code raised {type(exc).__name__}: {exc}")
        if not isinstance(out, torch.Tensor) or out.dim() != 2 or out.size(0) != b:
            got = f"shape {list(out.shape)}" if isinstance(out, torch.Tensor) else type(out).__name__
            fail(title, f"case {label}: expected a LongTensor [B={b}, T] of token ids, got {got}")
        calls = model.calls
        if model.encoded_rows > b:
            fail(title, f"case {label}: {model.encoded_rows} source rows were encoded for a batch of {b}. Encode the "
                        "source once before the loop and reuse the memory at every step (calling model(src, tgt) "
                        "at each step re-encodes it).", S_DECODE)
        if any(c["mask"] in ("none", "other") for c in calls if c["length"] > 1):
            fail(title, "this looks like the pitfall 'greedy decoding without the causal mask'. Each step must "
                        "decode with the same causal mask as training (causal_mask / tril, True = may attend): "
                        "without it, earlier positions see later ones inside the decoder, and from the second "
                        "layer on the last position's output is not what the model was trained to produce.",
                 S_DECODE)
        if any(c["mask"] == "triu" for c in calls if c["length"] > 1):
            fail(title, "your target mask is upper triangular (triu): each position may attend only to the "
                        "*future*. The causal mask is lower triangular (tril).", S_DECODE)
        if any(c["training"] for c in calls):
            fail(title, "the model decoded in training mode, so dropout was on and the output is random. "
                        "Call model.eval() before decoding.", S_DECODE)
        if any(c["grad"] for c in calls):
            fail(title, "decoding ran with gradients enabled, building an autograd graph at every step for nothing. "
                        "Wrap the loop in torch.no_grad() (or torch.inference_mode()).", S_DECODE)
        got = _rows(out.long(), bos, eos, pad)
        longest = max(c["length"] for c in calls) if calls else 0
        if any(extra for _, extra in got) or longest > want_steps:
            fail(title, "this looks like the pitfall 'greedy decoding does not stop at EOS'. "
                        f"Every sequence had ended after {want_steps} steps but your loop went on to decode a prefix "
                        f"of {longest} tokens (or wrote tokens after EOS). Track which rows are finished, pad them, "
                        "and break when all are.", S_DECODE)
        if [g for g, _ in got] == [w for w, _ in want]:
            continue
        model.reset()
        if [r for r, _ in _rows(_greedy(model, src, max_len, bos, eos, pad, stop="any"), bos, eos, pad)] == [g for g, _ in got]:
            fail(title, "this looks like the pitfall 'stops the whole batch at the first EOS'. You break as soon as "
                        "any sequence ends; the others are cut short. Stop when every row has produced EOS.",
                 S_DECODE)
        if [r for r, _ in _rows(_greedy(model, src, max_len, bos, eos, pad, position=0), bos, eos, pad)] == [g for g, _ in got]:
            fail(title, "you take the argmax of the *first* position's logits at every step. The next token is "
                        "predicted by the last position: logits[:, -1].", S_DECODE)
        i = next(i for i, (g, w) in enumerate(zip(got, want)) if g[0] != w[0])
        fail(title, f"case {label}: row {i} decoded to {got[i][0]}, expected {want[i][0]} (tokens after BOS up to "
                    "EOS). Take the argmax of the last position's logits at each step and append it.", S_DECODE)
    passed(title, f"matches the reference on {len(_DECODE_CASES)} cases: eval mode, no grad, encodes once, "
                  "causal mask, stops at EOS")


# --------------------------------------------------------------------------- hidden tests


@single_threaded
def check_train_step_by_hand(step_fn) -> None:
    """Hidden test: the learner's step, not the reference's train_step (calling the model is fine)."""
    __tracebackhide__ = True
    model = _small_model(0)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = LambdaLR(opt, lambda s: 1.0)
    src, tgt = _tokens(2, 5, seed=1), _tokens(2, 6, seed=2)
    check_not_delegated("train_step", lambda: step_fn(model, src, tgt, opt, sched, 1.0, 0, 0.0),
                        forbidden=["tformer_ref.train_step", "tformer_ref.fit"])


@single_threaded
def check_greedy_by_hand(greedy_fn) -> None:
    """Hidden test: the learner's loop, not the reference's greedy_decode."""
    __tracebackhide__ = True
    model, src = _decode_inputs(0.5, 2, 0)
    # The model itself is reference code the learner is meant to call: profile only the learner's loop.
    check_not_delegated("greedy_decode", lambda: greedy_fn(model, src, 8, 1, 2, 0),
                        forbidden=["tformer_ref.greedy_decode", "tformer_ref.beam_search"])


seal(__name__)
