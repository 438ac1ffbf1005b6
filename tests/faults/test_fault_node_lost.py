"""A node drained or set down between the daemon's decision and the job's start: the job is re-planned."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

import pytest
from harness import all_in, expand, first_pin, jobs_named, log_disagreements, submit_managed, until

from compass_slurm.config import Config
from compass_slurm.service.daemon import Daemon
from compass_slurm.slurm.cli_backend import CliBackend

pytestmark = pytest.mark.faults

LEASE = 300


class LosesTheNode(CliBackend):
    """Takes the first node of the first decision away (drain or down) just before Slurm hears the decision."""

    def __init__(self, state: str) -> None:
        super().__init__()
        self.state = state
        self.lost: str | None = None

    def scontrol_lines(self, lines: Sequence[list[str]]) -> list[str | None]:
        if self.lost is None and (node := first_pin(lines)) is not None:
            self.lost = node
            scontrol("update", f"NodeName={self.lost}", f"State={self.state}", "Reason=compass-fault-test")
        return super().scontrol_lines(lines)


def scontrol(*args: str) -> None:
    subprocess.run(["scontrol", *args], check=True, capture_output=True)


def resume(node: str) -> None:
    """The node back in service. From 23.11 on, Slurm refuses RESUME ("Invalid node state transition") for a node
    that is no longer down or drained: only a node still out of service is an error."""
    done = subprocess.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], capture_output=True, text=True)
    if done.returncode != 0:
        state = subprocess.run(["sinfo", "--noheader", "--Node", f"--nodes={node}", "--format=%T"], check=True,
                               capture_output=True, text=True).stdout.strip()
        assert not any(word in state.upper() for word in ("DOWN", "DRAIN")), f"{node} stays {state}: {done.stderr}"


@pytest.mark.parametrize("state", ["DRAIN", "DOWN"])
def test_job_is_replanned_when_its_node_is_lost(cluster, name, tmp_path, state):
    backend = LosesTheNode(state)
    daemon = Daemon(Config(anchors=str(tmp_path / "anchors"), lease=LEASE, interval=1), backend,
                    f"sqlite:///{tmp_path / 'log.db'}")
    try:
        job = submit_managed(f"{name}0", LEASE, "--gpus=2")
        first = daemon.cycle()
        assert [d.action for d in first.decisions] == ["placed"] and backend.lost is not None
        assert first.decisions[0].nodes == (backend.lost,)
        second = daemon.cycle()  # sees the node gone before Slurm could start the job there
        assert [(d.job_id, d.action) for d in second.decisions] == [(job, "replanned")]
        assert backend.lost not in second.decisions[0].nodes
        until(lambda: all_in(name, {"RUNNING"}, 1), 30, "the re-planned job runs")
        ran = jobs_named(name)
        assert expand(ran[0].nodes) == second.decisions[0].nodes
        assert log_disagreements(tmp_path / "log.db", ran, once=True) == []
    finally:
        daemon.close()
        if backend.lost is not None:
            resume(backend.lost)
