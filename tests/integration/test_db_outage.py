"""The decision log's database down for 30 s under a real daemon process: managed jobs are still placed and run
where decided, and once the database is back their decisions reach it from the spool, once each."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from compass_slurm.service.spool import read_backlog
from compass_slurm.service.store import Store

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "faults"))  # the daemon-process harness
from harness import DaemonProcess, expand, jobs_named, until  # noqa: E402

pytestmark = pytest.mark.slurm

DEV_DB = Path(__file__).resolve().parents[2] / "scripts" / "dev-db"
#: far off: only the daemon starts these jobs while the test looks
LEASE = 300
OUTAGE_S = 30


def dev_db(action: str, kind: str, where: Path) -> str:
    done = subprocess.run([sys.executable, str(DEV_DB), action, kind, "--dir", str(where)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""


@pytest.fixture(params=["mariadb", "postgresql"])
def database(request: pytest.FixtureRequest) -> Iterator[tuple[str, Path, str]]:
    """A server of this test's own (its kind, its directory, its URL), stopped and removed afterwards."""
    # under /tmp and searchable: as root the server runs as its own account (mysql, postgres)
    root = Path(tempfile.mkdtemp(prefix="compass-outage-"))
    root.chmod(0o755)
    where = root / request.param
    try:
        url = dev_db("start", request.param, where)
    except AssertionError as err:
        shutil.rmtree(root, ignore_errors=True)
        pytest.skip(f"{request.param} could not start: {err}")
    yield request.param, where, url
    subprocess.run([sys.executable, str(DEV_DB), "stop", request.param, "--dir", str(where)],
                   capture_output=True, timeout=120)
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.releases("22.05")  # the spool is the daemon's own; one release shows it
def test_jobs_are_placed_while_the_database_is_down_and_logged_once_it_is_back(idle_cluster, tmp_path, database):
    kind, where, url = database
    spool = tmp_path / "daemon" / "spool.jsonl"
    daemon = DaemonProcess(tmp_path / "daemon", lease=LEASE, interval=1.0,
                           extra_env={"COMPASS_DB": url, "COMPASS_LOG_SPOOL": str(spool)})
    daemon.start()
    try:
        daemon.wait_cycles(1)
        dev_db("stop", kind, where)
        down = time.monotonic()
        name = f"outage-{kind}-{int(time.time())}-"
        for i, gpus in enumerate((2, 4, 1)):
            done = subprocess.run(["sbatch", "--parsable", "--output=/dev/null", f"--job-name={name}{i}",
                                   "--comment=compass", f"--begin=now+{LEASE}", f"--gpus={gpus}",
                                   "--wrap", "sleep 300"], capture_output=True, text=True, check=True)
            idle_cluster.submitted.append(done.stdout.strip().split(";")[0])
        jobs = until(lambda: (found := jobs_named(name)) and len(found) == 3
                     and all(j.state == "RUNNING" for j in found) and found, 30,
                     "the daemon places the jobs with its database down")
        assert read_backlog(spool).records > 0 and daemon.metrics()["compass_log_spooled_records"] > 0
        text = daemon.text()
        assert "DECISION LOG NOT WRITTEN" in text and "spooled to" in text
        said = {line.split()[6]: line for line in text.splitlines() if " INFO placed job " in line}
        for job in jobs:  # placed by the daemon (the lease is far off), where it said
            assert job.id in said and all(f"{n}:" in said[job.id] for n in expand(job.nodes)), said.get(job.id)
        time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - down)))
        dev_db("start", kind, where)
        until(lambda: read_backlog(spool).records == 0, 30, "the spool written to the database")
        assert daemon.running()
        with Store.open(url, create=False) as store:
            decisions = [d for d in store.decisions() if d.job_id in {j.id for j in jobs}]
            assert any(e.kind == "spool" for e in store.errors())
        for job in jobs_named(name):
            mine = [d for d in decisions if d.job_id == job.id]
            assert [d.action for d in mine] == ["placed"], mine  # once each
            assert set(mine[0].nodes) == set(expand(job.nodes))  # and where it runs
        assert daemon.metrics()["compass_log_spooled_records"] == 0
    finally:
        daemon.stop()
