"""Held-out answers, writer A (trial 2026-12-07b): chapters 1-4 and the attention bug
hunt. Written from the exercise text, the lessons and tformer_ref only (the checks
unread); each wrong answer was compared with tformer_ref on random inputs by hand."""

from harness import right, wrong

# ---------------------------------------------------------------------------
# ch01_shapes: split_heads
# ---------------------------------------------------------------------------

wrong(
    "ch01_shapes",
    "split_heads",
    "views [B, S, D] straight to [B, H, S, Dh] without the transpose: heads get "
    "chunks of consecutive tokens instead of feature slices",
    '''
def split_heads(x, n_heads):
    """[B, S, D] -> [B, H, S, Dh]."""
    B, S, D = x.shape
    head_dim = D // n_heads
    # one view, already in the order I want
    return x.view(B, n_heads, S, head_dim)
''',
    name="a_split_straight_view",
)

wrong(
    "ch01_shapes",
    "split_heads",
    "cuts D as [Dh, H] (interleaved): head h gets features h, h+H, h+2H, ... instead "
    "of the contiguous slice h*Dh:(h+1)*Dh",
    '''
def split_heads(x, n_heads):
    """[B, S, D] -> [B, H, S, Dh]."""
    b, s, d = x.shape
    dh = d // n_heads
    x = x.reshape(b, s, dh, n_heads)      # [B, S, Dh, H]
    return x.permute(0, 3, 1, 2)          # [B, H, S, Dh]
''',
    name="a_split_interleaved_features",
)

wrong(
    "ch01_shapes",
    "split_heads",
    "treats n_heads as the head size: views [B, S, D/n, n], so the result is "
    "[B, D/H, S, H] (wrong shape unless H == Dh)",
    '''
def split_heads(x, n_heads):
    """[B, S, D] -> [B, H, S, Dh]."""
    batch_size, seq_len, _ = x.shape
    x = x.view(batch_size, seq_len, -1, n_heads)
    return x.transpose(1, 2)
''',
    name="a_split_nheads_as_headdim",
)

wrong(
    "ch01_shapes",
    "split_heads",
    "casts the result to float32 (.float()), so a float64 input comes back float32",
    '''
def split_heads(x, n_heads):
    """[B, S, D] -> [B, H, S, Dh]."""
    B, S, D = x.size()
    out = x.view(B, S, n_heads, D // n_heads).transpose(1, 2)
    return out.float()  # make sure it's a float tensor for the matmuls
''',
    name="a_split_casts_float32",
)

wrong(
    "ch01_shapes",
    "split_heads",
    "hard-codes the head size 64 (the paper's d_k) instead of D // n_heads: raises on "
    "any other size",
    '''
def split_heads(x, n_heads):
    """[B, S, D] -> [B, H, S, Dh]."""
    B, S, _ = x.shape
    return x.view(B, S, n_heads, 64).transpose(1, 2)
''',
    name="a_split_hardcoded_64",
)

right(
    "ch01_shapes",
    "split_heads",
    '''
def split_heads(x, n_heads):
    """[B, S, D] -> [B, H, S, Dh]."""
    # chunk the features into n_heads pieces and stack them on a new head axis
    pieces = torch.chunk(x, n_heads, dim=-1)   # n_heads x [B, S, Dh]
    return torch.stack(pieces, dim=1)          # [B, H, S, Dh]
''',
    name="a_split_chunk_stack",
)

right(
    "ch01_shapes",
    "split_heads",
    '''
def split_heads(x, n_heads):
    """[B, S, D] -> [B, H, S, Dh]."""
    return x.unflatten(-1, (n_heads, -1)).permute(0, 2, 1, 3)
''',
    name="a_split_unflatten_permute",
)

# ---------------------------------------------------------------------------
# ch01_shapes: merge_heads
# ---------------------------------------------------------------------------

wrong(
    "ch01_shapes",
    "merge_heads",
    "reshapes [B, H, S, Dh] straight to [B, S, D] without transposing back: glues "
    "rows of different tokens of one head together",
    '''
def merge_heads(x):
    """[B, H, S, Dh] -> [B, S, D]."""
    b, h, s, dh = x.shape
    return x.reshape(b, s, h * dh)
''',
    name="a_merge_no_transpose",
)

wrong(
    "ch01_shapes",
    "merge_heads",
    "uses .view after the transpose: the transposed tensor is not contiguous, so it "
    "raises",
    '''
def merge_heads(x):
    """[B, H, S, Dh] -> [B, S, D]."""
    B, H, S, Dh = x.shape
    return x.transpose(1, 2).view(B, S, H * Dh)
''',
    name="a_merge_view_noncontiguous",
)

wrong(
    "ch01_shapes",
    "merge_heads",
    "permutes to [B, S, Dh, H] before flattening, so the features come out "
    "interleaved across heads (d-major) instead of head after head",
    '''
def merge_heads(x):
    """[B, H, S, Dh] -> [B, S, D]."""
    B, H, S, Dh = x.shape
    x = x.permute(0, 2, 3, 1)   # bring S next to B
    return x.reshape(B, S, H * Dh)
''',
    name="a_merge_permute_interleaves",
)

wrong(
    "ch01_shapes",
    "merge_heads",
    "unpacks the shape in the [B, S, H, Dh] order, so the result is [B, H, S*Dh] "
    "(wrong shape)",
    '''
def merge_heads(x):
    """[B, H, S, Dh] -> [B, S, D]."""
    batch, seq, heads, head_dim = x.shape
    x = x.transpose(1, 2).contiguous()
    return x.view(batch, seq, heads * head_dim)
''',
    name="a_merge_unpack_order",
)

wrong(
    "ch01_shapes",
    "merge_heads",
    "concatenates the heads along the sequence axis (dim=1) instead of the feature "
    "axis: [B, H*S, Dh]",
    '''
def merge_heads(x):
    """[B, H, S, Dh] -> [B, S, D]."""
    heads = [x[:, h] for h in range(x.shape[1])]  # each [B, S, Dh]
    return torch.cat(heads, dim=1)
''',
    name="a_merge_cat_wrong_axis",
)

wrong(
    "ch01_shapes",
    "merge_heads",
    "detaches a copy of x to 'leave x unchanged': the result has no gradient path "
    "back to x",
    '''
def merge_heads(x):
    """[B, H, S, Dh] -> [B, S, D]."""
    x = x.clone().detach()  # don't touch the caller's tensor
    B, H, S, Dh = x.shape
    return x.transpose(1, 2).reshape(B, S, H * Dh)
''',
    name="a_merge_clone_detach",
)

right(
    "ch01_shapes",
    "merge_heads",
    '''
def merge_heads(x):
    """[B, H, S, Dh] -> [B, S, D]."""
    # put the heads side by side along the last axis, head 0 first
    return torch.cat([x[:, h, :, :] for h in range(x.size(1))], dim=-1)
''',
    name="a_merge_cat_features",
)

right(
    "ch01_shapes",
    "merge_heads",
    '''
def merge_heads(x):
    """[B, H, S, Dh] -> [B, S, D]."""
    out = torch.einsum("bhsd->bshd", x)
    return out.flatten(start_dim=2)
''',
    name="a_merge_einsum_flatten",
)

# ---------------------------------------------------------------------------
# ch01_shapes: multi_head_attention
# ---------------------------------------------------------------------------

wrong(
    "ch01_shapes",
    "multi_head_attention",
    "divides the scores by sqrt(d_model) instead of sqrt(Dh)",
    '''
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.d_model = d_model
        self.n_heads = n_heads
        self.W_q = nn.Linear(d_model, d_model)
        self.W_k = nn.Linear(d_model, d_model)
        self.W_v = nn.Linear(d_model, d_model)
        self.W_o = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        """query [B, Sq, D], key and value [B, Sk, D] -> [B, Sq, D]."""
        Q = split_heads(self.W_q(query), self.n_heads)
        K = split_heads(self.W_k(key), self.n_heads)
        V = split_heads(self.W_v(value), self.n_heads)
        scores = Q @ K.transpose(-2, -1) / math.sqrt(self.d_model)
        attn = torch.softmax(scores, dim=-1)
        out = merge_heads(attn @ V)
        return self.W_o(out)
''',
    name="a_mha_scale_dmodel",
)

wrong(
    "ch01_shapes",
    "multi_head_attention",
    "projects the keys and values from `query` (self-attention habit): key and value "
    "are ignored, so cross-attention is wrong",
    '''
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.dk = d_model // n_heads
        self.q_lin = nn.Linear(d_model, d_model)
        self.k_lin = nn.Linear(d_model, d_model)
        self.v_lin = nn.Linear(d_model, d_model)
        self.o_lin = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        """query [B, Sq, D], key and value [B, Sk, D] -> [B, Sq, D]."""
        x = query
        q = split_heads(self.q_lin(x), self.h)
        k = split_heads(self.k_lin(x), self.h)
        v = split_heads(self.v_lin(x), self.h)
        w = (q @ k.transpose(-2, -1) / math.sqrt(self.dk)).softmax(dim=-1)
        return self.o_lin(merge_heads(w @ v))
''',
    name="a_mha_kv_from_query",
)

wrong(
    "ch01_shapes",
    "multi_head_attention",
    "projects the values from `key` (v_proj(key) instead of v_proj(value))",
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
        v = split_heads(self.v_proj(key), self.n_heads)
        d_head = q.shape[-1]
        scores = torch.matmul(q, k.transpose(-2, -1)) / d_head ** 0.5
        weights = torch.softmax(scores, dim=-1)
        return self.out_proj(merge_heads(torch.matmul(weights, v)))
''',
    name="a_mha_value_from_key",
)

wrong(
    "ch01_shapes",
    "multi_head_attention",
    "no output projection: out_proj is created but forward returns the merged heads "
    "directly",
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
        out = weights @ v
        return merge_heads(out)
''',
    name="a_mha_no_out_proj",
)

wrong(
    "ch01_shapes",
    "multi_head_attention",
    "passes the head size (d_model // n_heads) to split_heads instead of the head count",
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
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        return self.out_proj(merge_heads(scores.softmax(-1) @ v))
''',
    name="a_mha_split_by_head_size",
)

wrong(
    "ch01_shapes",
    "multi_head_attention",
    "softmax over dim=1, the heads axis, instead of over the keys",
    '''
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.query_layer = nn.Linear(d_model, d_model)
        self.key_layer = nn.Linear(d_model, d_model)
        self.value_layer = nn.Linear(d_model, d_model)
        self.output_layer = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        """query [B, Sq, D], key and value [B, Sk, D] -> [B, Sq, D]."""
        q = split_heads(self.query_layer(query), self.n_heads)
        k = split_heads(self.key_layer(key), self.n_heads)
        v = split_heads(self.value_layer(value), self.n_heads)
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(q.shape[-1])
        attn = torch.softmax(scores, dim=1)
        out = torch.einsum("bhqk,bhkd->bhqd", attn, v)
        return self.output_layer(merge_heads(out))
''',
    name="a_mha_softmax_heads_axis",
)

wrong(
    "ch01_shapes",
    "multi_head_attention",
    "merges the heads inline with a reshape and no transpose: tokens of one head are "
    "glued together",
    '''
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.d_model = d_model
        self.n_heads = n_heads
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
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        out = scores.softmax(dim=-1) @ v        # [B, H, Sq, Dh]
        out = out.reshape(B, Sq, self.d_model)  # back to [B, Sq, D]
        return self.out_proj(out)
''',
    name="a_mha_inline_merge_no_transpose",
)

wrong(
    "ch01_shapes",
    "multi_head_attention",
    "F.dropout(weights, 0.1) without training=self.training: dropout stays on in eval "
    "mode, two eval calls differ",
    '''
import torch.nn.functional as F

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
        weights = F.softmax(scores, dim=-1)
        weights = F.dropout(weights, 0.1)  # attention dropout like the paper
        return self.out_proj(merge_heads(weights @ v))
''',
    name="a_mha_dropout_always_on",
)

wrong(
    "ch01_shapes",
    "multi_head_attention",
    "transposes the wrong axes of k (transpose(1, 2) instead of (-2, -1)): the matmul "
    "broadcasts [B, H] against [B, Sk] and raises",
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
        return self.out_proj(merge_heads(scores.softmax(-1) @ v))
''',
    name="a_mha_k_transpose_wrong_axes",
)

wrong(
    "ch01_shapes",
    "multi_head_attention",
    "builds a causal mask in by default (tril over Sq x Sk), so with mask=None queries "
    "cannot see later keys",
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
            # no future peeking
            mask = torch.ones(q.size(2), k.size(2), dtype=torch.bool,
                              device=q.device).tril()
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        return self.out_proj(merge_heads(scores.softmax(-1) @ v))
''',
    name="a_mha_builtin_causal",
)

right(
    "ch01_shapes",
    "multi_head_attention",
    '''
import torch.nn.functional as F

class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        assert d_model % n_heads == 0
        self.d_model, self.n_heads = d_model, n_heads
        # one fused projection, rows stacked [q; k; v]
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        """query [B, Sq, D], key and value [B, Sk, D] -> [B, Sq, D]."""
        D = self.d_model
        Wq, Wk, Wv = self.qkv.weight.split(D, dim=0)
        bq, bk, bv = self.qkv.bias.split(D, dim=0)
        q = split_heads(F.linear(query, Wq, bq), self.n_heads)
        k = split_heads(F.linear(key, Wk, bk), self.n_heads)
        v = split_heads(F.linear(value, Wv, bv), self.n_heads)
        dh = D // self.n_heads
        scores = torch.einsum("bhid,bhjd->bhij", q * dh ** -0.5, k)
        scores = scores - scores.amax(dim=-1, keepdim=True)
        e = scores.exp()
        weights = e / e.sum(dim=-1, keepdim=True)
        out = torch.einsum("bhij,bhjd->bhid", weights, v)
        return self.proj(merge_heads(out))
''',
    name="a_mha_fused_qkv_einsum",
)

right(
    "ch01_shapes",
    "multi_head_attention",
    '''
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.dh = d_model // n_heads
        scale = 1 / math.sqrt(d_model)
        # my own weights, used as x @ W (no biases)
        self.Wq = nn.Parameter(torch.randn(d_model, d_model) * scale)
        self.Wk = nn.Parameter(torch.randn(d_model, d_model) * scale)
        self.Wv = nn.Parameter(torch.randn(d_model, d_model) * scale)
        self.Wo = nn.Parameter(torch.randn(d_model, d_model) * scale)

    def forward(self, query, key, value, mask=None):
        """query [B, Sq, D], key and value [B, Sk, D] -> [B, Sq, D]."""
        heads = []
        Q, K, V = query @ self.Wq, key @ self.Wk, value @ self.Wv
        for i in range(self.h):
            sl = slice(i * self.dh, (i + 1) * self.dh)
            qi, ki, vi = Q[..., sl], K[..., sl], V[..., sl]   # [B, S, dh]
            s = torch.bmm(qi, ki.transpose(1, 2)) / math.sqrt(self.dh)
            heads.append(torch.bmm(torch.softmax(s, dim=2), vi))
        return torch.cat(heads, dim=-1) @ self.Wo
''',
    name="a_mha_params_per_head_loop",
)

# ---------------------------------------------------------------------------
# ch02_attention: attention
# ---------------------------------------------------------------------------

wrong(
    "ch02_attention",
    "attention",
    "scales by sqrt of the key count Sk (k.size(-2)) instead of sqrt(Dh)",
    '''
def attention(q, k, v):
    """q [B, H, Sq, Dh], k and v [B, H, Sk, Dh]
    -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])."""
    d_k = k.size(-2)
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d_k)
    weights = torch.softmax(scores, dim=-1)
    return torch.matmul(weights, v), weights
''',
    name="a_att_scale_by_sk",
)

wrong(
    "ch02_attention",
    "attention",
    "softmax over dim=-2 (the queries) instead of the keys",
    '''
def attention(q, k, v):
    """q [B, H, Sq, Dh], k and v [B, H, Sk, Dh]
    -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])."""
    scores = q @ k.transpose(-2, -1)
    scores = scores / math.sqrt(q.shape[-1])
    weights = scores.softmax(dim=-2)
    out = weights @ v
    return out, weights
''',
    name="a_att_softmax_dim_minus2",
)

wrong(
    "ch02_attention",
    "attention",
    "hand-written softmax without subtracting the row max: overflows to inf/NaN when "
    "the scores are large",
    '''
def attention(q, k, v):
    """q [B, H, Sq, Dh], k and v [B, H, Sk, Dh]
    -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])."""
    dk = q.shape[-1]
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(dk)
    exp_scores = torch.exp(scores)
    weights = exp_scores / exp_scores.sum(dim=-1, keepdim=True)
    out = torch.einsum("bhqk,bhkd->bhqd", weights, v)
    return out, weights
''',
    name="a_att_softmax_no_max",
)

wrong(
    "ch02_attention",
    "attention",
    "returns (weights, out) instead of (out, weights)",
    '''
def attention(q, k, v):
    """q [B, H, Sq, Dh], k and v [B, H, Sk, Dh]
    -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])."""
    scale = 1.0 / math.sqrt(q.size(-1))
    attn = (q @ k.transpose(-2, -1) * scale).softmax(-1)
    return attn, attn @ v
''',
    name="a_att_returns_swapped",
)

wrong(
    "ch02_attention",
    "attention",
    "computes k @ q^T (scores laid out [Sk, Sq]): right only by accident, raises when "
    "Sq != Sk and gives transposed weights otherwise",
    '''
def attention(q, k, v):
    """q [B, H, Sq, Dh], k and v [B, H, Sk, Dh]
    -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])."""
    d = q.size(-1)
    scores = k @ q.transpose(-2, -1) / math.sqrt(d)
    weights = scores.softmax(dim=-1)
    return weights @ v, weights
''',
    name="a_att_k_times_qT",
)

wrong(
    "ch02_attention",
    "attention",
    "scales q in place (q /= sqrt(d)), modifying the caller's tensor",
    '''
def attention(q, k, v):
    """q [B, H, Sq, Dh], k and v [B, H, Sk, Dh]
    -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])."""
    q /= math.sqrt(q.size(-1))   # scale the queries first, cheaper than the scores
    weights = (q @ k.transpose(-2, -1)).softmax(dim=-1)
    return weights @ v, weights
''',
    name="a_att_inplace_scale_q",
)

wrong(
    "ch02_attention",
    "attention",
    "does the softmax in float32 for stability and returns those float32 weights "
    "(float64 inputs get float32 weights)",
    '''
def attention(q, k, v):
    """q [B, H, Sq, Dh], k and v [B, H, Sk, Dh]
    -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    weights = torch.softmax(scores.float(), dim=-1)  # softmax in fp32 is safer
    out = weights.to(v.dtype) @ v
    return out, weights
''',
    name="a_att_weights_fp32",
)

wrong(
    "ch02_attention",
    "attention",
    "forgets the scaling: softmax(q k^T) with no division by sqrt(d_k)",
    '''
def attention(q, k, v):
    """q [B, H, Sq, Dh], k and v [B, H, Sk, Dh]
    -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])."""
    scores = torch.matmul(q, k.transpose(-1, -2))
    weights = torch.nn.functional.softmax(scores, dim=-1)
    output = torch.matmul(weights, v)
    return output, weights
''',
    name="a_att_no_scale",
)

right(
    "ch02_attention",
    "attention",
    '''
def attention(q, k, v):
    """q [B, H, Sq, Dh], k and v [B, H, Sk, Dh]
    -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])."""
    s = torch.einsum("bhid,bhjd->bhij", q, k) * q.shape[-1] ** -0.5
    s = s - s.max(dim=-1, keepdim=True).values   # stable softmax by hand
    w = s.exp()
    w = w / w.sum(dim=-1, keepdim=True)
    return torch.einsum("bhij,bhjd->bhid", w, v), w
''',
    name="a_att_einsum_manual_softmax",
)

right(
    "ch02_attention",
    "attention",
    '''
def attention(q, k, v):
    """q [B, H, Sq, Dh], k and v [B, H, Sk, Dh]
    -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])."""
    *lead, sq, dh = q.shape
    sk = k.shape[-2]
    # fold batch and heads into one axis and use bmm
    q3 = (q / math.sqrt(dh)).reshape(-1, sq, dh)
    k3 = k.reshape(-1, sk, dh)
    v3 = v.reshape(-1, sk, v.shape[-1])
    w = torch.bmm(q3, k3.transpose(1, 2)).softmax(dim=-1)
    out = torch.bmm(w, v3)
    return out.reshape(*lead, sq, v.shape[-1]), w.reshape(*lead, sq, sk)
''',
    name="a_att_bmm_folded",
)

# ---------------------------------------------------------------------------
# ch02_attention: attention_entropy
# ---------------------------------------------------------------------------

wrong(
    "ch02_attention",
    "attention_entropy",
    "w * log(w) with no care for zeros: 0 * log 0 = NaN on rows with zero weights",
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
    "adds eps = 1e-6 inside the log: biases every row by about Sk * 1e-6 (visible on "
    "4096-key rows)",
    '''
def attention_entropy(weights):
    """weights [..., Sq, Sk] -> entropy per query [..., Sq], in nats."""
    eps = 1e-6  # avoid log(0)
    return -(weights * torch.log(weights + eps)).sum(dim=-1)
''',
    name="a_ent_eps_1e6",
)

wrong(
    "ch02_attention",
    "attention_entropy",
    "uses log2 (bits) instead of the natural log (nats)",
    '''
def attention_entropy(weights):
    """weights [..., Sq, Sk] -> entropy per query [..., Sq], in nats."""
    plogp = weights * torch.log2(weights)
    plogp = torch.nan_to_num(plogp, nan=0.0)   # 0 * log 0 = 0
    return -plogp.sum(-1)
''',
    name="a_ent_log2_bits",
)

wrong(
    "ch02_attention",
    "attention_entropy",
    "sums over dim=-2 (the queries) instead of the keys",
    '''
def attention_entropy(weights):
    """weights [..., Sq, Sk] -> entropy per query [..., Sq], in nats."""
    return -torch.xlogy(weights, weights).sum(dim=-2)
''',
    name="a_ent_sum_wrong_axis",
)

wrong(
    "ch02_attention",
    "attention_entropy",
    "replaces the zeros by 1 in place (weights[weights == 0] = 1) to dodge log 0: "
    "values right, but the caller's weights are modified",
    '''
def attention_entropy(weights):
    """weights [..., Sq, Sk] -> entropy per query [..., Sq], in nats."""
    weights[weights == 0] = 1.0   # log(1) = 0 so these terms vanish
    return -(weights * weights.log()).sum(-1)
''',
    name="a_ent_inplace_zero_to_one",
)

wrong(
    "ch02_attention",
    "attention_entropy",
    "keeps the last axis (keepdim=True): shape [..., Sq, 1] instead of [..., Sq]",
    '''
def attention_entropy(weights):
    """weights [..., Sq, Sk] -> entropy per query [..., Sq], in nats."""
    h = torch.special.entr(weights)
    return h.sum(dim=-1, keepdim=True)
''',
    name="a_ent_keepdim",
)

wrong(
    "ch02_attention",
    "attention_entropy",
    "averages over the keys (mean) instead of summing",
    '''
def attention_entropy(weights):
    """weights [..., Sq, Sk] -> entropy per query [..., Sq], in nats."""
    terms = -torch.xlogy(weights, weights)
    return terms.mean(dim=-1)
''',
    name="a_ent_mean_not_sum",
)

right(
    "ch02_attention",
    "attention_entropy",
    '''
def attention_entropy(weights):
    """weights [..., Sq, Sk] -> entropy per query [..., Sq], in nats."""
    return torch.special.entr(weights).sum(-1)
''',
    name="a_ent_special_entr",
)

right(
    "ch02_attention",
    "attention_entropy",
    '''
def attention_entropy(weights):
    """weights [..., Sq, Sk] -> entropy per query [..., Sq], in nats."""
    # clamp only inside the log: where w == 0 the product is 0 * finite = 0
    tiny = torch.finfo(weights.dtype).tiny
    logw = torch.log(weights.clamp(min=tiny))
    return -(weights * logw).sum(dim=-1)
''',
    name="a_ent_clamp_tiny",
)

# ---------------------------------------------------------------------------
# ch03_masks: causal_mask
# ---------------------------------------------------------------------------

wrong(
    "ch03_masks",
    "causal_mask",
    "upper triangle (triu) instead of lower: each query sees itself and the future",
    '''
def causal_mask(size):
    """-> bool [1, 1, S, S], True where key j <= query i."""
    m = torch.triu(torch.ones(size, size, dtype=torch.bool, device=device))
    return m.unsqueeze(0).unsqueeze(0)
''',
    name="a_causal_triu",
)

wrong(
    "ch03_masks",
    "causal_mask",
    "strictly lower triangle (diagonal=-1): a query may not attend to itself, and query "
    "0 sees nothing",
    '''
def causal_mask(size):
    """-> bool [1, 1, S, S], True where key j <= query i."""
    ones = torch.ones(size, size, dtype=torch.bool, device=device)
    return torch.tril(ones, diagonal=-1)[None, None, :, :]
''',
    name="a_causal_strict_past",
)

wrong(
    "ch03_masks",
    "causal_mask",
    "returns a float 1/0 tensor (torch.ones default dtype) instead of bool",
    '''
def causal_mask(size):
    """-> bool [1, 1, S, S], True where key j <= query i."""
    mask = torch.tril(torch.ones(size, size, device=device))
    return mask.view(1, 1, size, size)
''',
    name="a_causal_float_mask",
)

wrong(
    "ch03_masks",
    "causal_mask",
    "ignore-mask convention (True = masked, nn.MultiheadAttention's): triu(1) marks "
    "the future True",
    '''
def causal_mask(size):
    """-> bool [1, 1, S, S], True where key j <= query i."""
    # mask out future positions
    future = torch.triu(torch.ones(size, size, device=device), diagonal=1).bool()
    return future[None, None]
''',
    name="a_causal_ignore_convention",
)

wrong(
    "ch03_masks",
    "causal_mask",
    "indexes with [:, None, None, :] (the padding-mask pattern): shape [S, 1, 1, S]",
    '''
def causal_mask(size):
    """-> bool [1, 1, S, S], True where key j <= query i."""
    mask = torch.ones(size, size, dtype=torch.bool, device=device).tril()
    return mask[:, None, None, :]
''',
    name="a_causal_padding_shape",
)

right(
    "ch03_masks",
    "causal_mask",
    '''
def causal_mask(size):
    """-> bool [1, 1, S, S], True where key j <= query i."""
    pos = torch.arange(size, device=device)
    keep = pos[:, None] >= pos[None, :]    # query i (rows) >= key j (columns)
    return keep.reshape(1, 1, size, size)
''',
    name="a_causal_arange_compare",
)

right(
    "ch03_masks",
    "causal_mask",
    '''
def causal_mask(size):
    """-> bool [1, 1, S, S], True where key j <= query i."""
    future = torch.ones(size, size, device=device, dtype=torch.bool).triu(diagonal=1)
    return torch.logical_not(future).unsqueeze(0)   # [1, S, S] broadcasts the same
''',
    name="a_causal_not_future_3d",
)

# ---------------------------------------------------------------------------
# ch03_masks: padding_mask
# ---------------------------------------------------------------------------

wrong(
    "ch03_masks",
    "padding_mask",
    "hard-codes pad id 0 (tokens != 0) and ignores pad_id",
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
    "True on the padding (tokens == pad_id): the ignore convention instead of keep",
    '''
def padding_mask(tokens, pad_id):
    """tokens [B, S] -> bool [B, 1, 1, S], True on real tokens."""
    is_pad = tokens == pad_id
    return is_pad[:, None, None, :]
''',
    name="a_pad_true_on_pad",
)

wrong(
    "ch03_masks",
    "padding_mask",
    "returns [B, 1, S] (one singleton axis too few): the batch axis lines up with the "
    "heads",
    '''
def padding_mask(tokens, pad_id):
    """tokens [B, S] -> bool [B, 1, 1, S], True on real tokens."""
    return (tokens != pad_id).unsqueeze(1)
''',
    name="a_pad_rank3",
)

wrong(
    "ch03_masks",
    "padding_mask",
    "puts the sequence on the query axis ([B, 1, S, 1]): masks padded queries, not "
    "padded keys",
    '''
def padding_mask(tokens, pad_id):
    """tokens [B, S] -> bool [B, 1, 1, S], True on real tokens."""
    B, S = tokens.shape
    return tokens.ne(pad_id).view(B, 1, S, 1)
''',
    name="a_pad_query_axis",
)

wrong(
    "ch03_masks",
    "padding_mask",
    "assumes right padding: counts the real tokens and keeps the first `length` "
    "positions, wrong for a left-padded batch",
    '''
def padding_mask(tokens, pad_id):
    """tokens [B, S] -> bool [B, 1, 1, S], True on real tokens."""
    lengths = (tokens != pad_id).sum(dim=1)                 # [B]
    positions = torch.arange(tokens.size(1), device=tokens.device)
    keep = positions[None, :] < lengths[:, None]            # [B, S]
    return keep[:, None, None, :]
''',
    name="a_pad_assumes_right_padding",
)

wrong(
    "ch03_masks",
    "padding_mask",
    "returns a float 1.0/0.0 mask (.float()) instead of bool",
    '''
def padding_mask(tokens, pad_id):
    """tokens [B, S] -> bool [B, 1, 1, S], True on real tokens."""
    mask = (tokens != pad_id).float()
    return mask.unsqueeze(1).unsqueeze(1)
''',
    name="a_pad_float",
)

right(
    "ch03_masks",
    "padding_mask",
    '''
def padding_mask(tokens, pad_id):
    """tokens [B, S] -> bool [B, 1, 1, S], True on real tokens."""
    B, S = tokens.shape
    return torch.logical_not(tokens.eq(pad_id)).reshape(B, 1, 1, S)
''',
    name="a_pad_logical_not_eq",
)

# ---------------------------------------------------------------------------
# ch03_masks: masked_attention
# ---------------------------------------------------------------------------

wrong(
    "ch03_masks",
    "masked_attention",
    "fills with -1e9: overflows float16 (masked_fill raises)",
    '''
def masked_attention(q, k, v, mask):
    """q [B, H, Sq, Dh], k and v [B, H, Sk, Dh], mask bool broadcastable to
    [B, H, Sq, Sk] (True = attend)
    -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    scores = scores.masked_fill(mask == False, -1e9)
    weights = torch.softmax(scores, dim=-1)
    weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return weights @ v, weights
''',
    name="a_matt_fill_minus_1e9",
)

wrong(
    "ch03_masks",
    "masked_attention",
    "fills with -inf and does nothing about queries with no key: their weights are NaN",
    '''
def masked_attention(q, k, v, mask):
    """q [B, H, Sq, Dh], k and v [B, H, Sk, Dh], mask bool broadcastable to
    [B, H, Sq, Sk] (True = attend)
    -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])."""
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return torch.matmul(weights, v), weights
''',
    name="a_matt_neg_inf_nan",
)

wrong(
    "ch03_masks",
    "masked_attention",
    "fills where the mask is True (masked_fill(mask, ...)): attends exactly to the keys "
    "it should not",
    '''
def masked_attention(q, k, v, mask):
    """q [B, H, Sq, Dh], k and v [B, H, Sk, Dh], mask bool broadcastable to
    [B, H, Sq, Sk] (True = attend)
    -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])."""
    neg = torch.finfo(q.dtype).min
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
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
    "zeroes the rows where mask.all(-1) (every key kept) instead of ~mask.any(-1) (no "
    "key kept): unmasked queries get zero weights",
    '''
def masked_attention(q, k, v, mask):
    """q [B, H, Sq, Dh], k and v [B, H, Sk, Dh], mask bool broadcastable to
    [B, H, Sq, Sk] (True = attend)
    -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = scores.softmax(dim=-1)
    # rows that are completely masked -> all zeros
    fully = mask.all(dim=-1, keepdim=True)
    weights = weights.masked_fill(fully, 0.0)
    return weights @ v, weights
''',
    name="a_matt_zero_rows_all_instead_of_any",
)

wrong(
    "ch03_masks",
    "masked_attention",
    "multiplies the softmax weights by the mask afterwards, without renormalising: "
    "rows no longer sum to 1",
    '''
def masked_attention(q, k, v, mask):
    """q [B, H, Sq, Dh], k and v [B, H, Sk, Dh], mask bool broadcastable to
    [B, H, Sq, Sk] (True = attend)
    -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    weights = scores.softmax(dim=-1)
    weights = weights * mask        # zero out what is masked
    return weights @ v, weights
''',
    name="a_matt_mask_after_softmax",
)

wrong(
    "ch03_masks",
    "masked_attention",
    "fills the masked scores with 0 instead of a large negative value: masked keys "
    "still get weight",
    '''
def masked_attention(q, k, v, mask):
    """q [B, H, Sq, Dh], k and v [B, H, Sk, Dh], mask bool broadcastable to
    [B, H, Sq, Sk] (True = attend)
    -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])."""
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(q.size(-1))
    scores = scores.masked_fill(~mask, 0)
    weights = scores.softmax(-1)
    return torch.einsum("bhqk,bhkd->bhqd", weights, v), weights
''',
    name="a_matt_fill_zero",
)

wrong(
    "ch03_masks",
    "masked_attention",
    "transposes the mask's last two axes (thinking it is [Sk, Sq]): a causal mask "
    "becomes anti-causal, a padding mask masks queries",
    '''
def masked_attention(q, k, v, mask):
    """q [B, H, Sq, Dh], k and v [B, H, Sk, Dh], mask bool broadcastable to
    [B, H, Sq, Sk] (True = attend)
    -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])."""
    keep = mask.transpose(-2, -1)   # line the mask up with k^T
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    scores = scores.masked_fill(~keep, torch.finfo(scores.dtype).min)
    weights = scores.softmax(dim=-1)
    weights = weights.masked_fill(~keep.any(dim=-1, keepdim=True), 0.0)
    return weights @ v, weights
''',
    name="a_matt_mask_transposed",
)

wrong(
    "ch03_masks",
    "masked_attention",
    "inverts the mask in place with mask.logical_not_(): the caller's mask is flipped",
    '''
def masked_attention(q, k, v, mask):
    """q [B, H, Sq, Dh], k and v [B, H, Sk, Dh], mask bool broadcastable to
    [B, H, Sq, Sk] (True = attend)
    -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])."""
    masked_out = mask.logical_not_()    # True where we must not attend
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    scores = scores.masked_fill(masked_out, torch.finfo(scores.dtype).min)
    weights = scores.softmax(dim=-1)
    weights = weights.masked_fill(masked_out.all(dim=-1, keepdim=True), 0.0)
    return weights @ v, weights
''',
    name="a_matt_inplace_logical_not",
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
    # finite fill: a query with no key gets a uniform row, which is allowed
    scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights
''',
    name="a_matt_finite_fill_uniform_rows",
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
    scores = torch.where(mask, scores, float("-inf"))
    weights = scores.softmax(dim=-1)
    weights = torch.nan_to_num(weights, nan=0.0)   # rows with no key: 0/0 -> 0
    return weights @ v, weights
''',
    name="a_matt_neg_inf_nan_to_num",
)

right(
    "ch03_masks",
    "masked_attention",
    '''
def masked_attention(q, k, v, mask):
    """q [B, H, Sq, Dh], k and v [B, H, Sk, Dh], mask bool broadcastable to
    [B, H, Sq, Sk] (True = attend)
    -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])."""
    dtype = q.dtype
    s = torch.einsum("bhid,bhjd->bhij", q.float(), k.float()) / math.sqrt(q.shape[-1])
    # softmax by hand in float32, only over the kept keys
    s = s.masked_fill(~mask, float("-inf"))
    m = s.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)   # row with no key
    e = torch.exp(s - m)                                      # exp(-inf) = 0
    total = e.sum(dim=-1, keepdim=True)
    w = e / torch.where(total > 0, total, torch.ones_like(total))
    out = torch.einsum("bhij,bhjd->bhid", w, v.float())
    return out.to(dtype), w.to(dtype)
''',
    name="a_matt_manual_softmax_fp32",
)

# ---------------------------------------------------------------------------
# ch03_bughunt: self_attention
# ---------------------------------------------------------------------------

wrong(
    "ch03_bughunt",
    "self_attention",
    "fixes the einsum, the projections and the fill value but still divides by "
    "sqrt(embed_size)",
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
        values = self.values(values)
        keys = self.keys(keys)
        query = self.queries(query)

        # 分割多头
        values = values.reshape(N, value_len, self.heads, self.head_dim)
        keys = keys.reshape(N, key_len, self.heads, self.head_dim)
        query = query.reshape(N, query_len, self.heads, self.head_dim)

        # 计算 attention scores
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
    "fixes the einsum, the projections and the scale but keeps the -1e20 fill, which "
    "overflows float16",
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

        # [N, L, H, D] -> [N, H, L, D]
        values, keys, query = (t.transpose(1, 2) for t in (values, keys, query))

        energy = torch.einsum("bhqd, bhkd -> bhqk", [query, keys])
        energy = energy / (self.head_dim ** (1/2))

        if mask is not None:
            energy = energy.masked_fill(mask == 0, float("-1e20"))

        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("bhql, bhlv -> bhqv", [attention, values])
        out = out.transpose(1, 2).reshape(N, query_len, self.heads * self.head_dim)
        return self.fc_out(out)
""",
    name="a_bh_fill_left",
)

wrong(
    "ch03_bughunt",
    "self_attention",
    "fixes the einsum, the scale and the fill but keeps the shared per-head "
    "Linear(head_dim, head_dim) projections",
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

        # 计算 attention scores (letters now say what the axes really are)
        energy = torch.einsum("nqhd,nkhd->nhqk", [query, keys])

        # 缩放
        energy = energy / math.sqrt(self.head_dim)

        # 应用 mask（可选）
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)

        # softmax 得到注意力权重
        attention = torch.softmax(energy, dim=3)

        # 加权求和
        out = torch.einsum("nhqk,nkhd->nqhd", [attention, values])

        # 拼接多头
        out = out.reshape(N, query_len, self.heads * self.head_dim)

        return self.fc_out(out)
""",
    name="a_bh_shared_linear_left",
)

wrong(
    "ch03_bughunt",
    "self_attention",
    "half-fixes the einsum: transposes q and k for the scores but the second einsum "
    "still reads the values as [N, L, H, Dh] with the seed's letters (raises or mixes "
    "heads and tokens)",
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

        # heads in front for the scores
        q = query.permute(0, 2, 1, 3)
        k = keys.permute(0, 2, 1, 3)
        energy = torch.einsum("bhqd, bhkd -> bhqk", [q, k])
        energy = energy / math.sqrt(self.head_dim)

        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)

        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("bhql, bhlv -> bhqv", [attention, values])
        out = out.reshape(N, query_len, self.heads * self.head_dim)
        return self.fc_out(out)
""",
    name="a_bh_einsum_half_fixed",
)

wrong(
    "ch03_bughunt",
    "self_attention",
    "replaces the -1e20 fill by float('-inf'): fits float16 but a fully masked "
    "sequence gives NaN",
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
        values = self.values(values).view(N, value_len, self.heads, self.head_dim)
        keys = self.keys(keys).view(N, key_len, self.heads, self.head_dim)
        query = self.queries(query).view(N, query_len, self.heads, self.head_dim)

        energy = torch.einsum("nqhd,nkhd->nhqk", query, keys) / math.sqrt(self.head_dim)
        if mask is not None:
            # -inf works in every dtype
            energy = energy.masked_fill(mask == 0, float("-inf"))
        attention = torch.softmax(energy, dim=-1)
        out = torch.einsum("nhqk,nkhd->nqhd", attention, values)
        return self.fc_out(out.reshape(N, query_len, self.embed_size))
""",
    name="a_bh_fill_neg_inf",
)

wrong(
    "ch03_bughunt",
    "self_attention",
    "divides the scores by head_dim instead of sqrt(head_dim)",
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
        # 缩放 by the head size, not embed_size
        energy = energy / self.head_dim
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("nhqk,nkhd->nqhd", [attention, values])
        out = out.reshape(N, query_len, self.heads * self.head_dim)
        return self.fc_out(out)
""",
    name="a_bh_scale_no_sqrt",
)

wrong(
    "ch03_bughunt",
    "self_attention",
    "flips the mask test to mask == 1 while fixing the fill: masks the kept keys and "
    "keeps the masked ones",
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
        energy = torch.einsum("nqhd,nkhd->nhqk", [query, keys]) / math.sqrt(self.head_dim)
        if mask is not None:
            fill = torch.finfo(energy.dtype).min
            energy = energy.masked_fill(mask == 1, fill)
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("nhqk,nkhd->nqhd", [attention, values])
        return self.fc_out(out.reshape(N, query_len, self.heads * self.head_dim))
""",
    name="a_bh_mask_flipped",
)

wrong(
    "ch03_bughunt",
    "self_attention",
    "projects first (fixed) but then reshapes straight to [N, heads, L, head_dim] "
    "(no transpose): heads get chunks of tokens",
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

        # project, then split into [N, heads, len, head_dim] so the seed's einsum fits
        values = self.values(values).reshape(N, self.heads, value_len, self.head_dim)
        keys = self.keys(keys).reshape(N, self.heads, key_len, self.head_dim)
        query = self.queries(query).reshape(N, self.heads, query_len, self.head_dim)

        energy = torch.einsum("bhqd, bhkd -> bhqk", [query, keys])
        energy = energy / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("bhql, bhlv -> bhqv", [attention, values])
        out = out.reshape(N, query_len, self.heads * self.head_dim)
        return self.fc_out(out)
""",
    name="a_bh_split_no_transpose",
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
        # project the whole embedding, then split
        self.queries = nn.Linear(embed_size, embed_size)
        self.keys = nn.Linear(embed_size, embed_size)
        self.values = nn.Linear(embed_size, embed_size)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def _split(self, x):
        N, L, _ = x.shape
        return x.view(N, L, self.heads, self.head_dim).transpose(1, 2)  # [N, H, L, d]

    def forward(self, values, keys, query, mask):
        N, query_len, _ = query.shape
        q = self._split(self.queries(query))
        k = self._split(self.keys(keys))
        v = self._split(self.values(values))
        energy = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)   # [N, H, Lq, Lk]
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = energy.softmax(dim=-1)
        out = (attention @ v).transpose(1, 2).reshape(N, query_len, self.embed_size)
        return self.fc_out(out)
""",
    name="a_bh_matmul_rewrite",
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

        # 线性变换生成 Q, K, V  (whole embedding -> all heads)
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)

        # 输出投影
        self.fc_out = nn.Linear(heads * self.head_dim, embed_size)

    def forward(self, values, keys, query, mask):
        N = query.shape[0]
        value_len, key_len, query_len = values.shape[1], keys.shape[1], query.shape[1]

        # 线性变换
        values = self.values(values)
        keys = self.keys(keys)
        query = self.queries(query)

        # 分割多头, heads first
        values = values.reshape(N, value_len, self.heads, self.head_dim).permute(0, 2, 1, 3)
        keys = keys.reshape(N, key_len, self.heads, self.head_dim).permute(0, 2, 1, 3)
        query = query.reshape(N, query_len, self.heads, self.head_dim).permute(0, 2, 1, 3)

        # 计算 attention scores
        # einsum 解释：b=batch, h=heads, q=query_len, k=key_len, d=head_dim
        energy = torch.einsum("bhqd, bhkd -> bhqk", [query, keys])

        # 缩放
        energy = energy / (self.head_dim ** (1/2))

        # 应用 mask（可选） -- in float32, where -1e20 fits
        in_dtype = energy.dtype
        energy = energy.float()
        if mask is not None:
            energy = energy.masked_fill(mask == 0, float("-1e20"))

        # softmax 得到注意力权重
        attention = torch.softmax(energy, dim=3).to(in_dtype)

        # 加权求和
        out = torch.einsum("bhql, bhlv -> bhqv", [attention, values])

        # 拼接多头
        out = out.permute(0, 2, 1, 3).reshape(N, query_len, self.heads * self.head_dim)

        return self.fc_out(out)
""",
    name="a_bh_permute_softmax_fp32",
)

# ---------------------------------------------------------------------------
# ch04_blocks: feed_forward
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
        self.act = nn.GELU()
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        """x [..., D] -> [..., D]."""
        return self.fc2(self.drop(self.act(self.fc1(x))))
''',
    name="a_ff_gelu",
)

wrong(
    "ch04_blocks",
    "feed_forward",
    "dropout on the input, before the first Linear, instead of on the hidden layer",
    '''
class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        """x [..., D] -> [..., D]."""
        x = self.dropout(x)
        return self.w_2(torch.relu(self.w_1(x)))
''',
    name="a_ff_dropout_on_input",
)

wrong(
    "ch04_blocks",
    "feed_forward",
    "a ReLU after the second Linear as well (the output can never be negative)",
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
    name="a_ff_relu_after_second",
)

wrong(
    "ch04_blocks",
    "feed_forward",
    "hidden width hard-coded to 4 * d_model instead of the d_ff argument",
    '''
class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        hidden = 4 * d_model  # the paper's expansion factor
        self.linear1 = nn.Linear(d_model, hidden)
        self.linear2 = nn.Linear(hidden, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        """x [..., D] -> [..., D]."""
        h = torch.relu(self.linear1(x))
        return self.linear2(self.dropout(h))
''',
    name="a_ff_hidden_4d",
)

wrong(
    "ch04_blocks",
    "feed_forward",
    "F.dropout(h, self.p) without training=self.training: drops in eval mode too",
    '''
import torch.nn.functional as F

class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.lin1 = nn.Linear(d_model, d_ff)
        self.lin2 = nn.Linear(d_ff, d_model)
        self.p = dropout

    def forward(self, x):
        """x [..., D] -> [..., D]."""
        h = F.relu(self.lin1(x))
        h = F.dropout(h, self.p)
        return self.lin2(h)
''',
    name="a_ff_functional_dropout_eval",
)

wrong(
    "ch04_blocks",
    "feed_forward",
    "dropout rate hard-coded to 0.1 (nn.Dropout(0.1)) instead of the `dropout` "
    "argument",
    '''
class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.relu = nn.ReLU()
        self.dropout = nn.Dropout(0.1)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        """x [..., D] -> [..., D]."""
        return self.linear2(self.dropout(self.relu(self.linear1(x))))
''',
    name="a_ff_dropout_constant",
)

wrong(
    "ch04_blocks",
    "feed_forward",
    "adds the residual inside the feed-forward (returns x + FFN(x))",
    '''
class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        """x [..., D] -> [..., D]."""
        out = self.linear2(self.dropout(torch.relu(self.linear1(x))))
        return x + out   # residual connection
''',
    name="a_ff_residual_inside",
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
    name="a_ff_sequential",
)

right(
    "ch04_blocks",
    "feed_forward",
    '''
import torch.nn.functional as F

class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.expand = nn.Linear(d_model, d_ff)
        self.contract = nn.Linear(d_ff, d_model)
        self.rate = dropout

    def forward(self, x):
        """x [..., D] -> [..., D]."""
        hidden = self.expand(x).clamp(min=0)          # max(0, x W1 + b1)
        hidden = F.dropout(hidden, p=self.rate, training=self.training)
        return self.contract(hidden)
''',
    name="a_ff_clamp_functional_dropout",
)

# ---------------------------------------------------------------------------
# ch04_blocks: encoder_block
# ---------------------------------------------------------------------------

wrong(
    "ch04_blocks",
    "encoder_block",
    "the seed's placement: dropout after the LayerNorm (Dropout(LN(x + Sublayer(x)))) "
    "in Post-LN",
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
        x = self.dropout(self.norm1(x + self.attention(x, x, x, mask=mask)))
        return self.dropout(self.norm2(x + self.feed_forward(x)))
''',
    name="a_enc_dropout_after_norm",
)

wrong(
    "ch04_blocks",
    "encoder_block",
    "Post-LN: the feed-forward's residual adds the block's original input x instead of "
    "the output of the attention sublayer",
    '''
class EncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.mha = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.ln1 = nn.LayerNorm(d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.drop1 = nn.Dropout(dropout)
        self.drop2 = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        """x [B, S, D], mask bool broadcastable to [B, H, S, S] -> [B, S, D]."""
        if self.norm_first:
            a = self.ln1(x)
            x = x + self.drop1(self.mha(a, a, a, mask=mask))
            return x + self.drop2(self.ffn(self.ln2(x)))
        attn_out = self.ln1(x + self.drop1(self.mha(x, x, x, mask=mask)))
        out = self.ln2(x + self.drop2(self.ffn(attn_out)))
        return out
''',
    name="a_enc_postln_residual_from_input",
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
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.norm = nn.LayerNorm(d_model)   # same normalisation everywhere
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        """x [B, S, D], mask bool broadcastable to [B, H, S, S] -> [B, S, D]."""
        if self.norm_first:
            h = self.norm(x)
            x = x + self.dropout1(self.self_attn(h, h, h, mask=mask))
            return x + self.dropout2(self.ff(self.norm(x)))
        x = self.norm(x + self.dropout1(self.self_attn(x, x, x, mask=mask)))
        return self.norm(x + self.dropout2(self.ff(x)))
''',
    name="a_enc_shared_norm",
)

wrong(
    "ch04_blocks",
    "encoder_block",
    "the two arrangements swapped: norm_first=False runs Pre-LN and True runs Post-LN",
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
        if not self.norm_first:
            # normalise first, like the paper
            h = self.norm1(x)
            x = x + self.dropout1(self.self_attn(h, h, h, mask=mask))
            return x + self.dropout2(self.ff(self.norm2(x)))
        x = self.norm1(x + self.dropout1(self.self_attn(x, x, x, mask=mask)))
        return self.norm2(x + self.dropout2(self.ff(x)))
''',
    name="a_enc_norm_first_swapped",
)

wrong(
    "ch04_blocks",
    "encoder_block",
    "Pre-LN residual adds the normalised stream (h + Sublayer(h) with h = LN(x)) "
    "instead of x",
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
        return self.norm2(x + self.dropout2(self.ff(x)))
''',
    name="a_enc_preln_residual_normalised",
)

wrong(
    "ch04_blocks",
    "encoder_block",
    "builds the attention without dropout=dropout (its default 0.0): the attention "
    "weights are never dropped",
    '''
class EncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.norm_attn = nn.LayerNorm(d_model)
        self.norm_ff = nn.LayerNorm(d_model)
        self.drop_attn = nn.Dropout(dropout)
        self.drop_ff = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        """x [B, S, D], mask bool broadcastable to [B, H, S, S] -> [B, S, D]."""
        if self.norm_first:
            h = self.norm_attn(x)
            x = x + self.drop_attn(self.attn(h, h, h, mask=mask))
            return x + self.drop_ff(self.ff(self.norm_ff(x)))
        x = self.norm_attn(x + self.drop_attn(self.attn(x, x, x, mask=mask)))
        return self.norm_ff(x + self.drop_ff(self.ff(x)))
''',
    name="a_enc_attn_no_dropout",
)

wrong(
    "ch04_blocks",
    "encoder_block",
    "in-place residual adds (x += ...) in Pre-LN: modifies the caller's x",
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
    "BatchNorm1d (over batch and positions, transposed to [B, D, S]) instead of "
    "LayerNorm",
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
        # BatchNorm1d wants [B, C, L]
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
    "inverts the mask before passing it on (~mask, the nn.MultiheadAttention "
    "convention): attends only to the padding",
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
        attn_mask = None if mask is None else ~mask   # True = position to ignore
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.dropout1(self.self_attn(h, h, h, mask=attn_mask))
            return x + self.dropout2(self.ff(self.norm2(x)))
        x = self.norm1(x + self.dropout1(self.self_attn(x, x, x, mask=attn_mask)))
        return self.norm2(x + self.dropout2(self.ff(x)))
''',
    name="a_enc_mask_inverted",
)

wrong(
    "ch04_blocks",
    "encoder_block",
    "Post-LN with dropout on the residual sum (LN(Dropout(x + Sublayer(x)))): the "
    "input path is dropped too",
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
            return x + self.dropout2(self.ff(self.norm2(x)))
        x = self.norm1(self.dropout1(x + self.self_attn(x, x, x, mask=mask)))
        return self.norm2(self.dropout2(x + self.ff(x)))
''',
    name="a_enc_dropout_on_sum",
)

right(
    "ch04_blocks",
    "encoder_block",
    '''
import torch.nn.functional as F

class EncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.pre = norm_first
        self.p = dropout
        self.attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        # my own LayerNorm parameters, used with F.layer_norm
        self.g1 = nn.Parameter(torch.ones(d_model))
        self.b1 = nn.Parameter(torch.zeros(d_model))
        self.g2 = nn.Parameter(torch.ones(d_model))
        self.b2 = nn.Parameter(torch.zeros(d_model))

    def _sublayer(self, x, fn, gain, bias):
        shape = x.shape[-1:]
        if self.pre:
            out = fn(F.layer_norm(x, shape, gain, bias))
            return x + F.dropout(out, self.p, self.training)
        out = fn(x)
        return F.layer_norm(x + F.dropout(out, self.p, self.training), shape, gain, bias)

    def forward(self, x, mask=None):
        """x [B, S, D], mask bool broadcastable to [B, H, S, S] -> [B, S, D]."""
        x = self._sublayer(x, lambda h: self.attn(h, h, h, mask=mask), self.g1, self.b1)
        return self._sublayer(x, self.ffn, self.g2, self.b2)
''',
    name="a_enc_functional_layer_norm",
)

right(
    "ch04_blocks",
    "encoder_block",
    '''
class MyLayerNorm(nn.Module):
    """LayerNorm by hand: each token's features to mean 0, variance 1, then gain/bias."""

    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.gain = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return self.gain * (x - mean) / torch.sqrt(var + self.eps) + self.bias


class EncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.ln_a = MyLayerNorm(d_model)
        self.ln_b = MyLayerNorm(d_model)
        self.attention = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.feedforward = FeedForward(d_model, d_ff, dropout)
        self.drop_a = nn.Dropout(dropout)
        self.drop_b = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        """x [B, S, D], mask bool broadcastable to [B, H, S, S] -> [B, S, D]."""
        if self.norm_first:
            y = self.ln_a(x)
            y = x + self.drop_a(self.attention(y, y, y, mask=mask))
            z = y + self.drop_b(self.feedforward(self.ln_b(y)))
        else:
            y = self.ln_a(x + self.drop_a(self.attention(x, x, x, mask=mask)))
            z = self.ln_b(y + self.drop_b(self.feedforward(y)))
        return z
''',
    name="a_enc_handwritten_layernorm",
)
