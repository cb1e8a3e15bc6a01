"""Chapter 3's measured bank for padding_mask (the format: tests/bank/bank.py).

Each answer is graded by every check its exercise runs in the notebook, the mask probes
included: a mask answer with the reference attention and the reference other mask
(``answers_ch03.OTHERS``).
"""

import torch

from bank import GENERIC, right, wrong  # noqa: F401
from exercise_cells import graders
from answers_ch03 import OTHERS

GRADERS = graders("ch03_masks", {"padding_mask": "padding_mask"}, others=OTHERS)


# --------------------------------------------------------------------------- right ones


@right("padding_mask")
def padding_index_none(tokens, pad_id):
    return (tokens != pad_id)[:, None, None, :]


@right("padding_mask")
def padding_ne_unsqueeze(tokens, pad_id):
    return tokens.ne(pad_id).unsqueeze(1).unsqueeze(2)


@right("padding_mask")
def padding_not_eq_reshape(tokens, pad_id):
    return ~(tokens == pad_id).reshape(tokens.shape[0], 1, 1, -1)


@right("padding_mask")
def padding_where(tokens, pad_id):
    b, s = tokens.shape
    return torch.where(tokens == pad_id, False, True).view(b, 1, 1, s)


@right("padding_mask")
def padding_difference_bool(tokens, pad_id):  # nonzero exactly where token != pad_id
    return (tokens - pad_id).bool()[:, None, None]


@right("padding_mask")
def padding_fill_ones(tokens, pad_id):
    keep = torch.ones_like(tokens, dtype=torch.bool)
    keep[tokens == pad_id] = False
    return keep.view(tokens.size(0), 1, 1, tokens.size(1))


@right("padding_mask")
def padding_unsqueeze_before_last(tokens, pad_id):
    return (tokens != pad_id).unsqueeze(-2).unsqueeze(-2)


@right("padding_mask")
def padding_stack_rows(tokens, pad_id):
    return torch.stack([row != pad_id for row in tokens])[:, None, None, :]


# --------------------------------------------------------------------------- wrong ones


@wrong("padding_mask", r"'mask broadcast over the wrong axis'", listed=True)
def padding_b1s(tokens, pad_id):  # one singleton axis too few: batch lands on heads
    return (tokens != pad_id).unsqueeze(1)


@wrong(
    "padding_mask", r"'mask broadcast over the wrong axis \(\[B, S\]\)'", listed=True
)
def padding_bs(tokens, pad_id):  # no singleton axes at all
    return tokens != pad_id


@wrong("padding_mask", r"'mask on the query axis'", listed=True)
def padding_query_axis(tokens, pad_id):  # hides padded queries, not padded keys
    return (tokens != pad_id)[:, None, :, None]


@wrong("padding_mask", r"'mask inverted'", listed=True)
def padding_true_on_pads(tokens, pad_id):  # key_padding_mask's True = ignore
    return tokens.eq(pad_id).view(tokens.size(0), 1, 1, -1)


@wrong("padding_mask", r"'pad id hard-coded'", listed=True)
def padding_zero_hard_coded(tokens, pad_id):  # the seed's x != 0
    return (tokens != 0).unsqueeze(1).unsqueeze(2)


@wrong("padding_mask", r"'pad id hard-coded'", listed=True)
def padding_bool_of_tokens(tokens, pad_id):  # "nonzero = real", pad_id never used
    return tokens.bool()[:, None, None, :]


@wrong("padding_mask", r"'float mask instead of bool'", listed=True)
def padding_float(tokens, pad_id):  # 1.0 keep / 0.0 drop, as in the seed's notebook
    return torch.where(tokens != pad_id, 1.0, 0.0)[:, None, None]


@wrong("padding_mask", r"'mask on the query axis'", listed=True)
def padding_unsqueeze_last(tokens, pad_id):  # unsqueeze(-1) where -2 was meant
    return tokens.ne(pad_id).unsqueeze(-1).unsqueeze(1)


@wrong(
    "padding_mask",
    r"tokens != 1; expected tokens != pad_id, here tokens != 0",
    listed=False,
)
def padding_one_hard_coded(tokens, pad_id):  # the tokenizer of the learner's project
    return (tokens != 1)[:, None, None, :]


@wrong(
    "padding_mask",
    r"tokens > 1; expected tokens != pad_id, here tokens != 1",
    listed=False,
)
def padding_greater_than(tokens, pad_id):  # assumes the pad id is the smallest id
    return (tokens > pad_id)[:, None, None, :]


@wrong(
    "padding_mask", r"'padding located by position'.*first L positions", listed=False
)
def padding_by_lengths(tokens, pad_id):  # lengths, then a range: right-padding only
    lengths = (tokens != pad_id).sum(dim=1, keepdim=True)
    positions = torch.arange(tokens.size(1), device=tokens.device)
    return (positions[None, :] < lengths)[:, None, None, :]


@wrong("padding_mask", r"dtype torch\.int64 .*pattern is right", listed=False)
def padding_long(tokens, pad_id):  # .long() "to be safe"
    return (tokens != pad_id).long()[:, None, None, :]


@wrong(
    "padding_mask",
    r"dtype torch\.float32 with values -inf, 0.*additive.*pattern "
    r"is right",
    listed=False,
)
def padding_additive_inf(tokens, pad_id):  # additive: PyTorch's float convention
    zeros = torch.zeros(tokens.shape, device=tokens.device)
    return zeros.masked_fill(tokens == pad_id, float("-inf"))[:, None, None, :]


@wrong(
    "padding_mask",
    r"dtype torch\.float32 with values -1e\+09, 0.*pattern is right",
    listed=False,
)
def padding_additive_1e9(tokens, pad_id):  # (1 - mask) * -1e9, the Annotated way
    keep = (tokens != pad_id).float()
    return ((1 - keep) * -1e9)[:, None, None, :]


@wrong("padding_mask", r"dtype torch\.uint8", listed=False)
def padding_uint8(tokens, pad_id):  # byte masks, from an old tutorial
    return torch.ne(tokens, pad_id)[:, None, None, :].to(torch.uint8)


@wrong(
    "padding_mask",
    r"dtype torch\.int32 .*pattern is off too: it is True exactly "
    r"on the padding",
    listed=False,
)
def padding_int_inverted(tokens, pad_id):  # two mistakes: ints, and True on the pads
    return (tokens == pad_id).int()[:, None, None, :]


@wrong("padding_mask", r"dtype torch\.int64", listed=False)
def padding_clamp(tokens, pad_id):  # (tokens - pad_id) clamped to 0/1: ints, not bool
    return (tokens - pad_id).clamp(0, 1)[:, None, None, :]


@wrong(
    "padding_mask",
    r"shape \[2, 5, 1, 1\].*the sequence \(S=5\) lands on the heads "
    r"axis",
    listed=False,
)
def padding_trailing_axes(tokens, pad_id):  # singleton axes appended at the end
    return (tokens != pad_id)[:, :, None, None]


@wrong(
    "padding_mask",
    r"shape \[1, 2, 1, 5\].*the batch \(B=2\) lands on the heads "
    r"axis",
    listed=False,
)
def padding_leading_axis(tokens, pad_id):  # an extra axis in front of the batch
    return (tokens != pad_id)[None, :, None, :]


@wrong(
    "padding_mask",
    r"shape \[2, 1, 5, 5\].*the sequence \(S=5\) lands on the "
    r"queries and keys axis",
    listed=False,
)
def padding_pairwise(tokens, pad_id):  # pads hidden as queries too: [B, 1, S, S]
    keep = tokens != pad_id
    return keep[:, None, :, None] & keep[:, None, None, :]


@wrong(
    "padding_mask",
    r"shape \[1, 1, 5, 2\].*the batch \(B=2\) lands on the keys "
    r"axis",
    listed=False,
)
def padding_transposed(tokens, pad_id):  # .T on the [B, S] mask
    return (tokens != pad_id).T[None, None]


@wrong("padding_mask", r"shape \[2, 4, 1, 5\]", listed=False)
def padding_heads_hard_coded(tokens, pad_id):  # expanded to the lesson's 4 heads
    return (tokens != pad_id)[:, None, None, :].expand(-1, 4, -1, -1)


@wrong("padding_mask", r"returned shape \[2, 1, 1, 6\].*neither B nor S", listed=False)
def padding_batch_hard_coded(tokens, pad_id):  # view(2, ...) fits the first batch only
    return (tokens != pad_id).view(2, 1, 1, -1)


@wrong("padding_mask", r"'input modified in place'.*changed the tokens", listed=False)
def padding_overwrites_tokens(tokens, pad_id):  # rewrites pads to 0 to reuse x != 0
    tokens[tokens == pad_id] = 0
    return (tokens != 0)[:, None, None, :]


@wrong("padding_mask", r"'input modified in place'", listed=False)
def padding_masked_fill_underscore(tokens, pad_id):  # masked_fill_ on the caller's ids
    pads = tokens == pad_id
    tokens.masked_fill_(pads, -1)
    return (tokens != -1)[:, None, None, :]


@wrong(
    "padding_mask",
    r"'padding located by position'.*from the first real token on",
    listed=False,
)
def padding_ignore_index(tokens, pad_id):  # -100, cross-entropy's ignore_index
    return (tokens != -100)[:, None, None, :]


@wrong("padding_mask", r"'padding mask constant'.*False everywhere", listed=False)
def padding_masked_fill_discarded(tokens, pad_id):  # masked_fill taken for in place
    mask = torch.zeros(tokens.shape, dtype=torch.bool, device=tokens.device)
    mask.masked_fill(tokens != pad_id, True)
    return mask[:, None, None, :]


@wrong("padding_mask", r"every sequence gets the mask of sequence 0", listed=False)
def padding_first_row_only(tokens, pad_id):  # tokens[0] where tokens was meant
    keep = tokens[0] != pad_id
    return keep[None, None, None, :].expand(tokens.size(0), 1, 1, -1)


@wrong("padding_mask", r"raised TypeError.*at line \d+ of your code", listed=False)
def padding_unsqueeze_tuple(tokens, pad_id):  # unsqueeze takes one axis, not two
    return (tokens != pad_id).unsqueeze((1, 2))


@wrong(
    "padding_mask", r"'padding located by position'.*before the first pad", listed=False
)
def padding_until_first_pad(tokens, pad_id):  # True until the first pad: right padding
    m = (tokens == pad_id).long().cumsum(dim=-1) == 0
    return m[:, None, None, :]


@wrong(
    "padding_mask",
    r"'padding located by position'.*from the first real token on",
    listed=False,
)
def padding_after_leading_pads(tokens, pad_id):  # written for left-padded batches
    seen_real = torch.cumsum((tokens != pad_id).int(), dim=1) > 0
    return seen_real.unsqueeze(1).unsqueeze(1)


@wrong("padding_mask", r"must return a torch\.Tensor, got list", listed=False)
def padding_python_lists(tokens, pad_id):  # lists of lists, never made a tensor
    return [[[[t != pad_id for t in row.tolist()]]] for row in tokens]


@wrong("padding_mask", r"must return a torch\.Tensor, got tuple", listed=False)
def padding_with_lengths(tokens, pad_id):  # returns the lengths as well
    keep = tokens != pad_id
    return keep[:, None, None, :], keep.sum(-1)
