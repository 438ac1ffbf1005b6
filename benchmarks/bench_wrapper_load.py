"""How many simultaneous wrapper submissions the daemon manages: N at once, against a real daemon process.

    eval "$(scripts/dev-cluster env)"
    .venv/bin/python benchmarks/bench_wrapper_load.py [--rounds 5] [--concurrency 8,16,32,64]

Each round starts N wrapper processes at the same instant (``xargs -P N`` style) with
a held 1-GPU job each, against ``compass daemon`` running as its own process on the
dev cluster (interval 2 s, its cycles woken by the submissions as in production),
then N plain sbatch processes the same way, side by side in one run so that
slurmctld's and the machine's load are the same for both. A submission is managed
when the wrapper got the daemon's answer (no "submitted with plain sbatch" note);
the notes' causes are counted. Every job is cancelled at the end. Prints markdown.
Target (issue 13): all 32 of 32 managed on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WRAPPER = REPO / "scripts" / "compass-sbatch"
NAME = "bench-wrapper-load"
JOB = ["--gpus=1", "--hold", f"--job-name={NAME}", "--output=/dev/null", "--parsable", "--wrap", "sleep 1"]
_CAUSE = re.compile(r"daemon unavailable \((.*)\), submitted with plain sbatch")


def burst(argv: list[str], count: int, env: dict[str, str]) -> tuple[float, list[subprocess.CompletedProcess[str]]]:
    """``count`` copies of argv started together; the wall time until the last one ended, and their results."""
    gate = threading.Barrier(count)
    results: list[subprocess.CompletedProcess[str] | None] = [None] * count

    def one(k: int) -> None:
        gate.wait()
        results[k] = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)

    threads = [threading.Thread(target=one, args=(k,)) for k in range(count)]
    began = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done = [r for r in results if r is not None]
    for r in done:
        if r.returncode != 0:
            sys.exit(f"{argv[1] if len(argv) > 1 else argv[0]} failed: {r.stderr.strip()}")
    return time.perf_counter() - began, done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", default="8,16,32,64")
    args = parser.parse_args()
    if not os.environ.get("SLURM_CONF"):
        sys.exit('SLURM_CONF is not set: eval "$(scripts/dev-cluster env)" first')
    sizes = [int(n) for n in args.concurrency.split(",")]
    compass = shutil.which("compass", path=str(Path(sys.executable).parent)) or "compass"
    with tempfile.TemporaryDirectory(prefix="compass-load-") as tmp:
        run = Path(tmp)
        (run / "config.toml").write_text("")
        env = {**os.environ, "COMPASS_CONFIG": str(run / "config.toml"), "COMPASS_DB": f"sqlite:///{run / 'log.db'}",
               "COMPASS_SOCKET": str(run / "run" / "compass.sock"), "COMPASS_ANCHORS": str(run / "anchors"),
               "COMPASS_LEASE": "600", "COMPASS_INTERVAL": "2"}
        with open(run / "daemon.log", "wb") as daemon_log:
            daemon = subprocess.Popen([compass, "daemon"], env=env, stdout=daemon_log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 30
            while not (run / "run" / "compass.sock").exists():
                if time.monotonic() > deadline or daemon.poll() is not None:
                    sys.exit(f"the daemon did not start: {(run / 'daemon.log').read_text()[-500:]}")
                time.sleep(0.2)
            rows = {n: {"managed": 0, "total": 0, "causes": Counter(), "wrapper": [], "plain": []} for n in sizes}
            for _ in range(args.rounds):
                for n in sizes:
                    seconds, runs = burst([sys.executable, str(WRAPPER), *JOB], n, env)
                    row = rows[n]
                    row["wrapper"].append(seconds)
                    row["total"] += n
                    for r in runs:
                        cause = _CAUSE.search(r.stderr)
                        if cause:
                            row["causes"][cause.group(1)] += 1
                        else:
                            row["managed"] += 1
                    row["plain"].append(burst(["sbatch", *JOB], n, env)[0])
                    subprocess.run(["scancel", f"--name={NAME}"], check=False)
        finally:
            daemon.terminate()
            daemon.wait(timeout=30)
            subprocess.run(["scancel", f"--name={NAME}"], check=False)
    cores = os.cpu_count()
    print(f"### simultaneous wrapper submissions, {args.rounds} rounds each, {cores} cores, daemon as a process\n")
    print("| at once | managed | fell back (cause) | wrapper burst median (s) | plain sbatch burst median (s) | ratio |")
    print("|---:|---:|---|---:|---:|---:|")
    for n, row in rows.items():
        wrapper, plain = statistics.median(row["wrapper"]), statistics.median(row["plain"])
        causes = ", ".join(f"{count}: {cause}" for cause, count in row["causes"].most_common()) or "none"
        share = 100 * row["managed"] / row["total"]
        print(f"| {n} | {row['managed']}/{row['total']} ({share:.0f}%) | {causes} | {wrapper:.2f} | {plain:.2f} | "
              f"{wrapper / plain:.1f} |")


if __name__ == "__main__":
    main()
