"""Checks for exercise ``generate_greedy`` of chapter 8 (book/ch08_generation):
``generate_greedy(model, prompt [B, S], max_new_tokens) -> [B, S + N]``, greedy
decoding with a fresh KV cache, equal token for token to uncached greedy decoding.

Judged by behaviour only: the tokens, their dtype and length, the same call twice, what
the loop fed the model (a hook on the token embedding) and got back (on ``lm_head``),
and how many tokens the first block's cache held at each step (a pre-hook on its
attention): none at a step after the first is a cache made anew, some at a call's first
step is a cache carried over. Wrong logits of a step are put to ``lm_step``'s own check
(``lm_step_problems``) with the notebook's ``lm_step``.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass

import torch

from tformer_ref import sampling
from tformer_ref.decoding import beam_search, greedy_decode
from tformer_ref.model import DecoderOnlyLM

from ...guard.integrity import seal
from ..delegation import check_not_delegated
from ..diagnosis import (
    CheckFailure,
    Diagnosis,
    Raised,
    fail,
    passed,
    run,
    single_threaded,
    verify_integrity,
)
from ..flow import fallback
from ..measure.decode_loops import recording_lm
from ..measure.sizes import named
from .harness import keeps_random_state, lm, run_case, token_ids, tokens_text
from .lm_step import M2, lm_step_problems, step_cases
from .sections import S_CACHE, S_CACHE_PITFALLS

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True

# What the fallback advises when no mistake of the loop could be named.
LOOP_ADVICE = "compare your loop with the lesson step by step"

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
                token_ids(b, s, 200 + seed),
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


def _run_generate(fn, case: GenCase, seed: int = 0) -> GenRun:
    model = case.model
    prompt = case.prompt.clone()
    devices = [prompt.device] if prompt.device.type == "cuda" else []
    attention = model.blocks.layers[0].self_attn
    with (
        recording_lm(model.tok_embed, model.lm_head, attention) as seen,
        torch.no_grad(),
        torch.random.fork_rng(devices=devices),
    ):
        torch.manual_seed(seed)
        output = run(fn, (model, prompt, case.n))
    changed = not torch.equal(prompt, case.prompt)
    return GenRun(output, seen.fed, seen.logits, changed, seen.attended)


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
CACHE_NOT_PASSED = Diagnosis(
    "the cache not passed to the model",
    "Every step after the prompt runs the model on its one new token with the cache "
    "the prompt filled: lm_step(model, token, cache), or model(token, cache=cache). "
    "Without the cache the token attends to itself alone, at position 0.",
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
        lm_step_problems("lm_step", step)
    except CheckFailure as failure:
        text = str(failure)
        named = re.search(r"the pitfall '(.+?)'\.", text)
        return f"'{named.group(1)}'" if named else "a mistake"
    return None


def _grows_cache(step) -> bool:
    """The step leaves the tokens it is given in the caller's cache."""
    case = step_cases()[0]
    got = run_case(step, case)
    s = case.chunks[0].size(1)
    return (
        bool(got.lengths)
        and all(n == s for n in got.lengths[0][1])
        and len(got.lengths[0][1]) == len(case.model.blocks.layers)
    )


def _step_cache_problems(title, fn, seen, k, cached, want_cached) -> None:
    """Step k's logits are wrong: was its cache the one the loop should have grown?
    ``cached``: what the first block's cache layer held when step k began."""
    step = _learners_step(fn)
    if cached is None or cached == want_cached:
        if step is not None and cached is not None and _step_failure(step) is None:
            fallback(
                title,
                f"{seen} The cache held the {want_cached} earlier tokens, "
                "as it should, and your lm_step passes check_lm_step's cases: "
                "what your loop runs for a step is not your lm_step as it is",
                S_CACHE,
                LOOP_ADVICE,
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
        fallback(
            title,
            f"{observed} Your lm_step passes check_lm_step's cases",
            S_CACHE,
            LOOP_ADVICE,
        )
    # The step grows the cache wrongly (twice, say): it is the step's fault.


def _carried_seen(title, cases, runs) -> None:
    """A call whose very first step found tokens in the cache: they came from an
    earlier call."""
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
    out, fed = got.output, got.fed
    s = case.prompt.size(1)
    diverge = _first_wrong_token(out, want)
    seen = (
        f"On case {case.label} the first wrong token is at position {diverge} "
        f"(new token {diverge - s}): yours {tokens_text(out[:, diverge])}, "
        f"expected {tokens_text(want[:, diverge])}."
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
                f"{tokens_text(chunk[:, 0])}{what}; "
                "the token just chosen is "
                f"{tokens_text(expected[k][:, 0])}.",
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
            known = len(got.attended) == len(fed)
            cached = got.attended[k][0] if known else None
            if known and cached is None and k >= 1:
                CACHE_NOT_PASSED.fail(
                    title,
                    seen + differ + f" When step {k} ran, no cache reached the "
                    "model's attention.",
                )
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
                f"{tokens_text(chosen)}; the argmax of "
                "the last position's logits is "
                f"{tokens_text(best)}.",
            )


def _carried(title, fn, case) -> None:
    """The same call twice, under the same seed, must give the same tokens."""
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
    fallback(
        title,
        f"wrong on case {case.label}: the first wrong token is at position {j} "
        f"(yours {tokens_text(out[:, j])}, expected {tokens_text(want[:, j])})",
        S_CACHE,
        LOOP_ADVICE,
    )


def _continuation_problems(title, case, out, want) -> None:
    """New tokens that are another prompt's greedy continuation: row 0's copied to
    every row, or the prompt's own without its first token."""
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
            f"{tokens_text(new[0])}; row 1's own are {tokens_text(right[1])}.",
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
    case = gen_cases()[0]
    check_not_delegated(
        "generate_greedy",
        lambda: _run_generate(generate_greedy, case),
        forbidden_code=_shortcuts(),
    )


seal(__name__)
