"""Chapter 6's measured bank for noam (the format: tests/bank/bank.py).

An answer to "noam" is the learner's whole cell: a class whose two functions are the
cell's noam_lambda and make_scheduler.
"""

import math

import numpy as np
import torch
from torch.optim.lr_scheduler import LambdaLR, MultiplicativeLR

from bank import GENERIC, right, wrong  # noqa: F401
from exercise_cells import graders

GRADERS = graders("ch06_training", {"noam": ("noam_lambda", "make_scheduler")})


# ------------------------------------------------------------------------- noam: right


@right("noam")
class NoamSolution:
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return d_model**-0.5 * min(n**-0.5, n * warmup**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda step: NoamSolution.noam_lambda(step, d_model, warmup)
        )


@right("noam")
class NoamBranches:
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        rate = n / warmup**1.5 if n < warmup else 1 / math.sqrt(n)
        return rate / math.sqrt(d_model)

    def make_scheduler(optimizer, d_model, warmup):
        def lr_lambda(step):
            return NoamBranches.noam_lambda(step, d_model, warmup)

        return LambdaLR(optimizer, lr_lambda=lr_lambda)


@right("noam")
class NoamNumpy:
    def noam_lambda(step, d_model, warmup):
        n = np.float64(step + 1)
        return float(np.minimum(n**-0.5, n * warmup**-1.5) / np.sqrt(d_model))

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, [lambda s: NoamNumpy.noam_lambda(s, d_model, warmup)]
        )


@right("noam")
class NoamTorch:
    def noam_lambda(step, d_model, warmup):  # a 0-d tensor is a fine multiplier too
        n = torch.tensor(step + 1.0, dtype=torch.float64)
        return torch.rsqrt(torch.tensor(float(d_model))).double() * torch.minimum(
            n.rsqrt(), n * warmup**-1.5
        )

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: float(NoamTorch.noam_lambda(s, d_model, warmup))
        )


@right("noam")
class NoamByHandScheduler:
    def noam_lambda(step, d_model, warmup):
        step += 1
        return (1 / d_model**0.5) * min(1 / step**0.5, step / warmup**1.5)

    class Noam:  # sets the rate at creation and after each update; never steps
        def __init__(self, optimizer, d_model, warmup):
            self.optimizer, self.d_model, self.warmup = optimizer, d_model, warmup
            self.step_count = 0
            self._apply()

        def _apply(self):
            rate = NoamByHandScheduler.noam_lambda(
                self.step_count, self.d_model, self.warmup
            )
            for group in self.optimizer.param_groups:
                group["lr"] = rate

        def step(self):
            self.step_count += 1
            self._apply()

    make_scheduler = Noam


@right("noam")
class NoamMinOfPowers:
    def noam_lambda(step, d_model, warmup):
        n = float(step + 1)
        warm = n * math.pow(warmup, -1.5)
        decay = math.pow(n, -0.5)
        return math.pow(d_model, -0.5) * (warm if warm < decay else decay)

    def make_scheduler(optimizer, d_model, warmup):
        from functools import partial

        return LambdaLR(
            optimizer, partial(NoamMinOfPowers.rate, d_model=d_model, warmup=warmup)
        )

    def rate(step, d_model, warmup):
        return NoamMinOfPowers.noam_lambda(step, d_model, warmup)


@right("noam")
class NoamSqrtForms:
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return min(1 / math.sqrt(n), n / (warmup * math.sqrt(warmup))) / math.sqrt(
            d_model
        )

    def make_scheduler(optimizer, d_model, warmup):
        sched = LambdaLR(optimizer, lambda s: 1.0)
        sched.lr_lambdas = [lambda s: NoamSqrtForms.noam_lambda(s, d_model, warmup)]
        # The first rate was set with the placeholder: set it again for step 0.
        for group, lr in zip(optimizer.param_groups, sched.base_lrs):
            group["lr"] = lr * sched.lr_lambdas[0](0)
        return sched


@right("noam")
class NoamLogSpace:
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        log_rate = -0.5 * math.log(d_model) + min(
            -0.5 * math.log(n), math.log(n) - 1.5 * math.log(warmup)
        )
        return math.exp(log_rate)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda step: NoamLogSpace.noam_lambda(step, d_model, warmup)
        )


# ------------------------------------------------------------------------- noam: wrong


@wrong("noam", r"'scheduler multiplies the previous rate'.*× 0\.03354", listed=False)
class NoamMultiplicativeLR:  # "multiplicative" read as "multiplies by the schedule"
    def noam_lambda(step, d_model, warmup):
        step += 1
        return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        return MultiplicativeLR(
            optimizer, lambda s: NoamMultiplicativeLR.noam_lambda(s, d_model, warmup)
        )


@wrong("noam", r"'Noam schedule divides by zero at step 0'", listed=True)
class NoamSeed:  # the paper's formula on LambdaLR's 0-based step
    def noam_lambda(step, d_model, warmup):
        return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(optimizer, lambda s: NoamSeed.noam_lambda(s, d_model, warmup))


@wrong("noam", r"'Noam schedule off by one'", listed=True)
class NoamGuarded:  # max(step, 1) hides the division by zero, not the off-by-one
    def noam_lambda(step, d_model, warmup):
        step = max(step, 1)
        return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamGuarded.noam_lambda(s, d_model, warmup)
        )


@wrong("noam", r"'Noam schedule off by one'", listed=True)
class NoamZeroFirst:  # returns 0 at step 0 "to avoid the division"
    def noam_lambda(step, d_model, warmup):
        if step == 0:
            return 0.0
        return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamZeroFirst.noam_lambda(s, d_model, warmup)
        )


@wrong("noam", r"'Noam schedule off by one'", listed=True)
class NoamTwoAhead:  # adds one to a step that noam already counts from one
    def noam_lambda(step, d_model, warmup):
        n = step + 2
        return d_model**-0.5 * min(n**-0.5, n * warmup**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamTwoAhead.noam_lambda(s, d_model, warmup)
        )


@wrong("noam", r"'warm-up exponent wrong'", listed=True)
class NoamWarmupSqrt:  # n / sqrt(warmup)
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return min(n**-0.5, n / math.sqrt(warmup)) / math.sqrt(d_model)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamWarmupSqrt.noam_lambda(s, d_model, warmup)
        )


@wrong("noam", r"'missing the d_model\^-0.5 factor'", listed=True)
class NoamNoWidth:  # forgot the d_model factor
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return min(n**-0.5, n * warmup**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamNoWidth.noam_lambda(s, d_model, warmup)
        )


@wrong("noam", r"'max instead of min'", listed=True)
class NoamMax:  # max where the formula has min
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return d_model**-0.5 * max(n**-0.5, n * warmup**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(optimizer, lambda s: NoamMax.noam_lambda(s, d_model, warmup))


@wrong("noam", r"'scheduler steps the optimizer'", listed=True)
class NoamSeedAdamWarmup:  # the seed's optimizer wrapper
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return d_model**-0.5 * min(n**-0.5, n * warmup**-1.5)

    class AdamWarmup:
        def __init__(self, optimizer, d_model, warmup):
            self.optimizer, self.d_model, self.warmup = optimizer, d_model, warmup
            self.n = 0
            for group in optimizer.param_groups:
                group["lr"] = NoamSeedAdamWarmup.noam_lambda(0, d_model, warmup)

        def step(self):
            self.n += 1
            for group in self.optimizer.param_groups:
                group["lr"] = NoamSeedAdamWarmup.noam_lambda(
                    self.n, self.d_model, self.warmup
                )
            self.optimizer.step()

    make_scheduler = AdamWarmup


@wrong("noam", r"'Noam schedule off by one'.*first update runs at", listed=True)
class NoamSetLate:  # sets the rate only in step(): update 1 runs at lr 1.0
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return d_model**-0.5 * min(n**-0.5, n * warmup**-1.5)

    class Noam:
        def __init__(self, optimizer, d_model, warmup):
            self.optimizer, self.d_model, self.warmup = optimizer, d_model, warmup
            self.n = 0

        def step(self):
            for group in self.optimizer.param_groups:
                group["lr"] = NoamSetLate.noam_lambda(self.n, self.d_model, self.warmup)
            self.n += 1

    make_scheduler = Noam


@wrong("noam", r"'Noam schedule off by one'.*one update ahead", listed=True)
class NoamPrimed:  # calls scheduler.step() once "to initialise it"
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return d_model**-0.5 * min(n**-0.5, n * warmup**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        sched = LambdaLR(
            optimizer, lambda s: NoamPrimed.noam_lambda(s, d_model, warmup)
        )
        sched.step()
        return sched


@wrong("noam", r"'schedule scaled wrongly'.*d_model\^0.5 ", listed=False)
class NoamSqrtDModelTimes:  # multiplies by sqrt(d_model) instead of dividing
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return math.sqrt(d_model) * min(n**-0.5, n * warmup**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamSqrtDModelTimes.noam_lambda(s, d_model, warmup)
        )


@wrong("noam", r"'schedule scaled wrongly'.*d_model\^-1 ", listed=False)
class NoamDModelInverse:  # 1 / d_model: the square root forgotten
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return min(n**-0.5, n * warmup**-1.5) / d_model

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamDModelInverse.noam_lambda(s, d_model, warmup)
        )


@wrong("noam", r"'schedule scaled wrongly'.*0.5 · d_model\^-1 ", listed=False)
class NoamPrecedence:  # d_model ** -1 / 2 is (d_model ** -1) / 2
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return d_model**-1 / 2 * min(n**-0.5, n * warmup**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamPrecedence.noam_lambda(s, d_model, warmup)
        )


@wrong("noam", r"'schedule scaled wrongly'.*\b2 · d_model\^-0.5", listed=False)
class NoamFactorTwo:  # the Annotated Transformer's factor=2 baked in
    def noam_lambda(step, d_model, warmup, factor=2):
        n = step + 1
        return factor * d_model**-0.5 * min(n**-0.5, n * warmup**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamFactorTwo.noam_lambda(s, d_model, warmup)
        )


@wrong("noam", r"'schedule scaled wrongly'.*0.001 · d_model\^-0.5", listed=False)
class NoamBaseLrInside:  # multiplies Adam's usual 1e-3 in
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return 1e-3 * d_model**-0.5 * min(n**-0.5, n * warmup**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamBaseLrInside.noam_lambda(s, d_model, warmup)
        )


@wrong(
    "noam",
    r"'schedule scaled wrongly'.*as if d_model were 512.*hard-coded",
    listed=False,
)
class NoamDModel512:  # the paper's d_model, not the argument
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return 512**-0.5 * min(n**-0.5, n * warmup**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamDModel512.noam_lambda(s, d_model, warmup)
        )


@wrong(
    "noam",
    r"'warm-up exponent wrong'.*as if warmup were 4000.*hard-coded",
    listed=False,
)
class NoamWarmup4000:  # the paper's warm-up, not the argument
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return d_model**-0.5 * min(n**-0.5, n * 4000**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamWarmup4000.noam_lambda(s, d_model, warmup)
        )


@wrong("noam", r"'warm-up exponent wrong'.*warmup\^-1 ", listed=False)
class NoamWarmupOverW:  # "linear warm-up to 1": n / warmup
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return d_model**-0.5 * min(n**-0.5, n / warmup)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamWarmupOverW.noam_lambda(s, d_model, warmup)
        )


@wrong("noam", r"'warm-up exponent wrong'.*0.5 · warmup\^-3 ", listed=False)
class NoamWarmupPrecedence:  # warmup ** -3 / 2 is (warmup ** -3) / 2
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return d_model**-0.5 * min(n**-0.5, n * warmup**-3 / 2)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamWarmupPrecedence.noam_lambda(s, d_model, warmup)
        )


@wrong("noam", r"'decay exponent wrong'.*n\^-1,", listed=False)
class NoamDecayInverse:  # 1 / n instead of 1 / sqrt(n)
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return d_model**-0.5 * min(1 / n, n * warmup**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamDecayInverse.noam_lambda(s, d_model, warmup)
        )


@wrong("noam", r"'decay exponent wrong'.*n\^0.5,", listed=False)
class NoamDecaySignFlip:  # n ** 0.5: the minus sign lost, so it never decays
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return d_model**-0.5 * min(n**0.5, n * warmup**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamDecaySignFlip.noam_lambda(s, d_model, warmup)
        )


@wrong("noam", r"'warm-up not linear'.*n\^1.5", listed=False)
class NoamWarmupPower:  # (n / warmup) ** 1.5 instead of n * warmup ** -1.5
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return d_model**-0.5 * min(n**-0.5, (n / warmup) ** 1.5)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamWarmupPower.noam_lambda(s, d_model, warmup)
        )


@wrong("noam", r"'Noam schedule off by one'.*\(step \+ 0\)", listed=False)
class NoamWarmupUsesStep:  # n = step + 1 in one branch, the raw step in the other
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return d_model**-0.5 * min(n**-0.5, step * warmup**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamWarmupUsesStep.noam_lambda(s, d_model, warmup)
        )


@wrong("noam", r"'first update's rate wrong'.*at step 0 is 0,", listed=False)
class NoamSkipsFirst:  # n = step + 1, but still a special case for step 0
    def noam_lambda(step, d_model, warmup):
        if step == 0:
            return 0
        n = step + 1
        return d_model**-0.5 * min(n**-0.5, n * warmup**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamSkipsFirst.noam_lambda(s, d_model, warmup)
        )


@wrong("noam", r"'decay exponent wrong'.*n\^0,", listed=False)
class NoamConstant:  # a fixed rate "until the schedule works"
    def noam_lambda(step, d_model, warmup):
        return 1e-3

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamConstant.noam_lambda(s, d_model, warmup)
        )


@wrong("noam", r"'scheduler's rates scaled'.*0.001 × noam_lambda", listed=False)
class NoamSchedulerBaseLr:  # sets Adam's usual lr on the optimizer before LambdaLR
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return d_model**-0.5 * min(n**-0.5, n * warmup**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        for group in optimizer.param_groups:
            group["lr"] = 1e-3
        return LambdaLR(
            optimizer, lambda s: NoamSchedulerBaseLr.noam_lambda(s, d_model, warmup)
        )


@wrong("noam", r"'scheduler's rates scaled'.*as if d_model were 512", listed=False)
class NoamSchedulerPaperWidth:  # passes the paper's d_model to noam_lambda
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return d_model**-0.5 * min(n**-0.5, n * warmup**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamSchedulerPaperWidth.noam_lambda(s, 512, warmup)
        )


@wrong("noam", r"'scheduler multiplies the previous rate'", listed=False)
class NoamMultiplicative:  # MultiplicativeLR: each rate the previous one times lambda
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return d_model**-0.5 * min(n**-0.5, n * warmup**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        for group in optimizer.param_groups:
            group["lr"] = NoamMultiplicative.noam_lambda(0, d_model, warmup)
        return MultiplicativeLR(
            optimizer, lambda s: NoamMultiplicative.noam_lambda(s, d_model, warmup)
        )


@wrong("noam", r"'scheduler counts its steps wrongly'.*steps \[0, 2, 4", listed=False)
class NoamDoubleCount:  # step() advances the count twice (once in _set, once in step)
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return d_model**-0.5 * min(n**-0.5, n * warmup**-1.5)

    class Noam:
        def __init__(self, optimizer, d_model, warmup):
            self.opt, self.d, self.w, self.k = optimizer, d_model, warmup, 0
            self._set()

        def _set(self):
            for group in self.opt.param_groups:
                group["lr"] = NoamDoubleCount.noam_lambda(self.k, self.d, self.w)

        def step(self):
            self.k += 1
            self.k += 1 if self.k else 0
            self._set()

    make_scheduler = Noam


@wrong(
    "noam", r"'scheduler counts its steps wrongly'.*steps \[0, 0, 1, 2", listed=False
)
class NoamSetsBeforeCounting:  # step() applies the current count, then increments it
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return d_model**-0.5 * min(n**-0.5, n * warmup**-1.5)

    class Noam:
        def __init__(self, optimizer, d_model, warmup):
            self.opt, self.d, self.w, self.k = optimizer, d_model, warmup, 0
            self._set()

        def _set(self):
            for group in self.opt.param_groups:
                group["lr"] = NoamSetsBeforeCounting.noam_lambda(self.k, self.d, self.w)

        def step(self):
            self._set()
            self.k += 1

    make_scheduler = Noam


@wrong("noam", r"'learning rate never changes'.*stayed 1\b", listed=False)
class NoamOwnOptimizer:  # wraps a fresh optimizer, not the one it was given
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return d_model**-0.5 * min(n**-0.5, n * warmup**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        params = [p for group in optimizer.param_groups for p in group["params"]]
        own = torch.optim.SGD(params, lr=1.0)
        return LambdaLR(own, lambda s: NoamOwnOptimizer.noam_lambda(s, d_model, warmup))


@wrong("noam", r"'scheduler's warm-up length wrong'.*never stop rising", listed=False)
class NoamSchedulerPaperWarmup:  # the paper's 4000 warm-up steps inside the scheduler
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return d_model**-0.5 * min(n**-0.5, n * warmup**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamSchedulerPaperWarmup.noam_lambda(s, d_model, 4000)
        )


@wrong(
    "noam",
    r"'scheduler counts its steps wrongly'.*first update ran at 0, the next "
    r"ones at the Noam rates of steps \[0, 1, 2",
    listed=False,
)
class NoamSchedulerOneBehind:  # "LambdaLR counts from 0, so subtract one"
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return d_model**-0.5 * min(n**-0.5, n * warmup**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        def rate(step):
            if step == 0:
                return 0.0
            return NoamSchedulerOneBehind.noam_lambda(step - 1, d_model, warmup)

        return LambdaLR(optimizer, rate)


@wrong("noam", r"'scheduler counts its steps wrongly'.*steps \[1, 3, 5", listed=False)
class NoamSchedulerStepsTwice:  # a LambdaLR subclass whose step() advances twice
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return d_model**-0.5 * min(n**-0.5, n * warmup**-1.5)

    class Noam(LambdaLR):
        def __init__(self, optimizer, d_model, warmup):
            super().__init__(
                optimizer,
                lambda s: NoamSchedulerStepsTwice.noam_lambda(s, d_model, warmup),
            )

        def step(self):
            super().step()  # "one for the warm-up, one for the decay"
            super().step()

    make_scheduler = Noam


@wrong("noam", r"'decay exponent wrong'.*never reaches 0", listed=False)
class NoamLinearDecay:  # linear warm-up, then a linear decay to 0 (another schedule)
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        peak = d_model**-0.5 * warmup**-0.5
        if n <= warmup:
            return peak * n / warmup
        return max(0.0, peak * (1 - (n - warmup) / (100 * warmup)))

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamLinearDecay.noam_lambda(s, d_model, warmup)
        )


@wrong("noam", r"'warm-up not linear'.*never starts to warm up", listed=False)
class NoamFloorDivision:  # // where / belongs: the warm-up branch rounds down to 0
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return d_model**-0.5 * min(n**-0.5, n // warmup**1.5)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamFloorDivision.noam_lambda(s, d_model, warmup)
        )


@wrong("noam", r"'schedule scaled wrongly'.*0.001 · d_model\^-0.5", listed=False)
class NoamBaseLrInDecay:  # the base lr multiplied into the decay branch only
    def noam_lambda(step, d_model, warmup, lr=1e-3):
        n = step + 1
        return d_model**-0.5 * min(lr * n**-0.5, n * warmup**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamBaseLrInDecay.noam_lambda(s, d_model, warmup)
        )


@wrong(
    "noam",
    r"'warm-up length wrong'.*peaks at step 200, expected step 199",
    listed=False,
)
class NoamBranchOneLate:  # "step <= warmup": one warm-up step too many
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        if step <= warmup:  # still warming up
            return d_model**-0.5 * n * warmup**-1.5
        return d_model**-0.5 * n**-0.5

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamBranchOneLate.noam_lambda(s, d_model, warmup)
        )


@wrong("noam", r"'noam_lambda does not return a number'.*a NoneType", listed=False)
class NoamForgotReturn:  # computes the rate into a variable, never returns it
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        lr = d_model**-0.5 * min(n**-0.5, n * warmup**-1.5)  # noqa: F841

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamForgotReturn.noam_lambda(s, d_model, warmup)
        )


@wrong(
    "noam",
    r"[Tt]he function noam_lambda was called without 'd_model' and 'warmup'",
    listed=False,
)
class NoamLambdaHandedOverUnbound:
    # hands the function itself to LambdaLR, as the docs' examples do with lambdas
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return d_model**-0.5 * min(n**-0.5, n * warmup**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(optimizer, lr_lambda=NoamLambdaHandedOverUnbound.noam_lambda)


@wrong("noam", r"'warm-up not linear'.*the decay term", listed=False)
class NoamWarmupExponentPositive:  # warmup ** 1.5: the warm-up term never wins the min
    def noam_lambda(step, d_model, warmup):
        step_num = step + 1
        arg1 = step_num**-0.5
        arg2 = step_num * (warmup**1.5)
        return (d_model**-0.5) * min(arg1, arg2)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer,
            lambda s: NoamWarmupExponentPositive.noam_lambda(s, d_model, warmup),
        )


@wrong("noam", r"'warm-up not linear'.*the decay term", listed=False)
class NoamWithoutWarmup:  # "the inverse square root schedule" with the warm-up left out
    def noam_lambda(step, d_model, warmup):
        return 1 / math.sqrt(d_model * (step + 1))

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamWithoutWarmup.noam_lambda(s, d_model, warmup)
        )
