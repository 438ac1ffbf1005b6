"""A real Slurm for the tests marked ``slurm``: scripts/dev-cluster, 8 nodes x 8 GPUs, on each Slurm release.

The project's job_submit/lua hook is installed (``--job-submit-lua``); it changes no job
until a test's daemon writes the hook's config (COMPASS_HOOK_CONFIG), so the other
tests see plain Slurm.

Every test that uses the cluster runs once per release (22.05, 23.11, 24.11, 26.05, or those
in $COMPASS_TEST_SLURM), one release's cluster after the other. A cluster already running
with that layout is reused (and left running); one this fixture started is stopped when
its release is done. Skipped only where Slurm cannot run here: not Linux, or not root, or
a release's chroot not built and its archive unreachable (the reason in pytest's summary).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: devcluster.py
from devcluster import Layout, Preparing, releases_under_test, session_cluster, use_cluster  # noqa: E402

NODES, GPUS = 8, 8


@dataclass(frozen=True)
class DevCluster:
    env: dict[str, str]
    release: str
    nodes: int = NODES
    gpus_per_node: int = GPUS

    def use(self) -> None:
        """This release's cluster running (again, when a fixture of another layout replaced it meanwhile)."""
        use_cluster(Layout(self.nodes, self.gpus_per_node, self.release, job_submit_lua=True))


@pytest.hookimpl(trylast=True)  # after -m and -k: a run that deselects the live tests builds no chroot
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``@pytest.mark.releases("24.11", ...)``: run that test on those releases only (deselected on the others)."""
    kept, dropped = [], []
    for item in items:
        marker = item.get_closest_marker("releases")
        params = getattr(item, "callspec", None) and item.callspec.params
        # (a module's own cluster fixture of one release a param, as test_backup_controller.py's, counts too)
        release = (params.get("dev_cluster") or params.get("cluster")) if params else None
        (dropped if marker and release is not None and release not in marker.args else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
    # first-time builds for the other releases run while the 22.05 tests (and the fault tests) do
    used = {item.callspec.params["dev_cluster"] for item in kept
            if getattr(item, "callspec", None) and "dev_cluster" in item.callspec.params}
    Preparing.start(used - {"22.05"}, pyslurm=any("pyslurm_python" in item.fixturenames for item in kept))


@pytest.fixture(scope="session", params=releases_under_test())
def dev_cluster(request: pytest.FixtureRequest) -> Iterator[DevCluster]:
    """A running dev cluster of one release; its environment (SLURM_CONF, PATH, ...) is set in os.environ meanwhile."""
    with session_cluster(NODES, GPUS, request.param, job_submit_lua=True) as env:
        yield DevCluster(env, request.param)


@pytest.fixture(autouse=True)
def _own_release(request: pytest.FixtureRequest) -> None:
    """Each test that uses the cluster runs on its own release's, hook installed: the fault tests' cluster
    (another layout, in the same directory) stays set up for the whole session, and the tests of another
    release, or the packaging and scenario tests, may have run in between (pytest's order, --lf, -k)."""
    if "dev_cluster" in request.fixturenames:
        request.getfixturevalue("dev_cluster").use()


@pytest.fixture
def slurm(dev_cluster: DevCluster) -> Iterator[Slurm]:
    """Submits jobs on the dev cluster and cancels them afterwards."""
    helper = Slurm()
    yield helper
    if helper.submitted:
        subprocess.run(["scancel", *helper.submitted], check=False)


@pytest.fixture
def idle_cluster(slurm: Slurm) -> Slurm:
    """No GPU job left from earlier tests (they cancel theirs; Slurm takes a moment to free the nodes)."""
    from compass_slurm.slurm.cli_backend import CliBackend

    backend = CliBackend()
    deadline = time.monotonic() + 30
    while any(n.gpus_used for n in backend.read_state().nodes):
        assert time.monotonic() < deadline, "the dev cluster still runs GPU jobs of someone else"
        time.sleep(0.5)
    return slurm


DEV_DB = Path(__file__).resolve().parents[2] / "scripts" / "dev-db"


@dataclass
class Database:
    """A database server of one test's own (scripts/dev-db), which the test may stop and start again."""

    kind: str
    where: Path
    url: str = ""

    def start(self) -> None:
        self.url = self._run("start")

    def stop(self) -> None:
        self._run("stop")

    def _run(self, action: str) -> str:
        done = subprocess.run([sys.executable, str(DEV_DB), action, self.kind, "--dir", str(self.where)],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""


@pytest.fixture(params=["mariadb", "postgresql"])
def database(request: pytest.FixtureRequest) -> Iterator[Database]:
    """A MariaDB, then a PostgreSQL server of this test's own, stopped and removed afterwards (skipped where it
    cannot start, except in CI: there it must)."""
    # under /tmp and searchable: as root the server runs as its own account (mysql, postgres)
    root = Path(tempfile.mkdtemp(prefix="compass-db-"))
    root.chmod(0o755)
    server = Database(request.param, root / request.param)
    try:
        server.start()
    except AssertionError as err:
        shutil.rmtree(root, ignore_errors=True)
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(f"{request.param} could not start: {err}")
    yield server
    subprocess.run([sys.executable, str(DEV_DB), "stop", server.kind, "--dir", str(server.where)],
                   capture_output=True, timeout=120)
    shutil.rmtree(root, ignore_errors=True)


class Slurm:
    def __init__(self) -> None:
        self.submitted: list[str] = []

    def sbatch(self, *args: str) -> str:
        out = subprocess.run(
            ["sbatch", "--parsable", "--output=/dev/null", *args, "--wrap", "sleep 300"],
            check=True, capture_output=True, text=True,
        ).stdout.strip()
        self.submitted.append(out.split(";")[0])
        return self.submitted[-1]

    def wait(self, job_id: str, state: str, timeout: float = 30.0) -> str:
        """Wait until squeue shows ``state`` for the job; returns its node list."""
        deadline = time.monotonic() + timeout
        seen = ""
        while time.monotonic() < deadline:
            seen = subprocess.run(
                ["squeue", "--noheader", f"--jobs={job_id}", "--format=%T|%N"], capture_output=True, text=True
            ).stdout.strip()
            if seen.split("|")[0] == state:
                return seen.split("|")[1]
            time.sleep(0.2)
        raise AssertionError(f"job {job_id} not {state} after {timeout:.0f} s (last: {seen!r})")

    def show(self, job_id: str) -> str:
        return subprocess.run(["scontrol", "show", "job", "--details", job_id], capture_output=True, text=True).stdout
