"""The fill value of a masked softmax read back: from a probe built for it, or from the
weights the masked keys got next to the allowed ones.

A masked attention replaces the scores of the masked keys by a fill f before the
softmax. :func:`fill_probe` builds inputs (q, k, v, mask) whose scores step through the
levels s = -1, -10, ..., -1e38, each with one allowed key and three masked: the allowed
key keeps all the weight while f is far below s, a quarter at s = f, none above; a last
query with every key masked tells -inf (NaN there) from a finite fill.
:func:`read_fill` reads f, or the two levels it lies between, off the weights returned
on those inputs. :func:`implied_fill` reads, on any inputs, the scores that the masked
keys' weights imply: one constant (a fill) or the true scores shifted (a mask added).

Examples (a fill of -1e4 planted, read back from the probe)::

    >>> q, k, v, mask = fill_probe()
    >>> scores = (q @ k.mT).masked_fill(~mask, -1e4)      # the planted fill
    >>> read_fill(scores.softmax(-1))
    (' Measured in float32, your fill value is -1e+04.', -10000.0)
"""

from __future__ import annotations

import math

import torch

from ...guard.integrity import seal

#: The probe's score levels, -1 down to -1e38 (float32's range ends near -3.4e38).
FILL_LEVELS = tuple(-(10.0**p) for p in range(39))


def fill_probe(device=None):
    """q [1, 1, n + 1, 1] (the levels, then 0), k [1, 1, 4, 1] ones, v [1, 1, 4, 1], a
    keep-mask [1, 1, n + 1, 4]: key 0 allowed for the levels' queries, no key for the
    last one. With Dh = 1 the scores q·kᵀ/√Dh are the levels themselves.

    >>> q, k, v, mask = fill_probe()
    >>> q[0, 0, :3, 0].tolist(), mask[0, 0, 0].tolist(), mask[0, 0, -1].any().item()
    ([-1.0, -10.0, -100.0], [True, False, False, False], False)
    """
    n = len(FILL_LEVELS)
    q = torch.tensor((*FILL_LEVELS, 0.0), device=device).view(1, 1, n + 1, 1)
    k = torch.ones(1, 1, 4, 1, device=device)
    v = torch.arange(4.0, device=device).view(1, 1, 4, 1)
    mask = torch.zeros(1, 1, n + 1, 4, dtype=torch.bool, device=device)
    mask[..., :n, 0] = True
    return q, k, v, mask


def read_fill(weights: torch.Tensor):
    """(sentence, upper bound) for the fill value behind ``weights`` [1, 1, n + 1, 4],
    returned on :func:`fill_probe`'s inputs: the fill is at most the bound; ('', None)
    when weights of another shape say nothing.

    >>> q, k, v, mask = fill_probe()
    >>> read_fill((q @ k.mT).masked_fill(~mask, -math.inf).softmax(-1))
    (' Measured in float32, your fill value is -inf (a query with every key masked
    gets NaN).', -inf)
    >>> read_fill((q @ k.mT).masked_fill(~mask, 0.0).softmax(-1))  # masked with 0
    (' Measured in float32, your fill value is 0.', 0.0)
    """
    n = len(FILL_LEVELS)
    if list(weights.shape) != [1, 1, n + 1, 4]:
        return "", None
    said = " Measured in float32, your fill value is"
    kept = weights[0, 0, :n, 0].double().tolist()
    for i, (level, w) in enumerate(zip(FILL_LEVELS, kept)):
        if not math.isfinite(w) or w > 0.999:
            continue
        if w > 1e-3:
            fill = level + math.log((1 / w - 1) / 3)
            fill = 0.0 if abs(fill) < 1e-4 else fill  # float32's rounding, not a fill
            return f"{said} {fill:.3g}.", fill
        if i == 0:
            return f"{said} above -1.", None
        return (
            f"{said} between {level:.0e} and {FILL_LEVELS[i - 1]:.0e}.",
            FILL_LEVELS[i - 1],
        )
    if torch.isnan(weights[0, 0, n]).any():
        return f"{said} -inf (a query with every key masked gets NaN).", -math.inf
    return (
        (
            f"{said} below -1e+38 (float32's own minimum, or -inf with the NaN rows "
            "repaired)."
        ),
        -math.inf,
    )


def implied_fill(weights: torch.Tensor, scores: torch.Tensor, keep: torch.Tensor):
    """The scores that the masked keys' ``weights`` [..., Sk] imply, next to the allowed
    keys' true ``scores`` (same shape; ``keep`` True = allowed), over the queries with
    keys of both kinds: ((fill, spread), (shift, spread)), the median of the implied
    scores and of their shift from the true scores, each with its max - min. A
    constant fill has a spread of 0 in the first, a mask added to the scores in the
    second.

    >>> s = torch.randn(3, 4, dtype=torch.float64)
    >>> keep = torch.tensor([True, True, False, False]).expand(3, 4)
    >>> w = s.masked_fill(~keep, -2.0).softmax(-1)        # a planted fill of -2
    >>> (fill, spread), _ = implied_fill(w, s, keep)
    >>> round(fill, 6), spread < 1e-9
    (-2.0, True)
    """
    rows = keep.any(-1) & ~keep.all(-1)
    allowed, hidden = keep & rows[..., None], ~keep & rows[..., None]
    log_w = weights.clamp(min=1e-300).log()
    log_z = ((scores - log_w) * allowed).sum(-1, keepdim=True) / allowed.sum(
        -1, keepdim=True
    ).clamp(min=1)
    implied = (log_w + log_z)[hidden]
    shift = implied - scores[hidden]
    return (
        (implied.median().item(), (implied.max() - implied.min()).item()),
        (shift.median().item(), (shift.max() - shift.min()).item()),
    )


seal(__name__)
