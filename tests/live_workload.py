"""A timed workload on a real dev cluster, through the wrapper (with the daemon) or plain sbatch, measured.

Shared by tests/scenarios and the benchmarks that run on the dev cluster
(benchmarks/starvation.py, benchmarks/sim_vs_slurm.py). Two clusters may run side
by side (each ``Cluster`` has its own directory and port, and every Slurm client
call gets that cluster's SLURM_CONF), so a workload under the daemon and the same
workload under plain Slurm share one noisy machine at the same time.

Each job records itself: its script appends the time it started (and its nodes)
and the time it ended to marker files named after the job, so waits and
completion times are exact even after Slurm forgets the job (MinJobAge). A
migratable job checkpoints the seconds it has slept, so after a requeue it sleeps
only what is left, as a checkpoint-restartable job would.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from devcluster import DEV_CLUSTER

REPO = Path(__file__).resolve().parents[1]
WRAPPER = REPO / "scripts" / "compass-sbatch"


class Cluster:
    """A dev cluster in ``root`` with slurmctld on ``port`` (its nodes use the ports above it)."""

    def __init__(self, root: Path, port: int, nodes: int, gpus_per_node: int = 8) -> None:
        self.root, self.port, self.nodes, self.gpus_per_node = Path(root), port, nodes, gpus_per_node
        self.env = {**os.environ, "COMPASS_DEV_DIR": str(self.root), "COMPASS_DEV_PORT": str(port),
                    "SLURM_CONF": str(self.root / "etc" / "slurm.conf")}

    def dev(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(DEV_CLUSTER), *args], capture_output=True, text=True, timeout=600, env=self.env)

    def start(self) -> Cluster:
        done = self.dev("start", "--nodes", str(self.nodes), "--gpus-per-node", str(self.gpus_per_node))
        if done.returncode != 0:
            raise RuntimeError(f"dev-cluster start in {self.root}: {done.stderr or done.stdout}")
        return self

    def stop(self) -> None:
        self.dev("stop")

    def backend(self):
        """A CLI backend whose commands talk to this cluster."""
        from compass_slurm.slurm.cli_backend import CliBackend

        def runner(argv: list[str], timeout: float) -> tuple[int, str, str]:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=self.env,
                                  stdin=subprocess.DEVNULL)
            return done.returncode, done.stdout, done.stderr

        return CliBackend(runner=runner)

    def idle(self, timeout: float = 120) -> None:
        """Wait until no GPU is in use (jobs of an earlier run finished or cancelled)."""
        backend = self.backend()
        deadline = time.monotonic() + timeout
        while any(n.gpus_used for n in backend.read_state().nodes):
            if time.monotonic() > deadline:
                raise RuntimeError(f"cluster {self.root} still busy after {timeout:.0f} s")
            time.sleep(0.5)


@dataclass(frozen=True)
class LiveJob:
    """A job of the workload: submitted ``submit`` seconds after the start, sleeps ``duration`` seconds."""

    name: str
    submit: float
    duration: int
    gpus_per_node: int
    nodes: int = 1
    time_limit_min: int = 2
    migratable: bool = False

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.nodes

    def sbatch_args(self, markers: Path) -> list[str]:
        shape = ([f"--nodes={self.nodes}", f"--gpus-per-node={self.gpus_per_node}"] if self.nodes > 1
                 else ["--nodes=1", f"--gpus={self.gpus_per_node}"])
        return [*shape, f"--job-name={self.name}", f"--time={self.time_limit_min}", "--output=/dev/null",
                "--parsable", "--wrap", self.script(markers)]

    def script(self, markers: Path) -> str:
        m = markers / self.name
        start = f'echo "$(date +%s.%N) $SLURM_JOB_NODELIST" >> {m}.start'
        end = f"date +%s.%N >> {m}.end"
        if not self.migratable:
            return f"{start}; sleep {self.duration}; {end}"
        # checkpointed: a requeued run sleeps only the seconds not yet done
        return (f"{start}; d=$(cat {m}.ckpt 2>/dev/null || echo 0); "
                f"while [ $d -lt {self.duration} ]; do sleep 1; d=$((d+1)); echo $d > {m}.ckpt; done; {end}")


@dataclass
class Outcome:
    job: LiveJob
    submitted: float
    job_id: str = ""
    fallback: bool = False
    started: float | None = None
    ended: float | None = None
    starts: int = 0
    nodes: str = ""

    @property
    def wait(self) -> float | None:
        return None if self.started is None else self.started - self.submitted

    @property
    def jct(self) -> float | None:
        return None if self.ended is None else self.ended - self.submitted


@dataclass
class Run:
    """What one workload did on one cluster: per job, and the cluster sampled every ``poll`` seconds."""

    outcomes: dict[str, Outcome] = field(default_factory=dict)
    #: (seconds since the start, partial nodes, GPUs in use, jobs pending)
    samples: list[tuple[float, int, int, int]] = field(default_factory=list)
    began: float = 0.0
    finished: float = 0.0

    @property
    def unfinished(self) -> list[str]:
        return [name for name, o in self.outcomes.items() if o.ended is None]


#: how jobs reach Slurm: the real wrapper (needs the daemon's environment); sbatch exactly as the wrapper
#: runs it when the daemon answers (marker comment and lease, then the wrapper's "submitted" notice to the
#: daemon's socket, without the wrapper's Python start-up); plain sbatch
WAYS = ("wrapper", "marked", "plain")


def replay(cluster: Cluster, jobs: Sequence[LiveJob], markers: Path, *, way: str, env: Mapping[str, str] | None = None,
           lease: int = 60, concurrency: int = 4, poll: float = 1.0, finish_timeout: float = 600) -> Run:
    """Submit ``jobs`` on schedule the ``way`` given, sample the cluster meanwhile, wait until every job ended.

    ``env`` is the submitting environment (the daemon's for the wrapper); default: the cluster's.
    """
    from compass_slurm.slurm.state import marker_comment

    assert way in WAYS, way
    markers.mkdir(parents=True, exist_ok=True)
    run = Run()
    env = dict(env or cluster.env)
    command = [sys.executable, str(WRAPPER)] if way == "wrapper" else ["sbatch"]
    lock, stop = threading.Lock(), threading.Event()
    run.began = time.time()

    def submit(job: LiveJob) -> None:
        delay = run.began + job.submit - time.time()
        if delay > 0:
            time.sleep(delay)
        args = job.sbatch_args(markers)
        if way == "wrapper" and job.migratable:
            args = ["--migratable", *args]
        elif way == "marked":
            args = [f"--comment={marker_comment(job.migratable)}", f"--begin=now+{lease}", *args]
        submitted = time.time()
        done = subprocess.run([*command, *args], capture_output=True, text=True, env=env, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"submitting {job.name}: {done.stderr.strip()}")
        job_id = done.stdout.strip().split(";")[0]
        if way == "marked" and "COMPASS_SOCKET" in env:
            _notify(env["COMPASS_SOCKET"], job_id)
        with lock:
            run.outcomes[job.name] = Outcome(job, submitted, job_id, "submitted with plain sbatch" in done.stderr)

    sampler = threading.Thread(target=_sample, args=(cluster, run, stop, poll), daemon=True)
    sampler.start()
    try:
        with ThreadPoolExecutor(concurrency) as pool:
            list(pool.map(submit, sorted(jobs, key=lambda j: j.submit)))
        deadline = time.monotonic() + finish_timeout
        while time.monotonic() < deadline:
            _read_markers(run, markers)
            if not run.unfinished:
                break
            time.sleep(1)
    finally:
        stop.set()
        sampler.join()
    run.finished = time.time()
    _read_markers(run, markers)
    return run


def _notify(socket: str, job_id: str) -> None:
    """The wrapper's courtesy notice: the daemon runs a cycle now instead of at its next interval."""
    from compass_slurm.service import control

    try:
        control.request(socket, {"op": "submitted", "job": job_id}, 0.5)
    except (control.ControlUnavailable, OSError):
        pass


def _sample(cluster: Cluster, run: Run, stop: threading.Event, poll: float) -> None:
    backend = cluster.backend()
    while not stop.is_set():
        try:
            state = backend.read_state()
        except Exception:  # a slow or restarting slurmctld: the next sample will do
            stop.wait(poll)
            continue
        gpu_nodes = [n for n in state.nodes if n.gpus]
        partial = sum(1 for n in gpu_nodes if 0 < n.gpus_used < n.gpus)
        pending = sum(1 for j in state.jobs if j.pending)
        run.samples.append((state.read_at - run.began, partial, sum(n.gpus_used for n in gpu_nodes), pending))
        stop.wait(poll)


def _read_markers(run: Run, markers: Path) -> None:
    for name, outcome in run.outcomes.items():
        if outcome.ended is not None:
            continue
        starts = _lines(markers / f"{name}.start")
        if starts:
            outcome.started = float(starts[0].split()[0])
            outcome.nodes = starts[-1].split()[1] if len(starts[-1].split()) > 1 else ""
            outcome.starts = len(starts)
        ends = _lines(markers / f"{name}.end")
        if ends:
            outcome.ended = float(ends[-1])


def _lines(path: Path) -> list[str]:
    try:
        return [line for line in path.read_text().splitlines() if line.strip()]
    except OSError:
        return []


def cancel_all(cluster: Cluster) -> None:
    subprocess.run(["scancel", "--full", "--user=root"], capture_output=True, env=cluster.env, check=False)
