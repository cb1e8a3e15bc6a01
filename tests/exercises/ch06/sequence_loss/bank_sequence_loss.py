"""Chapter 6's measured bank for sequence_loss (the format: tests/bank/bank.py)."""

import torch
import torch.nn.functional as F

from bank import GENERIC, right, wrong  # noqa: F401
from exercise_cells import graders

GRADERS = graders("ch06_training", {"sequence_loss": "sequence_loss"})


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
