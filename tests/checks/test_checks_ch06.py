"""The chapter 6 checks, tested with banks of wrong implementations (each rejected with its named
diagnosis) and right ones written differently (each accepted). Each wrong one says what bug it is."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch.optim.lr_scheduler import LambdaLR

from tformer_ref import training
from tformer_grading.checks import CheckFailure, ch06
from tformer_ref.masks import causal_mask

# --------------------------------------------------------------------------- shift_targets

RIGHT_SHIFT = [
    training.shift_targets,
    lambda t: (t[..., :-1], t[..., 1:]),
    lambda t: (t.narrow(1, 0, t.size(1) - 1), t.narrow(1, 1, t.size(1) - 1)),
    lambda t: tuple(x.transpose(0, 1) for x in (t.T[:-1], t.T[1:])),  # slices sequence-first after transposing
]


@pytest.mark.parametrize("fn", RIGHT_SHIFT)
def test_shift_accepts_right_implementations(fn, capsys):
    ch06.check_shift_targets(fn)
    assert "✓ shift_targets" in capsys.readouterr().out


@pytest.mark.parametrize("fn,diagnosis", [
    (lambda t: (t[:-1, :], t[1:, :]), "sequence-first slicing on batch-first data"),  # the seed's slices
    (lambda t: (t[:, 1:], t[:, :-1]), "targets shifted the wrong way"),
    (lambda t: (t[:, :-1], t[:, :-1]), "labels not shifted"),
    (lambda t: (t, t), "no shift at all"),
    (lambda t: (t[:, :-2], t[:, 2:]), "matches none of the known pitfalls"),
    (lambda t: t[:, :-1], "must return a pair"),
])
def test_shift_rejects_wrong_implementations(fn, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch06.check_shift_targets(fn)


def test_shift_failure_points_to_the_lesson():
    with pytest.raises(CheckFailure) as info:
        ch06.check_shift_targets(lambda t: (t[:-1], t[1:]))
    assert "§6.2 'Teacher forcing and the shift' in book/ch06_training/lesson.ipynb" in str(info.value)


# --------------------------------------------------------------------------- sequence_loss

def loss_masked_by_hand(logits, labels, pad_id, eps):
    """Smoothed cross-entropy written out: (1-eps)·NLL + eps·mean over the vocabulary of -log p."""
    logp = logits.log_softmax(-1)
    nll = -logp.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    per_token = (1 - eps) * nll - eps * logp.mean(-1)
    keep = labels != pad_id
    return per_token[keep].sum() / keep.sum()


def loss_transposed(logits, labels, pad_id, eps):
    return F.cross_entropy(logits.transpose(1, 2), labels, ignore_index=pad_id, label_smoothing=eps)


def loss_module(logits, labels, pad_id, eps):
    crit = torch.nn.CrossEntropyLoss(ignore_index=pad_id, label_smoothing=eps)
    return crit(logits.view(-1, logits.shape[-1]), labels.flatten())


@pytest.mark.parametrize("fn", [training.sequence_loss, loss_masked_by_hand, loss_transposed, loss_module])
def test_loss_accepts_right_implementations(fn, capsys):
    ch06.check_sequence_loss(fn)
    assert "✓ sequence_loss" in capsys.readouterr().out


def loss_counts_padding(logits, labels, pad_id, eps):  # no ignore_index
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), label_smoothing=eps)


def loss_divides_by_everything(logits, labels, pad_id, eps):  # pads zeroed in the sum, still in the count
    per = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="none", label_smoothing=eps)
    return (per * (labels.flatten() != pad_id)).mean()


def loss_hard_coded_pad(logits, labels, pad_id, eps):  # the seed's "x != 0"
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=0, label_smoothing=eps)


def loss_no_smoothing(logits, labels, pad_id, eps):
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=pad_id)


def loss_summed(logits, labels, pad_id, eps):
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=pad_id, label_smoothing=eps,
                           reduction="sum")


def loss_item(logits, labels, pad_id, eps):  # a float, detached from the graph
    return torch.tensor(training.sequence_loss(logits, labels, pad_id, eps).item())


def loss_wrong_axis(logits, labels, pad_id, eps):  # logits [B, St, V] given as if [N, C, d]: shape error
    return F.cross_entropy(logits, labels, ignore_index=pad_id)


@pytest.mark.parametrize("fn,diagnosis", [
    (loss_counts_padding, "padding counted in the loss"),
    (lambda lg, lb, p, e: F.cross_entropy(lg.flatten(0, 1), lb.flatten()), "padding counted in the loss and no label smoothing"),
    (loss_divides_by_everything, "padding counted in the mean"),
    (loss_hard_coded_pad, "pad id hard-coded to 0"),
    (loss_no_smoothing, "label smoothing ignored"),
    (loss_summed, "summed, not averaged"),
    (loss_item, "gradients can flow back"),
    (loss_wrong_axis, "your code raised"),
])
def test_loss_rejects_wrong_implementations(fn, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch06.check_sequence_loss(fn)


# --------------------------------------------------------------------------- noam_lambda

def noam_numpy(step, d_model, warmup):
    import numpy as np
    n = np.float64(step + 1)
    return float(np.minimum(n ** -0.5, n / warmup ** 1.5) / np.sqrt(d_model))


def noam_branches(step, d_model, warmup):
    n = step + 1
    rate = n * warmup ** -1.5 if n < warmup else n ** -0.5
    return rate / math.sqrt(d_model)


@pytest.mark.parametrize("fn", [training.noam_lambda, noam_numpy, noam_branches])
def test_noam_accepts_right_implementations(fn, capsys):
    ch06.check_noam_lambda(fn)
    assert "✓ noam_lambda" in capsys.readouterr().out


def noam_seed(step, d_model, warmup):  # the seed's formula with LambdaLR's 0-based step
    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


def noam_numpy_inf(step, d_model, warmup):  # numpy: 0 ** -0.5 is inf (with a warning), not an exception
    import numpy as np
    n = np.float64(step)
    return float(d_model ** -0.5 * np.minimum(n ** -0.5, n * warmup ** -1.5))


@pytest.mark.parametrize("fn,diagnosis", [
    (noam_seed, "divides by zero at step 0"),
    (noam_numpy_inf, "off by one"),  # min(inf, 0) = 0: the first update gets rate 0
    (lambda s, d, w: d ** -0.5 * min(max(s, 1) ** -0.5, max(s, 1) * w ** -1.5), "off by one"),
    (lambda s, d, w: 0.0 if s == 0 else d ** -0.5 * min(s ** -0.5, s * w ** -1.5), "off by one"),
    (lambda s, d, w: d ** -0.5 * min((s + 2) ** -0.5, (s + 2) * w ** -1.5), "off by one"),
    (lambda s, d, w: d ** -0.5 * min((s + 1) ** -0.5, (s + 1) * w ** -0.5), "warm-up exponent wrong"),
    (lambda s, d, w: min((s + 1) ** -0.5, (s + 1) * w ** -1.5), r"missing the d_model\^-0.5 factor"),
    (lambda s, d, w: d ** -0.5 * max((s + 1) ** -0.5, (s + 1) * w ** -1.5), "max instead of min"),
    (lambda s, d, w: 1e-3, "matches none of the known pitfalls"),
])
def test_noam_rejects_wrong_implementations(fn, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch06.check_noam_lambda(fn)


# --------------------------------------------------------------------------- make_scheduler

class NoamByHand:
    """A scheduler class that only sets the rate (right, without LambdaLR)."""

    def __init__(self, optimizer, d_model, warmup):
        self.opt, self.d, self.w, self.n = optimizer, d_model, warmup, 0
        self._set()

    def _set(self):
        self.n += 1
        for g in self.opt.param_groups:
            g["lr"] = self.d ** -0.5 * min(self.n ** -0.5, self.n * self.w ** -1.5)

    def step(self):
        self._set()


class SeedAdamWarmup:
    """The seed's AdamWarmup: sets the rate, then steps the optimizer itself."""

    def __init__(self, optimizer, d_model, warmup):
        self.optimizer, self.model_size, self.warmup_steps, self.current_step = optimizer, d_model, warmup, 0

    def step(self):
        self.current_step += 1
        lr = self.model_size ** -0.5 * min(self.current_step ** -0.5, self.current_step * self.warmup_steps ** -1.5)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.step()


class LateNoam(NoamByHand):
    """Sets the rate only in step(): the first update runs at the optimizer's initial lr."""

    def __init__(self, optimizer, d_model, warmup):
        self.opt, self.d, self.w, self.n = optimizer, d_model, warmup, 0


@pytest.mark.parametrize("make", [
    lambda o, d, w: training.noam_scheduler(o, d, w),
    lambda o, d, w: LambdaLR(o, lambda s: training.noam_lambda(s, d, w)),
    lambda o, d, w: LambdaLR(o, lr_lambda=[lambda s: (d ** -0.5) * min((s + 1) ** -0.5, (s + 1) * w ** -1.5)]),
    NoamByHand,
])
def test_scheduler_accepts_right_implementations(make, capsys):
    ch06.check_noam_scheduler(make)
    assert "✓ make_scheduler" in capsys.readouterr().out


@pytest.mark.parametrize("make,diagnosis", [
    (SeedAdamWarmup, "scheduler steps the optimizer"),
    (LateNoam, "off by one"),
    (lambda o, d, w: LambdaLR(o, lambda s: training.noam_lambda(s + 1, d, w)), "off by one"),
    (lambda o, d, w: LambdaLR(o, lambda s: d ** -0.5 * min(s ** -0.5, s * w ** -1.5)), "raised ZeroDivisionError"),
    (lambda o, d, w: LambdaLR(o, lambda s: 0.5), "expected"),
    (lambda o, d, w: None, "step\\(\\) method"),
])
def test_scheduler_rejects_wrong_implementations(make, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch06.check_noam_scheduler(make)


# --------------------------------------------------------------------------- train_step

def step_right_functional(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    """Right, written differently: zero_grad without set_to_none, loss on transposed logits, norm by hand."""
    opt.zero_grad(set_to_none=False)
    logits = model(src, tgt[:, :-1])
    loss = F.cross_entropy(logits.permute(0, 2, 1), tgt[:, 1:], ignore_index=pad_id, label_smoothing=eps)
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    norm = torch.sqrt(sum((g.double() ** 2).sum() for g in grads))
    scale = min(1.0, max_norm / (float(norm) + 1e-6))
    for g in grads:
        g.mul_(scale)
    opt.step()
    sched.step()
    return float(loss), float(norm)


def make_step(order="right", zero=True, loss_fn=training.sequence_loss, shift=training.shift_targets):
    def step(model, src, tgt, opt, sched, max_norm, pad_id, eps):
        if zero:
            opt.zero_grad()
        norm = 0.0
        if order == "clip_before_zero":
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            opt.zero_grad()
        tgt_in, labels = shift(tgt)
        loss = loss_fn(model(src, tgt_in), labels, pad_id, eps)
        if order == "clip_before_backward":
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        loss.backward()
        if order == "right":
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        if order == "sched_first":
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            sched.step()
        opt.step()
        if order == "clip_after_step":
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        if order != "sched_first" and order != "no_sched":
            sched.step()
        if order == "no_sched":
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf"))
        return loss.item(), norm
    return step


@pytest.mark.parametrize("fn", [training.train_step, step_right_functional, make_step()])
def test_train_step_accepts_right_implementations(fn, capsys):
    ch06.check_train_step(fn)
    assert "✓ train_step" in capsys.readouterr().out


def step_no_sched(model, src, tgt, opt, sched, max_norm, pad_id, eps):  # forgot scheduler.step()
    opt.zero_grad()
    tgt_in, labels = training.shift_targets(tgt)
    loss = training.sequence_loss(model(src, tgt_in), labels, pad_id, eps)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    return loss.item(), norm.item()


@pytest.mark.parametrize("fn,diagnosis", [
    (make_step("clip_before_backward"), "clipping before backward"),
    (make_step("clip_before_zero"), "clipping before backward"),
    (make_step("clip_after_step"), "clipping after the step"),
    (make_step(zero=False), "gradients never zeroed"),
    (step_no_sched, "scheduler not stepped"),
    (make_step("sched_first"), "scheduler stepped before the optimizer"),
    (make_step(loss_fn=loss_counts_padding), "padding counted in the loss"),
    (make_step(shift=lambda t: (t[:, 1:], t[:, :-1])), "targets shifted the wrong way"),
    (lambda *a: training.train_step(*a)[0], r"must return \(loss, grad_norm\)"),
])
def test_train_step_rejects_wrong_implementations(fn, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch06.check_train_step(fn)


def test_train_step_by_hand():
    ch06.check_train_step_by_hand(make_step())
    with pytest.raises(CheckFailure, match="calls tformer_ref.train_step"):
        ch06.check_train_step_by_hand(training.train_step)


# --------------------------------------------------------------------------- greedy_decode

def make_greedy(mask="causal", eval_mode=True, no_grad=True, stop="all", encode_each_step=False, position=-1,
                pad_after=True):
    def greedy(model, src, max_len, bos_id, eos_id, pad_id):
        if eval_mode:
            model.eval()
        ctx = torch.no_grad() if no_grad else torch.enable_grad()
        with ctx:
            memory, src_mask = model.encode(src)
            out = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
            done = torch.zeros(src.size(0), dtype=torch.bool)
            for _ in range(max_len):
                t = out.size(1)
                m = {"causal": causal_mask(t), "none": None, "triu": torch.ones(t, t, dtype=torch.bool).triu()}[mask]
                if encode_each_step:
                    memory, src_mask = model.encode(src)
                nxt = model.decode(out, memory, src_mask, m)[:, position].argmax(-1)
                if pad_after:
                    nxt = torch.where(done, torch.full_like(nxt, pad_id), nxt)
                out = torch.cat([out, nxt[:, None]], dim=1)
                done = done | (nxt == eos_id)
                if stop == "all" and done.all():
                    break
                if stop == "any" and done.any():
                    break
        return out
    return greedy


def greedy_per_row(model, src, max_len, bos_id, eos_id, pad_id):
    """Right, written differently: one sequence at a time, returned without BOS, padded to a common width."""
    model.eval()
    rows = []
    with torch.inference_mode():
        for i in range(src.size(0)):
            memory, src_mask = model.encode(src[i:i + 1])
            ys = [bos_id]
            for _ in range(max_len):
                n = len(ys)
                logits = model.decode(torch.tensor([ys]), memory, src_mask, torch.tril(torch.ones(n, n)).bool()[None, None])
                ys.append(int(logits[0, -1].argmax()))
                if ys[-1] == eos_id:
                    break
            rows.append(ys[1:])
    width = max(len(r) for r in rows)
    return torch.tensor([r + [pad_id] * (width - len(r)) for r in rows])


@pytest.mark.parametrize("fn", [make_greedy(), greedy_per_row])
def test_greedy_accepts_right_implementations(fn, capsys):
    ch06.check_greedy_decode(fn)
    ch06.check_greedy_by_hand(fn)
    assert capsys.readouterr().out.count("✓ greedy_decode") == 2


@pytest.mark.parametrize("fn,diagnosis", [
    (make_greedy(mask="none"), "greedy decoding without the causal mask"),
    (make_greedy(mask="triu"), "upper triangular"),
    (make_greedy(stop="never"), "does not stop at EOS"),
    (make_greedy(stop="never", pad_after=False), "does not stop at EOS"),
    (make_greedy(stop="any"), "stops the whole batch at the first EOS"),
    (make_greedy(eval_mode=False), "training mode"),
    (make_greedy(no_grad=False), "gradients enabled"),
    (make_greedy(encode_each_step=True), "encoded"),
    (make_greedy(position=0), "first\\* position"),
    (lambda *a: None, "expected a LongTensor"),
])
def test_greedy_rejects_wrong_implementations(fn, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch06.check_greedy_decode(fn)


def test_greedy_by_hand_rejects_the_reference():
    from tformer_ref.decoding import greedy_decode

    def delegating(model, src, max_len, bos_id, eos_id, pad_id):
        return greedy_decode(model, src, max_len, bos_id, eos_id, pad_id)

    with pytest.raises(CheckFailure, match="calls tformer_ref.greedy_decode"):
        ch06.check_greedy_by_hand(delegating)


def test_checks_write_nothing_to_stderr(capfd):
    ch06.check_train_step(training.train_step)
    ch06.check_noam_scheduler(training.noam_scheduler)
    for fn in (make_step("sched_first"), make_step("clip_after_step")):
        with pytest.raises(CheckFailure):
            ch06.check_train_step(fn)
    with pytest.raises(CheckFailure):
        ch06.check_greedy_decode(make_greedy(no_grad=False))
    assert capfd.readouterr().err == ""
