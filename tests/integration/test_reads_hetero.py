"""What Slurm checks for a GPU job beyond GPUs, on the real cluster of every release: every read of the CLI backend
(squeue/sinfo --json, scontrol text, and the narrow read from 24.11 or the read by line before) gives the same
constraints, --prefer, --contiguous, --switches, --segment and typed requests of the jobs, and the same active
features of the nodes (set with scontrol update and put back afterwards); and on the layout clusters
(tests/data/layouts: several GPU types, MIG instances, shards, topology/tree and topology/block) the same nodes,
GPU types, shards and topology. (pyslurm: test_pyslurm_live.py compares its whole state, these fields too, with
the CLI backend's.)"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace

import pytest
from devcluster import LAYOUTS, Layout, releases_under_test, session_layout_cluster, use_cluster

from compass_slurm.slurm import parse_text
from compass_slurm.slurm.cli_backend import CliBackend

pytestmark = pytest.mark.slurm

#: node -> (available, active) features set for the test
FEATURES = {"node01": ("v100,fast", "v100"), "node02": ("v100,fast", "v100"), "node03": ("a100,80gb", "a100,80gb"),
            "node04": ("a100,80gb", "a100,80gb")}
#: sbatch options -> (constraint, prefer, contiguous, switches, segment), each job held
JOBS = [
    (("-C", "a100&80gb", "--prefer=80gb", "--contiguous", "--switches=1", "-N2", "--gpus-per-node=2"),
     ("a100&80gb", "80gb", True, 1, 0)),
    (("-C", "a100|v100", "--switches=2@10:00", "--gpus=1"), ("a100|v100", "", False, 2, 0)),
    (("-C", "[a100*2&v100*2]", "-N4", "--gpus=4"), ("[a100*2&v100*2]", "", False, 0, 0)),
    (("--prefer=a100|v100", "--gres=gpu:1", "--comment=compass a|b"), ("", "a100|v100", False, 0, 0)),
]


def scontrol(*args: str) -> str:
    return subprocess.run(["scontrol", *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def featured(idle_cluster):
    """Nodes 1-4 with features, as FEATURES says; each node's own put back afterwards."""
    before = {}
    for r in parse_text.records(scontrol("show", "node", "--oneliner"), "scontrol show node", "NodeName"):
        before[r.str("NodeName")] = (r.str("AvailableFeatures"), r.str("ActiveFeatures"))
    try:
        for node, (available, active) in FEATURES.items():
            scontrol("update", f"NodeName={node}", f"AvailableFeatures={available}", f"ActiveFeatures={active}")
        yield idle_cluster
    finally:
        for node in FEATURES:
            available, active = before[node]
            subprocess.run(["scontrol", "update", f"NodeName={node}", f"AvailableFeatures={available}",
                            f"ActiveFeatures={active}"], check=False)


def reads(release: str) -> dict[str, CliBackend]:
    found = {"json": CliBackend(narrow=False, lines=False), "text": CliBackend(json=False)}
    found["narrow" if release >= "24.11" else "lines"] = CliBackend(narrow=None, lines=None)
    return found


def test_every_read_agrees_on_constraints_and_features(featured, dev_cluster):
    slurm, release = featured, dev_cluster.release
    wanted = {slurm.sbatch("--hold", *options): expected for options, expected in JOBS}
    if release >= "25.11":  # --segment is shown from 25.05 (24.11 takes it and shows nothing)
        wanted[slurm.sbatch("--hold", "--segment=2", "-N2", "--gpus-per-node=1")] = ("", "", False, 0, 2)
    running = slurm.sbatch("-C", "a100", "--gpus-per-node=1")
    wanted[running] = ("a100", "", False, 0, 0)
    assert slurm.wait(running, "RUNNING") in ("node03", "node04")  # Slurm itself checks the constraint
    backends = reads(release)
    assert backends["narrow" if release >= "24.11" else "lines"].read_commands()["jobs"][0] in ("squeue", "scontrol")
    for read, backend in backends.items():
        jobs = {j.id: (j.constraint, j.prefer, j.contiguous, j.switches, j.segment)
                for j in backend.read_jobs() if j.id in wanted}
        if read == "json" and release == "22.05":  # its squeue --json prints no --switches
            assert jobs == {job_id: (*want[:3], 0, want[4]) for job_id, want in wanted.items()}
        else:
            assert jobs == wanted, read
        nodes = {n.name: n.features for n in backend.read_nodes() if n.name in FEATURES}
        assert nodes == {node: frozenset(active.split(",")) for node, (_, active) in FEATURES.items()}, read


def test_every_read_agrees_on_typed_gpu_requests(idle_cluster, dev_cluster):
    """--gres=gpu:TYPE:N, --gpus=TYPE:N and --gpus-per-node=TYPE:N set the job's GPU type in every read (the
    cluster's GPUs are untyped: the jobs are held, as Slurm may refuse to run them)."""
    slurm, release = idle_cluster, dev_cluster.release
    wanted = {}
    for option in ("--gres=gpu:a100:1", "--gpus=a100:2", "--gpus-per-node=a100:2"):
        try:
            wanted[slurm.sbatch("--hold", option)] = "a100"
        except subprocess.CalledProcessError as err:  # a release that refuses a type no node has
            assert "Invalid generic resource" in err.stderr or "gres" in err.stderr.lower(), err.stderr
    if not wanted:
        pytest.skip(f"Slurm {release} refuses GPU types no node has")
    for read, backend in reads(release).items():
        assert {j.id: j.gpu_type for j in backend.read_jobs() if j.id in wanted} == wanted, read


@pytest.fixture(scope="module", params=[(name, release) for name in ("mixed", "shared", "blocks")
                                        for release in releases_under_test() if name != "blocks" or release >= "23.11"])
def layout_cluster(request: pytest.FixtureRequest):
    name, release = request.param
    with session_layout_cluster(LAYOUTS / f"{name}.toml", release, job_submit_lua=True):
        use_cluster(Layout.of_file(LAYOUTS / f"{name}.toml", release, job_submit_lua=True))
        yield name, release


@pytest.fixture
def layout_jobs(layout_cluster) -> Iterator[list[str]]:
    """The ids of jobs submitted on the layout's cluster (running again: another test's may have replaced it),
    cancelled afterwards."""
    name, release = layout_cluster
    use_cluster(Layout.of_file(LAYOUTS / f"{name}.toml", release, job_submit_lua=True))
    submitted: list[str] = []
    yield submitted
    if submitted:
        subprocess.run(["scancel", *submitted], check=False)


def started(submitted: list[str], *options: str) -> None:
    """Submit a job and wait until it runs (Slurm placed it: each one has room)."""
    job = subprocess.run(["sbatch", "--parsable", "--output=/dev/null", *options, "--wrap", "sleep 300"], check=True,
                         capture_output=True, text=True).stdout.strip().split(";")[0]
    submitted.append(job)
    deadline = time.monotonic() + 30
    while "RUNNING" not in subprocess.run(["squeue", "--noheader", f"--jobs={job}", "--format=%T"],
                                          capture_output=True, text=True).stdout:
        assert time.monotonic() < deadline, f"job {job} ({' '.join(options)}) did not start"
        time.sleep(0.2)


def test_every_read_agrees_on_a_layout_cluster(layout_cluster, layout_jobs):
    (name, release), submitted = layout_cluster, layout_jobs
    jobs = {"mixed": [("-C", "a100", "--contiguous", "--switches=1", "-N2", "--gpus-per-node=8"), ("--gpus=h100:2",)],
            "shared": [("--gres=shard:3",), ("--gres=shard:4",), ("--gres=gpu:1g.10gb:2",)],
            "blocks": [("-N2", "--gpus-per-node=8", "-C", "h100"), ("--gpus=a100:2",)]}[name]
    for options in jobs:
        started(submitted, *options)
    states = {read: backend.read_state() for read, backend in reads(release).items()}
    first = states.pop("text")
    for read, state in states.items():  # (26.05's sinfo --json orders a node's partitions otherwise)
        assert [replace(n, partitions=tuple(sorted(n.partitions))) for n in state.nodes] == [
            replace(n, partitions=tuple(sorted(n.partitions))) for n in first.nodes], read
        assert (state.switches, state.blocks, state.block_sizes) == (first.switches, first.blocks, first.block_sizes)
        mine = {j.id: j for j in state.jobs if j.id in submitted}
        theirs = {j.id: j for j in first.jobs if j.id in submitted}
        if read == "json" and release == "22.05":  # (no --switches)
            theirs = {i: replace(j, switches=0) for i, j in theirs.items()}
        assert mine == theirs, read
    if name == "mixed":
        assert {s.name for s in first.switches} == {"leaf1", "leaf2", "leaf3", "spine"}
    elif name == "blocks":
        assert [b.name for b in first.blocks] == ["b1", "b2", "b3", "b4"]
    else:
        held = {n.name: (n.shards, n.gpus_shared) for n in first.nodes if n.shards_used}
        assert len(held) in (1, 2) and all(shards == 16 and shared >= 1 for shards, shared in held.values())
