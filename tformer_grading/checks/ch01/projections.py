"""Finding the projections of a learner's ``MultiHeadAttention`` (chapter 1), which
``multi_head_attention`` and the attention bug hunt load their cases' weights into.

Learners name, order, fuse and bias their projections as they like, so the check finds
them by what they do. It runs the module once (float64) on distinct query [2, Sq, D],
key and value [2, 3, D], feature 0 of each set to 1, and takes the gradient of
sum(out * R). A weight row applied to `key` gets a gradient that is a combination of
key's token vectors, the output projection one whose columns are combinations of R's:
that says, row by row, which input each weight consumes, whatever its name,
registration order, fused layout ([q; k; v] or per head) or orientation (x @ W)
(``measure.roles`` reads it). Feature 0 = 1 makes a bias's gradient equal its row's
gradient at feature 0, which pairs every bias with its row.

Examples (the reference module, its Linears read back by what they do)::

    >>> from tformer_ref.attention import MultiHeadAttention
    >>> found = align("MultiHeadAttention", MultiHeadAttention(8, 2).double(), 8)
    >>> found.describe()
    'q: q_proj.weight, k: k_proj.weight, v: v_proj.weight, o: out_proj.weight'
    >>> [(b.role, len(b.at)) for b in found.biases if len(b.at)]  # softmax ignores b_k
    [('q', 8), ('inert', 8), ('v', 8), ('o', 8)]
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tformer_ref.device import get_device

from ...guard.integrity import seal
from ..cases import randn
from ..diagnosis import UNEXPLAINED, Diagnosis, Raised, fail, run
from ..measure.roles import joint_roles, same_gradient, span_basis
from ..measure.roles import roles as read_roles
from .sections import S_PROJ

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True

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


def shared_head_check(module, d_model: int, n_heads: int, diagnosis) -> None:
    """Fail with ``diagnosis`` when the module has a [Dh, Dh] weight (one Linear
    shared by the heads): it has no [D, D] projections to load the cases' weights
    into, so its outputs cannot be compared."""
    d_head = d_model // n_heads
    named = list(module.named_parameters())
    if d_head != d_model and any(p.shape == (d_head, d_head) for _, p in named):
        total = sum(p.numel() for _, p in named)
        diagnosis.fail(
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


def _mixture(vectors: torch.Tensor, xs: dict) -> str | None:
    """Which inputs together explain rows that no single input does ("key and
    value")."""
    group = joint_roles(vectors, xs, ("kv", "qk", "qv", "qkv"))
    return " and ".join(_input_of(r) for r in group) if group else None


def _pieces_of(name: str, p, g, xs: dict, bases: dict):
    """The Pieces of one 2-D parameter ([] when unused), or a sentence saying what its
    gradient shows when no single input explains it."""
    d = xs["o"].size(-1)
    if g is None or not bool((g != 0).any()):
        return []
    for transposed, vectors in ((False, g), (True, g.T)):
        if vectors.size(1) != d:
            continue
        roles = read_roles(vectors, bases)
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
    matched = same_gradient(g, targets)
    if matched is None:
        return [BiasPiece(p, torch.arange(p.numel(), device=p.device), "inert")]
    best, ok, inert = matched
    pieces = [BiasPiece(p, inert.nonzero()[:, 0], "inert")]
    for role in "qkvo":
        of_role = torch.tensor([roles[int(i)] == role for i in best], device=g.device)
        mine = ok & of_role
        if bool(mine.any()):
            at = mine.nonzero()[:, 0]
            pieces.append(BiasPiece(p, at, role, features[best[at].cpu()]))
    return pieces


def align(title: str, module, d: int) -> Alignment | str:
    """Find the learner's projections by what they are applied to (see above); or say
    why the module gives no gradient to read."""
    probe = _probe_gradients(module, d)
    if isinstance(probe, str):
        return probe
    xs, found = probe
    bases = {role: span_basis(x) for role, x in xs.items()}
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


seal(__name__)
