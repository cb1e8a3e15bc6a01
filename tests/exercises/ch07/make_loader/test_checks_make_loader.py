"""make_loader (chapter 7, book/ch07_scale): the unit tests of
``ch07.check_make_loader`` (which samples each rank reads in each epoch), with wrong
loaders (each rejected with its named diagnosis) and right ones written differently
(each accepted), and the lesson a failure points to (§7.5).

Each wrong one says what bug it is, spelled as a learner might, not as the check's own
variant is.
"""

import math

import pytest
from bank_make_loader import loader_contiguous_chunks as loader_right_contiguous_chunks
from bank_make_loader import loader_distributed_sampler as loader_right
from bank_make_loader import loader_forgets_set_epoch as loader_no_set_epoch
from bank_make_loader import loader_global_batch
from bank_make_loader import loader_replicas_doubled as loader_world_counted_twice
from bank_make_loader import loader_sampler_drop_last as loader_right_drop_last
from bank_make_loader import loader_seed_from_rank as loader_seed_per_rank
from bank_make_loader import loader_shared_permutation_strided as loader_right_by_hand
from bank_make_loader import loader_shuffle_false as loader_no_shuffle
from bank_make_loader import loader_unseeded_randperm as loader_unseeded
from torch.utils.data import DataLoader, DistributedSampler, Subset
from units_ch07 import loader_no_sampler

from tformer_grading.checks import CheckFailure, ch07

# -------------------------------------------------------------------------- make_loader


def loader_contiguous_slices(dataset, rank, world_size, epoch, batch_size):
    # Bug: a fixed, sorted slice per rank, never shuffled.
    per = math.ceil(len(dataset) / world_size)
    mine = range(rank * per, min(len(dataset), (rank + 1) * per))
    return DataLoader(Subset(dataset, mine), batch_size=batch_size)


def loader_shuffle_and_sampler(dataset, rank, world_size, epoch, batch_size):
    # Bug: shuffle=True beside a sampler, which the DataLoader refuses.
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, shuffle=True)


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
