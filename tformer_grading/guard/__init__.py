"""Guards around grading: nothing a check author needs to read.

Learner code runs in the kernel beside the checks. Two guards run there:
``integrity`` (was the check machinery patched?) and ``receipts`` (each success
line signed with a key only the grader knows). Two run in the nbgrader process,
outside the kernel: ``execute.GuardedExecute`` (kernel death, stubborn loops,
an output cap) and ``verify.VerifyReceipts`` (a test cell scores only when every
check it calls printed a valid receipt). The last two import nbgrader; the
kernel side never does. See book/instructors.md for what they do not do.
"""
