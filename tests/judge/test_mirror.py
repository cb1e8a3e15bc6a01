"""The learner's modules as the judge sees them: mirrors built from the kernel's
description, whose forward runs in the kernel (tformer_grading/judge/mirror.py and
agent.py, over the wire, with a link in this process)."""

import copy
import json

import pytest
import torch
from torch import nn

from tformer_grading.judge.mirror import RemoteModule
from tformer_grading.judge.remote import JudgeError, Kernel, LocalLink
from tformer_grading.judge.wire import encode


class Tied(nn.Module):
    """A learner's model: an embedding whose weight the output layer shares, a
    Sequential, a dropout, a buffer that is not saved, and no bias on the head."""

    def __init__(self, vocab, d):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.body = nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Dropout(0.5))
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.embed.weight
        self.register_buffer("scale", torch.tensor(2.0), persistent=False)

    def forward(self, tokens):
        return self.head(self.body(self.embed(tokens)) * self.scale)


class Counting(nn.Module):
    """A running statistic, updated in place by forward in training mode."""

    def __init__(self):
        super().__init__()
        self.register_buffer("seen", torch.zeros(()))

    def forward(self, x):
        if self.training:
            self.seen += x.numel()
        return x * 2


class Refuses(nn.Module):
    def __init__(self, d):
        raise ValueError(f"no module of size {d}")


class NotAModule:
    def __init__(self, n):
        self.n = n


@pytest.fixture
def kernel():
    namespace = {
        "Tied": Tied,
        "Counting": Counting,
        "Refuses": Refuses,
        "NotAModule": NotAModule,
        "Linear": nn.Linear,
    }
    return Kernel(LocalLink(namespace))


def test_the_mirror_has_the_learner_modules_names_parameters_and_flags(kernel):
    torch.manual_seed(0)
    mirror = kernel.lookup("Tied")(7, 4)
    here = Tied(7, 4)
    assert isinstance(mirror, nn.Module) and isinstance(mirror, RemoteModule)
    assert type(mirror).__name__ == "Tied"
    assert [n for n, _ in mirror.named_parameters()] == [
        n for n, _ in here.named_parameters()
    ]
    assert mirror.head.weight is mirror.embed.weight  # tied stays tied
    assert [n for n, _ in mirror.named_modules()] == [
        n for n, _ in here.named_modules()
    ]
    assert list(mirror.state_dict()) == list(here.state_dict())  # scale not saved
    assert mirror.training and mirror.get_submodule("body.2").training


def test_a_class_built_in_the_kernel_is_a_class_here(kernel):
    cls = kernel.lookup("Tied")
    assert isinstance(cls, type) and cls.__name__ == "Tied"


def test_the_module_is_built_with_a_seed_of_the_judge(kernel):
    torch.manual_seed(3)
    first = kernel.lookup("Tied")(7, 4).embed.weight.detach().clone()
    torch.manual_seed(3)
    again = kernel.lookup("Tied")(7, 4).embed.weight.detach().clone()
    other = kernel.lookup("Tied")(7, 4).embed.weight.detach().clone()
    assert torch.equal(first, again) and not torch.equal(first, other)


def test_what_the_checks_do_to_the_mirror_the_kernel_module_computes_with(kernel):
    """dtype, eval mode and weights loaded in place all reach the kernel's module."""
    mirror = kernel.lookup("Tied")(7, 4).double().eval()
    with torch.no_grad():
        for p in mirror.parameters():
            p.copy_(torch.linspace(-1, 1, p.numel(), dtype=p.dtype).view_as(p))
    here = Tied(7, 4).double().eval()
    here.load_state_dict(mirror.state_dict())
    tokens = torch.tensor([[1, 2, 3]])
    out = mirror(tokens)
    assert out.dtype == torch.float64
    assert torch.equal(out, here(tokens))  # eval: no dropout, the same both ways


def test_gradients_reach_the_mirror_parameters_as_local_autograd_gives(kernel):
    mirror = kernel.lookup("Tied")(7, 4).double().eval()
    here = Tied(7, 4).double().eval()
    here.load_state_dict(mirror.state_dict())
    tokens = torch.tensor([[1, 2, 3], [4, 5, 6]])
    upstream = torch.randn(2, 3, 7, dtype=torch.float64)
    (mirror(tokens) * upstream).sum().backward()
    (here(tokens) * upstream).sum().backward()
    for (name, p), q in zip(mirror.named_parameters(), here.parameters()):
        assert torch.allclose(p.grad, q.grad), name


def test_gradients_reach_the_inputs_and_frozen_parameters_get_none(kernel):
    mirror = kernel.lookup("Linear")(3, 2).double()
    mirror.weight.requires_grad_(False)
    x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    mirror(x).sum().backward()
    assert mirror.weight.grad is None and mirror.bias.grad is not None
    assert torch.allclose(x.grad, mirror.weight.sum(0).expand(4, 3))


def test_dropout_differs_from_call_to_call_in_training_and_not_in_eval(kernel):
    mirror = kernel.lookup("Tied")(7, 4)
    tokens = torch.arange(7).repeat(20, 1)
    assert not torch.equal(mirror(tokens), mirror(tokens))
    mirror.eval()
    assert torch.equal(mirror(tokens), mirror(tokens))


def test_the_kernel_random_state_is_left_as_it_was():
    link = LocalLink({"Tied": Tied})
    kernel = Kernel(link)
    mirror = kernel.lookup("Tied")(7, 4)
    before = torch.get_rng_state()
    request = {
        "op": "forward",
        "ref": mirror._judge_tree.ref,
        "node": 0,
        "args": json.loads(encode([torch.arange(7).view(1, 7)])),
        "kwargs": {},
        "state": json.loads(encode(list(mirror.state_dict(keep_vars=True).values()))),
        "training": [True] * len(list(mirror.modules())),
        "grad": False,
        "seed": 5,
    }
    assert "value" in json.loads(link.ask(json.dumps(request)))
    assert torch.equal(torch.get_rng_state(), before)


def test_a_buffer_the_forward_changes_is_changed_in_the_mirror(kernel):
    mirror = kernel.lookup("Counting")()
    mirror(torch.ones(2, 3))
    mirror(torch.ones(5))
    assert mirror.seen.item() == 11.0
    mirror.eval()
    mirror(torch.ones(4))
    assert mirror.seen.item() == 11.0


def test_a_deep_copy_computes_with_its_own_weights(kernel):
    mirror = kernel.lookup("Linear")(3, 2)
    twin = copy.deepcopy(mirror)
    with torch.no_grad():
        twin.weight.zero_()
        twin.bias.fill_(1.0)
    x = torch.randn(4, 3)
    assert torch.equal(twin(x), torch.ones(4, 2))
    assert torch.allclose(mirror(x), x @ mirror.weight.T + mirror.bias)


def test_the_learner_error_in_the_constructor_is_raised_here(kernel):
    with pytest.raises(ValueError, match="no module of size 3"):
        kernel.lookup("Refuses")(3)


def test_a_class_that_makes_no_module_gives_its_object(kernel):
    made = kernel.lookup("NotAModule")(3)
    assert not isinstance(made, nn.Module) and "NotAModule" in repr(made)


class Forged:
    """A kernel whose agent answers a build with ``tree``."""

    def __init__(self, tree):
        self.tree = tree

    def ask(self, request: str) -> str:
        op = json.loads(request)["op"]
        if op == "lookup":
            return json.dumps(
                {"value": {"$": "ref", "id": 1, "kind": "class", "type": "Evil"}}
            )
        value = {"$": "ref", "id": 2, "kind": "callable", "type": "Evil"}
        return json.dumps({"value": value, "tree": json.loads(encode(self.tree))})


def _node(params=(), buffers=(), children=(), kind="Evil"):
    return {
        "type": kind,
        "training": True,
        "params": [list(p) for p in params],
        "buffers": [list(b) for b in buffers],
        "children": [list(c) for c in children],
    }


FORGED_TREES = {
    "a module that contains itself": {
        "nodes": [_node(children=[("a", 1)]), _node(children=[("b", 1)])],
        "state": [],
    },
    "a module the root does not hold": {"nodes": [_node(), _node()], "state": []},
    "a dotted name": {
        "nodes": [_node(params=[("a.b", 0, True)])],
        "state": [torch.zeros(2)],
    },
    "an index past the tensors": {
        "nodes": [_node(params=[("w", 3, True)])],
        "state": [torch.zeros(2)],
    },
    "a tensor both parameter and buffer": {
        "nodes": [_node(params=[("w", 0, True)], buffers=[("b", 0, True)])],
        "state": [torch.zeros(2)],
    },
    "a tensor no module holds": {"nodes": [_node()], "state": [torch.zeros(2)]},
    "an integer parameter that requires grad": {
        "nodes": [_node(params=[("w", 0, True)])],
        "state": [torch.zeros(2, dtype=torch.int64)],
    },
    "one name twice": {
        "nodes": [_node(params=[("w", 0, True)], buffers=[("w", 1, True)])],
        "state": [torch.zeros(2), torch.zeros(1)],
    },
    "no modules": {"nodes": [], "state": []},
    "a child out of range": {
        "nodes": [_node(children=[("c", 5)])],
        "state": [],
    },
    "a layer of a class the judge does not build": {
        "nodes": [{**_node(), "layer": "os.system", "attrs": {}}],
        "state": [],
    },
    "a layer attribute that hides a method": {
        "nodes": [{**_node(), "layer": "torch.nn.Linear", "attrs": {"forward": 1}}],
        "state": [],
    },
    "a layer attribute that is not plain data": {
        "nodes": [{**_node(), "layer": "torch.nn.ReLU", "attrs": {"inplace": [1]}}],
        "state": [],
    },
}


@pytest.mark.parametrize("why", FORGED_TREES)
def test_a_forged_tree_fails_the_cell_and_builds_nothing(why):
    cls = Kernel(Forged(FORGED_TREES[why])).lookup("Evil")
    with pytest.raises(JudgeError, match="the kernel's answer is not valid"):
        cls()
