"""Chapter 1's measured bank for multi_head_attention (the format: tests/bank/bank.py).

Each answer is literal learner code; a wrong one says in a comment what the mistake is
and why a learner makes it.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from bank import GENERIC, right, wrong  # noqa: F401
from exercise_cells import graders

GRADERS = graders("ch01_shapes", {"multi_head_attention": "MultiHeadAttention"})


# In the notebook the module uses the learner's own split_heads and merge_heads from the
# cells above; these are those (right) answers.


def split_heads(x, n_heads):
    batch, seq, d_model = x.shape
    return x.view(batch, seq, n_heads, d_model // n_heads).transpose(1, 2)


def merge_heads(x):
    batch, n_heads, seq, d_head = x.shape
    return x.transpose(1, 2).reshape(batch, seq, n_heads * d_head)


# --------------------------------------------------------- multi_head_attention: right


@wrong("multi_head_attention", r"asks for \[.*\] = \[.*Sq.*\] of .*Sk", listed=False)
class MHAKeysViewedWithQueryLength(nn.Module):  # one (b, s) for q, k and v
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        b, s, d = query.shape
        h = self.n_heads
        q = self.q_proj(query).view(b, s, h, d // h).transpose(1, 2)
        k = self.k_proj(key).view(b, s, h, d // h).transpose(1, 2)
        v = self.v_proj(value).view(b, s, h, d // h).transpose(1, 2)
        w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d // h), dim=-1)
        out = (w @ v).transpose(1, 2).reshape(b, s, d)
        return self.out_proj(out)


@right("multi_head_attention")
class MHAFourLinears(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        q = split_heads(self.q_proj(query), self.n_heads)
        k = split_heads(self.k_proj(key), self.n_heads)
        v = split_heads(self.v_proj(value), self.n_heads)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        return self.out_proj(merge_heads(scores.softmax(dim=-1) @ v))


@right("multi_head_attention")
class MHAWithAttentionDropout(nn.Module):
    """Dropout on the weights, as in the paper: allowed, in training mode only."""

    def __init__(self, d_model, n_heads, dropout=0.1):
        super().__init__()
        self.n_heads = n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, query, key, value, mask=None):
        q = split_heads(self.q_proj(query), self.n_heads)
        k = split_heads(self.k_proj(key), self.n_heads)
        v = split_heads(self.v_proj(value), self.n_heads)
        weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), -1)
        return self.out_proj(merge_heads(self.dropout(weights) @ v))


@wrong(
    "multi_head_attention",
    r"raised AttributeError.*'drop'.* in training mode",
    listed=False,
)
class MHADropoutRemovedFromInit(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        # self.drop = nn.Dropout(0.1)  # no dropout in chapter 1

    def forward(self, query, key, value, mask=None):
        q = split_heads(self.q_proj(query), self.n_heads)
        k = split_heads(self.k_proj(key), self.n_heads)
        v = split_heads(self.v_proj(value), self.n_heads)
        weights = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(dim=-1)
        if self.training:
            weights = self.drop(weights)
        return self.out_proj(merge_heads(weights @ v))


@wrong(
    "multi_head_attention",
    r"'a different computation in training mode'.*the same on every call",
    listed=False,
)
class MHAExpectedDropout(nn.Module):
    def __init__(self, d_model, n_heads, p=0.1):
        super().__init__()
        self.n_heads, self.p = n_heads, p
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        q = split_heads(self.q_proj(query), self.n_heads)
        k = split_heads(self.k_proj(key), self.n_heads)
        v = split_heads(self.v_proj(value), self.n_heads)
        weights = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(dim=-1)
        if self.training:
            weights = weights * (1 - self.p)  # dropout on average, without the noise
        return self.out_proj(merge_heads(weights @ v))


@right("multi_head_attention")
class MHAOutputFirstNoBias(nn.Module):
    """Registers the output projection first, other names, no biases anywhere."""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.fc_out = nn.Linear(d_model, d_model, bias=False)
        self.values = nn.Linear(d_model, d_model, bias=False)
        self.keys = nn.Linear(d_model, d_model, bias=False)
        self.queries = nn.Linear(d_model, d_model, bias=False)
        self.heads = n_heads

    def forward(self, query, key, value, mask=None):
        q = split_heads(self.queries(query), self.heads)
        k = split_heads(self.keys(key), self.heads)
        v = split_heads(self.values(value), self.heads)
        energy = torch.einsum("bhqd,bhkd->bhqk", q, k) / q.shape[-1] ** 0.5
        out = torch.einsum("bhqk,bhkd->bhqd", torch.softmax(energy, dim=3), v)
        return self.fc_out(merge_heads(out))


@right("multi_head_attention")
class MHAFusedStacked(nn.Module):
    """One Linear(D, 3D) holding [Wq; Wk; Wv]; its thirds applied to the inputs."""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        wq, wk, wv = self.qkv.weight.chunk(3, dim=0)
        bq, bk, bv = self.qkv.bias.chunk(3)
        q = split_heads(F.linear(query, wq, bq), self.h)
        k = split_heads(F.linear(key, wk, bk), self.h)
        v = split_heads(F.linear(value, wv, bv), self.h)
        att = F.softmax(q @ k.mT * (1.0 / math.sqrt(k.size(-1))), dim=-1)
        return self.proj(merge_heads(att @ v))


@right("multi_head_attention")
class MHAFusedPerHead(nn.Module):
    """Fused Linear(D, 3D) laid out per head, as Megatron does: [h0: q k v, h1: ...]."""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads, self.d_head = n_heads, d_model // n_heads
        self.in_proj = nn.Linear(d_model, 3 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        h, dh = self.n_heads, self.d_head
        w = self.in_proj.weight.view(h, 3, dh, -1)
        b = self.in_proj.bias.view(h, 3, dh)
        q, k, v = (
            F.linear(x, w[:, i].reshape(h * dh, -1), b[:, i].reshape(-1))
            for i, x in enumerate((query, key, value))
        )
        q, k, v = (split_heads(t, h) for t in (q, k, v))
        weights = torch.softmax(torch.matmul(q, k.transpose(2, 3)) / dh**0.5, dim=-1)
        return self.out_proj(merge_heads(torch.matmul(weights, v)))


@right("multi_head_attention")
class MHARawParameters(nn.Module):
    """Weights as [d_in, d_out] Parameters used as x @ W + b."""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.W_q = nn.Parameter(torch.randn(d_model, d_model) / d_model**0.5)
        self.W_k = nn.Parameter(torch.randn(d_model, d_model) / d_model**0.5)
        self.W_v = nn.Parameter(torch.randn(d_model, d_model) / d_model**0.5)
        self.W_o = nn.Parameter(torch.randn(d_model, d_model) / d_model**0.5)
        self.b_v = nn.Parameter(torch.zeros(d_model))
        self.b_o = nn.Parameter(torch.zeros(d_model))

    def forward(self, query, key, value, mask=None):
        q = split_heads(query @ self.W_q, self.h)
        k = split_heads(key @ self.W_k, self.h)
        v = split_heads(value @ self.W_v + self.b_v, self.h)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        return merge_heads(scores.softmax(-1) @ v) @ self.W_o + self.b_o


@right("multi_head_attention")
class MHAQueryAndFusedKV(nn.Module):
    """A query Linear without bias and one Linear(D, 2D) for key and value together."""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.to_q = nn.Linear(d_model, d_model, bias=False)
        self.to_kv = nn.Linear(d_model, 2 * d_model)
        self.to_out = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        d = query.size(-1)
        q = split_heads(self.to_q(query), self.n_heads)
        k = split_heads(
            F.linear(key, self.to_kv.weight[:d], self.to_kv.bias[:d]), self.n_heads
        )
        v = split_heads(
            F.linear(value, self.to_kv.weight[d:], self.to_kv.bias[d:]), self.n_heads
        )
        q = q * q.size(-1) ** -0.5  # scaling q first is the same as scaling the scores
        return self.to_out(merge_heads(torch.softmax(q @ k.transpose(-2, -1), -1) @ v))


@right("multi_head_attention")
class MHAPerHeadModules(nn.Module):
    """H separate Linear(D, Dh) per role, one head at a time, outputs concatenated."""

    def __init__(self, d_model, n_heads):
        super().__init__()
        d_head = d_model // n_heads
        self.q_heads = nn.ModuleList(nn.Linear(d_model, d_head) for _ in range(n_heads))
        self.k_heads = nn.ModuleList(nn.Linear(d_model, d_head) for _ in range(n_heads))
        self.v_heads = nn.ModuleList(nn.Linear(d_model, d_head) for _ in range(n_heads))
        self.o = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        outs = []
        for wq, wk, wv in zip(self.q_heads, self.k_heads, self.v_heads):
            q, k, v = wq(query), wk(key), wv(value)
            a = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(q.size(-1)), dim=-1)
            outs.append(a @ v)
        return self.o(torch.cat(outs, dim=-1))


@right("multi_head_attention")
class MHAHandSoftmaxBaddbmm(nn.Module):
    """Heads folded into the batch for baddbmm/bmm, softmax written out by hand."""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.wq, self.wk, self.wv, self.wo = (
            nn.Linear(d_model, d_model) for _ in range(4)
        )

    def forward(self, query, key, value, mask=None):
        b, sq, d = query.shape
        sk, dh = key.size(1), d // self.h
        q = split_heads(self.wq(query), self.h).reshape(b * self.h, sq, dh)
        k = split_heads(self.wk(key), self.h).reshape(b * self.h, sk, dh)
        v = split_heads(self.wv(value), self.h).reshape(b * self.h, sk, dh)
        zeros = torch.zeros(b * self.h, sq, sk, dtype=q.dtype, device=q.device)
        s = torch.baddbmm(zeros, q, k.transpose(1, 2), alpha=1 / math.sqrt(dh))
        e = torch.exp(s - s.max(dim=-1, keepdim=True).values)
        w = e / e.sum(dim=-1, keepdim=True)
        out = torch.bmm(w, v).view(b, self.h, sq, dh)
        return self.wo(merge_heads(out))


@right("multi_head_attention")
class MHAEinsumHeadsLast(nn.Module):
    """Heads kept as [B, S, H, Dh], contracted with the right einsum labels."""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.query = nn.Linear(d_model, d_model)
        self.key = nn.Linear(d_model, d_model, bias=False)
        self.value = nn.Linear(d_model, d_model)
        self.out = nn.Linear(d_model, d_model, bias=False)

    def forward(self, query, key, value, mask=None):
        q = self.query(query).unflatten(-1, (self.h, -1))
        k = self.key(key).unflatten(-1, (self.h, -1))
        v = self.value(value).unflatten(-1, (self.h, -1))
        w = torch.einsum("bqhd,bkhd->bhqk", q, k).div(math.sqrt(q.size(-1))).softmax(-1)
        return self.out(torch.einsum("bhqk,bkhd->bqhd", w, v).flatten(2))


# --------------------------------------------------------- multi_head_attention: wrong


@wrong("multi_head_attention", r"'scaled by sqrt\(d_model\)'", listed=True)
class MHAScaleDModel(nn.Module):  # the seed's embed_size ** 0.5: √D, not √Dh
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.q, self.k, self.v, self.o = (nn.Linear(d_model, d_model) for _ in range(4))

    def forward(self, query, key, value, mask=None):
        q, k, v = (
            split_heads(f(x), self.h)
            for f, x in ((self.q, query), (self.k, key), (self.v, value))
        )
        w = (q @ k.transpose(-2, -1) / math.sqrt(query.size(-1))).softmax(-1)
        return self.o(merge_heads(w @ v))


@wrong("multi_head_attention", r"'no scaling'", listed=True)
class MHANoScale(nn.Module):  # forgot the 1/√Dh altogether
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.q, self.k, self.v, self.o = (nn.Linear(d_model, d_model) for _ in range(4))

    def forward(self, query, key, value, mask=None):
        q, k, v = (
            split_heads(f(x), self.h)
            for f, x in ((self.q, query), (self.k, key), (self.v, value))
        )
        return self.o(merge_heads((q @ k.transpose(-2, -1)).softmax(-1) @ v))


@wrong("multi_head_attention", r"'softmax over the query axis'", listed=True)
class MHASoftmaxDimTwo(nn.Module):  # dim=2 "is the sequence axis": it is the queries
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.q, self.k, self.v, self.o = (nn.Linear(d_model, d_model) for _ in range(4))

    def forward(self, query, key, value, mask=None):
        q, k, v = (
            split_heads(f(x), self.h)
            for f, x in ((self.q, query), (self.k, key), (self.v, value))
        )
        w = F.softmax(q @ k.transpose(2, 3) / math.sqrt(q.size(3)), dim=2)
        return self.o(merge_heads(w @ v))


@wrong(
    "multi_head_attention",
    r"einsum over the wrong axes \(the seed's bug\)",
    listed=True,
)
class MHASeedEinsum(nn.Module):  # the seed's letters for [B, H, S, Dh] on [B, S, H, Dh]
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.q, self.k, self.v, self.o = (nn.Linear(d_model, d_model) for _ in range(4))

    def forward(self, query, key, value, mask=None):
        q = self.q(query).unflatten(-1, (self.h, -1))
        k = self.k(key).unflatten(-1, (self.h, -1))
        v = self.v(value).unflatten(-1, (self.h, -1))
        e = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(q.size(-1))
        return self.o(torch.einsum("bhql,bhlv->bhqv", e.softmax(3), v).flatten(2))


@wrong(
    "multi_head_attention",
    r"einsum over the wrong axes and scaled by sqrt\(d_model\) \(the seed's code\)",
    listed=True,
)
class MHASeedCode(nn.Module):  # the seed's einsum and its / embed_size ** 0.5, kept
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.embed_size, self.heads = d_model, n_heads
        self.head_dim = d_model // n_heads
        self.queries = nn.Linear(d_model, d_model)
        self.keys = nn.Linear(d_model, d_model)
        self.values = nn.Linear(d_model, d_model)
        self.fc_out = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        n = query.shape[0]
        q = self.queries(query).reshape(n, -1, self.heads, self.head_dim)
        k = self.keys(key).reshape(n, -1, self.heads, self.head_dim)
        v = self.values(value).reshape(n, -1, self.heads, self.head_dim)
        energy = torch.einsum("bhqd,bhkd->bhqk", q, k)
        attention = torch.softmax(energy / (self.embed_size ** (1 / 2)), dim=3)
        out = torch.einsum("bhql,bhlv->bhqv", attention, v)
        return self.fc_out(out.reshape(n, -1, self.embed_size))


@wrong("multi_head_attention", r"'sequence and head axes confused'", listed=True)
class MHASplitStraight(nn.Module):  # reshape straight to [B, H, S, Dh]
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.q, self.k, self.v, self.o = (nn.Linear(d_model, d_model) for _ in range(4))

    def forward(self, query, key, value, mask=None):
        q, k, v = (
            f(x).reshape(x.size(0), self.h, x.size(1), -1)
            for f, x in ((self.q, query), (self.k, key), (self.v, value))
        )
        w = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(-1)
        return self.o(merge_heads(w @ v))


@wrong("multi_head_attention", r"'merged without transpose'", listed=True)
class MHAMergeNoTranspose(nn.Module):  # reshape [B, H, S, Dh] straight to [B, S, D]
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.q, self.k, self.v, self.o = (nn.Linear(d_model, d_model) for _ in range(4))

    def forward(self, query, key, value, mask=None):
        q, k, v = (
            split_heads(f(x), self.h)
            for f, x in ((self.q, query), (self.k, key), (self.v, value))
        )
        out = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(-1) @ v
        return self.o(out.reshape(query.shape))


@wrong("multi_head_attention", r"'heads merged in the wrong order'", listed=True)
class MHAMergeDhMajor(nn.Module):  # permute(0, 2, 3, 1): Dh before H
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.q, self.k, self.v, self.o = (nn.Linear(d_model, d_model) for _ in range(4))

    def forward(self, query, key, value, mask=None):
        q, k, v = (
            split_heads(f(x), self.h)
            for f, x in ((self.q, query), (self.k, key), (self.v, value))
        )
        out = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(-1) @ v
        return self.o(out.permute(0, 2, 3, 1).flatten(2))


@wrong("multi_head_attention", r"'one Linear shared by all heads'", listed=True)
class MHASeedProjections(nn.Module):  # the seed: one Linear(Dh, Dh) for every head
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h, dh = n_heads, d_model // n_heads
        self.values = nn.Linear(dh, dh, bias=False)
        self.keys = nn.Linear(dh, dh, bias=False)
        self.queries = nn.Linear(dh, dh, bias=False)
        self.fc_out = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        q = self.queries(split_heads(query, self.h))
        k = self.keys(split_heads(key, self.h))
        v = self.values(split_heads(value, self.h))
        w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), dim=-1)
        return self.fc_out(merge_heads(w @ v))


@wrong(
    "multi_head_attention",
    r"'scores divided by the wrong number'.*that is d_head;",
    listed=False,
)
class MHADivideByDHead(nn.Module):  # forgot the square root: / Dh
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.o_proj = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        q = split_heads(self.q_proj(query), self.h)
        k = split_heads(self.k_proj(key), self.h)
        v = split_heads(self.v_proj(value), self.h)
        scores = q @ k.transpose(-2, -1) / q.size(-1)
        return self.o_proj(merge_heads(scores.softmax(-1) @ v))


@wrong(
    "multi_head_attention",
    r"'scores divided by the wrong number'.*multiplied by √d_head",
    listed=False,
)
class MHAMultipliesByScale(nn.Module):  # * √Dh where it should be / √Dh
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.scale = math.sqrt(d_model // n_heads)
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.o_proj = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        q = split_heads(self.q_proj(query), self.h)
        k = split_heads(self.k_proj(key), self.h)
        v = split_heads(self.v_proj(value), self.h)
        scores = q @ k.transpose(-2, -1) * self.scale
        return self.o_proj(merge_heads(scores.softmax(-1) @ v))


@wrong(
    "multi_head_attention",
    r"'scores divided by the wrong number'.*that is 2·d_head",
    listed=False,
)
class MHAPrecedenceSlip(nn.Module):  # d_head ** 1/2 is (d_head ** 1) / 2
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h, self.d_head = n_heads, d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.o_proj = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        q = split_heads(self.q_proj(query), self.h)
        k = split_heads(self.k_proj(key), self.h)
        v = split_heads(self.v_proj(value), self.h)
        scores = q @ k.transpose(-2, -1) / self.d_head**1 / 2
        return self.o_proj(merge_heads(scores.softmax(-1) @ v))


@wrong(
    "multi_head_attention",
    r"'scores divided by the wrong number'.*that is √n_heads",
    listed=False,
)
class MHAScaleByHeads(nn.Module):  # √(number of heads): the wrong size in the formula
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.o_proj = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        q = split_heads(self.q_proj(query), self.n_heads)
        k = split_heads(self.k_proj(key), self.n_heads)
        v = split_heads(self.v_proj(value), self.n_heads)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.n_heads)
        return self.o_proj(merge_heads(scores.softmax(-1) @ v))


@wrong(
    "multi_head_attention",
    r"'scores divided by the wrong number'.*a constant 8\b",
    listed=False,
)
class MHAPaperConstant(nn.Module):  # the paper's √64 = 8, hard-coded
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.o_proj = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        q = split_heads(self.q_proj(query), self.h)
        k = split_heads(self.k_proj(key), self.h)
        v = split_heads(self.v_proj(value), self.h)
        return self.o_proj(merge_heads(torch.softmax(q @ k.mT / 8.0, dim=-1) @ v))


@wrong(
    "multi_head_attention",
    r"'scores divided by the wrong number'.*√Sq, the square root of the query "
    r"length",
    listed=False,
)
class MHAScaleBySeqLen(nn.Module):  # q.size(-2) where q.size(-1) was meant
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.o_proj = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        q = split_heads(self.q_proj(query), self.h)
        k = split_heads(self.k_proj(key), self.h)
        v = split_heads(self.v_proj(value), self.h)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-2))
        return self.o_proj(merge_heads(scores.softmax(-1) @ v))


@wrong(
    "multi_head_attention",
    r"'softmax over the wrong axis'.*axis 1 \(the heads\)",
    listed=False,
)
class MHASoftmaxOverHeads(nn.Module):  # dim=1 "the first axis after the batch"
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.wq, self.wk, self.wv, self.wo = (
            nn.Linear(d_model, d_model) for _ in range(4)
        )

    def forward(self, query, key, value, mask=None):
        q = split_heads(self.wq(query), self.h)
        k = split_heads(self.wk(key), self.h)
        v = split_heads(self.wv(value), self.h)
        w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), dim=1)
        return self.wo(merge_heads(w @ v))


@wrong(
    "multi_head_attention",
    r"'softmax over the wrong axis'.*axis 0 \(the batch\)",
    listed=False,
)
class MHASoftmaxOverBatch(nn.Module):  # softmax(0): the default axis in some tutorials
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.wq, self.wk, self.wv, self.wo = (
            nn.Linear(d_model, d_model) for _ in range(4)
        )

    def forward(self, query, key, value, mask=None):
        q = split_heads(self.wq(query), self.h)
        k = split_heads(self.wk(key), self.h)
        v = split_heads(self.wv(value), self.h)
        w = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(0)
        return self.wo(merge_heads(w @ v))


@wrong(
    "multi_head_attention",
    r"2 mistakes at once: 'softmax over the wrong axis'.*axis 2 \(the queries"
    r"\).*'scores divided by the wrong number'.*that is d_model",
    listed=False,
)
class MHAQueriesAxisAndDModel(nn.Module):  # two slips: dim=-2 and / D
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h, self.d = n_heads, d_model
        self.wq, self.wk, self.wv, self.wo = (
            nn.Linear(d_model, d_model) for _ in range(4)
        )

    def forward(self, query, key, value, mask=None):
        q = split_heads(self.wq(query), self.h)
        k = split_heads(self.wk(key), self.h)
        v = split_heads(self.wv(value), self.h)
        w = (q @ k.transpose(-2, -1) / self.d).softmax(-2)
        return self.wo(merge_heads(w @ v))


@wrong(
    "multi_head_attention",
    r"'attention weights do not sum to 1'.*sum to 0\.4472 \(D=20, H=4\), "
    r"0\.5 \(D=16, H=4\)",
    listed=False,
)
class MHAScaleAfterSoftmax(nn.Module):  # the division moved after the softmax
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.wq, self.wk, self.wv, self.wo = (
            nn.Linear(d_model, d_model) for _ in range(4)
        )

    def forward(self, query, key, value, mask=None):
        q = split_heads(self.wq(query), self.h)
        k = split_heads(self.wk(key), self.h)
        v = split_heads(self.wv(value), self.h)
        w = (q @ k.transpose(-2, -1)).softmax(-1) / math.sqrt(q.size(-1))
        return self.wo(merge_heads(w @ v))


@wrong("multi_head_attention", r"'softmax missing'", listed=False)
class MHAForgotSoftmax(nn.Module):  # "scaled scores are the weights"
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.wq, self.wk, self.wv, self.wo = (
            nn.Linear(d_model, d_model) for _ in range(4)
        )

    def forward(self, query, key, value, mask=None):
        q = split_heads(self.wq(query), self.h)
        k = split_heads(self.wk(key), self.h)
        v = split_heads(self.wv(value), self.h)
        return self.wo(merge_heads(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)) @ v))


@wrong("multi_head_attention", r"'key and value swapped'", listed=False)
class MHAKeyValueSwapped(nn.Module):  # scores against v, weights over k
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.wq, self.wk, self.wv, self.wo = (
            nn.Linear(d_model, d_model) for _ in range(4)
        )

    def forward(self, query, key, value, mask=None):
        q = split_heads(self.wq(query), self.h)
        k = split_heads(self.wk(key), self.h)
        v = split_heads(self.wv(value), self.h)
        w = (q @ v.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(-1)
        return self.wo(merge_heads(w @ k))


@wrong(
    "multi_head_attention",
    r"'an input is never projected'.*applied to `key`",
    listed=False,
)
class MHASelfAttentionOnly(nn.Module):  # written for self-attention: key/value ignored
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.wq, self.wk, self.wv, self.wo = (
            nn.Linear(d_model, d_model) for _ in range(4)
        )

    def forward(self, query, key, value, mask=None):
        x = query
        q = split_heads(self.wq(x), self.h)
        k = split_heads(self.wk(x), self.h)
        v = split_heads(self.wv(x), self.h)
        w = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(-1)
        return self.wo(merge_heads(w @ v))


@wrong(
    "multi_head_attention",
    r"'an input is never projected'.*applied to `value`",
    listed=False,
)
class MHAValueFromKey(nn.Module):  # "keys and values are the same tokens": v from key
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.wq, self.wk, self.wv, self.wo = (
            nn.Linear(d_model, d_model) for _ in range(4)
        )

    def forward(self, query, key, value, mask=None):
        q = split_heads(self.wq(query), self.h)
        k = split_heads(self.wk(key), self.h)
        v = split_heads(self.wv(key), self.h)
        w = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(-1)
        return self.wo(merge_heads(w @ v))


@wrong(
    "multi_head_attention",
    r"'one projection applied to several inputs'.*`wk.weight` \[\d+, \d+\] is "
    r"applied to key and value",
    listed=False,
)
class MHAReusesKeyProjection(nn.Module):  # copy-paste: self.wk(value) for v
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.wq, self.wk, self.wv, self.wo = (
            nn.Linear(d_model, d_model) for _ in range(4)
        )

    def forward(self, query, key, value, mask=None):
        q = split_heads(self.wq(query), self.h)
        k = split_heads(self.wk(key), self.h)
        v = split_heads(self.wk(value), self.h)
        w = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(-1)
        return self.wo(merge_heads(w @ v))


@wrong(
    "multi_head_attention",
    r"'output projection missing'.*wo.weight \[\d+, \d+\]: no effect",
    listed=False,
)
class MHAForgotOutputProjection(nn.Module):  # defined wo, returned before using it
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.wq, self.wk, self.wv, self.wo = (
            nn.Linear(d_model, d_model) for _ in range(4)
        )

    def forward(self, query, key, value, mask=None):
        q = split_heads(self.wq(query), self.h)
        k = split_heads(self.wk(key), self.h)
        v = split_heads(self.wv(value), self.h)
        w = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(-1)
        return merge_heads(w @ v)


@wrong("multi_head_attention", r"'an input added to the output'.*`query`", listed=False)
class MHAAddsResidual(nn.Module):  # the block's residual, added inside attention
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.wq, self.wk, self.wv, self.wo = (
            nn.Linear(d_model, d_model) for _ in range(4)
        )

    def forward(self, query, key, value, mask=None):
        q = split_heads(self.wq(query), self.h)
        k = split_heads(self.wk(key), self.h)
        v = split_heads(self.wv(value), self.h)
        w = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(-1)
        return query + self.wo(merge_heads(w @ v))


@wrong("multi_head_attention", r"'dropout on in eval mode'", listed=False)
class MHAFunctionalDropout(nn.Module):  # F.dropout defaults to training=True
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.wq, self.wk, self.wv, self.wo = (
            nn.Linear(d_model, d_model) for _ in range(4)
        )

    def forward(self, query, key, value, mask=None):
        q = split_heads(self.wq(query), self.h)
        k = split_heads(self.wk(key), self.h)
        v = split_heads(self.wv(value), self.h)
        w = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(-1)
        return self.wo(merge_heads(F.dropout(w, p=0.1) @ v))


@wrong(
    "multi_head_attention", r"raised TypeError.*at line \d+ of your code", listed=False
)
class MHAMaskAlwaysApplied(nn.Module):  # masks unconditionally: mask=None breaks it
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.wq, self.wk, self.wv, self.wo = (
            nn.Linear(d_model, d_model) for _ in range(4)
        )

    def forward(self, query, key, value, mask=None):
        q = split_heads(self.wq(query), self.h)
        k = split_heads(self.wk(key), self.h)
        v = split_heads(self.wv(value), self.h)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        scores = scores.masked_fill(mask == 0, float("-inf"))
        return self.wo(merge_heads(scores.softmax(-1) @ v))


@wrong("multi_head_attention", r"expected a tensor of shape .*got tuple", listed=False)
class MHAReturnsWeightsToo(nn.Module):  # (out, weights) like nn.MultiheadAttention
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.wq, self.wk, self.wv, self.wo = (
            nn.Linear(d_model, d_model) for _ in range(4)
        )

    def forward(self, query, key, value, mask=None):
        q = split_heads(self.wq(query), self.h)
        k = split_heads(self.wk(key), self.h)
        v = split_heads(self.wv(value), self.h)
        w = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(-1)
        return self.wo(merge_heads(w @ v)), w


@wrong("multi_head_attention", r"'heads never split'", listed=False)
class MHASingleHead(nn.Module):  # projections right, but one attention over all of D
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.wq, self.wk, self.wv, self.wo = (
            nn.Linear(d_model, d_model) for _ in range(4)
        )

    def forward(self, query, key, value, mask=None):
        q, k, v = self.wq(query), self.wk(key), self.wv(value)
        w = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(q.size(-1)), dim=-1)
        return self.wo(w @ v)


@wrong(
    "multi_head_attention",
    r"'heads cut or merged in the wrong layout'.*every H-th "
    r"feature",
    listed=False,
)
class MHAInterleavedHeads(nn.Module):  # view(B, S, Dh, H): every H-th feature a head
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.wq, self.wk, self.wv, self.wo = (
            nn.Linear(d_model, d_model) for _ in range(4)
        )

    def split(self, x):
        b, s, d = x.shape
        return x.view(b, s, d // self.h, self.h).permute(0, 3, 1, 2)

    def forward(self, query, key, value, mask=None):
        q, k, v = (
            self.split(self.wq(query)),
            self.split(self.wk(key)),
            self.split(self.wv(value)),
        )
        w = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(-1)
        return self.wo(merge_heads(w @ v))


@wrong(
    "multi_head_attention",
    r"'number of heads fixed'.*4 heads whatever n_heads is",
    listed=False,
)
class MHAFixedFourHeads(nn.Module):  # n_heads ignored: 4 heads, as in the lesson
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = 4
        self.wq, self.wk, self.wv, self.wo = (
            nn.Linear(d_model, d_model) for _ in range(4)
        )

    def forward(self, query, key, value, mask=None):
        q, k, v = (
            split_heads(f(x), self.n_heads)
            for f, x in ((self.wq, query), (self.wk, key), (self.wv, value))
        )
        w = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(-1)
        return self.wo(merge_heads(w @ v))


@wrong("multi_head_attention", r"'causal mask without being asked'", listed=False)
class MHAAlwaysCausal(nn.Module):  # a decoder habit: tril mask built in
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.wq, self.wk, self.wv, self.wo = (
            nn.Linear(d_model, d_model) for _ in range(4)
        )

    def forward(self, query, key, value, mask=None):
        q, k, v = (
            split_heads(f(x), self.h)
            for f, x in ((self.wq, query), (self.wk, key), (self.wv, value))
        )
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        causal = torch.tril(
            torch.ones(scores.shape[-2:], dtype=torch.bool, device=scores.device)
        )
        scores = scores.masked_fill(~causal, float("-inf"))
        return self.wo(merge_heads(scores.softmax(-1) @ v))


@wrong("multi_head_attention", r"'input changed in place'.*`query`", listed=False)
class MHAScalesQueryInPlace(nn.Module):  # query *= s "saves a copy", edits the input
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.wq, self.wk, self.wv, self.wo = (
            nn.Linear(d_model, d_model) for _ in range(4)
        )

    def forward(self, query, key, value, mask=None):
        query *= (query.size(-1) // self.h) ** -0.5
        q, k, v = (
            split_heads(f(x), self.h)
            for f, x in ((self.wq, query), (self.wk, key), (self.wv, value))
        )
        return self.wo(merge_heads((q @ k.transpose(-2, -1)).softmax(-1) @ v))


@wrong(
    "multi_head_attention",
    r"'wrong number of heads'.*8 heads of 3 features.*"
    r"head size was passed where the head count goes",
    listed=False,
)
class MHASplitByHeadSize(nn.Module):  # split_heads(x, self.d_k): size for the count
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.d_k = d_model // n_heads
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_o = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        q = split_heads(self.w_q(query), self.d_k)
        k = split_heads(self.w_k(key), self.d_k)
        v = split_heads(self.w_v(value), self.d_k)
        w = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(-1)
        return self.w_o(merge_heads(w @ v))


@wrong(
    "multi_head_attention",
    r"'wrong number of heads'.*2 heads of 8 features "
    r"\(D=16, H=4\).*1 head of 12 features \(D=12, H=2\)",
    listed=False,
)
class MHAFixedHeadSize(nn.Module):  # "heads of 8 features", as in the lesson's figure
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.d_head = 8
        self.proj = nn.ModuleList(nn.Linear(d_model, d_model) for _ in range(4))

    def forward(self, query, key, value, mask=None):
        b, sq, d = query.shape
        heads = max(d // self.d_head, 1)
        q, k, v = (
            p(x).view(b, -1, heads, d // heads).transpose(1, 2)
            for p, x in zip(self.proj, (query, key, value))
        )
        w = torch.softmax(q @ k.transpose(-2, -1) * (d // heads) ** -0.5, dim=-1)
        return self.proj[3]((w @ v).transpose(1, 2).reshape(b, sq, d))


@wrong(
    "multi_head_attention", r"'gradient does not reach an input'.*`key`", listed=False
)
class MHADetachedMemory(nn.Module):  # "the encoder memory is fixed": detaches k and v
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.wq, self.wk, self.wv, self.wo = (
            nn.Linear(d_model, d_model) for _ in range(4)
        )

    def forward(self, query, key, value, mask=None):
        key, value = key.detach(), value.detach()
        q, k, v = (
            split_heads(f(x), self.h)
            for f, x in ((self.wq, query), (self.wk, key), (self.wv, value))
        )
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        return self.wo(merge_heads(scores.softmax(-1) @ v))


@wrong("multi_head_attention", r"'projection of the wrong size'", listed=False)
class MHAProjectsToDHead(nn.Module):  # the paper's W^Q is d_model × d_k: one head's
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h, self.d_k = n_heads, d_model // n_heads
        self.w_q = nn.Linear(d_model, self.d_k)
        self.w_k = nn.Linear(d_model, self.d_k)
        self.w_v = nn.Linear(d_model, self.d_k)
        self.w_o = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        q, k, v = self.w_q(query), self.w_k(key), self.w_v(value)
        w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(self.d_k), dim=-1)
        heads = [w @ v for _ in range(self.h)]  # Concat(head_1, ..., head_h)
        return self.w_o(torch.cat(heads, dim=-1))


@wrong("multi_head_attention", r"'attention weights do not sum to 1'", listed=False)
class MHADropoutScaledAtEval(nn.Module):  # the 2014 dropout paper: × (1 - p) at test
    def __init__(self, d_model, n_heads, dropout=0.1):
        super().__init__()
        self.h, self.p = n_heads, dropout
        self.wq, self.wk, self.wv, self.wo = (
            nn.Linear(d_model, d_model) for _ in range(4)
        )

    def forward(self, query, key, value, mask=None):
        q = split_heads(self.wq(query), self.h)
        k = split_heads(self.wk(key), self.h)
        v = split_heads(self.wv(value), self.h)
        w = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(-1)
        if self.training:
            w = F.dropout(w, self.p)
        else:
            w = w * (1 - self.p)
        return self.wo(merge_heads(w @ v))


@wrong(
    "multi_head_attention",
    r"^(?!.*divided by the wrong number).*'wrong number of heads'",
    listed=False,
)
class MHAHeadSizeAsCount(nn.Module):
    # Splits into d_head "heads" (the arguments of split_heads mixed up) but keeps
    # the scale of the real head size: only the head count is wrong.
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.d_head = d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        q = split_heads(self.q_proj(query), self.d_head)
        k = split_heads(self.k_proj(key), self.d_head)
        v = split_heads(self.v_proj(value), self.d_head)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
        return self.out_proj(merge_heads(scores.softmax(-1) @ v))


@wrong(
    "multi_head_attention",
    r"matmul of \[[^]]*\] float32 and \[[^]]*\] float64; the first's float32 "
    r"comes from `float\(\)` of",
    listed=False,
)
class MHAWeightsInFloat32(nn.Module):
    # "softmax in float32 for stability", and the weights stay float32
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        q = split_heads(self.q_proj(query), self.n_heads)
        k = split_heads(self.k_proj(key), self.n_heads)
        v = split_heads(self.v_proj(value), self.n_heads)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        weights = torch.softmax(scores.float(), dim=-1)
        return self.out_proj(merge_heads(weights @ v))
