"""Held-out answers, writer A (trial 2026-12-07): chapters 1-4 and the attention bug hunt.

Written from the exercise texts, the lessons and tformer_ref only (the checks unread).
Each answer replaces one solution cell; `mistake` states the actual bug.
"""

from harness import right, wrong

# ---------------------------------------------------------------------------
# ch01_shapes / split_heads
# ---------------------------------------------------------------------------

wrong(
    "ch01_shapes",
    "split_heads",
    "views [B, S, D] straight to [B, H, S, Dh] without the transpose: right shape, "
    "tokens cut across heads",
    '''
def split_heads(x, n_heads):
    """[B, S, D] -> [B, H, S, Dh]."""
    B, S, D = x.shape
    Dh = D // n_heads
    # want [B, H, S, Dh] so just view it like that
    return x.view(B, n_heads, S, Dh)
''',
    name="a_split_view_no_transpose",
)

wrong(
    "ch01_shapes",
    "split_heads",
    "cuts the last axis as (Dh, H) instead of (H, Dh): head h gets the interleaved "
    "features h, h+H, h+2H, ... instead of the slice h*Dh:(h+1)*Dh",
    '''
def split_heads(x, n_heads):
    """[B, S, D] -> [B, H, S, Dh]."""
    b, s, d = x.shape
    x = x.reshape(b, s, d // n_heads, n_heads)   # [B, S, Dh, H]
    return x.permute(0, 3, 1, 2)                  # [B, H, S, Dh]
''',
    name="a_split_interleaved_heads",
)

wrong(
    "ch01_shapes",
    "split_heads",
    "treats n_heads as the head size: view(B, S, -1, n_heads) gives D//H heads of "
    "H features (shape [B, Dh, S, H])",
    '''
def split_heads(x, n_heads):
    """[B, S, D] -> [B, H, S, Dh]."""
    batch, seq, _ = x.shape
    # -1 lets torch work out the other dim
    return x.view(batch, seq, -1, n_heads).transpose(1, 2)
''',
    name="a_split_count_as_size",
)

wrong(
    "ch01_shapes",
    "split_heads",
    "final permute puts Dh before S: returns [B, H, Dh, S]",
    '''
def split_heads(x, n_heads):
    """[B, S, D] -> [B, H, S, Dh]."""
    batch, seq, d_model = x.shape
    d_head = d_model // n_heads
    x = x.view(batch, seq, n_heads, d_head)
    return x.permute(0, 2, 3, 1)
''',
    name="a_split_permute_dh_s",
)

wrong(
    "ch01_shapes",
    "split_heads",
    "resize_ on the input changes the caller's x in place (its shape becomes "
    "[B, S, H, Dh]) and breaks autograd on a leaf",
    '''
def split_heads(x, n_heads):
    """[B, S, D] -> [B, H, S, Dh]."""
    B, S, D = x.shape
    x.resize_(B, S, n_heads, D // n_heads)
    return x.transpose(1, 2)
''',
    name="a_split_resize_inplace",
)

right(
    "ch01_shapes",
    "split_heads",
    '''
def split_heads(x, n_heads):
    """[B, S, D] -> [B, H, S, Dh]."""
    # chunk the features into n_heads consecutive pieces, stack them on a new head axis
    pieces = torch.chunk(x, n_heads, dim=-1)   # n_heads tensors [B, S, Dh]
    return torch.stack(pieces, dim=1)          # [B, H, S, Dh]
''',
    name="a_split_right_chunk_stack",
)

right(
    "ch01_shapes",
    "split_heads",
    '''
def split_heads(x, n_heads):
    """[B, S, D] -> [B, H, S, Dh]."""
    return x.unflatten(-1, (n_heads, -1)).permute(0, 2, 1, 3)
''',
    name="a_split_right_unflatten",
)

# ---------------------------------------------------------------------------
# ch01_shapes / merge_heads
# ---------------------------------------------------------------------------

wrong(
    "ch01_shapes",
    "merge_heads",
    "reshapes [B, H, S, Dh] straight to [B, S, D] without transposing back: glues "
    "rows of different tokens of one head",
    '''
def merge_heads(x):
    """[B, H, S, Dh] -> [B, S, D]."""
    B, H, S, Dh = x.shape
    return x.reshape(B, S, H * Dh)
''',
    name="a_merge_no_transpose",
)

wrong(
    "ch01_shapes",
    "merge_heads",
    "view on the transposed (non-contiguous) tensor: raises RuntimeError",
    '''
def merge_heads(x):
    """[B, H, S, Dh] -> [B, S, D]."""
    batch, n_heads, seq, d_head = x.shape
    x = x.transpose(1, 2)
    return x.view(batch, seq, n_heads * d_head)
''',
    name="a_merge_view_noncontiguous",
)

wrong(
    "ch01_shapes",
    "merge_heads",
    "permutes to [B, S, Dh, H] before flattening: features come out interleaved "
    "(feature j*H+h) instead of head after head",
    '''
def merge_heads(x):
    """[B, H, S, Dh] -> [B, S, D]."""
    b, h, s, dh = x.shape
    return x.permute(0, 2, 3, 1).reshape(b, s, h * dh)
''',
    name="a_merge_interleaved",
)

wrong(
    "ch01_shapes",
    "merge_heads",
    "unpacks the shape as [B, S, H, Dh] (the split's intermediate layout): "
    "returns [B, H, S*Dh] built from the wrong axes",
    '''
def merge_heads(x):
    """[B, H, S, Dh] -> [B, S, D]."""
    batch, seq, n_heads, d_head = x.shape
    out = x.transpose(1, 2).contiguous()
    return out.reshape(batch, seq, n_heads * d_head)
''',
    name="a_merge_misread_shape",
)

wrong(
    "ch01_shapes",
    "merge_heads",
    "hard-codes the number of heads to 8 (the paper's H): wrong shape or error "
    "for any other H",
    '''
def merge_heads(x):
    """[B, H, S, Dh] -> [B, S, D]."""
    batch, _, seq, d_head = x.shape
    return x.transpose(1, 2).reshape(batch, seq, 8 * d_head)
''',
    name="a_merge_hardcoded_heads",
)

right(
    "ch01_shapes",
    "merge_heads",
    '''
def merge_heads(x):
    """[B, H, S, Dh] -> [B, S, D]."""
    # put the heads side by side again along the last axis
    return torch.cat(x.unbind(dim=1), dim=-1)
''',
    name="a_merge_right_cat_unbind",
)

right(
    "ch01_shapes",
    "merge_heads",
    '''
def merge_heads(x):
    """[B, H, S, Dh] -> [B, S, D]."""
    return x.permute(0, 2, 1, 3).flatten(start_dim=2)
''',
    name="a_merge_right_permute_flatten",
)

# ---------------------------------------------------------------------------
# ch01_shapes / multi_head_attention
# ---------------------------------------------------------------------------

wrong(
    "ch01_shapes",
    "multi_head_attention",
    "scores divided by sqrt(d_model) instead of sqrt(d_head)",
    '''
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.d_model = d_model
        self.n_heads = n_heads
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_o = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        """query [B, Sq, D], key and value [B, Sk, D] -> [B, Sq, D]."""
        q = split_heads(self.w_q(query), self.n_heads)
        k = split_heads(self.w_k(key), self.n_heads)
        v = split_heads(self.w_v(value), self.n_heads)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_model)
        attn = torch.softmax(scores, dim=-1)
        out = merge_heads(attn @ v)
        return self.w_o(out)
''',
    name="a_mha_scale_dmodel",
)

wrong(
    "ch01_shapes",
    "multi_head_attention",
    "softmax over the query axis (dim=-2) instead of the keys",
    '''
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.q_lin = nn.Linear(d_model, d_model)
        self.k_lin = nn.Linear(d_model, d_model)
        self.v_lin = nn.Linear(d_model, d_model)
        self.o_lin = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        """query [B, Sq, D], key and value [B, Sk, D] -> [B, Sq, D]."""
        Q = split_heads(self.q_lin(query), self.h)   # B H Sq Dh
        K = split_heads(self.k_lin(key), self.h)     # B H Sk Dh
        V = split_heads(self.v_lin(value), self.h)   # B H Sk Dh
        dk = Q.shape[-1]
        scores = torch.matmul(Q, K.transpose(2, 3)) / math.sqrt(dk)  # B H Sq Sk
        p = scores.softmax(dim=-2)
        return self.o_lin(merge_heads(torch.matmul(p, V)))
''',
    name="a_mha_softmax_queries",
)

wrong(
    "ch01_shapes",
    "multi_head_attention",
    "the key is projected with the query's Linear (k_proj created but never used)",
    '''
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        """query [B, Sq, D], key and value [B, Sk, D] -> [B, Sq, D]."""
        q = split_heads(self.q_proj(query), self.n_heads)
        k = split_heads(self.q_proj(key), self.n_heads)
        v = split_heads(self.v_proj(value), self.n_heads)
        d_head = q.size(-1)
        w = (q @ k.transpose(-2, -1) / d_head ** 0.5).softmax(-1)
        return self.out_proj(merge_heads(w @ v))
''',
    name="a_mha_key_uses_q_proj",
)

wrong(
    "ch01_shapes",
    "multi_head_attention",
    "output projection created but never applied: returns the merged heads",
    '''
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        """query [B, Sq, D], key and value [B, Sk, D] -> [B, Sq, D]."""
        q = split_heads(self.q_proj(query), self.n_heads)
        k = split_heads(self.k_proj(key), self.n_heads)
        v = split_heads(self.v_proj(value), self.n_heads)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        weights = scores.softmax(dim=-1)
        out = merge_heads(weights @ v)
        return out
''',
    name="a_mha_no_out_proj",
)

wrong(
    "ch01_shapes",
    "multi_head_attention",
    "passes the head size d_head to split_heads, which takes the head count: splits "
    "into Dh heads of H features",
    '''
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        """query [B, Sq, D], key and value [B, Sk, D] -> [B, Sq, D]."""
        q = split_heads(self.q_proj(query), self.d_head)
        k = split_heads(self.k_proj(key), self.d_head)
        v = split_heads(self.v_proj(value), self.d_head)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
        weights = scores.softmax(dim=-1)
        return self.out_proj(merge_heads(weights @ v))
''',
    name="a_mha_split_by_dhead",
)

wrong(
    "ch01_shapes",
    "multi_head_attention",
    "merges the heads with a plain reshape (no transpose back): mixes tokens "
    "across heads",
    '''
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.d_model, self.n_heads = d_model, n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        """query [B, Sq, D], key and value [B, Sk, D] -> [B, Sq, D]."""
        B, Sq, _ = query.shape
        q = split_heads(self.q_proj(query), self.n_heads)
        k = split_heads(self.k_proj(key), self.n_heads)
        v = split_heads(self.v_proj(value), self.n_heads)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.softmax(dim=-1)
        y = att @ v                               # [B, H, Sq, Dh]
        y = y.reshape(B, Sq, self.d_model)        # back to [B, Sq, D]
        return self.out_proj(y)
''',
    name="a_mha_merge_reshape_only",
)

wrong(
    "ch01_shapes",
    "multi_head_attention",
    "self-attention assumed: key and value are projected from `query`, the `key` "
    "and `value` arguments are ignored",
    '''
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        """query [B, Sq, D], key and value [B, Sk, D] -> [B, Sq, D]."""
        x = query
        q = split_heads(self.q_proj(x), self.n_heads)
        k = split_heads(self.k_proj(x), self.n_heads)
        v = split_heads(self.v_proj(x), self.n_heads)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        return self.out_proj(merge_heads(scores.softmax(-1) @ v))
''',
    name="a_mha_ignores_key_value",
)

wrong(
    "ch01_shapes",
    "multi_head_attention",
    "dropout on the attention weights with F.dropout's default training=True: "
    "random in eval mode too",
    '''
import torch.nn.functional as F


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.p_drop = 0.1
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        """query [B, Sq, D], key and value [B, Sk, D] -> [B, Sq, D]."""
        q = split_heads(self.q_proj(query), self.n_heads)
        k = split_heads(self.k_proj(key), self.n_heads)
        v = split_heads(self.v_proj(value), self.n_heads)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        weights = F.dropout(F.softmax(scores, dim=-1), p=self.p_drop)
        return self.out_proj(merge_heads(weights @ v))
''',
    name="a_mha_dropout_always_on",
)

wrong(
    "ch01_shapes",
    "multi_head_attention",
    "builds a causal mask in although mask=None means every query sees every key",
    '''
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        """query [B, Sq, D], key and value [B, Sk, D] -> [B, Sq, D]."""
        q = split_heads(self.q_proj(query), self.n_heads)
        k = split_heads(self.k_proj(key), self.n_heads)
        v = split_heads(self.v_proj(value), self.n_heads)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is None:
            # default: don't look ahead
            Sq, Sk = scores.shape[-2:]
            mask = torch.ones(Sq, Sk, dtype=torch.bool, device=scores.device).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
        weights = scores.softmax(dim=-1)
        return self.out_proj(merge_heads(weights @ v))
''',
    name="a_mha_default_causal_mask",
)

wrong(
    "ch01_shapes",
    "multi_head_attention",
    "softmax forced to float32 (dtype=torch.float32): weights @ v raises for "
    "float64 inputs (dtype mismatch)",
    '''
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        """query [B, Sq, D], key and value [B, Sk, D] -> [B, Sq, D]."""
        q = split_heads(self.q_proj(query), self.n_heads)
        k = split_heads(self.k_proj(key), self.n_heads)
        v = split_heads(self.v_proj(value), self.n_heads)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        # softmax in fp32 for stability
        weights = torch.softmax(scores, dim=-1, dtype=torch.float32)
        return self.out_proj(merge_heads(weights @ v))
''',
    name="a_mha_softmax_fp32",
)

wrong(
    "ch01_shapes",
    "multi_head_attention",
    "returns the pair (output, weights) as in exercise 2 instead of one tensor",
    '''
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        """query [B, Sq, D], key and value [B, Sk, D] -> [B, Sq, D]."""
        q = split_heads(self.q_proj(query), self.n_heads)
        k = split_heads(self.k_proj(key), self.n_heads)
        v = split_heads(self.v_proj(value), self.n_heads)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        weights = scores.softmax(dim=-1)
        return self.out_proj(merge_heads(weights @ v)), weights
''',
    name="a_mha_returns_pair",
)

wrong(
    "ch01_shapes",
    "multi_head_attention",
    "transposes the head and sequence axes of k (transpose(1, 2)) instead of the "
    "last two: raises on the matmul (or mixes heads when sizes happen to fit)",
    '''
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        """query [B, Sq, D], key and value [B, Sk, D] -> [B, Sq, D]."""
        q = split_heads(self.q_proj(query), self.n_heads)
        k = split_heads(self.k_proj(key), self.n_heads)
        v = split_heads(self.v_proj(value), self.n_heads)
        scores = q @ k.transpose(1, 2) / math.sqrt(q.size(-1))
        weights = scores.softmax(dim=-1)
        return self.out_proj(merge_heads(weights @ v))
''',
    name="a_mha_transpose_wrong_axes",
)

right(
    "ch01_shapes",
    "multi_head_attention",
    '''
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        assert d_model % n_heads == 0
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        # my own weights, used as x @ W (+ b)
        self.W_q = nn.Parameter(torch.randn(d_model, d_model) / math.sqrt(d_model))
        self.W_k = nn.Parameter(torch.randn(d_model, d_model) / math.sqrt(d_model))
        self.W_v = nn.Parameter(torch.randn(d_model, d_model) / math.sqrt(d_model))
        self.W_o = nn.Parameter(torch.randn(d_model, d_model) / math.sqrt(d_model))

    def forward(self, query, key, value, mask=None):
        """query [B, Sq, D], key and value [B, Sk, D] -> [B, Sq, D]."""
        q = split_heads(query @ self.W_q, self.n_heads)
        k = split_heads(key @ self.W_k, self.n_heads)
        v = split_heads(value @ self.W_v, self.n_heads)
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(self.d_head)
        weights = torch.softmax(scores, dim=-1)
        out = torch.einsum("bhqk,bhkd->bhqd", weights, v)
        return merge_heads(out) @ self.W_o
''',
    name="a_mha_right_params_einsum",
)

right(
    "ch01_shapes",
    "multi_head_attention",
    '''
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.d_model = d_model
        self.n_heads = n_heads
        self.proj_out = nn.Linear(d_model, d_model)
        # q, k and v weights stacked [q; k; v] in one layer
        self.qkv = nn.Linear(d_model, 3 * d_model)

    def forward(self, query, key, value, mask=None):
        """query [B, Sq, D], key and value [B, Sk, D] -> [B, Sq, D]."""
        D = self.d_model
        wq, wk, wv = self.qkv.weight.split(D, dim=0)
        bq, bk, bv = self.qkv.bias.split(D, dim=0)
        q = split_heads(torch.nn.functional.linear(query, wq, bq), self.n_heads)
        k = split_heads(torch.nn.functional.linear(key, wk, bk), self.n_heads)
        v = split_heads(torch.nn.functional.linear(value, wv, bv), self.n_heads)
        # scale q before the product instead of the scores after it
        q = q * q.size(-1) ** -0.5
        scores = torch.matmul(q, k.transpose(-1, -2))
        scores = scores - scores.amax(dim=-1, keepdim=True)
        e = scores.exp()
        weights = e / e.sum(dim=-1, keepdim=True)
        return self.proj_out(merge_heads(torch.matmul(weights, v)))
''',
    name="a_mha_right_fused_qkv_manual_softmax",
)

# ---------------------------------------------------------------------------
# ch02_attention / attention
# ---------------------------------------------------------------------------

wrong(
    "ch02_attention",
    "attention",
    "scales by sqrt of the query length (q.size(-2)) instead of the head size",
    '''
def attention(q, k, v):
    """q [B, H, Sq, Dh], k and v [B, H, Sk, Dh]
    -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])."""
    d_k = q.size(-2)
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d_k)
    weights = torch.softmax(scores, dim=-1)
    out = torch.matmul(weights, v)
    return out, weights
''',
    name="a_att_scale_seqlen",
)

wrong(
    "ch02_attention",
    "attention",
    "softmax over dim=2 (the query axis) instead of the last axis",
    '''
def attention(q, k, v):
    """q [B, H, Sq, Dh], k and v [B, H, Sk, Dh]
    -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])."""
    scores = q @ k.transpose(2, 3) / math.sqrt(q.shape[3])
    weights = scores.softmax(dim=2)
    return weights @ v, weights
''',
    name="a_att_softmax_dim2",
)

wrong(
    "ch02_attention",
    "attention",
    "divides the scores by d_k instead of sqrt(d_k)",
    '''
def attention(q, k, v):
    """q [B, H, Sq, Dh], k and v [B, H, Sk, Dh]
    -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])."""
    d_k = q.size(-1)
    scores = q @ k.transpose(-2, -1) / d_k
    weights = scores.softmax(-1)
    return weights @ v, weights
''',
    name="a_att_scale_dk_not_sqrt",
)

wrong(
    "ch02_attention",
    "attention",
    "hand-written softmax without subtracting the row maximum: exp overflows to inf "
    "on large scores and gives NaN",
    '''
def attention(q, k, v):
    """q [B, H, Sq, Dh], k and v [B, H, Sk, Dh]
    -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    exp_scores = torch.exp(scores)
    weights = exp_scores / exp_scores.sum(dim=-1, keepdim=True)
    out = weights @ v
    return out, weights
''',
    name="a_att_softmax_no_max",
)

wrong(
    "ch02_attention",
    "attention",
    "returns (weights, out) in the wrong order",
    '''
def attention(q, k, v):
    """q [B, H, Sq, Dh], k and v [B, H, Sk, Dh]
    -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    attn = scores.softmax(dim=-1)
    out = attn @ v
    return attn, out
''',
    name="a_att_return_order",
)

wrong(
    "ch02_attention",
    "attention",
    "scales q in place (q /= ...), modifying the caller's tensor",
    '''
def attention(q, k, v):
    """q [B, H, Sq, Dh], k and v [B, H, Sk, Dh]
    -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])."""
    # cheaper to scale q (Sq x Dh) than the scores (Sq x Sk)
    q /= math.sqrt(q.size(-1))
    weights = (q @ k.transpose(-2, -1)).softmax(dim=-1)
    return weights @ v, weights
''',
    name="a_att_inplace_scale_q",
)

wrong(
    "ch02_attention",
    "attention",
    "upcasts to float32 for the softmax and never casts back: float64 inputs come "
    "out float32 (and lose precision)",
    '''
def attention(q, k, v):
    """q [B, H, Sq, Dh], k and v [B, H, Sk, Dh]
    -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])."""
    scores = (q @ k.transpose(-2, -1)).float() / math.sqrt(q.size(-1))
    weights = torch.softmax(scores, dim=-1)
    out = weights @ v.float()
    return out, weights
''',
    name="a_att_float32_upcast",
)

wrong(
    "ch02_attention",
    "attention",
    "uses k.T, which reverses all four axes on a 4-D tensor: the matmul raises "
    "(or mixes batch and heads when sizes fit)",
    '''
def attention(q, k, v):
    """q [B, H, Sq, Dh], k and v [B, H, Sk, Dh]
    -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])."""
    dk = q.shape[-1]
    scores = q @ k.T / math.sqrt(dk)
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights
''',
    name="a_att_k_dot_T",
)

wrong(
    "ch02_attention",
    "attention",
    "transposes the weights before multiplying by v (weights^T v): output mixes "
    "queries instead of keys, and the shape is wrong when Sq != Sk",
    '''
def attention(q, k, v):
    """q [B, H, Sq, Dh], k and v [B, H, Sk, Dh]
    -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])."""
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(q.size(-1))
    weights = scores.softmax(dim=-1)
    out = torch.einsum("bhqk,bhqd->bhkd", weights, v)
    return out, weights
''',
    name="a_att_einsum_wrong_output",
)

right(
    "ch02_attention",
    "attention",
    '''
def attention(q, k, v):
    """q [B, H, Sq, Dh], k and v [B, H, Sk, Dh]
    -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])."""
    d_k = q.shape[-1]
    scores = torch.einsum("bhid,bhjd->bhij", q, k) / d_k ** 0.5
    # stable softmax by hand
    m = scores.max(dim=-1, keepdim=True).values
    e = torch.exp(scores - m)
    weights = e / e.sum(dim=-1, keepdim=True)
    out = torch.einsum("bhij,bhjd->bhid", weights, v)
    return out, weights
''',
    name="a_att_right_einsum_manual_softmax",
)

right(
    "ch02_attention",
    "attention",
    '''
def attention(q, k, v):
    """q [B, H, Sq, Dh], k and v [B, H, Sk, Dh]
    -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])."""
    # split the 1/sqrt(d_k) between q and k: d_k^(-1/4) each
    s = q.size(-1) ** -0.25
    scores = torch.matmul(q * s, (k * s).mT)
    weights = torch.nn.functional.softmax(scores, dim=-1)
    return torch.matmul(weights, v), weights
''',
    name="a_att_right_split_scale",
)

# ---------------------------------------------------------------------------
# ch02_attention / attention_entropy
# ---------------------------------------------------------------------------

wrong(
    "ch02_attention",
    "attention_entropy",
    "w * log(w) with no care for zeros: 0 * log 0 = 0 * -inf = NaN",
    '''
def attention_entropy(weights):
    """weights [..., Sq, Sk] -> entropy per query [..., Sq], in nats."""
    return -(weights * torch.log(weights)).sum(dim=-1)
''',
    name="a_ent_nan_on_zeros",
)

wrong(
    "ch02_attention",
    "attention_entropy",
    "epsilon 1e-6 inside the log biases every row (allowed: <= 1e-12)",
    '''
def attention_entropy(weights):
    """weights [..., Sq, Sk] -> entropy per query [..., Sq], in nats."""
    eps = 1e-6  # avoid log(0)
    return -(weights * torch.log(weights + eps)).sum(-1)
''',
    name="a_ent_eps_1e-6",
)

wrong(
    "ch02_attention",
    "attention_entropy",
    "sums over the query axis (dim=-2) instead of the keys",
    '''
def attention_entropy(weights):
    """weights [..., Sq, Sk] -> entropy per query [..., Sq], in nats."""
    return -torch.xlogy(weights, weights).sum(dim=-2)
''',
    name="a_ent_sum_dim_minus2",
)

wrong(
    "ch02_attention",
    "attention_entropy",
    "keepdim=True leaves a trailing axis of size 1: shape [..., Sq, 1]",
    '''
def attention_entropy(weights):
    """weights [..., Sq, Sk] -> entropy per query [..., Sq], in nats."""
    plogp = torch.special.xlogy(weights, weights)
    return -plogp.sum(dim=-1, keepdim=True)
''',
    name="a_ent_keepdim",
)

wrong(
    "ch02_attention",
    "attention_entropy",
    "entropy in bits (log2) instead of nats",
    '''
def attention_entropy(weights):
    """weights [..., Sq, Sk] -> entropy per query [..., Sq], in nats."""
    logs = torch.where(weights > 0, torch.log2(weights), torch.zeros_like(weights))
    return -(weights * logs).sum(-1)
''',
    name="a_ent_bits",
)

wrong(
    "ch02_attention",
    "attention_entropy",
    "missing minus sign: returns sum w ln w (negative entropy)",
    '''
def attention_entropy(weights):
    """weights [..., Sq, Sk] -> entropy per query [..., Sq], in nats."""
    # xlogy handles 0*log(0) = 0
    return torch.xlogy(weights, weights).sum(dim=-1)
''',
    name="a_ent_no_minus",
)

wrong(
    "ch02_attention",
    "attention_entropy",
    "replaces the zero weights by 1 in place to dodge log 0: modifies the caller's "
    "weights",
    '''
def attention_entropy(weights):
    """weights [..., Sq, Sk] -> entropy per query [..., Sq], in nats."""
    weights[weights == 0] = 1.0   # log(1) = 0 so these add nothing
    return -(weights * weights.log()).sum(dim=-1)
''',
    name="a_ent_inplace_zero_fix",
)

wrong(
    "ch02_attention",
    "attention_entropy",
    "mean over the keys instead of the sum (divides the entropy by Sk)",
    '''
def attention_entropy(weights):
    """weights [..., Sq, Sk] -> entropy per query [..., Sq], in nats."""
    return torch.special.entr(weights).mean(dim=-1)
''',
    name="a_ent_mean",
)

right(
    "ch02_attention",
    "attention_entropy",
    '''
def attention_entropy(weights):
    """weights [..., Sq, Sk] -> entropy per query [..., Sq], in nats."""
    # entr(x) = -x ln x, with entr(0) = 0
    return torch.special.entr(weights).sum(dim=-1)
''',
    name="a_ent_right_entr",
)

right(
    "ch02_attention",
    "attention_entropy",
    '''
def attention_entropy(weights):
    """weights [..., Sq, Sk] -> entropy per query [..., Sq], in nats."""
    safe = torch.where(weights > 0, weights, torch.ones_like(weights))
    return -(weights * torch.log(safe)).sum(-1)
''',
    name="a_ent_right_where",
)

# ---------------------------------------------------------------------------
# ch03_masks / causal_mask
# ---------------------------------------------------------------------------

wrong(
    "ch03_masks",
    "causal_mask",
    "triu(diagonal=1): True on the future, the True = masked convention",
    '''
def causal_mask(size):
    """-> bool [1, 1, S, S], True where key j <= query i."""
    mask = torch.triu(torch.ones(size, size, device=device), diagonal=1).bool()
    return mask.unsqueeze(0).unsqueeze(0)
''',
    name="a_causal_triu_future",
)

wrong(
    "ch03_masks",
    "causal_mask",
    "tril(diagonal=-1): a query may not attend to itself (first row all False)",
    '''
def causal_mask(size):
    """-> bool [1, 1, S, S], True where key j <= query i."""
    m = torch.tril(torch.ones(size, size, dtype=torch.bool, device=device), diagonal=-1)
    return m[None, None, :, :]
''',
    name="a_causal_strict_past",
)

wrong(
    "ch03_masks",
    "causal_mask",
    "float 1/0 mask instead of bool",
    '''
def causal_mask(size):
    """-> bool [1, 1, S, S], True where key j <= query i."""
    return torch.tril(torch.ones((size, size), device=device)).view(1, 1, size, size)
''',
    name="a_causal_float",
)

wrong(
    "ch03_masks",
    "causal_mask",
    "unsqueeze(1).unsqueeze(2) copied from the padding mask: shape [S, 1, 1, S]",
    '''
def causal_mask(size):
    """-> bool [1, 1, S, S], True where key j <= query i."""
    mask = torch.tril(torch.ones(size, size, device=device)) == 1
    return mask.unsqueeze(1).unsqueeze(2)
''',
    name="a_causal_wrong_unsqueeze",
)

wrong(
    "ch03_masks",
    "causal_mask",
    "tril(diagonal=1): each query also sees the next token",
    '''
def causal_mask(size):
    """-> bool [1, 1, S, S], True where key j <= query i."""
    ones = torch.ones(1, 1, size, size, dtype=torch.bool, device=device)
    return torch.tril(ones, diagonal=1)
''',
    name="a_causal_one_ahead",
)

wrong(
    "ch03_masks",
    "causal_mask",
    "compares tril == 0: True on the future positions (inverted)",
    '''
def causal_mask(size):
    """-> bool [1, 1, S, S], True where key j <= query i."""
    lower = torch.tril(torch.ones(size, size, device=device))
    return (lower == 0)[None, None]
''',
    name="a_causal_eq_zero",
)

right(
    "ch03_masks",
    "causal_mask",
    '''
def causal_mask(size):
    """-> bool [1, 1, S, S], True where key j <= query i."""
    i = torch.arange(size, device=device).view(size, 1)   # query index
    j = torch.arange(size, device=device).view(1, size)   # key index
    return (j <= i).view(1, 1, size, size)
''',
    name="a_causal_right_arange",
)

right(
    "ch03_masks",
    "causal_mask",
    '''
def causal_mask(size):
    """-> bool [1, 1, S, S], True where key j <= query i."""
    future = torch.ones(size, size, dtype=torch.bool, device=device).triu(1)
    return ~future.unsqueeze(0)   # [1, S, S] broadcasts the same
''',
    name="a_causal_right_not_triu",
)

# ---------------------------------------------------------------------------
# ch03_masks / padding_mask
# ---------------------------------------------------------------------------

wrong(
    "ch03_masks",
    "padding_mask",
    "hard-codes pad id 0 (tokens != 0), ignoring pad_id",
    '''
def padding_mask(tokens, pad_id):
    """tokens [B, S] -> bool [B, 1, 1, S], True on real tokens."""
    return (tokens != 0).unsqueeze(1).unsqueeze(2)
''',
    name="a_pad_hardcoded_zero",
)

wrong(
    "ch03_masks",
    "padding_mask",
    "tokens == pad_id: True on the padding (inverted convention)",
    '''
def padding_mask(tokens, pad_id):
    """tokens [B, S] -> bool [B, 1, 1, S], True on real tokens."""
    mask = tokens == pad_id
    return mask[:, None, None, :]
''',
    name="a_pad_inverted",
)

wrong(
    "ch03_masks",
    "padding_mask",
    "only one unsqueeze: shape [B, 1, S], which broadcasts against the batch axis "
    "of the scores wrongly",
    '''
def padding_mask(tokens, pad_id):
    """tokens [B, S] -> bool [B, 1, 1, S], True on real tokens."""
    return (tokens != pad_id).unsqueeze(1)
''',
    name="a_pad_one_axis_short",
)

wrong(
    "ch03_masks",
    "padding_mask",
    "puts the sequence on the query axis: [B, 1, S, 1] masks padded queries "
    "instead of padded keys",
    '''
def padding_mask(tokens, pad_id):
    """tokens [B, S] -> bool [B, 1, 1, S], True on real tokens."""
    B, S = tokens.shape
    return (tokens != pad_id).view(B, 1, S, 1)
''',
    name="a_pad_query_axis",
)

wrong(
    "ch03_masks",
    "padding_mask",
    "assumes right padding: builds the mask from each sequence's length, so "
    "left-padded batches get the wrong positions",
    '''
def padding_mask(tokens, pad_id):
    """tokens [B, S] -> bool [B, 1, 1, S], True on real tokens."""
    lengths = (tokens != pad_id).sum(dim=1)                     # real tokens per row
    positions = torch.arange(tokens.size(1), device=tokens.device)
    mask = positions[None, :] < lengths[:, None]                # [B, S]
    return mask[:, None, None, :]
''',
    name="a_pad_length_based",
)

wrong(
    "ch03_masks",
    "padding_mask",
    "tokens.ne_(pad_id) is in place: overwrites the caller's tokens with 0/1 and "
    "returns an integer (not bool) tensor",
    '''
def padding_mask(tokens, pad_id):
    """tokens [B, S] -> bool [B, 1, 1, S], True on real tokens."""
    return tokens.ne_(pad_id).unsqueeze(1).unsqueeze(1)
''',
    name="a_pad_ne_inplace",
)

right(
    "ch03_masks",
    "padding_mask",
    '''
def padding_mask(tokens, pad_id):
    """tokens [B, S] -> bool [B, 1, 1, S], True on real tokens."""
    B, S = tokens.shape
    is_pad = tokens.eq(pad_id)
    return torch.logical_not(is_pad).reshape(B, 1, 1, S)
''',
    name="a_pad_right_logical_not",
)

# ---------------------------------------------------------------------------
# ch03_masks / masked_attention
# ---------------------------------------------------------------------------

wrong(
    "ch03_masks",
    "masked_attention",
    "fill value -1e9 (the seed's): does not fit float16 (overflow / -inf, NaN for "
    "fully masked rows)",
    '''
def masked_attention(q, k, v, mask):
    """q [B, H, Sq, Dh], k and v [B, H, Sk, Dh], mask bool broadcastable to
    [B, H, Sq, Sk] (True = attend)
    -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    scores = scores.masked_fill(mask == 0, -1e9)
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights
''',
    name="a_matt_fill_1e9",
)

wrong(
    "ch03_masks",
    "masked_attention",
    "fills with -inf and never handles fully masked rows: softmax of all -inf "
    "gives NaN",
    '''
def masked_attention(q, k, v, mask):
    """q [B, H, Sq, Dh], k and v [B, H, Sk, Dh], mask bool broadcastable to
    [B, H, Sq, Sk] (True = attend)
    -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])."""
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1)
    return torch.matmul(weights, v), weights
''',
    name="a_matt_fill_neginf_nan",
)

wrong(
    "ch03_masks",
    "masked_attention",
    "masks where the mask is True (reads True as masked, nn.MultiheadAttention's "
    "convention)",
    '''
def masked_attention(q, k, v, mask):
    """q [B, H, Sq, Dh], k and v [B, H, Sk, Dh], mask bool broadcastable to
    [B, H, Sq, Sk] (True = attend)
    -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    neg = torch.finfo(scores.dtype).min
    scores = scores.masked_fill(mask, neg)
    weights = scores.softmax(dim=-1)
    weights = weights.masked_fill(mask.all(dim=-1, keepdim=True), 0.0)
    return weights @ v, weights
''',
    name="a_matt_inverted_convention",
)

wrong(
    "ch03_masks",
    "masked_attention",
    "applies the mask after the softmax (weights * mask) without renormalising: "
    "rows no longer sum to 1",
    '''
def masked_attention(q, k, v, mask):
    """q [B, H, Sq, Dh], k and v [B, H, Sk, Dh], mask bool broadcastable to
    [B, H, Sq, Sk] (True = attend)
    -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    weights = scores.softmax(dim=-1)
    weights = weights * mask          # zero out the keys we can't see
    return weights @ v, weights
''',
    name="a_matt_mask_after_softmax",
)

wrong(
    "ch03_masks",
    "masked_attention",
    "fills the masked scores with 0 instead of a large negative number: masked "
    "keys still get weight",
    '''
def masked_attention(q, k, v, mask):
    """q [B, H, Sq, Dh], k and v [B, H, Sk, Dh], mask bool broadcastable to
    [B, H, Sq, Sk] (True = attend)
    -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    scores = scores.masked_fill(~mask, 0)
    weights = torch.softmax(scores, -1)
    return weights @ v, weights
''',
    name="a_matt_fill_zero",
)

wrong(
    "ch03_masks",
    "masked_attention",
    "computes in float32 for stability and returns float32 for float16/bfloat16 "
    "inputs (dtype of q not kept)",
    '''
def masked_attention(q, k, v, mask):
    """q [B, H, Sq, Dh], k and v [B, H, Sk, Dh], mask bool broadcastable to
    [B, H, Sq, Sk] (True = attend)
    -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])."""
    # do the maths in fp32 so half precision can't overflow
    qf, kf, vf = q.float(), k.float(), v.float()
    scores = qf @ kf.transpose(-2, -1) / math.sqrt(q.size(-1))
    scores = scores.masked_fill(~mask, -1e9)
    weights = scores.softmax(dim=-1)
    weights = weights.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return weights @ vf, weights
''',
    name="a_matt_returns_float32",
)

wrong(
    "ch03_masks",
    "masked_attention",
    "zeroes the rows where not ALL keys are allowed (mask.all instead of mask.any): "
    "every partly masked query gets zero weights",
    '''
def masked_attention(q, k, v, mask):
    """q [B, H, Sq, Dh], k and v [B, H, Sk, Dh], mask bool broadcastable to
    [B, H, Sq, Sk] (True = attend)
    -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = scores.softmax(dim=-1)
    # rows with nothing to attend to -> 0
    weights = weights.masked_fill(~mask.all(dim=-1, keepdim=True), 0.0)
    return weights @ v, weights
''',
    name="a_matt_all_instead_of_any",
)

wrong(
    "ch03_masks",
    "masked_attention",
    "forgets the 1/sqrt(Dh) scaling of the scores",
    '''
def masked_attention(q, k, v, mask):
    """q [B, H, Sq, Dh], k and v [B, H, Sk, Dh], mask bool broadcastable to
    [B, H, Sq, Sk] (True = attend)
    -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])."""
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k)
    scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = scores.softmax(-1)
    weights = weights.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return torch.einsum("bhqk,bhkd->bhqd", weights, v), weights
''',
    name="a_matt_no_scale",
)

wrong(
    "ch03_masks",
    "masked_attention",
    "inverts the mask in place (mask.logical_not_()), changing the caller's mask",
    '''
def masked_attention(q, k, v, mask):
    """q [B, H, Sq, Dh], k and v [B, H, Sk, Dh], mask bool broadcastable to
    [B, H, Sq, Sk] (True = attend)
    -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])."""
    blocked = mask.logical_not_()
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    scores = scores.masked_fill(blocked, torch.finfo(scores.dtype).min)
    weights = scores.softmax(dim=-1)
    weights = weights.masked_fill(blocked.all(dim=-1, keepdim=True), 0.0)
    return weights @ v, weights
''',
    name="a_matt_mask_inplace_not",
)

wrong(
    "ch03_masks",
    "masked_attention",
    "fill value from float32's finfo whatever the dtype: -3.4e38 overflows "
    "float16 (raises or -inf/NaN)",
    '''
def masked_attention(q, k, v, mask):
    """q [B, H, Sq, Dh], k and v [B, H, Sk, Dh], mask bool broadcastable to
    [B, H, Sq, Sk] (True = attend)
    -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])."""
    NEG = torch.finfo(torch.float32).min
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    scores = scores.masked_fill(mask.logical_not(), NEG)
    weights = torch.softmax(scores, dim=-1)
    weights = weights.masked_fill(mask.logical_not().all(-1, keepdim=True), 0.0)
    return weights @ v, weights
''',
    name="a_matt_fp32_finfo",
)

right(
    "ch03_masks",
    "masked_attention",
    '''
def masked_attention(q, k, v, mask):
    """q [B, H, Sq, Dh], k and v [B, H, Sk, Dh], mask bool broadcastable to
    [B, H, Sq, Sk] (True = attend)
    -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    # all -inf rows come out NaN: those queries see nothing, give them 0
    weights = torch.nan_to_num(weights, nan=0.0)
    return weights @ v, weights
''',
    name="a_matt_right_neginf_nan_to_num",
)

right(
    "ch03_masks",
    "masked_attention",
    '''
def masked_attention(q, k, v, mask):
    """q [B, H, Sq, Dh], k and v [B, H, Sk, Dh], mask bool broadcastable to
    [B, H, Sq, Sk] (True = attend)
    -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])."""
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) * q.shape[-1] ** -0.5
    lowest = torch.tensor(torch.finfo(scores.dtype).min, dtype=scores.dtype, device=scores.device)
    scores = torch.where(mask, scores, lowest)
    # stable softmax by hand; masked keys get exactly 0
    scores = scores - scores.amax(dim=-1, keepdim=True)
    e = torch.where(mask, scores.exp(), torch.zeros_like(scores))
    total = e.sum(dim=-1, keepdim=True)
    weights = e / total.clamp(min=torch.finfo(scores.dtype).tiny)
    out = torch.einsum("bhqk,bhkd->bhqd", weights, v)
    return out, weights
''',
    name="a_matt_right_where_manual",
)

# ---------------------------------------------------------------------------
# ch03_bughunt / self_attention
# ---------------------------------------------------------------------------

wrong(
    "ch03_bughunt",
    "self_attention",
    "fixes projections, scale and fill value but leaves the seed's einsum "
    "(letters bhqd on a [N, L, H, D] tensor: scores across heads, not tokens)",
    """
class SelfAttention(nn.Module):
    def __init__(self, embed_size, heads):
        super(SelfAttention, self).__init__()
        self.embed_size = embed_size
        self.heads = heads
        self.head_dim = embed_size // heads

        assert (self.head_dim * heads == embed_size), "Embed size needs to be div by heads"

        # 线性变换生成 Q, K, V  (fixed: project the whole embedding)
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)

        # 输出投影
        self.fc_out = nn.Linear(heads * self.head_dim, embed_size)

    def forward(self, values, keys, query, mask):
        N = query.shape[0]
        value_len, key_len, query_len = values.shape[1], keys.shape[1], query.shape[1]

        # 线性变换 (before splitting now)
        values = self.values(values)
        keys = self.keys(keys)
        query = self.queries(query)

        # 分割多头
        values = values.reshape(N, value_len, self.heads, self.head_dim)
        keys = keys.reshape(N, key_len, self.heads, self.head_dim)
        query = query.reshape(N, query_len, self.heads, self.head_dim)

        # 计算 attention scores
        energy = torch.einsum("bhqd, bhkd -> bhqk", [query, keys])

        # 缩放
        energy = energy / (self.head_dim ** (1/2))

        # 应用 mask（可选）
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)

        # softmax 得到注意力权重
        attention = torch.softmax(energy, dim=3)

        # 加权求和
        out = torch.einsum("bhql, bhlv -> bhqv", [attention, values])

        # 拼接多头
        out = out.reshape(N, query_len, self.heads * self.head_dim)

        return self.fc_out(out)
        # YOUR CODE HERE
        raise NotImplementedError()
""",
    name="a_bh_einsum_left",
)

wrong(
    "ch03_bughunt",
    "self_attention",
    "fixes einsum, projections and fill value but keeps the scale sqrt(embed_size)",
    """
class SelfAttention(nn.Module):
    def __init__(self, embed_size, heads):
        super(SelfAttention, self).__init__()
        self.embed_size = embed_size
        self.heads = heads
        self.head_dim = embed_size // heads

        assert (self.head_dim * heads == embed_size), "Embed size needs to be div by heads"

        # 线性变换生成 Q, K, V
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)

        # 输出投影
        self.fc_out = nn.Linear(heads * self.head_dim, embed_size)

    def forward(self, values, keys, query, mask):
        N = query.shape[0]
        value_len, key_len, query_len = values.shape[1], keys.shape[1], query.shape[1]

        # 线性变换
        values = self.values(values).reshape(N, value_len, self.heads, self.head_dim)
        keys = self.keys(keys).reshape(N, key_len, self.heads, self.head_dim)
        query = self.queries(query).reshape(N, query_len, self.heads, self.head_dim)

        # 计算 attention scores
        # einsum: n=batch, q=query_len, k=key_len, h=heads, d=head_dim
        energy = torch.einsum("nqhd,nkhd->nhqk", [query, keys])

        # 缩放
        energy = energy / (self.embed_size ** (1/2))

        # 应用 mask（可选）
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)

        # softmax 得到注意力权重
        attention = torch.softmax(energy, dim=3)

        # 加权求和
        out = torch.einsum("nhql,nlhd->nqhd", [attention, values])

        # 拼接多头
        out = out.reshape(N, query_len, self.heads * self.head_dim)

        return self.fc_out(out)
""",
    name="a_bh_scale_left",
)

wrong(
    "ch03_bughunt",
    "self_attention",
    "fixes einsum, projections and scale but keeps the -1e20 fill: overflows "
    "float16 (error or NaN on a fully masked row)",
    """
class SelfAttention(nn.Module):
    def __init__(self, embed_size, heads):
        super(SelfAttention, self).__init__()
        self.embed_size = embed_size
        self.heads = heads
        self.head_dim = embed_size // heads

        assert (self.head_dim * heads == embed_size), "Embed size needs to be div by heads"

        # 线性变换生成 Q, K, V
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)

        # 输出投影
        self.fc_out = nn.Linear(heads * self.head_dim, embed_size)

    def forward(self, values, keys, query, mask):
        N = query.shape[0]
        value_len, key_len, query_len = values.shape[1], keys.shape[1], query.shape[1]

        values = self.values(values).reshape(N, value_len, self.heads, self.head_dim)
        keys = self.keys(keys).reshape(N, key_len, self.heads, self.head_dim)
        query = self.queries(query).reshape(N, query_len, self.heads, self.head_dim)

        energy = torch.einsum("nqhd,nkhd->nhqk", [query, keys])

        # 缩放
        energy = energy / math.sqrt(self.head_dim)

        # 应用 mask（可选）
        if mask is not None:
            energy = energy.masked_fill(mask == 0, float("-1e20"))

        # softmax 得到注意力权重
        attention = torch.softmax(energy, dim=3)

        # 加权求和
        out = torch.einsum("nhqk,nkhd->nqhd", [attention, values])

        # 拼接多头
        out = out.reshape(N, query_len, self.heads * self.head_dim)

        return self.fc_out(out)
""",
    name="a_bh_fill_left",
)

wrong(
    "ch03_bughunt",
    "self_attention",
    "fixes einsum, scale and fill value but keeps the shared Linear(head_dim, "
    "head_dim) projections applied to each head's slice",
    """
class SelfAttention(nn.Module):
    def __init__(self, embed_size, heads):
        super(SelfAttention, self).__init__()
        self.embed_size = embed_size
        self.heads = heads
        self.head_dim = embed_size // heads

        assert (self.head_dim * heads == embed_size), "Embed size needs to be div by heads"

        # 线性变换生成 Q, K, V
        self.values = nn.Linear(self.head_dim, self.head_dim, bias=False)
        self.keys = nn.Linear(self.head_dim, self.head_dim, bias=False)
        self.queries = nn.Linear(self.head_dim, self.head_dim, bias=False)

        # 输出投影
        self.fc_out = nn.Linear(heads * self.head_dim, embed_size)

    def forward(self, values, keys, query, mask):
        N = query.shape[0]
        value_len, key_len, query_len = values.shape[1], keys.shape[1], query.shape[1]

        # 分割多头
        values = values.reshape(N, value_len, self.heads, self.head_dim)
        keys = keys.reshape(N, key_len, self.heads, self.head_dim)
        query = query.reshape(N, query_len, self.heads, self.head_dim)

        # 线性变换
        values = self.values(values)
        keys = self.keys(keys)
        query = self.queries(query)

        # [N, L, H, D] -> [N, H, L, D]
        values = values.permute(0, 2, 1, 3)
        keys = keys.permute(0, 2, 1, 3)
        query = query.permute(0, 2, 1, 3)

        # 计算 attention scores
        energy = torch.einsum("bhqd, bhkd -> bhqk", [query, keys])

        # 缩放
        energy = energy / (self.head_dim ** (1/2))

        # 应用 mask（可选）
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)

        # softmax 得到注意力权重
        attention = torch.softmax(energy, dim=3)

        # 加权求和
        out = torch.einsum("bhql, bhlv -> bhqv", [attention, values])

        # 拼接多头
        out = out.permute(0, 2, 1, 3).reshape(N, query_len, self.heads * self.head_dim)

        return self.fc_out(out)
""",
    name="a_bh_shared_linear_left",
)

wrong(
    "ch03_bughunt",
    "self_attention",
    "permutes q, k, v to [N, H, L, D] to fix the einsum but reshapes the output "
    "[N, H, Lq, D] straight to [N, Lq, E] without permuting back (mixes tokens "
    "across heads)",
    """
class SelfAttention(nn.Module):
    def __init__(self, embed_size, heads):
        super(SelfAttention, self).__init__()
        self.embed_size = embed_size
        self.heads = heads
        self.head_dim = embed_size // heads

        assert (self.head_dim * heads == embed_size), "Embed size needs to be div by heads"

        # 线性变换生成 Q, K, V
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)

        # 输出投影
        self.fc_out = nn.Linear(heads * self.head_dim, embed_size)

    def forward(self, values, keys, query, mask):
        N = query.shape[0]
        value_len, key_len, query_len = values.shape[1], keys.shape[1], query.shape[1]

        # 线性变换 then 分割多头, heads in front
        values = self.values(values).reshape(N, value_len, self.heads, self.head_dim).transpose(1, 2)
        keys = self.keys(keys).reshape(N, key_len, self.heads, self.head_dim).transpose(1, 2)
        query = self.queries(query).reshape(N, query_len, self.heads, self.head_dim).transpose(1, 2)

        # 计算 attention scores (now really b h q d)
        energy = torch.einsum("bhqd, bhkd -> bhqk", [query, keys])

        # 缩放
        energy = energy / (self.head_dim ** (1/2))

        # 应用 mask（可选）
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)

        # softmax 得到注意力权重
        attention = torch.softmax(energy, dim=3)

        # 加权求和
        out = torch.einsum("bhql, bhlv -> bhqv", [attention, values])

        # 拼接多头
        out = out.reshape(N, query_len, self.heads * self.head_dim)

        return self.fc_out(out)
""",
    name="a_bh_merge_without_transpose",
)

wrong(
    "ch03_bughunt",
    "self_attention",
    "replaces the -1e20 fill by float('-inf'): a fully masked sequence gives NaN",
    """
class SelfAttention(nn.Module):
    def __init__(self, embed_size, heads):
        super(SelfAttention, self).__init__()
        self.embed_size = embed_size
        self.heads = heads
        self.head_dim = embed_size // heads

        assert (self.head_dim * heads == embed_size), "Embed size needs to be div by heads"

        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(heads * self.head_dim, embed_size)

    def forward(self, values, keys, query, mask):
        N = query.shape[0]
        value_len, key_len, query_len = values.shape[1], keys.shape[1], query.shape[1]

        values = self.values(values).reshape(N, value_len, self.heads, self.head_dim)
        keys = self.keys(keys).reshape(N, key_len, self.heads, self.head_dim)
        query = self.queries(query).reshape(N, query_len, self.heads, self.head_dim)

        energy = torch.einsum("nqhd,nkhd->nhqk", [query, keys])
        energy = energy / math.sqrt(self.head_dim)

        if mask is not None:
            # -inf fits every dtype
            energy = energy.masked_fill(mask == 0, float("-inf"))

        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("nhqk,nkhd->nqhd", [attention, values])
        out = out.reshape(N, query_len, self.heads * self.head_dim)
        return self.fc_out(out)
""",
    name="a_bh_fill_neginf",
)

wrong(
    "ch03_bughunt",
    "self_attention",
    "'fixes' the scale as division by head_dim (no square root)",
    """
class SelfAttention(nn.Module):
    def __init__(self, embed_size, heads):
        super(SelfAttention, self).__init__()
        self.embed_size = embed_size
        self.heads = heads
        self.head_dim = embed_size // heads

        assert (self.head_dim * heads == embed_size), "Embed size needs to be div by heads"

        # 线性变换生成 Q, K, V
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)

        # 输出投影
        self.fc_out = nn.Linear(heads * self.head_dim, embed_size)

    def forward(self, values, keys, query, mask):
        N = query.shape[0]
        value_len, key_len, query_len = values.shape[1], keys.shape[1], query.shape[1]

        values = self.values(values).view(N, value_len, self.heads, self.head_dim)
        keys = self.keys(keys).view(N, key_len, self.heads, self.head_dim)
        query = self.queries(query).view(N, query_len, self.heads, self.head_dim)

        energy = torch.einsum("nqhd,nkhd->nhqk", query, keys)

        # 缩放 by the head size
        energy = energy / self.head_dim

        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)

        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("nhqk,nkhd->nqhd", attention, values)
        out = out.reshape(N, query_len, self.heads * self.head_dim)
        return self.fc_out(out)
""",
    name="a_bh_scale_no_sqrt",
)

wrong(
    "ch03_bughunt",
    "self_attention",
    "while fixing the fill value, flips the mask test to mask == 1: masks the "
    "kept keys and keeps the masked ones",
    """
class SelfAttention(nn.Module):
    def __init__(self, embed_size, heads):
        super(SelfAttention, self).__init__()
        self.embed_size = embed_size
        self.heads = heads
        self.head_dim = embed_size // heads

        assert (self.head_dim * heads == embed_size), "Embed size needs to be div by heads"

        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(heads * self.head_dim, embed_size)

    def forward(self, values, keys, query, mask):
        N = query.shape[0]
        value_len, key_len, query_len = values.shape[1], keys.shape[1], query.shape[1]

        values = self.values(values).reshape(N, value_len, self.heads, self.head_dim)
        keys = self.keys(keys).reshape(N, key_len, self.heads, self.head_dim)
        query = self.queries(query).reshape(N, query_len, self.heads, self.head_dim)

        energy = torch.einsum("nqhd,nkhd->nhqk", [query, keys])
        energy = energy / math.sqrt(self.head_dim)

        # 应用 mask（可选）-- True means masked
        if mask is not None:
            energy = energy.masked_fill(mask == 1, torch.finfo(energy.dtype).min)

        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("nhqk,nkhd->nqhd", [attention, values])
        out = out.reshape(N, query_len, self.heads * self.head_dim)
        return self.fc_out(out)
""",
    name="a_bh_mask_flipped",
)

wrong(
    "ch03_bughunt",
    "self_attention",
    "fixes the score einsum but the output einsum gives the values' head axis its "
    "own letter (nkgd): it is summed away, so every head mixes the sum of all "
    "heads' values",
    """
class SelfAttention(nn.Module):
    def __init__(self, embed_size, heads):
        super(SelfAttention, self).__init__()
        self.embed_size = embed_size
        self.heads = heads
        self.head_dim = embed_size // heads

        assert (self.head_dim * heads == embed_size), "Embed size needs to be div by heads"

        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(heads * self.head_dim, embed_size)

    def forward(self, values, keys, query, mask):
        N = query.shape[0]
        value_len, key_len, query_len = values.shape[1], keys.shape[1], query.shape[1]

        values = self.values(values).reshape(N, value_len, self.heads, self.head_dim)
        keys = self.keys(keys).reshape(N, key_len, self.heads, self.head_dim)
        query = self.queries(query).reshape(N, query_len, self.heads, self.head_dim)

        energy = torch.einsum("nqhd,nkhd->nhqk", [query, keys])
        energy = energy / math.sqrt(self.head_dim)

        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)

        attention = torch.softmax(energy, dim=3)
        # weighted sum of the values
        out = torch.einsum("nhqk,nkgd->nqhd", [attention, values])
        out = out.reshape(N, query_len, self.heads * self.head_dim)
        return self.fc_out(out)
""",
    name="a_bh_output_einsum_sums_heads",
)

right(
    "ch03_bughunt",
    "self_attention",
    """
class SelfAttention(nn.Module):
    def __init__(self, embed_size, heads):
        super(SelfAttention, self).__init__()
        self.embed_size = embed_size
        self.heads = heads
        self.head_dim = embed_size // heads

        assert (self.head_dim * heads == embed_size), "Embed size needs to be div by heads"

        # 线性变换生成 Q, K, V -- full embedding -> all heads
        self.queries = nn.Linear(embed_size, embed_size)
        self.keys = nn.Linear(embed_size, embed_size)
        self.values = nn.Linear(embed_size, embed_size)

        # 输出投影
        self.fc_out = nn.Linear(heads * self.head_dim, embed_size)

    def _heads(self, x):
        N, L, _ = x.shape
        return x.view(N, L, self.heads, self.head_dim).transpose(1, 2)   # [N, H, L, D]

    def forward(self, values, keys, query, mask):
        N, query_len, _ = query.shape

        q = self._heads(self.queries(query))
        k = self._heads(self.keys(keys))
        v = self._heads(self.values(values))

        energy = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)   # [N, H, Lq, Lk]

        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)

        attention = torch.softmax(energy, dim=-1)
        out = (attention @ v).transpose(1, 2).reshape(N, query_len, self.embed_size)
        return self.fc_out(out)
""",
    name="a_bh_right_matmul_rewrite",
)

right(
    "ch03_bughunt",
    "self_attention",
    """
class SelfAttention(nn.Module):
    def __init__(self, embed_size, heads):
        super(SelfAttention, self).__init__()
        self.embed_size = embed_size
        self.heads = heads
        self.head_dim = embed_size // heads

        assert (self.head_dim * heads == embed_size), "Embed size needs to be div by heads"

        # 线性变换生成 Q, K, V
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)

        # 输出投影
        self.fc_out = nn.Linear(heads * self.head_dim, embed_size)

    def forward(self, values, keys, query, mask):
        N = query.shape[0]
        value_len, key_len, query_len = values.shape[1], keys.shape[1], query.shape[1]

        # 线性变换, then 分割多头
        values = self.values(values).reshape(N, value_len, self.heads, self.head_dim)
        keys = self.keys(keys).reshape(N, key_len, self.heads, self.head_dim)
        query = self.queries(query).reshape(N, query_len, self.heads, self.head_dim)

        # 计算 attention scores: letters follow the real layout [N, L, H, D]
        energy = torch.einsum("blhd,bmhd->bhlm", [query, keys])

        # 缩放
        energy = energy * self.head_dim ** -0.5

        # 应用 mask（可选）: -1e4 still fits in float16 (max 65504)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, -1e4)

        # softmax 得到注意力权重
        attention = torch.softmax(energy, dim=3)

        # 加权求和
        out = torch.einsum("bhlm,bmhd->blhd", [attention, values])

        # 拼接多头
        out = out.reshape(N, query_len, self.heads * self.head_dim)

        return self.fc_out(out)
""",
    name="a_bh_right_fill_1e4",
)

# ---------------------------------------------------------------------------
# ch04_blocks / feed_forward
# ---------------------------------------------------------------------------

wrong(
    "ch04_blocks",
    "feed_forward",
    "GELU instead of ReLU",
    '''
class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.fc1 = nn.Linear(d_model, d_ff)
        self.fc2 = nn.Linear(d_ff, d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        """x [..., D] -> [..., D]."""
        return self.fc2(self.drop(F.gelu(self.fc1(x))))
''',
    name="a_ff_gelu",
)

wrong(
    "ch04_blocks",
    "feed_forward",
    "a second ReLU after the output Linear",
    '''
class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(d_model, d_ff),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(d_ff, d_model),
            nn.ReLU(),
        )

    def forward(self, x):
        """x [..., D] -> [..., D]."""
        return self.net(x)
''',
    name="a_ff_relu_after_out",
)

wrong(
    "ch04_blocks",
    "feed_forward",
    "dropout on the output of the second Linear instead of the hidden layer",
    '''
class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        """x [..., D] -> [..., D]."""
        h = torch.relu(self.linear1(x))
        return self.dropout(self.linear2(h))
''',
    name="a_ff_dropout_on_output",
)

wrong(
    "ch04_blocks",
    "feed_forward",
    "hidden width hard-coded to 4 * d_model, ignoring d_ff",
    '''
class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        hidden = 4 * d_model   # paper: 512 -> 2048
        self.w_1 = nn.Linear(d_model, hidden)
        self.w_2 = nn.Linear(hidden, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        """x [..., D] -> [..., D]."""
        return self.w_2(self.dropout(self.w_1(x).relu()))
''',
    name="a_ff_hidden_4d",
)

wrong(
    "ch04_blocks",
    "feed_forward",
    "dropout rate hard-coded to 0.1 instead of the constructor's `dropout`",
    '''
class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x):
        """x [..., D] -> [..., D]."""
        return self.linear2(self.dropout(F.relu(self.linear1(x))))
''',
    name="a_ff_dropout_const",
)

wrong(
    "ch04_blocks",
    "feed_forward",
    "adds the residual x inside the feed-forward",
    '''
class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        """x [..., D] -> [..., D]."""
        out = self.linear2(self.dropout(F.relu(self.linear1(x))))
        return x + out   # residual
''',
    name="a_ff_residual",
)

wrong(
    "ch04_blocks",
    "feed_forward",
    "F.dropout without training=self.training: drops in eval mode too",
    '''
class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.lin_in = nn.Linear(d_model, d_ff)
        self.lin_out = nn.Linear(d_ff, d_model)
        self.p = dropout

    def forward(self, x):
        """x [..., D] -> [..., D]."""
        h = F.relu(self.lin_in(x))
        h = F.dropout(h, self.p)
        return self.lin_out(h)
''',
    name="a_ff_fdropout_eval",
)

wrong(
    "ch04_blocks",
    "feed_forward",
    "dropout on the input x before the first Linear instead of the hidden layer",
    '''
class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        """x [..., D] -> [..., D]."""
        x = self.dropout(x)
        return self.linear2(torch.relu(self.linear1(x)))
''',
    name="a_ff_dropout_on_input",
)

right(
    "ch04_blocks",
    "feed_forward",
    '''
class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(d_model, d_ff),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(d_ff, d_model),
        )

    def forward(self, x):
        """x [..., D] -> [..., D]."""
        return self.layers(x)
''',
    name="a_ff_right_sequential",
)

right(
    "ch04_blocks",
    "feed_forward",
    '''
class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.up = nn.Linear(d_model, d_ff)
        self.down = nn.Linear(d_ff, d_model)
        self.p = dropout

    def forward(self, x):
        """x [..., D] -> [..., D]."""
        hidden = self.up(x).clamp(min=0)          # max(0, x W1 + b1)
        hidden = F.dropout(hidden, p=self.p, training=self.training)
        return self.down(hidden)
''',
    name="a_ff_right_clamp_fdropout",
)

# ---------------------------------------------------------------------------
# ch04_blocks / encoder_block
# ---------------------------------------------------------------------------

wrong(
    "ch04_blocks",
    "encoder_block",
    "Post-LN: the feed-forward reads the block's input x instead of the output "
    "of the attention sublayer",
    '''
class EncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.ln1 = nn.LayerNorm(d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.drop1 = nn.Dropout(dropout)
        self.drop2 = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        """x [B, S, D], mask bool broadcastable to [B, H, S, S] -> [B, S, D]."""
        if self.norm_first:
            h = self.ln1(x)
            x = x + self.drop1(self.attn(h, h, h, mask=mask))
            x = x + self.drop2(self.ffn(self.ln2(x)))
            return x
        h = self.ln1(x + self.drop1(self.attn(x, x, x, mask=mask)))
        out = self.ln2(h + self.drop2(self.ffn(x)))
        return out
''',
    name="a_enc_ff_reads_input",
)

wrong(
    "ch04_blocks",
    "encoder_block",
    "the seed's placement: dropout after the LayerNorm (Dropout(LN(x + sublayer)))",
    '''
class EncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.attention = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        """x [B, S, D], mask bool broadcastable to [B, H, S, S] -> [B, S, D]."""
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.dropout(self.attention(h, h, h, mask=mask))
            h = self.norm2(x)
            return x + self.dropout(self.feed_forward(h))
        attention = self.attention(x, x, x, mask=mask)
        x = self.dropout(self.norm1(attention + x))
        forward = self.feed_forward(x)
        return self.dropout(self.norm2(forward + x))
''',
    name="a_enc_dropout_after_norm",
)

wrong(
    "ch04_blocks",
    "encoder_block",
    "Pre-LN: the residual adds the normalised h instead of the raw x "
    "(x = LN(x) + sublayer(LN(x)))",
    '''
class EncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        """x [B, S, D], mask bool broadcastable to [B, H, S, S] -> [B, S, D]."""
        if self.norm_first:
            x = self.norm1(x)
            x = x + self.dropout1(self.self_attn(x, x, x, mask=mask))
            x = self.norm2(x)
            x = x + self.dropout2(self.ff(x))
            return x
        x = self.norm1(x + self.dropout1(self.self_attn(x, x, x, mask=mask)))
        x = self.norm2(x + self.dropout2(self.ff(x)))
        return x
''',
    name="a_enc_preln_residual_from_norm",
)

wrong(
    "ch04_blocks",
    "encoder_block",
    "one LayerNorm shared by both sublayers",
    '''
class EncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.mha = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.norm = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        """x [B, S, D], mask bool broadcastable to [B, H, S, S] -> [B, S, D]."""
        if self.norm_first:
            h = self.norm(x)
            x = x + self.dropout(self.mha(h, h, h, mask=mask))
            return x + self.dropout(self.ffn(self.norm(x)))
        x = self.norm(x + self.dropout(self.mha(x, x, x, mask=mask)))
        return self.norm(x + self.dropout(self.ffn(x)))
''',
    name="a_enc_shared_norm",
)

wrong(
    "ch04_blocks",
    "encoder_block",
    "MultiHeadAttention built without dropout=dropout (attention weights never "
    "dropped)",
    '''
class EncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        """x [B, S, D], mask bool broadcastable to [B, H, S, S] -> [B, S, D]."""
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.drop(self.self_attn(h, h, h, mask=mask))
            return x + self.drop(self.ff(self.norm2(x)))
        x = self.norm1(x + self.drop(self.self_attn(x, x, x, mask=mask)))
        return self.norm2(x + self.drop(self.ff(x)))
''',
    name="a_enc_mha_no_dropout",
)

wrong(
    "ch04_blocks",
    "encoder_block",
    "BatchNorm1d (over the batch and sequence) instead of LayerNorm",
    '''
class EncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.bn1 = nn.BatchNorm1d(d_model)
        self.bn2 = nn.BatchNorm1d(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def _norm(self, bn, x):
        # BatchNorm1d wants [B, D, S]
        return bn(x.transpose(1, 2)).transpose(1, 2)

    def forward(self, x, mask=None):
        """x [B, S, D], mask bool broadcastable to [B, H, S, S] -> [B, S, D]."""
        if self.norm_first:
            h = self._norm(self.bn1, x)
            x = x + self.dropout1(self.self_attn(h, h, h, mask=mask))
            return x + self.dropout2(self.ff(self._norm(self.bn2, x)))
        x = self._norm(self.bn1, x + self.dropout1(self.self_attn(x, x, x, mask=mask)))
        return self._norm(self.bn2, x + self.dropout2(self.ff(x)))
''',
    name="a_enc_batchnorm",
)

wrong(
    "ch04_blocks",
    "encoder_block",
    "never passes the mask on to the attention",
    '''
class EncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        """x [B, S, D], mask bool broadcastable to [B, H, S, S] -> [B, S, D]."""
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.dropout1(self.self_attn(h, h, h))
            return x + self.dropout2(self.ff(self.norm2(x)))
        x = self.norm1(x + self.dropout1(self.self_attn(x, x, x)))
        return self.norm2(x + self.dropout2(self.ff(x)))
''',
    name="a_enc_mask_dropped",
)

wrong(
    "ch04_blocks",
    "encoder_block",
    "in-place residual add (x += ...) modifies the caller's x",
    '''
class EncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        """x [B, S, D], mask bool broadcastable to [B, H, S, S] -> [B, S, D]."""
        if self.norm_first:
            h = self.norm1(x)
            x += self.dropout1(self.self_attn(h, h, h, mask=mask))
            x += self.dropout2(self.ff(self.norm2(x)))
            return x
        x = self.norm1(x + self.dropout1(self.self_attn(x, x, x, mask=mask)))
        return self.norm2(x + self.dropout2(self.ff(x)))
''',
    name="a_enc_inplace_residual",
)

wrong(
    "ch04_blocks",
    "encoder_block",
    "norm_first branches swapped: Pre-LN when norm_first=False and Post-LN when True",
    '''
class EncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.pre_ln = not norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        """x [B, S, D], mask bool broadcastable to [B, H, S, S] -> [B, S, D]."""
        if self.pre_ln:
            h = self.norm1(x)
            x = x + self.dropout1(self.self_attn(h, h, h, mask=mask))
            return x + self.dropout2(self.ff(self.norm2(x)))
        x = self.norm1(x + self.dropout1(self.self_attn(x, x, x, mask=mask)))
        return self.norm2(x + self.dropout2(self.ff(x)))
''',
    name="a_enc_branches_swapped",
)

wrong(
    "ch04_blocks",
    "encoder_block",
    "dropout on the residual sum (LN(Dropout(x + sublayer(x)))) instead of on the "
    "sublayer output",
    '''
class EncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        """x [B, S, D], mask bool broadcastable to [B, H, S, S] -> [B, S, D]."""
        if self.norm_first:
            h = self.norm1(x)
            x = self.dropout1(x + self.self_attn(h, h, h, mask=mask))
            return self.dropout2(x + self.ff(self.norm2(x)))
        x = self.norm1(self.dropout1(x + self.self_attn(x, x, x, mask=mask)))
        return self.norm2(self.dropout2(x + self.ff(x)))
''',
    name="a_enc_dropout_on_sum",
)

wrong(
    "ch04_blocks",
    "encoder_block",
    "Pre-LN block adds a third, final LayerNorm on its output",
    '''
class EncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.final_norm = nn.LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        """x [B, S, D], mask bool broadcastable to [B, H, S, S] -> [B, S, D]."""
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.dropout1(self.self_attn(h, h, h, mask=mask))
            x = x + self.dropout2(self.ff(self.norm2(x)))
            return self.final_norm(x)   # pre-LN needs a norm at the end
        x = self.norm1(x + self.dropout1(self.self_attn(x, x, x, mask=mask)))
        return self.norm2(x + self.dropout2(self.ff(x)))
''',
    name="a_enc_preln_final_norm",
)

wrong(
    "ch04_blocks",
    "encoder_block",
    "F.dropout without training=self.training: the block drops in eval mode too",
    '''
class EncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.p = dropout
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)

    def forward(self, x, mask=None):
        """x [B, S, D], mask bool broadcastable to [B, H, S, S] -> [B, S, D]."""
        if self.norm_first:
            h = self.norm1(x)
            x = x + F.dropout(self.self_attn(h, h, h, mask=mask), self.p)
            return x + F.dropout(self.ff(self.norm2(x)), self.p)
        x = self.norm1(x + F.dropout(self.self_attn(x, x, x, mask=mask), self.p))
        return self.norm2(x + F.dropout(self.ff(x), self.p))
''',
    name="a_enc_fdropout_eval",
)

wrong(
    "ch04_blocks",
    "encoder_block",
    "Pre-LN: the feed-forward sublayer is fed the un-normalised x (norm2 created "
    "but skipped)",
    '''
class EncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        """x [B, S, D], mask bool broadcastable to [B, H, S, S] -> [B, S, D]."""
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.dropout1(self.self_attn(h, h, h, mask=mask))
            x = x + self.dropout2(self.ff(x))
            return x
        x = self.norm1(x + self.dropout1(self.self_attn(x, x, x, mask=mask)))
        return self.norm2(x + self.dropout2(self.ff(x)))
''',
    name="a_enc_preln_ff_unnormed",
)

right(
    "ch04_blocks",
    "encoder_block",
    '''
class EncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.p = dropout
        self.attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        # LayerNorm parameters by hand, used with F.layer_norm
        self.g1 = nn.Parameter(torch.ones(d_model))
        self.b1 = nn.Parameter(torch.zeros(d_model))
        self.g2 = nn.Parameter(torch.ones(d_model))
        self.b2 = nn.Parameter(torch.zeros(d_model))

    def _ln1(self, t):
        return F.layer_norm(t, t.shape[-1:], self.g1, self.b1)

    def _ln2(self, t):
        return F.layer_norm(t, t.shape[-1:], self.g2, self.b2)

    def _drop(self, t):
        return F.dropout(t, self.p, self.training)

    def forward(self, x, mask=None):
        """x [B, S, D], mask bool broadcastable to [B, H, S, S] -> [B, S, D]."""
        def attn_sub(t):
            return self.attn(t, t, t, mask=mask)

        if not self.norm_first:
            y = self._ln1(x + self._drop(attn_sub(x)))
            y = self._ln2(y + self._drop(self.ffn(y)))
        else:
            y = x + self._drop(attn_sub(self._ln1(x)))
            y = y + self._drop(self.ffn(self._ln2(y)))
        return y
''',
    name="a_enc_right_functional_ln",
)

right(
    "ch04_blocks",
    "encoder_block",
    '''
class MyLayerNorm(nn.Module):
    """LayerNorm by hand: normalise each token's features, then gain and bias."""

    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.gain = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))
        self.eps = eps

    def forward(self, x):
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        return self.gain * (x - mu) / torch.sqrt(var + self.eps) + self.bias


class Residual(nn.Module):
    """One sublayer with its residual, norm and dropout."""

    def __init__(self, d_model, dropout, pre):
        super().__init__()
        self.norm = MyLayerNorm(d_model)
        self.drop = nn.Dropout(dropout)
        self.pre = pre

    def forward(self, x, sublayer):
        if self.pre:
            return x + self.drop(sublayer(self.norm(x)))
        return self.norm(x + self.drop(sublayer(x)))


class EncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.self_attention = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout)
        self.sub1 = Residual(d_model, dropout, norm_first)
        self.sub2 = Residual(d_model, dropout, norm_first)

    def forward(self, x, mask=None):
        """x [B, S, D], mask bool broadcastable to [B, H, S, S] -> [B, S, D]."""
        x = self.sub1(x, lambda t: self.self_attention(t, t, t, mask=mask))
        return self.sub2(x, self.feed_forward)
''',
    name="a_enc_right_handwritten_ln",
)
