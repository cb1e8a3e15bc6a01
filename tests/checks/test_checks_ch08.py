"""The chapter 8 checks, tested with banks of wrong implementations (each rejected with
its named diagnosis) and right ones written differently (each accepted). Each one is
written as a learner might type it, not as the check's own variant is."""

import math

import types

import pytest
import torch
import torch.nn.functional as F

from tformer_grading.checks import CheckFailure, ch08
from tformer_grading.checks.ch08 import generate_greedy as greedy_checks
from tformer_grading.checks.ch08 import lm_step as step_checks
from tformer_grading.checks.ch08 import next_token_probs as probs_checks
from tformer_grading.checks.diagnosis import UNEXPLAINED
from tformer_ref.kv_cache import KVCache
from tformer_ref.masks import causal_mask


# ------------------------------------------------------------------ next_token_probs


def probs_right(logits, temperature, top_p):
    """The lesson's way: sort, cumulative sum, mask the logits with -inf, softmax."""
    logits = logits / temperature
    probs = logits.softmax(-1)
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    before = sorted_probs.cumsum(-1) - sorted_probs
    keep_sorted = before < top_p
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    return logits.masked_fill(~keep, float("-inf")).softmax(-1)


def probs_right_zero_and_divide(logits, temperature, top_p):
    """Zeroes the probabilities outside the nucleus and divides by what is left."""
    probs = torch.softmax(logits / temperature, dim=-1)
    values, idx = torch.sort(probs, descending=True)
    cum = torch.cumsum(values, dim=-1)
    remove = cum >= top_p  # once the sum reaches top_p, the rest can go
    remove[..., 1:] = remove[..., :-1].clone()  # the crossing token stays
    remove[..., 0] = False
    values = values.masked_fill(remove, 0.0)
    out = torch.zeros_like(probs).scatter(-1, idx, values)
    return out / out.sum(dim=-1, keepdim=True)


def probs_right_row_loop(logits, temperature, top_p):
    """One row at a time, a Python loop adding tokens until the mass reaches top_p."""
    out = torch.zeros_like(logits)
    for b in range(logits.size(0)):
        p = (logits[b] / temperature).softmax(0)
        total, kept = 0.0, []
        for i in p.argsort(descending=True).tolist():
            kept.append(i)
            total += float(p[i])
            if total >= top_p:
                break
        out[b, kept] = p[kept] / p[kept].sum()
    return out


def probs_right_power(logits, temperature, top_p):
    """softmax(x) ** (1/T), renormalised, is softmax(x / T); -1e9 instead of -inf."""
    p = logits.softmax(-1) ** (1.0 / temperature)
    p = p / p.sum(-1, keepdim=True)
    sp, si = p.sort(-1, descending=True)
    mask = (sp.cumsum(-1) - sp) >= top_p
    mask = mask.scatter(-1, si, mask)
    masked = torch.where(mask, torch.full_like(p, -1e9), p.log())
    return masked.softmax(-1)


def probs_right_log_softmax(logits, temperature, top_p):
    """log_softmax(x) / T differs from x / T by a constant per row: the same softmax."""
    scaled = torch.log_softmax(logits, dim=-1) / temperature
    probs = scaled.exp() / scaled.exp().sum(-1, keepdim=True)
    sorted_p, order = probs.sort(descending=True)
    n_keep = ((sorted_p.cumsum(-1) - sorted_p) < top_p).sum(-1)
    keep = torch.arange(probs.size(-1), device=probs.device)[None] < n_keep[:, None]
    probs = probs.scatter(-1, order, sorted_p * keep)
    return probs / probs.sum(-1, keepdim=True)


def probs_right_in_float64(logits, temperature, top_p):
    """Works in float64 throughout and returns float64."""
    z = logits.double() / temperature
    p = torch.exp(z - z.max(-1, keepdim=True).values)
    p = p / p.sum(-1, keepdim=True)
    order = p.argsort(-1, descending=True)
    ranked = p.gather(-1, order)
    drop = (ranked.cumsum(-1) - ranked) >= top_p
    p = p.scatter(-1, order, ranked.masked_fill(drop, 0.0))
    return p / p.sum(-1, keepdim=True)


def probs_right_own_softmax(logits, temperature, top_p):
    """Its own softmax, the row's largest logit subtracted first; a boolean loop."""
    z = logits / temperature
    e = torch.exp(z - z.max(dim=-1, keepdim=True).values)
    probs = e / e.sum(dim=-1, keepdim=True)
    order = torch.argsort(probs, dim=-1, descending=True)
    out = torch.zeros_like(probs)
    for b in range(probs.shape[0]):
        mass = 0.0
        for i in order[b]:
            if mass >= top_p:
                break
            out[b, i] = probs[b, i]
            mass += probs[b, i].item()
    return out / out.sum(dim=-1, keepdim=True)


def probs_cumsum_below_p(logits, temperature, top_p):
    # Bug: keeps the tokens whose cumulative sum stays within top_p: the crossing token
    # is lost, and nothing is kept when the top token alone exceeds top_p.
    probs = torch.softmax(logits / temperature, dim=-1)
    s, i = probs.sort(descending=True)
    keep = s.cumsum(-1) <= top_p
    keep = torch.zeros_like(keep).scatter(-1, i, keep)
    return torch.softmax((logits / temperature).masked_fill(~keep, -float("inf")), -1)


def probs_forgot_first_token(logits, temperature, top_p):
    # Bug: the usual shift, but never forces the first token back in.
    probs = torch.softmax(logits / temperature, dim=-1)
    s, i = probs.sort(descending=True)
    remove = s.cumsum(-1) > top_p
    remove[..., 1:] = remove[..., :-1].clone()
    remove = remove.scatter(-1, i, remove)
    probs = probs.masked_fill(remove, 0.0)
    return probs / probs.sum(-1, keepdim=True)


def probs_unsorted(logits, temperature, top_p):
    # Bug: the cumulative sum runs in vocabulary order, not from the most likely token.
    probs = torch.softmax(logits / temperature, dim=-1)
    keep = (probs.cumsum(-1) - probs) < top_p
    probs = probs * keep
    return probs / probs.sum(-1, keepdim=True)


def probs_not_renormalised(logits, temperature, top_p):
    # Bug: zeroes the tail but never divides by what is left.
    probs = torch.softmax(logits / temperature, dim=-1)
    s, i = probs.sort(descending=True)
    keep = (s.cumsum(-1) - s) < top_p
    return probs * torch.zeros_like(keep).scatter(-1, i, keep)


def probs_temperature_on_probs(logits, temperature, top_p):
    # Bug: divides the probabilities by the temperature, then renormalises.
    probs = torch.softmax(logits, dim=-1) / temperature
    probs = probs / probs.sum(-1, keepdim=True)
    s, i = probs.sort(descending=True)
    nucleus = (s.cumsum(-1) - s) < top_p
    keep = torch.zeros_like(nucleus).scatter(-1, i, nucleus)
    probs = probs * keep
    return probs / probs.sum(-1, keepdim=True)


def probs_softmax_twice(logits, temperature, top_p):
    # Bug: the temperature goes on the probabilities and a second softmax follows.
    probs = torch.softmax(logits, dim=-1)
    probs = torch.softmax(probs / temperature, dim=-1)
    s, i = probs.sort(descending=True)
    nucleus = (s.cumsum(-1) - s) < top_p
    keep = torch.zeros_like(nucleus).scatter(-1, i, nucleus)
    probs = probs * keep
    return probs / probs.sum(-1, keepdim=True)


def probs_multiplied(logits, temperature, top_p):
    # Bug: multiplies by the temperature.
    scaled = logits * temperature
    probs = scaled.softmax(-1)
    s, i = probs.sort(descending=True)
    nucleus = (s.cumsum(-1) - s) < top_p
    keep = torch.zeros_like(nucleus).scatter(-1, i, nucleus)
    return scaled.masked_fill(~keep, float("-inf")).softmax(-1)


def probs_top_p_first(logits, temperature, top_p):
    # Bug: chooses the nucleus on the raw logits, then applies the temperature.
    probs = logits.softmax(-1)
    s, i = probs.sort(descending=True)
    nucleus = (s.cumsum(-1) - s) < top_p
    keep = torch.zeros_like(nucleus).scatter(-1, i, nucleus)
    filtered = logits.masked_fill(~keep, float("-inf"))
    return (filtered / temperature).softmax(-1)


def probs_returns_logits(logits, temperature, top_p):
    # Bug: returns the filtered logits, forgetting the softmax.
    scaled = logits / temperature
    s, i = scaled.softmax(-1).sort(descending=True)
    nucleus = (s.cumsum(-1) - s) < top_p
    keep = torch.zeros_like(nucleus).scatter(-1, i, nucleus)
    return scaled.masked_fill(~keep, float("-inf"))


def probs_samples(logits, temperature, top_p):
    # Bug: returns a sampled token instead of the distribution.
    return torch.multinomial(probs_right(logits, temperature, top_p), 1)[:, 0]


def probs_strict_shift(logits, temperature, top_p):
    # Bug: removes where cumsum > top_p, then shifts: when the sum reaches top_p
    # exactly, the next token is kept too.
    probs = torch.softmax(logits / temperature, dim=-1)
    values, idx = torch.sort(probs, descending=True)
    cum = torch.cumsum(values, dim=-1)
    remove = cum > top_p
    remove[..., 1:] = remove[..., :-1].clone()
    remove[..., 0] = False
    values = values.masked_fill(remove, 0.0)
    out = torch.zeros_like(probs).scatter(-1, idx, values)
    return out / out.sum(dim=-1, keepdim=True)


def probs_loop_until_above_p(logits, temperature, top_p):
    # Bug: the loop stops once the kept mass is *above* top_p, not once it reaches it.
    out = torch.zeros_like(logits)
    for b in range(logits.size(0)):
        p = torch.softmax(logits[b] / temperature, dim=0)
        total = 0.0
        for i in torch.argsort(p, descending=True):
            out[b, i] = p[i]
            total += p[i].item()
            if total > top_p:
                break
    return out / out.sum(-1, keepdim=True)


def probs_exp_without_max(logits, temperature, top_p):
    # Bug: its own softmax, without subtracting the largest logit first.
    e = torch.exp(logits / temperature)
    probs = e / e.sum(dim=-1, keepdim=True)
    s, i = probs.sort(descending=True)
    keep = (s.cumsum(-1) - s) < top_p
    keep = torch.zeros_like(keep).scatter(-1, i, keep)
    probs = probs * keep
    return probs / probs.sum(-1, keepdim=True)


def probs_smoothed(logits, temperature, top_p):
    # Bug no diagnosis knows: adds 0.01 to each kept probability, then renormalises.
    probs = probs_right(logits, temperature, top_p)
    probs = torch.where(probs > 0, probs + 0.01, probs)
    return probs / probs.sum(-1, keepdim=True)


RIGHT_PROBS = [
    probs_right,
    probs_right_zero_and_divide,
    probs_right_row_loop,
    probs_right_power,
    probs_right_log_softmax,
    probs_right_in_float64,
    probs_right_own_softmax,
]


@pytest.mark.parametrize("fn", RIGHT_PROBS)
def test_next_token_probs_accepts_right_implementations(fn, capsys):
    ch08.check_next_token_probs(fn)
    ch08.check_next_token_probs_by_hand(fn)
    captured = capsys.readouterr()
    assert captured.out.count("✓ next_token_probs") == 2
    assert captured.err == ""


@pytest.mark.parametrize(
    "fn,diagnosis",
    [
        (probs_cumsum_below_p, "top-p drops the token that crosses p"),
        (
            probs_forgot_first_token,
            "top-p keeps none when the top token alone exceeds p",
        ),
        (probs_unsorted, "top-p keeps tokens that are not the most likely"),
        (probs_not_renormalised, "probabilities not renormalised"),
        (
            probs_temperature_on_probs,
            "temperature applied after the softmax, or not at all",
        ),
        (probs_softmax_twice, "temperature applied after the softmax"),
        (probs_multiplied, "temperature multiplied instead of divided"),
        (probs_top_p_first, "top-p applied before the temperature"),
        (probs_returns_logits, "returns something other than probabilities"),
        (probs_samples, r"expected shape \[2, 8\], got \[2\].*a sampled token"),
        (
            probs_strict_shift,
            "top-p keeps one token too many when the mass reaches p exactly",
        ),
        (
            probs_loop_until_above_p,
            "top-p keeps one token too many when the mass reaches p exactly",
        ),
        (
            probs_exp_without_max,
            r"softmax overflows on large logits \(exp without "
            r"subtracting the max\)",
        ),
        (probs_smoothed, UNEXPLAINED),
    ],
)
def test_next_token_probs_rejects_wrong_implementations(fn, diagnosis, capsys):
    with pytest.raises(CheckFailure, match=diagnosis) as info:
        ch08.check_next_token_probs(fn)
    assert "Read §8." in str(info.value)
    assert capsys.readouterr().err == ""


def test_next_token_probs_measures_the_temperature():
    with pytest.raises(CheckFailure, match=r"at temperature 2(\.0+)?, expected 0.5"):
        ch08.check_next_token_probs(probs_multiplied)


def test_next_token_probs_names_the_crossing_token():
    with pytest.raises(
        CheckFailure,
        match=r"is the one that carries the sum across "
        r"top_p = 0.9",
    ):
        ch08.check_next_token_probs(probs_cumsum_below_p)


def test_next_token_probs_names_the_token_kept_past_p():
    with pytest.raises(
        CheckFailure,
        match=r"you keep 3 token\(s\) \[0, 1, 2\] holding "
        r"0.875.*token 2 \(probability 0.125\) is "
        r"one too many",
    ):
        ch08.check_next_token_probs(probs_strict_shift)


def test_next_token_probs_says_the_output_overflows():
    with pytest.raises(
        CheckFailure,
        match=r"around 60, temperature=0.5.*your output "
        r"has NaN or inf; on the same logits minus "
        r"each row's largest .* it is right",
    ):
        ch08.check_next_token_probs(probs_exp_without_max)


def test_next_token_probs_says_which_line_raised():
    def probs_typo(logits, temperature, top_p):
        probs = (logits / temperature).softmax(-1)
        return probs.sort(dim=2)  # Bug: there is no dim 2

    with pytest.raises(
        CheckFailure,
        match=r"raised IndexError.*at line \d+ of your "
        r"code: `return probs.sort\(dim=2\)",
    ):
        ch08.check_next_token_probs(probs_typo)


def test_next_token_probs_by_hand_rejects_the_reference():
    from tformer_ref.sampling import next_token_probs

    def probs_delegated(logits, temperature, top_p):
        return next_token_probs(logits, temperature, top_p=top_p)

    ch08.check_next_token_probs(probs_delegated)  # right ...
    with pytest.raises(CheckFailure, match="write that computation yourself"):
        ch08.check_next_token_probs_by_hand(probs_delegated)  # ... but not written


def test_probability_cases_decide_the_kept_set_with_margin():
    """No cumulative sum lies within 1e-3 of top_p, so float rounding never decides
    which tokens a right implementation keeps; kept probabilities are far above KEPT;
    the temperature cases keep a set other than the temperature-1 one."""
    exact = ch08.prob_cases()[-1].label  # reaches top_p exactly, on purpose
    for case in ch08.prob_cases():
        logits, t, p = case.make()
        full = probs_checks._full(logits, t)
        probs = full.sort(-1, descending=True).values
        if p < 1 and case.label != exact:
            assert (probs.cumsum(-1) - p).abs().min() > 1e-3, case.label
        ref = probs_checks._reference_probs(logits, t, p)
        assert ref[ref > 0].min() > 1e-6, case.label
        if t != 1 and p < 1:
            at_one = probs_checks._top_p_set(probs_checks._full(logits, 1.0), p)
            assert not torch.equal(at_one, ref > 0), case.label


def test_exact_case_reaches_top_p_exactly_in_float32():
    """The exact case's softmax gives the powers of two themselves, and the two most
    likely tokens of each row hold exactly top_p: the reference keeps those two."""
    logits, t, p = ch08.prob_cases()[-1].make()
    probs = (logits / t).softmax(-1)
    assert torch.equal(probs.cpu(), torch.tensor(ch08.EXACT_PROBS))
    top2 = probs.sort(-1, descending=True).values[:, :2].sum(-1)
    assert torch.equal(top2.cpu(), torch.full((2,), p))
    assert ((probs_checks._reference_probs(logits, t, p) > 0).sum(-1) == 2).all()
    assert torch.allclose(
        probs_checks._reference_probs(logits, t, p), probs_checks._exact_answer()
    )


def test_large_case_overflows_a_plain_exp():
    """The large case's logits / T pass 88.7, where exp overflows float32."""
    logits, t, _ = ch08.prob_cases()[ch08.LARGE].make()
    assert torch.isinf(torch.exp(logits / t)).any()
    assert torch.isfinite(probs_checks._reference_probs(logits, t, 0.9)).all()


# ---------------------------------------------------------------------------- lm_step


def step_right(model, tokens, cache):
    """The exercise's recipe: every block with its own cache layer."""
    past = cache.length
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past))
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


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


def step_positions_from_zero(model, tokens, cache):
    # Bug: the positions start at 0 at every step.
    mask = causal_mask(tokens.size(1), tokens.device, past=cache.length)
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x))
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


def step_new_cache(model, tokens, cache):
    # Bug: a fresh cache inside the step; the caller's stays empty.
    cache = KVCache()
    return step_right(model, tokens, cache)


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
        (step_last_position_only, r"got \[2, 11\] \(only the last position"),
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
            r"tokens \[B=2, S=5\] your 5 token\(s\) sat at "
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


# -------------------------------------------------------------------- generate_greedy
# Each decoding loop uses a step: step_right (the learner's lm_step) unless it says.


def lm_step(model, tokens, cache):
    return step_right(model, tokens, cache)


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


@pytest.mark.parametrize(
    "check,fn",
    [
        (ch08.check_next_token_probs, probs_right),
        (ch08.check_lm_step, step_positions_from_zero),
        (ch08.check_generate_greedy, gen_samples),
    ],
)
def test_checks_leave_the_notebooks_random_state_alone(check, fn):
    """Every case is built from its own seeded generator: a check run between two cells
    of a seeded notebook does not change what the next cell draws."""
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    try:
        check(fn)
    except CheckFailure:
        pass
    assert torch.equal(torch.rand(3), expected)
