"""sequence_loss (chapter 6, book/ch06_training): the unit tests of
``ch06.check_sequence_loss``, with wrong losses (each rejected with its named
diagnosis, or with the learner's exception) and right ones written differently (each
accepted).

Each wrong one says what bug it is, spelled as a learner might, not as the check's own
variant is.
"""

import pytest
import torch
import torch.nn.functional as F
from bank_sequence_loss import loss_by_hand as loss_masked_by_hand
from bank_sequence_loss import loss_masked_mean_over_all as loss_divides_by_everything
from bank_sequence_loss import loss_per_token

from tformer_grading.checks import CheckFailure, ch06
from tformer_ref import training

# ------------------------------------------------------------------------ sequence_loss


def loss_transposed(logits, labels, pad_id, eps):
    return F.cross_entropy(
        logits.transpose(1, 2), labels, ignore_index=pad_id, label_smoothing=eps
    )


def loss_module(logits, labels, pad_id, eps):
    crit = torch.nn.CrossEntropyLoss(ignore_index=pad_id, label_smoothing=eps)
    return crit(logits.view(-1, logits.shape[-1]), labels.flatten())


@pytest.mark.parametrize(
    "fn", [training.sequence_loss, loss_masked_by_hand, loss_transposed, loss_module]
)
def test_loss_accepts_right_implementations(fn, capsys):
    ch06.check_sequence_loss(fn)
    assert "✓ sequence_loss" in capsys.readouterr().out


def loss_counts_padding(logits, labels, pad_id, eps):  # no ignore_index
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), label_smoothing=eps)


def loss_plain_cross_entropy(logits, labels, pad_id, eps):
    # Neither ignore_index nor label_smoothing.
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten())


def loss_hard_coded_pad(logits, labels, pad_id, eps):  # the seed's "x != 0"
    return F.cross_entropy(
        logits.flatten(0, 1), labels.flatten(), ignore_index=0, label_smoothing=eps
    )


def loss_no_smoothing(logits, labels, pad_id, eps):
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=pad_id)


def loss_summed(logits, labels, pad_id, eps):
    return F.cross_entropy(
        logits.flatten(0, 1),
        labels.flatten(),
        ignore_index=pad_id,
        label_smoothing=eps,
        reduction="sum",
    )


def loss_item(logits, labels, pad_id, eps):  # a float, detached from the graph
    return torch.tensor(training.sequence_loss(logits, labels, pad_id, eps).item())


def loss_as_float(logits, labels, pad_id, eps):  # nothing left to call backward on
    loss = F.cross_entropy(
        logits.flatten(0, 1), labels.flatten(), ignore_index=pad_id, label_smoothing=eps
    )
    return loss.item()


def loss_wrong_axis(logits, labels, pad_id, eps):
    # logits [B, St, V] passed as if [N, C, d]: a shape error.
    return F.cross_entropy(logits, labels, ignore_index=pad_id)


@pytest.mark.parametrize(
    "fn,diagnosis",
    [
        (loss_counts_padding, "padding counted in the loss"),
        (
            loss_plain_cross_entropy,
            "padding counted in the loss and no label smoothing",
        ),
        (loss_divides_by_everything, "padding counted in the mean"),
        (loss_hard_coded_pad, "pad id hard-coded to 0"),
        (loss_no_smoothing, "label smoothing ignored"),
        (loss_summed, "summed, not averaged"),
        (loss_item, "loss detached from the graph"),
        (loss_as_float, "loss detached from the graph"),
        (loss_per_token, "loss not reduced to a scalar"),
        (loss_wrong_axis, "your code raised"),
    ],
)
def test_loss_rejects_wrong_implementations(fn, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch06.check_sequence_loss(fn)
