"""The measured bank of the decoding bug hunt (notebook ch06_bughunt): the seed's
generate_text, fixed (the format: tests/bank/bank.py).

The learner's loop lives in the notebook next to the setup cell, which defines the
seed's create_trg_mask (verbatim), create_src_mask and the token ids: they are repeated
below, as the loops use them (and the checks look create_trg_mask up in the loop's
globals, as they do in the notebook).
"""

import torch
from bank import GENERIC, right, wrong  # noqa: F401
from exercise_cells import graders

from tformer_grading.checks.bughunt_decoding import EOS_IDX, PAD_IDX, SOS_IDX
from tformer_ref.masks import causal_mask

GRADERS = graders("ch06_bughunt", {"generate_text": "generate_text"})


# The setup cell's seed create_trg_mask, verbatim.
def create_trg_mask(trg):
    N, trg_len = trg.shape
    trg_mask = torch.tril(torch.ones((trg_len, trg_len))).expand(N, 1, trg_len, trg_len)

    return trg_mask


# The setup cell's create_src_mask.
def create_src_mask(src):
    """src [N, S] -> [N, 1, 1, S], True where the token is not padding."""
    return (src != PAD_IDX).unsqueeze(1).unsqueeze(2)


# ------------------------------------------------------------------------------- right


@right("generate_text")
def fixed_as_in_the_solution(model, src, max_length, device):
    model.eval()
    with torch.no_grad():
        src_mask = create_src_mask(src)
        enc_src = model.encoder(src, src_mask)
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)
        for i in range(max_length - 1):
            trg_mask = create_trg_mask(trg).to(device)
            output = model.decoder(trg, enc_src, src_mask, trg_mask)
            next_token = output.argmax(2)[:, -1].item()
            trg = torch.cat(
                [trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1
            )
            if next_token == EOS_IDX:
                break
    return trg


@right("generate_text")
def fixed_with_inline_bool_masks(model, src, max_length, device):
    model.eval()
    with torch.no_grad():
        src_mask = (src != PAD_IDX)[:, None, None, :]
        enc_src = model.encoder(src, src_mask)
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)
        for i in range(max_length - 1):
            t = trg.size(1)
            trg_mask = torch.tril(torch.ones(t, t, dtype=torch.bool, device=device))
            output = model.decoder(trg, enc_src, src_mask, trg_mask)
            next_token = output.argmax(2)[:, -1].item()
            trg = torch.cat(
                [trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1
            )
            if next_token == EOS_IDX:
                break
    return trg


@right("generate_text")
def fixed_with_new_ones(model, src, max_length, device):
    model.eval()
    with torch.no_grad():
        src_mask = src.ne(PAD_IDX).unsqueeze(1).unsqueeze(1)
        enc_src = model.encoder(src, src_mask)
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)
        for i in range(max_length - 1):
            n = trg.shape[1]
            trg_mask = trg.new_ones(n, n).tril()  # on trg's device already
            output = model.decoder(trg, enc_src, src_mask, trg_mask)
            next_token = output.argmax(2)[:, -1].item()
            trg = torch.cat(
                [trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1
            )
            if next_token == EOS_IDX:
                break
    return trg


@right("generate_text")
def fixed_by_dropping_the_padding(model, src, max_length, device):
    model.eval()
    with torch.no_grad():
        src = src[:, src[0] != PAD_IDX]  # one sequence: cut its padding off
        enc_src = model.encoder(src, None)
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)
        for i in range(max_length - 1):
            trg_mask = create_trg_mask(trg).to(device)
            output = model.decoder(trg, enc_src, None, trg_mask)
            next_token = output.argmax(2)[:, -1].item()
            trg = torch.cat(
                [trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1
            )
            if next_token == EOS_IDX:
                break
    return trg


@right("generate_text")
def fixed_with_arange_and_a_tensor_token(model, src, max_length, device):
    model.eval()
    with torch.no_grad():
        src_mask = create_src_mask(src)
        enc_src = model.encoder(src, src_mask)
        trg = torch.full((1, 1), SOS_IDX, dtype=torch.long, device=device)
        for i in range(max_length - 1):
            pos = torch.arange(trg.size(1), device=device)
            trg_mask = pos[:, None] >= pos[None, :]
            output = model.decoder(trg, enc_src, src_mask, trg_mask)
            next_token = output[:, -1].argmax(-1, keepdim=True)  # [1, 1]
            trg = torch.cat([trg, next_token], dim=1)
            if next_token.item() == EOS_IDX:
                break
    return trg


@right("generate_text")
def fixed_with_triu_complement(model, src, max_length, device):
    model.eval()
    with torch.no_grad():
        src_mask = (src != PAD_IDX).long().view(1, 1, 1, -1)
        enc_src = model.encoder(src, src_mask)
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)
        for i in range(max_length - 1):
            size = trg.size(-1)
            future = torch.triu(torch.ones(size, size, device=device), diagonal=1)
            trg_mask = future == 0
            output = model.decoder(trg, enc_src, src_mask, trg_mask)
            next_token = output.argmax(2)[:, -1].item()
            trg = torch.cat(
                [trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1
            )
            if next_token == EOS_IDX:
                break
    return trg


@right("generate_text")
def fixed_moving_to_the_sources_device(model, src, max_length, device):
    model.eval()
    with torch.no_grad():
        src_mask = src.bool()[:, None, None]  # PAD_IDX is 0: False at the padding
        enc_src = model.encoder(src, src_mask)
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)
        for i in range(max_length - 1):
            trg_mask = create_trg_mask(trg).to(src)  # src's device (and dtype)
            output = model.decoder(trg, enc_src, src_mask, trg_mask)
            next_token = output.argmax(2)[:, -1].item()
            trg = torch.cat(
                [trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1
            )
            if next_token == EOS_IDX:
                break
    return trg


@right("generate_text")
def fixed_restoring_the_mode(model, src, max_length, device):
    was_training = model.training
    model.eval()
    with torch.inference_mode():
        src_mask = create_src_mask(src)
        enc_src = model.encoder(src, src_mask)
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)
        for i in range(max_length - 1):
            trg_mask = create_trg_mask(trg).type_as(enc_src)
            output = model.decoder(trg, enc_src, src_mask, trg_mask)
            next_token = output.argmax(2)[:, -1].item()
            trg = torch.cat(
                [trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1
            )
            if next_token == EOS_IDX:
                break
    model.train(was_training)  # as the reference's greedy_decode does
    return trg


@right("generate_text")
def fixed_with_a_preallocated_buffer(model, src, max_length, device):
    model.eval()
    with torch.no_grad():
        src_mask = create_src_mask(src)
        enc_src = model.encoder(src, src_mask)
        buf = torch.full((1, max_length), PAD_IDX, dtype=torch.long, device=device)
        buf[0, 0] = SOS_IDX
        full = torch.tril(torch.ones(max_length, max_length, device=device))
        n = 1
        while n < max_length:
            output = model.decoder(buf[:, :n], enc_src, src_mask, full[:n, :n])
            buf[0, n] = output[0, -1].argmax()
            n += 1
            if buf[0, n - 1].item() == EOS_IDX:
                break
    return buf[:, :n]


@right("generate_text")
def fixed_with_the_courses_causal_mask(model, src, max_length, device):
    model.eval()
    with torch.no_grad():
        src_mask = create_src_mask(src).to(device)
        enc_src = model.encoder(src, src_mask)
        tokens = [SOS_IDX]
        for i in range(max_length - 1):
            trg = torch.tensor([tokens], device=device)
            output = model.decoder(
                trg, enc_src, src_mask, causal_mask(len(tokens), device)
            )
            tokens.append(int(output[0, -1].argmax()))
            if tokens[-1] == EOS_IDX:
                break
    return torch.tensor([tokens], device=device)


# ------------------------------------------------------------------ wrong, listed


@wrong(
    "generate_text",
    r"'create_trg_mask called as a method of model.decoder'",
    listed=True,
)
def seed_as_printed(model, src, max_length, device):
    # the seed's loop left as it is: all three bugs
    model.eval()
    with torch.no_grad():
        enc_src = model.encoder(src, None)
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)
        for i in range(max_length - 1):
            trg_mask = model.decoder.create_trg_mask(trg)
            output = model.decoder(trg, enc_src, None, trg_mask)
            next_token = output.argmax(2)[:, -1].item()
            trg = torch.cat(
                [trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1
            )
            if next_token == EOS_IDX:
                break
    return trg


@wrong(
    "generate_text",
    r"'tensor built without a device'.*torch\.ones\(\(trg_len",
    listed=True,
)
def only_the_method_call_fixed(model, src, max_length, device):
    # the AttributeError fixed and nothing else: the mask stays on the CPU, no src mask
    model.eval()
    with torch.no_grad():
        enc_src = model.encoder(src, None)
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)
        for i in range(max_length - 1):
            trg_mask = create_trg_mask(trg)
            output = model.decoder(trg, enc_src, None, trg_mask)
            next_token = output.argmax(2)[:, -1].item()
            trg = torch.cat(
                [trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1
            )
            if next_token == EOS_IDX:
                break
    return trg


@wrong("generate_text", r"'padding in the source attended to'", listed=True)
def padding_bug_left(model, src, max_length, device):
    # the two mask bugs fixed, the source still encoded and decoded with None
    model.eval()
    with torch.no_grad():
        enc_src = model.encoder(src, None)
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)
        for i in range(max_length - 1):
            trg_mask = create_trg_mask(trg).to(device)
            output = model.decoder(trg, enc_src, None, trg_mask)
            next_token = output.argmax(2)[:, -1].item()
            trg = torch.cat(
                [trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1
            )
            if next_token == EOS_IDX:
                break
    return trg


@wrong("generate_text", r"'tensor built without a device'", listed=True)
def device_bug_left(model, src, max_length, device):
    # the method call and the padding fixed, the CPU mask not seen on a CPU
    model.eval()
    with torch.no_grad():
        src_mask = create_src_mask(src)
        enc_src = model.encoder(src, src_mask)
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)
        for i in range(max_length - 1):
            trg_mask = create_trg_mask(trg)
            output = model.decoder(trg, enc_src, src_mask, trg_mask)
            next_token = output.argmax(2)[:, -1].item()
            trg = torch.cat(
                [trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1
            )
            if next_token == EOS_IDX:
                break
    return trg


@wrong(
    "generate_text",
    r"'create_trg_mask called as a method of model.decoder'",
    listed=True,
)
def method_bug_left(model, src, max_length, device):
    # device and padding fixed, the method call kept (`.to(device)` added to it)
    model.eval()
    with torch.no_grad():
        src_mask = create_src_mask(src)
        enc_src = model.encoder(src, src_mask)
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)
        for i in range(max_length - 1):
            trg_mask = model.decoder.create_trg_mask(trg).to(device)
            output = model.decoder(trg, enc_src, src_mask, trg_mask)
            next_token = output.argmax(2)[:, -1].item()
            trg = torch.cat(
                [trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1
            )
            if next_token == EOS_IDX:
                break
    return trg


# ---------------------------------------------------------------- wrong, unlisted


@wrong("generate_text", r"'decoding in training mode'", listed=False)
def eval_without_parentheses(model, src, max_length, device):
    # model.eval without the call: dropout stays on
    model.eval  # noqa: B018 - the mistake: the method named, not called
    with torch.no_grad():
        src_mask = create_src_mask(src)
        enc_src = model.encoder(src, src_mask)
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)
        for i in range(max_length - 1):
            trg_mask = create_trg_mask(trg).to(device)
            output = model.decoder(trg, enc_src, src_mask, trg_mask)
            next_token = output.argmax(2)[:, -1].item()
            trg = torch.cat(
                [trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1
            )
            if next_token == EOS_IDX:
                break
    return trg


@wrong("generate_text", r"'causal mask inverted'", listed=False)
def triu_for_tril(model, src, max_length, device):
    # "mask the future" read as: 1 above the diagonal, where the future is
    model.eval()
    with torch.no_grad():
        src_mask = create_src_mask(src)
        enc_src = model.encoder(src, src_mask)
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)
        for i in range(max_length - 1):
            t = trg.size(1)
            trg_mask = torch.triu(torch.ones(t, t, device=device), diagonal=1)
            output = model.decoder(trg, enc_src, src_mask, trg_mask)
            next_token = output.argmax(2)[:, -1].item()
            trg = torch.cat(
                [trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1
            )
            if next_token == EOS_IDX:
                break
    return trg


@wrong("generate_text", r"'causal mask inverted'", listed=False)
def additive_minus_inf_mask(model, src, max_length, device):
    # an additive mask (0 kept, -1e9 hidden) given to a model that hides the zeros
    model.eval()
    with torch.no_grad():
        src_mask = create_src_mask(src)
        enc_src = model.encoder(src, src_mask)
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)
        for i in range(max_length - 1):
            t = trg.size(1)
            trg_mask = torch.full((t, t), -1e9, device=device).triu(1)
            output = model.decoder(trg, enc_src, src_mask, trg_mask)
            next_token = output.argmax(2)[:, -1].item()
            trg = torch.cat(
                [trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1
            )
            if next_token == EOS_IDX:
                break
    return trg


@wrong("generate_text", r"'causal mask inverted'", listed=False)
def tril_then_not(model, src, max_length, device):
    # builds the keep-mask, then flips it "to get the positions to mask"
    model.eval()
    with torch.no_grad():
        src_mask = create_src_mask(src)
        enc_src = model.encoder(src, src_mask)
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)
        for i in range(max_length - 1):
            keep = create_trg_mask(trg).to(device).bool()
            trg_mask = ~keep
            output = model.decoder(trg, enc_src, src_mask, trg_mask)
            next_token = output.argmax(2)[:, -1].item()
            trg = torch.cat(
                [trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1
            )
            if next_token == EOS_IDX:
                break
    return trg


@wrong("generate_text", r"'decoding without the causal target mask'", listed=False)
def target_mask_dropped(model, src, max_length, device):
    # the broken create_trg_mask call removed altogether: "one step decodes one token"
    model.eval()
    with torch.no_grad():
        src_mask = create_src_mask(src)
        enc_src = model.encoder(src, src_mask)
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)
        for i in range(max_length - 1):
            output = model.decoder(trg, enc_src, src_mask, None)
            next_token = output.argmax(2)[:, -1].item()
            trg = torch.cat(
                [trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1
            )
            if next_token == EOS_IDX:
                break
    return trg


@wrong("generate_text", r"'decoding without the causal target mask'", listed=False)
def target_mask_built_once_before_the_loop(model, src, max_length, device):
    # the mask hoisted out of the loop, built for the one-token trg it starts with
    model.eval()
    with torch.no_grad():
        src_mask = create_src_mask(src)
        enc_src = model.encoder(src, src_mask)
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)
        trg_mask = create_trg_mask(trg).to(device)
        for i in range(max_length - 1):
            output = model.decoder(trg, enc_src, src_mask, trg_mask)
            next_token = output.argmax(2)[:, -1].item()
            trg = torch.cat(
                [trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1
            )
            if next_token == EOS_IDX:
                break
    return trg


@wrong("generate_text", r"'decoding without the causal target mask'", listed=False)
def mask_size_from_the_batch_axis(model, src, max_length, device):
    # the length read from trg.size(0), the batch axis: a 1 x 1 mask every step
    model.eval()
    with torch.no_grad():
        src_mask = create_src_mask(src)
        enc_src = model.encoder(src, src_mask)
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)
        for i in range(max_length - 1):
            t = trg.size(0)
            trg_mask = torch.tril(torch.ones(t, t, device=device))
            output = model.decoder(trg, enc_src, src_mask, trg_mask)
            next_token = output.argmax(2)[:, -1].item()
            trg = torch.cat(
                [trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1
            )
            if next_token == EOS_IDX:
                break
    return trg


@wrong("generate_text", r"'target mask built for the wrong length'", listed=False)
def mask_for_max_length(model, src, max_length, device):
    # one mask for the longest output, built before the loop and never cut down
    model.eval()
    with torch.no_grad():
        src_mask = create_src_mask(src)
        enc_src = model.encoder(src, src_mask)
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)
        trg_mask = torch.tril(torch.ones(max_length, max_length, device=device))
        for i in range(max_length - 1):
            output = model.decoder(trg, enc_src, src_mask, trg_mask)
            next_token = output.argmax(2)[:, -1].item()
            trg = torch.cat(
                [trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1
            )
            if next_token == EOS_IDX:
                break
    return trg


@wrong("generate_text", r"'target mask built for the wrong length'", listed=False)
def mask_sliced_one_too_long(model, src, max_length, device):
    # slices the full mask to i + 2 "because of the token about to be added"
    model.eval()
    with torch.no_grad():
        src_mask = create_src_mask(src)
        enc_src = model.encoder(src, src_mask)
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)
        full = torch.tril(torch.ones(max_length, max_length, device=device))
        for i in range(max_length - 1):
            trg_mask = full[: i + 2, : i + 2]
            output = model.decoder(trg, enc_src, src_mask, trg_mask)
            next_token = output.argmax(2)[:, -1].item()
            trg = torch.cat(
                [trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1
            )
            if next_token == EOS_IDX:
                break
    return trg


@wrong("generate_text", r"'target mask built for the wrong length'", listed=False)
def mask_rebuilt_before_the_append(model, src, max_length, device):
    # the next step's mask made at the end of the step, before trg grows
    model.eval()
    with torch.no_grad():
        src_mask = create_src_mask(src)
        enc_src = model.encoder(src, src_mask)
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)
        trg_mask = create_trg_mask(trg).to(device)
        for i in range(max_length - 1):
            output = model.decoder(trg, enc_src, src_mask, trg_mask)
            next_token = output.argmax(2)[:, -1].item()
            trg_mask = create_trg_mask(trg).to(device)
            trg = torch.cat(
                [trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1
            )
            if next_token == EOS_IDX:
                break
    return trg


@wrong("generate_text", r"'target mask not causal'", listed=False)
def tril_strictly_below(model, src, max_length, device):
    # diagonal=-1 "so a position cannot see the token it predicts"
    model.eval()
    with torch.no_grad():
        src_mask = create_src_mask(src)
        enc_src = model.encoder(src, src_mask)
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)
        for i in range(max_length - 1):
            t = trg.size(1)
            trg_mask = torch.tril(torch.ones(t, t, device=device), diagonal=-1)
            output = model.decoder(trg, enc_src, src_mask, trg_mask)
            next_token = output.argmax(2)[:, -1].item()
            trg = torch.cat(
                [trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1
            )
            if next_token == EOS_IDX:
                break
    return trg


@wrong("generate_text", r"target mask was \[\[1, 1\], \[1, 1\]\]", listed=False)
def tril_one_ahead(model, src, max_length, device):
    # diagonal=1 "so the last position sees the token it is predicting"
    model.eval()
    with torch.no_grad():
        src_mask = create_src_mask(src)
        enc_src = model.encoder(src, src_mask)
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)
        for i in range(max_length - 1):
            t = trg.size(1)
            trg_mask = torch.ones(t, t, device=device).tril(diagonal=1)
            output = model.decoder(trg, enc_src, src_mask, trg_mask)
            next_token = output.argmax(2)[:, -1].item()
            trg = torch.cat(
                [trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1
            )
            if next_token == EOS_IDX:
                break
    return trg


@wrong("generate_text", r"'tensor built without a device'.*torch\.tril", listed=False)
def inline_tril_without_device(model, src, max_length, device):
    # the method call replaced by an inline mask, made on the CPU like the seed's
    model.eval()
    with torch.no_grad():
        src_mask = create_src_mask(src)
        enc_src = model.encoder(src, src_mask)
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)
        for i in range(max_length - 1):
            t = trg.size(1)
            trg_mask = torch.tril(torch.ones(t, t))
            output = model.decoder(trg, enc_src, src_mask, trg_mask)
            next_token = output.argmax(2)[:, -1].item()
            trg = torch.cat(
                [trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1
            )
            if next_token == EOS_IDX:
                break
    return trg


@wrong("generate_text", r"'tensor built without a device'.*CPU by name", listed=False)
def mask_moved_to_the_cpu(model, src, max_length, device):
    # "the masks live on the CPU": both moved there by name
    model.eval()
    with torch.no_grad():
        src_mask = create_src_mask(src).to("cpu")
        enc_src = model.encoder(src, src_mask)
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)
        for i in range(max_length - 1):
            trg_mask = create_trg_mask(trg).to("cpu")
            output = model.decoder(trg, enc_src, src_mask, trg_mask)
            next_token = output.argmax(2)[:, -1].item()
            trg = torch.cat(
                [trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1
            )
            if next_token == EOS_IDX:
                break
    return trg


@wrong("generate_text", r"'tensor built without a device'.*torch\.tensor", listed=False)
def appended_token_not_moved(model, src, max_length, device):
    # the append rewritten with torch.tensor, its .to(device) lost on the way
    model.eval()
    with torch.no_grad():
        src_mask = create_src_mask(src)
        enc_src = model.encoder(src, src_mask)
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)
        for i in range(max_length - 1):
            trg_mask = create_trg_mask(trg).to(device)
            output = model.decoder(trg, enc_src, src_mask, trg_mask)
            next_token = output.argmax(2)[:, -1].item()
            trg = torch.cat([trg, torch.tensor([[next_token]])], dim=1)
            if next_token == EOS_IDX:
                break
    return trg


@wrong(
    "generate_text", r"'padding in the source attended to'.*decoder calls", listed=False
)
def source_mask_for_the_encoder_only(model, src, max_length, device):
    # half of bug 3: the encoder masks the padding, the cross-attention does not
    model.eval()
    with torch.no_grad():
        src_mask = create_src_mask(src)
        enc_src = model.encoder(src, src_mask)
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)
        for i in range(max_length - 1):
            trg_mask = create_trg_mask(trg).to(device)
            output = model.decoder(trg, enc_src, None, trg_mask)
            next_token = output.argmax(2)[:, -1].item()
            trg = torch.cat(
                [trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1
            )
            if next_token == EOS_IDX:
                break
    return trg


@wrong(
    "generate_text",
    r"'padding in the source attended to'.*model\.encoder call",
    listed=False,
)
def source_mask_for_the_decoder_only(model, src, max_length, device):
    # the other half: the decoder gets the mask, the encoder still None
    model.eval()
    with torch.no_grad():
        enc_src = model.encoder(src, None)
        src_mask = create_src_mask(src)
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)
        for i in range(max_length - 1):
            trg_mask = create_trg_mask(trg).to(device)
            output = model.decoder(trg, enc_src, src_mask, trg_mask)
            next_token = output.argmax(2)[:, -1].item()
            trg = torch.cat(
                [trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1
            )
            if next_token == EOS_IDX:
                break
    return trg


@wrong("generate_text", r"'padding in the source attended to'", listed=False)
def source_mask_compared_with_sos(model, src, max_length, device):
    # the padding id mixed up with SOS_IDX: no position of src is masked
    model.eval()
    with torch.no_grad():
        src_mask = (src != SOS_IDX).unsqueeze(1).unsqueeze(2)
        enc_src = model.encoder(src, src_mask)
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)
        for i in range(max_length - 1):
            trg_mask = create_trg_mask(trg).to(device)
            output = model.decoder(trg, enc_src, src_mask, trg_mask)
            next_token = output.argmax(2)[:, -1].item()
            trg = torch.cat(
                [trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1
            )
            if next_token == EOS_IDX:
                break
    return trg


@wrong("generate_text", r"'padding in the source attended to'", listed=False)
def source_mask_of_ones(model, src, max_length, device):
    # "None" replaced by a mask of the right shape, but all ones
    model.eval()
    with torch.no_grad():
        src_mask = torch.ones(1, 1, 1, src.size(1), device=device)
        enc_src = model.encoder(src, src_mask)
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)
        for i in range(max_length - 1):
            trg_mask = create_trg_mask(trg).to(device)
            output = model.decoder(trg, enc_src, src_mask, trg_mask)
            next_token = output.argmax(2)[:, -1].item()
            trg = torch.cat(
                [trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1
            )
            if next_token == EOS_IDX:
                break
    return trg


@wrong(
    "generate_text",
    r"'source mask not built from src'.*masked the real tokens",
    listed=False,
)
def source_mask_marks_the_padding(model, src, max_length, device):
    # the mask convention inverted: True where the padding is, "the part to mask"
    model.eval()
    with torch.no_grad():
        src_mask = (src == PAD_IDX).unsqueeze(1).unsqueeze(2)
        enc_src = model.encoder(src, src_mask)
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)
        for i in range(max_length - 1):
            trg_mask = create_trg_mask(trg).to(device)
            output = model.decoder(trg, enc_src, src_mask, trg_mask)
            next_token = output.argmax(2)[:, -1].item()
            trg = torch.cat(
                [trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1
            )
            if next_token == EOS_IDX:
                break
    return trg


@wrong(
    "generate_text",
    r"'source mask not built from src'.*masked the real tokens",
    listed=False,
)
def source_mask_additive(model, src, max_length, device):
    # an additive source mask (0 at real tokens, -inf at padding): zeros are masked here
    model.eval()
    with torch.no_grad():
        pad = (src == PAD_IDX)[:, None, None, :]
        src_mask = torch.zeros(pad.shape, device=device).masked_fill(pad, float("-inf"))
        enc_src = model.encoder(src, src_mask)
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)
        for i in range(max_length - 1):
            trg_mask = create_trg_mask(trg).to(device)
            output = model.decoder(trg, enc_src, src_mask, trg_mask)
            next_token = output.argmax(2)[:, -1].item()
            trg = torch.cat(
                [trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1
            )
            if next_token == EOS_IDX:
                break
    return trg


@wrong("generate_text", r"'source mask not built from src'.*had shape", listed=False)
def decoder_source_mask_from_trg(model, src, max_length, device):
    # create_src_mask called on trg for the decoder, as if it masked the target
    model.eval()
    with torch.no_grad():
        enc_src = model.encoder(src, create_src_mask(src))
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)
        for i in range(max_length - 1):
            trg_mask = create_trg_mask(trg).to(device)
            output = model.decoder(trg, enc_src, create_src_mask(trg), trg_mask)
            next_token = output.argmax(2)[:, -1].item()
            trg = torch.cat(
                [trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1
            )
            if next_token == EOS_IDX:
                break
    return trg


@wrong("generate_text", r"target mask had shape \[1, 1, 1, \d+\]", listed=False)
def decoder_masks_swapped(model, src, max_length, device):
    # decoder(trg, enc_src, trg_mask, src_mask): the two masks in each other's place
    model.eval()
    with torch.no_grad():
        src_mask = create_src_mask(src)
        enc_src = model.encoder(src, src_mask)
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)
        for i in range(max_length - 1):
            trg_mask = create_trg_mask(trg).to(device)
            output = model.decoder(trg, enc_src, trg_mask, src_mask)
            next_token = output.argmax(2)[:, -1].item()
            trg = torch.cat(
                [trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1
            )
            if next_token == EOS_IDX:
                break
    return trg


@wrong("generate_text", r"'the loop returns the wrong number of tokens'", listed=False)
def stops_before_appending_eos(model, src, max_length, device):
    # the EOS test moved before the append: EOS never reaches trg
    model.eval()
    with torch.no_grad():
        src_mask = create_src_mask(src)
        enc_src = model.encoder(src, src_mask)
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)
        for i in range(max_length - 1):
            trg_mask = create_trg_mask(trg).to(device)
            output = model.decoder(trg, enc_src, src_mask, trg_mask)
            next_token = output.argmax(2)[:, -1].item()
            if next_token == EOS_IDX:
                break
            trg = torch.cat(
                [trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1
            )
    return trg


@wrong("generate_text", r"'the loop returns the wrong number of tokens'", listed=False)
def runs_max_length_steps(model, src, max_length, device):
    # range(max_length): max_length new tokens, SOS not counted
    model.eval()
    with torch.no_grad():
        src_mask = create_src_mask(src)
        enc_src = model.encoder(src, src_mask)
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)
        for i in range(max_length):
            trg_mask = create_trg_mask(trg).to(device)
            output = model.decoder(trg, enc_src, src_mask, trg_mask)
            next_token = output.argmax(2)[:, -1].item()
            trg = torch.cat(
                [trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1
            )
            if next_token == EOS_IDX:
                break
    return trg


@wrong(
    "generate_text",
    r"expected a LongTensor \[1, T\] of token ids, got list",
    listed=False,
)
def returns_a_list(model, src, max_length, device):
    # returns the ids as a Python list "to print them"
    model.eval()
    with torch.no_grad():
        src_mask = create_src_mask(src)
        enc_src = model.encoder(src, src_mask)
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)
        for i in range(max_length - 1):
            trg_mask = create_trg_mask(trg).to(device)
            output = model.decoder(trg, enc_src, src_mask, trg_mask)
            next_token = output.argmax(2)[:, -1].item()
            trg = torch.cat(
                [trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1
            )
            if next_token == EOS_IDX:
                break
    return trg[0].tolist()


@wrong(
    "generate_text",
    r"expected token ids \(torch\.long\), got dtype torch\.float32",
    listed=False,
)
def token_ids_left_as_floats(model, src, max_length, device):
    # the .long() dropped from the appended token: cat promotes trg to float
    model.eval()
    with torch.no_grad():
        src_mask = create_src_mask(src)
        enc_src = model.encoder(src, src_mask)
        tokens = torch.ones(1, 1).fill_(SOS_IDX).to(device)
        for i in range(max_length - 1):
            trg = tokens.long()
            trg_mask = create_trg_mask(trg).to(device)
            output = model.decoder(trg, enc_src, src_mask, trg_mask)
            next_token = output.argmax(2)[:, -1].item()
            tokens = torch.cat(
                [tokens, torch.ones(1, 1).fill_(next_token).to(device)], dim=1
            )
            if next_token == EOS_IDX:
                break
    return tokens


@wrong("generate_text", r"'source mask not built from src'.*had shape", listed=False)
def source_mask_copied_from_the_example(model, src, max_length, device):
    # the padding mask typed in for the try-it cell's source, kept for every source
    model.eval()
    with torch.no_grad():
        src_mask = torch.tensor([[[[1, 1, 1, 1, 0, 0]]]], device=device)
        enc_src = model.encoder(src, src_mask)
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)
        for i in range(max_length - 1):
            trg_mask = create_trg_mask(trg).to(device)
            output = model.decoder(trg, enc_src, src_mask, trg_mask)
            next_token = output.argmax(2)[:, -1].item()
            trg = torch.cat(
                [trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1
            )
            if next_token == EOS_IDX:
                break
    return trg


@wrong("generate_text", r"'the loop returns the wrong number of tokens'", listed=False)
def hard_coded_nine_steps(model, src, max_length, device):
    # range(9): the try-it cell's max_length 10 typed in
    model.eval()
    with torch.no_grad():
        src_mask = create_src_mask(src)
        enc_src = model.encoder(src, src_mask)
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)
        for i in range(9):
            trg_mask = create_trg_mask(trg).to(device)
            output = model.decoder(trg, enc_src, src_mask, trg_mask)
            next_token = output.argmax(2)[:, -1].item()
            trg = torch.cat(
                [trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1
            )
            if next_token == EOS_IDX:
                break
    return trg


# -------------------------------------------- wrong, rejected without being named
# The checks compare the tokens with the reference's and find no known pitfall in the
# masks or the mode: the message quotes the tokens and the contract, not the mistake.


@wrong(
    "generate_text",
    r"'the next token is not the argmax of the last position'.*"
    r"argmax of position 0",
    listed=False,
)
def argmax_of_the_first_position(model, src, max_length, device):
    # output.argmax(2)[:, 0]: the prediction after SOS, at every step
    model.eval()
    with torch.no_grad():
        src_mask = create_src_mask(src)
        enc_src = model.encoder(src, src_mask)
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)
        for i in range(max_length - 1):
            trg_mask = create_trg_mask(trg).to(device)
            output = model.decoder(trg, enc_src, src_mask, trg_mask)
            next_token = output.argmax(2)[:, 0].item()
            trg = torch.cat(
                [trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1
            )
            if next_token == EOS_IDX:
                break
    return trg


@wrong("generate_text", r"'SOS_IDX left out of the returned tokens'", listed=False)
def returns_without_sos(model, src, max_length, device):
    # returns only the generated tokens, SOS cut off
    model.eval()
    with torch.no_grad():
        src_mask = create_src_mask(src)
        enc_src = model.encoder(src, src_mask)
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)
        for i in range(max_length - 1):
            trg_mask = create_trg_mask(trg).to(device)
            output = model.decoder(trg, enc_src, src_mask, trg_mask)
            next_token = output.argmax(2)[:, -1].item()
            trg = torch.cat(
                [trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1
            )
            if next_token == EOS_IDX:
                break
    return trg[:, 1:]


@wrong(
    "generate_text",
    r"source mask you passed .* had shape \[1, 1, \d+, 1\]",
    listed=False,
)
def fixed_source_mask_on_the_query_axis(model, src, max_length, device):
    # the padding mask built as [N, 1, S, 1]: unsqueeze(-1) where unsqueeze(1) belongs
    model.eval()
    with torch.no_grad():
        src_mask = (src != PAD_IDX).unsqueeze(1).unsqueeze(-1)
        enc_src = model.encoder(src, src_mask)
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)
        for i in range(max_length - 1):
            trg_mask = create_trg_mask(trg).to(device)
            output = model.decoder(trg, enc_src, src_mask, trg_mask)
            next_token = output.argmax(2)[:, -1].item()
            trg = torch.cat(
                [trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1
            )
            if next_token == EOS_IDX:
                break
    return trg
