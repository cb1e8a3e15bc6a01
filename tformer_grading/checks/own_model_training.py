"""The own-model capstone's fixed recipe, and the learner's model run under it.

:mod:`.own_model` says what the capstone requires; this module only runs the model,
the same way for every learner: the date data of §6.1, the model built with the
recipe's sizes and the course's initialisation, its interface and eval-mode logits on
the probes' fixed batch, its own modules and their calls in order, the training loop
and greedy decoding; and ``batch_loss``, which the recipe trains with, read back on a
stand-in model: the decoder input it feeds, then the labels, normaliser and smoothing
its gradient shows (:mod:`.measure.losses`).

Shape letters: B batch, Ss source length, St target length, V vocabulary.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from tformer_ref.data import BOS, EOS, PAD, CharVocab, Collate, PairDataset, make_pairs
from tformer_ref.decoding import strip
from tformer_ref.device import get_device
from tformer_ref.model import xavier_init_

from ..guard.integrity import seal
from .ch05 import S_DECODER
from .ch06 import S_LOSS, S_SHIFT
from .diagnosis import CheckFailure, Raised, fail, quiet, run
from .measure.closeness import near
from .measure.losses import (
    cross_entropy_normaliser,
    gradient_labels,
    normaliser_kind,
    reached,
)
from .measure.sizes import named
from .measure.softmax import normalised_over

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True

#: The exercise whose checks (own_model's) run this module (its bank holds the answers).
ASSIGNMENT = "ch06_own_model"

# Measured on CPU with the solution's pieces under five initialisation seeds: the bar
# (own_model.THRESHOLD, 90 %) first passed between step 240 and 420 of 600, 95-99 %
# exact match at step 420, 99-100 % at the end; about 25 ms of one core per step, so
# the training takes about 15 s on an idle machine.
D_MODEL, N_HEADS, D_FF, N_LAYERS = 32, 4, 64, 1
N_TRAIN, N_TEST, BATCH = 4000, 200, 64
STEPS, WARMUP, PEAK_LR = 600, 60, 0.01
DECODE_STEPS = 18  # the longest target, "30 September 2049", is 17 characters + EOS
SECONDS_LIMIT = 45.0  # training stops there (nbgrader stops a cell at 60 s)
SEED = 0


def date_data():
    """(vocabulary, training items, held-out src [N, Ss], held-out tgt [N, St])."""
    vocab = CharVocab.for_dates()
    train_pairs, test_pairs = make_pairs(N_TRAIN, N_TEST, seed=SEED)
    src, tgt = Collate()(PairDataset(test_pairs, vocab).items)
    return vocab, PairDataset(train_pairs, vocab), src, tgt


def build_model(
    title: str, model_cls, vocab_size: int, seed: int = SEED, layers: int = N_LAYERS
) -> nn.Module:
    """``model_cls(V, D, H, F, layers)`` under ``seed``, with the course's Xavier
    initialisation (§4.6), on the course's device; a model that cannot be built or
    has nothing to train fails ``title``."""
    name = getattr(model_cls, "__name__", "model")
    call = f"{name}({vocab_size}, {D_MODEL}, {N_HEADS}, {D_FF}, {layers})"
    with torch.random.fork_rng(devices=[]), quiet():
        torch.manual_seed(seed)
        try:
            model = model_cls(vocab_size, D_MODEL, N_HEADS, D_FF, layers)
            if not isinstance(model, nn.Module):
                got = type(model).__name__
                fail(title, f"{call} must build an nn.Module, got {got}", S_DECODER)
            xavier_init_(model)
        except CheckFailure:
            raise
        except Exception as exc:  # noqa: BLE001 - the learner's code may raise anything
            fail(title, f"{call} raised {Raised(exc)!r}", S_DECODER)
    if not any(p.requires_grad for p in model.parameters()):
        fail(
            title,
            f"{call} has no trainable parameters: keep the blocks in an "
            "nn.ModuleList and the layers as attributes of the module.",
            S_DECODER,
        )
    return model.to(get_device())


def probe_batch(device) -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed src [2, 9] (row 0 padded) and tgt [2, 7] (BOS ... EOS, row 1 padded):
    with the model's sizes (D=32, H=4, Dh=8), every size different, so that each
    number of a size error reads as one of them."""
    src = torch.tensor(
        [[8, 9, 10, 11, 12, 13, EOS, PAD, PAD], [14, 9, 15, 16, 17, 18, 19, 20, EOS]]
    )
    tgt = torch.tensor(
        [[BOS, 20, 21, 22, 23, 24, EOS], [BOS, 25, 26, 27, EOS, PAD, PAD]]
    )
    return src.to(device), tgt.to(device)


def eval_logits(model, src, tgt_in):
    """model(src, tgt_in) in eval mode without gradients (a Raised on error)."""
    model.eval()
    with torch.no_grad():
        return run(model, (src, tgt_in))


def own_modules(model) -> list[tuple[str, nn.Module]]:
    """The learner's modules inside ``model`` that hold parameters, each under every
    name it has."""
    return [
        (name, m)
        for name, m in model.named_modules(remove_duplicate=False)
        if name
        and not type(m).__module__.startswith("torch.")
        and any(True for _ in m.parameters())
    ]


def calls_in_order(model, src, tgt_in) -> list[tuple[str, str, torch.Tensor]]:
    """("in" or "out", the module's class name, its first input or its output) of each
    call of the learner's modules while ``model(src, tgt_in)`` runs, in order: a
    module's input is noted when it is called, before its parts' (which
    ``measure.trace``, noting calls as they return, does not say)."""
    events = []

    def note(kind, module, value):
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            events.append((kind, type(module).__name__, value))

    hooks = []
    for _, module in own_modules(model):
        hooks.append(
            module.register_forward_pre_hook(
                lambda m, args: note("in", m, args[0] if args else None)
            )
        )
        hooks.append(module.register_forward_hook(lambda m, i, o: note("out", m, o)))
    eval_logits(model, src, tgt_in)
    for hook in hooks:
        hook.remove()
    return events


def require_forward(title: str, model, src, tgt_in, vocab_size: int) -> None:
    """The interface: model(src [B, Ss], tgt_in [B, St]) -> float logits [B, St, V]."""
    out = eval_logits(model, src, tgt_in)
    b, ss, st = *src.shape, tgt_in.size(1)
    sizes = named(V=vocab_size, D=D_MODEL, H=N_HEADS, Dh=D_MODEL // N_HEADS)
    call = f"model(src [{named(B=b, Ss=ss)}], tgt_in [.., St={st}]) ({sizes})"
    want = [src.size(0), tgt_in.size(1), vocab_size]
    if isinstance(out, Raised):
        fail(title, f"{call} raised {out!r}", S_DECODER)
    if not isinstance(out, torch.Tensor) or list(out.shape) != want:
        got = list(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        fail(
            title,
            f"{call} must return logits of shape {want} (B, St, V), got {got}",
            S_DECODER,
        )
    if not out.is_floating_point():
        fail(
            title,
            f"the logits must be a float tensor, got dtype {out.dtype}",
            S_DECODER,
        )


def greedy(model, src: torch.Tensor, steps: int = DECODE_STEPS) -> torch.Tensor:
    """src [B, Ss] -> [B, T]: BOS, then the argmax of ``model(src, prefix)[:, -1]`` at
    each step (the learner's model has no separate encode and decode). A finished row
    gets PAD."""
    model.eval()
    out = torch.full((src.size(0), 1), BOS, dtype=torch.long, device=src.device)
    finished = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
    with torch.no_grad():
        for _ in range(steps):
            nxt = model(src, out)[:, -1].argmax(dim=-1).masked_fill(finished, PAD)
            out = torch.cat([out, nxt[:, None]], dim=1)
            finished |= nxt == EOS
            if finished.all():
                break
    return out


def exact_match(model, src: torch.Tensor, tgt: torch.Tensor) -> float:
    """Greedy exact-match accuracy of ``model`` on src [N, Ss], tgt [N, St]."""
    pred = greedy(model, src.to(get_device())).cpu()
    return sum(strip(p) == strip(t) for p, t in zip(pred, tgt)) / max(1, len(pred))


def schedule(step: int, steps: int) -> float:
    """Linear warm-up to PEAK_LR over WARMUP steps, then linear decay to 0 at ``steps``
    (a short run cannot wait for Noam's slow decay: §6.4)."""
    warmup = min(WARMUP, steps // 2)
    return min((step + 1) / warmup, max(0.0, (steps - step) / (steps - warmup)))


def _backward(batch_loss, model, src, tgt):
    """One loss and its backward: the loss as a float, or a sentence saying why the
    learner's loss cannot be trained on."""
    loss = batch_loss(model, src, tgt)
    if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
        is_tensor = isinstance(loss, torch.Tensor)
        got = list(loss.shape) if is_tensor else type(loss).__name__
        return f"batch_loss(model, src, tgt) must return a scalar tensor, got {got}"
    if not loss.requires_grad:
        return (
            "batch_loss returned a loss without a gradient (detached from the model?)"
        )
    loss.backward()
    return loss.item()


def train(
    model: nn.Module,
    batch_loss: Callable,
    items: PairDataset,
    steps: int = STEPS,
    evaluate: Callable[[nn.Module], float] | None = None,
    eval_every: int = 50,
) -> dict:
    """The fixed recipe: Adam (0.9, 0.98), warm-up then linear decay, gradients clipped
    at 1, batches of BATCH in a seeded order, ``steps`` updates of
    ``batch_loss(model, src, tgt)``.

    Returns a dict: ``steps`` done, the last ``loss``, ``seconds`` of training
    (evaluations excluded), ``error`` (the learner's exception as a Raised, or a
    sentence), ``curve`` [(step, accuracy)] when ``evaluate`` is given, and
    ``out_of_time`` when training stopped at SECONDS_LIMIT.
    """
    device = get_device()
    # foreach: one fused update for all the small tensors, not a loop over them.
    optimizer = torch.optim.Adam(
        model.parameters(), lr=PEAK_LR, betas=(0.9, 0.98), eps=1e-9, foreach=True
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, functools.partial(schedule, steps=steps)
    )
    order = torch.Generator().manual_seed(SEED)
    collate = Collate()
    result = {
        "steps": 0,
        "loss": float("nan"),
        "seconds": 0.0,
        "error": None,
        "curve": [],
        "out_of_time": False,
    }
    start, evaluating = time.perf_counter(), 0.0
    while result["steps"] < steps:
        perm = torch.randperm(len(items), generator=order).tolist()
        for i in range(0, len(perm) - BATCH + 1, BATCH):
            src, tgt = collate([items[j] for j in perm[i : i + BATCH]])
            model.train()
            optimizer.zero_grad(set_to_none=True)
            loss = run(_backward, (batch_loss, model, src.to(device), tgt.to(device)))
            if isinstance(loss, (Raised, str)):
                result["error"], result["batch"] = loss, tuple(tgt.shape)
                return result
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
            optimizer.step()
            scheduler.step()
            result["steps"] += 1
            result["loss"] = loss
            result["seconds"] = time.perf_counter() - start - evaluating
            if not math.isfinite(loss):
                result["error"] = f"the loss became {loss} at step {result['steps']}"
                return result
            if result["seconds"] > SECONDS_LIMIT:  # a busy machine or a slow model
                result["out_of_time"] = True
                return result
            if evaluate is not None and result["steps"] % eval_every == 0:
                tick = time.perf_counter()
                result["curve"].append((result["steps"], evaluate(model)))
                evaluating += time.perf_counter() - tick
            if result["steps"] >= steps:
                break
    return result


# ------------------------------------------------------------ batch_loss, read back
# The loss the recipe trains on, given a stand-in model whose logits it cannot change:
# the decoder input it feeds, then its gradient on those logits (measure.losses).


def _same_ids(a, b) -> bool:
    return isinstance(a, torch.Tensor) and a.shape == b.shape and torch.equal(a, b)


class _Spy(nn.Module):
    """A model that records the decoder input it is given and returns fixed logits
    (log-probabilities when the learner's model returns those), kept with a gradient:
    the loss is read off it."""

    def __init__(self, vocab_size: int, log_probs: bool):
        super().__init__()
        self.vocab_size, self.log_probs, self.seen = vocab_size, log_probs, []
        self.bias = nn.Parameter(torch.zeros(()))

    def forward(self, src, tgt_in):
        g = torch.Generator().manual_seed(SEED)
        raw = torch.randn(*tgt_in.shape, self.vocab_size, generator=g)
        raw = raw.to(tgt_in.device).requires_grad_()
        self.seen.append((tgt_in.detach().clone(), raw))
        return (raw.log_softmax(-1) if self.log_probs else raw) + self.bias


#: A loss the learner's batch_loss returns, against one recomputed from its logits.
_close = functools.partial(near, rel=1e-4, abs_=1e-4)


SHIFT_PROBLEMS = (
    (
        lambda tgt: tgt,
        (
            "batch_loss gives the model the whole target, not the target without its "
            "last token: the target is not shifted, so each position learns to copy "
            "its own input token instead of predicting the next one"
        ),
    ),
    (
        lambda tgt: tgt[:, 1:],
        (
            "batch_loss gives the model the labels (the target without its first "
            "token) as its input: the decoder reads what it must predict"
        ),
    ),
)
SPECIAL_NAMES = {PAD: "PAD", BOS: "BOS", EOS: "EOS"}
# What batch_loss divides its token sum by (measure.losses.normaliser_kind), when it
# scores every real label token and nothing else; "real tokens" is the right one.
NORMALISED = {
    "1": "batch_loss sums the cross-entropy over the {n} real label tokens instead of "
    "averaging it (the step size then grows with the batch)",
    "batch": "batch_loss divides the summed cross-entropy by the batch size ({b}), not "
    "by the number of real label tokens ({n})",
    "per sequence": "batch_loss averages each sentence's mean cross-entropy: the "
    "tokens of a short sentence weigh more than those of a long one (the mean runs "
    "over the real label tokens of the whole batch)",
}


def _loss_problem(got: float, logits, grad, tgt) -> tuple | None:
    """What is wrong with the loss ``got`` batch_loss computed from ``logits``
    [B, T, V], read off its gradient ``grad`` (measure.losses): the label it scored
    each position against, the positions it reached, what it divides by and its label
    smoothing. None when it is the mean cross-entropy over the real label tokens."""
    labels, b = tgt[:, 1:], tgt.size(0)
    per = F.cross_entropy(logits.transpose(1, 2), labels, reduction="none")
    real, hit, scored = labels != PAD, reached(grad), gradient_labels(grad)
    right, n = (per * real).sum() / real.sum(), int(real.sum())
    wrong = (
        (
            f"batch_loss gives {got:.4f} where the mean cross-entropy over the real "
            f"label tokens (of {logits.size(-1)} classes) is {right.item():.4f}"
        ),
        S_LOSS,
    )
    if not hit.any():
        return None if _close(got, right.item()) else wrong
    big_n, smoothing, residual = cross_entropy_normaliser(
        logits[hit].double(), grad[hit].double(), scored[hit]
    )
    full_n = torch.zeros(hit.shape, dtype=big_n.dtype, device=hit.device)
    kind = normaliser_kind(full_n.masked_scatter(hit, big_n), hit)
    if kind == "constant" and _close(big_n[0].item(), b):
        kind = "batch"
    if residual.max() > 1e-3:  # not a cross-entropy; nll_loss of logits is -onehot
        off_label = grad[hit].scatter(-1, scored[hit, None], 0.0)
        if torch.equal(hit, real) and not off_label.any():
            return (
                (
                    "batch_loss takes nll_loss of the logits, which expects "
                    "log-probabilities: it is minus the label's logit, unbounded below "
                    "(log_softmax first, or cross_entropy)"
                ),
                S_LOSS,
            )
        return wrong
    if torch.equal(scored[hit], tgt[:, :-1][hit]):
        return (
            (
                "batch_loss compares each position with its own input token, not with "
                "the next one: the labels are not shifted"
            ),
            S_SHIFT,
        )
    if not torch.equal(scored[hit], labels[hit]):
        return wrong
    share = round(smoothing.mean().item(), 2)
    if torch.equal(hit, real):
        if kind in NORMALISED:
            return NORMALISED[kind].format(n=n, b=b), S_LOSS
        if kind == "real tokens" and 0 < share < 1:
            return (
                (
                    f"batch_loss smooths the labels (label_smoothing={share:g}): the "
                    "exercise asks for the plain mean cross-entropy over the real "
                    "label tokens"
                ),
                S_LOSS,
            )
        return None if kind == "real tokens" and _close(got, right.item()) else wrong
    if kind != "real tokens":
        return wrong
    if hit.all():
        return (
            (
                "batch_loss counts the padding: the mean runs over the PAD labels too "
                "(ignore_index=PAD leaves them out)"
            ),
            S_LOSS,
        )
    for token in labels.unique().tolist():
        if token != PAD and torch.equal(hit, labels != token):
            return (
                (
                    f"batch_loss leaves out the labels {token} "
                    f"({SPECIAL_NAMES.get(token, 'a character')}) and counts the "
                    f"padding: its ignore_index is {token}, not PAD = {PAD}"
                ),
                S_LOSS,
            )
    return wrong


def probe_loss(model, batch_loss, vocab_size, src, tgt):
    """Is batch_loss the teacher-forced loss over the real tokens? (None: yes.)"""
    out = eval_logits(model, src, tgt[:, :-1])
    log_probs = (
        isinstance(out, torch.Tensor)
        and out.is_floating_point()
        and normalised_over(out.exp(), ((-1,),)) == (-1,)
    )
    spy = _Spy(vocab_size, log_probs).to(src.device)
    loss = run(batch_loss, (spy, src, tgt))
    if isinstance(loss, Raised) or not spy.seen:
        return None  # training already reported it
    scalar = isinstance(loss, torch.Tensor) and loss.numel() == 1
    fed, raw = spy.seen[-1]
    if scalar and loss.requires_grad and isinstance(run(loss.backward, ()), Raised):
        return None  # training reports it
    logits = raw.detach().log_softmax(-1) if log_probs else raw.detach()
    grad = torch.zeros_like(logits) if raw.grad is None else raw.grad
    if _same_ids(fed, tgt) and scalar:  # the last position's logits may be dropped
        logits, grad = logits[:, :-1], grad[:, :-1]
        if _loss_problem(float(loss.detach()), logits, grad, tgt) is None:
            return None
    for shifted, text in SHIFT_PROBLEMS:
        if _same_ids(fed, shifted(tgt)):
            return text, S_SHIFT
    if not _same_ids(fed, tgt[:, :-1]):
        return (
            (
                "batch_loss gives the model a decoder input of shape "
                f"{list(fed.shape)} that is not the target without its last token "
                f"({list(tgt[:, :-1].shape)})"
            ),
            S_SHIFT,
        )
    return _loss_problem(float(loss.detach()), logits, grad, tgt) if scalar else None


seal(__name__)
