"""What chapter 6's train_step check observes of a learner's training step.

The learner's step drives a model, an optimizer and a scheduler that the check
built to record how they are used: every ``decode`` call (training flag, decoder
input, logits, and the gradient that reaches the logits in backward), every
``optimizer.step()`` (the learning rate and the gradients it applied) and
``zero_grad()``, and every ``scheduler.step()``, in order. A twin model with the
same weights gives the reference gradient of each batch. The measurements here
turn those records into numbers (the gradient at ``optimizer.step()`` as a mix of
this batch's and what was left from the last one; the loss's normaliser and label
smoothing are read off the gradient at the logits by measure/losses.py); ``ch06``
names the mistakes.

Shape letters: B batch, St target length, V vocabulary, P all parameters
flattened.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from tformer_ref.baselines import TorchTransformer
from tformer_ref.device import get_device

from ..guard.integrity import seal
from .diagnosis import Raised, fail, run
from .measure.closeness import near
from .measure.losses import cross_entropy_normaliser
from .measure.recorders import recording_lambda_lr, recording_sgd
from .measure.tape import grad_vector

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True

VOCAB = 13
# The batches' sizes (:func:`batches`), and as a crash message names them.
_B, _SS, _ST = 4, 5, 7
SIZES = (
    f"src [B={_B}, Ss={_SS}], tgt [B={_B}, St={_ST}]: T={_ST - 1} positions "
    f"trained, V={VOCAB}"
)
_CONFIG = {
    "d_model": 16,
    "n_heads": 8,
    "n_layers": 2,
    "d_ff": 32,
    "dropout": 0.0,
    "max_len": 32,
}


class RecordingTransformer(TorchTransformer):
    """A TorchTransformer whose ``decode`` (which ``forward`` calls) records each call
    in ``self.log``: ``("forward", ForwardCall)``, and ``("backward", None)`` when the
    gradient reaches its logits. Optimizer and scheduler append to the same log."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.log = []

    def decode(self, tgt_in, memory, src_mask, tgt_mask=None):
        logits = super().decode(tgt_in, memory, src_mask, tgt_mask)
        call = ForwardCall(
            self.training, tgt_in.detach().clone(), logits.detach().double()
        )
        self.log.append(("forward", call))
        if logits.requires_grad:
            logits.register_hook(lambda g, call=call: self._reached(call, g))
        return logits

    def _reached(self, call, grad):
        call.grads.append(grad.detach().double())
        self.log.append(("backward", None))


@dataclass
class ForwardCall:
    """One decode call: mode, ``tgt_in [B, t]``, ``logits [B, t, V]`` (float64) and the
    gradients backward brought to them."""

    training: bool
    tgt_in: torch.Tensor
    logits: torch.Tensor
    grads: list = field(default_factory=list)

    def is_cross_entropy_of(self, labels, where) -> bool:
        """The gradient at the positions ``where`` [B, t] is a cross-entropy's with
        ``labels`` [B, t] (the only case where the labels can be read off it)."""
        _, _, res = cross_entropy_normaliser(
            self.logits[where], self.grads[0][where], labels[where]
        )
        return float(res.max()) < 1e-3


def build_models(seed: int):
    """(model, twin, its weights): the small model the step trains, a copy for the
    reference, and the state dict to reset both to; built under ``seed`` without
    touching the notebook's random state."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = RecordingTransformer(VOCAB, VOCAB, **_CONFIG).to(get_device())
    start = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return model, copy.deepcopy(model), start


def flat_grad(model) -> torch.Tensor:
    """[P] float64: every parameter's gradient (zeros where None), on the CPU."""
    return grad_vector(model.parameters())


def flat_params(model) -> torch.Tensor:
    return torch.cat([p.detach().flatten().double().cpu() for p in model.parameters()])


def param_slices(model) -> list[slice]:
    """Where each parameter tensor lies in the flat [P] vectors."""
    out, at = [], 0
    for p in model.parameters():
        out.append(slice(at, at + p.numel()))
        at += p.numel()
    return out


def recording_optimizer(model, lr: float):
    """SGD over ``model``'s parameters whose ``step()`` logs ``("step", StepCall)`` and
    whose ``zero_grad()`` logs ``("zero_grad", None)`` to ``model.log``."""
    return recording_sgd(
        model.parameters(),
        lr,
        on_step=lambda opt: model.log.append(
            ("step", StepCall(opt.param_groups[0]["lr"], flat_grad(model)))
        ),
        on_zero_grad=lambda opt: model.log.append(("zero_grad", None)),
    )


def _halving(step):
    return 0.5**step


def recording_scheduler(opt, model):
    """LambdaLR halving the rate at every step; ``step()`` logs ``("sched", None)``."""
    return recording_lambda_lr(
        opt, _halving, lambda sched: model.log.append(("sched", None))
    )


@dataclass(frozen=True)
class StepCall:
    """One optimizer.step(): the rate it used and the gradient [P] it applied."""

    lr: float
    grad: torch.Tensor


@dataclass(frozen=True)
class Want:
    """The reference's view of one batch at the learner's current weights."""

    loss: float
    grad: torch.Tensor  # [P] unclipped gradient of the mean real-token loss
    norm: float  # its total norm
    labels: torch.Tensor  # [B, St-1]
    real: torch.Tensor  # [B, St-1] bool, True = a real (non-pad) label


def batch_loss(model, src, tgt, pad_id, eps):
    """The mean cross-entropy over the real tokens, teacher forced."""
    logits = model(src, tgt[:, :-1])
    return F.cross_entropy(
        logits.flatten(0, 1),
        tgt[:, 1:].flatten(),
        ignore_index=pad_id,
        label_smoothing=eps,
    )


def reference_view(twin, model, src, tgt, pad_id, eps) -> Want:
    """Load ``model``'s weights into ``twin``; the batch's loss and gradient there."""
    twin.load_state_dict(model.state_dict())
    twin.train()
    twin.zero_grad(set_to_none=True)
    loss = batch_loss(twin, src, tgt, pad_id, eps)
    loss.backward()
    grad = flat_grad(twin)
    labels = tgt[:, 1:]
    return Want(loss.item(), grad, grad.norm().item(), labels, labels != pad_id)


def loss_at(twin, state, src, tgt, pad_id, eps) -> float:
    """The batch's loss at the weights of ``state`` (a state dict), without gradient."""
    twin.load_state_dict(state)
    with torch.no_grad():
        return batch_loss(twin, src, tgt, pad_id, eps).item()


# ------------------------------------------------------------------- measurements


def slice_name(tgt, tgt_in) -> str:
    """Which slice of tgt ``tgt_in`` is, in the learner's terms."""
    named = {
        "tgt[:, :-1]": tgt[:, :-1],
        "tgt[:, 1:]": tgt[:, 1:],
        "the whole tgt (not shifted)": tgt,
        "tgt[:-1] (rows dropped: sequence-first slicing)": tgt[:-1],
        "tgt[:, :-2]": tgt[:, :-2],
        "tgt[:, 2:]": tgt[:, 2:],
    }
    for name, t in named.items():
        if t.shape == tgt_in.shape and torch.equal(t, tgt_in):
            return name
    return f"a tensor of shape {list(tgt_in.shape)}"


def mix_fit(got, this, left):
    """``got`` [P] as alpha * ``this`` + beta * ``left``: (alpha, beta, relative
    residual). ``left`` may be all zeros (then beta = 0)."""
    if left.norm() <= 1e-12 * max(float(this.norm()), 1e-30):
        basis = this[:, None]
    else:
        basis = torch.stack([this, left], dim=1)
    coef = torch.linalg.lstsq(basis, got[:, None]).solution[:, 0]
    resid = (basis @ coef - got).norm() / max(float(got.norm()), 1e-30)
    beta = float(coef[1]) if coef.numel() > 1 else 0.0
    return float(coef[0]), beta, float(resid)


def per_tensor_scales(got, want, slices):
    """For each parameter tensor: the factor s with got ≈ s · want, and the worst
    relative residual over tensors."""
    scales, worst = [], 0.0
    for sl in slices:
        g, w = got[sl], want[sl]
        s = float(g @ w) / max(float(w @ w), 1e-30)
        worst = max(worst, float((g - s * w).norm()) / max(float(g.norm()), 1e-30))
        scales.append(s)
    return scales, worst


#: A number read back from a float32 step against its expected value.
close = functools.partial(near, rel=2e-3, abs_=1e-7)


# ------------------------------------------------------------------- observing a step


@dataclass(frozen=True)
class StepCase:
    """One run of the learner's step: ``updates`` batches (drawn from ``seed``) on the
    model reset to its first weights."""

    label: str
    seed: int
    pad_id: int
    eps: float
    max_norm: float
    updates: int = 2


@dataclass
class Seen:
    """What one update of the learner's step did, and the reference's view of it."""

    case: StepCase
    update: int  # 1-based
    src: torch.Tensor
    tgt: torch.Tensor
    log: list  # (event, payload) in order: forward, backward, zero_grad, step, sched
    left: torch.Tensor  # [P] gradient on the weights when the step began
    end: torch.Tensor  # [P] gradient when it returned
    before: torch.Tensor  # [P] weights when the step began
    after: torch.Tensor  # [P] weights when it returned
    out: object  # what it returned
    want: Want
    lr: float  # the rate the scheduler had set for this update
    state_after: dict  # the weights the step left, as a state dict
    slices: list
    twin: TorchTransformer

    def loss_after(self) -> float:
        """The batch's loss at the weights the step left."""
        return loss_at(
            self.twin,
            self.state_after,
            self.src,
            self.tgt,
            self.case.pad_id,
            self.case.eps,
        )

    def events(self, kind):
        return [payload for event, payload in self.log if event == kind]

    def traced(self):
        """The decode call that backward reached (the one the loss came from), or
        None."""
        return next((c for c in self.events("forward") if c.grads), None)

    def order(self) -> list:
        """The optimizer ("step") and scheduler ("sched") steps, in order."""
        return [event for event, _ in self.log if event in ("step", "sched")]

    def returned_number(self, i):
        """``float`` of the learner's i-th returned value, or None when it has none."""
        try:
            return float(self.out[i])
        except Exception:  # noqa: BLE001
            return None  # not a pair, or not a number: later stages report it

    def fit_loss(self):
        """(N [B, t], eps [B, t], residual) of the cross-entropy the learner's loss
        is, on the real positions (NaN elsewhere)."""
        call, real = self.traced(), self.want.real
        n, e, res = cross_entropy_normaliser(
            call.logits[real], call.grads[0][real], self.want.labels[real]
        )
        full = torch.full(
            real.shape, float("nan"), dtype=torch.float64, device=real.device
        )
        big_n, eps = full.clone(), full.clone()
        big_n[real], eps[real] = n, e
        return big_n, eps, float(res.max())

    def where(self) -> str:
        return f"In case {self.case.label}, update {self.update}"


def batches(case: StepCase, update: int, pad_id: int):
    """(src [4, 5], tgt [4, 7]) of update ``update``, rows padded to varying lengths
    (every size different, St - 1 = 6 too: a crash's numbers read, :data:`SIZES`)."""
    g = torch.Generator().manual_seed(1000 * case.seed + update)

    def rows(b, s):
        out = torch.full((b, s), pad_id, dtype=torch.long)
        for i in range(b):
            n = s if i == 0 else int(torch.randint(3, s, (1,), generator=g))
            out[i, :n] = torch.randint(4, VOCAB, (n,), generator=g)
            out[i, 0], out[i, n - 1] = 1, 2
        return out.to(get_device())

    return rows(_B, _SS), rows(_B, _ST)


def _decoder_read(log: list, tgt: torch.Tensor) -> str:
    """What the model's decoder read before a step raised, when its shape was not
    tgt[:, :-1]'s: logits of that many positions then meet St - 1 labels. (Values
    alone are not compared: a step that raised may have changed tgt in place.)"""
    calls = [call for event, call in log if event == "forward"]
    if not calls or calls[-1].tgt_in.shape == tgt[:, :-1].shape:
        return ""
    return (
        f". Before it raised, your model's decoder read "
        f"{slice_name(tgt, calls[-1].tgt_in)}, where the decoder input is tgt[:, :-1] "
        "(all but the last token)"
    )


def observe(
    title, step_fn, case: StepCase, model: RecordingTransformer, twin, start: dict
) -> list[Seen]:
    """Run the learner's step ``case.updates`` times on ``model`` reset to the weights
    ``start``; each update begins with the model left in eval mode (as after an
    evaluation) and is recorded. ``twin`` computes the reference's view."""
    model.load_state_dict(start)
    model.zero_grad(set_to_none=True)
    opt = recording_optimizer(model, lr=0.5)
    sched = recording_scheduler(opt, model)
    seen = []
    for k in range(1, case.updates + 1):
        src, tgt = batches(case, k, case.pad_id)
        model.eval()
        want = reference_view(twin, model, src, tgt, case.pad_id, case.eps)
        model.log = []
        left, before = flat_grad(model), flat_params(model)
        lr = opt.param_groups[0]["lr"]
        args = (model, src, tgt, opt, sched, case.max_norm, case.pad_id, case.eps)
        out = run(step_fn, args)
        if isinstance(out, Raised):
            fail(
                title,
                f"case {case.label} ({SIZES}), update {k}: your train_step raised "
                f"{out!r}{_decoder_read(model.log, tgt)}",
            )
        after = {k: v.detach().clone() for k, v in model.state_dict().items()}
        seen.append(
            Seen(
                case,
                k,
                src,
                tgt,
                model.log,
                left,
                flat_grad(model),
                before,
                flat_params(model),
                out,
                want,
                lr,
                after,
                param_slices(model),
                twin,
            )
        )
    return seen


seal(__name__)
