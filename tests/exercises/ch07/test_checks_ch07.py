"""Chapter 7's checks together (book/ch07_scale): whatever they grade, the
accumulation, AMP and loader checks write nothing to stderr (nbgrader gives a test cell
zero when it writes there), and the checks leave torch's thread count as they found
it. Each exercise's own tests are in its folder.
"""

import pytest
import torch
from units_ch07 import (
    accum_right,
    accum_seed_style,
    amp_clip_scaled_by_hand,
    amp_right,
    amp_scaled_then_plain_loop,
    amp_seed_import,
    loader_no_sampler,
)

from tformer_grading.checks import CheckFailure, ch07
from tformer_ref.device import get_device


def test_checks_write_nothing_to_stderr(capfd):
    """nbgrader gives a test cell zero when it writes to stderr, even if it passes."""
    ch07.check_amp_step(amp_right)
    with pytest.raises(CheckFailure):
        on_cpu = get_device().type == "cpu"
        ch07.check_amp_step(amp_seed_import if on_cpu else amp_clip_scaled_by_hand)
    with pytest.raises(CheckFailure):
        ch07.check_amp_step(amp_scaled_then_plain_loop)  # GradScaler raises inside it
    with pytest.raises(CheckFailure):
        ch07.check_accumulation_step(accum_seed_style)
    with pytest.raises(CheckFailure):
        ch07.check_make_loader(loader_no_sampler)
    assert capfd.readouterr().err == ""


def test_checks_restore_the_thread_count():
    threads = torch.get_num_threads()
    ch07.check_accumulation_step(accum_right)
    ch07.check_amp_by_hand(amp_right)
    assert torch.get_num_threads() == threads
