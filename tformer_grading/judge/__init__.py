"""The judge: a test cell's points decided in the grader's process, not the kernel's.

While grading, the learner's cells run in the sandboxed kernel as before, and so do
the test cells, for their messages and pictures. Then, for a test cell whose checks
the judge runs (:mod:`.registry`), the grader runs those checks again in its own
process (:mod:`.plan` reads the cell, :mod:`.cells` judges it), on the learner's
functions and modules reached through a handle into the kernel (:mod:`.remote`,
:mod:`.mirror`, :mod:`.link`, and :mod:`.agent` in the kernel), with tensors
crossing as plain data within bounds (:mod:`.wire`). The cell scores only if both
runs pass: what the kernel saw can withhold points, never grant them.
"""
