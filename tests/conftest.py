import os
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
# Helpers imported by bare name: the nbgrader round trip (grading/course.py, grading/hostile.py)
# and the built book (book/book.py, book/browser.py).
for _helpers in ("grading", "book"):
    sys.path.insert(0, str(Path(__file__).resolve().parent / _helpers))
# The tests and the notebooks they execute see the same package and the same environment's tools.
os.environ["PATH"] = os.pathsep.join(
    [str(Path(sys.executable).parent), os.environ.get("PATH", "")]
)
os.environ.setdefault("PYTHONPATH", str(ROOT))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


@pytest.fixture(autouse=True)
def _fresh_notebook():
    # Each test is a notebook of its own: no piece of an earlier test failed in it
    # (tformer_grading/checks/pieces.py names earlier failed pieces).
    from tformer_grading.checks import pieces

    pieces.forget()
    yield


# --------------------------------------------------------------------------- GPU tests
# `make test` (the CPU suite) does not select tests marked `gpu`. `make test-gpu` sets
# TFORMER_REQUIRE_GPU=1: gpu tests are selected, and a machine without CUDA is a hard
# failure rather than a row of skips that would look like success.
REQUIRE_GPU = os.environ.get("TFORMER_REQUIRE_GPU", "") == "1"


def pytest_sessionstart(session):
    if REQUIRE_GPU and not torch.cuda.is_available():
        pytest.exit(
            "TFORMER_REQUIRE_GPU=1 (make test-gpu) but torch.cuda.is_available() is False "
            f"(torch {torch.__version__}): no CUDA GPU here, so the GPU suite cannot run. "
            "Run `make test` for the CPU suite.",
            returncode=3,
        )


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items or REQUIRE_GPU:
        return
    if not config.option.markexpr:
        # The default run: gpu tests belong to `make test-gpu`.
        config.hook.pytest_deselected(items=gpu_items)
        items[:] = [item for item in items if "gpu" not in item.keywords]
    elif not torch.cuda.is_available():
        for item in gpu_items:
            item.add_marker(
                pytest.mark.skip(
                    reason="needs CUDA (torch.cuda.is_available() is False); run `make test-gpu` on a GPU machine"
                )
            )


def pytest_generate_tests(metafunc):
    """One grading test per buggy learner of a chapter (tests/grading/course.py, GradedChapter)."""
    if "buggy_student" in metafunc.fixturenames:
        metafunc.parametrize("buggy_student", sorted(metafunc.cls.buggy))
