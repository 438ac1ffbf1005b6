"""The helper daemon against the real dev cluster: managed jobs run where it decided, foreign ones are adopted.

To keep off other people's clusters, run with COMPASS_DEV_DIR and COMPASS_DEV_PORT set
(scripts/dev-cluster and the conftest fixture honour both).
"""

from __future__ import annotations

import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from compass_slurm.config import Config
from compass_slurm.service.daemon import Daemon
from compass_slurm.slurm.cli_backend import CliBackend
from compass_slurm.service.store import Store

pytestmark = pytest.mark.slurm

LEASE = 60
COMPASS = [sys.executable, "-c", "from compass_slurm.cli import main; main()"]


def submit(slurm, *args: str, managed: str | None = None, seconds: int = 300) -> str:
    """sbatch as the wrapper does it for ``managed`` (the marker token), or plain sbatch."""
    extra = [f"--comment={managed}", f"--begin=now+{LEASE}"] if managed else []
    out = subprocess.run(
        ["sbatch", "--parsable", "--output=/dev/null", *extra, *args, "--wrap", f"sleep {seconds}"],
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


@pytest.fixture
def idle_cluster(slurm):
    """No GPU job left from earlier tests (they cancel theirs; Slurm takes a moment to free the nodes)."""
    backend = CliBackend()
    deadline = time.monotonic() + 30
    while any(n.gpus_used for n in backend.read_state().nodes):
        assert time.monotonic() < deadline, "the dev cluster still runs GPU jobs of someone else"
        time.sleep(0.5)
    return slurm


def make_daemon(tmp_path: Path, **config) -> Daemon:
    cfg = Config(anchors=str(tmp_path / "anchors"), lease=LEASE, interval=1, **config)
    return Daemon(cfg, CliBackend(), f"sqlite:///{tmp_path / 'log.db'}")


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


def test_dry_run_prints_the_commands_and_changes_nothing(idle_cluster, tmp_path):
    job = submit(idle_cluster, "--gpus=4", managed="compass")
    config = tmp_path / "config.toml"
    config.write_text(f'anchors = "{tmp_path / "anchors"}"\n')
    done = subprocess.run([*COMPASS, "daemon", "--once", "--dry-run", "--db", f"sqlite:///{tmp_path / 'log.db'}",
                           "--config", str(config)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"scontrol update JobId={job} ReqNodeList=node")
    assert lines[0].endswith(" NumNodes=1 TresPerJob= TresPerNode=gres:gpu:4 StartTime=now")
    seen = CliBackend().read_state().job(job)
    assert seen.pending and seen.required_nodes == () and seen.reason == "BeginTime"
    assert not (tmp_path / "anchors").exists()


def test_partial_nodes_stay_within_two_over_a_stream_of_short_jobs(idle_cluster, tmp_path):
    rng = random.Random(7)
    daemon = make_daemon(tmp_path, migrations_per_hour=1000)
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
    with_wcc = [s for s in samples if s.wcc]
    assert len(with_wcc) >= len(samples) * 0.8
    assert all(s.partial <= 2 for s in with_wcc), [(s.partial, s.phi_star) for s in with_wcc]
    assert max(s.gpus_used for s in samples) >= 16  # the stream really loaded the cluster
    with Store.open(daemon.db, create=False) as store:
        assert len(store.samples()) == len(samples)
        assert {d.job_id for d in store.decisions()} <= set(submitted)
    assert not [j.id for j in backend.read_state().jobs if j.held]  # no requeue left a job held
