"""Scaled dot-product attention and multi-head attention.

Shape letters: B batch, Sq query length, Sk key length, D = d_model,
H heads, Dh = D // H.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .heads import merge_heads, split_heads
from .masks import validate_mask


def masked_fill_value(dtype: torch.dtype) -> float:
    """The most negative finite value of ``dtype``: exp() of it underflows to 0.

    A literal such as -1e9 overflows to -inf in float16 (its range ends near
    -65504), and -inf turns a fully masked row into NaN.

    Taught in §3.5 'Fill values, half precision and NaN' (book/ch03_masks).

    Examples::

        >>> masked_fill_value(torch.float16)
        -65504.0
        >>> torch.tensor(-1e9, dtype=torch.float16)  # the seed's fill overflows
        tensor(-inf, dtype=torch.float16)
    """
    return torch.finfo(dtype).min


def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0, training=False):
    """softmax(q kᵀ / √Dh) v, written out step by step.

    Args:
        q: [B, H, Sq, Dh]. k: [B, H, Sk, Dh]. v: [B, H, Sk, Dh].
        mask: optional bool, True = attend, broadcastable to [B, H, Sq, Sk].
        dropout_p: dropout on the attention weights, applied only when ``training``.

    Returns:
        (out [B, H, Sq, Dh], weights [B, H, Sq, Sk]). A query whose keys are all
        masked gets all-zero weights (and output), never NaN.

    Taught in §2.1 'Attention step by step' (book/ch02_attention).

    Examples::

        >>> q = k = v = torch.randn(1, 2, 3, 4)  # B=1, H=2, S=3, Dh=4
        >>> out, weights = scaled_dot_product_attention(q, k, v)
        >>> out.shape, weights.shape
        (torch.Size([1, 2, 3, 4]), torch.Size([1, 2, 3, 3]))
        >>> torch.allclose(weights.sum(-1), torch.ones(1, 2, 3))  # each row sums to 1
        True
    """
    d_head = q.size(-1)
    # Divide by √Dh, the size of the vectors being dotted, not by √D:
    # var(q·k) = Dh for unit-variance entries.
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_head)
    if mask is not None:
        validate_mask(mask, q.size(0), q.size(1), q.size(2), k.size(2))
        scores = scores.masked_fill(~mask, masked_fill_value(scores.dtype))
    weights = scores.softmax(dim=-1)
    if mask is not None:
        # A fully masked row would otherwise spread its weight uniformly over padding.
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    if training and dropout_p > 0:
        weights = F.dropout(weights, p=dropout_p)
    return weights @ v, weights


class MultiHeadAttention(nn.Module):
    """Multi-head attention with a separate projection per role (query, key, value,
    output).

    Each projection maps the whole D-dimensional input to all H heads at once:
    ``Linear(D, D)`` is H independent ``D -> Dh`` projections side by side. (The
    seed's version applies one ``Linear(Dh, Dh)`` to each slice, shared by all
    heads: a different and much smaller model.)

    Taught in §1.8 'Per-head projections' (book/ch01_shapes/heads).

    Args:
        d_model: D. n_heads: H, must divide D. dropout: on the attention weights.
        bias: whether the projections have biases.
        fused: use ``F.scaled_dot_product_attention`` (faster, less memory) instead of
            the plain matmul-softmax-matmul path the lessons teach. Both give the same
            result.

    Examples::

        >>> mha = MultiHeadAttention(8, 2).eval()
        >>> x = torch.randn(2, 5, 8)
        >>> out, weights = mha(x, return_weights=True)  # self-attention
        >>> out.shape, weights.shape  # [B, S, D], [B, H, Sq, Sk]
        (torch.Size([2, 5, 8]), torch.Size([2, 2, 5, 5]))
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        dropout: float = 0.0,
        *,
        bias: bool = True,
        fused: bool = False,
    ):
        super().__init__()
        if n_heads <= 0 or d_model % n_heads:
            raise ValueError(
                "d_model must be divisible by n_heads, "
                f"got d_model={d_model}, n_heads={n_heads}"
            )
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        self.dropout, self.fused = dropout, fused
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def _check_inputs(self, query, key, value):
        for name, t in (("query", query), ("key", key), ("value", value)):
            if not isinstance(t, torch.Tensor):
                raise TypeError(
                    f"{name} must be a tensor of shape "
                    f"[B, S, {self.d_model}], got {type(t).__name__}"
                )
            if t.dim() != 3 or t.size(-1) != self.d_model:
                raise ValueError(
                    f"{name} must have shape [B, S, D={self.d_model}], "
                    f"got {tuple(t.shape)}"
                )
        if not query.size(0) == key.size(0) == value.size(0):
            raise ValueError(
                "query, key and value must share the batch size B, got "
                f"{query.size(0)}, {key.size(0)}, {value.size(0)}"
            )
        if key.size(1) != value.size(1):
            raise ValueError(
                "key and value must have the same length Sk, "
                f"got {key.size(1)} and {value.size(1)}"
            )

    def _project_qkv(self, query, key, value):
        if query is key and key is value:
            # Self-attention: one matmul against the stacked weights is faster than 3.
            projections = (self.q_proj, self.k_proj, self.v_proj)
            w = torch.cat([p.weight for p in projections])
            biased = self.q_proj.bias is not None
            b = torch.cat([p.bias for p in projections]) if biased else None
            return F.linear(query, w, b).chunk(3, dim=-1)
        return self.q_proj(query), self.k_proj(key), self.v_proj(value)

    def forward(
        self, query, key=None, value=None, mask=None, return_weights=False, *, kv=None
    ):
        """Attend from ``query`` to ``key``/``value`` (self-attention when they are
        omitted).

        Args:
            query: [B, Sq, D]. key: [B, Sk, D] (default: query).
            value: [B, Sk, D] (default: key).
            mask: optional bool, True = attend, broadcastable to [B, H, Sq, Sk].
            return_weights: also return the attention weights [B, H, Sq, Sk]
                (uses the plain path, since the fused kernel does not expose them).
            kv: a :class:`~tformer_ref.kv_cache.LayerKV` (self-attention only): the
                new keys and values are appended to it, and the queries attend to all
                of its keys, Sk = cached + Sq (§8.7 'The KV cache').

        Returns:
            [B, Sq, D], or ([B, Sq, D], [B, H, Sq, Sk]) when ``return_weights``.
        """
        if kv is not None and any(
            t is not None and t is not query for t in (key, value)
        ):
            raise ValueError("a KV cache is for self-attention: pass the query alone")
        key = query if key is None else key
        value = key if value is None else value
        self._check_inputs(query, key, value)
        projected = self._project_qkv(query, key, value)
        q, k, v = (split_heads(t, self.n_heads) for t in projected)
        if kv is not None:
            k, v = kv.append(k, v)
        p = self.dropout if self.training else 0.0
        if self.fused and not return_weights:
            out = self._fused(q, k, v, mask, p)
            weights = None
        else:
            out, weights = scaled_dot_product_attention(q, k, v, mask, p, self.training)
        out = self.out_proj(merge_heads(out))
        return (out, weights) if return_weights else out

    @staticmethod
    def _fused(q, k, v, mask, dropout_p):
        if mask is None:
            return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p)
        validate_mask(mask, q.size(0), q.size(1), q.size(2), k.size(2))
        # The bool mask itself, not an additive one: a finite fill added to float16
        # scores can overflow to -inf (§3.5 'Fill values, half precision and NaN').
        # Rows with no key are zeroed to match the plain path, whatever the kernel
        # gives them.
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=dropout_p
        )
        return out.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
