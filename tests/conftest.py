import os
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
# The tests and the notebooks they execute see the same package and the same environment's tools.
os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
os.environ.setdefault("PYTHONPATH", str(ROOT))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield
