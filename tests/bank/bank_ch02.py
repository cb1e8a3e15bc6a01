"""Chapter 2's measured bank: attention and attention_entropy (see bank.py)."""

import math

import torch
import torch.nn.functional as F

from bank import GENERIC, right, wrong  # noqa: F401
from exercise_cells import graders

GRADERS = graders(
    "ch02_attention",
    {"attention": "attention", "attention_entropy": "attention_entropy"},
)


# =========================================================================== attention
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


@wrong("attention", r"3 \(H\) against 5 \(Sk\)", listed=False)
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


# =========================================================================== entropy
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
