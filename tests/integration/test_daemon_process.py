"""`compass daemon` as a real process on each Slurm release, with the real wrapper and the admin CLI.

`compass doctor` passes against it, wrapper jobs run exactly where `compass decisions` says, and a
GPU job submitted with plain sbatch is adopted where Slurm put it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from compass_slurm.slurm.cli_backend import CliBackend

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "faults"))  # the daemon-process harness
from harness import COMPASS, WRAPPER, DaemonProcess, until  # noqa: E402

pytestmark = pytest.mark.slurm


@pytest.fixture
def daemon(idle_cluster, tmp_path: Path) -> Iterator[DaemonProcess]:
    process = DaemonProcess(tmp_path / "daemon", lease=60, interval=1.0)
    process.start()
    yield process
    process.stop()


def compass(daemon: DaemonProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*COMPASS, *args], capture_output=True, text=True, env=daemon.env, timeout=60)


def wrapper(daemon: DaemonProcess, slurm, *args: str) -> str:
    # this is about where the daemon puts wrapper jobs: a loaded machine must not push them to the fallback
    # (tests/faults covers that path), so the wrapper gets more than its 1 s to reach the daemon
    env = {**daemon.env, "COMPASS_WRAPPER_TIMEOUT": "20"}
    done = subprocess.run([sys.executable, str(WRAPPER), "--parsable", "--output=/dev/null", *args,
                           "--wrap", "sleep 300"], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    slurm.submitted.append(done.stdout.strip().split(";")[0])
    return slurm.submitted[-1]


def test_doctor_passes(daemon, dev_cluster):
    done = compass(daemon, "doctor", "--json")
    doc = json.loads(done.stdout)
    assert done.returncode == 0 and doc["ok"], doc
    checks = {c["name"]: c["detail"] for c in doc["checks"]}
    assert checks["Slurm version"].startswith(f"Slurm {dev_cluster.release}.")
    nodes = "sinfo --json" if dev_cluster.release == "22.05" else "sinfo --Node --json"
    jobs = "scontrol show job --details --oneliner, each line parsed once" if dev_cluster.release < "24.11" else (
        "squeue --json of the jobs whose line in the narrow read")
    assert checks["--json support"].startswith(f"JSON: nodes by {nodes}, jobs by {jobs}"), checks


def test_wrapper_jobs_run_where_compass_decisions_says(daemon, idle_cluster):
    jobs = [wrapper(daemon, idle_cluster, *args) for args in (
        ["--gpus=1"], ["--migratable", "--gpus=2"], ["--gpus=4"], ["--gpus=8"], ["--nodes=2", "--gpus-per-node=3"],
    )]
    backend = CliBackend()
    running = until(lambda: (seen := {j.id: dict(j.gpus_alloc) for j in backend.read_state().jobs
                                      if j.running and j.gpus_alloc}) and all(j in seen for j in jobs) and seen,
                    60, "the wrapper jobs run")
    done = compass(daemon, "decisions", "--json")
    assert done.returncode == 0, done.stderr
    decided = {d["job_id"]: d["gpus_per_node"] for d in json.loads(done.stdout) if d["action"] == "placed"}
    assert {j: decided.get(j) for j in jobs} == {j: running[j] for j in jobs}


def test_plain_sbatch_gpu_jobs_are_adopted(daemon, idle_cluster):
    job = idle_cluster.sbatch("--gpus=3")
    node = idle_cluster.wait(job, "RUNNING")
    daemon.wait_cycles(2)
    assert f"adopted job {job} (1x3, " in daemon.text() and f" on {node}" in daemon.text()
    done = compass(daemon, "decisions", "--job", job, "--json")
    assert done.returncode == 0 and json.loads(done.stdout) == []  # adopted, not placed
    time.sleep(1)
    assert idle_cluster.wait(job, "RUNNING") == node  # and left where Slurm put it
