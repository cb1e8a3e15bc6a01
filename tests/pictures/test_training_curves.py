"""tformer_grading.pictures.training: a right piece trains as the reference's does, and
each kind of training mistake gives the curves and the sentence that show it; the
learner's crash is said, not raised; the cell is skipped while nbgrader grades.

Each wrong piece is written as a learner would write it."""

import pytest
import torch
import torch.nn.functional as F

from tformer_grading.pictures import training_curves as training
from tformer_ref import training as ref

SAME = "Your run trains as the reference's does."


def shift_not_shifted(tgt):  # both halves cut the same way: the labels are the input
    return tgt[:, :-1], tgt[:, :-1]


def shift_sequence_first(tgt):  # the seed's slices, for [St, B] tensors
    return tgt[:-1, :], tgt[1:, :]


def loss_summed(logits, labels, pad_id, label_smoothing):
    return F.cross_entropy(
        logits.reshape(-1, logits.size(-1)),
        labels.reshape(-1),
        ignore_index=pad_id,
        reduction="sum",
    )


def step_never_zeroes(
    model, src, tgt, optimizer, scheduler, max_norm, pad_id, label_smoothing
):
    model.train()
    tgt_in, labels = ref.shift_targets(tgt)
    loss = ref.sequence_loss(model(src, tgt_in), labels, pad_id, label_smoothing)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    scheduler.step()
    return loss.item(), norm.item()


def accumulate_sums(model, micro_batches, optimizer, scheduler, loss_fn):
    optimizer.zero_grad()
    for batch in micro_batches:
        loss_sum, _ = loss_fn(model, batch)
        loss_sum.backward()  # never divided: the step is the sum's
    optimizer.step()
    scheduler.step()


def amp_clips_scaled_gradients(model, batch, loss_fn, optimizer, scaler, max_norm):
    optimizer.zero_grad()
    with torch.amp.autocast("cpu", dtype=torch.bfloat16):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)  # before unscale_
    scaler.step(optimizer)
    scaler.update()
    return loss


@pytest.mark.parametrize(
    "kind, piece",
    [
        ("shift_targets", ref.shift_targets),
        ("sequence_loss", ref.sequence_loss),
        ("train_step", ref.train_step),
    ],
)
def test_a_right_piece_trains_as_the_reference(kind, piece):
    runs = training.train(kind, piece, steps=40)
    assert runs.mine.loss == pytest.approx(runs.reference.loss, rel=1e-3)
    assert training.story(runs).endswith(SAME)


def test_labels_equal_to_the_input_train_on_something_easier():
    runs = training.train("shift_targets", shift_not_shifted, steps=60)
    assert runs.mine.trained_on[-1] < 0.1
    assert runs.mine.accuracy[-1] < 0.3 < runs.reference.accuracy[-1]
    assert "easier than the task" in training.story(runs)


def test_a_summed_loss_trains_alike_under_adam_but_reports_another_number():
    runs = training.train("sequence_loss", loss_summed, steps=60)
    said = training.story(runs)
    assert "trains as the reference's does, but the loss your code reports" in said


def test_gradients_never_zeroed_learn_slower():
    runs = training.train("train_step", step_never_zeroes, steps=60)
    assert runs.mine.loss[-1] > 1.5 * runs.reference.loss[-1]
    said = training.story(runs)
    assert "The reference's run was below your final loss by step 10." in said
    assert "Your run's loss stopped falling after step" in said


def test_accumulated_sums_diverge():
    runs = training.train("accumulation_step", accumulate_sums, steps=40)
    assert "became nan" in training.story(runs)


def test_clipping_the_scaled_gradients_hardly_learns():
    runs = training.train("amp_step", amp_clips_scaled_gradients, steps=60)
    assert "hardly learned" in training.story(runs)


def test_a_crash_in_the_learners_code_is_said():
    runs = training.train("shift_targets", shift_sequence_first, steps=20)
    said = training.story(runs)
    assert said.startswith("Your code raised ValueError") and "(at step 0)" in said


def test_the_picture_and_its_words(capsys):
    runs = training.train("sequence_loss", loss_summed, steps=30)
    picture = training.draw(runs)
    assert picture.png[:4] == b"\x89PNG" and picture.caption == training.story(runs)
    assert picture.alt.startswith("Two line charts of the sequence_loss training runs")
    # Outside a notebook the cell prints what it measured.
    training.show_training("train_step", step_never_zeroes, steps=30)
    out = capsys.readouterr()
    assert "was below your final loss by step" in out.out and out.err == ""


def test_skipped_while_nbgrader_grades(monkeypatch, capsys):
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    training.show_training("shift_targets", ref.shift_targets)
    assert "Skipped while grading" in capsys.readouterr().out


def test_an_unknown_kind_is_named():
    with pytest.raises(ValueError, match="kind must be one of shift_targets"):
        training.train("shift", ref.shift_targets)
