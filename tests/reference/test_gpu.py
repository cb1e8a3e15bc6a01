"""CUDA-only tests (marked `gpu`: run by `make test-gpu`, not by `make test`), and the test that
`make test-gpu` fails loudly on a machine without CUDA."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from tformer_ref import distributed as D
from tformer_ref.accumulation import train_accumulated
from tformer_ref.amp import make_grad_scaler
from tformer_ref.attention import MultiHeadAttention, scaled_dot_product_attention
from tformer_ref.masks import causal_mask
from tformer_ref.toy_lm import TinyCausalLM, count_targets, lm_loss_sum, make_token_data

ROOT = Path(__file__).resolve().parents[2]
gpu = pytest.mark.gpu


@gpu
def test_fp16_autocast_with_grad_scaler_trains_on_cuda():
    device = torch.device("cuda")
    torch.manual_seed(0)
    model = TinyCausalLM(fused=True).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    scaler = make_grad_scaler(device)  # float16 on CUDA: enabled
    assert scaler.is_enabled()
    batch = make_token_data(32, 12, seed=4).to(device)
    losses = [
        train_accumulated(
            model,
            batch.chunk(4),
            opt,
            lm_loss_sum,
            count_tokens=count_targets,
            scaler=scaler,
            amp_dtype=torch.float16,
            max_norm=1.0,
        )
        for _ in range(40)
    ]
    assert losses[-1] < 0.5 * losses[0]
    assert 0 < scaler.get_scale() < float("inf")
    assert all(
        p.dtype == torch.float32 for p in model.parameters()
    )  # master weights stay fp32


@gpu
def test_nccl_world_size_one_equals_the_reference(tmp_path):
    args = ["--steps", "3", "--micro-batch", "4", "--accum", "2", "--n-data", "24"]
    out = tmp_path / "final.pt"
    proc = D.launch(
        1, [*args, "--out", str(out)], timeout=240, env={"TFORMER_DEVICE": "cuda"}
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    got = torch.load(out)
    assert got["backend"] == "nccl" and got["world_size"] == 1
    ref = D.reference_run(
        D.parse_args(args), world_size=1
    )  # on CPU: float32 sums in another order
    for name, want in ref["state_dict"].items():
        torch.testing.assert_close(
            got["state_dict"][name], want, atol=1e-4, rtol=1e-4, msg=name
        )


@gpu
@pytest.mark.parametrize("backend", ["FLASH_ATTENTION", "EFFICIENT_ATTENTION"])
def test_fused_sdpa_kernels_match_the_naive_scores(backend):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.manual_seed(0)
    q, k, v = (
        torch.randn(2, 4, 256, 64, device="cuda", dtype=torch.float16) for _ in range(3)
    )
    want, _ = scaled_dot_product_attention(
        q.float(), k.float(), v.float(), causal_mask(256, "cuda")
    )
    with sdpa_kernel(getattr(SDPBackend, backend)):
        got = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(got.float(), want, atol=2e-3, rtol=2e-3)


@gpu
def test_fused_attention_needs_less_memory_than_the_scores():
    torch.manual_seed(0)
    mha = MultiHeadAttention(256, 4, fused=True).cuda().half()
    x = torch.randn(1, 4096, 256, device="cuda", dtype=torch.float16)
    peaks = {}
    for fused in (True, False):
        mha.fused = fused
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        with torch.no_grad():
            mha(x)
        torch.cuda.synchronize()
        peaks[fused] = torch.cuda.max_memory_allocated() - base
    scores = 1 * 4 * 4096 * 4096 * 2
    assert peaks[False] >= scores > 4 * peaks[True]


# --------------------------------------------------------------------------- without a GPU

no_cuda = pytest.mark.skipif(
    torch.cuda.is_available(),
    reason="this machine has CUDA; the failure path needs none",
)


@no_cuda
def test_require_gpu_fails_loudly_without_cuda():
    proc = subprocess.run(
        [sys.executable, "tools/require_gpu.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0
    assert (
        "no CUDA GPU" in proc.stderr
        and "torch.cuda.is_available() is False" in proc.stderr
    )


@no_cuda
def test_gpu_suite_is_a_hard_failure_without_cuda():
    env = dict(os.environ, TFORMER_REQUIRE_GPU="1", TFORMER_DEVICE="cuda")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-m",
            "gpu",
            "tests/reference/test_gpu.py",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 3, proc.stdout[-2000:]
    assert "no CUDA GPU here" in proc.stdout + proc.stderr


@no_cuda
@pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")
def test_make_test_gpu_fails_loudly_without_cuda():
    """The real target, with this interpreter's environment standing in for the Makefile's .venv."""
    venv = Path(sys.executable).parent.parent
    proc = subprocess.run(
        [
            "make",
            "--no-print-directory",
            "-o",
            f"{venv}/.installed",
            "test-gpu",
            f"VENV={venv}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode != 0
    assert "make test-gpu: FAILED, no CUDA GPU" in proc.stderr
    assert (
        "pytest" not in proc.stdout.split("require_gpu.py", 1)[1]
    )  # nothing ran after the guard


def test_default_run_does_not_select_gpu_tests():
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("TFORMER_REQUIRE_GPU", "TFORMER_DEVICE")
    }
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "--collect-only",
            "-q",
            "tests/reference/test_gpu.py",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert "test_fp16_autocast_with_grad_scaler_trains_on_cuda" not in proc.stdout
    assert "deselected" in proc.stdout
