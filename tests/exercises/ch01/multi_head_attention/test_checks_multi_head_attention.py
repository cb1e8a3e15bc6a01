"""multi_head_attention (chapter 1, book/ch01_shapes): the unit tests of
``ch01.check_multi_head_attention``, its behaviour probes
(``check_multi_head_attention_behaviour``) and its hidden "written by hand" test.

Beyond the bank (bank_multi_head_attention.py): the parameter counts and lesson
pointer of the shared-Linear diagnosis, the measured score divisor, projections found
by what they do rather than by their order, a constructor that raises, and silence on
stderr (nbgrader gives a test cell zero when it writes there).

Each wrong implementation records a bug a learner can make, why it happens, and what
guards against it: the diagnosis the check must print.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tformer_grading.checks import CheckFailure, ch01

# --------------------------------------------------------------------------- MultiHeadAttention


class MHA(nn.Module):
    """A right implementation in three steps; each wrong one below rewrites one."""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.wq, self.wk, self.wv, self.wo = (
            nn.Linear(d_model, d_model) for _ in range(4)
        )

    def split(self, x):
        b, s, d = x.shape
        return x.view(b, s, self.h, d // self.h).transpose(1, 2)

    def merge(self, x):
        b, h, s, dh = x.shape
        return x.transpose(1, 2).reshape(b, s, h * dh)

    def attend(self, q, k, v):
        return (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(-1) @ v

    def forward(self, query, key, value, mask=None):
        q, k, v = (
            self.split(self.wq(query)),
            self.split(self.wk(key)),
            self.split(self.wv(value)),
        )
        return self.wo(self.merge(self.attend(q, k, v)))


class RightNoBias(MHA):
    def __init__(self, d_model, n_heads):
        super().__init__(d_model, n_heads)
        self.wq, self.wk, self.wv, self.wo = (
            nn.Linear(d_model, d_model, bias=False) for _ in range(4)
        )


class RightEinsum(MHA):
    def attend(self, q, k, v):
        w = torch.einsum("bhqd,bhkd->bhqk", q, k).div(q.size(-1) ** 0.5).softmax(-1)
        return torch.einsum("bhqk,bhkd->bhqd", w, v)


class RightFusedQKV(nn.Module):
    """One Linear(D, 3D) for q, k, v; heads kept as [B, S, H, Dh] and contracted with einsum."""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        wq, wk, wv = self.qkv.weight.chunk(3)
        bq, bk, bv = self.qkv.bias.chunk(3)
        q = F.linear(query, wq, bq).unflatten(-1, (self.h, -1))  # [B, Sq, H, Dh]
        k = F.linear(key, wk, bk).unflatten(-1, (self.h, -1))
        v = F.linear(value, wv, bv).unflatten(-1, (self.h, -1))
        w = torch.einsum("bqhd,bkhd->bhqk", q, k).div(math.sqrt(q.size(-1))).softmax(-1)
        return self.out(torch.einsum("bhqk,bkhd->bqhd", w, v).flatten(2))


class RightPerHeadLoop(MHA):
    """Heads computed one at a time from slices of the projections, then concatenated."""

    def forward(self, query, key, value, mask=None):
        q, k, v = self.wq(query), self.wk(key), self.wv(value)
        dh = q.size(-1) // self.h
        outs = []
        for i in range(self.h):
            sl = slice(i * dh, (i + 1) * dh)
            w = torch.softmax(q[..., sl] @ k[..., sl].transpose(1, 2) / dh**0.5, dim=-1)
            outs.append(w @ v[..., sl])
        return self.wo(torch.cat(outs, dim=-1))


class WrongScaleDModel(MHA):
    def attend(self, q, k, v):  # the seed's embed_size ** 0.5: √D, not √Dh
        d_model = self.h * q.size(-1)
        return torch.softmax(q @ k.mT / d_model**0.5, dim=-1) @ v


class WrongNoScaling(MHA):
    def attend(self, q, k, v):  # forgot the 1/√Dh
        weights = torch.einsum("bhqd,bhkd->bhqk", q, k).softmax(dim=-1)
        return torch.einsum("bhqk,bhkd->bhqd", weights, v)


class WrongSoftmaxAxis(MHA):
    def attend(self, q, k, v):  # dim=2 looks like "the sequence axis": the queries
        return F.softmax(q @ k.transpose(2, 3) / math.sqrt(q.size(3)), dim=2) @ v


class WrongSplitStraight(MHA):
    def split(self, x):  # right shape, but tokens are cut into heads
        return x.reshape(x.size(0), self.h, x.size(1), -1)


class WrongMergeNoTranspose(MHA):
    def merge(self, x):  # reads [B, H, S, Dh] memory as [B, S, D]: tokens glued
        return x.reshape(x.size(0), -1, self.h * x.size(-1))


class WrongMergeDhMajor(MHA):
    def merge(self, x):  # [B, S, Dh, H] flattened: the heads' features interleaved
        return x.transpose(1, 2).transpose(2, 3).flatten(2)


class WrongSeedEinsum(MHA):
    """The seed's bug spelled with matmul: heads left as [B, S, H, Dh], so q @ kᵀ
    attends across the heads of one token and tokens never mix."""

    def split(self, x):  # forgot .transpose(1, 2)
        b, s, d = x.shape
        return x.view(b, s, self.h, d // self.h)

    def merge(self, x):
        return x.flatten(2)


class WrongSeedCode(MHA):
    """Both of the seed's bugs: heads never moved next to the batch, scores over √D."""

    def split(self, x):  # [B, S, H, Dh]: the head axis stays where it was
        return x.unflatten(-1, (self.h, -1))

    def merge(self, x):
        return x.flatten(2)

    def attend(self, q, k, v):  # divided by √embed_size, not √head_dim
        return (q @ k.mT / math.sqrt(self.h * q.size(-1))).softmax(-1) @ v


class WrongSharedPerHeadLinear(nn.Module):
    """The seed's projections: one Linear(Dh, Dh) applied to every head's slice."""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h, dh = n_heads, d_model // n_heads
        self.values, self.keys, self.queries = (
            nn.Linear(dh, dh, bias=False) for _ in range(3)
        )
        self.fc_out = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        n = query.size(0)
        q = self.queries(query.reshape(n, query.size(1), self.h, -1)).transpose(1, 2)
        k = self.keys(key.reshape(n, key.size(1), self.h, -1)).transpose(1, 2)
        v = self.values(value.reshape(n, value.size(1), self.h, -1)).transpose(1, 2)
        w = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(-1)
        return self.fc_out((w @ v).transpose(1, 2).reshape(n, query.size(1), -1))


class WrongNoTokenMixing(MHA):
    """Attends only to itself: every row of weights is one-hot on the diagonal."""

    def attend(self, q, k, v):
        return v


class WrongBatchLeak(MHA):
    """Softmax over the batch axis mixes sequences of the batch."""

    def attend(self, q, k, v):
        return (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(0) @ v


class WrongDropoutInEval(MHA):
    def attend(self, q, k, v):
        w = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(-1)
        return F.dropout(w, 0.5, training=True) @ v


class WrongCallsSDPA(MHA):
    def attend(self, q, k, v):
        from torch.nn.functional import (
            scaled_dot_product_attention as sdpa,
        )  # an alias does not hide it

        return sdpa(q, k, v)


class WrongWrapsTorch(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.mha = nn.MultiheadAttention(d_model, n_heads, batch_first=True)

    def forward(self, query, key, value, mask=None):
        return self.mha(query, key, value, need_weights=False)[0]


class WrongWrapsReference(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        from tformer_ref.attention import MultiHeadAttention

        self.inner = MultiHeadAttention(d_model, n_heads)

    def forward(self, query, key, value, mask=None):
        return self.inner(query, key, value)


RIGHT = [MHA, RightNoBias, RightEinsum, RightFusedQKV, RightPerHeadLoop]


@pytest.mark.parametrize("cls", RIGHT)
def test_mha_accepts_right_implementations(cls, capsys):
    ch01.check_multi_head_attention(cls)
    ch01.check_multi_head_attention_behaviour(cls)
    ch01.check_multi_head_attention_by_hand(cls)
    out = capsys.readouterr().out
    assert out.count("✓ MultiHeadAttention") == 3


@pytest.mark.parametrize(
    "cls,diagnosis",
    [
        (WrongScaleDModel, r"'scaled by sqrt\(d_model\)'"),
        (WrongNoScaling, "'no scaling'"),
        (WrongSoftmaxAxis, "softmax over the query axis"),
        (WrongSplitStraight, "sequence and head axes confused"),
        (WrongMergeNoTranspose, "merged without transpose"),
        (WrongMergeDhMajor, "heads merged in the wrong order"),
        (WrongSeedEinsum, r"einsum over the wrong axes \(the seed's bug\)"),
        (WrongSeedCode, r"scaled by sqrt\(d_model\) \(the seed's code\)"),
        (WrongSharedPerHeadLinear, "one Linear shared by all heads"),
        (WrongNoTokenMixing, r"one row per \*key\* \(Sk = 7\)"),
    ],
)
def test_mha_rejects_wrong_implementations(cls, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch01.check_multi_head_attention(cls)


def test_shared_linear_diagnosis_gives_the_parameter_counts():
    with pytest.raises(CheckFailure) as info:
        ch01.check_multi_head_attention(WrongSharedPerHeadLinear)
    message = str(info.value)
    assert (
        "495 parameters" in message
        and "4·(D²+D) = 1,680" in message
        and "§1.8 'Per-head projections'" in message
    )


@pytest.mark.parametrize(
    "cls,diagnosis",
    [
        (
            WrongSeedEinsum,
            "'tokens never mix'. Changing token 5 changed no other position",
        ),
        (WrongNoTokenMixing, "'tokens never mix'"),
        (
            WrongBatchLeak,
            "'batch entries leak into each other'.*batch entries are leaking",
        ),
        (
            WrongDropoutInEval,
            "'dropout on in eval mode'.*Dropout must be off in eval mode",
        ),
    ],
)
def test_behaviour_probes_reject(cls, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch01.check_multi_head_attention_behaviour(cls)


@pytest.mark.parametrize(
    "cls,diagnosis",
    [
        (WrongCallsSDPA, "calls scaled_dot_product_attention"),
        (WrongWrapsTorch, "contains torch.nn.modules.activation.MultiheadAttention"),
        (WrongWrapsReference, "contains tformer_ref.attention.MultiHeadAttention"),
    ],
)
def test_by_hand_rejects_delegation(cls, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch01.check_multi_head_attention_by_hand(cls)


def test_constructor_errors_become_check_failures():
    class Broken(nn.Module):
        def __init__(self, d_model, n_heads):
            raise NotImplementedError()

    with pytest.raises(CheckFailure, match="raised NotImplementedError"):
        ch01.check_multi_head_attention(Broken)


def test_checks_write_nothing_to_stderr(capfd):
    """nbgrader gives a test cell zero when it writes to stderr, even if it passes."""
    ch01.check_multi_head_attention(MHA)
    with pytest.raises(CheckFailure):
        ch01.check_multi_head_attention(WrongScaleDModel)
    assert capfd.readouterr().err == ""


class RightOutFirstFusedPerHead(nn.Module):
    """Output projection registered first; q, k, v fused per head ([h0: q k v, ...])."""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.o = nn.Linear(d_model, d_model, bias=False)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.h = n_heads

    def forward(self, query, key, value, mask=None):
        h, d = self.h, query.size(-1)
        w, b = self.qkv.weight.view(h, 3, d // h, d), self.qkv.bias.view(h, 3, d // h)
        q, k, v = (
            F.linear(x, w[:, i].reshape(d, d), b[:, i].reshape(d)).unflatten(
                -1, (h, -1)
            )
            for i, x in enumerate((query, key, value))
        )
        att = torch.einsum("bqhd,bkhd->bhqk", q, k).div(math.sqrt(d // h)).softmax(-1)
        return self.o(torch.einsum("bhqk,bkhd->bqhd", att, v).flatten(2))


class WrongDividesByDh(MHA):
    def attend(self, q, k, v):  # forgot the square root
        return (q @ k.transpose(-2, -1) / q.size(-1)).softmax(-1) @ v


def test_mha_finds_projections_by_behaviour_not_order(capsys):
    ch01.check_multi_head_attention(RightOutFirstFusedPerHead)
    assert "✓ MultiHeadAttention" in capsys.readouterr().out


def test_mha_measures_the_score_divisor():
    measured = (
        r"divided by 5 \(D=20, H=4\), 4 \(D=16, H=4\), 8 \(D=24, H=3\).*"
        r"that is d_head; "
        r"expected √Dh = 2"
    )
    with pytest.raises(CheckFailure, match=measured):
        ch01.check_multi_head_attention(WrongDividesByDh)
