# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Chapter 8 — Generating text: sampling and the KV cache
#
# Chapter 5 built `DecoderOnlyLM`, the shape of GPT ({section}`5.8`), and only ever ran it
# on random tokens.
# This chapter trains it on real English text and makes it write. That takes three things
# the course has not done yet: turning text into token ids and back, a loss that asks every
# position for the *next* token of one long stream, and a way to choose each new token. The
# last is where most of today's use of Transformers happens, and where the quiet mistakes
# are: a temperature that changes nothing, a top-p filter that keeps no token at all, and a
# KV cache that makes decoding fast while placing every new token at position 0.
#
# In this chapter you will:
#
# - train a character and a byte-pair tokenizer on a public-domain book shipped with the
#   course, and see the three ways tokenizers break a model;
# - train a small decoder-only model on next-token loss (here for
#   {glue:text}`ch08_train_seconds:.0f` s), and read its samples before and after;
# - put AdamW's weight decay only where it belongs, and measure what it does elsewhere;
# - shape the next-token distribution with temperature, top-k and top-p, on the trained
#   model's own distributions;
# - build a KV cache step by step, check that it gives the same tokens as decoding without
#   it, and measure what it saves and what it costs;
# - meet the cache's three classic bugs, and seed sampling so that a cell repeats.
#
# **The seed claims this chapter checks** (seed 004, its text-generation section).
#
# | claim or code | verdict | section |
# |---|---|---|
# | {seed}`004:output = model.decoder(trg, enc_src, None, trg_mask)` inside the loop, once per new token | every step runs the whole prefix through the decoder again (a KV cache runs only the new token, with the same result), and the `None` is the missing source mask, bug 3 of chapter 6's bug hunt | 8.7 |
# | {seed}`004:next_token = output.argmax(2)[:, -1].item()` | greedy decoding: right, and the limit of temperature → 0; it computes logits for every position and keeps the last | 8.5, 8.7 |
# | {seedtr}`004:generate text with greedy decoding; beam search can also improve the quality` | for translation-like tasks; for open-ended text, greedy and beam search find repetitive text, and sampling with top-k or top-p is the usual choice | 8.5, 8.6 |
#
# Everything runs on a CPU, and unchanged on a GPU.

# %% [markdown]
# ```{figure} ../figures/model_ch08.svg
# :alt: Diagram of the encoder–decoder Transformer with the decoder side highlighted: the embedding, the positions, the causal mask, the masked self-attention and feed-forward sublayers, the output layer and decoding; the encoder and the cross-attention are not, since a decoder-only model has neither.
# :name: fig-model-ch08
# :width: 100%
#
# The whole model; this chapter uses the highlighted part alone: a decoder without cross-attention, trained on one stream of text and decoded one token at a time.
# ```

# %%
# %matplotlib inline
import codecs
import inspect
import math
import re
import statistics
import time
from collections import Counter

import matplotlib.pyplot as plt
from tformer_ref.plotting import COLUMN_INCHES  # the import applies the book style
import torch
import torch.nn.functional as F
from myst_nb import glue

from tformer_ref.device import get_device, seed_everything
from tformer_ref.kv_cache import KVCache
from tformer_ref.lm_training import (
    evaluate_lm,
    next_token_loss,
    train_lm,
    weight_decay_groups,
)
from tformer_ref.masks import causal_mask, padding_mask
from tformer_ref.model import DecoderOnlyLM
from tformer_ref.sampling import generate, next_token_probs, top_k_filter, top_p_filter
from tformer_ref.text import (
    BytePairTokenizer,
    CharTokenizer,
    check_vocab,
    lm_windows,
    load_corpus,
    train_val_split,
)

device = get_device()  # CUDA when available; set TFORMER_DEVICE=cpu to override
seed_everything(0)
# Small models, many small operations: on a shared CPU one thread is faster than two.
torch.set_num_threads(1)
print(
    f"device: {device}, torch {torch.__version__}, {torch.get_num_threads()} CPU thread"
)


def synchronize():
    """Wait for queued GPU work, so that a timer measures the work, not its launch."""
    if device.type == "cuda":
        torch.cuda.synchronize()


def device_generator(seed):
    """A generator on the model's device: torch.multinomial needs one there."""
    return torch.Generator(device=device).manual_seed(seed)


# %% [markdown]
# ## 8.1 Real text, offline
#
# A language model needs text, and this course runs without a network. The corpus is
# shipped inside the package, in `tformer_ref/corpora/`: *The Devil's Dictionary* by Ambrose
# Bierce (1911), a satirical dictionary, in the Internet Wiretap 1st Online Edition of 1993.
# The book is in the public domain and the edition says so in its own header, which the file
# keeps; `tformer_ref/corpora/README.md` records where the file comes from (Debian's
# `dict-devil` package, whose copyright file records the same status) and the two changes
# made to turn that dictionary database back into plain text. `load_corpus()` reads it.

# %%
text = load_corpus()
headword = re.compile(r"^([A-Z][A-Z' -]+), (?:[a-z]+\.)", re.M)
entries = headword.findall(text)
assert "A Public Domain Text, Copyright Expired" in text[:1000] and text.isascii()
print(f"{len(text):,} characters, {len(set(text))} distinct, {len(entries):,} entries")
print(text[text.index("ACCIDENT, n.") :][:253])


# %% tags=["remove-cell"]
# The numbers the text quotes, for the book (this cell is hidden there).
glue("ch08_corpus_chars", len(text), display=False)
glue("ch08_corpus_distinct", len(set(text)), display=False)
glue("ch08_corpus_entries", len(entries), display=False)

# %% [markdown]
# {glue:text}`ch08_corpus_chars:,` characters, {glue:text}`ch08_corpus_distinct:d` of them
# distinct and all ASCII, and {glue:text}`ch08_corpus_entries:,` entries of the form
# *HEADWORD, n.* (or *v.*, *adj.*, ...) followed by a definition, with verses and a preface
# in between. That is
# small for a language model, but it has a strong, regular shape (capitals, a part of
# speech, a sentence), so a tiny model trained for {glue:text}`ch08_train_seconds:.0f` s
# (§8.3) visibly learns something.
#
# ## 8.2 Characters and byte pairs
#
# A model reads integers. A **tokenizer** maps text to ids and back. The simplest has one id
# per character:

# %%
chars = CharTokenizer(text)
ids = chars.encode("ACCORD, n.  Harmony.")
print(f"{len(chars)} ids; 'ACCORD, n.  Harmony.' ->", ids)
assert chars.decode(ids) == "ACCORD, n.  Harmony."

# %% [markdown]
# Characters make long sequences: every id carries one character, so a context of 64
# tokens sees a line of text. **Byte-pair encoding** (BPE) starts from single symbols (for
# byte-level BPE, the 256 byte values) and repeatedly merges the most frequent adjacent
# pair into a new token {cite:p}`sennrich2016neural`; byte-level BPE, which GPT-2 uses,
# can encode any text, since every byte already has an id {cite:p}`radford2019language`.
# `BytePairTokenizer` is a minimal version of it (read `tformer_ref/text.py`: training is
# a loop of "count pairs, merge the best one"), trained here to a vocabulary of 768, that
# is, 512 merges. Its training is pure Python, so it learns the merges from the first
# third of the book, and then encodes all of it:

# %%
start = time.perf_counter()
bpe = BytePairTokenizer.train(text[: len(text) // 3], 768)
bpe_ids = torch.tensor(bpe.encode(text))
bpe_seconds = time.perf_counter() - start
chars_per_token = len(text) / len(bpe_ids)
print(
    f"trained and encoded in {bpe_seconds:.1f} s: {len(bpe_ids):,} tokens, "
    f"{chars_per_token:.2f} characters per token"
)
print("the first merges:", [bpe.token_bytes(i) for i in range(256, 264)])
print("the last merges: ", [bpe.token_bytes(i) for i in range(760, 768)])
sentence = "ACCORD, n.  Harmony."
print("|".join(bpe.decode([i]) for i in bpe.encode(sentence)))
assert bpe.decode(bpe.encode(sentence)) == sentence and chars_per_token > 2


# %% tags=["remove-cell"]
# The numbers the text quotes, for the book (this cell is hidden there).
glue("ch08_chars_per_token", chars_per_token, display=False)

# %% [markdown]
# The first merges are runs of spaces (the book indents its verse quotations) and the
# commonest pairs of English, a space before `t`, `he`, soon the whole ` the`; the last
# ones are mostly words and word pieces (and one newline with a long run of indentation).
# A token carries {glue:text}`ch08_chars_per_token:.2f` characters on average, so the same
# 64 tokens now see that many times more text. The pieces never cross a word: a merge
# happens inside a word with its leading space, roughly the way GPT-2 splits text before
# merging. The model of this chapter reads these tokens.
#
# Tokenizers break models in three classic ways, and two of them raise no error at all.
#
# **1. The tokenizer and the embedding disagree on the vocabulary.** A model built for the
# character tokenizer's {glue:text}`ch08_corpus_distinct:d` ids, fed byte-pair ids:

# %%
seed_everything(0)
# On the CPU on purpose: on a GPU the same lookup is a device-side assert that names
# nothing and leaves the process unable to run anything else on the GPU.
char_model = DecoderOnlyLM(
    len(chars), 32, 2, 1, 64, dropout=0.0, max_len=64, pad_id=None
).eval()
try:
    char_model(torch.tensor([bpe.encode("ACCORD, n.  Harmony.")]))
except IndexError as err:
    print(f"IndexError: {err}")
try:
    check_vocab(char_model.tok_embed.num_embeddings, bpe)
except ValueError as err:
    print(f"check_vocab: {err}")
check_vocab(char_model.tok_embed.num_embeddings, chars)  # the right pair: silent

# %% [markdown]
# The embedding's own error names no tokenizer and no size, and on a GPU there is not even
# that. `check_vocab(model_vocab, tokenizer)` compares the two before the first batch; the
# cure is to build the model from the tokenizer, `vocab=len(tokenizer)`.
#
# **2. A special token's id is a real token's id.** `DecoderOnlyLM` takes a `pad_id` (its
# default is 0, as in chapter 5) and hides that id from every query with a padding mask. The
# character tokenizer above has no special tokens, and its id 0 is the newline
# (`chars.itos[0]` is {glue:text}`ch08_id0:s`). A model built with `pad_id=0` on those ids
# cannot see a single newline. To show it, we change the newline's embedding row and watch
# the last position's logits, once with the newline at id 0 and once with a tokenizer that
# reserves id 0 for `<pad>` (`CharTokenizer(text, specials=("<pad>",))`, so that the newline
# becomes id 1):

# %%
padded = CharTokenizer(text, specials=("<pad>",))
entry = "ACCORD, n.  Harmony.\n\nACCORDION, n.  An instrument"
seed_everything(0)
pad_model = DecoderOnlyLM(
    len(padded), 32, 2, 1, 64, dropout=0.0, max_len=64, pad_id=0
).eval()


@torch.no_grad()
def newline_influence(model, tokenizer):
    """How far the last position's logits move when the newline's embedding changes."""
    tokens = torch.tensor([tokenizer.encode(entry)])
    newline = tokenizer.stoi["\n"]
    before = model(tokens)[0, -1]
    saved = model.tok_embed.weight[newline].clone()
    noise = torch.randn(saved.shape, generator=torch.Generator().manual_seed(0))
    model.tok_embed.weight[newline] += noise.to(saved.device)
    after = model(tokens)[0, -1]
    model.tok_embed.weight[newline] = saved
    return (after - before).abs().max().item()


masked = (~padding_mask(torch.tensor([chars.encode(entry)]), 0)).sum().item()
blind = newline_influence(pad_model, chars)
seeing = newline_influence(pad_model, padded)
print(
    f"id 0 is {chars.itos[0]!r}: the padding mask hides {masked} of {len(entry)} keys"
)
print(f"newline at id 0: the last logits moved by {blind:.2e}")
print(f"newline at id 1: the last logits moved by {seeing:.2e}")
assert blind == 0.0 and seeing > 1e-3


# %% tags=["remove-cell"]
# The numbers the text quotes, for the book (this cell is hidden there).
glue("ch08_id0", repr(chars.itos[0]), display=False)
glue("ch08_newline_seeing", seeing, display=False)

# %% [markdown]
# With the collision the newlines could hold anything: no query attends to them, so the
# model's prediction does not move at all; with `<pad>` at id 0 the same change moves the
# last logits by {glue:text}`ch08_newline_seeing:.2f`. Nothing warns, and a dictionary
# without its line breaks loses where an entry starts. Reserve the special ids first
# (`specials=` puts them at 0, 1, ...), or, for one stream of text with no padding at all,
# build the model with `pad_id=None`, as the rest of this chapter does (the KV cache needs
# it too, §8.7).
#
# **3. Decoding byte by byte.** The corpus is ASCII, but byte-level BPE encodes anything, a
# word with an accent included. *é* is two bytes in UTF-8, and this tokenizer never merged
# them, so it is two tokens; each alone is not a character:

# %%
cafe = bpe.encode("café")
print("tokens:", cafe, [bpe.token_bytes(i) for i in cafe])
print("joined, then decoded:  ", repr(bpe.decode(cafe)))
print("decoded token by token:", repr("".join(bpe.decode([i]) for i in cafe)))
try:
    bpe.token_bytes(cafe[-1]).decode("utf-8")
except UnicodeDecodeError as err:
    print(f"UnicodeDecodeError: {err}")
# Printing tokens as they come: an incremental decoder holds back a half character.
stream = codecs.getincrementaldecoder("utf-8")()
pieces = [stream.decode(bpe.token_bytes(i)) for i in cafe]
print("streamed:", pieces)
try:
    chars.encode("café")
except KeyError as err:
    print(f"the character tokenizer: KeyError: {err}")
assert bpe.decode(cafe) == "café" and "\ufffd" in "".join(bpe.decode([i]) for i in cafe)
assert "".join(pieces) == "café"

# %% [markdown]
# Decoded one token at a time, each half of *é* becomes the replacement character �
# (or, decoded strictly, an error). `bpe.decode` joins the tokens' bytes first and decodes
# once. A program that prints tokens as they are generated uses an incremental decoder,
# which returns nothing for the first half of *é* and the whole character with the second.
# The character tokenizer, for its part, cannot encode *é* at all: a character it never saw
# is an error that names it, not a silently dropped letter.
#
# ## 8.3 Next-token loss on one stream
#
# A decoder-only model is trained on one long stream of ids: cut a window of S tokens out
# of it, and at every position the target is the token that follows in the *stream*.
# `lm_windows` returns the window and the same window moved one token on:

# %%
x, y = lm_windows(
    torch.arange(100, 200),
    context=8,
    batch_size=2,
    generator=torch.Generator().manual_seed(0),
)
print("inputs ", x.tolist())
print("targets", y.tolist())
assert torch.equal(y, x + 1)

# %% [markdown]
# Every one of the S positions gets a target, the last one included: it is the token just
# after the window. (Chapter 6 shifted *inside* the sequence, {section}`6.2`:
# `tgt[:, :-1]` against `tgt[:, 1:]`, because a translation's target is a sentence of its
# own; on one stream, that shift would throw one target of every window away.) The causal
# mask is what makes this a task at all: position t sees tokens 0..t and must guess token
# t + 1.
#
# The model: one Pre-LN block, `d_model = 64`, four heads, learned positions for up to 256
# tokens, no padding id, trained on windows of 64 tokens. With learned positions the course
# keeps the √D scale of the tokens: the position table starts about √D (8 at D = 64) times
# shorter than the scaled tokens, and training grows it (§5.5). First its held-out loss and
# a sample before training:

# %%
CONTEXT, BATCH, STEPS, LR = 64, 32, 160, 1e-2
train_ids, val_ids = train_val_split(bpe_ids, 0.1)
seed_everything(0)


def make_lm():
    """The chapter's model: DecoderOnlyLM(len(bpe), 64, 4, 1, 256), on the device."""
    return DecoderOnlyLM(
        len(bpe),
        64,
        4,
        1,
        256,
        dropout=0.0,
        max_len=256,
        pad_id=None,
        norm_first=True,
        positions="learned",
    ).to(device)


lm = make_lm()
check_vocab(lm.tok_embed.num_embeddings, bpe)
prompt = torch.tensor([bpe.encode("\n\nLOVE, n.  ")], device=device)
loss_before = evaluate_lm(lm, val_ids, CONTEXT)
untrained = generate(lm, prompt, 40, generator=device_generator(0))
print(
    f"held-out loss before training: {loss_before:.3f} "
    f"(ln V = {math.log(len(bpe)):.3f})"
)
print(repr(bpe.decode(untrained[0])))
assert abs(loss_before - math.log(len(bpe))) < 0.5


# %% tags=["remove-cell"]
# The numbers the text quotes, for the book (this cell is hidden there).
glue("ch08_loss_before", loss_before, display=False)
glue("ch08_ln_vocab", math.log(len(bpe)), display=False)

# %% [markdown]
# Before training the loss is about ln V = {glue:text}`ch08_ln_vocab:.2f`, a uniform guess
# over the vocabulary, and the sample is random tokens. Now the training:
# `train_lm` draws random windows, runs AdamW (with the parameter groups of §8.4) under a
# warm-up and a cosine decay of the learning rate, clips the gradient norm at 1, and
# evaluates on the held-out tenth of the stream every 20 steps.

# %%
start = time.perf_counter()
history = train_lm(
    lm,
    train_ids,
    val_ids,
    STEPS,
    context=CONTEXT,
    batch_size=BATCH,
    lr=LR,
    weight_decay=0.1,
    warmup=20,
    eval_every=20,
    seed=0,
)
train_seconds = time.perf_counter() - start
loss_after = history.val_loss[-1][1]
bits_per_char = loss_after / math.log(2) / chars_per_token
# 55 new tokens: the prompt and the sample stay inside the 64 trained positions.
blank = torch.tensor([bpe.encode("\n\n")], device=device)
samples = [
    bpe.decode(
        generate(lm, start, 55, temperature=0.8, generator=device_generator(0))[0]
    )
    for start in (blank, prompt)
]
print(
    f"{STEPS} steps in {train_seconds:.1f} s; held-out loss {loss_before:.3f} -> "
    f"{loss_after:.3f} ({bits_per_char:.2f} bits per character)"
)
for sample in samples:
    print(sample.strip("\n"))
    print("---")
train_gap = loss_after - statistics.mean(history.train_loss[-20:])
mid, mid_val = history.val_loss[len(history.val_loss) // 2 - 1]  # the middle evaluation
mid_gap = mid_val - statistics.mean(history.train_loss[mid - 20 : mid])
passes = STEPS * BATCH * CONTEXT / len(train_ids)  # windows overlap, so roughly
print(
    f"last 20 training batches: {loss_after - train_gap:.3f}, {train_gap:.3f} below "
    f"held-out (at step {mid}: {mid_gap:.3f}); {passes:.1f} passes over the "
    f"{len(train_ids):,} training tokens"
)
assert loss_after < 0.7 * loss_before and train_gap > max(0.05, mid_gap + 0.02)


# %% tags=["remove-cell"]
# The numbers the text quotes, for the book (this cell is hidden there).
glue("ch08_loss_after", loss_after, display=False)
glue("ch08_train_gap", train_gap, display=False)
glue("ch08_passes", passes, display=False)
glue("ch08_bits_per_char", bits_per_char, display=False)
glue("ch08_train_seconds", train_seconds, display=False)
glue("ch08_steps", STEPS, display=False)

# %% mystnb={"figure": {"caption": "The training loss of every step and the held-out loss every 20 steps (step 0: before training). Both fall fast from the uniform guess, then slowly; by the end the training batches sit below the held-out loss, and the gap is growing.", "name": "fig-ch08-loss"}, "image": {"alt": "A line chart of cross-entropy loss against training step: a noisy training curve and a smooth held-out curve with markers, both falling from about the dotted uniform-guess line towards the bottom right, the training curve below the held-out one by the end."}}
fig, ax = plt.subplots(figsize=(COLUMN_INCHES, 3.4))
ax.plot(
    range(1, STEPS + 1), history.train_loss, lw=0.8, alpha=0.6, label="training batch"
)
ax.plot(*zip((0, loss_before), *history.val_loss), "o-", ms=3, label="held-out")
ax.axhline(math.log(len(bpe)), color="k", ls=":", label="uniform guess, ln V")
ax.set_xlabel("step")
ax.set_ylabel("next-token loss (nats)")
ax.grid(alpha=0.3)
ax.legend()
fig.tight_layout()
plt.show()

# %% [markdown]
# In {glue:text}`ch08_train_seconds:.0f` s here ({glue:text}`ch08_steps:d` steps) the
# held-out loss fell from {glue:text}`ch08_loss_before:.2f` to
# {glue:text}`ch08_loss_after:.2f`, or {glue:text}`ch08_bits_per_char:.2f` bits per
# character. The samples, one from an empty line and one from the prompt *LOVE, n.*, are not
# English, but in this run they have the dictionary's shape: a capitalised headword
# followed by *n.*, definitions that begin with *A* or *An*, sentences that end, real short
# words and plausible long ones. By the last steps the training batches score
# {glue:text}`ch08_train_gap:.2f` nats below the held-out text: after
# {glue:text}`ch08_passes:.1f` passes over its training stream the model has started to fit
# it.
#
# **The pitfall: no shift at all.** Pass the inputs as their own targets, and a causal model
# has an easy task: the token at position t is in its own input. The same model, trained
# with AdamW at the same learning rate (constant here, with no warm-up or clipping) for
# {glue:text}`ch08_copy_steps:d` steps, next to the same short training with the right
# targets:


# %%
def windows_without_shift(ids, context, batch_size, generator):
    """The pitfall: the targets are the inputs themselves, not the next tokens."""
    x, _ = lm_windows(ids, context, batch_size, generator)
    return x, x


def shown(token_id):
    """A token as a label: spaces and newlines made visible."""
    return bpe.decode([token_id]).replace(" ", "␣").replace("\n", "⏎")


def short_training(
    model, windows, param_groups, steps, *, context=CONTEXT, batch_size=BATCH, lr=LR
):
    """AdamW at a constant learning rate on `windows` of the training stream.

    Returns (model in eval mode, the loss of every step)."""
    optimizer = torch.optim.AdamW(param_groups(model, 0.1), lr=lr, betas=(0.9, 0.95))
    g = torch.Generator().manual_seed(0)
    losses = []
    model.train()
    for _ in range(steps):
        xb, yb = windows(train_ids, context, batch_size, g)
        loss = next_token_loss(model(xb.to(device)), yb.to(device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return model.eval(), losses


NO_SHIFT_STEPS = 25
seed_everything(0)
copier, copy_losses = short_training(
    make_lm(), windows_without_shift, weight_decay_groups, NO_SHIFT_STEPS
)
seed_everything(0)
_, control_losses = short_training(
    make_lm(), lm_windows, weight_decay_groups, NO_SHIFT_STEPS
)
copier_val = evaluate_lm(copier, val_ids, CONTEXT)
copied = generate(copier, prompt, 20, temperature=0)[0, prompt.size(1) :]
right_then = control_losses[-1]
print(
    f"no shift, step {NO_SHIFT_STEPS}: training loss {copy_losses[-1]:.3f} "
    f"(the same training with the right targets: {right_then:.3f})"
)
print(
    f"its real next-token loss on held-out text: {copier_val:.3f} "
    f"(the model trained above: {loss_after:.3f})"
)
print(
    f"the prompt's last token: {shown(int(prompt[0, -1]))!r}; it continues with:",
    [shown(int(i)) for i in copied],
)
assert copy_losses[-1] < 0.3 * right_then and copier_val > loss_before
assert (copied == prompt[0, -1]).all()


# %% tags=["remove-cell"]
# The numbers the text quotes, for the book (this cell is hidden there).
glue("ch08_copy_steps", NO_SHIFT_STEPS, display=False)
glue("ch08_copy_loss", copy_losses[-1], display=False)
glue("ch08_copy_right_loss", right_then, display=False)
glue("ch08_copy_val", copier_val, display=False)

# %% [markdown]
# Its training loss fell to {glue:text}`ch08_copy_loss:.3f` in
# {glue:text}`ch08_copy_steps:d` steps, where the same training with the right targets was
# at {glue:text}`ch08_copy_right_loss:.2f`: the best curve of the chapter, for a model
# that learned to copy. Asked for the next token it scores {glue:text}`ch08_copy_val:.2f`
# on held-out text, worse than the untrained model, and it continues the prompt by
# repeating its last token (here the two spaces after *n.*, ␣␣, as printed). A training
# loss that falls towards zero within a few dozen steps on real text is a symptom, and a
# missing shift is the first thing to check (leaked or memorised data give the same curve).
# Chapter 6's shift inside a target sentence and the shift of `lm_windows` in the stream
# are the two right ones; no shift at all is always wrong.
#
# ## 8.4 Weight decay, and what not to decay
#
# AdamW subtracts `lr · weight_decay · θ` from every parameter it decays at every step,
# separately from the gradient step {cite:p}`loshchilov2019decoupled`. That pull towards 0
# is a prior worth having for the weight matrices, which mix features and can grow to fit
# noise. It is the wrong prior for the rest: a LayerNorm gain's neutral value is 1, not 0; a
# bias or a LayerNorm shift has a handful of numbers and no capacity to overfit; and an
# embedding row gets a gradient only when its token occurs, but would decay at every step.
# GPT-style training code therefore splits the parameters into two groups, with no decay on
# biases and LayerNorms {cite:p}`karpathy2022nanogpt`. Code bases differ on the
# embeddings. nanoGPT decays every 2-D parameter, its tied token embedding and its
# position table included; minGPT leaves embeddings out {cite:p}`karpathy2020mingpt`. (With
# tied embeddings every row also gets the output layer's gradient at every step.) This
# course leaves them out, for the reason measured below. `weight_decay_groups(model, wd)` gives
# AdamW two groups: decay on the weight matrices (here those of `nn.Linear`), none on
# embeddings, LayerNorms and biases (a tied output layer is the embedding, so it does not
# decay either):

# %%
decay, no_decay = weight_decay_groups(lm, 0.1)
names = {id(p): name for name, p in lm.named_parameters()}
for group in (decay, no_decay):
    group_names = [names[id(p)] for p in group["params"]]
    print(
        f"weight_decay={group['weight_decay']}: {len(group_names)} tensors, "
        f"{sum(p.numel() for p in group['params']):,} numbers:"
    )
    print("   ", ", ".join(group_names))
assert {names[id(p)] for p in no_decay["params"]} >= {
    "tok_embed.weight",
    "pos.embedding.weight",
}

# %% [markdown]
# The measured reason, on embedding rows. The same small model trained twice for 100 steps
# at a constant learning rate of 0.015 and weight decay 0.1: once with the two groups, once
# with a single group in which everything decays (the plain
# `AdamW(model.parameters(), weight_decay=0.1)`). We compare each embedding row's length at
# the end with its length at the start, for the tokens that never occur in the training
# stream (most of the 256 byte values), for rare ones (1 to 20 occurrences) and for the 50
# most frequent, and the LayerNorm gains:


# %%
def decay_everything(model, weight_decay):
    """The pitfall: one group, so the embeddings, norms and biases decay too."""
    return [{"params": list(model.parameters()), "weight_decay": weight_decay}]


counts = torch.bincount(train_ids, minlength=len(bpe))
kinds = {
    "never seen": counts == 0,
    "rare (1-20)": (counts >= 1) & (counts <= 20),
    "50 most frequent": counts >= counts.sort(descending=True).values[49],
}
DECAY_STEPS, DECAY_LR = 100, 0.015
shrink = {}
for label, groups in (
    ("two groups", weight_decay_groups),
    ("decay everything", decay_everything),
):
    seed_everything(0)
    small = DecoderOnlyLM(
        len(bpe),
        32,
        2,
        1,
        64,
        dropout=0.0,
        max_len=32,
        pad_id=None,
        norm_first=True,
        positions="learned",
    ).to(device)
    first = small.tok_embed.weight.detach().norm(dim=1).cpu()
    small, _ = short_training(
        small, lm_windows, groups, DECAY_STEPS, context=32, batch_size=16, lr=DECAY_LR
    )
    ratio = small.tok_embed.weight.detach().norm(dim=1).cpu() / first
    gains = torch.cat(
        [
            m.weight.detach().cpu()
            for m in small.modules()
            if isinstance(m, torch.nn.LayerNorm)
        ]
    )
    shrink[label] = {k: ratio[mask].mean().item() for k, mask in kinds.items()}
    shrink[label]["LayerNorm gain"] = gains.mean().item()
print(f"{'':18s}" + "".join(f"{k:>18s}" for k in shrink["two groups"]))
for label, row in shrink.items():
    print(f"{label:18s}" + "".join(f"{v:18.3f}" for v in row.values()))
pure_decay = (1 - DECAY_LR * 0.1) ** DECAY_STEPS
print(
    f"(1 - lr·wd)^steps = {pure_decay:.3f}; never-seen tokens: "
    f"{int(kinds['never seen'].sum())}, rare: {int(kinds['rare (1-20)'].sum())}"
)
right, wrong = shrink["two groups"], shrink["decay everything"]
assert right["never seen"] == 1.0 and abs(wrong["never seen"] - pure_decay) < 1e-4
relative = {k: wrong[k] / right[k] for k in kinds}
print(
    "with everything decayed, each kind's length relative to the two groups' run:",
    ", ".join(f"{k} {v:.3f}" for k, v in relative.items()),
)
assert all(v < 0.95 for v in relative.values())
assert wrong["LayerNorm gain"] < right["LayerNorm gain"] - 0.02
long_run = (1 - DECAY_LR * 0.1) ** 10_000


# %% tags=["remove-cell"]
# The numbers the text quotes, for the book (this cell is hidden there).
glue("ch08_long_run_typical", (1 - 6e-4 * 0.1) ** 100_000, display=False)
glue("ch08_rel_rare", relative["rare (1-20)"], display=False)
glue("ch08_rel_freq", relative["50 most frequent"], display=False)
glue("ch08_long_run", long_run, display=False)
glue("ch08_pure_decay", pure_decay, display=False)
glue("ch08_rare_right", right["rare (1-20)"], display=False)
glue("ch08_rare_wrong", wrong["rare (1-20)"], display=False)
glue("ch08_freq_right", right["50 most frequent"], display=False)
glue("ch08_freq_wrong", wrong["50 most frequent"], display=False)
glue("ch08_gain_right", right["LayerNorm gain"], display=False)
glue("ch08_gain_wrong", wrong["LayerNorm gain"], display=False)

# %% [markdown]
# With one group, a token the model never sees still has its row shrunk at every step, to
# exactly $(1 - \text{lr}\cdot\text{wd})^{100}$ = {glue:text}`ch08_pure_decay:.3f` of its
# length; with the groups it stays untouched. The others lose about the same share: the
# rare tokens' rows end at {glue:text}`ch08_rare_right:.3f` of their first length without
# decay and at {glue:text}`ch08_rare_wrong:.3f` with it, {glue:text}`ch08_rel_rare:.3f` as
# long; the 50 most frequent at {glue:text}`ch08_freq_right:.3f` and
# {glue:text}`ch08_freq_wrong:.3f`, {glue:text}`ch08_rel_freq:.3f` as long. In 100 steps
# decay took about the same share from every row, data or not. What differs over a long
# run is what pushes back: a frequent token's row gets a gradient at every step, a rare
# token's in a handful of steps and the pull in all of them, so over a run of many
# thousand steps decay, not data, decides the length of its row. A row left alone for
# 10 000 steps at this rate keeps {glue:text}`ch08_long_run:.1e` of it, and at a GPT-sized
# learning rate of 6e-4 with weight decay 0.1, a row left alone for 100 000 steps keeps
# {glue:text}`ch08_long_run_typical:.3f`. The LayerNorm gains, which start at their
# neutral 1, average {glue:text}`ch08_gain_wrong:.3f` with decay instead of
# {glue:text}`ch08_gain_right:.3f`: decay pulls them towards a gain of 0, not towards "no
# change".
#
# ## 8.5 Temperature
#
# The model gives logits; sampling needs a distribution. **Temperature** τ divides the
# logits before the softmax: `softmax(logits / τ)`. τ < 1 sharpens the distribution
# towards the most likely token, τ > 1 flattens it towards uniform, τ → 0 is greedy
# decoding. Here is the trained model's distribution of the token after a headword and the
# start of its definition:


# %%
@torch.no_grad()
def next_logits(model, text_prompt):
    """The model's logits [1, V] for the token after `text_prompt`."""
    tokens = torch.tensor([bpe.encode(text_prompt)], device=device)
    return model(tokens)[:, -1].float()


def entropy(probs):
    """Entropy in nats of each row of probs [B, V]."""
    return -(probs * probs.clamp_min(1e-30).log()).sum(-1)


TEMP_PROMPT = "\n\nPATIENCE, n.  A"
logits = next_logits(lm, TEMP_PROMPT)
temperatures = (0.5, 1.0, 2.0)
dist = {t: next_token_probs(logits, t)[0].cpu() for t in temperatures}
spread = {t: entropy(p[None]).item() for t, p in dist.items()}
for t in temperatures:
    print(
        f"τ = {t}: entropy {spread[t]:.2f} nats, most likely "
        f"{shown(int(dist[t].argmax()))!r} at {dist[t].max().item():.2f}"
    )
cold = next_token_probs(logits, 1e-3)
assert spread[0.5] < spread[1.0] < spread[2.0]
assert torch.equal(cold.argmax(-1), logits.argmax(-1)) and cold.max().item() > 0.99


# %% tags=["remove-cell"]
# The numbers the text quotes, for the book (this cell is hidden there).
for t in temperatures:
    glue(f"ch08_entropy_{t}", spread[t], display=False)

# %% mystnb={"figure": {"caption": "The trained model's next-token distribution after a headword and the first word of its definition, at three temperatures: dividing the logits by 0.5 sharpens it, by 2 flattens it.", "name": "fig-ch08-temperature"}, "image": {"alt": "Grouped bar chart: the twelve most likely next tokens on the horizontal axis, three bars each for temperatures 0.5, 1 and 2; the bars at 0.5 are tallest for the top tokens and fall to the height of those at 1 by the last ones; the bars at 2 are the lowest and the most even."}}
top = dist[1.0].argsort(descending=True)[:12]
fig, ax = plt.subplots(figsize=(COLUMN_INCHES, 3.6))
width = 0.27
for j, t in enumerate(temperatures):
    ax.bar(torch.arange(12) + (j - 1) * width, dist[t][top], width, label=f"τ = {t}")
ax.set_xticks(range(12), [shown(int(i)) for i in top], rotation=30)
ax.set_ylabel("probability")
ax.set_title(f"next token after {TEMP_PROMPT.strip()!r}")
ax.legend()
fig.tight_layout()
plt.show()

# %% [markdown]
# The entropy of the distribution, in nats, grows with the temperature:
# {glue:text}`ch08_entropy_0.5:.2f` at τ = 0.5, {glue:text}`ch08_entropy_1.0:.2f` at 1 and
# {glue:text}`ch08_entropy_2.0:.2f` at 2. In text, the same seed at the three temperatures:

# %%
for t in temperatures:
    out = generate(lm, prompt, 40, temperature=t, generator=device_generator(1))
    print(f"τ = {t}:", repr(bpe.decode(out[0, prompt.size(1) :])))

# %% [markdown]
# In this run, cold text repeats the safest words; hot text invents words and punctuation
# (the � at τ = 2 is a lone byte above 127, a token the training text never had). Greedy
# and beam search, the seed's choices, are the cold end: they are good at finding the one
# right answer of a translation and, for open-ended text, known to fall into repetition
# {cite:p}`holtzman2020curious`.
#
# **The pitfall: temperature after the softmax.** Two ways to write it, each wrong:


# %%
def probs_temperature_after_softmax(logits, temperature):
    """The pitfall: the probabilities are divided, not the logits."""
    return logits.softmax(-1) / temperature


def probs_softmax_twice(logits, temperature):
    """The pitfall, 'normalised' again by a second softmax."""
    return (logits.softmax(-1) / temperature).softmax(-1)


baseline = next_token_probs(logits, 1.0)
for t in (0.5, 2.0):
    after = probs_temperature_after_softmax(logits, t)
    # torch.multinomial draws from the renormalised weights
    renormalised = after / after.sum(-1, keepdim=True)
    twice = probs_softmax_twice(logits, t)
    change = (renormalised - baseline).abs().max().item()
    print(
        f"τ = {t}: divided after the softmax, the distribution moves by "
        f"{change:.1e}; "
        f"softmax twice: entropy {entropy(twice).item():.3f} nats "
        f"(uniform: {math.log(len(bpe)):.3f})"
    )
    assert change < 1e-6 and entropy(twice).item() > 0.98 * math.log(len(bpe))

# %% [markdown]
# Dividing the probabilities by τ multiplies every one of them by the same number; the
# sampler renormalises (`torch.multinomial` accepts weights that do not sum to one), so the
# distribution is exactly the τ = 1 one: the temperature knob does nothing, and nothing
# fails. The second softmax is worse: probabilities lie between 0 and 1, so their
# differences, divided by τ, are tiny logits, and the second softmax of them is almost
# uniform over all {glue:text}`ch08_vocab:d` tokens, a sample of random tokens at any
# temperature. Temperature goes on the logits.
#
# ## 8.6 Top-k and top-p
#
# Even at a sensible temperature the tail of many unlikely tokens holds real mass, and a
# long sample eventually draws from it. Two filters cut the tail before the softmax
# renormalises what is left. **Top-k** keeps the k most likely tokens, a fixed number
# whatever the distribution {cite:p}`fan2018hierarchical`. **Top-p** (nucleus sampling)
# keeps the smallest set of most likely tokens whose probability adds up to at least p
# {cite:p}`holtzman2020curious`: a few tokens where the model is sure, many where it is
# not.

# %%
K, P = 10, 0.9
probs_sorted = baseline[0].sort(descending=True).values.cpu()
kept_k = top_k_filter(logits, K).isfinite().sum().item()
kept_p = top_p_filter(logits, P).isfinite().sum().item()
mass_p = probs_sorted[:kept_p].sum().item()
print(
    f"top-k keeps {kept_k} tokens, {probs_sorted[:kept_k].sum().item():.3f} of the mass"
)
print(
    f"top-p keeps {kept_p} tokens, {mass_p:.3f} of the mass "
    f"(without its last one: {probs_sorted[: kept_p - 1].sum().item():.4f})"
)
assert kept_k == K and mass_p >= P > probs_sorted[: kept_p - 1].sum().item()


# %% tags=["remove-cell"]
# The numbers the text quotes, for the book (this cell is hidden there).
glue("ch08_kept_p", kept_p, display=False)
glue("ch08_vocab", len(bpe), display=False)

# %% mystnb={"figure": {"caption": "The same distribution sorted: top-k cuts at a fixed rank, top-p where the running sum first reaches p, here further down the tail.", "name": "fig-ch08-top-k-top-p"}, "image": {"alt": "Bar chart of the probabilities of the most likely tokens in decreasing order (at least 60, and past where top-p cuts), with a rising running-sum line on a second axis, a horizontal dotted line at p = 0.9, and two vertical dashed lines marking where top-k and top-p cut."}}
shown_ranks = max(60, kept_p + 5)
fig, ax = plt.subplots(figsize=(COLUMN_INCHES, 4.4), layout="constrained")
ax.bar(range(1, shown_ranks + 1), probs_sorted[:shown_ranks], color="tab:blue")
ax.set_xlabel("rank of the token")
ax.set_ylabel("probability")
ax2 = ax.twinx()
ax2.plot(
    range(1, shown_ranks + 1),
    probs_sorted[:shown_ranks].cumsum(0),
    "k-",
    label="running sum",
)
ax2.axhline(P, color="k", ls=":", label=f"p = {P}")
ax2.set_ylim(0, 1.02)
ax2.set_ylabel("running sum")
ax.axvline(K + 0.5, color="tab:orange", ls="--", label=f"top-k, k = {K}")
ax.axvline(kept_p + 0.5, color="tab:green", ls="--", label=f"top-p keeps {kept_p}")
fig.legend(loc="outside lower center", ncols=2)
plt.show()

# %% [markdown]
# Here top-p kept {glue:text}`ch08_kept_p:d` tokens. The rule has one subtle word:
# *reaches*. The token whose probability carries the running sum across p is part of the
# set. Written as "keep the tokens whose running sum is below p", the filter drops it:


# %%
def top_p_drop_crossing(logits, p):
    """The pitfall: keep the tokens whose running sum, their own mass included, is
    below p. The token that crosses p is dropped; a top token above p leaves none."""
    probs, order = logits.softmax(-1).sort(dim=-1, descending=True)
    keep_sorted = probs.cumsum(-1) < p
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    return logits.masked_fill(~keep, float("-inf"))


with torch.no_grad():  # every position of 8 held-out windows: 512 distributions
    windows = val_ids[: 8 * CONTEXT].view(8, CONTEXT).to(device)
    all_logits = lm(windows).flatten(0, 1).float()
all_probs = all_logits.softmax(-1)


def kept_mass(filtered):
    return (all_probs * filtered.isfinite()).sum(-1)


right_mass = kept_mass(top_p_filter(all_logits, P))
wrong_mass = kept_mass(top_p_drop_crossing(all_logits, P))
right_count = top_p_filter(all_logits, P).isfinite().sum(-1).float()
empty = {
    p: (kept_mass(top_p_drop_crossing(all_logits, p)) == 0).float().mean().item()
    for p in (P, 0.5)
}
print(
    f"right: kept mass >= p at {(right_mass >= P).float().mean().item():.0%} of "
    f"positions; tokens kept: min {right_count.min():.0f}, median "
    f"{right_count.median():.0f}, max {right_count.max():.0f}"
)
print(
    f"dropping the crossing token: kept mass < p at "
    f"{(wrong_mass < P).float().mean().item():.0%}, mean {wrong_mass.mean():.3f}"
)
for p, share in empty.items():
    print(
        f"dropping the crossing token, p = {p}: nothing kept at {share:.1%} of "
        "positions"
    )
none_kept = (kept_mass(top_p_drop_crossing(all_logits, P)) == 0).nonzero().flatten()
print(
    f"where nothing is kept, p = {P}: (the token read, the most likely next one)",
    sorted(
        {
            (shown(int(windows.flatten()[i])), shown(int(all_probs[i].argmax())))
            for i in none_kept
        }
    ),
)
sure = int((all_probs.max(-1).values > 0.5).nonzero()[0])
try:
    nothing = top_p_drop_crossing(all_logits[sure : sure + 1], 0.5)
    torch.multinomial(nothing.softmax(-1), 1)
except RuntimeError as err:
    print(f"sampling from the empty set: RuntimeError: {err}")
assert (right_mass >= P - 1e-6).all() and (wrong_mass < P).all() and empty[0.5] > 0.01


# %% tags=["remove-cell"]
# The numbers the text quotes, for the book (this cell is hidden there).
glue("ch08_top_p_min", right_count.min().item(), display=False)
glue("ch08_top_p_median", right_count.median().item(), display=False)
glue("ch08_top_p_max", right_count.max().item(), display=False)
glue("ch08_top_p_empty", 100 * empty[P], display=False)
glue("ch08_top_p_empty_half", 100 * empty[0.5], display=False)

# %% [markdown]
# Over the held-out positions the right filter kept from {glue:text}`ch08_top_p_min:.0f` to
# {glue:text}`ch08_top_p_max:.0f` tokens (median {glue:text}`ch08_top_p_median:.0f`):
# the adaptivity that top-k lacks. The wrong filter keeps less than p at every position,
# and where the model is most sure (the cell prints those positions) it keeps nothing at all:
# the most likely token alone is above p, its own running sum is not below p, and it goes
# too. That happened at {glue:text}`ch08_top_p_empty:.1f` % of the positions at p = 0.9 and
# at {glue:text}`ch08_top_p_empty_half:.1f` % at p = 0.5. Sampling from an empty set is a
# softmax of nothing but −∞, all NaN, which `torch.multinomial` refuses, as printed. Keep a
# token when the mass *above* it is still below p (`cumsum - probs < p`, as `top_p_filter`
# does): the first token has nothing above it, so the set is never empty.
#
# ## 8.7 The KV cache
#
# The seed's loop runs the whole sequence through the model for every new token. In a causal
# model that repeats work: position i sees only tokens 0..i, so the keys and values of the
# old positions are the same at every step. A **KV cache** keeps them, per layer, and each
# step runs only the new token: its query attends to the cached keys and values plus its
# own. `KVCache` holds one `LayerKV` per layer, and `model(tokens, cache=cache)` reads the
# tokens as the ones after the `cache.length` already cached. The model refuses a cache
# unless it was built with `pad_id=None`: the cache keeps no padding mask for the past
# tokens. Step by step, each step checked against running the whole sequence again:

# %%
cache = KVCache()
tokens = prompt.clone()
with torch.no_grad():
    step_logits = lm(tokens, cache=cache)[:, -1]
    print(
        f"prompt {tuple(tokens.shape)}: cache length {cache.length}, "
        f"keys and values of layer 0 {tuple(cache.layer(0).keys.shape)} "
        "[B, H, T, Dh]"
    )
    for step in range(1, 4):
        new = step_logits.argmax(-1, keepdim=True)  # [B, 1]
        tokens = torch.cat([tokens, new], dim=1)
        step_logits = lm(new, cache=cache)[:, -1]
        whole = lm(tokens)[:, -1]
        gap = (step_logits - whole).abs().max().item()
        print(
            f"step {step}: input {tuple(new.shape)}, cache length {cache.length}, "
            f"keys {tuple(cache.layer(0).keys.shape)}; |cached - whole| <= {gap:.1e}"
        )
        assert cache.length == tokens.size(1) and gap < 1e-4

# %% [markdown]
# The input of a step is one token, `[1, 1]`; the keys grow by one position per step. The
# logits agree with the whole sequence's to float rounding. Over a whole generation, the
# same tokens come out, greedy or sampled with the same seed, for a batch of four prompts:

# %%
prompts = val_ids[: 4 * 8].view(4, 8).to(device)  # four 8-token prompts
N_NEW = 80
same = {}
for label, kwargs in (
    ("greedy", dict(temperature=0)),
    ("sampled, τ = 1, top-p = 0.9", dict(temperature=1.0, top_p=0.9)),
):
    cached = generate(lm, prompts, N_NEW, generator=device_generator(2), **kwargs)
    plain = generate(
        lm, prompts, N_NEW, generator=device_generator(2), use_cache=False, **kwargs
    )
    same[label] = torch.equal(cached, plain)
    print(f"{label}: {N_NEW} new tokens x 4 prompts, cached == uncached: {same[label]}")
assert all(same.values())

# %% [markdown]
# What it saves. Without a cache, step t runs t tokens through the model; with one, it
# runs one. We time every step of a greedy generation up to the model's 256 positions,
# both ways (the fastest of two runs per step), and plot the tokens per second over the
# last 16 steps as the sequence grows. (Positions past 64 were never trained, so the text
# there is poor; the time does not depend on it.)


# %%
@torch.no_grad()
def timed_greedy(model, start_tokens, n, use_cache):
    """Greedy decoding of n tokens -> (tokens [B, S + n], seconds of each step)."""
    tokens, step_input = start_tokens, start_tokens
    cache = KVCache() if use_cache else None
    seconds = []
    for _ in range(n):
        synchronize()
        begin = time.perf_counter()
        out = model(step_input, cache=cache) if use_cache else model(tokens)
        new = out[:, -1].argmax(-1, keepdim=True)
        synchronize()
        seconds.append(time.perf_counter() - begin)
        tokens = torch.cat([tokens, new], dim=1)
        step_input = new if use_cache else tokens
    return tokens, seconds


n_steps = lm.max_len - prompt.size(1)
step_seconds = {}
for use_cache in (True, False):
    runs = [timed_greedy(lm, prompt, n_steps, use_cache) for _ in range(2)]
    step_seconds[use_cache] = [min(s) for s in zip(*(r[1] for r in runs))]
    final_tokens = runs[0][0]
assert torch.equal(final_tokens, generate(lm, prompt, n_steps, temperature=0))
W = 16
lengths = [prompt.size(1) + j + W for j in range(0, n_steps - W + 1, W)]
rate = {
    c: [W / sum(s[j : j + W]) for j in range(0, n_steps - W + 1, W)]
    for c, s in step_seconds.items()
}
# Three windows at each end, so that one noisy window cannot decide the ratio.
speedup_first, speedup_last = (
    statistics.mean(rate[True][sl]) / statistics.mean(rate[False][sl])
    for sl in (slice(0, 3), slice(-3, None))
)
# What each way runs through the model: every step's whole sequence, or one token.
processed = {
    False: sum(range(prompt.size(1), lm.max_len)),
    True: prompt.size(1) + n_steps - 1,
}
print(
    f"{n_steps} steps; tokens run through the model: uncached {processed[False]:,}, "
    f"cached {processed[True]:,}"
)
print(
    f"tokens/s at length {lengths[0]}: cached {rate[True][0]:,.0f}, uncached "
    f"{rate[False][0]:,.0f}"
)
print(
    f"tokens/s at length {lengths[-1]}: cached {rate[True][-1]:,.0f}, uncached "
    f"{rate[False][-1]:,.0f}"
)
print(
    f"cached / uncached, first three windows {speedup_first:.1f}x, last three "
    f"{speedup_last:.1f}x"
)
if device.type == "cpu":  # compute-bound here; a GPU runs this tiny model launch-bound
    assert speedup_last > 1.5 and rate[False][0] > 2 * rate[False][-1]


# %% tags=["remove-cell"]
# The numbers the text quotes, for the book (this cell is hidden there).
glue("ch08_speedup_first", speedup_first, display=False)
glue("ch08_speedup_last", speedup_last, display=False)
glue("ch08_rate_cached", rate[True][-1], display=False)
glue("ch08_rate_cached_first", rate[True][0], display=False)
glue("ch08_rate_plain", rate[False][-1], display=False)
glue("ch08_len_first", lengths[0], display=False)
glue("ch08_len_last", lengths[-1], display=False)
glue("ch08_len_first3", lengths[2], display=False)
glue("ch08_processed_plain", processed[False], display=False)
glue("ch08_processed_cached", processed[True], display=False)
glue("ch08_device", device.type, display=False)

# %% mystnb={"figure": {"caption": "Greedy generation speed as the sequence grows. Without a cache every step runs the whole sequence again, and the speed falls; with one, each step runs one token.", "name": "fig-ch08-kv-speed"}, "image": {"alt": "Line chart of tokens per second, on a log scale, against sequence length up to 256: the cached line stays high and changes far less, the uncached line falls steadily, and the gap widens to the right."}}
fig, ax = plt.subplots(figsize=(COLUMN_INCHES, 3.6))
ax.plot(lengths, rate[True], "o-", ms=3, label="with a KV cache")
ax.plot(lengths, rate[False], "s-", ms=3, label="without (the whole sequence again)")
ax.set_yscale("log")
ax.set_xlabel("sequence length")
ax.set_ylabel("tokens per second")
ax.set_title(f"greedy decoding, batch of 1, on {device.type}")
ax.grid(True, which="both", alpha=0.3)
ax.legend()
fig.tight_layout()
plt.show()

# %% [markdown]
# Up to 256 positions, decoding without the cache ran {glue:text}`ch08_processed_plain:,`
# tokens through the model and with it {glue:text}`ch08_processed_cached:,`. The time, on
# this run ({glue:text}`ch08_device:s`): over the first three windows of 16 steps (up to
# length {glue:text}`ch08_len_first3:d`) the cached steps ran at
# {glue:text}`ch08_speedup_first:.1f` times the uncached speed, over the last three (up to
# {glue:text}`ch08_len_last:d`) at {glue:text}`ch08_speedup_last:.1f` times; in the last
# window, {glue:text}`ch08_rate_cached:,.0f` against {glue:text}`ch08_rate_plain:,.0f`
# tokens per second. The uncached step costs more with every token; the cached one changes
# much less (from {glue:text}`ch08_rate_cached_first:,.0f` tokens per second in the first
# window to {glue:text}`ch08_rate_cached:,.0f` in the last, through the noise of a shared
# machine), though it too does more work as the sequence grows: its attention reads all the
# cached keys, and `torch.cat` copies the whole cache at every step (Hugging Face's default
# cache does the same; static and paged caches, such as its `StaticCache` and vLLM's,
# allocate once). At the start the two are much closer:
# a step of a short sequence is mostly fixed overhead, Python and many small operations,
# and the cache adds its own bookkeeping. On a GPU, where a model this small is bound by
# the launch of its kernels rather than by arithmetic, the gap can be much smaller (not
# measured in this run, which is on {glue:text}`ch08_device:s`), so the cell asserts the
# speed-up on a CPU only; the saving grows with the model, the batch and the length.
#
# What it costs is memory: two tensors, keys and values, of `[B, H, T, Dh]` per layer, that
# is $2 \cdot L \cdot B \cdot T \cdot D$ numbers. The formula against `cache.nbytes()`, for
# the 256 tokens above, and the formula for two larger models:

# %%
cache = KVCache()
with torch.no_grad():
    lm(final_tokens, cache=cache)


def kv_cache_bytes(n_layers, batch, length, d_model, bytes_per_number):
    """Keys and values of every layer: 2 · L · B · T · D numbers."""
    return 2 * n_layers * batch * length * d_model * bytes_per_number


B_, T_ = final_tokens.shape
formula = kv_cache_bytes(
    len(lm.blocks.layers), B_, T_, lm.d_model, cache.layer(0).keys.element_size()
)
print(
    f"this model, {T_} tokens: formula {formula:,} bytes, cache.nbytes() "
    f"{cache.nbytes():,} bytes"
)
assert cache.nbytes() == formula
medium = kv_cache_bytes(12, 1, 1024, 768, 4) / 2**20
large = kv_cache_bytes(32, 1, 4096, 4096, 2) / 2**30
print(f"12 layers, D = 768, 1024 tokens, float32: {medium:.0f} MiB per sequence")
print(f"32 layers, D = 4096, 4096 tokens, float16: {large:.0f} GiB per sequence")
weights_large = 12 * 32 * 4096**2 * 2 / 2**30  # about 12·L·D² weights, in float16
print(f"its weights, about 12·L·D² numbers in float16: {weights_large:.0f} GiB")


# %% tags=["remove-cell"]
# The numbers the text quotes, for the book (this cell is hidden there).
glue("ch08_cache_kib", cache.nbytes() / 2**10, display=False)
glue("ch08_cache_medium_mib", medium, display=False)
glue("ch08_cache_large_gib", large, display=False)
glue("ch08_weights_large_gib", weights_large, display=False)
glue("ch08_batch_equal", weights_large / large, display=False)

# %% [markdown]
# Here the cache is {glue:text}`ch08_cache_kib:.0f` KiB, nothing. It grows linearly with
# the layers, the width, the length and the batch: a 12-layer model of width 768 needs
# {glue:text}`ch08_cache_medium_mib:.0f` MiB for one sequence of 1024 tokens, and a
# 32-layer model of width 4096 needs {glue:text}`ch08_cache_large_gib:.0f` GiB for one of
# 4096 tokens in float16. That model's weights (about $12 \cdot L \cdot D^2$ numbers) take
# {glue:text}`ch08_weights_large_gib:.0f` GiB, so a batch of
# {glue:text}`ch08_batch_equal:.0f` such sequences holds as much cache as weights: at that
# size the cache decides how many sequences fit on a GPU at once. That count is for a key
# and a value per head, as here; with grouped-query attention several query heads share
# one key and value head, and the cache shrinks by that factor {cite:p}`ainslie2023gqa`.
#
# ## 8.8 Decoding with a cache: three pitfalls
#
# `model(tokens, cache=cache)` hides two details that a hand-written step must get right.
# Here is the step built from the model's parts, with the two details as arguments: where
# the new tokens' positions start, and the mask.


# %%
def step_from_parts(model, tokens, cache, *, start, mask):
    """tokens [B, S] after the cache's tokens -> logits [B, S, V]; the cache grows by
    S. `start`: the position of the first new token; `mask`: [1, 1, S, T + S]."""
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=start))
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


def lm_step(model, tokens, cache):
    """Right: the new tokens come after the cache.length cached ones."""
    past = cache.length
    mask = causal_mask(tokens.size(1), tokens.device, past=past)  # [1, 1, S, past + S]
    return step_from_parts(model, tokens, cache, start=past, mask=mask)


def lm_step_positions_from_zero(model, tokens, cache):
    """The pitfall: every step's tokens get positions 0, 1, ... again."""
    mask = causal_mask(tokens.size(1), tokens.device, past=cache.length)
    return step_from_parts(model, tokens, cache, start=0, mask=mask)


def lm_step_full_length_mask(model, tokens, cache):
    """The pitfall: the causal mask of the whole sequence, [1, 1, T + S, T + S]."""
    mask = causal_mask(cache.length + tokens.size(1), tokens.device)
    return step_from_parts(model, tokens, cache, start=cache.length, mask=mask)


def lm_step_first_mask_rows(model, tokens, cache):
    """The pitfall, 'fixed' by keeping the first S rows of the whole mask."""
    past, s = cache.length, tokens.size(1)
    mask = causal_mask(past + s, tokens.device)[:, :, :s]
    return step_from_parts(model, tokens, cache, start=past, mask=mask)


@torch.no_grad()
def greedy_with(step, model, start_tokens, n):
    """Greedy decoding with a fresh cache: the prompt once, then one token per step."""
    cache = KVCache()
    logits, tokens = step(model, start_tokens, cache), start_tokens
    for i in range(n):
        new = logits[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, new], dim=1)
        if i + 1 < n:
            logits = step(model, new, cache)
    return tokens


N_CHECK = 60
reference = generate(lm, prompt, N_CHECK, temperature=0, use_cache=False)
S0 = prompt.size(1)


def report(label, out):
    """Where `out` [1, S0 + N] first departs from the uncached greedy tokens."""
    differs = (out != reference)[0, S0:].nonzero()
    first = int(differs[0]) + 1 if len(differs) else None  # counting from 1
    where = (
        "identical"
        if first is None
        else f"new token number {first} (from 1) differs first"
    )
    print(f"{label}: {where}\n    {bpe.decode(out[0, S0:])!r}")
    return first


assert report("right lm_step", greedy_with(lm_step, lm, prompt, N_CHECK)) is None
first_bad_pos = report(
    "positions from 0", greedy_with(lm_step_positions_from_zero, lm, prompt, N_CHECK)
)
try:
    greedy_with(lm_step_full_length_mask, lm, prompt, N_CHECK)
except ValueError as err:
    print(f"mask for the full length: ValueError: {err}")
first_bad_rows = report(
    "first rows of the full mask",
    greedy_with(lm_step_first_mask_rows, lm, prompt, N_CHECK),
)


@torch.no_grad()
def first_step_gap(step):
    """The largest logit error of `step` on its first one-token step after the prompt
    (the logits that choose the second new token)."""
    cache = KVCache()
    step(lm, prompt, cache)
    got = step(lm, reference[:, S0 : S0 + 1], cache)[:, -1]
    return (got - lm(reference[:, : S0 + 1])[:, -1]).abs().max().item()


gaps = {
    f.__name__: first_step_gap(f)
    for f in (lm_step, lm_step_positions_from_zero, lm_step_first_mask_rows)
}
print(
    "largest logit error on the first one-token step:",
    ", ".join(f"{name} {gap:.2e}" for name, gap in gaps.items()),
)
assert gaps["lm_step"] < 1e-4
assert min(gaps["lm_step_positions_from_zero"], gaps["lm_step_first_mask_rows"]) > 0.01
# Where one greedy path departs depends on the run; the logit gaps above do not.
assert first_bad_rows is not None and gaps["lm_step_positions_from_zero"] > 0.01

# PyTorch's own is_causal=True aligns the triangle the same way, top left, when the
# query is shorter than the keys: one new query then sees the first key alone.
q1, k5, v5 = (
    torch.randn(1, 1, n, 8, generator=torch.Generator().manual_seed(n))
    for n in (1, 5, 5)
)
top_left = F.scaled_dot_product_attention(q1, k5, v5, is_causal=True)
assert torch.allclose(top_left, v5[:, :, :1])
print(
    "F.scaled_dot_product_attention(q [1 query], k, v [5 keys], is_causal=True) "
    "== the first value alone"
)


# %% tags=["remove-cell"]
# The numbers the text quotes, for the book (this cell is hidden there).
# The departure of one greedy path may come late, or past the tokens checked.
glue(
    "ch08_pos_departure",
    f"at new token number {first_bad_pos}, counting from 1"
    if first_bad_pos is not None
    else f"nowhere in the {N_CHECK} new tokens checked",
    display=False,
)
glue("ch08_first_bad_rows", first_bad_rows, display=False)
glue("ch08_gap_pos", gaps["lm_step_positions_from_zero"], display=False)
glue("ch08_gap_rows", gaps["lm_step_first_mask_rows"], display=False)

# %% [markdown]
# **Positions not offset.** With every new token at position 0, the model reads the
# sequence as if each token were the first one: on the first step that runs one token alone
# (the logits that choose the second new token) its logits are off by up to
# {glue:text}`ch08_gap_pos:.2f`, and the greedy text departs from the right one
# {glue:text}`ch08_pos_departure:s`. Nothing fails, and in a model that uses its
# positions little (this one is small and trained briefly) the departure can come late, so
# compare with uncached decoding token for token, as above, and not by reading the text.
#
# **The causal mask built for the full length.** The query is one token; the mask of the
# whole sequence has a row for every position. The course's attention refuses the shape,
# with the error above. The tempting fix, keeping the mask's first rows, is silent and
# wrong: the new token's row is then row 0 of the triangle, which sees the first key alone;
# its logits are off by up to {glue:text}`ch08_gap_rows:.2f` and the text departs at new
# token number {glue:text}`ch08_first_bad_rows:d`: the first one still comes from the
# prompt, whose mask is square and right. The new queries are the *last* S rows,
# `causal_mask(S, past=T)`; PyTorch's `is_causal=True` makes the same top-left choice when
# the query is shorter than the keys (its documentation says so {cite:p}`pytorchdocs`, and
# the last assert above shows it), so `is_causal=True` is wrong here too; PyTorch's mask for
# this case is `torch.nn.attention.bias.causal_lower_right(S, T + S)`
# {cite:p}`pytorchdocs`.
#
# **A cache carried over between prompts.** A cache belongs to one batch of prompts. A
# function whose default argument is a cache gets *one* cache, made when the `def` runs,
# shared by every call:


# %%
@torch.no_grad()
def generate_greedy_carried(model, start_tokens, n, cache=KVCache()):
    """The pitfall: the default cache is made once and kept from call to call."""
    logits, tokens = model(start_tokens, cache=cache), start_tokens
    for i in range(n):
        new = logits[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, new], dim=1)
        if i + 1 < n:
            logits = model(new, cache=cache)
    return tokens


war = torch.tensor([bpe.encode("\n\nWAR, n.  ")], device=device)
fresh = generate(lm, war, 30, temperature=0)
generate_greedy_carried(lm, prompt, 30)  # a first prompt: right, the cache was empty
carried = generate_greedy_carried(lm, war, 30)
shared = inspect.signature(generate_greedy_carried).parameters["cache"].default
held = shared.length
print("fresh cache:  ", repr(bpe.decode(fresh[0, war.size(1) :])))
print("carried over: ", repr(bpe.decode(carried[0, war.size(1) :])))
print(f"the default cache now holds {held} tokens")
calls = 2
try:
    while calls < 20:
        generate_greedy_carried(lm, war, 30)
        calls += 1
except ValueError as err:
    print(f"call {calls + 1}: ValueError: {err}")
assert not torch.equal(fresh, carried) and held > prompt.size(1) + 30 and calls < 20


# %% tags=["remove-cell"]
# The numbers the text quotes, for the book (this cell is hidden there).
glue("ch08_carried_calls", calls + 1, display=False)

# %% [markdown]
# The second prompt is read as a continuation of the first one's text: its tokens attend
# to the previous entry and sit at positions after it, and the continuation changes. The
# cache keeps growing until the positions run past the model's 256, and call
# {glue:text}`ch08_carried_calls:d` fails with an error about a length no single prompt
# had. Make a fresh `KVCache()` inside the function for each call (or `cache.reset()`),
# never in a default argument.
#
# ## 8.9 Seeded sampling
#
# Sampling draws from a random generator. Without one of its own, `torch.multinomial` uses
# the global one, whose state every earlier draw has moved: the same cell run twice gives
# two texts. With a `torch.Generator` seeded in the cell, the cell repeats:

# %%
unseeded = [generate(lm, prompt, 30) for _ in range(2)]
seeded = [generate(lm, prompt, 30, generator=device_generator(7)) for _ in range(2)]
for label, pair in (("no generator", unseeded), ("generator seeded with 7", seeded)):
    print(f"{label}:")
    for out in pair:
        print("   ", repr(bpe.decode(out[0, prompt.size(1) :])))
assert not torch.equal(*unseeded) and torch.equal(*seeded)

# %% [markdown]
# `seed_everything(0)` at the top of this notebook makes the whole notebook repeatable on
# a CPU when it runs from the top. On a GPU some kernels, several backward passes among
# them, are not deterministic: expect small differences, or call
# `torch.use_deterministic_algorithms(True)`, which is slower (and on CUDA needs the
# environment variable `CUBLAS_WORKSPACE_CONFIG=:4096:8`) {cite:p}`pytorchdocs`. A
# generator makes *one call* repeatable, wherever it runs, and two samplers with their own
# generators do not disturb each other. The generator must
# live on the device of the probabilities (`torch.Generator(device=device)`): a CPU
# generator with probabilities on a GPU is an error {cite:p}`pytorchdocs`. And the same
# seed gives different numbers on a CPU and on a GPU, since they use different generators:
# reproducible means on the same hardware and software {cite:p}`pytorchdocs`. Under the
# same seed the cached and uncached samplers of §8.7 agreed token for token, because both
# draw from the same distributions in the same order.
#
# ## 8.10 Recap
#
# - The corpus ships with the package (`tformer_ref/corpora/`, public domain, its source in
#   the README). Tokenizers: characters (one id each) or byte-level BPE (any text; here
#   {glue:text}`ch08_chars_per_token:.2f` characters per token). Build the model from the
#   tokenizer (`vocab=len(tokenizer)`, `check_vocab`), give special tokens ids of their own
#   (a `pad_id` that is a real token hides that token from every query), and decode bytes
#   joined, or with an incremental decoder.
# - One stream, one rule: the target of every position is the next token in the stream
#   (`lm_windows`). The loss here fell from {glue:text}`ch08_loss_before:.2f` to
#   {glue:text}`ch08_loss_after:.2f` in {glue:text}`ch08_steps:d` steps; without the shift
#   it falls to almost 0 and the model only copies.
# - Give AdamW two groups: decay on the weight matrices (here those of `nn.Linear`);
#   embeddings, LayerNorms and biases go in a group with `weight_decay=0` (decayed, rare
#   tokens' rows shrink with no data to push back).
# - Temperature divides the logits before the softmax (after it, it does nothing or makes
#   everything uniform). Top-k keeps k tokens; top-p the smallest set that reaches p, the
#   crossing token included, never an empty one.
# - A KV cache keeps each layer's keys and values; each step runs the new token alone,
#   with positions offset by the cache length and the mask's last rows
#   (`causal_mask(S, past=T)`). It gave the same tokens as uncached decoding and, over
#   the last steps up to {glue:text}`ch08_len_last:d` tokens,
#   {glue:text}`ch08_speedup_last:.1f` times the speed on this run; it costs
#   $2 \cdot L \cdot B \cdot T \cdot D$ numbers. One fresh cache per batch of prompts.
# - Seed sampling with a `torch.Generator` on the device, per call.
#
# **Now practise:** open [the chapter 8 exercise](exercise.ipynb) in this folder. You will
# write the next-token distribution with temperature and top-p, a decoding step with a KV
# cache, and greedy generation on top of it; its check cells tell you which of this
# chapter's pitfalls you hit and send you back to the right section.

# %% [markdown]
# ## Check your understanding
#
# **1.** A colleague builds a character tokenizer without special tokens and a
# `DecoderOnlyLM` with its default `pad_id=0`, trains it on the dictionary, and finds that
# it never learns where entries start. Nothing fails. What happened, and what are the two
# fixes?
#
# :::{dropdown} Answer
# Id 0 is the tokenizer's first character, the newline, and the model's padding mask hides
# every token with id 0 from every query: the model cannot see a single line break. In the
# lesson, changing the newline's embedding moved the last position's logits by exactly 0.
# Either reserve the special ids first (`CharTokenizer(text, specials=("<pad>",))` puts
# `<pad>` at 0 and the newline at 1), or, on one stream of text with no padding, build the
# model with `pad_id=None`. Read §8.2 'Characters and byte pairs'.
# :::
#
# **2.** A training loss on real text falls to nearly 0 within 40 steps. Good news?
#
# :::{dropdown} Answer
# No: it is a symptom, and the first suspect is training without the shift, the inputs
# used as their own targets (leaked or memorised data give the same curve). A causal model sees the token at position t, so it only has to copy it; in the
# lesson that model scored worse than an untrained one on the real next-token task and
# continued the lesson's prompt by repeating its last token. The target of each position
# is the next token in the stream, which `lm_windows` returns.
# Read §8.3 'Next-token loss on one stream'.
# :::
#
# **3.** Why do the embeddings, LayerNorms and biases go in a group with `weight_decay=0`?
#
# :::{dropdown} Answer
# Decay pulls every parameter it touches towards 0 at every step. A LayerNorm gain's neutral
# value is 1; biases and shifts are too few numbers to overfit; an embedding row gets a
# gradient only when its token occurs but would decay at every step. In the lesson, with
# everything decayed, the rows of tokens never seen shrank by exactly (1 − lr·wd)^steps, and
# every other row lost about the same share, data or not: for a rare token, over a long run,
# decay rather than data decides its row. The LayerNorm gains ended lower with decay than
# without. Read §8.4 'Weight decay, and what not to decay'.
# :::
#
# **4.** A sampler computes `probs = logits.softmax(-1) / temperature` and draws with
# `torch.multinomial(probs, 1)`. What does its temperature do? And what goes wrong with
# `(logits.softmax(-1) / temperature).softmax(-1)`?
#
# :::{dropdown} Answer
# Nothing: every probability is divided by the same number and `torch.multinomial`
# renormalises, so the distribution is the τ = 1 one exactly (the lesson measured no change
# at all). The second softmax reads probabilities, numbers between 0 and 1, as logits:
# their differences are tiny and the result is almost uniform over the whole vocabulary, at
# any temperature. Divide the logits: `softmax(logits / τ)`. Read §8.5 'Temperature'.
# :::
#
# **5.** A top-p filter keeps the tokens with `probs.cumsum(-1) < p` (probabilities sorted
# in decreasing order). What happens at a position where the most likely token has
# probability 0.95 and p = 0.9?
#
# :::{dropdown} Answer
# Its own running sum, 0.95, is not below 0.9, so it is dropped, and so is everything after
# it: nothing is kept, the softmax of all −∞ is NaN and `torch.multinomial` raises. Elsewhere
# the filter drops the token that carries the sum across p, so it always keeps less than p.
# Keep a token when the mass *above* it is below p, `probs.cumsum(-1) - probs < p`: the top
# token is always kept. Read §8.6 'Top-k and top-p'.
# :::
#
# **6.** Decoding with a KV cache, a colleague calls `model.pos(x)` for the one new token and
# builds `causal_mask(cache.length + 1)`. What goes wrong with each, and what is right?
#
# :::{dropdown} Answer
# `model.pos(x)` puts the new token at position 0 at every step: the text departs from
# uncached decoding without any error; the right call is `model.pos(x, start=cache.length)`.
# The full-length mask has a row per position, but there is one query: the course's
# attention rejects its shape, and keeping its first row instead lets the new token see only
# the first key. The new queries need the mask's last rows, `causal_mask(1,
# past=cache.length)`. Check a cached decoder against uncached decoding token for token.
# Read §8.8 'Decoding with a cache: three pitfalls' and §8.7 'The KV cache'.
# :::
