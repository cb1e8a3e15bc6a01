"""A LayerNorm written by hand is judged by what it does (teaching review of
2026-12-05, chapters 1-4, M10).

Bug: exercise 4 rejected the Annotated Transformer's LayerNorm, written by hand with an
unbiased std and eps = 1e-6, and an nn.LayerNorm with eps = 1e-6, although the checks
say they judge what a module does. Cause: the checks saw norms only through their
``layer_norm`` calls and read the eps from the call. Guard:
``blocks.adopt_hand_written_norms`` recognises a norm by its outputs and grades it as
the nn.LayerNorm it stands for; ``ch04.encoder_block._check_eps`` measures what the
eps changes. The bank (bank_encoder_block.py) holds the whole blocks; these are the
parts.
"""

import pytest
import torch
import torch.nn as nn

from tformer_grading.checks.blocks import adopt_hand_written_norms


class AnnotatedLayerNorm(nn.Module):
    def __init__(self, features, eps=1e-6):
        super().__init__()
        self.a_2 = nn.Parameter(torch.ones(features))
        self.b_2 = nn.Parameter(torch.zeros(features))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        std = x.std(-1, keepdim=True)
        return self.a_2 * (x - mean) / (std + self.eps) + self.b_2


class BiasFirst(nn.Module):  # the bias registered before the gain
    def __init__(self, d):
        super().__init__()
        self.shift = nn.Parameter(torch.zeros(d))
        self.scale = nn.Parameter(torch.ones(d))

    def forward(self, x):
        var = x.var(-1, keepdim=True, unbiased=False)
        centred = x - x.mean(-1, keepdim=True)
        return centred / torch.sqrt(var + 1e-5) * self.scale + self.shift


class RMSNormByHand(nn.Module):  # no centring: another normalisation
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))

    def forward(self, x):
        return self.weight * x / x.pow(2).mean(-1, keepdim=True).sqrt() + self.bias


class OverTheSequence(AnnotatedLayerNorm):  # statistics over dim 1, not the features
    def forward(self, x):
        mean, std = x.mean(1, keepdim=True), x.std(1, keepdim=True)
        return self.a_2 * (x - mean) / (std + self.eps) + self.b_2


class Raises(AnnotatedLayerNorm):
    def forward(self, x):
        raise RuntimeError("not yet")


class Holder(nn.Module):
    def __init__(self, norm_cls, d=12):
        super().__init__()
        self.norms = nn.ModuleList([norm_cls(d), norm_cls(d)])
        self.lin = nn.Linear(d, d)


@pytest.mark.parametrize("norm_cls", [AnnotatedLayerNorm, BiasFirst])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_norm_written_by_hand_becomes_an_nn_layer_norm_on_its_own_parameters(
    norm_cls, dtype
):
    holder = Holder(norm_cls).to(dtype)
    mine = [list(n.parameters()) for n in holder.norms]
    adopt_hand_written_norms(holder)
    for norm, params in zip(holder.norms, mine):
        assert isinstance(norm, nn.LayerNorm)
        assert {id(norm.weight), id(norm.bias)} == {id(p) for p in params}
        assert norm.weight.dtype == dtype
    # The gain is the parameter that scales, whatever its name and order.
    gain = holder.norms[0].weight
    assert gain is (mine[0][0] if norm_cls is AnnotatedLayerNorm else mine[0][1])
    # The probe leaves the learner's values as they were.
    assert torch.equal(gain, torch.ones(12, dtype=dtype))
    assert torch.equal(holder.norms[0].bias, torch.zeros(12, dtype=dtype))


@pytest.mark.parametrize("norm_cls", [RMSNormByHand, OverTheSequence, Raises])
def test_what_does_not_normalise_each_token_is_left_alone(norm_cls):
    holder = Holder(norm_cls)
    adopt_hand_written_norms(holder)
    assert all(type(n) is norm_cls for n in holder.norms)
    assert isinstance(holder.lin, nn.Linear)
