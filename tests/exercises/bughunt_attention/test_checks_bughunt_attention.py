"""The bug-hunt checks (tformer_grading/checks/bughunt_attention.py), one per bug of
the seed's SelfAttention, tested on the seed's code as it is, on every version with one
bug fixed and with three bugs fixed, on right fixes written differently, and on wrong
fixes a learner would plausibly write. Each check must judge its own bug only: a
version passes exactly the checks of the bugs it fixed, whatever the others.

Each class is written out in full, as a learner would have it after editing the seed's
cell; a comment says which bugs it fixes.
"""

import inspect
import math
import re
from pathlib import Path

import nbformat
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from tformer_grading.checks import CheckFailure, bughunt_attention as bh


# The seed's class, byte for byte (the second seed, 004_ddcacdd63f7f5d33.txt,
# lines 54-105).
# fmt: off
class SelfAttention(nn.Module):
    def __init__(self, embed_size, heads):
        super(SelfAttention, self).__init__()
        self.embed_size = embed_size
        self.heads = heads
        self.head_dim = embed_size // heads

        assert (self.head_dim * heads == embed_size), "Embed size needs to be div by heads"

        # 线性变换生成 Q, K, V
        self.values = nn.Linear(self.head_dim, self.head_dim, bias=False)
        self.keys = nn.Linear(self.head_dim, self.head_dim, bias=False)
        self.queries = nn.Linear(self.head_dim, self.head_dim, bias=False)

        # 输出投影
        self.fc_out = nn.Linear(heads * self.head_dim, embed_size)

    def forward(self, values, keys, query, mask):
        N = query.shape[0]
        value_len, key_len, query_len = values.shape[1], keys.shape[1], query.shape[1]

        # 分割多头
        values = values.reshape(N, value_len, self.heads, self.head_dim)
        keys = keys.reshape(N, key_len, self.heads, self.head_dim)
        query = query.reshape(N, query_len, self.heads, self.head_dim)

        # 线性变换
        values = self.values(values)
        keys = self.keys(keys)
        query = self.queries(query)

        # 计算 attention scores
        # einsum 解释：b=batch, h=heads, q=query_len, k=key_len, d=head_dim
        energy = torch.einsum("bhqd, bhkd -> bhqk", [query, keys])

        # 缩放
        energy = energy / (self.embed_size ** (1/2))

        # 应用 mask（可选）
        if mask is not None:
            energy = energy.masked_fill(mask == 0, float("-1e20"))

        # softmax 得到注意力权重
        attention = torch.softmax(energy, dim=3)

        # 加权求和
        out = torch.einsum("bhql, bhlv -> bhqv", [attention, values])

        # 拼接多头
        out = out.reshape(N, query_len, self.heads * self.head_dim)

        return self.fc_out(out)
# fmt: on


# --------------- one bug fixed (3 left)


class OnlyEinsumFixed(nn.Module):
    # Fixes bug 1 (the einsum letters name [N, L, H, Dh] as it is); bugs 2, 3, 4 left.
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
        energy = energy / (self.embed_size ** (1 / 2))
        if mask is not None:
            energy = energy.masked_fill(mask == 0, float("-1e20"))
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("nhql,nlhd->nqhd", [attention, values])
        out = out.reshape(N, query_len, self.heads * self.head_dim)
        return self.fc_out(out)


class OnlySharedLinearFixed(nn.Module):
    # Fixes bug 2 (project the whole embedding, then split); bugs 1, 3, 4 left.
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
        energy = torch.einsum("bhqd, bhkd -> bhqk", [query, keys])
        energy = energy / (self.embed_size ** (1 / 2))
        if mask is not None:
            energy = energy.masked_fill(mask == 0, float("-1e20"))
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("bhql, bhlv -> bhqv", [attention, values])
        out = out.reshape(N, query_len, self.heads * self.head_dim)
        return self.fc_out(out)


class OnlyScaleFixed(nn.Module):
    # Fixes bug 3 (divide by sqrt(head_dim)); bugs 1, 2, 4 left.
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
        energy = torch.einsum("bhqd, bhkd -> bhqk", [query, keys])
        energy = energy / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, float("-1e20"))
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("bhql, bhlv -> bhqv", [attention, values])
        out = out.reshape(N, query_len, self.heads * self.head_dim)
        return self.fc_out(out)


class OnlyFillFixed(nn.Module):
    # Fixes bug 4 (a fill float16 can hold); bugs 1, 2, 3 left.
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
        energy = torch.einsum("bhqd, bhkd -> bhqk", [query, keys])
        energy = energy / (self.embed_size ** (1 / 2))
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("bhql, bhlv -> bhqv", [attention, values])
        out = out.reshape(N, query_len, self.heads * self.head_dim)
        return self.fc_out(out)


# --------------- three bugs fixed (1 left)


class AllButEinsum(nn.Module):
    # Fixes bugs 2, 3, 4; the seed's einsum (bug 1) left.
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
        value_len, key_len, query_len = values.shape[1], keys.shape[1], query.shape[1]
        values = self.values(values).reshape(N, value_len, self.heads, self.head_dim)
        keys = self.keys(keys).reshape(N, key_len, self.heads, self.head_dim)
        query = self.queries(query).reshape(N, query_len, self.heads, self.head_dim)
        energy = torch.einsum("bhqd, bhkd -> bhqk", [query, keys])
        energy = energy / (self.head_dim**0.5)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("bhql, bhlv -> bhqv", [attention, values])
        out = out.reshape(N, query_len, self.heads * self.head_dim)
        return self.fc_out(out)


class AllButSharedLinear(nn.Module):
    # Fixes bugs 1, 3, 4; the shared Linear(head_dim, head_dim) (bug 2) left.
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
        out = torch.einsum("nhql,nlhd->nqhd", [attention, values])
        out = out.reshape(N, query_len, self.heads * self.head_dim)
        return self.fc_out(out)


class AllButScale(nn.Module):
    # Fixes bugs 1, 2, 4; the division by sqrt(embed_size) (bug 3) left.
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
        value_len, key_len, query_len = values.shape[1], keys.shape[1], query.shape[1]
        values = self.values(values).reshape(N, value_len, self.heads, self.head_dim)
        keys = self.keys(keys).reshape(N, key_len, self.heads, self.head_dim)
        query = self.queries(query).reshape(N, query_len, self.heads, self.head_dim)
        energy = torch.einsum("nqhd,nkhd->nhqk", [query, keys])
        energy = energy / (self.embed_size ** (1 / 2))
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("nhql,nlhd->nqhd", [attention, values])
        out = out.reshape(N, query_len, self.heads * self.head_dim)
        return self.fc_out(out)


class AllButFill(nn.Module):
    # Fixes bugs 1, 2, 3; the float("-1e20") fill (bug 4) left.
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
        value_len, key_len, query_len = values.shape[1], keys.shape[1], query.shape[1]
        values = self.values(values).reshape(N, value_len, self.heads, self.head_dim)
        keys = self.keys(keys).reshape(N, key_len, self.heads, self.head_dim)
        query = self.queries(query).reshape(N, query_len, self.heads, self.head_dim)
        energy = torch.einsum("nqhd,nkhd->nhqk", [query, keys])
        energy = energy / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, float("-1e20"))
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("nhql,nlhd->nqhd", [attention, values])
        out = out.reshape(N, query_len, self.heads * self.head_dim)
        return self.fc_out(out)


# --------------- right fixes, written differently


class FixedInPlace(nn.Module):
    # All four fixed, the seed's structure kept.
    def __init__(self, embed_size, heads):
        super().__init__()
        self.embed_size = embed_size
        self.heads = heads
        self.head_dim = embed_size // heads
        assert self.head_dim * heads == embed_size, "embed_size must divide by heads"
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


class FusedQKV(nn.Module):
    # One Linear(E, 3E) holding q, k and v (each third applied to its own input),
    # matmul, and a -1e4 fill: float16 holds it, and exp(-1e4) is 0 next to real
    # scores.
    def __init__(self, embed_size, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = embed_size // heads
        self.qkv = nn.Linear(embed_size, 3 * embed_size)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def split(self, x):
        n, length, _ = x.shape
        return x.view(n, length, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, values, keys, query, mask):
        wq, wk, wv = self.qkv.weight.chunk(3)
        bq, bk, bv = self.qkv.bias.chunk(3)
        q = self.split(F.linear(query, wq, bq))
        k = self.split(F.linear(keys, wk, bk))
        v = self.split(F.linear(values, wv, bv))
        energy = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(~mask.bool(), -1e4)
        out = energy.softmax(-1) @ v
        return self.fc_out(out.transpose(1, 2).flatten(2))


class PerHeadModules(nn.Module):
    # A ModuleList of per-head Linear(E, Dh) for each of q, k, v; one head at a time.
    def __init__(self, embed_size, heads):
        super().__init__()
        head_dim = embed_size // heads
        self.q = nn.ModuleList(nn.Linear(embed_size, head_dim) for _ in range(heads))
        self.k = nn.ModuleList(nn.Linear(embed_size, head_dim) for _ in range(heads))
        self.v = nn.ModuleList(nn.Linear(embed_size, head_dim) for _ in range(heads))
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        outs = []
        for q, k, v in zip(self.q, self.k, self.v):
            qh, kh, vh = q(query), k(keys), v(values)  # [N, L, Dh]
            energy = qh @ kh.transpose(1, 2) / qh.size(-1) ** 0.5  # [N, Lq, Lk]
            if mask is not None:
                keep = mask.reshape(mask.size(0), *mask.shape[-2:]) != 0
                energy = energy.masked_fill(~keep, torch.finfo(energy.dtype).min)
            outs.append(torch.softmax(energy, dim=-1) @ vh)
        return self.fc_out(torch.cat(outs, dim=-1))


class OutProjFirstWhere(nn.Module):
    # The output projection registered first, permute + matmul, torch.where for the
    # mask.
    def __init__(self, embed_size, heads):
        super().__init__()
        self.out = nn.Linear(embed_size, embed_size)
        self.v_proj = nn.Linear(embed_size, embed_size)
        self.q_proj = nn.Linear(embed_size, embed_size)
        self.k_proj = nn.Linear(embed_size, embed_size)
        self.heads = heads

    def forward(self, values, keys, query, mask):
        n, lq, e = query.shape
        h = self.heads
        q = self.q_proj(query).reshape(n, lq, h, e // h).permute(0, 2, 1, 3)
        k = self.k_proj(keys).reshape(n, keys.size(1), h, e // h).permute(0, 2, 3, 1)
        v = self.v_proj(values).reshape(n, values.size(1), h, e // h)
        v = v.permute(0, 2, 1, 3)
        energy = torch.matmul(q, k) * (e // h) ** -0.5
        if mask is not None:
            low = torch.tensor(
                torch.finfo(energy.dtype).min, dtype=energy.dtype, device=energy.device
            )
            energy = torch.where(mask == 0, low, energy)
        out = torch.matmul(energy.softmax(dim=-1), v)
        return self.out(out.permute(0, 2, 1, 3).reshape(n, lq, e))


class NoBiasesFloat32Softmax(nn.Module):
    # No biases anywhere; masking and softmax done in float32, then cast back, so the
    # seed's -1e20 is fine (float32 holds it).
    def __init__(self, embed_size, heads):
        super().__init__()
        self.heads, self.head_dim = heads, embed_size // heads
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size, bias=False)

    def forward(self, values, keys, query, mask):
        N = query.shape[0]
        q = self.queries(query).view(N, -1, self.heads, self.head_dim).transpose(1, 2)
        k = self.keys(keys).view(N, -1, self.heads, self.head_dim).transpose(1, 2)
        v = self.values(values).view(N, -1, self.heads, self.head_dim).transpose(1, 2)
        energy = torch.einsum("bhqd,bhkd->bhqk", q, k).float()
        energy = energy / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, float("-1e20"))
        attention = energy.softmax(dim=-1).to(v.dtype)
        out = torch.einsum("bhqk,bhkd->bqhd", attention, v)
        return self.fc_out(out.reshape(N, -1, self.heads * self.head_dim))


# --------------- wrong fixes


class ScaleByHeadDim(FixedInPlace):
    # Bug 3 "fixed" by dividing by head_dim, forgetting the square root.
    def forward(self, values, keys, query, mask):
        N = query.shape[0]
        value_len, key_len, query_len = values.shape[1], keys.shape[1], query.shape[1]
        values = self.values(values).reshape(N, value_len, self.heads, self.head_dim)
        keys = self.keys(keys).reshape(N, key_len, self.heads, self.head_dim)
        query = self.queries(query).reshape(N, query_len, self.heads, self.head_dim)
        energy = torch.einsum("nqhd,nkhd->nhqk", [query, keys])
        energy = energy / self.head_dim
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("nhql,nlhd->nqhd", [attention, values])
        return self.fc_out(out.reshape(N, query_len, self.heads * self.head_dim))


class FillMinusInf(FixedInPlace):
    # Bug 4 "fixed" with -inf: float16 holds it, but a fully masked row is 0/0 = NaN.
    def forward(self, values, keys, query, mask):
        N = query.shape[0]
        value_len, key_len, query_len = values.shape[1], keys.shape[1], query.shape[1]
        values = self.values(values).reshape(N, value_len, self.heads, self.head_dim)
        keys = self.keys(keys).reshape(N, key_len, self.heads, self.head_dim)
        query = self.queries(query).reshape(N, query_len, self.heads, self.head_dim)
        energy = torch.einsum("nqhd,nkhd->nhqk", [query, keys])
        energy = energy / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, float("-inf"))
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("nhql,nlhd->nqhd", [attention, values])
        return self.fc_out(out.reshape(N, query_len, self.heads * self.head_dim))


class FillMinus1e9(FixedInPlace):
    # Bug 4 "fixed" with chapter 3's seed value -1e9: still beyond float16's 65504.
    def forward(self, values, keys, query, mask):
        N = query.shape[0]
        value_len, key_len, query_len = values.shape[1], keys.shape[1], query.shape[1]
        values = self.values(values).reshape(N, value_len, self.heads, self.head_dim)
        keys = self.keys(keys).reshape(N, key_len, self.heads, self.head_dim)
        query = self.queries(query).reshape(N, query_len, self.heads, self.head_dim)
        energy = torch.einsum("nqhd,nkhd->nhqk", [query, keys])
        energy = energy / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, -1e9)
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("nhql,nlhd->nqhd", [attention, values])
        return self.fc_out(out.reshape(N, query_len, self.heads * self.head_dim))


class FillZero(FixedInPlace):
    # Bug 4 "fixed" by filling with 0 ("no overflow now"): exp(0) = 1, masked keys
    # count.
    def forward(self, values, keys, query, mask):
        N = query.shape[0]
        value_len, key_len, query_len = values.shape[1], keys.shape[1], query.shape[1]
        values = self.values(values).reshape(N, value_len, self.heads, self.head_dim)
        keys = self.keys(keys).reshape(N, key_len, self.heads, self.head_dim)
        query = self.queries(query).reshape(N, query_len, self.heads, self.head_dim)
        energy = torch.einsum("nqhd,nkhd->nhqk", [query, keys])
        energy = energy / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, 0.0)
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("nhql,nlhd->nqhd", [attention, values])
        return self.fc_out(out.reshape(N, query_len, self.heads * self.head_dim))


class EinsumMergeNoTranspose(FixedInPlace):
    # Bug 1 "fixed" in the scores, but the weighted sum keeps [N, H, Lq, Dh] and is
    # reshaped straight to [N, Lq, E]: rows glue different queries of one head.
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
        out = torch.einsum("nhql,nlhd->nhqd", [attention, values])
        return self.fc_out(out.reshape(N, query_len, self.heads * self.head_dim))


class EinsumSoftmaxOverHeads(FixedInPlace):
    # Bug 1 "fixed" with the scores laid out [N, Lq, Lk, H]; the seed's softmax(dim=3)
    # kept, which now normalises over the heads.
    def forward(self, values, keys, query, mask):
        N = query.shape[0]
        value_len, key_len, query_len = values.shape[1], keys.shape[1], query.shape[1]
        values = self.values(values).reshape(N, value_len, self.heads, self.head_dim)
        keys = self.keys(keys).reshape(N, key_len, self.heads, self.head_dim)
        query = self.queries(query).reshape(N, query_len, self.heads, self.head_dim)
        energy = torch.einsum("nqhd,nkhd->nqkh", [query, keys])
        energy = energy / math.sqrt(self.head_dim)
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("nqkh,nkhd->nqhd", [attention, values])
        return self.fc_out(out.reshape(N, query_len, self.heads * self.head_dim))


class OnlyQueriesProjectedWhole(FixedInPlace):
    # Bug 2 fixed for the queries only: keys and values still go through one
    # Linear(head_dim, head_dim) after the split.
    def __init__(self, embed_size, heads):
        super().__init__(embed_size, heads)
        self.keys = nn.Linear(self.head_dim, self.head_dim, bias=False)
        self.values = nn.Linear(self.head_dim, self.head_dim, bias=False)

    def forward(self, values, keys, query, mask):
        N = query.shape[0]
        value_len, key_len, query_len = values.shape[1], keys.shape[1], query.shape[1]
        values = self.values(values.reshape(N, value_len, self.heads, self.head_dim))
        keys = self.keys(keys.reshape(N, key_len, self.heads, self.head_dim))
        query = self.queries(query).reshape(N, query_len, self.heads, self.head_dim)
        energy = torch.einsum("nqhd,nkhd->nhqk", [query, keys])
        energy = energy / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("nhql,nlhd->nqhd", [attention, values])
        return self.fc_out(out.reshape(N, query_len, self.heads * self.head_dim))


class FillFloat32Min(FixedInPlace):
    # Bug 4 "fixed" with finfo of float32, not of the scores' dtype: -3.4e38 overflows
    # float16 just as -1e20 does.
    def forward(self, values, keys, query, mask):
        N = query.shape[0]
        value_len, key_len, query_len = values.shape[1], keys.shape[1], query.shape[1]
        values = self.values(values).reshape(N, value_len, self.heads, self.head_dim)
        keys = self.keys(keys).reshape(N, key_len, self.heads, self.head_dim)
        query = self.queries(query).reshape(N, query_len, self.heads, self.head_dim)
        energy = torch.einsum("nqhd,nkhd->nhqk", [query, keys])
        energy = energy / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(torch.float32).min)
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("nhql,nlhd->nqhd", [attention, values])
        return self.fc_out(out.reshape(N, query_len, self.heads * self.head_dim))


class ScoresInFloat32ForTheMask(FixedInPlace):
    # Casts the mask to float32 to build an additive mask: in float16 the float32
    # scores meet the float16 values, and the einsum refuses the mix.
    def forward(self, values, keys, query, mask):
        N = query.shape[0]
        value_len, key_len, query_len = values.shape[1], keys.shape[1], query.shape[1]
        values = self.values(values).reshape(N, value_len, self.heads, self.head_dim)
        keys = self.keys(keys).reshape(N, key_len, self.heads, self.head_dim)
        query = self.queries(query).reshape(N, query_len, self.heads, self.head_dim)
        energy = torch.einsum("nqhd,nkhd->nhqk", [query, keys])
        energy = energy / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy + (mask == 0).float() * -1e4
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("nhql,nlhd->nqhd", [attention, values])
        return self.fc_out(out.reshape(N, query_len, self.heads * self.head_dim))


class _Variant(FixedInPlace):
    # FixedInPlace with the mask line and the output einsum of each subclass.
    out_einsum = "nhql,nlhd->nqhd"

    def masked(self, energy, mask):
        return energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)

    def forward(self, values, keys, query, mask):
        N, lq, lk = query.shape[0], query.shape[1], keys.shape[1]
        values = self.values(values).reshape(N, lk, self.heads, self.head_dim)
        keys = self.keys(keys).reshape(N, lk, self.heads, self.head_dim)
        query = self.queries(query).reshape(N, lq, self.heads, self.head_dim)
        energy = torch.einsum("nqhd,nkhd->nhqk", query, keys) / self.head_dim**0.5
        if mask is not None:
            energy = self.masked(energy, mask)
        out = torch.einsum(self.out_einsum, energy.softmax(dim=3), values)
        return self.fc_out(out.reshape(N, lq, self.heads * self.head_dim))


class MaskEqualsOneFilled(_Variant):
    # Held-out trial 2026-12-07: the fill fixed, the test flipped ("True = masked").
    def masked(self, energy, mask):
        return energy.masked_fill(mask == 1, torch.finfo(energy.dtype).min)


class MaskBoolFilled(_Variant):
    def masked(self, energy, mask):
        return energy.masked_fill(mask.bool(), torch.finfo(energy.dtype).min)


class MaskNotZeroFilled(_Variant):
    def masked(self, energy, mask):
        return energy.masked_fill(mask != 0, torch.finfo(energy.dtype).min)


class WhereBranchesSwapped(_Variant):
    def masked(self, energy, mask):
        return torch.where(mask == 0, energy, torch.finfo(energy.dtype).min)


class MaskEqualsOneInfFill(_Variant):
    # No NaN: under the flipped test no row of the check's mask is fully masked.
    def masked(self, energy, mask):
        return energy.masked_fill(mask == 1, float("-inf"))


class WhereKeepsTheKeptKeys(_Variant):
    def masked(self, energy, mask):
        return torch.where(mask.bool(), energy, torch.finfo(energy.dtype).min)


class FillWhereNotMaskBool(_Variant):
    def masked(self, energy, mask):
        return energy.masked_fill(~mask.bool(), torch.finfo(energy.dtype).min)


class OutputEinsumSumsHeads(_Variant):
    # Held-out trial 2026-12-07: the values' head axis given its own letter, g.
    out_einsum = "nhqk,nkgd->nqhd"


# --------------- the tests

CHECKS = {
    1: bh.check_bug_einsum,
    2: bh.check_bug_shared_linear,
    3: bh.check_bug_scale,
    4: bh.check_bug_fill_value,
}

# Which bugs each version fixed.
VERSIONS = {
    SelfAttention: set(),
    OnlyEinsumFixed: {1},
    OnlySharedLinearFixed: {2},
    OnlyScaleFixed: {3},
    OnlyFillFixed: {4},
    AllButEinsum: {2, 3, 4},
    AllButSharedLinear: {1, 3, 4},
    AllButScale: {1, 2, 4},
    AllButFill: {1, 2, 3},
}
RIGHT = [
    FixedInPlace,
    FusedQKV,
    PerHeadModules,
    OutProjFirstWhere,
    NoBiasesFloat32Softmax,
    WhereKeepsTheKeptKeys,
    FillWhereNotMaskBool,
]


@pytest.mark.parametrize(
    "bug,diagnosis",
    [
        (
            1,
            r"bug 1 still present: the einsum attends across heads.*at most 0\.0e\+00, "
            r"so tokens never mix; cross-attention \(N=2, query_len=3, key_len=7, "
            r"[^)]*\) raised RuntimeError: einsum.*letter h is 7 \(key_len\)",
        ),
        (
            2,
            r"bug 2 still present: one Linear\(head_dim, head_dim\).*head 0's slice of "
            r"`query` \(features 0:8\) moved your output in 8 directions at most",
        ),
        (
            3,
            # At D = 32, H = 4 the seed's √d_model is also 2·√d_head: both are said.
            r"bug 3 still present.*divided by 5\.657; that is √d_model or 2·√d_head, "
            r"the same number at these sizes; expected √head_dim = 2\.828",
        ),
        (
            4,
            r"bug 4 still present: a fill value that overflows float16.*without overflow.*"
            r"float\(\"-1e20\"\)",
        ),
    ],
)
def test_the_seed_code_fails_every_check_with_its_diagnosis(bug, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        CHECKS[bug](SelfAttention)


@pytest.mark.parametrize("cls", list(VERSIONS), ids=lambda c: c.__name__)
@pytest.mark.parametrize("bug", [1, 2, 3, 4])
def test_each_check_judges_its_own_bug_only(cls, bug, capsys):
    if bug in VERSIONS[cls]:
        CHECKS[bug](cls)
        assert f"✓ bug {bug} (" in capsys.readouterr().out
    else:
        with pytest.raises(CheckFailure, match=f"bug {bug} still present"):
            CHECKS[bug](cls)


@pytest.mark.parametrize("cls", RIGHT, ids=lambda c: c.__name__)
def test_right_fixes_written_differently_pass_all_four(cls, capsys):
    for check in CHECKS.values():
        check(cls)
    assert capsys.readouterr().out.count("✓ bug") == 4


@pytest.mark.parametrize(
    "cls,bug,diagnosis",
    [
        (
            ScaleByHeadDim,
            3,
            r"bug 3 still present.*divided by 8; that is d_head; expected "
            r"√head_dim = 2\.828",
        ),
        (
            FillMinusInf,
            4,
            r"'NaN for a fully masked row'.*the output of sequence 1, which is "
            r"fully masked, is 128 NaN of 128 values",
        ),
        (
            FillMinus1e9,
            4,
            r"bug 4 still present: a fill value that overflows float16.*"
            r"-1e9",
        ),
        (
            FillZero,
            4,
            r"'masked keys keep some weight'.*changing the queries still "
            r"changed",
        ),
        (
            FillFloat32Min,
            4,
            r"bug 4 still present: a fill value that overflows float16",
        ),
        (
            ScoresInFloat32ForTheMask,
            4,
            r"'forward fails in float16'.*raised RuntimeError",
        ),
        (
            EinsumMergeNoTranspose,
            1,
            r"'output rows not in query order'.*\[2, 0, 3, 1\]",
        ),
        (
            EinsumSoftmaxOverHeads,
            1,
            r"'the output is not an average of the values'.*every value "
            r"token the same vector",
        ),
        (
            OnlyQueriesProjectedWhole,
            2,
            r"bug 2 still present.*slice of `keys`.*head 0's "
            r"keys are computed from that slice alone",
        ),
    ],
    ids=lambda v: getattr(v, "__name__", None),
)
def test_wrong_fixes_are_rejected_by_the_right_check(cls, bug, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        CHECKS[bug](cls)


class KeysReshapedWithQueryLen(FixedInPlace):
    # A new bug made while fixing: the keys and values reshaped with the query's
    # length, which self-attention never shows.
    def forward(self, values, keys, query, mask):
        N, query_len = query.shape[0], query.shape[1]
        values = self.values(values).reshape(N, query_len, self.heads, self.head_dim)
        keys = self.keys(keys).reshape(N, query_len, self.heads, self.head_dim)
        query = self.queries(query).reshape(N, query_len, self.heads, self.head_dim)
        energy = torch.einsum("nqhd,nkhd->nhqk", [query, keys])
        energy = energy / (self.head_dim ** (1 / 2))
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("nhql,nlhd->nqhd", [attention, values])
        return self.fc_out(out.reshape(N, query_len, self.heads * self.head_dim))


class ScoresQueryMajor(FixedInPlace):
    # Fixes the einsum with the scores as [N, query_len, heads, key_len]: the softmax
    # axis is right and a padding mask [N, 1, 1, key_len] works, a causal one does not.
    def forward(self, values, keys, query, mask):
        N, query_len = query.shape[0], query.shape[1]
        values = self.values(values).reshape(N, -1, self.heads, self.head_dim)
        keys = self.keys(keys).reshape(N, -1, self.heads, self.head_dim)
        query = self.queries(query).reshape(N, query_len, self.heads, self.head_dim)
        energy = torch.einsum("nqhd,nkhd->nqhk", query, keys) / self.head_dim**0.5
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = energy.softmax(dim=-1)
        out = torch.einsum("nqhk,nkhd->nqhd", attention, values)
        return self.fc_out(out.reshape(N, query_len, self.heads * self.head_dim))


def test_scores_laid_out_for_no_mask_but_padding_fail_under_a_causal_mask():
    """Bug (held-out trial 2026-12-06): scores [N, query_len, heads, key_len] passed,
    since bug 1's check used no mask and bug 4's only [N, 1, 1, key_len]. Guard: bug
    1's check runs a causal mask [1, 1, L, L] with L != heads."""
    with pytest.raises(CheckFailure, match=r"causal keep-mask.*5 \(L\) against 4"):
        bh.check_bug_einsum(ScoresQueryMajor)
    bh.check_bug_fill_value(ScoresQueryMajor)  # its fill is right: bug 4's points


def test_a_crash_in_cross_attention_alone_is_not_called_bug_1():
    """Bug (held-out trial 2026-12-06): a learner who fixed the einsum but reshaped the
    keys with query_len was told "bug 1 still present", since any failure of the
    cross-attention probe was read as the seed's bug. Guard: bug 1 is named only when
    tokens are measured never to mix; otherwise the measurement is said as it is."""
    with pytest.raises(CheckFailure) as failure:
        bh.check_bug_einsum(KeysReshapedWithQueryLen)
    message = str(failure.value)
    assert "still present" not in message
    assert "tokens do mix" in message
    assert "[N, query_len, heads, head_dim]" in message and "key_len" in message


@pytest.mark.parametrize(
    "cls",
    [
        ScaleByHeadDim,
        FillMinusInf,
        FillMinus1e9,
        FillZero,
        EinsumMergeNoTranspose,
        OnlyQueriesProjectedWhole,
    ],
    ids=lambda c: c.__name__,
)
def test_a_wrong_fix_of_one_bug_costs_no_other_bugs_points(cls, capsys):
    # Each of these fixes three bugs right (EinsumSoftmaxOverHeads ignores the mask).
    wrong = {
        ScaleByHeadDim: 3,
        FillMinusInf: 4,
        FillMinus1e9: 4,
        FillZero: 4,
        EinsumMergeNoTranspose: 1,
        OnlyQueriesProjectedWhole: 2,
    }[cls]
    for bug, check in CHECKS.items():
        if bug != wrong and not (cls is OnlyQueriesProjectedWhole and bug == 3):
            check(cls)


def test_the_scale_check_says_so_when_it_cannot_read_the_attention():
    # Queries from Linear(E, E) but shared [Dh, Dh] keys and values: neither of the two
    # layouts the check loads weights into. It says so, rather than guessing a divisor.
    with pytest.raises(CheckFailure, match=r"cannot read.*matches none of the known"):
        bh.check_bug_scale(OnlyQueriesProjectedWhole)


INVERTED = [
    MaskEqualsOneFilled,
    MaskBoolFilled,
    MaskNotZeroFilled,
    WhereBranchesSwapped,
    MaskEqualsOneInfFill,
]


@pytest.mark.parametrize("cls", INVERTED, ids=lambda c: c.__name__)
def test_an_inverted_mask_convention_is_named_from_what_was_measured(cls, capsys):
    """Bug (held-out trial 2026-12-07): masked_fill(mask == 1, finfo.min) was told
    "a small fill (0, -1, -10) leaves it part of the softmax", a cause its fill does
    not have. Guard: the convention is measured first (the output follows the keys
    the mask marks 0 and ignores the one it marks 1), and named only then."""
    with pytest.raises(CheckFailure) as failure:
        bh.check_bug_fill_value(cls)
    message = str(failure.value)
    assert re.search(
        r"'mask convention inverted.*marks 0 \(0 to 2\) changed its output by "
        r"[0-9.]+, and changing the one it marks 1 \(token 3\) by 0: your module "
        r"attends to the keys the mask marks 0 and ignores those it marks 1",
        message,
    )
    assert "small fill" not in message
    for bug in (1, 2, 3):  # the other bugs' points stay
        CHECKS[bug](cls)


@pytest.mark.parametrize("sizes", [((48, 3),), ((12, 2),)], ids=str)
def test_the_mask_convention_is_measured_at_other_sizes(sizes, capsys):
    # heads = 2: the one key left under the flipped test also hides the query.
    with pytest.raises(CheckFailure, match="mask convention inverted"):
        bh.check_bug_fill_value(MaskEqualsOneFilled, sizes=sizes)
    bh.check_bug_fill_value(FixedInPlace, sizes=sizes)


@pytest.mark.parametrize("cls", [FillZero, FillMinusInf], ids=lambda c: c.__name__)
def test_a_wrong_fill_with_the_right_convention_is_not_called_inverted(cls):
    with pytest.raises(CheckFailure) as failure:
        bh.check_bug_fill_value(cls)
    assert "inverted" not in str(failure.value)


def test_values_summed_over_the_heads_fail_bug_1_from_what_was_measured(capsys):
    """Bug (held-out trial 2026-12-07): 'nhqk,nkgd->nqhd' sums the values' head axis
    away; bug 1's check passed it and bug 3's said "fix what the other checks report
    first (bug 1, bug 2)", which had passed. Guard: bug 1's check measures that a
    change to one value token moves a query's output in embed_size directions, not
    head_dim; bug 3's fallback says what it measured, not what to fix."""
    with pytest.raises(CheckFailure) as failure:
        bh.check_bug_einsum(OutputEinsumSumsHeads)
    assert re.search(
        r"'the heads' values are summed or mixed'.*moved query 0's output in 8 "
        r"directions only, within head_dim = 8.*move it in 32",
        str(failure.value),
    )
    with pytest.raises(CheckFailure) as failure:
        bh.check_bug_scale(OutputEinsumSumsHeads)
    message = str(failure.value)
    assert "cannot read" in message and "summed or mixed" in message
    assert "bug 1, bug 2" not in message and "fix what" not in message
    bh.check_bug_shared_linear(OutputEinsumSumsHeads)
    bh.check_bug_fill_value(OutputEinsumSumsHeads)
    with pytest.raises(CheckFailure, match=r"in 16 directions only"):
        bh.check_bug_einsum(OutputEinsumSumsHeads, sizes=((48, 3),))


def test_the_scale_fallback_tells_no_one_to_fix_other_checks():
    with pytest.raises(CheckFailure) as failure:
        bh.check_bug_scale(OnlyQueriesProjectedWhole)
    assert "bug 1, bug 2" not in str(failure.value)
    assert "run this one again" not in str(failure.value)


@pytest.mark.parametrize("sizes", [((48, 3),), ((64, 8),), ((12, 4),)], ids=str)
def test_other_sizes_the_hidden_tests_use(sizes, capsys):
    for bug, check in CHECKS.items():
        with pytest.raises(CheckFailure, match=f"bug {bug} still present"):
            check(SelfAttention, sizes=sizes)
        check(FixedInPlace, sizes=sizes)
    assert capsys.readouterr().out.count("✓ bug") == 4


def test_a_divisor_hardcoded_from_the_visible_message_fails_at_the_hidden_size():
    class HardCoded(FixedInPlace):  # √8 copied from "expected √head_dim = 2.828"
        def forward(self, values, keys, query, mask):
            N, lq, lk = query.shape[0], query.shape[1], keys.shape[1]
            q = self.queries(query).reshape(N, lq, self.heads, self.head_dim)
            k = self.keys(keys).reshape(N, lk, self.heads, self.head_dim)
            v = self.values(values).reshape(N, lk, self.heads, self.head_dim)
            energy = torch.einsum("nqhd,nkhd->nhqk", q, k) / math.sqrt(8)
            out = torch.einsum("nhqk,nkhd->nqhd", energy.softmax(-1), v)
            return self.fc_out(out.reshape(N, lq, -1))

    bh.check_bug_scale(HardCoded)
    with pytest.raises(
        CheckFailure, match=r"divided by 2\.828.*expected √head_dim = 4\b"
    ):
        bh.check_bug_scale(HardCoded, sizes=((48, 3),))


@pytest.mark.parametrize(
    "bug,section", [(1, bh.S_EINSUM), (2, bh.S_PROJ), (3, bh.S_SCALE), (4, bh.S_FILL)]
)
def test_failures_point_to_the_lesson_section(bug, section):
    with pytest.raises(CheckFailure) as failure:
        CHECKS[bug](SelfAttention)
    assert f"Read {section}." in str(failure.value)
    assert section.chapter == ("ch03_masks" if bug == 4 else "ch01_shapes")


def test_the_fill_section_is_chapter_3_section_3_5():
    assert (bh.S_FILL.number, bh.S_FILL.title) == (
        "3.5",
        "Fill values, half precision and NaN",
    )


@pytest.mark.parametrize("cls", [SelfAttention, FixedInPlace], ids=lambda c: c.__name__)
def test_checks_write_nothing_to_stderr(cls, capfd):
    for check in CHECKS.values():
        try:
            check(cls)
        except CheckFailure:
            pass
    assert capfd.readouterr().err == ""


def test_checks_leave_the_notebooks_random_state_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    for check in CHECKS.values():
        check(FixedInPlace)
    assert torch.equal(torch.rand(3), expected)


def test_bad_sizes_are_refused_naming_what_was_expected():
    with pytest.raises(TypeError, match=r"\(embed_size, heads\) pairs, got 32"):
        bh.check_bug_einsum(FixedInPlace, sizes=32)
    with pytest.raises(ValueError, match=r"heads >= 2 dividing embed_size.*\(30, 4\)"):
        bh.check_bug_scale(FixedInPlace, sizes=((30, 4),))


def test_a_class_that_is_not_a_module_or_does_not_build_fails_clearly():
    class NotAModule:
        def __init__(self, embed_size, heads):
            pass

    class Broken(nn.Module):
        def __init__(self, embed_size, heads):
            super().__init__()
            raise ValueError("oops")

    with pytest.raises(CheckFailure, match="must be an nn.Module subclass"):
        bh.check_bug_einsum(NotAModule)
    with pytest.raises(CheckFailure, match=r"Broken\(32, 4\) raised ValueError: oops"):
        bh.check_bug_fill_value(Broken)


def test_a_forward_that_returns_a_pair_is_told_to_return_one_tensor():
    class ReturnsWeightsToo(FixedInPlace):
        def forward(self, values, keys, query, mask):
            return super().forward(values, keys, query, mask), None

    for check in CHECKS.values():
        with pytest.raises(
            CheckFailure, match="must return one torch.Tensor.*got tuple"
        ):
            check(ReturnsWeightsToo)


# --------------- the exercise's notebooks

ROOT = Path(__file__).resolve().parents[3]


def _answer_cell(path):
    nb = nbformat.read(ROOT / path, as_version=4)
    return next(
        c.source
        for c in nb.cells
        if c.metadata.get("nbgrader", {}).get("grade_id") == "self_attention"
    )


def test_the_released_answer_cell_is_the_seed_code_verbatim():
    # nbgrader keeps what is outside ### BEGIN/END SOLUTION and puts its stub where the
    # region was: after the seed's last `return`, where it never runs.
    seed = inspect.getsource(SelfAttention)
    stub = "        # YOUR CODE HERE\n        raise NotImplementedError()"
    assert _answer_cell("book/ch03_bughunt/exercise.ipynb") == seed + stub
    assert _answer_cell("solutions/ch03_bughunt/exercise.ipynb").startswith(
        seed + "        ### BEGIN SOLUTION\n"
    )
    assert "注意力权重" in seed and 'float("-1e20")' in seed  # the seed's bytes


def test_the_released_seed_code_behaves_as_the_seed(capsys):
    # The untouched answer cell defines the seed's class: it fails all four checks.
    namespace = {"math": math, "torch": torch, "nn": nn}
    exec(_answer_cell("book/ch03_bughunt/exercise.ipynb"), namespace)
    for bug, check in CHECKS.items():
        with pytest.raises(CheckFailure, match=f"bug {bug} still present"):
            check(namespace["SelfAttention"])
