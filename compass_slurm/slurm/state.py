"""Slurm's view of the cluster, as value objects: what every backend returns.

Jobs managed by compass carry a marker in their Slurm comment (``--comment``):
the token ``compass`` (placed by the daemon, not movable) or
``compass:migratable`` (checkpoint-restartable: the daemon may requeue it onto
other nodes). ``compass:requeue`` records that the user asked Slurm for
``--requeue`` (set by the job_submit hook and the wrapper, since Slurm's own
Requeue flag is on for every job under the default JobRequeue=1); it makes the
job migratable only where the config says ``migratable = "requeue"``. ``compass:leased`` (the wrapper's, for a
job whose own ``--begin`` lies ahead) says that the begin time already holds the lease past the user's, so that the
job_submit hook does not add it again (a job the user marked by hand gets it there). The token
may stand anywhere in a comma- or space-separated comment, so a user's own
comment survives next to it. ``marker_comment()`` builds the comment the sbatch
wrapper passes on.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields, is_dataclass
from operator import attrgetter
from types import UnionType
from typing import Any, get_args, get_origin, get_type_hints

from . import names
from .errors import SlurmNameError, SlurmParseError

MARKER = "compass"
#: the longest job comment Slurm takes, in bytes (job_mgr.c, _test_strlen): a marker that makes it longer is refused
MAX_COMMENT = 1024
MIGRATABLE_MARKER = "compass:migratable"
REQUEUE_MARKER = "compass:requeue"
LEASED_MARKER = "compass:leased"

#: node states (lower case) and flags (upper case) under which no new job may start. Not POWERED_DOWN: Slurm's
#: power saving resumes such a node for the job it allocates there (the job configures while it boots), so a job
#: that fits only on powered-down nodes must be placed there, or it would wait for ever on a cluster that idles.
UNAVAILABLE_STATES = frozenset({"down", "future", "unknown", "error", "fail", "inval"})
UNAVAILABLE_FLAGS = frozenset(
    {"DRAIN", "DRAINED", "DRAINING", "MAINTENANCE", "NOT_RESPONDING", "FAIL", "POWERING_DOWN",
     "POWERING_UP", "POWER_DOWN", "REBOOT_REQUESTED", "REBOOT_ISSUED", "INVALID_REG", "DOWN"}
)
_TOKENS = re.compile(r"[\s,;]+")


def marker_comment(migratable: bool, comment: str = "", requeue: bool = False, leased: bool = False) -> str:
    """The job comment that marks a job as compass-managed, keeping the user's own comment;
    ``requeue``: the user asked for Slurm's --requeue; ``leased``: its begin time holds the lease past the user's."""
    token = MIGRATABLE_MARKER if migratable else MARKER
    given = frozenset(_TOKENS.split(comment))  # a token the user wrote already is not written twice
    tokens = [t for t in (token, REQUEUE_MARKER if requeue else "", LEASED_MARKER if leased else "")
              if t and t not in given]
    return " ".join([*tokens, comment]).strip()


@functools.lru_cache(maxsize=4096)  # asked for every job every cycle; comments repeat
def _markers(comment: str) -> frozenset[str]:
    return frozenset(_TOKENS.split(comment)) & {MARKER, MIGRATABLE_MARKER, REQUEUE_MARKER}


def marked(comment: str) -> bool:
    """Whether a job comment carries the compass marker (the job is managed)."""
    return bool(_markers(comment) - {REQUEUE_MARKER})


@dataclass(frozen=True, slots=True)
class Look:
    """The daemon's cheap look between cycles (one small squeue): what may call for a cycle now."""

    #: pending jobs that carry the marker (a new one waits for a placement); every pending job where the look saw
    #: no comments
    pending: frozenset[str]
    #: running or completing jobs, any kind (one of the daemon's that left them has freed its GPUs)
    holding: frozenset[str]
    #: whether the look saw the jobs' comments, and so the marker (not where it reads states alone)
    comments: bool = True


@dataclass(frozen=True, slots=True)
class SlurmNode:
    """One node: ``state`` is the base state in lower case (idle, mixed, allocated, down, ...),
    ``flags`` the upper-case modifiers (DRAIN, RESERVED, MAINTENANCE, NOT_RESPONDING, ...)."""

    name: str
    state: str
    flags: frozenset[str] = frozenset()
    partitions: tuple[str, ...] = ()
    gpus: int = 0
    gpus_used: int = 0
    gpu_type: str | None = None
    cpus: int = 0
    cpus_alloc: int = 0
    memory_mb: int = 0
    memory_alloc_mb: int = 0
    reason: str = ""
    #: ActiveFeatures, what a job's constraint is checked against (AvailableFeatures may hold more: changeable ones)
    features: frozenset[str] = frozenset()
    #: every GPU type the node has, in Slurm's order; ``gpu_type`` is the type only where there is exactly one
    #: (None for several, e.g. MIG profiles: no one type stands for all of ``gpus``)
    gpu_types: tuple[str, ...] = ()
    #: gres/shard: configured and allocated shards, and the GPUs with a shard allocated (Slurm gives none of
    #: those whole to a GPU job)
    shards: int = 0
    shards_used: int = 0
    gpus_shared: int = 0

    @property
    def reserved(self) -> bool:
        return "RESERVED" in self.flags

    @property
    def available(self) -> bool:
        """New work may start here (reservations are the caller's business: they depend on the job)."""
        return self.state not in UNAVAILABLE_STATES and not (self.flags & UNAVAILABLE_FLAGS)

    @property
    def gpus_free(self) -> int:
        return max(0, self.gpus - self.gpus_used)


def memory_per_node(per_node: int | None, per_cpu: int | None, per_gpu: int | None) -> int | None:
    """A job's memory per node from what Slurm shows (None or 0 where unset): 0, all of each node's
    memory, where it asks for none per CPU or per GPU. That is ``--mem=0``, and what Slurm gives a job
    that asks for no memory where no default is set; each backend shows it as 0 or as nothing (pyslurm),
    and 22.05-23.11 show 0 per node beside a ``--mem-per-gpu``, which then counts alone."""
    if per_cpu or per_gpu:
        return per_node or None
    return per_node or 0


@dataclass(frozen=True, slots=True)
class SlurmJob:
    """One job. ``gpus_alloc`` maps each allocated node to its GPU count (running jobs only);
    the request is ``num_nodes`` nodes with ``gpus_per_node`` each, or ``gpus_per_job`` in all,
    or ``gpus_per_task`` times ``tasks``.

    Array jobs: a task of its own is ``A_T`` with ``array_job`` A; the record of the tasks
    Slurm has not split off yet is ``A_[..]`` and lists them in ``array_pending`` (``0-5``,
    ``1,3,7-9``), at most ``array_throttle`` of the array's tasks running at once (0: no limit).
    ``exclusive``: the job owns its nodes whole (``--exclusive``). ``eligible_time``: when
    it may start (its ``--begin``, or the lease the daemon set). Memory: at most one of the
    three is set as read (``memory_per_node``); ``memory_per_node_mb`` 0 is all of each
    node's memory (``--mem=0``)."""

    id: str
    user: str
    state: str
    partition: str
    nodes: tuple[str, ...] = ()
    gpus_alloc: Mapping[str, int] = field(default_factory=dict)
    num_nodes: int = 1
    #: the most nodes it may have, as Slurm keeps it (``-N 2``: 2, ``-N 1-3``: 3; from 23.11 also 1 for some
    #: one-node requests, and what a pin's NumNodes set); 0: none, any count Slurm needs
    max_nodes: int = 0
    gpus_per_node: int | None = None
    gpus_per_job: int | None = None
    gpus_per_task: int | None = None
    tasks: int = 1
    #: ``--ntasks-per-node`` (0: not given)
    tasks_per_node: int = 0
    gpu_type: str | None = None
    cpus: int = 1
    memory_per_node_mb: int | None = None
    memory_per_cpu_mb: int | None = None
    memory_per_gpu_mb: int | None = None
    exclusive: bool = False
    required_nodes: tuple[str, ...] = ()
    excluded_nodes: tuple[str, ...] = ()
    held: bool = False
    reason: str = ""
    comment: str = ""
    reservation: str = ""
    priority: int = 0
    #: the time limit in seconds (None: unlimited); with ``start_time`` (Unix seconds, 0: not known)
    #: it is when a running job will have ended at the latest, the run-time estimate backfill plans with
    time_limit_s: int | None = None
    start_time: int = 0
    submit_time: int = 0
    eligible_time: int = 0
    array_job: str = ""
    array_pending: str = ""
    array_throttle: int = 0
    #: ``-C/--constraint`` and ``--prefer`` as Slurm prints them (``a100&80gb``, ``[a100*2&v100*2]``; "": none)
    constraint: str = ""
    prefer: str = ""
    contiguous: bool = False
    #: ``--switches=N[@wait]``'s N (0: none asked) and ``--segment``'s size (0: none; 24.11 never shows it)
    switches: int = 0
    segment: int = 0
    #: the SLUID a pin names this job record by: read where Slurm takes one for a pin without reading the job
    #: first (the CLI backend from 26.05 on); "": none read, or not one record's (an array's tasks not split off
    #: yet). A requeue gives the job a new one.
    sluid: str = ""

    @property
    def pending(self) -> bool:
        return self.state == "PENDING"

    @property
    def running(self) -> bool:
        return self.state == "RUNNING"

    @property
    def gpus_requested(self) -> int:
        """GPUs the job asked for in all (0: not a GPU job, not ours to place)."""
        if self.gpus_per_job:
            return self.gpus_per_job
        if self.gpus_per_node:
            return self.gpus_per_node * self.num_nodes
        if self.gpus_per_task:
            return self.gpus_per_task * self.tasks
        return 0

    @property
    def managed(self) -> bool:
        """Submitted through compass (its comment carries the marker)."""
        return marked(self.comment)

    @property
    def migratable(self) -> bool:
        return MIGRATABLE_MARKER in _markers(self.comment)

    def may_migrate(self, mode: str) -> bool:
        """Whether the daemon may requeue it under the config's ``migratable`` mode (marker, requeue, never)."""
        markers = _markers(self.comment)
        if mode == "requeue":
            return bool(markers & {MIGRATABLE_MARKER, REQUEUE_MARKER})
        return mode == "marker" and MIGRATABLE_MARKER in markers

    def with_priority(self, priority: int) -> SlurmJob:
        """The same job at another priority (slurmctld recalculates every pending job's, every
        PriorityCalcPeriod): dataclasses.replace, at half its cost for tens of thousands of jobs."""
        values = list(_JOB_VALUES(self))
        values[_PRIORITY_AT] = priority
        return SlurmJob(*values)

    def same_but_priority(self, other: SlurmJob) -> bool:
        """Whether ``other`` is this job, its priority apart."""
        return _BUT_PRIORITY(self) == _BUT_PRIORITY(other)


_JOB_FIELDS = tuple(f.name for f in fields(SlurmJob))
_JOB_VALUES = attrgetter(*_JOB_FIELDS)
_PRIORITY_AT = _JOB_FIELDS.index("priority")
_BUT_PRIORITY = attrgetter(*(name for name in _JOB_FIELDS if name != "priority"))


@dataclass(frozen=True, slots=True)
class SlurmPartition:
    name: str
    nodes: tuple[str, ...]
    state: str = "UP"
    default: bool = False


@dataclass(frozen=True, slots=True)
class SlurmReservation:
    """A reservation; ``start``/``end`` are Slurm's local ISO times as printed."""

    name: str
    nodes: tuple[str, ...]
    start: str
    end: str
    active: bool
    flags: frozenset[str] = frozenset()
    users: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SlurmSwitch:
    """One switch of topology/tree (``scontrol show topology``): its level (0: leaf), the nodes below it
    (all of them, through its children too) and the switches right below it."""

    name: str
    level: int
    nodes: tuple[str, ...] = ()
    children: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SlurmBlock:
    """One block of topology/block (23.11+) and its nodes."""

    name: str
    nodes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SlurmState:
    """Everything one read of Slurm returned; ``read_at`` is the Unix time of the read. The topology
    (``switches`` under topology/tree; ``blocks`` and ``block_sizes`` under topology/block) is empty
    without a topology plugin."""

    nodes: tuple[SlurmNode, ...]
    jobs: tuple[SlurmJob, ...]
    partitions: tuple[SlurmPartition, ...]
    reservations: tuple[SlurmReservation, ...]
    version: str
    read_at: float
    switches: tuple[SlurmSwitch, ...] = ()
    blocks: tuple[SlurmBlock, ...] = ()
    block_sizes: tuple[int, ...] = ()

    def node(self, name: str) -> SlurmNode:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)

    def job(self, job_id: str) -> SlurmJob:
        for job in self.jobs:
            if job.id == job_id:
                return job
        raise KeyError(job_id)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data (sets become sorted lists)."""
        return _plain(asdict(self))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SlurmState:
        """The state ``to_dict`` made ``data`` of; every field is checked against its type here, so that a bad
        document (a hand-edited snapshot) fails on loading, naming the field, not deep in a command."""
        state = _build(cls, data, "state")
        if not 0 <= state.read_at <= _LAST_TIME:
            raise SlurmParseError(f"state.read_at: {state.read_at!r} is not a time (seconds since 1970)")
        _check_names(state)
        return state


def _check_names(state: SlurmState) -> None:
    """The names a command line may carry (node names, job ids, SLUIDs, GRES types) in Slurm's syntax, as Slurm's
    own reads give them: a hand-edited snapshot fails here, naming the field, not in the command that names it."""
    checks = [(f"state.nodes[{k}].name", names.node_name, node.name) for k, node in enumerate(state.nodes)]
    for k, job in enumerate(state.jobs):
        where = f"state.jobs[{k}]"
        if job.array_pending:  # the record of an array's tasks not split off yet, A_[..]: split into A_T before use
            checks.append((f"{where}.array_job", names.job_id, job.array_job))
        else:
            checks.append((f"{where}.id", names.job_id, job.id))
        if job.sluid:
            checks.append((f"{where}.sluid", names.sluid, job.sluid))
        if job.gpu_type is not None:
            checks.append((f"{where}.gpu_type", names.gpu_type, job.gpu_type))
    for where, check, value in checks:
        try:
            check(value)
        except SlurmNameError as err:
            raise SlurmParseError(f"{where}: {err}") from None


#: fields older snapshots carry that nothing reads any more (dropped on load, so those files still load)
RETIRED_FIELDS = frozenset({"restarts"})


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, frozenset):
        return sorted(value)
    return value


def _build(cls: type, data: Any, where: str) -> Any:
    """Rebuild one value object from its dict (``where`` names it in errors), restoring tuples and frozensets; a
    field with a default may be missing (older snapshots have no topology)."""
    if not isinstance(data, Mapping):
        raise SlurmParseError(f"{where}: expected an object, got {_shown(data)}")
    checks = _checks(cls)
    data = {k: v for k, v in data.items() if k not in RETIRED_FIELDS}
    unknown = set(data) - set(checks)
    if unknown:
        raise SlurmParseError(f"{where}: unknown fields {sorted(unknown)} ({cls.__name__})")
    missing = [f.name for f in fields(cls) if f.name not in data and f.default is MISSING
               and f.default_factory is MISSING]
    if missing:
        raise SlurmParseError(f"{where}: missing fields {missing} ({cls.__name__})")
    return cls(**{name: checks[name](value, f"{where}.{name}") for name, value in data.items()})


#: the largest time a snapshot may give (the end of year 9999, as far as datetime goes)
_LAST_TIME = 253402300799.0
#: Slurm's numbers fit in 64 bits (unsigned, most of them); a bigger one is no Slurm's and would overflow where used
_INT_LIMIT = 2**64
#: what the type of a field is called in errors
_NAMES = {int: "a whole number", float: "a number", str: "a string", bool: "true or false"}

_Check = Callable[[Any, str], Any]


@functools.cache
def _checks(cls: type) -> dict[str, _Check]:
    """Per field of a value object: the check of its type, which returns the value as the field holds it."""
    hints = get_type_hints(cls)
    return {f.name: _check(hints[f.name]) for f in fields(cls)}


def _check(kind: Any) -> _Check:
    """The check of values of the type ``kind``: one of the few types the value objects use."""
    origin, args = get_origin(kind), get_args(kind)
    if origin is UnionType:  # X | None
        inner = _check(next(a for a in args if a is not type(None)))
        return lambda value, where: None if value is None else inner(value, where)
    if origin in (tuple, frozenset):
        item = _check(args[0])

        def many(value: Any, where: str) -> Any:
            if not isinstance(value, list):
                raise SlurmParseError(f"{where}: expected a list, got {_shown(value)}")
            return origin(item(v, f"{where}[{i}]") for i, v in enumerate(value))
        return many
    if origin is Mapping:
        key, item = _check(args[0]), _check(args[1])

        def mapping(value: Any, where: str) -> Any:
            if not isinstance(value, dict):
                raise SlurmParseError(f"{where}: expected an object, got {_shown(value)}")
            return {key(k, where): item(v, f"{where}.{k}") for k, v in value.items()}
        return mapping
    if is_dataclass(kind):
        return lambda value, where: _build(kind, value, where)

    def scalar(value: Any, where: str) -> Any:
        # bool is an int to Python; a number read as a whole one is a float where one is wanted
        if isinstance(value, bool) != (kind is bool) or not isinstance(value, (int, float) if kind is float else kind):
            raise SlurmParseError(f"{where}: expected {_NAMES[kind]}, got {_shown(value)}")
        if kind in (int, float) and not -_INT_LIMIT < value < _INT_LIMIT:  # also NaN and the infinities
            raise SlurmParseError(f"{where}: {_shown(value)} is out of range: Slurm's numbers fit in 64 bits")
        if kind is int and value < 0:
            raise SlurmParseError(f"{where}: {_shown(value)} is negative: Slurm's whole numbers (counts, sizes, "
                                  "times) are never below 0")
        return float(value) if kind is float else value
    return scalar


def _shown(value: Any) -> str:
    """A value as the JSON document has it, cut short."""
    text = json.dumps(value, default=repr)
    return text if len(text) <= 40 else text[:39] + "\u2026"
