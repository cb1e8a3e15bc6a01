"""The bug hunt on the seed's generate_text (ch06_bughunt), graded with the real
nbgrader CLI.

One autograde run grades a small class: the solution (full marks), the untouched student
version, which is the seed's loop as it is (zero: it has all three bugs), right fixes
written differently, one submission per seed bug left unfixed (each loses exactly that
bug's points, and its feedback names the bug), and a loop that hands the work to the
reference, which only the hidden test catches. Each answer is the whole answer cell as
the learner leaves it after editing the seed's loop in place (nbgrader's two dead lines
after `return trg` included).
"""

from pathlib import Path

import nbformat
import pytest

from course import Buggy, GradedChapter

CHAPTER = "ch06_bughunt"
FULL = {"test_target_mask": 2, "test_mask_device": 2, "test_source_padding": 3}
ROOT = Path(__file__).resolve().parents[2]


def _student_cell() -> str:
    """The answer cell of the student version: the seed's generate_text, verbatim."""
    nb = nbformat.read(ROOT / "book" / CHAPTER / "exercise.ipynb", as_version=4)
    return next(
        c.source
        for c in nb.cells
        if c.metadata.get("nbgrader", {}).get("grade_id") == "generate_text"
    )


SEED = _student_cell()


def edited(*changes: tuple[str, str]) -> str:
    """The seed's loop with some of its lines changed in place."""
    code = SEED
    for old, new in changes:
        assert old in code, old
        code = code.replace(old, new)
    return code


METHOD = (
    "trg_mask = model.decoder.create_trg_mask(trg)",
    "trg_mask = create_trg_mask(trg)",
)
DEVICE = (
    "trg_mask = model.decoder.create_trg_mask(trg)",
    "trg_mask = model.decoder.create_trg_mask(trg).to(device)",
)
METHOD_AND_DEVICE = (
    "trg_mask = model.decoder.create_trg_mask(trg)",
    "trg_mask = create_trg_mask(trg).to(device)",
)
ENCODER_MASK = (
    "enc_src = model.encoder(src, None)",
    "src_mask = create_src_mask(src)\n        enc_src = model.encoder(src, src_mask)",
)
DECODER_MASK = (
    "output = model.decoder(trg, enc_src, None, trg_mask)",
    "output = model.decoder(trg, enc_src, src_mask, trg_mask)",
)

BUGGY = {
    # Bugs 2 and 3 fixed; the loop still calls a method the decoder does not have.
    "method_left": Buggy(
        answers={"generate_text": edited(DEVICE, ENCODER_MASK, DECODER_MASK)},
        zero=("test_target_mask",),
        feedback=(
            "create_trg_mask called as a method of model.decoder",
            "'Decoder' object has no attribute 'create_trg_mask'",
        ),
    ),
    # Bugs 1 and 3 fixed; the seed's mask is still made on the CPU.
    "device_left": Buggy(
        answers={"generate_text": edited(METHOD, ENCODER_MASK, DECODER_MASK)},
        zero=("test_mask_device",),
        feedback=(
            "tensor built without a device",
            "made without a device in create_trg_mask",
        ),
    ),
    # Bugs 1 and 2 fixed; the encoder and the decoder still get None as the source mask.
    "padding_left": Buggy(
        answers={"generate_text": edited(METHOD_AND_DEVICE)},
        zero=("test_source_padding",),
        feedback=(
            "padding in the source attended to",
            "Your model.encoder call got src_mask=None",
        ),
    ),
    # Right tokens, from the reference's greedy_decode: only the hidden test sees it.
    "delegates": Buggy(
        answers={
            "generate_text": """
from tformer_ref.decoding import greedy_decode


def generate_text(model, src, max_length, device):
    core = model.encoder.core
    return greedy_decode(core, src, max_length - 1, SOS_IDX, EOS_IDX, PAD_IDX)
"""
        },
        zero=("test_target_mask",),
        feedback="your code calls tformer_ref.greedy_decode",
    ),
}

RIGHT_VARIANTS = {
    # The causal mask from two aranges, on the device; the source mask as the seed's
    # Transformer builds it.
    "arange_mask": {
        "generate_text": edited(
            ENCODER_MASK,
            DECODER_MASK,
            (
                "trg_mask = model.decoder.create_trg_mask(trg)",
                "pos = torch.arange(trg.size(1), device=device)\n"
                "            trg_mask = pos[None, :] <= pos[:, None]",
            ),
        )
    },
    # The padding dropped instead of masked, the seed's None masks kept.
    "padding_dropped": {
        "generate_text": edited(
            METHOD_AND_DEVICE,
            (
                "enc_src = model.encoder(src, None)",
                "src = src[:, src[0] != PAD_IDX]\n"
                "        enc_src = model.encoder(src, None)",
            ),
        )
    },
}


def test_the_student_version_holds_the_seeds_loop_verbatim():
    # The seed's loop as the checks' tests quote it (seeds/004, "生成文本"), then only
    # nbgrader's stub, after the seed's return: it never runs.
    import importlib.util

    path = ROOT / "tests/exercises/bughunt_decoding/test_checks_bughunt_decoding.py"
    spec = importlib.util.spec_from_file_location("quoted_seed", path)
    quoted = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(quoted)
    stub = "\n    # YOUR CODE HERE\n    raise NotImplementedError()"
    assert SEED == quoted.SEED.strip("\n") + stub


pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(CHAPTER)]


class TestGrading(GradedChapter):
    chapter, full, buggy, right_variants = CHAPTER, FULL, BUGGY, RIGHT_VARIANTS
    hidden_marker, hidden_student = "check_generate_text_by_hand", "delegates"
