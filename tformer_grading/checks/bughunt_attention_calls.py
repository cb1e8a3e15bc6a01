"""How the attention bug hunt's checks (:mod:`.bughunt_attention`) build and call the
learner's SelfAttention: the sizes they accept, the module built under a fixed seed in
eval mode, ``forward(values, keys, query, mask)`` run quietly, and the shape its
result must have.

Shape letters: N batch, L length, embed_size the model width.
"""

from __future__ import annotations

import itertools

import torch

from ..guard.integrity import seal
from ..pictures.attach import shown_order
from ..pictures.attention_maps import draw_weights
from .cases import build_module
from .diagnosis import Raised, fail, run
from .measure.trace import trace

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True


def validate_sizes(sizes) -> tuple:
    """The ``sizes`` argument of a check as a tuple of (embed_size, heads) pairs.

    >>> validate_sizes([(12, 3)])
    ((12, 3),)
    >>> validate_sizes([(12, 5)])
    Traceback (most recent call last):
    ...
    ValueError: each (embed_size, heads) needs heads >= 2 dividing embed_size into \
heads of at least 3 features, got (12, 5)
    """
    if (
        not isinstance(sizes, (tuple, list))
        or not sizes
        or not all(isinstance(s, (tuple, list)) and len(s) == 2 for s in sizes)
    ):
        raise TypeError(
            f"sizes must be a sequence of (embed_size, heads) pairs, got {sizes!r}"
        )
    for e, h in sizes:
        ints = isinstance(e, int) and isinstance(h, int)
        if not ints or h < 2 or e % h or e // h < 3:
            raise ValueError(
                "each (embed_size, heads) needs heads >= 2 dividing embed_size into "
                f"heads of at least 3 features, got ({e!r}, {h!r})"
            )
    return tuple(tuple(s) for s in sizes)


def build(cls, embed_size: int, heads: int, dtype: torch.dtype):
    """``cls(embed_size, heads)`` under seed 0, in ``dtype``, in eval mode (the bug
    hunt's model has no dropout, but a learner's fix might add one)."""
    return build_module("SelfAttention", cls, (embed_size, heads), dtype, seed=0).eval()


def forward(module, values, keys, query, mask):
    """The learner's call order, without autograd: ``module(values, keys, query,
    mask)``."""
    with torch.no_grad():
        return module(values, keys, query, mask)


def call(title: str, module, values, keys, query, mask=None, what: str = ""):
    """The learner's forward, quietly: a tensor, or a Raised. A result that is not a
    plain tensor fails the check (it cannot be measured)."""
    got = run(forward, (module, values, keys, query, mask))
    if not isinstance(got, Raised) and type(got) is not torch.Tensor:
        fail(
            title,
            f"forward(values, keys, query, mask) must return one torch.Tensor "
            f"[N, query_len, embed_size]{what}; got {type(got).__name__}.",
        )
    return got


def call_seen(title: str, module, values, keys, query, mask):
    """:func:`call`, keeping the attention weights the forward computed (its softmax
    outputs of the layout [N, H, Lq, Lk]): (result, weights or None), for the picture
    of a failure."""
    with trace(names=("softmax",)) as events:
        got = call(title, module, values, keys, query, mask)
    n, lq, lk = query.size(0), query.size(1), keys.size(1)
    seen = [
        e.out
        for e in events
        if e.out.dim() == 4 and e.out.size(0) == n and e.out.shape[-2:] == (lq, lk)
    ]
    return got, (seen[-1] if seen else None)


def fill_picture(weights, mask: torch.Tensor, label: str, said: str = ""):
    """The learner's weights of the first head that breaks the mask, in the sequence
    the message ``said`` names (else any), next to where the mask lets weight go (the
    check never sees the right weights); None without weights."""
    if weights is None:
        return None
    allowed = mask.bool().expand(weights.shape)
    atol = 1e-4  # half precision
    named = shown_order([f"sequence {n}" for n in range(weights.size(0))], said)
    for n, h in itertools.product(named, range(weights.size(1))):
        where = f"{label}, sequence {n}, head {h}"
        picture = draw_weights(
            weights[n, h], None, allowed[n, h], where=where, atol=atol, rtol=0.0
        )
        if picture.cells.count:  # nothing is drawn until the picture is shown
            return picture
    return None


def expect_shape(title: str, got, shape: tuple, what: str, section) -> torch.Tensor:
    """``got`` when it is a tensor of ``shape``; otherwise the check fails, saying
    what raised or which shape came."""
    if isinstance(got, Raised):
        fail(title, f"your forward raised {got!r} on {what}.", section)
    if tuple(got.shape) != shape:
        fail(
            title,
            f"on {what} your forward returned shape {list(got.shape)}; "
            f"expected {list(shape)} = [N, query_len, embed_size].",
            section,
        )
    return got


def sizes_label(embed_size: int, heads: int) -> str:
    """How a message names a case's sizes.

    >>> sizes_label(12, 3)
    'embed_size=12, heads=3, head_dim=4'
    """
    return f"embed_size={embed_size}, heads={heads}, head_dim={embed_size // heads}"


seal(__name__)
