"""Checks for exercise ``decoder_block`` of chapter 5 (book/ch05_model), its
behaviour: ``check_decoder_behaviour``. Probes (``measure.probes``) any right decoder
block passes, on one block in eval mode: deterministic, reads the memory, the future
never changes the past, masked source positions are invisible.
"""

from __future__ import annotations

import torch

from tformer_ref.device import get_device

from ...guard.integrity import seal
from ..cases import randn
from ..ch04 import DROPOUT_IN_EVAL
from ..diagnosis import passed, single_threaded
from ..measure.probes import Probe, future_moves_past, padding_change, run_probes
from .decoder_block import (
    CROSS_FROM_DECODER,
    NO_CAUSAL_MASK,
    SOURCE_PADDING_SEEN,
    deterministic,
    probe_block,
)

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True

# Probes on one block in eval mode: ``probe(module, x, memory, src_mask)`` returns what
# it observed when the property fails, else None.


def _reads_memory(module, x, memory, src_mask):
    base = module(x.clone(), memory.clone(), src_mask)
    if not torch.allclose(module(x.clone(), memory + 1.0, src_mask), base, atol=1e-5):
        return None
    return "Changing the encoder's output (memory) changed nothing."


def _past_ignores_future(module, x, memory, src_mask):
    found = future_moves_past(lambda t: module(t, memory.clone(), src_mask), x, 3)
    if found is None:
        return None
    moved, by = found
    return (
        f"Changing target positions 3..5 changed the outputs at positions {moved} "
        f"(by up to {by:.3g}): the past sees the future."
    )


def _masked_source_invisible(module, x, memory, src_mask):
    # Positions of 100 where the real ones are of order 1: a mask that leaks them
    # moves the output far beyond any rounding.
    changed = padding_change(
        lambda m, mask: module(x.clone(), m, mask),
        memory[:, :3].clone(),
        torch.full_like(memory[:, 3:], 100.0),
        aligned=False,
    )
    if changed == 0.0:
        return None
    return (
        "Appending masked (padding) source positions 3..4 to the memory changed the "
        f"output by up to {changed:.3g}."
    )


DECODER_PROBES = (
    Probe(deterministic, DROPOUT_IN_EVAL, "deterministic"),
    Probe(_reads_memory, CROSS_FROM_DECODER, "reads memory"),
    Probe(_past_ignores_future, NO_CAUSAL_MASK, "past ignores future"),
    Probe(_masked_source_invisible, SOURCE_PADDING_SEEN, "masked source invisible"),
)


def _during(probe):
    # The padding probe runs a memory of 3 positions, then of those 3 and 2 masked.
    ss = "3 then 5" if probe.name == "masked source invisible" else "5"
    return (
        f" while the check ran the probe '{probe.name}' (x [B=2, St=6, D=16], "
        f"memory [.., Ss={ss}, ..], src_mask [2, 1, 1, {ss}])."
    )


@single_threaded
def check_decoder_behaviour(cls) -> None:
    """Probes any right decoder block passes: the future never changes the past, the
    output reads the memory, masked source positions are invisible, eval mode is
    deterministic."""
    title = "DecoderBlock behaviour"
    module = probe_block(cls)
    x, memory = randn(2, 6, 16, seed=31), randn(2, 5, 16, seed=32)
    src_mask = torch.tensor(
        [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool, device=get_device()
    )[:, None, None, :]
    run_probes(
        title,
        DECODER_PROBES,
        module,
        x,
        memory,
        src_mask,
        who="your block",
        during=_during,
    )
    passed(
        title,
        "causal, reads the memory, ignores source padding, deterministic in eval mode",
    )


seal(__name__)
