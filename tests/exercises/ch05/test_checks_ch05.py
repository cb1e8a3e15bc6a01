"""Chapter 5's checks together (book/ch05_model): a right decoder block, a wrong one
and a wrong positional encoding write nothing to stderr (nbgrader gives a test cell
zero when it writes there). Each exercise's own tests are in its folder.
"""

import pytest
from units_ch05 import Dec, pe_swapped

from tformer_grading.checks import CheckFailure, ch05


class DecCrossFromDecoderMasked(Dec):  # keys/values from x, with the source mask
    def cross(self, x, memory, src_mask):
        return self.cross_attn(x, x, x, mask=src_mask)


def test_checks_write_nothing_to_stderr(capfd):
    ch05.check_decoder_block(Dec)
    with pytest.raises(CheckFailure):
        ch05.check_decoder_block(DecCrossFromDecoderMasked)
    with pytest.raises(CheckFailure):
        ch05.check_sinusoidal_encoding(pe_swapped)
    assert capfd.readouterr().err == ""
