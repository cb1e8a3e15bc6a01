"""Behaviour probes and their runner (tformer_grading/checks/measure/probes.py).

Bug this guards against: a probe table and its runner written once per chapter
(``blocks.holds``, chapter 4's table, chapter 5's ``_observe``; 2026-12-05 aesthetics
review, family F9), each wording the learner's exception its own way.
"""

from __future__ import annotations

import pytest
import torch

from tformer_grading.checks.diagnosis import CheckFailure, Diagnosis, Section
from tformer_grading.checks.measure.probes import (
    Probe,
    batch_independent,
    future_moves_past,
    others_unseen,
    padding_change,
    padding_invisible,
    run_probes,
    share_changed,
    tokens_mix,
    training_changes,
    when_false,
)

S = Section("ch04_blocks", "4.3", "LayerNorm, not BatchNorm")
FIRST = Diagnosis("first", "First.", S)
SECOND = Diagnosis("second", "Second.", S)


def _x(*shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(0))


def test_the_first_failing_probe_names_its_diagnosis():
    probes = (
        Probe(lambda x: None, FIRST),
        Probe(lambda x: "seen twice", SECOND),
        Probe(lambda x: "never reached", FIRST),
    )
    with pytest.raises(CheckFailure, match="'second'. seen twice"):
        run_probes("T", probes, _x(2, 3))


def test_passing_probes_raise_nothing():
    run_probes("T", (Probe(when_false(lambda x: True, "no"), FIRST),), _x(2))


def test_the_learners_exception_is_reported_with_the_probe():
    def broken(x):
        raise ValueError("bad shape")

    with pytest.raises(CheckFailure, match="your block raised .*bad shape.* 'p'"):
        run_probes(
            "T",
            (Probe(broken, FIRST, "p"),),
            _x(2),
            who="your block",
            during=lambda probe: f" in '{probe.name}'",
        )


def test_determinism_reads_the_share_that_changed():
    assert share_changed(lambda: torch.arange(4.0)) == 0.0
    calls = iter([torch.zeros(4), torch.tensor([0.0, 1.0, 0.0, 1.0])])
    assert share_changed(lambda: next(calls)) == 0.5


def test_batch_statistics_are_caught_and_rowwise_maps_pass():
    x = _x(3, 4, 5)
    assert batch_independent(lambda t: torch.layer_norm(t, (5,)), x)
    assert not batch_independent(lambda t: t - t.mean(0), x)


def test_a_batch_of_one_is_compared_only_when_asked():
    x = _x(3, 4, 5)
    squeezed = lambda t: t.squeeze(0) * 2  # a batch of one loses its axis
    assert batch_independent(squeezed, x, alone=False)
    assert not batch_independent(squeezed, x)


def test_tokens_that_never_mix_are_caught():
    x = _x(2, 4, 3)
    assert tokens_mix(lambda t: t.cumsum(1).flip(1), x)
    assert not tokens_mix(lambda t: t * 2, x)


def test_reading_another_sequences_token_is_caught():
    x = _x(3, 4, 5)
    assert others_unseen(lambda t: t - t.mean((0, 1)), x)  # statistics only
    assert not others_unseen(lambda t: t + t[:, -1:].sum(0), x)


def test_the_past_seeing_the_future_is_read_back():
    x = _x(2, 6, 3)
    assert future_moves_past(lambda t: t * 2, x, 3) is None
    moved, by = future_moves_past(lambda t: t + t[:, 4:5], x, 3)
    assert moved == [0, 1, 2] and by > 0


def test_masked_padding_must_change_nothing():
    def masked_mean(x, mask):
        keep = mask[:, 0, 0, :, None].to(x.dtype)
        return x + (x * keep).sum(1, keepdim=True) / keep.sum(1, keepdim=True)

    x, pad = _x(2, 4, 3), _x(2, 3, 3) * 10
    assert padding_invisible(masked_mean, x, pad)
    assert not padding_invisible(lambda t, m: t + t.mean(1, keepdim=True), x, pad)


def test_padding_of_a_memory_moves_the_whole_output_by_the_change_measured():
    queries = _x(2, 5, 3)

    def cross(memory, mask):  # each query attends to the memory's real positions
        scores = (queries @ memory.transpose(1, 2)).masked_fill(~mask[:, 0], -1e9)
        return scores.softmax(-1) @ memory

    memory, pad = _x(2, 3, 3), torch.full((2, 2, 3), 100.0)
    assert padding_change(cross, memory, pad, aligned=False) == 0.0

    def ignores_mask(memory, mask):  # a planted mistake: the mask never applied
        return cross(memory, torch.ones_like(mask))

    unmasked = padding_change(ignores_mask, memory, pad, aligned=False)
    assert unmasked > 1.0


class _Scaled(torch.nn.Linear):
    """Right in eval mode; while training, scaled (or reshaped) by a planted mistake."""

    def __init__(self, mistake):
        super().__init__(3, 3)
        self.mistake = mistake

    def forward(self, x):
        out = super().forward(x)
        return self.mistake(out) if self.training else out


def test_a_computation_only_training_mode_does_is_read_back():
    x = _x(4, 3)
    halved = _Scaled(lambda out: out * 0.5)
    seen = training_changes(halved, lambda: halved(x))
    assert "another output, the same on every call" in seen
    assert not halved.training  # left in eval mode, for the checks that follow
    flat = _Scaled(lambda out: out.flatten())
    assert "shape [12], in eval mode [4, 3]" in training_changes(flat, lambda: flat(x))


def test_dropout_and_no_training_path_are_accepted():
    x = _x(64, 3)
    dropped = _Scaled(torch.nn.Dropout(0.3))
    assert training_changes(dropped, lambda: dropped(x)) is None
    plain = torch.nn.Linear(3, 3)
    assert training_changes(plain, lambda: plain(x)) is None
