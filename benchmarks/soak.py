"""A bounded soak on the dev cluster: many short GPU jobs through the wrapper while faults strike at random.

    scripts/dev-cluster start --nodes 64 --gpus-per-node 8
    eval "$(scripts/dev-cluster env)"
    .venv/bin/python benchmarks/soak.py [--jobs 2000] [--concurrency 8] [--fault-every 15] [--seed 1]

Each job (1, 2, 4 or 8 GPUs, sleep 1-5 s) has a unique name and appends its job id
and node to a marker file of that name when it ends, so completion is proven even
after Slurm forgets the job (MinJobAge). Faults, one every ``--fault-every`` seconds:
the daemon SIGKILLed and restarted, the daemon hung (SIGSTOP) for a few seconds,
slurmctld restarted, a node drained for a while. (slurmctld SIGKILLed loses what it
had not saved yet, submissions included: Slurm's own window, tested apart in
tests/faults/test_fault_slurmctld.py.) A submission that sbatch itself refused
(slurmctld restarting) is retried, as a user would. At the end every job must have
run exactly once, under the one id its submission printed, and where the decision
log says. A job Slurm started whose batch script then failed (slurmd purged it as a
stray at launch: "execve(): ... slurm_script: No such file or directory", exit 2; seen
once in 400 jobs on 22.05, right after a slurmctld restart) ran, where Slurm and the
log say, so it is counted apart, not as lost. Prints markdown; exit 1 when a job was
lost or duplicated or the log disagrees.
"""

from __future__ import annotations

import argparse
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path[:0] = [str(TESTS), str(TESTS / "faults")]  # devcluster.py, harness.py
from harness import DaemonProcess, SlurmJob, jobs_named, log_disagreements, restart_ctld, submit  # noqa: E402

SIZES = (1, 1, 1, 1, 2, 2, 4, 8)
LEASE = 30


@dataclass
class Tally:
    ids: dict[str, str] = field(default_factory=dict)  # job name -> the id its submission printed
    fallbacks: int = 0
    retries: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)


def submit_one(env: dict[str, str], name: str, markers: Path, rng: random.Random, tally: Tally) -> None:
    seconds, gpus = rng.randint(1, 5), rng.choice(SIZES)
    script = f'sleep {seconds}; echo "$SLURM_JOB_ID $SLURMD_NODENAME" >> {markers / name}'
    while True:
        done, _ = submit(env, f"--gpus={gpus}", "--nodes=1", f"--job-name={name}", "--output=/dev/null",
                         "--parsable", "--wrap", script)
        if done.returncode == 0:
            break
        with tally.lock:
            tally.retries += 1  # sbatch refused (slurmctld away): nothing was submitted, try again
        time.sleep(1)
    with tally.lock:
        tally.ids[name] = done.stdout.strip().split(";")[0]
        tally.fallbacks += "submitted with plain sbatch" in done.stderr


def inject(kind: str, daemon: DaemonProcess, rng: random.Random, nodes: int) -> None:
    if kind == "daemon-kill":
        daemon.kill()
        time.sleep(2)
        daemon.start()
    elif kind == "daemon-hang":
        daemon.signal(signal.SIGSTOP)
        time.sleep(3)
        daemon.signal(signal.SIGCONT)
    elif kind == "ctld-restart":
        restart_ctld()
    else:
        node = f"node{rng.randint(1, nodes):02d}"
        subprocess.run(["scontrol", "update", f"NodeName={node}", "State=DRAIN", "Reason=soak"], check=False)
        time.sleep(8)
        subprocess.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], check=False)


def faults(stop: threading.Event, every: float, daemon: DaemonProcess, rng: random.Random, nodes: int,
           tally: Tally) -> None:
    while not stop.wait(every):
        kind = rng.choice(("daemon-kill", "daemon-hang", "ctld-restart", "node-drain"))
        inject(kind, daemon, rng, nodes)
        tally.faults[kind] += 1


def script_failures(prefix: str, markers: Path, failed: dict[str, SlurmJob]) -> None:
    """Add to ``failed`` the jobs Slurm ran whose batch script failed (FAILED, no marker), while Slurm lists them."""
    try:
        jobs = jobs_named(prefix)
    except subprocess.CalledProcessError:
        return  # slurmctld away (a fault): asked again later
    for job in jobs:
        if job.state == "FAILED" and not (markers / job.name).exists():
            failed[job.name] = job


def node_count() -> int:
    out = subprocess.run(["sinfo", "--noheader", "--Node", "--format=%N"], capture_output=True, text=True,
                         check=True).stdout
    return len(set(out.split()))


def soak(jobs: int, concurrency: int, fault_every: float, seed: int, workdir: Path,
         finish_timeout: float = 240) -> dict:
    """Runs the soak; returns its figures (``lost``, ``duplicated``, ``disagreements`` must be 0)."""
    rng = random.Random(seed)
    nodes = node_count()
    markers = workdir / "markers"
    markers.mkdir(parents=True)
    daemon = DaemonProcess(workdir / "daemon", lease=LEASE).start()
    env = {**daemon.env}
    tally, stop = Tally(), threading.Event()
    prefix = f"soak{seed}-{int(time.time())}-"
    began = time.monotonic()
    failed: dict[str, SlurmJob] = {}  # job name -> Slurm's record (finished jobs stay listed for MinJobAge)
    injector = threading.Thread(target=faults, args=(stop, fault_every, daemon, random.Random(seed + 1), nodes,
                                                     tally), daemon=True)
    injector.start()
    try:
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            seeds = [rng.random() for _ in range(jobs)]
            list(pool.map(lambda i: submit_one(env, f"{prefix}{i}", markers, random.Random(seeds[i]), tally),
                          range(jobs)))
        submitted = time.monotonic() - began
        deadline = time.monotonic() + finish_timeout
        while len(list(markers.iterdir())) + len(failed) < jobs and time.monotonic() < deadline:
            script_failures(prefix, markers, failed)
            time.sleep(1)
    finally:
        stop.set()
        injector.join()
        if not daemon.running():
            daemon.start()
    finished = time.monotonic() - began
    daemon.wait_cycles(2)
    daemon.stop()
    ran: dict[str, list[list[str]]] = {}
    for marker in markers.iterdir():
        ran[marker.name] = [line.split() for line in marker.read_text().splitlines()]
    lost = sorted(name for name in tally.ids if name not in ran and name not in failed)
    duplicated = sorted(name for name, runs in ran.items() if len(runs) != 1 or runs[0][0] != tally.ids[name])
    duplicated += sorted(name for name, job in failed.items() if job.id != tally.ids.get(name))
    listed = subprocess.run(["squeue", "--noheader", "--states=all", "--format=%j"], capture_output=True, text=True,
                            check=True).stdout.split()
    duplicated += sorted(name for name, n in Counter(listed).items() if name.startswith(prefix) and n > 1)
    done_jobs = [SlurmJob(runs[0][0], name, "COMPLETED", "", runs[0][1], "") for name, runs in ran.items() if runs]
    done_jobs += failed.values()
    disagreements = log_disagreements(daemon.db, done_jobs, once=False)
    from compass_slurm.service.store import Store

    with Store.open(f"sqlite:///{daemon.db}", create=False) as store:
        decided = {d.job_id for d in store.decisions() if d.action in ("placed", "replanned")}
    return {
        "nodes": nodes, "jobs": jobs, "concurrency": concurrency, "submitted_s": submitted, "finished_s": finished,
        "fallbacks": tally.fallbacks, "retries": tally.retries, "faults": dict(tally.faults),
        "placed_by_daemon": len(decided & set(tally.ids.values())), "lost": lost, "duplicated": duplicated,
        "script_failed": sorted(f"{name} (job {job.id} on {job.nodes})" for name, job in failed.items()),
        "disagreements": disagreements, "daemon_starts": daemon.starts,
    }


def markdown(r: dict) -> str:
    faults = ", ".join(f"{k} {v}" for k, v in sorted(r["faults"].items())) or "none"
    return "\n".join([
        f"## Soak: {r['jobs']} jobs through the wrapper on {r['nodes']} nodes",
        "",
        "| figure | value |",
        "|---|---|",
        f"| jobs submitted ({r['concurrency']} at a time) | {r['jobs']} in {r['submitted_s']:.0f} s |",
        f"| all finished after | {r['finished_s']:.0f} s |",
        f"| faults injected | {sum(r['faults'].values())} ({faults}) |",
        f"| daemon (re)starts | {r['daemon_starts']} |",
        f"| placed by the daemon | {r['placed_by_daemon']} |",
        f"| wrapper fallbacks to plain sbatch | {r['fallbacks']} |",
        f"| submissions refused by sbatch and retried | {r['retries']} |",
        f"| jobs lost | {len(r['lost'])} |",
        f"| jobs run whose batch script Slurm lost at launch (not lost) | {len(r['script_failed'])} |",
        f"| jobs duplicated | {len(r['duplicated'])} |",
        f"| log/Slurm disagreements | {len(r['disagreements'])} |",
    ])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--fault-every", type=float, default=15.0, help="seconds between faults")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="compass-soak-") as tmp:
        result = soak(args.jobs, args.concurrency, args.fault_every, args.seed, Path(tmp))
    print(markdown(result))
    for key in ("lost", "duplicated", "disagreements", "script_failed"):
        if result[key]:
            print(f"\n{key}: {result[key][:20]}")
    return 1 if result["lost"] or result["duplicated"] or result["disagreements"] else 0


if __name__ == "__main__":
    sys.exit(main())
