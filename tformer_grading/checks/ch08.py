"""Checks for chapter 8, generation (book/ch08_generation).

The exercise writes ``next_token_probs`` (temperature and top-p), ``lm_step`` (one
incremental step of a ``DecoderOnlyLM`` with a KV cache) and ``generate_greedy``
(greedy decoding with a fresh cache). Every check judges behaviour only:

- probabilities: which tokens the learner keeps (against the reference's set, the
  set at temperature 1, the crossing token, the token after a sum that reaches top_p
  exactly), whether rows sum to 1, the effective temperature read off the slope of
  log-probability against the logits, and, on large logits, whether the same logits
  shifted down (the same distribution) come out right (an exp that overflows);
- ``lm_step``: the cache's length after each call, the outputs on an empty cache and
  after cached tokens, the same call twice on a model with dropout in eval mode, the
  same calls on a copy of the model whose positional table is constant (any position
  mistake vanishes there) and the start position that reproduces a call, and which
  earlier tokens each new query is influenced by (what the mask lets it attend to);
- ``generate_greedy``: the tokens, their dtype and length, the same call twice, what
  the loop fed the model (a hook on the token embedding) and got back (on
  ``lm_head``), and how many tokens the first block's cache held at each step (a
  pre-hook on its attention): none at a step after the first is a cache made anew,
  some at a call's first step is a cache carried over.
"""

from __future__ import annotations

import copy
import functools
import inspect
import math
import re
from dataclasses import dataclass

import torch

from tformer_ref import sampling
from tformer_ref.decoding import beam_search, greedy_decode
from tformer_ref.device import get_device
from tformer_ref.kv_cache import KVCache
from tformer_ref.masks import causal_mask
from tformer_ref.model import DecoderOnlyLM
from tformer_ref.positions import LearnedPositionalEmbedding

from ..guard.integrity import seal
from .delegation import check_not_delegated
from .diagnosis import (
    UNEXPLAINED,
    Case,
    CheckFailure,
    Diagnosis,
    Pitfall,
    Raised,
    Section,
    describe_difference,
    fail,
    passed,
    quiet,
    run,
    single_threaded,
    verify_integrity,
)
from .measure.sizes import named
from .measure.softmax import normalised_over

CHAPTER = "ch08_generation"
# Some diagnoses point to chapter 5's sections: the pitfall index still lists them
# under this exercise.
ASSIGNMENT = "ch08_generation"
S_TEMPERATURE = Section(CHAPTER, "8.5", "Temperature")
S_TOP_P = Section(CHAPTER, "8.6", "Top-k and top-p")
S_CACHE = Section(CHAPTER, "8.7", "The KV cache")
S_CACHE_PITFALLS = Section(CHAPTER, "8.8", "Decoding with a cache: three pitfalls")
# The model's own parts are chapter 5's lessons.
S_EMBED = Section("ch05_model", "5.5", "Embeddings scaled by sqrt(d_model)")
S_LM = Section("ch05_model", "5.8", "A decoder-only model")

ATOL, RTOL = 1e-5, 1e-4
#: A probability at or below this counts as "not kept" (the cases keep none smaller).
KEPT = 1e-9


def keeps_random_state(check):
    """Decorator: the check's draws (reference sampling, module initialisation, the
    learner's own) leave the notebook's random state as it was."""

    @functools.wraps(check)
    def run_check(*args, **kwargs):
        __tracebackhide__ = True
        device = get_device()
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            return check(*args, **kwargs)

    return run_check


def _right(got, want) -> bool:
    return describe_difference(got, want, ATOL, RTOL) is None


def _tokens_text(ids) -> str:
    return "[" + ", ".join(str(int(i)) for i in ids) + "]"


# =========================================================================== probs
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
ROWS_COPIED = Diagnosis(
    "every row gets row 0's tokens",
    "Each row of the prompt is its own sequence: run the whole batch through lm_step "
    "together, [B, S] at first and [B, 1] after, and take each row's own argmax.",
    S_CACHE,
)
PROMPT_CUT = Diagnosis(
    "the prompt's first token is dropped",
    "The prompt goes in whole: the shift of teacher forcing (inputs tgt[:, :-1], "
    "labels tgt[:, 1:]) belongs to training, not to generation.",
    S_CACHE,
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
        if _right(got, want):
            continue
        logits, t, p = case.make()
        for r in range(want.size(0)):
            g, w = got[r].detach().double().cpu(), want[r].double().cpu()
            if not torch.allclose(g, w, atol=ATOL, rtol=RTOL, equal_nan=False):
                rows.append(_Row(case, r, t, p, logits[r].double().cpu(), g, w))
    return rows


def _probs_form(title, cases, theirs, ours) -> None:
    """The learner's exception, or an output that is not a [B, V] float tensor."""
    __tracebackhide__ = True
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
    __tracebackhide__ = True
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
    fail(
        title,
        f"on {first.where} your probabilities are {what}, where the reference "
        f"keeps {_kept_text(first.ref_kept, first.full)}. It {UNEXPLAINED}.",
        S_TOP_P,
    )


def _not_probabilities(title, rows: list[_Row]) -> None:
    __tracebackhide__ = True
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
    __tracebackhide__ = True
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
        fail(
            title,
            f"{_one_more_text(first)} The nucleus is the smallest set of most "
            f"likely tokens whose probability reaches top_p. It {UNEXPLAINED}.",
            S_TOP_P,
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
    fail(
        title,
        f"the tokens you keep differ from the reference's. {observed} The "
        f"nucleus is the smallest set of most likely tokens whose probability "
        f"reaches top_p. It {UNEXPLAINED}.",
        S_TOP_P,
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


def _close(a: float, b: float, rel: float = 2e-3) -> bool:
    return abs(a - b) <= rel * abs(b)


def _temperature_problems(title, rows: list[_Row]) -> None:
    """Only the cases at a temperature other than 1 are wrong: read the temperature the
    learner's distribution has."""
    __tracebackhide__ = True
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
        fail(
            title,
            "only the cases at a temperature other than 1 are wrong. "
            f"{observed} It {UNEXPLAINED}.",
            S_TEMPERATURE,
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
    fail(
        title,
        f"only the cases at a temperature other than 1 are wrong. On {r.where} "
        "the log of your probabilities is not a straight line in the logits "
        f"(no temperature gives it). It {UNEXPLAINED}.",
        S_TEMPERATURE,
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
    __tracebackhide__ = True
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
    __tracebackhide__ = True
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
    __tracebackhide__ = True
    case, got, want = cases[LARGE], theirs[LARGE], ours[LARGE]
    if _right(got, want) or not isinstance(got, torch.Tensor):
        return
    args = _shifted_down(case)
    shifted = _as_float32(run(fn, args))
    finite = isinstance(shifted, torch.Tensor) and bool(shifted.isfinite().all())
    broken = not bool(got.isfinite().all())
    if not (_right(shifted, _reference_probs(*args)) or (broken and finite)):
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
    __tracebackhide__ = True
    title = "next_token_probs"
    verify_integrity()
    cases = prob_cases()
    with torch.no_grad():
        ours = [run(_reference_probs, c.make()) for c in cases]
        theirs = [_as_float32(run(next_token_probs, c.make())) for c in cases]
    for case, want in zip(cases, ours):
        if isinstance(want, Raised):
            raise RuntimeError(f"reference failed on case {case.label}: {want!r}")
    if _right(theirs[EXACT], _exact_answer()):
        # Where a device's exp rounds the powers of two, the reference's float32 sum
        # may fall a hair off top_p; the exact answer is right all the same.
        ours[EXACT] = _exact_answer()
    if all(_right(g, w) for g, w in zip(theirs, ours)):
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
    if all(_right(theirs[i], ours[i]) for i in plain):
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
    __tracebackhide__ = True
    rows = _wrong_rows(cases, theirs, ours)
    _probs_empty(title, rows)
    _not_probabilities(title, rows)
    _after_softmax(title, cases, theirs)
    at_one_right = all(
        _right(g, w) for c, g, w in zip(cases, theirs, ours) if c.make()[1] == 1.0
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
    fail(
        title,
        f"wrong on {len(problems)} of {len(cases)} cases, with the right "
        f"tokens kept and rows summing to 1. First: case {case.label}: {msg}. "
        f"It {UNEXPLAINED}; compare your code with the lesson step by step.",
        S_TEMPERATURE,
    )


@single_threaded
@keeps_random_state
def check_next_token_probs_by_hand(next_token_probs) -> None:
    """Hidden test: the learner wrote it, not a call of the course's sampling code."""
    __tracebackhide__ = True
    args = prob_cases()[3].make()
    check_not_delegated(
        "next_token_probs",
        lambda: run(next_token_probs, args),
        forbidden=("tformer_ref",),
    )


# =========================================================================== models


def lm(
    seed: int,
    *,
    norm_first: bool,
    positions: str,
    std: float | None = None,
    dropout: float = 0.0,
    **kwargs,
) -> DecoderOnlyLM:
    """A tiny seeded DecoderOnlyLM(V=11, D=16, H=2, L=2, F=32, max_len=24) in eval mode
    on the course's device; ``std`` redraws every weight matrix from N(0, std²) (an
    untrained model with Xavier weights repeats one token forever)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = DecoderOnlyLM(
            11,
            16,
            2,
            2,
            32,
            dropout=dropout,
            max_len=24,
            pad_id=None,
            norm_first=norm_first,
            positions=positions,
            **kwargs,
        )
        if std is not None:
            with torch.no_grad():
                for p in model.parameters():
                    if p.dim() > 1:
                        p.normal_(0.0, std)
    return model.to(get_device()).eval()


def _ids(b: int, s: int, seed: int, vocab: int = 11) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (b, s), generator=g).to(get_device())


# =========================================================================== lm_step


@dataclass(frozen=True)
class StepCase:
    """A model, the tokens the reference caches first (``past`` [B, P] or None), and the
    chunks [B, S_k] handed to the step one after the other on that cache."""

    label: str
    model: DecoderOnlyLM
    past: torch.Tensor | None
    chunks: tuple

    def fresh(self):
        return self.past, tuple(c.clone() for c in self.chunks)


def _model_1():
    return lm(1, norm_first=False, positions="sinusoidal")


def _model_2():
    return lm(2, norm_first=True, positions="learned", std=0.5)


def _model_3():
    return lm(
        3,
        norm_first=False,
        positions="learned",
        std=0.5,
        fused=False,
        tie_embeddings=True,
    )


def _model_5():
    # Dropout 0.1 in eval mode: the model's own forward drops nothing, a dropout that
    # ignores the mode (F.dropout's training=True default) drops at random.
    return lm(5, norm_first=True, positions="learned", std=0.5, dropout=0.1)


# The step and generation models' sizes (see lm), named so that a crash's numbers read.
LM_SIZES = "V=11, D=16, H=2, Dh=8"
M1 = f"model 1 (Post-LN, sinusoidal positions; {LM_SIZES})"
M2 = f"model 2 (Pre-LN, learned positions, final LayerNorm; {LM_SIZES})"
M3 = f"model 3 (Post-LN, learned positions, tied embeddings; {LM_SIZES})"
M5 = f"model 5 (Pre-LN, learned positions, dropout=0.1, in eval mode; {LM_SIZES})"


def step_cases() -> list[StepCase]:
    m1, m2, m3, m5 = _model_1(), _model_2(), _model_3(), _model_5()
    return [
        StepCase(f"{M1}, empty cache, tokens [B=2, S=5]", m1, None, (_ids(2, 5, 80),)),
        StepCase(f"{M2}, empty cache, tokens [B=2, S=4]", m2, None, (_ids(2, 4, 81),)),
        StepCase(
            f"{M1}, the cache holding T=6 tokens (filled by the reference), "
            "tokens [B=2, S=1]",
            m1,
            _ids(2, 6, 82),
            (_ids(2, 1, 83),),
        ),
        StepCase(
            f"{M2}, the cache holding T=4 tokens (filled by the reference), "
            "tokens [B=2, S=3]",
            m2,
            _ids(2, 4, 84),
            (_ids(2, 3, 85),),
        ),
        StepCase(
            f"{M3}, the cache holding T=5 tokens (filled by the reference), "
            "tokens [B=1, S=2]",
            m3,
            _ids(1, 5, 86),
            (_ids(1, 2, 87),),
        ),
        StepCase(
            f"{M2}, an empty cache and your lm_step called 5 times with tokens "
            "[1, 4], [1, 1], [1, 1], [1, 2], [1, 1]",
            m2,
            None,
            tuple(_ids(1, s, 90 + i) for i, s in enumerate((4, 1, 1, 2, 1))),
        ),
        StepCase(f"{M5}, empty cache, tokens [B=2, S=4]", m5, None, (_ids(2, 4, 96),)),
        StepCase(
            f"{M5}, the cache holding T=3 tokens (filled by the reference), "
            "tokens [B=2, S=2]",
            m5,
            _ids(2, 3, 97),
            (_ids(2, 2, 98),),
        ),
    ]


def _reference_step(model, tokens, cache):
    return model(tokens, cache=cache)


def _layer_lengths(cache) -> tuple:
    return tuple(kv.length for kv in getattr(cache, "layers", ()))


@dataclass
class StepRun:
    """Each call's output (or Raised), the cache's layer lengths before and after, and
    whether a call left part of the model in train mode (put back in eval mode)."""

    outputs: list
    lengths: list  # [(before, after)] per call, tuples of layer lengths
    trained: bool = False


def _run_steps(step, model, past, chunks) -> StepRun:
    cache = KVCache()
    trained = False
    with torch.no_grad(), quiet():
        if past is not None:
            model(past, cache=cache)
        outputs, lengths = [], []
        for chunk in chunks:
            before = _layer_lengths(cache)
            out = run(step, (model, chunk, cache))
            if any(m.training for m in model.modules()):
                trained = True
                model.eval()
            outputs.append(out)
            lengths.append((before, _layer_lengths(cache)))
            if isinstance(out, Raised):
                break
    return StepRun(outputs, lengths, trained)


def _run_case(step, case: StepCase, model=None) -> StepRun:
    past, chunks = case.fresh()
    return _run_steps(step, model or case.model, past, chunks)


def _case_right(got: StepRun, want: StepRun) -> bool:
    return len(got.outputs) == len(want.outputs) and all(
        _right(g, w) for g, w in zip(got.outputs, want.outputs)
    )


def _first_problem(got: StepRun, want: StepRun) -> tuple[int, str]:
    for k, (g, w) in enumerate(zip(got.outputs, want.outputs)):
        problem = describe_difference(g, w, ATOL, RTOL)
        if problem:
            return k, problem
    return len(got.outputs), "fewer calls completed"


NOT_CAUSAL = Diagnosis(
    "not causal: the future is visible",
    "Changing a later token changed the logits of an earlier one. Pass every block "
    "the causal keep-mask, causal_mask(S, device, past=cache.length): query i may "
    "attend to the cached keys and the new keys up to its own position only.",
    S_CACHE_PITFALLS,
)
CACHE_NOT_GROWN = Diagnosis(
    "the cache is not grown",
    "lm_step must leave the new tokens' keys and values in the cache it is given, so "
    "that the next step attends to them: block i appends to cache.layer(i) when you "
    "call block(x, mask, cache.layer(i)). A block called without its LayerKV, or a new "
    "KVCache made inside lm_step, leaves the caller's cache as it was.",
    S_CACHE,
)
CACHE_GROWN_TWICE = Diagnosis(
    "the cache is grown twice",
    "Each call must add exactly the S new tokens to every layer: every block runs once "
    "per call, with its own cache.layer(i). Running a block (or the whole stack) a "
    "second time appends the same keys again, and the next queries attend to them "
    "twice.",
    S_CACHE,
)
ONE_LAYER_FOR_ALL = Diagnosis(
    "every block uses the same cache layer",
    "Block i keeps its keys and values in cache.layer(i): the layers' keys differ, so "
    "each needs its own LayerKV (for i, block in enumerate(model.blocks.layers): "
    "x = block(x, mask, cache.layer(i))).",
    S_CACHE,
)
CACHE_EMPTIED = Diagnosis(
    "the cached past is dropped",
    "The tokens already in the cache are the context of the new ones: lm_step appends "
    "to the cache it is given and never empties it (no cache.reset(), no new KVCache "
    "inside lm_step). The caller resets it between prompts.",
    S_CACHE,
)
ONE_NEW_TOKEN_KEPT = Diagnosis(
    "only one of the new tokens goes through",
    "lm_step takes S new tokens at once (the whole prompt on the first call): every "
    "one of them goes through the blocks and into the cache, and the logits are "
    "[B, S, V].",
    S_CACHE,
)
LAYER_LEFT_OUT = Diagnosis(
    "a block is left out of the step",
    "Every block runs once per call, block i with cache.layer(i): for i, block in "
    "enumerate(model.blocks.layers). A layer whose cache does not grow is a block "
    "that did not run (a range one short) or ran with another layer's cache (an index "
    "off by one).",
    S_CACHE,
)
PROBABILITIES = Diagnosis(
    "probabilities instead of logits",
    "lm_step returns the logits, model.lm_head's output: generate_greedy takes their "
    "argmax and next_token_probs applies its own softmax with a temperature, so a "
    "softmax inside lm_step is applied twice.",
    S_LM,
)
POSITIONS_NOT_OFFSET = Diagnosis(
    "positions not offset by the cache length",
    "The S new tokens come after the cache.length tokens already cached, so they sit "
    "at positions cache.length .. cache.length + S - 1: "
    "model.pos(x, start=cache.length). "
    "Read cache.length once, before the blocks grow the cache.",
    S_CACHE_PITFALLS,
)
MASK_SHAPE = Diagnosis(
    "causal mask of the wrong shape",
    "With a cache the S new queries attend to cache.length + S keys, so the mask is "
    "[1, 1, S, cache.length + S]: causal_mask(S, device, past=cache.length), with "
    "cache.length read once, before the blocks grow the cache. A mask for the full "
    "length is [T, T], one for the new tokens alone [S, S]: neither fits.",
    S_CACHE_PITFALLS,
)
MASK_ROWS = Diagnosis(
    "causal mask rows for the wrong positions",
    "The new query i sits at position cache.length + i and may attend to every key up "
    "to there: the rows of the mask are the *last* S rows of the full-length causal "
    "mask (causal_mask(S, device, past=cache.length)), not its first S rows.",
    S_CACHE_PITFALLS,
)


S_DROPOUT = Section("ch04_blocks", "4.4", "Where dropout goes")
DROPOUT_ACTIVE = Diagnosis(
    "dropout active at inference (F.dropout without training=model.training, or the "
    "model left in train mode)",
    "In eval mode dropout must do nothing, so that the same tokens always give the "
    "same logits. model.dropout (an nn.Dropout) follows model.eval() by itself; "
    "F.dropout(x, p) does not: its training argument defaults to True, so it drops "
    "at inference too. Call model.dropout(x), or F.dropout(x, p, "
    "training=model.training); and never call model.train() in a decoding step.",
    S_DROPOUT,
)
POSITIONS_WRONG = Diagnosis(
    "positions added wrongly (twice, or from the wrong start)",
    "The S tokens of a step sit at positions cache.length .. cache.length + S - 1, "
    "and each gets its position's encoding once: x = model.pos(x, start=cache.length) "
    "(model.pos returns x with the encodings added; do not add it to x again, and "
    "call it once). On an empty cache that is positions 0 .. S - 1.",
    S_CACHE_PITFALLS,
)


def _no_scale(model, tokens, cache):
    past = cache.length
    mask = causal_mask_for(tokens, past)
    x = model.dropout(model.pos(model.tok_embed(tokens), start=past))
    return model.lm_head(model.blocks(x, mask, cache))


def _scaled_by_d_model(model, tokens, cache):  # d_model, not its square root
    past = cache.length
    mask = causal_mask_for(tokens, past)
    x = model.dropout(model.pos(model.tok_embed(tokens) * model.d_model, start=past))
    return model.lm_head(model.blocks(x, mask, cache))


def _scaled_after_positions(model, tokens, cache):  # the positions scaled too
    past = cache.length
    mask = causal_mask_for(tokens, past)
    x = model.pos(model.tok_embed(tokens), start=past) * model.d_model**0.5
    return model.lm_head(model.blocks(model.dropout(x), mask, cache))


def _no_final_norm(model, tokens, cache):
    past = cache.length
    mask = causal_mask_for(tokens, past)
    x = model.tok_embed(tokens) * model.d_model**0.5
    x = model.dropout(model.pos(x, start=past))
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(x)


def _no_positions(model, tokens, cache):
    mask = causal_mask_for(tokens, cache.length)
    x = model.dropout(model.tok_embed(tokens) * model.d_model**0.5)
    return model.lm_head(model.blocks(x, mask, cache))


def causal_mask_for(tokens, past):
    """The keep-mask [1, 1, S, past + S] of S new tokens after ``past`` cached ones."""
    return causal_mask(tokens.size(1), tokens.device, past=past)


EMPTY_CACHE_PITFALLS = (
    Pitfall(
        "embeddings not scaled by sqrt(d_model)",
        "The token embeddings are multiplied by sqrt(model.d_model) before the "
        "positions are added, as in the model's own forward.",
        S_EMBED,
        _no_scale,
    ),
    Pitfall(
        "embeddings scaled by d_model",
        "The token embeddings are multiplied by sqrt(model.d_model), the square root: "
        "d_model itself makes them sqrt(d_model) times too large beside the positions.",
        S_EMBED,
        _scaled_by_d_model,
    ),
    Pitfall(
        "positions scaled with the embeddings",
        "Only the token embeddings are multiplied by sqrt(model.d_model); model.pos "
        "adds the positions' encodings after that, unscaled.",
        S_EMBED,
        _scaled_after_positions,
    ),
    Pitfall(
        "final LayerNorm skipped",
        "After the last block comes model.blocks.norm (a LayerNorm in a Pre-LN "
        "model, nn.Identity in a Post-LN one), then model.lm_head.",
        S_LM,
        _no_final_norm,
    ),
    Pitfall(
        "positions not added",
        "The embeddings go through model.pos(x, start=cache.length), which adds "
        "the positions' encodings, before the blocks.",
        S_LM,
        _no_positions,
    ),
)


def _raised_problems(title, cases, runs) -> None:
    __tracebackhide__ = True
    for case, got in zip(cases, runs):
        for k, out in enumerate(got.outputs):
            if isinstance(out, Raised):
                where = (
                    f"call {k + 1} of case {case.label}"
                    if len(case.chunks) > 1
                    else f"case {case.label}"
                )
                text = str(out.exc).lower()
                if "mask" in text and "shape" in text:
                    MASK_SHAPE.fail(title, f"On {where} your lm_step raised {out!r}.")
                fail(title, f"your lm_step raised {out!r} on {where}.", S_CACHE)


def _form_problems(title, cases, runs, refs) -> None:
    __tracebackhide__ = True
    for case, got, want in zip(cases, runs, refs):
        for g, w in zip(got.outputs, want.outputs):
            problem = describe_difference(g, w, ATOL, RTOL)
            if problem is None or problem.startswith(
                ("values differ", "your output has NaN")
            ):
                continue
            b, s, v = w.shape
            hint = ""
            if isinstance(g, torch.Tensor) and list(g.shape) == [b, v]:
                hint = (
                    " (only the last position: return the logits of all S new tokens)"
                )
            elif isinstance(g, torch.Tensor) and list(g.shape) == [
                b,
                s,
                case.model.d_model,
            ]:
                hint = " (the hidden states: model.lm_head turns them into logits)"
            fail(
                title,
                f"on case {case.label}: {problem}{hint}. lm_step returns the "
                f"logits [B, S, V] = {[b, s, v]}.",
                S_CACHE,
            )


def _growth_problems(title, cases, runs) -> None:
    """After each call every layer must hold S more tokens than before."""
    __tracebackhide__ = True
    for case, got in zip(cases, runs):
        n_layers = len(case.model.blocks.layers)
        for k, ((before, after), chunk, out) in enumerate(
            zip(got.lengths, case.chunks, got.outputs)
        ):
            s = chunk.size(1)
            was = before[0] if before else 0
            want = (was + s,) * n_layers
            if after == want:
                continue
            where = (
                f"call {k + 1} of case {case.label}"
                if len(case.chunks) > 1
                else f"case {case.label}"
            )
            seen = (
                f"On {where} ({s} new token(s), {was} cached before), the cache's "
                f"{len(after)} layer(s) hold {list(after)} tokens after your call; "
                f"expected {n_layers} layers holding {list(want)}."
            )
            grown = [a - was for a in after]
            if isinstance(out, Raised):
                # An error midway leaves the cache half grown; one layer that grew for
                # two blocks says why the error came.
                if len(after) == 1 and n_layers > 1 and grown[0] > s:
                    ONE_LAYER_FOR_ALL.fail(
                        title, seen + f" Your lm_step then raised {out!r}."
                    )
                continue
            if not after or all(g == 0 for g in grown) or after == before:
                CACHE_NOT_GROWN.fail(title, seen)
            if len(after) == 1 and n_layers > 1 and grown[0] == n_layers * s:
                ONE_LAYER_FOR_ALL.fail(title, seen)
            if len(after) == n_layers and all(g > s and g % s == 0 for g in grown):
                CACHE_GROWN_TWICE.fail(title, seen)
            if was > 0 and after == (s,) * n_layers:
                CACHE_EMPTIED.fail(title, seen + f" The {was} cached tokens are gone.")
            if s > 1 and len(after) == n_layers and all(g == 1 for g in grown):
                ONE_NEW_TOKEN_KEPT.fail(
                    title, seen + f" Each layer took 1 token where {s} came."
                )
            # Layers the cache never made count as not grown.
            every = grown + [0] * (n_layers - len(after))
            idle = [i for i, g in enumerate(every[:n_layers]) if g == 0]
            extra = [i for i, g in enumerate(every) if i >= n_layers and g > 0]
            if (idle or extra) and any(every) and all(g in (0, s) for g in every):
                said = f" Layer(s) {idle} of the model's {n_layers} did not grow"
                if extra:
                    said += f"; layer(s) {extra}, which the model does not have, did"
                LAYER_LEFT_OUT.fail(title, seen + said + ".")
            fail(
                title,
                f"the cache does not grow by the new tokens. {seen} It {UNEXPLAINED}.",
                S_CACHE,
            )


def _future_visible(step, model) -> str | None:
    """On an empty cache, changing the last token must leave the earlier logits
    alone."""
    tokens = _ids(2, 5, 95)
    changed = tokens.clone()
    changed[:, -1] = (changed[:, -1] + 1) % 11
    base = _run_steps(step, model, None, (tokens,)).outputs[0]
    moved = _run_steps(step, model, None, (changed,)).outputs[0]
    if not (
        type(base) is type(moved) is torch.Tensor
        and base.shape == moved.shape
        and base.dim() == 3
    ):
        return None
    diff = (moved[:, :-1] - base[:, :-1]).abs().amax(dim=(0, 2))
    hit = [i for i, d in enumerate(diff.tolist()) if d > 1e-5]
    if not hit:
        return None
    return (
        f"On {M1} with an empty cache and tokens [2, 5], changing token 4 changed "
        f"the logits at positions {hit} (by up to {float(diff.max()):.3g})."
    )


def _empty_cache_problems(title, step, cases, runs, refs) -> None:
    """Wrong without any cached token: the model's own forward is not reproduced."""
    __tracebackhide__ = True
    empty = [i for i, c in enumerate(cases) if c.past is None and len(c.chunks) == 1]
    wrong = [i for i in empty if not _case_right(runs[i], refs[i])]
    if not wrong:
        return
    observed = _future_visible(step, cases[0].model)
    if observed:
        NOT_CAUSAL.fail(title, observed)
    for pitfall in EMPTY_CACHE_PITFALLS:
        if all(_same_run(runs[i], _run_case(pitfall.impl, cases[i])) for i in empty):
            pitfall.fail(title, "Its logits equal yours on every empty-cache case.")
    _empty_position_problems(title, step, cases, runs, empty, wrong)
    i = wrong[0]
    k, problem = _first_problem(runs[i], refs[i])
    fail(
        title,
        f"wrong already on an empty cache (no cached token): case "
        f"{cases[i].label}: {problem}. It {UNEXPLAINED}; compare your code "
        "with the model's forward step by step.",
        S_LM,
    )


def _has_dropout(model) -> bool:
    return any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in model.modules())


def _dropout_problems(title, step, cases, runs, refs) -> None:
    """The learner's step left the model in train mode, or gives different logits for
    the same call on a model with dropout (in eval mode, where it must do nothing)."""
    __tracebackhide__ = True
    for case, got in zip(cases, runs):
        if got.trained:
            DROPOUT_ACTIVE.fail(
                title,
                f"After your lm_step ran on case {case.label}, "
                "the model (or a part of it) was in train mode.",
            )
    for case, got, want in zip(cases, runs, refs):
        if not _has_dropout(case.model) or _case_right(got, want):
            continue
        again = []
        for seed in (1, 2):
            torch.manual_seed(seed)
            again.append(_run_case(step, case))
        outs = again[0].outputs + again[1].outputs
        if (
            outs
            and all(type(o) is torch.Tensor for o in outs)
            and not _same_run(*again)
        ):
            off = max(
                float((x - y).abs().max())
                for x, y in zip(again[0].outputs, again[1].outputs)
                if x.shape == y.shape
            )
            DROPOUT_ACTIVE.fail(
                title,
                f"On case {case.label} the same call, made "
                "twice (under two random seeds), gave logits "
                f"that differ by up to {off:.3g}: something "
                "random runs although the model is in eval "
                "mode.",
            )


def _positions_twice(model, tokens, cache):
    past = cache.length
    x = model.tok_embed(tokens) * model.d_model**0.5
    x = model.pos(model.pos(x, start=past), start=past)
    return model.lm_head(
        model.blocks(model.dropout(x), causal_mask_for(tokens, past), cache)
    )


def _embeddings_plus_positions(model, tokens, cache):
    past = cache.length
    x = model.tok_embed(tokens) * model.d_model**0.5
    x = x + model.pos(x, start=past)
    return model.lm_head(
        model.blocks(model.dropout(x), causal_mask_for(tokens, past), cache)
    )


def _start_used(step, case: StepCase) -> int | None:
    """The start position other than 0 that reproduces the learner's one call on an
    empty cache, or None."""
    got = _run_case(step, case)
    s = case.chunks[0].size(1)
    for start in range(1, case.model.max_len - s + 1):
        if _same_run(got, _run_case(_at_start(start), case)):
            return start
    return None


def _empty_position_problems(title, step, cases, runs, empty, wrong) -> None:
    """Wrong on an empty cache because of the positions: the tokens placed from the
    wrong start, the encodings added twice, or (on a copy whose positional table is
    the same at every position) right where the positions cannot matter."""
    __tracebackhide__ = True
    starts = []
    for i in wrong:
        start = _start_used(step, cases[i])
        if start is None:
            break
        starts.append(start)
    if len(starts) == len(wrong):
        case, start = cases[wrong[0]], starts[0]
        s = case.chunks[0].size(1)
        sizes = [cases[i].chunks[0].size(1) for i in wrong]
        note = ""
        if all(k == n - 1 for k, n in zip(starts, sizes)):
            note = " (a start of S - 1, the last token's position)"
        elif all(k == starts[0] for k in starts):
            note = f" (a start of {start} instead of cache.length = 0)"
        POSITIONS_WRONG.fail(
            title,
            f"On case {case.label} your {s} token(s) sat at "
            f"position(s) {_ranges(range(start, start + s))}"
            f"{note}; on an empty cache they belong at "
            f"{_ranges(range(s))}.",
        )
    for impl, what in (
        (
            _positions_twice,
            "the positions' encodings added twice (model.pos applied two times)",
        ),
        (
            _embeddings_plus_positions,
            "x + model.pos(x): model.pos already "
            "returns x plus the encodings, so the "
            "embeddings count twice",
        ),
    ):
        if all(_same_run(runs[i], _run_case(impl, cases[i])) for i in empty):
            POSITIONS_WRONG.fail(
                title, f"On every empty-cache case your logits are those of {what}."
            )
    models = {id(cases[i].model): cases[i].model for i in wrong}
    once = {k: _neutral(m) for k, m in models.items()}
    twice = {k: _neutral(m, scale=2.0) for k, m in models.items()}

    def agrees(table, ours):
        return all(
            _case_right(
                _run_case(step, cases[i], table[id(cases[i].model)]),
                _run_case(_reference_step, cases[i], ours[id(cases[i].model)]),
            )
            for i in wrong
        )

    if agrees(once, once):
        POSITIONS_WRONG.fail(
            title,
            "Your logits are wrong already on an empty cache, "
            "and all right on a copy of the model whose "
            "positional table is the same at every position: "
            "the positions your tokens get are wrong.",
        )
    if agrees(once, twice):
        POSITIONS_WRONG.fail(
            title,
            "On a copy of the model whose positional table is "
            "the same row at every position, your logits are "
            "those of the reference with that row doubled: "
            "the encodings are added twice.",
        )


def _same_run(a: StepRun, b: StepRun) -> bool:
    return len(a.outputs) == len(b.outputs) and all(
        isinstance(x, torch.Tensor)
        and isinstance(y, torch.Tensor)
        and x.shape == y.shape
        and torch.allclose(x.detach(), y.detach(), atol=ATOL, rtol=RTOL)
        for x, y in zip(a.outputs, b.outputs)
    )


def _neutral(model: DecoderOnlyLM, scale: float = 1.0) -> DecoderOnlyLM:
    """A copy whose positional table has the same row at every position (``scale``
    times a fixed one): a position mistake changes nothing there."""
    out = copy.deepcopy(model)
    pos = LearnedPositionalEmbedding(model.max_len, model.d_model)
    g = torch.Generator().manual_seed(7)
    row = torch.randn(1, model.d_model, generator=g) * 0.5 * scale
    with torch.no_grad():
        pos.embedding.weight.copy_(row.expand(model.max_len, -1))
    out.pos = pos.to(next(model.parameters()).device)
    return out.eval()


def _at_start(start):
    def step(model, tokens, cache):
        past = cache.length
        mask = causal_mask_for(tokens, past)
        x = model.tok_embed(tokens) * model.d_model**0.5
        x = model.dropout(model.pos(x, start=start))
        return model.lm_head(model.blocks(x, mask, cache))

    return step


def _offset_seen(step, case: StepCase) -> str:
    """Which start position reproduces the learner's single call after the past."""
    got = _run_case(step, case).outputs[0]
    s, past = case.chunks[0].size(1), case.past.size(1)
    for start in range(0, case.model.max_len - s + 1):
        if start != past and _same_run(
            StepRun([got], []), _run_case(_at_start(start), case)
        ):
            return (
                f" On case {case.label}, your {s} new token(s) sat at "
                f"position(s) {_ranges(range(start, start + s))}; after {past} "
                f"cached tokens they belong at {_ranges(range(past, past + s))}."
            )
    return ""


def _position_problems(title, step, cases, wrong) -> None:
    __tracebackhide__ = True
    neutral = {id(cases[i].model): _neutral(cases[i].model) for i in wrong}
    for i in wrong:
        model = neutral[id(cases[i].model)]
        if not _case_right(
            _run_case(step, cases[i], model),
            _run_case(_reference_step, cases[i], model),
        ):
            return
    single = [i for i in wrong if cases[i].past is not None]
    seen = _offset_seen(step, cases[single[0]]) if single else ""
    POSITIONS_NOT_OFFSET.fail(
        title,
        "Your logits are wrong once the cache holds "
        "tokens, and all right on a copy of the model "
        "whose positional table is the same at every "
        f"position.{seen}",
    )


def _influence(step, case: StepCase) -> list[set] | None:
    """For each new query i, the positions whose token changes its logits."""
    past, chunks = case.fresh()
    chunk = chunks[0]
    base = _run_steps(step, case.model, past, (chunk,)).outputs[0]
    if type(base) is not torch.Tensor or base.dim() != 3:
        return None
    n_past, s = past.size(1), chunk.size(1)
    seen = [set() for _ in range(s)]
    for j in range(n_past + s):
        p, c = past.clone(), chunk.clone()
        if j < n_past:
            p[:, j] = (p[:, j] + 1) % 11
        else:
            c[:, j - n_past] = (c[:, j - n_past] + 1) % 11
        out = _run_steps(step, case.model, p, (c,)).outputs[0]
        if type(out) is not torch.Tensor or out.shape != base.shape:
            return None
        diff = (out - base).abs().amax(dim=(0, 2))
        for i in range(s):
            if float(diff[i]) > 1e-5:
                seen[i].add(j)
    return seen


def _ranges(positions) -> str:
    items = sorted(positions)
    if not items:
        return "none"
    if items == list(range(items[0], items[-1] + 1)):
        return f"{items[0]}..{items[-1]}" if len(items) > 1 else str(items[0])
    return _tokens_text(items)


def _mask_problems(title, step, cases, wrong) -> None:
    __tracebackhide__ = True
    for i in (i for i in wrong if cases[i].past is not None):
        case = cases[i]
        seen = _influence(step, case)
        if seen is None:
            continue
        n_past = case.past.size(1)
        for q, keys in enumerate(seen):
            want = set(range(n_past + q + 1))
            if keys == want:
                continue
            observed = (
                f"On case {case.label}, the new token {q} (position "
                f"{n_past + q}) is influenced by the tokens at positions "
                f"{_ranges(keys)}; it should see {_ranges(want)}."
            )
            if any(k > n_past + q for k in keys):
                NOT_CAUSAL.fail(title, observed)
            if keys < want:
                MASK_ROWS.fail(title, observed)
            fail(
                title,
                f"the new queries attend to the wrong tokens. {observed} It "
                f"{UNEXPLAINED}.",
                S_CACHE_PITFALLS,
            )


@single_threaded
@keeps_random_state
def check_lm_step(lm_step) -> None:
    """``lm_step(model, tokens [B, S], cache) -> logits [B, S, V]``: the next S tokens
    after the ``cache.length`` cached ones; grows the cache by S. Equal to
    ``model(tokens, cache=cache)`` on an empty cache and after earlier steps."""
    __tracebackhide__ = True
    title = "lm_step"
    verify_integrity()
    n_cases = _lm_step_problems(title, lm_step)
    passed(
        title,
        f"matches the model's forward on {n_cases} cases, empty cache and "
        "after cached tokens, with dropout in eval mode, and grows the cache "
        "by S",
    )


def _lm_step_problems(title, lm_step) -> int:
    """Raise the lm_step failure, or return the number of cases when it is right
    (printing nothing: check_generate_greedy asks it too)."""
    __tracebackhide__ = True
    cases = step_cases()
    refs = [_run_case(_reference_step, c) for c in cases]
    runs = [_run_case(lm_step, c) for c in cases]
    if all(_case_right(g, w) for g, w in zip(runs, refs)):
        _growth_problems(title, cases, runs)
        return len(cases)
    _growth_problems(title, cases, runs)
    _raised_problems(title, cases, runs)
    _form_problems(title, cases, runs, refs)
    outs = [o for r in runs for o in r.outputs if isinstance(o, torch.Tensor)]
    if outs and all(normalised_over(o.detach(), ((-1,),)) == (-1,) for o in outs):
        PROBABILITIES.fail(
            title,
            "On every case your outputs are non-negative and sum to 1 over the "
            "vocabulary: probabilities.",
        )
    _dropout_problems(title, lm_step, cases, runs, refs)
    # A mistake the cases without dropout show is read off those alone.
    plain = [i for i, c in enumerate(cases) if not _has_dropout(c.model)]
    if not all(_case_right(runs[i], refs[i]) for i in plain):
        cases, runs, refs = ([xs[i] for i in plain] for xs in (cases, runs, refs))
    _empty_cache_problems(title, lm_step, cases, runs, refs)
    wrong = [i for i, (g, w) in enumerate(zip(runs, refs)) if not _case_right(g, w)]
    _position_problems(title, lm_step, cases, wrong)
    _mask_problems(title, lm_step, cases, wrong)
    i = wrong[0]
    k, problem = _first_problem(runs[i], refs[i])
    call = f"call {k + 1} of " if len(cases[i].chunks) > 1 else ""
    fail(
        title,
        "right on an empty cache, wrong once the cache holds tokens: "
        f"{call}case {cases[i].label}: {problem}. It {UNEXPLAINED}; compare "
        "your code with the model's forward step by step.",
        S_CACHE_PITFALLS,
    )


@single_threaded
@keeps_random_state
def check_lm_step_by_hand(lm_step) -> None:
    """Hidden test: the learner built the step from the model's parts, not by calling
    the model's own forward."""
    __tracebackhide__ = True
    case = step_cases()[5]  # an empty cache: the reference fills none inside the record
    check_not_delegated(
        "lm_step",
        lambda: _run_case(lm_step, case),
        forbidden_code={
            inspect.unwrap(
                DecoderOnlyLM.forward
            ).__code__: "the model's own forward, model(tokens, cache=cache)"
        },
    )


# =========================================================================== generate

GEN_CASES = (
    # (model label, model builder, prompt [B, S] seed, B, S, N). The first case's
    # sizes differ from each other and from the model's (V=11, D=16, H=2, Dh=8), so
    # that every number of a crash decodes to one name (measure.sizes).
    (M2, 2, 17, 3, 5, 7),
    ("model 4 (Post-LN, learned positions)", 4, 9, 1, 4, 6),
    (M2, 2, 10, 2, 2, 5),
    # The corners of the loop: one new token, and none (the prompt comes back).
    (M2, 2, 11, 2, 3, 1),
    (M2, 2, 12, 2, 4, 0),
)


def _gen_model(which: int) -> DecoderOnlyLM:
    if which == 2:
        return lm(8, norm_first=True, positions="learned", std=0.5)
    return lm(8, norm_first=False, positions="learned", std=0.5)


@dataclass
class GenCase:
    label: str
    model: DecoderOnlyLM
    prompt: torch.Tensor
    n: int


def gen_cases() -> list[GenCase]:
    models = {2: _gen_model(2), 4: _gen_model(4)}
    out = []
    for name, which, seed, b, s, n in GEN_CASES:
        out.append(
            GenCase(
                f"{name}, prompt [{named(B=b, S=s)}], max_new_tokens={n}",
                models[which],
                _ids(b, s, 200 + seed),
                n,
            )
        )
    return out


def _reference_greedy(model, prompt, n):
    return sampling.generate(model, prompt, n, temperature=0, use_cache=False)


@dataclass
class GenRun:
    """The output (or Raised), and what the loop fed the model: per forward, the token
    ids the embedding saw and the logits lm_head returned; per call of the first
    block's attention, the tokens its cache layer held before the call (None: no
    cache) and the number of new queries."""

    output: object
    fed: list
    logits: list
    prompt_changed: bool
    attended: list


def _record_cache(attended):
    def hook(module, args, kwargs):
        kv = kwargs.get("kv")
        query = args[0] if args else kwargs.get("query")
        cached = getattr(kv, "length", None) if kv is not None else None
        attended.append(
            (
                cached if isinstance(cached, int) else None,
                int(query.size(1)) if isinstance(query, torch.Tensor) else 0,
            )
        )

    return hook


def _run_generate(fn, case: GenCase, seed: int = 0) -> GenRun:
    fed, logits, attended = [], [], []
    model = case.model
    hooks = [
        model.tok_embed.register_forward_hook(
            lambda m, args, out: fed.append(args[0].detach().clone())
        ),
        model.lm_head.register_forward_hook(
            lambda m, args, out: logits.append(out.detach().clone())
        ),
        model.blocks.layers[0].self_attn.register_forward_pre_hook(
            _record_cache(attended), with_kwargs=True
        ),
    ]
    prompt = case.prompt.clone()
    devices = [prompt.device] if prompt.device.type == "cuda" else []
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            output = run(fn, (model, prompt, case.n))
    finally:
        for h in hooks:
            h.remove()
    return GenRun(output, fed, logits, not torch.equal(prompt, case.prompt), attended)


CACHE_CARRIED = Diagnosis(
    "a cache carried over between prompts",
    "State survives from one call to the next: the same call twice gives different "
    "tokens (or fails on the cache), and the next prompt attends to the last one's "
    "tokens. Make a new KVCache() inside generate_greedy on every call; a default "
    "argument (cache=KVCache()), a global, an attribute set on the model or a dict of "
    "caches is made once and shared by all calls.",
    S_CACHE_PITFALLS,
)
ONLY_NEW_TOKENS = Diagnosis(
    "returns only the new tokens",
    "generate_greedy returns the prompt followed by the new tokens, [B, S + N] "
    "(torch.cat([prompt, new], dim=1)).",
    S_CACHE,
)
OFF_BY_ONE = Diagnosis(
    "decoding drops or repeats a token",
    "The output is the prompt and exactly max_new_tokens new tokens, each chosen once: "
    "the prompt's last logits give the first new token, and each step feeds the token "
    "just chosen and gives the next one (N choices, N - 1 single-token steps after the "
    "prompt).",
    S_CACHE,
)
FED_WRONG_TOKEN = Diagnosis(
    "a step feeds the wrong token",
    "After the prompt, each step feeds the model the one token just chosen (shape "
    "[B, 1]), at the next position: the cache already holds everything before it.",
    S_CACHE,
)
PREFIX_AGAIN = Diagnosis(
    "the prefix fed again with a cache",
    "With a cache, the tokens already fed are in it: each step after the prompt feeds "
    "only the new token. Feeding the whole sequence again appends its keys a second "
    "time (the cache then holds the prefix twice) and places the tokens at the wrong "
    "positions.",
    S_CACHE,
)
NOT_CACHED = Diagnosis(
    "decoding without the cache",
    "Your tokens are right, but your loop runs the whole sequence through the model at "
    "every step. The exercise is incremental decoding: the prompt once, then one token "
    "per step with the cache, each token through the model once.",
    S_CACHE,
)
NEW_CACHE_EACH_STEP = Diagnosis(
    "a new or reset cache at every step: each new token sees only itself",
    "One KVCache serves the whole call: the prompt's keys and values go in first, and "
    "every step adds its token's, so that the new token attends to everything before "
    "it. A KVCache() made (or cache.reset() called) inside the loop leaves each new "
    "token attending to itself alone, at position 0. Make the cache once, before the "
    "loop.",
    S_CACHE_PITFALLS,
)
STEP_LOGITS_WRONG = Diagnosis(
    "the step's logits are wrong",
    "Your loop feeds the prompt and then each chosen token as it should, but the "
    "logits the model gives back for a step differ from the uncached model's on the "
    "same tokens: lm_step is wrong. Make check_lm_step pass first.",
    S_CACHE_PITFALLS,
)
WRONG_CHOICE = Diagnosis(
    "the next token is not the argmax of the last position",
    "Greedy decoding appends, for each row, the token with the largest logit at the "
    "*last* position of the step: logits[:, -1].argmax(-1) (not position 0, not an "
    "argmax over the batch or over positions).",
    S_CACHE,
)


def _prefix_again(title, case, got, seen: str) -> None:
    """A step after the prompt fed more than the one new token."""
    __tracebackhide__ = True
    if not got.fed or not torch.equal(got.fed[0], case.prompt):
        return
    for k, chunk in enumerate(got.fed[1:], start=1):
        if chunk.size(1) > 1:
            PREFIX_AGAIN.fail(
                title,
                seen + f" Step {k} after the prompt fed "
                f"{chunk.size(1)} tokens, the sequence so "
                "far, not the one new token.",
            )


def _gen_raised(title, cases, runs) -> None:
    __tracebackhide__ = True
    for k, (case, got) in enumerate(zip(cases, runs)):
        if not isinstance(got.output, Raised):
            continue
        earlier_ok = any(not isinstance(r.output, Raised) for r in runs[:k])
        text = str(got.output.exc).lower()
        if earlier_ok and "cache" in text:
            CACHE_CARRIED.fail(
                title,
                f"Call {k + 1} (case {case.label}) raised "
                f"{got.output!r}, after earlier calls ran.",
            )
        _prefix_again(
            title,
            case,
            got,
            f"On case {case.label} your generate_greedy raised {got.output!r}.",
        )
        fail(
            title,
            f"your generate_greedy raised {got.output!r} on case {case.label}.",
            S_CACHE,
        )


def _gen_form(title, case, got, want) -> None:
    __tracebackhide__ = True
    out = got.output
    b, total = want.shape
    s = case.prompt.size(1)
    if not isinstance(out, torch.Tensor) or type(out) is not torch.Tensor:
        fail(
            title,
            f"on case {case.label}: expected a LongTensor of token ids "
            f"[B, S + N] = {[b, total]}, got {type(out).__name__}.",
            S_CACHE,
        )
    if (
        out.dtype != torch.long
        or out.device != want.device
        or out.dim() != 2
        or out.size(0) != b
    ):
        hint = (
            " (argmax gives int64 ids; a float tensor of ids, from torch.zeros or "
            "torch.empty filled in place, is not a token tensor)"
            if out.dtype.is_floating_point
            else ""
        )
        fail(
            title,
            f"on case {case.label}: the tokens must be a LongTensor [B, S + N] "
            f"= {[b, total]} of ids (torch.int64) on {want.device}, got "
            f"{out.dtype} {list(out.shape)} on {out.device}{hint}.",
            S_CACHE,
        )
    if got.prompt_changed:
        fail(
            title,
            f"on case {case.label} your generate_greedy changed the prompt in "
            "place: build the output with torch.cat, leave the caller's tensor "
            "alone.",
            S_CACHE,
        )
    if list(out.shape) == [b, case.n] and torch.equal(out, want[:, s:]):
        ONLY_NEW_TOKENS.fail(
            title,
            f"On case {case.label} you returned "
            f"{list(out.shape)}, the new tokens alone, "
            "right as they are.",
        )


def _dropped_or_repeated(title, case, got, want) -> None:
    """Length S + N ± 1: name the token dropped or repeated."""
    __tracebackhide__ = True
    out = got.output
    s, n = case.prompt.size(1), case.n
    length = out.size(1)
    if abs(length - (s + n)) != 1:
        if length != s + n:
            fail(
                title,
                f"on case {case.label}: expected [B, S + N] = "
                f"{[out.size(0), s + n]}, got {list(out.shape)}.",
                S_CACHE,
            )
        return
    longer = _reference_greedy(case.model, case.prompt, n + 1)
    seen = (
        f"On case {case.label} you return {length} tokens, expected {s} + {n} = {s + n}"
    )
    if length == s + n + 1 and torch.equal(out, longer):
        OFF_BY_ONE.fail(
            title, seen + f": one new token too many (your loop chose {n + 1})."
        )
    if length == s + n - 1 and torch.equal(out, want[:, :-1]):
        OFF_BY_ONE.fail(
            title, seen + f": the last new token is missing (your loop chose {n - 1})."
        )
    short, long = (out, want) if length < s + n else (want, out)
    for j in range(long.size(1)):
        if torch.equal(torch.cat([long[:, :j], long[:, j + 1 :]], dim=1), short):
            what = "missing" if length < s + n else "repeated or extra"
            OFF_BY_ONE.fail(
                title,
                seen + f": the token at position {j} is {what}, the others are right.",
            )
    OFF_BY_ONE.fail(title, seen + ".")


def _first_wrong_token(out, want) -> int:
    """The first position where two equal-shaped token tensors [B, L] differ."""
    return next(j for j in range(out.size(1)) if not torch.equal(out[:, j], want[:, j]))


def _expected_feed(out, s) -> list:
    """The chunks a cached loop feeds for the learner's own output: the prompt, then
    each chosen token but the last."""
    return [out[:, :s]] + [out[:, j : j + 1] for j in range(s, out.size(1) - 1)]


def _learners_step(fn):
    """The notebook's lm_step, the one generate_greedy is asked to use (None when the
    namespace of the learner's function has none)."""
    step = getattr(inspect.unwrap(fn), "__globals__", {}).get("lm_step")
    return step if callable(step) and step is not fn else None


def _step_failure(step) -> str | None:
    """None when ``step`` passes check_lm_step's cases, else what that check names."""
    try:
        _lm_step_problems("lm_step", step)
    except CheckFailure as failure:
        text = str(failure)
        named = re.search(r"the pitfall '(.+?)'\.", text)
        return f"'{named.group(1)}'" if named else "a mistake"
    return None


def _grows_cache(step) -> bool:
    """The step leaves the tokens it is given in the caller's cache."""
    case = step_cases()[0]
    got = _run_case(step, case)
    s = case.chunks[0].size(1)
    return (
        bool(got.lengths)
        and all(n == s for n in got.lengths[0][1])
        and len(got.lengths[0][1]) == len(case.model.blocks.layers)
    )


def _step_cache_problems(title, fn, seen, k, cached, want_cached) -> None:
    """Step k's logits are wrong: was its cache the one the loop should have grown?
    ``cached``: what the first block's cache layer held when step k began."""
    __tracebackhide__ = True
    step = _learners_step(fn)
    if cached is None or cached == want_cached:
        if step is not None and cached is not None and _step_failure(step) is None:
            fail(
                title,
                f"{seen} The cache held the {want_cached} earlier tokens, "
                "as it should, and your lm_step passes check_lm_step's cases: "
                "what your loop runs for a step is not your lm_step as it is. "
                f"It {UNEXPLAINED}; compare your loop with the lesson step by "
                "step.",
                S_CACHE,
            )
        return  # the step is what is wrong
    observed = (
        f"{seen} When step {k} began, the first block's cache held {cached} "
        f"token(s); it should hold the {want_cached} before the step's token."
    )
    if cached == 0 and k >= 1:
        if step is not None and not _grows_cache(step):
            STEP_LOGITS_WRONG.fail(
                title,
                f"{observed} Your lm_step does not grow the "
                "cache it is given (check_lm_step says "
                f"{_step_failure(step)}).",
            )
        NEW_CACHE_EACH_STEP.fail(title, observed)
    if k == 0:
        CACHE_CARRIED.fail(title, observed)
    named = _step_failure(step) if step is not None else "it is not found"
    if named is None:
        fail(
            title,
            f"{observed} Your lm_step passes check_lm_step's cases. It "
            f"{UNEXPLAINED}; compare your loop with the lesson step by step.",
            S_CACHE,
        )
    # The step grows the cache wrongly (twice, say): it is the step's fault.


def _carried_seen(title, cases, runs) -> None:
    """A call whose very first step found tokens in the cache: they came from an
    earlier call."""
    __tracebackhide__ = True
    for k, (case, got) in enumerate(zip(cases, runs)):
        if got.attended and got.attended[0][0]:
            CACHE_CARRIED.fail(
                title,
                f"Call {k + 1} (case {case.label}): when its "
                "prompt went in, the first block's cache "
                f"already held {got.attended[0][0]} token(s).",
            )


def _trace_problems(title, fn, case, got, want) -> None:
    """Same length, wrong tokens: read what the loop fed and got back."""
    __tracebackhide__ = True
    out, fed = got.output, got.fed
    s = case.prompt.size(1)
    diverge = _first_wrong_token(out, want)
    seen = (
        f"On case {case.label} the first wrong token is at position {diverge} "
        f"(new token {diverge - s}): yours {_tokens_text(out[:, diverge])}, "
        f"expected {_tokens_text(want[:, diverge])}."
    )
    if diverge < s:
        fail(
            title,
            seen + " The output must start with the prompt as it was given.",
            S_CACHE,
        )
    if not fed:
        return
    expected = _expected_feed(out, s)
    if not torch.equal(fed[0], case.prompt):
        return
    _prefix_again(title, case, got, seen)
    for k, chunk in enumerate(fed[1 : len(expected)], start=1):
        if not torch.equal(chunk, expected[k]):
            position = s + k - 1
            previous = out[:, position - 1 : position]
            what = (
                " (the token before it, again)" if torch.equal(chunk, previous) else ""
            )
            FED_WRONG_TOKEN.fail(
                title,
                seen + f" Step {k} after the prompt fed "
                f"{_tokens_text(chunk[:, 0])}{what}; "
                "the token just chosen is "
                f"{_tokens_text(expected[k][:, 0])}.",
            )
    if len(got.logits) != len(fed):
        return
    for k, (chunk, logits) in enumerate(zip(fed, got.logits)):
        end = s + k if k else s
        if end > out.size(1) or logits.dim() != 3:
            return
        want_logits = case.model(out[:, :end])[:, -chunk.size(1) :]
        if logits.shape != want_logits.shape:
            return
        if not torch.allclose(logits, want_logits, atol=1e-4, rtol=1e-3):
            off = float((logits - want_logits).abs().max())
            differ = (
                f" The logits of step {k} (0: the prompt) differ from the "
                f"model's by up to {off:.3g}."
            )
            cached = got.attended[k][0] if len(got.attended) == len(fed) else None
            _step_cache_problems(
                title, fn, seen + differ, k, cached, end - chunk.size(1)
            )
            STEP_LOGITS_WRONG.fail(title, seen + differ)
        chosen = out[:, end] if end < out.size(1) else None
        best = logits[:, -1].argmax(-1)
        if chosen is not None and not torch.equal(chosen, best):
            WRONG_CHOICE.fail(
                title,
                seen + f" After step {k} you appended "
                f"{_tokens_text(chosen)}; the argmax of "
                "the last position's logits is "
                f"{_tokens_text(best)}.",
            )


def _carried(title, fn, case) -> None:
    """The same call twice, under the same seed, must give the same tokens."""
    __tracebackhide__ = True
    a, b = _run_generate(fn, case, seed=1), _run_generate(fn, case, seed=1)
    if (
        isinstance(a.output, torch.Tensor)
        and isinstance(b.output, torch.Tensor)
        and a.output.shape == b.output.shape
        and torch.equal(a.output, b.output)
    ):
        return
    if isinstance(a.output, Raised) and isinstance(b.output, Raised):
        return
    CACHE_CARRIED.fail(
        title,
        f"Two calls on case {case.label}, each under "
        "torch.manual_seed(1), returned different results.",
    )


def _fed_positions(got: GenRun) -> int:
    return sum(int(chunk.size(1)) for chunk in got.fed)


@single_threaded
@keeps_random_state
def check_generate_greedy(generate_greedy) -> None:
    """``generate_greedy(model, prompt [B, S], max_new_tokens) -> [B, S + N]``: greedy
    decoding with a fresh KV cache; equal, token for token, to uncached greedy
    decoding, on several prompts one after the other."""
    __tracebackhide__ = True
    title = "generate_greedy"
    verify_integrity()
    cases = gen_cases()
    with torch.no_grad():
        wants = [_reference_greedy(c.model, c.prompt, c.n) for c in cases]
    runs = [_run_generate(generate_greedy, c) for c in cases]
    right = [
        isinstance(r.output, torch.Tensor)
        and type(r.output) is torch.Tensor
        and r.output.dtype == w.dtype
        and r.output.shape == w.shape
        and r.output.device == w.device
        and torch.equal(r.output, w)
        and not r.prompt_changed
        for r, w in zip(runs, wants)
    ]
    if all(right):
        for case, got in zip(cases, runs):
            s = case.prompt.size(1)
            if got.fed and _fed_positions(got) > s + case.n:
                NOT_CACHED.fail(
                    title,
                    f"On case {case.label} your loop fed "
                    f"{_fed_positions(got)} token positions through "
                    f"the model; with a cache it needs {s} + "
                    f"{case.n - 1} = {s + case.n - 1}.",
                )
        passed(
            title,
            f"equals uncached greedy decoding on {len(cases)} prompts in a "
            "row, each token through the model once",
        )
        return
    if not all(ok for c, ok in zip(cases, right) if c.n >= 2):
        # A mistake the usual cases show is diagnosed on them alone: the corners (one
        # new token, none) would make it raise first and hide what it is.
        kept = [i for i, c in enumerate(cases) if c.n >= 2]
        cases, runs = [cases[i] for i in kept], [runs[i] for i in kept]
        wants, right = [wants[i] for i in kept], [right[i] for i in kept]
    _carried_seen(title, cases, runs)
    _gen_raised(title, cases, runs)
    if any(right):
        _carried(title, generate_greedy, cases[0])
    k = right.index(False)
    case, got, want = cases[k], runs[k], wants[k]
    _gen_form(title, case, got, want)
    _dropped_or_repeated(title, case, got, want)
    _carried(title, generate_greedy, case)
    with torch.no_grad():
        _trace_problems(title, generate_greedy, case, got, want)
    out = got.output
    _continuation_problems(title, case, out, want)
    j = _first_wrong_token(out, want)
    fail(
        title,
        f"wrong on case {case.label}: the first wrong token is at position {j} "
        f"(yours {_tokens_text(out[:, j])}, expected "
        f"{_tokens_text(want[:, j])}). It {UNEXPLAINED}; compare your loop "
        "with the lesson step by step.",
        S_CACHE,
    )


def _continuation_problems(title, case, out, want) -> None:
    """New tokens that are another prompt's greedy continuation: row 0's copied to
    every row, or the prompt's own without its first token."""
    __tracebackhide__ = True
    s = case.prompt.size(1)
    new, right = out[:, s:], want[:, s:]
    if (
        new.size(0) > 1
        and torch.equal(new[0], right[0])
        and bool((new == new[:1]).all())
        and not torch.equal(new, right)
    ):
        ROWS_COPIED.fail(
            title,
            f"On case {case.label} every row's new tokens are row 0's, "
            f"{_tokens_text(new[0])}; row 1's own are {_tokens_text(right[1])}.",
        )
    with torch.no_grad():
        cut = _reference_greedy(case.model, case.prompt[:, 1:], case.n)[:, s - 1 :]
    if torch.equal(new, cut):
        PROMPT_CUT.fail(
            title,
            f"On case {case.label} your new tokens are the greedy continuation of "
            "the prompt without its first token (prompt[:, 1:]).",
        )


def _shortcuts() -> dict:
    return {
        inspect.unwrap(fn).__code__: name
        for fn, name in (
            (sampling.generate, "tformer_ref.sampling.generate"),
            (sampling.sample_next, "tformer_ref.sampling.sample_next"),
            (greedy_decode, "tformer_ref.decoding.greedy_decode"),
            (beam_search, "tformer_ref.decoding.beam_search"),
        )
    }


@single_threaded
@keeps_random_state
def check_generate_greedy_by_hand(generate_greedy) -> None:
    """Hidden test: the learner wrote the loop, not a call of the course's generate."""
    __tracebackhide__ = True
    case = gen_cases()[0]
    check_not_delegated(
        "generate_greedy",
        lambda: _run_generate(generate_greedy, case),
        forbidden_code=_shortcuts(),
    )


seal(__name__)
