"""A decoding loop read back from the model it drove
(tformer_grading/checks/measure/decode_loops.py).

Bug this guards against: a greedy loop's mask, mode and appended tokens were recorded
by a model class inside one exercise's check, and a decoder-only loop's feed and cache
by hooks inside another's (chapter 8's generate_greedy).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tformer_grading.checks.measure.decode_loops import (
    RecordingDecoder,
    appended,
    causal,
    keep_mask,
    mask_kind,
    recording_lm,
)
from tformer_ref.kv_cache import KVCache
from tformer_ref.model import DecoderOnlyLM


class _Inner(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb, self.out = nn.Embedding(7, 4), nn.Linear(4, 7)

    def encode(self, src):
        return self.emb(src), None

    def decode(self, tgt_in, memory, src_mask, tgt_mask):
        return self.out(self.emb(tgt_in) + memory.mean(1, keepdim=True))


def _greedy(model, src, steps, mask=True, eos=6):
    memory, src_mask = model.encode(src)
    out = torch.zeros(src.size(0), 1, dtype=torch.long)
    for _ in range(steps):
        m = causal(out.size(1), "cpu") if mask else None
        nxt = model.decode(out, memory, src_mask, m)[:, -1].argmax(-1)
        out = torch.cat([out, nxt[:, None]], 1)
    return out


def test_each_step_is_recorded_with_its_mask_and_mode():
    model = RecordingDecoder(_Inner()).eval()
    with torch.no_grad():
        _greedy(model, torch.tensor([[1, 2], [3, 4]]), 3)
    assert [c["length"] for c in model.calls] == [1, 2, 3]
    assert {c["mask"] for c in model.calls[1:]} == {"causal"}
    assert not any(c["training"] or c["grad"] for c in model.calls)
    assert all(c["memory"] for c in model.calls) and model.encoded_rows == 2


def test_a_missing_mask_and_a_foreign_memory_are_seen():
    model = RecordingDecoder(_Inner())
    memory, _ = model.encode(torch.tensor([[1, 2]]))
    model.decode(torch.zeros(1, 2, dtype=torch.long), memory + 1, None)
    assert model.calls[0]["mask"] == "none" and not model.calls[0]["memory"]


def test_the_appended_tokens_are_the_next_prefix_column():
    model = RecordingDecoder(_Inner())
    with torch.no_grad():
        out = _greedy(model, torch.tensor([[1, 2]]), 3)
    got = [tok.tolist() for _, _, tok in appended(model.calls, eos=99)]
    assert got == [[int(out[0, 1])], [int(out[0, 2])]]


def test_masks_are_named_and_a_float_mask_is_refused():
    assert mask_kind(torch.ones(3, 3, dtype=torch.bool)) == "none"
    assert mask_kind(torch.eye(3, dtype=torch.bool)) == "other"
    with pytest.raises(TypeError, match="bool mask"):
        keep_mask(torch.zeros(3, 3), 3)


def _lm():
    torch.manual_seed(0)
    model = DecoderOnlyLM(11, 16, 2, 2, 32, dropout=0.0, max_len=24, pad_id=None)
    return model.eval()


def _cached_loop(model, prompt, n, cache_each_step=False, pass_cache=True):
    cache = KVCache()
    logits, out = model(prompt, cache=cache), prompt
    for _ in range(n):
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        out = torch.cat([out, nxt], 1)
        if cache_each_step:
            cache = KVCache()
        logits = model(nxt, cache=cache) if pass_cache else model(out)
    return out


def _recorded(**mistake):
    model = _lm()
    attention = model.blocks.layers[0].self_attn
    with (
        torch.no_grad(),
        recording_lm(model.tok_embed, model.lm_head, attention) as seen,
    ):
        out = _cached_loop(model, torch.tensor([[1, 2, 3], [4, 5, 6]]), 2, **mistake)
    return model, out, seen


def test_a_cached_loop_is_recorded_step_by_step():
    model, out, seen = _recorded()
    assert [t.tolist() for t in seen.fed] == [
        out[:, :3].tolist(),
        out[:, 3:4].tolist(),
        out[:, 4:5].tolist(),
    ]
    assert [tuple(x.shape) for x in seen.logits] == [(2, 3, 11), (2, 1, 11), (2, 1, 11)]
    assert seen.attended == [(0, 3), (3, 1), (4, 1)]
    assert not model.tok_embed._forward_hooks and not model.lm_head._forward_hooks


def test_a_cache_made_anew_at_each_step_is_seen():
    _, _, seen = _recorded(cache_each_step=True)
    assert seen.attended == [(0, 3), (0, 1), (0, 1)]


def test_a_loop_without_the_cache_is_seen():
    _, out, seen = _recorded(pass_cache=False)
    assert seen.attended == [(0, 3), (None, 4), (None, 5)]
    assert seen.fed[-1].tolist() == out.tolist()


def test_a_causal_mask_read_as_hide_is_named_inverted():
    # Held-out trial 2026-12-07b, b_greedy_inverted_mask: "neither tril nor triu".
    keep = torch.ones(4, 4, dtype=torch.bool).triu(1)  # the future only
    assert mask_kind(keep) == "inverted"
    assert mask_kind(torch.ones(4, 4, dtype=torch.bool).tril(-1)) == "no diagonal"
