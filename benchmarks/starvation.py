"""Issue 9's starvation scenario on two 16-node dev clusters at once: the daemon (its defaults) against plain Slurm.

    export COMPASS_DEV_PORT=22817 COMPASS_DEV_DIR=$PWD/run/bench
    .venv/bin/python benchmarks/starvation.py [--scale 1] [--migratable 0] [--seed 1] [--repeat 1]

128 1-GPU fill jobs of 20-120 s, then a -N4 --gpus-per-node=8 job of 60 s, then two
1-GPU jobs of 30-60 s per second for 5 minutes (time limits: the durations plus 5 s rounded
up to whole minutes), through the wrapper on the daemon's cluster (COMPASS_DEV_DIR/
daemon, port COMPASS_DEV_PORT) and with plain sbatch on the other (COMPASS_DEV_DIR/
plain, port COMPASS_DEV_PORT + 250), side by side. Target (issue 9): the 4-node job
starts within plain Slurm's wait + 20%; the 1-GPU jobs keep most of their advantage.
Prints markdown.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path[:0] = [str(TESTS), str(TESTS / "faults")]
from live_workload import Cluster  # noqa: E402
from starvation_scenario import GPUS, NODES, side_by_side, workload  # noqa: E402

from compass_slurm.config import Config  # noqa: E402

PLAIN_PORT_OFFSET = 250


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="compress time: divide durations and gaps by this")
    parser.add_argument("--way", choices=("wrapper", "marked"), default="wrapper",
                        help="wrapper, or sbatch as the wrapper runs it (no Python start-up per job)")
    parser.add_argument("--migratable", type=float, default=0.0, help="share of 1-GPU jobs submitted --migratable")
    parser.add_argument("--migrations-per-hour", type=int, default=12)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--dump", type=Path, help="also write every job's submit, start and end here (JSON)")
    args = parser.parse_args()
    base = Path(os.environ.get("COMPASS_DEV_DIR") or Path.cwd() / "run" / "bench")
    port = int(os.environ.get("COMPASS_DEV_PORT") or 16817)
    clusters = [Cluster(base / "daemon", port, NODES, GPUS), Cluster(base / "plain", port + PLAIN_PORT_OFFSET,
                                                                      NODES, GPUS)]
    rows = []
    try:
        for c in clusters:
            c.start()
        for k in range(args.repeat):
            jobs = workload(args.seed + k, args.scale, args.migratable)
            with tempfile.TemporaryDirectory(prefix="compass-starve-") as tmp:
                result = side_by_side(*clusters, jobs, Path(tmp), args.migrations_per_hour, args.way)
            rows.append((args.seed + k, result))
            if args.dump:
                args.dump.write_text(json.dumps({way: {n: [o.job.submit, o.wait, o.jct, o.nodes, o.starts]
                                                       for n, o in run.outcomes.items()}
                                                 for way, run in (("daemon", result.daemon), ("plain", result.plain))}))
            print(f"# run {k + 1}: {result.figures()} rules {result.decisions}", file=sys.stderr)
    finally:
        for c in clusters:
            c.stop()
    watch = float(os.environ.get("COMPASS_WATCH") or Config.watch)  # the daemon's, as DaemonProcess passes it on
    print(f"Starvation scenario, {NODES} nodes x {GPUS} GPUs, scale 1/{args.scale:g}, "
          f"{args.migratable:.0%} of 1-GPU jobs migratable, budget {args.migrations_per_hour}/h, "
          f"daemon ({Config.policy}, {Config.queue}, look every {watch:g} s) through the {args.way}; "
          f"load average {' / '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
    print("| run | way | 4-node job wait (s) | stream 1-GPU mean wait (s) | all 1-GPU mean wait (s) | AJCT (s) "
          "| max partial nodes | mean partial nodes | requeues | unfinished |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for seed, result in rows:
        for way, f in result.figures().items():
            print(f"| seed {seed} | {way} | {f['big_wait_s']:.1f} | {f['stream_mean_wait_s']:.1f} "
                  f"| {f['one_gpu_mean_wait_s']:.1f} | {f['ajct_s']:.1f} | {f['max_partial']} "
                  f"| {f['mean_partial']:.2f} | {f['restarts']} | {f['unfinished']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
