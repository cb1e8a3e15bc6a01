"""Checks for exercises ``noam_lambda`` and ``make_scheduler`` of chapter 6
(book/ch06_training): ``noam_lambda(step, d_model, warmup) -> float``, LambdaLR's
multiplier for step 0, 1, ...; ``make_scheduler(optimizer, d_model, warmup)``, a
scheduler whose ``step()`` sets the Noam rate for the next update and nothing else.
"""

from __future__ import annotations

import functools
import math

import torch
from torch import nn

from tformer_ref.device import get_device
from tformer_ref.training import noam_lambda

from ...guard.integrity import seal
from ..diagnosis import (
    Case,
    Diagnosis,
    Pitfall,
    Raised,
    fail,
    passed,
    quiet,
    run,
    run_or_fail,
    single_threaded,
)
from ..flow import fallback
from ..measure.closeness import all_near
from ..measure.recorders import recording_sgd
from .references import fail_first_problem
from .sections import S_LR

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True


def _paper(n, d, w):
    return d**-0.5 * min(n**-0.5, n * w**-1.5)


def _noam_off_by_one_guarded(step, d, w):
    return _paper(max(step, 1), d, w)


def _noam_zero_at_start(step, d, w):
    return 0.0 if step == 0 else _paper(step, d, w)


def _noam_plus_two(step, d, w):
    return _paper(step + 2, d, w)


def _noam_warmup_exponent(step, d, w):
    n = step + 1
    return d**-0.5 * min(n**-0.5, n * w**-0.5)


def _noam_no_d_model(step, d, w):
    n = step + 1
    return min(n**-0.5, n * w**-1.5)


def _noam_max(step, d, w):
    n = step + 1
    return d**-0.5 * max(n**-0.5, n * w**-1.5)


def _rates(fn):
    """``fn(step, d_model, warmup)`` -> (d_model, warmup, steps) -> float64 tensor of
    its rates."""

    def rates(d, w, steps):
        return torch.tensor([float(fn(s, d, w)) for s in steps], dtype=torch.float64)

    return rates


NOAM_PITFALLS = [
    Pitfall(
        "Noam schedule off by one",
        "Your rate at LambdaLR's step s is the paper's rate for update s (or a "
        "guard such as max(step, 1)): LambdaLR counts from 0 and step 0 *is* the "
        "first update, so use n = step + 1.",
        S_LR,
        _noam_off_by_one_guarded,
    ),
    Pitfall(
        "Noam schedule off by one",
        "Your first update gets learning rate 0 and every later one the rate of "
        "the update before it: LambdaLR's step 0 is the first update, so use n = "
        "step + 1 (no special case needed).",
        S_LR,
        _noam_zero_at_start,
    ),
    Pitfall(
        "Noam schedule off by one",
        "Your rates are one update ahead: LambdaLR's step 0 is update n = 1, so "
        "n = step + 1, not step + 2.",
        S_LR,
        _noam_plus_two,
    ),
    Pitfall(
        "warm-up exponent wrong",
        "The warm-up branch is n · warmup^-1.5 (so the two branches meet at n = "
        "warmup); you used warmup^-0.5.",
        S_LR,
        _noam_warmup_exponent,
    ),
    Pitfall(
        "missing the d_model^-0.5 factor",
        "The whole schedule is scaled by d_model^-0.5: wider models take smaller "
        "steps.",
        S_LR,
        _noam_no_d_model,
    ),
    Pitfall(
        "max instead of min",
        "The rate is the *minimum* of the two branches: it rises linearly while n "
        "< warmup, then decays like n^-0.5. With max it starts huge and never "
        "warms up.",
        S_LR,
        _noam_max,
    ),
]

# Recognised at step 0 alone: an exception or an infinite rate has no values to compare.
NOAM_DIVIDES_BY_ZERO = Diagnosis(
    "Noam schedule divides by zero at step 0",
    "LambdaLR calls your function with step 0 before the first update (the seed's "
    "formula uses step^-0.5). Use n = step + 1.",
    S_LR,
)


# Recognised by measuring the learner's rates: the step offset, the exponents of the two
# branches, the d_model scale and the warm-up coefficient, in that order (each later
# measurement assumes the earlier ones came out right).
_NOAM = (
    "Noam: lr(n) = d_model^-0.5 · min(n^-0.5, n · warmup^-1.5) for update n = "
    "step + 1: linear warm-up, peak at n = warmup, then decay like n^-0.5."
)
NOAM_STEP_OFFSET = Diagnosis(
    "Noam schedule off by one",
    "LambdaLR's step 0 is the first update, n = 1: use n = step + 1. " + _NOAM,
    S_LR,
)
NOAM_STEP_ZERO = Diagnosis(
    "first update's rate wrong",
    "Step 0 needs no special case: with n = step + 1 it is update 1, rate "
    "d_model^-0.5 · warmup^-1.5. " + _NOAM,
    S_LR,
)
NOAM_DECAY_EXPONENT = Diagnosis(
    "decay exponent wrong",
    "After the warm-up the rate decays like n^-0.5 (the inverse square root). " + _NOAM,
    S_LR,
)
NOAM_WARMUP_SHAPE = Diagnosis(
    "warm-up not linear",
    "During the warm-up the rate grows linearly in n: n · warmup^-1.5. " + _NOAM,
    S_LR,
)
NOAM_SCALE = Diagnosis(
    "schedule scaled wrongly",
    "The whole schedule is multiplied by d_model^-0.5 (and by nothing else: the "
    "optimizer's lr is 1.0). " + _NOAM,
    S_LR,
)
NOAM_WARMUP_SCALE = Diagnosis(
    "warm-up exponent wrong",
    "The warm-up branch is n · warmup^-1.5, so that it meets the decay branch n^-0.5 "
    "at n = warmup. " + _NOAM,
    S_LR,
)
NOAM_PEAK = Diagnosis(
    "warm-up length wrong",
    "The rate is the minimum of the two branches and peaks at n = warmup (step "
    "warmup - 1). " + _NOAM,
    S_LR,
)
NOAM_NOT_A_NUMBER = Diagnosis(
    "noam_lambda does not return a number",
    "Return the multiplier as a Python float (or a 0-d tensor): LambdaLR multiplies "
    "the base lr by it.",
    S_LR,
)


def _noam_cases():
    configs = [(512, 4000), (64, 200), (128, 50), (32, 1)]
    return [
        Case(
            f"d_model={d}, warmup={w}",
            lambda d=d, w=w: (d, w, [0, 1, 2, 3, w - 1, w, w + 1, 3 * w, 10 * w]),
        )
        for d, w in configs
    ]


def _rate_at_step_zero_breaks(noam_fn) -> str | None:
    """What goes wrong with ``noam_fn(0, 64, 200)``, or None when it is a finite
    number."""
    first = run(lambda: float(noam_fn(0, 64, 200)), ())
    arithmetic = (ZeroDivisionError, ValueError, OverflowError, FloatingPointError)
    if isinstance(first, Raised) and isinstance(first.exc, arithmetic):
        return f"noam_lambda(0, 64, 200) raised {first!r}."
    if isinstance(first, float) and not math.isfinite(first):
        return f"noam_lambda(0, 64, 200) returned {first}."
    return None  # any other exception: reported with the case that raised it


def _noam_rate(title, noam_fn, step, d, w) -> float:
    """``float(noam_fn(step, d, w))``; fails saying what the learner's code did."""
    out = run_or_fail(title, noam_fn, (step, d, w), f"noam_lambda({step}, {d}, {w})")
    value = run(float, (out,))
    if isinstance(value, Raised) or isinstance(out, (str, bytes)):
        NOAM_NOT_A_NUMBER.fail(
            title, f"noam_lambda({step}, {d}, {w}) returned a {type(out).__name__}."
        )
    return value


_SHOWN_UPDATES = (1, 10, 100, 1000, 10000)


def _rate_table(title, noam_fn, d, w) -> str:
    """The learner's and Noam's rates at a few updates, as the learner reads them."""
    steps = [n - 1 for n in _SHOWN_UPDATES]
    got = ", ".join(f"{_noam_rate(title, noam_fn, s, d, w):.3g}" for s in steps)
    want = ", ".join(f"{noam_lambda(s, d, w):.3g}" for s in steps)
    return (
        f"With d_model={d}, warmup={w} your rates at steps "
        f"{', '.join(map(str, steps))} are {got}; Noam gives {want}."
    )


def _noam_offset(title, noam_fn, d, w) -> tuple | None:
    """Rates that are Noam's at another step (n = step + 1 + k, k != 0), or Noam's at
    every step but step 0."""
    steps = [1, 2, 3, w - 2, w - 1, w, w + 1, 3 * w, 10 * w]
    got = [_noam_rate(title, noam_fn, s, d, w) for s in steps if s >= 1]
    first = _noam_rate(title, noam_fn, 0, d, w)
    for k in (0, -1, 1, -2, 2):
        want = [noam_lambda(s + k, d, w) for s in steps if s >= 1 and s + k >= 0]
        if not _close(got[len(got) - len(want) :], want):
            continue
        if k == 0 and math.isclose(first, noam_lambda(0, d, w), rel_tol=1e-6):
            return None  # right here: other configurations tell
        if k == 0:
            return NOAM_STEP_ZERO, (
                f"With d_model={d}, warmup={w} your rate at step 0 "
                f"is {first:.4g}, Noam's "
                f"{noam_lambda(0, d, w):.4g}; from step 1 on yours "
                "are right."
            )
        return NOAM_STEP_OFFSET, (
            f"Your rate at step s is Noam's for update n = s + {1 + k}, where "
            f"LambdaLR's step s is update s + 1; at step 0 yours is {first:.3g}."
        )
    return None


def _slope(title, noam_fn, n1, n2, d, w) -> float:
    """d log(rate) / d log(n) between updates n1 and n2."""
    r1 = _noam_rate(title, noam_fn, n1 - 1, d, w)
    r2 = _noam_rate(title, noam_fn, n2 - 1, d, w)
    if r1 <= 0 or r2 <= 0:
        return math.nan
    return math.log(r2 / r1) / math.log(n2 / n1)


# Far past any warm-up a learner might have used, whatever warmup they were given.
_FAR = (10**6, 10**7)


def _still_rising(title, noam_fn, d, w) -> bool:
    """The rate still grows linearly at updates _FAR: a warm-up that has not ended."""
    return abs(_slope(title, noam_fn, *_FAR, d, w) - 1) < 1e-3


def _decaying(title, noam_fn, configs) -> list:
    """The configurations whose warm-up (the learner's) is over by update _FAR[0]."""
    return [(d, w) for d, w in configs if not _still_rising(title, noam_fn, d, w)]


def _noam_decay(title, noam_fn, configs) -> tuple | None:
    """Far after the warm-up the rate must fall like n^-0.5 (smallest warmup first)."""
    where = f"between updates {_FAR[0]:.0e} and {_FAR[1]:.0e}"
    decaying = _decaying(title, noam_fn, sorted(configs, key=lambda c: c[1]))
    if not decaying:
        return NOAM_DECAY_EXPONENT, (
            f"{where.capitalize()} your rate still grows like "
            "n^1 in every case: it never decays."
        )
    for d, w in decaying:
        decay = _slope(title, noam_fn, *_FAR, d, w)
        if math.isnan(decay):
            return NOAM_DECAY_EXPONENT, (
                f"With d_model={d}, warmup={w} your rate is "
                f"{_noam_rate(title, noam_fn, _FAR[1] - 1, d, w):.3g} at update "
                f"{_FAR[1]:.0e}: Noam's decays like n^-0.5 and never reaches 0."
            )
        if not abs(decay + 0.5) < 1e-3:
            return NOAM_DECAY_EXPONENT, (
                f"With d_model={d}, warmup={w}, {where} your rate goes like "
                f"n^{decay:.3g}, expected n^-0.5."
            )
    return None


def _line_fit(xs, ys) -> tuple[float, float, float]:
    """(slope, intercept, largest relative residual) of the least-squares line."""
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum(
        (x - mx) ** 2 for x in xs
    )
    icept = my - slope * mx
    scale = max(abs(y) for y in ys) or 1.0
    return slope, icept, max(abs(slope * x + icept - y) for x, y in zip(xs, ys)) / scale


def _noam_warmup(title, noam_fn, configs) -> tuple | None:
    """During the warm-up (steps 0..4, warmup >= 50) the rate must be α · (step + 1):
    a line through zero at step -1."""
    for d, w in configs:
        if w < 50:
            continue
        steps = list(range(5))
        rates = [_noam_rate(title, noam_fn, s, d, w) for s in steps]
        if not any(rates):
            return NOAM_WARMUP_SHAPE, (
                f"With d_model={d}, warmup={w} your rate is 0 "
                "at steps 0..4: it never starts to warm up."
            )
        slope, icept, off = _line_fit(steps, rates)
        if off > 1e-4:
            decay = [d**-0.5 * (s + 1) ** -0.5 for s in steps]
            if all(math.isclose(r, x, rel_tol=1e-6) for r, x in zip(rates, decay)):
                return NOAM_WARMUP_SHAPE, (
                    f"With d_model={d}, warmup={w}, at steps 0..4 your rate is "
                    "d_model^-0.5 · n^-0.5, the decay term: the warm-up term "
                    "n · warmup^-1.5 is never the smaller one (is it missing, or is "
                    "its exponent's sign flipped, warmup ** 1.5?)."
                )
            rise = _slope(title, noam_fn, 2, 4, d, w)
            return NOAM_WARMUP_SHAPE, (
                f"With d_model={d}, warmup={w}, over steps 0..4 your rate is not a "
                f"line: between updates 2 and 4 it goes like n^{rise:.3g}, expected "
                "n^1."
            )
        if slope > 0 and not math.isclose(icept / slope, 1.0, abs_tol=1e-3):
            return NOAM_STEP_OFFSET, (
                f"With d_model={d}, warmup={w} your warm-up rate is {slope:.4g} · "
                f"(step + {icept / slope:.3g}), expected {slope:.4g} · (step + 1): it "
                f"is {icept:.3g} at step 0."
            )
    return None


def _power_fit(xs, ys) -> tuple[float, float]:
    """(k, p) of the least-squares fit ys = k · xs^p in log space."""
    slope, icept, _ = _line_fit([math.log(x) for x in xs], [math.log(y) for y in ys])
    return math.exp(icept), slope


def _fixed(values, name, invert) -> str:
    if all(math.isclose(v, 1.0, rel_tol=1e-4) for v in values):
        return f" It has no {name} factor at all."
    if all(math.isclose(v, values[0], rel_tol=1e-4) for v in values):
        return (
            f" It is the same whatever {name}, as if {name} were "
            f"{invert(values[0]):.4g}: is {name} hard-coded?"
        )
    return ""


def _noam_decay_scale(title, noam_fn, configs) -> tuple | None:
    """The decay branch's factor must be d_model^-0.5 (fitted over the d_models)."""
    n, decaying = _FAR[0], _decaying(title, noam_fn, configs)
    decay = [_noam_rate(title, noam_fn, n - 1, d, w) * n**0.5 for d, w in decaying]
    if not all(
        math.isclose(c, d**-0.5, rel_tol=1e-4) for c, (d, _) in zip(decay, decaying)
    ):
        if min(decay) <= 0 or len({d for d, _ in decaying}) < 2:
            return None
        k, p = _power_fit([d for d, _ in decaying], decay)
        fixed = _fixed(decay, "d_model", lambda c: c**-2)
        return NOAM_SCALE, (
            f"After the warm-up your rate is {k:.3g} · d_model^{p:.3g} "
            f"· n^-0.5, expected d_model^-0.5 · n^-0.5.{fixed}"
        )
    return None


def _noam_warmup_scale(title, noam_fn, configs) -> tuple | None:
    """The warm-up branch's factor must be d_model^-0.5 · warmup^-1.5 (fitted over the
    warmups)."""
    warm = [
        (_noam_rate(title, noam_fn, 0, d, w) * d**0.5, w) for d, w in configs if w > 1
    ]
    if not all(math.isclose(c, w**-1.5, rel_tol=1e-4) for c, w in warm):
        if min(c for c, _ in warm) <= 0:
            return None
        k, p = _power_fit([w for _, w in warm], [c for c, _ in warm])
        fixed = _fixed([c for c, _ in warm], "warmup", lambda c: c ** (-1 / 1.5))
        return NOAM_WARMUP_SCALE, (
            f"Your warm-up branch is {k:.3g} · warmup^{p:.3g} · n · d_model^-0.5, "
            f"expected warmup^-1.5 · n · d_model^-0.5.{fixed}"
        )
    return None


def _noam_peak(title, noam_fn, configs) -> tuple | None:
    for d, w in configs:
        if w <= 200:
            rates = [_noam_rate(title, noam_fn, s, d, w) for s in range(3 * w + 2)]
            peak = max(range(len(rates)), key=rates.__getitem__)
            if peak != w - 1:
                return NOAM_PEAK, (
                    f"With d_model={d}, warmup={w} your rate peaks at "
                    f"step {peak}, expected step {w - 1} (n = warmup)."
                )
    return None


def _noam_problem(title, noam_fn) -> tuple:
    """(diagnosis or None, what was measured, the rate table) for wrong rates."""
    configs = [case.make()[:2] for case in _noam_cases()]
    d, w = configs[0]
    table = _rate_table(title, noam_fn, d, w)
    problem = (
        _noam_offset(title, noam_fn, d, w)
        or _noam_decay(title, noam_fn, configs)
        or _noam_decay_scale(title, noam_fn, configs)
        or _noam_warmup(title, noam_fn, configs)
        or _noam_warmup_scale(title, noam_fn, configs)
        or _noam_peak(title, noam_fn, configs)
    )
    if problem is None:
        return None, table, table
    return problem[0], f"{problem[1]} {table}", table


@single_threaded
def check_noam_lambda(noam_fn) -> None:
    """``noam_fn(step, d_model, warmup) -> float``: the LambdaLR multiplier for step 0,
    1, ... (base lr 1.0)."""
    title, cases = "noam_lambda", _noam_cases()
    broken = _rate_at_step_zero_breaks(noam_fn)
    if broken is not None:
        NOAM_DIVIDES_BY_ZERO.fail(title, broken)
    for case in cases:
        d, w, steps = case.make()
        got = [_noam_rate(title, noam_fn, s, d, w) for s in steps]
        if _close(got, [noam_lambda(s, d, w) for s in steps]):
            continue
        diagnosis, seen, table = _noam_problem(title, noam_fn)
        fail_first_problem(
            title,
            (diagnosis, seen),
            cases,
            _rates(noam_fn),
            NOAM_PITFALLS,
            _rates,
            (1e-12, 1e-6),
            S_LR,
            table,
        )
    passed(title, f"matches the reference on {len(cases)} cases")


# ----------------------------------------------------------------------- make_scheduler

# Recognised from what the scheduler does to an optimizer that counts its step() calls.
SCHEDULER_STEPS_OPTIMIZER = Diagnosis(
    "scheduler steps the optimizer",
    "That is the seed's AdamWarmup: next to the loop's own optimizer.step() every "
    "batch is applied twice, and under AMP it bypasses GradScaler.step. A scheduler "
    "only sets the learning rate; torch.optim.lr_scheduler.LambdaLR does exactly that.",
    S_LR,
)
SCHEDULER_RATE_SET_LATE = Diagnosis(
    "Noam schedule off by one",
    "The first update runs at the optimizer's initial lr (1.0) because your scheduler "
    "sets the rate only in step(). Set the rate for step 0 when the scheduler is "
    "created (LambdaLR does).",
    S_LR,
)
SCHEDULER_RATES_AHEAD = Diagnosis(
    "Noam schedule off by one",
    "Your rates run one update ahead: the first update must run at noam_lambda(0, "
    "d_model, warmup).",
    S_LR,
)
# Recognised by measuring the rates the scheduler set, update after update.
_ONE_STEP = (
    "make_scheduler's scheduler sets noam_lambda(k, d_model, warmup) (times "
    "the optimizer's lr, 1.0) for update k + 1, and its step() advances k by "
    "one: LambdaLR(optimizer, lambda step: "
    "noam_lambda(step, d_model, warmup))."
)
SCHEDULER_STEP_COUNT = Diagnosis(
    "scheduler counts its steps wrongly",
    "One scheduler.step() per update must move the schedule on by exactly one step. "
    + _ONE_STEP,
    S_LR,
)
SCHEDULER_SCALED = Diagnosis(
    "scheduler's rates scaled",
    "LambdaLR multiplies the optimizer's own lr (1.0 here) by your multiplier: add no "
    "base rate of your own and leave the optimizer's lr alone. " + _ONE_STEP,
    S_LR,
)
SCHEDULER_COMPOUNDS = Diagnosis(
    "scheduler multiplies the previous rate",
    "Each rate must be noam_lambda of the step, not the previous rate times it "
    "(MultiplicativeLR, or group['lr'] *= ...). " + _ONE_STEP,
    S_LR,
)
SCHEDULER_PEAK = Diagnosis(
    "scheduler's warm-up length wrong",
    "The rate rises for warmup updates and peaks at update warmup: pass the warmup "
    "(and d_model) make_scheduler was given on to noam_lambda. " + _ONE_STEP,
    S_LR,
)
SCHEDULER_CONSTANT = Diagnosis(
    "learning rate never changes",
    "Your scheduler left the same learning rate for every update. It must drive the "
    "optimizer it is given and follow noam_lambda. " + _ONE_STEP,
    S_LR,
)


def _counting_sgd(params, lr):
    """SGD whose step() calls are counted, whoever makes them (``opt.calls``)."""

    def count(opt):
        opt.calls += 1

    opt = recording_sgd(params, lr, on_step=count)
    opt.calls = 0
    return opt


def _build_scheduler(title, make_scheduler, opt, d, w):
    sched = run_or_fail(
        title, make_scheduler, (opt, d, w), f"make_scheduler(optimizer, {d}, {w})"
    )
    if not callable(getattr(sched, "step", None)):
        fail(
            title,
            "make_scheduler must return a scheduler with a step() method, got "
            f"{type(sched).__name__}",
            S_LR,
        )
    return sched


def _rates_while_training(title, make_scheduler, d, w, n) -> list[float]:
    """The learning rates of n + 1 updates, each optimizer.step() (the loop's) followed
    by one scheduler.step(); fails as soon as scheduler.step() moves the weights."""
    weight = nn.Parameter(torch.ones(3, device=get_device()))
    opt = _counting_sgd([weight], lr=1.0)
    sched = _build_scheduler(title, make_scheduler, opt, d, w)
    rates = [float(opt.param_groups[0]["lr"])]
    for k in range(1, n + 1):
        weight.grad = torch.ones_like(weight)
        with quiet():
            opt.step()  # the training loop's own call
        calls, before = opt.calls, weight.detach().clone()
        run_or_fail(title, sched.step, (), "scheduler.step()")
        if opt.calls != calls or not torch.equal(weight.detach(), before):
            SCHEDULER_STEPS_OPTIMIZER.fail(
                title, f"Your scheduler.step() number {k} updated the weights."
            )
        rates.append(float(opt.param_groups[0]["lr"]))
    return rates


#: Rates the scheduler computes in float64, against the reference's.
_close = functools.partial(all_near, rel=1e-6)


def _rate_set_only_in_step(rates, want) -> bool:
    return rates[0] == 1.0 and _close(rates[1:], want[: len(rates) - 1])


def _rates_one_ahead(rates, want) -> bool:
    return _close(rates, want[1 : len(rates) + 1])


_SCHEDULER_RATE_MISTAKES = (
    (_rate_set_only_in_step, SCHEDULER_RATE_SET_LATE),
    (_rates_one_ahead, SCHEDULER_RATES_AHEAD),
)


def _schedule_steps(rates, d, w) -> list[int] | None:
    """For each update, the step s whose noam_lambda(s, d, w) is its rate (None when
    some rate is no Noam rate)."""
    table = [noam_lambda(s, d, w) for s in range(4 * len(rates) + 4)]
    steps = []
    for rate in rates:
        s = next(
            (s for s, r in enumerate(table) if math.isclose(rate, r, rel_tol=1e-6)),
            None,
        )
        if s is None:
            return None
        steps.append(s)
    return steps


def _measured_schedule(rates, want, d, w) -> tuple[Diagnosis | None, str]:
    """What the rates the learner's scheduler set look like: (diagnosis, seen)."""
    shown = ", ".join(f"{r:.4g}" for r in rates[:6])
    seen = (
        f"The rates of your first updates were {shown}; noam_lambda gives "
        f"{', '.join(f'{r:.4g}' for r in want[:6])} (d_model={d}, warmup={w})."
    )
    if all(r == rates[0] for r in rates):
        return SCHEDULER_CONSTANT, f"{seen} Yours stayed {rates[0]:.4g}."
    steps, later = _schedule_steps(rates, d, w), _schedule_steps(rates[1:], d, w)
    if steps is not None:
        return SCHEDULER_STEP_COUNT, (
            f"{seen} Your updates ran at the Noam rates of "
            f"steps {steps[:8]}, expected "
            f"{list(range(min(8, len(steps))))}."
        )
    if later is not None:
        return SCHEDULER_STEP_COUNT, (
            f"{seen} Your first update ran at {rates[0]:.4g}, "
            f"the next ones at the Noam rates of steps "
            f"{later[:8]}; expected steps 0, 1, 2, ..."
        )
    ratio = [r / x for r, x in zip(rates, want)]
    if all(math.isclose(q, ratio[0], rel_tol=1e-6) for q in ratio):
        width = d / ratio[0] ** 2  # d_model^-0.5 scales the rates
        story = (
            f" That is as if d_model were {width:.0f} instead of {d}, or a base "
            f"lr of {ratio[0]:.4g}."
            if width != d and math.isclose(width, round(width), abs_tol=1e-3)
            else ""
        )
        return SCHEDULER_SCALED, (
            f"{seen} Yours are {ratio[0]:.4g} × noam_lambda's.{story}"
        )
    products = [math.prod(want[: k + 1]) for k in range(len(rates))]
    # Each rate the previous one times noam_lambda of its step, whatever the first.
    steps_ratio = [b / a for a, b in zip(rates, rates[1:]) if a != 0]  # noqa: RUF007
    if (
        _close(rates, products)
        or _close(rates[1:], products[:-1])
        or (
            len(steps_ratio) == len(rates) - 1
            and _close(steps_ratio, want[1 : len(rates)])
        )
    ):
        return SCHEDULER_COMPOUNDS, (
            f"{seen} Each of your rates is the previous one times a value of "
            f"noam_lambda ({rates[1]:.4g} × {rates[2] / rates[1]:.4g} = "
            f"{rates[2]:.4g}): the multipliers compound."
        )
    peak = max(range(len(rates)), key=rates.__getitem__)
    if peak != w - 1:
        where = (
            f"never stop rising in {len(rates)} updates"
            if peak == len(rates) - 1
            else f"peak at update {peak + 1}"
        )
        return SCHEDULER_PEAK, (
            f"{seen} Your rates {where}; Noam's peak at update {w} = warmup."
        )
    return None, seen


@single_threaded
def check_noam_scheduler(make_scheduler) -> None:
    """``make_scheduler(optimizer, d_model, warmup)`` returns a scheduler whose
    ``step()`` sets the Noam rate for the next update and does nothing else. The
    optimizer is created with lr=1.0."""
    title, d, w, n = "make_scheduler", 64, 5, 12
    rates = _rates_while_training(title, make_scheduler, d, w, n)
    # One rate more than the updates, to recognise rates that run ahead.
    want = [noam_lambda(s, d, w) for s in range(n + 2)]
    if _close(rates, want[: n + 1]):
        passed(
            title,
            f"sets the Noam rate for {n + 1} updates and never steps the optimizer",
        )
        return
    for looks_like, diagnosis in _SCHEDULER_RATE_MISTAKES:
        if looks_like(rates, want):
            diagnosis.fail(title)
    diagnosis, seen = _measured_schedule(rates, want[: n + 1], d, w)
    if diagnosis is not None:
        diagnosis.fail(title, seen)
    fallback(title, seen, S_LR, "compare your code with the lesson", stop="")


seal(__name__)
