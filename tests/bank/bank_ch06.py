"""Chapter 6's measured bank, first half: shift_targets, sequence_loss and the Noam
schedule (see bank.py). An answer to "noam" is the learner's whole cell: a class whose
two functions are the cell's noam_lambda and make_scheduler."""

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch.optim.lr_scheduler import LambdaLR, MultiplicativeLR

from bank import GENERIC, right, wrong  # noqa: F401
from exercise_cells import graders


GRADERS = graders(
    "ch06_training",
    {
        "shift_targets": "shift_targets",
        "sequence_loss": "sequence_loss",
        "noam": ("noam_lambda", "make_scheduler"),
    },
)


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


# ---------------------------------------------------------------- sequence_loss: right


@right("sequence_loss")
def loss_reshape(logits, labels, pad_id, label_smoothing):
    return F.cross_entropy(
        logits.reshape(-1, logits.size(-1)),
        labels.reshape(-1),
        ignore_index=pad_id,
        label_smoothing=label_smoothing,
    )


@right("sequence_loss")
def loss_transposed(logits, labels, pad_id, label_smoothing):
    return F.cross_entropy(
        logits.transpose(1, 2),
        labels,
        ignore_index=pad_id,
        label_smoothing=label_smoothing,
    )


@right("sequence_loss")
def loss_module(logits, labels, pad_id, label_smoothing):
    criterion = torch.nn.CrossEntropyLoss(
        ignore_index=pad_id, label_smoothing=label_smoothing
    )
    return criterion(logits.view(-1, logits.shape[-1]), labels.flatten())


@right("sequence_loss")
def loss_by_hand(logits, labels, pad_id, eps):
    logp = logits.log_softmax(-1)
    nll = -logp.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    per_token = (1 - eps) * nll - eps * logp.mean(-1)
    keep = labels != pad_id
    return per_token[keep].sum() / keep.sum()


@right("sequence_loss")
def loss_minus_100(logits, labels, pad_id, label_smoothing):
    # Maps the pads to PyTorch's default ignore_index instead.
    labels = labels.masked_fill(labels == pad_id, -100)
    return F.cross_entropy(
        logits.flatten(0, 1), labels.flatten(), label_smoothing=label_smoothing
    )


@right("sequence_loss")
def loss_smoothed_target(logits, labels, pad_id, label_smoothing):
    vocab = logits.size(-1)
    target = F.one_hot(labels, vocab).to(logits.dtype) * (1 - label_smoothing)
    target = target + label_smoothing / vocab
    per_token = -(target * F.log_softmax(logits, dim=-1)).sum(-1)
    mask = (labels != pad_id).to(logits.dtype)
    return (per_token * mask).sum() / mask.sum()


@right("sequence_loss")
def loss_masked_select(logits, labels, pad_id, label_smoothing):
    keep = labels.ne(pad_id)
    picked = logits[keep]  # [N, V]
    return F.cross_entropy(picked, labels[keep], label_smoothing=label_smoothing)


@right("sequence_loss")
def loss_log_of_softmax(logits, labels, pad_id, eps):
    # log(softmax) then nll_loss, smoothing mixed in by hand, torch.where for the mask.
    logp = torch.log(torch.softmax(logits, dim=-1))
    nll = F.nll_loss(logp.permute(0, 2, 1), labels, reduction="none")
    smooth = -logp.mean(dim=-1)
    per = (1 - eps) * nll + eps * smooth
    mask = labels != pad_id
    return torch.where(mask, per, torch.zeros_like(per)).sum() / mask.sum()


@right("sequence_loss")
def loss_in_float64(logits, labels, pad_id, label_smoothing):
    # Accumulates in float64 "for accuracy", returns the logits' dtype.
    loss = F.cross_entropy(
        logits.double().flatten(0, 1),
        labels.flatten(),
        ignore_index=pad_id,
        label_smoothing=label_smoothing,
    )
    return loss.to(logits.dtype)


# ---------------------------------------------------------------- sequence_loss: wrong


@wrong("sequence_loss", r"'padding counted in the loss'", listed=True)
def loss_no_ignore_index(logits, labels, pad_id, label_smoothing):
    return F.cross_entropy(
        logits.reshape(-1, logits.size(-1)),
        labels.reshape(-1),
        label_smoothing=label_smoothing,
    )


@wrong(
    "sequence_loss",
    r"'padding counted in the loss and no label smoothing'",
    listed=True,
)
def loss_plain(logits, labels, pad_id, label_smoothing):
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten())


@wrong("sequence_loss", r"'padding counted in the mean'", listed=True)
def loss_masked_mean_over_all(logits, labels, pad_id, eps):
    per = F.cross_entropy(
        logits.flatten(0, 1), labels.flatten(), reduction="none", label_smoothing=eps
    )
    return (per * (labels.flatten() != pad_id)).mean()


@wrong("sequence_loss", r"'pad id hard-coded to 0'", listed=True)
def loss_pad_zero(logits, labels, pad_id, label_smoothing):  # the seed's "!= 0"
    return F.cross_entropy(
        logits.flatten(0, 1),
        labels.flatten(),
        ignore_index=0,
        label_smoothing=label_smoothing,
    )


@wrong("sequence_loss", r"'label smoothing ignored'", listed=True)
def loss_without_smoothing(logits, labels, pad_id, label_smoothing):
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=pad_id)


@wrong("sequence_loss", r"'summed, not averaged'", listed=True)
def loss_sum(logits, labels, pad_id, label_smoothing):
    return F.cross_entropy(
        logits.flatten(0, 1),
        labels.flatten(),
        ignore_index=pad_id,
        label_smoothing=label_smoothing,
        reduction="sum",
    )


@wrong("sequence_loss", r"'softmax applied before cross_entropy'", listed=True)
def loss_of_softmax(logits, labels, pad_id, label_smoothing):  # "CE of probabilities"
    probs = logits.softmax(dim=-1)
    return F.cross_entropy(
        probs.flatten(0, 1),
        labels.flatten(),
        ignore_index=pad_id,
        label_smoothing=label_smoothing,
    )


@wrong("sequence_loss", r"'pad id hard-coded to 0'", listed=True)
def loss_mask_not_zero(logits, labels, pad_id, eps):  # the seed's mask, by hand
    per = F.cross_entropy(
        logits.transpose(1, 2), labels, reduction="none", label_smoothing=eps
    )
    mask = (labels != 0).float()
    return (per * mask).sum() / mask.sum()


@wrong("sequence_loss", r"weights every sequence equally", listed=False)
def loss_mean_of_sequence_means(logits, labels, pad_id, eps):
    per = F.cross_entropy(
        logits.transpose(1, 2), labels, reduction="none", label_smoothing=eps
    )
    mask = (labels != pad_id).to(per.dtype)
    return ((per * mask).sum(1) / mask.sum(1)).mean()


@wrong("sequence_loss", r"weight 1/[345] instead.*B, the batch size", listed=False)
def loss_batch_mean(logits, labels, pad_id, eps):  # "loss per sentence"
    total = F.cross_entropy(
        logits.flatten(0, 1),
        labels.flatten(),
        ignore_index=pad_id,
        label_smoothing=eps,
        reduction="sum",
    )
    return total / logits.size(0)


@wrong(
    "sequence_loss", r"weight 1/[4-7] instead.*St, the sequence length", listed=False
)
def loss_per_step(logits, labels, pad_id, eps):  # divides by the number of time steps
    total = F.cross_entropy(
        logits.flatten(0, 1),
        labels.flatten(),
        ignore_index=pad_id,
        label_smoothing=eps,
        reduction="sum",
    )
    return total / labels.shape[1]


@wrong("sequence_loss", r"weight 1/1[0-9] instead of 1/1[0-9]\b", listed=False)
def loss_plus_one_in_count(logits, labels, pad_id, eps):  # "+1 avoids division by 0"
    per = F.cross_entropy(
        logits.transpose(1, 2), labels, reduction="none", label_smoothing=eps
    )
    keep = labels != pad_id
    return per[keep].sum() / (keep.sum() + 1)


@wrong("sequence_loss", r"ε spread over the V−1 other classes", listed=False)
def loss_smooth_over_other_classes(logits, labels, pad_id, eps):
    # The "other classes" convention: eps/(V-1) on every wrong class.
    vocab = logits.size(-1)
    target = torch.full_like(logits, eps / (vocab - 1))
    target.scatter_(-1, labels.unsqueeze(-1), 1 - eps)
    per = -(target * logits.log_softmax(-1)).sum(-1)
    keep = labels != pad_id
    return per[keep].mean()


@wrong("sequence_loss", r"ε given to every class instead of ε/V", listed=False)
def loss_smoothing_summed(logits, labels, pad_id, eps):  # sum where a mean belongs
    logp = F.log_softmax(logits, -1)
    nll = -logp.gather(-1, labels[..., None])[..., 0]
    per = (1 - eps) * nll - eps * logp.sum(-1)
    keep = labels != pad_id
    return per[keep].mean()


@wrong("sequence_loss", r"ε and 1 − ε swapped", listed=False)
def loss_smoothing_swapped(logits, labels, pad_id, eps):
    # The two weights of the mixture swapped: eps on the label, 1 - eps spread.
    logp = F.log_softmax(logits, -1)
    nll = -logp.gather(-1, labels[..., None])[..., 0]
    per = eps * nll + (1 - eps) * (-logp.mean(-1))
    keep = labels != pad_id
    return per[keep].mean()


@wrong("sequence_loss", r"ε/V added without taking ε off", listed=False)
def loss_target_not_renormalised(logits, labels, pad_id, eps):
    # Adds eps/V to the one-hot but forgets the 1 - eps: the target sums to 1 + eps.
    vocab = logits.size(-1)
    target = F.one_hot(labels, vocab).to(logits.dtype) + eps / vocab
    per = -(target * logits.log_softmax(-1)).sum(-1)
    keep = labels != pad_id
    return per[keep].mean()


@wrong(
    "sequence_loss",
    r"target of 0\.9091 on the label.*label_smoothing = 0\.0 gives 1 ",
    listed=False,
)
def loss_smoothing_hard_coded(logits, labels, pad_id, label_smoothing):  # paper's 0.1
    return F.cross_entropy(
        logits.flatten(0, 1), labels.flatten(), ignore_index=pad_id, label_smoothing=0.1
    )


@wrong("sequence_loss", r"'loss value off by a constant'.*KL", listed=False)
def loss_kl_divergence(logits, labels, pad_id, eps):  # the Annotated Transformer's KL
    vocab = logits.size(-1)
    target = F.one_hot(labels, vocab).to(logits.dtype) * (1 - eps) + eps / vocab
    per = F.kl_div(logits.log_softmax(-1), target, reduction="none").sum(-1)
    keep = labels != pad_id
    return per[keep].mean()


@wrong("sequence_loss", r"'logits not normalised by log_softmax'", listed=False)
def loss_nll_on_logits(logits, labels, pad_id, label_smoothing):  # forgot log_softmax
    return F.nll_loss(logits.flatten(0, 1), labels.flatten(), ignore_index=pad_id)


@wrong("sequence_loss", r"'loss of probabilities, not log-probabilities'", listed=False)
def loss_nll_on_probabilities(logits, labels, pad_id, label_smoothing):  # no log
    probs = torch.softmax(logits, dim=-1)
    return F.nll_loss(probs.flatten(0, 1), labels.flatten(), ignore_index=pad_id)


@wrong("sequence_loss", r"'logits and labels paired up wrongly'", listed=False)
def loss_time_major_logits(logits, labels, pad_id, eps):  # flattens logits time-major
    flat = logits.transpose(0, 1).reshape(-1, logits.size(-1))
    return F.cross_entropy(
        flat, labels.reshape(-1), ignore_index=pad_id, label_smoothing=eps
    )


@wrong("sequence_loss", r"'logits and labels paired up wrongly'", listed=False)
def loss_time_major_labels(logits, labels, pad_id, eps):  # labels.t() "like the seed"
    return F.cross_entropy(
        logits.reshape(-1, logits.size(-1)),
        labels.t().reshape(-1),
        ignore_index=pad_id,
        label_smoothing=eps,
    )


@wrong("sequence_loss", r"'logits of different positions mixed'", listed=False)
def loss_permute_then_reshape(logits, labels, pad_id, eps):  # [B, V, St] read as [N, V]
    vocab = logits.size(-1)
    flat = logits.permute(0, 2, 1).reshape(-1, vocab)
    return F.cross_entropy(
        flat, labels.reshape(-1), ignore_index=pad_id, label_smoothing=eps
    )


@wrong(
    "sequence_loss",
    r"'ignores tokens that are not padding'.*labels \[0, 1\]",
    listed=False,
)
def loss_mask_greater_than_pad(logits, labels, pad_id, eps):  # "pad is the smallest id"
    per = F.cross_entropy(
        logits.transpose(1, 2), labels, reduction="none", label_smoothing=eps
    )
    keep = labels > pad_id
    return per[keep].mean()


@wrong("sequence_loss", r"gives weight to \d+ of the \d+ pad positions", listed=False)
def loss_smoothing_on_pads_too(logits, labels, pad_id, eps):
    # The NLL is masked, but the smoothing term is averaged over every position.
    logp = logits.log_softmax(-1)
    nll = F.nll_loss(logp.transpose(1, 2), labels, ignore_index=pad_id)
    return (1 - eps) * nll + eps * (-logp.mean(-1)).mean()


@wrong(
    "sequence_loss",
    r"'loss computed in another dtype'.*float32 for torch.float64",
    listed=False,
)
def loss_cast_to_float(logits, labels, pad_id, eps):  # .float() "to be safe"
    return F.cross_entropy(
        logits.float().flatten(0, 1),
        labels.flatten(),
        ignore_index=pad_id,
        label_smoothing=eps,
    )


@wrong("sequence_loss", r"'loss detached from the graph'", listed=False)
def loss_as_python_float(logits, labels, pad_id, eps):  # .item() for logging, returned
    return F.cross_entropy(
        logits.flatten(0, 1), labels.flatten(), ignore_index=pad_id, label_smoothing=eps
    ).item()


@wrong("sequence_loss", r"'loss not reduced to a scalar'", listed=False)
def loss_per_token(logits, labels, pad_id, eps):  # reduction="none" and nothing after
    return F.cross_entropy(
        logits.transpose(1, 2),
        labels,
        ignore_index=pad_id,
        label_smoothing=eps,
        reduction="none",
    )


@wrong("sequence_loss", r"raised RuntimeError.*line \d+ of your code", listed=False)
def loss_three_d_logits(logits, labels, pad_id, eps):  # [B, St, V] read as [N, C, d]
    return F.cross_entropy(logits, labels, ignore_index=pad_id, label_smoothing=eps)


@wrong("sequence_loss", r"weights every time step equally", listed=False)
def loss_mean_per_position(logits, labels, pad_id, eps):  # averages over B first
    per = F.cross_entropy(
        logits.transpose(1, 2), labels, reduction="none", label_smoothing=eps
    )
    mask = (labels != pad_id).to(per.dtype)
    return ((per * mask).sum(0) / mask.sum(0).clamp(min=1)).mean()


@wrong("sequence_loss", r"smoothing term that carries no gradient", listed=False)
def loss_smoothing_detached(logits, labels, pad_id, eps):  # smoothing from .detach()
    keep = labels != pad_id
    nll = F.cross_entropy(logits.transpose(1, 2), labels, ignore_index=pad_id)
    smooth = -logits.detach().log_softmax(-1).mean(-1)[keep].mean()
    return (1 - eps) * nll + eps * smooth


@wrong(
    "sequence_loss",
    r"leaves out 1 real tokens, labels \[\d+\] in rows \[3\]",
    listed=False,
)
def loss_drops_last_row(logits, labels, pad_id, eps):  # logits[:-1] "drops the EOS row"
    return F.cross_entropy(
        logits[:-1].transpose(1, 2),
        labels[:-1],
        ignore_index=pad_id,
        label_smoothing=eps,
    )


@wrong(
    "sequence_loss",
    r"'label smoothing not as specified'.*right in every case "
    r"without label smoothing",
    listed=False,
)
def loss_pad_class_weight(logits, labels, pad_id, eps):
    # A class weight of 0 for PAD instead of ignore_index: the smoothing then skips the
    # PAD class and is renormalised.
    weight = torch.ones(logits.size(-1), dtype=logits.dtype, device=logits.device)
    weight[pad_id] = 0.0
    return F.cross_entropy(
        logits.flatten(0, 1), labels.flatten(), weight=weight, label_smoothing=eps
    )


@wrong(
    "sequence_loss",
    r"'loss detached from the graph'.*No gradient reaches",
    listed=False,
)
def loss_value_only(logits, labels, pad_id, eps):  # "keeps the graph" with 0 * logits
    loss = F.cross_entropy(
        logits.flatten(0, 1), labels.flatten(), ignore_index=pad_id, label_smoothing=eps
    )
    return loss.detach() + 0.0 * logits.sum()


@wrong("sequence_loss", r"'logits of different positions mixed'", listed=False)
def loss_log_softmax_wrong_axis(logits, labels, pad_id, eps):  # dim=1 is time, not V
    logp = F.log_softmax(logits, dim=1)
    return F.nll_loss(logp.flatten(0, 1), labels.flatten(), ignore_index=pad_id)


@wrong(
    "sequence_loss",
    r"'arguments modified in place'.*9 entries of the labels",
    listed=False,
)
def loss_overwrites_labels(logits, labels, pad_id, label_smoothing):  # -100: default
    labels[labels == pad_id] = -100  # ignore_index, written into the caller's labels
    return F.cross_entropy(
        logits.reshape(-1, logits.size(-1)),
        labels.reshape(-1),
        label_smoothing=label_smoothing,
    )


@wrong(
    "sequence_loss",
    r"'arguments modified in place'.*entries of the labels",
    listed=False,
)
def loss_masked_fill_labels(logits, labels, pad_id, eps):  # masked_fill_ by habit
    flat = labels.view(-1).masked_fill_(labels.view(-1) == pad_id, -100)
    return F.cross_entropy(logits.view(-1, logits.shape[-1]), flat, label_smoothing=eps)


@wrong(
    "sequence_loss",
    r"'arguments modified in place'.*entries of the logits",
    listed=False,
)
def loss_stabilises_logits_in_place(logits, labels, pad_id, eps):  # "stable" softmax
    logits -= logits.max(dim=-1, keepdim=True).values.detach()
    return F.cross_entropy(
        logits.transpose(1, 2), labels, ignore_index=pad_id, label_smoothing=eps
    )


@wrong(
    "sequence_loss",
    r"'real tokens weighted unevenly'.*weights range from",
    listed=False,
)
def loss_row_mean_plus_one(logits, labels, pad_id, eps):  # "+1: no all-pad row / 0"
    per = F.cross_entropy(
        logits.transpose(1, 2), labels, reduction="none", label_smoothing=eps
    )
    mask = (labels != pad_id).to(per.dtype)
    return ((per * mask).sum(1) / (mask.sum(1) + 1)).mean()


@wrong(
    "sequence_loss",
    r"'real tokens weighted unevenly'.*label smoothing your gradient implies varies",
    listed=False,
)
def loss_smoothing_per_sequence(logits, labels, pad_id, eps):
    # NLL averaged over all real tokens, the smoothing term as a mean of row means.
    logp = logits.log_softmax(-1)
    nll = F.nll_loss(logp.transpose(1, 2), labels, ignore_index=pad_id)
    mask = (labels != pad_id).to(logp.dtype)
    smooth = ((-logp.mean(-1) * mask).sum(1) / mask.sum(1)).mean()
    return (1 - eps) * nll + eps * smooth


# ------------------------------------------------------------------------- noam: right


@right("noam")
class NoamSolution:
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return d_model**-0.5 * min(n**-0.5, n * warmup**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda step: NoamSolution.noam_lambda(step, d_model, warmup)
        )


@right("noam")
class NoamBranches:
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        rate = n / warmup**1.5 if n < warmup else 1 / math.sqrt(n)
        return rate / math.sqrt(d_model)

    def make_scheduler(optimizer, d_model, warmup):
        def lr_lambda(step):
            return NoamBranches.noam_lambda(step, d_model, warmup)

        return LambdaLR(optimizer, lr_lambda=lr_lambda)


@right("noam")
class NoamNumpy:
    def noam_lambda(step, d_model, warmup):
        n = np.float64(step + 1)
        return float(np.minimum(n**-0.5, n * warmup**-1.5) / np.sqrt(d_model))

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, [lambda s: NoamNumpy.noam_lambda(s, d_model, warmup)]
        )


@right("noam")
class NoamTorch:
    def noam_lambda(step, d_model, warmup):  # a 0-d tensor is a fine multiplier too
        n = torch.tensor(step + 1.0, dtype=torch.float64)
        return torch.rsqrt(torch.tensor(float(d_model))).double() * torch.minimum(
            n.rsqrt(), n * warmup**-1.5
        )

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: float(NoamTorch.noam_lambda(s, d_model, warmup))
        )


@right("noam")
class NoamByHandScheduler:
    def noam_lambda(step, d_model, warmup):
        step += 1
        return (1 / d_model**0.5) * min(1 / step**0.5, step / warmup**1.5)

    class Noam:  # sets the rate at creation and after each update; never steps
        def __init__(self, optimizer, d_model, warmup):
            self.optimizer, self.d_model, self.warmup = optimizer, d_model, warmup
            self.step_count = 0
            self._apply()

        def _apply(self):
            rate = NoamByHandScheduler.noam_lambda(
                self.step_count, self.d_model, self.warmup
            )
            for group in self.optimizer.param_groups:
                group["lr"] = rate

        def step(self):
            self.step_count += 1
            self._apply()

    make_scheduler = Noam


@right("noam")
class NoamMinOfPowers:
    def noam_lambda(step, d_model, warmup):
        n = float(step + 1)
        warm = n * math.pow(warmup, -1.5)
        decay = math.pow(n, -0.5)
        return math.pow(d_model, -0.5) * (warm if warm < decay else decay)

    def make_scheduler(optimizer, d_model, warmup):
        from functools import partial

        return LambdaLR(
            optimizer, partial(NoamMinOfPowers.rate, d_model=d_model, warmup=warmup)
        )

    def rate(step, d_model, warmup):
        return NoamMinOfPowers.noam_lambda(step, d_model, warmup)


@right("noam")
class NoamSqrtForms:
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return min(1 / math.sqrt(n), n / (warmup * math.sqrt(warmup))) / math.sqrt(
            d_model
        )

    def make_scheduler(optimizer, d_model, warmup):
        sched = LambdaLR(optimizer, lambda s: 1.0)
        sched.lr_lambdas = [lambda s: NoamSqrtForms.noam_lambda(s, d_model, warmup)]
        # The first rate was set with the placeholder: set it again for step 0.
        for group, lr in zip(optimizer.param_groups, sched.base_lrs):
            group["lr"] = lr * sched.lr_lambdas[0](0)
        return sched


@right("noam")
class NoamLogSpace:
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        log_rate = -0.5 * math.log(d_model) + min(
            -0.5 * math.log(n), math.log(n) - 1.5 * math.log(warmup)
        )
        return math.exp(log_rate)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda step: NoamLogSpace.noam_lambda(step, d_model, warmup)
        )


# ------------------------------------------------------------------------- noam: wrong


@wrong("noam", r"'scheduler multiplies the previous rate'.*× 0\.03354", listed=False)
class NoamMultiplicativeLR:  # "multiplicative" read as "multiplies by the schedule"
    def noam_lambda(step, d_model, warmup):
        step += 1
        return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        return MultiplicativeLR(
            optimizer, lambda s: NoamMultiplicativeLR.noam_lambda(s, d_model, warmup)
        )


@wrong("noam", r"'Noam schedule divides by zero at step 0'", listed=True)
class NoamSeed:  # the paper's formula on LambdaLR's 0-based step
    def noam_lambda(step, d_model, warmup):
        return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(optimizer, lambda s: NoamSeed.noam_lambda(s, d_model, warmup))


@wrong("noam", r"'Noam schedule off by one'", listed=True)
class NoamGuarded:  # max(step, 1) hides the division by zero, not the off-by-one
    def noam_lambda(step, d_model, warmup):
        step = max(step, 1)
        return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamGuarded.noam_lambda(s, d_model, warmup)
        )


@wrong("noam", r"'Noam schedule off by one'", listed=True)
class NoamZeroFirst:  # returns 0 at step 0 "to avoid the division"
    def noam_lambda(step, d_model, warmup):
        if step == 0:
            return 0.0
        return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamZeroFirst.noam_lambda(s, d_model, warmup)
        )


@wrong("noam", r"'Noam schedule off by one'", listed=True)
class NoamTwoAhead:  # adds one to a step that noam already counts from one
    def noam_lambda(step, d_model, warmup):
        n = step + 2
        return d_model**-0.5 * min(n**-0.5, n * warmup**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamTwoAhead.noam_lambda(s, d_model, warmup)
        )


@wrong("noam", r"'warm-up exponent wrong'", listed=True)
class NoamWarmupSqrt:  # n / sqrt(warmup)
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return min(n**-0.5, n / math.sqrt(warmup)) / math.sqrt(d_model)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamWarmupSqrt.noam_lambda(s, d_model, warmup)
        )


@wrong("noam", r"'missing the d_model\^-0.5 factor'", listed=True)
class NoamNoWidth:  # forgot the d_model factor
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return min(n**-0.5, n * warmup**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamNoWidth.noam_lambda(s, d_model, warmup)
        )


@wrong("noam", r"'max instead of min'", listed=True)
class NoamMax:  # max where the formula has min
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return d_model**-0.5 * max(n**-0.5, n * warmup**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(optimizer, lambda s: NoamMax.noam_lambda(s, d_model, warmup))


@wrong("noam", r"'scheduler steps the optimizer'", listed=True)
class NoamSeedAdamWarmup:  # the seed's optimizer wrapper
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return d_model**-0.5 * min(n**-0.5, n * warmup**-1.5)

    class AdamWarmup:
        def __init__(self, optimizer, d_model, warmup):
            self.optimizer, self.d_model, self.warmup = optimizer, d_model, warmup
            self.n = 0
            for group in optimizer.param_groups:
                group["lr"] = NoamSeedAdamWarmup.noam_lambda(0, d_model, warmup)

        def step(self):
            self.n += 1
            for group in self.optimizer.param_groups:
                group["lr"] = NoamSeedAdamWarmup.noam_lambda(
                    self.n, self.d_model, self.warmup
                )
            self.optimizer.step()

    make_scheduler = AdamWarmup


@wrong("noam", r"'Noam schedule off by one'.*first update runs at", listed=True)
class NoamSetLate:  # sets the rate only in step(): update 1 runs at lr 1.0
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return d_model**-0.5 * min(n**-0.5, n * warmup**-1.5)

    class Noam:
        def __init__(self, optimizer, d_model, warmup):
            self.optimizer, self.d_model, self.warmup = optimizer, d_model, warmup
            self.n = 0

        def step(self):
            for group in self.optimizer.param_groups:
                group["lr"] = NoamSetLate.noam_lambda(self.n, self.d_model, self.warmup)
            self.n += 1

    make_scheduler = Noam


@wrong("noam", r"'Noam schedule off by one'.*one update ahead", listed=True)
class NoamPrimed:  # calls scheduler.step() once "to initialise it"
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return d_model**-0.5 * min(n**-0.5, n * warmup**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        sched = LambdaLR(
            optimizer, lambda s: NoamPrimed.noam_lambda(s, d_model, warmup)
        )
        sched.step()
        return sched


@wrong("noam", r"'schedule scaled wrongly'.*d_model\^0.5 ", listed=False)
class NoamSqrtDModelTimes:  # multiplies by sqrt(d_model) instead of dividing
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return math.sqrt(d_model) * min(n**-0.5, n * warmup**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamSqrtDModelTimes.noam_lambda(s, d_model, warmup)
        )


@wrong("noam", r"'schedule scaled wrongly'.*d_model\^-1 ", listed=False)
class NoamDModelInverse:  # 1 / d_model: the square root forgotten
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return min(n**-0.5, n * warmup**-1.5) / d_model

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamDModelInverse.noam_lambda(s, d_model, warmup)
        )


@wrong("noam", r"'schedule scaled wrongly'.*0.5 · d_model\^-1 ", listed=False)
class NoamPrecedence:  # d_model ** -1 / 2 is (d_model ** -1) / 2
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return d_model**-1 / 2 * min(n**-0.5, n * warmup**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamPrecedence.noam_lambda(s, d_model, warmup)
        )


@wrong("noam", r"'schedule scaled wrongly'.*\b2 · d_model\^-0.5", listed=False)
class NoamFactorTwo:  # the Annotated Transformer's factor=2 baked in
    def noam_lambda(step, d_model, warmup, factor=2):
        n = step + 1
        return factor * d_model**-0.5 * min(n**-0.5, n * warmup**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamFactorTwo.noam_lambda(s, d_model, warmup)
        )


@wrong("noam", r"'schedule scaled wrongly'.*0.001 · d_model\^-0.5", listed=False)
class NoamBaseLrInside:  # multiplies Adam's usual 1e-3 in
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return 1e-3 * d_model**-0.5 * min(n**-0.5, n * warmup**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamBaseLrInside.noam_lambda(s, d_model, warmup)
        )


@wrong(
    "noam",
    r"'schedule scaled wrongly'.*as if d_model were 512.*hard-coded",
    listed=False,
)
class NoamDModel512:  # the paper's d_model, not the argument
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return 512**-0.5 * min(n**-0.5, n * warmup**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamDModel512.noam_lambda(s, d_model, warmup)
        )


@wrong(
    "noam",
    r"'warm-up exponent wrong'.*as if warmup were 4000.*hard-coded",
    listed=False,
)
class NoamWarmup4000:  # the paper's warm-up, not the argument
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return d_model**-0.5 * min(n**-0.5, n * 4000**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamWarmup4000.noam_lambda(s, d_model, warmup)
        )


@wrong("noam", r"'warm-up exponent wrong'.*warmup\^-1 ", listed=False)
class NoamWarmupOverW:  # "linear warm-up to 1": n / warmup
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return d_model**-0.5 * min(n**-0.5, n / warmup)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamWarmupOverW.noam_lambda(s, d_model, warmup)
        )


@wrong("noam", r"'warm-up exponent wrong'.*0.5 · warmup\^-3 ", listed=False)
class NoamWarmupPrecedence:  # warmup ** -3 / 2 is (warmup ** -3) / 2
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return d_model**-0.5 * min(n**-0.5, n * warmup**-3 / 2)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamWarmupPrecedence.noam_lambda(s, d_model, warmup)
        )


@wrong("noam", r"'decay exponent wrong'.*n\^-1,", listed=False)
class NoamDecayInverse:  # 1 / n instead of 1 / sqrt(n)
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return d_model**-0.5 * min(1 / n, n * warmup**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamDecayInverse.noam_lambda(s, d_model, warmup)
        )


@wrong("noam", r"'decay exponent wrong'.*n\^0.5,", listed=False)
class NoamDecaySignFlip:  # n ** 0.5: the minus sign lost, so it never decays
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return d_model**-0.5 * min(n**0.5, n * warmup**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamDecaySignFlip.noam_lambda(s, d_model, warmup)
        )


@wrong("noam", r"'warm-up not linear'.*n\^1.5", listed=False)
class NoamWarmupPower:  # (n / warmup) ** 1.5 instead of n * warmup ** -1.5
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return d_model**-0.5 * min(n**-0.5, (n / warmup) ** 1.5)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamWarmupPower.noam_lambda(s, d_model, warmup)
        )


@wrong("noam", r"'Noam schedule off by one'.*\(step \+ 0\)", listed=False)
class NoamWarmupUsesStep:  # n = step + 1 in one branch, the raw step in the other
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return d_model**-0.5 * min(n**-0.5, step * warmup**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamWarmupUsesStep.noam_lambda(s, d_model, warmup)
        )


@wrong("noam", r"'first update's rate wrong'.*at step 0 is 0,", listed=False)
class NoamSkipsFirst:  # n = step + 1, but still a special case for step 0
    def noam_lambda(step, d_model, warmup):
        if step == 0:
            return 0
        n = step + 1
        return d_model**-0.5 * min(n**-0.5, n * warmup**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamSkipsFirst.noam_lambda(s, d_model, warmup)
        )


@wrong("noam", r"'decay exponent wrong'.*n\^0,", listed=False)
class NoamConstant:  # a fixed rate "until the schedule works"
    def noam_lambda(step, d_model, warmup):
        return 1e-3

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamConstant.noam_lambda(s, d_model, warmup)
        )


@wrong("noam", r"'scheduler's rates scaled'.*0.001 × noam_lambda", listed=False)
class NoamSchedulerBaseLr:  # sets Adam's usual lr on the optimizer before LambdaLR
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return d_model**-0.5 * min(n**-0.5, n * warmup**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        for group in optimizer.param_groups:
            group["lr"] = 1e-3
        return LambdaLR(
            optimizer, lambda s: NoamSchedulerBaseLr.noam_lambda(s, d_model, warmup)
        )


@wrong("noam", r"'scheduler's rates scaled'.*as if d_model were 512", listed=False)
class NoamSchedulerPaperWidth:  # passes the paper's d_model to noam_lambda
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return d_model**-0.5 * min(n**-0.5, n * warmup**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamSchedulerPaperWidth.noam_lambda(s, 512, warmup)
        )


@wrong("noam", r"'scheduler multiplies the previous rate'", listed=False)
class NoamMultiplicative:  # MultiplicativeLR: each rate the previous one times lambda
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return d_model**-0.5 * min(n**-0.5, n * warmup**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        for group in optimizer.param_groups:
            group["lr"] = NoamMultiplicative.noam_lambda(0, d_model, warmup)
        return MultiplicativeLR(
            optimizer, lambda s: NoamMultiplicative.noam_lambda(s, d_model, warmup)
        )


@wrong("noam", r"'scheduler counts its steps wrongly'.*steps \[0, 2, 4", listed=False)
class NoamDoubleCount:  # step() advances the count twice (once in _set, once in step)
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return d_model**-0.5 * min(n**-0.5, n * warmup**-1.5)

    class Noam:
        def __init__(self, optimizer, d_model, warmup):
            self.opt, self.d, self.w, self.k = optimizer, d_model, warmup, 0
            self._set()

        def _set(self):
            for group in self.opt.param_groups:
                group["lr"] = NoamDoubleCount.noam_lambda(self.k, self.d, self.w)

        def step(self):
            self.k += 1
            self.k += 1 if self.k else 0
            self._set()

    make_scheduler = Noam


@wrong(
    "noam", r"'scheduler counts its steps wrongly'.*steps \[0, 0, 1, 2", listed=False
)
class NoamSetsBeforeCounting:  # step() applies the current count, then increments it
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return d_model**-0.5 * min(n**-0.5, n * warmup**-1.5)

    class Noam:
        def __init__(self, optimizer, d_model, warmup):
            self.opt, self.d, self.w, self.k = optimizer, d_model, warmup, 0
            self._set()

        def _set(self):
            for group in self.opt.param_groups:
                group["lr"] = NoamSetsBeforeCounting.noam_lambda(self.k, self.d, self.w)

        def step(self):
            self._set()
            self.k += 1

    make_scheduler = Noam


@wrong("noam", r"'learning rate never changes'.*stayed 1\b", listed=False)
class NoamOwnOptimizer:  # wraps a fresh optimizer, not the one it was given
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return d_model**-0.5 * min(n**-0.5, n * warmup**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        params = [p for group in optimizer.param_groups for p in group["params"]]
        own = torch.optim.SGD(params, lr=1.0)
        return LambdaLR(own, lambda s: NoamOwnOptimizer.noam_lambda(s, d_model, warmup))


@wrong("noam", r"'scheduler's warm-up length wrong'.*never stop rising", listed=False)
class NoamSchedulerPaperWarmup:  # the paper's 4000 warm-up steps inside the scheduler
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return d_model**-0.5 * min(n**-0.5, n * warmup**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamSchedulerPaperWarmup.noam_lambda(s, d_model, 4000)
        )


@wrong(
    "noam",
    r"'scheduler counts its steps wrongly'.*first update ran at 0, the next "
    r"ones at the Noam rates of steps \[0, 1, 2",
    listed=False,
)
class NoamSchedulerOneBehind:  # "LambdaLR counts from 0, so subtract one"
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return d_model**-0.5 * min(n**-0.5, n * warmup**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        def rate(step):
            if step == 0:
                return 0.0
            return NoamSchedulerOneBehind.noam_lambda(step - 1, d_model, warmup)

        return LambdaLR(optimizer, rate)


@wrong("noam", r"'scheduler counts its steps wrongly'.*steps \[1, 3, 5", listed=False)
class NoamSchedulerStepsTwice:  # a LambdaLR subclass whose step() advances twice
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return d_model**-0.5 * min(n**-0.5, n * warmup**-1.5)

    class Noam(LambdaLR):
        def __init__(self, optimizer, d_model, warmup):
            super().__init__(
                optimizer,
                lambda s: NoamSchedulerStepsTwice.noam_lambda(s, d_model, warmup),
            )

        def step(self):
            super().step()  # "one for the warm-up, one for the decay"
            super().step()

    make_scheduler = Noam


@wrong("noam", r"'decay exponent wrong'.*never reaches 0", listed=False)
class NoamLinearDecay:  # linear warm-up, then a linear decay to 0 (another schedule)
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        peak = d_model**-0.5 * warmup**-0.5
        if n <= warmup:
            return peak * n / warmup
        return max(0.0, peak * (1 - (n - warmup) / (100 * warmup)))

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamLinearDecay.noam_lambda(s, d_model, warmup)
        )


@wrong("noam", r"'warm-up not linear'.*never starts to warm up", listed=False)
class NoamFloorDivision:  # // where / belongs: the warm-up branch rounds down to 0
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        return d_model**-0.5 * min(n**-0.5, n // warmup**1.5)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamFloorDivision.noam_lambda(s, d_model, warmup)
        )


@wrong("noam", r"'schedule scaled wrongly'.*0.001 · d_model\^-0.5", listed=False)
class NoamBaseLrInDecay:  # the base lr multiplied into the decay branch only
    def noam_lambda(step, d_model, warmup, lr=1e-3):
        n = step + 1
        return d_model**-0.5 * min(lr * n**-0.5, n * warmup**-1.5)

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamBaseLrInDecay.noam_lambda(s, d_model, warmup)
        )


@wrong(
    "noam",
    r"'warm-up length wrong'.*peaks at step 200, expected step 199",
    listed=False,
)
class NoamBranchOneLate:  # "step <= warmup": one warm-up step too many
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        if step <= warmup:  # still warming up
            return d_model**-0.5 * n * warmup**-1.5
        return d_model**-0.5 * n**-0.5

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamBranchOneLate.noam_lambda(s, d_model, warmup)
        )


@wrong("noam", r"'noam_lambda does not return a number'.*a NoneType", listed=False)
class NoamForgotReturn:  # computes the rate into a variable, never returns it
    def noam_lambda(step, d_model, warmup):
        n = step + 1
        lr = d_model**-0.5 * min(n**-0.5, n * warmup**-1.5)  # noqa: F841

    def make_scheduler(optimizer, d_model, warmup):
        return LambdaLR(
            optimizer, lambda s: NoamForgotReturn.noam_lambda(s, d_model, warmup)
        )
