"""Chapter 5's measured bank for embed (the format: tests/bank/bank.py).

Each answer is literal learner code; a comment says what the mistake is and why a
learner would make it.
"""

import math

import torch
import torch.nn.functional as F

from bank import GENERIC, right, wrong  # noqa: F401
from exercise_cells import graders

GRADERS = graders("ch05_model", {"embed": "embed"})


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


@wrong(
    "embed",
    r"add of \[B, S, D\] and \[B, D\]; the second made by `\[:\d+\]` of \[P, D\]",
    listed=False,
)
def embed_positions_cut_by_len_of_batch(tokens, table, pe):
    n = len(tokens)  # len() of a [B, S] tensor is B, not the sequence length
    return table(tokens) * math.sqrt(pe.size(-1)) + pe[:n]
