"""Every quotation of a seed is marked, and every marked quotation is verbatim.

The bug this guards against: the book once "corrected" the seeds on lines they never
wrote (a start token said to lack ``.long()``, a scheduler said to divide by zero at step
0). A learner who checks one quote against the seed stops trusting the rest. So:

- ``{seed}`NNN:…``` and ``{seed-quote} NNN`` blocks must occur in seed NNN
  (``book/seeds/NNN.txt``), whitespace-normalised;
- Chinese text appears only inside those marks (the seeds are the only Chinese source);
- an English phrase in quotation marks in a paragraph about a seed is either a mark or a
  translation marked ``{seedtr}`NNN:…```, unless allowed below with a reason.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import seed_quotes  # noqa: E402
from prose import FENCE, ROLE, markdown_sources  # noqa: E402

CJK = re.compile(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]")
QUOTED = re.compile(r"[\"“]([^\"”\n]{3,}?)[\"”]")

# Quoted phrases in paragraphs that mention a seed but are not the seed's words.
NOT_SEED_WORDS = {
    "— seed NNN, verbatim": "the seeds' page describing the attribution line",
}


def marks():
    """(where, seed id, text) for every seed mark in the book's prose."""
    for md in markdown_sources():
        for role in ROLE.finditer(md.text):
            if role["name"] == "seed":
                seed_id, text = seed_quotes.split_role_text(role["text"])
                yield md.where, seed_id, text
        for block in FENCE.finditer(md.text):
            if block["name"] == "seed-quote":
                body = "\n".join(
                    line
                    for line in block["body"].splitlines()
                    if not line.startswith(":")
                )
                yield md.where, block["arg"].strip(), body


def without_marks(text: str) -> str:
    text = FENCE.sub(lambda b: "" if b["name"] == "seed-quote" else b[0], text)
    return ROLE.sub(lambda r: "" if r["name"] in ("seed", "seedtr") else r[0], text)


def test_the_book_quotes_the_seeds():
    # A guard that quietly checks nothing would pass too: the marks must be there.
    assert len(list(marks())) >= 10


def test_every_marked_quotation_is_verbatim():
    seeds = {
        sid: seed_quotes.normalise(seed_quotes.seed_text(sid))
        for sid in seed_quotes.SEED_IDS
    }
    wrong = [
        f"{where}: seed {sid} has no {text!r}"
        for where, sid, text in marks()
        if sid not in seeds or seed_quotes.normalise(text) not in seeds[sid]
    ]
    assert not wrong, "quotations not in the seed they name:\n" + "\n".join(wrong)


def test_chinese_only_inside_seed_marks():
    found = [
        f"{md.where}: {line.strip()[:80]}"
        for md in markdown_sources()
        if "seeds" not in md.path.parts
        for line in without_marks(md.text).splitlines()
        if CJK.search(line)
    ]
    assert not found, (
        "Chinese text outside {seed}/{seed-quote} marks (quote the seed "
        "with a mark, or translate with {seedtr}):\n" + "\n".join(found)
    )


def test_quoted_english_about_a_seed_is_marked():
    found = []
    for md in markdown_sources():
        text = re.sub(r"`[^`]*`", "C", without_marks(md.text))
        for para in re.split(r"\n\s*\n", text):
            if "seed" not in para.lower():
                continue
            for quoted in QUOTED.finditer(para):
                words = quoted[1]
                if len(words.split()) >= 2 and words not in NOT_SEED_WORDS:
                    found.append(f"{md.where}: {quoted[0][:80]}")
    assert not found, (
        "quoted words in a paragraph about a seed, not marked: use "
        "{seed}`NNN:…` (verbatim) or {seedtr}`NNN:…` (a translation), "
        "or write a paraphrase without quotation marks:\n" + "\n".join(found)
    )


@pytest.mark.parametrize(
    "text, expected", [("004:x = 1", ("004", "x = 1")), ("000:a:b", ("000", "a:b"))]
)
def test_role_text_is_split_at_the_first_colon(text, expected):
    assert seed_quotes.split_role_text(text) == expected


@pytest.mark.parametrize("text", ["x = 1", "003:x", "04:x"])
def test_role_text_without_a_seed_id_is_refused(text):
    with pytest.raises(ValueError, match="NNN:text"):
        seed_quotes.split_role_text(text)


def test_a_paraphrase_marked_as_a_quote_is_caught():
    seed = seed_quotes.normalise(seed_quotes.seed_text("004"))
    # The seed casts its start token to long; the book once quoted it without the cast.
    assert "torch.ones(1, 1).fill_(SOS_IDX).long().to(device)" in seed
    assert "torch.ones(1, 1).fill_(SOS_IDX).to(device)" not in seed
