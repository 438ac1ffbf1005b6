"""The wrapper where plain sbatch's streams are unusual: a job script that is not a regular file (a pipe, a
FIFO, our stdin by name), an stdout that cannot be written, a Ctrl-C; and the settings that bound its lease.

Same recording sbatch and daemon as test_wrapper.py; where it matters, the sbatch first opens its script by
its path as the real one does (``reading``), so that a script the wrapper consumed or closed shows.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from compass_slurm.config import ConfigError, load_config
from compass_slurm.submit import options
from test_wrapper import RECORDED_SBATCH, WRAPPER, Daemon, Env, daemon, env, recorded_table  # noqa: F401

SCRIPT = "#!/bin/sh\n#SBATCH --gpus=1\nsrun train\n"
PLAIN_SCRIPT = "#!/bin/sh\nhostname\n"

#: put before the recording sbatch: like sbatch, it opens the first operand (the script: these tests give
#: options with their values attached) by its path, and notes what it read there in $SEEN
READS_ITS_SCRIPT = """
import os, sys
operand = next((a for a in sys.argv[1:] if not a.startswith("-")), None)
if operand is not None:
    try:
        with open(operand, "rb") as script:
            seen = script.read()
    except OSError as err:
        seen = f"Unable to open file {operand}: {err}".encode()
    with open(os.environ["SEEN"], "wb") as note:
        note.write(seen)
"""


def install_sbatch(env: Env, text: str) -> None:
    """Another sbatch in the recording one's place, its option table cached as the wrapper would have."""
    env.sbatch.write_text(text)
    path = str(env.sbatch.resolve())
    options.save(options.cache_file(env.env), path, options.stat_key(path), recorded_table("26.05"))


@pytest.fixture
def reading(env: Env) -> Path:
    install_sbatch(env, f"#!{sys.executable}\n{READS_ITS_SCRIPT}\n{RECORDED_SBATCH.read_text()}")
    return env.tmp / "seen"


def shell(line: str) -> list[str]:
    """The wrapper run by ``sh -c line``, where ``"$@"`` is the wrapper and its arguments."""
    return ["sh", "-c", line, "sh", sys.executable, str(WRAPPER)]


# --- a script that is not a regular file: read once by the wrapper, so its bytes must reach sbatch ---

@pytest.mark.parametrize("script", [SCRIPT, PLAIN_SCRIPT], ids=["managed", "plain"])
@pytest.mark.parametrize(("line", "path"), [
    ('cat job.sh | { exec 3<&0 </dev/null; exec "$@"; }', "/dev/fd/3"),   # <(cat job.sh)
    ('cat job.sh | exec "$@"', "/dev/stdin"),
    ('mkfifo ff && { cat job.sh > ff & } && exec "$@"', "ff"),
], ids=["process-substitution", "dev-stdin", "fifo"])
def test_a_script_that_is_not_a_regular_file_reaches_sbatch(env: Env, daemon: Daemon, reading: Path, script: str,
                                                            line: str, path: str) -> None:
    (env.tmp / "job.sh").write_text(script)
    done = env.run("--comment=x", path, "--epochs", "3", command=shell(line), SEEN=str(reading))
    assert done.returncode == 0, done.stderr
    assert done.stdout == "Submitted batch job 4242\n"
    assert reading.read_text() == script
    argv = env.only_call()
    assert argv[-3:] == ["/dev/stdin", "--epochs", "3"]  # the script's own arguments kept
    assert ("--begin=now+45" in argv) == (script == SCRIPT)


def test_a_regular_file_by_an_inherited_descriptor_keeps_its_path(env: Env, daemon: Daemon, reading: Path) -> None:
    (env.tmp / "job.sh").write_text(SCRIPT)
    done = env.run("/dev/fd/3", command=shell('exec "$@" 3<job.sh'), SEEN=str(reading))
    assert done.returncode == 0, done.stderr
    assert reading.read_text() == SCRIPT  # sbatch inherits the descriptor, as it would from the shell
    assert env.only_call() == ["--comment=compass", "--begin=now+45", "/dev/fd/3"]


# --- an stdout that cannot be written, once the job is submitted: said, and sbatch's exit code stands ---

@pytest.mark.parametrize(("outcome", "reason"), [
    ({"command": shell('exec "$@" >/dev/full')}, "No space left on device"),
    ({"command": shell('exec "$@" >&-')}, "no standard output"),
    ({"pipe": True}, "Broken pipe"),
], ids=["full", "closed", "broken-pipe"])
def test_an_output_that_cannot_be_written_leaves_the_job_submitted(env: Env, daemon: Daemon, outcome: dict[str, Any],
                                                                   reason: str) -> None:
    args = ["--gpus=1", "job.sh"]
    if outcome.get("pipe"):
        read, write = os.pipe()
        os.close(read)  # `| true`, without the race: no reader from the start
        try:
            done = subprocess.run([sys.executable, str(WRAPPER), *args], stdout=write, stderr=subprocess.PIPE,
                                  text=True, timeout=30, env={**env.env, "FAKE_SBATCH_EXIT": "3"}, cwd=env.tmp)
        finally:
            os.close(write)
    else:
        done = env.run(*args, command=outcome["command"], FAKE_SBATCH_EXIT="3")
    assert done.returncode == 3  # sbatch's
    assert done.stderr.splitlines() == [
        "sbatch: warning: recorded",
        f"compass-sbatch: cannot write sbatch's output ({reason}); sbatch ran once, its exit code stands"]
    assert len(env.only_call()) == 4
    assert daemon.submitted == ["4242"]


# --- Ctrl-C: before sbatch runs nothing is submitted; while it runs, sbatch decides ---

def test_ctrl_c_while_pinging_the_daemon_exits_130_with_nothing_submitted(env: Env) -> None:
    env.socket.parent.mkdir()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as hung:
        hung.bind(str(env.socket))
        hung.listen(8)
        hung.settimeout(20)
        wrapper = subprocess.Popen([sys.executable, str(WRAPPER), "--gpus=1", "job.sh"], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, cwd=env.tmp,
                                   env={**env.env, "COMPASS_WRAPPER_TIMEOUT": "20"})
        with hung.accept()[0]:  # the ping, never answered
            wrapper.send_signal(signal.SIGINT)
            out, err = wrapper.communicate(timeout=30)
    assert wrapper.returncode == 130
    assert (out, err) == ("", "compass-sbatch: interrupted, nothing submitted\n")
    assert env.calls() == []


@pytest.mark.parametrize("args", [["--gpus=1", "job.sh"], []], ids=["managed", "plain"])
def test_ctrl_c_while_sbatch_runs_leaves_its_result(env: Env, daemon: Daemon, args: list[str]) -> None:
    """A Ctrl-C (to the wrapper alone) while sbatch runs, as a child: sbatch goes on, and its job stands.
    (Both paths spawn sbatch, so that $PPID is the wrapper: the plain one because the script is on stdin.)"""
    install_sbatch(env, f'#!/bin/sh\nkill -INT $PPID\nsleep 0.3\nexec {sys.executable} {RECORDED_SBATCH} "$@"\n')
    done = env.run(*args, stdin="" if args else PLAIN_SCRIPT)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "Submitted batch job 4242\n"
    assert done.stderr == "sbatch: warning: recorded\n"
    assert len(env.calls()) == 1


# --- the lease: a fallback of seconds to minutes, never a start time years away ---

@pytest.mark.parametrize("name", ["lease", "interactive_lease"])
@pytest.mark.parametrize("value", ["inf", "1e12", "86401", "nan"])
def test_a_lease_beyond_a_day_is_a_config_error(name: str, value: str) -> None:
    var = f"COMPASS_{name.upper()}"
    with pytest.raises(ConfigError, match=rf"^{name} = \S+ \(from {var}\) is not a valid non-negative number of "
                                          r"seconds up to 86400$"):
        load_config(environ={"COMPASS_CONFIG": os.devnull, var: value})
    assert getattr(load_config(environ={"COMPASS_CONFIG": os.devnull, var: "86400"}), name) == 86400


def test_an_unbounded_lease_leaves_the_job_to_plain_sbatch(env: Env, daemon: Daemon) -> None:
    done = env.run("--gpus=1", "job.sh", COMPASS_LEASE="1e12")
    assert env.only_call() == ["--gpus=1", "job.sh"]
    assert done.stderr.splitlines()[0] == (
        "compass-sbatch: daemon unavailable (lease = 1000000000000.0 (from COMPASS_LEASE) is not a valid "
        "non-negative number of seconds up to 86400), submitted with plain sbatch")
