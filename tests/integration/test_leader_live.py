"""Two real daemon processes on one MariaDB log, then on one PostgreSQL log, each "on its own host" (its own UTS
namespace, as beside each slurmctld of a backup-controller site): exactly one places jobs; through a 30-s
database outage jobs submitted meanwhile are still placed by a daemon and logged once the database is back;
after ``kill -9`` of the leader the other places within 40 s; no job is placed twice (service/leader.py)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from compass_slurm.service.store import Store

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "faults"))  # the daemon-process harness
from harness import DaemonProcess, jobs_named, until  # noqa: E402

pytestmark = pytest.mark.slurm

#: far off: only a daemon starts these jobs while the test looks
LEASE = 300
#: the site's default cycle; the leader's lease is two of them
INTERVAL = 5.0
OUTAGE_S = 30
TAKEOVER_S = 40


def submit(cluster, name: str, gpus: tuple[int, ...]) -> list[str]:
    ids = []
    for i, g in enumerate(gpus):
        done = subprocess.run(["sbatch", "--parsable", "--output=/dev/null", f"--job-name={name}{i}",
                               "--comment=compass", f"--begin=now+{LEASE}", f"--gpus={g}", "--wrap", "sleep 600"],
                              capture_output=True, text=True, check=True)
        ids.append(done.stdout.strip().split(";")[0])
    cluster.submitted.extend(ids)
    return ids


def running(name: str, count: int, timeout: float, what: str) -> list:
    return until(lambda: (found := jobs_named(name)) and len(found) == count
                 and all(j.state == "RUNNING" for j in found) and found, timeout, what)


def placed_by(daemon: DaemonProcess) -> Counter:
    """How often the daemon's own log says it placed each job."""
    return Counter(line.split()[6] for line in daemon.text().splitlines() if " INFO placed job " in line)


@pytest.mark.releases("22.05")  # the election is the daemons' own; one release shows it
def test_two_daemons_on_one_server_log_one_leads_through_an_outage_and_a_kill(idle_cluster, tmp_path, database):
    url = database.url
    daemons = {}
    for name in ("ctl-a", "ctl-b"):
        daemons[name] = DaemonProcess(tmp_path / name, lease=LEASE, interval=INTERVAL, hostname=name,
                                      extra_env={"COMPASS_DB": url, "COMPASS_LOG_SPOOL": str(tmp_path / name / "spool")})
    a, b = daemons["ctl-a"], daemons["ctl-b"]
    a.start()
    until(lambda: a.role() == "leader", 30, "the first daemon leads")
    b.start()
    try:
        until(lambda: b.role() == "standby", 30, "the second stands by")
        tag = f"lead-{database.kind}-{int(time.time())}-"

        first = submit(idle_cluster, f"{tag}one-", (2, 4, 1))
        running(f"{tag}one-", 3, 30, "the leader places the jobs")
        assert all(placed_by(a)[j] == 1 for j in first) and not placed_by(b), (placed_by(a), placed_by(b))
        assert (a.metrics()["compass_leader"], b.metrics()["compass_leader"]) == (1, 0)

        database.stop()
        down = time.monotonic()
        during = submit(idle_cluster, f"{tag}out-", (2, 1))
        time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - down)))
        database.start()
        running(f"{tag}out-", 2, 60, "the jobs submitted while the database was down are placed")

        leader, other = (a, b) if a.role() == "leader" else (b, a)
        assert other.role() == "standby"
        leader.kill()  # kill -9
        killed = time.monotonic()
        last = submit(idle_cluster, f"{tag}kill-", (4, 2))
        running(f"{tag}kill-", 2, TAKEOVER_S, "the standby leads and places within 40 s of the kill")
        assert time.monotonic() - killed <= TAKEOVER_S and other.role() == "leader"
        assert all(placed_by(other)[j] == 1 for j in last)

        with Store.open(url, create=False) as store:
            decisions = [d for d in store.decisions() if d.job_id in {*first, *during, *last}]
        placements = Counter(d.job_id for d in decisions if d.action == "placed")
        assert placements == Counter({j: 1 for j in [*first, *during, *last]}), placements  # once each, all logged
        both = placed_by(a) + placed_by(b)
        assert all(both[j] == 1 for j in [*first, *during, *last]), both  # by one daemon, once
        for job in jobs_named(tag):
            assert job.state == "RUNNING" and "held" not in job.reason.lower(), job
    finally:
        for daemon in daemons.values():
            daemon.stop()
