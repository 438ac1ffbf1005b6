"""A cycle's changes through one scontrol reading its lines (CliBackend.scontrol_lines), against real Slurm.

One batch holds a job cancelled meanwhile, an update Slurm refuses and updates that succeed: each line's
result is its own (a refusal is never put on another line), and the lines after a failing one are carried out.
"""

from __future__ import annotations

import re
import subprocess
import time

import pytest
from devcluster import rpcs_served

from compass_slurm.service.daemon import NOT_PENDING
from compass_slurm.slurm import cli_backend
from compass_slurm.slurm.backend import lease_argv, release_argv, requeue_hold_argv, update_argv
from compass_slurm.slurm.cli_backend import CliBackend

pytestmark = pytest.mark.slurm


def _start_time(job: str) -> float:
    out = subprocess.run(["squeue", "--noheader", f"--jobs={job}", "--format=%S"], capture_output=True,
                         text=True, check=True).stdout.strip()
    return time.mktime(time.strptime(out, "%Y-%m-%dT%H:%M:%S"))


def _gone(job: str) -> bool:
    return not subprocess.run(["squeue", "--noheader", f"--jobs={job}", "--format=%T"], capture_output=True,
                              text=True).stdout.strip()


def test_one_scontrol_attributes_each_line_its_own_result(slurm):
    held = [slurm.sbatch("--hold", "--gpus=2", "--comment=compass") for _ in range(3)]
    later = [slurm.sbatch("--begin=now+3600", "--gpus=1", "--comment=compass") for _ in range(2)]
    running = slurm.sbatch("--gpus=1", "--nodelist=node04", "--comment=compass:migratable")
    for job in held + later:
        slurm.wait(job, "PENDING")
    slurm.wait(running, "RUNNING")
    ok, cancelled, refused = held
    subprocess.run(["scancel", cancelled], check=True)
    deadline = time.monotonic() + 30
    while not _gone(cancelled):
        assert time.monotonic() < deadline, f"job {cancelled} still queued after scancel"
        time.sleep(0.2)
    lines = [
        update_argv(ok, ["node05"], gpus_per_node=2, start_now=False),
        update_argv(cancelled, ["node06"], gpus_per_node=2),
        update_argv(refused, ["node99"], gpus_per_node=2),  # a node this cluster does not have
        lease_argv([later[0], cancelled, later[1]], 300),
        requeue_hold_argv([cancelled, running]),
        release_argv([ok]),
    ]
    runs = []
    backend = CliBackend()
    backend.runner = lambda argv, timeout: runs.append(argv) or cli_backend.run_process(argv, timeout)
    spawned = []
    backend.batch_runner = lambda argv, text, timeout: spawned.append(text) or cli_backend.run_batch(argv, text,
                                                                                                    timeout)
    asked = time.time()
    results = backend.scontrol_lines(lines)
    assert runs == [] and len(spawned) == 1, "one scontrol for the whole batch"
    assert spawned[0].splitlines() == [" ".join(argv[1:]) for argv in lines]
    assert results[0] is None and results[5] is None
    assert NOT_PENDING.search(results[1]) and f"job {cancelled}" in results[1], results[1]
    assert results[1].startswith(" ".join(lines[1]) + ": exit 1: ")
    assert NOT_PENDING.search(results[2]) and f"job {refused}" in results[2], results[2]
    assert [*re.findall(r"for job (\S+)", results[1]), *re.findall(r"for job (\S+)", results[2])] == [cancelled, refused]
    # the lists: only the cancelled job is named (requeuehold of an ended job is no error on some releases), and
    # every other one was carried out
    assert re.findall(r"for job (\S+)", results[3]) == [cancelled], results[3]
    assert results[4] is None or re.findall(r"for job (\S+)", results[4]) == [cancelled], results[4]
    assert all(abs(_start_time(job) - (asked + 300)) < 30 for job in later)
    assert "node05" in slurm.show(ok) and "JobState=PENDING" in slurm.show(refused)
    slurm.wait(running, "PENDING", timeout=60)
    assert re.search(r"Priority=0 |JobHeldAdmin|Reason=\S*[Hh]eld", slurm.show(running))


def test_a_batch_that_dies_midway_retries_only_the_lines_not_known_done(slurm):
    jobs = [slurm.sbatch("--begin=now+3600", "--gpus=1", "--comment=compass") for _ in range(3)]
    for job in jobs:
        slurm.wait(job, "PENDING")
    lines = [lease_argv([job], 600 + 100 * k) for k, job in enumerate(jobs)]
    backend = CliBackend()
    alone = []
    real_runner = backend.runner
    backend.runner = lambda argv, timeout: alone.append(argv) or real_runner(argv, timeout)
    # scontrol killed while on its second line: what it printed is what a real one prints up to there, and the
    # line it was on may or may not have reached slurmctld (sent again: an update sets the same values twice)
    first = "".join(" ".join(argv[1:]) + "\n" for argv in lines[:2])
    backend.batch_runner = lambda argv, text, timeout: (None, cli_backend.run_batch(argv, first, timeout)[1]
                                                        .rsplit(cli_backend.PROMPT, 1)[0])
    assert backend.scontrol_lines(lines) == [None, None, None]
    assert alone == lines[1:]


#: what a pin costs slurmctld: the update, and before it scontrol's read of a job named by its id (update_job.c's
#: _is_single_job: REQUEST_FED_INFO, then REQUEST_JOB_INFO_SINGLE), which a SLUID skips (26.05 on)
PIN_RPCS = ("REQUEST_UPDATE_JOB", "REQUEST_JOB_INFO_SINGLE", "REQUEST_FED_INFO")


def test_pins_name_jobs_by_sluid_from_26_05_at_one_rpc_each(slurm, dev_cluster):
    """Issue 31: from 26.05 on the CLI backend reads each job's SLUID and a pin names the job by it, so scontrol
    skips its read of the job: one RPC per pin instead of three. A SLUID read before the job was requeued is
    refused for that line alone; the next read has the new one."""
    jobs = [slurm.sbatch("--hold", "--nodes=1", "--gpus-per-node=2", "--comment=compass") for _ in range(3)]
    running = slurm.sbatch("--gpus=1", "--nodelist=node04", "--comment=compass:migratable")
    slurm.wait(running, "RUNNING")
    backend = CliBackend()
    read = {job.id: job for job in backend.read_state().jobs}
    by_sluid = dev_cluster.release >= "26.05"
    assert all(bool(read[job].sluid) == by_sluid for job in [*jobs, running])
    subprocess.run(["scontrol", "requeuehold", running], check=True)
    slurm.wait(running, "PENDING", timeout=60)
    stale = read[running]
    pins = [update_argv(job, ["node05"], 2, sluid=read[job].sluid) for job in jobs]
    pins.append(update_argv(running, ["node05"], 1, sluid=stale.sluid))
    assert [argv[2] for argv in pins] == [f"JobId={read[job].sluid or job}" for job in [*jobs, running]]
    subprocess.run(["sdiag", "--reset"], capture_output=True, check=True)
    results = backend.scontrol_lines(pins)
    rpcs = rpcs_served(PIN_RPCS)
    assert results[:3] == [None] * 3
    assert all("ReqNodeList=node05" in slurm.show(job) for job in jobs)
    if by_sluid:
        assert "Invalid job id" in results[3] and stale.sluid in results[3], results[3]
        assert "ReqNodeList=node05" not in slurm.show(running)
        assert rpcs == {"REQUEST_UPDATE_JOB": 4, "REQUEST_JOB_INFO_SINGLE": 0, "REQUEST_FED_INFO": 0}
        fresh = {job.id: job for job in backend.read_state().jobs}[running]
        assert fresh.sluid and fresh.sluid != stale.sluid  # a requeue gives the job a new one
    else:
        assert results[3] is None
        assert rpcs == dict.fromkeys(PIN_RPCS, 4)
