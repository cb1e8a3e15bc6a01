from harness import right, wrong

# ============================================================ ch05_model

# unlisted
wrong(
    "ch05_model",
    "sinusoidal_encoding",
    "the cosine columns use their own column index in the exponent, pos / 10000^((2i+1)/D), "
    "instead of sharing the frequency 10000^(2i/D) of the sine column before them",
    '''
def sinusoidal_encoding(n_positions, d_model):
    """-> [n_positions, d_model]."""
    pe = torch.zeros(n_positions, d_model)
    for pos in range(n_positions):
        for i in range(0, d_model, 2):
            pe[pos, i] = math.sin(pos / (10000 ** (i / d_model)))
            # odd column: cos with the next index
            pe[pos, i + 1] = math.cos(pos / (10000 ** ((i + 1) / d_model)))
    return pe
''',
    name="sinusoidal_encoding_odd_exponent",
)

# unlisted
wrong(
    "ch05_model",
    "sinusoidal_encoding",
    "the exponents come from torch.linspace(0, 1, D/2), i.e. 2i/(D-2) instead of 2i/D: "
    "every frequency but the first is slightly too low (the last pair gets exactly 1/10000)",
    '''
def sinusoidal_encoding(n_positions, d_model):
    """-> [n_positions, d_model]."""
    # exponent goes from 0 up to 1 over the pairs
    expo = torch.linspace(0, 1, d_model // 2)
    freqs = 1.0 / (10000 ** expo)
    pos = torch.arange(n_positions).float().unsqueeze(1)
    angles = pos * freqs.unsqueeze(0)          # [N, D/2]
    pe = torch.zeros(n_positions, d_model)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles)
    return pe
''',
    name="sinusoidal_encoding_linspace_exponent",
)

# unlisted
wrong(
    "ch05_model",
    "sinusoidal_encoding",
    "d_model is hard-coded as 512 in the frequency exponent (10000^(2i/512)), so the table is "
    "right only for d_model = 512",
    '''
def sinusoidal_encoding(n_positions, d_model):
    """-> [n_positions, d_model]."""
    position = torch.arange(0, n_positions, dtype=torch.float32).unsqueeze(1)
    div_term = torch.pow(10000.0, torch.arange(0, d_model, 2).float() / 512)  # paper uses d_model=512
    pe = torch.zeros(n_positions, d_model)
    pe[:, 0::2] = torch.sin(position / div_term)
    pe[:, 1::2] = torch.cos(position / div_term)
    return pe
''',
    name="sinusoidal_encoding_hardcoded_512",
)

# listed
wrong(
    "ch05_model",
    "sinusoidal_encoding",
    "sines and cosines swapped: cosines in the even columns, sines in the odd ones "
    "(row 0 comes out [1, 0, 1, 0, ...])",
    '''
def sinusoidal_encoding(n_positions, d_model):
    """-> [n_positions, d_model]."""
    pos = torch.arange(n_positions, dtype=torch.float64)[:, None]
    i2 = torch.arange(0, d_model, 2, dtype=torch.float64)
    angle = pos / 10000 ** (i2 / d_model)
    pe = torch.empty(n_positions, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.cos(angle)
    pe[:, 1::2] = torch.sin(angle)
    return pe
''',
    name="sinusoidal_encoding_cos_sin_swapped",
)

right(
    "ch05_model",
    "sinusoidal_encoding",
    '''
def sinusoidal_encoding(n_positions, d_model):
    """-> [n_positions, d_model]."""
    # frequencies via exp/log, then interleave sin and cos with stack + flatten
    k = torch.arange(d_model // 2, dtype=torch.float64)
    omega = torch.exp(-(2 * k / d_model) * math.log(10000.0))     # [D/2]
    t = torch.arange(n_positions, dtype=torch.float64).unsqueeze(-1) * omega   # [N, D/2]
    table = torch.stack((t.sin(), t.cos()), dim=-1)                # [N, D/2, 2]
    return table.reshape(n_positions, d_model).to(torch.float32)
''',
    name="sinusoidal_encoding_stack_interleave",
)

# listed
wrong(
    "ch05_model",
    "embed",
    "the token embeddings are not multiplied by sqrt(d_model) before the positions are added",
    '''
def embed(tokens, table, pe):
    """tokens [B, S] long, table nn.Embedding(V, D), pe [max_len, D] -> [B, S, D]."""
    seq_len = tokens.shape[1]
    return table(tokens) + pe[:seq_len]
''',
    name="embed_no_scale",
)

# unlisted
wrong(
    "ch05_model",
    "embed",
    "the sqrt(d_model) factor multiplies the sum (token embedding + position) instead of the "
    "token embedding alone, so the positions are scaled too",
    '''
def embed(tokens, table, pe):
    """tokens [B, S] long, table nn.Embedding(V, D), pe [max_len, D] -> [B, S, D]."""
    d = table.embedding_dim
    x = table(tokens) + pe[: tokens.size(1)]
    return x * math.sqrt(d)
''',
    name="embed_scale_after_adding_positions",
)

# unlisted
wrong(
    "ch05_model",
    "embed",
    "slices the positional table with the batch size (pe[:tokens.size(0)]) instead of the "
    "sequence length: wrong rows (or a shape error) whenever B != S",
    '''
def embed(tokens, table, pe):
    """tokens [B, S] long, table nn.Embedding(V, D), pe [max_len, D] -> [B, S, D]."""
    emb = table(tokens) * math.sqrt(table.embedding_dim)
    n = tokens.size(0)   # number of positions
    return emb + pe[:n]
''',
    name="embed_pe_sliced_by_batch",
)

# unlisted
wrong(
    "ch05_model",
    "embed",
    "scales the embeddings by sqrt of the vocabulary size (table.num_embeddings) instead of "
    "sqrt(d_model)",
    '''
def embed(tokens, table, pe):
    """tokens [B, S] long, table nn.Embedding(V, D), pe [max_len, D] -> [B, S, D]."""
    scale = math.sqrt(table.num_embeddings)
    S = tokens.shape[-1]
    return table(tokens) * scale + pe[:S, :]
''',
    name="embed_scale_sqrt_vocab",
)

right(
    "ch05_model",
    "embed",
    '''
def embed(tokens, table, pe):
    """tokens [B, S] long, table nn.Embedding(V, D), pe [max_len, D] -> [B, S, D]."""
    B, S = tokens.shape
    D = table.weight.shape[1]
    vecs = table.weight[tokens] * D ** 0.5        # same as table(tokens), scaled
    return vecs + pe[:S].unsqueeze(0)
''',
    name="embed_weight_indexing",
)

# unlisted
wrong(
    "ch05_model",
    "decoder_block",
    "causal mask off by one: built with tril(diagonal=1), so position i also attends to "
    "position i+1 (one step of the future)",
    """
class DecoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))
        self.ln1 = nn.LayerNorm(d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.ln3 = nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        T = x.size(1)
        # lower triangle, diagonal included
        causal = torch.tril(torch.ones(T, T, device=x.device), diagonal=1).bool()
        causal = causal.unsqueeze(0).unsqueeze(0)
        x = self.ln1(x + self.drop(self.self_attn(x, x, x, mask=causal)))
        x = self.ln2(x + self.drop(self.cross_attn(x, memory, memory, mask=src_mask)))
        x = self.ln3(x + self.drop(self.ff(x)))
        return x
""",
    name="decoder_block_causal_off_by_one",
)

# unlisted
wrong(
    "ch05_model",
    "decoder_block",
    "the cross-attention sublayer's residual adds the block's original input x instead of the "
    "output of the self-attention sublayer (the self-attention result only reaches the "
    "cross-attention's query)",
    """
class DecoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.masked_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.enc_dec_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.fc1 = nn.Linear(d_model, d_ff)
        self.fc2 = nn.Linear(d_ff, d_model)
        self.norms = nn.ModuleList([nn.LayerNorm(d_model) for _ in range(3)])
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        n = x.shape[1]
        mask = torch.ones(n, n, dtype=torch.bool, device=x.device).tril().view(1, 1, n, n)
        h1 = self.norms[0](x + self.dropout(self.masked_attn(x, x, x, mask=mask)))
        h2 = self.norms[1](x + self.dropout(self.enc_dec_attn(h1, memory, memory, mask=src_mask)))
        ff = self.fc2(torch.relu(self.fc1(h2)))
        return self.norms[2](h2 + self.dropout(ff))
""",
    name="decoder_block_cross_residual_from_input",
)

# unlisted
wrong(
    "ch05_model",
    "decoder_block",
    "the feed-forward's hidden width is hard-coded to 4*d_model instead of the d_ff argument",
    """
class DecoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        hidden = 4 * d_model   # the paper's d_ff = 4 * d_model
        self.ff = nn.Sequential(nn.Linear(d_model, hidden), nn.ReLU(), nn.Linear(hidden, d_model))
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        L = x.size(1)
        causal = torch.tril(torch.ones(L, L, dtype=torch.bool, device=x.device))[None, None]
        a = self.self_attn(x, x, x, mask=causal)
        x = self.norm1(x + self.dropout(a))
        c = self.cross_attn(x, memory, memory, mask=src_mask)
        x = self.norm2(x + self.dropout(c))
        return self.norm3(x + self.dropout(self.ff(x)))
""",
    name="decoder_block_dff_hardcoded",
)

# listed
wrong(
    "ch05_model",
    "decoder_block",
    "cross-attention takes its keys and values from the decoder states x and only the query "
    "from memory (attn(memory, x, x)), instead of queries from the decoder and keys/values from memory",
    """
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
        st = x.size(1)
        causal = torch.ones(st, st, dtype=torch.bool, device=x.device).tril()[None, None]
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        # the encoder output asks, the decoder answers
        x = self.norm2(x + self.dropout(self.cross_attn(memory, x, x)))
        return self.norm3(x + self.dropout(self.ff(x)))
""",
    name="decoder_block_cross_attention_reversed",
)

right(
    "ch05_model",
    "decoder_block",
    """
class DecoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.attn_self = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.attn_mem = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.lin1 = nn.Linear(d_model, d_ff)
        self.lin2 = nn.Linear(d_ff, d_model)
        self.norms = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(3))
        self.drops = nn.ModuleList(nn.Dropout(dropout) for _ in range(3))

    def forward(self, x, memory, src_mask=None):
        n = x.size(1)
        i = torch.arange(n, device=x.device)
        causal = (i[None, :] <= i[:, None]).view(1, 1, n, n)   # key j <= query i
        out = x
        out = self.norms[0](out + self.drops[0](self.attn_self(out, out, out, mask=causal)))
        out = self.norms[1](out + self.drops[1](self.attn_mem(out, memory, memory, mask=src_mask)))
        hidden = F.relu(self.lin1(out))
        out = self.norms[2](out + self.drops[2](self.lin2(hidden)))
        return out
""",
    name="decoder_block_modulelists",
)

# ============================================================ ch06_training

# listed
wrong(
    "ch06_training",
    "shift_targets",
    "keeps the seed's sequence-first slices tgt[:-1, :] / tgt[1:, :], which on batch-first "
    "tensors drop the last / first sentence of the batch instead of a time step",
    '''
def shift_targets(tgt):
    """tgt [B, St] -> (decoder input [B, St-1], labels [B, St-1])."""
    tgt_in = tgt[:-1, :]
    labels = tgt[1:, :]
    return tgt_in, labels
''',
    name="shift_targets_sequence_first",
)

# unlisted
wrong(
    "ch06_training",
    "shift_targets",
    "replaces the PAD labels by -100 (PyTorch's default ignore_index) instead of keeping their "
    "ids: labels no longer equal tgt[:, 1:]",
    '''
def shift_targets(tgt):
    """tgt [B, St] -> (decoder input [B, St-1], labels [B, St-1])."""
    PAD = 0
    tgt_in = tgt[:, :-1]
    labels = tgt[:, 1:].clone()
    labels[labels == PAD] = -100   # so cross_entropy skips them
    return tgt_in, labels
''',
    name="shift_targets_pad_to_minus100",
)

# unlisted
wrong(
    "ch06_training",
    "shift_targets",
    "returns the labels flattened to [B*(St-1)] (ready for cross_entropy) instead of [B, St-1]",
    '''
def shift_targets(tgt):
    """tgt [B, St] -> (decoder input [B, St-1], labels [B, St-1])."""
    decoder_input = tgt[:, :-1]
    labels = tgt[:, 1:].contiguous().view(-1)
    return decoder_input, labels
''',
    name="shift_targets_flat_labels",
)

# unlisted
wrong(
    "ch06_training",
    "shift_targets",
    "replaces EOS by PAD in the decoder input ('the decoder should never read EOS'), which "
    "changes tgt_in for every row whose EOS is not in the last position",
    '''
def shift_targets(tgt):
    """tgt [B, St] -> (decoder input [B, St-1], labels [B, St-1])."""
    EOS, PAD = 2, 0
    tgt_in = tgt[:, :-1].masked_fill(tgt[:, :-1] == EOS, PAD)
    labels = tgt[:, 1:]
    return tgt_in, labels
''',
    name="shift_targets_eos_removed_from_input",
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
    name="shift_targets_narrow",
)

# listed
wrong(
    "ch06_training",
    "sequence_loss",
    "no ignore_index: the PAD labels are counted in the loss like real tokens",
    '''
def sequence_loss(logits, labels, pad_id, label_smoothing):
    """logits [B, St, V], labels [B, St] -> scalar."""
    V = logits.size(-1)
    return F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1),
                           label_smoothing=label_smoothing)
''',
    name="sequence_loss_counts_padding",
)

# unlisted
wrong(
    "ch06_training",
    "sequence_loss",
    "ignore_index is hard-coded to 0 instead of pad_id: wrong whenever pad_id != 0 "
    "(the real pad labels are counted and the real token 0 is dropped)",
    '''
def sequence_loss(logits, labels, pad_id, label_smoothing):
    """logits [B, St, V], labels [B, St] -> scalar."""
    flat_logits = logits.view(-1, logits.shape[-1])
    flat_labels = labels.view(-1)
    return F.cross_entropy(flat_logits, flat_labels, ignore_index=0,
                           label_smoothing=label_smoothing)
''',
    name="sequence_loss_ignore_index_zero",
)

# unlisted
wrong(
    "ch06_training",
    "sequence_loss",
    "the label_smoothing argument is never passed to cross_entropy: the loss is unsmoothed "
    "whatever epsilon is",
    '''
def sequence_loss(logits, labels, pad_id, label_smoothing):
    """logits [B, St, V], labels [B, St] -> scalar."""
    # flatten batch and time
    logits2d = logits.reshape(-1, logits.size(-1))
    return F.cross_entropy(logits2d, labels.reshape(-1), ignore_index=pad_id)
''',
    name="sequence_loss_smoothing_dropped",
)

# unlisted
wrong(
    "ch06_training",
    "sequence_loss",
    "applies softmax to the logits before F.cross_entropy (which applies log_softmax itself), "
    "so the loss is computed on probabilities as if they were logits",
    '''
def sequence_loss(logits, labels, pad_id, label_smoothing):
    """logits [B, St, V], labels [B, St] -> scalar."""
    probs = torch.softmax(logits, dim=-1)
    return F.cross_entropy(probs.reshape(-1, probs.size(-1)), labels.reshape(-1),
                           ignore_index=pad_id, label_smoothing=label_smoothing)
''',
    name="sequence_loss_softmax_first",
)

# listed
wrong(
    "ch06_training",
    "sequence_loss",
    "averages per sequence first, then over the sequences (a mean of per-sentence means), "
    "instead of one mean over all real tokens",
    '''
def sequence_loss(logits, labels, pad_id, label_smoothing):
    """logits [B, St, V], labels [B, St] -> scalar."""
    B, St, V = logits.shape
    tok = F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1), ignore_index=pad_id,
                          label_smoothing=label_smoothing, reduction="none").view(B, St)
    real = (labels != pad_id)
    per_seq = (tok * real).sum(dim=1) / real.sum(dim=1).clamp(min=1)
    return per_seq.mean()
''',
    name="sequence_loss_mean_of_sequences",
)

right(
    "ch06_training",
    "sequence_loss",
    '''
def sequence_loss(logits, labels, pad_id, label_smoothing):
    """logits [B, St, V], labels [B, St] -> scalar."""
    # cross_entropy wants the classes on axis 1: [B, V, St]
    return F.cross_entropy(logits.transpose(1, 2), labels, ignore_index=pad_id,
                           label_smoothing=label_smoothing)
''',
    name="sequence_loss_transpose",
)

right(
    "ch06_training",
    "sequence_loss",
    '''
def sequence_loss(logits, labels, pad_id, label_smoothing):
    """logits [B, St, V], labels [B, St] -> scalar."""
    eps = label_smoothing
    logp = F.log_softmax(logits, dim=-1)                      # [B, St, V]
    keep = labels != pad_id
    safe = labels.masked_fill(~keep, 0)                        # any valid index, masked below
    nll = -logp.gather(-1, safe.unsqueeze(-1)).squeeze(-1)     # [B, St]
    uniform = -logp.mean(dim=-1)                               # eps/V on every class
    per_tok = (1 - eps) * nll + eps * uniform
    return (per_tok * keep).sum() / keep.sum()
''',
    name="sequence_loss_by_hand",
)

# listed
wrong(
    "ch06_training",
    "noam",
    "noam_lambda uses the 0-based step as n, guarded with max(step, 1) against the division "
    "by zero: steps 0 and 1 both get lr(1), and every later step k gets lr(k) instead of lr(k+1)",
    '''
def noam_lambda(step, d_model, warmup):
    """LambdaLR multiplier for 0-based ``step``."""
    step = max(step, 1)  # avoid 0 ** -0.5
    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


def make_scheduler(optimizer, d_model, warmup):
    """A scheduler that sets the Noam rate (the optimizer's lr is 1.0)."""
    return LambdaLR(optimizer, lr_lambda=lambda s: noam_lambda(s, d_model, warmup))
''',
    name="noam_step_as_n_clamped",
)

# unlisted
wrong(
    "ch06_training",
    "noam",
    "sign slip in the warm-up branch: n * warmup**1.5 instead of n * warmup**-1.5, so the "
    "min always takes n**-0.5 and there is no warm-up at all",
    '''
def noam_lambda(step, d_model, warmup):
    """LambdaLR multiplier for 0-based ``step``."""
    n = step + 1
    return (d_model ** -0.5) * min(n ** -0.5, n * warmup ** 1.5)


def make_scheduler(optimizer, d_model, warmup):
    """A scheduler that sets the Noam rate (the optimizer's lr is 1.0)."""
    return LambdaLR(optimizer, lambda step: noam_lambda(step, d_model, warmup))
''',
    name="noam_warmup_exponent_sign",
)

# unlisted
wrong(
    "ch06_training",
    "noam",
    "the step is shifted twice: noam_lambda already uses n = step + 1 and make_scheduler passes "
    "step + 1 again, so the first update gets lr(2) and every update is one step ahead",
    '''
def noam_lambda(step, d_model, warmup):
    """LambdaLR multiplier for 0-based ``step``."""
    n = step + 1
    return d_model ** -0.5 * min(n ** -0.5, n * warmup ** -1.5)


def make_scheduler(optimizer, d_model, warmup):
    """A scheduler that sets the Noam rate (the optimizer's lr is 1.0)."""
    # LambdaLR counts from 0, the paper from 1
    return LambdaLR(optimizer, lambda step: noam_lambda(step + 1, d_model, warmup))
''',
    name="noam_double_shift",
)

# unlisted
wrong(
    "ch06_training",
    "noam",
    "make_scheduler calls scheduler.step() once right after creating the LambdaLR, so the "
    "first update already uses noam_lambda(1) instead of noam_lambda(0) (one step ahead throughout)",
    '''
def noam_lambda(step, d_model, warmup):
    """LambdaLR multiplier for 0-based ``step``."""
    n = step + 1
    return d_model ** (-0.5) * min(1 / math.sqrt(n), n / warmup ** 1.5)


def make_scheduler(optimizer, d_model, warmup):
    """A scheduler that sets the Noam rate (the optimizer's lr is 1.0)."""
    sched = LambdaLR(optimizer, lambda s: noam_lambda(s, d_model, warmup))
    sched.step()  # set the rate for the first update
    return sched
''',
    name="noam_extra_step_at_creation",
)

right(
    "ch06_training",
    "noam",
    '''
import functools


def noam_lambda(step, d_model, warmup):
    """LambdaLR multiplier for 0-based ``step``."""
    n = step + 1                       # the paper counts updates from 1
    warm = n / (warmup * math.sqrt(warmup))
    decay = 1.0 / math.sqrt(n)
    return min(warm, decay) / math.sqrt(d_model)


def make_scheduler(optimizer, d_model, warmup):
    """A scheduler that sets the Noam rate (the optimizer's lr is 1.0)."""
    f = functools.partial(noam_lambda, d_model=d_model, warmup=warmup)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda=f)
''',
    name="noam_partial",
)

# unlisted
wrong(
    "ch06_training",
    "train_step",
    "clips to a hard-coded 1.0 instead of the max_norm argument",
    '''
def train_step(
    model, src, tgt, optimizer, scheduler, max_norm, pad_id, label_smoothing
):
    """One update -> (loss, gradient norm before clipping)."""
    model.train()
    optimizer.zero_grad()
    tgt_in, labels = shift_targets(tgt)
    logits = model(src, tgt_in)
    loss = sequence_loss(logits, labels, pad_id, label_smoothing)
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    return loss.item(), grad_norm.item()
''',
    name="train_step_clip_hardcoded",
)

# unlisted
wrong(
    "ch06_training",
    "train_step",
    "passes pad_id and label_smoothing to sequence_loss in the wrong order "
    "(sequence_loss(logits, labels, label_smoothing, pad_id))",
    '''
def train_step(
    model, src, tgt, optimizer, scheduler, max_norm, pad_id, label_smoothing
):
    """One update -> (loss, gradient norm before clipping)."""
    model.train()
    optimizer.zero_grad()
    dec_in, target = shift_targets(tgt)
    out = model(src, dec_in)
    loss = sequence_loss(out, target, label_smoothing, pad_id)
    loss.backward()
    total_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    scheduler.step()
    return loss.item(), total_norm.item()
''',
    name="train_step_loss_args_swapped",
)

# listed
wrong(
    "ch06_training",
    "train_step",
    "returns the gradient norm as the tensor clip_grad_norm_ returned, not a Python float",
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
    return float(loss), norm
''',
    name="train_step_norm_tensor",
)

# listed
wrong(
    "ch06_training",
    "train_step",
    "clips the gradients after optimizer.step(), so the update uses the unclipped gradients",
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
    optimizer.step()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scheduler.step()
    return loss.item(), norm.item()
''',
    name="train_step_clip_after_step",
)

# unlisted
wrong(
    "ch06_training",
    "train_step",
    "calls optimizer.zero_grad() between loss.backward() and the clipping, so the gradients "
    "just computed are wiped: the reported norm is 0 and the update uses no gradient",
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
    optimizer.zero_grad()   # clear old gradients before the step
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    scheduler.step()
    return loss.item(), norm.item()
''',
    name="train_step_zero_grad_after_backward",
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
    model.zero_grad(set_to_none=True)
    inp, lab = shift_targets(tgt)
    loss = sequence_loss(model(src, inp), lab, pad_id=pad_id, label_smoothing=label_smoothing)
    loss.backward()
    params = [p for p in model.parameters() if p.grad is not None]
    pre_clip = torch.nn.utils.clip_grad_norm_(params, max_norm=max_norm, norm_type=2.0)
    optimizer.step()
    scheduler.step()
    return float(loss.detach()), float(pre_clip)
''',
    name="train_step_model_zero_grad",
)

# unlisted
wrong(
    "ch06_training",
    "greedy_decode",
    "takes the argmax at the first position of the decoder output (logits[:, 0]) instead of "
    "the last one, so every step predicts from BOS",
    '''
def greedy_decode(model, src, max_len, bos_id, eos_id, pad_id):
    """src [B, Ss] -> [B, T] token ids: BOS, the decoded tokens, EOS, then padding."""
    model.eval()
    B = src.size(0)
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        ys = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros(B, dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            logits = model.decode(ys, memory, src_mask, causal_mask(ys.size(1), src.device))
            next_tok = logits[:, 0, :].argmax(-1)
            next_tok[done] = pad_id
            ys = torch.cat([ys, next_tok.unsqueeze(1)], dim=1)
            done = done | (next_tok == eos_id)
            if done.all():
                break
    return ys
''',
    name="greedy_decode_first_position",
)

# unlisted
wrong(
    "ch06_training",
    "greedy_decode",
    "loops range(max_len - 1) (counting BOS in max_len), so a row that never produces EOS "
    "gets max_len - 1 new tokens instead of max_len",
    '''
def greedy_decode(model, src, max_len, bos_id, eos_id, pad_id):
    """src [B, Ss] -> [B, T] token ids: BOS, the decoded tokens, EOS, then padding."""
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        finished = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len - 1):   # BOS already takes one slot
            t = out.size(1)
            logits = model.decode(out, memory, src_mask, causal_mask(t, src.device))
            nxt = logits[:, -1].argmax(dim=-1)
            nxt = torch.where(finished, torch.full_like(nxt, pad_id), nxt)
            out = torch.cat([out, nxt[:, None]], dim=1)
            finished = finished | (nxt == eos_id)
            if finished.all():
                break
    return out
''',
    name="greedy_decode_max_len_minus_one",
)

# unlisted
wrong(
    "ch06_training",
    "greedy_decode",
    "marks a row finished before padding the new token, so the EOS token itself is replaced "
    "by pad_id (finished rows never show their EOS)",
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
            finished = finished | (nxt == eos_id)
            nxt = nxt.masked_fill(finished, pad_id)
            out = torch.cat([out, nxt.unsqueeze(-1)], dim=1)
            if finished.all():
                break
    return out
''',
    name="greedy_decode_eos_overwritten",
)

# listed
wrong(
    "ch06_training",
    "greedy_decode",
    "passes no target mask to decode (tgt_mask=None), so the decoder attends to the whole "
    "prefix without the causal mask",
    '''
def greedy_decode(model, src, max_len, bos_id, eos_id, pad_id):
    """src [B, Ss] -> [B, T] token ids: BOS, the decoded tokens, EOS, then padding."""
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        finished = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            # at inference there is no future to hide
            logits = model.decode(out, memory, src_mask, None)
            nxt = logits[:, -1].argmax(dim=-1).masked_fill(finished, pad_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            finished |= nxt == eos_id
            if finished.all():
                break
    return out
''',
    name="greedy_decode_no_causal_mask",
)

right(
    "ch06_training",
    "greedy_decode",
    '''
def greedy_decode(model, src, max_len, bos_id, eos_id, pad_id):
    """src [B, Ss] -> [B, T] token ids: BOS, the decoded tokens, EOS, then padding."""
    dev = src.device
    batch = src.shape[0]
    model.eval()
    with torch.inference_mode():
        mem, smask = model.encode(src)
        seq = torch.tensor([[bos_id]] * batch, dtype=torch.long, device=dev)
        alive = torch.ones(batch, dtype=torch.bool, device=dev)
        steps = 0
        while steps < max_len and alive.any():
            mask = causal_mask(seq.shape[1], dev)
            scores = model.decode(seq, mem, smask, mask)[:, -1, :]
            best = scores.argmax(dim=-1)
            best = torch.where(alive, best, torch.full_like(best, pad_id))
            seq = torch.cat((seq, best.view(batch, 1)), dim=1)
            alive = alive & (best != eos_id)
            steps += 1
    return seq
''',
    name="greedy_decode_while_alive",
)

# ============================================================ ch06_bughunt

# listed
wrong(
    "ch06_bughunt",
    "generate_text",
    "fixes the target mask (free function, moved to the device) but still passes None as the "
    "source mask to the encoder and the decoder: a padded source has its padding attended to",
    """
def generate_text(model, src, max_length, device):
    model.eval()
    with torch.no_grad():
        # 编码源序列
        enc_src = model.encoder(src, None)

        # 初始化目标序列为 <SOS> token
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)

        for i in range(max_length - 1):
            # 创建 target mask  (fixed: it is a plain function, and it lives on the CPU)
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
    name="generate_text_source_mask_missing",
)

# unlisted
wrong(
    "ch06_bughunt",
    "generate_text",
    "builds the source padding mask but gives it only to the decoder's cross-attention; the "
    "encoder is still called with None, so the encoder's self-attention reads the padding",
    """
def generate_text(model, src, max_length, device):
    model.eval()
    with torch.no_grad():
        src_mask = create_src_mask(src)
        # 编码源序列
        enc_src = model.encoder(src, None)

        # 初始化目标序列为 <SOS> token
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)

        for i in range(max_length - 1):
            # 创建 target mask
            trg_mask = create_trg_mask(trg).to(device)

            # 前向传播 -- the decoder must not look at the padded source positions
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
    name="generate_text_source_mask_decoder_only",
)

# unlisted
wrong(
    "ch06_bughunt",
    "generate_text",
    "builds its own source mask with the inverted convention, (src == PAD_IDX), thinking "
    "the mask marks what to hide: the real tokens are masked and the padding is attended",
    """
def generate_text(model, src, max_length, device):
    model.eval()
    with torch.no_grad():
        # mask out the padding: 1 where the token is PAD
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
    name="generate_text_source_mask_inverted",
)

# unlisted
wrong(
    "ch06_bughunt",
    "generate_text",
    "fixes the three bugs but also changes the loop to range(max_length), so a sequence that "
    "never produces EOS comes back with max_length + 1 tokens (SOS included) instead of at most max_length",
    """
def generate_text(model, src, max_length, device):
    model.eval()
    with torch.no_grad():
        src_mask = create_src_mask(src)
        # 编码源序列
        enc_src = model.encoder(src, src_mask)

        # 初始化目标序列为 <SOS> token
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)

        for i in range(max_length):   # generate max_length tokens
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
    name="generate_text_loop_one_too_many",
)

# listed
wrong(
    "ch06_bughunt",
    "generate_text",
    "calls the free function create_trg_mask(trg) and passes the source mask, but never moves "
    "the target mask to the device: it is built on the CPU and meets CUDA tensors on a GPU",
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
    name="generate_text_mask_left_on_cpu",
)

right(
    "ch06_bughunt",
    "generate_text",
    """
def generate_text(model, src, max_length, device):
    model.eval()
    with torch.no_grad():
        # padding mask of the source, [1, 1, 1, S], True on real tokens
        src_mask = (src != PAD_IDX)[:, None, None, :]

        # 编码源序列
        enc_src = model.encoder(src, src_mask)

        # 初始化目标序列为 <SOS> token
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)

        for i in range(max_length - 1):
            # 创建 target mask: lower triangle, built directly on the device
            T = trg.size(1)
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
    name="generate_text_own_masks",
)

right(
    "ch06_bughunt",
    "generate_text",
    """
def generate_text(model, src, max_length, device):
    model.eval()
    with torch.no_grad():
        # src is one sequence [1, S]: drop its padding instead of masking it
        src = src[:, src[0] != PAD_IDX]

        # 编码源序列
        enc_src = model.encoder(src, None)

        # 初始化目标序列为 <SOS> token
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)

        for i in range(max_length - 1):
            # 创建 target mask (a free function, built on the CPU -> move it)
            trg_mask = create_trg_mask(trg).to(trg.device)

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
    name="generate_text_strip_padding",
)

# ============================================================ ch06_own_model

_OWN_SPLIT_MERGE = '''
def split_heads(x, n_heads):
    """[B, S, D] -> [B, H, S, Dh]."""
    b, s, d = x.shape
    return x.reshape(b, s, n_heads, d // n_heads).permute(0, 2, 1, 3)


def merge_heads(x):
    """[B, H, S, Dh] -> [B, S, D]."""
    b, h, s, dh = x.shape
    return x.permute(0, 2, 1, 3).reshape(b, s, h * dh)
'''

# unlisted
wrong(
    "ch06_own_model",
    "own_attention",
    "copy-paste slip in MultiHeadAttention.forward: the values are projected with k_proj "
    "instead of v_proj (v_proj is created but never used)",
    _OWN_SPLIT_MERGE
    + """

def masked_attention(q, k, v, mask):
    d_head = q.size(-1)
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d_head)
    scores = scores.masked_fill(mask == False, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1)
    # a query with no key at all gets zero weights
    weights = weights * mask.any(dim=-1, keepdim=True)
    return torch.matmul(weights, v), weights


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.0):
        super().__init__()
        self.h = n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        q = split_heads(self.q_proj(query), self.h)
        k = split_heads(self.k_proj(key), self.h)
        v = split_heads(self.k_proj(value), self.h)
        if mask is None:
            mask = torch.ones(1, 1, q.size(2), k.size(2), dtype=torch.bool, device=q.device)
        out, _ = masked_attention(q, k, v, mask)
        return self.out_proj(merge_heads(out))
""",
    name="own_attention_value_uses_key_proj",
)

# unlisted
wrong(
    "ch06_own_model",
    "own_attention",
    "scales the scores by sqrt of the query length (q.size(-2)) instead of sqrt of the head "
    "size Dh (wrong axis)",
    _OWN_SPLIT_MERGE
    + """

def masked_attention(q, k, v, mask):
    scale = math.sqrt(q.size(-2))
    scores = q @ k.transpose(-1, -2) / scale
    scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = F.softmax(scores, dim=-1)
    weights = weights.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return weights @ v, weights


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.0):
        super().__init__()
        assert d_model % n_heads == 0
        self.n_heads = n_heads
        self.wq = nn.Linear(d_model, d_model)
        self.wk = nn.Linear(d_model, d_model)
        self.wv = nn.Linear(d_model, d_model)
        self.wo = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        q = split_heads(self.wq(query), self.n_heads)
        k = split_heads(self.wk(key), self.n_heads)
        v = split_heads(self.wv(value), self.n_heads)
        if mask is None:
            mask = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=q.device)[None, None]
        out, _ = masked_attention(q, k, v, mask)
        return self.wo(merge_heads(out))
""",
    name="own_attention_scale_by_query_length",
)

# listed
wrong(
    "ch06_own_model",
    "own_attention",
    "mask convention inverted in masked_attention: fills the scores where the mask is True "
    "(masked_fill(mask, ...)), so the allowed keys are hidden and the masked ones attended",
    _OWN_SPLIT_MERGE
    + """

def masked_attention(q, k, v, mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    scores = scores.masked_fill(mask, torch.finfo(scores.dtype).min)   # hide the masked keys
    weights = scores.softmax(dim=-1)
    return weights @ v, weights


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.0):
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
        if mask is None:
            weights = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(-1)
            out = weights @ v
        else:
            out, _ = masked_attention(q, k, v, mask)
        return self.out_proj(merge_heads(out))
""",
    name="own_attention_mask_inverted",
)

right(
    "ch06_own_model",
    "own_attention",
    '''
def split_heads(x, n_heads):
    """[B, S, D] -> [B, H, S, Dh]."""
    B, S, D = x.shape
    return x.unflatten(-1, (n_heads, D // n_heads)).transpose(1, 2)


def merge_heads(x):
    """[B, H, S, Dh] -> [B, S, D]."""
    return x.transpose(1, 2).flatten(2)


def masked_attention(q, k, v, mask):
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) * (q.shape[-1] ** -0.5)
    neg = torch.finfo(scores.dtype).min
    scores = torch.where(mask, scores, torch.full_like(scores, neg))
    w = torch.softmax(scores, dim=-1)
    has_key = mask.any(dim=-1, keepdim=True)
    w = torch.where(has_key, w, torch.zeros_like(w))
    return torch.einsum("bhqk,bhkd->bhqd", w, v), w


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.0):
        super().__init__()
        assert d_model % n_heads == 0
        self.n_heads = n_heads
        self.q_lin = nn.Linear(d_model, d_model)
        self.k_lin = nn.Linear(d_model, d_model)
        self.v_lin = nn.Linear(d_model, d_model)
        self.o_lin = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        q = split_heads(self.q_lin(query), self.n_heads)
        k = split_heads(self.k_lin(key), self.n_heads)
        v = split_heads(self.v_lin(value), self.n_heads)
        if mask is None:
            mask = torch.ones(1, 1, 1, k.shape[2], dtype=torch.bool, device=k.device)
        out, _ = masked_attention(q, k, v, mask)
        return self.o_lin(merge_heads(out))
''',
    name="own_attention_einsum",
)

# listed
wrong(
    "ch06_own_model",
    "own_masks",
    "padding_mask ignores its pad_id argument and compares with 0 (tokens != 0): wrong for "
    "any other pad id",
    '''
def causal_mask(size):
    """-> bool [1, 1, S, S], True where key j <= query i."""
    m = torch.tril(torch.ones(size, size, device=device)).bool()
    return m.unsqueeze(0).unsqueeze(0)


def padding_mask(tokens, pad_id):
    """tokens [B, S] -> bool [B, 1, 1, S], True on real tokens."""
    return (tokens != 0).unsqueeze(1).unsqueeze(2)
''',
    name="own_masks_pad_hardcoded_zero",
)

# unlisted
wrong(
    "ch06_own_model",
    "own_masks",
    "causal mask strictly lower-triangular (tril(diagonal=-1)): a query may not attend to "
    "itself, and position 0 has no key at all",
    '''
def causal_mask(size):
    """-> bool [1, 1, S, S], True where key j <= query i."""
    # the past only
    return torch.ones(size, size, dtype=torch.bool, device=device).tril(-1)[None, None]


def padding_mask(tokens, pad_id):
    """tokens [B, S] -> bool [B, 1, 1, S], True on real tokens."""
    return (tokens != pad_id)[:, None, None, :]
''',
    name="own_masks_causal_excludes_diagonal",
)

# listed
wrong(
    "ch06_own_model",
    "own_masks",
    "causal mask built with triu instead of tril: each query sees itself and the future",
    '''
def causal_mask(size):
    """-> bool [1, 1, S, S], True where key j <= query i."""
    ones = torch.ones(size, size, dtype=torch.bool, device=device)
    return torch.triu(ones).view(1, 1, size, size)


def padding_mask(tokens, pad_id):
    """tokens [B, S] -> bool [B, 1, 1, S], True on real tokens."""
    keep = tokens.ne(pad_id)
    return keep.view(tokens.size(0), 1, 1, tokens.size(1))
''',
    name="own_masks_triu",
)

right(
    "ch06_own_model",
    "own_masks",
    '''
def causal_mask(size):
    """-> bool [1, 1, S, S], True where key j <= query i."""
    idx = torch.arange(size, device=device)
    return (idx.view(-1, 1) >= idx.view(1, -1)).reshape(1, 1, size, size)


def padding_mask(tokens, pad_id):
    """tokens [B, S] -> bool [B, 1, 1, S], True on real tokens."""
    return torch.ne(tokens, pad_id).unsqueeze(1).unsqueeze(1)
''',
    name="own_masks_arange",
)

_OWN_DECODER = """

class DecoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        causal = causal_mask(x.size(1)).to(x.device)
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        x = self.norm2(x + self.dropout(self.cross_attn(x, memory, memory, mask=src_mask)))
        return self.norm3(x + self.dropout(self.ff(x)))
"""

# unlisted
wrong(
    "ch06_own_model",
    "own_blocks",
    "FeedForward has no activation between its two Linear layers (no ReLU): the sublayer is "
    "one linear map",
    """
class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.w1 = nn.Linear(d_model, d_ff)
        self.w2 = nn.Linear(d_ff, d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        h = self.w1(x)
        return self.w2(self.drop(h))


class EncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.ln1 = nn.LayerNorm(d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.drop1 = nn.Dropout(dropout)
        self.drop2 = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.ln1(x)
            x = x + self.drop1(self.attn(h, h, h, mask=mask))
            return x + self.drop2(self.ff(self.ln2(x)))
        x = self.ln1(x + self.drop1(self.attn(x, x, x, mask=mask)))
        return self.ln2(x + self.drop2(self.ff(x)))
"""
    + _OWN_DECODER,
    name="own_blocks_ff_no_relu",
)

# unlisted
wrong(
    "ch06_own_model",
    "own_blocks",
    "Post-LN EncoderBlock feeds the feed-forward the block's input x instead of the output of "
    "the attention sublayer (h = norm1(x + attn(x)); out = norm2(h + ff(x)))",
    """
class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Dropout(dropout),
                                 nn.Linear(d_ff, d_model))

    def forward(self, x):
        return self.net(x)


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
        if self.norm_first:
            y = self.norm1(x)
            x = x + self.dropout1(self.self_attn(y, y, y, mask=mask))
            return x + self.dropout2(self.ff(self.norm2(x)))
        h = self.norm1(x + self.dropout1(self.self_attn(x, x, x, mask=mask)))
        out = self.norm2(h + self.dropout2(self.ff(x)))
        return out
"""
    + _OWN_DECODER,
    name="own_blocks_ff_reads_block_input",
)

# listed
wrong(
    "ch06_own_model",
    "own_blocks",
    "the seed's dropout placement in the encoder block: Dropout(LayerNorm(x + Sublayer(x))), "
    "dropout after the norm on the residual stream instead of on the sublayer's output",
    """
class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.linear2(self.dropout(F.relu(self.linear1(x))))


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
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.dropout(self.attention(h, h, h, mask=mask))
            return x + self.dropout(self.feed_forward(self.norm2(x)))
        attention = self.attention(x, x, x, mask=mask)
        x = self.dropout(self.norm1(attention + x))
        forward = self.feed_forward(x)
        return self.dropout(self.norm2(forward + x))
"""
    + _OWN_DECODER,
    name="own_blocks_seed_dropout",
)

# listed
wrong(
    "ch06_own_model",
    "own_positions",
    "embed does not multiply the token embeddings by sqrt(d_model) before adding the positions",
    '''
def sinusoidal_encoding(n_positions, d_model):
    """-> [n_positions, d_model]."""
    pos = torch.arange(n_positions, dtype=torch.float32).unsqueeze(1)
    div = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    pe = torch.zeros(n_positions, d_model)
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div)
    return pe


def embed(tokens, table, pe):
    """tokens [B, S] long, table nn.Embedding(V, D), pe [max_len, D] -> [B, S, D]."""
    return table(tokens) + pe[: tokens.size(1)]
''',
    name="own_positions_no_scale",
)

# unlisted
wrong(
    "ch06_own_model",
    "own_positions",
    "embed indexes the positional table with the token ids (pe[tokens]) instead of the "
    "positions 0..S-1",
    '''
def sinusoidal_encoding(n_positions, d_model):
    """-> [n_positions, d_model]."""
    pos = torch.arange(n_positions, dtype=torch.float64)[:, None]
    freq = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    pe = torch.zeros(n_positions, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(pos * freq)
    pe[:, 1::2] = torch.cos(pos * freq)
    return pe.float()


def embed(tokens, table, pe):
    """tokens [B, S] long, table nn.Embedding(V, D), pe [max_len, D] -> [B, S, D]."""
    x = table(tokens) * math.sqrt(table.embedding_dim)
    return x + pe[tokens]   # the encoding of each token's position
''',
    name="own_positions_pe_indexed_by_token",
)

# unlisted
wrong(
    "ch06_own_model",
    "own_positions",
    "the frequencies use math.log10(10000) (= 4) in the exp form instead of the natural log, "
    "so the base is e^4 (about 55) instead of 10000",
    '''
def sinusoidal_encoding(n_positions, d_model):
    """-> [n_positions, d_model]."""
    position = torch.arange(n_positions).unsqueeze(1).float()
    div_term = torch.exp(torch.arange(0, d_model, 2).float() * -(math.log10(10000.0) / d_model))
    pe = torch.zeros(n_positions, d_model)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


def embed(tokens, table, pe):
    """tokens [B, S] long, table nn.Embedding(V, D), pe [max_len, D] -> [B, S, D]."""
    return table(tokens) * math.sqrt(table.embedding_dim) + pe[: tokens.size(1)]
''',
    name="own_positions_log10_base",
)

# unlisted
wrong(
    "ch06_own_model",
    "own_model",
    "every encoder block is applied to the embedded source instead of the previous block's "
    "output (memory = block(src_emb, mask) in the loop), so with more than one layer only "
    "the last encoder block counts",
    """
PAD = 0


class OwnTransformer(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers):
        super().__init__()
        self.src_embed = nn.Embedding(vocab_size, d_model)
        self.tgt_embed = nn.Embedding(vocab_size, d_model)
        self.register_buffer("pe", sinusoidal_encoding(64, d_model))
        self.encoder = nn.ModuleList([EncoderBlock(d_model, n_heads, d_ff, dropout=0.0)
                                      for _ in range(n_layers)])
        self.decoder = nn.ModuleList([DecoderBlock(d_model, n_heads, d_ff, dropout=0.0)
                                      for _ in range(n_layers)])
        self.out = nn.Linear(d_model, vocab_size)

    def forward(self, src, tgt_in):
        src_mask = padding_mask(src, PAD)
        src_emb = embed(src, self.src_embed, self.pe)
        memory = src_emb
        for layer in self.encoder:
            memory = layer(src_emb, src_mask)
        y = embed(tgt_in, self.tgt_embed, self.pe)
        for layer in self.decoder:
            y = layer(y, memory, src_mask)
        return self.out(y)


def batch_loss(model, src, tgt):
    logits = model(src, tgt[:, :-1])
    labels = tgt[:, 1:]
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1), ignore_index=PAD)
""",
    name="own_model_encoder_blocks_not_chained",
)

# unlisted
wrong(
    "ch06_own_model",
    "own_model",
    "forward returns softmax probabilities instead of logits, and batch_loss feeds those "
    "probabilities to F.cross_entropy as if they were logits",
    """
PAD = 0


class OwnTransformer(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers):
        super().__init__()
        self.src_embed = nn.Embedding(vocab_size, d_model)
        self.tgt_embed = nn.Embedding(vocab_size, d_model)
        self.register_buffer("pe", sinusoidal_encoding(64, d_model))
        self.encoder = nn.ModuleList(EncoderBlock(d_model, n_heads, d_ff, dropout=0.0) for _ in range(n_layers))
        self.decoder = nn.ModuleList(DecoderBlock(d_model, n_heads, d_ff, dropout=0.0) for _ in range(n_layers))
        self.generator = nn.Linear(d_model, vocab_size)

    def forward(self, src, tgt_in):
        mask = padding_mask(src, PAD)
        h = embed(src, self.src_embed, self.pe)
        for blk in self.encoder:
            h = blk(h, mask)
        y = embed(tgt_in, self.tgt_embed, self.pe)
        for blk in self.decoder:
            y = blk(y, h, mask)
        # probability of each next token
        return torch.softmax(self.generator(y), dim=-1)


def batch_loss(model, src, tgt):
    tgt_in, labels = tgt[:, :-1], tgt[:, 1:]
    probs = model(src, tgt_in)
    return F.cross_entropy(probs.reshape(-1, probs.size(-1)), labels.reshape(-1), ignore_index=PAD)
""",
    name="own_model_softmax_output",
)

# unlisted
wrong(
    "ch06_own_model",
    "own_model",
    "the encoder blocks get no mask (mask=None): the source padding mask is built but given "
    "only to the decoder's cross-attention, so the encoder attends to the padding",
    """
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

    def encode(self, src):
        x = embed(src, self.src_embed, self.pe)
        for block in self.encoder:
            x = block(x)
        return x

    def forward(self, src, tgt_in):
        memory = self.encode(src)
        src_mask = padding_mask(src, PAD)   # the decoder must not read the padding
        x = embed(tgt_in, self.tgt_embed, self.pe)
        for block in self.decoder:
            x = block(x, memory, src_mask)
        return self.generator(x)


def batch_loss(model, src, tgt):
    tgt_in, labels = tgt[:, :-1], tgt[:, 1:]
    logits = model(src, tgt_in)
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=PAD)
""",
    name="own_model_encoder_unmasked",
)

# listed
wrong(
    "ch06_own_model",
    "own_model",
    "keeps the blocks in plain Python lists instead of nn.ModuleList: their weights are not "
    "registered, so the optimizer never trains them (and .to(device) does not move them)",
    """
PAD = 0


class OwnTransformer(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers):
        super().__init__()
        self.src_embed = nn.Embedding(vocab_size, d_model)
        self.tgt_embed = nn.Embedding(vocab_size, d_model)
        self.register_buffer("pe", sinusoidal_encoding(64, d_model))
        self.encoder = [EncoderBlock(d_model, n_heads, d_ff, dropout=0.0) for _ in range(n_layers)]
        self.decoder = [DecoderBlock(d_model, n_heads, d_ff, dropout=0.0) for _ in range(n_layers)]
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
    tgt_in, labels = tgt[:, :-1], tgt[:, 1:]
    logits = model(src, tgt_in)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1), ignore_index=PAD)
""",
    name="own_model_python_lists",
)

right(
    "ch06_own_model",
    "own_model",
    """
PAD = 0


class OwnTransformer(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers):
        super().__init__()
        self.emb_src = nn.Embedding(vocab_size, d_model)
        self.emb_tgt = nn.Embedding(vocab_size, d_model)
        self.register_buffer("pe", sinusoidal_encoding(64, d_model))
        self.enc_layers = nn.ModuleList()
        self.dec_layers = nn.ModuleList()
        for _ in range(n_layers):
            self.enc_layers.append(EncoderBlock(d_model, n_heads, d_ff, dropout=0.0))
            self.dec_layers.append(DecoderBlock(d_model, n_heads, d_ff, dropout=0.0))
        self.proj = nn.Linear(d_model, vocab_size)

    def forward(self, src, tgt_in):
        keep = padding_mask(src, PAD)
        mem = embed(src, self.emb_src, self.pe)
        for layer in self.enc_layers:
            mem = layer(mem, keep)
        out = embed(tgt_in, self.emb_tgt, self.pe)
        for layer in self.dec_layers:
            out = layer(out, mem, keep)
        return self.proj(out)


def batch_loss(model, src, tgt):
    logits = model(src, tgt[:, :-1])
    labels = tgt[:, 1:]
    real = labels != PAD
    # sum over the real tokens, divided by how many there are
    total = F.cross_entropy(logits[real], labels[real], reduction="sum")
    return total / real.sum()
""",
    name="own_model_boolean_select_loss",
)

# ============================================================ ch07_scale

# unlisted
wrong(
    "ch07_scale",
    "accumulation_step",
    "divides each micro-batch's summed loss by that micro-batch's own token count (its mean) "
    "and never by the step's total, so the gradient is the sum of the micro-batch means",
    '''
def accumulation_step(model, micro_batches, optimizer, scheduler, loss_fn):
    """One optimizer step from ``micro_batches``, equal to one step on their
    concatenation."""
    optimizer.zero_grad()
    for mb in micro_batches:
        loss_sum, n_tokens = loss_fn(model, mb)
        loss = loss_sum / n_tokens   # mean over this micro-batch's tokens
        loss.backward()
    optimizer.step()
    scheduler.step()
''',
    name="accumulation_step_own_count",
)

# unlisted
wrong(
    "ch07_scale",
    "accumulation_step",
    "the total divisor counts every target position, padding included "
    "(sum of batch[:, 1:].numel()), instead of the real (non-PAD) target tokens",
    '''
def accumulation_step(model, micro_batches, optimizer, scheduler, loss_fn):
    """One optimizer step from ``micro_batches``, equal to one step on their
    concatenation."""
    optimizer.zero_grad()
    # how many targets the big batch has
    total = sum(mb[:, 1:].numel() for mb in micro_batches)
    for mb in micro_batches:
        loss_sum, _ = loss_fn(model, mb)
        (loss_sum / total).backward()
    optimizer.step()
    scheduler.step()
''',
    name="accumulation_step_counts_padding",
)

# unlisted
wrong(
    "ch07_scale",
    "accumulation_step",
    "divides each micro-batch's summed loss by a running count of the tokens seen so far "
    "(including this micro-batch) instead of the step's total count, so early micro-batches weigh more",
    '''
def accumulation_step(model, micro_batches, optimizer, scheduler, loss_fn):
    """One optimizer step from ``micro_batches``, equal to one step on their
    concatenation."""
    optimizer.zero_grad()
    seen = 0
    for batch in micro_batches:
        loss_sum, n = loss_fn(model, batch)
        seen += n
        (loss_sum / seen).backward()
    optimizer.step()
    scheduler.step()
''',
    name="accumulation_step_running_count",
)

# listed
wrong(
    "ch07_scale",
    "accumulation_step",
    "the seed's division: each micro-batch's mean loss divided by the number of micro-batches k, "
    "which equals the big batch only when every micro-batch holds the same number of tokens",
    '''
def accumulation_step(model, micro_batches, optimizer, scheduler, loss_fn):
    """One optimizer step from ``micro_batches``, equal to one step on their
    concatenation."""
    optimizer.zero_grad()
    k = len(micro_batches)
    for batch in micro_batches:
        loss_sum, n_tokens = loss_fn(model, batch)
        loss = loss_sum / n_tokens
        loss = loss / k
        loss.backward()
    optimizer.step()
    scheduler.step()
''',
    name="accumulation_step_mean_over_k",
)

right(
    "ch07_scale",
    "accumulation_step",
    '''
def accumulation_step(model, micro_batches, optimizer, scheduler, loss_fn):
    """One optimizer step from ``micro_batches``, equal to one step on their
    concatenation."""
    counts = [count_targets(b) for b in micro_batches]
    weight = 1.0 / sum(counts)           # every token of the big batch weighs 1/N
    optimizer.zero_grad(set_to_none=True)
    for b in micro_batches:
        summed, _ = loss_fn(model, b)
        (summed * weight).backward()
    optimizer.step()
    scheduler.step()
''',
    name="accumulation_step_weight_per_token",
)

# listed
wrong(
    "ch07_scale",
    "amp_step",
    "autocast hard-coded to device_type='cuda' (float16): on a CPU model autocast is disabled "
    "and the forward runs in float32 instead of bfloat16",
    '''
def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm):
    """One mixed-precision training step; returns the loss."""
    optimizer.zero_grad()
    with torch.amp.autocast("cuda", dtype=torch.float16):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.item()
''',
    name="amp_step_autocast_cuda_hardcoded",
)

# unlisted
wrong(
    "ch07_scale",
    "amp_step",
    "the forward (loss_fn) runs outside the autocast block and only the backward is inside it, "
    "so the forward is computed in full float32: no mixed precision at all",
    '''
def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm):
    """One mixed-precision training step; returns the loss."""
    dev = next(model.parameters()).device.type
    half = torch.float16 if dev == "cuda" else torch.bfloat16
    optimizer.zero_grad()
    loss = loss_fn(model, batch)
    with torch.amp.autocast(dev, dtype=half):
        scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()
''',
    name="amp_step_forward_outside_autocast",
)

# unlisted
wrong(
    "ch07_scale",
    "amp_step",
    "clips at a hard-coded norm of 1.0 instead of max_norm",
    '''
def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm):
    """One mixed-precision training step; returns the loss."""
    device_type = next(model.parameters()).device.type
    amp_dtype = torch.bfloat16 if device_type == "cpu" else torch.float16
    optimizer.zero_grad()
    with torch.amp.autocast(device_type=device_type, dtype=amp_dtype):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()
''',
    name="amp_step_clip_hardcoded",
)

# listed
wrong(
    "ch07_scale",
    "amp_step",
    "clips the gradients while they are still multiplied by the scale (no scaler.unscale_ before "
    "clip_grad_norm_), so the true gradients are clipped at max_norm / scale",
    '''
def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm):
    """One mixed-precision training step; returns the loss."""
    device_type = next(model.parameters()).device.type
    dtype = torch.float16 if device_type == "cuda" else torch.bfloat16
    optimizer.zero_grad()
    with torch.amp.autocast(device_type, dtype=dtype):
        loss = loss_fn(model, batch)
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)   # unscales for us
    scaler.update()
    return loss.detach()
''',
    name="amp_step_clip_before_unscale",
)

right(
    "ch07_scale",
    "amp_step",
    '''
def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm):
    """One mixed-precision training step; returns the loss."""
    params = list(model.parameters())
    kind = params[0].device.type
    low = {"cuda": torch.float16}.get(kind, torch.bfloat16)
    for p in params:
        p.grad = None
    with torch.autocast(device_type=kind, dtype=low):
        loss = loss_fn(model, batch)
    scaled = scaler.scale(loss)
    scaled.backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(params, max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.item()
''',
    name="amp_step_autocast_alias",
)

# unlisted
wrong(
    "ch07_scale",
    "make_loader",
    "seeds the DistributedSampler with the rank (seed=rank), so every process shuffles "
    "differently: the shards overlap and some samples are read by no process",
    '''
def make_loader(dataset, rank, world_size, epoch, batch_size):
    """The DataLoader process ``rank`` of ``world_size`` iterates in epoch ``epoch``."""
    # each process gets its own seed so they don't all see the same order
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank,
                                 shuffle=True, seed=rank)
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)
''',
    name="make_loader_seed_per_rank",
)

# listed
wrong(
    "ch07_scale",
    "make_loader",
    "shards by hand (a fixed Subset indices[rank::world_size]) and shuffles with DataLoader("
    "shuffle=True) and the unseeded global generator: each process always gets the same "
    "samples, and two calls with the same arguments give different orders",
    '''
from torch.utils.data import Subset


def make_loader(dataset, rank, world_size, epoch, batch_size):
    """The DataLoader process ``rank`` of ``world_size`` iterates in epoch ``epoch``."""
    indices = list(range(len(dataset)))[rank::world_size]   # my share
    return DataLoader(Subset(dataset, indices), batch_size=batch_size, shuffle=True)
''',
    name="make_loader_manual_shard_unseeded",
)

# listed
wrong(
    "ch07_scale",
    "make_loader",
    "never calls sampler.set_epoch(epoch): every epoch repeats epoch 0's order and split",
    '''
def make_loader(dataset, rank, world_size, epoch, batch_size):
    """The DataLoader process ``rank`` of ``world_size`` iterates in epoch ``epoch``."""
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True)
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler, shuffle=False)
    return loader
''',
    name="make_loader_no_set_epoch",
)

right(
    "ch07_scale",
    "make_loader",
    '''
def make_loader(dataset, rank, world_size, epoch, batch_size):
    """The DataLoader process ``rank`` of ``world_size`` iterates in epoch ``epoch``."""
    sampler = DistributedSampler(dataset, world_size, rank, True, 1234)
    sampler.set_epoch(epoch)       # new shuffle every epoch, same on every rank
    return DataLoader(dataset, batch_size, sampler=sampler, drop_last=False)
''',
    name="make_loader_positional",
)

# ============================================================ ch08_generation

# unlisted
wrong(
    "ch08_generation",
    "next_token_probs",
    "chooses the top-p set from the probabilities at temperature 1 (softmax of the raw logits) "
    "and applies the temperature only afterwards, instead of choosing the set at the given temperature",
    '''
def next_token_probs(logits, temperature, top_p):
    """logits [B, V] -> probs [B, V]: temperature, then top-p, then renormalised."""
    # nucleus from the model's own distribution
    p = logits.softmax(dim=-1)
    sp, idx = torch.sort(p, dim=-1, descending=True)
    above = sp.cumsum(dim=-1) - sp
    keep_sorted = above < top_p
    keep = torch.zeros_like(keep_sorted).scatter(-1, idx, keep_sorted)
    scaled = logits / temperature
    return scaled.masked_fill(~keep, float("-inf")).softmax(dim=-1)
''',
    name="next_token_probs_nucleus_before_temperature",
)

# unlisted
wrong(
    "ch08_generation",
    "next_token_probs",
    "maps the kept set back to vocabulary order with gather(-1, order) instead of scatter, so "
    "the keep flags land on the wrong tokens",
    '''
def next_token_probs(logits, temperature, top_p):
    """logits [B, V] -> probs [B, V]: temperature, then top-p, then renormalised."""
    logits = logits / temperature
    probs = torch.softmax(logits, dim=-1)
    sorted_p, order = torch.sort(probs, dim=-1, descending=True)
    mass_before = torch.cumsum(sorted_p, dim=-1) - sorted_p
    keep_sorted = mass_before < top_p
    # back to the original token order
    keep = keep_sorted.gather(-1, order)
    filtered = logits.masked_fill(~keep, float("-inf"))
    return torch.softmax(filtered, dim=-1)
''',
    name="next_token_probs_gather_instead_of_scatter",
)

# unlisted
wrong(
    "ch08_generation",
    "next_token_probs",
    "multiplies the logits by the temperature instead of dividing them (temperature 2 sharpens, "
    "0.5 flattens)",
    '''
def next_token_probs(logits, temperature, top_p):
    """logits [B, V] -> probs [B, V]: temperature, then top-p, then renormalised."""
    z = logits * temperature
    probs = z.softmax(-1)
    sp, si = probs.sort(-1, descending=True)
    keep_sorted = (sp.cumsum(-1) - sp) < top_p
    keep = torch.zeros_like(keep_sorted).scatter(-1, si, keep_sorted)
    probs = probs * keep
    return probs / probs.sum(-1, keepdim=True)
''',
    name="next_token_probs_multiplies_temperature",
)

# listed
wrong(
    "ch08_generation",
    "next_token_probs",
    "keeps the tokens whose running sum including their own probability is below top_p "
    "(cumsum < p): drops the crossing token, and keeps nothing (NaN) when the top token alone exceeds p",
    '''
def next_token_probs(logits, temperature, top_p):
    """logits [B, V] -> probs [B, V]: temperature, then top-p, then renormalised."""
    logits = logits / temperature
    probs = logits.softmax(-1)
    sorted_probs, sorted_idx = probs.sort(dim=-1, descending=True)
    cum = sorted_probs.cumsum(dim=-1)
    keep_sorted = cum < top_p
    if top_p >= 1.0:
        keep_sorted = torch.ones_like(keep_sorted)
    keep = torch.zeros_like(keep_sorted).scatter(-1, sorted_idx, keep_sorted)
    return logits.masked_fill(~keep, float("-inf")).softmax(-1)
''',
    name="next_token_probs_drops_crossing_token",
)

right(
    "ch08_generation",
    "next_token_probs",
    '''
def next_token_probs(logits, temperature, top_p):
    """logits [B, V] -> probs [B, V]: temperature, then top-p, then renormalised."""
    scaled = logits / temperature
    if top_p >= 1:
        return torch.softmax(scaled, dim=-1)
    sorted_logits, perm = scaled.sort(dim=-1, descending=True)
    sorted_probs = sorted_logits.softmax(dim=-1)
    # probability mass ranked strictly above each token
    before = torch.cat([torch.zeros_like(sorted_probs[:, :1]),
                        sorted_probs.cumsum(dim=-1)[:, :-1]], dim=-1)
    sorted_logits = sorted_logits.masked_fill(before >= top_p, float("-inf"))
    out = torch.empty_like(scaled).scatter_(-1, perm, sorted_logits)
    return out.softmax(dim=-1)
''',
    name="next_token_probs_exclusive_cumsum",
)

# unlisted
wrong(
    "ch08_generation",
    "lm_step",
    "positions offset by one too many: model.pos(x, start=past + 1), so the new tokens sit at "
    "T+1 .. T+S instead of T .. T+S-1",
    '''
def lm_step(model, tokens, cache):
    """tokens [B, S] after the cache.length cached ones -> logits [B, S, V]."""
    past = cache.length
    S = tokens.shape[1]
    mask = causal_mask(S, tokens.device, past=past)
    h = model.tok_embed(tokens) * math.sqrt(model.d_model)
    h = model.pos(h, start=past + 1)   # next position after the cache
    h = model.dropout(h)
    for i, block in enumerate(model.blocks.layers):
        h = block(h, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(h))
''',
    name="lm_step_positions_plus_one",
)

# unlisted
wrong(
    "ch08_generation",
    "lm_step",
    "skips model.blocks.norm before lm_head: right for a Post-LN model (whose norm is the "
    "identity) but wrong for a Pre-LN model, whose final LayerNorm is left out",
    '''
def lm_step(model, tokens, cache):
    """tokens [B, S] after the cache.length cached ones -> logits [B, S, V]."""
    T = cache.length
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x, start=T))
    mask = causal_mask(tokens.size(1), tokens.device, past=T)
    for i, layer in enumerate(model.blocks.layers):
        x = layer(x, mask, cache.layer(i))
    return model.lm_head(x)
''',
    name="lm_step_no_final_norm",
)

# unlisted
wrong(
    "ch08_generation",
    "lm_step",
    "passes cache.layer(0) to every block (copy-paste slip), so all layers share one cache "
    "entry: wrong (or a shape error) for any model with more than one layer",
    '''
def lm_step(model, tokens, cache):
    """tokens [B, S] after the cache.length cached ones -> logits [B, S, V]."""
    past = cache.length
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    x = model.dropout(model.pos(model.tok_embed(tokens) * math.sqrt(model.d_model), start=past))
    for block in model.blocks.layers:
        x = block(x, mask, cache.layer(0))
    x = model.blocks.norm(x)
    return model.lm_head(x)
''',
    name="lm_step_same_cache_layer",
)

# listed
wrong(
    "ch08_generation",
    "lm_step",
    "positions not offset by the cache length: model.pos(x) puts every step's tokens at "
    "positions 0, 1, ... again",
    '''
def lm_step(model, tokens, cache):
    """tokens [B, S] after the cache.length cached ones -> logits [B, S, V]."""
    past = cache.length
    mask = causal_mask(tokens.size(1), tokens.device, past=past)
    x = model.tok_embed(tokens) * math.sqrt(model.d_model)
    x = model.dropout(model.pos(x))
    for i, block in enumerate(model.blocks.layers):
        x = block(x, mask, cache.layer(i))
    return model.lm_head(model.blocks.norm(x))
''',
    name="lm_step_positions_not_offset",
)

right(
    "ch08_generation",
    "lm_step",
    '''
def lm_step(model, tokens, cache):
    """tokens [B, S] after the cache.length cached ones -> logits [B, S, V]."""
    start = int(cache.length)           # before anything is appended
    n_new = tokens.size(1)
    keep = causal_mask(n_new, tokens.device, past=start)
    scale = model.d_model ** 0.5
    h = model.dropout(model.pos(model.tok_embed(tokens) * scale, start=start))
    layers = list(model.blocks.layers)
    for idx in range(len(layers)):
        h = layers[idx](h, keep, cache.layer(idx))
    h = model.blocks.norm(h)
    return model.lm_head(h)
''',
    name="lm_step_index_loop",
)

# unlisted
wrong(
    "ch08_generation",
    "generate_greedy",
    "runs the prompt and appends its first token before the loop, then loops max_new_tokens - 1 "
    "times: with max_new_tokens = 0 it still returns one new token",
    '''
def generate_greedy(model, prompt, max_new_tokens):
    """prompt [B, S] -> [B, S + max_new_tokens]: greedy, with a fresh KV cache."""
    cache = KVCache()
    logits = lm_step(model, prompt, cache)
    nxt = logits[:, -1, :].argmax(dim=-1, keepdim=True)
    out = torch.cat([prompt, nxt], dim=1)
    for _ in range(max_new_tokens - 1):
        logits = lm_step(model, nxt, cache)
        nxt = logits[:, -1, :].argmax(dim=-1, keepdim=True)
        out = torch.cat([out, nxt], dim=1)
    return out
''',
    name="generate_greedy_zero_tokens_still_one",
)

# unlisted
wrong(
    "ch08_generation",
    "generate_greedy",
    "turns the chosen tokens [B] into [1, B] with unsqueeze(0) instead of [B, 1]: works for a "
    "batch of one, fails (or feeds the wrong shape) for B > 1",
    '''
def generate_greedy(model, prompt, max_new_tokens):
    """prompt [B, S] -> [B, S + max_new_tokens]: greedy, with a fresh KV cache."""
    cache = KVCache()
    result = prompt
    inp = prompt
    for step in range(max_new_tokens):
        logits = lm_step(model, inp, cache)
        tok = logits[:, -1].argmax(-1)      # [B]
        inp = tok.unsqueeze(0)
        result = torch.cat([result, inp], dim=1)
    return result
''',
    name="generate_greedy_unsqueeze_wrong_axis",
)

# listed
wrong(
    "ch08_generation",
    "generate_greedy",
    "creates one KVCache at module level, outside the function, and reuses it on every call: "
    "the second prompt is read as a continuation of the first",
    '''
_cache = KVCache()


def generate_greedy(model, prompt, max_new_tokens):
    """prompt [B, S] -> [B, S + max_new_tokens]: greedy, with a fresh KV cache."""
    tokens, step_input = prompt, prompt
    for _ in range(max_new_tokens):
        logits = lm_step(model, step_input, _cache)
        step_input = logits[:, -1].argmax(dim=-1, keepdim=True)
        tokens = torch.cat([tokens, step_input], dim=1)
    return tokens
''',
    name="generate_greedy_module_level_cache",
)

right(
    "ch08_generation",
    "generate_greedy",
    '''
def generate_greedy(model, prompt, max_new_tokens):
    """prompt [B, S] -> [B, S + max_new_tokens]: greedy, with a fresh KV cache."""
    if max_new_tokens == 0:
        return prompt
    kv = KVCache()
    pieces = [prompt]
    logits = lm_step(model, prompt, kv)                 # the prompt, once
    for i in range(max_new_tokens):
        choice = logits[:, -1, :].argmax(dim=-1)[:, None]   # [B, 1]
        pieces.append(choice)
        if i + 1 < max_new_tokens:
            logits = lm_step(model, choice, kv)         # each new token, once
    return torch.cat(pieces, dim=1)
''',
    name="generate_greedy_pieces",
)

# ============================================================ extra answers

# unlisted
wrong(
    "ch07_scale",
    "make_loader",
    "passes rank and world_size positionally in the wrong order, DistributedSampler(dataset, "
    "rank, world_size): num_replicas becomes the rank and rank becomes world_size, so the "
    "sampler raises ValueError (invalid rank) for every rank",
    '''
def make_loader(dataset, rank, world_size, epoch, batch_size):
    """The DataLoader process ``rank`` of ``world_size`` iterates in epoch ``epoch``."""
    sampler = DistributedSampler(dataset, rank, world_size, shuffle=True, seed=0)
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)
''',
    name="make_loader_rank_world_swapped",
)

# unlisted
wrong(
    "ch06_own_model",
    "own_blocks",
    "the decoder block builds its causal mask from x.size(0) (the batch size) instead of "
    "x.size(1) (the target length): a shape error when B != St, and the wrong mask size in general",
    """
class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.linear2(self.dropout(torch.relu(self.linear1(x))))


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
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.dropout1(self.self_attn(h, h, h, mask=mask))
            return x + self.dropout2(self.ff(self.norm2(x)))
        x = self.norm1(x + self.dropout1(self.self_attn(x, x, x, mask=mask)))
        return self.norm2(x + self.dropout2(self.ff(x)))


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
        seq_len = x.size(0)
        causal = causal_mask(seq_len).to(x.device)
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask=causal)))
        x = self.norm2(x + self.dropout(self.cross_attn(x, memory, memory, mask=src_mask)))
        return self.norm3(x + self.dropout(self.ff(x)))
""",
    name="own_blocks_causal_from_batch_axis",
)

# unlisted
wrong(
    "ch08_generation",
    "generate_greedy",
    "takes the argmax at the first position of the logits (logits[:, 0]) instead of the last: "
    "after the prompt step the first new token is predicted from the prompt's first token only",
    '''
def generate_greedy(model, prompt, max_new_tokens):
    """prompt [B, S] -> [B, S + max_new_tokens]: greedy, with a fresh KV cache."""
    cache = KVCache()
    seq = prompt
    feed = prompt
    for _ in range(max_new_tokens):
        logits = lm_step(model, feed, cache)
        feed = logits[:, 0].argmax(dim=-1, keepdim=True)
        seq = torch.cat((seq, feed), dim=1)
    return seq
''',
    name="generate_greedy_first_position",
)
