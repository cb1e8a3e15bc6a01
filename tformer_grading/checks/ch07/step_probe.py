"""The training-step probe of chapter 7's two step exercises, ``accumulation_step``
and ``amp_step`` (book/ch07_scale): the toy model the cases train and its parameters
as one vector; the mixed-precision step's forward, and the probe that runs the
learner's amp_step on objects that write what it did on a tape (measure/tape.py);
the least-squares fit that reads a gradient as a weighted sum of known ones; and the
course's code a step written by hand never enters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from tformer_ref.device import get_device
from tformer_ref.toy_lm import TinyCausalLM, lm_loss_sum, make_token_data

from ...guard.integrity import seal
from ..diagnosis import Raised, run
from ..measure.tape import (
    Tape,
    TapedLoss,
    grad_vector,
    tape_backward,
    taped_scaler,
    taped_sgd,
)

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True

PAD = 0


def toy_model(dtype=torch.float64, seed=0):
    torch.manual_seed(seed)
    model = TinyCausalLM(vocab=12, d_model=16, n_heads=2, max_len=10, pad_id=PAD)
    return model.to(get_device(), dtype)


def flat_state(model, *extra):
    return torch.cat(
        [p.detach().flatten().double().cpu() for p in model.parameters()]
        + [torch.tensor(list(extra), dtype=torch.float64)]
    )


def fit(target: torch.Tensor, columns: list) -> tuple[list, float]:
    """Least squares ``target ≈ Σ w_j columns[j]``: (the weights, the relative
    residual)."""
    a = torch.stack(columns, dim=1)
    if not (a.isfinite().all() and target.isfinite().all()):
        return [math.nan] * len(columns), math.inf
    w = torch.linalg.lstsq(a, target.unsqueeze(1)).solution.squeeze(1)
    residual = (target - a @ w).norm() / target.norm().clamp_min(1e-300)
    return w.tolist(), float(residual)


# ------------------------------------------------- amp_step: one mixed-precision step


def amp_dtype(device_type):
    return torch.float16 if device_type == "cuda" else torch.bfloat16


def autocast_loss(model, batch, loss_fn):
    """The forward under autocast, in the course's dtype for the model's device."""
    device_type = next(model.parameters()).device.type
    with torch.amp.autocast(device_type, dtype=amp_dtype(device_type)):
        return loss_fn(model, batch)


def mean_loss(model, batch):
    """The cases' loss: the mean token loss."""
    loss_sum, n = lm_loss_sum(model, batch, PAD)
    return loss_sum / n


def _true_gradient(model, batch, scale: float) -> torch.Tensor:
    """The gradient [P] of the mean token loss under the course's autocast, through a
    backward scaled by ``scale`` and divided by it again (as GradScaler does), on a
    copy of ``model``."""
    twin = toy_model(torch.float32)
    twin.load_state_dict(model.state_dict())
    loss_sum, n = autocast_loss(twin, batch, lambda m, b: lm_loss_sum(m, b, PAD))
    (loss_sum / n * scale).backward()
    return grad_vector(twin.parameters()) / scale


@dataclass
class AmpCall:
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
    tape, device = Tape(), get_device()
    model = toy_model(torch.float32, seed=seed)
    tape_backward(model, tape)
    optimizer = taped_sgd(model.parameters(), tape, lr=0.2)
    scaler = taped_scaler(device.type, tape, init_scale=2.0**10)
    scaler.scale(torch.ones((), device=device))  # a first step creates the scale
    batches = [
        make_token_data(6, 10, vocab=12, pad_id=PAD, min_len=3, seed=seed + s).to(
            device
        )
        for s in range(2)
    ]
    return tape, model, optimizer, scaler, batches, TapedLoss(mean_loss, overflow, tape)


def run_amp_probe(title, amp_step, overflow: bool, max_norm: float = 0.05):
    """Two calls of ``amp_step``: (a list of :class:`AmpCall`, the loss_fn
    recorder)."""
    tape, model, optimizer, scaler, batches, loss_fn = _amp_probe_setup(overflow, 1)
    sizes = tuple(p.numel() for p in model.parameters())
    calls = []
    for index, batch in enumerate(batches):
        scale = scaler.get_scale()
        true = _true_gradient(model, batch, scale)
        leftover, before = grad_vector(model.parameters()), flat_state(model)
        start, first_step, losses = len(tape.events), len(tape.steps), loss_fn.calls
        tape.after_backward.clear()
        tape.at_unscale.clear()
        out = run(amp_step, (model, batch, loss_fn, optimizer, scaler, max_norm))
        after_backward = tape.gradient_after_backward(sizes)
        if after_backward is None:
            after_backward = _assigned_gradient(tape, leftover)
        loss = loss_fn.values[-1] if loss_fn.calls > losses else None
        calls.append(
            AmpCall(
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
                flat_state(model),
                out,
                loss,
                max_norm,
                sizes,
                grad_vector(model.parameters()),
            )
        )
        if isinstance(out, Raised):
            break  # what the step did before it raised is still measured
    return calls, loss_fn


def _assigned_gradient(tape: Tape, leftover: torch.Tensor) -> torch.Tensor | None:
    """Gradients written into .grad without a backward (torch.autograd.grad, then
    p.grad = g) fire no hook: they are what unscale_ found, if it found new ones."""
    if not tape.at_unscale or torch.equal(tape.at_unscale[0], leftover):
        return None
    return tape.at_unscale[0]


# --------------------------------------------------------------------- written by hand?


def shortcuts() -> dict:
    """The code objects a step written by hand never enters: the course's training
    code."""
    from tformer_ref import accumulation, amp

    from .accumulation_step import accum_reference
    from .amp_step import amp_reference, autocast_loss

    course = (
        accumulation.train_accumulated,
        accumulation.train_big_batch,
        amp.optimizer_step,
    )
    codes = {fn.__code__: f"{fn.__module__}.{fn.__name__}" for fn in course}
    # autocast_loss too: it is part of the reference's step.
    for fn in (accum_reference, amp_reference, autocast_loss):
        codes[fn.__code__] = "the check's own reference"
    return codes


seal(__name__)
