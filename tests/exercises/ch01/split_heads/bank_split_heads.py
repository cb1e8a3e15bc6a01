"""Chapter 1's measured bank for split_heads (the format: tests/bank/bank.py).

Each answer is literal learner code; a wrong one says in a comment what the mistake is
and why a learner makes it.
"""

import math

import torch

from bank import GENERIC, right, wrong  # noqa: F401
from exercise_cells import graders

GRADERS = graders("ch01_shapes", {"split_heads": "split_heads"})


# ------------------------------------------------------------------ split_heads: right


@right("split_heads")
def split_view_transpose(x, n_heads):
    batch, seq, d_model = x.shape
    return x.view(batch, seq, n_heads, d_model // n_heads).transpose(1, 2)


@right("split_heads")
def split_reshape_permute(x, h):
    b, s, d = x.shape
    return x.reshape(b, s, h, d // h).permute(0, 2, 1, 3)


@right("split_heads")
def split_unflatten_movedim(x, n_heads):
    return x.unflatten(-1, (n_heads, -1)).movedim(2, 1)


@right("split_heads")
def split_chunk_stack(x, n_heads):
    return torch.stack(x.chunk(n_heads, dim=-1), dim=1)


@right("split_heads")
def split_slices_loop(x, n_heads):
    d_head = x.size(-1) // n_heads
    heads = [x[:, :, i * d_head : (i + 1) * d_head] for i in range(n_heads)]
    return torch.stack(heads, dim=1)


@right("split_heads")
def split_contiguous_copy(x, n_heads):
    b, s, d = x.size()
    return x.view(b, s, n_heads, -1).transpose(1, 2).contiguous()


@right("split_heads")
def split_swapaxes(x, n_heads):
    b, s, d = x.shape
    return x.reshape(b, s, n_heads, d // n_heads).swapaxes(1, 2)


@right("split_heads")
def split_einsum(x, n_heads):
    b, s, d = x.shape
    return torch.einsum("bshd->bhsd", x.view(b, s, n_heads, d // n_heads))


# ------------------------------------------------------------------ split_heads: wrong


@wrong("split_heads", r"'view without transpose'", listed=True)
def split_forgot_transpose(x, n_heads):  # stops at [B, S, H, Dh], the view alone
    b, s, d = x.shape
    return x.view(b, s, n_heads, d // n_heads)


@wrong("split_heads", r"'sequence and head axes confused'", listed=True)
def split_view_straight(x, n_heads):  # "the output shape is [B, H, S, Dh]": view to it
    b, s, d = x.shape
    return x.view(b, n_heads, s, d // n_heads)


@wrong("split_heads", r"'heads interleaved'", listed=True)
def split_interleaved_einops_order(x, n_heads):  # einops' "(d h)" instead of "(h d)"
    b, s, d = x.shape
    return x.view(b, s, d // n_heads, n_heads).permute(0, 3, 1, 2)


@wrong("split_heads", r"'heads interleaved'", listed=True)
def split_strided_slices(x, n_heads):  # x[..., i::H] looks like "every head a slice"
    return torch.stack([x[..., i::n_heads] for i in range(n_heads)], dim=1)


@wrong("split_heads", r"'sequence and head axes confused'", listed=True)
def split_two_views(x, n_heads):  # two views never move data: still a straight view
    b, s, d = x.shape
    return x.view(b, s * n_heads, d // n_heads).view(b, n_heads, s, d // n_heads)


@wrong("split_heads", r"'axes in the wrong order'.*\[B, S, D\]", listed=False)
def split_returns_input(x, n_heads):  # thought the heads were split later, in attention
    return x


@wrong("split_heads", r"'axes in the wrong order'.*\[B, S, Dh, H\]", listed=False)
def split_transposes_last_two(x, n_heads):  # transpose(2, 3): the wrong pair of axes
    b, s, d = x.shape
    return x.view(b, s, n_heads, d // n_heads).transpose(2, 3)


@wrong("split_heads", r"'axes in the wrong order'.*\[B, H, Dh, S\]", listed=False)
def split_permute_wrong(x, n_heads):  # permute names where axes come from: misread
    b, s, d = x.shape
    return x.view(b, s, n_heads, d // n_heads).permute(0, 2, 3, 1)


@wrong("split_heads", r"'axes in the wrong order'.*\[H, B, S, Dh\]", listed=False)
def split_heads_first(x, n_heads):  # heads in front "so each head is a batch"
    b, s, d = x.shape
    return x.view(b, s, n_heads, d // n_heads).permute(2, 0, 1, 3)


@wrong("split_heads", r"'axes in the wrong order'.*\[S, B, H, Dh\]", listed=False)
def split_transpose_zero_one(x, n_heads):  # transpose(0, 1): sequence-first habits
    b, s, d = x.shape
    return x.view(b, s, n_heads, d // n_heads).transpose(0, 1)


@wrong(
    "split_heads",
    r"'features assigned to the wrong heads'.*head 0 holds features "
    r"\[15, 16, 17, 18, 19\]",
    listed=False,
)
def split_heads_reversed(x, n_heads):  # flip meant to "put the heads axis first"
    b, s, d = x.shape
    return x.view(b, s, n_heads, d // n_heads).flip(2).transpose(1, 2)


@wrong("split_heads", r"'wrong output shape'.*5 heads of 4 features", listed=False)
def split_sizes_swapped(x, n_heads):  # view(B, S, Dh, H): the two sizes swapped
    b, s, d = x.shape
    return x.view(b, s, d // n_heads, n_heads).transpose(1, 2)


@wrong("split_heads", r"'wrong output shape'.*5 heads of 4 features", listed=False)
def split_chunks_of_n_heads(x, n_heads):  # split(size) takes a chunk size, not a count
    return torch.stack(x.split(n_heads, dim=-1), dim=1)


@wrong("split_heads", r"'wrong output shape'.*5 heads of 4 features", listed=False)
def split_fixed_head_size(x, n_heads):  # Dh = 4 fitted the first test, D=8 with 2 heads
    b, s, d = x.shape
    return x.view(b, s, -1, 4).transpose(1, 2)


@wrong("split_heads", r"raised TypeError.*at line \d+ of your code", listed=False)
def split_float_division(x, n_heads):  # d / h is a float: view() wants ints
    b, s, d = x.shape
    return x.view(b, s, n_heads, d / n_heads).transpose(1, 2)


@wrong(
    "split_heads",
    r"raised RuntimeError.*at line \d+ of your code.*case x \[B=2, S=5",
    listed=False,
)
def split_unflatten_sequence(x, n_heads):  # unflatten(1, ...) cuts the sequence axis
    return x.unflatten(1, (n_heads, -1))


@wrong("split_heads", r"'tokens mixed into the heads'", listed=False)
def split_reshape_then_transpose_inner(x, n_heads):  # [B, H, Dh, S] read from memory
    b, s, d = x.shape
    return x.reshape(b, n_heads, d // n_heads, s).transpose(2, 3)


@wrong("split_heads", r"'batch entries mixed'", listed=False)
def split_transpose_before_view(x, n_heads):  # transposed first, so reshape reorders
    b, s, d = x.shape
    return x.transpose(0, 1).reshape(b, s, n_heads, d // n_heads).transpose(1, 2)


@wrong("split_heads", r"'input changed in place'.*`x`", listed=False)
def split_resize_in_place(x, n_heads):  # resize_ reshapes the caller's tensor itself
    b, s, d = x.shape
    x.resize_(b, s, n_heads, d // n_heads)
    return x.transpose(1, 2)


@wrong(
    "split_heads", r"expected dtype torch\.float64, got torch\.float32", listed=False
)
def split_casts_to_float(x, n_heads):  # .float() "to be safe" downcasts float64
    b, s, d = x.shape
    return x.float().view(b, s, n_heads, d // n_heads).transpose(1, 2)


@wrong("split_heads", r"expected a tensor of shape .*got tuple", listed=False)
def split_returns_head_size_too(x, n_heads):  # handy for the caller, but not asked for
    b, s, d = x.shape
    d_head = d // n_heads
    return x.view(b, s, n_heads, d_head).transpose(1, 2), d_head


@wrong("split_heads", r"'values changed, not only moved'.*times 0\.4472", listed=False)
def split_scales_queries(x, n_heads):  # pre-scales by 1/√Dh "since q is split here"
    b, s, d = x.shape
    d_head = d // n_heads
    return x.view(b, s, n_heads, d_head).transpose(1, 2) / math.sqrt(d_head)


@wrong("split_heads", r"'wrong output shape'.*\[2, 3, 1, 20\]", listed=False)
def split_chunk_wrong_axis(x, n_heads):  # chunk(dim=1) cuts tokens, not features
    return torch.stack(x.chunk(n_heads, dim=1), dim=1)


@wrong("split_heads", r"'wrong output shape'.*\[2, 4, 15\]", listed=False)
def split_flattens_again(x, n_heads):  # merges S and Dh back "to keep it 3-D"
    b, s, d = x.shape
    return x.view(b, s, n_heads, d // n_heads).transpose(1, 2).reshape(b, n_heads, -1)


@wrong("split_heads", r"'features assigned to the wrong heads'", listed=False)
def split_off_by_one_slices(x, n_heads):  # starts at feature 1, wraps the last around
    d_head = x.size(-1) // n_heads
    rolled = torch.roll(x, -1, dims=-1)
    heads = [rolled[..., i * d_head : (i + 1) * d_head] for i in range(n_heads)]
    return torch.stack(heads, dim=1)


@wrong(
    "split_heads",
    r"'gradient does not reach the input'.*no gradient back to x",
    listed=False,
)
def split_detached(x, n_heads):  # "no gradient needed for a reshape": detaches x first
    b, s, d = x.shape
    return x.detach().view(b, s, n_heads, d // n_heads).transpose(1, 2)


@wrong(
    "split_heads",
    r"'gradient does not reach the input'.*no gradient back to x",
    listed=False,
)
def split_under_no_grad(x, n_heads):  # no_grad "to save memory": a split is no maths
    with torch.no_grad():
        return torch.stack(x.chunk(n_heads, dim=-1), dim=1)


@wrong("split_heads", r"170 is none of the sizes named here", listed=False)
def split_hard_coded_d_model(x, n_heads):  # d_model = 512 copied from the paper
    b, s, _ = x.shape
    return x.view(b, s, n_heads, 512 // n_heads).transpose(1, 2)
