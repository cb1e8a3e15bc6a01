"""Chapter 8's measured bank for next_token_probs (the format: tests/bank/bank.py).

Each answer is literal learner code; a comment says what the mistake is and why a
learner would make it. The answers were written from the exercise's interface alone,
before the chapter's checks existed, so that the bank measures the checks rather than
echoing them. How the expected diagnoses are written (``_named``) and how the chapter's
bank was measured: answers_ch08.py.
"""

import math

import torch
import torch.nn.functional as F

from bank import GENERIC, right, wrong  # noqa: F401
from exercise_cells import graders
from answers_ch08 import _named

# Every check of an exercise: its test cells, hidden tests included (exercise_cells).
GRADERS = graders("ch08_generation", {"next_token_probs": "next_token_probs"})


TOP_P = r"top-?p|nucleus|top_p"
# The kept set is not the most likely tokens: a sort, an unsort or an axis gone wrong.
NOT_MOST_LIKELY = _named(r"not the most likely|ascend|least likely|order|sort")
# Every token keeps some probability: the cut tokens were never given -inf (or 0).
NOTHING_CUT = _named(TOP_P, r"not applied|nothing (was )?cut|ignor|forg|no cut")
# The distribution is the temperature-1 one whatever T is.
TEMPERATURE_UNUSED = _named(
    "temperature",
    r"ignor|not (used|applied)|not at all|"
    r"missing|forg|never|no effect|unused",
)


# ------------------------------------------------------------------------ right ones


@right("next_token_probs")
def probs_lesson_style(logits, temperature, top_p):
    logits = logits / temperature
    probs = logits.softmax(dim=-1)
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
    keep_sorted = mass_before < top_p
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    return logits.masked_fill(~keep, float("-inf")).softmax(dim=-1)


@right("next_token_probs")
def probs_python_loop(logits, temperature, top_p):
    # Walks each row's tokens from the most likely down, adding them until p is reached.
    probs = torch.softmax(logits / temperature, dim=-1)
    out = torch.zeros_like(probs)
    for row in range(probs.shape[0]):
        total = 0.0
        for idx in torch.argsort(probs[row], descending=True).tolist():
            out[row, idx] = probs[row, idx]
            total += probs[row, idx].item()
            if total >= top_p:
                break
    return out / out.sum(dim=-1, keepdim=True)


@right("next_token_probs")
def probs_sorted_ascending(logits, temperature, top_p):
    # Sorted ascending on purpose: the mass above a token is what comes after it.
    probs = F.softmax(logits / temperature, dim=-1)
    asc, idx = torch.sort(probs, dim=-1)
    above = asc.flip(-1).cumsum(-1).flip(-1) - asc
    kept = torch.where(above < top_p, asc, torch.zeros_like(asc))
    result = torch.zeros_like(probs).scatter(-1, idx, kept)
    return result / result.sum(-1, keepdim=True)


@right("next_token_probs")
def probs_torch_where_unsort(logits, temperature, top_p):
    probs = torch.softmax(logits / temperature, -1)
    sorted_p, sorted_idx = torch.sort(probs, descending=True, dim=-1)
    cum = torch.cumsum(sorted_p, dim=-1)
    sorted_p = torch.where(cum - sorted_p >= top_p, 0.0, sorted_p)
    unsorted = sorted_p.gather(-1, sorted_idx.argsort(dim=-1))
    return unsorted / unsorted.sum(dim=-1, keepdim=True)


@right("next_token_probs")
def probs_log_softmax_searchsorted(logits, temperature, top_p):
    probs = (logits / temperature).log_softmax(dim=-1).exp()
    sorted_p, order = probs.sort(descending=True)
    cum = sorted_p.cumsum(-1)
    # First index whose cumulative mass reaches p; everything up to it stays.
    target = torch.full((probs.size(0), 1), float(top_p), device=probs.device)
    last = torch.searchsorted(cum, target).clamp(max=probs.size(-1) - 1)
    ranks = torch.arange(probs.size(-1), device=probs.device).expand_as(cum)
    keep_sorted = ranks <= last
    keep = keep_sorted.gather(-1, order.argsort(-1))
    kept = probs * keep
    return kept / kept.sum(-1, keepdim=True)


@right("next_token_probs")
def probs_power_of_probabilities(logits, temperature, top_p):
    # p ** (1 / T), renormalised, is softmax(logits / T): the same distribution.
    p = logits.softmax(-1) ** (1.0 / temperature)
    p = p / p.sum(-1, keepdim=True)
    vals, idx = p.sort(-1, descending=True)
    drop = (vals.cumsum(-1) - vals) >= top_p
    vals = vals.masked_fill(drop, 0.0)
    p = torch.empty_like(p).scatter_(-1, idx, vals)
    return p / p.sum(-1, keepdim=True)


@right("next_token_probs")
def probs_sort_logits_first(logits, temperature, top_p):
    # Sorting the logits and taking the softmax of the sorted row is the same order.
    scaled = logits * (1.0 / temperature)
    sorted_logits, indices = torch.sort(scaled, descending=True)
    sorted_probs = sorted_logits.softmax(-1)
    remove = sorted_probs.cumsum(-1) >= top_p
    remove[..., 1:] = remove[..., :-1].clone()  # shift right: the crossing token stays
    remove[..., 0] = False
    mask = remove.scatter(-1, indices, remove)
    return scaled.masked_fill(mask, -float("inf")).softmax(-1)


@right("next_token_probs")
def probs_topk_full_then_mask(logits, temperature, top_p):
    scaled = logits / temperature
    probs = F.softmax(scaled, dim=-1)
    top = torch.topk(probs, k=probs.size(-1), dim=-1)  # all of them, sorted
    before = torch.cumsum(top.values, dim=-1) - top.values
    keep = torch.zeros_like(probs, dtype=torch.bool)
    keep.scatter_(-1, top.indices, before < top_p)
    probs = probs * keep
    return probs / probs.sum(dim=-1, keepdim=True)


@right("next_token_probs")
def probs_early_return_when_p_is_one(logits, temperature, top_p):
    scaled = logits / temperature
    if top_p >= 1.0:
        return scaled.softmax(-1)
    probs = scaled.softmax(-1)
    s, i = probs.sort(-1, descending=True)
    keep = (s.cumsum(-1) - s) < top_p
    keep = keep.scatter(-1, i, keep)
    return scaled.masked_fill(keep.logical_not(), float("-inf")).softmax(-1)


@right("next_token_probs")
def probs_per_row_list(logits, temperature, top_p):
    rows = []
    for row in logits / temperature:
        p = row.softmax(0)
        order = p.argsort(descending=True)
        n_keep = int(((p[order].cumsum(0) - p[order]) < top_p).sum())
        kept = torch.zeros_like(p)
        kept[order[:n_keep]] = p[order[:n_keep]]
        rows.append(kept / kept.sum())
    return torch.stack(rows)


# ------------------------------------------------------------------------ wrong ones


@wrong(
    "next_token_probs",
    _named("temperature", r"after|probabilit|softmax|no effect"),
    listed=True,
)
def probs_temperature_after_softmax(logits, temperature, top_p):
    # Divides the probabilities by T: after the renormalisation T has no effect at all.
    probs = logits.softmax(-1) / temperature
    s, i = probs.sort(-1, descending=True)
    keep = (s.cumsum(-1) - s) < top_p
    keep = keep.scatter(-1, i, keep)
    probs = probs * keep
    return probs / probs.sum(-1, keepdim=True)


@wrong(
    "next_token_probs", _named("temperature", "after|probabilit|softmax"), listed=True
)
def probs_softmax_of_probs_over_t(logits, temperature, top_p):
    # Softmax first "to get probabilities", then the usual softmax(x / T) on those.
    probs = torch.softmax(logits, -1)
    probs = torch.softmax(probs / temperature, -1)
    s, i = probs.sort(-1, descending=True)
    keep = (s.cumsum(-1) - s) < top_p
    keep = keep.scatter(-1, i, keep)
    probs = probs * keep
    return probs / probs.sum(-1, keepdim=True)


@wrong(
    "next_token_probs",
    _named("temperature", r"multipl|times|instead of divid"),
    listed=True,
)
def probs_temperature_multiplied(logits, temperature, top_p):
    # "Scale by the temperature" read as multiply: T = 0.5 flattens instead of sharpens.
    logits = logits * temperature
    probs = logits.softmax(-1)
    s, i = probs.sort(-1, descending=True)
    keep = ((s.cumsum(-1) - s) < top_p).scatter(-1, i, (s.cumsum(-1) - s) < top_p)
    return logits.masked_fill(~keep, float("-inf")).softmax(-1)


@wrong(
    "next_token_probs", _named(TOP_P, r"cross|drop|exclud|boundary|last"), listed=True
)
def probs_drops_crossing_token(logits, temperature, top_p):
    # Keeps the tokens whose running sum stays within p: the one that crosses p goes.
    logits = logits / temperature
    probs = logits.softmax(-1)
    s, i = probs.sort(-1, descending=True)
    keep_sorted = s.cumsum(-1) <= top_p
    keep_sorted[..., 0] = True  # "never empty", as the lesson says
    keep = keep_sorted.scatter(-1, i, keep_sorted)
    return logits.masked_fill(~keep, float("-inf")).softmax(-1)


@wrong(
    "next_token_probs",
    _named(TOP_P, r"cross|drop|exclud|none|empty|nothing|nan"),
    listed=True,
)
def probs_keeps_none_when_top_exceeds_p(logits, temperature, top_p):
    # cumsum < p with no guard: a top token above p alone leaves an empty set (NaN).
    logits = logits / temperature
    sorted_probs, order = logits.softmax(-1).sort(-1, descending=True)
    keep_sorted = sorted_probs.cumsum(-1) < top_p
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    return logits.masked_fill(~keep, float("-inf")).softmax(-1)


@wrong(
    "next_token_probs",
    _named(TOP_P, r"none|empty|nothing|nan|cross|exclud"),
    listed=False,
)
def probs_keeps_none_zero_division(logits, temperature, top_p):
    # Zeroes the tokens past p and renormalises: an empty set divides 0 by 0.
    probs = torch.softmax(logits / temperature, dim=-1)
    s, i = torch.sort(probs, descending=True)
    s[torch.cumsum(s, dim=-1) > top_p] = 0.0
    probs = torch.zeros_like(probs).scatter(-1, i, s)
    return probs / probs.sum(-1, keepdim=True)


@wrong("next_token_probs", _named(TOP_P, r"logit|not the most likely"), listed=False)
def probs_top_p_on_logits(logits, temperature, top_p):
    # Runs the cumulative sum over the sorted logits instead of the probabilities.
    logits = logits / temperature
    s, i = logits.sort(-1, descending=True)
    keep_sorted = (s.cumsum(-1) - s) < top_p
    keep = keep_sorted.scatter(-1, i, keep_sorted)
    return logits.masked_fill(~keep, float("-inf")).softmax(-1)


@wrong(
    "next_token_probs",
    _named(
        TOP_P,
        r"cross|one (token )?too many|extra|reach|"
        r"boundary|off.by.one|>=|at least|more",
    ),
    listed=False,
)
def probs_strict_greater_shift(logits, temperature, top_p):
    # The usual shift-right recipe with cum > p: where the sum hits p exactly it keeps
    # one token more than the smallest set that reaches p.
    logits = logits / temperature
    s, i = logits.softmax(-1).sort(-1, descending=True)
    remove = s.cumsum(-1) > top_p
    remove[..., 1:] = remove[..., :-1].clone()
    remove[..., 0] = False
    return logits.masked_fill(remove.scatter(-1, i, remove), float("-inf")).softmax(-1)


@wrong(
    "next_token_probs",
    r"'top-p keeps none when the top token alone exceeds p'",
    listed=False,
)
def probs_shift_without_keeping_first(logits, temperature, top_p):
    # The shift-right recipe with >= but without remove[..., 0] = False: a top token
    # above p removes itself, and the shift then removes all the others too.
    logits = logits / temperature
    s, i = logits.softmax(-1).sort(-1, descending=True)
    remove = s.cumsum(-1) >= top_p
    remove[..., 1:] = remove[..., :-1].clone()
    return logits.masked_fill(remove.scatter(-1, i, remove), float("-inf")).softmax(-1)


@wrong("next_token_probs", _named(r"renormali|normali|sum"), listed=True)
def probs_not_renormalised(logits, temperature, top_p):
    # Zeroes the cut tokens of the softmax and returns that: rows sum to less than 1.
    probs = F.softmax(logits / temperature, dim=-1)
    s, i = probs.sort(-1, descending=True)
    keep = ((s.cumsum(-1) - s) < top_p).scatter(-1, i, (s.cumsum(-1) - s) < top_p)
    return probs * keep


@wrong("next_token_probs", NOT_MOST_LIKELY, listed=False)
def probs_sorted_ascending_by_mistake(logits, temperature, top_p):
    # torch.sort's default is ascending: the set is built from the least likely tokens.
    logits = logits / temperature
    s, i = torch.sort(logits.softmax(-1), dim=-1)
    keep_sorted = (s.cumsum(-1) - s) < top_p
    keep = keep_sorted.scatter(-1, i, keep_sorted)
    return logits.masked_fill(~keep, float("-inf")).softmax(-1)


@wrong("next_token_probs", _named(r"before|order|first", r"temperature"), listed=True)
def probs_top_p_before_temperature(logits, temperature, top_p):
    # Cuts the nucleus of the T = 1 distribution, then applies the temperature.
    probs = logits.softmax(-1)
    s, i = probs.sort(-1, descending=True)
    keep = ((s.cumsum(-1) - s) < top_p).scatter(-1, i, (s.cumsum(-1) - s) < top_p)
    return (logits / temperature).masked_fill(~keep, float("-inf")).softmax(-1)


@wrong("next_token_probs", TEMPERATURE_UNUSED, listed=False)
def probs_temperature_forgotten(logits, temperature, top_p):
    # The temperature argument is never used.
    probs = logits.softmax(-1)
    s, i = probs.sort(-1, descending=True)
    keep = ((s.cumsum(-1) - s) < top_p).scatter(-1, i, (s.cumsum(-1) - s) < top_p)
    return logits.masked_fill(~keep, float("-inf")).softmax(-1)


@wrong("next_token_probs", r"'temperature applied twice'.*temperature 4", listed=False)
def probs_temperature_twice(logits, temperature, top_p):
    # Divides in place "to scale", then once more in the return line.
    logits = logits / temperature
    s, i = logits.softmax(-1).sort(-1, descending=True)
    keep = ((s.cumsum(-1) - s) < top_p).scatter(-1, i, (s.cumsum(-1) - s) < top_p)
    return (logits / temperature).masked_fill(~keep, float("-inf")).softmax(-1)


@wrong("next_token_probs", TEMPERATURE_UNUSED, listed=False)
def probs_temperature_subtracted(logits, temperature, top_p):
    # "Shift the logits by T": a constant shift that a softmax does not see.
    logits = logits - temperature
    probs = logits.softmax(-1)
    s, i = probs.sort(-1, descending=True)
    keep = ((s.cumsum(-1) - s) < top_p).scatter(-1, i, (s.cumsum(-1) - s) < top_p)
    return logits.masked_fill(~keep, float("-inf")).softmax(-1)


@wrong("next_token_probs", NOTHING_CUT, listed=False)
def probs_masked_with_zero(logits, temperature, top_p):
    # masked_fill with 0 on the logits: a cut token is a logit of 0, not -inf.
    logits = logits / temperature
    s, i = logits.softmax(-1).sort(-1, descending=True)
    keep = ((s.cumsum(-1) - s) < top_p).scatter(-1, i, (s.cumsum(-1) - s) < top_p)
    return logits.masked_fill(~keep, 0.0).softmax(-1)


@wrong("next_token_probs", NOT_MOST_LIKELY, listed=False)
def probs_mask_not_unsorted(logits, temperature, top_p):
    # Builds the keep mask in sorted order and applies it to the unsorted row.
    logits = logits / temperature
    s, _ = logits.softmax(-1).sort(-1, descending=True)
    keep = (s.cumsum(-1) - s) < top_p
    return logits.masked_fill(~keep, float("-inf")).softmax(-1)


@wrong("next_token_probs", NOT_MOST_LIKELY, listed=False)
def probs_gather_instead_of_scatter(logits, temperature, top_p):
    # Maps the sorted mask back with gather(order): the inverse permutation is needed.
    logits = logits / temperature
    s, order = logits.softmax(-1).sort(-1, descending=True)
    keep_sorted = (s.cumsum(-1) - s) < top_p
    keep = keep_sorted.gather(-1, order)
    return logits.masked_fill(~keep, float("-inf")).softmax(-1)


@wrong("next_token_probs", r"'top-p read as a threshold on each token'", listed=False)
def probs_threshold_each_token(logits, temperature, top_p):
    # Reads top-p as "keep the tokens whose own probability is at least 1 - p".
    probs = (logits / temperature).softmax(-1)
    keep = probs >= (1 - top_p)
    keep[torch.arange(len(probs)), probs.argmax(-1)] = True
    probs = probs * keep
    return probs / probs.sum(-1, keepdim=True)


@wrong(
    "next_token_probs",
    r"'top-p read as a share of the vocabulary'.*\(9 here\)",
    listed=False,
)
def probs_fraction_of_vocabulary(logits, temperature, top_p):
    # Reads top-p as the top p share of the vocabulary: top-k with k = ceil(p * V).
    logits = logits / temperature
    k = max(1, math.ceil(top_p * logits.size(-1)))
    kth = logits.topk(k, dim=-1).values[:, -1:]
    return logits.masked_fill(logits < kth, float("-inf")).softmax(-1)


@wrong("next_token_probs", NOT_MOST_LIKELY, listed=False)
def probs_softmax_over_batch(logits, temperature, top_p):
    # softmax(dim=0): each vocabulary entry normalised across the batch.
    logits = logits / temperature
    probs = torch.softmax(logits, dim=0)
    s, i = probs.sort(-1, descending=True)
    keep = ((s.cumsum(-1) - s) < top_p).scatter(-1, i, (s.cumsum(-1) - s) < top_p)
    probs = probs * keep
    return probs / probs.sum(-1, keepdim=True)


@wrong("next_token_probs", _named(r"renormali|normali|sum"), listed=False)
def probs_renormalised_over_batch(logits, temperature, top_p):
    # .sum() without a dim: the whole batch's kept mass is the divisor.
    probs = (logits / temperature).softmax(-1)
    s, i = probs.sort(-1, descending=True)
    keep = ((s.cumsum(-1) - s) < top_p).scatter(-1, i, (s.cumsum(-1) - s) < top_p)
    probs = probs * keep
    return probs / probs.sum()


@wrong("next_token_probs", NOT_MOST_LIKELY, listed=False)
def probs_cumsum_unsorted(logits, temperature, top_p):
    # Forgets to sort: the running sum follows the vocabulary's order.
    logits = logits / temperature
    probs = logits.softmax(-1)
    keep = (probs.cumsum(-1) - probs) < top_p
    return logits.masked_fill(~keep, float("-inf")).softmax(-1)


@wrong("next_token_probs", NOT_MOST_LIKELY, listed=False)
def probs_keeps_the_tail(logits, temperature, top_p):
    # The comparison the wrong way round: keeps what lies past p, not the nucleus.
    logits = logits / temperature
    s, i = logits.softmax(-1).sort(-1, descending=True)
    keep_sorted = s.cumsum(-1) >= top_p
    keep = keep_sorted.scatter(-1, i, keep_sorted)
    return logits.masked_fill(~keep, float("-inf")).softmax(-1)


@wrong("next_token_probs", TEMPERATURE_UNUSED, listed=False)
def probs_early_return_skips_temperature(logits, temperature, top_p):
    # A shortcut for "no top-p" that returns before the temperature is applied.
    if top_p == 1.0:
        return logits.softmax(-1)
    logits = logits / temperature
    s, i = logits.softmax(-1).sort(-1, descending=True)
    keep = ((s.cumsum(-1) - s) < top_p).scatter(-1, i, (s.cumsum(-1) - s) < top_p)
    return logits.masked_fill(~keep, float("-inf")).softmax(-1)


@wrong(
    "next_token_probs",
    _named(r"other than probabilities|not probabilities|logits"),
    listed=False,
)
def probs_returns_filtered_logits(logits, temperature, top_p):
    # Stops one line early: returns the filtered logits, not their softmax.
    logits = logits / temperature
    s, i = logits.softmax(-1).sort(-1, descending=True)
    keep = ((s.cumsum(-1) - s) < top_p).scatter(-1, i, (s.cumsum(-1) - s) < top_p)
    return logits.masked_fill(~keep, float("-inf"))


@wrong("next_token_probs", NOTHING_CUT, listed=False)
def probs_renormalised_with_softmax_again(logits, temperature, top_p):
    # "Renormalise" by a second softmax over the zeroed probabilities.
    probs = torch.softmax(logits / temperature, dim=-1)
    s, i = probs.sort(-1, descending=True)
    keep = ((s.cumsum(-1) - s) < top_p).scatter(-1, i, (s.cumsum(-1) - s) < top_p)
    return torch.softmax(probs * keep, dim=-1)


@wrong("next_token_probs", NOT_MOST_LIKELY, listed=False)
def probs_cumsum_over_batch(logits, temperature, top_p):
    # cumsum(dim=0): the running sum runs down the batch instead of along the row.
    logits = logits / temperature
    s, i = logits.softmax(-1).sort(-1, descending=True)
    keep_sorted = (s.cumsum(0) - s) < top_p
    keep = keep_sorted.scatter(-1, i, keep_sorted)
    return logits.masked_fill(~keep, float("-inf")).softmax(-1)


@wrong(
    "next_token_probs",
    _named(
        TOP_P,
        r"ignor|not (used|applied)|missing|forg|"
        r"never|no effect|unused|no cut|nothing cut",
    ),
    listed=False,
)
def probs_top_p_forgotten(logits, temperature, top_p):
    # Only the temperature: the nucleus cut is never made.
    return torch.softmax(logits / temperature, dim=-1)


@wrong("next_token_probs", r"softmax overflows", listed=False)
def probs_exp_without_max(logits, temperature, top_p):
    # A softmax by hand without subtracting the max: a low temperature overflows exp.
    e = torch.exp(logits / temperature)
    probs = e / e.sum(-1, keepdim=True)
    s, i = probs.sort(-1, descending=True)
    keep = ((s.cumsum(-1) - s) < top_p).scatter(-1, i, (s.cumsum(-1) - s) < top_p)
    probs = probs * keep
    return probs / probs.sum(-1, keepdim=True)


@wrong(
    "next_token_probs",
    _named("temperature", r"invert|reciprocal|1 ?/|multipl"),
    listed=False,
)
def probs_temperature_inverted(logits, temperature, top_p):
    # logits / (1 / T): "temperature" taken as the inverse temperature beta.
    beta = 1.0 / temperature
    logits = logits / beta
    s, i = logits.softmax(-1).sort(-1, descending=True)
    keep = ((s.cumsum(-1) - s) < top_p).scatter(-1, i, (s.cumsum(-1) - s) < top_p)
    return logits.masked_fill(~keep, float("-inf")).softmax(-1)
