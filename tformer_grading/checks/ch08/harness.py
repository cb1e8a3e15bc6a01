"""What chapter 8's three exercises (``next_token_probs``, ``lm_step``,
``generate_greedy``) share: the tolerance outputs are compared at (``right``), a
decorator that leaves the notebook's random state as it was, and token ids as text; and,
for ``lm_step`` and ``generate_greedy``, the tiny seeded ``DecoderOnlyLM`` and the
seeded token ids their cases are built from, and the runner of a cached step
(:func:`run_case`: a step's outputs on a ``KVCache`` and how each call grew it).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import torch

from tformer_ref.device import get_device
from tformer_ref.kv_cache import KVCache
from tformer_ref.masks import causal_mask
from tformer_ref.model import DecoderOnlyLM

from ...guard.integrity import seal
from ...pictures.attention_maps import draw_influence
from ..diagnosis import Raised, describe_difference, quiet, run

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True

ATOL, RTOL = 1e-5, 1e-4


def keeps_random_state(check):
    """Decorator: the check's draws (reference sampling, module initialisation, the
    learner's own) leave the notebook's random state as it was."""

    @functools.wraps(check)
    def run_check(*args, **kwargs):
        device = get_device()
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            return check(*args, **kwargs)

    return run_check


def right(got, want) -> bool:
    return describe_difference(got, want, ATOL, RTOL) is None


def tokens_text(ids) -> str:
    return "[" + ", ".join(str(int(i)) for i in ids) + "]"


def lm(
    seed: int,
    *,
    norm_first: bool,
    positions: str,
    std: float | None = None,
    dropout: float = 0.0,
    **kwargs,
) -> DecoderOnlyLM:
    """A tiny seeded DecoderOnlyLM(V=11, D=16, H=2, L=2, F=32, max_len=24) in eval mode
    on the course's device; ``std`` redraws every weight matrix from N(0, std²) (an
    untrained model with Xavier weights repeats one token forever)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = DecoderOnlyLM(
            11,
            16,
            2,
            2,
            32,
            dropout=dropout,
            max_len=24,
            pad_id=None,
            norm_first=norm_first,
            positions=positions,
            **kwargs,
        )
        if std is not None:
            with torch.no_grad():
                for p in model.parameters():
                    if p.dim() > 1:
                        p.normal_(0.0, std)
    return model.to(get_device()).eval()


def token_ids(b: int, s: int, seed: int, vocab: int = 11) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (b, s), generator=g).to(get_device())


@dataclass(frozen=True)
class StepCase:
    """A model, the tokens the reference caches first (``past`` [B, P] or None), and the
    chunks [B, S_k] handed to the step one after the other on that cache."""

    label: str
    model: DecoderOnlyLM
    past: torch.Tensor | None
    chunks: tuple

    def fresh(self):
        return self.past, tuple(c.clone() for c in self.chunks)


def layer_lengths(cache) -> tuple:
    return tuple(kv.length for kv in getattr(cache, "layers", ()))


@dataclass
class StepRun:
    """Each call's output (or Raised), the cache's layer lengths before and after, and
    whether a call left part of the model in train mode (put back in eval mode)."""

    outputs: list
    lengths: list  # [(before, after)] per call, tuples of layer lengths
    trained: bool = False


def run_steps(step, model, past, chunks) -> StepRun:
    """``step(model, chunk, cache)`` on each chunk in turn, on a new KVCache that the
    model's own forward filled with ``past`` (None: left empty)."""
    cache = KVCache()
    trained = False
    with torch.no_grad(), quiet():
        if past is not None:
            model(past, cache=cache)
        outputs, lengths = [], []
        for chunk in chunks:
            before = layer_lengths(cache)
            out = run(step, (model, chunk, cache))
            if any(m.training for m in model.modules()):
                trained = True
                model.eval()
            outputs.append(out)
            lengths.append((before, layer_lengths(cache)))
            if isinstance(out, Raised):
                break
    return StepRun(outputs, lengths, trained)


def run_case(step, case: StepCase, model=None) -> StepRun:
    past, chunks = case.fresh()
    return run_steps(step, model or case.model, past, chunks)


_MASK_SHAPE = re.compile(r"mask must be .*?, got shape \((?:\d+, )*(\d+)\)")


def grown_before_mask(lengths: tuple, s: int, exc: BaseException) -> str:
    """What the cache's layer lengths (before, after) a call that raised a mask of the
    wrong shape prove: that it raised in a block after the first (each block appends
    its ``s`` new keys before its attention runs, so the layers that grew are those
    that ran), with a mask of the grown cache.length + s keys (cache.length is layer
    0's): cache.length read after a block grew the cache. "" when they do not prove it
    (a mask wrong from block 0 raises there).

    >>> error = ValueError("mask must be [1, 1, 5, 5], got shape (1, 1, 5, 10)")
    >>> print(grown_before_mask(((0, 0, 0), (5, 5, 0)), 5, error))
     It raised in block 1, after block 0 had appended the S=5 new keys (cache.length
     went from 0 to 5): your mask's 10 keys are the grown cache.length + S, so it was
     built from cache.length read after a block grew the cache.
    >>> grown_before_mask(((), (5, 0, 0)), 5, error)  # wrong in block 0 already
    ''
    """
    before, after = lengths
    before = (*before, *[0] * (len(after) - len(before)))  # an empty cache: no layers
    grown = [b == a + s for a, b in zip(before, after)]
    ran = grown.index(False) if False in grown else len(grown)
    m = _MASK_SHAPE.search(str(exc))
    if s < 1 or ran < 2 or any(grown[ran:]) or m is None:
        return ""
    keys = int(m.group(1))
    if keys != after[0] + s:
        return ""
    blocks = "block 0" if ran == 2 else f"blocks 0..{ran - 2}"
    return (
        f" It raised in block {ran - 1}, after {blocks} had appended the S={s} new "
        f"keys (cache.length went from {before[0]} to {after[0]}): your mask's {keys} "
        "keys are the grown cache.length + S, so it was built from cache.length read "
        "after a block grew the cache."
    )


def case_right(got: StepRun, want: StepRun) -> bool:
    return len(got.outputs) == len(want.outputs) and all(
        right(g, w) for g, w in zip(got.outputs, want.outputs)
    )


def same_run(a: StepRun, b: StepRun) -> bool:
    """Every call of both gave a tensor, and the two agree call by call."""
    return len(a.outputs) == len(b.outputs) and all(
        isinstance(x, torch.Tensor)
        and isinstance(y, torch.Tensor)
        and x.shape == y.shape
        and torch.allclose(x.detach(), y.detach(), atol=ATOL, rtol=RTOL)
        for x, y in zip(a.outputs, b.outputs)
    )


def first_problem(got: StepRun, want: StepRun) -> tuple[int, str]:
    for k, (g, w) in enumerate(zip(got.outputs, want.outputs)):
        problem = describe_difference(g, w, ATOL, RTOL)
        if problem:
            return k, problem
    return len(got.outputs), "fewer calls completed"


def influence_picture(seen: list, case):
    """The positions each new token was measured to be influenced by, next to the
    causal ones (a row per new token, a column per position)."""
    n_past, length = case.past.size(1), case.past.size(1) + len(seen)
    got = torch.zeros(len(seen), length, dtype=torch.bool)
    for q, keys in enumerate(seen):
        got[q, sorted(keys)] = True
    want = causal_mask(len(seen), past=n_past).reshape(len(seen), length).cpu()
    return draw_influence(got, want, where=f"case {case.label}", first=n_past)


seal(__name__)
