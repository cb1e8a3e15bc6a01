"""Stage tracing: the calls a forward run makes, in order, snapshotted
(tformer_grading/checks/measure/trace.py).

Bug this guards against: three tracers for the blocks of chapters 4 and 5 (a
recorder of layer_norm/linear calls, a hook on the attention, forward hooks on every
part; 2026-12-05 aesthetics review, family F6), each with its own idea of what an
attention call's key is when it is omitted, and of when to copy what it saw.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tformer_grading.checks.measure.trace import NORMS, Trace, trace
from tformer_ref.attention import MultiHeadAttention


class Block(nn.Module):
    def __init__(self, d=8):
        super().__init__()
        self.attn = MultiHeadAttention(d, 2)
        self.norm = nn.LayerNorm(d)
        self.ff = nn.Linear(d, d)

    def forward(self, x, mask=None):
        x = self.norm(x + self.attn(x, mask=mask))  # key and value omitted
        h = self.ff(x)
        h += 1.0  # in place, after the call was recorded
        return h


def _run(block, x, mask=None):
    with (
        torch.no_grad(),
        trace([("attn", block.attn)], NORMS, {"ff": block.ff.weight}) as events,
    ):
        y = block(x, mask)
    return events, y


def test_calls_are_recorded_in_order_with_their_kinds():
    torch.manual_seed(0)
    events, _ = _run(Block(), torch.randn(2, 3, 8))
    assert [e.kind for e in events] == ["attn", "layer_norm", "ff"]


def test_an_omitted_key_and_value_are_read_as_the_query():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 8)
    mask = torch.ones(1, 1, 3, 3, dtype=torch.bool).tril()
    events, _ = _run(Block(), x, mask)
    q, k, v, got_mask = events[0].args
    assert torch.equal(q, x) and torch.equal(k, x) and torch.equal(v, x)
    assert torch.equal(got_mask, mask)


def test_outputs_are_snapshots_not_changed_by_later_in_place_ops():
    torch.manual_seed(0)
    events, y = _run(Block(), torch.randn(2, 3, 8))
    assert torch.allclose(events[-1].out + 1.0, y)


def test_a_wrong_input_is_read_back_from_the_norm_call():
    torch.manual_seed(0)
    block, x = Block(), torch.randn(2, 3, 8)

    def skips_residual(x, mask=None):  # a planted mistake: no residual
        return F.layer_norm(block.attn(x), (8,), block.norm.weight, block.norm.bias)

    with torch.no_grad(), trace([("attn", block.attn)], NORMS) as events:
        skips_residual(x)
    attn, norm = Trace(events).first("attn"), Trace(events).first("layer_norm")
    assert torch.equal(norm.inp, attn.out)


def test_hooks_are_removed_even_when_the_run_raises():
    block = Block()
    try:
        with trace([("attn", block.attn)]):
            block(torch.randn(2, 3, 5))  # the wrong width raises inside
    except Exception:  # noqa: BLE001 - whatever the attention raises
        pass
    assert not block.attn._forward_hooks


def test_a_trace_is_read_by_kind_and_order():
    torch.manual_seed(0)
    events, _ = _run(Block(), torch.randn(2, 3, 8))
    t = Trace(events)
    assert t.after(t.first("attn"), "ff") is events[2]
    assert t.earlier(events[2], "attn") == [events[0]]
    assert t.after(events[2], "attn") is None
