"""Checks for exercise ``accumulation_step`` of chapter 7 (book/ch07_scale):
``accumulation_step(model, micro_batches, optimizer, scheduler, loss_fn)``, one
optimizer step from k micro-batches, equal to one step on their concatenation.

The check first runs the learner's step on a probe whose optimizer, scheduler and
loss_fn write down what the step did (the calls, in order; the gradient and learning
rate each optimizer step used) and measures it stage by stage against what the step
must do: the first stage that departs is reported with the measured quantity (the
divisor each micro-batch's loss got, the gradient norm the optimizer stepped with, ...).
Then the parameters it ends with on several cases are compared with the reference's,
where a difference no stage explained is reported as measured. Each mistake is named by
the stage that measures it: wrong variants run after the stages reproduced no answer of
the bank (2026-12-07), and were deleted.
"""

from __future__ import annotations

import copy
import functools
import math
from dataclasses import dataclass

import torch
from torch.optim.lr_scheduler import LambdaLR

from tformer_ref.device import get_device
from tformer_ref.toy_lm import count_targets, lm_loss_sum, make_token_data

from ...guard.integrity import seal
from ..delegation import check_not_delegated
from ..diagnosis import (
    UNEXPLAINED,
    Case,
    Diagnosis,
    Raised,
    compare_to_reference,
    fail,
    run,
    single_threaded,
    verify_integrity,
)
from ..measure.closeness import near
from ..measure.recorders import recording_lambda_lr
from ..measure.tape import Tape, TapedZeroGrad, grad_vector, taped_loss_fn, taped_sgd
from .sections import S_ACCUM
from .step_probe import PAD, fit, flat_state, shortcuts, toy_model

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True

# ---------------------------------------------------------------- gradient accumulation


def _loss_fn(model, batch):
    return lm_loss_sum(model, batch, PAD)


def accum_reference(model, micro_batches, optimizer, scheduler, loss_fn):
    optimizer.zero_grad()
    n_total = sum(count_targets(b, PAD) for b in micro_batches)
    for batch in micro_batches:
        loss_sum, _ = loss_fn(model, batch)
        # The k terms add up to (all token losses) / (all tokens): the big batch's mean.
        (loss_sum / n_total).backward()
    optimizer.step()
    scheduler.step()


MEAN_NOT_DIVIDED = Diagnosis(
    "loss not divided under accumulation",
    "Each micro-batch's mean loss goes into backward undivided, so the k gradients add "
    "up to k times the big batch's gradient: the same as multiplying the learning rate "
    "by k. Divide so that the k losses add up to the big batch's mean: by the step's "
    "total number of target tokens.",
    S_ACCUM,
)


SUM_NOT_DIVIDED = Diagnosis(
    "loss summed, not averaged",
    "You call backward on the summed token loss of each micro-batch without dividing "
    "at all: the gradient is N_tokens times the big batch's mean-loss gradient. Divide "
    "each micro-batch's summed loss by the total number of target tokens of the step.",
    S_ACCUM,
)


DIVIDED_BY_K = Diagnosis(
    "divided by micro-batches, not by tokens",
    "You divide each micro-batch's mean loss by k (the seed's loss / "
    "accumulation_steps). That equals the big batch only when every micro-batch holds "
    "the same number of real tokens; with padding they do not, and short micro-batches "
    "weigh as much as long ones. Divide each micro-batch's summed loss by the total "
    "number of target tokens of the whole step.",
    S_ACCUM,
)


ZERO_EACH_MICRO_STEP = Diagnosis(
    "zero_grad every micro-step",
    "optimizer.zero_grad() inside the micro-batch loop wipes what the earlier "
    "micro-batches accumulated: the step uses only the last micro-batch. Zero once per "
    "optimizer step, before the loop (or after the step).",
    S_ACCUM,
)


NEVER_ZEROED = Diagnosis(
    "gradients never zeroed",
    "Nothing zeroes the gradients between optimizer steps, so each step also adds "
    "every earlier step's gradients. Call optimizer.zero_grad() once per optimizer "
    "step.",
    S_ACCUM,
)


OPTIMIZER_EACH_MICRO_STEP = Diagnosis(
    "optimizer stepped every micro-step",
    "optimizer.step() inside the micro-batch loop makes k small steps instead of one "
    "big one: that is training with the small batch, not accumulating. Step once, "
    "after the last micro-batch.",
    S_ACCUM,
)


SCHEDULER_EACH_MICRO_STEP = Diagnosis(
    "scheduler stepped every micro-step",
    "scheduler.step() inside the micro-batch loop advances the learning-rate schedule "
    "k times per optimizer step (warm-up ends k times too early). The schedule counts "
    "optimizer steps: step it once, after optimizer.step().",
    S_ACCUM,
)


def _warm_up(step):
    """The cases' schedule: the learning-rate factor after ``step`` scheduler steps."""
    return min(1.0, (step + 1) / 4)


def _accum_case(seed, sizes, steps, min_len, momentum=0.0):
    """Several optimizer steps, each on micro-batches of the given sizes; SGD with a
    warm-up schedule."""

    def make():
        model = toy_model(seed=seed)
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
        return flat_state(model, optimizer.param_groups[0]["lr"])

    return simulate


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
        out.append(grad_vector(twin.parameters()))
    return out


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
    tape = Tape()
    model = toy_model(seed=7)
    model.zero_grad = TapedZeroGrad(model, tape)  # zeroing is part of what is seen
    optimizer = taped_sgd(model.parameters(), tape, lr=PROBE_LR)
    scheduler = recording_lambda_lr(
        optimizer, _warm_up, lambda _: tape.events.append("scheduler.step")
    )
    n = sum(PROBE_SIZES)
    data = make_token_data(2 * n, 10, vocab=12, pad_id=PAD, min_len=2, seed=7).to(
        get_device()
    )
    calls = []
    for index, step in enumerate(data.split(n)):
        micro = list(step.split(list(PROBE_SIZES)))
        info, sums = _micro_info(micro), _summed_loss_gradients(model, micro)
        leftover = grad_vector(model.parameters())
        start, first_step = len(tape.events), len(tape.steps)
        out = run(
            accumulation_step,
            (model, micro, optimizer, scheduler, taped_loss_fn(tape, _loss_fn)),
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
            (
                f"every target position of the step, padding included "
                f"({sum(info.positions)})"
            ),
            sum(info.positions),
        ),
        (
            (
                f"the step's real tokens, the first of each sequence included "
                f"({sum(info.real_tokens)})"
            ),
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


#: A divisor or rate read back from a float64 step, against a candidate's.
_close = functools.partial(near, rel=1e-6)


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
    info, n = call.info, sum(call.info.targets)
    columns = list(call.sums) + ([call.leftover] if call.leftover.any() else [])
    weights, residual = fit(call.steps[-1][1], columns)
    if residual > 1e-6:
        _weights_unexplained(title, call, residual)
    if len(weights) > info.k and abs(weights[-1]) > 1e-6:
        return  # the previous step's gradient is still there: the zeroing stage says so
    w = weights[: info.k]
    if all(_close(x * n, 1.0) for x in w):
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
    return x > 0 and _close(x, float(f"{x:.1e}"), rel=rel)


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
        and all(_close(g, got[0], rel=1e-5) for g in got)
    )


def _stage_rescaled(title, call: _AccumCall, seen: str, others: tuple) -> None:
    """A uniform factor that shrinks the whole gradient to a round norm below the
    right gradient's, or to the same norm in every call: a clip (clip_grad_norm_),
    not a loss divisor."""
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
    if not call.leftover.any():
        return
    weights, _ = fit(call.steps[-1][1], list(call.sums) + [call.leftover])
    kept = weights[-1]
    if abs(kept) <= 1e-6:
        return
    seen = (
        f"The gradient of call {call.index + 1}'s optimizer.step() still held "
        f"{kept:.4g} × the gradient left from call {call.index}."
    )
    if _close(kept, 1.0, rel=1e-5):
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
    _stage_optimizer_steps(title, call)
    _stage_weights(title, call, others)


def _diagnose_accumulation(title, accumulation_step) -> None:
    """The stages in the order the step runs them; the first that departs fails."""
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
    title = "accumulation_step"
    verify_integrity()
    _diagnose_accumulation(title, accumulation_step)
    compare_to_reference(
        title,
        _accum_cases(hidden),
        accumulation_step,
        accum_reference,
        (),  # each mistake is named by the stage that measures it, above
        atol=1e-9,
        rtol=1e-7,
        adapt=_simulate_accum,
    )


@single_threaded
def check_accumulation_by_hand(accumulation_step) -> None:
    """Hidden test: ``accumulation_step`` does not call the course's training code."""
    model, plan, optimizer, scheduler = _accum_cases()[1].make()
    args = (model, plan[0], optimizer, scheduler, _loss_fn)
    check_not_delegated(
        "accumulation_step",
        lambda: run(accumulation_step, args),
        forbidden_code=shortcuts(),
    )


seal(__name__)
