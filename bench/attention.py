"""Multi-head attention, forward + backward: tformer_ref against nn.MultiheadAttention.

Budget (DESIGN.md §6): the fused path at most 1.1x PyTorch's module, same shapes,
fp32, CPU. The plain path (the one the lessons teach) is reported for
information: it materialises the [B, H, S, S] scores.
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.nn as nn

from tformer_ref.attention import MultiHeadAttention

B, S, D, H = 32, 64, 512, 8


def _torch_peer() -> nn.Module:
    module = nn.MultiheadAttention(D, H, batch_first=True)

    class Peer(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = module

        def forward(self, x):
            return self.inner(x, x, x, need_weights=False)[0]

    return Peer()


def _step_time(module: nn.Module, x: torch.Tensor, iters: int) -> float:
    start = time.perf_counter()
    for _ in range(iters):
        module(x).sum().backward()
    return (time.perf_counter() - start) / iters


def run(rounds: int = 5, iters: int = 3) -> list[dict]:
    torch.manual_seed(0)
    x = torch.randn(B, S, D)
    contenders = {
        "torch nn.MultiheadAttention": _torch_peer(),
        "tformer_ref fused": MultiHeadAttention(D, H, fused=True),
        "tformer_ref plain": MultiHeadAttention(D, H),
    }
    for m in contenders.values():
        m.train()  # dropout is 0: train mode only keeps autograd's usual path
        _step_time(m, x, 2)  # warm-up
    times = {name: [] for name in contenders}
    # Interleave the contenders round by round so that machine noise hits them alike.
    for _ in range(rounds):
        for name, m in contenders.items():
            times[name].append(_step_time(m, x, iters))
    peer = statistics.median(times["torch nn.MultiheadAttention"])
    results = []
    for name in ("tformer_ref fused", "tformer_ref plain"):
        ours = statistics.median(times[name])
        results.append(
            {
                "benchmark": f"MHA fwd+bwd B={B} S={S} D={D} H={H} fp32 CPU: {name}",
                "ours_ms": ours * 1e3,
                "peer_ms": peer * 1e3,
                "ratio": ours / peer,
                "budget": 1.1 if name == "tformer_ref fused" else None,
            }
        )
    return results
