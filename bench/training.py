"""Training the capstone model: tformer_ref's Transformer against nn.Transformer, and padding strategies.

1. Time to 99 % held-out exact match on the date task, the seed's 8-head 2-layer model, both models
   trained by the same loop (tformer_ref.training.fit) from the same seed on the same batches.
   Budget (DESIGN.md §6): no slower than nn.Transformer (ratio <= 1.0; run-to-run noise is about
   ±10 %, so the verdict allows 1.1). The per-step time ratio, measured interleaved, is reported too:
   it is the less noisy half of the same comparison.
2. One epoch with dynamic padding and length bucketing against padding every batch to the longest
   sequence of the dataset (pad-to-max), same model, same examples. Reported as ours/peer (< 1 is a
   speed-up), no budget.

Clock: training steps only (evaluation excluded), wall time. Threads: 1, as in the capstone.
"""
from __future__ import annotations

import statistics
import time

import torch
from torch.utils.data import DataLoader

from tformer_ref.baselines import TorchTransformer
from tformer_ref.data import BucketBatchSampler, CharVocab, Collate, PairDataset, make_pairs
from tformer_ref.decoding import evaluate_accuracy
from tformer_ref.model import Transformer
from torch.optim.lr_scheduler import LambdaLR

from tformer_ref.training import fit, noam_lambda, train_step

# The capstone's configuration (book/ch06_training/capstone.ipynb explains the choices).
CONFIG = dict(d_model=64, n_heads=8, n_layers=2, d_ff=256, dropout=0.0, max_len=32)
N_TRAIN, N_TEST, BATCH, WARMUP, COOLDOWN, STEPS, SEED = 20000, 500, 64, 200, 400, 1000, 0


def _data():
    vocab = CharVocab.for_dates()
    train, test = make_pairs(N_TRAIN, N_TEST, seed=SEED)
    return vocab, PairDataset(train, vocab), PairDataset(test, vocab)


def _model(cls, vocab_size):
    torch.manual_seed(SEED)
    return cls(vocab_size, vocab_size, **CONFIG)


def time_to_accuracy(cls, target: float = 0.99):
    """Train ``cls`` on the date task until held-out exact match >= ``target``; -> (seconds, steps, history)."""
    vocab, train, test = _data()
    loader = DataLoader(train, batch_sampler=BucketBatchSampler(train.lengths(), BATCH, seed=SEED), collate_fn=Collate())
    test_batches = list(DataLoader(test, batch_size=N_TEST, collate_fn=Collate()))
    model = _model(cls, len(vocab))
    opt = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    sched = LambdaLR(opt, lambda s: noam_lambda(s, CONFIG["d_model"], WARMUP) * min(1.0, (STEPS - s) / COOLDOWN))
    history = fit(model, loader, opt, sched, max_steps=STEPS, evaluate=lambda m: evaluate_accuracy(m, test_batches, 20),
                  eval_every=100, target=target, progress=False)
    return history.time_to(target), history.step[-1], history


def step_times(rounds: int = 5, iters: int = 5) -> dict[str, float]:
    """Median seconds per training step of both models on the same batch, interleaved round by round."""
    vocab, train, _ = _data()
    src, tgt = Collate()([train[i] for i in range(BATCH)])
    models = {"ours": _model(Transformer, len(vocab)), "peer": _model(TorchTransformer, len(vocab))}
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


def epoch_time(pad_to_max: bool, n: int = 4000) -> float:
    """Seconds for one epoch over ``n`` examples, batches random (pad-to-max) or bucketed (dynamic)."""
    vocab, train, _ = _data()
    items = [train[i] for i in range(n)]
    if pad_to_max:
        longest = (max(len(s) for s, _ in items), max(len(t) for _, t in items))
        loader = DataLoader(items, batch_size=BATCH, shuffle=True, collate_fn=Collate(pad_to=longest),
                            generator=torch.Generator().manual_seed(SEED))
    else:
        loader = DataLoader(items, batch_sampler=BucketBatchSampler([len(s) for s, _ in items], BATCH, seed=SEED),
                            collate_fn=Collate())
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
    results.append({"benchmark": "training step, 8-head 2-layer d=64 (tformer_ref Transformer vs nn.Transformer)",
                    "ours_ms": steps["ours"] * 1e3, "peer_ms": steps["peer"] * 1e3,
                    "ratio": steps["ours"] / steps["peer"], "budget": 1.1})
    ours_s, ours_steps, _ = time_to_accuracy(Transformer)
    peer_s, peer_steps, _ = time_to_accuracy(TorchTransformer)
    if ours_s is None or peer_s is None:
        raise RuntimeError(f"a model did not reach 99 % (ours: {ours_s}, peer: {peer_s})")
    results.append({"benchmark": "time to 99% exact match, date task (tformer_ref Transformer vs nn.Transformer)",
                    "ours_ms": ours_s * 1e3, "peer_ms": peer_s * 1e3, "ratio": ours_s / peer_s, "budget": 1.1,
                    "ours_steps": ours_steps, "peer_steps": peer_steps})
    # Interleave the two padding strategies twice and keep the better of each (less noise).
    runs = [(epoch_time(False), epoch_time(True)) for _ in range(2)]
    dyn, fixed = min(r[0] for r in runs), min(r[1] for r in runs)
    results.append({"benchmark": "one epoch, dynamic padding + bucketing vs pad-to-max",
                    "ours_ms": dyn * 1e3, "peer_ms": fixed * 1e3, "ratio": dyn / fixed, "budget": None,
                    "speedup": fixed / dyn})
    return results
