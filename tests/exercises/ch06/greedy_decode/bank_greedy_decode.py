"""Chapter 6's measured bank for greedy_decode (the format: tests/bank/bank.py)."""

import torch

from bank import GENERIC, right, wrong  # noqa: F401
from exercise_cells import graders
from tformer_ref.masks import causal_mask

GRADERS = graders("ch06_training", {"greedy_decode": "greedy_decode"})


# ------------------------------------------------------------------------------- right


@right("greedy_decode")
def greedy_as_in_the_text(model, src, max_len, bos_id, eos_id, pad_id):
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        finished = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            mask = causal_mask(out.size(1), src.device)
            logits = model.decode(out, memory, src_mask, mask)
            nxt = logits[:, -1].argmax(dim=-1).masked_fill(finished, pad_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            finished |= nxt == eos_id
            if finished.all():
                break
    return out


@right("greedy_decode")
@torch.no_grad()
def greedy_column_list(model, src, max_len, bos_id, eos_id, pad_id):
    model.eval()
    memory, src_mask = model.encode(src)
    columns = [torch.full((src.shape[0],), bos_id, dtype=torch.long)]
    alive = torch.ones(src.shape[0], dtype=torch.bool)
    while alive.any() and len(columns) <= max_len:
        ys = torch.stack(columns, dim=1)
        t = ys.shape[1]
        keep = torch.ones(t, t, dtype=torch.bool).tril()
        scores = model.decode(ys, memory, src_mask, keep)[:, t - 1, :]
        padding = torch.full_like(alive, pad_id, dtype=torch.long)
        token = torch.where(alive, scores.argmax(-1), padding)
        columns.append(token)
        alive &= token != eos_id
    return torch.stack(columns, dim=1)


@right("greedy_decode")
def greedy_row_by_row(model, src, max_len, bos_id, eos_id, pad_id):
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
            rows.append(ys)
    width = max(len(r) for r in rows)
    return torch.tensor([r + [pad_id] * (width - len(r)) for r in rows])


@right("greedy_decode")
def greedy_preallocated(model, src, max_len, bos_id, eos_id, pad_id):
    model.eval()
    b = src.size(0)
    out = torch.full((b, max_len + 1), pad_id, dtype=torch.long, device=src.device)
    out[:, 0] = bos_id
    done = torch.zeros(b, dtype=torch.bool, device=src.device)
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        for t in range(1, max_len + 1):
            tri = torch.ones(t, t, dtype=torch.bool, device=src.device).tril()
            logits = model.decode(out[:, :t], memory, src_mask, tri)
            nxt = logits[:, -1].argmax(-1)
            out[:, t] = torch.where(done, torch.full_like(nxt, pad_id), nxt)
            done = done | (nxt == eos_id)
            if bool(done.all()):
                break
    return out  # full width: the columns after the last EOS stay padding


@right("greedy_decode")
def greedy_max_indices(model, src, max_len, bos_id, eos_id, pad_id):
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        ys = torch.ones(src.size(0), 1, dtype=torch.long, device=src.device) * bos_id
        ended = torch.zeros_like(ys[:, 0], dtype=torch.bool)
        step = 0
        while step < max_len and not ended.all():
            t = ys.size(1)
            mask = torch.tril(torch.ones(1, 1, t, t, device=src.device)).bool()
            nxt = (
                model.decode(ys, memory, src_mask, tgt_mask=mask)[:, -1, :]
                .max(dim=-1)
                .indices
            )
            nxt[ended] = pad_id
            ys = torch.cat((ys, nxt.unsqueeze(1)), dim=-1)
            ended = ended | nxt.eq(eos_id)
            step += 1
    return ys


@right("greedy_decode")
def greedy_softmax_then_argmax(model, src, max_len, bos_id, eos_id, pad_id):
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        seq = torch.full((len(src), 1), bos_id, device=src.device)
        finished = torch.zeros(len(src), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            probs = model.decode(
                seq, memory, src_mask, causal_mask(seq.shape[1], src.device)
            ).softmax(-1)
            token = probs[:, -1].argmax(-1)
            token = token.masked_fill(finished, pad_id)
            seq = torch.cat([seq, token.view(-1, 1)], 1)
            finished = finished | (token == eos_id)
            if finished.all():
                break
    return seq


@right("greedy_decode")
def greedy_rows_share_one_encoding(model, src, max_len, bos_id, eos_id, pad_id):
    model.eval()
    results = []
    with torch.no_grad():
        memory, src_mask = model.encode(src)  # once for the whole batch
        for i in range(src.size(0)):
            ys = torch.tensor([[bos_id]], device=src.device)
            for _ in range(max_len):
                mask = causal_mask(ys.size(1), src.device)
                logits = model.decode(ys, memory[i : i + 1], src_mask[i : i + 1], mask)
                token = logits[0, -1].argmax().view(1, 1)
                ys = torch.cat([ys, token], dim=1)
                if token.item() == eos_id:
                    break
            results.append(ys[0])
    return torch.nn.utils.rnn.pad_sequence(
        results, batch_first=True, padding_value=pad_id
    )


@right("greedy_decode")
def greedy_list_of_lists(model, src, max_len, bos_id, eos_id, pad_id):
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        seqs = [[bos_id] for _ in range(src.size(0))]
        for _ in range(max_len):
            if all(eos_id in s for s in seqs):
                break
            inp = torch.tensor(seqs, device=src.device)
            t = inp.size(1)
            logits = model.decode(
                inp,
                memory,
                src_mask,
                torch.tril(torch.ones(t, t, device=src.device)) > 0,
            )
            best = logits[:, -1].argmax(-1).tolist()
            for s, tok in zip(seqs, best):
                s.append(pad_id if eos_id in s else tok)
    return torch.tensor(seqs, dtype=torch.long, device=src.device)


# ------------------------------------------------------------------ wrong, listed


@wrong("greedy_decode", r"'stops the whole batch at the first EOS'", listed=True)
def greedy_stops_at_any_eos(model, src, max_len, bos_id, eos_id, pad_id):
    # "stop at EOS" applied to the batch: the first row to finish ends everyone's
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        for _ in range(max_len):
            logits = model.decode(out, memory, src_mask, causal_mask(out.size(1)))
            nxt = logits[:, -1].argmax(-1)
            out = torch.cat([out, nxt[:, None]], dim=1)
            if (nxt == eos_id).any():
                break
    return out


@wrong(
    "greedy_decode",
    r"'EOS replaced by pad_id'.*there you appended pad_id",
    listed=False,
)
def greedy_done_before_write(model, src, max_len, bos_id, eos_id, pad_id):
    # marks the row done as soon as EOS is chosen, then pads the done rows
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            logits = model.decode(out, memory, src_mask, causal_mask(out.size(1)))
            nxt = logits[:, -1].argmax(-1)
            done |= nxt == eos_id
            nxt = nxt.masked_fill(done, pad_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            if done.all():
                break
    return out


@wrong("greedy_decode", r"'argmax of the first position'", listed=True)
def greedy_first_position(model, src, max_len, bos_id, eos_id, pad_id):
    # logits[:, 0]: "the prediction" of a one-token input, kept for longer ones
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            logits = model.decode(out, memory, src_mask, causal_mask(out.size(1)))
            nxt = logits[:, 0].argmax(-1).masked_fill(done, pad_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            done |= nxt == eos_id
            if done.all():
                break
    return out


# ---------------------------------------------------------------- wrong, unlisted


@wrong("greedy_decode", r"'decoding in training mode'", listed=False)
def greedy_no_eval(model, src, max_len, bos_id, eos_id, pad_id):
    # no_grad remembered, eval() forgotten: dropout stays on
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            logits = model.decode(out, memory, src_mask, causal_mask(out.size(1)))
            nxt = logits[:, -1].argmax(-1).masked_fill(done, pad_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            done |= nxt == eos_id
            if done.all():
                break
    return out


@wrong("greedy_decode", r"'decoding with gradients enabled'", listed=False)
def greedy_no_no_grad(model, src, max_len, bos_id, eos_id, pad_id):
    # eval() is thought to switch autograd off too
    model.eval()
    memory, src_mask = model.encode(src)
    out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        logits = model.decode(out, memory, src_mask, causal_mask(out.size(1)))
        nxt = logits[:, -1].argmax(-1).masked_fill(done, pad_id)
        out = torch.cat([out, nxt[:, None]], dim=1)
        done |= nxt == eos_id
        if done.all():
            break
    return out


@wrong("greedy_decode", r"'source encoded at every step'", listed=False)
def greedy_full_forward(model, src, max_len, bos_id, eos_id, pad_id):
    # model(src, ys) as in training: the encoder runs again at every step
    model.eval()
    with torch.no_grad():
        ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            nxt = model(src, ys)[:, -1].argmax(-1).masked_fill(done, pad_id)
            ys = torch.cat([ys, nxt[:, None]], dim=1)
            done |= nxt == eos_id
            if done.all():
                break
    return ys


@wrong("greedy_decode", r"'source encoded at every step'", listed=False)
def greedy_encode_in_loop(model, src, max_len, bos_id, eos_id, pad_id):
    # encode moved inside the loop by accident
    model.eval()
    with torch.no_grad():
        ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            memory, src_mask = model.encode(src)
            logits = model.decode(ys, memory, src_mask, causal_mask(ys.size(1)))
            nxt = logits[:, -1].argmax(-1).masked_fill(done, pad_id)
            ys = torch.cat([ys, nxt[:, None]], dim=1)
            done |= nxt == eos_id
            if done.all():
                break
    return ys


@wrong(
    "greedy_decode", r"'greedy decoding without the causal mask'.*None", listed=False
)
def greedy_no_mask(model, src, max_len, bos_id, eos_id, pad_id):
    # "at inference there is no future to hide", so no mask
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            logits = model.decode(out, memory, src_mask)
            nxt = logits[:, -1].argmax(-1).masked_fill(done, pad_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            done |= nxt == eos_id
            if done.all():
                break
    return out


@wrong(
    "greedy_decode",
    r"'target mask not the causal one'.*tril\(-1\): no position saw itself",
    listed=False,
)
def greedy_mask_without_diagonal(model, src, max_len, bos_id, eos_id, pad_id):
    # "a token must not attend to itself": the diagonal taken out of the mask
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            t = out.size(1)
            mask = torch.tril(torch.ones(t, t, device=src.device), diagonal=-1).bool()
            logits = model.decode(out, memory, src_mask, mask)
            nxt = logits[:, -1].argmax(-1).masked_fill(done, pad_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            done |= nxt == eos_id
            if done.all():
                break
    return out


@wrong("greedy_decode", r"'upper triangular target mask'", listed=False)
def greedy_triu(model, src, max_len, bos_id, eos_id, pad_id):
    # triu where tril was meant
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            t = out.size(1)
            logits = model.decode(
                out, memory, src_mask, torch.triu(torch.ones(t, t, dtype=torch.bool))
            )
            nxt = logits[:, -1].argmax(-1).masked_fill(done, pad_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            done |= nxt == eos_id
            if done.all():
                break
    return out


@wrong(
    "greedy_decode",
    r"'target mask not the causal one'.*tril inverted",
    listed=False,
)
def greedy_inverted_mask(model, src, max_len, bos_id, eos_id, pad_id):
    # nn.Transformer's convention (True = blocked) handed to a True = keep model
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            blocked = torch.ones(out.size(1), out.size(1), dtype=torch.bool).triu(1)
            logits = model.decode(out, memory, src_mask, blocked)
            nxt = logits[:, -1].argmax(-1).masked_fill(done, pad_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            done |= nxt == eos_id
            if done.all():
                break
    return out


@wrong("greedy_decode", r"'start token not a LongTensor'.*float32", listed=False)
def greedy_float_start(model, src, max_len, bos_id, eos_id, pad_id):
    # the seed's torch.ones(1, 1).fill_(SOS): a float tensor
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.ones(src.size(0), 1).fill_(bos_id)
        done = torch.zeros(src.size(0), dtype=torch.bool)
        for _ in range(max_len):
            logits = model.decode(out, memory, src_mask, causal_mask(out.size(1)))
            nxt = logits[:, -1].argmax(-1).masked_fill(done, pad_id)
            out = torch.cat([out, nxt[:, None].float()], dim=1)
            done |= nxt == eos_id
            if done.all():
                break
    return out.long()


@wrong("greedy_decode", r"'decoding does not start from BOS'.*bos_id=12", listed=False)
def greedy_bos_hard_coded(model, src, max_len, bos_id, eos_id, pad_id):
    # BOS is 1 in the course, so 1 it is
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), 1, dtype=torch.long, device=src.device)
        done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            logits = model.decode(out, memory, src_mask, causal_mask(out.size(1)))
            nxt = logits[:, -1].argmax(-1).masked_fill(done, pad_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            done |= nxt == eos_id
            if done.all():
                break
    return out


@wrong("greedy_decode", r"'decoding does not start from BOS'.*read \[0", listed=False)
def greedy_starts_from_zeros(model, src, max_len, bos_id, eos_id, pad_id):
    # an empty-looking start column of zeros (PAD), then BOS written into the output
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.zeros(src.size(0), 1, dtype=torch.long, device=src.device)
        done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            logits = model.decode(out, memory, src_mask, causal_mask(out.size(1)))
            nxt = logits[:, -1].argmax(-1).masked_fill(done, pad_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            done |= nxt == eos_id
            if done.all():
                break
    out[:, 0] = bos_id
    return out


@wrong("greedy_decode", r"'decoder fed only the newest token'", listed=False)
def greedy_newest_token_only(model, src, max_len, bos_id, eos_id, pad_id):
    # "only the new token is new": as with a KV cache, but there is none
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            logits = model.decode(out[:, -1:], memory, src_mask, causal_mask(1))
            nxt = logits[:, -1].argmax(-1).masked_fill(done, pad_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            done |= nxt == eos_id
            if done.all():
                break
    return out


@wrong("greedy_decode", r"'memory from encode not used'", listed=False)
def greedy_zero_memory(model, src, max_len, bos_id, eos_id, pad_id):
    # a memory "placeholder" of the right shape, never replaced by the real one
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        context = torch.zeros_like(memory)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            logits = model.decode(out, context, src_mask, causal_mask(out.size(1)))
            nxt = logits[:, -1].argmax(-1).masked_fill(done, pad_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            done |= nxt == eos_id
            if done.all():
                break
    return out


@wrong("greedy_decode", r"'output without the leading BOS'", listed=False)
def greedy_drops_bos(model, src, max_len, bos_id, eos_id, pad_id):
    # "BOS is not part of the translation", so it is cut off
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            logits = model.decode(out, memory, src_mask, causal_mask(out.size(1)))
            nxt = logits[:, -1].argmax(-1).masked_fill(done, pad_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            done |= nxt == eos_id
            if done.all():
                break
    return out[:, 1:]


@wrong(
    "greedy_decode",
    r"'next token is not the argmax of the last position'.*argmin",
    listed=False,
)
def greedy_argmin(model, src, max_len, bos_id, eos_id, pad_id):
    # thinks of the logits as losses: the smallest is the best
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            logits = model.decode(out, memory, src_mask, causal_mask(out.size(1)))
            nxt = logits[:, -1].argmin(-1).masked_fill(done, pad_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            done |= nxt == eos_id
            if done.all():
                break
    return out


@wrong(
    "greedy_decode",
    r"'next token is not the argmax of the last position'.*positions axis",
    listed=False,
)
def greedy_argmax_over_time(model, src, max_len, bos_id, eos_id, pad_id):
    # argmax(dim=1) on [B, t, V]: the axis of positions, not of the vocabulary
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            logits = model.decode(out, memory, src_mask, causal_mask(out.size(1)))
            nxt = logits.argmax(dim=1)[:, -1].masked_fill(done, pad_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            done |= nxt == eos_id
            if done.all():
                break
    return out


@wrong(
    "greedy_decode",
    r"'next token is not the argmax of the last position'.*last position's argmax",
    listed=False,
)
def greedy_softmax_over_positions(model, src, max_len, bos_id, eos_id, pad_id):
    # softmax over dim=1 (positions) before the argmax changes which token wins
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            logits = model.decode(out, memory, src_mask, causal_mask(out.size(1)))
            probs = torch.softmax(logits, dim=1)
            nxt = probs[:, -1].argmax(-1).masked_fill(done, pad_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            done |= nxt == eos_id
            if done.all():
                break
    return out


@wrong(
    "greedy_decode",
    r"'next token is not the argmax of the last position'.*last position's argmax",
    listed=False,
)
def greedy_samples(model, src, max_len, bos_id, eos_id, pad_id):
    # samples from the softmax: that is sampling, not greedy decoding
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        g = torch.Generator(device=src.device).manual_seed(0)
        for _ in range(max_len):
            logits = model.decode(out, memory, src_mask, causal_mask(out.size(1)))
            probs = logits[:, -1].softmax(-1)
            nxt = torch.multinomial(probs, 1, generator=g)[:, 0]
            nxt = nxt.masked_fill(done, pad_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            done |= nxt == eos_id
            if done.all():
                break
    return out


@wrong(
    "greedy_decode",
    r"'max_len counted wrong'.*\[7\] new tokens.*max_len=8",
    listed=False,
)
def greedy_one_step_short(model, src, max_len, bos_id, eos_id, pad_id):
    # range(max_len - 1) "because BOS is already there"
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len - 1):
            logits = model.decode(out, memory, src_mask, causal_mask(out.size(1)))
            nxt = logits[:, -1].argmax(-1).masked_fill(done, pad_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            done |= nxt == eos_id
            if done.all():
                break
    return out


@wrong("greedy_decode", r"'max_len counted wrong'.*\[7\] new tokens", listed=False)
def greedy_total_length_max_len(model, src, max_len, bos_id, eos_id, pad_id):
    # max_len read as the output's total length, BOS included
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        while out.size(1) < max_len and not done.all():
            logits = model.decode(out, memory, src_mask, causal_mask(out.size(1)))
            nxt = logits[:, -1].argmax(-1).masked_fill(done, pad_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            done |= nxt == eos_id
    return out


@wrong("greedy_decode", r"'max_len counted wrong'.*\[9\] new tokens", listed=False)
def greedy_one_step_long(model, src, max_len, bos_id, eos_id, pad_id):
    # range(max_len + 1) "so that max_len tokens come after BOS"
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len + 1):
            logits = model.decode(out, memory, src_mask, causal_mask(out.size(1)))
            nxt = logits[:, -1].argmax(-1).masked_fill(done, pad_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            done |= nxt == eos_id
            if done.all():
                break
    return out


@wrong(
    "greedy_decode",
    r"'finished rows not padded with pad_id'.*hold (2|11);",
    listed=False,
)
def greedy_pads_with_eos(model, src, max_len, bos_id, eos_id, pad_id):
    # finished rows repeat EOS instead of PAD
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            logits = model.decode(out, memory, src_mask, causal_mask(out.size(1)))
            nxt = logits[:, -1].argmax(-1).masked_fill(done, eos_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            done |= nxt == eos_id
            if done.all():
                break
    return out


@wrong(
    "greedy_decode",
    r"'finished rows not padded with pad_id'.*hold 0; pad_id=10",
    listed=False,
)
def greedy_pad_hard_coded(model, src, max_len, bos_id, eos_id, pad_id):
    # PAD written as 0, the course's usual id
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            logits = model.decode(out, memory, src_mask, causal_mask(out.size(1)))
            nxt = logits[:, -1].argmax(-1).masked_fill(done, 0)
            out = torch.cat([out, nxt[:, None]], dim=1)
            done |= nxt == eos_id
            if done.all():
                break
    return out


@wrong(
    "greedy_decode", r"'greedy decoding does not stop at EOS'.*went on", listed=False
)
def greedy_never_breaks(model, src, max_len, bos_id, eos_id, pad_id):
    # pads finished rows but always runs max_len steps
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            logits = model.decode(out, memory, src_mask, causal_mask(out.size(1)))
            nxt = logits[:, -1].argmax(-1).masked_fill(done, pad_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            done |= nxt == eos_id
    return out


@wrong("greedy_decode", r"'greedy decoding does not stop at EOS'", listed=False)
def greedy_forgets_finished(model, src, max_len, bos_id, eos_id, pad_id):
    # finished overwritten at each step instead of accumulated
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        finished = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            logits = model.decode(out, memory, src_mask, causal_mask(out.size(1)))
            nxt = logits[:, -1].argmax(-1).masked_fill(finished, pad_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            finished = nxt == eos_id
            if finished.all():
                break
    return out


@wrong(
    "greedy_decode",
    r"'greedy decoding does not stop at EOS'.*eos_id=11|"
    r"'greedy decoding does not stop at EOS'.*after its EOS",
    listed=False,
)
def greedy_eos_hard_coded(model, src, max_len, bos_id, eos_id, pad_id):
    # EOS written as 2, the course's usual id
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            logits = model.decode(out, memory, src_mask, causal_mask(out.size(1)))
            nxt = logits[:, -1].argmax(-1).masked_fill(done, pad_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            done |= nxt == 2
            if done.all():
                break
    return out


@wrong("greedy_decode", r"expected a LongTensor \[B=6, T\].*got list", listed=False)
def greedy_returns_lists(model, src, max_len, bos_id, eos_id, pad_id):
    # a list of token lists, "easier to print"
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            logits = model.decode(out, memory, src_mask, causal_mask(out.size(1)))
            nxt = logits[:, -1].argmax(-1).masked_fill(done, pad_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            done |= nxt == eos_id
            if done.all():
                break
    return out.tolist()


@wrong("greedy_decode", r"'output not a LongTensor'.*float32", listed=False)
def greedy_float_output(model, src, max_len, bos_id, eos_id, pad_id):
    # keeps a float buffer for the output and casts only what goes into the model
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), float(bos_id), device=src.device)
        done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            mask = causal_mask(out.size(1))
            logits = model.decode(out.long(), memory, src_mask, mask)
            nxt = logits[:, -1].argmax(-1).masked_fill(done, pad_id)
            out = torch.cat([out, nxt[:, None].float()], dim=1)
            done |= nxt == eos_id
            if done.all():
                break
    return out


@wrong("greedy_decode", r"expected a LongTensor \[B=6, T\].*shape \[1, ", listed=False)
def greedy_first_row_only(model, src, max_len, bos_id, eos_id, pad_id):
    # written for one sentence: src[0] only, the rest of the batch is dropped
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src[:1])
        ys = torch.tensor([[bos_id]], device=src.device)
        for _ in range(max_len):
            logits = model.decode(ys, memory, src_mask, causal_mask(ys.size(1)))
            token = logits[0, -1].argmax()
            ys = torch.cat([ys, token.view(1, 1)], dim=1)
            if token.item() == eos_id:
                break
    return ys


@wrong("greedy_decode", r"'rows cut short'", listed=False)
def greedy_breaks_before_appending(model, src, max_len, bos_id, eos_id, pad_id):
    # tests for the end before the last token is added: the final EOS is lost
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            logits = model.decode(out, memory, src_mask, causal_mask(out.size(1)))
            nxt = logits[:, -1].argmax(-1).masked_fill(done, pad_id)
            done |= nxt == eos_id
            if done.all():
                break
            out = torch.cat([out, nxt[:, None]], dim=1)
    return out


@wrong("greedy_decode", r"'output without the leading BOS'", listed=False)
def greedy_prepends(model, src, max_len, bos_id, eos_id, pad_id):
    # new tokens concatenated in front of the sequence
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            logits = model.decode(out, memory, src_mask, causal_mask(out.size(1)))
            nxt = logits[:, -1].argmax(-1).masked_fill(done, pad_id)
            out = torch.cat([nxt[:, None], out], dim=1)
            done |= nxt == eos_id
            if done.all():
                break
    return out


@wrong(
    "greedy_decode",
    r"'appended tokens are not vocabulary ids'.*V = 13 ids.*the "
    r"flat index of the largest of all the scores in logits\[:, -1\]",
    listed=False,
)
def greedy_argmax_no_dim(model, src, max_len, bos_id, eos_id, pad_id):
    # logits[:, -1].argmax() without dim: one flat index for the whole batch
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            logits = model.decode(
                out, memory, src_mask, causal_mask(out.size(1), src.device)
            )
            nxt = logits[:, -1].argmax().expand(src.size(0)).clone()
            nxt = nxt.masked_fill(done, pad_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            done |= nxt == eos_id
            if done.all():
                break
    return out


@wrong(
    "greedy_decode",
    r"'appended tokens are not vocabulary ids'.*V = 13 ids.*an "
    r"argmax without dim",
    listed=False,
)
def greedy_torch_argmax_whole(model, src, max_len, bos_id, eos_id, pad_id):
    # torch.argmax(logits) "picks the best token": flat over batch, time and vocab
    model.eval()
    B = src.shape[0]
    with torch.inference_mode():
        memory, src_mask = model.encode(src)
        ys = torch.ones(B, 1, dtype=torch.long, device=src.device) * bos_id
        ended = torch.zeros(B, dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            scores = model.decode(
                ys, memory, src_mask, causal_mask(ys.shape[1], src.device)
            )
            best = torch.argmax(scores).repeat(B)
            best[ended] = pad_id
            ys = torch.cat((ys, best.unsqueeze(1)), 1)
            ended = ended | (best == eos_id)
            if bool(ended.all()):
                break
    return ys


@wrong(
    "greedy_decode",
    r"'target mask not the causal one'.*your target mask was tril inverted",
    listed=False,
)
def greedy_mask_of_the_future(model, src, max_len, bos_id, eos_id, pad_id):
    # "mask the future": marks the later positions True, as a mask of what to hide
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            t = out.size(1)
            future = torch.ones(t, t, dtype=torch.bool, device=src.device).triu(1)
            logits = model.decode(out, memory, src_mask, future)
            nxt = logits[:, -1].argmax(-1).masked_fill(done, pad_id)
            out = torch.cat([out, nxt.unsqueeze(1)], dim=1)
            done = done | (nxt == eos_id)
            if done.all():
                break
    return out
