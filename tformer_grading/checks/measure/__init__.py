"""The checks' measuring toolkit: one concern per module, each written once.

A check of any exercise measures the learner's numbers with these; none of them knows
an exercise. Every module has doctested examples in which a planted mistake is read
back (``tests/checks/measure/``).

``sizes``
    coded dimensions: a case's named sizes (``B=2, H=3, Sq=5``) and what a number is in
    them (``Sq``, ``H·Dh``, or none).
``torch_errors``
    PyTorch's size errors in a failure, read in the case's sizes ("5 (Sq) against 7
    (Sk)"); :func:`..diagnosis.fail` adds the reading to every failure.
``plain_errors``
    the errors read without sizes: an axis that does not exist, a shape unpacked into
    too many names, a view of a transposed tensor.
``softmax``
    a softmax read back from its weights: the axes they sum to 1 over, the factor on
    the scores (row by row), an output solved back for the weights it applied.
``formulas``
    the formula of the case's sizes that gives measured numbers on every case
    (``√Dh``, ``2·Dh``), and how a measured number is written.
``recorders``
    the calls a learner's step makes on the optimizer and scheduler a check hands it,
    recorded on the instance (one answer to PyTorch's step-wrapping quirk).
"""
