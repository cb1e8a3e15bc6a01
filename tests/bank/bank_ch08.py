"""Chapter 8's measured bank: next_token_probs, lm_step, generate_greedy (see bank.py).

Each answer is literal learner code; a comment says what the mistake is and why a
learner would make it. The answers were written from the exercise's interface alone,
before the chapter's checks existed, so that the bank measures the checks rather than
echoing them.

The expected diagnoses are written against the *name* of the pitfall a failure gives
(``this looks like the pitfall '<name>'``, see ``diagnosis.Diagnosis.fail``): ``_named``
builds a pattern that requires every group of words in that name, in any order, so a
check may word the mistake its own way but must name the right one. A few entries
expect instead the measured quantity the failure states.

After one measurement against the checks, two kinds of expectation were changed, and
no other: a pattern was widened where the check names the same mistake in words of
its own (say 'temperature has no effect' for probabilities divided by T, or 'not
causal: the future is visible' for a triu or inverted mask), and a mistake no check
was written for that the checks reject with a precise observation but no name became
GENERIC. ``listed`` marks the canonical form of a mistake the checks name.

The first measurement (81 of 85 wrong answers rejected, 62 named, 15 generic, 4
misnamed) found classes of mistake the checks had no case or probe for: a running sum
that reaches p exactly, logits large enough to overflow exp, dropout at eval, float
token ids, a cache mismanaged by the loop rather than the step, positions wrong on an
empty cache. The checks gained those cases and probes (without reading this file), and
five GENERIC entries that they now name were relabelled with that name: so for those
five classes this bank is no longer a measure of mistakes nobody listed.
"""

import math

import torch
import torch.nn.functional as F

from bank import GENERIC, right, wrong  # noqa: F401
from exercise_cells import graders
from tformer_ref.kv_cache import KVCache
from tformer_ref.masks import causal_mask

# Every check of an exercise: its test cells, hidden tests included (exercise_cells).
GRADERS = graders(
    "ch08_generation",
    {
        "next_token_probs": "next_token_probs",
        "lm_step": "lm_step",
        "generate_greedy": "generate_greedy",
    },
)


def _named(*groups: str) -> str:
    """A pattern for a failure naming a pitfall whose name holds each alternation of
    ``groups`` (case-insensitive, any order)."""
    inside = r"(?:(?!'\.\s).)*?"  # stays within the quoted name
    return r"(?i)pitfall '" + "".join(f"(?={inside}(?:{g}))" for g in groups)


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


# =================================================================== next_token_probs
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


# ============================================================================ lm_step
# ------------------------------------------------------------------------ right ones


@right("lm_step")
def step_loop_over_layers(model, tokens, cache):
    past = cache.length
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past))
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@right("lm_step")
def step_calls_the_stack(model, tokens, cache):
    # The Encoder stack takes the cache itself and applies the final norm.
    past = cache.length
    mask = causal_mask(tokens.shape[1], device=tokens.device, past=past)
    h = model.tok_embed(tokens) * model.d_model**0.5
    h = model.pos(h, start=past)
    h = model.dropout(h)
    return model.lm_head(model.blocks(h, mask, cache))


@right("lm_step")
def step_mask_by_hand(model, tokens, cache):
    B, S = tokens.shape
    past = cache.length
    mask = torch.ones(S, past + S, dtype=torch.bool, device=tokens.device)
    mask = mask.tril(diagonal=past).view(1, 1, S, past + S)
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, past))
    for layer_index in range(len(model.blocks.layers)):
        x = model.blocks.layers[layer_index](x, mask, cache.layer(layer_index))
    x = model.blocks.norm(x)
    return model.lm_head(x)


@right("lm_step")
def step_no_mask_for_one_token(model, tokens, cache):
    # One new query may see every cached key and itself: no mask is needed then.
    n_new, past = tokens.size(1), cache.length
    mask = None if n_new == 1 else causal_mask(n_new, tokens.device, past=past)
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past))
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@right("lm_step")
def step_bottom_rows_of_full_mask(model, tokens, cache):
    # The full (past + S) causal mask, keeping only the rows of the new queries.
    past, S = cache.length, tokens.size(1)
    mask = causal_mask(past + S, tokens.device)[:, :, past:, :]
    x = model.pos(model.tok_embed(tokens) * math.sqrt(model.d_model), start=past)
    x = model.dropout(x)
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@right("lm_step")
def step_mask_from_positions(model, tokens, cache):
    start = cache.length
    q_pos = torch.arange(start, start + tokens.size(1), device=tokens.device)
    k_pos = torch.arange(start + tokens.size(1), device=tokens.device)
    mask = (k_pos[None, :] <= q_pos[:, None])[None, None]
    scale = torch.tensor(float(model.d_model)).sqrt().item()
    x = model.dropout(model.pos(model.tok_embed(tokens) * scale, start=start))
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask=mask, kv=cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@right("lm_step")
def step_inverted_ignore_mask(model, tokens, cache):
    # Builds the "future" mask with triu and inverts it into a keep-mask.
    past, S = cache.length, tokens.size(1)
    future = torch.ones(S, past + S, device=tokens.device).triu(past + 1).bool()
    keep = ~future[None, None]
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past))
    return model.lm_head(model.blocks(x, keep, cache))


@right("lm_step")
def step_layer_caches_listed_first(model, tokens, cache):
    start = cache.length  # read before any layer grows the cache
    layer_caches = [cache.layer(i) for i in range(len(model.blocks.layers))]
    mask = causal_mask(tokens.size(1), tokens.device, past=start)
    x = model.tok_embed(tokens).mul(math.sqrt(model.d_model))
    x = model.dropout(model.pos(x, start=start))
    for block, kv in zip(model.blocks.layers, layer_caches):
        x = block(x, mask, kv)
    return model.lm_head(model.blocks.norm(x))


@right("lm_step")
def step_under_no_grad(model, tokens, cache):
    with torch.no_grad():
        past = cache.length
        x = model.tok_embed(tokens) * math.sqrt(model.d_model)
        x = model.dropout(model.pos(x, start=past))
        mask = causal_mask(tokens.size(1), device=x.device, past=past)
        for i, block in enumerate(model.blocks.layers):
            x = block(x, mask, cache.layer(i))
        logits = model.lm_head(model.blocks.norm(x))
    return logits


# ------------------------------------------------------------------------ wrong ones

POSITION = r"position"
MASK = r"mask"


@wrong("lm_step", r"'positions not added'", listed=True)
def step_positions_forgotten(model, tokens, cache):
    # "The cache knows where the new tokens go": model.pos is never called.
    past = cache.length
    x = model.dropout(model.tok_embed(tokens) * math.sqrt(model.d_model))
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@wrong("lm_step", _named(POSITION), listed=True)
def step_positions_not_offset(model, tokens, cache):
    # The whole-sequence forward copied over: positions restart at 0 on every step.
    past = cache.length
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x))
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@wrong("lm_step", r"positions added wrongly", listed=False)
def step_positions_added_twice(model, tokens, cache):
    # Adds the positions, then adds them again: positions counted into x twice.
    past = cache.length
    x = model.pos(model.tok_embed(tokens) * math.sqrt(model.d_model), start=past)
    x = model.dropout(model.pos(x, start=past))
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@wrong("lm_step", _named(POSITION), listed=False)
def step_positions_offset_twice(model, tokens, cache):
    # Keeps its own step counter on top of the cache length: the offset is doubled.
    past = cache.length
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past + past))
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@wrong("lm_step", r"positions added wrongly.*a start of 1", listed=False)
def step_positions_from_one(model, tokens, cache):
    # One-based positions: the first token sits at position 1.
    past = cache.length
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past + 1))
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@wrong("lm_step", r"positions added wrongly", listed=False)
def step_positions_start_at_new_length(model, tokens, cache):
    # Offsets by the number of new tokens instead of the cached ones.
    S = tokens.size(1)
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=S - 1))
    mask = causal_mask(S, tokens.device, past=cache.length)
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@wrong("lm_step", _named(MASK, r"full|length|shape|size"), listed=True)
def step_mask_full_length(model, tokens, cache):
    # The causal mask of the whole sequence so far, as the uncached forward builds it.
    past = cache.length
    mask = causal_mask(past + tokens.size(1), tokens.device)
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past))
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@wrong(
    "lm_step", _named(MASK, r"past|cache|shape|size|length|full|row|key"), listed=True
)
def step_mask_ignores_past(model, tokens, cache):
    # causal_mask(S): right for the prompt, too few keys once the cache holds tokens.
    past = cache.length
    mask = causal_mask(tokens.size(1), tokens.device)
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past))
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@wrong("lm_step", _named(MASK, r"row|top|first|bottom|past|offset|wrong"), listed=True)
def step_mask_top_rows(model, tokens, cache):
    # Cuts the full mask down to S rows from the top: the rows of the first queries.
    past, S = cache.length, tokens.size(1)
    mask = causal_mask(past + S, tokens.device)[:, :, :S, :]
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past))
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@wrong("lm_step", _named(MASK, r"row|past|offset|diagonal|wrong|key"), listed=False)
def step_mask_tril_without_diagonal(model, tokens, cache):
    # Right shape by hand, but tril() without diagonal=past: the new queries see only
    # the first cached keys.
    past, S = cache.length, tokens.size(1)
    mask = torch.ones(S, past + S, dtype=torch.bool, device=tokens.device).tril()
    mask = mask[None, None]
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past))
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@wrong("lm_step", _named(r"not causal|future|invert|opposite|triu|upper"), listed=False)
def step_mask_triu(model, tokens, cache):
    # triu in place of tril: every query sees itself and the future, not the past.
    past, S = cache.length, tokens.size(1)
    mask = torch.ones(S, past + S, dtype=torch.bool, device=tokens.device)
    mask = mask.triu(diagonal=past)[None, None]
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past))
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@wrong("lm_step", _named(r"not causal|future|invert|opposite|triu|upper"), listed=False)
def step_mask_inverted(model, tokens, cache):
    # nn.MultiheadAttention's convention (True = masked) handed to a keep-mask model.
    past = cache.length
    mask = ~causal_mask(tokens.size(1), tokens.device, past=past)
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past))
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@wrong("lm_step", _named(r"not causal|future|no mask|without"), listed=False)
def step_no_mask_at_all(model, tokens, cache):
    # "The cache only holds the past, so nothing to hide": but the prompt's queries
    # then see the prompt's later tokens.
    past = cache.length
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past))
    for i, block in enumerate(model.blocks.layers):
        x = block(x, None, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@wrong(
    "lm_step",
    _named(MASK, r"float|dtype|bool|additive") + r"|got dtype torch\.float",
    listed=False,
)
def step_float_mask(model, tokens, cache):
    # An additive 0 / -inf mask, as many tutorials build; this model takes a bool mask.
    past, S = cache.length, tokens.size(1)
    mask = torch.full((S, past + S), float("-inf"), device=tokens.device)
    mask = mask.triu(diagonal=past + 1)[None, None]
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past))
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@wrong(
    "lm_step",
    _named(
        "cache",
        r"not grow|never grow|not passed|unused|no cache|"
        r"not (updated|filled|used)|empty|length|grown",
    ),
    listed=True,
)
def step_cache_not_passed(model, tokens, cache):
    # Calls the blocks without their LayerKV: nothing is cached, the past is never seen.
    past = cache.length
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past))
    mask = causal_mask(tokens.size(1), tokens.device)
    for block in model.blocks.layers:
        x = block(x, mask)
    return model.lm_head(model.blocks.norm(x))


@wrong(
    "lm_step",
    _named(
        "cache",
        r"not grow|never grow|not passed|unused|no cache|"
        r"not (updated|filled|used)|empty|length|grown",
    ),
    listed=False,
)
def step_stack_without_cache(model, tokens, cache):
    # model.blocks(x, mask): the stack's cache argument left at its default None.
    mask = causal_mask(tokens.size(1), tokens.device)
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=cache.length))
    return model.lm_head(model.blocks(x, mask))


@wrong(
    "lm_step",
    _named("cache", r"twice|double|grown by|more than|too much|2"),
    listed=True,
)
def step_debug_forward_left_in(model, tokens, cache):
    # A check against the model's own forward left in: it grows the cache a second time.
    past = cache.length
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past))
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    logits = model.lm_head(model.blocks.norm(x))
    model(tokens, cache=cache)  # same as mine?
    return logits


@wrong("lm_step", _named("dropout"), listed=False)
def step_functional_dropout(model, tokens, cache):
    # F.dropout's training argument defaults to True: dropout even in eval mode.
    past = cache.length
    x = model.pos(model.tok_embed(tokens) * math.sqrt(model.d_model), start=past)
    x = F.dropout(x, p=model.dropout.p)
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@wrong("lm_step", _named(r"√|sqrt|scale"), listed=True)
def step_no_embedding_scale(model, tokens, cache):
    # The √D scale of the embeddings forgotten.
    past = cache.length
    x = model.dropout(model.pos(model.tok_embed(tokens), start=past))
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@wrong("lm_step", r"'embeddings scaled by d_model'", listed=True)
def step_scaled_by_d(model, tokens, cache):
    # Scales by D instead of its square root.
    past = cache.length
    x = model.dropout(model.pos(model.tok_embed(tokens) * model.d_model, start=past))
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@wrong("lm_step", r"'positions scaled with the embeddings'", listed=True)
def step_scale_after_positions(model, tokens, cache):
    # Multiplies by √D after adding the positions: the positions are scaled too.
    past = cache.length
    x = model.pos(model.tok_embed(tokens), start=past) * math.sqrt(model.d_model)
    x = model.dropout(x)
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@wrong("lm_step", _named(r"norm"), listed=True)
def step_no_final_norm(model, tokens, cache):
    # The loop over the layers replaces model.blocks, and its final norm is lost.
    past = cache.length
    x = model.dropout(
        model.pos(model.tok_embed(tokens) * math.sqrt(model.d_model), start=past)
    )
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(x)


@wrong("lm_step", _named(MASK, r"shape"), listed=False)
def step_past_read_inside_loop(model, tokens, cache):
    # Reads cache.length inside the loop: after layer 0 has grown, it is past + S.
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=cache.length))
    for i, block in enumerate(model.blocks.layers):
        mask = causal_mask(tokens.size(1), tokens.device, past=cache.length)
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@wrong("lm_step", _named("cache", r"same|one layer|shared|layer 0"), listed=False)
def step_one_layer_cache_for_all(model, tokens, cache):
    # cache.layer(0) for every block: all layers append to one LayerKV.
    past = cache.length
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past))
    mask = (
        None
        if tokens.size(1) == 1
        else causal_mask(tokens.size(1), tokens.device, past=past)
    )
    for block in model.blocks.layers:
        x = block(x, mask, cache.layer(0))
    return model.lm_head(model.blocks.norm(x))


@wrong(
    "lm_step",
    r"'a block is left out of the step'.*Layer\(s\) \[0\].*\[2\]",
    listed=False,
)
def step_layer_index_off_by_one(model, tokens, cache):
    # Counts the layers from 1 "because 0 is the embedding": cache.layer(0) stays
    # empty, so cache.length never moves.
    past = cache.length
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past))
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    for i, block in enumerate(model.blocks.layers, start=1):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@wrong(
    "lm_step", r"'the cached past is dropped'.*6 cached tokens are gone", listed=False
)
def step_resets_cache(model, tokens, cache):
    # "Start clean" at the top of each call: the cached past is thrown away.
    cache.reset()
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=cache.length))
    mask = causal_mask(tokens.size(1), tokens.device, past=cache.length)
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@wrong(
    "lm_step",
    r"'only one of the new tokens goes through'.*1 token where 5",
    listed=False,
)
def step_only_last_token(model, tokens, cache):
    # Assumes one new token per call: a prompt is cut to its last token.
    tokens = tokens[:, -1:]
    past = cache.length
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past))
    for i, block in enumerate(model.blocks.layers):
        x = block(x, None, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


@wrong(
    "lm_step", r"expected shape \[\d+, \d+, \d+\], got \[\d+, 1, \d+\]", listed=False
)
def step_returns_last_position_only(model, tokens, cache):
    # Returns the last position's logits only, the ones decoding needs: [B, 1, V].
    past = cache.length
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past))
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x[:, -1:]))


@wrong("lm_step", r"'probabilities instead of logits'", listed=False)
def step_returns_probabilities(model, tokens, cache):
    # A softmax at the end "to get the distribution": probabilities, not logits.
    past = cache.length
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past))
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x)).softmax(-1)


@wrong("lm_step", r"'a block is left out of the step'.*Layer\(s\) \[1\]", listed=False)
def step_last_layer_skipped(model, tokens, cache):
    # range(n_layers - 1): the last block never runs.
    past = cache.length
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past))
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    for i in range(len(model.blocks.layers) - 1):
        x = model.blocks.layers[i](x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


# ==================================================================== generate_greedy
# The learner's generate_greedy calls their own lm_step; here, a right one.


def lm_step(model, tokens, cache):
    past = cache.length
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past))
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))


# ------------------------------------------------------------------------ right ones


@right("generate_greedy")
def greedy_for_loop(model, prompt, max_new_tokens):
    cache = KVCache()
    tokens = prompt
    logits = lm_step(model, prompt, cache)
    for _ in range(max_new_tokens):
        next_token = logits[:, -1].argmax(dim=-1, keepdim=True)
        tokens = torch.cat([tokens, next_token], dim=1)
        logits = lm_step(model, next_token, cache)
    return tokens


@right("generate_greedy")
def greedy_while_loop(model, prompt, max_new_tokens):
    cache = KVCache()
    out = prompt.clone()
    step_input = prompt
    while out.size(1) < prompt.size(1) + max_new_tokens:
        logits = lm_step(model, step_input, cache)
        step_input = logits[:, -1, :].argmax(-1)[:, None]
        out = torch.cat((out, step_input), dim=-1)
    return out


@right("generate_greedy")
def greedy_argmax_of_softmax(model, prompt, max_new_tokens):
    cache = KVCache()
    seq = prompt
    x = prompt
    with torch.no_grad():
        for _ in range(max_new_tokens):
            probs = torch.softmax(lm_step(model, x, cache)[:, -1], dim=-1)
            x = probs.argmax(dim=-1).unsqueeze(1)
            seq = torch.cat([seq, x], dim=1)
    return seq


@right("generate_greedy")
def greedy_collect_then_cat(model, prompt, max_new_tokens):
    cache = KVCache()
    new_tokens = []
    inp = prompt
    for step in range(max_new_tokens):
        logits = lm_step(model, inp, cache)
        inp = logits[:, -1:].argmax(-1)  # [B, 1]
        new_tokens.append(inp)
    return torch.cat([prompt, *new_tokens], dim=1)


@right("generate_greedy")
def greedy_preallocated(model, prompt, max_new_tokens):
    B, S = prompt.shape
    out = torch.empty(B, S + max_new_tokens, dtype=torch.long, device=prompt.device)
    out[:, :S] = prompt
    cache = KVCache()
    for t in range(S, S + max_new_tokens):
        inp = out[:, :t] if t == S else out[:, t - 1 : t]
        out[:, t] = lm_step(model, inp, cache)[:, -1].argmax(-1)
    return out


@right("generate_greedy")
def greedy_prompt_token_by_token(model, prompt, max_new_tokens):
    # Feeds the prompt one token at a time too: slower, the same cache in the end.
    cache = KVCache()
    for i in range(prompt.size(1)):
        logits = lm_step(model, prompt[:, i : i + 1], cache)
    tokens = prompt
    for _ in range(max_new_tokens):
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, nxt], 1)
        if tokens.size(1) < prompt.size(1) + max_new_tokens:
            logits = lm_step(model, nxt, cache)
    return tokens


@right("generate_greedy")
def greedy_topk_one(model, prompt, max_new_tokens):
    if max_new_tokens == 0:
        return prompt.clone()
    cache = KVCache()
    tokens = prompt
    logits = lm_step(model, prompt, cache)[:, -1]
    for i in range(max_new_tokens):
        best = torch.topk(logits, 1, dim=-1).indices
        tokens = torch.cat([tokens, best], dim=1)
        if i + 1 < max_new_tokens:
            logits = lm_step(model, best, cache)[:, -1]
    return tokens


@right("generate_greedy")
def greedy_last_token_of_sequence(model, prompt, max_new_tokens):
    cache = KVCache()
    tokens = prompt
    for step in range(max_new_tokens):
        feed = tokens if step == 0 else tokens[:, -1:]
        logits = lm_step(model, feed, cache)
        tokens = torch.cat([tokens, logits[:, -1].argmax(-1).view(-1, 1)], dim=1)
    return tokens


@right("generate_greedy")
def greedy_through_model_forward(model, prompt, max_new_tokens):
    # The model's own cached forward instead of lm_step: the same computation.
    cache = KVCache()
    tokens, step_input = prompt, prompt
    for _ in range(max_new_tokens):
        nxt = model(step_input, cache=cache)[:, -1].argmax(-1, keepdim=True)
        tokens, step_input = torch.cat([tokens, nxt], dim=1), nxt
    return tokens


# ------------------------------------------------------------------------ wrong ones

CARRIED = _named(
    "cache",
    r"carr|shared|reus|between|across|default|previous|stale|"
    r"fresh|new|earlier|other",
)


@wrong(
    "generate_greedy",
    r"max_new_tokens=0 you return 5 tokens, expected 4 \+ 0 = 4",
    listed=False,
)
def greedy_do_while(model, prompt, max_new_tokens):  # checks the count after a token
    cache = KVCache()
    tokens = prompt
    logits = lm_step(model, prompt, cache)
    while True:
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, nxt], dim=1)
        if tokens.size(1) - prompt.size(1) >= max_new_tokens:
            return tokens
        logits = lm_step(model, nxt, cache)


@wrong("generate_greedy", CARRIED, listed=True)
def greedy_mutable_default_cache(model, prompt, max_new_tokens, cache=KVCache()):
    # A default argument is built once: the second prompt attends to the first one.
    tokens = prompt
    logits = lm_step(model, prompt, cache)
    for _ in range(max_new_tokens):
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, nxt], dim=1)
        logits = lm_step(model, nxt, cache)
    return tokens


_CACHE = KVCache()


@wrong("generate_greedy", CARRIED, listed=True)
def greedy_module_level_cache(model, prompt, max_new_tokens):
    # The cache made once in the notebook, next to the model, and used by every call.
    tokens = prompt
    logits = lm_step(model, prompt, _CACHE)
    for _ in range(max_new_tokens):
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, nxt], dim=1)
        logits = lm_step(model, nxt, _CACHE)
    return tokens


@wrong("generate_greedy", CARRIED, listed=False)
def greedy_cache_on_the_model(model, prompt, max_new_tokens):
    # Hangs the cache on the model "so it is kept": it is kept for the next prompt too.
    if not hasattr(model, "kv_cache"):
        model.kv_cache = KVCache()
    cache = model.kv_cache
    tokens = prompt
    logits = lm_step(model, prompt, cache)
    for _ in range(max_new_tokens):
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, nxt], dim=1)
        logits = lm_step(model, nxt, cache)
    return tokens


@wrong(
    "generate_greedy",
    _named(r"prompt|new tokens|drop|missing|only|fewer|short"),
    listed=True,
)
def greedy_returns_new_tokens_only(model, prompt, max_new_tokens):
    # Returns what was generated, without the prompt in front: [B, N].
    cache = KVCache()
    generated = []
    inp = prompt
    for _ in range(max_new_tokens):
        inp = lm_step(model, inp, cache)[:, -1].argmax(-1, keepdim=True)
        generated.append(inp)
    return torch.cat(generated, dim=1)


@wrong(
    "generate_greedy",
    _named(r"drop|missing|one|fewer|short|step|number|count"),
    listed=True,
)
def greedy_one_step_short(model, prompt, max_new_tokens):
    # range(max_new_tokens - 1) "because the prompt step already made one".
    cache = KVCache()
    tokens, inp = prompt, prompt
    for _ in range(max_new_tokens - 1):
        inp = lm_step(model, inp, cache)[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, inp], dim=1)
    return tokens


@wrong(
    "generate_greedy",
    _named(r"repeat|extra|one|more|too many|step|number|count"),
    listed=True,
)
def greedy_one_step_too_many(model, prompt, max_new_tokens):
    # while <= instead of <: one token more than asked for.
    cache = KVCache()
    tokens, inp = prompt, prompt
    while tokens.size(1) <= prompt.size(1) + max_new_tokens:
        inp = lm_step(model, inp, cache)[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, inp], dim=1)
    return tokens


@wrong(
    "generate_greedy",
    _named(
        "cache|whole|sequence",
        r"whole|twice|grow|repeat|"
        r"again|full|all|every",
    ),
    listed=True,
)
def greedy_whole_sequence_into_cache(model, prompt, max_new_tokens):
    # The uncached loop with a cache added: each step feeds every token again.
    cache = KVCache()
    tokens = prompt
    for _ in range(max_new_tokens):
        logits = lm_step(model, tokens, cache)
        tokens = torch.cat([tokens, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return tokens


@wrong(
    "generate_greedy",
    _named(
        r"repeat|again|twice|previous|stale|same|wrong|"
        r"token"
    ),
    listed=False,
)
def greedy_feeds_previous_token(model, prompt, max_new_tokens):
    # Feeds tokens[:, -1:] before appending the new token: the last one goes in twice.
    cache = KVCache()
    tokens = prompt
    logits = lm_step(model, prompt, cache)
    for _ in range(max_new_tokens):
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        logits = lm_step(model, tokens[:, -1:], cache)
        tokens = torch.cat([tokens, nxt], dim=1)
    return tokens


@wrong(
    "generate_greedy", _named(r"feeds the wrong token|repeat|again|twice"), listed=False
)
def greedy_last_prompt_token_twice(model, prompt, max_new_tokens):
    # Runs the prompt, then "starts" decoding from its last token: that token is
    # cached twice.
    cache = KVCache()
    lm_step(model, prompt, cache)
    inp, tokens = prompt[:, -1:], prompt
    for _ in range(max_new_tokens):
        inp = lm_step(model, inp, cache)[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, inp], dim=1)
    return tokens


@wrong(
    "generate_greedy",
    _named(
        "cache",
        r"reset|clear|fresh|new|every step|each step|"
        r"lost|forg|empty",
    ),
    listed=False,
)
def greedy_new_cache_each_step(model, prompt, max_new_tokens):
    # KVCache() inside the loop: each new token is run with no past at all.
    tokens, inp = prompt, prompt
    for _ in range(max_new_tokens):
        cache = KVCache()
        inp = lm_step(model, inp, cache)[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, inp], dim=1)
    return tokens


@wrong(
    "generate_greedy",
    _named(
        "cache",
        r"reset|clear|fresh|new|every step|each step|"
        r"lost|forg|empty",
    ),
    listed=False,
)
def greedy_resets_between_steps(model, prompt, max_new_tokens):
    # cache.reset() at the end of every step "to free memory".
    cache = KVCache()
    tokens, inp = prompt, prompt
    for _ in range(max_new_tokens):
        inp = lm_step(model, inp, cache)[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, inp], dim=1)
        cache.reset()
    return tokens


@wrong("generate_greedy", r"'decoding without the cache'", listed=False)
def greedy_uncached_loop(model, prompt, max_new_tokens):
    # The uncached loop of the previous section: the whole sequence at every step.
    tokens = prompt
    for _ in range(max_new_tokens):
        logits = model(tokens)
        tokens = torch.cat([tokens, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return tokens


@wrong("generate_greedy", r"'the cache not passed to the model'", listed=False)
def greedy_forward_without_cache_argument(model, prompt, max_new_tokens):
    # Makes a KVCache but calls model(step_input) without cache=cache: each new token
    # goes through the model alone.
    cache = KVCache()  # noqa: F841
    tokens, step_input = prompt, prompt
    for _ in range(max_new_tokens):
        nxt = model(step_input)[:, -1].argmax(-1, keepdim=True)
        tokens, step_input = torch.cat([tokens, nxt], dim=1), nxt
    return tokens


@wrong("generate_greedy", _named(r"greedy|argmax|sampl|random"), listed=False)
def greedy_samples_instead(model, prompt, max_new_tokens):
    # torch.multinomial from the softmax: sampling, not greedy decoding.
    cache = KVCache()
    tokens, inp = prompt, prompt
    for _ in range(max_new_tokens):
        probs = lm_step(model, inp, cache)[:, -1].softmax(-1)
        inp = torch.multinomial(probs, 1)
        tokens = torch.cat([tokens, inp], dim=1)
    return tokens


@wrong("generate_greedy", _named(r"greedy|argmax|min|least|smallest"), listed=False)
def greedy_argmin(model, prompt, max_new_tokens):
    # argmin on the losses-like numbers: the least likely token each step.
    cache = KVCache()
    tokens, inp = prompt, prompt
    for _ in range(max_new_tokens):
        inp = lm_step(model, inp, cache)[:, -1].argmin(-1, keepdim=True)
        tokens = torch.cat([tokens, inp], dim=1)
    return tokens


@wrong(
    "generate_greedy",
    _named(
        r"first position|position 0|first|last position|"
        r"wrong position"
    ),
    listed=False,
)
def greedy_first_position_logits(model, prompt, max_new_tokens):
    # logits[:, 0]: the prediction after the first prompt token, not the last.
    cache = KVCache()
    tokens, inp = prompt, prompt
    for _ in range(max_new_tokens):
        inp = lm_step(model, inp, cache)[:, 0].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, inp], dim=1)
    return tokens


@wrong("generate_greedy", _named(r"argmax|greedy"), listed=False)
def greedy_one_token_for_the_batch(model, prompt, max_new_tokens):
    # argmax over the flattened [B, V] logits: one token id (mod V) for every row.
    cache = KVCache()
    tokens, inp = prompt, prompt
    for _ in range(max_new_tokens):
        last = lm_step(model, inp, cache)[:, -1]
        best = last.argmax() % last.size(-1)
        inp = best.expand(prompt.size(0), 1)
        tokens = torch.cat([tokens, inp], dim=1)
    return tokens


@wrong("generate_greedy", _named(r"argmax|greedy"), listed=False)
def greedy_max_values_not_indices(model, prompt, max_new_tokens):
    # torch.max(...)[0] is the largest logit, [1] its index: took the value.
    cache = KVCache()
    tokens, inp = prompt, prompt
    for _ in range(max_new_tokens):
        best = torch.max(lm_step(model, inp, cache)[:, -1], dim=-1)[0]
        inp = best.long().unsqueeze(1)
        tokens = torch.cat([tokens, inp], dim=1)
    return tokens


@wrong("generate_greedy", r"must start with the prompt", listed=False)
def greedy_prepends_tokens(model, prompt, max_new_tokens):
    # torch.cat([new, tokens]): each new token goes in front.
    cache = KVCache()
    tokens, inp = prompt, prompt
    for _ in range(max_new_tokens):
        inp = lm_step(model, inp, cache)[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([inp, tokens], dim=1)
    return tokens


@wrong("generate_greedy", r"must be a LongTensor", listed=False)
def greedy_float_tokens(model, prompt, max_new_tokens):
    # Preallocates with torch.zeros (float32 by default): token ids come back as floats.
    B, S = prompt.shape
    out = torch.zeros(B, S + max_new_tokens, device=prompt.device)
    out[:, :S] = prompt
    cache = KVCache()
    inp = prompt
    for t in range(S, S + max_new_tokens):
        inp = lm_step(model, inp, cache)[:, -1].argmax(-1, keepdim=True)
        out[:, t] = inp[:, 0]
    return out


@wrong("generate_greedy", r"'the prompt's first token is dropped'", listed=False)
def greedy_prompt_without_first_token(model, prompt, max_new_tokens):
    # Shifts the prompt as for training (prompt[:, 1:]): its first token is lost.
    cache = KVCache()
    tokens = prompt[:, 1:]
    inp = tokens
    for _ in range(max_new_tokens):
        inp = lm_step(model, inp, cache)[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, inp], dim=1)
    return torch.cat([prompt[:, :1], tokens], dim=1)


@wrong("generate_greedy", r"'every row gets row 0's tokens'", listed=False)
def greedy_prompt_row_zero_only(model, prompt, max_new_tokens):
    # Written for one prompt: decodes row 0 and copies it to the whole batch.
    cache = KVCache()
    tokens, inp = prompt[:1], prompt[:1]
    for _ in range(max_new_tokens):
        inp = lm_step(model, inp, cache)[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, inp], dim=1)
    return torch.cat(
        [prompt, tokens[:, prompt.size(1) :].expand(prompt.size(0), -1)], dim=1
    )


@wrong(
    "generate_greedy",
    _named(
        r"repeat|again|twice|drop|missing|cache|stale|"
        r"previous|token"
    ),
    listed=False,
)
def greedy_step_skips_every_second_token(model, prompt, max_new_tokens):
    # Appends the token, but feeds the cache only every second one ("to go faster").
    cache = KVCache()
    tokens = prompt
    logits = lm_step(model, prompt, cache)
    for step in range(max_new_tokens):
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, nxt], dim=1)
        if step % 2 == 0:
            logits = lm_step(model, nxt, cache)
    return tokens


@wrong(
    "generate_greedy",
    r"expected \[B, S \+ N\] = \[\d+, \d+\], got \[\d+, \d+\]",
    listed=False,
)
def greedy_appends_every_position(model, prompt, max_new_tokens):
    # Appends the argmax of every position of the prompt step, not only the last one.
    cache = KVCache()
    logits = lm_step(model, prompt, cache)
    tokens = torch.cat([prompt, logits.argmax(-1)], dim=1)
    for _ in range(max_new_tokens - 1):
        logits = lm_step(model, tokens[:, -1:], cache)
        tokens = torch.cat([tokens, logits.argmax(-1)], dim=1)
    return tokens


_cache = None


@wrong("generate_greedy", CARRIED, listed=False)
def greedy_lazy_global_cache(model, prompt, max_new_tokens):
    # Creates the cache on first use and keeps it in a global "to avoid re-allocating".
    global _cache
    if _cache is None:
        _cache = KVCache()
    tokens, inp = prompt, prompt
    for _ in range(max_new_tokens):
        inp = lm_step(model, inp, _cache)[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, inp], dim=1)
    return tokens


_caches = {}


@wrong("generate_greedy", CARRIED, listed=False)
def greedy_cache_per_batch_shape(model, prompt, max_new_tokens):
    # Works around "new keys do not fit a cache" by keeping one cache per batch size.
    cache = _caches.setdefault(prompt.size(0), KVCache())
    tokens, inp = prompt, prompt
    for _ in range(max_new_tokens):
        inp = lm_step(model, inp, cache)[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, inp], dim=1)
    return tokens


@wrong("generate_greedy", r"RuntimeError.*at line \d+ of your code", listed=False)
def greedy_cat_without_keepdim(model, prompt, max_new_tokens):
    # argmax drops the last axis: [B] cannot be concatenated to [B, T] along dim 1.
    cache = KVCache()
    tokens, inp = prompt, prompt
    for _ in range(max_new_tokens):
        nxt = lm_step(model, inp, cache)[:, -1].argmax(-1)
        tokens = torch.cat([tokens, nxt], dim=1)
        inp = nxt[:, None]
    return tokens


@wrong(
    "generate_greedy",
    r"expected \[B, S \+ N\] = \[\d+, \d+\], got \[\d+, \d+\]",
    listed=False,
)
def greedy_fixed_number_of_steps(model, prompt, max_new_tokens):
    # The 20 of the lesson's demo cell kept instead of max_new_tokens.
    cache = KVCache()
    tokens, inp = prompt, prompt
    for _ in range(min(20, model.max_len - prompt.size(1))):
        inp = lm_step(model, inp, cache)[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, inp], dim=1)
    return tokens
