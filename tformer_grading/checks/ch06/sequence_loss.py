"""Checks for exercise ``sequence_loss`` of chapter 6 (book/ch06_training):
``sequence_loss(logits [B, St, V], labels [B, St], pad_id, label_smoothing) -> scalar``,
the mean smoothed cross-entropy over the labels that are not pad_id.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from tformer_ref.device import get_device

from ...guard.integrity import seal
from ..cases import randn
from ..diagnosis import (
    Case,
    Diagnosis,
    Pitfall,
    Raised,
    compare_to_reference,
    fail,
    run,
    run_or_fail,
    same,
    single_threaded,
)
from ..flow import as_is, fallback
from ..measure.losses import cross_entropy_weights
from ..measure.sizes import named
from .references import (
    ce,
    fail_first_problem,
    gen,
    loss_counts_padding,
    loss_ref,
)
from .sections import S_LOSS

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True


def _loss_mean_over_all(logits, labels, pad_id, eps):
    total = _loss_sum(logits, labels, pad_id, eps)
    return total / labels.numel()


def _loss_no_smoothing(logits, labels, pad_id, eps):
    return ce(logits, labels, ignore_index=pad_id)


def _loss_pad_zero(logits, labels, pad_id, eps):
    return ce(logits, labels, ignore_index=0, label_smoothing=eps)


def _loss_sum(logits, labels, pad_id, eps):
    return ce(logits, labels, ignore_index=pad_id, label_smoothing=eps, reduction="sum")


def _loss_counts_padding_no_smoothing(logits, labels, pad_id, eps):
    return ce(logits, labels)


def _loss_of_probabilities(logits, labels, pad_id, eps):
    return loss_ref(logits.softmax(-1), labels, pad_id, eps)


LOSS_PITFALLS = [
    Pitfall(
        "padding counted in the loss",
        "Your loss includes the padding positions: the model is trained to predict "
        "PAD after EOS, and batches with more padding weigh more. Pass "
        "ignore_index=pad_id to cross_entropy (or mask those positions out of both "
        "the sum and the count).",
        S_LOSS,
        loss_counts_padding,
    ),
    Pitfall(
        "padding counted in the loss and no label smoothing",
        "Your loss includes the padding positions and ignores label_smoothing. "
        "Pass ignore_index=pad_id and label_smoothing=label_smoothing to "
        "cross_entropy.",
        S_LOSS,
        _loss_counts_padding_no_smoothing,
    ),
    Pitfall(
        "padding counted in the mean",
        "You left the padding out of the sum but still divide by all B·St "
        "positions, so the loss shrinks as padding grows. Divide by the number of "
        "real tokens (cross_entropy with ignore_index does).",
        S_LOSS,
        _loss_mean_over_all,
    ),
    Pitfall(
        "pad id hard-coded to 0",
        "You ignore token 0 instead of the pad_id you were given (the seed's masks "
        "hard-code 0 too). Use the pad_id argument.",
        S_LOSS,
        _loss_pad_zero,
    ),
    Pitfall(
        "label smoothing ignored",
        "Your loss ignores the label_smoothing argument. cross_entropy takes it "
        "directly: label_smoothing=label_smoothing.",
        S_LOSS,
        _loss_no_smoothing,
    ),
    Pitfall(
        "summed, not averaged",
        "Your loss is the sum over tokens, not the mean: its size (and the "
        "gradient's) grows with the batch and the learning rate no longer means "
        "the same thing. Average over the real tokens.",
        S_LOSS,
        _loss_sum,
    ),
    Pitfall(
        "softmax applied before cross_entropy",
        "cross_entropy takes raw logits and applies log_softmax itself; softmax "
        "first squashes every logit into [0, 1], so the loss can hardly move. Pass "
        "the logits as they are.",
        S_LOSS,
        _loss_of_probabilities,
    ),
]

# Recognised from the returned tensor itself, before any value is compared.
LOSS_NOT_SCALAR = Diagnosis(
    "loss not reduced to a scalar",
    "The loss must be a scalar tensor that gradients can flow back through: one "
    "number, the mean over the real tokens (cross_entropy's default reduction, with "
    "ignore_index).",
    S_LOSS,
)
LOSS_DETACHED = Diagnosis(
    "loss detached from the graph",
    "The loss must be a scalar tensor that gradients can flow back through. Do not "
    "call .item() or wrap it in torch.tensor(...).",
    S_LOSS,
)
LOSS_DTYPE = Diagnosis(
    "loss computed in another dtype",
    "Compute the loss in the logits' dtype (no .float() / .half()): a float64 model "
    "gets a float64 loss.",
    S_LOSS,
)

# Recognised by measuring the gradient of the learner's loss with respect to each
# position's logits. Any cross-entropy with label smoothing e, weighted w per position,
# has gradient w · (softmax - (1 - e)·onehot(label) - e/V) there: a least-squares fit
# of w and e at every position says which positions count, how much, and with what e.
_MEAN = (
    "The loss is the mean over the real tokens: every label that is not pad_id "
    "has weight 1/N (N = their number), every pad_id label weight 0 "
    "(cross_entropy with ignore_index=pad_id)."
)
LOSS_PADS_WEIGHTED = Diagnosis(
    "padding counted in the loss",
    "Pad labels must not count: the model would learn to predict PAD after EOS. "
    + _MEAN,
    S_LOSS,
)
LOSS_WRONG_TOKENS_IGNORED = Diagnosis(
    "ignores tokens that are not padding",
    "Only the labels equal to pad_id are left out; use the pad_id argument (not a "
    "constant) as ignore_index. " + _MEAN,
    S_LOSS,
)
LOSS_SMOOTHING = Diagnosis(
    "label smoothing not as specified",
    "With label_smoothing = ε the target puts 1 − ε on the label and spreads ε evenly "
    "over all V classes, the label included (ε/V each), exactly as "
    "F.cross_entropy(..., label_smoothing=ε) does.",
    S_LOSS,
)
LOSS_WEIGHTING = Diagnosis("not a mean over the real tokens", _MEAN, S_LOSS)
LOSS_UNEVEN = Diagnosis(
    "real tokens weighted unevenly",
    "Your loss weighs the real tokens differently from one another. " + _MEAN,
    S_LOSS,
)
LOSS_MISPAIRED = Diagnosis(
    "logits and labels paired up wrongly",
    "Flatten logits [B, St, V] and labels [B, St] the same way (logits.reshape(-1, "
    "V) with labels.reshape(-1), or cross_entropy(logits.transpose(1, 2), labels)), "
    "so that each position's logits meet that position's label.",
    S_LOSS,
)
LOSS_NOT_NORMALISED = Diagnosis(
    "logits not normalised by log_softmax",
    "A cross-entropy does not change when the same constant is added to all V logits "
    "of a position; yours does, so it does not take log_softmax of the raw logits "
    "(nll_loss needs log-probabilities; cross_entropy takes raw logits).",
    S_LOSS,
)
LOSS_SATURATES = Diagnosis(
    "loss of probabilities, not log-probabilities",
    "Your loss stays small however confidently wrong the logits are, as a loss of "
    "softmax probabilities does. cross_entropy applies log_softmax itself: pass it "
    "the raw logits (no softmax first); nll_loss needs log_softmax(logits), not "
    "softmax(logits).",
    S_LOSS,
)
LOSS_MIXES_POSITIONS = Diagnosis(
    "logits of different positions mixed",
    "Each position's loss must depend on that position's V logits only. Yours mixes "
    "positions: a reshape or view that interleaves the vocabulary axis with the "
    "time axis (logits [B, St, V].permute(0, 2, 1).reshape(-1, V)), or a softmax "
    "over another axis than the last. Use logits.reshape(-1, V) with "
    "labels.reshape(-1), or cross_entropy(logits.transpose(1, 2), labels).",
    S_LOSS,
)
LOSS_VALUE_OFFSET = Diagnosis(
    "loss value off by a constant",
    "Your gradient is right but the value is not the mean cross-entropy. KL "
    "divergence to the smoothed target (the Annotated Transformer's "
    "LabelSmoothing) is the cross-entropy minus the target's entropy: same gradient, "
    "smaller value. Return the cross-entropy.",
    S_LOSS,
)


def _loss_cases():
    configs = [  # (B, St, V, pad_id, label_smoothing, dtype)
        (4, 5, 13, 0, 0.1, torch.float32),
        (3, 6, 11, 0, 0.0, torch.float32),
        (2, 7, 9, 3, 0.0, torch.float32),
        (5, 4, 17, 0, 0.2, torch.float64),
        (4, 6, 10, 3, 0.1, torch.float32),
    ]
    cases = []
    for i, (b, s, v, pad, eps, dtype) in enumerate(configs):

        def make(b=b, s=s, v=v, pad=pad, eps=eps, dtype=dtype, i=i):
            labels = torch.randint(4, v, (b, s), generator=gen(100 + i))
            if pad != 0:  # token 0 is a real token here: hard-coding 0 shows
                labels[:, ::2] = torch.randint(
                    0, 3, (b, (s + 1) // 2), generator=gen(150 + i)
                )
            for r in range(1, b):  # every row but the first ends in padding
                labels[r, s - 1 - r % (s - 1) :] = pad
            logits = randn(b, s, v, seed=200 + i, dtype=dtype)
            return logits, labels.to(get_device()), pad, eps

        label = (
            f"logits [{named(B=b, St=s, V=v)}] {dtype}, pad_id={pad}, "
            f"label_smoothing={eps}"
        )
        cases.append(Case(label, make))
    return cases


@dataclass(frozen=True)
class _LossSeen:
    """One case of the learner's loss: its inputs, its value and its gradient with
    respect to the logits [B, St, V], all detached."""

    label: str
    logits: torch.Tensor
    labels: torch.Tensor
    pad: int
    eps: float
    value: torch.Tensor
    grad: torch.Tensor


LOSS_MODIFIES_INPUTS = Diagnosis(
    "arguments modified in place",
    "Your sequence_loss wrote into a tensor it was given: the caller's logits or "
    "labels change under it (train_step logs and reuses them). Leave both unchanged: "
    "work on new tensors (masked_fill, not masked_fill_; no labels[...] = ...), or use "
    "ignore_index=pad_id.",
    S_LOSS,
)


def _unchanged_arguments(title, given, originals, label) -> None:
    """Fail when the learner's call changed any of ``given`` (logits [B, St, V],
    labels [B, St]) from ``originals``."""
    for name, now, was in zip(("logits", "labels"), given, originals):
        now = now.detach()
        if now.shape != was.shape or not torch.equal(now, was.to(now)):
            changed = (
                int((now != was.to(now)).sum())
                if now.shape == was.shape
                else f"all (now shape {list(now.shape)})"
            )
            LOSS_MODIFIES_INPUTS.fail(
                title,
                f"In case {label} your code changed "
                f"{changed} entries of the {name} it was "
                "given.",
            )


def _loss_value(title, loss_fn, logits, labels, pad, eps, label):
    """Run the learner's loss on a graph-connected copy of ``logits`` (so in-place
    writes are the learner's business) and check it is a scalar tensor with a graph."""
    leaf = logits.detach().clone().requires_grad_(True)
    given = (leaf.clone(), labels.clone())
    out = run_or_fail(title, loss_fn, (*given, pad, eps), f"case {label}: your code")
    _unchanged_arguments(title, given, (logits, labels), label)
    if isinstance(out, (float, int)):  # a loss.item() returned
        LOSS_DETACHED.fail(title, f"Yours is a Python {type(out).__name__}.")
    if type(out) is not torch.Tensor:
        fail(
            title,
            f"case {label}: expected a scalar torch.Tensor, got {type(out).__name__}",
            S_LOSS,
        )
    if out.dim() != 0:
        LOSS_NOT_SCALAR.fail(title, f"Yours has shape {list(out.shape)}.")
    if not out.requires_grad:
        LOSS_DETACHED.fail(title, "Yours has requires_grad=False.")
    if out.dtype != logits.dtype:
        LOSS_DTYPE.fail(
            title,
            f"In case {label} your loss is {out.dtype} for {logits.dtype} logits.",
        )
    if not bool(torch.isfinite(out.detach())):
        fallback(
            title,
            f"In case {label} your loss is {float(out.detach())} (a log of "
            "0 or a division by 0?)",
            S_LOSS,
            "compare your code with the lesson",
        )
    return leaf, out


def _gradient_seen(title, loss_fn, logits, labels, pad, eps, label) -> _LossSeen:
    """The learner's loss and its gradient with respect to ``logits``."""
    leaf, out = _loss_value(title, loss_fn, logits, labels, pad, eps, label)
    grad = run(lambda: torch.autograd.grad(out, leaf, allow_unused=True)[0], ())
    if isinstance(grad, Raised):
        fail(
            title,
            f"case {label}: the backward pass through your loss raised {grad!r}",
            S_LOSS,
        )
    if grad is None or not bool(grad.any()):
        LOSS_DETACHED.fail(title, "No gradient reaches the logits.")
    return _LossSeen(label, logits, labels, pad, eps, out.detach(), grad.detach())


def _loss_seen(title, loss_fn, case) -> _LossSeen:
    return _gradient_seen(title, loss_fn, *case.make(), case.label)


def _loss_seen_at(title, loss_fn, logits, seen) -> _LossSeen:
    """The same case as ``seen`` with other logits."""
    return _gradient_seen(
        title, loss_fn, logits, seen.labels, seen.pad, seen.eps, seen.label
    )


def _fit_positions(seen: _LossSeen, labels=None):
    """Per position [B, St]: the weight w, smoothing e and relative residual that fit
    the learner's gradient as w · (softmax - (1 - e)·onehot(label) - e/V)."""
    labels = seen.labels if labels is None else labels
    return cross_entropy_weights(seen.logits, seen.grad, labels)


def _fits(seen, residual) -> torch.Tensor:
    """Positions where the fit explains the gradient (or there is no gradient)."""
    size = seen.grad.double().norm(dim=-1) * int(_real(seen).sum())
    return (residual < 1e-3) | (size < 1e-6)


def _real(seen):
    return seen.labels != seen.pad


def _not_a_cross_entropy(title, loss_fn, seen, weight, residual) -> tuple | None:
    """Why the gradient is not that of a weighted cross-entropy, or None when it is."""
    n_real = int(_real(seen).sum())
    if bool(_fits(seen, residual).all()):
        return None
    mixed = _mixes_positions(title, loss_fn, seen)
    if mixed is not None:
        return LOSS_MIXES_POSITIONS, mixed
    pushed = seen.grad.double().argmin(-1)  # the class each position's loss pushes up
    w2, _, r2 = _fit_positions(seen, pushed)
    if bool(_fits(seen, r2).all()):
        moved = int(((pushed != seen.labels) & (w2.abs() * n_real > 1e-6)).sum())
        return LOSS_MISPAIRED, (
            f"In case {seen.label} at {moved} of the "
            f"{seen.labels.numel()} positions your loss scores the "
            "logits against another position's label."
        )
    return _probe_normalisation(title, loss_fn, seen)


def _mixes_positions(title, loss_fn, seen) -> str | None:
    """Change the logits of position (0, 0) only: in a per-position loss, the gradient
    at every other position stays the same."""
    changed = seen.logits.clone()
    changed[0, 0] += torch.linspace(
        -2.0, 2.0, changed.size(-1), dtype=changed.dtype, device=changed.device
    )
    other = _loss_seen_at(title, loss_fn, changed, seen)
    moved = (other.grad - seen.grad).abs().flatten(0, 1)[1:].amax(-1)
    scale = float(seen.grad.abs().max())
    if float(moved.max()) > 1e-4 * scale:
        count = int((moved > 1e-4 * scale).sum())
        return (
            f"In case {seen.label} changing only position (0, 0)'s logits changed "
            f"your loss's gradient at {count} other positions."
        )
    return None


def _probe_normalisation(title, loss_fn, seen) -> tuple:
    """Shift every position's logits by its own constant, then make them saturate:
    a cross-entropy is unchanged by the first and grows without bound in the second."""
    shift = torch.linspace(
        -3.0,
        5.0,
        seen.labels.numel(),
        dtype=seen.logits.dtype,
        device=seen.logits.device,
    ).reshape(*seen.labels.shape, 1)
    args = (seen.labels, seen.pad, seen.eps, seen.label)
    moved = _loss_value(title, loss_fn, seen.logits + shift, *args)[1].detach()
    if not math.isclose(float(moved), float(seen.value), rel_tol=1e-4, abs_tol=1e-5):
        return LOSS_NOT_NORMALISED, (
            f"In case {seen.label} adding a constant to each "
            f"position's logits changed your loss from "
            f"{float(seen.value):.5g} to {float(moved):.5g}."
        )
    wrong_class = (seen.labels + 1) % seen.logits.size(-1)
    sure = 30.0 * F.one_hot(wrong_class, seen.logits.size(-1)).to(seen.logits)
    theirs = _loss_value(title, loss_fn, sure, *args)[1].detach()
    want = loss_ref(sure, seen.labels, seen.pad, seen.eps)
    if float(theirs) < 0.5 * float(want):
        return LOSS_SATURATES, (
            f"In case {seen.label}, with logits that put 30 on a "
            f"wrong class, your loss is {float(theirs):.4g}; the "
            f"cross-entropy is {float(want):.4g}."
        )
    return None, (
        f"In case {seen.label} the gradient of your loss is not that of a "
        "cross-entropy of softmax(logits), with or without smoothing."
    )


def _loss_padding(seen, weight) -> tuple | None:
    """Which positions count: the pads must not, every real token must."""
    real = _real(seen)
    n_real = int(real.sum())
    counts = weight.abs() * n_real > 1e-4
    pads_in, n_pads = int((counts & ~real).sum()), int((~real).sum())
    left_out = real & ~counts
    if left_out.any():
        ids = sorted(set(seen.labels[left_out].tolist()))
        rows = sorted(set(left_out.nonzero()[:, 0].tolist()))
        return LOSS_WRONG_TOKENS_IGNORED, (
            f"In case {seen.label} (pad_id={seen.pad}) your loss leaves out "
            f"{int(left_out.sum())} real tokens, labels {ids} in rows {rows}"
            + (
                f", and counts {pads_in} of the {n_pads} pad positions."
                if pads_in
                else "."
            )
        )
    if pads_in:
        return LOSS_PADS_WEIGHTED, (
            f"In case {seen.label} your loss gives weight to {pads_in} of the "
            f"{n_pads} pad positions ({100 * pads_in / n_pads:.0f} %)."
        )
    return None


def _smoothing_story(on, off, eps, vocab) -> str:
    """What a target with ``on`` on the label and ``off`` elsewhere looks like."""
    known = [
        ((1.0, 0.0), "no smoothing at all: the label_smoothing argument is ignored"),
        ((1 - eps, eps / (vocab - 1)), "ε spread over the V−1 other classes only"),
        (
            (1.0, eps),
            "ε given to every class instead of ε/V (a sum where a mean belongs)",
        ),
        ((eps + (1 - eps) / vocab, (1 - eps) / vocab), "ε and 1 − ε swapped"),
        ((1 + eps / vocab, eps / vocab), "ε/V added without taking ε off the label"),
        (
            (1 - eps, 0.0),
            (
                "a smoothing term that carries no gradient (computed "
                "from detached logits?)"
            ),
        ),
    ]
    for (a, b), story in known:
        if abs(on - a) < 1e-3 and abs(off - b) < 1e-3 / vocab and eps > 0:
            return f" That is {story}."
    return ""


def _loss_smoothing(seen, weight, eps_fit) -> tuple | None:
    """The smoothed target the gradient implies, at the real tokens that count:
    Σ_k target_k = N·w, target_other = N·w·e/V."""
    n_real, vocab, eps = int(_real(seen).sum()), seen.logits.size(-1), seen.eps
    counts = _real(seen) & (weight.abs() * n_real > 1e-4)
    measured = float(eps_fit[counts].median())
    spread = float(eps_fit[counts].max() - eps_fit[counts].min())
    if spread > 1e-3:
        return LOSS_UNEVEN, (
            f"In case {seen.label} the label smoothing your gradient implies varies "
            f"from token to token (ε from {float(eps_fit[counts].min()):.3g} to "
            f"{float(eps_fit[counts].max()):.3g}), and so do the weights: the tokens' "
            "losses are not one smoothed cross-entropy averaged."
        )
    if abs(measured - eps) < 1e-3:
        return None
    total = float((weight[counts] * n_real).median())
    on, off = total * (1 - measured + measured / vocab), total * measured / vocab
    story = _smoothing_story(on, off, eps, vocab)
    return LOSS_SMOOTHING, (
        f"In case {seen.label} (V = {vocab}) your loss's gradient implies a target of "
        f"{on:.4g} on the label and {off:.4g} on each other class; label_smoothing = "
        f"{eps} gives {1 - eps + eps / vocab:.4g} and {eps / vocab:.4g}.{story}"
    )


def _weighting_story(k, seen) -> str:
    b, s = seen.labels.shape
    known = [
        (b * s, "B·St, all positions, pads included"),
        (b, "B, the batch size"),
        (s, "St, the sequence length"),
        (1, "1: a sum, not a mean"),
    ]
    for value, story in known:
        if abs(k - value) < 1e-3 * value:
            return f" You divide by {story}."
    return ""


def _groups_weigh_equally(weight, real, axis) -> bool:
    """Each row (axis 1) or column (axis 0) of ``weight`` [B, St] is a mean over its
    real tokens, and the rows (columns) are averaged: weight = 1 / (count · groups)."""
    count = real.sum(axis, keepdim=True).double()
    groups = real.size(1 - axis)
    return bool(((weight.double() * count * groups)[real] - 1).abs().lt(1e-3).all())


def _loss_weighting(seen, weight) -> tuple | None:
    """Every real token must weigh 1/N: measure what the learner's loss gives them."""
    real = _real(seen)
    n_real = int(real.sum())
    w = weight[real] * n_real
    if bool(((w - 1).abs() < 1e-3).all()):
        return None
    seen_at = f"In case {seen.label} ({n_real} real tokens)"
    if bool(((w - w[0]).abs() < 1e-3 * w[0].abs()).all()):
        k = float(n_real / w[0])
        return LOSS_WEIGHTING, (
            f"{seen_at} every real token has weight 1/{k:.4g} "
            f"instead of 1/{n_real}.{_weighting_story(k, seen)}"
        )
    if _groups_weigh_equally(weight, real, 1):
        return LOSS_WEIGHTING, (
            f"{seen_at} your loss weights every sequence equally "
            "(a mean of per-sequence means): a token of a row with "
            "n real tokens weighs 1/(B·n), not 1/N."
        )
    if _groups_weigh_equally(weight, real, 0):
        return LOSS_WEIGHTING, (
            f"{seen_at} your loss weights every time step "
            "equally (a mean of per-position means over the "
            "batch): a token at a position with m real tokens "
            "weighs 1/(St·m), not 1/N."
        )
    return LOSS_UNEVEN, (
        f"{seen_at} the real tokens' weights range from "
        f"{float(w.min()):.4g}/N to {float(w.max()):.4g}/N, "
        "expected 1/N each."
    )


def _smoothed_target_entropy(eps, vocab) -> float:
    on, off = 1 - eps + eps / vocab, eps / vocab
    return -(on * math.log(on) + (vocab - 1) * off * math.log(off)) if eps else 0.0


def _loss_offset(seen) -> tuple | None:
    """With the right gradient, the value may still be off by a constant."""
    want = float(loss_ref(seen.logits, seen.labels, seen.pad, seen.eps))
    got = float(seen.value)
    if math.isclose(got, want, rel_tol=1e-4, abs_tol=1e-5):
        return None
    entropy = _smoothed_target_entropy(seen.eps, seen.logits.size(-1))
    kl = (
        f" The difference is the smoothed target's entropy ({entropy:.4g}): a KL "
        "divergence."
        if abs(want - got - entropy) < 1e-4
        else ""
    )
    return LOSS_VALUE_OFFSET, (
        f"In case {seen.label} your loss is {got:.6g}, the mean "
        f"cross-entropy {want:.6g}.{kl}"
    )


def _loss_problem(title, loss_fn, seen) -> tuple | None:
    """The first stage at which the learner's loss departs, as (diagnosis, seen)."""
    weight, eps_fit, residual = _fit_positions(seen)
    return (
        _not_a_cross_entropy(title, loss_fn, seen, weight, residual)
        or _of_probabilities(title, loss_fn, seen, weight)
        or _loss_padding(seen, weight)
        or _loss_smoothing(seen, weight, eps_fit)
        or _loss_weighting(seen, weight)
        or _loss_offset(seen)
    )


def _of_probabilities(title, loss_fn, seen, weight) -> tuple | None:
    """A loss of probabilities has a cross-entropy's gradient weighted by p(label):
    when the real tokens' weights follow no pattern, probe for it."""
    problem = _loss_weighting(seen, weight)
    if problem is None or problem[0] is not LOSS_UNEVEN:
        return None
    probed = _probe_normalisation(title, loss_fn, seen)
    return probed if probed[0] is not None else None


def _by_smoothing(loss_fn, cases, problem) -> tuple:
    """A problem no stage could name, showing in exactly the cases with label smoothing,
    is the smoothing (done some other way than PyTorch's)."""
    if problem[0] is not None:
        return problem
    wrong = {
        c.label
        for c in cases
        if not same(run(loss_fn, c.make()), loss_ref(*c.make()), 1e-5, 1e-4)
    }
    smoothed = {c.label for c in cases if c.make()[3] > 0}
    if wrong != smoothed:
        return problem
    return LOSS_SMOOTHING, (
        f"Your loss is right in every case without label smoothing "
        f"and wrong in every case with it. {problem[1]}"
    )


@single_threaded
def check_sequence_loss(loss_fn) -> None:
    """``loss_fn(logits [B, St, V], labels [B, St], pad_id, label_smoothing) -> scalar
    tensor``: the mean smoothed cross-entropy over the labels that are not pad_id."""
    title, cases = "sequence_loss", _loss_cases()
    for case in cases:
        problem = _loss_problem(title, loss_fn, _loss_seen(title, loss_fn, case))
        if problem is not None:
            fail_first_problem(
                title,
                _by_smoothing(loss_fn, cases, problem),
                cases,
                loss_fn,
                LOSS_PITFALLS,
                as_is,
                (1e-5, 1e-4),
                S_LOSS,
            )
    compare_to_reference(title, cases, loss_fn, loss_ref, (), atol=1e-5, rtol=1e-4)


seal(__name__)
