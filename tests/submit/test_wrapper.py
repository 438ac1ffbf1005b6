"""The sbatch wrapper, run as users run it (scripts/compass-sbatch, compass submit), against a recording sbatch.

The recording sbatch (recorded_sbatch.py) stands first on PATH, notes the exact
argv and stdin it got and answers the option reader as a recorded release; the
daemon is a real ControlServer in a thread (up), no socket (down), a
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
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from compass_slurm.service.control import ControlServer, Peer, RequestError
from compass_slurm.submit import options
from compass_slurm.submit.sbatch_args import ENVIRONMENT
from compass_slurm.submit.wrapper import job_id_from_output, startup_seconds

REPO = Path(__file__).resolve().parents[2]
WRAPPER = REPO / "scripts" / "compass-sbatch"
MARGIN = 2.0  # generous: these tests check behaviour; benchmarks/bench_wrapper.py measures the latency

RECORDED_SBATCH = Path(__file__).with_name("recorded_sbatch.py")
DATA = REPO / "tests" / "data" / "sbatch"


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


def recorded_table(release: str) -> options.OptionTable:
    """The table the wrapper read from the real sbatch of ``release`` (tests/integration/test_wrapper_live.py)."""
    doc = json.loads((DATA / release / "options.json").read_text())
    return options.OptionTable(doc["long"], doc["short"], version=doc["version"])


class Env:
    """Runs the wrapper with the recording sbatch (of ``release``) first on PATH and a config naming the socket.

    The wrapper's cache of sbatch's option table is filled first (what the wrapper does on its first run), so
    that the log holds the wrapper's own calls only: a test of the reads empties the cache.
    """

    def __init__(self, tmp_path: Path, release: str = "26.05") -> None:
        self.tmp = tmp_path
        self.socket = tmp_path / "run" / "compass.sock"
        self.log = tmp_path / "sbatch.log"
        self.cache = tmp_path / "cache"
        bindir = tmp_path / "bin"
        bindir.mkdir()
        self.sbatch = bindir / "sbatch"
        self.sbatch.write_text(f"#!{sys.executable}\n{RECORDED_SBATCH.read_text()}")
        self.sbatch.chmod(0o755)
        (tmp_path / "job.sh").write_text("#!/bin/sh\nsrun python train.py\n")  # a script without directives
        config = tmp_path / "compass.toml"
        config.write_text(f'socket = "{self.socket}"\nlease = 45\nwrapper_timeout = 1.0\n')
        self.env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "COMPASS_CONFIG": str(config),
                    "FAKE_SBATCH_LOG": str(self.log), "FAKE_SBATCH_DATA": str(DATA / release),
                    "XDG_CACHE_HOME": str(self.cache)}
        for var in ("COMPASS_SOCKET", "COMPASS_SBATCH", "COMPASS_LEASE", "COMPASS_WRAPPER_TIMEOUT", *ENVIRONMENT):
            self.env.pop(var, None)
        path = str(self.sbatch.resolve())
        options.save(options.cache_file(self.env), path, options.stat_key(path), recorded_table(release))

    def forget_table(self) -> None:
        os.unlink(options.cache_file(self.env))

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
    # the token tells the job_submit hook that this begin holds the lease already (past the user's own)
    assert argv[:4] == ["-G", "2", "--begin=now+2hours", "--comment=compass compass:leased"]
    assert argv[5:] == ["job.sh"]
    ours = datetime.fromisoformat(argv[4].removeprefix("--begin="))
    assert timedelta(hours=2, seconds=44) <= ours - started <= timedelta(hours=2, seconds=47)
    env.log.unlink()
    env.run("-G", "2", "--begin=now", "job.sh")  # a begin already past is no begin: the usual lease
    assert env.only_call() == ["-G", "2", "--begin=now", "--comment=compass", "--begin=now+45", "job.sh"]


def test_help_says_what_the_wrapper_adds_then_sbatchs_help(env: Env, daemon: Daemon) -> None:
    done = env.run("--help")
    assert done.stdout.startswith("compass-sbatch [--migratable] SBATCH-ARGS...")
    assert "--open-mode=append" in done.stdout and "checkpoint" in done.stdout
    assert done.stdout.endswith((DATA / "26.05" / "help.txt").read_text())  # the recorded sbatch's help
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


@pytest.mark.parametrize("variable", ["SBATCH_EXCLUSIVE=user", "SBATCH_RESERVATION=maint", "SLURM_CLUSTERS=b"])
def test_what_leaves_a_job_to_slurm_counts_from_sbatchs_environment_too(env: Env, daemon: Daemon,
                                                                        variable: str) -> None:
    name, value = variable.split("=")
    env.run("-G", "1", "job.sh", **{name: value})
    assert env.only_call() == ["-G", "1", "job.sh"] and daemon.pings == 0


def test_a_comment_not_in_utf8_is_kept_as_given(env: Env, daemon: Daemon) -> None:
    done = subprocess.run([sys.executable, str(WRAPPER), "-G", "1", b"--comment=caf\xe9", "job.sh"],
                          capture_output=True, env=env.env, cwd=env.tmp, timeout=30)
    assert done.returncode == 0 and b"internal error" not in done.stderr, done.stderr
    given, marked = os.fsdecode(b"--comment=caf\xe9"), os.fsdecode(b"--comment=compass caf\xe9")
    assert env.only_call() == ["-G", "1", given, marked, "--begin=now+45", "job.sh"]


def test_a_directive_not_in_utf8_reaches_sbatch_byte_for_byte(env: Env, daemon: Daemon) -> None:
    """A Latin-1 ``#SBATCH --comment``: the marked comment the wrapper passes on keeps its bytes (not U+FFFD)."""
    (env.tmp / "latin1.sh").write_bytes(b"#!/bin/sh\n#SBATCH -G 1 --comment=caf\xe9\nhostname\n")
    env.run("latin1.sh")
    assert env.only_call() == [os.fsdecode(b"--comment=compass caf\xe9"), "--begin=now+45", "latin1.sh"]


def test_whole_node_exclusive_is_managed(env: Env, daemon: Daemon) -> None:
    env.run("--exclusive", "-G", "1", "job.sh")
    assert env.only_call() == ["--exclusive", "-G", "1", "--comment=compass", "--begin=now+45", "job.sh"]


def test_a_comment_with_no_room_for_the_marker_is_said_and_submitted_plain(env: Env, daemon: Daemon) -> None:
    """Slurm refuses a comment past 1,024 bytes: the marker must not be what makes it so."""
    longest = "x" * (1024 - len("compass "))
    env.run("-G", "1", f"--comment={longest}", "job.sh")
    assert env.only_call() == ["-G", "1", f"--comment={longest}", "--comment=compass " + longest, "--begin=now+45",
                               "job.sh"]
    env.log.unlink()
    over = longest + "é"  # two bytes
    done = env.run("-G", "1", f"--comment={over}", "job.sh")
    assert env.only_call() == ["-G", "1", f"--comment={over}", "job.sh"]
    assert done.stderr.startswith("compass-sbatch: the comment leaves no room for the compass marker (Slurm takes "
                                  "1024 bytes), submitted with plain sbatch\n")


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
    ["--gres=gpu:4", "--gpus-per-socket=2", "job.sh"],      # sockets the daemon does not read
    ["-G", "1", ":", "-G", "2", "job.sh"],                   # a heterogeneous job
    ["-w", "node05", "-N", "2", "--gpus-per-node=1", "job.sh"],  # nodes the user chose (Slurm adds one here)
    ["--nodelist=node[01-02]", "-G", "2", "job.sh"],
    ["--exclusive=user", "-G", "1", "job.sh"],               # which nodes qualify depends on other jobs' owners
    ["--exclusive=mcs", "-G", "1", "job.sh"],
    ["--reservation=maint", "-G", "1", "job.sh"],            # the reservation's nodes
    ["-G", "1", "-t", "1", "--deadline=now+90seconds", "job.sh"],  # the lease would push its end past it
    ["--gpus=many", "job.sh"],                               # a value sbatch will reject
    ["--version"],
])
def test_jobs_not_for_the_daemon_go_to_sbatch_unchanged(env: Env, daemon: Daemon, args: list[str]) -> None:
    done = env.run("--migratable", *args)
    assert env.only_call() == args
    assert done.stderr == "sbatch: warning: recorded\n"
    assert daemon.pings == 0


@pytest.mark.parametrize(("release", "args"), [
    ("23.11", ["--tres-per-task=gres/gpu:1", "-n", "2", "job.sh"]),       # GPUs asked in 23.11's own words
    ("24.11", ["--segment", "2", "-N", "2", "--gpus-per-node=4", "job.sh"]),  # not in --help: probed
    ("25.11", ["--requeue=expedited", "--spread-seg", "-G", "1", "job.sh"]),  # a value 22.05 refused; a prefix
    ("26.05", ["--container-id", "c7", "--gpus=1", "job.sh"]),            # bare in --help up to 25.11
])
def test_options_of_later_releases_are_read_from_their_sbatch(tmp_path: Path, release: str,
                                                              args: list[str]) -> None:
    env = Env(tmp_path, release)
    with ControlServer(env.socket, {"ping": Daemon().ping}):
        done = env.run(*args)
    assert done.stderr == "sbatch: warning: recorded\n"
    argv = env.only_call()
    assert argv[:len(args) - 1] == args[:-1] and argv[-1] == "job.sh"
    assert any(arg.startswith("--comment=compass") for arg in argv)


@pytest.mark.parametrize(("args", "script", "said"), [
    (["--frobnicate", "-G", "2", "job.sh"], None, "option --frobnicate is unknown to this wrapper"),
    (["-Z", "-G", "2", "job.sh"], None, "option -Z is unknown to this wrapper"),
    (["--hold=yes", "-G", "2", "job.sh"], None, "option --hold takes no value"),
    (["gpu.sh"], "#SBATCH -G 1\n#SBATCH --frobnicate\n",
     "script line 3: option --frobnicate is unknown to this wrapper"),
])
def test_an_option_the_wrapper_cannot_read_is_said_then_plain_sbatch(env: Env, daemon: Daemon, args: list[str],
                                                                    script: str | None, said: str) -> None:
    if script is not None:
        (env.tmp / "gpu.sh").write_text(f"#!/bin/sh\n{script}")
    done = env.run("--migratable", *args)
    assert env.only_call() == args
    assert done.stderr.splitlines() == [f"compass-sbatch: {said}; submitting with plain sbatch, unmanaged",
                                        "sbatch: warning: recorded"]
    assert daemon.pings == 0


def test_on_22_05_an_option_it_lacks_is_said_and_left_to_sbatch(tmp_path: Path) -> None:
    """On 22.05 an option it lacks is no option: the wrapper says so, and sbatch refuses it (here: records it)."""
    env = Env(tmp_path, "22.05")
    done = env.run("--tres-per-task=gres/gpu:1", "job.sh")
    assert done.stderr.splitlines()[0] == ("compass-sbatch: option --tres-per-task is unknown to this wrapper; "
                                           "submitting with plain sbatch, unmanaged")
    assert env.only_call() == ["--tres-per-task=gres/gpu:1", "job.sh"]


def test_the_table_is_read_once_per_binary(env: Env, daemon: Daemon) -> None:
    env.forget_table()
    env.run("-G", "1", "job.sh")
    reads = [call["argv"] for call in env.calls()[:-1]]
    assert ["--help"] in reads and ["--="] in reads and ["--segment", "--version", "--usage"] in reads
    assert all(argv[-1] in ("--help", "--usage", "--version", "--=") for argv in reads)  # none could submit
    assert env.calls()[-1]["argv"] == ["-G", "1", "--comment=compass", "--begin=now+45", "job.sh"]
    env.log.unlink()
    env.run("-G", "1", "job.sh")
    assert len(env.calls()) == 1  # cached
    env.log.unlink()
    env.sbatch.write_text(env.sbatch.read_text() + "\n")  # another sbatch: read again
    env.run("-G", "1", "job.sh")
    assert len(env.calls()) == len(reads) + 1


def test_without_a_writable_cache_the_table_is_read_each_time(env: Env, daemon: Daemon) -> None:
    env.forget_table()
    blocked = env.tmp / "not-a-dir"
    blocked.write_text("")
    for _ in range(2):
        env.run("--segment=2", "-G", "1", "job.sh", XDG_CACHE_HOME=str(blocked))
        assert env.calls()[-1]["argv"][0] == "--segment=2" and len(env.calls()) > 1
        env.log.unlink()


def test_an_sbatch_that_cannot_be_read_leaves_the_built_in_table(env: Env, daemon: Daemon) -> None:
    """No slurm.conf, say: sbatch's --help fails, so 22.05's table serves, and nothing is cached."""
    env.forget_table()
    done = env.run("-G", "1", "job.sh", FAKE_SBATCH_DATA=str(env.tmp / "nothing"))
    assert done.returncode == 0
    assert env.calls()[-1]["argv"] == ["-G", "1", "--comment=compass", "--begin=now+45", "job.sh"]
    assert not os.path.exists(options.cache_file(env.env))


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


def test_compass_submit_hands_sbatch_arguments_not_in_utf8_as_they_are(env: Env, daemon: Daemon) -> None:
    """A job name in Latin-1 is sbatch's to take (compass-sbatch and sbatch take it); compass's own commands refuse
    such an argument, but not in what goes to sbatch."""
    compass = [sys.executable, "-c", "from compass_slurm.cli import main; main()", "submit"]
    done = subprocess.run([*compass, b"-Jcaf\xe9", "-G", "1", "job.sh"], capture_output=True, env=env.env,
                          cwd=env.tmp, timeout=30)
    assert done.returncode == 0, done.stderr
    assert env.only_call() == [os.fsdecode(b"-Jcaf\xe9"), "-G", "1", "--comment=compass", "--begin=now+45", "job.sh"]
    env.log.unlink()
    env.run("--", "job.sh", "-G", "1", command=compass)  # "--" is sbatch's: what follows is the script, then its args
    assert env.only_call() == ["--", "job.sh", "-G", "1"]


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
