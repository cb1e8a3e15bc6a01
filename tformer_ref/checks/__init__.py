"""Checks that exercise test cells call. One module per chapter; the shared machinery is in ``core``."""
from .core import CheckFailure, Pitfall, Section
