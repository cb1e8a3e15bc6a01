"""Decoding a trained encoder–decoder: greedy search, beam search, exact-match accuracy.

Works with any model that has
``encode(src) -> (memory [B, Ss, D], src_mask [B, 1, 1, Ss])`` and
``decode(tgt_in [B, St], memory, src_mask) -> logits [B, St, V]`` (the decoder builds
its causal mask itself). Both searches run in eval mode without gradients, encode the
source once, and stop as soon as every sequence has produced EOS. (The seed's loop
called a ``create_trg_mask`` method that does not exist, built its causal mask without
a device and attended to the source's padding: the bug hunt ``book/ch06_bughunt``.)

Outputs are [B, T] LongTensors that start with BOS; after a sequence's EOS come PAD
tokens.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
import torch.nn as nn


def _eval_mode(model: nn.Module):
    """Switch to eval mode; return a function that restores the previous mode."""
    was_training = model.training
    model.eval()
    return lambda: model.train(was_training)


@torch.no_grad()
def greedy_decode(
    model: nn.Module,
    src: torch.Tensor,
    max_len: int,
    bos_id: int = 1,
    eos_id: int = 2,
    pad_id: int = 0,
) -> torch.Tensor:
    """src [B, Ss] -> [B, T] with T <= max_len + 1: BOS, then the argmax token at each
    step.

    Each step re-reads the whole prefix (the decoder applies its causal mask, so
    position t sees only tokens 0..t, exactly as in training) and appends the argmax of
    the last position.

    Taught in §6.7 'Greedy and beam decoding' (book/ch06_training).

    Examples::

        >>> from tformer_ref.model import Transformer
        >>> model = Transformer(9, 9, d_model=8, n_heads=2, n_layers=1, d_ff=16)
        >>> out = greedy_decode(model, torch.tensor([[4, 5, 2], [6, 2, 0]]), max_len=5)
        >>> out[:, 0], out.shape[1] <= 1 + 5  # BOS first, then at most max_len tokens
        (tensor([1, 1]), True)
    """
    if max_len < 1:
        raise ValueError(f"max_len must be >= 1, got {max_len}")
    restore = _eval_mode(model)
    try:
        memory, src_mask = model.encode(src)  # once, not per step
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        finished = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            logits = model.decode(out, memory, src_mask)  # [B, t, V]
            nxt = logits[:, -1].argmax(dim=-1)
            nxt = nxt.masked_fill(finished, pad_id)  # a finished sequence gets padding
            out = torch.cat([out, nxt[:, None]], dim=1)
            finished |= nxt == eos_id
            if finished.all():
                break
        return out
    finally:
        restore()


@torch.no_grad()
def beam_search(
    model: nn.Module,
    src: torch.Tensor,
    max_len: int,
    beam_size: int = 4,
    bos_id: int = 1,
    eos_id: int = 2,
    pad_id: int = 0,
    length_penalty: float = 0.0,
) -> torch.Tensor:
    """src [B, Ss] -> [B, T]: for each source, the beam's best hypothesis.

    Keeps the ``beam_size`` = k highest-scoring prefixes (sum of log-probabilities) per
    source. Each step scores every extension of every live prefix (k * V candidates)
    and takes the best 2k: a candidate ending in EOS is finished and kept aside, and the
    best k of the others are the new beam (each prefix has one EOS ending, so 2k always
    leaves k live ones). Search stops when every source has k finished hypotheses better
    than any live one, or after ``max_len`` steps, and returns the best finished one.
    Finished scores are divided by length**length_penalty, the length counting the
    generated tokens with EOS: 0 = plain sum, which favours short outputs; 1 = mean
    log-probability per token. (The paper's alpha = 0.6 divides by GNMT's
    ((5 + length) / 6)**alpha instead.) With length_penalty > 0 the stopping test
    compares against a live prefix's score normalised at the next length, a heuristic:
    a longer continuation could still score higher.

    Taught in §6.7 'Greedy and beam decoding' (book/ch06_training).

    Examples::

        >>> from tformer_ref.model import Transformer
        >>> model = Transformer(9, 9, d_model=8, n_heads=2, n_layers=1, d_ff=16)
        >>> out = beam_search(model, torch.tensor([[4, 5, 2]]), max_len=5, beam_size=2)
        >>> out[:, 0], out.shape[1] <= 1 + 5
        (tensor([1]), True)
    """
    if beam_size < 1 or max_len < 1:
        raise ValueError(
            "beam_size and max_len must be >= 1, "
            f"got beam_size={beam_size}, max_len={max_len}"
        )
    restore = _eval_mode(model)
    try:
        b, k = src.size(0), beam_size
        memory, src_mask = model.encode(src)  # [B, Ss, D], once
        memory = memory.repeat_interleave(k, dim=0)  # [B*k, Ss, D]
        src_mask = src_mask.repeat_interleave(k, dim=0)
        seqs = torch.full((b * k, 1), bos_id, dtype=torch.long, device=src.device)
        # Only the first beam is live at the start; the others would duplicate it.
        scores = torch.full((b, k), float("-inf"), device=src.device)
        scores[:, 0] = 0.0
        finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(b)]

        def norm(score, length):
            return score / (length**length_penalty)

        for t in range(max_len):
            logits = model.decode(seqs, memory, src_mask)[:, -1]
            logp = logits.log_softmax(-1).float()  # [B*k, V]
            v = logp.size(-1)
            cand = (scores.reshape(-1, 1) + logp).reshape(b, k * v)  # [B, k*V]
            # 2k: room for k live ones after removing the EOS endings.
            top, idx = cand.topk(2 * k, dim=-1)
            beam_idx, tok = idx // v, idx % v
            new_seqs = []
            new_scores = torch.full((b, k), float("-inf"), device=src.device)
            for i in range(b):
                kept = 0
                rows = []
                candidates = zip(top[i].tolist(), beam_idx[i].tolist(), tok[i].tolist())
                for s, bi, tk in candidates:
                    if s == float("-inf"):
                        break
                    prefix = seqs[i * k + bi]
                    if tk == eos_id:
                        finished[i].append((norm(s, t + 1), prefix.tolist() + [eos_id]))
                        continue
                    rows.append(torch.cat([prefix, prefix.new_tensor([tk])]))
                    new_scores[i, kept] = s
                    kept += 1
                    if kept == k:
                        break
                while len(rows) < k:  # dead slots: any prefix, score -inf
                    rows.append(torch.cat([seqs[i * k], seqs.new_tensor([pad_id])]))
                new_seqs += rows
            seqs, scores = torch.stack(new_seqs), new_scores
            best_live = scores.max(dim=-1).values  # [B]
            done = all(
                len(f) >= k
                and min(sorted((x for x, _ in f), reverse=True)[:k])
                >= norm(best_live[i].item(), t + 2)
                if best_live[i] > float("-inf")
                else len(f) > 0
                for i, f in enumerate(finished)
            )
            if done:
                break
        results = []
        for i in range(b):
            if finished[i]:
                results.append(max(finished[i], key=lambda x: x[0])[1])
            else:  # nothing finished within max_len: the best live prefix
                j = int(scores[i].argmax())
                results.append(seqs[i * k + j].tolist())
        width = max(len(r) for r in results)
        out = torch.full((b, width), pad_id, dtype=torch.long, device=src.device)
        for i, r in enumerate(results):
            out[i, : len(r)] = torch.tensor(r, device=src.device)
        return out
    finally:
        restore()


def strip(
    ids: Sequence[int] | torch.Tensor, bos_id: int = 1, eos_id: int = 2, pad_id: int = 0
) -> list[int]:
    """One output row -> its tokens between BOS and the first EOS (both excluded),
    padding removed.

    Taught in §6.1 'The toy task' (book/ch06_training).

    Examples::

        >>> strip([1, 7, 8, 2, 0, 0])
        [7, 8]
        >>> strip(torch.tensor([1, 7, 2, 9]))  # nothing after the first EOS counts
        [7]
    """
    out = []
    for i in ids.tolist() if isinstance(ids, torch.Tensor) else ids:
        if i == eos_id:
            break
        if i not in (bos_id, pad_id):
            out.append(i)
    return out


def sequence_accuracy(
    pred: torch.Tensor,
    tgt: torch.Tensor,
    bos_id: int = 1,
    eos_id: int = 2,
    pad_id: int = 0,
) -> float:
    """Exact-match accuracy: the fraction of rows whose tokens up to EOS equal the
    target's.

    pred [B, T1], tgt [B, T2] (any widths; both may start with BOS and be padded).

    Taught in §6.7 'Greedy and beam decoding' (book/ch06_training).

    Examples::

        >>> pred = torch.tensor([[1, 7, 8, 2], [1, 7, 2, 0]])
        >>> tgt = torch.tensor([[1, 7, 8, 2, 0], [1, 8, 2, 0, 0]])
        >>> sequence_accuracy(pred, tgt)  # row 0 matches, row 1 does not
        0.5
    """
    if pred.size(0) != tgt.size(0):
        raise ValueError(
            "pred and tgt must have the same batch size, "
            f"got {pred.size(0)} and {tgt.size(0)}"
        )
    ids = dict(bos_id=bos_id, eos_id=eos_id, pad_id=pad_id)
    hits = sum(strip(p, **ids) == strip(t, **ids) for p, t in zip(pred, tgt))
    return hits / max(1, pred.size(0))


def evaluate_accuracy(
    model: nn.Module,
    batches,
    max_len: int,
    decode: Callable = greedy_decode,
    device=None,
    **kwargs,
) -> float:
    """Exact-match accuracy of ``decode`` over an iterable of (src [B, Ss], tgt [B, St])
    batches.

    Taught in §6.1 'The toy task' (book/ch06_training).

    Examples::

        >>> src = torch.tensor([[4, 2], [5, 2]])
        >>> tgt = torch.tensor([[1, 4, 2], [1, 6, 2]])
        >>> def copy(model, src, max_len):  # a "decoder" that outputs BOS + its source
        ...     return torch.cat([torch.ones_like(src[:, :1]), src], dim=1)
        >>> evaluate_accuracy(nn.Linear(1, 1), [(src, tgt)], max_len=5, decode=copy)
        0.5
    """
    device = device if device is not None else next(model.parameters()).device
    hits = total = 0
    for src, tgt in batches:
        pred = decode(model, src.to(device), max_len, **kwargs)
        hits += round(sequence_accuracy(pred.cpu(), tgt.cpu()) * src.size(0))
        total += src.size(0)
    return hits / max(1, total)
