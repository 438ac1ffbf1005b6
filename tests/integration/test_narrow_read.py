"""The CLI backend's incremental job reads on the real cluster: they yield the very SlurmJobs the whole
``squeue --json`` read does, and the daemon places on them.

From 24.11 jobs are read narrow (one squeue --Format line per job, squeue --json only for the changed); 22.05 and
23.11 (whose squeue --json lists every job for two --jobs ids, and whose --Format has no ExcNodes) read them by line
(scontrol show job --oneliner, each line parsed once, squeue --json in a cycle with a line it cannot trust).
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from compass_slurm.config import Config
from compass_slurm.service.daemon import Daemon
from compass_slurm.slurm import parse_narrow
from compass_slurm.slurm.cli_backend import JOBS_JSON, JOBS_TEXT, CliBackend, run_process

pytestmark = pytest.mark.slurm


def sbatch(slurm, *args: str) -> str:
    out = subprocess.run(["sbatch", "--parsable", "--output=/dev/null", *args, "--wrap", "sleep 300"],
                         check=True, capture_output=True, text=True).stdout.strip()
    slurm.submitted.append(out.split(";")[0])
    return slurm.submitted[-1]


def a_mixed_queue(slurm) -> list[str]:
    """Running single- and multi-node (uniform and not), array, --exclusive and comment-marked jobs; pending,
    held (one of them --mem=0) and throttled ones (one task of the throttled array split off)."""
    running = [
        sbatch(slurm, "--gpus=2"),
        sbatch(slurm, "--nodes=2", "--gpus-per-node=3"),
        sbatch(slurm, "--nodes=2", "--gpus=5"),
        sbatch(slurm, "--gpus=3", "--cpus-per-task=2", "--mem=1000", "--comment=compass:migratable a|b, c"),
        sbatch(slurm, "--gpus=1", "--mem-per-gpu=700"),
        sbatch(slurm, "--exclusive", "--gpus=1"),
        sbatch(slurm, "--array=1-2", "--gpus=1"),
    ]
    throttled = sbatch(slurm, "--hold", "--array=1-4%2", "--gpus-per-task=1", "--ntasks=2")
    subprocess.run(["scontrol", "update", f"JobId={throttled}_3", "TimeLimit=600"], check=True)  # split off
    sbatch(slurm, "--hold", "--gpus=8", "--comment=compass")
    sbatch(slurm, "--gpus=4", "--comment=compass", "--begin=now+600", "--time=90", "--exclude=node08")
    sbatch(slurm, "--hold", "--gpus=2", "--mem=0")  # all of each node's memory: 0 per node in every read
    for job in running:
        slurm.wait(job, "RUNNING")
    return running


def test_the_narrow_read_yields_the_json_read_s_jobs_and_the_daemon_places_on_it(idle_cluster, dev_cluster, tmp_path):
    slurm = idle_cluster
    running = a_mixed_queue(slurm)
    calls: list[list[str]] = []

    def runner(argv: list[str], timeout: float) -> tuple[int, str, str]:
        calls.append(argv)
        return run_process(argv, timeout)

    # a field's width cuts it short (Comment's default is 20 characters); ':|' (no width, then '|') does not
    comment = "compass:migratable a|b, c"
    job = next(j for j in CliBackend().read_jobs() if j.comment == comment).id
    cut, whole = (subprocess.run(["squeue", "--noheader", f"--jobs={job}", f"--Format={spec}"], check=True,
                                 capture_output=True, text=True).stdout.rstrip("\n") for spec in ("Comment", "Comment:|"))
    assert (cut, whole) == (comment[:20], comment + "|")

    narrow = CliBackend(runner=runner, narrow=None)
    if dev_cluster.release < "24.11":
        assert not narrow.uses_narrow and narrow.read_commands()["jobs"] == JOBS_JSON
        # why: squeue --json lists every job for two ids, and squeue --Format has no ExcNodes
        two = subprocess.run([*JOBS_JSON, f"--jobs={running[0]},{running[1]}"], check=True, capture_output=True,
                             text=True).stdout
        assert len(json.loads(two)["jobs"]) == len(CliBackend().read_jobs()) > 2
        lines = subprocess.run(parse_narrow.argv((24, 11)), capture_output=True, text=True)
        assert "Invalid job format specification: ExcNodes" in lines.stderr
        return
    assert narrow.uses_narrow
    by_narrow = narrow.read_jobs()
    by_json = CliBackend().read_jobs()
    assert {j.id: j for j in by_narrow} == {j.id: j for j in by_json}  # field by field
    assert narrow.narrow_reason is None
    calls.clear()
    assert narrow.read_jobs() == by_narrow
    assert [c[:2] for c in calls] == [["squeue", "--noheader"]]  # nothing changed: no JSON at all

    managed = sbatch(slurm, "--gpus=2", "--comment=compass", "--begin=now+60")
    daemon = Daemon(Config(anchors="", lease=60, interval=1), narrow, None)
    calls.clear()
    report = daemon.cycle()
    assert [(d.job_id, d.action) for d in report.decisions] == [(managed, "placed")]
    assert [c for c in calls if c[:2] == JOBS_JSON] == [[*JOBS_JSON, f"--jobs={managed}"]]  # only the new job
    slurm.wait(managed, "RUNNING")  # first: Slurm starts it when it will, maybe between the two reads below
    assert {j.id: j for j in narrow.read_jobs()} == {j.id: j for j in CliBackend().read_jobs()}


def unfinished(jobs) -> dict:
    """The jobs the daemon reads, by id: not those Slurm has finished, which 22.05 and 23.11 list until MinJobAge
    and whose JSON leaves fields out that scontrol still prints (22.05: no CPU count for a job cancelled pending)."""
    return {j.id: j for j in jobs if j.pending or j.running or j.state == "COMPLETING"}


@pytest.mark.releases("22.05", "23.11")
def test_before_24_11_jobs_read_by_line_are_the_json_read_s_and_the_daemon_places_on_them(idle_cluster):
    slurm = idle_cluster
    a_mixed_queue(slurm)
    slurm.wait(sbatch(slurm, "--gpus=1", "--comment=compass lr=0.1 bs=32"), "RUNNING")  # words like fields
    calls: list[list[str]] = []

    def runner(argv: list[str], timeout: float) -> tuple[int, str, str]:
        calls.append(argv)
        return run_process(argv, timeout)

    backend = CliBackend(runner=runner, narrow=None, lines=None)
    assert backend.uses_lines and backend.read_commands()["jobs"] == JOBS_TEXT
    by_line = backend.read_jobs()
    assert unfinished(by_line) == unfinished(CliBackend().read_jobs())  # field by field
    assert JOBS_JSON not in calls and "compass lr=0.1 bs=32" in {j.comment for j in by_line}
    time.sleep(1.5)  # the running jobs' RunTime moves on
    calls.clear()
    assert backend.read_jobs() == by_line and calls == [JOBS_TEXT]

    # what may not be one job's line (a name that reads like fields, a comment with a line break) takes squeue
    # --json that cycle, and the jobs read are still Slurm's
    for option in ("--job-name=x JobState=RUNNING NodeList=node01", "--comment=compass\nJobId=1"):
        job_id = sbatch(slurm, "--hold", "--gpus=1", option)
        calls.clear()
        jobs = {j.id: j for j in backend.read_jobs()}
        assert calls == [JOBS_TEXT, JOBS_JSON] and unfinished(jobs.values()) == unfinished(CliBackend().read_jobs())
        assert (jobs[job_id].state, jobs[job_id].nodes) == ("PENDING", ()), option
        subprocess.run(["scontrol", "update", f"JobId={job_id}", "JobName=plain", "Comment=plain"], check=True)
        calls.clear()
        backend.read_jobs()
        assert calls == [JOBS_TEXT], option
    assert backend.uses_lines and backend.lines_reason is None

    managed = sbatch(slurm, "--gpus=2", "--comment=compass", "--begin=now+60")
    daemon = Daemon(Config(anchors="", lease=60, interval=1), backend, None)
    report = daemon.cycle()
    assert [(d.job_id, d.action) for d in report.decisions] == [(managed, "placed")]
    slurm.wait(managed, "RUNNING")


def test_an_exclusive_array_with_tasks_split_off_stays_exclusive_in_both_reads(idle_cluster, dev_cluster):
    # 26.05's squeue --json says nothing of --exclusive; squeue folds an array's pending tasks into one line
    # (A_[1-3]) unless --array, while the JSON names the split-off task A_T and the rest A_[..] apart.
    slurm = idle_cluster
    started = sbatch(slurm, "--exclusive", "--gpus=1", "--array=1-3%1")  # one task started, 2 left: A_[2-3]
    held = sbatch(slurm, "--hold", "--exclusive", "--gpus=1", "--array=1-3")
    subprocess.run(["scontrol", "update", f"JobId={held}_2", "TimeLimit=600"], check=True)  # split off: A_2
    shared = sbatch(slurm, "--hold", "--gpus=1", "--array=1-2")
    slurm.wait(f"{started}_1", "RUNNING")
    for backend in (CliBackend(), CliBackend(narrow=None, lines=None)):
        records = {array: {j.id: j.exclusive for j in backend.read_jobs() if j.array_job == array}
                   for array in (started, held, shared)}
        assert records == {started: {f"{started}_1": True, f"{started}_[2-3%1]": True},
                           held: {f"{held}_2": True, f"{held}_[1,3]": True},
                           shared: {f"{shared}_[1-2]": False}}, backend.read_commands()["jobs"]


def test_a_comment_as_given_to_sbatch_reads_in_every_read_and_the_daemon_cycles(idle_cluster, dev_cluster):
    # Slurm prints a comment's bytes as given: one that is not UTF-8 (written in Latin-1) stopped every read, and
    # with it the daemon (UnicodeDecodeError), and a carriage return cut the job's line in two (text mode)
    slurm = idle_cluster
    job_id = sbatch(slurm, "--hold", "--gpus=1", os.fsdecode(b"--comment=compass caf\xe9\rtwo"))
    try:
        for backend in (CliBackend(), CliBackend(narrow=None, lines=None), CliBackend(json=False)):
            jobs = {j.id: j for j in backend.read_jobs()}
            assert jobs[job_id].comment == "compass caf\ufffd\rtwo", backend.read_commands()["jobs"]
        daemon = Daemon(Config(anchors="", lease=60, interval=1), CliBackend(narrow=None, lines=None), None)
        assert daemon.cycle().skipped is None
    finally:  # squeue lists it until MinJobAge once cancelled: other tests' own squeue calls read text mode
        subprocess.run(["scontrol", "update", f"JobId={job_id}", "Comment=plain"], check=True)
