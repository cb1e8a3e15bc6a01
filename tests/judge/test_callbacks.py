"""A model of the judge's given to the learner's code stays in the judge's process: the
learner's loop calls it back, and what it records of that loop is the judge's own
(tformer_grading/judge/agent.py's JudgeObject, remote.py's Kernel.called_back, with a
link in this process; test_judge_callbacks.py in tests/grading does it over a real
kernel)."""

import json

import pytest
import torch
from torch import nn

from tformer_grading.judge.remote import JudgeError, Kernel, LocalLink
from tformer_grading.judge.wire import WireError


class Recording(nn.Module):
    """A check's model: it records each decode call, and must be reachable only
    through what it lends."""

    def __init__(self):
        super().__init__()
        self.out = nn.Linear(4, 5)
        self.calls = []

    def encode(self, src):
        return src.float()[..., None].expand(-1, -1, 4), None

    def decode(self, tgt, memory, src_mask, tgt_mask=None):
        self.calls.append((self.training, torch.is_grad_enabled(), tgt.clone()))
        return self.out(memory[:, : tgt.size(1)])

    def reset(self):
        self.calls = []


def loop(model, src):
    model.eval()
    memory, mask = model.encode(src)
    out = src[:, :1]
    with torch.no_grad():
        for _ in range(2):
            logits = model.decode(out, memory, mask)
            out = torch.cat([out, logits[:, -1].argmax(-1, keepdim=True)], 1)
    return out, next(model.parameters()).dtype, model.training


def erases_the_record(model, src):
    model.reset()


def reads_the_record(model, src):
    return model.calls


def decodes_a_wrong_shape(model, src):
    memory, mask = model.encode(src)
    return model.decode(src, memory[:, :, :2], mask)


def forges_a_call(model, src):
    request = {"op": "call", "id": 99, "name": "decode", "args": [], "kwargs": {}}
    return model._call_back(json.dumps(request))


@pytest.fixture
def kernel():
    namespace = {
        f.__name__: f
        for f in (loop, erases_the_record, reads_the_record, decodes_a_wrong_shape)
    }
    return Kernel(LocalLink({**namespace, "forges_a_call": forges_a_call}))


def _model():
    torch.manual_seed(0)
    return Recording()


def test_the_learners_loop_runs_on_the_judges_model_which_records_it(kernel):
    model, src = _model(), torch.tensor([[1, 2, 3]])
    out, dtype, training = kernel.lookup("loop")(model, src)
    want, *_ = loop(_model(), src)
    assert torch.equal(out, want) and dtype == torch.float32 and training is False
    # The record is the judge's: its own model's, in eval mode, without gradients.
    assert [(t, g, p.tolist()) for t, g, p in model.calls] == [
        (False, False, [[1]]),
        (False, False, out[:, :2].tolist()),
    ]


def test_what_the_model_does_not_lend_is_an_error_in_the_learners_code(kernel):
    model, src = _model(), torch.tensor([[1, 2]])
    model.calls.append("a record the learner must not erase")
    for name in ("erases_the_record", "reads_the_record"):
        with pytest.raises(AttributeError, match="lends it only its methods"):
            kernel.lookup(name)(model, src)
    assert model.calls == ["a record the learner must not erase"]


def test_an_error_in_the_judges_model_is_raised_where_the_learner_called_it(kernel):
    with pytest.raises(RuntimeError, match="mat1 and mat2 shapes") as raised:
        kernel.lookup("decodes_a_wrong_shape")(_model(), torch.tensor([[1, 2]]))
    assert "model.decode(src, memory" in raised.value.kernel_where
    assert "linear of [1, 2, 2] and [5, 4]" in raised.value.kernel_call


def test_a_forged_call_back_fails_the_cell(kernel):
    with pytest.raises(JudgeError, match="call to the grader is not valid"):
        kernel.lookup("forges_a_call")(_model(), torch.tensor([[1]]))


def test_a_module_holding_a_mirror_of_the_learners_is_not_given_back(kernel):
    """Called back, its forward would ask the kernel, which waits for the judge."""
    mirror = Kernel(LocalLink({"Lin": nn.Linear})).lookup("Lin")(4, 5)
    with pytest.raises(WireError, match="cannot send a Sequential"):
        kernel.lookup("loop")(nn.Sequential(mirror), torch.tensor([[1]]))
