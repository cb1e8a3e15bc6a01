"""make_loader (chapter 7, book/ch07_scale): the unit tests of
``ch07.check_make_loader`` (which samples each rank reads in each epoch), with wrong
loaders (each rejected with its named diagnosis) and right ones written differently
(each accepted), and the lesson a failure points to (§7.5).

Each wrong one says what bug it is, spelled as a learner might, not as the check's own
variant is.
"""

import math

import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler, Subset
from units_ch07 import loader_no_sampler

from tformer_grading.checks import CheckFailure, ch07

# -------------------------------------------------------------------------- make_loader


def loader_right(dataset, rank, world_size, epoch, batch_size):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


def loader_right_by_hand(dataset, rank, world_size, epoch, batch_size):
    """A shared permutation seeded by the epoch, every world_size-th element for this
    rank."""
    g = torch.Generator().manual_seed(1234 + epoch)
    order = torch.randperm(len(dataset), generator=g)[rank::world_size].tolist()
    return DataLoader(Subset(dataset, order), batch_size=batch_size)


def loader_right_drop_last(dataset, rank, world_size, epoch, batch_size):
    sampler = DistributedSampler(
        dataset, num_replicas=world_size, rank=rank, seed=7, drop_last=True
    )
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, num_workers=0)


def loader_right_contiguous_chunks(dataset, rank, world_size, epoch, batch_size):
    """A shared permutation per epoch cut into world_size contiguous chunks; a list as
    sampler."""
    g = torch.Generator()
    g.manual_seed(epoch)
    chunk = torch.randperm(len(dataset), generator=g).tensor_split(world_size)[rank]
    return DataLoader(dataset, sampler=chunk.tolist(), batch_size=batch_size)


def loader_no_set_epoch(dataset, rank, world_size, epoch, batch_size):
    # Bug: the same shuffle every epoch.
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


def loader_no_shuffle(dataset, rank, world_size, epoch, batch_size):
    # Bug: the sorted order every epoch.
    sampler = DistributedSampler(
        dataset, num_replicas=world_size, rank=rank, shuffle=False
    )
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


def loader_seed_per_rank(dataset, rank, world_size, epoch, batch_size):
    # Bug: each rank shuffles with its own seed, so the shares overlap.
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, seed=rank)
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


def loader_contiguous_slices(dataset, rank, world_size, epoch, batch_size):
    # Bug: a fixed, sorted slice per rank, never shuffled.
    per = math.ceil(len(dataset) / world_size)
    mine = range(rank * per, min(len(dataset), (rank + 1) * per))
    return DataLoader(Subset(dataset, mine), batch_size=batch_size)


def loader_unseeded(dataset, rank, world_size, epoch, batch_size):
    # Bug: each call a fresh random order, so the ranks disagree on the split.
    order = torch.randperm(len(dataset))[rank::world_size].tolist()
    return DataLoader(Subset(dataset, order), batch_size=batch_size)


def loader_shuffle_and_sampler(dataset, rank, world_size, epoch, batch_size):
    # Bug: shuffle=True beside a sampler, which the DataLoader refuses.
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, shuffle=True)


def loader_world_counted_twice(dataset, rank, world_size, epoch, batch_size):
    # Bug: twice as many replicas as processes, so half of each epoch is never read.
    sampler = DistributedSampler(dataset, num_replicas=2 * world_size, rank=rank)
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


def loader_global_batch(dataset, rank, world_size, epoch, batch_size):
    # Bug: multiplies batch_size by the world size (the global batch), per process.
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size * world_size, sampler=sampler)


@pytest.mark.parametrize(
    "fn",
    [
        loader_right,
        loader_right_by_hand,
        loader_right_drop_last,
        loader_right_contiguous_chunks,
    ],
)
def test_make_loader_accepts_right_implementations(fn, capsys):
    ch07.check_make_loader(fn)
    ch07.check_make_loader(fn, world_sizes=(3,), n=20, batch_size=4)
    assert capsys.readouterr().out.count("✓ make_loader") == 2


@pytest.mark.parametrize(
    "fn,diagnosis",
    [
        (loader_no_sampler, "no DistributedSampler"),
        (loader_no_set_epoch, "no set_epoch"),
        (loader_no_shuffle, "no shuffling"),
        (loader_seed_per_rank, "ranks overlap"),
        (loader_contiguous_slices, "no shuffling"),
        (loader_unseeded, "ranks overlap|different orders"),
        (loader_shuffle_and_sampler, "mutually exclusive"),
        (loader_world_counted_twice, "epoch misses samples"),
        (loader_global_batch, "batches larger than batch_size"),
    ],
)
def test_make_loader_rejects_wrong_implementations(fn, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch07.check_make_loader(fn)


def test_make_loader_diagnoses_point_to_the_lesson():
    with pytest.raises(CheckFailure) as info:
        ch07.check_make_loader(loader_no_set_epoch)
    assert "§7.5 'DistributedSampler and set_epoch'" in str(info.value)
