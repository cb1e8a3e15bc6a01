"""Chapter 2's measured bank for attention (the format: tests/bank/bank.py)."""

import math

import torch
import torch.nn.functional as F

from bank import GENERIC, right, wrong  # noqa: F401
from exercise_cells import graders

GRADERS = graders("ch02_attention", {"attention": "attention"})


# --------------------------------------------------------------------------- right ones


@right("attention")
def attention_matmul(q, k, v):
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), dim=-1)
    return weights @ v, weights


@right("attention")
def attention_einsum_scaled_query(q, k, v):
    # scaling q before the product is the same maths
    q = q * q.shape[-1] ** -0.5
    w = torch.einsum("bhqd,bhkd->bhqk", q, k).softmax(-1)
    return torch.einsum("bhqk,bhkd->bhqd", w, v), w


@wrong(
    "attention",
    r"'softmax overflows on large scores'.*NaN or inf in \d+ of 24",
    listed=False,
)
def attention_exp_by_hand(q, k, v):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    e = torch.exp(scores)  # softmax as in the formula
    weights = e / e.sum(dim=-1, keepdim=True)
    return weights @ v, weights


@wrong("attention", r"'scores clamped'.*clamped at 20\b", listed=False)
def attention_clamped_scores(q, k, v):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    scores = scores.clamp(-20, 20)  # "keeps exp from overflowing"
    weights = scores.softmax(dim=-1)
    return weights @ v, weights


@right("attention")
def attention_stable_exp_by_hand(q, k, v):
    scores = torch.matmul(q, k.mT) / q.size(-1) ** 0.5
    scores = scores - scores.amax(dim=-1, keepdim=True)  # stable softmax written out
    e = scores.exp()
    weights = e / e.sum(dim=-1, keepdim=True)
    return torch.matmul(weights, v), weights


@right("attention")
def attention_bmm_flattened(q, k, v):
    b, h, sq, dh = q.shape
    qf, kf, vf = (t.reshape(b * h, t.size(2), dh) for t in (q, k, v))
    w = torch.baddbmm(
        torch.zeros(b * h, sq, k.size(2), dtype=q.dtype, device=q.device),
        qf,
        kf.transpose(1, 2),
        beta=0.0,
        alpha=1 / math.sqrt(dh),
    )
    w = w.softmax(-1)
    return torch.bmm(w, vf).view(b, h, sq, dh), w.view(b, h, sq, -1)


@right("attention")
def attention_scale_keys_logsumexp(q, k, v):
    # the scale on k instead of q; softmax as exp(s - logsumexp(s))
    d_k = k.shape[3]
    scores = q @ (k / torch.tensor(d_k, dtype=k.dtype).sqrt()).transpose(2, 3)
    weights = torch.exp(scores - torch.logsumexp(scores, dim=3, keepdim=True))
    return weights @ v, weights


@right("attention")
def attention_in_double_then_back(q, k, v):
    # computes in float64 for safety and returns the input dtype
    q64, k64, v64 = q.double(), k.double(), v.double()
    w = F.softmax(q64 @ k64.transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=3)
    return (w @ v64).to(q.dtype), w.to(q.dtype)


@right("attention")
def attention_in_place_on_scores_list(q, k, v):
    # in-place ops on its own intermediate only; returns a list
    scores = torch.matmul(q, k.transpose(-1, -2))
    scores.div_(math.sqrt(q.size(-1)))
    weights = torch.nn.functional.softmax(scores, dim=-1)
    return [torch.matmul(weights, v), weights]


@right("attention")
def attention_sum_of_products(q, k, v):
    # broadcasting instead of matmul: [B, H, Sq, 1, Dh] * [B, H, 1, Sk, Dh]
    scores = (q.unsqueeze(3) * k.unsqueeze(2)).sum(-1) * (1.0 / math.sqrt(q.size(-1)))
    weights = scores.softmax(dim=-1)
    out = (weights.unsqueeze(-1) * v.unsqueeze(2)).sum(3)
    return out, weights


# --------------------------------------------------------------------------- listed


@wrong("attention", r"'no scaling'", listed=True)
def attention_forgot_scale(q, k, v):  # the 1/√d_k forgotten
    weights = torch.softmax(q @ k.transpose(-2, -1), dim=-1)
    return weights @ v, weights


@wrong("attention", r"'scaled by sqrt\(d_model\)'", listed=True)
def attention_sqrt_d_model(q, k, v):  # the seed's embed_size ** 0.5, d_model = H * Dh
    n_heads, d_head = q.shape[1], q.shape[-1]
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(n_heads * d_head)
    w = scores.softmax(-1)
    return torch.einsum("bhqk,bhkd->bhqd", w, v), w


@wrong("attention", r"'scaled by d_k instead of sqrt\(d_k\)'", listed=True)
def attention_scales_q_and_k(q, k, v):  # scaled both q and k by 1/√d: 1/d in total
    s = q.size(-1) ** -0.5
    w = ((q * s) @ (k * s).mT).softmax(-1)
    return w @ v, w


@wrong("attention", r"'softmax over the wrong axis \(queries\)'", listed=True)
def attention_softmax_dim2(q, k, v):  # dim=2 looks like "the sequence axis"
    w = F.softmax(q @ k.mT * q.size(-1) ** -0.5, dim=2)
    return w @ v, w


@wrong("attention", r"'softmax over the wrong axis \(heads\)'", listed=True)
def attention_softmax_without_dim(q, k, v):  # no dim: the legacy implicit dim is 1
    w = F.softmax(q @ k.mT / math.sqrt(q.size(-1)))
    return w @ v, w


# --------------------------------------------------------------------------- unlisted


@wrong("attention", r"divided by 5\.657, 5\.657, 8, 4, 16 .*2·√Dh", listed=False)
def attention_two_sqrt_dk(q, k, v):  # an extra factor 2 "for stability"
    w = (q @ k.mT / (2 * math.sqrt(q.size(-1)))).softmax(-1)
    return w @ v, w


@wrong("attention", r"divisor is 1/√Dh", listed=False)
def attention_multiplies_by_sqrt(q, k, v):  # multiplies by √d_k instead of dividing
    w = (q @ k.mT * math.sqrt(q.size(-1))).softmax(-1)
    return w @ v, w


@wrong("attention", r"divided by 8, 8, 8, 8, 8 .*hard-coded", listed=False)
def attention_hard_coded_64(q, k, v):  # √64 copied from the paper's d_k = 64
    w = (q @ k.mT / math.sqrt(64)).softmax(-1)
    return w @ v, w


@wrong("attention", r"divisor is √Sq", listed=False)
def attention_scale_by_query_length(q, k, v):  # q.size(2) is the sequence, not Dh
    w = (q @ k.mT / math.sqrt(q.size(2))).softmax(-1)
    return w @ v, w


@wrong("attention", r"divisor is √Sk", listed=False)
def attention_scale_by_key_count(q, k, v):  # k.size(-2) is the number of keys
    w = torch.softmax(q @ k.mT / k.size(-2) ** 0.5, dim=-1)
    return w @ v, w


@wrong("attention", r"divisor is √H", listed=False)
def attention_scale_by_heads(q, k, v):  # unpacked the shape in the wrong order
    b, d_k, s, h = q.shape
    w = torch.softmax(q @ k.mT / math.sqrt(d_k), dim=-1)
    return w @ v, w


@wrong("attention", r"divided by 16, 16, 32, 8, 128 .*divisor is 2·Dh", listed=False)
def attention_precedence_bug(q, k, v):  # / d ** 1/2 divides by d, then by 2
    d = q.size(-1)
    w = torch.softmax(q @ k.mT / d**1 / 2, dim=-1)
    return w @ v, w


@wrong("attention", r"sum to 1 over axis 0 \(batch\)", listed=False)
def attention_softmax_dim0(q, k, v):  # dim=0 thought to be "the first of the pair"
    w = (q @ k.mT / math.sqrt(q.size(-1))).softmax(dim=0)
    return w @ v, w


@wrong("attention", r"sum to 1 over axes 2, 3 \(queries, keys\) together", listed=False)
def attention_softmax_flattened(q, k, v):  # softmax over the whole [Sq, Sk] map
    b, h, sq, sk = q.size(0), q.size(1), q.size(2), k.size(2)
    s = (q @ k.mT / math.sqrt(q.size(-1))).reshape(b, h, sq * sk)
    w = s.softmax(-1).reshape(b, h, sq, sk)
    return w @ v, w


@wrong("attention", r"'log-weights instead of weights'", listed=False)
def attention_log_softmax(q, k, v):  # log_softmax "for numerical stability"
    w = F.log_softmax(q @ k.mT / math.sqrt(q.size(-1)), dim=-1)
    return w @ v, w


@wrong("attention", r"'softmax missing'.*divided by 2\.828", listed=False)
def attention_returns_scores(q, k, v):  # returns the scores where the weights go
    scores = q @ k.mT / math.sqrt(q.size(-1))
    return scores.softmax(-1) @ v, scores


@wrong("attention", r"'output mixes the wrong vectors'.*rows of k", listed=False)
def attention_weights_at_k(q, k, v):  # weights @ k instead of weights @ v
    w = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(-1)
    return w @ k, w


@wrong("attention", r"'weights transposed'", listed=False)
def attention_returns_transposed_weights(q, k, v):  # "keys first" for plotting
    w = (q @ k.mT / math.sqrt(q.size(-1))).softmax(-1)
    return w @ v, w.transpose(-2, -1)


@wrong("attention", r"'result depends on chance'", listed=False)
def attention_with_dropout(q, k, v):  # F.dropout defaults to training=True
    w = (q @ k.mT / math.sqrt(q.size(-1))).softmax(-1)
    w = F.dropout(w, p=0.1)
    return w @ v, w


@wrong("attention", r"'input modified in place'.*argument q", listed=False)
def attention_scales_q_in_place(q, k, v):  # div_ saves memory, but q is the caller's
    q.div_(math.sqrt(q.size(-1)))
    w = (q @ k.mT).softmax(-1)
    return w @ v, w


@wrong(
    "attention",
    r"expected dtype torch\.float64 \(the dtype of q\), got torch\.float32",
    listed=False,
)
def attention_forces_float32(q, k, v):  # .float() "to be safe"
    w = (q.float() @ k.float().mT / math.sqrt(q.size(-1))).softmax(-1)
    return w @ v.float(), w


@wrong("attention", r"'output rescaled'.*0\.3536 × weights @ v", listed=False)
def attention_scales_output_again(q, k, v):  # the scale applied to the output too
    d = math.sqrt(q.size(-1))
    w = (q @ k.mT / d).softmax(-1)
    return w @ v / d, w


@wrong("attention", r"'output and weights do not match'.*divided by 1 ", listed=False)
def attention_output_from_unscaled(q, k, v):  # scaled a copy, used the other one
    scores = q @ k.mT
    scaled = scores / math.sqrt(q.size(-1))
    return scores.softmax(-1) @ v, scaled.softmax(-1)


@wrong("attention", r"'scale not constant'.*queries", listed=False)
def attention_normalised_queries(q, k, v):  # unit-norm queries instead of the 1/√d_k
    w = (F.normalize(q, dim=-1) @ k.mT).softmax(-1)
    return w @ v, w


@wrong("attention", r"'scale not constant'", listed=False)
def attention_divides_by_score_std(q, k, v):  # "standardises" each row of scores
    scores = q @ k.mT
    w = (scores / scores.std(dim=-1, keepdim=True)).softmax(-1)
    return w @ v, w


@wrong("attention", r"softmax applied twice", listed=False)
def attention_double_softmax(q, k, v):  # softmax in a helper, and again here
    w = F.softmax(F.softmax(q @ k.mT / math.sqrt(q.size(-1)), dim=-1), dim=-1)
    return w @ v, w


@wrong("attention", r"'weights do not sum to 1'.*proportional to exp", listed=False)
def attention_exp_not_normalised(q, k, v):  # exp written out, the division forgotten
    w = torch.exp(q @ k.mT / math.sqrt(q.size(-1)))
    return w @ v, w


@wrong("attention", r"'weights do not sum to 1'.*sums to 0\.3536", listed=False)
def attention_scale_after_softmax(q, k, v):  # scaled the weights, not the scores
    w = torch.softmax(q @ k.mT, dim=-1) / math.sqrt(q.size(-1))
    return w @ v, w


@wrong("attention", r"'scores shifted per key'", listed=False)
def attention_max_over_wrong_axis(q, k, v):  # the stability max taken over dim=-2
    scores = q @ k.mT / math.sqrt(q.size(-1))
    scores = scores - scores.max(dim=-2, keepdim=True).values
    e = scores.exp()
    w = e / e.sum(-1, keepdim=True)
    return w @ v, w


@wrong("attention", r"'right numbers in the wrong places'", listed=False)
def attention_output_heads_scrambled(q, k, v):  # a transpose+reshape "to merge heads"
    w = (q @ k.mT / math.sqrt(q.size(-1))).softmax(-1)
    out = (w @ v).transpose(1, 2).reshape(q.shape)
    return out, w


@wrong(
    "attention",
    r"expected shape \[2, 3, 4, 8\] \[B, H, \.\.\.\], got \[2, 4, 3, 8\]",
    listed=False,
)
def attention_output_heads_moved(q, k, v):  # merged the heads one step too early
    w = (q @ k.mT / math.sqrt(q.size(-1))).softmax(-1)
    return (w @ v).transpose(1, 2), w


@wrong("attention", r"'pair in the wrong order'", listed=False)
def attention_pair_swapped(q, k, v):  # (weights, out): the order of computation
    w = (q @ k.mT / math.sqrt(q.size(-1))).softmax(-1)
    return w, w @ v


@wrong("attention", r"must return a pair \(out, weights\), got Tensor", listed=False)
def attention_only_output(q, k, v):  # the weights forgotten in the return
    w = (q @ k.mT / math.sqrt(q.size(-1))).softmax(-1)
    return w @ v


@wrong(
    "attention",
    r"3 \(H\) against 5 \(Sk\).*matmul of \[B, H, Sq, Dh\] and \[Dh, Sk, H, B\]; "
    r"the second made by `\.T` of \[B, H, Sk, Dh\], which reverses all 4 axes",
    listed=False,
)
def attention_dot_T(q, k, v):  # k.T, as the paper writes Q·Kᵀ
    w = torch.softmax(q @ k.T / math.sqrt(q.size(-1)), dim=-1)
    return w @ v, w


@wrong(
    "attention",
    r"raised RuntimeError.*at line \d+ of your code: `.*e\.sum\(-1\).*"
    r"5 \(Sk\) against 4 \(Sq\)",
    listed=False,
)
def attention_sum_without_keepdim(q, k, v):  # row sums lose their axis: no broadcast
    e = torch.exp(q @ k.mT / math.sqrt(q.size(-1)))
    return (e / e.sum(-1)) @ v, e / e.sum(-1)


@wrong("attention", r"calls scaled_dot_product_attention", listed=False)
def attention_output_from_pytorch(q, k, v):  # the weights by hand, the output fused
    w = (q @ k.mT / math.sqrt(q.size(-1))).softmax(-1)
    return F.scaled_dot_product_attention(q, k, v), w


@wrong("attention", r"'weights masked'", listed=False)
def attention_causal_already(q, k, v):  # a causal mask "because GPT has one"
    s = q @ k.mT / math.sqrt(q.size(-1))
    keep = torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).tril()
    w = s.masked_fill(~keep, float("-inf")).softmax(-1)
    return w @ v, w


@wrong("attention", r"divided by 2\.546, 2\.546, 3\.6, 1\.8, 7\.2", listed=False)
def attention_temperature(q, k, v):  # a "sharper" temperature of 0.9 on top
    tau = 0.9
    w = (q @ k.mT / (tau * math.sqrt(q.size(-1)))).softmax(-1)
    return w @ v, w


@wrong(
    "attention",
    r"divided by -2\.828, -2\.828, -4, -2, -8 .*sign is flipped",
    listed=False,
)
def attention_negated_scores(q, k, v):  # a distance, -q·k, instead of a similarity
    w = torch.softmax(-torch.matmul(q, k.mT) / math.sqrt(q.size(-1)), dim=-1)
    return torch.matmul(w, v), w


@wrong("attention", r"weights @ v \+ q: a residual connection", listed=False)
def attention_adds_residual(q, k, v):  # the block's residual put inside attention
    w = (q @ k.mT / math.sqrt(q.size(-1))).softmax(-1)
    return w @ v + q, w


@wrong("attention", r"'weights do not sum to 1'.*from 1\.612 to 3\.172", listed=False)
def attention_sigmoid(q, k, v):  # sigmoid: each weight in (0, 1), rows unnormalised
    w = torch.sigmoid(q @ k.mT / math.sqrt(q.size(-1)))
    return w @ v, w


@wrong("attention", r"'NaN or inf in the weights'", listed=False)
def attention_relu_normalised(q, k, v):  # relu then divide: rows of zeros give 0/0
    s = F.relu(q @ k.mT / math.sqrt(q.size(-1)))
    w = s / s.sum(-1, keepdim=True)
    return w @ v, w


@wrong("attention", r"'scale not constant'.*changes across the heads", listed=False)
def attention_per_head_scale(q, k, v):  # √(d_k · head index) "to diversify heads"
    n_heads = q.size(1)
    idx = torch.arange(1, n_heads + 1, dtype=q.dtype, device=q.device).view(1, -1, 1, 1)
    w = (q @ k.mT / torch.sqrt(q.size(-1) * idx)).softmax(-1)
    return w @ v, w


@wrong("attention", r"'precision lost'", listed=False)
def attention_scores_in_half(q, k, v):  # half precision "to save memory"
    s = (q.half() @ k.half().mT / math.sqrt(q.size(-1))).to(q.dtype)
    w = s.softmax(-1)
    return w @ v, w


@wrong("attention", r"'scores from the wrong vectors'.*q·vᵀ", listed=False)
def attention_k_and_v_swapped(q, k, v):  # k and v swapped in the call order
    w = (q @ v.mT / math.sqrt(q.size(-1))).softmax(-1)
    return w @ k, w


@wrong(
    "attention",
    r"raised AssertionError.*at line \d+ of your code.*float32",
    listed=False,
)
def attention_asserts_float32(q, k, v):  # a defensive assert too strict for float64
    assert q.dtype == torch.float32, "expected float32"
    w = (q @ k.mT / math.sqrt(q.size(-1))).softmax(-1)
    return w @ v, w


@wrong("attention", r"'weights shifted'.*\+ 0\.000995", listed=False)
def attention_eps_then_renormalised(q, k, v):  # an ε "so no weight is exactly 0"
    w = (q @ k.mT / math.sqrt(q.size(-1))).softmax(-1) + 1e-3
    w = w / w.sum(-1, keepdim=True)
    return w @ v, w


@wrong(
    "attention",
    r"'batch entries or heads mixed up'.*batch entry 1, head 0 are the "
    r"right ones for batch entry 0",
    listed=False,
)
def attention_weights_of_first_sequence(q, k, v):  # [:1] kept from a debugging session
    w = (q[:1] @ k[:1].mT / math.sqrt(q.size(-1))).softmax(-1)
    w = w.expand(q.size(0), -1, -1, -1)
    return w @ v, w


@wrong(
    "attention",
    r"divided by 1, 1, 1, 1, 1 .*Besides, your output is not weights @ v",
    listed=False,
)
def attention_returns_unscaled_weights(q, k, v):  # scaled for the output only
    scores = q @ k.transpose(-2, -1)
    weights = scores.softmax(-1)
    out = (scores / math.sqrt(q.size(-1))).softmax(-1) @ v
    return out, weights


# The crash's call read back (measure/failing_call.py): which call met which shapes,
# and how an operand was made.
@wrong(
    "attention",
    r"matmul of \[B, H, Sq, Dh\] and \[B, Sk, H, Dh\]; the second made by "
    r"`transpose\(1, 2\)` of \[B, H, Sk, Dh\]",
    listed=False,
)
def attention_transposes_heads_and_keys(q, k, v):
    # "transpose the key" -- but dims 1 and 2 are heads and keys
    scores = torch.matmul(q, k.transpose(1, 2)) / math.sqrt(q.shape[-1])
    weights = F.softmax(scores, dim=-1)
    return torch.matmul(weights, v), weights


@wrong(
    "attention",
    r"matmul of \[B, H, Sq, Dh\] and \[Dh, B, Sk, H\]; the second made by "
    r"`permute\(3, 0, 2, 1\)` of \[B, H, Sk, Dh\]",
    listed=False,
)
def attention_permute_wrong_order(q, k, v):
    kt = k.permute(3, 0, 2, 1)  # meant to move Dh before Sk
    weights = (q @ kt / q.size(-1) ** 0.5).softmax(-1)
    return weights @ v, weights
