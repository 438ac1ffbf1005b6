"""slurmctld killed (SIGKILL) and restarted while the daemon is placing jobs."""

from __future__ import annotations

import signal
import time

import pytest
from harness import all_in, held, jobs_named, kill_ctld, log_disagreements, restart_ctld, submit_managed, until

pytestmark = pytest.mark.faults

LEASE = 300  # longer than the test: every job that runs was started by the daemon
#: slurmctld batches its state saves over up to 5 s: a job younger than that dies with a SIGKILLed slurmctld
#: (Slurm's own window, not the daemon's); the daemon's updates inside it are lost and must be re-planned
SAVED = 6


def test_slurmctld_killed_in_the_middle_of_a_cycle(daemons, name):
    daemon = daemons(lease=LEASE).start()
    daemon.signal(signal.SIGSTOP)  # jobs pile up, so the next cycle has many updates to make
    jobs = [submit_managed(f"{name}{i}", LEASE, f"--gpus={1 + i % 3}") for i in range(30)]
    time.sleep(SAVED)
    daemon.signal(signal.SIGCONT)
    time.sleep(0.3)  # the cycle has read Slurm and is pinning jobs
    kill_ctld()
    time.sleep(3)  # cycles fail or wait on slurmctld meanwhile
    assert daemon.running()
    restart_ctld()

    # Slurm may have lost the daemon's last updates (see SAVED): those are re-planned after stale_after, 30 s
    running = until(lambda: all_in(name, {"RUNNING"}, len(jobs)), 90, "every job running")
    assert sorted(running) == sorted(jobs)
    assert daemon.running()  # it survived the outage
    daemon.wait_cycles(3)
    seen = jobs_named(name)
    assert log_disagreements(daemon.db, seen) == []
    assert held(name) == []
    # Nothing left to do: a further cycle neither re-places nor rewrites any job.
    from compass_slurm.service.store import Store

    with Store.open(f"sqlite:///{daemon.db}", create=False) as store:
        before = len(store.decisions())
    daemon.wait_cycles(3)
    with Store.open(f"sqlite:///{daemon.db}", create=False) as store:
        assert len(store.decisions()) == before
    assert {j.id: j.nodes for j in jobs_named(name)} == {j.id: j.nodes for j in seen}
