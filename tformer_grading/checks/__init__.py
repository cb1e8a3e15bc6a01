"""Checks that exercise test cells call: one module per exercise (``chNN``,
``ch06_loop``, the bug hunts ``bughunt_*``, ``own_model``).

A check author reads ``diagnosis`` (the API: ``Pitfall``, ``Section``, ``Case``,
``compare_to_reference``, probes), ``cases`` (seeded inputs, building the
learner's module) and ``delegation`` (the hidden "written by hand" tests);
``blocks`` holds what chapters 4 and 5 share. ``measure`` is the measuring toolkit,
one concern per module, that every exercise's checks share (its ``torch_errors`` reads a
crash's numbers as the case's sizes).
"""

from .diagnosis import CheckFailure, Diagnosis, Pitfall, Section

# The checks' shared machinery; every other module of this package holds one exercise's
# checks. Defined in the guard, which captures it before learner code runs.
from ..guard.integrity import SHARED_CHECK_MODULES as SHARED_MODULES
