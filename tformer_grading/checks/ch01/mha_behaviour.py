"""The behaviour probes of exercise ``multi_head_attention`` of chapter 1: properties
any right attention has whatever its code (tokens mix, batch entries stay apart, eval
mode is deterministic, training mode computes the same but for dropout). The
comparison's stages name the first two too (``multi_head_attention``).
"""

from __future__ import annotations

import torch

from ...guard.integrity import seal
from ..cases import build_module, randn
from ..diagnosis import (
    Diagnosis,
    passed,
    probe_batch_independence,
    probe_eval_determinism,
    probe_token_mixing,
)
from ..measure.probes import Probe, run_probes, training_changes
from .sections import S_EINSUM, S_PROJ, S_SPLIT

TOKENS_NEVER_MIX = Diagnosis(
    "tokens never mix",
    "The scores must contract over the feature axis and range over key *positions*: "
    "check the axes of your matmul/einsum (the seed's einsum labels the sequence axis "
    "as heads).",
    S_EINSUM,
)
BATCH_ENTRIES_LEAK = Diagnosis(
    "batch entries leak into each other",
    "Check that no reshape/view mixes the batch axis with the head or sequence axis, "
    "and that batch-first tensors go to modules built with batch_first=True.",
    S_SPLIT,
)
DROPOUT_IN_EVAL = Diagnosis(
    "dropout on in eval mode",
    "Dropout must be off in eval mode: use nn.Dropout or pass "
    "`dropout_p if self.training else 0.0`.",
    S_PROJ,
)
CHANGES_IN_TRAINING = Diagnosis(
    "a different computation in training mode",
    "Training mode may add dropout and nothing else: the projections, the scale and "
    "the softmax are the same in both modes (look for `self.training` in your code).",
    S_PROJ,
)


def check_multi_head_attention_behaviour(cls) -> None:
    """Probes any correct attention passes: tokens mix, batch entries stay apart, eval
    mode is deterministic, training mode computes the same but for dropout."""
    __tracebackhide__ = True
    module = build_module(
        "MultiHeadAttention", cls, (16, 4), torch.float32, seed=0
    ).eval()
    x = randn(4, 6, 16, seed=7)

    def self_attend(t):
        with torch.no_grad():
            return module(t, t, t)

    # Determinism first: the other probes compare two calls.
    probe_eval_determinism("MultiHeadAttention", module, (x, x, x), DROPOUT_IN_EVAL)
    probe_token_mixing("MultiHeadAttention", self_attend, x, TOKENS_NEVER_MIX)
    probe_batch_independence("MultiHeadAttention", self_attend, x, BATCH_ENTRIES_LEAK)
    run_probes(
        "MultiHeadAttention",
        [Probe(training_changes, CHANGES_IN_TRAINING)],
        module,
        lambda: module(x, x, x),
        during=lambda _: " in training mode (module.train())",
    )
    passed(
        "MultiHeadAttention",
        "mixes tokens, keeps batch entries apart, deterministic in eval mode, "
        "the same computation in training mode",
    )


seal(__name__)
