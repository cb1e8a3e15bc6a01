"""PyTorch's own modules lent to the learner's code: the judge's nn.Embedding or
nn.Linear crosses as data, the kernel builds one like it for the call, and what the
learner's code did to its weights comes back (tformer_grading/judge/wire.py's Lent,
remote.py and agent.py, over the wire, with a link in this process)."""

import json

import pytest
import torch
from torch import nn

from tformer_grading.judge.remote import JudgeError, Kernel, LocalLink
from tformer_grading.judge.wire import WireError, decode, encode, lent


def embed(tokens, table, pe):
    return table(tokens) * table.embedding_dim**0.5 + pe[: tokens.size(1)]


def embed_in_place(tokens, table, pe):
    table.weight.data.mul_(2)  # a mistake: the table scaled in place
    return table(tokens) + pe[: tokens.size(1)]


def project(x, layer):
    return layer(x).tanh()


def kind_of(module):
    return type(module).__module__ + "." + type(module).__name__


@pytest.fixture
def kernel():
    namespace = {
        "embed": embed,
        "embed_in_place": embed_in_place,
        "project": project,
        "kind_of": kind_of,
    }
    return Kernel(LocalLink(namespace))


def _case():
    torch.manual_seed(0)
    table = nn.Embedding(11, 6, padding_idx=0)
    return torch.randint(0, 11, (2, 5)), table, torch.randn(9, 6)


def test_a_lent_embedding_computes_as_the_judge_own(kernel):
    tokens, table, pe = _case()
    got = kernel.lookup("embed")(tokens, table, pe)
    assert torch.allclose(got, embed(tokens, table, pe))
    assert kernel.lookup("kind_of")(table) == "torch.nn.modules.sparse.Embedding"


def test_weights_changed_in_place_by_the_learner_are_changed_here(kernel):
    tokens, table, pe = _case()
    before = table.weight.detach().clone()
    kernel.lookup("embed_in_place")(tokens, table, pe)
    assert torch.equal(table.weight.detach(), 2 * before)


def test_gradients_reach_the_lent_module_parameters(kernel):
    torch.manual_seed(1)
    layer, twin = nn.Linear(4, 3), nn.Linear(4, 3)
    twin.load_state_dict(layer.state_dict())
    x = torch.randn(5, 4)
    kernel.lookup("project")(x, layer).sum().backward()
    project(x, twin).sum().backward()
    assert torch.allclose(layer.weight.grad, twin.weight.grad)
    assert torch.allclose(layer.bias.grad, twin.bias.grad)


@pytest.mark.parametrize(
    "module",
    [nn.Sequential(nn.Linear(2, 2)), type("Mine", (nn.Linear,), {})(2, 2)],
    ids=["with submodules", "a subclass"],
)
def test_only_pytorch_own_leaf_modules_are_lent(kernel, module):
    """Any other module stays in the judge's process: the learner's code gets a
    stand-in that calls it back (tests/judge/test_callbacks.py)."""
    assert lent(module) is None
    assert kernel.lookup("kind_of")(module) == "tformer_grading.judge.agent.JudgeObject"


def test_the_kernel_cannot_send_the_judge_a_lent_module():
    spec = json.loads(encode(lent(nn.Linear(2, 2))))

    class Sends:
        def ask(self, request):
            return json.dumps({"value": spec})

    with pytest.raises(JudgeError, match="lent module"):
        Kernel(Sends()).lookup("anything")


@pytest.mark.parametrize("name", ["Sequential", "Module", "os.system", ""])
def test_a_lent_module_of_another_type_is_refused(name):
    spec = json.loads(encode(lent(nn.Linear(2, 2))))
    spec["type"] = name
    with pytest.raises(WireError, match="is not lent"):
        decode(json.dumps(spec))
