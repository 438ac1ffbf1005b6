"""What ``compass status`` shows: every GPU node as one cell, fragmentation, why pending jobs wait, and which
jobs the daemon is migrating.

Built from one SlurmState: the running allocations are adopted into a policy
(the daemon's, by default COMPASS) so each node gets its ABS role, then
``fragmentation.measure`` gives partial nodes, Phi*, SIF and WCC, per node group (one
capacity, one GPU type) and in total. Pending GPU
jobs are checked against the nodes they may use, so "Resources" becomes
"needs 2 empty nodes, 1 free". A job the daemon requeue-held to migrate it (its state ``requeued``,
docs/architecture.md) is found as the daemon itself finds one after a restart: Slurm holds it, and its
latest place in the decision log is that requeue's record, which names the nodes it goes to
(:func:`logged_requeues`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..config import Config
from ..engine.fragmentation import Fragmentation, measure
from ..engine.model import Job, Node, NodeView
from ..engine.policies.base import Policy, make_policy
from ..engine.rate_limit import per_burst, per_hour
from ..slurm.requests import Request, adoption_order, array_tasks, priority_order
from ..slurm.state import SlurmNode, SlurmState
from ..slurm.translate import Translator, left_to_slurm_text

if TYPE_CHECKING:
    from .store import DecisionRecord, Store

#: cell kinds, in legend order: partial nodes are pool, slotted or partial (outside ABS)
KINDS = ("empty", "pool", "slotted", "partial", "full", "unavailable")


@dataclass(frozen=True, slots=True)
class NodeCell:
    """One GPU node on the map; ``note`` says why it is unavailable or breaks ABS."""

    name: str
    gpus: int
    gpus_used: int
    kind: str  # one of KINDS
    role: str  # the policy's role: empty | pool | slotted (COMPASS) or used
    slurm_state: str
    partitions: tuple[str, ...] = ()
    pinned: bool = False  # holds an instance that may not migrate
    note: str = ""

    @property
    def partial(self) -> bool:
        return 0 < self.gpus_used < self.gpus

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "role": self.role, "gpus": self.gpus,
                "gpus_used": self.gpus_used, "partial": self.partial, "pinned": self.pinned,
                "slurm_state": self.slurm_state, "partitions": list(self.partitions), "note": self.note}


@dataclass(frozen=True, slots=True)
class PendingJob:
    """A pending GPU job and what keeps it from starting; ``blocked`` None means the GPUs are there."""

    id: str
    user: str
    partition: str
    request: str  # "2x8": instances x GPUs per instance
    gpus: int
    held: bool
    slurm_reason: str
    blocked: str | None
    #: the nodes the daemon is migrating it to, in instance order (its state ``requeued``); None: not migrating
    migrating_to: tuple[str, ...] | None = None

    def as_json(self) -> dict[str, Any]:
        return {"job": self.id, "user": self.user, "partition": self.partition, "request": self.request,
                "gpus": self.gpus, "held": self.held, "slurm_reason": self.slurm_reason,
                "blocked": self.blocked, "fits": self.blocked is None,
                "migrating_to": None if self.migrating_to is None else list(self.migrating_to)}


@dataclass(frozen=True, slots=True)
class RequeuedJob:
    """A job the daemon is migrating: requeue-held (still completing on ``src``, or pending again), to be re-pinned
    to ``nodes`` and released; ``record`` is the requeue's record in the log."""

    id: str
    user: str
    slurm_state: str
    record: DecisionRecord

    @property
    def nodes(self) -> tuple[str, ...]:
        return self.record.nodes

    @property
    def src(self) -> tuple[str, ...]:
        return self.record.from_nodes

    def as_json(self) -> dict[str, Any]:
        since = self.record.time
        return {"job": self.id, "user": self.user, "state": "requeued", "slurm_state": self.slurm_state,
                "to": list(self.nodes), "from": list(self.src), "gpus_per_node": self.record.gpus_per_node,
                "since": None if since is None else since.isoformat(timespec="milliseconds")}


@dataclass(frozen=True, slots=True)
class PartitionSummary:
    name: str
    nodes: int
    gpus: int
    gpus_used: int
    kinds: dict[str, int]

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "nodes": self.nodes, "gpus": self.gpus, "gpus_used": self.gpus_used,
                **{kind: self.kinds.get(kind, 0) for kind in KINDS}}


@dataclass(frozen=True)
class Status:
    """One look at the cluster: what ``compass status`` prints, and its --json document."""

    fragmentation: Fragmentation
    policy: str
    #: the daemon's queue discipline (the config's ``queue``), shown beside its policy
    queue: str
    #: the config's ``slack``: how long 1-GPU jobs may delay a one-node whole-node head (times its estimate)
    slack: float
    #: the daemon's migration budget: the config's ``migrations_per_hour`` and what it comes to on the
    #: GPU nodes the daemon manages (None: unlimited)
    migrations_per_hour_setting: int | str
    migrations_per_hour: int | None
    #: its burst cap: the config's ``migrations_burst`` and the most migrations in any 5 minutes it comes to
    migrations_burst_setting: int | str
    migrations_burst: int | None
    partition: str | None
    slurm_version: str
    read_at: float
    cells: tuple[NodeCell, ...]
    partitions: tuple[PartitionSummary, ...]
    pending: tuple[PendingJob, ...]
    abs_violations: dict[str, str] = field(default_factory=dict)
    orphans: int = 0
    #: the jobs the daemon is migrating, in Slurm's job order; None: not known (no decision log to read)
    requeued: tuple[RequeuedJob, ...] | None = None
    #: GPU nodes shown nowhere above: compass places nothing there, Slurm places every job (Translator.left_to_slurm)
    left_to_slurm: tuple[str, ...] = ()

    @property
    def partial_cells(self) -> list[NodeCell]:
        return [c for c in self.cells if c.partial]

    @property
    def stranded_gpus(self) -> int:
        """Free GPUs on partial nodes: capacity no whole-node job can use."""
        return sum(c.gpus - c.gpus_used for c in self.partial_cells)

    def kinds(self) -> dict[str, int]:
        counts = Counter(c.kind for c in self.cells)
        return {kind: counts.get(kind, 0) for kind in KINDS}

    def as_json(self) -> dict[str, Any]:
        partial = self.partial_cells
        return {
            **self.fragmentation.as_dict(),
            "within_bound": self.fragmentation.within_bound,
            "policy": self.policy,
            "queue": self.queue,
            "slack": self.slack,
            "migrations_per_hour": self.migrations_per_hour,
            "migrations_per_hour_setting": self.migrations_per_hour_setting,
            "migrations_burst": self.migrations_burst,
            "migrations_burst_setting": self.migrations_burst_setting,
            "partition": self.partition,
            "slurm_version": self.slurm_version,
            "read_at": self.read_at,
            "kinds": self.kinds(),
            "partial_nodes": [c.name for c in partial],
            "pinned_partial": [c.name for c in partial if c.pinned],
            "stranded_gpus": self.stranded_gpus,
            "orphans": self.orphans,
            "abs_violations": self.abs_violations,
            "partitions": [p.as_json() for p in self.partitions],
            "groups": [g.as_dict() for g in self.fragmentation.groups],
            "node_map": [c.as_json() for c in self.cells],
            "pending": [p.as_json() for p in self.pending],
            "requeued": None if self.requeued is None else [r.as_json() for r in self.requeued],
            "left_to_slurm": list(self.left_to_slurm),
        }


class StatusError(ValueError):
    """The state has nothing to show (unknown partition, no GPU nodes); the message says which, the hint what to do."""

    def __init__(self, message: str, hint: str = "`sinfo --summarize` lists partitions and their nodes") -> None:
        super().__init__(message)
        self.hint = hint


def build_status(state: SlurmState, partition: str | None = None, policy: str = Config.policy,
                 migratable: str = Config.migratable, queue: str = Config.queue, slack: float = Config.slack,
                 migrations_per_hour: int | str = Config.migrations_per_hour,
                 migrations_burst: int | str = Config.migrations_burst,
                 partitions: tuple[str, ...] = Config.partitions,
                 requeues: Mapping[str, DecisionRecord] | None = None) -> Status:
    """The cluster as ``state`` shows it (``partition``: only that one); ``partitions`` are the daemon's, whose
    GPU nodes a per-node migration budget counts whatever ``partition`` shows; ``requeues``: the jobs the daemon
    is migrating, with their requeue's record (:func:`logged_requeues`; None: not known)."""
    if partition is not None and partition not in {p.name for p in state.partitions}:
        known = ", ".join(p.name for p in state.partitions) or "none"
        raise StatusError(f"no partition {partition!r} (partitions: {known})")
    translator = Translator(state, [partition] if partition else (), migratable=migratable)
    if not translator.nodes:
        where = f"partition {partition!r}" if partition else "the cluster"
        if not translator.left_to_slurm:
            raise StatusError(f"{where} has no node with GPUs")
        raise StatusError(f"{where} has no node with GPUs compass places on: "
                          f"{left_to_slurm_text(translator.left_to_slurm)}",
                          hint="Slurm places every job on such nodes; compass has nothing to show or place")
    adopted = adopt(translator, policy)
    violations = adopted.abs_violations()
    cells = tuple(
        _cell(translator.slurm_nodes[view.name], view, violations.get(view.name, "")) for view in adopted.view()
    )
    hourly = managed_budget(state, migrations_per_hour, partitions)
    return Status(
        fragmentation=measure(adopted.cluster),
        policy=policy,
        queue=queue,
        slack=slack,
        migrations_per_hour_setting=migrations_per_hour,
        migrations_per_hour=hourly,
        migrations_burst_setting=migrations_burst,
        migrations_burst=per_burst(migrations_burst, hourly),
        partition=partition,
        slurm_version=state.version,
        read_at=state.read_at,
        cells=cells,
        partitions=_summaries(state, cells, partition),
        pending=tuple(blocked_jobs(translator, requeues)),
        abs_violations=violations,
        orphans=adopted.orphans(),
        requeued=None if requeues is None else tuple(requeued_jobs(translator, requeues)),
        left_to_slurm=translator.left_to_slurm,
    )


def logged_requeues(state: SlurmState, store: Store) -> dict[str, DecisionRecord]:
    """The jobs of ``state`` the daemon is migrating, with their requeue's record: Slurm holds them and their latest
    place in the log is that record (what a restarted daemon takes over, sync.take_over_requeues)."""
    from .sync import is_requeue

    held = [job.id for job in state.jobs if job.held]
    places = store.latest_places(held) if held else {}
    return {r.job_id: r for r in store.decisions_with_ids(p.id for p in places.values())
            if is_requeue(r)}


def requeued_jobs(translator: Translator, requeues: Mapping[str, DecisionRecord]) -> Iterable[RequeuedJob]:
    """The jobs of ``requeues`` in the translator's partitions, in Slurm's job order."""
    for job in translator.state.jobs:
        if job.id in requeues and translator.partitions_of(job):
            yield RequeuedJob(job.id, job.user, job.state, requeues[job.id])


def managed_budget(state: SlurmState, setting: int | str, partitions: tuple[str, ...]) -> int | None:
    """The daemon's migrations per hour on ``state``: ``setting`` resolved on the GPU nodes of ``partitions``."""
    return per_hour(setting, len(Translator(state, partitions).nodes))


def adopt(translator: Translator, policy: str) -> Policy:
    """A policy holding every running GPU allocation on the translator's nodes.

    GPUs Slurm reports in use (GresUsed) that no visible job explains, e.g. under
    PrivateData=jobs, are adopted as pinned placeholders so the counts match Slurm's.
    """
    engine = make_policy(policy, typed_nodes(translator))
    running = [r.engine() for r in translator.observe().running.values()]
    explained: Counter[str] = Counter()
    for job, nodes in running:
        for name in nodes:
            explained[name] += job.gpus
    for node in translator.slurm_nodes.values():
        unexplained = min(node.gpus_used, node.gpus) - explained[node.name]
        if unexplained > 0:
            running.append((Job(f"?{node.name}", 1, unexplained, migratable=False), (node.name,)))
    for job, nodes in adoption_order(running):
        engine.adopt(job, nodes)
    return engine


def typed_nodes(translator: Translator) -> list[Node]:
    """The translator's engine nodes, each with its GPU type (from Slurm's node record where it has none)."""
    slurm = translator.slurm_nodes
    return [n if n.gpu_type is not None else replace(n, gpu_type=slurm[n.name].gpu_type) for n in translator.nodes]


# -- cells and summaries -----------------------------------------------------------------------


def _cell(node: SlurmNode, view: NodeView, violation: str) -> NodeCell:
    used = view.used
    if not view.available:
        kind = "unavailable"
    elif used == 0:
        kind = "empty"
    elif used >= node.gpus:
        kind = "full"
    elif violation or view.role not in ("pool", "slotted"):
        kind = "partial"
    else:
        kind = view.role
    notes = [violation] if violation else []
    if not node.available:
        notes.insert(0, "+".join([node.state, *sorted(node.flags)]) + (f": {node.reason}" if node.reason else ""))
    elif not view.available:
        notes.insert(0, "in a reservation")
    return NodeCell(node.name, node.gpus, used, kind, view.role, node.state, node.partitions,
                    any(p.pinned for p in view.instances), "; ".join(notes))


def _summaries(state: SlurmState, cells: Sequence[NodeCell], partition: str | None) -> tuple[PartitionSummary, ...]:
    out = []
    for p in state.partitions:
        if partition is not None and p.name != partition:
            continue
        mine = [c for c in cells if p.name in c.partitions]
        if mine:
            out.append(PartitionSummary(p.name, len(mine), sum(c.gpus for c in mine),
                                        sum(c.gpus_used for c in mine), dict(Counter(c.kind for c in mine))))
    return tuple(out)


# -- why pending jobs wait ------------------------------------------------------------------------


def blocked_jobs(translator: Translator, requeues: Mapping[str, DecisionRecord] | None = None) -> Iterable[PendingJob]:
    """Every pending GPU job of the translator's partitions, in Slurm's order, with what its request lacks, and
    where the daemon migrates it (``requeues``, see :func:`logged_requeues`)."""
    requeues = requeues or {}
    nodes = translator.slurm_nodes
    for job in priority_order(translator.state.jobs):
        if not job.pending or job.gpus_requested <= 0 or not translator.partitions_of(job):
            continue
        found = translator.requested_of(job)
        req = found if isinstance(found, Request) else None
        shape = f"{req.instances}x{req.gpus}" if req else f"{job.gpus_requested} GPUs on {job.num_nodes} node(s)"
        tasks = len(array_tasks(job))
        if tasks > 1:  # an array's record of the tasks Slurm has not split off: each task is one such job
            shape = f"{tasks} tasks of {shape}"
        if job.reservation:
            blocked: str | None = f"runs in reservation {job.reservation}: Slurm places it"
        elif req is None:
            blocked = f"{found or 'no GPU node of its partition'}: Slurm places it"
        else:
            eligible = translator.eligible(job, req)
            usable = [nodes[n] for n in (translator.available if eligible is None else eligible)]
            blocked = _what_blocks(req, sorted(usable, key=lambda n: n.name), job.partition)
        moving = requeues.get(job.id)
        yield PendingJob(job.id, job.user, job.partition, shape, job.gpus_requested, job.held, job.reason, blocked,
                         None if moving is None else moving.nodes)


def _what_blocks(req: Request, usable: Sequence[SlurmNode], partition: str) -> str | None:
    """None when the GPUs are free for the request now, else what it needs against what there is."""
    w, g = req.instances, req.gpus
    if not usable:
        return f"no usable node in {partition} (down, drained, reserved, excluded or short of CPUs/memory)"
    if all(g == n.gpus for n in usable):
        have = sum(1 for n in usable if n.gpus_used == 0)
        return None if have >= w else f"needs {_count(w, 'empty node')}, {have} free"
    if req.distinct_nodes or w == 1:
        have = sum(1 for n in usable if n.gpus_free >= g)
        return None if have >= w else f"needs {_count(w, 'node')} with {g} free GPUs, {have} {_has(have)}"
    room = sum(n.gpus_free // g for n in usable)
    return None if room >= w else f"needs room for {w} instances of {g} GPUs, {room} fit"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _has(n: int) -> str:
    return "has" if n == 1 else "have"

