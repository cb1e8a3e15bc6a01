"""Chapter 3's measured bank for masked_attention (the format: tests/bank/bank.py).

Each answer is graded by every check its exercise runs in the notebook, the mask probes
included: an attention answer with the reference masks (``answers_ch03.OTHERS``).
"""

import math

import torch
import torch.nn.functional as F

from bank import GENERIC, right, wrong  # noqa: F401
from exercise_cells import graders
from answers_ch03 import OTHERS

GRADERS = graders("ch03_masks", {"masked_attention": "masked_attention"}, others=OTHERS)


# --------------------------------------------------------------------------- right ones


@right("masked_attention")
def masked_min_then_zero(q, k, v, mask):  # the reference's semantics
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = scores.softmax(-1).masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return weights @ v, weights


@right("masked_attention")
def masked_einsum_uniform(q, k, v, mask):  # fully masked rows left uniform
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / q.shape[-1] ** 0.5
    fill = torch.finfo(q.dtype).min
    weights = torch.softmax(scores.masked_fill(mask.logical_not(), fill), dim=-1)
    return torch.einsum("bhqk,bhkd->bhqd", weights, v), weights


@right("masked_attention")
def masked_where_minus_1e4(q, k, v, mask):  # -1e4 fits float16 and exp(-1e4) is 0
    scores = q @ k.mT / math.sqrt(q.size(-1))
    minus = torch.tensor(-1e4, dtype=scores.dtype, device=scores.device)
    weights = torch.where(mask, scores, minus).softmax(-1)
    return weights @ v, weights


@right("masked_attention")
def masked_inf_then_nan_to_num(q, k, v, mask):  # -inf, then the NaN rows repaired
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    weights = scores.masked_fill(~mask, float("-inf")).softmax(-1).nan_to_num(0.0)
    return weights @ v, weights


@right("masked_attention")
def masked_additive_bias(q, k, v, mask):  # an additive mask in the scores' own dtype
    bias = torch.zeros(mask.shape, dtype=q.dtype, device=q.device)
    bias = bias.masked_fill(~mask, torch.finfo(q.dtype).min)
    weights = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)) + bias).softmax(-1)
    return weights @ v, weights


@right("masked_attention")
def masked_float32_inside(q, k, v, mask):  # computed in float32, cast back at the end
    qf, kf, vf = q.float(), k.float(), v.float()
    scores = qf @ kf.transpose(-1, -2) * (1.0 / math.sqrt(q.size(-1)))
    weights = scores.masked_fill(~mask, -1e30).softmax(dim=-1)
    weights = weights * mask.any(dim=-1, keepdim=True)
    return (weights @ vf).to(q.dtype), weights.to(q.dtype)


@right("masked_attention")
def masked_softmax_by_hand(q, k, v, mask):  # exp, zero the masked, renormalise
    scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(k.size(-1))
    scores = scores - scores.max(dim=-1, keepdim=True).values
    e = scores.exp() * mask
    total = e.sum(dim=-1, keepdim=True)
    weights = e / total.clamp(min=torch.finfo(e.dtype).tiny)
    return torch.matmul(weights, v), weights


@right("masked_attention")
def masked_bmm_flat(q, k, v, mask):  # batch and heads flattened for bmm
    b, h, sq, dh = q.shape
    sk = k.size(2)
    keys = k.reshape(b * h, sk, dh).transpose(1, 2)
    scores = torch.bmm(q.reshape(b * h, sq, dh), keys)
    scores = scores / math.sqrt(dh)
    keep = mask.expand(b, h, sq, sk).reshape(b * h, sq, sk)
    scores = scores.masked_fill(~keep, torch.finfo(scores.dtype).min)
    weights = torch.where(
        keep.any(-1, keepdim=True), scores.softmax(-1), torch.zeros_like(scores)
    )
    out = torch.bmm(weights, v.reshape(b * h, sk, dh))
    return out.view(b, h, sq, dh), weights.view(b, h, sq, sk)


@right("masked_attention")
def masked_scale_q_first(q, k, v, mask):  # q scaled first (a new tensor, not in place)
    q = q / math.sqrt(q.shape[-1])
    scores = q @ k.transpose(-2, -1)
    scores = scores.masked_fill(mask == False, torch.finfo(q.dtype).min)  # noqa: E712
    weights = F.softmax(scores, dim=-1)
    return weights @ v, weights


@right("masked_attention")
def masked_additive_minus_1e4(q, k, v, mask):  # fully masked rows keep their softmax
    hidden = (~mask).to(q.dtype)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)) + hidden * -1e4
    weights = scores.softmax(-1)
    return weights @ v, weights


# --------------------------------------------------------------------------- wrong ones


def _scores(q, k):
    return q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))


@wrong(
    "masked_attention",
    r"'mask inverted'.*no weight on the keys the mask marks True",
    listed=False,
)
def masked_where_true_nan_repaired(q, k, v, mask):  # True read as "masked out"
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    scores = scores.masked_fill(mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights


@wrong("masked_attention", r"'mask applied after softmax'", listed=True)
def masked_after_softmax(q, k, v, mask):  # zeroes weights after normalising
    weights = _scores(q, k).softmax(-1) * mask
    return weights @ v, weights


@wrong("masked_attention", r"'mask inverted'", listed=True)
def masked_inverted(q, k, v, mask):  # treats True as "ignore"
    weights = torch.where(mask, torch.finfo(q.dtype).min, _scores(q, k)).softmax(-1)
    return weights @ v, weights


@wrong("masked_attention", r"'mask inverted'", listed=True)
def masked_inverted_minus_1e4(q, k, v, mask):  # masked_fill(mask == 1, ...): inverted
    weights = _scores(q, k).masked_fill(mask == 1, -1e4).softmax(-1)
    return weights @ v, weights


@wrong("masked_attention", r"'NaN on fully masked rows'", listed=True)
def masked_minus_inf(q, k, v, mask):  # fully masked rows become NaN
    weights = _scores(q, k).masked_fill(mask == 0, float("-inf")).softmax(-1)
    return weights @ v, weights


@wrong("masked_attention", r"'NaN on fully masked rows'", listed=True)
def masked_where_minus_inf(q, k, v, mask):  # the same -inf, through torch.where
    scores = _scores(q, k)
    weights = torch.where(mask, scores, float("-inf")).softmax(dim=-1)
    return weights @ v, weights


@wrong("masked_attention", r"'NaN on fully masked rows'", listed=True)
def masked_log_of_mask(q, k, v, mask):  # log(1) = 0, log(0) = -inf: an -inf fill
    weights = (_scores(q, k) + torch.log(mask.to(q.dtype))).softmax(-1)
    return weights @ v, weights


@wrong(
    "masked_attention",
    r"'masked with 0 instead of a large negative number'",
    listed=True,
)
def masked_fill_zero(q, k, v, mask):  # scores times the mask: masked ones 0
    weights = (_scores(q, k) * mask).softmax(-1)
    return weights @ v, weights


@wrong("masked_attention", r"'mask ignored'", listed=True)
def masked_ignores_mask(q, k, v, mask):  # the mask argument is never used
    weights = torch.einsum("bhqd,bhkd->bhqk", q, k).div(q.size(-1) ** 0.5).softmax(-1)
    return torch.einsum("bhqk,bhkd->bhqd", weights, v), weights


@wrong("masked_attention", r"'no scaling'", listed=True)
def masked_no_scaling(q, k, v, mask):  # chapter 2's bug, back again
    scores = torch.matmul(q, k.mT)
    weights = scores.masked_fill(mask.logical_not(), -1e4).softmax(dim=-1)
    return torch.matmul(weights, v), weights


@wrong(
    "masked_attention", r"'fill value that overflows in half precision'", listed=True
)
def masked_minus_1e9(q, k, v, mask):  # the seed: fine in float32, not in float16
    weights = _scores(q, k).masked_fill(mask == 0, -1e9).softmax(-1)
    return weights @ v, weights


@wrong(
    "masked_attention",
    r"divided by 8; expected √Dh = √8 = 2\.828 \(Dh, not √Dh\)",
    listed=False,
)
def masked_divide_by_dk(q, k, v, mask):  # d_k where √d_k was meant
    scores = q @ k.transpose(-2, -1) / q.size(-1)
    weights = scores.masked_fill(~mask, torch.finfo(scores.dtype).min).softmax(-1)
    return weights @ v, weights


@wrong(
    "masked_attention",
    r"divided by 4\.899; expected √Dh = √8 = 2\.828 "
    r"\(√\(H·Dh\) = √d_model",
    listed=False,
)
def masked_divide_by_sqrt_d_model(q, k, v, mask):  # √(H·Dh): the model width
    d_model = q.size(1) * q.size(-1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_model)
    weights = scores.masked_fill(~mask, torch.finfo(scores.dtype).min).softmax(-1)
    return weights @ v, weights


@wrong("masked_attention", r"divided by 0\.3536; expected √Dh", listed=False)
def masked_multiplies_by_sqrt(q, k, v, mask):  # * where / was meant
    scores = q @ k.transpose(-2, -1) * math.sqrt(q.size(-1))
    weights = scores.masked_fill(~mask, -1e4).softmax(-1)
    return weights @ v, weights


@wrong(
    "masked_attention",
    r"'masked keys keep some weight'.*scores are all -10 ",
    listed=False,
)
def masked_fill_minus_ten(q, k, v, mask):  # "-10 is small enough after softmax"
    weights = _scores(q, k).masked_fill(~mask, -10.0).softmax(-1)
    return weights @ v, weights


@wrong(
    "masked_attention", r"'masked keys keep some weight'.*shifted by -1 ", listed=False
)
def masked_adds_bool_mask(q, k, v, mask):  # adds the bool mask, as a float one is
    weights = (_scores(q, k) + mask).softmax(-1)
    return weights @ v, weights


@wrong(
    "masked_attention", r"'masked keys keep some weight'.*shifted by -5 ", listed=False
)
def masked_small_additive(q, k, v, mask):  # an additive mask with a timid constant
    weights = (_scores(q, k) - 5.0 * (~mask)).softmax(-1)
    return weights @ v, weights


@wrong(
    "masked_attention",
    r"'masked keys keep some weight'.*scores are all -?\d",
    listed=False,
)
def masked_fill_with_min_score(q, k, v, mask):  # "the lowest score there is"
    scores = _scores(q, k)
    weights = scores.masked_fill(~mask, scores.min().item()).softmax(-1)
    return weights @ v, weights


@wrong("masked_attention", r"sum to 1 over axis 2 \(queries\)", listed=False)
def masked_softmax_queries(q, k, v, mask):  # dim=-2, the seed's other axis
    scores = _scores(q, k).masked_fill(~mask, torch.finfo(q.dtype).min)
    weights = scores.softmax(dim=-2)
    return weights @ v, weights


@wrong("masked_attention", r"sum to 1 over axis 1 \(heads\)", listed=False)
def masked_softmax_heads(q, k, v, mask):  # dim=1 "the attention dimension"
    scores = _scores(q, k).masked_fill(~mask, torch.finfo(q.dtype).min)
    weights = F.softmax(scores, dim=1)
    return weights @ v, weights


@wrong(
    "masked_attention",
    r"'weights not renormalised after masking'.*sum to",
    listed=False,
)
def masked_unscaled_after_softmax(q, k, v, mask):  # two slips: no √Dh, mask after
    weights = (q @ k.mT).softmax(-1).masked_fill(~mask, 0.0)
    return weights @ v, weights


@wrong("masked_attention", r"'NaN on fully masked rows'", listed=True)
def masked_exp_divide(q, k, v, mask):  # softmax by hand: 0 / 0 on a fully masked row
    e = (_scores(q, k) - _scores(q, k).amax(-1, keepdim=True)).exp() * mask
    weights = e / e.sum(-1, keepdim=True)
    return weights @ v, weights


@wrong("masked_attention", r"'NaN where a query has keys to attend'", listed=False)
def masked_times_minus_inf(q, k, v, mask):  # 0 * -inf = NaN on every kept key
    weights = (_scores(q, k) + (~mask) * float("-inf")).softmax(-1)
    return weights @ v, weights


@wrong(
    "masked_attention",
    r"raised RuntimeError.*at line \d+ of your code: "
    r"`weights = _scores\(q, k\)\.masked_fill\(~mask\.transpose",
    listed=False,
)
def masked_transposed_mask(q, k, v, mask):  # "masking the queries" by a transpose
    weights = _scores(q, k).masked_fill(~mask.transpose(-2, -1), -1e4).softmax(-1)
    return weights @ v, weights


@wrong(
    "masked_attention",
    r"raised RuntimeError.*at line \d+ of your code: "
    r"`weights = _scores\(q, k\)\.masked_fill\(~keep.*"
    r"mask \[2, 1, 1, 6\]",
    listed=False,
)
def masked_squeezed_mask(q, k, v, mask):  # squeeze() "to get rid of the extra axes"
    keep = mask.squeeze()
    weights = _scores(q, k).masked_fill(~keep, -1e4).softmax(-1)
    return weights @ v, weights


@wrong("masked_attention", r"you return \(weights, out\)", listed=False)
def masked_pair_swapped(q, k, v, mask):  # the pair the wrong way round
    weights = _scores(q, k).masked_fill(~mask, -1e4).softmax(-1)
    return weights, weights @ v


@wrong(
    "masked_attention",
    r"must return the pair \(out, weights\).*returned Tensor",
    listed=False,
)
def masked_output_only(q, k, v, mask):  # forgot the weights
    weights = _scores(q, k).masked_fill(~mask, -1e4).softmax(-1)
    return weights @ v


@wrong(
    "masked_attention", r"'input modified in place'.*changed its input q", listed=False
)
def masked_scales_q_in_place(q, k, v, mask):  # q /= √Dh changes the caller's q
    q /= math.sqrt(q.size(-1))
    weights = (q @ k.transpose(-2, -1)).masked_fill(~mask, -1e4).softmax(-1)
    return weights @ v, weights


@wrong(
    "masked_attention",
    r"'input modified in place'.*changed its input mask",
    listed=False,
)
def masked_flips_mask_in_place(q, k, v, mask):  # logical_not_ on the caller's mask
    hidden = mask.logical_not_()
    weights = _scores(q, k).masked_fill(hidden, -1e4).softmax(-1)
    return weights @ v, weights


@wrong("masked_attention", r"output is the weights before masking @ v", listed=False)
def masked_output_before_mask(q, k, v, mask):  # out taken before the mask was applied
    scores = _scores(q, k)
    out = scores.softmax(-1) @ v
    weights = scores.masked_fill(~mask, -1e4).softmax(-1)
    return out, weights


@wrong("masked_attention", r"weights @ k instead of weights @ v", listed=False)
def masked_output_from_keys(q, k, v, mask):  # k where v was meant
    weights = _scores(q, k).masked_fill(~mask, -1e4).softmax(-1)
    return weights @ k, weights


@wrong(
    "masked_attention",
    r"'fully masked queries neither zero nor a distribution'.*"
    r"sum 5",
    listed=False,
)
def masked_nan_rows_to_one(q, k, v, mask):  # repaired the NaN rows with 1 instead of 0
    weights = _scores(q, k).masked_fill(~mask, float("-inf")).softmax(-1)
    weights = weights.nan_to_num(nan=1.0)
    return weights @ v, weights


@wrong(
    "masked_attention",
    r"'float32 mixed into half precision'.*expected scalar type "
    r"Float but found Half",
    listed=False,
)
def masked_float_bias(q, k, v, mask):  # mask.float() promotes float16 scores
    bias = (1.0 - mask.float()) * -1e4
    weights = (_scores(q, k) + bias).softmax(-1)
    return weights @ v, weights


@wrong(
    "masked_attention",
    r"'fill value that overflows in half precision'.*below "
    r"-1e\+38",
    listed=False,
)
def masked_float32_min_hard_coded(q, k, v, mask):  # float32's minimum for every dtype
    fill = torch.finfo(torch.float32).min
    weights = _scores(q, k).masked_fill(~mask, fill).softmax(-1)
    return weights @ v, weights


@wrong(
    "masked_attention",
    r"'fill value that overflows in half precision'.*fill value "
    r"is -1e\+05",
    listed=False,
)
def masked_minus_1e5(q, k, v, mask):  # just past float16's range
    weights = _scores(q, k).masked_fill(~mask, -1e5).softmax(-1)
    return weights @ v, weights


@wrong(
    "masked_attention",
    r"'fill value that overflows in half precision'.*fill value "
    r"is -1e\+09",
    listed=False,
)
def masked_where_tensor_1e9(q, k, v, mask):  # torch.where turns -1e9 into -inf in fp16
    scores = _scores(q, k)
    weights = torch.where(mask, scores, torch.tensor(-1e9)).softmax(-1)
    return weights @ v, weights


@wrong("masked_attention", GENERIC, listed=False)
def masked_softmax_twice(q, k, v, mask):  # softmax "again, to be sure it sums to 1"
    weights = _scores(q, k).masked_fill(~mask, -1e4).softmax(-1).softmax(-1)
    return weights @ v, weights


@wrong(
    "masked_attention",
    r"'allowed keys zeroed'.*exactly 0 at \d+ of the \d+ "
    r"allowed",
    listed=False,
)
def masked_dropout_left_on(q, k, v, mask):  # F.dropout trains by default
    weights = _scores(q, k).masked_fill(~mask, -1e4).softmax(-1)
    weights = F.dropout(weights, p=0.1)
    return weights @ v, weights


@wrong(
    "masked_attention",
    r"sum to 1 over axis 0 \(batch\), 1 \(heads\), "
    r"2 \(queries\), 3 \(keys\)",
    listed=False,
)
def masked_normalised_globally(q, k, v, mask):  # exp / sum of everything
    e = _scores(q, k).masked_fill(~mask, -1e4).exp()
    weights = e / e.sum()
    return weights @ v, weights


@wrong(
    "masked_attention",
    r"your output have shape \[2, 4, 3, 8\], expected \[2, 3, 4, 8\].*"
    r"yours is \[B, Sq, H, Dh\] where \[B, H, Sq, Dh\] is expected",
    listed=False,
)
def masked_output_heads_merged_early(q, k, v, mask):  # chapter 4's transpose, too early
    weights = _scores(q, k).masked_fill(~mask, -1e4).softmax(-1)
    return (weights @ v).transpose(1, 2), weights


@wrong("masked_attention", r"follow head 0's mask for every head", listed=False)
def masked_first_head_mask(q, k, v, mask):  # "the mask is the same for every head"
    keep = mask[:, :1]
    weights = _scores(q, k).masked_fill(~keep, -1e4).softmax(-1)
    return weights @ v, weights


@wrong("masked_attention", r"'NaN or inf in half precision only'", listed=False)
def masked_epsilon_in_half(q, k, v, mask):  # 1e-9 is 0 in float16: 0 / 0 on empty rows
    e = _scores(q, k).softmax(-1) * mask
    weights = e / (e.sum(-1, keepdim=True) + 1e-9)
    return weights @ v, weights


@wrong("masked_attention", r"divided by 2\.449; expected √Dh = √8", listed=False)
def masked_divide_by_sqrt_keys(q, k, v, mask):  # √Sk, the number of keys
    scores = q @ k.transpose(-2, -1) / math.sqrt(k.size(-2))
    weights = scores.masked_fill(~mask, torch.finfo(scores.dtype).min).softmax(-1)
    return weights @ v, weights


@wrong(
    "masked_attention",
    r"'whole rows of weights zeroed'.*every key visible",
    listed=False,
)
def masked_all_instead_of_not_any(q, k, v, mask):  # mask.all where ~mask.any belongs
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    s = s.masked_fill(~mask, torch.finfo(s.dtype).min)
    w = s.softmax(-1)
    w = w.masked_fill(mask.all(dim=-1, keepdim=True), 0.0)
    return w @ v, w


@wrong(
    "masked_attention",
    r"'whole rows of weights zeroed'.*only some keys visible",
    listed=False,
)
def masked_zero_rows_with_any_hidden(q, k, v, mask):  # "a row with padding is unsafe"
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / q.shape[-1] ** 0.5
    weights = torch.softmax(scores.masked_fill(~mask, -1e4), dim=-1)
    has_hidden = (~mask).any(dim=-1, keepdim=True)
    weights = torch.where(has_hidden, torch.zeros_like(weights), weights)
    return torch.einsum("bhqk,bhkd->bhqd", weights, v), weights


@wrong(
    "masked_attention",
    r"wrong shape or dtype.*No promotion gives float32",
    listed=False,
)
def masked_in_float32_for_safety(q, k, v, mask):
    # "softmax in float32 is safer": every input cast up, nothing cast back
    q32, k32, v32 = q.float(), k.float(), v.float()
    scores = q32 @ k32.transpose(-2, -1) / math.sqrt(q.size(-1))
    scores = scores.masked_fill(~mask, torch.finfo(torch.float32).min)
    weights = torch.softmax(scores, dim=-1)
    weights = weights * mask.any(dim=-1, keepdim=True)
    return weights @ v32, weights


@wrong(
    "masked_attention",
    r"wrong shape or dtype.*No promotion gives float32",
    listed=False,
)
def masked_weights_buffer_without_dtype(q, k, v, mask):
    # fills a fresh buffer row by row: torch.zeros without dtype= is float32
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    scores = scores.masked_fill(~mask, torch.finfo(q.dtype).min)
    weights = torch.zeros(scores.shape, device=q.device)
    weights[...] = torch.softmax(scores, dim=-1) * mask.any(-1, keepdim=True)
    return weights @ v.float(), weights
