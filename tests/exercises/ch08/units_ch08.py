"""Chapter 8's learner answers that the tests of several test files share: the
lesson's next_token_probs and lm_step, the notebook's ``lm_step`` that the decoding
loops call, and the wrong steps and loop that the generate_greedy tests (as the
notebook's own lm_step) and the chapter's random-state test grade too.
"""

import math

import torch

from tformer_ref.kv_cache import KVCache
from tformer_ref.masks import causal_mask


def probs_right(logits, temperature, top_p):
    """The lesson's way: sort, cumulative sum, mask the logits with -inf, softmax."""
    logits = logits / temperature
    probs = logits.softmax(-1)
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    before = sorted_probs.cumsum(-1) - sorted_probs
    keep_sorted = before < top_p
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    return logits.masked_fill(~keep, float("-inf")).softmax(-1)


def step_right(model, tokens, cache):
    """The exercise's recipe: every block with its own cache layer."""
    past = cache.length
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past))
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


def step_positions_from_zero(model, tokens, cache):
    # Bug: the positions start at 0 at every step.
    mask = causal_mask(tokens.size(1), tokens.device, past=cache.length)
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x))
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


def step_new_cache(model, tokens, cache):
    # Bug: a fresh cache inside the step; the caller's stays empty.
    cache = KVCache()
    return step_right(model, tokens, cache)


# Each decoding loop uses a step: step_right (the learner's lm_step) unless it says.


def lm_step(model, tokens, cache):
    return step_right(model, tokens, cache)


def gen_samples(model, prompt, max_new_tokens):
    # Bug: draws from the softmax instead of taking the argmax.
    cache = KVCache()
    logits = lm_step(model, prompt, cache)
    tokens = prompt
    for _ in range(max_new_tokens):
        nxt = torch.multinomial(logits[:, -1].softmax(-1), 1)
        tokens = torch.cat([tokens, nxt], dim=1)
        logits = lm_step(model, nxt, cache)
    return tokens
