"""What the checks see of a learner's block through its mirror: PyTorch's layers and
the reference's modules as their own classes, the calls made inside the kernel's
forward replayed into the checks' hooks and recorders, and submodules a check replaced
used by the kernel's forward (tformer_grading/judge/mirror.py and agent.py, over the
wire, with a link in this process)."""

import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tformer_grading.checks.measure.trace import NORMS, Trace, trace
from tformer_grading.judge.mirror import MAX_EVENTS, RemoteModule
from tformer_grading.judge.remote import JudgeError, Kernel, LocalLink
from tformer_grading.judge.wire import encode
from tformer_ref.attention import MultiHeadAttention


class HandNorm(nn.Module):
    """A LayerNorm written by hand, as a learner writes one."""

    def __init__(self, d):
        super().__init__()
        self.gain = nn.Parameter(torch.ones(d))
        self.shift = nn.Parameter(torch.zeros(d))

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return self.gain * (x - mean) / torch.sqrt(var + 1e-5) + self.shift


class Block(nn.Module):
    """A learner's Post-LN block: the reference's attention, a feed-forward of its own,
    one nn.LayerNorm and one norm written by hand."""

    def __init__(self, d, heads, d_ff):
        super().__init__()
        self.attn = MultiHeadAttention(d, heads)
        self.ff = nn.Sequential(nn.Linear(d, d_ff), nn.ReLU(), nn.Linear(d_ff, d))
        self.norm1 = nn.LayerNorm(d)
        self.norm2 = HandNorm(d)

    def forward(self, x):
        x = self.norm1(x + self.attn(x, x, x))
        return self.norm2(x + self.ff(x))


def _norm_weight(event):
    """The weight of a recorded layer_norm call (LayerNorm passes it by keyword)."""
    return event.args[2] if len(event.args) > 2 else event.kwargs["weight"]


@pytest.fixture
def kernel():
    return Kernel(LocalLink({"Block": Block, "HandNorm": HandNorm}))


def _local_twin(mirror):
    torch.manual_seed(0)
    here = Block(8, 2, 16)
    here.load_state_dict(mirror.state_dict())
    return here.train(mirror.training)


def test_pytorch_layers_and_the_reference_modules_are_their_own_classes_here(kernel):
    mirror = kernel.lookup("Block")(8, 2, 16)
    assert isinstance(mirror, RemoteModule) and isinstance(mirror.norm2, RemoteModule)
    assert isinstance(mirror.attn, MultiHeadAttention)
    assert isinstance(mirror.ff[0], nn.Linear) and isinstance(mirror.ff, nn.Sequential)
    assert mirror.ff[0].out_features == 16 and mirror.attn.n_heads == 2
    x = torch.randn(2, 5, 8)
    here = _local_twin(mirror.eval()).eval()
    # Called by itself, the reference's attention runs here.
    assert torch.allclose(mirror.attn(x, x, x), here.attn(x, x, x))
    assert torch.allclose(mirror(x), here(x), atol=1e-6)


def test_the_class_of_a_learner_module_builds_another_in_the_kernel(kernel):
    mirror = kernel.lookup("Block")(8, 2, 16)
    other = type(mirror.norm2)(3)
    assert isinstance(other, RemoteModule) and type(other).__name__ == "HandNorm"
    assert [tuple(p.shape) for p in other.parameters()] == [(3,), (3,)]
    assert torch.allclose(
        other(torch.tensor([[1.0, 2.0, 3.0]])).mean(), torch.zeros(())
    )


def test_the_calls_inside_the_kernel_forward_reach_the_hooks_and_recorders(kernel):
    """The same events, in the same order, as the same trace of the same module run
    here; the recorded weights are the mirror's own tensors."""
    mirror = kernel.lookup("Block")(8, 2, 16).eval()
    here = _local_twin(mirror).eval()
    x = torch.randn(2, 5, 8)
    seen = []
    for block in (mirror, here):
        watched = [("attn", block.attn), ("ff", block.ff), ("norm2", block.norm2)]
        with torch.no_grad(), trace(watched, NORMS, {"w2": block.ff[2].weight}) as ev:
            block(x)
        seen.append(Trace(ev))
    theirs, ours = seen
    assert [e.kind for e in theirs.events] == [e.kind for e in ours.events]
    assert [e.kind for e in ours.events] == [
        "attn", "layer_norm", "w2", "ff", "norm2",
    ]  # fmt: skip
    for a, b in zip(theirs.events, ours.events):
        assert torch.allclose(a.out, b.out, atol=1e-6) and torch.allclose(a.inp, b.inp)
    attn = theirs.first("attn")
    assert len(attn.args) == 4 and attn.args[3] is None  # bound as the reference's
    assert theirs.first("w2").args[1] is mirror.ff[2].weight
    assert _norm_weight(theirs.first("layer_norm")) is mirror.norm1.weight


def test_nothing_is_recorded_when_nothing_watches(kernel):
    mirror = kernel.lookup("Block")(8, 2, 16)
    with trace([("norm2", mirror.norm2)]) as events:
        pass
    mirror(torch.randn(1, 3, 8))
    assert events == [] and not mirror.norm2._forward_hooks


def test_a_submodule_a_check_replaces_is_the_one_the_kernel_forward_uses(kernel):
    """As adopt_hand_written_norms does: an nn.LayerNorm on the hand-written norm's own
    gain and bias. The kernel's forward then calls layer_norm, on those parameters,
    and their gradients come back to them."""
    mirror = kernel.lookup("Block")(8, 2, 16).eval()
    here = _local_twin(mirror).eval()
    for block in (mirror, here):
        norm = nn.LayerNorm(8)
        norm.weight, norm.bias = block.norm2.gain, block.norm2.shift
        block.norm2 = norm
    x = torch.randn(2, 5, 8)
    with trace(names=NORMS) as events:
        out = mirror(x)
    assert [e.kind for e in events] == ["layer_norm", "layer_norm"]
    assert _norm_weight(events[1]) is mirror.norm2.weight
    out.pow(2).sum().backward()
    here(x).pow(2).sum().backward()
    assert torch.allclose(out, here(x), atol=1e-6)
    assert torch.allclose(mirror.norm2.weight.grad, here.norm2.weight.grad, atol=1e-5)


def test_a_submodule_replaced_by_what_cannot_cross_is_the_checks_error(kernel):
    mirror = kernel.lookup("Block")(8, 2, 16)
    mirror.norm2 = nn.Bilinear(8, 8, 8)
    with pytest.raises(RuntimeError, match="'norm2' replaced by a Bilinear"):
        mirror(torch.randn(1, 3, 8))


class Rewrites(LocalLink):
    """A kernel whose answers to a forward have their events rewritten."""

    def __init__(self, namespace, rewrite):
        super().__init__(namespace)
        self.rewrite = rewrite

    def ask(self, request: str) -> str:
        answer = super().ask(request)
        if json.loads(request)["op"] != "forward":
            return answer
        found = json.loads(answer)
        found["events"] = self.rewrite(found.get("events", []))
        return json.dumps(found)


def _event(at=0):
    return ["hook", at, [["v", json.loads(encode(torch.zeros(2)))]], {}, None]


FORGED_EVENTS = {
    "not a list": lambda events: {"a": 1},
    "a module not watched": lambda events: [_event(at=0)],
    "a slot past the tensors": lambda events: [
        ["call", "layer_norm", [["s", 999]], {}, None]
    ],
    "a function not watched": lambda events: [["call", "system", [], {}, None]],
    "an argument without its mark": lambda events: [["hook", 1, [3], {}, None]],
    "too many": lambda events: [events[0]] * (MAX_EVENTS + 1),
}


@pytest.mark.parametrize("why", FORGED_EVENTS)
def test_forged_events_fail_the_cell_and_reach_no_hook(why):
    kernel = Kernel(Rewrites({"Block": Block}, FORGED_EVENTS[why]))
    mirror = kernel.lookup("Block")(8, 2, 16)
    invalid = pytest.raises(JudgeError, match="the kernel's answer is not valid")
    with trace([("attn", mirror.attn)], NORMS) as events, invalid:
        mirror(torch.randn(1, 3, 8))
    assert events == []


def test_a_kernel_that_reports_nothing_leaves_the_checks_nothing_to_read():
    """Events are the kernel's word: one that reports none gives the checks' recorders
    nothing (a check then cannot measure what it watched; it never reads that as a
    pass of the behaviour the judge measures itself)."""
    kernel = Kernel(Rewrites({"Block": Block}, lambda events: []))
    mirror = kernel.lookup("Block")(8, 2, 16)
    with trace([("attn", mirror.attn)], NORMS) as events:
        out = mirror(torch.randn(1, 3, 8))
    assert events == [] and out.shape == (1, 3, 8)


def test_the_function_call_recorder_reads_the_same_calls_it_would_here():
    first, second = nn.Linear(4, 8), nn.Linear(8, 4)
    x = torch.randn(3, 4)
    with trace(names=NORMS, linears={"ff2": second.weight}) as events:
        second(F.relu(first(x)))
    assert [e.kind for e in events] == ["ff2"] and events[0].args[1] is second.weight
