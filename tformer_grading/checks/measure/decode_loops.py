"""A decoding loop read back from the model it drove: what it fed the decoder at each
step (the prefix, the mask, the mode, the memory), what the decoder returned, and
which token the loop appended after each step.

:class:`RecordingDecoder` wraps an encoder–decoder ``inner`` with
``encode(src [B, Ss]) -> (memory [B, Ss, D], src_mask)`` and
``decode(tgt_in [B, St], memory, src_mask, tgt_mask) -> logits [B, St, V]``.
:func:`recording_lm` hooks a decoder-only model's parts instead (a loop with a KV
cache calls them, not a method a wrapper could stand in for): the token ids each
forward fed, the logits it returned, and how many tokens the cache held at each step.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import pairwise

import torch
from torch import nn

from ...guard.integrity import seal
from .mask_readings import causal_reading


def keep_mask(tgt_mask, st: int) -> torch.Tensor:
    """A learner's ``tgt_mask`` as a bool [st, st] mask (True = may attend); a
    TypeError that says what was expected otherwise."""
    if (
        not isinstance(tgt_mask, torch.Tensor)
        or tgt_mask.dtype != torch.bool
        or tgt_mask.numel() != st * st
    ):
        got = (
            f"{tgt_mask.dtype} {tuple(tgt_mask.shape)}"
            if isinstance(tgt_mask, torch.Tensor)
            else type(tgt_mask).__name__
        )
        raise TypeError(
            f"tgt_mask must be a bool mask [{st}, {st}] or [1, 1, {st}, "
            f"{st}] (True = may attend), got {got}"
        )
    return tgt_mask.reshape(st, st)


def causal(t: int, device) -> torch.Tensor:
    """The [t, t] causal keep-mask (True = may attend), lower triangular."""
    return torch.ones(t, t, dtype=torch.bool, device=device).tril()


def mask_kind(keep: torch.Tensor) -> str:
    """A keep-mask [St, St] by name, as :func:`.mask_readings.causal_reading` reads
    it: "causal", "triu", "inverted", "no diagonal", "none" (all True) or "other".

    Examples::

        >>> mask_kind(causal(3, "cpu")), mask_kind(causal(3, "cpu").T)  # planted triu
        ('causal', 'triu')
        >>> mask_kind(~causal(3, "cpu"))                  # planted: True meant "hide"
        'inverted'
    """
    read = causal_reading(keep)
    return {"all visible": "none", None: "other"}.get(read, read)


class RecordingDecoder(nn.Module):
    """``inner`` recording how a decoding loop uses it: ``encoded_rows`` (source rows
    encoded), and per decode call a dict: ``training``, ``grad`` (enabled), ``mask``
    (:func:`mask_kind`; "none" for no mask), ``length`` (St), ``dtype``, ``memory``
    (every row is one encode returned), ``prefix`` [B, St] and ``logits`` [B, St, V].

    Examples::

        >>> class Copy(nn.Module):  # logits: one-hot of the input token
        ...     def encode(self, src):
        ...         return src.float()[..., None], None
        ...     def decode(self, tgt_in, memory, src_mask, tgt_mask):
        ...         return nn.functional.one_hot(tgt_in, 5).float()
        >>> model = RecordingDecoder(Copy())
        >>> memory, m = model.encode(torch.tensor([[1, 2]]))
        >>> out = torch.tensor([[1]])
        >>> for _ in range(2):  # a planted mistake: no mask
        ...     nxt = model.decode(out, memory, m)[:, -1].argmax(-1)
        ...     out = torch.cat([out, nxt[:, None]], 1)
        >>> [(c["length"], c["mask"]) for c in model.calls]
        [(1, 'none'), (2, 'none')]
        >>> [tok.tolist() for _, _, tok in appended(model.calls, eos=4)]
        [[1]]
    """

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner
        self.reset()

    def reset(self):
        self.encoded_rows, self.calls, self.memories = 0, [], []

    def encode(self, src):
        self.encoded_rows += src.size(0)
        memory, src_mask = self.inner.encode(src)
        self.memories.append(memory.detach())
        return memory, src_mask

    def _from_encoder(self, memory) -> bool:
        """Every row of ``memory`` is a row of a memory encode returned."""
        rows = [m[j] for m in self.memories for j in range(m.size(0))]
        return (
            isinstance(memory, torch.Tensor)
            and memory.dim() == 3
            and all(
                any(r.shape == row.shape and torch.equal(r, row) for r in rows)
                for row in memory.detach()
            )
        )

    def decode(self, tgt_in, memory, src_mask, tgt_mask=None):
        st = tgt_in.size(1)
        if tgt_mask is None:
            kind = "none"
            keep = torch.ones(st, st, dtype=torch.bool, device=tgt_in.device)
        else:
            keep = keep_mask(tgt_mask, st)
            kind = mask_kind(keep)
        call = {
            "training": self.training,
            "grad": torch.is_grad_enabled(),
            "mask": kind,
            "length": st,
            "dtype": tgt_in.dtype,
            "memory": self._from_encoder(memory),
            "prefix": tgt_in.detach().clone(),
        }
        self.calls.append(call)
        logits = self.inner.decode(tgt_in, memory, src_mask, tgt_mask=keep)
        call["logits"] = logits.detach().clone()
        return logits

    def forward(self, src, tgt_in):
        memory, src_mask = self.encode(src)
        return self.decode(tgt_in, memory, src_mask, causal(tgt_in.size(1), src.device))


def extensions(calls):
    """The pairs of consecutive decode calls whose second prefix is the first's plus
    one column: a step and the next, with what the loop appended in between."""
    for a, b in pairwise(calls):
        pa, pb = a["prefix"], b["prefix"]
        if pb.shape == (pa.size(0), pa.size(1) + 1) and torch.equal(pb[:, :-1], pa):
            yield a, b


def appended(calls, eos: int):
    """(call, rows still decoding [B] bool, the tokens appended to them) for each
    decode call whose prefix the next call extends by one column."""
    for a, b in extensions(calls):
        alive = ~(a["prefix"] == eos).any(1)
        if alive.any():
            yield a, alive, b["prefix"][alive, -1]


@dataclass
class LoopRecord:
    """What a decoder-only loop fed its model and got back: per forward, the token ids
    the embedding saw (``fed``, [B, S_k]) and the logits the head returned
    (``logits``, [B, S_k, V]); per call of the watched attention, (the tokens its cache
    layer held before the call, None for no cache; the number of new queries)
    (``attended``)."""

    fed: list = field(default_factory=list)
    logits: list = field(default_factory=list)
    attended: list = field(default_factory=list)


def _cache_seen(attended: list):
    # The course's attention takes its cache layer as the keyword ``kv`` (with a
    # ``length``) and the query first; a learner may pass either by keyword.
    def hook(module, args, kwargs):
        kv = kwargs.get("kv")
        query = args[0] if args else kwargs.get("query")
        cached = getattr(kv, "length", None) if kv is not None else None
        attended.append(
            (
                cached if isinstance(cached, int) else None,
                int(query.size(1)) if isinstance(query, torch.Tensor) else 0,
            )
        )

    return hook


@contextmanager
def recording_lm(
    embed: nn.Module, head: nn.Module, attention: nn.Module
) -> Iterator[LoopRecord]:
    """A :class:`LoopRecord` filled while the block runs, by hooks on the model's token
    ``embed``, its ``head`` and one ``attention`` (removed on leaving).

    Examples::

        >>> from types import SimpleNamespace
        >>> class Attn(nn.Module):
        ...     def forward(self, query, kv=None):
        ...         return query
        >>> embed, attn, head = nn.Embedding(5, 2), Attn(), nn.Linear(2, 5)
        >>> step = lambda tokens, kv=None: head(attn(embed(tokens), kv=kv))
        >>> with recording_lm(embed, head, attn) as seen:
        ...     _ = step(torch.tensor([[1, 2, 3]]), kv=SimpleNamespace(length=0))
        ...     _ = step(torch.tensor([[4]]))  # a planted mistake: the cache left out
        >>> [t.tolist() for t in seen.fed], seen.attended
        ([[[1, 2, 3]], [[4]]], [(0, 3), (None, 1)])
    """
    record = LoopRecord()
    hooks = [
        embed.register_forward_hook(
            lambda m, args, out: record.fed.append(args[0].detach().clone())
        ),
        head.register_forward_hook(
            lambda m, args, out: record.logits.append(out.detach().clone())
        ),
        attention.register_forward_pre_hook(
            _cache_seen(record.attended), with_kwargs=True
        ),
    ]
    try:
        yield record
    finally:
        for h in hooks:
            h.remove()


seal(__name__)
