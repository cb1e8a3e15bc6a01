"""Chapter 5's measured bank: sinusoidal_encoding, embed, decoder_block (see bank.py).

Each answer is literal learner code; a comment says what the mistake is and why a
learner would make it.
"""

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from bank import GENERIC, right, wrong  # noqa: F401
from exercise_cells import graders
from tformer_ref.attention import MultiHeadAttention
from tformer_ref.device import get_device


GRADERS = graders(
    "ch05_model",
    {
        "sinusoidal_encoding": "sinusoidal_encoding",
        "embed": "embed",
        "decoder_block": "DecoderBlock",
    },
)


# ================================================================ sinusoidal_encoding
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


# ============================================================================== embed
# ------------------------------------------------------------------------ right ones


@right("embed")
def embed_plain(tokens, table, pe):
    return table(tokens) * math.sqrt(table.embedding_dim) + pe[: tokens.size(1)]


@right("embed")
# F.embedding, D read from pe, explicit unsqueeze
def embed_functional(tokens, table, pe):
    d = pe.size(-1)
    positions = pe[: tokens.shape[1]].unsqueeze(0)
    return F.embedding(tokens, table.weight) * d**0.5 + positions


@right("embed")
def embed_arange_lookup(tokens, table, pe):  # positions looked up with arange
    positions = torch.arange(tokens.size(1), device=tokens.device).expand_as(tokens)
    return table(tokens).mul(math.sqrt(pe.size(1))).add(pe[positions])


@right("embed")
def embed_weight_indexing(tokens, table, pe):  # index the weight matrix directly
    b, s = tokens.shape
    x = table.weight[tokens] * math.sqrt(table.weight.shape[1])
    return x + pe[:s][None, :, :]


@right("embed")
def embed_sum_then_rescale(tokens, table, pe):  # (E + PE/√D)·√D is the same thing
    scale = math.sqrt(table.embedding_dim)
    return (table(tokens) + pe[: tokens.size(1)] / scale) * scale


@right("embed")
def embed_tensor_scale(tokens, table, pe):  # the scale as a 0-dim tensor
    scale = torch.sqrt(torch.tensor(float(table.embedding_dim)))
    return table(tokens) * scale + pe.narrow(0, 0, tokens.size(1))


@right("embed")
def embed_einsum(tokens, table, pe):  # one-hot @ weight, positions by broadcasting
    one_hot = F.one_hot(tokens, table.num_embeddings).to(table.weight.dtype)
    x = torch.einsum("bsv,vd->bsd", one_hot, table.weight)
    return x * table.embedding_dim**0.5 + pe[: x.shape[1]]


@right("embed")
def embed_addcmul(tokens, table, pe):  # pe + √D · E in one call
    s = tokens.shape[-1]
    e = table(tokens)
    scale = torch.full_like(e, math.sqrt(e.size(-1)))
    return torch.addcmul(pe[:s].expand_as(e), e, scale)


# ------------------------------------------------------------------------- listed ones


@wrong("embed", r"'missing √d_model embedding scale'", listed=True)
def embed_unscaled(tokens, table, pe):  # the seed's embedding: no scale
    seq_len = tokens.shape[1]
    return table(tokens) + pe[:seq_len]


@wrong("embed", r"'scaled by d_model, not √d_model'", listed=True)
def embed_times_d(tokens, table, pe):  # the square root forgotten
    return table(tokens) * pe.shape[-1] + pe[: tokens.shape[-1]]


@wrong("embed", r"'divided by √d_model'", listed=True)
def embed_divided(tokens, table, pe):  # "scale down" remembered as a division
    return table(tokens) / math.sqrt(table.weight.size(1)) + pe[: tokens.size(1)]


@wrong("embed", r"'positions scaled too'", listed=True)
def embed_sum_scaled(tokens, table, pe):  # the whole input scaled, positions included
    x = table(tokens) + pe[: tokens.size(1)].unsqueeze(0)
    return x * math.sqrt(x.size(-1))


@wrong("embed", r"'positions looked up by token id'", listed=True)
def embed_pe_by_token(tokens, table, pe):  # pe treated like a second embedding table
    scale = table.embedding_dim**0.5
    return F.embedding(tokens, table.weight) * scale + F.embedding(tokens, pe)


# ----------------------------------------------------------------------- unlisted ones


@wrong("embed", r"that is √\(max_len\)", listed=False)
def embed_scale_by_max_len(tokens, table, pe):  # pe.size(0) is the rows, not D
    return table(tokens) * math.sqrt(pe.size(0)) + pe[: tokens.size(1)]


@wrong("embed", r"that is √\(vocabulary size\)", listed=False)
def embed_scale_by_vocab(tokens, table, pe):  # num_embeddings is V
    return table(tokens) * math.sqrt(table.num_embeddings) + pe[: tokens.size(1)]


@wrong("embed", r"that is √S, the sequence length", listed=False)
def embed_scale_by_length(tokens, table, pe):  # tokens.size(-1) is S, not D
    return table(tokens) * tokens.size(-1) ** 0.5 + pe[: tokens.size(1)]


@wrong("embed", r"multiplied by 22\.63 \(D = 12\) and 22\.63 \(D = 20\)", listed=False)
def embed_paper_constant(tokens, table, pe):  # the paper's d_model = 512 hard-coded
    return table(tokens) * math.sqrt(512) + pe[: tokens.size(1)]


@wrong("embed", r"multiplied by 3 \(D = 12\) and 4 \(D = 20\)", listed=False)
def embed_integer_scale(tokens, table, pe):  # int() to "keep the scale exact"
    return table(tokens) * int(math.sqrt(table.embedding_dim)) + pe[: tokens.size(1)]


@wrong("embed", r"no positional encoding is added", listed=False)
def embed_forgot_positions(tokens, table, pe):  # pe passed in, never used
    return table(tokens) * math.sqrt(table.embedding_dim)


@wrong("embed", r"concatenated the positions", listed=False)
def embed_concatenated(tokens, table, pe):  # "concat keeps both signals apart"
    x = table(tokens) * math.sqrt(table.embedding_dim)
    pos = pe[: tokens.size(1)].unsqueeze(0).expand(tokens.size(0), -1, -1)
    return torch.cat([x, pos], dim=-1)


@wrong(
    "embed", r"rows \[1, 2, 3, 4, 5, 6\] of pe: the positions start at 1", listed=False
)
def embed_rows_from_one(tokens, table, pe):  # row 0 skipped "for the BOS"
    s = tokens.size(1)
    return table(tokens) * math.sqrt(table.embedding_dim) + pe[1 : s + 1]


@wrong("embed", r"rows \[8, 9, 10, 11, 12, 13\] of pe", listed=False)
def embed_last_rows(tokens, table, pe):  # negative slicing takes the end of the table
    s = tokens.size(1)
    return table(tokens) * math.sqrt(table.embedding_dim) + pe[-s:]


@wrong("embed", r"gave different outputs", listed=False)
def embed_with_dropout(tokens, table, pe):  # copied Transformer.embed's dropout along
    x = table(tokens) * math.sqrt(table.embedding_dim) + pe[: tokens.size(1)]
    return F.dropout(x, p=0.1)


@wrong("embed", r"changed its input table\.weight in place", listed=False)
# scales the weights once... every call
def embed_scales_table_in_place(tokens, table, pe):
    table.weight.data.mul_(math.sqrt(table.embedding_dim))
    return table(tokens) + pe[: tokens.size(1)]


@wrong("embed", r"changed its input pe in place", listed=False)
# (E + PE/√D)·√D, but /= on a view
def embed_rescale_trick_in_place(tokens, table, pe):
    scale = math.sqrt(table.embedding_dim)
    positions = pe[: tokens.size(1)]
    positions /= scale
    return (table(tokens) + positions) * scale


@wrong("embed", r"float32 for a torch.float64 table", listed=False)
def embed_casts_to_float(tokens, table, pe):  # .float() "to be safe"
    x = table(tokens) * math.sqrt(table.embedding_dim) + pe[: tokens.size(1)]
    return x.float()


@wrong("embed", r"raised RuntimeError", listed=False)
def embed_pe_by_batch_size(tokens, table, pe):  # size(0) is B, not S
    return table(tokens) * math.sqrt(table.embedding_dim) + pe[: tokens.size(0)]


@wrong("embed", r"multiplied by 6 \(D = 12\) and 10 \(D = 20\)", listed=False)
def embed_precedence(tokens, table, pe):  # ** 1/2 is (D ** 1) / 2, not the square root
    return table(tokens) * table.embedding_dim**1 / 2 + pe[: tokens.size(1)]


@wrong(
    "embed",
    r"multiplied by 1 \(D = 12\).*that is 1 \(no scale\).*multiplied by 3\.464",
    listed=False,
)
def embed_scaled_the_wrong_term(tokens, table, pe):  # √D on the positions instead
    return table(tokens) + pe[: tokens.size(1)] * math.sqrt(table.embedding_dim)


@wrong("embed", r"reversed", listed=False)
def embed_reversed_positions(tokens, table, pe):  # flipped "so the last token is 0"
    s = tokens.size(1)
    return table(tokens) * math.sqrt(table.embedding_dim) + pe[:s].flip(0)


@wrong("embed", r"rows \[0, 0, 0, 0, 0, 0\] of pe", listed=False)
def embed_first_row_only(tokens, table, pe):  # pe[0] broadcast: the same row everywhere
    return table(tokens) * math.sqrt(table.embedding_dim) + pe[0]


@wrong("embed", r"positional encoding is multiplied by 2\b", listed=False)
# added once here and once "for the decoder"
def embed_positions_twice(tokens, table, pe):
    s = tokens.size(1)
    x = table(tokens) * math.sqrt(table.embedding_dim) + pe[:s]
    return x + pe[:s]


@wrong("embed", r"differs between sequences at the same position", listed=False)
def embed_multiplies_positions(tokens, table, pe):  # "combine" read as a product
    s = tokens.size(1)
    return table(tokens) * math.sqrt(table.embedding_dim) * (1 + pe[:s])


@wrong("embed", r"that is d_model\^\(1/4\)", listed=False)
def embed_sqrt_twice(tokens, table, pe):  # sqrt of an already-square-rooted scale
    scale = math.sqrt(table.embedding_dim)
    return table(tokens) * math.sqrt(scale) + pe[: tokens.size(1)]


@wrong("embed", r"rows \[1, 1, 1, 1, 1, 1\]|rows \[6, 6, 6, 6, 6, 6\]", listed=False)
def embed_row_at_length(tokens, table, pe):  # pe[S] for pe[:S]: one row, the wrong one
    s = tokens.size(1)
    return table(tokens) * math.sqrt(table.embedding_dim) + pe[s]


# ====================================================================== decoder_block
# ------------------------------------------------------------------------ right ones


@right("decoder_block")
class DecoderBlockPlain(nn.Module):  # the lesson's wiring, one nn.Dropout
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        st = x.size(1)
        causal = torch.ones(st, st, dtype=torch.bool, device=x.device).tril()
        causal = causal[None, None]
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        c = self.cross_attn(x, memory, memory, mask=src_mask)
        x = self.norm2(x + self.dropout(c))
        return self.norm3(x + self.dropout(self.ff(x)))


@right("decoder_block")
# cross-attention and last norm first
class DecoderBlockCrossFirstRegistered(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.ln_ff = nn.LayerNorm(d_model)
        self.enc_dec = MultiHeadAttention(d_model, n_heads, fused=True)
        self.masked = MultiHeadAttention(d_model, n_heads)
        self.ln_self, self.ln_cross = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.w1, self.w2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.p = dropout

    def forward(self, x, memory, src_mask=None):
        from tformer_ref.masks import causal_mask

        drop = lambda t: F.dropout(t, self.p, self.training)  # noqa: E731
        causal = causal_mask(x.size(1), x.device)
        x = self.ln_self(x + drop(self.masked(x, mask=causal)))
        x = self.ln_cross(x + drop(self.enc_dec(x, memory, memory, src_mask)))
        return self.ln_ff(x + drop(self.w2(torch.relu(self.w1(x)))))


@right("decoder_block")
class DecoderBlockModuleLists(nn.Module):  # ModuleLists, no biases, ~triu(1) mask
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.attns = nn.ModuleList(
            [
                MultiHeadAttention(d_model, n_heads, dropout),
                MultiHeadAttention(d_model, n_heads, bias=False),
            ]
        )
        self.lns = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(3))
        self.up = nn.Linear(d_model, d_ff, bias=False)
        self.down = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        cross, masked = self.attns
        s = x.size(1)
        ones = torch.ones(s, s, dtype=torch.bool, device=x.device)
        future = torch.triu(ones, diagonal=1)
        x = self.lns[0](x + self.dropout(masked(x, x, x, mask=~future[None, None])))
        x = self.lns[1](x + self.dropout(cross(x, memory, memory, mask=src_mask)))
        return self.lns[2](x + self.dropout(self.down(F.relu(self.up(x)))))


@right("decoder_block")
class DecoderBlockBufferMask(nn.Module):  # a causal buffer built once, sliced per call
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, max_len=256):
        super().__init__()
        self.attention = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.source_attention = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.feed_forward = nn.Sequential(
            nn.Linear(d_model, d_ff),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(d_ff, d_model),
        )
        self.norms = nn.ModuleDict({k: nn.LayerNorm(d_model) for k in ("a", "b", "c")})
        self.drop = nn.Dropout(dropout)
        self.register_buffer("tril", torch.tril(torch.ones(max_len, max_len)).bool())

    def forward(self, x, memory, src_mask=None):
        n = x.shape[1]
        mask = self.tril[:n, :n].view(1, 1, n, n)
        a = self.attention(query=x, key=x, value=x, mask=mask)
        x = self.norms["a"](x + self.drop(a))
        h = self.source_attention(query=x, key=memory, value=memory, mask=src_mask)
        x = self.norms["b"](x + self.drop(h))
        return self.norms["c"](x + self.drop(self.feed_forward(x)))


@right("decoder_block")
class DecoderBlockSublayerHelper(nn.Module):  # one helper for "LN(x + drop(f(x)))"
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.sa = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ca = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.l1 = nn.Linear(d_model, d_ff)
        self.l2 = nn.Linear(d_ff, d_model)
        self.n = nn.ModuleList(
            [nn.LayerNorm(d_model), nn.LayerNorm(d_model), nn.LayerNorm(d_model)]
        )
        self.dropout = dropout

    def sublayer(self, i, x, f):
        return self.n[i](x + F.dropout(f(x), self.dropout, self.training))

    def forward(self, x, memory, src_mask=None):
        t = x.shape[-2]
        keep = torch.ones(1, 1, t, t, device=x.device).tril() == 1
        x = self.sublayer(0, x, lambda h: self.sa(h, h, h, keep))
        x = self.sublayer(1, x, lambda h: self.ca(h, memory, memory, src_mask))
        return self.sublayer(2, x, lambda h: self.l2(F.relu(self.l1(h))))


@right("decoder_block")
class DecoderBlockReturnWeights(nn.Module):  # asks for the weights, keeps the output
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attention = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.memory_attention = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.fc1, self.fc2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.ln_1 = nn.LayerNorm(d_model)
        self.ln_2 = nn.LayerNorm(d_model)
        self.ln_3 = nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)
        self.last_cross_weights = None

    def forward(self, x, memory, src_mask=None):
        L = x.size(1)
        idx = torch.arange(L, device=x.device)
        causal = (idx[None, :] <= idx[:, None])[None, None]
        a, _ = self.self_attention(x, x, x, mask=causal, return_weights=True)
        x = self.ln_1(x + self.drop(a))
        c, self.last_cross_weights = self.memory_attention(
            x, memory, memory, mask=src_mask, return_weights=True
        )
        x = self.ln_2(x + self.drop(c))
        return self.ln_3(x + self.drop(self.fc2(self.fc1(x).clamp(min=0))))


@right("decoder_block")
class DecoderBlockExpandedMask(nn.Module):  # the causal mask expanded to [B, 1, St, St]
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.mha_self = MultiHeadAttention(
            d_model, n_heads, dropout=dropout, fused=True
        )
        self.mha_cross = MultiHeadAttention(
            d_model, n_heads, dropout=dropout, fused=True
        )
        self.ffn = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(inplace=True), nn.Linear(d_ff, d_model)
        )
        self.norm_a = nn.LayerNorm(d_model)
        self.norm_b = nn.LayerNorm(d_model)
        self.norm_c = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, x, memory, src_mask=None):
        b, t, _ = x.shape
        mask = torch.tril(torch.ones(t, t, device=x.device)).bool().expand(b, 1, t, t)
        residual = x
        x = self.norm_a(residual + self.dropout(self.mha_self(x, x, x, mask)))
        residual = x
        c = self.mha_cross(x, memory, memory, src_mask)
        x = self.norm_b(residual + self.dropout(c))
        residual = x
        return self.norm_c(residual + self.dropout(self.ffn(x)))


@right("decoder_block")
# the mask from a comparison of float positions
class DecoderBlockFloat64Mask(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.ff_in = nn.Linear(d_model, d_ff)
        self.ff_out = nn.Linear(d_ff, d_model)
        self.norm3 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.cross = MultiHeadAttention(d_model, n_heads, dropout)
        self.masked_self = MultiHeadAttention(d_model, n_heads, dropout)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        pos = torch.arange(x.size(1), device=x.device, dtype=torch.float64)
        causal = (pos.view(-1, 1) - pos.view(1, -1) >= 0).unsqueeze(0).unsqueeze(0)
        y = self.norm1(x + self.drop(self.masked_self(x, x, x, mask=causal)))
        z = self.norm2(y + self.drop(self.cross(y, memory, memory, mask=src_mask)))
        return self.norm3(z + self.drop(self.ff_out(F.relu(self.ff_in(z)))))


# ------------------------------------------------------------------------- listed ones
# Each is the plain block with one line changed.


@wrong(
    "decoder_block", r"'decoder self-attention without the causal mask'", listed=True
)
class DecoderNoCausalMask(nn.Module):  # the encoder block copied, mask forgotten
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x)))
        c = self.cross_attn(x, memory, memory, mask=src_mask)
        x = self.norm2(x + self.dropout(c))
        return self.norm3(x + self.dropout(self.ff(x)))


@wrong("decoder_block", r"'causal mask built with triu instead of tril'", listed=True)
class DecoderTriuMask(nn.Module):  # triu and tril confused
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norms = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu()[None, None]
        x = self.norms[0](x + self.dropout(self.self_attn(x, x, x, mask=mask)))
        c = self.cross_attn(x, memory, memory, mask=src_mask)
        x = self.norms[1](x + self.dropout(c))
        return self.norms[2](x + self.dropout(self.ff(x)))


@wrong(
    "decoder_block",
    r"'cross-attention taking keys/values from the decoder'",
    listed=True,
)
class DecoderCrossSelf(nn.Module):  # the seed's argument slots: attends to itself
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        x = self.norm2(x + self.dropout(self.cross_attn(x, x, x)))
        return self.norm3(x + self.dropout(self.ff(x)))


@wrong(
    "decoder_block",
    r"'cross-attention taking keys/values from the decoder'",
    listed=True,
)
# same, keeps the src_mask (shape happens to fit)
class DecoderCrossSelfMasked(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        x = self.norm2(x + self.dropout(self.cross_attn(x, x, x, mask=src_mask)))
        return self.norm3(x + self.dropout(self.ff(x)))


@wrong(
    "decoder_block", r"'cross-attention ignores the source padding mask'", listed=True
)
class DecoderNoSourceMask(nn.Module):  # src_mask accepted and dropped
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        x = self.norm2(x + self.dropout(self.cross_attn(x, memory, memory)))
        return self.norm3(x + self.dropout(self.ff(x)))


@wrong("decoder_block", r"'cross-attention before self-attention'", listed=True)
class DecoderCrossFirst(nn.Module):  # "read the source first"
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        c = self.cross_attn(x, memory, memory, mask=src_mask)
        x = self.norm1(x + self.dropout(c))
        x = self.norm2(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        return self.norm3(x + self.dropout(self.ff(x)))


@wrong("decoder_block", r"'missing residual'", listed=True)
class DecoderNoResidual(nn.Module):  # "the norm already keeps the scale"
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        x = self.norm1(self.dropout(self.self_attn(x, x, x, mask=causal)))
        x = self.norm2(self.dropout(self.cross_attn(x, memory, memory, mask=src_mask)))
        return self.norm3(self.dropout(self.ff(x)))


@wrong("decoder_block", r"Pre-LN where Post-LN was asked", listed=True)
class DecoderPreLN(nn.Module):  # the GPT-2 habit
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        h = self.norm1(x)
        x = x + self.dropout(self.self_attn(h, h, h, mask=causal))
        h = self.norm2(x)
        x = x + self.dropout(self.cross_attn(h, memory, memory, mask=src_mask))
        return x + self.dropout(self.ff(self.norm3(x)))


# ----------------------------------------------------------------------- unlisted ones


@wrong("decoder_block", r"hides the diagonal", listed=False)
class DecoderStrictlyLowerMask(nn.Module):  # "a token must not see itself"
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        ones = torch.ones(s, s, dtype=torch.bool, device=x.device)
        mask = torch.tril(ones, diagonal=-1)
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=mask[None, None])))
        c = self.cross_attn(x, memory, memory, mask=src_mask)
        x = self.norm2(x + self.dropout(c))
        return self.norm3(x + self.dropout(self.ff(x)))


@wrong("decoder_block", r"True on the future positions only", listed=False)
class DecoderFutureMask(nn.Module):  # PyTorch's convention (True = masked) carried over
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        future = torch.triu(torch.ones(s, s, device=x.device), diagonal=1).bool()
        a = self.self_attn(x, x, x, mask=future[None, None])
        x = self.norm1(x + self.dropout(a))
        c = self.cross_attn(x, memory, memory, mask=src_mask)
        x = self.norm2(x + self.dropout(c))
        return self.norm3(x + self.dropout(self.ff(x)))


@wrong("decoder_block", r"mask is ~src_mask", listed=False)
class DecoderInvertedSourceMask(nn.Module):  # src_mask "inverted to mark the padding"
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        pad = None if src_mask is None else ~src_mask
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        x = self.norm2(x + self.dropout(self.cross_attn(x, memory, memory, mask=pad)))
        return self.norm3(x + self.dropout(self.ff(x)))


@wrong("decoder_block", r"includes the causal triangle", listed=False)
# "the decoder must never look ahead" applied twice
class DecoderCausalCross(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        st, ss = x.size(1), memory.size(1)
        causal = torch.ones(st, st, dtype=torch.bool, device=x.device).tril()
        causal = causal[None, None]
        ahead = torch.ones(st, ss, dtype=torch.bool, device=x.device).tril()[None, None]
        cross_mask = ahead if src_mask is None else ahead & src_mask
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        c = self.cross_attn(x, memory, memory, mask=cross_mask)
        x = self.norm2(x + self.dropout(c))
        return self.norm3(x + self.dropout(self.ff(x)))


@wrong("decoder_block", r"queries are the block's input x", listed=False)
class DecoderStaleQuery(nn.Module):  # new names per step, the old one used by mistake
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        h1 = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        c = self.cross_attn(x, memory, memory, mask=src_mask)
        h2 = self.norm2(h1 + self.dropout(c))
        return self.norm3(h2 + self.dropout(self.ff(h2)))


@wrong("decoder_block", r"reads x_in \+ cross-attention", listed=False)
# residual = the block's input, kept in a name
class DecoderResidualFromInput(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        residual = x
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        x = self.norm1(residual + self.dropout(self.self_attn(x, x, x, mask=causal)))
        c = self.cross_attn(x, memory, memory, mask=src_mask)
        x = self.norm2(residual + self.dropout(c))
        return self.norm3(x + self.dropout(self.ff(x)))


@wrong("decoder_block", r"same module as an earlier sublayer", listed=False)
class DecoderOneNormUsedTwice(nn.Module):  # copy-pasted line, norm1 kept
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        c = self.cross_attn(x, memory, memory, mask=src_mask)
        x = self.norm1(x + self.dropout(c))
        return self.norm3(x + self.dropout(self.ff(x)))


@wrong("decoder_block", r"same MultiHeadAttention module", listed=False)
class DecoderOneAttentionTwice(nn.Module):  # self_attn reused for the cross-attention
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        c = self.self_attn(x, memory, memory, mask=src_mask)
        x = self.norm2(x + self.dropout(c))
        return self.norm3(x + self.dropout(self.ff(x)))


@wrong("decoder_block", r"you apply GELU", listed=False)
class DecoderGelu(nn.Module):  # BERT/GPT's activation
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        c = self.cross_attn(x, memory, memory, mask=src_mask)
        x = self.norm2(x + self.dropout(c))
        return self.norm3(x + self.dropout(self.ff(x)))


@wrong("decoder_block", r"you apply no activation", listed=False)
class DecoderLinearFeedForward(nn.Module):  # the ReLU forgotten in forward
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        c = self.cross_attn(x, memory, memory, mask=src_mask)
        x = self.norm2(x + self.dropout(c))
        return self.norm3(x + self.dropout(self.linear2(self.linear1(x))))


@wrong("decoder_block", r"feed-forward reads the block's input x", listed=False)
class DecoderFeedForwardOnInput(nn.Module):  # "x" kept for the input, new names after
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        a = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        c = self.cross_attn(a, memory, memory, mask=src_mask)
        b = self.norm2(a + self.dropout(c))
        return self.norm3(b + self.dropout(self.ff(x)))


@wrong("decoder_block", r"returns 1·LayerNorm₃\(...\) \+ 1·", listed=False)
# one more residual "around the whole block"
class DecoderExtraOuterResidual(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        c = self.cross_attn(x, memory, memory, mask=src_mask)
        x = self.norm2(x + self.dropout(c))
        return x + self.norm3(x + self.dropout(self.ff(x)))


@wrong("decoder_block", r"reads 1·x \+ 2·self-attention", listed=False)
class DecoderSublayerAddedTwice(nn.Module):  # x updated, then the sum taken again
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        a = self.dropout(self.self_attn(x, x, x, mask=causal))
        x = x + a
        x = self.norm1(x + a)
        c = self.cross_attn(x, memory, memory, mask=src_mask)
        x = self.norm2(x + self.dropout(c))
        return self.norm3(x + self.dropout(self.ff(x)))


@wrong("decoder_block", r"dropout still on in eval mode", listed=False)
class DecoderFunctionalDropoutAlwaysOn(nn.Module):  # F.dropout without training=
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.p = dropout

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        x = self.norm1(x + F.dropout(self.self_attn(x, x, x, mask=causal), self.p))
        c = self.cross_attn(x, memory, memory, mask=src_mask)
        x = self.norm2(x + F.dropout(c, self.p))
        return self.norm3(x + F.dropout(self.ff(x), self.p))


@wrong("decoder_block", r"No LayerNorm runs after the feed-forward", listed=False)
class DecoderLastNormForgotten(nn.Module):  # norm3 built, never applied
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        c = self.cross_attn(x, memory, memory, mask=src_mask)
        x = self.norm2(x + self.dropout(c))
        return x + self.dropout(self.ff(x))


@wrong("decoder_block", r"feed-forward runs before the cross-attention", listed=False)
class DecoderFeedForwardSecond(nn.Module):  # the encoder block's order, cross appended
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        x = self.norm2(x + self.dropout(self.ff(x)))
        c = self.cross_attn(x, memory, memory, mask=src_mask)
        return self.norm3(x + self.dropout(c))


@wrong("decoder_block", r"feed-forward reads a LayerNorm of its input", listed=False)
class DecoderPreLNFeedForwardOnly(nn.Module):  # Post-LN attention, Pre-LN feed-forward
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        c = self.cross_attn(x, memory, memory, mask=src_mask)
        x = self.norm2(x + self.dropout(c))
        return x + self.dropout(self.ff(self.norm3(x)))


@wrong("decoder_block", r"a ReLU after the sublayer's output", listed=False)
class DecoderReluAfterFeedForward(nn.Module):  # a trailing ReLU in the Sequential
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model), nn.ReLU()
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        c = self.cross_attn(x, memory, memory, mask=src_mask)
        x = self.norm2(x + self.dropout(c))
        return self.norm3(x + self.dropout(self.ff(x)))


@wrong(
    "decoder_block",
    r"raised ValueError: mask must be .* exactly 4 dims.* at line \d+ of "
    r"your code",
    listed=False,
)
class DecoderTwoDimMask(nn.Module):  # the [St, St] mask of chapter 2, no [1, 1, ...]
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        c = self.cross_attn(x, memory, memory, mask=src_mask)
        x = self.norm2(x + self.dropout(c))
        return self.norm3(x + self.dropout(self.ff(x)))


@wrong("decoder_block", r"without src_mask raised TypeError", listed=False)
class DecoderSourceMaskRequired(nn.Module):  # src_mask given no default
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        c = self.cross_attn(x, memory, memory, mask=src_mask)
        x = self.norm2(x + self.dropout(c))
        return self.norm3(x + self.dropout(self.ff(x)))


@wrong(
    "decoder_block",
    r"raised TypeError: mask must be .*dtype torch.float32",
    listed=False,
)
class DecoderFloatMask(nn.Module):  # a 0/1 float mask, as in some tutorials
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.tril(torch.ones(1, 1, s, s, device=x.device))
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        c = self.cross_attn(x, memory, memory, mask=src_mask)
        x = self.norm2(x + self.dropout(c))
        return self.norm3(x + self.dropout(self.ff(x)))


@wrong("decoder_block", r"queries from memory|raised", listed=False)
class DecoderCrossArgumentsSwapped(nn.Module):  # (memory, x, x): query and key mixed up
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        x = self.norm2(x + self.dropout(self.cross_attn(memory, x, x)))
        return self.norm3(x + self.dropout(self.ff(x)))


@wrong("decoder_block", r"changed its input x in place", listed=False)
class DecoderInPlaceResidual(
    nn.Module
):  # x += ... "saves memory", writes into the input
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        x += self.dropout(self.self_attn(x, x, x, mask=causal))
        x = self.norm1(x)
        c = self.cross_attn(x, memory, memory, mask=src_mask)
        x = self.norm2(x + self.dropout(c))
        return self.norm3(x + self.dropout(self.ff(x)))


@wrong("decoder_block", r"elementwise_affine=False", listed=False)
class DecoderPlainNorms(nn.Module):  # "no parameters in the norm, fewer to train"
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norms = nn.ModuleList(
            nn.LayerNorm(d_model, elementwise_affine=False) for _ in range(3)
        )
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        x = self.norms[0](x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        c = self.cross_attn(x, memory, memory, mask=src_mask)
        x = self.norms[1](x + self.dropout(c))
        return self.norms[2](x + self.dropout(self.ff(x)))


@wrong(
    "decoder_block",
    r"0% of the cross-attention's output was zeroed.*expected "
    r"about 30%",
    listed=False,
)
class DecoderNoCrossDropout(nn.Module):  # dropout forgotten on the middle sublayer
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        st = x.size(1)
        causal = torch.tril(torch.ones(st, st, dtype=torch.bool, device=x.device))[
            None, None
        ]
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        x = self.norm2(x + self.cross_attn(x, memory, memory, mask=src_mask))
        return self.norm3(x + self.dropout(self.ff(x)))


@wrong(
    "decoder_block",
    r"\d+% of the feed-forward's output was zeroed.*expected "
    r"about 30%",
    listed=False,
)
class DecoderFixedFFDropout(nn.Module):  # "0.1 like the paper", hard-coded in one place
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.p = dropout
        self.attn1 = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.attn2 = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.lin1, self.lin2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.ln = nn.ModuleList([nn.LayerNorm(d_model) for _ in range(3)])

    def forward(self, x, memory, src_mask=None):
        n = x.shape[1]
        keep = torch.ones(n, n, device=x.device).tril().bool().view(1, 1, n, n)
        a = F.dropout(self.attn1(x, x, x, mask=keep), self.p, self.training)
        x = self.ln[0](x + a)
        c = F.dropout(
            self.attn2(x, memory, memory, mask=src_mask), self.p, self.training
        )
        x = self.ln[1](x + c)
        f = F.dropout(self.lin2(F.relu(self.lin1(x))), 0.1, self.training)
        return self.ln[2](x + f)


@wrong("decoder_block", r"'self-attention inputs wrong'", listed=False)
class DecoderSelfAttentionCopiedFromCross(nn.Module):  # the cross line pasted twice
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        a = self.self_attn(x, memory, memory, mask=src_mask)
        x = self.norm1(x + self.dropout(a))
        c = self.cross_attn(x, memory, memory, mask=src_mask)
        x = self.norm2(x + self.dropout(c))
        return self.norm3(x + self.dropout(self.ff(x)))
