"""The checks' measuring toolkit: one concern per module, each written once.

A check of any exercise measures the learner's numbers with these; none of them knows
an exercise. Every module has doctested examples in which a planted mistake is read
back (``tests/checks/measure/``).

``sizes``
    coded dimensions: what the numbers in a crash or a wrong shape are, read against
    the sizes a case names (``B=2, H=3, Sq=5``).
"""
