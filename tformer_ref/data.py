"""The chapter 6 toy task: dates written in several styles, to be written out in words.

    "2021-03-03"      -> "3 March 2021"
    "03/03/2021"      -> "3 March 2021"       (day first, as in most of the world)
    "Mar 3, 2021"     -> "3 March 2021"
    "20210303"        -> "3 March 2021"

It needs a real encoder–decoder: the output reorders the input (year last, day first),
turns a month number into a name, drops leading zeros, and both sides change length from
one example to the next (source 8–17 characters, target 10–17), so dynamic padding and
length bucketing matter. Everything is generated from a seed: no download. Held-out
examples use *dates* never seen in training, in any style.

Tokens are characters. Ids 0–3 are special: PAD, BOS, EOS, UNK. Shape letters: B batch,
S length.
"""

from __future__ import annotations

import datetime as dt
import random
from typing import Iterator, Sequence

import torch
from torch.utils.data import Dataset, Sampler

PAD, BOS, EOS, UNK = 0, 1, 2, 3
SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")
MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)

# Every style names day, month and year unambiguously (numeric styles are day-first).
STYLES = (
    lambda d: d.strftime("%Y-%m-%d"),  # 2021-03-03
    lambda d: d.strftime("%d/%m/%Y"),  # 03/03/2021
    lambda d: f"{d.day}.{d.month}.{d.year}",  # 3.3.2021
    lambda d: d.strftime("%Y%m%d"),  # 20210303
    lambda d: f"{MONTHS[d.month - 1][:3]} {d.day}, {d.year}",  # Mar 3, 2021
    lambda d: f"{d.day} {MONTHS[d.month - 1][:3].upper()} {d.year}",  # 3 MAR 2021
    lambda d: f"{MONTHS[d.month - 1].lower()} {d.day} {d.year}",  # march 3 2021
)


def render_target(date: dt.date) -> str:
    """The output style: day without leading zero, full month name, four-digit year.

    Taught in §6.1 'The toy task' (book/ch06_training).

    Examples::

        >>> render_target(dt.date(2021, 3, 3))
        '3 March 2021'
    """
    return f"{date.day} {MONTHS[date.month - 1]} {date.year}"


def all_dates(first_year: int = 1950, last_year: int = 2049) -> list[dt.date]:
    """Every day from 1 January ``first_year`` to 31 December ``last_year``.

    Taught in §6.1 'The toy task' (book/ch06_training).

    Examples::

        >>> dates = all_dates(2000, 2001)
        >>> len(dates), dates[0], dates[-1]
        (731, datetime.date(2000, 1, 1), datetime.date(2001, 12, 31))
    """
    if last_year < first_year:
        raise ValueError(
            f"last_year must be >= first_year, got {first_year}..{last_year}"
        )
    start, end = dt.date(first_year, 1, 1), dt.date(last_year, 12, 31)
    return [start + dt.timedelta(days=i) for i in range((end - start).days + 1)]


def make_pairs(
    n_train: int, n_test: int, seed: int = 0
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(train, test) lists of (source, target) strings. The two use disjoint sets of
    dates, so a held-out example is never a training date written in another style.

    Taught in §6.1 'The toy task' (book/ch06_training).

    Examples::

        >>> train, test = make_pairs(3, 2, seed=0)
        >>> len(train), len(test), train[0]
        (3, 2, ('1962-10-23', '23 October 1962'))
    """
    rng = random.Random(seed)
    dates = all_dates()
    rng.shuffle(dates)
    if n_train + n_test > len(dates):
        raise ValueError(
            f"n_train + n_test must be <= {len(dates)} distinct dates, "
            f"got {n_train + n_test}"
        )

    def pairs(ds):
        return [(rng.choice(STYLES)(d), render_target(d)) for d in ds]

    return pairs(dates[:n_train]), pairs(dates[n_train : n_train + n_test])


class CharVocab:
    """Characters <-> ids, with PAD, BOS, EOS, UNK at 0..3. One vocabulary serves both
    sides.

    Taught in §6.1 'The toy task' (book/ch06_training).

    Examples::

        >>> vocab = CharVocab(["3 May"])
        >>> vocab.itos[4:], vocab.encode("3 May", bos=True)  # BOS ... EOS
        ([' ', '3', 'M', 'a', 'y'], [1, 5, 4, 6, 7, 8, 2])
        >>> vocab.decode([1, 5, 4, 6, 7, 8, 2, 0, 0])
        '3 May'
    """

    def __init__(self, texts: Sequence[str]):
        chars = sorted({c for t in texts for c in t})
        self.itos = list(SPECIALS) + chars
        self.stoi = {s: i for i, s in enumerate(self.itos)}

    @classmethod
    def for_dates(cls) -> "CharVocab":
        """Every character that a style or the target can produce (so that unseen
        test dates need no UNK)."""
        days = [dt.date(2000, m, 28) for m in range(1, 13)]
        sample = [style(d) for d in days for style in STYLES]
        targets = [render_target(dt.date(2000, m, 1)) for m in range(1, 13)]
        return cls(sample + targets + ["0123456789"])

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, text: str, bos: bool = False, eos: bool = True) -> list[int]:
        """Text -> ids (unknown characters -> UNK), BOS first if asked, EOS last."""
        ids = [self.stoi.get(c, UNK) for c in text]
        return ([BOS] if bos else []) + ids + ([EOS] if eos else [])

    def decode(self, ids: Sequence[int] | torch.Tensor) -> str:
        """Ids -> text, stopping at the first EOS and skipping PAD and BOS."""
        out = []
        for i in ids.tolist() if isinstance(ids, torch.Tensor) else ids:
            if i == EOS:
                break
            if i not in (PAD, BOS):
                out.append(self.itos[i] if 0 <= i < len(self.itos) else SPECIALS[UNK])
        return "".join(out)


class PairDataset(Dataset):
    """Item i = (src ids [Ss] = text + EOS, tgt ids [St] = BOS + text + EOS),
    LongTensors of varying length.

    Taught in §6.1 'The toy task' (book/ch06_training).

    Examples::

        >>> data = PairDataset([("2021-03-03", "3 March 2021")], CharVocab.for_dates())
        >>> src, tgt = data[0]
        >>> len(src), len(tgt), tgt[0].item(), src[-1].item()  # 10+EOS, BOS+12+EOS
        (11, 14, 1, 2)
    """

    def __init__(self, pairs: Sequence[tuple[str, str]], vocab: CharVocab):
        self.pairs, self.vocab = list(pairs), vocab
        self.items = [
            (torch.tensor(vocab.encode(s)), torch.tensor(vocab.encode(t, bos=True)))
            for s, t in self.pairs
        ]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.items[i]

    def lengths(self) -> list[int]:
        """Source length of every item (what the bucketing sampler sorts by)."""
        return [len(s) for s, _ in self.items]


def pad_batch(
    seqs: Sequence[torch.Tensor], pad_id: int = PAD, length: int | None = None
) -> torch.Tensor:
    """1-D LongTensors -> [B, S], right-padded with ``pad_id`` to ``length`` (default:
    the longest).

    Taught in §6.6 'Dynamic padding and bucketing' (book/ch06_training).

    Examples::

        >>> pad_batch([torch.tensor([5, 6, 7]), torch.tensor([8])])
        tensor([[5, 6, 7],
                [8, 0, 0]])
        >>> pad_batch([torch.tensor([8])], length=4)
        tensor([[8, 0, 0, 0]])
    """
    longest = max(len(s) for s in seqs)
    length = longest if length is None else length
    if length < longest:
        raise ValueError(
            f"length must be >= the longest sequence ({longest}), got {length}"
        )
    out = torch.full((len(seqs), length), pad_id, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = s
    return out


class Collate:
    """collate_fn for a DataLoader: a list of (src, tgt) -> (src [B, Ss], tgt [B, St]).

    ``pad_to=None`` is dynamic padding: each batch is padded to its own longest
    sequence.
    ``pad_to=(Ss, St)`` pads every batch to fixed lengths (what "pad to max" does).

    Taught in §6.6 'Dynamic padding and bucketing' (book/ch06_training).

    Examples::

        >>> batch = [(torch.tensor([5, 2]), torch.tensor([1, 9, 2])),
        ...          (torch.tensor([6, 7, 2]), torch.tensor([1, 2]))]
        >>> Collate()(batch)  # each side padded to its own longest
        (tensor([[5, 2, 0],
                [6, 7, 2]]), tensor([[1, 9, 2],
                [1, 2, 0]]))
        >>> [t.shape for t in Collate(pad_to=(8, 10))(batch)]
        [torch.Size([2, 8]), torch.Size([2, 10])]
    """

    def __init__(self, pad_id: int = PAD, pad_to: tuple[int, int] | None = None):
        self.pad_id, self.pad_to = pad_id, pad_to

    def __call__(
        self, batch: Sequence[tuple[torch.Tensor, torch.Tensor]]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        src, tgt = zip(*batch)
        ls, lt = self.pad_to if self.pad_to is not None else (None, None)
        return pad_batch(src, self.pad_id, ls), pad_batch(tgt, self.pad_id, lt)


class BucketBatchSampler(Sampler[list[int]]):
    """Batches of indices whose items have similar lengths, so dynamic padding adds
    little.

    Each epoch: shuffle, cut into pools of ``batch_size * pool`` items, sort each pool
    by length, cut it into batches, shuffle the batches. Sorting only within pools
    keeps the order of batches random while padding almost nothing; the items *within*
    a batch are alike in length, and so in whatever goes with length (on the date task,
    the style: the capstone counts the styles per batch). Seeded: epoch e uses
    ``seed + e``.

    Taught in §6.6 'Dynamic padding and bucketing' (book/ch06_training).

    Examples::

        >>> lengths = [3, 9, 4, 8, 3, 9]
        >>> sampler = BucketBatchSampler(lengths, batch_size=2, seed=0)
        >>> [[lengths[i] for i in batch] for batch in sampler]  # similar lengths
        [[3, 3], [9, 9], [4, 8]]
    """

    def __init__(
        self,
        lengths: Sequence[int],
        batch_size: int,
        pool: int = 50,
        seed: int = 0,
        drop_last: bool = False,
    ):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.lengths, self.batch_size, self.pool = list(lengths), batch_size, pool
        self.seed, self.drop_last, self.epoch = seed, drop_last, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[list[int]]:
        rng = random.Random(self.seed + self.epoch)
        self.epoch += 1  # a fresh order next time even if the caller forgets set_epoch
        idx = list(range(len(self.lengths)))
        rng.shuffle(idx)
        size = self.batch_size * self.pool
        batches = []
        for start in range(0, len(idx), size):
            chunk = sorted(idx[start : start + size], key=self.lengths.__getitem__)
            starts = range(0, len(chunk), self.batch_size)
            batches += [chunk[i : i + self.batch_size] for i in starts]
        if self.drop_last:
            batches = [b for b in batches if len(b) == self.batch_size]
        rng.shuffle(batches)
        return iter(batches)

    def __len__(self) -> int:
        full, rest = divmod(len(self.lengths), self.batch_size * self.pool)
        # A full pool gives exactly ``pool`` batches; the last pool may end with a short
        # one, which drop_last drops.
        size = self.batch_size
        last = rest // size if self.drop_last else -(-rest // size)
        return full * self.pool + last
