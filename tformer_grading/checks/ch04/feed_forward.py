"""Checks for exercise ``feed_forward`` of chapter 4 (book/ch04_blocks):
``FeedForward(d_model, d_ff, dropout=0.0)``, ``forward(x [..., D]) -> [..., D]``,
Linear, ReLU, Linear, with its dropout (if any) on the hidden layer at the rate given.

The output is recomputed from the learner's own two Linear layers (found by shape), so
any right layout passes; when no listed pitfall explains a wrong one, the module is run
once more while its ``linear`` calls are recorded, and the first stage that departs is
reported (the first Linear's input, the activation between the layers, the output).
Train mode is measured too, at two rates: the fraction of each path dropout zeroed.
"""

from __future__ import annotations

import contextlib
import inspect
import io

import torch
import torch.nn.functional as F
from torch import nn

from ...guard.integrity import seal
from ..cases import build_module, randn
from ..diagnosis import (
    UNEXPLAINED,
    Case,
    CheckFailure,
    Diagnosis,
    Pitfall,
    Raised,
    compare_to_reference,
    describe_difference,
    fail,
    quiet,
    run,
    single_threaded,
)
from ..measure.fit import describe_sum
from ..measure.fit import weighted_sum as fit_sum
from ..measure.sizes import named
from ..measure.trace import NORMS, FunctionCalls
from .sections import S_FF
from .tracing import (
    DROPOUT_IN_EVAL,
    describe_function,
    kept_scale,
    unrecognised_map,
    zeroed_share,
)

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True

# -------------------------------------------------------------------------- FeedForward

FF_WIDTH = Diagnosis(
    "feed-forward hidden width is not d_ff",
    "The feed-forward widens each token to d_ff features and back: nn.Linear(d_model, "
    "d_ff) then nn.Linear(d_ff, d_model). d_ff is an argument (the paper's "
    "4·d_model is only its usual value).",
    S_FF,
)
FF_NO_OFFSET = Diagnosis(
    "feed-forward without its biases",
    "FFN(x) = max(0, x·W1 + b1)·W2 + b2 has a constant term: nn.Linear keeps its bias "
    "by default (bias=True); with bias=False both b1 and b2 are gone.",
    S_FF,
)
FF_ACTIVATION = Diagnosis(
    "the wrong activation in the feed-forward",
    "FFN(x) = max(0, x·W1 + b1)·W2 + b2: a ReLU between the two Linear layers, nothing "
    "else (the lesson's block and PyTorch's default layer use ReLU).",
    S_FF,
)
FF_STAGE = Diagnosis(
    "the feed-forward computes an extra step",
    "FFN(x) = max(0, x·W1 + b1)·W2 + b2: the first Linear reads x itself and the "
    "output is the second Linear's, nothing added or applied after it (the block adds "
    "the residual).",
    S_FF,
)


def _ff_linears(title, module, d_model, d_ff):
    linears = [(n, m) for n, m in module.named_modules() if isinstance(m, nn.Linear)]
    shapes = [tuple(m.weight.shape) for _, m in linears]
    if sorted(shapes) != sorted([(d_ff, d_model), (d_model, d_ff)]):
        listing = ", ".join(f"{n} {list(m.weight.shape)}" for n, m in linears) or "none"
        widths = {o for o, i in shapes if i == d_model and (d_model, o) in shapes}
        if len(linears) == 2 and len(widths) == 1:
            widths = sorted(widths)
            FF_WIDTH.fail(
                title,
                f"Built with d_model={d_model}, d_ff={d_ff}, your "
                f"hidden layer has {widths[0]} features (expected "
                f"exactly two nn.Linear layers; found: {listing}).",
            )
        fail(
            title,
            f"expected exactly two nn.Linear layers, Linear(d_model={d_model}, "
            f"d_ff={d_ff}) then Linear(d_ff, d_model); found: {listing}.",
            S_FF,
        )
    first = next(m for _, m in linears if tuple(m.weight.shape) == (d_ff, d_model))
    second = next(m for _, m in linears if tuple(m.weight.shape) == (d_model, d_ff))
    return first, second


# (D, d_ff, leading dimensions of x, dtype): x [..., D] with 1, 2 and 3 leading dims
FF_CONFIGS = (
    (8, 32, (2, 5), torch.float32),
    (12, 20, (3, 4), torch.float32),
    (6, 24, (2, 3), torch.float64),
    (16, 40, (1, 7), torch.float32),
    (8, 20, (6,), torch.float32),
    (6, 16, (2, 2, 3), torch.float32),
    (8, 24, (2, 4), torch.float32),
)
#: Inputs scaled by this factor in the last case: hidden values beyond any clip (ReLU6).
FF_WIDE_SCALE = 10.0


def _ff_cases(cls):
    cases = []
    for i, (d, f, lead, dtype) in enumerate(FF_CONFIGS):

        def make(d=d, f=f, lead=lead, dtype=dtype, i=i):
            torch.manual_seed(40 + i)
            module = build_module("FeedForward", cls, (d, f), dtype).eval()
            scale = FF_WIDE_SCALE if i == len(FF_CONFIGS) - 1 else 1.0
            return module, randn(*lead, d, seed=400 + i, dtype=dtype) * scale, f

        scaled = ", x scaled by 10" if i == len(FF_CONFIGS) - 1 else ""
        axes = named(**dict(zip(("A", "B", "S")[-len(lead) :], lead)), D=d)
        cases.append(Case(f"d_ff={f}, x [{axes}], {dtype}{scaled}", make))
    return cases


def _ff_layers(module, x, d_ff):
    """The learner's two Linear layers, found by shape: [d_ff, D] and [D, d_ff]."""
    return _ff_linears("FeedForward", module, x.size(-1), d_ff)


def _ff_reference(module, x, d_ff):
    """FFN(x) = max(0, x·W1 + b1)·W2 + b2 with the learner's weights."""
    l1, l2 = _ff_layers(module, x, d_ff)
    return F.linear(torch.relu(F.linear(x, l1.weight, l1.bias)), l2.weight, l2.bias)


def _ff_without_activation(module, x, d_ff):  # two Linear layers, nothing between
    l1, l2 = _ff_layers(module, x, d_ff)
    return F.linear(F.linear(x, l1.weight, l1.bias), l2.weight, l2.bias)


def _ff_relu_at_output(module, x, d_ff):  # a ReLU after the second layer too
    return torch.relu(_ff_reference(module, x, d_ff))


FF_PITFALLS = (
    Pitfall(
        "no activation between the two Linear layers",
        "Without the ReLU the two Linear layers collapse into one linear map "
        "(W2·W1): the sublayer can no longer compute anything a single matrix "
        "could not. FFN(x) = max(0, x·W1 + b1)·W2 + "
        "b2.",
        S_FF,
        _ff_without_activation,
    ),
    Pitfall(
        "ReLU after the output layer",
        "The feed-forward ends with the second Linear, no activation after it: a "
        "ReLU there would make every update the sublayer adds to the residual "
        "stream non-negative.",
        S_FF,
        _ff_relu_at_output,
    ),
)


def _call_ff(module, x, d_ff):
    return module(x)


def _ff_trace(module, x, d_ff):
    """The feed-forward's linear calls while ``module(x)`` runs, and its output."""
    l1, l2 = _ff_layers(module, x, d_ff)
    events = []
    linears = {"linear1": l1.weight, "linear2": l2.weight}
    with torch.no_grad(), quiet(), FunctionCalls(events, NORMS, linears):
        y = module(x)
    first = [e for e in events if e.kind == "linear1"]
    second = [e for e in events if e.kind == "linear2"]
    return (
        first[0] if len(first) == 1 else None,
        second[0] if len(second) == 1 else None,
        y,
    )


def _hidden_dropped(title, z, u, label):
    """Dropout still on in eval mode: some of relu(z) zeroed, the rest rescaled."""
    dropped = zeroed_share(z, u) or 0.0
    if dropped > 0.02 and kept_scale(u, F.relu(z)) is not None:
        DROPOUT_IN_EVAL.fail(
            title,
            f"On case {label}, in eval mode "
            f"{float(dropped):.0%} of the positive hidden "
            "activations were zeroed.",
        )


def _ff_stage_input(title, first, x, label):
    """The first Linear reads x itself."""
    if torch.allclose(first.inp, x):
        return
    coefs = fit_sum(first.inp, {"x": x})
    what = (
        describe_sum(coefs)
        if coefs
        else f"{describe_function(x, first.inp) or 'a function'} of x"
    )
    FF_STAGE.fail(
        title, f"On case {label}, your first Linear reads {what}, not x itself."
    )


def _ff_stage_activation(title, first, second, label):
    """ReLU between the two Linear layers (``first.out`` -> ``second.inp``)."""
    act = describe_function(first.out, second.inp)
    if act == "ReLU":
        return
    _hidden_dropped(title, first.out, second.inp, label)
    act = act or unrecognised_map(first.out, second.inp)
    FF_ACTIVATION.fail(
        title,
        f"On case {label}, between your two Linear layers "
        f"the hidden features go through {act} where FFN "
        "uses ReLU.",
    )


def _ff_stage_output(title, second, x, y, label):
    """The module returns the second Linear's output, nothing added or applied."""
    if not isinstance(y, torch.Tensor) or torch.allclose(y, second.out):
        return
    what = describe_function(second.out, y)
    named = {"the second Linear's output": second.out, "x": x}
    bias = second.args[2] if len(second.args) > 2 else second.kwargs.get("bias")
    if bias is not None:
        named["its bias"] = bias.expand_as(y)
    coefs = fit_sum(y, named)
    said = (
        describe_sum(coefs)
        if coefs
        else f"{what} of the second Linear's output"
        if what
        else None
    )
    if said:
        FF_STAGE.fail(
            title,
            f"On case {label}, your FeedForward returns {said}, "
            "not the second Linear's output.",
        )


def _ff_stages(title, module, x, d_ff, label):
    """Name the first stage of FFN(x) the learner's module departs from: x left
    alone, the first Linear's input, the activation between the layers, the
    output."""
    before = x.clone()
    first, second, y = _ff_trace(module, x, d_ff)
    if not torch.equal(before, x):
        FF_STAGE.fail(
            title,
            f"On case {label}, your FeedForward modified its input "
            "x in place (an in-place op such as relu_ or += on x).",
        )
    if first is None or second is None:
        return
    _ff_stage_input(title, first, x, label)
    _ff_stage_activation(title, first, second, label)
    _ff_stage_output(title, second, x, y, label)


def _ff_explain(title, cls):
    """Raise naming what the learner's FeedForward computes differently, if a stage
    can be isolated on the float64 case; every other case is checked too for errors."""
    cases = _ff_cases(cls)
    for case in cases:
        module, x, d_ff = case.make()
        got = run(_call_ff, (module, x, d_ff))
        if isinstance(got, Raised):
            fail(
                title,
                f"your FeedForward raised {got!r} while the check ran case "
                f"{case.label} (FeedForward maps x [..., D], any number of "
                "leading dimensions, to [..., D]).",
                S_FF,
            )
        if isinstance(got, torch.Tensor) and got.shape != x.shape:
            fail(
                title,
                f"on case {case.label} your FeedForward returned shape "
                f"{list(got.shape)}; it maps x [..., D] to the same shape "
                f"{list(x.shape)}.",
                S_FF,
            )
    for case in (cases[2], *cases):  # the float64 case first, else the first wrong one
        module, x, d_ff = case.make()
        want = _ff_reference(module, x, d_ff)
        if (
            describe_difference(run(_call_ff, (module, x, d_ff)), want, 1e-5, 1e-4)
            is not None
        ):
            break
    module, x, d_ff = case.make()  # fresh: the learner's call may have changed x
    with quiet():
        try:
            _ff_stages(title, module, x, d_ff, case.label)
        except CheckFailure:
            raise
        except Exception:  # noqa: BLE001, S110 - a stage we cannot isolate: fall back
            pass


# ------------------------------------------------------ FeedForward dropout, train mode
# Eval mode hides dropout, so the module is also run in train mode at two moderate
# rates: each path's zeroed fraction is measured and compared with the rate given.

FF_DROPOUT_PS = (0.2, 0.5)
#: (D, d_ff, leading dimensions of x, dtype): ~2000 positive hidden values per probe.
FF_DROPOUT_CONFIG = (8, 32, (8, 16), torch.float64)

FF_DROPOUT = Diagnosis(
    "feed-forward dropout in the wrong place or at the wrong rate",
    "The feed-forward's dropout (optional) acts on the hidden layer only, between the "
    "ReLU and the second Linear, at the rate `dropout` given to the constructor "
    "(nn.Dropout(dropout) or F.dropout(h, dropout, self.training)); x goes into the "
    "first Linear untouched and nothing comes after the second Linear, not even "
    "dropout (the block drops the sublayer's output itself).",
    S_FF,
)


def _ff_train_trace(title, cls, p):
    """The first and second Linear calls and the output of ``cls(D, d_ff, p)`` in
    train mode on x [8, 16, 8] float64: (label, x, first, second, y)."""
    d, f, lead, dtype = FF_DROPOUT_CONFIG
    label = f"D={d}, d_ff={f}, x {list(lead) + [d]}, {dtype}, dropout={p}, train mode"
    module = build_module(title, cls, (d, f, p), dtype, seed=45).train()
    x = randn(*lead, d, seed=450, dtype=dtype)
    torch.manual_seed(46)
    try:
        first, second, y = _ff_trace(module, x, f)
    except Exception as exc:  # noqa: BLE001 - the learner's code may raise anything
        fail(
            title,
            f"your FeedForward raised {Raised(exc)!r} while the check ran case "
            f"{label}.",
            S_FF,
        )
    return label, x, first, second, y


def _fraction_zeroed(t, before) -> float:
    """The fraction of ``before``'s non-zero entries that are zero in ``t``."""
    alive = before.abs() > 1e-6
    return float(((t == 0) & alive).double().sum() / alive.double().sum().clamp_min(1))


def _ff_train_ends(title, label, x, first, second, y, p):
    """In train mode too, the first Linear reads x and the output is the second
    Linear's: a dropout on either end is measured and named."""
    ends = (
        (first.inp, x, "the first Linear's input (x)"),
        (y, second.out, "your FeedForward's output (the second Linear's)"),
    )
    for got, want, what in ends:
        if not isinstance(got, torch.Tensor) or got.shape != want.shape:
            continue
        if torch.allclose(got, want):
            continue
        zeroed = _fraction_zeroed(got, want)
        if zeroed > 0.02:
            FF_DROPOUT.fail(
                title,
                f"On case {label}, {zeroed:.0%} of {what} were "
                f"zeroed in train mode: a dropout there.",
            )
        fail(
            title,
            f"on case {label}, in train mode {what} differs from the eval-mode "
            f"computation: {describe_difference(got, want, 1e-5, 1e-4)}; "
            f"{UNEXPLAINED}.",
            S_FF,
        )


def _ff_hidden_rate(first, second):
    """(fraction of the positive hidden activations zeroed, kept scale) between
    ReLU(first Linear) and the second Linear; the scale is None when unmeasurable."""
    h = F.relu(first.out)
    return _fraction_zeroed(second.inp, h), kept_scale(second.inp, h)


def _ff_rates_fit(rates):
    """Either no hidden dropout at any p, or one at the rate given, scaled by
    1/(1-p)."""
    none = all(r < 0.02 and (s is None or abs(s - 1) < 0.02) for p, r, s in rates)
    given = all(
        abs(r - p) < 0.06 and (s is None or abs(s * (1 - p) - 1) < 0.03)
        for p, r, s in rates
    )
    return none or given


def _check_ff_signature(title, cls):
    """``FeedForward(d_model, d_ff, dropout)``: the block passes its rate on."""
    try:
        inspect.signature(cls).bind(8, 32, 0.1)
    except TypeError:
        fail(
            title,
            f"{cls.__name__}{inspect.signature(cls)} does not take the "
            "exercise's FeedForward(d_model, d_ff, dropout=0.0): the dropout "
            "rate is its third argument (the block builds FeedForward("
            "d_model, d_ff, dropout)).",
            S_FF,
        )
    except ValueError:  # no signature to read: the calls below will tell
        pass


def _check_ff_offset(title, cases) -> None:
    """Fail when FeedForward(0) is exactly 0 whatever its parameters: the module has no
    constant term, which the formula's biases b1 and b2 give it. Every parameter is set
    to random values first, so a learner's zero-initialised biases do not count."""
    module, x, _ = cases[0].make()
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for param in module.parameters():
            param.copy_(torch.randn(param.shape, generator=g).to(param))
        out = run(module, (torch.zeros_like(x),))
    if isinstance(out, torch.Tensor) and out.abs().max().item() == 0:
        FF_NO_OFFSET.fail(
            title,
            f"With every parameter of your FeedForward set to random values, "
            f"FeedForward(0) on x of shape {list(x.shape)} is exactly 0: your module "
            "has no constant term.",
        )


def _check_ff_dropout(title, cls):
    """Train mode at dropout 0.2 and 0.5: dropout only on the hidden layer, at the
    rate given (or none), kept values scaled by 1/(1-p)."""
    _check_ff_signature(title, cls)
    rates = []
    for p in FF_DROPOUT_PS:
        label, x, first, second, y = _ff_train_trace(title, cls, p)
        if first is None or second is None:
            return
        _ff_train_ends(title, label, x, first, second, y, p)
        rates.append((p, *_ff_hidden_rate(first, second)))
    if _ff_rates_fit(rates):
        return
    said = " and ".join(f"{r:.0%} at dropout={p}" for p, r, _ in rates)
    scales = " and ".join(f"{s:.3g}" for _, _, s in rates if s is not None)
    FF_DROPOUT.fail(
        title,
        f"In train mode your hidden layer lost {said} of its "
        f"positive activations (kept ones scaled by {scales}); "
        "expected about the rate given (20 % and 50 %, kept ones "
        "scaled by 1/(1-p)), or none at all: the rate must follow "
        "the dropout argument.",
    )


@single_threaded
def check_feed_forward(cls) -> None:
    """``cls(d_model, d_ff, dropout=0.0)``: an nn.Module mapping x [..., D] to
    [..., D] (Linear, ReLU, Linear), compared in eval mode; then measured in train
    mode at dropout 0.2 and 0.5 (dropout only on the hidden layer, at the rate
    given, or none)."""
    cases = _ff_cases(cls)
    module, _, _ = cases[0].make()  # fails early, and clearly, without the two layers
    _ff_linears("FeedForward", module, 8, 32)
    said = io.StringIO()  # the success line waits for the train-mode probe
    try:
        with contextlib.redirect_stdout(said):
            compare_to_reference(
                "FeedForward", cases, _call_ff, _ff_reference, FF_PITFALLS
            )
    except CheckFailure as failure:
        if UNEXPLAINED in str(failure):
            _ff_explain("FeedForward", cls)
        raise
    _check_ff_offset("FeedForward", cases)
    _check_ff_dropout("FeedForward", cls)
    print(said.getvalue(), end="")


seal(__name__)
