"""Choosing the next token: temperature, top-k, top-p, and the generation loop.

Shape letters: B batch, S prompt length, N new tokens, V vocabulary size.

The order is the usual one: divide the logits by the temperature, keep the top k,
keep the top p of what is left, softmax, draw.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from .decoding import _eval_mode
from .kv_cache import KVCache


def _check_logits(logits) -> None:
    if not isinstance(logits, torch.Tensor) or not logits.is_floating_point():
        dtype = f" of dtype {logits.dtype}" if isinstance(logits, torch.Tensor) else ""
        raise TypeError(
            f"logits must be a float tensor [B, V], got {type(logits).__name__}{dtype}"
        )
    if logits.dim() != 2:
        raise ValueError(f"logits must have shape [B, V], got {tuple(logits.shape)}")


def _check_temperature(temperature) -> None:
    if (
        not isinstance(temperature, (int, float))
        or not temperature >= 0
        or math.isinf(temperature)
    ):
        raise ValueError(
            f"temperature must be a finite number >= 0 (0 means greedy), "
            f"got {temperature!r}"
        )


def _check_top_k(k) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"top_k must be an int >= 1 (or None for no cut), got {k!r}")


def _check_top_p(p) -> None:
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p <= 1:
        raise ValueError(f"top_p must be in (0, 1] (or None for no cut), got {p!r}")


def top_k_filter(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Logits [B, V] with all but the k largest of each row set to -inf.

    Tokens tied with the k-th largest are kept too, so a row may keep more than k.
    A k past V keeps everything.

    Taught in §8.6 'Top-k and top-p' (book/ch08_generation).

    Examples::

        >>> top_k_filter(torch.tensor([[1.0, 3.0, 2.0, 0.0]]), 2)
        tensor([[-inf, 3., 2., -inf]])
    """
    _check_logits(logits)
    _check_top_k(k)
    if k >= logits.size(-1):
        return logits
    kth = logits.topk(k, dim=-1).values[:, -1:]
    return logits.masked_fill(logits < kth, float("-inf"))


def top_p_filter(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Logits [B, V] keeping, in each row, the smallest set of most likely tokens whose
    probability adds up to at least ``p`` (nucleus sampling, Holtzman et al. 2020).

    The token that carries the sum across ``p`` is *in* the set, so the set is never
    empty: when the most likely token alone has more than ``p``, it is kept alone.
    ``p = 1`` keeps every token (in float32 the running sum can reach 1.0 before the
    tail, so it is not left to the comparison).

    Taught in §8.6 'Top-k and top-p' (book/ch08_generation).

    Examples::

        >>> logits = torch.tensor([[0.5, 0.3, 0.2]]).log()
        >>> top_p_filter(logits, 0.6).isfinite()  # 0.5 < 0.6: 0.3 crosses, kept
        tensor([[ True,  True, False]])
        >>> top_p_filter(logits, 0.4).isfinite()  # 0.5 alone already reaches 0.4
        tensor([[ True, False, False]])
    """
    _check_logits(logits)
    _check_top_p(p)
    if p >= 1:
        return logits
    probs, order = logits.softmax(-1).sort(dim=-1, descending=True)
    before = probs.cumsum(-1) - probs  # the mass of the tokens ranked above each one
    # A token is kept when the tokens above it have not reached p yet; the first never
    # has anything above it, so at least one token is kept.
    keep_sorted = before < p
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    return logits.masked_fill(~keep, float("-inf"))


def next_token_probs(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
) -> torch.Tensor:
    """The distribution the next token is drawn from: logits [B, V] -> probs [B, V].

    Temperature divides the *logits*, before the softmax; 0 puts all the mass on the
    most likely token (greedy). Then top-k, then top-p, then the softmax renormalises
    what is kept.

    Taught in §8.5 'Temperature' (book/ch08_generation).

    Examples::

        >>> logits = torch.tensor([[2.0, 1.0, 0.0]])
        >>> next_token_probs(logits).round(decimals=3)
        tensor([[0.6650, 0.2450, 0.0900]])
        >>> next_token_probs(logits, temperature=0.5).round(decimals=3)  # sharper
        tensor([[0.8670, 0.1170, 0.0160]])
        >>> next_token_probs(logits, temperature=0)
        tensor([[1., 0., 0.]])
    """
    _check_logits(logits)
    _check_temperature(temperature)
    if temperature == 0:
        greedy = logits.argmax(-1, keepdim=True)
        return torch.zeros_like(logits).scatter(-1, greedy, 1.0)
    logits = logits.float() / temperature
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    if top_p is not None:
        logits = top_p_filter(logits, top_p)
    return logits.softmax(-1)


def sample_next(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Draw one token per row: logits [B, V] -> ids [B].

    ``generator`` (on the logits' device) makes the draw repeatable; without one the
    draw uses the global random state, so two runs of the same cell differ.

    Taught in §8.9 'Seeded sampling' (book/ch08_generation).

    Examples::

        >>> logits = torch.zeros(1, 5)
        >>> a = sample_next(logits, generator=torch.Generator().manual_seed(0))
        >>> b = sample_next(logits, generator=torch.Generator().manual_seed(0))
        >>> bool(a == b)
        True
    """
    probs = next_token_probs(logits, temperature, top_k, top_p)
    return torch.multinomial(probs, 1, generator=generator)[:, 0]


def _context_length(model: nn.Module) -> int:
    """How many positions ``model`` takes: its ``max_len``."""
    return int(model.max_len)


@torch.no_grad()
def generate(
    model: nn.Module,
    prompt: torch.Tensor,
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
) -> torch.Tensor:
    """Continue ``prompt`` [B, S] by ``max_new_tokens`` tokens -> [B, S + N].

    With ``use_cache`` the prompt runs once and then each new token alone, against a
    fresh :class:`~tformer_ref.kv_cache.KVCache`; without it the whole sequence runs
    again at every step. Both give the same tokens (up to float rounding in the last
    digits of the logits). ``temperature=0`` is greedy decoding.

    The model must take ``model(tokens)`` and, with a cache,
    ``model(tokens, cache=cache)``, and have ``max_len``: the prompt and the new tokens
    must fit in it.

    Taught in §8.7 'The KV cache' (book/ch08_generation).

    Examples::

        >>> from tformer_ref.model import DecoderOnlyLM
        >>> lm = DecoderOnlyLM(10, 16, 2, 1, 32, max_len=12, pad_id=None).eval()
        >>> prompt = torch.tensor([[1, 2, 3]])
        >>> cached = generate(lm, prompt, 5, temperature=0)
        >>> cached.shape, torch.equal(cached, generate(lm, prompt, 5, temperature=0,
        ...                                            use_cache=False))
        (torch.Size([1, 8]), True)
    """
    if (
        not isinstance(prompt, torch.Tensor)
        or prompt.dim() != 2
        or prompt.dtype != torch.long
        or prompt.size(1) == 0
    ):
        raise ValueError(
            "prompt must be a LongTensor of token ids [B, S] with S >= 1, "
            f"got {type(prompt).__name__}"
            + (
                f" {tuple(prompt.shape)} {prompt.dtype}"
                if isinstance(prompt, torch.Tensor)
                else ""
            )
        )
    if (
        isinstance(max_new_tokens, bool)
        or not isinstance(max_new_tokens, int)
        or max_new_tokens < 0
    ):
        raise ValueError(f"max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
    _check_temperature(temperature)
    if top_k is not None:
        _check_top_k(top_k)
    if top_p is not None:
        _check_top_p(top_p)
    context = _context_length(model)
    total = prompt.size(1) + max_new_tokens
    if total > context:
        raise ValueError(
            f"the prompt ({prompt.size(1)} tokens) and max_new_tokens={max_new_tokens} "
            f"make {total} tokens, past the model's context of {context}: shorten the "
            "prompt or ask for fewer tokens"
        )
    restore = _eval_mode(model)
    try:
        tokens, step_input = prompt, prompt
        cache = KVCache() if use_cache else None
        for _ in range(max_new_tokens):
            logits = model(step_input, cache=cache) if use_cache else model(tokens)
            new = sample_next(logits[:, -1], temperature, top_k, top_p, generator)
            tokens = torch.cat([tokens, new[:, None]], dim=1)
            step_input = new[:, None] if use_cache else tokens
        return tokens
    finally:
        restore()
