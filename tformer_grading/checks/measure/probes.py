"""Behaviour probes: properties any right module has, whatever its code.

A probe runs the learner's module on inputs the check varies, and says what it saw
when the property fails (a sentence for the learner), or None when it holds. A check
lists its probes with the mistake each failure names (a table of :class:`Probe`,
which the book's pitfall index reads as it reads any tuple) and runs them in order
with :func:`run_probes`: the first probe that fails names its diagnosis, so an order
in which earlier probes rule out the others' causes is part of the table.

The properties (each a function of ``call``, the learner's module on one input):
eval determinism (:func:`share_changed`), batch independence
(:func:`batch_independent`), token mixing across sequences (:func:`others_unseen`),
token mixing within one (:func:`tokens_mix`), causality (:func:`future_moves_past`),
padding invariance (:func:`padding_invisible`, :func:`padding_change`), training mode
computing what eval mode does, apart from randomness (:func:`training_changes`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch

from ...guard.integrity import seal
from ..diagnosis import Raised, fail, quiet

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True


class Probe(NamedTuple):
    """``observe(*args)``: what it saw when the property fails, else None;
    ``diagnosis``: the mistake that failure names; ``name``: what the learner reads
    when their code raises during the probe."""

    observe: Callable
    diagnosis: object
    name: str = ""


def when_false(prop: Callable[..., bool], observed: str) -> Callable:
    """An ``observe`` from a yes/no property: ``observed`` when ``prop(*args)`` is
    false, else None.

    Examples::

        >>> observe_ = when_false(lambda x: x > 0, "x is not positive.")
        >>> observe_(1), observe_(-1)
        (None, 'x is not positive.')
    """

    def observe_(*args):
        return None if prop(*args) else observed

    return observe_


def observe(title: str, fn: Callable, *args, who="your code", during=""):
    """``fn(*args)`` without gradients, quietly; the learner's exception fails the
    check: "{who} raised {the exception}{during}"."""
    with torch.no_grad(), quiet():
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 - the learner's code may raise anything
            fail(title, f"{who} raised {Raised(exc)!r}{during}")


def run_probes(
    title: str, probes, *args, who="your code", during: Callable = lambda p: ""
) -> None:
    """Run ``probes`` in order on ``args``; the first that observes a failure fails
    the check naming its diagnosis, with what it observed. ``during(probe)``: what the
    message of an exception adds.

    Examples::

        >>> from tformer_grading.checks.diagnosis import CheckFailure, Diagnosis
        >>> from tformer_grading.checks.diagnosis import Section
        >>> LEAK = Diagnosis("leak", "Batch entries leak.", Section("ch", "1.1", "T"))
        >>> mixes = lambda x: x + x.mean(0)  # a planted mistake: a batch statistic
        >>> probe = when_false(lambda x: batch_independent(mixes, x), "It moved.")
        >>> try:
        ...     run_probes("demo", [Probe(probe, LEAK)], torch.randn(3, 4, 2))
        ... except CheckFailure as failure:
        ...     print(str(failure).splitlines()[0])
        demo: this looks like the pitfall 'leak'. It moved. Batch entries leak.
    """
    for probe in probes:
        seen = observe(title, probe.observe, *args, who=who, during=during(probe))
        if seen:
            probe.diagnosis.fail(title, seen)


def share_changed(call: Callable) -> float:
    """The share of the output's entries that differ between two calls of
    ``call()`` (0.0: the same; 1.0 when the two are not comparable tensors).

    Examples::

        >>> share_changed(lambda: torch.ones(4))
        0.0
        >>> drop = torch.nn.Dropout(0.5)  # a planted mistake: dropout left on
        >>> share_changed(lambda: drop(torch.ones(1000))) > 0.3
        True
    """
    a, b = call(), call()
    if torch.equal(a, b):
        return 0.0
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return 1.0
    if a.shape != b.shape:
        return 1.0
    return (a != b).double().mean().item()


def batch_independent(call: Callable, x, atol=1e-5, alone=True) -> bool:
    """Whether sequence 0's output of ``call(x [B, ...])`` ignores the other
    sequences (scaled by 3 and shifted by 1), and (``alone``) a batch of one gives it
    too.

    Examples::

        >>> x = torch.randn(3, 4, 2)
        >>> batch_independent(lambda t: t * 2, x)
        True
        >>> batch_independent(lambda t: t - t.mean(0), x)  # statistics over the batch
        False
    """
    changed = x.clone()
    changed[1:] = changed[1:] * 3.0 + 1.0
    base, other = call(x.clone()), call(changed)
    one = call(x[:1].clone()) if alone else base
    return torch.allclose(other[0], base[0], atol=atol) and torch.allclose(
        one[0], base[0], atol=atol
    )


def tokens_mix(call: Callable, x, atol=1e-5) -> bool:
    """Whether changing the last position of ``x`` [B, S, ...] (shifted by 1) changes
    the output at some other position: the positions exchange information.

    Examples::

        >>> x = torch.randn(2, 4, 3)
        >>> tokens_mix(lambda t: t + t.mean(1, keepdim=True), x)
        True
        >>> tokens_mix(lambda t: t * 2, x)  # a planted mistake: each token alone
        False
    """
    changed = x.clone()
    changed[:, -1] = changed[:, -1] + 1.0
    base, out = call(x.clone()), call(changed)
    return not torch.allclose(out[:, :-1], base[:, :-1], atol=atol)


def others_unseen(call: Callable, x, atol=1e-5) -> bool:
    """Whether reversing the positions of the other sequences of ``x`` [B, S, ...]
    leaves sequence 0's output unchanged: it reads no token of theirs (statistics over
    the batch and the positions do not change under that reordering).

    Examples::

        >>> x = torch.randn(3, 4, 2)
        >>> others_unseen(lambda t: t - t.mean((0, 1)), x)  # statistics only
        True
        >>> others_unseen(lambda t: t + t[:, :1].sum(0), x)  # token 0 of every row
        False
    """
    reordered = x.clone()
    reordered[1:] = reordered[1:].flip(1)
    return torch.allclose(call(reordered)[0], call(x.clone())[0], atol=atol)


def future_moves_past(call: Callable, x, start: int):
    """Whether changing positions ``start``.. of ``x`` [B, S, ...] moves the outputs
    before ``start``: None when not (causal), else (the positions that moved, the
    largest change).

    Examples::

        >>> x = torch.randn(2, 6, 3)
        >>> future_moves_past(lambda t: t.cumsum(1), x, 3) is None  # causal
        True
        >>> future_moves_past(lambda t: t + t.mean(1, keepdim=True), x, 3)[0]
        [0, 1, 2]
    """
    future = x.clone()
    future[:, start:] = future[:, start:] * 2.0 + 1.0
    base = call(x.clone())
    changed = (call(future)[:, :start] - base[:, :start]).abs()
    if changed.max() <= 1e-5:
        return None
    moved = [i for i in range(start) if changed[:, i].max() > 1e-5]
    return moved, changed.max().item()


def padding_change(call: Callable, x, pad, atol=1e-5, aligned=True) -> float:
    """How far appending the masked positions ``pad`` [B, P, D] to ``x`` [B, S, D]
    moves the outputs: 0.0 when not beyond ``atol``, else the largest change.
    ``call(x, keep-mask [B, 1, 1, S])``, True = a real position; ``aligned``: the
    output has a row per position of ``x`` (the real rows are compared), else it is
    compared whole (``x`` is a memory the output reads).

    Examples::

        >>> memory, queries = torch.randn(2, 4, 3), torch.randn(2, 5, 3)
        >>> def cross(m, mask):  # a planted mistake: the mask is never applied
        ...     return (queries @ m.transpose(1, 2)).softmax(-1) @ m
        >>> padding_change(cross, memory, torch.ones(2, 2, 3), aligned=False) > 0
        True
    """
    b, s, _ = x.shape
    p = pad.size(1)
    padded = torch.cat([x, pad], dim=1)
    mask = torch.tensor([[True] * s + [False] * p], device=x.device)[:, None, None, :]
    short = call(x, torch.ones(b, 1, 1, s, dtype=torch.bool, device=x.device))
    long = call(padded, mask.expand(b, 1, 1, s + p))
    if aligned:
        long = long[:, :s]
    if torch.allclose(long, short, atol=atol):
        return 0.0
    return (long - short).abs().max().item()


def padding_invisible(call: Callable, x, pad, atol=1e-5) -> bool:
    """Whether appending the masked positions ``pad`` [B, P, D] to ``x`` [B, S, D]
    leaves the real positions' outputs unchanged (:func:`padding_change`).

    Examples::

        >>> def pool(x, mask):  # a planted mistake: the mean ignores the mask
        ...     return x + x.mean(1, keepdim=True)
        >>> padding_invisible(pool, torch.randn(2, 4, 3), torch.randn(2, 3, 3))
        False
        >>> padding_invisible(lambda x, mask: x * 2, torch.randn(2, 4, 3),
        ...                   torch.randn(2, 3, 3))
        True
    """
    return padding_change(call, x, pad, atol) == 0.0


def training_changes(module: torch.nn.Module, call: Callable) -> str | None:
    """What ``call()`` (``module`` on fixed inputs) changes in training mode: None when
    its output there is eval mode's, or random (two calls differ: a dropout, which
    training mode may have); else a sentence with the shape or the difference. The
    module is left in eval mode.

    Examples::

        >>> class Halved(torch.nn.Linear):  # a planted mistake: a scale while training
        ...     def forward(self, x):
        ...         return super().forward(x) * (0.5 if self.training else 1.0)
        >>> x = torch.randn(2, 3)
        >>> halved = Halved(3, 3)
        >>> training_changes(halved, lambda: halved(x))[:46]
        'In training mode it returns another output, th'
        >>> dropped = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Dropout(0.5))
        >>> training_changes(dropped, lambda: dropped(torch.randn(50, 3))) is None
        True
    """
    module.eval()
    want = call()
    module.train()
    try:
        first, second = call(), call()
    finally:
        module.eval()
    if not all(isinstance(t, torch.Tensor) for t in (want, first, second)):
        return None  # what the learner returned is the comparison's to judge
    if first.shape != want.shape:
        return (
            f"In training mode it returns shape {list(first.shape)}, in eval mode "
            f"{list(want.shape)}."
        )
    if not torch.equal(first, second) or torch.allclose(first, want, atol=1e-6):
        return None
    gap = (first - want).abs().max().item()
    return (
        "In training mode it returns another output, the same on every call (largest "
        f"difference from eval mode {gap:.3g}): not a dropout, which differs from call "
        "to call, so something else depends on self.training."
    )


seal(__name__)
