"""The helper daemon against the real dev cluster: managed jobs run where it decided, foreign ones are adopted.

To keep off other people's clusters, run with COMPASS_DEV_DIR and COMPASS_DEV_PORT set
(scripts/dev-cluster and the conftest fixture honour both).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
from devcluster import rpcs_served

from compass_slurm.config import Config
from compass_slurm.service.daemon import Daemon
from compass_slurm.service.job_states import JobState
from compass_slurm.slurm.backend import Asked, unpin_argv, update_argv
from compass_slurm.slurm.cli_backend import CliBackend
from compass_slurm.service.store import Store

pytestmark = pytest.mark.slurm

LEASE = 60
COMPASS = [sys.executable, "-c", "from compass_slurm.cli import main; main()"]


def submit(slurm, *args: str, managed: str | None = None, seconds: int = 300, wrap: str = "") -> str:
    """sbatch as the wrapper does it for ``managed`` (the marker token), or plain sbatch; the job sleeps ``seconds``
    (or runs ``wrap``)."""
    extra = [f"--comment={managed}", f"--begin=now+{LEASE}"] if managed else []
    out = subprocess.run(
        ["sbatch", "--parsable", "--output=/dev/null", *extra, *args, "--wrap", wrap or f"sleep {seconds}"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()
    slurm.submitted.append(out.split(";")[0])
    return slurm.submitted[-1]


def gpus_by_job(backend: CliBackend) -> dict[str, dict[str, int]]:
    return {j.id: dict(j.gpus_alloc) for j in backend.read_state().jobs if j.running and j.gpus_alloc}


def wait_running(backend: CliBackend, jobs: list[str], timeout: float = 30.0) -> dict[str, dict[str, int]]:
    deadline = time.monotonic() + timeout
    while True:
        seen = gpus_by_job(backend)
        if all(j in seen for j in jobs) or time.monotonic() > deadline:
            return seen
        time.sleep(0.3)


def make_daemon(tmp_path: Path, backend: CliBackend | None = None, **config) -> Daemon:
    tmp_path.mkdir(parents=True, exist_ok=True)
    cfg = Config(anchors=str(tmp_path / "anchors"), lease=LEASE, interval=1, **config)
    # the daemon reads as open_backend makes it (by line before 24.11, narrow from 24.11)
    return Daemon(cfg, backend or CliBackend(narrow=None, lines=None), f"sqlite:///{tmp_path / 'log.db'}")


def test_a_realistic_mix_runs_where_the_daemon_decided(idle_cluster, tmp_path):
    slurm = idle_cluster
    backend = CliBackend()
    foreign = [submit(slurm, "--gpus=2"), submit(slurm, "--nodes=1", "--gpus=3")]
    before = wait_running(backend, foreign)
    assert all(j in before for j in foreign)
    managed = [
        submit(slurm, "--gpus=1", managed="compass"),
        submit(slurm, "--gpus=1", managed="compass:migratable"),
        submit(slurm, "--gpus=2", managed="compass"),
        submit(slurm, "--gpus=4", managed="compass"),
        submit(slurm, "--gpus=8", managed="compass"),
        submit(slurm, "--nodes=2", "--gpus-per-node=8", managed="compass"),
    ]
    daemon = make_daemon(tmp_path)
    report = daemon.cycle()
    assert report.skipped is None and report.errors == []
    assert sorted(report.adopted) == sorted(foreign)
    pinned = {p.job: p.pinned for v in daemon.policy.view() for p in v.instances}
    assert all(pinned[j] for j in foreign)  # adopted, never moved
    decided = {d.job_id: d.gpus_per_node for d in report.decisions}
    assert sorted(decided) == sorted(managed) and all(d.action == "placed" for d in report.decisions)
    assert sorted(decided[managed[5]].values()) == [8, 8]

    seen = wait_running(backend, managed)
    assert {j: seen.get(j) for j in managed} == decided  # exactly the per-node GPU counts chosen
    assert {j: seen[j] for j in foreign} == {j: before[j] for j in foreign}  # foreign jobs untouched

    report = daemon.cycle()  # verifies: nothing to decide, nothing to adopt
    assert report.decisions == [] and report.adopted == [] and report.errors == []
    with Store.open(daemon.db, create=False) as store:
        assert {d.job_id: d.gpus_per_node for d in store.decisions()} == {j: seen[j] for j in managed}
        assert store.samples()[-1].gpus_used == sum(sum(a.values()) for a in seen.values())
    header = (tmp_path / "anchors").read_text().splitlines()[0]
    assert header.startswith("# compass-anchors v1 ") and header.endswith(" cycle=2")

    # A restarted daemon rebuilds the same picture from Slurm alone.
    fresh = make_daemon(tmp_path)
    report = fresh.cycle()
    assert sorted(report.adopted) == sorted(seen) and report.decisions == []
    assert {v.name: v.used for v in fresh.policy.view()} == {v.name: v.used for v in daemon.policy.view()}


def test_dry_run_prints_the_commands_and_changes_nothing(idle_cluster, dev_cluster, tmp_path):
    job = submit(idle_cluster, "--gpus=4", managed="compass")
    config = tmp_path / "config.toml"
    config.write_text(f'anchors = "{tmp_path / "anchors"}"\n')
    done = subprocess.run([*COMPASS, "daemon", "--once", "--dry-run", "--db", f"sqlite:///{tmp_path / 'log.db'}",
                           "--config", str(config)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    seen = CliBackend().read_state().job(job)
    # (the job named by its SLUID from 26.05 on, as a live run names it: cli_backend.SLUID_SINCE)
    assert bool(seen.sluid) == (dev_cluster.release >= "26.05")
    assert len(lines) == 1 and lines[0].startswith(f"scontrol update JobId={seen.sluid or job} ReqNodeList=node")
    assert lines[0].endswith(" NumNodes=1 TresPerJob= TresPerNode=gres:gpu:4 StartTime=now")
    assert seen.pending and seen.required_nodes == () and seen.reason == "BeginTime"
    assert not (tmp_path / "anchors").exists()


@pytest.mark.releases("22.05")  # 40 s of engine behaviour; placement and migration run on every release above
def test_partial_nodes_stay_within_two_over_a_stream_of_short_jobs(idle_cluster, tmp_path):
    rng = random.Random(7)
    # compass's bound: Compact after every departure (the default, compass-easy, compacts only while a job
    # waits, so nothing here makes it hold two partial nodes; README "The daemon")
    daemon = make_daemon(tmp_path, policy="compass", migrations_per_hour=1000)
    sizes = [1] * 10 + [2] * 3 + [4] * 3 + [8] * 2 + [3]
    backend = CliBackend()
    samples = []
    submitted: list[str] = []
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline:
        for _ in range(rng.randint(1, 3)):
            submitted.append(submit(idle_cluster, f"--gpus={rng.choice(sizes)}", managed="compass:migratable",
                                    seconds=rng.randint(3, 10)))
        report = daemon.cycle()
        # A short job may end, or start, between the read and a migration: Slurm then refuses it.
        assert report.skipped is None and all(e.kind in ("migration", "mismatch") for e in report.errors)
        samples.append(report.sample)
        placed = {d.job_id: d.gpus_per_node for d in report.decisions}
        seen = wait_running(backend, list(placed), timeout=15)
        for job_id, per_node in placed.items():
            assert seen.get(job_id, per_node) == per_node, job_id  # a short job may have ended already
        time.sleep(0.5)
    deadline = time.monotonic() + 30  # the migrations requeued last end in the cycles that follow
    while daemon.book.in_state(JobState.REQUEUED):
        assert time.monotonic() < deadline, list(daemon.book.in_state(JobState.REQUEUED))
        time.sleep(0.5)
        samples.append(daemon.cycle().sample)
    with_wcc = [s for s in samples if s.wcc]
    assert len(with_wcc) >= len(samples) * 0.8
    assert all(s.partial <= 2 for s in with_wcc), [(s.partial, s.phi_star) for s in with_wcc]
    assert max(s.gpus_used for s in samples) >= 16  # the stream really loaded the cluster
    with Store.open(daemon.db, create=False) as store:
        assert len(store.samples()) == len(samples)
        assert {d.job_id for d in store.decisions()} <= set(submitted)
    # no requeue left a job held (a job cancelled while held, of an earlier test, is listed held for MinJobAge)
    assert not [j.id for j in backend.read_state().jobs if j.held and j.pending]


def test_the_queue_setting_decides_whether_a_blocked_head_stops_later_jobs(idle_cluster, tmp_path):
    """``queue = "fifo"``: nothing starts past the head; ``"backfill"`` (the default) starts what fits around it."""
    slurm = idle_cluster
    backend = CliBackend()
    names = sorted(n.name for n in backend.read_state().nodes)
    blockers = [submit(slurm, "--gpus=1", f"--nodelist={name}") for name in names]  # one GPU taken on every node
    assert all(j in wait_running(backend, blockers) for j in blockers)
    head = submit(slurm, "--gpus=8", managed="compass")  # a whole node: none is free
    small = submit(slurm, "--gpus=1", managed="compass")
    fifo = make_daemon(tmp_path / "fifo", queue="fifo").cycle()
    assert fifo.errors == [] and fifo.decisions == []
    backfill = make_daemon(tmp_path / "backfill").cycle()
    assert backfill.errors == [] and [d.job_id for d in backfill.decisions] == [small]
    assert wait_running(backend, [small])[small] == backfill.decisions[0].gpus_per_node
    assert head not in gpus_by_job(backend)


# -- request forms: arrays, --exclusive, --mem-per-gpu, a later --begin ---------------------------


def squeue_all(job: str) -> dict[str, tuple[str, str]]:
    """Every task of array ``job`` (finished ones too, for MinJobAge): task id -> (state, node list)."""
    out = subprocess.run(["squeue", "--noheader", "--states=all", "--array", f"--jobs={job}", "--format=%i|%T|%N"],
                         capture_output=True, text=True, check=True).stdout
    return {i: (state, nodes) for i, state, nodes in (line.split("|") for line in out.split())}


def decided(daemon: Daemon) -> dict[str, dict[str, int]]:
    with Store.open(daemon.db, create=False) as store:
        return {d.job_id: d.gpus_per_node for d in store.decisions() if d.action in ("placed", "replanned")}


def test_every_task_of_an_array_runs_where_logged_and_other_leases_carry_on(idle_cluster, tmp_path):
    slurm = idle_cluster
    array = submit(slurm, "--array=0-5", "--gres=gpu:1", managed="compass")
    # A task Slurm splits off (any update of one task does) is a job of its own: it counts too.
    subprocess.run(["scontrol", "update", f"JobId={array}_4", "TimeLimit=600"], check=True)
    big = subprocess.run(["sbatch", "--parsable", "--output=/dev/null", "--comment=compass", "--begin=now+20",
                          "--nodes=8", "--gpus-per-node=8", "--wrap", "sleep 300"],
                         check=True, capture_output=True, text=True).stdout.strip()
    slurm.submitted.append(big)
    backend = CliBackend()
    begin = backend.read_state().job(big).eligible_time
    daemon = make_daemon(tmp_path)
    report = daemon.cycle()
    tasks = [f"{array}_{t}" for t in range(6)]
    assert sorted(d.job_id for d in report.decisions) == sorted(tasks)
    assert all(d.action == "placed" for d in report.decisions) and report.errors == []
    # the 64-GPU job waits (the array holds 6 GPUs): its lease was renewed despite the array
    assert backend.read_state().job(big).eligible_time >= begin + LEASE - 20 - 5
    seen = wait_running(backend, tasks)
    assert {t: seen.get(t) for t in tasks} == decided(daemon)
    report = daemon.cycle()
    assert report.decisions == [] and report.adopted == [] and report.errors == []


def test_a_throttled_array_gets_a_decision_for_every_task_in_turn(idle_cluster, tmp_path):
    slurm = idle_cluster
    array = submit(slurm, "--array=0-4%2", "--gres=gpu:2", managed="compass", seconds=3)
    daemon = make_daemon(tmp_path)
    backend = CliBackend()
    tasks = [f"{array}_{t}" for t in range(5)]
    running_at_once = 0
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        report = daemon.cycle()
        assert report.skipped is None and [e for e in report.errors if e.kind != "mismatch"] == []
        states = squeue_all(array)
        running_at_once = max(running_at_once, sum(1 for s, _ in states.values() if s == "RUNNING"))
        if all(states.get(t, ("",))[0] == "COMPLETED" for t in tasks):
            break
        time.sleep(1)
    states = squeue_all(array)
    assert all(states[t][0] == "COMPLETED" for t in tasks), states
    assert running_at_once <= 2
    logged = decided(daemon)
    assert sorted(logged) == sorted(tasks)
    assert {t: states[t][1] for t in tasks} == {t: next(iter(logged[t])) for t in tasks}  # ran where logged
    assert not [j.id for j in backend.read_state().jobs if j.held and j.pending]


def test_an_exclusive_job_is_decided_and_logged_as_owning_its_node(idle_cluster, tmp_path):
    job = submit(idle_cluster, "--exclusive", "--gres=gpu:2", managed="compass")
    daemon = make_daemon(tmp_path)
    report = daemon.cycle()
    [decision] = report.decisions
    assert decision.job_id == job and list(decision.gpus_per_node.values()) == [8] and decision.request == "1x8"
    assert wait_running(CliBackend(), [job])[job] == decision.gpus_per_node
    report = daemon.cycle()
    assert report.errors == [] and report.adopted == [] and report.decisions == []


def test_a_job_left_to_slurm_gets_back_the_request_its_pin_changed_and_runs_as_asked(idle_cluster):
    """A pin sets a job's node count and GPUs per node (9 GPUs as 3 nodes of 3: engine/shape.py); Slurm may park
    that form for good (a partition's or QOS's node limit). The daemon puts back the request as asked in the line
    that leaves the job unpinned, and Slurm takes it and runs the job as it would have: --gpus=9 on at most the
    two nodes that hold it."""
    backend = CliBackend()
    job = submit(idle_cluster, "--gpus=9", managed="compass")
    [asked] = [j for j in backend.read_state().jobs if j.id == job]
    names = [n.name for n in backend.read_state().nodes if n.gpus == 8][:3]
    assert backend.scontrol_lines([update_argv(job, names, 3)]) == [None]
    [pinned] = [j for j in backend.read_state().jobs if j.id == job]
    assert (pinned.num_nodes, pinned.gpus_per_node, pinned.gpus_per_job) == (3, 3, None)
    assert backend.scontrol_lines([unpin_argv(job, Asked.of(asked, 8), start_now=True)]) == [None]
    ran = wait_running(backend, [job])[job]
    assert sum(ran.values()) == 9 and len(ran) <= 2, ran


def test_memory_per_gpu_keeps_a_second_job_off_a_node_without_the_memory(idle_cluster, tmp_path):
    """Nodes have 250 GB: two --gpus=2 --mem-per-gpu=100G jobs cannot share one, whatever their GPUs say,
    and the second one's cycle may come before Slurm has started the first where it was pinned."""
    slurm = idle_cluster
    daemon = make_daemon(tmp_path)
    backend = CliBackend()
    first = submit(slurm, "--gpus=2", "--mem-per-gpu=100G", managed="compass")
    [placed] = daemon.cycle().decisions
    second = submit(slurm, "--gpus=2", "--mem-per-gpu=100G", managed="compass")
    report = daemon.cycle()  # the first may still be pending on its node: its 200 GB count as taken
    [decision] = report.decisions
    assert decision.job_id == second and set(decision.gpus_per_node).isdisjoint(placed.gpus_per_node)
    seen = wait_running(backend, [first, second])
    assert {first: seen.get(first), second: seen.get(second)} == {first: placed.gpus_per_node,
                                                                  second: decision.gpus_per_node}


class StartsBetweenReads(CliBackend):
    """Reads as the daemon does, but once ``job`` is set, waits after the first of the job and node reads until
    Slurm runs it: the job starts between the two, whichever comes first."""

    def __init__(self) -> None:
        super().__init__(narrow=None, lines=None)
        self.job: str | None = None

    def _then_started(self, read):
        job, self.job = self.job, None
        if job is not None:
            assert wait_running(CliBackend(), [job]).get(job), f"job {job} did not start"
        return read

    def read_jobs(self):
        return self._then_started(super().read_jobs())

    def read_nodes(self):
        return self._then_started(super().read_nodes())


def test_a_job_starting_between_the_reads_still_takes_its_memory(idle_cluster, tmp_path):
    """The first job's 200 GB count on its node whether the cycle reads it pending (pinned there) or running:
    read between the job read and the node read, its start must not leave the node looking free."""
    slurm = idle_cluster
    backend = StartsBetweenReads()
    daemon = make_daemon(tmp_path, backend)
    first = submit(slurm, "--gpus=2", "--mem-per-gpu=100G", managed="compass")
    [placed] = daemon.cycle().decisions
    second = submit(slurm, "--gpus=2", "--mem-per-gpu=100G", managed="compass")
    backend.job = first
    [decision] = daemon.cycle().decisions
    assert backend.job is None  # the cycle did read across the start
    assert decision.job_id == second and set(decision.gpus_per_node).isdisjoint(placed.gpus_per_node)
    seen = wait_running(backend, [second])
    assert seen.get(second) == decision.gpus_per_node


class ReleasedBetweenReads(CliBackend):
    """Reads as the daemon does, but once ``job`` (held) is set, releases it after the job read and waits until
    Slurm runs it: it starts between the job read and the node read, unseen by the first."""

    def __init__(self) -> None:
        super().__init__(narrow=None, lines=None)
        self.job: str | None = None

    def read_jobs(self):
        jobs, job, self.job = super().read_jobs(), self.job, None
        if job is not None:
            subprocess.run(["scontrol", "release", job], check=True)
            assert wait_running(CliBackend(), [job]).get(job), f"job {job} did not start"
        return jobs


def test_no_job_is_pinned_where_a_job_started_after_the_job_read_took_the_gpus(idle_cluster, tmp_path):
    """A foreign job starts on node01 after the cycle's job read: node01 looks empty to the engine, but the node
    read counts 7 GPUs in use there, so the 2-GPU job goes elsewhere and starts at once."""
    slurm = idle_cluster
    backend = ReleasedBetweenReads()
    daemon = make_daemon(tmp_path, backend)
    foreign = slurm.sbatch("--hold", "--gpus=7", "--nodelist=node01")
    job = submit(slurm, "--gpus=2", managed="compass")
    backend.job = foreign
    report = daemon.cycle()
    assert backend.job is None and daemon.observation.crowded == frozenset({"node01"})
    [decision] = report.decisions
    assert decision.job_id == job and "node01" not in decision.gpus_per_node
    assert wait_running(backend, [job]).get(job) == decision.gpus_per_node
    report = daemon.cycle()  # read running now: adopted, and node01 counts as the engine's again
    assert foreign in report.adopted and daemon.observation.crowded == frozenset()


def test_a_job_asking_for_all_of_a_node_s_memory_goes_where_none_is_taken(idle_cluster, tmp_path):
    """--mem=0 is all of each node's memory: Slurm starts such a job only where no memory is allocated, so the
    daemon must not put it beside a running job, where its GPUs alone would fit best."""
    slurm = idle_cluster
    backend = CliBackend()
    foreign = submit(slurm, "--gpus=1")
    held = wait_running(backend, [foreign])[foreign]
    whole = submit(slurm, "--gpus=1", "--mem=0", managed="compass")
    daemon = make_daemon(tmp_path)
    assert backend.read_state().job(whole).memory_per_node_mb == 0  # as the daemon's own read says below
    report = daemon.cycle()
    assert daemon.observation.slurm_jobs[whole].memory_per_node_mb == 0
    [decision] = report.decisions
    assert decision.job_id == whole and set(decision.gpus_per_node).isdisjoint(held)
    assert wait_running(backend, [whole]).get(whole) == decision.gpus_per_node


def test_two_memory_per_gpu_jobs_decided_in_one_cycle_go_to_two_nodes(idle_cluster, tmp_path):
    """The same two jobs queued before one cycle: the engine counts GPUs only, the first decision's 200 GB count
    against the second all the same, and both run where decided."""
    slurm = idle_cluster
    daemon = make_daemon(tmp_path)
    backend = CliBackend()
    jobs = [submit(slurm, "--gpus=2", "--mem-per-gpu=100G", managed="compass") for _ in range(2)]
    report = daemon.cycle()
    placed = {d.job_id: d.gpus_per_node for d in report.decisions}
    assert sorted(placed) == sorted(jobs) and set(placed[jobs[0]]).isdisjoint(placed[jobs[1]])
    seen = wait_running(backend, jobs)
    assert {job: seen.get(job) for job in jobs} == placed


def test_a_job_waiting_for_its_dependency_stays_leased_and_is_placed_once_met(idle_cluster, tmp_path):
    slurm = idle_cluster
    backend = CliBackend()
    first = submit(slurm, "--gpus=1")
    slurm.wait(first, "RUNNING")
    then = submit(slurm, "--gpus=2", f"--dependency=afterany:{first}", managed="compass")
    leased = backend.read_state().job(then).eligible_time
    time.sleep(2)  # so that a renewed lease ends later than the wrapper's
    daemon = make_daemon(tmp_path)
    report = daemon.cycle()
    assert report.decisions == [] and daemon.observation.waiting == {then: "waits for its dependency"}
    assert backend.read_state().job(then).eligible_time >= leased + 2
    subprocess.run(["scancel", first], check=True)  # met: its lease, not the dependency, holds it now
    # Slurm says None for a moment, and may say Dependency again while the first job completes: wait for the reason
    # it keeps (seen in CI on 23.11: the cycle read the job while it still waited for its dependency)
    deadline = time.monotonic() + 30
    while (reason := backend.read_state().job(then).reason) != "BeginTime":
        assert time.monotonic() < deadline, f"job {then} still pending for {reason!r}, not its lease"
        time.sleep(0.5)
    decisions = daemon.cycle().decisions
    assert [d.job_id for d in decisions] == [then], (daemon.observation.skipped, daemon.observation.waiting)
    [decision] = decisions
    assert wait_running(backend, [then]).get(then) == decision.gpus_per_node


def test_a_begin_later_than_the_lease_is_placed_from_its_begin_time(idle_cluster, tmp_path):
    slurm = idle_cluster
    later = subprocess.run(["sbatch", "--parsable", "--output=/dev/null", "--comment=compass",
                            f"--begin=now+{3600 + LEASE}", "--gres=gpu:1", "--wrap", "sleep 300"],
                           check=True, capture_output=True, text=True).stdout.strip()
    soon = subprocess.run(["sbatch", "--parsable", "--output=/dev/null", "--comment=compass",
                           f"--begin=now+{10 + LEASE}", "--gres=gpu:1", "--wrap", "sleep 300"],
                          check=True, capture_output=True, text=True).stdout.strip()
    slurm.submitted += [later, soon]
    backend = CliBackend()
    begins = {j: backend.read_state().job(j).eligible_time for j in (later, soon)}
    daemon = make_daemon(tmp_path)
    report = daemon.cycle()
    assert report.decisions == [] and daemon.observation.skipped[later].startswith("waits for its begin time")
    assert {j: backend.read_state().job(j).eligible_time for j in (later, soon)} == begins  # no lease pulled in
    time.sleep(10)  # its begin has come
    report = daemon.cycle()
    assert [d.job_id for d in report.decisions] == [soon]
    assert soon in wait_running(backend, [soon])
    assert backend.read_state().job(later).eligible_time == begins[later]


def test_a_migrated_job_s_latest_decision_names_where_slurm_runs_it(idle_cluster, tmp_path):
    """Compact drains a partial pool node; `compass decisions --json --job J` ends with the move."""
    slurm = idle_cluster
    backend = CliBackend()
    # Checkpoint-restartable 1-GPU jobs on two pool nodes: node01 holds 2, node02 holds 3.
    movable = [submit(slurm, "--gpus=1", "--nodelist=node01", managed="compass:migratable") for _ in range(2)]
    stay = [submit(slurm, "--gpus=1", "--nodelist=node02", managed="compass:migratable") for _ in range(3)]
    subprocess.run(["scontrol", "update", f"JobId={','.join(movable + stay)}", "StartTime=now"], check=True)
    assert all(j in wait_running(backend, movable + stay) for j in movable + stay)
    daemon = make_daemon(tmp_path, policy="compass", migrations_per_hour=100)  # Compact without a waiting job
    report = daemon.cycle()  # adopts all five, then Compact moves node01's two into node02: requeued
    assert sorted(report.adopted) == sorted(movable + stay)
    assert sorted(d.job_id for d in report.decisions if d.action == "migrated") == sorted(movable)
    assert sorted(m.job_id for m in until_migrated(daemon, movable) if m.status == "done") == sorted(movable)
    deadline = time.monotonic() + 60
    while not all(gpus_by_job(backend).get(j) == {"node02": 1} for j in movable):
        assert time.monotonic() < deadline, gpus_by_job(backend)
        time.sleep(0.5)
    daemon.cycle()  # sees them running where it moved them
    for job in movable:
        done = subprocess.run([*COMPASS, "decisions", "--json", "--job", job, "--db", daemon.db],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        last = json.loads(done.stdout)[-1]
        assert (last["action"], last["nodes"], last["from"]) == ("migrated", ["node02"], ["node01"])
        assert last["gpus_per_node"] == gpus_by_job(backend)[job] == {"node02": 1}


def until_migrated(daemon: Daemon, jobs: list[str], timeout: float = 60.0) -> list:
    """Cycles (a second apart) until the migrations of ``jobs``, requeued by an earlier cycle, are done or failed;
    their records."""
    done, deadline = [], time.monotonic() + timeout
    while {m.job_id for m in done} < set(jobs):
        assert time.monotonic() < deadline, f"migrations of {jobs} not over: {done}"
        time.sleep(1)
        done += [m for m in daemon.cycle().migrations if m.job_id in jobs]
    return done


def test_a_migration_completes_over_cycles_and_no_cycle_waits_for_it(idle_cluster, tmp_path):
    """A job whose steps take KillWait to end (they ignore SIGTERM): the cycle that requeues it returns at once,
    polling nothing; a later cycle that reads it pending re-pins and releases it, and it runs on its new node."""
    slurm = idle_cluster
    backend = CliBackend()
    slow = [submit(slurm, "--gpus=1", "--nodelist=node01", managed="compass:migratable", wrap="trap '' TERM; sleep 300")]
    stay = [submit(slurm, "--gpus=1", "--nodelist=node02", managed="compass:migratable") for _ in range(3)]
    subprocess.run(["scontrol", "update", f"JobId={','.join(slow + stay)}", "StartTime=now"], check=True)
    assert all(j in wait_running(backend, slow + stay) for j in slow + stay)
    asked: list[list[str]] = []
    runner = backend.runner
    backend.runner = lambda argv, timeout: asked.append(argv) or runner(argv, timeout)
    daemon = make_daemon(tmp_path, backend, policy="compass", migrations_per_hour=100)
    started = time.monotonic()
    report = daemon.cycle()  # adopts the four; Compact moves the slow job into node02: requeued
    took = time.monotonic() - started
    assert [(d.job_id, d.action, d.nodes) for d in report.decisions] == [(slow[0], "migrated", ("node02",))]
    assert report.migrations == [] and daemon.book.state(slow[0]) is JobState.REQUEUED
    assert took < 5, f"the cycle took {took:.1f} s"  # the old wait polled for up to 30 s
    assert not [argv for argv in asked if argv[0] == "squeue" and any(a.startswith("--jobs=") for a in argv)]
    job = backend.read_state().job(slow[0])
    assert job.held and job.required_nodes != ("node02",), job  # not re-pinned by the cycle that requeued it
    (moved,) = until_migrated(daemon, slow)
    assert (moved.src, moved.dst, moved.status) == ("node01", "node02", "done")
    assert wait_running(backend, slow)[slow[0]] == {"node02": 1}
    assert not [j.id for j in backend.read_state().jobs if j.held and j.id in slow + stay]
    with Store.open(daemon.db, create=False) as store:
        last = store.decisions(job=slow[0])[-1]
    assert (last.action, last.nodes, last.from_nodes) == ("migrated", ("node02",), ("node01",))


def test_a_daemon_stopped_before_a_re_pin_releases_the_job_unpinned(idle_cluster, tmp_path):
    """A job requeued to move it, pending and held again when the daemon stops, is released with its node list
    cleared: the nodes it ran on were the engine's to hand on, and a pin never expires, so Slurm places it afresh.
    (Its node list here is its user's --nodelist, as a daemon's placement would have left it.)"""
    slurm = idle_cluster
    backend = CliBackend()
    slow = submit(slurm, "--gpus=1", "--nodelist=node01", managed="compass:migratable", wrap="trap '' TERM; sleep 300")
    stay = [submit(slurm, "--gpus=1", "--nodelist=node02", managed="compass:migratable") for _ in range(3)]
    subprocess.run(["scontrol", "update", f"JobId={','.join([slow, *stay])}", "StartTime=now"], check=True)
    assert all(j in wait_running(backend, [slow, *stay]) for j in [slow, *stay])
    daemon = make_daemon(tmp_path, policy="compass", migrations_per_hour=100)
    report = daemon.cycle()  # Compact moves the slow job into node02: requeued, its steps ending after KillWait
    assert [(d.job_id, d.action) for d in report.decisions] == [(slow, "migrated")]
    deadline = time.monotonic() + 90
    while not ((job := backend.read_state().job(slow)).pending and job.held):
        assert time.monotonic() < deadline, job
        time.sleep(0.5)
    assert job.required_nodes == ("node01",)
    daemon.close()
    job = backend.read_state().job(slow)
    assert not job.held and job.required_nodes == (), job
    with Store.open(daemon.db, create=False) as store:
        last = store.decisions(job=slow)[-1]
    assert (last.action, last.reason) == ("failed", "compact; the daemon stopped before it was re-pinned")


def test_the_look_between_cycles_sees_a_new_managed_job_and_one_that_ended(idle_cluster, tmp_path):
    slurm = idle_cluster
    backend = CliBackend()
    short = submit(slurm, "--gpus=1")
    assert short in wait_running(backend, [short])
    daemon = make_daemon(tmp_path)
    assert daemon.cycle().adopted == [short]
    assert not daemon._news()  # the look agrees with the cycle's read: nothing new
    waiting = submit(slurm, "--gpus=1", managed="compass")
    assert daemon._news() and not daemon._news()  # the new managed job, told once
    subprocess.run(["scancel", short], check=True)
    deadline = time.monotonic() + 30
    while not daemon._news():  # until the ended job has left its node
        assert time.monotonic() < deadline, f"the look never saw job {short} end"
        time.sleep(0.3)
    assert waiting in backend.look().pending and short not in backend.look().holding
    subprocess.run(["sdiag", "--reset"], capture_output=True, check=True)
    look = backend.look()  # from 24.11 on ids and states alone: slurmctld packs no job whole for it
    served = rpcs_served(("REQUEST_JOB_INFO", "REQUEST_JOB_STATE"))
    assert served == ({"REQUEST_JOB_INFO": 0, "REQUEST_JOB_STATE": 1} if not look.comments else
                      {"REQUEST_JOB_INFO": 1, "REQUEST_JOB_STATE": 0})
    assert look.comments == (backend.version() < "24.11")


def test_a_stopping_daemon_lets_go_of_a_pin_slurm_holds_and_never_shrinks_a_job_started_since(idle_cluster,
                                                                                             tmp_path):
    """A maintenance reservation in 30 minutes, made while the jobs wait out their leases: Slurm takes the pin of a
    2-hour job and does not start it, and starts a 5-minute one. The daemon stops with both still placed in its
    book: the held job's pin is cleared and its request put back (--gpus=12, not the pin's 2 nodes of 6), so Slurm
    runs it as asked once the reservation goes; the job that started (--gpus=9 as 3 nodes of 3) refuses the same
    line whole and keeps its three nodes (its request's NumNodes=2 alone would shrink it to two)."""
    backend = CliBackend()
    short = submit(idle_cluster, "--gpus=9", "--time=5", managed="compass")
    long = submit(idle_cluster, "--gpus=12", "--time=120", managed="compass")
    name = f"compass-later-{time.monotonic_ns()}"
    subprocess.run(["scontrol", "create", "reservation", f"ReservationName={name}", "StartTime=now+1800",
                    "Duration=10", "Nodes=ALL", "Users=root", "Flags=MAINT,IGNORE_JOBS"],
                   check=True, capture_output=True, text=True)
    try:
        asked = {j.id: (j.num_nodes, j.gpus_per_job, j.gpus_per_node) for j in backend.read_state().jobs
                 if j.id in (short, long)}
        assert asked == {short: (2, 9, None), long: (2, 12, None)}
        daemon = make_daemon(tmp_path)
        report = daemon.cycle()
        assert {d.job_id: len(set(d.nodes)) for d in report.decisions} == {short: 3, long: 2}
        ran = wait_running(backend, [short])[short]
        assert sum(ran.values()) == 9 and len(ran) == 3, ran
        time.sleep(2)
        [held] = [j for j in backend.read_state().jobs if j.id == long]
        assert held.pending and len(held.required_nodes) == 2, held
        assert daemon.book.placed.keys() == {short, long}  # no cycle read since: both still placed
        daemon.stop.set()
        daemon.run(1)
        jobs = {j.id: j for j in backend.read_state().jobs if j.id in (short, long)}
        assert dict(jobs[short].gpus_alloc) == ran and jobs[short].running
        assert jobs[long].pending and jobs[long].required_nodes == ()
        assert (jobs[long].num_nodes, jobs[long].gpus_per_job, jobs[long].gpus_per_node) == asked[long]
        with Store.open(daemon.db, create=False) as store:
            assert [(d.job_id, d.action) for d in store.decisions() if d.action == "left"] == [(long, "left")]
    finally:
        subprocess.run(["scontrol", "delete", f"ReservationName={name}"], check=True, capture_output=True)
    ran = wait_running(backend, [long])[long]
    assert sum(ran.values()) == 12 and len(ran) <= 2, ran


def test_a_users_node_count_and_a_partial_node_list_are_left_to_slurm_and_run_as_asked(idle_cluster, tmp_path):
    """-N 2 --gpus=3: a pin of one node (one instance of 3) made Slurm shrink the job to one node and drop its
    second task. -w node05 -N 2: Slurm adds a node of its choice; the daemon took node05 for the whole set and
    waited for ever for a second node in it. -N 2 --gpus=9 and -n 2 --gpus=9 were pinned as 3 x 3: 22.05 refuses
    the first ("Node count specification invalid") and gives the second a third task; 24.11 gives
    -n 4 --ntasks-per-node=2 --gpus=9 pinned on 3 nodes 6 tasks. All are left to Slurm at once, and run on two
    nodes."""
    backend = CliBackend()
    counted = submit(idle_cluster, "-N", "2", "--gpus=3", managed="compass")
    tasks = submit(idle_cluster, "-n", "2", "--ntasks-per-node=1", "--gpus=3", managed="compass")
    partial = submit(idle_cluster, "-w", "node05", "-N", "2", "--gpus-per-node=1", managed="compass")
    bounded = submit(idle_cluster, "-N", "2", "--gpus=9", managed="compass")
    two_tasks = submit(idle_cluster, "-n", "2", "--gpus=9", managed="compass")
    per_node = submit(idle_cluster, "-n", "4", "--ntasks-per-node=2", "--gpus=9", managed="compass")
    asked = [counted, tasks, partial, bounded, two_tasks, per_node]
    daemon = make_daemon(tmp_path)
    try:
        report = daemon.cycle()
        assert {d.job_id: d.action for d in report.decisions} == dict.fromkeys(asked, "left")
        ran = wait_running(backend, asked)
        assert len(ran[counted]) == 2 and sum(ran[counted].values()) == 3, ran
        assert len(ran[tasks]) == 2 and sum(ran[tasks].values()) == 3, ran
        assert len(ran[partial]) == 2 and "node05" in ran[partial], ran
        assert len(ran[bounded]) == 2 and sum(ran[bounded].values()) == 9, ran
        assert len(ran[two_tasks]) == 2 and sum(ran[two_tasks].values()) == 9, ran
        jobs = {j.id: j for j in backend.read_state().jobs}
        assert (jobs[counted].num_nodes, jobs[tasks].num_nodes, jobs[tasks].tasks) == (2, 2, 2)
        assert (jobs[two_tasks].num_nodes, jobs[two_tasks].tasks) == (2, 2)
        assert (jobs[per_node].num_nodes, jobs[per_node].tasks, jobs[per_node].tasks_per_node) == (2, 4, 2)
    finally:
        daemon.close()
