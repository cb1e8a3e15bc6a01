"""Reading a softmax back from its output: the axes it sums to 1 over, and the factor
its scores were multiplied by.

Softmax ignores a constant added to a row, so log w = c·s + (a constant per row): a
line per row whose slope is the factor c, whatever code the learner wrote. The tensors
are attention weights [B, H, Sq, Sk]; the axes are named by :data:`AXIS_NAMES`.

The factor is read three ways, because what the check sees differs: :func:`row_scales`
fits it row by row from returned weights (so a divisor that changes with the head or
the query shows); :func:`pooled_divisor` fits one divisor over the entries a mask
allows (masked rows may keep fewer than two weights); :func:`divisor_search` finds it
when only an output computed from the weights is seen (a module that returns no
weights), by searching the divisor that reproduces that output.

Examples (a softmax over the queries, of scores divided by 8)::

    >>> s = torch.randn(2, 3, 4, 5, dtype=torch.float64)
    >>> w = (s / 8).softmax(dim=2)
    >>> axes_name(normalised_over(w, SINGLE_AXES))
    'axis 2 (queries)'
    >>> c, residual = row_scales((s / 8).softmax(-1), s)
    >>> round(1 / c.mean().item(), 6), residual < FIT_RTOL
    (8.0, True)
"""

from __future__ import annotations

import math

import torch

from ...guard.integrity import seal

AXIS_NAMES = ("batch", "heads", "queries", "keys")
# A tensor "sums to 1" within this; float32 rows of a softmax sum to 1 within ~1e-6.
SUM_ATOL = 1e-4
# A linear fit "holds" when its residual is below this fraction of the signal.
FIT_RTOL = 1e-3
SINGLE_AXES = ((3,), (2,), (1,), (0,))
SEVERAL_AXES = ((2, 3), (1, 2, 3), (0, 1, 2, 3))


def axes_name(dims: tuple) -> str:
    """The axes ``dims`` of attention weights, in words.

    >>> axes_name((2,)), axes_name((2, 3))
    ('axis 2 (queries)', 'axes 2, 3 (queries, keys) together')
    """
    names = ", ".join(AXIS_NAMES[d] for d in dims)
    if len(dims) == 1:
        return f"axis {dims[0]} ({names})"
    return f"axes {', '.join(map(str, dims))} ({names}) together"


def normalised_over(w: torch.Tensor, candidates: tuple) -> tuple | None:
    """The dims (one of ``candidates``) over which ``w`` [B, H, Sq, Sk] is non-negative
    and sums to 1, or None.

    >>> w = torch.rand(2, 2, 3, 3).softmax(dim=1)          # over the heads
    >>> normalised_over(w, SINGLE_AXES), normalised_over(w.log(), SINGLE_AXES)
    ((1,), None)
    """
    if (w < -SUM_ATOL).any():
        return None
    for dims in candidates:
        s = w.sum(dims)
        if torch.allclose(s, torch.ones_like(s), atol=SUM_ATOL, rtol=0):
            return dims
    return None


def row_scales(w: torch.Tensor, source: torch.Tensor, dim: int = -1):
    """Fit log w = c·source + (a constant per row) along ``dim``, row by row.

    w, source [B, H, Sq, Sk] -> (c [rows] with NaN where a row has fewer than two usable
    weights, relative residual of the fit over all rows). Softmax is invariant to a
    constant per row, so c is the factor the learner's scores were multiplied by.

    >>> s = torch.randn(1, 2, 3, 4, dtype=torch.float64)
    >>> c, residual = row_scales((s * torch.tensor([1.0, 0.5]).view(1, 2, 1, 1)
    ...                           ).softmax(-1), s)
    >>> [round(x, 6) for x in c[0, :, 0].tolist()], residual < FIT_RTOL  # head 1 halved
    ([1.0, 0.5], True)
    """
    w, s = w.detach().double(), source.detach().double()
    usable = w > 1e-30  # underflowed weights carry no information about the scores
    n = usable.sum(dim, keepdim=True).clamp_min(1)
    zero = torch.zeros((), dtype=w.dtype, device=w.device)

    def centre(x):
        x = torch.where(usable, x, zero)
        return torch.where(usable, x - x.sum(dim, keepdim=True) / n, zero)

    y, x = centre(torch.where(usable, w, w.new_ones(())).log()), centre(s)
    xx, xy = (x * x).sum(dim), (x * y).sum(dim)
    ok = xx > 1e-12
    c = torch.where(ok, xy / xx.clamp_min(1e-300), torch.full_like(xx, float("nan")))
    fitted = torch.where(ok.unsqueeze(dim), c.nan_to_num().unsqueeze(dim) * x, zero)
    residual = (y - fitted).norm() / (y.norm() + 1e-12)
    return c, residual.item()


def softmax_source(w: torch.Tensor, sources):
    """(name, c) for the ``sources`` entry (name, scores) whose c·scores ``w`` is the
    softmax of over the last axis (c per row, :func:`row_scales`; the best fit), or
    None when none fits.

    >>> s, t = torch.randn(2, 2, 1, 3, 4, dtype=torch.float64)
    >>> name, c = softmax_source((t / 2).softmax(-1), [("s", s), ("t", t)])
    >>> name, round(c.mean().item(), 6)                     # t, divided by 2
    ('t', 0.5)
    """
    fits = [(name, *row_scales(w, scores)) for name, scores in sources]
    name, c, residual = min(fits, key=lambda f: f[2])
    if residual > FIT_RTOL or torch.isnan(c).all():
        return None
    return name, c


def row_centred(x: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
    """``x`` minus its mean over the last axis, both taken only ``where`` True (0
    elsewhere).

    >>> x, where = torch.tensor([[1.0, 3.0, 9.0]]), torch.tensor([[True, True, False]])
    >>> row_centred(x, where)
    tensor([[-1.,  1.,  0.]])
    """
    n = where.sum(-1, keepdim=True).clamp(min=1)
    mean = (x * where).sum(-1, keepdim=True) / n
    return (x - mean) * where


def pooled_divisor(w: torch.Tensor, scores: torch.Tensor, where: torch.Tensor):
    """(d, worst residual): weights ``w`` [..., Sk] at ``where`` (and nonzero) fitted
    as softmax(scores / d) up to a constant per row, one d for all rows; None when
    nothing can be fitted (no row with two usable weights).

    >>> s = torch.randn(2, 3, 4, 5, dtype=torch.float64)
    >>> keep = torch.ones(4, 5, dtype=torch.bool).tril()      # a causal mask
    >>> w = (s / 8).masked_fill(~keep, -math.inf).softmax(-1)
    >>> d, residual = pooled_divisor(w, s, keep.expand(s.shape))
    >>> round(d, 6), residual < 1e-9
    (8.0, True)
    """
    where = where & (w > 0)
    log_w = w.clamp(min=1e-300).log()
    dd, dl = row_centred(scores, where), row_centred(log_w, where)
    denominator = (dd * dl).sum()
    if (where.sum(-1) >= 2).sum() == 0 or denominator.abs() < 1e-12:
        return None
    d = ((dd * dd).sum() / denominator).item()
    return d, (dl - dd / d).abs().max().item()


def divisor_search(outputs_at, target: torch.Tensor, refit=None) -> tuple:
    """(d, largest difference, factor): the divisor of the scores for which
    ``outputs_at(divisors [G])`` [G, *target.shape] comes closest to ``target``, by a
    log-spaced search from 2⁻⁸ to 2¹⁴ refined five times. ``refit(outputs)`` -> (factor
    [G], outputs) adjusts each candidate first (a factor on the weights); factor is 1
    without it.

    >>> x = torch.randn(3, 4, dtype=torch.float64)
    >>> def outputs_at(d):                     # an output made of softmax(x / d)
    ...     return (x / d.view(-1, 1, 1)).softmax(-1) @ x.T
    >>> d, err, _ = divisor_search(outputs_at, outputs_at(torch.tensor([5.0]))[0])
    >>> round(d, 3), err < 1e-6
    (5.0, True)
    """
    got = target.detach().double()
    grid = torch.linspace(-8.0, 14.0, 89, dtype=torch.float64)  # log2, step 0.25
    for _ in range(5):
        outs = outputs_at(2.0**grid).double()
        c = torch.ones(len(grid), dtype=torch.float64, device=outs.device)
        if refit is not None:
            c, outs = refit(outs)
        err = (outs - got).abs().flatten(1).amax(1)
        i = int(err.argmin())
        best, best_err, step = grid[i], float(err[i]), float(grid[1] - grid[0])
        factor = float(c[i])
        grid = torch.linspace(
            float(best) - step, float(best) + step, 21, dtype=torch.float64
        )
    return 2.0 ** float(best), best_err, factor


def key_shift_divisors(w: torch.Tensor, scores: torch.Tensor):
    """The divisors d [B·H] (one per [Sq, Sk] map) when log w [B, H, Sq, Sk] =
    scores / d + (a term per row) + (a term per key, the same for every query); None
    when w has a zero or no such d fits. A softmax that saw a per-key shift (a max
    over the queries subtracted) reads so.

    >>> s = torch.randn(1, 2, 3, 4, dtype=torch.float64)
    >>> w = (s / 2 - s.amax(-2, keepdim=True)).softmax(-1)
    >>> [round(d, 6) for d in key_shift_divisors(w, s).tolist()]
    [2.0, 2.0]
    >>> key_shift_divisors((s * s).softmax(-1), s) is None    # not linear in s
    True
    """
    if (w <= 1e-30).any():
        return None
    y, x = double_centred(w.log()), double_centred(scores)
    c = (x * y).sum((-2, -1), keepdim=True) / (x * x).sum((-2, -1), keepdim=True)
    if (y - c * x).norm() > FIT_RTOL * y.norm():
        return None
    return 1 / c.flatten()


def clamp_bound(w: torch.Tensor, scores: torch.Tensor) -> float | None:
    """The c, on a grid of halves up to 200, for which w is the softmax of the scores
    clamped at c (the low end of a two-sided clamp does not show: the weights of
    scores far below a row's maximum are 0 either way); None when there is none.

    >>> s = torch.tensor([[3.0, 1.0, 0.0]])
    >>> clamp_bound(s.clamp(max=2.5).softmax(-1), s), clamp_bound(s.softmax(-1), s)
    (2.5, 3.0)
    >>> clamp_bound((2 * s).softmax(-1), s) is None         # no clamp: another scale
    True
    """
    for c in torch.arange(0.5, 200.5, 0.5).tolist():
        if torch.allclose(w, scores.clamp(max=c).softmax(-1), atol=1e-5, rtol=1e-4):
            return c
    return None


def varying_axes(c: torch.Tensor) -> list:
    """The names of the axes of per-row factors c [B, H, Sq] along which they change.

    >>> c = torch.ones(2, 3, 4); c[:, :, 1] = 2.0           # one query differs
    >>> varying_axes(c)
    ['queries']
    """
    out = []
    for dim in range(c.dim()):
        spread = c - c.nanmean(dim, keepdim=True)
        if spread.nan_to_num().abs().max() > FIT_RTOL * c.nan_to_num().abs().max():
            out.append(AXIS_NAMES[dim])
    return out


def double_centred(t: torch.Tensor) -> torch.Tensor:
    """t [..., Sq, Sk] minus its row means and column means (plus the grand mean): what
    is left of log-weights once a term per query and a term per key are removed.

    >>> t = torch.arange(3.0).view(3, 1) + torch.arange(4.0)   # row term + column term
    >>> double_centred(t).abs().max().item()
    0.0
    """
    return (
        t
        - t.mean(-1, keepdim=True)
        - t.mean(-2, keepdim=True)
        + t.mean((-2, -1), keepdim=True)
    )


def overflowed(w: torch.Tensor, scores: torch.Tensor) -> bool:
    """True when the rows of weights ``w`` [..., Sk] that are not finite are exactly
    the rows of ``scores`` whose largest entry is above log(the dtype's largest
    number): where exp(score) is inf, a softmax written without subtracting the row's
    maximum divides inf by inf.

    >>> s = torch.tensor([[100.0, 0.0], [3.0, 1.0]])        # float32: exp(100) = inf
    >>> e = s.exp()
    >>> overflowed(e / e.sum(-1, keepdim=True), s), overflowed(s.softmax(-1), s)
    (True, False)
    """
    bad = ~torch.isfinite(w.detach()).all(-1)
    limit = math.log(torch.finfo(scores.dtype).max)
    return bool(bad.any()) and torch.equal(bad, scores.detach().amax(-1) > limit)


def mixing(out: torch.Tensor, rows: torch.Tensor):
    """Solve out [B, H, Sq, Dh] = W @ rows [B, H, S, Dh] for W [B, H, Sq, S]; None when
    out is not a combination of the rows (needs S <= Dh: the rows independent).

    >>> v = torch.randn(1, 1, 3, 5, dtype=torch.float64)
    >>> w = torch.rand(1, 1, 2, 3, dtype=torch.float64)
    >>> torch.allclose(mixing(w @ v, v), w), mixing(torch.randn(1, 1, 2, 5), v)
    (True, None)
    """
    out64, rows64 = out.detach().double(), rows.detach().double()
    mix = out64 @ torch.linalg.pinv(rows64)
    if (mix @ rows64 - out64).norm() > FIT_RTOL * out64.norm():
        return None
    return mix


seal(__name__)
