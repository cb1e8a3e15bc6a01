"""The behaviour probes of exercise ``multi_head_attention`` of chapter 1: properties
any right attention has whatever its code (tokens mix, batch entries stay apart, eval
mode is deterministic, training mode computes the same but for dropout). The
comparison's stages name the first two too (``multi_head_attention``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ...guard.integrity import seal
from ..cases import build_module, randn
from ..diagnosis import Diagnosis, fail, passed, run_or_fail
from ..measure.probes import (
    Probe,
    batch_independent,
    run_probes,
    share_changed,
    tokens_mix,
    training_changes,
    when_false,
)
from ..measure.sizes import named
from .sections import S_EINSUM, S_PROJ, S_SPLIT

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True

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


def _same_twice(call, x):
    return share_changed(lambda: call(x.clone())) == 0.0


def _tokens_exchange(call, x):
    if tokens_mix(call, x, atol=1e-6):
        return None
    return (
        f"Changing token {x.size(1) - 1} changed no other position's output, so "
        "tokens never exchange information."
    )


def _batch_apart(call, x):
    # Not a batch of one: a squeezed batch axis is the comparison's to name, not a
    # leak between entries.
    return batch_independent(call, x, atol=1e-6, alone=False)


# Each probe is ``observe(call, x)``, ``call`` the attention of x to itself (eval mode).
MIXING_PROBES = (
    Probe(_tokens_exchange, TOKENS_NEVER_MIX),
    Probe(
        when_false(
            _batch_apart,
            "Changing the other sequences of the batch changed the output for "
            "sequence 0: batch entries are leaking into each other.",
        ),
        BATCH_ENTRIES_LEAK,
    ),
)
# Determinism first: the other probes compare two calls.
BEHAVIOUR_PROBES = (
    Probe(
        when_false(_same_twice, "Two calls in eval mode gave different outputs."),
        DROPOUT_IN_EVAL,
    ),
    *MIXING_PROBES,
)


def probe_self_attention(
    title: str, module: torch.nn.Module, x: torch.Tensor, probes: Sequence[Probe]
) -> None:
    """Run ``probes`` on ``t -> module(t, t, t)`` and ``x`` [B, S, D]. A first call
    on ``x`` must return a tensor: there the learner's exception is read with the
    PyTorch call it came from, before any probe compares two outputs."""
    b, s, d = x.shape
    who = f"your code, run on x [{named(B=b, S=s, D=d)}],"

    def self_attend(t):
        with torch.no_grad():
            return module(t, t, t)

    out = run_or_fail(title, self_attend, (x.clone(),), who)
    if not isinstance(out, torch.Tensor):
        fail(title, f"{who} returned {type(out).__name__}; expected a tensor.")
    run_probes(title, probes, self_attend, x, who=who)


def check_multi_head_attention_behaviour(cls) -> None:
    """Probes any correct attention passes: tokens mix, batch entries stay apart, eval
    mode is deterministic, training mode computes the same but for dropout."""
    module = build_module(
        "MultiHeadAttention", cls, (16, 4), torch.float32, seed=0
    ).eval()
    x = randn(4, 6, 16, seed=7)
    probe_self_attention("MultiHeadAttention", module, x, BEHAVIOUR_PROBES)
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
