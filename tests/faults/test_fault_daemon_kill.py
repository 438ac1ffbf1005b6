"""The daemon SIGKILLed during a cycle and during a database write; the restarts on SQLite logs, and on a MariaDB
(restarted while slurmctld is away) and a PostgreSQL one (killed during its writes): each server kind once, for
CI's 40 minutes."""

from __future__ import annotations

import signal
import time

import pytest
from harness import (all_in, held, integrity, jobs_named, kill_ctld, log_disagreements, restart_ctld,
                     submit_managed, until)

pytestmark = pytest.mark.faults

LIVES = 4
#: slurmctld batches its state saves over up to 5 s (see test_fault_slurmctld.py)
SAVED = 6


def test_killed_during_a_cycle_the_lease_starts_every_job(daemons, name):
    lease = 8
    daemon = daemons(lease=lease).start()
    daemon.wait_cycles(2)  # its log exists: the count moves as a cycle begins, so the first one has been written
    daemon.signal(signal.SIGSTOP)  # jobs pile up, so the next cycle has many to place
    jobs = [submit_managed(f"{name}{i}", lease, f"--gpus={1 + i % 4}", "--nodes=1") for i in range(40)]
    daemon.signal(signal.SIGCONT)
    time.sleep(0.25)  # inside the cycle: some jobs pinned, others not yet
    daemon.kill()
    # No daemon any more: what it pinned starts now, the rest when their lease runs out.
    until(lambda: all_in(name, {"RUNNING"}, len(jobs)), 2 * lease + 20, "every job running without the daemon")
    assert held(name) == []
    assert integrity(daemon.url) == []
    # It logged the cycle's decisions before telling Slurm any: those Slurm never heard ran where Slurm chose.
    # The next daemon finds them and logs where they run.
    daemon.start().wait_cycles(2)
    assert log_disagreements(daemon.url, jobs_named(name)) == []


@pytest.mark.parametrize("leases, log", [("running", "sqlite"), ("run-out", "sqlite"), ("running", "mariadb")],
                         indirect=["log"])
def test_killed_during_a_cycle_and_restarted_while_slurmctld_is_away(daemons, name, leases, log):
    """The next daemon's first cycles are skipped (slurmctld away) and logged, so the killed cycle is no longer the
    latest one when it can read Slurm; meanwhile the leases ran out and Slurm started jobs where it chose. Each
    job still runs where its latest record says, and none is placed twice (a decision Slurm never heard is
    decided again as a re-plan). Seen in CI's soak: a restart racing a slurmctld restart lost nine such jobs.
    With ``run-out`` every lease has run out before slurmctld goes: Slurm started the unheard jobs itself."""
    lease = 8
    daemon = daemons(lease=lease).start()
    daemon.wait_cycles(2)
    daemon.signal(signal.SIGSTOP)
    jobs = [submit_managed(f"{name}{i}", lease, f"--gpus={1 + i % 4}", "--nodes=1") for i in range(40)]
    daemon.signal(signal.SIGCONT)
    time.sleep(0.25)  # inside the cycle: some jobs pinned, others not yet
    daemon.kill()
    time.sleep(SAVED + (lease if leases == "run-out" else 0))  # slurmctld has saved the jobs and pins it heard
    kill_ctld()
    daemon.start().wait_cycles(2)  # skipped: slurmctld away
    restart_ctld()
    until(lambda: all_in(name, {"RUNNING"}, len(jobs)), 2 * lease + 60, "every job running")
    daemon.wait_cycles(3)
    assert held(name) == []
    assert log_disagreements(daemon.url, jobs_named(name)) == []


@pytest.mark.parametrize("log", ["sqlite", "postgresql"], indirect=True)
def test_killed_during_database_writes_restarts_cleanly(daemons, name, log):
    lease = 300  # longer than the test: every job that runs was placed by one of the daemon's lives
    daemon = daemons(lease=lease)
    jobs: list[str] = []
    for life in range(LIVES):
        daemon.start()
        if life == 0:
            daemon.wait_cycles(2)  # its log exists (else a kill before the first write leaves none to check)
        daemon.signal(signal.SIGSTOP)
        jobs += [submit_managed(f"{name}{life}-{i}", lease, f"--gpus={1 + i % 3}", seconds=600) for i in range(8)]
        placed = daemon.text().count("INFO placed job")
        daemon.signal(signal.SIGCONT)
        # The cycle logs its decisions, then writes them in one transaction: kill right there.
        until(lambda: daemon.text().count("INFO placed job") >= placed + 8, 90, "the decisions of this cycle",
              poll=0.002)
        daemon.kill()
        assert integrity(daemon.url) == [], f"life {life}"
    daemon.start()  # the last life sees everything through
    until(lambda: all_in(name, {"RUNNING"}, len(jobs)), 60, "every job running")  # noqa
    daemon.wait_cycles(2)
    assert daemon.running()
    assert held(name) == []
    assert integrity(daemon.url) == []
    # a life killed before Slurm started its jobs left them to the next one, which may decide again
    assert log_disagreements(daemon.url, jobs_named(name), once=False) == []
