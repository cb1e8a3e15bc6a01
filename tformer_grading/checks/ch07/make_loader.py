"""Checks for exercise ``make_loader`` of chapter 7 (book/ch07_scale):
``make_loader(dataset, rank, world_size, epoch, batch_size) -> DataLoader``, each rank's
share of every epoch, reshuffled every epoch.

A behaviour check: it reads which samples each rank gets in each epoch and names the
first probe that sees a mistake.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.utils.data import Dataset

from ...guard.integrity import seal
from ..diagnosis import (
    Diagnosis,
    Raised,
    fail,
    passed,
    quiet,
    verify_integrity,
)
from .sections import S_SAMPLER

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True

# ----------------------------------------------------- DistributedSampler and set_epoch

EPOCHS = 3


class IndexDataset(Dataset):
    """Sample i is the tensor i: a loader's batches then say which samples it read."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        return torch.tensor(i)


BATCH_TOO_BIG = Diagnosis(
    "batches larger than batch_size",
    "Each rank's DataLoader must yield at most batch_size samples at a time: "
    "batch_size is the batch of one process (not the global batch), so pass "
    "batch_size=batch_size to the DataLoader.",
    S_SAMPLER,
)


def _read(title, make_loader, n, rank, world, epoch, batch_size):
    """(the sample indices, in order, of what ``make_loader`` gives ``rank``, the size
    of each of its batches, the class name of its sampler)."""
    call = (
        f"make_loader(dataset, rank={rank}, world_size={world}, epoch={epoch}, "
        f"batch_size={batch_size})"
    )
    try:
        with quiet():  # a warning on stderr would make nbgrader zero the cell
            loader = make_loader(IndexDataset(n), rank, world, epoch, batch_size)
            batches = list(loader)
        batches = [
            b[0] if isinstance(b, (list, tuple)) and len(b) == 1 else b for b in batches
        ]
        for batch in batches:
            if not isinstance(batch, torch.Tensor):
                raise TypeError(
                    f"expected batches of sample tensors, got {type(batch).__name__}"
                )
    except Exception as exc:  # noqa: BLE001 - the learner's code may raise anything
        fail(
            title,
            f"your code raised {Raised(exc)!r} while the check ran {call}.",
            S_SAMPLER,
        )
    biggest = max((b.numel() for b in batches), default=0)
    if biggest > batch_size:
        BATCH_TOO_BIG.fail(title, f"{call} gave batches of {biggest} samples.")
    return (
        [i for batch in batches for i in batch.flatten().tolist()],
        [b.numel() for b in batches],
        type(getattr(loader, "sampler", None)).__name__,
    )


@dataclass(frozen=True)
class _Reads:
    """What each rank read in each epoch (``order[rank, epoch]``, its batch sizes
    ``sizes[rank, epoch]``), rank 0's epoch 1 read a second time (``again``), and the
    class name of rank 0's sampler."""

    world: int
    n: int
    batch_size: int
    order: dict
    sizes: dict
    again: list
    sampler: str

    def together(self, epoch):
        return [i for rank in range(self.world) for i in self.order[rank, epoch]]

    def counts(self, epoch):
        return [len(self.order[rank, epoch]) for rank in range(self.world)]


def _read_all(title, make_loader, world, n, batch_size) -> _Reads:
    reads = {
        (rank, epoch): _read(title, make_loader, n, rank, world, epoch, batch_size)
        for epoch in range(EPOCHS)
        for rank in range(world)
    }
    again, _, _ = _read(title, make_loader, n, 0, world, 1, batch_size)
    return _Reads(
        world,
        n,
        batch_size,
        {key: r[0] for key, r in reads.items()},
        {key: r[1] for key, r in reads.items()},
        again,
        reads[0, 0][2],
    )


# Each probe returns what it saw when the loader shows its mistake, else None.


def _every_rank_reads_everything(reads):
    everything = list(range(reads.n))
    if all(sorted(reads.order[rank, 0]) == everything for rank in range(reads.world)):
        return f"Each of the {reads.world} ranks read all {reads.n} samples in epoch 0"
    return None


def _sampler_not_split(reads):
    if reads.sampler == "DistributedSampler":
        return _every_rank_reads_everything(reads)
    return None


SAMPLER_NOT_SPLIT = Diagnosis(
    "DistributedSampler not told the world",
    "Your loader has a DistributedSampler, yet every rank reads every sample: its "
    "num_replicas must be world_size (and rank your rank), so that each rank gets its "
    "own 1/world_size of the samples.",
    S_SAMPLER,
)
NO_SAMPLER = Diagnosis(
    "no DistributedSampler",
    "Every rank reads the whole dataset, so the processes compute the same gradients "
    "and DDP buys nothing. Pass sampler=DistributedSampler(dataset, "
    "num_replicas=world_size, rank=rank) to the DataLoader (and no shuffle=True: the "
    "sampler shuffles).",
    S_SAMPLER,
)


def _ranks_read_the_same(reads):
    first = reads.order[0, 0]
    if all(reads.order[rank, 0] == first for rank in range(1, reads.world)):
        return (
            f"In epoch 0 all {reads.world} ranks read the same {len(first)} "
            "samples, in the same order"
        )
    return None


RANK_IGNORED = Diagnosis(
    "rank not used",
    "Every rank got the same share: the loader does not depend on its rank argument. "
    "Pass rank=rank (and num_replicas=world_size) to the DistributedSampler.",
    S_SAMPLER,
)


def _batches_too_small(reads):
    for (rank, epoch), sizes in reads.sizes.items():
        if any(size < reads.batch_size for size in sizes[:-1]):
            return (
                f"Rank {rank}'s batches in epoch {epoch} held {sizes} samples, "
                f"with batch_size={reads.batch_size}"
            )
    return None


BATCH_TOO_SMALL = Diagnosis(
    "batches smaller than batch_size",
    "batch_size is the batch of one process: every batch but the last holds "
    "batch_size samples. Do not divide it by world_size (the global batch is "
    "world_size × batch_size).",
    S_SAMPLER,
)


def _samples_read_twice(reads):
    for epoch in range(EPOCHS):
        together = reads.together(epoch)
        repeats = len(together) - len(set(together))
        # DistributedSampler pads with repeats (or drops, with drop_last) up to
        # world_size - 1 samples so that every rank gets as many: more overlap means the
        # ranks disagree.
        if repeats >= reads.world:
            shared = len(set(reads.order[0, epoch]) & set(reads.order[1, epoch]))
            return (
                f"In epoch {epoch} {repeats} samples were read by more than one "
                f"rank (ranks 0 and 1 share {shared} of their "
                f"{len(reads.order[0, epoch])})"
            )
    return None


RANKS_OVERLAP = Diagnosis(
    "ranks overlap",
    "Several ranks read the same samples in one epoch. Every rank must shuffle with "
    "the same seed (the DistributedSampler's default) and then take its own share.",
    S_SAMPLER,
)


def _whole_batches_of_a_share(reads, count: int) -> bool:
    """``count`` samples is a rank's share (n / world, rounded either way) cut down to
    whole batches."""
    b = reads.batch_size
    shares = {reads.n // reads.world, -(-reads.n // reads.world)}
    return any(count == share // b * b < share for share in shares)


def _last_batch_dropped(reads):
    for epoch in range(EPOCHS):
        distinct = len(set(reads.together(epoch)))
        cut = all(_whole_batches_of_a_share(reads, c) for c in reads.counts(epoch))
        if distinct <= reads.n - reads.world and cut:
            return (
                f"In epoch {epoch} the ranks together read only {distinct} of the "
                f"{reads.n} samples, each rank {reads.counts(epoch)}, all in full "
                f"batches of {reads.batch_size}: the last, smaller batch was "
                "dropped"
            )
    return None


LAST_BATCH_DROPPED = Diagnosis(
    "last batch dropped",
    "Each epoch every sample must be read: keep the DataLoader's last, smaller batch "
    "(no drop_last=True on the DataLoader). Only DistributedSampler's own drop_last "
    "may leave out fewer than world_size samples.",
    S_SAMPLER,
)


def _samples_missed(reads):
    for epoch in range(EPOCHS):
        distinct = len(set(reads.together(epoch)))
        if distinct <= reads.n - reads.world:
            return (
                f"In epoch {epoch} the ranks together read only {distinct} of the "
                f"{reads.n} samples (each rank {reads.counts(epoch)}; a share is "
                f"about {reads.n / reads.world:.3g})"
            )
    return None


EPOCH_INCOMPLETE = Diagnosis(
    "epoch misses samples",
    "Each epoch the ranks together must read the whole dataset; DistributedSampler "
    "gives every rank its share (padding, or with drop_last dropping, fewer than "
    "world_size samples).",
    S_SAMPLER,
)


def _order_changes_on_repeat(reads):
    if reads.again != reads.order[0, 1]:
        return "Two calls for the same rank and epoch gave different orders"
    return None


UNSEEDED_SHUFFLE = Diagnosis(
    "shuffle not seeded",
    "The ranks are separate processes: they agree on how to split an epoch only when "
    "each computes the same shuffle, so the shuffle must be seeded "
    "(DistributedSampler(..., seed=...) does it) and two calls with the same arguments "
    "must give the same order.",
    S_SAMPLER,
)


def _sorted_every_epoch(reads):
    first = reads.order[0, 0]
    if first == sorted(first) and reads.order[0, 1] == first:
        return f"Rank 0 read {first} in epochs 0 and 1"
    return None


NO_SHUFFLE = Diagnosis(
    "no shuffling",
    "Every epoch reads the samples in the same, sorted order. Use "
    "DistributedSampler(..., shuffle=True) (its default) and sampler.set_epoch(epoch).",
    S_SAMPLER,
)


def _same_order_every_epoch(reads):
    first = reads.order[0, 0]
    if reads.order[0, 1] == first and reads.order[0, 2] == first:
        return f"Rank 0 read {first} in epochs 0, 1 and 2"
    return None


NO_SET_EPOCH = Diagnosis(
    "no set_epoch",
    "The order is shuffled but the same in every epoch. DistributedSampler seeds its "
    "shuffle with seed + epoch, and the epoch only changes when you call "
    "sampler.set_epoch(epoch) before iterating.",
    S_SAMPLER,
)


def _two_epochs_alike(reads):
    for a, b in ((0, 1), (1, 2), (0, 2)):
        if reads.order[0, a] == reads.order[0, b]:
            return f"Rank 0 read the same order in epochs {a} and {b}"
    return None


EPOCHS_REPEAT = Diagnosis(
    "epochs repeat an order",
    "Each epoch must have its own shuffle: call sampler.set_epoch(epoch) with the "
    "epoch itself (DistributedSampler then shuffles with seed + epoch).",
    S_SAMPLER,
)


def _same_split_every_epoch(reads):
    shares = [set(reads.order[0, epoch]) for epoch in range(EPOCHS)]
    if shares[0] == shares[1] == shares[2]:
        return (
            f"Rank 0 read the same {len(shares[0])} samples (in a new order) in "
            "epochs 0, 1 and 2"
        )
    return None


FIXED_SPLIT = Diagnosis(
    "split never reshuffled",
    "Which samples each rank gets must change from epoch to epoch: shuffle the whole "
    "dataset with the shared, epoch-dependent seed first, then split it "
    "(DistributedSampler with set_epoch does both), not each rank's fixed share.",
    S_SAMPLER,
)

# In this order: the first probe that sees a mistake names it.
LOADER_PROBES = (
    (_sampler_not_split, SAMPLER_NOT_SPLIT),
    (_every_rank_reads_everything, NO_SAMPLER),
    (_ranks_read_the_same, RANK_IGNORED),
    (_batches_too_small, BATCH_TOO_SMALL),
    (_samples_read_twice, RANKS_OVERLAP),
    (_last_batch_dropped, LAST_BATCH_DROPPED),
    (_samples_missed, EPOCH_INCOMPLETE),
    (_order_changes_on_repeat, UNSEEDED_SHUFFLE),
    (_sorted_every_epoch, NO_SHUFFLE),
    (_same_order_every_epoch, NO_SET_EPOCH),
    (_two_epochs_alike, EPOCHS_REPEAT),
    (_same_split_every_epoch, FIXED_SPLIT),
)


def check_make_loader(
    make_loader, world_sizes=(2, 4), n: int = 24, batch_size: int = 3
) -> None:
    """``make_loader(dataset, rank, world_size, epoch, batch_size)``: the DataLoader
    rank ``rank`` uses in epoch ``epoch``. Each epoch the ranks must split the dataset
    between them (no sample read twice, none missed: no drop_last on the DataLoader),
    in batches of batch_size per rank, in a shuffled order that changes from epoch to
    epoch (and so does the split) and is the same whenever asked again."""
    title = "make_loader"
    verify_integrity()
    for world in world_sizes:
        reads = _read_all(title, make_loader, world, n, batch_size)
        for probe, diagnosis in LOADER_PROBES:
            seen = probe(reads)
            if seen is not None:
                diagnosis.fail(title, f"{seen} (world_size={world}, {n} samples).")
    passed(
        title,
        f"ranks split each epoch's samples, reshuffled every epoch "
        f"(world sizes {list(world_sizes)})",
    )


seal(__name__)
