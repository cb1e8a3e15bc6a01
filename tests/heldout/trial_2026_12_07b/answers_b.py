"""Held-out answers, writer B (chapters 5-8, the decoding bug hunt, the own model).

Written from the exercise sources, the lessons and tformer_ref only, without reading
the checks. Each answer replaces one solution cell.
"""

from harness import right, wrong

# ======================================================================================
# ch05_model / sinusoidal_encoding
# ======================================================================================

wrong(
    "ch05_model",
    "sinusoidal_encoding",
    "frequency exponent uses the pair index i over D (i/D) instead of 2i/D: the "
    "frequencies fall off half as fast as the paper's",
    '''
def sinusoidal_encoding(n_positions, d_model):
    """-> [n_positions, d_model]."""
    pe = torch.zeros(n_positions, d_model)
    pos = torch.arange(n_positions).unsqueeze(1).float()   # [N, 1]
    i = torch.arange(d_model // 2).float()                  # which sin/cos pair
    div = 10000 ** (i / d_model)
    pe[:, 0::2] = torch.sin(pos / div)
    pe[:, 1::2] = torch.cos(pos / div)
    return pe
''',
    name="b_sin_pair_index_exponent",
)

wrong(
    "ch05_model",
    "sinusoidal_encoding",
    "sines in the first D/2 columns and cosines in the last D/2 (concatenated) "
    "instead of interleaved even/odd columns",
    '''
def sinusoidal_encoding(n_positions, d_model):
    """-> [n_positions, d_model]."""
    pos = torch.arange(n_positions, dtype=torch.float64).unsqueeze(1)
    freqs = 1.0 / (10000 ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model))
    angles = pos * freqs  # [N, D/2]
    # sin half, cos half
    pe = torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1)
    return pe.float()
''',
    name="b_sin_halves_concat",
)

wrong(
    "ch05_model",
    "sinusoidal_encoding",
    "positions start at 1 instead of 0 (row 0 is the encoding of position 1)",
    '''
def sinusoidal_encoding(n_positions, d_model):
    """-> [n_positions, d_model]."""
    # positions 1..n (the first token is position 1)
    positions = torch.arange(1, n_positions + 1, dtype=torch.float32)[:, None]
    two_i = torch.arange(0, d_model, 2, dtype=torch.float32)
    angle = positions / torch.pow(10000.0, two_i / d_model)
    pe = torch.zeros(n_positions, d_model)
    pe[:, 0::2] = angle.sin()
    pe[:, 1::2] = angle.cos()
    return pe
''',
    name="b_sin_positions_from_one",
)

wrong(
    "ch05_model",
    "sinusoidal_encoding",
    "the cosine in odd column j uses exponent j/D instead of (j-1)/D: each cosine has "
    "a different frequency from its paired sine",
    '''
def sinusoidal_encoding(n_positions, d_model):
    """-> [n_positions, d_model]."""
    pe = torch.zeros(n_positions, d_model, dtype=torch.float64)
    for pos in range(n_positions):
        for j in range(d_model):
            if j % 2 == 0:
                pe[pos, j] = math.sin(pos / 10000 ** (j / d_model))
            else:
                pe[pos, j] = math.cos(pos / 10000 ** (j / d_model))
    return pe.float()
''',
    name="b_sin_loop_odd_exponent",
)

wrong(
    "ch05_model",
    "sinusoidal_encoding",
    "integer division 2*i // d_model in the exponent: every exponent is 0, so every "
    "pair has frequency 1",
    '''
def sinusoidal_encoding(n_positions, d_model):
    """-> [n_positions, d_model]."""
    pe = torch.zeros(n_positions, d_model)
    for pos in range(n_positions):
        for i in range(d_model // 2):
            denom = 10000 ** (2 * i // d_model)
            pe[pos, 2 * i] = math.sin(pos / denom)
            pe[pos, 2 * i + 1] = math.cos(pos / denom)
    return pe
''',
    name="b_sin_integer_division",
)

wrong(
    "ch05_model",
    "sinusoidal_encoding",
    "sine and cosine swapped: cosines in the even columns, sines in the odd ones "
    "(row 0 is [1, 0, 1, 0, ...])",
    '''
def sinusoidal_encoding(n_positions, d_model):
    """-> [n_positions, d_model]."""
    position = torch.arange(n_positions, dtype=torch.float64).unsqueeze(-1)
    div_term = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64)
                         * (-math.log(10000.0) / d_model))
    pe = torch.empty(n_positions, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.cos(position * div_term)
    pe[:, 1::2] = torch.sin(position * div_term)
    return pe.to(torch.float32)
''',
    name="b_sin_cos_swapped",
)

right(
    "ch05_model",
    "sinusoidal_encoding",
    '''
def sinusoidal_encoding(n_positions, d_model):
    """-> [n_positions, d_model]."""
    pos = torch.arange(n_positions, dtype=torch.float64).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2).double() * (-math.log(10000.0) / d_model))
    ang = pos * div_term                      # [N, D/2]
    # interleave: stack to [N, D/2, 2] (sin, cos) and flatten the last two axes
    pe = torch.stack((torch.sin(ang), torch.cos(ang)), dim=2).flatten(1)
    return pe.float()
''',
    name="b_sin_right_stack_interleave",
)

right(
    "ch05_model",
    "sinusoidal_encoding",
    '''
def sinusoidal_encoding(n_positions, d_model):
    """-> [n_positions, d_model]."""
    rows = []
    for pos in range(n_positions):
        row = []
        for i in range(0, d_model, 2):
            w = 1 / 10000 ** (i / d_model)
            row += [math.sin(pos * w), math.cos(pos * w)]
        rows.append(row)
    return torch.tensor(rows, dtype=torch.float32).reshape(n_positions, d_model)
''',
    name="b_sin_right_python_loops",
)

# ======================================================================================
# ch05_model / embed
# ======================================================================================

wrong(
    "ch05_model",
    "embed",
    "scales the embeddings by sqrt(vocabulary size) instead of sqrt(d_model)",
    '''
def embed(tokens, table, pe):
    """tokens [B, S] long, table nn.Embedding(V, D), pe [max_len, D] -> [B, S, D]."""
    scale = math.sqrt(table.num_embeddings)
    return table(tokens) * scale + pe[: tokens.size(1)]
''',
    name="b_embed_sqrt_vocab",
)

wrong(
    "ch05_model",
    "embed",
    "no sqrt(d_model) scaling of the token embeddings",
    '''
def embed(tokens, table, pe):
    """tokens [B, S] long, table nn.Embedding(V, D), pe [max_len, D] -> [B, S, D]."""
    x = table(tokens)              # [B, S, D]
    seq_len = tokens.shape[1]
    return x + pe[:seq_len]        # token embedding + its position
''',
    name="b_embed_no_scale",
)

wrong(
    "ch05_model",
    "embed",
    "divides the embeddings by sqrt(d_model) instead of multiplying",
    '''
def embed(tokens, table, pe):
    """tokens [B, S] long, table nn.Embedding(V, D), pe [max_len, D] -> [B, S, D]."""
    d = table.embedding_dim
    emb = table(tokens) / math.sqrt(d)
    return emb + pe[:tokens.size(1), :]
''',
    name="b_embed_divide_sqrt",
)

wrong(
    "ch05_model",
    "embed",
    "scales after adding the positions: (embedding + pe) * sqrt(D), so the positional "
    "encoding is multiplied too",
    '''
def embed(tokens, table, pe):
    """tokens [B, S] long, table nn.Embedding(V, D), pe [max_len, D] -> [B, S, D]."""
    S = tokens.size(1)
    x = table(tokens) + pe[:S]
    return x * math.sqrt(table.embedding_dim)
''',
    name="b_embed_scale_after_pe",
)

wrong(
    "ch05_model",
    "embed",
    "scales the embedding table's weights in place (every call multiplies them by "
    "sqrt(D) again, and the caller's table is changed)",
    '''
def embed(tokens, table, pe):
    """tokens [B, S] long, table nn.Embedding(V, D), pe [max_len, D] -> [B, S, D]."""
    # scale the embedding weights by sqrt(d_model) like in the paper
    with torch.no_grad():
        table.weight.mul_(math.sqrt(table.embedding_dim))
    return table(tokens) + pe[:tokens.size(1)]
''',
    name="b_embed_scale_weights_inplace",
)

wrong(
    "ch05_model",
    "embed",
    "takes the sequence length from tokens.shape[0] (the batch axis, a sequence-first "
    "habit): adds the first B rows of pe, which broadcasts wrongly or raises",
    '''
def embed(tokens, table, pe):
    """tokens [B, S] long, table nn.Embedding(V, D), pe [max_len, D] -> [B, S, D]."""
    seq_len = tokens.shape[0]
    x = table(tokens) * math.sqrt(table.embedding_dim)
    return x + pe[:seq_len]
''',
    name="b_embed_len_from_batch_axis",
)

right(
    "ch05_model",
    "embed",
    '''
def embed(tokens, table, pe):
    """tokens [B, S] long, table nn.Embedding(V, D), pe [max_len, D] -> [B, S, D]."""
    x = table(tokens)
    x = x * (x.size(-1) ** 0.5)
    positions = pe[: x.size(1)].unsqueeze(0).to(dtype=x.dtype)  # [1, S, D]
    return x + positions
''',
    name="b_embed_right_unsqueeze",
)

right(
    "ch05_model",
    "embed",
    '''
def embed(tokens, table, pe):
    """tokens [B, S] long, table nn.Embedding(V, D), pe [max_len, D] -> [B, S, D]."""
    n = tokens.shape[-1]
    # pe[:n] + sqrt(D) * table(tokens), broadcast over the batch
    return torch.add(pe[:n], table(tokens), alpha=math.sqrt(table.embedding_dim))
''',
    name="b_embed_right_torch_add_alpha",
)

# ======================================================================================
# ch05_model / decoder_block
# ======================================================================================

_DEC_INIT = """
class DecoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
"""

wrong(
    "ch05_model",
    "decoder_block",
    "cross-attention takes its queries from memory and keys/values from the decoder "
    "states (arguments swapped): wrong length [B, Ss, D], raises when Ss != St",
    _DEC_INIT
    + """
    def forward(self, x, memory, src_mask=None):
        St = x.size(1)
        causal = torch.tril(torch.ones(St, St, dtype=torch.bool, device=x.device))
        causal = causal.unsqueeze(0).unsqueeze(0)
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        # cross attention: the encoder output asks the decoder
        x = self.norm2(x + self.dropout(self.cross_attn(memory, x, x, mask=src_mask)))
        x = self.norm3(x + self.dropout(self.ff(x)))
        return x
""",
    name="b_dec_cross_q_from_memory",
)

wrong(
    "ch05_model",
    "decoder_block",
    "causal mask built with triu (upper triangle kept): each position attends to "
    "itself and the future, not the past",
    _DEC_INIT
    + """
    def forward(self, x, memory, src_mask=None):
        n = x.shape[1]
        causal = torch.triu(torch.ones(n, n, device=x.device)).bool()[None, None]
        h = self.self_attn(x, x, x, mask=causal)
        x = self.norm1(x + self.dropout(h))
        h = self.cross_attn(x, memory, memory, mask=src_mask)
        x = self.norm2(x + self.dropout(h))
        h = self.ff(x)
        return self.norm3(x + self.dropout(h))
""",
    name="b_dec_triu_mask",
)

wrong(
    "ch05_model",
    "decoder_block",
    "no dropout on the cross-attention sublayer's output",
    _DEC_INIT
    + """
    def forward(self, x, memory, src_mask=None):
        St = x.size(1)
        mask = torch.ones(St, St, dtype=torch.bool, device=x.device).tril().view(1, 1, St, St)
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=mask)))
        x = self.norm2(x + self.cross_attn(x, memory, memory, mask=src_mask))
        x = self.norm3(x + self.dropout(self.ff(x)))
        return x
""",
    name="b_dec_no_cross_dropout",
)

wrong(
    "ch05_model",
    "decoder_block",
    "Pre-LN wiring (x + Dropout(Sublayer(LayerNorm(x)))) instead of the required "
    "Post-LN",
    _DEC_INIT
    + """
    def forward(self, x, memory, src_mask=None):
        St = x.size(1)
        causal = torch.ones(St, St, dtype=torch.bool, device=x.device).tril()[None, None]
        h = self.norm1(x)
        x = x + self.dropout(self.self_attn(h, h, h, mask=causal))
        h = self.norm2(x)
        x = x + self.dropout(self.cross_attn(h, memory, memory, mask=src_mask))
        x = x + self.dropout(self.ff(self.norm3(x)))
        return x
""",
    name="b_dec_pre_ln",
)

wrong(
    "ch05_model",
    "decoder_block",
    "one LayerNorm module shared by all three sublayers instead of three",
    """
class DecoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))
        self.norm = nn.LayerNorm(d_model)   # layer norm after each sublayer
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        St = x.size(1)
        causal = torch.ones(St, St, dtype=torch.bool, device=x.device).tril()[None, None]
        x = self.norm(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        x = self.norm(x + self.dropout(self.cross_attn(x, memory, memory, mask=src_mask)))
        x = self.norm(x + self.dropout(self.ff(x)))
        return x
""",
    name="b_dec_shared_layernorm",
)

wrong(
    "ch05_model",
    "decoder_block",
    "src_mask is never passed to the cross-attention: padded source positions are "
    "attended to",
    _DEC_INIT
    + """
    def forward(self, x, memory, src_mask=None):
        St = x.size(1)
        tgt_mask = torch.tril(torch.ones(St, St, device=x.device, dtype=torch.bool))
        tgt_mask = tgt_mask[None, None, :, :]
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=tgt_mask)))
        # encoder-decoder attention
        x = self.norm2(x + self.dropout(self.cross_attn(x, memory, memory)))
        x = self.norm3(x + self.dropout(self.ff(x)))
        return x
""",
    name="b_dec_cross_no_src_mask",
)

wrong(
    "ch05_model",
    "decoder_block",
    "the cross-attention residual adds the block's original input x instead of the "
    "self-attention sublayer's output (residual from the wrong tensor)",
    _DEC_INIT
    + """
    def forward(self, x, memory, src_mask=None):
        St = x.size(1)
        causal = torch.ones(St, St, dtype=torch.bool, device=x.device).tril()[None, None]
        out1 = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        out2 = self.norm2(x + self.dropout(self.cross_attn(out1, memory, memory, mask=src_mask)))
        out3 = self.norm3(out2 + self.dropout(self.ff(out2)))
        return out3
""",
    name="b_dec_cross_residual_from_input",
)

wrong(
    "ch05_model",
    "decoder_block",
    "the causal mask is a float tensor of ones/zeros, not bool: the attention rejects "
    "it (TypeError)",
    _DEC_INIT
    + """
    def forward(self, x, memory, src_mask=None):
        St = x.size(1)
        causal = torch.tril(torch.ones(1, 1, St, St, device=x.device))  # 1 = attend
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        x = self.norm2(x + self.dropout(self.cross_attn(x, memory, memory, mask=src_mask)))
        return self.norm3(x + self.dropout(self.ff(x)))
""",
    name="b_dec_float_causal_mask",
)

wrong(
    "ch05_model",
    "decoder_block",
    "one MultiHeadAttention module used for both the self-attention and the "
    "cross-attention (shared weights)",
    """
class DecoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.ln1 = nn.LayerNorm(d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.ln3 = nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        L = x.size(1)
        causal = torch.ones(L, L, dtype=torch.bool, device=x.device).tril()[None, None]
        x = self.ln1(x + self.drop(self.attn(x, x, x, mask=causal)))
        x = self.ln2(x + self.drop(self.attn(x, memory, memory, mask=src_mask)))
        return self.ln3(x + self.drop(self.ff(x)))
""",
    name="b_dec_shared_attention",
)

wrong(
    "ch05_model",
    "decoder_block",
    "adds the first residual in place (x += ...): the caller's input tensor x is "
    "changed",
    _DEC_INIT
    + """
    def forward(self, x, memory, src_mask=None):
        St = x.size(1)
        causal = torch.ones(St, St, dtype=torch.bool, device=x.device).tril()[None, None]
        x += self.dropout(self.self_attn(x, x, x, mask=causal))
        x = self.norm1(x)
        x = self.norm2(x + self.dropout(self.cross_attn(x, memory, memory, mask=src_mask)))
        x = self.norm3(x + self.dropout(self.ff(x)))
        return x
""",
    name="b_dec_inplace_residual",
)

wrong(
    "ch05_model",
    "decoder_block",
    "GELU in the feed-forward instead of ReLU",
    """
class DecoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.fc1 = nn.Linear(d_model, d_ff)
        self.fc2 = nn.Linear(d_ff, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        St = x.size(1)
        causal = torch.ones(St, St, dtype=torch.bool, device=x.device).tril()[None, None]
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        x = self.norm2(x + self.dropout(self.cross_attn(x, memory, memory, mask=src_mask)))
        ff = self.fc2(F.gelu(self.fc1(x)))
        return self.norm3(x + self.dropout(ff))
""",
    name="b_dec_gelu_ff",
)

right(
    "ch05_model",
    "decoder_block",
    '''
class LayerNorm(nn.Module):
    """LayerNorm by hand: normalise the last axis, then gain and bias."""

    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.gain = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))
        self.eps = eps

    def forward(self, x):
        mu = x.mean(-1, keepdim=True)
        var = x.var(-1, unbiased=False, keepdim=True)
        return self.gain * (x - mu) / torch.sqrt(var + self.eps) + self.bias


class DecoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.masked_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.enc_dec_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.w1 = nn.Linear(d_model, d_ff)
        self.w2 = nn.Linear(d_ff, d_model)
        self.ln_self = LayerNorm(d_model)
        self.ln_cross = LayerNorm(d_model)
        self.ln_ff = LayerNorm(d_model)
        self.drop_self = nn.Dropout(dropout)
        self.drop_cross = nn.Dropout(dropout)
        self.drop_ff = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        t = x.size(1)
        idx = torch.arange(t, device=x.device)
        keep = (idx[None, :] <= idx[:, None]).view(1, 1, t, t)  # key j <= query i
        a = self.masked_attn(x, x, x, mask=keep)
        x = self.ln_self(x + self.drop_self(a))
        c = self.enc_dec_attn(x, memory, memory, mask=src_mask)
        x = self.ln_cross(x + self.drop_cross(c))
        f = self.w2(torch.relu(self.w1(x)))
        return self.ln_ff(x + self.drop_ff(f))
''',
    name="b_dec_right_handmade_layernorm",
)

right(
    "ch05_model",
    "decoder_block",
    """
from tformer_ref.masks import causal_mask


class DecoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.attn_self = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.attn_cross = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.feed_forward = nn.Sequential(
            nn.Linear(d_model, d_ff),
            nn.ReLU(),
            nn.Linear(d_ff, d_model),
        )
        self.norms = nn.ModuleList([nn.LayerNorm(d_model) for _ in range(3)])
        self.drop = nn.Dropout(p=dropout)

    def forward(self, x, memory, src_mask=None):
        mask = causal_mask(x.size(1), x.device)  # [1, 1, St, St], True = attend
        y = self.attn_self(x, x, x, mask=mask)
        x = self.norms[0](x + self.drop(y))
        y = self.attn_cross(x, memory, memory, mask=src_mask)
        x = self.norms[1](x + self.drop(y))
        y = self.feed_forward(x)
        x = self.norms[2](x + self.drop(y))
        return x
""",
    name="b_dec_right_modulelist_norms",
)

# ======================================================================================
# ch06_training / shift_targets
# ======================================================================================

wrong(
    "ch06_training",
    "shift_targets",
    "sequence-first slices on batch-first tensors: drops the last/first *row* of the "
    "batch instead of the last/first position",
    '''
def shift_targets(tgt):
    """tgt [B, St] -> (decoder input [B, St-1], labels [B, St-1])."""
    tgt_in = tgt[:-1]
    labels = tgt[1:]
    return tgt_in, labels
''',
    name="b_shift_seq_first",
)

wrong(
    "ch06_training",
    "shift_targets",
    "returns (labels, decoder input): the two slices swapped",
    '''
def shift_targets(tgt):
    """tgt [B, St] -> (decoder input [B, St-1], labels [B, St-1])."""
    dec_input = tgt[:, :-1]
    target = tgt[:, 1:]
    return target, dec_input
''',
    name="b_shift_swapped",
)

wrong(
    "ch06_training",
    "shift_targets",
    "replaces EOS by PAD in the decoder input (the decoder 'should not read EOS'): "
    "ids change where a padded row's EOS falls inside tgt_in",
    '''
def shift_targets(tgt):
    """tgt [B, St] -> (decoder input [B, St-1], labels [B, St-1])."""
    tgt_in = tgt[:, :-1].clone()
    tgt_in[tgt_in == 2] = 0   # the decoder reads BOS y1 .. yn, never the EOS
    labels = tgt[:, 1:]
    return tgt_in, labels
''',
    name="b_shift_eos_to_pad",
)

wrong(
    "ch06_training",
    "shift_targets",
    "flattens the labels to [B*(St-1)] (ready for cross_entropy) instead of [B, St-1]",
    '''
def shift_targets(tgt):
    """tgt [B, St] -> (decoder input [B, St-1], labels [B, St-1])."""
    tgt_in = tgt[:, :-1]
    labels = tgt[:, 1:].contiguous().view(-1)  # flat for the loss
    return tgt_in, labels
''',
    name="b_shift_flat_labels",
)

wrong(
    "ch06_training",
    "shift_targets",
    "shifts the labels with roll and keeps full length: returns tgt itself and a "
    "rolled copy, both [B, St], with a PAD label at the end",
    '''
def shift_targets(tgt):
    """tgt [B, St] -> (decoder input [B, St-1], labels [B, St-1])."""
    labels = torch.roll(tgt, shifts=-1, dims=1)
    labels[:, -1] = 0   # nothing to predict after the last position
    return tgt, labels
''',
    name="b_shift_roll_full_length",
)

right(
    "ch06_training",
    "shift_targets",
    '''
def shift_targets(tgt):
    """tgt [B, St] -> (decoder input [B, St-1], labels [B, St-1])."""
    n = tgt.size(1) - 1
    return tgt.narrow(1, 0, n), tgt.narrow(1, 1, n)
''',
    name="b_shift_right_narrow",
)

right(
    "ch06_training",
    "shift_targets",
    '''
def shift_targets(tgt):
    """tgt [B, St] -> (decoder input [B, St-1], labels [B, St-1])."""
    decoder_in = tgt[..., :-1]
    # the next token of each position; the wrapped-around last column is dropped
    labels = tgt.roll(-1, dims=-1)[..., :-1]
    return decoder_in, labels
''',
    name="b_shift_right_roll_slice",
)

# ======================================================================================
# ch06_training / sequence_loss
# ======================================================================================

wrong(
    "ch06_training",
    "sequence_loss",
    "no ignore_index: PAD labels count in the loss",
    '''
def sequence_loss(logits, labels, pad_id, label_smoothing):
    """logits [B, St, V], labels [B, St] -> scalar."""
    V = logits.size(-1)
    return F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1),
                           label_smoothing=label_smoothing)
''',
    name="b_loss_no_ignore",
)

wrong(
    "ch06_training",
    "sequence_loss",
    "mean over each sequence's real tokens, then mean over sequences (short "
    "sequences' tokens weigh more)",
    '''
def sequence_loss(logits, labels, pad_id, label_smoothing):
    """logits [B, St, V], labels [B, St] -> scalar."""
    per_tok = F.cross_entropy(logits.transpose(1, 2), labels, ignore_index=pad_id,
                              label_smoothing=label_smoothing, reduction="none")  # [B, St]
    mask = (labels != pad_id).to(per_tok.dtype)
    per_seq = (per_tok * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)
    return per_seq.mean()
''',
    name="b_loss_mean_of_sequences",
)

wrong(
    "ch06_training",
    "sequence_loss",
    "hand-written label smoothing in the Annotated Transformer's style: 1-eps on the "
    "label and eps/(V-1) on every other class, not PyTorch's eps/V on all classes",
    '''
def sequence_loss(logits, labels, pad_id, label_smoothing):
    """logits [B, St, V], labels [B, St] -> scalar."""
    V = logits.size(-1)
    logp = F.log_softmax(logits, dim=-1)
    with torch.no_grad():
        true_dist = torch.full_like(logp, label_smoothing / (V - 1))
        true_dist.scatter_(-1, labels.unsqueeze(-1), 1.0 - label_smoothing)
    loss = -(true_dist * logp).sum(-1)         # [B, St]
    keep = labels != pad_id
    return loss[keep].mean()
''',
    name="b_loss_smoothing_v_minus_1",
)

wrong(
    "ch06_training",
    "sequence_loss",
    "softmax applied before F.cross_entropy (which applies log-softmax itself): a "
    "double softmax",
    '''
def sequence_loss(logits, labels, pad_id, label_smoothing):
    """logits [B, St, V], labels [B, St] -> scalar."""
    probs = torch.softmax(logits, dim=-1)
    return F.cross_entropy(probs.flatten(0, 1), labels.flatten(),
                           ignore_index=pad_id, label_smoothing=label_smoothing)
''',
    name="b_loss_double_softmax",
)

wrong(
    "ch06_training",
    "sequence_loss",
    "ignore_index hard-coded to 0 instead of pad_id",
    '''
PAD_IDX = 0


def sequence_loss(logits, labels, pad_id, label_smoothing):
    """logits [B, St, V], labels [B, St] -> scalar."""
    return F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]),
        labels.reshape(-1),
        ignore_index=PAD_IDX,
        label_smoothing=label_smoothing,
    )
''',
    name="b_loss_pad_hardcoded",
)

wrong(
    "ch06_training",
    "sequence_loss",
    "writes -100 into the caller's labels in place (labels[labels == pad_id] = -100) "
    "to use cross_entropy's default ignore_index",
    '''
def sequence_loss(logits, labels, pad_id, label_smoothing):
    """logits [B, St, V], labels [B, St] -> scalar."""
    labels[labels == pad_id] = -100   # the default ignore_index of cross_entropy
    return F.cross_entropy(logits.view(-1, logits.size(-1)), labels.reshape(-1),
                           label_smoothing=label_smoothing)
''',
    name="b_loss_labels_inplace",
)

wrong(
    "ch06_training",
    "sequence_loss",
    "label smoothing as a KL divergence to the smoothed target (smaller than the "
    "cross-entropy by the target's entropy)",
    '''
def sequence_loss(logits, labels, pad_id, label_smoothing):
    """logits [B, St, V], labels [B, St] -> scalar."""
    V = logits.size(-1)
    logp = logits.log_softmax(-1).reshape(-1, V)
    flat = labels.reshape(-1)
    keep = flat != pad_id
    target = torch.full_like(logp, label_smoothing / V)
    target[torch.arange(flat.numel()), flat] += 1 - label_smoothing
    kl = F.kl_div(logp[keep], target[keep], reduction="sum")
    return kl / keep.sum()
''',
    name="b_loss_kl_div",
)

wrong(
    "ch06_training",
    "sequence_loss",
    "returns loss.item(), a Python float: no gradient flows",
    '''
def sequence_loss(logits, labels, pad_id, label_smoothing):
    """logits [B, St, V], labels [B, St] -> scalar."""
    loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1),
                           ignore_index=pad_id, label_smoothing=label_smoothing)
    return loss.item()
''',
    name="b_loss_item",
)

wrong(
    "ch06_training",
    "sequence_loss",
    "masks the padded tokens' losses but divides by every label (labels.numel()), "
    "pads included",
    '''
def sequence_loss(logits, labels, pad_id, label_smoothing):
    """logits [B, St, V], labels [B, St] -> scalar."""
    B, St, V = logits.shape
    losses = F.cross_entropy(logits.reshape(B * St, V), labels.reshape(B * St),
                             label_smoothing=label_smoothing, reduction="none")
    mask = (labels.reshape(-1) != pad_id).float()
    return (losses * mask).sum() / labels.numel()
''',
    name="b_loss_divide_all_tokens",
)

right(
    "ch06_training",
    "sequence_loss",
    '''
def sequence_loss(logits, labels, pad_id, label_smoothing):
    """logits [B, St, V], labels [B, St] -> scalar."""
    logp = torch.log_softmax(logits, dim=-1)                            # [B, St, V]
    safe = labels.masked_fill(labels == pad_id, 0)                      # any valid index
    nll = -logp.gather(-1, safe.unsqueeze(-1)).squeeze(-1)              # [B, St]
    uniform = -logp.mean(dim=-1)                                        # eps/V on every class
    per_token = (1 - label_smoothing) * nll + label_smoothing * uniform
    real = labels != pad_id
    return per_token[real].sum() / real.sum()
''',
    name="b_loss_right_by_hand",
)

right(
    "ch06_training",
    "sequence_loss",
    '''
def sequence_loss(logits, labels, pad_id, label_smoothing):
    """logits [B, St, V], labels [B, St] -> scalar."""
    # cross_entropy takes the class axis second: [B, V, St] against [B, St]
    return F.cross_entropy(logits.permute(0, 2, 1), labels,
                           ignore_index=pad_id, label_smoothing=label_smoothing)
''',
    name="b_loss_right_class_axis_second",
)

# ======================================================================================
# ch06_training / noam (noam_lambda and make_scheduler)
# ======================================================================================

wrong(
    "ch06_training",
    "noam",
    "avoids the division by zero with max(step, 1) instead of step + 1: steps 0 and 1 "
    "both get n = 1, and every later step is one behind",
    '''
def noam_lambda(step, d_model, warmup):
    """LambdaLR multiplier for 0-based ``step``."""
    step = max(step, 1)  # no 0 ** -0.5
    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


def make_scheduler(optimizer, d_model, warmup):
    """A scheduler that sets the Noam rate (the optimizer's lr is 1.0)."""
    return LambdaLR(optimizer, lambda step: noam_lambda(step, d_model, warmup))
''',
    name="b_noam_max_step_1",
)

wrong(
    "ch06_training",
    "noam",
    "uses the 0-based step as n directly: step 0 raises ZeroDivisionError (0 ** -0.5)",
    '''
def noam_lambda(step, d_model, warmup):
    """LambdaLR multiplier for 0-based ``step``."""
    return d_model ** (-0.5) * min(step ** (-0.5), step * warmup ** (-1.5))


def make_scheduler(optimizer, d_model, warmup):
    """A scheduler that sets the Noam rate (the optimizer's lr is 1.0)."""
    return LambdaLR(optimizer, lr_lambda=lambda s: noam_lambda(s, d_model, warmup))
''',
    name="b_noam_step_zero_div",
)

wrong(
    "ch06_training",
    "noam",
    "the d_model ** -0.5 factor is left out",
    '''
def noam_lambda(step, d_model, warmup):
    """LambdaLR multiplier for 0-based ``step``."""
    n = step + 1
    return min(1 / math.sqrt(n), n / warmup ** 1.5)


def make_scheduler(optimizer, d_model, warmup):
    """A scheduler that sets the Noam rate (the optimizer's lr is 1.0)."""
    return LambdaLR(optimizer, lambda step: noam_lambda(step, d_model, warmup))
''',
    name="b_noam_no_dmodel",
)

wrong(
    "ch06_training",
    "noam",
    "make_scheduler calls scheduler.step() once right after creating it: the first "
    "update gets step 1's rate, every update is one step ahead",
    '''
def noam_lambda(step, d_model, warmup):
    """LambdaLR multiplier for 0-based ``step``."""
    n = step + 1
    return d_model ** -0.5 * min(n ** -0.5, n * warmup ** -1.5)


def make_scheduler(optimizer, d_model, warmup):
    """A scheduler that sets the Noam rate (the optimizer's lr is 1.0)."""
    sched = LambdaLR(optimizer, lambda step: noam_lambda(step, d_model, warmup))
    sched.step()  # start the schedule
    return sched
''',
    name="b_noam_sched_extra_step",
)

wrong(
    "ch06_training",
    "noam",
    "passes noam_lambda itself to LambdaLR, which calls it with the step alone: "
    "TypeError (missing d_model and warmup)",
    '''
def noam_lambda(step, d_model, warmup):
    """LambdaLR multiplier for 0-based ``step``."""
    n = step + 1
    return (d_model ** -0.5) * min(n ** -0.5, n * (warmup ** -1.5))


def make_scheduler(optimizer, d_model, warmup):
    """A scheduler that sets the Noam rate (the optimizer's lr is 1.0)."""
    return LambdaLR(optimizer, noam_lambda)
''',
    name="b_noam_lambda_not_bound",
)

wrong(
    "ch06_training",
    "noam",
    "warmup ** 1.5 instead of warmup ** -1.5: the warm-up branch is never the "
    "minimum, so there is no warm-up (the rate starts at its peak and decays)",
    '''
def noam_lambda(step, d_model, warmup):
    """LambdaLR multiplier for 0-based ``step``."""
    n = step + 1
    return d_model ** -0.5 * min(n ** -0.5, n * warmup ** 1.5)


def make_scheduler(optimizer, d_model, warmup):
    """A scheduler that sets the Noam rate (the optimizer's lr is 1.0)."""
    return LambdaLR(optimizer, lambda step: noam_lambda(step, d_model, warmup))
''',
    name="b_noam_warmup_sign",
)

wrong(
    "ch06_training",
    "noam",
    "make_scheduler adds 1 to the step again (noam_lambda already converts to n = "
    "step + 1): the schedule runs one step ahead",
    '''
def noam_lambda(step, d_model, warmup):
    """LambdaLR multiplier for 0-based ``step``."""
    n = step + 1
    return d_model ** -0.5 * min(n ** -0.5, n * warmup ** -1.5)


def make_scheduler(optimizer, d_model, warmup):
    """A scheduler that sets the Noam rate (the optimizer's lr is 1.0)."""
    # LambdaLR counts from 0, the paper from 1
    return LambdaLR(optimizer, lambda epoch: noam_lambda(epoch + 1, d_model, warmup))
''',
    name="b_noam_double_plus_one",
)

right(
    "ch06_training",
    "noam",
    '''
import functools


def noam_lambda(step, d_model, warmup):
    """LambdaLR multiplier for 0-based ``step``."""
    n = step + 1  # the paper counts updates from 1
    if n < warmup:
        rate = n / (warmup * math.sqrt(warmup))   # linear warm-up
    else:
        rate = 1.0 / math.sqrt(n)                 # inverse square root decay
    return rate / math.sqrt(d_model)


def make_scheduler(optimizer, d_model, warmup):
    """A scheduler that sets the Noam rate (the optimizer's lr is 1.0)."""
    return LambdaLR(optimizer, functools.partial(noam_lambda, d_model=d_model, warmup=warmup))
''',
    name="b_noam_right_piecewise_partial",
)

# ======================================================================================
# ch06_training / train_step
# ======================================================================================

wrong(
    "ch06_training",
    "train_step",
    "never calls model.train(): a model handed over in eval mode trains without "
    "dropout",
    '''
def train_step(
    model, src, tgt, optimizer, scheduler, max_norm, pad_id, label_smoothing
):
    """One update -> (loss, gradient norm before clipping)."""
    optimizer.zero_grad()
    tgt_in, labels = shift_targets(tgt)
    logits = model(src, tgt_in)
    loss = sequence_loss(logits, labels, pad_id, label_smoothing)
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    scheduler.step()
    return loss.item(), grad_norm.item()
''',
    name="b_step_no_train_mode",
)

wrong(
    "ch06_training",
    "train_step",
    "scheduler.step() before optimizer.step(): the update uses the next step's rate",
    '''
def train_step(
    model, src, tgt, optimizer, scheduler, max_norm, pad_id, label_smoothing
):
    """One update -> (loss, gradient norm before clipping)."""
    model.train()
    optimizer.zero_grad()
    tgt_in, labels = shift_targets(tgt)
    loss = sequence_loss(model(src, tgt_in), labels, pad_id, label_smoothing)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scheduler.step()
    optimizer.step()
    return loss.item(), norm.item()
''',
    name="b_step_scheduler_first",
)

wrong(
    "ch06_training",
    "train_step",
    "clips after optimizer.step(): the update uses the unclipped gradients",
    '''
def train_step(
    model, src, tgt, optimizer, scheduler, max_norm, pad_id, label_smoothing
):
    """One update -> (loss, gradient norm before clipping)."""
    model.train()
    optimizer.zero_grad()
    dec_in, labels = shift_targets(tgt)
    out = model(src, dec_in)
    loss = sequence_loss(out, labels, pad_id, label_smoothing)
    loss.backward()
    optimizer.step()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scheduler.step()
    return loss.item(), norm.item()
''',
    name="b_step_clip_after_update",
)

wrong(
    "ch06_training",
    "train_step",
    "returns the gradient norm measured after clipping (recomputed from the clipped "
    "gradients) instead of the norm before clipping",
    '''
def train_step(
    model, src, tgt, optimizer, scheduler, max_norm, pad_id, label_smoothing
):
    """One update -> (loss, gradient norm before clipping)."""
    model.train()
    optimizer.zero_grad()
    tgt_in, labels = shift_targets(tgt)
    loss = sequence_loss(model(src, tgt_in), labels, pad_id, label_smoothing)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    # total gradient norm
    total = 0.0
    for p in model.parameters():
        if p.grad is not None:
            total += p.grad.norm(2).item() ** 2
    grad_norm = total ** 0.5
    optimizer.step()
    scheduler.step()
    return loss.item(), grad_norm
''',
    name="b_step_norm_after_clip",
)

wrong(
    "ch06_training",
    "train_step",
    "never zeroes the gradients: each batch's gradients add to the previous ones'",
    '''
def train_step(
    model, src, tgt, optimizer, scheduler, max_norm, pad_id, label_smoothing
):
    """One update -> (loss, gradient norm before clipping)."""
    model.train()
    tgt_in, labels = shift_targets(tgt)
    logits = model(src, tgt_in)
    loss = sequence_loss(logits, labels, pad_id, label_smoothing)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    scheduler.step()
    return loss.item(), norm.item()
''',
    name="b_step_no_zero_grad",
)

wrong(
    "ch06_training",
    "train_step",
    "feeds the decoder the whole tgt instead of tgt_in: logits [B, St, V] against "
    "labels [B, St-1], the loss raises",
    '''
def train_step(
    model, src, tgt, optimizer, scheduler, max_norm, pad_id, label_smoothing
):
    """One update -> (loss, gradient norm before clipping)."""
    model.train()
    optimizer.zero_grad()
    _, labels = shift_targets(tgt)
    logits = model(src, tgt)
    loss = sequence_loss(logits, labels, pad_id, label_smoothing)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    scheduler.step()
    return loss.item(), norm.item()
''',
    name="b_step_full_tgt_to_model",
)

wrong(
    "ch06_training",
    "train_step",
    "clips each parameter's gradient on its own to max_norm (and returns the sum of "
    "the per-parameter norms) instead of the total norm of all gradients together",
    '''
def train_step(
    model, src, tgt, optimizer, scheduler, max_norm, pad_id, label_smoothing
):
    """One update -> (loss, gradient norm before clipping)."""
    model.train()
    optimizer.zero_grad()
    tgt_in, labels = shift_targets(tgt)
    loss = sequence_loss(model(src, tgt_in), labels, pad_id, label_smoothing)
    loss.backward()
    norm = 0.0
    for p in model.parameters():
        if p.grad is not None:
            norm += torch.nn.utils.clip_grad_norm_(p, max_norm).item()
    optimizer.step()
    scheduler.step()
    return loss.item(), norm
''',
    name="b_step_clip_per_parameter",
)

wrong(
    "ch06_training",
    "train_step",
    "returns the loss and norm as tensors instead of Python floats",
    '''
def train_step(
    model, src, tgt, optimizer, scheduler, max_norm, pad_id, label_smoothing
):
    """One update -> (loss, gradient norm before clipping)."""
    model.train()
    optimizer.zero_grad()
    tgt_in, labels = shift_targets(tgt)
    loss = sequence_loss(model(src, tgt_in), labels, pad_id, label_smoothing)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    scheduler.step()
    return loss.detach(), norm
''',
    name="b_step_returns_tensors",
)

wrong(
    "ch06_training",
    "train_step",
    "clips element by element with clip_grad_value_ (and reports the norm computed "
    "after it) instead of clipping the total norm",
    '''
def train_step(
    model, src, tgt, optimizer, scheduler, max_norm, pad_id, label_smoothing
):
    """One update -> (loss, gradient norm before clipping)."""
    model.train()
    optimizer.zero_grad()
    tgt_in, labels = shift_targets(tgt)
    loss = sequence_loss(model(src, tgt_in), labels, pad_id, label_smoothing)
    loss.backward()
    torch.nn.utils.clip_grad_value_(model.parameters(), max_norm)
    grads = [p.grad.flatten() for p in model.parameters() if p.grad is not None]
    norm = torch.cat(grads).norm()
    optimizer.step()
    scheduler.step()
    return loss.item(), norm.item()
''',
    name="b_step_clip_value",
)

wrong(
    "ch06_training",
    "train_step",
    "divides the loss by the batch size before backward (the loss is already a mean "
    "over tokens): the gradients and the returned loss are B times too small",
    '''
def train_step(
    model, src, tgt, optimizer, scheduler, max_norm, pad_id, label_smoothing
):
    """One update -> (loss, gradient norm before clipping)."""
    model.train()
    optimizer.zero_grad()
    tgt_in, labels = shift_targets(tgt)
    loss = sequence_loss(model(src, tgt_in), labels, pad_id, label_smoothing)
    loss = loss / src.size(0)  # average over the batch
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    scheduler.step()
    return loss.item(), norm.item()
''',
    name="b_step_loss_over_batch",
)

right(
    "ch06_training",
    "train_step",
    '''
def train_step(
    model, src, tgt, optimizer, scheduler, max_norm, pad_id, label_smoothing
):
    """One update -> (loss, gradient norm before clipping)."""
    model.train(True)
    optimizer.zero_grad(set_to_none=True)
    decoder_input, targets = shift_targets(tgt)
    logits = model(src, decoder_input)
    loss = sequence_loss(logits, targets, pad_id, label_smoothing)
    loss.backward()
    params = [p for p in model.parameters() if p.grad is not None]
    total_norm = torch.nn.utils.clip_grad_norm_(params, max_norm=max_norm, norm_type=2.0)
    optimizer.step()
    scheduler.step()
    return float(loss.detach()), float(total_norm)
''',
    name="b_step_right_floats",
)

# ======================================================================================
# ch06_training / greedy_decode
# ======================================================================================

wrong(
    "ch06_training",
    "greedy_decode",
    "passes no target mask to decode (tgt_mask=None means no masking): the prefix "
    "positions see each other's future",
    '''
def greedy_decode(model, src, max_len, bos_id, eos_id, pad_id):
    """src [B, Ss] -> [B, T] token ids: BOS, the decoded tokens, EOS, then padding."""
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        B = src.size(0)
        ys = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros(B, dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            logits = model.decode(ys, memory, src_mask, None)
            next_tok = logits[:, -1, :].argmax(-1)
            next_tok = torch.where(done, torch.full_like(next_tok, pad_id), next_tok)
            ys = torch.cat([ys, next_tok.unsqueeze(1)], dim=1)
            done = done | (next_tok == eos_id)
            if done.all():
                break
    return ys
''',
    name="b_greedy_no_causal_mask",
)

wrong(
    "ch06_training",
    "greedy_decode",
    "finished rows keep getting argmax tokens after their EOS (no padding)",
    '''
def greedy_decode(model, src, max_len, bos_id, eos_id, pad_id):
    """src [B, Ss] -> [B, T] token ids: BOS, the decoded tokens, EOS, then padding."""
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        for _ in range(max_len):
            t = out.size(1)
            logits = model.decode(out, memory, src_mask, causal_mask(t, src.device))
            nxt = logits[:, -1].argmax(dim=-1, keepdim=True)
            out = torch.cat([out, nxt], dim=1)
            if (out == eos_id).any(dim=1).all():
                break
    return out
''',
    name="b_greedy_no_pad_after_eos",
)

wrong(
    "ch06_training",
    "greedy_decode",
    "runs max_len - 1 steps: a row that never ends gets max_len - 1 new tokens",
    '''
def greedy_decode(model, src, max_len, bos_id, eos_id, pad_id):
    """src [B, Ss] -> [B, T] token ids: BOS, the decoded tokens, EOS, then padding."""
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        finished = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for step in range(max_len - 1):
            mask = causal_mask(out.size(1), src.device)
            logits = model.decode(out, memory, src_mask, mask)
            nxt = logits[:, -1].argmax(dim=-1).masked_fill(finished, pad_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            finished |= nxt == eos_id
            if finished.all():
                break
    return out
''',
    name="b_greedy_max_len_minus_one",
)

wrong(
    "ch06_training",
    "greedy_decode",
    "uses the usual ids 1, 2, 0 instead of the bos_id, eos_id, pad_id arguments",
    '''
BOS, EOS, PAD = 1, 2, 0


def greedy_decode(model, src, max_len, bos_id, eos_id, pad_id):
    """src [B, Ss] -> [B, T] token ids: BOS, the decoded tokens, EOS, then padding."""
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), BOS, dtype=torch.long, device=src.device)
        finished = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            logits = model.decode(out, memory, src_mask, causal_mask(out.size(1), src.device))
            nxt = logits[:, -1].argmax(dim=-1).masked_fill(finished, PAD)
            out = torch.cat([out, nxt[:, None]], dim=1)
            finished |= nxt == EOS
            if finished.all():
                break
    return out
''',
    name="b_greedy_hardcoded_ids",
)

wrong(
    "ch06_training",
    "greedy_decode",
    "stops as soon as any row has produced EOS, not when every row has",
    '''
def greedy_decode(model, src, max_len, bos_id, eos_id, pad_id):
    """src [B, Ss] -> [B, T] token ids: BOS, the decoded tokens, EOS, then padding."""
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        tokens = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
        for _ in range(max_len):
            logits = model.decode(tokens, memory, src_mask,
                                  causal_mask(tokens.shape[1], src.device))
            nxt = logits[:, -1].argmax(-1)
            tokens = torch.cat([tokens, nxt.unsqueeze(-1)], dim=-1)
            if (nxt == eos_id).any():
                break
    return tokens
''',
    name="b_greedy_stop_on_any_eos",
)

wrong(
    "ch06_training",
    "greedy_decode",
    "feeds the decoder only the last token at each step instead of the whole prefix "
    "(there is no cache)",
    '''
def greedy_decode(model, src, max_len, bos_id, eos_id, pad_id):
    """src [B, Ss] -> [B, T] token ids: BOS, the decoded tokens, EOS, then padding."""
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        finished = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            last = out[:, -1:]                               # the newest token
            logits = model.decode(last, memory, src_mask, causal_mask(1, src.device))
            nxt = logits[:, -1].argmax(dim=-1).masked_fill(finished, pad_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            finished |= nxt == eos_id
            if finished.all():
                break
    return out
''',
    name="b_greedy_last_token_only",
)

wrong(
    "ch06_training",
    "greedy_decode",
    "updates the finished flags before padding: each row's EOS itself is replaced by "
    "PAD",
    '''
def greedy_decode(model, src, max_len, bos_id, eos_id, pad_id):
    """src [B, Ss] -> [B, T] token ids: BOS, the decoded tokens, EOS, then padding."""
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        finished = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            logits = model.decode(out, memory, src_mask, causal_mask(out.size(1), src.device))
            nxt = logits[:, -1].argmax(dim=-1)
            finished |= nxt == eos_id
            nxt = nxt.masked_fill(finished, pad_id)    # pad the rows that are done
            out = torch.cat([out, nxt[:, None]], dim=1)
            if finished.all():
                break
    return out
''',
    name="b_greedy_eos_overwritten",
)

wrong(
    "ch06_training",
    "greedy_decode",
    "never puts the model in eval mode: dropout stays on while decoding",
    '''
def greedy_decode(model, src, max_len, bos_id, eos_id, pad_id):
    """src [B, Ss] -> [B, T] token ids: BOS, the decoded tokens, EOS, then padding."""
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        finished = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            logits = model.decode(out, memory, src_mask, causal_mask(out.size(1), src.device))
            nxt = logits[:, -1].argmax(dim=-1).masked_fill(finished, pad_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            finished |= nxt == eos_id
            if finished.all():
                break
    return out
''',
    name="b_greedy_no_eval",
)

wrong(
    "ch06_training",
    "greedy_decode",
    "inverts the causal mask (~causal_mask, read as True = masked): each position "
    "sees only the future, and the first position nothing",
    '''
def greedy_decode(model, src, max_len, bos_id, eos_id, pad_id):
    """src [B, Ss] -> [B, T] token ids: BOS, the decoded tokens, EOS, then padding."""
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        finished = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            # mask out the future positions
            tgt_mask = ~causal_mask(out.size(1), src.device)
            logits = model.decode(out, memory, src_mask, tgt_mask)
            nxt = logits[:, -1].argmax(dim=-1).masked_fill(finished, pad_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            finished |= nxt == eos_id
            if finished.all():
                break
    return out
''',
    name="b_greedy_inverted_mask",
)

right(
    "ch06_training",
    "greedy_decode",
    '''
def greedy_decode(model, src, max_len, bos_id, eos_id, pad_id):
    """src [B, Ss] -> [B, T] token ids: BOS, the decoded tokens, EOS, then padding."""
    model.eval()
    B = src.shape[0]
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        seq = torch.full((B, max_len + 1), pad_id, dtype=torch.long, device=src.device)
        seq[:, 0] = bos_id
        alive = torch.ones(B, dtype=torch.bool, device=src.device)
        length = 1
        while length <= max_len and alive.any():
            prefix = seq[:, :length]
            logits = model.decode(prefix, memory, src_mask, causal_mask(length, src.device))
            best = logits[:, -1, :].max(dim=-1).indices
            seq[:, length] = torch.where(alive, best, torch.full_like(best, pad_id))
            alive = alive & (best != eos_id)
            length += 1
    return seq[:, :length]
''',
    name="b_greedy_right_preallocated",
)

# ======================================================================================
# ch06_bughunt / generate_text
# ======================================================================================

wrong(
    "ch06_bughunt",
    "generate_text",
    "fixes the target mask (free function, moved to the device) but still passes None "
    "as the source mask: the source's padding is attended to (bug 3 left in)",
    """
def generate_text(model, src, max_length, device):
    model.eval()
    with torch.no_grad():
        # 编码源序列
        enc_src = model.encoder(src, None)

        # 初始化目标序列为 <SOS> token
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)

        for i in range(max_length - 1):
            # 创建 target mask
            trg_mask = create_trg_mask(trg).to(device)  # fixed: a function, on the device

            # 前向传播
            output = model.decoder(trg, enc_src, None, trg_mask)

            # 取最后一个 token 的输出
            next_token = output.argmax(2)[:, -1].item()

            # 拼接到目标序列
            trg = torch.cat([trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1)

            # 如果生成了 <EOS> token，停止生成
            if next_token == EOS_IDX:
                break

    return trg
""",
    name="b_bug_src_mask_still_none",
)

wrong(
    "ch06_bughunt",
    "generate_text",
    "calls create_trg_mask as a function and masks the source, but leaves the target "
    "mask on the CPU (bug 2 left in)",
    """
def generate_text(model, src, max_length, device):
    model.eval()
    with torch.no_grad():
        src_mask = create_src_mask(src)
        # 编码源序列
        enc_src = model.encoder(src, src_mask)

        # 初始化目标序列为 <SOS> token
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)

        for i in range(max_length - 1):
            # 创建 target mask
            trg_mask = create_trg_mask(trg)

            # 前向传播
            output = model.decoder(trg, enc_src, src_mask, trg_mask)

            # 取最后一个 token 的输出
            next_token = output.argmax(2)[:, -1].item()

            # 拼接到目标序列
            trg = torch.cat([trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1)

            # 如果生成了 <EOS> token，停止生成
            if next_token == EOS_IDX:
                break

    return trg
""",
    name="b_bug_trg_mask_on_cpu",
)

wrong(
    "ch06_bughunt",
    "generate_text",
    "masks the source padding in the encoder only: the decoder's cross-attention still "
    "gets None and reads the padded positions",
    """
def generate_text(model, src, max_length, device):
    model.eval()
    with torch.no_grad():
        # 编码源序列 (with the padding masked)
        enc_src = model.encoder(src, create_src_mask(src))

        # 初始化目标序列为 <SOS> token
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)

        for i in range(max_length - 1):
            # 创建 target mask
            trg_mask = create_trg_mask(trg).to(device)

            # 前向传播
            output = model.decoder(trg, enc_src, None, trg_mask)

            # 取最后一个 token 的输出
            next_token = output.argmax(2)[:, -1].item()

            # 拼接到目标序列
            trg = torch.cat([trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1)

            # 如果生成了 <EOS> token，停止生成
            if next_token == EOS_IDX:
                break

    return trg
""",
    name="b_bug_src_mask_encoder_only",
)

wrong(
    "ch06_bughunt",
    "generate_text",
    "replaces the seed's mask with a hand-built triu mask: the kept triangle is the "
    "upper one, so each position attends to itself and later positions",
    """
def generate_text(model, src, max_length, device):
    model.eval()
    with torch.no_grad():
        src_mask = create_src_mask(src)
        # 编码源序列
        enc_src = model.encoder(src, src_mask)

        # 初始化目标序列为 <SOS> token
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)

        for i in range(max_length - 1):
            # 创建 target mask
            T = trg.size(1)
            trg_mask = torch.triu(torch.ones(T, T, device=device))

            # 前向传播
            output = model.decoder(trg, enc_src, src_mask, trg_mask)

            # 取最后一个 token 的输出
            next_token = output.argmax(2)[:, -1].item()

            # 拼接到目标序列
            trg = torch.cat([trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1)

            # 如果生成了 <EOS> token，停止生成
            if next_token == EOS_IDX:
                break

    return trg
""",
    name="b_bug_triu_trg_mask",
)

wrong(
    "ch06_bughunt",
    "generate_text",
    "the source mask is inverted (src == PAD_IDX, True at the padding): with the "
    "seed's convention (0 = masked) it masks the real tokens and keeps the padding",
    """
def generate_text(model, src, max_length, device):
    model.eval()
    with torch.no_grad():
        # mask the padding of the source
        src_mask = (src == PAD_IDX).unsqueeze(1).unsqueeze(2)

        # 编码源序列
        enc_src = model.encoder(src, src_mask)

        # 初始化目标序列为 <SOS> token
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)

        for i in range(max_length - 1):
            # 创建 target mask
            trg_mask = create_trg_mask(trg).to(device)

            # 前向传播
            output = model.decoder(trg, enc_src, src_mask, trg_mask)

            # 取最后一个 token 的输出
            next_token = output.argmax(2)[:, -1].item()

            # 拼接到目标序列
            trg = torch.cat([trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1)

            # 如果生成了 <EOS> token，停止生成
            if next_token == EOS_IDX:
                break

    return trg
""",
    name="b_bug_inverted_src_mask",
)

wrong(
    "ch06_bughunt",
    "generate_text",
    "fixes the three bugs but also changes the loop to range(max_length): trg can "
    "hold max_length + 1 tokens (adds an off-by-one)",
    """
def generate_text(model, src, max_length, device):
    model.eval()
    with torch.no_grad():
        src_mask = create_src_mask(src)
        # 编码源序列
        enc_src = model.encoder(src, src_mask)

        # 初始化目标序列为 <SOS> token
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)

        for i in range(max_length):
            # 创建 target mask
            trg_mask = create_trg_mask(trg).to(device)

            # 前向传播
            output = model.decoder(trg, enc_src, src_mask, trg_mask)

            # 取最后一个 token 的输出
            next_token = output.argmax(2)[:, -1].item()

            # 拼接到目标序列
            trg = torch.cat([trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1)

            # 如果生成了 <EOS> token，停止生成
            if next_token == EOS_IDX:
                break

    return trg
""",
    name="b_bug_loop_max_length",
)

wrong(
    "ch06_bughunt",
    "generate_text",
    "moves the target mask with .cuda() instead of .to(device): raises on a machine "
    "without CUDA (the device argument is ignored)",
    """
def generate_text(model, src, max_length, device):
    model.eval()
    with torch.no_grad():
        src_mask = create_src_mask(src)
        # 编码源序列
        enc_src = model.encoder(src, src_mask)

        # 初始化目标序列为 <SOS> token
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)

        for i in range(max_length - 1):
            # 创建 target mask
            trg_mask = create_trg_mask(trg).cuda()

            # 前向传播
            output = model.decoder(trg, enc_src, src_mask, trg_mask)

            # 取最后一个 token 的输出
            next_token = output.argmax(2)[:, -1].item()

            # 拼接到目标序列
            trg = torch.cat([trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1)

            # 如果生成了 <EOS> token，停止生成
            if next_token == EOS_IDX:
                break

    return trg
""",
    name="b_bug_mask_cuda",
)

wrong(
    "ch06_bughunt",
    "generate_text",
    "drops the target mask altogether (None: no masking, 'only the last position is "
    "read anyway'): earlier positions see later ones in every decoder layer",
    """
def generate_text(model, src, max_length, device):
    model.eval()
    with torch.no_grad():
        src_mask = create_src_mask(src)
        # 编码源序列
        enc_src = model.encoder(src, src_mask)

        # 初始化目标序列为 <SOS> token
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)

        for i in range(max_length - 1):
            # no target mask needed: we only take the last position's output

            # 前向传播
            output = model.decoder(trg, enc_src, src_mask, None)

            # 取最后一个 token 的输出
            next_token = output.argmax(2)[:, -1].item()

            # 拼接到目标序列
            trg = torch.cat([trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1)

            # 如果生成了 <EOS> token，停止生成
            if next_token == EOS_IDX:
                break

    return trg
""",
    name="b_bug_no_trg_mask",
)

right(
    "ch06_bughunt",
    "generate_text",
    """
def generate_text(model, src, max_length, device):
    model.eval()
    with torch.no_grad():
        src_mask = create_src_mask(src)  # [1, 1, 1, S], False on the padding

        # 编码源序列
        enc_src = model.encoder(src, src_mask)

        # 初始化目标序列为 <SOS> token
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)

        for i in range(max_length - 1):
            # 创建 target mask: lower triangle, built directly on the device
            T = trg.shape[1]
            trg_mask = torch.tril(torch.ones(T, T, device=device))

            # 前向传播
            output = model.decoder(trg, enc_src, src_mask, trg_mask)

            # 取最后一个 token 的输出
            next_token = output.argmax(2)[:, -1].item()

            # 拼接到目标序列
            trg = torch.cat([trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1)

            # 如果生成了 <EOS> token，停止生成
            if next_token == EOS_IDX:
                break

    return trg
""",
    name="b_bug_right_tril_on_device",
)

right(
    "ch06_bughunt",
    "generate_text",
    """
def generate_text(model, src, max_length, device):
    model.eval()
    with torch.no_grad():
        pad_keep = (src != PAD_IDX)[:, None, None, :]   # True on real source tokens
        enc_src = model.encoder(src, pad_keep)
        trg = torch.full((1, 1), SOS_IDX, dtype=torch.long, device=device)
        for i in range(max_length - 1):
            pos = torch.arange(trg.size(1), device=trg.device)
            causal = pos[None, :] <= pos[:, None]          # [T, T], key <= query
            output = model.decoder(trg, enc_src, pad_keep, causal)
            next_token = output[:, -1].argmax(-1).item()
            trg = torch.cat([trg, torch.tensor([[next_token]], device=device)], dim=1)
            if next_token == EOS_IDX:
                break
    return trg
""",
    name="b_bug_right_rewritten_bool_masks",
)

# ======================================================================================
# ch06_own_model / own_model (at most 4 wrong, 1 right: each trains ~45 s)
# ======================================================================================

wrong(
    "ch06_own_model",
    "own_model",
    "encoder loop never reassigns memory (h = block(memory, ...)): the decoder reads "
    "the raw source embeddings, and the encoder's output is thrown away",
    """
PAD = 0


class OwnTransformer(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers):
        super().__init__()
        self.src_emb = nn.Embedding(vocab_size, d_model)
        self.tgt_emb = nn.Embedding(vocab_size, d_model)
        self.register_buffer("pe", sinusoidal_encoding(64, d_model))
        self.enc_layers = nn.ModuleList(
            [EncoderBlock(d_model, n_heads, d_ff, dropout=0.0) for _ in range(n_layers)]
        )
        self.dec_layers = nn.ModuleList(
            [DecoderBlock(d_model, n_heads, d_ff, dropout=0.0) for _ in range(n_layers)]
        )
        self.out = nn.Linear(d_model, vocab_size)

    def forward(self, src, tgt_in):
        src_mask = padding_mask(src, PAD)
        memory = embed(src, self.src_emb, self.pe)
        for layer in self.enc_layers:
            h = layer(memory, src_mask)
        x = embed(tgt_in, self.tgt_emb, self.pe)
        for layer in self.dec_layers:
            x = layer(x, memory, src_mask)
        return self.out(x)


def batch_loss(model, src, tgt):
    tgt_in = tgt[:, :-1]
    labels = tgt[:, 1:]
    logits = model(src, tgt_in)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1),
                           ignore_index=PAD)
""",
    name="b_own_encoder_output_dropped",
)

wrong(
    "ch06_own_model",
    "own_model",
    "batch_loss has no ignore_index: the PAD labels count in the loss",
    """
PAD = 0


class OwnTransformer(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers):
        super().__init__()
        self.src_embed = nn.Embedding(vocab_size, d_model)
        self.tgt_embed = nn.Embedding(vocab_size, d_model)
        self.register_buffer("pe", sinusoidal_encoding(64, d_model))
        self.encoder = nn.ModuleList(
            [EncoderBlock(d_model, n_heads, d_ff, dropout=0.0) for _ in range(n_layers)])
        self.decoder = nn.ModuleList(
            [DecoderBlock(d_model, n_heads, d_ff, dropout=0.0) for _ in range(n_layers)])
        self.proj = nn.Linear(d_model, vocab_size)

    def forward(self, src, tgt_in):
        mask = padding_mask(src, PAD)
        h = embed(src, self.src_embed, self.pe)
        for blk in self.encoder:
            h = blk(h, mask)
        y = embed(tgt_in, self.tgt_embed, self.pe)
        for blk in self.decoder:
            y = blk(y, h, mask)
        return self.proj(y)


def batch_loss(model, src, tgt):
    logits = model(src, tgt[:, :-1])
    V = logits.size(-1)
    return F.cross_entropy(logits.reshape(-1, V), tgt[:, 1:].reshape(-1))
""",
    name="b_own_loss_counts_pad",
)

wrong(
    "ch06_own_model",
    "own_model",
    "the decoder blocks get no source mask (src_mask=None): cross-attention reads "
    "the source's padding",
    """
PAD = 0


class OwnTransformer(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers):
        super().__init__()
        self.src_embed = nn.Embedding(vocab_size, d_model)
        self.tgt_embed = nn.Embedding(vocab_size, d_model)
        self.register_buffer("pe", sinusoidal_encoding(64, d_model))
        self.encoder = nn.ModuleList(
            EncoderBlock(d_model, n_heads, d_ff, dropout=0.0) for _ in range(n_layers))
        self.decoder = nn.ModuleList(
            DecoderBlock(d_model, n_heads, d_ff, dropout=0.0) for _ in range(n_layers))
        self.fc_out = nn.Linear(d_model, vocab_size)

    def encode(self, src):
        x = embed(src, self.src_embed, self.pe)
        mask = padding_mask(src, PAD)
        for block in self.encoder:
            x = block(x, mask)
        return x

    def decode(self, tgt_in, memory):
        y = embed(tgt_in, self.tgt_embed, self.pe)
        for block in self.decoder:
            y = block(y, memory)  # the causal mask is built inside the block
        return self.fc_out(y)

    def forward(self, src, tgt_in):
        return self.decode(tgt_in, self.encode(src))


def batch_loss(model, src, tgt):
    tgt_in, labels = tgt[:, :-1], tgt[:, 1:]
    logits = model(src, tgt_in)
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=PAD)
""",
    name="b_own_decoder_no_src_mask",
)

wrong(
    "ch06_own_model",
    "own_model",
    "batch_loss does not shift the labels: the decoder reads tgt[:, :-1] and is "
    "trained to predict those same tokens (copy the input), not the next ones",
    """
PAD = 0


class OwnTransformer(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers):
        super().__init__()
        self.src_embed = nn.Embedding(vocab_size, d_model)
        self.tgt_embed = nn.Embedding(vocab_size, d_model)
        self.register_buffer("pe", sinusoidal_encoding(64, d_model))
        self.encoder = nn.ModuleList(
            EncoderBlock(d_model, n_heads, d_ff, dropout=0.0) for _ in range(n_layers))
        self.decoder = nn.ModuleList(
            DecoderBlock(d_model, n_heads, d_ff, dropout=0.0) for _ in range(n_layers))
        self.generator = nn.Linear(d_model, vocab_size)

    def forward(self, src, tgt_in):
        src_mask = padding_mask(src, PAD)
        memory = embed(src, self.src_embed, self.pe)
        for block in self.encoder:
            memory = block(memory, src_mask)
        x = embed(tgt_in, self.tgt_embed, self.pe)
        for block in self.decoder:
            x = block(x, memory, src_mask)
        return self.generator(x)


def batch_loss(model, src, tgt):
    tgt_in = tgt[:, :-1]
    logits = model(src, tgt_in)           # [B, St-1, V]
    labels = tgt_in                        # same length as the logits
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1),
                           ignore_index=PAD)
""",
    name="b_own_labels_not_shifted",
)

right(
    "ch06_own_model",
    "own_model",
    """
PAD = 0


class OwnTransformer(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers):
        super().__init__()
        self.d_model = d_model
        self.embed_src = nn.Embedding(vocab_size, d_model)
        self.embed_tgt = nn.Embedding(vocab_size, d_model)
        self.register_buffer("pe", sinusoidal_encoding(64, d_model))
        enc, dec = [], []
        for _ in range(n_layers):
            enc.append(EncoderBlock(d_model, n_heads, d_ff, dropout=0.0))
            dec.append(DecoderBlock(d_model, n_heads, d_ff, dropout=0.0))
        self.enc_blocks = nn.ModuleList(enc)
        self.dec_blocks = nn.ModuleList(dec)
        self.to_vocab = nn.Linear(d_model, vocab_size)

    def forward(self, src, tgt_in):
        keep = padding_mask(src, PAD)                  # [B, 1, 1, Ss]
        memory = embed(src, self.embed_src, self.pe)
        for blk in self.enc_blocks:
            memory = blk(memory, keep)
        out = embed(tgt_in, self.embed_tgt, self.pe)
        for blk in self.dec_blocks:
            out = blk(out, memory, keep)
        return self.to_vocab(out)


def batch_loss(model, src, tgt):
    decoder_in, target = tgt[:, :-1], tgt[:, 1:]
    logp = F.log_softmax(model(src, decoder_in), dim=-1)   # [B, St-1, V]
    return F.nll_loss(logp.transpose(1, 2), target, ignore_index=PAD)
""",
    name="b_own_right_nll_transpose",
)

# ======================================================================================
# ch07_scale / accumulation_step
# ======================================================================================

wrong(
    "ch07_scale",
    "accumulation_step",
    "mean of the micro-batch means: each loss divided by its own token count, then "
    "by the number of micro-batches (tokens of small micro-batches weigh more)",
    '''
def accumulation_step(model, micro_batches, optimizer, scheduler, loss_fn):
    """One optimizer step from ``micro_batches``, equal to one step on their
    concatenation."""
    optimizer.zero_grad()
    k = len(micro_batches)
    for batch in micro_batches:
        loss_sum, n_tokens = loss_fn(model, batch)
        loss = loss_sum / n_tokens      # this micro-batch's mean
        (loss / k).backward()           # average over the micro-batches
    optimizer.step()
    scheduler.step()
''',
    name="b_acc_mean_of_means",
)

wrong(
    "ch07_scale",
    "accumulation_step",
    "each micro-batch's loss divided by its own token count only: the accumulated "
    "gradient is the sum of the k means (about k times too large)",
    '''
def accumulation_step(model, micro_batches, optimizer, scheduler, loss_fn):
    """One optimizer step from ``micro_batches``, equal to one step on their
    concatenation."""
    optimizer.zero_grad()
    for mb in micro_batches:
        loss_sum, n = loss_fn(model, mb)
        (loss_sum / n).backward()
    optimizer.step()
    scheduler.step()
''',
    name="b_acc_sum_of_means",
)

wrong(
    "ch07_scale",
    "accumulation_step",
    "zero_grad inside the loop: only the last micro-batch's gradient survives",
    '''
def accumulation_step(model, micro_batches, optimizer, scheduler, loss_fn):
    """One optimizer step from ``micro_batches``, equal to one step on their
    concatenation."""
    total = sum(count_targets(b) for b in micro_batches)
    for b in micro_batches:
        optimizer.zero_grad()
        loss_sum, _ = loss_fn(model, b)
        (loss_sum / total).backward()
    optimizer.step()
    scheduler.step()
''',
    name="b_acc_zero_grad_in_loop",
)

wrong(
    "ch07_scale",
    "accumulation_step",
    "optimizer.step() (and scheduler.step()) inside the loop: one update per "
    "micro-batch instead of one per call",
    '''
def accumulation_step(model, micro_batches, optimizer, scheduler, loss_fn):
    """One optimizer step from ``micro_batches``, equal to one step on their
    concatenation."""
    n_total = sum(count_targets(b) for b in micro_batches)
    optimizer.zero_grad()
    for b in micro_batches:
        loss_sum, _ = loss_fn(model, b)
        (loss_sum / n_total).backward()
        optimizer.step()
        scheduler.step()
''',
    name="b_acc_step_per_micro_batch",
)

wrong(
    "ch07_scale",
    "accumulation_step",
    "scheduler.step() before optimizer.step(): the update uses the next step's "
    "learning rate",
    '''
def accumulation_step(model, micro_batches, optimizer, scheduler, loss_fn):
    """One optimizer step from ``micro_batches``, equal to one step on their
    concatenation."""
    optimizer.zero_grad()
    n_total = sum(count_targets(b) for b in micro_batches)
    for b in micro_batches:
        loss_sum, _ = loss_fn(model, b)
        (loss_sum / n_total).backward()
    scheduler.step()
    optimizer.step()
''',
    name="b_acc_scheduler_first",
)

wrong(
    "ch07_scale",
    "accumulation_step",
    "divides by the number of target positions including padding (numel of "
    "batch[:, 1:]) instead of the real tokens",
    '''
def accumulation_step(model, micro_batches, optimizer, scheduler, loss_fn):
    """One optimizer step from ``micro_batches``, equal to one step on their
    concatenation."""
    optimizer.zero_grad()
    n_total = sum(b[:, 1:].numel() for b in micro_batches)  # all the targets
    for b in micro_batches:
        loss_sum, _ = loss_fn(model, b)
        (loss_sum / n_total).backward()
    optimizer.step()
    scheduler.step()
''',
    name="b_acc_count_with_padding",
)

wrong(
    "ch07_scale",
    "accumulation_step",
    "counts the real tokens of the whole batch, (batch != PAD).sum(), the first "
    "column included, instead of the targets batch[:, 1:]: the divisor is too large",
    '''
def accumulation_step(model, micro_batches, optimizer, scheduler, loss_fn):
    """One optimizer step from ``micro_batches``, equal to one step on their
    concatenation."""
    optimizer.zero_grad()
    n_tokens = 0
    for b in micro_batches:
        n_tokens += int((b != PAD).sum())
    for b in micro_batches:
        loss_sum, _ = loss_fn(model, b)
        loss = loss_sum / n_tokens
        loss.backward()
    optimizer.step()
    scheduler.step()
''',
    name="b_acc_count_includes_first_column",
)

right(
    "ch07_scale",
    "accumulation_step",
    '''
def accumulation_step(model, micro_batches, optimizer, scheduler, loss_fn):
    """One optimizer step from ``micro_batches``, equal to one step on their
    concatenation."""
    optimizer.zero_grad()
    # forward every micro-batch first, to know the big batch's token count
    results = [loss_fn(model, mb) for mb in micro_batches]
    n_all = sum(n for _, n in results)
    for loss_sum, _ in results:
        (loss_sum / n_all).backward()
    optimizer.step()
    scheduler.step()
''',
    name="b_acc_right_two_pass",
)

right(
    "ch07_scale",
    "accumulation_step",
    '''
def accumulation_step(model, micro_batches, optimizer, scheduler, loss_fn):
    """One optimizer step from ``micro_batches``, equal to one step on their
    concatenation."""
    counts = [count_targets(mb) for mb in micro_batches]
    N = sum(counts)
    optimizer.zero_grad()
    for mb, n_i in zip(micro_batches, counts):
        loss_sum, n = loss_fn(model, mb)
        mean_i = loss_sum / n
        # weight each micro-batch's mean by its share of the tokens
        (mean_i * (n_i / N)).backward()
    optimizer.step()
    scheduler.step()
''',
    name="b_acc_right_weighted_means",
)

# ======================================================================================
# ch07_scale / amp_step
# ======================================================================================

wrong(
    "ch07_scale",
    "amp_step",
    "never calls scaler.unscale_: clip_grad_norm_ clips the scaled gradients (the "
    "clip threshold is effectively divided by the scale)",
    '''
def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm):
    """One mixed-precision training step; returns the loss."""
    dev = next(model.parameters()).device.type
    dtype = torch.float16 if dev == "cuda" else torch.bfloat16
    optimizer.zero_grad()
    with torch.amp.autocast(dev, dtype=dtype):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()
''',
    name="b_amp_no_unscale",
)

wrong(
    "ch07_scale",
    "amp_step",
    "clips before unscale_: the clipping acts on the scaled gradients, then they are "
    "unscaled",
    '''
def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm):
    """One mixed-precision training step; returns the loss."""
    device_type = next(model.parameters()).device.type
    amp_dtype = torch.float16 if device_type == "cuda" else torch.bfloat16
    optimizer.zero_grad()
    with torch.amp.autocast(device_type=device_type, dtype=amp_dtype):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
    return loss.item()
''',
    name="b_amp_clip_before_unscale",
)

wrong(
    "ch07_scale",
    "amp_step",
    "optimizer.step() instead of scaler.step(optimizer): a step whose gradients "
    "overflowed is not skipped",
    '''
def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm):
    """One mixed-precision training step; returns the loss."""
    device_type = next(model.parameters()).device.type
    dtype = torch.float16 if device_type == "cuda" else torch.bfloat16
    optimizer.zero_grad()
    with torch.amp.autocast(device_type, dtype=dtype):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    scaler.update()
    return loss.detach()
''',
    name="b_amp_optimizer_step_direct",
)

wrong(
    "ch07_scale",
    "amp_step",
    "the seed's deprecated torch.cuda.amp.autocast(): on a CPU autocast is disabled, "
    "so the forward runs in float32, not bfloat16",
    '''
def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm):
    """One mixed-precision training step; returns the loss."""
    optimizer.zero_grad()
    with torch.cuda.amp.autocast():
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()
''',
    name="b_amp_cuda_autocast",
)

wrong(
    "ch07_scale",
    "amp_step",
    "backward on the unscaled loss, then unscale_: the gradients are divided by the "
    "scale without ever having been multiplied by it",
    '''
def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm):
    """One mixed-precision training step; returns the loss."""
    device_type = next(model.parameters()).device.type
    dtype = torch.float16 if device_type == "cuda" else torch.bfloat16
    optimizer.zero_grad()
    with torch.amp.autocast(device_type, dtype=dtype):
        loss = loss_fn(model, batch)
    loss.backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()
''',
    name="b_amp_backward_unscaled_loss",
)

wrong(
    "ch07_scale",
    "amp_step",
    "returns the scaled loss scaler.scale(loss) instead of the loss",
    '''
def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm):
    """One mixed-precision training step; returns the loss."""
    device_type = next(model.parameters()).device.type
    dtype = torch.float16 if device_type == "cuda" else torch.bfloat16
    optimizer.zero_grad()
    with torch.amp.autocast(device_type, dtype=dtype):
        loss = loss_fn(model, batch)
    scaled = scaler.scale(loss)
    scaled.backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return scaled.detach()
''',
    name="b_amp_returns_scaled_loss",
)

wrong(
    "ch07_scale",
    "amp_step",
    "scaler.update() before scaler.step(optimizer)",
    '''
def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm):
    """One mixed-precision training step; returns the loss."""
    device_type = next(model.parameters()).device.type
    dtype = torch.float16 if device_type == "cuda" else torch.bfloat16
    optimizer.zero_grad()
    with torch.amp.autocast(device_type, dtype=dtype):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.update()
    scaler.step(optimizer)
    return loss.detach()
''',
    name="b_amp_update_before_step",
)

wrong(
    "ch07_scale",
    "amp_step",
    "autocast in float16 on every device (CPU included) instead of bfloat16 on a CPU",
    '''
def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm):
    """One mixed-precision training step; returns the loss."""
    device_type = next(model.parameters()).device.type
    optimizer.zero_grad()
    with torch.autocast(device_type=device_type, dtype=torch.float16):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()
''',
    name="b_amp_fp16_on_cpu",
)

right(
    "ch07_scale",
    "amp_step",
    '''
def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm):
    """One mixed-precision training step; returns the loss."""
    param = next(model.parameters())
    on_gpu = param.is_cuda
    kind = "cuda" if on_gpu else "cpu"
    half = torch.float16 if on_gpu else torch.bfloat16
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device_type=kind, dtype=half):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)                        # true-sized gradients again
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.item()
''',
    name="b_amp_right_torch_autocast",
)

# ======================================================================================
# ch07_scale / make_loader
# ======================================================================================

wrong(
    "ch07_scale",
    "make_loader",
    "never calls sampler.set_epoch(epoch): every epoch has the same order and split",
    '''
def make_loader(dataset, rank, world_size, epoch, batch_size):
    """The DataLoader process ``rank`` of ``world_size`` iterates in epoch ``epoch``."""
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank,
                                 shuffle=True, seed=0)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)
''',
    name="b_loader_no_set_epoch",
)

wrong(
    "ch07_scale",
    "make_loader",
    "passes shuffle=True to the DataLoader as well as the sampler: DataLoader raises "
    "ValueError (sampler and shuffle are mutually exclusive)",
    '''
def make_loader(dataset, rank, world_size, epoch, batch_size):
    """The DataLoader process ``rank`` of ``world_size`` iterates in epoch ``epoch``."""
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size, shuffle=True, sampler=sampler)
''',
    name="b_loader_shuffle_and_sampler",
)

wrong(
    "ch07_scale",
    "make_loader",
    "DistributedSampler with shuffle=False: the order never changes between epochs "
    "and is not shuffled",
    '''
def make_loader(dataset, rank, world_size, epoch, batch_size):
    """The DataLoader process ``rank`` of ``world_size`` iterates in epoch ``epoch``."""
    # deterministic, so that every process computes the same split
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=False)
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)
''',
    name="b_loader_no_shuffle",
)

wrong(
    "ch07_scale",
    "make_loader",
    "seeds the sampler with the rank: each process shuffles with a different "
    "permutation, so the ranks' shares overlap and miss samples",
    '''
def make_loader(dataset, rank, world_size, epoch, batch_size):
    """The DataLoader process ``rank`` of ``world_size`` iterates in epoch ``epoch``."""
    sampler = DistributedSampler(
        dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=rank
    )  # each process its own seed
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)
''',
    name="b_loader_seed_is_rank",
)

wrong(
    "ch07_scale",
    "make_loader",
    "divides batch_size by world_size (reads it as the global batch), though it is "
    "already the batch of one process",
    '''
def make_loader(dataset, rank, world_size, epoch, batch_size):
    """The DataLoader process ``rank`` of ``world_size`` iterates in epoch ``epoch``."""
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank,
                                 shuffle=True, seed=0)
    sampler.set_epoch(epoch)
    per_process = max(1, batch_size // world_size)
    return DataLoader(dataset, batch_size=per_process, sampler=sampler)
''',
    name="b_loader_batch_over_world",
)

wrong(
    "ch07_scale",
    "make_loader",
    "drop_last=True on the DataLoader: the last, smaller batch of each process is lost",
    '''
def make_loader(dataset, rank, world_size, epoch, batch_size):
    """The DataLoader process ``rank`` of ``world_size`` iterates in epoch ``epoch``."""
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank,
                                 shuffle=True, seed=0)
    sampler.set_epoch(epoch)
    # equal batches on every process
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=True)
''',
    name="b_loader_drop_last",
)

wrong(
    "ch07_scale",
    "make_loader",
    "a fixed contiguous shard per rank, shuffled within the shard each epoch: which "
    "samples a process gets never changes between epochs",
    '''
from torch.utils.data import Subset


def make_loader(dataset, rank, world_size, epoch, batch_size):
    """The DataLoader process ``rank`` of ``world_size`` iterates in epoch ``epoch``."""
    n = len(dataset)
    per_rank = (n + world_size - 1) // world_size
    idx = list(range(rank * per_rank, min(n, (rank + 1) * per_rank)))
    g = torch.Generator()
    g.manual_seed(epoch)
    order = torch.randperm(len(idx), generator=g).tolist()
    shard = Subset(dataset, [idx[i] for i in order])
    return DataLoader(shard, batch_size=batch_size, shuffle=False)
''',
    name="b_loader_fixed_shards",
)

right(
    "ch07_scale",
    "make_loader",
    '''
from torch.utils.data import Subset


def make_loader(dataset, rank, world_size, epoch, batch_size):
    """The DataLoader process ``rank`` of ``world_size`` iterates in epoch ``epoch``."""
    n = len(dataset)
    g = torch.Generator()
    g.manual_seed(1234 + epoch)          # same on every process, new every epoch
    perm = torch.randperm(n, generator=g).tolist()
    per_rank = -(-n // world_size)       # ceil
    perm += perm[: per_rank * world_size - n]   # pad so every rank gets as many
    mine = perm[rank::world_size]
    return DataLoader(Subset(dataset, mine), batch_size=batch_size)
''',
    name="b_loader_right_manual_permutation",
)

right(
    "ch07_scale",
    "make_loader",
    '''
def make_loader(dataset, rank, world_size, epoch, batch_size):
    """The DataLoader process ``rank`` of ``world_size`` iterates in epoch ``epoch``."""
    # the sampler shuffles with seed + epoch: seeding with the epoch itself gives every
    # process the same permutation, and a new one each epoch
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank,
                                 shuffle=True, seed=epoch)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, shuffle=False)
''',
    name="b_loader_right_seed_epoch",
)

# ======================================================================================
# ch08_generation / next_token_probs
# ======================================================================================

wrong(
    "ch08_generation",
    "next_token_probs",
    "divides the probabilities (after the softmax) by the temperature and "
    "renormalises: the temperature has no effect",
    '''
def next_token_probs(logits, temperature, top_p):
    """logits [B, V] -> probs [B, V]: temperature, then top-p, then renormalised."""
    probs = torch.softmax(logits, dim=-1) / temperature
    probs = probs / probs.sum(dim=-1, keepdim=True)
    sorted_p, idx = torch.sort(probs, dim=-1, descending=True)
    cum = torch.cumsum(sorted_p, dim=-1)
    remove = cum - sorted_p >= top_p
    remove = remove.scatter(-1, idx, remove)
    probs = probs.masked_fill(remove, 0.0)
    return probs / probs.sum(dim=-1, keepdim=True)
''',
    name="b_ntp_temperature_after_softmax",
)

wrong(
    "ch08_generation",
    "next_token_probs",
    "keeps the tokens whose cumulative probability is <= top_p (plus the first): "
    "the token that carries the sum across top_p is dropped",
    '''
def next_token_probs(logits, temperature, top_p):
    """logits [B, V] -> probs [B, V]: temperature, then top-p, then renormalised."""
    logits = logits / temperature
    probs = logits.softmax(-1)
    sorted_probs, order = probs.sort(-1, descending=True)
    keep_sorted = sorted_probs.cumsum(-1) <= top_p
    keep_sorted[..., 0] = True          # never an empty set
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    probs = probs * keep
    return probs / probs.sum(-1, keepdim=True)
''',
    name="b_ntp_crossing_token_dropped",
)

wrong(
    "ch08_generation",
    "next_token_probs",
    "chooses the top-p set from the temperature-1 probabilities, and applies the "
    "temperature only to the kept tokens",
    '''
def next_token_probs(logits, temperature, top_p):
    """logits [B, V] -> probs [B, V]: temperature, then top-p, then renormalised."""
    p = torch.softmax(logits, dim=-1)
    sp, si = p.sort(dim=-1, descending=True)
    keep_sorted = (sp.cumsum(-1) - sp) < top_p
    keep = keep_sorted.gather(-1, si.argsort(-1))
    scaled = (logits / temperature).masked_fill(~keep, float("-inf"))
    return torch.softmax(scaled, dim=-1)
''',
    name="b_ntp_top_p_before_temperature",
)

wrong(
    "ch08_generation",
    "next_token_probs",
    "zeroes the tokens outside the nucleus but does not renormalise: rows sum to less "
    "than 1",
    '''
def next_token_probs(logits, temperature, top_p):
    """logits [B, V] -> probs [B, V]: temperature, then top-p, then renormalised."""
    probs = torch.softmax(logits / temperature, dim=-1)
    sorted_probs, sorted_idx = torch.sort(probs, descending=True, dim=-1)
    mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
    drop_sorted = mass_before >= top_p
    drop = drop_sorted.scatter(1, sorted_idx, drop_sorted)
    return probs.masked_fill(drop, 0.0)
''',
    name="b_ntp_no_renormalise",
)

wrong(
    "ch08_generation",
    "next_token_probs",
    "applies the keep-mask computed in sorted order directly to the unsorted "
    "probabilities (no scatter back): keeps the wrong tokens",
    '''
def next_token_probs(logits, temperature, top_p):
    """logits [B, V] -> probs [B, V]: temperature, then top-p, then renormalised."""
    probs = (logits / temperature).softmax(dim=-1)
    sorted_probs, _ = probs.sort(dim=-1, descending=True)
    cum = sorted_probs.cumsum(dim=-1)
    keep = (cum - sorted_probs) < top_p       # the nucleus
    probs = torch.where(keep, probs, torch.zeros_like(probs))
    return probs / probs.sum(dim=-1, keepdim=True)
''',
    name="b_ntp_mask_not_unsorted",
)

wrong(
    "ch08_generation",
    "next_token_probs",
    "multiplies the logits by the temperature instead of dividing",
    '''
def next_token_probs(logits, temperature, top_p):
    """logits [B, V] -> probs [B, V]: temperature, then top-p, then renormalised."""
    scaled = logits * temperature
    probs = torch.softmax(scaled, -1)
    s, order = torch.sort(probs, -1, descending=True)
    keep_s = torch.cumsum(s, -1) - s < top_p
    keep = torch.zeros_like(keep_s).scatter(-1, order, keep_s)
    return torch.softmax(scaled.masked_fill(~keep, float("-inf")), -1)
''',
    name="b_ntp_multiply_temperature",
)

right(
    "ch08_generation",
    "next_token_probs",
    '''
def next_token_probs(logits, temperature, top_p):
    """logits [B, V] -> probs [B, V]: temperature, then top-p, then renormalised."""
    # softmax(logits / T) == softmax(log_softmax(logits) / T)
    probs = torch.softmax(torch.log_softmax(logits, dim=-1) / temperature, dim=-1)
    sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
    above = torch.cumsum(sorted_probs, dim=-1) - sorted_probs   # mass ranked above
    sorted_kept = torch.where(above < top_p, sorted_probs, torch.zeros_like(sorted_probs))
    sorted_kept = sorted_kept / sorted_kept.sum(dim=-1, keepdim=True)
    inverse = torch.argsort(order, dim=-1)
    return torch.gather(sorted_kept, -1, inverse)
''',
    name="b_ntp_right_gather_inverse",
)

right(
    "ch08_generation",
    "next_token_probs",
    '''
def next_token_probs(logits, temperature, top_p):
    """logits [B, V] -> probs [B, V]: temperature, then top-p, then renormalised."""
    probs = torch.softmax(logits / temperature, dim=-1)
    out = torch.zeros_like(probs)
    for b in range(probs.size(0)):
        row = probs[b]
        total = 0.0
        for j in torch.argsort(row, descending=True).tolist():
            if total >= top_p:
                break
            out[b, j] = row[j]
            total += row[j].item()
        out[b] = out[b] / out[b].sum()
    return out
''',
    name="b_ntp_right_python_loop",
)

# ======================================================================================
# ch08_generation / lm_step
# ======================================================================================

wrong(
    "ch08_generation",
    "lm_step",
    "positions start at 0 on every step (model.pos(x) without start=past)",
    '''
def lm_step(model, tokens, cache):
    """tokens [B, S] after the cache.length cached ones -> logits [B, S, V]."""
    T = cache.length
    S = tokens.size(1)
    mask = causal_mask(S, tokens.device, past=T)
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x))
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))
''',
    name="b_lm_positions_from_zero",
)

wrong(
    "ch08_generation",
    "lm_step",
    "keeps the first S rows of the full (T+S) causal mask: the new tokens' rows are "
    "those of the first positions",
    '''
def lm_step(model, tokens, cache):
    """tokens [B, S] after the cache.length cached ones -> logits [B, S, V]."""
    past = cache.length
    S = tokens.size(1)
    full = causal_mask(past + S, tokens.device)      # [1, 1, T+S, T+S]
    mask = full[:, :, :S, :]                         # one row per new token
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past))
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))
''',
    name="b_lm_full_mask_first_rows",
)

wrong(
    "ch08_generation",
    "lm_step",
    "reads cache.length inside the block loop: from block 1 on it already counts the "
    "new tokens, so the mask (and its shape) is wrong for every block but the first",
    '''
def lm_step(model, tokens, cache):
    """tokens [B, S] after the cache.length cached ones -> logits [B, S, V]."""
    S = tokens.size(1)
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=cache.length))
    for i, block in enumerate(model.blocks.layers):
        mask = causal_mask(S, tokens.device, past=cache.length)
        x = block(x, mask, cache.layer(i))
    x = model.blocks.norm(x)
    return model.lm_head(x)
''',
    name="b_lm_length_read_per_block",
)

wrong(
    "ch08_generation",
    "lm_step",
    "no sqrt(d_model) scaling of the token embeddings",
    '''
def lm_step(model, tokens, cache):
    """tokens [B, S] after the cache.length cached ones -> logits [B, S, V]."""
    past = cache.length
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    h = model.tok_embed(tokens)
    h = model.dropout(model.pos(h, start=past))
    for i, layer in enumerate(model.blocks.layers):
        h = layer(h, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(h))
''',
    name="b_lm_no_sqrt_scale",
)

wrong(
    "ch08_generation",
    "lm_step",
    "skips the final model.blocks.norm before lm_head",
    '''
def lm_step(model, tokens, cache):
    """tokens [B, S] after the cache.length cached ones -> logits [B, S, V]."""
    past = cache.length
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past))
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(x)
''',
    name="b_lm_no_final_norm",
)

wrong(
    "ch08_generation",
    "lm_step",
    "the mask ignores the cached tokens (causal_mask(S) without past): [1, 1, S, S] "
    "against T + S keys, which raises once the cache is not empty",
    '''
def lm_step(model, tokens, cache):
    """tokens [B, S] after the cache.length cached ones -> logits [B, S, V]."""
    start = cache.length
    mask = causal_mask(tokens.size(1), tokens.device)
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=start))
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))
''',
    name="b_lm_mask_without_past",
)

wrong(
    "ch08_generation",
    "lm_step",
    "scales by sqrt(d_model) after adding the positions (the positional encoding is "
    "scaled too)",
    '''
def lm_step(model, tokens, cache):
    """tokens [B, S] after the cache.length cached ones -> logits [B, S, V]."""
    past = cache.length
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    x = model.pos(model.tok_embed(tokens), start=past) * math.sqrt(model.d_model)
    x = model.dropout(x)
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))
''',
    name="b_lm_scale_after_positions",
)

right(
    "ch08_generation",
    "lm_step",
    '''
def lm_step(model, tokens, cache):
    """tokens [B, S] after the cache.length cached ones -> logits [B, S, V]."""
    T = cache.length                      # before any block appends
    B, S = tokens.shape
    q_pos = torch.arange(T, T + S, device=tokens.device)      # absolute query positions
    k_pos = torch.arange(T + S, device=tokens.device)
    mask = (k_pos[None, :] <= q_pos[:, None]).view(1, 1, S, T + S)
    x = model.tok_embed(tokens) * model.d_model ** 0.5
    x = model.pos(x, start=T)
    x = model.dropout(x)
    for layer_idx, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(layer_idx))
    x = model.blocks.norm(x)
    return model.lm_head(x)
''',
    name="b_lm_right_arange_mask",
)

# ======================================================================================
# ch08_generation / generate_greedy
# ======================================================================================

wrong(
    "ch08_generation",
    "generate_greedy",
    "the cache is a default argument, created once and carried from call to call",
    '''
def generate_greedy(model, prompt, max_new_tokens, cache=KVCache()):
    """prompt [B, S] -> [B, S + max_new_tokens]: greedy, with a fresh KV cache."""
    out = prompt
    inp = prompt
    for _ in range(max_new_tokens):
        logits = lm_step(model, inp, cache)
        inp = logits[:, -1, :].argmax(dim=-1, keepdim=True)
        out = torch.cat([out, inp], dim=1)
    return out
''',
    name="b_gen_default_cache",
)

wrong(
    "ch08_generation",
    "generate_greedy",
    "feeds the whole sequence so far to lm_step at every step, on top of the cache: "
    "the cached tokens are appended again",
    '''
def generate_greedy(model, prompt, max_new_tokens):
    """prompt [B, S] -> [B, S + max_new_tokens]: greedy, with a fresh KV cache."""
    cache = KVCache()
    seq = prompt
    for _ in range(max_new_tokens):
        logits = lm_step(model, seq, cache)
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        seq = torch.cat([seq, nxt], dim=1)
    return seq
''',
    name="b_gen_refeed_sequence",
)

wrong(
    "ch08_generation",
    "generate_greedy",
    "always produces at least one token: max_new_tokens = 0 returns the prompt plus "
    "one token",
    '''
def generate_greedy(model, prompt, max_new_tokens):
    """prompt [B, S] -> [B, S + max_new_tokens]: greedy, with a fresh KV cache."""
    cache = KVCache()
    logits = lm_step(model, prompt, cache)
    nxt = logits[:, -1].argmax(-1, keepdim=True)
    out = torch.cat([prompt, nxt], dim=1)
    for _ in range(max_new_tokens - 1):
        logits = lm_step(model, nxt, cache)
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        out = torch.cat([out, nxt], dim=1)
    return out
''',
    name="b_gen_at_least_one_token",
)

wrong(
    "ch08_generation",
    "generate_greedy",
    "generates max_new_tokens + 1 tokens (the prompt's token is appended, then the "
    "loop runs N more times)",
    '''
def generate_greedy(model, prompt, max_new_tokens):
    """prompt [B, S] -> [B, S + max_new_tokens]: greedy, with a fresh KV cache."""
    cache = KVCache()
    logits = lm_step(model, prompt, cache)
    next_tok = logits[:, -1].argmax(dim=-1, keepdim=True)
    result = [prompt, next_tok]
    for _ in range(max_new_tokens):
        logits = lm_step(model, next_tok, cache)
        next_tok = logits[:, -1].argmax(dim=-1, keepdim=True)
        result.append(next_tok)
    return torch.cat(result, dim=1)
''',
    name="b_gen_one_extra_token",
)

wrong(
    "ch08_generation",
    "generate_greedy",
    "argmax without keepdim: the next token is [B], and torch.cat with the [B, S] "
    "sequence raises",
    '''
def generate_greedy(model, prompt, max_new_tokens):
    """prompt [B, S] -> [B, S + max_new_tokens]: greedy, with a fresh KV cache."""
    cache = KVCache()
    tokens, x = prompt, prompt
    for _ in range(max_new_tokens):
        logits = lm_step(model, x, cache)
        x = logits[:, -1].argmax(dim=-1)
        tokens = torch.cat([tokens, x], dim=1)
    return tokens
''',
    name="b_gen_argmax_no_keepdim",
)

wrong(
    "ch08_generation",
    "generate_greedy",
    "takes the argmax of the first position's logits (logits[:, 0]) instead of the "
    "last: after the prompt, the chosen token is the prediction after its first token",
    '''
def generate_greedy(model, prompt, max_new_tokens):
    """prompt [B, S] -> [B, S + max_new_tokens]: greedy, with a fresh KV cache."""
    cache = KVCache()
    out, step_in = prompt, prompt
    for _ in range(max_new_tokens):
        logits = lm_step(model, step_in, cache)      # [B, S, V]
        step_in = logits[:, 0].argmax(dim=-1).unsqueeze(1)
        out = torch.cat((out, step_in), dim=1)
    return out
''',
    name="b_gen_first_position_logits",
)

right(
    "ch08_generation",
    "generate_greedy",
    '''
@torch.no_grad()
def generate_greedy(model, prompt, max_new_tokens):
    """prompt [B, S] -> [B, S + max_new_tokens]: greedy, with a fresh KV cache."""
    B, S = prompt.shape
    out = torch.empty(B, S + max_new_tokens, dtype=prompt.dtype, device=prompt.device)
    out[:, :S] = prompt
    kv = KVCache()
    feed = prompt
    for t in range(S, S + max_new_tokens):
        last = lm_step(model, feed, kv)[:, -1, :]
        out[:, t] = last.max(dim=-1).indices
        feed = out[:, t : t + 1]
    return out
''',
    name="b_gen_right_preallocated",
)
