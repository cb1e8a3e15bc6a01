"""Chapter 6's measured bank for shift_targets (the format: tests/bank/bank.py)."""

import torch

from bank import GENERIC, right, wrong  # noqa: F401
from exercise_cells import graders

GRADERS = graders("ch06_training", {"shift_targets": "shift_targets"})


# ---------------------------------------------------------------- shift_targets: right


@right("shift_targets")
def shift_slices(tgt):
    return tgt[:, :-1], tgt[:, 1:]


@right("shift_targets")
def shift_ellipsis(tgt):
    return tgt[..., :-1], tgt[..., 1:]


@right("shift_targets")
def shift_narrow(tgt):
    n = tgt.size(1) - 1
    return tgt.narrow(1, 0, n), tgt.narrow(1, 1, n)


@right("shift_targets")
def shift_via_time_first(tgt):
    # Thinks in [St, B] like the seed, and transposes back.
    t = tgt.t()
    return t[:-1].t(), t[1:].t()


@right("shift_targets")
def shift_clones(tgt):
    decoder_in = tgt[:, :-1].clone()
    labels = tgt[:, 1:].contiguous().clone()
    return decoder_in, labels


@right("shift_targets")
def shift_roll(tgt):
    labels = torch.roll(tgt, shifts=-1, dims=1)[:, :-1]
    return tgt[:, :-1], labels


@right("shift_targets")
def shift_index_select(tgt):
    idx = torch.arange(tgt.shape[1], device=tgt.device)
    return tgt.index_select(1, idx[:-1]), tgt.index_select(1, idx[1:])


@right("shift_targets")
def shift_unbind(tgt):
    cols = tgt.unbind(dim=1)
    return torch.stack(cols[:-1], dim=1), torch.stack(cols[1:], dim=1)


@right("shift_targets")
def shift_bos_plus_middle(tgt):
    # Keeps BOS, then the tokens up to the last one: the same as tgt[:, :-1].
    tgt_in = torch.cat([tgt[:, :1], tgt[:, 1:-1]], dim=1)
    return tgt_in, tgt[:, 1:]


@right("shift_targets")
def shift_rows(tgt):
    pairs = [(row[:-1], row[1:]) for row in tgt]
    return (torch.stack([p[0] for p in pairs]), torch.stack([p[1] for p in pairs]))


# ---------------------------------------------------------------- shift_targets: wrong


@wrong("shift_targets", r"'sequence-first slicing on batch-first data'", listed=True)
def shift_seed(tgt):  # the seed's [St, B] slices on batch-first data
    return tgt[:-1, :], tgt[1:, :]


@wrong("shift_targets", r"'sequence-first slicing on batch-first data'", listed=True)
def shift_len_based(tgt):  # len() of a tensor is its first axis, the batch
    n = len(tgt)
    return tgt[: n - 1], tgt[1:n]


@wrong("shift_targets", r"'targets shifted the wrong way'", listed=True)
def shift_swapped(tgt):  # returns (labels, input) in the wrong order
    return tgt[:, 1:], tgt[:, :-1]


@wrong("shift_targets", r"'labels not shifted'", listed=True)
def shift_same_twice(tgt):  # thinks the causal mask does the shifting
    x = tgt[:, :-1]
    return x, x


@wrong("shift_targets", r"'no shift at all'", listed=True)
def shift_identity(tgt):  # leaves the shift to the model
    return tgt, tgt


@wrong("shift_targets", r"'labels not shifted'", listed=True)
def shift_roll_wrong_way(tgt):  # rolls right instead of left, then drops the first
    return tgt[:, :-1], torch.roll(tgt, 1, dims=1)[:, 1:]


@wrong("shift_targets", r"labels are 2 position\(s\) after", listed=False)
def shift_by_two(tgt):  # "skip BOS in the input and EOS in the labels"
    return tgt[:, :-2], tgt[:, 2:]


@wrong("shift_targets", r"keep 5 and 6 of the St = 7", listed=False)
def shift_input_too_short(tgt):  # drops EOS and the token before it from the input
    return tgt[:, :-2], tgt[:, 1:]


@wrong("shift_targets", r"keep 5 and 5 of the St = 7", listed=False)
def shift_drops_last_column(tgt):  # "the last column is always padding" (it is not)
    return tgt[:, :-2], tgt[:, 1:-1]


@wrong(
    "shift_targets",
    r"'decoder input and labels cut to the wrong length'.*"
    r"keep 2 and 2 of the St = 7",
    listed=False,
)
def shift_uses_batch_size(tgt):  # the length read from the wrong axis
    n = tgt.size(0)
    return tgt[:, : n - 1], tgt[:, 1:n]


@wrong("shift_targets", r"'outputs are time-first'", listed=False)
def shift_transposed_once(tgt):  # transposes to the seed's layout, never back
    t = tgt.transpose(0, 1)
    return t[:-1], t[1:]


@wrong("shift_targets", r"'outputs are time-first'", listed=False)
def shift_input_time_first(tgt):  # only the decoder input transposed, "for the model"
    return tgt[:, :-1].T, tgt[:, 1:]


@wrong("shift_targets", r"'sliced the batch axis'", listed=False)
def shift_batch_by_two(tgt):  # seed-style slices, shifted by two
    return tgt[:-2], tgt[2:]


@wrong(
    "shift_targets",
    r"'tokens changed by the shift'.*has \[2\], yours has \[0\]",
    listed=False,
)
def shift_strips_eos_from_input(tgt):  # "the decoder never reads EOS"
    tgt_in = tgt[:, :-1]
    return tgt_in.masked_fill(tgt_in == 2, 0), tgt[:, 1:]


@wrong(
    "shift_targets",
    r"'tokens changed by the shift'.*has \[0\], yours has \[-100\]",
    listed=False,
)
def shift_pads_to_ignore_index(tgt):  # PyTorch's -100 convention; the loss uses pad_id
    labels = tgt[:, 1:].clone()
    labels[labels == 0] = -100
    return tgt[:, :-1], labels


@wrong(
    "shift_targets",
    r"'tokens changed by the shift'.*has \[2\], yours has \[0\]",
    listed=False,
)
def shift_labels_without_eos(tgt):  # EOS made PAD: the model never learns to stop
    labels = tgt[:, 1:].clone()
    labels[labels == 2] = 0
    return tgt[:, :-1], labels


@wrong(
    "shift_targets",
    r"'tokens changed by the shift'.*has \[1\], yours has \[0\]",
    listed=False,
)
def shift_input_starts_with_pad(tgt):  # overwrites BOS with PAD "as a start token"
    tgt_in = tgt[:, :-1].clone()
    tgt_in[:, 0] = 0
    return tgt_in, tgt[:, 1:]


@wrong(
    "shift_targets", r"'token ids converted to another dtype'.*float32", listed=False
)
def shift_float_labels(tgt):  # converts to float "for the loss"
    return tgt[:, :-1], tgt[:, 1:].float()


@wrong("shift_targets", r"'tgt modified in place'", listed=False)
def shift_writes_into_tgt(tgt):  # masks EOS in place; tgt_in is a view of tgt
    tgt_in = tgt[:, :-1]
    tgt_in[tgt_in == 2] = 0
    return tgt_in, tgt[:, 1:]


@wrong(
    "shift_targets",
    r"'tokens added to the shifted targets'.*\[1\] before it",
    listed=False,
)
def shift_prepends_bos(tgt):  # adds BOS although every row already starts with it
    bos = torch.ones_like(tgt[:, :1])
    return torch.cat([bos, tgt[:, :-1]], dim=1), tgt[:, 1:]


@wrong(
    "shift_targets",
    r"'tokens added to the shifted targets'.*\[2\] after it",
    listed=False,
)
def shift_appends_eos(tgt):  # adds EOS although every row already ends with it
    eos = torch.full_like(tgt[:, :1], 2)
    return tgt[:, :-1], torch.cat([tgt[:, 1:], eos], dim=1)


@wrong(
    "shift_targets",
    r"'tokens added to the shifted targets'.*\[1\] after it",
    listed=False,
)
def shift_roll_keeps_wrapped(tgt):  # roll wraps BOS around to the end; not cut off
    return tgt[:, :-1], tgt.roll(-1, dims=1)


@wrong("shift_targets", r"'shifted targets reshaped'.*shape \[18\]", listed=False)
def shift_flat_labels(tgt):  # flattens the labels for cross_entropy already
    return tgt[:, :-1], tgt[:, 1:].reshape(-1)


@wrong("shift_targets", r"'shifted targets reshaped'.*\[3, 6, 1\]", listed=False)
def shift_unsqueezed(tgt):  # a trailing axis "like the logits"
    return tgt[:, :-1].unsqueeze(-1), tgt[:, 1:].unsqueeze(-1)


@wrong(
    "shift_targets",
    r"'shift_targets does not return a pair of tensors'.*a dict",
    listed=False,
)
def shift_dict(tgt):  # a dict instead of the pair
    return {"tgt_in": tgt[:, :-1], "labels": tgt[:, 1:]}


@wrong(
    "shift_targets",
    r"'shift_targets does not return a pair of tensors'.*"
    r"tuple of 3",
    listed=False,
)
def shift_with_mask(tgt):  # also returns the padding mask
    return tgt[:, :-1], tgt[:, 1:], tgt[:, 1:] != 0


@wrong(
    "shift_targets",
    r"raised RuntimeError: stack expects.*line \d+ of your code",
    listed=False,
)
def shift_per_row_by_length(tgt):  # cuts each row at its EOS; a ragged list breaks
    rows = [row[: int((row != 0).sum())] for row in tgt]
    return torch.stack([r[:-1] for r in rows]), torch.stack([r[1:] for r in rows])


@wrong("shift_targets", r"'rows of the batch mixed up'", listed=False)
def shift_rolls_batch(tgt):  # roll on the wrong dims: the labels come from another row
    return tgt[:, :-1], torch.roll(tgt, 1, dims=0)[:, 1:]


@wrong(
    "shift_targets",
    r"'tokens added to the shifted targets'.*\[1\] \(row 0\) then "
    r"tgt\[:, :-2\]",
    listed=False,
)
def shift_bos_prepended_and_cut(tgt):  # the seed's "prepend BOS" on data that has BOS
    bos = torch.full((tgt.size(0), 1), 1, dtype=tgt.dtype, device=tgt.device)
    return torch.cat([bos, tgt[:, :-2]], dim=1), tgt[:, 1:]


@wrong(
    "shift_targets",
    r"'tokens added to the shifted targets'.*tgt\[:, 2:\] then "
    r"\[0\]",
    listed=False,
)
def shift_labels_padded_back(tgt):  # shifts twice, pads the end to keep St-1 columns
    pad = torch.zeros_like(tgt[:, :1])
    return tgt[:, :-1], torch.cat([tgt[:, 2:], pad], dim=1)


@wrong(
    "shift_targets",
    r"'token ids converted to another dtype'.*torch\.int32 your "
    r"decoder input is torch\.int64",
    listed=False,
)
def shift_casts_long(tgt):  # .long() on both halves "for cross_entropy"
    return tgt[:, :-1].long(), tgt[:, 1:].long()


@wrong(
    "shift_targets",
    r"'token ids converted to another dtype'.*torch\.int32 your "
    r"label tensor is torch\.int64",
    listed=False,
)
def shift_labels_to_int64(tgt):  # only the labels made int64, "as nll_loss wants"
    return tgt.narrow(1, 0, tgt.size(1) - 1), tgt[:, 1:].to(torch.int64)


@wrong(
    "shift_targets",
    r"'decoder input and labels cut to the wrong length'.*your decoder input is "
    r"tgt\[:, :\]: it keeps 7 of the St = 7 positions, expected 6",
    listed=False,
)
def shift_by_rolling(tgt):
    # torch.roll moves every token one place left; nothing is cut, and the first
    # token wraps round to the end of the labels
    return tgt.clone(), torch.roll(tgt, shifts=-1, dims=1)
