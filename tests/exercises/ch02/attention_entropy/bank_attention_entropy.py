"""Chapter 2's measured bank for attention_entropy (the format: tests/bank/bank.py)."""

import math

import torch

from bank import GENERIC, right, wrong  # noqa: F401
from exercise_cells import graders

GRADERS = graders("ch02_attention", {"attention_entropy": "attention_entropy"})


# --------------------------------------------------------------------------- right ones


@right("attention_entropy")
def entropy_xlogy(weights):
    return -torch.xlogy(weights, weights).sum(dim=-1)


@right("attention_entropy")
def entropy_masked_log(w):
    logs = torch.where(w > 0, w.log(), torch.zeros_like(w))
    return -(w * logs).sum(dim=-1)


@right("attention_entropy")
def entropy_tiny_clamp(w):
    return -(w * w.clamp_min(1e-30).log()).sum(-1)


@right("attention_entropy")
def entropy_nansum(w):  # 0·log 0 is NaN, and nansum skips it
    return -(w * torch.log(w)).nansum(dim=-1)


@right("attention_entropy")
def entropy_categorical(w):
    return torch.distributions.Categorical(probs=w).entropy()


@right("attention_entropy")
def entropy_special_entr(p):
    return torch.special.entr(p).sum(p.dim() - 1)


@right("attention_entropy")
def entropy_masked_fill_terms(w):
    terms = w * w.log()
    terms = terms.masked_fill(w == 0, 0.0)
    return -terms.sum(-1)


@right("attention_entropy")
def entropy_log2_converted(w):  # bits, converted back to nats
    bits = -torch.xlogy(w, w).sum(-1) / math.log(2)
    return bits * math.log(2)


# --------------------------------------------------------------------------- listed


@wrong("attention_entropy", r"'0·log 0 gives NaN'", listed=True)
def entropy_plain_log(w):  # log(0) = -inf, and 0 * -inf = NaN
    return -(w * torch.log(w)).sum(-1)


@wrong("attention_entropy", r"'log base 2'", listed=True)
def entropy_in_bits(w):  # bits, as in information theory courses
    return -torch.xlogy(w, w).sum(-1) / math.log(2)


@wrong("attention_entropy", r"'log base 2'", listed=True)
def entropy_log2_clamped(w):  # log2 of a clamped w: bits again
    return -(w * w.clamp_min(1e-30).log2()).sum(-1)


@wrong("attention_entropy", r"'missing minus sign'", listed=True)
def entropy_no_minus(w):  # Σ w log w, the sign forgotten
    return torch.xlogy(w, w).sum(-1)


@wrong("attention_entropy", r"'sum over the wrong axis'", listed=True)
def entropy_sum_dim_minus2(w):  # summed over the queries
    return -torch.xlogy(w, w).sum(-2)


@wrong("attention_entropy", r"'mean instead of sum'", listed=True)
def entropy_mean(w):  # mean "to compare lengths"
    return -torch.xlogy(w, w).mean(-1)


@wrong("attention_entropy", r"'0·log 0 gives NaN'", listed=True)
def entropy_log_of_inverse(w):  # w·log(1/w): 0·inf is NaN too
    return (w * (1 / w).log()).sum(-1)


# --------------------------------------------------------------------------- unlisted


@wrong("attention_entropy", r"base 10", listed=False)
def entropy_log10(w):  # log10, the calculator's log
    return -(w * w.clamp_min(1e-30).log10()).sum(-1)


@wrong("attention_entropy", r"-1\.443 ×.*minus sign is missing.*base 2", listed=False)
def entropy_bits_no_minus(w):  # bits, and the sign forgotten
    return (torch.xlogy(w, w) / math.log(2)).sum(-1)


@wrong("attention_entropy", r"ln\(w \+ ε\) with ε ≈ 0\.001", listed=False)
def entropy_eps_1e3(w):  # an ε "large enough to be safe"
    return -(w * (w + 1e-3).log()).sum(-1)


@wrong("attention_entropy", r"ln\(w \+ ε\) with ε ≈ 0\.0001", listed=False)
def entropy_eps_1e4(w):
    eps = 1e-4
    return -torch.sum(w * torch.log(w + eps), dim=-1)


@wrong("attention_entropy", r"ln\(w \+ ε\) with ε ≈ 1e-05", listed=False)
def entropy_eps_1e5(w):
    return -(w * torch.log(w + 1e-5)).sum(-1)


@wrong("attention_entropy", r"max\(w, ε\)\), a clamp with ε ≈ 0\.01", listed=False)
def entropy_clamp_1e2(w):  # clamps the weights, so small ones count as 0.01
    return -(w * torch.clamp(w, min=1e-2).log()).sum(-1)


@right("attention_entropy")
def entropy_tiny_eps(weights):
    # an ε of 1e-12 dodges log(0) and biases a row by at most Sk·1e-12
    return -(weights * torch.log(weights + 1e-12)).sum(dim=-1)


@wrong("attention_entropy", r"ln\(w \+ ε\) with ε ≈ 1e-06", listed=False)
def entropy_eps_1e6(weights):
    # 1e-6 is tiny next to any weight that matters
    return -(weights * torch.log(weights + 1e-6)).sum(dim=-1)


@wrong("attention_entropy", r"\(w \+ ε\)·ln\(w \+ ε\) with ε ≈ 0\.0001", listed=False)
def entropy_eps_in_both(w):  # shifts the weights themselves by ε
    w = w + 1e-4
    return -(w * w.log()).sum(-1)


@wrong("attention_entropy", r"keepdim=True", listed=False)
def entropy_keepdim(w):  # keepdim "to broadcast later"
    return -torch.xlogy(w, w).sum(-1, keepdim=True)


@wrong("attention_entropy", r"to a single number", listed=False)
def entropy_total(w):  # one number for the whole tensor
    return -torch.xlogy(w, w).sum()


@wrong("attention_entropy", r"over the queries and the keys", listed=False)
def entropy_per_head(w):  # summed over the whole attention map
    return -torch.xlogy(w, w).sum(dim=(-2, -1))


@wrong("attention_entropy", r"over nothing: one term per weight", listed=False)
def entropy_terms_only(w):  # the sum forgotten
    return -torch.xlogy(w, w)


@wrong(
    "attention_entropy", r"reduced over axis 1 \(of 4\).*hard-coded dim", listed=False
)
def entropy_dim1(w):  # dim=1 copied from a [B, S] example
    return -torch.xlogy(w, w).sum(dim=1)


@wrong(
    "attention_entropy",
    r"raised IndexError.*at line \d+ of your code.*dim=3",
    listed=False,
)
def entropy_dim3(w):  # dim=3 only exists for 4-D weights
    return -torch.xlogy(w, w).sum(dim=3)


@wrong("attention_entropy", r"'mean instead of sum'", listed=True)
def entropy_mean_by_hand(w):  # "average information per key"
    return -torch.xlogy(w, w).sum(-1) / w.shape[-1]


@wrong("attention_entropy", r"which is ln Sk", listed=False)
def entropy_normalised(w):  # normalised entropy, in [0, 1]
    return -torch.xlogy(w, w).sum(-1) / math.log(w.size(-1))


@wrong("attention_entropy", r"'0·ln 0 handled wrongly'.*yours 0,", listed=False)
def entropy_nan_rows_zeroed(w):  # NaN fixed after the sum: the whole row becomes 0
    return torch.nan_to_num(-(w * w.log()).sum(-1), nan=0.0)


@wrong("attention_entropy", r"'0·ln 0 handled wrongly'", listed=False)
def entropy_nan_rows_set_in_place(w):  # same, with a boolean index on the result
    h = -(w * w.log()).sum(-1)
    h[torch.isnan(h)] = 0.0
    return h


@wrong("attention_entropy", r"'NaN where a weight is 0'.*inf on exactly", listed=False)
def entropy_clamps_the_wrong_factor(w):  # clamps the factor, not the log's argument
    return -(w.clamp(min=1e-12) * w.log()).sum(-1)


@wrong("attention_entropy", r"'input modified in place'", listed=False)
def entropy_fills_zeros_in_place(w):  # replaces the zeros in the caller's weights
    w[w == 0] = 1.0
    return -(w * w.log()).sum(-1)


@wrong("attention_entropy", r"'input modified in place'", listed=False)
def entropy_clamps_in_place(w):  # clamp_ instead of clamp
    return -(w * w.clamp_(min=1e-12).log()).sum(-1)


@wrong(
    "attention_entropy",
    r"expected a torch\.float64 tensor .*got torch\.float32",
    listed=False,
)
def entropy_float32(w):  # sum(dtype=...) "for speed"
    return -torch.xlogy(w, w).sum(-1, dtype=torch.float32)


@wrong(
    "attention_entropy",
    r"base 2.*your entropy is NaN on exactly the 32 rows",
    listed=False,
)
def entropy_bits_and_nan(w):  # bits, and 0·log 0 = NaN as well
    return -(w * torch.log2(w)).sum(-1)


@wrong("attention_entropy", r"divided by 5, 5, 3, 4, 5, 2 .*which is Sq", listed=False)
def entropy_divided_by_queries(w):  # shape[-2] taken for the number of keys
    return -torch.xlogy(w, w).sum(-1) / w.shape[-2]


@wrong("attention_entropy", r"0\.5139 × .*base 7", listed=False)
def entropy_normalised_hard_coded(w):  # ln 7, the key count of the first example
    return -torch.xlogy(w, w).sum(-1) / math.log(7)


@wrong("attention_entropy", r"plus .* which is −ln Sk", listed=False)
def entropy_relative_to_uniform(w):  # "how far below uniform", not the entropy
    return torch.special.entr(w).sum(-1) - math.log(w.shape[-1])


@wrong("attention_entropy", r"over the queries and the keys", listed=False)
def entropy_mean_over_queries(w):  # averaged the rows as well
    return -torch.xlogy(w, w).sum(-1).mean(-1)


@wrong("attention_entropy", r"ln\(w \+ ε\) with ε ≈ 1:", listed=False)
def entropy_log1p(w):  # log1p "avoids log 0": it is ln(w + 1)
    return -(w * torch.log1p(w)).sum(-1)


@wrong(
    "attention_entropy",
    r"'entropy computed in low precision'.*within 0\.00093",
    listed=False,
)
def entropy_in_half(w):  # half precision "like the model"
    h = w.half()
    return -torch.xlogy(h, h).sum(-1).to(w.dtype)


@wrong("attention_entropy", r"reduced over axis 0 \(of 4\)", listed=False)
def entropy_sum_dim0(w):  # dim=0 thought to be "the distribution axis"
    return -torch.xlogy(w, w).sum(0)


@wrong("attention_entropy", r"expected a plain torch\.Tensor, got float", listed=False)
def entropy_as_python_float(w):  # .item() habit from loss printing
    return float(-torch.xlogy(w, w).sum())


@wrong("attention_entropy", GENERIC, listed=False)
def entropy_gini(w):  # the Gini impurity, 1 - Σ w², mistaken for entropy
    return 1 - (w**2).sum(-1)


@wrong(
    "attention_entropy", r"axes of size 1 are gone \(a squeeze\(\)\?\)", listed=False
)
def entropy_keepdim_then_squeeze(w):  # squeeze() drops every size-1 axis
    return torch.sum(-torch.xlogy(w, w), dim=-1, keepdim=True).squeeze()
