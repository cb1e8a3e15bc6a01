"""Positional information: the paper's sinusoids, or a learned table.

Attention by itself does not know the order of the tokens (permute the inputs
and the outputs are permuted the same way), so position is added to the token
embeddings. Shape letters: B batch, S sequence length, D = d_model.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn


def sinusoidal_encoding(
    n_positions: int,
    d_model: int,
    base: float = 10000.0,
    dtype: torch.dtype = torch.float32,
    device=None,
) -> torch.Tensor:
    """The table of Vaswani et al. 2017, §3.5, shape [n_positions, D]:

    ``PE[pos, 2i] = sin(pos / base^(2i/D))`` and
    ``PE[pos, 2i+1] = cos(pos / base^(2i/D))``.

    Pair i is a rotation at angular frequency ``base^(-2i/D)``: wavelengths grow
    geometrically from 2π (i = 0, changes every position) to about 2π·base
    (the last pairs, almost constant over thousands of positions).

    Taught in §5.2 'Sinusoidal positional encoding' (book/ch05_model).

    Examples::

        >>> pe = sinusoidal_encoding(100, 8)
        >>> pe.shape, pe[0]  # row 0: sin 0, cos 0, ...
        (torch.Size([100, 8]), tensor([0., 1., 0., 1., 0., 1., 0., 1.]))
        >>> torch.allclose(pe[10] @ pe[17], pe[50] @ pe[57])  # only distance matters
        True
    """
    if not isinstance(n_positions, int) or not isinstance(d_model, int):
        raise TypeError(
            "n_positions and d_model must be ints, got "
            f"{type(n_positions).__name__} and {type(d_model).__name__}"
        )
    if n_positions < 0 or d_model <= 0 or d_model % 2:
        raise ValueError(
            "need n_positions >= 0 and an even d_model > 0 (sin/cos "
            f"pairs), got n_positions={n_positions}, d_model={d_model}"
        )
    position = torch.arange(n_positions, dtype=torch.float64, device=device)[:, None]
    # [N, 1] in float64: at large positions a float32 angle loses the fast pairs' phase.
    pairs = torch.arange(0, d_model, 2, dtype=torch.float64, device=device)
    inv_freq = torch.exp(pairs * (-math.log(base) / d_model))
    angle = position * inv_freq  # [N, D/2]
    pe = torch.empty(n_positions, d_model, dtype=torch.float64, device=device)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe.to(dtype)


class SinusoidalPositionalEncoding(nn.Module):
    """Adds the fixed sinusoidal table to its input: x [B, S, D] -> x + PE[:S].

    The table is a *buffer*: it moves with ``.to(device)`` but it is not a
    parameter (the optimizer never sees it). It is registered with
    ``persistent=False``, so it is not saved in the state dict: the formula
    rebuilds it, and a checkpoint loads into a model with another ``max_len``
    (a default, persistent buffer is saved, and then fails to load there on its
    shape). Positions past
    ``max_len`` are computed on the fly: the formula has a value for every
    position. That a model *trained* on short sequences then works on longer
    ones is a different claim, and mostly false (Press et al. 2022).

    Taught in §5.4 'What "extrapolates" means' (book/ch05_model).

    Examples::

        >>> module = SinusoidalPositionalEncoding(8, max_len=4)
        >>> list(module.parameters()), list(module.state_dict())  # a buffer, not saved
        ([], [])
        >>> module(torch.zeros(1, 10, 8)).shape  # past max_len: computed on the fly
        torch.Size([1, 10, 8])
    """

    def __init__(self, d_model: int, max_len: int = 512):
        super().__init__()
        self.d_model, self.max_len = d_model, max_len
        table = sinusoidal_encoding(max_len, d_model)
        self.register_buffer("pe", table, persistent=False)

    def table(self, length: int) -> torch.Tensor:
        """PE[:length], [length, D], on the buffer's device."""
        if length <= self.pe.size(0):
            return self.pe[:length]
        return sinusoidal_encoding(length, self.d_model, device=self.pe.device)

    def forward(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        """x [B, S, D] at positions start..start + S - 1 -> [B, S, D]
        (``start`` > 0 when decoding with a KV cache, §8.8)."""
        _check_input(x, self.d_model)
        return x + self.table(start + x.size(1))[start:].to(x.dtype)


class LearnedPositionalEmbedding(nn.Module):
    """Adds a learned vector per position (BERT, GPT-2): x [B, S, D] -> x + P[:S].

    The table has ``max_len`` rows and nothing beyond: a longer input raises a
    ValueError (an ``nn.Embedding`` would raise an IndexError, or an obscure
    device-side assert on CUDA).

    In the course's models ``xavier_init_`` draws the table from N(0, 1/D), rows of
    length about 1, while the tokens are scaled by √D: the positions start about √D
    times shorter than the tokens, and training has to grow them (§5.5).

    Taught in §5.3 'Learned positions and max_length' (book/ch05_model).

    Examples::

        >>> learned = LearnedPositionalEmbedding(max_len=8, d_model=16)
        >>> learned(torch.zeros(1, 8, 16)).shape
        torch.Size([1, 8, 16])
        >>> learned(torch.zeros(1, 10, 16))
        Traceback (most recent call last):
        ...
        ValueError: sequence length 10 is past max_len=8: a learned position table ...
    """

    def __init__(self, max_len: int, d_model: int):
        super().__init__()
        self.d_model, self.max_len = d_model, max_len
        self.embedding = nn.Embedding(max_len, d_model)

    def forward(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        """x [B, S, D] at positions start..start + S - 1 -> [B, S, D]; needs
        start + S <= max_len (``start`` > 0 when decoding with a KV cache, §8.8)."""
        _check_input(x, self.d_model)
        length = start + x.size(1)
        if length > self.max_len:
            raise ValueError(
                f"sequence length {length} is past max_len={self.max_len}: a learned "
                f"position table has rows 0..{self.max_len - 1} only. Build the model "
                "with a larger max_len, or cut the input"
            )
        return x + self.embedding.weight[start:length].to(x.dtype)


def _check_input(x, d_model: int) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"expected a tensor [B, S, {d_model}], got {type(x).__name__}")
    if x.dim() != 3 or x.size(-1) != d_model:
        raise ValueError(
            f"expected a tensor [B, S, D={d_model}], got shape {tuple(x.shape)}"
        )


POSITIONS = ("sinusoidal", "learned")


def validate_positions(kind: str) -> None:
    """Raise a clear ValueError unless ``kind`` is one of :data:`POSITIONS`.

    Taught in §5.3 'Learned positions and max_length' (book/ch05_model).

    Examples::

        >>> validate_positions("learned")
        >>> validate_positions("rotary")
        Traceback (most recent call last):
        ...
        ValueError: positions must be 'sinusoidal' or 'learned', got 'rotary'
    """
    if not (isinstance(kind, str) and kind in POSITIONS):
        raise ValueError(f"positions must be 'sinusoidal' or 'learned', got {kind!r}")


def make_positions(kind: str, d_model: int, max_len: int) -> nn.Module:
    """The module that adds positions to [B, S, D]: ``"sinusoidal"`` or ``"learned"``.

    Taught in §5.3 'Learned positions and max_length' (book/ch05_model).

    Examples::

        >>> type(make_positions("sinusoidal", 16, 8)).__name__
        'SinusoidalPositionalEncoding'
        >>> make_positions("learned", 16, 8).embedding.weight.shape  # [max_len, D]
        torch.Size([8, 16])
    """
    validate_positions(kind)
    if kind == "sinusoidal":
        return SinusoidalPositionalEncoding(d_model, max_len)
    return LearnedPositionalEmbedding(max_len, d_model)
