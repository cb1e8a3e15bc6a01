"""tformer_ref: the course's reference Transformer, which learners study and lessons
import.

The checks that grade the exercises against it live beside it, in ``tformer_grading``
(which imports this package; this package never imports it).

Import what you need from the submodules, e.g.
``from tformer_ref.attention import MultiHeadAttention``. Every public object's
docstring names the lesson section that teaches it ("Taught in §N.k ...") and shows an
example.
"""

from .attention import MultiHeadAttention, scaled_dot_product_attention
from .device import get_device, seed_everything
from .heads import merge_heads, split_heads
from .masks import causal_mask, padding_mask

__version__ = "0.1.0"
