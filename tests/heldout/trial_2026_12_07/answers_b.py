"""Held-out answers, writer B (chapters 5-8, the decoding bug hunt, the own model).

Written from the exercise sources, the lessons and tformer_ref only (the checks were
not read). Each answer replaces one solution cell."""

from harness import right, wrong

# ============================================================== ch05_model
# ---------------------------------------------------------- sinusoidal_encoding

wrong(
    "ch05_model",
    "sinusoidal_encoding",
    "cosines in the even columns and sines in the odd ones (sin/cos swapped)",
    '''
def sinusoidal_encoding(n_positions, d_model):
    """-> [n_positions, d_model]."""
    pos = torch.arange(n_positions).float().unsqueeze(1)
    div = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
    pe = torch.zeros(n_positions, d_model)
    pe[:, 0::2] = torch.cos(pos * div)
    pe[:, 1::2] = torch.sin(pos * div)
    return pe
''',
    name="b_sin_cos_swapped",
)

wrong(
    "ch05_model",
    "sinusoidal_encoding",
    "exponent uses the pair index i instead of 2i (10000^(i/D)): frequencies decay half as fast",
    '''
def sinusoidal_encoding(n_positions, d_model):
    """-> [n_positions, d_model]."""
    pe = torch.zeros(n_positions, d_model)
    pos = torch.arange(n_positions, dtype=torch.float32)[:, None]
    i = torch.arange(d_model // 2, dtype=torch.float32)  # pair index
    angle = pos / (10000 ** (i / d_model))
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe
''',
    name="b_sin_exponent_i_not_2i",
)

wrong(
    "ch05_model",
    "sinusoidal_encoding",
    "positions counted from 1 (arange(1, n+1)), so row 0 is the encoding of position 1",
    '''
def sinusoidal_encoding(n_positions, d_model):
    """-> [n_positions, d_model]."""
    positions = torch.arange(1, n_positions + 1, dtype=torch.float64).unsqueeze(1)
    freqs = 1.0 / (10000.0 ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model))
    table = torch.zeros(n_positions, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(positions * freqs)
    table[:, 1::2] = torch.cos(positions * freqs)
    return table.float()
''',
    name="b_sin_positions_from_1",
)

wrong(
    "ch05_model",
    "sinusoidal_encoding",
    "sines in the first half of the columns and cosines in the second half (concatenated, not interleaved)",
    '''
def sinusoidal_encoding(n_positions, d_model):
    """-> [n_positions, d_model]."""
    pos = torch.arange(n_positions, dtype=torch.float32).unsqueeze(-1)   # [N, 1]
    two_i = torch.arange(0, d_model, 2, dtype=torch.float32)            # [D/2]
    angles = pos / torch.pow(10000.0, two_i / d_model)                  # [N, D/2]
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1)    # [N, D]
''',
    name="b_sin_concat_halves",
)

wrong(
    "ch05_model",
    "sinusoidal_encoding",
    "base 1000 instead of 10000 in the frequencies",
    '''
def sinusoidal_encoding(n_positions, d_model):
    """-> [n_positions, d_model]."""
    pe = torch.zeros(n_positions, d_model)
    for pos in range(n_positions):
        for i in range(0, d_model, 2):
            angle = pos / (1000 ** (i / d_model))
            pe[pos, i] = math.sin(angle)
            pe[pos, i + 1] = math.cos(angle)
    return pe
''',
    name="b_sin_base_1000",
)

right(
    "ch05_model",
    "sinusoidal_encoding",
    '''
def sinusoidal_encoding(n_positions, d_model):
    """-> [n_positions, d_model]."""
    # plain loops, straight from the formula
    pe = torch.zeros(n_positions, d_model, dtype=torch.float64)
    for pos in range(n_positions):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            pe[pos, 2 * i] = math.sin(angle)
            pe[pos, 2 * i + 1] = math.cos(angle)
    return pe
''',
    name="b_sin_right_loops",
)

right(
    "ch05_model",
    "sinusoidal_encoding",
    '''
def sinusoidal_encoding(n_positions, d_model):
    """-> [n_positions, d_model]."""
    pos = torch.arange(n_positions, dtype=torch.float32)
    inv = torch.exp(-math.log(10000.0) * torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)
    ang = torch.outer(pos, inv)                                      # [N, D/2]
    # interleave: stack on a new last axis then flatten -> sin, cos, sin, cos ...
    return torch.stack([ang.sin(), ang.cos()], dim=-1).reshape(n_positions, d_model)
''',
    name="b_sin_right_stack_interleave",
)

# ---------------------------------------------------------- embed

wrong(
    "ch05_model",
    "embed",
    "embeddings divided by sqrt(d_model) instead of multiplied",
    '''
def embed(tokens, table, pe):
    """tokens [B, S] long, table nn.Embedding(V, D), pe [max_len, D] -> [B, S, D]."""
    d_model = table.embedding_dim
    x = table(tokens) / math.sqrt(d_model)
    return x + pe[: tokens.size(1)]
''',
    name="b_embed_divide_sqrt",
)

wrong(
    "ch05_model",
    "embed",
    "no sqrt(d_model) scaling of the token embeddings",
    '''
def embed(tokens, table, pe):
    """tokens [B, S] long, table nn.Embedding(V, D), pe [max_len, D] -> [B, S, D]."""
    seq_len = tokens.shape[1]
    return table(tokens) + pe[:seq_len].unsqueeze(0)
''',
    name="b_embed_no_scale",
)

wrong(
    "ch05_model",
    "embed",
    "slices pe with the batch size (tokens.size(0)) instead of the sequence length",
    '''
def embed(tokens, table, pe):
    """tokens [B, S] long, table nn.Embedding(V, D), pe [max_len, D] -> [B, S, D]."""
    n = tokens.size(0)
    return table(tokens) * math.sqrt(table.embedding_dim) + pe[:n]
''',
    name="b_embed_pe_batch_len",
)

wrong(
    "ch05_model",
    "embed",
    "scales the embedding table's weights in place (table.weight.data *= sqrt(D)): the table changes and grows on every call",
    '''
def embed(tokens, table, pe):
    """tokens [B, S] long, table nn.Embedding(V, D), pe [max_len, D] -> [B, S, D]."""
    with torch.no_grad():
        table.weight.data *= math.sqrt(table.embedding_dim)
    return table(tokens) + pe[: tokens.size(1)]
''',
    name="b_embed_inplace_table",
)

wrong(
    "ch05_model",
    "embed",
    "scales by sqrt of the vocabulary size (num_embeddings) instead of d_model",
    '''
def embed(tokens, table, pe):
    """tokens [B, S] long, table nn.Embedding(V, D), pe [max_len, D] -> [B, S, D]."""
    scale = math.sqrt(table.num_embeddings)
    return table(tokens) * scale + pe[: tokens.size(1)]
''',
    name="b_embed_sqrt_vocab",
)

right(
    "ch05_model",
    "embed",
    '''
def embed(tokens, table, pe):
    """tokens [B, S] long, table nn.Embedding(V, D), pe [max_len, D] -> [B, S, D]."""
    B, S = tokens.shape
    D = table.weight.shape[1]
    e = F.embedding(tokens, table.weight)          # same lookup as table(tokens)
    return e * D ** 0.5 + pe.narrow(0, 0, S)[None, :, :]
''',
    name="b_embed_right_functional",
)

# ---------------------------------------------------------- decoder_block

wrong(
    "ch05_model",
    "decoder_block",
    "causal mask built with triu(diagonal=1) (the 'True = masked' convention) while the attention keeps True: each query attends only to the future",
    '''
class DecoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        """x [B, St, D], memory [B, Ss, D], src_mask [B, 1, 1, Ss] or None
        -> [B, St, D]."""
        T = x.size(1)
        # mask out the future
        future = torch.triu(torch.ones(T, T, device=x.device), diagonal=1).bool()
        mask = future.unsqueeze(0).unsqueeze(0)
        x = self.norm1(x + self.drop(self.self_attn(x, x, x, mask=mask)))
        x = self.norm2(x + self.drop(self.cross_attn(x, memory, memory, mask=src_mask)))
        x = self.norm3(x + self.drop(self.ff(x)))
        return x
''',
    name="b_dec_triu_ignore_convention",
)

wrong(
    "ch05_model",
    "decoder_block",
    "no causal mask on the self-attention (mask=None): the decoder sees future target positions",
    '''
class DecoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.attn1 = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.attn2 = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.lin1 = nn.Linear(d_model, d_ff)
        self.lin2 = nn.Linear(d_ff, d_model)
        self.ln1 = nn.LayerNorm(d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.ln3 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        """x [B, St, D], memory [B, Ss, D], src_mask [B, 1, 1, Ss] or None
        -> [B, St, D]."""
        x = self.ln1(x + self.dropout(self.attn1(x, x, x)))
        x = self.ln2(x + self.dropout(self.attn2(x, memory, memory, mask=src_mask)))
        h = self.lin2(F.relu(self.lin1(x)))
        return self.ln3(x + self.dropout(h))
''',
    name="b_dec_no_causal",
)

wrong(
    "ch05_model",
    "decoder_block",
    "cross-attention ignores the source padding mask (src_mask not passed)",
    '''
class DecoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.src_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ffn = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))
        self.norms = nn.ModuleList([nn.LayerNorm(d_model) for _ in range(3)])
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        """x [B, St, D], memory [B, Ss, D], src_mask [B, 1, 1, Ss] or None
        -> [B, St, D]."""
        n = x.size(1)
        causal = torch.tril(torch.ones(n, n, dtype=torch.bool, device=x.device))[None, None]
        x = self.norms[0](x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        x = self.norms[1](x + self.dropout(self.src_attn(x, memory, memory)))
        return self.norms[2](x + self.dropout(self.ffn(x)))
''',
    name="b_dec_cross_no_src_mask",
)

wrong(
    "ch05_model",
    "decoder_block",
    "Pre-LN wiring (x + Sublayer(LayerNorm(x))) instead of the Post-LN the exercise asks for",
    '''
class DecoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        """x [B, St, D], memory [B, Ss, D], src_mask [B, 1, 1, Ss] or None
        -> [B, St, D]."""
        St = x.size(1)
        causal = torch.ones(St, St, dtype=torch.bool, device=x.device).tril()[None, None]
        h = self.norm1(x)
        x = x + self.dropout(self.self_attn(h, h, h, mask=causal))
        h = self.norm2(x)
        x = x + self.dropout(self.cross_attn(h, memory, memory, mask=src_mask))
        h = self.norm3(x)
        return x + self.dropout(self.ff(h))
''',
    name="b_dec_pre_ln",
)

wrong(
    "ch05_model",
    "decoder_block",
    "cross-attention queries and residual use the block's original input x, not the output of the self-attention sublayer (self-attention result dropped from the cross-attention path)",
    '''
class DecoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        """x [B, St, D], memory [B, Ss, D], src_mask [B, 1, 1, Ss] or None
        -> [B, St, D]."""
        St = x.size(1)
        causal = torch.ones(St, St, dtype=torch.bool, device=x.device).tril()[None, None]
        a = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        b = self.norm2(x + self.dropout(self.cross_attn(x, memory, memory, mask=src_mask)))
        return self.norm3(b + self.dropout(self.ff(b)))
''',
    name="b_dec_cross_reads_input_x",
)

wrong(
    "ch05_model",
    "decoder_block",
    "no dropout on the cross-attention sublayer's output (only self-attention and feed-forward get dropout)",
    '''
class DecoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)
        self.drop1 = nn.Dropout(dropout)
        self.drop3 = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        """x [B, St, D], memory [B, Ss, D], src_mask [B, 1, 1, Ss] or None
        -> [B, St, D]."""
        St = x.size(1)
        causal = torch.ones(St, St, dtype=torch.bool, device=x.device).tril()[None, None]
        x = self.norm1(x + self.drop1(self.self_attn(x, x, x, mask=causal)))
        x = self.norm2(x + self.cross_attn(x, memory, memory, mask=src_mask))
        return self.norm3(x + self.drop3(self.ff(x)))
''',
    name="b_dec_no_cross_dropout",
)

wrong(
    "ch05_model",
    "decoder_block",
    "one LayerNorm module shared by all three sublayers",
    '''
class DecoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))
        self.norm = nn.LayerNorm(d_model)   # same normalisation everywhere
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        """x [B, St, D], memory [B, Ss, D], src_mask [B, 1, 1, Ss] or None
        -> [B, St, D]."""
        St = x.size(1)
        causal = torch.ones(St, St, dtype=torch.bool, device=x.device).tril()[None, None]
        x = self.norm(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        x = self.norm(x + self.dropout(self.cross_attn(x, memory, memory, mask=src_mask)))
        return self.norm(x + self.dropout(self.ff(x)))
''',
    name="b_dec_shared_layernorm",
)

right(
    "ch05_model",
    "decoder_block",
    '''
class DecoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.masked_mha = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.enc_dec_mha = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.fc1 = nn.Linear(d_model, d_ff)
        self.fc2 = nn.Linear(d_ff, d_model)
        self.ln = nn.ModuleList([nn.LayerNorm(d_model), nn.LayerNorm(d_model), nn.LayerNorm(d_model)])
        self.drops = nn.ModuleList([nn.Dropout(dropout) for _ in range(3)])

    def _residual(self, i, x, out):
        return self.ln[i](x + self.drops[i](out))

    def forward(self, x, memory, src_mask=None):
        """x [B, St, D], memory [B, Ss, D], src_mask [B, 1, 1, Ss] or None
        -> [B, St, D]."""
        St = x.shape[1]
        idx = torch.arange(St, device=x.device)
        keep = (idx[None, :] <= idx[:, None]).view(1, 1, St, St)   # key j <= query i
        x = self._residual(0, x, self.masked_mha(x, x, x, mask=keep))
        x = self._residual(1, x, self.enc_dec_mha(x, memory, memory, mask=src_mask))
        x = self._residual(2, x, self.fc2(torch.relu(self.fc1(x))))
        return x
''',
    name="b_dec_right_helper_arange_mask",
)

right(
    "ch05_model",
    "decoder_block",
    '''
class LayerNorm(nn.Module):
    """hand-written LayerNorm with its own gain and bias"""
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(d))
        self.beta = nn.Parameter(torch.zeros(d))
        self.eps = eps

    def forward(self, x):
        mu = x.mean(-1, keepdim=True)
        var = x.var(-1, unbiased=False, keepdim=True)
        return self.gamma * (x - mu) / torch.sqrt(var + self.eps) + self.beta


class DecoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.sa = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ca = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))
        self.n1, self.n2, self.n3 = LayerNorm(d_model), LayerNorm(d_model), LayerNorm(d_model)
        self.d1, self.d2, self.d3 = nn.Dropout(dropout), nn.Dropout(dropout), nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        """x [B, St, D], memory [B, Ss, D], src_mask [B, 1, 1, Ss] or None
        -> [B, St, D]."""
        T = x.size(1)
        mask = ~torch.triu(torch.ones(T, T, dtype=torch.bool, device=x.device), diagonal=1)
        mask = mask.expand(1, 1, T, T)
        y = self.n1(x + self.d1(self.sa(x, x, x, mask=mask)))
        z = self.n2(y + self.d2(self.ca(y, memory, memory, mask=src_mask)))
        out = self.n3(z + self.d3(self.ff(z)))
        return out
''',
    name="b_dec_right_handmade_layernorm",
)

# ============================================================== ch06_training
# ---------------------------------------------------------- shift_targets

wrong(
    "ch06_training",
    "shift_targets",
    "sequence-first slices kept from the seed (tgt[:-1, :], tgt[1:, :]): drops a batch row instead of a position",
    '''
def shift_targets(tgt):
    """tgt [B, St] -> (decoder input [B, St-1], labels [B, St-1])."""
    tgt_in = tgt[:-1, :]
    labels = tgt[1:, :]
    return tgt_in, labels
''',
    name="b_shift_seq_first",
)

wrong(
    "ch06_training",
    "shift_targets",
    "returns (labels, tgt_in): the two halves in the wrong order",
    '''
def shift_targets(tgt):
    """tgt [B, St] -> (decoder input [B, St-1], labels [B, St-1])."""
    y = tgt[:, 1:]      # what we predict
    x = tgt[:, :-1]     # what the decoder reads
    return y, x
''',
    name="b_shift_swapped_order",
)

wrong(
    "ch06_training",
    "shift_targets",
    "replaces EOS by PAD in the decoder input (thinks the decoder must never read EOS): tokens change their id",
    '''
def shift_targets(tgt):
    """tgt [B, St] -> (decoder input [B, St-1], labels [B, St-1])."""
    tgt_in = tgt[:, :-1].clone()
    tgt_in[tgt_in == 2] = 0   # the decoder should not see <eos>
    labels = tgt[:, 1:]
    return tgt_in, labels
''',
    name="b_shift_eos_to_pad",
)

wrong(
    "ch06_training",
    "shift_targets",
    "labels made with torch.roll(-1) but nothing trimmed: both outputs keep length St and the last label wraps round to BOS",
    '''
def shift_targets(tgt):
    """tgt [B, St] -> (decoder input [B, St-1], labels [B, St-1])."""
    labels = torch.roll(tgt, shifts=-1, dims=1)
    return tgt, labels
''',
    name="b_shift_roll_untrimmed",
)

wrong(
    "ch06_training",
    "shift_targets",
    "labels cast to float (labels = tgt[:, 1:].float()): the shift changes the dtype",
    '''
def shift_targets(tgt):
    """tgt [B, St] -> (decoder input [B, St-1], labels [B, St-1])."""
    decoder_input = tgt[:, :-1]
    labels = tgt[:, 1:].float()   # targets for the loss
    return decoder_input, labels
''',
    name="b_shift_labels_float",
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
    # roll left by one, then cut the wrapped column off
    labels = torch.roll(tgt, -1, dims=1)[:, :-1]
    return tgt[..., :-1], labels
''',
    name="b_shift_right_roll_trimmed",
)

# ---------------------------------------------------------- sequence_loss

wrong(
    "ch06_training",
    "sequence_loss",
    "mean over sequences: each row's mean token loss, then the mean over rows (short rows weigh more)",
    '''
def sequence_loss(logits, labels, pad_id, label_smoothing):
    """logits [B, St, V], labels [B, St] -> scalar."""
    B, St, V = logits.shape
    per_tok = F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1),
                              ignore_index=pad_id, label_smoothing=label_smoothing,
                              reduction="none").view(B, St)
    real = (labels != pad_id).float()
    per_seq = (per_tok * real).sum(1) / real.sum(1).clamp(min=1)
    return per_seq.mean()
''',
    name="b_loss_mean_over_sequences",
)

wrong(
    "ch06_training",
    "sequence_loss",
    "ignore_index hard-coded to 0 instead of pad_id",
    '''
def sequence_loss(logits, labels, pad_id, label_smoothing):
    """logits [B, St, V], labels [B, St] -> scalar."""
    V = logits.size(-1)
    return F.cross_entropy(logits.view(-1, V), labels.view(-1),
                           ignore_index=0, label_smoothing=label_smoothing)
''',
    name="b_loss_ignore_index_zero",
)

wrong(
    "ch06_training",
    "sequence_loss",
    "softmax applied to the logits before F.cross_entropy (double softmax)",
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
    "hand-made label smoothing spreads epsilon over the V-1 wrong classes only (label excluded), unlike PyTorch's eps/V on every class",
    '''
def sequence_loss(logits, labels, pad_id, label_smoothing):
    """logits [B, St, V], labels [B, St] -> scalar."""
    V = logits.size(-1)
    logp = F.log_softmax(logits, dim=-1)
    eps = label_smoothing
    target = torch.full_like(logp, eps / (V - 1))
    target.scatter_(-1, labels.unsqueeze(-1), 1.0 - eps)
    loss = -(target * logp).sum(-1)            # [B, St]
    keep = labels != pad_id
    return loss[keep].mean()
''',
    name="b_loss_smoothing_v_minus_1",
)

wrong(
    "ch06_training",
    "sequence_loss",
    "label_smoothing argument not passed on to F.cross_entropy (no smoothing at all)",
    '''
def sequence_loss(logits, labels, pad_id, label_smoothing):
    """logits [B, St, V], labels [B, St] -> scalar."""
    logits_2d = logits.reshape(-1, logits.shape[-1])
    labels_1d = labels.reshape(-1)
    return F.cross_entropy(logits_2d, labels_1d, ignore_index=pad_id)
''',
    name="b_loss_no_smoothing",
)

wrong(
    "ch06_training",
    "sequence_loss",
    "sums the masked token losses and divides by the total number of labels (PAD included) instead of the real tokens",
    '''
def sequence_loss(logits, labels, pad_id, label_smoothing):
    """logits [B, St, V], labels [B, St] -> scalar."""
    V = logits.size(-1)
    losses = F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1), reduction="none",
                             ignore_index=pad_id, label_smoothing=label_smoothing)
    return losses.sum() / labels.numel()
''',
    name="b_loss_divide_by_all_positions",
)

right(
    "ch06_training",
    "sequence_loss",
    '''
def sequence_loss(logits, labels, pad_id, label_smoothing):
    """logits [B, St, V], labels [B, St] -> scalar."""
    # by hand: (1 - eps) * NLL + eps * mean over classes of -log p
    logp = logits.log_softmax(dim=-1)
    eps = label_smoothing
    safe = labels.masked_fill(labels == pad_id, 0)        # any valid index for the pads
    nll = -logp.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    uniform = -logp.mean(dim=-1)
    per_token = (1 - eps) * nll + eps * uniform
    mask = (labels != pad_id).to(logits.dtype)
    return (per_token * mask).sum() / mask.sum()
''',
    name="b_loss_right_by_hand",
)

right(
    "ch06_training",
    "sequence_loss",
    '''
def sequence_loss(logits, labels, pad_id, label_smoothing):
    """logits [B, St, V], labels [B, St] -> scalar."""
    # cross_entropy takes [B, V, St] directly: the class axis second
    return F.cross_entropy(logits.transpose(1, 2), labels,
                           ignore_index=pad_id, label_smoothing=label_smoothing)
''',
    name="b_loss_right_class_axis_second",
)

# ---------------------------------------------------------- noam

wrong(
    "ch06_training",
    "noam",
    "guards step 0 with max(step, 1) instead of step + 1: steps 0 and 1 get the same rate and the schedule is one step late after that",
    '''
def noam_lambda(step, d_model, warmup):
    """LambdaLR multiplier for 0-based ``step``."""
    step = max(step, 1)  # avoid 0 ** -0.5
    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


def make_scheduler(optimizer, d_model, warmup):
    """A scheduler that sets the Noam rate (the optimizer's lr is 1.0)."""
    return LambdaLR(optimizer, lr_lambda=lambda s: noam_lambda(s, d_model, warmup))
''',
    name="b_noam_max_step_1",
)

wrong(
    "ch06_training",
    "noam",
    "warm-up term uses warmup**-0.5 instead of warmup**-1.5",
    '''
def noam_lambda(step, d_model, warmup):
    """LambdaLR multiplier for 0-based ``step``."""
    n = step + 1
    return (d_model ** -0.5) * min(n ** -0.5, n * warmup ** -0.5)


def make_scheduler(optimizer, d_model, warmup):
    """A scheduler that sets the Noam rate (the optimizer's lr is 1.0)."""
    return LambdaLR(optimizer, lambda step: noam_lambda(step, d_model, warmup))
''',
    name="b_noam_warmup_pow_half",
)

wrong(
    "ch06_training",
    "noam",
    "the d_model**-0.5 factor left out",
    '''
def noam_lambda(step, d_model, warmup):
    """LambdaLR multiplier for 0-based ``step``."""
    n = step + 1
    return min(1 / math.sqrt(n), n / warmup ** 1.5)


def make_scheduler(optimizer, d_model, warmup):
    """A scheduler that sets the Noam rate (the optimizer's lr is 1.0)."""
    return LambdaLR(optimizer, lambda step: noam_lambda(step, d_model, warmup))
''',
    name="b_noam_no_dmodel_factor",
)

wrong(
    "ch06_training",
    "noam",
    "make_scheduler calls scheduler.step() right after creating it, so the first update already uses step 1's rate",
    '''
def noam_lambda(step, d_model, warmup):
    """LambdaLR multiplier for 0-based ``step``."""
    n = step + 1
    return d_model ** -0.5 * min(n ** -0.5, n * warmup ** -1.5)


def make_scheduler(optimizer, d_model, warmup):
    """A scheduler that sets the Noam rate (the optimizer's lr is 1.0)."""
    sched = LambdaLR(optimizer, lambda step: noam_lambda(step, d_model, warmup))
    sched.step()  # start at the first step
    return sched
''',
    name="b_noam_sched_extra_step",
)

wrong(
    "ch06_training",
    "noam",
    "max instead of min in the Noam formula: no warm-up, the rate grows linearly forever",
    '''
def noam_lambda(step, d_model, warmup):
    """LambdaLR multiplier for 0-based ``step``."""
    n = step + 1
    return d_model ** -0.5 * max(n ** -0.5, n * warmup ** -1.5)


def make_scheduler(optimizer, d_model, warmup):
    """A scheduler that sets the Noam rate (the optimizer's lr is 1.0)."""
    return LambdaLR(optimizer, lambda step: noam_lambda(step, d_model, warmup))
''',
    name="b_noam_max_not_min",
)

right(
    "ch06_training",
    "noam",
    '''
import functools


def noam_lambda(step, d_model, warmup):
    """LambdaLR multiplier for 0-based ``step``."""
    n = step + 1  # updates are counted from 1
    if n < warmup:
        lr = n / (warmup * math.sqrt(warmup))
    else:
        lr = 1 / math.sqrt(n)
    return lr / math.sqrt(d_model)


def make_scheduler(optimizer, d_model, warmup):
    """A scheduler that sets the Noam rate (the optimizer's lr is 1.0)."""
    f = functools.partial(noam_lambda, d_model=d_model, warmup=warmup)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda=f)
''',
    name="b_noam_right_branches_partial",
)

# ---------------------------------------------------------- train_step

wrong(
    "ch06_training",
    "train_step",
    "never calls model.train(): a model handed over in eval mode trains without dropout",
    '''
def train_step(model, src, tgt, optimizer, scheduler, max_norm, pad_id, label_smoothing):
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
    "scheduler.step() before optimizer.step(): the update uses the next step's learning rate",
    '''
def train_step(model, src, tgt, optimizer, scheduler, max_norm, pad_id, label_smoothing):
    """One update -> (loss, gradient norm before clipping)."""
    model.train()
    optimizer.zero_grad()
    dec_in, y = shift_targets(tgt)
    loss = sequence_loss(model(src, dec_in), y, pad_id, label_smoothing)
    loss.backward()
    total_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scheduler.step()   # update the learning rate
    optimizer.step()
    return loss.item(), total_norm.item()
''',
    name="b_step_scheduler_first",
)

wrong(
    "ch06_training",
    "train_step",
    "clips each parameter's gradient separately (clip_grad_norm_ per parameter) and returns the sum of the per-parameter norms",
    '''
def train_step(model, src, tgt, optimizer, scheduler, max_norm, pad_id, label_smoothing):
    """One update -> (loss, gradient norm before clipping)."""
    model.train()
    optimizer.zero_grad()
    tgt_in, labels = shift_targets(tgt)
    loss = sequence_loss(model(src, tgt_in), labels, pad_id, label_smoothing)
    loss.backward()
    norm = 0.0
    for p in model.parameters():
        if p.grad is not None:
            norm += torch.nn.utils.clip_grad_norm_([p], max_norm).item()
    optimizer.step()
    scheduler.step()
    return loss.item(), norm
''',
    name="b_step_clip_per_param",
)

wrong(
    "ch06_training",
    "train_step",
    "returns the gradient norm measured after clipping (recomputed), not the norm before clipping",
    '''
def train_step(model, src, tgt, optimizer, scheduler, max_norm, pad_id, label_smoothing):
    """One update -> (loss, gradient norm before clipping)."""
    model.train()
    optimizer.zero_grad()
    tgt_in, labels = shift_targets(tgt)
    loss = sequence_loss(model(src, tgt_in), labels, pad_id, label_smoothing)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    grads = [p.grad.detach().flatten() for p in model.parameters() if p.grad is not None]
    norm = torch.cat(grads).norm(2)
    optimizer.step()
    scheduler.step()
    return float(loss), float(norm)
''',
    name="b_step_norm_after_clip",
)

wrong(
    "ch06_training",
    "train_step",
    "no zero_grad anywhere: gradients of earlier batches (and stale ones) accumulate",
    '''
def train_step(model, src, tgt, optimizer, scheduler, max_norm, pad_id, label_smoothing):
    """One update -> (loss, gradient norm before clipping)."""
    model.train()
    tgt_in, labels = shift_targets(tgt)
    out = model(src, tgt_in)
    loss = sequence_loss(out, labels, pad_id, label_smoothing)
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
    "clip_grad_value_ (element-wise clipping) instead of clip_grad_norm_, with the norm computed by hand",
    '''
def train_step(model, src, tgt, optimizer, scheduler, max_norm, pad_id, label_smoothing):
    """One update -> (loss, gradient norm before clipping)."""
    model.train()
    optimizer.zero_grad()
    tgt_in, labels = shift_targets(tgt)
    loss = sequence_loss(model(src, tgt_in), labels, pad_id, label_smoothing)
    loss.backward()
    norm = torch.sqrt(sum((p.grad ** 2).sum() for p in model.parameters() if p.grad is not None))
    torch.nn.utils.clip_grad_value_(model.parameters(), max_norm)
    optimizer.step()
    scheduler.step()
    return loss.item(), norm.item()
''',
    name="b_step_clip_value",
)

wrong(
    "ch06_training",
    "train_step",
    "no teacher-forcing shift: the model reads the whole tgt and the labels are tgt itself",
    '''
def train_step(model, src, tgt, optimizer, scheduler, max_norm, pad_id, label_smoothing):
    """One update -> (loss, gradient norm before clipping)."""
    model.train()
    optimizer.zero_grad()
    logits = model(src, tgt)
    loss = sequence_loss(logits, tgt, pad_id, label_smoothing)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    scheduler.step()
    return loss.item(), norm.item()
''',
    name="b_step_no_shift",
)

right(
    "ch06_training",
    "train_step",
    '''
def train_step(model, src, tgt, optimizer, scheduler, max_norm, pad_id, label_smoothing):
    """One update -> (loss, gradient norm before clipping)."""
    model.train(True)
    for p in model.parameters():   # drop whatever gradients were left
        p.grad = None
    decoder_in, targets = shift_targets(tgt)
    logits = model(src, decoder_in)
    loss = sequence_loss(logits, targets, pad_id, label_smoothing)
    loss.backward()
    params = [p for p in model.parameters() if p.grad is not None]
    gnorm = torch.nn.utils.clip_grad_norm_(params, max_norm=max_norm, norm_type=2.0)
    optimizer.step()
    scheduler.step()
    return float(loss.detach()), float(gnorm)
''',
    name="b_step_right_grad_none",
)

# ---------------------------------------------------------- greedy_decode

wrong(
    "ch06_training",
    "greedy_decode",
    "no causal mask passed to decode (tgt_mask=None means no masking)",
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
            next_tok[done] = pad_id
            ys = torch.cat([ys, next_tok.unsqueeze(1)], dim=1)
            done = done | (next_tok == eos_id)
            if done.all():
                break
    return ys
''',
    name="b_greedy_no_tgt_mask",
)

wrong(
    "ch06_training",
    "greedy_decode",
    "uses the usual ids 1/2/0 instead of the bos_id/eos_id/pad_id arguments",
    '''
def greedy_decode(model, src, max_len, bos_id, eos_id, pad_id):
    """src [B, Ss] -> [B, T] token ids: BOS, the decoded tokens, EOS, then padding."""
    BOS, EOS, PAD = 1, 2, 0
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), BOS, dtype=torch.long, device=src.device)
        finished = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            logits = model.decode(out, memory, src_mask, causal_mask(out.size(1), src.device))
            nxt = logits[:, -1].argmax(dim=-1)
            nxt = torch.where(finished, torch.full_like(nxt, PAD), nxt)
            out = torch.cat([out, nxt[:, None]], dim=1)
            finished = finished | (nxt == EOS)
            if finished.all():
                break
    return out
''',
    name="b_greedy_hardcoded_ids",
)

wrong(
    "ch06_training",
    "greedy_decode",
    "rows that already produced EOS keep getting argmax tokens instead of pad_id",
    '''
def greedy_decode(model, src, max_len, bos_id, eos_id, pad_id):
    """src [B, Ss] -> [B, T] token ids: BOS, the decoded tokens, EOS, then padding."""
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        seen_eos = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for step in range(max_len):
            mask = causal_mask(out.size(1), src.device)
            logits = model.decode(out, memory, src_mask, mask)
            nxt = logits[:, -1].argmax(-1)
            out = torch.cat([out, nxt.unsqueeze(-1)], dim=-1)
            seen_eos |= nxt == eos_id
            if seen_eos.all():
                break
    return out
''',
    name="b_greedy_no_pad_after_eos",
)

wrong(
    "ch06_training",
    "greedy_decode",
    "loops range(max_len - 1) as the seed did: one new token fewer than allowed",
    '''
def greedy_decode(model, src, max_len, bos_id, eos_id, pad_id):
    """src [B, Ss] -> [B, T] token ids: BOS, the decoded tokens, EOS, then padding."""
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        finished = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len - 1):
            logits = model.decode(out, memory, src_mask, causal_mask(out.size(1), src.device))
            nxt = logits[:, -1].argmax(dim=-1).masked_fill(finished, pad_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            finished |= nxt == eos_id
            if finished.all():
                break
    return out
''',
    name="b_greedy_max_len_minus_1",
)

wrong(
    "ch06_training",
    "greedy_decode",
    "stops as soon as ANY row produced EOS (finished.any()) instead of every row",
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
            nxt = logits[:, -1].argmax(dim=-1).masked_fill(finished, pad_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            finished |= nxt == eos_id
            if finished.any():
                break
    return out
''',
    name="b_greedy_stop_any",
)

wrong(
    "ch06_training",
    "greedy_decode",
    "takes the argmax of the FIRST position's logits (logits.argmax(-1)[:, 0]) instead of the last",
    '''
def greedy_decode(model, src, max_len, bos_id, eos_id, pad_id):
    """src [B, Ss] -> [B, T] token ids: BOS, the decoded tokens, EOS, then padding."""
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        tokens = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        finished = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            logits = model.decode(tokens, memory, src_mask, causal_mask(tokens.size(1), src.device))
            best = logits.argmax(-1)[:, 0]          # [B]
            best = best.masked_fill(finished, pad_id)
            tokens = torch.cat([tokens, best.unsqueeze(1)], 1)
            finished = finished | best.eq(eos_id)
            if bool(finished.all()):
                break
    return tokens
''',
    name="b_greedy_argmax_first_position",
)

wrong(
    "ch06_training",
    "greedy_decode",
    "never calls model.eval(): decoding runs with dropout on",
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

right(
    "ch06_training",
    "greedy_decode",
    '''
@torch.no_grad()
def greedy_decode(model, src, max_len, bos_id, eos_id, pad_id):
    """src [B, Ss] -> [B, T] token ids: BOS, the decoded tokens, EOS, then padding."""
    model.eval()
    dev = src.device
    memory, src_mask = model.encode(src)
    columns = [torch.full((src.shape[0],), bos_id, dtype=torch.long, device=dev)]
    alive = torch.ones(src.shape[0], dtype=torch.bool, device=dev)
    for t in range(1, max_len + 1):
        prefix = torch.stack(columns, dim=1)                       # [B, t]
        keep = torch.tril(torch.ones(t, t, device=dev)).bool()[None, None]
        scores = model.decode(prefix, memory, src_mask, keep)[:, -1, :]   # [B, V]
        token = torch.where(alive, scores.argmax(dim=1), torch.full_like(alive, pad_id, dtype=torch.long))
        columns.append(token)
        alive = alive & (token != eos_id)
        if not alive.any():
            break
    return torch.stack(columns, dim=1)
''',
    name="b_greedy_right_columns_where",
)

# ============================================================== ch06_bughunt
# ---------------------------------------------------------- generate_text

wrong(
    "ch06_bughunt",
    "generate_text",
    "fixes the mask call and its device but leaves bug 3: the source padding is still unmasked (None to encoder and decoder)",
    """
def generate_text(model, src, max_length, device):
    model.eval()
    with torch.no_grad():
        # 编码源序列
        enc_src = model.encoder(src, None)

        # 初始化目标序列为 <SOS> token
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)

        for i in range(max_length - 1):
            # 创建 target mask  (fixed: it is a plain function, and must be on the device)
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
    name="b_gen_src_padding_unfixed",
)

wrong(
    "ch06_bughunt",
    "generate_text",
    "masks the source padding in the encoder only; the decoder's cross-attention still gets None",
    """
def generate_text(model, src, max_length, device):
    model.eval()
    with torch.no_grad():
        # 编码源序列
        src_mask = create_src_mask(src)
        enc_src = model.encoder(src, src_mask)

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
    name="b_gen_src_mask_encoder_only",
)

wrong(
    "ch06_bughunt",
    "generate_text",
    "calls the free create_trg_mask but never moves it to the device (bug 2 left: a CPU mask meets CUDA tensors)",
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
    name="b_gen_mask_not_on_device",
)

wrong(
    "ch06_bughunt",
    "generate_text",
    "replaces create_trg_mask by its own triu(diagonal=1) mask thinking 1 = masked; the seed's convention is 0 = masked, so each query sees only the future",
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
            # 创建 target mask: block the future positions
            T = trg.size(1)
            trg_mask = torch.triu(torch.ones(T, T, device=device), diagonal=1)[None, None]

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
    name="b_gen_trg_mask_triu",
)

wrong(
    "ch06_bughunt",
    "generate_text",
    "source mask inverted (src == PAD_IDX): only the padding positions are attended to",
    """
def generate_text(model, src, max_length, device):
    model.eval()
    with torch.no_grad():
        # mask for the padding of the source
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
    name="b_gen_src_mask_inverted",
)

wrong(
    "ch06_bughunt",
    "generate_text",
    "'fixes' bug 1 by dropping the target mask (trg_mask=None): the decoder attends to every prefix position without causal masking",
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
            # 前向传播 (no mask needed: the sequence only holds the past anyway)
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
    name="b_gen_no_trg_mask",
)

right(
    "ch06_bughunt",
    "generate_text",
    """
def generate_text(model, src, max_length, device):
    model.eval()
    with torch.no_grad():
        # padding of the source: [1, 1, 1, S], nonzero where there is a real token
        src_mask = src.ne(PAD_IDX)[:, None, None, :]

        # 编码源序列
        enc_src = model.encoder(src, src_mask)

        # 初始化目标序列为 <SOS> token
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)

        for i in range(max_length - 1):
            # 创建 target mask: lower triangle, built from trg so it lives where trg lives
            L = trg.shape[1]
            trg_mask = torch.ones(L, L, device=trg.device).tril().expand(1, 1, L, L)

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
    name="b_gen_right_own_masks",
)

# ============================================================== ch06_own_model
# ---------------------------------------------------------- own_model

wrong(
    "ch06_own_model",
    "own_model",
    "the decoder blocks get no source padding mask (cross-attention reads the source's padding)",
    '''
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
        """src [B, Ss], tgt_in [B, St] -> logits [B, St, V]."""
        mask = padding_mask(src, PAD)
        h = embed(src, self.src_emb, self.pe)
        for layer in self.enc_layers:
            h = layer(h, mask)
        y = embed(tgt_in, self.tgt_emb, self.pe)
        for layer in self.dec_layers:
            y = layer(y, h)          # the decoder has its own causal mask
        return self.out(y)


def batch_loss(model, src, tgt):
    """src [B, Ss], tgt [B, St] (BOS ... EOS, padded) -> scalar loss."""
    logits = model(src, tgt[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt[:, 1:].reshape(-1),
                           ignore_index=PAD)
''',
    name="b_own_decoder_no_src_mask",
)

wrong(
    "ch06_own_model",
    "own_model",
    "batch_loss counts the PAD labels (no ignore_index)",
    '''
PAD = 0


class OwnTransformer(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers):
        super().__init__()
        self.src_embed = nn.Embedding(vocab_size, d_model)
        self.tgt_embed = nn.Embedding(vocab_size, d_model)
        self.register_buffer("pe", sinusoidal_encoding(64, d_model))
        self.encoder = nn.ModuleList(
            EncoderBlock(d_model, n_heads, d_ff, dropout=0.0) for _ in range(n_layers)
        )
        self.decoder = nn.ModuleList(
            DecoderBlock(d_model, n_heads, d_ff, dropout=0.0) for _ in range(n_layers)
        )
        self.proj = nn.Linear(d_model, vocab_size)

    def forward(self, src, tgt_in):
        """src [B, Ss], tgt_in [B, St] -> logits [B, St, V]."""
        src_mask = padding_mask(src, PAD)
        memory = embed(src, self.src_embed, self.pe)
        for blk in self.encoder:
            memory = blk(memory, src_mask)
        x = embed(tgt_in, self.tgt_embed, self.pe)
        for blk in self.decoder:
            x = blk(x, memory, src_mask)
        return self.proj(x)


def batch_loss(model, src, tgt):
    """src [B, Ss], tgt [B, St] (BOS ... EOS, padded) -> scalar loss."""
    decoder_input = tgt[:, :-1]
    target = tgt[:, 1:]
    logits = model(src, decoder_input)
    V = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, V), target.reshape(-1))
''',
    name="b_own_loss_counts_pad",
)

wrong(
    "ch06_own_model",
    "own_model",
    "encoder and decoder blocks kept in plain Python lists: their weights are not registered (the optimizer never sees them, .to(device) misses them)",
    '''
PAD = 0


class OwnTransformer(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers):
        super().__init__()
        self.src_embed = nn.Embedding(vocab_size, d_model)
        self.tgt_embed = nn.Embedding(vocab_size, d_model)
        self.register_buffer("pe", sinusoidal_encoding(64, d_model))
        self.encoder_blocks = [EncoderBlock(d_model, n_heads, d_ff, dropout=0.0) for _ in range(n_layers)]
        self.decoder_blocks = [DecoderBlock(d_model, n_heads, d_ff, dropout=0.0) for _ in range(n_layers)]
        self.fc_out = nn.Linear(d_model, vocab_size)

    def forward(self, src, tgt_in):
        """src [B, Ss], tgt_in [B, St] -> logits [B, St, V]."""
        src_mask = padding_mask(src, PAD)
        enc = embed(src, self.src_embed, self.pe)
        for block in self.encoder_blocks:
            enc = block(enc, src_mask)
        dec = embed(tgt_in, self.tgt_embed, self.pe)
        for block in self.decoder_blocks:
            dec = block(dec, enc, src_mask)
        return self.fc_out(dec)


def batch_loss(model, src, tgt):
    """src [B, Ss], tgt [B, St] (BOS ... EOS, padded) -> scalar loss."""
    tgt_in, labels = tgt[:, :-1], tgt[:, 1:]
    logits = model(src, tgt_in)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1), ignore_index=PAD)
''',
    name="b_own_plain_list_blocks",
)

wrong(
    "ch06_own_model",
    "own_model",
    "batch_loss has no teacher-forcing shift: the decoder reads tgt[:, :-1] and the labels are also tgt[:, :-1] (it learns to copy its input)",
    '''
PAD = 0


class OwnTransformer(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers):
        super().__init__()
        self.src_embed = nn.Embedding(vocab_size, d_model)
        self.tgt_embed = nn.Embedding(vocab_size, d_model)
        self.register_buffer("pe", sinusoidal_encoding(64, d_model))
        self.encoder = nn.ModuleList(
            EncoderBlock(d_model, n_heads, d_ff, dropout=0.0) for _ in range(n_layers)
        )
        self.decoder = nn.ModuleList(
            DecoderBlock(d_model, n_heads, d_ff, dropout=0.0) for _ in range(n_layers)
        )
        self.generator = nn.Linear(d_model, vocab_size)

    def forward(self, src, tgt_in):
        """src [B, Ss], tgt_in [B, St] -> logits [B, St, V]."""
        src_mask = padding_mask(src, PAD)
        memory = embed(src, self.src_embed, self.pe)
        for block in self.encoder:
            memory = block(memory, src_mask)
        x = embed(tgt_in, self.tgt_embed, self.pe)
        for block in self.decoder:
            x = block(x, memory, src_mask)
        return self.generator(x)


def batch_loss(model, src, tgt):
    """src [B, Ss], tgt [B, St] (BOS ... EOS, padded) -> scalar loss."""
    inp = tgt[:, :-1]
    logits = model(src, inp)                        # [B, St-1, V]
    return F.cross_entropy(logits.permute(0, 2, 1), inp, ignore_index=PAD)
''',
    name="b_own_loss_no_shift",
)

right(
    "ch06_own_model",
    "own_model",
    '''
PAD = 0


class OwnTransformer(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers):
        super().__init__()
        self.d_model = d_model
        self.embeddings = nn.ModuleDict(
            {"src": nn.Embedding(vocab_size, d_model), "tgt": nn.Embedding(vocab_size, d_model)}
        )
        self.register_buffer("pe", sinusoidal_encoding(64, d_model))
        self.enc = nn.ModuleList()
        self.dec = nn.ModuleList()
        for _ in range(n_layers):
            self.enc.append(EncoderBlock(d_model, n_heads, d_ff, dropout=0.0))
            self.dec.append(DecoderBlock(d_model, n_heads, d_ff, dropout=0.0))
        self.to_vocab = nn.Linear(d_model, vocab_size)

    def encode(self, src):
        keep = padding_mask(src, PAD)
        h = embed(src, self.embeddings["src"], self.pe)
        for block in self.enc:
            h = block(h, keep)
        return h, keep

    def decode(self, tgt_in, memory, keep):
        y = embed(tgt_in, self.embeddings["tgt"], self.pe)
        for block in self.dec:
            y = block(y, memory, keep)
        return self.to_vocab(y)

    def forward(self, src, tgt_in):
        """src [B, Ss], tgt_in [B, St] -> logits [B, St, V]."""
        memory, keep = self.encode(src)
        return self.decode(tgt_in, memory, keep)


def batch_loss(model, src, tgt):
    """src [B, Ss], tgt [B, St] (BOS ... EOS, padded) -> scalar loss."""
    logits = model(src, tgt[:, :-1])
    logp = torch.log_softmax(logits, dim=-1)
    labels = tgt[:, 1:]
    nll = -logp.gather(2, labels.unsqueeze(2)).squeeze(2)    # [B, St-1]
    real = labels != PAD
    return nll[real].mean()
''',
    name="b_own_right_encode_decode_gather",
)

# ============================================================== ch07_scale
# ---------------------------------------------------------- accumulation_step

wrong(
    "ch07_scale",
    "accumulation_step",
    "mean of micro-batch means: each loss_sum divided by its own n_tokens and by k (unequal token counts weigh tokens unequally)",
    '''
def accumulation_step(model, micro_batches, optimizer, scheduler, loss_fn):
    """One optimizer step from ``micro_batches``, equal to one step on their
    concatenation."""
    optimizer.zero_grad()
    k = len(micro_batches)
    for mb in micro_batches:
        loss_sum, n_tok = loss_fn(model, mb)
        loss = loss_sum / n_tok / k      # average over the accumulation steps
        loss.backward()
    optimizer.step()
    scheduler.step()
''',
    name="b_acc_mean_of_means",
)

wrong(
    "ch07_scale",
    "accumulation_step",
    "zero_grad inside the loop: every micro-batch wipes the previous gradients, only the last one counts",
    '''
def accumulation_step(model, micro_batches, optimizer, scheduler, loss_fn):
    """One optimizer step from ``micro_batches``, equal to one step on their
    concatenation."""
    total = sum(count_targets(b) for b in micro_batches)
    for batch in micro_batches:
        optimizer.zero_grad()
        loss_sum, _ = loss_fn(model, batch)
        (loss_sum / total).backward()
    optimizer.step()
    scheduler.step()
''',
    name="b_acc_zero_grad_in_loop",
)

wrong(
    "ch07_scale",
    "accumulation_step",
    "each micro-batch's mean loss is backpropagated without dividing by k: the gradient is the sum of the micro-batch means (about k times too big)",
    '''
def accumulation_step(model, micro_batches, optimizer, scheduler, loss_fn):
    """One optimizer step from ``micro_batches``, equal to one step on their
    concatenation."""
    optimizer.zero_grad()
    for batch in micro_batches:
        loss_sum, n_tokens = loss_fn(model, batch)
        mean_loss = loss_sum / max(n_tokens, 1)
        mean_loss.backward()  # gradients add up across micro-batches
    optimizer.step()
    scheduler.step()
''',
    name="b_acc_sum_of_means",
)

wrong(
    "ch07_scale",
    "accumulation_step",
    "optimizer.step() and scheduler.step() inside the loop: one update per micro-batch instead of one per call",
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
    "scheduler.step() before optimizer.step(): the update uses the next learning rate",
    '''
def accumulation_step(model, micro_batches, optimizer, scheduler, loss_fn):
    """One optimizer step from ``micro_batches``, equal to one step on their
    concatenation."""
    optimizer.zero_grad()
    n_total = sum(count_targets(mb) for mb in micro_batches)
    for mb in micro_batches:
        s, _ = loss_fn(model, mb)
        (s / n_total).backward()
    scheduler.step()
    optimizer.step()
''',
    name="b_acc_scheduler_before_step",
)

wrong(
    "ch07_scale",
    "accumulation_step",
    "divides each micro-batch's summed loss by the number of rows of all micro-batches (sequences) instead of the number of target tokens",
    '''
def accumulation_step(model, micro_batches, optimizer, scheduler, loss_fn):
    """One optimizer step from ``micro_batches``, equal to one step on their
    concatenation."""
    optimizer.zero_grad()
    n_rows = sum(mb.size(0) for mb in micro_batches)
    for mb in micro_batches:
        loss_sum, _ = loss_fn(model, mb)
        (loss_sum / n_rows).backward()
    optimizer.step()
    scheduler.step()
''',
    name="b_acc_divide_by_rows",
)

right(
    "ch07_scale",
    "accumulation_step",
    '''
def accumulation_step(model, micro_batches, optimizer, scheduler, loss_fn):
    """One optimizer step from ``micro_batches``, equal to one step on their
    concatenation."""
    batches = list(micro_batches)
    counts = [count_targets(b) for b in batches]
    weight = 1.0 / sum(counts)
    model.zero_grad(set_to_none=True)
    for b in batches:
        token_loss_sum, _ = loss_fn(model, b)
        (token_loss_sum * weight).backward()
    optimizer.step()
    scheduler.step()
''',
    name="b_acc_right_model_zero_grad_weight",
)

# ---------------------------------------------------------- amp_step

wrong(
    "ch07_scale",
    "amp_step",
    "no scaler.unscale_ before clipping: clip_grad_norm_ clips the scaled gradients (to max_norm / scale)",
    '''
def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm):
    """One mixed-precision training step; returns the loss."""
    dev = next(model.parameters()).device.type
    dt = torch.float16 if dev == "cuda" else torch.bfloat16
    optimizer.zero_grad()
    with torch.amp.autocast(device_type=dev, dtype=dt):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.item()
''',
    name="b_amp_no_unscale",
)

wrong(
    "ch07_scale",
    "amp_step",
    "optimizer.step() instead of scaler.step(optimizer): steps even on overflow (and with unscaled grads only because of unscale_)",
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
    "scaler.update() before scaler.step(optimizer) (wrong order of the last two calls)",
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
    "autocast hard-coded to float16 on every device (the CPU should use bfloat16)",
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
    name="b_amp_fp16_everywhere",
)

wrong(
    "ch07_scale",
    "amp_step",
    "creates a new GradScaler inside the step instead of using the one passed in (its scale and skip bookkeeping never persist)",
    '''
def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm):
    """One mixed-precision training step; returns the loss."""
    device_type = next(model.parameters()).device.type
    dtype = torch.float16 if device_type == "cuda" else torch.bfloat16
    scaler = torch.amp.GradScaler(device_type)
    optimizer.zero_grad()
    with torch.amp.autocast(device_type, dtype=dtype):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()
''',
    name="b_amp_new_scaler",
)

right(
    "ch07_scale",
    "amp_step",
    '''
def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm):
    """One mixed-precision training step; returns the loss."""
    params = list(model.parameters())
    kind = params[0].device.type
    half = {"cuda": torch.float16}.get(kind, torch.bfloat16)
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device_type=kind, dtype=half):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)                      # true-sized gradients first
    torch.nn.utils.clip_grad_norm_(params, max_norm=max_norm)
    scaler.step(optimizer)
    scaler.update()
    return float(loss)
''',
    name="b_amp_right_dict_dtype",
)

# ---------------------------------------------------------- make_loader

wrong(
    "ch07_scale",
    "make_loader",
    "never calls sampler.set_epoch(epoch): every epoch has the same order and the same split",
    '''
def make_loader(dataset, rank, world_size, epoch, batch_size):
    """The DataLoader process ``rank`` of ``world_size`` iterates in epoch ``epoch``."""
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)
''',
    name="b_loader_no_set_epoch",
)

wrong(
    "ch07_scale",
    "make_loader",
    "seeds the sampler with the rank (seed=rank): the ranks shuffle differently, so their shares overlap and some samples are never read",
    '''
def make_loader(dataset, rank, world_size, epoch, batch_size):
    """The DataLoader process ``rank`` of ``world_size`` iterates in epoch ``epoch``."""
    # each process gets its own seed so they see different data
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank,
                                 shuffle=True, seed=rank)
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)
''',
    name="b_loader_seed_rank",
)

wrong(
    "ch07_scale",
    "make_loader",
    "batch_size multiplied by world_size (treats batch_size as the global batch the wrong way round)",
    '''
def make_loader(dataset, rank, world_size, epoch, batch_size):
    """The DataLoader process ``rank`` of ``world_size`` iterates in epoch ``epoch``."""
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, seed=0)
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size * world_size, sampler=sampler)
''',
    name="b_loader_batch_times_world",
)

wrong(
    "ch07_scale",
    "make_loader",
    "shuffle=False in the sampler: set_epoch changes nothing, the order is never shuffled",
    '''
def make_loader(dataset, rank, world_size, epoch, batch_size):
    """The DataLoader process ``rank`` of ``world_size`` iterates in epoch ``epoch``."""
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=False)
    sampler.set_epoch(epoch)
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler, shuffle=False)
    return loader
''',
    name="b_loader_no_shuffle",
)

wrong(
    "ch07_scale",
    "make_loader",
    "contiguous shard per rank with a shuffle seeded by the epoch only inside the shard: each rank always reads the same samples",
    '''
def make_loader(dataset, rank, world_size, epoch, batch_size):
    """The DataLoader process ``rank`` of ``world_size`` iterates in epoch ``epoch``."""
    n = len(dataset)
    per_rank = (n + world_size - 1) // world_size
    shard = list(range(rank * per_rank, min(n, (rank + 1) * per_rank)))
    g = torch.Generator().manual_seed(epoch)
    order = [shard[i] for i in torch.randperm(len(shard), generator=g).tolist()]
    return DataLoader(torch.utils.data.Subset(dataset, order), batch_size=batch_size)
''',
    name="b_loader_fixed_contiguous_shard",
)

right(
    "ch07_scale",
    "make_loader",
    '''
def make_loader(dataset, rank, world_size, epoch, batch_size):
    """The DataLoader process ``rank`` of ``world_size`` iterates in epoch ``epoch``."""
    # the same permutation on every rank (seeded by the epoch), then every world_size-th
    # index from position rank; repeat a few indices so every rank gets as many
    n = len(dataset)
    g = torch.Generator()
    g.manual_seed(1234 + epoch)
    perm = torch.randperm(n, generator=g).tolist()
    per_rank = -(-n // world_size)
    perm += perm[: per_rank * world_size - n]
    mine = perm[rank::world_size]
    return DataLoader(dataset, batch_size=batch_size, sampler=mine)
''',
    name="b_loader_right_manual_perm",
)

right(
    "ch07_scale",
    "make_loader",
    '''
def make_loader(dataset, rank, world_size, epoch, batch_size):
    """The DataLoader process ``rank`` of ``world_size`` iterates in epoch ``epoch``."""
    sampler = DistributedSampler(dataset, world_size, rank, True, 42, drop_last=True)
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size, sampler=sampler, drop_last=False)
''',
    name="b_loader_right_positional_drop_last",
)

# ============================================================== ch08_generation
# ---------------------------------------------------------- next_token_probs

wrong(
    "ch08_generation",
    "next_token_probs",
    "temperature applied after the softmax (probabilities divided by T, then renormalised): the temperature has no effect",
    '''
def next_token_probs(logits, temperature, top_p):
    """logits [B, V] -> probs [B, V]: temperature, then top-p, then renormalised."""
    probs = torch.softmax(logits, dim=-1)
    probs = probs / temperature
    probs = probs / probs.sum(-1, keepdim=True)
    sorted_p, idx = torch.sort(probs, dim=-1, descending=True)
    cum = torch.cumsum(sorted_p, dim=-1)
    remove = cum - sorted_p >= top_p
    sorted_p = sorted_p.masked_fill(remove, 0.0)
    out = torch.zeros_like(probs).scatter(-1, idx, sorted_p)
    return out / out.sum(-1, keepdim=True)
''',
    name="b_topp_temperature_after_softmax",
)

wrong(
    "ch08_generation",
    "next_token_probs",
    "keeps only tokens whose cumulative probability is <= top_p (plus the first): the token that crosses top_p is dropped",
    '''
def next_token_probs(logits, temperature, top_p):
    """logits [B, V] -> probs [B, V]: temperature, then top-p, then renormalised."""
    probs = torch.softmax(logits / temperature, dim=-1)
    sorted_probs, sorted_idx = probs.sort(dim=-1, descending=True)
    cumulative = sorted_probs.cumsum(dim=-1)
    keep_sorted = cumulative <= top_p
    keep_sorted[:, 0] = True  # always keep the best token
    keep = torch.zeros_like(keep_sorted)
    keep.scatter_(1, sorted_idx, keep_sorted)
    probs = probs * keep
    return probs / probs.sum(dim=-1, keepdim=True)
''',
    name="b_topp_drops_crossing_token",
)

wrong(
    "ch08_generation",
    "next_token_probs",
    "top-p set chosen from the temperature-1 probabilities (before dividing by T), then the temperature applied to the kept logits",
    '''
def next_token_probs(logits, temperature, top_p):
    """logits [B, V] -> probs [B, V]: temperature, then top-p, then renormalised."""
    p = logits.softmax(-1)
    sp, order = p.sort(-1, descending=True)
    keep_sorted = (sp.cumsum(-1) - sp) < top_p
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    scaled = logits / temperature
    return scaled.masked_fill(~keep, float("-inf")).softmax(-1)
''',
    name="b_topp_nucleus_at_t1",
)

wrong(
    "ch08_generation",
    "next_token_probs",
    "no renormalisation: the kept tokens keep their original probabilities, rows sum to less than 1",
    '''
def next_token_probs(logits, temperature, top_p):
    """logits [B, V] -> probs [B, V]: temperature, then top-p, then renormalised."""
    probs = (logits / temperature).softmax(dim=-1)
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    above = sorted_probs.cumsum(dim=-1) - sorted_probs
    keep_sorted = above < top_p
    keep = keep_sorted.gather(-1, order.argsort(dim=-1))
    return probs * keep
''',
    name="b_topp_no_renormalise",
)

wrong(
    "ch08_generation",
    "next_token_probs",
    "the keep mask computed in sorted order is applied to the unsorted vocabulary (never scattered back)",
    '''
def next_token_probs(logits, temperature, top_p):
    """logits [B, V] -> probs [B, V]: temperature, then top-p, then renormalised."""
    logits = logits / temperature
    probs = logits.softmax(dim=-1)
    sorted_probs, _ = probs.sort(dim=-1, descending=True)
    keep = (sorted_probs.cumsum(dim=-1) - sorted_probs) < top_p
    logits = logits.masked_fill(~keep, float("-inf"))
    return logits.softmax(dim=-1)
''',
    name="b_topp_mask_not_unsorted",
)

wrong(
    "ch08_generation",
    "next_token_probs",
    "logits multiplied by the temperature instead of divided",
    '''
def next_token_probs(logits, temperature, top_p):
    """logits [B, V] -> probs [B, V]: temperature, then top-p, then renormalised."""
    z = logits * temperature
    probs = torch.softmax(z, dim=-1)
    sp, si = torch.sort(probs, descending=True, dim=-1)
    csum = torch.cumsum(sp, dim=-1)
    mask_sorted = (csum - sp) >= top_p           # tokens after the nucleus
    mask = mask_sorted.scatter(-1, si, mask_sorted)
    z = z.masked_fill(mask, float("-inf"))
    return torch.softmax(z, dim=-1)
''',
    name="b_topp_multiply_temperature",
)

right(
    "ch08_generation",
    "next_token_probs",
    '''
def next_token_probs(logits, temperature, top_p):
    """logits [B, V] -> probs [B, V]: temperature, then top-p, then renormalised."""
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_p >= 1:
        return probs
    out = torch.zeros_like(probs)
    for b in range(probs.size(0)):          # one row at a time, like by hand
        row = probs[b]
        order = torch.argsort(row, descending=True)
        total = 0.0
        kept = []
        for j in order.tolist():
            kept.append(j)
            total += row[j].item()
            if total >= top_p:
                break
        kept = torch.tensor(kept, device=probs.device)
        out[b, kept] = row[kept] / row[kept].sum()
    return out
''',
    name="b_topp_right_row_loop",
)

# ---------------------------------------------------------- lm_step

wrong(
    "ch08_generation",
    "lm_step",
    "positions restart at 0 on every step (model.pos(x) without start=T)",
    '''
def lm_step(model, tokens, cache):
    """tokens [B, S] after the cache.length cached ones -> logits [B, S, V]."""
    T = cache.length
    S = tokens.size(1)
    mask = causal_mask(S, tokens.device, past=T)
    h = model.tok_embed(tokens) * math.sqrt(model.d_model)
    h = model.dropout(model.pos(h))
    for i, layer in enumerate(model.blocks.layers):
        h = layer(h, mask, cache.layer(i))
    h = model.blocks.norm(h)
    return model.lm_head(h)
''',
    name="b_lm_positions_from_zero",
)

wrong(
    "ch08_generation",
    "lm_step",
    "mask built as causal_mask(S) without past=T: [1, 1, S, S] does not cover the cached keys (raises once the cache is non-empty)",
    '''
def lm_step(model, tokens, cache):
    """tokens [B, S] after the cache.length cached ones -> logits [B, S, V]."""
    past = cache.length
    mask = causal_mask(tokens.size(1), tokens.device)
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past))
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))
''',
    name="b_lm_mask_no_past",
)

wrong(
    "ch08_generation",
    "lm_step",
    "reads cache.length again inside the block loop: after block 0 appends, block 1's mask and position offset use T+S",
    '''
def lm_step(model, tokens, cache):
    """tokens [B, S] after the cache.length cached ones -> logits [B, S, V]."""
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=cache.length))
    for i, block in enumerate(model.blocks.layers):
        mask = causal_mask(tokens.size(1), tokens.device, past=cache.length)
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))
''',
    name="b_lm_length_reread_per_block",
)

wrong(
    "ch08_generation",
    "lm_step",
    "token embeddings not scaled by sqrt(d_model)",
    '''
def lm_step(model, tokens, cache):
    """tokens [B, S] after the cache.length cached ones -> logits [B, S, V]."""
    past = cache.length
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    x = model.tok_embed(tokens)
    x = model.pos(x, start=past)
    x = model.dropout(x)
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))
''',
    name="b_lm_no_sqrt_scale",
)

wrong(
    "ch08_generation",
    "lm_step",
    "skips the final model.blocks.norm before the lm_head",
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
    "all-True mask [1, 1, S, T+S]: new tokens attend to later new tokens (no causality within a multi-token step)",
    '''
def lm_step(model, tokens, cache):
    """tokens [B, S] after the cache.length cached ones -> logits [B, S, V]."""
    T, S = cache.length, tokens.size(1)
    # the cache only holds the past, so everything may be attended to
    mask = torch.ones(1, 1, S, T + S, dtype=torch.bool, device=tokens.device)
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=T))
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))
''',
    name="b_lm_mask_all_true",
)

wrong(
    "ch08_generation",
    "lm_step",
    "every block is given cache.layer(0): all layers append to and read the same layer cache",
    '''
def lm_step(model, tokens, cache):
    """tokens [B, S] after the cache.length cached ones -> logits [B, S, V]."""
    past = cache.length
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    kv = cache.layer(0)
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=past))
    for block in model.blocks.layers:
        x = block(x, mask, kv)
    return model.lm_head(model.blocks.norm(x))
''',
    name="b_lm_one_layer_cache",
)

right(
    "ch08_generation",
    "lm_step",
    '''
def lm_step(model, tokens, cache):
    """tokens [B, S] after the cache.length cached ones -> logits [B, S, V]."""
    n_past = cache.length
    n_new = tokens.shape[-1]
    q_pos = torch.arange(n_new, device=tokens.device)[:, None] + n_past   # [S, 1]
    k_pos = torch.arange(n_past + n_new, device=tokens.device)[None, :]   # [1, T+S]
    keep = (k_pos <= q_pos)[None, None]                                    # [1, 1, S, T+S]
    h = model.tok_embed(tokens).mul(model.d_model ** 0.5)
    h = model.dropout(model.pos(h, start=n_past))
    layers = model.blocks.layers
    for i in range(len(layers)):
        h = layers[i](h, keep, cache.layer(i))
    h = model.blocks.norm(h)
    return model.lm_head(h)
''',
    name="b_lm_right_arange_mask",
)

# ---------------------------------------------------------- generate_greedy

wrong(
    "ch08_generation",
    "generate_greedy",
    "the KVCache is a default argument created once: it survives from one call to the next",
    '''
def generate_greedy(model, prompt, max_new_tokens, cache=KVCache()):
    """prompt [B, S] -> [B, S + max_new_tokens]: greedy, with a fresh KV cache."""
    out = prompt
    feed = prompt
    for _ in range(max_new_tokens):
        logits = lm_step(model, feed, cache)
        feed = logits[:, -1, :].argmax(-1, keepdim=True)
        out = torch.cat([out, feed], dim=1)
    return out
''',
    name="b_gen_cache_default_arg",
)

wrong(
    "ch08_generation",
    "generate_greedy",
    "feeds the whole sequence so far to lm_step at every step although the cache already holds it (tokens go through the model again)",
    '''
def generate_greedy(model, prompt, max_new_tokens):
    """prompt [B, S] -> [B, S + max_new_tokens]: greedy, with a fresh KV cache."""
    cache = KVCache()
    seq = prompt
    for _ in range(max_new_tokens):
        logits = lm_step(model, seq, cache)
        nxt = logits[:, -1].argmax(dim=-1, keepdim=True)
        seq = torch.cat([seq, nxt], dim=1)
    return seq
''',
    name="b_gen_refeeds_whole_sequence",
)

wrong(
    "ch08_generation",
    "generate_greedy",
    "runs the prompt and appends its token before the loop, then loops max_new_tokens times: N+1 new tokens",
    '''
def generate_greedy(model, prompt, max_new_tokens):
    """prompt [B, S] -> [B, S + max_new_tokens]: greedy, with a fresh KV cache."""
    cache = KVCache()
    logits = lm_step(model, prompt, cache)
    nxt = logits[:, -1].argmax(-1, keepdim=True)
    out = torch.cat([prompt, nxt], dim=1)
    for _ in range(max_new_tokens):
        logits = lm_step(model, nxt, cache)
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        out = torch.cat([out, nxt], dim=1)
    return out
''',
    name="b_gen_one_token_too_many",
)

wrong(
    "ch08_generation",
    "generate_greedy",
    "argmax without keepdim: feeds a [B] tensor to lm_step (raises: tokens must be [B, S])",
    '''
def generate_greedy(model, prompt, max_new_tokens):
    """prompt [B, S] -> [B, S + max_new_tokens]: greedy, with a fresh KV cache."""
    cache = KVCache()
    tokens = prompt
    x = prompt
    for _ in range(max_new_tokens):
        logits = lm_step(model, x, cache)
        x = logits[:, -1].argmax(dim=-1)
        tokens = torch.cat([tokens, x.unsqueeze(1)], dim=1)
    return tokens
''',
    name="b_gen_argmax_no_keepdim",
)

wrong(
    "ch08_generation",
    "generate_greedy",
    "takes the argmax of the first position of the logits (logits[:, 0]) instead of the last: after the prompt step the wrong token is chosen",
    '''
def generate_greedy(model, prompt, max_new_tokens):
    """prompt [B, S] -> [B, S + max_new_tokens]: greedy, with a fresh KV cache."""
    cache = KVCache()
    result, inp = prompt, prompt
    for _ in range(max_new_tokens):
        logits = lm_step(model, inp, cache)
        inp = logits[:, 0].argmax(dim=-1, keepdim=True)
        result = torch.cat([result, inp], dim=1)
    return result
''',
    name="b_gen_argmax_first_position",
)

right(
    "ch08_generation",
    "generate_greedy",
    '''
def generate_greedy(model, prompt, max_new_tokens):
    """prompt [B, S] -> [B, S + max_new_tokens]: greedy, with a fresh KV cache."""
    B, S = prompt.shape
    out = torch.empty(B, S + max_new_tokens, dtype=prompt.dtype, device=prompt.device)
    out[:, :S] = prompt
    kv = KVCache()
    with torch.no_grad():
        step_in = prompt
        for t in range(S, S + max_new_tokens):
            last = lm_step(model, step_in, kv)[:, -1, :]      # [B, V]
            out[:, t] = torch.argmax(last, dim=-1)
            step_in = out[:, t : t + 1]
    return out
''',
    name="b_gen_right_prealloc",
)
