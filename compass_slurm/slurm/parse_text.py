"""Parsers for ``scontrol show {node,job,partition,reservation} --oneliner [--details]``.

Each line is one record of ``Key=Value`` fields. A key starts after
whitespace, so values may hold ``=`` (``TRES=cpu=1,mem=8000M``) and, like
``Reason=`` or ``OS=``, spaces; a value with a space followed by ``word=`` would
be split wrongly, which no field we read does. The job detail part
(``Nodes=node[01-02] CPU_IDs=0 Mem=8000 GRES=gpu:3(IDX:0-2)``) repeats keys,
so a record keeps its fields as an ordered list of pairs.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime

from . import gres
from .errors import SlurmParseError
from .hostlist import expand
from .state import Look, SlurmJob, SlurmNode, SlurmPartition, SlurmReservation, marked
from .values import duration_s, held, memory_mb, node_state

_KEY = re.compile(r"(?:^|(?<=\s))([A-Za-z][\w:/.]*)=")
_NULL = {"(null)", "N/A", "None", "n/a"}
_USER = re.compile(r"(.*?)\((\d+)\)")
# scontrol appends who set a node's reason and when: "maintenance [root@2026-11-30T01:30:32]"
_REASON_STAMP = re.compile(r"\s*\[[^\]]*@[^\]]*\]$")


class Record:
    """One line of ``scontrol show ... --oneliner``: an ordered list of (key, value)."""

    def __init__(self, pairs: list[tuple[str, str]], what: str) -> None:
        self.pairs = pairs
        self.first = {}
        for key, value in pairs:
            self.first.setdefault(key, value)
        self.what = what

    def str(self, key: str, required: bool = False) -> str:
        if key not in self.first:
            if required:
                raise SlurmParseError(f"{self.what}: missing field {key!r}")
            return ""
        value = self.first[key]
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


def records(output: str, command: str, key: str) -> Iterator[Record]:
    """The records of ``output``, each of which must start with ``key=``."""
    for lineno, line in enumerate(output.splitlines(), 1):
        if not line.strip() or line.startswith("No ") and line.rstrip().endswith("in the system"):
            continue  # "No reservations in the system"
        starts = list(_KEY.finditer(line))
        if not starts or starts[0].start() != 0 or starts[0].group(1) != key:
            raise SlurmParseError(f"{command}: line {lineno} does not start with {key}=: {line[:80]!r}")
        pairs = []
        for match, following in zip(starts, [*starts[1:], None]):
            end = following.start() if following else len(line)
            pairs.append((match.group(1), line[match.end() : end].strip()))
        yield Record(pairs, f"{command} line {lineno} ({key}={pairs[0][1]})")


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
        total, kind = _gpus(r, "Gres")
        used, _ = _gpus(r, "GresUsed")
        out.append(
            SlurmNode(
                name=name,
                state=state,
                flags=flags,
                partitions=tuple(p for p in r.str("Partitions").split(",") if p),
                gpus=total or 0,
                gpus_used=used or 0,
                gpu_type=kind,
                cpus=r.int("CPUTot"),
                cpus_alloc=r.int("CPUAlloc"),
                memory_mb=r.int("RealMemory"),
                memory_alloc_mb=r.int("AllocMem"),
                reason=_REASON_STAMP.sub("", r.str("Reason")),
            )
        )
    return out


def _detail_gpus(r: Record) -> dict[str, int]:
    """Per-node GPUs from the --details groups ``Nodes=<hostlist> ... GRES=gpu:N(IDX:..)``."""
    alloc: dict[str, int] = {}
    group: list[str] = []
    for key, value in r.pairs:
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
    if not text or text in ("0", "0M"):
        return None
    return memory_mb(text, f"{r.what}: field {key}")


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


def _exclusive(r: Record) -> bool:
    """--exclusive: 26.05 says ``Exclusive=NODE`` (and OverSubscribe=NO for every job that does not oversubscribe);
    earlier releases say OverSubscribe=NO. USER, MCS, YES and OK share."""
    if "Exclusive" in r.first:
        return r.str("Exclusive") == "NODE"
    return r.str("OverSubscribe") == "NO"


def jobs(output: str) -> list[SlurmJob]:
    """``scontrol show job --details --oneliner``."""
    out = []
    for r in records(output, "scontrol show job", "JobId"):
        job_id = r.str("JobId", required=True)
        array, task = r.str("ArrayJobId"), r.str("ArrayTaskId")
        if array and task:
            job_id = f"{array}_{task}" if task.isdigit() else f"{array}_[{task}]"
        user = _USER.fullmatch(r.str("UserId"))
        per_node, type_n = _gpus(r, "TresPerNode")
        per_job, type_j = _gpus(r, "TresPerJob")
        per_task, type_t = _gpus(r, "TresPerTask")
        reason = r.str("Reason")
        throttle = r.int("ArrayTaskThrottle")
        out.append(
            SlurmJob(
                id=job_id,
                user=user.group(1) if user else r.str("UserId"),
                state=r.str("JobState", required=True),
                partition=r.str("Partition"),
                nodes=r.nodes("NodeList"),
                gpus_alloc=_detail_gpus(r),
                num_nodes=r.int("NumNodes", default=1) or 1,
                gpus_per_node=per_node,
                gpus_per_job=per_job,
                gpus_per_task=per_task,
                tasks=r.int("NumTasks", default=1) or 1,
                gpu_type=type_n or type_j or type_t,
                cpus=r.int("NumCPUs", default=1) or 1,
                memory_per_node_mb=_memory(r, "MinMemoryNode"),
                memory_per_cpu_mb=_memory(r, "MinMemoryCPU"),
                memory_per_gpu_mb=_gpus(r, "MemPerTres")[0],
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
            )
        )
    return out


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


def version(output: str) -> str:
    """``slurm 22.05.8`` / ``slurm-wlm 22.05.8`` -> ``22.05.8``."""
    match = re.fullmatch(r"slurm(?:-wlm)?\s+(\d+\.\d+\.\S+)", output.strip())
    if not match:
        raise SlurmParseError(f"scontrol --version: cannot read {output.strip()[:80]!r}")
    return match.group(1)


def look(output: str) -> Look:
    """``squeue --noheader --states=PENDING,RUNNING,COMPLETING --format=%i %t %k``: the pending ids whose
    comment carries the marker, and the ids of the jobs that hold nodes (R, CG)."""
    pending, holding = set(), set()
    for line in output.splitlines():
        job_id, _, rest = line.strip().partition(" ")
        state, _, comment = rest.partition(" ")
        if not job_id:
            continue
        if state == "PD":
            if marked(comment):
                pending.add(job_id)
        else:
            holding.add(job_id)
    return Look(frozenset(pending), frozenset(holding))
