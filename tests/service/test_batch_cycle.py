"""A cycle's changes reach Slurm through one scontrol per step, and a refusal is its own job's only."""

from __future__ import annotations

from compass_slurm.config import Config
from compass_slurm.service.daemon import Daemon
from compass_slurm.service.job_states import JobState
from compass_slurm.service.store import Store
from compass_slurm.slurm.cli_backend import CliBackend

from tests.service.test_daemon_unit import Clock, cluster, node, nodes, pending, requeued, running
from tests.slurm.test_batch import FakeScontrol


class Served(CliBackend):
    """The CLI backend's changes (through ``fake``) on a state given, not read."""

    def __init__(self, state, fake: FakeScontrol | Replayed) -> None:
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


# -- migrations across cycles --------------------------------------------------------------------

#: the third cycle's lines below: jobs 12-14 re-pinned and released (requeued by the second), 15 requeued
REPIN = ["update JobId=12 ReqNodeList=node01 NumNodes=1 TresPerJob= TresPerNode=gres:gpu:1 StartTime=now", "release 12",
         "update JobId=13 ReqNodeList=node01 NumNodes=1 TresPerJob= TresPerNode=gres:gpu:1 StartTime=now", "release 13",
         "update JobId=14 ReqNodeList=node01 NumNodes=1 TresPerJob= TresPerNode=gres:gpu:1 StartTime=now", "release 14",
         "requeuehold 15"]
#: what scontrol printed for them on the 22.05 dev cluster: job 13 cancelled after the read, job 14 released and
#: started by an admin meanwhile (a running job's node list may only shrink)
REPIN_OUTPUT = """\
scontrol: update JobId=12 ReqNodeList=node01 NumNodes=1 TresPerJob= TresPerNode=gres:gpu:1 StartTime=now
scontrol: release 12
scontrol: update JobId=13 ReqNodeList=node01 NumNodes=1 TresPerJob= TresPerNode=gres:gpu:1 StartTime=now
Job has already finished for job 13
scontrol: release 13
Job has already finished for job 13
slurm_suspend error: Job has already finished
scontrol: update JobId=14 ReqNodeList=node01 NumNodes=1 TresPerJob= TresPerNode=gres:gpu:1 StartTime=now
Invalid node name specified for job 14
scontrol: release 14
scontrol: requeuehold 15
scontrol: 
"""
#: the lines that settle the failed migrations of 13 and 14: their node lists cleared, 13's release retried
UNPINNED = ["update JobId=13 ReqNodeList=", "update JobId=14 ReqNodeList=", "release 13"]
#: the same lines run alone (the CLI backend's retry of lines a dead batch left unattributed): exit code, stderr
ALONE = {"release 13": (1, "Job has already finished for job 13\nslurm_suspend error: Job has already finished\n"),
         "update JobId=14 ReqNodeList=node01 NumNodes=1 TresPerJob= TresPerNode=gres:gpu:1 StartTime=now":
             (1, "Invalid node name specified for job 14\n")}


class Replayed:
    """scontrol answering with recorded output: the whole third-cycle batch (cut at ``cut`` characters: killed
    there), and each line run alone as ALONE says (else it succeeds)."""

    def __init__(self, cut: int | None = None) -> None:
        self.cut = cut
        self.texts: list[str] = []
        self.alone: list[list[str]] = []

    def batch(self, argv, text, timeout):
        self.texts.append(text)
        if text != "".join(line + "\n" for line in REPIN):
            return 0, "".join(f"scontrol: {line}\n" for line in text.splitlines()) + "scontrol: \n"
        return (1, REPIN_OUTPUT) if self.cut is None else (None, REPIN_OUTPUT[:self.cut])

    def run(self, argv, timeout):
        self.alone.append(argv)
        code, err = ALONE.get(" ".join(argv[1:]), (0, ""))
        return code, "", err


def migrating(fake: Replayed, tmp_path) -> tuple[Daemon, Served]:
    """A daemon that requeued 12-14 in its second cycle (node02's jobs into node01, three per 5 minutes), and whose
    third cycle, 5 minutes on, reads them pending and held and requeues 15."""
    names = [node(f"node0{i}") for i in (1, 2, 3)]
    movable = [running(str(j), {"node01": 1}, comment="compass:migratable") for j in range(8, 12)]
    moved = [running(str(j), {"node02": 1}, comment="compass:migratable") for j in range(12, 16)]
    ended = [running(str(j), {"node01": 1}, comment="compass:migratable") for j in range(16, 20)]
    clock = Clock()
    backend = Served(cluster(names, movable + moved + ended), fake)
    daemon = Daemon(Config(anchors="", lease=60, policy="compass", migrations_per_hour=100, migrations_burst=3),
                    backend, f"sqlite:///{tmp_path / 'log.db'}", clock=clock)
    daemon.cycle()
    backend.state = cluster(names, movable + moved)
    report = daemon.cycle()
    assert fake.alone == [["scontrol", "requeuehold", "12,13,14"]] and report.migrations == []
    fake.alone.clear()
    clock.now += 301
    backend.state = cluster(names, movable + [requeued(j) for j in moved[:3]] + moved[3:])
    return daemon, backend


def check_attributed(daemon: Daemon, report) -> None:
    """12 re-pinned and released, 13 (cancelled) and 14 (started by an admin) failed each for its own line only,
    15 requeued; the log says so."""
    assert [(m.job_id, m.status) for m in report.migrations] == [("12", "done"), ("13", "failed"), ("14", "failed")]
    assert [(e.kind, e.message.split(":")[0]) for e in report.errors] == [("migration", "job 13"),
                                                                          ("migration", "job 14")]
    assert "Job has already finished for job 13" in report.errors[0].message and "14" not in report.errors[0].message
    assert "Invalid node name specified for job 14" in report.errors[1].message
    assert "13" not in report.errors[1].message
    book = daemon.book
    assert (book.state("12"), book.state("13"), book.state("14"), book.state("15")) == (
        JobState.PLACED, None, None, JobState.REQUEUED)
    with Store.open(daemon.db, create=False) as store:
        last = {j: store.decisions(job=j)[-1] for j in ("12", "13", "14", "15")}
    assert {j: (d.action, d.nodes, d.from_nodes) for j, d in last.items()} == {
        "12": ("migrated", ("node01",), ("node02",)), "13": ("failed", ("node01",), ("node02",)),
        "14": ("failed", ("node01",), ("node02",)), "15": ("migrated", ("node01",), ("node02",))}
    assert "for job 13" in last["13"].reason and "job 14" not in last["13"].reason
    assert "for job 14" in last["14"].reason and "job 13" not in last["14"].reason


def test_one_batch_re_pins_releases_and_requeues_and_a_refusal_fails_its_job_only(tmp_path):
    fake = Replayed()
    daemon, _ = migrating(fake, tmp_path)
    report = daemon.cycle()
    assert fake.texts[-2].splitlines() == REPIN  # one scontrol for the cycle's migration lines
    # then one for the failed migrations: their node lists cleared (placed afresh, not tied to where they ran), and
    # the release 13 owed (it never was held again: it ended) tried once more
    assert fake.texts[-1].splitlines() == UNPINNED and fake.alone == []
    check_attributed(daemon, report)
    daemon.close()


def test_a_batch_killed_midway_retries_its_unattributed_lines_one_by_one(tmp_path):
    """scontrol killed as it echoed job 14's update: 12 and 13 are known done; 14's update and release and 15's
    requeue run again alone, once each; nothing before them is sent twice, nothing is lost."""
    fake = Replayed(cut=REPIN_OUTPUT.index("Invalid node name"))
    daemon, _ = migrating(fake, tmp_path)
    report = daemon.cycle()
    assert fake.alone == [["scontrol", *REPIN[4].split()], ["scontrol", "release", "14"],
                          ["scontrol", "requeuehold", "15"]]
    assert fake.texts[-1].splitlines() == UNPINNED
    check_attributed(daemon, report)
    daemon.close()
