"""The daemon's cycle on recorded and hand-built Slurm states: exact decisions and exact scontrol lines."""

from __future__ import annotations

import gc
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from compass_slurm import collector
from compass_slurm.cli import cli
from compass_slurm.config import Config
from compass_slurm.engine.model import Decision, Job
from compass_slurm.service.control import ControlServer, request
from compass_slurm.service import daemon as daemon_module
from compass_slurm.service.bookkeeping import CycleReport
from compass_slurm.service.daemon import Daemon
from compass_slurm.service.job_states import JobBook, JobState
from compass_slurm.service.leader import Leadership
from compass_slurm.service.publish import anchors_text
from compass_slurm.slurm import requests
from compass_slurm.slurm.backend import Asked, DryRunBackend, lease_argv, leave_argv, unpin_argv
from compass_slurm.slurm.cli_backend import CliBackend
from compass_slurm.slurm.errors import SlurmCommandError, SlurmError
from compass_slurm.slurm.snapshot import SnapshotBackend, save
from compass_slurm.slurm.state import Look, SlurmJob, SlurmNode, SlurmPartition, SlurmReservation, SlurmState
from compass_slurm.service.store import Store, StoreError
from compass_slurm.slurm.requests import Request
from compass_slurm.slurm.translate import Translator

RECORDED = Path(__file__).resolve().parents[1] / "data" / "slurm" / "mixed-16x8"


# -- building states --------------------------------------------------------------------------


def node(name: str, gpus: int = 8, state: str = "idle", flags: tuple[str, ...] = (), cpus_alloc: int = 0,
         mem_alloc: int = 0, gpu_type: str | None = None) -> SlurmNode:
    return SlurmNode(name, state, frozenset(flags), ("gpu",), gpus, 0, gpu_type, 32, cpus_alloc, 256000, mem_alloc)


def pending(job_id: str, *, gpus: int | None = None, per_node: int | None = None, nodes: int = 1,
            comment: str = "compass", priority: int = 100, reason: str = "BeginTime", **kw) -> SlurmJob:
    return SlurmJob(job_id, "alice", "PENDING", "gpu", num_nodes=nodes, gpus_per_job=gpus, gpus_per_node=per_node,
                    comment=comment, priority=priority, reason=reason, **{"memory_per_cpu_mb": 1000, **kw})


def running(job_id: str, alloc: dict[str, int], *, per_node: int | None = None, comment: str = "",
            user: str = "bob") -> SlurmJob:
    gpus_per_job = None if per_node else sum(alloc.values())
    return SlurmJob(job_id, user, "RUNNING", "gpu", nodes=tuple(alloc), gpus_alloc=alloc, num_nodes=len(alloc),
                    gpus_per_node=per_node, gpus_per_job=gpus_per_job, comment=comment)


def cluster(nodes: list[SlurmNode], jobs: list[SlurmJob], reservations: tuple = ()) -> SlurmState:
    part = SlurmPartition("gpu", tuple(n.name for n in nodes))
    return SlurmState(tuple(nodes), tuple(jobs), (part,), reservations, "22.05.8", 1.0e9)


def nodes(count: int, **kw) -> list[SlurmNode]:
    return [node(f"n{i}", **kw) for i in range(1, count + 1)]


def pins(daemon: Daemon) -> dict[str, tuple[str, ...]]:
    """The daemon's pins on jobs it let go (PINNED)."""
    return {j: r.pin for j, r in daemon.book.in_state(JobState.PINNED).items()}


def unheard(daemon: Daemon) -> set[str]:
    """The jobs whose logged place Slurm never heard, kept to check where Slurm starts them."""
    return {j for j, r in daemon.book.in_state(JobState.REPLANNED).items() if r.unheard is not None}


def recorded(**override: str) -> CliBackend:
    """The CLI backend answering from the recorded mixed-16x8 scenario; ``override`` replaces outputs by command."""
    answers = json.loads((RECORDED / "commands.json").read_text())

    def run(argv: list[str], timeout: float) -> tuple[int, str, str]:
        key = " ".join(argv)
        if key in override:
            return 0, override[key], ""
        return (0, (RECORDED / answers[key]).read_text(), "") if key in answers else (1, "", f"not recorded: {key}")

    return CliBackend(runner=run)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


COMPASS = [sys.executable, "-c", "from compass_slurm.cli import main; main()"]


def compass(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*COMPASS, *args], capture_output=True, text=True, timeout=60)


def daemon_for(state: SlurmState, tmp_path: Path, **config) -> tuple[Daemon, SnapshotBackend, Clock]:
    backend = SnapshotBackend(state, out=None)
    clock = Clock()
    cfg = Config(anchors=str(tmp_path / "anchors"), **config)
    return Daemon(cfg, backend, f"sqlite:///{tmp_path / 'log.db'}", clock=clock), backend, clock


def update(job_id: str, nodes: str, count: int, gpus: int, gpu: str = "gpu") -> list[str]:
    return ["scontrol", "update", f"JobId={job_id}", f"ReqNodeList={nodes}", f"NumNodes={count}", "TresPerJob=",
            f"TresPerNode=gres:{gpu}:{gpus}", "StartTime=now"]


# -- placing ----------------------------------------------------------------------------------


def test_decide_returns_the_decisions_and_tells_slurm_nothing_actuate_tells_it(tmp_path):
    state = cluster(nodes(2), [pending("10", gpus=4, priority=90), pending("11", per_node=8, priority=50)])
    daemon, backend, clock = daemon_for(state, tmp_path, policy="compass")
    daemon.leadership.step()  # as a cycle begins: this daemon leads
    translator = Translator(state, lease=daemon.config.lease)
    obs = translator.observe()
    report = CycleReport(1)
    policy, moves = daemon._sync(obs, translator, report, clock.now)
    decided = daemon._decide(obs, translator, policy, report, clock.now)
    assert [(p.job.id, d.nodes) for p, d in decided.decisions] == [("10", ("n1",)), ("11", ("n2",))]
    assert [d.action for d in report.decisions] == ["placed", "placed"] and backend.commands == []
    daemon._actuate(obs, policy, decided, moves, report, clock.now)
    assert backend.commands == [update("10", "n1", 1, 4), update("11", "n2", 1, 8)]
    assert set(daemon.book.placed) == {"10", "11"}


def test_managed_jobs_are_pinned_in_priority_order_with_exact_commands(tmp_path):
    state = cluster(nodes(4), [
        pending("11", gpus=1, priority=50),
        pending("10", gpus=4, priority=90),
        pending("12", per_node=8, nodes=2, priority=70),
        pending("13", per_node=2, nodes=2, priority=60),
        pending("14", gpus=2, comment="user note"),  # foreign: Slurm's own
        SlurmJob("15", "carol", "PENDING", "gpu", comment="compass"),  # no GPUs: passes through
    ])
    daemon, backend, _ = daemon_for(state, tmp_path, policy="compass")  # ABS strictly: 11 must wait
    report = daemon.cycle()
    assert [(d.job_id, d.request, d.gpus_per_node, d.action) for d in report.decisions] == [
        ("10", "1x4", {"n1": 4}, "placed"),
        ("12", "2x8", {"n2": 8, "n3": 8}, "placed"),
        ("13", "2x2", {"n1": 2, "n4": 2}, "placed"),
    ]  # 11 (1 GPU) finds no vacancy, pool or empty node under ABS: it waits, its lease renewed
    assert backend.commands == [
        update("10", "n1", 1, 4),
        update("12", "n[2-3]", 2, 8),
        update("13", "n[1,4]", 2, 2),
        ["scontrol", "update", "JobId=11", "StartTime=now+60"],
    ]
    assert report.sample is not None and report.sample.queue_len == 5 and report.sample.pending_gpus == 27
    with Store.open(daemon.db, create=False) as store:
        logged = store.decisions()
        assert [(d.job_id, d.nodes, d.policy, d.user) for d in logged] == [
            ("10", ("n1",), "compass", "alice"), ("12", ("n2", "n3"), "compass", "alice"),
            ("13", ("n1", "n4"), "compass", "alice"),
        ]
        assert logged[0].sif_before == 0.0 and logged[0].sif_after == 0.0  # one 4-GPU job: Phi* = 1, one partial
        assert len(store.samples()) == 1


def test_recorded_state_adopts_foreign_jobs_and_leaves_held_ones(tmp_path):
    backend = DryRunBackend(recorded(), out=None)
    daemon = Daemon(Config(anchors=str(tmp_path / "anchors")), backend, None)
    report = daemon.cycle()
    assert report.skipped is None
    assert sorted(report.adopted) == ["1", "2", "3", "4", "6_1", "6_2", "7"]
    view = {v.name: v for v in daemon.policy.view()}
    assert sorted((p.job, p.gpus, p.pinned) for p in view["node01"].instances) == [
        ("1", 2, True), ("2", 3, True), ("3", 3, False)]
    assert not view["node10"].available and not view["node11"].available and not view["node12"].available
    assert not view["node14"].available  # draining
    assert report.decisions == [] and "5" not in daemon.policy.cluster.jobs  # no GPUs: not ours
    assert backend.commands == []  # the held managed job 9 is not touched


def test_a_managed_job_that_does_not_fit_keeps_its_lease_on_the_recorded_state(tmp_path):
    # Job 10 (4 GPUs) requires node16, which a foreign 8-GPU job fills.
    state = recorded().read_state()
    state = replace(state, jobs=tuple(replace(j, comment="compass") if j.id == "10" else j for j in state.jobs))
    daemon, backend, _ = daemon_for(state, tmp_path, lease=45)
    report = daemon.cycle()
    assert report.decisions == []
    assert backend.commands == [["scontrol", "update", "JobId=10", "StartTime=now+45"]]
    # Without the node requirement it is placed, on a newly opened node.
    state = replace(state, jobs=tuple(replace(j, required_nodes=()) if j.id == "10" else j for j in state.jobs))
    backend.state = state
    report = daemon.cycle()
    assert [(d.job_id, d.gpus_per_node) for d in report.decisions] == [("10", {"node03": 4})]


def test_unavailable_nodes_and_short_cpu_or_memory_are_never_chosen(tmp_path):
    state = cluster(
        [node("n1", state="down"), node("n2", flags=("DRAIN",)), node("n3", flags=("RESERVED",)),
         node("n4", cpus_alloc=30), node("n5", mem_alloc=253000), node("n6", flags=("MAINTENANCE",)), node("n7"),
         node("n8")],
        [pending("20", gpus=2, cpus=4), pending("21", gpus=8, cpus=1)],
        reservations=(SlurmReservation("r", ("n8",), "", "", True),),
    )
    daemon, backend, _ = daemon_for(state, tmp_path)
    report = daemon.cycle()
    assert [(d.job_id, d.gpus_per_node) for d in report.decisions] == [("20", {"n7": 2}), ("21", {"n4": 8})]


def test_powered_down_idle_nodes_take_jobs_as_slurm_resumes_them_and_powering_ones_do_not(tmp_path):
    """With power saving, idle nodes power down (``idle~``) and Slurm resumes one for the job it allocates there:
    a job that fits only on them is placed there, not leased for ever; nodes powering up or down take none."""
    state = cluster([node("n1", flags=("POWERING_DOWN",)), node("n2", flags=("POWERING_UP",)),
                     node("n3", flags=("POWERED_DOWN",)), node("n4", flags=("POWERED_DOWN",))],
                    [pending("80", gpus=4), pending("81", gpus=8), pending("82", gpus=8)])
    daemon, backend, _ = daemon_for(state, tmp_path)
    report = daemon.cycle()
    assert [(d.job_id, d.gpus_per_node) for d in report.decisions] == [("80", {"n3": 4}), ("81", {"n4": 8})]
    assert lease_argv(["82"], 60) in backend.commands  # no room on the nodes that take work: it waits, leased


def test_no_job_goes_where_slurm_counts_gpus_of_a_job_not_read_yet(tmp_path):
    """n1 looks empty to the job read, but Slurm started a foreign 7-GPU job there before the node read: the
    2-GPU job is not pinned to the one GPU left; once read, the foreign job is adopted, and n1 is crowded no more."""
    full = running("80", {"n2": 8})
    state = cluster([replace(node("n1"), gpus_used=7), replace(node("n2"), gpus_used=8), node("n3", state="down")],
                    [full, pending("81", gpus=2)])
    daemon, backend, clock = daemon_for(state, tmp_path)
    report = daemon.cycle()
    assert report.decisions == [] and backend.commands == [lease_argv(["81"], 60)]  # it waits, leased
    assert daemon.observation.crowded == frozenset({"n1"})
    # Read next: the foreign job runs on n1, and job 80 has ended.
    backend.state = replace(state, nodes=(state.nodes[0], node("n2"), state.nodes[2]),
                            jobs=(running("82", {"n1": 7}), pending("81", gpus=2)))
    clock.now += 5
    report = daemon.cycle()
    assert report.adopted == ["82"] and daemon.observation.crowded == frozenset()
    assert [(d.job_id, d.gpus_per_node) for d in report.decisions] == [("81", {"n2": 2})]


def test_two_mem_per_gpu_jobs_decided_in_one_cycle_do_not_share_a_node_short_of_memory(tmp_path):
    # 2 x 100,000 MB each, on nodes of 256,000 MB: one per node, although both would fit one node's GPUs.
    state = cluster(nodes(2), [pending("50", gpus=2, memory_per_gpu_mb=100000, priority=90),
                               pending("51", gpus=2, memory_per_gpu_mb=100000, priority=80),
                               pending("52", gpus=2, priority=70)])  # 1,000 MB (--mem-per-cpu): fits beside either
    daemon, backend, clock = daemon_for(state, tmp_path)
    report = daemon.cycle()
    assert [(d.job_id, d.gpus_per_node) for d in report.decisions] == [
        ("50", {"n1": 2}), ("51", {"n2": 2}), ("52", {"n1": 2})]
    assert backend.commands == [update("50", "n1", 1, 2), update("51", "n2", 1, 2), update("52", "n1", 1, 2)]
    # Next cycle, pinned and not started yet: nothing is re-planned.
    pins = zip(state.jobs, ("n1", "n2", "n1"))
    backend.state = replace(state, jobs=tuple(replace(j, required_nodes=(n,)) for j, n in pins))
    clock.now += 10
    backend.commands.clear()
    assert daemon.cycle().decisions == [] and backend.commands == []


def test_jobs_asking_for_all_of_a_node_s_memory_go_only_where_none_is_taken(tmp_path):
    # --mem=0 (memory_per_node_mb 0): Slurm starts such a job only on a node with no memory allocated, so 60 and 61
    # go to the empty nodes, one each, although n1's free GPUs would fit them best; 62 (--mem-per-cpu) fits beside.
    whole = {"memory_per_cpu_mb": None, "memory_per_node_mb": 0}
    state = cluster([node("n1", mem_alloc=8000), node("n2"), node("n3")],
                    [running("1", {"n1": 2}), pending("60", gpus=1, priority=90, **whole),
                     pending("61", gpus=1, priority=80, **whole), pending("62", gpus=1, priority=70)])
    daemon, backend, clock = daemon_for(state, tmp_path)
    placed = {d.job_id: d.gpus_per_node for d in daemon.cycle().decisions}
    assert sorted(placed) == ["60", "61", "62"]
    assert {*placed["60"], *placed["61"]} == {"n2", "n3"} and placed["62"] == {"n1": 1}
    # Pinned and not started yet, they claim all of their nodes' memory: a third one has nowhere to go.
    pins = [replace(j, required_nodes=tuple(placed[j.id])) if j.id in placed else j for j in state.jobs]
    backend.state = replace(state, jobs=(*pins, pending("63", gpus=1, priority=60, **whole)))
    clock.now += 10
    backend.commands.clear()
    report = daemon.cycle()
    assert report.decisions == [] and not [c for c in backend.commands if any(a.startswith("ReqNodeList=") for a in c)]


def test_typed_gpu_requests_only_go_to_that_type(tmp_path):
    state = cluster([node("a1", gpu_type="v100"), node("b1", gpu_type="a100")],
                    [pending("30", gpus=2, gpu_type="a100")])
    daemon, backend, _ = daemon_for(state, tmp_path)
    daemon.cycle()
    assert backend.commands == [update("30", "b1", 1, 2, gpu="gpu:a100")]


def test_unplaceable_job_stays_pending_and_only_its_lease_is_renewed(tmp_path):
    state = cluster(nodes(2), [running("1", {"n1": 8}), running("2", {"n2": 4}), running("3", {"n2": 2}),
                               pending("40", gpus=4), pending("41", gpus=8), pending("42", gpus=2)])
    daemon, backend, clock = daemon_for(state, tmp_path, lease=60)
    report = daemon.cycle()
    assert [d.job_id for d in report.decisions] == ["42"]
    assert backend.commands == [update("42", "n2", 1, 2),
                                ["scontrol", "update", "JobId=40,41", "StartTime=now+60"]]
    started = running("42", {"n2": 2}, comment="compass")
    backend.state = replace(state, jobs=state.jobs[:3] + (started,) + state.jobs[3:5])
    clock.now += 20
    daemon.cycle()
    assert len(backend.commands) == 2  # renewed at most every half lease
    clock.now += 15
    daemon.cycle()
    assert backend.commands[2:] == [["scontrol", "update", "JobId=40,41", "StartTime=now+60"]]


def test_a_job_waiting_for_its_dependency_keeps_its_lease_and_is_placed_once_met(tmp_path):
    # Met after its lease ran out, Slurm would start it at once, wherever it likes.
    waiting = pending("60", gpus=2, reason="Dependency")
    state = cluster(nodes(1), [waiting, pending("61", gpus=2, reason="DependencyNeverSatisfied"),
                               pending("62", gpus=2, reason="Dependency", held=True)])  # held: the user's, not leased
    daemon, backend, clock = daemon_for(state, tmp_path, lease=60)
    report = daemon.cycle()
    assert report.decisions == [] and backend.commands == [["scontrol", "update", "JobId=60", "StartTime=now+60"]]
    assert daemon.observation.waiting == {"60": "waits for its dependency"}
    clock.now += 30
    daemon.cycle()
    assert backend.commands[1:] == [["scontrol", "update", "JobId=60", "StartTime=now+60"]]  # every half lease
    backend.state = replace(state, jobs=(replace(waiting, reason="BeginTime"),))  # met: its lease holds it
    clock.now += 5
    assert [(d.job_id, d.gpus_per_node) for d in daemon.cycle().decisions] == [("60", {"n1": 2})]
    assert backend.commands[2:] == [update("60", "n1", 1, 2)]


def test_one_job_slurm_refuses_to_lease_costs_only_its_own_lease(tmp_path):
    """scontrol renews every job of a list it can, names the ones it cannot and fails: the rest count as
    renewed, and are not sent again (tests/integration/test_batch_live.py sees Slurm renew them)."""
    class RefusingOne(SnapshotBackend):
        def scontrol(self, argv):
            super().scontrol(argv)
            if "41" in argv[2].removeprefix("JobId=").split(","):
                raise SlurmCommandError(argv, "exit 1: Job has already finished for job 41")

    state = cluster(nodes(1), [running("1", {"n1": 8}), pending("40", gpus=4), pending("41", gpus=8),
                               pending("42", gpus=2)])
    daemon = Daemon(Config(anchors="", lease=60), RefusingOne(state, out=None), None)
    report = daemon.cycle()
    lease = ["StartTime=now+60"]
    assert daemon.actuator.backend.commands == [["scontrol", "update", "JobId=40,41,42", *lease]]
    assert [(e.kind, e.message) for e in report.errors] == [
        ("lease", "job 41: Slurm refused its lease (Job has already finished)")]
    assert set(daemon.book.leases) == {"40", "42"}


def test_a_lease_failure_naming_no_job_renews_nothing_and_is_not_retried(tmp_path):
    class Unreachable(SnapshotBackend):
        def scontrol(self, argv):
            super().scontrol(argv)
            raise SlurmCommandError(argv, "exit 1: Unable to contact slurm controller (connect failure)")

    state = cluster(nodes(1), [running("1", {"n1": 8}), pending("40", gpus=4), pending("41", gpus=8)])
    daemon = Daemon(Config(anchors="", lease=60), Unreachable(state, out=None), None)
    report = daemon.cycle()
    assert daemon.actuator.backend.commands == [["scontrol", "update", "JobId=40,41", "StartTime=now+60"]]
    assert [e.kind for e in report.errors] == ["lease"] and daemon.book.leases == {}


def test_array_tasks_are_placed_one_by_one_and_those_past_the_throttle_keep_their_lease(tmp_path):
    array = pending("7_[0-3]", per_node=1, array_job="7", array_pending="0-3", array_throttle=2)
    daemon, backend, _ = daemon_for(cluster(nodes(1), [array]), tmp_path, lease=60)
    report = daemon.cycle()
    assert [(d.job_id, d.action) for d in report.decisions] == [("7_0", "placed"), ("7_1", "placed")]
    assert backend.commands == [update("7_0", "n1", 1, 1), update("7_1", "n1", 1, 1),
                                ["scontrol", "update", "JobId=7_2,7_3", "StartTime=now+60"]]


def test_lease_command_line_checks_ids():
    assert lease_argv(["7", "8_1"], 90) == ["scontrol", "update", "JobId=7,8_1", "StartTime=now+90"]
    with pytest.raises(SlurmError):
        lease_argv(["7 Priority=1"], 90)


def test_decisions_are_verified_replanned_and_forgotten(tmp_path):
    state = cluster(nodes(3), [pending("50", gpus=4)])
    daemon, backend, clock = daemon_for(state, tmp_path)
    # what `compass explain` shows: a job not opted in to migration goes where best fit would
    assert daemon.cycle().decisions[0].candidates == ("n1 (8 free)",)
    assert backend.commands == [update("50", "n1", 1, 4)]
    # Still pending next cycle and n1 fine: nothing new.
    clock.now += 10
    assert daemon.cycle().decisions == [] and len(backend.commands) == 1
    # n1 drains before the job started: re-planned elsewhere.
    backend.state = cluster([node("n1", flags=("DRAIN",)), node("n2"), node("n3")], [pending("50", gpus=4)])
    clock.now += 10
    report = daemon.cycle()
    assert [(d.action, d.gpus_per_node) for d in report.decisions] == [("replanned", {"n2": 4})]
    assert backend.commands[-1] == update("50", "n2", 1, 4)
    # It runs where decided: verified, kept, nothing sent.
    backend.state = cluster(nodes(3), [running("50", {"n2": 4}, comment="compass")])
    report = daemon.cycle()
    assert report.adopted == [] and report.decisions == [] and len(backend.commands) == 2
    assert daemon.policy.cluster.jobs["50"].gpus == 4
    # It ended: removed from the engine.
    backend.state = cluster(nodes(3), [])
    assert daemon.cycle().departed == ["50"] and daemon.policy.cluster.jobs == {}


def test_a_node_short_of_memory_re_plans_at_the_second_read_that_says_so(tmp_path):
    """Job 50 (200 GB) is pinned to n1. A read showing it pending while n1's allocation holds 200 GB is what a
    start between the job read and the node read looks like: the decision stands. Only a second such read
    (someone else's job holds the memory) re-plans it."""
    big = {"memory_per_cpu_mb": None, "memory_per_node_mb": 200000}
    daemon, backend, clock = daemon_for(cluster(nodes(2), [pending("50", gpus=2, **big)]), tmp_path)
    assert [d.gpus_per_node for d in daemon.cycle().decisions] == [{"n1": 2}]
    seen = cluster([node("n1", mem_alloc=200000), node("n2")], [pending("50", gpus=2, required_nodes=("n1",), **big)])
    backend.state = seen
    clock.now += 1
    assert daemon.cycle().decisions == [] and len(backend.commands) == 1
    clock.now += 1
    report = daemon.cycle()
    assert [(d.action, d.gpus_per_node) for d in report.decisions] == [("replanned", {"n2": 2})]
    assert backend.commands[-1] == update("50", "n2", 1, 2)


def test_a_re_plan_that_finds_no_room_is_not_tied_to_the_old_pin_and_is_logged_replanned_when_placed(tmp_path):
    """Job 50 is pinned to n1, then n1 is drained while n2 is full: re-planned, but nowhere to go. Its
    ReqNodeList still names n1, which is the daemon's pin, not the user's: once n2 has room the job goes
    there, logged as a re-plan (seen in the slurmctld fault test: a job logged placed twice)."""
    daemon, backend, clock = daemon_for(cluster(nodes(2), [pending("50", gpus=4)]), tmp_path)
    assert [d.gpus_per_node for d in daemon.cycle().decisions] == [{"n1": 4}]
    pinned = pending("50", gpus=4, required_nodes=("n1",))
    backend.state = cluster([node("n1", flags=("DRAIN",)), node("n2")], [pinned, running("70", {"n2": 8})])
    clock.now += 5
    assert daemon.cycle().decisions == []
    clock.now += 5
    assert daemon.cycle().decisions == []  # still no room: it waits, not tied to n1 meanwhile
    backend.state = cluster([node("n1", flags=("DRAIN",)), node("n2")], [pinned])
    clock.now += 5
    report = daemon.cycle()
    assert [(d.action, d.gpus_per_node) for d in report.decisions] == [("replanned", {"n2": 4})]
    with Store.open(daemon.db, create=False) as store:
        assert [d.action for d in store.decisions(job="50")] == ["placed", "replanned"]


def test_a_node_not_heard_from_since_slurmctld_restarted_keeps_its_decisions_until_stale_after(tmp_path):
    """A restarted slurmctld has not heard from n1 yet (state unknown). The job pinned there is re-planned neither
    for that nor for the CPUs and memory an unknown node does not offer, but once stale_after (30 s) has passed."""
    daemon, backend, clock = daemon_for(cluster(nodes(2), [pending("50", gpus=4)]), tmp_path)
    assert [d.gpus_per_node for d in daemon.cycle().decisions] == [{"n1": 4}]
    backend.state = cluster([node("n1", state="unknown"), node("n2")], [pending("50", gpus=4, required_nodes=("n1",))])
    for _ in range(3):
        clock.now += 5
        assert daemon.cycle().decisions == []
    clock.now += 20
    [decision] = daemon.cycle().decisions
    assert (decision.action, decision.gpus_per_node) == ("replanned", {"n2": 4})


def test_a_job_slurm_takes_pins_for_and_never_starts_is_left_to_it_after_three(tmp_path):
    """A maintenance reservation yet to begin (the daemon reads active ones only) keeps Slurm from starting job 50 on
    n1, and n1 stays the best fit: re-planned there every stale_after, the job would wait for ever. At the third
    decision in a row Slurm took and did not start, it is Slurm's, unpinned; a start resets the count."""
    daemon, backend, clock = daemon_for(cluster(nodes(2), [pending("50", gpus=4)]), tmp_path, lease=60)
    assert [d.gpus_per_node for d in daemon.cycle().decisions] == [{"n1": 4}]
    backend.state = cluster(nodes(2), [pending("50", gpus=4, required_nodes=("n1",),
                                               reason="ReqNodeNotAvail, Reserved for maintenance")])
    actions = []
    for _ in range(3):
        clock.now += 31
        actions += [(d.action, d.gpus_per_node) for d in daemon.cycle().decisions]
    assert actions == [("replanned", {"n1": 4}), ("replanned", {"n1": 4}), ("left", {})]
    assert backend.commands[-1] == let_go("50", 4, start=True)
    assert "Slurm has not started it in 30 s (ReqNodeNotAvail, Reserved for maintenance), 3 times in a row" in \
        daemon.book.get("50").why
    clock.now += 31
    assert daemon.cycle().decisions == [] and daemon.book.state("50") is JobState.LEFT and daemon.book.check() == []


def test_the_unstarted_count_ends_with_the_state_it_counts_in():
    book = JobBook()
    book.move("1", JobState.PLACED, decision=Decision("1", ("n1",), 4, "best fit"), job=Job("1", 1, 4))
    assert (book.unstarted("1", True), book.unstarted("1", True)) == (1, 2)
    book.move("1", JobState.PINNED, pin=("n1",))
    assert book.unstarted("1", True) == 3 and book.check() == []
    assert book.unstarted("1", False) == 0  # stale for its nodes: not in a row any more
    book.move("1", JobState.RUNNING, alloc={"n1": 4})
    book.move("1", None)
    book.move("1", JobState.PLACED, decision=Decision("1", ("n2",), 4, "best fit"), job=Job("1", 1, 4))
    assert book.unstarted("1", True) == 1


def test_a_job_slurm_started_elsewhere_is_adopted_there_and_the_log_says_so(tmp_path):
    daemon, backend, clock = daemon_for(cluster(nodes(3), [pending("50", gpus=4)]), tmp_path)
    assert [d.gpus_per_node for d in daemon.cycle().decisions] == [{"n1": 4}]
    # Slurm ran it on n3 anyway (e.g. an admin's update): the engine and the log follow Slurm.
    backend.state = cluster(nodes(3), [running("50", {"n3": 4}, comment="compass")])
    clock.now += 10
    report = daemon.cycle()
    assert [e.kind for e in report.errors] == ["mismatch"] and report.adopted == ["50"]
    assert [(d.action, d.gpus_per_node, d.from_nodes) for d in report.decisions] == [("adopted", {"n3": 4}, ("n1",))]
    with Store.open(daemon.db, create=False) as store:
        latest = store.decisions(job="50")[-1]
    assert (latest.action, latest.nodes) == ("adopted", ("n3",))
    assert len(backend.commands) == 1  # nothing told to Slurm: it is where Slurm put it
    clock.now += 10
    assert daemon.cycle().decisions == []


def test_a_restarted_daemon_takes_over_the_pins_of_the_one_before(tmp_path):
    state = cluster(nodes(3), [pending("50", gpus=4), pending("51", gpus=2)])
    first, backend, clock = daemon_for(state, tmp_path)
    first.cycle()
    first.close()
    assert backend.commands == [update("50", "n1", 1, 4), update("51", "n1", 1, 2)]
    # Killed before Slurm started them: the next daemon sees both pending on their pins,
    # plus one job pinned by a user's own --nodelist that it never decided.
    pinned = [pending("50", gpus=4, required_nodes=("n1",)), pending("51", gpus=2, required_nodes=("n1",)),
              pending("52", gpus=1, required_nodes=("n3",))]
    second, backend, clock = daemon_for(cluster(nodes(3), pinned), tmp_path)
    report = second.cycle()
    assert [(d.job_id, d.gpus_per_node) for d in report.decisions] == [("52", {"n3": 1})]
    assert backend.commands == [update("52", "n3", 1, 1)]
    assert set(second.placed) == {"50", "51", "52"}
    assert second.policy.view()[0].used == 6



def test_a_decided_job_slurm_holds_back_awhile_is_not_tied_to_its_pin_afterwards(tmp_path):
    daemon, backend, clock = daemon_for(cluster(nodes(3), [pending("50", gpus=8)]), tmp_path)
    daemon.cycle()
    assert backend.commands == [update("50", "n1", 1, 8)]
    # Before it starts, a QOS limit holds it back (another of the user's jobs started): let go, pin and all.
    held_back = pending("50", gpus=8, required_nodes=("n1",), reason="QOSMaxGRESPerUser")
    backend.state = cluster(nodes(3), [held_back])
    clock.now += 10
    assert daemon.cycle().departed == ["50"] and pins(daemon) == {"50": ("n1",)}
    # The limit clears while n1 runs other work: the pin is ours, so the job goes where there is room.
    backend.state = cluster(nodes(3), [running("60", {"n1": 8}), replace(held_back, reason="Resources")])
    clock.now += 10
    report = daemon.cycle()
    assert [(d.action, d.gpus_per_node) for d in report.decisions] == [("replanned", {"n2": 8})]
    assert backend.commands[-1] == update("50", "n2", 1, 8) and pins(daemon) == {}


def test_a_pin_someone_else_set_since_is_the_job_s_own(tmp_path):
    daemon, backend, clock = daemon_for(cluster(nodes(3), [pending("50", gpus=8)]), tmp_path)
    daemon.cycle()
    backend.state = cluster(nodes(3), [pending("50", gpus=8, required_nodes=("n1",), reason="QOSMaxGRESPerUser")])
    clock.now += 10
    daemon.cycle()
    # An admin points it at n3 meanwhile: that is not our pin, and the job stays where it was sent.
    backend.state = cluster(nodes(3), [running("60", {"n1": 8}), pending("50", gpus=8, required_nodes=("n3",))])
    clock.now += 10
    assert [d.gpus_per_node for d in daemon.cycle().decisions] == [{"n3": 8}] and pins(daemon) == {}


def test_a_restarted_daemon_knows_its_pins_on_jobs_slurm_holds_back(tmp_path):
    first, backend, clock = daemon_for(cluster(nodes(3), [pending("50", gpus=8)]), tmp_path)
    first.cycle()
    first.close()
    held_back = pending("50", gpus=8, required_nodes=("n1",), reason="QOSMaxGRESPerUser")
    second, backend, clock = daemon_for(cluster(nodes(3), [running("60", {"n1": 8}), held_back]), tmp_path)
    assert second.cycle().decisions == [] and pins(second) == {"50": ("n1",)}
    backend.state = cluster(nodes(3), [running("60", {"n1": 8}), replace(held_back, reason="Priority")])
    clock.now += 10
    assert [(d.action, d.gpus_per_node) for d in second.cycle().decisions] == [("replanned", {"n2": 8})]

class Refusing(SnapshotBackend):
    """Slurm refusing every scontrol line that holds ``token``, saying ``error``."""

    def __init__(self, state: SlurmState, token: str, error: str) -> None:
        super().__init__(state, out=None)
        self.token, self.error = token, error

    def scontrol(self, argv):
        super().scontrol(argv)
        if self.token in argv:
            raise SlurmCommandError(argv, f"exit 1: {self.error}")


def test_a_decision_slurm_refuses_is_undone_and_logged(tmp_path):
    state = cluster(nodes(2), [pending("60", gpus=8, priority=9), pending("61", gpus=8, priority=1)])
    daemon = Daemon(Config(anchors=""), Refusing(state, "JobId=60", "Invalid job id specified"),
                    f"sqlite:///{tmp_path / 'log.db'}")
    report = daemon.cycle()
    assert [(d.job_id, d.action, d.gpus_per_node) for d in report.decisions] == [
        ("60", "failed", {"n1": 8}), ("61", "placed", {"n2": 8})]
    assert "Invalid job id specified" in report.decisions[0].reason
    assert "60" not in daemon.policy.cluster.jobs and daemon.policy.cluster.used == [0, 8]
    with Store.open(daemon.db, create=False) as store:
        assert [d.action for d in store.decisions()] == ["failed", "placed"]
        # logged before Slurm heard it, then rewritten as refused: one record each, one cycle with the sample
        assert store.decisions() == [replace(d, time=logged.time) for d, logged in zip(report.decisions,
                                                                                       store.decisions())]
        assert {d.cycle for d in store.decisions()} == {s.cycle for s in store.samples()}


class Killed(BaseException):
    """The daemon's process killed (SIGKILL) while it runs a command: nothing after it happens."""


class KilledAtJob61(SnapshotBackend):
    """Killed as the daemon starts telling Slurm of job 61."""

    def scontrol(self, argv):
        if "JobId=61" in argv:
            raise Killed
        super().scontrol(argv)


def test_decisions_are_logged_before_slurm_hears_them_and_a_restart_re_plans_the_unheard(tmp_path):
    """Killed after telling Slurm of job 60 and before job 61: both decisions are in the log already, so no job
    runs where the log does not say; the restarted daemon decides 61 again, as a re-plan, not a second placing."""
    state = cluster(nodes(2), [pending("60", gpus=8, priority=9), pending("61", gpus=8, priority=1)])
    first = Daemon(Config(anchors=""), KilledAtJob61(state, out=None), f"sqlite:///{tmp_path / 'log.db'}")
    with pytest.raises(Killed):
        first.cycle()
    with Store.open(first.db, create=False) as store:
        assert [(d.job_id, d.action, d.gpus_per_node) for d in store.decisions()] == [
            ("60", "placed", {"n1": 8}), ("61", "placed", {"n2": 8})]
        assert len({d.cycle for d in store.decisions()}) == 1 and store.samples() == []  # the cycle never ended
    told = replace(state.job("60"), required_nodes=("n1",))
    second, backend, clock = daemon_for(cluster(nodes(2), [told, state.job("61")]), tmp_path)
    report = second.cycle()
    assert [(d.job_id, d.action, d.gpus_per_node) for d in report.decisions] == [("61", "replanned", {"n2": 8})]
    assert second.book.replanned() == set() and "60" in second.book.placed  # taken over, not decided again
    with Store.open(second.db, create=False) as store:
        assert [d.action for d in store.decisions(job="61")] == ["placed", "replanned"]
        assert [d.action for d in store.decisions(job="60")] == ["placed"]


def test_a_restart_logs_where_the_killed_cycle_s_jobs_run_when_not_where_logged(tmp_path):
    """Killed before telling Slurm of job 61, and away longer than its lease: Slurm started it by itself
    elsewhere. The restarted daemon logs where it runs (adopted, from the nodes logged); job 60 runs where
    logged and gets no record."""
    state = cluster(nodes(3), [pending("60", gpus=8, priority=9), pending("61", gpus=8, priority=1)])
    with pytest.raises(Killed):
        Daemon(Config(anchors=""), KilledAtJob61(state, out=None), f"sqlite:///{tmp_path / 'log.db'}").cycle()
    started = [running("60", {"n1": 8}, comment="compass"), running("61", {"n3": 8}, comment="compass")]
    second, backend, clock = daemon_for(cluster(nodes(3), started), tmp_path)
    report = second.cycle()
    assert [(d.job_id, d.action, d.nodes, d.gpus_per_node, d.from_nodes) for d in report.decisions] == [
        ("61", "adopted", ("n3",), {"n3": 8}, ("n2",))]
    with Store.open(second.db, create=False) as store:
        assert [(d.job_id, d.action) for d in store.decisions()] == [
            ("60", "placed"), ("61", "placed"), ("61", "adopted")]
    assert second.cycle().decisions == []  # logged once


def test_a_restart_logs_where_a_job_ran_that_finished_while_the_daemon_was_away(tmp_path):
    """Killed before telling Slurm of job 61's re-plan: Slurm ran it at its old pin, and it ended before the
    daemon came back. Slurm still lists it (MinJobAge): the restarted daemon logs where it ran."""
    state = cluster(nodes(3), [pending("60", gpus=8, priority=9), pending("61", gpus=4, priority=1)])
    with pytest.raises(Killed):
        Daemon(Config(anchors=""), KilledAtJob61(state, out=None), f"sqlite:///{tmp_path / 'log.db'}").cycle()
    ended = replace(running("61", {"n3": 4}, comment="compass"), state="COMPLETED")
    second, backend, clock = daemon_for(cluster(nodes(3), [running("60", {"n1": 8}, comment="compass"), ended]),
                                        tmp_path)
    [record] = second.cycle().decisions
    assert (record.job_id, record.action, record.nodes, record.gpus_per_node, record.from_nodes, record.request) == (
        "61", "adopted", ("n3",), {"n3": 4}, ("n2",), "1x4")


class ReadFailsOnce(SnapshotBackend):
    """slurmctld away (restarting) at the first read."""

    def __init__(self, state: SlurmState) -> None:
        super().__init__(state, out=None)
        self.failed = False

    def read_state(self) -> SlurmState:
        if not self.failed:
            self.failed = True
            raise SlurmError("squeue: error: Unable to contact slurm controller (connect failure)")
        return super().read_state()


def killed_telling_slurm_of_61(tmp_path: Path, count: int = 3) -> None:
    """A daemon placed jobs 60 (n1) and 61 (n2), logged both, told Slurm of 60 and was killed."""
    state = cluster(nodes(count), [pending("60", gpus=8, priority=9), pending("61", gpus=8, priority=1)])
    with pytest.raises(Killed):
        Daemon(Config(anchors=""), KilledAtJob61(state, out=None), f"sqlite:///{tmp_path / 'log.db'}").cycle()


def test_a_restart_whose_first_read_fails_still_logs_where_the_unheard_job_runs(tmp_path):
    """The restarted daemon's first cycle is skipped (slurmctld away) and logged, so the killed cycle is no longer
    the latest one; meanwhile job 61's lease ran out and Slurm started it on n3. Its record still comes."""
    killed_telling_slurm_of_61(tmp_path)
    started = [running("60", {"n1": 8}, comment="compass"), running("61", {"n3": 8}, comment="compass")]
    second = Daemon(Config(anchors=""), ReadFailsOnce(cluster(nodes(3), started)), f"sqlite:///{tmp_path / 'log.db'}")
    assert second.cycle().skipped
    report = second.cycle()
    assert [(d.job_id, d.action, d.nodes, d.from_nodes) for d in report.decisions] == [
        ("61", "adopted", ("n3",), ("n2",))]
    assert second.cycle().decisions == []


def test_an_unheard_job_slurm_starts_while_the_daemon_runs_is_logged_where_it_runs(tmp_path):
    """After the restart job 61 (logged on n2, never told) finds no room, so its record waits in the book (REPLANNED); Slurm
    then starts it on n3 by itself (its lease renewal failed, say). The daemon logs where it runs, once."""
    killed_telling_slurm_of_61(tmp_path)
    told = replace(pending("60", gpus=8, priority=9), required_nodes=("n1",))
    foreign = [running("70", {"n2": 8}), running("71", {"n3": 8})]
    second, backend, clock = daemon_for(cluster(nodes(3), [told, pending("61", gpus=8, priority=1), *foreign]),
                                        tmp_path)
    assert second.cycle().decisions == [] and unheard(second) == {"61"} and second.book.replanned() == {"61"}
    backend.state = cluster(nodes(3), [running("60", {"n1": 8}, comment="compass"), foreign[0],
                                       running("61", {"n3": 8}, comment="compass")])
    clock.now += 5
    assert [(d.job_id, d.action, d.nodes, d.from_nodes) for d in second.cycle().decisions] == [
        ("61", "adopted", ("n3",), ("n2",))]
    assert second.cycle().decisions == [] and unheard(second) == set()


def test_an_unheard_job_that_ended_unseen_is_logged_where_it_ran(tmp_path):
    """As above, but job 61 ran and ended between two reads: Slurm still lists it (MinJobAge)."""
    killed_telling_slurm_of_61(tmp_path)
    told = replace(pending("60", gpus=8, priority=9), required_nodes=("n1",))
    foreign = [running("70", {"n2": 8}), running("71", {"n3": 8})]
    second, backend, clock = daemon_for(cluster(nodes(3), [told, pending("61", gpus=8, priority=1), *foreign]),
                                        tmp_path)
    second.cycle()
    ended = replace(running("61", {"n3": 8}, comment="compass"), state="COMPLETED")
    backend.state = cluster(nodes(3), [running("60", {"n1": 8}, comment="compass"), foreign[0], ended])
    assert [(d.job_id, d.action, d.nodes, d.from_nodes) for d in second.cycle().decisions] == [
        ("61", "adopted", ("n3",), ("n2",))]


def test_an_unheard_decision_outlives_a_second_restart(tmp_path):
    """The first restart found no room for job 61 and was killed between cycles; the next one still knows that
    61's logged place was never told: its decision is a re-plan, and where Slurm ran it otherwise is logged."""
    killed_telling_slurm_of_61(tmp_path)
    told = replace(pending("60", gpus=8, priority=9), required_nodes=("n1",))
    foreign = [running("70", {"n2": 8}), running("71", {"n3": 8})]
    second, _, _ = daemon_for(cluster(nodes(3), [told, pending("61", gpus=8, priority=1), *foreign]), tmp_path)
    assert second.cycle().decisions == []
    third, _, _ = daemon_for(cluster(nodes(3), [told, pending("61", gpus=8, priority=1), foreign[0]]), tmp_path)
    assert [(d.job_id, d.action, d.nodes) for d in third.cycle().decisions] == [("61", "replanned", ("n3",))]
    fourth, _, _ = daemon_for(cluster(nodes(3), [running("60", {"n1": 8}, comment="compass"),
                                                 running("61", {"n2": 8}, comment="compass")]), tmp_path)
    assert [(d.job_id, d.action, d.nodes, d.from_nodes) for d in fourth.cycle().decisions] == [
        ("61", "adopted", ("n2",), ("n3",))]
    assert [d.action for d in fourth.recorder.store.decisions(job="61")] == ["placed", "replanned", "adopted"]


@pytest.mark.parametrize("state, refusal", [
    ("COMPLETED", "Job has already finished for job 60"),
    ("RUNNING", "Job is no longer pending execution for job 60"),
    ("RUNNING", "Invalid node name specified for job 60"),  # a running job's nodes may only shrink
])
def test_a_decision_refused_because_slurm_started_the_job_first_logs_where_it_ran(tmp_path, state, refusal):
    """Job 60's lease ran out between the daemon's read and its update: Slurm ran it on n2 and refuses the
    update. The log's latest record names n2, not the refused decision."""
    class StartedFirst(SnapshotBackend):
        def scontrol(self, argv):
            if "JobId=60" in argv and argv[1] == "update" and "StartTime=now" in argv:
                self.state = cluster(nodes(2), [replace(running("60", {"n2": 8}, comment="compass"), state=state)])
                raise SlurmCommandError(argv, f"exit 1: {refusal}")
            super().scontrol(argv)

    daemon = Daemon(Config(anchors=""), StartedFirst(cluster(nodes(2), [pending("60", gpus=8)]), out=None),
                    f"sqlite:///{tmp_path / 'log.db'}")
    report = daemon.cycle()
    assert [(d.action, d.nodes, d.from_nodes) for d in report.decisions] == [
        ("failed", ("n1",), ()), ("adopted", ("n2",), ("n1",))]
    with Store.open(daemon.db, create=False) as store:
        assert [(d.action, d.nodes) for d in store.decisions()] == [("failed", ("n1",)), ("adopted", ("n2",))]


def test_where_jobs_ran_is_one_squeue_of_every_state():
    seen = []

    def run(argv, timeout):
        seen.append(argv)
        return 0, "61|COMPLETED|node03\n62|RUNNING|node[04-05]\n63|PENDING|\n", ""

    assert CliBackend(runner=run).ran_on(["61", "62", "63"]) == {"61": ("node03",), "62": ("node04", "node05")}
    assert seen == [["squeue", "--noheader", "--states=all", "--jobs=61,62,63", "--format=%i|%T|%N"]]
    assert CliBackend(runner=lambda argv, timeout: (1, "", "slurm_load_jobs error: Invalid job id specified")
                      ).ran_on(["61"]) == {}
    with pytest.raises(SlurmError, match="cannot read"):
        CliBackend(runner=lambda argv, timeout: (0, "61 COMPLETED node03\n", "")).ran_on(["61"])


# -- migrations -------------------------------------------------------------------------------


def requeued(job: SlurmJob, state: str = "PENDING") -> SlurmJob:
    """``job`` as Slurm shows it after ``scontrol requeuehold``: held, completing on its nodes, then pending."""
    held = replace(job, state=state, held=True, reason="job_requeued_in_held_state")
    return held if state != "PENDING" else replace(held, nodes=(), gpus_alloc={}, required_nodes=job.nodes)


def on(job: SlurmJob, node: str) -> SlurmJob:
    """``job`` running again, on ``node``."""
    return replace(job, nodes=(node,), gpus_alloc={node: 1})


def test_compact_migrations_are_requeues_within_the_hourly_limit(tmp_path):
    # A full pool node and a partial one; when most of n1's jobs end, Compact drains it into n2.
    jobs = [running(str(i), {"n1": 1}, comment="compass:migratable") for i in range(1, 9)]
    jobs += [running(str(i), {"n2": 1}, comment="compass:migratable") for i in range(9, 12)]
    # compass compacts after every departure (the default, compass-easy, only while a job waits)
    daemon, backend, clock = daemon_for(cluster(nodes(3), jobs), tmp_path, policy="compass", migrations_per_hour=1)
    daemon.cycle()
    assert backend.commands == []
    backend.state = cluster(nodes(3), jobs[6:])  # 7 and 8 stay on n1
    report = daemon.cycle()
    assert report.departed == ["1", "2", "3", "4", "5", "6"]
    # requeued, and not waited for: re-pinned and released once a read shows it pending
    assert backend.commands == [["scontrol", "requeuehold", "7"]] and report.migrations == []
    assert daemon.book.state("7") is JobState.REQUEUED
    backend.state = cluster(nodes(3), [requeued(jobs[6], "COMPLETING"), *jobs[7:]])
    assert daemon.cycle().migrations == [] and len(backend.commands) == 1  # its steps still ending
    backend.state = cluster(nodes(3), [requeued(jobs[6]), *jobs[7:]])
    report = daemon.cycle()
    assert [(m.job_id, m.src, m.dst, m.status) for m in report.migrations] == [("7", "n1", "n2", "done")]
    assert backend.commands[1:] == [update("7", "n2", 1, 1), ["scontrol", "release", "7"]]
    assert daemon.book.state("7") is JobState.PLACED
    # The hour's budget is spent: job 8 waits.
    backend.state = cluster(nodes(3), [on(jobs[6], "n2"), *jobs[7:]])
    assert daemon.cycle().migrations == [] and len(backend.commands) == 3
    clock.now += 3601
    daemon.cycle()
    backend.state = cluster(nodes(3), [on(jobs[6], "n2"), requeued(jobs[7]), *jobs[8:]])
    report = daemon.cycle()
    assert [(m.job_id, m.dst) for m in report.migrations] == [("8", "n2")]
    with Store.open(daemon.db, create=False) as store:
        assert [(m.job_id, m.src, m.dst, m.status) for m in store.migrations()] == [
            ("7", "n1", "n2", "done"), ("8", "n1", "n2", "done")]
        # Each migration is also the job's latest decision: where it runs now, and where it came from.
        (moved,) = store.decisions(job="7")
        assert (moved.action, moved.nodes, moved.from_nodes, moved.gpus_per_node) == (
            "migrated", ("n2",), ("n1",), {"n2": 1})
        assert moved.reason == "compact: requeued" and moved.rule == "compact"
        assert [d.action for d in store.decisions(job="8")] == ["migrated"]


def test_adopted_jobs_are_moved_only_to_nodes_with_what_they_asked_for(tmp_path):
    """The daemon adopts every running job at its start: a job that asked for a feature (or a partition) over part
    of its group is never requeued onto a node without it (Slurm would not start it there)."""
    nvme = [replace(n, features=frozenset({"nvme"})) if n.name in ("n1", "n3") else n for n in nodes(3)]
    jobs = [running(str(i), {"n1": 1}, comment="compass:migratable") for i in range(1, 7)]
    jobs += [replace(running(str(i), {"n1": 1}, comment="compass:migratable"), constraint="nvme") for i in (7, 8)]
    jobs += [running(str(i), {"n2": 1}, comment="compass:migratable") for i in range(9, 12)]
    daemon, backend, _ = daemon_for(cluster(nvme, jobs), tmp_path, policy="compass", migrations_per_hour=12)
    daemon.cycle()
    backend.state = cluster(nvme, jobs[6:])  # 7 and 8 stay on n1: n2 (the fuller pool node) lacks nvme
    daemon.cycle()
    assert not [c for c in backend.commands if c[1] == "requeuehold"]
    # without the constraint, Compact drains n1 into n2
    plain = [replace(j, constraint="") for j in jobs]
    daemon, backend, _ = daemon_for(cluster(nvme, plain), tmp_path / "plain", policy="compass",
                                    migrations_per_hour=12)
    daemon.cycle()
    backend.state = cluster(nvme, plain[6:])
    daemon.cycle()
    assert [c for c in backend.commands if c[1] == "requeuehold"] == [["scontrol", "requeuehold", "7,8"]]


def test_a_running_job_is_kept_off_a_node_that_lost_a_feature_it_asked_for(tmp_path):
    """Every node had nvme when the jobs were adopted; an admin takes it off n2 while they run. Jobs 7 and 8 asked for
    it: they are no longer moved onto n2 (Slurm would not start them there), as at a daemon's start."""
    jobs = [running(str(i), {"n1": 1}, comment="compass:migratable") for i in range(1, 7)]
    jobs += [replace(running(str(i), {"n1": 1}, comment="compass:migratable"), constraint="nvme") for i in (7, 8)]
    jobs += [running(str(i), {"n2": 1}, comment="compass:migratable") for i in range(9, 12)]
    nvme = [replace(n, features=frozenset({"nvme"})) for n in nodes(3)]
    daemon, backend, _ = daemon_for(cluster(nvme, jobs), tmp_path, policy="compass", migrations_per_hour=12)
    daemon.cycle()
    lost = [replace(n, features=frozenset()) if n.name == "n2" else n for n in nvme]
    backend.state = cluster(lost, jobs[6:])
    daemon.cycle()
    assert not [c for c in backend.commands if c[1] == "requeuehold"]
    # the same with n2 keeping it: Compact drains n1 into n2
    daemon, backend, _ = daemon_for(cluster(nvme, jobs), tmp_path / "kept", policy="compass", migrations_per_hour=12)
    daemon.cycle()
    backend.state = cluster(nvme, jobs[6:])
    daemon.cycle()
    assert [c for c in backend.commands if c[1] == "requeuehold"] == [["scontrol", "requeuehold", "7,8"]]


#: an admin's change of one node's features (``scontrol update NodeName=.. Features=``): none, one nobody asks for,
#: nvme taken off
FEATURE_CHANGES = {"same": frozenset({"nvme"}), "unrelated": frozenset({"nvme", "ib"}), "lost": frozenset()}


def changed_on(node_name: str, nodes: list[SlurmNode], change: str) -> list[SlurmNode]:
    """``nodes`` with ``node_name``'s features as ``FEATURE_CHANGES[change]``."""
    return [replace(n, features=FEATURE_CHANGES[change]) if n.name == node_name else n for n in nodes]


@pytest.mark.parametrize("change", FEATURE_CHANGES)
def test_a_placed_job_is_not_re_pointed_to_a_node_that_lost_a_feature_it_asked_for(tmp_path, change):
    """Jobs 7 and 8 ask for nvme and are placed on n1, pending there; then n1's other jobs end and n2's features
    change. A pin on n2 without nvme would be one Slurm holds (BadConstraints): they are not re-pointed there, as they
    are while n2 keeps nvme, whatever else changed (their own pin does not confine them)."""
    nvme = [replace(n, features=frozenset({"nvme"})) for n in nodes(3)]
    jobs = [running(str(i), {"n1": 1}, comment="compass:migratable") for i in range(1, 7)]
    jobs += [running(str(i), {"n2": 1}) for i in range(20, 28)] + [running(str(i), {"n3": 1}) for i in range(30, 38)]
    waiting = [pending(str(i), gpus=1, constraint="nvme", comment="compass:migratable") for i in (7, 8)]
    daemon, backend, _ = daemon_for(cluster(nvme, jobs + waiting), tmp_path, policy="compass", migrations_per_hour=12)
    daemon.cycle()
    assert backend.commands == [update("7", "n1", 1, 1), update("8", "n1", 1, 1)]
    placed = [replace(j, required_nodes=("n1",), reason="Resources") for j in waiting]
    backend.state = cluster(changed_on("n2", nvme, change), jobs[11:] + placed)  # 25-27 stay on n2
    report = daemon.cycle()
    lost = change == "lost"
    repointed = [] if lost else [update("7", "n2", 1, 1), update("8", "n2", 1, 1)]
    assert backend.commands[2:] == repointed and report.errors == []
    assert [(d.job_id, d.nodes, d.reason) for d in report.decisions] == [
        (j, ("n2",), "compact: re-pointed before it started") for j in ("7", "8") if not lost]


@pytest.mark.parametrize("change", FEATURE_CHANGES)
def test_a_requeued_job_is_not_moved_again_to_a_node_that_lost_a_feature_it_asked_for(tmp_path, change):
    """Jobs 7 and 8 ask for nvme and are requeued from n1 to n2; before Slurm shows them pending, n2's jobs end and
    n3's features change. Moved again onto n3 without nvme they would be re-pinned where Slurm holds them: they go to
    n2 as planned; while n3 keeps nvme, whatever else changed, they are moved on to n3."""
    nvme = [replace(n, features=frozenset({"nvme"})) for n in nodes(3)]
    jobs = [running(str(i), {"n1": 1}, comment="compass:migratable") for i in range(1, 7)]
    mine = [replace(running(str(i), {"n1": 1}, comment="compass:migratable"), constraint="nvme") for i in (7, 8)]
    n2 = [running(str(i), {"n2": 1}, comment="compass:migratable") for i in range(9, 12)]
    n3 = [running(str(i), {"n3": 1}, comment="compass:migratable") for i in range(30, 38)]
    daemon, backend, clock = daemon_for(cluster(nvme, jobs + mine + n2 + n3), tmp_path, policy="compass",
                                        migrations_per_hour=12)
    daemon.cycle()
    backend.state = cluster(nvme, mine + n2 + n3)
    daemon.cycle()
    assert backend.commands == [["scontrol", "requeuehold", "7,8"]]
    clock.now += 3601  # a new hour's budget
    backend.state = cluster(changed_on("n3", nvme, change), [requeued(j) for j in mine] + n3[5:])
    report = daemon.cycle()
    to = "n2" if change == "lost" else "n3"
    assert backend.commands[1:] == [update("7", to, 1, 1), ["scontrol", "release", "7"],
                                    update("8", to, 1, 1), ["scontrol", "release", "8"]]
    assert report.errors == [] and {daemon.book.state(j) for j in ("7", "8")} == {JobState.PLACED}


def test_an_unlimited_budget_migrates_all_that_compact_plans(tmp_path):
    # "unlimited" is a budget of None all through the cycle: sync's Compact and the drain spend from it.
    jobs = [running(str(i), {"n1": 1}, comment="compass:migratable") for i in range(1, 9)]
    jobs += [running(str(i), {"n2": 1}, comment="compass:migratable") for i in range(9, 12)]
    daemon, backend, _ = daemon_for(cluster(nodes(3), jobs), tmp_path, policy="compass",
                                    migrations_per_hour="unlimited")
    assert daemon.cycle().budget is None
    backend.state = cluster(nodes(3), jobs[6:])  # 7 and 8 stay on n1
    report = daemon.cycle()
    assert report.errors == [] and report.budget is None
    assert backend.commands == [["scontrol", "requeuehold", "7,8"]]  # both by one command
    backend.state = cluster(nodes(3), [requeued(jobs[6]), requeued(jobs[7]), *jobs[8:]])
    report = daemon.cycle()
    assert sorted((m.job_id, m.src, m.dst, m.status) for m in report.migrations) == [
        ("7", "n1", "n2", "done"), ("8", "n1", "n2", "done")]


def test_a_burst_cap_spreads_the_hours_budget_over_5_minute_windows(tmp_path):
    # The same drain as above under an hour of plenty: the cap lets one requeue through per 5 minutes.
    jobs = [running(str(i), {"n1": 1}, comment="compass:migratable") for i in range(1, 9)]
    jobs += [running(str(i), {"n2": 1}, comment="compass:migratable") for i in range(9, 12)]
    daemon, backend, clock = daemon_for(cluster(nodes(3), jobs), tmp_path, policy="compass",
                                        migrations_per_hour=100, migrations_burst=1)
    assert daemon.cycle().budget == 1 and (daemon.rate.per_hour, daemon.rate.per_burst) == (100, 1)
    backend.state = cluster(nodes(3), jobs[6:])  # 7 and 8 stay on n1
    report = daemon.cycle()
    requeues = [argv for argv in backend.commands if argv[1] == "requeuehold"]
    assert requeues == [["scontrol", "requeuehold", "7"]]
    backend.state = cluster(nodes(3), [requeued(jobs[6]), *jobs[7:]])
    assert [(m.job_id, m.dst, m.status) for m in daemon.cycle().migrations] == [("7", "n2", "done")]
    backend.state = cluster(nodes(3), [on(jobs[6], "n2"), *jobs[7:]])
    clock.now += 299  # still inside the 5 minutes of job 7's requeue: 8 waits though the hour has 99 left
    report = daemon.cycle()
    assert report.migrations == [] and report.budget == 0
    clock.now += 2
    daemon.cycle()
    assert backend.commands[-1] == ["scontrol", "requeuehold", "8"]
    assert daemon.rate.budget(clock.now) == 0 and len(daemon.rate.times) == 2  # the hour counted both


def test_a_burst_share_follows_the_per_node_budget(tmp_path):
    daemon, backend, _ = daemon_for(cluster(nodes(20), []), tmp_path, migrations_burst="10%")
    assert Config().migrations_burst == "10%"
    assert daemon.cycle().budget == 2 and (daemon.rate.per_hour, daemon.rate.per_burst) == (20, 2)
    backend.state = cluster(nodes(40), [])
    assert daemon.cycle().budget == 4


def test_the_default_budget_is_one_migration_per_managed_gpu_node_and_follows_the_nodes(tmp_path):
    assert (Config().migrations_per_hour, Config().migrations_burst) == ("per-node", "10%")
    capped, _, _ = daemon_for(cluster(nodes(3), []), tmp_path)
    assert capped.cycle().budget == 2  # the default burst cap: ceil(10% of 12) in any 5 minutes
    (tmp_path / "hourly").mkdir()
    daemon, backend, _ = daemon_for(cluster(nodes(3), []), tmp_path / "hourly", migrations_burst="unlimited")
    assert daemon.cycle().budget == 12  # at least 12
    backend.state = cluster(nodes(20), [])
    assert daemon.cycle().budget == 20 and daemon.rate.per_hour == 20
    backend.state = cluster(nodes(16), [])  # four nodes left
    assert daemon.cycle().budget == 16
    (tmp_path / "fixed").mkdir()
    fixed, _, _ = daemon_for(cluster(nodes(20), []), tmp_path / "fixed", migrations_per_hour=12,
                          migrations_burst="unlimited")
    assert fixed.cycle().budget == 12


def test_pinned_jobs_never_migrate(tmp_path):
    jobs = [running(str(i), {"n1": 1}, comment="compass") for i in range(1, 3)]
    jobs += [running(str(i), {"n2": 1}) for i in range(3, 9)]
    daemon, backend, _ = daemon_for(cluster(nodes(2), jobs), tmp_path)
    report = daemon.cycle()
    assert report.migrations == [] and backend.commands == []
    assert report.sample.partial == 2


# -- failures ---------------------------------------------------------------------------------


def test_unparseable_slurm_output_skips_the_cycle_and_is_recorded(tmp_path):
    # an unreadable JSON document falls back to text (tests/slurm); here the text is unreadable too
    backend = recorded(**{"squeue --json": '{"jobs": [{"job_id": "x"}]}',
                          "scontrol show job --details --oneliner": "garbage\n"})
    daemon = Daemon(Config(anchors=str(tmp_path / "anchors")), backend, f"sqlite:///{tmp_path / 'log.db'}")
    report = daemon.cycle()
    assert report.skipped is not None and "scontrol show job" in report.skipped
    assert daemon.policy is None and not (tmp_path / "anchors").exists()
    with Store.open(daemon.db, create=False) as store:
        errors = store.errors()
        assert [e.kind for e in errors] == ["slurm"] and "scontrol show job" in errors[0].message
        assert store.samples() == []


def test_a_broken_decision_log_does_not_stop_placement(tmp_path, caplog):
    db = tmp_path / "log.db"
    db.write_bytes(b"this is no database" * 100)
    backend = SnapshotBackend(cluster(nodes(1), [pending("70", gpus=1)]), out=None)
    daemon = Daemon(Config(anchors=""), backend, f"sqlite:///{db}")
    daemon.cycle()
    assert backend.commands == [update("70", "n1", 1, 1)]
    assert daemon.store_errors == 1 and "DECISION LOG NOT WRITTEN" in caplog.text
    backend.state = cluster(nodes(1), [pending("71", gpus=1)])
    daemon.cycle()
    assert backend.commands[-1] == update("71", "n1", 1, 1) and daemon.store_errors == 2


def test_the_anchors_file_is_replaced_atomically_and_parses(tmp_path):
    state = cluster(nodes(2), [running("1", {"n1": 3}), running("2", {"n1": 1})])
    daemon, _, clock = daemon_for(state, tmp_path)
    daemon.cycle()
    text = (tmp_path / "anchors").read_text()
    lines = text.splitlines()
    assert lines[0] == f"# compass-anchors v1 generated={int(clock.now)} policy={Config.policy} cycle=1"
    anchors = dict(line.split() for line in lines[1:])
    assert list(anchors) == [str(g) for g in range(1, 9)]
    assert anchors["4"] == "n1" and anchors["8"] == "n2"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".anchors")] == []
    assert anchors_text(daemon.policy, 1, clock.now) == text


# -- the command line -------------------------------------------------------------------------


def test_daemon_once_on_a_snapshot_prints_the_commands_and_logs_dry_run(tmp_path):
    snap = tmp_path / "state.json"
    save(cluster(nodes(3), [pending("80", per_node=8, nodes=2), pending("81", gpus=1)]), snap)
    db = f"sqlite:///{tmp_path / 'log.db'}"
    done = compass("daemon", "--snapshot", str(snap), "--once", "--db", db, "--policy", "best-fit")
    assert done.returncode == 0, done.stderr
    assert "dry-run job 80 (2x8, alice) on n1:8,n2:8" in done.stderr
    assert done.stdout.splitlines() == [
        "scontrol update JobId=80 ReqNodeList=n[1-2] NumNodes=2 TresPerJob= TresPerNode=gres:gpu:8 StartTime=now",
        "scontrol update JobId=81 ReqNodeList=n3 NumNodes=1 TresPerJob= TresPerNode=gres:gpu:1 StartTime=now",
    ]
    listed = CliRunner().invoke(cli, ["decisions", "--json", "--db", db])
    docs = json.loads(listed.stdout)
    assert [(d["job_id"], d["action"], d["policy"], d["gpus_per_node"]) for d in docs] == [
        ("80", "dry-run", "best-fit", {"n1": 8, "n2": 8}), ("81", "dry-run", "best-fit", {"n3": 1})]


def test_daemon_once_whose_log_cannot_be_written_exits_1(tmp_path):
    """A running daemon goes on past a log it cannot write; one cycle run by hand to try a set-up says it failed."""
    snap = tmp_path / "state.json"
    save(cluster(nodes(2), [pending("80", gpus=1)]), snap)
    (tmp_path / "file").write_text("a file where the log's directory should be")
    done = compass("daemon", "--snapshot", str(snap), "--once", "--db", f"sqlite:///{tmp_path / 'file' / 'log.db'}")
    assert done.returncode == 1, done.stderr
    assert "DECISION LOG NOT WRITTEN" in done.stderr and "Traceback" not in done.stderr
    directory = tmp_path / "dir.db"  # the log refuses (root writes any file), its spool beside it takes the cycle
    directory.mkdir()
    done = compass("daemon", "--snapshot", str(snap), "--once", "--db", f"sqlite:///{directory}")
    assert done.returncode == 1 and "DECISION LOG NOT WRITTEN" in done.stderr, done.stderr
    assert "spooled" in done.stderr.split("DECISION LOG NOT WRITTEN")[1]
    good = compass("daemon", "--snapshot", str(snap), "--once", "--db", f"sqlite:///{tmp_path / 'log.db'}")
    assert good.returncode == 0, good.stderr


def test_daemon_bad_input_is_a_clear_error(tmp_path):
    runner = CliRunner()
    bad = tmp_path / "garbage.json"
    bad.write_text("{nope")
    done = runner.invoke(cli, ["daemon", "--snapshot", str(bad), "--once"])
    assert done.exit_code == 2 and "not JSON" in done.stderr and "Traceback" not in done.output
    bad.write_bytes(b"\xff\xfe")
    done = runner.invoke(cli, ["daemon", "--snapshot", str(bad), "--once"])
    assert done.exit_code == 2 and done.stderr.startswith(f"compass: error: {bad}: not a snapshot: not UTF-8 text")
    save(cluster(nodes(2), []), bad)
    doc = json.loads(bad.read_text())
    doc["state"]["nodes"][0]["gpus"] = None
    bad.write_text(json.dumps(doc))
    done = runner.invoke(cli, ["daemon", "--snapshot", str(bad), "--once"])
    assert done.exit_code == 2
    assert done.stderr.startswith(f"compass: error: {bad}: state.nodes[0].gpus: expected a whole number, got null")
    done = runner.invoke(cli, ["daemon", "--policy", "nonesuch", "--once"])
    assert done.exit_code == 2 and "unknown policy 'nonesuch'" in done.stderr
    config = tmp_path / "compass.toml"
    config.write_text('[compass]\nqueue = "easy"\n')
    done = runner.invoke(cli, ["daemon", "--config", str(config), "--once"])
    assert done.exit_code == 2 and "Traceback" not in done.output
    assert f"queue = 'easy' (from {config}) is not one of fifo, backfill" in done.stderr
    assert len(done.stderr.strip().splitlines()) <= 2  # the error line (and its hint)


# -- the loop, the control socket, signals ----------------------------------------------------


def cycles_by(daemon: Daemon, count: int, deadline: float) -> None:
    """Wait (until ``deadline``, a monotonic time) for the daemon's loop to have run ``count`` cycles."""
    while daemon.cycles < count and time.monotonic() < deadline:
        time.sleep(0.01)


def test_a_poke_runs_a_cycle_early_and_the_socket_answers(tmp_path):
    state = cluster(nodes(2), [pending("90", gpus=2), pending("91", per_node=9)])
    daemon, backend, _ = daemon_for(state, tmp_path, metrics_textfile=str(tmp_path / "compass.prom"))
    path = tmp_path / "run" / "compass.sock"
    with ControlServer(path, daemon.handlers()):
        loop = threading.Thread(target=daemon.run, args=(60.0,))
        loop.start()
        try:
            deadline = time.monotonic() + 10
            cycles_by(daemon, 1, deadline)
            assert request(path, {"op": "submitted", "job": "90"}, 2.0) == {"ok": True, "cycle": 1}
            cycles_by(daemon, 2, deadline)
            assert daemon.cycles == 2  # woken long before the 60 s interval
            reply = request(path, {"op": "ping"}, 2.0)
            leader = reply.pop("leader")
            assert reply.pop("looks") == daemon.looks
            assert reply == {"ok": True, "policy": Config.policy, "cycle": 2, "role": "leader", "held_unknown": []}
            assert (leader["host"], leader["pid"], leader["token"]) == (socket.gethostname(), os.getpid(), 1)
            assert request(path, {"op": "job", "job": "90"}, 2.0) == {
                "ok": True, "job": "90", "state": "placed", "gpus_per_node": {"n1": 2},
                "rule": "may not move: best raw fit"}
            assert request(path, {"op": "job", "job": "91"}, 2.0)["state"] == "left to Slurm"
        finally:
            daemon.shutdown()
            loop.join(10)
    assert not loop.is_alive()
    metrics = (tmp_path / "compass.prom").read_text()
    assert "compass_cycles_total 2" in metrics and "compass_decisions_total 1" in metrics


def test_sigterm_stops_the_daemon_cleanly(tmp_path):
    snap = tmp_path / "state.json"
    save(cluster(nodes(2), [pending("95", gpus=1)]), snap)
    proc = subprocess.Popen([*COMPASS, "daemon", "--snapshot", str(snap), "--interval", "0.2", "--db",
                             f"sqlite:///{tmp_path / 'log.db'}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "COMPASS_MIN_CYCLE_SPACING": "0"})  # cycles 0.2 s apart
    deadline = time.monotonic() + 60  # a few cycles, however slow the machine is to start the process

    def cycled() -> int:
        try:
            with Store.open(f"sqlite:///{tmp_path / 'log.db'}", create=False) as store:
                return len(store.samples())
        except StoreError:  # not created yet
            return 0

    while cycled() < 3 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "stopped after" in err and "Traceback" not in err
    assert out.splitlines()[0].startswith("scontrol update JobId=95 ReqNodeList=n1")
    assert cycled() >= 3


def test_a_migration_refused_half_way_releases_the_job(tmp_path):
    class RefusingUpdates(SnapshotBackend):
        def scontrol(self, argv):
            super().scontrol(argv)
            if argv[1] == "update":
                raise SlurmCommandError(argv, "exit 1: Invalid node name specified")

    jobs = [running(str(i), {"n1": 1}, comment="compass:migratable") for i in range(1, 9)]
    jobs += [running(str(i), {"n2": 1}, comment="compass:migratable") for i in range(9, 12)]
    backend = RefusingUpdates(cluster(nodes(3), jobs), out=None)
    daemon = Daemon(Config(anchors="", policy="compass", migrations_per_hour=1), backend, f"sqlite:///{tmp_path}/l.db")
    daemon.cycle()  # Compact on departures
    backend.state = cluster(nodes(3), jobs[6:])
    report = daemon.cycle()
    # the move was a decision before Slurm heard of it
    assert [(d.job_id, d.action, d.nodes, d.from_nodes) for d in report.decisions] == [
        ("7", "migrated", ("n2",), ("n1",))]
    backend.state = cluster(nodes(3), [requeued(jobs[6]), *jobs[7:]])
    report = daemon.cycle()
    assert [(m.job_id, m.status) for m in report.migrations] == [("7", "failed")]
    # its node list cleared after the release, so that it is placed afresh (here refused: Slurm has started it)
    assert backend.commands == [["scontrol", "requeuehold", "7"], update("7", "n2", 1, 1),
                                ["scontrol", "release", "7"], let_go("7")]
    assert [e.kind for e in report.errors] == ["migration"] and daemon.book.state("7") is None
    # refused, its record says so (and the job's place is unchanged)
    with Store.open(daemon.db, create=False) as store:
        (record,) = store.decisions(job="7")
    assert (record.action, record.nodes, record.from_nodes) == ("failed", ("n2",), ("n1",))
    assert record.reason.startswith("compact; Slurm refused: ")
    # Next cycle Slurm shows it pending, released: the engine forgets where it moved it, and places it afresh.
    backend.state = cluster(nodes(3), [replace(requeued(jobs[6]), held=False, reason="Priority"), *jobs[7:]])
    daemon.cycle()
    assert "7" not in daemon.policy.cluster.jobs or daemon.book.state("7") is JobState.PLACED


@pytest.mark.parametrize("then", ["cycle", "stop"])
def test_a_job_a_failed_migration_left_held_is_released_once_pending(tmp_path, then):
    """A daemon without a log whose GPU nodes change while a requeued job is still completing cannot follow the
    requeue in its rebuilt state: it releases the job where it is, which comes too early for Slurm, the hold lands
    later. The daemon releases the job the first time Slurm shows it pending and held, or as it stops."""
    class SlowRequeue(SnapshotBackend):
        def scontrol(self, argv):
            super().scontrol(argv)
            if argv[1] == "release" and self.refuse_release:
                raise SlurmCommandError(argv, "exit 1: Job is not pending")

    jobs = [running(str(i), {"n1": 1}, comment="compass:migratable") for i in range(1, 9)]
    jobs += [running(str(i), {"n2": 1}, comment="compass:migratable") for i in range(9, 12)]
    backend = SlowRequeue(cluster(nodes(3), jobs), out=None)
    backend.refuse_release = True
    daemon = Daemon(Config(anchors="", policy="compass", migrations_per_hour=1), backend, None)
    daemon.cycle()  # Compact on departures
    backend.state = cluster(nodes(3), jobs[6:])
    daemon.cycle()
    backend.state = cluster(nodes(3), [requeued(jobs[6], "COMPLETING"), *jobs[7:]])
    assert daemon.cycle().migrations == [] and daemon.book.state("7") is JobState.REQUEUED  # waits, however long
    backend.state = cluster(nodes(4), [requeued(jobs[6], "COMPLETING"), *jobs[7:]])
    report = daemon.cycle()
    assert [(m.job_id, m.status) for m in report.migrations] == [("7", "failed")]
    assert "lead ran out, or its log could not say" in report.errors[0].message
    assert backend.commands == [["scontrol", "requeuehold", "7"], let_go("7"), ["scontrol", "release", "7"]]
    assert daemon.book.release_due == {"7"}
    held = replace(pending("7", gpus=1, comment="compass:migratable"), reason="JobHeldUser", held=True)
    backend.state = cluster(nodes(3), [held, *jobs[7:]])
    backend.refuse_release = False
    backend.commands.clear()
    if then == "cycle":
        daemon.cycle()
        assert daemon.book.release_due == set()
    else:
        daemon.close()
    assert backend.commands[:2] == [let_go("7"), ["scontrol", "release", "7"]]  # not tied to where it ran


def requeuing(tmp_path: Path) -> tuple[Daemon, SnapshotBackend, list[SlurmJob]]:
    """The drain above, one move an hour: job 7 requeued from n1 into n2 by the second cycle."""
    jobs = [running(str(i), {"n1": 1}, comment="compass:migratable") for i in range(1, 9)]
    jobs += [running(str(i), {"n2": 1}, comment="compass:migratable") for i in range(9, 12)]
    daemon, backend, _ = daemon_for(cluster(nodes(3), jobs), tmp_path, policy="compass", migrations_per_hour=1)
    daemon.cycle()
    backend.state = cluster(nodes(3), jobs[6:])
    daemon.cycle()
    assert backend.commands == [["scontrol", "requeuehold", "7"]]
    return daemon, backend, jobs


def test_a_requeued_job_someone_released_first_is_no_longer_followed(tmp_path):
    daemon, backend, jobs = requeuing(tmp_path)
    backend.state = cluster(nodes(3), [on(jobs[6], "n3"), *jobs[7:]])  # released by an admin, started again by Slurm
    report = daemon.cycle()
    assert [(m.job_id, m.status) for m in report.migrations] == [("7", "failed")]
    assert backend.commands == [["scontrol", "requeuehold", "7"]] and daemon.book.state("7") is None
    daemon.cycle()  # where Slurm runs it, the engine follows
    assert daemon.book.state("7") is JobState.RUNNING and {v.name: v.used for v in daemon.policy.view()}["n3"] == 1


@pytest.mark.parametrize("completing", [True, False])
def test_a_daemon_restarted_between_the_requeue_and_the_re_pin_takes_the_requeue_over(tmp_path, completing):
    daemon, backend, jobs = requeuing(tmp_path)
    killed(daemon)
    backend.state = cluster(nodes(3), [requeued(jobs[6], "COMPLETING" if completing else "PENDING"), *jobs[7:]])
    fresh = Daemon(daemon.config, backend, daemon.db, clock=Clock())
    report = fresh.cycle()  # held by the requeue logged: followed again, on the nodes logged
    assert fresh.book.state("7") is (JobState.REQUEUED if completing else JobState.PLACED)
    assert [d for d in report.decisions if d.job_id == "7"] == [] and per_node_of(fresh, "7") == {"n2": 1}
    if completing:
        backend.state = cluster(nodes(3), [requeued(jobs[6]), *jobs[7:]])
        report = fresh.cycle()
    assert [argv for argv in backend.commands[1:] if "7" in argv[2]] == [update("7", "n2", 1, 1),
                                                                        ["scontrol", "release", "7"]]
    assert [(m.src, m.dst, m.status) for m in report.migrations if m.job_id == "7"] == [("n1", "n2", "done")]
    fresh.close()


def test_a_requeue_taken_over_keeps_the_job_to_the_nodes_with_what_it_asked_for(tmp_path):
    """Job 7 (-C x: n1 and n2 have it, n3 not) requeued from n1 into n2; a daemon restarted before the re-pin takes
    it over. Once n2 holds 7 alone and n3 is the fuller pool node, Compact would drain n2 into n3: not job 7."""
    with_x = [replace(n, features=frozenset({"x"})) if n.name != "n3" else n for n in nodes(3)]
    jobs = [running(str(i), {"n1": 1}, comment="compass:migratable") for i in range(1, 9)]
    jobs[6] = replace(jobs[6], constraint="x")
    jobs += [running(str(i), {"n2": 1}, comment="compass:migratable") for i in range(9, 12)]
    daemon, backend, _ = daemon_for(cluster(with_x, jobs), tmp_path, policy="compass", migrations_per_hour=12)
    daemon.cycle()
    backend.state = cluster(with_x, [jobs[6]] + jobs[8:])  # 7 stays on n1 (8 ends too)
    daemon.cycle()
    assert backend.commands == [["scontrol", "requeuehold", "7"]]
    killed(daemon)
    backend.state = cluster(with_x, [requeued(jobs[6]), *jobs[8:]])
    clock = Clock()
    fresh = Daemon(daemon.config, backend, daemon.db, clock=clock)
    fresh.cycle()  # re-pinned to n2 and released
    on_n3 = [running(str(i), {"n3": 1}, comment="compass:migratable") for i in range(20, 26)]
    backend.state = cluster(with_x, [on(jobs[6], "n2"), *on_n3])  # 9-11 ended: 7 alone on n2
    clock.now += 3601
    fresh.cycle()
    fresh.cycle()
    assert [argv for argv in backend.commands if argv[1] == "requeuehold" and "7" in argv[2].split(",")] == [
        ["scontrol", "requeuehold", "7"]]  # the first move only
    fresh.close()


def test_a_requeue_taken_over_where_its_nodes_are_gone_is_released(tmp_path):
    daemon, backend, jobs = requeuing(tmp_path)
    killed(daemon)
    backend.state = cluster([node("n1"), node("n3")], [requeued(jobs[6]), *jobs[7:]])  # n2 removed meanwhile
    fresh = Daemon(daemon.config, backend, daemon.db, clock=Clock())
    report = fresh.cycle()
    # released, its node list cleared, and decided afresh once pending (its next decision logged "replanned")
    assert backend.commands[1:] == [let_go("7"), ["scontrol", "release", "7"]]
    assert fresh.book.state("7") is JobState.REPLANNED
    assert [(m.job_id, m.src, m.dst, m.status) for m in report.migrations] == [("7", "n1", "n2", "failed")]
    fresh.close()
    with Store.open(daemon.db, create=False) as store:
        (record,) = store.decisions(job="7")
    assert record.action == "failed" and "nodes logged cannot take it" in record.reason


@pytest.mark.parametrize("log", ["readable", "unreadable"])
def test_a_release_a_failed_migration_owes_outlives_a_restart(tmp_path, log):
    """Released where it is (its new nodes gone) while Slurm still completes it, so the release is refused and owed;
    the daemon is killed before Slurm shows the job pending. No record of the log says the release is owed: the
    daemon's note does, and the next daemon releases the job, whether its log can be read or not."""
    daemon, backend, jobs = requeuing(tmp_path)
    killed(daemon)
    record = backend.scontrol

    def scontrol(argv: list[str]) -> None:
        record(argv)
        if argv[1] == "release" and backend.state.jobs[0].state == "COMPLETING":
            raise SlurmCommandError(argv, "exit 1: Job is not pending")

    backend.scontrol = scontrol
    without_n2 = [node("n1"), node("n3")]
    backend.state = cluster(without_n2, [requeued(jobs[6], "COMPLETING"), *jobs[7:]])
    second = Daemon(daemon.config, backend, daemon.db, clock=Clock())
    second.cycle()
    assert second.book.release_due == {"7"}
    killed(second)
    backend.state = cluster(without_n2, [requeued(jobs[6]), *jobs[7:]])
    backend.commands.clear()
    third = Daemon(daemon.config, backend, daemon.db, clock=Clock())
    with unreadable(tmp_path / "log.db") if log == "unreadable" else nullcontext():
        third.cycle()
    assert commands_of(backend, "7") == [let_go("7"), ["scontrol", "release", "7"]] and third.book.release_due == set()
    assert third.note.unsure == []
    third.close()


def test_a_daemon_that_stops_releases_its_requeued_jobs(tmp_path):
    daemon, backend, _ = requeuing(tmp_path)
    daemon.close()
    # not tied to where it ran: its node list cleared, Slurm places it afresh
    assert backend.commands[1:] == [let_go("7"), ["scontrol", "release", "7"]] and daemon.book.state("7") is None
    with Store.open(daemon.db, create=False) as store:
        (record,) = store.decisions(job="7")
    assert (record.action, record.reason) == ("failed", "compact; the daemon stopped before it was re-pinned")


def let_go(job_id: str, gpus: int | None = None, nodes: str = "1", start: bool = False) -> list[str]:
    """The line that clears a pin of the daemon's (and puts back a ``--gpus`` request the pin changed): a stopping
    daemon's, or with ``start`` a job's left to Slurm (its lease lifted too)."""
    restore = [f"NumNodes={nodes}", "TresPerNode=", f"TresPerJob=gres:gpu:{gpus}"] if gpus else []
    return ["scontrol", "update", f"JobId={job_id}", "ReqNodeList=", *restore, *(["StartTime=now"] if start else [])]


def test_a_daemon_that_stops_lets_go_of_the_jobs_it_pinned_and_the_next_one_finds_them(tmp_path):
    """A pin never expires: one left on a job no daemon re-plans ties it to nodes that may never free. A daemon that
    stops clears the pins of its jobs not started yet and puts back what each pin changed, one line each, logged
    ``left``; a daemon started later adopts one Slurm started meanwhile where it runs and places the other again."""
    daemon, backend, _ = daemon_for(cluster(nodes(4), [pending("5", gpus=9), pending("6", gpus=1)]), tmp_path)
    daemon.cycle()
    placed = len(backend.commands)
    daemon.stop.set()
    daemon.run(1)
    assert backend.commands[placed:] == [let_go("5", 9, "1-2"), let_go("6", 1)]
    with Store.open(daemon.db, create=False) as store:
        assert [(d.job_id, d.action, d.reason) for d in store.decisions()][2:] == [
            (j, "left", "the daemon stopped: its pin lifted, left to Slurm") for j in ("5", "6")]
    backend.state = cluster(nodes(4), [running("5", {"n3": 8, "n4": 1}), pending("6", gpus=1)])
    report = Daemon(daemon.config, backend, daemon.db, clock=Clock()).cycle()
    assert [(d.job_id, d.action) for d in report.decisions] == [("5", "adopted"), ("6", "replanned")]


def test_a_stopping_daemon_clears_the_pin_alone_where_slurm_will_not_take_the_request_back(tmp_path):
    """Slurm refuses the update whole for a job that started since the last read (an empty node list for a running
    job: the request is never put back on it, which would shrink it), and nothing more is sent; where it refuses the
    request put back on a pending job, the pin is cleared alone, and the error logged."""
    class Refusing(SnapshotBackend):
        def scontrol(self, argv):
            super().scontrol(argv)
            if argv[2] == "JobId=6" and "ReqNodeList=" in argv:
                raise SlurmCommandError(argv, "exit 1: Invalid node name specified")
            if argv[2] == "JobId=5" and argv[3:] != ["ReqNodeList="] and "ReqNodeList=" in argv:
                raise SlurmCommandError(argv, "exit 1: Requested node configuration is not available")

    daemon, _, _ = daemon_for(cluster(nodes(4), [pending("5", gpus=9), pending("6", gpus=1)]), tmp_path)
    daemon.backend = daemon.actuator.backend = backend = Refusing(daemon.backend.state, out=None)
    daemon.cycle()
    daemon.stop.set()
    daemon.run(1)
    assert backend.commands[2:] == [let_go("5", 9, "1-2"), let_go("6", 1), let_go("5")]
    with Store.open(daemon.db, create=False) as store:
        assert [(d.job_id, d.action) for d in store.decisions()][2:] == [("5", "left")]
        assert [e.message for e in store.errors()] == [
            f"job 5: its pin cleared, its request not put back ({' '.join(let_go('5', 9, '1-2'))}: exit 1: Requested "
            "node configuration is not available)"]


def test_a_stopping_daemon_clears_a_first_pin_slurm_did_not_answer_and_nothing_in_a_dry_run(tmp_path):
    """An unanswered pin may have reached Slurm (the job waits to be decided again, its request kept): cleared too.
    A dry run made no pin: it clears none and logs nothing."""
    backend = Refusing(cluster(nodes(2), [pending("90", gpus=8)]), "ReqNodeList=n1", "no answer within 10 s")
    daemon = Daemon(Config(anchors="", lease=60), backend, f"sqlite:///{tmp_path / 'log.db'}")
    daemon.cycle()
    assert daemon.book.state("90") is JobState.WAITING
    daemon.stop.set()
    daemon.run(1)
    assert backend.commands[-1] == let_go("90", 8)
    dry = SnapshotBackend(cluster(nodes(2), [pending("91", gpus=1)]), out=None)
    daemon = Daemon(Config(anchors=""), dry, f"sqlite:///{tmp_path / 'dry.db'}", dry_run=True)
    daemon.cycle()
    daemon.stop.set()
    daemon.run(1)
    assert [argv[3] for argv in dry.commands] == ["ReqNodeList=n1"]
    with Store.open(daemon.db, create=False) as store:
        assert [d.action for d in store.decisions()] == ["dry-run"]


@pytest.mark.parametrize(("how", "cleared"), [("a standby is there", False), ("a standby stopped first", True),
                                              ("one cycle (--once)", False)])
def test_pins_stay_for_a_standby_and_after_one_cycle(tmp_path, how, cleared):
    """A standby takes the pins over as its own (as a restarted daemon does); one that stopped has said so, and the
    leader stopping after it clears them. ``compass daemon --once`` is one cycle of placement, not a daemon
    stopping."""
    daemon, backend, _ = daemon_for(cluster(nodes(2), [pending("5", gpus=1)]), tmp_path)
    daemon.cycle()
    if how == "one cycle (--once)":
        daemon.close()
    else:
        standby = Leadership(daemon.db, 10.0, host="ctl2", pid=2)
        standby.step()
        assert not standby.leads
        if how == "a standby stopped first":
            standby.close()
        daemon.stop.set()
        daemon.run(1)
        standby.close()
    assert [argv[3] for argv in backend.commands] == ["ReqNodeList=n1", *["ReqNodeList="] * cleared]


def re_pinned_release_refused(tmp_path: Path) -> tuple[Daemon, SnapshotBackend, list[SlurmJob]]:
    """``requeuing``, then the cycle that re-pins job 7 on n2 while Slurm refuses its release once."""
    daemon, backend, jobs = requeuing(tmp_path)
    refusals, record = ["Resource temporarily unavailable"], backend.scontrol

    def scontrol(argv: list[str]) -> None:
        record(argv)
        if argv[1] == "release" and refusals:
            raise SlurmCommandError(argv, f"exit 1: {refusals.pop()}")

    backend.scontrol = scontrol
    backend.state = cluster(nodes(3), [requeued(jobs[6]), *jobs[7:]])
    report = daemon.cycle()
    assert report.migrations == [] and [e.kind for e in report.errors] == ["migration"]
    return daemon, backend, jobs


def test_a_re_pin_slurm_takes_whose_release_it_refuses_is_done_once_the_release_is_taken(tmp_path):
    """Slurm takes the re-pin and refuses the release: the job is held on its new nodes, so its migration stands
    (never logged failed) and is done in the cycle whose release Slurm takes; the policy holds it there meanwhile."""
    daemon, backend, jobs = re_pinned_release_refused(tmp_path)
    assert backend.commands[1:] == [update("7", "n2", 1, 1), ["scontrol", "release", "7"]]
    assert daemon.book.state("7") is JobState.PLACED and daemon.book.release_due == {"7"}
    backend.state = cluster(nodes(3), [replace(requeued(jobs[6]), required_nodes=("n2",)), *jobs[7:]])
    report = daemon.cycle()  # held on n2 still: the policy keeps it there, and the release owed is taken
    assert backend.commands[3:] == [["scontrol", "release", "7"]] and per_node_of(daemon, "7") == {"n2": 1}
    assert [(m.src, m.dst, m.status) for m in report.migrations] == [("n1", "n2", "done")]
    assert daemon.book.release_due == set() and daemon.book.state("7") is JobState.PLACED
    backend.state = cluster(nodes(3), [on(jobs[6], "n2"), *jobs[7:]])
    report = daemon.cycle()
    assert report.migrations == [] and daemon.book.state("7") is JobState.RUNNING
    with Store.open(daemon.db, create=False) as store:
        assert [(d.action, d.nodes) for d in store.decisions(job="7")] == [("migrated", ("n2",))]
        assert [m.status for m in store.migrations(job="7")] == ["done"]


def test_a_re_pin_whose_release_was_refused_is_taken_over_as_its_requeue_after_a_restart(tmp_path):
    """Re-pinned, its release refused, the daemon killed: the next one takes the requeue over from its record (not
    as a failed migration's owed release) and logs the migration done once Slurm takes the release."""
    daemon, backend, jobs = re_pinned_release_refused(tmp_path)
    assert daemon.book.release_due == {"7"}
    killed(daemon)
    backend.state = cluster(nodes(3), [replace(requeued(jobs[6]), required_nodes=("n2",)), *jobs[7:]])
    fresh = Daemon(daemon.config, backend, daemon.db, clock=Clock())
    report = fresh.cycle()
    assert [(m.src, m.dst, m.status) for m in report.migrations if m.job_id == "7"] == [("n1", "n2", "done")]
    assert commands_of(backend, "7")[-1] == ["scontrol", "release", "7"] and fresh.book.release_due == set()
    fresh.close()


def commands_of(backend: SnapshotBackend, job_id: str) -> list[list[str]]:
    """The scontrol lines sent about ``job_id`` (a fresh daemon's budget may move other jobs too)."""
    return [argv for argv in backend.commands if argv[2].removeprefix("JobId=") == job_id]


@contextmanager
def unreadable(db: Path) -> Iterator[None]:
    """The SQLite log a file that fails every read and write (the daemon starts, leads alone and spools)."""
    aside = db.with_name("aside.db")
    db.rename(aside)
    db.write_text("not a database")
    try:
        yield
    finally:
        db.unlink()
        aside.rename(db)


def test_a_restart_whose_log_cannot_be_read_takes_its_requeues_over_from_its_own_note(tmp_path):
    """Killed between the requeue and the re-pin, restarted while its log cannot be read: the daemon's note of its
    requeues says job 7 is one, re-pinned and released as planned; job 20, held by an admin, is not its own."""
    daemon, backend, jobs = requeuing(tmp_path)
    killed(daemon)
    admin_held = replace(pending("20", gpus=1, comment="compass:migratable"), held=True, reason="JobHeldAdmin")
    backend.state = cluster(nodes(3), [requeued(jobs[6]), admin_held, *jobs[7:]])
    with unreadable(tmp_path / "log.db"):
        fresh = Daemon(daemon.config, backend, daemon.db, clock=Clock())
        report = fresh.cycle()
    assert commands_of(backend, "7")[1:] == [update("7", "n2", 1, 1), ["scontrol", "release", "7"]]
    assert commands_of(backend, "20") == []
    assert [(m.src, m.dst, m.status) for m in report.migrations if m.job_id == "7"] == [("n1", "n2", "done")]
    assert fresh.book.state("7") is JobState.PLACED and fresh.note.unsure == []
    assert [e.kind for e in report.errors] == ["log"]
    fresh.close()


@pytest.mark.parametrize("log", ["readable", "unreadable"])
def test_a_restart_counts_the_migrations_of_the_hour_before_against_its_budget(tmp_path, log):
    """One move an hour, made by the daemon before (job 7): the restarted one (its log read, or else its own note)
    completes that move and makes no other (job 8 would be next) until it is an hour old; a restart is no new
    budget."""
    daemon, backend, jobs = requeuing(tmp_path)
    killed(daemon)
    backend.state = cluster(nodes(3), [requeued(jobs[6]), *jobs[7:]])
    clock = Clock()
    if log == "readable":  # the clock that stamped the move: the log's own (the wall's), else the daemon's in its note
        clock.now = time.time()
    with unreadable(tmp_path / "log.db") if log == "unreadable" else nullcontext():
        fresh = Daemon(daemon.config, backend, daemon.db, clock=clock)
        fresh.cycle()
    assert [argv for argv in backend.commands if argv[1] == "requeuehold"] == [["scontrol", "requeuehold", "7"]]
    assert fresh.rate.budget(clock()) == 0
    clock.now += 3601
    assert fresh.rate.budget(clock()) == 1
    fresh.close()


def test_with_neither_its_log_nor_its_note_a_restart_leaves_held_jobs_held_and_names_them(tmp_path):
    """No note to say (gone, or never written): job 7 may be an admin's hold, so it stays held, named in the log,
    by ping (for doctor) and loudly, until the log can be read again: then it is re-pinned and released."""
    daemon, backend, jobs = requeuing(tmp_path)
    killed(daemon)
    daemon.note.path.unlink()
    backend.state = cluster(nodes(3), [requeued(jobs[6]), *jobs[7:]])
    with unreadable(tmp_path / "log.db"):
        fresh = Daemon(daemon.config, backend, daemon.db, clock=Clock())
        report = fresh.cycle()
        fresh.cycle()
        assert commands_of(backend, "7")[1:] == [] and fresh.handlers()["ping"]({}, None)["held_unknown"] == ["7"]
    (error,) = [e for e in report.errors if e.kind == "requeue"]
    assert error.message.startswith("held jobs 7 may be requeues of this daemon's") and "keeps no note" in error.message
    report = fresh.cycle()  # the log back: it says job 7 is a requeue of the daemon's
    assert commands_of(backend, "7")[1:] == [update("7", "n2", 1, 1), ["scontrol", "release", "7"]]
    assert [m.status for m in report.migrations if m.job_id == "7"] == ["done"] and fresh.note.unsure == []
    fresh.close()


def test_a_requeue_the_daemon_cannot_note_is_not_made(tmp_path):
    jobs = [running(str(i), {"n1": 1}, comment="compass:migratable") for i in range(1, 9)]
    jobs += [running(str(i), {"n2": 1}, comment="compass:migratable") for i in range(9, 12)]
    daemon, backend, _ = daemon_for(cluster(nodes(3), jobs), tmp_path, policy="compass", migrations_per_hour=1)
    daemon.note.path.mkdir(parents=True)  # a note that cannot be written
    daemon.cycle()
    backend.state = cluster(nodes(3), jobs[6:])
    report = daemon.cycle()
    assert backend.commands == [] and [(m.job_id, m.status) for m in report.migrations] == [("7", "failed")]
    assert [d.action for d in report.decisions] == ["failed"] and "not requeued: the daemon's note" in (
        report.decisions[0].reason)


def killed(daemon: Daemon) -> None:
    """``daemon`` gone as if killed: it tells Slurm nothing more (it resigns, so that the next one leads at once)."""
    daemon.leadership.close()
    daemon.recorder.close()


def per_node_of(daemon: Daemon, job_id: str) -> dict[str, int]:
    from compass_slurm.service.bookkeeping import per_node

    return per_node(daemon.policy, job_id)


@pytest.mark.parametrize("kw, expected", [
    ({"gpus_per_job": 3}, Request(1, 3, False)),  # --gpus=3
    ({"gpus_per_node": 8, "num_nodes": 2}, Request(2, 8, False)),  # --nodes=2 --gpus-per-node=8
    ({"gpus_per_node": 2, "num_nodes": 3}, Request(3, 2, True)),  # fixed node count, less than a node each
    ({"gpus_per_job": 16, "num_nodes": 2}, Request(2, 8, False)),  # --gpus=16 (Slurm counts 2 nodes)
    ({"gpus_per_job": 24}, Request(3, 8, False)),  # a multiple of G without a node count
    ({"gpus_per_job": 4, "num_nodes": 2}, Request(2, 2, True)),  # --nodes=2 --gpus=4
    ({"gpus_per_task": 1, "tasks": 2}, Request(1, 2, False)),  # --ntasks=2 --gpus-per-task=1
    ({"gpus_per_job": 12}, Request(2, 6, True)),  # 12 GPUs on 8-GPU nodes: 2 x 6, as the simulator runs it
    ({"gpus_per_node": 9}, None),  # larger than any node
    ({}, None),  # no GPUs
])
def test_slurm_requests_map_to_instances(kw, expected):
    assert requests.request(SlurmJob("1", "u", "PENDING", "gpu", **kw), 8) == expected


class Watched(SnapshotBackend):
    """A snapshot whose cheap look between cycles finds ``looks`` pending and ``holding`` on nodes (None: no look)."""

    def __init__(self, state: SlurmState, looks: frozenset[str] | None, holding: frozenset[str] = frozenset(),
                 comments: bool = True) -> None:
        super().__init__(state, out=None)
        self.looks, self.holding, self.comments = looks, holding, comments

    def look(self) -> Look | None:
        return None if self.looks is None else Look(self.looks, self.holding, self.comments)


def test_a_new_managed_pending_job_found_between_cycles_starts_one(tmp_path):
    state = cluster(nodes(2), [pending("90", gpus=2), pending("91", gpus=1, comment=""), running("5", {"n2": 1})])
    backend = Watched(state, frozenset({"90"}), frozenset({"5"}))
    daemon = Daemon(Config(anchors="", watch=0.01), backend, None)
    daemon.cycle()
    assert daemon.seen_pending == {"90"}  # managed and pending: the unmanaged 91 is no one's business
    assert not daemon._news()
    backend.looks = frozenset({"90", "93"})  # a hook-marked job nobody told the daemon about
    assert daemon._news() and not daemon._news()
    backend.looks = None
    assert not daemon._news() and not daemon.watching  # no cheap look: the interval alone


def test_a_look_of_states_alone_wakes_a_cycle_for_a_job_the_last_one_did_not_read(tmp_path):
    """From 24.11 on the look has no comments (squeue --only-job-state), so every pending job is in it: one the last
    cycle read without the marker is no news, one it did not read is news once, marked or not."""
    state = cluster(nodes(2), [pending("90", gpus=2), pending("91", gpus=1, comment=""), running("5", {"n2": 1})])
    backend = Watched(state, frozenset({"90", "91"}), frozenset({"5"}), comments=False)
    daemon = Daemon(Config(anchors="", watch=0.01), backend, None)
    assert daemon._news() == 2  # no cycle yet: nothing is known
    daemon.cycle()
    assert not daemon._news()  # 91 was read unmarked
    backend.looks = frozenset({"90", "91", "93"})  # 93: submitted since, marked or not (the look cannot tell)
    assert daemon._news() == 1 and not daemon._news()
    daemon.cycle()  # the read does not show 93 (an id the look spells otherwise): it never wakes a cycle again
    assert not daemon._news() and not daemon._news()


def test_a_gpu_job_that_left_its_nodes_between_cycles_starts_one(tmp_path):
    """Its GPUs are free: the queue need not wait for the next interval to have them."""
    state = cluster(nodes(2), [pending("90", per_node=8, nodes=2), running("5", {"n2": 1}), running("6", {"n1": 1})])
    backend = Watched(state, frozenset({"90"}), frozenset({"5", "6", "7"}))
    daemon = Daemon(Config(anchors="", watch=0.01), backend, None)
    daemon.cycle()
    assert daemon.seen_running == {"5", "6"}
    assert not daemon._news()
    backend.holding = frozenset({"5", "6"})  # 7 is no GPU job of the daemon's: no cycle for it
    assert not daemon._news()
    backend.holding = frozenset({"6", "8"})  # 5 ended (8: a job that started meanwhile)
    assert daemon._news() and not daemon._news()  # told once
    backend.holding = frozenset({"5-0"})  # 6 left too
    assert daemon._news()
    daemon.cycle()  # the read still shows 5 and 6 running: the look spells their ids otherwise
    assert not daemon._news() and not daemon._news()  # which never wakes a cycle


def test_the_watch_wakes_the_loop_long_before_the_interval(tmp_path):
    backend = Watched(cluster(nodes(2), [pending("90", gpus=2)]), frozenset({"90"}))
    daemon = Daemon(Config(anchors="", watch=0.02), backend, None)
    loop = threading.Thread(target=daemon.run, args=(60.0,))
    loop.start()
    try:
        deadline = time.monotonic() + 10
        cycles_by(daemon, 1, deadline)
        backend.looks = frozenset({"90", "94"})
        cycles_by(daemon, 2, deadline)
        assert daemon.cycles == 2
    finally:
        daemon.shutdown()
        loop.join(10)


def test_a_12_gpu_job_is_told_to_slurm_as_two_nodes_of_six(tmp_path):
    daemon, backend, _ = daemon_for(cluster(nodes(3), [pending("80", gpus=12)]), tmp_path)
    (decision,) = daemon.cycle().decisions
    assert decision.request == "2x6" and sorted(decision.gpus_per_node.values()) == [6, 6]
    (command,) = backend.commands
    assert "NumNodes=2" in command and "TresPerNode=gres:gpu:6" in command


@pytest.mark.parametrize(("slack", "order"), [(0.0, ["10", "11"]), (1.0, ["11", "10"])])
def test_the_daemon_s_scheduler_takes_the_slack_setting(tmp_path, slack, order):
    # n1 holds a 4-GPU job: the whole-node 10 fits on n2. With slack, the 1-GPU 11 behind it goes first (best
    # fit puts it beside the running job), then 10, which still fits: the same Scheduler rule as the simulator's.
    state = cluster(nodes(2), [
        running("5", {"n1": 4}),
        pending("10", per_node=8, priority=90, time_limit_s=6000),
        pending("11", gpus=1, priority=50, time_limit_s=600),
    ])
    daemon, _, _ = daemon_for(state, tmp_path, policy="best-fit", slack=slack)
    report = daemon.cycle()
    assert daemon.scheduler.slack == slack
    assert [d.job_id for d in report.decisions] == order


# -- the collector ----------------------------------------------------------------------------


def test_steady_cycles_leave_no_reference_cycles_for_the_collector(tmp_path):
    # What a cycle leaves is frozen (collector.paused(freeze=True)): garbage in reference cycles would stay until the
    # hourly sweep. The recorded state: parsed, translated, placed and logged as in any cycle.
    daemon = Daemon(Config(anchors=str(tmp_path / "anchors")), recorded(), f"sqlite:///{tmp_path / 'log.db'}",
                    clock=Clock())
    daemon.cycle()
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for _ in range(3):
            report = daemon.cycle()
            gc.collect()
    finally:
        gc.set_debug(0)
    garbage, gc.garbage[:] = list(gc.garbage), []
    assert report.skipped is None and report.errors == []
    assert [type(o).__name__ for o in garbage] == []


def test_the_loop_sweeps_what_cycles_froze(tmp_path, monkeypatch):
    monkeypatch.setattr(daemon_module, "SWEEP_EVERY_S", 0.0)
    daemon, _, _ = daemon_for(cluster(nodes(2), [pending("90", gpus=2)]), tmp_path)
    with collector.paused(freeze=True):
        pass
    assert gc.get_freeze_count() > 0
    loop = threading.Thread(target=daemon.run, args=(60.0,))
    loop.start()
    try:
        cycles_by(daemon, 1, time.monotonic() + 10)
    finally:
        daemon.shutdown()
        loop.join(10)
    assert daemon.cycles == 1 and gc.get_freeze_count() == 0


# -- left to Slurm ----------------------------------------------------------------------------


def test_a_job_the_daemon_cannot_honour_is_left_to_slurm_once_its_lease_lifted(tmp_path):
    state = cluster(nodes(2), [pending("70", gpus=1, constraint="[rack1|rack2]"), pending("71", gpus=1)])
    daemon, backend, clock = daemon_for(state, tmp_path, lease=60)
    report = daemon.cycle()
    assert [(d.job_id, d.action) for d in report.decisions] == [("71", "placed"), ("70", "left")]
    assert "asks about the job's set of nodes" in report.decisions[1].reason
    assert backend.commands == [update("71", "n1", 1, 1), ["scontrol", "update", "JobId=70", "StartTime=now"]]
    backend.state = replace(state, jobs=(state.jobs[0], running("71", {"n1": 1}, comment="compass")))
    clock.now += 40  # past half a lease: a leased job would be renewed; a left one is not touched again
    backend.commands.clear()
    assert daemon.cycle().decisions == [] and backend.commands == []
    with Store.open(daemon.db, create=False) as store:
        (left,) = [d for d in store.decisions() if d.job_id == "70"]
    assert left.action == "left" and left.nodes == () and left.request == "1 GPUs"
    explained = compass("explain", "70", "--db", daemon.db)
    assert explained.returncode == 0 and "Slurm places it" in explained.stdout, explained.stderr


def test_a_pin_slurm_refuses_is_lifted_in_the_next_cycle_and_the_job_left_to_slurm(tmp_path):
    daemon, backend, clock = daemon_for(cluster(nodes(3), [pending("80", gpus=1)]), tmp_path, lease=60)
    daemon.cycle()
    assert backend.commands == [update("80", "n1", 1, 1)]
    # The nodes lack something the job asks for that the daemon does not read: Slurm parks it for good.
    refused = pending("80", gpus=1, required_nodes=("n1",), reason="BadConstraints")
    backend.state = cluster(nodes(3), [refused])
    clock.now += 5
    report = daemon.cycle()
    assert [(d.job_id, d.action) for d in report.decisions] == [("80", "left")]
    assert "Slurm refused its pin on n1 (BadConstraints)" in report.decisions[0].reason
    # its request as asked put back (the pin set its node count and GPUs per node), then unpinned and left
    assert backend.commands[1:] == [let_go("80", 1, start=True)]
    # Unpinned, Slurm looks at it afresh: it is Slurm's now, neither placed nor leased again.
    backend.state = cluster(nodes(3), [replace(refused, required_nodes=(), reason="Resources")])
    for _ in range(2):
        clock.now += 40
        assert daemon.cycle().decisions == []
    assert len(backend.commands) == 2 and daemon.book.in_state(JobState.LEFT)
    backend.state = cluster(nodes(3), [])
    daemon.cycle()
    assert not daemon.book.in_state(JobState.LEFT)  # gone from the queue: forgotten


@pytest.mark.parametrize(("error", "left"), [("Invalid generic resource (gres) specification", True),
                                             ("Unable to contact slurm controller (connect failure)", False)])
def test_a_job_whose_request_slurm_will_not_take_back_is_unpinned_and_left_all_the_same(tmp_path, error, left):
    """Leaving a job whose pin Slurm refused puts back the request the pin changed in the same line; where Slurm
    answers that it will not take that request, the node list alone is cleared with the lease (the error logged), so
    that the job is Slurm's all the same. A line Slurm did not answer is sent again next cycle, nothing more now."""
    daemon, backend, clock = daemon_for(cluster(nodes(3), [pending("80", gpus=1)]), tmp_path, lease=60)
    daemon.cycle()
    refused = pending("80", gpus=1, required_nodes=("n1",), reason="BadConstraints")
    daemon.backend = daemon.actuator.backend = backend = Refusing(cluster(nodes(3), [refused]),
                                                                  "TresPerJob=gres:gpu:1", error)
    clock.now += 5
    report = daemon.cycle()
    assert backend.commands == [let_go("80", 1, start=True), *([let_go("80", start=True)] if left else [])]
    assert [(d.job_id, d.action) for d in report.decisions] == ([("80", "left")] if left else [])
    assert daemon.book.state("80") is (JobState.LEFT if left else JobState.WAITING)
    [message] = [e.message for e in report.errors]
    said = "its pin cleared, its request not put back" if left else "Slurm refused its leave"
    assert message.startswith(f"job 80: {said} (scontrol update JobId=80") and message.endswith(f"{error})")


def test_pins_slurm_refuses_in_one_cycle_are_cleared_one_job_a_line(tmp_path):
    # scontrol refuses a node-list update naming several jobs ("Invalid job ID 80,81") without sending it
    daemon, backend, clock = daemon_for(cluster(nodes(3), [pending("80", gpus=1), pending("81", gpus=1)]),
                                        tmp_path, lease=60)
    daemon.cycle()
    backend.state = cluster(nodes(3), [pending(j, gpus=1, required_nodes=("n1",), reason="BadConstraints")
                                       for j in ("80", "81")])
    backend.commands.clear()
    clock.now += 5
    report = daemon.cycle()
    assert sorted((d.job_id, d.action) for d in report.decisions) == [("80", "left"), ("81", "left")]
    assert backend.commands == [let_go("80", 1, start=True), let_go("81", 1, start=True)]


def test_a_pin_beyond_a_node_limit_is_undone_with_the_request_the_user_gave(tmp_path):
    """11 GPUs on 8-GPU nodes are 11 instances of 1 (engine/shape.py): the pin asks for 11 nodes, beyond the
    partition's MaxNodes, and Slurm parks the job (PartitionNodeLimit). Clearing the node list alone would leave
    NumNodes=11 and the job parked for ever: its --gpus=11 is put back, on as few nodes as hold it (8 + 3)."""
    daemon, backend, clock = daemon_for(cluster(nodes(12), [pending("80", gpus=11)]), tmp_path, lease=60)
    daemon.cycle()
    assert backend.commands == [update("80", "n[1-9],n[10-11]", 11, 1)]
    backend.state = cluster(nodes(12), [pending("80", per_node=1, nodes=11, reason="PartitionNodeLimit",
                                                required_nodes=tuple(f"n{i}" for i in range(1, 12)))])
    clock.now += 5
    assert [d.action for d in daemon.cycle().decisions] == ["left"]
    assert backend.commands[1:] == [let_go("80", 11, "1-2", start=True)]


@pytest.mark.parametrize(("asked", "words"), [
    ({"gpus_per_job": 11}, ["NumNodes=1-2", "TresPerNode=", "TresPerJob=gres:gpu:11"]),
    ({"gpus_per_job": 16, "num_nodes": 4}, ["NumNodes=4", "TresPerNode=", "TresPerJob=gres:gpu:16"]),
    ({"gpus_per_node": 2, "num_nodes": 4}, ["NumNodes=4", "TresPerJob=", "TresPerNode=gres:gpu:2"]),
    ({"gpus_per_node": 4, "gpu_type": "a100"}, ["NumNodes=1", "TresPerJob=", "TresPerNode=gres:gpu:a100:4"]),
    ({"gpus_per_task": 2, "tasks": 8}, ["NumNodes=1-2", "TresPerJob=", "TresPerNode="]),  # TresPerTask holds them
])
def test_the_request_put_back_is_the_one_asked(asked, words):
    job = SlurmJob("5", "alice", "PENDING", "gpu", **asked)
    assert unpin_argv("5", Asked.of(job, 8)) == ["scontrol", "update", "JobId=5", "ReqNodeList=", *words]


def test_leases_are_lifted_by_a_list_and_a_pin_cleared_one_job_a_line():
    assert leave_argv(["1", "2"]) == ["scontrol", "update", "JobId=1,2", "StartTime=now"]
    assert unpin_argv("1", None, start_now=True) == ["scontrol", "update", "JobId=1", "ReqNodeList=", "StartTime=now"]
    with pytest.raises(SlurmError, match="not a valid Slurm job id"):
        unpin_argv("1,2", None)


def test_a_decision_slurm_refuses_for_the_node_configuration_is_left_to_slurm(tmp_path):
    backend = Refusing(cluster(nodes(2), [pending("90", gpus=8)]), "ReqNodeList=n1",
                       "Requested node configuration is not available")
    daemon = Daemon(Config(anchors="", lease=60), backend, f"sqlite:///{tmp_path / 'log.db'}")
    report = daemon.cycle()
    assert [(d.job_id, d.action) for d in report.decisions] == [("90", "failed"), ("90", "left")]
    # the node list cleared and the request put back too: from 23.11 an update Slurm refuses may keep what it
    # set before the check that refused it
    assert backend.commands[1:] == [let_go("90", 8, start=True)]
    assert daemon.cycle().decisions == [] and len(backend.commands) == 2


@pytest.mark.parametrize("error", ["Invalid generic resource (gres) specification",
                                   "Requested node configuration is not available",
                                   "Job violates accounting/QOS policy (job submit limit, user's size and/or time "
                                   "limits)",
                                   "Access/permission denied"])
def test_a_decision_slurm_refuses_in_any_words_is_left_to_slurm_not_retried_for_ever(tmp_path, error):
    """Decided again, a decision Slurm refused would be refused again while the job waits on its lease: whatever
    Slurm's words, the job is Slurm's, its node list cleared and its request put back (the refused update may
    have set them)."""
    backend = Refusing(cluster(nodes(2), [pending("90", gpus=8)]), "ReqNodeList=n1", error)
    daemon = Daemon(Config(anchors="", lease=60), backend, f"sqlite:///{tmp_path / 'log.db'}")
    assert [(d.job_id, d.action) for d in daemon.cycle().decisions] == [("90", "failed"), ("90", "left")]
    assert backend.commands[1:] == [let_go("90", 8, start=True)]
    assert daemon.cycle().decisions == [] and len(backend.commands) == 2 and daemon.book.state("90") is JobState.LEFT


@pytest.mark.parametrize("error", ["no answer within 10 s", "Unable to contact slurm controller (connect failure)",
                                   "Socket timed out on send/recv operation",
                                   "Job can not be altered now, try again later",
                                   "Slurm backup controller in standby mode", "Invalid job id specified"])
def test_a_decision_slurm_did_not_answer_is_decided_again_not_left(tmp_path, error):
    backend = Refusing(cluster(nodes(2), [pending("90", gpus=8)]), "ReqNodeList=n1", error)
    daemon = Daemon(Config(anchors="", lease=60), backend, f"sqlite:///{tmp_path / 'log.db'}")
    assert [(d.job_id, d.action) for d in daemon.cycle().decisions] == [("90", "failed")]
    assert daemon.book.state("90") is not JobState.LEAVING
    backend.token = "no such token"  # Slurm answers now
    assert [(d.job_id, d.action) for d in daemon.cycle().decisions] == [("90", "placed")]

