"""The CLI backend: sinfo, squeue and scontrol, run as argument lists with a timeout.

One read is four commands, whatever the cluster size: nodes (``sinfo --json``;
``sinfo --Node --json`` from 23.02, whose plain ``sinfo --json`` sums the
allocations of grouped nodes), jobs (``squeue --json``), partitions and
reservations (``scontrol show ... --oneliner``). Slurm older than 21.08 (no
--json), or ``json=False``, reads nodes and jobs with ``scontrol show node|job
--details --oneliner`` instead; so does a command whose JSON document cannot be
read, from then on, after one warning (``text_reasons`` says why, for doctor).
Between cycles, ``look()`` is one small squeue of the pending and running jobs'
ids, states and comments.
"""

from __future__ import annotations

import logging
import subprocess
import time
from collections.abc import Callable
from dataclasses import replace

from .. import collector
from . import names, parse_json, parse_text
from .backend import Backend
from .errors import SlurmCommandError, SlurmParseError
from .state import Look, SlurmJob, SlurmNode, SlurmState

log = logging.getLogger("compass.slurm")

#: the first Slurm whose sinfo and squeue print --json
JSON_SINCE = (21, 8)
#: the first Slurm whose sinfo --json groups nodes (one record per node needs --Node)
GROUPED_SINCE = (23, 2)

NODES_JSON = ["sinfo", "--json"]
NODES_JSON_PER_NODE = ["sinfo", "--Node", "--json"]
#: 26.05's squeue --json no longer says which jobs are --exclusive (``shared`` is empty for all); this does
EXCLUSIVE = ["squeue", "--noheader", "--states=all", "--Format=JobArrayID:|,Exclusive:|"]
EXCLUSIVE_GONE_SINCE = (26, 5)
JOBS_JSON = ["squeue", "--json"]
NODES_TEXT = ["scontrol", "show", "node", "--details", "--oneliner"]
JOBS_TEXT = ["scontrol", "show", "job", "--details", "--oneliner"]
PARTITIONS = ["scontrol", "show", "partition", "--oneliner"]
RESERVATIONS = ["scontrol", "show", "reservation", "--oneliner"]
VERSION = ["scontrol", "--version"]
#: the daemon's look for new managed jobs between cycles: ids and comments of the pending jobs only
LOOK = ["squeue", "--noheader", "--states=PENDING,RUNNING,COMPLETING", "--format=%i %t %k"]

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
        #: "nodes"/"jobs" -> why that kind is read as text although this Slurm prints JSON
        self.text_reasons: dict[str, str] = {}

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

    @property
    def nodes_json(self) -> list[str]:
        return NODES_JSON_PER_NODE if _version_tuple(self.version()) >= GROUPED_SINCE else NODES_JSON

    def read_commands(self) -> dict[str, list[str]]:
        """What each kind is read with now: "nodes" and "jobs" (JSON or text), as argv."""
        use = {kind: self.uses_json and kind not in self.text_reasons for kind in ("nodes", "jobs")}
        return {"nodes": self.nodes_json if use["nodes"] else NODES_TEXT, "jobs": JOBS_JSON if use["jobs"] else JOBS_TEXT}

    def _read(self, kind: str, parse_doc: Callable[[dict], list], parse_text_output: Callable[[str], list]) -> list:
        argv = self.read_commands()[kind]
        if argv in (NODES_TEXT, JOBS_TEXT):
            return parse_text_output(self._run(argv))
        command = " ".join(argv)
        try:
            with collector.paused():  # a document is hundreds of thousands of dicts that die with the parse
                return parse_doc(parse_json.load(self._run(argv), command))
        except SlurmParseError as err:
            self.text_reasons[kind] = str(err) if str(err).startswith(command) else f"{command}: {err}"
            reason = err
        # Warn only once text works: a Slurm that cannot be reached fails both ways, and says so once.
        out = parse_text_output(self._run(self.read_commands()[kind]))
        log.warning("cannot read %s (%s); reading %s as text from now on", command, reason, kind)
        return out

    def read_nodes(self) -> list[SlurmNode]:
        return self._read("nodes", lambda doc: parse_json.nodes(doc, self._memo["nodes"]), parse_text.nodes)

    def read_jobs(self) -> list[SlurmJob]:
        jobs = self._read("jobs", lambda doc: parse_json.jobs(doc, self._memo["jobs"]), parse_text.jobs)
        if self.read_commands()["jobs"] == JOBS_JSON and _version_tuple(self.version()) >= EXCLUSIVE_GONE_SINCE:
            exclusive = parse_text.exclusive_jobs(self._run(EXCLUSIVE))
            jobs = [replace(job, exclusive=True) if job.id in exclusive else job for job in jobs]
        return jobs

    def read_state(self) -> SlurmState:
        read_at = time.time()
        version = self.version()
        return SlurmState(
            nodes=tuple(self.read_nodes()),
            jobs=tuple(self.read_jobs()),
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

    def look(self) -> Look | None:
        return parse_text.look(self._run(LOOK))

    def scontrol(self, argv: list[str]) -> None:
        self._run(argv)
