"""A cross-entropy read back from its gradient (tformer_grading/checks/measure/losses.py).

Bug this guards against: sequence_loss and train_step read the same equation, one by a
closed form and one by lstsq (2026-12-05 aesthetics review, family F5).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tformer_grading.checks.measure.losses import (
    cross_entropy_normaliser,
    cross_entropy_weights,
    gradient_labels,
    normaliser_kind,
    reached,
)


def _gradient(reduce, eps=0.0, pad=None):
    torch.manual_seed(0)
    logits = torch.randn(2, 4, 6, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(1, 6, (2, 4))
    if pad is not None:
        labels[1, 2:] = pad
    losses = F.cross_entropy(
        logits.flatten(0, 1),
        labels.flatten(),
        reduction="none",
        label_smoothing=eps,
        ignore_index=-100 if pad is None else pad,
    )
    reduce(losses).backward()
    return logits.detach(), logits.grad, labels


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_both_readings_agree_on_the_mean_and_its_smoothing(eps):
    logits, grad, labels = _gradient(lambda l: l.mean(), eps)
    w, e, res = cross_entropy_weights(logits, grad, labels)
    n, e2, res2 = cross_entropy_normaliser(
        logits.flatten(0, 1), grad.flatten(0, 1), labels.flatten()
    )
    assert torch.allclose(w, torch.full_like(w, 1 / 8))
    assert torch.allclose(n, torch.full_like(n, 8.0))
    assert torch.allclose(e.flatten(), e2) and torch.allclose(
        e2, torch.full_like(e2, eps)
    )
    assert res.max() < 1e-9 and res2.max() < 1e-9


def test_a_squared_error_is_no_cross_entropy():
    torch.manual_seed(1)
    logits = torch.randn(5, 6, dtype=torch.float64, requires_grad=True)
    labels = torch.arange(5)
    (logits.softmax(-1) - F.one_hot(labels, 6)).pow(2).sum().backward()
    _, _, res = cross_entropy_normaliser(logits.detach(), logits.grad, labels)
    assert res.min() > 1e-3


@pytest.mark.parametrize(
    ("reduce", "kind"),
    [
        (lambda l: l.sum() / 6, "real tokens"),
        (lambda l: l.sum(), "1"),
        (lambda l: l.sum() / 8, "all positions"),
        (lambda l: l.sum() / 3, "constant"),
    ],
)
def test_the_normaliser_is_named(reduce, kind):
    logits, grad, labels = _gradient(reduce, pad=0)
    real = labels != 0
    n, _, _ = cross_entropy_normaliser(logits[real], grad[real], labels[real])
    big_n = torch.zeros(real.shape, dtype=torch.float64)
    big_n[real] = n
    assert normaliser_kind(big_n, real) == kind


def test_the_labels_and_reached_positions_are_read():
    _logits, grad, labels = _gradient(lambda l: l.sum(), pad=0)
    hit = reached(grad)
    assert torch.equal(hit, labels != 0)
    assert torch.equal(gradient_labels(grad)[hit], labels[hit])
