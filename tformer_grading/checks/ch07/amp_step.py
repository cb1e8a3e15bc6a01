"""Checks for exercise ``amp_step`` of chapter 7 (book/ch07_scale):
``amp_step(model, batch, loss_fn, optimizer, scaler, max_norm) -> loss``, one
mixed-precision training step (autocast, GradScaler, unscale_, clip) returning the
unscaled loss.

The check first runs the learner's step on a probe whose optimizer, GradScaler and
loss_fn write down what the step did (the calls, in order; the gradient right after the
backward; the gradient and learning rate the optimizer step used) and measures it stage
by stage against what the step must do: the first stage that departs is reported with
the measured quantity (the factor the backward scaled by, the gradient norm the
optimizer stepped with, the scale after an overflow, ...). Then the parameters it ends
with on several cases are compared with the reference's, where a difference no stage
explained is reported as measured. Each mistake is named by the stage that measures it:
wrong variants run after the stages reproduced no answer of the bank (2026-12-07), and
were deleted.
"""

from __future__ import annotations

import functools
import math

import torch
from torch.nn.utils import clip_grad_norm_

from tformer_ref.device import get_device
from tformer_ref.toy_lm import make_token_data

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
from ..measure.clipping import clamped_by_value, clip_coefficient, clipped_per_tensor
from ..measure.closeness import near
from ..measure.tape import TapedLoss, calls_text
from .sections import S_AMP, S_SCALER
from .step_probe import (
    PAD,
    AmpCall,
    amp_dtype,
    autocast_loss,
    fit,
    flat_state,
    mean_loss,
    run_amp_probe,
    shortcuts,
    toy_model,
)

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True

# ------------------------------------------------------------- one mixed-precision step


def amp_reference(model, batch, loss_fn, optimizer, scaler, max_norm):
    optimizer.zero_grad()
    loss = autocast_loss(model, batch, loss_fn)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)  # true-sized gradients: now max_norm means what it says
    clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)  # skipped when a gradient is inf/NaN
    scaler.update()
    return loss.detach()


CLIPPED_SCALED = Diagnosis(
    "clipping before unscale_",
    "You clip while the gradients are still multiplied by the scaler's scale (e.g. "
    "1024), so they are clipped at max_norm / scale and the update is far too small. "
    "Call scaler.unscale_(optimizer) first, then clip, then scaler.step(optimizer).",
    S_SCALER,
)


NOT_CLIPPED = Diagnosis(
    "gradients not clipped",
    "The gradient norm is never clipped to max_norm: after scaler.unscale_(optimizer), "
    "call torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm).",
    S_SCALER,
)


OPTIMIZER_STEP = Diagnosis(
    "optimizer.step() instead of scaler.step(optimizer)",
    "optimizer.step() steps even when the gradients overflowed to inf/NaN, and the "
    "parameters become NaN. scaler.step(optimizer) checks for inf/NaN and skips that "
    "step.",
    S_SCALER,
)


OPTIMIZER_STEP_SCALED = Diagnosis(
    "optimizer.step() instead of scaler.step(optimizer)",
    "optimizer.step() on gradients that were never unscaled steps with gradients "
    "multiplied by the scale, and it does not skip overflowed steps. Use "
    "scaler.unscale_, clip, scaler.step(optimizer).",
    S_SCALER,
)


NO_UPDATE = Diagnosis(
    "scaler.update() missing",
    "Without scaler.update() the scale never changes: after an overflow it must be "
    "lowered (and it grows back after a run of good steps). Call scaler.update() after "
    "scaler.step(optimizer).",
    S_SCALER,
)


LOSS_NOT_SCALED = Diagnosis(
    "loss not scaled",
    "You call loss.backward() instead of scaler.scale(loss).backward(): unscale_ then "
    "divides unscaled gradients by the scale, and in float16 the small ones would have "
    "underflowed anyway.",
    S_SCALER,
)


AMP_NOT_ZEROED = Diagnosis(
    "zero_grad missing",
    "The gradients are never zeroed, so every step adds the earlier steps' gradients. "
    "Call optimizer.zero_grad() at the start of each step.",
    S_SCALER,
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


def _amp_case(seed, overflow, max_norm):
    def make():
        device = get_device()
        model = toy_model(torch.float32, seed=seed)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
        scaler = torch.amp.GradScaler(device.type, init_scale=2.0**10)
        scaler.scale(torch.ones((), device=device))  # a first step creates the scale
        batches = [
            make_token_data(6, 10, vocab=12, pad_id=PAD, min_len=3, seed=seed + s).to(
                device
            )
            for s in range(2)
        ]
        return (
            model,
            batches,
            optimizer,
            scaler,
            max_norm,
            TapedLoss(mean_loss, overflow),
        )

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
        return flat_state(model, math.log2(scaler.get_scale()))

    return simulate


# ------------------------------------------------------- amp: the stages, measured


def _report_raised(title, call: AmpCall, overflow: bool) -> None:
    """The learner's step raised: say so, after the stages it got through."""
    if call.after_backward is None and not overflow:
        NO_BACKWARD.fail(
            title,
            f"In step {call.index + 1} no parameter got a gradient before your code "
            f"raised {call.returned!r}; your calls were {calls_text(call.events)}.",
        )
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
        f"{calls_text(call.events)}.",
        S_SCALER,
    )


def _stage_autocast(title, loss_fn: TapedLoss) -> None:
    if not loss_fn.states:
        fail(title, "your step never called loss_fn(model, batch).", S_AMP)
    enabled, dtype, elsewhere = loss_fn.states[0]
    device_type = get_device().type
    want = amp_dtype(device_type)
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


#: A ratio read back from a float32 step, against a candidate's.
_rel_close = functools.partial(near, rel=1e-3)


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


def _stage_backward(title, call: AmpCall) -> None:
    """Right after the backward the gradient must be scale × the loss's gradient."""
    if call.after_backward is None:
        NO_BACKWARD.fail(
            title, f"In step {call.index + 1} no parameter got a gradient."
        )
    if not call.after_backward.isfinite().all():
        return  # only after an overflow: that step is measured by _stage_overflow
    # An overflow leaves inf in .grad: not a column to fit (the step must zero it).
    left = call.leftover.any() and call.leftover.isfinite().all()
    columns = [call.true] + ([call.leftover] if left else [])
    weights, residual = fit(call.after_backward, columns)
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


def _stage_step_count(title, call: AmpCall) -> None:
    steps = len(call.steps)
    if steps != 1:
        AMP_STEP_COUNT.fail(
            title,
            f"In step {call.index + 1} (no overflow) "
            f"optimizer.step() ran {steps} times; the calls "
            f"were {calls_text(call.events)}.",
        )


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
    "The gradients were divided by the scale twice (an extra division, or "
    "scaler.update() before scaler.step() or unscale_: update() forgets the "
    "unscale_, so step() unscales again). GradScaler unscales once: "
    "scaler.unscale_(optimizer) before clipping, scaler.step, then scaler.update().",
    S_SCALER,
)


def _stage_step_gradient(title, call: AmpCall, unclipped) -> None:
    """The gradient optimizer.step() used: r × the true gradient, r = the clip.
    ``unclipped()`` measures r again with nothing to clip (run only when needed)."""
    g_step, norm = call.steps[-1][1], float(call.true.norm())
    weights, residual = fit(g_step, [call.true])
    if residual > 1e-3:
        _shape_of_clipping(title, call, g_step)
    r, s, m = weights[0] + 0.0, call.scale, call.max_norm  # + 0.0: no "-0"
    want = clip_coefficient(norm, m)
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
    if _rel_close(r, want / s) or _rel_close(r, clip_coefficient(s * norm, m)):
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


def _changed_after_step(call: AmpCall) -> list:
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


def _stage_after_step(title, call: AmpCall, seen: str) -> None:
    """The step's gradient is wrong and the learner unscaled or clipped after the
    step: that placement is the cause, whatever the size."""
    found = _changed_after_step(call)
    if found:
        CLIPPED_AFTER_STEP.fail(
            title,
            f"{seen} After the optimizer step your code "
            f"made {' and '.join(found)}; your calls were "
            f"{calls_text(call.events)}.",
        )


def _scale_sized_gradient(title, call: AmpCall, seen: str, free: float) -> None:
    """The step's gradient is 1/scale too small: clipped while still scaled, or divided
    by the scale twice. With nothing to clip (``free``: r then) the two differ."""
    s = call.scale
    seen += f" That is max_norm / scale = {call.max_norm / s:.4g}."
    without = (
        f" With max_norm 1e6 (nothing to clip) it stepped with {free:.4g} × "
        "the true gradient."
    )
    if _rel_close(free, 1 / s):
        order = f" Your calls were {calls_text(call.events)}."
        UNSCALED_TWICE.fail(title, seen + without + order)
    if _rel_close(free, 1.0) and _clipped_before_unscale(call):
        CLIPPED_SCALED.fail(title, seen)
    STEP_GRADIENT.fail(title, seen + without)


def _ratio_without_clipping(title, amp_step) -> float:
    """r of the learner's first step when max_norm (1e6) clips nothing; NaN when it
    cannot be measured."""
    calls, _ = run_amp_probe(title, amp_step, overflow=False, max_norm=1e6)
    first = calls[0]
    if isinstance(first.returned, Raised) or not first.steps:
        return math.nan
    return fit(first.steps[-1][1], [first.true])[0][0]


GRADIENT_WIPED = Diagnosis(
    "gradients zeroed before the step",
    "The optimizer stepped with a zero gradient: the gradients were zeroed (or never "
    "reached .grad) between the backward and the step. Zero them at the start of the "
    "step, before the forward.",
    S_SCALER,
)


def _clipped_before_unscale(call: AmpCall) -> bool:
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


def _shape_of_clipping(title, call: AmpCall, g_step: torch.Tensor) -> None:
    """The step's gradient is not a multiple of the true one: measure how it was
    clipped."""
    m = call.max_norm
    if clipped_per_tensor(g_step, call.true, call.sizes, m, rtol=1e-3, atol=1e-9):
        PER_TENSOR_CLIP.fail(
            title,
            f"In step {call.index + 1} every parameter's own "
            f"gradient norm was clipped to {m:g}.",
        )
    bound = clamped_by_value(g_step, call.true, rtol=1e-3, atol=1e-9)
    if bound is not None:
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


def _amp_unexplained(title, call: AmpCall, what: str) -> None:
    fail(
        title,
        f"in step {call.index + 1} (max_norm {call.max_norm:g}, scale "
        f"{call.scale:g}) {what}; your calls were {calls_text(call.events)}. "
        f"It {UNEXPLAINED}; compare your code with the lesson step by step.",
        S_SCALER,
    )


UPDATE_COUNT = Diagnosis(
    "scaler.update() calls per step",
    "Call scaler.update() exactly once per step, after scaler.step(optimizer): it "
    "halves the scale after an overflow and grows it after a run of good steps.",
    S_SCALER,
)


def _stage_update(title, call: AmpCall) -> None:
    updates = call.events.count("scaler.update")
    seen = (
        f"In step {call.index + 1} scaler.update() ran {updates} times; your calls "
        f"were {calls_text(call.events)}."
    )
    if updates == 0:
        NO_UPDATE.fail(title, seen)
    if updates != 1:
        UPDATE_COUNT.fail(title, seen)
    # An update before scaler.step is not named here: scaler.step then unscales a
    # second time, which _stage_step_gradient measures first ("unscaled twice").


RETURNED_LOSS = Diagnosis(
    "wrong value returned",
    "amp_step returns the loss loss_fn returned (a tensor or a float), unscaled: not "
    "scaler.scale(loss), not None.",
    S_SCALER,
)


def _stage_returned(title, call: AmpCall) -> None:
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
    if value == want or _rel_close(value, want, rel=1e-5):
        return
    extra = (
        f", {value / want:.6g} × the loss: the scaled loss"
        if _rel_close(value / want, call.scale, rel=1e-5)
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


def _stage_overflow(title, call: AmpCall) -> None:
    """An overflowing step leaves the parameters alone and halves the scale."""
    moved = int((call.after != call.before).sum())
    if moved:
        nan = int((~torch.isfinite(call.after)).sum())
        seen = (
            f"The overflowing step changed {moved} parameter values ({nan} are no "
            f"longer finite); your calls were {calls_text(call.events)}."
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
    calls, loss_fn = run_amp_probe(title, amp_step, overflow=False)
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
    overflow, _ = run_amp_probe(title, amp_step, overflow=True)
    if isinstance(overflow[0].returned, Raised):
        _report_raised(title, overflow[0], overflow=True)
    _stage_overflow(title, overflow[0])
    if len(overflow) > 1:  # the step after an overflow backpropagates the new scale
        _stage_backward(title, overflow[1])


@single_threaded
def check_amp_step(amp_step) -> None:
    """``amp_step(model, batch, loss_fn, optimizer, scaler, max_norm)``: one
    mixed-precision training step, returning the (unscaled) loss."""
    title = "amp_step"
    verify_integrity()
    _diagnose_amp(title, amp_step)
    compare_to_reference(
        title,
        _amp_cases(),
        amp_step,
        amp_reference,
        (),  # each mistake is named by the stage that measures it, above
        atol=1e-6,
        rtol=1e-5,
        adapt=_simulate_amp,
    )


@single_threaded
def check_amp_by_hand(amp_step) -> None:
    """Hidden test: ``amp_step`` does not call the course's training code."""
    model, batches, optimizer, scaler, max_norm, loss_fn = _amp_case(1, False, 0.05)()
    args = (model, batches[0], loss_fn, optimizer, scaler, max_norm)
    check_not_delegated(
        "amp_step", lambda: run(amp_step, args), forbidden_code=shortcuts()
    )


seal(__name__)
