"""The KV cache: the keys and values of the tokens already seen, kept per layer.

Shape letters: B batch, H heads, T tokens cached so far, S new tokens, Dh head size.

Without a cache, generating each new token runs the whole sequence through the model
again, although the keys and values of the earlier tokens cannot change (a causal
model's position i sees only tokens 0..i). With one, each step runs only the new
token: its query attends to the cached keys and values plus its own.
"""

from __future__ import annotations

import torch


class LayerKV:
    """One attention layer's cached keys and values, [B, H, T, Dh] each.

    Taught in §8.7 'The KV cache' (book/ch08_generation).

    Examples::

        >>> kv = LayerKV()
        >>> k, v = kv.append(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))
        >>> k, v = kv.append(torch.ones(1, 2, 1, 4), torch.ones(1, 2, 1, 4))
        >>> k.shape, kv.length  # 3 tokens, then 1 more
        (torch.Size([1, 2, 4, 4]), 4)
    """

    def __init__(self):
        self.keys: torch.Tensor | None = None
        self.values: torch.Tensor | None = None

    @property
    def length(self) -> int:
        return 0 if self.keys is None else self.keys.size(2)

    def append(self, k: torch.Tensor, v: torch.Tensor):
        """Add the new tokens' k, v [B, H, S, Dh]; return all keys and values
        [B, H, T + S, Dh]."""
        if self.keys is None:
            self.keys, self.values = k, v
        else:
            if k.shape[:2] != self.keys.shape[:2] or k.size(-1) != self.keys.size(-1):
                raise ValueError(
                    f"new keys of shape {tuple(k.shape)} do not fit a cache of shape "
                    f"{tuple(self.keys.shape)}: B, H and Dh must stay the same (start "
                    "a new KVCache for a new batch of prompts)"
                )
            self.keys = torch.cat([self.keys, k], dim=2)
            self.values = torch.cat([self.values, v], dim=2)
        return self.keys, self.values


class KVCache:
    """The cache of a whole model: one :class:`LayerKV` per attention layer, made as
    the layers ask for them.

    A cache belongs to one batch of prompts: start a new one (or :meth:`reset`) for
    the next, or the next prompt attends to the last one's tokens.

    Taught in §8.7 'The KV cache' (book/ch08_generation).

    Examples::

        >>> cache = KVCache()
        >>> _ = cache.layer(0).append(torch.zeros(2, 4, 5, 8), torch.zeros(2, 4, 5, 8))
        >>> cache.length, cache.nbytes()  # 5 tokens; 2 tensors of 2·4·5·8 floats
        (5, 2560)
    """

    def __init__(self):
        self.layers: list[LayerKV] = []

    def layer(self, i: int) -> LayerKV:
        while len(self.layers) <= i:
            self.layers.append(LayerKV())
        return self.layers[i]

    @property
    def length(self) -> int:
        """Tokens cached so far (the position the next token will have)."""
        return self.layers[0].length if self.layers else 0

    def nbytes(self) -> int:
        """Memory held: keys and values of every layer, in bytes."""
        return sum(
            t.numel() * t.element_size()
            for kv in self.layers
            for t in (kv.keys, kv.values)
            if t is not None
        )

    def reset(self) -> None:
        self.layers.clear()
