"""Chapter 8's checks together (book/ch08_generation): each builds its cases from its
own seeded generator, so a check run between two cells of a seeded notebook leaves
what the next cell draws unchanged. Each exercise's own tests are in its folder.
"""

import pytest
import torch
from units_ch08 import gen_samples, probs_right, step_positions_from_zero

from tformer_grading.checks import CheckFailure, ch08


@pytest.mark.parametrize(
    "check,fn",
    [
        (ch08.check_next_token_probs, probs_right),
        (ch08.check_lm_step, step_positions_from_zero),
        (ch08.check_generate_greedy, gen_samples),
    ],
)
def test_checks_leave_the_notebooks_random_state_alone(check, fn):
    """Every case is built from its own seeded generator: a check run between two cells
    of a seeded notebook does not change what the next cell draws."""
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    try:
        check(fn)
    except CheckFailure:
        pass
    assert torch.equal(torch.rand(3), expected)
