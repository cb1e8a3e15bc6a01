"""Which input positions change which outputs: a function of token ids read back by
changing one token at a time, and positions written as a reader takes them in.

``f(tokens [B, T]) -> outputs [B, S, ...]`` is any function of token ids whose outputs
have a position axis (axis 1): a model's logits, one cached step's logits for the last
S of the T tokens. Changing token j and seeing output i move says that output i reads
token j, whatever the code: a mask that lets a query see the future, or the wrong rows
of a causal mask, is read back as the set of positions each output depends on.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ...guard.integrity import seal


def output_changes(
    f: Callable, tokens: torch.Tensor, vocab: int, positions=None
) -> list[torch.Tensor] | None:
    """For each input position j of ``tokens`` [B, T] (``positions``, every one by
    default), how far each output position moved, a [S] tensor (the largest change
    over the batch and the other axes) when token j becomes (token + 1) % ``vocab`` in
    every row. ``f`` gets a copy each time; None when an output of ``f`` is not a
    tensor of the first one's shape (``f`` returns None for one it cannot read).

    Examples::

        >>> leaks = lambda t: t.float().mean(1, keepdim=True).expand(-1, 3)  # planted
        >>> output_changes(leaks, torch.tensor([[1, 2, 3]]), 5, positions=[2])
        [tensor([0.3333, 0.3333, 0.3333])]
    """
    base = f(tokens.clone())
    if not isinstance(base, torch.Tensor) or base.dim() < 2:
        return None
    others = tuple(d for d in range(base.dim()) if d != 1)
    moved = []
    for j in range(tokens.size(1)) if positions is None else positions:
        changed = tokens.clone()
        changed[:, j] = (changed[:, j] + 1) % vocab
        out = f(changed)
        if not isinstance(out, torch.Tensor) or out.shape != base.shape:
            return None
        moved.append((out - base).abs().amax(dim=others))
    return moved


def influence(
    f: Callable, tokens: torch.Tensor, vocab: int, tol: float = 1e-5
) -> list[set] | None:
    """For each output position i of ``f(tokens [B, T])`` [B, S, ...], the input
    positions whose token changes it by more than ``tol`` (None as
    :func:`output_changes`).

    Examples::

        >>> tokens = torch.tensor([[1, 2, 3, 4]])
        >>> causal = lambda t: t.float().cumsum(1)  # output i reads tokens 0..i
        >>> [positions_text(s) for s in influence(causal, tokens, vocab=5)]
        ['0', '0..1', '0..2', '0..3']
        >>> peeks = lambda t: t.float() + t.float().roll(-1, 1)  # planted: reads i + 1
        >>> [positions_text(s) for s in influence(peeks, tokens, vocab=5)]
        ['0..1', '1..2', '2..3', '[0, 3]']
    """
    moved = output_changes(f, tokens, vocab)
    if moved is None:
        return None
    s = moved[0].numel() if moved else 0
    return [{j for j, d in enumerate(moved) if float(d[i]) > tol} for i in range(s)]


def positions_text(positions) -> str:
    """Positions as text: a run as "first..last" (one position alone), others as a
    list, "none" when there are none.

    Examples::

        >>> positions_text({2, 3, 4}), positions_text([5]), positions_text({6, 0})
        ('2..4', '5', '[0, 6]')
        >>> positions_text(set())
        'none'
    """
    items = sorted(positions)
    if not items:
        return "none"
    if items == list(range(items[0], items[-1] + 1)):
        return f"{items[0]}..{items[-1]}" if len(items) > 1 else str(items[0])
    return "[" + ", ".join(str(int(i)) for i in items) + "]"


seal(__name__)
