"""Every module of an exercise's tests is imported by its bare name from any test
(``from bank_attention import attention_matmul``): tests/ has no packages, so
tests/bank (the bank's machinery) and each folder here that holds a module go on
sys.path, and no two of those modules share a name.
"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
for _folder in [HERE.parent / "bank"] + sorted(
    {p.parent for p in HERE.rglob("*.py") if p.parent != HERE}
):
    if str(_folder) not in sys.path:
        sys.path.insert(0, str(_folder))
