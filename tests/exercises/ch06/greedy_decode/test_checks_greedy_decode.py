"""greedy_decode (chapter 6, book/ch06_training): the unit tests of
``ch06.check_greedy_decode`` and its hidden ``check_greedy_by_hand``, with wrong
decoders (each rejected with its named diagnosis) and right ones written differently
(each accepted).

Beyond the bank (bank_greedy_decode.py): every diagnosis the check can name is expected
by a wrong decoder here or in the bank, and the hidden test refuses the reference.

Each wrong one says what bug it is, spelled as a learner might, not as the check's own
variant is.
"""

import re

import pytest
import torch
from bank_greedy_decode import greedy_as_in_the_text as greedy_as_in_the_lesson
from bank_greedy_decode import greedy_column_list as greedy_while_loop
from units_ch06 import greedy_with_autograd

from tformer_grading.checks import CheckFailure, ch06
from tformer_ref.masks import causal_mask

# ------------------------------------------------------------------------ greedy_decode


def greedy_per_row(model, src, max_len, bos_id, eos_id, pad_id):
    """Wrong since the text asks for the leading BOS: one sequence at a time, padded
    to a common width, returned without BOS."""
    model.eval()
    rows = []
    with torch.inference_mode():
        for i in range(src.size(0)):
            memory, src_mask = model.encode(src[i : i + 1])
            ys = [bos_id]
            for _ in range(max_len):
                n = len(ys)
                mask = torch.tril(torch.ones(n, n)).bool()[None, None]
                logits = model.decode(torch.tensor([ys]), memory, src_mask, mask)
                ys.append(int(logits[0, -1].argmax()))
                if ys[-1] == eos_id:
                    break
            rows.append(ys[1:])
    width = max(len(r) for r in rows)
    return torch.tensor([r + [pad_id] * (width - len(r)) for r in rows])


@pytest.mark.parametrize("fn", [greedy_as_in_the_lesson, greedy_while_loop])
def test_greedy_accepts_right_implementations(fn, capsys):
    ch06.check_greedy_decode(fn)
    ch06.check_greedy_by_hand(fn)
    assert capsys.readouterr().out.count("✓ greedy_decode") == 2


def greedy_without_mask(model, src, max_len, bos_id, eos_id, pad_id):
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
        finished = torch.zeros(src.size(0), dtype=torch.bool)
        for _ in range(max_len):
            # No tgt_mask: every position sees all the others.
            logits = model.decode(out, memory, src_mask)
            nxt = logits[:, -1].argmax(-1).masked_fill(finished, pad_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            finished |= nxt == eos_id
            if finished.all():
                break
    return out


def greedy_inverted_mask(model, src, max_len, bos_id, eos_id, pad_id):
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
        finished = torch.zeros(src.size(0), dtype=torch.bool)
        for _ in range(max_len):
            # True = masked, another library's convention: the opposite of tril.
            mask = ~causal_mask(out.size(1))
            nxt = model.decode(out, memory, src_mask, mask)[:, -1].argmax(-1)
            nxt[finished] = pad_id
            out = torch.cat([out, nxt[:, None]], dim=1)
            finished |= nxt == eos_id
            if finished.all():
                break
    return out


def greedy_triu_mask(model, src, max_len, bos_id, eos_id, pad_id):
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
        finished = torch.zeros(src.size(0), dtype=torch.bool)
        for _ in range(max_len):
            t = out.size(1)
            mask = torch.triu(torch.ones(t, t)).bool()  # the future, not the past
            logits = model.decode(out, memory, src_mask, mask)
            nxt = logits[:, -1].argmax(-1).masked_fill(finished, pad_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            finished |= nxt == eos_id
            if finished.all():
                break
    return out


def greedy_float_mask(model, src, max_len, bos_id, eos_id, pad_id):
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
        for _ in range(max_len):
            # An additive float mask (0 / -inf) where the model takes a bool one.
            mask = torch.nn.Transformer.generate_square_subsequent_mask(out.size(1))
            nxt = model.decode(out, memory, src_mask, mask)[:, -1].argmax(-1)
            out = torch.cat([out, nxt[:, None]], dim=1)
    return out


def greedy_runs_to_max_len(model, src, max_len, bos_id, eos_id, pad_id):
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
        finished = torch.zeros(src.size(0), dtype=torch.bool)
        for _ in range(max_len):  # pads the finished rows but never breaks
            logits = model.decode(out, memory, src_mask, causal_mask(out.size(1)))
            nxt = logits[:, -1].argmax(-1).masked_fill(finished, pad_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            finished |= nxt == eos_id
    return out


def greedy_ignores_eos(model, src, max_len, bos_id, eos_id, pad_id):
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
        for _ in range(max_len):  # never looks at eos_id: tokens keep coming after EOS
            logits = model.decode(out, memory, src_mask, causal_mask(out.size(1)))
            out = torch.cat([out, logits[:, -1:].argmax(-1)], dim=1)
    return out


def greedy_stops_at_any_eos(model, src, max_len, bos_id, eos_id, pad_id):
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
        for _ in range(max_len):
            logits = model.decode(out, memory, src_mask, causal_mask(out.size(1)))
            nxt = logits[:, -1].argmax(-1)
            out = torch.cat([out, nxt[:, None]], dim=1)
            if eos_id in nxt.tolist():  # one row ended, so the whole batch stops
                break
    return out


def greedy_any_finished(model, src, max_len, bos_id, eos_id, pad_id):
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
        finished = torch.zeros(src.size(0), dtype=torch.bool)
        for _ in range(max_len):
            logits = model.decode(out, memory, src_mask, causal_mask(out.size(1)))
            nxt = logits[:, -1].argmax(-1).masked_fill(finished, pad_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            finished |= nxt == eos_id
            if finished.any():  # any instead of all
                break
    return out


def greedy_train_mode(model, src, max_len, bos_id, eos_id, pad_id):
    with torch.no_grad():  # no model.eval(): dropout stays on
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
        finished = torch.zeros(src.size(0), dtype=torch.bool)
        for _ in range(max_len):
            logits = model.decode(out, memory, src_mask, causal_mask(out.size(1)))
            nxt = logits[:, -1].argmax(-1).masked_fill(finished, pad_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            finished |= nxt == eos_id
            if finished.all():
                break
    return out


def greedy_calls_the_model(model, src, max_len, bos_id, eos_id, pad_id):
    model.eval()
    with torch.no_grad():
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
        finished = torch.zeros(src.size(0), dtype=torch.bool)
        for _ in range(max_len):
            logits = model(src, out)  # the full forward re-encodes the source each time
            nxt = logits[:, -1].argmax(-1).masked_fill(finished, pad_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            finished |= nxt == eos_id
            if finished.all():
                break
    return out


def greedy_first_position(model, src, max_len, bos_id, eos_id, pad_id):
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
        finished = torch.zeros(src.size(0), dtype=torch.bool)
        for _ in range(max_len):
            logits = model.decode(out, memory, src_mask, causal_mask(out.size(1)))
            # Position 0 (BOS) predicts the first token, at every step.
            nxt = logits[:, 0, :].argmax(-1)
            nxt = torch.where(finished, pad_id, nxt)
            out = torch.cat([out, nxt[:, None]], dim=1)
            finished |= nxt == eos_id
            if finished.all():
                break
    return out


def greedy_last_token_only(model, src, max_len, bos_id, eos_id, pad_id):
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
        finished = torch.zeros(src.size(0), dtype=torch.bool)
        for _ in range(max_len):
            # Feeds only the newest token: the decoder forgets the history.
            logits = model.decode(out[:, -1:], memory, src_mask, causal_mask(1))
            nxt = logits[:, -1].argmax(-1).masked_fill(finished, pad_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            finished |= nxt == eos_id
            if finished.all():
                break
    return out


def greedy_returns_lists(model, src, max_len, bos_id, eos_id, pad_id):
    # A list of rows, not a tensor.
    out = greedy_as_in_the_lesson(model, src, max_len, bos_id, eos_id, pad_id)
    return out.tolist()


WRONG_GREEDY = [
    (greedy_without_mask, "greedy decoding without the causal mask"),
    (greedy_inverted_mask, "target mask not the causal one"),
    (greedy_triu_mask, "upper triangular"),
    (greedy_float_mask, "your code raised TypeError"),
    (greedy_runs_to_max_len, "greedy decoding does not stop at EOS"),
    (greedy_ignores_eos, "greedy decoding does not stop at EOS"),
    (greedy_stops_at_any_eos, "stops the whole batch at the first EOS"),
    (greedy_any_finished, "stops the whole batch at the first EOS"),
    (greedy_train_mode, "decoding in training mode"),
    (greedy_with_autograd, "decoding with gradients enabled"),
    (greedy_calls_the_model, "source encoded at every step"),
    (greedy_first_position, "argmax of the first position"),
    (greedy_last_token_only, "decoder fed only the newest token"),
    (greedy_per_row, "output without the leading BOS"),
    (greedy_returns_lists, "expected a LongTensor"),
]


@pytest.mark.parametrize("fn,diagnosis", WRONG_GREEDY)
def test_greedy_rejects_wrong_implementations(fn, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch06.check_greedy_decode(fn)


def test_every_decoding_diagnosis_has_a_wrong_learner_in_the_bank():
    """Each diagnosis check_greedy_decode can name is expected by some WRONG_GREEDY
    entry or some greedy_decode entry of the measured bank (bank_greedy_decode.py,
    whose tests show that entry gets it)."""
    from bank import entries

    expected = [pattern for _, pattern in WRONG_GREEDY]
    measured = [
        re.search(r"'([^']+)'", e.expect)
        for e in entries("ch06")
        if e.exercise == "greedy_decode" and e.expect
    ]
    names = {m.group(1) for m in measured if m}
    for _, diagnosis in ch06.DECODE_PROBES:
        assert diagnosis.name in names or any(
            re.search(p, diagnosis.name) for p in expected
        ), diagnosis.name


def test_greedy_by_hand_rejects_the_reference():
    from tformer_ref.decoding import greedy_decode

    def delegating(model, src, max_len, bos_id, eos_id, pad_id):
        return greedy_decode(model, src, max_len, bos_id, eos_id, pad_id)

    with pytest.raises(CheckFailure, match="calls tformer_ref.greedy_decode"):
        ch06.check_greedy_by_hand(delegating)
