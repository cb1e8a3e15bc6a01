"""Chapter 5 graded with the real nbgrader CLI: generate -> autograde -> feedback.

One autograde run grades the solution, the untouched student version and one buggy
submission per diagnosed pitfall; each must score exactly what it deserves, and the
feedback must name the pitfall.
"""

import pytest

from course import Buggy, GradedChapter

CHAPTER = "ch05_model"
FULL = {
    "test_sinusoidal": 3,
    "test_embed": 2,
    "test_decoder_block": 4,
    "test_decoder_behaviour": 2,
    "test_decoder_by_hand": 1,
}

# Right: float32 and exp/log instead of float64 and pow.
PE_FLOAT32_EXP = """
def sinusoidal_encoding(n_positions, d_model):
    position = torch.arange(n_positions, dtype=torch.float).unsqueeze(1)
    div_term = torch.exp(
        torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
    pe = torch.zeros(n_positions, d_model)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe
"""
# cos on the even columns and sin on the odd ones.
PE_SWAPPED = """
def sinusoidal_encoding(n_positions, d_model):
    position = torch.arange(n_positions, dtype=torch.float).unsqueeze(1)
    div_term = torch.exp(
        torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
    pe = torch.zeros(n_positions, d_model)
    pe[:, 0::2] = torch.cos(position * div_term)
    pe[:, 1::2] = torch.sin(position * div_term)
    return pe
"""
# The exponent counts the pairs 0, 1, 2, ... over d_model: i/D instead of 2i/D.
PE_WRONG_FREQUENCIES = """
def sinusoidal_encoding(n_positions, d_model):
    position = torch.arange(n_positions, dtype=torch.float).unsqueeze(1)
    div_term = torch.exp(
        torch.arange(0, d_model // 2).float() * (-math.log(10000.0) / d_model))
    pe = torch.zeros(n_positions, d_model)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe
"""
# Hands the table to the reference's function: the hidden by-hand test tells.
PE_REFERENCE = """
def sinusoidal_encoding(n_positions, d_model):
    from tformer_ref.positions import sinusoidal_encoding as ref
    return ref(n_positions, d_model)
"""
# The embeddings are not multiplied by √d_model before the positions are added.
EMBED_NO_SCALE = """
def embed(tokens, table, pe):
    return table(tokens) + pe[: tokens.size(1)]
"""
# Right: functional dropout, the norms in a ModuleList, the causal mask built inline.
DECODER_FUNCTIONAL_DROPOUT = """
class DecoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.masked_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.enc_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))
        self.norms = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(3))
        self.p = dropout

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        drop = lambda t: F.dropout(t, self.p, self.training)
        x = self.norms[0](x + drop(self.masked_attn(x, x, x, mask=causal)))
        x = self.norms[1](x + drop(self.enc_attn(x, memory, memory, mask=src_mask)))
        return self.norms[2](x + drop(self.ff(x)))
"""
# The self-attention gets no mask: each target position sees the ones after it.
DECODER_NO_CAUSAL = """
class DecoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.masked_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.enc_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))
        self.norms = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(3))
        self.p = dropout

    def forward(self, x, memory, src_mask=None):
        drop = lambda t: F.dropout(t, self.p, self.training)
        x = self.norms[0](x + drop(self.masked_attn(x, x, x)))
        x = self.norms[1](x + drop(self.enc_attn(x, memory, memory, mask=src_mask)))
        return self.norms[2](x + drop(self.ff(x)))
"""
# Cross-attention reads its keys and values from x, not from the encoder's memory.
DECODER_CROSS_FROM_DECODER = """
class DecoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.masked_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.enc_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))
        self.norms = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(3))
        self.p = dropout

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        drop = lambda t: F.dropout(t, self.p, self.training)
        x = self.norms[0](x + drop(self.masked_attn(x, x, x, mask=causal)))
        x = self.norms[1](x + drop(self.enc_attn(x, x, x, mask=src_mask)))
        return self.norms[2](x + drop(self.ff(x)))
"""
# The by-hand cell too: the judge runs the block's behaviour probes in its place
# (tformer_grading/judge/registry.py), and these blocks fail them.
DECODER_CELLS = ("test_decoder_block", "test_decoder_behaviour", "test_decoder_by_hand")

BUGGY = {
    "sin_cos_swapped": Buggy(
        answers={"sinusoidal_encoding": PE_SWAPPED},
        zero=("test_sinusoidal",),
        feedback="sin and cos swapped",
    ),
    "wrong_frequencies": Buggy(
        answers={"sinusoidal_encoding": PE_WRONG_FREQUENCIES},
        zero=("test_sinusoidal",),
        feedback="wrong frequencies (exponent i/D, not 2i/D)",
    ),
    "reference_table": Buggy(
        answers={"sinusoidal_encoding": PE_REFERENCE},
        zero=("test_sinusoidal",),
        feedback="calls tformer_ref.sinusoidal_encoding",
    ),
    "no_scale": Buggy(
        answers={"embed": EMBED_NO_SCALE},
        zero=("test_embed",),
        feedback="missing √d_model embedding scale",
    ),
    "no_causal_mask": Buggy(
        answers={"decoder_block": DECODER_NO_CAUSAL},
        zero=DECODER_CELLS,
        feedback="decoder self-attention without the causal mask",
    ),
    "cross_from_decoder": Buggy(
        answers={"decoder_block": DECODER_CROSS_FROM_DECODER},
        zero=DECODER_CELLS,
        feedback="cross-attention taking keys/values from the decoder",
    ),
}


# One autograde run per chapter, on one worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(CHAPTER)]


class TestGrading(GradedChapter):
    chapter, full, buggy = CHAPTER, FULL, BUGGY
    hidden_marker, hidden_student = "check_decoder_by_hand", "reference_table"
    right_variants = {
        "written_differently": {
            "sinusoidal_encoding": PE_FLOAT32_EXP,
            "decoder_block": DECODER_FUNCTIONAL_DROPOUT,
        }
    }
