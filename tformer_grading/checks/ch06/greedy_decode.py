"""Checks for exercise ``greedy_decode`` of chapter 6 (book/ch06_training):
``greedy_decode(model, src, max_len, bos_id, eos_id, pad_id) -> [B, T]``, BOS first,
then each step's argmax, PAD after a row's EOS.

Greedy decoding is judged from behaviour: the learner's loop runs on a model that
records how it is used, and each probe reads one thing that record (or the output)
shows.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tformer_ref.device import get_device

from ...guard.integrity import seal
from ..delegation import check_not_delegated
from ..diagnosis import (
    UNEXPLAINED,
    Diagnosis,
    Pitfall,
    Raised,
    fail,
    passed,
    run,
    single_threaded,
)
from ..flow import reproduced
from ..measure.decode_loops import RecordingDecoder, appended, causal, extensions
from .references import gen, small_model
from .sections import S_DECODE

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True


class DecodingModel(RecordingDecoder):
    """The cases' encoder–decoder, recording how the learner's loop uses it
    (measure/decode_loops.py); its ``decode`` takes the target mask explicitly, as
    nn.TransformerDecoder does: a bool [St, St] or [1, 1, St, St] mask, True = may
    attend, and no ``tgt_mask`` means no mask at all. ``ids`` = (bos, eos, pad): it
    never generates PAD or BOS, and ``eos_bias`` makes EOS likelier."""

    def __init__(
        self,
        eos_bias: float = 0.0,
        seed: int = 0,
        dropout: float = 0.3,
        ids: tuple = (1, 2, 0),
    ):
        super().__init__(small_model(seed, dropout=dropout))
        self.bias = self.inner.out.bias.detach().clone()
        self.configure(eos_bias, ids)

    def configure(self, eos_bias: float, ids: tuple):
        """Set the output bias for ``eos_bias`` and ``ids`` and forget the record."""
        bos, eos, pad = ids
        with torch.no_grad():
            self.inner.out.bias.copy_(self.bias)
            self.inner.out.bias[eos] += eos_bias
            # Never generates PAD or BOS, so a missing BOS or PAD shows in the output.
            self.inner.out.bias[[pad, bos]] = -1e4
        self.reset()


def _greedy_reference(model, src, max_len, bos_id, eos_id, pad_id):
    """Greedy loop for :class:`DecodingModel`: eval, no grad, encode once, causal mask,
    argmax of the last position, PAD after a row's EOS, stop once every row ended."""
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            mask = causal(out.size(1), src.device)
            logits = model.decode(out, memory, src_mask, mask)
            nxt = logits[:, -1].argmax(-1).masked_fill(done, pad_id)
            out = torch.cat([out, nxt[:, None]], 1)
            done |= nxt == eos_id
            if done.all():
                break
    return out


def _greedy_stops_at_first_eos(model, src, max_len, bos_id, eos_id, pad_id):
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        for _ in range(max_len):
            mask = causal(out.size(1), src.device)
            logits = model.decode(out, memory, src_mask, mask)
            nxt = logits[:, -1].argmax(-1)
            out = torch.cat([out, nxt[:, None]], 1)
            if (nxt == eos_id).any():
                break
    return out


STOPS_AT_FIRST_EOS = Pitfall(
    "stops the whole batch at the first EOS",
    "You break as soon as any sequence ends; the others are cut short. Stop when every "
    "row has produced EOS.",
    S_DECODE,
    _greedy_stops_at_first_eos,
)


ARGMAX_OF_FIRST_POSITION = Diagnosis(
    "argmax of the first position",
    "You take the argmax of the *first* position's logits at every step. The next "
    "token is predicted by the last position: logits[:, -1].",
    S_DECODE,
)

# What greedy_decode returns, as the exercise states it; failures enforcing it quote it.
_DECODE_TEXT = (
    'The exercise says: "greedy_decode(model, src, max_len, bos_id, '
    "eos_id, pad_id) returns a LongTensor [B, T] whose first column is "
    "bos_id, followed by at most max_len new tokens per row; after a row's "
    'eos_id come pad_id tokens."'
)

# Recognised from what the recording model saw, not by matching a wrong loop's output.
ENCODES_EVERY_STEP = Diagnosis(
    "source encoded at every step",
    "Encode the source once before the loop and reuse the memory at every step "
    "(calling model(src, tgt) at each step re-encodes it).",
    S_DECODE,
)
MEMORY_NOT_USED = Diagnosis(
    "memory from encode not used",
    "Each decode call reads the source through the memory that model.encode(src) "
    "returned: pass that memory (and its src_mask) to every step.",
    S_DECODE,
)
START_NOT_LONG = Diagnosis(
    "start token not a LongTensor",
    "Token ids index an embedding, so they must be integers: build the start column "
    "with torch.full((B, 1), bos_id, dtype=torch.long, device=src.device).",
    S_DECODE,
)
WRONG_START = Diagnosis(
    "decoding does not start from BOS",
    "The decoder's first input is one bos_id per row (the argument, not a constant).",
    S_DECODE,
)
LAST_TOKEN_ONLY = Diagnosis(
    "decoder fed only the newest token",
    "Without a key/value cache the decoder must re-read the whole prefix at every "
    "step (BOS and every token so far); fed one token it forgets the history.",
    S_DECODE,
)
NO_CAUSAL_MASK = Diagnosis(
    "greedy decoding without the causal mask",
    "Each step must decode with the same causal mask as training (causal_mask / tril, "
    "True = may attend): without it, earlier positions see later ones inside the "
    "decoder, and from the second layer on the last position's output is not what the "
    "model was trained to produce.",
    S_DECODE,
)
MASK_NOT_CAUSAL = Diagnosis(
    "target mask not the causal one",
    "Each step must decode with the mask the model was trained with: causal_mask, "
    "tril of ones, True = may attend, each position seeing itself and the ones "
    "before it. A mask that hides what tril shows changes what every position "
    "attends to, in the first layer already, so the last position's output is not "
    "what the model was trained to produce.",
    S_DECODE,
)
UPPER_TRIANGULAR_MASK = Diagnosis(
    "upper triangular target mask",
    "Your target mask is upper triangular (triu): each position may attend only to the "
    "*future*. The causal mask is lower triangular (tril).",
    S_DECODE,
)
DECODES_IN_TRAINING_MODE = Diagnosis(
    "decoding in training mode",
    "The model decoded in training mode, so dropout was on and the output is random. "
    "Call model.eval() before decoding.",
    S_DECODE,
)
DECODES_WITH_GRADIENTS = Diagnosis(
    "decoding with gradients enabled",
    "Decoding with gradients enabled builds an autograd graph at every step for "
    "nothing. Wrap the loop in torch.no_grad() (or torch.inference_mode()).",
    S_DECODE,
)
OUTPUT_NOT_LONG = Diagnosis(
    "output not a LongTensor",
    "Return the token ids as a LongTensor. " + _DECODE_TEXT,
    S_DECODE,
)
NO_LEADING_BOS = Diagnosis(
    "output without the leading BOS",
    "Keep the start token in what you return. " + _DECODE_TEXT,
    S_DECODE,
)
EOS_WRITTEN_AS_PAD = Diagnosis(
    "EOS replaced by pad_id",
    "A row's EOS is its last real token: append the step's token first, then mark the "
    "row finished, so that pad_id starts after the EOS, not in its place. "
    + _DECODE_TEXT,
    S_DECODE,
)
WRONG_NEXT_TOKEN = Diagnosis(
    "next token is not the argmax of the last position",
    "At each step append logits[:, -1].argmax(-1): the highest score over the "
    "vocabulary (the last axis) at the last position.",
    S_DECODE,
)
MAX_LEN_COUNT = Diagnosis(
    "max_len counted wrong",
    "max_len counts the new tokens after BOS: a row that never produces EOS gets "
    "exactly max_len of them (T = max_len + 1 with BOS). " + _DECODE_TEXT,
    S_DECODE,
)
WRONG_PADDING = Diagnosis(
    "finished rows not padded with pad_id",
    "Once a row has produced eos_id, every later token of that row is pad_id (the "
    "argument). " + _DECODE_TEXT,
    S_DECODE,
)
ROWS_CUT_SHORT = Diagnosis(
    "rows cut short",
    "A row ends with the step that produced its EOS (the EOS included), or after "
    "max_len new tokens: append each step's token before testing whether to stop.",
    S_DECODE,
)
NO_STOP_AT_EOS = Diagnosis(
    "greedy decoding does not stop at EOS",
    "Track which rows are finished, pad them, and break when all are.",
    S_DECODE,
)

_BOS, _EOS, _PAD = 1, 2, 0
_DECODE_CASES = (  # (label, eos_bias, batch, max_len, seed, (bos, eos, pad))
    ("every row ends before max_len", 2.0, 6, 12, 0, (1, 2, 0)),
    ("some rows reach max_len=8", 1.0, 6, 8, 0, (1, 2, 0)),
    ("a batch of one", 0.0, 1, 10, 3, (1, 2, 0)),
    ("bos_id=12, eos_id=11, pad_id=10", 2.0, 4, 9, 5, (12, 11, 10)),
)


def _rows(tokens, eos, pad):
    """[B, T] tokens after BOS -> per row: (tokens up to and including the first EOS,
    trailing PAD dropped when there is none; the tokens after it that are not PAD)."""
    rows = []
    for r in tokens.tolist():
        if eos in r:
            k = r.index(eos)
            rows.append((r[: k + 1], [x for x in r[k + 1 :] if x != pad]))
        else:
            while r and r[-1] == pad:
                r = r[:-1]
            rows.append((r, []))
    return rows


def _decoded_tokens(rows):
    return [tokens for tokens, _ in rows]


def _decode_src(b, seed):
    """[b, 5] source ids."""
    return torch.randint(3, 13, (b, 5), generator=gen(seed)).to(get_device())


def _decode_inputs(eos_bias, b, seed, ids=(_BOS, _EOS, _PAD)):
    model = DecodingModel(eos_bias=eos_bias, ids=ids).to(get_device())
    return model, _decode_src(b, seed)


@dataclass(frozen=True)
class _Decoding:
    """One case of the learner's loop: what it returned, and what the model recorded."""

    label: str
    model: DecodingModel
    src: torch.Tensor
    max_len: int
    batch: int
    ids: tuple  # (bos, eos, pad)
    eos_bias: float
    out: torch.Tensor  # [B, T] what the learner returned
    rows: list  # _rows of the learner's output after its first column
    want: list  # _rows of the reference's output after BOS
    want_steps: int  # decode calls the reference made
    calls: tuple  # the model's record of each decode call the learner made
    encoded_rows: int


TOKEN_IDS_OUT_OF_RANGE = Diagnosis(
    "appended tokens are not vocabulary ids",
    "Each step appends one id per row, a LongTensor [B] in 0 .. V-1: "
    "logits[:, -1].argmax(-1), the argmax over the vocabulary (the last axis) of each "
    "row's last position. An argmax without dim flattens the whole tensor and returns "
    "one index into all B·V (or B·T·V) scores.",
    S_DECODE,
)


def _flat_argmax(logits, ids) -> str | None:
    """Which argmax without ``dim`` over ``logits`` [B, T, V] gives ``ids`` [B]."""
    flats = (("logits[:, -1]", logits[:, -1]), ("logits", logits))
    name = next(
        (
            name
            for name, z in flats
            if bool((ids == z.reshape(-1).argmax().to(ids.device)).all())
        ),
        None,
    )
    if name is None:
        return None
    return (
        f"the flat index of the largest of all the scores in {name}, the whole "
        "batch's: an argmax without dim, one index for every row"
    )


def _out_of_range_ids(calls, vocab) -> str | None:
    """What the first decode call fed ids outside 0 .. vocab-1 saw, or None."""

    def outside(ids):
        return ids.dtype == torch.long and bool(((ids < 0) | (ids >= vocab)).any())

    k = next((k for k, c in enumerate(calls) if outside(c["prefix"])), None)
    if k is None:
        return None
    bad = calls[k]["prefix"]
    seen = (
        f"your decoder input [B={bad.size(0)}, {bad.size(1)}] held ids from "
        f"{int(bad.min())} to {int(bad.max())}; the vocabulary has V = {vocab} "
        f"ids, 0 .. {vocab - 1}."
    )
    before = calls[k - 1] if k else None
    if before is not None and bad.size(1) == before["length"] + 1:
        seen += f" The column you appended was {bad[:, -1].tolist()}"
        flat = _flat_argmax(before["logits"], bad[:, -1])
        seen += f": {flat}." if flat else "."
    return seen


def _raised_in_decode(title, label, model, raised) -> None:
    """The learner's loop raised: name what the model saw first, else say where."""
    calls = model.calls
    bad = next((c for c in calls if c["dtype"] != torch.long), None)
    if bad is not None:
        START_NOT_LONG.fail(
            title,
            f"In case {label}, your decoder input had dtype "
            f"{bad['dtype']} (and the embedding raised).",
        )
    out_of_range = _out_of_range_ids(calls, model.inner.out.out_features)
    if out_of_range is not None:
        TOKEN_IDS_OUT_OF_RANGE.fail(
            title, f"In case {label}, {out_of_range} Then your code raised {raised!r}"
        )
    fail(title, f"case {label}: your code raised {raised!r}")


def _returned_ids(title, label, out, batch) -> torch.Tensor:
    if not isinstance(out, torch.Tensor) or out.dim() != 2 or out.size(0) != batch:
        got = (
            f"shape {list(out.shape)}"
            if isinstance(out, torch.Tensor)
            else type(out).__name__
        )
        fail(
            title,
            f"case {label}: expected a LongTensor [B={batch}, T] of token ids, "
            f"got {got}. {_DECODE_TEXT}",
            S_DECODE,
        )
    if type(out) is not torch.Tensor:  # a subclass could make any comparison agree
        fail(
            title,
            f"case {label}: expected a plain torch.Tensor, got the tensor "
            f"subclass {type(out).__name__}",
            S_DECODE,
        )
    if out.dtype != torch.long:
        OUTPUT_NOT_LONG.fail(title, f"In case {label}, yours has dtype {out.dtype}.")
    return out


def _decode_case(
    title, greedy_fn, model, label, eos_bias, batch, max_len, seed, ids
) -> _Decoding:
    """Run the reference, then the learner, on ``model`` set up for this case and left
    in training mode."""
    bos, eos, pad = ids  # noqa: RUF059
    model.configure(eos_bias, ids)
    src = _decode_src(batch, seed)
    model.train()  # as a model is left after training
    want = _rows(_greedy_reference(model, src, max_len, *ids)[:, 1:], eos, pad)
    want_steps = len(model.calls)
    model.reset()
    model.train()
    got = run(greedy_fn, (model, src, max_len, *ids))
    if isinstance(got, Raised):
        _raised_in_decode(title, label, model, got)
    out = _returned_ids(title, label, got, batch)
    return _Decoding(
        label,
        model,
        src,
        max_len,
        batch,
        ids,
        eos_bias,
        out,
        _rows(out[:, 1:], eos, pad),
        want,
        want_steps,
        tuple(model.calls),
        model.encoded_rows,
    )


# Each probe returns what it saw the learner's loop do wrong in one case, or None.


def _encoded_more_than_once(seen: _Decoding) -> str | None:
    if seen.encoded_rows > seen.batch:
        return (
            f"In case {seen.label}, {seen.encoded_rows} source rows were encoded "
            f"for a batch of {seen.batch}."
        )
    return None


def _memory_not_from_encoder(seen: _Decoding) -> str | None:
    n = sum(not c["memory"] for c in seen.calls)
    if n:
        return (
            f"In case {seen.label}, {n} of your {len(seen.calls)} decode calls got "
            "a memory that model.encode(src) did not return."
        )
    return None


def _started_elsewhere(seen: _Decoding) -> str | None:
    first = seen.calls[0]["prefix"] if seen.calls else None
    bos = seen.ids[0]
    if first is None or (first.size(1) >= 1 and bool((first[:, 0] == bos).all())):
        return None
    return (
        f"In case {seen.label}, your first decode call read "
        f"{first[:, 0].tolist()}; bos_id={bos}."
    )


def _only_newest_token(seen: _Decoding) -> str | None:
    lengths = [c["length"] for c in seen.calls]
    if len(lengths) > 1 and max(lengths) == 1:
        return (
            f"In case {seen.label}, each of your {len(lengths)} decode calls read "
            "a single token."
        )
    return None


def _first_masked_step(seen: _Decoding, kinds) -> dict | None:
    """The first decode call past the first token whose mask is one of ``kinds``."""
    return next((c for c in seen.calls if c["length"] > 1 and c["mask"] in kinds), None)


# A target mask read (decode_loops.mask_kind), as a learner reads it: none at all,
_NO_MASK = {"none": "None (or all True)", "other": "neither tril nor triu"}
# or one that hides some of what tril shows.
_MISREAD_MASK = {
    "inverted": "tril inverted: each position saw only later ones (True read as hide)",
    "no diagonal": "tril(-1): no position saw itself",
}


def _decoded_with(kinds: dict):
    def reading(seen: _Decoding) -> str | None:
        call = _first_masked_step(seen, tuple(kinds))
        if call is None:
            return None
        return (
            f"At the step that decoded {call['length']} tokens, your target mask was "
            f"{kinds[call['mask']]}."
        )

    return reading


def _decoded_in_training_mode(seen: _Decoding) -> str | None:
    n = sum(c["training"] for c in seen.calls)
    if n:
        return f"{n} of your {len(seen.calls)} decode calls ran in training mode."
    return None


def _decoded_with_gradients(seen: _Decoding) -> str | None:
    n = sum(c["grad"] for c in seen.calls)
    if n:
        return f"{n} of your {len(seen.calls)} decode calls ran with gradients on."
    return None


def _without_bos(seen: _Decoding) -> str | None:
    first = seen.out[:, 0] if seen.out.size(1) else seen.out.new_empty(0)
    if first.numel() and bool((first == seen.ids[0]).all()):
        return None
    return (
        f"In case {seen.label}, your output's first column is {first.tolist()}; "
        f"bos_id={seen.ids[0]}."
    )


def _appended(seen: _Decoding):
    return appended(seen.calls, eos=seen.ids[1])


# What a loop may have appended instead of the last position's argmax, by name.
_TOKEN_CHOICES = (
    ("the argmax of the last position", lambda z: z[:, -1].argmax(-1)),
    ("the smallest logit of the last position (argmin)", lambda z: z[:, -1].argmin(-1)),
    (
        "the argmax over the positions axis (dim=1), not the vocabulary",
        lambda z: z.argmax(1)[:, -1],
    ),
    (
        "the argmax of the second-to-last position",
        lambda z: z[:, -2].argmax(-1) if z.size(1) > 1 else z[:, -1].argmax(-1),
    ),
)


def _token_choice(seen: _Decoding) -> str | None:
    """Which of _TOKEN_CHOICES explains every appended token (None: none or right)."""
    steps = list(_appended(seen))
    for name, choose in _TOKEN_CHOICES:
        if all(
            torch.equal(choose(c["logits"][alive]).to(tok.device), tok)
            for c, alive, tok in steps
        ):
            return name
    return None


def _took_first_position(seen: _Decoding) -> str | None:
    steps = list(_appended(seen))
    if (
        steps
        and all(
            torch.equal(c["logits"][alive, 0].argmax(-1).to(t.device), t)
            for c, alive, t in steps
        )
        and _token_choice(seen) is None
    ):
        return f"In case {seen.label}, your tokens are logits[:, 0].argmax(-1)."
    return None


def _eos_written_as_pad(seen: _Decoding) -> str | None:
    """Every appended token is the argmax, except pad_id wherever the argmax was EOS."""
    eos, pad = seen.ids[1], seen.ids[2]
    off = []
    for c, alive, tok in _appended(seen):
        want = c["logits"][alive, -1].argmax(-1).to(tok.device)
        differ = want != tok
        if not ((want[differ] == eos).all() and (tok[differ] == pad).all()):
            return None
        off += [c["length"]] if differ.any() else []
    if not off:
        return None
    return (
        f"In case {seen.label}, every token you appended is the last position's "
        f"argmax, except where that argmax was EOS ({eos}): there you appended "
        f"pad_id ({pad}) (first after the step that decoded {off[0]} tokens)."
    )


def _wrong_token_choice(seen: _Decoding) -> str | None:
    steps = list(_appended(seen))
    if not steps:
        return None
    choice = _token_choice(seen)
    if choice == _TOKEN_CHOICES[0][0]:
        return None
    if choice is not None:
        return f"In case {seen.label}, every token you appended was {choice}."
    c, alive, tok = next(
        (c, a, t)
        for c, a, t in steps
        if not torch.equal(c["logits"][a, -1].argmax(-1).to(t.device), t)
    )
    want = c["logits"][alive, -1].argmax(-1).tolist()
    return (
        f"In case {seen.label}, after the step that decoded {c['length']} tokens "
        f"you appended {tok.tolist()}; the last position's argmax was {want}."
    )


def _max_len_miscounted(seen: _Decoding) -> str | None:
    """Rows that never produce EOS got one or two tokens more or fewer than max_len
    (a loop stopped for another reason is a stopping mistake, judged later)."""
    eos = seen.ids[1]
    open_rows = [i for i, (tokens, _) in enumerate(seen.want) if eos not in tokens]
    counts = {len(seen.rows[i][0]) for i in open_rows if eos not in seen.rows[i][0]}
    if len(counts) != 1 or not 0 < abs(min(counts) - seen.max_len) <= 2:
        return None
    return (
        f"In case {seen.label}, the rows that never produce EOS got "
        f"{sorted(counts)} new tokens after BOS with max_len={seen.max_len}."
    )


def _kept_decoding_finished_rows(seen: _Decoding) -> bool:
    """Some finished row was given the model's own next token, as if not finished."""
    eos = seen.ids[1]
    for a, b in extensions(seen.calls):
        pa, pb = a["prefix"], b["prefix"]
        done = (pa == eos).any(1)
        guess = a["logits"][:, -1].argmax(-1).to(pb.device)
        if (done & (pb[:, -1] == guess)).any():
            return True
    return False


def _padded_with_something_else(seen: _Decoding) -> str | None:
    extras = {x for _, extra in seen.rows for x in extra}
    if len(extras) == 1 and not _kept_decoding_finished_rows(seen):
        (value,) = extras
        return (
            f"In case {seen.label}, after EOS your rows hold {value}; "
            f"pad_id={seen.ids[2]}."
        )
    return None


def _row_cut_short(seen: _Decoding) -> str | None:
    for i, ((got, _), (want, _)) in enumerate(zip(seen.rows, seen.want)):
        if len(got) < len(want) and want[: len(got)] == got:
            return (
                f"In case {seen.label}, row {i} is {got}: the first {len(got)} of "
                f"the {len(want)} tokens it decodes to, {want}."
            )
    return None


def _decoded_past_eos(seen: _Decoding) -> str | None:
    longest = max((c["length"] for c in seen.calls), default=0)
    ended = all(seen.ids[1] in tokens for tokens in _decoded_tokens(seen.want))
    if ended and longest > seen.want_steps:
        return (
            f"In case {seen.label}, every sequence had ended after "
            f"{seen.want_steps} steps but your loop went on to decode a prefix of "
            f"{longest} tokens."
        )
    after = [(i, extra) for i, (_, extra) in enumerate(seen.rows) if extra]
    if after:
        row, extra = after[0]
        return f"In case {seen.label}, row {row} goes on after its EOS with {extra}."
    return None


def _rows_match(seen: _Decoding, variant) -> bool:
    """``variant`` gives the learner's tokens on the same model."""
    seen.model.configure(seen.eos_bias, seen.ids)  # the model serves every case
    theirs = variant(seen.model, seen.src, seen.max_len, *seen.ids)
    return _decoded_tokens(_rows(theirs[:, 1:], *seen.ids[1:])) == _decoded_tokens(
        seen.rows
    )


def _stopped_at_first_eos(seen: _Decoding) -> str | None:
    """Reproduced by the variant (judged on every case: one of EVERY_CASE)."""
    if _rows_match(seen, STOPS_AT_FIRST_EOS.impl):
        reproduced(STOPS_AT_FIRST_EOS)
        return (
            f"In case {seen.label}, every row stops at the step where the first "
            "EOS appears."
        )
    return None


# In the order a loop runs: set-up, each step's input, the token it picks, when it
# stops; a mask or mode mistake explains any wrong tokens that follow from it.
DECODE_PROBES = (
    (_encoded_more_than_once, ENCODES_EVERY_STEP),
    (_memory_not_from_encoder, MEMORY_NOT_USED),
    (_started_elsewhere, WRONG_START),
    (_only_newest_token, LAST_TOKEN_ONLY),
    (_decoded_with(_NO_MASK), NO_CAUSAL_MASK),
    (_decoded_with(_MISREAD_MASK), MASK_NOT_CAUSAL),
    (_decoded_with({"triu": "triu"}), UPPER_TRIANGULAR_MASK),
    (_decoded_in_training_mode, DECODES_IN_TRAINING_MODE),
    (_decoded_with_gradients, DECODES_WITH_GRADIENTS),
    (_without_bos, NO_LEADING_BOS),
    (_took_first_position, ARGMAX_OF_FIRST_POSITION),
    (_eos_written_as_pad, EOS_WRITTEN_AS_PAD),
    (_wrong_token_choice, WRONG_NEXT_TOKEN),
    (_stopped_at_first_eos, STOPS_AT_FIRST_EOS),
    (_max_len_miscounted, MAX_LEN_COUNT),
    (_row_cut_short, ROWS_CUT_SHORT),
    (_padded_with_something_else, WRONG_PADDING),
    (_decoded_past_eos, NO_STOP_AT_EOS),
)


# Named only when they explain every case: a right loop can look like either on one
# case (the first position is the last one while only BOS is in; a batch whose rows end
# together stops at the first EOS).
EVERY_CASE = (ARGMAX_OF_FIRST_POSITION, STOPS_AT_FIRST_EOS)


def _judge(title, probe, diagnosis, seen: list) -> None:
    """Fail when ``probe`` sees its mistake: in any case, or for those of
    :data:`EVERY_CASE` only when it explains every case and some case's tokens are
    wrong."""
    if diagnosis in EVERY_CASE:
        wrong = [_decoded_tokens(s.rows) != _decoded_tokens(s.want) for s in seen]
        if any(wrong):
            observed = [probe(one) for one in seen]
            if all(o is not None for o in observed):
                diagnosis.fail(title, observed[wrong.index(True)])
        return
    found = next((o for o in map(probe, seen) if o is not None), None)
    if found is not None:
        diagnosis.fail(title, found)


def _fail_first_wrong_row(title, seen: _Decoding) -> None:
    got, want = _decoded_tokens(seen.rows), _decoded_tokens(seen.want)
    i = next(i for i, (g, w) in enumerate(zip(got, want)) if g != w)
    fail(
        title,
        f"case {seen.label}: row {i} decoded to {got[i]}, expected {want[i]} "
        f"(tokens after BOS up to EOS). It {UNEXPLAINED}: every step's input, "
        "mask, mode and token choice looked right. " + _DECODE_TEXT,
        S_DECODE,
    )


@single_threaded
def check_greedy_decode(greedy_fn) -> None:
    """``greedy_fn(model, src [B, Ss], max_len, bos_id, eos_id, pad_id) -> [B, T]`` (BOS
    first, at most max_len new tokens, PAD after EOS), for a model like
    :class:`DecodingModel`. All cases run first; then each probe, in the order a loop
    runs, is judged on all of them."""
    title = "greedy_decode"
    model = DecodingModel().to(get_device())
    seen = [_decode_case(title, greedy_fn, model, *case) for case in _DECODE_CASES]
    for probe, diagnosis in DECODE_PROBES:
        _judge(title, probe, diagnosis, seen)
    for one in seen:
        if _decoded_tokens(one.rows) != _decoded_tokens(one.want):
            _fail_first_wrong_row(title, one)
    passed(
        title,
        f"matches the reference on {len(_DECODE_CASES)} cases: eval mode, no "
        "grad, encodes once, causal mask, stops at EOS",
    )


@single_threaded
def check_greedy_by_hand(greedy_fn) -> None:
    """Hidden test: the learner's loop, not the reference's greedy_decode."""
    model, src = _decode_inputs(0.5, 2, 0)
    # The model itself is reference code the learner is meant to call: profile only the
    # learner's loop.
    check_not_delegated(
        "greedy_decode",
        lambda: greedy_fn(model, src, 8, 1, 2, 0),
        forbidden=["tformer_ref.greedy_decode", "tformer_ref.beam_search"],
    )


seal(__name__)
