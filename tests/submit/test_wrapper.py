"""The sbatch wrapper, run as users run it (scripts/compass-sbatch, compass submit), against a recording sbatch.

The recording sbatch stands first on PATH and notes the exact argv and stdin it
got; the daemon is a real ControlServer in a thread (up), no socket (down), a
socket that never answers (hung), or one that answers errors. The same paths
run against the real sbatch in tests/integration/test_wrapper_live.py.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from compass_slurm.service.control import ControlServer, Peer, RequestError
from compass_slurm.submit.wrapper import job_id_from_output, startup_seconds

REPO = Path(__file__).resolve().parents[2]
WRAPPER = REPO / "scripts" / "compass-sbatch"
MARGIN = 2.0  # generous: these tests check behaviour; benchmarks/bench_wrapper.py measures the latency

FAKE_SBATCH = textwrap.dedent("""\
    #!{python}
    import json, os, sys
    stdin = "" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.read()
    with open(os.environ["FAKE_SBATCH_LOG"], "a") as log:
        log.write(json.dumps({{"argv": sys.argv[1:], "stdin": stdin}}) + "\\n")
    print("sbatch: warning: recorded", file=sys.stderr)
    print("4242" if "--parsable" in sys.argv else "Submitted batch job 4242")
    sys.exit(int(os.environ.get("FAKE_SBATCH_EXIT", "0")))
""")


class Daemon:
    def __init__(self) -> None:
        self.pings = 0
        self.submitted: list[str] = []

    def ping(self, doc: dict[str, Any], peer: Peer) -> dict[str, Any]:
        self.pings += 1
        return {"policy": "compass", "cycle": 1}

    def notify(self, doc: dict[str, Any], peer: Peer) -> dict[str, Any]:
        self.submitted.append(doc["job"])
        return {}


class Env:
    """Runs the wrapper with the recording sbatch first on PATH and a config naming the socket."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.socket = tmp_path / "run" / "compass.sock"
        self.log = tmp_path / "sbatch.log"
        bindir = tmp_path / "bin"
        bindir.mkdir()
        fake = bindir / "sbatch"
        fake.write_text(FAKE_SBATCH.format(python=sys.executable))
        fake.chmod(0o755)
        (tmp_path / "job.sh").write_text("#!/bin/sh\nsrun python train.py\n")  # a script without directives
        config = tmp_path / "compass.toml"
        config.write_text(f'socket = "{self.socket}"\nlease = 45\nwrapper_timeout = 1.0\n')
        self.env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "COMPASS_CONFIG": str(config),
                    "FAKE_SBATCH_LOG": str(self.log)}
        for var in ("COMPASS_SOCKET", "COMPASS_SBATCH", "COMPASS_LEASE", "COMPASS_WRAPPER_TIMEOUT", "SBATCH_GPUS",
                    "SBATCH_GRES", "SBATCH_GPUS_PER_NODE", "SBATCH_GPUS_PER_TASK"):
            self.env.pop(var, None)

    def run(self, *args: str, stdin: str | None = None, command: list[str] | None = None,
            **env: str) -> subprocess.CompletedProcess[str]:
        argv = command or [sys.executable, str(WRAPPER)]
        return subprocess.run([*argv, *args], input=stdin, capture_output=True, text=True, timeout=30,
                              env={**self.env, **env}, cwd=self.tmp)

    def calls(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.log.read_text().splitlines()] if self.log.exists() else []

    def only_call(self) -> list[str]:
        calls = self.calls()
        assert len(calls) == 1, f"sbatch must run exactly once, ran {len(calls)} times"
        return calls[0]["argv"]


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return Env(tmp_path)


@pytest.fixture
def daemon(env: Env) -> Iterator[Daemon]:
    state = Daemon()
    with ControlServer(env.socket, {"ping": state.ping, "submitted": state.notify}):
        yield state


GPU_JOB = ["--gpus-per-node=4", "-N", "2", "-J", "train", "job.sh", "--epochs", "3"]


def test_gpu_job_with_daemon_up_is_marked_and_leased(env: Env, daemon: Daemon) -> None:
    done = env.run(*GPU_JOB)
    assert done.returncode == 0
    assert done.stdout == "Submitted batch job 4242\n"
    assert done.stderr == "sbatch: warning: recorded\n"
    assert env.only_call() == ["--gpus-per-node=4", "-N", "2", "-J", "train", "--comment=compass", "--begin=now+45",
                               "job.sh", "--epochs", "3"]
    assert daemon.pings == 1
    assert daemon.submitted == ["4242"]


@pytest.mark.parametrize("flags, comment", [
    (["--requeue"], "compass compass:requeue"),
    (["--requeue", "--no-requeue"], "compass"),
    (["--no-requeue", "--requeue"], "compass compass:requeue"),
])
def test_slurms_own_requeue_is_recorded_for_the_migratable_mode(env: Env, daemon: Daemon, flags: list[str],
                                                                comment: str) -> None:
    env.run(*flags, "-G", "1", "job.sh")
    assert env.only_call() == [*flags, "-G", "1", f"--comment={comment}", "--begin=now+45", "job.sh"]


def test_migratable_and_the_users_comment_are_kept(env: Env, daemon: Daemon) -> None:
    done = env.run("--migratable", "--comment=run 7", "-G", "8", "--parsable", "job.sh", "--migratable")
    assert done.stdout == "4242\n"
    assert env.only_call() == ["--comment=run 7", "-G", "8", "--parsable", "--comment=compass:migratable run 7",
                               "--begin=now+45", "--open-mode=append", "job.sh", "--migratable"]
    assert daemon.submitted == ["4242"]


def test_migratable_jobs_append_to_their_output_unless_a_mode_is_chosen(env: Env, daemon: Daemon) -> None:
    env.run("--migratable", "-G", "1", "job.sh")
    assert env.only_call() == ["-G", "1", "--comment=compass:migratable", "--begin=now+45", "--open-mode=append",
                               "job.sh"]
    env.log.unlink()
    env.run("--migratable", "-G", "1", "--open-mode=truncate", "job.sh")
    assert env.only_call() == ["-G", "1", "--open-mode=truncate", "--comment=compass:migratable", "--begin=now+45",
                               "job.sh"]
    env.log.unlink()
    env.run("--migratable", "-G", "1", "job.sh", SBATCH_OPEN_MODE="truncate")
    assert "--open-mode=append" not in env.only_call()
    env.log.unlink()
    env.run("-G", "1", "job.sh")  # not migratable: never restarted by compass, its mode is Slurm's default
    assert env.only_call() == ["-G", "1", "--comment=compass", "--begin=now+45", "job.sh"]


def test_a_later_begin_of_the_user_starts_the_lease_there(env: Env, daemon: Daemon) -> None:
    started = datetime.now()
    env.run("-G", "2", "--begin=now+2hours", "job.sh")
    argv = env.only_call()
    assert argv[:4] == ["-G", "2", "--begin=now+2hours", "--comment=compass"] and argv[5:] == ["job.sh"]
    ours = datetime.fromisoformat(argv[4].removeprefix("--begin="))
    assert timedelta(hours=2, seconds=44) <= ours - started <= timedelta(hours=2, seconds=47)
    env.log.unlink()
    env.run("-G", "2", "--begin=now", "job.sh")  # a begin already past is no begin: the usual lease
    assert env.only_call() == ["-G", "2", "--begin=now", "--comment=compass", "--begin=now+45", "job.sh"]


def test_help_says_what_the_wrapper_adds_then_sbatchs_help(env: Env, daemon: Daemon) -> None:
    done = env.run("--help")
    assert done.stdout.startswith("compass-sbatch [--migratable] SBATCH-ARGS...")
    assert "--open-mode=append" in done.stdout and "checkpoint" in done.stdout
    assert done.stdout.endswith("Submitted batch job 4242\n")  # the recording sbatch's "help"
    assert env.only_call() == ["--help"]


def test_script_on_stdin_is_read_once_and_passed_on(env: Env, daemon: Daemon) -> None:
    script = "#!/bin/bash\n#SBATCH --gres=gpu:a100:2\n#SBATCH --comment='from script'\nsrun train\n"
    done = env.run("-p", "gpu", stdin=script)
    assert done.returncode == 0
    [call] = env.calls()
    assert call["argv"] == ["-p", "gpu", "--comment=compass from script", "--begin=now+45"]
    assert call["stdin"] == script


def test_directives_in_a_script_file_make_a_gpu_job(env: Env, daemon: Daemon) -> None:
    (env.tmp / "gpu.sh").write_text("#!/bin/sh\n#SBATCH -G 1\nnvidia-smi\n")
    env.run("gpu.sh")
    assert env.only_call() == ["--comment=compass", "--begin=now+45", "gpu.sh"]


def test_an_unreadable_script_goes_to_sbatch_to_report(env: Env, daemon: Daemon) -> None:
    env.run("-G", "1", "missing.sh")
    assert env.only_call() == ["-G", "1", "missing.sh"]
    assert daemon.pings == 0


@pytest.mark.parametrize("args", [
    ["-c", "4", "--mem=8G", "job.sh"],                      # no GPUs
    ["--gpus=0", "job.sh"],                                  # no GPUs either
    ["-G", "2", "--begin=12/24", "job.sh"],                  # a start time in a form we do not resolve
    ["-G", "2", "--test-only", "job.sh"],                    # sbatch's own estimate, without a lease
    ["-G", "2", "-M", "other", "job.sh"],                    # another cluster
    ["-G", "1", ":", "-G", "2", "job.sh"],                   # a heterogeneous job
    ["--frobnicate", "-G", "2", "job.sh"],                   # an option sbatch will reject
    ["--gpus=many", "job.sh"],                               # a value sbatch will reject
    ["--version"],
])
def test_jobs_not_for_the_daemon_go_to_sbatch_unchanged(env: Env, daemon: Daemon, args: list[str]) -> None:
    done = env.run("--migratable", *args)
    assert env.only_call() == args
    assert done.stderr == "sbatch: warning: recorded\n"
    assert daemon.pings == 0


def test_daemon_down_falls_back_to_plain_sbatch(env: Env) -> None:
    done = env.run("--migratable", *GPU_JOB)
    assert done.returncode == 0
    assert done.stdout == "Submitted batch job 4242\n"
    assert env.only_call() == GPU_JOB
    assert done.stderr.splitlines()[0] == (f"compass-sbatch: daemon unavailable (No such file or directory: "
                                           f"{env.socket}), submitted with plain sbatch")


def test_daemon_hung_falls_back_within_the_timeout(env: Env) -> None:
    env.socket.parent.mkdir()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as hung:
        hung.bind(str(env.socket))
        hung.listen(8)  # connections wait in the backlog, never answered
        started = time.monotonic()
        done = env.run(*GPU_JOB)
        elapsed = time.monotonic() - started
    assert env.only_call() == GPU_JOB
    assert re.search(r"^compass-sbatch: daemon unavailable \(no answer within \d(\.\d)? s\), submitted with plain sbatch$",
                     done.stderr, re.MULTILINE)
    assert elapsed < 1.0 + MARGIN


def test_startup_seconds_counts_from_the_process_start() -> None:
    assert 0 < startup_seconds() < 3600  # the test session's own age


def test_daemon_error_falls_back(env: Env) -> None:
    def refuse(doc: dict[str, Any], peer: Peer) -> dict[str, Any]:
        raise RequestError("shutting down")

    with ControlServer(env.socket, {"ping": refuse}):
        done = env.run(*GPU_JOB)
    assert env.only_call() == GPU_JOB
    assert "daemon unavailable (it answered: shutting down), submitted with plain sbatch" in done.stderr


def test_bad_config_falls_back(env: Env, daemon: Daemon) -> None:
    done = env.run(*GPU_JOB, COMPASS_WRAPPER_TIMEOUT="soon")
    assert env.only_call() == GPU_JOB
    assert "daemon unavailable (wrapper_timeout = 'soon' (from COMPASS_WRAPPER_TIMEOUT) is not a valid" in done.stderr


def test_a_lost_submitted_notice_changes_nothing(env: Env) -> None:
    """The daemon answers the ping but not the notice: the job is submitted once, the wrapper exits 0."""
    state = Daemon()
    with ControlServer(env.socket, {"ping": state.ping}):
        done = env.run(*GPU_JOB)
    assert done.returncode == 0
    assert done.stdout == "Submitted batch job 4242\n"
    assert len(env.only_call()) == len(GPU_JOB) + 2


def test_sbatch_failure_is_reported_once(env: Env, daemon: Daemon) -> None:
    done = env.run(*GPU_JOB, FAKE_SBATCH_EXIT="1")
    assert done.returncode == 1
    assert len(env.calls()) == 1
    down = env.run("-c", "1", "job.sh", FAKE_SBATCH_EXIT="3")
    assert down.returncode == 3
    assert len(env.calls()) == 2


def test_missing_sbatch_binary(env: Env) -> None:
    done = env.run("-c", "1", "job.sh", COMPASS_SBATCH=str(env.tmp / "nope"))
    assert done.returncode == 127
    assert done.stderr == f"compass-sbatch: cannot run {env.tmp / 'nope'}: No such file or directory\n"


def test_compass_submit_is_the_same_wrapper(env: Env, daemon: Daemon) -> None:
    compass = [sys.executable, "-c", "from compass_slurm.cli import main; main()", "submit"]
    env.run("--migratable", "--help", command=compass)
    assert env.only_call() == ["--help"]  # every argument, --help included, belongs to sbatch
    env.log.unlink()
    done = env.run("-G", "1", "--wrap", "nvidia-smi", command=compass)
    assert done.stdout == "Submitted batch job 4242\n"
    assert env.only_call() == ["-G", "1", "--wrap", "nvidia-smi", "--comment=compass", "--begin=now+45"]


@pytest.mark.parametrize(("line", "job"), [
    (b"Submitted batch job 123\n", "123"),
    (b"Submitted batch job 123 on cluster alpha\n", "123"),
    (b"123\n", "123"),
    (b"123;alpha\n", "123"),
    (b"Submitted batch job 12x\n", None),
    (b"sbatch: Job 5 to start at ...\n", None),
    (b"Submitted batch job 0123\n", None),
])
def test_job_id_from_sbatch_output(line: bytes, job: str | None) -> None:
    assert job_id_from_output(line) == job
