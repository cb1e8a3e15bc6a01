"""The own-model capstone's measured bank (the format: tests/bank/bank.py):
``OwnTransformer`` and ``batch_loss``, assembled from the learner's pieces.

An answer is the learner's last answer cell: a class holding the cell's
``OwnTransformer`` and ``batch_loss``. Its pieces (sections 1-4 of the notebook) are the
solution's answer cells, run here as a notebook runs them, so that an answer's code
reads them as a learner's cell does (``EncoderBlock``, ``embed``, ...); they reach the
test cells as ``others``. Every graded cell of the notebook runs for each answer, the
piece cells too (right pieces: they pass).

A right model trains for the check's whole recipe (about 6 s of one core); a wrong one
is caught by the probes before training, but for the few whose mistake only training
shows.
"""

import functools
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from bank import GENERIC, right, wrong  # noqa: F401
from exercise_cells import Grader, cells
from tformer_ref.device import get_device

CHAPTER = "ch06_own_model"
PIECES = (
    "split_heads",
    "merge_heads",
    "masked_attention",
    "MultiHeadAttention",
    "causal_mask",
    "padding_mask",
    "FeedForward",
    "EncoderBlock",
    "DecoderBlock",
    "sinusoidal_encoding",
    "embed",
)

device = get_device()  # the setup cell's, read by the solution's causal_mask
for _cell in cells(CHAPTER):
    if _cell.kind == "solution" and _cell.name != "own_model":
        exec(_cell.compiled, globals())  # noqa: S102 - the notebook's piece cells
(
    split_heads,
    merge_heads,
    masked_attention,
    MultiHeadAttention,
    causal_mask,
    padding_mask,
    FeedForward,
    EncoderBlock,
    DecoderBlock,
    sinusoidal_encoding,
    embed,
) = (globals()[name] for name in PIECES)

# Every test cell of the notebook, the answer bound to the model cell's two names and
# the pieces to the solution's: a notebook runs every graded cell.
GRADERS = {
    "own_model": Grader(
        CHAPTER,
        ("OwnTransformer", "batch_loss"),
        tuple(c for c in cells(CHAPTER) if c.kind == "test"),
        tuple((name, globals()[name]) for name in PIECES),
    )
}

PAD = 0


# =============================================================================== right


@right("own_model")
class Solution:
    class OwnTransformer(nn.Module):
        def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers):
            super().__init__()
            self.src_embed = nn.Embedding(vocab_size, d_model)
            self.tgt_embed = nn.Embedding(vocab_size, d_model)
            self.register_buffer("pe", sinusoidal_encoding(64, d_model))
            self.encoder = nn.ModuleList(
                EncoderBlock(d_model, n_heads, d_ff, dropout=0.0)
                for _ in range(n_layers)
            )
            self.decoder = nn.ModuleList(
                DecoderBlock(d_model, n_heads, d_ff, dropout=0.0)
                for _ in range(n_layers)
            )
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
        return F.cross_entropy(
            logits.reshape(-1, logits.size(-1)), labels.reshape(-1), ignore_index=PAD
        )


@right("own_model")
class SharedEmbeddingEncodeDecode:
    # One table for both sides (one vocabulary serves both), encode and decode as
    # methods, the class axis moved to dim 1 for cross_entropy.
    class OwnTransformer(nn.Module):
        def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers):
            super().__init__()
            self.tok = nn.Embedding(vocab_size, d_model)
            self.register_buffer("pe", sinusoidal_encoding(64, d_model))
            self.enc_layers = nn.ModuleList(
                [EncoderBlock(d_model, n_heads, d_ff, 0.0) for _ in range(n_layers)]
            )
            self.dec_layers = nn.ModuleList(
                [DecoderBlock(d_model, n_heads, d_ff, 0.0) for _ in range(n_layers)]
            )
            self.proj = nn.Linear(d_model, vocab_size)

        def encode(self, src, src_mask):
            h = embed(src, self.tok, self.pe)
            for layer in self.enc_layers:
                h = layer(h, mask=src_mask)
            return h

        def decode(self, tgt_in, memory, src_mask):
            h = embed(tgt_in, self.tok, self.pe)
            for layer in self.dec_layers:
                h = layer(h, memory, src_mask=src_mask)
            return h

        def forward(self, src, tgt_in):
            src_mask = padding_mask(src, PAD)
            return self.proj(self.decode(tgt_in, self.encode(src, src_mask), src_mask))

    def batch_loss(model, src, tgt):
        logits = model(src, tgt[:, :-1])
        return F.cross_entropy(logits.transpose(1, 2), tgt[:, 1:], ignore_index=PAD)


@right("own_model")
class InlineEmbeddingMaskedMean:
    # embed written out in forward; the loss a masked mean of per-token losses.
    class OwnTransformer(nn.Module):
        def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers):
            super().__init__()
            self.d_model = d_model
            self.src_emb = nn.Embedding(vocab_size, d_model)
            self.tgt_emb = nn.Embedding(vocab_size, d_model)
            self.register_buffer("pe", sinusoidal_encoding(64, d_model))
            self.encoder = nn.ModuleList()
            self.decoder = nn.ModuleList()
            for _ in range(n_layers):
                self.encoder.append(EncoderBlock(d_model, n_heads, d_ff, dropout=0.0))
                self.decoder.append(DecoderBlock(d_model, n_heads, d_ff, dropout=0.0))
            self.out = nn.Linear(d_model, vocab_size)

        def _src_mask(self, src):
            return padding_mask(src, PAD)

        def forward(self, src, tgt_in):
            scale = math.sqrt(self.d_model)
            mask = self._src_mask(src)
            h = self.src_emb(src) * scale + self.pe[: src.size(1)]
            for block in self.encoder:
                h = block(h, mask)
            y = self.tgt_emb(tgt_in) * scale + self.pe[: tgt_in.size(1)]
            for block in self.decoder:
                y = block(y, h, mask)
            return self.out(y)

    def batch_loss(model, src, tgt):
        logits = model(src, tgt[:, :-1])
        labels = tgt[:, 1:]
        per_token = F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), reduction="none"
        )
        real = (labels != PAD).reshape(-1).float()
        return (per_token * real).sum() / real.sum()


@right("own_model")
class LogSoftmaxAndNllLoss:
    # The model returns log-probabilities and the loss is nll_loss: the same numbers
    # (cross_entropy of log-probabilities would be too, log_softmax being idempotent).
    class OwnTransformer(Solution.OwnTransformer):
        def forward(self, src, tgt_in):
            return F.log_softmax(super().forward(src, tgt_in), dim=-1)

    def batch_loss(model, src, tgt):
        log_probs = model(src, tgt[:, :-1])
        return F.nll_loss(
            log_probs.view(-1, log_probs.size(-1)),
            tgt[:, 1:].contiguous().view(-1),
            ignore_index=PAD,
        )


@right("own_model")
class WholeTargetLastLogitDropped:
    # Feeds the whole target and drops the last position's logits: with a causal
    # decoder the first St-1 positions' logits are those of tgt[:, :-1].
    OwnTransformer = Solution.OwnTransformer

    def batch_loss(model, src, tgt):
        logits = model(src, tgt)[:, :-1]
        return F.cross_entropy(
            logits.reshape(-1, logits.size(-1)),
            tgt[:, 1:].reshape(-1),
            ignore_index=PAD,
        )


@right("own_model")
class ReduceOverBlocksLossModule:
    # The stacks folded with functools.reduce; the loss an nn.CrossEntropyLoss.
    class OwnTransformer(nn.Module):
        def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers):
            super().__init__()
            self.embeddings = nn.ModuleDict(
                {
                    "src": nn.Embedding(vocab_size, d_model),
                    "tgt": nn.Embedding(vocab_size, d_model),
                }
            )
            self.register_buffer(
                "pe", sinusoidal_encoding(64, d_model), persistent=False
            )
            blocks = [
                EncoderBlock(d_model, n_heads, d_ff, 0.0) for _ in range(n_layers)
            ]
            self.encoder = nn.ModuleList(blocks)
            blocks = [
                DecoderBlock(d_model, n_heads, d_ff, 0.0) for _ in range(n_layers)
            ]
            self.decoder = nn.ModuleList(blocks)
            self.lm_head = nn.Linear(d_model, vocab_size)

        def forward(self, src, tgt_in):
            keep = padding_mask(src, PAD)
            memory = functools.reduce(
                lambda h, block: block(h, keep),
                self.encoder,
                embed(src, self.embeddings["src"], self.pe),
            )
            out = functools.reduce(
                lambda h, block: block(h, memory, keep),
                self.decoder,
                embed(tgt_in, self.embeddings["tgt"], self.pe),
            )
            return self.lm_head(out)

    def batch_loss(model, src, tgt):
        criterion = nn.CrossEntropyLoss(ignore_index=PAD)
        logits = model(src, tgt[:, :-1])
        return criterion(logits.flatten(0, 1), tgt[:, 1:].flatten())


@right("own_model")
class GatheredLogProbs:
    # The cross-entropy by hand: gather the label's log-probability, mean over the
    # real tokens with masked_select.
    OwnTransformer = Solution.OwnTransformer

    def batch_loss(model, src, tgt):
        n = tgt.size(1) - 1
        tgt_in, labels = tgt.narrow(1, 0, n), tgt.narrow(1, 1, n)
        log_probs = model(src, tgt_in).log_softmax(dim=-1)
        picked = log_probs.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
        return -picked.masked_select(labels != PAD).mean()


@right("own_model")
class EnumeratedBlocksKeywordMasks:
    # Blocks indexed by position in the loop, masks passed by keyword, a source mask
    # built from ``src.ne(PAD)`` by hand in the mask function's layout.
    class OwnTransformer(nn.Module):
        def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers):
            super().__init__()
            self.n_layers = n_layers
            self.src_embedding = nn.Embedding(vocab_size, d_model)
            self.tgt_embedding = nn.Embedding(vocab_size, d_model)
            pe = sinusoidal_encoding(64, d_model)
            self.register_buffer("pe", pe)
            self.enc = nn.ModuleList(
                [
                    EncoderBlock(d_model, n_heads, d_ff, dropout=0.0)
                    for _ in range(n_layers)
                ]
            )
            self.dec = nn.ModuleList(
                [
                    DecoderBlock(d_model, n_heads, d_ff, dropout=0.0)
                    for _ in range(n_layers)
                ]
            )
            self.fc_out = nn.Linear(d_model, vocab_size)

        def forward(self, src, tgt_in):
            src_mask = src.ne(PAD)[:, None, None, :]
            enc = embed(src, self.src_embedding, self.pe)
            for i in range(self.n_layers):
                enc = self.enc[i](enc, mask=src_mask)
            dec = embed(tgt_in, self.tgt_embedding, self.pe)
            for i in range(self.n_layers):
                dec = self.dec[i](dec, memory=enc, src_mask=src_mask)
            return self.fc_out(dec)

    def batch_loss(model, src, tgt):
        decoder_input = tgt[:, :-1]
        target = tgt[:, 1:]
        logits = model(src, decoder_input)
        B, T, V = logits.shape
        return F.cross_entropy(
            logits.reshape(B * T, V), target.reshape(B * T), ignore_index=0
        )


# ======================================================================= wrong: listed
# The mistakes the check's probes are written for.


@wrong(
    "own_model",
    r"padding the source changes the logits: the encoder's self-attention reads",
    listed=True,
)
class EncoderWithoutSourceMask:
    class OwnTransformer(Solution.OwnTransformer):
        def forward(self, src, tgt_in):
            src_mask = padding_mask(src, PAD)
            memory = embed(src, self.src_embed, self.pe)
            for block in self.encoder:
                memory = block(memory)
            x = embed(tgt_in, self.tgt_embed, self.pe)
            for block in self.decoder:
                x = block(x, memory, src_mask)
            return self.generator(x)

    batch_loss = Solution.batch_loss


@wrong(
    "own_model",
    r"padding the source .*: the decoder's cross-attention reads the padded",
    listed=True,
)
class CrossAttentionWithoutSourceMask:
    class OwnTransformer(Solution.OwnTransformer):
        def forward(self, src, tgt_in):
            src_mask = padding_mask(src, PAD)
            memory = embed(src, self.src_embed, self.pe)
            for block in self.encoder:
                memory = block(memory, src_mask)
            x = embed(tgt_in, self.tgt_embed, self.pe)
            for block in self.decoder:
                x = block(x, memory)
            return self.generator(x)

    batch_loss = Solution.batch_loss


@wrong("own_model", r"batch_loss counts the padding", listed=True)
class LossCountsPadding:
    OwnTransformer = Solution.OwnTransformer

    def batch_loss(model, src, tgt):
        logits = model(src, tgt[:, :-1])
        return F.cross_entropy(
            logits.reshape(-1, logits.size(-1)), tgt[:, 1:].reshape(-1)
        )


@wrong("own_model", r"gives the model the whole target.*not shifted", listed=True)
class TargetNotShifted:
    OwnTransformer = Solution.OwnTransformer

    def batch_loss(model, src, tgt):
        logits = model(src, tgt)
        return F.cross_entropy(
            logits.reshape(-1, logits.size(-1)), tgt.reshape(-1), ignore_index=PAD
        )


@wrong("own_model", r"gives the model the labels .* as its input", listed=True)
class ShiftedTheWrongWay:
    # Decoder input and labels swapped: reads tgt[1:], predicts tgt[:-1].
    OwnTransformer = Solution.OwnTransformer

    def batch_loss(model, src, tgt):
        labels, tgt_in = tgt[:, :-1], tgt[:, 1:]
        logits = model(src, tgt_in)
        return F.cross_entropy(
            logits.reshape(-1, logits.size(-1)), labels.reshape(-1), ignore_index=PAD
        )


@wrong("own_model", r"compares each position with its own input token", listed=True)
class LabelsAreTheInput:
    OwnTransformer = Solution.OwnTransformer

    def batch_loss(model, src, tgt):
        tgt_in = tgt[:, :-1]
        logits = model(src, tgt_in)
        return F.cross_entropy(
            logits.reshape(-1, logits.size(-1)), tgt_in.reshape(-1), ignore_index=PAD
        )


@wrong("own_model", r"some weights are outside the state_dict", listed=True)
class BlocksInAPythonList:
    class OwnTransformer(nn.Module):
        def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers):
            super().__init__()
            self.src_embed = nn.Embedding(vocab_size, d_model)
            self.tgt_embed = nn.Embedding(vocab_size, d_model)
            self.register_buffer("pe", sinusoidal_encoding(64, d_model))
            self.encoder = [
                EncoderBlock(d_model, n_heads, d_ff, dropout=0.0)
                for _ in range(n_layers)
            ]
            self.decoder = [
                DecoderBlock(d_model, n_heads, d_ff, dropout=0.0)
                for _ in range(n_layers)
            ]
            self.generator = nn.Linear(d_model, vocab_size)

        forward = Solution.OwnTransformer.forward

    batch_loss = Solution.batch_loss


@wrong("own_model", r"the model returns probabilities, not logits", listed=True)
class SoftmaxBeforeCrossEntropy:
    class OwnTransformer(Solution.OwnTransformer):
        def forward(self, src, tgt_in):
            return torch.softmax(super().forward(src, tgt_in), dim=-1)

    batch_loss = Solution.batch_loss


@wrong("own_model", r"your EncoderBlock encoder\.0 has no effect", listed=True)
class EncoderBlocksReadTheEmbeddings:
    class OwnTransformer(Solution.OwnTransformer):
        def forward(self, src, tgt_in):
            src_mask = padding_mask(src, PAD)
            x_src = embed(src, self.src_embed, self.pe)
            for block in self.encoder:
                memory = block(x_src, src_mask)
            x = embed(tgt_in, self.tgt_embed, self.pe)
            for block in self.decoder:
                x = block(x, memory, src_mask)
            return self.generator(x)

    batch_loss = Solution.batch_loss


@wrong("own_model", r"your DecoderBlock decoder\.0 has no effect", listed=True)
class DecoderBlocksReadTheEmbeddings:
    class OwnTransformer(Solution.OwnTransformer):
        def forward(self, src, tgt_in):
            src_mask = padding_mask(src, PAD)
            memory = embed(src, self.src_embed, self.pe)
            for block in self.encoder:
                memory = block(memory, src_mask)
            y = embed(tgt_in, self.tgt_embed, self.pe)
            for block in self.decoder:
                x = block(y, memory, src_mask)
            return self.generator(x)

    batch_loss = Solution.batch_loss


@wrong("own_model", r"the decoder sees no positions", listed=True)
class PositionsOnTheSourceOnly:
    class OwnTransformer(Solution.OwnTransformer):
        def forward(self, src, tgt_in):
            src_mask = padding_mask(src, PAD)
            memory = embed(src, self.src_embed, self.pe)
            for block in self.encoder:
                memory = block(memory, src_mask)
            x = self.tgt_embed(tgt_in) * math.sqrt(self.pe.size(1))
            for block in self.decoder:
                x = block(x, memory, src_mask)
            return self.generator(x)

    batch_loss = Solution.batch_loss


@wrong("own_model", r"the encoder sees no positions", listed=True)
class PositionsOnTheTargetOnly:
    class OwnTransformer(Solution.OwnTransformer):
        def forward(self, src, tgt_in):
            src_mask = padding_mask(src, PAD)
            memory = self.src_embed(src) * math.sqrt(self.pe.size(1))
            for block in self.encoder:
                memory = block(memory, src_mask)
            x = embed(tgt_in, self.tgt_embed, self.pe)
            for block in self.decoder:
                x = block(x, memory, src_mask)
            return self.generator(x)

    batch_loss = Solution.batch_loss


@wrong("own_model", r"must return a scalar tensor, got float", listed=True)
class LossAsAPythonNumber:
    OwnTransformer = Solution.OwnTransformer

    def batch_loss(model, src, tgt):
        logits = model(src, tgt[:, :-1])
        loss = F.cross_entropy(
            logits.reshape(-1, logits.size(-1)), tgt[:, 1:].reshape(-1), ignore_index=0
        )
        return loss.item()


@wrong(
    "own_model",
    r"must return logits of shape \[2, 6, \d+\].*got \[2, 6\]\n",
    listed=False,
)
class ReturnsTheArgmax:
    # The predicted token ids: what decoding wants, not what the loss does.
    class OwnTransformer(Solution.OwnTransformer):
        def forward(self, src, tgt_in):
            return super().forward(src, tgt_in).argmax(dim=-1)

    batch_loss = Solution.batch_loss


# ===================================================================== wrong: unlisted
# What a learner assembling a Transformer gets wrong that no probe was written from.


@wrong(
    "own_model",
    r"must return logits of shape \[2, 6, \d+\].*got \[2, 6, 32\]",
    listed=False,
)
class NoOutputLayer:
    # The decoder's states returned as they are: d_model numbers, not V.
    class OwnTransformer(Solution.OwnTransformer):
        def forward(self, src, tgt_in):
            src_mask = padding_mask(src, PAD)
            memory = embed(src, self.src_embed, self.pe)
            for block in self.encoder:
                memory = block(memory, src_mask)
            x = embed(tgt_in, self.tgt_embed, self.pe)
            for block in self.decoder:
                x = block(x, memory, src_mask)
            return x

    batch_loss = Solution.batch_loss


@wrong(
    "own_model",
    r"padding the source .*: the encoder's self-attention reads the padded",
    listed=False,
)
class SequentialEncoderDropsTheMask:
    # nn.Sequential calls each block with one argument: the mask never reaches it.
    class OwnTransformer(Solution.OwnTransformer):
        def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers):
            super().__init__(vocab_size, d_model, n_heads, d_ff, n_layers)
            self.encoder = nn.Sequential(
                *[EncoderBlock(d_model, n_heads, d_ff, 0.0) for _ in range(n_layers)]
            )

        def forward(self, src, tgt_in):
            src_mask = padding_mask(src, PAD)
            memory = self.encoder(embed(src, self.src_embed, self.pe))
            x = embed(tgt_in, self.tgt_embed, self.pe)
            for block in self.decoder:
                x = block(x, memory, src_mask)
            return self.generator(x)

    batch_loss = Solution.batch_loss


@wrong("own_model", r"padding the source changes the logits", listed=False)
class PaddingMaskWithTheWrongId:
    # The mask built for id 1 (BOS), which no source holds: nothing is masked.
    class OwnTransformer(Solution.OwnTransformer):
        def forward(self, src, tgt_in):
            src_mask = padding_mask(src, 1)
            memory = embed(src, self.src_embed, self.pe)
            for block in self.encoder:
                memory = block(memory, src_mask)
            x = embed(tgt_in, self.tgt_embed, self.pe)
            for block in self.decoder:
                x = block(x, memory, src_mask)
            return self.generator(x)

    batch_loss = Solution.batch_loss


@wrong("own_model", r"padding the source changes the logits", listed=False)
class InvertedSourceMask:
    # "mask the padding": True where the source IS padding, the opposite convention.
    class OwnTransformer(Solution.OwnTransformer):
        def forward(self, src, tgt_in):
            src_mask = ~padding_mask(src, PAD)
            memory = embed(src, self.src_embed, self.pe)
            for block in self.encoder:
                memory = block(memory, src_mask)
            x = embed(tgt_in, self.tgt_embed, self.pe)
            for block in self.decoder:
                x = block(x, memory, src_mask)
            return self.generator(x)

    batch_loss = Solution.batch_loss


@wrong(
    "own_model",
    r"EncoderBlock blocks \(encoder\.0, encoder\.1\) run and get a zero",
    listed=False,
)
class CrossAttentionReadsTheDecoder:
    # The decoder block given its own states as memory: the encoder is never read.
    class OwnTransformer(Solution.OwnTransformer):
        def forward(self, src, tgt_in):
            src_mask = padding_mask(src, PAD)
            memory = embed(src, self.src_embed, self.pe)
            for block in self.encoder:
                memory = block(memory, src_mask)
            x = embed(tgt_in, self.tgt_embed, self.pe)
            for block in self.decoder:
                x = block(x, x)
            return self.generator(x)

    batch_loss = Solution.batch_loss


@wrong(
    "own_model",
    r"EncoderBlock blocks \(encoder\.0, encoder\.1\) run and get a zero",
    listed=False,
)
class EncoderSkipped:
    # The decoder reads the source embeddings: the encoder runs and is never read.
    class OwnTransformer(Solution.OwnTransformer):
        def forward(self, src, tgt_in):
            src_mask = padding_mask(src, PAD)
            src_x = embed(src, self.src_embed, self.pe)
            memory = src_x
            for block in self.encoder:
                memory = block(memory, src_mask)
            x = embed(tgt_in, self.tgt_embed, self.pe)
            for block in self.decoder:
                x = block(x, src_x, src_mask)
            return self.generator(x)

    batch_loss = Solution.batch_loss


@wrong(
    "own_model",
    r"size of tensor a \(6\) must match the size of tensor b \(9\)"
    r".*6 \(St\) against 9 \(Ss\)",
    listed=False,
)
class TargetPaddingMaskToCrossAttention:
    # The decoder given the target's padding mask where the source's belongs.
    class OwnTransformer(Solution.OwnTransformer):
        def forward(self, src, tgt_in):
            src_mask = padding_mask(src, PAD)
            memory = embed(src, self.src_embed, self.pe)
            for block in self.encoder:
                memory = block(memory, src_mask)
            tgt_mask = padding_mask(tgt_in, PAD)
            x = embed(tgt_in, self.tgt_embed, self.pe)
            for block in self.decoder:
                x = block(x, memory, tgt_mask)
            return self.generator(x)

    batch_loss = Solution.batch_loss


@wrong(
    "own_model",
    r"must return logits of shape \[2, 6, \d+\].*got \[2, 9, \d+\]",
    listed=False,
)
class ForwardArgumentsSwapped:
    # forward(tgt_in, src): the source decoded, the target encoded.
    class OwnTransformer(Solution.OwnTransformer):
        def forward(self, tgt_in, src):
            return super().forward(src, tgt_in)

    batch_loss = Solution.batch_loss


@wrong("own_model", r"smooths the labels \(label_smoothing=0\.1\)", listed=False)
class LabelSmoothing:
    # Smoothing "as in the paper": not the loss the exercise asks for.
    OwnTransformer = Solution.OwnTransformer

    def batch_loss(model, src, tgt):
        logits = model(src, tgt[:, :-1])
        return F.cross_entropy(
            logits.reshape(-1, logits.size(-1)),
            tgt[:, 1:].reshape(-1),
            ignore_index=PAD,
            label_smoothing=0.1,
        )


@wrong(
    "own_model", r"sums the cross-entropy over the 10 real label tokens", listed=False
)
class SumOverTokens:
    OwnTransformer = Solution.OwnTransformer

    def batch_loss(model, src, tgt):
        logits = model(src, tgt[:, :-1])
        return F.cross_entropy(
            logits.reshape(-1, logits.size(-1)),
            tgt[:, 1:].reshape(-1),
            ignore_index=PAD,
            reduction="sum",
        )


@wrong(
    "own_model",
    r"divides the summed cross-entropy by the batch size \(2\)",
    listed=False,
)
class MeanOverBatchOfSentenceSums:
    OwnTransformer = Solution.OwnTransformer

    def batch_loss(model, src, tgt):
        logits = model(src, tgt[:, :-1])
        labels = tgt[:, 1:]
        per_token = F.cross_entropy(
            logits.transpose(1, 2), labels, ignore_index=PAD, reduction="none"
        )
        return per_token.sum(dim=1).mean()


@wrong("own_model", r"averages each sentence's mean cross-entropy", listed=False)
class MeanOfSentenceMeans:
    # Each sentence's mean, then their mean: a short date's tokens weigh more.
    OwnTransformer = Solution.OwnTransformer

    def batch_loss(model, src, tgt):
        logits = model(src, tgt[:, :-1])
        labels = tgt[:, 1:]
        per_token = F.cross_entropy(
            logits.transpose(1, 2), labels, ignore_index=PAD, reduction="none"
        )
        real = (labels != PAD).float()
        return ((per_token * real).sum(1) / real.sum(1)).mean()


@wrong("own_model", r"leaves out the labels 2 \(EOS\).*ignore_index is 2", listed=False)
class IgnoresEosNotPad:
    # The wrong special id: the EOS labels left out, the padding counted.
    OwnTransformer = Solution.OwnTransformer

    def batch_loss(model, src, tgt):
        logits = model(src, tgt[:, :-1])
        return F.cross_entropy(
            logits.reshape(-1, logits.size(-1)), tgt[:, 1:].reshape(-1), ignore_index=2
        )


@wrong(
    "own_model",
    r"nll_loss of the logits, which expects log-probabilities",
    listed=False,
)
class NllLossOnRawLogits:
    # nll_loss expects log-probabilities; given logits it is minus the label's logit.
    OwnTransformer = Solution.OwnTransformer

    def batch_loss(model, src, tgt):
        logits = model(src, tgt[:, :-1])
        return F.nll_loss(
            logits.reshape(-1, logits.size(-1)),
            tgt[:, 1:].reshape(-1),
            ignore_index=PAD,
        )


@wrong("own_model", r"Expected target size", listed=False)
class CrossEntropyWithoutFlattening:
    # [B, St, V] against [B, St]: cross_entropy reads dim 1 as the classes.
    OwnTransformer = Solution.OwnTransformer

    def batch_loss(model, src, tgt):
        logits = model(src, tgt[:, :-1])
        return F.cross_entropy(logits, tgt[:, 1:], ignore_index=PAD)


@wrong(
    "own_model",
    r"EncoderBlock encoder\.0 is the same object as encoder\.1",
    listed=False,
)
class OneBlockReused:
    # One block built, the same object n_layers times in the list.
    class OwnTransformer(Solution.OwnTransformer):
        def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers):
            super().__init__(vocab_size, d_model, n_heads, d_ff, n_layers)
            block = EncoderBlock(d_model, n_heads, d_ff, dropout=0.0)
            self.encoder = nn.ModuleList([block] * n_layers)

    batch_loss = Solution.batch_loss


@wrong("own_model", r"the encoder's self-attention is causal", listed=False)
class CausalMaskOnTheEncoder:
    # "the blocks need a causal mask": the encoder's self-attention hides later
    # source characters too.
    class OwnTransformer(Solution.OwnTransformer):
        def forward(self, src, tgt_in):
            src_mask = padding_mask(src, PAD)
            enc_mask = src_mask & causal_mask(src.size(1)).to(src.device)
            memory = embed(src, self.src_embed, self.pe)
            for block in self.encoder:
                memory = block(memory, enc_mask)
            x = embed(tgt_in, self.tgt_embed, self.pe)
            for block in self.decoder:
                x = block(x, memory, src_mask)
            return self.generator(x)

    batch_loss = Solution.batch_loss


@wrong(
    "own_model",
    r"first EncoderBlock gets the same vector at every position",
    listed=False,
)
class PositionsAddedAfterTheBlocks:
    class OwnTransformer(Solution.OwnTransformer):
        def forward(self, src, tgt_in):
            src_mask = padding_mask(src, PAD)
            scale = math.sqrt(self.pe.size(1))
            memory = self.src_embed(src) * scale
            for block in self.encoder:
                memory = block(memory, src_mask)
            memory = memory + self.pe[: src.size(1)]
            x = self.tgt_embed(tgt_in) * scale
            for block in self.decoder:
                x = block(x, memory, src_mask)
            return self.generator(x + self.pe[: tgt_in.size(1)])

    batch_loss = Solution.batch_loss


@wrong(
    "own_model",
    r"padding the source .*: the decoder's cross-attention reads the padded",
    listed=False,
)
class DecodeWithoutTheSourceMask:
    # encode() masks the padding; decode(tgt_in, memory) never gets the mask to pass on
    class OwnTransformer(Solution.OwnTransformer):
        def encode(self, src):
            x = embed(src, self.src_embed, self.pe)
            for block in self.encoder:
                x = block(x, padding_mask(src, PAD))
            return x

        def decode(self, tgt_in, memory):
            y = embed(tgt_in, self.tgt_embed, self.pe)
            for block in self.decoder:
                y = block(y, memory, None)
            return self.generator(y)

        def forward(self, src, tgt_in):
            return self.decode(tgt_in, self.encode(src))

    batch_loss = Solution.batch_loss
