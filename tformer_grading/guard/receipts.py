"""Receipts: while grading, each success line a check prints is signed.

The grader hands the kernel a fresh key before the notebook's first cell, in a
silent execution outside the notebook's history (``GuardedExecute`` runs
:func:`tformer_grading.guard.bootstrap.start`, which calls :data:`install_key`).
The key is set once: a notebook that calls ``install_key`` again gets an error,
and the key is in no environment variable or file (``/proc/<pid>/environ`` of a
kernel shows what it was started with). ``VerifyReceipts`` then counts, outside
the kernel, the valid receipts of each
test cell: a test cell whose checks were skipped, replaced or silenced scores
zero even though it raised nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets

from .integrity import integrity_problems, seal

RECEIPT_PATTERN = r"^(✓ .*?)  \[grader receipt (\d+):([0-9a-f]{16})\]$"
_RECEIPT = re.compile(RECEIPT_PATTERN, re.MULTILINE)
_CHECK_CALL = re.compile(r"\bcheck_\w+\s*\(")


def receipt_mac(key: str, number: int, line: str) -> str:
    """The 16 hex digits that sign success line ``line``, the ``number``-th of the
    kernel."""
    message = f"{number}|{line}".encode()
    return hmac.new(key.encode(), message, hashlib.sha256).hexdigest()[:16]


def _make_signer():
    """``(sign, install_key)`` sharing one key, which ``install_key`` sets once."""
    key, count = [""], [0]

    def sign(line: str) -> str:
        """``line`` with its receipt appended while grading; unchanged otherwise."""
        if not key[0] or integrity_problems():  # patched machinery earns no receipt
            return line
        count[0] += 1
        mac = receipt_mac(key[0], count[0], line)
        return f"{line}  [grader receipt {count[0]}:{mac}]"

    def install_key(new: str) -> None:
        """Sign from now on with ``new``; only the grader's first call counts."""
        if key[0]:
            raise RuntimeError("the grading key is set once, by the grader")
        key[0] = new

    return sign, install_key


sign, install_key = _make_signer()


def expected_receipts(source: str) -> int:
    """How many check calls a test cell's source makes (comments ignored): each must
    print a receipt."""
    code = "\n".join(line.split("#", 1)[0] for line in source.splitlines())
    return len(_CHECK_CALL.findall(code))


def valid_receipts(text: str, key: str) -> list[int]:
    """The numbers of the correctly signed success lines in ``text``."""
    return [
        int(n)
        for line, n, mac in _RECEIPT.findall(text)
        if secrets.compare_digest(mac, receipt_mac(key, int(n), line))
    ]


def receipt_lines(text: str) -> str:
    """Every receipt line of ``text``, one per line (kept when an output cap cuts the
    rest)."""
    if "[grader receipt" not in text:
        return ""
    return "".join(m.group(0) + "\n" for m in _RECEIPT.finditer(text))


seal(__name__)
