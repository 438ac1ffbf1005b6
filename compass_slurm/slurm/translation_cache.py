"""The incremental translation cache: the latest translation, kept between the daemon's cycles.

It finds a state's unchanged jobs by identity (``map(id, jobs)``): the parsers return the
same SlurmJob object for a job whose fields did not change since the last read (the
identity contract, tested per read format in tests/slurm/test_job_identity.py). A new
object for an unchanged job costs its translation again; the same object for a changed
job cannot happen (a SlurmJob is frozen).
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import compress
from operator import attrgetter
from typing import TYPE_CHECKING

from ..engine.model import Job, Node
from .claims import Eligible
from .constraint import ANY, Constraint
from .requests import Request, priority_key
from .state import SlurmJob, SlurmNode

if TYPE_CHECKING:
    from .translate import Pending, Running

#: what a job is to the daemon (see Translator._classify)
RUNNING, PENDING, OTHER = "running", "pending", "other"
#: not in a dict (where None is a value)
UNSEEN = object()


@dataclass(slots=True, eq=False)
class Task:
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


_ORDER = attrgetter("order")


def _spliced(order: list[Task], removed: list[Task], added: list[Task]) -> list[Task]:
    """``order`` (sorted, every key once) less ``removed``, with ``added``: each found by bisection, the rest
    copied in slices (a pass over 60,000 tasks' keys costs more than the copy)."""
    kept: list[Task] = []
    start = 0
    for at in sorted(bisect.bisect_left(order, facts.order, key=_ORDER) for facts in removed):
        kept += order[start:at]
        start = at + 1
    kept += order[start:]
    out: list[Task] = []
    start = 0
    for facts in sorted(added, key=_ORDER):
        at = bisect.bisect_left(kept, facts.order, start, key=_ORDER)
        out += kept[start:at]
        out.append(facts)
        start = at
    out += kept[start:]
    return out


class TranslationCache:
    """The latest translation, kept between the daemon's cycles and brought up to date by what changed.

    The parsers hand back the same SlurmJob object for a job whose fields did not change, so
    a state's jobs are the last ones (by identity) less those gone, plus those new. Only the
    new ones are classified and made tasks (a task that only its priority sets apart from one
    gone keeps that one's translation: ``_repriced``); the running jobs, the counts, the managed pending
    tasks in priority order follow the difference. What a task comes to (placed, waiting, left
    to Slurm) is worked out again for the new tasks, the volatile ones, those whose begin time
    the read's time passed (either way: ``came``), and for all of them when the eligible nodes
    of a key in use changed (``Translator.observe``). Valid for one set
    of managed partitions, nodes with their GPU counts and features, lease and migratable mode: a change starts
    afresh (and where running jobs may move is worked out again: ``Observation.context_changed``); so does a state
    that lists a job id twice (kept jobs are found again by identity).
    """

    def __init__(self) -> None:
        self._context: object = None
        #: the engine's Node made of each GPU node last read, by name (see nodes)
        self._nodes: dict[str, Node] = {}
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
        self._tasks: dict[int, Task] = {}  # by the identity of its SlurmJob
        #: while an update adds jobs: the tasks of the jobs gone from the last state, by id (see _repriced)
        self._gone: dict[str, Task] = {}
        self.order: list[Task] = []  # Slurm's priority order
        self.volatile: dict[int, Task] = {}
        #: the tasks with a begin time, and (begin, identity) of each in begin order (with some gone: see came)
        self._timed: dict[int, Task] = {}
        self._begins: list[tuple[float, int]] = []
        self._after: float | None = None  # the last ``came``'s time
        self.skipped: dict[str, str] = {}
        self.left: dict[str, str] = {}  # the skipped left to Slurm for good
        self.waiting: dict[str, str] = {}
        #: per eligible-nodes key in use: the nodes, how many placed tasks use them, and one of those
        self.eligible: dict[object, Eligible] = {}
        self._users: Counter[object] = Counter()
        self.user: dict[object, Task] = {}

    def nodes(self, slurm_nodes: Iterable[SlurmNode], available: Callable[[SlurmNode], bool]) -> tuple[Node, ...]:
        """The engine's nodes of ``slurm_nodes``: the Node made before for a node whose name, GPUs, type and
        availability are as they were (the policy holds the Nodes it was built with: same_nodes checks
        those by identity first)."""
        kept, made, out = self._nodes, {}, []
        for n in slurm_nodes:
            up = available(n)
            node = kept.get(n.name)
            if node is None or node.available != up or node.gpus != n.gpus or node.gpu_type != n.gpu_type:
                node = Node(n.name, n.gpus, up, gpu_type=n.gpu_type)
            made[n.name] = node
            out.append(node)
        self._nodes = made
        return tuple(out)

    def begin(self, context: object) -> bool:
        """A new state, translated in ``context``: what was kept for another one is forgotten. Whether it was."""
        if context == self._context:
            return False
        self._context, self._tokens = context, {}
        self._reset()
        return True

    def update(self, jobs: tuple[SlurmJob, ...], classify: Callable[[SlurmJob], tuple[object, object]],
               make: Callable[[SlurmJob], Task]) -> tuple[bool, list[Task]]:
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

    def _add(self, job: SlurmJob, what: tuple[object, object], make: Callable[[SlurmJob], Task]) -> list[Task]:
        """Counts ``job`` in; returns its tasks, if it is managed and pending."""
        self._jobs[id(job)] = (job, what)
        self._ids[job.id] += 1
        if job.pending and job.managed:
            self.pending_managed.add(job.id)
        kind, value = what
        if kind is RUNNING:
            if job.array_job:
                self.running_tasks[job.array_job] += 1
            if value is not None:
                self.running[job.id] = value
                self.slurm_jobs[job.id] = job
                self.gpus_seen.update(value.alloc)
                if job.time_limit_s is None or job.start_time:
                    self.ends[job.id] = None if job.time_limit_s is None else job.start_time + job.time_limit_s
        elif kind is PENDING:
            tasks, gpus, managed, queued = value
            self.queue_len += queued
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

    def _repriced(self, task: SlurmJob) -> Task | None:
        """The translation of a task gone from the last state that ``task`` is at a new priority alone (slurmctld
        recalculates every pending job's priority every PriorityCalcPeriod), moved to ``task``: its engine job
        stays the same object, so the Scheduler keeps its entry. None for any other task."""
        old = self._gone.get(task.id)
        if old is None or not old.slurm.same_but_priority(task):
            return None
        return Task(task, priority_key(task), old.held_back, old.begin, old.not_startable, old.left, old.req,
                     old.volatile, old.constraint, old.sets, old.prefer, job=old.job, needs=old.needs, key=old.key)

    def _drop(self, job: SlurmJob, what: tuple[object, object]) -> list[Task]:
        """Counts ``job`` out (a job id is held by one job at most: see update); returns its tasks."""
        self._uncount(job.id)
        self.pending_managed.discard(job.id)
        kind, value = what
        if kind is RUNNING:
            if job.array_job:
                self.running_tasks[job.array_job] -= 1
            if value is not None:
                del self.running[job.id], self.slurm_jobs[job.id]
                self.gpus_seen.subtract(value.alloc)
                self.ends.pop(job.id, None)
        elif kind is PENDING:
            tasks, gpus, managed, queued = value
            self.queue_len -= queued
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

    def came(self, after: float) -> list[Task]:
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

    def unsettle(self, facts: Task) -> None:
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

    def place(self, facts: Task, key: object, eligible: Eligible) -> None:
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
        kept = self.eligible.get(key, UNSEEN)
        return kept if kept is not UNSEEN and kept == eligible else eligible


