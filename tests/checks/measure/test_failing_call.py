"""The call a crash came from (measure/failing_call.py), read back from learner code
that raises, and nothing read where the second run does not raise the same way.

Bug: a learner's ``q @ k.T`` on 4-D tensors crashed with "3 must match 5 at dimension
1", and the check could say only that 3 is H and 5 is Sk (held-out trial 2026-12-07,
``a_att_k_dot_T``): nothing said that ``.T`` had reversed all four axes of k. Cause:
PyTorch's message names two sizes, not the call or its operands. Guard: the learner's
function runs again under a recording mode, and the call that raised is read from it.

A first version ran every function again: an AMP step stepped its optimizer a second
time, and the check then measured the wrong gradients (``amp_plain_step_scaled`` named
generic). Recording every first run instead doubled the grading report's time (80 s
to 160 s). Now only a function given tensors and plain values runs again, on copies.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from torch import nn

from tformer_grading.checks.diagnosis import run
from tformer_grading.checks.measure.failing_call import failing_call
from tformer_grading.checks.measure.torch_errors import explain


def _read(fn, *args) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # .T on a 4-D tensor warns
        try:
            fn(*args)
        except Exception as exc:  # noqa: BLE001 - the learner's error, whatever it is
            return failing_call(fn, args, exc)
    raise AssertionError("expected the function to raise")


Q, K = torch.ones(2, 3, 4, 8), torch.ones(2, 3, 5, 8)


def attention_k_dot_T(q, k):
    scores = q @ k.T / math.sqrt(q.size(-1))
    return scores.softmax(-1)


def attention_transposes_heads(q, k):
    scores = torch.matmul(q, k.transpose(1, 2))
    return scores.softmax(dim=-1)


def test_reads_dot_T_as_every_axis_reversed():
    assert _read(attention_k_dot_T, Q, K) == (
        "the call that raised: matmul of [2, 3, 4, 8] and [8, 5, 3, 2]; the second "
        "made by `.T` of [2, 3, 5, 8], which reverses all 4 axes"
    )


def test_reads_the_axes_a_transpose_swapped():
    assert _read(attention_transposes_heads, Q, K).endswith(
        "the second made by `transpose(1, 2)` of [2, 3, 5, 8]"
    )


def test_reads_a_permute_given_a_tuple_as_its_arguments():
    def scores(q, k):
        return q @ k.permute((0, 2, 1, 3))

    assert "`permute(0, 2, 1, 3)` of [2, 3, 5, 8]" in _read(scores, Q, K)


def test_reads_a_table_sliced_by_the_batch_size():
    def embed(x, table):
        return x + table[: x.size(0)]  # the batch size where the length belongs

    read = _read(embed, torch.ones(2, 5, 16), torch.zeros(11, 16))
    assert read == (
        "the call that raised: add of [2, 5, 16] and [2, 16]; the second made by "
        "`[:2]` of [11, 16]"
    )


def test_an_operand_no_layout_call_made_is_given_by_its_shape_alone():
    def product(a, b):
        return a @ b

    assert _read(product, torch.ones(2, 3), torch.ones(4, 5)) == (
        "the call that raised: matmul of [2, 3] and [4, 5]"
    )


def test_an_operand_of_another_dtype_is_shown_with_the_call_that_cast_it():
    def attention_out(weights, v):
        return weights.float() @ v  # float32 weights, float64 values

    w, v = torch.ones(2, 3, dtype=torch.float64), torch.ones(3, 4, dtype=torch.float64)
    assert _read(attention_out, w, v) == (
        "the call that raised: matmul of [2, 3] float32 and [3, 4] float64; the first "
        "made by `float()` of [2, 3] float64"
    )


def test_tensors_in_a_list_are_operands():
    def join(a, b):
        return torch.cat([a, b.transpose(0, 1)], dim=0)

    read = _read(join, torch.ones(2, 3), torch.ones(2, 4))
    assert read.startswith("the call that raised: cat of [2, 3] and [4, 2]")
    assert "the second made by `transpose(0, 1)` of [2, 4]" in read


def test_nothing_is_read_for_an_error_outside_pytorch_calls():
    def unpack(x):
        b, s = x.shape  # a 3-D tensor unpacked into two names
        return x.view(b, s, -1)

    assert _read(unpack, torch.ones(2, 3, 4)) == ""


def test_an_error_the_learner_caught_and_replaced_is_not_read_as_the_crash():
    def replaced(q, k):
        try:
            q @ k  # raises; caught
        except RuntimeError:
            pass
        raise ValueError("the learner's own error")

    assert _read(replaced, Q, K) == ""


def test_a_step_given_an_optimizer_is_not_run_again():
    calls = []
    model = nn.Linear(4, 3)

    def step(model, optimizer, x):
        calls.append(1)  # a second run would step again
        optimizer.step()
        return model(x.T)

    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    got = run(step, (model, optimizer, torch.ones(2, 4)))
    assert calls == [1] and got.call == ""


def test_the_second_run_changes_none_of_the_checks_tensors():
    def adds_in_place_then_raises(x):
        x.add_(1)
        return x @ x  # [2, 3] @ [2, 3] raises

    x = torch.zeros(2, 3)
    got = run(adds_in_place_then_raises, (x,))
    assert "matmul of [2, 3] and [2, 3]" in got.call
    assert torch.equal(x, torch.ones(2, 3))  # changed once, by the first run


def test_the_second_run_leaves_the_random_state_as_it_found_it():
    def draws_then_raises(x):
        return x @ torch.rand(3).view(1, 3)

    torch.manual_seed(0)
    run(draws_then_raises, (torch.ones(2, 4),))
    after = torch.rand(2)
    torch.manual_seed(0)
    with pytest.raises(RuntimeError):
        draws_then_raises(torch.ones(2, 4))
    assert torch.equal(torch.rand(2), after)


def test_a_check_reads_the_call_in_the_case_sizes():
    """The whole path: ``diagnosis.run`` keeps the call with the exception, and the
    failure's explanation names each shape in the case's sizes."""
    got = run(attention_k_dot_T, (Q, K))
    message = f"raised {got!r} on case q [B=2, H=3, Sq=4, Dh=8], k [.., Sk=5, ..]"
    assert "the call that raised: matmul of [2, 3, 4, 8]" in message
    assert explain(message).endswith(
        "two tensors met with 3 (H) against 5 (Sk) on their axis 1; the call that "
        "raised was matmul of [B, H, Sq, Dh] and [Dh, Sk, H, B]; the second made by "
        "`.T` of [B, H, Sk, Dh], which reverses all 4 axes."
    )


def test_shapes_whose_numbers_are_several_sizes_are_not_read_again():
    # B == H: "[B or H, B or H, Sq, Dh]" reads worse than the numbers the message
    # already gives, so the call is not repeated in the case's sizes.
    got = run(attention_k_dot_T, (torch.ones(2, 2, 4, 8), torch.ones(2, 2, 5, 8)))
    message = f"raised {got!r} on case q [B=2, H=2, Sq=4, Dh=8], k [.., Sk=5, ..]"
    assert "matmul of [2, 2, 4, 8] and [8, 5, 2, 2]" in message
    assert "the call that raised was" not in explain(message)


def test_a_module_is_run_again_as_a_copy():
    class Counting(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("calls", torch.zeros(()))

        def forward(self, x):
            self.calls += 1  # state a second run must not touch
            return x @ x.T.T  # [2, 3] @ [2, 3] raises

    module = Counting()
    got = run(lambda m, x: m(x), (module, torch.ones(2, 3)))
    assert got.call.startswith("the call that raised: matmul of [2, 3] and [2, 3]")
    assert float(module.calls) == 1


def test_a_module_with_a_hook_is_not_run_again():
    seen = []
    module = nn.Linear(4, 3)
    module.register_forward_pre_hook(lambda m, args: seen.append(1))  # a recorder
    got = run(lambda m, x: m(x), (module, torch.ones(2, 5)))
    assert got.call == "" and seen == [1]


def test_a_dtype_cast_some_calls_before_is_followed_back():
    def weights_then_values(scores, v):
        weights = torch.softmax(scores.float(), dim=-1)  # float32 from here on
        return weights @ v

    s, v = torch.ones(2, 3, dtype=torch.float64), torch.ones(3, 4, dtype=torch.float64)
    assert _read(weights_then_values, s, v) == (
        "the call that raised: matmul of [2, 3] float32 and [3, 4] float64; the "
        "first's float32 comes from `float()` of [2, 3] float64"
    )
