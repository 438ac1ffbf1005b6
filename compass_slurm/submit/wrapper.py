"""The sbatch wrapper (``scripts/compass-sbatch``, ``compass submit``): a drop-in for sbatch for GPU jobs.

A GPU job whose daemon answers a ping within ``wrapper_timeout`` (counted from the
ping; longer on a busy login node, by as much as this process took beyond
IDLE_STARTUP to start) is submitted with the user's arguments plus
``--comment=<marker>`` (the user's own comment kept beside the marker) and
``--begin=now+<lease>``: the job waits for the
daemon to place it, and if the daemon never does, Slurm starts it by itself
when the lease runs out. A user's own later ``--begin`` becomes that time plus
the lease: the daemon places the job from its begin time on. A ``--migratable``
job also gets ``--open-mode=append`` unless the user chose a mode, so that a
migration (a requeue) adds to its output files instead of truncating them.
Everything else runs plain sbatch with the user's arguments, minus ``--migratable``:

- no GPUs asked for, ``--usage``/``--version``, ``--test-only`` (sbatch's own answer);
- an option the table of the installed sbatch does not have, or used against it (one line on
  stderr names it: the job is unmanaged, never lost);
- other arguments or directives we cannot read with certainty (sbatch reports its own errors);
- a ``--begin`` in a form we do not resolve, other clusters (``--clusters``),
  heterogeneous jobs (one node list cannot place them);
- nodes the user chose (``-w``, ``-F``), a reservation, ``--exclusive=user|mcs|topo``, ``--deadline``,
  ``--gpus-per-socket`` (UNMANAGED), as the job_submit hook leaves them;
- a comment that leaves no room for the marker (Slurm takes 1,024 bytes; one line on stderr);
- the daemon unreachable, slow or failing: then one line on stderr says why.

The option table is the installed sbatch's (compass_slurm.submit.options; read
once per sbatch binary and cached; those reads exit before submitting anything).
``--help`` prints what the wrapper adds, then sbatch's help. sbatch submits exactly
once on every path, and never runs again after it may have submitted. Its stdout and
stderr reach the user unchanged, and its exit code is ours (also when its output cannot
be written: the job stands, and one line on stderr says so). A Ctrl-C before sbatch runs
exits 130 with nothing submitted; one while it runs is sbatch's to act on. A script that
is not a regular file (``<(...)``, ``/dev/stdin``, a FIFO) is read once, so sbatch gets
its bytes on its stdin as ``/dev/stdin`` (the job's default name is then "stdin").
Standard library imports only: this sits in every submission.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import signal
import stat
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta

from .options import table_for
from .sbatch_args import (
    INFORMATIONAL, MIGRATABLE, OptionError, SbatchArgsError, SbatchCommand, begin_time, environment_options,
    gpu_request, last, last_of, parse_command_line, parse_directives,
)

PROG = "compass-sbatch"
#: options that leave a job to Slurm: sbatch's own answer (--test-only); other clusters; GPUs per socket (the daemon
#: does not read the nodes' sockets); nodes the user chose (as the job_submit hook leaves them); a reservation's nodes;
#: a deadline (the lease would push the job's end past it, and Slurm refuses the job)
UNMANAGED = ("test-only", "clusters", "gpus-per-socket", "nodelist", "nodefile", "reservation", "deadline")
#: the "submitted" notice is a courtesy (the lease starts the job anyway): never wait long for it
NOTIFY_TIMEOUT = 0.5
_SUBMITTED = re.compile(rb"Submitted batch job (\S+)")
_PARSABLE = re.compile(rb"(\d[\d_]*)(?:;\S*)?")
#: what starting the wrapper takes on an idle machine (Python and our imports: about 0.05 s); a start-up
#: beyond it is load, and that much more is allowed for the daemon's answer, up to MAX_LOAD_ALLOWANCE
IDLE_STARTUP = 0.25
MAX_LOAD_ALLOWANCE = 10.0
#: where sbatch reads a script we had to consume (a pipe, a FIFO): its stdin, which we fill with the bytes
STDIN_SCRIPT = "/dev/stdin"
#: the shell's exit code for a Ctrl-C
INTERRUPTED = 130

HELP = f"""\
{PROG} [--migratable] SBATCH-ARGS...: sbatch, with GPU jobs placed by the compass daemon.

Every sbatch option keeps its meaning (sbatch's help follows). A GPU job is
submitted with a compass marker in its comment and a start time the daemon
moves up when it places the job; without a daemon it is plain sbatch.

  --migratable   the job may be requeued onto other nodes to defragment the
                 cluster (at most migrations_per_hour moves per hour). It must
                 restart from its own checkpoint: a requeue starts the batch
                 script again from the top, with SLURM_RESTART_COUNT set. Its
                 output files are opened with --open-mode=append (unless you
                 choose a mode), so a restart adds to them instead of
                 truncating them.

"""


class _Sbatch:
    """Runs sbatch at most once; ``started`` says whether it may have submitted."""

    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.started = False

    def _begin(self) -> None:
        assert not self.started, "sbatch must run only once"
        # Ctrl-C reaches sbatch too (same process group): whether it submits is its call, and we must outlive it
        # to relay its output and exit code. A handler, not SIG_IGN, so that sbatch (on exec) gets the default.
        # Set before ``started``: an interrupt up to here finds nothing submitted.
        signal.signal(signal.SIGINT, _leave_to_sbatch)
        self.started = True

    def plain(self, argv: Sequence[str], stdin: bytes | None) -> int:
        """sbatch with its output going straight to ours; exec'd when the script is not on our stdin."""
        self._begin()
        if stdin is None:
            try:
                os.execvp(self.binary, [self.binary, *argv])
            except OSError as err:
                return _cannot_run(self.binary, err)
        try:
            return _exit_code(subprocess.run([self.binary, *argv], input=stdin, close_fds=False).returncode)
        except OSError as err:
            return _cannot_run(self.binary, err)

    def managed(self, argv: Sequence[str], stdin: bytes | None, on_job: Callable[[str], None]) -> int:
        """sbatch relaying its stdout line by line; ``on_job`` gets the job id as soon as it is printed."""
        self._begin()
        try:
            # close_fds=False: sbatch inherits what plain sbatch would (a script named /dev/fd/N); our own
            # descriptors are not inheritable
            proc = subprocess.Popen([self.binary, *argv], stdin=subprocess.PIPE if stdin is not None else None,
                                    stdout=subprocess.PIPE, close_fds=False)
        except OSError as err:
            return _cannot_run(self.binary, err)
        if stdin is not None:
            assert proc.stdin is not None
            try:
                proc.stdin.write(stdin)
                proc.stdin.close()
            except BrokenPipeError:
                pass  # sbatch stopped reading; its exit code tells what happened
        assert proc.stdout is not None
        relay = _Relay()
        job: str | None = None
        for line in proc.stdout:
            relay.write(line)
            if job is None:
                job = job_id_from_output(line)
                if job is not None:
                    on_job(job)
        return _exit_code(proc.wait())


class _Relay:
    """Our stdout for sbatch's: once a write fails (a closed pipe, a full disk, no stdout at all), one line on
    stderr says so and the rest is dropped. sbatch has run by then: failing would invite a resubmission."""

    def __init__(self) -> None:
        self.out = getattr(sys.stdout, "buffer", None)
        self.failed = False

    def write(self, line: bytes) -> None:
        if self.failed:
            return
        try:
            if self.out is None:
                raise OSError("no standard output")
            self.out.write(line)
            self.out.flush()
        except (OSError, ValueError) as err:  # ValueError: a closed file
            self.failed = True
            _say(f"cannot write sbatch's output ({_reason(err)}); sbatch ran once, its exit code stands")
            self._discard()

    def _discard(self) -> None:
        """Points our stdout at /dev/null, so that the exit's flush of what is left does not fail again."""
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        except (AttributeError, OSError, ValueError):
            pass  # no stdout to flush


def job_id_from_output(line: bytes) -> str | None:
    """The job id in a line of sbatch's stdout (``Submitted batch job N`` or --parsable's ``N[;cluster]``)."""
    from ..slurm import names
    from ..slurm.errors import SlurmNameError

    match = _SUBMITTED.search(line) or _PARSABLE.fullmatch(line.strip())
    if not match:
        return None
    try:
        return names.job_id(match.group(1).decode())
    except SlurmNameError:
        return None


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Submit like sbatch would; returns sbatch's exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    env = os.environ if environ is None else environ
    sbatch = _Sbatch(env.get("COMPASS_SBATCH") or "sbatch")
    submission = _Submission(args, env, sbatch)
    try:
        return submission.run()
    except KeyboardInterrupt:  # only before sbatch runs (_Sbatch._begin): nothing is submitted
        _say("interrupted, nothing submitted")
        return INTERRUPTED
    except Exception as err:  # a bug of ours must not cost the user their submission
        if sbatch.started:  # nor submit it twice: said in one line, and left as it stands
            _say(f"internal error after sbatch ran ({type(err).__name__}: {err}); not run again")
            return 1
        _say(f"internal error ({type(err).__name__}: {err}), submitted with plain sbatch")
        return sbatch.plain(submission.plain_argv, submission.stdin)


class _Submission:
    def __init__(self, args: list[str], env: Mapping[str, str], sbatch: _Sbatch) -> None:
        self.env = env
        self.sbatch = sbatch
        self.stdin: bytes | None = None
        self.plain_argv = _strip_own_flag(args)
        self.args = args

    def run(self) -> int:
        table = table_for(self.sbatch.binary, self.env)
        try:
            command = parse_command_line(self.args, table)
        except OptionError as err:
            return self._unreadable(err, None)
        self.plain_argv = command.argv()
        asked = {option.name for option in command.options}
        if "help" in asked:
            sys.stdout.write(HELP)
            sys.stdout.flush()
        if asked & INFORMATIONAL:
            return self.sbatch.plain(self.plain_argv, None)
        try:
            script, command = self._script(command)
            directives, heterogeneous = parse_directives(script, table) if script is not None else ([], False)
            options = [*directives, *environment_options(self.env), *command.options]
            wants_gpus = gpu_request(options).wants_gpus
        except OptionError as err:
            return self._unreadable(err, self.stdin)
        except (OSError, SbatchArgsError):
            return self.sbatch.plain(self.plain_argv, self.stdin)  # sbatch reports the unreadable script or value
        now = datetime.now()
        begin = last(options, "begin")
        user_begin = begin_time(begin, now) if begin is not None else now
        unmanaged = (not wants_gpus or heterogeneous or command.heterogeneous or user_begin is None
                     or any(last(options, name) is not None for name in UNMANAGED)
                     or last(options, "exclusive") not in (None, ""))  # =user|mcs|topo: as other jobs' owners allow
        if unmanaged:
            return self.sbatch.plain(self.plain_argv, self.stdin)
        # imported only for GPU jobs, so that every other submission starts as fast as it can
        from ..config import ConfigError, load_config
        from ..service import control_client as control
        from ..slurm.state import MAX_COMMENT, marker_comment

        try:
            config = load_config(environ=self.env)
            # The budget is the daemon's time to answer, not our own start-up: a loaded login node must
            # not decide whether a job is managed. A slow start-up means a busy machine, where reading
            # the answer is slow in the same measure, so the load it shows extends the wait.
            load = min(max(0.0, startup_seconds() - IDLE_STARTUP), MAX_LOAD_ALLOWANCE)
            reply = control.request(config.socket, {"op": "ping"}, config.wrapper_timeout + load)
            if not reply["ok"]:
                raise control.ControlUnavailable(f"it answered: {reply.get('error', 'an error')}")
        except (ConfigError, control.ControlUnavailable) as err:
            _say(f"daemon unavailable ({err}), submitted with plain sbatch")
            return self.sbatch.plain(self.plain_argv, self.stdin)
        # Slurm's own --requeue, recorded for the daemon's migratable = "requeue" (the hook does the same)
        requeue = last_of(options, "requeue", "no-requeue") == "requeue"
        comment = marker_comment(command.migratable, last(options, 'comment') or '', requeue, leased=user_begin > now)
        if len(os.fsencode(comment)) > MAX_COMMENT:  # (bytes not in UTF-8 are the user's, as given)
            _say(f"the comment leaves no room for the compass marker (Slurm takes {MAX_COMMENT} bytes), "
                 "submitted with plain sbatch")
            return self.sbatch.plain(self.plain_argv, self.stdin)
        extra = [f"--comment={comment}", _lease(user_begin, now, config.lease)]
        if command.migratable and last(options, "open-mode") is None and not self.env.get("SBATCH_OPEN_MODE"):
            extra.append("--open-mode=append")  # a migration restarts the script: keep the first run's output
        return self.sbatch.managed(command.argv(extra), self.stdin, lambda job: _notify(config.socket, job))

    def _unreadable(self, err: OptionError, stdin: bytes | None) -> int:
        """An option this sbatch may take that we cannot read: said, so that no job goes unmanaged unnoticed
        (if sbatch does not take it either, it says so next, in its own words)."""
        _say(f"{err}; submitting with plain sbatch, unmanaged")
        return self.sbatch.plain(self.plain_argv, stdin)

    def _script(self, command: SbatchCommand) -> tuple[bytes | None, SbatchCommand]:
        """The job script's bytes (none with --wrap), and the command that hands them to sbatch: a regular
        file by its path; our stdin's or a stream's (a pipe, a FIFO: read once, gone) kept for sbatch's stdin."""
        if last(command.options, "wrap") is not None:
            return None, command
        if command.script is None:
            self.stdin = sys.stdin.buffer.read()
            return self.stdin, command
        with open(command.script, "rb") as file:
            script = file.read()
            if stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                return script, command
        self.stdin = script
        command = dataclasses.replace(command, operands=(STDIN_SCRIPT, *command.operands[1:]))
        self.plain_argv = command.argv()
        return script, command


def startup_seconds() -> float:
    """How long this process has run: the interpreter's start-up and our imports (0 where /proc is missing)."""
    try:
        with open("/proc/self/stat") as stat, open("/proc/uptime") as up:
            ticks = int(stat.read().rsplit(")", 1)[1].split()[19])  # field 22: start, in clock ticks since boot
            uptime = float(up.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0
    return max(0.0, uptime - ticks / os.sysconf("SC_CLK_TCK"))


def _lease(begin: datetime, now: datetime, lease: float) -> str:
    """``--begin`` for a managed job: the lease from now, or from the user's own later begin time
    (the daemon places a job once its begin time minus the lease has come)."""
    if begin <= now:
        return f"--begin=now+{math.ceil(lease)}"
    return f"--begin={(begin + timedelta(seconds=math.ceil(lease))).isoformat(timespec='seconds')}"


def _notify(socket_path: str, job: str) -> None:
    from ..service import control_client as control

    try:
        control.request(socket_path, {"op": "submitted", "job": job}, NOTIFY_TIMEOUT)
    except control.ControlUnavailable:
        pass  # the daemon finds the job in its next cycle, or the lease starts it


def _strip_own_flag(args: list[str]) -> list[str]:
    """Removes --migratable from arguments we could not parse: from the leading dash-arguments only,
    since after the script everything belongs to the script."""
    end = next((i for i, a in enumerate(args) if a == "--" or not a.startswith("-")), len(args))
    return [a for a in args[:end] if a != MIGRATABLE] + args[end:]


def _exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode  # killed by a signal: the shell's convention


def _cannot_run(binary: str, err: OSError) -> int:
    _say(f"cannot run {binary}: {err.strerror or err}")
    return 127


def _leave_to_sbatch(signum: int, frame: object) -> None:
    """SIGINT while sbatch runs: sbatch got it too, and its exit code says what it did."""


def _reason(err: Exception) -> str:
    return os.strerror(err.errno) if isinstance(err, OSError) and err.errno else str(err)


def _say(message: str) -> None:
    """One line on stderr; never fails (no stderr: nothing said; print's default would be our stdout)."""
    if sys.stderr is None:
        return
    try:
        print(f"{PROG}: {message}", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass
