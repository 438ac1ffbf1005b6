"""The daemon at a heterogeneous site (tests/data/layouts/mixed.toml: a100 and h100 8-GPU nodes, v100 4-GPU
nodes, features, three leaf switches under topology/tree), the job_submit hook installed.

GPU jobs sent with plain sbatch, with node features, typed GPUs, --switches and --contiguous, are placed by the
daemon and run where its log says, on nodes that satisfy them; a pin Slurm refuses is lifted within one cycle.
On every release under test, on test_layouts.py's clusters (the same layout, the hook installed).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from devcluster import LAYOUTS, Layout, releases_under_test, session_layout_cluster, use_cluster

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "faults"))  # the daemon-process harness
from harness import cancel, jobs_named, log_disagreements, pins, until  # noqa: E402
# the hook's fixtures (name, daemon) on this module's cluster
from test_submit_hook import Cluster, daemon, name, sbatch  # noqa: E402, F401

from compass_slurm.config import Config  # noqa: E402
from compass_slurm.layout import load_layout  # noqa: E402
from compass_slurm.service.daemon import Daemon  # noqa: E402
from compass_slurm.service.store import Store  # noqa: E402
from compass_slurm.slurm.cli_backend import CliBackend  # noqa: E402
from compass_slurm.slurm.hostlist import expand  # noqa: E402

pytestmark = pytest.mark.slurm
MIXED, SHARED = LAYOUTS / "mixed.toml", LAYOUTS / "shared.toml"
LAYOUT = load_layout(MIXED)
FEATURES = {name: set(g.features) for g in LAYOUT.groups for name in g.names}
LEAF = {name: g.switch for g in LAYOUT.groups for name in g.names}
ORDER = list(LAYOUT.nodes)


def _site(name: str, path: Path):
    """A session fixture ``name``: the layout ``path`` running on each release, the hook installed."""

    @pytest.fixture(scope="session", params=releases_under_test(), name=name)
    def site(request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
        with session_layout_cluster(path, request.param, job_submit_lua=True) as env:
            yield {**env, "release": request.param}

    return site


SITES = {"hetero": MIXED, "shared": SHARED}
_hetero, _shared = (_site(name, path) for name, path in SITES.items())


@pytest.fixture(autouse=True)
def _own_layout(request: pytest.FixtureRequest) -> None:
    """This test's layout running again when another fixture's cluster replaced it meanwhile."""
    for name in SITES.keys() & set(request.fixturenames):
        use_cluster(Layout.of_file(SITES[name], request.getfixturevalue(name)["release"], job_submit_lua=True))


@pytest.fixture
def cluster(hetero: dict[str, str]) -> Iterator[Cluster]:
    found = Cluster(hetero)
    yield found
    found.hook_config.unlink(missing_ok=True)  # the next tests see plain Slurm again
    found.reload()


#: (sbatch options, what each of the job's nodes must satisfy, what its set of nodes must)
JOBS = [
    (["--gres=gpu:1", "-C", "a100"], lambda f: "a100" in f, None),
    (["--gres=gpu:1", "-C", "a100|v100"], lambda f: "a100" in f or "v100" in f, None),
    (["--gres=gpu:1", "-C", "a100&80gb"], lambda f: {"a100", "80gb"} <= f, None),
    (["--gres=gpu:h100:2"], lambda f: "h100" in f, None),
    (["--gpus=v100:2"], lambda f: "v100" in f, None),
    (["-N2", "--gpus-per-node=8", "-C", "h100"], lambda f: "h100" in f, None),
    (["-N2", "--gpus-per-node=4", "--switches=1"], lambda f: True, lambda nodes: len({LEAF[n] for n in nodes}) == 1),
    (["-N2", "--gpus-per-node=8", "--contiguous"], lambda f: True,
     lambda nodes: sorted(ORDER.index(n) for n in nodes) == list(range(min(map(ORDER.index, nodes)),
                                                                       min(map(ORDER.index, nodes)) + 2))),
]


def test_gpu_jobs_of_every_form_are_placed_by_the_daemon_where_slurm_runs_them(daemon, cluster, name):
    ids = [sbatch(f"{name}{i}", *args) for i, (args, _, _) in enumerate(JOBS)]
    jobs = until(lambda: (js := jobs_named(name)) and len(js) == len(JOBS) and all(j.state == "RUNNING" for j in js)
                 and js, 90, f"{len(JOBS)} jobs running", poll=0.5)
    assert log_disagreements(daemon.db, jobs) == []
    with Store.open(f"sqlite:///{daemon.db}", create=False) as store:
        decisions = {d.job_id: d for d in store.decisions() if d.job_id in ids}
    for job_id, (args, node_ok, set_ok) in zip(ids, JOBS):
        (job,) = [j for j in jobs if j.id == job_id]
        nodes = tuple(expand(job.nodes))
        assert decisions[job_id].action == "placed", (args, decisions.get(job_id))
        assert set(decisions[job_id].nodes) == set(nodes), args
        assert all(node_ok(FEATURES[n]) for n in nodes), (args, nodes)
        assert set_ok is None or set_ok(nodes), (args, nodes)


class FeatureGone(CliBackend):
    """Between the daemon's read and its pins, the chosen nodes lose the feature the jobs ask for (an admin's
    scontrol update, or what the daemon does not read): Slurm refuses the pins, or takes them and parks the jobs.
    The first batch with pins only."""

    def __init__(self) -> None:
        super().__init__(narrow=None, lines=None)
        self.stripped: list[str] = []

    def scontrol_lines(self, lines):
        if not self.stripped:
            self.stripped = sorted(set(pins(lines)))
            for node in self.stripped:
                subprocess.run(["scontrol", "update", f"NodeName={node}", "AvailableFeatures=80gb",
                                "ActiveFeatures=80gb"], check=True, capture_output=True)
        return super().scontrol_lines(lines)


def in_process(tmp_path: Path, backend: CliBackend | None = None, **config) -> Daemon:
    """A daemon in this process, one cycle at a time (it reads as `compass daemon` does)."""
    return Daemon(Config(anchors=str(tmp_path / "anchors"), lease=60, interval=1, **config),
                  backend or CliBackend(narrow=None, lines=None), f"sqlite:///{tmp_path / 'log.db'}")


def managed(name: str, *args: str) -> str:
    """sbatch as the hook or the wrapper leaves a GPU job: marked, its lease set."""
    return subprocess.run(["sbatch", "--parsable", "--output=/dev/null", f"--job-name={name}", "--comment=compass",
                           "--begin=now+60", *args, "--wrap", "sleep 300"],
                          check=True, capture_output=True, text=True).stdout.strip().split(";")[0]


def fill(name: str, gpus: dict[str, int]) -> list[str]:
    """Plain sbatch jobs holding ``gpus`` GPUs on each node, running; their ids."""
    jobs = [subprocess.run(["sbatch", "--parsable", "--output=/dev/null", f"--job-name={name}fill", "-w", node,
                            f"--gres=gpu:{count}", "--wrap", "sleep 300"],
                           check=True, capture_output=True, text=True).stdout.strip().split(";")[0]
            for node, count in gpus.items()]
    until(lambda: (js := jobs_named(f"{name}fill")) and all(j.state == "RUNNING" for j in js) and len(js) == len(jobs),
          30, "the fillers running")
    return jobs


def cycled_until_running(daemon: Daemon, job_name: str):
    """Cycle ``daemon`` until the job named so runs (at most 40 s); the job as squeue shows it."""
    def runs() -> object:
        daemon.cycle()
        time.sleep(0.5)
        found = jobs_named(job_name)
        return found and found[0].state == "RUNNING" and found[0]

    return until(runs, 40, f"job {job_name} running")


@pytest.mark.parametrize(("gpus", "count"), [(1, 1), (8, 2)])
def test_pins_slurm_refuses_are_lifted_within_a_cycle_and_the_jobs_start_as_slurm_likes(hetero, tmp_path, name,
                                                                                        gpus, count):
    """One job, or two whole-node jobs pinned to two nodes in one batch (each refusal cleared on a line of its own:
    scontrol refuses a node-list update naming two jobs)."""
    backend = FeatureGone()
    daemon = in_process(tmp_path, backend)
    jobs = [managed(f"{name}{k}", f"--gres=gpu:{gpus}", "-C", "a100") for k in range(count)]
    try:
        until(lambda: daemon.cycle() and backend.stripped, 20, "the daemon pins the jobs (or Slurm refuses)")
        assert len(backend.stripped) == count
        refused = dict.fromkeys(jobs, 0)  # cycles that saw a job pinned and refused: the first of them lifts the pin

        def run() -> object:
            time.sleep(1.0)  # the daemon's interval: Slurm looks at the pinned jobs meanwhile
            daemon.cycle()
            for job in jobs:
                seen = daemon.observation.slurm_jobs.get(job)
                refused[job] += seen is not None and seen.reason == "BadConstraints" and bool(seen.required_nodes)
            found = jobs_named(name)
            return len(found) == count and all(j.state == "RUNNING" for j in found) and found

        found = until(run, 40, "the jobs run")
        assert max(refused.values()) <= 1, refused
        for ran in found:
            assert all(n not in backend.stripped and "a100" in FEATURES[n] for n in expand(ran.nodes)), ran
        with Store.open(daemon.db, create=False) as store:
            actions = {job: [d.action for d in store.decisions() if d.job_id == job] for job in jobs}
        # re-planned onto a node that has it (the daemon reads the node's features again), or left to Slurm (Slurm
        # refused the pin for what the daemon does not see); either way within the cycle after the pin
        for job, done in actions.items():
            assert done in (["placed", "replanned"], ["placed", "left"], ["failed", "left"]), (job, done)
        replanned = [ran for ran in found if actions[ran.id][-1] == "replanned"]
        assert log_disagreements(tmp_path / "log.db", replanned) == []
    finally:
        daemon.close()
        cancel(jobs)
        for node in backend.stripped:
            features = ",".join(sorted(FEATURES[node]))
            subprocess.run(["scontrol", "update", f"NodeName={node}", f"AvailableFeatures={features}",
                            f"ActiveFeatures={features}"], check=True, capture_output=True)


def test_mig_profiles_are_placed_and_shared_gpus_left_to_slurm(shared, tmp_path):
    """A node of one MIG profile is a GPU type (a group) of its own; nodes with gres/shard are Slurm's alone: a
    GPU job only they can hold is left to Slurm at once, and no GPU job is pinned there."""
    layout = load_layout(SHARED)
    mig, sharded, whole = (set(g.names) for g in layout.groups)
    daemon = in_process(tmp_path)
    name = f"shared{time.monotonic_ns()}-"
    jobs = {"mig": managed(name, "--gres=gpu:1g.10gb:2"), "a100": managed(name, "--gres=gpu:a100:2"),
            "shard-nodes": managed(name, "--gres=gpu:1", "-C", "shard")}
    try:
        def all_run() -> object:
            daemon.cycle()
            time.sleep(0.5)
            found = {j.id: j for j in jobs_named(name)}
            return len(found) == len(jobs) and all(j.state == "RUNNING" for j in found.values()) and found

        found = until(all_run, 60, "the three jobs running")
        with Store.open(daemon.db, create=False) as store:
            actions = {d.job_id: d for d in store.decisions()}
        where = {kind: set(expand(found[job].nodes)) for kind, job in jobs.items()}
        assert actions[jobs["mig"]].action == "placed" and where["mig"] <= mig
        assert actions[jobs["a100"]].action == "placed" and where["a100"] <= whole
        assert actions[jobs["shard-nodes"]].action == "left" and where["shard-nodes"] <= sharded
        assert "no GPU node of partition" in actions[jobs["shard-nodes"]].reason
        assert log_disagreements(tmp_path / "log.db", [found[jobs["mig"]], found[jobs["a100"]]]) == []
    finally:
        daemon.close()
        cancel(jobs.values())


def test_a_job_of_two_partitions_runs_within_one_of_them(hetero, tmp_path, name):
    """-p big,v100: node01 and one v100 node have 4 GPUs free each, the best fit over both partitions for 2 x 4;
    Slurm never starts a job on a node list spanning two of its partitions. The daemon pins it within big."""
    parts = {p.name: set(p.nodes) for p in LAYOUT.partitions}
    fillers = fill(name, {"node01": 4, "node09": 4, "node10": 4, "node11": 4})
    daemon = in_process(tmp_path)
    job = managed(f"{name}two", "-p", "big,v100", "-N2", "--gpus-per-node=4")
    try:
        ran = cycled_until_running(daemon, f"{name}two")
        nodes = set(expand(ran.nodes))
        assert nodes <= parts["big"], nodes
        with Store.open(daemon.db, create=False) as store:
            (decision,) = [d for d in store.decisions() if d.job_id == job]
        assert decision.action == "placed" and set(decision.nodes) == nodes
    finally:
        daemon.close()
        cancel([job, *fillers])


def test_a_marked_job_outside_the_managed_partitions_starts_at_once(hetero, tmp_path, name):
    """The wrapper marks and leases a GPU job whatever its partition. With the daemon managing big alone, a job of
    v100 waited for its lease to run out (60 s): it is left to Slurm in the first cycle and starts."""
    daemon = in_process(tmp_path, partitions=["big"])
    job = managed(f"{name}out", "-p", "v100", "--gpus=1")
    try:
        ran = cycled_until_running(daemon, f"{name}out")
        assert set(expand(ran.nodes)) <= {p.name: set(p.nodes) for p in LAYOUT.partitions}["v100"]
        with Store.open(daemon.db, create=False) as store:
            (decision,) = [d for d in store.decisions() if d.job_id == job]
        assert (decision.action, decision.reason) == ("left", "partition v100 is not managed")
    finally:
        daemon.close()
        cancel([job])


def test_shapes_its_nodes_could_never_hold_are_left_to_slurm_and_run(hetero, tmp_path, name):
    """-p v100 --gpus=5 (5 x 1 on as many 4-GPU nodes, of which v100 has 4) and --exclusive on gpu (8- and 4-GPU
    nodes; the engine's instance is an 8-GPU node) waited for ever on an idle cluster, their leases renewed. Both
    are left to Slurm in the first cycle, and run."""
    daemon = in_process(tmp_path)
    five = managed(f"{name}five", "-p", "v100", "--gpus=5")
    whole = managed(f"{name}excl", "--exclusive", "--gres=gpu:2")
    try:
        daemon.cycle()
        with Store.open(daemon.db, create=False) as store:
            actions = {d.job_id: (d.action, d.reason) for d in store.decisions()}
        assert actions[five] == ("left", "5 x 1 GPUs on as many nodes is more than the nodes it may use in one "
                                         "partition could ever hold: Slurm places its 5 GPUs"), actions
        assert actions[whole][0] == "left" and "different sizes" in actions[whole][1], actions
        ran = cycled_until_running(daemon, f"{name}five")
        assert set(expand(ran.nodes)) <= {p.name: set(p.nodes) for p in LAYOUT.partitions}["v100"]
        cycled_until_running(daemon, f"{name}excl")
    finally:
        daemon.close()
        cancel([five, whole])


def test_a_contiguous_window_never_spans_a_node_without_gpus(hetero, tmp_path, name):
    """node02c sits between node02 and node03 in Slurm's order of nodes. With node01 and node04 busy, node02 and node03
    are the only free a100 nodes, consecutive among the GPU nodes but not for Slurm: the daemon does not pin a
    -N2 --contiguous -C a100 job there; it waits, and runs on node03 and node04 once node04 frees."""
    shown = subprocess.run(["scontrol", "show", "node", "--oneliner"], check=True, capture_output=True,
                           text=True).stdout
    order = [line.split()[0].removeprefix("NodeName=") for line in shown.splitlines()]
    assert order[order.index("node02"):order.index("node03") + 1] == ["node02", "node02c", "node03"], order
    first, last = fill(name, {"node01": 8, "node04": 8})
    daemon = in_process(tmp_path)
    job = managed(f"{name}win", "-N2", "--gpus-per-node=8", "--contiguous", "-C", "a100")
    try:
        for _ in range(3):
            daemon.cycle()
            time.sleep(0.5)
        [waiting] = jobs_named(f"{name}win")
        with Store.open(daemon.db, create=False) as store:
            assert waiting.state == "PENDING" and [d for d in store.decisions() if d.job_id == job] == []
        cancel([last])
        ran = cycled_until_running(daemon, f"{name}win")
        assert set(expand(ran.nodes)) == {"node03", "node04"}
        with Store.open(daemon.db, create=False) as store:
            assert [(d.action, d.nodes) for d in store.decisions() if d.job_id == job] == [
                ("placed", ("node03", "node04"))]
    finally:
        daemon.close()
        cancel([job, first, last])
