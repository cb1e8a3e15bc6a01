"""The functional multi-head attention of chapter 1 and its *readings*: the reference
with one part read differently (the softmax axis, the head layout, key and value
swapped, a fixed number of heads), the divisor of its scores measured, not assumed.
``multi_head_attention`` lists the readings it names; the attention bug hunt reads the
seed's einsum with the same machinery.

The weights a case hands in are w = {"q": (weight, bias), "k": ..., "v": ..., "o":
...}: the same numbers are loaded into the learner's module (``projections``), so its
output can be compared with :func:`reference` and its readings.

Examples (a reading with the softmax over the queries, its divisor read back)::

    >>> g = torch.Generator().manual_seed(0)
    >>> w = {n: (torch.randn(8, 8, generator=g, dtype=torch.float64) / 3,
    ...          torch.zeros(8, dtype=torch.float64)) for n in "qkvo"}
    >>> x = torch.randn(1, 3, 8, generator=g, dtype=torch.float64)
    >>> axis = Reading("over the queries", None, axis=-2)
    >>> got = reading_outputs(axis, (w, 2, x, x, x), torch.tensor([4.0]))[0]
    >>> run = Run("a case", (x, x, x), got, None, (w, 2, x, x, x), None)
    >>> d, err, _ = fit_divisor(axis, run)
    >>> round(d, 4), close(run, err), scale_name([run], [d])
    (4.0, True, '; that is d_head or 2·√d_head, the same number at these sizes')
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from tformer_ref.heads import merge_heads, split_heads

from ...guard.integrity import seal
from ..diagnosis import Diagnosis
from ..measure.fit import scales_about
from ..measure.formulas import names_of
from ..measure.softmax import divisor_search
from .stages import Run


def project(w, xq, xk, xv):
    """The query, key and value projections [B, S, D], before the split into heads."""
    return F.linear(xq, *w["q"]), F.linear(xk, *w["k"]), F.linear(xv, *w["v"])


def attend(q, k, v):
    """softmax(q kᵀ / √Dh) v on heads [B, H, S, Dh]."""
    return weights_of(q, k) @ v


def weights_of(q, k):
    """softmax(q kᵀ / √Dh) on heads [B, H, S, Dh]: the weights [B, H, Sq, Sk]."""
    return (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(dim=-1)


def reference_weights(w, h, xq, xk, xv):
    """The reference's attention weights [B, H, Sq, Sk] on these arguments."""
    q, k, _ = (split_heads(t, h) for t in project(w, xq, xk, xv))
    return weights_of(q, k)


def reference(w, h, xq, xk, xv):
    q, k, v = (split_heads(t, h) for t in project(w, xq, xk, xv))
    return F.linear(merge_heads(attend(q, k, v)), *w["o"])


def seed_heads(t, h):
    """The seed's heads: [B, S, D] viewed as [B, S, H, Dh], the head axis not moved."""
    b, s, d = t.shape
    return t.reshape(b, s, h, d // h)


@dataclass(frozen=True)
class Reading:
    """The reference with one part read differently (a measurement model, not a
    pitfall): ``finding`` says what that part of the learner's code does."""

    finding: str
    diagnosis: Diagnosis | None
    split: Callable = split_heads
    merge: Callable = merge_heads
    axis: int = -1
    swap_kv: bool = False
    heads: int | None = None  # a fixed number of heads, whatever n_heads is
    causal: bool = False
    rescaled: bool = False  # the weights times a measured factor after the softmax


def reading_outputs(reading: Reading, ref_args: tuple, divisors: torch.Tensor):
    """The reading's outputs [G, B, Sq, D], one per divisor of the scores [G]."""
    w, h, xq, xk, xv = ref_args
    if reading.swap_kv:
        w, xk, xv = {**w, "k": w["v"], "v": w["k"]}, xv, xk
    q, k, v = (reading.split(t, reading.heads or h) for t in project(w, xq, xk, xv))
    raw = q @ k.transpose(-2, -1)
    if reading.causal:
        causal = torch.ones(raw.shape[-2:], dtype=torch.bool, device=raw.device).tril()
        raw = raw.masked_fill(~causal, float("-inf"))
    weights = (raw / divisors.to(raw).view(-1, 1, 1, 1, 1)).softmax(dim=reading.axis)
    merged = reading.merge((weights @ v).flatten(0, 1))
    merged = merged.unflatten(0, (len(divisors), -1))
    return F.linear(merged, *w["o"])


def fit_divisor(reading: Reading, r: Run) -> tuple:
    """(divisor, largest difference, weight factor): the divisor of the scores that
    brings the reading closest to the learner's output (``measure.softmax``'s search;
    and the factor on the weights, for a rescaled reading)."""
    got = r.got.detach().double()
    bias = r.ref_args[0]["o"][1].double()

    def outputs_at(divisors):
        return reading_outputs(reading, r.ref_args, divisors)

    def refit(outs):
        return scales_about(outs, got, bias)

    return divisor_search(outputs_at, got, refit if reading.rescaled else None)


def close(r: Run, err: float) -> bool:
    return err <= 2e-4 + 2e-4 * float(r.got.detach().abs().max())


def d_h(r: Run) -> tuple:
    return r.args[0].size(-1), r.ref_args[1]


def sizes(r: Run) -> dict:
    """The named sizes of a case (``measure.formulas`` reads divisors in them)."""
    return {
        "D": r.args[0].size(-1),
        "H": r.ref_args[1],
        "Sq": r.args[0].size(1),
        "Sk": r.args[1].size(1),
    }


# What the scores may have been divided by, named as the lesson names the sizes.
SCALE_NAMES = (
    ("√d_head", lambda s: math.sqrt(s["D"] / s["H"])),
    ("√d_model", lambda s: math.sqrt(s["D"])),
    ("d_head", lambda s: s["D"] / s["H"]),
    ("d_model", lambda s: float(s["D"])),
    ("1 (no scaling)", lambda s: 1.0),
    ("√n_heads", lambda s: math.sqrt(s["H"])),
    ("n_heads", lambda s: float(s["H"])),
    ("2·d_head", lambda s: 2 * s["D"] / s["H"]),
    ("d_head / 2", lambda s: s["D"] / s["H"] / 2),
    ("2·√d_head", lambda s: 2 * math.sqrt(s["D"] / s["H"])),
    ("√d_head / 2", lambda s: math.sqrt(s["D"] / s["H"]) / 2),
    ("d_head²", lambda s: (s["D"] / s["H"]) ** 2),
    ("1/√d_head: you multiplied by √d_head", lambda s: math.sqrt(s["H"] / s["D"])),
    ("1/d_head: you multiplied by d_head", lambda s: s["H"] / s["D"]),
    ("√Sq, the square root of the query length", lambda s: math.sqrt(s["Sq"])),
    ("√Sk, the square root of the key length", lambda s: math.sqrt(s["Sk"])),
)


def scale_name(runs: Sequence[Run], divisors: list) -> str:
    """What the measured divisors are, when one formula (or a constant) gives them
    all; every formula that does, when the runs' sizes cannot tell them apart (at
    D = 32, H = 4 both n_heads and d_head / 2 are 4)."""
    names = names_of(divisors, [sizes(r) for r in runs], SCALE_NAMES)
    if len(names) == 1:
        return f"; that is {names[0]}"
    if names:
        return f"; that is {' or '.join(names)}, the same number at these sizes"
    if max(divisors) / min(divisors) < 1.01:
        return f"; that is a constant {divisors[0]:.4g}, whatever the head size"
    return ""


def no_softmax(ref_args: tuple) -> torch.Tensor:
    """W_o · merge(q kᵀ v), without the output bias."""
    w, h, xq, xk, xv = ref_args
    q, k, v = (split_heads(t, h) for t in project(w, xq, xk, xv))
    return F.linear(merge_heads(q @ k.transpose(-2, -1) @ v), w["o"][0])


seal(__name__)
