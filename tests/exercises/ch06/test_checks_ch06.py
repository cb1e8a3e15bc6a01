"""Chapter 6's checks together (book/ch06_training): whatever they grade, right or
wrong, the training step, the schedule and greedy decoding write nothing to stderr
(nbgrader gives a test cell zero when it writes there), not even numpy's warning on
0 ** -0.5. Each exercise's own tests are in its folder.
"""

import pytest
from units_ch06 import (
    greedy_with_autograd,
    noam_numpy_inf,
    step_clips_after_update,
    step_scheduler_first,
)

from tformer_grading.checks import CheckFailure, ch06
from tformer_ref import training


def test_checks_write_nothing_to_stderr(capfd):
    ch06.check_train_step(training.train_step)
    ch06.check_noam_scheduler(training.noam_scheduler)
    for fn in (step_scheduler_first, step_clips_after_update):
        with pytest.raises(CheckFailure):
            ch06.check_train_step(fn)
    with pytest.raises(CheckFailure):
        ch06.check_greedy_decode(greedy_with_autograd)
    with pytest.raises(CheckFailure):
        ch06.check_noam_lambda(noam_numpy_inf)  # numpy warns on 0 ** -0.5
    assert capfd.readouterr().err == ""
