"""Checks for exercise ``multi_head_attention`` of chapter 1 (book/ch01_shapes):
``MultiHeadAttention(d_model, n_heads)``, ``forward(query [B, Sq, D], key, value
[B, Sk, D], mask=None) -> [B, Sq, D]``, H heads of scaled dot-product attention
between its own projections.

When no listed pitfall reproduces the outputs, the check *measures* what is off (which
input each projection is applied to, the number the scores were divided by, the axis
the softmax normalised, the head layout), and only when no stage can be isolated does
it say where the outputs differ. Holds the behaviour probes and the hidden "written by
hand" check too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from tformer_ref.device import get_device
from tformer_ref.heads import merge_heads, split_heads

from ...guard.integrity import seal
from ..cases import build_module, randn
from ..delegation import check_not_delegated
from ..diagnosis import (
    UNEXPLAINED,
    Case,
    Diagnosis,
    Pitfall,
    Raised,
    describe_difference,
    fail,
    passed,
    probe_batch_independence,
    probe_eval_determinism,
    probe_token_mixing,
    run,
    single_thread,
)
from .merge_heads import (
    MERGE_DH_MAJOR,
    MERGE_NO_TRANSPOSE,
    merge_dh_major,
    merge_no_transpose,
)
from .sections import S_EINSUM, S_MERGE, S_PROJ, S_SCALE, S_SPLIT
from .split_heads import SPLIT_VIEW_STRAIGHT, split_interleaved, split_view_straight
from .stages import (
    WRONG_FORM,
    Run,
    changed,
    form_stage,
    raised_stage,
    snapshot,
    staged,
)

# ---------------------------------------------------------------- multi-head attention
# Functional multi-head attention from the weights a case hands in,
# w = {"q": (weight, bias), "k": ..., "v": ..., "o": ...}: the same numbers are loaded
# into the learner's module (see "finding the projections" below).


def _project(w, xq, xk, xv):
    """The query, key and value projections [B, S, D], before the split into heads."""
    return F.linear(xq, *w["q"]), F.linear(xk, *w["k"]), F.linear(xv, *w["v"])


def _attend(q, k, v):
    """softmax(q kᵀ / √Dh) v on heads [B, H, S, Dh]."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    return scores.softmax(dim=-1) @ v


def _mha_reference(w, h, xq, xk, xv):
    q, k, v = (split_heads(t, h) for t in _project(w, xq, xk, xv))
    return F.linear(merge_heads(_attend(q, k, v)), *w["o"])


def _mha_scaled_by_sqrt_d_model(w, h, xq, xk, xv):
    q, k, v = (split_heads(t, h) for t in _project(w, xq, xk, xv))
    scores = q @ k.transpose(-2, -1) / math.sqrt(xq.size(-1))
    return F.linear(merge_heads(scores.softmax(dim=-1) @ v), *w["o"])


def _mha_unscaled(w, h, xq, xk, xv):
    q, k, v = (split_heads(t, h) for t in _project(w, xq, xk, xv))
    scores = q @ k.transpose(-2, -1)
    return F.linear(merge_heads(scores.softmax(dim=-1) @ v), *w["o"])


def _mha_softmax_over_queries(w, h, xq, xk, xv):
    q, k, v = (split_heads(t, h) for t in _project(w, xq, xk, xv))
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    return F.linear(merge_heads(scores.softmax(dim=-2) @ v), *w["o"])


def seed_heads(t, h):
    """The seed's heads: [B, S, D] viewed as [B, S, H, Dh], the head axis not moved."""
    b, s, d = t.shape
    return t.reshape(b, s, h, d // h)


def _mha_seed_einsum(w, h, xq, xk, xv):
    """The seed's einsum 'bhqd,bhkd->bhqk' applied to [B, S, H, Dh] tensors."""
    q, k, v = (seed_heads(t, h) for t in _project(w, xq, xk, xv))
    energy = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(q.size(-1))
    out = torch.einsum("bhql,bhlv->bhqv", energy.softmax(dim=3), v)
    return F.linear(out.flatten(2), *w["o"])


def _mha_seed_code(w, h, xq, xk, xv):
    """The seed's SelfAttention as written: that einsum, and scores over √embed_size."""
    q, k, v = (seed_heads(t, h) for t in _project(w, xq, xk, xv))
    energy = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(xq.size(-1))
    out = torch.einsum("bhql,bhlv->bhqv", energy.softmax(dim=3), v)
    return F.linear(out.flatten(2), *w["o"])


def _mha_split_view_straight(w, h, xq, xk, xv):
    q, k, v = (split_view_straight(t, h) for t in _project(w, xq, xk, xv))
    return F.linear(merge_heads(_attend(q, k, v)), *w["o"])


def _mha_merged_without_transpose(w, h, xq, xk, xv):
    q, k, v = (split_heads(t, h) for t in _project(w, xq, xk, xv))
    return F.linear(merge_no_transpose(_attend(q, k, v)), *w["o"])


def _mha_merged_dh_major(w, h, xq, xk, xv):
    q, k, v = (split_heads(t, h) for t in _project(w, xq, xk, xv))
    return F.linear(merge_dh_major(_attend(q, k, v)), *w["o"])


MHA_PITFALLS = (
    Pitfall(
        "scaled by sqrt(d_model)",
        "Your scores are divided by √d_model, not √d_head. The variance of q·k "
        "grows with the length of the vectors being dotted, which is Dh per head; "
        "dividing by √D makes the logits √H times too small.",
        S_SCALE,
        _mha_scaled_by_sqrt_d_model,
    ),
    Pitfall(
        "no scaling",
        "Your scores are not divided by √d_head at all. Unscaled logits grow like "
        "√Dh and push softmax into saturation: most rows get almost no gradient, a "
        "few near-ties far larger ones.",
        S_SCALE,
        _mha_unscaled,
    ),
    Pitfall(
        "softmax over the query axis",
        "Your softmax normalises over the queries (dim=-2). Each query's weights "
        "over the keys must sum to 1, so softmax over the last axis (dim=-1).",
        S_EINSUM,
        _mha_softmax_over_queries,
    ),
    Pitfall(
        "einsum over the wrong axes (the seed's bug)",
        "Your einsum treats the sequence axis as heads: on [B, S, H, Dh] tensors "
        "'bhqd,bhkd->bhqk' attends across the heads of one token, so tokens never "
        "mix (and cross-attention with Sq != Sk fails). Transpose to [B, H, S, Dh] "
        "first, or label the axes 'bqhd,bkhd->bhqk'.",
        S_EINSUM,
        _mha_seed_einsum,
    ),
    Pitfall(
        "einsum over the wrong axes and scaled by sqrt(d_model) (the seed's code)",
        "This is the seed's SelfAttention: its einsum attends across the heads of "
        "one token instead of across tokens, and it divides by √embed_size instead "
        "of √head_dim.",
        S_EINSUM,
        _mha_seed_code,
    ),
    Pitfall(
        SPLIT_VIEW_STRAIGHT.name,
        "Your heads are split by viewing [B, S, D] straight as [B, H, S, Dh], "
        "which mixes tokens into heads.",
        S_SPLIT,
        _mha_split_view_straight,
    ),
    Pitfall(
        MERGE_NO_TRANSPOSE.name,
        "Your heads are merged by reshaping [B, H, S, Dh] straight to [B, S, D], "
        "which glues different tokens.",
        S_MERGE,
        _mha_merged_without_transpose,
    ),
    Pitfall(
        MERGE_DH_MAJOR.name,
        "Your merge interleaves the heads' features (Dh axis before the head axis).",
        S_MERGE,
        _mha_merged_dh_major,
    ),
)


# ------------------------------------------------------------- finding the projections
# Learners name, order, fuse and bias their projections as they like, so the check finds
# them by what they do. It runs the module once (float64) on distinct query [1, 2, D],
# key and value [1, 3, D], feature 0 of each set to 1, and takes the gradient of
# sum(out * R). A weight row applied to `key` gets a gradient that is a combination of
# key's token vectors, the output projection one whose columns are combinations of R's:
# that says, row by row, which input each weight consumes, whatever its name,
# registration order, fused layout ([q; k; v] or per head) or orientation (x @ W).
# Feature 0 = 1 makes a bias's gradient equal its row's gradient at feature 0, which
# pairs every bias with its row.

# Recognised by the parameter shapes: such a module has no [D, D] projections to load
# the cases' weights into, so its outputs cannot be compared.
SHARED_HEAD_LINEAR = Diagnosis(
    "one Linear shared by all heads",
    "Each head must have its own projection of the whole D-dimensional input: use "
    "Linear(d_model, d_model), which is H separate D→Dh projections side by side.",
    S_PROJ,
)
INPUT_NOT_PROJECTED = Diagnosis(
    "an input is never projected",
    "forward(query, key, value) projects each of its three inputs with its own "
    "weights: Q from query, K from key, V from value. In cross-attention they are "
    "different tensors, so none of them may stand in for another.",
    S_PROJ,
)
PROJECTION_SHARED = Diagnosis(
    "one projection applied to several inputs",
    "Query, key and value each need their own nn.Linear(d_model, d_model) (or their "
    "own third of one nn.Linear(d_model, 3 * d_model)).",
    S_PROJ,
)
PROJECTION_SIZE = Diagnosis(
    "projection of the wrong size",
    "Each of the query, key and value projections maps D features to D features "
    "(nn.Linear(d_model, d_model)), split into H heads afterwards.",
    S_PROJ,
)
NO_OUTPUT_PROJECTION = Diagnosis(
    "output projection missing",
    "After merging the heads, apply the output projection nn.Linear(d_model, d_model) "
    "and return its result: it mixes what the heads found.",
    S_PROJ,
)

# What each role's weights are applied to (a tuple: the integrity seal wants immutable
# module globals).
_INPUTS = (("q", "query"), ("k", "key"), ("v", "value"), ("o", "the merged heads"))


def _input_of(role: str) -> str:
    return dict(_INPUTS)[role]


@dataclass(frozen=True)
class Piece:
    """Where one projection's features live in a learner parameter. Role q, k or v:
    feature j is row ``index[j]`` of ``param`` (column, when ``transposed``: the
    module computes x @ param). Role o: ``param`` is W_o [D, D] (W_oᵀ when
    ``transposed``). ``grad0``: each feature's weight gradient at input feature 0."""

    name: str
    param: torch.Tensor
    role: str
    index: torch.Tensor
    transposed: bool
    grad0: torch.Tensor | None = None


@dataclass(frozen=True)
class BiasPiece:
    """Positions ``at`` of a learner's 1-D parameter hold the bias of ``role``'s
    ``features``; role "inert" marks positions with no effect (zeroed when loading)."""

    param: torch.Tensor
    at: torch.Tensor
    role: str
    features: torch.Tensor | None = None


@dataclass(frozen=True)
class Alignment:
    weights: tuple
    biases: tuple

    def describe(self) -> str:
        found = {}
        for p in self.weights:
            found.setdefault(p.role, []).append(p.name or "a parameter")
        return ", ".join(
            f"{role}: {' + '.join(dict.fromkeys(found[role]))}"
            for role in "qkvo"
            if role in found
        )


def _shared_head_check(module, d_model: int, n_heads: int) -> None:
    __tracebackhide__ = True
    d_head = d_model // n_heads
    named = list(module.named_parameters())
    if d_head != d_model and any(p.shape == (d_head, d_head) for _, p in named):
        total = sum(p.numel() for _, p in named)
        SHARED_HEAD_LINEAR.fail(
            "MultiHeadAttention",
            f"It is the seed's bug: your module has a [{d_head}, {d_head}] weight, "
            "i.e. a Linear(d_head, d_head) applied to every head's slice, and "
            f"{total:,} parameters; per-head projections from d_model need "
            f"4·(D²+D) = {4 * (d_model**2 + d_model):,}.",
        )


def _probe_inputs(d: int, sq: int) -> dict:
    """query [2, sq, D], key and value [2, 3, D], and R [2, sq, D]. The tokens of each
    input come from their own random plane, with feature 0 set to 1, so that the three
    spans stay apart (dimension 3 each) even for D = 12, with B and S above 1 (a
    softmax over an axis of size 1 would hide the scores)."""
    sizes = {"q": sq, "k": 3, "v": 3}
    xs = {}
    for i, (role, n) in enumerate(sizes.items()):
        plane = randn(2, d, seed=910 + i, dtype=torch.float64)
        xs[role] = randn(2, n, 2, seed=900 + i, dtype=torch.float64) @ plane
        xs[role][..., 0] = 1.0
    xs["o"] = randn(2, sq, d, seed=920, dtype=torch.float64)
    return xs


def _gradients(module, xs: dict, named: list):
    """d sum(out * R) / d param for each of ``named``; None when there is none."""
    with torch.enable_grad():
        out = module(xs["q"], xs["k"], xs["v"])
        if (
            not isinstance(out, torch.Tensor)
            or out.shape != xs["o"].shape
            or not out.requires_grad
            or not named
        ):
            return None
        return torch.autograd.grad(
            (out * xs["o"]).sum(), [p for _, p in named], allow_unused=True
        )


def _probe_gradients(module, d: int):
    """(probe inputs, [(name, param, grad)]), or a sentence saying why there is no
    gradient to read (the module raised, returned something else, detached). Tried
    with Sq = 2 != Sk = 3, then Sq = Sk = 3 (a module may fail cross-attention only,
    and the comparison should still say how)."""
    named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
    for sq in (2, 3):
        xs = _probe_inputs(d, sq)
        grads = run(_gradients, (module, xs, named))
        if not isinstance(grads, Raised):
            break
    if grads is None:
        return (
            "your module's output gives no gradient with respect to its parameters "
            "(it is not one tensor [B, Sq, D], or no_grad, detach or .data inside "
            "forward)"
        )
    if isinstance(grads, Raised):
        return (
            f"your module raised {grads!r} when the check ran it on query "
            f"[2, 3, {d}], key and value [2, 3, {d}] (key != value)"
        )
    return xs, [(n, p, g) for (n, p), g in zip(named, grads)]


def _basis(x: torch.Tensor) -> torch.Tensor:
    """An orthonormal basis [D, r] of the span of x's token vectors (r its rank: an SVD,
    since QR of a rank-deficient matrix returns spurious directions)."""
    u, sv, _ = torch.linalg.svd(x.reshape(-1, x.size(-1)).T, full_matrices=False)
    return u[:, sv > 1e-9 * sv.max()]


def _fits(vectors: torch.Tensor, basis: torch.Tensor) -> torch.Tensor:
    """Which rows of ``vectors`` [n, D] lie in the span of ``basis``."""
    residual = vectors - vectors @ basis @ basis.T
    return residual.norm(dim=1) <= 1e-6 * vectors.norm(dim=1)


def _roles(vectors: torch.Tensor, bases: dict) -> list:
    """Per row of ``vectors``: the one role whose span holds it, "unused" (zero) or
    "?"."""
    norms = vectors.norm(dim=1)
    fits = {role: _fits(vectors, b) for role, b in bases.items()}
    tiny = 1e-9 * float(norms.max())
    return [
        (
            "unused"
            if norms[i] <= tiny
            else next(iter(hits))
            if len(hits := [r for r in fits if fits[r][i]]) == 1
            else "?"
        )
        for i in range(len(vectors))
    ]


def _mixture(vectors: torch.Tensor, xs: dict) -> str | None:
    """Which inputs together explain rows that no single input does ("key and
    value")."""
    for group in ("kv", "qk", "qv", "qkv"):
        joint = _basis(torch.cat([xs[r].reshape(-1, xs[r].size(-1)) for r in group]))
        if bool(_fits(vectors, joint).all()):
            return " and ".join(_input_of(r) for r in group)
    return None


def _pieces_of(name: str, p, g, xs: dict, bases: dict):
    """The Pieces of one 2-D parameter ([] when unused), or a sentence saying what its
    gradient shows when no single input explains it."""
    d = xs["o"].size(-1)
    if g is None or not bool((g != 0).any()):
        return []
    for transposed, vectors in ((False, g), (True, g.T)):
        if vectors.size(1) != d:
            continue
        roles = _roles(vectors, bases)
        used = {r for r in roles if r != "unused"}
        if used == {"o"} and p.shape == (d, d):
            return [Piece(name, p, "o", torch.arange(d), not transposed)]
        if used and used <= {"q", "k", "v"}:
            return [
                _piece(name, p, role, roles, vectors, transposed)
                for role in "qkv"
                if role in used
            ]
    rows = g if g.size(1) == d else g.T
    mixed = _mixture(rows[rows.norm(dim=1) > 0], xs) if rows.size(1) == d else None
    return f"`{name}` {list(p.shape)} is applied to {mixed}" if mixed else None


def _piece(name: str, p, role: str, roles: list, vectors, transposed: bool) -> Piece:
    """The features of ``role`` in ``p``: the rows of ``vectors`` given that role."""
    rows = [i for i, r in enumerate(roles) if r == role]
    idx = torch.tensor(rows, device=vectors.device)
    return Piece(name, p, role, idx, transposed, vectors[idx, 0])


def _effect(name: str, g, roles: dict) -> str:
    """What the probe saw one 2-D parameter do."""
    if name in roles:
        return "applied to " + " / ".join(roles[name])
    if g is None or not bool((g != 0).any()):
        return "no effect on the output"
    return "applied to none of the inputs alone"


def _listing(found, pieces) -> str:
    """What the probe saw each parameter do, in the learner's names."""
    roles = {}
    for piece in pieces:
        roles.setdefault(piece.name, []).append(_input_of(piece.role))
    parts = [
        f"{name} {list(p.shape)}: {_effect(name, g, roles)}"
        for name, p, g in found
        if p.dim() == 2
    ]
    return "Your weights: " + "; ".join(parts) + "."


def _check_roles(title: str, found, pieces, mixed, d: int) -> None:
    """Fail, in the learner's terms, when the projections are not one D×D map per
    input and one output map."""
    __tracebackhide__ = True
    listing = _listing(found, pieces)
    if mixed:
        PROJECTION_SHARED.fail(title, f"{mixed[0]}. {listing}")
    for role in "qkv":
        if not any(p.role == role for p in pieces):
            INPUT_NOT_PROJECTED.fail(
                title,
                f"None of your weights is applied to `{_input_of(role)}`. {listing}",
            )
    for role in "qkv":
        n = sum(len(p.index) for p in pieces if p.role == role)
        if n != d:
            PROJECTION_SIZE.fail(
                title,
                f"{n} output features are computed from "
                f"`{_input_of(role)}`; expected D = {d}. "
                f"{listing}",
            )
    _check_output_role(title, found, pieces, listing)


def _check_output_role(title: str, found, pieces, listing: str) -> None:
    """Fail unless exactly one [D, D] weight is applied last, to the merged heads."""
    __tracebackhide__ = True
    outs = [p for p in pieces if p.role == "o"]
    placed = {p.name for p in pieces}
    unread = [
        n
        for n, p, g in found
        if p.dim() == 2 and n not in placed and g is not None and bool((g != 0).any())
    ]
    if not outs and unread:  # used, but not as a last linear map: say so, name nothing
        fail(
            title,
            f"the gradient of {', '.join(unread)} fits none of query, key, "
            "value, nor a linear map applied last (is something applied after "
            f"your output projection?). {listing} It {UNEXPLAINED}.",
            S_PROJ,
        )
    if not outs:
        NO_OUTPUT_PROJECTION.fail(
            title, f"No [D, D] weight acts on the merged heads. {listing}"
        )
    if len(outs) > 1:
        names = ", ".join(p.name for p in outs)
        fail(
            title,
            f"several weights act after the attention ({names}): expected one "
            f"output projection. {listing} It {UNEXPLAINED}.",
            S_PROJ,
        )


def _bias_targets(pieces, r: torch.Tensor):
    """Each feature of each role, and the gradient its bias must have."""
    roles, features, grads = [], [], []
    for role in "qkv":
        g0 = torch.cat([p.grad0 for p in pieces if p.role == role])
        roles += [role] * len(g0)
        features.append(torch.arange(len(g0)))
        grads.append(g0)
    o = r.sum(dim=(0, 1))  # d sum(out * R) / d b_o
    roles += ["o"] * len(o)
    features.append(torch.arange(len(o)))
    grads.append(o)
    return roles, torch.cat(features), torch.cat(grads)


def _bias_pieces(p, g, roles, features, targets) -> list:
    """Match each element of the 1-D parameter ``p`` to the bias with its gradient."""
    tiny = 1e-10 * float(targets.abs().max())
    if g is None or bool((g.abs() <= tiny).all()):
        return [BiasPiece(p, torch.arange(p.numel(), device=p.device), "inert")]
    gap = (g[:, None] - targets[None, :]).abs()
    best = gap.argmin(dim=1)
    ok = gap.gather(1, best[:, None])[:, 0] <= 1e-8 * (g.abs() + tiny)
    pieces = [BiasPiece(p, (g.abs() <= tiny).nonzero()[:, 0], "inert")]
    for role in "qkvo":
        of_role = torch.tensor([roles[int(i)] == role for i in best], device=g.device)
        mine = ok & (g.abs() > tiny) & of_role
        if bool(mine.any()):
            at = mine.nonzero()[:, 0]
            pieces.append(BiasPiece(p, at, role, features[best[at].cpu()]))
    return pieces


def align(title: str, module, d: int) -> Alignment | str:
    """Find the learner's projections by what they are applied to (see above); or say
    why the module gives no gradient to read."""
    __tracebackhide__ = True
    probe = _probe_gradients(module, d)
    if isinstance(probe, str):
        return probe
    xs, found = probe
    bases = {role: _basis(x) for role, x in xs.items()}
    pieces, mixed = [], []
    for name, p, g in found:
        if p.dim() == 2:
            got = _pieces_of(name, p, g, xs, bases)
            (mixed.append(got) if isinstance(got, str) else pieces.extend(got or []))
    _check_roles(title, found, pieces, mixed, d)
    roles, features, targets = _bias_targets(pieces, xs["o"])
    biases = [
        b
        for _, p, g in found
        if p.dim() == 1
        for b in _bias_pieces(p, g, roles, features, targets)
    ]
    return Alignment(tuple(pieces), tuple(biases))


def _weights_qkvo(matrices, d_model: int, listing: str, why: str) -> list:
    """The four projection weights: four [D, D], or one [3D, D] and one [D, D]."""
    __tracebackhide__ = True
    shapes = [tuple(p.shape) for p in matrices]
    if shapes == [(d_model, d_model)] * 4:
        return list(matrices)
    if shapes == [(3 * d_model, d_model), (d_model, d_model)]:
        return [*matrices[0].chunk(3, dim=0), matrices[1]]
    fail(
        "MultiHeadAttention",
        f"cannot find the projections: {why}, so the check cannot see which weight is "
        "applied to what. It then expects four "
        "nn.Linear(d_model, d_model) registered in the order query, key, value, "
        "output "
        "(or one nn.Linear(d_model, 3*d_model) for q, k, v, then the output one). "
        f"Found parameters: {listing}.",
        S_PROJ,
    )


def _biases_qkvo(vectors, d_model: int, listing: str) -> list:
    """The four projection biases, matched like the weights (four None when there are
    none)."""
    __tracebackhide__ = True
    if not vectors:
        return [None] * 4
    sizes = [p.numel() for p in vectors]
    if sizes == [d_model] * 4:
        return list(vectors)
    if sizes == [3 * d_model, d_model]:
        return [*vectors[0].chunk(3), vectors[1]]
    fail(
        "MultiHeadAttention",
        f"cannot match the biases to the projections. Found parameters: {listing}.",
        S_PROJ,
    )


def alignment_by_order(module, d_model: int, why: str) -> Alignment:
    """Without a gradient to read: the parameters in the order the module registers
    them, four Linear(D, D) or one Linear(D, 3D) then one Linear(D, D)."""
    __tracebackhide__ = True
    named = list(module.named_parameters())
    listing = ", ".join(f"{n} {list(p.shape)}" for n, p in named) or "none"
    matrices = [p for _, p in named if p.dim() == 2]
    weights = _weights_qkvo(matrices, d_model, listing, why)
    biases = _biases_qkvo([p for _, p in named if p.dim() == 1], d_model, listing)
    every = torch.arange(d_model, device=get_device())
    return Alignment(
        tuple(Piece("", w, role, every, False) for role, w in zip("qkvo", weights)),
        tuple(
            BiasPiece(b, every, role, every.cpu())
            for role, b in zip("qkvo", biases)
            if b is not None
        ),
    )


def _load_weights(alignment: Alignment, w: dict) -> None:
    """Copy the case's weight matrices into the learner's pieces, feature by feature."""
    start = dict.fromkeys("qkv", 0)
    for p in alignment.weights:
        weight = w[p.role][0]
        if p.role == "o":
            p.param.copy_(weight.T if p.transposed else weight)
            continue
        rows = weight[start[p.role] : start[p.role] + len(p.index)].to(p.param.dtype)
        start[p.role] += len(p.index)
        if p.transposed:
            p.param[:, p.index] = rows.T
        else:
            p.param[p.index] = rows


def load(module, alignment: Alignment, w: dict) -> dict:
    """Copy the case's weights ``w`` into the learner's module; return the weights the
    module then computes with (a bias the module lacks is zero)."""
    has = {role: torch.zeros_like(w[role][1], dtype=torch.bool) for role in "qkvo"}
    with torch.no_grad():
        _load_weights(alignment, w)
        for b in alignment.biases:
            if b.role == "inert":
                b.param[b.at] = 0
                continue
            features = b.features.to(has[b.role].device)
            b.param[b.at] = w[b.role][1][features].to(b.param.dtype)
            has[b.role][features] = True
    return {role: (w[role][0], w[role][1] * has[role]) for role in "qkvo"}


def _mha_cases():
    # (D, H, B, Sq, Sk, dtype); Sq != Sk is cross-attention, with key != value; B == H
    # catches batch/head mix-ups. The first case's sizes are all different, so a crash's
    # numbers decode to one name each (measure.sizes); its seeds come after the others'.
    configs = [
        (20, 4, 2, 3, 7, torch.float32),
        (16, 4, 2, 5, 5, torch.float32),
        (24, 3, 3, 4, 7, torch.float32),
        (12, 2, 2, 6, 6, torch.float64),
        (32, 4, 4, 5, 3, torch.float32),
    ]
    cases = []
    for i, (d, h, b, sq, sk, dtype) in zip((4, 0, 1, 2, 3), configs):

        def make(d=d, h=h, b=b, sq=sq, sk=sk, dtype=dtype, i=i):
            w = {
                n: (
                    randn(d, d, seed=100 * i + j, dtype=dtype) / math.sqrt(d),
                    randn(d, seed=100 * i + j + 50, dtype=dtype) * 0.1,
                )
                for j, n in enumerate("qkvo")
            }
            xq = randn(b, sq, d, seed=1000 + i, dtype=dtype)
            if sq == sk:  # self-attention: one tensor passed three times
                return w, h, xq, xq, xq
            return (
                w,
                h,
                xq,
                randn(b, sk, d, seed=2000 + i, dtype=dtype),
                randn(b, sk, d, seed=3000 + i, dtype=dtype),
            )

        kind = "self-attention" if sq == sk else "cross-attention"
        label = f"{kind} D={d}, H={h}, Dh={d // h}, B={b}, Sq={sq}, Sk={sk}, {dtype}"
        cases.append(Case(label, make))
    return cases


def _build(cls, d_model, n_heads, dtype):
    __tracebackhide__ = True
    module = build_module("MultiHeadAttention", cls, (d_model, n_heads), dtype, seed=0)
    return module.eval()


def _forward(module, xq, xk, xv):
    with torch.no_grad():
        return module(xq, xk, xv)


def _mha_run(cls, case: Case) -> Run:
    """Build the learner's module, find its projections, load the case's weights,
    run it."""
    __tracebackhide__ = True
    w, h, xq, xk, xv = case.make()
    d = xq.size(-1)
    module = _build(cls, d, h, torch.float64)
    _shared_head_check(module, d, h)
    alignment = align("MultiHeadAttention", module, d)
    module.to(xq.dtype)
    if isinstance(alignment, str):  # no gradient: the registration order, as it says
        alignment = alignment_by_order(module, d, alignment)
    w_eff = load(module, alignment, w)
    ref_args = (w_eff, h, xq.clone(), xk.clone(), xv.clone())
    want = _mha_reference(*ref_args)
    args = (xq, xk, xv)
    before = snapshot(args)
    got = run(_forward, (module, *args))
    again = run(_forward, (module, *args))
    return Run(
        case.label,
        args,
        got,
        want,
        ref_args,
        changed(args, before, ("query", "key", "value")),
        extra=(module, again, alignment),
    )


# ------------------------------------------------------------- measuring the attention
# When no listed pitfall reproduces the outputs, the check fits readings of the
# learner's attention: the reference with one part read differently (the softmax axis,
# the head layout, key and value swapped, no split) and the number the scores are
# divided by *measured* per case, not assumed. A reading is reported only when it
# reproduces every case.

WRONG_SCALE = Diagnosis(
    "scores divided by the wrong number",
    "Divide q·kᵀ by √Dh, the square root of the head size: it keeps the logits' "
    "variance at 1 whatever Dh is.",
    S_SCALE,
)
SOFTMAX_AXIS = Diagnosis(
    "softmax over the wrong axis",
    "The scores are [B, H, Sq, Sk]; each query's weights over the keys must sum to 1: "
    "softmax(dim=-1).",
    S_EINSUM,
)
HEAD_LAYOUT = Diagnosis(
    "heads cut or merged in the wrong layout",
    "Head h is features h*Dh:(h+1)*Dh of each token: split with view(B, S, H, Dh)"
    ".transpose(1, 2), merge with the exact inverse.",
    S_SPLIT,
)
KEY_VALUE_SWAPPED = Diagnosis(
    "key and value swapped",
    "The scores compare queries with the projected *key*; the weights then average "
    "the projected *value*.",
    S_PROJ,
)
HEADS_FIXED = Diagnosis(
    "number of heads fixed",
    "Use the n_heads the constructor receives (and Dh = d_model // n_heads), never a "
    "number that happened to fit your first test.",
    S_SPLIT,
)
HEADS_WRONG = Diagnosis(
    "wrong number of heads",
    "The attention runs on H = n_heads heads of Dh = d_model // n_heads features: "
    "split_heads(x, n_heads) takes the head *count*, and the scores are divided by "
    "√Dh of those heads.",
    S_SPLIT,
)
CAUSAL_WITHOUT_MASK = Diagnosis(
    "causal mask without being asked",
    "With mask=None every query attends to every key; masks come in through the mask "
    "argument (chapter 3), never built in.",
    S_EINSUM,
)
HEADS_NEVER_SPLIT = Diagnosis(
    "heads never split",
    "Your module computes one attention over all D features: split Q, K and V into H "
    "heads of Dh features with split_heads, attend per head, then merge.",
    S_SPLIT,
)
WEIGHTS_RESCALED = Diagnosis(
    "attention weights do not sum to 1",
    "Scale the scores *before* the softmax; after it, each query's weights over the "
    "keys must sum to exactly 1.",
    S_SCALE,
)
NO_SOFTMAX = Diagnosis(
    "softmax missing",
    "Your output is linear in the scores: turn the scaled scores into weights with "
    "softmax(dim=-1) before multiplying by V.",
    S_EINSUM,
)
ADDS_INPUT = Diagnosis(
    "an input added to the output",
    "Attention returns the output projection of the merged heads, nothing more; the "
    "residual connection x + attention(x) belongs to the block (chapter 4).",
    S_PROJ,
)


@dataclass(frozen=True)
class Reading:
    """The reference with one part read differently (a measurement model, not a
    pitfall): ``finding`` says what that part of the learner's code does."""

    finding: str
    diagnosis: Diagnosis | None
    split: Callable = split_heads
    merge: Callable = merge_heads
    axis: int = -1
    swap_kv: bool = False
    heads: int | None = None  # a fixed number of heads, whatever n_heads is
    causal: bool = False
    rescaled: bool = False  # the weights times a measured factor after the softmax


_INTERLEAVED = (
    "your head h takes every H-th feature (h, h+H, ...) instead of the "
    "slice h*Dh:(h+1)*Dh"
)
_STRAIGHT = (
    "your split views [B, S, D] straight as [B, H, S, Dh], mixing tokens into heads"
)
_GLUED = "your merge reshapes [B, H, S, Dh] straight to [B, S, D], gluing tokens"
_DH_MAJOR = "your merge puts the Dh axis before the head axis, interleaving the heads"

READINGS = (
    Reading("", None),
    Reading(
        "your attention weights sum to 1 over axis 2 (the queries) of the scores "
        "[B, H, Sq, Sk], not over the keys (axis 3)",
        SOFTMAX_AXIS,
        axis=-2,
    ),
    Reading(
        "your attention weights sum to 1 over axis 1 (the heads) of the scores "
        "[B, H, Sq, Sk], not over the keys (axis 3)",
        SOFTMAX_AXIS,
        axis=-3,
    ),
    Reading(
        "your attention weights sum to 1 over axis 0 (the batch) of the scores "
        "[B, H, Sq, Sk], not over the keys (axis 3)",
        SOFTMAX_AXIS,
        axis=-4,
    ),
    Reading(_INTERLEAVED, HEAD_LAYOUT, split=split_interleaved),
    Reading(_STRAIGHT, HEAD_LAYOUT, split=split_view_straight),
    Reading(_GLUED, HEAD_LAYOUT, merge=merge_no_transpose),
    Reading(_DH_MAJOR, HEAD_LAYOUT, merge=merge_dh_major),
    Reading(
        "your scores use the projected value and your weights average the "
        "projected key",
        KEY_VALUE_SWAPPED,
        swap_kv=True,
    ),
    Reading(
        "your output is single-head attention over all D features",
        HEADS_NEVER_SPLIT,
        heads=1,
    ),
    Reading("", WEIGHTS_RESCALED, rescaled=True),
    Reading(
        f"{_INTERLEAVED}, and {_DH_MAJOR}",
        HEAD_LAYOUT,
        split=split_interleaved,
        merge=merge_dh_major,
    ),
    Reading(
        f"{_INTERLEAVED}, and {_GLUED}",
        HEAD_LAYOUT,
        split=split_interleaved,
        merge=merge_no_transpose,
    ),
    Reading(
        f"{_STRAIGHT}, and {_DH_MAJOR}",
        HEAD_LAYOUT,
        split=split_view_straight,
        merge=merge_dh_major,
    ),
    Reading(
        f"{_STRAIGHT}, and {_GLUED}",
        HEAD_LAYOUT,
        split=split_view_straight,
        merge=merge_no_transpose,
    ),
    Reading(
        "your attention is causal: query i sees only keys 0..i, though mask=None "
        "asks every query to attend to every key",
        CAUSAL_WITHOUT_MASK,
        causal=True,
    ),
)


def _reading_outputs(reading: Reading, ref_args: tuple, divisors: torch.Tensor):
    """The reading's outputs [G, B, Sq, D], one per divisor of the scores [G]."""
    w, h, xq, xk, xv = ref_args
    if reading.swap_kv:
        w, xk, xv = {**w, "k": w["v"], "v": w["k"]}, xv, xk
    q, k, v = (reading.split(t, reading.heads or h) for t in _project(w, xq, xk, xv))
    raw = q @ k.transpose(-2, -1)
    if reading.causal:
        causal = torch.ones(raw.shape[-2:], dtype=torch.bool, device=raw.device).tril()
        raw = raw.masked_fill(~causal, float("-inf"))
    weights = (raw / divisors.to(raw).view(-1, 1, 1, 1, 1)).softmax(dim=reading.axis)
    merged = reading.merge((weights @ v).flatten(0, 1))
    merged = merged.unflatten(0, (len(divisors), -1))
    return F.linear(merged, *w["o"])


def _rescale(outs: torch.Tensor, got: torch.Tensor, bias: torch.Tensor):
    """Per output in ``outs`` [G, ...], the factor c (least squares) for which
    bias + c·(out - bias) is closest to ``got``, and those rescaled outputs."""
    base, target = (outs - bias).flatten(1), (got - bias).flatten()
    c = (base @ target) / (base * base).sum(dim=1)
    return c, bias + c.view(-1, *[1] * got.dim()) * (outs - bias)


def fit_divisor(reading: Reading, r: Run) -> tuple:
    """(divisor, largest difference, weight factor): the divisor of the scores that
    brings the reading closest to the learner's output, by a log-spaced search refined
    five times (and the factor on the weights, for a rescaled reading)."""
    got = r.got.detach().double()
    bias = r.ref_args[0]["o"][1].double()
    grid = torch.linspace(-8.0, 14.0, 89, dtype=torch.float64)  # log2, step 0.25
    for _ in range(5):
        outs = _reading_outputs(reading, r.ref_args, 2.0**grid).double()
        c = torch.ones(len(grid), dtype=torch.float64, device=outs.device)
        if reading.rescaled:
            c, outs = _rescale(outs, got, bias)
        err = (outs - got).abs().flatten(1).amax(1)
        i = int(err.argmin())
        best, best_err, step = grid[i], float(err[i]), float(grid[1] - grid[0])
        factor = float(c[i])
        grid = torch.linspace(
            float(best) - step, float(best) + step, 21, dtype=torch.float64
        )
    return 2.0 ** float(best), best_err, factor


def close(r: Run, err: float) -> bool:
    return err <= 2e-4 + 2e-4 * float(r.got.detach().abs().max())


def _fit_reading(reading: Reading, runs: Sequence[Run]) -> tuple | None:
    """The measured divisors and weight factors per case, or None when the reading
    misses a case."""
    divisors, factors = [], []
    for r in runs:
        divisor, err, factor = fit_divisor(reading, r)
        if not close(r, err):
            return None
        divisors.append(divisor)
        factors.append(factor)
    return divisors, factors


def _d_h(r: Run) -> tuple:
    return r.args[0].size(-1), r.ref_args[1]


def _sizes(r: Run) -> tuple:
    """(D, H, Sq, Sk) of a case."""
    return r.args[0].size(-1), r.ref_args[1], r.args[0].size(1), r.args[1].size(1)


_SCALE_NAMES = (
    ("√d_head", lambda d, h, *_: math.sqrt(d / h)),
    ("√d_model", lambda d, h, *_: math.sqrt(d)),
    ("d_head", lambda d, h, *_: d / h),
    ("d_model", lambda d, h, *_: float(d)),
    ("1 (no scaling)", lambda d, h, *_: 1.0),
    ("√n_heads", lambda d, h, *_: math.sqrt(h)),
    ("n_heads", lambda d, h, *_: float(h)),
    ("2·d_head", lambda d, h, *_: 2 * d / h),
    ("d_head / 2", lambda d, h, *_: d / h / 2),
    ("2·√d_head", lambda d, h, *_: 2 * math.sqrt(d / h)),
    ("√d_head / 2", lambda d, h, *_: math.sqrt(d / h) / 2),
    ("d_head²", lambda d, h, *_: (d / h) ** 2),
    ("1/√d_head: you multiplied by √d_head", lambda d, h, *_: math.sqrt(h / d)),
    ("1/d_head: you multiplied by d_head", lambda d, h, *_: h / d),
    ("√Sq, the square root of the query length", lambda d, h, sq, sk: math.sqrt(sq)),
    ("√Sk, the square root of the key length", lambda d, h, sq, sk: math.sqrt(sk)),
)


def scale_name(runs: Sequence[Run], divisors: list) -> str:
    """What the measured divisors are, when one formula (or a constant) gives them
    all; every formula that does, when the runs' sizes cannot tell them apart (at
    D = 32, H = 4 both n_heads and d_head / 2 are 4)."""
    names = [
        name
        for name, formula in _SCALE_NAMES
        if all(abs(s / formula(*_sizes(r)) - 1) < 0.01 for r, s in zip(runs, divisors))
    ]
    if len(names) == 1:
        return f"; that is {names[0]}"
    if names:
        return f"; that is {' or '.join(names)}, the same number at these sizes"
    if max(divisors) / min(divisors) < 1.01:
        return f"; that is a constant {divisors[0]:.4g}, whatever the head size"
    return ""


def _scale_finding(
    runs: Sequence[Run], divisors: list, heads: Sequence[int] | None
) -> str | None:
    """The divisors, unless they are √ of the head size the learner's heads have (a
    module with the wrong number of ``heads`` per case is told about that, not about
    its scale)."""
    expected = [math.sqrt(d / h) for d, h in map(_d_h, runs)]
    heads = heads or [h for _, h in map(_d_h, runs)]
    own = [math.sqrt(d / n) for (d, _), n in zip(map(_d_h, runs), heads)]
    if all(abs(s / e - 1) < 2e-3 for s, e in zip(divisors, own)):
        return None
    shapes = ", ".join(
        f"{s:.4g} (D={d}, H={h})" for s, (d, h) in zip(divisors, map(_d_h, runs))
    )
    wanted = ", ".join(f"{e:.4g}" for e in expected)
    return (
        f"your scores are divided by {shapes}{scale_name(runs, divisors)}; "
        f"expected √Dh = {wanted}"
    )


def _fail_findings(title: str, findings: list) -> None:
    """One finding: its diagnosis. Several: all of them, each with its name."""
    __tracebackhide__ = True
    if len(findings) == 1:
        diagnosis, detail = findings[0]
        diagnosis.fail(title, f"Measured: {detail}.")
    text = "; ".join(f"'{d.name}': {detail}" for d, detail in findings)
    fail(
        title,
        f"this looks like {len(findings)} mistakes at once: {text}. "
        + " ".join(d.explanation for d, _ in findings),
        findings[0][0].section,
    )


def _fit_weight_sum(r: Run, base: torch.Tensor) -> tuple:
    """(c, largest difference) for got - b_o ≈ c · base (least squares)."""
    got = r.got.detach().double() - r.ref_args[0]["o"][1].double()
    base = base.double()
    c = float((got * base).sum() / (base * base).sum())
    return c, float((got - c * base).abs().max())


def _weight_sums(runs: Sequence[Run], factors: list) -> str | None:
    if all(abs(c - 1) < 1e-3 for c in factors):
        return None
    sums = ", ".join(
        f"{c:.4g} (D={d}, H={h})" for c, (d, h) in zip(factors, map(_d_h, runs))
    )
    return f"each query's weights sum to {sums}, not 1"


def _linear_readings(title: str, runs: Sequence[Run]) -> None:
    """A reading with a closed-form fit: no softmax, output linear in the scores."""
    __tracebackhide__ = True
    linear = [_fit_weight_sum(r, _no_softmax(r.ref_args)) for r in runs]
    if all(close(r, err) for r, (_, err) in zip(runs, linear)):
        divs = ", ".join(f"{1 / c:.4g}" for c, _ in linear)
        NO_SOFTMAX.fail(
            title,
            f"Measured: your output is exactly that of weights = "
            f"scores / ({divs}) with no softmax.",
        )


def _no_softmax(ref_args: tuple) -> torch.Tensor:
    """W_o · merge(q kᵀ v), without the output bias."""
    w, h, xq, xk, xv = ref_args
    q, k, v = (split_heads(t, h) for t in _project(w, xq, xk, xv))
    return F.linear(merge_heads(q @ k.transpose(-2, -1) @ v), w["o"][0])


def _mha_measure_stage(title: str, runs: Sequence[Run]) -> None:
    __tracebackhide__ = True
    _linear_readings(title, runs)
    for reading in READINGS:
        fitted = _fit_reading(reading, runs)
        if fitted is None:
            continue
        divisors, factors = fitted
        findings = [(reading.diagnosis, reading.finding)] if reading.finding else []
        sums = _weight_sums(runs, factors) if reading.rescaled else None
        if sums:
            findings.append((WEIGHTS_RESCALED, sums))
        heads = [reading.heads] * len(runs) if reading.heads else None
        scale = _scale_finding(runs, divisors, heads)
        if scale:
            findings.append((WRONG_SCALE, scale))
        if findings:
            _fail_findings(title, findings)
        return
    _head_count_readings(title, runs)


def _fit_heads(r: Run) -> tuple | None:
    """(H', divisor): the first head count H' dividing D (n_heads tried first) with
    which the reference, its divisor fitted, reproduces the case; None if none does."""
    d, h = _d_h(r)
    for n in [h] + [n for n in range(1, d + 1) if d % n == 0 and n != h]:
        divisor, err, _ = fit_divisor(Reading("", None, heads=n), r)
        if close(r, err):
            return n, divisor
    return None


def _heads_pattern(runs: Sequence[Run], heads: list) -> tuple:
    """(diagnosis, what the measured head counts have in common, if anything)."""
    sizes = [d // n for (d, _), n in zip(map(_d_h, runs), heads)]
    if all(n == d // h for (d, h), n in zip(map(_d_h, runs), heads)):
        return HEADS_WRONG, (
            "; that is d_model // n_heads heads: the head size was "
            "passed where the head count goes"
        )
    if len(set(heads)) == 1:
        return (
            HEADS_FIXED,
            f": your module splits into {heads[0]} heads whatever n_heads is",
        )
    if len(set(sizes)) == 1:
        return HEADS_WRONG, (
            f": your heads always have {sizes[0]} features, whatever n_heads is"
        )
    return HEADS_WRONG, ""


def _head_count_readings(title: str, runs: Sequence[Run]) -> None:
    """The attention computed with H' != n_heads heads on some case, H' measured per
    case (the reference with H' heads reproduces every case)."""
    __tracebackhide__ = True
    fitted = [_fit_heads(r) for r in runs]
    if any(f is None for f in fitted):
        return
    heads = [n for n, _ in fitted]
    if all(n == h for n, (_, h) in zip(heads, map(_d_h, runs))):
        return
    diagnosis, pattern = _heads_pattern(runs, heads)
    measured = ", ".join(
        f"{n} head{'s' * (n != 1)} of {d // n} features (D={d}, H={h})"
        for n, (d, h) in zip(heads, map(_d_h, runs))
    )
    wanted = ", ".join(f"{h} of {d // h}" for d, h in map(_d_h, runs))
    findings = [
        (
            diagnosis,
            (
                f"the attention was computed with {measured}; expected "
                f"H = n_heads heads of D // H features: {wanted}"
                f"{pattern}"
            ),
        )
    ]
    scale = _scale_finding(runs, [s for _, s in fitted], heads)
    if scale:
        findings.append((WRONG_SCALE, scale))
    _fail_findings(title, findings)


def _adds_input_stage(title: str, runs: Sequence[Run]) -> None:
    """The output is the reference's plus one of the inputs."""
    __tracebackhide__ = True
    for name, i in (("query", 0), ("key", 1), ("value", 2)):
        if all(
            r.args[i].shape == r.want.shape
            and torch.allclose(r.got - r.want, r.ref_args[2 + i], atol=1e-4, rtol=1e-3)
            for r in runs
        ):
            ADDS_INPUT.fail(
                title,
                f"Measured: your output minus the expected one is "
                f"exactly `{name}` on every case.",
            )


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


def _determinism_stage(title: str, runs: Sequence[Run]) -> None:
    __tracebackhide__ = True
    for r in runs:
        again = r.extra[1]
        if (
            isinstance(r.got, torch.Tensor)
            and isinstance(again, torch.Tensor)
            and r.got.shape == again.shape
            and not torch.equal(r.got, again)
        ):
            DROPOUT_IN_EVAL.fail(
                title,
                f"On case {r.label} two calls in eval mode "
                "with the same inputs gave different outputs.",
            )


def _mha_form_stage(title: str, runs: Sequence[Run]) -> None:
    __tracebackhide__ = True
    for r in runs:
        (b, sq, d), sk = r.args[0].shape, r.args[1].size(1)
        if isinstance(r.got, torch.Tensor) and sq != sk and r.got.shape == (b, sk, d):
            WRONG_FORM.fail(
                title,
                f"On case {r.label} your output has one row per "
                f"*key* (Sk = {sk}), not one per query (Sq = {sq}): "
                f"{list(r.got.shape)} instead of {[b, sq, d]}.",
            )
    form_stage(title, runs, S_PROJ)


def _mha_probe_stage(title: str, runs: Sequence[Run]) -> None:
    """Behaviour any attention has, on the first case's module."""
    __tracebackhide__ = True
    module, x = runs[0].extra[0], runs[0].args[0]

    def self_attend(t):
        with torch.no_grad():
            return module(t, t, t)

    probe_token_mixing(title, self_attend, x, TOKENS_NEVER_MIX)
    probe_batch_independence(title, self_attend, x, BATCH_ENTRIES_LEAK)


INPUT_GRADIENT_CUT = Diagnosis(
    "gradient does not reach an input",
    "Training sends the gradient back through the attention to query, key and value "
    "(the embeddings, the encoder, the previous block learn from it): compute with "
    "tensor ops on the inputs themselves, no .detach(), .data or torch.no_grad() in "
    "forward.",
    S_PROJ,
)


def _input_gradients(module, xs: tuple, upstream: torch.Tensor):
    """d sum(module(q, k, v) * upstream) / d(q, k, v), None per input autograd cannot
    reach (None in all when the output carries no gradient)."""
    leaves = [x.detach().clone().requires_grad_(True) for x in xs]
    with torch.enable_grad():
        out = module(*leaves)
        if not isinstance(out, torch.Tensor) or not out.requires_grad:
            return (None,) * len(xs)
        return torch.autograd.grad(out, leaves, upstream, allow_unused=True)


def _reference_gradients(ref_args: tuple, upstream: torch.Tensor) -> tuple:
    w, h, *xs = ref_args
    leaves = [x.detach().clone().requires_grad_(True) for x in xs]
    with torch.enable_grad():
        out = _mha_reference(w, h, *leaves)
        return torch.autograd.grad(out, leaves, upstream)


def _mha_gradient_stage(title: str, runs: Sequence[Run]) -> None:
    """Right outputs: the gradient must still reach query, key and value as the
    reference's does (measured on the cross-attention case, key != value)."""
    __tracebackhide__ = True
    r = next(r for r in runs if r.args[1].size(1) != r.args[0].size(1))
    upstream = randn(*r.want.shape, seed=77, dtype=r.want.dtype)
    got = run(_input_gradients, (r.extra[0], r.args, upstream))
    if isinstance(got, Raised):
        fail(
            title,
            f"your code raised {got!r} while the check took the gradient "
            f"through your module on case {r.label}.",
            S_PROJ,
        )
    wanted = _reference_gradients(r.ref_args, upstream)
    for name, g, want in zip(("query", "key", "value"), got, wanted):
        if g is None:
            INPUT_GRADIENT_CUT.fail(
                title,
                f"On case {r.label} your output is right "
                f"but no gradient reaches `{name}`.",
            )
        diff = describe_difference(g, want, 1e-4, 1e-3)
        if diff:
            INPUT_GRADIENT_CUT.fail(
                title,
                f"On case {r.label} your output is right "
                f"but the gradient reaching `{name}` "
                f"differs from the reference's: {diff}.",
            )


_MHA_STAGES = (
    raised_stage,
    _determinism_stage,
    _mha_form_stage,
    _mha_measure_stage,
    _adds_input_stage,
    _mha_probe_stage,
)


def check_multi_head_attention(cls) -> None:
    """``cls(d_model, n_heads)`` is an nn.Module whose ``forward(query, key, value,
    mask=None)`` maps query [B, Sq, D], key and value [B, Sk, D] to [B, Sq, D]. Its
    projections are found by what they are applied to (any names, order, fused
    layout, orientation; biases where it has them) and given the cases' weights."""
    __tracebackhide__ = True
    with single_thread():
        runs = [_mha_run(cls, case) for case in _mha_cases()]
        known = (
            f"Your projections ({runs[0].extra[2].describe()}) were found by what "
            "they are applied to and given the check's weights. "
        )
        staged(
            "MultiHeadAttention",
            runs,
            MHA_PITFALLS,
            _MHA_STAGES,
            1e-5,
            1e-4,
            known,
            when_right=_mha_gradient_stage,
        )


def check_multi_head_attention_behaviour(cls) -> None:
    """Probes any correct attention passes: tokens mix, batch entries stay apart, eval
    mode is deterministic."""
    __tracebackhide__ = True
    module = _build(cls, 16, 4, torch.float32)
    x = randn(4, 6, 16, seed=7)

    def self_attend(t):
        with torch.no_grad():
            return module(t, t, t)

    # Determinism first: the other probes compare two calls.
    probe_eval_determinism("MultiHeadAttention", module, (x, x, x), DROPOUT_IN_EVAL)
    probe_token_mixing("MultiHeadAttention", self_attend, x, TOKENS_NEVER_MIX)
    probe_batch_independence("MultiHeadAttention", self_attend, x, BATCH_ENTRIES_LEAK)
    passed(
        "MultiHeadAttention",
        "mixes tokens, keeps batch entries apart, deterministic in eval mode",
    )


def check_multi_head_attention_by_hand(cls) -> None:
    """Hidden test: the forward pass is the learner's own, not PyTorch's or the
    reference's attention."""
    __tracebackhide__ = True
    module = _build(cls, 16, 4, torch.float32)
    x = randn(2, 5, 16, seed=8)
    check_not_delegated(
        "MultiHeadAttention",
        lambda: module(x, x, x),
        forbidden=[
            "scaled_dot_product_attention",
            "multi_head_attention_forward",
            "tformer_ref",
        ],
        module=module,
    )


seal(__name__)
