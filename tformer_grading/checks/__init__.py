"""Checks that exercise test cells call: one module per chapter (``chNN``).

A check author reads ``diagnosis`` (the API: ``Pitfall``, ``Section``, ``Case``,
``compare_to_reference``, probes), ``cases`` (seeded inputs, building the
learner's module) and ``delegation`` (the hidden "written by hand" tests);
``blocks`` holds what chapters 4 and 5 share.
"""
from .diagnosis import CheckFailure, Diagnosis, Pitfall, Section
