"""The measured bank of the attention bug hunt (notebook ch03_bughunt): the seed's
SelfAttention, fixed (the format: tests/bank/bank.py).

Each answer is the whole class as a learner leaves it in the answer cell: the seed's
code with its four bugs (the einsum, the shared Linear(head_dim, head_dim), the scale by
√embed_size, the fill float("-1e20")) fixed, half fixed, or fixed with a new mistake. A
wrong one says in a comment what the mistake is.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from bank import GENERIC, right, wrong  # noqa: F401
from exercise_cells import graders

GRADERS = graders("ch03_bughunt", {"self_attention": "SelfAttention"})


# =============================================================================== right


@right("self_attention")
class FixedEinsumRelabelled(
    nn.Module
):  # the four fixes, einsum letters as the axes are
    def __init__(self, embed_size, heads):
        super().__init__()
        self.embed_size = embed_size
        self.heads = heads
        self.head_dim = embed_size // heads
        assert self.head_dim * heads == embed_size, (
            "Embed size needs to be div by heads"
        )
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(heads * self.head_dim, embed_size)

    def forward(self, values, keys, query, mask):
        N = query.shape[0]
        value_len, key_len, query_len = values.shape[1], keys.shape[1], query.shape[1]
        values = self.values(values).reshape(N, value_len, self.heads, self.head_dim)
        keys = self.keys(keys).reshape(N, key_len, self.heads, self.head_dim)
        query = self.queries(query).reshape(N, query_len, self.heads, self.head_dim)
        energy = torch.einsum("nqhd,nkhd->nhqk", [query, keys])
        energy = energy / (self.head_dim ** (1 / 2))
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("nhql,nlhd->nqhd", [attention, values])
        out = out.reshape(N, query_len, self.heads * self.head_dim)
        return self.fc_out(out)


@right("self_attention")
class FixedTransposeMatmul(nn.Module):  # heads moved first, then matmul as in chapter 1
    def __init__(self, embed_size, heads):
        super().__init__()
        self.embed_size = embed_size
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size)
        self.keys = nn.Linear(embed_size, embed_size)
        self.queries = nn.Linear(embed_size, embed_size)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        N = query.shape[0]
        q = self.queries(query).view(N, -1, self.heads, self.head_dim).transpose(1, 2)
        k = self.keys(keys).view(N, -1, self.heads, self.head_dim).transpose(1, 2)
        v = self.values(values).view(N, -1, self.heads, self.head_dim).transpose(1, 2)
        energy = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = energy.softmax(dim=-1)
        out = (attention @ v).transpose(1, 2).contiguous()
        return self.fc_out(out.view(N, -1, self.embed_size))


@right("self_attention")
class FixedFusedLinearSplitInThree(nn.Module):  # one Linear(E, 3E), its thirds applied
    def __init__(self, embed_size, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = embed_size // heads
        self.qkv = nn.Linear(embed_size, 3 * embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        N, H, D = query.shape[0], self.heads, self.head_dim
        w_q, w_k, w_v = self.qkv.weight.chunk(3, dim=0)
        q = F.linear(query, w_q).reshape(N, -1, H, D).permute(0, 2, 1, 3)
        k = F.linear(keys, w_k).reshape(N, -1, H, D).permute(0, 2, 1, 3)
        v = F.linear(values, w_v).reshape(N, -1, H, D).permute(0, 2, 1, 3)
        energy = torch.matmul(q, k.permute(0, 1, 3, 2)) / D**0.5
        if mask is not None:
            energy = energy.masked_fill(~mask.bool(), torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=-1)
        out = torch.matmul(attention, v).permute(0, 2, 1, 3).reshape(N, -1, H * D)
        return self.fc_out(out)


@right("self_attention")
class FixedWithSDPA(nn.Module):  # PyTorch's fused attention, the keep-mask as attn_mask
    def __init__(self, embed_size, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        N = query.shape[0]

        def split(x):
            return x.view(N, -1, self.heads, self.head_dim).transpose(1, 2)

        q, k, v = (
            split(self.queries(query)),
            split(self.keys(keys)),
            split(self.values(values)),
        )
        attn_mask = None if mask is None else mask.bool()
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        return self.fc_out(
            out.transpose(1, 2).reshape(N, -1, self.heads * self.head_dim)
        )


@right("self_attention")
class FixedPerHeadLinears(nn.Module):  # each head its own Linear(E, head_dim)
    def __init__(self, embed_size, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = embed_size // heads
        self.q_heads = nn.ModuleList(
            nn.Linear(embed_size, self.head_dim, bias=False) for _ in range(heads)
        )
        self.k_heads = nn.ModuleList(
            nn.Linear(embed_size, self.head_dim, bias=False) for _ in range(heads)
        )
        self.v_heads = nn.ModuleList(
            nn.Linear(embed_size, self.head_dim, bias=False) for _ in range(heads)
        )
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        outs = []
        for h in range(self.heads):
            q = self.q_heads[h](query)
            k = self.k_heads[h](keys)
            v = self.v_heads[h](values)
            energy = q @ k.transpose(1, 2) / math.sqrt(self.head_dim)
            if mask is not None:
                m = mask[:, 0] if mask.dim() == 4 else mask
                energy = energy.masked_fill(m == 0, torch.finfo(energy.dtype).min)
            outs.append(torch.softmax(energy, dim=-1) @ v)
        return self.fc_out(torch.cat(outs, dim=-1))


@right("self_attention")
class FixedQueryPrescaledHeadsFirstEinsum(
    nn.Module
):  # seed's einsum kept, on [N, H, L, D]
    def __init__(self, embed_size, heads):
        super().__init__()
        self.embed_size = embed_size
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(heads * self.head_dim, embed_size)

    def forward(self, values, keys, query, mask):
        N = query.shape[0]
        value_len, key_len, query_len = values.shape[1], keys.shape[1], query.shape[1]
        values = self.values(values).reshape(N, value_len, self.heads, self.head_dim)
        keys = self.keys(keys).reshape(N, key_len, self.heads, self.head_dim)
        query = self.queries(query).reshape(N, query_len, self.heads, self.head_dim)
        values, keys, query = (t.permute(0, 2, 1, 3) for t in (values, keys, query))
        query = query * self.head_dim**-0.5  # scale the queries, not the scores
        energy = torch.einsum("bhqd, bhkd -> bhqk", [query, keys])
        if mask is not None:
            energy = energy.masked_fill(mask == 0, -65504.0)  # float16's lowest
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("bhql, bhlv -> bhqv", [attention, values])
        out = out.permute(0, 2, 1, 3).reshape(N, query_len, self.heads * self.head_dim)
        return self.fc_out(out)


@right("self_attention")
class FixedBmmFlattenedHeads(nn.Module):  # [N*H, L, D] and torch.bmm, baddbmm-free
    def __init__(self, embed_size, heads):
        super().__init__()
        self.h = heads
        self.d = embed_size // heads
        self.w_q = nn.Linear(embed_size, embed_size)
        self.w_k = nn.Linear(embed_size, embed_size)
        self.w_v = nn.Linear(embed_size, embed_size)
        self.w_o = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        N, Lq, E = query.shape
        Lk = keys.shape[1]
        q = self.w_q(query).view(N, Lq, self.h, self.d).transpose(1, 2)
        k = self.w_k(keys).view(N, Lk, self.h, self.d).transpose(1, 2)
        v = self.w_v(values).view(N, Lk, self.h, self.d).transpose(1, 2)
        q, k, v = (t.reshape(N * self.h, -1, self.d) for t in (q, k, v))
        scores = torch.bmm(q, k.transpose(1, 2)) * (1.0 / math.sqrt(self.d))
        scores = scores.view(N, self.h, Lq, Lk)
        if mask is not None:
            scores = torch.where(mask.bool(), scores, torch.finfo(scores.dtype).min)
        weights = F.softmax(scores, dim=-1).view(N * self.h, Lq, Lk)
        out = torch.bmm(weights, v).view(N, self.h, Lq, self.d)
        return self.w_o(out.transpose(1, 2).reshape(N, Lq, E))


@right("self_attention")
class FixedFillMinusTenThousand(nn.Module):  # -1e4: finite in float16, exp() of it is 0
    def __init__(self, embed_size, heads):
        super().__init__()
        self.embed_size = embed_size
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(heads * self.head_dim, embed_size)

    def forward(self, values, keys, query, mask):
        N, query_len = query.shape[0], query.shape[1]
        values = self.values(values).unflatten(-1, (self.heads, self.head_dim))
        keys = self.keys(keys).unflatten(-1, (self.heads, self.head_dim))
        query = self.queries(query).unflatten(-1, (self.heads, self.head_dim))
        energy = torch.einsum("bqhd,bkhd->bhqk", query, keys) / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, -1e4)
        attention = torch.softmax(energy, dim=-1)
        out = torch.einsum("bhqk,bkhd->bqhd", attention, values)
        return self.fc_out(out.flatten(2))


@right("self_attention")
class FixedAdditiveMaskInScoreDtype(
    nn.Module
):  # BERT's additive mask, in energy's dtype
    def __init__(self, embed_size, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        N, Lq, E = query.shape
        q = self.queries(query).view(N, Lq, self.heads, self.head_dim)
        k = self.keys(keys).view(N, -1, self.heads, self.head_dim)
        v = self.values(values).view(N, -1, self.heads, self.head_dim)
        energy = torch.einsum("nqhd,nkhd->nhqk", q, k) * self.head_dim**-0.5
        if mask is not None:
            energy = energy + (1 - mask.to(energy.dtype)) * -10000.0
        attention = torch.softmax(energy, dim=-1)
        out = torch.einsum("nhqk,nkhd->nqhd", attention, v).reshape(N, Lq, E)
        return self.fc_out(out)


@right("self_attention")
class FixedInfFillThenNanToNum(
    nn.Module
):  # -inf fill, the fully masked rows' NaN zeroed
    def __init__(self, embed_size, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        N, Lq, E = query.shape
        q = self.queries(query).view(N, Lq, self.heads, -1).transpose(1, 2)
        k = self.keys(keys).view(N, keys.shape[1], self.heads, -1).transpose(1, 2)
        v = self.values(values).view(N, values.shape[1], self.heads, -1).transpose(1, 2)
        energy = q @ k.mT / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, float("-inf"))
        attention = torch.softmax(energy, dim=-1).nan_to_num(0.0)
        out = (attention @ v).transpose(1, 2).reshape(N, Lq, E)
        return self.fc_out(out)


# ============================================================ wrong: a seed bug left in


@wrong("self_attention", r"bug 1 still present: the einsum attends across", listed=True)
class SeedUntouched(nn.Module):  # the seed's code as given: all four bugs still there
    def __init__(self, embed_size, heads):
        super().__init__()
        self.embed_size = embed_size
        self.heads = heads
        self.head_dim = embed_size // heads
        assert self.head_dim * heads == embed_size, (
            "Embed size needs to be div by heads"
        )
        self.values = nn.Linear(self.head_dim, self.head_dim, bias=False)
        self.keys = nn.Linear(self.head_dim, self.head_dim, bias=False)
        self.queries = nn.Linear(self.head_dim, self.head_dim, bias=False)
        self.fc_out = nn.Linear(heads * self.head_dim, embed_size)

    def forward(self, values, keys, query, mask):
        N = query.shape[0]
        value_len, key_len, query_len = values.shape[1], keys.shape[1], query.shape[1]
        values = values.reshape(N, value_len, self.heads, self.head_dim)
        keys = keys.reshape(N, key_len, self.heads, self.head_dim)
        query = query.reshape(N, query_len, self.heads, self.head_dim)
        values = self.values(values)
        keys = self.keys(keys)
        query = self.queries(query)
        energy = torch.einsum("bhqd, bhkd -> bhqk", [query, keys])
        energy = energy / (self.embed_size ** (1 / 2))
        if mask is not None:
            energy = energy.masked_fill(mask == 0, float("-1e20"))
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("bhql, bhlv -> bhqv", [attention, values])
        out = out.reshape(N, query_len, self.heads * self.head_dim)
        return self.fc_out(out)


@wrong("self_attention", r"bug 1 still present: the einsum attends across", listed=True)
class OnlyEinsumLeft(nn.Module):  # bugs 2, 3, 4 fixed; the seed's einsum strings kept
    def __init__(self, embed_size, heads):
        super().__init__()
        self.embed_size = embed_size
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(heads * self.head_dim, embed_size)

    def forward(self, values, keys, query, mask):
        N = query.shape[0]
        value_len, key_len, query_len = values.shape[1], keys.shape[1], query.shape[1]
        values = self.values(values).reshape(N, value_len, self.heads, self.head_dim)
        keys = self.keys(keys).reshape(N, key_len, self.heads, self.head_dim)
        query = self.queries(query).reshape(N, query_len, self.heads, self.head_dim)
        energy = torch.einsum("bhqd, bhkd -> bhqk", [query, keys])
        energy = energy / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("bhql, bhlv -> bhqv", [attention, values])
        out = out.reshape(N, query_len, self.heads * self.head_dim)
        return self.fc_out(out)


@wrong("self_attention", r"bug 2 still present: one Linear\(head_dim", listed=True)
class OnlySharedLinearLeft(nn.Module):  # bugs 1, 3, 4 fixed; Linear(Dh, Dh) after split
    def __init__(self, embed_size, heads):
        super().__init__()
        self.embed_size = embed_size
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(self.head_dim, self.head_dim, bias=False)
        self.keys = nn.Linear(self.head_dim, self.head_dim, bias=False)
        self.queries = nn.Linear(self.head_dim, self.head_dim, bias=False)
        self.fc_out = nn.Linear(heads * self.head_dim, embed_size)

    def forward(self, values, keys, query, mask):
        N = query.shape[0]
        value_len, key_len, query_len = values.shape[1], keys.shape[1], query.shape[1]
        values = self.values(values.reshape(N, value_len, self.heads, self.head_dim))
        keys = self.keys(keys.reshape(N, key_len, self.heads, self.head_dim))
        query = self.queries(query.reshape(N, query_len, self.heads, self.head_dim))
        energy = torch.einsum("nqhd,nkhd->nhqk", [query, keys])
        energy = energy / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("nhqk,nkhd->nqhd", [attention, values])
        out = out.reshape(N, query_len, self.heads * self.head_dim)
        return self.fc_out(out)


@wrong("self_attention", r"bug 3 still present.*that is √d_model", listed=True)
class OnlyScaleLeft(nn.Module):  # bugs 1, 2, 4 fixed; still / embed_size ** (1/2)
    def __init__(self, embed_size, heads):
        super().__init__()
        self.embed_size = embed_size
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(heads * self.head_dim, embed_size)

    def forward(self, values, keys, query, mask):
        N = query.shape[0]
        value_len, key_len, query_len = values.shape[1], keys.shape[1], query.shape[1]
        values = self.values(values).reshape(N, value_len, self.heads, self.head_dim)
        keys = self.keys(keys).reshape(N, key_len, self.heads, self.head_dim)
        query = self.queries(query).reshape(N, query_len, self.heads, self.head_dim)
        energy = torch.einsum("nqhd,nkhd->nhqk", [query, keys])
        energy = energy / (self.embed_size ** (1 / 2))
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("nhqk,nkhd->nqhd", [attention, values])
        out = out.reshape(N, query_len, self.heads * self.head_dim)
        return self.fc_out(out)


@wrong(
    "self_attention", r"bug 4 still present: a fill value that overflows", listed=True
)
class OnlyFillLeft(nn.Module):  # bugs 1, 2, 3 fixed; float("-1e20") kept
    def __init__(self, embed_size, heads):
        super().__init__()
        self.embed_size = embed_size
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(heads * self.head_dim, embed_size)

    def forward(self, values, keys, query, mask):
        N = query.shape[0]
        value_len, key_len, query_len = values.shape[1], keys.shape[1], query.shape[1]
        values = self.values(values).reshape(N, value_len, self.heads, self.head_dim)
        keys = self.keys(keys).reshape(N, key_len, self.heads, self.head_dim)
        query = self.queries(query).reshape(N, query_len, self.heads, self.head_dim)
        energy = torch.einsum("nqhd,nkhd->nhqk", [query, keys])
        energy = energy / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, float("-1e20"))
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("nhqk,nkhd->nqhd", [attention, values])
        out = out.reshape(N, query_len, self.heads * self.head_dim)
        return self.fc_out(out)


# ====================================================== wrong: the fill and the mask


@wrong("self_attention", r"a fill value that overflows float16", listed=False)
class FillMinusOneE9(nn.Module):  # -1e9, "big but not as silly as -1e20": overflows too
    def __init__(self, embed_size, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        N, Lq, E = query.shape
        q = self.queries(query).view(N, Lq, self.heads, self.head_dim).transpose(1, 2)
        k = self.keys(keys).view(N, -1, self.heads, self.head_dim).transpose(1, 2)
        v = self.values(values).view(N, -1, self.heads, self.head_dim).transpose(1, 2)
        energy = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, -1e9)
        attention = torch.softmax(energy, dim=-1)
        return self.fc_out((attention @ v).transpose(1, 2).reshape(N, Lq, E))


@wrong("self_attention", r"a fill value that overflows float16", listed=False)
class FillFloat32Min(nn.Module):  # hard-codes float32's lowest, not the scores' dtype's
    def __init__(self, embed_size, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        N, Lq, E = query.shape
        q = self.queries(query).view(N, Lq, self.heads, self.head_dim).transpose(1, 2)
        k = self.keys(keys).view(N, -1, self.heads, self.head_dim).transpose(1, 2)
        v = self.values(values).view(N, -1, self.heads, self.head_dim).transpose(1, 2)
        energy = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(torch.float32).min)
        attention = torch.softmax(energy, dim=-1)
        return self.fc_out((attention @ v).transpose(1, 2).reshape(N, Lq, E))


@wrong("self_attention", r"NaN for a fully masked row", listed=False)
class FillMinusInf(nn.Module):  # -inf "is exact": a fully masked row becomes 0/0
    def __init__(self, embed_size, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        N, Lq, E = query.shape
        q = self.queries(query).view(N, Lq, self.heads, self.head_dim).transpose(1, 2)
        k = self.keys(keys).view(N, -1, self.heads, self.head_dim).transpose(1, 2)
        v = self.values(values).view(N, -1, self.heads, self.head_dim).transpose(1, 2)
        energy = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, float("-inf"))
        attention = torch.softmax(energy, dim=-1)
        return self.fc_out((attention @ v).transpose(1, 2).reshape(N, Lq, E))


@wrong("self_attention", r"masked keys keep some weight", listed=False)
class FillZero(nn.Module):  # "masking means zeroing": a score of 0 still gets weight
    def __init__(self, embed_size, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        N, Lq, E = query.shape
        q = self.queries(query).view(N, Lq, self.heads, self.head_dim).transpose(1, 2)
        k = self.keys(keys).view(N, -1, self.heads, self.head_dim).transpose(1, 2)
        v = self.values(values).view(N, -1, self.heads, self.head_dim).transpose(1, 2)
        energy = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, 0.0)
        attention = torch.softmax(energy, dim=-1)
        return self.fc_out((attention @ v).transpose(1, 2).reshape(N, Lq, E))


@wrong("self_attention", r"masked keys keep some weight", listed=False)
class FillMinusOne(nn.Module):  # a "small safe" fill of -1: masked keys keep weight
    def __init__(self, embed_size, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        N, Lq, E = query.shape
        q = self.queries(query).view(N, Lq, self.heads, self.head_dim).transpose(1, 2)
        k = self.keys(keys).view(N, -1, self.heads, self.head_dim).transpose(1, 2)
        v = self.values(values).view(N, -1, self.heads, self.head_dim).transpose(1, 2)
        energy = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, -1.0)
        attention = torch.softmax(energy, dim=-1)
        return self.fc_out((attention @ v).transpose(1, 2).reshape(N, Lq, E))


@wrong("self_attention", r"inverted.*ignores those it marks 1", listed=False)
class MaskConventionInverted(nn.Module):  # nn.MultiheadAttention's True = masked, here
    def __init__(self, embed_size, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        N, Lq, E = query.shape
        q = self.queries(query).view(N, Lq, self.heads, self.head_dim).transpose(1, 2)
        k = self.keys(keys).view(N, -1, self.heads, self.head_dim).transpose(1, 2)
        v = self.values(values).view(N, -1, self.heads, self.head_dim).transpose(1, 2)
        energy = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(mask.bool(), torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=-1)
        return self.fc_out((attention @ v).transpose(1, 2).reshape(N, Lq, E))


@wrong("self_attention", r"masked keys keep some weight", listed=False)
class MaskedFillNotAssigned(
    nn.Module
):  # masked_fill's result thrown away (not in place)
    def __init__(self, embed_size, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        N, Lq, E = query.shape
        q = self.queries(query).view(N, Lq, self.heads, self.head_dim).transpose(1, 2)
        k = self.keys(keys).view(N, -1, self.heads, self.head_dim).transpose(1, 2)
        v = self.values(values).view(N, -1, self.heads, self.head_dim).transpose(1, 2)
        energy = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        if mask is not None:
            energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=-1)
        return self.fc_out((attention @ v).transpose(1, 2).reshape(N, Lq, E))


@wrong("self_attention", r"masked keys keep some weight", listed=False)
class MaskAfterSoftmaxNoRenorm(nn.Module):  # zeroes the weights after softmax, sum < 1
    def __init__(self, embed_size, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        N, Lq, E = query.shape
        q = self.queries(query).view(N, Lq, self.heads, self.head_dim).transpose(1, 2)
        k = self.keys(keys).view(N, -1, self.heads, self.head_dim).transpose(1, 2)
        v = self.values(values).view(N, -1, self.heads, self.head_dim).transpose(1, 2)
        energy = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        attention = torch.softmax(energy, dim=-1)
        if mask is not None:
            attention = attention.masked_fill(mask == 0, 0.0)
        return self.fc_out((attention @ v).transpose(1, 2).reshape(N, Lq, E))


@wrong("self_attention", r"NaN for a fully masked row", listed=False)
class MaskAfterSoftmaxRenormalised(
    nn.Module
):  # zero then renormalise: 0/0 when all masked
    def __init__(self, embed_size, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        N, Lq, E = query.shape
        q = self.queries(query).view(N, Lq, self.heads, self.head_dim).transpose(1, 2)
        k = self.keys(keys).view(N, -1, self.heads, self.head_dim).transpose(1, 2)
        v = self.values(values).view(N, -1, self.heads, self.head_dim).transpose(1, 2)
        energy = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        attention = torch.softmax(energy, dim=-1)
        if mask is not None:
            attention = attention * mask
            attention = attention / attention.sum(dim=-1, keepdim=True)
        return self.fc_out((attention @ v).transpose(1, 2).reshape(N, Lq, E))


@wrong("self_attention", r"forward fails in float16", listed=False)
class AdditiveMaskInFloat32(nn.Module):  # mask.float(): the scores leave float16
    def __init__(self, embed_size, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        N, Lq, E = query.shape
        q = self.queries(query).view(N, Lq, self.heads, self.head_dim).transpose(1, 2)
        k = self.keys(keys).view(N, -1, self.heads, self.head_dim).transpose(1, 2)
        v = self.values(values).view(N, -1, self.heads, self.head_dim).transpose(1, 2)
        energy = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy + (1.0 - mask.float()) * -10000.0
        attention = torch.softmax(energy, dim=-1)
        return self.fc_out((attention @ v).transpose(1, 2).reshape(N, Lq, E))


# ============================================================ wrong: the scale


@wrong("self_attention", r"that is d_head;", listed=False)
class ScaleByHeadDimNoSqrt(nn.Module):  # divides by head_dim, the square root forgotten
    def __init__(self, embed_size, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        N, Lq, E = query.shape
        q = self.queries(query).view(N, Lq, self.heads, self.head_dim)
        k = self.keys(keys).view(N, -1, self.heads, self.head_dim)
        v = self.values(values).view(N, -1, self.heads, self.head_dim)
        energy = torch.einsum("nqhd,nkhd->nhqk", q, k) / self.head_dim
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("nhqk,nkhd->nqhd", attention, v).reshape(N, Lq, E)
        return self.fc_out(out)


@wrong("self_attention", r"that is d_head;", listed=False)
class ScaledTwice(nn.Module):  # queries pre-scaled AND the scores divided: √Dh twice
    def __init__(self, embed_size, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        N, Lq, E = query.shape
        q = self.queries(query).view(N, Lq, self.heads, self.head_dim)
        q = q / math.sqrt(self.head_dim)
        k = self.keys(keys).view(N, -1, self.heads, self.head_dim)
        v = self.values(values).view(N, -1, self.heads, self.head_dim)
        energy = torch.einsum("nqhd,nkhd->nhqk", q, k) / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("nhqk,nkhd->nqhd", attention, v).reshape(N, Lq, E)
        return self.fc_out(out)


@wrong("self_attention", r"that is 1 \(no scaling\)", listed=False)
class ScaleLineDeleted(nn.Module):  # removed the wrong scale line instead of fixing it
    def __init__(self, embed_size, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        N, Lq, E = query.shape
        q = self.queries(query).view(N, Lq, self.heads, self.head_dim)
        k = self.keys(keys).view(N, -1, self.heads, self.head_dim)
        v = self.values(values).view(N, -1, self.heads, self.head_dim)
        energy = torch.einsum("nqhd,nkhd->nhqk", q, k)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("nhqk,nkhd->nqhd", attention, v).reshape(N, Lq, E)
        return self.fc_out(out)


@wrong("self_attention", r"divided by 0\.3536; that is 1/√d_head", listed=False)
class ScaleMultipliedNotDivided(nn.Module):  # * √Dh where / √Dh was meant
    def __init__(self, embed_size, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        N, Lq, E = query.shape
        q = self.queries(query).view(N, Lq, self.heads, self.head_dim)
        k = self.keys(keys).view(N, -1, self.heads, self.head_dim)
        v = self.values(values).view(N, -1, self.heads, self.head_dim)
        energy = torch.einsum("nqhd,nkhd->nhqk", q, k) * math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("nhqk,nkhd->nqhd", attention, v).reshape(N, Lq, E)
        return self.fc_out(out)


@wrong("self_attention", r"that is √n_heads", listed=False)
class ScaleBySqrtHeads(nn.Module):  # √heads: the "per head" fix aimed at the wrong size
    def __init__(self, embed_size, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        N, Lq, E = query.shape
        q = self.queries(query).view(N, Lq, self.heads, self.head_dim)
        k = self.keys(keys).view(N, -1, self.heads, self.head_dim)
        v = self.values(values).view(N, -1, self.heads, self.head_dim)
        energy = torch.einsum("nqhd,nkhd->nhqk", q, k) / math.sqrt(self.heads)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("nhqk,nkhd->nqhd", attention, v).reshape(N, Lq, E)
        return self.fc_out(out)


@wrong("self_attention", r"divided by 2\.828; that is a constant", listed=False)
class ScaleHardCodedForHeadDimEight(nn.Module):  # √8 typed in: right for 32/4 only
    def __init__(self, embed_size, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        N, Lq, E = query.shape
        q = self.queries(query).view(N, Lq, self.heads, self.head_dim)
        k = self.keys(keys).view(N, -1, self.heads, self.head_dim)
        v = self.values(values).view(N, -1, self.heads, self.head_dim)
        energy = torch.einsum("nqhd,nkhd->nhqk", q, k) / 2.8284271247461903
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("nhqk,nkhd->nqhd", attention, v).reshape(N, Lq, E)
        return self.fc_out(out)


@wrong("self_attention", r"divided by 16; that is 2·d_head", listed=False)
class ScalePrecedenceNoParentheses(nn.Module):  # x / d ** 1/2 is x / d / 2
    def __init__(self, embed_size, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        N, Lq, E = query.shape
        q = self.queries(query).view(N, Lq, self.heads, self.head_dim)
        k = self.keys(keys).view(N, -1, self.heads, self.head_dim)
        v = self.values(values).view(N, -1, self.heads, self.head_dim)
        energy = torch.einsum("nqhd,nkhd->nhqk", q, k)
        energy = energy / self.head_dim**1 / 2
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("nhqk,nkhd->nqhd", attention, v).reshape(N, Lq, E)
        return self.fc_out(out)


# ======================================================= wrong: the einsum and shapes


@wrong("self_attention", r"self-attention on .* raised .*einsum", listed=False)
class EinsumFixedForScoresOnly(nn.Module):  # scores relabelled, the weighted sum not
    def __init__(self, embed_size, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        N = query.shape[0]
        value_len, key_len, query_len = values.shape[1], keys.shape[1], query.shape[1]
        values = self.values(values).reshape(N, value_len, self.heads, self.head_dim)
        keys = self.keys(keys).reshape(N, key_len, self.heads, self.head_dim)
        query = self.queries(query).reshape(N, query_len, self.heads, self.head_dim)
        energy = torch.einsum("nqhd,nkhd->nhqk", [query, keys])
        energy = energy / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("bhql, bhlv -> bhqv", [attention, values])
        out = out.reshape(N, query_len, self.heads * self.head_dim)
        return self.fc_out(out)


@wrong("self_attention", r"output rows not in query order", listed=False)
class MergedWithoutTransposeBack(
    nn.Module
):  # [N, H, Lq, Dh] reshaped straight to [N, Lq, E]
    def __init__(self, embed_size, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        N, Lq, E = query.shape
        q = self.queries(query).view(N, Lq, self.heads, self.head_dim).transpose(1, 2)
        k = self.keys(keys).view(N, -1, self.heads, self.head_dim).transpose(1, 2)
        v = self.values(values).view(N, -1, self.heads, self.head_dim).transpose(1, 2)
        energy = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=-1)
        return self.fc_out((attention @ v).reshape(N, Lq, E))


@wrong("self_attention", r"'tokens mixed before the weighted sum'", listed=False)
class SplitStraightToHeadsFirst(nn.Module):  # [N, L, E] reshaped to [N, H, L, Dh]
    def __init__(self, embed_size, heads):
        super().__init__()
        self.embed_size, self.heads = embed_size, heads
        self.head_dim = embed_size // heads
        self.to_q = nn.Linear(embed_size, embed_size, bias=False)
        self.to_k = nn.Linear(embed_size, embed_size, bias=False)
        self.to_v = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        N = query.shape[0]
        shape = (N, self.heads, -1, self.head_dim)  # heads first, for the matmuls
        q = torch.reshape(self.to_q(query), shape)
        k = torch.reshape(self.to_k(keys), shape)
        v = torch.reshape(self.to_v(values), shape)
        scores = torch.matmul(q, k.transpose(2, 3)) * self.head_dim**-0.5
        if mask is not None:
            scores = scores.masked_fill(mask == 0, float("-1e20"))
        out = torch.matmul(torch.softmax(scores, dim=-1), v)
        out = out.permute(0, 2, 1, 3).reshape(N, -1, self.embed_size)
        return self.fc_out(out)


@wrong("self_attention", r"'tokens mixed before the weighted sum'", listed=False)
class SplitWithViewNoTranspose(nn.Module):  # .view(N, H, -1, Dh) on [N, L, E]
    def __init__(self, embed_size, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def heads_of(self, x):
        return x.view(x.shape[0], self.heads, -1, self.head_dim)

    def forward(self, values, keys, query, mask):
        N, Lq, E = query.shape
        q = self.heads_of(self.queries(query))
        k = self.heads_of(self.keys(keys))
        v = self.heads_of(self.values(values))
        energy = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, float("-inf"))
        attention = torch.softmax(energy, dim=-1)
        return self.fc_out((attention @ v).transpose(1, 2).reshape(N, Lq, E))


@wrong("self_attention", r"view size is not compatible", listed=False)
class ViewAfterTransposeNoContiguous(nn.Module):  # .view on the transposed output
    def __init__(self, embed_size, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        N, Lq, E = query.shape
        q = self.queries(query).view(N, Lq, self.heads, self.head_dim).transpose(1, 2)
        k = self.keys(keys).view(N, -1, self.heads, self.head_dim).transpose(1, 2)
        v = self.values(values).view(N, -1, self.heads, self.head_dim).transpose(1, 2)
        energy = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=-1)
        return self.fc_out((attention @ v).transpose(1, 2).view(N, Lq, E))


@wrong("self_attention", r"'the output is not an average of the values'", listed=False)
class SoftmaxOverQueriesAfterFix(
    nn.Module
):  # kept dim=2, "the sequence axis", = queries
    def __init__(self, embed_size, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        N, Lq, E = query.shape
        q = self.queries(query).view(N, Lq, self.heads, self.head_dim)
        k = self.keys(keys).view(N, -1, self.heads, self.head_dim)
        v = self.values(values).view(N, -1, self.heads, self.head_dim)
        energy = torch.einsum("nqhd,nkhd->nhqk", q, k) / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=2)
        out = torch.einsum("nhqk,nkhd->nqhd", attention, v).reshape(N, Lq, E)
        return self.fc_out(out)


@wrong("self_attention", r"'the output is not an average of the values'", listed=False)
class SoftmaxOverHeads(nn.Module):  # dim=1 of [N, H, Lq, Lk]: the heads compete
    def __init__(self, embed_size, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        N, Lq, E = query.shape
        q = self.queries(query).view(N, Lq, self.heads, self.head_dim)
        k = self.keys(keys).view(N, -1, self.heads, self.head_dim)
        v = self.values(values).view(N, -1, self.heads, self.head_dim)
        energy = torch.einsum("nqhd,nkhd->nhqk", q, k) / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=1)
        out = torch.einsum("nhqk,nkhd->nqhd", attention, v).reshape(N, Lq, E)
        return self.fc_out(out)


@wrong("self_attention", r"cross-attention .* raised", listed=False)
class ValuesReshapedWithQueryLength(nn.Module):  # copy-paste: query_len for the values
    def __init__(self, embed_size, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        N = query.shape[0]
        key_len, query_len = keys.shape[1], query.shape[1]
        values = self.values(values).reshape(N, query_len, self.heads, self.head_dim)
        keys = self.keys(keys).reshape(N, key_len, self.heads, self.head_dim)
        query = self.queries(query).reshape(N, query_len, self.heads, self.head_dim)
        energy = torch.einsum("nqhd,nkhd->nhqk", [query, keys]) / math.sqrt(
            self.head_dim
        )
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("nhqk,nkhd->nqhd", [attention, values])
        return self.fc_out(out.reshape(N, query_len, self.heads * self.head_dim))


@wrong("self_attention", r"cross-attention .* raised", listed=False)
class ArgumentsReorderedQueryFirst(
    nn.Module
):  # forward(query, keys, values): the usual
    def __init__(self, embed_size, heads):  # order, not the seed's values-first one
        super().__init__()
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, query, keys, values, mask):
        N, Lq, E = query.shape
        q = self.queries(query).view(N, Lq, self.heads, self.head_dim).transpose(1, 2)
        k = self.keys(keys).view(N, -1, self.heads, self.head_dim).transpose(1, 2)
        v = self.values(values).view(N, -1, self.heads, self.head_dim).transpose(1, 2)
        energy = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=-1)
        return self.fc_out((attention @ v).transpose(1, 2).reshape(N, Lq, E))


@wrong("self_attention", r"raised .*invalid for input of size", listed=False)
class HeadsHardCodedFour(nn.Module):  # view(N, L, 4, 8): the visible sizes typed in
    def __init__(self, embed_size, heads):
        super().__init__()
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        N, Lq, E = query.shape
        q = self.queries(query).view(N, Lq, 4, 8).transpose(1, 2)
        k = self.keys(keys).view(N, -1, 4, 8).transpose(1, 2)
        v = self.values(values).view(N, -1, 4, 8).transpose(1, 2)
        energy = q @ k.transpose(-2, -1) / math.sqrt(8)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=-1)
        return self.fc_out((attention @ v).transpose(1, 2).reshape(N, Lq, E))


@wrong("self_attention", r"bug 2 still present.*slice of `keys`", listed=False)
class OnlyQueriesProjectionFixed(nn.Module):  # Linear(E, E) for the queries only
    def __init__(self, embed_size, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(self.head_dim, self.head_dim, bias=False)
        self.keys = nn.Linear(self.head_dim, self.head_dim, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        N, Lq, E = query.shape
        q = self.queries(query).view(N, Lq, self.heads, self.head_dim)
        k = self.keys(keys.view(N, -1, self.heads, self.head_dim))
        v = self.values(values.view(N, -1, self.heads, self.head_dim))
        energy = torch.einsum("nqhd,nkhd->nhqk", q, k) / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=-1)
        out = torch.einsum("nhqk,nkhd->nqhd", attention, v).reshape(N, Lq, E)
        return self.fc_out(out)


@wrong("self_attention", r"bug 2 still present.*slice of `values`", listed=False)
class ValuesProjectionForgotten(
    nn.Module
):  # queries and keys fixed, values still Dh->Dh
    def __init__(self, embed_size, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(self.head_dim, self.head_dim, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        N, Lq, E = query.shape
        q = self.queries(query).view(N, Lq, self.heads, self.head_dim)
        k = self.keys(keys).view(N, -1, self.heads, self.head_dim)
        v = self.values(values.view(N, -1, self.heads, self.head_dim))
        energy = torch.einsum("nqhd,nkhd->nhqk", q, k) / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=-1)
        out = torch.einsum("nhqk,nkhd->nqhd", attention, v).reshape(N, Lq, E)
        return self.fc_out(out)


@wrong(
    "self_attention", r"slice of `query`.*computed from that slice alone", listed=False
)
class EachHeadOwnSmallLinear(nn.Module):  # "shared" read as the bug: H Linear(Dh, Dh)
    def __init__(self, embed_size, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = embed_size // heads
        self.q_proj = nn.ModuleList(
            nn.Linear(self.head_dim, self.head_dim, bias=False) for _ in range(heads)
        )
        self.k_proj = nn.ModuleList(
            nn.Linear(self.head_dim, self.head_dim, bias=False) for _ in range(heads)
        )
        self.v_proj = nn.ModuleList(
            nn.Linear(self.head_dim, self.head_dim, bias=False) for _ in range(heads)
        )
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        N, Lq, E = query.shape
        qs = query.split(self.head_dim, dim=-1)
        ks = keys.split(self.head_dim, dim=-1)
        vs = values.split(self.head_dim, dim=-1)
        q = torch.stack([f(x) for f, x in zip(self.q_proj, qs)], dim=1)
        k = torch.stack([f(x) for f, x in zip(self.k_proj, ks)], dim=1)
        v = torch.stack([f(x) for f, x in zip(self.v_proj, vs)], dim=1)
        energy = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=-1)
        return self.fc_out((attention @ v).transpose(1, 2).reshape(N, Lq, E))


@wrong("self_attention", r"'one projection applied to several inputs'", listed=False)
class KeysThroughQueriesLinear(nn.Module):  # copy-paste: self.queries(keys)
    def __init__(self, embed_size, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        N, Lq, E = query.shape
        q = self.queries(query).view(N, Lq, self.heads, self.head_dim)
        k = self.queries(keys).view(N, -1, self.heads, self.head_dim)
        v = self.values(values).view(N, -1, self.heads, self.head_dim)
        energy = torch.einsum("nqhd,nkhd->nhqk", q, k) / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=-1)
        out = torch.einsum("nhqk,nkhd->nqhd", attention, v).reshape(N, Lq, E)
        return self.fc_out(out)


@wrong("self_attention", r"'output projection missing'", listed=False)
class OutputProjectionDropped(nn.Module):  # returns the merged heads, fc_out never used
    def __init__(self, embed_size, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        N, Lq, E = query.shape
        q = self.queries(query).view(N, Lq, self.heads, self.head_dim)
        k = self.keys(keys).view(N, -1, self.heads, self.head_dim)
        v = self.values(values).view(N, -1, self.heads, self.head_dim)
        energy = torch.einsum("nqhd,nkhd->nhqk", q, k) / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=-1)
        return torch.einsum("nhqk,nkhd->nqhd", attention, v).reshape(N, Lq, E)


@wrong("self_attention", r"self-attention on .* raised", listed=False)
class ScoresTransposeWrongAxes(nn.Module):  # k.transpose(1, 2) on [N, H, L, D]: H and L
    def __init__(self, embed_size, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        N, Lq, E = query.shape
        q = self.queries(query).view(N, Lq, self.heads, self.head_dim).transpose(1, 2)
        k = self.keys(keys).view(N, -1, self.heads, self.head_dim).transpose(1, 2)
        v = self.values(values).view(N, -1, self.heads, self.head_dim).transpose(1, 2)
        energy = q @ k.transpose(1, 2) / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=-1)
        return self.fc_out((attention @ v).transpose(1, 2).reshape(N, Lq, E))


@wrong("self_attention", r"causal keep-mask \[1, 1, L, L\]", listed=False)
class MaskUnsqueezedForHeads(nn.Module):  # adds the head axis to a mask that has one
    def __init__(self, embed_size, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        N, Lq, E = query.shape
        q = self.queries(query).view(N, Lq, self.heads, self.head_dim)
        k = self.keys(keys).view(N, -1, self.heads, self.head_dim)
        v = self.values(values).view(N, -1, self.heads, self.head_dim)
        energy = torch.einsum("nqhd,nkhd->nhqk", q, k) / math.sqrt(self.head_dim)
        if mask is not None:
            mask = mask.unsqueeze(1)  # [N, 1, Lq, Lk]
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=-1)
        out = torch.einsum("nhqk,nkhd->nqhd", attention, v).reshape(N, Lq, E)
        return self.fc_out(out)


@wrong("self_attention", r"raised TypeError.*got float", listed=False)
class HeadDimTrueDivision(nn.Module):  # embed_size / heads: a float head_dim
    def __init__(self, embed_size, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = embed_size / heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        N, Lq, E = query.shape
        q = self.queries(query).view(N, Lq, self.heads, self.head_dim)
        k = self.keys(keys).view(N, -1, self.heads, self.head_dim)
        v = self.values(values).view(N, -1, self.heads, self.head_dim)
        energy = torch.einsum("nqhd,nkhd->nhqk", q, k) / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=-1)
        out = torch.einsum("nhqk,nkhd->nqhd", attention, v).reshape(N, Lq, E)
        return self.fc_out(out)


@wrong("self_attention", r"'the output depends on the order of the keys'", listed=False)
class ValuesReshapedHeadsFirst(nn.Module):  # values reshaped straight to [N, H, L, Dh]
    def __init__(self, embed_size, heads):
        super().__init__()
        self.embed_size = embed_size
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        N = query.shape[0]
        value_len, key_len, query_len = values.shape[1], keys.shape[1], query.shape[1]
        # the values "go heads first" by a reshape, not a view and a transpose
        values = self.values(values).reshape(N, self.heads, value_len, self.head_dim)
        keys = self.keys(keys).reshape(N, key_len, self.heads, self.head_dim)
        query = self.queries(query).reshape(N, query_len, self.heads, self.head_dim)
        energy = torch.einsum("nqhd,nkhd->nhqk", query, keys)
        energy = energy / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("nhqk,nhkd->nqhd", attention, values)
        return self.fc_out(out.reshape(N, query_len, self.embed_size))


@wrong("self_attention", r"'NaN or inf in float16'", listed=False)
class AdditiveMaskTimesInfinity(nn.Module):  # (~mask) * -inf: 0 · inf is NaN
    def __init__(self, embed_size, heads):
        super().__init__()
        self.embed_size = embed_size
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        N = query.shape[0]
        value_len, key_len, query_len = values.shape[1], keys.shape[1], query.shape[1]
        values = self.values(values).reshape(N, value_len, self.heads, self.head_dim)
        keys = self.keys(keys).reshape(N, key_len, self.heads, self.head_dim)
        query = self.queries(query).reshape(N, query_len, self.heads, self.head_dim)
        energy = torch.einsum("nqhd,nkhd->nhqk", query, keys)
        energy = energy / math.sqrt(self.head_dim)
        if mask is not None:
            # an additive mask: -inf where masked, "0" where kept
            energy = energy + (mask == 0).to(energy.dtype) * float("-inf")
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("nhqk,nkhd->nqhd", attention, values)
        return self.fc_out(out.reshape(N, query_len, self.embed_size))


@wrong("self_attention", r"across the sequences of the batch", listed=False)
class AttendsOverBatch(nn.Module):  # transpose(0, 2): the batch axis ends up attended
    def __init__(self, embed_size, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        N, Lq, E = query.shape
        q = self.queries(query).view(N, Lq, self.heads, self.head_dim).transpose(0, 2)
        k = self.keys(keys).view(N, -1, self.heads, self.head_dim).transpose(0, 2)
        v = self.values(values).view(N, -1, self.heads, self.head_dim).transpose(0, 2)
        energy = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=-1)
        return self.fc_out((attention @ v).transpose(0, 2).reshape(N, Lq, E))


@wrong("self_attention", r"'the output is not an average of the values'", listed=False)
class WeightedSumOfKeys(nn.Module):  # attention @ k: the keys averaged, not the values
    def __init__(self, embed_size, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        N, Lq, E = query.shape
        q = self.queries(query).view(N, Lq, self.heads, self.head_dim).transpose(1, 2)
        k = self.keys(keys).view(N, -1, self.heads, self.head_dim).transpose(1, 2)
        v = self.values(values).view(N, -1, self.heads, self.head_dim).transpose(1, 2)
        energy = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=-1)
        return self.fc_out((attention @ k).transpose(1, 2).reshape(N, Lq, E))


@wrong("self_attention", r"divided by 4; that is n_heads or d_head / 2", listed=False)
class ScalePrecedence(nn.Module):  # (head_dim ** 1/2) is (head_dim ** 1) / 2, not √
    def __init__(self, embed_size, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        N, Lq, E = query.shape
        q = self.queries(query).view(N, Lq, self.heads, self.head_dim)
        k = self.keys(keys).view(N, -1, self.heads, self.head_dim)
        v = self.values(values).view(N, -1, self.heads, self.head_dim)
        energy = torch.einsum("nqhd,nkhd->nhqk", q, k)
        energy = energy / (self.head_dim**1 / 2)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("nhqk,nkhd->nqhd", attention, v).reshape(N, Lq, E)
        return self.fc_out(out)


# ================================ right and wrong: the held-out trial of 2026-12-07


@right("self_attention")
class FixedWhereKeepsTheKeptKeys(nn.Module):  # where(mask.bool(), energy, fill)
    def __init__(self, embed_size, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        N, Lq, E = query.shape
        q = self.queries(query).view(N, Lq, self.heads, self.head_dim).transpose(1, 2)
        k = self.keys(keys).view(N, -1, self.heads, self.head_dim).transpose(1, 2)
        v = self.values(values).view(N, -1, self.heads, self.head_dim).transpose(1, 2)
        energy = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        if mask is not None:
            fill = torch.finfo(energy.dtype).min
            energy = torch.where(mask.bool(), energy, fill)
        attention = torch.softmax(energy, dim=-1)
        return self.fc_out((attention @ v).transpose(1, 2).reshape(N, Lq, E))


@right("self_attention")
class FixedFillWhereMaskLogicalNot(nn.Module):  # fills where mask.logical_not()
    def __init__(self, embed_size, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        N, Lq, E = query.shape
        q = self.queries(query).view(N, Lq, self.heads, self.head_dim).transpose(1, 2)
        k = self.keys(keys).view(N, -1, self.heads, self.head_dim).transpose(1, 2)
        v = self.values(values).view(N, -1, self.heads, self.head_dim).transpose(1, 2)
        energy = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(
                mask.logical_not(), torch.finfo(energy.dtype).min
            )
        attention = torch.softmax(energy, dim=-1)
        return self.fc_out((attention @ v).transpose(1, 2).reshape(N, Lq, E))


@wrong(
    "self_attention",
    r"mask convention inverted.*ignores those it marks 1",
    listed=False,
)
class MaskEqualsOneFilled(nn.Module):  # fills the kept keys, True read as masked
    def __init__(self, embed_size, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        N, Lq, E = query.shape
        q = self.queries(query).view(N, Lq, self.heads, self.head_dim).transpose(1, 2)
        k = self.keys(keys).view(N, -1, self.heads, self.head_dim).transpose(1, 2)
        v = self.values(values).view(N, -1, self.heads, self.head_dim).transpose(1, 2)
        energy = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(mask == 1, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=-1)
        return self.fc_out((attention @ v).transpose(1, 2).reshape(N, Lq, E))


@wrong(
    "self_attention",
    r"mask convention inverted.*ignores those it marks 1",
    listed=False,
)
class MaskNotZeroFilled(nn.Module):  # mask != 0 filled: the kept keys hidden
    def __init__(self, embed_size, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        N, Lq, E = query.shape
        q = self.queries(query).view(N, Lq, self.heads, self.head_dim).transpose(1, 2)
        k = self.keys(keys).view(N, -1, self.heads, self.head_dim).transpose(1, 2)
        v = self.values(values).view(N, -1, self.heads, self.head_dim).transpose(1, 2)
        energy = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(mask != 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=-1)
        return self.fc_out((attention @ v).transpose(1, 2).reshape(N, Lq, E))


@wrong(
    "self_attention",
    r"mask convention inverted.*ignores those it marks 1",
    listed=False,
)
class WhereBranchesSwapped(nn.Module):  # keeps the scores where mask is 0
    def __init__(self, embed_size, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        N, Lq, E = query.shape
        q = self.queries(query).view(N, Lq, self.heads, self.head_dim).transpose(1, 2)
        k = self.keys(keys).view(N, -1, self.heads, self.head_dim).transpose(1, 2)
        v = self.values(values).view(N, -1, self.heads, self.head_dim).transpose(1, 2)
        energy = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        if mask is not None:
            fill = torch.finfo(energy.dtype).min
            energy = torch.where(mask == 0, energy, fill)
        attention = torch.softmax(energy, dim=-1)
        return self.fc_out((attention @ v).transpose(1, 2).reshape(N, Lq, E))


@wrong(
    "self_attention",
    r"mask convention inverted.*ignores those it marks 1",
    listed=False,
)
class MaskInvertedWithInfFill(nn.Module):  # no NaN: no mask row is all 1
    def __init__(self, embed_size, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        N, Lq, E = query.shape
        q = self.queries(query).view(N, Lq, self.heads, self.head_dim).transpose(1, 2)
        k = self.keys(keys).view(N, -1, self.heads, self.head_dim).transpose(1, 2)
        v = self.values(values).view(N, -1, self.heads, self.head_dim).transpose(1, 2)
        energy = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(mask == 1, float("-inf"))
        attention = torch.softmax(energy, dim=-1)
        return self.fc_out((attention @ v).transpose(1, 2).reshape(N, Lq, E))


@wrong(
    "self_attention",
    r"the heads' values are summed or mixed.*in 8 directions only",
    listed=False,
)
class OutputEinsumSumsHeads(nn.Module):  # values' heads lettered g: summed away
    def __init__(self, embed_size, heads):
        super().__init__()
        self.embed_size = embed_size
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(heads * self.head_dim, embed_size)

    def forward(self, values, keys, query, mask):
        N = query.shape[0]
        value_len, key_len, query_len = values.shape[1], keys.shape[1], query.shape[1]
        values = self.values(values).reshape(N, value_len, self.heads, self.head_dim)
        keys = self.keys(keys).reshape(N, key_len, self.heads, self.head_dim)
        query = self.queries(query).reshape(N, query_len, self.heads, self.head_dim)
        energy = torch.einsum("nqhd,nkhd->nhqk", [query, keys])
        energy = energy / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("nhqk,nkgd->nqhd", [attention, values])
        out = out.reshape(N, query_len, self.heads * self.head_dim)
        return self.fc_out(out)


@wrong(
    "self_attention",
    r"the heads' values are summed or mixed.*in 8 directions only",
    listed=False,
)
class HeadsFirstValuesOwnLetter(nn.Module):  # permuted, then 'bglv' for the values
    def __init__(self, embed_size, heads):
        super().__init__()
        self.embed_size = embed_size
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(heads * self.head_dim, embed_size)

    def forward(self, values, keys, query, mask):
        N = query.shape[0]
        value_len, key_len, query_len = values.shape[1], keys.shape[1], query.shape[1]
        values = self.values(values).reshape(N, value_len, self.heads, self.head_dim)
        keys = self.keys(keys).reshape(N, key_len, self.heads, self.head_dim)
        query = self.queries(query).reshape(N, query_len, self.heads, self.head_dim)
        values, keys, query = (t.permute(0, 2, 1, 3) for t in (values, keys, query))
        energy = torch.einsum("bhqd, bhkd -> bhqk", [query, keys])
        energy = energy / (self.head_dim ** (1 / 2))
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("bhql, bglv -> bhqv", [attention, values])
        out = out.permute(0, 2, 1, 3).reshape(N, query_len, self.heads * self.head_dim)
        return self.fc_out(out)


@wrong(
    "self_attention",
    r"the heads' values are summed or mixed.*in 8 directions only",
    listed=False,
)
class HeadsFirstEinsumMerges(nn.Module):  # one einsum back to [N, Lq, H, D], g summed
    def __init__(self, embed_size, heads):
        super().__init__()
        self.embed_size = embed_size
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(heads * self.head_dim, embed_size)

    def forward(self, values, keys, query, mask):
        N = query.shape[0]
        value_len, key_len, query_len = values.shape[1], keys.shape[1], query.shape[1]
        values = self.values(values).reshape(N, value_len, self.heads, self.head_dim)
        keys = self.keys(keys).reshape(N, key_len, self.heads, self.head_dim)
        query = self.queries(query).reshape(N, query_len, self.heads, self.head_dim)
        values, keys, query = (t.transpose(1, 2) for t in (values, keys, query))
        energy = torch.einsum("bhqd,bhkd->bhqk", query, keys) / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = energy.softmax(dim=-1)
        out = torch.einsum("bhqk,bgkd->bqhd", attention, values)
        return self.fc_out(out.reshape(N, query_len, self.heads * self.head_dim))
