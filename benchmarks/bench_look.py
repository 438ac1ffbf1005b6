"""The daemon's side of the look between cycles (one small squeue), on bench_daemon.py's synthetic cluster.

    .venv/bin/python benchmarks/bench_look.py [--nodes 16384] [--jobs 100000] [--repeat 11] [--release 22.05] [--json]

Renders the look's output for bench_daemon.py's state (``squeue --noheader --states=PENDING,RUNNING,COMPLETING
--format=%i %t %k``: one line per pending or running job, its id, state and comment; from 24.11 on
``--only-job-state`` and no comment), has a process print it (``cat``
of a file written beforehand, as bench_daemon.py does) and times what the daemon does with it: the CLI backend's
``look()`` (taking the output in, ``parse_text.look``) and ``Daemon._news`` (new managed jobs, GPU jobs gone), the
daemon having seen every job already (a steady look that finds nothing). Reports the median CPU seconds of the
daemon's process per look (the machine is shared: wall time would count the others) and the output's size. What
slurmctld pays for the same look is in benchmarks/slurmctld_look.py: before 24.11 a REQUEST_JOB_INFO that packs every
job it holds, whatever the look's ``--states`` (squeue filters them after), from 24.11 on a REQUEST_JOB_STATE.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench_daemon import Recorded, build
from compass_slurm.config import Config
from compass_slurm.service.daemon import Daemon
from compass_slurm.slurm.cli_backend import JOB_STATE_SINCE, LOOK, LOOK_STATES, CliBackend, release_of
from compass_slurm.slurm.state import SlurmState

#: squeue's compact state codes for the states the look asks for
CODES = {"PENDING": "PD", "RUNNING": "R", "COMPLETING": "CG"}


def look_text(state: SlurmState, comments: bool = True) -> str:
    """The look's output as squeue prints it (an empty comment prints as ``(null)``; ``comments`` False: none, as
    with ``--only-job-state``)."""
    if not comments:
        return "".join(f"{job.id} {CODES[job.state]}\n" for job in state.jobs if job.state in CODES)
    return "".join(f"{job.id} {CODES[job.state]} {job.comment or '(null)'}\n" for job in state.jobs
                   if job.state in CODES)


def timed_looks(daemon: Daemon, repeat: int) -> list[float]:
    """CPU seconds of each of ``repeat`` looks; each must find nothing new (the daemon saw every job)."""
    seconds = []
    for _ in range(repeat):
        started = time.process_time()
        news = daemon._news()
        seconds.append(time.process_time() - started)
        assert not news, "a steady look found news"
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=16384)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=11, help="looks to time (the median is reported)")
    parser.add_argument("--release", default="22.05",
                        help="the Slurm release whose look to take in (default 22.05; 24.11 on: --only-job-state)")
    parser.add_argument("--json", action="store_true", help="print one JSON object of the figures")
    args = parser.parse_args()
    if args.nodes <= 0 or args.jobs <= 0 or args.repeat <= 0:
        parser.error("--nodes, --jobs and --repeat must be above 0")
    try:
        release = release_of(args.release)
    except ValueError:
        parser.error(f"--release: not a release such as 24.11: {args.release!r}")
    states_only = release >= JOB_STATE_SINCE
    state = build(args.nodes, args.jobs, 0.97, "compass", seed=1)
    text = look_text(state, comments=not states_only)
    folder = Path(tempfile.mkdtemp(prefix="bench_look."))
    try:
        runner = Recorded({" ".join(LOOK_STATES if states_only else LOOK): text,
                           "scontrol --version": f"slurm {args.release}.0\n"}, folder=folder)
        logging.getLogger("compass.daemon").setLevel(logging.CRITICAL)
        daemon = Daemon(Config(anchors=""), CliBackend(runner=runner), None)
        first = daemon.backend.look()  # what the last cycle saw: every pending job, every running one
        daemon.seen_pending, daemon.seen_running = first.pending, first.holding
        daemon.looked_holding = first.holding
        seconds = timed_looks(daemon, args.repeat)
    finally:
        shutil.rmtree(folder)
    figures = {"look_s": round(statistics.median(seconds), 4), "look_max_s": round(max(seconds), 4),
               "lines": text.count("\n"), "mb": round(len(text) / 1e6, 2), "pending": len(first.pending),
               "holding": len(first.holding), "nodes": args.nodes, "jobs": args.jobs, "release": args.release}
    if args.json:
        print(json.dumps(figures))
        return
    print("| nodes / jobs | look's output | daemon CPU per look, median (max) | looks a second at 0.5 s |")
    print("|---|---|---:|---:|")
    print(f"| {args.nodes:,} / {args.jobs:,} | {figures['lines']:,} lines, {figures['mb']} MB | "
          f"{figures['look_s']:.3f} s ({figures['look_max_s']:.3f}) | {figures['look_s'] * 2:.0%} of a core |")


if __name__ == "__main__":
    main()
