"""shift_targets (chapter 6, book/ch06_training): the unit tests of
``ch06.check_shift_targets``, with wrong shifts (each rejected with its named
diagnosis) and right ones written differently (each accepted).

Beyond the bank (bank_shift_targets.py): slices moved to another device (no bank answer
can reach that on a CPU-only machine: the meta device stands in for the GPU here), and
the lesson a failure points to (§6.2).

Each wrong one says what bug it is, spelled as a learner might, not as the check's own
variant is.
"""

import pytest
from bank_shift_targets import shift_by_two
from bank_shift_targets import shift_seed as shift_seed_style

from tformer_grading.checks import CheckFailure, ch06
from tformer_ref import training

# ------------------------------------------------------------------------ shift_targets

RIGHT_SHIFT = [
    training.shift_targets,
    lambda t: (t[..., :-1], t[..., 1:]),
    lambda t: (t.narrow(1, 0, t.size(1) - 1), t.narrow(1, 1, t.size(1) - 1)),
    # Slices sequence-first after transposing, and transposes back.
    lambda t: tuple(x.transpose(0, 1) for x in (t.T[:-1], t.T[1:])),
]


@pytest.mark.parametrize("fn", RIGHT_SHIFT)
def test_shift_accepts_right_implementations(fn, capsys):
    ch06.check_shift_targets(fn)
    assert "✓ shift_targets" in capsys.readouterr().out


def shift_narrow_first_axis(tgt):  # the same axis mix-up, written with narrow
    n = len(tgt) - 1
    return tgt.narrow(0, 0, n), tgt.narrow(0, 1, n)


def shift_backwards(tgt):  # decoder input and labels swapped
    labels, decoder_in = tgt[:, :-1], tgt[:, 1:]
    return decoder_in, labels


def shift_labels_forgotten(tgt):  # the labels are the decoder input itself
    decoder_in = tgt[:, :-1]
    return decoder_in, decoder_in.clone()


def shift_nothing(tgt):  # the whole target goes in and comes out
    return tgt.clone(), tgt.clone()


def shift_returns_input_only(tgt):  # forgot to return the labels
    return tgt[:, :-1]


@pytest.mark.parametrize(
    "fn,diagnosis",
    [
        (shift_seed_style, "sequence-first slicing on batch-first data"),
        (shift_narrow_first_axis, "sequence-first slicing on batch-first data"),
        (shift_backwards, "targets shifted the wrong way"),
        (shift_labels_forgotten, "labels not shifted"),
        (shift_nothing, "no shift at all"),
        (shift_by_two, r"labels are 2 position\(s\) after"),
        (shift_returns_input_only, "does not return a pair"),
    ],
)
def test_shift_rejects_wrong_implementations(fn, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch06.check_shift_targets(fn)


def test_shift_names_slices_moved_to_another_device():
    # On a GPU a learner's `.cpu()` moves the slices off tgt's device. A CPU-only
    # machine has no second real device (`.cpu()` moves nothing there), so the bank
    # cannot hold this answer; the meta device stands in for the GPU here.
    def shift_targets(tgt):
        return tgt[:, :-1].to("meta"), tgt[:, 1:].to("meta")

    with pytest.raises(CheckFailure, match=r"'tensors moved to another device'.*meta"):
        ch06.check_shift_targets(shift_targets)


def test_shift_failure_points_to_the_lesson():
    with pytest.raises(CheckFailure) as info:
        ch06.check_shift_targets(shift_seed_style)
    where = "§6.2 'Teacher forcing and the shift' in book/ch06_training/lesson.ipynb"
    assert where in str(info.value)
