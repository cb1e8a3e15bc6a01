"""Chapter 8 graded with the real nbgrader CLI: generate -> autograde -> feedback.

One autograde run grades a small class: the solution, the untouched student version,
right answers written differently, and buggy submissions. Each must score exactly what
it deserves (3 + 4 + 3), and the feedback must name the pitfall.

generate_greedy calls the learner's own lm_step, so a bug in lm_step that greedy
decoding meets costs both cells. The learner who loses lm_step's points alone has a
bug that greedy decoding never meets: a mask built as causal_mask(S), which is right
for the prompt (nothing cached yet) and, broadcast, for one new token, but has too few
keys for several new tokens after cached ones.
"""

import re

import nbformat
import pytest

from course import ROOT, Buggy, GradedChapter

CHAPTER = "ch08_generation"
FULL = {"test_next_token_probs": 3, "test_lm_step": 4, "test_generate_greedy": 3}

# --------------------------------------------------------- right, written differently
# Top-p by walking each row in a Python loop, renormalised by the kept mass.
PROBS_LOOP = """
import torch

def next_token_probs(logits, temperature, top_p):
    probs = torch.softmax(logits / temperature, dim=-1)
    out = torch.zeros_like(probs)
    for row in range(probs.shape[0]):
        total = 0.0
        for idx in torch.argsort(probs[row], descending=True).tolist():
            out[row, idx] = probs[row, idx]
            total += probs[row, idx].item()
            if total >= top_p:
                break
    return out / out.sum(dim=-1, keepdim=True)
"""
# The Encoder stack called whole (it takes the cache and ends with the final norm),
# the mask cut from the bottom rows of the full causal mask.
STEP_STACK = """
import math
from tformer_ref.masks import causal_mask

def lm_step(model, tokens, cache):
    past, n_new = cache.length, tokens.size(1)
    mask = causal_mask(past + n_new, tokens.device)[:, :, past:, :]
    x = model.tok_embed(tokens) * model.d_model ** 0.5
    x = model.dropout(model.pos(x, start=past))
    return model.lm_head(model.blocks(x, mask, cache))
"""
# A while loop on the length, argmax over the softmax.
GREEDY_WHILE = """
import torch
from tformer_ref.kv_cache import KVCache

def generate_greedy(model, prompt, max_new_tokens):
    cache = KVCache()
    out, step_input = prompt.clone(), prompt
    while out.size(1) < prompt.size(1) + max_new_tokens:
        probs = lm_step(model, step_input, cache)[:, -1].softmax(-1)
        step_input = probs.argmax(-1, keepdim=True)
        out = torch.cat([out, step_input], dim=1)
    return out
"""

# ------------------------------------------------------------------------------ buggy
# The temperature divides the probabilities: renormalised, it has no effect at all.
PROBS_TEMPERATURE_AFTER_SOFTMAX = """
import torch

def next_token_probs(logits, temperature, top_p):
    probs = torch.softmax(logits, dim=-1) / temperature
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    keep_sorted = sorted_probs.cumsum(-1) - sorted_probs < top_p
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    probs = probs * keep
    return probs / probs.sum(-1, keepdim=True)
"""
# cumsum < p: the token that crosses p is cut, and a top token above p leaves nothing.
PROBS_CROSSING_TOKEN_CUT = """
import torch

def next_token_probs(logits, temperature, top_p):
    logits = logits / temperature
    sorted_probs, order = logits.softmax(-1).sort(-1, descending=True)
    keep_sorted = sorted_probs.cumsum(-1) < top_p
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    return logits.masked_fill(~keep, float("-inf")).softmax(-1)
"""
# causal_mask(S) without past=: too few keys once the cache holds tokens.
STEP_MASK_IGNORES_PAST = """
import math
from tformer_ref.masks import causal_mask

def lm_step(model, tokens, cache):
    past = cache.length
    mask = causal_mask(tokens.size(1), tokens.device)
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past))
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))
"""
# Positions restart at 0 on every step.
STEP_POSITIONS_NOT_OFFSET = """
import math
from tformer_ref.masks import causal_mask

def lm_step(model, tokens, cache):
    past = cache.length
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x))
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))
"""
# A default argument is built once: the next prompt attends to the last one's tokens.
GREEDY_MUTABLE_DEFAULT = """
import torch
from tformer_ref.kv_cache import KVCache

def generate_greedy(model, prompt, max_new_tokens, cache=KVCache()):
    tokens = prompt
    logits = lm_step(model, prompt, cache)
    for _ in range(max_new_tokens):
        next_token = logits[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, next_token], dim=1)
        logits = lm_step(model, next_token, cache)
    return tokens
"""
# Returns the new tokens without the prompt in front.
GREEDY_NEW_TOKENS_ONLY = """
import torch
from tformer_ref.kv_cache import KVCache

def generate_greedy(model, prompt, max_new_tokens):
    cache = KVCache()
    generated, step_input = [], prompt
    for _ in range(max_new_tokens):
        step_input = lm_step(model, step_input, cache)[:, -1].argmax(-1, keepdim=True)
        generated.append(step_input)
    return torch.cat(generated, dim=1)
"""


BUGGY = {
    "temperature_after_softmax": Buggy(
        answers={"next_token_probs": PROBS_TEMPERATURE_AFTER_SOFTMAX},
        zero=("test_next_token_probs",),
        feedback="temperature applied after the softmax, or not at all",
    ),
    "mask_ignores_past": Buggy(
        answers={"lm_step": STEP_MASK_IGNORES_PAST},
        zero=("test_lm_step",),
        feedback="causal mask of the wrong shape",
    ),
    "mutable_default_cache": Buggy(
        answers={"generate_greedy": GREEDY_MUTABLE_DEFAULT},
        zero=("test_generate_greedy",),
        feedback="a cache carried over between",
    ),
    # One bug per cell: the crossing token cut, positions not offset, the prompt dropped
    # (greedy decoding over the buggy lm_step goes wrong anyway, so its words are not
    # asserted).
    "three_bugs": Buggy(
        answers={
            "next_token_probs": PROBS_CROSSING_TOKEN_CUT,
            "lm_step": STEP_POSITIONS_NOT_OFFSET,
            "generate_greedy": GREEDY_NEW_TOKENS_ONLY,
        },
        zero=tuple(FULL),
        feedback=(
            "top-p drops the token that crosses p",
            "positions not offset by the cache length",
        ),
    ),
}


def _hidden_first_line() -> str | None:
    """The first line of the solution notebook's hidden tests (None if it has none)."""
    path = ROOT / "solutions" / CHAPTER / "exercise.ipynb"
    for cell in nbformat.read(path, as_version=4).cells:
        hidden = re.search(
            r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", cell.source, re.S
        )
        lines = [ln.strip() for ln in (hidden.group(1) if hidden else "").splitlines()]
        if any(lines):
            return next(ln for ln in lines if ln)
    return None


# One autograde run per chapter, on one worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(CHAPTER)]


class TestGrading(GradedChapter):
    chapter, full, buggy = CHAPTER, FULL, BUGGY
    hidden_student = "solution"
    right_variants = {
        "written_differently": {
            "next_token_probs": PROBS_LOOP,
            "lm_step": STEP_STACK,
            "generate_greedy": GREEDY_WHILE,
        }
    }

    @property
    def hidden_marker(self) -> str:
        marker = _hidden_first_line()
        if marker is None:
            pytest.skip(f"{CHAPTER} has no hidden tests")
        return marker
