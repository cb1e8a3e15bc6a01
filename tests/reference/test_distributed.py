"""DDP for real: 2 gloo processes on CPU end with the same parameters as one process on the full batch."""

import os

import pytest
import torch

from tformer_ref import distributed as D


def test_distributed_sampler_shards_and_reshuffles():
    cfg = D.parse_args(
        ["--steps", "6", "--micro-batch", "4", "--accum", "2", "--n-data", "32"]
    )
    shards = [D.shard_steps(cfg, rank, 2) for rank in range(2)]
    per_epoch = 32 // 2 // (4 * 2)  # steps per epoch and rank
    for epoch in range(2):
        seen = [
            torch.cat(
                [
                    i
                    for step in s[epoch * per_epoch : (epoch + 1) * per_epoch]
                    for i, _ in step
                ]
            )
            for s in shards
        ]
        assert set(seen[0].tolist()).isdisjoint(
            seen[1].tolist()
        )  # ranks read different samples
        assert sorted(seen[0].tolist() + seen[1].tolist()) == list(
            range(32)
        )  # together, the whole epoch
    first = torch.cat([i for step in shards[0][:per_epoch] for i, _ in step])
    second = torch.cat(
        [i for step in shards[0][per_epoch : 2 * per_epoch] for i, _ in step]
    )
    assert not torch.equal(first, second)  # set_epoch: a new order each epoch


def test_two_gloo_processes_equal_one_process_on_the_full_batch(tmp_path):
    args = ["--steps", "4", "--micro-batch", "4", "--accum", "2", "--n-data", "48"]
    out = tmp_path / "final.pt"
    env_device = os.environ.get("TFORMER_DEVICE")
    if env_device and env_device.startswith("cuda"):
        pytest.skip(
            "two processes on one GPU: tests/reference/test_gpu.py runs NCCL with world size 1"
        )
    proc = D.launch(2, [*args, "--out", str(out)], timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.count("gloo cpu") == 8  # 2 ranks x 4 steps
    # no_sync on the first of each step's 2 micro-batches: one all-reduce (one bucket) per step, not two
    assert (
        proc.stdout.count("gradient all-reduces: 4 in 4 steps of 2 micro-batches") == 2
    )
    got = torch.load(out)
    assert got["world_size"] == 2 and got["backend"] == "gloo"
    ref = D.reference_run(D.parse_args(args), world_size=2)
    init = D.make_model(D.parse_args(args)).state_dict()
    for name, want in ref["state_dict"].items():
        torch.testing.assert_close(
            got["state_dict"][name], want, atol=1e-6, rtol=1e-5, msg=name
        )
    assert any(
        not torch.equal(init[n], ref["state_dict"][n]) for n in init
    )  # training really moved them


def test_entry_point_refuses_to_run_without_torchrun(capsys, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    assert D.main([]) == 2
    assert "torchrun" in capsys.readouterr().err
