"""Shift, loss, Noam schedule, train step and fit loop, against PyTorch and against the paper's formula."""

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader

from tformer_ref.baselines import TorchTransformer
from tformer_ref.training import (
    History,
    fit,
    noam_lambda,
    noam_scheduler,
    sequence_loss,
    shift_targets,
    train_step,
)


def test_shift_is_along_time_for_batch_first():
    tgt = torch.tensor([[1, 5, 6, 2], [1, 7, 2, 0]])
    tgt_in, labels = shift_targets(tgt)
    assert tgt_in.tolist() == [[1, 5, 6], [1, 7, 2]]
    assert labels.tolist() == [[5, 6, 2], [7, 2, 0]]
    with pytest.raises(ValueError, match=r"\[B, St\]"):
        shift_targets(torch.zeros(2, 3, 4, dtype=torch.long))


def test_loss_ignores_padding_and_smooths_labels():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 4, 7, generator=g)
    labels = torch.tensor([[3, 4, 2, 0], [5, 2, 0, 0]])
    keep = labels != 0
    by_hand = -logits.log_softmax(-1).gather(-1, labels[..., None])[..., 0][keep].mean()
    assert torch.allclose(sequence_loss(logits, labels, pad_id=0), by_hand)
    # Changing the logits at padded positions changes nothing.
    other = logits.clone()
    other[~keep] = 100.0
    assert torch.equal(sequence_loss(other, labels), sequence_loss(logits, labels))
    eps = 0.1
    lp = logits.log_softmax(-1)
    smoothed = (
        (1 - eps) * -lp.gather(-1, labels[..., None])[..., 0] - eps * lp.mean(-1)
    )[keep].mean()
    assert torch.allclose(sequence_loss(logits, labels, 0, eps), smoothed, atol=1e-6)
    with pytest.raises(ValueError, match=r"logits \[B, St, V\]"):
        sequence_loss(logits, labels[:, :3])


def test_noam_matches_the_paper_and_never_divides_by_zero():
    d, w = 512, 4000
    paper = lambda n: d**-0.5 * min(n**-0.5, n * w**-1.5)  # n = 1, 2, ...
    assert noam_lambda(0, d, w) == pytest.approx(paper(1)) and noam_lambda(0, d, w) > 0
    assert noam_lambda(w - 1, d, w) == pytest.approx(paper(w))
    assert noam_lambda(w - 1, d, w) == pytest.approx(
        7.0e-4, rel=0.01
    )  # the peak quoted in the paper's setting
    rates = [noam_lambda(s, d, w) for s in range(2 * w)]
    assert max(rates) == rates[w - 1]
    with pytest.raises(ValueError):
        noam_lambda(0, 0, w)


def test_noam_scheduler_sets_the_rate_and_never_steps_the_optimizer():
    p = nn.Parameter(torch.ones(3))
    opt = torch.optim.SGD([p], lr=1.0)
    sched = noam_scheduler(opt, 64, 10)
    seen = [opt.param_groups[0]["lr"]]
    for _ in range(20):
        p.grad = torch.ones(3)
        opt.step()
        sched.step()
        seen.append(opt.param_groups[0]["lr"])
    assert seen == pytest.approx([noam_lambda(s, 64, 10) for s in range(21)])
    before = p.detach().clone()
    sched.step()
    assert torch.equal(p.detach(), before)  # the scheduler alone moves no weight
    with pytest.raises(ValueError, match="lr set to 1.0"):
        noam_scheduler(torch.optim.SGD([p], lr=0.1), 64, 10)


def _tiny(seed=0, dropout=0.0):
    torch.manual_seed(seed)
    return TorchTransformer(
        11, 11, d_model=16, n_heads=8, n_layers=2, d_ff=32, dropout=dropout, max_len=16
    )


def _batch():
    g = torch.Generator().manual_seed(1)
    src = torch.randint(3, 11, (4, 6), generator=g)
    tgt = torch.randint(3, 11, (4, 7), generator=g)
    tgt[:, 0] = 1
    tgt[2, 5:] = 0
    return src, tgt


def test_train_step_clips_after_backward_and_reports_the_norm():
    src, tgt = _batch()
    model, twin = _tiny(), _tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss, norm = train_step(model, src, tgt, opt, max_norm=0.05)
    # The same step written out by hand.
    tgt_in, labels = tgt[:, :-1], tgt[:, 1:]
    want = F.cross_entropy(twin(src, tgt_in).transpose(1, 2), labels, ignore_index=0)
    want.backward()
    grads = [p.grad for p in twin.parameters()]
    want_norm = torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))
    assert loss == pytest.approx(want.item(), rel=1e-5) and norm == pytest.approx(
        want_norm.item(), rel=1e-4
    )
    assert norm > 0.05  # so clipping was active
    with torch.no_grad():
        for p, q in zip(model.parameters(), twin.parameters()):
            assert torch.allclose(p, q - 0.1 * q.grad * 0.05 / want_norm, atol=1e-6)


def test_train_step_without_clipping_still_reports_the_norm():
    src, tgt = _batch()
    model = _tiny()
    _, norm = train_step(
        model, src, tgt, torch.optim.SGD(model.parameters(), lr=0.0), max_norm=None
    )
    assert norm > 0 and math.isfinite(norm)


def test_fit_records_history_and_stops_at_target():
    src, tgt = _batch()
    loader = [(src, tgt)] * 5
    model = _tiny()
    opt = torch.optim.Adam(model.parameters(), lr=1.0)
    calls = []
    h = fit(
        model,
        loader,
        opt,
        noam_scheduler(opt, 16, 4, factor=2.0),
        epochs=3,
        progress=False,
        evaluate=lambda m: calls.append(1) or 0.5,
        eval_every=4,
    )
    assert (
        h.step == list(range(1, 16))
        and len(h.loss) == len(h.lr) == len(h.grad_norm) == len(h.time) == 15
    )
    assert h.loss[-1] < h.loss[0]
    assert h.eval_step == [4, 8, 12, 15] and len(calls) == 4
    assert h.time == sorted(h.time)
    h2 = fit(
        _tiny(),
        loader,
        torch.optim.SGD(_tiny().parameters(), lr=0.0),
        epochs=10,
        progress=False,
        evaluate=lambda m: 1.0,
        eval_every=2,
        target=0.99,
    )
    assert h2.step[-1] == 2 and h2.time_to(0.99) == h2.time[1]
    h3 = fit(
        _tiny(),
        loader,
        torch.optim.SGD(_tiny().parameters(), lr=0.0),
        max_steps=7,
        progress=False,
    )
    assert h3.step[-1] == 7 and History().time_to(0.5) is None


def test_fit_writes_nothing_to_stderr_with_progress_off(capfd):
    src, tgt = _batch()
    model = _tiny()
    fit(
        model,
        [(src, tgt)],
        torch.optim.SGD(model.parameters(), lr=0.01),
        progress=False,
    )
    assert capfd.readouterr().err == ""
