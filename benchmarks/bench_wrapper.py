"""The sbatch wrapper's overhead over plain sbatch on the dev cluster: ms and ratio, daemon up, down and hung.

    eval "$(scripts/dev-cluster env)"
    .venv/bin/python benchmarks/bench_wrapper.py [--rounds 20]

Each round submits the same held 1-GPU job once per way, in one interleaved
run so that slurmctld's load is the same for all: plain sbatch; the wrapper
passing a job without GPUs straight through; the wrapper with a daemon answering (a ControlServer in this process); with no daemon
(no socket); with a hung daemon (a socket that never answers: it costs what a
down daemon costs plus wrapper_timeout, 1 s, counted from the ping). Every job is
cancelled at the end. Prints markdown. Target (issues 4, 6, 13): a hung daemon
within 1 s of a down one, a down one within 1 s of plain sbatch.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from compass_slurm.service.control import ControlServer

WRAPPER = Path(__file__).resolve().parents[1] / "scripts" / "compass-sbatch"
JOB = ["--gpus=1", "--hold", "--job-name=bench-wrapper", "--output=/dev/null", "--parsable", "--wrap", "sleep 1"]
HUNG_LIMIT_S = 1.0


def timed(argv: list[str], env: dict[str, str], submitted: list[str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv[:2])} failed: {done.stderr.strip()}")
    submitted.append(done.stdout.strip().split(";")[0])
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    if not os.environ.get("SLURM_CONF"):
        sys.exit('SLURM_CONF is not set: eval "$(scripts/dev-cluster env)" first')
    with tempfile.TemporaryDirectory(prefix="compass-bench-") as tmp:
        run = Path(tmp)
        up, down, hung = run / "up" / "c.sock", run / "down" / "c.sock", run / "hung.sock"
        base = {**os.environ, "COMPASS_CONFIG": "/dev/null"}
        ways = {
            "plain sbatch": (["sbatch", *JOB], base),
            "wrapper, no GPUs": ([sys.executable, str(WRAPPER), *JOB[1:]], {**base, "COMPASS_SOCKET": str(up)}),
            "wrapper, daemon up": ([sys.executable, str(WRAPPER), *JOB], {**base, "COMPASS_SOCKET": str(up)}),
            "wrapper, daemon down": ([sys.executable, str(WRAPPER), *JOB], {**base, "COMPASS_SOCKET": str(down)}),
            "wrapper, daemon hung": ([sys.executable, str(WRAPPER), *JOB], {**base, "COMPASS_SOCKET": str(hung)}),
        }
        times: dict[str, list[float]] = {name: [] for name in ways}
        submitted: list[str] = []
        handlers = {"ping": lambda doc, peer: {"policy": "bench", "cycle": 0}, "submitted": lambda doc, peer: {}}
        with ControlServer(up, handlers), socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as never:
            never.bind(str(hung))
            never.listen(1024)
            try:
                for _ in range(args.rounds):
                    for name, (argv, env) in ways.items():
                        times[name].append(timed(argv, env, submitted))
            finally:
                if submitted:
                    subprocess.run(["scancel", *submitted], check=False)
    plain = statistics.median(times["plain sbatch"])
    print(f"### sbatch wrapper overhead, {args.rounds} rounds, {len(submitted)} jobs (medians)\n")
    print("| way | median ms | p90 ms | extra ms | ratio |")
    print("|---|---:|---:|---:|---:|")
    for name, samples in times.items():
        median = statistics.median(samples)
        p90 = statistics.quantiles(samples, n=10)[-1] if len(samples) > 1 else median
        print(f"| {name} | {median * 1e3:.0f} | {p90 * 1e3:.0f} | {(median - plain) * 1e3:+.0f} | {median / plain:.2f} |")
    # The budget starts at the ping: a hung daemon costs what a down one does (start-up, sbatch) plus the budget.
    worst_wait = max(times["wrapper, daemon hung"]) - statistics.median(times["wrapper, daemon down"])
    verdict = "ok" if worst_wait <= HUNG_LIMIT_S + 0.2 else "TOO SLOW"
    print(f"\nworst wait for a hung daemon beyond a down one: {worst_wait * 1e3:.0f} ms "
          f"(limit {HUNG_LIMIT_S * 1e3:.0f} ms + 200 ms for a loaded start-up): {verdict}")


if __name__ == "__main__":
    main()
