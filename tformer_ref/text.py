"""Real text for a language model: the corpus, two tokenizers, next-token batches.

Shape letters: B batch, S sequence length (tokens per window), N tokens in a stream,
V vocabulary size.
"""

from __future__ import annotations

import collections
import re
from importlib import resources
from typing import Iterable, Sequence

import torch

CORPUS = "devils_dictionary.txt"


def load_corpus() -> str:
    """*The Devil's Dictionary* (Ambrose Bierce, 1911; public domain) as one string.

    Shipped with the package (``tformer_ref/corpora/``, with its source and licence),
    so it reaches every machine without a download.

    Taught in §8.1 'Real text, offline' (book/ch08_generation).

    Examples::

        >>> text = load_corpus()
        >>> len(text), text.isascii()
        (383147, True)
        >>> text[text.index("ACCIDENT"):][:35]
        'ACCIDENT, n.  An inevitable occurre'
    """
    return resources.files("tformer_ref").joinpath("corpora", CORPUS).read_text("ascii")


class CharTokenizer:
    """One id per character of the text it is built from, after its special tokens.

    ``specials`` come first (ids 0, 1, ...), so that a model's ``pad_id=0`` never
    masks a real character. A character the tokenizer has not seen raises a
    ``KeyError`` that names it, rather than being dropped or mapped to a random id.

    Taught in §8.2 'Characters and byte pairs' (book/ch08_generation).

    Examples::

        >>> tok = CharTokenizer("abca", specials=("<pad>",))
        >>> len(tok), tok.encode("cab")
        (4, [3, 1, 2])
        >>> tok.decode([3, 1, 2])
        'cab'
        >>> tok.encode("é")
        Traceback (most recent call last):
        ...
        KeyError: "character 'é' is not in the tokenizer's vocabulary (4 ids, ..."
    """

    def __init__(self, text: str, specials: Sequence[str] = ()):
        self.specials = tuple(specials)
        self.itos = [*self.specials, *sorted(set(text) - set(self.specials))]
        self.stoi = {s: i for i, s in enumerate(self.itos)}

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, text: str) -> list[int]:
        try:
            return [self.stoi[c] for c in text]
        except KeyError as err:
            raise KeyError(
                f"character {err.args[0]!r} is not in the tokenizer's vocabulary "
                f"({len(self)} ids, built from its training text): build it from text "
                "that contains it, or remove it from the input"
            ) from None

    def decode(self, ids: Iterable[int] | torch.Tensor) -> str:
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
        return "".join(self.itos[i] for i in ids if self.itos[i] not in self.specials)


# Pieces that a merge never crosses: a word with the space before it, a run of
# punctuation, a run of spaces or newlines (GPT-2's idea, without its regex package).
_PIECES = re.compile(r" ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+")


class BytePairTokenizer:
    """A minimal byte-level BPE: ids 0..255 are the bytes, each later id one merge.

    :meth:`train` counts adjacent pairs over the text's pieces (words with their
    leading space, so a merge never spans two words) and merges the most frequent
    pair, ``vocab_size - 256`` times. Any text encodes, since every byte has an id.
    Decoding joins the tokens' *bytes* and decodes once: decoding token by token
    would cut a multi-byte character in two.

    Taught in §8.2 'Characters and byte pairs' (book/ch08_generation).

    Examples::

        >>> tok = BytePairTokenizer.train("the cat, the hat, the mat", 260)
        >>> len(tok), tok.encode(" the")  # " the" has become one token
        (260, [259])
        >>> tok.decode(tok.encode("café"))  # any text, byte by byte where needed
        'café'
    """

    def __init__(self, merges: Sequence[tuple[int, int]]):
        self.merges = [tuple(m) for m in merges]
        self.ranks = {pair: 256 + i for i, pair in enumerate(self.merges)}
        self.vocab = [bytes([b]) for b in range(256)]
        for a, b in self.merges:
            self.vocab.append(self.vocab[a] + self.vocab[b])

    def __len__(self) -> int:
        return len(self.vocab)

    @classmethod
    def train(cls, text: str, vocab_size: int) -> "BytePairTokenizer":
        if vocab_size < 256:
            raise ValueError(
                f"vocab_size must be at least 256 (the bytes), got {vocab_size}"
            )
        counts = collections.Counter(_PIECES.findall(text))
        freqs = list(counts.values())
        seqs = [list(w.encode("utf-8")) for w in counts]
        pairs = collections.Counter()
        where = collections.defaultdict(set)  # pair -> the pieces it occurs in
        for w, seq in enumerate(seqs):
            for pair in zip(seq, seq[1:]):
                pairs[pair] += freqs[w]
                where[pair].add(w)
        merges = []
        for new_id in range(256, vocab_size):
            if not pairs:
                break
            # Ties go to the smaller pair, so training does not depend on dict order.
            best = max(pairs, key=lambda pair: (pairs[pair], -pair[0], -pair[1]))
            merges.append(best)
            # Only the pieces that contain the pair change: recount just those.
            for w in where.pop(best):
                old = seqs[w]
                for pair in zip(old, old[1:]):
                    pairs[pair] -= freqs[w]
                    if not pairs[pair]:
                        del pairs[pair]
                seqs[w] = _merge(old, best, new_id)
                for pair in zip(seqs[w], seqs[w][1:]):
                    pairs[pair] += freqs[w]
                    where[pair].add(w)
        return cls(merges)

    def encode(self, text: str) -> list[int]:
        ids = []
        for piece in _PIECES.findall(text):
            seq = list(piece.encode("utf-8"))
            while len(seq) > 1:
                # The earliest-learned merge first, as in training.
                pair = min(zip(seq, seq[1:]), key=lambda p: self.ranks.get(p, 1 << 30))
                if pair not in self.ranks:
                    break
                seq = _merge(seq, pair, self.ranks[pair])
            ids.extend(seq)
        return ids

    def token_bytes(self, i: int) -> bytes:
        return self.vocab[i]

    def decode(self, ids: Iterable[int] | torch.Tensor) -> str:
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
        return b"".join(self.vocab[i] for i in ids).decode("utf-8", errors="replace")


def _merge(seq: list[int], pair: tuple[int, int], new_id: int) -> list[int]:
    out, i = [], 0
    while i < len(seq):
        if i + 1 < len(seq) and (seq[i], seq[i + 1]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(seq[i])
            i += 1
    return out


def check_vocab(model_vocab: int, tokenizer) -> None:
    """Raise a clear ValueError unless a model with ``model_vocab`` embedding rows can
    take every id of ``tokenizer``.

    An id past the table raises an IndexError on CPU and a device-side assert on
    CUDA that names nothing; a table larger than the tokenizer only wastes rows.

    Taught in §8.2 'Characters and byte pairs' (book/ch08_generation).

    Examples::

        >>> check_vocab(4, CharTokenizer("abc", specials=("<pad>",)))
        >>> check_vocab(3, CharTokenizer("abc", specials=("<pad>",)))
        Traceback (most recent call last):
        ...
        ValueError: the tokenizer has 4 ids but the model's embedding has 3 rows: ...
    """
    if len(tokenizer) > model_vocab:
        raise ValueError(
            f"the tokenizer has {len(tokenizer)} ids but the model's embedding has "
            f"{model_vocab} rows: build the model with vocab=len(tokenizer)"
        )


def train_val_split(ids: torch.Tensor, val_fraction: float = 0.1):
    """A stream of ids [N] -> (train [N - n], val [n]): the last ``val_fraction``
    held out, as one piece (random windows from both halves would overlap).

    Taught in §8.3 'Next-token loss on one stream' (book/ch08_generation).

    Examples::

        >>> train, val = train_val_split(torch.arange(10), 0.2)
        >>> train.tolist(), val.tolist()
        ([0, 1, 2, 3, 4, 5, 6, 7], [8, 9])
    """
    n_val = int(len(ids) * val_fraction)
    return ids[: len(ids) - n_val], ids[len(ids) - n_val :]


def lm_windows(
    ids: torch.Tensor,
    context: int,
    batch_size: int,
    generator: torch.Generator | None = None,
):
    """Random windows of one stream of ids [N]: (inputs [B, S], targets [B, S]).

    ``targets`` is ``inputs`` moved one token on *in the stream*:
    ``targets[b, t] = ids[start_b + t + 1]``. Every position of the window gets a
    target, the last one included (it is the token after the window), which a shift
    inside the window (``x[:, :-1]`` against ``x[:, 1:]``) would throw away.

    Taught in §8.3 'Next-token loss on one stream' (book/ch08_generation).

    Examples::

        >>> x, y = lm_windows(torch.arange(100), context=4, batch_size=2,
        ...                   generator=torch.Generator().manual_seed(0))
        >>> x.shape, bool((y == x + 1).all())
        (torch.Size([2, 4]), True)
    """
    if len(ids) <= context:
        raise ValueError(
            f"the stream has {len(ids)} tokens; a window of context="
            f"{context} needs at least {context + 1}"
        )
    starts = torch.randint(len(ids) - context, (batch_size,), generator=generator)
    offsets = torch.arange(context)
    x = ids[starts[:, None] + offsets]
    y = ids[starts[:, None] + offsets + 1]
    return x, y
