"""Regression: tests that share one expensive setup must run on one xdist worker.

The bug: with pytest 9.2 and pytest-xdist 3.8, ``--dist loadgroup`` silently ignored
every ``xdist_group`` mark. xdist names a group by appending ``@group`` to
``item._nodeid``, and pytest 9 no longer reads that attribute, so the groups were split
across both workers.
Each chapter's nbgrader round trip ran twice (once per worker) and the book was built on
one worker while the other waited on its lock: about nine minutes of a 20-minute suite.
The cause was found by the doubled setup times in ``--durations``.

The guard: pytest is pinned to 8.4 (requirements.txt), and these tests fail when the
group suffix is missing or a group's tests land on different workers.
"""

import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.xdist_group("xdist_groups_regression")
UNDER_XDIST = os.environ.get("PYTEST_XDIST_WORKER") is not None


@pytest.mark.skipif(not UNDER_XDIST, reason="only meaningful under pytest-xdist")
def test_a_grouped_test_carries_its_group_in_its_id(request):
    assert request.node.nodeid.endswith("@xdist_groups_regression"), (
        f"{request.node.nodeid!r}: --dist loadgroup did not tag this test with its "
        "xdist_group, so grouped tests may run on different workers (pytest-xdist and "
        "pytest versions disagree; see this file's docstring)"
    )


@pytest.fixture(scope="module")
def worker_log(tmp_path_factory):
    # One file per test run, shared by the workers (their basetemps share a parent).
    return Path(tmp_path_factory.getbasetemp()).parent / "xdist-groups-workers.txt"


@pytest.mark.skipif(not UNDER_XDIST, reason="only meaningful under pytest-xdist")
@pytest.mark.parametrize("i", range(4))
def test_a_group_runs_on_one_worker(i, worker_log):
    with worker_log.open("a") as log:
        log.write(os.environ["PYTEST_XDIST_WORKER"] + "\n")
    workers = set(worker_log.read_text().split())
    assert len(workers) == 1, f"one xdist group ran on workers {sorted(workers)}"
