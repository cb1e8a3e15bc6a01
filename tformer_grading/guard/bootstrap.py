"""What the grader runs in a learner's kernel before the notebook's first cell.

:class:`~tformer_grading.guard.execute.GuardedExecute` executes ``start(key)``
silently (no history, no output). Importing every check module here, before any
learner code, means a notebook cannot slip a look-alike module, an import hook
or a ``sys.modules`` entry in ahead of them: the seals record the genuine
modules, and the notebook's own imports find them already loaded.
"""

from __future__ import annotations

import importlib
import linecache
import os
import pkgutil
import sys


def start(key: str) -> None:
    """Import and seal the checks from the course's packages, then install ``key``."""
    here = {"", ".", os.getcwd()}
    saved = list(sys.path)
    # The working folder could hold a planted tformer_grading/; import from the install.
    sys.path[:] = [p for p in sys.path if p not in here]
    try:
        from tformer_grading import checks
        from tformer_grading.guard import receipts

        for module in pkgutil.iter_modules(checks.__path__):
            importlib.import_module(f"{checks.__name__}.{module.name}")
    finally:
        sys.path[:] = saved
    receipts.install_key(key)
    # IPython keeps each cell's source for tracebacks; this cell's held the key.
    for name in [n for n, entry in linecache.cache.items() if key in str(entry)]:
        del linecache.cache[name]
