"""Fault injection on the real dev cluster: the daemon as a real process, slurmctld crashes, job accounting.

Shared by the fault tests (tests/faults) and the soak (benchmarks/soak.py).
Every job gets a unique name, so Slurm's own view (``squeue --states=all``;
finished jobs stay listed for the cluster's MinJobAge, 300 s) tells whether
it was submitted once, and where it ran.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from devcluster import beside, dev

REPO = Path(__file__).resolve().parents[2]
WRAPPER = REPO / "scripts" / "compass-sbatch"
_VENV_COMPASS = Path(sys.executable).with_name("compass")
COMPASS = [str(_VENV_COMPASS)] if _VENV_COMPASS.exists() else [
    sys.executable, "-c", "from compass_slurm.cli import main; main()"]
#: squeue fields; the comment and the name cannot hold it
SEP = "\x1f"
T = TypeVar("T")


def kill_ctld(backup: bool = False) -> None:
    """SIGKILL the primary slurmctld (``backup``: the backup one of a backup-controller cluster)."""
    done = dev("kill-ctld", *(["--backup"] * backup))
    assert done.returncode == 0, done.stderr


def restart_ctld(backup: bool = False) -> None:
    """Start it again; with a backup controller, returns once `scontrol ping` says both are UP."""
    done = dev("restart-ctld", *(["--backup"] * backup))
    assert done.returncode == 0, done.stderr


def until(check: Callable[[], T], timeout: float, what: str, poll: float = 0.3) -> T:
    """check()'s first truthy value; AssertionError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not true after {timeout:.0f} s (last: {value!r})")
        time.sleep(poll)


# -- the daemon as a process ------------------------------------------------------------------


class DaemonProcess:
    """``compass daemon --interval S`` with its socket, anchors, config and log under ``workdir``.

    With ``hostname``, it runs beside that controller (devcluster.beside): in a UTS namespace of that name, its
    pid still the daemon's own."""

    def __init__(self, workdir: Path, *, lease: int = 60, interval: float = 1.0, db: Path | str | None = None,
                 extra_env: Mapping[str, str] | None = None, hostname: str | None = None) -> None:
        self.workdir = workdir
        self.hostname = hostname
        workdir.mkdir(parents=True, exist_ok=True)
        #: the decision log's URL; ``db`` names a SQLite file (by default workdir/log.db) or is a URL
        self.url = db if isinstance(db, str) else f"sqlite:///{db or workdir / 'log.db'}"
        self.db = Path(self.url.removeprefix("sqlite:///"))  # the SQLite file (of a SQLite log)
        self.socket = workdir / "run" / "compass.sock"
        self.interval = interval
        config = workdir / "compass.toml"
        config.write_text("")  # nothing from /etc/compass: the environment below says everything
        self.env = {**os.environ, "COMPASS_CONFIG": str(config), "COMPASS_DB": self.url,
                    "COMPASS_SOCKET": str(self.socket), "COMPASS_ANCHORS": str(workdir / "anchors"),
                    "COMPASS_LEASE": str(lease), "COMPASS_METRICS_TEXTFILE": str(workdir / "metrics.prom"),
                    # never the machine's /run/compass/hook.conf; a test that drives the hook names its own
                    "COMPASS_HOOK_CONFIG": str(workdir / "hook.conf"),
                    **(extra_env or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def log(self) -> Path:
        return self.workdir / "daemon.log"

    def start(self) -> DaemonProcess:
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self.starts += 1
        with open(self.log, "ab") as log:
            log.write(f"=== start {self.starts}\n".encode())
            prefix = beside(self.hostname) if self.hostname is not None else []
            self.proc = subprocess.Popen([*prefix, *COMPASS, "daemon", "--verbose", "--interval", str(self.interval)],
                                         stdout=log, stderr=log, env=self.env)
        until(lambda: self.ping() is not None, 30, "the daemon answers ping")
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL, as a crash or the OOM killer would."""
        if self.running():
            self.signal(signal.SIGCONT)  # a stopped process dies only once continued
            self.signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(10)

    def stop(self) -> None:
        if self.running():
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()

    def ping(self) -> int | None:
        """The daemon's cycle count, or None when it does not answer."""
        return self._answer("cycle")

    def looks(self) -> int | None:
        """The looks it ran between cycles, or None when it does not answer."""
        return self._answer("looks")

    def role(self) -> str | None:
        """"leader" or "standby" (service/leader.py), or None when it does not answer."""
        return self._answer("role")

    def _answer(self, key: str):
        from compass_slurm.service import control

        try:
            reply = control.request(self.socket, {"op": "ping"}, 2.0)
        except control.ControlUnavailable:
            return None
        return reply.get(key) if reply.get("ok") else None

    def wait_cycles(self, n: int, timeout: float = 60) -> int:
        """Wait until ``n`` more cycles ran; returns the count reached."""
        start = until(self.ping, timeout, "the daemon answers ping")
        return until(lambda: (c := self.ping()) is not None and c >= start + n and c, timeout,
                     f"{n} daemon cycles")

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def metrics(self) -> dict[str, float]:
        """The Prometheus textfile it writes every cycle, as metric -> value."""
        lines = (self.workdir / "metrics.prom").read_text().splitlines()
        return {k: float(v) for k, _, v in (line.partition(" ") for line in lines if line and line[0] != "#")}


# -- jobs, as Slurm sees them -----------------------------------------------------------------


@dataclass(frozen=True)
class SlurmJob:
    id: str
    name: str
    state: str
    comment: str
    nodes: str
    reason: str
    start: str = ""
    end: str = ""


def jobs_named(prefix: str) -> list[SlurmJob]:
    """Every job Slurm still knows (finished ones for MinJobAge) whose name starts with ``prefix``."""
    out = subprocess.run(["squeue", "--noheader", "--states=all", "--array",
                          f"--format=%i{SEP}%j{SEP}%T{SEP}%k{SEP}%N{SEP}%r{SEP}%S{SEP}%e"],
                         capture_output=True, text=True, check=True).stdout
    found = [SlurmJob(*line.split(SEP)) for line in out.splitlines() if SEP in line]
    return [j for j in found if j.name.startswith(prefix)]


def cancel(job_ids: Iterable[str]) -> None:
    ids = list(job_ids)
    if ids:
        subprocess.run(["scancel", *ids], capture_output=True, check=False)


def submit(env: Mapping[str, str], *args: str, timeout: float = 300) -> tuple[subprocess.CompletedProcess[str], float]:
    """The real wrapper (scripts/compass-sbatch) with ``args``; returns its run and its wall time."""
    began = time.monotonic()
    done = subprocess.run([sys.executable, str(WRAPPER), *args], capture_output=True, text=True, env=dict(env),
                          timeout=timeout)
    return done, time.monotonic() - began


def job_id(done: subprocess.CompletedProcess[str]) -> str:
    """The id a --parsable submission printed."""
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0]


def wrapper_env(daemon: DaemonProcess, **settings: str) -> dict[str, str]:
    """The environment a user's wrapper would run with, pointing at ``daemon``."""
    return {**os.environ, "COMPASS_CONFIG": daemon.env["COMPASS_CONFIG"], "COMPASS_SOCKET": str(daemon.socket),
            "COMPASS_LEASE": daemon.env["COMPASS_LEASE"], **settings}


def expand(nodes: str) -> tuple[str, ...]:
    from compass_slurm.slurm.hostlist import expand as hostlist_expand

    return tuple(hostlist_expand(nodes)) if nodes else ()


def log_disagreements(db: Path | str, jobs: Iterable[SlurmJob], once: bool = True) -> list[str]:
    """Where the decision log and Slurm disagree, for ``jobs``: empty when they agree.

    With ``once``, each job was placed at most once (a re-plan is a new decision with its
    reason; a restarted daemon may decide again what its killed self had decided); a job
    that started after a decision runs on the nodes of the job's latest record that says
    where it runs (placed, replanned, migrated or adopted).
    """
    from compass_slurm.service.store import PLACES, Store

    with Store.open(_url(db), create=False) as store:
        # every record that says where a job runs (not a refused one): the latest must be where it ran
        decisions = [d for d in store.decisions() if d.action in PLACES]
    by_job: dict[str, list] = {}
    for d in decisions:
        by_job.setdefault(d.job_id, []).append(d)
    problems = []
    for job in jobs:
        mine = by_job.get(job.id, [])
        if once and sum(d.action == "placed" for d in mine) > 1:
            problems.append(f"job {job.id} placed {sum(d.action == 'placed' for d in mine)} times")
        ran = expand(job.nodes) if job.state not in ("PENDING", "CANCELLED") else ()
        if mine and ran and set(mine[-1].nodes) != set(ran):
            problems.append(f"job {job.id} ran on {','.join(ran)}, the log says {','.join(mine[-1].nodes)}")
    return problems


def pins(lines: Iterable[list[str]]) -> list[str]:
    """The first node of every pin among scontrol command lines (what a cycle tells Slurm in one batch)."""
    return [expand(arg.partition("=")[2])[0] for argv in lines for arg in argv
            if arg.startswith("ReqNodeList=") and arg != "ReqNodeList="]


def first_pin(lines: Iterable[list[str]]) -> str | None:
    return next(iter(pins(lines)), None)


def submit_managed(name: str, lease: int, *args: str, seconds: int = 60) -> str:
    """sbatch exactly as the wrapper runs it for a GPU job when the daemon answers (marker, lease)."""
    out = subprocess.run(["sbatch", "--parsable", "--output=/dev/null", f"--job-name={name}", "--comment=compass",
                          f"--begin=now+{lease}", *args, "--wrap", f"sleep {seconds}"],
                         capture_output=True, text=True, check=True).stdout
    return out.strip().split(";")[0]


def all_in(prefix: str, wanted: set[str], count: int) -> dict[str, str] | None:
    """The jobs' states once ``count`` jobs carry ``prefix`` and all are in ``wanted``, else a falsy
    description of what is missing (for the failure message)."""
    jobs = jobs_named(prefix)
    seen = {j.id: j.state for j in jobs}
    if len(seen) == count and set(seen.values()) <= wanted:
        return seen
    # the first few jobs not in ``wanted``, with where and when they ran, for a failure seen once
    odd = [f"{j.id} {j.state} on {j.nodes or '-'} ({j.reason}) {j.start} to {j.end}"
           for j in jobs if j.state not in wanted]
    return _Missing(f"{len(seen)}/{count} jobs; " + ", ".join(f"{k} {v}" for k, v in Counter(seen.values()).items())
                    + ("; " + "; ".join(odd[:6]) if odd else ""))


class _Missing(str):
    def __bool__(self) -> bool:
        return False


def held(prefix: str) -> list[str]:
    return [j.id for j in jobs_named(prefix) if "Held" in j.reason or j.reason == "JobHeldAdmin"]


def integrity(db: Path | str) -> list[str]:
    """PRAGMA integrity_check's complaints ([] when sound; a server has no such check), and whether every cycle's
    records landed whole."""
    from sqlalchemy import text

    from compass_slurm.service.store import Store

    with Store.open(_url(db), create=False) as store:
        problems = store.integrity_check() or []
        with store.engine.connect() as conn:
            # A cycle's placements are one transaction, written before Slurm hears of them; the rest of it,
            # its sample among them, is another (no cycle here is skipped). A cycle without its sample is one
            # killed between the two: decisions alone.
            torn = conn.execute(text("SELECT count(*) FROM cycles WHERE id NOT IN (SELECT cycle FROM samples) AND ("
                                     "id NOT IN (SELECT cycle FROM decisions) OR id IN (SELECT cycle FROM migrations)"
                                     " OR id IN (SELECT cycle FROM errors))"))
            problems += [f"{n} cycles without their sample" for (n,) in torn if n]
    return problems


def _url(db: Path | str) -> str:
    """A decision log's URL: ``db`` itself, or the SQLite file it names."""
    return db if isinstance(db, str) else f"sqlite:///{db}"
