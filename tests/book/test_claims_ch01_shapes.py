"""Chapter 1's magnitude asserts: none rests on a random experiment.

The pages: ``nbsrc/book/ch01_shapes/{lesson,heads,timing}.py``. How claims are found
and listed: ``tests/book/seed_claims.py``. The timing page reports its measured times
and asserts none of them (the suite times nothing; budgets are benches).
"""

from tests.book.seed_claims import Claim, NotRandom

CLAIMS: list[Claim] = []

NOT_RANDOM = [
    NotRandom(
        "ch01_shapes/lesson",
        (
            "(weights_1q > 0).all() and "
            "torch.isclose(weights_1q.sum(), torch.tensor(1.0))",
        ),
        "§1.1's query and keys are written out by hand, and softmax weights are "
        "positive for any finite scores",
    ),
]
