"""Checks for chapter 8, generation (book/ch08_generation).

The exercise writes ``next_token_probs`` (temperature and top-p), ``lm_step`` (one
incremental step of a ``DecoderOnlyLM`` with a KV cache) and ``generate_greedy``
(greedy decoding with a fresh cache). Every check judges behaviour only:

- probabilities: which tokens the learner keeps (against the reference's set, the
  set at temperature 1, the crossing token), whether rows sum to 1, and the
  effective temperature read off the slope of log-probability against the logits;
- ``lm_step``: the cache's length after each call, the outputs on an empty cache and
  after cached tokens, the same calls on a copy of the model whose positional table
  is constant (any position mistake vanishes there), and which earlier tokens each
  new query is influenced by (what the mask lets it attend to);
- ``generate_greedy``: the tokens, their length, the same call twice, and what the
  loop fed the model (a hook on the token embedding) and got back (on ``lm_head``).
"""
from __future__ import annotations

import copy
import functools
import inspect
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
from .diagnosis import (UNEXPLAINED, Case, Diagnosis, Pitfall, Raised, Section,
                        describe_difference, fail, passed, quiet, run, single_threaded,
                        verify_integrity)

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
# Cases: (B, V, seed, temperature, top_p, boost). ``boost`` raises one logit of row 0
# so that its token alone holds more than top_p. The seeds are chosen so that no
# cumulative sum lies within 1e-3 of top_p (float rounding never decides the set).

PROB_CASES = (
    (2, 8, 11, 1.0, 1.0, 0.0),
    (3, 10, 12, 1.0, 0.9, 0.0),
    (2, 8, 35, 1.0, 0.5, 4.0),
    (3, 10, 14, 0.5, 0.8, 0.0),
    (2, 12, 15, 2.0, 0.9, 0.0),
    (2, 8, 16, 0.7, 1.0, 0.0),
    (2, 30, 17, 1.5, 0.6, 0.0),
)


def _prob_logits(b, v, seed, boost):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(b, v, generator=g) * 1.5
    if boost:
        logits[0, int(torch.randint(v, (1,), generator=g))] += boost
    return logits.to(get_device())


def _prob_case(b, v, seed, t, p, boost) -> Case:
    label = f"logits [{b}, {v}], temperature={t}, top_p={p}"
    return Case(label, lambda: (_prob_logits(b, v, seed, boost), t, p))


def prob_cases() -> list[Case]:
    return [_prob_case(*spec) for spec in PROB_CASES]


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
    S_TOP_P)
DROPS_CROSSING = Diagnosis(
    "top-p drops the token that crosses p",
    "The kept set must *reach* top_p: it holds the tokens ranked above the crossing "
    "point and the token that carries the sum across top_p. Keeping only the tokens "
    "whose cumulative sum stays below top_p (cumsum < p, or cumsum <= p) loses that "
    "token, and keeps nothing at all when the top token alone exceeds top_p. Compare "
    "the mass *before* each token with top_p (cumsum - probs < top_p).",
    S_TOP_P)
NOT_TOP_TOKENS = Diagnosis(
    "top-p keeps tokens that are not the most likely",
    "The nucleus is made of the *most likely* tokens: sort the probabilities in "
    "descending order before the cumulative sum, and map the kept positions back to "
    "the token ids (scatter with the sort's indices).",
    S_TOP_P)
TOP_P_NOT_APPLIED = Diagnosis(
    "top-p not applied",
    "Every token keeps some probability: nothing was cut. Set the logits of the tokens "
    "outside the nucleus to -inf before the softmax (or zero their probabilities and "
    "renormalise).",
    S_TOP_P)
TOP_P_BEFORE_TEMPERATURE = Diagnosis(
    "top-p applied before the temperature",
    "The set of tokens you keep is the one top_p picks at temperature 1, although the "
    "probabilities on it follow the temperature. Divide the logits by the temperature "
    "first, then choose the nucleus from *those* probabilities: a temperature below 1 "
    "concentrates the mass and needs fewer tokens, one above 1 needs more.",
    S_TOP_P)
NOT_RENORMALISED = Diagnosis(
    "probabilities not renormalised",
    "After the cut every row must sum to 1 over the vocabulary: softmax the filtered "
    "logits (the -inf ones get 0) along the last axis, or divide the kept "
    "probabilities by their sum.",
    S_TOP_P)
NOT_PROBABILITIES = Diagnosis(
    "returns something other than probabilities",
    "The function returns the probabilities the next token is drawn from: numbers in "
    "[0, 1], each row summing to 1 (the softmax of the filtered logits), not the "
    "filtered logits themselves.",
    S_TOP_P)
TEMPERATURE_AFTER_SOFTMAX = Diagnosis(
    "temperature applied after the softmax",
    "Temperature divides the *logits*, before the softmax: softmax(logits / T). "
    "Dividing the probabilities by T changes nothing once they are renormalised, and "
    "a second softmax of probabilities (numbers in [0, 1]) is almost uniform: below "
    "T = 1 your distribution gets flatter where it should get sharper.",
    S_TEMPERATURE)
TEMPERATURE_IGNORED = Diagnosis(
    "temperature applied after the softmax, or not at all",
    "At every temperature your probabilities are the temperature-1 ones. Divide the "
    "logits by the temperature before the softmax: dividing the probabilities instead "
    "(probs / T) is undone by the renormalisation.",
    S_TEMPERATURE)
TEMPERATURE_MULTIPLIED = Diagnosis(
    "temperature multiplied instead of divided",
    "Your distribution behaves as if at temperature 1/T: sharper where it should be "
    "flatter and the reverse. Divide the logits by the temperature (logits / T), so "
    "that T < 1 sharpens and T > 1 flattens.",
    S_TEMPERATURE)


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
            fail(title, f"your next_token_probs raised {got!r} on case {case.label}.",
                 S_TOP_P)
        problem = describe_difference(got, want, ATOL, RTOL)
        if problem and not problem.startswith(("values differ", "your output has NaN")):
            hint = ""
            if isinstance(got, torch.Tensor) and list(got.shape) == [want.size(0)]:
                hint = (" (one number per row: that is a sampled token or an argmax, "
                        "the function returns the whole distribution [B, V])")
            fail(title, f"on case {case.label}: {problem}{hint}. next_token_probs "
                        f"returns the probabilities [B, V] = {list(want.shape)} as a "
                        f"float tensor on the logits' device.", S_TOP_P)


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
        observed = (f"On {first.where} your probabilities are {what}: the most "
                    f"likely token alone holds {top:.3f} > top_p = {first.top_p}, "
                    "and you kept none.")
        dropping = [r for r in rows if r not in empty and _drops_crossing(r)]
        if dropping:
            DROPS_CROSSING.fail(title, _crossing_text(dropping[0]) + " " + observed)
        KEEPS_NONE.fail(title, observed)
    fail(title, f"on {first.where} your probabilities are {what}, where the reference "
                f"keeps {_kept_text(first.ref_kept, first.full)}. It {UNEXPLAINED}.",
         S_TOP_P)


def _not_probabilities(title, rows: list[_Row]) -> None:
    __tracebackhide__ = True
    for r in rows:
        low, high = float(r.got.min()), float(r.got.max())
        if low < -1e-6 or high > 1 + 1e-6:
            NOT_PROBABILITIES.fail(title, f"On {r.where} your values run from "
                                          f"{low:.3g} to {high:.3g}.")


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


def _crossing_text(r: _Row) -> str:
    missing = int((r.ref_kept & ~r.kept).nonzero()[0])
    return (f"On {r.where} you keep {_kept_text(r.kept, r.full)}; the reference keeps "
            f"{_kept_text(r.ref_kept, r.full)}: token {missing} (probability "
            f"{float(r.full[missing]):.3f}) is the one that carries the sum across "
            f"top_p = {r.top_p}.")


def _support_problems(title, rows: list[_Row]) -> None:
    """The learner's kept set differs from the reference's: name how."""
    __tracebackhide__ = True
    differ = [r for r in rows if not torch.equal(r.kept, r.ref_kept)]
    if not differ:
        return
    first = differ[0]
    observed = (f"On {first.where} you keep {_kept_text(first.kept, first.full)}; the "
                f"reference keeps {_kept_text(first.ref_kept, first.full)}.")
    unsorted = [r for r in differ if not _is_top_set(r.kept, r.full)]
    if unsorted:
        r = unsorted[0]
        NOT_TOP_TOKENS.fail(title, f"On {r.where} you keep "
                                   f"{_kept_text(r.kept, r.full)}, while a more likely "
                                   "token is dropped.")
    if all(_drops_crossing(r) for r in differ):
        DROPS_CROSSING.fail(title, _crossing_text(first))
    if all(r.kept.all() for r in differ):
        TOP_P_NOT_APPLIED.fail(title, observed)
    fail(title, f"the tokens you keep differ from the reference's. {observed} The "
                f"nucleus is the smallest set of most likely tokens whose probability "
                f"reaches top_p. It {UNEXPLAINED}.", S_TOP_P)


def _slope(r: _Row):
    """(slope, largest residual) of log(got) against the logits on the kept tokens,
    or None with fewer than 3 kept tokens."""
    kept = r.kept & ~torch.isnan(r.got)
    if int(kept.sum()) < 3:
        return None
    x, y = r.logits[kept], r.got[kept].log()
    dx = x - x.mean()
    slope = float((dx * (y - y.mean())).sum() / (dx ** 2).sum())
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
        observed = (f"On {r.where}, log-probability against logit has slope "
                    f"{slope:.4g}: your distribution is at temperature "
                    f"{effective:.4g}, expected {t}.")
        if all(_close(1 / s, 1.0) for _, (s, _) in fits):
            TEMPERATURE_IGNORED.fail(title, observed)
        if all(_close(1 / s, 1 / f.temperature) for f, (s, _) in fits):
            TEMPERATURE_MULTIPLIED.fail(title, observed)
        if all(_close(1 / s, f.temperature) for f, (s, _) in fits):
            at_one = [_top_p_set(_full(f.logits[None], 1.0), f.top_p)[0]
                      for f, _ in fits]
            if all(torch.equal(f.kept, s) for (f, _), s in zip(fits, at_one)):
                TOP_P_BEFORE_TEMPERATURE.fail(
                    title, f"On {r.where} you keep {_kept_text(r.kept, r.full)}: the "
                           "set top_p picks at temperature 1; at temperature "
                           f"{t} it is {_kept_text(r.ref_kept, r.full)}.")
            return  # the temperature is right: the kept set is what differs
        fail(title, "only the cases at a temperature other than 1 are wrong. "
                    f"{observed} It {UNEXPLAINED}.", S_TEMPERATURE)
    sharper = [f for f, _ in fits if f.temperature < 1]
    if sharper and all(_entropy(f.got) > _entropy(f.want) + 1e-3 for f in sharper):
        f = sharper[0]
        TEMPERATURE_AFTER_SOFTMAX.fail(
            title, f"On {f.where} (a temperature below 1) your distribution has "
                   f"entropy {_entropy(f.got):.3f} nats, the reference's "
                   f"{_entropy(f.want):.3f}: flatter, not sharper, and its log is "
                   "not a straight line in the logits.")
    fail(title, f"only the cases at a temperature other than 1 are wrong. On {r.where} "
                "the log of your probabilities is not a straight line in the logits "
                f"(no temperature gives it). It {UNEXPLAINED}.", S_TEMPERATURE)


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
        if all(isinstance(g, torch.Tensor) and isinstance(v, torch.Tensor)
               and g.shape == v.shape
               and torch.allclose(g.detach().float(), v.float(), atol=ATOL, rtol=RTOL)
               for g, v in zip(theirs, outs)):
            TEMPERATURE_AFTER_SOFTMAX.fail(
                title, "Your probabilities equal, on every case, those of a softmax "
                       "taken of probabilities divided by the temperature.")


def _sums_problems(title, rows: list[_Row]) -> None:
    __tracebackhide__ = True
    for r in rows:
        total = float(r.got.sum())
        if abs(total - 1) > 1e-4:
            scaled = r.got / total
            note = (" Divided by that sum, your row equals the reference's."
                    if torch.allclose(scaled, r.want, atol=ATOL, rtol=RTOL) else "")
            NOT_RENORMALISED.fail(title, f"On {r.where} your probabilities sum to "
                                         f"{total:.4f}.{note}")


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
    if all(_right(g, w) for g, w in zip(theirs, ours)):
        passed(title, f"matches the reference on {len(cases)} cases "
                      "(temperatures 0.5 to 2, top_p 0.5 to 1)")
        return
    _probs_form(title, cases, theirs, ours)
    rows = _wrong_rows(cases, theirs, ours)
    _probs_empty(title, rows)
    _not_probabilities(title, rows)
    _after_softmax(title, cases, theirs)
    at_one_right = all(_right(g, w) for c, g, w in zip(cases, theirs, ours)
                       if c.make()[1] == 1.0)
    if at_one_right:
        _temperature_problems(title, rows)
    _support_problems(title, rows)
    _sums_problems(title, rows)
    problems = [(c, m) for c, g, w in zip(cases, theirs, ours)
                if (m := describe_difference(g, w, ATOL, RTOL))]
    case, msg = problems[0]
    fail(title, f"wrong on {len(problems)} of {len(cases)} cases, with the right "
                f"tokens kept and rows summing to 1. First: case {case.label}: {msg}. "
                f"It {UNEXPLAINED}; compare your code with the lesson step by step.",
         S_TEMPERATURE)


@single_threaded
@keeps_random_state
def check_next_token_probs_by_hand(next_token_probs) -> None:
    """Hidden test: the learner wrote it, not a call of the course's sampling code."""
    __tracebackhide__ = True
    args = prob_cases()[3].make()
    check_not_delegated("next_token_probs", lambda: run(next_token_probs, args),
                        forbidden=("tformer_ref",))


# =========================================================================== models

def lm(seed: int, *, norm_first: bool, positions: str, std: float | None = None,
       **kwargs) -> DecoderOnlyLM:
    """A tiny seeded DecoderOnlyLM(V=11, D=16, H=2, L=2, F=32, max_len=24) in eval mode
    on the course's device; ``std`` redraws every weight matrix from N(0, std²) (an
    untrained model with Xavier weights repeats one token forever)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = DecoderOnlyLM(11, 16, 2, 2, 32, dropout=0.0, max_len=24, pad_id=None,
                              norm_first=norm_first, positions=positions, **kwargs)
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
    return lm(3, norm_first=False, positions="learned", std=0.5, fused=False,
              tie_embeddings=True)


M1 = "model 1 (Post-LN, sinusoidal positions)"
M2 = "model 2 (Pre-LN, learned positions, final LayerNorm)"
M3 = "model 3 (Post-LN, learned positions, tied embeddings)"


def step_cases() -> list[StepCase]:
    m1, m2, m3 = _model_1(), _model_2(), _model_3()
    return [
        StepCase(f"{M1}, empty cache, tokens [2, 5]", m1, None, (_ids(2, 5, 80),)),
        StepCase(f"{M2}, empty cache, tokens [2, 4]", m2, None, (_ids(2, 4, 81),)),
        StepCase(f"{M1}, the cache holding 6 tokens (filled by the reference), tokens "
                 "[2, 1]", m1, _ids(2, 6, 82), (_ids(2, 1, 83),)),
        StepCase(f"{M2}, the cache holding 4 tokens (filled by the reference), tokens "
                 "[2, 3]", m2, _ids(2, 4, 84), (_ids(2, 3, 85),)),
        StepCase(f"{M3}, the cache holding 5 tokens (filled by the reference), tokens "
                 "[1, 2]", m3, _ids(1, 5, 86), (_ids(1, 2, 87),)),
        StepCase(f"{M2}, an empty cache and your lm_step called 5 times with tokens "
                 "[1, 4], [1, 1], [1, 1], [1, 2], [1, 1]", m2, None,
                 tuple(_ids(1, s, 90 + i) for i, s in enumerate((4, 1, 1, 2, 1)))),
    ]


def _reference_step(model, tokens, cache):
    return model(tokens, cache=cache)


def _layer_lengths(cache) -> tuple:
    return tuple(kv.length for kv in getattr(cache, "layers", ()))


@dataclass
class StepRun:
    """Each call's output (or Raised) and the cache's layer lengths before and after."""

    outputs: list
    lengths: list  # [(before, after)] per call, tuples of layer lengths


def _run_steps(step, model, past, chunks) -> StepRun:
    cache = KVCache()
    with torch.no_grad(), quiet():
        if past is not None:
            model(past, cache=cache)
        outputs, lengths = [], []
        for chunk in chunks:
            before = _layer_lengths(cache)
            out = run(step, (model, chunk, cache))
            outputs.append(out)
            lengths.append((before, _layer_lengths(cache)))
            if isinstance(out, Raised):
                break
    return StepRun(outputs, lengths)


def _run_case(step, case: StepCase, model=None) -> StepRun:
    past, chunks = case.fresh()
    return _run_steps(step, model or case.model, past, chunks)


def _case_right(got: StepRun, want: StepRun) -> bool:
    return (len(got.outputs) == len(want.outputs)
            and all(_right(g, w) for g, w in zip(got.outputs, want.outputs)))


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
    S_CACHE_PITFALLS)
CACHE_NOT_GROWN = Diagnosis(
    "the cache is not grown",
    "lm_step must leave the new tokens' keys and values in the cache it is given, so "
    "that the next step attends to them: block i appends to cache.layer(i) when you "
    "call block(x, mask, cache.layer(i)). A block called without its LayerKV, or a new "
    "KVCache made inside lm_step, leaves the caller's cache as it was.",
    S_CACHE)
CACHE_GROWN_TWICE = Diagnosis(
    "the cache is grown twice",
    "Each call must add exactly the S new tokens to every layer: every block runs once "
    "per call, with its own cache.layer(i). Running a block (or the whole stack) a "
    "second time appends the same keys again, and the next queries attend to them "
    "twice.",
    S_CACHE)
ONE_LAYER_FOR_ALL = Diagnosis(
    "every block uses the same cache layer",
    "Block i keeps its keys and values in cache.layer(i): the layers' keys differ, so "
    "each needs its own LayerKV (for i, block in enumerate(model.blocks.layers): "
    "x = block(x, mask, cache.layer(i))).",
    S_CACHE)
POSITIONS_NOT_OFFSET = Diagnosis(
    "positions not offset by the cache length",
    "The S new tokens come after the cache.length tokens already cached, so they sit "
    "at positions cache.length .. cache.length + S - 1: "
    "model.pos(x, start=cache.length). "
    "Read cache.length once, before the blocks grow the cache.",
    S_CACHE_PITFALLS)
MASK_SHAPE = Diagnosis(
    "causal mask of the wrong shape",
    "With a cache the S new queries attend to cache.length + S keys, so the mask is "
    "[1, 1, S, cache.length + S]: causal_mask(S, device, past=cache.length), with "
    "cache.length read once, before the blocks grow the cache. A mask for the full "
    "length is [T, T], one for the new tokens alone [S, S]: neither fits.",
    S_CACHE_PITFALLS)
MASK_ROWS = Diagnosis(
    "causal mask rows for the wrong positions",
    "The new query i sits at position cache.length + i and may attend to every key up "
    "to there: the rows of the mask are the *last* S rows of the full-length causal "
    "mask (causal_mask(S, device, past=cache.length)), not its first S rows.",
    S_CACHE_PITFALLS)


def _no_scale(model, tokens, cache):
    past = cache.length
    mask = causal_mask_for(tokens, past)
    x = model.dropout(model.pos(model.tok_embed(tokens), start=past))
    return model.lm_head(model.blocks(x, mask, cache))


def _no_final_norm(model, tokens, cache):
    past = cache.length
    mask = causal_mask_for(tokens, past)
    x = model.tok_embed(tokens) * model.d_model ** 0.5
    x = model.dropout(model.pos(x, start=past))
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(x)


def _no_positions(model, tokens, cache):
    mask = causal_mask_for(tokens, cache.length)
    x = model.dropout(model.tok_embed(tokens) * model.d_model ** 0.5)
    return model.lm_head(model.blocks(x, mask, cache))


def causal_mask_for(tokens, past):
    """The keep-mask [1, 1, S, past + S] of S new tokens after ``past`` cached ones."""
    return causal_mask(tokens.size(1), tokens.device, past=past)


EMPTY_CACHE_PITFALLS = (
    Pitfall("embeddings not scaled by sqrt(d_model)",
            "The token embeddings are multiplied by sqrt(model.d_model) before the "
            "positions are added, as in the model's own forward.", S_EMBED, _no_scale),
    Pitfall("final LayerNorm skipped",
            "After the last block comes model.blocks.norm (a LayerNorm in a Pre-LN "
            "model, nn.Identity in a Post-LN one), then model.lm_head.", S_LM,
            _no_final_norm),
    Pitfall("positions not added",
            "The embeddings go through model.pos(x, start=cache.length), which adds "
            "the positions' encodings, before the blocks.", S_LM, _no_positions),
)


def _raised_problems(title, cases, runs) -> None:
    __tracebackhide__ = True
    for case, got in zip(cases, runs):
        for k, out in enumerate(got.outputs):
            if isinstance(out, Raised):
                where = f"call {k + 1} of case {case.label}" if len(case.chunks) > 1 \
                    else f"case {case.label}"
                text = str(out.exc).lower()
                if "mask" in text and "shape" in text:
                    MASK_SHAPE.fail(title, f"On {where} your lm_step raised {out!r}.")
                fail(title, f"your lm_step raised {out!r} on {where}.", S_CACHE)


def _form_problems(title, cases, runs, refs) -> None:
    __tracebackhide__ = True
    for case, got, want in zip(cases, runs, refs):
        for g, w in zip(got.outputs, want.outputs):
            problem = describe_difference(g, w, ATOL, RTOL)
            if problem is None or problem.startswith(("values differ",
                                                      "your output has NaN")):
                continue
            b, s, v = w.shape
            hint = ""
            if isinstance(g, torch.Tensor) and list(g.shape) == [b, v]:
                hint = (" (only the last position: return the logits of all S new "
                        "tokens)")
            elif (isinstance(g, torch.Tensor)
                  and list(g.shape) == [b, s, case.model.d_model]):
                hint = " (the hidden states: model.lm_head turns them into logits)"
            fail(title, f"on case {case.label}: {problem}{hint}. lm_step returns the "
                        f"logits [B, S, V] = {[b, s, v]}.", S_CACHE)


def _growth_problems(title, cases, runs) -> None:
    """After each call every layer must hold S more tokens than before."""
    __tracebackhide__ = True
    for case, got in zip(cases, runs):
        n_layers = len(case.model.blocks.layers)
        for k, ((before, after), chunk, out) in enumerate(
                zip(got.lengths, case.chunks, got.outputs)):
            s = chunk.size(1)
            was = before[0] if before else 0
            want = (was + s,) * n_layers
            if after == want:
                continue
            where = (f"call {k + 1} of case {case.label}" if len(case.chunks) > 1
                     else f"case {case.label}")
            seen = (f"On {where} ({s} new token(s), {was} cached before), the cache's "
                    f"{len(after)} layer(s) hold {list(after)} tokens after your call; "
                    f"expected {n_layers} layers holding {list(want)}.")
            grown = [a - was for a in after]
            if isinstance(out, Raised):
                # An error midway leaves the cache half grown; one layer that grew for
                # two blocks says why the error came.
                if len(after) == 1 and n_layers > 1 and grown[0] > s:
                    ONE_LAYER_FOR_ALL.fail(title, seen + f" Your lm_step then raised "
                                                         f"{out!r}.")
                continue
            if not after or all(g == 0 for g in grown) or after == before:
                CACHE_NOT_GROWN.fail(title, seen)
            if len(after) == 1 and n_layers > 1 and grown[0] == n_layers * s:
                ONE_LAYER_FOR_ALL.fail(title, seen)
            if len(after) == n_layers and all(g > s and g % s == 0 for g in grown):
                CACHE_GROWN_TWICE.fail(title, seen)
            fail(title, f"the cache does not grow by the new tokens. {seen} It "
                        f"{UNEXPLAINED}.", S_CACHE)


def _future_visible(step, model) -> str | None:
    """On an empty cache, changing the last token must leave the earlier logits
    alone."""
    tokens = _ids(2, 5, 95)
    changed = tokens.clone()
    changed[:, -1] = (changed[:, -1] + 1) % 11
    base = _run_steps(step, model, None, (tokens,)).outputs[0]
    moved = _run_steps(step, model, None, (changed,)).outputs[0]
    if not (type(base) is type(moved) is torch.Tensor and base.shape == moved.shape
            and base.dim() == 3):
        return None
    diff = (moved[:, :-1] - base[:, :-1]).abs().amax(dim=(0, 2))
    hit = [i for i, d in enumerate(diff.tolist()) if d > 1e-5]
    if not hit:
        return None
    return (f"On {M1} with an empty cache and tokens [2, 5], changing token 4 changed "
            f"the logits at positions {hit} (by up to {float(diff.max()):.3g}).")


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
    i = wrong[0]
    k, problem = _first_problem(runs[i], refs[i])
    fail(title, f"wrong already on an empty cache (no cached token): case "
                f"{cases[i].label}: {problem}. It {UNEXPLAINED}; compare your code "
                "with the model's forward step by step.", S_LM)


def _same_run(a: StepRun, b: StepRun) -> bool:
    return (len(a.outputs) == len(b.outputs)
            and all(isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)
                    and x.shape == y.shape
                    and torch.allclose(x.detach(), y.detach(), atol=ATOL, rtol=RTOL)
                    for x, y in zip(a.outputs, b.outputs)))


def _neutral(model: DecoderOnlyLM) -> DecoderOnlyLM:
    """A copy whose positional table has the same row at every position: a position
    mistake changes nothing there."""
    out = copy.deepcopy(model)
    pos = LearnedPositionalEmbedding(model.max_len, model.d_model)
    g = torch.Generator().manual_seed(7)
    row = torch.randn(1, model.d_model, generator=g) * 0.5
    with torch.no_grad():
        pos.embedding.weight.copy_(row.expand(model.max_len, -1))
    out.pos = pos.to(next(model.parameters()).device)
    return out.eval()


def _at_start(start):
    def step(model, tokens, cache):
        past = cache.length
        mask = causal_mask_for(tokens, past)
        x = model.tok_embed(tokens) * model.d_model ** 0.5
        x = model.dropout(model.pos(x, start=start))
        return model.lm_head(model.blocks(x, mask, cache))
    return step


def _offset_seen(step, case: StepCase) -> str:
    """Which start position reproduces the learner's single call after the past."""
    got = _run_case(step, case).outputs[0]
    s, past = case.chunks[0].size(1), case.past.size(1)
    for start in range(0, case.model.max_len - s + 1):
        if start != past and _same_run(StepRun([got], []),
                                        _run_case(_at_start(start), case)):
            return (f" On case {case.label}, your {s} new token(s) sat at "
                    f"position(s) {_ranges(range(start, start + s))}; after {past} "
                    f"cached tokens they belong at {_ranges(range(past, past + s))}.")
    return ""


def _position_problems(title, step, cases, wrong) -> None:
    __tracebackhide__ = True
    neutral = {id(cases[i].model): _neutral(cases[i].model) for i in wrong}
    for i in wrong:
        model = neutral[id(cases[i].model)]
        if not _case_right(_run_case(step, cases[i], model),
                           _run_case(_reference_step, cases[i], model)):
            return
    single = [i for i in wrong if cases[i].past is not None]
    seen = _offset_seen(step, cases[single[0]]) if single else ""
    POSITIONS_NOT_OFFSET.fail(title, "Your logits are wrong once the cache holds "
                                     "tokens, and all right on a copy of the model "
                                     "whose positional table is the same at every "
                                     f"position.{seen}")


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
            observed = (f"On case {case.label}, the new token {q} (position "
                        f"{n_past + q}) is influenced by the tokens at positions "
                        f"{_ranges(keys)}; it should see {_ranges(want)}.")
            if any(k > n_past + q for k in keys):
                NOT_CAUSAL.fail(title, observed)
            if keys < want:
                MASK_ROWS.fail(title, observed)
            fail(title, f"the new queries attend to the wrong tokens. {observed} It "
                        f"{UNEXPLAINED}.", S_CACHE_PITFALLS)


@single_threaded
@keeps_random_state
def check_lm_step(lm_step) -> None:
    """``lm_step(model, tokens [B, S], cache) -> logits [B, S, V]``: the next S tokens
    after the ``cache.length`` cached ones; grows the cache by S. Equal to
    ``model(tokens, cache=cache)`` on an empty cache and after earlier steps."""
    __tracebackhide__ = True
    title = "lm_step"
    verify_integrity()
    cases = step_cases()
    refs = [_run_case(_reference_step, c) for c in cases]
    runs = [_run_case(lm_step, c) for c in cases]
    if all(_case_right(g, w) for g, w in zip(runs, refs)):
        _growth_problems(title, cases, runs)
        passed(title, f"matches the model's forward on {len(cases)} cases, empty cache "
                      "and after cached tokens, and grows the cache by S")
        return
    _growth_problems(title, cases, runs)
    _raised_problems(title, cases, runs)
    _form_problems(title, cases, runs, refs)
    _empty_cache_problems(title, lm_step, cases, runs, refs)
    wrong = [i for i, (g, w) in enumerate(zip(runs, refs)) if not _case_right(g, w)]
    _position_problems(title, lm_step, cases, wrong)
    _mask_problems(title, lm_step, cases, wrong)
    i = wrong[0]
    k, problem = _first_problem(runs[i], refs[i])
    call = f"call {k + 1} of " if len(cases[i].chunks) > 1 else ""
    fail(title, "right on an empty cache, wrong once the cache holds tokens: "
                f"{call}case {cases[i].label}: {problem}. It {UNEXPLAINED}; compare "
                "your code with the model's forward step by step.", S_CACHE_PITFALLS)


@single_threaded
@keeps_random_state
def check_lm_step_by_hand(lm_step) -> None:
    """Hidden test: the learner built the step from the model's parts, not by calling
    the model's own forward."""
    __tracebackhide__ = True
    case = step_cases()[5]  # an empty cache: the reference fills none inside the record
    check_not_delegated(
        "lm_step", lambda: _run_case(lm_step, case),
        forbidden_code={inspect.unwrap(DecoderOnlyLM.forward).__code__:
                        "the model's own forward, model(tokens, cache=cache)"})


# =========================================================================== generate

GEN_CASES = (
    # (model label, model builder, prompt [B, S] seed, B, S, N)
    (M2, 2, 8, 2, 3, 8),
    ("model 4 (Post-LN, learned positions)", 4, 9, 1, 4, 6),
    (M2, 2, 10, 2, 2, 5),
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
        out.append(GenCase(f"{name}, prompt [{b}, {s}], max_new_tokens={n}",
                           models[which], _ids(b, s, 200 + seed), n))
    return out


def _reference_greedy(model, prompt, n):
    return sampling.generate(model, prompt, n, temperature=0, use_cache=False)


@dataclass
class GenRun:
    """The output (or Raised), and what the loop fed the model: per forward, the token
    ids the embedding saw and the logits lm_head returned."""

    output: object
    fed: list
    logits: list
    prompt_changed: bool


def _run_generate(fn, case: GenCase, seed: int = 0) -> GenRun:
    fed, logits = [], []
    model = case.model
    hooks = [model.tok_embed.register_forward_hook(
                 lambda m, args, out: fed.append(args[0].detach().clone())),
             model.lm_head.register_forward_hook(
                 lambda m, args, out: logits.append(out.detach().clone()))]
    prompt = case.prompt.clone()
    devices = [prompt.device] if prompt.device.type == "cuda" else []
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            output = run(fn, (model, prompt, case.n))
    finally:
        for h in hooks:
            h.remove()
    return GenRun(output, fed, logits, not torch.equal(prompt, case.prompt))


CACHE_CARRIED = Diagnosis(
    "a cache carried over between prompts",
    "Two calls with the same model, the same prompt and the same random seed gave "
    "different tokens, or a later call failed on the cache: state survives from one "
    "call to the next. Make a new KVCache() inside generate_greedy on every call; a "
    "default argument (cache=KVCache()) or a global is made once and shared by all "
    "calls, so the next prompt attends to the last one's tokens.",
    S_CACHE_PITFALLS)
ONLY_NEW_TOKENS = Diagnosis(
    "returns only the new tokens",
    "generate_greedy returns the prompt followed by the new tokens, [B, S + N] "
    "(torch.cat([prompt, new], dim=1)).",
    S_CACHE)
OFF_BY_ONE = Diagnosis(
    "decoding drops or repeats a token",
    "The output is the prompt and exactly max_new_tokens new tokens, each chosen once: "
    "the prompt's last logits give the first new token, and each step feeds the token "
    "just chosen and gives the next one (N choices, N - 1 single-token steps after the "
    "prompt).",
    S_CACHE)
FED_WRONG_TOKEN = Diagnosis(
    "a step feeds the wrong token",
    "After the prompt, each step feeds the model the one token just chosen (shape "
    "[B, 1]), at the next position: the cache already holds everything before it.",
    S_CACHE)
PREFIX_AGAIN = Diagnosis(
    "the prefix fed again with a cache",
    "With a cache, the tokens already fed are in it: each step after the prompt feeds "
    "only the new token. Feeding the whole sequence again appends its keys a second "
    "time (the cache then holds the prefix twice) and places the tokens at the wrong "
    "positions.",
    S_CACHE)
NOT_CACHED = Diagnosis(
    "decoding without the cache",
    "Your tokens are right, but your loop runs the whole sequence through the model at "
    "every step. The exercise is incremental decoding: the prompt once, then one token "
    "per step with the cache, each token through the model once.",
    S_CACHE)
STEP_LOGITS_WRONG = Diagnosis(
    "the step's logits are wrong",
    "Your loop feeds the prompt and then each chosen token as it should, but the "
    "logits the model gives back for a step differ from the uncached model's on the "
    "same tokens: lm_step is wrong. Make check_lm_step pass first.",
    S_CACHE_PITFALLS)
WRONG_CHOICE = Diagnosis(
    "the next token is not the argmax of the last position",
    "Greedy decoding appends, for each row, the token with the largest logit at the "
    "*last* position of the step: logits[:, -1].argmax(-1) (not position 0, not an "
    "argmax over the batch or over positions).",
    S_CACHE)


def _prefix_again(title, case, got, seen: str) -> None:
    """A step after the prompt fed more than the one new token."""
    __tracebackhide__ = True
    if not got.fed or not torch.equal(got.fed[0], case.prompt):
        return
    for k, chunk in enumerate(got.fed[1:], start=1):
        if chunk.size(1) > 1:
            PREFIX_AGAIN.fail(title, seen + f" Step {k} after the prompt fed "
                                            f"{chunk.size(1)} tokens, the sequence so "
                                            "far, not the one new token.")


def _gen_raised(title, cases, runs) -> None:
    __tracebackhide__ = True
    for k, (case, got) in enumerate(zip(cases, runs)):
        if not isinstance(got.output, Raised):
            continue
        earlier_ok = any(not isinstance(r.output, Raised) for r in runs[:k])
        text = str(got.output.exc).lower()
        if earlier_ok and "cache" in text:
            CACHE_CARRIED.fail(title, f"Call {k + 1} (case {case.label}) raised "
                                      f"{got.output!r}, after earlier calls ran.")
        _prefix_again(title, case, got, f"On case {case.label} your generate_greedy "
                                        f"raised {got.output!r}.")
        fail(title, f"your generate_greedy raised {got.output!r} on case "
                    f"{case.label}.", S_CACHE)


def _gen_form(title, case, got, want) -> None:
    __tracebackhide__ = True
    out = got.output
    b, total = want.shape
    s = case.prompt.size(1)
    if not isinstance(out, torch.Tensor) or type(out) is not torch.Tensor:
        fail(title, f"on case {case.label}: expected a LongTensor of token ids "
                    f"[B, S + N] = {[b, total]}, got {type(out).__name__}.", S_CACHE)
    if out.dtype != torch.long or out.device != want.device or out.dim() != 2 \
            or out.size(0) != b:
        fail(title, f"on case {case.label}: expected a LongTensor [B, S + N] = "
                    f"{[b, total]} on {want.device}, got {out.dtype} "
                    f"{list(out.shape)} on {out.device}.", S_CACHE)
    if got.prompt_changed:
        fail(title, f"on case {case.label} your generate_greedy changed the prompt in "
                    "place: build the output with torch.cat, leave the caller's tensor "
                    "alone.", S_CACHE)
    if list(out.shape) == [b, case.n] and torch.equal(out, want[:, s:]):
        ONLY_NEW_TOKENS.fail(title, f"On case {case.label} you returned "
                                    f"{list(out.shape)}, the new tokens alone, "
                                    "right as they are.")


def _dropped_or_repeated(title, case, got, want) -> None:
    """Length S + N ± 1: name the token dropped or repeated."""
    __tracebackhide__ = True
    out = got.output
    s, n = case.prompt.size(1), case.n
    length = out.size(1)
    if abs(length - (s + n)) != 1:
        if length != s + n:
            fail(title, f"on case {case.label}: expected [B, S + N] = "
                        f"{[out.size(0), s + n]}, got {list(out.shape)}.", S_CACHE)
        return
    longer = _reference_greedy(case.model, case.prompt, n + 1)
    seen = (f"On case {case.label} you return {length} tokens, expected {s} + {n} = "
            f"{s + n}")
    if length == s + n + 1 and torch.equal(out, longer):
        OFF_BY_ONE.fail(title, seen + ": one new token too many (your loop chose "
                                      f"{n + 1}).")
    if length == s + n - 1 and torch.equal(out, want[:, :-1]):
        OFF_BY_ONE.fail(title, seen + ": the last new token is missing (your loop "
                                      f"chose {n - 1}).")
    short, long = (out, want) if length < s + n else (want, out)
    for j in range(long.size(1)):
        if torch.equal(torch.cat([long[:, :j], long[:, j + 1:]], dim=1), short):
            what = "missing" if length < s + n else "repeated or extra"
            OFF_BY_ONE.fail(title, seen + f": the token at position {j} is {what}, the "
                                          "others are right.")
    OFF_BY_ONE.fail(title, seen + ".")


def _first_wrong_token(out, want) -> int:
    """The first position where two equal-shaped token tensors [B, L] differ."""
    return next(j for j in range(out.size(1)) if not torch.equal(out[:, j], want[:, j]))


def _expected_feed(out, s) -> list:
    """The chunks a cached loop feeds for the learner's own output: the prompt, then
    each chosen token but the last."""
    return [out[:, :s]] + [out[:, j:j + 1] for j in range(s, out.size(1) - 1)]


def _trace_problems(title, case, got, want) -> None:
    """Same length, wrong tokens: read what the loop fed and got back."""
    __tracebackhide__ = True
    out, fed = got.output, got.fed
    s = case.prompt.size(1)
    diverge = _first_wrong_token(out, want)
    seen = (f"On case {case.label} the first wrong token is at position {diverge} "
            f"(new token {diverge - s}): yours {_tokens_text(out[:, diverge])}, "
            f"expected {_tokens_text(want[:, diverge])}.")
    if diverge < s:
        fail(title, seen + " The output must start with the prompt as it was given.",
             S_CACHE)
    if not fed:
        return
    expected = _expected_feed(out, s)
    if not torch.equal(fed[0], case.prompt):
        return
    _prefix_again(title, case, got, seen)
    for k, chunk in enumerate(fed[1:len(expected)], start=1):
        if not torch.equal(chunk, expected[k]):
            position = s + k - 1
            previous = out[:, position - 1:position]
            what = (" (the token before it, again)" if torch.equal(chunk, previous)
                    else "")
            FED_WRONG_TOKEN.fail(title, seen + f" Step {k} after the prompt fed "
                                               f"{_tokens_text(chunk[:, 0])}{what}; "
                                               "the token just chosen is "
                                               f"{_tokens_text(expected[k][:, 0])}.")
    if len(got.logits) != len(fed):
        return
    for k, (chunk, logits) in enumerate(zip(fed, got.logits)):
        end = s + k if k else s
        if end > out.size(1) or logits.dim() != 3:
            return
        want_logits = case.model(out[:, :end])[:, -chunk.size(1):]
        if logits.shape != want_logits.shape:
            return
        if not torch.allclose(logits, want_logits, atol=1e-4, rtol=1e-3):
            off = float((logits - want_logits).abs().max())
            STEP_LOGITS_WRONG.fail(title, seen + f" The logits of step {k} (0: the "
                                                 "prompt) differ from the model's by "
                                                 f"up to {off:.3g}.")
        chosen = out[:, end] if end < out.size(1) else None
        best = logits[:, -1].argmax(-1)
        if chosen is not None and not torch.equal(chosen, best):
            WRONG_CHOICE.fail(title, seen + f" After step {k} you appended "
                                            f"{_tokens_text(chosen)}; the argmax of "
                                            "the last position's logits is "
                                            f"{_tokens_text(best)}.")


def _carried(title, fn, case) -> None:
    """The same call twice, under the same seed, must give the same tokens."""
    __tracebackhide__ = True
    a, b = _run_generate(fn, case, seed=1), _run_generate(fn, case, seed=1)
    if isinstance(a.output, torch.Tensor) and isinstance(b.output, torch.Tensor) \
            and a.output.shape == b.output.shape and torch.equal(a.output, b.output):
        return
    if isinstance(a.output, Raised) and isinstance(b.output, Raised):
        return
    CACHE_CARRIED.fail(title, f"Two calls on case {case.label}, each under "
                              "torch.manual_seed(1), returned different results.")


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
    right = [isinstance(r.output, torch.Tensor) and type(r.output) is torch.Tensor
             and r.output.shape == w.shape and r.output.device == w.device
             and torch.equal(r.output, w) and not r.prompt_changed
             for r, w in zip(runs, wants)]
    if all(right):
        for case, got in zip(cases, runs):
            s = case.prompt.size(1)
            if got.fed and _fed_positions(got) > s + case.n:
                NOT_CACHED.fail(title, f"On case {case.label} your loop fed "
                                       f"{_fed_positions(got)} token positions through "
                                       f"the model; with a cache it needs {s} + "
                                       f"{case.n - 1} = {s + case.n - 1}.")
        passed(title, f"equals uncached greedy decoding on {len(cases)} prompts in a "
                      "row, each token through the model once")
        return
    _gen_raised(title, cases, runs)
    if any(right):
        _carried(title, generate_greedy, cases[0])
    k = right.index(False)
    case, got, want = cases[k], runs[k], wants[k]
    _gen_form(title, case, got, want)
    _dropped_or_repeated(title, case, got, want)
    _carried(title, generate_greedy, case)
    with torch.no_grad():
        _trace_problems(title, case, got, want)
    out = got.output
    j = _first_wrong_token(out, want)
    fail(title, f"wrong on case {case.label}: the first wrong token is at position {j} "
                f"(yours {_tokens_text(out[:, j])}, expected "
                f"{_tokens_text(want[:, j])}). It {UNEXPLAINED}; compare your loop "
                "with the lesson step by step.", S_CACHE)


def _shortcuts() -> dict:
    return {inspect.unwrap(fn).__code__: name for fn, name in (
        (sampling.generate, "tformer_ref.sampling.generate"),
        (sampling.sample_next, "tformer_ref.sampling.sample_next"),
        (greedy_decode, "tformer_ref.decoding.greedy_decode"),
        (beam_search, "tformer_ref.decoding.beam_search"))}


@single_threaded
@keeps_random_state
def check_generate_greedy_by_hand(generate_greedy) -> None:
    """Hidden test: the learner wrote the loop, not a call of the course's generate."""
    __tracebackhide__ = True
    case = gen_cases()[0]
    check_not_delegated("generate_greedy", lambda: _run_generate(generate_greedy, case),
                        forbidden_code=_shortcuts())


seal(__name__)
