"""Checks for exercise ``sinusoidal_encoding`` of chapter 5 (book/ch05_model):
``sinusoidal_encoding(n_positions, d_model) -> [n_positions, d_model]``, the table of
Vaswani et al. §3.5, sine in the even columns and cosine in the odd ones.

The check first compares with the reference and names a known wrong variant that
reproduces the learner's outputs on every case. Otherwise it *measures*: the table is
fitted (layout, frequencies, phases, amplitude), or read column by column when no
sin/cos pairing fits it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ...guard.integrity import seal
from ..diagnosis import (
    Case,
    Diagnosis,
    Pitfall,
    Raised,
    fail,
    run,
    single_threaded,
)
from .grading import first_wrong, grade_function, is_right
from .sections import (
    S_SINUSOID,
)

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True


def _numbers(values, digits: int = 4) -> str:
    return "[" + ", ".join(f"{float(v):.{digits}g}" for v in values) + "]"


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


GROWING_FREQUENCIES = Diagnosis(
    "wrong frequencies (positions multiplied by 10000^(2i/D))",
    "Your frequencies grow with i instead of shrinking: divide the position by "
    "10000^(2i/D) (div_term = exp(-2i·ln(10000)/D), note the minus "
    "sign).",
    S_SINUSOID,
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
        (
            "sines in the first half, cosines in the second ([sin | cos] "
            "concatenated, not interleaved)"
        ),
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
        (
            f"They fit ω_i = {omega0:.4g}·b^(-2i/D) with base b = {base:.5g} "
            f"(expected 10000), i.e. 10000^(-k·i/D) with k = {k:.3g} (expected 2)"
        )
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
        (
            "your even columns are sin(ω·pos), and your odd ones are sin(ω·pos - π/2) "
            "= -cos(ω·pos): a phase of -π/2 where cos(x) = sin(x + π/2) needs +π/2"
        ),
        (
            "your odd columns are cos(ω·pos), and your even ones are cos(ω·pos + π/2) "
            "= -sin(ω·pos): a phase of +π/2 on the sines"
        ),
    ),
    LAYOUTS[3][0]: (
        (
            "your first half holds sin(ω·pos) and your second half sin(ω·pos - π/2) "
            "= -cos(ω·pos), concatenated rather than interleaved"
        ),
        (
            "your second half holds cos(ω·pos) and your first half cos(ω·pos + π/2) "
            "= -sin(ω·pos), concatenated rather than interleaved"
        ),
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


def fit_problems(fit, d, n) -> list:
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
    form = _form_problem(got, n, d)
    if form:
        fail(title, f"on case {where}: {form}.", S_SINUSOID)
    fit = fit_sinusoids(got)
    if fit is not None and fit_problems(fit, d, n):
        fitted = "; ".join(fit_problems(fit, d, n))
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
        if not is_right(got, _sinusoid_table(n, d), 1e-4, 1e-4):
            _measure_table(title, got, n, d, f"n_positions={n}, d_model={d}")
        case, got, _ = first_wrong(cases, theirs, ours, 1e-4, 1e-4)
        n, d = case.make()
        _measure_table(title, got, n, d, case.label)

    return measure


@single_threaded
def check_sinusoidal_encoding(fn) -> None:
    """``fn(n_positions, d_model) -> [n_positions, d_model]``, the table of Vaswani et
    al. §3.5 (float32 or float64, any device)."""
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


seal(__name__)
