"""lm_step (chapter 8, book/ch08_generation): the unit tests of ``ch08.check_lm_step``
and its hidden ``check_lm_step_by_hand``, with wrong steps (each rejected with its named
diagnosis, or as unexplained) and right ones written differently (each accepted), none
writing to stderr.

Beyond the bank (bank_lm_step.py): the measured positions (after a cache and on an
empty one), how far dropout moves the logits, which keys a query sees, the models left
in eval mode after a step that calls train(), and the model's own forward refused by
the hidden test.

Each one is written as a learner might type it, not as the check's own variant is.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from units_ch08 import step_new_cache, step_positions_from_zero, step_right

from tformer_grading.checks import CheckFailure, ch08
from tformer_grading.checks.ch08 import lm_step as step_checks
from tformer_grading.checks.diagnosis import UNEXPLAINED
from tformer_ref.masks import causal_mask

# ---------------------------------------------------------------------------- lm_step


def step_right_whole_stack(model, tokens, cache):
    """Hands the cache to the stack in one call instead of looping over the blocks."""
    start = cache.length
    h = model.tok_embed(tokens) * model.d_model**0.5
    h = model.pos(h, start=start)
    mask = causal_mask(tokens.shape[1], device=tokens.device, past=start)
    return model.lm_head(model.blocks(model.dropout(h), mask, cache))


def step_right_own_mask(model, tokens, cache):
    """Builds the mask by comparing positions; no mask at all for a single query."""
    b, s = tokens.shape
    t = cache.length + s
    if s == 1:
        mask = None  # one query may see every key: nothing to mask
    else:
        q_pos = torch.arange(cache.length, t, device=tokens.device)[:, None]
        k_pos = torch.arange(t, device=tokens.device)[None, :]
        mask = (k_pos <= q_pos)[None, None]
    x = model.pos(model.tok_embed(tokens) * model.d_model**0.5, cache.length)
    for i in range(len(model.blocks.layers)):
        x = model.blocks.layers[i](x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


def step_right_per_layer_length(model, tokens, cache):
    """Reads each layer's own length before its block runs (equal for every layer)."""
    start = cache.layers[0].length if cache.layers else 0
    x = model.dropout(
        model.pos(model.tok_embed(tokens) * model.d_model**0.5, start=start)
    )
    for i, layer in enumerate(model.blocks.layers):
        kv = cache.layer(i)
        m = torch.ones(
            x.size(1), kv.length + x.size(1), dtype=torch.bool, device=x.device
        ).tril(diagonal=kv.length)
        x = layer(x, m[None, None], kv)
    return model.lm_head(model.blocks.norm(x))


def step_right_last_rows(model, tokens, cache):
    """The full-length causal mask cut to its last S rows: the new queries' rows."""
    past, s = cache.length, tokens.size(1)
    full = torch.tril(
        torch.ones(past + s, past + s, dtype=torch.bool, device=tokens.device)
    )
    mask = full[-s:].view(1, 1, s, past + s)
    x = model.dropout(
        model.pos(model.tok_embed(tokens) * math.sqrt(model.d_model), start=past)
    )
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


def step_right_functional_dropout(model, tokens, cache):
    """F.dropout told the mode: nothing dropped in eval mode."""
    past = cache.length
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    x = model.pos(model.tok_embed(tokens) * math.sqrt(model.d_model), start=past)
    x = F.dropout(x, model.dropout.p, training=model.training)
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


def step_functional_dropout(model, tokens, cache):
    # Bug: F.dropout's training argument defaults to True: it drops in eval mode too.
    past = cache.length
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    x = model.pos(model.tok_embed(tokens) * math.sqrt(model.d_model), start=past)
    x = F.dropout(x, model.dropout.p)
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


def step_switches_to_train(model, tokens, cache):
    # Bug: "make sure dropout is set up": puts the model in train mode.
    model.train()
    past = cache.length
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    x = model.dropout(
        model.pos(model.tok_embed(tokens) * math.sqrt(model.d_model), start=past)
    )
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


def step_positions_from_one(model, tokens, cache):
    # Bug: counts positions from 1.
    past = cache.length
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past + 1))
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


def step_positions_from_last(model, tokens, cache):
    # Bug: starts at "the position of the last token", past + S - 1 (right for S = 1).
    past, s = cache.length, tokens.size(1)
    mask = causal_mask(s, tokens.device, past=past)
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past + s - 1))
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


def step_positions_twice(model, tokens, cache):
    # Bug: adds the positions, then again before the dropout.
    past = cache.length
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    x = model.pos(model.tok_embed(tokens) * math.sqrt(model.d_model), start=past)
    x = model.dropout(model.pos(x, start=past))
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


def step_positions_added_to_x(model, tokens, cache):
    # Bug: takes model.pos for the encodings alone and adds them to x.
    past = cache.length
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(x + model.pos(x, start=past))
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


def step_full_length_mask(model, tokens, cache):
    # Bug: the mask is built for the whole sequence, past included.
    past = cache.length
    mask = causal_mask(past + tokens.size(1), tokens.device)
    x = model.pos(model.tok_embed(tokens) * math.sqrt(model.d_model), start=past)
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


def step_mask_first_rows(model, tokens, cache):
    # Bug: cuts the full-length mask down to S rows, but takes the first ones.
    past, s = cache.length, tokens.size(1)
    mask = causal_mask(past + s, tokens.device)[:, :, :s, :]
    x = model.pos(model.tok_embed(tokens) * math.sqrt(model.d_model), start=past)
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


def step_mask_without_past(model, tokens, cache):
    # Bug: the mask of the new tokens alone (right only for one token at a time).
    past = cache.length
    mask = causal_mask(tokens.size(1), tokens.device)
    x = model.pos(model.tok_embed(tokens) * math.sqrt(model.d_model), start=past)
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


def step_mask_inside_loop(model, tokens, cache):
    # Bug: reads cache.length inside the loop, after block 0 has grown the cache.
    past = cache.length
    x = model.pos(model.tok_embed(tokens) * math.sqrt(model.d_model), start=past)
    for i, block in enumerate(model.blocks.layers):
        mask = causal_mask(tokens.size(1), tokens.device, past=cache.length)
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


def step_float_mask(model, tokens, cache):
    # Bug: a 0/1 float mask (PyTorch adds float masks to the scores).
    past = cache.length
    mask = causal_mask(tokens.size(1), tokens.device, past=past).float()
    x = model.pos(model.tok_embed(tokens) * math.sqrt(model.d_model), start=past)
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


def step_no_mask(model, tokens, cache):
    # Bug: no mask: fine for one token, but the new tokens see each other's future.
    past = cache.length
    x = model.pos(model.tok_embed(tokens) * math.sqrt(model.d_model), start=past)
    for i, block in enumerate(model.blocks.layers):
        x = block(x, None, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


def step_blocks_without_cache(model, tokens, cache):
    # Bug: the blocks never get their cache layer.
    past = cache.length
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    x = model.pos(model.tok_embed(tokens) * math.sqrt(model.d_model), start=past)
    for block in model.blocks.layers:
        x = block(x, mask)
    return model.lm_head(model.blocks.norm(x))


def step_same_layer(model, tokens, cache):
    # Bug: every block writes to (and reads) layer 0 of the cache.
    past = cache.length
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    x = model.pos(model.tok_embed(tokens) * math.sqrt(model.d_model), start=past)
    for block in model.blocks.layers:
        x = block(x, mask, cache.layer(0))
    return model.lm_head(model.blocks.norm(x))


def step_block_twice(model, tokens, cache):
    # Bug: runs each block once "to fill the cache" and once for the output.
    past = cache.length
    x = model.pos(model.tok_embed(tokens) * math.sqrt(model.d_model), start=past)
    for i, block in enumerate(model.blocks.layers):
        kv = cache.layer(i)
        block(x, causal_mask(tokens.size(1), tokens.device, past=kv.length), kv)
        x = block(x, causal_mask(tokens.size(1), tokens.device, past=kv.length), kv)
    return model.lm_head(model.blocks.norm(x))


def step_not_scaled(model, tokens, cache):
    # Bug: the embeddings are not multiplied by sqrt(d_model).
    past = cache.length
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    x = model.pos(model.tok_embed(tokens), start=past)
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


def step_no_final_norm(model, tokens, cache):
    # Bug: straight from the last block to the head.
    past = cache.length
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    x = model.pos(model.tok_embed(tokens) * math.sqrt(model.d_model), start=past)
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(x)


def step_last_position_only(model, tokens, cache):
    # Bug: returns only the last position's logits.
    return step_right(model, tokens, cache)[:, -1]


def step_positions_doubled(model, tokens, cache):
    # Bug: every position is read twice as far along (no start reproduces it).
    past = cache.length
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = torch.cat(
        [model.pos(x[:, i : i + 1], start=2 * (past + i)) for i in range(x.size(1))],
        dim=1,
    )
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


def step_scaled_by_half(model, tokens, cache):
    # Bug no diagnosis names: the embeddings scaled by sqrt(d_model) / 2.
    past = cache.length
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    x = model.pos(model.tok_embed(tokens) * math.sqrt(model.d_model) / 2, start=past)
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


RIGHT_STEPS = [
    step_right,
    step_right_whole_stack,
    step_right_own_mask,
    step_right_per_layer_length,
    step_right_last_rows,
    step_right_functional_dropout,
]


@pytest.mark.parametrize("fn", RIGHT_STEPS)
def test_lm_step_accepts_right_implementations(fn, capsys):
    ch08.check_lm_step(fn)
    ch08.check_lm_step_by_hand(fn)
    captured = capsys.readouterr()
    assert captured.out.count("✓ lm_step") == 2
    assert captured.err == ""


@pytest.mark.parametrize(
    "fn,diagnosis",
    [
        (step_positions_from_zero, "positions not offset by the cache length"),
        (step_full_length_mask, "causal mask of the wrong shape"),
        (step_mask_first_rows, "causal mask rows for the wrong positions"),
        (step_mask_without_past, "causal mask of the wrong shape"),
        (step_mask_inside_loop, "causal mask of the wrong shape"),
        (step_no_mask, "not causal: the future is visible"),
        (
            step_float_mask,
            r"your lm_step raised TypeError: mask must be .* got dtype "
            r"torch.float32",
        ),
        (step_blocks_without_cache, "the cache is not grown"),
        (step_new_cache, "the cache is not grown"),
        (step_same_layer, "every block uses the same cache layer"),
        (step_block_twice, "the cache is grown twice"),
        (step_not_scaled, r"embeddings not scaled by sqrt\(d_model\)"),
        (step_no_final_norm, "final LayerNorm skipped"),
        (step_last_position_only, r"got \[3, 11\] \(only the last position"),
        (
            step_functional_dropout,
            r"dropout active at inference \(F.dropout without "
            r"training=model.training, or the model left in train "
            r"mode\)",
        ),
        (step_switches_to_train, "dropout active at inference"),
        (
            step_positions_from_one,
            r"positions added wrongly \(twice, or from the wrong "
            r"start\)",
        ),
        (step_positions_from_last, "positions added wrongly"),
        (step_positions_twice, "positions added wrongly"),
        (step_positions_added_to_x, "positions added wrongly"),
        (step_positions_doubled, "positions added wrongly"),
        (step_scaled_by_half, UNEXPLAINED),
    ],
)
def test_lm_step_rejects_wrong_implementations(fn, diagnosis, capsys):
    with pytest.raises(CheckFailure, match=diagnosis) as info:
        ch08.check_lm_step(fn)
    assert "Read §" in str(info.value)
    assert capsys.readouterr().err == ""


def test_lm_step_measures_the_positions():
    with pytest.raises(
        CheckFailure,
        match=r"sat at position\(s\) 0; after 6 cached "
        r"tokens they belong at 6\.",
    ):
        ch08.check_lm_step(step_positions_from_zero)


@pytest.mark.parametrize(
    "fn,seen",
    [
        (
            step_positions_from_one,
            r"tokens \[B=3, S=5\] your 5 token\(s\) sat at "
            r"position\(s\) 1..5 \(a start of 1 instead of "
            r"cache.length = 0\); on an empty cache they belong at "
            r"0..4",
        ),
        (step_positions_from_last, r"sat at position\(s\) 4..8 \(a start of S - 1"),
        (step_positions_twice, r"encodings added twice"),
        (step_positions_added_to_x, r"x \+ model.pos\(x\)"),
    ],
)
def test_lm_step_measures_positions_on_an_empty_cache(fn, seen):
    with pytest.raises(CheckFailure, match=seen):
        ch08.check_lm_step(fn)


def test_lm_step_says_how_far_dropout_moves_the_logits():
    with pytest.raises(
        CheckFailure,
        match=r"model 5 .*dropout=0.1, in eval mode.*the "
        r"same call, made twice .* differ by up to",
    ):
        ch08.check_lm_step(step_functional_dropout)


def test_lm_step_leaves_the_models_in_eval_mode():
    """A step that calls model.train() is put back: the next case still runs in eval
    mode, so one learner's train() cannot make the check's own models random."""
    case = ch08.step_cases()[-1]
    got = step_checks.run_case(step_switches_to_train, case)
    assert got.trained and not case.model.training


def test_lm_step_says_which_keys_a_query_sees():
    with pytest.raises(
        CheckFailure,
        match=r"new token 0 \(position 6\) is influenced "
        r"by the tokens at positions \[0, 6\]; it "
        r"should see 0..6",
    ):
        ch08.check_lm_step(step_mask_first_rows)


def test_lm_step_by_hand_rejects_the_models_forward():
    def step_delegated(model, tokens, cache):
        return model(tokens, cache=cache)

    ch08.check_lm_step(step_delegated)
    with pytest.raises(CheckFailure, match="the model's own forward"):
        ch08.check_lm_step_by_hand(step_delegated)
