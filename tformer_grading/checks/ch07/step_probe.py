"""The training-step probe shared by chapter 7's two step exercises,
``accumulation_step`` and ``amp_step`` (book/ch07_scale): the toy model the cases train
and its parameters as one vector, the tape on which a taped optimizer writes what the
learner's step did (its calls, the learning rate and gradient of each optimizer step),
the least-squares fit that reads a gradient as a weighted sum of known ones, and the
course's code a step written by hand never enters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from tformer_ref.device import get_device
from tformer_ref.toy_lm import TinyCausalLM

from ...guard.integrity import seal
from ..measure.recorders import recording_sgd

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


# ---------------------------------------------- recording what the learner's step did


@dataclass
class Tape:
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


def grad_vector(params) -> torch.Tensor:
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


def taped_sgd(params, tape: Tape, lr: float) -> torch.optim.SGD:
    """SGD that writes every zero_grad() and step() (with the learning rate and the
    gradient it stepped with) on ``tape``."""

    def on_step(opt):
        by = " by scaler.step" if tape.in_scaler_step else ""
        tape.events.append("optimizer.step" + by)
        params = [p for group in opt.param_groups for p in group["params"]]
        tape.steps.append((opt.param_groups[0]["lr"], grad_vector(params)))

    def on_zero_grad(opt):
        tape.events.append("optimizer.zero_grad")

    return recording_sgd(params, lr, on_step, on_zero_grad)


def fit(target: torch.Tensor, columns: list) -> tuple[list, float]:
    """Least squares ``target ≈ Σ w_j columns[j]``: (the weights, the relative
    residual)."""
    a = torch.stack(columns, dim=1)
    if not (a.isfinite().all() and target.isfinite().all()):
        return [math.nan] * len(columns), math.inf
    w = torch.linalg.lstsq(a, target.unsqueeze(1)).solution.squeeze(1)
    residual = (target - a @ w).norm() / target.norm().clamp_min(1e-300)
    return w.tolist(), float(residual)


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
