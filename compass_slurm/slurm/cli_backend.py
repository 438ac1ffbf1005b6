"""The CLI backend: sinfo, squeue and scontrol, run as argument lists with a timeout.

One read is four commands, whatever the cluster size: nodes (``sinfo --json``),
jobs (``squeue --json``), partitions and reservations (``scontrol show ...
--oneliner``). Slurm older than 21.08 (no --json), or ``json=False``, reads
nodes and jobs with ``scontrol show node|job --details --oneliner`` instead.
Between cycles, ``pending_managed()`` is one small squeue of the pending jobs'
ids and comments.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable

from . import names, parse_json, parse_text
from .backend import Backend
from .errors import SlurmCommandError
from .state import SlurmState

#: the first Slurm whose sinfo and squeue print --json
JSON_SINCE = (21, 8)

NODES_JSON = ["sinfo", "--json"]
JOBS_JSON = ["squeue", "--json"]
NODES_TEXT = ["scontrol", "show", "node", "--details", "--oneliner"]
JOBS_TEXT = ["scontrol", "show", "job", "--details", "--oneliner"]
PARTITIONS = ["scontrol", "show", "partition", "--oneliner"]
RESERVATIONS = ["scontrol", "show", "reservation", "--oneliner"]
VERSION = ["scontrol", "--version"]
#: the daemon's look for new managed jobs between cycles: ids and comments of the pending jobs only
PENDING_COMMENTS = ["squeue", "--noheader", "--states=PENDING", "--format=%i %k"]

#: runs an argv and returns (exit code, stdout, stderr); tests swap in recorded output
Runner = Callable[[list[str], float], tuple[int, str, str]]


def run_process(argv: list[str], timeout: float) -> tuple[int, str, str]:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise SlurmCommandError(argv, f"no answer within {timeout:g} s") from None
    except OSError as err:
        raise SlurmCommandError(argv, f"cannot run: {err.strerror}") from None
    return done.returncode, done.stdout, done.stderr


def _version_tuple(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


class CliBackend(Backend):
    name = "cli"

    def __init__(self, timeout: float = 30.0, json: bool | None = None, runner: Runner = run_process) -> None:
        """``json``: None picks by Slurm's version. The commands find the cluster as usual (SLURM_CONF)."""
        self.timeout = timeout
        self.runner = runner
        self._json = json
        self._version: str | None = None
        # Jobs and nodes unchanged since the last read are not parsed again.
        self._memo = {"nodes": parse_json.Memo(), "jobs": parse_json.Memo()}

    def _run(self, argv: list[str]) -> str:
        code, out, err = self.runner(argv, self.timeout)
        if code != 0:
            raise SlurmCommandError(argv, f"exit {code}: {(err or out).strip()[:500]}")
        return out

    def version(self) -> str:
        if self._version is None:
            self._version = parse_text.version(self._run(VERSION))
        return self._version

    @property
    def uses_json(self) -> bool:
        if self._json is None:
            self._json = _version_tuple(self.version()) >= JSON_SINCE
        return self._json

    def read_state(self) -> SlurmState:
        read_at = time.time()
        version = self.version()
        if self.uses_json:
            nodes = parse_json.nodes(parse_json.load(self._run(NODES_JSON), "sinfo --json"), self._memo["nodes"])
            jobs = parse_json.jobs(parse_json.load(self._run(JOBS_JSON), "squeue --json"), self._memo["jobs"])
        else:
            nodes = parse_text.nodes(self._run(NODES_TEXT))
            jobs = parse_text.jobs(self._run(JOBS_TEXT))
        return SlurmState(
            nodes=tuple(nodes),
            jobs=tuple(jobs),
            partitions=tuple(parse_text.partitions(self._run(PARTITIONS))),
            reservations=tuple(parse_text.reservations(self._run(RESERVATIONS))),
            version=version,
            read_at=read_at,
        )

    def job_state(self, job_id: str) -> str | None:
        argv = ["squeue", "--noheader", f"--jobs={names.job_id(job_id)}", "--format=%T"]
        code, out, _ = self.runner(argv, self.timeout)
        # squeue exits 1 for a job id it has forgotten
        return (out.strip() or None) if code == 0 else None

    def pending_managed(self) -> frozenset[str] | None:
        return parse_text.pending_managed(self._run(PENDING_COMMENTS))

    def scontrol(self, argv: list[str]) -> None:
        self._run(argv)
