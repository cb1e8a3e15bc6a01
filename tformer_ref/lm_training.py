"""Training a decoder-only language model on one stream of text.

Shape letters: B batch, T context length, V vocabulary size.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

from .decoding import _eval_mode
from .text import lm_windows

# Modules whose weights are not matrices that mix features: their parameters never
# decay (see weight_decay_groups).
_NO_DECAY_MODULES = (nn.Embedding, nn.LayerNorm)


def next_token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of every position's prediction of the next token.

    logits [B, T, V] (the model's output on the inputs), targets [B, T] (the inputs
    moved one token on in the stream, as :func:`~tformer_ref.text.lm_windows` gives
    them) -> scalar. With no shift at all (targets = inputs) a causal model only has
    to copy the token it is given, and the loss falls to 0 while it learns nothing.

    Taught in §8.3 'Next-token loss on one stream' (book/ch08_generation).

    Examples::

        >>> logits = torch.zeros(2, 3, 5)  # uniform over V = 5
        >>> targets = torch.tensor([[1, 2, 3], [4, 0, 1]])
        >>> round(next_token_loss(logits, targets).item(), 4)
        1.6094
    """
    if logits.dim() != 3 or targets.shape != logits.shape[:2]:
        raise ValueError(
            "expected logits [B, T, V] and targets [B, T], "
            f"got {tuple(logits.shape)} and {tuple(targets.shape)}"
        )
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def weight_decay_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """AdamW parameter groups: decay on every weight matrix (2-D or more) outside
    embeddings and LayerNorms (in these models, the weights of ``nn.Linear``), none on
    biases, LayerNorm gains and shifts, and embedding tables.

    Decay pulls a parameter towards 0 at every step. That is a prior worth having for
    a matrix that mixes features; for a LayerNorm gain it pulls towards the wrong
    value (its neutral value is 1); a bias or a shift has too few numbers to overfit
    with; and an embedding row of a rare token gets a gradient only when the token
    occurs, but decays at every step. A tied output projection is the embedding
    table, so it does not decay either. Each parameter is in exactly one group
    (``torch.optim.AdamW`` rejects a parameter listed twice).

    Taught in §8.4 'Weight decay, and what not to decay' (book/ch08_generation).

    Examples::

        >>> from tformer_ref.model import DecoderOnlyLM
        >>> lm = DecoderOnlyLM(20, 16, 2, 1, 32, pad_id=None, tie_embeddings=True)
        >>> decay, no_decay = weight_decay_groups(lm, 0.1)
        >>> len(decay["params"]), len(no_decay["params"]), no_decay["weight_decay"]
        (6, 12, 0.0)
        >>> optimizer = torch.optim.AdamW([decay, no_decay], lr=1e-3)
    """
    if not weight_decay >= 0:
        raise ValueError(f"weight_decay must be >= 0, got {weight_decay!r}")
    no_decay_ids = {
        id(p)
        for m in model.modules()
        if isinstance(m, _NO_DECAY_MODULES)
        for p in m.parameters(recurse=False)
    }
    decay, no_decay = [], []
    # named_parameters() yields a shared Parameter once, so none lands in both lists.
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        is_matrix = name.endswith("weight") and p.dim() >= 2
        (no_decay if id(p) in no_decay_ids or not is_matrix else decay).append(p)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


@dataclass
class LMHistory:
    """What :func:`train_lm` records: the training loss of every step, and the held-out
    loss every ``eval_every`` steps (as (step, loss) pairs).

    Taught in §8.3 'Next-token loss on one stream' (book/ch08_generation).
    """

    train_loss: list[float] = field(default_factory=list)
    val_loss: list[tuple[int, float]] = field(default_factory=list)


@torch.no_grad()
def evaluate_lm(
    model: nn.Module,
    ids: torch.Tensor,
    context: int,
    batches: int = 8,
    batch_size: int = 32,
    seed: int = 0,
) -> float:
    """Mean next-token loss of ``model`` on ``batches`` seeded random windows of
    ``ids`` [N] (the same windows every call).

    Taught in §8.3 'Next-token loss on one stream' (book/ch08_generation).

    Examples::

        >>> from tformer_ref.model import DecoderOnlyLM
        >>> lm = DecoderOnlyLM(7, 16, 2, 1, 32, max_len=8, pad_id=None)
        >>> 0 < evaluate_lm(lm, torch.arange(50) % 7, context=8, batches=2) < 10
        True
    """
    restore = _eval_mode(model)
    try:
        device = next(model.parameters()).device
        g = torch.Generator().manual_seed(seed)
        losses = []
        for _ in range(batches):
            x, y = lm_windows(ids, context, batch_size, g)
            losses.append(next_token_loss(model(x.to(device)), y.to(device)).item())
        return sum(losses) / len(losses)
    finally:
        restore()


def train_lm(
    model: nn.Module,
    train_ids: torch.Tensor,
    val_ids: torch.Tensor,
    steps: int,
    *,
    context: int,
    batch_size: int = 32,
    lr: float = 3e-3,
    weight_decay: float = 0.1,
    warmup: int = 20,
    eval_every: int = 50,
    seed: int = 0,
) -> LMHistory:
    """Train ``model`` on random windows of ``train_ids`` with AdamW
    (:func:`weight_decay_groups`), a linear warm-up then cosine decay of the learning
    rate, and gradient clipping at 1. Deterministic for a given ``seed`` on one
    device.

    Taught in §8.3 'Next-token loss on one stream' (book/ch08_generation).
    """
    device = next(model.parameters()).device
    optimizer = torch.optim.AdamW(
        weight_decay_groups(model, weight_decay), lr=lr, betas=(0.9, 0.95)
    )

    def lr_factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, steps - warmup)
        cosine = torch.cos(torch.tensor(progress * torch.pi)).item()
        return 0.1 + 0.9 * 0.5 * (1 + cosine)

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor)
    g = torch.Generator().manual_seed(seed)
    history = LMHistory()
    model.train()
    for step in range(steps):
        x, y = lm_windows(train_ids, context, batch_size, g)
        loss = next_token_loss(model(x.to(device)), y.to(device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        history.train_loss.append(loss.item())
        if (step + 1) % eval_every == 0 or step + 1 == steps:
            history.val_loss.append((step + 1, evaluate_lm(model, val_ids, context)))
    model.eval()
    return history
