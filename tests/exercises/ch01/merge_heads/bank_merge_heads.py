"""Chapter 1's measured bank for merge_heads (the format: tests/bank/bank.py).

Each answer is literal learner code; a wrong one says in a comment what the mistake is
and why a learner makes it.
"""

import math

import torch

from bank import GENERIC, right, wrong  # noqa: F401
from exercise_cells import graders

GRADERS = graders("ch01_shapes", {"merge_heads": "merge_heads"})


# ------------------------------------------------------------------ merge_heads: right


@right("merge_heads")
def merge_transpose_reshape(x):
    batch, n_heads, seq, d_head = x.shape
    return x.transpose(1, 2).reshape(batch, seq, n_heads * d_head)


@right("merge_heads")
def merge_contiguous_view(x):
    b, h, s, dh = x.shape
    return x.transpose(1, 2).contiguous().view(b, s, h * dh)


@right("merge_heads")
def merge_cat_heads(x):
    return torch.cat(x.unbind(dim=1), dim=-1)


@right("merge_heads")
def merge_permute_flatten(x):
    return x.permute(0, 2, 1, 3).flatten(start_dim=2)


@right("merge_heads")
def merge_stack_on_axis_two(x):
    return torch.stack(x.unbind(1), dim=2).flatten(2)


@right("merge_heads")
def merge_einsum(x):
    b, h, s, dh = x.shape
    return torch.einsum("bhsd->bshd", x).reshape(b, s, -1)


@right("merge_heads")
def merge_loop_cat(x):
    return torch.cat([x[:, i] for i in range(x.size(1))], dim=2)


@right("merge_heads")
def merge_movedim_reshape(x):
    b, h, s, dh = x.size()
    return x.movedim(1, 2).reshape(b, s, -1)


# ------------------------------------------------------------------ merge_heads: wrong


@wrong("merge_heads", r"'merged without transpose'", listed=True)
def merge_reshape_only(x):  # "reshape handles it": it glues rows of different tokens
    b, h, s, dh = x.shape
    return x.reshape(b, s, h * dh)


@wrong("merge_heads", r"'merged without transpose'", listed=True)
def merge_contiguous_then_view(x):  # contiguous() fixes the error, not the order
    b, h, s, dh = x.shape
    return x.contiguous().view(b, s, -1)


@wrong("merge_heads", r"'heads merged in the wrong order'", listed=True)
def merge_dh_before_h(x):  # permute(0, 2, 3, 1): Dh before H
    b, h, s, dh = x.shape
    return x.permute(0, 2, 3, 1).reshape(b, s, h * dh)


@wrong("merge_heads", r"'heads merged in the wrong order'", listed=True)
def merge_stack_last(x):  # stack(dim=-1) puts the head axis after Dh
    return torch.stack(x.unbind(1), dim=-1).flatten(2)


@wrong("merge_heads", r"'view on a non-contiguous tensor'", listed=True)
def merge_view_after_transpose(x):  # view() refuses what transpose returns
    b, h, s, dh = x.shape
    return x.transpose(1, 2).view(b, s, h * dh)


@wrong("merge_heads", r"'axes in the wrong order'.*\[B, S, H, Dh\]", listed=False)
def merge_forgot_flatten(x):  # the transpose, and then nothing
    return x.transpose(1, 2)


@wrong("merge_heads", r"'wrong merged shape'.*\[2, 3, 20\]", listed=False)
def merge_flatten_wrong_axes(x):  # flatten(2) joins S and Dh
    return x.flatten(2)


@wrong("merge_heads", r"'wrong merged shape'.*\[2, 60\]", listed=False)
def merge_flatten_everything(x):  # flatten(1) after the transpose: S is gone too
    return x.transpose(1, 2).flatten(1)


@wrong("merge_heads", r"'wrong merged shape'.*\[2, 12, 5\]", listed=False)
def merge_cat_along_sequence(x):  # unbind the heads, cat on dim=1: the tokens axis
    return torch.cat(x.unbind(1), dim=1)


@wrong("merge_heads", r"'wrong merged shape'.*\[2, 3, 20\]", listed=False)
def merge_cat_tokens(x):  # unbind(2) takes tokens apart, not heads
    return torch.cat(x.unbind(2), dim=-1)


@wrong(
    "merge_heads", r"'head features put in the wrong places'.*\(2, 0\)", listed=False
)
def merge_heads_reversed(x):  # reversed() "to undo" the split's order
    return torch.cat(list(reversed(x.unbind(1))), dim=-1)


@wrong("merge_heads", r"'tokens glued together'", listed=False)
def merge_transpose_one_three(x):  # transpose(1, 3): swaps H and Dh, then reshapes
    b, h, s, dh = x.shape
    return x.transpose(1, 3).reshape(b, s, -1)


@wrong("merge_heads", r"'tokens glued together'", listed=False)
def merge_mt_reshape(x):  # .mT swaps the last two axes, not H and S
    b, h, s, dh = x.shape
    return x.mT.reshape(b, s, h * dh)


@wrong("merge_heads", r"'shape unpacked in the wrong order'", listed=True)
def merge_unpacks_in_split_order(x):  # reads the shape as [B, S, H, Dh]
    b, s, h, dh = x.shape
    return x.transpose(1, 2).reshape(b, s, h * dh)


@wrong("merge_heads", r"'shape unpacked in the wrong order'", listed=True)
def merge_sizes_named_for_the_output(x):  # batch, seq, heads, d_head = x.size()
    batch, seq_len, n_heads, d_head = x.size()
    x = x.permute(0, 2, 1, 3).contiguous()
    return x.view(batch, seq_len, n_heads * d_head)


@wrong("merge_heads", r"'input changed in place'.*`x`", listed=False)
def merge_transpose_in_place(x):  # transpose_ changes the caller's tensor
    b, h, s, dh = x.shape
    x.transpose_(1, 2)
    return x.reshape(b, s, h * dh)


@wrong(
    "merge_heads", r"expected dtype torch\.float64, got torch\.float32", listed=False
)
def merge_to_float32(x):  # .to(torch.float32) "for the next Linear"
    b, h, s, dh = x.shape
    return x.transpose(1, 2).reshape(b, s, h * dh).to(torch.float32)


@wrong("merge_heads", r"'values changed, not only moved'.*times 2\.236", listed=False)
def merge_undoes_scaling(x):  # multiplies by √Dh "to undo the attention's scaling"
    b, h, s, dh = x.shape
    return x.transpose(1, 2).reshape(b, s, h * dh) * math.sqrt(dh)


@wrong("merge_heads", r"'batch entries mixed'", listed=False)
def merge_transpose_zero_two(x):  # transpose(0, 2) instead of (1, 2)
    b, h, s, dh = x.shape
    return x.transpose(0, 2).reshape(b, s, h * dh)


@wrong("merge_heads", r"'wrong merged shape'.*\[2, 4, 5\]", listed=False)
def merge_sums_heads(x):  # sums the heads "like the outputs of parallel branches"
    return x.sum(dim=1)


@wrong("merge_heads", r"'wrong merged shape'.*\[2, 4, 10\]", listed=False)
def merge_drops_last_head(x):  # range(h - 1): an off-by-one drops the last head
    return torch.cat([x[:, i] for i in range(x.size(1) - 1)], dim=-1)


@wrong("merge_heads", r"expected a tensor of shape .*got list", listed=False)
def merge_returns_list(x):  # the heads, side by side, but never concatenated
    return [x[:, i] for i in range(x.size(1))]


@wrong("merge_heads", r"'axes in the wrong order'.*\[B, D, S\]", listed=False)
def merge_feature_first(x):  # [B, D, S], like a Conv1d wants it
    b, h, s, dh = x.shape
    return x.reshape(b, h * dh, s)


@wrong("merge_heads", r"'head features put in the wrong places'", listed=False)
def merge_rolled_features(x):  # roll "to put the first head last", as split did
    b, h, s, dh = x.shape
    return torch.roll(x.transpose(1, 2).reshape(b, s, h * dh), 1, dims=-1)


@wrong("merge_heads", r"'axes in the wrong order'.*\[S, B, D\]", listed=False)
def merge_sequence_first(x):  # [S, B, D], nn.MultiheadAttention's default layout
    b, h, s, dh = x.shape
    return x.permute(2, 0, 1, 3).reshape(s, b, h * dh)


@wrong("merge_heads", r"raised RuntimeError.*at line \d+ of your code", listed=False)
def merge_fixed_shape(x):  # sizes from the lesson's example, not from x
    return x.transpose(1, 2).reshape(2, 5, 8)


@wrong(
    "merge_heads",
    r"'gradient does not reach the input'.*no gradient back to x",
    listed=False,
)
def merge_through_data(x):  # .data "to skip autograd's bookkeeping" on a pure reshape
    b, h, s, dh = x.shape
    return x.data.permute(0, 2, 1, 3).reshape(b, s, h * dh)
