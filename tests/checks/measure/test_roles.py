"""Which parameter plays which role (tformer_grading/checks/measure/roles.py): a weight
planted on one input is read back as applied to it, whatever its layout, and a bias is
paired with the rows whose gradient it shares.

Bug this guards against: ch01's "finding the projections" misreading a fused [3D, D]
weight or a transposed one (x @ W), or pairing a bias with the wrong projection, so
that the cases' weights are loaded into the wrong places and a right module fails.
"""

from __future__ import annotations

import torch

from tformer_grading.checks.measure.roles import (
    in_span,
    joint_roles,
    roles,
    same_gradient,
    span_basis,
)

D = 12


def _inputs(seed: int = 0) -> dict:
    """Token vectors of three inputs, each in its own random plane (rank 2)."""
    g = torch.Generator().manual_seed(seed)
    return {
        r: torch.randn(5, 2, generator=g, dtype=torch.float64)
        @ torch.randn(2, D, generator=g, dtype=torch.float64)
        for r in "qkv"
    }


def _rows_applied_to(x: torch.Tensor, n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, x.size(0), generator=g, dtype=torch.float64) @ x


def test_a_fused_weight_is_read_row_by_row():
    xs = _inputs()
    bases = {r: span_basis(x) for r, x in xs.items()}
    grad = torch.cat([_rows_applied_to(xs[r], 4, i) for i, r in enumerate("vqk")])
    assert roles(grad, bases) == ["v"] * 4 + ["q"] * 4 + ["k"] * 4


def test_zero_rows_are_unused_and_mixed_rows_no_single_role():
    xs = _inputs(1)
    bases = {r: span_basis(x) for r, x in xs.items()}
    mixed = _rows_applied_to(xs["k"], 1, 2) + _rows_applied_to(xs["v"], 1, 3)
    assert roles(torch.cat([mixed, torch.zeros(1, D, dtype=torch.float64)]), bases) == [
        "?",
        "unused",
    ]
    assert joint_roles(mixed, xs, ("qk", "kv", "qkv")) == "kv"
    assert joint_roles(torch.randn(1, D, dtype=torch.float64), xs, ("kv",)) is None


def test_the_span_of_a_rank_deficient_input_has_its_rank():
    x = _inputs(2)["q"]
    basis = span_basis(x)
    assert basis.shape == (D, 2)
    assert bool(in_span(x, basis).all())
    assert not bool(in_span(torch.eye(D, dtype=torch.float64)[:1], basis).any())


def test_a_bias_is_paired_with_the_rows_whose_gradient_it_shares():
    targets = torch.tensor([0.3, -1.2, 2.5, 0.7], dtype=torch.float64)
    g = torch.tensor([2.5, 0.0, 0.3, 9.0], dtype=torch.float64)
    best, ok, inert = same_gradient(g, targets)
    assert best[ok].tolist() == [2, 0]
    assert inert.tolist() == [False, True, False, False]
    assert same_gradient(torch.zeros(3, dtype=torch.float64), targets) is None
    assert same_gradient(None, targets) is None
