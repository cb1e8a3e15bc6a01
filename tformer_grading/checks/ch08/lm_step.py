"""Checks for exercise ``lm_step`` of chapter 8 (book/ch08_generation):
``lm_step(model, tokens [B, S], cache) -> logits [B, S, V]``, one incremental step of a
``DecoderOnlyLM`` with a KV cache: equal to ``model(tokens, cache=cache)``, growing the
cache by S.

Judged by behaviour only: the cache's length after each call, the outputs on an empty
cache and after cached tokens, the same call twice on a model with dropout in eval mode,
the same calls on a copy of the model whose positional table is constant (any position
mistake vanishes there) and the start position that reproduces a call, and which
earlier tokens each new query is influenced by (what the mask lets it attend to).
``generate_greedy``'s check asks ``lm_step_problems`` whether the learner's own step is
right.
"""

from __future__ import annotations

import copy
import inspect

import torch

from tformer_ref.masks import causal_mask
from tformer_ref.model import DecoderOnlyLM
from tformer_ref.positions import LearnedPositionalEmbedding

from ...guard.integrity import seal
from ...pictures.attach import pictured
from ..delegation import check_not_delegated
from ..diagnosis import (
    Diagnosis,
    Pitfall,
    Raised,
    describe_difference,
    fail,
    passed,
    single_threaded,
    verify_integrity,
)
from ..flow import fallback, listed_pitfall
from ..measure.influence import influence, output_changes, positions_text
from ..measure.softmax import normalised_over
from .harness import (
    ATOL,
    RTOL,
    StepCase,
    StepRun,
    case_right,
    first_problem,
    grown_before_mask,
    influence_picture,
    keeps_random_state,
    lm,
    run_case,
    run_steps,
    same_run,
    token_ids,
)
from .sections import S_CACHE, S_CACHE_PITFALLS, S_DROPOUT, S_EMBED, S_LM

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True


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


# The models' sizes (see lm), named so that a crash's numbers read; B = 3 where it
# can be: B = 2 = H reads as "B or H", and a mask [S, 2·S] as [S, B·S].
LM_SIZES = "V=11, D=16, H=2, Dh=8"
M1 = f"model 1 (Post-LN, sinusoidal positions; {LM_SIZES})"
M2 = f"model 2 (Pre-LN, learned positions, final LayerNorm; {LM_SIZES})"
M3 = f"model 3 (Post-LN, learned positions, tied embeddings; {LM_SIZES})"
M5 = f"model 5 (Pre-LN, learned positions, dropout=0.1, in eval mode; {LM_SIZES})"


def step_cases() -> list[StepCase]:
    m1, m2, m3, m5 = _model_1(), _model_2(), _model_3(), _model_5()
    return [
        StepCase(
            f"{M1}, empty cache, tokens [B=3, S=5]", m1, None, (token_ids(3, 5, 80),)
        ),
        StepCase(
            f"{M2}, empty cache, tokens [B=3, S=4]", m2, None, (token_ids(3, 4, 81),)
        ),
        StepCase(
            f"{M1}, the cache holding T=6 tokens (filled by the reference), "
            "tokens [B=3, S=1]",
            m1,
            token_ids(3, 6, 82),
            (token_ids(3, 1, 83),),
        ),
        StepCase(
            f"{M2}, the cache holding T=4 tokens (filled by the reference), "
            "tokens [B=2, S=3]",
            m2,
            token_ids(2, 4, 84),
            (token_ids(2, 3, 85),),
        ),
        StepCase(
            f"{M3}, the cache holding T=5 tokens (filled by the reference), "
            "tokens [B=1, S=2]",
            m3,
            token_ids(1, 5, 86),
            (token_ids(1, 2, 87),),
        ),
        StepCase(
            f"{M2}, an empty cache and your lm_step called 5 times with tokens "
            "[1, 4], [1, 1], [1, 1], [1, 2], [1, 1]",
            m2,
            None,
            tuple(token_ids(1, s, 90 + i) for i, s in enumerate((4, 1, 1, 2, 1))),
        ),
        StepCase(
            f"{M5}, empty cache, tokens [B=3, S=4]", m5, None, (token_ids(3, 4, 96),)
        ),
        StepCase(
            f"{M5}, the cache holding T=3 tokens (filled by the reference), "
            "tokens [B=2, S=2]",
            m5,
            token_ids(2, 3, 97),
            (token_ids(2, 2, 98),),
        ),
    ]


def _reference_step(model, tokens, cache):
    return model(tokens, cache=cache)


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
    "cache.length read once, before the blocks grow the cache. A square mask, over "
    "the new tokens alone or over every token so far, does not fit.",
    S_CACHE_PITFALLS,
)
MASK_ROWS = Diagnosis(
    "causal mask rows for the wrong positions",
    "The new query i sits at position cache.length + i and may attend to every key up "
    "to there: the rows of the mask are the *last* S rows of the full-length causal "
    "mask (causal_mask(S, device, past=cache.length)), not its first S rows.",
    S_CACHE_PITFALLS,
)


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
    for case, got in zip(cases, runs):
        for k, out in enumerate(got.outputs):
            if isinstance(out, Raised):
                where = f"case {case.label}"
                where = f"call {k + 1} of {where}" if len(case.chunks) > 1 else where
                text = str(out.exc).lower()
                if "mask" in text and "shape" in text:
                    s = case.chunks[k].size(1)
                    seen = grown_before_mask(got.lengths[k], s, out.exc)
                    MASK_SHAPE.fail(
                        title, f"On {where} your lm_step raised {out!r}.{seen}"
                    )
                fail(title, f"your lm_step raised {out!r} on {where}.", S_CACHE)


def _form_problems(title, cases, runs, refs) -> None:
    for case, got, want in zip(cases, runs, refs):
        for g, w in zip(got.outputs, want.outputs):
            problem = describe_difference(g, w, ATOL, RTOL)
            if problem is None or problem.startswith(
                ("values differ", "your output has NaN")
            ):
                continue
            b, s, v = w.shape
            hint, shape = "", list(g.shape) if isinstance(g, torch.Tensor) else None
            if shape == [b, v]:
                hint = (
                    " (only the last position: return the logits of all S new tokens)"
                )
            elif shape == [b, s, case.model.d_model]:
                hint = " (the hidden states: model.lm_head turns them into logits)"
            fail(
                title,
                f"on case {case.label}: {problem}{hint}. lm_step returns the "
                f"logits [B, S, V] = {[b, s, v]}.",
                S_CACHE,
            )


def _growth_problems(title, cases, runs) -> None:
    """After each call every layer must hold S more tokens than before."""
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
            said = f"the cache does not grow by the new tokens. {seen}"
            fallback(title, said, S_CACHE, advice="", stop="")


def _future_visible(step, model) -> str | None:
    """On an empty cache, changing the last token leaves earlier logits alone."""
    moved = output_changes(_logits_of(step, model, 0), token_ids(2, 5, 95), 11, [4])
    if moved is None:
        return None
    diff = moved[0][:-1]
    hit = [i for i, d in enumerate(diff.tolist()) if d > 1e-5]
    if not hit:
        return None
    return (
        f"On {M1} with an empty cache and tokens [2, 5], changing token 4 changed "
        f"the logits at positions {hit} (by up to {float(diff.max()):.3g})."
    )


def _empty_cache_problems(title, step, cases, runs, refs) -> None:
    """Wrong without any cached token: the model's own forward is not reproduced."""
    empty = [i for i, c in enumerate(cases) if c.past is None and len(c.chunks) == 1]
    wrong = [i for i in empty if not case_right(runs[i], refs[i])]
    if not wrong:
        return
    observed = _future_visible(step, cases[0].model)
    if observed:
        NOT_CAUSAL.fail(title, observed)
    on_empty = [cases[i] for i in empty], [runs[i] for i in empty]
    pitfall = listed_pitfall(
        EMPTY_CACHE_PITFALLS,
        *on_empty,
        0,
        0,
        run_on=run_case,
        alike=same_run,
        stop_early=True,
    )
    if pitfall is not None:
        pitfall.fail(title, "That mistake gives your logits on every empty-cache case.")
    _empty_position_problems(title, step, cases, runs, empty, wrong)
    i = wrong[0]
    k, problem = first_problem(runs[i], refs[i])  # noqa: RUF059
    fallback(
        title,
        f"wrong already on an empty cache (no cached token): case "
        f"{cases[i].label}: {problem}",
        S_LM,
        "compare your code with the model's forward step by step",
    )


def _has_dropout(model) -> bool:
    return any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in model.modules())


def _dropout_problems(title, step, cases, runs, refs) -> None:
    """The learner's step left the model in train mode, or gives different logits for
    the same call on a model with dropout (in eval mode, where it must do nothing)."""
    for case, got in zip(cases, runs):
        if got.trained:
            DROPOUT_ACTIVE.fail(
                title,
                f"After your lm_step ran on case {case.label}, "
                "the model (or a part of it) was in train mode.",
            )
    for case, got, want in zip(cases, runs, refs):
        if not _has_dropout(case.model) or case_right(got, want):
            continue
        again = []
        for seed in (1, 2):
            torch.manual_seed(seed)
            again.append(run_case(step, case))
        outs = again[0].outputs + again[1].outputs
        if outs and all(type(o) is torch.Tensor for o in outs) and not same_run(*again):
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
    got = run_case(step, case)
    s = case.chunks[0].size(1)
    for start in range(1, case.model.max_len - s + 1):
        if same_run(got, run_case(_at_start(start), case)):
            return start
    return None


def _empty_position_problems(title, step, cases, runs, empty, wrong) -> None:
    """Wrong on an empty cache because of the positions: the tokens placed from the
    wrong start, the encodings added twice, or (on a copy whose positional table is
    the same at every position) right where the positions cannot matter."""
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
            f"position(s) {positions_text(range(start, start + s))}"
            f"{note}; on an empty cache they belong at "
            f"{positions_text(range(s))}.",
        )
    for impl, what in (
        (
            _positions_twice,
            "the positions' encodings added twice (model.pos applied two times)",
        ),
        (
            _embeddings_plus_positions,
            "x + model.pos(x): model.pos already "  # noqa: ISC004
            "returns x plus the encodings, so the "
            "embeddings count twice",
        ),
    ):
        if all(same_run(runs[i], run_case(impl, cases[i])) for i in empty):
            POSITIONS_WRONG.fail(
                title, f"On every empty-cache case your logits are those of {what}."
            )
    models = {id(cases[i].model): cases[i].model for i in wrong}
    once = {k: _neutral(m) for k, m in models.items()}
    twice = {k: _neutral(m, scale=2.0) for k, m in models.items()}

    def agrees(table, ours):
        return all(
            case_right(
                run_case(step, cases[i], table[id(cases[i].model)]),
                run_case(_reference_step, cases[i], ours[id(cases[i].model)]),
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
    got = run_case(step, case).outputs[0]
    s, past = case.chunks[0].size(1), case.past.size(1)
    for start in range(0, case.model.max_len - s + 1):  # noqa: PIE808
        if start != past and same_run(
            StepRun([got], []), run_case(_at_start(start), case)
        ):
            return (
                f" On case {case.label}, your {s} new token(s) sat at "
                f"position(s) {positions_text(range(start, start + s))}; after {past} "
                f"cached tokens they belong at {positions_text(range(past, past + s))}."
            )
    return ""


def _position_problems(title, step, cases, wrong) -> None:
    neutral = {id(cases[i].model): _neutral(cases[i].model) for i in wrong}
    for i in wrong:
        model = neutral[id(cases[i].model)]
        if not case_right(
            run_case(step, cases[i], model),
            run_case(_reference_step, cases[i], model),
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


def _logits_of(step, model, n_past):
    """``tokens [B, P + S]`` -> the logits [B, S, V] of one step on the last S after
    the first ``n_past`` cached (None unless a tensor [B, S, V])."""

    def logits(tokens):
        past = tokens[:, :n_past].clone() if n_past else None
        out = run_steps(step, model, past, (tokens[:, n_past:].clone(),)).outputs[0]
        return out if type(out) is torch.Tensor and out.dim() == 3 else None

    return logits


def _mask_problems(title, step, cases, wrong) -> None:
    for i in (i for i in wrong if cases[i].past is not None):
        case = cases[i]
        tokens = torch.cat([case.past, case.chunks[0]], dim=1)
        n_past = case.past.size(1)
        seen = influence(_logits_of(step, case.model, n_past), tokens, 11)
        if seen is None:
            continue
        for q, keys in enumerate(seen):
            want = set(range(n_past + q + 1))
            if keys == want:
                continue
            observed = (
                f"On case {case.label}, the new token {q} (position "
                f"{n_past + q}) is influenced by the tokens at positions "
                f"{positions_text(keys)}; it should see {positions_text(want)}."
            )
            with pictured(lambda said, s=seen, c=case: influence_picture(s, c)):
                if any(k > n_past + q for k in keys):
                    NOT_CAUSAL.fail(title, observed)
                if keys < want:
                    MASK_ROWS.fail(title, observed)
                said = f"the new queries attend to the wrong tokens. {observed}"
                fallback(title, said, S_CACHE_PITFALLS, advice="", stop="")


@single_threaded
@keeps_random_state
def check_lm_step(lm_step) -> None:
    """``lm_step(model, tokens [B, S], cache) -> logits [B, S, V]``: the next S tokens
    after the ``cache.length`` cached ones; grows the cache by S. Equal to
    ``model(tokens, cache=cache)`` on an empty cache and after earlier steps."""
    title = "lm_step"
    verify_integrity()
    n_cases = lm_step_problems(title, lm_step)
    passed(
        title,
        f"matches the model's forward on {n_cases} cases, empty cache and "
        "after cached tokens, with dropout in eval mode, and grows the cache "
        "by S",
    )


def lm_step_problems(title, lm_step) -> int:
    """Raise the lm_step failure, or return the number of cases when it is right
    (printing nothing: check_generate_greedy asks it too)."""
    cases = step_cases()
    refs = [run_case(_reference_step, c) for c in cases]
    runs = [run_case(lm_step, c) for c in cases]
    if all(case_right(g, w) for g, w in zip(runs, refs)):
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
    if not all(case_right(runs[i], refs[i]) for i in plain):
        cases, runs, refs = ([xs[i] for i in plain] for xs in (cases, runs, refs))
    _empty_cache_problems(title, lm_step, cases, runs, refs)
    wrong = [i for i, (g, w) in enumerate(zip(runs, refs)) if not case_right(g, w)]
    _position_problems(title, lm_step, cases, wrong)
    _mask_problems(title, lm_step, cases, wrong)
    i = wrong[0]
    k, problem = first_problem(runs[i], refs[i])
    call = f"call {k + 1} of " if len(cases[i].chunks) > 1 else ""
    fallback(
        title,
        "right on an empty cache, wrong once the cache holds tokens: "
        f"{call}case {cases[i].label}: {problem}",
        S_CACHE_PITFALLS,
        "compare your code with the model's forward step by step",
    )


@single_threaded
@keeps_random_state
def check_lm_step_by_hand(lm_step) -> None:
    """Hidden test: the learner built the step from the model's parts, not by calling
    the model's own forward."""
    case = step_cases()[5]  # an empty cache: the reference fills none inside the record
    check_not_delegated(
        "lm_step",
        lambda: run_case(lm_step, case),
        forbidden_code={
            inspect.unwrap(
                DecoderOnlyLM.forward
            ).__code__: "the model's own forward, model(tokens, cache=cache)"
        },
    )


seal(__name__)
