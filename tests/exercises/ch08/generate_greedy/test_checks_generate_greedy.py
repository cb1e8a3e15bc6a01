"""generate_greedy (chapter 8, book/ch08_generation): the unit tests of
``ch08.check_generate_greedy`` and its hidden ``check_generate_greedy_by_hand``, with
wrong loops (each rejected with its named diagnosis, or as unexplained) and right ones
written differently (each accepted), none writing to stderr. Each decoding loop uses a
step: the notebook's ``lm_step`` (units_ch08.py, a right one) unless it says.

Beyond the bank (bank_generate_greedy.py): a right loop over a wrong notebook lm_step
(no bank answer reaches "the step's logits are wrong": a bank answer binds only
generate_greedy), a cache carried even when used before, what the cache held, the
missing token named, the reference refused by the hidden test, and the cases' argmax
margins.

Each one is written as a learner might type it, not as the check's own variant is.
"""

import types

import pytest
import torch
from units_ch08 import gen_samples, lm_step, step_new_cache, step_positions_from_zero

from tformer_grading.checks import CheckFailure, ch08
from tformer_grading.checks.ch08 import generate_greedy as greedy_checks
from tformer_grading.checks.diagnosis import UNEXPLAINED
from tformer_ref.kv_cache import KVCache

# -------------------------------------------------------------------- generate_greedy


def gen_right(model, prompt, max_new_tokens):
    """The prompt once, then one token per step."""
    cache = KVCache()
    logits = lm_step(model, prompt, cache)
    tokens = prompt
    for _ in range(max_new_tokens):
        nxt = logits[:, -1].argmax(dim=-1, keepdim=True)
        tokens = torch.cat([tokens, nxt], dim=1)
        logits = lm_step(model, nxt, cache)
    return tokens


def gen_right_collect(model, prompt, max_new_tokens):
    """Collects the new tokens in a list and skips the last, useless step."""
    cache, new = KVCache(), []
    step_input = prompt
    for i in range(max_new_tokens):
        last = lm_step(model, step_input, cache)[:, -1, :]
        step_input = torch.argmax(last, dim=1)[:, None]
        new.append(step_input)
    return torch.cat([prompt, *new], dim=1)


def gen_right_prompt_token_by_token(model, prompt, max_new_tokens):
    """Feeds even the prompt one token at a time: each token still goes in once."""
    cache = KVCache()
    out = prompt.clone()
    for j in range(prompt.size(1)):
        logits = lm_step(model, prompt[:, j : j + 1], cache)
    while out.size(1) < prompt.size(1) + max_new_tokens:
        t = logits[:, -1].argmax(-1).unsqueeze(1)
        out = torch.cat((out, t), 1)
        if out.size(1) < prompt.size(1) + max_new_tokens:
            logits = lm_step(model, t, cache)
    return out


def gen_cache_default(model, prompt, max_new_tokens, cache=KVCache()):
    # Bug: the default KVCache is made once and shared by every call.
    logits = lm_step(model, prompt, cache)
    tokens = prompt
    for _ in range(max_new_tokens):
        nxt = logits[:, -1].argmax(dim=-1, keepdim=True)
        tokens = torch.cat([tokens, nxt], dim=1)
        logits = lm_step(model, nxt, cache)
    return tokens


SHARED_CACHE = KVCache()


def gen_global_cache(model, prompt, max_new_tokens):
    # Bug: one global cache for every prompt, emptied nowhere.
    logits = lm_step(model, prompt, SHARED_CACHE)
    out = prompt
    for _ in range(max_new_tokens):
        out = torch.cat([out, logits[:, -1:].argmax(-1)], dim=1)
        logits = lm_step(model, out[:, -1:], SHARED_CACHE)
    return out


def gen_one_too_many(model, prompt, max_new_tokens):
    # Bug: <= instead of <: one new token too many.
    cache = KVCache()
    logits = lm_step(model, prompt, cache)
    tokens = prompt
    while tokens.size(1) <= prompt.size(1) + max_new_tokens:
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, nxt], dim=1)
        logits = lm_step(model, nxt, cache)
    return tokens


def gen_only_new(model, prompt, max_new_tokens):
    # Bug: returns the new tokens without the prompt.
    cache = KVCache()
    logits = lm_step(model, prompt, cache)
    new = []
    for _ in range(max_new_tokens):
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        new.append(nxt)
        logits = lm_step(model, nxt, cache)
    return torch.cat(new, dim=1)


def gen_whole_sequence_each_step(model, prompt, max_new_tokens):
    # Bug: feeds the whole sequence again into the same cache.
    cache = KVCache()
    tokens = prompt
    for _ in range(max_new_tokens):
        logits = lm_step(model, tokens, cache)
        tokens = torch.cat([tokens, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return tokens


def gen_feeds_previous(model, prompt, max_new_tokens):
    # Bug: feeds the token before the one just chosen.
    cache = KVCache()
    logits = lm_step(model, prompt, cache)
    tokens = prompt
    for _ in range(max_new_tokens):
        tokens = torch.cat([tokens, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
        logits = lm_step(model, tokens[:, -2:-1], cache)
    return tokens


def gen_first_position(model, prompt, max_new_tokens):
    # Bug: reads the logits of position 0 of each step.
    cache = KVCache()
    logits = lm_step(model, prompt, cache)
    tokens = prompt
    for _ in range(max_new_tokens):
        nxt = logits[:, 0].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, nxt], dim=1)
        logits = lm_step(model, nxt, cache)
    return tokens


def gen_uncached(model, prompt, max_new_tokens):
    # Bug (right tokens, wrong exercise): the whole sequence again at every step.
    tokens = prompt
    for _ in range(max_new_tokens):
        logits = lm_step(model, tokens, KVCache())
        tokens = torch.cat([tokens, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return tokens


def gen_with_own_wrong_step(model, prompt, max_new_tokens):
    # Bug: the loop is right, but it runs a step of its own, not the notebook's
    # (right) lm_step, and that step's positions start from 0.
    cache = KVCache()
    logits = step_positions_from_zero(model, prompt, cache)
    tokens = prompt
    for _ in range(max_new_tokens):
        nxt = logits[:, -1].argmax(dim=-1, keepdim=True)
        tokens = torch.cat([tokens, nxt], dim=1)
        logits = step_positions_from_zero(model, nxt, cache)
    return tokens


def in_notebook(generate_greedy, lm_step):
    """``generate_greedy``'s own code, in a notebook whose ``lm_step`` is the one
    given (the grader finds the learner's lm_step by its name there)."""
    namespace = {**generate_greedy.__globals__, "lm_step": lm_step}
    name = f"{generate_greedy.__name__}_over_{lm_step.__name__}"
    return types.FunctionType(
        generate_greedy.__code__, namespace, name, generate_greedy.__defaults__
    )


def gen_cache_on_model(model, prompt, max_new_tokens):
    # Bug: keeps "the model's cache" on the model, made on the first call only.
    if not hasattr(model, "kv_cache"):
        model.kv_cache = KVCache()
    logits = lm_step(model, prompt, model.kv_cache)
    tokens = prompt
    for _ in range(max_new_tokens):
        nxt = logits[:, -1].argmax(dim=-1, keepdim=True)
        tokens = torch.cat([tokens, nxt], dim=1)
        logits = lm_step(model, nxt, model.kv_cache)
    return tokens


CACHES = {}


def gen_cache_per_batch_size(model, prompt, max_new_tokens):
    # Bug: one cache per batch size, "so that the shapes always fit", kept forever.
    cache = CACHES.setdefault(prompt.shape[0], KVCache())
    logits = lm_step(model, prompt, cache)
    out = prompt
    for _ in range(max_new_tokens):
        out = torch.cat([out, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
        logits = lm_step(model, out[:, -1:], cache)
    return out


def gen_new_cache_each_step(model, prompt, max_new_tokens):
    # Bug: a new KVCache for every call of lm_step.
    logits = lm_step(model, prompt, KVCache())
    tokens = prompt
    for _ in range(max_new_tokens):
        nxt = logits[:, -1].argmax(dim=-1, keepdim=True)
        tokens = torch.cat([tokens, nxt], dim=1)
        logits = lm_step(model, nxt, KVCache())
    return tokens


def gen_reset_each_step(model, prompt, max_new_tokens):
    # Bug: "a clean cache for each token": resets it inside the loop.
    cache = KVCache()
    step_input, new = prompt, []
    for _ in range(max_new_tokens):
        logits = lm_step(model, step_input, cache)
        step_input = logits[:, -1].argmax(-1, keepdim=True)
        new.append(step_input)
        cache.reset()
    return torch.cat([prompt] + new, dim=1)


def gen_float_tokens(model, prompt, max_new_tokens):
    # Bug: the output buffer is torch.zeros: float32 ids.
    b, s = prompt.shape
    out = torch.zeros(b, s + max_new_tokens, device=prompt.device)
    out[:, :s] = prompt
    cache = KVCache()
    logits = lm_step(model, prompt, cache)
    for j in range(s, s + max_new_tokens):
        out[:, j] = logits[:, -1].argmax(-1)
        logits = lm_step(model, out[:, j : j + 1].long(), cache)
    return out


def gen_right_preallocated(model, prompt, max_new_tokens):
    """Fills a preallocated LongTensor in place; its cache is a local variable."""
    b, s = prompt.shape
    out = torch.empty(b, s + max_new_tokens, dtype=torch.long, device=prompt.device)
    out[:, :s] = prompt
    local_cache = KVCache()
    logits = lm_step(model, prompt, local_cache)
    for j in range(s, s + max_new_tokens):
        out[:, j] = logits[:, -1].argmax(-1)
        if j + 1 < s + max_new_tokens:
            logits = lm_step(model, out[:, j : j + 1], local_cache)
    return out


RIGHT_GENERATE = [
    gen_right,
    gen_right_collect,
    gen_right_prompt_token_by_token,
    gen_right_preallocated,
]


@pytest.mark.parametrize("fn", RIGHT_GENERATE)
def test_generate_greedy_accepts_right_implementations(fn, capsys):
    ch08.check_generate_greedy(fn)
    ch08.check_generate_greedy_by_hand(fn)
    captured = capsys.readouterr()
    assert captured.out.count("✓ generate_greedy") == 2
    assert captured.err == ""


@pytest.mark.parametrize(
    "fn,diagnosis",
    [
        (gen_cache_default, "a cache carried over between prompts"),
        (gen_global_cache, "a cache carried over between prompts"),
        (gen_one_too_many, "decoding drops or repeats a token"),
        (gen_only_new, "returns only the new tokens"),
        (gen_whole_sequence_each_step, "the prefix fed again with a cache"),
        (gen_feeds_previous, "a step feeds the wrong token"),
        (gen_first_position, "the next token is not the argmax of the last position"),
        (gen_samples, "the next token is not the argmax of the last position"),
        (gen_uncached, "decoding without the cache"),
        (
            in_notebook(gen_right, step_positions_from_zero),
            "the step's logits are wrong",
        ),
        (in_notebook(gen_right, step_new_cache), "the step's logits are wrong"),
        (gen_with_own_wrong_step, UNEXPLAINED),
        (gen_cache_on_model, "a cache carried over between prompts"),
        (gen_cache_per_batch_size, "a cache carried over between prompts"),
        (
            gen_new_cache_each_step,
            "a new or reset cache at every step: each new token sees only itself",
        ),
        (gen_reset_each_step, "a new or reset cache at every step"),
        (
            in_notebook(gen_new_cache_each_step, step_positions_from_zero),
            "a new or reset cache at every step",
        ),
        (
            gen_float_tokens,
            r"the tokens must be a LongTensor \[B, S \+ N\] = \[3, 12\] of "
            r"ids \(torch.int64\) on cpu, got torch.float32",
        ),
    ],
)
def test_generate_greedy_rejects_wrong_implementations(fn, diagnosis, capsys):
    if fn is gen_global_cache:
        SHARED_CACHE.reset()
    CACHES.clear()
    with pytest.raises(CheckFailure, match=diagnosis) as info:
        ch08.check_generate_greedy(fn)
    assert "Read §8." in str(info.value)
    assert capsys.readouterr().err == ""


def test_generate_greedy_catches_a_cache_carried_even_when_used_before():
    """A default cache already used by the learner's own cell: even the first graded
    call is wrong, and the same call twice tells."""

    def gen_cache_default_used(model, prompt, max_new_tokens, cache=KVCache()):
        # Bug: as gen_cache_default.
        logits = lm_step(model, prompt, cache)
        tokens = prompt
        for _ in range(max_new_tokens):
            nxt = logits[:, -1].argmax(dim=-1, keepdim=True)
            tokens = torch.cat([tokens, nxt], dim=1)
            logits = lm_step(model, nxt, cache)
        return tokens

    model = ch08.gen_cases()[0].model
    gen_cache_default_used(model, ch08.gen_cases()[0].prompt, 2)
    with pytest.raises(CheckFailure, match="a cache carried over between prompts"):
        ch08.check_generate_greedy(gen_cache_default_used)


def test_generate_greedy_says_what_the_cache_held():
    CACHES.clear()
    with pytest.raises(
        CheckFailure,
        match=r"Call 4 .*prompt \[B=2, S=3\].*: when its "
        r"prompt went in, the first block's cache "
        r"already held 7 token\(s\)",
    ):
        ch08.check_generate_greedy(gen_cache_per_batch_size)
    with pytest.raises(
        CheckFailure,
        match=r"When step 1 began, the first block's "
        r"cache held 0 token\(s\); it should hold "
        r"the 5 before the step's token",
    ):
        ch08.check_generate_greedy(gen_new_cache_each_step)


def test_generate_greedy_blames_a_step_that_drops_the_cache():
    """A right loop over a notebook lm_step that keeps no keys looks like a new cache
    at every step: the step is tested, and named, before the loop is blamed."""
    with pytest.raises(
        CheckFailure,
        match=r"does not grow the cache it is given "
        r"\(check_lm_step says 'the cache is not "
        r"grown'\)",
    ):
        ch08.check_generate_greedy(in_notebook(gen_right, step_new_cache))


def test_generate_greedy_names_the_missing_token():
    def gen_loop_one_short(model, prompt, max_new_tokens):
        # Bug: range(max_new_tokens - 1).
        cache = KVCache()
        logits = lm_step(model, prompt, cache)
        tokens = prompt
        for _ in range(max_new_tokens - 1):
            nxt = logits[:, -1].argmax(dim=-1, keepdim=True)
            tokens = torch.cat([tokens, nxt], dim=1)
            logits = lm_step(model, nxt, cache)
        return tokens

    with pytest.raises(
        CheckFailure,
        match=r"decoding drops or repeats a token.*the last new "
        r"token is missing",
    ):
        ch08.check_generate_greedy(gen_loop_one_short)


def test_generate_greedy_by_hand_rejects_the_reference():
    from tformer_ref.sampling import generate

    def gen_delegated(model, prompt, max_new_tokens):
        return generate(model, prompt, max_new_tokens, temperature=0)

    ch08.check_generate_greedy(gen_delegated)
    with pytest.raises(CheckFailure, match="tformer_ref.sampling.generate"):
        ch08.check_generate_greedy_by_hand(gen_delegated)


def test_greedy_cases_have_clear_argmax_margins_and_varied_tokens():
    """The top two logits at every step differ by more than 1e-3 (cached and uncached
    rounding never flip a choice, on CPU or CUDA), and no case repeats one token."""
    for case in ch08.gen_cases():
        out = greedy_checks._reference_greedy(case.model, case.prompt, case.n + 1)
        with torch.no_grad():
            logits = case.model(out)[:, case.prompt.size(1) - 1 : -1]
        top2 = logits.topk(2, dim=-1).values
        assert (top2[..., 0] - top2[..., 1]).min() > 1e-3, case.label
        new = out[:, case.prompt.size(1) :]
        if case.n >= 2:  # the corner cases (one new token, none) have nothing to vary
            assert (new[:, 1:] != new[:, :-1]).float().mean() > 0.5, case.label
