"""Mixed precision with ``torch.amp``: dtypes, the GradScaler, one optimizer step.

The seed imports ``from torch.cuda.amp import autocast, GradScaler``: deprecated, and
CUDA-only (on a CPU it warns and disables itself). The current API names the device:
``torch.amp.autocast(device_type, dtype=...)`` and
``torch.amp.GradScaler(device_type)``.

- CUDA: float16 autocast. fp16's range ends near 65504 and its smallest normal is
  about 6e-5, so small gradients underflow to zero: a GradScaler multiplies the loss
  before backward and divides the gradients before the step, skipping steps whose
  gradients overflowed.
- CPU: bfloat16 autocast. bf16 has float32's range (and fewer mantissa bits), so
  gradients do not underflow and no scaler is needed; :func:`make_grad_scaler`
  then returns a *disabled* scaler, whose methods are pass-throughs, so one
  training loop serves both devices.
"""

from __future__ import annotations

import torch


def _device_type(device) -> str:
    if isinstance(device, str):
        device = torch.device(device)
    if not isinstance(device, torch.device):
        raise TypeError(
            "device must be a torch.device or a string such as 'cpu' or "
            f"'cuda', got {type(device).__name__}"
        )
    return device.type


def amp_dtype(device) -> torch.dtype:
    """The autocast dtype the course uses on ``device``: float16 on CUDA, bfloat16
    elsewhere.

    Taught in §7.1 'Mixed precision with torch.amp' (book/ch07_scale).

    Examples::

        >>> amp_dtype("cuda"), amp_dtype(torch.device("cpu"))
        (torch.float16, torch.bfloat16)
    """
    return torch.float16 if _device_type(device) == "cuda" else torch.bfloat16


def autocast(device, dtype: torch.dtype | None = None, enabled: bool = True):
    """``torch.amp.autocast`` for ``device``'s type, with :func:`amp_dtype` unless
    ``dtype`` is given.

    Taught in §7.1 'Mixed precision with torch.amp' (book/ch07_scale).

    Examples::

        >>> linear = torch.nn.Linear(4, 4)
        >>> with autocast("cpu"):
        ...     y = linear(torch.ones(2, 4))
        >>> y.dtype, linear.weight.dtype  # the matmul ran in bf16, the weights are fp32
        (torch.bfloat16, torch.float32)
    """
    dtype = amp_dtype(device) if dtype is None else dtype
    if dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(
            f"autocast dtype must be torch.float16 or torch.bfloat16, got {dtype}"
        )
    return torch.amp.autocast(_device_type(device), dtype=dtype, enabled=enabled)


def make_grad_scaler(
    device, dtype: torch.dtype | None = None, **kwargs
) -> torch.amp.GradScaler:
    """A GradScaler for ``device``, enabled only for float16 (bfloat16 and float32 need
    no scaling).

    Taught in §7.1 'Mixed precision with torch.amp' (book/ch07_scale).

    Examples::

        >>> make_grad_scaler("cpu").is_enabled()  # bf16: a pass-through scaler
        False
        >>> make_grad_scaler("cpu", torch.float16).is_enabled()
        True
    """
    dtype = amp_dtype(device) if dtype is None else dtype
    enabled = dtype == torch.float16
    return torch.amp.GradScaler(_device_type(device), enabled=enabled, **kwargs)


def optimizer_step(
    optimizer: torch.optim.Optimizer,
    parameters,
    scaler: torch.amp.GradScaler | None = None,
    max_norm: float | None = None,
) -> bool:
    """Clip and step after the gradients are in; return whether the optimizer really
    stepped.

    With a scaler the gradients are still multiplied by the scale, so ``unscale_``
    must come *before* clipping: clipping scaled gradients to ``max_norm`` would clip
    them at ``max_norm / scale``. ``scaler.step`` skips the step when a gradient is
    inf/NaN, and ``scaler.update`` then lowers the scale.

    Taught in §7.2 'GradScaler, unscale_ and clipping' (book/ch07_scale).

    Examples::

        >>> w = torch.nn.Parameter(torch.ones(3))
        >>> opt = torch.optim.SGD([w], lr=1.0)
        >>> (10 * w).sum().backward()  # gradient [10, 10, 10], norm 17.3
        >>> optimizer_step(opt, [w], max_norm=1.0), w.detach()  # clipped to norm 1
        (True, tensor([0.4226, 0.4226, 0.4226]))
    """
    parameters = [p for p in parameters if p.grad is not None]
    if scaler is None or not scaler.is_enabled():
        if max_norm is not None:
            torch.nn.utils.clip_grad_norm_(parameters, max_norm)
        optimizer.step()
        return True
    scaler.unscale_(optimizer)
    if max_norm is not None:
        torch.nn.utils.clip_grad_norm_(parameters, max_norm)
    scale_before = scaler.get_scale()
    scaler.step(optimizer)
    scaler.update()
    # update() lowers the scale exactly when the step was skipped for inf/NaN gradients.
    return scaler.get_scale() >= scale_before


def saved_activation_bytes(fn, *args, exclude=(), **kwargs) -> tuple[object, int]:
    """Run ``fn(*args, **kwargs)`` and count the bytes autograd keeps for the backward
    pass.

    This is the memory training needs on top of the weights (the activations),
    measured the same way on any device: every tensor saved for backward passes
    through a ``saved_tensors_hooks`` pack hook; storages shared by several saves
    count once, and the storages of ``exclude`` (e.g. ``model.parameters()``, which
    exist anyway) not at all. Returns (fn's result, bytes).

    Taught in §7.1 'Mixed precision with torch.amp' (book/ch07_scale).

    Examples::

        >>> x = torch.ones(4, requires_grad=True)
        >>> out, n_bytes = saved_activation_bytes(lambda t: (t * t).sum(), x)
        >>> n_bytes  # x saved for the backward of t * t: 4 float32, counted once
        16
        >>> saved_activation_bytes(lambda t: (t * t).sum(), x, exclude=[x])[1]
        0
    """
    skip = {(t.device, t.untyped_storage().data_ptr()) for t in exclude}
    seen: dict[tuple, int] = {}

    def pack(t: torch.Tensor):
        storage = t.untyped_storage()
        key = (t.device, storage.data_ptr())
        if key not in skip:
            seen[key] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(*args, **kwargs)
    return out, sum(seen.values())
