"""Greedy and beam search: stop at EOS, encode once, eval mode, no grad; beam beats greedy where it should."""

import math

import pytest
import torch
import torch.nn as nn

from tformer_ref.baselines import TorchTransformer
from tformer_ref.decoding import (
    beam_search,
    evaluate_accuracy,
    greedy_decode,
    sequence_accuracy,
    strip,
)

BOS, EOS, PAD = 1, 2, 0


class TableModel(nn.Module):
    """A fake model: the next-token distribution depends only on the prefix, read from a table.

    Rows of src say which table to use, so one batch can mix cases. Records how it is called.
    """

    def __init__(self, tables, vocab=8):
        super().__init__()
        self.tables, self.vocab = tables, vocab
        self.w = nn.Parameter(torch.zeros(1))
        self.encodes = 0
        self.modes = []

    def encode(self, src):
        self.encodes += 1
        return src.float()[..., None], (src != PAD)[:, None, None, :]

    def decode(self, tgt_in, memory, src_mask):
        self.modes.append((self.training, torch.is_grad_enabled()))
        b, t = tgt_in.shape
        logits = torch.full((b, t, self.vocab), -30.0)
        for i in range(b):
            table = self.tables[int(memory[i, 0, 0])]
            prefix = tuple(tgt_in[i, 1:].tolist())
            probs = table.get(prefix, {EOS: 1.0})
            for tok, p in probs.items():
                logits[i, -1, tok] = math.log(p)
        return logits + self.w * 0


# table 0: greedy takes 5 (0.6) then faces a flat distribution; 6 (0.4) then EOS (0.9) is better overall.
TRAP = {
    (): {5: 0.6, 6: 0.4},
    (5,): {3: 0.26, 4: 0.26, 7: 0.26, EOS: 0.22},
    (6,): {EOS: 0.9, 3: 0.1},
    (5, 3): {EOS: 1.0},
    (5, 4): {EOS: 1.0},
    (5, 7): {EOS: 1.0},
}
# table 1: a long output; table 2: EOS at once.
LONG = {(): {3: 1.0}, (3,): {4: 1.0}, (3, 4): {5: 1.0}, (3, 4, 5): {EOS: 1.0}}
SHORT = {(): {EOS: 1.0}}


def test_greedy_stops_at_eos_pads_finished_rows_and_encodes_once():
    model = TableModel({0: TRAP, 1: LONG, 2: SHORT})
    model.train()
    src = torch.tensor([[1, 4], [2, 4]])
    out = greedy_decode(model, src, max_len=10)
    assert out.tolist() == [[BOS, 3, 4, 5, EOS], [BOS, EOS, PAD, PAD, PAD]]
    assert model.encodes == 1 and len(model.modes) == 4  # four steps, not ten
    assert all(mode == (False, False) for mode in model.modes)  # eval mode, no grad
    assert model.training  # the caller's mode is restored


def test_greedy_respects_max_len():
    loop = {(): {3: 1.0}}
    loop.update({(3,) * n: {3: 1.0} for n in range(1, 20)})
    out = greedy_decode(TableModel({0: loop}), torch.tensor([[0]]), max_len=6)
    assert out.shape == (1, 7) and EOS not in out.tolist()[0]


def test_beam_finds_the_better_sequence_greedy_misses():
    model = TableModel({0: TRAP, 1: LONG})
    src = torch.tensor([[0], [1]])
    greedy = greedy_decode(model, src, 10)
    beam = beam_search(model, src, 10, beam_size=3)
    assert strip(greedy[0]) in ([5, 3], [5, 4], [5, 7]) and strip(beam[0]) == [6]
    assert strip(beam[1]) == strip(greedy[1]) == [3, 4, 5]
    assert model.encodes == 2


def test_beam_of_one_is_greedy_on_a_real_model():
    torch.manual_seed(0)
    model = TorchTransformer(
        12, 12, d_model=16, n_heads=8, n_layers=2, d_ff=32, dropout=0.1, max_len=32
    )
    src = torch.randint(3, 12, (6, 5))
    greedy = greedy_decode(model, src, 12)
    beam = beam_search(model, src, 12, beam_size=1)
    assert [strip(r) for r in greedy] == [strip(r) for r in beam]
    assert len({len(strip(r)) for r in greedy}) > 1


def test_beam_without_any_finished_hypothesis_returns_the_best_prefix():
    class Never(dict):  # every prefix: 3 or 4, never EOS
        def get(self, prefix, default=None):
            return {3: 0.9, 4: 0.1}

    out = beam_search(TableModel({0: Never()}), torch.tensor([[0]]), 4, beam_size=2)
    assert out.tolist()[0] == [BOS, 3, 3, 3, 3]


def test_sequence_accuracy_compares_up_to_eos():
    pred = torch.tensor(
        [[BOS, 5, 6, EOS, PAD], [BOS, 5, EOS, 9, 9], [BOS, 5, 7, EOS, PAD]]
    )
    tgt = torch.tensor([[BOS, 5, 6, EOS], [BOS, 5, EOS, PAD], [BOS, 5, 6, EOS]])
    assert sequence_accuracy(pred, tgt) == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="same batch size"):
        sequence_accuracy(pred[:2], tgt)
    model = TableModel({1: LONG})
    batches = [
        (
            torch.tensor([[1], [1]]),
            torch.tensor([[BOS, 3, 4, 5, EOS], [BOS, 3, 4, EOS, PAD]]),
        )
    ]
    assert evaluate_accuracy(model, batches, 8) == 0.5


@pytest.mark.parametrize("cls", ["model", "baseline"])
def test_both_models_train_and_decode_through_the_same_interface(cls):
    from tformer_ref.model import Transformer
    from tformer_ref.training import train_step

    make = Transformer if cls == "model" else TorchTransformer
    torch.manual_seed(0)
    model = make(
        12, 12, d_model=16, n_heads=8, n_layers=2, d_ff=32, dropout=0.0, max_len=32
    )
    src = torch.randint(3, 12, (4, 5))
    tgt = torch.cat(
        [
            torch.ones(4, 1, dtype=torch.long),
            torch.randint(3, 12, (4, 4)),
            torch.full((4, 1), EOS),
        ],
        1,
    )
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = [train_step(model, src, tgt, opt)[0] for _ in range(30)]
    assert losses[-1] < losses[0] / 2
    greedy = greedy_decode(model, src, 8)
    assert [strip(r) for r in greedy] == [
        strip(r) for r in beam_search(model, src, 8, beam_size=1)
    ]
    assert sequence_accuracy(greedy, tgt) == 1.0  # it memorised the four pairs
