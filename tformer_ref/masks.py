"""Attention masks.

Convention of this package: a boolean mask with **True = may attend**
(the convention of ``F.scaled_dot_product_attention``), shaped so that it
broadcasts to the scores' [B, H, Sq, Sk]. ``nn.MultiheadAttention`` uses the
opposite convention (True = ignore); see chapter 3.
"""
import torch


def validate_mask(mask: torch.Tensor, batch: int, n_heads: int, q_len: int, k_len: int) -> None:
    """Raise a clear error unless ``mask`` is a bool tensor that broadcasts to [B, H, Sq, Sk].

    The rank must be exactly 4: a [B, 1, Sk] mask would broadcast its batch
    axis against the heads axis and, when B == H, silently mask the wrong rows.
    """
    expected = f"a bool mask broadcastable to [B, H, Sq, Sk] = [{batch}, {n_heads}, {q_len}, {k_len}]"
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"mask must be {expected}, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise TypeError(
            f"mask must be {expected} (True = attend), got dtype {mask.dtype}. "
            "A float mask is *added* to the scores in PyTorch, so a 1/0 mask would mask nothing; "
            "convert it with mask.bool()"
        )
    if mask.dim() != 4:
        raise ValueError(
            f"mask must be {expected} with exactly 4 dims, got shape {tuple(mask.shape)}; "
            "use a padding mask of shape [B, 1, 1, Sk] and a causal mask of shape [1, 1, Sq, Sk]"
        )
    for axis, (got, want) in enumerate(zip(mask.shape, (batch, n_heads, q_len, k_len))):
        if got not in (1, want):
            raise ValueError(f"mask must be {expected}, got shape {tuple(mask.shape)} (axis {axis}: {got})")


def padding_mask(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Token ids [B, S] -> keep-mask [B, 1, 1, S]: True where the key is a real token."""
    if tokens.dim() != 2:
        raise ValueError(f"tokens must have shape [B, S], got {tuple(tokens.shape)}")
    return (tokens != pad_id)[:, None, None, :]


def causal_mask(size: int, device=None) -> torch.Tensor:
    """[1, 1, S, S] keep-mask, lower triangular: query i may attend to keys 0..i."""
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()[None, None]
