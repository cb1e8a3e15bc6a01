"""Gradient accumulation equals the big batch: gradients, parameters, scheduler, GradScaler."""

import pytest
import torch

from tformer_ref.accumulation import train_accumulated, train_big_batch
from tformer_ref.device import get_device
from tformer_ref.toy_lm import TinyCausalLM, count_targets, lm_loss_sum, make_token_data


@pytest.fixture(autouse=True)
def _one_thread():
    """These models are tiny: a second intra-op thread costs more than it saves, and on a shared
    2-core machine waiting for it made single tests take over a minute."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _model():
    torch.manual_seed(0)
    return TinyCausalLM().to(get_device())


def _grads(model):
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def _params(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _data(n=16, min_len=4, seed=0):
    return make_token_data(n, 12, min_len=min_len, seed=seed).to(get_device())


@pytest.mark.parametrize("k", [2, 4])
def test_k_micro_batches_give_the_big_batch_gradient(k):
    data = _data(
        min_len=12
    )  # every sequence full length: all micro-batches hold as many tokens
    big, acc = _model(), _model()
    big.zero_grad()
    loss_sum, n = lm_loss_sum(big, data)
    (loss_sum / n).backward()
    frozen = torch.optim.SGD(
        acc.parameters(), lr=0.0
    )  # a step that changes nothing: the gradients stay to compare
    train_accumulated(acc, data.chunk(k), frozen, lm_loss_sum)
    torch.testing.assert_close(_grads(acc), _grads(big), atol=1e-6, rtol=1e-5)


def test_with_unequal_lengths_normalise_by_tokens_not_micro_batches():
    data = _data(min_len=3, seed=5)
    micro = data.chunk(4)
    assert (
        len({count_targets(m) for m in micro}) > 1
    )  # the micro-batches hold different numbers of tokens
    big = _model()
    loss_sum, n = lm_loss_sum(big, data)
    (loss_sum / n).backward()
    frozen = lambda m: torch.optim.SGD(m.parameters(), lr=0.0)  # noqa: E731
    by_tokens, by_batches = _model(), _model()
    train_accumulated(
        by_tokens, micro, frozen(by_tokens), lm_loss_sum, count_tokens=count_targets
    )
    train_accumulated(by_batches, micro, frozen(by_batches), lm_loss_sum)
    torch.testing.assert_close(_grads(by_tokens), _grads(big), atol=1e-6, rtol=1e-5)
    assert not torch.allclose(_grads(by_batches), _grads(big), atol=1e-4, rtol=1e-3)


def test_parameters_match_the_big_batch_over_several_steps_with_a_schedule():
    steps = [_data(seed=s) for s in range(4)]
    schedule = lambda step: min(1.0, (step + 1) / 3)  # noqa: E731  warm-up: lr differs every step
    big, acc = _model(), _model()
    opt_b, opt_a = (
        torch.optim.SGD(m.parameters(), lr=0.5, momentum=0.9) for m in (big, acc)
    )
    sch_b, sch_a = (
        torch.optim.lr_scheduler.LambdaLR(o, schedule) for o in (opt_b, opt_a)
    )
    for batch in steps:
        lb = train_big_batch(big, batch, opt_b, lm_loss_sum, sch_b, max_norm=1.0)
        la = train_accumulated(
            acc,
            batch.chunk(4),
            opt_a,
            lm_loss_sum,
            count_tokens=count_targets,
            scheduler=sch_a,
            max_norm=1.0,
        )
        assert la == pytest.approx(lb, rel=1e-5)
    torch.testing.assert_close(_params(acc), _params(big), atol=1e-5, rtol=1e-5)
    assert sch_a.last_epoch == len(
        steps
    )  # stepped once per optimizer step, not per micro-batch


def test_a_grad_scaler_changes_nothing_but_the_scale():
    """fp32 model, enabled GradScaler: unscale_ happens before clipping, so the update is the unscaled one."""
    batch = _data(seed=2)
    plain, scaled = _model(), _model()
    opt_p, opt_s = (torch.optim.SGD(m.parameters(), lr=0.5) for m in (plain, scaled))
    scaler = torch.amp.GradScaler(get_device().type, init_scale=2.0**10)
    for _ in range(3):
        train_accumulated(
            plain,
            batch.chunk(2),
            opt_p,
            lm_loss_sum,
            count_tokens=count_targets,
            max_norm=0.1,
        )
        train_accumulated(
            scaled,
            batch.chunk(2),
            opt_s,
            lm_loss_sum,
            count_tokens=count_targets,
            max_norm=0.1,
            scaler=scaler,
        )
    torch.testing.assert_close(_params(scaled), _params(plain), atol=1e-6, rtol=1e-5)


def test_bf16_autocast_accumulation_trains():
    model = _model()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    batch = _data(32, seed=4)
    dtype = torch.bfloat16 if get_device().type == "cpu" else torch.float16
    scaler = torch.amp.GradScaler(get_device().type, enabled=dtype == torch.float16)
    losses = [
        train_accumulated(
            model,
            batch.chunk(4),
            opt,
            lm_loss_sum,
            count_tokens=count_targets,
            scaler=scaler,
            amp_dtype=dtype,
            max_norm=1.0,
        )
        for _ in range(30)
    ]
    assert losses[-1] < 0.5 * losses[0]


def test_bad_input():
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="micro_batches is empty"):
        train_accumulated(model, [], opt, lm_loss_sum)
    with pytest.raises(ValueError, match="no target tokens"):
        train_accumulated(
            model,
            [torch.zeros(2, 5, dtype=torch.long, device=get_device())],
            opt,
            lm_loss_sum,
            count_tokens=count_targets,
        )


def test_the_course_decoder_only_model_accumulates_like_the_big_batch():
    """The same equivalence on chapter 5's DecoderOnlyLM (dropout off: both runs must see the same network)."""
    from tformer_ref.model import DecoderOnlyLM

    def make():
        torch.manual_seed(0)
        return DecoderOnlyLM(
            vocab=16,
            d_model=32,
            n_heads=4,
            n_layers=2,
            d_ff=64,
            dropout=0.0,
            max_len=16,
        ).to(get_device())

    batch = _data(12, min_len=3, seed=7)
    big, acc = make(), make()
    opt_b, opt_a = (torch.optim.SGD(m.parameters(), lr=0.3) for m in (big, acc))
    for _ in range(2):
        train_big_batch(big, batch, opt_b, lm_loss_sum)
        train_accumulated(
            acc, batch.chunk(3), opt_a, lm_loss_sum, count_tokens=count_targets
        )
    torch.testing.assert_close(_params(acc), _params(big), atol=1e-5, rtol=1e-5)
