"""Chapter 2's checks together (book/ch02_attention): whatever they grade,
right or wrong, measured or named, ``check_attention`` and ``check_attention_entropy``
write nothing to stderr (nbgrader gives a test cell zero when it writes there, even if
it passes). Each exercise's own tests are in its folder.
"""

import pytest
import torch
import torch.nn.functional as F
from units_ch02 import attention_matmul, attention_no_scaling

from tformer_grading.checks import CheckFailure, ch02


def test_checks_write_nothing_to_stderr(capfd):
    ch02.check_attention(attention_matmul)
    with pytest.raises(CheckFailure):
        ch02.check_attention(attention_no_scaling)
    with pytest.raises(CheckFailure):
        ch02.check_attention_entropy(lambda w: -(w * torch.log(w)).sum(-1))
    assert capfd.readouterr().err == ""


def test_measured_failures_write_nothing_to_stderr(capfd):
    for fn in (
        lambda q, k, v: attention_matmul(q / 2, k, v),  # a wrong scale, measured
        lambda q, k, v: (attention_matmul(q, k, v)[0], F.softmax(q @ k.mT)),
    ):
        with pytest.raises(CheckFailure):
            ch02.check_attention(fn)
    with pytest.raises(CheckFailure, match=r"ε ≈ 0\.01"):
        ch02.check_attention_entropy(lambda w: -(w * (w + 1e-2).log()).sum(-1))
    assert capfd.readouterr().err == ""
