"""The one interface every placement policy implements, and the registry that names them.

A policy owns a ClusterState and answers four events: place a job, remove a job,
compact, and adopt an allocation it did not make. It does no I/O and reads no
clock, so the replay, the simulator and the daemon drive the same objects.

The contract (checked for every registered policy by tests/engine/test_purity.py):

- Events change the state: ``place(job, eligible, budget)``, ``remove(job_id)``,
  ``compact(budget)``, ``adopt(job, nodes)``, ``set_available(node, flag)``.
- Queries never do: ``view()``, ``anchor(g)``, ``candidates(job)``, ``role(i)``,
  ``abs_violations()``, ``orphans()``, ``check()`` and a GreedyPolicy's ``choose``
  leave the state (and so every later decision) exactly as they found it.
- The migration budget is an argument, never an attribute: ``compact(budget)`` and
  ``blocked(job, eligible, budget)`` return a :class:`Compaction` (the netted moves and
  the budget spent), and ``place(job, eligible, budget)`` spends one unit per migration
  in ``Decision.migrations`` (fillers pulled into a new slot). ``None`` is unlimited.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import ClassVar, NamedTuple

from ..cluster import ClusterState
from ..model import Decision, EngineError, InstanceKey, Job, Migration, Node, NodeView, Placed

_REGISTRY: dict[str, type["Policy"]] = {}
#: eligible sets whose node indexes a policy keeps (a site has a few: one per partition, features, CPU/memory class)
ALLOWED_KEPT = 64


class Compaction(NamedTuple):
    """What one ``compact(budget)`` did: the moves to carry out, and the budget they cost.

    ``moves`` are netted (one per instance, round trips dropped); ``spent`` counts every
    move planned on the way, netted or not, which is what the budget capped.
    """

    moves: tuple[Migration, ...] = ()
    spent: int = 0


def register(cls: type["Policy"]) -> type["Policy"]:
    """Class decorator: make a policy available by its ``name``."""
    if not cls.name or cls.name in _REGISTRY:
        raise RuntimeError(f"policy name {cls.name!r} is empty or taken")
    _REGISTRY[cls.name] = cls
    return cls


def policy_names() -> list[str]:
    _load_builtin()
    return list(_REGISTRY)


def policy_class(name: str) -> type["Policy"]:
    _load_builtin()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise EngineError(f"unknown policy {name!r}; choose from: {', '.join(_REGISTRY)}") from None


def make_policy(name: str, nodes: Sequence[Node], **config: object) -> "Policy":
    return policy_class(name)(nodes, **config)


def _load_builtin() -> None:
    # The policy modules register themselves on import.
    from . import baselines, buddy, compass, fgd, slurm_like  # noqa: F401


class Policy(ABC):
    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""

    def __init__(self, nodes: Sequence[Node], **config: object) -> None:
        if config:
            raise EngineError(f"policy {self.name}: unknown option(s) {', '.join(sorted(config))}")
        self.cluster = ClusterState(nodes)
        #: id -> (an eligible frozenset asked about, its indexes): see _allowed
        self._allowed_sets: dict[int, tuple[frozenset[str], frozenset[int]]] = {}

    # -- events ----------------------------------------------------------------------------

    def place(self, job: Job, eligible: Collection[str] | None = None, budget: int | None = None) -> Decision | None:
        """Place every instance of ``job`` or none; None leaves the state untouched.

        ``budget`` caps the running instances the placement may move (``Decision.migrations``).
        """
        c = self.cluster
        if job.id in c.jobs:
            raise EngineError(f"job {job.id} is already running")
        if job.gpus > c.max_gpus:
            raise EngineError(f"job {job.id}: {job.gpus} GPUs per instance exceed the largest node ({c.max_gpus})")
        return self._place(job, self._allowed(eligible), budget)

    def remove(self, job_id: str) -> tuple[Migration, ...]:
        """The job ended: free its GPUs. Returns the migrations the policy made in response."""
        if job_id not in self.cluster.jobs:
            raise EngineError(f"job {job_id} is not running")
        return self._remove(job_id)

    def compact(self, budget: int | None = None) -> Compaction:
        """Called after every arrival and departure; at most ``budget`` moves (None: no limit).

        Baselines never migrate.
        """
        return Compaction()

    def blocked(self, job: Job | None, eligible: Collection[str] | None = None,
                budget: int | None = None, worth: float = math.inf) -> Compaction:
        """The scheduler's word after each drain: ``job`` heads the queue and does not fit (None: nothing waits).

        A policy may migrate, within ``budget``, to make room for it (on-demand
        defragmentation) and return the moves; the scheduler then tries the job again.
        ``worth``: the most moves that letting ``job`` start now is worth (its expected wait
        over what restarts cost). Baselines never migrate.
        """
        return Compaction()

    def adopt(self, job: Job, nodes: Sequence[str], eligible: Collection[str] | None = None) -> None:
        """Record an allocation made elsewhere (``nodes[i]`` hosts instance i); ``eligible``: the nodes the job may
        run on (None: any), to which a policy that moves jobs keeps it."""
        if len(nodes) != job.instances:
            raise EngineError(f"job {job.id}: {job.instances} instances but {len(nodes)} nodes given")
        c = self.cluster
        idx = self._indexes(nodes)
        c.register(job)
        for k, i in enumerate(idx):
            c.add((job.id, k), i, allow_overcommit=True)
        self._adopted(job, idx, self._allowed(eligible))

    def confine(self, job_id: str, eligible: Collection[str] | None) -> None:
        """A running job may now move only to ``eligible`` (None: any node): the nodes it asked for changed since it
        was placed or adopted (an admin changed node features or partitions). Nothing for a job it does not hold."""
        if job_id in self.cluster.jobs:
            self._reconfined(job_id, self._allowed(eligible))

    def set_available(self, node: str, available: bool) -> None:
        i = self._indexes([node])[0]
        self.cluster.set_available(i, available)
        self._availability_changed(i)

    # -- views -----------------------------------------------------------------------------

    def role(self, i: int) -> str:
        return "empty" if self.cluster.used[i] == 0 else "used"

    def view(self) -> tuple[NodeView, ...]:
        c = self.cluster
        out = []
        for i, node in enumerate(c.nodes):
            placed = tuple(
                Placed(key[0], key[1], gpus, c.is_pinned(key)) for key, gpus in sorted(c.on_node[i].items())
            )
            out.append(NodeView(node.name, c.capacity[i], c.available[i], self.role(i), placed))
        return tuple(out)

    def anchor(self, gpus: int) -> str | None:
        """Where the next single instance of ``gpus`` GPUs would go now (published for submit hooks)."""
        i = self._next(gpus)
        return None if i is None else self.cluster.nodes[i].name

    @abstractmethod
    def _next(self, gpus: int) -> int | None: ...

    def candidates(self, job: Job, eligible: Collection[str] | None = None) -> tuple[str, ...]:
        """The nodes the policy would choose among for ``job`` now, labelled (for ``compass explain``).

        Asked by drivers that log decisions, not on every placement: it costs lookups.
        """
        return ()

    def abs_violations(self) -> dict[str, str]:
        """Nodes whose contents break the policy's own invariants, with why (ABS policies only)."""
        return {}

    def orphans(self) -> int:
        """1-GPU instances left on slotted nodes without a slot (ABS policies only)."""
        return 0

    def check(self) -> None:
        """Assert the policy's own structure agrees with the raw accounting (debug mode, tests)."""

    # -- what subclasses implement ---------------------------------------------------------

    @abstractmethod
    def _place(self, job: Job, allowed: frozenset[int] | None, budget: int | None) -> Decision | None: ...

    def _remove(self, job_id: str) -> tuple[Migration, ...]:
        c = self.cluster
        for key, _ in c.instances_of(job_id):
            c.remove(key)
        c.unregister(job_id)
        return ()

    def _adopted(self, job: Job, nodes: list[int], allowed: frozenset[int] | None) -> None:
        """Hook for policies with structure beyond raw counts (``allowed``: the indexes of the job's eligible
        nodes, None: any)."""

    def _reconfined(self, job_id: str, allowed: frozenset[int] | None) -> None:
        """Hook for policies that move jobs (``allowed``: as for ``_adopted``)."""

    def _availability_changed(self, i: int) -> None:
        """Hook for policies that index nodes themselves."""

    # -- helpers ---------------------------------------------------------------------------

    def _allowed(self, eligible: Collection[str] | None) -> frozenset[int] | None:
        """The indexes of ``eligible`` (None: every node). Kept for the last ALLOWED_KEPT frozensets asked about:
        the daemon hands the same object for every job with the same eligible nodes, thousands of names each (the
        parsers' identity contract, slurm/translation_cache.py, tested in tests/slurm/test_job_identity.py), and
        adopts running jobs of a few such sets in turn; another object with the same names only costs the indexes
        again."""
        if eligible is None:
            return None
        kept = self._allowed_sets.get(id(eligible))
        if kept is not None and kept[0] is eligible:
            return kept[1]
        allowed = frozenset(self._indexes(eligible))
        if isinstance(eligible, frozenset):  # immutable: the indexes stay right for as long as it lives
            if len(self._allowed_sets) >= ALLOWED_KEPT:
                self._allowed_sets.clear()
            self._allowed_sets[id(eligible)] = (eligible, allowed)  # (kept alive with it: its id stays its own)
        return allowed

    def _indexes(self, names: Iterable[str]) -> list[int]:
        index = self.cluster.index
        try:
            return [index[n] for n in names]
        except KeyError as err:
            raise EngineError(f"unknown node {err.args[0]!r}") from None

    def _names(self, idx: Iterable[int]) -> tuple[str, ...]:
        nodes = self.cluster.nodes
        return tuple(nodes[i].name for i in idx)


class GreedyPolicy(Policy):
    """A policy that picks one node per instance, in order, and undoes a partial gang.

    Subclasses only say how to pick: ``choose`` gets the instance size, the nodes
    already holding this job (excluded when the job wants distinct nodes) and the
    allowed set, and returns a node index or None. ``choose`` is a query (``anchor``
    asks it too); whatever a policy keeps beyond raw counts it updates in ``_claim``
    and ``_unclaim``.
    """

    @abstractmethod
    def choose(self, gpus: int, taken: set[int], allowed: frozenset[int] | None, distinct: bool) -> int | None: ...

    def _place(self, job: Job, allowed: frozenset[int] | None, budget: int | None) -> Decision | None:
        c = self.cluster
        c.register(job)
        chosen: list[int] = []
        for k in range(job.instances):
            i = self.choose(job.gpus, set(chosen), allowed, job.distinct_nodes)
            if i is None:
                for kk in reversed(range(k)):
                    self._unclaim((job.id, kk))
                c.unregister(job.id)
                return None
            self._claim((job.id, k), i)
            chosen.append(i)
        return Decision(job.id, self._names(chosen), job.gpus, self.name)

    def _next(self, gpus: int) -> int | None:
        return self.choose(gpus, set(), None, False)

    def _claim(self, key: InstanceKey, i: int) -> None:
        """Put instance ``key`` on node ``i`` (policies with own structure extend this)."""
        self.cluster.add(key, i)

    def _unclaim(self, key: InstanceKey) -> None:
        """Undo ``_claim`` for a gang that did not fit."""
        self.cluster.remove(key)

    # Shared candidate search: the buckets give the fast path, a scan handles restrictions.

    def fitting(self, gpus: int, taken: set[int], allowed: frozenset[int] | None, distinct: bool) -> Iterable[int]:
        """Every available node with ``gpus`` free that the job may use (scan order: index)."""
        c = self.cluster
        pool = range(len(c)) if allowed is None else sorted(allowed)
        for i in pool:
            if c.available[i] and c.free_gpus(i) >= gpus and not (distinct and i in taken):
                yield i

    def pick_by_free(
        self,
        gpus: int,
        taken: set[int],
        allowed: frozenset[int] | None,
        distinct: bool,
        key: Callable[[int], object],
    ) -> int | None:
        """Among fitting nodes, the one minimising ``key``; ties to the lowest index."""
        best = None
        best_key = None
        for i in self.fitting(gpus, taken, allowed, distinct):
            k = key(i)
            if best_key is None or k < best_key:
                best, best_key = i, k
        return best
