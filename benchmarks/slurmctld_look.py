"""What one look costs slurmctld, against the cycle's job read, with many jobs in the controller.

    .venv/bin/python benchmarks/slurmctld_look.py [--release 22.05] [--jobs 9000] [--repeat 20] [--json]

Lays out a 16-node x 8-GPU dev cluster (tests/devcluster.py; COMPASS_DEV_DIR and COMPASS_DEV_PORT pick it), submits
``--jobs`` held 1-GPU jobs, half of them with the compass marker (held: none starts, so the count stays), then
runs each read ``--repeat`` times after ``sdiag --reset`` and reports the mean time per call of its RPC as sdiag
measures it: the look with comments (``cli_backend.LOOK``, REQUEST_JOB_INFO), from 24.11 on the look of states
alone the daemon makes there (``cli_backend.LOOK_STATES``, REQUEST_JOB_STATE), and the job read of a cycle on this
release (REQUEST_JOB_INFO; narrow from 24.11 on, by line before: ``scontrol show job --details --oneliner``), and
from 24.11 on the narrow read's second one, ``squeue --json --jobs=`` of 10 of the jobs (REQUEST_JOB_INFO too).
slurmctld packs every job it holds for a REQUEST_JOB_INFO, whatever the look's ``--states``; the dev cluster's
MaxJobCount (10,000) bounds ``--jobs``, so a figure for 100,000 jobs is this one scaled (the packing is one pass
over the job list).
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

from compass_slurm.slurm import parse_narrow  # noqa: E402
from compass_slurm.slurm.cli_backend import (JOB_STATE_SINCE, JOBS_JSON, JOBS_TEXT, LOOK, LOOK_STATES,  # noqa: E402
                                             NARROW_SINCE, release_of)

JOB_INFO, JOB_STATE = "REQUEST_JOB_INFO", "REQUEST_JOB_STATE"


def submit_held(count: int) -> None:
    """``count`` held 1-GPU jobs, every other one marked as the hook or wrapper marks them."""
    def one(k: int) -> None:
        subprocess.run(["sbatch", "--hold", "--gpus=1", "--output=/dev/null", f"--comment={'compass' * (k % 2)}",
                        "--wrap", "true"], capture_output=True, check=True)

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(one, range(count)))


def mean_ms(argv: list[str], repeat: int, rpc_type: str = JOB_INFO) -> float:
    """slurmctld's mean time (sdiag) of the ``rpc_type`` RPC over ``repeat`` runs of ``argv``."""
    subprocess.run(["sdiag", "--reset"], capture_output=True, check=True)
    for _ in range(repeat):
        subprocess.run(argv, capture_output=True, check=True)
    rpc = sdiag_rpcs()[rpc_type]
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
    try:
        release = release_of(args.release)
    except ValueError:
        parser.error(f"--release: not a release such as 24.11: {args.release!r}")
    use_cluster(Layout(16, 8, args.release))
    try:
        subprocess.run(["scancel", "--state=PENDING"], capture_output=True)
        submit_held(args.jobs)
        narrow = release >= NARROW_SINCE
        ten = subprocess.run(["squeue", "--noheader", "--format=%i"], capture_output=True, text=True,
                             check=True).stdout.split()[:10]
        figures = {"jobs": args.jobs, "release": args.release, "look_ms": round(mean_ms(LOOK, args.repeat), 2),
                   "look_states_ms": (round(mean_ms(LOOK_STATES, args.repeat, JOB_STATE), 2)
                                      if release >= JOB_STATE_SINCE else None),
                   "job_read_ms": round(mean_ms(parse_narrow.argv(release) if narrow else JOBS_TEXT, args.repeat), 2),
                   "listed_read_ms": (round(mean_ms([*JOBS_JSON, f"--jobs={','.join(ten)}"], args.repeat), 2)
                                      if narrow else None)}
    finally:
        subprocess.run(["scancel", "--state=PENDING"], capture_output=True)
        dev("stop")
    if args.json:
        print(json.dumps(figures))
    else:
        states, listed = ("-" if figures[key] is None else figures[key] for key in ("look_states_ms", "listed_read_ms"))
        print("| Slurm | jobs held | ms per call: the look with comments | the look of states alone | the cycle's job "
              "read | squeue --json of 10 jobs |\n|---|---:|---:|---:|---:|---:|\n"
              f"| {args.release} | {args.jobs:,} | {figures['look_ms']} | {states} | {figures['job_read_ms']} | {listed} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
