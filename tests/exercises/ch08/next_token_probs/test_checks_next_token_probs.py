"""next_token_probs (chapter 8, book/ch08_generation): the unit tests of
``ch08.check_next_token_probs`` and its hidden ``check_next_token_probs_by_hand``, with
wrong distributions (each rejected with its named diagnosis, or as unexplained) and
right ones written differently (each accepted), none writing to stderr.

Beyond the bank (bank_next_token_probs.py): the measured temperature, the crossing
token and the token kept past p named, an overflowing output explained, the learner's
line when their code raises, the reference refused by the hidden test, and the cases
themselves: kept sets decided with margin, the exact case reaching top_p exactly in
float32, the large case overflowing a plain exp.

Each one is written as a learner might type it, not as the check's own variant is.
"""

import pytest
import torch
from units_ch08 import probs_right

from tformer_grading.checks import CheckFailure, ch08
from tformer_grading.checks.ch08 import next_token_probs as probs_checks
from tformer_grading.checks.diagnosis import UNEXPLAINED

# ------------------------------------------------------------------ next_token_probs


def probs_right_zero_and_divide(logits, temperature, top_p):
    """Zeroes the probabilities outside the nucleus and divides by what is left."""
    probs = torch.softmax(logits / temperature, dim=-1)
    values, idx = torch.sort(probs, descending=True)
    cum = torch.cumsum(values, dim=-1)
    remove = cum >= top_p  # once the sum reaches top_p, the rest can go
    remove[..., 1:] = remove[..., :-1].clone()  # the crossing token stays
    remove[..., 0] = False
    values = values.masked_fill(remove, 0.0)
    out = torch.zeros_like(probs).scatter(-1, idx, values)
    return out / out.sum(dim=-1, keepdim=True)


def probs_right_row_loop(logits, temperature, top_p):
    """One row at a time, a Python loop adding tokens until the mass reaches top_p."""
    out = torch.zeros_like(logits)
    for b in range(logits.size(0)):
        p = (logits[b] / temperature).softmax(0)
        total, kept = 0.0, []
        for i in p.argsort(descending=True).tolist():
            kept.append(i)
            total += float(p[i])
            if total >= top_p:
                break
        out[b, kept] = p[kept] / p[kept].sum()
    return out


def probs_right_power(logits, temperature, top_p):
    """softmax(x) ** (1/T), renormalised, is softmax(x / T); -1e9 instead of -inf."""
    p = logits.softmax(-1) ** (1.0 / temperature)
    p = p / p.sum(-1, keepdim=True)
    sp, si = p.sort(-1, descending=True)
    mask = (sp.cumsum(-1) - sp) >= top_p
    mask = mask.scatter(-1, si, mask)
    masked = torch.where(mask, torch.full_like(p, -1e9), p.log())
    return masked.softmax(-1)


def probs_right_log_softmax(logits, temperature, top_p):
    """log_softmax(x) / T differs from x / T by a constant per row: the same softmax."""
    scaled = torch.log_softmax(logits, dim=-1) / temperature
    probs = scaled.exp() / scaled.exp().sum(-1, keepdim=True)
    sorted_p, order = probs.sort(descending=True)
    n_keep = ((sorted_p.cumsum(-1) - sorted_p) < top_p).sum(-1)
    keep = torch.arange(probs.size(-1), device=probs.device)[None] < n_keep[:, None]
    probs = probs.scatter(-1, order, sorted_p * keep)
    return probs / probs.sum(-1, keepdim=True)


def probs_right_in_float64(logits, temperature, top_p):
    """Works in float64 throughout and returns float64."""
    z = logits.double() / temperature
    p = torch.exp(z - z.max(-1, keepdim=True).values)
    p = p / p.sum(-1, keepdim=True)
    order = p.argsort(-1, descending=True)
    ranked = p.gather(-1, order)
    drop = (ranked.cumsum(-1) - ranked) >= top_p
    p = p.scatter(-1, order, ranked.masked_fill(drop, 0.0))
    return p / p.sum(-1, keepdim=True)


def probs_right_own_softmax(logits, temperature, top_p):
    """Its own softmax, the row's largest logit subtracted first; a boolean loop."""
    z = logits / temperature
    e = torch.exp(z - z.max(dim=-1, keepdim=True).values)
    probs = e / e.sum(dim=-1, keepdim=True)
    order = torch.argsort(probs, dim=-1, descending=True)
    out = torch.zeros_like(probs)
    for b in range(probs.shape[0]):
        mass = 0.0
        for i in order[b]:
            if mass >= top_p:
                break
            out[b, i] = probs[b, i]
            mass += probs[b, i].item()
    return out / out.sum(dim=-1, keepdim=True)


def probs_cumsum_below_p(logits, temperature, top_p):
    # Bug: keeps the tokens whose cumulative sum stays within top_p: the crossing token
    # is lost, and nothing is kept when the top token alone exceeds top_p.
    probs = torch.softmax(logits / temperature, dim=-1)
    s, i = probs.sort(descending=True)
    keep = s.cumsum(-1) <= top_p
    keep = torch.zeros_like(keep).scatter(-1, i, keep)
    return torch.softmax((logits / temperature).masked_fill(~keep, -float("inf")), -1)


def probs_forgot_first_token(logits, temperature, top_p):
    # Bug: the usual shift, but never forces the first token back in.
    probs = torch.softmax(logits / temperature, dim=-1)
    s, i = probs.sort(descending=True)
    remove = s.cumsum(-1) > top_p
    remove[..., 1:] = remove[..., :-1].clone()
    remove = remove.scatter(-1, i, remove)
    probs = probs.masked_fill(remove, 0.0)
    return probs / probs.sum(-1, keepdim=True)


def probs_unsorted(logits, temperature, top_p):
    # Bug: the cumulative sum runs in vocabulary order, not from the most likely token.
    probs = torch.softmax(logits / temperature, dim=-1)
    keep = (probs.cumsum(-1) - probs) < top_p
    probs = probs * keep
    return probs / probs.sum(-1, keepdim=True)


def probs_not_renormalised(logits, temperature, top_p):
    # Bug: zeroes the tail but never divides by what is left.
    probs = torch.softmax(logits / temperature, dim=-1)
    s, i = probs.sort(descending=True)
    keep = (s.cumsum(-1) - s) < top_p
    return probs * torch.zeros_like(keep).scatter(-1, i, keep)


def probs_temperature_on_probs(logits, temperature, top_p):
    # Bug: divides the probabilities by the temperature, then renormalises.
    probs = torch.softmax(logits, dim=-1) / temperature
    probs = probs / probs.sum(-1, keepdim=True)
    s, i = probs.sort(descending=True)
    nucleus = (s.cumsum(-1) - s) < top_p
    keep = torch.zeros_like(nucleus).scatter(-1, i, nucleus)
    probs = probs * keep
    return probs / probs.sum(-1, keepdim=True)


def probs_softmax_twice(logits, temperature, top_p):
    # Bug: the temperature goes on the probabilities and a second softmax follows.
    probs = torch.softmax(logits, dim=-1)
    probs = torch.softmax(probs / temperature, dim=-1)
    s, i = probs.sort(descending=True)
    nucleus = (s.cumsum(-1) - s) < top_p
    keep = torch.zeros_like(nucleus).scatter(-1, i, nucleus)
    probs = probs * keep
    return probs / probs.sum(-1, keepdim=True)


def probs_multiplied(logits, temperature, top_p):
    # Bug: multiplies by the temperature.
    scaled = logits * temperature
    probs = scaled.softmax(-1)
    s, i = probs.sort(descending=True)
    nucleus = (s.cumsum(-1) - s) < top_p
    keep = torch.zeros_like(nucleus).scatter(-1, i, nucleus)
    return scaled.masked_fill(~keep, float("-inf")).softmax(-1)


def probs_top_p_first(logits, temperature, top_p):
    # Bug: chooses the nucleus on the raw logits, then applies the temperature.
    probs = logits.softmax(-1)
    s, i = probs.sort(descending=True)
    nucleus = (s.cumsum(-1) - s) < top_p
    keep = torch.zeros_like(nucleus).scatter(-1, i, nucleus)
    filtered = logits.masked_fill(~keep, float("-inf"))
    return (filtered / temperature).softmax(-1)


def probs_returns_logits(logits, temperature, top_p):
    # Bug: returns the filtered logits, forgetting the softmax.
    scaled = logits / temperature
    s, i = scaled.softmax(-1).sort(descending=True)
    nucleus = (s.cumsum(-1) - s) < top_p
    keep = torch.zeros_like(nucleus).scatter(-1, i, nucleus)
    return scaled.masked_fill(~keep, float("-inf"))


def probs_samples(logits, temperature, top_p):
    # Bug: returns a sampled token instead of the distribution.
    return torch.multinomial(probs_right(logits, temperature, top_p), 1)[:, 0]


def probs_strict_shift(logits, temperature, top_p):
    # Bug: removes where cumsum > top_p, then shifts: when the sum reaches top_p
    # exactly, the next token is kept too.
    probs = torch.softmax(logits / temperature, dim=-1)
    values, idx = torch.sort(probs, descending=True)
    cum = torch.cumsum(values, dim=-1)
    remove = cum > top_p
    remove[..., 1:] = remove[..., :-1].clone()
    remove[..., 0] = False
    values = values.masked_fill(remove, 0.0)
    out = torch.zeros_like(probs).scatter(-1, idx, values)
    return out / out.sum(dim=-1, keepdim=True)


def probs_loop_until_above_p(logits, temperature, top_p):
    # Bug: the loop stops once the kept mass is *above* top_p, not once it reaches it.
    out = torch.zeros_like(logits)
    for b in range(logits.size(0)):
        p = torch.softmax(logits[b] / temperature, dim=0)
        total = 0.0
        for i in torch.argsort(p, descending=True):
            out[b, i] = p[i]
            total += p[i].item()
            if total > top_p:
                break
    return out / out.sum(-1, keepdim=True)


def probs_exp_without_max(logits, temperature, top_p):
    # Bug: its own softmax, without subtracting the largest logit first.
    e = torch.exp(logits / temperature)
    probs = e / e.sum(dim=-1, keepdim=True)
    s, i = probs.sort(descending=True)
    keep = (s.cumsum(-1) - s) < top_p
    keep = torch.zeros_like(keep).scatter(-1, i, keep)
    probs = probs * keep
    return probs / probs.sum(-1, keepdim=True)


def probs_smoothed(logits, temperature, top_p):
    # Bug no diagnosis knows: adds 0.01 to each kept probability, then renormalises.
    probs = probs_right(logits, temperature, top_p)
    probs = torch.where(probs > 0, probs + 0.01, probs)
    return probs / probs.sum(-1, keepdim=True)


RIGHT_PROBS = [
    probs_right,
    probs_right_zero_and_divide,
    probs_right_row_loop,
    probs_right_power,
    probs_right_log_softmax,
    probs_right_in_float64,
    probs_right_own_softmax,
]


@pytest.mark.parametrize("fn", RIGHT_PROBS)
def test_next_token_probs_accepts_right_implementations(fn, capsys):
    ch08.check_next_token_probs(fn)
    ch08.check_next_token_probs_by_hand(fn)
    captured = capsys.readouterr()
    assert captured.out.count("✓ next_token_probs") == 2
    assert captured.err == ""


@pytest.mark.parametrize(
    "fn,diagnosis",
    [
        (probs_cumsum_below_p, "top-p drops the token that crosses p"),
        (
            probs_forgot_first_token,
            "top-p keeps none when the top token alone exceeds p",
        ),
        (probs_unsorted, "top-p keeps tokens that are not the most likely"),
        (probs_not_renormalised, "probabilities not renormalised"),
        (
            probs_temperature_on_probs,
            "temperature applied after the softmax, or not at all",
        ),
        (probs_softmax_twice, "temperature applied after the softmax"),
        (probs_multiplied, "temperature multiplied instead of divided"),
        (probs_top_p_first, "top-p applied before the temperature"),
        (probs_returns_logits, "returns something other than probabilities"),
        (probs_samples, r"expected shape \[2, 8\], got \[2\].*a sampled token"),
        (
            probs_strict_shift,
            "top-p keeps one token too many when the mass reaches p exactly",
        ),
        (
            probs_loop_until_above_p,
            "top-p keeps one token too many when the mass reaches p exactly",
        ),
        (
            probs_exp_without_max,
            r"softmax overflows on large logits \(exp without "
            r"subtracting the max\)",
        ),
        (probs_smoothed, UNEXPLAINED),
    ],
)
def test_next_token_probs_rejects_wrong_implementations(fn, diagnosis, capsys):
    with pytest.raises(CheckFailure, match=diagnosis) as info:
        ch08.check_next_token_probs(fn)
    assert "Read §8." in str(info.value)
    assert capsys.readouterr().err == ""


def test_next_token_probs_measures_the_temperature():
    with pytest.raises(CheckFailure, match=r"at temperature 2(\.0+)?, expected 0.5"):
        ch08.check_next_token_probs(probs_multiplied)


def test_next_token_probs_names_the_crossing_token():
    with pytest.raises(
        CheckFailure,
        match=r"is the one that carries the sum across "
        r"top_p = 0.9",
    ):
        ch08.check_next_token_probs(probs_cumsum_below_p)


def test_next_token_probs_names_the_token_kept_past_p():
    with pytest.raises(
        CheckFailure,
        match=r"you keep 3 token\(s\) \[0, 1, 2\] holding "
        r"0.875.*token 2 \(probability 0.125\) is "
        r"one too many",
    ):
        ch08.check_next_token_probs(probs_strict_shift)


def test_next_token_probs_says_the_output_overflows():
    with pytest.raises(
        CheckFailure,
        match=r"around 60, temperature=0.5.*your output "
        r"has NaN or inf; on the same logits minus "
        r"each row's largest .* it is right",
    ):
        ch08.check_next_token_probs(probs_exp_without_max)


def test_next_token_probs_says_which_line_raised():
    def probs_typo(logits, temperature, top_p):
        probs = (logits / temperature).softmax(-1)
        return probs.sort(dim=2)  # Bug: there is no dim 2

    with pytest.raises(
        CheckFailure,
        match=r"raised IndexError.*at line \d+ of your "
        r"code: `return probs.sort\(dim=2\)",
    ):
        ch08.check_next_token_probs(probs_typo)


def test_next_token_probs_by_hand_rejects_the_reference():
    from tformer_ref.sampling import next_token_probs

    def probs_delegated(logits, temperature, top_p):
        return next_token_probs(logits, temperature, top_p=top_p)

    ch08.check_next_token_probs(probs_delegated)  # right ...
    with pytest.raises(CheckFailure, match="write that computation yourself"):
        ch08.check_next_token_probs_by_hand(probs_delegated)  # ... but not written


def test_probability_cases_decide_the_kept_set_with_margin():
    """No cumulative sum lies within 1e-3 of top_p, so float rounding never decides
    which tokens a right implementation keeps; kept probabilities are far above KEPT;
    the temperature cases keep a set other than the temperature-1 one."""
    exact = ch08.prob_cases()[-1].label  # reaches top_p exactly, on purpose
    for case in ch08.prob_cases():
        logits, t, p = case.make()
        full = probs_checks._full(logits, t)
        probs = full.sort(-1, descending=True).values
        if p < 1 and case.label != exact:
            assert (probs.cumsum(-1) - p).abs().min() > 1e-3, case.label
        ref = probs_checks._reference_probs(logits, t, p)
        assert ref[ref > 0].min() > 1e-6, case.label
        if t != 1 and p < 1:
            at_one = probs_checks._top_p_set(probs_checks._full(logits, 1.0), p)
            assert not torch.equal(at_one, ref > 0), case.label


def test_exact_case_reaches_top_p_exactly_in_float32():
    """The exact case's softmax gives the powers of two themselves, and the two most
    likely tokens of each row hold exactly top_p: the reference keeps those two."""
    logits, t, p = ch08.prob_cases()[-1].make()
    probs = (logits / t).softmax(-1)
    assert torch.equal(probs.cpu(), torch.tensor(ch08.EXACT_PROBS))
    top2 = probs.sort(-1, descending=True).values[:, :2].sum(-1)
    assert torch.equal(top2.cpu(), torch.full((2,), p))
    assert ((probs_checks._reference_probs(logits, t, p) > 0).sum(-1) == 2).all()
    assert torch.allclose(
        probs_checks._reference_probs(logits, t, p), probs_checks._exact_answer()
    )


def test_large_case_overflows_a_plain_exp():
    """The large case's logits / T pass 88.7, where exp overflows float32."""
    logits, t, _ = ch08.prob_cases()[ch08.LARGE].make()
    assert torch.isinf(torch.exp(logits / t)).any()
    assert torch.isfinite(probs_checks._reference_probs(logits, t, 0.9)).all()
