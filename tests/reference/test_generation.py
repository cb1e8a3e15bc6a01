"""Sampling and the KV cache (chapter 8), against plain re-computation on the device the
course picks (CPU here; CUDA under `make test-gpu`)."""

import pytest
import torch

from tformer_ref.device import get_device
from tformer_ref.kv_cache import KVCache
from tformer_ref.masks import causal_mask
from tformer_ref.model import DecoderOnlyLM
from tformer_ref.sampling import (
    generate,
    next_token_probs,
    sample_next,
    top_k_filter,
    top_p_filter,
)

DEVICE = get_device()


def tiny_lm(positions="learned", seed=0, **kw):
    torch.manual_seed(seed)
    lm = DecoderOnlyLM(
        13,
        32,
        4,
        2,
        64,
        dropout=0.0,
        max_len=40,
        pad_id=None,
        positions=positions,
        norm_first=True,
        **kw,
    )
    return lm.to(DEVICE).eval()


def prompts(batch=3, length=5, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(13, (batch, length), generator=g).to(DEVICE)


@pytest.mark.parametrize("positions", ["learned", "sinusoidal"])
def test_cached_greedy_equals_uncached_token_for_token(positions):
    lm, prompt = tiny_lm(positions), prompts()
    cached = generate(lm, prompt, 30, temperature=0)
    uncached = generate(lm, prompt, 30, temperature=0, use_cache=False)
    assert cached.shape == (3, 35)
    assert torch.equal(cached, uncached)
    assert torch.equal(cached[:, :5], prompt)


@pytest.mark.parametrize("seed", [0, 1])
def test_cached_sampling_equals_uncached_under_the_same_seed(seed):
    lm, prompt = tiny_lm(seed=seed), prompts(seed=seed)

    def run(use_cache):
        g = torch.Generator(device=DEVICE).manual_seed(seed)
        return generate(
            lm,
            prompt,
            30,
            temperature=1.3,
            top_p=0.95,
            generator=g,
            use_cache=use_cache,
        )

    first = run(True)
    assert torch.equal(first, run(False))
    assert torch.equal(first, run(True))  # the seed makes the draw repeatable


def test_cached_logits_equal_full_logits_at_every_step():
    lm, tokens = tiny_lm(), prompts(2, 20)
    full = lm(tokens)
    cache, pieces = KVCache(), []
    # A prompt, single tokens, then chunks.
    for chunk in tokens.split([7, 1, 1, 5, 6], dim=1):
        pieces.append(lm(chunk, cache=cache))
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, atol=1e-5, rtol=1e-4)
    assert cache.length == 20


def test_the_cache_holds_two_tensors_per_layer_of_the_predicted_size():
    lm, tokens = tiny_lm(), prompts(2, 9)
    cache = KVCache()
    lm(tokens, cache=cache)
    assert len(cache.layers) == 2
    # keys and values, per layer: B · T · D floats of 4 bytes.
    assert cache.nbytes() == 2 * 2 * (2 * 9 * 32) * 4


def test_a_cache_is_per_prompt_a_reused_one_changes_the_answer():
    lm = tiny_lm()
    first, second = prompts(1, 6, seed=3), prompts(1, 6, seed=4)
    cache = KVCache()
    lm(first, cache=cache)
    carried = lm(second, cache=cache)[:, -1]
    fresh = lm(second)[:, -1]
    assert (carried - fresh).abs().max() > 1e-2


def test_the_cached_path_needs_an_unpadded_model():
    lm = DecoderOnlyLM(13, 16, 2, 1, 32, pad_id=0).eval()
    with pytest.raises(ValueError, match="pad_id=None"):
        lm(torch.tensor([[3, 4]]), cache=KVCache())


def test_causal_mask_with_a_past_lets_each_new_query_see_every_cached_key():
    mask = causal_mask(3, past=4)[0, 0]
    assert mask.shape == (3, 7)
    assert mask[:, :4].all()
    assert torch.equal(mask[:, 4:], causal_mask(3)[0, 0])


# ----------------------------------------------------------------------------- top-p


def probs_of(logits):
    return logits.softmax(-1)


@pytest.mark.parametrize("seed", range(20))
def test_top_p_keeps_the_smallest_set_that_reaches_p(seed):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(4, 30, generator=g) * 2
    p = float(torch.rand(1, generator=g)) * 0.98 + 0.01
    kept = top_p_filter(logits, p).isfinite()
    probs = probs_of(logits)
    for row in range(4):
        mass = probs[row][kept[row]].sum()
        assert mass >= p - 1e-6  # reaches p
        # smallest: dropping the least likely kept token falls below p
        least = probs[row][kept[row]].min()
        assert mass - least < p + 1e-6
        # and the kept tokens are the most likely ones
        dropped = probs[row][~kept[row]]
        assert dropped.numel() == 0 or least >= dropped.max()


def test_top_p_never_keeps_an_empty_set():
    logits = torch.tensor([[10.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    kept = top_p_filter(logits, 0.01).isfinite()
    assert kept.sum(-1).tolist() == [1, 1]
    probs = next_token_probs(logits, top_p=0.01)
    assert not probs.isnan().any() and torch.allclose(probs.sum(-1), torch.ones(2))


def test_top_p_of_one_keeps_everything_and_top_k_keeps_k():
    logits = torch.randn(2, 9)
    assert top_p_filter(logits, 1.0).isfinite().all()
    assert top_k_filter(logits, 3).isfinite().sum(-1).tolist() == [3, 3]
    assert torch.equal(top_k_filter(logits, 50), logits)


def test_temperature_divides_the_logits_before_the_softmax():
    logits = torch.randn(3, 7)
    want = (logits / 0.5).softmax(-1)
    torch.testing.assert_close(next_token_probs(logits, 0.5), want)
    torch.testing.assert_close(next_token_probs(logits, 1.0), logits.softmax(-1))


def test_temperature_towards_zero_is_greedy():
    logits = torch.randn(5, 11)
    greedy = logits.argmax(-1)
    for t in (1e-2, 1e-4):
        draws = sample_next(logits, t, generator=torch.Generator().manual_seed(0))
        assert torch.equal(draws, greedy)
    assert torch.equal(sample_next(logits, 0), greedy)
    assert torch.equal(next_token_probs(logits, 0).argmax(-1), greedy)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(top_p=0.0), "top_p must be in"),
        (dict(top_p=1.5), "top_p must be in"),
        (dict(top_p=-0.1), "top_p must be in"),
        (dict(top_k=0), "top_k must be an int >= 1"),
        (dict(top_k=2.5), "top_k must be an int >= 1"),
        (dict(temperature=-1.0), "temperature must be"),
        (dict(temperature=float("nan")), "temperature must be"),
        (dict(temperature=float("inf")), "temperature must be"),
    ],
)
def test_bad_sampling_arguments_raise_clear_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        next_token_probs(torch.randn(1, 5), **kwargs)
    with pytest.raises(ValueError, match=match):
        generate(tiny_lm(), prompts(1, 2), 3, **kwargs)


def test_a_prompt_past_the_context_raises_a_clear_error():
    lm = tiny_lm()
    with pytest.raises(ValueError, match="past the model's context of 40"):
        generate(lm, prompts(1, 41), 0)
    with pytest.raises(ValueError, match="make 45 tokens"):
        generate(lm, prompts(1, 30), 15)
    with pytest.raises(ValueError, match="LongTensor"):
        generate(lm, prompts(1, 3).float(), 2)
    with pytest.raises(TypeError, match="float tensor"):
        next_token_probs(torch.tensor([[1, 2]]))


def test_generation_restores_training_mode_and_keeps_no_graph():
    lm = tiny_lm().train()
    out = generate(lm, prompts(1, 3), 4)
    assert lm.training and not out.requires_grad


def test_top_p_of_one_keeps_every_token_even_where_float32_sums_reach_one_early():
    logits = torch.randn(200, 768, generator=torch.Generator().manual_seed(0)) * 10
    assert top_p_filter(logits, 1.0).isfinite().all()
