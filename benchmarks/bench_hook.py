"""The job_submit/lua hook against plain Slurm and the wrapper, side by side on two dev clusters.

    .venv/bin/python benchmarks/bench_hook.py [--submissions 100] [--starts 30] [--nodes 8]
        [--hook-port 25817] [--plain-port 26317] [--parts latency,starts,shares]

Starts two dev clusters of the same layout (scripts/dev-cluster, under run/bench-hook and
run/bench-plain): "hook" with ``--job-submit-lua`` and a compass daemon writing the hook's
config; "plain" without a submit plugin, with a compass daemon for the wrapper to talk to.
Both daemons run with the defaults (interval 5 s, watch 0.5 s). Every measurement
alternates between the ways round by round (in a shuffled order), so the machine's load
falls on all alike:

1. sbatch latency: wall time of ``sbatch --parsable --hold --gpus=1`` on the plain cluster
   and on the hook cluster (daemon alive: the hook manages every one), and of the same job
   without GPUs on both (the hook returns at once: what is left is job_submit/lua's own
   cost), ``--submissions`` each;
2. sbatch to running: a 1-GPU job that writes its start time, on the idle plain cluster
   (Slurm places it) and on the idle hook cluster (the daemon places it), ``--starts`` each;
3. the share of GPU jobs managed (marker in the comment) under 1, 16 and 64 concurrent
   submitters, 64 held jobs per level: plain sbatch through the hook, against the wrapper
   (scripts/compass-sbatch) on the plain cluster.

``--parts`` runs only some of them (in that order). Prints markdown; every job is cancelled and both clusters
stopped at the end.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import statistics
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "faults")]
from harness import DaemonProcess, until  # noqa: E402

DEV_CLUSTER = REPO / "scripts" / "dev-cluster"
WRAPPER = REPO / "scripts" / "compass-sbatch"
HELD = ["--parsable", "--hold", "--gpus=1", "--output=/dev/null", "--wrap", "sleep 1"]
LEVELS = (1, 16, 64)
PER_LEVEL = 64
PARTS = ("latency", "starts", "shares")


class Cluster:
    def __init__(self, name: str, port: int, nodes: int, hook: bool, work: Path) -> None:
        self.name, self.hook = name, hook
        self.dir = REPO / "run" / f"bench-{name}"
        self.base = {**os.environ, "COMPASS_DEV_DIR": str(self.dir), "COMPASS_DEV_PORT": str(port)}
        self.start_args = ["start", "--nodes", str(nodes), "--gpus-per-node", "8", *(["--job-submit-lua"] * hook)]
        self.work = work / name
        self.env: dict[str, str] = {}
        self.daemon: DaemonProcess | None = None

    def dev(self, *args: str) -> str:
        done = subprocess.run([str(DEV_CLUSTER), *args], capture_output=True, text=True, env=self.base, timeout=600)
        if done.returncode != 0:
            sys.exit(f"dev-cluster {args[0]} ({self.name}): {done.stderr or done.stdout}")
        return done.stdout

    def start(self) -> None:
        self.dev(*self.start_args)
        exports = dict(line.removeprefix("export ").split("=", 1) for line in self.dev("env").splitlines())
        self.env = {**self.base, **exports, "COMPASS_CONFIG": "/dev/null"}
        self.env.pop("COMPASS_SOCKET", None)
        self.daemon = DaemonProcess(self.work, interval=5.0, extra_env={
            k: v for k, v in exports.items() if k in ("SLURM_CONF", "COMPASS_HOOK_CONFIG")})
        self.daemon.start()
        until(lambda: (self.work / "anchors").exists(), 60, f"{self.name}: the daemon's first cycle")
        self.env["COMPASS_SOCKET"] = str(self.daemon.socket)

    def stop(self) -> None:
        if self.daemon is not None:
            self.daemon.stop()
        self.cancel()
        self.dev("stop")

    def run(self, argv: list[str]) -> tuple[float, str]:
        elapsed, job, _ = self.submit(argv)
        return elapsed, job

    def submit(self, argv: list[str]) -> tuple[float, str, str]:
        """Wall time, job id and stderr of one submission."""
        began = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True, env=self.env, timeout=120)
        elapsed = time.perf_counter() - began
        if done.returncode != 0:
            sys.exit(f"{argv[0]} on {self.name}: {done.stderr.strip()}")
        return elapsed, done.stdout.strip().split(";")[0], done.stderr.strip()

    def comments(self) -> dict[str, str]:
        out = subprocess.run(["squeue", "--noheader", "--states=all", "--format=%i|%k"], capture_output=True,
                             text=True, env=self.env, check=True).stdout
        return dict(line.split("|", 1) for line in out.splitlines() if "|" in line)

    def cancel(self) -> None:
        subprocess.run(["scancel", f"--user={os.getuid()}"], env=self.env, capture_output=True)
        until(lambda: not subprocess.run(["squeue", "--noheader", "--states=PENDING,RUNNING,COMPLETING"],
                                         capture_output=True, text=True, env=self.env).stdout.strip(),
              60, f"{self.name}: the queue empties")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def latency(plain: Cluster, hook: Cluster, rounds: int) -> None:
    cpu_only = [arg for arg in HELD if arg != "--gpus=1"]
    ways = {  # label: (cluster, argv, the row it is compared with)
        "plain Slurm, GPU job": (plain, HELD, None),
        "with the hook, GPU job (managed)": (hook, HELD, "plain Slurm, GPU job"),
        "plain Slurm, job without GPUs": (plain, cpu_only, None),
        "with the hook, job without GPUs (the hook returns at once)": (hook, cpu_only, "plain Slurm, job without GPUs"),
    }
    times: dict[str, list[float]] = {label: [] for label in ways}
    managed = []
    order = random.Random(1)
    for _ in range(rounds):
        for label in order.sample(list(ways), len(ways)):  # a fresh order each round: no way always goes first
            cluster, argv, _ = ways[label]
            elapsed, job = cluster.run(["sbatch", *argv])
            times[label].append(elapsed)
            if label == "with the hook, GPU job (managed)":
                managed.append(job)
    comments = hook.comments()
    print(f"\n### sbatch latency ({rounds} held submissions per way, interleaved)\n")
    print("| sbatch | median (ms) | p99 (ms) | median vs plain Slurm |")
    print("|---|---:|---:|---:|")
    for label, (_, _, base) in ways.items():
        med = statistics.median(times[label])
        versus = f"{(med / statistics.median(times[base]) - 1) * 100:+.1f}%" if base else "-"
        print(f"| {label} | {med * 1000:.1f} | {pct(times[label], 0.99) * 1000:.1f} | {versus} |")
    print(f"\n{sum(comments.get(j) == 'compass' for j in managed)}/{rounds} of the hook's GPU submissions "
          "carried the marker.")


def starts(plain: Cluster, hook: Cluster, rounds: int, work: Path) -> None:
    waits: dict[str, list[float]] = {"plain Slurm (Slurm places it)": [], "hook + daemon (the daemon places it)": []}
    for i in range(rounds):
        for label, cluster in zip(waits, (plain, hook)):
            mark = work / f"start-{cluster.name}-{i}"
            mark.unlink(missing_ok=True)
            began = time.time()
            cluster.run(["sbatch", "--parsable", "--gpus=1", "--output=/dev/null",
                         "--wrap", f"date +%s.%N > {mark}"])
            until(lambda: mark.exists() and mark.read_text().strip(), 120, f"job {mark.name} ran")
            waits[label].append(float(mark.read_text()) - began)
    print(f"\n### sbatch to running ({rounds} 1-GPU jobs each on an idle cluster, one at a time, interleaved)\n")
    print("| way | median (s) | p90 (s) | max (s) |")
    print("|---|---:|---:|---:|")
    for label, values in waits.items():
        print(f"| {label} | {statistics.median(values):.2f} | {pct(values, 0.9):.2f} | {max(values):.2f} |")


def shares(plain: Cluster, hook: Cluster) -> None:
    print(f"\n### Share of GPU jobs managed ({PER_LEVEL} held 1-GPU submissions per level)\n")
    print("| concurrent submitters | hook (plain sbatch) | wrapper (scripts/compass-sbatch) |")
    print("|---:|---:|---:|")
    notes: Counter[str] = Counter()
    for level in LEVELS:
        row = []
        for cluster, argv in ((hook, ["sbatch", *HELD]), (plain, [sys.executable, str(WRAPPER), *HELD])):
            with ThreadPoolExecutor(max_workers=level) as pool:
                runs = list(pool.map(lambda _: cluster.submit(argv), range(PER_LEVEL)))
            comments = cluster.comments()
            marked = sum(comments.get(job, "").split(" ")[0] == "compass" for _, job, _ in runs)
            row.append(f"{marked}/{len(runs)} ({marked / len(runs):.0%})")
            notes.update(f"{level} at once: {re.sub(r'[0-9.]+ s', 'N s', err)}" for _, _, err in runs if err)
            cluster.cancel()
        print(f"| {level} | {row[0]} | {row[1]} |")
    for note, count in sorted(notes.items()):
        print(f"\n{count} x {note}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submissions", type=int, default=100)
    parser.add_argument("--starts", type=int, default=30)
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--hook-port", type=int, default=int(os.environ.get("COMPASS_DEV_PORT") or 25817))
    parser.add_argument("--plain-port", type=int, default=26317)
    parser.add_argument("--parts", default=",".join(PARTS), help=f"which measurements (default {','.join(PARTS)})")
    args = parser.parse_args()
    parts = [part for part in args.parts.split(",") if part]
    if not parts or set(parts) - set(PARTS):
        parser.error(f"--parts {args.parts!r}: name some of {', '.join(PARTS)}")
    work = REPO / "run" / "bench-hook-work"
    work.mkdir(parents=True, exist_ok=True)
    hook = Cluster("hook", args.hook_port, args.nodes, True, work)
    plain = Cluster("plain", args.plain_port, args.nodes, False, work)
    try:
        for cluster in (hook, plain):
            cluster.start()
        version = subprocess.run(["sinfo", "--version"], capture_output=True, text=True, env=plain.env).stdout
        print(f"Two dev clusters of {args.nodes} nodes x 8 GPUs ({version.strip()}), daemons at interval 5 s, "
              f"watch 0.5 s, lease 60 s; load average {os.getloadavg()[0]:.1f} at the start, "
              f"{os.cpu_count()} cores.")
        if "latency" in parts:
            latency(plain, hook, args.submissions)
            for cluster in (hook, plain):
                cluster.cancel()
        if "starts" in parts:
            starts(plain, hook, args.starts, work)
        if "shares" in parts:
            shares(plain, hook)
    finally:
        for cluster in (hook, plain):
            cluster.stop()


if __name__ == "__main__":
    main()
