"""Recording the calls a learner's code makes on the objects a check hands it: the
optimizer's ``step`` and ``zero_grad``, the scheduler's ``step``, the GradScaler's
``scale``, ``unscale_``, ``step`` and ``update``.

One answer to one PyTorch quirk. ``Optimizer.__init__`` wraps the *class's* ``step``
in a profiling hook when the class's first instance is made: a recording subclass has
its ``step`` replaced under it, and the class attribute changes after the integrity
seal recorded it. ``LRScheduler.__init__`` in turn wraps the *instance's* ``step`` of
its optimizer, and expects a bound method there. So a recorder wraps the instance's
method, bound, and leaves every class alone; the object stays a plain ``SGD`` or
``LambdaLR`` for any ``isinstance`` the learner's code makes.
"""

from __future__ import annotations

import types
from collections.abc import Callable

import torch
from torch.optim.lr_scheduler import LambdaLR

from ...guard.integrity import seal


def record_calls(obj, name: str, before: Callable, after=None) -> object:
    """Make ``obj.<name>(...)`` call ``before(obj, *args, **kwargs)`` first, and
    ``after(obj)`` once it returned or raised, on this instance only; return ``obj``.

    Examples::

        >>> weight = torch.zeros(1, requires_grad=True)
        >>> opt = torch.optim.SGD([weight], lr=0.5)
        >>> rates = []
        >>> def rate(o):
        ...     rates.append(o.param_groups[0]["lr"])
        >>> _ = record_calls(opt, "step", rate)
        >>> sched = LambdaLR(opt, lambda step: 0.5**step)  # wraps opt.step in turn
        >>> for _ in range(3):
        ...     opt.step()
        ...     sched.step()
        >>> rates  # the rate each optimizer.step() used: a halving schedule read back
        [0.5, 0.25, 0.125]
        >>> type(opt) is torch.optim.SGD  # no subclass: the class is left alone
        True
    """
    inner = getattr(obj, name)

    def recorded(self, *args, **kwargs):
        before(self, *args, **kwargs)
        if after is None:
            return inner(*args, **kwargs)
        try:
            return inner(*args, **kwargs)
        finally:
            after(self)

    setattr(obj, name, types.MethodType(recorded, obj))
    return obj


def recording_sgd(params, lr: float, on_step: Callable, on_zero_grad=None):
    """``torch.optim.SGD(params, lr=lr)`` whose ``step()`` calls ``on_step(opt)`` and
    ``zero_grad()`` calls ``on_zero_grad(opt)`` first.

    Examples::

        >>> weight = torch.ones(2, requires_grad=True)
        >>> calls = []
        >>> opt = recording_sgd([weight], 0.5, lambda o: calls.append("step"),
        ...                     lambda o: calls.append("zero_grad"))
        >>> weight.sum().backward(); opt.step(); opt.zero_grad()
        >>> calls, weight.tolist()
        (['step', 'zero_grad'], [0.5, 0.5])
    """
    opt = torch.optim.SGD(params, lr=lr)
    record_calls(opt, "step", lambda o, *a, **k: on_step(o))
    if on_zero_grad is not None:
        record_calls(opt, "zero_grad", lambda o, *a, **k: on_zero_grad(o))
    return opt


def recording_lambda_lr(optimizer, lr_lambda: Callable, on_step: Callable) -> LambdaLR:
    """``LambdaLR(optimizer, lr_lambda)`` whose every ``step()`` the learner makes
    calls ``on_step(scheduler)`` first (not the one LambdaLR makes when it is built).

    Examples::

        >>> opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
        >>> steps = []
        >>> sched = recording_lambda_lr(opt, lambda s: 0.1 * s, steps.append)
        >>> opt.step(); sched.step()
        >>> len(steps), opt.param_groups[0]["lr"]
        (1, 0.1)
    """
    return record_calls(
        LambdaLR(optimizer, lr_lambda), "step", lambda s, *a, **k: on_step(s)
    )


SCALER_CALLS = ("scale", "unscale_", "step", "update")


def recording_grad_scaler(
    device_type: str, init_scale: float, before: Callable, after: Callable
) -> torch.amp.GradScaler:
    """``torch.amp.GradScaler(device_type, init_scale=init_scale)`` whose
    ``scale``, ``unscale_``, ``step`` and ``update`` call ``before(name, scaler,
    *args)`` first and ``after(name, scaler)`` once done. Calls the scaler makes on
    itself are recorded too: ``step`` unscales first when the learner did not.

    Examples::

        >>> weight = torch.ones(2, requires_grad=True)
        >>> opt = torch.optim.SGD([weight], lr=0.5)
        >>> calls = []
        >>> scaler = recording_grad_scaler(
        ...     "cpu", 8.0, lambda name, s, *a: calls.append(name),
        ...     lambda name, s: None)
        >>> scaler.scale(weight.sum()).backward()
        >>> scaler.step(opt); scaler.update()  # a planted mistake: unscale_ skipped
        >>> calls  # read back: step unscaled by itself, inside the step
        ['scale', 'step', 'unscale_', 'update']
    """
    scaler = torch.amp.GradScaler(device_type, init_scale=init_scale)
    for name in SCALER_CALLS:
        record_calls(
            scaler,
            name,
            lambda s, *a, name=name, **k: before(name, s, *a),
            lambda s, name=name: after(name, s),
        )
    return scaler


seal(__name__)
