"""Which device the course runs on.

Every notebook calls :func:`get_device` instead of hard-coding ``"cpu"`` or
``"cuda"``, so the same notebook runs unchanged on a laptop and on a GPU.
Set ``TFORMER_DEVICE`` (``cpu``, ``cuda``, ``cuda:1`` ...) to override the choice.
"""

import os

import torch


def get_device() -> torch.device:
    """CUDA when available, else CPU; ``TFORMER_DEVICE`` overrides both.

    Used in §1.4 'From [B, S, D] to heads' (book/ch01_shapes/heads).

    Examples::

        >>> get_device().type in ("cpu", "cuda")
        True
    """
    forced = os.environ.get("TFORMER_DEVICE", "").strip()
    if forced:
        device = torch.device(forced)
        if device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError(
                f"TFORMER_DEVICE={forced!r} asks for CUDA, "
                "but torch.cuda.is_available() is False"
            )
        return device
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def seed_everything(seed: int = 0) -> torch.Generator:
    """Seed Python's, NumPy's and PyTorch's generators; return a fresh torch Generator.

    Used in §1.4 'From [B, S, D] to heads' (book/ch01_shapes/heads).

    Examples::

        >>> _ = seed_everything(0)
        >>> a = torch.rand(2)
        >>> _ = seed_everything(0)
        >>> torch.equal(a, torch.rand(2))
        True
    """
    import random

    import numpy as np

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)
