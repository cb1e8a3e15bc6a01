"""Chapter 3's measured bank for causal_mask (the format: tests/bank/bank.py).

Each answer is graded by every check its exercise runs in the notebook, the mask probes
included: a mask answer with the reference attention and the reference other mask
(``answers_ch03.OTHERS``).
"""

import numpy as np
import torch

from bank import GENERIC, right, wrong  # noqa: F401
from exercise_cells import graders
from answers_ch03 import OTHERS
from tformer_ref.device import get_device

GRADERS = graders("ch03_masks", {"causal_mask": "causal_mask"}, others=OTHERS)


device = get_device()  # the notebook's setup cell defines it the same way


# --------------------------------------------------------------------------- right ones


@right("causal_mask")
def causal_tril_ones_bool(size):
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()[None, None]


@right("causal_mask")
def causal_arange_compare(size):
    i = torch.arange(size, device=device)
    return (i[:, None] >= i[None, :]).view(1, 1, size, size)


@right("causal_mask")
def causal_not_strict_upper(size):
    future = torch.ones(1, 1, size, size, dtype=torch.bool, device=device).triu(1)
    return ~future


@right("causal_mask")
def causal_square_float_then_bool(size):  # [S, S] broadcasts like [1, 1, S, S]
    return torch.tril(torch.ones(size, size, device=device)).bool()


@right("causal_mask")
def causal_unsqueeze_twice(size):
    m = torch.tril(torch.ones(size, size, dtype=torch.bool, device=device))
    return m.unsqueeze(0).unsqueeze(0)


@right("causal_mask")
def causal_python_loops(size):
    rows = [[j <= i for j in range(size)] for i in range(size)]
    return torch.tensor(rows, dtype=torch.bool, device=device)[None, None]


@right("causal_mask")
def causal_three_dims(size):  # [1, S, S] broadcasts the same way too
    return torch.ones(size, size, device=device).tril().to(torch.bool)[None]


@right("causal_mask")
def causal_where_expand(size):
    i = torch.arange(size, device=device)
    keep = torch.where(i.view(-1, 1) - i.view(1, -1) >= 0, True, False)
    return keep.expand(1, 1, size, size)


# --------------------------------------------------------------------------- wrong ones


BLOCK_SIZE = 512
_CAUSAL = torch.tril(
    torch.ones(BLOCK_SIZE, BLOCK_SIZE, dtype=torch.bool, device=device)
)


@wrong("causal_mask", r"'causal mask wrong for long sequences'.*1100", listed=False)
def causal_cut_from_block_size_buffer(size):  # built once, as a GPT's block_size
    return _CAUSAL[:size, :size].view(1, 1, size, size)


@wrong("causal_mask", r"'triu instead of tril'", listed=True)
def causal_triu(size):  # mixed up which triangle is the past
    return torch.triu(torch.ones(size, size, device=device)).bool()[None, None]


@wrong("causal_mask", r"'mask inverted'", listed=True)
def causal_ignore_convention(size):  # nn.MultiheadAttention's True = ignore
    ones = torch.ones(1, 1, size, size, dtype=torch.bool, device=device)
    return ones.triu(diagonal=1)


@wrong("causal_mask", r"'diagonal excluded'", listed=True)
def causal_strictly_lower(size):  # "the past" read as strictly before
    return torch.ones(size, size, device=device).tril(-1).bool()[None, None]


@wrong("causal_mask", r"'float mask instead of bool'", listed=True)
def causal_float_tril(size):  # the seed's tril(ones) as it is
    return torch.tril(torch.ones(1, 1, size, size, device=device))


@wrong("causal_mask", r"'triu instead of tril'", listed=True)
def causal_key_ge_query(size):  # j >= i instead of j <= i
    i = torch.arange(size, device=device)
    return i[None, :] >= i[:, None]


@wrong("causal_mask", r"'mask inverted'", listed=True)
def causal_tril_eq_zero(size):  # "== 0" picks the zeros of tril: the future
    return torch.ones(size, size, device=device).tril() == 0


@wrong("causal_mask", r"'diagonal excluded'", listed=True)
def causal_difference_at_least_one(size):  # i - j >= 1 leaves out j == i
    i = torch.arange(size, device=device)
    return (i[:, None] - i[None, :]) >= 1


@wrong("causal_mask", r"tril\(diagonal=1\).*offset of 1", listed=False)
def causal_diagonal_plus_one(size):  # "keys up to the next one" for teacher forcing
    return torch.ones(size, size, dtype=torch.bool, device=device).tril(1)[None, None]


@wrong("causal_mask", r"tril\(diagonal=-2\).*offset of -2", listed=False)
def causal_diagonal_minus_two(size):  # hides the previous token as well as itself
    return torch.ones(size, size, dtype=torch.bool, device=device).tril(-2)[None, None]


@wrong("causal_mask", r"tril\(diagonal=1\)", listed=False)
def causal_query_plus_one(size):  # an off-by-one in the comparison
    i = torch.arange(size, device=device)
    return (i[None, :] <= i[:, None] + 1)[None, None]


@wrong("causal_mask", r"tril\(diagonal=1\)", listed=False)
def causal_slice_of_bigger(size):  # built one larger and sliced the wrong corner
    big = torch.ones(size + 1, size + 1, dtype=torch.bool, device=device).tril()
    return big[1:, :-1][None, None]


@wrong("causal_mask", r"triu\(diagonal=2\)", listed=False)
def causal_not_tril_one(size):  # inverted and off by one at once
    return ~torch.ones(size, size, dtype=torch.bool, device=device).tril(1)[None, None]


@wrong("causal_mask", r"dtype torch\.int64 .*pattern is right", listed=False)
def causal_long_mask(size):  # ones() of longs: tril is right, the dtype is not
    return torch.ones(size, size, dtype=torch.long, device=device).tril()[None, None]


@wrong("causal_mask", r"dtype torch\.uint8 .*pattern is right", listed=False)
def causal_uint8_mask(size):  # the old byte masks of PyTorch 1.1
    return torch.tril(torch.ones(size, size, device=device)).byte()[None, None]


@wrong("causal_mask", r"dtype torch\.float64 .*pattern is right", listed=False)
def causal_float64_mask(size):  # numpy habits: double precision ones
    return torch.ones(size, size, dtype=torch.float64, device=device).tril()[None, None]


@wrong(
    "causal_mask",
    r"dtype torch\.float32 with values -inf, 0.*additive.*pattern "
    r"is right",
    listed=False,
)
def causal_square_subsequent(size):  # nn.Transformer.generate_square_subsequent_mask
    return torch.full((size, size), float("-inf"), device=device).triu(1)


@wrong(
    "causal_mask",
    r"dtype torch\.float32 with values -1e\+09, 0.*additive",
    listed=False,
)
def causal_additive_minus_1e9(size):  # an additive mask, the Annotated Transformer way
    keep = torch.ones(size, size, device=device).tril()
    return ((1.0 - keep) * -1e9)[None, None]


@wrong(
    "causal_mask",
    r"dtype torch\.int32 .*pattern is off too: your mask is "
    r"triu\(diagonal=1\)",
    listed=False,
)
def causal_int_future(size):  # two mistakes: ints, and the future instead of the past
    return torch.ones(size, size, dtype=torch.int32, device=device).triu(1)[None, None]


@wrong(
    "causal_mask",
    r"values -1, 0.*pattern is off too: your mask lets every query "
    r"attend to every key",
    listed=False,
)
def causal_minus_one(size):  # "0 for keep, -1 for masked" as a float
    return (torch.ones(size, size, device=device).tril() - 1)[None, None]


@wrong("causal_mask", r"'causal mask constant'.*every key", listed=False)
def causal_all_true(size):  # forgot the tril step altogether
    return torch.ones(1, 1, size, size, dtype=torch.bool, device=device)


@wrong(
    "causal_mask",
    r"returned shape \[1, 1, 5, 5\].*axis 2 \(queries\) has size 5, "
    r"expected 7; axis 3 \(keys\) has size 5, expected 7",
    listed=False,
)
def causal_hard_coded_size(size):  # the size of the lesson's example, hard-coded
    return torch.ones(5, 5, dtype=torch.bool, device=device).tril()[None, None]


@wrong(
    "causal_mask",
    r"returned shape \[7, 7, 1, 1\].*reads it as \[7, 7, 1, 1\]",
    listed=False,
)
def causal_trailing_axes(size):  # the singleton axes added at the wrong end
    keep = torch.ones(size, size, dtype=torch.bool, device=device).tril()
    return keep[..., None, None]


@wrong(
    "causal_mask",
    r"returned shape \[7, 1, 7\].*reads it as \[1, 7, 1, 7\]",
    listed=False,
)
def causal_middle_axis(size):  # unsqueeze(1) where unsqueeze(0) was meant
    return torch.ones(size, size, dtype=torch.bool, device=device).tril().unsqueeze(1)


@wrong("causal_mask", r"causal_mask\(1\) raised RuntimeError.*at least 2", listed=False)
def causal_tril_of_vector(size):  # tril needs a matrix; ones(size) is a vector
    return torch.tril(torch.ones(size, dtype=torch.bool, device=device))[None, None]


@wrong("causal_mask", r"must return a torch\.Tensor, got ndarray", listed=False)
def causal_numpy(size):  # numpy's tril, never converted
    return np.tril(np.ones((size, size), dtype=bool))[None, None]


@wrong("causal_mask", r"must return a torch\.Tensor, got NoneType", listed=False)
def causal_forgot_return(size):  # built the mask, forgot to return it
    mask = torch.ones(size, size, dtype=torch.bool, device=device).tril()[None, None]
    mask = mask.contiguous()


@wrong("causal_mask", r"'causal mask mirrored'", listed=False)
def causal_flipped(size):  # flipped left-right "so the newest key comes first"
    keep = torch.ones(size, size, dtype=torch.bool, device=device).tril()
    return keep.flip(-1)[None, None]


@wrong("causal_mask", r"'causal mask keeps only the diagonal'", listed=False)
def causal_only_itself(size):  # the identity: each query sees only itself
    return torch.eye(size, dtype=torch.bool, device=device)[None, None]
