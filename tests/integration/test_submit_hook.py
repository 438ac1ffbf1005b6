"""The job_submit/lua hook in the real slurmctld, with ``compass daemon`` as a real process.

Plain sbatch, srun, salloc and arrays are placed by the daemon; fail-open when the daemon
is gone or the hook's files are broken, with ``compass doctor`` saying so.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "faults"))  # the daemon-process harness
from harness import COMPASS, DaemonProcess, cancel, jobs_named, log_disagreements, until  # noqa: E402

from compass_slurm.service.store import Store  # noqa: E402
from compass_slurm.slurm.translate import BEGIN_SLACK  # noqa: E402

pytestmark = pytest.mark.slurm

INTERVAL = 1.0
#: longer than three intervals: a cycle slowed by a loaded machine must not make the hook fail open mid-test
STALENESS = 10
_NAMES = itertools.count()


class Cluster:
    """The dev cluster's side of the hook: its config path, slurmctld's log, reloading the hook."""

    #: the hook's latest mtime set by any test of this session
    mtime = 0

    def __init__(self, env: dict[str, str]) -> None:
        root = Path(env["COMPASS_DEV_DIR"])
        self.hook_config = Path(env["COMPASS_HOOK_CONFIG"])
        self.hook = root / "etc" / "job_submit.lua"
        self.log = root / "log" / "slurmctld.log"
        assert self.hook.exists(), "the dev cluster runs without --job-submit-lua"

    def reload(self) -> None:
        """Make slurmctld load the hook afresh at the next submission, so a changed hook config counts at
        once instead of within the hook's 10 s cache. slurmctld reloads job_submit.lua only when its mtime,
        in whole seconds, is later than the mtime it last loaded, so every reload moves it on by a second
        from the latest one of the whole session (an earlier test's reloads may have set it ahead of the
        clock: a mtime set back would keep an earlier test's hook, with its config, loaded)."""
        Cluster.mtime = max(int(time.time()), int(self.hook.stat().st_mtime), Cluster.mtime) + 1
        os.utime(self.hook, (Cluster.mtime, Cluster.mtime))

    def mark(self) -> int:
        return self.log.stat().st_size

    def hook_lines(self, since: int, needle: str = "") -> list[str]:
        with open(self.log, errors="replace") as log:
            log.seek(since)
            return [line for line in log.read().splitlines() if "compass: " in line and needle in line]


@pytest.fixture
def cluster(dev_cluster) -> Iterator[Cluster]:
    found = Cluster(dev_cluster.env)
    yield found
    found.hook_config.unlink(missing_ok=True)  # the next tests see plain Slurm again
    found.reload()


@pytest.fixture
def name(cluster: Cluster) -> Iterator[str]:
    """A job-name prefix for this test; its jobs are cancelled afterwards."""
    prefix = f"hook{os.getpid()}-{next(_NAMES)}-"
    yield prefix
    cancel(j.id for j in jobs_named(prefix) if j.state in ("PENDING", "RUNNING", "CONFIGURING"))


@pytest.fixture
def daemon(tmp_path: Path, cluster: Cluster) -> Iterator[DaemonProcess]:
    """``compass daemon --interval 1`` writing the hook's config where the cluster's hook reads it."""
    until(lambda: not subprocess.run(["squeue", "--noheader", "--states=PENDING,RUNNING,COMPLETING"],
                                     capture_output=True, text=True).stdout.strip(), 60,
          "the jobs of earlier tests are gone")  # else the daemon would adopt (and migrate) them
    process = DaemonProcess(tmp_path / "daemon", interval=INTERVAL, extra_env={
        "COMPASS_HOOK_CONFIG": str(cluster.hook_config), "COMPASS_INTERACTIVE_LEASE": "20",
        "COMPASS_HOOK_STALENESS": str(STALENESS)})
    try:
        process.start()
        until(lambda: cluster.hook_config.exists() and (process.workdir / "anchors").exists(), 30,
              "the daemon writes the hook config and the anchors")
        cluster.reload()
        yield process
    finally:
        process.kill()  # also when it never answered: no daemon outlives its test


def sbatch(name: str, *args: str, seconds: int = 120) -> str:
    out = subprocess.run(["sbatch", "--parsable", "--output=/dev/null", f"--job-name={name}", *args,
                          "--wrap", f"sleep {seconds}"], capture_output=True, text=True, check=True).stdout
    return out.strip().split(";")[0]


def running(prefix: str, count: int, timeout: float = 60) -> list:
    """The ``count`` jobs named ``prefix...`` once every one runs."""
    return until(lambda: (jobs := jobs_named(prefix)) and len(jobs) == count
                 and all(j.state == "RUNNING" for j in jobs) and jobs, timeout, f"{count} jobs {prefix}* running")


def placed(daemon: DaemonProcess, jobs: list) -> dict[str, tuple[str, ...]]:
    """Each job's placing decision (job id -> nodes); asserts that Slurm runs it there."""
    with Store.open(f"sqlite:///{daemon.db}", create=False) as store:
        decided = {d.job_id: d.nodes for d in store.decisions() if d.action in ("placed", "replanned")}
    assert log_disagreements(daemon.db, jobs) == []
    return {j.id: decided[j.id] for j in jobs if j.id in decided}


def doctor(daemon: DaemonProcess, cluster: Cluster) -> dict:
    env = {**daemon.env, "COMPASS_HOOK_CONFIG": str(cluster.hook_config)}
    done = subprocess.run([*COMPASS, "doctor", "--json"], capture_output=True, text=True, env=env, timeout=60)
    return {c["name"]: c for c in json.loads(done.stdout)["checks"]}["submit hook"]


def test_plain_sbatch_srun_and_salloc_are_placed_by_the_daemon(daemon, cluster, name):
    sbatch(f"{name}sbatch", "--gpus=2")
    interactive = [subprocess.Popen([tool, f"--job-name={name}{tool}", "--gpus=" + gpus, "sleep", "120"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                   for tool, gpus in (("srun", "3"), ("salloc", "1"))]
    try:
        jobs = running(name, 3)
        assert all(j.comment == "compass" for j in jobs), [j.comment for j in jobs]
        decided = placed(daemon, jobs)
        assert sorted(decided) == sorted(j.id for j in jobs)  # each one placed by the daemon
        hook = cluster.hook_lines(0, name)
        assert len([line for line in hook if "managed: lease 60 s" in line]) == 1
        assert len([line for line in hook if "managed: lease 20 s, interactive" in line]) == 2
    finally:
        for proc in interactive:
            proc.kill()  # salloc outlives SIGTERM while its command runs
            proc.wait(30)


def test_a_job_array_is_placed_by_the_daemon(daemon, name):
    sbatch(f"{name}array", "--array=0-3", "--gpus=1")
    jobs = running(name, 4)
    assert sorted(placed(daemon, jobs)) == sorted(j.id for j in jobs)


@pytest.mark.parametrize("marked", [(), ("--comment=compass:migratable",)])
def test_a_later_begin_is_placed_by_the_daemon_from_its_begin_time(daemon, name, marked):
    """Also where the user marked the job by hand (its begin then holds no lease: the hook adds it past it)."""
    began = time.time()
    sbatch(f"{name}later", "--gpus=1", "--begin=now+12", *marked)
    (job,) = running(name, 1, timeout=50)
    # not before the user's time (the daemon counts a begin within BEGIN_SLACK of its read as come),
    # and not at its end either (+ the 60 s lease)
    assert 12 - BEGIN_SLACK - 1 <= time.time() - began < 40
    assert sorted(placed(daemon, [job])) == [job.id]


def test_32_concurrent_plain_sbatch_submissions_are_all_placed(daemon, cluster, name):
    since = cluster.mark()
    gpus = [1, 2] * 16  # 48 of the 64 GPUs: all fit at once
    with ThreadPoolExecutor(max_workers=32) as pool:
        ids = list(pool.map(lambda i: sbatch(f"{name}{i:02d}", f"--gpus={gpus[i]}"), range(32)))
    assert len(set(ids)) == 32
    jobs = running(name, 32, timeout=90)
    assert all(j.comment == "compass" for j in jobs)
    decided = placed(daemon, jobs)
    assert sorted(decided) == sorted(ids), f"{32 - len(decided)} of 32 not placed by the daemon"
    assert len(cluster.hook_lines(since, "managed: lease")) == 32


def test_with_the_daemon_gone_plain_gpu_jobs_start_as_without_the_hook(daemon, cluster, name):
    daemon.kill()
    anchors = daemon.workdir / "anchors"
    until(lambda: time.time() - anchors.stat().st_mtime > STALENESS + 1, 30, "the anchors file goes stale")
    since = cluster.mark()
    began = time.monotonic()
    sbatch(f"{name}alone", "--gpus=2")
    (job,) = running(name, 1, timeout=30)
    assert time.monotonic() - began < 15  # Slurm's own start: no 60 s lease
    assert job.comment == "(null)"
    (line,) = cluster.hook_lines(since)
    assert "compass: daemon not alive (anchors generated" in line


def test_a_broken_hook_config_leaves_submissions_working_and_doctor_reports_it(daemon, cluster, name):
    good = cluster.hook_config.read_text()
    cluster.hook_config.write_text(good.replace("lease = 60", "lease = soon"))
    cluster.reload()
    since = cluster.mark()
    sbatch(f"{name}broken", "--gpus=1")
    (job,) = running(name, 1, timeout=30)
    assert job.comment == "(null)"  # unchanged: Slurm placed it, the daemon adopts it
    assert len(cluster.hook_lines(since, "lease must be a number of seconds, got soon")) == 1
    found = doctor(daemon, cluster)
    assert not found["ok"] and "lease must be a number of seconds, got soon" in found["detail"]
    cluster.hook_config.write_text(good)
    cluster.reload()
    assert doctor(daemon, cluster)["ok"]


@pytest.mark.parametrize("anchors, logged", [
    ("directory", "anchors file unreadable ("),
    ("garbage\n", "is not a compass-anchors v1 file"),
])
def test_unreadable_or_malformed_anchors_leave_submissions_working(daemon, cluster, name, tmp_path, anchors, logged):
    bad = tmp_path / "bad-anchors"
    if anchors == "directory":
        bad.mkdir()
    else:
        bad.write_text(anchors)
    good = cluster.hook_config.read_text()
    cluster.hook_config.write_text(re.sub(r"(?m)^anchors = .*$", f"anchors = {bad}", good))
    cluster.reload()
    since = cluster.mark()
    for i in range(3):
        sbatch(f"{name}{i}", "--gpus=1")
    jobs = running(name, 3, timeout=30)
    assert all(j.comment == "(null)" for j in jobs)
    assert len(cluster.hook_lines(since, logged)) == 1  # said once, not per job
    found = doctor(daemon, cluster)
    assert not found["ok"] and str(bad) in found["detail"]


def test_an_unreadable_gpu_request_is_left_to_slurm_with_one_log_line(daemon, cluster, name):
    since = cluster.mark()
    # slurmctld takes this as one GPU (22.05 at once; 24.11 and 26.05 while the job is held), the hook cannot
    # read it: the job is Slurm's, exactly as submitted
    sbatch(f"{name}odd", "--hold", "--gres=gpu:+1")
    (job,) = jobs_named(name)
    assert (job.state, job.comment, job.reason) == ("PENDING", "(null)", "JobHeldUser")
    (line,) = cluster.hook_lines(since, name)
    assert re.search(rf"compass: GPU request tres_per_node=gres[:/]gpu:\+1 not understood: job {name}odd "
                     "left to Slurm unchanged$", line)


def test_requeue_is_recorded_for_the_migratable_mode(daemon, name):
    sbatch(f"{name}rq", "--gpus=1", "--requeue", "--comment=nightly")
    (job,) = jobs_named(name)  # set at submission: pending or already placed
    assert job.comment == "compass compass:requeue nightly"
