"""tformer_grading: what grades a learner's exercise, beside the reference it grades against.

- ``checks/``: what exercise test cells call (one module per chapter) and the
  check author's API (``checks.diagnosis``).
- ``guard/``: the guards around grading (integrity seals, signed receipts, the
  guarded nbgrader execution and receipt verification).
- ``cli`` (``python -m tformer_grading``): learner self-grading and class grading.

This package imports ``tformer_ref``; ``tformer_ref`` never imports it.
"""
