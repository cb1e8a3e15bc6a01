# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise 8 — Sampling and incremental decoding with a KV cache
#
# Three pieces of a text generator: the distribution the next token is drawn from (temperature and
# top-p), one incremental step of a decoder-only model that reuses the keys and values it has already
# computed (the KV cache), and greedy decoding built on that step. The lesson
# ([lesson.ipynb](lesson.ipynb)) explains every step.
#
# **How to work.** Replace each `# YOUR CODE HERE` / `raise NotImplementedError()` with your code, then
# run the check cell below it. A check runs your function on small seeded inputs and models, compares
# it with the course's reference, and when they differ tells you *which* mistake it looks like and which
# lesson section explains it. Do not edit the check cells: they are restored before grading, and a
# hidden test fails code that calls the course's own sampling or generation functions.
#
# **Grade yourself** at any time, from the course folder:
# `python -m tformer_grading book/ch08_generation/exercise.ipynb`
#
# Shape letters: B batch, S new tokens, T tokens cached so far, V vocabulary, D = d_model.
# Everything runs on the CPU in seconds, and unchanged on a GPU.

# %% nbgrader="locked:setup"
import math

import torch

from tformer_grading.checks import ch08
from tformer_ref.device import get_device, seed_everything
from tformer_ref.kv_cache import KVCache
from tformer_ref.masks import causal_mask
from tformer_ref.model import DecoderOnlyLM

seed_everything(0)
device = get_device()

# %% [markdown]
# ## 1. Temperature and top-p (3 points)
#
# `next_token_probs(logits, temperature, top_p)` takes the logits of the next token, `logits [B, V]`
# (float), a `temperature > 0` and a `top_p` in (0, 1], and returns the probabilities `[B, V]` the
# next token is drawn from, each row summing to 1:
#
# 1. divide the **logits** by the temperature (lesson [§8.5](lesson.ipynb#id-8-5-temperature): before the softmax, not after it);
# 2. keep, in each row, the smallest set of most likely tokens whose probability (at that
#    temperature) reaches `top_p`: the token whose probability carries the sum across `top_p` is *in*
#    the set, so the set is never empty, and when the most likely token alone holds more than `top_p`
#    it is kept alone (lesson [§8.6](lesson.ipynb#id-8-6-top-k-and-top-p));
# 3. renormalise: the kept tokens' probabilities sum to 1, every other token gets exactly 0.
#
# `top_p = 1` keeps every token (the reference's top-p filter returns the logits unchanged). The
# check compares your probabilities with the reference on several temperatures and values of
# `top_p`; when they differ it compares the tokens you keep with the reference's and measures
# the temperature your distribution has.


# %% nbgrader="solution:next_token_probs"
def next_token_probs(logits, temperature, top_p):
    """logits [B, V] -> probs [B, V]: temperature, then top-p, then renormalised."""
    ### BEGIN SOLUTION
    logits = logits / temperature
    probs = logits.softmax(dim=-1)
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    # Keep a token while the tokens ranked above it hold less than top_p: the crossing
    # token passes, and so does the first one (nothing is ranked above it).
    keep_sorted = (sorted_probs.cumsum(dim=-1) - sorted_probs) < top_p
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    return logits.masked_fill(~keep, float("-inf")).softmax(dim=-1)
    ### END SOLUTION


# %% nbgrader="test:test_next_token_probs:3"
ch08.check_next_token_probs(next_token_probs)
### BEGIN HIDDEN TESTS
ch08.check_next_token_probs_by_hand(next_token_probs)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. One step with a KV cache (4 points)
#
# `lm_step(model, tokens, cache)` runs the next `S` tokens of a sequence through a
# `DecoderOnlyLM` (built with `pad_id=None`) whose earlier `T = cache.length` tokens are already in
# `cache`, a `KVCache`. `tokens` is `[B, S]`; it returns the logits `[B, S, V]` of the new tokens and
# leaves the cache holding `T + S` tokens. It must give what `model(tokens, cache=cache)` gives,
# on an empty cache (`T = 0`: the prompt) and after earlier steps. Build it from the model's parts,
# in the model's order (lesson [§8.8](lesson.ipynb#id-8-8-decoding-with-a-cache-three-pitfalls), `step_from_parts`):
#
# - `model.tok_embed(tokens)` scaled by `math.sqrt(model.d_model)`;
# - `model.pos(x, start=...)`: the new tokens sit at positions `T .. T + S - 1`;
# - `model.dropout`;
# - each block of `model.blocks.layers` in turn, `x = block(x, mask, cache.layer(i))`: block `i`
#   appends the new keys and values to `cache.layer(i)` and attends to all `T + S` of them;
# - `model.blocks.norm`, then `model.lm_head`.
#
# The mask is a bool keep-mask `[1, 1, S, T + S]`: new query `i` may attend to the `T` cached keys and
# to the new keys up to its own position, `causal_mask(S, device, past=T)`. Read `cache.length` once,
# before the blocks grow the cache. Lesson [§8.8](lesson.ipynb#id-8-8-decoding-with-a-cache-three-pitfalls) shows the three ways this step goes wrong.


# %% nbgrader="solution:lm_step"
def lm_step(model, tokens, cache):
    """tokens [B, S] after the cache.length cached ones -> logits [B, S, V]."""
    ### BEGIN SOLUTION
    past = cache.length  # read before block 0 appends the new keys
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past))
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))
    ### END SOLUTION


# %% nbgrader="test:test_lm_step:4"
ch08.check_lm_step(lm_step)
### BEGIN HIDDEN TESTS
ch08.check_lm_step_by_hand(lm_step)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. Greedy decoding with the cache (3 points)
#
# `generate_greedy(model, prompt, max_new_tokens)` continues `prompt [B, S]` (token ids) by
# `max_new_tokens = N` tokens and returns the prompt followed by them, `[B, S + N]` (N may be 1, or
# 0: then the prompt alone comes back). Use a **new**
# `KVCache` on every call and your `lm_step`: run the prompt once, take the most likely token of the
# last position (`argmax`), then feed each chosen token alone (`[B, 1]`) to get the next one. Each
# token goes through the model once.
#
# It must equal, token for token, greedy decoding without a cache (the whole sequence re-run at every
# step). The check decodes several prompts one after the other, with two models, so a cache that
# survives from one call to the next (lesson [§8.8](lesson.ipynb#id-8-8-decoding-with-a-cache-three-pitfalls)) is caught; it also watches what your loop feeds
# the model.


# %% nbgrader="solution:generate_greedy"
def generate_greedy(model, prompt, max_new_tokens):
    """prompt [B, S] -> [B, S + max_new_tokens]: greedy, with a fresh KV cache."""
    ### BEGIN SOLUTION
    cache = KVCache()  # one per call: the next prompt must not see this one's tokens
    tokens, step_input = prompt, prompt
    for _ in range(max_new_tokens):
        logits = lm_step(model, step_input, cache)
        step_input = logits[:, -1].argmax(dim=-1, keepdim=True)  # [B, 1]
        tokens = torch.cat([tokens, step_input], dim=1)
    return tokens
    ### END SOLUTION


# %% nbgrader="test:test_generate_greedy:3"
ch08.check_generate_greedy(generate_greedy)
### BEGIN HIDDEN TESTS
ch08.check_generate_greedy_by_hand(generate_greedy)
### END HIDDEN TESTS

# %% [markdown]
# ## Optional: your functions write text
#
# Not graded. The cell trains a tiny character-level model on *The Devil's Dictionary* for a few
# seconds (far too short to learn words: expect the letters, spaces and punctuation of English in
# roughly the right proportions), then samples from it with **your** `next_token_probs` and `lm_step`.
# The draws use a seeded `torch.Generator` (lesson [§8.9](lesson.ipynb#id-8-9-seeded-sampling)), so the lines are the same every run on
# the same machine. Try other temperatures and values of `top_p`.

# %%
from tformer_ref.lm_training import train_lm
from tformer_ref.text import CharTokenizer, load_corpus, train_val_split


def sample_text(model, tok, prompt, n_tokens, temperature, top_p, seed=0):
    """Draw n_tokens after prompt with your next_token_probs and lm_step."""
    generator = torch.Generator(device=device).manual_seed(seed)
    cache = KVCache()
    ids = torch.tensor([tok.encode(prompt)], device=device)
    out = ids
    with torch.no_grad():
        for _ in range(n_tokens):
            logits = lm_step(model, ids, cache)[:, -1]
            probs = next_token_probs(logits, temperature, top_p)
            ids = torch.multinomial(probs, 1, generator=generator)
            out = torch.cat([out, ids], dim=1)
    return tok.decode(out[0].tolist())


n_threads = torch.get_num_threads()
torch.set_num_threads(1)  # a small model: one thread is much faster on a shared CPU
text = load_corpus()
tok = CharTokenizer(text)
train_ids, val_ids = train_val_split(torch.tensor(tok.encode(text)), 0.1)
torch.manual_seed(0)
tiny = DecoderOnlyLM(
    len(tok),
    32,
    2,
    1,
    64,
    dropout=0.0,
    max_len=64,
    pad_id=None,
    norm_first=True,
    positions="learned",
).to(device)
history = train_lm(
    tiny,
    train_ids,
    val_ids,
    60,
    context=32,
    batch_size=16,
    lr=1e-2,
    warmup=10,
    eval_every=60,
)
print(
    f"validation loss after 60 steps: {history.val_loss[-1][1]:.2f} nats per character"
)
try:
    for temperature, top_p in ((0.5, 0.9), (1.0, 0.9), (1.5, 1.0)):
        line = sample_text(tiny, tok, "LOVE, n. ", 40, temperature, top_p)
        print(f"temperature={temperature}, top_p={top_p}: {line!r}")
except NotImplementedError:
    print("Write next_token_probs and lm_step above first.")
finally:
    torch.set_num_threads(n_threads)  # leave your kernel as it was

# %% [markdown]
# ## Done?
#
# Run the self-grading command above. The lesson measures what your `lm_step` buys: generation with
# the cache against re-running the whole prefix at every step, in tokens per second as the sequence
# grows ([§8.7](lesson.ipynb#id-8-7-the-kv-cache)), and what the cache costs in memory.
