"""Checks for the probes of chapter 3 (book/ch03_masks): the learner's masked
attention with their own masks, judged by behaviour (causality, pad invariance).
"""

from __future__ import annotations

import torch

from tformer_ref.device import get_device

from ...guard.integrity import seal
from ..cases import randn
from ..diagnosis import (
    Diagnosis,
    fail,
    passed,
    run_or_fail,
    single_threaded,
)
from ..flow import pair_of_tensors
from .reading import as_4d
from .sections import S_PROBES

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True


class _LearnerMasks:
    """The learner's masked_attention, causal_mask and padding_mask, called as the
    probes need them: a call that raises or returns no pair fails the check at once."""

    def __init__(self, title, attention_fn, causal_mask_fn, padding_mask_fn):
        self.title, self.attention_fn = title, attention_fn
        self.causal_mask_fn, self.padding_mask_fn = causal_mask_fn, padding_mask_fn

    def attend(self, q, k, v, mask):
        """The output (not the weights) of the learner's masked_attention."""
        result = run_or_fail(
            self.title,
            self.attention_fn,
            (q, k, v, mask),
            f"masked_attention(q {list(q.shape)}, k, v, mask)",
        )
        if not pair_of_tensors(result) or result[0].shape != q.shape:
            got = (
                f"out of shape {list(result[0].shape)}"
                if pair_of_tensors(result)
                else type(result).__name__
            )
            fail(
                self.title,
                "masked_attention must return (out [B, H, Sq, Dh], "
                f"weights); for q {list(q.shape)} it gave {got}",
            )
        return result[0].detach()

    def causal_mask(self, size):
        return run_or_fail(
            self.title, as_4d(self.causal_mask_fn), (size,), f"causal_mask({size})"
        )

    def padding_masks(self, *token_batches):
        return [
            run_or_fail(self.title, self.padding_mask_fn, (tokens, 0), "padding_mask")
            for tokens in token_batches
        ]


def _future_changes_past(learner: _LearnerMasks):
    """Changing tokens t.. must leave the outputs of tokens 0..t-1 as they were."""
    b, h, s, dh, t = 2, 2, 6, 8, 3
    q, k, v = (randn(b, h, s, dh, seed=200 + i) for i in range(3))
    mask = learner.causal_mask(s)
    base = learner.attend(q, k, v, mask)
    future = [x.clone() for x in (q, k, v)]
    for x in future:
        x[:, :, t:] += 5.0
    moved = (learner.attend(*future, mask) - base)[:, :, :t].abs().amax(dim=(0, 1, 3))
    off = ~(moved < 1e-5)  # a NaN difference is a change too
    if off.any():
        first = int(off.nonzero()[0])
        how = (
            "its output is NaN"
            if moved[first].isnan()
            else f"by up to {moved[first].item():.3g}"
        )
        return (
            f"Changing tokens {t}..{s - 1} changed the outputs of tokens "
            f"0..{t - 1} (token {first}: {how})."
        )
    return None


CAUSALITY_VIOLATED = Diagnosis(
    "causality violated",
    "The past must not see the future: check your causal mask (tril, True = attend) "
    "and that masked_attention fills where the mask is False, before the softmax.",
    S_PROBES,
)


def _padded_batch(learner: _LearnerMasks):
    """Two sequences (pad id 0, B == H == 2), the same with 3 pad tokens appended, their
    masks from the learner, and q, k, v [2, 2, 7, 8] for the longer ones."""
    tokens = torch.tensor([[4, 5, 6, 0], [7, 8, 9, 3]], device=get_device())
    longer = torch.cat([tokens, torch.zeros_like(tokens[:, :3])], dim=1)
    q, k, v = (randn(2, 2, 7, 8, seed=210 + i) for i in range(3))
    short_mask, long_mask = learner.padding_masks(tokens, longer)
    return tokens, longer, (q, k, v), short_mask, long_mask


def _padding_changes_real_tokens(learner: _LearnerMasks):
    """Appending pad tokens must leave the outputs of the real tokens as they were."""
    tokens, _, (q, k, v), short_mask, long_mask = _padded_batch(learner)
    short = learner.attend(q[:, :, :4], k[:, :, :4], v[:, :, :4], short_mask)
    long = learner.attend(q, k, v, long_mask)
    moved = (short - long[:, :, :4]).abs().amax(dim=(1, 3))  # [B, S]
    if not torch.all(moved[tokens != 0] < 1e-5):
        return (
            f"Appending padding tokens changed the outputs of real tokens (by up "
            f"to {moved[tokens != 0].max().item():.3g})."
        )
    return None


PAD_INVARIANCE_VIOLATED = Diagnosis(
    "pad invariance violated",
    "Padded keys must get zero weight: check the padding mask's shape [B, 1, 1, S] and "
    "its polarity.",
    S_PROBES,
)


def _padded_values_read(learner: _LearnerMasks):
    """What sits at padded positions must not matter: with a mask on the wrong axis and
    B == H, a sequence is masked with another sequence's padding and reads it."""
    _, longer, (q, k, v), _, long_mask = _padded_batch(learner)
    base = learner.attend(q, k, v, long_mask)
    pads = (longer == 0)[:, None, :, None]  # [B, 1, S, 1]
    garbage = [x.masked_fill(pads, 7.0) for x in (k, v)]
    moved = (learner.attend(q, *garbage, long_mask) - base).abs().amax(dim=(1, 3))
    if not torch.all(moved[longer != 0] < 1e-5):
        return (
            "Changing the keys and values at padded positions changed the outputs "
            f"of real tokens (by up to {moved[longer != 0].max().item():.3g})."
        )
    return None


ATTENDS_TO_PADDING = Diagnosis(
    "attends to padding",
    "Some query attends to padding: check that the padding mask has shape "
    "[B, 1, 1, S] (a [B, 1, S] mask puts the batch on the heads axis, and when B == H "
    "it silently masks each sequence with another one's padding) and that True means "
    "attend.",
    S_PROBES,
)


MASK_PROBES = (
    (_future_changes_past, CAUSALITY_VIOLATED),
    (_padding_changes_real_tokens, PAD_INVARIANCE_VIOLATED),
    (_padded_values_read, ATTENDS_TO_PADDING),
)


@single_threaded
def check_mask_probes(masked_attention_fn, causal_mask_fn, padding_mask_fn) -> None:
    """Behaviour any right answer has, run with the learner's own three functions:
    changing future tokens leaves the past unchanged, and appending padding changes no
    real token's output."""
    title = "mask probes"
    learner = _LearnerMasks(title, masked_attention_fn, causal_mask_fn, padding_mask_fn)
    for probe, diagnosis in MASK_PROBES:
        seen = probe(learner)
        if seen is not None:
            diagnosis.fail(title, seen)
    passed(title, "the past ignores the future, and padding changes no real token")


seal(__name__)
