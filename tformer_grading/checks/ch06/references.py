"""What chapter 6's exercises share: seeded inputs (``gen``, ``tokens``, used by
``shift_targets``, ``sequence_loss``, ``train_step`` and ``greedy_decode``), the
reference shift and loss (``shift_ref``, ``ce``, ``loss_ref``), the wrong loss
``loss_counts_padding`` that ``sequence_loss`` names, the small model ``train_step``
and ``greedy_decode`` run (``small_model``), and how ``shift_targets``,
``sequence_loss`` and ``noam_lambda`` fail on the first problem found
(``fail_first_problem``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tformer_ref.device import get_device

from ...guard.integrity import seal
from ..diagnosis import run
from ..flow import fallback, listed_pitfall

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def tokens(b: int, s: int, seed: int, pad_id: int = 0, vocab: int = 13) -> torch.Tensor:
    """[B, S] batch-first targets: BOS=1, random tokens, EOS=2, then padding (rows of
    varying length)."""
    g = gen(seed)
    out = torch.full((b, s), pad_id, dtype=torch.long)
    for i in range(b):
        n = s if i == 0 else int(torch.randint(3, s + 1, (1,), generator=g))
        out[i, :n] = torch.randint(4, vocab, (n,), generator=g)
        out[i, 0], out[i, n - 1] = 1, 2
    return out.to(get_device())


def shift_ref(tgt):
    return tgt[:, :-1], tgt[:, 1:]


def fail_first_problem(
    title,
    problem,
    cases,
    learner,
    pitfalls,
    adapt,
    tolerance,
    section,
    pitfall_detail=None,
) -> None:
    """Fail on the first measured ``problem`` (diagnosis or None, what was seen): name
    the listed pitfall that reproduces ``learner`` (already adapted) on every case
    within ``tolerance`` (atol, rtol), else the measured diagnosis, else say where,
    not why."""
    diagnosis, seen = problem
    theirs = [run(learner, case.make()) for case in cases]
    pitfall = listed_pitfall(pitfalls, cases, theirs, *tolerance, adapt)
    if pitfall is not None:
        pitfall.fail(title, pitfall_detail or seen)
    if diagnosis is not None:
        diagnosis.fail(title, seen)
    fallback(title, seen, section, "compare your code with the lesson", stop="")


def ce(logits, labels, **kw):
    vocab = logits.size(-1)
    return F.cross_entropy(logits.reshape(-1, vocab), labels.reshape(-1), **kw)


def loss_ref(logits, labels, pad_id, eps):
    return ce(logits, labels, ignore_index=pad_id, label_smoothing=eps)


def loss_counts_padding(logits, labels, pad_id, eps):
    return ce(logits, labels, label_smoothing=eps)


def small_model(seed: int = 0, dropout: float = 0.0, vocab: int = 13):
    """A small TorchTransformer built under ``seed``, the notebook's random state left
    alone."""
    from tformer_ref.baselines import TorchTransformer

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = TorchTransformer(
            vocab,
            vocab,
            d_model=16,
            n_heads=8,
            n_layers=2,
            d_ff=32,
            dropout=dropout,
            max_len=32,
        )
    return model.to(get_device())


seal(__name__)
