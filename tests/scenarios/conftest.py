"""Scenario tests on two real dev clusters side by side (marker ``slurm``): the daemon's and plain Slurm's.

The daemon's cluster is the session's (COMPASS_DEV_DIR and COMPASS_DEV_PORT, re-laid out to
16 nodes); plain Slurm's runs beside it in COMPASS_DEV_DIR-plain on COMPASS_DEV_PORT + 250
(a 16-node cluster uses ports up to +200, so both stay within the 500 ports above
COMPASS_DEV_PORT that any cluster of the tests uses), for this module only. Skipped only where Slurm
cannot run: not Linux, or not root.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(TESTS), str(TESTS / "faults")]  # devcluster.py, live_workload.py, harness.py
from devcluster import DEV_CLUSTER, session_cluster  # noqa: E402
from live_workload import Cluster  # noqa: E402
from starvation_scenario import GPUS, NODES  # noqa: E402

PLAIN_PORT_OFFSET = 250


@pytest.fixture(scope="module")
def two_clusters() -> Iterator[tuple[Cluster, Cluster]]:
    with session_cluster(NODES, GPUS) as env:
        root = Path(env.get("COMPASS_DEV_DIR") or os.environ.get("COMPASS_DEV_DIR")
                    or DEV_CLUSTER.parents[1] / "run" / "dev-cluster")
        port = int(os.environ.get("COMPASS_DEV_PORT") or 16817)
        daemon_side = Cluster(root, port, NODES, GPUS)
        plain = Cluster(root.with_name(root.name + "-plain"), port + PLAIN_PORT_OFFSET, NODES, GPUS).start()
        try:
            yield daemon_side, plain
        finally:
            plain.stop()
