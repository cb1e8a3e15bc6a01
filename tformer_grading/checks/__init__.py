"""Checks that exercise test cells call: a package per chapter (``chNN``) with one
module per exercise (``ch02.attention``), what its exercises share and its
``sections``, whose ``__init__`` re-exports the checks (test cells call
``ch02.check_attention``); and a module per exercise outside the chapters
(``ch06_loop``, the bug hunts ``bughunt_*``, ``own_model``). :func:`exercise_modules`
lists them all.

A check author reads ``diagnosis`` (the API: ``Pitfall``, ``Section``, ``Case``,
``compare_to_reference``, probes), ``cases`` (seeded inputs, building the
learner's module) and ``delegation`` (the hidden "written by hand" tests);
``blocks`` holds what chapters 4 and 5 share. ``measure`` is the measuring toolkit,
one concern per module, that every exercise's checks share (its ``torch_errors`` reads a
crash's numbers as the case's sizes).
"""

# The checks' shared machinery; every other module of this package holds one exercise's
# checks. Defined in the guard, which captures it before learner code runs.
from ..guard.integrity import SHARED_CHECK_MODULES as SHARED_MODULES
from .diagnosis import CheckFailure, Diagnosis, Pitfall, Section

__all__ = [
    "SHARED_MODULES",
    "CheckFailure",
    "Diagnosis",
    "Pitfall",
    "Section",
    "exercise_modules",
]


def exercise_modules() -> list:
    """Every module that holds exercise checks, imported, in course order: the modules
    of this package that are not shared machinery, and each module of a chapter
    package (``ch02.attention``) but its ``sections``, in the order of the package's
    ``MODULES``.

    >>> [m.__name__.rsplit("checks.", 1)[1] for m in exercise_modules()][:4]
    ['bughunt_attention', 'bughunt_attention_calls', 'bughunt_decoding', 'ch01.stages']
    """
    import importlib
    import pkgutil

    found = []
    for info in pkgutil.iter_modules(__path__):
        if info.name in SHARED_MODULES:
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        if not info.ispkg:
            found.append(module)
            continue
        # In the order the chapter's exercises come (its MODULES), then any other.
        subs = [s.name for s in pkgutil.iter_modules(module.__path__)]
        order = list(getattr(module, "MODULES", ()))
        subs = order + sorted(set(subs) - set(order) - {"sections"})
        found += [importlib.import_module(f"{module.__name__}.{sub}") for sub in subs]
    return found
