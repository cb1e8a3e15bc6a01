"""Chapter 8's measured bank for generate_greedy (the format: tests/bank/bank.py).

Each answer is literal learner code; a comment says what the mistake is and why a
learner would make it. The answers were written from the exercise's interface alone,
before the chapter's checks existed, so that the bank measures the checks rather than
echoing them. How the expected diagnoses are written (``_named``) and how the chapter's
bank was measured: answers_ch08.py.
"""

import math

import torch

from bank import GENERIC, right, wrong  # noqa: F401
from exercise_cells import graders
from answers_ch08 import _named
from tformer_ref.kv_cache import KVCache
from tformer_ref.masks import causal_mask

# Every check of an exercise: its test cells, hidden tests included (exercise_cells).
GRADERS = graders("ch08_generation", {"generate_greedy": "generate_greedy"})


# The learner's generate_greedy calls their own lm_step; here, a right one.


def lm_step(model, tokens, cache):
    past = cache.length
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past))
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


# ------------------------------------------------------------------------ right ones


@right("generate_greedy")
def greedy_for_loop(model, prompt, max_new_tokens):
    cache = KVCache()
    tokens = prompt
    logits = lm_step(model, prompt, cache)
    for _ in range(max_new_tokens):
        next_token = logits[:, -1].argmax(dim=-1, keepdim=True)
        tokens = torch.cat([tokens, next_token], dim=1)
        logits = lm_step(model, next_token, cache)
    return tokens


@right("generate_greedy")
def greedy_while_loop(model, prompt, max_new_tokens):
    cache = KVCache()
    out = prompt.clone()
    step_input = prompt
    while out.size(1) < prompt.size(1) + max_new_tokens:
        logits = lm_step(model, step_input, cache)
        step_input = logits[:, -1, :].argmax(-1)[:, None]
        out = torch.cat((out, step_input), dim=-1)
    return out


@right("generate_greedy")
def greedy_argmax_of_softmax(model, prompt, max_new_tokens):
    cache = KVCache()
    seq = prompt
    x = prompt
    with torch.no_grad():
        for _ in range(max_new_tokens):
            probs = torch.softmax(lm_step(model, x, cache)[:, -1], dim=-1)
            x = probs.argmax(dim=-1).unsqueeze(1)
            seq = torch.cat([seq, x], dim=1)
    return seq


@right("generate_greedy")
def greedy_collect_then_cat(model, prompt, max_new_tokens):
    cache = KVCache()
    new_tokens = []
    inp = prompt
    for step in range(max_new_tokens):
        logits = lm_step(model, inp, cache)
        inp = logits[:, -1:].argmax(-1)  # [B, 1]
        new_tokens.append(inp)
    return torch.cat([prompt, *new_tokens], dim=1)


@right("generate_greedy")
def greedy_preallocated(model, prompt, max_new_tokens):
    B, S = prompt.shape
    out = torch.empty(B, S + max_new_tokens, dtype=torch.long, device=prompt.device)
    out[:, :S] = prompt
    cache = KVCache()
    for t in range(S, S + max_new_tokens):
        inp = out[:, :t] if t == S else out[:, t - 1 : t]
        out[:, t] = lm_step(model, inp, cache)[:, -1].argmax(-1)
    return out


@right("generate_greedy")
def greedy_prompt_token_by_token(model, prompt, max_new_tokens):
    # Feeds the prompt one token at a time too: slower, the same cache in the end.
    cache = KVCache()
    for i in range(prompt.size(1)):
        logits = lm_step(model, prompt[:, i : i + 1], cache)
    tokens = prompt
    for _ in range(max_new_tokens):
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, nxt], 1)
        if tokens.size(1) < prompt.size(1) + max_new_tokens:
            logits = lm_step(model, nxt, cache)
    return tokens


@right("generate_greedy")
def greedy_topk_one(model, prompt, max_new_tokens):
    if max_new_tokens == 0:
        return prompt.clone()
    cache = KVCache()
    tokens = prompt
    logits = lm_step(model, prompt, cache)[:, -1]
    for i in range(max_new_tokens):
        best = torch.topk(logits, 1, dim=-1).indices
        tokens = torch.cat([tokens, best], dim=1)
        if i + 1 < max_new_tokens:
            logits = lm_step(model, best, cache)[:, -1]
    return tokens


@right("generate_greedy")
def greedy_last_token_of_sequence(model, prompt, max_new_tokens):
    cache = KVCache()
    tokens = prompt
    for step in range(max_new_tokens):
        feed = tokens if step == 0 else tokens[:, -1:]
        logits = lm_step(model, feed, cache)
        tokens = torch.cat([tokens, logits[:, -1].argmax(-1).view(-1, 1)], dim=1)
    return tokens


@right("generate_greedy")
def greedy_through_model_forward(model, prompt, max_new_tokens):
    # The model's own cached forward instead of lm_step: the same computation.
    cache = KVCache()
    tokens, step_input = prompt, prompt
    for _ in range(max_new_tokens):
        nxt = model(step_input, cache=cache)[:, -1].argmax(-1, keepdim=True)
        tokens, step_input = torch.cat([tokens, nxt], dim=1), nxt
    return tokens


# ------------------------------------------------------------------------ wrong ones


CARRIED = _named(
    "cache",
    r"carr|shared|reus|between|across|default|previous|stale|"
    r"fresh|new|earlier|other",
)


@wrong(
    "generate_greedy",
    r"max_new_tokens=0 you return 5 tokens, expected 4 \+ 0 = 4",
    listed=False,
)
def greedy_do_while(model, prompt, max_new_tokens):  # checks the count after a token
    cache = KVCache()
    tokens = prompt
    logits = lm_step(model, prompt, cache)
    while True:
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, nxt], dim=1)
        if tokens.size(1) - prompt.size(1) >= max_new_tokens:
            return tokens
        logits = lm_step(model, nxt, cache)


@wrong("generate_greedy", CARRIED, listed=True)
def greedy_mutable_default_cache(model, prompt, max_new_tokens, cache=KVCache()):
    # A default argument is built once: the second prompt attends to the first one.
    tokens = prompt
    logits = lm_step(model, prompt, cache)
    for _ in range(max_new_tokens):
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, nxt], dim=1)
        logits = lm_step(model, nxt, cache)
    return tokens


_CACHE = KVCache()


@wrong("generate_greedy", CARRIED, listed=True)
def greedy_module_level_cache(model, prompt, max_new_tokens):
    # The cache made once in the notebook, next to the model, and used by every call.
    tokens = prompt
    logits = lm_step(model, prompt, _CACHE)
    for _ in range(max_new_tokens):
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, nxt], dim=1)
        logits = lm_step(model, nxt, _CACHE)
    return tokens


@wrong("generate_greedy", CARRIED, listed=False)
def greedy_cache_on_the_model(model, prompt, max_new_tokens):
    # Hangs the cache on the model "so it is kept": it is kept for the next prompt too.
    if not hasattr(model, "kv_cache"):
        model.kv_cache = KVCache()
    cache = model.kv_cache
    tokens = prompt
    logits = lm_step(model, prompt, cache)
    for _ in range(max_new_tokens):
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, nxt], dim=1)
        logits = lm_step(model, nxt, cache)
    return tokens


@wrong(
    "generate_greedy",
    _named(r"prompt|new tokens|drop|missing|only|fewer|short"),
    listed=True,
)
def greedy_returns_new_tokens_only(model, prompt, max_new_tokens):
    # Returns what was generated, without the prompt in front: [B, N].
    cache = KVCache()
    generated = []
    inp = prompt
    for _ in range(max_new_tokens):
        inp = lm_step(model, inp, cache)[:, -1].argmax(-1, keepdim=True)
        generated.append(inp)
    return torch.cat(generated, dim=1)


@wrong(
    "generate_greedy",
    _named(r"drop|missing|one|fewer|short|step|number|count"),
    listed=True,
)
def greedy_one_step_short(model, prompt, max_new_tokens):
    # range(max_new_tokens - 1) "because the prompt step already made one".
    cache = KVCache()
    tokens, inp = prompt, prompt
    for _ in range(max_new_tokens - 1):
        inp = lm_step(model, inp, cache)[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, inp], dim=1)
    return tokens


@wrong(
    "generate_greedy",
    _named(r"repeat|extra|one|more|too many|step|number|count"),
    listed=True,
)
def greedy_one_step_too_many(model, prompt, max_new_tokens):
    # while <= instead of <: one token more than asked for.
    cache = KVCache()
    tokens, inp = prompt, prompt
    while tokens.size(1) <= prompt.size(1) + max_new_tokens:
        inp = lm_step(model, inp, cache)[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, inp], dim=1)
    return tokens


@wrong(
    "generate_greedy",
    _named(
        "cache|whole|sequence",
        r"whole|twice|grow|repeat|"
        r"again|full|all|every",
    ),
    listed=True,
)
def greedy_whole_sequence_into_cache(model, prompt, max_new_tokens):
    # The uncached loop with a cache added: each step feeds every token again.
    cache = KVCache()
    tokens = prompt
    for _ in range(max_new_tokens):
        logits = lm_step(model, tokens, cache)
        tokens = torch.cat([tokens, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return tokens


@wrong(
    "generate_greedy",
    _named(
        r"repeat|again|twice|previous|stale|same|wrong|"
        r"token"
    ),
    listed=False,
)
def greedy_feeds_previous_token(model, prompt, max_new_tokens):
    # Feeds tokens[:, -1:] before appending the new token: the last one goes in twice.
    cache = KVCache()
    tokens = prompt
    logits = lm_step(model, prompt, cache)
    for _ in range(max_new_tokens):
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        logits = lm_step(model, tokens[:, -1:], cache)
        tokens = torch.cat([tokens, nxt], dim=1)
    return tokens


@wrong(
    "generate_greedy", _named(r"feeds the wrong token|repeat|again|twice"), listed=False
)
def greedy_last_prompt_token_twice(model, prompt, max_new_tokens):
    # Runs the prompt, then "starts" decoding from its last token: that token is
    # cached twice.
    cache = KVCache()
    lm_step(model, prompt, cache)
    inp, tokens = prompt[:, -1:], prompt
    for _ in range(max_new_tokens):
        inp = lm_step(model, inp, cache)[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, inp], dim=1)
    return tokens


@wrong(
    "generate_greedy",
    _named(
        "cache",
        r"reset|clear|fresh|new|every step|each step|"
        r"lost|forg|empty",
    ),
    listed=False,
)
def greedy_new_cache_each_step(model, prompt, max_new_tokens):
    # KVCache() inside the loop: each new token is run with no past at all.
    tokens, inp = prompt, prompt
    for _ in range(max_new_tokens):
        cache = KVCache()
        inp = lm_step(model, inp, cache)[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, inp], dim=1)
    return tokens


@wrong(
    "generate_greedy",
    _named(
        "cache",
        r"reset|clear|fresh|new|every step|each step|"
        r"lost|forg|empty",
    ),
    listed=False,
)
def greedy_resets_between_steps(model, prompt, max_new_tokens):
    # cache.reset() at the end of every step "to free memory".
    cache = KVCache()
    tokens, inp = prompt, prompt
    for _ in range(max_new_tokens):
        inp = lm_step(model, inp, cache)[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, inp], dim=1)
        cache.reset()
    return tokens


@wrong("generate_greedy", r"'decoding without the cache'", listed=False)
def greedy_uncached_loop(model, prompt, max_new_tokens):
    # The uncached loop of the previous section: the whole sequence at every step.
    tokens = prompt
    for _ in range(max_new_tokens):
        logits = model(tokens)
        tokens = torch.cat([tokens, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return tokens


@wrong("generate_greedy", r"'the cache not passed to the model'", listed=False)
def greedy_forward_without_cache_argument(model, prompt, max_new_tokens):
    # Makes a KVCache but calls model(step_input) without cache=cache: each new token
    # goes through the model alone.
    cache = KVCache()  # noqa: F841
    tokens, step_input = prompt, prompt
    for _ in range(max_new_tokens):
        nxt = model(step_input)[:, -1].argmax(-1, keepdim=True)
        tokens, step_input = torch.cat([tokens, nxt], dim=1), nxt
    return tokens


@wrong("generate_greedy", _named(r"greedy|argmax|sampl|random"), listed=False)
def greedy_samples_instead(model, prompt, max_new_tokens):
    # torch.multinomial from the softmax: sampling, not greedy decoding.
    cache = KVCache()
    tokens, inp = prompt, prompt
    for _ in range(max_new_tokens):
        probs = lm_step(model, inp, cache)[:, -1].softmax(-1)
        inp = torch.multinomial(probs, 1)
        tokens = torch.cat([tokens, inp], dim=1)
    return tokens


@wrong("generate_greedy", _named(r"greedy|argmax|min|least|smallest"), listed=False)
def greedy_argmin(model, prompt, max_new_tokens):
    # argmin on the losses-like numbers: the least likely token each step.
    cache = KVCache()
    tokens, inp = prompt, prompt
    for _ in range(max_new_tokens):
        inp = lm_step(model, inp, cache)[:, -1].argmin(-1, keepdim=True)
        tokens = torch.cat([tokens, inp], dim=1)
    return tokens


@wrong(
    "generate_greedy",
    _named(
        r"first position|position 0|first|last position|"
        r"wrong position"
    ),
    listed=False,
)
def greedy_first_position_logits(model, prompt, max_new_tokens):
    # logits[:, 0]: the prediction after the first prompt token, not the last.
    cache = KVCache()
    tokens, inp = prompt, prompt
    for _ in range(max_new_tokens):
        inp = lm_step(model, inp, cache)[:, 0].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, inp], dim=1)
    return tokens


@wrong("generate_greedy", _named(r"argmax|greedy"), listed=False)
def greedy_one_token_for_the_batch(model, prompt, max_new_tokens):
    # argmax over the flattened [B, V] logits: one token id (mod V) for every row.
    cache = KVCache()
    tokens, inp = prompt, prompt
    for _ in range(max_new_tokens):
        last = lm_step(model, inp, cache)[:, -1]
        best = last.argmax() % last.size(-1)
        inp = best.expand(prompt.size(0), 1)
        tokens = torch.cat([tokens, inp], dim=1)
    return tokens


@wrong("generate_greedy", _named(r"argmax|greedy"), listed=False)
def greedy_max_values_not_indices(model, prompt, max_new_tokens):
    # torch.max(...)[0] is the largest logit, [1] its index: took the value.
    cache = KVCache()
    tokens, inp = prompt, prompt
    for _ in range(max_new_tokens):
        best = torch.max(lm_step(model, inp, cache)[:, -1], dim=-1)[0]
        inp = best.long().unsqueeze(1)
        tokens = torch.cat([tokens, inp], dim=1)
    return tokens


@wrong("generate_greedy", r"must start with the prompt", listed=False)
def greedy_prepends_tokens(model, prompt, max_new_tokens):
    # torch.cat([new, tokens]): each new token goes in front.
    cache = KVCache()
    tokens, inp = prompt, prompt
    for _ in range(max_new_tokens):
        inp = lm_step(model, inp, cache)[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([inp, tokens], dim=1)
    return tokens


@wrong("generate_greedy", r"must be a LongTensor", listed=False)
def greedy_float_tokens(model, prompt, max_new_tokens):
    # Preallocates with torch.zeros (float32 by default): token ids come back as floats.
    B, S = prompt.shape
    out = torch.zeros(B, S + max_new_tokens, device=prompt.device)
    out[:, :S] = prompt
    cache = KVCache()
    inp = prompt
    for t in range(S, S + max_new_tokens):
        inp = lm_step(model, inp, cache)[:, -1].argmax(-1, keepdim=True)
        out[:, t] = inp[:, 0]
    return out


@wrong("generate_greedy", r"'the prompt's first token is dropped'", listed=False)
def greedy_prompt_without_first_token(model, prompt, max_new_tokens):
    # Shifts the prompt as for training (prompt[:, 1:]): its first token is lost.
    cache = KVCache()
    tokens = prompt[:, 1:]
    inp = tokens
    for _ in range(max_new_tokens):
        inp = lm_step(model, inp, cache)[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, inp], dim=1)
    return torch.cat([prompt[:, :1], tokens], dim=1)


@wrong("generate_greedy", r"'every row gets row 0's tokens'", listed=False)
def greedy_prompt_row_zero_only(model, prompt, max_new_tokens):
    # Written for one prompt: decodes row 0 and copies it to the whole batch.
    cache = KVCache()
    tokens, inp = prompt[:1], prompt[:1]
    for _ in range(max_new_tokens):
        inp = lm_step(model, inp, cache)[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, inp], dim=1)
    return torch.cat(
        [prompt, tokens[:, prompt.size(1) :].expand(prompt.size(0), -1)], dim=1
    )


@wrong(
    "generate_greedy",
    _named(
        r"repeat|again|twice|drop|missing|cache|stale|"
        r"previous|token"
    ),
    listed=False,
)
def greedy_step_skips_every_second_token(model, prompt, max_new_tokens):
    # Appends the token, but feeds the cache only every second one ("to go faster").
    cache = KVCache()
    tokens = prompt
    logits = lm_step(model, prompt, cache)
    for step in range(max_new_tokens):
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, nxt], dim=1)
        if step % 2 == 0:
            logits = lm_step(model, nxt, cache)
    return tokens


@wrong(
    "generate_greedy",
    r"expected \[B, S \+ N\] = \[\d+, \d+\], got \[\d+, \d+\]",
    listed=False,
)
def greedy_appends_every_position(model, prompt, max_new_tokens):
    # Appends the argmax of every position of the prompt step, not only the last one.
    cache = KVCache()
    logits = lm_step(model, prompt, cache)
    tokens = torch.cat([prompt, logits.argmax(-1)], dim=1)
    for _ in range(max_new_tokens - 1):
        logits = lm_step(model, tokens[:, -1:], cache)
        tokens = torch.cat([tokens, logits.argmax(-1)], dim=1)
    return tokens


_cache = None


@wrong("generate_greedy", CARRIED, listed=False)
def greedy_lazy_global_cache(model, prompt, max_new_tokens):
    # Creates the cache on first use and keeps it in a global "to avoid re-allocating".
    global _cache
    if _cache is None:
        _cache = KVCache()
    tokens, inp = prompt, prompt
    for _ in range(max_new_tokens):
        inp = lm_step(model, inp, _cache)[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, inp], dim=1)
    return tokens


_caches = {}


@wrong("generate_greedy", CARRIED, listed=False)
def greedy_cache_per_batch_shape(model, prompt, max_new_tokens):
    # Works around "new keys do not fit a cache" by keeping one cache per batch size.
    cache = _caches.setdefault(prompt.size(0), KVCache())
    tokens, inp = prompt, prompt
    for _ in range(max_new_tokens):
        inp = lm_step(model, inp, cache)[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, inp], dim=1)
    return tokens


@wrong("generate_greedy", r"RuntimeError.*at line \d+ of your code", listed=False)
def greedy_cat_without_keepdim(model, prompt, max_new_tokens):
    # argmax drops the last axis: [B] cannot be concatenated to [B, T] along dim 1.
    cache = KVCache()
    tokens, inp = prompt, prompt
    for _ in range(max_new_tokens):
        nxt = lm_step(model, inp, cache)[:, -1].argmax(-1)
        tokens = torch.cat([tokens, nxt], dim=1)
        inp = nxt[:, None]
    return tokens


@wrong(
    "generate_greedy",
    r"expected \[B, S \+ N\] = \[\d+, \d+\], got \[\d+, \d+\]",
    listed=False,
)
def greedy_fixed_number_of_steps(model, prompt, max_new_tokens):
    # The 20 of the lesson's demo cell kept instead of max_new_tokens.
    cache = KVCache()
    tokens, inp = prompt, prompt
    for _ in range(min(20, model.max_len - prompt.size(1))):
        inp = lm_step(model, inp, cache)[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, inp], dim=1)
    return tokens
