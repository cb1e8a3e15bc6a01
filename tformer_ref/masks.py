"""Attention masks.

Convention of this package: a boolean mask with **True = may attend**
(the convention of ``F.scaled_dot_product_attention``), shaped so that it
broadcasts to the scores' [B, H, Sq, Sk]. ``nn.MultiheadAttention`` uses the
opposite convention (True = ignore); see chapter 3.
"""

import torch


def validate_mask(
    mask: torch.Tensor, batch: int, n_heads: int, q_len: int, k_len: int
) -> None:
    """Raise a clear error unless ``mask`` is a bool tensor that broadcasts to
    [B, H, Sq, Sk].

    The rank must be exactly 4: a [B, 1, Sk] mask would broadcast its batch
    axis against the heads axis and, when B == H, silently mask the wrong rows.

    Taught in §3.1 'Padding masks' (book/ch03_masks).

    Examples::

        >>> keep = torch.ones(3, 1, 1, 5, dtype=torch.bool)
        >>> validate_mask(keep, batch=3, n_heads=3, q_len=5, k_len=5)
        >>> validate_mask(keep[:, 0], 3, 3, 5, 5)  # [B, 1, Sk]: one axis too few
        Traceback (most recent call last):
        ...
        ValueError: mask must be a bool mask broadcastable to [B, H, Sq, Sk] = ...
    """
    expected = (
        "a bool mask broadcastable to [B, H, Sq, Sk] = "
        f"[{batch}, {n_heads}, {q_len}, {k_len}]"
    )
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"mask must be {expected}, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise TypeError(
            f"mask must be {expected} (True = attend), got dtype {mask.dtype}. "
            "A float mask is *added* to the scores in PyTorch, so a 1/0 mask would "
            "mask nothing; convert it with mask.bool()"
        )
    if mask.dim() != 4:
        raise ValueError(
            f"mask must be {expected} with exactly 4 dims, "
            f"got shape {tuple(mask.shape)}; use a padding mask of shape [B, 1, 1, Sk] "
            "and a causal mask of shape [1, 1, Sq, Sk]"
        )
    for axis, (got, want) in enumerate(zip(mask.shape, (batch, n_heads, q_len, k_len))):
        if got not in (1, want):
            raise ValueError(
                f"mask must be {expected}, got shape {tuple(mask.shape)} "
                f"(axis {axis}: {got})"
            )


def padding_mask(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Token ids [B, S] -> keep-mask [B, 1, 1, S]: True where the key is a real token.

    The two singleton axes are the heads and the queries: every head of every
    query ignores the same padded keys. (A [B, 1, S] mask would line its batch
    axis up with the heads axis of the [B, H, Sq, Sk] scores.)

    Taught in §3.1 'Padding masks' (book/ch03_masks).

    Examples::

        >>> tokens = torch.tensor([[5, 6, 7, 0, 0], [8, 0, 0, 0, 0]])
        >>> keep = padding_mask(tokens, pad_id=0)
        >>> keep.shape
        torch.Size([2, 1, 1, 5])
        >>> keep[:, 0, 0].int()
        tensor([[1, 1, 1, 0, 0],
                [1, 0, 0, 0, 0]], dtype=torch.int32)
    """
    if not isinstance(tokens, torch.Tensor):
        raise TypeError(
            f"tokens must be a tensor of token ids [B, S], got {type(tokens).__name__}"
        )
    if tokens.dim() != 2:
        raise ValueError(f"tokens must have shape [B, S], got {tuple(tokens.shape)}")
    return (tokens != pad_id)[:, None, None, :]


def causal_mask(size: int, device=None, *, past: int = 0) -> torch.Tensor:
    """[1, 1, S, past + S] keep-mask, lower triangular: query i may attend to keys
    0..past + i.

    ``triu`` would be the opposite: every query would see only itself and the future.
    ``past`` is for decoding with a KV cache: the S new queries sit at positions
    past..past + S - 1 and the keys are the ``past`` cached ones and theirs (§8.8).

    Taught in §3.2 'The causal mask' (book/ch03_masks).

    Examples::

        >>> causal_mask(3).shape
        torch.Size([1, 1, 3, 3])
        >>> causal_mask(3)[0, 0].int()  # row i: the keys query i may attend to
        tensor([[1, 0, 0],
                [1, 1, 0],
                [1, 1, 1]], dtype=torch.int32)
        >>> causal_mask(2, past=3)[0, 0].int()  # 2 new queries after 3 cached tokens
        tensor([[1, 1, 1, 1, 0],
                [1, 1, 1, 1, 1]], dtype=torch.int32)
    """
    if int(size) != size or size < 1:
        raise ValueError(f"size must be a positive int, got {size!r}")
    if int(past) != past or past < 0:
        raise ValueError(f"past must be an int >= 0, got {past!r}")
    keep = torch.ones(size, past + size, dtype=torch.bool, device=device)
    return keep.tril(diagonal=past)[None, None]


def _expect_bool(mask, name: str = "mask") -> None:
    if not isinstance(mask, torch.Tensor):
        raise TypeError(
            f"{name} must be a bool torch.Tensor, got {type(mask).__name__}"
        )
    if mask.dtype != torch.bool:
        raise TypeError(f"{name} must be a bool tensor, got dtype {mask.dtype}")


def combine_masks(*masks: torch.Tensor) -> torch.Tensor:
    """Logical AND of keep-masks: a key is attended only where *every* mask allows it.

    A padding mask [B, 1, 1, Sk] and a causal mask [1, 1, Sq, Sk] combine into
    [B, 1, Sq, Sk]. ``None`` entries are skipped; with no mask left, returns None.

    Taught in §3.3 'Combining masks' (book/ch03_masks).

    Examples::

        >>> pad = padding_mask(torch.tensor([[4, 5, 0]]), pad_id=0)  # [1, 1, 1, 3]
        >>> both = combine_masks(pad, causal_mask(3), None)
        >>> both.shape, both[0, 0].int()
        (torch.Size([1, 1, 3, 3]), tensor([[1, 0, 0],
                [1, 1, 0],
                [1, 1, 0]], dtype=torch.int32))
    """
    kept = [m for m in masks if m is not None]
    if not kept:
        return None
    for i, m in enumerate(kept):
        _expect_bool(m, f"mask {i}")
        if m.dim() != 4:
            raise ValueError(
                f"mask {i} must have 4 dims [B or 1, H or 1, Sq or 1, "
                f"Sk], got shape {tuple(m.shape)}"
            )
    try:
        shape = torch.broadcast_shapes(*(m.shape for m in kept))
    except RuntimeError:
        shapes = [tuple(m.shape) for m in kept]
        message = f"masks must broadcast together, got shapes {shapes}"
        raise ValueError(message) from None
    out = kept[0].expand(shape)
    for m in kept[1:]:
        out = out & m
    return out


def to_ignore_mask(keep: torch.Tensor) -> torch.Tensor:
    """Keep-mask (True = attend, SDPA's convention) -> ignore-mask (True = masked out),
    the convention of ``nn.MultiheadAttention``'s ``key_padding_mask`` and boolean
    ``attn_mask``. Same shape.

    Taught in §3.4 'Three conventions for one mask' (book/ch03_masks).

    Examples::

        >>> to_ignore_mask(causal_mask(2))[0, 0]
        tensor([[False,  True],
                [False, False]])
    """
    _expect_bool(keep, "keep")
    return ~keep


def from_ignore_mask(ignore: torch.Tensor) -> torch.Tensor:
    """Ignore-mask (True = masked out, ``nn.MultiheadAttention``) -> keep-mask
    (True = attend). Same shape.

    Taught in §3.4 'Three conventions for one mask' (book/ch03_masks).

    Examples::

        >>> key_padding_mask = torch.tensor([[False, False, True]])  # True = pad
        >>> from_ignore_mask(key_padding_mask)
        tensor([[ True,  True, False]])
    """
    _expect_bool(ignore, "ignore")
    return ~ignore


def to_mha_masks(keep: torch.Tensor, n_heads: int):
    """A keep-mask [B or 1, H or 1, Sq, Sk] -> ``attn_mask`` for
    ``nn.MultiheadAttention``.

    ``nn.MultiheadAttention`` wants an ignore-mask shaped [Sq, Sk] (same for the
    whole batch) or [B*H, Sq, Sk] (batch-major: row ``b*H + h``). Returns the
    [Sq, Sk] form when the mask does not depend on batch or head, else [B*H, Sq, Sk].

    Taught in §3.4 'Three conventions for one mask' (book/ch03_masks).

    Examples::

        >>> to_mha_masks(causal_mask(4), n_heads=2).shape  # one for the whole batch
        torch.Size([4, 4])
        >>> pad = padding_mask(torch.tensor([[3, 4, 0, 0], [5, 6, 7, 0]]), pad_id=0)
        >>> to_mha_masks(pad & causal_mask(4), n_heads=2).shape  # [B·H, Sq, Sk]
        torch.Size([4, 4, 4])
    """
    _expect_bool(keep, "keep")
    if keep.dim() != 4 or keep.size(1) not in (1, n_heads):
        raise ValueError(
            f"keep must have shape [B or 1, H={n_heads} or 1, Sq, Sk], "
            f"got {tuple(keep.shape)}"
        )
    ignore = ~keep
    if keep.size(0) == 1 and keep.size(1) == 1:
        return ignore[0, 0]
    b, _, sq, sk = ignore.shape
    return ignore.expand(b, n_heads, sq, sk).reshape(b * n_heads, sq, sk)


def to_additive_mask(
    keep: torch.Tensor, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """Keep-mask -> float mask *added* to the scores: 0 where attended, the most
    negative finite value of ``dtype`` where masked. Same shape.

    A finite value, not -inf, and not a literal such as -1e9 (which is -inf in
    float16). Added to scores of the same ``dtype``, it stays finite in float32 and
    bfloat16 (a fully masked row then gets a uniform softmax, not NaN). In float16 it
    does not: a score of -16 or less plus -65504 overflows to -inf, and a fully
    masked row is NaN again. So add a float16 mask to float32 scores, or, to stay in
    float16, build the mask from a moderate value such as -1e4 instead. (``masked_fill``
    with ``torch.finfo(dtype).min`` has no such problem: it replaces the score.)

    Taught in §3.4 'Three conventions for one mask' (book/ch03_masks).

    Examples::

        >>> to_additive_mask(causal_mask(2), torch.float16)[0, 0]
        tensor([[     0., -65504.],
                [     0.,      0.]], dtype=torch.float16)
    """
    _expect_bool(keep, "keep")
    if not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating point dtype, got {dtype}")
    zeros = torch.zeros(keep.shape, dtype=dtype, device=keep.device)
    return zeros.masked_fill(~keep, torch.finfo(dtype).min)


def from_additive_mask(additive: torch.Tensor) -> torch.Tensor:
    """Float mask added to the scores -> keep-mask. Same shape.

    True where the entry is above -1e4: any value at or below it (-1e4, -1e9, the
    dtype's minimum, -inf) makes exp() of the score exactly 0 in every float dtype,
    while small negative biases (such as ALiBi's) still count as attended.

    Taught in §3.4 'Three conventions for one mask' (book/ch03_masks).

    Examples::

        >>> from_additive_mask(torch.tensor([0.0, -0.5, -1e9, float("-inf")]))
        tensor([ True,  True, False, False])
        >>> keep = causal_mask(3)
        >>> torch.equal(from_additive_mask(to_additive_mask(keep)), keep)
        True
    """
    if not isinstance(additive, torch.Tensor) or not additive.is_floating_point():
        is_tensor = isinstance(additive, torch.Tensor)
        got = additive.dtype if is_tensor else type(additive).__name__
        raise TypeError(f"additive must be a floating point tensor, got {got}")
    return additive > -1e4
