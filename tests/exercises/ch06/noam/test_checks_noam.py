"""noam (chapter 6, book/ch06_training): the unit tests of ``ch06.check_noam_lambda``
and ``ch06.check_noam_scheduler`` (the exercise's ``noam_lambda`` and
``make_scheduler``), with wrong schedules and schedulers (each rejected with its named
diagnosis, a crash or a constant rate included) and right ones written differently
(each accepted).

Each wrong one says what bug it is, spelled as a learner might, not as the check's own
variant is.
"""

import math

import pytest
from torch.optim.lr_scheduler import LambdaLR
from units_ch06 import noam_numpy_inf

from tformer_grading.checks import CheckFailure, ch06
from tformer_ref import training

# -------------------------------------------------------------------------- noam_lambda


def noam_numpy(step, d_model, warmup):
    import numpy as np

    n = np.float64(step + 1)
    return float(np.minimum(n**-0.5, n / warmup**1.5) / np.sqrt(d_model))


def noam_branches(step, d_model, warmup):
    n = step + 1
    rate = n * warmup**-1.5 if n < warmup else n**-0.5
    return rate / math.sqrt(d_model)


@pytest.mark.parametrize("fn", [training.noam_lambda, noam_numpy, noam_branches])
def test_noam_accepts_right_implementations(fn, capsys):
    ch06.check_noam_lambda(fn)
    assert "✓ noam_lambda" in capsys.readouterr().out


def noam_seed(step, d_model, warmup):  # the seed's formula with LambdaLR's 0-based step
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def noam_guarded(step, d_model, warmup):
    # max(step, 1) hides the division by zero, not the off-by-one.
    step = max(step, 1)
    return min(1 / math.sqrt(step), step / warmup**1.5) / math.sqrt(d_model)


def noam_skips_step_zero(step, d_model, warmup):
    # Rate 0 for the first update, then one update behind.
    if step == 0:
        return 0.0
    return min(step**-0.5, step / (warmup * math.sqrt(warmup))) / math.sqrt(d_model)


def noam_two_ahead(step, d_model, warmup):  # adds one to a count that starts at one
    update = step + 1
    n = update + 1
    return (1 / math.sqrt(d_model)) * min(1 / math.sqrt(n), n * warmup**-1.5)


def noam_warmup_sqrt(step, d_model, warmup):
    # The warm-up branch is n / sqrt(warmup) instead of n / warmup^1.5.
    n = step + 1
    return min(n**-0.5, n / math.sqrt(warmup)) / math.sqrt(d_model)


def noam_no_width_factor(step, d_model, warmup):  # forgot d_model^-0.5
    n = step + 1
    return min(1 / math.sqrt(n), n / warmup**1.5)


def noam_max(step, d_model, warmup):  # max where the formula has min
    n = step + 1
    return max(n**-0.5, n / warmup**1.5) / d_model**0.5


def noam_constant(step, d_model, warmup):  # a fixed rate: no known pitfall
    return 1e-3


@pytest.mark.parametrize(
    "fn,diagnosis",
    [
        (noam_seed, "divides by zero at step 0"),
        (noam_numpy_inf, "off by one"),  # min(inf, 0) = 0: the first update gets rate 0
        (noam_guarded, "off by one"),
        (noam_skips_step_zero, "off by one"),
        (noam_two_ahead, "off by one"),
        (noam_warmup_sqrt, "warm-up exponent wrong"),
        (noam_no_width_factor, r"missing the d_model\^-0.5 factor"),
        (noam_max, "max instead of min"),
        (noam_constant, r"your rate goes like n\^0,"),
    ],
)
def test_noam_rejects_wrong_implementations(fn, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch06.check_noam_lambda(fn)


# ----------------------------------------------------------------------- make_scheduler


class NoamByHand:
    """A scheduler class that only sets the rate (right, without LambdaLR)."""

    def __init__(self, optimizer, d_model, warmup):
        self.opt, self.d, self.w, self.n = optimizer, d_model, warmup, 0
        self._set()

    def _set(self):
        self.n += 1
        for g in self.opt.param_groups:
            g["lr"] = self.d**-0.5 * min(self.n**-0.5, self.n * self.w**-1.5)

    def step(self):
        self._set()


class SeedAdamWarmup:
    """The seed's AdamWarmup: sets the rate, then steps the optimizer itself."""

    def __init__(self, optimizer, d_model, warmup):
        self.optimizer, self.model_size = optimizer, d_model
        self.warmup_steps, self.current_step = warmup, 0

    def step(self):
        self.current_step += 1
        n, w = self.current_step, self.warmup_steps
        lr = self.model_size**-0.5 * min(n**-0.5, n * w**-1.5)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.step()


class NoamThatAlsoSteps(LambdaLR):
    """LambdaLR with a "convenient" step() that applies the update too."""

    def __init__(self, optimizer, d_model, warmup):
        super().__init__(optimizer, lambda s: training.noam_lambda(s, d_model, warmup))

    def step(self, *args, **kwargs):
        self.optimizer.step()
        super().step(*args, **kwargs)


class LateNoam(NoamByHand):
    """Sets the rate only in step(): the first update runs at the initial lr."""

    def __init__(self, optimizer, d_model, warmup):
        self.opt, self.d, self.w, self.n = optimizer, d_model, warmup, 0


def scheduler_one_ahead(optimizer, d_model, warmup):  # noam_lambda already adds one
    return LambdaLR(optimizer, lambda s: training.noam_lambda(s + 1, d_model, warmup))


def scheduler_seed_formula(optimizer, d_model, warmup):
    # step ** -0.5 at LambdaLR's first call, step 0.
    def rate(step):
        return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)

    return LambdaLR(optimizer, rate)


def scheduler_constant(optimizer, d_model, warmup):  # half the base rate, always
    return LambdaLR(optimizer, lambda step: 0.5)


def scheduler_forgot_return(optimizer, d_model, warmup):  # built it, returned nothing
    LambdaLR(optimizer, lambda step: training.noam_lambda(step, d_model, warmup))


def scheduler_lr_lambda_list(optimizer, d_model, warmup):
    """Right, written differently: a list with one rate function per parameter group."""

    def rate(s):
        return (d_model**-0.5) * min((s + 1) ** -0.5, (s + 1) * warmup**-1.5)

    return LambdaLR(optimizer, lr_lambda=[rate])


@pytest.mark.parametrize(
    "make",
    [
        lambda o, d, w: training.noam_scheduler(o, d, w),
        lambda o, d, w: LambdaLR(o, lambda s: training.noam_lambda(s, d, w)),
        scheduler_lr_lambda_list,
        NoamByHand,
    ],
)
def test_scheduler_accepts_right_implementations(make, capsys):
    ch06.check_noam_scheduler(make)
    assert "✓ make_scheduler" in capsys.readouterr().out


@pytest.mark.parametrize(
    "make,diagnosis",
    [
        (SeedAdamWarmup, "scheduler steps the optimizer"),
        (NoamThatAlsoSteps, "scheduler steps the optimizer"),
        (LateNoam, "off by one"),
        (scheduler_one_ahead, "off by one"),
        (scheduler_seed_formula, "raised ZeroDivisionError"),
        (scheduler_constant, "learning rate never changes.*stayed 0.5"),
        (scheduler_forgot_return, "step\\(\\) method"),
    ],
)
def test_scheduler_rejects_wrong_implementations(make, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch06.check_noam_scheduler(make)
