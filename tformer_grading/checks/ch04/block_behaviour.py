"""Checks for exercise ``encoder_block`` of chapter 4 (book/ch04_blocks), its
behaviour: ``check_block_behaviour``. Properties any right block has, probed on one
block at dropout 0 (``measure.probes``): nothing random in train mode, no sequence
reads another's tokens, no statistics over the batch, masked padding invisible, the
same output in train and eval mode; and at dropout 0.5, eval mode deterministic.
"""

from __future__ import annotations

import torch

from ...guard.integrity import seal
from ..blocks import build_block, reject_batchnorm
from ..cases import randn
from ..diagnosis import Diagnosis, passed, single_threaded
from ..measure.probes import (
    Probe,
    batch_independent,
    observe,
    others_unseen,
    padding_invisible,
    run_probes,
    share_changed,
    when_false,
)
from .encoder_block import deterministic_in_eval
from .norms import BATCHNORM
from .sections import S_DROPOUT, S_NORM
from .tracing import DROPOUT_IN_EVAL

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True

# Properties any right block has, probed on one block at dropout 0.

PADDING_VISIBLE = Diagnosis(
    "padding changes the real tokens",
    "Padding must be invisible. Pass the mask to the attention, and normalise each "
    "token on its own features (LayerNorm), never with statistics taken across "
    "positions.",
    S_NORM,
)


RANDOM_AT_RATE_ZERO = Diagnosis(
    "random in train mode at dropout 0",
    "Built with dropout=0, the block must compute the same output on every call in "
    "train mode: every dropout takes its rate from the block's dropout argument "
    "(nn.Dropout(dropout)), never a number of its own (Dropout(0.1)) or another "
    "function of it (Dropout(1 - dropout)).",
    S_DROPOUT,
)
SEQUENCES_MIX = Diagnosis(
    "the sequences of a batch mix",
    "Each sequence of a batch x [B, S, D] is a sentence of its own: the block must "
    "compute sequence 0's output from sequence 0 alone. Attention runs over the "
    "positions S of one sequence, never over the batch axis (batch first, [B, S, D]).",
    S_NORM,
)
TRAIN_EVAL_DIFFER = Diagnosis(
    "train and eval mode differ at dropout 0",
    "At dropout=0 nothing may depend on the mode: dropout at rate 0 keeps everything, "
    "and a LayerNorm has no running statistics. Give every dropout the block's "
    "dropout argument as its rate (a rate of 1 - dropout drops everything at 0).",
    S_DROPOUT,
)


def _same_twice_in_train(module, x):
    """Two train-mode calls on one input agree (dropout 0: nothing random may run)."""
    module.train()
    return share_changed(lambda: module(x.clone())) == 0.0


def _batch_independent(module, x):
    """In train mode (where BatchNorm uses batch statistics) and in eval mode, sequence
    0's output ignores the other sequences, and a batch of one gives it too."""
    for train in (True, False):
        module.train(train)
        if not batch_independent(module, x):
            return False
    return True


def _others_tokens_unseen(module, x):
    """In eval mode sequence 0's output reads no token of the other sequences."""
    module.eval()
    return others_unseen(module, x)


def _padding_invisible(module, x):
    """Three more (masked) pad positions leave the real positions unchanged."""
    module.train()
    b, _, d = x.shape
    return padding_invisible(module, x, randn(b, 3, d, seed=8, device=x.device) * 10)


def _same_in_train_and_eval(module, x):
    module.train()
    trained = module(x)
    module.eval()
    return torch.allclose(module(x), trained, atol=1e-5)


# In this order, each probe run only when the ones before it held: a cause is named
# only where the earlier probes rule out the others (randomness makes sequence 0 look
# batch-dependent; a batch norm reads the other sequences through statistics only).
BEHAVIOUR_PROBES = (
    Probe(
        when_false(
            _same_twice_in_train,
            "Built with dropout=0, two train-mode calls on the same input gave "
            "different outputs.",
        ),
        RANDOM_AT_RATE_ZERO,
    ),
    Probe(
        when_false(
            _others_tokens_unseen,
            "Reversing the positions of the other sequences of the batch changed "
            "sequence 0's output (in eval mode).",
        ),
        SEQUENCES_MIX,
    ),
    Probe(
        when_false(
            _batch_independent,
            "Sequence 0's output changes when the other sequences of the batch are "
            "scaled, but not when their positions are reordered: statistics taken "
            "over the batch.",
        ),
        BATCHNORM,
    ),
    Probe(
        when_false(
            _padding_invisible,
            "Adding masked padding positions changed the outputs of the real tokens.",
        ),
        PADDING_VISIBLE,
    ),
    Probe(
        when_false(
            _same_in_train_and_eval,
            "Built with dropout=0, the block's output in train mode differs from its "
            "output in eval mode (each the same on every call, and no sequence "
            "depends on another).",
        ),
        TRAIN_EVAL_DIFFER,
    ),
)


@single_threaded
def check_block_behaviour(cls) -> None:
    """Properties any right block has: each sequence normalised on its own (no
    BatchNorm), padding invariance, batch of one, the same output in train and eval mode
    at dropout 0, determinism in eval."""
    title = "EncoderBlock behaviour"
    torch.manual_seed(0)
    module = build_block(title, cls, (16, 4, 32, 0.0, False))
    reject_batchnorm(title, module, BATCHNORM)
    x = randn(4, 5, 16, seed=7)
    run_probes(title, BEHAVIOUR_PROBES, module, x, who="your block")
    dropped = build_block(title, cls, (16, 4, 32, 0.5, False))
    if not observe(title, deterministic_in_eval, dropped, x, who="your block"):
        DROPOUT_IN_EVAL.fail(title, "Two calls in eval mode gave different outputs.")
    passed(
        title,
        "normalises each token on its own, ignores padding, same in train "
        "and eval mode at dropout 0",
    )


seal(__name__)
