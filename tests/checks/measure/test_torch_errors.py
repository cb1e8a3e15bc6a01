"""PyTorch's size errors read in the case's sizes
(tformer_grading/checks/measure/torch_errors.py): a planted shape error is read back
as the case's sizes, and nothing is read where nothing can be.

Bug this guards against: a crash forwarded with PyTorch's numbers alone ("shape
'[2, 5, 3, 170]' is invalid for input of size 120"), which leaves the learner to work
out which of their sizes each number is; and its opposite, a reading that names a size
the number is not. The checks' own use is in the banks
(tests/exercises/ch01/split_heads/bank_split_heads.py `split_hard_coded_d_model`,
bank_attention.py `attention_dot_T`, ...).
"""

from __future__ import annotations

import doctest
import warnings

import pytest
import torch
import torch.nn.functional as F

from tformer_grading.checks.diagnosis import CheckFailure, Raised, fail, run
from tformer_grading.checks.measure import torch_errors
from tformer_grading.checks.measure.sizes import named
from tformer_grading.checks.measure.torch_errors import explain
from tformer_ref.attention import MultiHeadAttention
from tformer_ref.positions import SinusoidalPositionalEncoding

CASE = named(B=2, H=3, Sq=4, Sk=5, Dh=8)


def _raised(fn) -> str:
    """The text a check forwards: PyTorch's error as a Raised value, and the case."""
    try:
        fn()
    except (RuntimeError, ValueError, IndexError) as exc:
        return f"your code raised {Raised(exc)!r} while the check ran case {CASE}"
    raise AssertionError("the planted mistake did not raise")


def _inputs():
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 3, 4, 8, generator=g)
    k = torch.randn(2, 3, 5, 8, generator=g)
    return q, k


def test_k_dot_T_on_four_axes_reads_as_heads_against_keys():
    q, k = _inputs()
    with warnings.catch_warnings():  # PyTorch deprecates .T on 4 axes, once per process
        warnings.simplefilter("ignore")
        said = explain(_raised(lambda: q @ k.T))  # k.T reverses all four axes
    assert "3 (H) against 5 (Sk)" in said


def test_a_row_sum_without_keepdim_reads_as_keys_against_queries():
    q, k = _inputs()
    scores = q @ k.transpose(-2, -1)
    said = explain(_raised(lambda: scores / scores.sum(-1)))
    assert "5 (Sk) against 4 (Sq) on their axis 3" in said


def test_a_hard_coded_width_is_read_as_no_size():
    q, _ = _inputs()
    said = explain(_raised(lambda: q.reshape(2, 4, 512)))
    assert "[2, 4, 512] = [B, Sq, 512]" in said
    assert "of 192 = B·H·Sq·Dh elements" in said
    assert "512 is none of the sizes named here" in said


def test_no_size_error_or_no_sizes_reads_nothing():
    assert explain(f"your weights sum to 1.3 on case {CASE}") == ""
    assert explain("The size of tensor a (5) must match the size of tensor b (4)") == ""


def test_an_axis_that_does_not_exist_needs_no_sizes():
    w = torch.rand(3, 4, 6)
    try:
        w.sum(dim=3)
    except IndexError as exc:
        said = explain(f"your code raised {Raised(exc)!r}")
    assert (
        said
        == "The tensor has 3 axes (0 to 2, or -3 to -1) and the code asked for axis 3."
    )


def test_a_failure_carries_the_reading():
    with pytest.raises(CheckFailure) as info:
        fail("attention", _raised(lambda: torch.randn(2, 3, 4, 8).reshape(2, 4, 512)))
    assert str(info.value).endswith(
        "512 is none of the sizes named here, nor a product of them."
    )


def test_examples_run_and_print_what_they_say():
    result = doctest.testmod(
        torch_errors, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    )
    assert result.failed == 0 and result.attempted >= 3


def _q():  # [B, H, Sq, Dh] of CASE
    return torch.randn(2, 3, 4, 8)


def _k():  # [B, H, Sk, Dh] of CASE
    return torch.randn(2, 3, 5, 8)


def _scores():  # [B, H, Sq, Sk]
    return _q() @ _k().transpose(-2, -1)


# Each planted mistake raises PyTorch's own words (no text typed here), read back.
PLANTED = [
    (  # a LayerNorm over the wrong width
        lambda: torch.nn.LayerNorm(5)(_q()),
        "a LayerNorm over [Sk] was given an input of shape [B, H, Sq, Dh]",
    ),
    (  # logits [B·H, Sk] against targets of another length
        lambda: F.cross_entropy(torch.randn(6, 5), torch.zeros(40, dtype=torch.long)),
        "cross_entropy was given 6 (B·H) rows of logits and 40 (Sk·Dh) targets",
    ),
    (  # scattered along the batch axis
        lambda: torch.zeros(2, 5).scatter(0, torch.arange(5).expand(2, 5), 1.0),
        "index 2 on axis 0, of size 2 (B)",
    ),
    (  # a key mask expanded to the queries' length
        lambda: torch.ones(2, 1, 1, 5, dtype=torch.bool).expand(2, 3, 4, 4),
        "expand asks for 4 (Sq) on axis 3, where the tensor has 5 (Sk)",
    ),
    (  # a [B, Sk] mask indexing the scores
        lambda: _scores()[torch.ones(2, 5, dtype=torch.bool)],
        "a boolean mask of shape [B, Sk] indexes a tensor of shape [B, H, Sq, Sk]",
    ),
    (  # einsum with k's axes read in the wrong order
        lambda: torch.einsum("bhqd,bhdk->bhqk", _q(), _k()),
        "einsum's letter d is 5 (Sk) in operand 1 but 8 (Dh) before",
    ),
    (  # a view after a transpose
        lambda: _q().transpose(1, 2).view(2, 4, 24),
        "View reads the tensor's memory in place",
    ),
    (  # permute given three axes for four
        lambda: _q().permute(0, 2, 1),
        "The tensor has 4 axes and the permute lists 3",
    ),
    (  # bmm on [B, H, S, Dh]
        lambda: torch.bmm(_q(), _k().transpose(-2, -1)),
        "The tensors given to torch.bmm must be 3-D",
    ),
    (  # a Linear(D, ...) given [.., Dh]
        lambda: torch.nn.Linear(5, 3)(_q()),
        "needs the inner sizes to agree, and they are 8 (Dh) and 5 (Sk)",
    ),
]


@pytest.mark.parametrize("planted,reading", PLANTED)
def test_a_planted_size_error_is_read_back(planted, reading):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        message = _raised(planted)
    assert reading in explain(message), (message, explain(message))


def test_the_references_own_shape_errors_are_read_back():
    """Bug this guards against: a reader whose pattern lacks a group it reads, which
    crashed the check instead of adding a sentence (found on lm_step, issue 26)."""
    x = torch.randn(3, 5, 16)
    attention = MultiHeadAttention(16, 2)
    planted = [
        (
            lambda: attention(x, x, x, mask=torch.ones(1, 1, 7, 7, dtype=torch.bool)),
            "the mask is [1, 1, 7, 7] where attention's weights are [B, H, S, S]",
        ),
        (
            lambda: SinusoidalPositionalEncoding(16, 24)(x[None]),
            "the tensor given has shape [1, B, S, D]",
        ),
    ]
    for plant, reading in planted:
        try:
            plant()
        except (TypeError, ValueError) as exc:
            message = f"raised {Raised(exc)!r} on case {named(B=3, H=2, S=5, D=16)}"
        assert reading in explain(message), explain(message)


def test_a_wrong_output_shape_is_read_against_the_axes_the_check_named():
    """Held-out trial 2026-12-06: merge_heads returned [B, H, S·Dh] and the message gave
    only the numbers. The check names the expected axes itself ([B, S, D]); the reading
    keeps them and decodes the learner's shape in the case's sizes."""
    message = (
        "merge_heads: On case x [B=2, H=3, S=4, Dh=5] of distinct codes your output "
        "has shape [2, 3, 20]; expected [B, S, D] = [2, 4, 15]."
    )
    assert "yours is [B, H, S·Dh] where [B, S, D] is expected" in explain(message)


def test_a_mask_cut_from_a_fixed_buffer_reads_the_buffers_size():
    buffer = torch.ones(512, 512, dtype=torch.bool).tril()
    try:
        buffer[:1100, :1100].view(1, 1, 1100, 1100)
    except RuntimeError as exc:
        said = explain(f"causal_mask(1100) raised {Raised(exc)!r} for S=1100")
    assert "[1, 1, S, S] of 262144 = 512² elements" in said
    assert "512 is none of the sizes named here" in said


def test_a_count_with_a_constant_of_the_error_reads_it():
    said = explain(
        "shape '[2, 5, 4, 8]' is invalid for input of size 480 on N=2, embed_size=48"
    )
    assert "of 480 = N·embed_size·5 elements" in said
    assert "5 and 4 and 8 are none of the sizes" in said


def _step(model, tokens):  # a learner's step: tokens [B, S]
    return tokens[:, -1]


def _loop(prompt):  # a learner's loop that drops the sequence axis (no keepdim)
    token = prompt.argmax(dim=-1)
    return _step(None, token)


def test_a_crash_in_a_helper_names_it_its_caller_and_what_it_was_given():
    """Bug (held-out trial 2026-12-07): a loop that handed its step tokens [B] got the
    step's IndexError at "line 2 of your code", with nothing saying that the loop had
    called the step, or with what. Guard: the raising function of the learner's, the
    line of theirs that called it, and the shapes of its tensor arguments."""
    said = repr(run(_loop, (torch.zeros(3, 5),)))  # as a check calls the learner's
    assert "in your _step, called at line" in said
    assert "`return _step(None, token)`" in said
    # Shown, not read in the case's sizes: a length that grows as the loop runs is
    # no size of the case, and may equal one by chance (8 = S + 3 = Dh).
    assert "_step's tensor arguments when it raised: tokens [3]" in said


def test_a_crash_in_the_function_called_names_no_caller():
    said = repr(run(_step, (None, torch.zeros(3))))
    assert "`return tokens[:, -1]`" in said
    assert "called at" not in said and "arguments" not in said


def test_a_number_two_sizes_may_explain_is_said_to_be_no_size_first():
    # Bug: "10 is none of the sizes named here, nor a product of them, though 10 is
    # twice S" read to a learner as two claims that contradict each other; and a bare
    # "32 is twice D" for a hard-coded 32 (D = 16) claims what is only arithmetic.
    said = explain(
        "mask must be a bool mask broadcastable to [B, H, Sq, Sk] = [3, 3, 5, 5], got "
        "shape (1, 1, 5, 10) on case V=11, D=12, H=3, Dh=4, tokens [B=3, S=5]"
    )
    assert said.endswith(
        "10 is none of the sizes named here, nor a product of them; it may be twice S."
    )


def test_several_unread_numbers_are_no_size_and_each_relation_is_a_may_be():
    said = explain(
        "shape '[3, 10, 512]' is invalid for input of size 240 on case x [B=3, S=5, "
        "D=16]"
    )
    assert said.endswith(
        "10 and 512 are none of the sizes named here, nor a product of them; "
        "10 may be twice S."
    )


def test_axes_the_error_names_decide_between_two_equal_sizes():
    # Bug: with B == H == 2 the weights read "[H or B, H or B, S, 7]", though the
    # reference's error names the axes [B, H, Sq, Sk].
    said = explain(
        "mask must be a bool mask broadcastable to [B, H, Sq, Sk] = [2, 2, 3, 7], got "
        "shape (1, 1, 3, 3) on case T=4, tokens [B=2, S=3], H=2, Dh=8"
    )
    assert "attention's weights are [B, H, S, 7]" in said
    assert said.endswith("it may be T + S.")


def test_a_number_sizes_multiply_to_is_not_said_to_be_no_product():
    # Bug: "10 is none of the sizes named here, nor a product of them" where H = 2,
    # S = 5: 10 is no axis a reshape merges (H and S are not next to each other in the
    # label), but it is H·S.
    said = explain(
        "mask must be a bool mask broadcastable to [B, H, Sq, Sk] = [3, 2, 5, 5], got "
        "shape (1, 1, 5, 10) on case V=11, D=16, H=2, Dh=8, tokens [B=3, S=5]"
    )
    assert said.endswith("10 is none of the sizes named here; it may be twice S.")
