"""Guards around grading: nothing a check author needs to read.

Learner code runs in the kernel beside the checks. Two guards run there:
``integrity`` (was the check machinery patched?) and ``receipts`` (each success
line signed with a key only the grader knows). Two run in the nbgrader process,
outside the kernel: ``execute.GuardedExecute`` (kernel death, stubborn loops, a
time limit per notebook, the sandbox; its base ``output_cap.CappedExecute`` caps
the output) and ``verify.VerifyReceipts`` (a test cell scores only when every
check it calls printed a valid receipt); these import nbgrader, the kernel side never
does. ``bootstrap`` is what ``GuardedExecute`` runs in the kernel before the
notebook's first cell. ``GuardedExecute`` also hands each graded test cell to the
judge (:mod:`tformer_grading.judge`), which runs its checks again outside the kernel;
a cell the judge decides needs no receipt. See book/instructors.md for what the
guards do not do.
"""
