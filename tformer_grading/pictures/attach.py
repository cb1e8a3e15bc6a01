"""A check attaches a picture to its failure; the failure shows it.

A check wraps the code that may fail in :func:`pictured`, with a function that draws
the picture from the numbers the check already has (the learner's code is not run
again). When a :class:`~..checks.diagnosis.CheckFailure` leaves the block, the
failure carries the picture, drawn when first shown: in a notebook above the diagnosis
(:func:`show`), where nbgrader keeps it in the graded notebook for the feedback page. A
failure nobody shows (a test, the class report's text) draws nothing. A picture never
decides points, and one that cannot be drawn is left out: the words say everything the
picture does. ``TFORMER_PICTURES=off`` in the environment leaves every picture out
(the benchmark's baseline; a class whose feedback is read as text).

>>> import torch
>>> from tformer_grading.checks.diagnosis import CheckFailure, fail
>>> right = torch.tensor([[[[1.0, 0.0], [0.5, 0.5]]]])
>>> mine = torch.tensor([[[[0.5, 0.5], [0.5, 0.5]]]])
>>> try:
...     with pictured(lambda said: weights_picture([mine], [right], ["c"], said=said)):
...         fail("attention", "your weights differ.")
... except CheckFailure as failure:
...     print(failure.picture.cells.marked["differs"])
[(0, 0), (0, 1)]
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Callable, Sequence

import torch

from ..checks.diagnosis import CheckFailure
from ..checks.measure.mask_readings import read_as_bool
from ..guard.integrity import seal
from .attention_maps import Picture, draw_mask, draw_weights

#: The environment variable that turns pictures off (module docstring).
SWITCH = "TFORMER_PICTURES"


@contextlib.contextmanager
def pictured(draw: Callable[..., Picture | None]):
    """A failure raised inside carries ``draw(said=message)``'s picture, drawn when
    the failure is shown (the message says which case, :func:`shown_order`)."""
    try:
        yield
    except CheckFailure as failure:
        if not failure.pictured:
            said = str(failure)
            failure.will_picture(lambda: _drawn(draw, said))
        raise


def _drawn(draw: Callable[..., Picture | None], said: str) -> Picture | None:
    if os.environ.get(SWITCH, "on") == "off":
        return None
    try:
        return draw(said=said)
    except Exception:  # noqa: BLE001 - the words already say it all (module docstring)
        return None


def shown_order(labels: Sequence[str], said: str) -> list[int]:
    """The cases a picture may show, in the order it looks for a wrong one: those the
    message ``said`` names, as it names them; every case when it names none. A
    picture shows the case its message is about.

    >>> shown_order(["size=3", "size=5", "size=8"], "... on case size=5: ...")
    [1]
    >>> shown_order(["size=3", "size=5"], "wrong on 2 of 2 cases")
    [0, 1]
    """
    at = {k: said.find(label) for k, label in enumerate(labels)}
    found = [k for k in at if at[k] >= 0]
    # A label that is only the start of a longer one found there is not named.
    named = [
        k
        for k in sorted(found, key=lambda k: at[k])
        if not any(at[j] == at[k] and len(labels[j]) > len(labels[k]) for j in found)
    ]
    return named or list(range(len(labels)))


def show(picture: Picture | None) -> bool:
    """Display ``picture`` in the running Jupyter kernel (True); nothing elsewhere
    (False)."""
    import sys

    ipython = sys.modules.get("IPython")
    shell = getattr(ipython, "get_ipython", lambda: None)() if ipython else None
    if picture is None or shell is None or not hasattr(shell, "kernel"):
        return False
    from IPython.display import display

    try:  # the PNG is drawn here, when first asked for
        data, metadata = picture.bundle()
    except Exception:  # noqa: BLE001 - the words already say it all (module docstring)
        return False
    display(data, metadata=metadata, raw=True)
    return True


def _maps(got, want):
    """(b, h) and the two [Sq, Sk] maps of every head of tensors [B, H, Sq, Sk]."""
    for b, h in itertools.product(range(want.size(0)), range(want.size(1))):
        yield b, h, got[b, h], want[b, h]


def weights_picture(
    theirs: Sequence,
    wants: Sequence[torch.Tensor],
    labels: Sequence[str],
    alloweds: Sequence[torch.Tensor] | None = None,
    atol: float = 1e-5,
    rtol: float = 1e-4,
    said: str = "",
) -> Picture | None:
    """The first head of the first case whose weights are wrong: the learner's weights
    ``theirs`` (one [B, H, Sq, Sk] tensor a case, or what else their code returned)
    against ``wants``; ``alloweds`` the cases' masks (True = may attend, broadcastable
    to the weights). The case shown is the first wrong one of :func:`shown_order`;
    None when its weights are not a tensor of the right shape."""
    for k in shown_order(labels, said):
        got, want, label = theirs[k], wants[k], labels[k]
        if not isinstance(got, torch.Tensor) or got.shape != want.shape:
            return None
        allowed = None
        if alloweds is not None:
            allowed = alloweds[k].bool().expand(want.shape)
        for b, h, g, w in _maps(got, want):
            a = None if allowed is None else allowed[b, h]
            where = f"case {label}, batch {b}, head {h}"
            # Nothing is drawn yet (Picture.png is made when shown): only the cells.
            picture = draw_weights(g, w, a, where=where, atol=atol, rtol=rtol)
            if picture.cells.count:
                return picture
    return None


def attention_picture(
    cases: Sequence,
    results: Sequence,
    reference: Callable,
    mask_at: int | None = None,
    atol: float = 1e-5,
    rtol: float = 1e-4,
    said: str = "",
) -> Picture | None:
    """:func:`weights_picture` for an attention that returns (out, weights): the
    learner's ``results`` on ``cases`` against ``reference`` on fresh arguments, the
    mask the case's argument ``mask_at`` when there is one."""
    made = [case.make() for case in cases]
    return weights_picture(
        [
            r[1] if isinstance(r, (tuple, list)) and len(r) == 2 else None
            for r in results
        ],
        [reference(*args)[1] for args in made],
        [case.label for case in cases],
        None if mask_at is None else [args[mask_at] for args in made],
        atol,
        rtol,
        said,
    )


def masks_picture(
    theirs: Sequence,
    wants: Sequence[torch.Tensor],
    labels: Sequence[str],
    shapes: Sequence[Sequence[int]],
    said: str = "",
) -> Picture | None:
    """The first head of the first case whose mask is wrong: the learner's masks
    ``theirs`` against ``wants``, both as broadcast against scores of ``shapes``
    [B, H, Sq, Sk] (True = may attend; a 1/0 or additive mask read as such). The
    case shown is the first wrong one of :func:`shown_order`; None when its mask
    cannot be read or does not broadcast there."""
    for k in shown_order(labels, said):
        keep, want, label, shape = _as_bool(theirs[k]), wants[k], labels[k], shapes[k]
        try:
            keep, want = keep.expand(*shape), want.bool().expand(*shape)
        except (RuntimeError, AttributeError):
            return None
        for b, h, g, w in _maps(keep, want):
            picture = draw_mask(g, w, where=f"case {label}, batch {b}, head {h}")
            if picture.cells.count:
                return picture
    return None


def _as_bool(got):
    """A mask as True = may attend (:func:`read_as_bool`); None when it cannot be
    read."""
    if not isinstance(got, torch.Tensor):
        return None
    return got if got.dtype == torch.bool else read_as_bool(got)[0]


seal(__name__)
