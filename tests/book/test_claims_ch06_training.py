"""Chapter 6's random-experiment claims, rerun at small sizes over seeds.

The lessons: ``nbsrc/book/ch06_training/`` (``lesson``, ``schedules``, ``heads``,
``capstone``). How claims are found and listed: ``tests/book/seed_claims.py``.

A training claim is rerun with the lesson's own loop (same loss, optimiser, betas and
clipping) on the date task of §6.1, at a smaller size: batches of 16, fewer steps, and
one layer per stack where the claim does not need two. A seed sets everything the
lesson's seed 0 sets: the dates, the initial weights and the order of the batches. The
ranges in the docstrings were measured at these sizes on a CPU; where a test's size
needs another rate than the lesson's, its docstring says so.
"""

import datetime as dt
import functools
import math
import os
import statistics

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import BatchSampler, DataLoader

from tests.book.seed_claims import Claim, NotRandom
from tformer_ref.data import (
    EOS,
    MONTHS,
    PAD,
    STYLES,
    BucketBatchSampler,
    CharVocab,
    Collate,
    PairDataset,
    make_pairs,
)
from tformer_ref.decoding import (
    beam_search,
    evaluate_accuracy,
    greedy_decode,
    sequence_accuracy,
    strip,
)
from tformer_ref.model import Transformer
from tformer_ref.training import (
    fit,
    noam_lambda,
    noam_scheduler,
    sequence_loss,
    shift_targets,
)

SEEDS = range(5)
LESSON = "ch06_training/lesson"
VOCAB = CharVocab.for_dates()
# §6.1's model; the tests change only what their docstrings name.
MODEL = {
    "d_model": 32,
    "n_heads": 8,
    "n_layers": 2,
    "d_ff": 64,
    "dropout": 0.0,
    "max_len": 40,
}
BATCH = 16  # the lessons' 32 halved: the runs here are short

CLAIMS = [
    Claim(
        LESSON,
        (
            (
                "max(src_lengths) - min(src_lengths) >= 8 and "
                "max(tgt_lengths) - min(tgt_lengths) >= 7"
            ),
        ),
        "the drawn sources and targets vary in length",
        "test_lengths_vary_on_both_sides",
    ),
    Claim(
        LESSON,
        (
            "max(wrong_loss, same_loss) < 0.8 * right_loss",
            "right[1] > 2 * max(wrong[1], same[1])",
        ),
        "a wrong target shift trains to a lower loss and predicts the next character "
        "far worse",
        "test_a_wrong_shift_reads_lower_and_predicts_worse",
    ),
    Claim(
        LESSON,
        ("l2 > l1 and k2 < k1", "min(cos1, cos2) > 0.9"),
        "lowering the PAD logit raises PyTorch's smoothed loss and lowers the "
        "hand-written one, whose gradients point nearly the same way",
        "test_lowering_pad_moves_the_two_smoothed_losses_apart",
    ),
    Claim(
        LESSON,
        (
            "tail['counted_rep'] < 0.75 * tail['counted_real']",
            "tail['counted_rep'] < 0.9 * tail['ignored']",
        ),
        "a loss that counts padding reads lower than the same run's loss on its real "
        "tokens and than the run that ignores padding",
        "test_a_loss_that_counts_padding_reads_lower",
    ),
    Claim(
        LESSON,
        (
            "free['norm'][S] > 100 * typical",
            (
                "free['size'][S] > 1.5 * before_size and "
                "min(free['cos'][S + 1:S + 6]) > 0.7"
            ),
        ),
        "unclipped, one bad batch makes Adam's update jump and sets its direction for "
        "the next steps",
        "test_a_bad_batch_steers_adams_updates",
    ),
    Claim(
        LESSON,
        (
            (
                "statistics.median(free['size'][late]) < "
                "0.75 * statistics.median(clip['size'][late])"
            ),
        ),
        "long after an unclipped bad batch, Adam's updates stay smaller than the "
        "clipped run's",
        "test_after_a_bad_batch_unclipped_updates_stay_smaller",
    ),
    Claim(
        LESSON,
        (
            "statistics.mean(clip['loss'][-20:]) < statistics.mean(free['loss'][-20:])",
            "clip['acc'] > free['acc']",
        ),
        "the clipped run ends with a lower loss and a better next-character accuracy",
        "test_clipping_ends_lower_and_more_accurate",
    ),
    Claim(
        LESSON,
        ("0.8 < statistics.median(clip['size'][S - 10:S]) / before_size < 1.25",),
        "clipped or not, ordinary updates are the same size",
        "test_clipping_leaves_ordinary_updates_their_size",
    ),
    Claim(
        LESSON,
        (
            "shares['dynamic + bucketing'] < shares['pad to 32'] / 3",
            "shares['dynamic + bucketing'] < shares['dynamic, shuffled batches']",
        ),
        "bucketed batches padded dynamically hold the least padding",
        "test_bucketing_pads_least",
    ),
    Claim(
        LESSON,
        ("scores['beam 4'].mean() >= scores['greedy'].mean()",),
        "on the barely trained model, beam search's outputs are on average at least "
        "as likely as greedy decoding's",
        "test_beam_outputs_are_at_least_as_likely_as_greedy",
    ),
    Claim(
        "ch06_training/schedules",
        ("hot > 1.3 * warm and hot > 1.3 * pre", "hot1 > 1.3 * warm1"),
        "at a high constant rate, Post-LN without warm-up ends with a far higher "
        "loss than warmed up, and than Pre-LN",
        "test_post_ln_without_warmup_ends_higher",
    ),
    Claim(
        "ch06_training/heads",
        ("all((a > 3 * majority for a, _, _ in runs.values()))",),
        "every split into 1, 2, 4 or 8 heads learns the task, far above the "
        "most-common-character baseline",
        "test_every_head_count_learns",
    ),
    Claim(
        "ch06_training/capstone",
        ("stats['shuffled'][0] > 2 * stats['bucketed'][0]",),
        "a shuffled batch holds over twice as many date styles as a bucketed one",
        "test_bucketed_batches_hold_fewer_styles",
    ),
    Claim(
        "ch06_training/capstone",
        (
            "first_pass <= MARGIN * STEPS",
            "final_acc >= PASS",
            "greedy_acc >= 0.97 and beam_acc >= 0.97",
            "lp_acc >= 0.97",
            "share.max() > 2 * uniform",
        ),
        "the capstone's recipe passes its mark with margin, and the trained model "
        "decodes and aligns the year as the page says",
        "test_the_capstone_run_passes_on_every_seed",
    ),
]

NOT_RANDOM = [
    NotRandom(
        LESSON,
        (
            (
                "rates[0] > 0 and rates.index(max(rates)) == 3999 and "
                "abs(max(rates) - 0.0007) < 2e-05"
            ),
        ),
        "the Noam schedule is a formula of the step: no random draw enters it",
    ),
    NotRandom(
        LESSON,
        ("speedup > 1.1",),
        "a measured time; the suite times nothing (budgets are benches)",
    ),
    NotRandom(
        LESSON,
        ("B * 8 * S * S > B * S * width",),
        "it reduces to 8 * S > 32, and every source has at least 9 tokens (the "
        "8-digit style plus EOS), whatever the draw",
    ),
]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny tensors, as in the lessons: a second thread only waits for the first."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _task(seed, n_train, n_test):
    """(training set, held-out (src, tgt) in one batch), drawn with ``seed``."""
    train, test = make_pairs(n_train, n_test, seed=seed)
    held_out = Collate()(list(PairDataset(test, VOCAB)))
    return PairDataset(train, VOCAB), held_out


def _model(seed, **kw):
    torch.manual_seed(seed)
    return Transformer(len(VOCAB), len(VOCAB), **(MODEL | kw))


def _bucketed(train_set, seed, batch=BATCH):
    sampler = BucketBatchSampler(train_set.lengths(), batch, seed=seed)
    return DataLoader(train_set, batch_sampler=sampler, collate_fn=Collate())


def _next_token_accuracy(model, held_out):
    """§6.2: teacher-forced, how often the argmax at t is the token t + 1."""
    src, tgt = held_out
    tgt_in, labels = shift_targets(tgt)
    model.eval()
    with torch.no_grad():
        pred = model(src, tgt_in).argmax(-1)
    keep = labels != PAD
    return (pred == labels)[keep].float().mean().item()


def _lengths(pairs):
    """Token lengths as PairDataset makes them: source + EOS, BOS + target + EOS."""
    return [len(s) + 1 for s, _ in pairs], [len(t) + 2 for _, t in pairs]


# ---------------------------------------------------------------- lesson, §6.1–6.3


@pytest.mark.parametrize("seed", SEEDS)
def test_lengths_vary_on_both_sides(seed):
    """At the lesson's size (6000 pairs): source lengths span 9 and target lengths 7
    tokens on seeds 0-4 (the most the styles allow: 9-18 and 12-19)."""
    src_lengths, tgt_lengths = _lengths(make_pairs(6000, 300, seed=seed)[0])
    assert max(src_lengths) - min(src_lengths) >= 8
    assert max(tgt_lengths) - min(tgt_lengths) >= 7


def _shift_runs(seed):
    """§6.2's three runs: (final losses, next-character accuracies), right shift
    first, then the wrong way, then labels not shifted."""
    train_set, held_out = _task(seed, 500, 100)
    shifts = (
        shift_targets,  # right: tgt[:, :-1] -> tgt[:, 1:]
        lambda t: (t[:, 1:], t[:, :-1]),  # the wrong way
        lambda t: (t[:, :-1], t[:, :-1]),  # labels not shifted
    )
    final, acc = [], []
    for shift in shifts:
        model = _model(seed, n_layers=1, n_heads=2)
        opt = torch.optim.Adam(model.parameters(), lr=2e-2)
        losses = []
        for _, (src, tgt) in zip(range(25), _bucketed(train_set, seed)):
            model.train()
            tgt_in, labels = shift(tgt)
            loss = sequence_loss(model(src, tgt_in), labels, PAD)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        final.append(statistics.mean(losses[-5:]))
        acc.append(_next_token_accuracy(model, held_out))
    return final, acc


@pytest.mark.parametrize("seed", SEEDS)
def test_a_wrong_shift_reads_lower_and_predicts_worse(seed):
    """Three runs of 25 steps (the lesson: 60) of a one-layer, two-head model at
    lr 2e-2 (the lesson: 3e-3, which needs the longer runs), losses over the last 5
    steps: the broken runs' loss is 0.56-0.68 times the right one's, and the right
    run predicts the next character 13-24 times as often, seeds 0-4."""
    (right_loss, wrong_loss, same_loss), (right, wrong, same) = _shift_runs(seed)
    assert max(wrong_loss, same_loss) < 0.8 * right_loss
    assert right > 2 * max(wrong, same)


def _hand_smoothed_kl(logits, labels, pad_id, eps):
    """The lesson's copy of the Annotated Transformer's LabelSmoothing loss."""
    logp = logits.log_softmax(-1)
    target = torch.full_like(logp, eps / (logp.size(-1) - 2))
    target.scatter_(-1, labels[:, None], 1 - eps)
    target[:, pad_id] = 0.0
    target[labels == pad_id] = 0.0
    return F.kl_div(logp, target, reduction="sum") / (labels != pad_id).sum()


def _smoothed_losses(seed):
    """§6.3: [(PyTorch's loss, the hand-written one, their gradients' cosine)] on
    the untrained model's logits, then on the same with the PAD logit lowered."""
    pairs, _ = make_pairs(64, 0, seed=seed)
    src, tgt = Collate()(list(PairDataset(pairs, VOCAB)))
    tgt_in, labels = shift_targets(tgt)
    with torch.no_grad():
        logits = _model(seed)(src, tgt_in)
    eps, flat_labels = 0.1, labels.flatten()
    z0 = logits.flatten(0, 1).double()
    z_low = z0.clone()
    z_low[:, PAD] -= 100.0
    compare = []
    for z in (z0, z_low):
        z = z.clone().requires_grad_()
        ours = F.cross_entropy(z, flat_labels, ignore_index=PAD, label_smoothing=eps)
        theirs = _hand_smoothed_kl(z, flat_labels, PAD, eps)
        (g_ours,) = torch.autograd.grad(ours, z)
        (g_theirs,) = torch.autograd.grad(theirs, z)
        cosine = F.cosine_similarity(g_ours.flatten(), g_theirs.flatten(), 0).item()
        compare.append((ours.item(), theirs.item(), cosine))
    return compare


@pytest.mark.parametrize("seed", SEEDS)
def test_lowering_pad_moves_the_two_smoothed_losses_apart(seed):
    """At the lesson's size (its untrained model on 64 examples): lowering the PAD
    logit by 100 raises PyTorch's loss by 0.13-0.17 and lowers the hand-written one
    by 0.004-0.037; gradient cosines above 0.9999, seeds 0-4."""
    (l1, k1, cos1), (l2, k2, cos2) = _smoothed_losses(seed)
    assert l2 > l1 and k2 < k1
    assert min(cos1, cos2) > 0.9


def _padding_tails(seed):
    """§6.3's two runs, losses over their last 10 steps: {True: reported with padding
    counted, "counted_real": that run's loss on its real tokens, False: padding
    ignored}."""
    train_set, _ = _task(seed, 400, 1)
    tail = {}
    for count_padding in (True, False):
        model = _model(seed, n_layers=1, n_heads=1)
        opt = torch.optim.Adam(model.parameters(), lr=3e-3)
        loader = DataLoader(
            train_set,
            batch_size=BATCH,
            shuffle=True,
            collate_fn=Collate(pad_to=(32, 32)),
            generator=torch.Generator().manual_seed(seed),
        )
        reported, real_only = [], []
        for _, (src, tgt) in zip(range(25), loader):
            model.train()
            tgt_in, labels = shift_targets(tgt)
            logits = model(src, tgt_in)
            real_loss = sequence_loss(logits, labels, PAD)
            counted = F.cross_entropy(logits.flatten(0, 1), labels.flatten())
            loss = counted if count_padding else real_loss
            opt.zero_grad()
            loss.backward()
            opt.step()
            reported.append(loss.item())
            real_only.append(real_loss.item())
        tail[count_padding] = statistics.mean(reported[-10:])
        if count_padding:
            tail["counted_real"] = statistics.mean(real_only[-10:])
    return tail


@pytest.mark.parametrize("seed", SEEDS)
def test_a_loss_that_counts_padding_reads_lower(seed):
    """Two runs of 25 steps (the lesson: 50) of a one-layer, one-head model, every
    batch padded to 32, losses over the last 10 steps: the counted loss is
    0.51-0.53 times the same run's loss on its real tokens and 0.59-0.74 times the
    loss of the run that ignores padding, seeds 0-4."""
    tail = _padding_tails(seed)
    assert tail[True] < 0.75 * tail["counted_real"]
    assert tail[True] < 0.9 * tail[False]


# ------------------------------------------------------------------- lesson, §6.5

SPIKE_AT, CLIP_STEPS, CLIP_LR = 25, 70, 1e-2


def _clip_run(seed, max_norm, train_set, held_out):
    """§6.5's run_clip: the loss of batch SPIKE_AT multiplied by 1000."""
    model = _model(seed, n_layers=1, n_heads=1)
    params = list(model.parameters())
    opt = torch.optim.Adam(params, lr=CLIP_LR, betas=(0.9, 0.98), eps=1e-9)
    norms, losses, sizes, cosines, spike_update = [], [], [], [], None
    for step, (src, tgt) in zip(range(CLIP_STEPS), _bucketed(train_set, seed)):
        model.train()
        opt.zero_grad()
        tgt_in, labels = shift_targets(tgt)
        loss = sequence_loss(model(src, tgt_in), labels, PAD)
        (loss * (1000.0 if step == SPIKE_AT else 1.0)).backward()
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        before = torch.cat([p.detach().flatten() for p in params])
        opt.step()
        update = torch.cat([p.detach().flatten() for p in params]) - before
        spike_update = update if step == SPIKE_AT else spike_update
        sizes.append((update.pow(2).mean().sqrt() / CLIP_LR).item())
        cosines.append(
            F.cosine_similarity(update, spike_update, 0).item()
            if spike_update is not None
            else float("nan")
        )
        norms.append(norm.item())
        losses.append(loss.item())
    return {
        "norm": norms,
        "loss": losses,
        "size": sizes,
        "cos": cosines,
        "acc": _next_token_accuracy(model, held_out),
        "model": model,
    }


@functools.cache
def _clip_runs(seed):
    """(unclipped run, run clipped at 1.0, held-out sources), shared by the tests of
    §6.5 and §6.7. Runs of 70 steps with the bad batch at step 25 (the lesson: 100
    and 50) of a one-layer, one-head model, at lr 1e-2 (the lesson: 3e-3): with the
    bad batch this early, a smaller rate would leave the ordinary updates before it
    too large for the jump to show."""
    train_set, held_out = _task(seed, 1100, 100)
    free = _clip_run(seed, float("inf"), train_set, held_out)
    clip = _clip_run(seed, 1.0, train_set, held_out)
    return free, clip, held_out[0]


@pytest.mark.parametrize("seed", SEEDS)
def test_a_bad_batch_steers_adams_updates(seed):
    """Seeds 0-4: the bad batch's gradient norm is 740-1190 times the median before
    it; the update it makes is 1.64-1.83 times the size of those before it, and the
    next 5 updates keep a cosine of at least 0.95 with it."""
    free, _, _ = _clip_runs(seed)
    S = SPIKE_AT
    typical = statistics.median(free["norm"][:S])
    before_size = statistics.median(free["size"][S - 10 : S])
    assert free["norm"][S] > 100 * typical
    assert free["size"][S] > 1.5 * before_size
    assert min(free["cos"][S + 1 : S + 6]) > 0.7


@pytest.mark.parametrize("seed", SEEDS)
def test_after_a_bad_batch_unclipped_updates_stay_smaller(seed):
    """From 30 steps after the bad batch on (as in the lesson), the unclipped run's
    median update is 0.48-0.69 times the clipped run's, seeds 0-4."""
    free, clip, _ = _clip_runs(seed)
    late = slice(SPIKE_AT + 30, CLIP_STEPS)
    assert statistics.median(free["size"][late]) < 0.75 * statistics.median(
        clip["size"][late]
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_clipping_ends_lower_and_more_accurate(seed):
    """Seeds 0-4: over the last 20 steps the clipped run's loss is 0.36-0.48 times
    the unclipped run's; next-character accuracy 0.67-0.72 clipped against
    0.41-0.54 unclipped."""
    free, clip, _ = _clip_runs(seed)
    assert statistics.mean(clip["loss"][-20:]) < statistics.mean(free["loss"][-20:])
    assert clip["acc"] > free["acc"]


@pytest.mark.parametrize("seed", SEEDS)
def test_clipping_leaves_ordinary_updates_their_size(seed):
    """Over the 10 updates before the bad batch, the clipped run's median update is
    1.01-1.04 times the unclipped run's, seeds 0-4."""
    free, clip, _ = _clip_runs(seed)
    S = SPIKE_AT
    before_size = statistics.median(free["size"][S - 10 : S])
    assert 0.8 < statistics.median(clip["size"][S - 10 : S]) / before_size < 1.25


# ------------------------------------------------------------- lesson, §6.6–6.7


def _padding_share(batches, src_lengths, tgt_lengths):
    """The share of padding when each batch is padded to its own longest sequence
    (Collate's dynamic padding), from the lengths alone."""
    real = sum(src_lengths[i] + tgt_lengths[i] for b in batches for i in b)
    padded = sum(
        len(b) * (max(src_lengths[i] for i in b) + max(tgt_lengths[i] for i in b))
        for b in batches
    )
    return 1 - real / padded


def _padding_shares(seed):
    """§6.6's shares of padding over one epoch: (padded to 32, dynamic padding of
    shuffled batches, dynamic padding of bucketed batches)."""
    src_lengths, tgt_lengths = _lengths(make_pairs(6000, 300, seed=seed)[0])
    n = len(src_lengths)
    pad_to_32 = 1 - (sum(src_lengths) + sum(tgt_lengths)) / (n * (32 + 32))
    shuffled = DataLoader(
        range(n),
        batch_size=32,
        shuffle=True,
        collate_fn=list,
        generator=torch.Generator().manual_seed(seed),
    )
    bucketed = BucketBatchSampler(src_lengths, 32, seed=seed)
    dynamic_shuffled = _padding_share(list(shuffled), src_lengths, tgt_lengths)
    dynamic_bucketed = _padding_share(list(bucketed), src_lengths, tgt_lengths)
    return pad_to_32, dynamic_shuffled, dynamic_bucketed


@pytest.mark.parametrize("seed", SEEDS)
def test_bucketing_pads_least(seed):
    """At the lesson's size (one epoch of 6000 pairs in batches of 32), seeds 0-4:
    padding is 57% of the positions padded to 32, 23% dynamically padded and shuffled,
    9.6-9.8% dynamically padded and bucketed (0.50-0.51 of the bound, a third of the
    first). Computed from the lengths; at seed 0 it equals the lesson's shares."""
    pad_to_32, dynamic_shuffled, dynamic_bucketed = _padding_shares(seed)
    assert dynamic_bucketed < pad_to_32 / 3
    assert dynamic_bucketed < dynamic_shuffled


def _sequence_logprob(model, src, out):
    """§6.7: the log-probability of each decoded row, up to its EOS."""
    model.eval()
    with torch.no_grad():
        logp = model(src, out[:, :-1]).log_softmax(-1)
        logp = logp.gather(-1, out[:, 1:, None])[..., 0]
    keep = torch.ones_like(out[:, 1:], dtype=torch.bool)
    for i, row in enumerate(out.tolist()):
        if EOS in row[1:]:
            keep[i, row[1:].index(EOS) + 1 :] = False
    return (logp * keep).sum(-1)


def _beam_and_greedy(seed):
    """§6.7: the log-probabilities of greedy's and a beam of 4's outputs for 30
    held-out dates, under the clipped model of the §6.5 tests."""
    _, clip, src = _clip_runs(seed)
    model, src = clip["model"], src[:30]
    greedy = _sequence_logprob(model, src, greedy_decode(model, src, 20))
    beam = _sequence_logprob(model, src, beam_search(model, src, 20, beam_size=4))
    return greedy, beam


@pytest.mark.parametrize("seed", SEEDS)
def test_beam_outputs_are_at_least_as_likely_as_greedy(seed):
    """The clipped model of the §6.5 tests, 30 held-out dates (the lesson: 100), a beam
    of 4: the beam's mean log-probability exceeds greedy's by 0.1-2.8 nats, seeds
    0-4."""
    greedy, beam = _beam_and_greedy(seed)
    assert beam.mean() >= greedy.mean()


# --------------------------------------------------------------------- schedules


def _warmup_losses(seed):
    """The schedules page's three runs: {"hot": Post-LN at the peak rate from the
    first step, "warm": Post-LN warmed up to it, "pre": Pre-LN at it}, mean loss over
    the last 5 steps."""
    train_set, _ = _task(seed, 600, 1)
    steps, peak = 36, 3e-2
    final = {}
    for name, post_ln, warmup in (
        ("hot", True, 0),
        ("warm", True, steps // 4),
        ("pre", False, 0),
    ):
        model = _model(seed, n_heads=2, norm_first=not post_ln)
        opt = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)

        def rate(step, warmup=warmup):
            return peak * min(1.0, (step + 1) / warmup) if warmup else peak

        sched = torch.optim.lr_scheduler.LambdaLR(opt, rate)
        loader = _bucketed(train_set, seed)
        history = fit(
            model, loader, opt, sched, max_steps=steps, max_norm=None, progress=False
        )
        final[name] = statistics.mean(history.loss[-5:])
    return final


@pytest.mark.parametrize("seed", SEEDS)
def test_post_ln_without_warmup_ends_higher(seed):
    """Three runs of 36 steps (the page: 200) at the page's peak 3e-2, two heads,
    warm-up over the first quarter, losses over the last 5 steps: Post-LN without
    warm-up ends 1.62-2.01 times as high as warmed up and 2.41-2.70 times as high as
    Pre-LN, seeds 0-4 (the page's size gave 1.7-4.0 and 2.1-5.4)."""
    final = _warmup_losses(seed)
    assert final["hot"] > 1.3 * final["warm"] and final["hot"] > 1.3 * final["pre"]


# ------------------------------------------------------------------------- heads


def _head_accuracies(seed):
    """The heads page's runs, shortened: ({heads: held-out next-character accuracy},
    the accuracy of always predicting the most common next character)."""
    train_set, held_out = _task(seed, 400, 100)
    labels = held_out[1][:, 1:]
    labels = labels[labels != PAD]
    majority = labels.bincount().max().item() / labels.numel()
    accuracy = {}
    for n_heads in (1, 2, 4, 8):
        model = _model(seed, n_heads=n_heads, n_layers=1)
        width = model.d_model
        opt = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
        sched = noam_scheduler(opt, width, 10, factor=1e-2 * math.sqrt(width * 10))
        loader = _bucketed(train_set, seed)
        fit(model, loader, opt, sched, max_steps=20, progress=False)
        accuracy[n_heads] = _next_token_accuracy(model, held_out)
    return accuracy, majority


@pytest.mark.parametrize("seed", SEEDS)
def test_every_head_count_learns(seed):
    """The page's one-layer model at d_model = 32 with 1, 2, 4 and 8 heads, 20 steps
    (the page: 80) with the page's schedule warming up over 10 (the page: 40):
    held-out next-character accuracy is 3.4-4.5 times the most-common-character
    baseline for every head count, seeds 0-4 (the page's size: 5.1-5.8)."""
    accuracy, majority = _head_accuracies(seed)
    assert all(a > 3 * majority for a in accuracy.values()), accuracy


# ---------------------------------------------------------------------- capstone


def _style(source, target):
    """Which of tformer_ref.data.STYLES wrote ``source``, the date ``target`` names."""
    day, month, year = target.split()
    date = dt.date(int(year), MONTHS.index(month) + 1, int(day))
    return next(i for i, style in enumerate(STYLES) if style(date) == source)


def _styles_per_batch(seed):
    """The capstone's count: (styles per shuffled batch, per bucketed batch)."""
    pairs, _ = make_pairs(6400, 0, seed=seed)
    styles = [_style(s, t) for s, t in pairs]
    order = torch.randperm(len(pairs), generator=torch.Generator().manual_seed(seed))
    shuffled = list(BatchSampler(order.tolist(), 128, drop_last=False))
    bucketed = list(BucketBatchSampler(_lengths(pairs)[0], 128, seed=seed))

    def per_batch(batches):
        return statistics.mean(len({styles[i] for i in b}) for b in batches)

    return per_batch(shuffled), per_batch(bucketed)


@pytest.mark.parametrize("seed", SEEDS)
def test_bucketed_batches_hold_fewer_styles(seed):
    """One pool of the sampler (50 batches of 128; the page: 20 000 pairs, 3 pools
    and a part): a shuffled batch holds 7.0 styles, a bucketed one 3.04-3.12, a ratio
    of 2.24-2.30, seeds 0-4 (the page's size: 2.26-2.27)."""
    shuffled, bucketed = _styles_per_batch(seed)
    assert shuffled > 2 * bucketed


def _cross_attention(model, src, out):
    """The capstone's hook: the last decoder layer's cross-attention weights."""
    captured, busy = [], []
    module = model.decoder.layers[-1].cross_attn

    def hook(mod, args, kwargs, output):
        if busy or captured:
            return
        busy.append(True)
        captured.append(mod(*args, **{**kwargs, "return_weights": True})[1])

    handle = module.register_forward_hook(hook, with_kwargs=True)
    try:
        model.eval()
        with torch.no_grad():
            model(src, out)
    finally:
        handle.remove()
    return captured[0][0]


@pytest.mark.skipif(
    os.environ.get("TFORMER_FULL_CLAIMS") != "1",
    reason="the capstone's own run, 40-100 s a seed on a CPU: set TFORMER_FULL_CLAIMS=1",
)
@pytest.mark.parametrize("seed", SEEDS)
def test_the_capstone_run_passes_on_every_seed(seed):
    """The capstone page's run, unchanged but for the seed (no smaller run reaches a
    99% pass mark). Measured on a CPU, seeds 0-4: 99% first reached on the monitoring
    dates at step 264, 220, 264, 308, 220 of 440 (the limit, 70%, is step 308);
    final exact match 99.9-100%; greedy, beam and beam with length penalty 99-100% on
    100 dates; the best head's share on the year's digits 2.9-3.3 times an even
    spread."""
    pass_mark, margin, steps, warmup = 0.99, 0.7, 440, 60
    train_pairs, held_out = make_pairs(20000, 1200, seed=seed)
    collate = Collate()
    loader = DataLoader(
        PairDataset(train_pairs, VOCAB),
        batch_size=128,
        shuffle=True,
        collate_fn=collate,
        generator=torch.Generator().manual_seed(seed),
    )
    stop_batches = [collate(list(PairDataset(held_out[:200], VOCAB)))]
    final = PairDataset(held_out[200:], VOCAB)
    final_batches = [collate(final[i : i + 500]) for i in range(0, len(final), 500)]
    config = {"n_heads": 8, "n_layers": 2, "dropout": 0.0, "max_len": 32}
    torch.manual_seed(seed)
    model = Transformer(len(VOCAB), len(VOCAB), d_model=64, d_ff=128, **config)
    knee, peak = steps // 2, noam_lambda(warmup - 1, 64, warmup)

    def rate(step):
        if step < warmup:
            return peak * (step + 1) / warmup
        if step < knee:
            return peak * (1 - 0.9 * (step - warmup) / (knee - warmup))
        return peak * 0.1 * (steps - step) / (steps - knee)

    opt = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    history = fit(
        model,
        loader,
        opt,
        torch.optim.lr_scheduler.LambdaLR(opt, rate),
        max_steps=steps,
        max_norm=1.0,
        evaluate=lambda m: evaluate_accuracy(m, stop_batches, max_len=20),
        eval_every=steps // 10,
        progress=False,
    )
    passed = [s for s, a in zip(history.eval_step, history.eval_acc) if a >= pass_mark]
    assert passed and passed[0] <= margin * steps
    preds = [greedy_decode(model, s, 20) for s, _ in final_batches]
    final_acc = sum(
        sequence_accuracy(p, t) * len(t) for p, (_, t) in zip(preds, final_batches)
    ) / len(final)
    assert final_acc >= pass_mark

    src, tgt = final_batches[0][0][:100], final_batches[0][1][:100]
    want = [strip(t) for t in tgt]

    def exact(out):
        return sum(strip(o) == w for o, w in zip(out, want)) / len(want)

    assert exact(preds[0][:100]) >= 0.97
    assert exact(beam_search(model, src, 20, beam_size=4)) >= 0.97
    assert exact(beam_search(model, src, 20, beam_size=4, length_penalty=0.6)) >= 0.97

    src = final_batches[0][0]
    i = next(i for i in range(len(src)) if VOCAB.decode(src[i])[0].isalpha())
    one_src = src[i : i + 1, : int((src[i] != PAD).sum())]
    one_out = greedy_decode(model, one_src, 20)
    weights = _cross_attention(model, one_src, one_out[:, :-1])
    source_text, year = VOCAB.decode(one_src[0]), VOCAB.decode(one_out[0])[-4:]
    year_cols = list(range(source_text.index(year), source_text.index(year) + 4))
    n_out = one_out.size(1) - 1
    year_rows = list(range(n_out - 5, n_out - 1))
    share = weights[:, year_rows][:, :, year_cols].sum(-1).mean(-1)
    assert share.max() > 2 * len(year_cols) / one_src.size(1)
