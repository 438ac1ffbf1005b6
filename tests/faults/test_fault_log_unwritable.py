"""The decision log's disk full or read-only: the daemon keeps placing jobs and says so loudly."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from harness import all_in, expand, jobs_named, submit_managed, until

from compass_slurm.service.store import Store

pytestmark = pytest.mark.faults

LEASE = 300


def mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True)


def fill(directory: Path) -> None:
    """Write until the filesystem refuses another byte (big blocks, then single bytes for the rest)."""
    fd = os.open(directory / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        for block in (b"\0" * 65536, b"\0"):
            try:
                while True:
                    os.write(fd, block)
            except OSError:
                pass
    finally:
        os.close(fd)


@pytest.mark.parametrize("fault", ["full", "read-only"])
def test_daemon_places_jobs_when_the_log_cannot_be_written(daemons, name, tmp_path, fault):
    logdir = tmp_path / "logfs"
    logdir.mkdir()
    mount("-t", "tmpfs", "-o", "size=4m", "compass-faults", str(logdir))
    # the log's spool on a disk that works (by default it shares the log's): decisions spooled count as logged
    daemon = daemons(lease=LEASE, db=logdir / "log.db", extra_env={"COMPASS_LOG_SPOOL": str(tmp_path / "spool.jsonl")})
    try:
        if fault == "full":
            daemon.start()
            daemon.wait_cycles(1)
            fill(logdir)
        else:
            # a log the daemon wrote before, on a filesystem that went read-only (a busy one cannot be remounted)
            Store.open(f"sqlite:///{daemon.db}").close()
            mount("-o", "remount,ro", str(logdir))
            daemon.start()
        jobs = [submit_managed(f"{name}{i}", LEASE, "--gpus=2", seconds=30) for i in range(6)]
        until(lambda: all_in(name, {"RUNNING"}, len(jobs)), 30, "the daemon places jobs without its log")
        assert daemon.running()
        text = daemon.text()
        assert "DECISION LOG NOT WRITTEN" in text
        placed = {line.split()[6]: line for line in text.splitlines() if " INFO placed job " in line}
        for job in jobs_named(name):  # placed by the daemon (the lease is far off), where it said
            assert job.id in placed and all(f"{n}:2" in placed[job.id] for n in expand(job.nodes))
        metrics = daemon.metrics()
        assert metrics["compass_errors_total"] >= 1
        # The disk comes back: the log works again and records the failure it could not write then.
        if fault == "full":
            (logdir / "filler").unlink()
        else:
            mount("-o", "remount,rw", str(logdir))
        daemon.wait_cycles(2)
        with Store.open(f"sqlite:///{daemon.db}", create=False) as store:
            assert any(e.kind == "log" for e in store.errors())
    finally:
        daemon.kill()  # before the unmount: it holds the database open
        subprocess.run(["umount", "-l", str(logdir)], check=False, capture_output=True)
