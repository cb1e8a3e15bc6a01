"""The cases of exercise ``masked_attention`` of chapter 3 (book/ch03_masks): four
masks of four shapes (padding, causal, both with a fully padded sequence, one per
head), each case in its own dtype (``masked_attention_half`` draws them in half
precision).
"""

from __future__ import annotations

import torch

from tformer_ref.device import get_device

from ...guard.integrity import seal
from ..cases import randn
from ..diagnosis import Case
from ..measure.sizes import named
from .causal_mask import causal_reference


def _pad(tokens):
    return (torch.tensor(tokens, device=get_device()) != 0)[:, None, None, :]


_PER_HEAD_MASK = (
    (
        ((1, 1, 0, 0), (0, 0, 0, 0), (1, 0, 1, 1)),
        ((1, 1, 1, 1), (0, 1, 0, 0), (1, 1, 1, 0)),
    ),
    (
        ((0, 0, 0, 1), (1, 1, 1, 1), (1, 1, 0, 0)),
        ((1, 0, 0, 0), (0, 1, 0, 1), (0, 0, 1, 1)),
    ),
)

# (label, (B, H, Sq, Sk, Dh), mask)
_MASKED_SPECS = (
    (
        "padding mask [2, 1, 1, 6], cross-attention",
        (2, 3, 4, 6, 8),
        lambda: _pad([[3, 4, 5, 0, 0, 0], [1, 2, 3, 4, 5, 6]]),
    ),
    ("causal mask [1, 1, 5, 5]", (2, 2, 5, 5, 8), lambda: causal_reference(5)),
    (
        (
            "padding & causal [3, 1, 5, 5], B == H == 3, a fully padded sequence "
            "(fully masked rows)"
        ),
        (3, 3, 5, 5, 4),
        lambda: (
            _pad([[1, 2, 3, 0, 0], [0, 0, 0, 0, 0], [4, 5, 6, 7, 8]])
            & causal_reference(5)
        ),
    ),
    (
        "per-head mask [2, 2, 3, 4] with one fully masked query",
        (2, 2, 3, 4, 16),
        lambda: torch.tensor(_PER_HEAD_MASK, dtype=torch.bool, device=get_device()),
    ),
)

_FULL_DTYPES = (torch.float32, torch.float32, torch.float64, torch.float32)


def _masked_case(i, spec, dtype):
    label, (b, h, sq, sk, dh), mask_fn = spec

    def make():
        return (
            randn(b, h, sq, dh, seed=100 + 10 * i, dtype=dtype),
            randn(b, h, sk, dh, seed=101 + 10 * i, dtype=dtype),
            randn(b, h, sk, dh, seed=102 + 10 * i, dtype=dtype),
            mask_fn(),
        )

    return Case(f"{label} ({named(B=b, H=h, Sq=sq, Sk=sk, Dh=dh)}), {dtype}", make)


def masked_cases(dtypes=_FULL_DTYPES):
    """The exercise's 4 cases, case i in ``dtypes[i]`` (masked_attention_half's too)."""
    return [
        _masked_case(i, spec, dtype)
        for i, (spec, dtype) in enumerate(zip(_MASKED_SPECS, dtypes))
    ]


seal(__name__)
