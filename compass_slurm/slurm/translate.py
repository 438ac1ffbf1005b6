"""Slurm's view in the engine's terms: nodes, jobs as w x g instances, observed allocations, eligible nodes.

Request mapping (spec section 1). G is the largest GPU node of the job's
partitions, k the job's GPUs in all, w Slurm's node count for it:

- ``--gpus-per-node=g`` on w nodes: w instances of g, on distinct nodes when w > 1 and g < G;
- k in all (``--gpus``, or ``--gpus-per-task`` times tasks): the engine's one rule for GPU
  counts (``engine/shape.py``, which the simulator uses too): w instances of k/w when w > 1
  divides k and k/w fits a node, else one instance of k <= G, else k/G whole nodes, else the
  largest divisor d <= G of k as k/d instances on distinct nodes (12 GPUs: 2 x 6, told to
  Slurm as ``NumNodes=2 TresPerNode=gres:gpu:6``).
- ``--exclusive``: each instance owns a whole node (Slurm gives it every GPU there), so the
  job is that many instances of G, on nodes where nothing else runs.

Arrays: the record of the tasks Slurm has not split off yet (``A_[0-5]``) stands for one
pending job per task (``A_0`` ... ``A_5``); placing a task splits it off in Slurm. An
array throttle (``%N``) lets the first N tasks minus the running ones be placed; the
others stay leased, waiting their turn. So does a job whose dependency is not met yet:
Slurm would start it the moment it is, wherever Slurm likes, were its lease run out.

A managed job whose start time (``--begin`` plus the lease, as the wrapper submits it)
is still more than the lease away, counted from the later of the read and the job's
submission, waits for its begin time: it is neither placed nor leased before then. A
plain lease (begin = submission) never waits, even for a job submitted while the read
ran; a user's begin is kept to BEGIN_SLACK (Slurm's times are whole seconds).

A node takes new work only when Slurm would start a job there: not down, drained,
draining, failing, in maintenance or in a reservation. Jobs that asked for a
reservation are Slurm's to place (they may use reserved nodes; the engine may not).
A job's eligible nodes are the available GPU nodes of its partitions with the
CPUs, memory (``--mem``, ``--mem-per-cpu`` or ``--mem-per-gpu`` times the instance's
GPUs) and GPU type one instance needs, minus its excluded nodes (and within its
required nodes, when it names some); an exclusive job's are the nodes nothing runs on.
A pending job pinned to exactly its nodes (the daemon's decision, not started yet) will
take its CPUs and memory there: other jobs see those as taken already; so does a job
decided earlier in the same cycle (``decide``, ``narrowed``: the daemon tells the
Scheduler, whose engine counts GPUs only, before it places the next job).
"""

from __future__ import annotations

import bisect
import functools
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from itertools import compress
from operator import attrgetter

from ..engine.model import Job, Node
from ..engine.shape import instance_shape
from .constraint import ANY, Constraint, parse_constraint
from .errors import SlurmParseError
from .hostlist import expand_ranges
from .nodesets import NodeSets, Unhonoured, fits
from .state import SlurmJob, SlurmNode, SlurmState

#: pending reasons under which Slurm would start the job as soon as it is pointed at free nodes
STARTABLE_REASONS = frozenset({"", "None", "BeginTime", "Resources", "Priority", "ReqNodeNotAvail"})
#: the pending reason of array tasks beyond the array's throttle
THROTTLED = "JobArrayTaskLimit"
#: what 23.11's main scheduler says, without accounting storage, of every job it looks at (its association check
#: fails); its backfill starts the job all the same, a pinned one on its nodes, so a pin keeps the job's place
INVALID_ACCOUNT = "InvalidAccount"
#: the pending reason of a job whose dependency is not met yet (DependencyNeverSatisfied: never will be)
DEPENDENCY = "Dependency"
#: seconds a job's begin time may lie past the read (or its submission) and still count as come:
#: Slurm's times are whole seconds
BEGIN_SLACK = 1.0

#: job states in which a job holds its GPUs (squeue also lists jobs that ended, for MinJobAge)
HOLDING_STATES = frozenset({"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "STOPPED", "SIGNALING",
                            "STAGE_OUT", "RESIZING"})

#: a set of node names, or None for "every node the engine knows" (the policies' fast path)
Eligible = frozenset[str] | None


@dataclass(frozen=True, slots=True)
class Request:
    """What a job asks for in engine terms."""

    instances: int
    gpus: int
    distinct_nodes: bool


def request(job: SlurmJob, capacity: int) -> Request | None:
    """The job's w x g request on nodes of ``capacity`` GPUs; None when it is not a GPU job or not expressible."""
    req = _shared_request(job, capacity)
    if req is not None and job.exclusive:
        return Request(req.instances, capacity, False)  # whole nodes, one per instance
    return req


def _shared_request(job: SlurmJob, capacity: int) -> Request | None:
    if job.gpus_per_node and not job.gpus_per_job:
        w, g = job.num_nodes, job.gpus_per_node
        return Request(w, g, w > 1 and g < capacity) if g <= capacity else None
    if job.gpus_requested <= 0 or capacity <= 0:
        return None
    shape = instance_shape(job.gpus_requested, capacity, job.num_nodes)
    return Request(shape.instances, shape.gpus, shape.distinct_nodes)


def engine_job(job: SlurmJob, req: Request, migratable: str = "marker") -> Job:
    """The job for the engine; ``migratable`` is the config's mode (see SlurmJob.may_migrate)."""
    return Job(job.id, req.instances, req.gpus, migratable=job.may_migrate(migratable),
               distinct_nodes=req.distinct_nodes, user=job.user or None)


def observed(job: SlurmJob, alloc: Mapping[str, int], capacity: int,
             migratable: str = "marker") -> tuple[Job, tuple[str, ...]]:
    """A running allocation as instances: the requested size when the per-node counts fit it, else their gcd."""
    req = request(job, capacity)
    counts = list(alloc.values())
    if req is not None and all(n % req.gpus == 0 for n in counts):
        gpus = req.gpus
    else:
        gpus = math.gcd(*counts)
    nodes = tuple(name for name, n in alloc.items() for _ in range(n // gpus))
    distinct = req is not None and req.distinct_nodes and gpus == req.gpus and len(nodes) == len(alloc)
    return Job(job.id, len(nodes), gpus, migratable=job.may_migrate(migratable), distinct_nodes=distinct,
               user=job.user or None), nodes


def node_available(node: SlurmNode, reserved: frozenset[str]) -> bool:
    return node.available and not node.reserved and node.name not in reserved


def adoption_order(allocations: Iterable[tuple[Job, tuple[str, ...]]]) -> list[tuple[Job, tuple[str, ...]]]:
    """The order running allocations are adopted in: larger instances first, then by job id.

    Anchors get their slots before 1-GPU instances fill the nodes (which would make them
    outside ABS); the daemon's sync and ``compass status`` adopt in this one order.
    """
    return sorted(allocations, key=lambda jn: (-jn[0].gpus, id_order(jn[0].id)))


def priority_order(jobs: Iterable[SlurmJob]) -> list[SlurmJob]:
    """Slurm's order: highest priority first, then oldest submission, then lowest id."""
    return sorted(jobs, key=priority_key)


def priority_key(job: SlurmJob) -> tuple[int, int, tuple[int, int, str]]:
    return -job.priority, job.submit_time, id_order(job.id)


def id_order(job_id: str) -> tuple[int, int, str]:
    """Job ids in number order; the tasks of one array in task order."""
    head, _, task = job_id.partition("_")
    return (int(head) if head.isdigit() else 0, int(task) if task.isdigit() else -1, job_id)


def array_tasks(job: SlurmJob) -> list[SlurmJob]:
    """A pending array record that still holds several tasks, as one job per task (any other job as itself)."""
    if not job.array_pending:
        return [job]
    try:
        tasks = expand_ranges(job.array_pending)
    except SlurmParseError:
        return [job]  # not a task list we can read: the record stays one job, left to Slurm
    return [replace(job, id=f"{job.array_job}_{task}", array_pending="") for task in tasks]


@dataclass(frozen=True, slots=True)
class Running:
    """The GPUs a job holds on the engine's nodes; ``engine()`` makes instances of them (on demand: it costs)."""

    slurm: SlurmJob
    alloc: Mapping[str, int]
    capacity: int
    migratable: str = "marker"

    def engine(self) -> tuple[Job, tuple[str, ...]]:
        return observed(self.slurm, self.alloc, self.capacity, self.migratable)


@dataclass(frozen=True, slots=True)
class Pending:
    """A managed pending GPU job the daemon may place."""

    slurm: SlurmJob
    job: Job
    eligible: Eligible


@dataclass
class Observation:
    """One SlurmState, translated. ``skipped`` says why managed jobs are left to Slurm."""

    nodes: tuple[Node, ...]
    running: dict[str, Running] = field(default_factory=dict)
    pending: list[Pending] = field(default_factory=list)
    queue_len: int = 0
    pending_gpus: int = 0
    skipped: dict[str, str] = field(default_factory=dict)
    #: managed jobs that wait their turn (array throttle, a dependency not met yet): not placed now, but kept leased
    waiting: dict[str, str] = field(default_factory=dict)
    #: every running GPU job and managed pending one by id, for GPU types and owners
    slurm_jobs: dict[str, SlurmJob] = field(default_factory=dict)
    #: the managed pending jobs by the ids squeue prints (an array's tasks not split off yet as one): the look's
    pending_managed: frozenset[str] = frozenset()
    #: when each running job will have ended by its time limit (None: unlimited); not there: no start time known
    ends: dict[str, float | None] = field(default_factory=dict)
    #: nodes where Slurm counts more GPUs in use than the jobs read hold (see Translator.crowded)
    crowded: frozenset[str] = frozenset()
    #: the skipped jobs left to Slurm for good, by what they ask (a form the daemon cannot honour exactly):
    #: their lease is lifted at once, so that they start as they would with no daemon
    left: dict[str, str] = field(default_factory=dict)

    @functools.cached_property
    def pending_ids(self) -> list[str]:
        """The ids of ``pending``, in its order (made once: sync, decide and the leases ask)."""
        return list(map(_JOB_ID, self.pending))


_JOB_ID = attrgetter("job.id")


_RUNNING, _PENDING, _OTHER = "running", "pending", "other"
_UNSEEN = object()
_NO_CLAIM: tuple[frozenset[str], int, int] = (frozenset(), 0, 0)


@dataclass(slots=True, eq=False)
class _Task:
    """A managed pending job's translation as far as the job alone decides it, and what it came to last."""

    slurm: SlurmJob
    order: tuple  # its place in Slurm's priority order
    held_back: str | None  # held, or in a reservation
    #: when it asked to begin, less the lease, if that is past its submission (None: it waits for no begin time,
    #: or only until the read is as late as its submission, which the read never precedes by much)
    begin: float | None
    not_startable: str | None  # Slurm would not start it
    #: why the daemon leaves it to Slurm for good: a form it cannot honour exactly, or no node that could ever
    #: hold it (None: it is the daemon's to place)
    left: str | None
    req: Request | None  # None: not w x g instances
    #: what it comes to may change while the job does not, with the other jobs: an array task under a throttle, a pin
    volatile: bool = False
    #: its constraint; the node sets one of which must hold all its nodes (None: any nodes); its preference
    constraint: Constraint = ANY
    sets: tuple[frozenset[str], ...] | None = None
    prefer: Constraint | None = None
    # made when first placed: the engine job and the CPUs and MB one instance needs
    job: Job | None = None
    needs: tuple[int, int] = (0, 0)
    key: object = None  # what its eligible nodes depend on, of the job alone (see Translator._eligible_key)
    pending: Pending | None = None  # the last Pending made of it (kept while its eligible nodes are the same)
    #: the Pending it came to in the latest translation (None: waiting or left to Slurm), and its eligible key
    placed: Pending | None = None
    placed_key: object = None


_ORDER, _PLACED = attrgetter("order"), attrgetter("placed")


def _spliced(order: list[_Task], removed: list[_Task], added: list[_Task]) -> list[_Task]:
    """``order`` (sorted, every key once) less ``removed``, with ``added``: each found by bisection, the rest
    copied in slices (a pass over 60,000 tasks' keys costs more than the copy)."""
    kept: list[_Task] = []
    start = 0
    for at in sorted(bisect.bisect_left(order, facts.order, key=_ORDER) for facts in removed):
        kept += order[start:at]
        start = at + 1
    kept += order[start:]
    out: list[_Task] = []
    start = 0
    for facts in sorted(added, key=_ORDER):
        at = bisect.bisect_left(kept, facts.order, start, key=_ORDER)
        out += kept[start:at]
        out.append(facts)
        start = at
    out += kept[start:]
    return out


class Translations:
    """The latest translation, kept between the daemon's cycles and brought up to date by what changed.

    The parsers hand back the same SlurmJob object for a job whose fields did not change, so
    a state's jobs are the last ones (by identity) less those gone, plus those new. Only the
    new ones are classified and made tasks (a task that only its priority sets apart from one
    gone keeps that one's translation: ``_repriced``); the running jobs, the counts, the managed pending
    tasks in priority order follow the difference. What a task comes to (placed, waiting, left
    to Slurm) is worked out again for the new tasks, the volatile ones, those whose begin time
    the read's time passed (either way: ``came``), and for all of them when the eligible nodes
    of a key in use changed (``Translator.observe``). Valid for one set
    of managed partitions, nodes and GPU counts, lease and migratable mode: a change starts
    afresh; so does a state that lists a job id twice (kept jobs are found again by identity).
    """

    def __init__(self) -> None:
        self._context: object = None
        #: a small int per distinct eligible-nodes key: hashed per job and cycle, where the key's tuple would be
        self._tokens: dict[tuple, int] = {}
        self._reset()

    def _reset(self) -> None:
        #: the latest state's jobs by identity, with what each is (see Translator._classify)
        self._jobs: dict[int, tuple[SlurmJob, tuple[object, object]]] = {}
        self._present: set[int] = set()  # their identities
        self._ids: Counter[str] = Counter()  # the ids of its jobs and of their array tasks
        self.twice = False  # the latest state lists a job id twice (or a job, or an array task)
        self.running: dict[str, Running] = {}
        #: per node, the GPUs the running jobs read hold there (see Translator.crowded)
        self.gpus_seen: Counter[str] = Counter()
        self.ends: dict[str, float | None] = {}
        self.running_tasks: Counter[str] = Counter()
        self.slurm_jobs: dict[str, SlurmJob] = {}
        self.queue_len = self.pending_gpus = 0
        self.pending_managed: set[str] = set()
        self._tasks: dict[int, _Task] = {}  # by the identity of its SlurmJob
        #: while an update adds jobs: the tasks of the jobs gone from the last state, by id (see _repriced)
        self._gone: dict[str, _Task] = {}
        self.order: list[_Task] = []  # Slurm's priority order
        self.volatile: dict[int, _Task] = {}
        #: the tasks with a begin time, and (begin, identity) of each in begin order (with some gone: see came)
        self._timed: dict[int, _Task] = {}
        self._begins: list[tuple[float, int]] = []
        self._after: float | None = None  # the last ``came``'s time
        self.skipped: dict[str, str] = {}
        self.left: dict[str, str] = {}  # the skipped left to Slurm for good
        self.waiting: dict[str, str] = {}
        #: per eligible-nodes key in use: the nodes, how many placed tasks use them, and one of those
        self.eligible: dict[object, Eligible] = {}
        self._users: Counter[object] = Counter()
        self.user: dict[object, _Task] = {}

    def begin(self, context: object) -> None:
        """A new state, translated in ``context``: what was kept for another one is forgotten."""
        if context != self._context:
            self._context, self._tokens = context, {}
            self._reset()

    def update(self, jobs: tuple[SlurmJob, ...], classify: Callable[[SlurmJob], tuple[object, object]],
               make: Callable[[SlurmJob], _Task]) -> tuple[bool, list[_Task]]:
        """Brings the kept translation to ``jobs``: whether all its tasks are new (their outcomes to be worked
        out), and the tasks new in it."""
        idents = list(map(id, jobs))
        present = set(idents)
        if not self.twice and len(present) == len(idents):
            # (Set operations and compress: a job that did not change costs a few steps in C.)
            new, gone = present - self._present, self._present - present
            added = list(compress(jobs, map(new.__contains__, idents))) if len(new) < len(jobs) else list(jobs)
            self._present = present
            removed = [facts for ident in gone for facts in self._drop(*self._jobs.pop(ident))]
            self._gone = {facts.slurm.id: facts for facts in removed}
            fresh = [task for job in added for task in self._add(job, classify(job), make)]
            self._gone = {}
            ids = self._ids
            if not any(ids[job.id] > 1 for job in added) and not any(ids[t.slurm.id] > 1 for t in fresh):
                afresh = len(added) == len(jobs)
                self.order = sorted(fresh, key=_ORDER) if afresh else _spliced(self.order, removed, fresh)
                return afresh, fresh
        # A job id twice: all jobs again in the state's order (what each job alone is, kept), tasks sorted as given.
        known_jobs, known_tasks = self._jobs, self._tasks
        self._reset()
        for facts in known_tasks.values():
            facts.placed = facts.placed_key = None
        order = []
        for job in jobs:
            found = known_jobs.get(id(job))
            order += self._add(job, classify(job) if found is None else found[1],
                               lambda task: known_tasks.get(id(task)) or make(task))
        self.twice = any(n > 1 for n in self._ids.values()) or len(present) != len(idents)
        self._present = present
        order.sort(key=_ORDER)
        self.order = order
        return True, order

    def _add(self, job: SlurmJob, what: tuple[object, object], make: Callable[[SlurmJob], _Task]) -> list[_Task]:
        """Counts ``job`` in; returns its tasks, if it is managed and pending."""
        self._jobs[id(job)] = (job, what)
        self._ids[job.id] += 1
        if job.pending and job.managed:
            self.pending_managed.add(job.id)
        kind, value = what
        if kind is _RUNNING:
            if job.array_job:
                self.running_tasks[job.array_job] += 1
            if value is not None:
                self.running[job.id] = value
                self.slurm_jobs[job.id] = job
                self.gpus_seen.update(value.alloc)
                if job.time_limit_s is None or job.start_time:
                    self.ends[job.id] = None if job.time_limit_s is None else job.start_time + job.time_limit_s
        elif kind is _PENDING:
            tasks, gpus, managed = value
            self.queue_len += len(tasks)
            self.pending_gpus += gpus
            if managed:
                out = [self._tasks.get(id(task)) or self._repriced(task) or make(task) for task in tasks]
                for task in out:
                    if task.slurm is not job:  # an array's task: its id is a key too
                        self._ids[task.slurm.id] += 1
                    self._tasks[id(task.slurm)] = task
                    if task.volatile:
                        self.volatile[id(task.slurm)] = task
                    if task.begin is not None:
                        self._timed[id(task.slurm)] = task
                        self._begins.append((task.begin, id(task.slurm)))
                return out
        return []

    def _repriced(self, task: SlurmJob) -> _Task | None:
        """The translation of a task gone from the last state that ``task`` is at a new priority alone (slurmctld
        recalculates every pending job's priority every PriorityCalcPeriod), moved to ``task``: its engine job
        stays the same object, so the Scheduler keeps its entry. None for any other task."""
        old = self._gone.get(task.id)
        if old is None or not old.slurm.same_but_priority(task):
            return None
        return _Task(task, priority_key(task), old.held_back, old.begin, old.not_startable, old.left, old.req,
                     old.volatile, old.constraint, old.sets, old.prefer, job=old.job, needs=old.needs, key=old.key)

    def _drop(self, job: SlurmJob, what: tuple[object, object]) -> list[_Task]:
        """Counts ``job`` out (a job id is held by one job at most: see update); returns its tasks."""
        self._uncount(job.id)
        self.pending_managed.discard(job.id)
        kind, value = what
        if kind is _RUNNING:
            if job.array_job:
                self.running_tasks[job.array_job] -= 1
            if value is not None:
                del self.running[job.id], self.slurm_jobs[job.id]
                self.gpus_seen.subtract(value.alloc)
                self.ends.pop(job.id, None)
        elif kind is _PENDING:
            tasks, gpus, managed = value
            self.queue_len -= len(tasks)
            self.pending_gpus -= gpus
            if managed:
                out = []
                for task in tasks:
                    if task is not job:
                        self._uncount(task.id)
                    facts = self._tasks.pop(id(task))
                    self.volatile.pop(id(task), None)
                    self._timed.pop(id(task), None)
                    self.unsettle(facts)
                    self.slurm_jobs.pop(task.id, None)
                    out.append(facts)
                return out
        return []

    def came(self, after: float) -> list[_Task]:
        """The tasks whose begin time came, or no longer has, since the last call: those between its ``after``
        and this one (a task waits while its begin is past ``after``)."""
        timed, begins = self._timed, self._begins
        if len(begins) > 2 * len(timed):
            begins[:] = [entry for entry in begins if entry[1] in timed]
        begins.sort()  # the new ones behind the sorted rest: about one pass
        last, self._after = self._after, after
        if last is None or last == after:
            return []
        low, high = sorted((last, after))
        flipped = begins[bisect.bisect_right(begins, (low, math.inf)):bisect.bisect_right(begins, (high, math.inf))]
        return [timed[ident] for _, ident in flipped if ident in timed]

    def _uncount(self, job_id: str) -> None:
        self._ids[job_id] -= 1
        if not self._ids[job_id]:
            del self._ids[job_id]

    def unsettle(self, facts: _Task) -> None:
        """Forget what ``facts`` came to."""
        job_id = facts.slurm.id
        self.skipped.pop(job_id, None)
        self.left.pop(job_id, None)
        self.waiting.pop(job_id, None)
        key, facts.placed, facts.placed_key = facts.placed_key, None, None
        if key is not None:
            self._users[key] -= 1
            if not self._users[key]:
                del self._users[key], self.eligible[key], self.user[key]

    def place(self, facts: _Task, key: object, eligible: Eligible) -> None:
        """``facts`` came to its Pending, on the nodes of ``key``."""
        facts.placed, facts.placed_key = facts.pending, key
        self._users[key] += 1
        self.eligible[key] = eligible
        self.user.setdefault(key, facts)

    def token(self, key: tuple) -> int:
        """``key``'s small int, the same for an equal key as long as the context stays."""
        return self._tokens.setdefault(key, len(self._tokens))

    def same_eligible(self, key: object, eligible: Eligible) -> Eligible:
        """The kept object for an equal set of eligible nodes of ``key`` (so Pendings can be kept), else
        ``eligible``."""
        kept = self.eligible.get(key, _UNSEEN)
        return kept if kept is not _UNSEEN and kept == eligible else eligible


class Translator:
    """Translates one SlurmState; ``partitions`` limits what the daemon manages (empty: all).

    ``lease``: the daemon's lease in seconds, which tells a job that waits for its own
    ``--begin`` (None: no job waits for one, as for ``compass status``); ``migratable`` is
    the config's mode (see SlurmJob.may_migrate).
    """

    def __init__(self, state: SlurmState, partitions: Iterable[str] = (), lease: float | None = None, *,
                 migratable: str = "marker", known: Translations | None = None) -> None:
        self.state = state
        self.lease = lease
        self.migratable = migratable
        wanted = set(partitions)
        self.partitions = {p.name: p.nodes for p in state.partitions if not wanted or p.name in wanted}
        in_scope = {n for nodes in self.partitions.values() for n in nodes}
        reserved = frozenset(n for r in state.reservations if r.active for n in r.nodes)
        self.slurm_nodes = {n.name: n for n in state.nodes if n.gpus > 0 and n.name in in_scope and engines(n)}
        self.nodes = tuple(Node(n.name, n.gpus, node_available(n, reserved), gpu_type=n.gpu_type)
                           for n in self.slurm_nodes.values())
        self.available = frozenset(n.name for n in self.nodes if n.available)
        self.nodesets = NodeSets.of(state, self.slurm_nodes)
        self._eligible: dict[object, Eligible] = {}
        self._capacities: dict[tuple[str, str | None, str], int] = {}
        self._managed_partitions: dict[str, list[str]] = {}
        #: per pinned pending job, its nodes and the (CPUs, MB) one instance takes; per node, the sum of them
        self._claims: dict[str, tuple[frozenset[str], int, int]] = {}
        self._claimed: dict[str, tuple[int, int]] = {}
        self._pinned_gpus: Counter[str] = Counter()  # per node, the GPUs of those pins
        self.crowded: frozenset[str] = frozenset()
        #: per (eligible nodes, short nodes, how many): what narrowed made of them, the same object while they last
        self._narrowed: dict[tuple[int, int, int], tuple[frozenset[str], frozenset[str]]] = {}
        #: per node, the (CPUs, MB) of the jobs decided this cycle (see decide); per instance need (CPUs, MB), the
        #: nodes they leave too short for it
        self._decided: dict[str, tuple[int, int]] = {}
        self._short: dict[tuple[int, int], set[str]] = {}
        self.known = known if known is not None else Translations()
        self.known.begin((tuple(self.partitions.items()),
                          tuple((n.name, n.gpus, n.gpu_type) for n in self.slurm_nodes.values()), migratable, lease,
                          self.nodesets))

    def observe(self) -> Observation:
        known = self.known
        afresh, fresh = known.update(self.state.jobs, self._classify, self._task)
        # the only ones a throttle or a pin concerns (each time it is listed, as Slurm would count it)
        volatile = [facts.slurm for facts in (known.order if known.twice else known.volatile.values())
                    if facts.volatile]
        throttled = _beyond_throttle(volatile, known.running_tasks)
        self._claim_pins((job for job in volatile if job.id not in throttled) if throttled else volatile)
        self.crowded = self._crowded()
        begin_after = self.state.read_at + BEGIN_SLACK
        came = known.came(begin_after)
        if afresh or self._eligible_changed():
            todo: Iterable[_Task] = known.order
        else:
            todo = {id(facts): facts for facts in (*fresh, *known.volatile.values(), *came)}.values()
        for facts in todo:
            self._settle(facts, throttled, begin_after)
        return Observation(self.nodes, dict(known.running), list(filter(None, map(_PLACED, known.order))),
                           known.queue_len, known.pending_gpus, dict(known.skipped), dict(known.waiting),
                           dict(known.slurm_jobs), frozenset(known.pending_managed), dict(known.ends), self.crowded,
                           dict(known.left))

    def _crowded(self) -> frozenset[str]:
        """The nodes where Slurm counts more GPUs in use than the running jobs read hold there and the pinned
        pending ones will: a job started between the job read and the node read (see Backend.read_state), which
        the engine does not count yet. Until the next read sees it, no new instance goes there (narrowed)."""
        seen, pinned = self.known.gpus_seen, self._pinned_gpus
        return frozenset(name for name, node in self.slurm_nodes.items()
                         if node.gpus_used and node.gpus_used > seen[name] + pinned[name])

    def _eligible_changed(self) -> bool:
        """Whether the eligible nodes of a key that kept tasks use are other than they were (a pin's own key
        is not one: its task is volatile)."""
        known = self.known
        for key, eligible in list(known.eligible.items()):
            if not isinstance(key, tuple):
                facts = known.user[key]
                if self._eligible_for(facts.slurm, facts.needs, key) is not eligible:
                    return True
        return False

    def _settle(self, facts: _Task, throttled: set[str], begin_after: float) -> None:
        """What a managed pending job comes to in this state: placed (a Pending), waiting, or left to Slurm."""
        known = self.known
        known.unsettle(facts)
        job = facts.slurm
        known.slurm_jobs[job.id] = job
        if job.id in throttled:
            known.waiting[job.id] = f"array throttle: at most {job.array_throttle} tasks of {job.array_job} at once"
            return
        if facts.held_back is None and facts.left is not None and not (facts.begin is not None
                                                                      and facts.begin > begin_after):
            known.skipped[job.id] = known.left[job.id] = facts.left
            return
        why = facts.held_back
        # its begin (--begin plus the lease) still more than the lease away, from the later of read and submission
        # (the submission's part is the task's own)
        if why is None and facts.begin is not None and facts.begin > begin_after:
            why = f"waits for its begin time ({facts.begin:.0f}, Unix seconds)"
        why = why or facts.not_startable
        if why is not None:
            if facts.held_back is None and job.reason == DEPENDENCY and facts.req is not None:
                # Met, Slurm would start it at once if its lease had run out meanwhile: it stays leased.
                known.waiting[job.id] = "waits for its dependency"
            else:
                known.skipped[job.id] = why
            return
        if facts.job is None:
            facts.job, facts.needs = engine_job(job, facts.req, self.migratable), _instance_needs(job, facts.req)
            facts.key = self._eligible_key(job, facts.needs)
        # a pinned job: not against its own claim; a job whose nodes must be one set, or that prefers some: its own
        own = job.id in self._claims or facts.sets is not None or facts.prefer is not None
        key = (facts.key, job.id) if own else facts.key
        eligible = self._eligible_for(job, facts.needs, key)
        if facts.sets is not None or facts.prefer is not None:
            try:
                eligible = self._within(facts, eligible)
            except Unhonoured as err:
                known.skipped[job.id] = known.left[job.id] = str(err)
                return
        if facts.pending is None or facts.pending.eligible is not eligible:
            facts.pending = Pending(job, facts.job, eligible)
        known.place(facts, key, eligible)

    def _classify(self, job: SlurmJob) -> tuple[object, object]:
        """What ``job`` is to the daemon, from the job alone: (_RUNNING, its Running or None),
        (_PENDING, (its tasks, their GPUs, whether managed)) or (_OTHER, None)."""
        if job.gpus_requested <= 0 and not job.gpus_alloc:
            return _OTHER, None  # not a GPU job: Slurm's alone
        if job.pending:
            if not self.partitions_of(job):
                return _OTHER, None
            tasks = array_tasks(job)
            return _PENDING, (tasks, job.gpus_requested * len(tasks), job.managed)
        if job.state not in HOLDING_STATES:
            return _OTHER, None
        alloc = job.gpus_alloc
        if alloc and not alloc.keys() <= self.slurm_nodes.keys():  # partly outside the managed partitions
            alloc = {n: c for n, c in alloc.items() if n in self.slurm_nodes}
        if not alloc:
            return _RUNNING, None
        return _RUNNING, Running(job, alloc, max(self.slurm_nodes[n].gpus for n in alloc), self.migratable)

    def _task(self, job: SlurmJob) -> _Task:
        """A managed pending job's translation, as far as it depends on the job alone (made once: see observe)."""
        left = sets = prefer = None
        try:
            constraint = parse_constraint(job.constraint)
        except SlurmParseError as err:
            constraint, left = ANY, f"left to Slurm: {err}"
        capacity = self.capacity_of(job)
        req = request(job, capacity) if capacity else None
        if left is not None:
            pass
        elif job.reservation:
            left = f"runs in reservation {job.reservation}: Slurm places it"
        elif not capacity:
            left = f"no GPU node of partition {job.partition}{_wanting(job)}"
        elif req is None:
            left = f"{job.gpus_requested} GPUs on {job.num_nodes} node(s) is not w x g instances"
        else:
            try:
                sets = self.nodesets.spread(req.instances, req.distinct_nodes or 2 * req.gpus > capacity,
                                            job.contiguous, job.switches, job.segment)
            except Unhonoured as err:
                left = str(err)
            prefer = _preference(job.prefer)
        begin = job.eligible_time - self.lease if self.lease is not None and job.reason == "BeginTime" else None
        if begin is not None and not begin > job.submit_time + BEGIN_SLACK:
            begin = None
        # volatile: an array task a throttle may hold back, a job that may pin nodes (see _claim_pins)
        # (and a job whose nodes depend on the room there is: see _within)
        volatile = (bool(job.array_job and (job.array_throttle or job.reason == THROTTLED))
                    or bool(job.required_nodes) or not job.num_nodes or sets is not None or prefer is not None)
        return _Task(job, priority_key(job), self._held_back(job), begin, self._not_startable(job), left, req,
                     volatile, constraint, sets, prefer)

    def partitions_of(self, job: SlurmJob) -> list[str]:
        """The job's partitions that the daemon manages (cached per partition list)."""
        found = self._managed_partitions.get(job.partition)
        if found is None:
            found = [p for p in job.partition.split(",") if p in self.partitions]
            self._managed_partitions[job.partition] = found
        return found

    def capacity_of(self, job: SlurmJob) -> int:
        """G for the job: the largest GPU node of its partitions of its GPU type and constraint (cached per
        partition list, type and constraint)."""
        key = (job.partition, job.gpu_type, job.constraint)
        found = self._capacities.get(key)
        if found is None:
            constraint = _constraint(job)
            found = self._capacities[key] = max(
                (node.gpus for p in self.partitions_of(job) for n in self.partitions[p]
                 if (node := self.slurm_nodes.get(n)) is not None
                 and (not job.gpu_type or node.gpu_type == job.gpu_type) and constraint.satisfied_by(node.features)),
                default=0)
        return found

    def _held_back(self, job: SlurmJob) -> str | None:
        return "held" if job.held else None

    def _not_startable(self, job: SlurmJob) -> str | None:
        reason = job.reason.split(",")[0].strip()
        if (reason not in STARTABLE_REASONS and not (reason == THROTTLED and job.array_job)  # within its free slots
                and not (reason == INVALID_ACCOUNT and job.required_nodes
                         and len(set(job.required_nodes)) == job.num_nodes)):
            return f"Slurm holds it back: {job.reason}"
        return None

    def eligible(self, job: SlurmJob, req: Request) -> Eligible:
        """Nodes one instance of ``job`` may use (None: all nodes); cached per distinct need."""
        needs = _instance_needs(job, req)
        key = self._eligible_key(job, needs)
        return self._eligible_for(job, needs, (key, job.id) if job.id in self._claims else key)

    def _eligible_key(self, job: SlurmJob, needs: tuple[int, int]) -> int:
        """What a job's eligible nodes depend on, but for its own pin's claim (a pinned job's key adds its id)."""
        return self.known.token((job.partition, *needs, job.gpu_type, job.excluded_nodes, job.required_nodes,
                                 job.exclusive, job.constraint))

    def _eligible_for(self, job: SlurmJob, needs: tuple[int, int], key: object) -> Eligible:
        """The eligible nodes of ``key``: of ``job``, or of any job of that key (a pinned job's key is its own)."""
        found = self._eligible.get(key, _UNSEEN)
        if found is _UNSEEN:
            own = self._claims.get(job.id, _NO_CLAIM) if isinstance(key, tuple) else _NO_CLAIM
            found = self._eligible[key] = self.known.same_eligible(key, self._compute_eligible(job, *needs, own))
        return found

    def _claim_pins(self, jobs: Iterable[SlurmJob]) -> None:
        """The CPUs and memory that pending jobs pinned to exactly their nodes will take there."""
        claimed: Counter[str] = Counter()
        memory_claimed: Counter[str] = Counter()
        for job in jobs:
            if not job.required_nodes and job.num_nodes:
                continue  # pins nothing (the test below, without building a set per pending job)
            nodes = frozenset(job.required_nodes)
            if job.held or len(nodes) != job.num_nodes or not nodes <= self.slurm_nodes.keys():
                continue
            req = request(job, self.capacity_of(job))
            if req is None:
                continue
            cpus, memory = _instance_needs(job, req)
            self._claims[job.id] = (nodes, cpus, memory)
            gpus = req.instances * req.gpus // len(nodes)
            for name in nodes:
                claimed[name] += cpus
                memory_claimed[name] += _taken(self.slurm_nodes[name], memory)
                self._pinned_gpus[name] += gpus
        self._claimed = {name: (claimed[name], memory_claimed[name]) for name in claimed}

    def _compute_eligible(self, job: SlurmJob, cpus: int, memory: int,
                          own: tuple[frozenset[str], int, int]) -> Eligible:
        """``own``: the job's own pin's claim, which does not count against it."""
        excluded, required = set(job.excluded_nodes), set(job.required_nodes)
        constraint = _constraint(job)
        own_nodes, own_cpus, own_memory = own
        names = set()
        for p in self.partitions_of(job):
            for name in self.partitions[p]:
                node = self.slurm_nodes.get(name)
                if node is None or name not in self.available or name in excluded:
                    continue
                if required and name not in required:
                    continue
                if job.gpu_type and node.gpu_type != job.gpu_type:
                    continue
                if constraint.any_of and not constraint.satisfied_by(node.features):
                    continue
                claimed_cpus, claimed_memory = self._claimed.get(name, (0, 0))
                if name in own_nodes:
                    claimed_cpus, claimed_memory = claimed_cpus - own_cpus, claimed_memory - _taken(node, own_memory)
                if not _fits(node, cpus, memory, claimed_cpus, claimed_memory):
                    continue
                if job.exclusive and (node.cpus_alloc or node.memory_alloc_mb or node.gpus_used):
                    continue  # an exclusive job starts only where nothing runs
                names.add(name)
        # Unavailable nodes are the policy's own business, so "every available node" is no restriction.
        return None if names == self.available else frozenset(names)

    def satisfies(self, job: SlurmJob, name: str) -> bool:
        """Whether node ``name`` has the GPU type and the features ``job`` asks for (what only an admin changes)."""
        node = self.slurm_nodes.get(name)
        return node is not None and (not job.gpu_type or node.gpu_type == job.gpu_type) and \
            _constraint(job).satisfied_by(node.features)

    def _within(self, facts: _Task, eligible: Eligible) -> frozenset[str]:
        """``eligible`` narrowed to the one node set the job's nodes must form (see nodesets.py), and to the nodes it
        prefers where they have room for it now. Raises Unhonoured when no node set could ever hold it."""
        base = self.available if eligible is None else eligible
        req, free = facts.req, self._free
        pools = [base]
        if facts.prefer is not None:
            preferred = frozenset(n for n in base if facts.prefer.satisfied_by(self.slurm_nodes[n].features))
            if preferred and preferred != base:
                pools.insert(0, preferred)
        for pool in pools:
            if facts.sets is None:
                nodes = pool
            else:
                try:
                    nodes = self.nodesets.choose(facts.sets, pool.intersection, free, self._gpus, req.instances,
                                                 req.gpus, req.distinct_nodes)
                except Unhonoured:
                    if pool is base:
                        raise
                    continue
            if pool is base or fits(nodes, free, req.instances, req.gpus, req.distinct_nodes):
                return nodes
        raise AssertionError("unreachable: the last pool is returned")

    @functools.cached_property
    def _free(self) -> dict[str, int]:
        """Per node, the GPUs free as read less those the pinned pending jobs will take."""
        pinned = self._pinned_gpus
        return {name: max(0, node.gpus_free - pinned[name]) for name, node in self.slurm_nodes.items()}

    @functools.cached_property
    def _gpus(self) -> dict[str, int]:
        return {name: node.gpus for name, node in self.slurm_nodes.items()}

    def decide(self, job: SlurmJob, engine: Job, nodes: Iterable[str]) -> None:
        """``job`` was decided onto ``nodes`` (a name per instance) this cycle: it takes its CPUs and memory there
        from the jobs decided after it (``narrowed``), as its pin will in the next cycle's translation."""
        cpus, memory = _instance_needs(job, Request(engine.instances, engine.gpus, engine.distinct_nodes))
        for name in nodes:
            if name not in self.slurm_nodes:
                continue
            taken_cpus, taken_memory = self._decided.get(name, (0, 0))
            self._decided[name] = (taken_cpus + cpus, taken_memory + _taken(self.slurm_nodes[name], memory))
            for needs, short in self._short.items():
                if not self._fits_now(name, needs):
                    short.add(name)

    def narrowed(self, job: SlurmJob, engine: Job, eligible: Eligible) -> Eligible:
        """``eligible`` (the job's nodes as read) without the crowded nodes and those the jobs decided this cycle
        left too short of CPUs or memory for one instance of ``job``: the engine counts GPUs only, and not those of
        a job it has not read yet. ``eligible`` itself when none is; else the same object for the same inputs (the
        policy keeps the node indexes of the last set it was handed)."""
        if self._decided:
            needs = _instance_needs(job, Request(engine.instances, engine.gpus, engine.distinct_nodes))
            short = self._short.get(needs)
            if short is None:
                short = self._short[needs] = {name for name in self._decided if not self._fits_now(name, needs)}
                short |= self.crowded
        elif self.crowded:
            short = self.crowded
        else:
            return eligible
        nodes = self.available if eligible is None else eligible
        if short.isdisjoint(nodes):
            return eligible
        key = (id(nodes), id(short), len(short))  # a short set only grows within a cycle
        kept = self._narrowed.get(key)
        if kept is None or kept[0] is not nodes:
            kept = self._narrowed[key] = (nodes, nodes.difference(short))
        return kept[1]

    def _fits_now(self, name: str, needs: tuple[int, int]) -> bool:
        claimed_cpus, claimed_memory = self._claimed.get(name, (0, 0))
        decided_cpus, decided_memory = self._decided.get(name, (0, 0))
        return _fits(self.slurm_nodes[name], *needs, claimed_cpus + decided_cpus, claimed_memory + decided_memory)


def engines(node: SlurmNode) -> bool:
    """Whether the engine places on ``node``: not where Slurm shares GPUs out (gres/shard: a GPU with a shard
    allocated is no GPU job's, and the engine counts whole GPUs), nor where several GPU types are (MIG profiles of
    more than one kind: no one capacity stands for them). Slurm places every job there."""
    return not node.shards and len(node.gpu_types) <= 1


def _constraint(job: SlurmJob) -> Constraint:
    """The job's constraint, where the daemon can read it (a job whose constraint it cannot is left to Slurm)."""
    try:
        return parse_constraint(job.constraint)
    except SlurmParseError:
        return ANY


def _preference(text: str) -> Constraint | None:
    """``--prefer``, where it says something the daemon can read node by node (else it is only Slurm's)."""
    try:
        prefer = parse_constraint(text)
    except SlurmParseError:
        return None
    return prefer if prefer.any_of else None


def _wanting(job: SlurmJob) -> str:
    wants = [f"GPU type {job.gpu_type}"] if job.gpu_type else []
    if job.constraint:
        wants.append(f"constraint {job.constraint}")
    return f" has {' and '.join(wants)}" if wants else ""


def _fits(node: SlurmNode, cpus: int, memory: int, taken_cpus: int, taken_memory: int) -> bool:
    """Whether an instance of ``cpus`` CPUs and ``memory`` MB (or ALL_MEMORY) fits on ``node`` beside its
    allocations and what the jobs Slurm has not started yet will take there (``taken_``)."""
    if node.cpus - node.cpus_alloc - taken_cpus < cpus:
        return False
    return not node.memory_mb or node.memory_mb - node.memory_alloc_mb - taken_memory >= _taken(node, memory)


#: one instance's memory need that is all of its node's (``--mem=0``): it fits only where none is taken
ALL_MEMORY = -1


def _taken(node: SlurmNode, memory: int) -> int:
    """The MB an instance needing ``memory`` (or ALL_MEMORY) takes on ``node``."""
    return node.memory_mb if memory == ALL_MEMORY else memory


def _instance_needs(job: SlurmJob, req: Request) -> tuple[int, int]:
    """The CPUs and MB of memory (or ALL_MEMORY) one instance of ``job`` needs on its node."""
    cpus = -(-job.cpus // req.instances)
    if job.memory_per_gpu_mb is not None:  # Slurm lists the default --mem-per-cpu beside it: this one counts
        return cpus, job.memory_per_gpu_mb * req.gpus
    if job.memory_per_node_mb is not None:
        return cpus, job.memory_per_node_mb or ALL_MEMORY
    return cpus, (job.memory_per_cpu_mb or 0) * cpus


def _beyond_throttle(pending: list[SlurmJob], running_tasks: Mapping[str, int]) -> set[str]:
    """The pending array tasks past their array's throttle: the first (throttle - running) tasks, in task
    order, may be placed; the rest wait (Slurm would not start them either)."""
    by_array: dict[str, list[SlurmJob]] = {}
    for job in pending:
        if job.array_job and (job.array_throttle or job.reason == THROTTLED):
            by_array.setdefault(job.array_job, []).append(job)
    out: set[str] = set()
    for array, tasks in by_array.items():
        throttle = max(t.array_throttle for t in tasks)
        free = max(0, throttle - running_tasks.get(array, 0)) if throttle else 0
        out.update(t.id for t in sorted(tasks, key=lambda t: id_order(t.id))[free:])
    return out
