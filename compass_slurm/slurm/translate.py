"""Slurm's view in the engine's terms: nodes, managed pending jobs with their eligible nodes, running allocations.

One Translator per read; what it translates of each job is kept between cycles in a
TranslationCache (translation_cache.py); a job's request is mapped in requests.py, the
CPUs and memory that unstarted jobs take on each node are counted in claims.py.

An array throttle (``%N``) lets the first N tasks minus the running ones be placed; the
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
required nodes, when it names some), less what pinned and decided jobs will take there
(claims.py); an exclusive job's are the nodes nothing runs on.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass, field
from itertools import compress
from operator import attrgetter

from ..engine.model import MAX_NODE_GPUS, Job, Node
from ..engine.scheduler import Entry
from . import hostlist
from .claims import NO_CLAIM, Claim, Claims, Eligible, fits, instance_needs, taken
from .constraint import ANY, Constraint, parse_constraint
from .errors import SlurmParseError
from .nodesets import NodeSets, Unhonoured
from .nodesets import fits as fits_instances
from .requests import Request, array_tasks, engine_job, id_order, observed, priority_key, requested
from .state import SlurmJob, SlurmNode, SlurmState
from .translation_cache import OTHER, PENDING, RUNNING, UNSEEN, Task, TranslationCache

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


def node_available(node: SlurmNode, reserved: frozenset[str]) -> bool:
    return node.available and not node.reserved and node.name not in reserved

@dataclass(frozen=True, slots=True)
class Running:
    """The GPUs a job holds on the engine's nodes; ``engine()`` makes instances of them (on demand: it costs).
    ``eligible``: the nodes it may be moved to (None: any; see Translator.movable_to)."""

    slurm: SlurmJob
    alloc: Mapping[str, int]
    capacity: int
    migratable: str = "marker"
    eligible: Eligible = None

    def engine(self) -> tuple[Job, tuple[str, ...]]:
        return observed(self.slurm, self.alloc, self.capacity, self.migratable)


@dataclass(frozen=True, slots=True)
class Pending:
    """A managed pending GPU job the daemon may place."""

    slurm: SlurmJob
    job: Job
    eligible: Eligible
    #: its entry in the Scheduler's queue, made with it: the same object each cycle while the job is unchanged
    entry: Entry = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "entry", Entry(self.job, self.eligible, self.slurm.time_limit_s))


@dataclass
class Observation:
    """One SlurmState, translated. ``skipped`` says why managed jobs are left to Slurm.

    Its dicts and sets are those the translation cache keeps (no copies: tens of thousands of jobs each): read them,
    never change them. The cache's next update changes them, so an Observation holds until the next ``observe``
    with the same cache (the daemon's: its next cycle)."""

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
    pending_managed: Set[str] = frozenset()
    #: when each running job will have ended by its time limit (None: unlimited); not there: no start time known
    ends: dict[str, float | None] = field(default_factory=dict)
    #: nodes where Slurm counts more GPUs in use than the jobs read hold (see Translator._crowded)
    crowded: frozenset[str] = frozenset()
    #: the skipped jobs left to Slurm for good, by what they ask (a form the daemon cannot honour exactly):
    #: their lease is lifted at once, so that they start as they would with no daemon
    left: dict[str, str] = field(default_factory=dict)
    #: every job of the read, whatever its state: for the few the daemon follows through a requeue (``find``)
    jobs: tuple[SlurmJob, ...] = ()
    #: the translation started over (the first read, or the partitions, the nodes or their features changed): where
    #: each running job may move is worked out again too
    context_changed: bool = False

    def find(self, job_ids: Set[str]) -> dict[str, SlurmJob]:
        """The jobs of the read among ``job_ids``, by id, whatever their state (one pass over every job)."""
        return {job.id: job for job in compress(self.jobs, map(job_ids.__contains__, map(_JOB_ID_OF, self.jobs)))}

    def lookup(self, job_ids: Set[str]) -> dict[str, SlurmJob]:
        """``find``, for jobs most of which are GPU jobs running or managed ones pending: those are found by id in
        ``slurm_jobs``, and only the rest cost a pass over every job."""
        found = {j: job for j in job_ids if (job := self.slurm_jobs.get(j)) is not None}
        if len(found) < len(job_ids):
            found |= self.find(job_ids - found.keys())
        return found

    @functools.cached_property
    def pending_ids(self) -> list[str]:
        """The ids of ``pending``, in its order (made once: sync, decide and the leases ask)."""
        return list(map(_JOB_ID, self.pending))


_JOB_ID = attrgetter("job.id")
_JOB_ID_OF = attrgetter("id")
_PLACED = attrgetter("placed")


class Translator:
    """Translates one SlurmState; ``partitions`` limits what the daemon manages (empty: all).

    ``lease``: the daemon's lease in seconds, which tells a job that waits for its own
    ``--begin`` (None: no job waits for one, as for ``compass status``); ``migratable`` is
    the config's mode (see SlurmJob.may_migrate).
    """

    def __init__(self, state: SlurmState, partitions: Iterable[str] = (), lease: float | None = None, *,
                 migratable: str = "marker", known: TranslationCache | None = None) -> None:
        self.state = state
        self.lease = lease
        self.migratable = migratable
        wanted = set(partitions)
        self.partitions = {p.name: p.nodes for p in state.partitions if not wanted or p.name in wanted}
        in_scope = {n for nodes in self.partitions.values() for n in nodes}
        reserved = frozenset(n for r in state.reservations if r.active for n in r.nodes)
        gpu_nodes = [(n, engines(n)) for n in state.nodes if n.gpus > 0 and n.name in in_scope]
        self.slurm_nodes = {n.name: n for n, placed in gpu_nodes if placed}
        #: the GPU nodes in scope the engine does not place on (``engines``), in Slurm's order
        self.left_to_slurm = tuple(n.name for n, placed in gpu_nodes if not placed)
        self.known = known if known is not None else TranslationCache()
        self.nodes = self.known.nodes(self.slurm_nodes.values(), lambda n: node_available(n, reserved))
        self.available = frozenset(n.name for n in self.nodes if n.available)
        self.nodesets = NodeSets.of(state, self.slurm_nodes)
        self._eligible: dict[object, Eligible] = {}
        #: where running jobs may be moved, per what it depends on (see movable_to)
        self._movable: dict[tuple[object, ...], Eligible] = {}
        self._capacities: dict[tuple[str, str | None, str], tuple[int, int]] = {}
        self._usable_nodes: dict[tuple[object, ...], frozenset[str]] = {}
        self._managed_partitions: dict[str, list[str]] = {}
        #: each partition's engine nodes as a set, made when first asked (a pinned job's own nodes are looked up in
        #: it; a job of several partitions is placed within one; a running job moves within its own)
        self._partition_sets: dict[str, frozenset[str]] = {}
        self.claims = Claims(self.slurm_nodes, self.available)
        #: the context of the translation changed (the first read, the partitions, the nodes or their features):
        #: what was kept of earlier reads is forgotten
        self.context_changed = self.known.begin((
            tuple(self.partitions.items()), tuple((n.name, n.gpus, n.gpu_type) for n in self.slurm_nodes.values()),
            tuple(n.features for n in self.slurm_nodes.values()), migratable, lease, self.nodesets))

    def observe(self) -> Observation:
        known = self.known
        afresh, fresh = known.update(self.state.jobs, self._classify, self._task)
        # the only ones a throttle or a pin concerns (each time it is listed, as Slurm would count it)
        volatile = [facts.slurm for facts in (known.order if known.twice else known.volatile.values())
                    if facts.volatile]
        throttled = _beyond_throttle(volatile, known.running_tasks)
        claims = self.claims
        claims.pin((job for job in volatile if job.id not in throttled) if throttled else volatile, self.request_of)
        claims.crowded = self._crowded()
        begin_after = self.state.read_at + BEGIN_SLACK
        came = known.came(begin_after)
        if afresh or self._eligible_changed():
            todo: Iterable[Task] = known.order
        else:
            todo = {id(facts): facts for facts in (*fresh, *known.volatile.values(), *came)}.values()
        for facts in todo:
            self._settle(facts, throttled, begin_after)
        return Observation(self.nodes, known.running, list(filter(None, map(_PLACED, known.order))),
                           known.queue_len, known.pending_gpus, known.skipped, known.waiting, known.slurm_jobs,
                           known.pending_managed, known.ends, claims.crowded, known.left, self.state.jobs,
                           self.context_changed)

    def _crowded(self) -> frozenset[str]:
        """The nodes where Slurm counts more GPUs in use than the running jobs read hold there and the pinned
        pending ones will: a job started between the job read and the node read (see Backend.read_state), which
        the engine does not count yet. Until the next read sees it, no new instance goes there (narrowed)."""
        seen, pinned = self.known.gpus_seen, self.claims.pinned_gpus
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

    def _settle(self, facts: Task, throttled: set[str], begin_after: float) -> None:
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
            facts.job, facts.needs = engine_job(job, facts.req, self.migratable), instance_needs(job, facts.req)
            facts.key = self._eligible_key(job, facts.needs)
        # a pinned job: not against its own claim; a job whose nodes must be one set, or that prefers some: its own
        own = job.id in self.claims.pins or facts.sets is not None or facts.prefer is not None
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
        """What ``job`` is to the daemon, from the job alone: (RUNNING, its Running or None),
        (PENDING, (its tasks, their GPUs, whether managed, how many count in the queue)) or (OTHER, None)."""
        if job.gpus_requested <= 0 and not job.gpus_alloc:
            return OTHER, None  # not a GPU job: Slurm's alone
        if job.pending:
            if not self.partitions_of(job):
                # marked, in a partition the daemon does not manage (the wrapper marks whatever the partition, and
                # scontrol may move a job): left to Slurm, its lease lifted, and not counted in the queue
                return (PENDING, (array_tasks(job), 0, True, 0)) if job.managed else (OTHER, None)
            tasks = array_tasks(job)
            return PENDING, (tasks, job.gpus_requested * len(tasks), job.managed, len(tasks))
        if job.state not in HOLDING_STATES:
            return OTHER, None
        alloc = job.gpus_alloc
        if alloc and not alloc.keys() <= self.slurm_nodes.keys():  # partly outside the managed partitions
            alloc = {n: c for n, c in alloc.items() if n in self.slurm_nodes}
        if not alloc:
            return RUNNING, None
        eligible = self.movable_to(job, alloc) if job.may_migrate(self.migratable) else None
        return RUNNING, Running(job, alloc, max(self.slurm_nodes[n].gpus for n in alloc), self.migratable, eligible)

    def _task(self, job: SlurmJob) -> Task:
        """A managed pending job's translation, as far as it depends on the job alone (made once: see observe)."""
        left = sets = prefer = None
        try:
            constraint = parse_constraint(job.constraint)
        except SlurmParseError as err:
            constraint, left = ANY, f"left to Slurm: {err}"
        capacity = self.capacity_of(job)
        found = self.requested_of(job)
        req = found if isinstance(found, Request) else None
        if left is not None:
            pass
        elif not self.partitions_of(job):
            left = f"partition {job.partition} is not managed"
        elif job.reservation:
            left = f"runs in reservation {job.reservation}: Slurm places it"
        elif job.required_nodes and job.num_nodes > len(named := set(job.required_nodes)):
            left = f"its node list names {len(named)} of its {job.num_nodes} nodes: Slurm picks the others"
        elif not capacity:
            left = f"no GPU node of partition {job.partition}{_wanting(job)}"
        elif req is None:
            left = str(found)
        elif job.exclusive and len({self._gpus[n] for p in self.partitions_of(job)
                                    for n in self._usable_in(p, job)}) > 1:
            # the engine's instance is a node of the largest size: Slurm gives the job a whole node of any size
            left = "--exclusive on GPU nodes of different sizes: Slurm gives it whole nodes of any size"
        elif not self._could_ever_hold(job, req):
            left = (f"{req.instances} x {req.gpus} GPUs{' on as many nodes' if req.distinct_nodes else ''} is more "
                    f"than the nodes it may use in one partition could ever hold: Slurm places its "
                    f"{job.gpus_requested} GPUs")
        else:
            try:
                sets = self.nodesets.spread(req.instances, req.distinct_nodes or 2 * req.gpus > capacity,
                                            job.contiguous, job.switches, job.segment, self.partitions_of(job),
                                            self._partition_nodes)
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
        return Task(job, priority_key(job), self._held_back(job), begin, self._not_startable(job), left, req,
                     volatile, constraint, sets, prefer)

    def partitions_of(self, job: SlurmJob) -> list[str]:
        """The job's partitions that the daemon manages (cached per partition list)."""
        found = self._managed_partitions.get(job.partition)
        if found is None:
            found = [p for p in job.partition.split(",") if p in self.partitions]
            self._managed_partitions[job.partition] = found
        return found

    def capacity_of(self, job: SlurmJob) -> int:
        """G for the job: the largest GPU node of its partitions of its GPU type and constraint."""
        return self._capacities_of(job)[1]

    def request_of(self, job: SlurmJob) -> Request | None:
        """The job's w x g request on the GPU nodes of its partitions (None: no such node, or not expressible)."""
        found = self.requested_of(job)
        return found if isinstance(found, Request) else None

    def requested_of(self, job: SlurmJob) -> Request | str | None:
        """As request_of, or why the job is no w x g request (None: no GPU node of its partitions)."""
        smallest, capacity = self._capacities_of(job)
        return requested(job, capacity, smallest) if capacity else None

    def _capacities_of(self, job: SlurmJob) -> tuple[int, int]:
        """The smallest and the largest GPU node of the job's partitions of its GPU type and constraint (cached per
        partition list, type and constraint; 0, 0: none)."""
        key = (job.partition, job.gpu_type, job.constraint)
        found = self._capacities.get(key)
        if found is None:
            constraint = _constraint(job)
            gpus = [node.gpus for p in self.partitions_of(job) for n in self.partitions[p]
                    if (node := self.slurm_nodes.get(n)) is not None
                    and (not job.gpu_type or node.gpu_type == job.gpu_type) and constraint.satisfied_by(node.features)]
            found = self._capacities[key] = (min(gpus, default=0), max(gpus, default=0))
        return found

    def _could_ever_hold(self, job: SlurmJob, req: Request) -> bool:
        """Whether the nodes the job may use in one of its partitions hold ``req`` when empty: a shape the engine's
        rule makes on nodes of several sizes (``--gpus=5`` on 4-GPU nodes: 5 x 1 on as many nodes) may need more of
        them than there are, and would wait for ever."""
        return any(fits_instances(self._usable_in(p, job), self._gpus, req.instances, req.gpus, req.distinct_nodes)
                   for p in self.partitions_of(job))  # (Slurm runs a job within one of its partitions)

    def _usable_in(self, partition: str, job: SlurmJob) -> frozenset[str]:
        """The engine's nodes of ``partition`` of the job's GPU type and features, not excluded, whatever their
        state (cached per what it depends on)."""
        key = (partition, job.gpu_type, job.constraint, job.excluded_nodes)
        found = self._usable_nodes.get(key)
        if found is None:
            excluded = set(job.excluded_nodes)
            found = self._usable_nodes[key] = frozenset(
                n for n in self._partition_nodes(partition) if n not in excluded and self.satisfies(job, n))
        return found

    def movable_to(self, job: SlurmJob, alloc: Iterable[str]) -> Eligible:
        """Where a running job may be moved (None: any node): the nodes of the partition of its own that holds its
        nodes (a job of several runs in one), of its GPU type and features, not excluded. Not its ReqNodeList: that
        is where it runs, often the daemon's pin. Cached per what it depends on."""
        home = next((p for p in self.partitions_of(job) if self._partition_nodes(p).issuperset(alloc)), None)
        if home is None or not _readable(job) or _one_set(job, alloc):
            # (its partitions changed since it started; a constraint the daemon cannot read; nodes that must stay
            # contiguous, under few switches or in one segment, which a move instance by instance does not keep)
            return frozenset(alloc)  # where it runs
        key = (home, job.gpu_type, job.constraint, job.excluded_nodes)
        found = self._movable.get(key, UNSEEN)
        if found is UNSEEN:
            names = self._usable_in(home, job)
            found = self._movable[key] = None if names == self.slurm_nodes.keys() else names
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
        needs = instance_needs(job, req)
        key = self._eligible_key(job, needs)
        return self._eligible_for(job, needs, (key, job.id) if job.id in self.claims.pins else key)

    def _eligible_key(self, job: SlurmJob, needs: tuple[int, int]) -> int:
        """What a job's eligible nodes depend on, but for its own pin's claim (a pinned job's key adds its id)."""
        return self.known.token((job.partition, *needs, job.gpu_type, job.excluded_nodes, job.required_nodes,
                                 job.exclusive, job.constraint))

    def _eligible_for(self, job: SlurmJob, needs: tuple[int, int], key: object) -> Eligible:
        """The eligible nodes of ``key``: of ``job``, or of any job of that key (a pinned job's key is its own)."""
        found = self._eligible.get(key, UNSEEN)
        if found is UNSEEN:
            if isinstance(key, tuple):  # a job's own key: its key's nodes, and those its pin's claim alone keeps out
                eligible = self._with_own_nodes(job, needs, self._eligible_for(job, needs, key[0]))
            else:
                names = self._eligible_names(job, *needs, NO_CLAIM)
                # Unavailable nodes are the policy's own business, so "every available node" is no restriction.
                eligible = None if names == self.available else frozenset(names)
            found = self._eligible[key] = self.known.same_eligible(key, eligible)
        return found

    def _with_own_nodes(self, job: SlurmJob, needs: tuple[int, int], shared: Eligible) -> Eligible:
        """The eligible nodes of a job with a key of its own: ``shared`` (those of its key, its pin's claim counted
        like any other), and its pin's nodes where that claim alone kept it out. Its own claim does not count against
        it, and freeing it changes no other node, so only those few are looked at again, not every node of its
        partitions."""
        own = self.claims.pins.get(job.id, NO_CLAIM)  # (a job whose nodes must be one set has a key of its own too)
        if shared is None:
            return None
        names = self._eligible_names(job, *needs, own, within=own[0] - shared)
        if not names:
            return shared
        names.update(shared)
        return None if names == self.available else frozenset(names)

    def _partition_nodes(self, partition: str) -> frozenset[str]:
        found = self._partition_sets.get(partition)
        if found is None:
            found = self._partition_sets[partition] = frozenset(self.partitions[partition]).intersection(
                self.slurm_nodes)
        return found

    def _eligible_names(self, job: SlurmJob, cpus: int, memory: int, own: Claim,
                        within: frozenset[str] | None = None) -> set[str]:
        """The nodes of the job's partitions (only those ``within``, when given) that may take one instance of it;
        ``own``: the job's own pin's claim, which does not count against it."""
        excluded, required = set(job.excluded_nodes), set(job.required_nodes)
        constraint = _constraint(job)
        own_nodes, own_cpus, own_memory = own
        claimed = self.claims.on_node
        names = set()
        for p in self.partitions_of(job):
            for name in self.partitions[p] if within is None else within & self._partition_nodes(p):
                node = self.slurm_nodes.get(name)
                if node is None or name not in self.available or name in excluded:
                    continue
                if required and name not in required:
                    continue
                if job.gpu_type and node.gpu_type != job.gpu_type:
                    continue
                if constraint.any_of and not constraint.satisfied_by(node.features):
                    continue
                claimed_cpus, claimed_memory = claimed.get(name, (0, 0))
                if name in own_nodes:
                    claimed_cpus, claimed_memory = claimed_cpus - own_cpus, claimed_memory - taken(node, own_memory)
                if not fits(node, cpus, memory, claimed_cpus, claimed_memory):
                    continue
                if job.exclusive and (node.cpus_alloc or node.memory_alloc_mb or node.gpus_used):
                    continue  # an exclusive job starts only where nothing runs
                names.add(name)
        return names

    def satisfies(self, job: SlurmJob, name: str) -> bool:
        """Whether node ``name`` has the GPU type and the features ``job`` asks for (what only an admin changes)."""
        node = self.slurm_nodes.get(name)
        return node is not None and (not job.gpu_type or node.gpu_type == job.gpu_type) and \
            _constraint(job).satisfied_by(node.features)

    def _within(self, facts: Task, eligible: Eligible) -> frozenset[str]:
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
                                                 req.gpus, req.distinct_nodes, self._partition_nodes)
                except Unhonoured:
                    if pool is base:
                        raise
                    continue
            if pool is base or fits_instances(nodes, free, req.instances, req.gpus, req.distinct_nodes):
                return nodes
        raise AssertionError("unreachable: the last pool is returned")

    @functools.cached_property
    def _free(self) -> dict[str, int]:
        """Per node, the GPUs free as read less those the pinned pending jobs will take."""
        pinned = self.claims.pinned_gpus
        return {name: max(0, node.gpus_free - pinned[name]) for name, node in self.slurm_nodes.items()}

    @functools.cached_property
    def _gpus(self) -> dict[str, int]:
        return {name: node.gpus for name, node in self.slurm_nodes.items()}


#: why ``engines`` leaves a node to Slurm, as ``compass status`` and ``compass doctor`` say it
LEFT_TO_SLURM = f"gres/shard, several GPU types or more than {MAX_NODE_GPUS} GPUs"


def left_to_slurm_text(names: Iterable[str]) -> str:
    """How status and doctor name the nodes ``engines`` leaves to Slurm: "node[03-05] left to Slurm (why)"."""
    return f"{hostlist.compress(names)} left to Slurm ({LEFT_TO_SLURM})"


def engines(node: SlurmNode) -> bool:
    """Whether the engine places on ``node``: not where Slurm shares GPUs out (gres/shard: a GPU with a shard
    allocated is no GPU job's, and the engine counts whole GPUs), nor where several GPU types are (MIG profiles of
    more than one kind: no one capacity stands for them), nor on more GPUs than it takes (MAX_NODE_GPUS: no real
    node's). Slurm places every job there."""
    return not node.shards and len(node.gpu_types) <= 1 and node.gpus <= MAX_NODE_GPUS


def _readable(job: SlurmJob) -> bool:
    """Whether the daemon can read the job's constraint."""
    try:
        parse_constraint(job.constraint)
    except SlurmParseError:
        return False
    return True


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


def _one_set(job: SlurmJob, alloc: Iterable[str]) -> bool:
    """Whether a running job's several nodes must form one set (--contiguous, --switches, --segment)."""
    return bool(job.contiguous or job.switches or job.segment) and len(set(alloc)) > 1


def _wanting(job: SlurmJob) -> str:
    wants = [f"GPU type {job.gpu_type}"] if job.gpu_type else []
    if job.constraint:
        wants.append(f"constraint {job.constraint}")
    return f" has {' and '.join(wants)}" if wants else ""


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