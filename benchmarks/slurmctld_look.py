"""What one look costs slurmctld, against the cycle's job read, with many jobs in the controller.

    .venv/bin/python benchmarks/slurmctld_look.py [--release 22.05] [--jobs 9000] [--repeat 20] [--json]

Lays out a 16-node x 8-GPU dev cluster (tests/devcluster.py; COMPASS_DEV_DIR and COMPASS_DEV_PORT pick it), submits
``--jobs`` held 1-GPU jobs, half of them with the compass marker (held: none starts, so the count stays), then
runs each read ``--repeat`` times after ``sdiag --reset`` and reports the mean REQUEST_JOB_INFO time per call as
sdiag measures it: the daemon's look (``cli_backend.LOOK``) and the job read of a cycle on this release (by line
before 24.11: ``scontrol show job --details --oneliner``). Before 24.11 slurmctld packs every job it holds for
either, whatever the look's ``--states``; the dev cluster's MaxJobCount (10,000) bounds ``--jobs``, so a figure
for 100,000 jobs is this one scaled (the packing is one pass over the job list).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path[:0] = [str(TESTS), str(TESTS / "faults")]
from devcluster import Layout, dev, use_cluster  # noqa: E402
from slurmctld_load import sdiag_rpcs  # noqa: E402

from compass_slurm.slurm.cli_backend import JOBS_TEXT, LOOK  # noqa: E402

JOB_INFO = "REQUEST_JOB_INFO"


def submit_held(count: int) -> None:
    """``count`` held 1-GPU jobs, every other one marked as the hook or wrapper marks them."""
    def one(k: int) -> None:
        subprocess.run(["sbatch", "--hold", "--gpus=1", "--output=/dev/null", f"--comment={'compass' * (k % 2)}",
                        "--wrap", "true"], capture_output=True, check=True)

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(one, range(count)))


def mean_job_info_ms(argv: list[str], repeat: int) -> float:
    """slurmctld's mean REQUEST_JOB_INFO time (sdiag) over ``repeat`` runs of ``argv``."""
    subprocess.run(["sdiag", "--reset"], capture_output=True, check=True)
    for _ in range(repeat):
        subprocess.run(argv, capture_output=True, check=True)
    rpc = sdiag_rpcs()[JOB_INFO]
    return rpc.total_us / rpc.count / 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--release", default="22.05", help="Slurm release of the dev cluster (default 22.05)")
    parser.add_argument("--jobs", type=int, default=9000, help="held jobs in the controller (default 9000)")
    parser.add_argument("--repeat", type=int, default=20, help="runs of each read (default 20)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of markdown")
    args = parser.parse_args()
    if args.jobs <= 0 or args.repeat <= 0:
        parser.error("--jobs and --repeat must be above 0")
    use_cluster(Layout(16, 8, args.release))
    try:
        subprocess.run(["scancel", "--state=PENDING"], capture_output=True)
        submit_held(args.jobs)
        figures = {"jobs": args.jobs, "release": args.release,
                   "look_ms": round(mean_job_info_ms(LOOK, args.repeat), 2),
                   "job_read_ms": round(mean_job_info_ms(JOBS_TEXT, args.repeat), 2)}
    finally:
        subprocess.run(["scancel", "--state=PENDING"], capture_output=True)
        dev("stop")
    if args.json:
        print(json.dumps(figures))
    else:
        print(f"| Slurm | jobs held | the look, ms per call | the cycle's job read, ms per call |\n|---|---:|---:|---:|\n"
              f"| {args.release} | {args.jobs:,} | {figures['look_ms']} | {figures['job_read_ms']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
