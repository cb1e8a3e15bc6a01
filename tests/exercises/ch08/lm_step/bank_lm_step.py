"""Chapter 8's measured bank for lm_step (the format: tests/bank/bank.py).

Each answer is literal learner code; a comment says what the mistake is and why a
learner would make it. The answers were written from the exercise's interface alone,
before the chapter's checks existed, so that the bank measures the checks rather than
echoing them. How the expected diagnoses are written (``_named``) and how the chapter's
bank was measured: answers_ch08.py.
"""

import math

import torch
import torch.nn.functional as F

from bank import GENERIC, right, wrong  # noqa: F401
from exercise_cells import graders
from answers_ch08 import _named
from tformer_ref.masks import causal_mask

# Every check of an exercise: its test cells, hidden tests included (exercise_cells).
GRADERS = graders("ch08_generation", {"lm_step": "lm_step"})


# ------------------------------------------------------------------------ right ones


@right("lm_step")
def step_loop_over_layers(model, tokens, cache):
    past = cache.length
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past))
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@right("lm_step")
def step_calls_the_stack(model, tokens, cache):
    # The Encoder stack takes the cache itself and applies the final norm.
    past = cache.length
    mask = causal_mask(tokens.shape[1], device=tokens.device, past=past)
    h = model.tok_embed(tokens) * model.d_model**0.5
    h = model.pos(h, start=past)
    h = model.dropout(h)
    return model.lm_head(model.blocks(h, mask, cache))


@right("lm_step")
def step_mask_by_hand(model, tokens, cache):
    B, S = tokens.shape
    past = cache.length
    mask = torch.ones(S, past + S, dtype=torch.bool, device=tokens.device)
    mask = mask.tril(diagonal=past).view(1, 1, S, past + S)
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, past))
    for layer_index in range(len(model.blocks.layers)):
        x = model.blocks.layers[layer_index](x, mask, cache.layer(layer_index))
    x = model.blocks.norm(x)
    return model.lm_head(x)


@right("lm_step")
def step_no_mask_for_one_token(model, tokens, cache):
    # One new query may see every cached key and itself: no mask is needed then.
    n_new, past = tokens.size(1), cache.length
    mask = None if n_new == 1 else causal_mask(n_new, tokens.device, past=past)
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past))
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@right("lm_step")
def step_bottom_rows_of_full_mask(model, tokens, cache):
    # The full (past + S) causal mask, keeping only the rows of the new queries.
    past, S = cache.length, tokens.size(1)
    mask = causal_mask(past + S, tokens.device)[:, :, past:, :]
    x = model.pos(model.tok_embed(tokens) * math.sqrt(model.d_model), start=past)
    x = model.dropout(x)
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@right("lm_step")
def step_mask_from_positions(model, tokens, cache):
    start = cache.length
    q_pos = torch.arange(start, start + tokens.size(1), device=tokens.device)
    k_pos = torch.arange(start + tokens.size(1), device=tokens.device)
    mask = (k_pos[None, :] <= q_pos[:, None])[None, None]
    scale = torch.tensor(float(model.d_model)).sqrt().item()
    x = model.dropout(model.pos(model.tok_embed(tokens) * scale, start=start))
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask=mask, kv=cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@right("lm_step")
def step_inverted_ignore_mask(model, tokens, cache):
    # Builds the "future" mask with triu and inverts it into a keep-mask.
    past, S = cache.length, tokens.size(1)
    future = torch.ones(S, past + S, device=tokens.device).triu(past + 1).bool()
    keep = ~future[None, None]
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past))
    return model.lm_head(model.blocks(x, keep, cache))


@right("lm_step")
def step_layer_caches_listed_first(model, tokens, cache):
    start = cache.length  # read before any layer grows the cache
    layer_caches = [cache.layer(i) for i in range(len(model.blocks.layers))]
    mask = causal_mask(tokens.size(1), tokens.device, past=start)
    x = model.tok_embed(tokens).mul(math.sqrt(model.d_model))
    x = model.dropout(model.pos(x, start=start))
    for block, kv in zip(model.blocks.layers, layer_caches):
        x = block(x, mask, kv)
    return model.lm_head(model.blocks.norm(x))


@right("lm_step")
def step_under_no_grad(model, tokens, cache):
    with torch.no_grad():
        past = cache.length
        x = model.tok_embed(tokens) * math.sqrt(model.d_model)
        x = model.dropout(model.pos(x, start=past))
        mask = causal_mask(tokens.size(1), device=x.device, past=past)
        for i, block in enumerate(model.blocks.layers):
            x = block(x, mask, cache.layer(i))
        logits = model.lm_head(model.blocks.norm(x))
    return logits


# ------------------------------------------------------------------------ wrong ones


POSITION = r"position"
MASK = r"mask"


@wrong("lm_step", r"'positions not added'", listed=True)
def step_positions_forgotten(model, tokens, cache):
    # "The cache knows where the new tokens go": model.pos is never called.
    past = cache.length
    x = model.dropout(model.tok_embed(tokens) * math.sqrt(model.d_model))
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@wrong("lm_step", _named(POSITION), listed=True)
def step_positions_not_offset(model, tokens, cache):
    # The whole-sequence forward copied over: positions restart at 0 on every step.
    past = cache.length
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x))
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@wrong("lm_step", r"positions added wrongly", listed=False)
def step_positions_added_twice(model, tokens, cache):
    # Adds the positions, then adds them again: positions counted into x twice.
    past = cache.length
    x = model.pos(model.tok_embed(tokens) * math.sqrt(model.d_model), start=past)
    x = model.dropout(model.pos(x, start=past))
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@wrong("lm_step", _named(POSITION), listed=False)
def step_positions_offset_twice(model, tokens, cache):
    # Keeps its own step counter on top of the cache length: the offset is doubled.
    past = cache.length
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past + past))
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@wrong("lm_step", r"positions added wrongly.*a start of 1", listed=False)
def step_positions_from_one(model, tokens, cache):
    # One-based positions: the first token sits at position 1.
    past = cache.length
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past + 1))
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@wrong("lm_step", r"positions added wrongly", listed=False)
def step_positions_start_at_new_length(model, tokens, cache):
    # Offsets by the number of new tokens instead of the cached ones.
    S = tokens.size(1)
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=S - 1))
    mask = causal_mask(S, tokens.device, past=cache.length)
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@wrong("lm_step", _named(MASK, r"full|length|shape|size"), listed=True)
def step_mask_full_length(model, tokens, cache):
    # The causal mask of the whole sequence so far, as the uncached forward builds it.
    past = cache.length
    mask = causal_mask(past + tokens.size(1), tokens.device)
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past))
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@wrong(
    "lm_step", _named(MASK, r"past|cache|shape|size|length|full|row|key"), listed=True
)
def step_mask_ignores_past(model, tokens, cache):
    # causal_mask(S): right for the prompt, too few keys once the cache holds tokens.
    past = cache.length
    mask = causal_mask(tokens.size(1), tokens.device)
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past))
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@wrong("lm_step", _named(MASK, r"row|top|first|bottom|past|offset|wrong"), listed=True)
def step_mask_top_rows(model, tokens, cache):
    # Cuts the full mask down to S rows from the top: the rows of the first queries.
    past, S = cache.length, tokens.size(1)
    mask = causal_mask(past + S, tokens.device)[:, :, :S, :]
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past))
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@wrong("lm_step", _named(MASK, r"row|past|offset|diagonal|wrong|key"), listed=False)
def step_mask_tril_without_diagonal(model, tokens, cache):
    # Right shape by hand, but tril() without diagonal=past: the new queries see only
    # the first cached keys.
    past, S = cache.length, tokens.size(1)
    mask = torch.ones(S, past + S, dtype=torch.bool, device=tokens.device).tril()
    mask = mask[None, None]
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past))
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@wrong("lm_step", _named(r"not causal|future|invert|opposite|triu|upper"), listed=False)
def step_mask_triu(model, tokens, cache):
    # triu in place of tril: every query sees itself and the future, not the past.
    past, S = cache.length, tokens.size(1)
    mask = torch.ones(S, past + S, dtype=torch.bool, device=tokens.device)
    mask = mask.triu(diagonal=past)[None, None]
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past))
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@wrong("lm_step", _named(r"not causal|future|invert|opposite|triu|upper"), listed=False)
def step_mask_inverted(model, tokens, cache):
    # nn.MultiheadAttention's convention (True = masked) handed to a keep-mask model.
    past = cache.length
    mask = ~causal_mask(tokens.size(1), tokens.device, past=past)
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past))
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@wrong("lm_step", _named(r"not causal|future|no mask|without"), listed=False)
def step_no_mask_at_all(model, tokens, cache):
    # "The cache only holds the past, so nothing to hide": but the prompt's queries
    # then see the prompt's later tokens.
    past = cache.length
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past))
    for i, block in enumerate(model.blocks.layers):
        x = block(x, None, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@wrong(
    "lm_step",
    _named(MASK, r"float|dtype|bool|additive") + r"|got dtype torch\.float",
    listed=False,
)
def step_float_mask(model, tokens, cache):
    # An additive 0 / -inf mask, as many tutorials build; this model takes a bool mask.
    past, S = cache.length, tokens.size(1)
    mask = torch.full((S, past + S), float("-inf"), device=tokens.device)
    mask = mask.triu(diagonal=past + 1)[None, None]
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past))
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@wrong(
    "lm_step",
    _named(
        "cache",
        r"not grow|never grow|not passed|unused|no cache|"
        r"not (updated|filled|used)|empty|length|grown",
    ),
    listed=True,
)
def step_cache_not_passed(model, tokens, cache):
    # Calls the blocks without their LayerKV: nothing is cached, the past is never seen.
    past = cache.length
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past))
    mask = causal_mask(tokens.size(1), tokens.device)
    for block in model.blocks.layers:
        x = block(x, mask)
    return model.lm_head(model.blocks.norm(x))


@wrong(
    "lm_step",
    _named(
        "cache",
        r"not grow|never grow|not passed|unused|no cache|"
        r"not (updated|filled|used)|empty|length|grown",
    ),
    listed=False,
)
def step_stack_without_cache(model, tokens, cache):
    # model.blocks(x, mask): the stack's cache argument left at its default None.
    mask = causal_mask(tokens.size(1), tokens.device)
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=cache.length))
    return model.lm_head(model.blocks(x, mask))


@wrong(
    "lm_step",
    _named("cache", r"twice|double|grown by|more than|too much|2"),
    listed=True,
)
def step_debug_forward_left_in(model, tokens, cache):
    # A check against the model's own forward left in: it grows the cache a second time.
    past = cache.length
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past))
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    logits = model.lm_head(model.blocks.norm(x))
    model(tokens, cache=cache)  # same as mine?
    return logits


@wrong("lm_step", _named("dropout"), listed=False)
def step_functional_dropout(model, tokens, cache):
    # F.dropout's training argument defaults to True: dropout even in eval mode.
    past = cache.length
    x = model.pos(model.tok_embed(tokens) * math.sqrt(model.d_model), start=past)
    x = F.dropout(x, p=model.dropout.p)
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@wrong("lm_step", _named(r"√|sqrt|scale"), listed=True)
def step_no_embedding_scale(model, tokens, cache):
    # The √D scale of the embeddings forgotten.
    past = cache.length
    x = model.dropout(model.pos(model.tok_embed(tokens), start=past))
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@wrong("lm_step", r"'embeddings scaled by d_model'", listed=True)
def step_scaled_by_d(model, tokens, cache):
    # Scales by D instead of its square root.
    past = cache.length
    x = model.dropout(model.pos(model.tok_embed(tokens) * model.d_model, start=past))
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@wrong("lm_step", r"'positions scaled with the embeddings'", listed=True)
def step_scale_after_positions(model, tokens, cache):
    # Multiplies by √D after adding the positions: the positions are scaled too.
    past = cache.length
    x = model.pos(model.tok_embed(tokens), start=past) * math.sqrt(model.d_model)
    x = model.dropout(x)
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@wrong("lm_step", _named(r"norm"), listed=True)
def step_no_final_norm(model, tokens, cache):
    # The loop over the layers replaces model.blocks, and its final norm is lost.
    past = cache.length
    x = model.dropout(
        model.pos(model.tok_embed(tokens) * math.sqrt(model.d_model), start=past)
    )
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(x)


@wrong("lm_step", _named(MASK, r"shape"), listed=False)
def step_past_read_inside_loop(model, tokens, cache):
    # Reads cache.length inside the loop: after layer 0 has grown, it is past + S.
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=cache.length))
    for i, block in enumerate(model.blocks.layers):
        mask = causal_mask(tokens.size(1), tokens.device, past=cache.length)
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@wrong("lm_step", _named("cache", r"same|one layer|shared|layer 0"), listed=False)
def step_one_layer_cache_for_all(model, tokens, cache):
    # cache.layer(0) for every block: all layers append to one LayerKV.
    past = cache.length
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past))
    mask = (
        None
        if tokens.size(1) == 1
        else causal_mask(tokens.size(1), tokens.device, past=past)
    )
    for block in model.blocks.layers:
        x = block(x, mask, cache.layer(0))
    return model.lm_head(model.blocks.norm(x))


@wrong(
    "lm_step",
    r"'a block is left out of the step'.*Layer\(s\) \[0\].*\[2\]",
    listed=False,
)
def step_layer_index_off_by_one(model, tokens, cache):
    # Counts the layers from 1 "because 0 is the embedding": cache.layer(0) stays
    # empty, so cache.length never moves.
    past = cache.length
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past))
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    for i, block in enumerate(model.blocks.layers, start=1):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@wrong(
    "lm_step", r"'the cached past is dropped'.*6 cached tokens are gone", listed=False
)
def step_resets_cache(model, tokens, cache):
    # "Start clean" at the top of each call: the cached past is thrown away.
    cache.reset()
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=cache.length))
    mask = causal_mask(tokens.size(1), tokens.device, past=cache.length)
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@wrong(
    "lm_step",
    r"'only one of the new tokens goes through'.*1 token where 5",
    listed=False,
)
def step_only_last_token(model, tokens, cache):
    # Assumes one new token per call: a prompt is cut to its last token.
    tokens = tokens[:, -1:]
    past = cache.length
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past))
    for i, block in enumerate(model.blocks.layers):
        x = block(x, None, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@wrong(
    "lm_step", r"expected shape \[\d+, \d+, \d+\], got \[\d+, 1, \d+\]", listed=False
)
def step_returns_last_position_only(model, tokens, cache):
    # Returns the last position's logits only, the ones decoding needs: [B, 1, V].
    past = cache.length
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past))
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x[:, -1:]))


@wrong("lm_step", r"'probabilities instead of logits'", listed=False)
def step_returns_probabilities(model, tokens, cache):
    # A softmax at the end "to get the distribution": probabilities, not logits.
    past = cache.length
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past))
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x)).softmax(-1)


@wrong("lm_step", r"'a block is left out of the step'.*Layer\(s\) \[1\]", listed=False)
def step_last_layer_skipped(model, tokens, cache):
    # range(n_layers - 1): the last block never runs.
    past = cache.length
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past))
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    for i in range(len(model.blocks.layers) - 1):
        x = model.blocks.layers[i](x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@wrong(
    "lm_step",
    r"'causal mask of the wrong shape'.*the mask is \[1, 1, S, 10\] where attention's "
    r"weights are \[B, H, S, S\]\. 10 is none of the sizes.*it may be twice S\.",
    listed=False,
)
def step_mask_per_layer(model, tokens, cache):
    # builds each layer's mask inside the loop, from the cache as it is then: the
    # first layer has already grown it by S when the second one reads it
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=cache.length))
    for i, layer in enumerate(model.blocks.layers):
        mask = causal_mask(tokens.size(1), tokens.device, past=cache.length)
        x = layer(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@wrong("lm_step", r"'causal mask of the wrong shape'.*7 .*may be T \+ S", listed=False)
def step_mask_of_the_new_tokens_only(model, tokens, cache):
    # a triangle over the S new tokens, as without a cache
    s = tokens.size(1)
    mask = torch.tril(torch.ones(s, s, dtype=torch.bool, device=tokens.device))
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=cache.length))
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask[None, None], cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@wrong("lm_step", r"raised in block 1, after block 0 had appended", listed=False)
def step_mask_rebuilt_for_each_layer(model, tokens, cache):
    # Each layer gets "its own" mask, from cache.length as that layer's loop turn sees
    # it: block 0 has already appended the new keys by then.
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=cache.length))
    for i in range(len(model.blocks.layers)):
        past = cache.length
        mask = causal_mask(tokens.size(1), tokens.device, past=past)
        x = model.blocks.layers[i](x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@wrong(
    "lm_step",
    r"causal mask of the wrong shape'\. On [^.]*raised (?:(?!raised in block).)*$",
    listed=False,
)
def step_mask_counts_new_tokens_twice(model, tokens, cache):
    # past = the length after this step, as if the cache had grown already: the mask
    # is wrong in block 0, before any block ran (no "read after a block grew it").
    S = tokens.size(1)
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=cache.length))
    mask = causal_mask(S, tokens.device, past=cache.length + S)
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))
