"""What chapter 8's three exercises (``next_token_probs``, ``lm_step``,
``generate_greedy``) share: the tolerance outputs are compared at (``right``), a
decorator that leaves the notebook's random state as it was, and token ids as text; and,
for ``lm_step`` and ``generate_greedy``, the tiny seeded ``DecoderOnlyLM`` and the
seeded token ids their cases are built from.
"""

from __future__ import annotations

import functools

import torch

from tformer_ref.device import get_device
from tformer_ref.model import DecoderOnlyLM

from ...guard.integrity import seal
from ..diagnosis import describe_difference

ATOL, RTOL = 1e-5, 1e-4


def keeps_random_state(check):
    """Decorator: the check's draws (reference sampling, module initialisation, the
    learner's own) leave the notebook's random state as it was."""

    @functools.wraps(check)
    def run_check(*args, **kwargs):
        __tracebackhide__ = True
        device = get_device()
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            return check(*args, **kwargs)

    return run_check


def right(got, want) -> bool:
    return describe_difference(got, want, ATOL, RTOL) is None


def tokens_text(ids) -> str:
    return "[" + ", ".join(str(int(i)) for i in ids) + "]"


def lm(
    seed: int,
    *,
    norm_first: bool,
    positions: str,
    std: float | None = None,
    dropout: float = 0.0,
    **kwargs,
) -> DecoderOnlyLM:
    """A tiny seeded DecoderOnlyLM(V=11, D=16, H=2, L=2, F=32, max_len=24) in eval mode
    on the course's device; ``std`` redraws every weight matrix from N(0, std²) (an
    untrained model with Xavier weights repeats one token forever)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = DecoderOnlyLM(
            11,
            16,
            2,
            2,
            32,
            dropout=dropout,
            max_len=24,
            pad_id=None,
            norm_first=norm_first,
            positions=positions,
            **kwargs,
        )
        if std is not None:
            with torch.no_grad():
                for p in model.parameters():
                    if p.dim() > 1:
                        p.normal_(0.0, std)
    return model.to(get_device()).eval()


def token_ids(b: int, s: int, seed: int, vocab: int = 11) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (b, s), generator=g).to(get_device())


seal(__name__)
