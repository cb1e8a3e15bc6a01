"""The learner's functions as the judge calls them, through the kernel's agent over
the wire (tformer_grading/judge/remote.py and agent.py, with a link in this process:
the real kernel's link is tested in tests/grading/test_judge_attacks.py)."""

import pytest
import torch

from tformer_grading.judge.remote import (
    JudgeError,
    Kernel,
    LocalLink,
    RemoteCallable,
    rebuilt,
)
from tformer_grading.judge.wire import Raised, Ref


def attention(q, k, v):
    weights = (q @ k.transpose(-2, -1) / q.size(-1) ** 0.5).softmax(-1)
    return weights @ v, weights


def scale_in_place(x):
    x *= 2
    return x.sum()


class Mine(Exception):
    pass


def raises_mine(x):
    raise Mine("my own error")


def raises_size(x):
    return x @ torch.ones(5, 2)


NAMESPACE = {
    "attention": attention,
    "scale_in_place": scale_in_place,
    "raises_mine": raises_mine,
    "raises_size": raises_size,
    "sizes": (3, 4),
    "table": torch.arange(6).reshape(2, 3),
}


@pytest.fixture
def kernel():
    return Kernel(LocalLink(dict(NAMESPACE)))


def test_a_learner_function_called_through_the_kernel_gives_its_result(kernel):
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)
    fn = kernel.lookup("attention")
    assert isinstance(fn, RemoteCallable) and fn.__name__ == "attention"
    out, weights = fn(q, k, v)
    want_out, want_weights = attention(q, k, v)
    assert torch.equal(out, want_out) and torch.equal(weights, want_weights)


def test_data_names_arrive_as_data_and_missing_names_as_key_errors(kernel):
    assert kernel.lookup("sizes") == (3, 4)
    assert torch.equal(kernel.lookup("table"), NAMESPACE["table"])
    with pytest.raises(KeyError):
        kernel.lookup("not_defined")


def test_gradients_flow_through_the_kernels_backward(kernel):
    q, k, v = (
        torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True) for _ in range(3)
    )
    out, _ = kernel.lookup("attention")(q, k, v)
    (out * torch.arange(4.0, dtype=torch.float64)).sum().backward()
    want = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    (attention(*want)[0] * torch.arange(4.0, dtype=torch.float64)).sum().backward()
    for got, expected in zip((q, k, v), want):
        torch.testing.assert_close(got.grad, expected.grad)


def test_an_input_changed_in_place_is_changed_for_the_judge(kernel):
    x = torch.ones(3)
    total = kernel.lookup("scale_in_place")(x)
    assert total.item() == 6.0 and x.tolist() == [2.0, 2.0, 2.0]


def test_the_learners_exceptions_are_raised_again_with_their_class(kernel):
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        kernel.lookup("raises_size")(torch.ones(2, 3))
    with pytest.raises(Exception, match="my own error") as info:
        kernel.lookup("raises_mine")(torch.ones(1))
    assert type(info.value).__name__ == "Mine"
    assert not isinstance(info.value, JudgeError)


def test_an_exception_name_from_the_kernel_never_picks_a_dangerous_class():
    assert type(rebuilt(Raised("SystemExit", "bye"))).__name__ == "SystemExit"
    assert not isinstance(rebuilt(Raised("SystemExit", "bye")), SystemExit)
    assert type(rebuilt(Raised("not a name!", "m"))).__name__ == "LearnerError"
    assert isinstance(rebuilt(Raised("OSError", "m")), Exception)


class Forged:
    """A link whose kernel answers with ``text`` whatever it is asked."""

    def __init__(self, text):
        self.text = text

    def ask(self, request):
        return self.text


@pytest.mark.parametrize(
    "answer,message",
    [
        ("not json", "not valid: not a JSON document"),
        ("[1, 2]", "not valid: not an object"),
        ('{"nothing": 1}', "it has no value"),
        ('{"error": "agent replaced"}', "could not answer: agent replaced"),
        ('{"value": {"$": "exec", "code": "import os"}}', "unknown kind 'exec'"),
        ('{"value": 1, "call": "x"}', "a call number"),
        ('{"value": 1, "changed": [[9, 1]]}', "a changed input"),
        ('"' + "x" * (49 << 20) + '"', "over the bound"),
    ],
)
def test_malformed_or_forged_answers_fail_clearly(answer, message):
    fn = RemoteCallable(Kernel(Forged(answer)), Ref(1, "callable", "attention"))
    with pytest.raises(JudgeError, match=message):
        fn(torch.ones(2))
