"""Which of a module's parameters plays which role, read off its gradients: a weight
row applied to an input gets a gradient that is a combination of that input's token
vectors, whatever the parameter is called, how it is fused or which way round it is
stored.

A check runs the module once on inputs whose token vectors span separate subspaces,
takes the gradient of one scalar of the output, and asks, row by row, which input's
span holds each row (:func:`roles`). A bias is paired with the rows whose gradient it
shares (:func:`same_gradient`): give every input a feature fixed at 1 and a row's
gradient at that feature is its bias's gradient.

Examples (a fused [3D, D] weight whose middle third is applied to ``key``)::

    >>> g = torch.Generator().manual_seed(0)
    >>> xs = {r: torch.randn(3, 2, generator=g, dtype=torch.float64)
    ...       @ torch.randn(2, 6, generator=g, dtype=torch.float64) for r in "qkv"}
    >>> bases = {r: span_basis(x) for r, x in xs.items()}
    >>> grad = torch.cat([torch.randn(2, 3, generator=g, dtype=torch.float64) @ xs[r]
    ...                   for r in "qkv"])                   # rows 2, 3 read key
    >>> roles(grad, bases)
    ['q', 'q', 'k', 'k', 'v', 'v']
    >>> roles(torch.cat([grad[2:3] + grad[4:5], 0 * grad[:1]]), bases)
    ['?', 'unused']
"""

from __future__ import annotations

import torch

from ...guard.integrity import seal

# A row "lies in" a span when what is left after projecting on it is below this
# fraction of the row (float64 probes: rounding leaves ~1e-15).
SPAN_RTOL = 1e-6


def span_basis(x: torch.Tensor) -> torch.Tensor:
    """An orthonormal basis [D, r] of the span of x's token vectors x [..., D] (r its
    rank: an SVD, since QR of a rank-deficient matrix returns spurious directions).

    >>> x = torch.tensor([[1.0, 0.0, 0.0], [2.0, 0.0, 0.0]], dtype=torch.float64)
    >>> span_basis(x).shape                                  # rank 1 in D = 3
    torch.Size([3, 1])
    """
    u, sv, _ = torch.linalg.svd(x.reshape(-1, x.size(-1)).T, full_matrices=False)
    return u[:, sv > 1e-9 * sv.max()]


def in_span(vectors: torch.Tensor, basis: torch.Tensor) -> torch.Tensor:
    """Which rows of ``vectors`` [n, D] lie in the span of ``basis`` [D, r] ([n] bool).

    >>> basis = span_basis(torch.eye(3, dtype=torch.float64)[:2])   # the x-y plane
    >>> in_span(torch.tensor([[3.0, -1, 0], [0, 0, 1]], dtype=torch.float64), basis)
    tensor([ True, False])
    """
    residual = vectors - vectors @ basis @ basis.T
    return residual.norm(dim=1) <= SPAN_RTOL * vectors.norm(dim=1)


def roles(vectors: torch.Tensor, bases: dict) -> list:
    """Per row of ``vectors`` [n, D]: the one role of ``bases`` (role -> basis) whose
    span holds it, "unused" (a zero row) or "?" (none, or several)."""
    norms = vectors.norm(dim=1)
    fits = {role: in_span(vectors, b) for role, b in bases.items()}
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


def joint_roles(vectors: torch.Tensor, xs: dict, groups: tuple) -> str | None:
    """The first group of roles (a string of keys of ``xs``, role -> token vectors
    [..., D]) whose inputs together span every row of ``vectors``, or None: what a row
    no single input explains is applied to.

    >>> e = torch.eye(3, dtype=torch.float64)
    >>> joint_roles(e[:2].sum(0, keepdim=True), {"k": e[:1], "v": e[1:2]}, ("k", "kv"))
    'kv'
    """
    for group in groups:
        joint = span_basis(
            torch.cat([xs[r].reshape(-1, xs[r].size(-1)) for r in group])
        )
        if bool(in_span(vectors, joint).all()):
            return group
    return None


def same_gradient(g: torch.Tensor, targets: torch.Tensor):
    """Pair each element of a 1-D parameter's gradient ``g`` [n] with the target
    gradient [m] it equals: (index of the nearest target [n], matched [n] bool, inert
    [n] bool: elements with no gradient). None when the whole parameter is inert.

    >>> best, ok, inert = same_gradient(torch.tensor([0.5, 0.0, 2.0, 7.0]),
    ...                                 torch.tensor([2.0, 0.5, 3.0]))
    >>> best.tolist(), ok.tolist(), inert.tolist()
    ([1, 1, 0, 2], [True, False, True, False], [False, True, False, False])
    """
    tiny = 1e-10 * float(targets.abs().max())
    if g is None or bool((g.abs() <= tiny).all()):
        return None
    gap = (g[:, None] - targets[None, :]).abs()
    best = gap.argmin(dim=1)
    ok = gap.gather(1, best[:, None])[:, 0] <= 1e-8 * (g.abs() + tiny)
    inert = g.abs() <= tiny
    return best, ok & ~inert, inert


seal(__name__)
