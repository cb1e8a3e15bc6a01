"""Generation (chapter 8): the KV cache's speed-up, and the course's sampler against a
plain loop.

* KV cache: ``generate`` with the cache against ``generate(use_cache=False)`` (the whole
  sequence again at every step), greedy, on one small model, to two total lengths in
  the same run. Ratio = cached time / uncached time: below 1 is a speed-up, and it
  should shrink as the sequence grows (uncached work grows with the square of the
  length, cached work with the length).
* Sampler: ``sample_next`` with temperature and top-p on a GPT-2-sized vocabulary
  against the same draw written as the usual plain loop body (divide, sort, cumulative
  sum, mask, softmax, multinomial). Budget: at most 1.2x the plain version.
"""

from __future__ import annotations

import statistics
import time

import torch

from tformer_ref.model import DecoderOnlyLM
from tformer_ref.sampling import generate, sample_next

LENGTHS = (64, 256)
PROMPT = 8
B, V = 16, 50257


def _model() -> DecoderOnlyLM:
    torch.manual_seed(0)
    return DecoderOnlyLM(
        96,
        128,
        4,
        4,
        512,
        dropout=0.0,
        max_len=max(LENGTHS),
        pad_id=None,
        norm_first=True,
        positions="learned",
    ).eval()


def _generation_time(model, prompt, new_tokens: int, use_cache: bool) -> float:
    start = time.perf_counter()
    generate(model, prompt, new_tokens, temperature=0, use_cache=use_cache)
    return time.perf_counter() - start


def _plain_top_p_draw(logits, temperature, top_p, generator):
    logits = logits / temperature
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    cumulative = sorted_logits.softmax(-1).cumsum(-1)
    remove = cumulative > top_p
    remove[:, 1:] = remove[:, :-1].clone()
    remove[:, 0] = False
    sorted_logits[remove] = float("-inf")
    probs = torch.zeros_like(logits).scatter(-1, order, sorted_logits.softmax(-1))
    return torch.multinomial(probs, 1, generator=generator)[:, 0]


def _draw_time(draw, logits, iters: int) -> float:
    g = torch.Generator().manual_seed(0)
    start = time.perf_counter()
    for _ in range(iters):
        draw(logits, 0.8, 0.9, g)
    return (time.perf_counter() - start) / iters


def _kv_cache(rounds: int) -> list[dict]:
    model = _model()
    prompt = torch.randint(96, (1, PROMPT), generator=torch.Generator().manual_seed(0))
    results = []
    for length in LENGTHS:
        new = length - PROMPT
        _generation_time(model, prompt, 4, True)  # warm-up
        times = {True: [], False: []}
        for _ in range(rounds):
            for use_cache in (True, False):
                times[use_cache].append(_generation_time(model, prompt, new, use_cache))
        ours, peer = statistics.median(times[True]), statistics.median(times[False])
        results.append(
            {
                "benchmark": f"generate {new} tokens to length {length}, greedy, CPU: "
                f"KV cache ({new / ours:.0f} tok/s) vs none ({new / peer:.0f} "
                "tok/s)",
                "ours_ms": ours * 1e3,
                "peer_ms": peer * 1e3,
                "ratio": ours / peer,
                "budget": 1.0 if length == max(LENGTHS) else None,
            }
        )
    return results


def _sampler(rounds: int, iters: int = 5) -> dict:
    logits = torch.randn(B, V, generator=torch.Generator().manual_seed(0)) * 3

    def ours(logits, temperature, top_p, generator):
        return sample_next(logits, temperature, top_p=top_p, generator=generator)

    times = {"ours": [], "plain": []}
    for _ in range(rounds):
        times["ours"].append(_draw_time(ours, logits, iters))
        times["plain"].append(_draw_time(_plain_top_p_draw, logits, iters))
    mine, peer = statistics.median(times["ours"]), statistics.median(times["plain"])
    return {
        "benchmark": f"sample_next temperature+top-p B={B} V={V} CPU vs a plain "
        "loop body",
        "ours_ms": mine * 1e3,
        "peer_ms": peer * 1e3,
        "ratio": mine / peer,
        "budget": 1.2,
    }


def run(rounds: int = 3) -> list[dict]:
    return [*_kv_cache(rounds), _sampler(5 * rounds)]
