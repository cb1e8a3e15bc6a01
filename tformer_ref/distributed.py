"""DistributedDataParallel training under ``torchrun``: gloo on CPUs, NCCL on GPUs.

DDP is *data* parallel (the seed files it under "model parallel"): every process
holds a full copy of the model, reads a different slice of the data, and after
each backward the gradients are averaged across processes (an all-reduce), so
every copy takes the same step and the copies stay identical. Model parallelism
is the other thing: splitting one model's layers or tensors across devices.

Run it (2 CPU processes; on a GPU machine each process takes one GPU)::

    OMP_NUM_THREADS=1 python -m torch.distributed.run --nproc_per_node=2 \\
        --master_addr=127.0.0.1 --master_port=29511 \\
        -m tformer_ref.distributed --steps 4 --out final.pt

Each process reads its shard through a ``DistributedSampler`` (without it every
rank reads the whole dataset, and DDP just averages identical gradients), and
calls ``sampler.set_epoch(epoch)`` at every epoch (without it the shuffle is the
same every epoch). With ``--accum k`` each rank accumulates k micro-batches per
step under ``model.no_sync()``, normalised by the step's global token count, so
the run ends with the same parameters as :func:`reference_run`, one process
training on the whole batch (tests/reference/test_distributed.py checks this).
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from .accumulation import train_accumulated, train_big_batch
from .amp import amp_dtype, make_grad_scaler
from .device import get_device
from .toy_lm import TinyCausalLM, count_targets, lm_loss_sum, make_token_data

PAD = 0


class IndexedRows(Dataset):
    """Rows of a [N, S] tensor, each returned with its index (so a run can show who read
    what).

    Taught in §7.4 'DistributedDataParallel is data parallel' (book/ch07_scale).

    Examples::

        >>> rows = IndexedRows(torch.arange(6).view(3, 2))
        >>> len(rows), rows[1]
        (3, (1, tensor([2, 3])))
    """

    def __init__(self, data: torch.Tensor):
        self.data = data

    def __len__(self) -> int:
        return self.data.size(0)

    def __getitem__(self, i):
        return i, self.data[i]


def parse_args(argv=None) -> argparse.Namespace:
    """The run's settings from the command line (``argv``; None: ``sys.argv[1:]``).

    Taught in §7.4 'DistributedDataParallel is data parallel' (book/ch07_scale).

    Examples::

        >>> cfg = parse_args(["--steps", "2", "--accum", "4"])
        >>> cfg.steps, cfg.accum, cfg.micro_batch  # micro_batch: the default
        (2, 4, 4)
    """
    p = argparse.ArgumentParser(
        prog="python -m tformer_ref.distributed", description=__doc__.splitlines()[0]
    )
    p.add_argument("--steps", type=int, default=4, help="optimizer steps")
    p.add_argument(
        "--micro-batch",
        type=int,
        default=4,
        help="sequences per micro-batch, per process",
    )
    p.add_argument(
        "--accum",
        type=int,
        default=2,
        help="micro-batches accumulated per optimizer step",
    )
    p.add_argument("--n-data", type=int, default=48, help="dataset size (sequences)")
    p.add_argument("--seq-len", type=int, default=12)
    p.add_argument("--lr", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--amp",
        action="store_true",
        help="autocast (bf16 on CPU; fp16 + GradScaler on CUDA)",
    )
    p.add_argument(
        "--out",
        type=str,
        default="",
        help="rank 0 saves the final parameters and losses here",
    )
    return p.parse_args(argv)


def make_model(cfg) -> TinyCausalLM:
    """The run's model, seeded by ``cfg.seed``: every process builds the same weights.

    Taught in §7.4 'DistributedDataParallel is data parallel' (book/ch07_scale).

    Examples::

        >>> a, b = make_model(parse_args([])), make_model(parse_args([]))
        >>> torch.equal(a.head.weight, b.head.weight)
        True
    """
    # The same initial weights everywhere (DDP also broadcasts rank 0's).
    torch.manual_seed(cfg.seed)
    return TinyCausalLM(
        vocab=16, d_model=32, n_heads=4, max_len=cfg.seq_len, pad_id=PAD
    )


def make_scheduler(optimizer):
    """Linear warm-up over 3 steps: the learning rate changes every *optimizer* step.

    Taught in §7.4 'DistributedDataParallel is data parallel' (book/ch07_scale).

    Examples::

        >>> opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.6)
        >>> factor = make_scheduler(opt).lr_lambdas[0]  # lr = 0.6 · factor(step)
        >>> [round(factor(step), 2) for step in range(4)]
        [0.33, 0.67, 1.0, 1.0]
    """
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / 3)
    )


def shard_steps(
    cfg, rank: int, world_size: int
) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
    """What ``rank`` reads: ``cfg.steps`` steps, each ``cfg.accum`` micro-batches of
    (indices [b], tokens [b, S]).

    ``DistributedSampler`` takes ``num_replicas`` and ``rank`` explicitly, so this
    runs without a process group too (the single-process reference uses it to read
    exactly what every rank read). Epochs roll over as needed, with ``set_epoch``.

    Taught in §7.5 'DistributedSampler and set_epoch' (book/ch07_scale).

    Examples::

        >>> cfg = parse_args(["--steps", "2", "--accum", "2", "--micro-batch", "4"])
        >>> ranks = [shard_steps(cfg, rank, world_size=2) for rank in (0, 1)]
        >>> len(ranks[0]), len(ranks[0][0]), ranks[0][0][0][1].shape  # steps, micro
        (2, 2, torch.Size([4, 12]))
        >>> def read(step):  # the sample indices one rank read in one step
        ...     return {int(i) for indices, _ in step for i in indices}
        >>> read(ranks[0][0]) & read(ranks[1][0])  # step 0: no sample read twice
        set()
    """
    tokens = make_token_data(
        cfg.n_data, cfg.seq_len, vocab=16, pad_id=PAD, seed=cfg.seed + 1
    )
    data = IndexedRows(tokens)
    sampler = DistributedSampler(
        data,
        num_replicas=world_size,
        rank=rank,
        shuffle=True,
        seed=cfg.seed,
        drop_last=True,
    )
    loader = DataLoader(
        data, batch_size=cfg.micro_batch, sampler=sampler, drop_last=True
    )
    if len(loader) < cfg.accum:
        raise ValueError(
            f"an epoch gives each rank {len(loader)} micro-batches, "
            f"fewer than --accum {cfg.accum}"
        )
    steps, current, epoch = [], [], 0
    while len(steps) < cfg.steps:
        sampler.set_epoch(epoch)  # a new shuffle each epoch, the same on every rank
        for batch in loader:
            current.append(batch)
            if len(current) == cfg.accum:
                steps.append(current)
                current = []
                if len(steps) == cfg.steps:
                    break
        current, epoch = [], epoch + 1  # a step never spans two epochs
    return steps


def _loss(model, batch):
    return lm_loss_sum(model, batch, PAD)


def _count(batch):
    return count_targets(batch, PAD)


def _counting_allreduce(state: dict, bucket):
    """DDP's default gradient all-reduce (averaging), counted: shows what no_sync
    saves."""
    state["n"] += 1
    return default_hooks.allreduce_hook(None, bucket)


def train(cfg) -> dict | None:
    """The body every process runs under torchrun. Returns rank 0's results (None
    elsewhere).

    Taught in §7.4 'DistributedDataParallel is data parallel' (book/ch07_scale).

    Examples::

        >>> from unittest import mock  # what torchrun would set, for a world of one
        >>> env = {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
        ...        "MASTER_PORT": str(free_port()), "GLOO_SOCKET_IFNAME": "lo",
        ...        "TFORMER_DEVICE": "cpu"}
        >>> with mock.patch.dict(os.environ, env):
        ...     result = train(parse_args(["--steps", "1", "--accum", "1"]))
        [rank 0/1 gloo cpu] step 0: samples [...] loss ...
        [rank 0] gradient all-reduces: 1 in 1 steps of 1 micro-batches
        >>> result["world_size"], result["backend"]
        (1, 'gloo')
    """
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = get_device()
    if device.type == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(
        backend, device_id=device if device.type == "cuda" else None
    )
    try:
        model = make_model(cfg).to(device)
        device_ids = [device.index] if device.type == "cuda" else None
        ddp = DistributedDataParallel(model, device_ids=device_ids)
        reduces = {"n": 0}
        ddp.register_comm_hook(reduces, _counting_allreduce)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=cfg.lr)
        scheduler = make_scheduler(optimizer)
        dtype = amp_dtype(device) if cfg.amp else None
        scaler = make_grad_scaler(device, dtype) if cfg.amp else None
        losses = []
        for step, micro in enumerate(shard_steps(cfg, rank, world)):
            seen = torch.cat([idx for idx, _ in micro]).tolist()
            batches = [tokens.to(device) for _, tokens in micro]
            loss = train_accumulated(
                ddp,
                batches,
                optimizer,
                _loss,
                count_tokens=_count,
                scheduler=scheduler,
                scaler=scaler,
                amp_dtype=dtype,
            )
            losses.append(loss)
            print(
                f"[rank {rank}/{world} {backend} {device}] step {step}: "
                f"samples {seen} loss {loss:.4f}",
                flush=True,
            )
        # With no_sync on all but the last micro-batch: one all-reduce per bucket per
        # optimizer step.
        print(
            f"[rank {rank}] gradient all-reduces: {reduces['n']} in {cfg.steps} "
            f"steps of {cfg.accum} micro-batches",
            flush=True,
        )
        result = None
        if rank == 0:
            weights = {k: v.detach().cpu() for k, v in model.state_dict().items()}
            result = {
                "state_dict": weights,
                "losses": losses,
                "world_size": world,
                "backend": backend,
            }
            if cfg.out:
                torch.save(result, cfg.out)
        dist.barrier()
        return result
    finally:
        dist.destroy_process_group()


def reference_run(cfg, world_size: int) -> dict:
    """One process, no DDP: each step trains on the union of what the ``world_size``
    ranks read.

    Taught in §7.4 'DistributedDataParallel is data parallel' (book/ch07_scale).

    Examples::

        >>> result = reference_run(parse_args(["--steps", "2"]), world_size=2)
        >>> len(result["losses"]), sorted(result["state_dict"])[:2]
        (2, ['attn.k_proj.bias', 'attn.k_proj.weight'])
    """
    model = make_model(cfg)
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    scheduler = make_scheduler(optimizer)
    shards = [shard_steps(cfg, r, world_size) for r in range(world_size)]
    losses = []
    for step in range(cfg.steps):
        big = torch.cat([tokens for shard in shards for _, tokens in shard[step]])
        losses.append(train_big_batch(model, big, optimizer, _loss, scheduler))
    weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return {"state_dict": weights, "losses": losses}


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now, for torchrun's rendezvous.

    Taught in §7.4 'DistributedDataParallel is data parallel' (book/ch07_scale).

    Examples::

        >>> 0 < free_port() < 65536
        True
    """
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(
    nproc: int,
    args: list[str],
    timeout: float = 120,
    cwd: str | Path | None = None,
    env: dict | None = None,
) -> subprocess.CompletedProcess:
    """Start ``nproc`` processes of this module with torchrun, on 127.0.0.1 only; wait
    at most ``timeout`` s.

    ``env`` adds to (or overrides) this process's environment, e.g.
    ``{"TFORMER_DEVICE": "cuda"}``. Raises ``subprocess.TimeoutExpired`` when they hang
    (e.g. a rank waiting for a peer that died).

    Taught in §7.4 'DistributedDataParallel is data parallel' (book/ch07_scale).

    Examples (not run here: starting two processes takes seconds;
    tests/reference/test_distributed.py runs it)::

        >>> proc = launch(2, ["--steps", "2"])  # doctest: +SKIP
        >>> proc.returncode, proc.stdout.count("gradient all-reduces")  # doctest: +SKIP
        (0, 2)
    """
    env = {**os.environ, **(env or {})}
    env.setdefault("OMP_NUM_THREADS", "1")  # nproc processes share the cores
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    root = str(Path(__file__).resolve().parent.parent)
    paths = [root, env["PYTHONPATH"]] if env.get("PYTHONPATH") else [root]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc_per_node={nproc}",
        "--nnodes=1",
        "--master_addr=127.0.0.1",
        f"--master_port={free_port()}",
        "-m",
        "tformer_ref.distributed",
        *args,
    ]
    return subprocess.run(
        cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def main(argv=None) -> int:
    """The entry point of ``python -m tformer_ref.distributed``: 0 after training, 2
    (and a hint on stderr) when not started by torchrun.

    Taught in §7.4 'DistributedDataParallel is data parallel' (book/ch07_scale).

    Examples::

        >>> main([])  # no RANK in the environment: not under torchrun
        2
    """
    if "RANK" not in os.environ:
        print(
            "start me with torchrun, e.g. python -m torch.distributed.run "
            "--nproc_per_node=2 -m tformer_ref.distributed",
            file=sys.stderr,
        )
        return 2
    train(parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
