"""Chapter 3's measured bank: causal_mask, padding_mask and masked_attention (see
bank.py). Each answer is graded by every check its exercise runs in the notebook, the
mask probes included: a mask answer with the reference attention and the reference
other mask, an attention answer with the reference masks."""

import math

import numpy as np
import torch
import torch.nn.functional as F

from bank import GENERIC, right, wrong  # noqa: F401
from exercise_cells import graders
from tformer_ref.attention import scaled_dot_product_attention
from tformer_ref.device import get_device
from tformer_ref.masks import causal_mask as reference_causal_mask
from tformer_ref.masks import padding_mask as reference_padding_mask

device = get_device()  # the notebook's setup cell defines it the same way


def _reference_causal(size):
    return reference_causal_mask(size, device=get_device())


GRADERS = graders(
    "ch03_masks",
    {
        "causal_mask": "causal_mask",
        "padding_mask": "padding_mask",
        "masked_attention": "masked_attention",
    },
    # The mask probes' cell takes all three: the reference stands in for the others.
    others={
        "masked_attention": scaled_dot_product_attention,
        "causal_mask": reference_causal_mask,
        "padding_mask": reference_padding_mask,
    },
)


# ========================================================================== causal_mask
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


# ========================================================================= padding_mask
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


# ===================================================================== masked_attention
# --------------------------------------------------------------------------- right ones


@right("masked_attention")
def masked_min_then_zero(q, k, v, mask):  # the reference's semantics
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = scores.softmax(-1).masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return weights @ v, weights


@right("masked_attention")
def masked_einsum_uniform(q, k, v, mask):  # fully masked rows left uniform
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / q.shape[-1] ** 0.5
    fill = torch.finfo(q.dtype).min
    weights = torch.softmax(scores.masked_fill(mask.logical_not(), fill), dim=-1)
    return torch.einsum("bhqk,bhkd->bhqd", weights, v), weights


@right("masked_attention")
def masked_where_minus_1e4(q, k, v, mask):  # -1e4 fits float16 and exp(-1e4) is 0
    scores = q @ k.mT / math.sqrt(q.size(-1))
    minus = torch.tensor(-1e4, dtype=scores.dtype, device=scores.device)
    weights = torch.where(mask, scores, minus).softmax(-1)
    return weights @ v, weights


@right("masked_attention")
def masked_inf_then_nan_to_num(q, k, v, mask):  # -inf, then the NaN rows repaired
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    weights = scores.masked_fill(~mask, float("-inf")).softmax(-1).nan_to_num(0.0)
    return weights @ v, weights


@right("masked_attention")
def masked_additive_bias(q, k, v, mask):  # an additive mask in the scores' own dtype
    bias = torch.zeros(mask.shape, dtype=q.dtype, device=q.device)
    bias = bias.masked_fill(~mask, torch.finfo(q.dtype).min)
    weights = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)) + bias).softmax(-1)
    return weights @ v, weights


@right("masked_attention")
def masked_float32_inside(q, k, v, mask):  # computed in float32, cast back at the end
    qf, kf, vf = q.float(), k.float(), v.float()
    scores = qf @ kf.transpose(-1, -2) * (1.0 / math.sqrt(q.size(-1)))
    weights = scores.masked_fill(~mask, -1e30).softmax(dim=-1)
    weights = weights * mask.any(dim=-1, keepdim=True)
    return (weights @ vf).to(q.dtype), weights.to(q.dtype)


@right("masked_attention")
def masked_softmax_by_hand(q, k, v, mask):  # exp, zero the masked, renormalise
    scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(k.size(-1))
    scores = scores - scores.max(dim=-1, keepdim=True).values
    e = scores.exp() * mask
    total = e.sum(dim=-1, keepdim=True)
    weights = e / total.clamp(min=torch.finfo(e.dtype).tiny)
    return torch.matmul(weights, v), weights


@right("masked_attention")
def masked_bmm_flat(q, k, v, mask):  # batch and heads flattened for bmm
    b, h, sq, dh = q.shape
    sk = k.size(2)
    keys = k.reshape(b * h, sk, dh).transpose(1, 2)
    scores = torch.bmm(q.reshape(b * h, sq, dh), keys)
    scores = scores / math.sqrt(dh)
    keep = mask.expand(b, h, sq, sk).reshape(b * h, sq, sk)
    scores = scores.masked_fill(~keep, torch.finfo(scores.dtype).min)
    weights = torch.where(
        keep.any(-1, keepdim=True), scores.softmax(-1), torch.zeros_like(scores)
    )
    out = torch.bmm(weights, v.reshape(b * h, sk, dh))
    return out.view(b, h, sq, dh), weights.view(b, h, sq, sk)


@right("masked_attention")
def masked_scale_q_first(q, k, v, mask):  # q scaled first (a new tensor, not in place)
    q = q / math.sqrt(q.shape[-1])
    scores = q @ k.transpose(-2, -1)
    scores = scores.masked_fill(mask == False, torch.finfo(q.dtype).min)  # noqa: E712
    weights = F.softmax(scores, dim=-1)
    return weights @ v, weights


@right("masked_attention")
def masked_additive_minus_1e4(q, k, v, mask):  # fully masked rows keep their softmax
    hidden = (~mask).to(q.dtype)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)) + hidden * -1e4
    weights = scores.softmax(-1)
    return weights @ v, weights


# --------------------------------------------------------------------------- wrong ones


def _scores(q, k):
    return q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))


@wrong(
    "masked_attention",
    r"'mask inverted'.*no weight on the keys the mask marks True",
    listed=False,
)
def masked_where_true_nan_repaired(q, k, v, mask):  # True read as "masked out"
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    scores = scores.masked_fill(mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights


@wrong("masked_attention", r"'mask applied after softmax'", listed=True)
def masked_after_softmax(q, k, v, mask):  # zeroes weights after normalising
    weights = _scores(q, k).softmax(-1) * mask
    return weights @ v, weights


@wrong("masked_attention", r"'mask inverted'", listed=True)
def masked_inverted(q, k, v, mask):  # treats True as "ignore"
    weights = torch.where(mask, torch.finfo(q.dtype).min, _scores(q, k)).softmax(-1)
    return weights @ v, weights


@wrong("masked_attention", r"'mask inverted'", listed=True)
def masked_inverted_minus_1e4(q, k, v, mask):  # masked_fill(mask == 1, ...): inverted
    weights = _scores(q, k).masked_fill(mask == 1, -1e4).softmax(-1)
    return weights @ v, weights


@wrong("masked_attention", r"'NaN on fully masked rows'", listed=True)
def masked_minus_inf(q, k, v, mask):  # fully masked rows become NaN
    weights = _scores(q, k).masked_fill(mask == 0, float("-inf")).softmax(-1)
    return weights @ v, weights


@wrong("masked_attention", r"'NaN on fully masked rows'", listed=True)
def masked_where_minus_inf(q, k, v, mask):  # the same -inf, through torch.where
    scores = _scores(q, k)
    weights = torch.where(mask, scores, float("-inf")).softmax(dim=-1)
    return weights @ v, weights


@wrong("masked_attention", r"'NaN on fully masked rows'", listed=True)
def masked_log_of_mask(q, k, v, mask):  # log(1) = 0, log(0) = -inf: an -inf fill
    weights = (_scores(q, k) + torch.log(mask.to(q.dtype))).softmax(-1)
    return weights @ v, weights


@wrong(
    "masked_attention",
    r"'masked with 0 instead of a large negative number'",
    listed=True,
)
def masked_fill_zero(q, k, v, mask):  # scores times the mask: masked ones 0
    weights = (_scores(q, k) * mask).softmax(-1)
    return weights @ v, weights


@wrong("masked_attention", r"'mask ignored'", listed=True)
def masked_ignores_mask(q, k, v, mask):  # the mask argument is never used
    weights = torch.einsum("bhqd,bhkd->bhqk", q, k).div(q.size(-1) ** 0.5).softmax(-1)
    return torch.einsum("bhqk,bhkd->bhqd", weights, v), weights


@wrong("masked_attention", r"'no scaling'", listed=True)
def masked_no_scaling(q, k, v, mask):  # chapter 2's bug, back again
    scores = torch.matmul(q, k.mT)
    weights = scores.masked_fill(mask.logical_not(), -1e4).softmax(dim=-1)
    return torch.matmul(weights, v), weights


@wrong(
    "masked_attention", r"'fill value that overflows in half precision'", listed=True
)
def masked_minus_1e9(q, k, v, mask):  # the seed: fine in float32, not in float16
    weights = _scores(q, k).masked_fill(mask == 0, -1e9).softmax(-1)
    return weights @ v, weights


@wrong(
    "masked_attention",
    r"divided by 8; expected √Dh = √8 = 2\.828 \(Dh, not √Dh\)",
    listed=False,
)
def masked_divide_by_dk(q, k, v, mask):  # d_k where √d_k was meant
    scores = q @ k.transpose(-2, -1) / q.size(-1)
    weights = scores.masked_fill(~mask, torch.finfo(scores.dtype).min).softmax(-1)
    return weights @ v, weights


@wrong(
    "masked_attention",
    r"divided by 4\.899; expected √Dh = √8 = 2\.828 "
    r"\(√\(H·Dh\) = √d_model",
    listed=False,
)
def masked_divide_by_sqrt_d_model(q, k, v, mask):  # √(H·Dh): the model width
    d_model = q.size(1) * q.size(-1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_model)
    weights = scores.masked_fill(~mask, torch.finfo(scores.dtype).min).softmax(-1)
    return weights @ v, weights


@wrong("masked_attention", r"divided by 0\.3536; expected √Dh", listed=False)
def masked_multiplies_by_sqrt(q, k, v, mask):  # * where / was meant
    scores = q @ k.transpose(-2, -1) * math.sqrt(q.size(-1))
    weights = scores.masked_fill(~mask, -1e4).softmax(-1)
    return weights @ v, weights


@wrong(
    "masked_attention",
    r"'masked keys keep some weight'.*scores are all -10 ",
    listed=False,
)
def masked_fill_minus_ten(q, k, v, mask):  # "-10 is small enough after softmax"
    weights = _scores(q, k).masked_fill(~mask, -10.0).softmax(-1)
    return weights @ v, weights


@wrong(
    "masked_attention", r"'masked keys keep some weight'.*shifted by -1 ", listed=False
)
def masked_adds_bool_mask(q, k, v, mask):  # adds the bool mask, as a float one is
    weights = (_scores(q, k) + mask).softmax(-1)
    return weights @ v, weights


@wrong(
    "masked_attention", r"'masked keys keep some weight'.*shifted by -5 ", listed=False
)
def masked_small_additive(q, k, v, mask):  # an additive mask with a timid constant
    weights = (_scores(q, k) - 5.0 * (~mask)).softmax(-1)
    return weights @ v, weights


@wrong(
    "masked_attention",
    r"'masked keys keep some weight'.*scores are all -?\d",
    listed=False,
)
def masked_fill_with_min_score(q, k, v, mask):  # "the lowest score there is"
    scores = _scores(q, k)
    weights = scores.masked_fill(~mask, scores.min().item()).softmax(-1)
    return weights @ v, weights


@wrong("masked_attention", r"sum to 1 over axis 2 \(queries\)", listed=False)
def masked_softmax_queries(q, k, v, mask):  # dim=-2, the seed's other axis
    scores = _scores(q, k).masked_fill(~mask, torch.finfo(q.dtype).min)
    weights = scores.softmax(dim=-2)
    return weights @ v, weights


@wrong("masked_attention", r"sum to 1 over axis 1 \(heads\)", listed=False)
def masked_softmax_heads(q, k, v, mask):  # dim=1 "the attention dimension"
    scores = _scores(q, k).masked_fill(~mask, torch.finfo(q.dtype).min)
    weights = F.softmax(scores, dim=1)
    return weights @ v, weights


@wrong(
    "masked_attention",
    r"'weights not renormalised after masking'.*sum to",
    listed=False,
)
def masked_unscaled_after_softmax(q, k, v, mask):  # two slips: no √Dh, mask after
    weights = (q @ k.mT).softmax(-1).masked_fill(~mask, 0.0)
    return weights @ v, weights


@wrong("masked_attention", r"'NaN on fully masked rows'", listed=True)
def masked_exp_divide(q, k, v, mask):  # softmax by hand: 0 / 0 on a fully masked row
    e = (_scores(q, k) - _scores(q, k).amax(-1, keepdim=True)).exp() * mask
    weights = e / e.sum(-1, keepdim=True)
    return weights @ v, weights


@wrong("masked_attention", r"'NaN where a query has keys to attend'", listed=False)
def masked_times_minus_inf(q, k, v, mask):  # 0 * -inf = NaN on every kept key
    weights = (_scores(q, k) + (~mask) * float("-inf")).softmax(-1)
    return weights @ v, weights


@wrong(
    "masked_attention",
    r"raised RuntimeError.*at line \d+ of your code: "
    r"`weights = _scores\(q, k\)\.masked_fill\(~mask\.transpose",
    listed=False,
)
def masked_transposed_mask(q, k, v, mask):  # "masking the queries" by a transpose
    weights = _scores(q, k).masked_fill(~mask.transpose(-2, -1), -1e4).softmax(-1)
    return weights @ v, weights


@wrong(
    "masked_attention",
    r"raised RuntimeError.*at line \d+ of your code: "
    r"`weights = _scores\(q, k\)\.masked_fill\(~keep.*"
    r"mask \[2, 1, 1, 6\]",
    listed=False,
)
def masked_squeezed_mask(q, k, v, mask):  # squeeze() "to get rid of the extra axes"
    keep = mask.squeeze()
    weights = _scores(q, k).masked_fill(~keep, -1e4).softmax(-1)
    return weights @ v, weights


@wrong("masked_attention", r"you return \(weights, out\)", listed=False)
def masked_pair_swapped(q, k, v, mask):  # the pair the wrong way round
    weights = _scores(q, k).masked_fill(~mask, -1e4).softmax(-1)
    return weights, weights @ v


@wrong(
    "masked_attention",
    r"must return the pair \(out, weights\).*returned Tensor",
    listed=False,
)
def masked_output_only(q, k, v, mask):  # forgot the weights
    weights = _scores(q, k).masked_fill(~mask, -1e4).softmax(-1)
    return weights @ v


@wrong(
    "masked_attention", r"'input modified in place'.*changed its input q", listed=False
)
def masked_scales_q_in_place(q, k, v, mask):  # q /= √Dh changes the caller's q
    q /= math.sqrt(q.size(-1))
    weights = (q @ k.transpose(-2, -1)).masked_fill(~mask, -1e4).softmax(-1)
    return weights @ v, weights


@wrong(
    "masked_attention",
    r"'input modified in place'.*changed its input mask",
    listed=False,
)
def masked_flips_mask_in_place(q, k, v, mask):  # logical_not_ on the caller's mask
    hidden = mask.logical_not_()
    weights = _scores(q, k).masked_fill(hidden, -1e4).softmax(-1)
    return weights @ v, weights


@wrong("masked_attention", r"output is the weights before masking @ v", listed=False)
def masked_output_before_mask(q, k, v, mask):  # out taken before the mask was applied
    scores = _scores(q, k)
    out = scores.softmax(-1) @ v
    weights = scores.masked_fill(~mask, -1e4).softmax(-1)
    return out, weights


@wrong("masked_attention", r"weights @ k instead of weights @ v", listed=False)
def masked_output_from_keys(q, k, v, mask):  # k where v was meant
    weights = _scores(q, k).masked_fill(~mask, -1e4).softmax(-1)
    return weights @ k, weights


@wrong(
    "masked_attention",
    r"'fully masked queries neither zero nor a distribution'.*"
    r"sum 5",
    listed=False,
)
def masked_nan_rows_to_one(q, k, v, mask):  # repaired the NaN rows with 1 instead of 0
    weights = _scores(q, k).masked_fill(~mask, float("-inf")).softmax(-1)
    weights = weights.nan_to_num(nan=1.0)
    return weights @ v, weights


@wrong(
    "masked_attention",
    r"'float32 mixed into half precision'.*expected scalar type "
    r"Float but found Half",
    listed=False,
)
def masked_float_bias(q, k, v, mask):  # mask.float() promotes float16 scores
    bias = (1.0 - mask.float()) * -1e4
    weights = (_scores(q, k) + bias).softmax(-1)
    return weights @ v, weights


@wrong(
    "masked_attention",
    r"'fill value that overflows in half precision'.*below "
    r"-1e\+38",
    listed=False,
)
def masked_float32_min_hard_coded(q, k, v, mask):  # float32's minimum for every dtype
    fill = torch.finfo(torch.float32).min
    weights = _scores(q, k).masked_fill(~mask, fill).softmax(-1)
    return weights @ v, weights


@wrong(
    "masked_attention",
    r"'fill value that overflows in half precision'.*fill value "
    r"is -1e\+05",
    listed=False,
)
def masked_minus_1e5(q, k, v, mask):  # just past float16's range
    weights = _scores(q, k).masked_fill(~mask, -1e5).softmax(-1)
    return weights @ v, weights


@wrong(
    "masked_attention",
    r"'fill value that overflows in half precision'.*fill value "
    r"is -1e\+09",
    listed=False,
)
def masked_where_tensor_1e9(q, k, v, mask):  # torch.where turns -1e9 into -inf in fp16
    scores = _scores(q, k)
    weights = torch.where(mask, scores, torch.tensor(-1e9)).softmax(-1)
    return weights @ v, weights


@wrong("masked_attention", GENERIC, listed=False)
def masked_softmax_twice(q, k, v, mask):  # softmax "again, to be sure it sums to 1"
    weights = _scores(q, k).masked_fill(~mask, -1e4).softmax(-1).softmax(-1)
    return weights @ v, weights


@wrong(
    "masked_attention",
    r"'allowed keys zeroed'.*exactly 0 at \d+ of the \d+ "
    r"allowed",
    listed=False,
)
def masked_dropout_left_on(q, k, v, mask):  # F.dropout trains by default
    weights = _scores(q, k).masked_fill(~mask, -1e4).softmax(-1)
    weights = F.dropout(weights, p=0.1)
    return weights @ v, weights


@wrong(
    "masked_attention",
    r"sum to 1 over axis 0 \(batch\), 1 \(heads\), "
    r"2 \(queries\), 3 \(keys\)",
    listed=False,
)
def masked_normalised_globally(q, k, v, mask):  # exp / sum of everything
    e = _scores(q, k).masked_fill(~mask, -1e4).exp()
    weights = e / e.sum()
    return weights @ v, weights


@wrong(
    "masked_attention",
    r"your output have shape \[2, 4, 3, 8\], expected \[2, 3, 4, 8\].*"
    r"yours is \[B, Sq, H, Dh\] where \[B, H, Sq, Dh\] is expected",
    listed=False,
)
def masked_output_heads_merged_early(q, k, v, mask):  # chapter 4's transpose, too early
    weights = _scores(q, k).masked_fill(~mask, -1e4).softmax(-1)
    return (weights @ v).transpose(1, 2), weights


@wrong("masked_attention", r"follow head 0's mask for every head", listed=False)
def masked_first_head_mask(q, k, v, mask):  # "the mask is the same for every head"
    keep = mask[:, :1]
    weights = _scores(q, k).masked_fill(~keep, -1e4).softmax(-1)
    return weights @ v, weights


@wrong("masked_attention", r"'NaN or inf in half precision only'", listed=False)
def masked_epsilon_in_half(q, k, v, mask):  # 1e-9 is 0 in float16: 0 / 0 on empty rows
    e = _scores(q, k).softmax(-1) * mask
    weights = e / (e.sum(-1, keepdim=True) + 1e-9)
    return weights @ v, weights


@wrong("masked_attention", r"divided by 2\.449; expected √Dh = √8", listed=False)
def masked_divide_by_sqrt_keys(q, k, v, mask):  # √Sk, the number of keys
    scores = q @ k.transpose(-2, -1) / math.sqrt(k.size(-2))
    weights = scores.masked_fill(~mask, torch.finfo(scores.dtype).min).softmax(-1)
    return weights @ v, weights


@wrong(
    "masked_attention",
    r"'whole rows of weights zeroed'.*every key visible",
    listed=False,
)
def masked_all_instead_of_not_any(q, k, v, mask):  # mask.all where ~mask.any belongs
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    s = s.masked_fill(~mask, torch.finfo(s.dtype).min)
    w = s.softmax(-1)
    w = w.masked_fill(mask.all(dim=-1, keepdim=True), 0.0)
    return w @ v, w


@wrong(
    "masked_attention",
    r"'whole rows of weights zeroed'.*only some keys visible",
    listed=False,
)
def masked_zero_rows_with_any_hidden(q, k, v, mask):  # "a row with padding is unsafe"
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / q.shape[-1] ** 0.5
    weights = torch.softmax(scores.masked_fill(~mask, -1e4), dim=-1)
    has_hidden = (~mask).any(dim=-1, keepdim=True)
    weights = torch.where(has_hidden, torch.zeros_like(weights), weights)
    return torch.einsum("bhqk,bhkd->bhqd", weights, v), weights
