"""Training the capstone model: tformer_ref's Transformer against nn.Transformer, and
padding strategies.

1. Time to 99 % held-out exact match on the date task, the seed's 8-head 2-layer model,
   both models trained by the same step (tformer_ref.training.train_step) from the same
   seed on the same batches, in lockstep so that machine load hits both alike.
   Budget (DESIGN.md §6): no slower than nn.Transformer (ratio <= 1.0; run-to-run noise
   is about ±10 %, so the verdict allows 1.1). The per-step time ratio, measured
   interleaved, is reported too: it is the less noisy half of the same comparison.
2. One epoch with dynamic padding and length bucketing against padding every batch to a
   fixed length (pad-to-max): the dataset's longest sequence, and the model's max_len
   (what a tokenizer's padding="max_length" does). Same model, same examples. Reported
   as ours/peer (< 1 is a speed-up), no budget.

Clock: training steps only (evaluation excluded), wall time. Threads: 1.
"""

from __future__ import annotations

import statistics
import time

import torch
from torch.utils.data import DataLoader

from tformer_ref.baselines import TorchTransformer
from tformer_ref.data import (
    BucketBatchSampler,
    CharVocab,
    Collate,
    PairDataset,
    make_pairs,
)
from tformer_ref.decoding import evaluate_accuracy
from tformer_ref.model import Transformer
from torch.optim.lr_scheduler import LambdaLR

from tformer_ref.training import noam_lambda, train_step

# The capstone's first recipe (d_ff 256, length buckets, 1000 steps). The capstone page
# has since moved to d_ff 128, shuffled batches and 440 steps (its own page says why);
# the benchmark keeps this recipe so that its ratios stay comparable from run to run.
CONFIG = dict(d_model=64, n_heads=8, n_layers=2, d_ff=256, dropout=0.0, max_len=32)
N_TRAIN, N_TEST, BATCH, WARMUP, COOLDOWN, STEPS, SEED = (
    20000,
    500,
    64,
    200,
    400,
    1000,
    0,
)


def _data():
    vocab = CharVocab.for_dates()
    train, test = make_pairs(N_TRAIN, N_TEST, seed=SEED)
    return vocab, PairDataset(train, vocab), PairDataset(test, vocab)


def _model(cls, vocab_size):
    torch.manual_seed(SEED)
    return cls(vocab_size, vocab_size, **CONFIG)


def _setup(cls, vocab_size):
    model = _model(cls, vocab_size)
    opt = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    sched = LambdaLR(
        opt,
        lambda s: (
            noam_lambda(s, CONFIG["d_model"], WARMUP) * min(1.0, (STEPS - s) / COOLDOWN)
        ),
    )
    return model, opt, sched


def time_to_accuracy(
    target: float = 0.99, eval_every: int = 100
) -> dict[str, tuple[float | None, int]]:
    """Train tformer_ref's Transformer ("ours") and nn.Transformer ("peer") in
    lockstep, batch by batch.

    Both take the same train_step on the same batch in turn, each with its own clock,
    so that machine load hits them alike (training one after the other, a change of
    load between the runs easily moves the ratio by 30 %). Held-out greedy exact match
    every ``eval_every`` steps (not timed). Returns name -> (seconds of training until
    the first evaluation >= target, or None; that step).
    """
    vocab, train, test = _data()
    loader = DataLoader(
        train,
        batch_sampler=BucketBatchSampler(train.lengths(), BATCH, seed=SEED),
        collate_fn=Collate(),
    )
    test_batches = list(DataLoader(test, batch_size=N_TEST, collate_fn=Collate()))
    runs = {
        "ours": _setup(Transformer, len(vocab)),
        "peer": _setup(TorchTransformer, len(vocab)),
    }
    clock = {k: 0.0 for k in runs}
    reached: dict[str, tuple[float | None, int]] = {k: (None, 0) for k in runs}
    step = 0
    while step < STEPS and any(t is None for t, _ in reached.values()):
        for src, tgt in loader:
            step += 1
            for name, (model, opt, sched) in runs.items():
                if reached[name][0] is not None:
                    continue
                t0 = time.perf_counter()
                train_step(model, src, tgt, opt, sched, max_norm=1.0)
                clock[name] += time.perf_counter() - t0
                if (
                    step % eval_every == 0
                    and evaluate_accuracy(model, test_batches, 20) >= target
                ):
                    reached[name] = (clock[name], step)
            if step >= STEPS or all(t is not None for t, _ in reached.values()):
                break
    return reached


def step_times(rounds: int = 5, iters: int = 5) -> dict[str, float]:
    """Median seconds per training step of both models on the same batch, interleaved
    round by round."""
    vocab, train, _ = _data()
    src, tgt = Collate()([train[i] for i in range(BATCH)])
    models = {
        "ours": _model(Transformer, len(vocab)),
        "peer": _model(TorchTransformer, len(vocab)),
    }
    opts = {k: torch.optim.Adam(m.parameters(), lr=1e-4) for k, m in models.items()}
    for k in models:
        for _ in range(2):
            train_step(models[k], src, tgt, opts[k])
    times = {k: [] for k in models}
    for _ in range(rounds):
        for k in models:
            t0 = time.perf_counter()
            for _ in range(iters):
                train_step(models[k], src, tgt, opts[k])
            times[k].append((time.perf_counter() - t0) / iters)
    return {k: statistics.median(v) for k, v in times.items()}


def epoch_time(pad_to: str | None, n: int = 4000) -> float:
    """Seconds for one epoch over ``n`` examples: random batches padded to the
    dataset's longest sequence (``pad_to="longest"``) or to the model's max_len
    (``"max_len"``), or bucketed dynamic padding (None)."""
    vocab, train, _ = _data()
    items = [train[i] for i in range(n)]
    if pad_to is not None:
        longest = (max(len(s) for s, _ in items), max(len(t) for _, t in items))
        size = (
            longest if pad_to == "longest" else (CONFIG["max_len"], CONFIG["max_len"])
        )
        loader = DataLoader(
            items,
            batch_size=BATCH,
            shuffle=True,
            collate_fn=Collate(pad_to=size),
            generator=torch.Generator().manual_seed(SEED),
        )
    else:
        loader = DataLoader(
            items,
            batch_sampler=BucketBatchSampler(
                [len(s) for s, _ in items], BATCH, seed=SEED
            ),
            collate_fn=Collate(),
        )
    model = _model(Transformer, len(vocab))
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    t0 = time.perf_counter()
    for src, tgt in loader:
        train_step(model, src, tgt, opt)
    return time.perf_counter() - t0


def run() -> list[dict]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _run()
    finally:
        torch.set_num_threads(threads)


def _run() -> list[dict]:
    results = []
    steps = step_times()
    results.append(
        {
            "benchmark": (
                "training step, 8-head 2-layer d=64 "
                "(tformer_ref Transformer vs nn.Transformer)"
            ),
            "ours_ms": steps["ours"] * 1e3,
            "peer_ms": steps["peer"] * 1e3,
            "ratio": steps["ours"] / steps["peer"],
            "budget": 1.1,
        }
    )
    reached = time_to_accuracy()
    (ours_s, ours_steps), (peer_s, peer_steps) = reached["ours"], reached["peer"]
    if ours_s is None or peer_s is None:
        raise RuntimeError(
            f"a model did not reach 99 % (ours: {ours_s}, peer: {peer_s})"
        )
    results.append(
        {
            "benchmark": (
                "time to 99% exact match, date task "
                "(tformer_ref Transformer vs nn.Transformer)"
            ),
            "ours_ms": ours_s * 1e3,
            "peer_ms": peer_s * 1e3,
            "ratio": ours_s / peer_s,
            "budget": 1.1,
            "ours_steps": ours_steps,
            "peer_steps": peer_steps,
        }
    )
    # Interleave the two padding strategies twice and keep the better of each (less
    # noise).
    runs = [
        (epoch_time(None), epoch_time("longest"), epoch_time("max_len"))
        for _ in range(2)
    ]
    dyn, longest, max_len = (min(r[i] for r in runs) for i in range(3))
    for name, fixed in (
        ("the dataset's longest sequence", longest),
        (f"max_len={CONFIG['max_len']}", max_len),
    ):
        results.append(
            {
                "benchmark": (
                    f"one epoch, dynamic padding + bucketing vs padding to {name}"
                ),
                "ours_ms": dyn * 1e3,
                "peer_ms": fixed * 1e3,
                "ratio": dyn / fixed,
                "budget": None,
                "speedup": fixed / dyn,
            }
        )
    return results
