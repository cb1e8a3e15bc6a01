"""Checks for exercise ``next_token_probs`` of chapter 8 (book/ch08_generation):
``next_token_probs(logits [B, V], temperature, top_p) -> probs [B, V]``, the
distribution at that temperature cut to the smallest set of most likely tokens reaching
top_p (the crossing token included), renormalised.

Judged by behaviour only: which tokens the learner keeps (against the reference's set,
the set at temperature 1, the crossing token, the token after a sum that reaches top_p
exactly), whether rows sum to 1, the effective temperature read off the slope of
log-probability against the logits, and, on large logits, whether the same logits
shifted down (the same distribution) come out right (an exp that overflows).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch

from tformer_ref import sampling
from tformer_ref.device import get_device

from ...guard.integrity import seal
from ..delegation import check_not_delegated
from ..diagnosis import (
    Case,
    Diagnosis,
    Raised,
    describe_difference,
    fail,
    passed,
    run,
    single_threaded,
    verify_integrity,
)
from ..flow import fallback
from ..measure.closeness import near
from ..measure.sizes import named
from .harness import ATOL, RTOL, keeps_random_state, right
from .sections import S_TEMPERATURE, S_TOP_P

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True

#: A probability at or below this counts as "not kept" (the cases keep none smaller).
KEPT = 1e-9

# Cases: (B, V, seed, temperature, top_p, boost, offset). ``boost`` raises one logit of
# row 0 so that its token alone holds more than top_p; ``offset`` is added to every
# logit (the distribution is the same). The seeds are chosen so that no cumulative sum
# lies within 1e-3 of top_p (float rounding never decides the set), except in the exact
# case below, where the sum reaches top_p exactly on purpose.

PROB_CASES = (
    (2, 8, 11, 1.0, 1.0, 0.0, 0.0),
    (3, 10, 12, 1.0, 0.9, 0.0, 0.0),
    (2, 8, 35, 1.0, 0.5, 4.0, 0.0),
    (3, 10, 14, 0.5, 0.8, 0.0, 0.0),
    (2, 12, 15, 2.0, 0.9, 0.0, 0.0),
    (2, 8, 16, 0.7, 1.0, 0.0, 0.0),
    (2, 30, 17, 1.5, 0.6, 0.0, 0.0),
    # Logits around 60 at temperature 0.5: logits / T reaches 120, and exp(120)
    # overflows float32 (its largest is about 3.4e38 = exp(88.7)) unless the row's
    # largest logit is subtracted first, as torch.softmax does.
    (2, 10, 45, 0.5, 0.9, 0.0, 60.0),
)
#: The case whose logits are large (an exp without the max subtracted overflows), and
#: the exact case (last in prob_cases()).
LARGE, EXACT = len(PROB_CASES) - 1, len(PROB_CASES)

#: Probabilities that are powers of two: float32 holds them, their sums and softmax's
#: results exactly, so the two most likely tokens reach top_p = 0.75 *exactly*. The
#: smallest set reaching p is those two; a strict comparison keeps a third.
EXACT_PROBS = (
    (0.5, 0.25, 0.125, 0.0625, 0.03125, 0.03125),
    (0.03125, 0.125, 0.0625, 0.5, 0.03125, 0.25),
)
EXACT_P = 0.75


def _prob_logits(b, v, seed, boost, offset=0.0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(b, v, generator=g) * 1.5
    if boost:
        logits[0, int(torch.randint(v, (1,), generator=g))] += boost
    return (logits + offset).to(get_device())


def _prob_case(b, v, seed, t, p, boost, offset) -> Case:
    around = f" around {offset:g}" if offset else ""
    label = f"logits [{named(B=b, V=v)}]{around}, temperature={t}, top_p={p}"
    return Case(label, lambda: (_prob_logits(b, v, seed, boost, offset), t, p))


def _exact_case() -> Case:
    b, v = len(EXACT_PROBS), len(EXACT_PROBS[0])
    label = (
        f"logits [{b}, {v}] whose probabilities are 1/2, 1/4, 1/8, ... exactly, "
        f"temperature=1.0, top_p={EXACT_P} (two tokens reach it exactly)"
    )
    return Case(
        label, lambda: (torch.tensor(EXACT_PROBS).log().to(get_device()), 1.0, EXACT_P)
    )


def prob_cases() -> list[Case]:
    return [_prob_case(*spec) for spec in PROB_CASES] + [_exact_case()]


def _exact_answer() -> torch.Tensor:
    """The exact case's answer from the powers of two themselves: the two most likely
    tokens of each row, renormalised (2/3 and 1/3)."""
    probs = torch.tensor(EXACT_PROBS, dtype=torch.float64)
    keep = _top_p_set(probs, EXACT_P)
    kept = probs * keep
    return (kept / kept.sum(-1, keepdim=True)).float().to(get_device())


def _as_float32(out):
    """Probabilities in float64 are as right as float32 ones: compare values."""
    if type(out) is torch.Tensor and out.dtype == torch.float64:
        return out.float()
    return out


def _reference_probs(logits, temperature, top_p):
    return sampling.next_token_probs(logits, temperature, top_p=top_p)


def _full(logits, t):
    """softmax(logits / t) in float64 [B, V]: the distribution before any cut."""
    return (logits.double() / t).softmax(-1)


def _top_p_set(full, p):
    """[B, V] bool: the smallest set of most likely tokens of ``full`` reaching p."""
    probs, order = full.sort(dim=-1, descending=True)
    keep = (probs.cumsum(-1) - probs) < p
    return torch.zeros_like(keep).scatter(-1, order, keep)


KEEPS_NONE = Diagnosis(
    "top-p keeps none when the top token alone exceeds p",
    "When the most likely token alone already holds more than top_p, it must be kept "
    "alone: the nucleus is never empty. Keep a token when the tokens ranked above it "
    "hold less than top_p (cumsum - probs < top_p): the first token always passes.",
    S_TOP_P,
)
DROPS_CROSSING = Diagnosis(
    "top-p drops the token that crosses p",
    "The kept set must *reach* top_p: it holds the tokens ranked above the crossing "
    "point and the token that carries the sum across top_p. Keeping only the tokens "
    "whose cumulative sum stays below top_p (cumsum < p, or cumsum <= p) loses that "
    "token, and keeps nothing at all when the top token alone exceeds top_p. Compare "
    "the mass *before* each token with top_p (cumsum - probs < top_p).",
    S_TOP_P,
)
KEEPS_ONE_TOO_MANY = Diagnosis(
    "top-p keeps one token too many when the mass reaches p exactly",
    "The nucleus is the *smallest* set whose probability reaches top_p: once the "
    "tokens kept hold top_p exactly, the next one is not needed. A strict comparison "
    "(removing where cumsum > top_p and shifting by one, or keeping where cumsum - "
    "probs <= top_p, or a loop that stops only when the sum is > top_p) keeps it too. "
    "Keep a token when the tokens ranked above it hold *less* than top_p "
    "(cumsum - probs < top_p); equivalently, remove where cumsum >= top_p, then shift.",
    S_TOP_P,
)
SOFTMAX_OVERFLOW = Diagnosis(
    "softmax overflows on large logits (exp without subtracting the max)",
    "exp of a logit above about 88 is inf in float32, and inf / inf is NaN: logits "
    "around 60 divided by a temperature of 0.5 get there. Subtracting each row's "
    "largest logit before the exp changes nothing in the result (softmax(x) = "
    "softmax(x - max x)) and keeps every exp in [0, 1]: use torch.softmax, which does "
    "it for you, or x - x.max(dim=-1, keepdim=True).values before your exp.",
    S_TEMPERATURE,
)
NOT_TOP_TOKENS = Diagnosis(
    "top-p keeps tokens that are not the most likely",
    "The nucleus is made of the *most likely* tokens: sort the probabilities in "
    "descending order before the cumulative sum, and map the kept positions back to "
    "the token ids (scatter with the sort's indices).",
    S_TOP_P,
)
TOP_P_NOT_APPLIED = Diagnosis(
    "top-p not applied",
    "Every token keeps some probability: nothing was cut. Set the logits of the tokens "
    "outside the nucleus to -inf before the softmax (or zero their probabilities and "
    "renormalise).",
    S_TOP_P,
)
TOP_P_AS_THRESHOLD = Diagnosis(
    "top-p read as a threshold on each token",
    "top_p is a share of the probability mass, not a bar for one token: sort the "
    "tokens by probability and keep the smallest set of the most likely ones whose "
    "probabilities add up to top_p.",
    S_TOP_P,
)
TOP_P_AS_FRACTION = Diagnosis(
    "top-p read as a share of the vocabulary",
    "top_p is a share of the probability mass, not of the vocabulary (that would be "
    "top-k with k = top_p·V): the nucleus grows when the distribution is flat and "
    "shrinks when it is peaked.",
    S_TOP_P,
)
TOP_P_BEFORE_TEMPERATURE = Diagnosis(
    "top-p applied before the temperature",
    "The set of tokens you keep is the one top_p picks at temperature 1, although the "
    "probabilities on it follow the temperature. Divide the logits by the temperature "
    "first, then choose the nucleus from *those* probabilities: a temperature below 1 "
    "concentrates the mass and needs fewer tokens, one above 1 needs more.",
    S_TOP_P,
)
NOT_RENORMALISED = Diagnosis(
    "probabilities not renormalised",
    "After the cut every row must sum to 1 over the vocabulary: softmax the filtered "
    "logits (the -inf ones get 0) along the last axis, or divide the kept "
    "probabilities by their sum.",
    S_TOP_P,
)
NOT_PROBABILITIES = Diagnosis(
    "returns something other than probabilities",
    "The function returns the probabilities the next token is drawn from: numbers in "
    "[0, 1], each row summing to 1 (the softmax of the filtered logits), not the "
    "filtered logits themselves.",
    S_TOP_P,
)
TEMPERATURE_AFTER_SOFTMAX = Diagnosis(
    "temperature applied after the softmax",
    "Temperature divides the *logits*, before the softmax: softmax(logits / τ). "
    "Dividing the probabilities by τ changes nothing once they are renormalised, and "
    "a second softmax of probabilities (numbers in [0, 1]) is almost uniform: below "
    "τ = 1 your distribution gets flatter where it should get sharper.",
    S_TEMPERATURE,
)
TEMPERATURE_IGNORED = Diagnosis(
    "temperature applied after the softmax, or not at all",
    "At every temperature your probabilities are the temperature-1 ones. Divide the "
    "logits by the temperature before the softmax: dividing the probabilities instead "
    "(probs / T) is undone by the renormalisation.",
    S_TEMPERATURE,
)
TEMPERATURE_TWICE = Diagnosis(
    "temperature applied twice",
    "Divide the logits by the temperature once: a second division (in a helper, or "
    "before and after a step) gives temperature T², sharper below 1 and flatter above.",
    S_TEMPERATURE,
)
TEMPERATURE_MULTIPLIED = Diagnosis(
    "temperature multiplied instead of divided",
    "Your distribution behaves as if at temperature 1/T: sharper where it should be "
    "flatter and the reverse. Divide the logits by the temperature (logits / T), so "
    "that T < 1 sharpens and T > 1 flattens.",
    S_TEMPERATURE,
)


def _kept_text(mask_row, full_row) -> str:
    ids = mask_row.nonzero().flatten().tolist()
    mass = float(full_row[mask_row].sum())
    return f"{len(ids)} token(s) {ids} holding {mass:.3f}"


@dataclass(frozen=True)
class _Row:
    """One row of one wrong case: what the learner kept and what the reference keeps."""

    case: Case
    row: int
    temperature: float
    top_p: float
    logits: torch.Tensor  # [V] float64, on the CPU
    got: torch.Tensor  # [V] float64
    want: torch.Tensor  # [V] float64

    @property
    def where(self) -> str:
        return f"case {self.case.label}, row {self.row}"

    @property
    def full(self) -> torch.Tensor:
        return _full(self.logits[None], self.temperature)[0]

    @property
    def kept(self) -> torch.Tensor:
        return self.got > KEPT

    @property
    def ref_kept(self) -> torch.Tensor:
        return self.want > KEPT


def _wrong_rows(cases, theirs, ours) -> list[_Row]:
    rows = []
    for case, got, want in zip(cases, theirs, ours):
        if right(got, want):
            continue
        logits, t, p = case.make()
        for r in range(want.size(0)):
            g, w = got[r].detach().double().cpu(), want[r].double().cpu()
            if not torch.allclose(g, w, atol=ATOL, rtol=RTOL, equal_nan=False):
                rows.append(_Row(case, r, t, p, logits[r].double().cpu(), g, w))
    return rows


def _probs_form(title, cases, theirs, ours) -> None:
    """The learner's exception, or an output that is not a [B, V] float tensor."""
    for case, got, want in zip(cases, theirs, ours):
        if isinstance(got, Raised):
            fail(
                title,
                f"your next_token_probs raised {got!r} on case {case.label}.",
                S_TOP_P,
            )
        problem = describe_difference(got, want, ATOL, RTOL)
        if problem and not problem.startswith(("values differ", "your output has NaN")):
            hint = ""
            if isinstance(got, torch.Tensor) and list(got.shape) == [want.size(0)]:
                hint = (
                    " (one number per row: that is a sampled token or an argmax, "
                    "the function returns the whole distribution [B, V])"
                )
            fail(
                title,
                f"on case {case.label}: {problem}{hint}. next_token_probs "
                f"returns the probabilities [B, V] = {list(want.shape)} as a "
                f"float tensor on the logits' device.",
                S_TOP_P,
            )


def _probs_empty(title, rows: list[_Row]) -> None:
    """Rows that keep nothing (NaN, or all zeros)."""
    empty = [r for r in rows if torch.isnan(r.got).any() or not (r.got > KEPT).any()]
    if not empty:
        return
    alone = [r for r in empty if int(r.ref_kept.sum()) == 1]
    first = empty[0]
    what = "NaN" if torch.isnan(first.got).any() else "all zeros"
    if len(alone) == len(empty):
        top = float(first.full.max())
        observed = (
            f"On {first.where} your probabilities are {what}: the most "
            f"likely token alone holds {top:.3f} > top_p = {first.top_p}, "
            "and you kept none."
        )
        dropping = [r for r in rows if r not in empty and _drops_crossing(r)]
        if dropping:
            DROPS_CROSSING.fail(title, _crossing_text(dropping[0]) + " " + observed)
        KEEPS_NONE.fail(title, observed)
    fallback(
        title,
        f"on {first.where} your probabilities are {what}, where the reference "
        f"keeps {_kept_text(first.ref_kept, first.full)}",
        S_TOP_P,
        advice="",
    )


def _not_probabilities(title, rows: list[_Row]) -> None:
    for r in rows:
        low, high = float(r.got.min()), float(r.got.max())
        if low < -1e-6 or high > 1 + 1e-6:
            NOT_PROBABILITIES.fail(
                title, f"On {r.where} your values run from {low:.3g} to {high:.3g}."
            )


def _is_top_set(kept, full) -> bool:
    """Every kept token is at least as likely as every dropped one."""
    if kept.all() or not kept.any():
        return True
    return bool(full[kept].min() >= full[~kept].max())


def _drops_crossing(r: _Row) -> bool:
    """The reference's set less exactly its least likely token (the crossing one)."""
    ref, kept = r.ref_kept, r.kept
    if int(ref.sum()) != int(kept.sum()) + 1 or (kept & ~ref).any():
        return False
    missing = int((ref & ~kept).nonzero()[0])
    return bool(r.full[missing] == r.full[ref].min())


def _reaches_exactly(r: _Row) -> bool:
    """The reference's kept set holds top_p exactly (the exact case)."""
    return abs(float(r.full[r.ref_kept].sum()) - r.top_p) < 1e-7


def _crossing_text(r: _Row) -> str:
    missing = int((r.ref_kept & ~r.kept).nonzero()[0])
    how = (
        f"brings the sum up to top_p = {r.top_p} exactly (the set must *reach* top_p)"
        if _reaches_exactly(r)
        else f"carries the sum across top_p = {r.top_p}"
    )
    return (
        f"On {r.where} you keep {_kept_text(r.kept, r.full)}; the reference keeps "
        f"{_kept_text(r.ref_kept, r.full)}: token {missing} (probability "
        f"{float(r.full[missing]):.3f}) is the one that {how}."
    )


def _keeps_one_more(r: _Row) -> bool:
    """The reference's set plus exactly one token, the most likely of those it drops."""
    ref, kept = r.ref_kept, r.kept
    if int(kept.sum()) != int(ref.sum()) + 1 or (ref & ~kept).any():
        return False
    extra = int((kept & ~ref).nonzero()[0])
    return bool(r.full[extra] == r.full[~ref].max())


def _one_more_text(r: _Row) -> str:
    extra = int((r.kept & ~r.ref_kept).nonzero()[0])
    held = float(r.full[r.ref_kept].sum())
    exactly = " exactly" if _reaches_exactly(r) else ""
    return (
        f"On {r.where} you keep {_kept_text(r.kept, r.full)}; the reference keeps "
        f"{_kept_text(r.ref_kept, r.full)}: those already hold {held:.3f}, "
        f"which is top_p = {r.top_p}{exactly}, so token {extra} (probability "
        f"{float(r.full[extra]):.3f}) is one too many."
    )


def _above_threshold(r: _Row) -> torch.Tensor:
    """The tokens whose own probability is at least 1 - top_p, and the argmax."""
    keep = r.full >= 1 - r.top_p
    keep[r.full.argmax()] = True
    return keep


def _share_of_vocabulary(r: _Row) -> torch.Tensor:
    """The ceil(top_p·V) most likely tokens."""
    k = max(1, math.ceil(r.top_p * r.full.numel()))
    keep = torch.zeros_like(r.full, dtype=torch.bool)
    keep[r.full.topk(k).indices] = True
    return keep


def _support_problems(title, rows: list[_Row]) -> None:
    """The learner's kept set differs from the reference's: name how."""
    differ = [r for r in rows if not torch.equal(r.kept, r.ref_kept)]
    if not differ:
        return
    first = differ[0]
    observed = (
        f"On {first.where} you keep {_kept_text(first.kept, first.full)}; the "
        f"reference keeps {_kept_text(first.ref_kept, first.full)}."
    )
    unsorted = [r for r in differ if not _is_top_set(r.kept, r.full)]
    if unsorted:
        r = unsorted[0]
        NOT_TOP_TOKENS.fail(
            title,
            f"On {r.where} you keep "
            f"{_kept_text(r.kept, r.full)}, while a more likely "
            "token is dropped.",
        )
    if all(_drops_crossing(r) for r in differ):
        DROPS_CROSSING.fail(title, _crossing_text(first))
    if all(_keeps_one_more(r) for r in differ):
        exact = [r for r in differ if _reaches_exactly(r)]
        if exact:
            KEEPS_ONE_TOO_MANY.fail(title, _one_more_text(exact[0]))
        fallback(
            title,
            f"{_one_more_text(first)} The nucleus is the smallest set of most "
            "likely tokens whose probability reaches top_p",
            S_TOP_P,
            advice="",
        )
    if all(r.kept.all() for r in differ):
        TOP_P_NOT_APPLIED.fail(title, observed)
    if all(torch.equal(r.kept, _above_threshold(r)) for r in differ):
        TOP_P_AS_THRESHOLD.fail(
            title,
            f"{observed} On every row where yours differs you keep exactly the "
            "tokens whose own probability is at least 1 - top_p (and the most "
            "likely one).",
        )
    if all(torch.equal(r.kept, _share_of_vocabulary(r)) for r in differ):
        k = int(_share_of_vocabulary(first).sum())
        TOP_P_AS_FRACTION.fail(
            title,
            f"{observed} On every row where yours differs you keep the "
            f"ceil(top_p·V) most likely tokens ({k} here), whatever they hold.",
        )
    fallback(
        title,
        f"the tokens you keep differ from the reference's. {observed} The "
        "nucleus is the smallest set of most likely tokens whose probability "
        "reaches top_p",
        S_TOP_P,
        advice="",
    )


def _slope(r: _Row):
    """(slope, largest residual) of log(got) against the logits on the kept tokens,
    or None with fewer than 3 kept tokens."""
    kept = r.kept & ~torch.isnan(r.got)
    if int(kept.sum()) < 3:
        return None
    x, y = r.logits[kept], r.got[kept].log()
    dx = x - x.mean()
    slope = float((dx * (y - y.mean())).sum() / (dx**2).sum())
    residual = float((y - y.mean() - slope * dx).abs().max())
    return slope, residual


def _entropy(probs) -> float:
    p = probs[probs > 0]
    return float(-(p * p.log()).sum())


#: A slope fitted to float32 log-probabilities, against a candidate's.
_close = functools.partial(near, rel=2e-3)


def _temperature_problems(title, rows: list[_Row]) -> None:
    """Only the cases at a temperature other than 1 are wrong: read the temperature the
    learner's distribution has."""
    fits = [(r, f) for r in rows if (f := _slope(r)) is not None]
    if not fits:
        return
    linear = all(res < 1e-3 for _, (_, res) in fits)
    r, (slope, _) = fits[0]
    t = r.temperature
    if linear:
        effective = 1 / slope
        observed = (
            f"On {r.where}, log-probability against logit has slope "
            f"{slope:.4g}: your distribution is at temperature "
            f"{effective:.4g}, expected {t}."
        )
        if all(_close(1 / s, 1.0) for _, (s, _) in fits):
            TEMPERATURE_IGNORED.fail(title, observed)
        if all(_close(1 / s, 1 / f.temperature) for f, (s, _) in fits):
            TEMPERATURE_MULTIPLIED.fail(title, observed)
        if all(_close(1 / s, f.temperature**2) for f, (s, _) in fits):
            TEMPERATURE_TWICE.fail(
                title, observed + " On every case the temperature measured is T²."
            )
        if all(_close(1 / s, f.temperature) for f, (s, _) in fits):
            at_one = [
                _top_p_set(_full(f.logits[None], 1.0), f.top_p)[0] for f, _ in fits
            ]
            if all(torch.equal(f.kept, s) for (f, _), s in zip(fits, at_one)):
                TOP_P_BEFORE_TEMPERATURE.fail(
                    title,
                    f"On {r.where} you keep {_kept_text(r.kept, r.full)}: the "
                    "set top_p picks at temperature 1; at temperature "
                    f"{t} it is {_kept_text(r.ref_kept, r.full)}.",
                )
            return  # the temperature is right: the kept set is what differs
        fallback(
            title,
            f"only the cases at a temperature other than 1 are wrong. {observed}",
            S_TEMPERATURE,
            advice="",
            stop="",
        )
    sharper = [f for f, _ in fits if f.temperature < 1]
    if sharper and all(_entropy(f.got) > _entropy(f.want) + 1e-3 for f in sharper):
        f = sharper[0]
        TEMPERATURE_AFTER_SOFTMAX.fail(
            title,
            f"On {f.where} (a temperature below 1) your distribution has "
            f"entropy {_entropy(f.got):.3f} nats, the reference's "
            f"{_entropy(f.want):.3f}: flatter, not sharper, and its log is "
            "not a straight line in the logits.",
        )
    fallback(
        title,
        f"only the cases at a temperature other than 1 are wrong. On {r.where} "
        "the log of your probabilities is not a straight line in the logits "
        "(no temperature gives it)",
        S_TEMPERATURE,
        advice="",
    )


def _pipeline_on_probabilities(logits, temperature, top_p):
    """The whole pipeline run on softmax(logits) as if they were logits."""
    return sampling.next_token_probs(logits.softmax(-1), temperature, top_p=top_p)


def _nucleus_then_softmax_of_probabilities(logits, temperature, top_p):
    """The nucleus of softmax(logits), values softmax(probs / T) renormalised on it."""
    probs = logits.softmax(-1)
    keep = _top_p_set(probs.double(), top_p)
    values = (probs / temperature).softmax(-1).masked_fill(~keep, 0.0)
    return values / values.sum(-1, keepdim=True)


def _after_softmax(title, cases, theirs) -> None:
    """The learner's function equals one that divides probabilities, not logits."""
    for variant in (_pipeline_on_probabilities, _nucleus_then_softmax_of_probabilities):
        outs = [run(variant, c.make()) for c in cases]
        if all(
            isinstance(g, torch.Tensor)
            and isinstance(v, torch.Tensor)
            and g.shape == v.shape
            and torch.allclose(g.detach().float(), v.float(), atol=ATOL, rtol=RTOL)
            for g, v in zip(theirs, outs)
        ):
            TEMPERATURE_AFTER_SOFTMAX.fail(
                title,
                "Your probabilities equal, on every case, those of a softmax "
                "taken of probabilities divided by the temperature.",
            )


def _sums_problems(title, rows: list[_Row]) -> None:
    for r in rows:
        total = float(r.got.sum())
        if abs(total - 1) > 1e-4:
            scaled = r.got / total
            note = (
                " Divided by that sum, your row equals the reference's."
                if torch.allclose(scaled, r.want, atol=ATOL, rtol=RTOL)
                else ""
            )
            NOT_RENORMALISED.fail(
                title, f"On {r.where} your probabilities sum to {total:.4f}.{note}"
            )


def _shifted_down(case: Case) -> tuple:
    """The case's arguments with each row's largest logit subtracted: the same
    distribution, every logit <= 0."""
    logits, t, p = case.make()
    return logits - logits.max(dim=-1, keepdim=True).values, t, p


def _overflow_problems(title, fn, cases, theirs, ours) -> None:
    """Wrong on the large logits, right on the same logits shifted down: the learner's
    exp overflows (a right function cannot tell the two apart)."""
    case, got, want = cases[LARGE], theirs[LARGE], ours[LARGE]
    if right(got, want) or not isinstance(got, torch.Tensor):
        return
    args = _shifted_down(case)
    shifted = _as_float32(run(fn, args))
    finite = isinstance(shifted, torch.Tensor) and bool(shifted.isfinite().all())
    broken = not bool(got.isfinite().all())
    if not (right(shifted, _reference_probs(*args)) or (broken and finite)):
        return
    logits, t, _ = case.make()
    what = (
        "has NaN or inf"
        if broken
        else f"is off by up to {float((got.double() - want.double()).abs().max()):.3g}"
    )
    SOFTMAX_OVERFLOW.fail(
        title,
        f"On case {case.label} (logits / temperature up to "
        f"{float(logits.max()) / t:.0f}) your output {what}; "
        "on the same logits minus each row's largest (the "
        "same distribution) it is right.",
    )


@single_threaded
@keeps_random_state
def check_next_token_probs(next_token_probs) -> None:
    """``next_token_probs(logits [B, V], temperature, top_p) -> probs [B, V]``: divide
    by the temperature, keep the smallest set of most likely tokens reaching top_p (the
    crossing token included), renormalise."""
    title = "next_token_probs"
    verify_integrity()
    cases = prob_cases()
    with torch.no_grad():
        ours = [run(_reference_probs, c.make()) for c in cases]
        theirs = [_as_float32(run(next_token_probs, c.make())) for c in cases]
    for case, want in zip(cases, ours):
        if isinstance(want, Raised):
            raise RuntimeError(  # noqa: TRY004 (the reference failing is no type error)
                f"reference failed on case {case.label}: {want!r}"
            )
    if right(theirs[EXACT], _exact_answer()):
        # Where a device's exp rounds the powers of two, the reference's float32 sum
        # may fall a hair off top_p; the exact answer is right all the same.
        ours[EXACT] = _exact_answer()
    if all(right(g, w) for g, w in zip(theirs, ours)):
        passed(
            title,
            f"matches the reference on {len(cases)} cases "
            "(temperatures 0.5 to 2, top_p 0.5 to 1)",
        )
        return
    _probs_form(title, cases, theirs, ours)
    # The large and the exact case catch what the others cannot; a mistake the others
    # show is read off those alone, as if the two were not there.
    plain = [i for i in range(len(cases)) if i not in (LARGE, EXACT)]
    if all(right(theirs[i], ours[i]) for i in plain):
        _overflow_problems(title, next_token_probs, cases, theirs, ours)
        focus = [LARGE, EXACT]
    else:
        focus = plain
    _probs_problems(
        title,
        [cases[i] for i in focus],
        [theirs[i] for i in focus],
        [ours[i] for i in focus],
    )


def _probs_problems(title, cases, theirs, ours) -> None:
    """Name the mistake the wrong ones among ``cases`` show (after the form is
    right)."""
    rows = _wrong_rows(cases, theirs, ours)
    _probs_empty(title, rows)
    _not_probabilities(title, rows)
    _after_softmax(title, cases, theirs)
    at_one_right = all(
        right(g, w) for c, g, w in zip(cases, theirs, ours) if c.make()[1] == 1.0
    )
    if at_one_right:
        _temperature_problems(title, rows)
    _support_problems(title, rows)
    _sums_problems(title, rows)
    problems = [
        (c, m)
        for c, g, w in zip(cases, theirs, ours)
        if (m := describe_difference(g, w, ATOL, RTOL))
    ]
    case, msg = problems[0]
    fallback(
        title,
        f"wrong on {len(problems)} of {len(cases)} cases, with the right "
        f"tokens kept and rows summing to 1. First: case {case.label}: {msg}",
        S_TEMPERATURE,
    )


@single_threaded
@keeps_random_state
def check_next_token_probs_by_hand(next_token_probs) -> None:
    """Hidden test: the learner wrote it, not a call of the course's sampling code."""
    args = prob_cases()[3].make()
    check_not_delegated(
        "next_token_probs",
        lambda: run(next_token_probs, args),
        forbidden=("tformer_ref",),
    )


seal(__name__)
