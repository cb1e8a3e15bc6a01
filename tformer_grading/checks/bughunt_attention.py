"""Checks for the graded bug hunt ``ch03_bughunt``: the seed's ``SelfAttention``.

The learner fixes the seed's class in place, keeping its name, its constructor
``SelfAttention(embed_size, heads)`` and its ``forward(values, keys, query, mask)``.
It has four bugs, and each check judges one of them only, by behaviour, so that a
submission with exactly one bug fixed earns exactly that bug's points whatever the
state of the other three:

1. ``check_bug_einsum``: the einsum labels read the sequence axis as heads. Probes any
   attention over tokens passes, whatever its projections, scale or fill: changing one
   key/value token changes the other positions' outputs, cross-attention (Lq != Lk)
   works, the output rows follow the query order, the key order does not matter, and
   the weights over the keys sum to 1 (identical values give the same output for
   every query), and each head averages its own head's values (a change to one value
   token moves a query's output in embed_size directions, not head_dim).
2. ``check_bug_shared_linear``: one ``Linear(head_dim, head_dim)`` shared by the heads,
   applied to each head's slice. A change confined to head h's slice of an input then
   reaches head h alone, so the output moves only inside the Dh-dimensional image of
   head h's columns of the output projection; with projections from the whole
   embedding it moves in many more directions. Measured as a rank, per input and per
   head. Under the seed's einsum (attention across the heads of one token) only the
   query path can tell the two apart: a head's key or value slice reaches every head
   there. So with bug 1 present a submission that shares only the key or only the
   value projection is not caught (the seed's code, which shares all three, is).
3. ``check_bug_scale``: the divisor of the scores, measured. The check finds the
   learner's projections (``ch01``'s alignment by what each weight is applied to; the
   seed's shared [Dh, Dh] projections all get one symmetric matrix, so their roles
   and orientation need no finding), loads known weights, and fits the number the
   scores are divided by, reading the attention either per token or as the seed's
   einsum does; when neither fits, it says what it measured, not what to fix.
4. ``check_bug_fill_value``: the module in float16 (on CPU too) with a padding mask,
   one fully masked sequence and one with all keys but one masked: no error (the
   seed's ``float("-1e20")`` overflows float16, and masked_fill refuses it), no NaN
   (``-inf`` makes a fully masked row 0/0), the mask read as a keep-mask (the output
   follows the one key left and ignores the masked ones), and masked keys get no
   weight (with one key left, the output no longer depends on the query). The
   masked axis is the scores' last one under either einsum, so this holds whatever
   bug 1's state.

The sections cited are chapter 1's (einsum, per-head projections, scaling; through
``ch01``'s ``Section`` constants) and chapter 3's §3.5 on fill values.
"""

from __future__ import annotations

import math

import torch

from tformer_ref.device import get_device

from ..guard.integrity import seal
from ..pictures.attach import pictured
from .bughunt_attention_calls import (
    build,
    call,
    call_seen,
    expect_shape,
    fill_picture,
    sizes_label,
    validate_sizes,
)
from .cases import randn
from .ch01 import S_EINSUM, S_MERGE, S_PROJ, S_SCALE, S_SPLIT
from .ch01.multi_head_attention import READINGS
from .ch01.projections import align, alignment_by_order, load
from .ch01.readings import Reading, close, fit_divisor, scale_name, seed_heads
from .ch01.stages import Run
from .ch03 import S_FILL
from .diagnosis import (
    UNEXPLAINED,
    CheckFailure,
    Diagnosis,
    Raised,
    fail,
    passed,
    single_thread,
    verify_integrity,
)
from .measure.directions import changes_spread
from .measure.sizes import named
from .pieces import wrap_checks

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True

#: The exercise these checks grade (the pitfall index links its rows there).
ASSIGNMENT = "ch03_bughunt"

#: (embed_size, heads) of the visible checks; the hidden tests use other sizes.
SIZES = ((32, 4),)


TITLE_EINSUM = "bug 1 (einsum)"

TOKENS_NEVER_MIX = Diagnosis(
    "bug 1 still present: the einsum attends across heads, not tokens",
    "On [N, L, H, Dh] tensors the seed's 'bhqd,bhkd->bhqk' reads the sequence axis L "
    "as h and the heads as q and k: each token's heads attend to each other, tokens "
    "never exchange information, and keys of another length than the queries make it "
    "fail. Move the head axis first (transpose(1, 2) to [N, H, L, Dh]) or label the "
    "axes as they are: 'nqhd,nkhd->nhqk', then 'nhqk,nkhd->nqhd' for the values.",
    S_EINSUM,
)
ROWS_OUT_OF_ORDER = Diagnosis(
    "output rows not in query order",
    "Output row i must be query i's result: after the weighted sum, [N, H, Lq, Dh] "
    "goes back to [N, Lq, H, Dh] (transpose(1, 2)) before the reshape to "
    "[N, Lq, embed_size]; reshaping [N, H, Lq, Dh] directly glues different queries "
    "into one row.",
    S_MERGE,
)
TOKENS_CUT_INTO_HEADS = Diagnosis(
    "tokens mixed before the weighted sum",
    "Reordering the queries must reorder the output rows, and reordering the keys and "
    "values together must change nothing; both failing means tokens were mixed "
    "before the weighted sum, most often by the split into heads: a reshape of [N, L, "
    "embed_size] straight to [N, heads, L, head_dim] cuts the sequence into chunks, "
    "not each token's features. Reshape to [N, L, heads, head_dim], then transpose(1, "
    "2).",
    S_SPLIT,
)
KEY_ORDER_MATTERS = Diagnosis(
    "the output depends on the order of the keys",
    "Attention is a weighted average over the keys: shuffling the key/value tokens "
    "together must leave every query's output unchanged. Check that the keys and the "
    "values are indexed by the same letter in your two einsums (or matmuls).",
    S_EINSUM,
)
WEIGHTS_NOT_OVER_KEYS = Diagnosis(
    "the output is not an average of the values",
    "When every value token is the same vector, any average of them is that vector, "
    "whatever the queries and keys. So either each query's weights do not sum to 1 "
    "over the keys (after relabelling the einsum, softmax must still run over the key "
    "axis of the scores, dim=-1 of [N, H, Lq, Lk]), or the weights multiply something "
    "other than the values (the keys, the queries).",
    S_EINSUM,
)
HEADS_SHARE_VALUES = Diagnosis(
    "the heads' values are summed or mixed",
    "Each head's output must be a weighted average of its own head's values: in "
    "'nhqk,nkhd->nqhd' the weights and the values share the head letter h. Given a "
    "letter of their own ('nkgd'), the values' head axis is summed away: every head "
    "averages the same sum of all heads' values.",
    S_EINSUM,
)


def _einsum_mixing(title: str, module, e: int, h: int) -> tuple:
    """What the mixing and cross-attention probes saw wrong: (sentences that prove the
    seed's bug 1, tokens that never mix; other sentences; whether self-attention ran
    and its tokens were measured to mix within each sequence)."""
    proof, other = [], []
    q, kv = randn(2, 5, e, seed=11), randn(2, 5, e, seed=12)
    base = call(title, module, kv, kv, q)
    changed = kv.clone()
    changed[:, 0] = randn(2, e, seed=13)
    after = call(title, module, changed, changed, q)
    ran = not (isinstance(base, Raised) or isinstance(after, Raised))
    mixes = ran
    if not ran:
        other.append(
            f"self-attention on [N=2, L=5, embed_size={e}] raised "
            f"{base if isinstance(base, Raised) else after!r}"
        )
    elif base.shape == after.shape == (2, 5, e):
        tol = 1e-6 * (1 + float(base.abs().max()))
        moved = float((after - base)[:, 1:].abs().max())
        # Token 0 of sequence 0 alone: the seed's bug keeps each sequence to itself.
        alone = kv.clone()
        alone[0, 0] = changed[0, 0]
        crossed = call(title, module, alone, alone, q)
        across = (
            float((crossed - base)[1].abs().max())
            if not isinstance(crossed, Raised) and crossed.shape == base.shape
            else 0.0
        )
        if across > tol:
            mixes = False
            other.append(
                f"changing key/value token 0 of sequence 0 alone changed sequence "
                f"1's output by up to {across:.3g}: attention runs across the "
                f"sequences of the batch (axis N), which must never meet"
            )
        elif moved <= tol:
            mixes = False
            proof.append(
                f"changing key/value token 0 changed the output at query "
                f"positions 1 to 4 by at most {moved:.1e}, so tokens never "
                f"mix"
            )
    cross = call(
        title,
        module,
        randn(2, 7, e, seed=14),
        randn(2, 7, e, seed=14),
        randn(2, 3, e, seed=15),
    )
    sizes = named(N=2, query_len=3, key_len=7, heads=h, head_dim=e // h, embed_size=e)
    if isinstance(cross, Raised):
        other.append(f"cross-attention ({sizes}) raised {cross!r}")
    elif tuple(cross.shape) != (2, 3, e):
        other.append(
            f"cross-attention ({sizes}) returned shape "
            f"{list(cross.shape)}, not [2, 3, {e}]"
        )
    return proof, other, mixes


def _fail_einsum_shapes(measured: str, mixes: bool) -> None:
    """Self- or cross-attention raised or returned a wrong shape, and nothing shows that
    tokens never mix: say what was measured, not that bug 1 is still there."""
    fixed = (
        " In self-attention tokens do mix, so the seed's bug 1 is fixed; what fails is "
        "cross-attention, where the keys are longer than the queries: every reshape, "
        "view and einsum must use the length of its own input (key_len for the keys "
        "and values, query_len for the queries)."
        if mixes
        else ""
    )
    fail(TITLE_EINSUM, measured + "." + fixed, S_EINSUM)


def _einsum_causal(title: str, module, e: int, h: int) -> None:
    """Self-attention under a causal keep-mask [1, 1, L, L] with L != heads: a mask
    broadcasts against the scores from the right, so it runs only when the scores'
    last two axes are the queries and the keys. (Whether it keeps the queries off the
    later keys depends on the fill value too: bug 4's check measures that.)"""
    length = 5
    sizes = named(N=2, L=length, heads=h, head_dim=e // h, embed_size=e)
    what = f"self-attention ({sizes}) with a causal keep-mask [1, 1, L, L]"
    mask = torch.ones(length, length, device=get_device()).tril()[None, None]
    x = randn(2, length, e, seed=26)
    got = call(title, module, x, x, x, mask)
    if isinstance(got, Raised):
        fail(
            title,
            f"your forward raised {got!r} on {what}. A mask lines up with the scores "
            "from the right, so its last two axes meet the scores' last two: those "
            "must be the queries and the keys, [N, heads, query_len, key_len] "
            "('nqhd,nkhd->nhqk').",
            S_EINSUM,
        )
    expect_shape(title, got, (2, length, e), what, S_EINSUM)


def _einsum_orders(title: str, module, e: int, label: str) -> None:
    """Query-order equivariance, key-order invariance, weights summing to 1."""
    q, k, v = randn(2, 4, e, seed=21), randn(2, 6, e, seed=22), randn(2, 6, e, seed=23)
    what = f"cross-attention with query [2, 4, {e}], keys and values [2, 6, {e}]"

    def attend(v, k, q):
        got = call(title, module, v, k, q)
        return expect_shape(title, got, (2, 4, e), what, S_EINSUM)

    base = attend(v, k, q)
    tol = 1e-5 * (1 + float(base.abs().max()))
    qp, kp = torch.tensor([2, 0, 3, 1]), torch.tensor([4, 2, 5, 0, 3, 1])
    gap = float((attend(v, k, q[:, qp]) - base[:, qp]).abs().max())
    keys = float((attend(v[:, kp], k[:, kp], q) - base).abs().max())
    reordered = f"reordering the key/value tokens together as {kp.tolist()} changed"
    if gap > tol:
        rows = (
            f"Measured ({label}): with the queries in the order {qp.tolist()}, your "
            f"output rows differ from the same rows reordered by up to {gap:.3g}"
        )
        if keys > tol:  # a merge only moves rows of a result no key order changes
            TOKENS_CUT_INTO_HEADS.fail(
                title,
                f"{rows}; {reordered} it by up to {keys:.3g}: tokens mix before the "
                "weighted sum.",
            )
        ROWS_OUT_OF_ORDER.fail(title, f"{rows}.")
    if keys > tol:
        KEY_ORDER_MATTERS.fail(
            title, f"Measured ({label}): {reordered} the output by up to {keys:.3g}."
        )
    same_v = randn(2, 1, e, seed=24).expand(2, 6, e).contiguous()
    one = attend(same_v, k, q)
    other = attend(same_v, randn(2, 6, e, seed=25), q.flip(1))
    gap = max(float((one - one[:, :1]).abs().max()), float((other - one).abs().max()))
    if gap > tol:
        WEIGHTS_NOT_OVER_KEYS.fail(
            title,
            f"Measured ({label}): with every value token the same vector, your "
            f"output still varies by up to {gap:.3g} with the queries and keys.",
        )


def _heads_share_values(title: str, module, e: int, h: int) -> str:
    """What was measured when the heads pass on only Dh numbers of a value token (its
    change moves query 0's output in Dh directions, not e), else ''. ``module`` is
    float64: float32's noise would blur the gap after the Dh-th direction."""
    v, k, q = (randn(1, 4, e, seed=600 + i, dtype=torch.float64) for i in range(3))
    dh, change = e // h, torch.zeros(e, 4, e, dtype=v.dtype, device=v.device)
    change[:, 0] = randn(e, e, seed=603, dtype=v.dtype)

    def query_0(vs):
        got = call(title, module, vs, k.repeat(e + 1, 1, 1), q.repeat(e + 1, 1, 1))
        return (
            got[:, 0] if not isinstance(got, Raised) and got.shape == vs.shape else None
        )

    found = changes_spread(query_0, v[0], change, dh)
    if found is None or found[0] >= 1e-6:
        return ""
    return (
        f"changing value token 0 alone (queries and keys fixed) in {e} random "
        f"directions moved query 0's output in {found[1]} directions only, within "
        f"head_dim = {dh} (the next singular value is {found[0]:.1e} of the "
        f"largest), where {h} heads each averaging its own head's values move it in "
        f"{e}: together the heads pass on only {dh} numbers of each value token, "
        f"one head's width, so the values' head axis is summed or mixed"
    )


def check_bug_einsum(cls, sizes=SIZES) -> None:
    """Bug 1: attention runs over tokens (mask=None, float32)."""
    verify_integrity()
    sizes = validate_sizes(sizes)
    with single_thread():
        for e, h in sizes:
            module = build(cls, e, h, torch.float32)
            proof, other, mixes = _einsum_mixing(TITLE_EINSUM, module, e, h)
            label = sizes_label(e, h)
            measured = f"Measured ({label}): " + "; ".join(proof + other)
            if proof:  # the seed's bug, proven: tokens never exchange information
                TOKENS_NEVER_MIX.fail(TITLE_EINSUM, measured + ".")
            if other:
                _fail_einsum_shapes(measured, mixes=mixes)
            _einsum_orders(TITLE_EINSUM, module, e, label)
            _einsum_causal(TITLE_EINSUM, module, e, h)
            module = build(cls, e, h, torch.float64)
            if mixed := _heads_share_values(TITLE_EINSUM, module, e, h):
                HEADS_SHARE_VALUES.fail(TITLE_EINSUM, f"Measured ({label}): {mixed}.")
    passed(
        TITLE_EINSUM,
        "tokens mix, cross-attention works, rows follow the queries, "
        "key order does not matter, weights sum to 1 over the keys, "
        "a causal mask [1, 1, L, L] lines up with the scores, "
        "each head averages its own head's values",
    )


# ---------------------------------------------------------- bug 2: the shared Linear

TITLE_SHARED = "bug 2 (shared Linear)"

SHARED_PROJECTION = Diagnosis(
    "bug 2 still present: one Linear(head_dim, head_dim) shared by all heads",
    "Applied after the split, the seed's Linear(head_dim, head_dim) gives head h a "
    "view of its own slice x[..., h*Dh:(h+1)*Dh] only, through the same matrix as "
    "every other head. Each head needs its own projection of the whole embedding: "
    "project first with Linear(embed_size, embed_size) (H separate embed_size -> Dh "
    "maps side by side), then split into heads. Do it for the values, the keys and "
    "the queries.",
    S_PROJ,
)

_INPUT_ROLES = ("query", "keys", "values")
_VKQ = ("values", "keys", "query")  # forward's order
_COMPUTED = (("query", "queries"), ("keys", "keys"), ("values", "values"))


def _head_changes(x: torch.Tensor, head: int, dh: int, n: int, seed: int):
    """[n, B, L, E]: n changes of x confined to head ``head``'s slice."""
    delta = torch.zeros(n, *x.shape, dtype=x.dtype, device=x.device)
    delta[..., head * dh : (head + 1) * dh] = 2.0 * randn(
        n, *x.shape[:-1], dh, seed=seed, dtype=x.dtype
    )
    return delta


def _confined_rank(title: str, module, xs: dict, role: str, head: int, dh: int):
    """(σ_{Dh+1} / σ_1, rank) of the output changes that changes confined to
    ``head``'s slice of input ``role`` cause, or None when they cause none."""
    n, x = 4, xs[role]
    size = ((n + 1) * x.size(0), x.size(1), x.size(2))

    def outputs(batch):
        args = [batch if r == role else xs[r].expand(n + 1, *x.shape) for r in _VKQ]
        got = call(title, module, *(a.reshape(size) for a in args))
        what = f"self-attention [{size[0]}, {size[1]}, {size[2]}] (float64)"
        return expect_shape(title, got, size, what, S_PROJ).reshape(n + 1, -1, size[2])

    seed = 300 + 10 * head + _INPUT_ROLES.index(role)
    return changes_spread(outputs, x, _head_changes(x, head, dh, n, seed), dh)


def check_bug_shared_linear(cls, sizes=SIZES) -> None:
    """Bug 2: each head's queries (keys, values) depend on the whole embedding."""
    verify_integrity()
    sizes = validate_sizes(sizes)
    with single_thread():
        for e, h in sizes:
            dh = e // h
            module = build(cls, e, h, torch.float64)
            xs = {
                r: 1.5 * randn(3, 5, e, seed=200 + i, dtype=torch.float64)
                for i, r in enumerate(_INPUT_ROLES)
            }
            for role in _INPUT_ROLES:
                ranks = [
                    _confined_rank(TITLE_SHARED, module, xs, role, head, dh)
                    for head in range(h)
                ]
                confined = [
                    i for i, r in enumerate(ranks) if r is not None and r[0] < 1e-6
                ]
                if confined:
                    i = confined[0]
                    SHARED_PROJECTION.fail(
                        TITLE_SHARED,
                        f"Measured ({sizes_label(e, h)}): changing only head {i}'s "
                        f"slice of `{role}` (features {i * dh}:{(i + 1) * dh}) moved "
                        f"your output in {ranks[i][1]} directions at most, i.e. "
                        f"within one head's {dh}-dimensional share of the output "
                        f"projection (the next singular value is {ranks[i][0]:.1e} "
                        f"of the largest): head {i}'s {dict(_COMPUTED)[role]} are "
                        f"computed from that slice alone (heads "
                        f"{', '.join(map(str, confined))} of {h} behave so).",
                    )
    passed(
        TITLE_SHARED,
        "each head's queries, keys and values depend on the whole embedding",
    )


# ------------------------------------------------------------------- bug 3: the scale

TITLE_SCALE = "bug 3 (scale)"

SCORES_SCALED_WRONG = Diagnosis(
    "bug 3 still present: scores not divided by √head_dim",
    "The variance of q·k grows with the length of the vectors being dotted, which is "
    "head_dim per head: divide the scores by head_dim ** 0.5 "
    "(math.sqrt(self.head_dim)). The seed divides by embed_size ** (1/2), which makes "
    "every logit √heads times too small and the attention too flat.",
    S_SCALE,
)
SCALE_NOT_MEASURED = Diagnosis(
    "attention that the scale check cannot read",
    "The scale is measured by loading known weights into your projections and "
    "fitting the divisor of attention read per token (the fixed einsum) or across "
    "the heads of one token (the seed's). No divisor made either reading reproduce "
    "your output: your module differs from both in more than the divisor, so the "
    "number its scores are divided by cannot be read from it.",
    S_SCALE,
)


def _seed_merge(t: torch.Tensor) -> torch.Tensor:
    """The seed's merge: [N, L, H, Dh] -> [N, L, E] (the head axis was never moved)."""
    return t.flatten(2)


# The seed's einsum as a reading of ch01's measurement model: heads never moved, so
# q kᵀ of [N, L, H, Dh] tensors attends across the heads of each token.
SEED_READING = Reading(
    "your attention runs across the heads of each token (the seed's einsum)",
    None,
    split=seed_heads,
    merge=_seed_merge,
)
_READINGS = (READINGS[0], SEED_READING, *READINGS[1:])


def _symmetric(n: int, seed: int) -> torch.Tensor:
    a = randn(n, n, seed=seed, dtype=torch.float64)
    return (a + a.T) / math.sqrt(2 * n)


def _load_shared(module, e: int, h: int) -> dict:
    """The seed's layout, [Dh, Dh] projections shared by the heads: one symmetric
    matrix in each (so which is q, k or v, and x @ W or W x, make no difference), a
    symmetric [E, E] output weight, every bias zero. Returns the weights computed
    with, as ch01's measurement model takes them."""
    dh = e // h
    small, out = _symmetric(dh, 510), _symmetric(e, 511)
    zero = torch.zeros(e, dtype=torch.float64, device=get_device())
    with torch.no_grad():
        for p in module.parameters():
            if p.shape == (dh, dh):
                p.copy_(small)
            elif p.shape == (e, e):
                p.copy_(out)
            elif p.dim() == 1:
                p.zero_()
    block = torch.block_diag(*[small] * h)
    return {
        "q": (block, zero),
        "k": (block, zero),
        "v": (block, zero),
        "o": (out, zero),
    }


def _load_found(module, e: int) -> dict:
    """Per-head projections from the whole embedding, found by what each weight is
    applied to (ch01's alignment), given ch01-style weights."""
    wrapped = _AsQKV(module)
    try:
        alignment = align(TITLE_SCALE, wrapped, e)
        if isinstance(alignment, str):
            alignment = alignment_by_order(wrapped, e, alignment)
    except CheckFailure as failure:  # said again with this check's title and section
        text = str(failure).split(": ", 1)[-1].split("\n    Read ")[0]
        fail(
            TITLE_SCALE,
            f"to measure the scale the check loads its own weights into "
            f"your projections, and could not find them: {text}",
            S_PROJ,
        )
    w = {
        n: (
            randn(e, e, seed=520 + j, dtype=torch.float64) / math.sqrt(e),
            randn(e, seed=530 + j, dtype=torch.float64) * 0.1,
        )
        for j, n in enumerate("qkvo")
    }
    return load(wrapped, alignment, w)


class _AsQKV(torch.nn.Module):
    """The learner's module called as ch01's alignment calls one: (query, key,
    value)."""

    def __init__(self, inner: torch.nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, query, key, value, mask=None):
        return self.inner(value, key, query, mask)


def _measure_divisor(module, e: int, h: int, shared: bool) -> tuple:
    """(divisor, reading, run): the divisor and reading that reproduce the learner's
    output (None, None when none does), and the run measured."""
    xq, xk, xv = (randn(2, 5, e, seed=540 + i, dtype=torch.float64) for i in range(3))
    what = f"self-attention [2, 5, {e}] (float64)"
    # First as built: what it returns is judged before any weight is looked for.
    expect_shape(
        TITLE_SCALE, call(TITLE_SCALE, module, xv, xk, xq), (2, 5, e), what, S_SCALE
    )
    w = _load_shared(module, e, h) if shared else _load_found(module, e)
    got = expect_shape(
        TITLE_SCALE,
        call(TITLE_SCALE, module, xv, xk, xq),
        (2, 5, e),
        f"{what} with the check's weights",
        S_SCALE,
    )
    r = Run(
        f"{sizes_label(e, h)}",
        (xq, xk, xv),
        got,
        got,
        (w, h, xq.clone(), xk.clone(), xv.clone()),
    )
    for reading in _READINGS:
        divisor, err, _ = fit_divisor(reading, r)
        if close(r, err):
            return divisor, reading, r
    return None, None, r


def check_bug_scale(cls, sizes=SIZES) -> None:
    """Bug 3: the scores are divided by √head_dim (measured, mask=None, float64)."""
    verify_integrity()
    sizes = validate_sizes(sizes)
    with single_thread():
        for e, h in sizes:
            dh = e // h
            module = build(cls, e, h, torch.float64)
            shared = any(p.shape == (dh, dh) for p in module.parameters())
            divisor, _, r = _measure_divisor(module, e, h, shared)
            if divisor is None:
                mixed = _heads_share_values(TITLE_SCALE, module, e, h)
                SCALE_NOT_MEASURED.fail(
                    TITLE_SCALE,
                    f"Measured ({sizes_label(e, h)}): no divisor makes any reading "
                    f"reproduce your output; {mixed or 'it ' + UNEXPLAINED}.",
                )
            if abs(divisor / math.sqrt(dh) - 1) > 2e-3:
                named = scale_name([r], [divisor])
                SCORES_SCALED_WRONG.fail(
                    TITLE_SCALE,
                    f"Measured ({sizes_label(e, h)}): your scores are divided by "
                    f"{divisor:.4g}{named}; expected √head_dim = {math.sqrt(dh):.4g}.",
                )
    passed(TITLE_SCALE, "scores divided by √head_dim")


# -------------------------------------------------------------- bug 4: the fill value

TITLE_FILL = "bug 4 (fill value)"

FILL_OVERFLOWS = Diagnosis(
    "bug 4 still present: a fill value that overflows float16",
    "float16's range ends at ±65504: float('-1e20') (or -1e9) cannot be stored, and "
    "masked_fill refuses it ('value cannot be converted to type ... Half without "
    "overflow'); where it is stored it becomes -inf, and a fully masked row becomes "
    "NaN. Fill with the scores' own limit, torch.finfo(energy.dtype).min, which is "
    "finite in every dtype.",
    S_FILL,
)
HALF_FAILS = Diagnosis(
    "forward fails in float16",
    "Under mixed precision the whole module runs in float16: build every constant "
    "from the scores' own dtype (torch.finfo(energy.dtype).min, not a float32 tensor) "
    "and use the mask as it comes.",
    S_FILL,
)
FULLY_MASKED_NAN = Diagnosis(
    "NaN for a fully masked row",
    "A query whose keys are all masked gets softmax(-inf, ..., -inf) = 0/0 = NaN, and "
    "the NaN spreads to everything computed from it. Fill with a finite value, "
    "torch.finfo(energy.dtype).min: such a row then gets uniform weights.",
    S_FILL,
)
MASKED_KEYS_WEIGHTED = Diagnosis(
    "masked keys keep some weight",
    "A masked key must get weight exactly 0, so its score must become a number whose "
    "exp() is 0 next to the real scores: a small fill (0, -1, -10) leaves it part of "
    "the softmax. torch.finfo(energy.dtype).min works in every dtype.",
    S_FILL,
)
MASK_INVERTED = Diagnosis(
    "mask convention inverted: the masked keys are attended to",
    "The course's masks are keep-masks, 1 (True) = attend and 0 (False) = masked, "
    "as the seed's masked_fill(mask == 0, ...) reads them. Filling where the mask is "
    "1 (mask == 1, mask != 0, mask.bool(), ~mask, torch.where(mask == 0, energy, "
    "fill)) hides the kept keys and leaves the masked ones in the softmax (that is "
    "nn.MultiheadAttention's key_padding_mask convention, True = masked). Fill "
    "where the mask is 0: masked_fill(mask == 0, torch.finfo(energy.dtype).min).",
    S_FILL,
)
NAN_IN_HALF = Diagnosis(
    "NaN or inf in float16",
    "With a mask whose every row keeps at least one key, float16 attention must stay "
    "finite: a fill that overflows, or a constant too large for float16, gives inf, "
    "and inf - inf gives NaN. Use torch.finfo(energy.dtype).min as the fill.",
    S_FILL,
)


def _fill_mask(length: int) -> torch.Tensor:
    """[3, 1, 1, L] bool keep-mask: sequence 0 padded after two tokens, sequence 1
    fully masked, sequence 2 with only its last key kept."""
    keep = torch.zeros(3, 1, 1, length, dtype=torch.bool)
    keep[0, ..., :2] = True
    keep[2, ..., -1] = True
    return keep.to(get_device())


def check_bug_fill_value(cls, sizes=SIZES) -> None:
    """Bug 4: masking works in float16 (no error, no NaN, masked keys get no weight)."""
    verify_integrity()
    sizes = validate_sizes(sizes)
    with single_thread():
        for e, h in sizes:
            _check_fill(cls, e, h)
    passed(
        TITLE_FILL,
        "in float16: no error, no NaN for a fully masked row, masked "
        "keys get no weight",
    )


def _check_fill(cls, e: int, h: int) -> None:
    # L = H: a [N, 1, 1, L] mask then also broadcasts against the seed's [N, L, H, H]
    # scores, so bug 1's state does not decide whether the mask line runs.
    length, half = h, torch.float16
    module = build(cls, e, h, half)
    mask = _fill_mask(length)
    x, q = (randn(3, length, e, seed=seed, dtype=half) for seed in (41, 42))
    label = (
        f"{sizes_label(e, h)}, float16, mask [3, 1, 1, {length}] with one fully "
        f"masked sequence"
    )
    got, weights = call_seen(TITLE_FILL, module, x, x, q, mask)
    if isinstance(got, Raised):
        overflow = "overflow" in str(got.exc) or "-1e20" in repr(got)
        (FILL_OVERFLOWS if overflow else HALF_FAILS).fail(
            TITLE_FILL, f"Measured ({label}): your forward raised {got!r}."
        )
    got = expect_shape(TITLE_FILL, got, (3, length, e), label, S_FILL)
    with pictured(lambda said: fill_picture(weights, mask, label, said)):
        _judge_fill(module, x, q, mask, got, label)


def _judge_fill(module, x, q, mask, got, label: str) -> None:
    """What the forward's outputs on the fill probe show, in the order it matters."""
    length, e = x.shape[1:]
    if not bool(torch.isfinite(got[[0, 2]]).all()):
        NAN_IN_HALF.fail(
            TITLE_FILL,
            f"Measured ({label}): the sequences that keep some keys (sequence 0 "
            "and sequence 2) got NaN or inf.",
        )
    if not bool(torch.isfinite(got[1]).all()):
        FULLY_MASKED_NAN.fail(
            TITLE_FILL,
            f"Measured ({label}): the output of sequence 1, which is fully masked, "
            f"is {_bad_values(got[1])}.",
        )
    _check_convention(module, x, q, mask, got, label)
    moved_q = q.clone()
    moved_q[2] = randn(length, e, seed=43, dtype=q.dtype)
    change = _seq2_moved(module, x, moved_q, mask, got, label)
    if change > 1e-3 * (1 + float(got[2].float().abs().max())):
        MASKED_KEYS_WEIGHTED.fail(
            TITLE_FILL,
            f"Measured ({label}): in sequence 2, whose mask keeps only the last key, "
            f"changing the queries still changed the output by {change:.3g} (with "
            "one key left, the weights cannot depend on the query).",
        )


def _seq2_moved(module, kv, q, mask, got, label: str) -> float:
    """How far sequence 2's output moved from ``got`` on these inputs."""
    ran = call(TITLE_FILL, module, kv, kv, q, mask)
    again = expect_shape(TITLE_FILL, ran, tuple(got.shape), label, S_FILL)
    return float((again[2].float() - got[2].float()).abs().max())


def _check_convention(module, x, q, mask, got, label: str) -> None:
    """Sequence 2's mask keeps its last key only: its output must follow that token
    alone. Measured the other way round, the convention is inverted."""
    length, e = x.shape[1:]
    moved = []
    for tokens, seed in ((slice(0, -1), 44), (slice(-1, None), 45)):
        changed = x.clone()
        changed[2, tokens] = randn(length, e, seed=seed).to(x)[tokens]
        moved.append(_seq2_moved(module, changed, q, mask, got, label))
    if moved[0] > 1e-3 * (1 + float(got[2].float().abs().max())) >= moved[1]:
        MASK_INVERTED.fail(
            TITLE_FILL,
            f"Measured ({label}): in sequence 2, whose mask keeps only the last key, "
            f"changing the key/value tokens the mask marks 0 (0 to {length - 2}) "
            f"changed its output by {moved[0]:.3g}, and changing the one it marks 1 "
            f"(token {length - 1}) by {moved[1]:.3g}: your module attends to the keys "
            f"the mask marks 0 and ignores those it marks 1.",
        )


def _bad_values(t: torch.Tensor) -> str:
    nan = int(torch.isnan(t).sum())
    inf = int(torch.isinf(t).sum())
    parts = [f"{nan} NaN" if nan else "", f"{inf} inf" if inf else ""]
    return " and ".join(p for p in parts if p) + f" of {t.numel()} values"


wrap_checks(globals())  # one diagnosis per submission (pieces.py)
seal(__name__)
