"""Checks for exercise ``embed`` of chapter 5 (book/ch05_model):
``embed(tokens [B, S], table nn.Embedding(V, D), pe [max_len, D]) -> [B, S, D]``, the
token embedding scaled by √d_model plus positions, ``table(tokens) · √D + pe[:S]``.

The check first makes sure the inputs stay untouched and two calls agree, then
compares with the reference and names a known wrong variant that reproduces the
learner's outputs on every case. Otherwise it *measures*: the embedding's scale and the
position rows added are estimated from its output.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from tformer_ref.device import get_device
from tformer_ref.positions import sinusoidal_encoding

from ...guard.integrity import seal
from ..diagnosis import (
    Case,
    Diagnosis,
    Pitfall,
    fail,
    run,
    single_threaded,
)
from ..measure.sizes import named
from .grading import first_wrong, grade_function
from .sections import (
    S_EMBED,
    S_SINUSOID,
)

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True


def _embed_cases():
    configs = [
        (2, 5, 16, 20, torch.float32),
        (3, 4, 8, 11, torch.float32),
        (1, 7, 12, 9, torch.float64),
        (4, 3, 32, 50, torch.float32),
    ]
    device = get_device()
    cases = []
    for i, (b, s, d, vocab, dtype) in enumerate(configs):

        def make(b=b, s=s, d=d, vocab=vocab, dtype=dtype, i=i):
            torch.manual_seed(500 + i)
            table = nn.Embedding(vocab, d).to(device=device, dtype=dtype)
            nn.init.normal_(table.weight, std=d**-0.5)
            g = torch.Generator().manual_seed(600 + i)
            tokens = torch.randint(0, vocab, (b, s), generator=g).to(device)
            pe = sinusoidal_encoding(s + 6, d, dtype=dtype, device=device)
            return tokens, table, pe

        cases.append(
            Case(
                f"tokens [{named(B=b, S=s)}], {named(V=vocab, D=d)}, "
                f"pe [{named(P=s + 6)}, D], {dtype}",
                make,
            )
        )
    return cases


def _embed(tokens, table, pe):
    """table(tokens) · √D + pe[:S]."""
    return table(tokens) * math.sqrt(table.embedding_dim) + pe[: tokens.size(1)]


def _embed_unscaled(tokens, table, pe):
    return table(tokens) + pe[: tokens.size(1)]


def _embed_times_d(tokens, table, pe):
    return table(tokens) * float(table.embedding_dim) + pe[: tokens.size(1)]


def _embed_over_sqrt_d(tokens, table, pe):
    return table(tokens) * (1 / math.sqrt(table.embedding_dim)) + pe[: tokens.size(1)]


def _embed_positions_scaled(tokens, table, pe):  # (embedding + position) · √D
    return (table(tokens) + pe[: tokens.size(1)]) * math.sqrt(table.embedding_dim)


def _embed_positions_by_token(tokens, table, pe):  # pe[tokens]
    return table(tokens) * math.sqrt(table.embedding_dim) + pe[tokens]


EMBED_PITFALLS = (
    Pitfall(
        "missing √d_model embedding scale",
        "Your token embeddings are not multiplied by √d_model (Vaswani et al. "
        "§3.4). Embeddings start with entries of size about 1/√D, the "
        "positional encoding with entries of size 1: without the scale the "
        "positions drown the tokens.",
        S_EMBED,
        _embed_unscaled,
    ),
    Pitfall(
        "scaled by d_model, not √d_model",
        "You multiplied the embeddings by d_model; the paper multiplies by √d_model.",
        S_EMBED,
        _embed_times_d,
    ),
    Pitfall(
        "divided by √d_model",
        "You divided the embeddings by √d_model; the paper multiplies by it.",
        S_EMBED,
        _embed_over_sqrt_d,
    ),
    Pitfall(
        "positions scaled too",
        "You multiplied (embedding + position) by √d_model: only the token "
        "embedding is scaled, the positional encoding is added afterwards, as it "
        "is.",
        S_EMBED,
        _embed_positions_scaled,
    ),
    Pitfall(
        "positions looked up by token id",
        "You indexed the positional table with the token ids (pe[tokens]): the row "
        "is the token's *position*, 0..S-1 (pe[:S]), whatever the "
        "token.",
        S_SINUSOID,
        _embed_positions_by_token,
    ),
)


# Stage 1, the form: [B, S, D] in the table's dtype, on its device.


def _embed_form_problem(got, tokens, table) -> str | None:
    b, s = tokens.shape
    d = table.embedding_dim
    if not isinstance(got, torch.Tensor) or type(got) is not torch.Tensor:
        return (
            f"expected a plain torch.Tensor [B, S, D] = [{b}, {s}, {d}], got "
            f"{type(got).__name__}"
        )
    shape = list(got.shape)
    if shape == [b, s, 2 * d]:
        return (
            f"your output has shape {shape}: 2·D features. You concatenated the "
            "positions to the embeddings; they are *added* (same D features)"
        )
    if shape != [b, s, d]:
        return f"expected shape [B, S, D] = {[b, s, d]}, got {shape}"
    if got.dtype != table.weight.dtype:
        return (
            f"your output is {got.dtype} for a {table.weight.dtype} table: keep "
            "the table's dtype (a tensor you create inside, such as the scale, "
            "must not change it)"
        )
    if not torch.isfinite(got).all():
        return "your output has NaN or inf values"
    if got.device != table.weight.device:
        return f"your output is on {got.device}, the table on {table.weight.device}"
    return None


# Stage 2, side effects: the inputs untouched, the same output twice (no dropout).


def _mutation_problem(fn, make) -> str | None:
    tokens, table, pe = make()
    before = (tokens.clone(), table.weight.detach().clone(), pe.clone())
    run(fn, (tokens, table, pe))
    after = (tokens, table.weight.detach(), pe)
    for name, old, new in zip(("tokens", "table.weight", "pe"), before, after):
        if not torch.equal(old, new):
            return (
                f"your embed changed its input {name} in place (largest change "
                f"{(old.double() - new.double()).abs().max().item():.3g}): every "
                "later call then sees a different table. Compute a new tensor "
                "instead (x = x * scale, not x *= scale or .mul_)"
            )
    return None


def _dropout_problem(fn, make) -> str | None:
    first, second = run(fn, make()), run(fn, make())
    if not (isinstance(first, torch.Tensor) and isinstance(second, torch.Tensor)):
        return None
    if first.shape != second.shape or torch.equal(first, second):
        return None
    zeros = ((first == 0).double().mean().item(), (second == 0).double().mean().item())
    return (
        "two calls with the same inputs gave different outputs "
        f"({zeros[0]:.0%} and {zeros[1]:.0%} of the entries zero): embed applies "
        "no dropout and no other randomness (the model applies dropout after it)"
    )


# Stage 3, the fit: out = α·table(tokens) + β·pe[r_s] at each position s.

# (B, S, D, V, max_len): D not a perfect square (an int() of √D would pass), and no
# two sizes equal, so a scale by the wrong one says which.
EMBED_PROBES = ((4, 6, 12, 30, 14), (5, 5, 20, 27, 10))


def embed_probe(i):
    b, s, d, vocab, max_len = EMBED_PROBES[i]

    def make():
        # Seeded without resetting the learner's random state: two calls of a learner
        # that draws random numbers (dropout) must see different draws.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(700 + i)
            table = nn.Embedding(vocab, d).to(get_device())
            nn.init.normal_(table.weight, std=d**-0.5)
        g = torch.Generator().manual_seed(800 + i)
        tokens = torch.randint(0, vocab, (b, s), generator=g).to(get_device())
        return tokens, table, sinusoidal_encoding(max_len, d, device=get_device())

    return make


@dataclass(frozen=True)
class EmbedFit:
    """``scale`` α of the embeddings; ``rows`` r_s of pe added at s, times
    ``pos_scale`` β; ``rows`` None when the added vector is not a row of pe,
    ``shared`` False when it differs between the sequences of the batch."""

    scale: float
    rows: tuple | None
    pos_scale: float
    shared: bool


def _position_rows(q, pe):
    """q [S, D] -> (rows, β) with q_s ≈ β·pe[rows_s], or (None, 0)."""
    coef = (q @ pe.T) / (pe**2).sum(-1)  # [S, L]: best β per (s, row)
    resid = (q[:, None, :] - coef[..., None] * pe[None]).norm(dim=-1)
    rows = resid.argmin(-1)
    picked = coef.gather(1, rows[:, None]).squeeze(1)
    if resid.gather(1, rows[:, None]).max() > 1e-3 * (1 + q.norm(dim=-1).max()):
        return None, 0.0
    if (picked - picked.mean()).abs().max() > 1e-3 * (1 + picked.abs().mean()):
        return None, 0.0
    return tuple(rows.tolist()), picked.mean().item()


def fit_embed(got, tokens, table, pe) -> EmbedFit | None:
    """Read α, the rows and β off the learner's output ``got`` [B, S, D] (B >= 2)."""
    e = F.embedding(tokens, table.weight).detach().double().cpu()
    y, pe = got.detach().double().cpu(), pe.double().cpu()
    centred = e - e.mean(0)
    alpha = ((y - y.mean(0)) * centred).sum() / (centred**2).sum()
    added = y - alpha * e  # [B, S, D]: what was added to α·embedding
    size = 1 + y.abs().max().item()
    shared = (added - added.mean(0)).abs().max().item() < 1e-4 * size
    q = added.mean(0)
    if q.abs().max() < 1e-5 * size:
        return EmbedFit(alpha.item(), (), 0.0, shared)
    rows, beta = _position_rows(q, pe) if shared else (None, 0.0)
    return EmbedFit(alpha.item(), rows, beta, shared)


def _named_scale(alphas, configs) -> str:
    """What each measured α equals, when one expression explains every probe."""
    named = (
        ("1 (no scale)", lambda b, s, d, v, m: 1.0),
        ("d_model", lambda b, s, d, v, m: d),
        ("1/√d_model", lambda b, s, d, v, m: d**-0.5),
        ("1/d_model", lambda b, s, d, v, m: 1 / d),
        ("√(max_len), pe.size(0)", lambda b, s, d, v, m: m**0.5),
        ("√(vocabulary size)", lambda b, s, d, v, m: v**0.5),
        ("√S, the sequence length", lambda b, s, d, v, m: s**0.5),
        ("√B, the batch size", lambda b, s, d, v, m: b**0.5),
        ("√(d_model/2)", lambda b, s, d, v, m: (d / 2) ** 0.5),
        ("2·√d_model", lambda b, s, d, v, m: 2 * d**0.5),
        ("d_model^(1/4)", lambda b, s, d, v, m: d**0.25),
    )
    for name, value in named:
        if all(abs(a - value(*c)) < 1e-3 * value(*c) for a, c in zip(alphas, configs)):
            return f": that is {name}"
    return ""


def _scale_problem(fits) -> str | None:
    alphas = [f.scale for f in fits]
    wants = [c[2] ** 0.5 for c in EMBED_PROBES]
    if all(abs(a - w) < 1e-3 * w for a, w in zip(alphas, wants)):
        return None
    at = " and ".join(f"{a:.4g} (D = {c[2]})" for a, c in zip(alphas, EMBED_PROBES))
    expected = " and ".join(f"{w:.4g}" for w in wants)
    return (
        f"your token embeddings are multiplied by {at}"
        f"{_named_scale(alphas, EMBED_PROBES)}; expected √d_model = {expected}"
    )


def _rows_problem(fit, s) -> str | None:
    if not fit.shared:
        return (
            "your output is not α·table(tokens) plus one vector per position: "
            "after the best α, what remains differs between sequences at the same "
            "position (the positional term pe[:S] is the same for every sequence)"
        )
    if fit.rows == ():
        return "no positional encoding is added to the embeddings"
    if fit.rows is None:
        return (
            "the vector added at each position is not a row of pe (nor a multiple "
            "of one): add pe[:S], row s at position s"
        )
    if list(fit.rows) == list(range(s)):
        return None
    where = {
        tuple(range(1, s + 1)): ": the positions start at 1",
        tuple(range(s - 1, -1, -1)): ": reversed",
    }.get(fit.rows, "")
    return (
        f"at positions 0..{s - 1} you add rows {list(fit.rows)} of pe{where}; "
        f"expected rows 0..{s - 1} (pe[:S])"
    )


def _pos_scale_problem(fit) -> str | None:
    if not fit.rows or abs(fit.pos_scale - 1) < 1e-3:
        return None
    same = (
        " (the same as the embeddings: the sum was scaled)"
        if abs(fit.pos_scale - fit.scale) < 1e-3 * abs(fit.scale)
        else ""
    )
    return (
        f"your positional encoding is multiplied by {fit.pos_scale:.4g}{same}; "
        "it is added as it is (scale 1)"
    )


EMBED_MEASURED = Diagnosis(
    "embedding scale or positions off",
    "embed returns table(tokens)·√d_model + pe[:S]: only the token embeddings are "
    "scaled, and row s of the positional table is added at position s.",
    S_EMBED,
)


def _fit_probes(fn):
    """[EmbedFit] over the probes, or None when an output is not [B, S, D]."""
    fits = []
    for i, config in enumerate(EMBED_PROBES):
        tokens, table, pe = embed_probe(i)()
        got = run(fn, (tokens, table, pe))
        if _embed_form_problem(got, tokens, table):
            return None
        fits.append(fit_embed(got, tokens, table, pe))
    return fits


def _measure_embed(fn):
    def measure(title, cases, theirs, ours):
        case, got, _ = first_wrong(cases, theirs, ours, 1e-5, 1e-5)
        tokens, table, _ = case.make()
        form = _embed_form_problem(got, tokens, table)
        if form:
            fail(title, f"on case {case.label}: {form}.", S_EMBED)
        fits = _fit_probes(fn)
        if fits:
            s = EMBED_PROBES[0][1]
            problems = [
                p
                for p in (
                    _scale_problem(fits),
                    _rows_problem(fits[0], s),
                    _pos_scale_problem(fits[0]),
                )
                if p
            ]
            if problems:
                EMBED_MEASURED.fail(
                    title,
                    "Measured on tokens [4, 6] and [5, 5]: "
                    + "; ".join(problems)
                    + ".",
                )

    return measure


@single_threaded
def check_embed(fn) -> None:
    """``fn(tokens [B, S] long, table nn.Embedding(V, D), pe [max_len, D])
    -> [B, S, D]``: ``table(tokens) · √D + pe[:S]``."""
    _side_effects("embed", fn)
    grade_function(
        "embed",
        _embed_cases(),
        fn,
        _embed,
        EMBED_PITFALLS,
        _measure_embed(fn),
        atol=1e-5,
        rtol=1e-5,
    )


def _side_effects(title, fn) -> None:
    """The inputs untouched and the output the same twice, whatever the values: a
    right first output hides a table scaled in place."""
    make = embed_probe(0)
    for stage in (_mutation_problem, _dropout_problem):
        found = stage(fn, make)
        if found:
            fail(title, f"on tokens [4, 6]: {found}.", S_EMBED)


seal(__name__)
