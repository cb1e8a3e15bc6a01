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


# A training step on the judge's model, optimizer and scheduler: the loss is the
# learner's, computed in the kernel on logits the judge's model returned; backward
# runs in the judge, into its parameters; clipping acts on the kernel's stand-ins for
# them, and what it left is what the judge's optimizer steps with.


def train_step(model, x, y, optimizer, scheduler, max_norm):
    model.train()
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    scheduler.step()
    return loss.item(), norm.item(), optimizer.param_groups[0]["lr"]


def sets_the_rate_by_hand(model, x, y, optimizer, scheduler, max_norm):
    optimizer.param_groups[0]["lr"] = 0.5


def _training(seed=0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 0.5**s)
    x, y = torch.randn(5, 3), torch.randn(5, 2)
    return model, x, y, optimizer, scheduler


def test_a_training_step_updates_the_judges_model_as_it_would_here():
    kernel = Kernel(LocalLink({"train_step": train_step}))
    model, x, y, optimizer, scheduler = _training()
    norms = []  # of the gradient the judge's optimizer steps with
    optimizer.register_step_pre_hook(
        lambda opt, args, kwargs: norms.append(
            float(torch.cat([p.grad.flatten() for p in model.parameters()]).norm())
        )
    )
    twin, *rest = _training()
    for _ in range(2):
        got = kernel.lookup("train_step")(model, x, y, optimizer, scheduler, 0.1)
        want = train_step(twin, *rest, 0.1)
        assert got == pytest.approx(want, rel=1e-6)
    for p, q in zip(model.parameters(), twin.parameters()):
        assert torch.allclose(p, q) and torch.allclose(p.grad, q.grad)
    # The judge's own optimizer stepped, with the gradient clipped in the kernel.
    assert len(norms) == 2 and max(norms) <= 0.1 + 1e-6


def test_the_optimizers_groups_are_lent_to_read_not_to_change():
    kernel = Kernel(LocalLink({"sets_the_rate_by_hand": sets_the_rate_by_hand}))
    model, x, y, optimizer, scheduler = _training()
    with pytest.raises(TypeError, match="lends its param_groups to read"):
        kernel.lookup("sets_the_rate_by_hand")(model, x, y, optimizer, scheduler, 1.0)
    assert optimizer.param_groups[0]["lr"] == 0.1


def forges_a_parameter(model, x):
    from tformer_grading.judge.wire import to_json

    next(model.parameters())  # the judge numbers the model 1, its parameters 2, ...
    forged = [[2, torch.zeros(7, 7), None]]  # its first weight, of another shape
    request = {"op": "call", "id": 1, "name": "eval", "params": to_json(forged)}
    model._call_back(json.dumps(request))


def test_a_parameter_of_another_shape_from_the_kernel_fails_the_cell():
    kernel = Kernel(LocalLink({"forges_a_parameter": forges_a_parameter}))
    model, x, *_ = _training()
    with pytest.raises(JudgeError, match="a parameter of another shape"):
        kernel.lookup("forges_a_parameter")(model, x)
