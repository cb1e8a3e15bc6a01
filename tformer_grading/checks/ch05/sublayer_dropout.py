"""Checks for exercise ``decoder_block`` of chapter 5 (book/ch05_model), its dropout:
``check_decoder_block`` runs :func:`check_sublayer_dropout` once the block matches the
reference in eval mode. Also how the check finds the block's parts and traces one call
(``decoder_parts``, ``trace_block``), which the stage walk of ``decoder_block`` reads.
"""

from __future__ import annotations

import torch

from ...guard.integrity import seal
from ..blocks import Parts, build_block, find_parts
from ..cases import randn
from ..ch04 import BATCHNORM, S_DROPOUT
from ..ch04.tracing import kept_scale
from ..diagnosis import Diagnosis, Raised, fail, quiet, run
from ..measure.trace import trace
from .sections import S_DECODER

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True


def decoder_parts(module, d_model, d_ff=None) -> Parts:
    return find_parts("DecoderBlock", module, d_model, d_ff, 2, 3, BATCHNORM, S_DECODER)


def trace_block(module, parts, x, memory, src_mask):
    """(output or Raised, [Event]) of one call of the learner's block: its attentions
    ("attn": query, key, value, mask), norms ("norm") and feed-forward layers ("ff1",
    "ff2"), watched with forward hooks, in call order."""
    watched = [("attn", m) for m in parts.attns] + [("norm", m) for m in parts.norms]
    watched += [("ff1", parts.ff1), ("ff2", parts.ff2)]
    with torch.no_grad(), trace(watched) as events:
        out = run(module, (x, memory, src_mask))
    return out, events


# Eval mode hides dropout, so the block also runs in train mode at a moderate rate. In
# a Post-LN block norm k reads stream_k + Dropout(sublayer_k(...)), so its input minus
# the stream it started from is the dropped branch: the fraction of the sublayer's
# output zeroed there is measured for each of the three sublayers.

DROPOUT_PS = (0.3, 0.5)
#: (D, H, d_ff, B, St, Ss): 4·8·16 = 512 entries per branch, so the measured fraction
#: is within ±0.1 of p by far (its standard deviation is about 0.02).
DROPOUT_CONFIG = (16, 4, 32, 4, 8, 6)
SUBLAYERS = ("the masked self-attention", "the cross-attention", "the feed-forward")

SUBLAYER_DROPOUT = Diagnosis(
    "sublayer dropout missing or at the wrong rate",
    "Each of the three sublayers is wrapped as LayerNorm(x + Dropout(Sublayer(x))): "
    "in train mode dropout zeroes a fraction p (the block's `dropout`) of *every* "
    "sublayer's output, self-attention, cross-attention and feed-forward alike, and "
    "scales the rest by 1/(1-p) (nn.Dropout(dropout), or F.dropout(t, dropout, "
    "self.training)).",
    S_DROPOUT,
)


def _train_trace(title, cls, p):
    """(label, x, the calls) of one train-mode call of ``cls(D, H, d_ff, p)`` in
    float64 on x [B, St, D], memory [B, Ss, D], no source mask."""
    d, h, f, b, st, ss = DROPOUT_CONFIG
    label = (
        f"D={d}, H={h}, d_ff={f}, x [{b}, {st}, {d}], memory [{b}, {ss}, {d}], "
        f"torch.float64, dropout={p}, train mode"
    )
    module = build_block("DecoderBlock", cls, (d, h, f, p), torch.float64, seed=51)
    x = randn(b, st, d, seed=510, dtype=torch.float64)
    memory = randn(b, ss, d, seed=511, dtype=torch.float64)
    with torch.random.fork_rng(devices=[]), quiet():
        torch.manual_seed(52)
        out, calls = trace_block(
            module.train(), decoder_parts(module, d, f), x, memory, None
        )
    if isinstance(out, Raised):
        fail(
            title,
            f"your block raised {out!r} in train mode on case {label}.",
            S_DECODER,
        )
    return label, x, calls


def _branches(x, calls):
    """[(sublayer name, what was added to the stream, the sublayer's output)] for the
    three sublayers, read from the calls in order; [] when they cannot be read."""
    attns = [c.out for c in calls if c.kind == "attn"]
    ff2 = [c.out for c in calls if c.kind == "ff2"]
    norms = [c for c in calls if c.kind == "norm"]
    if len(attns) != 2 or len(ff2) != 1 or len(norms) != 3:
        return []
    streams = (x, norms[0].out, norms[1].out)
    return [
        (name, norm.inp - stream, before)
        for name, norm, stream, before in zip(
            SUBLAYERS, norms, streams, (*attns, ff2[0])
        )
        if isinstance(norm.inp, torch.Tensor)
        and norm.inp.shape == before.shape == stream.shape
    ]


def _branch_rates(x, calls):
    """[(sublayer name, fraction of its output zeroed on the branch, kept scale)]."""
    found = []
    for name, branch, before in _branches(x, calls):
        alive = before.abs() > 1e-6
        zeroed = float(
            ((branch == 0) & alive).double().sum() / alive.double().sum().clamp_min(1)
        )
        found.append((name, zeroed, kept_scale(branch, before)))
    return found


def _rate_problem(name, zeroed, scale, p) -> str | None:
    """What is off in one sublayer's measured dropout at rate ``p``, or None."""
    if abs(zeroed - p) > 0.1:
        return (
            f"{zeroed:.0%} of {name}'s output was zeroed on its way into the "
            f"residual sum, expected about {p:.0%} (p = {p})"
        )
    if scale is not None and abs(scale * (1 - p) - 1) > 0.02:
        return (
            f"the kept entries of {name}'s output were multiplied by "
            f"{scale:.3g}, expected 1/(1-p) = {1 / (1 - p):.3g}"
        )
    return None


def check_sublayer_dropout(title, cls):
    """At dropout 0.3 and 0.5 in train mode each sublayer's output loses about that
    fraction on its way into the residual sum, the kept values scaled by 1/(1-p)."""
    for p in DROPOUT_PS:
        label, x, calls = _train_trace(title, cls, p)
        for name, zeroed, scale in _branch_rates(x, calls):
            problem = _rate_problem(name, zeroed, scale, p)
            if problem:
                SUBLAYER_DROPOUT.fail(title, f"On case {label}: {problem}.")


seal(__name__)
