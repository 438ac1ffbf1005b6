"""The real wrapper and the real sbatch on the dev cluster, with a ControlServer in a thread as the daemon."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from compass_slurm.service.control import ControlServer, Peer
from compass_slurm.slurm.backend import update_argv
from compass_slurm.slurm.cli_backend import CliBackend
from compass_slurm.slurm.gres import gpu_count
from compass_slurm.slurm.state import MARKER
from compass_slurm.submit import option_reader, options

pytestmark = pytest.mark.slurm

WRAPPER = Path(__file__).resolve().parents[2] / "scripts" / "compass-sbatch"
DATA = Path(__file__).resolve().parents[1] / "data" / "sbatch"
LEASE = 600


class Daemon:
    def __init__(self) -> None:
        self.submitted: list[str] = []

    def handlers(self) -> dict[str, Any]:
        return {"ping": lambda doc, peer: {"policy": "compass", "cycle": 1}, "submitted": self.notify}

    def notify(self, doc: dict[str, Any], peer: Peer) -> dict[str, Any]:
        self.submitted.append(doc["job"])
        return {}


@pytest.fixture
def wrapper_env(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, dev_cluster: Any) -> dict[str, str]:
    config = tmp_path / "compass.toml"
    config.write_text(f'socket = "{tmp_path / "run" / "c.sock"}"\nlease = {LEASE}\n')
    # the session's own cache of sbatch's option table: read once per release (its sbatch is another file)
    cache = tmp_path_factory.getbasetemp() / "wrapper-cache"
    env = {**os.environ, "COMPASS_CONFIG": str(config), "XDG_CACHE_HOME": str(cache)}
    env.pop("COMPASS_SOCKET", None)
    return env


@pytest.fixture
def daemon(tmp_path: Path, wrapper_env: dict[str, str]) -> Iterator[Daemon]:
    state = Daemon()
    with ControlServer(tmp_path / "run" / "c.sock", state.handlers()):
        yield state


def submit(env: dict[str, str], slurm: Any, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, str(WRAPPER), *args], input=stdin, capture_output=True, text=True,
                          env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    slurm.submitted.append(done.stdout.split()[-1].split(";")[0])
    return done


def fields(slurm: Any, job: str) -> dict[str, str]:
    """scontrol's KEY=VALUE words (a value with spaces, such as the comment, is cut: read it with comment())."""
    out = slurm.show(job)
    return dict(word.split("=", 1) for word in out.split() if "=" in word)


def comment(job: str) -> str:
    return subprocess.run(["squeue", "--noheader", f"--jobs={job}", "--format=%k"], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_gpu_job_through_a_running_daemon(wrapper_env: dict[str, str], daemon: Daemon, slurm: Any) -> None:
    done = submit(wrapper_env, slurm, "--migratable", "--comment=nightly", "--gpus-per-node=2", "-N", "1",
                  "--output=/dev/null", "--wrap", "sleep 300")
    job = slurm.submitted[-1]
    assert done.stdout == f"Submitted batch job {job}\n"
    assert done.stderr == ""
    assert daemon.submitted == [job]
    seen = fields(slurm, job)
    assert comment(job) == "compass:migratable nightly"
    assert seen["JobState"] == "PENDING" and seen["Reason"] == "BeginTime"
    eligible = subprocess.run(["squeue", "--noheader", f"--jobs={job}", "--format=%S"], capture_output=True,
                              text=True).stdout.strip()
    lead = time.mktime(time.strptime(eligible, "%Y-%m-%dT%H:%M:%S")) - time.time()
    assert LEASE - 30 < lead <= LEASE + 1


def test_gpu_job_on_stdin_with_the_daemon_down(wrapper_env: dict[str, str], slurm: Any) -> None:
    script = "#!/bin/sh\n#SBATCH --gres=gpu:1\n#SBATCH --output=/dev/null\nsleep 300\n"
    done = submit(wrapper_env, slurm, "--migratable", "--parsable", stdin=script)
    job = slurm.submitted[-1]
    assert done.stdout == f"{job}\n"
    assert "daemon unavailable" in done.stderr and "submitted with plain sbatch" in done.stderr
    slurm.wait(job, "RUNNING")
    assert comment(job) == "(null)"
    assert gpu_count(fields(slurm, job)["TresPerNode"]) == 1  # gres:gpu:1 up to 22.05, gres/gpu:1 since


def test_non_gpu_job_passes_through(wrapper_env: dict[str, str], daemon: Daemon, slurm: Any) -> None:
    done = submit(wrapper_env, slurm, "-c", "2", "--output=/dev/null", "--wrap", "sleep 300")
    job = slurm.submitted[-1]
    assert done.stderr == ""
    assert daemon.submitted == []
    slurm.wait(job, "RUNNING")
    assert comment(job) == "(null)"


def test_fifty_concurrent_submissions(wrapper_env: dict[str, str], daemon: Daemon, slurm: Any) -> None:
    name = f"wrap50-{os.getpid()}"
    # 50 interpreters starting at once on a small machine can take longer than the 1 s default to reach the
    # daemon; this test is about exactly-once through the daemon path, the fallback has its own tests
    env = {**wrapper_env, "COMPASS_WRAPPER_TIMEOUT": "20"}
    args = ["--gpus=1", f"--job-name={name}", "--output=/dev/null", "--parsable", "--wrap", "sleep 300"]
    with ThreadPoolExecutor(max_workers=50) as pool:
        runs = list(pool.map(lambda _: subprocess.run([sys.executable, str(WRAPPER), *args], capture_output=True,
                                                      text=True, env=env, timeout=120), range(50)))
    ids = [run.stdout.strip() for run in runs]
    slurm.submitted.extend(ids)
    assert all(run.returncode == 0 for run in runs), [run.stderr for run in runs if run.returncode]
    assert len(set(ids)) == 50
    assert sorted(daemon.submitted) == sorted(ids)
    listed = subprocess.run(["squeue", "--noheader", f"--name={name}", "--format=%i|%k"], capture_output=True,
                            text=True, check=True).stdout.split()
    assert sorted(listed) == sorted(f"{job}|compass" for job in ids)


def test_test_only_answers_as_plain_sbatch(wrapper_env: dict[str, str], daemon: Daemon, slurm: Any) -> None:
    """--test-only asks Slurm when the job would start: the lease must not push that answer out."""
    args = ["--test-only", "--gpus=1", "--output=/dev/null", "--wrap", "sleep 1"]
    plain = subprocess.run(["sbatch", *args], capture_output=True, text=True, timeout=60)
    wrapped = subprocess.run([sys.executable, str(WRAPPER), *args], capture_output=True, text=True, env=wrapper_env,
                             timeout=60)
    assert plain.returncode == wrapped.returncode == 0, wrapped.stderr

    def start(stderr: str) -> float:
        when = re.search(r"to start at (\S+)", stderr)
        assert when, stderr
        return time.mktime(time.strptime(when.group(1), "%Y-%m-%dT%H:%M:%S"))

    assert abs(start(wrapped.stderr) - start(plain.stderr)) <= 2
    assert daemon.submitted == [] and wrapped.stdout == plain.stdout


@pytest.mark.parametrize("mode", [None, "truncate"])
def test_a_migrated_job_keeps_the_output_of_its_first_run(wrapper_env: dict[str, str], daemon: Daemon, slurm: Any,
                                                          tmp_path: Path, mode: str | None) -> None:
    """A migration is a requeue: the script starts again. Slurm's default mode truncates the output, which is
    what a user who asks for it gets; the wrapper's default for --migratable jobs appends."""
    out = tmp_path / "job.out"
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\necho \"run $SLURM_RESTART_COUNT on $SLURMD_NODENAME\"\nsleep 300\n")
    chosen = [f"--open-mode={mode}"] if mode else []
    submit(wrapper_env, slurm, "--migratable", *chosen, "--gres=gpu:1", f"--output={out}", str(script))
    job = slurm.submitted[-1]
    backend = CliBackend()
    backend.scontrol(update_argv(job, start_now=True))  # StartTime=now, as a placement does
    first = slurm.wait(job, "RUNNING")

    def runs() -> list[str]:
        return [line for line in (out.read_text() if out.exists() else "").splitlines() if line.startswith("run")]

    deadline = time.monotonic() + 30
    while not runs() and time.monotonic() < deadline:
        time.sleep(0.2)
    target = next(n.name for n in backend.read_state().nodes if n.name != first and n.gpus_used == 0 and n.available)
    backend.migrate(job, [target], gpus_per_node=1)  # the daemon's migration: requeuehold, update, release
    assert slurm.wait(job, "RUNNING", timeout=60) == target
    deadline = time.monotonic() + 30
    while f"run 1 on {target}" not in runs() and time.monotonic() < deadline:
        time.sleep(0.2)
    expected = [f"run 1 on {target}"] if mode == "truncate" else [f"run  on {first}", f"run 1 on {target}"]
    assert runs() == expected


def test_a_later_begin_of_the_user_is_kept_with_the_lease_after_it(wrapper_env: dict[str, str], daemon: Daemon,
                                                                   slurm: Any) -> None:
    submit(wrapper_env, slurm, "--gpus=1", "--begin=now+1hour", "--output=/dev/null", "--wrap", "sleep 1")
    job = slurm.submitted[-1]
    seen = CliBackend().read_state().job(job)
    assert seen.managed and seen.reason == "BeginTime"
    assert 3600 + LEASE - 30 < seen.eligible_time - time.time() <= 3600 + LEASE + 1


def test_the_option_table_read_is_this_releases(dev_cluster: Any) -> None:
    """What the wrapper reads from this release's sbatch is the table recorded for it (tests/data/sbatch), which
    is Slurm's own (slurm_opt.c) for this release."""
    binary = options.resolve("sbatch", os.environ["PATH"])
    assert binary is not None
    read = option_reader.read_table(binary)
    recorded = json.loads((DATA / dev_cluster.release / "options.json").read_text())
    assert read is not None and (read.long, read.short) == (recorded["long"], recorded["short"])


#: an option 22.05's sbatch lacks, per release, and one its --help omits (read by probing getopt)
LATER = {"23.11": ["--tres-per-task=gres/gpu:1", "--extra=live"],
         "24.11": ["--tres-per-task=gres/gpu:1", "--stepmgr", "--oom-kill-step"],
         "25.11": ["--tres-per-task=gres/gpu:1", "--requeue=expedited"],
         "26.05": ["--tres-per-task=gres/gpu:1", "--container-type", "oci"]}


def test_an_option_22_05_lacks(wrapper_env: dict[str, str], daemon: Daemon, slurm: Any, dev_cluster: Any) -> None:
    """From 23.11 on a job asking GPUs with --tres-per-task is managed; 22.05's sbatch refuses that option, and
    the wrapper, which cannot read it there, says so and leaves it to sbatch."""
    args = ["-n", "1", "--output=/dev/null", "--parsable", "--wrap", "sleep 300"]
    if dev_cluster.release in LATER:
        done = submit(wrapper_env, slurm, *LATER[dev_cluster.release], *args)
        job = slurm.submitted[-1]
        assert done.stderr == ""
        assert daemon.submitted == [job]
        assert comment(job).split()[0] == MARKER
        return
    done = subprocess.run([sys.executable, str(WRAPPER), "--tres-per-task=gres/gpu:1", *args], capture_output=True,
                          text=True, env=wrapper_env, timeout=60)
    assert done.returncode != 0 and done.stdout == ""
    assert done.stderr.splitlines()[0] == ("compass-sbatch: option --tres-per-task is unknown to this wrapper; "
                                           "submitting with plain sbatch, unmanaged")
    assert "unrecognized option '--tres-per-task=gres/gpu:1'" in done.stderr  # sbatch's own refusal
    assert daemon.submitted == []


@pytest.mark.parametrize("gpus", [("--gpus=1",), ()])
def test_a_script_by_process_substitution_is_submitted_whole(wrapper_env: dict[str, str], daemon: Daemon,
                                                              slurm: Any, gpus: tuple[str, ...]) -> None:
    """``compass-sbatch <(...)``: the pipe is read once (the wrapper looks for #SBATCH lines in it), so the real
    sbatch gets its bytes; before, it found the descriptor closed (a GPU job) or the pipe empty."""
    line = f'exec "$@" {" ".join(gpus)} --output=/dev/null <(printf "#!/bin/sh\\n#SBATCH -J subst\\nsleep 1\\n")'
    done = subprocess.run(["bash", "-c", line, "bash", sys.executable, str(WRAPPER)], capture_output=True,
                          text=True, env=wrapper_env, timeout=60)
    assert done.returncode == 0, done.stderr
    job = done.stdout.split()[-1]
    slurm.submitted.append(job)
    assert fields(slurm, job)["JobName"] == "subst"
    assert (MARKER in comment(job)) == bool(gpus)
