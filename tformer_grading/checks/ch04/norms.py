"""Chapter 4's LayerNorm requirement (book/ch04_blocks), read off a block's forward:
the norms an ``EncoderBlock`` calls (``nn.LayerNorm``, ``F.layer_norm`` on its own
weights, or a norm written by hand), what each call normalises over, its gain, bias
and eps, and the mistakes those readings name. ``encoder_block`` finds the learner's
norms with :func:`learner_norms`; ``dropout_placement`` and ``block_behaviour`` check
the same block.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ...guard.integrity import seal
from ..diagnosis import Diagnosis, fail, quiet
from ..measure.trace import NORMS
from .sections import S_NORM

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True

#: The exercise's sentence on the norms, quoted when a block breaks it.
NORM_RULE = (
    "two nn.LayerNorm(d_model) (or F.layer_norm with your own weight and bias "
    "of shape [D], or a LayerNorm module written by hand with its own gain and bias), "
    "one per sublayer, with their learnable gain and bias"
)

BATCHNORM = Diagnosis(
    "BatchNorm instead of LayerNorm",
    "BatchNorm normalises each feature with statistics taken across the batch (and the "
    "positions): padding tokens pollute them, a batch of one sentence at decoding time "
    "has no statistics to speak of, and eval mode switches to running averages that "
    "the training batches never matched. LayerNorm normalises each token's own D "
    "features: use nn.LayerNorm(d_model).",
    S_NORM,
)
OTHER_NORM = Diagnosis(
    "another normalisation instead of LayerNorm",
    f"The block normalises with LayerNorm: the exercise asks for {NORM_RULE}.",
    S_NORM,
)
NORM_SHAPE = Diagnosis(
    "LayerNorm over the wrong shape",
    "nn.LayerNorm(d_model) normalises each token over its own D features; a wider "
    "normalized_shape mixes positions (and breaks on other lengths).",
    S_NORM,
)
NO_AFFINE = Diagnosis(
    "LayerNorm without its gain and bias",
    f"The exercise asks for {NORM_RULE}: nn.LayerNorm(d_model) keeps the default "
    "elementwise_affine=True, so each feature gets its learnable scale and shift back "
    "after the normalisation.",
    S_NORM,
)
NORM_IN_FORWARD = Diagnosis(
    "a LayerNorm created inside forward",
    "A norm built in forward gets fresh weights on every call: they are not the "
    "block's parameters, so the optimizer never sees them. Create the two "
    "nn.LayerNorm(d_model) in __init__.",
    S_NORM,
)
SHARED_NORM = Diagnosis(
    "one LayerNorm for both sublayers",
    "Each sublayer has its own LayerNorm (its own gain and bias): create two "
    "nn.LayerNorm(d_model) and use each once.",
    S_NORM,
)
NORM_EPS = Diagnosis(
    "LayerNorm eps",
    "The exercise asks for nn.LayerNorm(d_model) with its default eps = 1e-5 inside "
    "the square root (a smaller one, such as 1e-6, changes nothing measurable); an eps "
    "this large changes the outputs, and no longer normalises small activations.",
    S_NORM,
)


class LearnerNorm:
    """One of the learner's norms, seen through its ``layer_norm`` call: its own gain,
    bias and eps (an eps the checks accept, :func:`_check_eps`)."""

    def __init__(self, weight, bias, eps=1e-5):
        self.weight, self.bias, self.eps = weight, bias, eps

    def __call__(self, t):
        return F.layer_norm(t, (t.size(-1),), self.weight, self.bias, self.eps)


def norm_args(event):
    """(normalized_shape, weight, bias, eps) of a layer_norm call."""
    args, kwargs = event.args, event.kwargs
    names = ("input", "normalized_shape", "weight", "bias", "eps")
    got = [args[i] if len(args) > i else kwargs.get(n) for i, n in enumerate(names)]
    return (
        tuple(got[1]) if got[1] is not None else None,
        got[2],
        got[3],
        1e-5 if got[4] is None else got[4],
    )


def _batch_dependent(module, x, mask):
    """In eval mode, does sequence 0's output depend on the other sequences?"""
    changed = x.clone()
    changed[1:] = changed[1:] * 3.0 + 1.0
    module.eval()
    with torch.no_grad(), quiet():
        return not torch.allclose(
            module(x, mask)[0], module(changed, mask)[0], atol=1e-5
        )


def _reject_other_norms(title, calls):
    """BatchNorm, GroupNorm, RMSNorm ... calls instead of layer_norm."""
    others = sorted({e.kind for e in calls if e.kind != "layer_norm"})
    if "batch_norm" in others:
        BATCHNORM.fail(title, "Your block calls batch_norm.")
    if others:
        OTHER_NORM.fail(title, f"Your block calls {', '.join(others)}.")


def eps_changes_output(event) -> str:
    """What a layer_norm call's eps does to its output, on the check's own input,
    against the default 1e-5: "" when no more than the checks' tolerance (1e-6 or
    1e-12 change unit-scale tokens by about 5e-6), else the finding (0.1: about 5 %)."""
    shape, weight, bias, eps = norm_args(event)
    if not isinstance(eps, (int, float)) or not eps > 0:
        return f"Your LayerNorm uses eps = {eps!r}."
    if abs(eps / 1e-5 - 1) < 1e-3:
        return ""
    with torch.no_grad():
        default = F.layer_norm(event.inp, shape, weight, bias, 1e-5)
    gap = float((event.out - default).abs().max())
    if gap <= 1e-4 * (1 + float(default.abs().max())):
        return ""
    return (
        f"Your LayerNorm uses eps = {eps:g}: on the check's input its output differs "
        f"from eps = 1e-5 by up to {gap:.1e}."
    )


def _check_eps(title, event):
    """Its eps changes nothing measurable (:func:`eps_changes_output`)."""
    finding = eps_changes_output(event)
    if finding:
        NORM_EPS.fail(title, finding)


def _check_norm_calls(title, calls, d_model, module):
    """Each layer_norm call normalises the D features with a gain and a bias that are
    parameters of the block."""
    params = {id(p) for p in module.parameters()}
    for e in calls:
        shape, weight, bias, _ = norm_args(e)
        if shape != (d_model,):
            NORM_SHAPE.fail(
                title,
                "Your block calls layer_norm with normalized_shape="
                f"{list(shape or ())} on x [B, S, D={d_model}].",
            )
        if weight is None or bias is None:
            missing = "gain (weight=None" if weight is None else "bias (bias=None"
            NO_AFFINE.fail(
                title,
                f"Your LayerNorm has no learnable {missing}, as "
                "elementwise_affine=False gives).",
            )
        _check_eps(title, e)
        if id(weight) not in params or id(bias) not in params:
            NORM_IN_FORWARD.fail(
                title, "Your LayerNorm's gain or bias is not a parameter of the block."
            )


def _no_layer_norm(title, module, x, mask):
    """A block without a layer_norm call: BatchNorm by hand, or a hand-written norm."""
    if _batch_dependent(module, x, mask):
        BATCHNORM.fail(
            title,
            "Your block makes no layer_norm call, and in eval mode "
            "sequence 0's output changes with the other sequences: "
            "its norms take statistics across the batch.",
        )
    fail(
        title,
        "expected 2 nn.LayerNorm(d_model) modules, one per sublayer: your "
        "block makes no layer_norm call, and none of its modules normalises each "
        "token's features with its own gain and bias (a norm written by hand counts "
        f"when it does). The exercise asks for {NORM_RULE}.",
        S_NORM,
    )


def learner_norms(title, module, events, x, mask, explain=None):
    """The learner's distinct norms, in the order their first call ran, or fail saying
    which requirement on the norms the block breaks (``explain()`` first, when the
    count is off)."""
    calls = [e for e in events if e.kind in NORMS]
    _reject_other_norms(title, calls)
    _check_norm_calls(title, calls, x.size(-1), module)
    if not calls:
        _no_layer_norm(title, module, x, mask)
    norms = {}
    for e in calls:
        norms.setdefault(id(norm_args(e)[1]), norm_args(e)[1:4])
    if len(norms) == 1 and len(calls) >= 2:
        SHARED_NORM.fail(
            title,
            f"Your block calls the same LayerNorm {len(calls)} times per forward.",
        )
    if len(norms) != 2 and explain is not None:
        explain()
    if len(norms) != 2:
        fail(
            title,
            f"expected 2 nn.LayerNorm(d_model) modules, one per sublayer: your "
            f"block normalises with {len(norms)} distinct LayerNorm(s) in "
            f"{len(calls)} layer_norm call(s). The exercise asks for "
            f"{NORM_RULE}.",
            S_NORM,
        )
    return tuple(LearnerNorm(w, b, eps) for w, b, eps in norms.values())


seal(__name__)
