"""Fault tests on the real dev cluster (marker ``faults``): 64 nodes x 8 GPUs, one per session.

They run on 22.05 (CI's time goes to the integration suite on every release);
COMPASS_FAULTS_SLURM names another release to run them on.

Like tests/integration, a cluster already running with this layout is reused and one
this fixture started is stopped at the end; COMPASS_DEV_DIR and COMPASS_DEV_PORT
keep it apart from other clusters on the machine. Skipped only where Slurm cannot
run: not Linux, or not root.
"""

from __future__ import annotations

import itertools
import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: devcluster.py
from dblogs import DbServers, new_log, servers  # noqa: E402
from devcluster import RELEASES, Layout, session_cluster, use_cluster  # noqa: E402
from harness import DaemonProcess, cancel, jobs_named  # noqa: E402

NODES, GPUS = 64, 8
_TESTS = itertools.count()


def _release() -> str:
    return os.environ.get("COMPASS_FAULTS_SLURM") or "22.05"


def pytest_configure(config: pytest.Config) -> None:
    if _release() not in RELEASES:
        raise pytest.UsageError(f"COMPASS_FAULTS_SLURM: unknown release {_release()!r}; known are {', '.join(RELEASES)}")


#: what slurmctld logs when a job or node goes wrong (a failure's report shows its latest such lines)
_TROUBLE = re.compile(r"error|fail|kill|drain|down|not responding|requeue", re.IGNORECASE)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """A fault test's failure carries slurmctld's latest lines of trouble: by the end of a CI run the next
    cluster started in the same directory has replaced its log."""
    outcome = yield
    report = outcome.get_result()
    conf = os.environ.get("SLURM_CONF")
    if report.when == "call" and report.failed and conf:
        log = Path(conf).parents[1] / "log" / "slurmctld.log"
        if log.exists():
            lines = log.read_text(errors="replace").splitlines()[-5000:]
            report.sections.append((f"{log}: its last 80 lines of trouble",
                                    "\n".join([ln for ln in lines if _TROUBLE.search(ln)][-80:])))


@pytest.fixture(scope="session")
def cluster() -> Iterator[dict[str, str]]:
    """The running dev cluster's environment (SLURM_CONF, ...), also set in os.environ meanwhile."""
    with session_cluster(NODES, GPUS, _release()) as env:
        yield env


@pytest.fixture(autouse=True)
def _own_layout(request: pytest.FixtureRequest) -> None:
    """This layout running for each fault test, also when another fixture's cluster ran in between."""
    if "cluster" in request.fixturenames:
        request.getfixturevalue("cluster")
        use_cluster(Layout(NODES, GPUS, _release()))


@pytest.fixture
def name(request: pytest.FixtureRequest, cluster: dict[str, str]) -> Iterator[str]:
    """A job-name prefix unique to this test; its jobs are cancelled afterwards."""
    prefix = f"f{os.getpid()}-{next(_TESTS)}-{re.sub(r'[^A-Za-z0-9_]', '', request.node.name)[:40]}-"
    yield prefix
    cancel(j.id for j in jobs_named(prefix) if j.state in ("PENDING", "RUNNING", "CONFIGURING"))


@pytest.fixture(scope="session")
def db_servers() -> Iterator[DbServers]:
    with servers() as found:
        yield found


@pytest.fixture
def log(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str | None]:
    """The decision log of the test's daemons: by default None, a SQLite file of each daemon's own; a test
    parametrized ``indirect=["log"]`` with "mariadb" or "postgresql" gets a fresh log on this run's server
    (tests/dblogs.py)."""
    kind = getattr(request, "param", "sqlite")
    if kind == "sqlite":
        yield None
        return
    with new_log(request.getfixturevalue("db_servers"), kind, tmp_path) as url:
        yield url


@pytest.fixture
def daemons(tmp_path: Path, cluster: dict[str, str], log: str | None) -> Iterator[Callable[..., DaemonProcess]]:
    """Makes daemon processes under tmp_path (not started), on the ``log`` when one is given; every one is killed
    afterwards."""
    made: list[DaemonProcess] = []

    def make(**options) -> DaemonProcess:
        made.append(DaemonProcess(tmp_path / f"daemon{len(made)}", **({"db": log} if log else {}), **options))
        return made[-1]

    yield make
    for daemon in made:
        daemon.kill()
