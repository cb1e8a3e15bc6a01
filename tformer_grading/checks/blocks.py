"""Shared machinery for the block checks of chapters 4 and 5.

A learner's block is built by the check, then its parts are found by type:
the attention sublayers are ``tformer_ref.attention.MultiHeadAttention``
modules (the exercises give that class), the norms are ``nn.LayerNorm``
modules, and the feed-forward is the pair of ``nn.Linear`` layers outside the
attention with weights [F, D] and [D, F]. The check then recomputes the block
*from the learner's own parts*, wired the right way, and compares. Which norm
serves which sublayer is not a matter of names or registration order: every
assignment is tried, and the block is right when one of them reproduces it.
A wrong wiring is named by recomputing the known wrong wirings the same way.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from tformer_ref.attention import MultiHeadAttention
from .diagnosis import (Case, Pitfall, Section, describe_difference, fail, passed, run, same,
                        single_thread)


@dataclass
class Parts:
    """The learner's sublayer modules, in registration order."""

    attns: list
    norms: list
    ff1: nn.Linear
    ff2: nn.Linear

    def ff(self, x: torch.Tensor, inner_dropped: bool = False) -> torch.Tensor:
        """The feed-forward from the learner's two Linear layers, [..., D] -> [..., D]."""
        if inner_dropped:  # its hidden layer dropped with p = 1: only the output bias is left
            return self.ff2.bias.expand_as(x) if self.ff2.bias is not None else torch.zeros_like(x)
        return F.linear(F.relu(F.linear(x, self.ff1.weight, self.ff1.bias)), self.ff2.weight, self.ff2.bias)


def batchnorm_pitfall(section: Section) -> str:
    return ("this looks like the pitfall 'BatchNorm instead of LayerNorm'. BatchNorm normalises each feature "
            "with statistics taken across the batch (and the positions): padding tokens pollute them, a batch "
            "of one sentence at decoding time has no statistics to speak of, and eval mode switches to running "
            "averages that the training batches never matched. LayerNorm normalises each token's own D "
            "features: use nn.LayerNorm(d_model).")


def find_parts(title: str, module: nn.Module, d_model: int, d_ff: int | None, n_attn: int, n_norms: int,
               norm_section: Section, attn_section: Section) -> Parts:
    """Find the learner's parts by type and shape, or fail saying what is missing.
    ``d_ff=None``: read it from the feed-forward's first Linear."""
    __tracebackhide__ = True
    for name, sub in module.named_modules():
        if isinstance(sub, nn.modules.batchnorm._BatchNorm):
            fail(title, batchnorm_pitfall(norm_section) + f" (found {type(sub).__name__} at '{name}')", norm_section)
    attn_named = [(n, m) for n, m in module.named_modules() if isinstance(m, MultiHeadAttention)]
    if len(attn_named) != n_attn:
        kinds = sorted({type(m).__name__ for _, m in module.named_modules() if "ttention" in type(m).__name__})
        fail(title, f"expected {n_attn} attention sublayer(s) built from tformer_ref.attention.MultiHeadAttention "
                    f"(the class the exercise imports), found {len(attn_named)}"
                    + (f" (other attention modules: {', '.join(kinds)})" if kinds else "")
                    + ". Each attention sublayer needs its own MultiHeadAttention instance.", attn_section)
    norms = [m for _, m in module.named_modules() if isinstance(m, nn.LayerNorm)]
    if len(norms) != n_norms:
        fail(title, f"expected {n_norms} nn.LayerNorm(d_model) modules, one per sublayer (each with its own "
                    f"weights), found {len(norms)}.", norm_section)
    inside = tuple(n + "." for n, _ in attn_named)
    linears = [(n, m) for n, m in module.named_modules()
               if isinstance(m, nn.Linear) and not n.startswith(inside)]
    if d_ff is None:
        widths = {m.out_features for _, m in linears if m.in_features == d_model and m.out_features != d_model}
        d_ff = widths.pop() if len(widths) == 1 else -1
    first = [m for _, m in linears if tuple(m.weight.shape) == (d_ff, d_model)]
    second = [m for _, m in linears if tuple(m.weight.shape) == (d_model, d_ff)]
    if len(first) != 1 or len(second) != 1:
        listing = ", ".join(f"{n} {list(m.weight.shape)}" for n, m in linears) or "none"
        fail(title, f"cannot find the feed-forward: expected one nn.Linear(d_model={d_model}, d_ff={d_ff}) and one "
                    f"nn.Linear(d_ff, d_model) besides the attention. Found Linear layers: {listing}.")
    return Parts([m for _, m in attn_named], norms, first[0], second[0])


def randomise_norms(parts: Parts, seed: int) -> None:
    """LayerNorms start as the identity affine map, which would hide which norm sits where."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for norm in parts.norms:
            w = torch.rand(norm.weight.shape, generator=g) + 0.5
            b = torch.randn(norm.bias.shape, generator=g) * 0.3
            norm.weight.copy_(w.to(norm.weight))
            norm.bias.copy_(b.to(norm.bias))


def sublayer(style: str, x: torch.Tensor, f: Callable, norm: Callable, drop: Callable) -> torch.Tensor:
    """One residual sublayer, wired as ``style`` says. ``drop`` is the dropout on the sublayer output."""
    if style == "post":  # the paper: LayerNorm(x + Dropout(Sublayer(x)))
        return norm(x + drop(f(x)))
    if style == "pre":  # Pre-LN: x + Dropout(Sublayer(LayerNorm(x)))
        return x + drop(f(norm(x)))
    if style == "post_no_residual":
        return norm(drop(f(x)))
    if style == "pre_no_residual":
        return drop(f(norm(x)))
    if style == "norm_on_sublayer":  # x + LayerNorm(Sublayer(x))
        return x + norm(drop(f(x)))
    if style == "normed_stream":  # the residual stream itself replaced by its norm
        h = norm(x)
        return h + drop(f(h))
    if style == "dropout_after_norm":  # the seed's Dropout(LayerNorm(x + Sublayer(x)))
        return drop(norm(x + f(x)))
    if style == "dropout_on_sum":
        return norm(drop(x + f(x)))
    if style == "post_no_dropout":
        return norm(x + f(x))
    if style == "pre_no_dropout":
        return x + f(norm(x))
    if style == "pre_dropout_after_norm":  # the seed's habit carried into Pre-LN: the sublayer's input dropped
        return x + f(drop(norm(x)))
    if style == "pre_dropout_on_sum":
        return drop(x + f(norm(x)))
    raise ValueError(f"unknown sublayer style {style!r}")


def _matches_all(theirs, cases, fn, role, agree) -> bool:
    """Whether ``fn(role, *case)`` agrees with the learner on every case; stops at the first disagreement."""
    for got, case in zip(theirs, cases):
        if not agree(got, run(fn, (role, *case.make()))):
            return False
    return True


def compare_with_roles(title: str, cases: Sequence[Case], learner: Callable, reference: Callable,
                       pitfalls: Sequence[Pitfall], roles: Sequence[Any], atol: float = 1e-5,
                       rtol: float = 1e-4, announce: bool = True) -> None:
    """Like ``compare_to_reference``, with ``reference(role, *args)`` and each pitfall's
    ``impl(role, *args)`` tried under every assignment ``role`` of the learner's parts."""
    __tracebackhide__ = True
    with single_thread():
        theirs = [run(learner, case.make()) for case in cases]
        first_ours = [run(reference, (roles[0], *case.make())) for case in cases]
        for case, want in zip(cases, first_ours):
            if not isinstance(want, torch.Tensor):
                raise RuntimeError(f"reference failed on case {case.label}: {want!r}")
        right = lambda got, want: describe_difference(got, want, atol, rtol) is None  # noqa: E731
        if all(right(g, w) for g, w in zip(theirs, first_ours)) or any(
                _matches_all(theirs, cases, reference, role, right) for role in roles[1:]):
            if announce:
                passed(title, f"matches the reference on {len(cases)} cases")
            return
        agree = lambda got, want: same(got, want, atol, rtol)  # noqa: E731
        for pitfall in pitfalls:
            if any(_matches_all(theirs, cases, pitfall.impl, role, agree) for role in roles):
                fail(title, f"this looks like the pitfall '{pitfall.name}'. {pitfall.explanation}", pitfall.section)
    problems = [(c, m) for c, g, w in zip(cases, theirs, first_ours)
                if (m := describe_difference(g, w, atol, rtol)) is not None]
    case, msg = problems[0]
    fail(title, f"wrong on {len(problems)} of {len(cases)} cases. First: case {case.label}: {msg}. "
                "It matches none of the known pitfalls; compare your block with the lesson step by step.")


def norm_orders(n: int) -> list:
    return list(itertools.permutations(range(n)))


FORBIDDEN_BLOCKS = (nn.TransformerEncoderLayer, nn.TransformerDecoderLayer, nn.TransformerEncoder,
                    nn.TransformerDecoder, nn.Transformer)


def check_block_not_delegated(title: str, module: nn.Module) -> None:
    """Hidden test: the block is the learner's wiring, not PyTorch's layer or the reference's block."""
    __tracebackhide__ = True
    for name, sub in module.named_modules():
        kind = type(sub)
        if isinstance(sub, FORBIDDEN_BLOCKS) or kind.__module__ in ("tformer_ref.blocks", "tformer_ref.model"):
            fail(title, f"your module contains {kind.__module__}.{kind.__name__} (at '{name or 'self'}'): "
                        "the exercise is to wire the block yourself, not to wrap PyTorch's or the reference's.")
    passed(title, "wired by hand, no built-in or reference block inside")
