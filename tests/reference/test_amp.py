"""tformer_ref.amp: dtype per device, GradScaler handling, unscale_ before clipping, bf16 training on CPU."""

import pytest
import torch
import torch.nn as nn

from tformer_ref.amp import (
    amp_dtype,
    autocast,
    make_grad_scaler,
    optimizer_step,
    saved_activation_bytes,
)
from tformer_ref.attention import scaled_dot_product_attention
from tformer_ref.device import get_device
from tformer_ref.toy_lm import TinyCausalLM, lm_loss_sum, make_token_data


@pytest.fixture(autouse=True)
def _one_thread():
    """These models are tiny: a second intra-op thread costs more than it saves, and on a shared
    2-core machine waiting for it made single tests take over a minute."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_dtype_per_device():
    assert amp_dtype("cpu") == torch.bfloat16
    assert amp_dtype(torch.device("cuda", 0)) == torch.float16


def test_bad_arguments_name_what_was_expected():
    with pytest.raises(TypeError, match="torch.device or a string"):
        amp_dtype(3)
    with pytest.raises(
        ValueError, match="float16 or torch.bfloat16, got torch.float32"
    ):
        autocast("cpu", torch.float32)


def test_autocast_runs_linear_layers_in_bf16_on_cpu():
    layer = nn.Linear(4, 4)
    with autocast("cpu"):
        out = layer(torch.randn(2, 4))
    assert out.dtype == torch.bfloat16
    assert layer.weight.dtype == torch.float32  # the master weights stay float32


def test_scaler_is_enabled_only_for_float16():
    assert not make_grad_scaler(
        "cpu"
    ).is_enabled()  # bf16: same range as float32, nothing underflows
    assert make_grad_scaler("cpu", torch.float16).is_enabled()
    assert not make_grad_scaler("cpu", torch.bfloat16).is_enabled()


def _step_with(scaler, max_norm, poison=False):
    torch.manual_seed(0)
    model = nn.Linear(6, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = model(torch.randn(5, 6)).pow(2).sum() * 10
    if poison:
        loss = loss * float("inf")
    (scaler.scale(loss) if scaler is not None else loss).backward()
    stepped = optimizer_step(opt, model.parameters(), scaler, max_norm)
    return torch.cat([p.detach().flatten() for p in model.parameters()]), stepped


def test_unscale_before_clip_gives_the_unscaled_update():
    plain, _ = _step_with(None, max_norm=0.5)
    scaled, stepped = _step_with(
        torch.amp.GradScaler("cpu", init_scale=2.0**12), max_norm=0.5
    )
    assert stepped
    torch.testing.assert_close(scaled, plain, atol=1e-6, rtol=1e-5)


def test_clip_before_unscale_would_shrink_the_update():
    """The pitfall the order prevents: clipping scaled gradients clips at max_norm / scale."""
    torch.manual_seed(0)
    model = nn.Linear(6, 3)
    before = torch.cat([p.detach().flatten() for p in model.parameters()])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**12)
    scaler.scale(model(torch.randn(5, 6)).pow(2).sum() * 10).backward()
    nn.utils.clip_grad_norm_(model.parameters(), 0.5)  # wrong: still scaled
    scaler.step(opt)
    scaler.update()
    wrong = torch.cat([p.detach().flatten() for p in model.parameters()]) - before
    right = _step_with(None, max_norm=0.5)[0] - before
    assert wrong.norm() < right.norm() / 1000


def test_overflow_step_is_skipped_and_scale_lowered():
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**12)
    torch.manual_seed(0)
    init = torch.cat([p.detach().flatten() for p in nn.Linear(6, 3).parameters()])
    params, stepped = _step_with(scaler, max_norm=1.0, poison=True)
    assert not stepped
    assert torch.equal(params, init)
    assert scaler.get_scale() == 2.0**11


def _train(dtype, fused, steps=40):
    device = get_device()
    torch.manual_seed(0)
    model = TinyCausalLM(fused=fused).to(device)
    data = make_token_data(32, 12, seed=3).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    scaler = make_grad_scaler(device, dtype)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        with autocast(device, dtype):
            loss_sum, n = lm_loss_sum(model, data)
        loss = loss_sum / n
        scaler.scale(loss).backward()
        optimizer_step(opt, model.parameters(), scaler, max_norm=1.0)
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("fused", [False, True])
def test_bf16_autocast_trains(fused):
    losses = _train(
        torch.bfloat16 if get_device().type == "cpu" else torch.float16, fused
    )
    assert all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < 0.5 * losses[0], losses


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("fused", [False, True])
def test_masks_are_safe_in_half_precision(dtype, fused):
    """Masked positions use the dtype's own minimum: -1e9 would be -inf in float16, and NaN follows."""
    assert torch.tensor(-1e9, dtype=torch.float16).isinf()
    torch.manual_seed(0)
    device = get_device()
    model = TinyCausalLM(fused=fused).to(device).eval()
    tokens = make_token_data(6, 12, seed=1).to(device)
    tokens[0, 2:] = 0  # mostly padding
    with torch.no_grad(), autocast(device, dtype):
        logits = model(tokens)
    assert logits.dtype == dtype
    assert torch.isfinite(logits).all()


def test_fully_masked_rows_stay_finite_in_float16():
    q = torch.randn(1, 1, 3, 4, dtype=torch.float16)
    mask = torch.tensor([[[[False] * 3, [True, False, False], [True, True, True]]]])
    out, weights = scaled_dot_product_attention(q, q, q, mask)
    assert torch.isfinite(out).all() and weights[0, 0, 0].eq(0).all()


def test_saved_activation_bytes_halve_under_bf16():
    torch.manual_seed(0)
    model = TinyCausalLM(d_model=64, max_len=32)
    tokens = make_token_data(8, 32, seed=0)
    _, fp32 = saved_activation_bytes(
        lm_loss_sum, model, tokens, exclude=model.parameters()
    )
    with autocast("cpu", torch.bfloat16):
        _, bf16 = saved_activation_bytes(
            lm_loss_sum, model, tokens, exclude=model.parameters()
        )
    assert 0 < bf16 < 0.75 * fp32


def test_naive_attention_saves_the_scores_fused_does_not():
    b, h, s, d = 1, 2, 512, 16
    q, k, v = (torch.randn(b, h, s, d, requires_grad=True) for _ in range(3))
    _, naive = saved_activation_bytes(lambda: scaled_dot_product_attention(q, k, v)[0])
    _, fused = saved_activation_bytes(
        lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v)
    )
    scores = b * h * s * s * 4
    assert naive >= scores  # at least one [B, H, S, S] float32 tensor
    assert fused < scores / 4
