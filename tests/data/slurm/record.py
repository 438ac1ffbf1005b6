#!/usr/bin/env python3
"""Re-record the Slurm outputs the unit tests replay (needs root; restarts the dev cluster).

    python3 tests/data/slurm/record.py [--slurm 22.05|23.11|24.11|25.11|26.05] [--only narrow|exclusive|mixed|features]

Each scenario directory holds one file per command plus commands.json, which
maps the exact argv (joined by spaces) to its file: ``mixed-16x8`` and
``typed-4x4`` for 22.05, ``mixed-16x8-24.11`` and so on for the other releases;
``narrow-8x8`` the narrow job read (``--only narrow`` records just that one), and from 26.05
``exclusive-4x8`` --exclusive arrays with tasks split off (``--only exclusive``); ``features-4x8`` node features
and jobs with constraints, --prefer, --contiguous, --switches, --segment and typed GPU requests (``--only features``);
``layout-mixed``, ``layout-shared`` and (from 23.11) ``layout-blocks`` the clusters of tests/data/layouts/*.toml:
topology/tree, MIG types and shards, topology/block (``--only layouts``).
The cluster is left running.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
DEV = REPO / "scripts" / "dev-cluster"

COMMANDS = {
    "sinfo.json": ["sinfo", "--json"],
    "sinfo-node.json": ["sinfo", "--Node", "--json"],
    "squeue.json": ["squeue", "--json"],
    "nodes.txt": ["scontrol", "show", "node", "--details", "--oneliner"],
    "jobs.txt": ["scontrol", "show", "job", "--details", "--oneliner"],
    "partitions.txt": ["scontrol", "show", "partition", "--oneliner"],
    "reservations.txt": ["scontrol", "show", "reservation", "--oneliner"],
    "version.txt": ["scontrol", "--version"],
    # for people reading the fixtures: the multi-line form and sinfo's summary
    "jobs-multiline.txt": ["scontrol", "show", "job", "--details"],
    "sinfo-summary.txt": ["sinfo", "--Node", "--format=%N|%T|%G|%E"],
    "topology.txt": ["scontrol", "show", "topology"],
}


def sh(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout.strip()


def sbatch(*args: str) -> str:
    return sh("sbatch", "--parsable", "--output=/dev/null", *args)


def restart(release: str, *layout: str) -> None:
    subprocess.run([str(DEV), "stop"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([str(DEV), "start", "--slurm", release, *layout], check=True, stdout=subprocess.DEVNULL)
    for line in sh(str(DEV), "env").splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        os.environ[key] = shlex.split(value)[0]


def wait_running(job_ids: list[str]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        states = sh("squeue", "--noheader", "--format=%i %T", f"--jobs={','.join(job_ids)}").splitlines()
        if states and all(line.endswith("RUNNING") for line in states):
            return
        time.sleep(0.3)
    sys.exit(f"jobs {job_ids} did not all start")


EXCLUSIVE = ["squeue", "--noheader", "--array", "--states=all", "--Format=JobArrayID:|,Exclusive:|"]
#: what the CLI backend asks only of later releases
SINCE = {"26.05": {"exclusive.txt": EXCLUSIVE}}


def scenario_dir(name: str, release: str) -> Path:
    return HERE / (name if release == "22.05" else f"{name}-{release}")


def record(name: str, release: str, extra: dict[str, list[str]] | None = None) -> None:
    out = scenario_dir(name, release)
    out.mkdir(exist_ok=True)
    manifest = {}
    later = {k: v for since, commands in SINCE.items() if release >= since for k, v in commands.items()}
    for filename, argv in {**COMMANDS, **later, **(extra or {})}.items():
        (out / filename).write_text(sh(*argv) + "\n")
        manifest[" ".join(argv)] = filename
    (out / "commands.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")


def mixed_cluster(release: str) -> None:
    """16 x 8 GPUs: running, held, pending, array, CPU-only and compass-marked jobs; drained, down, reserved nodes."""
    restart(release, "--nodes", "16", "--gpus-per-node", "8")
    running = [
        sbatch("--gpus=2", "--wrap", "sleep 600"),
        sbatch("--nodes=2", "--gpus-per-node=3", "--wrap", "sleep 600"),
        sbatch("--gpus=3", "--cpus-per-task=4", "--mem=1000", "--comment=compass:migratable", "--wrap", "sleep 600"),
        sbatch("--gpus=8", "--nodelist=node16", "--wrap", "sleep 600"),
        sbatch("--wrap", "sleep 600"),  # no GPUs: not ours
        sbatch("--array=1-2", "--gpus=1", "--wrap", "sleep 600"),
        sbatch("--gpus=1", "--nodelist=node14", "--wrap", "sleep 600"),
    ]
    wait_running([job.split(";")[0] for job in running])
    sbatch("--hold", "--gpus=8", "--comment=compass", "--wrap", "sleep 600")
    sbatch("--gpus=4", "--nodelist=node16", "--wrap", "sleep 600")  # waits for node16: Resources
    sbatch("--hold", "--array=1-3", "--gpus-per-task=1", "--ntasks=2", "--wrap", "sleep 600")
    sh("scontrol", "update", "NodeName=node10", "State=DRAIN", "Reason=maintenance window")
    sh("scontrol", "update", "NodeName=node11", "State=DOWN", "Reason=broken")
    sh("scontrol", "update", "NodeName=node14", "State=DRAIN", "Reason=draining-test")
    sh("scontrol", "create", "reservation", "ReservationName=maint1", "Nodes=node12", "StartTime=now",
       "Duration=60", "Users=root", "Flags=MAINT")
    sh("scontrol", "create", "reservation", "ReservationName=later", "Nodes=node13", "StartTime=now+1hour",
       "Duration=60", "Users=root")
    # slurmctld flags reserved nodes on a periodic pass, not at once
    deadline = time.monotonic() + 120
    while "MAINTENANCE" not in sh("scontrol", "show", "node", "node12") and time.monotonic() < deadline:
        time.sleep(1)
    time.sleep(3)  # one more scheduler pass, so the pending reasons are final
    record("mixed-16x8", release, {"squeue-state.txt": ["squeue", "--noheader", "--jobs=1", "--format=%T"]})


def typed_cluster(release: str) -> None:
    """4 x 4 typed GPUs (a100): typed GRES strings in every output."""
    restart(release, "--nodes", "4", "--gpus-per-node", "4", "--gpu-type", "a100")
    job = sbatch("--gpus=a100:3", "--wrap", "sleep 600")
    multi = sbatch("--nodes=2", "--gres=gpu:a100:2", "--wrap", "sleep 600")
    wait_running([job, multi])
    record("typed-4x4", release)


def narrow_cluster(release: str) -> None:
    """8 x 8 GPUs: the narrow read's lines and the squeue --json --jobs=.. of all of them (before 24.11: of two,
    which prints every job all the same, and the read by line's scontrol show job), of running single- and multi-node, array, --exclusive and comment-marked jobs
    (a '|' in the comment), pending, held and throttled ones, one task of the throttled array split off."""
    restart(release, "--nodes", "8", "--gpus-per-node", "8")
    running = [
        sbatch("--gpus=2", "--wrap", "sleep 600"),
        sbatch("--nodes=2", "--gpus-per-node=3", "--wrap", "sleep 600"),
        sbatch("--nodes=2", "--gpus=5", "--wrap", "sleep 600"),
        sbatch("--gpus=3", "--cpus-per-task=2", "--mem=1000", "--comment=compass:migratable a|b, c",
               "--wrap", "sleep 600"),
        sbatch("--gpus=1", "--mem-per-gpu=700", "--wrap", "sleep 600"),
        sbatch("--exclusive", "--gpus=1", "--wrap", "sleep 600"),
        sbatch("--array=1-2", "--gpus=1", "--wrap", "sleep 600"),
    ]
    wait_running([job.split(";")[0] for job in running])
    throttled = sbatch("--hold", "--array=1-4%2", "--gpus-per-task=1", "--ntasks=2", "--wrap", "sleep 600")
    sh("scontrol", "update", f"JobId={throttled}_3", "TimeLimit=600")  # split off: a record of its own
    sbatch("--hold", "--gpus=8", "--comment=compass", "--wrap", "sleep 600")
    sbatch("--gpus=4", "--comment=compass", "--begin=now+600", "--time=90", "--exclude=node08", "--wrap", "sleep 600")
    time.sleep(3)  # one more scheduler pass, so the pending reasons are final
    extra = {"squeue.json": ["squeue", "--json"], **narrow_commands(release)}
    if release < "24.11":  # two ids: 23.11 prints only the job one names, and every job for two, as 22.05 does for any
        extra |= {"jobs.json": ["squeue", "--json", f"--jobs={running[0]},{running[1]}"],
                  "jobs.txt": ["scontrol", "show", "job", "--details", "--oneliner"]}  # the read by line
    out = scenario_dir("narrow-8x8", release)
    out.mkdir(exist_ok=True)
    manifest = {}
    for filename, argv in {"version.txt": ["scontrol", "--version"], **extra}.items():
        (out / filename).write_text(sh(*argv) + "\n")
        manifest[" ".join(argv)] = filename
    (out / "commands.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")


def narrow_commands(release: str) -> dict[str, list[str]]:
    """From 24.11: the narrow read's lines and the squeue --json --jobs=.. of all their jobs; 26.05: who is exclusive."""
    sys.path.insert(0, str(REPO))
    from compass_slurm.slurm import parse_narrow

    version = tuple(map(int, release.split(".")))
    found = {"exclusive.txt": EXCLUSIVE} if release >= "26.05" else {}
    if release >= "24.11":
        narrow = parse_narrow.argv(version)
        read = parse_narrow.lines(sh(*narrow) + "\n", version, parse_narrow.Kept())
        wanted = ",".join(sorted({parse_narrow.array_or_id(job_id) for _, job_id in read.new}, key=int))
        found |= {"narrow.txt": narrow, "jobs.json": ["squeue", "--json", f"--jobs={wanted}"]}
    return found


def features_cluster(release: str) -> None:
    """4 x 8 a100 GPUs, node01-02 with features v100 (available: v100,fast), node03-04 a100,80gb: held jobs with
    -C 'a100&80gb' --prefer --contiguous --switches, -C 'a100|v100' --gres=gpu:a100:1, -C '[a100*2&v100*2]'
    --gpus=a100:4, --prefer='a100|v100' --gpus-per-node=a100:2, --segment (25.05 on), and a running -C a100 job."""
    sys.path.insert(0, str(REPO))
    from compass_slurm.slurm import pyslurm_backend

    restart(release, "--nodes", "4", "--gpus-per-node", "8", "--gpu-type", "a100")
    sh("scontrol", "update", "NodeName=node[01-02]", "AvailableFeatures=v100,fast", "ActiveFeatures=v100")
    sh("scontrol", "update", "NodeName=node[03-04]", "AvailableFeatures=a100,80gb", "ActiveFeatures=a100,80gb")
    running = sbatch("-C", "a100", "--gpus-per-node=1", "--wrap", "sleep 600")
    sbatch("--hold", "-C", "a100&80gb", "--prefer=80gb", "--contiguous", "--switches=1", "-N2", "--gpus-per-node=2",
           "--wrap", "sleep 600")
    sbatch("--hold", "-C", "a100|v100", "--switches=2@10:00", "--gres=gpu:a100:1", "--comment=compass a|b",
           "--wrap", "sleep 600")
    sbatch("--hold", "-C", "[a100*2&v100*2]", "-N4", "--gpus=a100:4", "--wrap", "sleep 600")
    sbatch("--hold", "--prefer=a100|v100", "--gpus-per-node=a100:2", "--wrap", "sleep 600")
    if release >= "25.05":
        sbatch("--hold", "--segment=2", "-N2", "--gpus-per-node=1", "--wrap", "sleep 600")
    wait_running([running])
    time.sleep(3)  # one more scheduler pass, so the pending reasons are final
    extra = {**narrow_commands(release)}
    if release in ("24.11", "25.11"):  # what the pyslurm backend asks squeue
        segment = release >= "25.05"
        extra["pyslurm-extra.txt"] = pyslurm_backend.JOB_TRES_SEGMENT if segment else pyslurm_backend.JOB_TRES
    record("features-4x8", release, extra)


LAYOUTS = REPO / "tests" / "data" / "layouts"


def layout_clusters(release: str) -> None:
    """Each layout of tests/data/layouts running jobs that hold what it has: GPUs of each type under --switches and
    --contiguous (mixed.toml, topology/tree), MIG instances and shards (shared.toml), a --segment job and one
    within a block (blocks.toml, topology/block, 23.11 on)."""
    runs = {
        "mixed": [["-C", "a100", "--contiguous", "--switches=1", "-N2", "--gpus-per-node=8"], ["--gpus=h100:2"],
                  ["--gres=gpu:v100:1"]],
        "shared": [["--gres=shard:3"], ["--gres=shard:4"], ["--gres=gpu:1g.10gb:2"], ["--gpus-per-node=a100:1",
                                                                                        "-w", "node03"]],
        "blocks": [["-N2", "--gpus-per-node=8", "-C", "h100"], ["--gpus=a100:2"]],
    }
    held = {"mixed": [["-C", "h100&80gb", "--switches=1@60", "-N2", "--gpus-per-node=8"]],
            "shared": [["-C", "mig", "--gpus-per-node=1g.10gb:7"]],
            "blocks": [["--segment=2", "-N4", "--gpus-per-node=4"]] if release >= "25.05" else []}
    for name, jobs in runs.items():
        if name == "blocks" and release < "23.11":
            continue
        restart(release, "--layout", str(LAYOUTS / f"{name}.toml"))
        wait_running([sbatch(*args, "--wrap", "sleep 600") for args in jobs])
        for args in held[name]:
            sbatch("--hold", *args, "--wrap", "sleep 600")
        time.sleep(3)  # one more scheduler pass, so the pending reasons are final
        record(f"layout-{name}", release, narrow_commands(release))


def exclusive_arrays(release: str) -> None:
    """4 x 8 GPUs, --exclusive GPU arrays with tasks split off (26.05's squeue --json says nothing of --exclusive):
    4 of 6 tasks started (the 2 left waiting for nodes), one held with a task changed, and a held shared one."""
    restart(release, "--nodes", "4", "--gpus-per-node", "8")
    started = sbatch("--exclusive", "--gpus=1", "--array=1-6", "--wrap", "sleep 600")
    wait_running([f"{started}_{task}" for task in range(1, 5)])
    held = sbatch("--hold", "--exclusive", "--gpus=1", "--array=1-3", "--wrap", "sleep 600")
    sh("scontrol", "update", f"JobId={held}_2", "TimeLimit=600")  # split off: a record of its own
    sbatch("--hold", "--gpus=1", "--array=1-2", "--wrap", "sleep 600")
    time.sleep(3)  # one more scheduler pass, so the pending reasons are final
    out = scenario_dir("exclusive-4x8", release)
    out.mkdir(exist_ok=True)
    manifest = {}
    for filename, argv in {"version.txt": ["scontrol", "--version"], "squeue.json": ["squeue", "--json"],
                           "exclusive.txt": EXCLUSIVE}.items():
        (out / filename).write_text(sh(*argv) + "\n")
        manifest[" ".join(argv)] = filename
    (out / "commands.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slurm", default="22.05", help="the release to record (scripts/dev-cluster --slurm)")
    parser.add_argument("--only", choices=("narrow", "exclusive", "mixed", "features", "layouts"),
                        help="record only this scenario")
    args = parser.parse_args()
    if args.only is None:
        typed_cluster(args.slurm)
    if args.only in (None, "mixed"):
        mixed_cluster(args.slurm)
    if args.only in (None, "narrow"):
        narrow_cluster(args.slurm)
    if args.only in (None, "exclusive") and args.slurm >= "26.05":
        exclusive_arrays(args.slurm)
    if args.only in (None, "features"):
        features_cluster(args.slurm)
    if args.only in (None, "layouts"):
        layout_clusters(args.slurm)
