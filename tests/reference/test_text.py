"""The corpus, the tokenizers, next-token windows, the loss and the weight-decay groups
(chapter 8)."""

import collections

import pytest
import torch
import torch.nn as nn

from tformer_ref.lm_training import next_token_loss, weight_decay_groups
from tformer_ref.model import DecoderOnlyLM
from tformer_ref.text import (
    _PIECES,
    BytePairTokenizer,
    CharTokenizer,
    _merge,
    check_vocab,
    lm_windows,
    load_corpus,
    train_val_split,
)


@pytest.fixture(scope="module")
def text():
    return load_corpus()


def test_the_corpus_ships_with_the_package_and_its_licence(text):
    from importlib import resources

    readme = resources.files("tformer_ref").joinpath("corpora", "README.md").read_text()
    readme = " ".join(readme.split())
    assert "in the public domain" in readme and "dict-devil" in readme
    assert "A Public Domain Text, Copyright Expired" in text
    assert text.count("\n\n") > 1000 and "ZOOLOGY, n." in text


def test_char_tokenizer_round_trips_and_puts_specials_first(text):
    tok = CharTokenizer(text, specials=("<pad>", "<eos>"))
    assert tok.itos[:2] == ["<pad>", "<eos>"] and len(tok) == 2 + len(set(text))
    sample = text[5000:6000]
    assert tok.decode(tok.encode(sample)) == sample
    assert 0 not in tok.encode(sample)  # no real character has the pad id
    with pytest.raises(KeyError, match="'é' is not in the tokenizer's vocabulary"):
        tok.encode("café")


def naive_bpe_merges(text, vocab_size):
    """The textbook loop: recount every pair after every merge."""
    words = collections.Counter(_PIECES.findall(text))
    seqs = {w: list(w.encode()) for w in words}
    merges = []
    for new_id in range(256, vocab_size):
        pairs = collections.Counter()
        for w, seq in seqs.items():
            for pair in zip(seq, seq[1:]):
                pairs[pair] += words[w]
        if not pairs:
            break
        best = max(pairs, key=lambda pair: (pairs[pair], -pair[0], -pair[1]))
        merges.append(best)
        seqs = {w: _merge(seq, best, new_id) for w, seq in seqs.items()}
    return merges


def test_bpe_training_equals_the_textbook_loop(text):
    piece = text[20000:50000]
    assert BytePairTokenizer.train(piece, 330).merges == naive_bpe_merges(piece, 330)


def test_bpe_round_trips_any_text_and_compresses(text):
    tok = BytePairTokenizer.train(text[:100000], 400)
    assert len(tok) == 400
    sample = text[200000:203000]
    ids = tok.encode(sample)
    assert tok.decode(ids) == sample and len(ids) < 0.7 * len(sample)
    for word in ("café", "naïve 😀", "\x00\xff"):
        assert tok.decode(tok.encode(word)) == word


def test_decoding_token_by_token_breaks_a_multibyte_character():
    tok = BytePairTokenizer([])  # bytes only: 'é' is two tokens
    ids = tok.encode("café")
    assert len(ids) == 5
    assert "".join(tok.decode([i]) for i in ids) != "café"
    assert tok.decode(ids) == "café"


def test_bad_vocab_sizes_raise_clear_errors():
    with pytest.raises(ValueError, match="at least 256"):
        BytePairTokenizer.train("abc", 100)
    with pytest.raises(
        ValueError, match="tokenizer has 4 ids but the model's embedding"
    ):
        check_vocab(3, CharTokenizer("abc", specials=("<pad>",)))


def test_windows_target_the_next_token_of_the_stream():
    ids = torch.arange(1000) * 3
    x, y = lm_windows(ids, 16, 8, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (8, 16)
    assert torch.equal(y[:, :-1], x[:, 1:]) and torch.equal(y, x + 3)
    with pytest.raises(ValueError, match="at least 17"):
        lm_windows(torch.arange(16), 16, 2)
    train, val = train_val_split(ids, 0.1)
    assert len(train) == 900 and torch.equal(val, ids[900:])


def test_next_token_loss_is_cross_entropy_over_every_position():
    logits, targets = torch.randn(2, 5, 7), torch.randint(7, (2, 5))
    want = nn.functional.cross_entropy(logits.transpose(1, 2), targets)
    torch.testing.assert_close(next_token_loss(logits, targets), want)
    with pytest.raises(ValueError, match="expected logits"):
        next_token_loss(logits, targets[:, :-1])


def test_weight_decay_groups_decay_only_linear_matrices():
    lm = DecoderOnlyLM(20, 16, 2, 2, 32, pad_id=None, positions="learned")
    decay, no_decay = weight_decay_groups(lm, 0.1)
    linear_weights = {id(m.weight) for m in lm.modules() if isinstance(m, nn.Linear)}
    assert {id(p) for p in decay["params"]} == linear_weights
    everything = {id(p) for p in lm.parameters()}
    assert {id(p) for p in decay["params"] + no_decay["params"]} == everything
    assert id(lm.tok_embed.weight) in {id(p) for p in no_decay["params"]}
    torch.optim.AdamW([decay, no_decay])  # no parameter twice


def test_a_tied_head_is_the_embedding_and_does_not_decay():
    lm = DecoderOnlyLM(20, 16, 2, 1, 32, pad_id=None, tie_embeddings=True)
    decay, no_decay = weight_decay_groups(lm, 0.1)
    assert all(p is not lm.lm_head.weight for p in decay["params"])
    assert sum(p is lm.tok_embed.weight for p in no_decay["params"]) == 1
    torch.optim.AdamW([decay, no_decay])
