"""Chapter 5's measured bank for sinusoidal_encoding (the format: tests/bank/bank.py).

Each answer is literal learner code; a comment says what the mistake is and why a
learner would make it.
"""

import math

import numpy as np
import torch

from bank import GENERIC, right, wrong  # noqa: F401
from exercise_cells import graders
from tformer_ref.device import get_device

GRADERS = graders("ch05_model", {"sinusoidal_encoding": "sinusoidal_encoding"})


# ------------------------------------------------------------------------ right ones


@right("sinusoidal_encoding")
def pe_div_term(n_positions, d_model):  # the usual exp/log div_term, float32
    pe = torch.zeros(n_positions, d_model)
    position = torch.arange(0, n_positions, dtype=torch.float).unsqueeze(1)
    div_term = torch.exp(
        torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model)
    )
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


@right("sinusoidal_encoding")
def pe_loops(n_positions, d_model):  # straight from the formula, float64 loops
    pe = torch.zeros(n_positions, d_model, dtype=torch.float64)
    for pos in range(n_positions):
        for i in range(d_model // 2):
            pe[pos, 2 * i] = math.sin(pos / 10000 ** (2 * i / d_model))
            pe[pos, 2 * i + 1] = math.cos(pos / 10000 ** (2 * i / d_model))
    return pe


@right("sinusoidal_encoding")
def pe_stack_flatten(n_positions, d_model):  # stack on a new axis, flatten: interleaves
    even = torch.arange(0, d_model, 2)
    angle = torch.arange(n_positions)[:, None] / torch.pow(10000.0, even / d_model)
    return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(1)


@right("sinusoidal_encoding")
def pe_numpy(n_positions, d_model):  # built in numpy, handed back as a tensor
    pos = np.arange(n_positions)[:, None]
    i = np.arange(d_model // 2)[None, :]
    angles = pos / np.power(10000, 2 * i / d_model)
    table = np.empty((n_positions, d_model))
    table[:, 0::2] = np.sin(angles)
    table[:, 1::2] = np.cos(angles)
    return torch.from_numpy(table)


@right("sinusoidal_encoding")
def pe_outer_einsum(n_positions, d_model):  # torch.outer for the angles, view for pairs
    inv = 1.0 / (10000 ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model))
    ang = torch.outer(torch.arange(n_positions, dtype=torch.float64), inv)
    out = torch.empty(n_positions, d_model // 2, 2, dtype=torch.float64)
    out[..., 0], out[..., 1] = ang.sin(), ang.cos()
    return out.view(n_positions, d_model).float()


@right("sinusoidal_encoding")
def pe_shifted_cosine(n_positions, d_model):  # sin written as cos(θ - π/2)
    theta = torch.arange(n_positions).unsqueeze(1) * torch.exp(
        -math.log(10000) * torch.arange(0, d_model, 2) / d_model
    )
    pe = torch.empty(n_positions, d_model)
    pe[:, ::2] = torch.cos(theta - math.pi / 2)
    pe[:, 1::2] = torch.cos(theta)
    return pe


@right("sinusoidal_encoding")
def pe_on_device(n_positions, d_model):  # built on the course device
    dev = get_device()
    pos = torch.arange(n_positions, device=dev, dtype=torch.float32)[:, None]
    freq = 10000.0 ** (-torch.arange(0, d_model, 2, device=dev) / d_model)
    pairs = torch.stack((torch.sin(pos * freq), torch.cos(pos * freq)), 2)
    return pairs.reshape(n_positions, -1)


@right("sinusoidal_encoding")
# one column pair at a time, float64 then float
def pe_column_loop(n_positions, d_model):
    position = torch.arange(n_positions, dtype=torch.float64)
    columns = []
    for i in range(0, d_model, 2):
        w = 1 / 10000 ** (i / d_model)
        columns += [torch.sin(position * w), torch.cos(position * w)]
    return torch.stack(columns, dim=1).to(torch.float32)


# ------------------------------------------------------------------------- listed ones


@wrong(
    "sinusoidal_encoding",
    r"your odd ones are sin\(ω·pos - π/2\) = -cos\(ω·pos\)",
    listed=False,
)
def pe_cos_as_shifted_sine(n_positions, d_model):  # cos x "is" sin(x - π/2)
    pe = torch.zeros(n_positions, d_model)
    pos = torch.arange(n_positions).float().unsqueeze(1)
    freq = 10000 ** (-torch.arange(0, d_model, 2).float() / d_model)
    pe[:, 0::2] = torch.sin(pos * freq)
    pe[:, 1::2] = torch.sin(pos * freq - math.pi / 2)
    return pe


@wrong(
    "sinusoidal_encoding",
    r"positions spaced 1\.016 apart.*torch\.linspace\(0, 64, 64\)",
    listed=False,
)
def pe_positions_linspace(n_positions, d_model):  # linspace "from 0 to n"
    pe = torch.zeros(n_positions, d_model)
    pos = torch.linspace(0, n_positions, n_positions).unsqueeze(1)
    freq = torch.exp(-math.log(10000.0) * torch.arange(0, d_model, 2) / d_model)
    pe[:, 0::2] = torch.sin(pos * freq)
    pe[:, 1::2] = torch.cos(pos * freq)
    return pe


@wrong("sinusoidal_encoding", r"'sin and cos swapped'", listed=True)
def pe_swapped(n_positions, d_model):  # misremembers which of sin/cos is on the evens
    pe = torch.zeros(n_positions, d_model)
    position = torch.arange(n_positions).float().unsqueeze(1)
    div = torch.exp(
        torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model)
    )
    pe[:, 0::2] = torch.cos(position * div)
    pe[:, 1::2] = torch.sin(position * div)
    return pe


@wrong("sinusoidal_encoding", r"exponent i/D, not 2i/D", listed=True)
def pe_pair_index_exponent(n_positions, d_model):  # i counts pairs, divided by D anyway
    pairs = torch.arange(d_model // 2)
    angle = torch.arange(n_positions)[:, None] / torch.pow(10000.0, pairs / d_model)
    return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(1)


@wrong("sinusoidal_encoding", r"positions multiplied by 10000", listed=True)
def pe_lost_minus(n_positions, d_model):  # the minus of the exponent dropped
    position = torch.arange(n_positions, dtype=torch.float).unsqueeze(1)
    div_term = torch.exp(
        torch.arange(0, d_model, 2).float() * (math.log(10000.0) / d_model)
    )
    pe = torch.zeros(n_positions, d_model)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


@wrong("sinusoidal_encoding", r"one exponent per column", listed=True)
def pe_column_exponent(n_positions, d_model):  # each column j its own 10000^(j/D)
    cols = torch.arange(d_model)
    angle = torch.arange(n_positions)[:, None] / torch.pow(10000.0, cols / d_model)
    pe = angle.clone()
    pe[:, 0::2], pe[:, 1::2] = angle[:, 0::2].sin(), angle[:, 1::2].cos()
    return pe


@wrong("sinusoidal_encoding", r"the base 10000 left out", listed=True)
def pe_forgot_log(n_positions, d_model):  # exp(-2i/D): the ln(10000) forgotten
    position = torch.arange(n_positions, dtype=torch.float).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-1.0 / d_model))
    pe = torch.zeros(n_positions, d_model)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


@wrong("sinusoidal_encoding", r"concatenated, not interleaved", listed=True)
def pe_halves(n_positions, d_model):  # the tensor2tensor layout: [sin | cos]
    even = torch.arange(0, d_model, 2)
    angle = torch.arange(n_positions)[:, None] / torch.pow(10000.0, even / d_model)
    return torch.cat([angle.sin(), angle.cos()], dim=1)


@wrong("sinusoidal_encoding", r"'positions start at 1'", listed=True)
def pe_one_based(n_positions, d_model):  # "position 1 is the first token"
    position = torch.arange(1, n_positions + 1, dtype=torch.float).unsqueeze(1)
    div_term = torch.exp(
        torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model)
    )
    pe = torch.zeros(n_positions, d_model)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


# ----------------------------------------------------------------------- unlisted ones


@wrong("sinusoidal_encoding", r"base b = 1000 ", listed=False)
def pe_base_1000(n_positions, d_model):  # typed 1e3 for 10000
    position = torch.arange(n_positions, dtype=torch.float).unsqueeze(1)
    div_term = torch.exp(
        torch.arange(0, d_model, 2).float() * (-math.log(1e3) / d_model)
    )
    pe = torch.zeros(n_positions, d_model)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


@wrong("sinusoidal_encoding", r"exponent is 4i/D", listed=False)
def pe_two_counted_twice(n_positions, d_model):  # 2*i with i already stepping by 2
    i = torch.arange(0, d_model, 2)
    angle = torch.arange(n_positions)[:, None] / 10000 ** (2 * i / d_model)
    pe = torch.zeros(n_positions, d_model)
    pe[:, 0::2], pe[:, 1::2] = angle.sin(), angle.cos()
    return pe


@wrong("sinusoidal_encoding", r"2i/14 instead of 2i/16", listed=False)
def pe_denominator_d_minus_2(n_positions, d_model):  # so the last pair's exponent is 1
    i = torch.arange(0, d_model, 2, dtype=torch.float64)
    position = torch.arange(n_positions, dtype=torch.float64)[:, None]
    angle = position * 10000 ** (-i / (d_model - 2))
    pe = torch.zeros(n_positions, d_model, dtype=torch.float64)
    pe[:, 0::2], pe[:, 1::2] = angle.sin(), angle.cos()
    return pe


@wrong("sinusoidal_encoding", r"\[cos \| sin\] concatenated", listed=False)
def pe_cos_then_sin_halves(n_positions, d_model):  # halves, and cos first
    even = torch.arange(0, d_model, 2)
    angle = torch.arange(n_positions)[:, None] * torch.exp(
        -math.log(10000) * even / d_model
    )
    return torch.cat([torch.cos(angle), torch.sin(angle)], dim=-1)


@wrong("sinusoidal_encoding", r"swapped.*exponent is i/D", listed=False)
def pe_swapped_and_pair_exponent(n_positions, d_model):  # two mistakes at once
    pairs = torch.arange(d_model // 2)
    angle = torch.arange(n_positions)[:, None] / torch.pow(10000.0, pairs / d_model)
    return torch.stack([angle.cos(), angle.sin()], dim=-1).flatten(1)


@wrong("sinusoidal_encoding", r"amplitude 0\.25", listed=False)
def pe_normalised(n_positions, d_model):  # "normalise" each row to unit-ish norm
    pe = torch.zeros(n_positions, d_model)
    position = torch.arange(n_positions).float().unsqueeze(1)
    div = torch.exp(
        torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model)
    )
    pe[:, 0::2] = torch.sin(position * div)
    pe[:, 1::2] = torch.cos(position * div)
    return pe / math.sqrt(d_model)


@wrong("sinusoidal_encoding", r"ω_0 = 0\.01587", listed=False)
def pe_positions_in_unit_interval(n_positions, d_model):  # positions scaled to [0, 1]
    position = torch.linspace(0, 1, n_positions).unsqueeze(1)
    div = torch.exp(
        torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model)
    )
    pe = torch.zeros(n_positions, d_model)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(position * div), torch.cos(position * div)
    return pe


@wrong("sinusoidal_encoding", r"same frequency", listed=False)
def pe_floor_division(n_positions, d_model):  # // where / was meant: exponent always 0
    exponent = torch.arange(0, d_model, 2) // d_model
    angle = torch.arange(n_positions)[:, None] / (10000.0**exponent)
    pe = torch.zeros(n_positions, d_model)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(angle), torch.cos(angle)
    return pe


@wrong("sinusoidal_encoding", r"dtype torch.float16", listed=False)
def pe_half_precision(n_positions, d_model):  # "saves memory"
    pe = torch.zeros(n_positions, d_model)
    position = torch.arange(n_positions).unsqueeze(1).float()
    div = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
    pe[:, 0::2], pe[:, 1::2] = torch.sin(position * div), torch.cos(position * div)
    return pe.half()


@wrong("sinusoidal_encoding", r"leading batch axis", listed=False)
# kept the module's [1, S, D] buffer shape
def pe_with_batch_axis(n_positions, d_model):
    pe = torch.zeros(n_positions, d_model)
    position = torch.arange(n_positions).unsqueeze(1).float()
    div = torch.exp(
        torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model)
    )
    pe[:, 0::2], pe[:, 1::2] = torch.sin(position * div), torch.cos(position * div)
    return pe.unsqueeze(0)


@wrong("sinusoidal_encoding", r"transposed", listed=False)
def pe_transposed(n_positions, d_model):  # built [D, N] like the lesson's heat map
    angle = torch.arange(n_positions)[None, :] * torch.exp(
        torch.arange(0, d_model, 2)[:, None] * (-math.log(10000.0) / d_model)
    )
    pe = torch.zeros(d_model, n_positions)
    pe[0::2], pe[1::2] = angle.sin(), angle.cos()
    return pe


@wrong("sinusoidal_encoding", r"dtype torch.int64", listed=False)
def pe_integer_table(n_positions, d_model):  # zeros_like of the integer positions
    position = torch.arange(n_positions).unsqueeze(1)
    pe = torch.zeros_like(position.expand(n_positions, d_model))
    div = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
    pe[:, 0::2] = torch.sin(position * div)
    pe[:, 1::2] = torch.cos(position * div)
    return pe


@wrong("sinusoidal_encoding", r"ω_0 = 0\.3162", listed=False)
def pe_pairs_from_one(n_positions, d_model):  # pair index 1..D/2 instead of 0..D/2-1
    i = torch.arange(1, d_model // 2 + 1, dtype=torch.float)
    angle = torch.arange(n_positions).float()[:, None] / 10000 ** (2 * i / d_model)
    return torch.stack([angle.sin(), angle.cos()], 2).view(n_positions, d_model)


@wrong("sinusoidal_encoding", r"got \[63, 16\]", listed=False)
def pe_one_row_short(n_positions, d_model):  # arange(1, n) "skipping the padding row"
    position = torch.arange(1, n_positions, dtype=torch.float).unsqueeze(1)
    div = torch.exp(
        torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model)
    )
    pe = torch.zeros(n_positions - 1, d_model)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(position * div), torch.cos(position * div)
    return pe


@wrong("sinusoidal_encoding", r"got ndarray", listed=False)
def pe_returns_numpy(n_positions, d_model):  # forgot torch.from_numpy at the end
    pos = np.arange(n_positions)[:, None]
    angles = pos / np.power(10000, np.arange(0, d_model, 2) / d_model)
    table = np.zeros((n_positions, d_model), dtype=np.float32)
    table[:, 0::2], table[:, 1::2] = np.sin(angles), np.cos(angles)
    return table


@wrong("sinusoidal_encoding", r"k = 0\.5\b", listed=False)
def pe_denominator_n_positions(n_positions, d_model):  # divided by the wrong size
    i = torch.arange(0, d_model, 2)
    angle = torch.arange(n_positions)[:, None] / 10000 ** (i / n_positions)
    pe = torch.zeros(n_positions, d_model)
    pe[:, 0::2], pe[:, 1::2] = angle.sin(), angle.cos()
    return pe


@wrong("sinusoidal_encoding", r"all zero|columns \[1, 3", listed=False)
def pe_cosines_never_written(n_positions, d_model):  # the second assignment forgotten
    pe = torch.zeros(n_positions, d_model)
    position = torch.arange(n_positions).float().unsqueeze(1)
    div = torch.exp(
        torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model)
    )
    pe[:, 0::2] = torch.sin(position * div)
    return pe


@wrong("sinusoidal_encoding", r"the exp\(\) of div_term is missing", listed=False)
def pe_forgot_exp(n_positions, d_model):  # div_term left as the exponent: no exp()
    position = torch.arange(n_positions, dtype=torch.float32).unsqueeze(1)
    div_term = torch.arange(0, d_model, 2, dtype=torch.float32) * (
        -math.log(10000.0) / d_model
    )
    pe = torch.zeros(n_positions, d_model)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


@wrong(
    "sinusoidal_encoding", r"ω_i = 0 \+ i·\(0\.125\), changing linearly", listed=False
)
def pe_linear_frequencies(n_positions, d_model):  # "frequency grows with the index"
    freqs = torch.arange(0, d_model, 2).double() / d_model  # 10000 ** ... forgotten
    angles = torch.outer(torch.arange(n_positions).double(), freqs)
    return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(1)


@wrong("sinusoidal_encoding", r"row 0 is position 2\b", listed=False)
# "positions 0 and 1 are special tokens"
def pe_skips_bos_and_pad(n_positions, d_model):
    position = torch.arange(2, n_positions + 2).unsqueeze(1).double()
    div = 10000 ** (-torch.arange(0, d_model, 2).double() / d_model)
    pe = torch.zeros(n_positions, d_model, dtype=torch.float64)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(position * div), torch.cos(position * div)
    return pe


@wrong("sinusoidal_encoding", r"ω_0 = 2, expected 1", listed=False)
def pe_angle_doubled(n_positions, d_model):  # 2·pos·ω, "2π-ish" remembered wrong
    position = torch.arange(n_positions).float().unsqueeze(1)
    div = torch.exp(
        torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model)
    )
    pe = torch.zeros(n_positions, d_model)
    pe[:, 0::2] = torch.sin(2 * position * div)
    pe[:, 1::2] = torch.cos(2 * position * div)
    return pe


@wrong(
    "sinusoidal_encoding",
    r"columns \[1, 3, 5, 7, 9, 11\]\.\.\. start at 0 like sines",
    listed=False,
)
def pe_sine_twice(n_positions, d_model):  # copy-pasted line, sin left in the second
    position = torch.arange(n_positions, dtype=torch.float).unsqueeze(1)
    div = torch.exp(
        torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model)
    )
    pe = torch.zeros(n_positions, d_model)
    pe[:, 0::2] = torch.sin(position * div)
    pe[:, 1::2] = torch.sin(position * div)
    return pe
