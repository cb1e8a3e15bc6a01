"""The tape of a training step: the objects a check hands a learner's step (optimizer,
GradScaler, the model's ``zero_grad``, ``loss_fn``, the parameters' gradients) write on
one :class:`Tape` what the step did with them, in order.

Names on the tape: ``optimizer.zero_grad``, ``optimizer.step``, ``model.zero_grad``,
``scheduler.step``, ``loss_fn``, ``backward``, ``scaler.scale``, ``scaler.unscale_``,
``scaler.step``, ``scaler.update``; a call made inside ``scaler.step`` ends in
`` by scaler.step``. Shape letter: P, all parameters flattened.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import torch

from ...guard.integrity import seal
from .recorders import recording_grad_scaler, recording_sgd


@dataclass
class Tape:
    """What the learner's step did to the objects the check handed it, in order.

    ``events``: names of the calls; ``steps``: per optimizer.step(), (the learning
    rate, the flat gradient [P] it stepped with); ``after_backward``: parameter index ->
    its gradient right after the last backward that reached it; ``at_unscale``: the
    gradient [P] each scaler.unscale_ found.
    """

    events: list = field(default_factory=list)
    steps: list = field(default_factory=list)
    after_backward: dict = field(default_factory=dict)
    at_unscale: list = field(default_factory=list)
    in_scaler_step: bool = False

    def since(self, start: int) -> list:
        return self.events[start:]

    def write(self, name: str) -> None:
        by = " by scaler.step" if self.in_scaler_step else ""
        self.events.append(name + by)

    def gradient_after_backward(self, sizes: tuple) -> torch.Tensor | None:
        """[P] the gradients the last backward left (zeros for a parameter it did not
        reach), or None when no backward reached any."""
        if not self.after_backward:
            return None
        return torch.cat(
            [
                self.after_backward.get(i, torch.zeros(n, dtype=torch.float64))
                for i, n in enumerate(sizes)
            ]
        )


def calls_text(events) -> str:
    """The calls on a tape as the learner wrote them (``loss_fn`` left out).

    Examples::

        >>> calls_text(["loss_fn", "optimizer.step", "scaler.update"])
        'optimizer.step → scaler.update'
    """
    return " → ".join(e for e in events if e != "loss_fn") or "none"


def grad_vector(params) -> torch.Tensor:
    """The gradients of ``params`` as one float64 CPU vector [P] (zeros where None).

    Examples::

        >>> a, b = torch.ones(2, requires_grad=True), torch.ones(1, requires_grad=True)
        >>> (3 * a).sum().backward()  # b never reached: its place reads 0
        >>> grad_vector([a, b]).tolist()
        [3.0, 3.0, 0.0]
    """
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
    gradient it stepped with) on ``tape``.

    Examples::

        >>> weight, tape = torch.ones(2, requires_grad=True), Tape()
        >>> opt = taped_sgd([weight], tape, lr=0.5)
        >>> (2 * weight).sum().backward(); opt.step(); opt.step()  # stepped twice
        >>> tape.events, [(lr, g.tolist()) for lr, g in tape.steps][0]
        (['optimizer.step', 'optimizer.step'], (0.5, [2.0, 2.0]))
    """

    def on_step(opt):
        tape.write("optimizer.step")
        params = [p for group in opt.param_groups for p in group["params"]]
        tape.steps.append((opt.param_groups[0]["lr"], grad_vector(params)))

    def on_zero_grad(opt):
        tape.events.append("optimizer.zero_grad")

    return recording_sgd(params, lr, on_step, on_zero_grad)


def taped_scaler(device_type: str, tape: Tape, init_scale: float):
    """GradScaler that writes the learner's scale, unscale_, step and update calls on
    ``tape``, and the gradient [P] each unscale_ found.

    Examples::

        >>> weight, tape = torch.ones(2, requires_grad=True), Tape()
        >>> opt = torch.optim.SGD([weight], lr=0.1)
        >>> scaler = taped_scaler("cpu", tape, 4.0)
        >>> scaler.scale(weight.sum()).backward()
        >>> scaler.step(opt); scaler.update()  # unscale_ left to scaler.step
        >>> tape.events[1:], tape.at_unscale[0].tolist()
        (['scaler.step', 'scaler.unscale_ by scaler.step', 'scaler.update'], [4.0, 4.0])
    """

    def before(name, scaler, *args):
        tape.write("scaler." + name)
        if name == "unscale_":
            optimizer = args[0]
            params = [p for group in optimizer.param_groups for p in group["params"]]
            tape.at_unscale.append(grad_vector(params))
        if name == "step":
            tape.in_scaler_step = True

    def after(name, scaler):
        if name == "step":
            tape.in_scaler_step = False

    return recording_grad_scaler(device_type, init_scale, before, after)


class TapedZeroGrad:
    """Stands in for a model's zero_grad: writes "model.zero_grad" on ``tape`` (an
    object, not a closure, so that a deepcopy of the model zeroes the copy).

    Examples::

        >>> model, tape = torch.nn.Linear(2, 1), Tape()
        >>> model.zero_grad = TapedZeroGrad(model, tape)
        >>> model.zero_grad(); tape.events
        ['model.zero_grad']
    """

    def __init__(self, module: torch.nn.Module, tape: Tape):
        self.module, self.tape = module, tape

    def __call__(self, set_to_none: bool = True):
        self.tape.events.append("model.zero_grad")
        torch.nn.Module.zero_grad(self.module, set_to_none)


def taped_loss_fn(tape: Tape, loss_fn):
    """``loss_fn`` that writes "loss_fn" on ``tape`` at each call."""

    def recorded(model, batch):
        tape.events.append("loss_fn")
        return loss_fn(model, batch)

    return recorded


class TapedLoss:
    """A ``loss_fn(model, batch)`` for the learner's step: ``loss(model, batch)``,
    recording the autocast state of each call ((enabled on the model's device, dtype,
    the device types where it was enabled)) and the float it returned; "loss_fn" on
    ``tape`` if given. With ``overflow`` the first call returns an infinite loss (as an
    fp16 overflow would).

    Examples::

        >>> model = torch.nn.Linear(2, 1)
        >>> loss_fn = TapedLoss(lambda m, b: m(b).mean(), overflow=False)
        >>> _ = loss_fn(model, torch.ones(1, 2))  # a planted mistake: no autocast
        >>> loss_fn.states
        [(False, None, ())]
    """

    def __init__(self, loss, overflow: bool, tape: Tape | None = None):
        self.overflow, self.calls, self.states, self.values = overflow, 0, [], []
        self.loss, self.tape = loss, tape

    def __call__(self, model, batch):
        device_type = next(model.parameters()).device.type
        enabled = torch.is_autocast_enabled(device_type)
        dtype = torch.get_autocast_dtype(device_type) if enabled else None
        elsewhere = tuple(d for d in ("cpu", "cuda") if torch.is_autocast_enabled(d))
        self.states.append((enabled, dtype, elsewhere))
        if self.tape is not None:
            self.tape.events.append("loss_fn")
        loss = self.loss(model, batch)
        self.calls += 1
        if self.overflow and self.calls == 1:
            loss = loss * float("inf")
        self.values.append(float(loss.detach()))
        return loss


def _write_grad(tape: Tape, index: int, param: torch.Tensor) -> None:
    tape.after_backward[index] = param.grad.detach().double().cpu().flatten().clone()
    if index == 0:  # the embedding is the last to get its gradient: a backward ended
        tape.events.append("backward")


def tape_backward(model: torch.nn.Module, tape: Tape) -> None:
    """Write each parameter's gradient right after a backward reached it on ``tape``,
    and "backward" once the first parameter (the last a backward reaches) got its own.

    Examples::

        >>> model, tape = torch.nn.Linear(2, 1), Tape()
        >>> tape_backward(model, tape)
        >>> model(torch.ones(1, 2)).sum().backward()
        >>> tape.events, tape.gradient_after_backward((2, 1)).tolist()
        (['backward'], [1.0, 1.0, 1.0])
    """
    for index, param in enumerate(model.parameters()):
        param.register_post_accumulate_grad_hook(
            functools.partial(_write_grad, tape, index)
        )


seal(__name__)
