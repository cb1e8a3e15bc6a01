"""A cross-entropy read back from its gradient: the number it divides the token sum
by, its label smoothing, and the label each position was scored against.

The gradient of ``sum(CE_smoothed(logits_i, label_i)) / N`` at one position is
``(softmax(logits) - (1 - e)·onehot(label) - e/V) / N``: two unknowns per position,
``1/N`` and ``e/N``, that a least-squares fit of the two known vectors
``softmax - onehot`` and ``onehot - 1/V`` reads off whatever code the learner wrote.
The fit's residual says whether the loss is a (weighted, smoothed) cross-entropy at
all. Shapes: logits, grad [..., V] float64; labels [...].
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ...guard.integrity import seal


def _fit_two(x1, x2, y):
    """Per row of [..., V]: the a, b of ``y ≈ a·x1 + b·x2`` (least squares, closed
    form) and the residual relative to ``y``."""
    x11, x22, x12 = (x1 * x1).sum(-1), (x2 * x2).sum(-1), (x1 * x2).sum(-1)
    y1, y2 = (y * x1).sum(-1), (y * x2).sum(-1)
    det = x11 * x22 - x12**2
    a, b = (y1 * x22 - y2 * x12) / det, (y2 * x11 - y1 * x12) / det
    rest = y - a[..., None] * x1 - b[..., None] * x2
    return a, b, rest.norm(dim=-1) / y.norm(dim=-1).clamp_min(1e-30)


def cross_entropy_weights(logits, grad, labels):
    """Per position: the weight w, smoothing e and relative residual that fit ``grad``
    as w · (softmax - (1 - e)·onehot(label) - e/V). Labels outside the vocabulary
    (a padding id) are clamped into it.

    Examples::

        >>> logits = torch.randn(2, 3, 7, dtype=torch.float64, requires_grad=True)
        >>> labels = torch.tensor([[1, 2, 3], [4, 5, 6]])
        >>> F.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="sum",
        ...                 label_smoothing=0.2).backward()  # summed: w = 1, not 1/6
        >>> w, e, res = cross_entropy_weights(logits.detach(), logits.grad, labels)
        >>> [round(float(x), 6) for x in (w.mean(), e.mean())], bool(res.max() < 1e-9)
        ([1.0, 0.2], True)
    """
    vocab = logits.size(-1)
    g = grad.double()
    onehot = F.one_hot(labels.clamp(0, vocab - 1), vocab).double()
    u = logits.double().softmax(-1) - onehot
    a, b, residual = _fit_two(u, onehot - 1.0 / vocab, g)
    eps = torch.where(a.abs() > 1e-12, b / a, torch.zeros_like(a))
    return a, eps, residual


def cross_entropy_normaliser(logits, grad, labels):
    """The same equation solved for the normaliser: per position (N, e, relative
    residual) with N · grad ≈ softmax - (1 - e)·onehot(label) - e/V, i.e. the token
    sum divided by N. ``logits``, ``grad`` [n, V] float64, ``labels`` [n].

    Examples::

        >>> logits = torch.randn(5, 7, dtype=torch.float64, requires_grad=True)
        >>> labels = torch.tensor([1, 2, 3, 4, 5])
        >>> (F.cross_entropy(logits, labels, reduction="sum") / 8).backward()
        >>> n, e, res = cross_entropy_normaliser(logits.detach(), logits.grad, labels)
        >>> [round(x, 9) for x in n.tolist()]  # planted: 8 where the mean divides by 5
        [8.0, 8.0, 8.0, 8.0, 8.0]
    """
    v = logits.size(-1)
    onehot = F.one_hot(labels, v).double()
    return _fit_two(grad, 1.0 / v - onehot, logits.softmax(-1) - onehot)


def normaliser_kind(big_n, real, rtol: float = 2e-3) -> str:
    """What a loss's normaliser N [B, t] (read by :func:`cross_entropy_normaliser`)
    divides by at the real positions ``real`` [B, t]: "real tokens" (the mean), "1"
    (a sum), "all positions" (padding counted), "per sequence" (each row's mean, then
    the rows' mean), "constant" (another number) or "uneven".

    Examples::

        >>> real = torch.tensor([[True, True, True], [True, False, False]])
        >>> big_n = torch.tensor([[6.0, 6.0, 6.0], [2.0, 0.0, 0.0]])  # planted: B·len
        >>> normaliser_kind(big_n, real), normaliser_kind(torch.full((2, 3), 4.0), real)
        ('per sequence', 'real tokens')
    """
    count, got = int(real.sum()), big_n[real]
    per_row = (real.size(0) * real.sum(1, keepdim=True)).double().expand_as(big_n)
    for kind, want in (
        ("real tokens", torch.full_like(got, float(count))),
        ("1", torch.ones_like(got)),
        ("all positions", torch.full_like(got, float(real.numel()))),
        ("per sequence", per_row[real].to(got)),
        ("constant", got.mean().expand_as(got)),
    ):
        if torch.allclose(got, want, rtol=rtol):
            return kind
    return "uneven"


def gradient_labels(grad) -> torch.Tensor:
    """[...] the label each position's cross-entropy gradient [..., V] points at: its
    most negative entry (softmax - onehot is negative only there).

    Examples::

        >>> logits = torch.zeros(1, 3, 5, requires_grad=True)
        >>> F.cross_entropy(logits[0], torch.tensor([4, 0, 2])).backward()
        >>> gradient_labels(logits.grad).tolist()
        [[4, 0, 2]]
    """
    return grad.argmin(-1)


def reached(grad) -> torch.Tensor:
    """[...] bool: the positions whose logits got any gradient [..., V].

    Examples::

        >>> logits = torch.zeros(3, 4, requires_grad=True)
        >>> F.cross_entropy(logits, torch.tensor([1, -100, 2])).backward()
        >>> reached(logits.grad).tolist()  # the ignored label read back
        [True, False, True]
    """
    return grad.abs().amax(-1) > 0


seal(__name__)
