"""A cycle's changes reach Slurm through one scontrol per step, and a refusal is its own job's only."""

from __future__ import annotations

from compass_slurm.config import Config
from compass_slurm.service.daemon import Daemon
from compass_slurm.slurm.cli_backend import CliBackend

from tests.service.test_daemon_unit import cluster, nodes, pending
from tests.slurm.test_batch import FakeScontrol


class Served(CliBackend):
    """The CLI backend's changes (through ``fake``) on a state given, not read."""

    def __init__(self, state, fake: FakeScontrol) -> None:
        super().__init__(runner=fake.run, batch_runner=fake.batch)
        self.state = state

    def read_state(self):
        return self.state


def test_a_cycles_decisions_go_in_one_scontrol_and_a_refusal_fails_its_job_only():
    fake = FakeScontrol({"61": "Job has already finished"})
    state = cluster(nodes(4), [pending(str(j), gpus=8, priority=100 - j) for j in range(60, 64)])
    daemon = Daemon(Config(anchors="", lease=60), Served(state, fake), None)
    report = daemon.cycle()
    # the decisions in one batch; then where the refused job ran (squeue), and its lease: one line, run alone
    assert len(fake.texts) == 1
    assert [a[:2] for a in fake.alone] == [["squeue", "--noheader"], ["scontrol", "update"]]
    assert [line.split()[1] for line in fake.texts[0].splitlines()] == [f"JobId={j}" for j in range(60, 64)]
    assert [(d.job_id, d.action) for d in report.decisions] == [
        ("60", "placed"), ("61", "failed"), ("62", "placed"), ("63", "placed")]
    assert "Job has already finished for job 61" in report.decisions[1].reason
    assert set(daemon.placed) == {"60", "62", "63"}
