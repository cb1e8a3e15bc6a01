"""The toy date task: generation, vocabulary, collate (dynamic padding) and the bucketing sampler."""

import datetime as dt

import pytest
import torch
from torch.utils.data import DataLoader

from tformer_ref.data import (
    BOS,
    EOS,
    PAD,
    STYLES,
    BucketBatchSampler,
    CharVocab,
    Collate,
    PairDataset,
    all_dates,
    make_pairs,
    pad_batch,
    render_target,
)


def test_pairs_are_seeded_and_held_out_dates_are_disjoint():
    train, test = make_pairs(3000, 500, seed=1)
    assert (train, test) == make_pairs(3000, 500, seed=1)
    assert make_pairs(3000, 500, seed=2)[0] != train
    # Targets name the date uniquely, so disjoint targets means disjoint dates.
    assert not {t for _, t in train} & {t for _, t in test}
    assert len({t for _, t in train}) == 3000


def test_every_style_is_unambiguous_and_targets_vary_in_length():
    dates = all_dates()
    for style in STYLES:
        rendered = [style(d) for d in dates]
        assert len(set(rendered)) == len(dates), (
            "a style maps two dates to the same text"
        )
    assert render_target(dt.date(2021, 3, 3)) == "3 March 2021"
    lengths = {len(render_target(d)) for d in dates}
    assert min(lengths) == 10 and max(lengths) == 17
    src_lengths = {len(s(d)) for s in STYLES for d in dates[:400]}
    assert max(src_lengths) - min(src_lengths) >= 6


def test_vocab_round_trip_and_no_unknown_characters():
    vocab = CharVocab.for_dates()
    train, test = make_pairs(2000, 200)
    for s, t in train + test:
        assert 3 not in vocab.encode(s) + vocab.encode(t)
        assert vocab.decode(vocab.encode(t, bos=True)) == t
    ids = vocab.encode("5 May 2000", bos=True)
    assert ids[0] == BOS and ids[-1] == EOS
    assert vocab.decode(ids + [7, 8]) == "5 May 2000"  # stops at EOS


def test_dataset_items_and_collate_pad_dynamically():
    vocab = CharVocab.for_dates()
    ds = PairDataset(
        [
            ("2021-03-03", "3 March 2021"),
            ("3.3.2021", "3 March 2021"),
            ("Dec 25, 1999", "25 December 1999"),
        ],
        vocab,
    )
    src, tgt = Collate()([ds[0], ds[1]])
    assert src.shape == (2, 11) and tgt.shape == (2, 14)
    assert src[1, 9:].tolist() == [PAD, PAD] and src[1, 8] == EOS
    src, tgt = Collate(pad_to=(20, 20))([ds[0], ds[1]])
    assert src.shape == (2, 20) and tgt.shape == (2, 20)
    with pytest.raises(ValueError, match="length must be >= the longest"):
        pad_batch([torch.arange(5)], length=3)


def test_bucketing_sampler_covers_everything_once_and_pads_less():
    train, _ = make_pairs(2000, 10)
    vocab = CharVocab.for_dates()
    ds = PairDataset(train, vocab)
    sampler = BucketBatchSampler(ds.lengths(), 32, pool=20, seed=0)
    batches = list(sampler)
    assert len(batches) == len(sampler)
    assert sorted(i for b in batches for i in b) == list(range(len(ds)))
    assert list(sampler) != batches  # a new order next epoch
    sampler.set_epoch(0)
    assert list(sampler) == batches  # reproducible

    def pad_fraction(loader):
        pads = total = 0
        for src, _ in loader:
            pads += (src == PAD).sum().item()
            total += src.numel()
        return pads / total

    bucketed = pad_fraction(DataLoader(ds, batch_sampler=sampler, collate_fn=Collate()))
    random_batches = pad_fraction(
        DataLoader(
            ds,
            batch_size=32,
            shuffle=True,
            collate_fn=Collate(),
            generator=torch.Generator().manual_seed(0),
        )
    )
    assert bucketed < 0.05 < random_batches


def test_drop_last_length():
    sampler = BucketBatchSampler(list(range(105)), 10, pool=3, drop_last=True)
    assert len(list(sampler)) == len(sampler) == 10
