"""The CLI backend: sinfo, squeue and scontrol, run as argument lists with a timeout.

One read is four commands, whatever the cluster size: nodes (``sinfo --json``;
``sinfo --Node --json`` from 23.02, whose plain ``sinfo --json`` sums the
allocations of grouped nodes), jobs (``squeue --json``), partitions and
reservations (``scontrol show ... --oneliner``). Slurm older than 21.08 (no
--json), or ``json=False``, reads nodes and jobs with ``scontrol show node|job
--details --oneliner`` instead; so does a command whose JSON document cannot be
read, from then on, after one warning (``text_reasons`` says why, for doctor).
From 24.11 on (whose ``squeue --json --jobs=..`` prints only those jobs), jobs are
read narrow (``parse_narrow.py``): one line per job, and ``squeue --json`` only for
the jobs whose line changed since the last read; a narrow output that cannot be
read switches to ``squeue --json`` from then on, after one warning (``narrow_reason``).
Before 24.11 (whose ``squeue --json`` prints every job whatever ``--jobs`` says), jobs are
read by line instead: ``scontrol show job --details --oneliner``, a third of the JSON's
bytes, each line parsed once and standing for its job while it is unchanged but for its
run time (``parse_text.job_lines``); a read with a line that cannot be trusted (a comment
that reads like fields, or holds a line break) takes ``squeue --json`` that once, and a
trusted line that cannot be read, from then on after one warning (``lines_reason``).
Between cycles, ``look()`` is one small squeue of the pending and running jobs'
ids, states and comments. The topology (``scontrol show topology``: switches or blocks)
changes only with slurm.conf: it is read at most once a minute, and when the node set changes.
"""

from __future__ import annotations

import logging
import mmap
import os
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence, Set
from dataclasses import replace

from .. import collector
from . import names, parse_json, parse_narrow, parse_text
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
#: 26.05's squeue --json no longer says which jobs are --exclusive (``shared`` is empty for all); this does, one line
#: per array element (folded, an array with a task split off is ``A_[1-3]``, which no JSON record is named)
EXCLUSIVE = ["squeue", "--noheader", "--array", "--states=all", "--Format=JobArrayID:|,Exclusive:|"]
EXCLUSIVE_GONE_SINCE = (26, 5)
JOBS_JSON = ["squeue", "--json"]
NODES_TEXT = ["scontrol", "show", "node", "--details", "--oneliner"]
JOBS_TEXT = ["scontrol", "show", "job", "--details", "--oneliner"]
PARTITIONS = ["scontrol", "show", "partition", "--oneliner"]
RESERVATIONS = ["scontrol", "show", "reservation", "--oneliner"]
VERSION = ["scontrol", "--version"]
TOPOLOGY = ["scontrol", "show", "topology"]
#: the topology changes with slurm.conf only: read again after this long, or when the node set changes
TOPOLOGY_EVERY_S = 60.0
#: the first Slurm whose scontrol takes a SLUID for a pin without reading the job first (update_job.c's
#: ``_is_single_job``: named by its id, a pin costs slurmctld a job read and a federation read besides the update)
SLUID_SINCE = (26, 5)
#: the first Slurm whose squeue --json prints only the jobs --jobs names (22.05 prints all; 23.11 all for two or more,
#: and its squeue --Format has no ExcNodes): the narrow read's
NARROW_SINCE = (24, 11)
#: a longer --jobs list reads all of squeue --json instead (one argument may hold at most 128 KiB)
JOBS_ARG_MAX = 100_000
#: the daemon's look for new managed jobs between cycles: ids, states and comments
LOOK = ["squeue", "--noheader", "--states=PENDING,RUNNING,COMPLETING", "--format=%i %t %k"]
#: the look where squeue has --only-job-state: ids and states alone, which slurmctld sends without packing each job
#: whole (REQUEST_JOB_STATE, not REQUEST_JOB_INFO: a fifteenth of its time); no comment, so no marker
LOOK_STATES = ["squeue", "--noheader", "--only-job-state", "--states=PENDING,RUNNING,COMPLETING", "--format=%i %t"]
#: the first Slurm here whose squeue has --only-job-state (23.11's has not)
JOB_STATE_SINCE = (24, 11)

#: runs an argv and returns (exit code, stdout, stderr); tests swap in recorded output
Runner = Callable[[list[str], float], tuple[int, str, str]]
#: runs an argv with ``text`` on its standard input and returns (exit code, or None when it was killed at the
#: timeout; what it printed, standard output and error in one stream, in the order written)
BatchRunner = Callable[[list[str], str, float], tuple[int | None, str]]

#: scontrol reading its commands from standard input; what it prints before each line's own output
SCONTROL_STDIN = ["scontrol"]
PROMPT = "scontrol: "
#: seconds a batch may take beyond ``timeout``, per line (an update is one RPC of a few milliseconds)
BATCH_S_PER_LINE = 0.05


def ran_on_argv(job_ids: Sequence[str]) -> list[str]:
    """squeue of ``job_ids`` in every state (finished ones too, until MinJobAge): id, state, nodes."""
    return ["squeue", "--noheader", "--states=all", f"--jobs={','.join(map(names.job_id, job_ids))}",
            "--format=%i|%T|%N"]


def run_process(argv: list[str], timeout: float) -> tuple[int, str, str]:
    """Runs ``argv`` (no shell) and returns its exit code, stdout and stderr as text.

    Standard output goes to an unnamed file, decoded where it lies (mapped) once the command
    ends: a pipe hands a 128 MB ``scontrol show job`` over in 32 KiB reads that are then
    joined, and text mode copies it twice more translating line ends (see the README's
    "Figures"); and so a carriage return in a job's comment stays in its line. Bytes that
    are not UTF-8 (a comment in Latin-1) read as U+FFFD instead of failing the read.
    """
    try:
        out = tempfile.TemporaryFile()
    except OSError as err:  # (TMPDIR, else /tmp: the systemd unit gives the daemon a private one)
        raise SlurmCommandError(argv, f"no temporary file for its output: {err}") from None
    with out:
        try:
            done = subprocess.run(argv, stdout=out, stderr=subprocess.PIPE, timeout=timeout,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise SlurmCommandError(argv, f"no answer within {timeout:g} s") from None
        except OSError as err:
            raise SlurmCommandError(argv, f"cannot run: {err.strerror}") from None
        return done.returncode, _decoded(out.fileno()), done.stderr.decode(errors="replace")


def run_batch(argv: list[str], text: str, timeout: float) -> tuple[int | None, str]:
    """Runs ``argv`` (no shell) with ``text`` on its standard input; stdout and stderr share one file, so that a
    line's complaint follows the line's echo (scontrol flushes both). Killed at ``timeout``: code None, and what it
    printed until then."""
    try:
        out = tempfile.TemporaryFile()
    except OSError as err:
        raise SlurmCommandError(argv, f"no temporary file for its output: {err}") from None
    with out:
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT)
        except OSError as err:
            raise SlurmCommandError(argv, f"cannot run: {err.strerror}") from None
        try:
            proc.communicate(text.encode(), timeout=timeout)
            code: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            code = None
        return code, _decoded(out.fileno())


def attribute(lines: Sequence[list[str]], code: int, output: str) -> list[str | None]:
    """Each line's result from the output of one ``scontrol`` that read ``lines`` from standard input.

    Reading a line that is not from a terminal, scontrol echoes it after its prompt (``scontrol: update
    JobId=..``) before running it, and what the line prints (on failure, e.g. ``Job has already finished for
    job 2``; nothing on success) comes before the next echo; after the last line it prints the prompt once more
    and ends. Exit 0: every line succeeded. Else a line is done once the next echo (or that last prompt) is
    seen: None when it printed nothing, else the SlurmCommandError text it would have raised alone. The entries
    of lines not known to be done (scontrol died on or before them) are ``...``: run them again one by one.
    """
    if code == 0:  # it read every line (a killed scontrol has no exit code) and none failed
        return [None] * len(lines)
    echoes = [PROMPT + " ".join(argv[1:]) for argv in lines]
    said: list[list[str]] = []
    finished = False
    for row in output.split("\n"):
        if len(said) < len(echoes) and row == echoes[len(said)]:
            said.append([])
        elif said and len(said) == len(echoes) and row.rstrip() == PROMPT.rstrip():
            finished = True
        elif said:
            said[-1].append(row)
    done = len(said) if finished else max(len(said) - 1, 0)
    results: list = [...] * len(lines)
    for at in range(done):
        text = "\n".join(said[at]).strip()
        results[at] = SlurmCommandError(lines[at], f"exit {code}: {text[:500]}").args[0] if text else None
    return results


def _plain(argv: list[str]) -> bool:
    """Whether scontrol reads ``argv`` back from one line as these very words (no blank or quote in them)."""
    return argv[:1] == SCONTROL_STDIN and all(arg and not any(c.isspace() or c in "'\"" for c in arg)
                                              for arg in argv[1:])


def _decoded(fd: int) -> str:
    size = os.fstat(fd).st_size
    if not size:
        return ""  # (an empty file cannot be mapped)
    with mmap.mmap(fd, size, access=mmap.ACCESS_READ) as view:
        return str(view, "utf-8", "replace")


def _succeeded(argv: list[str], code: int, out: str, err: str) -> str:
    """A command's output, or SlurmCommandError naming its exit code and what it printed."""
    if code != 0:
        raise SlurmCommandError(argv, f"exit {code}: {(err or out).strip()[:500]}")
    return out


def _with_exclusive(jobs: Iterable[SlurmJob], exclusive: Set[str]) -> list[SlurmJob]:
    return [replace(job, exclusive=True) if job.id in exclusive else job for job in jobs]


def _owners(owning: Set[str], fresh: list[SlurmJob]) -> set[str]:
    """The jobs of ``fresh`` that own their nodes, given the ids (``squeue --array``: one per array element) squeue
    shows as owning them (26.05: ``Exclusive`` NODE): a record by its id, an array's record of the tasks not split
    off yet (``A_[..]``) by its elements that are not records of their own."""
    ids = {job.id for job in fresh}
    arrays = {parse_narrow.array_or_id(job_id) for job_id in owning - ids if "_" in job_id}
    return (ids & owning) | {job.id for job in fresh if job.array_pending and job.array_job in arrays}


def release_of(version: str) -> tuple[int, int]:
    """A Slurm version ("24.11.5", or a release "24.11") as (major, minor); ValueError if it is neither."""
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


class CliBackend(Backend):
    name = "cli"

    def __init__(self, timeout: float = 30.0, json: bool | None = None, runner: Runner = run_process,
                 narrow: bool | None = False, lines: bool | None = False, batch_runner: BatchRunner = run_batch) -> None:
        """``json``, ``narrow`` (the narrow job read), ``lines`` (jobs read by line): None picks by Slurm's
        version. The commands find the cluster as usual (SLURM_CONF)."""
        self.timeout = timeout
        self.runner = runner
        self.batch_runner = batch_runner
        self._json = json
        self._narrow = narrow
        self._lines = lines
        #: the last read by line's lines that stand for their jobs, by their first word (``JobId=N``)
        self._by_line: dict[str, parse_text.KeptLine] = {}
        #: why jobs are read with squeue --json although this Slurm has the read by line
        self.lines_reason: str | None = None
        #: why the last read by line was not trusted (logged when it changes, not every cycle)
        self._distrust: str | None = None
        #: the last narrow read's jobs by their line, and its arrays' records by the array's lines
        self._kept = parse_narrow.Kept()
        self._arrays: dict[str, tuple[str, list[SlurmJob]]] = {}
        #: why jobs are read with squeue --json although this Slurm has the narrow read
        self.narrow_reason: str | None = None
        self._version: str | None = None
        #: the last topology read: when, for which nodes, and what it was
        self._topology: tuple[float, tuple[str, ...], tuple] | None = None
        # Jobs and nodes unchanged since the last read are not parsed again.
        self._memo = {"nodes": parse_json.Memo(), "jobs": parse_json.Memo()}
        #: "nodes"/"jobs" -> why that kind is read as text although this Slurm prints JSON
        self.text_reasons: dict[str, str] = {}

    def _run(self, argv: list[str]) -> str:
        return _succeeded(argv, *self.runner(argv, self.timeout))

    def _run_for_jobs(self, argv: list[str]) -> str | None:
        """``argv``'s output; None when squeue has forgotten every job id it was given (it exits 1)."""
        code, out, err = self.runner(argv, self.timeout)
        if code == 1 and "Invalid job id" in err:
            return None
        return _succeeded(argv, code, out, err)

    def version(self) -> str:
        if self._version is None:
            self._version = parse_text.version(self._run(VERSION))
        return self._version

    @property
    def uses_json(self) -> bool:
        if self._json is None:
            self._json = self._release >= JSON_SINCE
        return self._json

    @property
    def nodes_json(self) -> list[str]:
        return NODES_JSON_PER_NODE if self._release >= GROUPED_SINCE else NODES_JSON

    @property
    def uses_narrow(self) -> bool:
        if self._narrow is None:
            self._narrow = self.uses_json and self._release >= NARROW_SINCE
        return self._narrow and self.narrow_reason is None and "jobs" not in self.text_reasons

    @property
    def uses_lines(self) -> bool:
        if self._lines is None:
            self._lines = self.uses_json and self._release < NARROW_SINCE
        return self._lines and self.lines_reason is None

    @property
    def _release(self) -> tuple[int, int]:
        return release_of(self.version())

    @property
    def names_sluids(self) -> bool:
        """Whether jobs are read with their SLUIDs, which pins then name them by (SLUID_SINCE on)."""
        return self._release >= SLUID_SINCE

    @property
    def _exclusive_gone(self) -> bool:
        return self._release >= EXCLUSIVE_GONE_SINCE

    def read_commands(self) -> dict[str, list[str]]:
        """What each kind is read with now: "nodes" and "jobs" (JSON, narrow, by line or text), as argv."""
        commands = self._whole_commands()
        if self.uses_narrow:
            return {**commands, "jobs": parse_narrow.argv(self._release)}
        return {**commands, "jobs": JOBS_TEXT} if self.uses_lines else commands

    def _whole_commands(self) -> dict[str, list[str]]:
        """The commands that read all of each kind: JSON, or text."""
        use = {kind: self.uses_json and kind not in self.text_reasons for kind in ("nodes", "jobs")}
        return {"nodes": self.nodes_json if use["nodes"] else NODES_TEXT, "jobs": JOBS_JSON if use["jobs"] else JOBS_TEXT}

    def _read(self, kind: str, parse_doc: Callable[[dict], list], parse_text_output: Callable[[str], list]) -> list:
        argv = self._whole_commands()[kind]
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
        out = parse_text_output(self._run(self._whole_commands()[kind]))
        log.warning("cannot read %s (%s); reading %s as text from now on", command, reason, kind)
        return out

    def read_nodes(self) -> list[SlurmNode]:
        return self._read("nodes", lambda doc: parse_json.nodes(doc, self._memo["nodes"]), parse_text.nodes)

    def read_jobs(self) -> list[SlurmJob]:
        if self.uses_lines:
            return self._read_lines()
        if self.uses_narrow:
            argv = self.read_commands()["jobs"]
            try:
                jobs = self._read_narrow(self._run(argv))
            except SlurmParseError as err:
                self.narrow_reason = str(err)
                self._kept, self._arrays = parse_narrow.Kept(), {}
                jobs = self._read_json_jobs()  # warn only once JSON works, as for the text fallback
                log.warning("cannot read jobs narrow (%s); reading them with squeue --json from now on", err)
                return jobs
            if jobs is not None:
                return jobs
            log.info("the narrow read cannot stand for every job (a comment with a line break, or a heterogeneous "
                     "job): reading all of squeue --json this cycle")
        return self._read_json_jobs()

    def _read_lines(self) -> list[SlurmJob]:
        """The jobs read by line; all of squeue --json where a line cannot be trusted, or cannot be read."""
        try:
            read = parse_text.job_lines(self._run(JOBS_TEXT), self._by_line)
        except SlurmParseError as err:
            self.lines_reason, self._by_line = str(err), {}
            jobs = self._read_json_jobs()  # warn only once JSON works, as for the text fallback
            log.warning("cannot read jobs by line (%s); reading them with squeue --json from now on", err)
            return jobs
        if isinstance(read, str):
            if read != self._distrust:
                log.info("reading all of squeue --json while this stands: %s", read)
            self._distrust = read
            return self._read_json_jobs()
        self._distrust = None
        jobs, self._by_line = read
        return jobs

    def _read_json_jobs(self) -> list[SlurmJob]:
        sluids = self.names_sluids
        jobs = self._read("jobs", lambda doc: parse_json.jobs(doc, self._memo["jobs"], sluids),
                          lambda text: parse_text.jobs(text, sluids))
        if self._whole_commands()["jobs"] == JOBS_JSON and self._exclusive_gone:
            jobs = _with_exclusive(jobs, _owners(parse_text.exclusive_jobs(self._run(EXCLUSIVE)), jobs))
        return jobs

    def _read_narrow(self, output: str) -> list[SlurmJob] | None:
        """The jobs of a narrow read: unchanged lines as parsed before, the others from squeue --json.

        An array is one unit: its element lines (``--array``) are compared as a whole, and its
        records are squeue --json's (which prints the tasks not split off yet as one record
        ``A_[..]``, and the split ones as ``A_T``). None when the lines cannot be trusted (a
        comment with a line break). A job gone between the two reads is left out; a job changed
        between them is not kept under its line (``parse_narrow.agrees``): the next read asks for it again.
        Only the new lines are worked on one by one: the unchanged ones are taken, and forgotten when gone, in C.
        """
        release = self._release
        read = parse_narrow.lines(output, release, self._kept)
        if read is None:
            self._kept, self._arrays = parse_narrow.Kept(), {}
            return None
        rows, slots = read.rows, list(read.known)
        kept = self._kept
        repriced: dict[int, SlurmJob] = {}  # new lines of jobs whose priority alone changed: no JSON for them
        for at, job_id in read.new:
            if "_" not in job_id and (old := kept.line.get(job_id)) in kept.jobs:
                job = parse_narrow.repriced(rows[at], old, kept.jobs[old], release)
                if job is not None:
                    repriced[at] = job
        arrays: dict[str, list[tuple[str, str]]] = {}
        first: dict[str, int] = {}  # each array's first line
        for at, job_id in read.new:
            if "_" in job_id:
                array = parse_narrow.array_or_id(job_id)
                arrays.setdefault(array, []).append((job_id, rows[at]))
                first.setdefault(array, at)
        texts = {array: "\n".join(line for _, line in elements) for array, elements in arrays.items()}
        wanted = {job_id for at, job_id in read.new if "_" not in job_id and at not in repriced}
        wanted |= {array for array, text in texts.items() if self._arrays.get(array, ("",))[0] != text}
        fresh = self._json_jobs_of(wanted) if wanted else []
        if self._exclusive_gone and fresh:
            # Only the lines of the jobs read again: the others keep the records (and flags) they were kept with.
            owning = {job_id for at, job_id in read.new if parse_narrow.array_or_id(job_id) in wanted
                      and parse_narrow.field(rows[at], parse_narrow.EXCLUSIVE_FIELD, release) == "NODE"}
            fresh = _with_exclusive(fresh, _owners(owning, fresh))
        by_id = {job.id: job for job in fresh if not job.array_job}
        by_array: dict[str, list[SlurmJob]] = {}
        for job in fresh:
            if job.array_job:
                by_array.setdefault(job.array_job, []).append(job)
        kept.renew(read.kept)
        # A record read now that its line does not show changed in between: used this cycle, not kept under the line.
        for at, job_id in read.new:
            if "_" not in job_id:
                job = slots[at] = repriced.get(at) or by_id.get(job_id)
                if job is not None and (at in repriced or parse_narrow.agrees(rows[at], job, release)):
                    kept.keep(rows[at], job)
        known_arrays, self._arrays = self._arrays, {}
        records: dict[int, list[SlurmJob]] = {}  # an array's records stand where its first line does
        for array, at in first.items():
            records[at] = by_array.get(array, []) if array in wanted else known_arrays[array][1]
            if array not in wanted or parse_narrow.array_agrees(arrays[array], records[at], release):
                self._arrays[array] = (texts[array], records[at])
        jobs: list[SlurmJob] = []
        start = 0
        for at in sorted(records):
            jobs += filter(None, slots[start:at])
            jobs += records[at]
            start = at + 1
        jobs += filter(None, slots[start:])
        return jobs

    def _json_jobs_of(self, ids: set[str]) -> list[SlurmJob]:
        """The jobs (or whole arrays) ``ids`` from ``squeue --json --jobs=..``; all of squeue --json for many."""
        listed = ",".join(sorted(ids, key=int))
        whole = len(listed) > JOBS_ARG_MAX
        argv = JOBS_JSON if whole else [*JOBS_JSON, f"--jobs={listed}"]
        out = self._run_for_jobs(argv)
        if out is None:
            return []  # every one of them ended since the narrow read
        with collector.paused():
            doc = parse_json.load(out, " ".join(JOBS_JSON))
            return parse_json.jobs(doc, self._memo["jobs"] if whole else None, self.names_sluids)

    def read_topology(self, nodes: Sequence[SlurmNode], now: float) -> dict[str, tuple]:
        """SlurmState's topology fields: ``scontrol show topology`` at most every TOPOLOGY_EVERY_S, and when the
        node set changed (a node added or removed: slurmctld was reconfigured)."""
        names = tuple(node.name for node in nodes)
        kept = self._topology
        if kept is None or now - kept[0] >= TOPOLOGY_EVERY_S or kept[1] != names:
            code, out, err = self.runner(TOPOLOGY, self.timeout)
            if code != 0 and "No topology" in err:  # (no topology plugin: some releases exit 1)
                code, out = 0, ""
            self._topology = kept = now, names, parse_text.topology(_succeeded(TOPOLOGY, code, out, err))
        return dict(zip(("switches", "blocks", "block_sizes"), kept[2]))

    def read_state(self) -> SlurmState:
        read_at = time.time()
        version = self.version()
        jobs = tuple(self.read_jobs())  # before the nodes, as Backend.read_state says
        nodes = tuple(self.read_nodes())
        return SlurmState(
            nodes=nodes,
            jobs=jobs,
            partitions=tuple(parse_text.partitions(self._run(PARTITIONS))),
            reservations=tuple(parse_text.reservations(self._run(RESERVATIONS))),
            version=version,
            read_at=read_at,
            **self.read_topology(nodes, read_at),
        )

    def job_state(self, job_id: str) -> str | None:
        argv = ["squeue", "--noheader", f"--jobs={names.job_id(job_id)}", "--format=%T"]
        code, out, _ = self.runner(argv, self.timeout)
        # squeue exits 1 for a job id it has forgotten
        return (out.strip() or None) if code == 0 else None

    def ran_on(self, job_ids: Sequence[str]) -> dict[str, tuple[str, ...]]:
        if not job_ids:
            return {}
        argv = ran_on_argv(job_ids)
        out = self._run_for_jobs(argv)
        return {} if out is None else parse_text.ran_on(out, " ".join(argv))  # None: Slurm forgot every one

    def look(self) -> Look | None:
        if self._release >= JOB_STATE_SINCE:
            return parse_text.look(self._run(LOOK_STATES), comments=False)
        return parse_text.look(self._run(LOOK))

    def scontrol(self, argv: list[str]) -> None:
        self._run(argv)

    def scontrol_lines(self, lines: Sequence[list[str]]) -> list[str | None]:
        """The lines through one ``scontrol`` reading them from standard input (see ``attribute``); a line it
        cannot be given that way runs alone, after them. Lines a batch that died left unattributed run again one
        by one (an update sets the same values twice at worst, never other ones), until one of them gets no
        answer either: the rest are not sent, and say so."""
        at = [i for i, argv in enumerate(lines) if _plain(argv)]
        if len(at) < 2:
            return super().scontrol_lines(lines)
        batch = [lines[i] for i in at]
        timeout = self.timeout + BATCH_S_PER_LINE * len(batch)
        code, output = self.batch_runner(SCONTROL_STDIN, "".join(" ".join(argv[1:]) + "\n" for argv in batch), timeout)
        results: list = [...] * len(lines)
        for i, result in zip(at, attribute(batch, 1 if code is None else code, output)):
            results[i] = result
        if left := results.count(...) - (len(lines) - len(at)):
            why = f"no answer within {timeout:g} s" if code is None else f"exit {code}"
            log.warning("scontrol reading %d lines stopped (%s) with %d not known done: running those one by one",
                        len(batch), why, left)
        unanswered = False
        for i, result in enumerate(results):
            if result is not ...:
                continue
            if unanswered:
                results[i] = f"{' '.join(lines[i])}: not sent: scontrol gave no answer to an earlier line"
            else:
                results[i] = super().scontrol_lines([lines[i]])[0]
                unanswered = results[i] is not None and "no answer within" in results[i]
        return results
