"""Chapter 7's measured bank for make_loader (the format: tests/bank/bank.py)."""

import random

import torch
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, Subset

from bank import GENERIC, right, wrong  # noqa: F401
from exercise_cells import graders

GRADERS = graders("ch07_scale", {"make_loader": "make_loader"})


@right("make_loader")
def loader_distributed_sampler(dataset, rank, world_size, epoch, batch_size):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


@right("make_loader")
def loader_shared_permutation_strided(dataset, rank, world_size, epoch, batch_size):
    g = torch.Generator().manual_seed(1234 + epoch)
    order = torch.randperm(len(dataset), generator=g)[rank::world_size].tolist()
    return DataLoader(Subset(dataset, order), batch_size=batch_size)


@right("make_loader")
def loader_sampler_drop_last(dataset, rank, world_size, epoch, batch_size):
    sampler = DistributedSampler(
        dataset, num_replicas=world_size, rank=rank, seed=7, drop_last=True
    )
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, num_workers=0)


@right("make_loader")
def loader_contiguous_chunks(dataset, rank, world_size, epoch, batch_size):
    g = torch.Generator()
    g.manual_seed(epoch)
    chunk = torch.randperm(len(dataset), generator=g).tensor_split(world_size)[rank]
    return DataLoader(dataset, sampler=chunk.tolist(), batch_size=batch_size)


@right("make_loader")
def loader_seed_is_the_epoch(dataset, rank, world_size, epoch, batch_size):
    # seed=epoch instead of set_epoch: a new, shared shuffle every epoch all the same.
    sampler = DistributedSampler(dataset, world_size, rank, shuffle=True, seed=epoch)
    return DataLoader(dataset, batch_size, sampler=sampler)


@right("make_loader")
def loader_batch_sampler(dataset, rank, world_size, epoch, batch_size):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, seed=3)
    sampler.set_epoch(epoch)
    batches = BatchSampler(sampler, batch_size=batch_size, drop_last=False)
    return DataLoader(dataset, batch_sampler=batches)


@right("make_loader")
def loader_python_random(dataset, rank, world_size, epoch, batch_size):
    indices = list(range(len(dataset)))
    random.Random(100 + epoch).shuffle(indices)
    mine = indices[rank : len(indices) : world_size]
    return DataLoader(Subset(dataset, mine), batch_size=batch_size, shuffle=False)


@right("make_loader")
def loader_sampler_indices_as_subset(dataset, rank, world_size, epoch, batch_size):
    sampler = DistributedSampler(
        dataset,
        num_replicas=world_size,
        rank=rank,
        shuffle=True,
        seed=0,
        drop_last=False,
    )
    sampler.set_epoch(epoch)
    return DataLoader(
        Subset(dataset, list(iter(sampler))), batch_size=batch_size, pin_memory=False
    )


@wrong("make_loader", r"'no DistributedSampler'", listed=True)
def loader_plain_shuffle(dataset, rank, world_size, epoch, batch_size):
    # The single-process loader, unchanged.
    return DataLoader(dataset, batch_size=batch_size, shuffle=True)


@wrong("make_loader", r"'no set_epoch'", listed=True)
def loader_forgets_set_epoch(dataset, rank, world_size, epoch, batch_size):
    # The epoch argument is never used.
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


@wrong("make_loader", r"'no shuffling'", listed=True)
def loader_shuffle_false(dataset, rank, world_size, epoch, batch_size):
    # shuffle=False, as an evaluation loader would have.
    sampler = DistributedSampler(
        dataset, num_replicas=world_size, rank=rank, shuffle=False
    )
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


@wrong("make_loader", r"'batches larger than batch_size'", listed=True)
def loader_global_batch(dataset, rank, world_size, epoch, batch_size):
    # Reads batch_size as the global batch and multiplies it by the world size.
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size * world_size, sampler=sampler)


@wrong("make_loader", r"'epoch misses samples'.*each rank \[6, 6\]", listed=True)
def loader_replicas_doubled(dataset, rank, world_size, epoch, batch_size):
    # num_replicas counts two processes per "world" slot.
    sampler = DistributedSampler(dataset, num_replicas=2 * world_size, rank=rank)
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


@wrong(
    "make_loader",
    r"'ranks overlap'.*7 samples were read by more than one rank",
    listed=True,
)
def loader_seed_from_rank(dataset, rank, world_size, epoch, batch_size):
    # A "different seed per process" habit from data augmentation.
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, seed=rank)
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


@wrong("make_loader", r"'shuffle not seeded'|'ranks overlap'", listed=True)
def loader_unseeded_randperm(dataset, rank, world_size, epoch, batch_size):
    # A fresh unseeded permutation per call: the processes cannot agree on it.
    order = torch.randperm(len(dataset))[rank::world_size].tolist()
    return DataLoader(Subset(dataset, order), batch_size=batch_size)


@wrong("make_loader", r"'DistributedSampler not told the world'", listed=False)
def loader_one_replica(dataset, rank, world_size, epoch, batch_size):
    # num_replicas=1 copied from a single-GPU example.
    sampler = DistributedSampler(dataset, num_replicas=1, rank=0)
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


@wrong(
    "make_loader",
    r"'rank not used'.*all 2 ranks read the same 12 samples",
    listed=False,
)
def loader_rank_zero(dataset, rank, world_size, epoch, batch_size):
    # rank=0 hard-coded while testing on one machine.
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=0)
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


@wrong("make_loader", r"'rank not used'", listed=False)
def loader_first_share_for_all(dataset, rank, world_size, epoch, batch_size):
    # A shared shuffle, but every rank takes the first 1/world_size of it.
    g = torch.Generator().manual_seed(epoch)
    order = torch.randperm(len(dataset), generator=g)
    share = len(dataset) // world_size
    return DataLoader(Subset(dataset, order[:share].tolist()), batch_size=batch_size)


@wrong(
    "make_loader", r"'batches smaller than batch_size'.*held \[1, 1, 1", listed=False
)
def loader_batch_divided_by_world(dataset, rank, world_size, epoch, batch_size):
    # Divides the batch between the processes, taking batch_size as the global batch.
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    sampler.set_epoch(epoch)
    return DataLoader(
        dataset, batch_size=max(1, batch_size // world_size), sampler=sampler
    )


@wrong("make_loader", r"'last batch dropped'.*each rank \[4, 4, 4\]", listed=False)
def loader_dataloader_drop_last(dataset, rank, world_size, epoch, batch_size):
    # drop_last=True on the DataLoader, "so every step has a full batch".
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=True)


@wrong("make_loader", r"'last batch dropped'", listed=False)
def loader_batch_sampler_drop_last(dataset, rank, world_size, epoch, batch_size):
    # A BatchSampler with drop_last=True on top of the right sampler.
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    sampler.set_epoch(epoch)
    return DataLoader(
        dataset, batch_sampler=BatchSampler(sampler, batch_size, drop_last=True)
    )


@wrong("make_loader", r"'ranks overlap'", listed=False)
def loader_set_epoch_rank(dataset, rank, world_size, epoch, batch_size):
    # set_epoch(rank): the rank and the epoch arguments mixed up.
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    sampler.set_epoch(rank)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


@wrong("make_loader", r"'ranks overlap'", listed=False)
def loader_generator_per_rank(dataset, rank, world_size, epoch, batch_size):
    # Seeds the shared permutation with rank + epoch: each rank shuffles differently.
    g = torch.Generator().manual_seed(rank + 10 * epoch)
    order = torch.randperm(len(dataset), generator=g)[rank::world_size]
    return DataLoader(Subset(dataset, order.tolist()), batch_size=batch_size)


@wrong("make_loader", r"'epochs repeat an order'.*epochs 0 and 2", listed=False)
def loader_epoch_mod_two(dataset, rank, world_size, epoch, batch_size):
    # set_epoch(epoch % 2), copied from a two-phase schedule.
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    sampler.set_epoch(epoch % 2)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


@wrong("make_loader", r"'no set_epoch'", listed=False)
def loader_fixed_generator(dataset, rank, world_size, epoch, batch_size):
    # A seeded permutation, but seeded with a constant: every epoch the same.
    g = torch.Generator().manual_seed(0)
    order = torch.randperm(len(dataset), generator=g)[rank::world_size].tolist()
    return DataLoader(Subset(dataset, order), batch_size=batch_size)


@wrong("make_loader", r"'split never reshuffled'", listed=False)
def loader_shuffle_own_share(dataset, rank, world_size, epoch, batch_size):
    # Shards first, then shuffles each rank's fixed share with the epoch's seed.
    share = Subset(dataset, list(range(rank, len(dataset), world_size)))
    g = torch.Generator().manual_seed(epoch)
    return DataLoader(share, batch_size=batch_size, shuffle=True, generator=g)


@wrong("make_loader", r"'split never reshuffled'", listed=False)
def loader_contiguous_block_shuffled(dataset, rank, world_size, epoch, batch_size):
    # Each rank owns a contiguous block and reorders it with the epoch's seed.
    per = -(-len(dataset) // world_size)
    block = list(range(rank * per, min(len(dataset), (rank + 1) * per)))
    random.Random(epoch).shuffle(block)
    return DataLoader(Subset(dataset, block), batch_size=batch_size)


@wrong("make_loader", r"'shuffle not seeded'", listed=False)
def loader_unseeded_within_share(dataset, rank, world_size, epoch, batch_size):
    # The right share, then shuffle=True with the DataLoader's unseeded generator.
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    sampler.set_epoch(epoch)
    return DataLoader(
        Subset(dataset, list(sampler)), batch_size=batch_size, shuffle=True
    )


@wrong("make_loader", r"raised ValueError: Invalid rank 2", listed=False)
def loader_ranks_from_one(dataset, rank, world_size, epoch, batch_size):
    # Counts ranks from 1, so the last rank is out of range.
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank + 1)
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


@wrong(
    "make_loader",
    r"raised ValueError: Invalid rank.*at line \d+ of your code",
    listed=False,
)
def loader_positional_arguments_swapped(dataset, rank, world_size, epoch, batch_size):
    # DistributedSampler(dataset, rank, world_size): the positional order is replicas,
    # then rank.
    sampler = DistributedSampler(dataset, rank, world_size)
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


@wrong(
    "make_loader",
    r"raised ValueError: sampler option is mutually exclusive with "
    r"shuffle.*follows a sampler, not both",
    listed=False,
)
def loader_sampler_and_shuffle(dataset, rank, world_size, epoch, batch_size):
    # shuffle=True kept next to the sampler.
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, shuffle=True)


@wrong("make_loader", r"expected batches of sample tensors, got int", listed=False)
def loader_returns_sampler(dataset, rank, world_size, epoch, batch_size):
    # Returns the sampler: it yields indices, not batches of samples.
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    sampler.set_epoch(epoch)
    return sampler


@wrong("make_loader", r"'epochs repeat an order'.*epochs 0 and 1", listed=False)
def loader_epoch_halved(dataset, rank, world_size, epoch, batch_size):
    # set_epoch(epoch // 2): a new shuffle only every second epoch.
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    sampler.set_epoch(epoch // 2)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


@wrong("make_loader", r"'epoch misses samples'.*each rank \[8, 8\]", listed=False)
def loader_share_off_by_one(dataset, rank, world_size, epoch, batch_size):
    # Cuts the shared permutation into world_size + 1 pieces (fence-post mistake).
    g = torch.Generator().manual_seed(epoch)
    order = torch.randperm(len(dataset), generator=g)
    share = len(dataset) // (world_size + 1)
    mine = order[rank * share : (rank + 1) * share]
    return DataLoader(Subset(dataset, mine.tolist()), batch_size=batch_size)
