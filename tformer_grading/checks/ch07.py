"""Checks for chapter 7, mixed precision, accumulation and DDP (book/ch07_scale).

Each training-step check first runs the learner's step on a probe whose optimizer,
scheduler, GradScaler and loss_fn write down what the step did (the calls, in order;
the gradient and learning rate each optimizer step used; the gradient right after
each backward) and measures it stage by stage against what the step must do: the
first stage that departs is reported with the measured quantity (the divisor each
micro-batch's loss got, the gradient norm the optimizer stepped with, the scale
after an overflow, ...). Then the parameters it ends with on several cases are
compared with the reference's; the known wrong variants (each the private function
just above its ``Pitfall``) name what reproduces the learner's parameters. The
data-loading check is a behaviour check: it reads which samples each rank gets in
each epoch.
"""

from __future__ import annotations

import copy
import functools
import math
from dataclasses import dataclass, field

import torch
from torch.nn.utils import clip_grad_norm_
from torch.optim.lr_scheduler import LambdaLR
from torch.utils.data import Dataset

from tformer_ref.device import get_device
from tformer_ref.toy_lm import TinyCausalLM, count_targets, lm_loss_sum, make_token_data
from ..guard.integrity import seal
from .delegation import check_not_delegated
from .diagnosis import (
    UNEXPLAINED,
    Case,
    Diagnosis,
    Pitfall,
    Raised,
    Section,
    compare_to_reference,
    fail,
    passed,
    quiet,
    run,
    single_threaded,
    verify_integrity,
)

CHAPTER = "ch07_scale"
S_AMP = Section(CHAPTER, "7.1", "Mixed precision with torch.amp")
S_SCALER = Section(CHAPTER, "7.2", "GradScaler, unscale_ and clipping")
S_ACCUM = Section(CHAPTER, "7.3", "Gradient accumulation")
S_DDP = Section(CHAPTER, "7.4", "DistributedDataParallel is data parallel")
S_SAMPLER = Section(CHAPTER, "7.5", "DistributedSampler and set_epoch")
PAD = 0


def _model(dtype=torch.float64, seed=0):
    torch.manual_seed(seed)
    model = TinyCausalLM(vocab=12, d_model=16, n_heads=2, max_len=10, pad_id=PAD)
    return model.to(get_device(), dtype)


def _flat(model, *extra):
    return torch.cat(
        [p.detach().flatten().double().cpu() for p in model.parameters()]
        + [torch.tensor(list(extra), dtype=torch.float64)]
    )


# ---------------------------------------------------------------- gradient accumulation


def _loss_fn(model, batch):
    return lm_loss_sum(model, batch, PAD)


def _accum_reference(model, micro_batches, optimizer, scheduler, loss_fn):
    optimizer.zero_grad()
    n_total = sum(count_targets(b, PAD) for b in micro_batches)
    for batch in micro_batches:
        loss_sum, _ = loss_fn(model, batch)
        # The k terms add up to (all token losses) / (all tokens): the big batch's mean.
        (loss_sum / n_total).backward()
    optimizer.step()
    scheduler.step()


def _accum_mean_per_micro_batch(model, micro_batches, optimizer, scheduler, loss_fn):
    optimizer.zero_grad()
    for batch in micro_batches:
        loss_sum, n = loss_fn(model, batch)
        (loss_sum / n).backward()
    optimizer.step()
    scheduler.step()


MEAN_NOT_DIVIDED = Pitfall(
    "loss not divided under accumulation",
    "Each micro-batch's mean loss goes into backward undivided, so the k gradients add "
    "up to k times the big batch's gradient: the same as multiplying the learning rate "
    "by k. Divide so that the k losses add up to the big batch's mean: by the step's "
    "total number of target tokens.",
    S_ACCUM,
    _accum_mean_per_micro_batch,
)


def _accum_sum_undivided(model, micro_batches, optimizer, scheduler, loss_fn):
    optimizer.zero_grad()
    for batch in micro_batches:
        loss_sum, _ = loss_fn(model, batch)
        loss_sum.backward()
    optimizer.step()
    scheduler.step()


SUM_NOT_DIVIDED = Pitfall(
    "loss summed, not averaged",
    "You call backward on the summed token loss of each micro-batch without dividing "
    "at all: the gradient is N_tokens times the big batch's mean-loss gradient. Divide "
    "each micro-batch's summed loss by the total number of target tokens of the step.",
    S_ACCUM,
    _accum_sum_undivided,
)


def _accum_mean_over_k(model, micro_batches, optimizer, scheduler, loss_fn):
    optimizer.zero_grad()
    k = len(micro_batches)
    for batch in micro_batches:
        loss_sum, n = loss_fn(model, batch)
        (loss_sum / n / k).backward()
    optimizer.step()
    scheduler.step()


DIVIDED_BY_K = Pitfall(
    "divided by micro-batches, not by tokens",
    "You divide each micro-batch's mean loss by k (the seed's loss / "
    "accumulation_steps). That equals the big batch only when every micro-batch holds "
    "the same number of real tokens; with padding they do not, and short micro-batches "
    "weigh as much as long ones. Divide each micro-batch's summed loss by the total "
    "number of target tokens of the whole step.",
    S_ACCUM,
    _accum_mean_over_k,
)


def _accum_zero_grad_inside_loop(model, micro_batches, optimizer, scheduler, loss_fn):
    n_total = sum(count_targets(b, PAD) for b in micro_batches)
    for batch in micro_batches:
        optimizer.zero_grad()
        loss_sum, _ = loss_fn(model, batch)
        (loss_sum / n_total).backward()
    optimizer.step()
    scheduler.step()


ZERO_EACH_MICRO_STEP = Pitfall(
    "zero_grad every micro-step",
    "optimizer.zero_grad() inside the micro-batch loop wipes what the earlier "
    "micro-batches accumulated: the step uses only the last micro-batch. Zero once per "
    "optimizer step, before the loop (or after the step).",
    S_ACCUM,
    _accum_zero_grad_inside_loop,
)


def _accum_never_zeroed(model, micro_batches, optimizer, scheduler, loss_fn):
    n_total = sum(count_targets(b, PAD) for b in micro_batches)
    for batch in micro_batches:
        loss_sum, _ = loss_fn(model, batch)
        (loss_sum / n_total).backward()
    optimizer.step()
    scheduler.step()


NEVER_ZEROED = Pitfall(
    "gradients never zeroed",
    "Nothing zeroes the gradients between optimizer steps, so each step also adds "
    "every earlier step's gradients. Call optimizer.zero_grad() once per optimizer "
    "step.",
    S_ACCUM,
    _accum_never_zeroed,
)


def _accum_optimizer_inside_loop(model, micro_batches, optimizer, scheduler, loss_fn):
    optimizer.zero_grad()
    n_total = sum(count_targets(b, PAD) for b in micro_batches)
    for batch in micro_batches:
        loss_sum, _ = loss_fn(model, batch)
        (loss_sum / n_total).backward()
        optimizer.step()
    scheduler.step()


OPTIMIZER_EACH_MICRO_STEP = Pitfall(
    "optimizer stepped every micro-step",
    "optimizer.step() inside the micro-batch loop makes k small steps instead of one "
    "big one: that is training with the small batch, not accumulating. Step once, "
    "after the last micro-batch.",
    S_ACCUM,
    _accum_optimizer_inside_loop,
)


def _accum_scheduler_inside_loop(model, micro_batches, optimizer, scheduler, loss_fn):
    optimizer.zero_grad()
    n_total = sum(count_targets(b, PAD) for b in micro_batches)
    for batch in micro_batches:
        loss_sum, _ = loss_fn(model, batch)
        (loss_sum / n_total).backward()
        scheduler.step()
    optimizer.step()


SCHEDULER_EACH_MICRO_STEP = Pitfall(
    "scheduler stepped every micro-step",
    "scheduler.step() inside the micro-batch loop advances the learning-rate schedule "
    "k times per optimizer step (warm-up ends k times too early). The schedule counts "
    "optimizer steps: step it once, after optimizer.step().",
    S_ACCUM,
    _accum_scheduler_inside_loop,
)

ACCUM_PITFALLS = (
    MEAN_NOT_DIVIDED,
    SUM_NOT_DIVIDED,
    DIVIDED_BY_K,
    ZERO_EACH_MICRO_STEP,
    NEVER_ZEROED,
    OPTIMIZER_EACH_MICRO_STEP,
    SCHEDULER_EACH_MICRO_STEP,
)


def _warm_up(step):
    """The cases' schedule: the learning-rate factor after ``step`` scheduler steps."""
    return min(1.0, (step + 1) / 4)


def _accum_case(seed, sizes, steps, min_len, momentum=0.0):
    """Several optimizer steps, each on micro-batches of the given sizes; SGD with a
    warm-up schedule."""

    def make():
        model = _model(seed=seed)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=momentum)
        warm_up = LambdaLR(optimizer, _warm_up)
        data = make_token_data(
            sum(sizes) * steps, 10, vocab=12, pad_id=PAD, min_len=min_len, seed=seed
        ).to(get_device())
        plan = [list(step.split(list(sizes))) for step in data.split(sum(sizes))]
        return model, plan, optimizer, warm_up

    return make


def _accum_cases(hidden=False):
    configs = [(1, (4, 4, 4, 4), 2, 2), (2, (3, 5), 2, 3), (3, (8,), 2, 2)]
    if hidden:
        configs = [(4, (2, 6, 4), 3, 2), (5, (5, 5), 3, 9)]
    cases = []
    for seed, sizes, steps, min_len in configs:
        lengths = "equal" if min_len == 10 else "varying"
        label = (
            f"{steps} steps of {len(sizes)} micro-batches of sizes {list(sizes)}, "
            f"{lengths} lengths"
        )
        momentum = 0.9 if hidden else 0.0
        cases.append(Case(label, _accum_case(seed, sizes, steps, min_len, momentum)))
    return cases


def _simulate_accum(fn):
    def simulate(model, plan, optimizer, scheduler):
        for micro in plan:
            fn(model, micro, optimizer, scheduler, _loss_fn)
        return _flat(model, optimizer.param_groups[0]["lr"])

    return simulate


# ---------------------------------------------- recording what the learner's step did


@dataclass
class _Tape:
    """What the learner's step did to the objects the check handed it, in order.

    ``events``: names of the calls (optimizer.zero_grad, optimizer.step, scheduler.step,
    loss_fn, scaler.scale, ...); ``steps``: per optimizer.step(), (the learning rate,
    the flat gradient [P] it stepped with); ``after_backward``: parameter index -> its
    gradient right after the last backward that reached it; ``at_unscale``: the
    gradient [P] each scaler.unscale_ found.
    """

    events: list = field(default_factory=list)
    steps: list = field(default_factory=list)
    after_backward: dict = field(default_factory=dict)
    at_unscale: list = field(default_factory=list)
    in_scaler_step: bool = False

    def since(self, start: int) -> list:
        return self.events[start:]


def _grad_vector(params) -> torch.Tensor:
    """The gradients of ``params`` as one float64 CPU vector [P] (zeros where None)."""
    return torch.cat(
        [
            (p.grad if p.grad is not None else torch.zeros_like(p))
            .detach()
            .flatten()
            .double()
            .cpu()
            for p in params
        ]
    )


class _TapedSGD(torch.optim.SGD):
    """SGD that writes every zero_grad() and step() (with the learning rate and the
    gradient it stepped with) on ``tape``."""

    def __init__(self, params, tape: _Tape, **kwargs):
        super().__init__(params, **kwargs)
        self.tape = tape

    def zero_grad(self, set_to_none: bool = True):
        self.tape.events.append("optimizer.zero_grad")
        super().zero_grad(set_to_none)

    def step(self, closure=None):
        by = " by scaler.step" if self.tape.in_scaler_step else ""
        self.tape.events.append("optimizer.step" + by)
        params = [p for group in self.param_groups for p in group["params"]]
        self.tape.steps.append((self.param_groups[0]["lr"], _grad_vector(params)))
        return super().step(closure)


# Optimizer.__init__ wraps a subclass's step in a profiling hook, replacing the class
# attribute (which the integrity seal would report): mark it as wrapped already.
_TapedSGD.step.hooked = True


class _TapedLambdaLR(LambdaLR):
    """LambdaLR that writes every scheduler.step() the learner makes on ``tape``."""

    def __init__(self, optimizer, lr_lambda, tape: _Tape):
        self.tape = None  # LambdaLR's own first step is not the learner's
        super().__init__(optimizer, lr_lambda)
        self.tape = tape

    def step(self, *args, **kwargs):
        if self.tape is not None:
            self.tape.events.append("scheduler.step")
        return super().step(*args, **kwargs)


class _TapedZeroGrad:
    """Stands in for the probe model's zero_grad: writes "model.zero_grad" on ``tape``
    (an object, not a closure, so that a deepcopy of the model zeroes the copy)."""

    def __init__(self, module: torch.nn.Module, tape: _Tape):
        self.module, self.tape = module, tape

    def __call__(self, set_to_none: bool = True):
        self.tape.events.append("model.zero_grad")
        torch.nn.Module.zero_grad(self.module, set_to_none)


def _taped_loss_fn(tape: _Tape, loss_fn):
    def recorded(model, batch):
        tape.events.append("loss_fn")
        return loss_fn(model, batch)

    return recorded


# ----------------------------------------------- accumulation: the stages, measured

# The probe: 2 calls of 3 micro-batches of different sizes and numbers of real tokens,
# so that per-token, per-micro-batch and per-sequence weightings all differ.
PROBE_SIZES = (2, 5, 3)
PROBE_LR = 0.5


@dataclass(frozen=True)
class _MicroInfo:
    """What the check knows of one step's micro-batches [b_i, S] before the learner
    sees them: real targets n_i, sequences b_i, target positions b_i (S - 1)."""

    targets: tuple
    sequences: tuple
    positions: tuple
    real_tokens: tuple

    @property
    def k(self) -> int:
        return len(self.targets)


def _micro_info(micro_batches) -> _MicroInfo:
    return _MicroInfo(
        tuple(count_targets(b, PAD) for b in micro_batches),
        tuple(b.size(0) for b in micro_batches),
        tuple(b.size(0) * (b.size(1) - 1) for b in micro_batches),
        tuple(int((b != PAD).sum()) for b in micro_batches),
    )


def _summed_loss_gradients(model, micro_batches) -> list:
    """Per micro-batch, the gradient [P] of its summed token loss at ``model``'s
    parameters (computed on a copy)."""
    out = []
    for batch in micro_batches:
        twin = copy.deepcopy(model)
        for param in twin.parameters():
            param.grad = None
        lm_loss_sum(twin, batch, PAD)[0].backward()
        out.append(_grad_vector(twin.parameters()))
    return out


def _fit(target: torch.Tensor, columns: list) -> tuple[list, float]:
    """Least squares ``target ≈ Σ w_j columns[j]``: (the weights, the relative
    residual)."""
    a = torch.stack(columns, dim=1)
    if not (a.isfinite().all() and target.isfinite().all()):
        return [math.nan] * len(columns), math.inf
    w = torch.linalg.lstsq(a, target.unsqueeze(1)).solution.squeeze(1)
    residual = (target - a @ w).norm() / target.norm().clamp_min(1e-300)
    return w.tolist(), float(residual)


@dataclass
class _AccumCall:
    """One call of the learner's accumulation_step in the probe: its events, the
    micro-batches' info, their summed-loss gradients, the gradient the parameters held
    on entry, and the optimizer steps it made (learning rate, gradient)."""

    index: int
    events: list
    info: _MicroInfo
    sums: list
    leftover: torch.Tensor
    steps: list


def _run_accum_probe(title, accumulation_step) -> list:
    """Two calls of ``accumulation_step`` on the probe: (a list of :class:`_AccumCall`,
    what the last one raised or None)."""
    __tracebackhide__ = True
    tape = _Tape()
    model = _model(seed=7)
    model.zero_grad = _TapedZeroGrad(model, tape)  # zeroing is part of what is seen
    optimizer = _TapedSGD(model.parameters(), tape, lr=PROBE_LR)
    scheduler = _TapedLambdaLR(optimizer, _warm_up, tape)
    n = sum(PROBE_SIZES)
    data = make_token_data(2 * n, 10, vocab=12, pad_id=PAD, min_len=2, seed=7).to(
        get_device()
    )
    calls = []
    for index, step in enumerate(data.split(n)):
        micro = list(step.split(list(PROBE_SIZES)))
        info, sums = _micro_info(micro), _summed_loss_gradients(model, micro)
        leftover = _grad_vector(model.parameters())
        start, first_step = len(tape.events), len(tape.steps)
        out = run(
            accumulation_step,
            (model, micro, optimizer, scheduler, _taped_loss_fn(tape, _loss_fn)),
        )
        calls.append(
            _AccumCall(
                index, tape.since(start), info, sums, leftover, tape.steps[first_step:]
            )
        )
        if isinstance(out, Raised):
            return calls, out
    return calls, None


def _report_accum_raised(title, raised: Raised, index: int) -> None:
    __tracebackhide__ = True
    fail(
        title,
        f"your code raised {raised!r} while the check ran call {index + 1} "
        f"(micro-batches of sizes {list(PROBE_SIZES)}).",
        S_ACCUM,
    )


STEP_COUNT = Diagnosis(
    "optimizer steps per call",
    "accumulation_step makes exactly one optimizer step, after the last micro-batch's "
    "backward: that one step is what a step on the concatenated batch does.",
    S_ACCUM,
)


def _stage_optimizer_steps(title, call: _AccumCall) -> None:
    __tracebackhide__ = True
    steps = call.events.count("optimizer.step")
    if steps == 1:
        return
    seen = (
        f"In call {call.index + 1} (with {call.info.k} micro-batches) "
        f"optimizer.step() ran {steps} times."
    )
    if steps == call.info.k:
        OPTIMIZER_EACH_MICRO_STEP.fail(title, seen)
    STEP_COUNT.fail(title, seen)


# What a wrong divisor often is, per micro-batch i: (description, divisor of i).
def _uniform_divisors(info: _MicroInfo) -> tuple:
    n, k = sum(info.targets), info.k
    return (
        ("1, i.e. not divided at all", 1),
        (f"the number of micro-batches k = {k}", k),
        (f"the step's target tokens times k ({n} × {k})", n * k),
        (f"the step's target tokens squared ({n}²)", n * n),
        (
            f"every target position of the step, padding included "
            f"({sum(info.positions)})",
            sum(info.positions),
        ),
        (
            f"the step's real tokens, the first of each sequence included "
            f"({sum(info.real_tokens)})",
            sum(info.real_tokens),
        ),
        (
            f"the step's number of sequences ({sum(info.sequences)})",
            sum(info.sequences),
        ),
    )


def _per_batch_divisors(info: _MicroInfo) -> tuple:
    k = info.k
    return (
        ("its own target tokens n_i", info.targets),
        ("its own target tokens times k", tuple(t * k for t in info.targets)),
        ("its own target positions, padding included", info.positions),
        ("its own number of sequences", info.sequences),
        ("its own real tokens, the first of each sequence included", info.real_tokens),
    )


def _close(a: float, b: float, rel: float = 1e-6) -> bool:
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-300)


WRONG_DIVISOR = Diagnosis(
    "wrong loss divisor",
    "The big batch's loss is the mean over all of its target tokens, so every "
    "micro-batch's summed token loss is divided by the same number: the total number "
    "of real target tokens of the step (count_targets summed over the micro-batches).",
    S_ACCUM,
)
GRADIENT_FACTOR = Diagnosis(
    "whole gradient off by a constant factor",
    "The step's gradient points the right way but has the wrong size: the big "
    "batch's loss is the mean over all of its target tokens, so every micro-batch's "
    "summed loss is divided by the step's total target tokens, and nothing rescales "
    "the gradient between the backward and optimizer.step().",
    S_ACCUM,
)
WRONG_WEIGHTING = Diagnosis(
    "micro-batches weighted, not tokens",
    "Your step gives the micro-batches' losses different divisors, so a token in one "
    "micro-batch counts more than a token in another. Divide every micro-batch's "
    "summed loss by the same number: the step's total target tokens.",
    S_ACCUM,
)
LOST_MICRO_BATCHES = Diagnosis(
    "micro-batches missing from the gradient",
    "Every micro-batch's gradient must still be in .grad when optimizer.step() runs: "
    "backward on each of them, and zero the gradients once, before the first (or after "
    "the step), not between micro-batches.",
    S_ACCUM,
)


def _divisors_text(divisors) -> str:
    return "[" + ", ".join(f"{d:.6g}" for d in divisors) + "]"


def _name_uniform(title, divisor: float, info: _MicroInfo, seen: str) -> None:
    __tracebackhide__ = True
    n = sum(info.targets)
    if _close(divisor, 1.0):
        SUM_NOT_DIVIDED.fail(title, seen)
    what = next(
        (
            f", which is {text}"
            for text, value in _uniform_divisors(info)
            if _close(divisor, value)
        ),
        "",
    )
    # A divisor none of the step's counts explains is reported as the measured factor.
    (WRONG_DIVISOR if what else GRADIENT_FACTOR).fail(
        title,
        f"{seen} Every micro-batch's summed loss was divided by {divisor:.6g}"
        f"{what}; expected {n}, the step's real target tokens.",
    )


def _name_per_batch(title, divisors, info: _MicroInfo, seen: str) -> None:
    __tracebackhide__ = True
    if all(_close(d, t) for d, t in zip(divisors, info.targets)):
        MEAN_NOT_DIVIDED.fail(title, seen)
    if all(_close(d, t * info.k) for d, t in zip(divisors, info.targets)):
        DIVIDED_BY_K.fail(title, seen)
    what = next(
        (
            f" Each micro-batch was divided by {text}."
            for text, values in _per_batch_divisors(info)
            if all(_close(d, v) for d, v in zip(divisors, values))
        ),
        "",
    )
    WRONG_WEIGHTING.fail(
        title, f"{seen}{what} Expected all divided by {sum(info.targets)}."
    )


def _stage_weights(title, call: _AccumCall, others: tuple = ()) -> None:
    """The gradient optimizer.step() used, as a weighted sum of the micro-batches'
    summed-loss gradients: the weights are 1 / the divisor each micro-batch got.
    ``others``: the probe's other calls (a clip gives each the same norm)."""
    __tracebackhide__ = True
    info, n = call.info, sum(call.info.targets)
    columns = list(call.sums) + ([call.leftover] if call.leftover.any() else [])
    weights, residual = _fit(call.steps[-1][1], columns)
    if residual > 1e-6:
        _weights_unexplained(title, call, residual)
    if len(weights) > info.k and abs(weights[-1]) > 1e-6:
        return  # the previous step's gradient is still there: the zeroing stage says so
    w = weights[: info.k]
    if all(_close(x * n, 1.0, 1e-6) for x in w):
        return
    divisors = [1 / x if abs(x * n) > 1e-9 else math.inf for x in w]
    seen = (
        f"In call {call.index + 1} the gradient optimizer.step() used divided the "
        f"summed token losses of the {info.k} micro-batches (real targets "
        f"{list(info.targets)}) by {_divisors_text(divisors)}."
    )
    lost = [i + 1 for i, d in enumerate(divisors) if math.isinf(d)]
    if lost:
        _name_lost(title, call, lost, divisors, seen)
    if all(_close(d, divisors[0]) for d in divisors):
        _stage_rescaled(title, call, seen, others)
        _name_uniform(title, divisors[0], info, seen)
    _name_per_batch(title, divisors, info, seen)


ONLY_LAST_MICRO_BATCH = Diagnosis(
    "only the last micro-batch reached the step",
    "Only the last micro-batch's gradient reached optimizer.step(): the earlier ones "
    "were overwritten or zeroed (p.grad = g, zero_grad or set_to_none between "
    "micro-batches). Each backward must add to .grad: call loss.backward() on every "
    "micro-batch and zero the gradients once, before the first.",
    S_ACCUM,
)


def _zeroed_between_micro_batches(events: list, k: int) -> bool:
    """The recorded calls prove it: at least k - 1 zero_grad() calls (optimizer's or
    model's) after the first loss_fn and before the optimizer step."""
    if "loss_fn" not in events or "optimizer.step" not in events:
        return False
    inside = events[events.index("loss_fn") : events.index("optimizer.step")]
    zeros = inside.count("optimizer.zero_grad") + inside.count("model.zero_grad")
    return zeros >= k - 1


def _name_lost(title, call: _AccumCall, lost: list, divisors, seen: str) -> None:
    """Some micro-batches' gradients are missing from the step: name the cause only
    when the recorded calls show it."""
    __tracebackhide__ = True
    info, n = call.info, sum(call.info.targets)
    if lost == list(range(1, info.k)) and _close(divisors[-1], n):
        if _zeroed_between_micro_batches(call.events, info.k):
            ZERO_EACH_MICRO_STEP.fail(title, seen)
        ONLY_LAST_MICRO_BATCH.fail(
            title, f"{seen} zero_grad() was not called between the micro-batches."
        )
    LOST_MICRO_BATCHES.fail(
        title, f"{seen} Micro-batches {lost} of {info.k} added nothing to it."
    )


GRADIENT_RESCALED = Diagnosis(
    "gradient rescaled as a whole (clipped)",
    "Clipping is not part of this exercise: accumulation_step must step with exactly "
    "the big batch's gradient, whatever its norm (clip_grad_norm_ belongs to the "
    "training loop's own settings, not to accumulation).",
    S_ACCUM,
)


def _round_number(x: float, rel: float = 1e-5) -> bool:
    """``x`` is a number with at most 2 significant digits (1.0, 0.5, 0.25, 5, ...):
    what a max_norm usually is."""
    return x > 0 and _close(x, float(f"{x:.1e}"), rel)


def _step_norms(call: _AccumCall) -> tuple:
    """(the norm of the gradient the step used, the norm of the right gradient)."""
    if not call.steps:
        return math.nan, math.nan
    return (
        float(call.steps[-1][1].norm()),
        float((sum(call.sums) / sum(call.info.targets)).norm()),
    )


def _clipped_to(norms: list) -> bool:
    """Each call's step gradient is below the right one's, and all have one norm
    (a clip's max_norm; a divisor would scale each call's own norm)."""
    got = [g for g, _ in norms]
    return (
        len(norms) > 1
        and all(g < w * (1 - 1e-6) for g, w in norms)
        and all(_close(g, got[0], 1e-5) for g in got)
    )


def _stage_rescaled(title, call: _AccumCall, seen: str, others: tuple) -> None:
    """A uniform factor that shrinks the whole gradient to a round norm below the
    right gradient's, or to the same norm in every call: a clip (clip_grad_norm_),
    not a loss divisor."""
    __tracebackhide__ = True
    got, want = _step_norms(call)
    norms = [(got, want)] + [_step_norms(c) for c in others]
    if not ((got < want * (1 - 1e-6) and _round_number(got)) or _clipped_to(norms)):
        return
    GRADIENT_RESCALED.fail(
        title,
        f"{seen} The gradient at the step was rescaled as "
        f"a whole to norm {got:.4g} (the big batch's "
        f"gradient has norm {want:.4g}): that is "
        f"clip_grad_norm_(..., {got:.4g}).",
    )


def _weights_unexplained(title, call: _AccumCall, residual: float) -> None:
    __tracebackhide__ = True
    fail(
        title,
        f"in call {call.index + 1} (micro-batches of sizes "
        f"{list(PROBE_SIZES)}) the gradient optimizer.step() used is not a "
        "weighted sum of the micro-batches' gradients at the step's starting "
        f"parameters (relative residual {residual:.2g}): the parameters "
        "changed between micro-batches, or the losses were combined "
        "non-linearly. It "
        f"{UNEXPLAINED}; compare your code with the lesson step by step.",
        S_ACCUM,
    )


def _stage_zeroing(title, call: _AccumCall) -> None:
    """The second call: did the step's gradient still hold the first call's?"""
    __tracebackhide__ = True
    if not call.leftover.any():
        return
    weights, _ = _fit(call.steps[-1][1], list(call.sums) + [call.leftover])
    kept = weights[-1]
    if abs(kept) <= 1e-6:
        return
    seen = (
        f"The gradient of call {call.index + 1}'s optimizer.step() still held "
        f"{kept:.4g} × the gradient left from call {call.index}."
    )
    if _close(kept, 1.0, 1e-5):
        NEVER_ZEROED.fail(title, seen)
    LEFTOVER_GRADIENT.fail(title, seen)


LEFTOVER_GRADIENT = Diagnosis(
    "previous step's gradient kept",
    "Part of the previous optimizer step's gradient is still in .grad when this step "
    "runs. Zero the gradients once per accumulation_step (optimizer.zero_grad()), "
    "before the first backward or after the step.",
    S_ACCUM,
)
SCHEDULER_COUNT = Diagnosis(
    "scheduler steps per call",
    "The schedule counts optimizer steps: step it exactly once per accumulation_step, "
    "after optimizer.step().",
    S_ACCUM,
)
SCHEDULER_FIRST = Diagnosis(
    "scheduler stepped before the optimizer",
    "scheduler.step() before optimizer.step() makes every step use the next step's "
    "learning rate (and warm-up starts one step late). Step the optimizer, then the "
    "scheduler.",
    S_ACCUM,
)


def _stage_scheduler(title, call: _AccumCall) -> None:
    __tracebackhide__ = True
    steps = call.events.count("scheduler.step")
    if steps != 1:
        seen = (
            f"In call {call.index + 1} (with {call.info.k} micro-batches) "
            f"scheduler.step() ran {steps} times."
        )
        if steps == call.info.k:
            SCHEDULER_EACH_MICRO_STEP.fail(title, seen)
        SCHEDULER_COUNT.fail(title, seen)
    lr, want = call.steps[-1][0], PROBE_LR * _warm_up(call.index)
    if _close(lr, want):
        return
    seen = (
        f"Call {call.index + 1}'s optimizer.step() used the learning rate {lr:.4g}; "
        f"the schedule gives {want:.4g} at that step."
    )
    events = call.events
    if events.index("scheduler.step") < events.index("optimizer.step"):
        SCHEDULER_FIRST.fail(title, seen)
    LR_CHANGED.fail(title, seen)


LR_CHANGED = Diagnosis(
    "learning rate changed",
    "The step must use the learning rate the scheduler set: do not change "
    "optimizer.param_groups' lr yourself; the scheduler does it once per step.",
    S_ACCUM,
)


def _diagnose_first_call(title, call: _AccumCall, others: tuple = ()) -> None:
    __tracebackhide__ = True
    _stage_optimizer_steps(title, call)
    _stage_weights(title, call, others)


def _diagnose_accumulation(title, accumulation_step) -> None:
    """The stages in the order the step runs them; the first that departs fails."""
    __tracebackhide__ = True
    calls, raised = _run_accum_probe(title, accumulation_step)
    if raised is not None:
        if len(calls) > 1:  # the first call is measured first: it may say why
            _diagnose_first_call(title, calls[0], tuple(calls[1:]))
        _report_accum_raised(title, raised, len(calls) - 1)
    _diagnose_first_call(title, calls[0], tuple(calls[1:]))
    _stage_optimizer_steps(title, calls[1])
    _stage_zeroing(title, calls[1])
    _stage_weights(title, calls[1], tuple(calls[:1]))
    for call in calls:
        _stage_scheduler(title, call)


@single_threaded
def check_accumulation_step(accumulation_step, hidden: bool = False) -> None:
    """``accumulation_step(model, micro_batches, optimizer, scheduler, loss_fn)``: one
    optimizer step from the list ``micro_batches`` (token tensors [b_i, S]) equal to one
    step on their concatenation, where
    ``loss_fn(model, batch) -> (loss_sum, n_tokens)``."""
    __tracebackhide__ = True
    title = "accumulation_step"
    verify_integrity()
    _diagnose_accumulation(title, accumulation_step)
    compare_to_reference(
        title,
        _accum_cases(hidden),
        accumulation_step,
        _accum_reference,
        ACCUM_PITFALLS,
        atol=1e-9,
        rtol=1e-7,
        adapt=_simulate_accum,
    )


# ------------------------------------------------------------- one mixed-precision step


def _amp_dtype(device_type):
    return torch.float16 if device_type == "cuda" else torch.bfloat16


def _autocast_loss(model, batch, loss_fn):
    """The forward under autocast, in the course's dtype for the model's device."""
    device_type = next(model.parameters()).device.type
    with torch.amp.autocast(device_type, dtype=_amp_dtype(device_type)):
        return loss_fn(model, batch)


def _amp_reference(model, batch, loss_fn, optimizer, scaler, max_norm):
    optimizer.zero_grad()
    loss = _autocast_loss(model, batch, loss_fn)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)  # true-sized gradients: now max_norm means what it says
    clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)  # skipped when a gradient is inf/NaN
    scaler.update()
    return loss.detach()


def _amp_clip_scaled_gradients(model, batch, loss_fn, optimizer, scaler, max_norm):
    optimizer.zero_grad()
    loss = _autocast_loss(model, batch, loss_fn)
    scaler.scale(loss).backward()
    clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()


CLIPPED_SCALED = Pitfall(
    "clipping before unscale_",
    "You clip while the gradients are still multiplied by the scaler's scale (e.g. "
    "1024), so they are clipped at max_norm / scale and the update is far too small. "
    "Call scaler.unscale_(optimizer) first, then clip, then scaler.step(optimizer).",
    S_SCALER,
    _amp_clip_scaled_gradients,
)


def _amp_clip_then_unscale(model, batch, loss_fn, optimizer, scaler, max_norm):
    optimizer.zero_grad()
    loss = _autocast_loss(model, batch, loss_fn)
    scaler.scale(loss).backward()
    clip_grad_norm_(model.parameters(), max_norm)
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()


CLIPPED_THEN_UNSCALED = Pitfall(
    "clipping before unscale_",
    "You clip before scaler.unscale_(optimizer), while the gradients are still "
    "multiplied by the scale: they are clipped at max_norm / scale. Unscale first, "
    "then clip.",
    S_SCALER,
    _amp_clip_then_unscale,
)


def _amp_no_clipping(model, batch, loss_fn, optimizer, scaler, max_norm):
    optimizer.zero_grad()
    loss = _autocast_loss(model, batch, loss_fn)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()


NOT_CLIPPED = Pitfall(
    "gradients not clipped",
    "The gradient norm is never clipped to max_norm: after scaler.unscale_(optimizer), "
    "call torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm).",
    S_SCALER,
    _amp_no_clipping,
)


def _amp_optimizer_step(model, batch, loss_fn, optimizer, scaler, max_norm):
    optimizer.zero_grad()
    loss = _autocast_loss(model, batch, loss_fn)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    scaler.update()
    return loss.detach()


OPTIMIZER_STEP = Pitfall(
    "optimizer.step() instead of scaler.step(optimizer)",
    "optimizer.step() steps even when the gradients overflowed to inf/NaN, and the "
    "parameters become NaN. scaler.step(optimizer) checks for inf/NaN and skips that "
    "step.",
    S_SCALER,
    _amp_optimizer_step,
)


def _amp_optimizer_step_on_scaled(model, batch, loss_fn, optimizer, scaler, max_norm):
    optimizer.zero_grad()
    loss = _autocast_loss(model, batch, loss_fn)
    scaler.scale(loss).backward()
    optimizer.step()
    scaler.update()  # no inf check was recorded: GradScaler raises
    return loss.detach()


OPTIMIZER_STEP_SCALED = Pitfall(
    "optimizer.step() instead of scaler.step(optimizer)",
    "optimizer.step() on gradients that were never unscaled steps with gradients "
    "multiplied by the scale, and it does not skip overflowed steps. Use "
    "scaler.unscale_, clip, scaler.step(optimizer).",
    S_SCALER,
    _amp_optimizer_step_on_scaled,
)


def _amp_no_update(model, batch, loss_fn, optimizer, scaler, max_norm):
    optimizer.zero_grad()
    loss = _autocast_loss(model, batch, loss_fn)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    return loss.detach()


NO_UPDATE = Pitfall(
    "scaler.update() missing",
    "Without scaler.update() the scale never changes: after an overflow it must be "
    "lowered (and it grows back after a run of good steps). Call scaler.update() after "
    "scaler.step(optimizer).",
    S_SCALER,
    _amp_no_update,
)


def _amp_unscaled_backward(model, batch, loss_fn, optimizer, scaler, max_norm):
    optimizer.zero_grad()
    loss = _autocast_loss(model, batch, loss_fn)
    loss.backward()
    scaler.unscale_(optimizer)
    clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()


LOSS_NOT_SCALED = Pitfall(
    "loss not scaled",
    "You call loss.backward() instead of scaler.scale(loss).backward(): unscale_ then "
    "divides unscaled gradients by the scale, and in float16 the small ones would have "
    "underflowed anyway.",
    S_SCALER,
    _amp_unscaled_backward,
)


def _amp_no_zero_grad(model, batch, loss_fn, optimizer, scaler, max_norm):
    loss = _autocast_loss(model, batch, loss_fn)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()


AMP_NOT_ZEROED = Pitfall(
    "zero_grad missing",
    "The gradients are never zeroed, so every step adds the earlier steps' gradients. "
    "Call optimizer.zero_grad() at the start of each step.",
    S_SCALER,
    _amp_no_zero_grad,
)

AMP_PITFALLS = (
    CLIPPED_SCALED,
    CLIPPED_THEN_UNSCALED,
    NOT_CLIPPED,
    OPTIMIZER_STEP,
    OPTIMIZER_STEP_SCALED,
    NO_UPDATE,
    LOSS_NOT_SCALED,
    AMP_NOT_ZEROED,
)

# Seen from behaviour (the autocast state inside loss_fn), before any comparison.
NO_AUTOCAST = Diagnosis(
    "forward not under autocast",
    "Wrap the forward in torch.amp.autocast(device_type, dtype=...). The seed's "
    "torch.cuda.amp.autocast is deprecated and does nothing for a CPU model.",
    S_AMP,
)
WRONG_AUTOCAST_DTYPE = Diagnosis(
    "wrong autocast dtype",
    "The course uses bfloat16 on a CPU (float32's range, no scaler needed) and float16 "
    "with a GradScaler on CUDA.",
    S_AMP,
)


class _Recorder:
    """The check's loss_fn: mean token loss, recording the autocast state of each call
    ((enabled on the model's device, dtype, the device types where it was enabled)) and
    the loss it returned. With ``overflow`` the first call returns an infinite loss (as
    an fp16 overflow would)."""

    def __init__(self, overflow: bool, tape: _Tape | None = None):
        self.overflow, self.calls, self.states, self.values = overflow, 0, [], []
        self.tape = tape

    def __call__(self, model, batch):
        device_type = next(model.parameters()).device.type
        enabled = torch.is_autocast_enabled(device_type)
        dtype = torch.get_autocast_dtype(device_type) if enabled else None
        elsewhere = tuple(d for d in ("cpu", "cuda") if torch.is_autocast_enabled(d))
        self.states.append((enabled, dtype, elsewhere))
        if self.tape is not None:
            self.tape.events.append("loss_fn")
        loss_sum, n = lm_loss_sum(model, batch, PAD)
        loss = loss_sum / n
        self.calls += 1
        if self.overflow and self.calls == 1:
            loss = loss * float("inf")
        self.values.append(float(loss.detach()))
        return loss


def _amp_case(seed, overflow, max_norm):
    def make():
        device = get_device()
        model = _model(torch.float32, seed=seed)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
        scaler = torch.amp.GradScaler(device.type, init_scale=2.0**10)
        scaler.scale(torch.ones((), device=device))  # a first step creates the scale
        batches = [
            make_token_data(6, 10, vocab=12, pad_id=PAD, min_len=3, seed=seed + s).to(
                device
            )
            for s in range(2)
        ]
        return model, batches, optimizer, scaler, max_norm, _Recorder(overflow)

    return make


def _amp_cases():
    return [
        Case("two steps, gradients clipped at 0.05", _amp_case(1, False, 0.05)),
        Case("an overflowing step, then a normal one", _amp_case(2, True, 0.05)),
        Case("two steps, max_norm 1e6 (no clipping needed)", _amp_case(3, False, 1e6)),
    ]


def _simulate_amp(fn):
    def simulate(model, batches, optimizer, scaler, max_norm, loss_fn):
        for batch in batches:
            fn(model, batch, loss_fn, optimizer, scaler, max_norm)
        return _flat(model, math.log2(scaler.get_scale()))

    return simulate


# ------------------------------------------------------- amp: the stages, measured


class _TapedScaler(torch.amp.GradScaler):
    """GradScaler that writes the learner's scale, unscale_, step and update calls on
    ``tape`` (calls made inside scaler.step are marked "by scaler.step")."""

    def __init__(self, device_type: str, tape: _Tape, init_scale: float):
        self.tape = None
        super().__init__(device_type, init_scale=init_scale)
        self.tape = tape

    def _write(self, name: str) -> None:
        if self.tape is not None:
            by = " by scaler.step" if self.tape.in_scaler_step else ""
            self.tape.events.append(name + by)

    def scale(self, outputs):
        self._write("scaler.scale")
        return super().scale(outputs)

    def unscale_(self, optimizer):
        self._write("scaler.unscale_")
        if self.tape is not None:
            params = [p for group in optimizer.param_groups for p in group["params"]]
            self.tape.at_unscale.append(_grad_vector(params))
        return super().unscale_(optimizer)

    def step(self, optimizer, *args, **kwargs):
        self._write("scaler.step")
        if self.tape is None:
            return super().step(optimizer, *args, **kwargs)
        self.tape.in_scaler_step = True
        try:
            return super().step(optimizer, *args, **kwargs)
        finally:
            self.tape.in_scaler_step = False

    def update(self, new_scale=None):
        self._write("scaler.update")
        return super().update(new_scale)


def _write_grad(tape: _Tape, index: int, param: torch.Tensor) -> None:
    """A post-accumulate-grad hook: parameter ``index``'s gradient after a backward."""
    tape.after_backward[index] = param.grad.detach().double().cpu().flatten().clone()
    if index == 0:  # the embedding is the last to get its gradient: a backward ended
        tape.events.append("backward")


def _true_gradient(model, batch, scale: float) -> torch.Tensor:
    """The gradient [P] of the mean token loss under the course's autocast, through a
    backward scaled by ``scale`` and divided by it again (as GradScaler does), on a
    copy of ``model``."""
    twin = _model(torch.float32)
    twin.load_state_dict(model.state_dict())
    loss_sum, n = _autocast_loss(twin, batch, lambda m, b: lm_loss_sum(m, b, PAD))
    (loss_sum / n * scale).backward()
    return _grad_vector(twin.parameters()) / scale


@dataclass
class _AmpCall:
    """One call of the learner's amp_step in the probe: its events; the scaler's scale
    before and after; the true gradient [P] of the step's loss (unscaled, unclipped);
    the gradient the parameters held on entry [P]; the gradient right after the
    backward [P] (None when no backward reached the parameters); the gradients
    scaler.unscale_ found [P]; the optimizer steps
    (lr, gradient [P]); the parameters before and after [P]; what it returned and the
    loss loss_fn returned; the gradient [P] the parameters held when it ended."""

    index: int
    events: list
    scale: float
    scale_after: float
    true: torch.Tensor
    leftover: torch.Tensor
    after_backward: torch.Tensor | None
    at_unscale: list
    steps: list
    before: torch.Tensor
    after: torch.Tensor
    returned: object
    loss: float | None
    max_norm: float
    sizes: tuple
    at_exit: torch.Tensor


def _amp_probe_setup(overflow: bool, seed: int):
    tape, device = _Tape(), get_device()
    model = _model(torch.float32, seed=seed)
    for index, param in enumerate(model.parameters()):
        param.register_post_accumulate_grad_hook(
            functools.partial(_write_grad, tape, index)
        )
    optimizer = _TapedSGD(model.parameters(), tape, lr=0.2)
    scaler = _TapedScaler(device.type, tape, init_scale=2.0**10)
    scaler.scale(torch.ones((), device=device))  # a first step creates the scale
    batches = [
        make_token_data(6, 10, vocab=12, pad_id=PAD, min_len=3, seed=seed + s).to(
            device
        )
        for s in range(2)
    ]
    return tape, model, optimizer, scaler, batches, _Recorder(overflow, tape)


def _run_amp_probe(title, amp_step, overflow: bool, max_norm: float = 0.05):
    """Two calls of ``amp_step``: (a list of :class:`_AmpCall`, the loss_fn
    recorder)."""
    __tracebackhide__ = True
    tape, model, optimizer, scaler, batches, loss_fn = _amp_probe_setup(overflow, 1)
    sizes = tuple(p.numel() for p in model.parameters())
    calls = []
    for index, batch in enumerate(batches):
        scale = scaler.get_scale()
        true = _true_gradient(model, batch, scale)
        leftover, before = _grad_vector(model.parameters()), _flat(model)
        start, first_step, losses = len(tape.events), len(tape.steps), loss_fn.calls
        tape.after_backward.clear()
        tape.at_unscale.clear()
        out = run(amp_step, (model, batch, loss_fn, optimizer, scaler, max_norm))
        grads = tape.after_backward
        after_backward = (
            torch.cat(
                [
                    grads.get(i, torch.zeros(n, dtype=torch.float64))
                    for i, n in enumerate(sizes)
                ]
            )
            if grads
            else None
        )
        loss = loss_fn.values[-1] if loss_fn.calls > losses else None
        calls.append(
            _AmpCall(
                index,
                tape.since(start),
                scale,
                scaler.get_scale(),
                true,
                leftover,
                after_backward,
                list(tape.at_unscale),
                tape.steps[first_step:],
                before,
                _flat(model),
                out,
                loss,
                max_norm,
                sizes,
                _grad_vector(model.parameters()),
            )
        )
        if isinstance(out, Raised):
            break  # what the step did before it raised is still measured
    return calls, loss_fn


def _report_raised(title, call: _AmpCall, overflow: bool) -> None:
    """The learner's step raised: say so, after the stages it got through."""
    __tracebackhide__ = True
    if call.after_backward is not None and not overflow:
        _stage_backward(title, call)
        if call.steps:
            _stage_step_gradient(title, call, lambda: math.nan)
    if call.events.count("scaler.update") > 1:
        UPDATE_COUNT.fail(
            title,
            f"In step {call.index + 1} scaler.update() ran "
            f"{call.events.count('scaler.update')} times.",
        )
    what = (
        "an overflowing step"
        if overflow and call.index == 0
        else f"step {call.index + 1}"
    )
    fail(
        title,
        f"your code raised {call.returned!r} while the check ran {what} "
        f"(max_norm {call.max_norm:g}); your calls were "
        f"{_calls_text(call.events)}.",
        S_SCALER,
    )


def _stage_autocast(title, loss_fn: _Recorder) -> None:
    __tracebackhide__ = True
    if not loss_fn.states:
        fail(title, "your step never called loss_fn(model, batch).", S_AMP)
    enabled, dtype, elsewhere = loss_fn.states[0]
    device_type = get_device().type
    want = _amp_dtype(device_type)
    if not enabled:
        other = (
            f" It ran under {elsewhere[0]} autocast, which does nothing for a "
            f"model on {device_type}."
            if elsewhere
            else ""
        )
        NO_AUTOCAST.fail(
            title,
            f"loss_fn ran without {device_type} autocast; here "
            f"that is torch.amp.autocast('{device_type}', "
            f"dtype={want}).{other}",
        )
    if dtype != want:
        WRONG_AUTOCAST_DTYPE.fail(
            title, f"The forward ran under autocast in {dtype}, not {want}."
        )


def _rel_close(a: float, b: float, rel: float = 1e-3) -> bool:
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-30)


NO_BACKWARD = Diagnosis(
    "no backward",
    "No gradient reached the parameters: call scaler.scale(loss).backward().",
    S_SCALER,
)
BACKWARD_SCALE = Diagnosis(
    "backward not scaled by the scaler's scale",
    "The backward must run on scaler.scale(loss), with the scaler amp_step was given "
    "(not a new GradScaler): the loss times that scaler's current scale, once. "
    "scaler.unscale_ divides by exactly that scale.",
    S_SCALER,
)


def _stage_backward(title, call: _AmpCall) -> None:
    """Right after the backward the gradient must be scale × the loss's gradient."""
    __tracebackhide__ = True
    if call.after_backward is None:
        NO_BACKWARD.fail(
            title, f"In step {call.index + 1} no parameter got a gradient."
        )
    if not call.after_backward.isfinite().all():
        return  # only after an overflow: that step is measured by _stage_overflow
    # An overflow leaves inf in .grad: not a column to fit (the step must zero it).
    left = call.leftover.any() and call.leftover.isfinite().all()
    columns = [call.true] + ([call.leftover] if left else [])
    weights, residual = _fit(call.after_backward, columns)
    if residual > 1e-3:
        _amp_unexplained(
            title,
            call,
            "right after your backward the gradients are "
            "not a multiple of the loss's (residual "
            f"{residual:.2g})",
        )
    if len(weights) > 1 and abs(weights[1]) > 1e-3:
        seen = (
            f"In step {call.index + 1} the gradient after your backward still held "
            f"{weights[1]:.4g} × step {call.index}'s gradient."
        )
        kept_all = _rel_close(weights[1], 1.0)
        (AMP_NOT_ZEROED if kept_all else AMP_LEFTOVER).fail(title, seen)
    b, s = weights[0], call.scale
    if _rel_close(b, s):
        return
    seen = (
        f"In step {call.index + 1} the gradients right after your backward were "
        f"{b:.6g} × the loss's gradient; the scaler's scale was {s:g}."
    )
    if _rel_close(b, 1.0):
        LOSS_NOT_SCALED.fail(title, seen)
    BACKWARD_SCALE.fail(title, seen)


AMP_LEFTOVER = Diagnosis(
    "previous step's gradient kept",
    "Part of the previous step's gradient is still in .grad when this step's backward "
    "runs: call optimizer.zero_grad() at the start of each step.",
    S_SCALER,
)
AMP_STEP_COUNT = Diagnosis(
    "optimizer steps per amp_step",
    "One amp_step makes exactly one optimizer step, through scaler.step(optimizer) "
    "(which calls optimizer.step() itself unless the gradients overflowed): do not "
    "call optimizer.step() as well.",
    S_SCALER,
)


def _stage_step_count(title, call: _AmpCall) -> None:
    __tracebackhide__ = True
    steps = len(call.steps)
    if steps != 1:
        AMP_STEP_COUNT.fail(
            title,
            f"In step {call.index + 1} (no overflow) "
            f"optimizer.step() ran {steps} times; the calls "
            f"were {_calls_text(call.events)}.",
        )


def _calls_text(events) -> str:
    return " → ".join(e for e in events if e != "loss_fn") or "none"


def _clip_coefficient(norm: float, max_norm: float) -> float:
    """What clip_grad_norm_ multiplies the gradient by."""
    return min(1.0, max_norm / (norm + 1e-6))


STEP_GRADIENT = Diagnosis(
    "wrong gradient at the optimizer step",
    "The optimizer must step with the true-sized gradient (unscaled once, by "
    "scaler.unscale_ or scaler.step) whose norm was clipped to max_norm: "
    "scaler.scale(loss).backward(), scaler.unscale_(optimizer), "
    "clip_grad_norm_(model.parameters(), max_norm), scaler.step(optimizer).",
    S_SCALER,
)
UNSCALED_TWICE = Diagnosis(
    "gradients unscaled twice",
    "The gradients were divided by the scale twice (an extra division, or unscale_ "
    "after scaler.update()). GradScaler unscales once: scaler.unscale_(optimizer) "
    "before clipping, and scaler.step does not unscale again.",
    S_SCALER,
)


def _stage_step_gradient(title, call: _AmpCall, unclipped) -> None:
    """The gradient optimizer.step() used: r × the true gradient, r = the clip.
    ``unclipped()`` measures r again with nothing to clip (run only when needed)."""
    __tracebackhide__ = True
    g_step, norm = call.steps[-1][1], float(call.true.norm())
    weights, residual = _fit(g_step, [call.true])
    if residual > 1e-3:
        _shape_of_clipping(title, call, g_step)
    r, s, m = weights[0] + 0.0, call.scale, call.max_norm  # + 0.0: no "-0"
    want = _clip_coefficient(norm, m)
    if _rel_close(r, want):
        return
    seen = (
        f"In step {call.index + 1} the optimizer stepped with gradient norm "
        f"{abs(r) * norm:.4g} ({r:.4g} × the true gradient, whose norm is "
        f"{norm:.4g}); clipped at max_norm={m:g} it is {want * norm:.4g}. The "
        f"scale was {s:g}."
    )
    _stage_after_step(title, call, seen)
    if abs(r) < 1e-9:
        GRADIENT_WIPED.fail(title, seen)
    if _rel_close(r, 1.0):
        NOT_CLIPPED.fail(title, seen)
    if _rel_close(r, s * want) or _rel_close(r, s):
        direct = "optimizer.step" in call.events
        (OPTIMIZER_STEP_SCALED if direct else STEP_GRADIENT).fail(
            title, seen + " The gradients were never unscaled."
        )
    if _rel_close(r, want / s) or _rel_close(r, _clip_coefficient(s * norm, m)):
        _scale_sized_gradient(title, call, seen, unclipped())
    STEP_GRADIENT.fail(title, seen)


CLIPPED_AFTER_STEP = Diagnosis(
    "clipped after the optimizer step",
    "The optimizer step uses the gradients as they are when scaler.step(optimizer) "
    "runs: unscaling or clipping them afterwards changes nothing in this step's "
    "update. The order is scaler.scale(loss).backward(), scaler.unscale_(optimizer), "
    "clip_grad_norm_(model.parameters(), max_norm), then scaler.step(optimizer).",
    S_SCALER,
)


def _changed_after_step(call: _AmpCall) -> list:
    """What the learner did to the gradients after the optimizer step, as the tape
    and the gradients show it: unscale_ calls, and a gradient at exit that is neither
    the stepped one nor zeroed."""
    events = call.events
    first = next(
        (i for i, e in enumerate(events) if e.startswith("optimizer.step")), None
    )
    if first is None:
        return []
    found = ["a scaler.unscale_ call"] if "scaler.unscale_" in events[first:] else []
    g_step, g_exit = call.steps[-1][1], call.at_exit
    if (
        g_exit.any()
        and g_exit.isfinite().all()
        and not torch.allclose(g_exit, g_step, rtol=1e-6, atol=1e-12)
    ):
        found.append(
            f"a change of the gradients (norm {float(g_step.norm()):.4g} at "
            f"the step, {float(g_exit.norm()):.4g} when your step ended)"
        )
    return found


def _stage_after_step(title, call: _AmpCall, seen: str) -> None:
    """The step's gradient is wrong and the learner unscaled or clipped after the
    step: that placement is the cause, whatever the size."""
    __tracebackhide__ = True
    found = _changed_after_step(call)
    if found:
        CLIPPED_AFTER_STEP.fail(
            title,
            f"{seen} After the optimizer step your code "
            f"made {' and '.join(found)}; your calls were "
            f"{_calls_text(call.events)}.",
        )


def _scale_sized_gradient(title, call: _AmpCall, seen: str, free: float) -> None:
    """The step's gradient is 1/scale too small: clipped while still scaled, or divided
    by the scale twice. With nothing to clip (``free``: r then) the two differ."""
    __tracebackhide__ = True
    s = call.scale
    seen += f" That is max_norm / scale = {call.max_norm / s:.4g}."
    without = (
        f" With max_norm 1e6 (nothing to clip) it stepped with {free:.4g} × "
        "the true gradient."
    )
    if _rel_close(free, 1 / s):
        UNSCALED_TWICE.fail(title, seen + without)
    if _rel_close(free, 1.0) and _clipped_before_unscale(call):
        CLIPPED_SCALED.fail(title, seen)
    STEP_GRADIENT.fail(title, seen + without)


def _ratio_without_clipping(title, amp_step) -> float:
    """r of the learner's first step when max_norm (1e6) clips nothing; NaN when it
    cannot be measured."""
    __tracebackhide__ = True
    calls, _ = _run_amp_probe(title, amp_step, overflow=False, max_norm=1e6)
    first = calls[0]
    if isinstance(first.returned, Raised) or not first.steps:
        return math.nan
    return _fit(first.steps[-1][1], [first.true])[0][0]


GRADIENT_WIPED = Diagnosis(
    "gradients zeroed before the step",
    "The optimizer stepped with a zero gradient: the gradients were zeroed (or never "
    "reached .grad) between the backward and the step. Zero them at the start of the "
    "step, before the forward.",
    S_SCALER,
)


def _clipped_before_unscale(call: _AmpCall) -> bool:
    """The gradients unscale_ found were no longer the ones the backward left."""
    if not call.at_unscale or call.after_backward is None:
        return False
    return not torch.allclose(
        call.at_unscale[0], call.after_backward, rtol=1e-6, atol=0
    )


PER_TENSOR_CLIP = Diagnosis(
    "each parameter clipped on its own",
    "clip_grad_norm_ clips the norm of all the gradients together (one vector of every "
    "parameter's gradient), so it keeps their direction: call it once on "
    "model.parameters(), not once per parameter.",
    S_SCALER,
)
VALUE_CLIP = Diagnosis(
    "gradients clipped by value",
    "Each gradient element was clamped (clip_grad_value_ or clamp): that changes the "
    "gradient's direction. The step clips the norm: "
    "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm).",
    S_SCALER,
)


def _shape_of_clipping(title, call: _AmpCall, g_step: torch.Tensor) -> None:
    """The step's gradient is not a multiple of the true one: measure how it was
    clipped."""
    __tracebackhide__ = True
    m = call.max_norm
    pieces = zip(call.true.split(list(call.sizes)), g_step.split(list(call.sizes)))
    if all(
        torch.allclose(
            got, g * _clip_coefficient(float(g.norm()), m), rtol=1e-3, atol=1e-9
        )
        for g, got in pieces
    ):
        PER_TENSOR_CLIP.fail(
            title,
            f"In step {call.index + 1} every parameter's own "
            f"gradient norm was clipped to {m:g}.",
        )
    bound = float(g_step.abs().max())
    if torch.allclose(g_step, call.true.clamp(-bound, bound), rtol=1e-3, atol=1e-9):
        VALUE_CLIP.fail(
            title,
            f"In step {call.index + 1} every gradient element was "
            f"clamped to ±{bound:.4g} (max_norm={m:g}).",
        )
    _amp_unexplained(
        title,
        call,
        "the gradient the optimizer stepped with is not a "
        "multiple of the true gradient",
    )


def _amp_unexplained(title, call: _AmpCall, what: str) -> None:
    __tracebackhide__ = True
    fail(
        title,
        f"in step {call.index + 1} (max_norm {call.max_norm:g}, scale "
        f"{call.scale:g}) {what}; your calls were {_calls_text(call.events)}. "
        f"It {UNEXPLAINED}; compare your code with the lesson step by step.",
        S_SCALER,
    )


UPDATE_COUNT = Diagnosis(
    "scaler.update() calls per step",
    "Call scaler.update() exactly once per step, after scaler.step(optimizer): it "
    "halves the scale after an overflow and grows it after a run of good steps.",
    S_SCALER,
)
SCALER_ORDER = Diagnosis(
    "scaler calls out of order",
    "The order is scaler.scale(loss).backward(), scaler.unscale_(optimizer), clip, "
    "scaler.step(optimizer), scaler.update().",
    S_SCALER,
)


def _stage_update(title, call: _AmpCall) -> None:
    __tracebackhide__ = True
    updates = call.events.count("scaler.update")
    seen = (
        f"In step {call.index + 1} scaler.update() ran {updates} times; your calls "
        f"were {_calls_text(call.events)}."
    )
    if updates == 0:
        NO_UPDATE.fail(title, seen)
    if updates != 1:
        UPDATE_COUNT.fail(title, seen)
    mine = [e for e in call.events if e.startswith("scaler.") and "by scaler" not in e]
    if "scaler.step" in mine and (
        mine.index("scaler.update") < mine.index("scaler.step")
    ):
        SCALER_ORDER.fail(title, seen)


RETURNED_LOSS = Diagnosis(
    "wrong value returned",
    "amp_step returns the loss loss_fn returned (a tensor or a float), unscaled: not "
    "scaler.scale(loss), not None.",
    S_SCALER,
)


def _stage_returned(title, call: _AmpCall) -> None:
    __tracebackhide__ = True
    got, want = call.returned, call.loss
    if want is None:
        return  # loss_fn not called in this step: the final comparison reports it
    try:
        value = float(got.detach() if isinstance(got, torch.Tensor) else got)
    except (TypeError, ValueError, RuntimeError):
        RETURNED_LOSS.fail(
            title,
            f"Step {call.index + 1} returned "
            f"{type(got).__name__}, not the loss {want:.6g}.",
        )
    if value == want or _rel_close(value, want, 1e-5):
        return
    extra = (
        f", {value / want:.6g} × the loss: the scaled loss"
        if _rel_close(value / want, call.scale, 1e-5)
        else ""
    )
    RETURNED_LOSS.fail(
        title,
        f"Step {call.index + 1} returned {value:.6g}{extra}; "
        f"loss_fn returned {want:.6g}.",
    )


OVERFLOW_STEPPED = Diagnosis(
    "overflowing step not skipped",
    "When the scaled gradients overflow (inf/NaN), the step must be skipped and the "
    "scale lowered: scaler.step(optimizer) skips it, scaler.update() halves the scale.",
    S_SCALER,
)


def _stage_overflow(title, call: _AmpCall) -> None:
    """An overflowing step leaves the parameters alone and halves the scale."""
    __tracebackhide__ = True
    moved = int((call.after != call.before).sum())
    if moved:
        nan = int((~torch.isfinite(call.after)).sum())
        seen = (
            f"The overflowing step changed {moved} parameter values ({nan} are no "
            f"longer finite); your calls were {_calls_text(call.events)}."
        )
        direct = "optimizer.step" in call.events
        (OPTIMIZER_STEP if direct else OVERFLOW_STEPPED).fail(title, seen)
    if call.scale_after != call.scale / 2:
        seen = (
            f"After the overflowing step the scale was {call.scale_after:g}; "
            f"expected {call.scale:g} / 2 = {call.scale / 2:g}."
        )
        updates = call.events.count("scaler.update")
        (NO_UPDATE if updates == 0 else OVERFLOW_STEPPED).fail(title, seen)


def _diagnose_amp(title, amp_step) -> None:
    """The stages in the order a step runs them; the first that departs fails."""
    __tracebackhide__ = True
    calls, loss_fn = _run_amp_probe(title, amp_step, overflow=False)
    unclipped = functools.partial(_ratio_without_clipping, title, amp_step)
    if not loss_fn.states and isinstance(calls[0].returned, Raised):
        _report_raised(title, calls[0], overflow=False)
    _stage_autocast(title, loss_fn)
    for call in calls:
        if isinstance(call.returned, Raised):
            _report_raised(title, call, overflow=False)
        _stage_backward(title, call)
        _stage_step_count(title, call)
        _stage_step_gradient(title, call, unclipped)
        _stage_update(title, call)
        _stage_returned(title, call)
    overflow, _ = _run_amp_probe(title, amp_step, overflow=True)
    if isinstance(overflow[0].returned, Raised):
        _report_raised(title, overflow[0], overflow=True)
    _stage_overflow(title, overflow[0])
    if len(overflow) > 1:  # the step after an overflow backpropagates the new scale
        _stage_backward(title, overflow[1])


@single_threaded
def check_amp_step(amp_step) -> None:
    """``amp_step(model, batch, loss_fn, optimizer, scaler, max_norm)``: one
    mixed-precision training step, returning the (unscaled) loss."""
    __tracebackhide__ = True
    title = "amp_step"
    verify_integrity()
    _diagnose_amp(title, amp_step)
    compare_to_reference(
        title,
        _amp_cases(),
        amp_step,
        _amp_reference,
        AMP_PITFALLS,
        atol=1e-6,
        rtol=1e-5,
        adapt=_simulate_amp,
    )


# ----------------------------------------------------- DistributedSampler and set_epoch

EPOCHS = 3


class IndexDataset(Dataset):
    """Sample i is the tensor i: a loader's batches then say which samples it read."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        return torch.tensor(i)


BATCH_TOO_BIG = Diagnosis(
    "batches larger than batch_size",
    "Each rank's DataLoader must yield at most batch_size samples at a time: "
    "batch_size is the batch of one process (not the global batch), so pass "
    "batch_size=batch_size to the DataLoader.",
    S_SAMPLER,
)


def _read(title, make_loader, n, rank, world, epoch, batch_size):
    """(the sample indices, in order, of what ``make_loader`` gives ``rank``, the size
    of each of its batches, the class name of its sampler)."""
    __tracebackhide__ = True
    call = (
        f"make_loader(dataset, rank={rank}, world_size={world}, epoch={epoch}, "
        f"batch_size={batch_size})"
    )
    try:
        with quiet():  # a warning on stderr would make nbgrader zero the cell
            loader = make_loader(IndexDataset(n), rank, world, epoch, batch_size)
            batches = list(loader)
        batches = [
            b[0] if isinstance(b, (list, tuple)) and len(b) == 1 else b for b in batches
        ]
        for batch in batches:
            if not isinstance(batch, torch.Tensor):
                raise TypeError(
                    f"expected batches of sample tensors, got {type(batch).__name__}"
                )
    except Exception as exc:  # the learner's code may raise anything
        fail(
            title,
            f"your code raised {Raised(exc)!r} while the check ran {call}.",
            S_SAMPLER,
        )
    biggest = max((b.numel() for b in batches), default=0)
    if biggest > batch_size:
        BATCH_TOO_BIG.fail(title, f"{call} gave batches of {biggest} samples.")
    return (
        [i for batch in batches for i in batch.flatten().tolist()],
        [b.numel() for b in batches],
        type(getattr(loader, "sampler", None)).__name__,
    )


@dataclass(frozen=True)
class _Reads:
    """What each rank read in each epoch (``order[rank, epoch]``, its batch sizes
    ``sizes[rank, epoch]``), rank 0's epoch 1 read a second time (``again``), and the
    class name of rank 0's sampler."""

    world: int
    n: int
    batch_size: int
    order: dict
    sizes: dict
    again: list
    sampler: str

    def together(self, epoch):
        return [i for rank in range(self.world) for i in self.order[rank, epoch]]

    def counts(self, epoch):
        return [len(self.order[rank, epoch]) for rank in range(self.world)]


def _read_all(title, make_loader, world, n, batch_size) -> _Reads:
    __tracebackhide__ = True
    reads = {
        (rank, epoch): _read(title, make_loader, n, rank, world, epoch, batch_size)
        for epoch in range(EPOCHS)
        for rank in range(world)
    }
    again, _, _ = _read(title, make_loader, n, 0, world, 1, batch_size)
    return _Reads(
        world,
        n,
        batch_size,
        {key: r[0] for key, r in reads.items()},
        {key: r[1] for key, r in reads.items()},
        again,
        reads[0, 0][2],
    )


# Each probe returns what it saw when the loader shows its mistake, else None.


def _every_rank_reads_everything(reads):
    everything = list(range(reads.n))
    if all(sorted(reads.order[rank, 0]) == everything for rank in range(reads.world)):
        return f"Each of the {reads.world} ranks read all {reads.n} samples in epoch 0"
    return None


def _sampler_not_split(reads):
    if reads.sampler == "DistributedSampler":
        return _every_rank_reads_everything(reads)
    return None


SAMPLER_NOT_SPLIT = Diagnosis(
    "DistributedSampler not told the world",
    "Your loader has a DistributedSampler, yet every rank reads every sample: its "
    "num_replicas must be world_size (and rank your rank), so that each rank gets its "
    "own 1/world_size of the samples.",
    S_SAMPLER,
)
NO_SAMPLER = Diagnosis(
    "no DistributedSampler",
    "Every rank reads the whole dataset, so the processes compute the same gradients "
    "and DDP buys nothing. Pass sampler=DistributedSampler(dataset, "
    "num_replicas=world_size, rank=rank) to the DataLoader (and no shuffle=True: the "
    "sampler shuffles).",
    S_SAMPLER,
)


def _ranks_read_the_same(reads):
    first = reads.order[0, 0]
    if all(reads.order[rank, 0] == first for rank in range(1, reads.world)):
        return (
            f"In epoch 0 all {reads.world} ranks read the same {len(first)} "
            "samples, in the same order"
        )
    return None


RANK_IGNORED = Diagnosis(
    "rank not used",
    "Every rank got the same share: the loader does not depend on its rank argument. "
    "Pass rank=rank (and num_replicas=world_size) to the DistributedSampler.",
    S_SAMPLER,
)


def _batches_too_small(reads):
    for (rank, epoch), sizes in reads.sizes.items():
        if any(size < reads.batch_size for size in sizes[:-1]):
            return (
                f"Rank {rank}'s batches in epoch {epoch} held {sizes} samples, "
                f"with batch_size={reads.batch_size}"
            )
    return None


BATCH_TOO_SMALL = Diagnosis(
    "batches smaller than batch_size",
    "batch_size is the batch of one process: every batch but the last holds "
    "batch_size samples. Do not divide it by world_size (the global batch is "
    "world_size × batch_size).",
    S_SAMPLER,
)


def _samples_read_twice(reads):
    for epoch in range(EPOCHS):
        together = reads.together(epoch)
        repeats = len(together) - len(set(together))
        # DistributedSampler pads with repeats (or drops, with drop_last) up to
        # world_size - 1 samples so that every rank gets as many: more overlap means the
        # ranks disagree.
        if repeats >= reads.world:
            shared = len(set(reads.order[0, epoch]) & set(reads.order[1, epoch]))
            return (
                f"In epoch {epoch} {repeats} samples were read by more than one "
                f"rank (ranks 0 and 1 share {shared} of their "
                f"{len(reads.order[0, epoch])})"
            )
    return None


RANKS_OVERLAP = Diagnosis(
    "ranks overlap",
    "Several ranks read the same samples in one epoch. Every rank must shuffle with "
    "the same seed (the DistributedSampler's default) and then take its own share.",
    S_SAMPLER,
)


def _whole_batches_of_a_share(reads, count: int) -> bool:
    """``count`` samples is a rank's share (n / world, rounded either way) cut down to
    whole batches."""
    b = reads.batch_size
    shares = {reads.n // reads.world, -(-reads.n // reads.world)}
    return any(count == share // b * b < share for share in shares)


def _last_batch_dropped(reads):
    for epoch in range(EPOCHS):
        distinct = len(set(reads.together(epoch)))
        cut = all(_whole_batches_of_a_share(reads, c) for c in reads.counts(epoch))
        if distinct <= reads.n - reads.world and cut:
            return (
                f"In epoch {epoch} the ranks together read only {distinct} of the "
                f"{reads.n} samples, each rank {reads.counts(epoch)}, all in full "
                f"batches of {reads.batch_size}: the last, smaller batch was "
                "dropped"
            )
    return None


LAST_BATCH_DROPPED = Diagnosis(
    "last batch dropped",
    "Each epoch every sample must be read: keep the DataLoader's last, smaller batch "
    "(no drop_last=True on the DataLoader). Only DistributedSampler's own drop_last "
    "may leave out fewer than world_size samples.",
    S_SAMPLER,
)


def _samples_missed(reads):
    for epoch in range(EPOCHS):
        distinct = len(set(reads.together(epoch)))
        if distinct <= reads.n - reads.world:
            return (
                f"In epoch {epoch} the ranks together read only {distinct} of the "
                f"{reads.n} samples (each rank {reads.counts(epoch)}; a share is "
                f"about {reads.n / reads.world:.3g})"
            )
    return None


EPOCH_INCOMPLETE = Diagnosis(
    "epoch misses samples",
    "Each epoch the ranks together must read the whole dataset; DistributedSampler "
    "gives every rank its share (padding, or with drop_last dropping, fewer than "
    "world_size samples).",
    S_SAMPLER,
)


def _order_changes_on_repeat(reads):
    if reads.again != reads.order[0, 1]:
        return "Two calls for the same rank and epoch gave different orders"
    return None


UNSEEDED_SHUFFLE = Diagnosis(
    "shuffle not seeded",
    "The ranks are separate processes: they agree on how to split an epoch only when "
    "each computes the same shuffle, so the shuffle must be seeded "
    "(DistributedSampler(..., seed=...) does it) and two calls with the same arguments "
    "must give the same order.",
    S_SAMPLER,
)


def _sorted_every_epoch(reads):
    first = reads.order[0, 0]
    if first == sorted(first) and reads.order[0, 1] == first:
        return f"Rank 0 read {first} in epochs 0 and 1"
    return None


NO_SHUFFLE = Diagnosis(
    "no shuffling",
    "Every epoch reads the samples in the same, sorted order. Use "
    "DistributedSampler(..., shuffle=True) (its default) and sampler.set_epoch(epoch).",
    S_SAMPLER,
)


def _same_order_every_epoch(reads):
    first = reads.order[0, 0]
    if reads.order[0, 1] == first and reads.order[0, 2] == first:
        return f"Rank 0 read {first} in epochs 0, 1 and 2"
    return None


NO_SET_EPOCH = Diagnosis(
    "no set_epoch",
    "The order is shuffled but the same in every epoch. DistributedSampler seeds its "
    "shuffle with seed + epoch, and the epoch only changes when you call "
    "sampler.set_epoch(epoch) before iterating.",
    S_SAMPLER,
)


def _two_epochs_alike(reads):
    for a, b in ((0, 1), (1, 2), (0, 2)):
        if reads.order[0, a] == reads.order[0, b]:
            return f"Rank 0 read the same order in epochs {a} and {b}"
    return None


EPOCHS_REPEAT = Diagnosis(
    "epochs repeat an order",
    "Each epoch must have its own shuffle: call sampler.set_epoch(epoch) with the "
    "epoch itself (DistributedSampler then shuffles with seed + epoch).",
    S_SAMPLER,
)


def _same_split_every_epoch(reads):
    shares = [set(reads.order[0, epoch]) for epoch in range(EPOCHS)]
    if shares[0] == shares[1] == shares[2]:
        return (
            f"Rank 0 read the same {len(shares[0])} samples (in a new order) in "
            "epochs 0, 1 and 2"
        )
    return None


FIXED_SPLIT = Diagnosis(
    "split never reshuffled",
    "Which samples each rank gets must change from epoch to epoch: shuffle the whole "
    "dataset with the shared, epoch-dependent seed first, then split it "
    "(DistributedSampler with set_epoch does both), not each rank's fixed share.",
    S_SAMPLER,
)

# In this order: the first probe that sees a mistake names it.
LOADER_PROBES = (
    (_sampler_not_split, SAMPLER_NOT_SPLIT),
    (_every_rank_reads_everything, NO_SAMPLER),
    (_ranks_read_the_same, RANK_IGNORED),
    (_batches_too_small, BATCH_TOO_SMALL),
    (_samples_read_twice, RANKS_OVERLAP),
    (_last_batch_dropped, LAST_BATCH_DROPPED),
    (_samples_missed, EPOCH_INCOMPLETE),
    (_order_changes_on_repeat, UNSEEDED_SHUFFLE),
    (_sorted_every_epoch, NO_SHUFFLE),
    (_same_order_every_epoch, NO_SET_EPOCH),
    (_two_epochs_alike, EPOCHS_REPEAT),
    (_same_split_every_epoch, FIXED_SPLIT),
)


def check_make_loader(
    make_loader, world_sizes=(2, 4), n: int = 24, batch_size: int = 3
) -> None:
    """``make_loader(dataset, rank, world_size, epoch, batch_size)``: the DataLoader
    rank ``rank`` uses in epoch ``epoch``. Each epoch the ranks must split the dataset
    between them (no sample read twice, none missed: no drop_last on the DataLoader),
    in batches of batch_size per rank, in a shuffled order that changes from epoch to
    epoch (and so does the split) and is the same whenever asked again."""
    __tracebackhide__ = True
    title = "make_loader"
    verify_integrity()
    for world in world_sizes:
        reads = _read_all(title, make_loader, world, n, batch_size)
        for probe, diagnosis in LOADER_PROBES:
            seen = probe(reads)
            if seen is not None:
                diagnosis.fail(title, f"{seen} (world_size={world}, {n} samples).")
    passed(
        title,
        f"ranks split each epoch's samples, reshuffled every epoch "
        f"(world sizes {list(world_sizes)})",
    )


# --------------------------------------------------------------------- written by hand?


def _shortcuts() -> dict:
    """The code objects a step written by hand never enters: the course's training
    code."""
    from tformer_ref import accumulation, amp

    course = (
        accumulation.train_accumulated,
        accumulation.train_big_batch,
        amp.optimizer_step,
    )
    codes = {fn.__code__: f"{fn.__module__}.{fn.__name__}" for fn in course}
    # _autocast_loss too: it is part of the reference's step.
    for fn in (_accum_reference, _amp_reference, _autocast_loss):
        codes[fn.__code__] = "the check's own reference"
    return codes


@single_threaded
def check_accumulation_by_hand(accumulation_step) -> None:
    """Hidden test: ``accumulation_step`` does not call the course's training code."""
    __tracebackhide__ = True
    model, plan, optimizer, scheduler = _accum_cases()[1].make()
    args = (model, plan[0], optimizer, scheduler, _loss_fn)
    check_not_delegated(
        "accumulation_step",
        lambda: run(accumulation_step, args),
        forbidden_code=_shortcuts(),
    )


@single_threaded
def check_amp_by_hand(amp_step) -> None:
    """Hidden test: ``amp_step`` does not call the course's training code."""
    __tracebackhide__ = True
    model, batches, optimizer, scaler, max_norm, loss_fn = _amp_case(1, False, 0.05)()
    args = (model, batches[0], loss_fn, optimizer, scaler, max_norm)
    check_not_delegated(
        "amp_step", lambda: run(amp_step, args), forbidden_code=_shortcuts()
    )


seal(__name__)
