"""The decision log's database down for 30 s under a real daemon process: managed jobs are still placed and run
where decided, and once the database is back their decisions reach it from the spool, once each."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from compass_slurm.service.spool import read_backlog
from compass_slurm.service.store import Store

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "faults"))  # the daemon-process harness
from harness import DaemonProcess, expand, jobs_named, until  # noqa: E402

pytestmark = pytest.mark.slurm

#: far off: only the daemon starts these jobs while the test looks
LEASE = 300
OUTAGE_S = 30


@pytest.mark.releases("22.05")  # the spool is the daemon's own; one release shows it
def test_jobs_are_placed_while_the_database_is_down_and_logged_once_it_is_back(idle_cluster, tmp_path, database):
    kind, url = database.kind, database.url
    spool = tmp_path / "daemon" / "spool.jsonl"
    daemon = DaemonProcess(tmp_path / "daemon", lease=LEASE, interval=1.0,
                           extra_env={"COMPASS_DB": url, "COMPASS_LOG_SPOOL": str(spool)})
    daemon.start()
    try:
        daemon.wait_cycles(1)
        database.stop()
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
        database.start()
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
