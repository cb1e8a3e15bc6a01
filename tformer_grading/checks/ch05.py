"""Checks for chapter 5, positions and the whole model (book/ch05_model).

The exercise writes ``sinusoidal_encoding``, the embedding step (token embedding
scaled by √d_model plus positions) and a Post-LN ``DecoderBlock`` built from
``tformer_ref.attention.MultiHeadAttention``, ``nn.LayerNorm`` and a feed-forward.

Each check first compares with the reference and names a known wrong variant that
reproduces the learner's outputs on every case. Otherwise it *measures*: the
sinusoid table is fitted (layout, frequencies, phases, amplitude), the embedding's
scale and position rows are estimated from its output, and the decoder block is
traced with forward hooks, sublayer by sublayer, to the first stage that departs.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, replace
from typing import Callable, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from tformer_ref.attention import MultiHeadAttention
from tformer_ref.device import get_device
from tformer_ref.positions import sinusoidal_encoding
from ..guard.integrity import seal
from .blocks import (
    Parts,
    build_block,
    check_block_not_delegated,
    find_parts,
    keep,
    norm_orders,
    post_ln,
    pre_ln,
    randomise_norms,
)
from .cases import randn
from .measure.sizes import named
from .ch04 import BATCHNORM, DROPOUT_IN_EVAL, S_DROPOUT, S_PLACEMENT, S_RESIDUAL
from .delegation import check_by_hand  # noqa: F401 (test cells call ch05.check_by_hand)
from .diagnosis import (
    Case,
    Diagnosis,
    Pitfall,
    Raised,
    Section,
    describe_difference,
    fail,
    fail_unexplained,
    passed,
    quiet,
    run,
    same,
    single_threaded,
    verify_integrity,
    UNEXPLAINED,
)

CHAPTER = "ch05_model"
S_ORDER = Section(CHAPTER, "5.1", "Attention ignores order")
S_SINUSOID = Section(CHAPTER, "5.2", "Sinusoidal positional encoding")
S_LEARNED = Section(CHAPTER, "5.3", "Learned positions and max_length")
S_EXTRAPOLATE = Section(CHAPTER, "5.4", 'What "extrapolates" means')
S_EMBED = Section(CHAPTER, "5.5", "Embeddings scaled by sqrt(d_model)")
S_DECODER = Section(CHAPTER, "5.6", "Encoder, decoder and cross-attention")
S_COUNT = Section(CHAPTER, "5.7", "The seed's model, counted")
S_LM = Section(CHAPTER, "5.8", "A decoder-only model")
# The blocks' own lessons (S_RESIDUAL, S_PLACEMENT, BATCHNORM's) are chapter 4's.


# ------------------------------------------------------------------ the grading flow
# compare -> a listed pitfall that reproduces every case -> the learner's exception ->
# a measurement (``measure`` raises when it can say what is off) -> the fallback.


def _identity(fn):
    return fn


def _right(got, want, atol, rtol) -> bool:
    return describe_difference(got, want, atol, rtol) is None


def fail_if_raised(title: str, cases: Sequence[Case], theirs: list) -> None:
    """The learner's exception, with their line and the case that triggered it."""
    __tracebackhide__ = True
    for case, got in zip(cases, theirs):
        if isinstance(got, Raised):
            fail(
                title,
                f"your code raised {got!r} while the check ran case {case.label}.",
            )


def grade_function(
    title: str,
    cases: Sequence[Case],
    learner: Callable,
    reference: Callable,
    pitfalls: Sequence[Pitfall],
    measure: Callable,
    atol: float,
    rtol: float,
    adapt: Callable = _identity,
) -> None:
    """Pass, or fail naming a listed pitfall, the learner's exception or what
    ``measure(title, cases, theirs, ours)`` found; else the where-not-why fallback."""
    __tracebackhide__ = True
    verify_integrity()
    learner, reference = adapt(learner), adapt(reference)
    ours = [run(reference, case.make()) for case in cases]
    for case, want in zip(cases, ours):
        if isinstance(want, Raised):  # a broken case is the course's bug
            raise RuntimeError(f"reference failed on case {case.label}: {want!r}")
    theirs = [run(learner, case.make()) for case in cases]
    if all(_right(g, w, atol, rtol) for g, w in zip(theirs, ours)):
        passed(title, f"matches the reference on {len(cases)} cases")
        return
    for pitfall in pitfalls:
        variant = [run(adapt(pitfall.impl), case.make()) for case in cases]
        if all(same(g, v, atol, rtol) for g, v in zip(theirs, variant)):
            pitfall.fail(title)
    fail_if_raised(title, cases, theirs)
    measure(title, cases, theirs, ours)
    fail_unexplained(title, cases, theirs, ours, atol, rtol)


def _first_wrong(cases, theirs, ours, atol, rtol):
    """(case, got, want) of the first case the learner gets wrong."""
    return next(
        (c, g, w)
        for c, g, w in zip(cases, theirs, ours)
        if not _right(g, w, atol, rtol)
    )


def _numbers(values, digits: int = 4) -> str:
    return "[" + ", ".join(f"{float(v):.{digits}g}" for v in values) + "]"


# ------------------------------------------------------------------ sinusoidal encoding
# The tables are computed in float64 and returned in float32.


def _positions(n):
    return torch.arange(n, dtype=torch.float64)[:, None]


def _pairs(d):
    return torch.arange(d // 2, dtype=torch.float64)


def _interleaved(even, odd):
    """[n, D/2] and [n, D/2] -> [n, D]: ``even`` in columns 0, 2, ..., ``odd`` in
    1, 3, ..."""
    pe = torch.empty(even.size(0), 2 * even.size(1), dtype=torch.float64)
    pe[:, 0::2], pe[:, 1::2] = even, odd
    return pe.float()


def _sinusoid_table(n, d):
    """PE[pos, 2i] = sin(pos / 10000^(2i/D)), PE[pos, 2i+1] = cos(the same)."""
    angle = _positions(n) * 10000.0 ** (-2 * _pairs(d) / d)
    return _interleaved(torch.sin(angle), torch.cos(angle))


def _sin_cos_swapped(n, d):
    angle = _positions(n) * 10000.0 ** (-2 * _pairs(d) / d)
    return _interleaved(torch.cos(angle), torch.sin(angle))


def _exponent_i_over_d(n, d):  # 10000^(i/D) with i the pair index
    angle = _positions(n) * 10000.0 ** (-_pairs(d) / d)
    return _interleaved(torch.sin(angle), torch.cos(angle))


def _growing_frequencies(n, d):  # the minus sign of the exponent lost
    angle = _positions(n) * 10000.0 ** (2 * _pairs(d) / d)
    return _interleaved(torch.sin(angle), torch.cos(angle))


def _per_column_table(n, d):
    """Each column j at its own frequency 1/10000^(j/D): the odd (cos) columns use 2i+1
    instead of 2i."""
    j = torch.arange(d, dtype=torch.float64)
    angle = _positions(n) / 10000.0 ** (j / d)
    return torch.where(j.long() % 2 == 0, torch.sin(angle), torch.cos(angle)).float()


def _without_base(n, d):  # exp(-2i/D): the log of 10000 left out
    angle = _positions(n) * torch.exp(-2 * _pairs(d) / d)
    return _interleaved(torch.sin(angle), torch.cos(angle))


def _concatenated(n, d):  # [sin | cos]
    angle = _positions(n) * 10000.0 ** (-2 * _pairs(d) / d)
    return torch.cat([torch.sin(angle), torch.cos(angle)], dim=1).float()


def _from_position_one(n, d):
    return _sinusoid_table(n + 1, d)[1:]


GROWING_FREQUENCIES = Pitfall(
    "wrong frequencies (positions multiplied by 10000^(2i/D))",
    "Your frequencies grow with i instead of shrinking: divide the position by "
    "10000^(2i/D) (div_term = exp(-2i·ln(10000)/D), note the minus "
    "sign).",
    S_SINUSOID,
    _growing_frequencies,
)

SINUSOID_PITFALLS = (
    Pitfall(
        "sin and cos swapped",
        "Your even columns hold cosines and the odd ones sines. The paper's table "
        "is PE[pos, 2i] = sin(pos/10000^(2i/D)) and PE[pos, 2i+1] = cos(...): at "
        "position 0 the even columns are 0 and the odd ones "
        "1.",
        S_SINUSOID,
        _sin_cos_swapped,
    ),
    Pitfall(
        "wrong frequencies (exponent i/D, not 2i/D)",
        "Your pair i turns at 1/10000^(i/D): the exponent must be 2i/D (the column "
        "index of the sine), so that the wavelengths run from 2π up to 10000·2π "
        "over the D/2 pairs; with i/D they stop at about "
        "100·2π.",
        S_SINUSOID,
        _exponent_i_over_d,
    ),
    GROWING_FREQUENCIES,
    Pitfall(
        "wrong frequencies (one exponent per column)",
        "You gave every column j its own frequency 1/10000^(j/D). A sine and its "
        "cosine share one frequency: columns 2i and 2i+1 both use 10000^(2i/D). "
        "Sharing it is what makes PE[pos+k] a rotation of "
        "PE[pos].",
        S_SINUSOID,
        _per_column_table,
    ),
    Pitfall(
        "wrong frequencies (the base 10000 left out)",
        "Your frequencies are exp(-2i/D): the log of the base is missing, div_term "
        "= exp(2i · (-ln(10000)/D)).",
        S_SINUSOID,
        _without_base,
    ),
    Pitfall(
        "sin and cos concatenated, not interleaved",
        "You put all the sines first and all the cosines after ([sin | cos]). The "
        "course follows the paper: sine in the even columns, cosine in the odd "
        "ones (pe[:, 0::2] = sin, pe[:, 1::2] = cos).",
        S_SINUSOID,
        _concatenated,
    ),
    Pitfall(
        "positions start at 1",
        "Your first row is position 1: positions are 0, 1, ..., n-1 "
        "(torch.arange(n)); row 0 is [0, 1, 0, 1, "
        "...].",
        S_SINUSOID,
        _from_position_one,
    ),
)


def _as_float32(fn):
    def as_float32(n, d):
        out = fn(n, d)
        # A float64 table is as right as a float32 one, and the exercise names no
        # device: compare values, not precision or placement.
        if type(out) is torch.Tensor and out.dtype in (torch.float32, torch.float64):
            return out.detach().to("cpu", torch.float32)
        return out

    return as_float32


def _frequencies_grow(learner) -> bool:
    """Row 1 (position 1) against frequencies 10000^(+2i/D). Only row 1 is compared,
    loosely: at larger positions the angles reach 10^5 and float32 keeps no phase, so no
    full-table comparison can name it."""
    got = run(learner, (10, 8))
    want = _growing_frequencies(10, 8)
    return (
        type(got) is torch.Tensor
        and got.shape == want.shape
        and got.dtype == want.dtype
        and torch.allclose(got[1], want[1], atol=1e-2)
    )


# Stage 1, the form of the table: a tensor [n_positions, d_model] of float32/float64.


def _shape_problem(shape, n, d) -> str | None:
    want = [n, d]
    if shape == want:
        return None
    if shape == [1, n, d]:
        return (
            f"your table has shape {shape}: a leading batch axis. The exercise "
            f"asks for [n_positions, d_model] = {want} (embed adds it to [B, S, D] "
            "by broadcasting)"
        )
    if shape == [d, n]:
        return (
            f"your table has shape {shape}: transposed. The exercise asks for "
            f"[n_positions, d_model] = {want}, one row per position"
        )
    if shape == [n, d // 2]:
        return (
            f"your table has shape {shape}: half the features. Each of the D/2 "
            "pairs has a sine and a cosine column, [n_positions, d_model] = "
            f"{want}"
        )
    return f"expected shape [n_positions, d_model] = {want}, got {shape}"


def _form_problem(got, n: int, d: int) -> str | None:
    """What is wrong with the table's type, shape or dtype, or None."""
    if not isinstance(got, torch.Tensor) or type(got) is not torch.Tensor:
        return f"expected a plain torch.Tensor [{n}, {d}], got {type(got).__name__}"
    shape = _shape_problem(list(got.shape), n, d)
    if shape:
        return shape
    if not got.is_floating_point():
        return (
            f"your table has dtype {got.dtype}: sines and cosines need a floating "
            "point tensor (torch.zeros(n, d) is float32; an integer tensor "
            "truncates every value to 0 or ±1)"
        )
    if got.dtype not in (torch.float32, torch.float64):
        return (
            f"your table has dtype {got.dtype}, which keeps about 3 significant "
            "digits: return float32 (or float64)"
        )
    if not torch.isfinite(got).all():
        where = tuple((~torch.isfinite(got)).nonzero()[0].tolist())
        return f"your table has NaN or inf values (first at [row, column] = {where})"
    if not got.any():
        return "your table is all zeros: it was allocated but never filled"
    unwritten = [
        j
        for j in (got == 0).all(0).nonzero().flatten().tolist()
        if not _frequency_zero_sine(got, j)
    ]
    if n > 1 and unwritten:
        return (
            f"columns {unwritten[:6]}{'...' if len(unwritten) > 6 else ''} of your "
            "table are all zero: never written"
        )
    return None


def _frequency_zero_sine(table, j: int) -> bool:
    """Column ``j`` (all zero) is explained as written: it is sin(0·pos) = 0, the sine
    of a pair whose partner column (j ± 1 interleaved, j ± D/2 concatenated) is a
    nonzero constant, cos(0·pos). Only a zero column with no such partner is evidence
    that the column was never written."""
    d = table.size(1)
    partners = {j ^ 1, (j + d // 2) % d} - {j}
    for k in (k for k in partners if 0 <= k < d):
        col = table[:, k]
        if col.abs().min() > 0 and bool((col == col[0]).all()):
            return True
    return False


# Stage 2, the fit: every layout is tried; in a right one each (sine, cosine) column
# pair is A·sin(ω·pos + φ), A·cos(ω·pos + φ), so atan2(sine, cosine) grows
# linearly with the position.


def _sin_even(d):
    return torch.arange(0, d, 2), torch.arange(1, d, 2)


def _cos_even(d):
    return torch.arange(1, d, 2), torch.arange(0, d, 2)


def _sin_first_half(d):
    return torch.arange(d // 2), torch.arange(d // 2, d)


def _cos_first_half(d):
    return torch.arange(d // 2, d), torch.arange(d // 2)


EXPECTED_LAYOUT = "sin on even features, cos on odd ones"
LAYOUTS = (
    (EXPECTED_LAYOUT, _sin_even),
    ("cos on even features, sin on odd ones (sin and cos swapped)", _cos_even),
    (
        "sines in the first half, cosines in the second ([sin | cos] "
        "concatenated, not interleaved)",
        _sin_first_half,
    ),
    (
        "cosines in the first half, sines in the second ([cos | sin] concatenated)",
        _cos_first_half,
    ),
)


@dataclass(frozen=True)
class SinusoidFit:
    """A table read as pairs: ``omega``, ``phase``, ``amplitude`` are [D/2]."""

    layout: str
    omega: torch.Tensor
    phase: torch.Tensor
    amplitude: torch.Tensor


def _wrap(angle):
    return torch.remainder(angle + math.pi, 2 * math.pi) - math.pi


def _line_fit(theta):
    """theta [n, P] unwrapped along the rows -> (slope [P], intercept [P])."""
    pos = torch.arange(theta.size(0), dtype=torch.float64)[:, None]
    dp = pos - pos.mean()
    slope = (dp * (theta - theta.mean(0))).sum(0) / (dp**2).sum()
    return slope, theta.mean(0) - slope * pos.mean()


def _fit_layout(table, name, columns) -> SinusoidFit | None:
    """table [n, D] float64 read with ``columns(D) -> (sine cols, cosine cols)``."""
    sin_cols, cos_cols = columns(table.size(1))
    s, c = table[:, sin_cols], table[:, cos_cols]
    radius = torch.sqrt(s**2 + c**2)  # [n, D/2]
    if radius.min() < 1e-6:
        return None
    theta = torch.atan2(s, c)
    steps = _wrap(theta.diff(dim=0))
    omega, phase = _line_fit(torch.cat([theta[:1], theta[:1] + steps.cumsum(0)]))
    amplitude = radius.mean(0)
    angle = torch.arange(table.size(0), dtype=torch.float64)[:, None] * omega + phase
    rebuilt = torch.empty_like(table)
    rebuilt[:, sin_cols] = amplitude * angle.sin()
    rebuilt[:, cos_cols] = amplitude * angle.cos()
    if (rebuilt - table).abs().max() > 1e-3 * max(1.0, amplitude.max().item()):
        return None
    if (omega < -1e-7).any():
        return None
    return SinusoidFit(name, omega, _wrap(phase), amplitude)


def fit_sinusoids(table) -> SinusoidFit | None:
    """The first layout whose pairs are sinusoids of position, or None."""
    table = table.detach().double().cpu()
    if table.size(0) < 4 or table.size(1) < 2:
        return None
    for name, columns in LAYOUTS:
        fit = _fit_layout(table, name, columns)
        if fit is not None:
            return fit
    return None


# Stage 3, the fitted parameters against the paper's: one sentence per parameter off.


def _frequency_problem(omega, d, n) -> str | None:
    """omega [D/2] against 10000^(-2i/D): the base, the exponent, the first pair."""
    i = torch.arange(omega.numel(), dtype=torch.float64)
    want = 10000.0 ** (-2 * i / d)
    if torch.allclose(omega, want, rtol=2e-3, atol=1e-6):
        return None
    shown = (
        f"your pairs turn at ω = {_numbers(omega[:4])}... per position; "
        f"expected ω_i = 10000^(-2i/D) = {_numbers(want[:4])}... (D = {d})"
    )
    usable = omega > 1e-9
    if usable.sum() < 2:
        return shown
    log_w, idx = omega[usable].log(), i[usable]
    slope, intercept = _log_line(idx, log_w)
    if (log_w - (intercept + slope * idx)).abs().max() > 1e-2:
        return _arithmetic_words(omega, d) or (
            shown + ": they are not a geometric sequence in the pair index i"
        )
    return shown + ". " + _geometric_reading(-slope, math.exp(intercept), d, n)


def _log_line(idx, log_w):
    """Least squares log ω = intercept + slope·i -> (slope, intercept)."""
    di = idx - idx.mean()
    slope = (di * (log_w - log_w.mean())).sum() / (di**2).sum()
    return slope.item(), (log_w.mean() - slope * idx.mean()).item()


def _geometric_reading(c, omega0, d, n) -> str:
    """ω_i = ω_0·exp(-c·i) said in the lesson's terms: base and exponent."""
    k = c * d / math.log(10000.0)  # ω_i = 10000^(-k·i/D); the paper has k = 2
    base = math.exp(c * d / 2) if abs(c * d / 2) < 700 else float("inf")
    words = [
        f"They fit ω_i = {omega0:.4g}·b^(-2i/D) with base b = {base:.5g} "
        f"(expected 10000), i.e. 10000^(-k·i/D) with k = {k:.3g} (expected 2)"
    ]
    if abs(c) < 1e-6:
        words.append(
            "every pair turns at the same frequency: the exponent is "
            "always 0 (an integer division 2i // D, or i left out?)"
        )
    elif abs(k - 1) < 0.01:
        words.append(
            "the exponent is i/D, not 2i/D (i counts pairs: the sine of pair "
            "i sits in column 2i)"
        )
    elif abs(k - 4) < 0.02:
        words.append(
            "the exponent is 4i/D: the factor 2 counted twice (arange(0, D, "
            "2) already steps by 2)"
        )
    elif abs(base - math.e) < 0.01:
        words.append(
            "that is base e: the log of 10000 is missing from exp(-2i·ln(10000)/D)"
        )
    elif abs(k - 2) > 0.01:
        words.append(
            f"the base or the exponent's denominator is off: with base 10000 "
            f"that is the exponent 2i/{2 * d / k:.3g} instead of 2i/{d}"
        )
    if abs(omega0 - 1) > 2e-3:
        words.append(_first_pair_words(omega0, d, n))
    return "; ".join(words)


def _first_pair_words(omega0, d, n) -> str:
    """What ω_0 ≠ 1 is: the pair index counted from 1 (ω_0 = 10000^(-2/D)), or every
    frequency times one factor, which a table cannot tell from positions spaced by
    it."""
    said = f"the first pair turns at ω_0 = {omega0:.4g}, expected 1"
    if abs(omega0 - 10000.0 ** (-2 / d)) < 2e-3 * omega0:
        return f"{said}: that is 10000^(-2/D), the pair index counted from 1, not 0"
    said += (
        f": every frequency is {omega0:.4g} times the paper's, which is the same table "
        f"as positions spaced {omega0:.4g} apart instead of 1"
    )
    if n > 1 and abs(omega0 - n / (n - 1)) < 1e-3:
        said += (
            f" ({n}/{n - 1} = n/(n-1) for n = {n}: the spacing of "
            f"torch.linspace(0, {n}, {n}), where arange({n}) steps by 1)"
        )
    return said


def _phase_problem(fit) -> str | None:
    """The phases say where the positions start: φ_i = ω_i·pos0."""
    if fit.phase.abs().max() < 1e-3:
        return None
    slow = (fit.omega > 1e-3) & (fit.omega < 0.5)
    start = (fit.phase[slow] / fit.omega[slow]).median().item() if slow.any() else None
    if start is not None and _wrap(fit.phase - fit.omega * start).abs().max() < 1e-3:
        return (
            f"your row 0 is position {start:.3g}, not 0: positions are 0, 1, ..., "
            "n-1 (torch.arange(n)), so row 0 is [0, 1, 0, 1, ...]"
        )
    return (
        f"your sines have phases φ = {_numbers(fit.phase[:4])}... at row 0 "
        "(expected 0: row 0 is sin 0 = 0 and cos 0 = 1)"
    )


def _amplitude_problem(fit) -> str | None:
    a = fit.amplitude
    if (a - 1).abs().max() < 1e-3:
        return None
    if (a - a.mean()).abs().max() < 1e-3:
        return (
            f"your sines and cosines have amplitude {a.mean().item():.4g}, not 1: "
            "the table is scaled"
        )
    return (
        f"your pairs have amplitudes from {a.min().item():.4g} to "
        f"{a.max().item():.4g}, not 1"
    )


# A swapped layout with every phase at ∓π/2 is the expected layout with one column of
# each pair negated: sin(x - π/2) = -cos(x), cos(x + π/2) = -sin(x).
_QUARTER_TURNS = {
    LAYOUTS[1][0]: (
        "your even columns are sin(ω·pos), and your odd ones are sin(ω·pos - π/2) = "
        "-cos(ω·pos): a phase of -π/2 where cos(x) = sin(x + π/2) needs +π/2",
        "your odd columns are cos(ω·pos), and your even ones are cos(ω·pos + π/2) = "
        "-sin(ω·pos): a phase of +π/2 on the sines",
    ),
    LAYOUTS[3][0]: (
        "your first half holds sin(ω·pos) and your second half sin(ω·pos - π/2) = "
        "-cos(ω·pos), concatenated rather than interleaved",
        "your second half holds cos(ω·pos) and your first half cos(ω·pos + π/2) = "
        "-sin(ω·pos), concatenated rather than interleaved",
    ),
}


def _quarter_turn(fit) -> str | None:
    """The sentence for a swapped layout whose phases are all -π/2 or all +π/2."""
    for k, sign in enumerate((-1, 1)):
        if (
            fit.layout in _QUARTER_TURNS
            and _wrap(fit.phase - sign * math.pi / 2).abs().max() < 1e-3
        ):
            return _QUARTER_TURNS[fit.layout][k]
    return None


def _fit_problems(fit, d, n) -> list:
    turned = _quarter_turn(fit)
    layout = None if fit.layout == EXPECTED_LAYOUT else f"your table has {fit.layout}"
    found = [
        turned or layout,
        _frequency_problem(fit.omega, d, n),
        None if turned else _phase_problem(fit),
        _amplitude_problem(fit),
    ]
    return [p for p in found if p]


SINUSOID_FITTED = Diagnosis(
    "sinusoid parameters off",
    "The paper's table is PE[pos, 2i] = sin(pos/10000^(2i/D)), PE[pos, 2i+1] = "
    "cos(pos/10000^(2i/D)) for pos = 0, 1, ...: sine in the even columns, base "
    "10000, exponent 2i/D, amplitude 1.",
    S_SINUSOID,
)


def _measure_table(title, got, n, d, where) -> None:
    """Fail saying what the table ``got`` for (n, d) gets wrong, when it can."""
    __tracebackhide__ = True
    form = _form_problem(got, n, d)
    if form:
        fail(title, f"on case {where}: {form}.", S_SINUSOID)
    fit = fit_sinusoids(got)
    if fit is not None and _fit_problems(fit, d, n):
        fitted = "; ".join(_fit_problems(fit, d, n))
        SINUSOID_FITTED.fail(title, f"Fitted on case {where}: {fitted}.")
    if fit is None and n >= 8:
        arithmetic = _arithmetic_reading(got.detach().double().cpu(), d)
        if arithmetic:
            SINUSOID_FITTED.fail(title, f"Fitted on case {where}: {arithmetic}.")
        columns = _column_problems(got.detach().double().cpu(), d)
        if columns:
            SINUSOID_FITTED.fail(
                title,
                "No sin/cos pairing fits your table, so it "
                f"was read column by column on case {where}: "
                f"{'; '.join(columns)}.",
            )


def _signed_frequencies(table):
    """table [n, D] float64 read as interleaved (sin, cos) pairs of phase 0 whose
    frequencies may have any sign -> ω [D/2] in (-π, π] (the angle per position
    step, which is all integer positions can show), or None when that does not
    rebuild the table."""
    s, c = table[:, 0::2], table[:, 1::2]
    if s.shape != c.shape or s[0].abs().max() > 1e-4 or (c[0] - 1).abs().max() > 1e-4:
        return None
    omega = torch.atan2(s[1], c[1])
    angle = torch.arange(table.size(0), dtype=torch.float64)[:, None] * omega
    if (angle.sin() - s).abs().max() > 1e-3 or (angle.cos() - c).abs().max() > 1e-3:
        return None
    return omega


def _arithmetic_reading(table, d) -> str | None:
    """Pairs whose frequencies form an arithmetic sequence ω_i = i·b (mod 2π), the
    mark of an exponent used as the frequency itself (the exp() of div_term left
    out): the geometric 10000^(-2i/D) becomes its log, -2i·ln(10000)/D."""
    omega = _signed_frequencies(table)
    return None if omega is None else _arithmetic_words(omega, d)


def _arithmetic_words(omega, d) -> str | None:
    """omega [D/2] (mod 2π) against ω_i = ω_0 + i·b; None when it is not that."""
    if omega.numel() < 3:
        return None
    i = torch.arange(omega.numel(), dtype=torch.float64)
    start, step = omega[0].item() + 0.0, _wrap(omega[1] - omega[0]).item()
    if abs(step) < 1e-6 or _wrap(omega - start - i * step).abs().max() > 1e-3:
        return None
    words = (
        f"your pairs turn at ω = {_numbers(omega[:4] + 0.0)}... per position "
        f"(read mod 2π): ω_i = {start:.4g} + i·({step:.4g}), changing linearly "
        "with the pair index i instead of shrinking geometrically as "
        "10000^(-2i/D) (multiplied by the same factor from one pair to the next)"
    )
    log_step = -2 * math.log(10000.0) / d
    if abs(_wrap(torch.tensor(step - log_step)).item()) < 1e-3:
        words += (
            f"; {step:.4g} = -2·ln(10000)/D: your frequencies are the *log* of "
            "10000^(-2i/D), so the exp() of div_term is missing"
        )
    return words


# Stage 2b, when no pairing fits: each column on its own. A sinusoid c(p) of
# frequency ω, whatever its phase, has c(p+1) + c(p-1) = 2·cos(ω)·c(p).


def _column_frequencies(table):
    """table [n, D] float64 -> ω [D] per column (0..π), by least squares."""
    mid, around = table[1:-1], table[2:] + table[:-2]
    cos_w = (mid * around).sum(0) / (2 * (mid**2).sum(0)).clamp_min(1e-300)
    return torch.arccos(cos_w.clamp(-1.0, 1.0))


def _columns(indices) -> str:
    shown = indices[:6]
    return f"{shown}{'...' if len(indices) > 6 else ''}"


def _column_problems(table, d) -> list:
    """Sentences about the columns that start wrong (sine vs cosine) or turn at the
    wrong frequency; only fast columns (ω > 0.02) are judged on frequency."""
    want = 10000.0 ** (-2 * (torch.arange(d) // 2).double() / d)
    peak = table.abs().max(0).values
    starts_at_zero = table[0].abs() < 1e-4 * peak.clamp_min(1e-12)
    starts_at_peak = (table[0] - peak).abs() < 1e-3 * peak.clamp_min(1e-12)
    even = torch.arange(d) % 2 == 0
    found = []
    sines_on_odd = (~even & starts_at_zero).nonzero().flatten().tolist()
    if sines_on_odd:
        found.append(
            f"columns {_columns(sines_on_odd)} start at 0 like sines, where "
            "the cosines belong (cos 0 = 1)"
        )
    cos_on_even = (even & starts_at_peak & (peak > 0)).nonzero().flatten().tolist()
    if cos_on_even:
        found.append(
            f"columns {_columns(cos_on_even)} start at their peak like "
            "cosines, where the sines belong (sin 0 = 0)"
        )
    omega = _column_frequencies(table)
    off = ((want > 0.02) & ((omega - want).abs() > 0.02 * want)).nonzero().flatten()
    if len(off):
        found.append(
            f"columns {_columns(off.tolist())} turn at ω = "
            f"{_numbers(omega[off][:6])} per position; expected "
            f"{_numbers(want[off][:6])} (columns 2i and 2i+1 share "
            "ω_i = 10000^(-2i/D))"
        )
    return found


PROBE_TABLE = (64, 16)  # long enough to fit every pair's frequency and phase


def _measure_sinusoid(fn):
    def measure(title, cases, theirs, ours):
        __tracebackhide__ = True
        if _frequencies_grow(fn):  # aliased past π: no fit can read these frequencies
            GROWING_FREQUENCIES.fail(title)
        n, d = PROBE_TABLE
        got = run(fn, PROBE_TABLE)
        if isinstance(got, Raised):
            fail(
                title,
                f"your code raised {got!r} while the check ran case "
                f"n_positions={n}, d_model={d}.",
            )
        if not _right(got, _sinusoid_table(n, d), 1e-4, 1e-4):
            _measure_table(title, got, n, d, f"n_positions={n}, d_model={d}")
        case, got, _ = _first_wrong(cases, theirs, ours, 1e-4, 1e-4)
        n, d = case.make()
        _measure_table(title, got, n, d, case.label)

    return measure


@single_threaded
def check_sinusoidal_encoding(fn) -> None:
    """``fn(n_positions, d_model) -> [n_positions, d_model]``, the table of Vaswani et
    al. §3.5 (float32 or float64, any device)."""
    __tracebackhide__ = True
    cases = [
        Case(f"n_positions={n}, d_model={d}", lambda n=n, d=d: (n, d))
        for n, d in [(10, 8), (50, 16), (7, 6), (100, 32), (1, 4)]
    ]
    grade_function(
        "sinusoidal_encoding",
        cases,
        fn,
        _sinusoid_table,
        SINUSOID_PITFALLS,
        _measure_sinusoid(_as_float32(fn)),
        atol=1e-4,
        rtol=1e-4,
        adapt=_as_float32,
    )


# --------------------------------------------------------------------------- embeddings


def _embed_cases():
    configs = [
        (2, 5, 16, 20, torch.float32),
        (3, 4, 8, 11, torch.float32),
        (1, 7, 12, 9, torch.float64),
        (4, 3, 32, 50, torch.float32),
    ]
    device = get_device()
    cases = []
    for i, (b, s, d, vocab, dtype) in enumerate(configs):

        def make(b=b, s=s, d=d, vocab=vocab, dtype=dtype, i=i):
            torch.manual_seed(500 + i)
            table = nn.Embedding(vocab, d).to(device=device, dtype=dtype)
            nn.init.normal_(table.weight, std=d**-0.5)
            g = torch.Generator().manual_seed(600 + i)
            tokens = torch.randint(0, vocab, (b, s), generator=g).to(device)
            pe = sinusoidal_encoding(s + 6, d, dtype=dtype, device=device)
            return tokens, table, pe

        cases.append(
            Case(
                f"tokens [{named(B=b, S=s)}], {named(V=vocab, D=d)}, "
                f"pe [{named(P=s + 6)}, D], {dtype}",
                make,
            )
        )
    return cases


def _embed(tokens, table, pe):
    """table(tokens) · √D + pe[:S]."""
    return table(tokens) * math.sqrt(table.embedding_dim) + pe[: tokens.size(1)]


def _embed_unscaled(tokens, table, pe):
    return table(tokens) + pe[: tokens.size(1)]


def _embed_times_d(tokens, table, pe):
    return table(tokens) * float(table.embedding_dim) + pe[: tokens.size(1)]


def _embed_over_sqrt_d(tokens, table, pe):
    return table(tokens) * (1 / math.sqrt(table.embedding_dim)) + pe[: tokens.size(1)]


def _embed_positions_scaled(tokens, table, pe):  # (embedding + position) · √D
    return (table(tokens) + pe[: tokens.size(1)]) * math.sqrt(table.embedding_dim)


def _embed_positions_by_token(tokens, table, pe):  # pe[tokens]
    return table(tokens) * math.sqrt(table.embedding_dim) + pe[tokens]


EMBED_PITFALLS = (
    Pitfall(
        "missing √d_model embedding scale",
        "Your token embeddings are not multiplied by √d_model (Vaswani et al. "
        "§3.4). Embeddings start with entries of size about 1/√D, the "
        "positional encoding with entries of size 1: without the scale the "
        "positions drown the tokens.",
        S_EMBED,
        _embed_unscaled,
    ),
    Pitfall(
        "scaled by d_model, not √d_model",
        "You multiplied the embeddings by d_model; the paper multiplies by √d_model.",
        S_EMBED,
        _embed_times_d,
    ),
    Pitfall(
        "divided by √d_model",
        "You divided the embeddings by √d_model; the paper multiplies by it.",
        S_EMBED,
        _embed_over_sqrt_d,
    ),
    Pitfall(
        "positions scaled too",
        "You multiplied (embedding + position) by √d_model: only the token "
        "embedding is scaled, the positional encoding is added afterwards, as it "
        "is.",
        S_EMBED,
        _embed_positions_scaled,
    ),
    Pitfall(
        "positions looked up by token id",
        "You indexed the positional table with the token ids (pe[tokens]): the row "
        "is the token's *position*, 0..S-1 (pe[:S]), whatever the "
        "token.",
        S_SINUSOID,
        _embed_positions_by_token,
    ),
)


# Stage 1, the form: [B, S, D] in the table's dtype, on its device.


def _embed_form_problem(got, tokens, table) -> str | None:
    b, s = tokens.shape
    d = table.embedding_dim
    if not isinstance(got, torch.Tensor) or type(got) is not torch.Tensor:
        return (
            f"expected a plain torch.Tensor [B, S, D] = [{b}, {s}, {d}], got "
            f"{type(got).__name__}"
        )
    shape = list(got.shape)
    if shape == [b, s, 2 * d]:
        return (
            f"your output has shape {shape}: 2·D features. You concatenated the "
            "positions to the embeddings; they are *added* (same D features)"
        )
    if shape != [b, s, d]:
        return f"expected shape [B, S, D] = {[b, s, d]}, got {shape}"
    if got.dtype != table.weight.dtype:
        return (
            f"your output is {got.dtype} for a {table.weight.dtype} table: keep "
            "the table's dtype (a tensor you create inside, such as the scale, "
            "must not change it)"
        )
    if not torch.isfinite(got).all():
        return "your output has NaN or inf values"
    if got.device != table.weight.device:
        return f"your output is on {got.device}, the table on {table.weight.device}"
    return None


# Stage 2, side effects: the inputs untouched, the same output twice (no dropout).


def _mutation_problem(fn, make) -> str | None:
    tokens, table, pe = make()
    before = (tokens.clone(), table.weight.detach().clone(), pe.clone())
    run(fn, (tokens, table, pe))
    after = (tokens, table.weight.detach(), pe)
    for name, old, new in zip(("tokens", "table.weight", "pe"), before, after):
        if not torch.equal(old, new):
            return (
                f"your embed changed its input {name} in place (largest change "
                f"{(old.double() - new.double()).abs().max().item():.3g}): every "
                "later call then sees a different table. Compute a new tensor "
                "instead (x = x * scale, not x *= scale or .mul_)"
            )
    return None


def _dropout_problem(fn, make) -> str | None:
    first, second = run(fn, make()), run(fn, make())
    if not (isinstance(first, torch.Tensor) and isinstance(second, torch.Tensor)):
        return None
    if first.shape != second.shape or torch.equal(first, second):
        return None
    zeros = ((first == 0).double().mean().item(), (second == 0).double().mean().item())
    return (
        "two calls with the same inputs gave different outputs "
        f"({zeros[0]:.0%} and {zeros[1]:.0%} of the entries zero): embed applies "
        "no dropout and no other randomness (the model applies dropout after it)"
    )


# Stage 3, the fit: out = α·table(tokens) + β·pe[r_s] at each position s.

# (B, S, D, V, max_len): D not a perfect square (an int() of √D would pass), and no
# two sizes equal, so a scale by the wrong one says which.
EMBED_PROBES = ((4, 6, 12, 30, 14), (5, 5, 20, 27, 10))


def _embed_probe(i):
    b, s, d, vocab, max_len = EMBED_PROBES[i]

    def make():
        # Seeded without resetting the learner's random state: two calls of a learner
        # that draws random numbers (dropout) must see different draws.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(700 + i)
            table = nn.Embedding(vocab, d).to(get_device())
            nn.init.normal_(table.weight, std=d**-0.5)
        g = torch.Generator().manual_seed(800 + i)
        tokens = torch.randint(0, vocab, (b, s), generator=g).to(get_device())
        return tokens, table, sinusoidal_encoding(max_len, d, device=get_device())

    return make


@dataclass(frozen=True)
class EmbedFit:
    """``scale`` α of the embeddings; ``rows`` r_s of pe added at s, times
    ``pos_scale`` β; ``rows`` None when the added vector is not a row of pe,
    ``shared`` False when it differs between the sequences of the batch."""

    scale: float
    rows: tuple | None
    pos_scale: float
    shared: bool


def _position_rows(q, pe):
    """q [S, D] -> (rows, β) with q_s ≈ β·pe[rows_s], or (None, 0)."""
    coef = (q @ pe.T) / (pe**2).sum(-1)  # [S, L]: best β per (s, row)
    resid = (q[:, None, :] - coef[..., None] * pe[None]).norm(dim=-1)
    rows = resid.argmin(-1)
    picked = coef.gather(1, rows[:, None]).squeeze(1)
    if resid.gather(1, rows[:, None]).max() > 1e-3 * (1 + q.norm(dim=-1).max()):
        return None, 0.0
    if (picked - picked.mean()).abs().max() > 1e-3 * (1 + picked.abs().mean()):
        return None, 0.0
    return tuple(rows.tolist()), picked.mean().item()


def fit_embed(got, tokens, table, pe) -> EmbedFit | None:
    """Read α, the rows and β off the learner's output ``got`` [B, S, D] (B >= 2)."""
    e = F.embedding(tokens, table.weight).detach().double().cpu()
    y, pe = got.detach().double().cpu(), pe.double().cpu()
    centred = e - e.mean(0)
    alpha = ((y - y.mean(0)) * centred).sum() / (centred**2).sum()
    added = y - alpha * e  # [B, S, D]: what was added to α·embedding
    size = 1 + y.abs().max().item()
    shared = (added - added.mean(0)).abs().max().item() < 1e-4 * size
    q = added.mean(0)
    if q.abs().max() < 1e-5 * size:
        return EmbedFit(alpha.item(), (), 0.0, shared)
    rows, beta = _position_rows(q, pe) if shared else (None, 0.0)
    return EmbedFit(alpha.item(), rows, beta, shared)


def _named_scale(alphas, configs) -> str:
    """What each measured α equals, when one expression explains every probe."""
    named = (
        ("1 (no scale)", lambda b, s, d, v, m: 1.0),
        ("d_model", lambda b, s, d, v, m: d),
        ("1/√d_model", lambda b, s, d, v, m: d**-0.5),
        ("1/d_model", lambda b, s, d, v, m: 1 / d),
        ("√(max_len), pe.size(0)", lambda b, s, d, v, m: m**0.5),
        ("√(vocabulary size)", lambda b, s, d, v, m: v**0.5),
        ("√S, the sequence length", lambda b, s, d, v, m: s**0.5),
        ("√B, the batch size", lambda b, s, d, v, m: b**0.5),
        ("√(d_model/2)", lambda b, s, d, v, m: (d / 2) ** 0.5),
        ("2·√d_model", lambda b, s, d, v, m: 2 * d**0.5),
        ("d_model^(1/4)", lambda b, s, d, v, m: d**0.25),
    )
    for name, value in named:
        if all(abs(a - value(*c)) < 1e-3 * value(*c) for a, c in zip(alphas, configs)):
            return f": that is {name}"
    return ""


def _scale_problem(fits) -> str | None:
    alphas = [f.scale for f in fits]
    wants = [c[2] ** 0.5 for c in EMBED_PROBES]
    if all(abs(a - w) < 1e-3 * w for a, w in zip(alphas, wants)):
        return None
    at = " and ".join(f"{a:.4g} (D = {c[2]})" for a, c in zip(alphas, EMBED_PROBES))
    expected = " and ".join(f"{w:.4g}" for w in wants)
    return (
        f"your token embeddings are multiplied by {at}"
        f"{_named_scale(alphas, EMBED_PROBES)}; expected √d_model = {expected}"
    )


def _rows_problem(fit, s) -> str | None:
    if not fit.shared:
        return (
            "your output is not α·table(tokens) plus one vector per position: "
            "after the best α, what remains differs between sequences at the same "
            "position (the positional term pe[:S] is the same for every sequence)"
        )
    if fit.rows == ():
        return "no positional encoding is added to the embeddings"
    if fit.rows is None:
        return (
            "the vector added at each position is not a row of pe (nor a multiple "
            "of one): add pe[:S], row s at position s"
        )
    if list(fit.rows) == list(range(s)):
        return None
    where = {
        tuple(range(1, s + 1)): ": the positions start at 1",
        tuple(range(s - 1, -1, -1)): ": reversed",
    }.get(fit.rows, "")
    return (
        f"at positions 0..{s - 1} you add rows {list(fit.rows)} of pe{where}; "
        f"expected rows 0..{s - 1} (pe[:S])"
    )


def _pos_scale_problem(fit) -> str | None:
    if not fit.rows or abs(fit.pos_scale - 1) < 1e-3:
        return None
    same = (
        " (the same as the embeddings: the sum was scaled)"
        if abs(fit.pos_scale - fit.scale) < 1e-3 * abs(fit.scale)
        else ""
    )
    return (
        f"your positional encoding is multiplied by {fit.pos_scale:.4g}{same}; "
        "it is added as it is (scale 1)"
    )


EMBED_MEASURED = Diagnosis(
    "embedding scale or positions off",
    "embed returns table(tokens)·√d_model + pe[:S]: only the token embeddings are "
    "scaled, and row s of the positional table is added at position s.",
    S_EMBED,
)


def _fit_probes(fn):
    """[EmbedFit] over the probes, or None when an output is not [B, S, D]."""
    fits = []
    for i, config in enumerate(EMBED_PROBES):
        tokens, table, pe = _embed_probe(i)()
        got = run(fn, (tokens, table, pe))
        if _embed_form_problem(got, tokens, table):
            return None
        fits.append(fit_embed(got, tokens, table, pe))
    return fits


def _measure_embed(fn):
    def measure(title, cases, theirs, ours):
        __tracebackhide__ = True
        case, got, _ = _first_wrong(cases, theirs, ours, 1e-5, 1e-5)
        tokens, table, _ = case.make()
        form = _embed_form_problem(got, tokens, table)
        if form:
            fail(title, f"on case {case.label}: {form}.", S_EMBED)
        fits = _fit_probes(fn)
        if fits:
            s = EMBED_PROBES[0][1]
            problems = [
                p
                for p in (
                    _scale_problem(fits),
                    _rows_problem(fits[0], s),
                    _pos_scale_problem(fits[0]),
                )
                if p
            ]
            if problems:
                EMBED_MEASURED.fail(
                    title,
                    "Measured on tokens [4, 6] and [5, 5]: "
                    + "; ".join(problems)
                    + ".",
                )

    return measure


@single_threaded
def check_embed(fn) -> None:
    """``fn(tokens [B, S] long, table nn.Embedding(V, D), pe [max_len, D])
    -> [B, S, D]``: ``table(tokens) · √D + pe[:S]``."""
    __tracebackhide__ = True
    _side_effects("embed", fn)
    grade_function(
        "embed",
        _embed_cases(),
        fn,
        _embed,
        EMBED_PITFALLS,
        _measure_embed(fn),
        atol=1e-5,
        rtol=1e-5,
    )


def _side_effects(title, fn) -> None:
    """The inputs untouched and the output the same twice, whatever the values: a
    right first output hides a table scaled in place."""
    __tracebackhide__ = True
    make = _embed_probe(0)
    for stage in (_mutation_problem, _dropout_problem):
        found = stage(fn, make)
        if found:
            fail(title, f"on tokens [4, 6]: {found}.", S_EMBED)


# ------------------------------------------------------------------------- DecoderBlock
# A decoder variant is ``fn(role, module, x, memory, src_mask)``. ``role`` = (attention
# order, norm order) says which of the learner's attentions is the self-attention and
# which norm serves which sublayer.


def decoder_parts(module, d_model, d_ff=None) -> Parts:
    return find_parts("DecoderBlock", module, d_model, d_ff, 2, 3, BATCHNORM, S_DECODER)


def _in_role(role, module, x) -> Parts:
    """The learner's parts as ``role`` assigns them: ``attns`` = (self, cross).
    ``module`` may be the block or its parts, found once."""
    attn_order, norm_order = role
    parts = module if isinstance(module, Parts) else decoder_parts(module, x.size(-1))
    return parts.in_role(norm_order, attn_order)


def _decoder(parts, x, first, second, wiring=post_ln):
    """Sublayers ``first``, ``second``, then the feed-forward, each wrapped by
    ``wiring`` with the next norm (eval mode: no dropout)."""
    for sublayer, norm in zip((first, second, parts.ff), parts.norms):
        x = wiring(x, sublayer, norm, keep)
    return x


def _lower_triangle(h):
    s = h.size(1)
    return torch.ones(s, s, dtype=torch.bool, device=h.device).tril()[None, None]


def _masked_self(p):
    return lambda h: p.attns[0](h, h, h, mask=_lower_triangle(h))


def _cross(p, memory, src_mask):
    return lambda h: p.attns[1](h, memory, memory, mask=src_mask)


def decoder_block(role, module, x, memory, src_mask):
    """The Post-LN decoder block from the learner's parts: causal self-attention,
    cross-attention to ``memory``, feed-forward."""
    p = _in_role(role, module, x)
    return _decoder(p, x, _masked_self(p), _cross(p, memory, src_mask))


def _unmasked_self(role, module, x, memory, src_mask):
    p = _in_role(role, module, x)
    return _decoder(p, x, lambda h: p.attns[0](h, h, h), _cross(p, memory, src_mask))


def _upper_triangle(h):  # triu(): each position keeps itself and the future
    s = h.size(1)
    return torch.ones(s, s, dtype=torch.bool, device=h.device).triu()[None, None]


def _triu_self(role, module, x, memory, src_mask):
    p = _in_role(role, module, x)
    upper = lambda h: p.attns[0](h, h, h, mask=_upper_triangle(h))  # noqa: E731
    return _decoder(p, x, upper, _cross(p, memory, src_mask))


def _cross_from_decoder(role, module, x, memory, src_mask):
    p = _in_role(role, module, x)
    own = lambda h: p.attns[1](h, h, h, mask=src_mask)  # noqa: E731
    return _decoder(p, x, _masked_self(p), own)


def _cross_from_decoder_unmasked(role, module, x, memory, src_mask):
    p = _in_role(role, module, x)
    return _decoder(p, x, _masked_self(p), lambda h: p.attns[1](h, h, h))


def _cross_without_src_mask(role, module, x, memory, src_mask):
    p = _in_role(role, module, x)
    return _decoder(p, x, _masked_self(p), _cross(p, memory, None))


def _cross_before_self(role, module, x, memory, src_mask):
    p = _in_role(role, module, x)
    return _decoder(p, x, _cross(p, memory, src_mask), _masked_self(p))


def _post_ln_no_residual(x, sublayer, norm, drop):  # LayerNorm(Dropout(Sublayer(x)))
    return norm(drop(sublayer(x)))


def _decoder_no_residual(role, module, x, memory, src_mask):
    p = _in_role(role, module, x)
    return _decoder(
        p, x, _masked_self(p), _cross(p, memory, src_mask), _post_ln_no_residual
    )


def _decoder_pre_ln(role, module, x, memory, src_mask):
    p = _in_role(role, module, x)
    return _decoder(p, x, _masked_self(p), _cross(p, memory, src_mask), pre_ln)


NO_CAUSAL_MASK = Pitfall(
    "decoder self-attention without the causal mask",
    "The decoder's self-attention is not masked, so position i reads the target tokens "
    "after it: in training it copies the answer instead of predicting it, and at "
    "generation time those tokens do not exist yet. Self-attention in the decoder "
    "always uses the causal (lower-triangular) mask.",
    S_DECODER,
    _unmasked_self,
)
TRIU_MASK = Pitfall(
    "causal mask built with triu instead of tril",
    "Your self-attention mask keeps the upper triangle: each position attends to "
    "itself and the *future*. The keep-mask is lower triangular, "
    "torch.ones(S, S).tril().",
    S_DECODER,
    _triu_self,
)
CROSS_FROM_DECODER = Pitfall(
    "cross-attention taking keys/values from the decoder",
    "Your cross-attention takes its keys and values from the decoder's own states, so "
    "the target never reads the source. Queries come from the decoder, keys and values "
    "from the encoder's output: cross_attn(x, memory, memory, "
    "mask=src_mask).",
    S_DECODER,
    _cross_from_decoder,
)
SOURCE_PADDING_SEEN = Pitfall(
    "cross-attention ignores the source padding mask",
    "Your cross-attention reads the encoder's padding positions: pass the source mask "
    "(src_mask, [B, 1, 1, Ss]) to it.",
    S_DECODER,
    _cross_without_src_mask,
)
CROSS_FIRST = Pitfall(
    "cross-attention before self-attention",
    "The decoder block runs masked self-attention first, then cross-attention "
    "to the encoder, then the feed-forward.",
    S_DECODER,
    _cross_before_self,
)
MISSING_RESIDUAL = Pitfall(
    "missing residual",
    "Each of the three sublayers is wrapped as LayerNorm(x + "
    "Dropout(Sublayer(x))): the input is added "
    "back.",
    S_RESIDUAL,
    _decoder_no_residual,
)
PRE_LN_FOR_POST_LN = Pitfall(
    "LayerNorm in the wrong place (Pre-LN where Post-LN was asked)",
    "This block is Post-LN: x = LayerNorm(x + Dropout(Sublayer(x))) for each sublayer.",
    S_PLACEMENT,
    _decoder_pre_ln,
)

DECODER_PITFALLS = (
    NO_CAUSAL_MASK,
    TRIU_MASK,
    CROSS_FROM_DECODER,
    replace(CROSS_FROM_DECODER, impl=_cross_from_decoder_unmasked),
    SOURCE_PADDING_SEEN,
    CROSS_FIRST,
    MISSING_RESIDUAL,
    PRE_LN_FOR_POST_LN,
)
DECODER_ROLES = tuple(
    (attns, norms) for attns in ((0, 1), (1, 0)) for norms in norm_orders(3)
)


def _decoder_cases(cls):
    # (D, H, d_ff, B, St, Ss, source padding?, dtype); Ss != St catches keys taken from
    # the wrong side.
    configs = [
        (16, 4, 40, 2, 5, 7, True, torch.float32),
        (24, 3, 48, 3, 4, 4, True, torch.float32),
        (12, 2, 20, 2, 6, 3, False, torch.float64),
        (16, 4, 32, 4, 5, 6, True, torch.float32),
    ]
    cases = []
    for i, (d, h, f, b, st, ss, pad, dtype) in enumerate(configs):

        def make(d=d, h=h, f=f, b=b, st=st, ss=ss, pad=pad, dtype=dtype, i=i):
            torch.manual_seed(2000 + i)
            module = build_block("DecoderBlock", cls, (d, h, f, 0.1), dtype).eval()
            randomise_norms(decoder_parts(module, d, f), seed=20 + i)
            x = randn(b, st, d, seed=2100 + i, dtype=dtype)
            memory = randn(b, ss, d, seed=2200 + i, dtype=dtype)
            return module, x, memory, _source_mask(b, ss) if pad else None

        cases.append(
            Case(
                f"H={h}, d_ff={f}, x [{named(B=b, St=st, D=d)}], "
                f"memory [.., Ss={ss}, ..], source padding "
                f"{'yes' if pad else 'no'}, {dtype}",
                make,
            )
        )
    return cases


def _source_mask(b, ss):
    """Source sequence i keeps its first 2 + i positions: [B, 1, 1, Ss]."""
    lengths = (torch.arange(b) % ss + 2).clamp(max=ss)
    kept = torch.arange(ss)[None, :] < lengths[:, None]
    return kept[:, None, None, :].to(get_device())


def _call_decoder(module, x, memory, src_mask):
    return module(x, memory, src_mask)


def _probe(cls):
    __tracebackhide__ = True
    torch.manual_seed(0)
    module = build_block("DecoderBlock", cls, (16, 4, 40, 0.1)).eval()
    decoder_parts(module, 16, 40)
    _require_affine_norms(module)
    return module


def _require_affine_norms(module):
    """The exercise's nn.LayerNorm(d_model) has a weight and a bias (the check sets
    them, so that it can tell the norms apart)."""
    __tracebackhide__ = True
    for name, norm in module.named_modules():
        affine = getattr(norm, "weight", None) is not None and norm.bias is not None
        if isinstance(norm, nn.LayerNorm) and not affine:
            fail(
                "DecoderBlock",
                f"your LayerNorm '{name}' has no weight or no bias "
                "(elementwise_affine=False or bias=False): the "
                "exercise asks for nn.LayerNorm(d_model), with both.",
                S_DECODER,
            )


# The trace: forward hooks record each call of the learner's attentions, norms and
# feed-forward layers, in order, with what went in and what came out.


@dataclass(frozen=True, eq=False)  # calls are compared by identity
class Call:
    """One sublayer call: ``kind`` is "attn", "norm", "ff1" or "ff2"; ``inputs`` the
    attention's (query, key, value, mask) or the layer's (input,)."""

    kind: str
    module: nn.Module
    inputs: tuple
    output: torch.Tensor


_ATTN_SIGNATURE = inspect.signature(MultiHeadAttention.forward)


def _attn_inputs(module, args, kwargs):
    bound = _ATTN_SIGNATURE.bind(module, *args, **kwargs)
    bound.apply_defaults()
    query, key, value = (
        bound.arguments["query"],
        bound.arguments["key"],
        bound.arguments["value"],
    )
    key = query if key is None else key
    return query, key, key if value is None else value, bound.arguments["mask"]


def _recorder(kind, calls):
    def hook(module, args, kwargs, output):
        out = output[0] if isinstance(output, tuple) else output
        inputs = (
            _attn_inputs(module, args, kwargs)
            if kind == "attn"
            else (args or tuple(kwargs.values()))[:1]
        )
        # Copies: the learner's code may change a tensor in place after this call.
        kept = tuple(
            t.detach().clone() if isinstance(t, torch.Tensor) else t for t in inputs
        )
        calls.append(Call(kind, module, kept, out.detach().clone()))

    return hook


def trace_block(module, parts, x, memory, src_mask):
    """(output or Raised, [Call]) of one eval-mode call of the learner's block."""
    calls = []
    watched = [("attn", m) for m in parts.attns] + [("norm", m) for m in parts.norms]
    watched += [("ff1", parts.ff1), ("ff2", parts.ff2)]
    handles = [
        m.register_forward_hook(_recorder(kind, calls), with_kwargs=True)
        for kind, m in watched
    ]
    try:
        with torch.no_grad():
            out = run(module, (x, memory, src_mask))
    finally:
        for handle in handles:
            handle.remove()
    return out, calls


def _close(a, b) -> bool:
    return (
        isinstance(a, torch.Tensor)
        and isinstance(b, torch.Tensor)
        and a.shape == b.shape
        and torch.allclose(a.double(), b.double(), atol=1e-5, rtol=1e-4)
    )


def _combination(target, first, second):
    """(a, b) with target ≈ a·first + b·second (least squares), or None."""
    if not all(
        isinstance(t, torch.Tensor) and t.shape == target.shape for t in (first, second)
    ):
        return None
    basis = torch.stack([first.double().flatten(), second.double().flatten()], 1).cpu()
    goal = target.double().flatten()[:, None].cpu()
    coef = torch.linalg.lstsq(basis, goal).solution
    if (basis @ coef - goal).abs().max() > 1e-4 * (1 + goal.abs().max().item()):
        return None
    return round(coef[0].item(), 3), round(coef[1].item(), 3)


# The stages, in the order the block runs them. Each fails naming what it observed, or
# returns the stream that the next stage reads.

MASK_WRONG = Diagnosis(
    "causal mask wrong",
    "The self-attention's keep-mask is torch.ones(St, St).tril()[None, None] (True = "
    "attend): position i attends to positions 0..i, itself included.",
    S_DECODER,
)
SELF_INPUTS_WRONG = Diagnosis(
    "self-attention inputs wrong",
    "The decoder's first sublayer is self-attention over the target: query, key and "
    "value are all the block's input x, self_attn(x, x, x, mask=causal).",
    S_DECODER,
)
NORM_MISSING = Diagnosis(
    "LayerNorm missing after a sublayer",
    "Each of the three sublayers is wrapped as x = LayerNorm(x + "
    "Dropout(Sublayer(x))): three norms, each used once.",
    S_PLACEMENT,
)
CROSS_INPUTS_WRONG = Diagnosis(
    "cross-attention inputs wrong",
    "Cross-attention takes its queries from the decoder stream (the self-attention "
    "sublayer's output) and its keys and values from the encoder's output: "
    "cross_attn(x, memory, memory, mask=src_mask).",
    S_DECODER,
)
SOURCE_MASK_WRONG = Diagnosis(
    "cross-attention masked wrongly",
    "The cross-attention's mask is src_mask, passed as it is ([B, 1, 1, Ss], True = "
    "a real source token); the causal mask belongs to the self-attention only.",
    S_DECODER,
)
ORDER_WRONG = Diagnosis(
    "sublayers out of order",
    "The block runs masked self-attention, then cross-attention, then the "
    "feed-forward, one after the other, each as x = LayerNorm(x + "
    "Dropout(Sublayer(x))) before the next one starts.",
    S_DECODER,
)
RESIDUAL_WRONG = Diagnosis(
    "residual wrong",
    "Each sublayer is wrapped as LayerNorm(x + Dropout(Sublayer(x))), x being that "
    "sublayer's own input: the input is added back once, unscaled.",
    S_RESIDUAL,
)
PRE_LN_STAGE = Diagnosis(
    "LayerNorm before the sublayer",
    "This block is Post-LN: the sublayer reads the stream x itself, and the norm comes "
    "after the residual sum, x = LayerNorm(x + Dropout(Sublayer(x))).",
    S_PLACEMENT,
)
NORM_SHARED = Diagnosis(
    "one LayerNorm for several sublayers",
    "Each of the three sublayers has its own nn.LayerNorm(d_model), with its own "
    "weights: three modules, each used once.",
    S_PLACEMENT,
)
ATTENTION_SHARED = Diagnosis(
    "one attention for both sublayers",
    "Self-attention and cross-attention are two MultiHeadAttention modules with their "
    "own weights.",
    S_DECODER,
)
FF_WRONG = Diagnosis(
    "feed-forward wrong",
    "The feed-forward is Linear(d_model, d_ff) -> ReLU -> Linear(d_ff, d_model), on "
    "the cross-attention sublayer's output.",
    S_DECODER,
)
OUTPUT_WRONG = Diagnosis(
    "block output wrong",
    "The block returns the last LayerNorm's output, LayerNorm(x + Dropout(FF(x))), "
    "nothing added or changed after it.",
    S_RESIDUAL,
)


@dataclass(frozen=True)
class Trace:
    """One traced call: the block's inputs and output, and its sublayer calls."""

    x: torch.Tensor
    memory: torch.Tensor
    src_mask: torch.Tensor | None
    out: torch.Tensor
    calls: tuple

    def after(self, call, kind):
        """The first call of ``kind`` after ``call`` (None: none)."""
        later = self.calls[self.calls.index(call) + 1 :]
        return next((c for c in later if c.kind == kind), None)

    def before(self, call, kind):
        return [c for c in self.calls[: self.calls.index(call)] if c.kind == kind]


def _pattern(mask, b, h, sq, sk):
    """The keep pattern [B, H, Sq, Sk] a mask means (None: keep everything)."""
    if mask is None:
        return torch.ones(b, h, sq, sk, dtype=torch.bool)
    return torch.broadcast_to(mask.bool().cpu(), (b, h, sq, sk))


def _rows(pattern):
    """[Sq, Sk] bool -> "query 0: keys [..]; query 1: ..." for the first rows."""
    shown = [
        f"query {i}: keys {row.nonzero().flatten().tolist()}"
        for i, row in enumerate(pattern[:3])
    ]
    return "; ".join(shown)


def _self_mask_problem(mask, q, heads):
    """The self-attention's mask against tril, in words; None when it is tril."""
    b, st = q.size(0), q.size(1)
    if mask is None:
        return NO_CAUSAL_MASK, "Your self-attention was called with mask=None."
    got = _pattern(mask, b, heads, st, st)
    tril = torch.ones(st, st, dtype=torch.bool).tril()
    if torch.equal(got, tril.expand_as(got)):
        return None
    first = got[0, 0]
    if (got == first).all():
        if torch.equal(first, tril.T):
            return TRIU_MASK, "Your self-attention's mask is the upper triangle (triu)."
        if torch.equal(first, ~tril):
            return MASK_WRONG, (
                "Your self-attention's mask is True on the future "
                "positions only (triu(diagonal=1)), the complement of "
                "the keep-mask: True must mean 'attend'."
            )
        if torch.equal(first, tril.tril(-1)):
            return MASK_WRONG, (
                "Your self-attention's mask hides the diagonal "
                "(tril(diagonal=-1)): position i must attend to itself "
                "too, and position 0 is left with no key at all."
            )
        if first.all():
            return NO_CAUSAL_MASK, "Your self-attention's mask keeps every position."
    return MASK_WRONG, (
        f"Your self-attention's mask keeps, for sequence 0: "
        f"{_rows(first)}; expected query i: keys 0..i."
    )


def _cross_mask_problem(mask, src_mask, q, k, heads):
    b, sq, sk = q.size(0), q.size(1), k.size(1)
    want = _pattern(src_mask, b, heads, sq, sk)
    if mask is None and src_mask is not None:
        return SOURCE_PADDING_SEEN, "Your cross-attention was called with mask=None."
    got = _pattern(mask, b, heads, sq, sk)
    if torch.equal(got, want):
        return None
    if src_mask is not None and torch.equal(got, ~want):
        return SOURCE_MASK_WRONG, (
            "Your cross-attention's mask is ~src_mask: it keeps "
            "the padding and hides the real source tokens."
        )
    causal = torch.ones(sq, sk, dtype=torch.bool).tril()
    if torch.equal(got, (want & causal).expand_as(got)) or torch.equal(
        got, causal.expand_as(got)
    ):
        return SOURCE_MASK_WRONG, (
            "Your cross-attention's mask includes the causal "
            "triangle: a target position may read every source "
            "token (the source is all known)."
        )
    return SOURCE_MASK_WRONG, (
        f"Your cross-attention keeps, for sequence 0: "
        f"{_rows(got[0, 0])}; src_mask keeps "
        f"{_rows(want[0, 0])}."
    )


def _stage_self(t, heads):
    """Stage 1: the first attention call is the masked self-attention on x."""
    call = next(c for c in t.calls if c.kind == "attn")
    q, k, v, mask = call.inputs
    second = [c for c in t.calls if c.kind == "attn"][1]
    if _close(k, t.memory) or _close(q, t.memory):
        if _close(second.inputs[1], t.memory):
            return SELF_INPUTS_WRONG, (
                "Both of your attention calls read the "
                "encoder's output (memory): the first one, "
                "the self-attention, must read x only."
            )
        return ORDER_WRONG, (
            "Your first attention call reads the encoder's output "
            "(memory): the cross-attention runs before the "
            "self-attention."
        )
    if not _close(q, t.x):
        earlier = [c for c in t.before(call, "norm") if _close(q, c.output)]
        if earlier:
            return PRE_LN_STAGE, (
                "Your self-attention reads LayerNorm(x), not the "
                "block's input x (Pre-LN placement)."
            )
        return None, "the self-attention's query is not the block's input x"
    if not (_close(k, q) and _close(v, q)):
        return SELF_INPUTS_WRONG, (
            "Your self-attention's keys or values are not its queries (x)."
        )
    return _self_mask_problem(mask, q, heads)


def _stage_wrapped(t, call, stream, name, used):
    """The norm after ``call`` reads stream + call's output; -> (problem, norm call)."""
    norm = t.after(call, "norm")
    nxt = t.after(call, "attn") if call.kind == "attn" else None
    if norm is None:
        return (NORM_MISSING, f"No LayerNorm runs after the {name}."), norm
    if nxt is not None and t.calls.index(nxt) < t.calls.index(norm):
        return (
            ORDER_WRONG,
            f"The next attention starts before a LayerNorm has run "
            f"on the {name}'s sum.",
        ), norm
    if norm.module in used:
        return (
            NORM_SHARED,
            f"The LayerNorm after the {name} is the same module as "
            "an earlier sublayer's.",
        ), norm
    read, y = norm.inputs[0], call.output
    if _close(read, stream + y):
        return None, norm
    if stream is not t.x and _close(read, t.x + y):
        return (
            RESIDUAL_WRONG,
            f"The LayerNorm after the {name} reads x_in + "
            f"{name}(...), with x_in the block's input, not the "
            f"{name}'s own input.",
        ), norm
    if _close(read, stream + torch.relu(y)):
        return (
            FF_WRONG if call.kind == "ff2" else RESIDUAL_WRONG,
            f"The LayerNorm after the {name} reads x + ReLU({name}(x)): a ReLU "
            "after the sublayer's output.",
        ), norm
    return _residual_reading(read, stream, y, name), norm


def _residual_reading(read, stream, y, name):
    coef = _combination(read, stream, y)
    if coef is None:
        return None, f"the LayerNorm after the {name} does not read x + {name}(x)"
    a, b = coef
    if abs(a) < 1e-3 and abs(b - 1) < 1e-3:
        return MISSING_RESIDUAL, (
            f"The LayerNorm after the {name} reads {name}(x) "
            "alone: x is not added back."
        )
    if abs(a - 1) < 1e-3 and abs(b) < 1e-3:
        return RESIDUAL_WRONG, (
            f"The LayerNorm after the {name} reads x alone: the "
            f"{name}'s output is never added."
        )
    return RESIDUAL_WRONG, (
        f"The LayerNorm after the {name} reads {a:g}·x + "
        f"{b:g}·{name}(x); expected 1·x + 1·{name}(x)."
    )


def _stage_cross(t, first, h1, heads):
    """Stage 3: the second attention call: queries h1, keys/values memory, src_mask."""
    attns = [c for c in t.calls if c.kind == "attn"]
    call = attns[1]
    if any(c.kind == "ff1" for c in t.before(call, "ff1")):
        return (ORDER_WRONG, "Your feed-forward runs before the cross-attention."), call
    if call.module is first.module:
        return (
            ATTENTION_SHARED,
            "Both attention calls use the same MultiHeadAttention module.",
        ), call
    q, k, v, mask = call.inputs
    if _close(q, t.memory):
        return (
            CROSS_INPUTS_WRONG,
            "Your cross-attention takes its queries from "
            "memory: query is the decoder stream, key and "
            "value are memory.",
        ), call
    if not _close(k, t.memory) and (_close(k, h1) or _close(k, t.x)):
        return (
            CROSS_FROM_DECODER,
            "Your cross-attention's keys are the decoder's states, not memory.",
        ), call
    if not (_close(k, t.memory) and _close(v, t.memory)):
        return (
            CROSS_INPUTS_WRONG,
            "Your cross-attention's keys or values are not the "
            "encoder's output (memory).",
        ), call
    if _close(q, t.x) and not _close(q, h1):
        return (
            CROSS_INPUTS_WRONG,
            "Your cross-attention's queries are the block's "
            "input x, not the self-attention sublayer's output "
            "(x was not updated between the sublayers).",
        ), call
    if not _close(q, h1):
        if any(_close(q, c.output) for c in t.before(call, "norm")):
            return (
                PRE_LN_STAGE,
                "Your cross-attention reads a LayerNorm of its input "
                "(Pre-LN placement).",
            ), call
        return (
            None,
            "the cross-attention's query is not the self-attention sublayer's output",
        ), call
    return _cross_mask_problem(mask, t.src_mask, q, k, heads), call


def _stage_ff(t, after, h2):
    """Stage 5: Linear -> ReLU -> Linear on h2; -> (problem, second Linear's call)."""
    if not any(c.kind == "ff2" for c in t.calls):
        return (
            None,
            "the feed-forward's Linear modules were never called (hooks "
            "cannot see F.linear on their weights)",
        ), None
    ff1 = t.after(after, "ff1")
    ff2 = t.after(ff1, "ff2") if ff1 is not None else None
    if ff1 is None or ff2 is None:
        return (
            ORDER_WRONG,
            "The feed-forward's layers do not run after the cross-attention sublayer.",
        ), None
    if not _close(ff1.inputs[0], h2):
        if any(_close(ff1.inputs[0], c.output) for c in t.before(ff1, "norm")[2:]):
            return (
                PRE_LN_STAGE,
                "Your feed-forward reads a LayerNorm of its input (Pre-LN placement).",
            ), ff2
        reads = (
            "the block's input x" if _close(ff1.inputs[0], t.x) else "something else"
        )
        return (
            FF_WRONG,
            f"Your feed-forward reads {reads}, not the cross-attention "
            "sublayer's output.",
        ), ff2
    hidden, given = ff1.output, ff2.inputs[0]
    if _close(given, torch.relu(hidden)):
        return None, ff2
    for name, act in (
        ("no activation", hidden),
        ("GELU", F.gelu(hidden)),
        ("tanh", torch.tanh(hidden)),
        ("sigmoid", torch.sigmoid(hidden)),
        ("LeakyReLU", F.leaky_relu(hidden)),
        ("SiLU", F.silu(hidden)),
        ("ELU", F.elu(hidden)),
    ):
        if _close(given, act):
            return (
                FF_WRONG,
                f"Between the feed-forward's layers you apply {name}; "
                "the exercise asks for ReLU.",
            ), ff2
    return (None, "the feed-forward's second Linear does not read ReLU(first)"), ff2


def _stage_output(t, last_norm, h2):
    if _close(t.out, last_norm.output):
        return None
    coef = _combination(t.out, last_norm.output, h2)
    if coef is not None:
        return OUTPUT_WRONG, (
            f"Your block returns {coef[0]:g}·LayerNorm₃(...) + "
            f"{coef[1]:g}·(the feed-forward's input), not the last "
            "LayerNorm's output."
        )
    return OUTPUT_WRONG, "Your block does not return the last LayerNorm's output."


def _walk(t, heads):
    """(Diagnosis or None, what was observed) at the first stage that departs, or
    None when every stage matches."""
    found = _stage_self(t, heads)
    if found:
        return found
    first = next(c for c in t.calls if c.kind == "attn")
    found, n1 = _stage_wrapped(t, first, t.x, "self-attention", ())
    if found:
        return found
    found, cross = _stage_cross(t, first, n1.output, heads)
    if found:
        return found
    found, n2 = _stage_wrapped(t, cross, n1.output, "cross-attention", (n1.module,))
    if found:
        return found
    found, ff2 = _stage_ff(t, n2, n2.output)
    if found:
        return found
    found, n3 = _stage_wrapped(
        t, ff2, n2.output, "feed-forward", (n1.module, n2.module)
    )
    return found or _stage_output(t, n3, n2.output)


def _trace_case(title, case):
    """Fail at the first stage of the learner's block that departs on ``case``."""
    __tracebackhide__ = True
    module, x, memory, src_mask = case.make()
    parts = decoder_parts(module, x.size(-1))
    out, calls = trace_block(module, parts, x.clone(), memory.clone(), src_mask)
    if isinstance(out, Raised):
        fail(title, f"your block raised {out!r} while the check ran case {case.label}.")
    if type(out) is not torch.Tensor or out.shape != x.shape:
        what = list(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        fail(
            title,
            f"on case {case.label}: your block returned {what}; forward "
            f"returns one tensor [B, St, D] = {list(x.shape)}.",
            S_DECODER,
        )
    attns = [c for c in calls if c.kind == "attn"]
    if len(attns) != 2 or not any(c.kind == "norm" for c in calls):
        # A module run through .forward() or functions on its weights is invisible to
        # hooks: say what was seen, claim nothing.
        norms = sum(c.kind == "norm" for c in calls)
        fail(
            title,
            f"on case {case.label} the forward hooks saw {len(attns)} "
            f"attention call(s) (expected 2) and {norms} LayerNorm call(s) "
            f"(expected 3). It {UNEXPLAINED}.",
            S_DECODER,
        )
    heads = attns[0].module.n_heads
    found = _walk(Trace(x, memory, src_mask, out, tuple(calls)), heads)
    if found is None:
        return
    diagnosis, observed = found
    if diagnosis is None:
        fail(
            title,
            f"on case {case.label}, the first stage that departs: {observed} "
            f"(observed with forward hooks). It {UNEXPLAINED}.",
            S_DECODER,
        )
    diagnosis.fail(title, f"On case {case.label}: {observed}")


def _without_src_mask(title, cls):
    """forward(x, memory) must work (src_mask defaults to None) and leave its inputs
    as they were."""
    __tracebackhide__ = True
    module = _probe(cls)
    x, memory = randn(2, 4, 16, seed=41), randn(2, 3, 16, seed=42)
    before = (x.clone(), memory.clone())
    with torch.no_grad():
        got = run(module, (x, memory))
        want = run(module, (x.clone(), memory.clone(), None))
    for name, old, new in zip(("x", "memory"), before, (x, memory)):
        if not isinstance(got, Raised) and not torch.equal(old, new):
            fail(
                title,
                f"your forward changed its input {name} in place (x += ..., "
                "or an in-place op on it): write x = x + ..., so that the "
                "caller's tensor stays as it was.",
                S_DECODER,
            )
    if isinstance(got, Raised):
        fail(
            title,
            f"forward(x, memory) without src_mask raised {got!r}. The "
            "exercise's signature is forward(x, memory, src_mask=None).",
            S_DECODER,
        )
    if not _close(got, want):
        fail(
            title,
            "forward(x, memory) and forward(x, memory, None) differ: src_mask "
            "defaults to None (no source padding).",
            S_DECODER,
        )


def _fail_if_random(title, case):
    """In eval mode two calls must agree: dropout off."""
    __tracebackhide__ = True
    module, x, memory, src_mask = case.make()
    with torch.no_grad():
        observed = run(_deterministic, (module, x, memory, src_mask))
    if isinstance(observed, str):
        DROPOUT_IN_EVAL.fail(title, f"On case {case.label}: {observed}")


def _agrees(got, want) -> bool:
    """``same`` without its description of the difference (this runs for every role of
    every pitfall)."""
    if isinstance(got, Raised) or isinstance(want, Raised):
        return same(got, want, 1e-5, 1e-4)
    return (
        type(got) is torch.Tensor
        and type(want) is torch.Tensor
        and got.shape == want.shape
        and got.dtype == want.dtype
        and torch.allclose(got, want, atol=1e-5, rtol=1e-4)
    )


def _matches_some_role(theirs, made, fn, agree) -> bool:
    """Whether ``fn(role, *inputs)`` agrees with the learner on every case for some
    role. ``made``: each case's inputs, built once (the recomputations only read the
    learner's parts)."""
    return any(
        all(agree(g, run(fn, (role, *inputs))) for g, inputs in zip(theirs, made))
        for role in DECODER_ROLES
    )


def _grade_decoder(title, cls):
    __tracebackhide__ = True
    cases = _decoder_cases(cls)
    theirs = [run(_call_decoder, case.make()) for case in cases]
    made = [
        (decoder_parts(m, x.size(-1)), x, memory, mask)
        for m, x, memory, mask in (case.make() for case in cases)
    ]
    ours = [run(decoder_block, (DECODER_ROLES[0], *inputs)) for inputs in made]
    right = lambda g, w: _right(g, w, 1e-5, 1e-4)  # noqa: E731
    if _matches_some_role(theirs, made, decoder_block, right):
        return
    agree = _agrees
    for pitfall in DECODER_PITFALLS:
        if _matches_some_role(theirs, made, pitfall.impl, agree):
            pitfall.fail(title)
    fail_if_raised(title, cases, theirs)
    case, _, _ = _first_wrong(cases, theirs, ours, 1e-5, 1e-4)
    _fail_if_random(title, case)
    _trace_case(title, case)
    fail_unexplained(title, cases, theirs, ours, 1e-5, 1e-4)


@single_threaded
def check_decoder_block(cls) -> None:
    """``cls(d_model, n_heads, d_ff, dropout)``, ``forward(x [B, St, D],
    memory [B, Ss, D], src_mask=None) -> [B, St, D]``: Post-LN, causal self-attention,
    cross-attention to ``memory``, feed-forward."""
    __tracebackhide__ = True
    title = "DecoderBlock"
    verify_integrity()
    _probe(cls)
    _grade_decoder(title, cls)
    _without_src_mask(title, cls)
    _check_sublayer_dropout(title, cls)
    passed(
        title,
        "matches the reference on 4 cases; in train mode each sublayer's "
        "output is dropped at the block's rate",
    )


# ------------------------------------------------------- decoder dropout, train mode
# Eval mode hides dropout, so the block also runs in train mode at a moderate rate. In
# a Post-LN block norm k reads stream_k + Dropout(sublayer_k(...)), so its input minus
# the stream it started from is the dropped branch: the fraction of the sublayer's
# output zeroed there is measured for each of the three sublayers.

DROPOUT_PS = (0.3, 0.5)
#: (D, H, d_ff, B, St, Ss): 4·8·16 = 512 entries per branch, so the measured fraction
#: is within ±0.1 of p by far (its standard deviation is about 0.02).
DROPOUT_CONFIG = (16, 4, 32, 4, 8, 6)
SUBLAYERS = ("the masked self-attention", "the cross-attention", "the feed-forward")

SUBLAYER_DROPOUT = Diagnosis(
    "sublayer dropout missing or at the wrong rate",
    "Each of the three sublayers is wrapped as LayerNorm(x + Dropout(Sublayer(x))): "
    "in train mode dropout zeroes a fraction p (the block's `dropout`) of *every* "
    "sublayer's output, self-attention, cross-attention and feed-forward alike, and "
    "scales the rest by 1/(1-p) (nn.Dropout(dropout), or F.dropout(t, dropout, "
    "self.training)).",
    S_DROPOUT,
)


def _train_trace(title, cls, p):
    """(label, x, the calls) of one train-mode call of ``cls(D, H, d_ff, p)`` in
    float64 on x [B, St, D], memory [B, Ss, D], no source mask."""
    __tracebackhide__ = True
    d, h, f, b, st, ss = DROPOUT_CONFIG
    label = (
        f"D={d}, H={h}, d_ff={f}, x [{b}, {st}, {d}], memory [{b}, {ss}, {d}], "
        f"torch.float64, dropout={p}, train mode"
    )
    module = build_block("DecoderBlock", cls, (d, h, f, p), torch.float64, seed=51)
    x = randn(b, st, d, seed=510, dtype=torch.float64)
    memory = randn(b, ss, d, seed=511, dtype=torch.float64)
    with torch.random.fork_rng(devices=[]), quiet():
        torch.manual_seed(52)
        out, calls = trace_block(
            module.train(), decoder_parts(module, d, f), x, memory, None
        )
    if isinstance(out, Raised):
        fail(
            title,
            f"your block raised {out!r} in train mode on case {label}.",
            S_DECODER,
        )
    return label, x, calls


def _branches(x, calls):
    """[(sublayer name, what was added to the stream, the sublayer's output)] for the
    three sublayers, read from the calls in order; [] when they cannot be read."""
    attns = [c.output for c in calls if c.kind == "attn"]
    ff2 = [c.output for c in calls if c.kind == "ff2"]
    norms = [c for c in calls if c.kind == "norm"]
    if len(attns) != 2 or len(ff2) != 1 or len(norms) != 3:
        return []
    streams = (x, norms[0].output, norms[1].output)
    return [
        (name, norm.inputs[0] - stream, before)
        for name, norm, stream, before in zip(
            SUBLAYERS, norms, streams, (*attns, ff2[0])
        )
        if isinstance(norm.inputs[0], torch.Tensor)
        and norm.inputs[0].shape == before.shape == stream.shape
    ]


def _branch_rates(x, calls):
    """[(sublayer name, fraction of its output zeroed on the branch, kept scale)]."""
    found = []
    for name, branch, before in _branches(x, calls):
        alive = before.abs() > 1e-6
        zeroed = float(
            ((branch == 0) & alive).double().sum() / alive.double().sum().clamp_min(1)
        )
        kept = (branch != 0) & alive
        scale = (
            float((branch[kept] / before[kept]).median()) if kept.sum() >= 10 else None
        )
        found.append((name, zeroed, scale))
    return found


def _rate_problem(name, zeroed, scale, p) -> str | None:
    """What is off in one sublayer's measured dropout at rate ``p``, or None."""
    if abs(zeroed - p) > 0.1:
        return (
            f"{zeroed:.0%} of {name}'s output was zeroed on its way into the "
            f"residual sum, expected about {p:.0%} (p = {p})"
        )
    if scale is not None and abs(scale * (1 - p) - 1) > 0.02:
        return (
            f"the kept entries of {name}'s output were multiplied by "
            f"{scale:.3g}, expected 1/(1-p) = {1 / (1 - p):.3g}"
        )
    return None


def _check_sublayer_dropout(title, cls):
    """At dropout 0.3 and 0.5 in train mode each sublayer's output loses about that
    fraction on its way into the residual sum, the kept values scaled by 1/(1-p)."""
    __tracebackhide__ = True
    for p in DROPOUT_PS:
        label, x, calls = _train_trace(title, cls, p)
        for name, zeroed, scale in _branch_rates(x, calls):
            problem = _rate_problem(name, zeroed, scale, p)
            if problem:
                SUBLAYER_DROPOUT.fail(title, f"On case {label}: {problem}.")


# -------------------------------------------------------------------- decoder behaviour
# Probes on one block in eval mode: ``probe(module, x, memory, src_mask)`` returns what
# it observed when the property fails, else None.


def _deterministic(module, x, memory, src_mask):
    a = module(x.clone(), memory.clone(), src_mask)
    b = module(x.clone(), memory.clone(), src_mask)
    if torch.equal(a, b):
        return None
    differ = (a != b).double().mean().item()
    return (
        f"Two calls in eval mode gave different outputs ({differ:.0%} of the "
        "entries differ)."
    )


def _reads_memory(module, x, memory, src_mask):
    base = module(x.clone(), memory.clone(), src_mask)
    if not torch.allclose(module(x.clone(), memory + 1.0, src_mask), base, atol=1e-5):
        return None
    return "Changing the encoder's output (memory) changed nothing."


def _past_ignores_future(module, x, memory, src_mask):
    future = x.clone()
    future[:, 3:] = future[:, 3:] * 2.0 + 1.0
    base = module(x.clone(), memory.clone(), src_mask)
    changed = (module(future, memory.clone(), src_mask)[:, :3] - base[:, :3]).abs()
    if changed.max() <= 1e-5:
        return None
    moved = [i for i in range(3) if changed[:, i].max() > 1e-5]
    return (
        f"Changing target positions 3..5 changed the outputs at positions {moved} "
        f"(by up to {changed.max().item():.3g}): the past sees the future."
    )


def _masked_source_invisible(module, x, memory, src_mask):
    hidden = memory.clone()
    hidden[0, 3:] = 100.0  # masked source positions of sequence 0
    base = module(x.clone(), memory.clone(), src_mask)
    changed = (module(x.clone(), hidden, src_mask) - base).abs().max().item()
    if changed <= 1e-5:
        return None
    return (
        "Changing the masked (padding) source positions 3..4 of sequence 0 "
        f"changed its output by up to {changed:.3g}."
    )


DECODER_PROBES = (
    (_deterministic, DROPOUT_IN_EVAL),
    (_reads_memory, CROSS_FROM_DECODER),
    (_past_ignores_future, NO_CAUSAL_MASK),
    (_masked_source_invisible, SOURCE_PADDING_SEEN),
)


def _observe(title, probe, *args):
    """What ``probe`` observed (None: the property holds); the learner's exception
    fails the check naming their line and the probe."""
    __tracebackhide__ = True
    with torch.no_grad(), quiet():
        try:
            return probe(*args)
        except Exception as exc:  # the learner's code may raise anything
            name = probe.__name__.strip("_").replace("_", " ")
            fail(
                title,
                f"your block raised {Raised(exc)!r} while the check ran the "
                f"probe '{name}' (x [B=2, St=6, D=16], memory [.., Ss=5, ..], "
                "src_mask [2, 1, 1, 5]).",
            )


@single_threaded
def check_decoder_behaviour(cls) -> None:
    """Probes any right decoder block passes: the future never changes the past, the
    output reads the memory, masked source positions are invisible, eval mode is
    deterministic."""
    __tracebackhide__ = True
    title = "DecoderBlock behaviour"
    module = _probe(cls)
    x, memory = randn(2, 6, 16, seed=31), randn(2, 5, 16, seed=32)
    src_mask = torch.tensor(
        [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool, device=get_device()
    )[:, None, None, :]
    for probe, diagnosis in DECODER_PROBES:
        observed = _observe(title, probe, module, x, memory, src_mask)
        if observed:
            diagnosis.fail(title, observed)
    passed(
        title,
        "causal, reads the memory, ignores source padding, deterministic in eval mode",
    )


@single_threaded
def check_decoder_by_hand(cls) -> None:
    """Hidden test: the learner wired the block, not PyTorch's
    TransformerDecoderLayer or the reference's."""
    __tracebackhide__ = True
    torch.manual_seed(0)
    module = build_block("DecoderBlock", cls, (16, 4, 40, 0.1))
    x, memory = randn(2, 5, 16, seed=0), randn(2, 7, 16, seed=1)
    check_block_not_delegated("DecoderBlock", module, x, memory)


seal(__name__)
