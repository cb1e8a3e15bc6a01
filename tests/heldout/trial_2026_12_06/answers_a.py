from harness import right, wrong

# =====================================================================
# ch01_shapes / split_heads
# =====================================================================

# listed
wrong(
    "ch01_shapes",
    "split_heads",
    "views x straight to [B, H, S, Dh] (no [B, S, H, Dh] view then transpose), so each 'head' "
    "is cut from consecutive memory and mixes tokens",
    '''
def split_heads(x, n_heads):
    """[B, S, D] -> [B, H, S, Dh]."""
    B, S, D = x.shape
    Dh = D // n_heads
    return x.view(B, n_heads, S, Dh)  # [B, H, S, Dh]
''',
    name="split_heads_straight_view",
)

# unlisted
wrong(
    "ch01_shapes",
    "split_heads",
    "splits the last axis as [Dh, H] instead of [H, Dh] (view(B, S, Dh, H) then permute), so head h "
    "gets the strided features h, h+H, h+2H, ... instead of the contiguous block h*Dh:(h+1)*Dh",
    '''
def split_heads(x, n_heads):
    """[B, S, D] -> [B, H, S, Dh]."""
    b, s, d = x.size()
    head_dim = d // n_heads
    # [B, S, Dh, H] -> [B, H, S, Dh]
    return x.view(b, s, head_dim, n_heads).permute(0, 3, 1, 2)
''',
    name="split_heads_interleaved",
)

# unlisted
wrong(
    "ch01_shapes",
    "split_heads",
    "head size hard-coded as D // 8 (assumes 8 heads) instead of D // n_heads: raises (or "
    "returns the wrong shape) whenever n_heads != 8",
    '''
def split_heads(x, n_heads):
    """[B, S, D] -> [B, H, S, Dh]."""
    batch, seq, d_model = x.shape
    d_head = d_model // 8   # 8 heads like in the paper
    x = x.reshape(batch, seq, n_heads, d_head)
    return x.transpose(1, 2)
''',
    name="split_heads_hardcoded_8_heads",
)

# unlisted
wrong(
    "ch01_shapes",
    "split_heads",
    "forgets the transpose: chunks the features into heads and stacks them on axis 2, returning "
    "[B, S, H, Dh] instead of [B, H, S, Dh]",
    '''
def split_heads(x, n_heads):
    """[B, S, D] -> [B, H, S, Dh]."""
    heads = torch.chunk(x, n_heads, dim=-1)   # H pieces of [B, S, Dh]
    return torch.stack(heads, dim=2)
''',
    name="split_heads_stack_wrong_axis",
)

# unlisted
wrong(
    "ch01_shapes",
    "split_heads",
    "transposes the wrong axes: after view(B, S, H, Dh) it swaps axes 2 and 3 (transpose(-1, -2)), "
    "returning [B, S, Dh, H] instead of moving the heads in front of the sequence",
    '''
def split_heads(x, n_heads):
    """[B, S, D] -> [B, H, S, Dh]."""
    B, S, D = x.shape
    out = x.view(B, S, n_heads, D // n_heads)
    out = out.transpose(-1, -2)
    return out
''',
    name="split_heads_transpose_last_two",
)

# right
right(
    "ch01_shapes",
    "split_heads",
    '''
def split_heads(x, n_heads):
    """[B, S, D] -> [B, H, S, Dh]."""
    # unflatten the feature axis into (heads, head_dim), then put the heads second
    return x.unflatten(-1, (n_heads, -1)).permute(0, 2, 1, 3)
''',
    name="split_heads_unflatten_permute",
)

# right
right(
    "ch01_shapes",
    "split_heads",
    '''
def split_heads(x, n_heads):
    """[B, S, D] -> [B, H, S, Dh]."""
    pieces = x.chunk(n_heads, dim=-1)        # each [B, S, Dh]
    return torch.stack(pieces, dim=1)        # [B, H, S, Dh]
''',
    name="split_heads_chunk_stack",
)

# =====================================================================
# ch01_shapes / merge_heads
# =====================================================================

# listed
wrong(
    "ch01_shapes",
    "merge_heads",
    "no transpose before reshaping: reshapes [B, H, S, Dh] straight to [B, S, D], gluing "
    "different tokens' features together",
    '''
def merge_heads(x):
    """[B, H, S, Dh] -> [B, S, D]."""
    B, H, S, Dh = x.shape
    return x.reshape(B, S, H * Dh)
''',
    name="merge_heads_no_transpose",
)

# listed
wrong(
    "ch01_shapes",
    "merge_heads",
    "calls .view on the transposed (non-contiguous) tensor without .contiguous(): raises a "
    "RuntimeError for every input with H > 1 and S > 1",
    '''
def merge_heads(x):
    """[B, H, S, Dh] -> [B, S, D]."""
    B, H, S, Dh = x.shape
    x = x.transpose(1, 2)
    return x.view(B, S, H * Dh)
''',
    name="merge_heads_view_noncontiguous",
)

# unlisted
wrong(
    "ch01_shapes",
    "merge_heads",
    "permutes to [B, S, Dh, H] (permute(0, 2, 3, 1)) before flattening, so the heads are "
    "interleaved feature by feature instead of concatenated head after head",
    '''
def merge_heads(x):
    """[B, H, S, Dh] -> [B, S, D]."""
    b = x.shape[0]
    s = x.shape[2]
    return x.permute(0, 2, 3, 1).reshape(b, s, -1)
''',
    name="merge_heads_permute_interleaved",
)

# unlisted
wrong(
    "ch01_shapes",
    "merge_heads",
    "unpacks x.shape in the wrong order (b, s, h, d = x.shape, i.e. names the heads axis S and the "
    "sequence axis H), so the result is reshaped to [B, H, S*Dh] instead of [B, S, H*Dh]",
    '''
def merge_heads(x):
    """[B, H, S, Dh] -> [B, S, D]."""
    b, s, h, d = x.shape
    out = x.transpose(1, 2).contiguous()
    return out.view(b, s, h * d)
''',
    name="merge_heads_shape_unpack_order",
)

# unlisted
wrong(
    "ch01_shapes",
    "merge_heads",
    "concatenates the heads along the sequence axis (torch.cat(x.unbind(1), dim=1)), returning "
    "[B, H*S, Dh] instead of concatenating the features into [B, S, H*Dh]",
    '''
def merge_heads(x):
    """[B, H, S, Dh] -> [B, S, D]."""
    heads = x.unbind(dim=1)           # H tensors [B, S, Dh]
    return torch.cat(heads, dim=1)    # put them back together
''',
    name="merge_heads_cat_wrong_axis",
)

# unlisted
wrong(
    "ch01_shapes",
    "merge_heads",
    "transposes axes 1 and 3 (heads with head features) instead of 1 and 2 before reshaping: "
    "[B, Dh, S, H] is flattened to [B, S, D], mixing tokens and features",
    '''
def merge_heads(x):
    """[B, H, S, Dh] -> [B, S, D]."""
    B, H, S, Dh = x.shape
    return x.transpose(1, 3).reshape(B, S, H * Dh)
''',
    name="merge_heads_transpose_axes_1_3",
)

# right
right(
    "ch01_shapes",
    "merge_heads",
    '''
def merge_heads(x):
    """[B, H, S, Dh] -> [B, S, D]."""
    # concatenate every head's features, head 0 first
    return torch.cat(x.unbind(dim=1), dim=-1)
''',
    name="merge_heads_unbind_cat",
)

# right
right(
    "ch01_shapes",
    "merge_heads",
    '''
def merge_heads(x):
    """[B, H, S, Dh] -> [B, S, D]."""
    return x.permute(0, 2, 1, 3).contiguous().flatten(start_dim=2)
''',
    name="merge_heads_permute_flatten",
)

# =====================================================================
# ch01_shapes / multi_head_attention
# =====================================================================

# listed
wrong(
    "ch01_shapes",
    "multi_head_attention",
    "scales the scores by sqrt(d_model) instead of sqrt(d_head)",
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
        q = split_heads(self.q_proj(query), self.n_heads)
        k = split_heads(self.k_proj(key), self.n_heads)
        v = split_heads(self.v_proj(value), self.n_heads)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.d_model)
        attn = torch.softmax(scores, dim=-1)
        out = torch.matmul(attn, v)
        return self.out_proj(merge_heads(out))
''',
    name="multi_head_attention_scale_dmodel",
)

# unlisted
wrong(
    "ch01_shapes",
    "multi_head_attention",
    "splits the keys and values with the query's sequence length (view(B, S, H, Dh) with S taken "
    "from query): raises in cross-attention when Sk != Sq",
    """
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        assert d_model % n_heads == 0
        self.h = n_heads
        self.dk = d_model // n_heads
        self.wq = nn.Linear(d_model, d_model)
        self.wk = nn.Linear(d_model, d_model)
        self.wv = nn.Linear(d_model, d_model)
        self.wo = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        B, S, D = query.shape
        # [B, S, D] -> [B, H, S, dk]
        q = self.wq(query).view(B, S, self.h, self.dk).transpose(1, 2)
        k = self.wk(key).view(B, S, self.h, self.dk).transpose(1, 2)
        v = self.wv(value).view(B, S, self.h, self.dk).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.dk))
        att = att.softmax(dim=-1)
        y = att @ v                                   # [B, H, S, dk]
        y = y.transpose(1, 2).contiguous().view(B, S, D)
        return self.wo(y)
""",
    name="multi_head_attention_query_len_for_keys",
)

# unlisted
wrong(
    "ch01_shapes",
    "multi_head_attention",
    "copy-paste slip: the value input goes through the key projection (self.k_proj(value)); "
    "v_proj is created but never used",
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
        q = split_heads(self.q_proj(query), self.n_heads)   # [B, H, Sq, Dh]
        k = split_heads(self.k_proj(key), self.n_heads)     # [B, H, Sk, Dh]
        v = split_heads(self.k_proj(value), self.n_heads)   # [B, H, Sk, Dh]
        d_head = q.shape[-1]
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / d_head ** 0.5
        weights = scores.softmax(-1)
        out = torch.einsum("bhqk,bhkd->bhqd", weights, v)
        return self.out_proj(merge_heads(out))
''',
    name="multi_head_attention_value_through_key_proj",
)

# unlisted
wrong(
    "ch01_shapes",
    "multi_head_attention",
    "never applies the output projection: returns merge_heads(weights @ v) without out_proj "
    "(out_proj is created but unused)",
    """
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.W_q = nn.Linear(d_model, d_model)
        self.W_k = nn.Linear(d_model, d_model)
        self.W_v = nn.Linear(d_model, d_model)
        self.W_o = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        Q = split_heads(self.W_q(query), self.n_heads)
        K = split_heads(self.W_k(key), self.n_heads)
        V = split_heads(self.W_v(value), self.n_heads)
        scores = Q @ K.transpose(2, 3) / math.sqrt(self.d_head)
        A = torch.softmax(scores, dim=3)
        context = A @ V
        return merge_heads(context)   # [B, Sq, D]
""",
    name="multi_head_attention_no_out_proj",
)

# unlisted
wrong(
    "ch01_shapes",
    "multi_head_attention",
    "computes the softmax with dtype=torch.float32 'for stability' and never casts back: with "
    "float64 inputs the float32 weights are multiplied by float64 values and the matmul raises "
    "a dtype-mismatch error",
    """
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.query = nn.Linear(d_model, d_model)
        self.key = nn.Linear(d_model, d_model)
        self.value = nn.Linear(d_model, d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        q = split_heads(self.query(query), self.n_heads)
        k = split_heads(self.key(key), self.n_heads)
        v = split_heads(self.value(value), self.n_heads)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        # softmax in float32 for numerical stability
        weights = torch.softmax(scores, dim=-1, dtype=torch.float32)
        return self.proj(merge_heads(weights @ v))
""",
    name="multi_head_attention_softmax_float32",
)

# listed
wrong(
    "ch01_shapes",
    "multi_head_attention",
    "softmax over dim=-2 (the queries) instead of the last axis (the keys)",
    """
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        q = split_heads(self.q_proj(query), self.n_heads)
        k = split_heads(self.k_proj(key), self.n_heads)
        v = split_heads(self.v_proj(value), self.n_heads)
        scores = torch.einsum("bhid,bhjd->bhij", q, k) / math.sqrt(q.shape[-1])
        weights = scores.softmax(dim=-2)
        out = torch.einsum("bhij,bhjd->bhid", weights, v)
        return self.out_proj(merge_heads(out))
""",
    name="multi_head_attention_softmax_queries",
)

# unlisted
wrong(
    "ch01_shapes",
    "multi_head_attention",
    "scales twice: divides q by sqrt(Dh) after the projection and then divides the scores by "
    "sqrt(Dh) again, so the scores are divided by Dh overall",
    """
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.scale = self.head_dim ** -0.5
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        q = split_heads(self.q_proj(query), self.n_heads) * self.scale  # pre-scale q
        k = split_heads(self.k_proj(key), self.n_heads)
        v = split_heads(self.v_proj(value), self.n_heads)
        scores = (q @ k.transpose(-2, -1)) * self.scale
        weights = scores.softmax(dim=-1)
        return self.out_proj(merge_heads(weights @ v))
""",
    name="multi_head_attention_double_scale",
)

# unlisted
wrong(
    "ch01_shapes",
    "multi_head_attention",
    "projects the keys from the query input (self.k_proj(query)) instead of from key, i.e. "
    "assumes self-attention: the key argument is ignored, and with Sk != Sq the matmul raises",
    """
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        q = split_heads(self.q_proj(query), self.n_heads)
        k = split_heads(self.k_proj(query), self.n_heads)
        v = split_heads(self.v_proj(value), self.n_heads)
        d = q.size(-1)
        w = torch.softmax(q @ k.transpose(-1, -2) / d ** 0.5, dim=-1)
        return self.out_proj(merge_heads(w @ v))
""",
    name="multi_head_attention_keys_from_query",
)

# right
right(
    "ch01_shapes",
    "multi_head_attention",
    """
import torch.nn.functional as F

class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        assert d_model % n_heads == 0
        self.d_model = d_model
        self.n_heads = n_heads
        # one fused projection, rows stacked [q; k; v]
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        D = self.d_model
        w_q, w_k, w_v = self.qkv.weight.split(D, dim=0)
        b_q, b_k, b_v = self.qkv.bias.split(D, dim=0)
        # query, key and value are different tensors in cross-attention,
        # so each one uses its own slice of the fused weight
        q = split_heads(F.linear(query, w_q, b_q), self.n_heads)
        k = split_heads(F.linear(key, w_k, b_k), self.n_heads)
        v = split_heads(F.linear(value, w_v, b_v), self.n_heads)
        dh = q.shape[-1]
        scores = torch.einsum("bhqd,bhkd->bhqk", q * dh ** -0.5, k)
        weights = torch.softmax(scores, dim=-1)
        ctx = torch.einsum("bhqk,bhkd->bhqd", weights, v)
        return self.out(merge_heads(ctx))
""",
    name="multi_head_attention_fused_qkv_einsum",
)

# right
right(
    "ch01_shapes",
    "multi_head_attention",
    """
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.out_proj = nn.Linear(d_model, d_model)
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        Q = self.q_proj(query)
        K = self.k_proj(key)
        V = self.v_proj(value)
        heads = []
        # one head at a time, slicing its features
        for h in range(self.n_heads):
            sl = slice(h * self.d_head, (h + 1) * self.d_head)
            qh, kh, vh = Q[..., sl], K[..., sl], V[..., sl]     # [B, S, Dh]
            s = torch.bmm(qh, kh.transpose(1, 2)) / math.sqrt(self.d_head)
            a = torch.softmax(s, dim=-1)                       # [B, Sq, Sk]
            heads.append(torch.bmm(a, vh))                     # [B, Sq, Dh]
        return self.out_proj(torch.cat(heads, dim=-1))
""",
    name="multi_head_attention_loop_over_heads",
)

# =====================================================================
# ch02_attention / attention
# =====================================================================

# listed
wrong(
    "ch02_attention",
    "attention",
    "softmax over dim=2 (the queries axis) instead of the keys (last axis)",
    '''
def attention(q, k, v):
    """q [B, H, Sq, Dh], k and v [B, H, Sk, Dh]
    -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])."""
    scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(q.shape[3])
    weights = torch.softmax(scores, dim=2)
    out = torch.matmul(weights, v)
    return out, weights
''',
    name="attention_softmax_dim2",
)

# unlisted
wrong(
    "ch02_attention",
    "attention",
    "takes d_k from the wrong axis: k.size(-2) (the key length Sk) instead of the head size Dh, "
    "so the scores are divided by sqrt(Sk)",
    """
def attention(q, k, v):
    d_k = k.size(-2)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)
    weights = scores.softmax(dim=-1)
    return weights @ v, weights
""",
    name="attention_dk_from_key_length",
)

# unlisted
wrong(
    "ch02_attention",
    "attention",
    "hand-written softmax divides by exp.sum(-1) without keepdim=True: the sums broadcast along "
    "the wrong axis (raises when Sq != Sk, silently wrong rows when Sq == Sk)",
    """
def attention(q, k, v):
    dk = q.shape[-1]
    scores = q @ k.transpose(-1, -2) / math.sqrt(dk)
    scores = scores - scores.max(dim=-1, keepdim=True).values   # stability
    e = torch.exp(scores)
    weights = e / e.sum(dim=-1)
    return weights @ v, weights
""",
    name="attention_softmax_no_keepdim",
)

# unlisted
wrong(
    "ch02_attention",
    "attention",
    "writes the scale exponent with integer division, d_k ** (1 // 2) == 1, so the scores are "
    "not scaled at all",
    """
def attention(q, k, v):
    d_k = q.size(-1)
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / (d_k ** (1 // 2))
    weights = torch.softmax(scores, dim=-1)
    out = torch.einsum("bhqk,bhkd->bhqd", weights, v)
    return out, weights
""",
    name="attention_integer_exponent",
)

# unlisted
wrong(
    "ch02_attention",
    "attention",
    "returns the pair in the wrong order: (weights, out) instead of (out, weights)",
    """
def attention(q, k, v):
    scale = 1 / math.sqrt(q.size(-1))
    w = torch.softmax(q @ k.mT * scale, dim=-1)
    return w, w @ v
""",
    name="attention_returns_swapped",
)

# listed
wrong(
    "ch02_attention",
    "attention",
    "scales q in place (q /= sqrt(d_k)), modifying the caller's q",
    """
def attention(q, k, v):
    q /= math.sqrt(q.size(-1))    # scale the queries first
    scores = q @ k.transpose(-2, -1)
    weights = scores.softmax(dim=-1)
    return weights @ v, weights
""",
    name="attention_inplace_scale_q",
)

# unlisted
wrong(
    "ch02_attention",
    "attention",
    "hand-written softmax without subtracting the row maximum: exp overflows to inf and the "
    "weights become NaN when the scores are large (e.g. inputs of magnitude ~10)",
    """
def attention(q, k, v):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    exp_scores = torch.exp(scores)
    weights = exp_scores / exp_scores.sum(dim=-1, keepdim=True)
    return weights @ v, weights
""",
    name="attention_softmax_no_max_subtraction",
)

# unlisted
wrong(
    "ch02_attention",
    "attention",
    "computes the scores as k @ q^T (keys as rows) and softmaxes its last axis, i.e. the "
    "weights are over the queries and transposed: shape [B, H, Sk, Sq]; weights @ v raises when "
    "Sq != Sk and is wrong otherwise",
    """
def attention(q, k, v):
    d_k = q.shape[-1]
    scores = torch.matmul(k, q.transpose(-2, -1)) / math.sqrt(d_k)
    weights = torch.softmax(scores, dim=-1)
    out = torch.matmul(weights, v)
    return out, weights
""",
    name="attention_k_times_qT",
)

# right
right(
    "ch02_attention",
    "attention",
    '''
def attention(q, k, v):
    """q [B, H, Sq, Dh], k and v [B, H, Sk, Dh]
    -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])."""
    d_k = q.shape[-1]
    # scale q first: (q / sqrt(d)) k^T == q k^T / sqrt(d)
    scores = torch.einsum("bhid,bhjd->bhij", q / math.sqrt(d_k), k)
    scores = scores - scores.amax(dim=-1, keepdim=True)
    e = scores.exp()
    weights = e / e.sum(dim=-1, keepdim=True)
    out = torch.einsum("bhij,bhjd->bhid", weights, v)
    return out, weights
''',
    name="attention_einsum_manual_softmax",
)

# right
right(
    "ch02_attention",
    "attention",
    """
def attention(q, k, v):
    B, H, Sq, Dh = q.shape
    Sk = k.shape[2]
    # flatten batch and heads, use bmm
    qf = q.reshape(B * H, Sq, Dh)
    kf = k.reshape(B * H, Sk, Dh)
    vf = v.reshape(B * H, Sk, Dh)
    scores = torch.baddbmm(torch.zeros(B * H, Sq, Sk, dtype=q.dtype, device=q.device),
                           qf, kf.transpose(1, 2), alpha=1.0 / math.sqrt(Dh))
    weights = torch.log_softmax(scores, dim=-1).exp()
    out = torch.bmm(weights, vf)
    return out.view(B, H, Sq, Dh), weights.view(B, H, Sq, Sk)
""",
    name="attention_bmm_logsoftmax",
)

# =====================================================================
# ch02_attention / attention_entropy
# =====================================================================

# listed
wrong(
    "ch02_attention",
    "attention_entropy",
    "uses weights * log(weights) directly: 0 * log 0 = NaN for weights that are exactly 0",
    '''
def attention_entropy(weights):
    """weights [..., Sq, Sk] -> entropy per query [..., Sq], in nats."""
    return -(weights * torch.log(weights)).sum(dim=-1)
''',
    name="attention_entropy_log_zero_nan",
)

# unlisted
wrong(
    "ch02_attention",
    "attention_entropy",
    "computes the entropy in bits (log2) instead of nats (natural log)",
    '''
def attention_entropy(weights):
    """weights [..., Sq, Sk] -> entropy per query [..., Sq], in nats."""
    plogp = torch.where(weights > 0, weights * torch.log2(weights), torch.zeros_like(weights))
    return -plogp.sum(-1)
''',
    name="attention_entropy_log2_bits",
)

# unlisted
wrong(
    "ch02_attention",
    "attention_entropy",
    "sums over dim=-2 (the queries) instead of the last axis (the keys): entropy per key column, "
    "shape [..., Sk]",
    '''
def attention_entropy(weights):
    """weights [..., Sq, Sk] -> entropy per query [..., Sq], in nats."""
    return -torch.special.xlogy(weights, weights).sum(dim=-2)
''',
    name="attention_entropy_sum_over_queries",
)

# unlisted
wrong(
    "ch02_attention",
    "attention_entropy",
    "averages over the keys (.mean(-1)) instead of summing, so the entropy is divided by Sk",
    '''
def attention_entropy(weights):
    """weights [..., Sq, Sk] -> entropy per query [..., Sq], in nats."""
    ent = torch.special.entr(weights)   # -w ln w, 0 where w == 0
    return ent.mean(dim=-1)
''',
    name="attention_entropy_mean_not_sum",
)

# unlisted
wrong(
    "ch02_attention",
    "attention_entropy",
    "forgets the minus sign: returns sum w ln w (negative entropy)",
    '''
def attention_entropy(weights):
    """weights [..., Sq, Sk] -> entropy per query [..., Sq], in nats."""
    return torch.xlogy(weights, weights).sum(-1)
''',
    name="attention_entropy_missing_minus",
)

# listed
wrong(
    "ch02_attention",
    "attention_entropy",
    "dodges log 0 by writing weights[weights == 0] = 1 into the input: modifies weights in place",
    '''
def attention_entropy(weights):
    """weights [..., Sq, Sk] -> entropy per query [..., Sq], in nats."""
    weights[weights == 0] = 1.0        # log(1) = 0, so zeros add nothing
    return -(weights * weights.log()).sum(dim=-1)
''',
    name="attention_entropy_inplace_zero_fix",
)

# unlisted
wrong(
    "ch02_attention",
    "attention_entropy",
    "flattens all leading axes with view(-1, Sk) and returns a 1-D [N*Sq] tensor instead of "
    "reshaping back to [..., Sq] (right only for 2-D input)",
    '''
def attention_entropy(weights):
    """weights [..., Sq, Sk] -> entropy per query [..., Sq], in nats."""
    w = weights.reshape(-1, weights.shape[-1])
    h = -torch.xlogy(w, w).sum(dim=1)
    return h
''',
    name="attention_entropy_flattened_result",
)

# unlisted
wrong(
    "ch02_attention",
    "attention_entropy",
    "returns the normalised entropy: divides by ln(Sk), so a uniform row gives 1 instead of ln Sk",
    '''
def attention_entropy(weights):
    """weights [..., Sq, Sk] -> entropy per query [..., Sq], in nats."""
    n_keys = weights.shape[-1]
    h = -torch.xlogy(weights, weights).sum(dim=-1)
    return h / math.log(n_keys) if n_keys > 1 else h
''',
    name="attention_entropy_normalised_by_log_sk",
)

# right
right(
    "ch02_attention",
    "attention_entropy",
    '''
def attention_entropy(weights):
    """weights [..., Sq, Sk] -> entropy per query [..., Sq], in nats."""
    eps = 1e-12          # tiny, only to keep log(0) finite
    return -(weights * torch.log(weights + eps)).sum(dim=-1)
''',
    name="attention_entropy_tiny_eps",
)

# right
right(
    "ch02_attention",
    "attention_entropy",
    '''
def attention_entropy(weights):
    """weights [..., Sq, Sk] -> entropy per query [..., Sq], in nats."""
    # clamp only inside the log: a zero weight still contributes 0 * (finite) = 0
    tiny = torch.finfo(weights.dtype).tiny
    return -(weights * weights.clamp_min(tiny).log()).sum(dim=-1)
''',
    name="attention_entropy_clamp_tiny",
)

# right
right(
    "ch02_attention",
    "attention_entropy",
    '''
def attention_entropy(weights):
    """weights [..., Sq, Sk] -> entropy per query [..., Sq], in nats."""
    terms = weights * torch.log(weights)
    terms = torch.nan_to_num(terms, nan=0.0)   # 0 * -inf -> 0
    return -terms.sum(dim=-1)
''',
    name="attention_entropy_nan_to_num",
)

# =====================================================================
# ch03_masks / causal_mask
# =====================================================================

# listed
wrong(
    "ch03_masks",
    "causal_mask",
    "uses triu instead of tril: query i may attend to keys i..S-1 (the future), not 0..i",
    '''
def causal_mask(size):
    """-> bool [1, 1, S, S], True where key j <= query i."""
    mask = torch.triu(torch.ones(size, size, device=device)).bool()
    return mask.unsqueeze(0).unsqueeze(0)
''',
    name="causal_mask_triu",
)

# unlisted
wrong(
    "ch03_masks",
    "causal_mask",
    "off-by-one: strict comparison j < i (tril with diagonal=-1), so a query may not attend to "
    "itself and the first query attends to nothing",
    '''
def causal_mask(size):
    """-> bool [1, 1, S, S], True where key j <= query i."""
    i = torch.arange(size, device=device).view(size, 1)   # queries
    j = torch.arange(size, device=device).view(1, size)   # keys
    return (j < i).view(1, 1, size, size)
''',
    name="causal_mask_strict_off_by_one",
)

# listed
wrong(
    "ch03_masks",
    "causal_mask",
    "returns a float 1/0 tensor (torch.tril(torch.ones(S, S))) instead of a bool mask",
    '''
def causal_mask(size):
    """-> bool [1, 1, S, S], True where key j <= query i."""
    return torch.tril(torch.ones(1, 1, size, size, device=device))
''',
    name="causal_mask_float",
)

# unlisted
wrong(
    "ch03_masks",
    "causal_mask",
    "slices a precomputed 256x256 buffer (nanoGPT style block_size): for size > 256 the mask is "
    "only 256x256",
    '''
_BLOCK_SIZE = 256
_causal = torch.tril(torch.ones(_BLOCK_SIZE, _BLOCK_SIZE, dtype=torch.bool, device=device))

def causal_mask(size):
    """-> bool [1, 1, S, S], True where key j <= query i."""
    return _causal[:size, :size].view(1, 1, min(size, _BLOCK_SIZE), min(size, _BLOCK_SIZE))
''',
    name="causal_mask_fixed_buffer_256",
)

# unlisted
wrong(
    "ch03_masks",
    "causal_mask",
    "adds the two singleton axes on the wrong side (mask[:, :, None, None]), returning "
    "[S, S, 1, 1] instead of [1, 1, S, S]",
    '''
def causal_mask(size):
    """-> bool [1, 1, S, S], True where key j <= query i."""
    m = torch.ones(size, size, dtype=torch.bool, device=device).tril()
    return m[:, :, None, None]
''',
    name="causal_mask_singletons_at_end",
)

# unlisted
wrong(
    "ch03_masks",
    "causal_mask",
    "off-by-one the other way: tril(diagonal=1), so each query may also see the next token "
    "(key i+1)",
    '''
def causal_mask(size):
    """-> bool [1, 1, S, S], True where key j <= query i."""
    m = torch.ones(size, size, device=device).tril(diagonal=1)
    return m.bool()[None, None, :, :]
''',
    name="causal_mask_tril_diag_plus_one",
)

# right
right(
    "ch03_masks",
    "causal_mask",
    '''
def causal_mask(size):
    """-> bool [1, 1, S, S], True where key j <= query i."""
    pos = torch.arange(size, device=device)
    keep = pos[None, :] <= pos[:, None]          # [S, S]: key j <= query i
    return keep.expand(1, 1, size, size)
''',
    name="causal_mask_arange_compare",
)

# right
right(
    "ch03_masks",
    "causal_mask",
    '''
def causal_mask(size):
    """-> bool [1, 1, S, S], True where key j <= query i."""
    future = torch.triu(torch.ones(size, size, dtype=torch.bool, device=device), diagonal=1)
    return ~future[None]     # [1, S, S] broadcasts like [1, 1, S, S]
''',
    name="causal_mask_not_future",
)

# =====================================================================
# ch03_masks / padding_mask
# =====================================================================

# listed
wrong(
    "ch03_masks",
    "padding_mask",
    "returns [B, 1, S] (unsqueeze(1) only) instead of [B, 1, 1, S]: the batch lands on the heads axis",
    '''
def padding_mask(tokens, pad_id):
    """tokens [B, S] -> bool [B, 1, 1, S], True on real tokens."""
    return (tokens != pad_id).unsqueeze(1)
''',
    name="padding_mask_three_dims",
)

# listed
wrong(
    "ch03_masks",
    "padding_mask",
    "hard-codes the pad id 0 (tokens != 0) instead of comparing with pad_id",
    '''
def padding_mask(tokens, pad_id):
    """tokens [B, S] -> bool [B, 1, 1, S], True on real tokens."""
    mask = tokens != 0
    return mask[:, None, None, :]
''',
    name="padding_mask_hardcoded_zero",
)

# unlisted
wrong(
    "ch03_masks",
    "padding_mask",
    "puts the sequence on the queries axis ([:, None, :, None], shape [B, 1, S, 1]): masks "
    "padded queries instead of padded keys",
    '''
def padding_mask(tokens, pad_id):
    """tokens [B, S] -> bool [B, 1, 1, S], True on real tokens."""
    not_pad = tokens.ne(pad_id)
    return not_pad[:, None, :, None]
''',
    name="padding_mask_query_axis",
)

# listed
wrong(
    "ch03_masks",
    "padding_mask",
    "inverted convention: True on the padding (tokens == pad_id) instead of True on real tokens",
    '''
def padding_mask(tokens, pad_id):
    """tokens [B, S] -> bool [B, 1, 1, S], True on real tokens."""
    is_pad = (tokens == pad_id)
    return is_pad.unsqueeze(1).unsqueeze(2)
''',
    name="padding_mask_inverted",
)

# unlisted
wrong(
    "ch03_masks",
    "padding_mask",
    "returns an int64 1/0 tensor ((tokens != pad_id).long()) instead of a bool mask",
    '''
def padding_mask(tokens, pad_id):
    """tokens [B, S] -> bool [B, 1, 1, S], True on real tokens."""
    B, S = tokens.shape
    return (tokens != pad_id).long().reshape(B, 1, 1, S)
''',
    name="padding_mask_long_dtype",
)

# unlisted
wrong(
    "ch03_masks",
    "padding_mask",
    "marks a token as real when tokens > pad_id instead of tokens != pad_id: every real token "
    "with an id below pad_id (e.g. 0 when pad_id = 3) is treated as padding",
    '''
def padding_mask(tokens, pad_id):
    """tokens [B, S] -> bool [B, 1, 1, S], True on real tokens."""
    real = tokens > pad_id
    return real[:, None, None, :]
''',
    name="padding_mask_greater_than_pad",
)

# unlisted
wrong(
    "ch03_masks",
    "padding_mask",
    "builds a square [B, 1, S, S] mask (real query AND real key) instead of [B, 1, 1, S]: padded "
    "query rows become fully masked instead of attending to the real keys",
    '''
def padding_mask(tokens, pad_id):
    """tokens [B, S] -> bool [B, 1, 1, S], True on real tokens."""
    real = tokens != pad_id                        # [B, S]
    # a pair (i, j) is allowed only if both tokens are real
    return real[:, None, :, None] & real[:, None, None, :]
''',
    name="padding_mask_square_query_and_key",
)

# right
right(
    "ch03_masks",
    "padding_mask",
    '''
def padding_mask(tokens, pad_id):
    """tokens [B, S] -> bool [B, 1, 1, S], True on real tokens."""
    # nonzero difference <=> not the pad id
    return (tokens - pad_id).bool().unsqueeze(1).unsqueeze(1)
''',
    name="padding_mask_difference_bool",
)

# right
right(
    "ch03_masks",
    "padding_mask",
    '''
def padding_mask(tokens, pad_id):
    """tokens [B, S] -> bool [B, 1, 1, S], True on real tokens."""
    B, S = tokens.shape
    return torch.logical_not(tokens.eq(pad_id)).view(B, 1, 1, S)
''',
    name="padding_mask_logical_not_eq",
)

# =====================================================================
# ch03_masks / masked_attention
# =====================================================================

# listed
wrong(
    "ch03_masks",
    "masked_attention",
    "fills the masked scores with -1e9, which overflows float16 (masked_fill raises in half precision)",
    """
def masked_attention(q, k, v, mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    scores = scores.masked_fill(~mask, -1e9)
    weights = torch.softmax(scores, dim=-1)
    weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return weights @ v, weights
""",
    name="masked_attention_fill_minus_1e9",
)

# listed
wrong(
    "ch03_masks",
    "masked_attention",
    "fills with -inf and does nothing for fully masked rows: softmax gives NaN weights and outputs "
    "for a query whose keys are all masked",
    """
def masked_attention(q, k, v, mask):
    d_k = q.shape[-1]
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d_k)
    scores = scores.masked_fill(mask == False, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return torch.matmul(weights, v), weights
""",
    name="masked_attention_neg_inf_nan",
)

# unlisted
wrong(
    "ch03_masks",
    "masked_attention",
    "masks after the softmax by multiplying the weights by the mask, without renormalising: rows "
    "with masked keys no longer sum to 1",
    """
def masked_attention(q, k, v, mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    weights = scores.softmax(dim=-1)
    weights = weights * mask          # zero the masked keys
    out = weights @ v
    return out, weights
""",
    name="masked_attention_multiply_after_softmax",
)

# listed
wrong(
    "ch03_masks",
    "masked_attention",
    "mask convention inverted: fills where mask is True (masked_fill(mask, ...)) instead of where "
    "it is False, so the allowed keys are masked and the forbidden ones attended",
    """
def masked_attention(q, k, v, mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    neg = torch.finfo(scores.dtype).min
    scores = scores.masked_fill(mask, neg)
    weights = scores.softmax(-1)
    weights = weights.masked_fill(mask.all(dim=-1, keepdim=True), 0.0)
    return weights @ v, weights
""",
    name="masked_attention_inverted_convention",
)

# unlisted
wrong(
    "ch03_masks",
    "masked_attention",
    "operator slip in the fully-masked-row fix: ~mask.all(-1) instead of (~mask).all(-1), so every "
    "row with at least one masked key gets all-zero weights",
    """
def masked_attention(q, k, v, mask):
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1)
    no_key = ~mask.all(dim=-1, keepdim=True)   # rows with no key to attend to
    weights = weights.masked_fill(no_key, 0.0)
    out = torch.einsum("bhqk,bhkd->bhqd", weights, v)
    return out, weights
""",
    name="masked_attention_all_instead_of_any",
)

# unlisted
wrong(
    "ch03_masks",
    "masked_attention",
    "forgets the 1/sqrt(Dh) scaling of the scores (masking is otherwise right)",
    """
def masked_attention(q, k, v, mask):
    scores = q @ k.transpose(-2, -1)
    min_val = torch.finfo(scores.dtype).min
    scores = torch.where(mask, scores, torch.full_like(scores, min_val))
    weights = scores.softmax(dim=-1)
    weights = weights * mask.any(dim=-1, keepdim=True)
    return weights @ v, weights
""",
    name="masked_attention_no_scale",
)

# unlisted
wrong(
    "ch03_masks",
    "masked_attention",
    "adds a heads axis to the mask (mask.unsqueeze(1)) although it already broadcasts against "
    "[B, H, Sq, Sk]: the 4-D mask becomes 5-D, so masked_fill broadcasts the scores to a 5-D "
    "tensor and out/weights come back with the wrong (5-D) shape (or it raises when sizes clash)",
    """
def masked_attention(q, k, v, mask):
    mask = mask.unsqueeze(1)   # [B, 1, ...] for the heads
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    scores = scores.masked_fill(mask == 0, torch.finfo(q.dtype).min)
    weights = scores.softmax(dim=-1)
    weights = weights.masked_fill(mask.sum(-1, keepdim=True) == 0, 0.0)
    return weights @ v, weights
""",
    name="masked_attention_extra_unsqueeze",
)

# unlisted
wrong(
    "ch03_masks",
    "masked_attention",
    "computes in float32 for stability (q.float() etc.) and returns float32 out and weights for "
    "float16 / bfloat16 / float64 inputs instead of the dtype of q",
    """
def masked_attention(q, k, v, mask):
    qf, kf, vf = q.float(), k.float(), v.float()
    scores = qf @ kf.transpose(-2, -1) / math.sqrt(q.size(-1))
    scores = scores.masked_fill(~mask, -1e9)
    weights = torch.softmax(scores, dim=-1)
    weights = weights.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return weights @ vf, weights
""",
    name="masked_attention_returns_float32",
)

# unlisted
wrong(
    "ch03_masks",
    "masked_attention",
    "masks by multiplying the scores by the mask before the softmax (masked scores become 0, "
    "not very negative), so masked keys still get non-zero weight",
    """
def masked_attention(q, k, v, mask):
    d_k = q.size(-1)
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(d_k)
    scores = scores * mask.to(scores.dtype)     # 0 where masked
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights
""",
    name="masked_attention_zero_scores",
)

# right
right(
    "ch03_masks",
    "masked_attention",
    '''
def masked_attention(q, k, v, mask):
    """q [B, H, Sq, Dh], k and v [B, H, Sk, Dh], mask bool broadcastable to
    [B, H, Sq, Sk] (True = attend)
    -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])."""
    scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
    scores = scores.masked_fill(mask.logical_not(), float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    # fully masked rows are 0/0 = NaN: make them zero
    weights = torch.nan_to_num(weights, nan=0.0)
    return torch.matmul(weights, v), weights
''',
    name="masked_attention_neg_inf_nan_to_num",
)

# right
right(
    "ch03_masks",
    "masked_attention",
    """
def masked_attention(q, k, v, mask):
    # half precision: do the softmax in float32, then cast back to the input dtype
    work = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    scores = (q.to(work) @ k.to(work).transpose(-2, -1)) / math.sqrt(q.size(-1))
    scores = scores.masked_fill(~mask, torch.finfo(work).min)
    weights = scores.softmax(dim=-1)
    has_key = mask.any(dim=-1, keepdim=True)
    weights = torch.where(has_key, weights, torch.zeros_like(weights))
    weights = weights.to(q.dtype)
    return weights @ v, weights
""",
    name="masked_attention_float32_softmax_cast_back",
)

# =====================================================================
# ch03_bughunt / self_attention
# =====================================================================

# listed
wrong(
    "ch03_bughunt",
    "self_attention",
    "fixes the einsum, the projections and the scale but leaves the mask fill at float('-1e20'), "
    "which overflows float16 (masked_fill raises)",
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

        # 线性变换 first, then split
        values = self.values(values)
        keys = self.keys(keys)
        query = self.queries(query)

        # 分割多头
        values = values.reshape(N, value_len, self.heads, self.head_dim)
        keys = keys.reshape(N, key_len, self.heads, self.head_dim)
        query = query.reshape(N, query_len, self.heads, self.head_dim)

        # tensors are [N, len, heads, head_dim]
        energy = torch.einsum("nqhd,nkhd->nhqk", [query, keys])

        # 缩放 by the head size
        energy = energy / (self.head_dim ** (1/2))

        if mask is not None:
            energy = energy.masked_fill(mask == 0, float("-1e20"))

        attention = torch.softmax(energy, dim=3)

        out = torch.einsum("nhql,nlhd->nqhd", [attention, values])

        out = out.reshape(N, query_len, self.heads * self.head_dim)

        return self.fc_out(out)
""",
    name="self_attention_fill_left_unfixed",
)

# listed
wrong(
    "ch03_bughunt",
    "self_attention",
    "fixes the fill value with float('-inf'): no overflow in float16, but a fully masked sequence "
    "gives NaN (softmax of an all -inf row)",
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
            # -inf works in every dtype
            energy = energy.masked_fill(mask == 0, float("-inf"))
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("nhqk,nkhd->nqhd", [attention, values])
        out = out.reshape(N, query_len, self.heads * self.head_dim)
        return self.fc_out(out)
""",
    name="self_attention_fill_neg_inf",
)

# listed
wrong(
    "ch03_bughunt",
    "self_attention",
    "fixes the einsum, the projections and the fill value but keeps the scale sqrt(embed_size) "
    "instead of sqrt(head_dim)",
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
        energy = torch.einsum("nqhd,nkhd->nhqk", [query, keys])
        energy = energy / (self.embed_size ** (1/2))
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("nhqk,nkhd->nqhd", [attention, values])
        out = out.reshape(N, query_len, self.heads * self.head_dim)
        return self.fc_out(out)
""",
    name="self_attention_scale_embed_size_left",
)

# listed
wrong(
    "ch03_bughunt",
    "self_attention",
    "fixes the einsum, scale and fill value but keeps the shared nn.Linear(head_dim, head_dim) "
    "projections applied to each head's slice",
    """
class SelfAttention(nn.Module):
    def __init__(self, embed_size, heads):
        super(SelfAttention, self).__init__()
        self.embed_size = embed_size
        self.heads = heads
        self.head_dim = embed_size // heads
        assert (self.head_dim * heads == embed_size), "Embed size needs to be div by heads"
        self.values = nn.Linear(self.head_dim, self.head_dim, bias=False)
        self.keys = nn.Linear(self.head_dim, self.head_dim, bias=False)
        self.queries = nn.Linear(self.head_dim, self.head_dim, bias=False)
        self.fc_out = nn.Linear(heads * self.head_dim, embed_size)

    def forward(self, values, keys, query, mask):
        N = query.shape[0]
        value_len, key_len, query_len = values.shape[1], keys.shape[1], query.shape[1]
        values = values.reshape(N, value_len, self.heads, self.head_dim)
        keys = keys.reshape(N, key_len, self.heads, self.head_dim)
        query = query.reshape(N, query_len, self.heads, self.head_dim)
        values = self.values(values)
        keys = self.keys(keys)
        query = self.queries(query)
        energy = torch.einsum("nqhd,nkhd->nhqk", [query, keys])
        energy = energy / (self.head_dim ** (1/2))
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("nhqk,nkhd->nqhd", [attention, values])
        out = out.reshape(N, query_len, self.heads * self.head_dim)
        return self.fc_out(out)
""",
    name="self_attention_shared_linear_left",
)

# unlisted
wrong(
    "ch03_bughunt",
    "self_attention",
    "new bug while fixing: the keys are reshaped with query_len instead of key_len "
    "(reshape(N, query_len, heads, head_dim)), which raises in cross-attention",
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
        query_len = query.shape[1]
        # project then split into [N, heads, len, head_dim]
        q = self.queries(query).reshape(N, query_len, self.heads, self.head_dim).transpose(1, 2)
        k = self.keys(keys).reshape(N, query_len, self.heads, self.head_dim).transpose(1, 2)
        v = self.values(values).reshape(N, query_len, self.heads, self.head_dim).transpose(1, 2)
        energy = torch.einsum("bhqd,bhkd->bhqk", [q, k]) / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("bhqk,bhkd->bhqd", [attention, v])
        out = out.transpose(1, 2).reshape(N, query_len, self.embed_size)
        return self.fc_out(out)
""",
    name="self_attention_keys_reshaped_with_query_len",
)

# unlisted
wrong(
    "ch03_bughunt",
    "self_attention",
    "fixes the einsum to output the scores as [N, Lq, H, Lk] ('nqhd,nkhd->nqhk') instead of "
    "[N, H, Lq, Lk]: the softmax axis is right, but a mask shaped for the scores [N, H, Lq, Lk] "
    "(e.g. a causal [1, 1, Lq, Lk] or [N, 1, Lq, Lk] mask) is misaligned (Lq lands on the heads "
    "axis): wrong or raises",
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

        # keep the [N, len, heads] layout, no transposes needed
        energy = torch.einsum("nqhd,nkhd->nqhk", [query, keys])
        energy = energy / (self.head_dim ** (1/2))
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("nqhk,nkhd->nqhd", [attention, values])
        out = out.reshape(N, query_len, self.heads * self.head_dim)
        return self.fc_out(out)
""",
    name="self_attention_scores_nqhk_layout",
)

# unlisted
wrong(
    "ch03_bughunt",
    "self_attention",
    "new bug while fixing: the values are projected with self.keys (copy-paste), self.values unused",
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
        values = self.keys(values).reshape(N, value_len, self.heads, self.head_dim)
        keys = self.keys(keys).reshape(N, key_len, self.heads, self.head_dim)
        query = self.queries(query).reshape(N, query_len, self.heads, self.head_dim)
        energy = torch.einsum("nqhd,nkhd->nhqk", [query, keys])
        energy = energy / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("nhqk,nkhd->nqhd", [attention, values])
        out = out.reshape(N, query_len, self.heads * self.head_dim)
        return self.fc_out(out)
""",
    name="self_attention_values_through_keys",
)

# unlisted
wrong(
    "ch03_bughunt",
    "self_attention",
    "scale fix written without parentheses: energy / self.head_dim ** 1/2 divides by head_dim/2 "
    "(operator precedence) instead of sqrt(head_dim)",
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
        energy = energy / self.head_dim ** 1/2
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("nhqk,nkhd->nqhd", [attention, values])
        out = out.reshape(N, query_len, self.heads * self.head_dim)
        return self.fc_out(out)
""",
    name="self_attention_scale_precedence",
)

# unlisted
wrong(
    "ch03_bughunt",
    "self_attention",
    "new bug while fixing: the query and value inputs are swapped (self.queries(values), "
    "self.values(query)), invisible in self-attention but wrong in cross-attention",
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
        # NOTE: refactored to the usual (q, k, v) order
        q_in, k_in, v_in = values, keys, query
        N = q_in.shape[0]
        q_len, k_len = q_in.shape[1], k_in.shape[1]
        q = self.queries(q_in).view(N, q_len, self.heads, self.head_dim).transpose(1, 2)
        k = self.keys(k_in).view(N, k_len, self.heads, self.head_dim).transpose(1, 2)
        v = self.values(v_in).view(N, -1, self.heads, self.head_dim).transpose(1, 2)
        energy = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = energy.softmax(dim=-1)
        out = (attention @ v).transpose(1, 2).reshape(N, q_len, self.embed_size)
        return self.fc_out(out)
""",
    name="self_attention_query_value_swapped",
)

# right
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
        # full-width projections: each head sees the whole embedding
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(heads * self.head_dim, embed_size)

    def _split(self, x):
        N, L, _ = x.shape
        return x.view(N, L, self.heads, self.head_dim).transpose(1, 2)  # [N, H, L, Dh]

    def forward(self, values, keys, query, mask):
        N, query_len, _ = query.shape
        q = self._split(self.queries(query))
        k = self._split(self.keys(keys))
        v = self._split(self.values(values))
        energy = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        if mask is not None:
            energy = torch.where(mask != 0, energy,
                                 torch.full_like(energy, torch.finfo(energy.dtype).min))
        attention = torch.softmax(energy, dim=-1)
        out = torch.matmul(attention, v)                         # [N, H, Lq, Dh]
        out = out.transpose(1, 2).contiguous().view(N, query_len, self.embed_size)
        return self.fc_out(out)
""",
    name="self_attention_matmul_where",
)

# right
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

        # 线性变换生成 Q, K, V -- fixed: project the whole embedding
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

        # 计算 attention scores: letters follow the [N, len, heads, dim] layout
        energy = torch.einsum("bqhd,bkhd->bhqk", [query, keys])

        # 缩放 by the head size
        energy = energy / (self.head_dim ** (1/2))

        # 应用 mask（可选）: a fill value that exists in the dtype
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)

        # softmax 得到注意力权重
        attention = torch.softmax(energy, dim=3)

        # 加权求和
        out = torch.einsum("bhqk,bkhd->bqhd", [attention, values])

        # 拼接多头
        out = out.reshape(N, query_len, self.heads * self.head_dim)

        return self.fc_out(out)
""",
    name="self_attention_seed_minimal_fix",
)

# =====================================================================
# ch04_blocks / feed_forward
# =====================================================================

# listed
wrong(
    "ch04_blocks",
    "feed_forward",
    "uses GELU instead of ReLU as the activation",
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
    name="feed_forward_gelu",
)

# listed
wrong(
    "ch04_blocks",
    "feed_forward",
    "puts the dropout after the second Linear (on the output) instead of on the hidden layer",
    '''
class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(d_model, d_ff),
            nn.ReLU(),
            nn.Linear(d_ff, d_model),
            nn.Dropout(dropout),
        )

    def forward(self, x):
        """x [..., D] -> [..., D]."""
        return self.net(x)
''',
    name="feed_forward_dropout_after_output",
)

# unlisted
wrong(
    "ch04_blocks",
    "feed_forward",
    "both Linear layers built with bias=False: the biases b1 and b2 of the formula are missing",
    '''
class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff, bias=False)
        self.w_2 = nn.Linear(d_ff, d_model, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        """x [..., D] -> [..., D]."""
        return self.w_2(self.dropout(self.w_1(x).relu()))
''',
    name="feed_forward_no_bias",
)

# unlisted
wrong(
    "ch04_blocks",
    "feed_forward",
    "calls F.dropout(h, self.p) without training=self.training: the hidden dropout stays on in eval mode",
    '''
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
    name="feed_forward_functional_dropout_always_on",
)

# unlisted
wrong(
    "ch04_blocks",
    "feed_forward",
    "hidden width hard-coded as 4 * d_model instead of the d_ff argument",
    '''
class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        hidden = 4 * d_model   # paper: 512 -> 2048
        self.linear1 = nn.Linear(d_model, hidden)
        self.linear2 = nn.Linear(hidden, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        """x [..., D] -> [..., D]."""
        return self.linear2(self.dropout(torch.relu(self.linear1(x))))
''',
    name="feed_forward_hidden_4x",
)

# unlisted
wrong(
    "ch04_blocks",
    "feed_forward",
    "applies nn.ReLU(inplace=True) directly to the input x before the first Linear "
    "(relu(x) then Linear, Linear): modifies the caller's x in place and puts the ReLU in the wrong place",
    '''
class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.act = nn.ReLU(inplace=True)
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        """x [..., D] -> [..., D]."""
        x = self.act(x)
        return self.linear2(self.dropout(self.linear1(x)))
''',
    name="feed_forward_inplace_relu_on_input",
)

# right
right(
    "ch04_blocks",
    "feed_forward",
    '''
class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(d_model, d_ff),
            nn.ReLU(inplace=True),      # in place on the hidden activations only
            nn.Dropout(dropout),
            nn.Linear(d_ff, d_model),
        )

    def forward(self, x):
        """x [..., D] -> [..., D]."""
        return self.layers(x)
''',
    name="feed_forward_sequential",
)

# right
right(
    "ch04_blocks",
    "feed_forward",
    '''
class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.up = nn.Linear(d_model, d_ff)
        self.down = nn.Linear(d_ff, d_model)
        self.dropout = dropout

    def forward(self, x):
        """x [..., D] -> [..., D]."""
        h = self.up(x).clamp(min=0)                      # ReLU
        h = F.dropout(h, p=self.dropout, training=self.training)
        return self.down(h)
''',
    name="feed_forward_clamp_functional_dropout",
)

# =====================================================================
# ch04_blocks / encoder_block
# =====================================================================

# listed
wrong(
    "ch04_blocks",
    "encoder_block",
    "seed's dropout placement: dropout applied after the LayerNorm (Dropout(LayerNorm(x + Sublayer(x)))) "
    "in Post-LN, dropping the residual stream",
    """
class EncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.dropout(self.attn(h, h, h, mask=mask))
            h = self.norm2(x)
            return x + self.dropout(self.ff(h))
        x = self.dropout(self.norm1(x + self.attn(x, x, x, mask=mask)))
        x = self.dropout(self.norm2(x + self.ff(x)))
        return x
""",
    name="encoder_block_dropout_after_norm",
)

# listed
wrong(
    "ch04_blocks",
    "encoder_block",
    "one LayerNorm shared by both sublayers instead of one per sublayer",
    """
class EncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.mha = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.norm = nn.LayerNorm(d_model)   # used for both sublayers
        self.drop1 = nn.Dropout(dropout)
        self.drop2 = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm(x)
            x = x + self.drop1(self.mha(h, h, h, mask=mask))
            x = x + self.drop2(self.ffn(self.norm(x)))
            return x
        x = self.norm(x + self.drop1(self.mha(x, x, x, mask=mask)))
        x = self.norm(x + self.drop2(self.ffn(x)))
        return x
""",
    name="encoder_block_shared_norm",
)

# unlisted
wrong(
    "ch04_blocks",
    "encoder_block",
    "Pre-LN residual adds the normalised input instead of the block input: x = LN(x) + "
    "Dropout(attn(LN(x))) (same in the feed-forward sublayer)",
    """
class EncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.ln1 = nn.LayerNorm(d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.drop1 = nn.Dropout(dropout)
        self.drop2 = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        if self.norm_first:
            x = self.ln1(x)
            x = x + self.drop1(self.self_attn(x, x, x, mask=mask))
            x = self.ln2(x)
            x = x + self.drop2(self.ff(x))
            return x
        x = self.ln1(x + self.drop1(self.self_attn(x, x, x, mask=mask)))
        x = self.ln2(x + self.drop2(self.ff(x)))
        return x
""",
    name="encoder_block_preln_residual_from_normed",
)

# unlisted
wrong(
    "ch04_blocks",
    "encoder_block",
    "Post-LN feed-forward sublayer is fed the block input x instead of the attention sublayer's "
    "output (norm2(h + Dropout(FF(x))) with the original x)",
    """
class EncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.attention = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        if self.norm_first:
            h = x + self.dropout1(self.attention(self.norm1(x), self.norm1(x), self.norm1(x), mask=mask))
            return h + self.dropout2(self.feed_forward(self.norm2(h)))
        attn_out = self.norm1(x + self.dropout1(self.attention(x, x, x, mask=mask)))
        ff_out = self.feed_forward(x)
        return self.norm2(attn_out + self.dropout2(ff_out))
""",
    name="encoder_block_postln_ff_on_block_input",
)

# unlisted
wrong(
    "ch04_blocks",
    "encoder_block",
    "never passes the mask to the attention (calls attn(x, x, x) without mask=mask), so padded "
    "keys are attended",
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
    name="encoder_block_mask_not_passed",
)

# unlisted
wrong(
    "ch04_blocks",
    "encoder_block",
    "norm_first flag inverted: builds Pre-LN when norm_first=False and Post-LN when norm_first=True",
    """
class EncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.post_ln = norm_first   # True -> normalise after the residual
        self.attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.norms = nn.ModuleList([nn.LayerNorm(d_model), nn.LayerNorm(d_model)])
        self.drops = nn.ModuleList([nn.Dropout(dropout), nn.Dropout(dropout)])

    def forward(self, x, mask=None):
        sublayers = [lambda h: self.attn(h, h, h, mask=mask), self.ffn]
        for f, norm, drop in zip(sublayers, self.norms, self.drops):
            if self.post_ln:
                x = norm(x + drop(f(x)))
            else:
                x = x + drop(f(norm(x)))
        return x
""",
    name="encoder_block_norm_first_inverted",
)

# unlisted
wrong(
    "ch04_blocks",
    "encoder_block",
    "hand-written LayerNorm normalises over the sequence axis (mean/var over dim=1) instead of "
    "over each token's D features (dim=-1)",
    """
class LayerNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(d))
        self.beta = nn.Parameter(torch.zeros(d))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(dim=1, keepdim=True)
        var = x.var(dim=1, keepdim=True, unbiased=False)
        return self.gamma * (x - mean) / torch.sqrt(var + self.eps) + self.beta


class EncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.dropout1(self.self_attn(h, h, h, mask=mask))
            return x + self.dropout2(self.ff(self.norm2(x)))
        x = self.norm1(x + self.dropout1(self.self_attn(x, x, x, mask=mask)))
        return self.norm2(x + self.dropout2(self.ff(x)))
""",
    name="encoder_block_layernorm_over_sequence",
)

# listed
wrong(
    "ch04_blocks",
    "encoder_block",
    "BatchNorm1d over the features instead of LayerNorm (with transposes to [B, D, S])",
    """
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
        return bn(x.transpose(1, 2)).transpose(1, 2)   # BatchNorm1d wants [B, C, L]

    def forward(self, x, mask=None):
        if self.norm_first:
            h = self._norm(self.bn1, x)
            x = x + self.dropout1(self.self_attn(h, h, h, mask=mask))
            return x + self.dropout2(self.ff(self._norm(self.bn2, x)))
        x = self._norm(self.bn1, x + self.dropout1(self.self_attn(x, x, x, mask=mask)))
        return self._norm(self.bn2, x + self.dropout2(self.ff(x)))
""",
    name="encoder_block_batchnorm",
)

# unlisted
wrong(
    "ch04_blocks",
    "encoder_block",
    "feed-forward built with hidden width d_model (FeedForward(d_model, d_model, dropout)) "
    "instead of d_ff",
    """
class EncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = FeedForward(d_model, d_model, dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.dropout1(self.self_attn(h, h, h, mask=mask))
            return x + self.dropout2(self.ff(self.norm2(x)))
        x = self.norm1(x + self.dropout1(self.self_attn(x, x, x, mask=mask)))
        return self.norm2(x + self.dropout2(self.ff(x)))
""",
    name="encoder_block_ff_width_dmodel",
)

# unlisted
wrong(
    "ch04_blocks",
    "encoder_block",
    "Pre-LN branch forgets the second residual: returns Dropout(FF(LN2(x))) instead of "
    "x + Dropout(FF(LN2(x)))",
    """
class EncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.drop_attn = nn.Dropout(dropout)
        self.drop_ff = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        if self.norm_first:
            y = self.norm1(x)
            x = x + self.drop_attn(self.self_attn(y, y, y, mask=mask))
            y = self.norm2(x)
            x = self.drop_ff(self.ff(y))
            return x
        else:
            x = self.norm1(x + self.drop_attn(self.self_attn(x, x, x, mask=mask)))
            x = self.norm2(x + self.drop_ff(self.ff(x)))
            return x
""",
    name="encoder_block_preln_missing_ff_residual",
)

# right
right(
    "ch04_blocks",
    "encoder_block",
    """
class EncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.p = dropout
        self.attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        # own LayerNorm parameters, used through F.layer_norm
        self.g1 = nn.Parameter(torch.ones(d_model))
        self.b1 = nn.Parameter(torch.zeros(d_model))
        self.g2 = nn.Parameter(torch.ones(d_model))
        self.b2 = nn.Parameter(torch.zeros(d_model))

    def _sub(self, x, f, g, b):
        D = x.shape[-1]
        drop = lambda t: F.dropout(t, self.p, self.training)
        if self.norm_first:
            return x + drop(f(F.layer_norm(x, (D,), g, b)))
        return F.layer_norm(x + drop(f(x)), (D,), g, b)

    def forward(self, x, mask=None):
        x = self._sub(x, lambda h: self.attn(h, h, h, mask=mask), self.g1, self.b1)
        x = self._sub(x, self.ffn, self.g2, self.b2)
        return x
""",
    name="encoder_block_functional_layer_norm",
)

# right
right(
    "ch04_blocks",
    "encoder_block",
    """
class EncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.mha = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.ln_attn = nn.LayerNorm(d_model)
        self.ln_ff = nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)   # no parameters, fine to reuse

    def forward(self, x, mask=None):
        if not self.norm_first:
            a = self.mha(x, x, x, mask=mask)
            x = self.ln_attn(x + self.drop(a))
            f = self.ff(x)
            x = self.ln_ff(x + self.drop(f))
        else:
            n = self.ln_attn(x)
            x = x + self.drop(self.mha(n, n, n, mask=mask))
            n = self.ln_ff(x)
            x = x + self.drop(self.ff(n))
        return x
""",
    name="encoder_block_shared_dropout_module",
)
