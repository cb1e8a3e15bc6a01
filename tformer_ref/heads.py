"""Splitting the model dimension into heads and merging it back.

Shape letters (see the book's notation page): B batch, S sequence length,
D = d_model, H heads, Dh = D // H the size of one head.
"""

import torch


def _expect_rank(x: torch.Tensor, rank: int, layout: str, name: str = "x") -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor of shape {layout}, got {type(x).__name__}"
        )
    if x.dim() != rank:
        raise ValueError(
            f"{name} must have shape {layout} ({rank} dims), got {tuple(x.shape)}"
        )


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """[B, S, D] -> [B, H, S, Dh].

    The last axis is cut into ``n_heads`` consecutive slices of size Dh, then the
    head axis is moved in front of the sequence axis, so that each head's
    [S, Dh] matrix is one batch entry of a matmul.

    Taught in §1.5 'Splitting into heads' (book/ch01_shapes/heads).

    Examples::

        >>> x = torch.arange(8.).view(1, 2, 4)  # B=1, S=2, D=4
        >>> split_heads(x, 2).shape  # [B, H, S, Dh]
        torch.Size([1, 2, 2, 2])
        >>> split_heads(x, 2)[0, 1]  # head 1: the last two features of each token
        tensor([[2., 3.],
                [6., 7.]])
    """
    _expect_rank(x, 3, "[B, S, D]")
    batch, seq, d_model = x.shape
    if n_heads <= 0 or d_model % n_heads:
        raise ValueError(
            "d_model must be divisible by n_heads, "
            f"got d_model={d_model}, n_heads={n_heads}"
        )
    # view keeps (S, D) order in memory: [B, S, H, Dh]; transpose then swaps S and H.
    return x.view(batch, seq, n_heads, d_model // n_heads).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """[B, H, S, Dh] -> [B, S, D], the exact inverse of :func:`split_heads`.

    The transpose makes the tensor non-contiguous, so ``reshape`` (which copies
    when it must) is used instead of ``view`` (which would raise).

    Taught in §1.6 'Merging heads back' (book/ch01_shapes/heads).

    Examples::

        >>> x = torch.randn(2, 5, 8)
        >>> merge_heads(split_heads(x, 4)).shape
        torch.Size([2, 5, 8])
        >>> torch.equal(merge_heads(split_heads(x, 4)), x)  # the exact inverse
        True
    """
    _expect_rank(x, 4, "[B, H, S, Dh]")
    batch, n_heads, seq, d_head = x.shape
    return x.transpose(1, 2).reshape(batch, seq, n_heads * d_head)
