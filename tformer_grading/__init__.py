"""tformer_grading: what grades a learner's exercise, beside the reference it grades
against.

- ``checks/``: what exercise test cells call (a package per chapter, one module per
  exercise) and the check author's API (``checks.diagnosis``).
- ``guard/``: the guards around grading (integrity seals, signed receipts, the
  guarded nbgrader execution and receipt verification).
- ``sandbox/``: the bubblewrap sandbox each graded notebook's kernel runs in.
- ``preflight``: reads a submitted notebook before any kernel starts (refuses what
  cannot be graded, puts back the assignment's nbgrader metadata).
- ``cli`` (``python -m tformer_grading``): learner self-grading (``selfgrade``,
  ``autograde_one``) and class grading (``classgrade``; the hand-ins it finds in any
  layout, ``submissions``; its workers ``classworker``; its tables and plot
  ``classreport``; learner text made safe to show, ``learner_text``).
- ``feedback_page``: the feedback page a learner receives (nbgrader's, set up in
  ``nbgrader_config.py``): links to the published book, hidden tests and receipts
  kept back, maths that renders offline.

This package imports ``tformer_ref``; ``tformer_ref`` never imports it.
"""
