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
    """Multi-head attention with a separate projection per role (query, key, value, output).

    Each projection maps the whole D-dimensional input to all H heads at once:
    ``Linear(D, D)`` is H independent ``D -> Dh`` projections side by side. (The
    seed's version applies one ``Linear(Dh, Dh)`` to each slice, shared by all
    heads: a different and much smaller model.)

    Args:
        d_model: D. n_heads: H, must divide D. dropout: on the attention weights.
        bias: whether the projections have biases.
        fused: use ``F.scaled_dot_product_attention`` (faster, less memory) instead of
            the plain matmul-softmax-matmul path the lessons teach. Both give the same result.
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, bias: bool = True, fused: bool = False):
        super().__init__()
        if n_heads <= 0 or d_model % n_heads:
            raise ValueError(f"d_model must be divisible by n_heads, got d_model={d_model}, n_heads={n_heads}")
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        self.dropout, self.fused = dropout, fused
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def _check_inputs(self, query, key, value):
        for name, t in (("query", query), ("key", key), ("value", value)):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{name} must be a tensor of shape [B, S, {self.d_model}], got {type(t).__name__}")
            if t.dim() != 3 or t.size(-1) != self.d_model:
                raise ValueError(f"{name} must have shape [B, S, D={self.d_model}], got {tuple(t.shape)}")
        if not query.size(0) == key.size(0) == value.size(0):
            raise ValueError(
                f"query, key and value must share the batch size B, got {query.size(0)}, {key.size(0)}, {value.size(0)}"
            )
        if key.size(1) != value.size(1):
            raise ValueError(f"key and value must have the same length Sk, got {key.size(1)} and {value.size(1)}")

    def _project_qkv(self, query, key, value):
        if query is key and key is value:
            # Self-attention: one matmul against the stacked weights is faster than three.
            w = torch.cat([self.q_proj.weight, self.k_proj.weight, self.v_proj.weight])
            b = None if self.q_proj.bias is None else torch.cat([self.q_proj.bias, self.k_proj.bias, self.v_proj.bias])
            return F.linear(query, w, b).chunk(3, dim=-1)
        return self.q_proj(query), self.k_proj(key), self.v_proj(value)

    def forward(self, query, key=None, value=None, mask=None, return_weights=False):
        """Attend from ``query`` to ``key``/``value`` (self-attention when they are omitted).

        Args:
            query: [B, Sq, D]. key: [B, Sk, D] (default: query). value: [B, Sk, D] (default: key).
            mask: optional bool, True = attend, broadcastable to [B, H, Sq, Sk].
            return_weights: also return the attention weights [B, H, Sq, Sk]
                (uses the plain path, since the fused kernel does not expose them).

        Returns:
            [B, Sq, D], or ([B, Sq, D], [B, H, Sq, Sk]) when ``return_weights``.
        """
        key = query if key is None else key
        value = key if value is None else value
        self._check_inputs(query, key, value)
        q, k, v = (split_heads(t, self.n_heads) for t in self._project_qkv(query, key, value))
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
        # An additive mask with a finite fill keeps fully masked rows finite (no NaN);
        # they are then zeroed to match the plain path.
        bias = torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill(~mask, masked_fill_value(q.dtype))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout_p)
        return out.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
