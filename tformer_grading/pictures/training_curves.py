"""Your bug, trained: the learner's training piece and the reference's, each training
the same small model on the chapter's toy task, their curves side by side.

:func:`show_training` is what an exercise's optional cell calls, with the piece the
learner wrote (one of :data:`KINDS`); everything else in both runs is the reference's,
with the same seed, data and optimizer. Two panels: the held-out loss (measured the
reference's way, so that both runs are judged alike) with, dashed, the loss the
learner's code trained on where it reports one; and the held-out next-token accuracy.
A sentence says what the curves measured (:func:`story`), never why.

The tasks are tiny so that both runs take a few seconds on a CPU: chapter 6 and the
own model reverse sequences of up to 7 symbols (an encoder-decoder); chapter 7 trains
``tformer_ref.toy_lm``'s causal language model on counting sequences, with SGD (a
learning rate that scales the gradient: Adam would hide a wrongly scaled one).

While nbgrader grades a notebook (``NBGRADER_EXECUTION`` is set) the cell only says it
was skipped: it grades nothing, and would cost every learner's grading seconds.

>>> from tformer_ref import training as ref
>>> def shift_nothing(tgt):  # a planted mistake: the decoder reads its own labels
...     return tgt[:, :-1], tgt[:, :-1]
>>> run = train("shift_targets", shift_nothing, steps=30)
>>> run.mine.trained_on[-1] < 0.2 < run.mine.loss[-1]  # its own loss fell, not ours
True
"""

from __future__ import annotations

import contextlib
import functools
import io
import math
import os
import warnings
from dataclasses import dataclass, field

import torch

from tformer_ref import training as ref
from tformer_ref.amp import optimizer_step
from tformer_ref.model import Transformer, xavier_init_
from tformer_ref.toy_lm import TinyCausalLM, count_targets, lm_loss_sum, make_token_data

from ..checks.diagnosis import single_thread
from ..guard.integrity import seal
from .attention_maps import Picture

PAD, BOS, EOS, VOCAB = 0, 1, 2, 13
KINDS = (
    "shift_targets",
    "sequence_loss",
    "train_step",
    "accumulation_step",
    "amp_step",
    "own_model",
)
STEPS, EVERY, BATCH, SEED = 150, 10, 32, 0


@dataclass
class Curve:
    """One run: the held-out loss and accuracy every :data:`EVERY` steps (``at``), and
    the loss the learner's code trained on at each step, where it reports one."""

    at: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    accuracy: list[float] = field(default_factory=list)
    trained_on: list[float] = field(default_factory=list)
    #: What the learner's code raised, and at which step, when it did.
    raised: str = ""


@dataclass(frozen=True)
class Runs:
    kind: str
    mine: Curve
    reference: Curve


# ------------------------------------------------------------------------ the tasks


def reversal(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(src [n, 8], tgt [n, 10]): 3 to 7 symbols, and BOS, the symbols reversed, EOS."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(3, 8, (n,), generator=g)
    symbols = torch.randint(3, VOCAB, (n, 7), generator=g)
    src = torch.zeros(n, 8, dtype=torch.long)
    tgt = torch.zeros(n, 10, dtype=torch.long)
    for i, length in enumerate(lengths.tolist()):
        src[i, :length] = symbols[i, :length]
        tgt[i, 0], tgt[i, length + 1] = BOS, EOS
        tgt[i, 1 : length + 1] = symbols[i, :length].flip(0)
    return src, tgt


def _seq2seq_model(make=None) -> torch.nn.Module:
    torch.manual_seed(SEED)
    if make is None:
        model = Transformer(VOCAB, VOCAB, 32, 4, 1, 64, dropout=0.0, max_len=16)
    else:
        model = make(VOCAB, 32, 4, 64, 1)
    xavier_init_(model)
    return model


def _seq2seq_measure(model) -> tuple[float, float]:
    """(held-out loss, next-token accuracy) of ``model`` on 256 fixed pairs."""
    src, tgt = reversal(256, 10_000)
    tgt_in, labels = ref.shift_targets(tgt)
    model.eval()
    with torch.no_grad():
        logits = model(src, tgt_in)
    real = labels != PAD
    loss = ref.sequence_loss(logits.float(), labels, PAD, 0.0).item()
    hits = ((logits.argmax(-1) == labels) & real).sum().item()
    return loss, hits / real.sum().item()


def _lm_measure(model) -> tuple[float, float]:
    tokens = make_token_data(n=256, seq_len=12, seed=10_000)
    model.eval()
    with torch.no_grad():
        loss_sum, n = lm_loss_sum(model, tokens)
        logits = model(tokens[:, :-1])
    labels = tokens[:, 1:]
    hits = ((logits.argmax(-1) == labels) & (labels != PAD)).sum().item()
    return loss_sum.item() / n, hits / n


# ------------------------------------------------------------------------ the steps
# Each returns a step(model, optimizer, step) -> the loss the code trained on (or
# None) for the learner's piece, or the reference's when ``piece`` is None.


def _seq2seq_step(kind: str, piece):
    shift = piece if kind == "shift_targets" and piece else ref.shift_targets
    loss_of = piece if kind == "sequence_loss" and piece else ref.sequence_loss

    def step(model, optimizer, n):
        src, tgt = reversal(BATCH, n)
        if kind == "train_step" and piece is not None:
            scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
            loss, _ = piece(model, src, tgt, optimizer, scheduler, 1.0, PAD, 0.0)
            return _number(loss)
        if kind == "own_model" and piece is not None:
            model.train()
            optimizer.zero_grad()
            loss = piece[1](model, src, tgt)
        else:
            model.train()
            optimizer.zero_grad()
            tgt_in, labels = shift(tgt)
            loss = loss_of(model(src, tgt_in), labels, PAD, 0.0)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return _number(loss)

    return step


def _lm_step(kind: str, piece):
    def step(model, optimizer, n):
        tokens = make_token_data(n=BATCH, seq_len=12, seed=n)
        model.train()
        if kind == "accumulation_step":
            scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
            micro = [tokens[:8], tokens[8:]]  # uneven: tokens must weigh alike
            if piece is None:
                _reference_accumulation(model, micro, optimizer)
            else:
                piece(model, micro, optimizer, scheduler, lm_loss_sum)
            return None
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
        if piece is None:
            return _reference_amp(model, tokens, optimizer, scaler)
        return _number(piece(model, tokens, _mean_loss, optimizer, scaler, 1.0))

    return step


def _mean_loss(model, tokens):
    loss_sum, n = lm_loss_sum(model, tokens)
    return loss_sum / n


def _reference_accumulation(model, micro, optimizer) -> None:
    optimizer.zero_grad()
    total = sum(count_targets(b) for b in micro)
    for batch in micro:
        (lm_loss_sum(model, batch)[0] / total).backward()
    optimizer.step()


def _reference_amp(model, tokens, optimizer, scaler) -> float:
    optimizer.zero_grad()
    with torch.amp.autocast("cpu", dtype=torch.bfloat16):
        loss = _mean_loss(model, tokens)
    scaler.scale(loss).backward()
    optimizer_step(optimizer, model.parameters(), scaler, max_norm=1.0)
    return _number(loss)


def _number(value) -> float:
    """A loss the code returned, as a float (a tensor that needs grad included)."""
    return float(value.detach()) if isinstance(value, torch.Tensor) else float(value)


# ------------------------------------------------------------------------- training


def _run(kind: str, piece, steps: int) -> Curve:
    """One run of ``steps`` updates; ``piece`` None for the reference's."""
    lm = kind in ("accumulation_step", "amp_step")
    if lm:
        torch.manual_seed(SEED)
        model = TinyCausalLM(vocab=16, d_model=32, n_heads=4, max_len=16)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
        step, measure = _lm_step(kind, piece), _lm_measure
    else:
        own = kind == "own_model" and piece is not None
        model = _seq2seq_model(piece[0] if own else None)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
        step, measure = _seq2seq_step(kind, piece), _seq2seq_measure
    curve = Curve()
    for n in range(steps + 1):
        if n % EVERY == 0 or n == steps:
            loss, accuracy = measure(model)
            curve.at.append(n)
            curve.loss.append(loss)
            curve.accuracy.append(accuracy)
            if not math.isfinite(loss):
                break
        if n < steps:
            try:
                trained = step(model, optimizer, SEED + n)
            except Exception as exc:
                if piece is None:
                    raise
                curve.raised = f"{type(exc).__name__}: {exc} (at step {n})"
                break
            if trained is not None:
                curve.trained_on.append(trained)
    return curve


def train(kind: str, piece, steps: int = STEPS) -> Runs:
    """The learner's ``piece`` and the reference's, each training ``steps`` updates
    (``piece`` for ``"own_model"``: (model class, batch loss function))."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}; got {kind!r}")
    # One thread, as the checks run: the curves do not depend on the machine.
    with torch.random.fork_rng(), single_thread():
        theirs = _run(kind, piece, steps)
        ours = _run(kind, None, steps)
    return Runs(kind, theirs, ours)


# --------------------------------------------------------------------------- words


def story(runs: Runs) -> str:
    """What the curves measured, in words."""
    mine, ours = runs.mine, runs.reference
    steps = mine.at[-1]
    if mine.raised:
        return f"Your code raised {mine.raised}: the check above says more."
    if not all(math.isfinite(v) for v in mine.loss):
        return (
            f"Your run's held-out loss became {mine.loss[-1]} by step {steps}: "
            "training stopped there. The reference's ends at "
            f"{ours.loss[-1]:.2f}."
        )
    said = (
        f"After {steps} steps the held-out loss is {mine.loss[-1]:.2f} for your run "
        f"and {ours.loss[-1]:.2f} for the reference's; the next-token accuracy "
        f"{mine.accuracy[-1]:.0%} and {ours.accuracy[-1]:.0%}."
    )
    trained = mine.trained_on[-1] if mine.trained_on else None
    if trained is not None and trained < 0.5 * mine.loss[-1]:
        return (
            f"{said} The loss your code trained on fell to {trained:.2f}, far below "
            "its held-out loss: what it trained on is easier than the task."
        )
    if abs(mine.loss[-1] - ours.loss[-1]) <= 0.05 * ours.loss[-1] + 0.02:
        if trained is not None and abs(trained - mine.loss[-1]) > 0.2 * mine.loss[-1]:
            return (
                f"{said} Your run trains as the reference's does, but the loss your "
                f"code reports ends at {trained:.2f} (dashed): it measures something "
                "else than the held-out loss."
            )
        return f"{said} Your run trains as the reference's does."
    if mine.loss[-1] > mine.loss[0]:
        return (
            f"{said} Your run's held-out loss rose, from {mine.loss[0]:.2f} at the "
            "start."
        )
    fell = mine.loss[0] - mine.loss[-1]
    if fell < 0.1 * (ours.loss[0] - ours.loss[-1]):
        return f"{said} Your model hardly learned: its loss fell by {fell:.2f}."
    if mine.loss[-1] > ours.loss[-1]:
        when = next(a for a, v in zip(ours.at, ours.loss) if v <= mine.loss[-1])
        said += f" The reference's run was below your final loss by step {when}."
        stalled = _stalled(mine)
        if stalled is not None:
            said += f" Your run's loss stopped falling after step {stalled}."
        return said
    return f"{said} Your run's held-out loss ends below the reference's."


def _stalled(curve: Curve) -> int | None:
    """The step after which the held-out loss never fell by more than 5 % again, when
    that is in the first half of the run; else None."""
    for k, at in enumerate(curve.at):
        if min(curve.loss[k:]) > 0.95 * curve.loss[k]:
            return at if at <= curve.at[-1] / 2 else None
    return None


# ------------------------------------------------------------------------- picture


def draw(runs: Runs) -> Picture:
    """The two runs' curves (module docstring) with :func:`story` as the caption."""
    from .attention_maps import quiet_figure

    caption = story(runs)
    held_out = [v for c in (runs.mine, runs.reference) for v in c.loss]
    top = 1.15 * max(v for v in held_out if math.isfinite(v))
    trained = [v for v in runs.mine.trained_on if math.isfinite(v)]
    # A loss far above the held-out ones (a sum, say) would flatten them: it is drawn
    # to the top of the chart and its legend says how high it goes.
    beyond = bool(trained) and max(trained) > 3 * top

    def plot(fig):
        left, right = fig.subplots(1, 2)
        for curve, name, colour in (
            (runs.reference, "reference", "#1f77b4"),
            (runs.mine, "yours", "#d62728"),
        ):
            left.plot(curve.at, curve.loss, color=colour, label=f"{name}, held out")
            right.plot(curve.at, [100 * a for a in curve.accuracy], color=colour)
        if trained:
            more = f" (up to {max(trained):.3g}, off the chart)" if beyond else ""
            left.plot(
                range(len(runs.mine.trained_on)),
                runs.mine.trained_on,
                color="#d62728",
                linestyle=":",
                label=f"yours, the loss it trained on{more}",
            )
        if beyond or (trained and max(trained) > top):
            left.set_ylim(0, top if beyond else 1.15 * max(trained))
        left.set(xlabel="step", ylabel="loss", title="loss")
        right.set(xlabel="step", ylabel="%", title="next-token accuracy", ylim=(0, 100))
        fig.legend(loc="outside lower center", ncol=1 if beyond else 2, frameon=False)

    png = functools.partial(quiet_figure, plot, height=3.6)
    alt = (
        f"Two line charts of the {runs.kind} training runs, yours and the "
        f"reference's: loss and next-token accuracy against step. {caption}"
    )
    return Picture(png, caption, alt, cells=None)


def show_training(kind: str, *piece, steps: int = STEPS) -> None:
    """The optional cell: train, then show the picture (in a notebook) or print its
    sentence (elsewhere). Skipped while nbgrader grades the notebook. ``piece``: the
    learner's function (two for ``"own_model"``: the model class and the batch
    loss)."""
    if os.environ.get("NBGRADER_EXECUTION"):
        print("Skipped while grading: run this cell yourself to see the curves.")
        return
    chosen = piece if kind == "own_model" else piece[0]
    with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        runs = train(kind, chosen, steps)
    if runs.mine.raised:
        print(story(runs))
        return
    from .attach import show

    if not show(draw(runs)):
        print(story(runs))


seal(__name__)
