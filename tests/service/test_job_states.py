"""The daemon's JobBook (service/job_states.py): its moves, and its invariants through random histories.

The histories run a real Daemon with a real SQLite log against a toy Slurm whose scontrol commands take effect:
Slurm starts jobs by itself (a lease ran out), ends them, holds them back, refuses pins, has an admin re-point
them, refuses updates and releases, takes cycles to requeue a job (its steps ending); the daemon is restarted, or killed
half-way through telling Slurm. After every cycle
that ended, the book keeps its own invariants, and what it says agrees with Slurm and with the log.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compass_slurm.config import Config
from compass_slurm.service.bookkeeping import per_node
from compass_slurm.service.daemon import Daemon
from compass_slurm.service.job_states import TRANSITIONS, InvalidTransition, JobBook, JobState
from compass_slurm.service.store import PLACES, Store
from compass_slurm.slurm import hostlist
from compass_slurm.slurm.backend import Backend
from compass_slurm.slurm.errors import SlurmCommandError
from compass_slurm.slurm.state import SlurmJob

from tests.service.test_daemon_unit import Clock, Killed, cluster, killed, nodes, pending, unreadable

W, P, R, PIN, RE, LV, LF, RQ = JobState
NODES = 4


def test_a_move_the_transitions_do_not_list_raises_in_tests_and_is_logged_otherwise(caplog, monkeypatch):
    book = JobBook()
    book.move("1", W)
    with pytest.raises(InvalidTransition, match="job 1: waiting -> left"):
        book.move("1", LF, why="never leaving first")
    assert book.state("1") is W and book.check() == []
    monkeypatch.setattr(JobBook, "strict", False)
    book.move("1", LF, why="never leaving first")
    assert book.state("1") is LF and "unexpected move waiting -> left" in caplog.text and book.check() == []


def test_a_lease_lives_only_in_the_states_of_a_waiting_job():
    book = JobBook()
    book.renew(["1", "2"], 10.0)
    book.move("2", PIN, pin=("n1",))
    assert book.leases == {"1": 10.0, "2": 10.0}
    book.move("1", P, decision=None, job=None)  # placed: its lease ends (the payload is checked, below)
    assert book.leases == {"2": 10.0}
    assert book.check() == ["job 1: placed with the payload of another state"]
    book.end_leases(["2"])
    assert book.leases == {} and book.state("2") is PIN  # pinned still: only a WAITING job is forgotten with it


def test_every_state_is_reached_and_left():
    assert {s for pair in TRANSITIONS for s in pair if s is not None} == set(JobState)
    assert all((s, None) in TRANSITIONS for s in JobState)  # a job Slurm forgets is forgotten in every state


# -- the toy Slurm --------------------------------------------------------------------------


class ToySlurm(Backend):
    """Four 8-GPU nodes; scontrol's update, requeuehold and release take effect as Slurm's would: a requeued job
    is held and completing on its nodes until its steps end (``requeued``), pending from then on. A command on a
    list of jobs is carried out for each it can, and names each it cannot."""

    def __init__(self) -> None:
        self.nodes = nodes(NODES)
        self.jobs: dict[str, SlurmJob] = {}
        #: the nodes of each pending job's ReqNodeList as the daemon last set it
        self.pins: dict[str, tuple[str, ...]] = {}
        #: what Slurm says to every update setting nodes in the next cycle (None: it takes them)
        self.refusal: str | None = None
        #: whether Slurm refuses the next release (of one job)
        self.refuse_release = False
        #: killed at this many scontrol commands from now (None: not)
        self.kill_in: int | None = None

    def read_state(self):
        return cluster(self.nodes, list(self.jobs.values()))

    def version(self) -> str:
        return "22.05.8"

    def job_state(self, job_id: str) -> str | None:
        job = self.jobs.get(job_id)
        return None if job is None else job.state

    def scontrol(self, argv: list[str]) -> None:
        if self.kill_in is not None:
            self.kill_in -= 1
            if self.kill_in < 0:
                self.kill_in = None
                raise Killed
        verb, ids = argv[1], argv[2].removeprefix("JobId=").split(",")
        fields = dict(a.split("=", 1) for a in argv[3:])
        refused = [why for job_id in ids if (why := self._one(verb, job_id, fields)) is not None]
        if refused:
            raise SlurmCommandError(argv, "exit 1: " + "\n".join(refused))

    def _one(self, verb: str, job_id: str, fields: dict[str, str]) -> str | None:
        """Carry out ``verb`` on one job; what Slurm says when it cannot."""
        job = self.jobs.get(job_id)
        if job is None:
            return f"Invalid job id specified for job {job_id}"
        if verb == "requeuehold":
            if job.state != "RUNNING":
                return f"Job is pending execution for job {job_id}"
            self.jobs[job_id] = replace(job, state="COMPLETING", held=True, reason="job_requeued_in_held_state")
        elif not job.pending:
            return f"Job is no longer pending execution for job {job_id}"
        elif verb == "release":
            if self.refuse_release:
                self.refuse_release = False
                return f"Resource temporarily unavailable for job {job_id}"
            self.jobs[job_id] = replace(job, held=False, reason="Priority")
        elif fields.get("ReqNodeList"):
            if self.refusal is not None:
                return f"{self.refusal} for job {job_id}"
            pin = tuple(hostlist.expand(fields["ReqNodeList"]))
            self.pins[job_id] = pin
            per_node = int(fields["TresPerNode"].rsplit(":", 1)[1])
            self.jobs[job_id] = replace(job, required_nodes=pin, num_nodes=int(fields["NumNodes"]),
                                        gpus_per_node=per_node, gpus_per_job=None)
        elif "ReqNodeList" in fields:
            self.pins.pop(job_id, None)
            self.jobs[job_id] = replace(job, required_nodes=())
        return None

    # -- what Slurm does by itself between cycles --

    def free(self) -> dict[str, int]:
        free = {n.name: n.gpus for n in self.nodes if n.available}
        for job in self.jobs.values():
            for name, gpus in job.gpus_alloc.items():
                free[name] = free.get(name, 0) - gpus
        return free

    def start(self, job_id: str) -> None:
        """Start a pending job where it fits: on its ReqNodeList when it has one, as Slurm does."""
        job, free = self.jobs[job_id], self.free()
        per_node = job.gpus_per_node or job.gpus_per_job
        names = list(dict.fromkeys(job.required_nodes)) or [n for n in free if free[n] >= per_node]
        if job.held or len(names) < job.num_nodes or any(free.get(n, 0) < per_node for n in names[:job.num_nodes]):
            return
        alloc = dict.fromkeys(names[:job.num_nodes], per_node)
        self.pins.pop(job_id, None)
        self.jobs[job_id] = replace(job, state="RUNNING", nodes=tuple(alloc), gpus_alloc=alloc, reason="None")

    def requeued(self, job_id: str) -> None:
        """A requeued job's steps ended: pending, still held, its node list as it was."""
        self.jobs[job_id] = replace(self.jobs[job_id], state="PENDING", nodes=(), gpus_alloc={})


SUBMIT = st.tuples(st.just("submit"), st.sampled_from([(1, 1), (1, 2), (1, 4), (1, 8), (2, 8)]), st.booleans(),
                   st.integers(1, 9))
STEP = st.one_of(
    SUBMIT, SUBMIT, SUBMIT,
    st.tuples(st.sampled_from(["start", "start", "end", "end", "cancel", "hold back", "release", "refuse pin",
                               "admin pin", "requeued", "requeued", "start all"]), st.integers(0, 7)),
    st.tuples(st.sampled_from(["drain", "resume", "run on", "run on"]), st.integers(1, NODES)),
    st.tuples(st.just("refuse"), st.sampled_from(["Requested node configuration is not available",
                                                  "Job is no longer pending execution", "Slurm busy"])),
    st.tuples(st.just("kill"), st.integers(0, 3)),
    st.tuples(st.sampled_from(["restart", "later", "later", "refuse release"])),
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=st.lists(SUBMIT, min_size=3, max_size=10), steps=st.lists(STEP, min_size=6, max_size=40),
       compacting=st.booleans())
def test_the_book_agrees_with_itself_with_slurm_and_with_the_log(tmp_path_factory, first, steps, compacting):
    run(f"sqlite:///{tmp_path_factory.mktemp('log') / 'log.db'}", [*first, *steps], compacting=compacting)


def test_a_re_pin_slurm_takes_whose_release_it_refuses_is_followed_until_released(tmp_path):
    """A history the random ones seldom reach: job 103 requeued from n2 to n1 (its neighbour ended), then re-pinned
    there by a cycle whose release Slurm refuses; it stays the daemon's on n1 until released, then runs there as
    logged."""
    four, db = ("submit", (1, 4), True, 5), f"sqlite:///{tmp_path / 'log.db'}"
    run(db, [four, four, four, four, ("start all", 0), ("end", 0), ("end", 1), ("refuse release",), ("requeued", 0),
             ("later",), ("start all", 0), ("later",)], compacting=True)
    with Store.open(db, create=False) as store:
        assert [(d.action, d.nodes) for d in store.decisions(job="103")] == [("placed", ("n2",)), ("migrated", ("n1",))]
        assert [(m.src, m.dst, m.status) for m in store.migrations(job="103")] == [("n2", "n1", "done")]


def test_a_requeue_is_taken_over_by_a_daemon_restarted_while_its_log_cannot_be_read(tmp_path):
    """Job 103 requeued from n2 to n1; the daemon killed before Slurm shows it pending, and restarted while its log
    cannot be read: its own note says 103 is its requeue, so it is followed, re-pinned and released as planned."""
    four, db = ("submit", (1, 4), True, 5), f"sqlite:///{tmp_path / 'log.db'}"
    run(db, [four, four, four, four, ("start all", 0), ("end", 0), ("end", 1), ("lost log",), ("requeued", 0),
             ("start all", 0), ("later",)], compacting=True)
    with Store.open(db, create=False) as store:
        assert [(d.action, d.nodes) for d in store.decisions(job="103")] == [("placed", ("n2",)), ("migrated", ("n1",))]
        assert [(m.src, m.dst, m.status) for m in store.migrations(job="103")] == [("n2", "n1", "done")]


def run(db: str, steps: list[tuple], trace: bool = False, compacting: bool = False) -> None:
    """Each step, then a daemon cycle, then the checks (unless the daemon was killed in it: then restarted).
    ``compacting``: the policy compacts after every departure, migrating as the budget allows (the default one only
    while a job waits)."""
    slurm, clock = ToySlurm(), Clock()
    config = Config(anchors="", lease=60, **({"policy": "compass", "migrations_per_hour": "unlimited"} if compacting
                                              else {}))

    def fresh() -> Daemon:
        return Daemon(config, slurm, db, clock=clock)

    daemon, ids = fresh(), iter(range(100, 10_000))
    for kind, *args in steps:
        pending_jobs = [j for j in slurm.jobs.values() if j.pending]
        running_jobs = [j for j in slurm.jobs.values() if not j.pending]
        completing = [j for j in running_jobs if j.state == "COMPLETING"]
        pick = (lambda jobs: jobs[args[0] % len(jobs)] if jobs else None)
        if kind == "submit":
            (count, gpus), migratable, priority = args
            job_id = str(next(ids))
            comment = "compass:migratable" if migratable else "compass"
            slurm.jobs[job_id] = pending(job_id, per_node=gpus, nodes=count, priority=priority, comment=comment,
                                         reason="Priority")
        elif kind == "start" and (job := pick(pending_jobs)):
            slurm.start(job.id)  # its lease ran out, or the daemon's pin was heard
        elif kind == "end" and (job := pick(running_jobs)):
            del slurm.jobs[job.id]
        elif kind == "requeued" and (job := pick(completing)):
            slurm.requeued(job.id)
        elif kind == "start all":  # as Slurm starts the jobs the daemon pinned (StartTime=now), and others that fit
            for job in pending_jobs:
                slurm.start(job.id)
        elif kind == "cancel" and (job := pick(pending_jobs)):
            del slurm.jobs[job.id]
            slurm.pins.pop(job.id, None)
        elif kind == "hold back" and (job := pick(pending_jobs)):
            slurm.jobs[job.id] = replace(job, reason="QOSMaxGRESPerUser")
        elif kind == "release" and (job := pick(pending_jobs)):
            slurm.jobs[job.id] = replace(job, reason="Priority", held=False)
        elif kind == "refuse pin" and (job := pick([j for j in pending_jobs if j.required_nodes])):
            slurm.jobs[job.id] = replace(job, reason="BadConstraints")
        elif kind == "admin pin" and (job := pick(pending_jobs)) and job.num_nodes == 1:
            slurm.pins.pop(job.id, None)
            slurm.jobs[job.id] = replace(job, required_nodes=(f"n{args[0] % NODES + 1}",))
        elif kind == "run on":  # a checkpointable 1-GPU job Slurm started where its user asked: adopted, movable
            job_id = str(next(ids))
            slurm.jobs[job_id] = replace(pending(job_id, gpus=1, comment="compass:migratable", reason="None"),
                                         state="RUNNING", nodes=(f"n{args[0]}",), gpus_alloc={f"n{args[0]}": 1})
        elif kind in ("drain", "resume"):
            at = args[0] - 1
            slurm.nodes[at] = replace(slurm.nodes[at], flags=frozenset({"DRAIN"} if kind == "drain" else ()))
        elif kind == "refuse":
            slurm.refusal = args[0]
        elif kind == "kill":
            slurm.kill_in = args[0]
        elif kind == "refuse release":
            slurm.refuse_release = True
        elif kind == "restart":
            daemon.close()
            daemon = fresh()
        elif kind == "lost log":  # killed, and restarted while its log cannot be read (for this cycle)
            killed(daemon)
            daemon = fresh()
        clock.now += 200 if kind == "later" else 10
        read = slurm.read_state()
        try:
            with unreadable(Path(db.removeprefix("sqlite:///"))) if kind == "lost log" else nullcontext():
                report = daemon.cycle()
        except Killed:
            killed(daemon)
            daemon = fresh()  # what it logged is all the next one knows
            continue
        finally:
            slurm.refusal = slurm.kill_in = None
        if trace:
            print(kind, args, [(d.job_id, d.action, d.nodes) for d in report.decisions],
                  {r.id: r.state.value for r in daemon.book}, {j.id: (j.state[0], j.required_nodes, j.nodes)
                                                                for j in slurm.jobs.values()})
        check(daemon, slurm, read, report)
    daemon.close()


def check(daemon: Daemon, slurm: ToySlurm, read, report) -> None:
    book = daemon.book
    assert book.check() == []
    # Slurm heard every placed job's decision: it is pending on those nodes (else the job is re-planned)
    for job_id, record in book.placed.items():
        job = slurm.jobs.get(job_id)
        assert job is not None and job.pending and set(job.required_nodes) == set(record.decision.nodes), job_id
    # every pin of the daemon's on a pending job is one it knows: placed there, or pinned (and never tying it), also
    # an older pin after a restart
    for job_id, pin in slurm.pins.items():
        job = slurm.jobs[job_id]
        if job.pending and set(job.required_nodes) == set(pin):
            record = book.get(job_id)
            # never left stuck on a pin Slurm refuses
            assert job.reason != "BadConstraints", job_id
            assert record is not None and record.state in (P, PIN, RE), (job_id, record)
            assert set(record.pin or record.decision.nodes) == set(pin)
    # the policy holds a pending job only while it is placed or requeued (or its migration failed: the next cycle
    # finds it)
    held = daemon.policy.cluster.jobs.keys() if daemon.policy is not None else set()
    unmoved = {d.job_id for d in report.decisions if d.action == "failed" and d.from_nodes} | {
        m.job_id for m in report.migrations if m.status == "failed"}
    assert {j for j in held if slurm.jobs.get(j) is not None and slurm.jobs[j].pending} <= (
        book.placed.keys() | book.in_state(RQ).keys() | unmoved)
    # no job is left held: one the daemon requeued is followed until it is re-pinned and released, or its release
    # is owed (Slurm refused it while the job was completing)
    for job in slurm.jobs.values():
        assert not job.held or book.state(job.id) is RQ or job.id in book.release_due, job.id
    # a requeued job is the policy's on its new nodes, logged so (its migration's record)
    for job_id, record in book.in_state(RQ).items():
        assert per_node(daemon.policy, job_id) == record.decision.gpus_per_node() == record.logged.gpus_per_node
    # the log's latest record of a job running since the read names its nodes, or leaves it to Slurm
    was_running = {j.id for j in read.jobs if not j.pending}
    with Store.open(daemon.db, create=False) as store:
        for job in slurm.jobs.values():
            if job.state == "RUNNING" and job.id in was_running:  # (a requeued one completing: its new place)
                latest = [d for d in store.decisions(job=job.id) if d.action in (*PLACES, "left")][-1:]
                assert not latest or latest[0].action == "left" or set(latest[0].nodes) == set(job.nodes), job.id


def test_the_architecture_doc_lists_every_move():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "architecture.md").read_text()
    name = (lambda s: "(none)" if s is None else s.value)
    for (frm, to), why in TRANSITIONS.items():
        assert f"| {name(frm)} | {name(to)} | {why} |" in doc, (frm, to)
    rows = [line for line in doc.splitlines() if line.count("|") == 4 and line.startswith("| ")]
    assert len([r for r in rows if r.split("|")[1].strip() in {name(s) for s in (None, *JobState)}
                and r.split("|")[2].strip() in {name(s) for s in (None, *JobState)}]) == len(TRANSITIONS)
