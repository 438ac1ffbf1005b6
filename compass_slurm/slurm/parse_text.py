"""Parsers for ``scontrol show {node,job,partition,reservation} --oneliner [--details]``.

Each line is one record of ``Key=Value`` fields. A key starts after
whitespace, so values may hold ``=`` (``TRES=cpu=1,mem=8000M``) and, like
``Reason=`` or ``OS=``, spaces; a value with a space followed by ``word=`` would
be split wrongly, which no field we read does. The job detail part
(``Nodes=node[01-02] CPU_IDs=0 Mem=8000 GRES=gpu:3(IDX:0-2)``) repeats keys,
so a record keeps its fields in order (``parts``) beside each key's first value.

A job's line also holds what users write (name, comment, paths), which may read
like fields: ``Comment=run lr=0.1`` or ``JobName=x TimeLimit=5``. Before 24.11,
jobs are read by line (``job_lines``): each line is parsed once and stands for its
job while it is unchanged (or changed in its priority alone: ``_repriced``), and is
trusted only where its fields come in the order
scontrol prints them (``JOB_ORDER``), each once; a word=value that is no field of
that order, after a field users write, is part of that field's value.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from datetime import datetime
from operator import attrgetter, itemgetter, methodcaller
from typing import NamedTuple

from . import gres
from .errors import SlurmParseError
from .hostlist import expand
from .state import (Look, SlurmBlock, SlurmJob, SlurmNode, SlurmPartition, SlurmReservation, SlurmSwitch, marked,
                    memory_per_node)
from .values import duration_s, features, held, memory_mb, node_state, sluid, switches

#: where a field starts: at a word= after whitespace (values may hold '=' and spaces)
_FIELD = re.compile(r"\s(?=[A-Za-z][\w:/.]*=)")
_SPLIT_ONCE = methodcaller("split", "=", 1)
_NAME = itemgetter(0)
_ID = attrgetter("id")
_PRIORITY = " Priority="
#: the fields of a job's line that change while the job does not: its run time, the scheduler's last look at it
_RUN, _LOOK = " RunTime=", " LastSchedEval="
_NULL = {"(null)", "N/A", "None", "n/a"}
_USER = re.compile(r"(.*?)\((\d+)\)")
# scontrol appends who set a node's reason and when: "maintenance [root@2026-11-30T01:30:32]"
_REASON_STAMP = re.compile(r"\s*\[[^\]]*@[^\]]*\]$")


class Record:
    """One line of ``scontrol show ... --oneliner``: its ``key=value`` parts in order; ``first`` each key's first
    value (unstripped)."""

    def __init__(self, parts: list[str], what: str, pairs: list[list[str]] | None = None) -> None:
        """``pairs``: each part split at its first '=', if done already."""
        pairs = pairs if pairs is not None else list(map(_SPLIT_ONCE, parts))
        self.parts = parts
        self.names = list(map(_NAME, pairs))
        self.first = dict(reversed(pairs))
        self.what = what

    def details(self) -> Iterator[tuple[str, str]]:
        """The ``--details`` groups' fields (``Nodes= CPU_IDs= Mem= GRES=``, once per group of nodes), in order."""
        names = self.names
        start = names.index("Nodes") if "Nodes" in self.first else len(names)
        for at in range(start, len(names)):
            if names[at] in _DETAILS:
                yield names[at], self.parts[at].partition("=")[2].strip()

    def str(self, key: str, required: bool = False) -> str:
        if key not in self.first:
            if required:
                raise SlurmParseError(f"{self.what}: missing field {key!r}")
            return ""
        value = self.first[key].strip()
        return "" if value in _NULL else value

    def int(self, key: str, default: int | None = 0) -> int | None:
        text = self.str(key)
        if not text:
            return default
        # NumNodes=1-2 on a pending job: the lower bound is what it needs
        head = text.split("-")[0].split(":")[0]
        if not head.isdecimal():  # isdigit() also passes '²', which int() refuses
            raise SlurmParseError(f"{self.what}: field {key!r} is not a number: {text!r}")
        return int(head)

    def time(self, key: str) -> int:
        """An ISO local time (``2026-11-30T01:29:46``) as Unix seconds; 0 when unset."""
        text = self.str(key)
        if not text or text == "Unknown":
            return 0
        try:
            return int(datetime.fromisoformat(text).timestamp())
        except ValueError:
            raise SlurmParseError(f"{self.what}: field {key!r} is not a time: {text!r}") from None

    def nodes(self, key: str) -> tuple[str, ...]:
        try:
            return tuple(expand(self.str(key)))
        except SlurmParseError as err:
            raise SlurmParseError(f"{self.what}: field {key}: {err}") from None


def _empty(line: str) -> bool:
    """A blank line, or scontrol's "No reservations in the system"."""
    return not line.strip() or line.startswith("No ") and line.rstrip().endswith("in the system")


def record(line: str, command: str, key: str, lineno: int) -> Record:
    """One line, which must start with ``key=``."""
    if not line.startswith(f"{key}="):
        raise SlurmParseError(f"{command}: line {lineno} does not start with {key}=: {line[:80]!r}")
    parts = _FIELD.split(line)
    return Record(parts, f"{command} line {lineno} ({key}={parts[0].partition('=')[2].strip()})")


def records(output: str, command: str, key: str) -> Iterator[Record]:
    """The records of ``output``, each of which must start with ``key=``: one a line, ended by a line feed alone (a
    carriage return in a job's comment is part of it)."""
    for lineno, line in enumerate(output.split("\n"), 1):
        if not _empty(line):
            yield record(line, command, key, lineno)


def _gpus(record: Record, key: str) -> tuple[int | None, str | None]:
    text = record.str(key)
    try:
        return (gres.gpu_count(text) or None, gres.gpu_type(text)) if text else (None, None)
    except SlurmParseError as err:
        raise SlurmParseError(f"{record.what}: field {key}: {err}") from None


def nodes(output: str) -> list[SlurmNode]:
    """``scontrol show node --details --oneliner`` (--details adds GresUsed)."""
    out = []
    for r in records(output, "scontrol show node", "NodeName"):
        name = r.str("NodeName", required=True)
        state, flags = node_state(r.str("State", required=True).split("+"), name)
        total, used = (_gres(r, key) for key in ("Gres", "GresUsed"))
        out.append(
            SlurmNode(
                name=name,
                state=state,
                flags=flags,
                partitions=tuple(p for p in r.str("Partitions").split(",") if p),
                cpus=r.int("CPUTot"),
                cpus_alloc=r.int("CPUAlloc"),
                memory_mb=r.int("RealMemory"),
                memory_alloc_mb=r.int("AllocMem"),
                reason=_REASON_STAMP.sub("", r.str("Reason")),
                features=features(r.str("ActiveFeatures")),
                **gres.node_gres(total, used),
            )
        )
    return out


def _gres(r: Record, key: str) -> str:
    """A GRES field, checked: an error names the line and the field."""
    text = r.str(key)
    try:
        gres.parse(text)
    except SlurmParseError as err:
        raise SlurmParseError(f"{r.what}: field {key}: {err}") from None
    return text


def _detail_gpus(r: Record) -> dict[str, int]:
    """Per-node GPUs from the --details groups ``Nodes=<hostlist> ... GRES=gpu:N(IDX:..)``."""
    alloc: dict[str, int] = {}
    group: list[str] = []
    for key, value in r.details():
        if key == "Nodes":
            try:
                group = expand(value)
            except SlurmParseError as err:
                raise SlurmParseError(f"{r.what}: detail Nodes: {err}") from None
        elif key == "GRES" and group:
            try:
                count = gres.gpu_count(value)
            except SlurmParseError as err:
                raise SlurmParseError(f"{r.what}: detail GRES: {err}") from None
            for name in group:
                if count:
                    alloc[name] = count
            group = []
    return alloc


def _memory(r: Record, key: str) -> int | None:
    text = r.str(key)
    return memory_mb(text, f"{r.what}: field {key}") if text else None


def exclusive_jobs(output: str) -> frozenset[str]:
    """Jobs and array elements (``7``, ``6_1``) that ``squeue --array --Format=JobArrayID:|,Exclusive:|`` shows as
    owning their nodes (NODE; USER, MCS, TOPO and NO share)."""
    found = set()
    for lineno, line in enumerate(output.splitlines(), 1):
        if not line.strip():
            continue
        fields = [part.strip() for part in line.strip().split("|")]
        if len(fields) != 3 or not fields[0]:
            raise SlurmParseError(f"squeue --array --Format=JobArrayID:|,Exclusive:|: line {lineno}: "
                                  f"cannot read {line[:80]!r}")
        if fields[1] == "NODE":
            found.add(fields[0])
    return frozenset(found)


def _max_nodes(r: Record) -> int:
    """A pending job's most nodes, the upper end of ``NumNodes=2-3`` (job_info.c prints a range where ``-N`` set one;
    a running job's count alone); 0: none."""
    upper = r.str("NumNodes").partition("-")[2].split(":")[0]
    if upper and not upper.isdecimal():
        raise SlurmParseError(f"{r.what}: field 'NumNodes' is not a number: {r.str('NumNodes')!r}")
    return int(upper or 0)


def _exclusive(r: Record) -> bool:
    """--exclusive: 26.05 says ``Exclusive=NODE`` (and OverSubscribe=NO for every job that does not oversubscribe);
    earlier releases say OverSubscribe=NO. USER, MCS, YES and OK share."""
    if "Exclusive" in r.first:
        return r.str("Exclusive") == "NODE"
    return r.str("OverSubscribe") == "NO"


def jobs(output: str, sluids: bool = False) -> list[SlurmJob]:
    """``scontrol show job --details --oneliner``; ``sluids``: with each record's SLUID (``Backend.names_sluids``)."""
    return [_job(r, sluids) for r in records(output, JOBS_COMMAND, "JobId")]


JOBS_COMMAND = "scontrol show job"
#: The order scontrol show job prints its fields in, Slurm 22.05 to 23.11 (most are printed only when set); the
#: ``--details`` groups (Nodes= CPU_IDs= Mem= GRES=, once per group of nodes) stand at DETAILS's place.
JOB_ORDER = (
    "JobId", "ArrayJobId", "ArrayTaskId", "ArrayTaskThrottle", "HetJobId", "HetJobOffset", "JobName", "HetJobIdSet",
    "UserId", "GroupId", "MCS_label", "Priority", "Nice", "Account", "QOS", "WCKey", "JobState", "Reason",
    "FailedNode", "Dependency", "Requeue", "Restarts", "BatchFlag", "Reboot", "ExitCode", "DerivedExitCode",
    "RunTime", "TimeLimit", "TimeMin", "SubmitTime", "EligibleTime", "AccrueTime", "ResizeTime", "StartTime",
    "EndTime", "Deadline", "CronJob", "CrontabSpec", "PreemptEligibleTime", "PreemptTime", "SuspendTime",
    "SecsPreSuspend", "LastSchedEval", "Scheduler", "Partition", "AllocNode:Sid", "ReqNodeList", "ExcNodeList",
    "NodeList", "SchedNodeList", "BatchFeatures", "BatchHost", "FedOrigin", "FedViableSiblings", "FedActiveSiblings",
    "NumNodes", "NumCPUs", "NumTasks", "CPUs/Task", "ReqB:S:C:T", "TRES", "ReqTRES", "AllocTRES", "Socks/Node",
    "NtasksPerN:B:S:C", "CoreSpec", "ThreadSpec", "JOB_GRES", "DETAILS", "MinCPUsNode", "MinMemoryNode",
    "MinMemoryCPU", "MinTmpDiskNode", "Features", "DelayBoot", "ClusterFeatures", "Prefer", "Reservation",
    "OverSubscribe", "Contiguous", "Licenses", "Network", "Command", "WorkDir", "AdminComment", "SystemComment",
    "Comment", "Extra", "StdErr", "StdIn", "StdOut", "Switches", "BurstBuffer", "BurstBufferState", "Power",
    "GresEnforceBind", "KillOInInvalidDependent", "SpreadJob", "CpusPerTres", "MemPerTres", "TresBind", "TresFreq",
    "TresPerJob", "TresPerNode", "TresPerSocket", "TresPerTask", "MailUser", "MailType", "NtasksPerTRES",
    "Container", "ContainerID", "SELinuxContext",
)
_DETAILS = frozenset({"Nodes", "CPU_IDs", "Mem", "GRES"})
_DETAILS_RANK = JOB_ORDER.index("DETAILS")
_RANK = {key: rank for rank, key in enumerate(JOB_ORDER) if key != "DETAILS"} | dict.fromkeys(_DETAILS, _DETAILS_RANK)
#: fields users (or admins) write freely: a word= in them that is no field is part of the value
_USERS_TEXT = frozenset({"JobName", "Command", "WorkDir", "AdminComment", "SystemComment", "Comment", "Extra",
                         "StdErr", "StdIn", "StdOut", "MailUser", "Container", "Features", "Prefer", "ClusterFeatures",
                         "BatchFeatures", "Network"})
#: printed for every job: a line without one of them is not a whole job's (a comment with a line break)
_ALWAYS = ("JobId", "JobName", "UserId", "JobState", "Partition", "NodeList", "NumNodes", "OverSubscribe",
           "WorkDir", "Power")


def _job_record(line: str, lineno: int) -> Record | str:
    """A job's line as a record, a word=value that is no field after a field users write joined to that field's
    value; or why the line may not be what Slurm printed for one job: a field that is none of JOB_ORDER's, out of
    its order or twice (a name or comment that reads like fields), or one that every job has missing."""
    parts = line.split()
    pairs: list[list[str]] | None = list(map(_SPLIT_ONCE, parts))
    # Nearly always no value holds a space: each part is one field. Else split where fields start, exactly.
    if set(map(len, pairs)) != {2} or not _RANK.keys() >= set(map(_NAME, pairs)):
        parts = _FIELD.split(line)
        found = list(map(_NAME, map(_SPLIT_ONCE, parts)))
        if not _RANK.keys() >= set(found):  # a word= in a value
            kept, names = parts[:1], found[:1]
            for part, name in zip(parts[1:], found[1:]):
                if name in _RANK or names[-1] not in _USERS_TEXT:
                    kept.append(part)
                    names.append(name)
                else:
                    kept[-1] += " " + part
            parts = kept
        pairs = None
    r = Record(parts, f"{JOBS_COMMAND} line {lineno} ({parts[0]})", pairs)
    names = r.names
    ranks = list(map(_RANK.get, names))
    if None in ranks:
        return f"{r.what}: field {names[ranks.index(None)]!r} is not one scontrol prints"
    repeats = len(ranks) - len(set(ranks))  # only the --details groups' fields may repeat
    if ranks == sorted(ranks) and repeats == max(ranks.count(_DETAILS_RANK) - 1, 0):
        missing = [key for key in _ALWAYS if key not in r.first]
        return f"{r.what}: no {', '.join(missing)} (a comment with a line break)" if missing else r
    at = next(at for at in range(1, len(ranks)) if ranks[at] < ranks[at - 1] or ranks[at] == ranks[at - 1]
              != _DETAILS_RANK)
    return f"{r.what}: field {names[at]!r} out of scontrol's order (a name or comment that reads like fields)"


class KeptLine(NamedTuple):
    """A line of the last read by line that stands for its job: the line cut around the values of its run time and
    the scheduler's last look, which change while the job does not (``head`` ends with `` RunTime=``, ``mid`` runs
    from the space after the run time to `` LastSchedEval=``, ``tail`` from the space after that); a line without
    them (no job's line scontrol prints) whole in ``head``, ``mid`` None. ``word`` is its first word, ``JobId=N``."""

    head: str
    mid: str | None
    tail: str
    job: SlurmJob
    word: str


def _cut(line: str) -> tuple[str, str | None, str]:
    """A job's line cut as KeptLine keeps it."""
    run = line.find(_RUN)
    look = line.find(_LOOK, run + 1)
    run_end, look_end = line.find(" ", run + len(_RUN)), line.find(" ", look + len(_LOOK))
    if run < 0 or look < 0 or run_end < 0 or look_end < 0:
        return line, None, ""
    return line[:run + len(_RUN)], line[run_end:look + len(_LOOK)], line[look_end:]


def _steady(head: str, mid: str | None, tail: str) -> str:
    """A cut line put together again without its volatile fields: what is parsed."""
    return head if mid is None else head[:-len(_RUN)] + mid[:-len(_LOOK)] + tail


#: how far ahead of the line expected next the last read's lines are looked at for the one found instead (the jobs
#: that ended in between): beyond it the rest of the read is matched by job id alone
_RESYNC = 64
#: after the last read's lines: one no line starts with (scontrol prints C strings, which hold no NUL)
_NO_LINE = KeptLine("\0", None, "", None, "")  # type: ignore[arg-type]


def job_lines(output: str, kept: Mapping[str, KeptLine]) -> tuple[list[SlurmJob], dict[str, KeptLine]] | str:
    """The jobs of ``scontrol show job --details --oneliner`` read by line (Slurm 22.05 to 23.11): a line that is, but
    for its volatile fields, the one ``kept`` (the last read's lines, by their first word ``JobId=N``) holds under its
    first word stands for the job parsed then; only the other lines are parsed. Returns the jobs and the lines that
    stand for them now, or why a line cannot be trusted (then this read's jobs must come from elsewhere). Raises
    SlurmParseError for a trusted line it cannot read.

    The text is compared where it lies, no line copied, and scontrol prints its jobs in the same order each time
    (new ones last): each line is first taken for the one that followed the last line matched, whose ``head``
    (it starts with the job's first word) tells at once; a job's id is cut out only where that is not so."""
    jobs: list[SlurmJob] = []
    now: dict[str, KeptLine] = {}
    order = [*kept.values(), _NO_LINE]
    startswith, find = output.startswith, output.find  # (bound once: this runs for each of 100,000 jobs)
    cursor, size, start, at = 0, len(output), 0, 0
    while start < size:
        end = find("\n", start)
        if end < 0:
            end = size
        at += 1
        line_start, start = start, end + 1
        head, mid, tail, job, word = known = order[cursor]
        if startswith(head, line_start):
            cursor += 1
        else:
            space = find(" ", line_start, end)
            known = kept.get(output[line_start:space if space >= 0 else end])  # type: ignore[assignment]
            mid = None  # (a line not of its job's head is parsed)
            if known is not None:
                # Jobs that ended since the last read leave gaps: expect the line after this job's from here on.
                for i in range(cursor, min(cursor + _RESYNC, len(order) - 1)):
                    if order[i] is known:
                        cursor = i + 1
                        break
                head, mid, tail, job, word = known
                if not startswith(head, line_start):
                    mid = None
        # Unchanged but for the two volatile values: the same head, mid and tail around them. (A kept line without
        # them, mid None, which no job's line of scontrol's is, is parsed again each time.)
        if (mid is not None and (run_end := find(" ", line_start + len(head), end)) >= 0
                and startswith(mid, run_end) and (look_end := find(" ", run_end + len(mid), end)) >= 0
                and end - look_end == len(tail) and startswith(tail, look_end)):
            now[word] = known
            jobs.append(job)
            continue
        line = output[line_start:end]
        if _empty(line):
            continue
        if not line.startswith("JobId="):
            return f"{JOBS_COMMAND} line {at} does not start with JobId= (a comment with a line break)"
        cut = _cut(line)
        steady = _steady(*cut)
        job = None if known is None else _repriced(steady, _steady(*known[:3]), known.job)
        if job is None:
            r = _job_record(steady, at)
            if isinstance(r, str):
                return r
            job = _job(r)
        word = line.partition(" ")[0]
        now[word] = KeptLine(*cut, job, word)
        jobs.append(job)
    if len(now) != len(jobs) or len(set(map(_ID, jobs))) != len(jobs):
        return f"{JOBS_COMMAND}: a job id on two lines (a comment with a line break)"
    return jobs, now


def _job_id(job: str, array: str, task: str) -> str:
    """A record's id as squeue --json names it: an array's element 6_1, its tasks not split off yet 6_[2-4%2]."""
    if array and task:
        return f"{array}_{task}" if task.isdigit() else f"{array}_[{task}]"
    return job


def _repriced(line: str, old: str, job: SlurmJob) -> SlurmJob | None:
    """``job``, of its line ``old``, with the priority ``line`` shows, where that alone changed (slurmctld
    recalculates every pending job's priority every PriorityCalcPeriod); else None. The line is then trusted as
    the old one was: it differs only in digits."""
    at = line.find(_PRIORITY)
    if at < 0 or old.find(_PRIORITY) != at or line[:at] != old[:at]:
        return None
    start = at + len(_PRIORITY)
    end, old_end = line.find(" ", start), old.find(" ", start)
    value = line[start:end]
    if end < 0 or old_end < 0 or line[end:] != old[old_end:] or not (value.isascii() and value.isdigit()):
        return None
    return job.with_priority(int(value))


def _job(r: Record, sluids: bool = False) -> SlurmJob:
    array, task = r.str("ArrayJobId"), r.str("ArrayTaskId")
    job_id = _job_id(r.str("JobId", required=True), array, task)
    user = _USER.fullmatch(r.str("UserId"))
    per_node, type_n = _gpus(r, "TresPerNode")
    per_job, type_j = _gpus(r, "TresPerJob")
    per_task, type_t = _gpus(r, "TresPerTask")
    reason = r.str("Reason")
    throttle = r.int("ArrayTaskThrottle")
    per_cpu, per_gpu = _memory(r, "MinMemoryCPU") or None, _gpus(r, "MemPerTres")[0]
    return SlurmJob(
        id=job_id,
        user=user.group(1) if user else r.str("UserId"),
        state=r.str("JobState", required=True),
        partition=r.str("Partition"),
        nodes=r.nodes("NodeList"),
        gpus_alloc=_detail_gpus(r),
        num_nodes=r.int("NumNodes", default=1) or 1,
        max_nodes=_max_nodes(r),
        gpus_per_node=per_node,
        gpus_per_job=per_job,
        gpus_per_task=per_task,
        tasks=r.int("NumTasks", default=1) or 1,
        tasks_per_node=r.int("NtasksPerN:B:S:C") or 0,
        gpu_type=type_n or type_j or type_t,
        cpus=r.int("NumCPUs", default=1) or 1,
        memory_per_node_mb=memory_per_node(_memory(r, "MinMemoryNode"), per_cpu, per_gpu),
        memory_per_cpu_mb=per_cpu,
        memory_per_gpu_mb=per_gpu,
        exclusive=_exclusive(r),
        required_nodes=r.nodes("ReqNodeList"),
        excluded_nodes=r.nodes("ExcNodeList"),
        held=held(reason),
        reason=reason,
        comment=r.str("Comment"),
        reservation=r.str("Reservation"),
        priority=r.int("Priority"),
        time_limit_s=duration_s(r.str("TimeLimit"), f"{r.what}: field TimeLimit"),
        start_time=r.time("StartTime"),
        submit_time=r.time("SubmitTime"),
        eligible_time=r.time("EligibleTime"),
        array_job=array if task else "",
        array_pending="" if task.isdigit() else task.split("%")[0],
        array_throttle=throttle or 0,
        constraint=r.str("Features"),
        prefer=r.str("Prefer"),
        contiguous=r.str("Contiguous") == "1",
        switches=switches(r.str("Switches"), r.what),
        segment=r.int("SegmentSize") or 0,
        # (the record of an array's tasks not split off yet is no one task's)
        sluid=sluid(r.str("SLUID"), f"{r.what}: field SLUID") if sluids and (not task or task.isdigit()) else "",
    )


def partitions(output: str) -> list[SlurmPartition]:
    """``scontrol show partition --oneliner``."""
    return [
        SlurmPartition(
            name=r.str("PartitionName", required=True),
            nodes=r.nodes("Nodes"),
            state=r.str("State") or "UP",
            default=r.str("Default") == "YES",
        )
        for r in records(output, "scontrol show partition", "PartitionName")
    ]


def reservations(output: str) -> list[SlurmReservation]:
    """``scontrol show reservation --oneliner``."""
    return [
        SlurmReservation(
            name=r.str("ReservationName", required=True),
            nodes=r.nodes("Nodes"),
            start=r.str("StartTime"),
            end=r.str("EndTime"),
            active=r.str("State") == "ACTIVE",
            flags=frozenset(f for f in r.str("Flags").split(",") if f),
            users=tuple(u for u in r.str("Users").split(",") if u),
        )
        for r in records(output, "scontrol show reservation", "ReservationName")
    ]


TOPOLOGY_COMMAND = "scontrol show topology"


def topology(output: str) -> tuple[tuple[SlurmSwitch, ...], tuple[SlurmBlock, ...], tuple[int, ...]]:
    """``scontrol show topology``: the switches of topology/tree (``SwitchName=s2 Level=1 LinkSpeed=1
    Nodes=node[01-04] Switches=s[0-1]``), or the blocks of topology/block (``BlockName=b1 BlockIndex=0
    Nodes=node[01-02] BlockSize=2``) and the sizes a job may span (each line's BlockSize, the
    aggregated blocks' too: 24.11 on; 23.11 prints none). Nothing for no topology plugin."""
    switches, blocks, sizes = [], [], set()
    for lineno, line in enumerate(output.split("\n"), 1):
        if not line.strip() or line.startswith("No "):
            continue
        key = line.partition("=")[0]
        if key not in ("SwitchName", "BlockName", "AggregatedBlock"):
            raise SlurmParseError(f"{TOPOLOGY_COMMAND}: line {lineno} is neither a switch nor a block: {line[:80]!r}")
        r = record(line, TOPOLOGY_COMMAND, key, lineno)
        if key == "SwitchName":
            level = r.int("Level")
            try:
                children = tuple(expand(r.str("Switches")))
            except SlurmParseError as err:
                raise SlurmParseError(f"{r.what}: field Switches: {err}") from None
            switches.append(SlurmSwitch(r.str("SwitchName"), level or 0, r.nodes("Nodes"), children))
        else:
            if key == "BlockName":  # (an aggregated block is base blocks side by side)
                blocks.append(SlurmBlock(r.str("BlockName"), r.nodes("Nodes")))
            if r.int("BlockSize"):
                sizes.add(r.int("BlockSize"))
    return tuple(switches), tuple(blocks), tuple(sorted(sizes))


def version(output: str) -> str:
    """``slurm 22.05.8`` / ``slurm-wlm 22.05.8`` -> ``22.05.8``."""
    match = re.fullmatch(r"slurm(?:-wlm)?\s+(\d+\.\d+\.\S+)", output.strip())
    if not match:
        raise SlurmParseError(f"scontrol --version: cannot read {output.strip()[:80]!r}")
    return match.group(1)


def ran_on(output: str, what: str) -> dict[str, tuple[str, ...]]:
    """``squeue --noheader --states=all --jobs=.. --format=%i|%T|%N``: the nodes of each job that holds or held
    some (pending ones, whose node list is empty, are left out)."""
    found = {}
    for lineno, line in enumerate(output.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.strip().split("|")
        if len(parts) != 3 or not parts[0]:
            raise SlurmParseError(f"{what}: line {lineno}: cannot read {line[:80]!r}")
        job_id, state, nodes = parts
        if nodes and state != "PENDING":
            found[job_id] = tuple(expand(nodes))
    return found


def look(output: str, comments: bool = True) -> Look:
    """``squeue --noheader --states=PENDING,RUNNING,COMPLETING --format=%i %t %k``: the pending ids whose
    comment carries the marker, and the ids of the jobs that hold nodes (R, CG). ``comments`` False: the lines have
    none (``--only-job-state --format=%i %t``), and every pending id is taken."""
    pending, holding = set(), set()
    for line in output.split("\n"):  # a carriage return in a comment is part of it
        job_id, _, rest = line.strip().partition(" ")
        state, _, comment = rest.partition(" ")
        if not job_id:
            continue
        if state == "PD":
            if not comments or marked(comment):
                pending.add(job_id)
        else:
            holding.add(job_id)
    return Look(frozenset(pending), frozenset(holding), comments)
