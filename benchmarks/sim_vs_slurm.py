"""Does the simulator predict the daemon on real Slurm? One time-compressed Philly slice, both ways.

    export COMPASS_DEV_PORT=22817 COMPASS_DEV_DIR=$PWD/run/bench
    .venv/bin/python benchmarks/sim_vs_slurm.py [--window 75d:] [--limit 400] [--factor 600]
        [--max-duration 600] [--migratable 0.5] [--interval 2] [--migrations-per-hour 12] [--slack 0] [--seed 1]

The slice's durations and submission gaps are divided by ``--factor`` (durations at
least ``--min-duration`` and at most ``--max-duration`` seconds, whole seconds; Slurm
time limits are the durations plus 10 s rounded up to whole minutes, and the compressed
trace carries them as ``time_limit_s`` for the simulator). A seeded share ``--migratable``
of the jobs is migratable (the trace's ``migratable`` column). Then:

- live: a 64-node dev cluster (COMPASS_DEV_DIR/sim-vs-slurm, port COMPASS_DEV_PORT), the
  real daemon (its defaults: policy compass-easy, queue backfill, a look every 0.5 s between
  cycles; and ``--interval``, ``--migrations-per-hour``, ``--slack``),
  every job through the real wrapper at its compressed submit time, sleeping its
  duration (a migratable job checkpoints, so a requeue costs its restart only);
- simulated: ``compass simulate`` on the same compressed trace, 64 nodes, the same
  policy, queue, slack, budget, cycle interval and look (``--watch``).

Prints AJCT, mean wait per class and max partial nodes from both, and their gaps
(target: within 10% on AJCT and waits).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path
from statistics import mean

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"
sys.path[:0] = [str(TESTS), str(TESTS / "faults")]
from harness import DaemonProcess  # noqa: E402
from live_workload import Cluster, LiveJob, cancel_all, replay  # noqa: E402

from compass_slurm.config import Config  # noqa: E402
from compass_slurm.sim import workloads  # noqa: E402

NODES, GPUS = 64, 8
#: shared/ sits beside the checkout, or beside the folder of git worktrees
TRACE = next((d / "shared/traces/philly_rfold.csv" for d in (REPO.parent, REPO.parent.parent)
              if (d / "shared").is_dir()), REPO.parent / "shared/traces/philly_rfold.csv")
CLASSES = ("1", "2-4", "5-7", "whole-node")
#: Slurm kills a job at its limit: a limit of exactly its duration would kill some before they end
LIMIT_MARGIN_S = 10


def size_class(gpus_per_instance: int, node_gpus: int = GPUS) -> str:
    if gpus_per_instance >= node_gpus:
        return "whole-node"
    return "1" if gpus_per_instance == 1 else "2-4" if gpus_per_instance <= 4 else "5-7"


def limit_s(duration: int) -> int:
    """The job's time limit: its duration plus a margin (its script's start, the checkpoint loop), in minutes."""
    return 60 * math.ceil((duration + LIMIT_MARGIN_S) / 60)


def compress(records, factor: float, low: int, high: int, migratable: float, seed: int) -> list[dict]:
    """The slice in compressed time, as rows of the simulator's CSV format."""
    rng = random.Random(seed)
    origin = records[0].submit
    rows = []
    for r in records:
        duration = min(high, max(low, round(r.duration / factor)))
        rows.append({"job_id": r.id, "submit_time_s": round((r.submit - origin) / factor, 3),
                     "duration_s": duration, "num_gpus": r.gpus, "num_nodes": r.nodes or "",
                     "max_gpus_per_node": r.gpus_per_node or "", "time_limit_s": limit_s(duration),
                     "migratable": int(rng.random() < migratable)})
    return rows


def live_jobs(rows: list[dict]) -> list[LiveJob]:
    jobs = []
    for row in rows:
        record = workloads.TraceRecord(row["job_id"], row["submit_time_s"], row["duration_s"], row["num_gpus"],
                                       row["num_nodes"] or None, row["max_gpus_per_node"] or None)
        shape = workloads.instance_shape(record, GPUS)
        jobs.append(LiveJob(f"p{row['job_id']}", row["submit_time_s"], row["duration_s"], shape.gpus,
                            nodes=shape.instances,
                            time_limit_min=row["time_limit_s"] // 60, migratable=bool(row["migratable"])))
    return jobs


def live(rows: list[dict], workdir: Path, interval: float, budget: int, slack: float) -> dict:
    cluster = Cluster(Path(os.environ.get("COMPASS_DEV_DIR") or REPO / "run" / "bench") / "sim-vs-slurm",
                      int(os.environ.get("COMPASS_DEV_PORT") or 16817), NODES, GPUS).start()
    try:
        cancel_all(cluster)
        cluster.idle()
        daemon = DaemonProcess(workdir / "daemon", lease=60, interval=interval,
                               extra_env={"SLURM_CONF": cluster.env["SLURM_CONF"],
                                          "COMPASS_MIGRATIONS_PER_HOUR": str(budget), "COMPASS_SLACK": f"{slack:g}",
                                          "COMPASS_WRAPPER_TIMEOUT": "5"}).start()
        try:
            jobs = live_jobs(rows)
            run = replay(cluster, jobs, workdir / "markers", way="wrapper", env=dict(daemon.env),
                         finish_timeout=3600)
        finally:
            daemon.stop()
            cancel_all(cluster)
    finally:
        cluster.stop()
    outcomes = [o for o in run.outcomes.values() if o.jct is not None]
    by_class: dict[str, list[float]] = {}
    for o in outcomes:
        by_class.setdefault(size_class(o.job.gpus_per_node), []).append(o.wait)
    return {"ajct_s": mean(o.jct for o in outcomes), "mean_wait_s": mean(o.wait for o in outcomes),
            "mean_wait_by_class_s": {k: mean(v) for k, v in by_class.items()},
            "max_partial": max((s[1] for s in run.samples), default=0), "jobs": len(outcomes),
            "unfinished": len(run.unfinished), "fallbacks": sum(o.fallback for o in run.outcomes.values()),
            "requeues": sum(max(0, o.starts - 1) for o in run.outcomes.values()),
            "makespan_s": run.finished - run.began}


def simulated(trace: Path, workdir: Path, interval: float, budget: int, slack: float) -> dict:
    out = workdir / "sim"
    argv = [str(REPO / ".venv" / "bin" / "compass"), "simulate", "--trace", str(trace), "--nodes", str(NODES),
            "--gpus-per-node", str(GPUS), "--policy", Config.policy, "--queue", Config.queue, "--slack", f"{slack:g}",
            "--migrations-per-hour", str(budget), "--cycle-interval", f"{interval:g}", "--watch", f"{Config.watch:g}",
            "--output", str(out), "--json"]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"compass simulate failed: {done.stderr.strip()}")
    row = json.loads(done.stdout)[0]
    with open(out / f"timeline-{Config.policy}.csv") as fh:
        row["max_partial"] = max(int(r["partial"]) for r in csv.DictReader(fh))
    return row


def gap(live_value: float | None, sim_value: float | None) -> str:
    if live_value is None or sim_value is None:
        return "-"
    if sim_value == 0:
        return "-" if live_value == 0 else "inf"
    return f"{(live_value - sim_value) / sim_value:+.1%}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--window", default="75d:")
    parser.add_argument("--limit", type=int, default=400)
    parser.add_argument("--factor", type=float, default=600)
    parser.add_argument("--min-duration", type=int, default=10)
    parser.add_argument("--max-duration", type=int, default=600)
    parser.add_argument("--migratable", type=float, default=0.5)
    parser.add_argument("--interval", type=float, default=2.0, help="daemon cycle interval (s)")
    parser.add_argument("--migrations-per-hour", type=int, default=12)
    parser.add_argument("--slack", type=float, default=Config.slack, help="the daemon's slack, on both sides")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    try:
        records = workloads.select(workloads.load(args.trace).records, workloads.parse_window(args.window),
                                   args.limit)
    except (workloads.TraceError, ValueError) as err:
        parser.error(str(err))
    rows = compress(records, args.factor, args.min_duration, args.max_duration, args.migratable, args.seed)
    with tempfile.TemporaryDirectory(prefix="compass-sim-vs-slurm-") as tmp:
        workdir = Path(tmp)
        trace = workdir / "compressed.csv"
        with open(trace, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]), lineterminator="\n")
            writer.writeheader()
            writer.writerows(rows)
        sim = simulated(trace, workdir, args.interval, args.migrations_per_hour, args.slack)
        real = live(rows, workdir, args.interval, args.migrations_per_hour, args.slack)
    print(f"Philly {args.window} first {len(rows)} jobs, time / {args.factor:g} (durations {args.min_duration}-"
          f"{args.max_duration} s), {args.migratable:.0%} migratable, {NODES} nodes x {GPUS} GPUs, {Config.policy}, "
          f"{Config.queue} (slack {args.slack:g}), {args.migrations_per_hour} migrations/h, cycle {args.interval:g} s, look every "
          f"{Config.watch:g} s; load average {' / '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
    print("| figure | daemon on Slurm | compass simulate | gap (live vs sim) |")
    print("|---|---:|---:|---:|")
    print(f"| AJCT (s) | {real['ajct_s']:.1f} | {sim['ajct_s']:.1f} | {gap(real['ajct_s'], sim['ajct_s'])} |")
    print(f"| mean wait (s) | {real['mean_wait_s']:.1f} | {sim['mean_wait_s']:.1f} "
          f"| {gap(real['mean_wait_s'], sim['mean_wait_s'])} |")
    sim_classes = sim.get("mean_wait_by_class_s", {})
    for k in CLASSES:
        a, b = real["mean_wait_by_class_s"].get(k), sim_classes.get(k)
        if a is None and b is None:
            continue
        cell = (lambda v: "-" if v is None else f"{v:.1f}")
        print(f"| mean wait, class {k} (s) | {cell(a)} | {cell(b)} | {gap(a, b)} |")
    print(f"| max partial nodes | {real['max_partial']} | {sim['max_partial']} | |")
    print(f"| migrations | {real['requeues']} requeues | {sim['migrations']} | |")
    print(f"\nlive: {real['jobs']} jobs finished ({real['unfinished']} unfinished), {real['fallbacks']} wrapper "
          f"fallbacks, makespan {real['makespan_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
