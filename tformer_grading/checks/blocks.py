"""Shared machinery for the block checks of chapters 4 and 5.

A learner's block is built by the check, then its parts are found by type:
the attention sublayers are ``tformer_ref.attention.MultiHeadAttention``
modules (the exercises give that class), the norms are ``nn.LayerNorm``
modules (a norm written by hand is recognised by its outputs and replaced by the
``nn.LayerNorm`` it stands for, :func:`adopt_hand_written_norms`), and the feed-forward
is the pair of ``nn.Linear`` layers outside the attention with weights [F, D] and
[D, F]. The check then recomputes the block *from the learner's own parts*, wired the
right way, and compares. Which norm serves which sublayer (and, in the decoder, which
attention is which) is not a matter of names or registration order: every assignment, a
*role*, is tried, and the block is right when one of them reproduces it. A wrong wiring
is named by recomputing the known wrong wirings the same way.

A *wiring* wraps one sublayer: ``wiring(x, sublayer, norm, drop) -> new x``,
``drop`` being the dropout on the sublayer's output. The right ones are
:func:`post_ln` and :func:`pre_ln`; each chapter writes its wrong ones next to
the ``Pitfall`` they reproduce.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tformer_ref.attention import MultiHeadAttention

from ..guard.integrity import seal
from . import flow
from .cases import build_module
from .delegation import fail_if_raised, reject_wrapped
from .diagnosis import (
    Case,
    Diagnosis,
    Pitfall,
    Section,
    fail,
    fail_unexplained,
    passed,
    quiet,
    run,
    single_thread,
)

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True

# -------------------------------------------------------------------- the right wirings


def keep(t: Tensor) -> Tensor:
    """Dropout in eval mode: the identity."""
    return t


def post_ln(x: Tensor, sublayer: Callable, norm: Callable, drop: Callable) -> Tensor:
    """The paper's Post-LN: LayerNorm(x + Dropout(Sublayer(x)))."""
    return norm(x + drop(sublayer(x)))


def pre_ln(x: Tensor, sublayer: Callable, norm: Callable, drop: Callable) -> Tensor:
    """Pre-LN: x + Dropout(Sublayer(LayerNorm(x)))."""
    return x + drop(sublayer(norm(x)))


# ------------------------------------------------------------------ the learner's parts


@dataclass(frozen=True)
class Parts:
    """The learner's sublayer modules: attentions and norms in the order a role assigns
    them (registration order until :meth:`in_role` reorders them)."""

    attns: tuple
    norms: tuple
    ff1: nn.Linear
    ff2: nn.Linear

    def ff(self, x: Tensor) -> Tensor:
        """The feed-forward from the learner's Linear layers, [..., D] -> [..., D]."""
        hidden = F.relu(F.linear(x, self.ff1.weight, self.ff1.bias))
        return F.linear(hidden, self.ff2.weight, self.ff2.bias)

    def in_role(
        self, norm_order: Sequence[int], attn_order: Sequence[int] | None = None
    ) -> Parts:
        """The same parts with norm ``norm_order[i]`` serving sublayer i (and attention
        ``attn_order[j]`` playing attention j)."""
        attns = self.attns
        if attn_order is not None:
            attns = tuple(self.attns[i] for i in attn_order)
        norms = tuple(self.norms[i] for i in norm_order)
        return Parts(attns, norms, self.ff1, self.ff2)


def reject_batchnorm(title: str, module: nn.Module, batchnorm: Diagnosis) -> None:
    """Fail naming ``batchnorm`` when the block holds a BatchNorm module."""
    for name, sub in module.named_modules():
        if isinstance(sub, nn.modules.batchnorm._BatchNorm):
            batchnorm.fail(title, f"Your block has {type(sub).__name__} at '{name}'.")


def attention_sublayers(
    title: str, module: nn.Module, n_attn: int, section: Section
) -> list:
    """[(name, module)] of the learner's ``n_attn`` MultiHeadAttention sublayers."""
    found = [
        (n, m) for n, m in module.named_modules() if isinstance(m, MultiHeadAttention)
    ]
    if len(found) != n_attn:
        kinds = sorted(
            {
                type(m).__name__
                for m in module.modules()
                if "ttention" in type(m).__name__
            }
        )
        others = f" (other attention modules: {', '.join(kinds)})" if kinds else ""
        fail(
            title,
            f"expected {n_attn} attention sublayer(s) built from "
            "tformer_ref.attention.MultiHeadAttention (the class the "
            f"exercise imports), found {len(found)}{others}. Each attention "
            "sublayer needs its own MultiHeadAttention instance.",
            section,
        )
    return found


def _layer_norms(
    title: str, module: nn.Module, n_norms: int, section: Section
) -> tuple:
    norms = tuple(m for m in module.modules() if isinstance(m, nn.LayerNorm))
    if len(norms) != n_norms:
        fail(
            title,
            f"expected {n_norms} nn.LayerNorm(d_model) modules, one per "
            f"sublayer (each with its own weights), found {len(norms)}.",
            section,
        )
    return norms


def feed_forward_linears(
    title: str, module: nn.Module, d_model: int, d_ff: int | None, attns: list
) -> tuple:
    """The feed-forward's (first, second) Linear, found by shape outside the attentions;
    ``d_ff=None``: read it from the first one."""
    inside = tuple(n + "." for n, _ in attns)
    linears = [
        (n, m)
        for n, m in module.named_modules()
        if isinstance(m, nn.Linear) and not n.startswith(inside)
    ]
    if d_ff is None:
        widths = {
            m.out_features
            for _, m in linears
            if m.in_features == d_model and m.out_features != d_model
        }
        d_ff = widths.pop() if len(widths) == 1 else -1
    first = [m for _, m in linears if tuple(m.weight.shape) == (d_ff, d_model)]
    second = [m for _, m in linears if tuple(m.weight.shape) == (d_model, d_ff)]
    if len(first) != 1 or len(second) != 1:
        listing = ", ".join(f"{n} {list(m.weight.shape)}" for n, m in linears) or "none"
        fail(
            title,
            "cannot find the feed-forward: expected one "
            f"nn.Linear(d_model={d_model}, d_ff={d_ff}) and one "
            "nn.Linear(d_ff, d_model) besides the attention. Found Linear "
            f"layers: {listing}.",
        )
    return first[0], second[0]


def find_parts(
    title: str,
    module: nn.Module,
    d_model: int,
    d_ff: int | None,
    n_attn: int,
    n_norms: int,
    batchnorm: Diagnosis,
    attn_section: Section,
) -> Parts:
    """Find the learner's parts by type and shape, or fail saying what is missing:
    BatchNorm is named as ``batchnorm``, a wrong count of norms points to its section.
    ``d_ff=None``: read it from the feed-forward's first Linear."""
    reject_batchnorm(title, module, batchnorm)
    attns = attention_sublayers(title, module, n_attn, attn_section)
    norms = _layer_norms(title, module, n_norms, batchnorm.section)
    ff1, ff2 = feed_forward_linears(title, module, d_model, d_ff, attns)
    return Parts(tuple(m for _, m in attns), norms, ff1, ff2)


def randomise_norms(parts: Parts, seed: int) -> None:
    """LayerNorms start as the identity affine map, which would hide which norm sits
    where."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for norm in parts.norms:
            w = torch.rand(norm.weight.shape, generator=g) + 0.5
            b = torch.randn(norm.bias.shape, generator=g) * 0.3
            norm.weight.copy_(w.to(norm.weight))
            norm.bias.copy_(b.to(norm.bias))


def norm_orders(n: int) -> list:
    """Every assignment of ``n`` norms to ``n`` sublayers."""
    return list(itertools.permutations(range(n)))


# ------------------------------------------------------------ norms written by hand
# A LayerNorm written by hand (the Annotated Transformer's, with its unbiased std and
# eps = 1e-6 outside the square root) normalises each token as nn.LayerNorm does, to
# within a few per cent of scale. The checks judge what a module does: such a norm is
# recognised by its behaviour, then graded as the nn.LayerNorm it stands for.

#: How far a hand-written norm's per-token scale may sit from nn.LayerNorm's: the
#: unbiased std differs by sqrt(D / (D - 1)), 4.4 % at the checks' smallest D = 12.
HAND_NORM_SCALE = (0.85, 1.15)


def _normalises_each_token(norm: nn.Module, gain: Tensor, bias: Tensor) -> bool:
    """Whether ``norm(x)`` is ``gain * c * LayerNorm(x) + bias`` for one scale ``c``
    near 1, on tokens of varied mean and spread (its gain and bias set to random values
    for the probe, then restored)."""
    d = gain.numel()
    g = torch.Generator().manual_seed(5)
    # Spreads of 0.5 to 3.5: eps, whether 1e-5 inside the root or 1e-6 outside, is
    # then far below every token's variance and moves no scale.
    x = torch.randn(3, 4, d, generator=g) * (torch.rand(3, 4, 1, generator=g) * 3 + 0.5)
    x = (x + torch.randn(3, 4, 1, generator=g)).to(gain)
    saved = gain.detach().clone(), bias.detach().clone()
    try:
        with torch.no_grad(), quiet():
            gain.copy_((torch.rand(d, generator=g) + 0.5).to(gain))
            bias.copy_((torch.randn(d, generator=g) * 0.3).to(bias))
            y = norm(x)
            z = (y - bias) / gain
    except Exception:  # noqa: BLE001 - the learner's module may raise anything
        return False
    finally:
        with torch.no_grad():
            gain.copy_(saved[0])
            bias.copy_(saved[1])
    if not isinstance(y, Tensor) or y.shape != x.shape:
        return False
    unit = F.layer_norm(x, (d,), eps=1e-12)
    scale = (z * unit).sum(-1) / (unit * unit).sum(-1)
    rest = (z - scale[..., None] * unit).abs().max()
    low, high = HAND_NORM_SCALE
    return bool(
        torch.isfinite(z).all()
        and rest <= 1e-3 * (1 + z.abs().max())
        and low <= scale.min()
        and scale.max() <= high
        and scale.max() - scale.min() <= 0.01
    )


def adopt_hand_written_norms(module: nn.Module) -> nn.Module:
    """Replace each norm the learner wrote by hand with an ``nn.LayerNorm`` on the same
    gain and bias (the same parameters), so that the checks see it as one.

    A hand-written norm is a leaf module, not an ``nn.LayerNorm``, with exactly two
    parameters of the same [D] shape, one a gain and one a bias, that normalises each
    token (:func:`_normalises_each_token`). Anything else is left as it is, and the
    checks judge it as before. Returns ``module``.
    """
    for name, norm in list(module.named_modules()):
        params = list(norm.parameters(recurse=False))
        if (
            not name
            or isinstance(norm, (nn.LayerNorm, nn.Linear, nn.Embedding))
            or any(True for _ in norm.children())
            or len(params) != 2
            or params[0].dim() != 1
            or params[0].shape != params[1].shape
        ):
            continue
        for gain, bias in (params, params[::-1]):
            if _normalises_each_token(norm, gain, bias):
                layer_norm = nn.LayerNorm(gain.numel(), device=gain.device)
                layer_norm.weight, layer_norm.bias = gain, bias
                parent, _, attr = name.rpartition(".")
                setattr(module.get_submodule(parent), attr, layer_norm)
                break
    return module


def build_block(
    title: str,
    cls: type,
    args: Sequence,
    dtype: torch.dtype = torch.float32,
    seed: int | None = None,
) -> nn.Module:
    """:func:`~tformer_grading.checks.cases.build_module` for a block: its norms written
    by hand are seen as the ``nn.LayerNorm`` they stand for."""
    return adopt_hand_written_norms(build_module(title, cls, args, dtype, seed))


# --------------------------------------------------------------------------- comparing


def _in_role(role: Any) -> Callable[[Callable], Callable]:
    """The ``adapt`` that calls ``fn(role, *args)``."""
    return lambda fn: functools.partial(fn, role)


def compare_with_roles(
    title: str,
    cases: Sequence[Case],
    learner: Callable,
    reference: Callable,
    pitfalls: Sequence[Pitfall],
    roles: Sequence[Any],
    atol: float = 1e-5,
    rtol: float = 1e-4,
    announce: bool = True,
    explain: Callable[[], None] | None = None,
) -> None:
    """Like ``compare_to_reference``, with ``reference(role, *args)`` and each pitfall's
    ``impl(role, *args)`` tried under every assignment ``role`` of the learner's
    parts. ``explain()``, when given, runs when no pitfall reproduces the learner's
    outputs: it may fail naming what it measured; when it returns, the generic
    failure follows."""
    with single_thread():
        theirs = [done.result for done in flow.run_cases(learner, cases)]
        ours = [run(reference, (roles[0], *case.make())) for case in cases]
        for case, want in zip(cases, ours):
            if not isinstance(want, torch.Tensor):
                raise RuntimeError(  # noqa: TRY004 - the course's bug, not a type
                    f"reference failed on case {case.label}: {want!r}"
                )

        def under(role):  # the reference's outputs under another assignment
            return [d.result for d in flow.run_cases(_in_role(role)(reference), cases)]

        if flow.matches(theirs, ours, atol, rtol) or any(
            flow.matches(theirs, under(r), atol, rtol) for r in roles[1:]
        ):
            if announce:
                passed(title, f"matches the reference on {len(cases)} cases")
            return
        for pitfall in pitfalls:
            if any(
                flow.listed_pitfall(
                    [pitfall], cases, theirs, atol, rtol, _in_role(r), stop_early=True
                )
                for r in roles
            ):
                pitfall.fail(title)
        if explain is not None:
            explain()
    fail_unexplained(title, cases, theirs, ours, atol, rtol)


# --------------------------------------------------------------------------- by hand

FORBIDDEN_BLOCKS = (
    nn.TransformerEncoderLayer,
    nn.TransformerDecoderLayer,
    nn.TransformerEncoder,
    nn.TransformerDecoder,
    nn.Transformer,
)
FORBIDDEN_MODULES = ("tformer_ref.blocks", "tformer_ref.model")


def check_block_not_delegated(title: str, module: nn.Module, *inputs) -> None:
    """Hidden test: the block is the learner's wiring, not PyTorch's layer or the
    reference's block (the reference's MultiHeadAttention inside it is allowed), and it
    runs on ``inputs`` (a block that raises shows no wiring at all)."""
    reject_wrapped(title, module, FORBIDDEN_BLOCKS, FORBIDDEN_MODULES)
    fail_if_raised(title, run(module, inputs))
    passed(title, "wired by hand, no built-in or reference block inside")


seal(__name__)
