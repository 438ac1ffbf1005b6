"""The queue in front of a policy: the queue disciplines by name, Compact after every change.

Disciplines (``QUEUES``, in disciplines.py with the defaults):

- ``fifo``: strict priority order; nothing starts past a job that does not fit.
- ``backfill``: EASY backfill as Slurm's sched/backfill does it for its first job.
  The highest-priority job that does not fit (the *head*) gets a reservation: the
  earliest time at which it fits (its *shadow time*) and the GPUs on specific nodes
  it will use then. A lower-priority job starts now only where it does not delay
  the head: it is expected to end by the shadow time, or it leaves the reserved
  GPUs alone. One reservation only (EASY); it is rebuilt on every drain.

Slack (``slack`` = S > 0, backfill only; 0 is EASY): a head of one whole node may be
delayed by 1-GPU jobs up to S times its own estimate past the shadow time of its first
reservation (after Talby and Feitelson's slack-based backfilling; a head that fits when
first at the front has its first shadow time now). Until that deadline a 1-GPU job
starts on any GPUs if it is expected to end by it, not only by the current shadow time,
and a head that fits lets such jobs go first, then starts in the same drain if it still
fits (no GPU idles for it). The deadline is not renewed, so the head starts no later
than its first shadow time plus the slack (by the estimates). Other heads (multi-node
ones: a stream of small jobs must not starve them) and other passers keep EASY's rule.

Run-time estimates: a job's ``limit`` (Slurm's time limit; the simulator passes the
real duration) times ``estimate_factor``; a job without a limit is expected to run
forever, so it never ends before a shadow time. A running job past its estimate is
expected to end now.

The reservation is node-aware, not a raw GPU total: the head's shape must fit the
*projected* free GPUs per node at the shadow time (free now, plus what running jobs
release by then, on nodes the head may use). Its nodes are chosen best fit on those
projected counts, ties to the node with the fewest GPUs free now, so the reservation
holds GPUs that are busy now wherever it can, and free GPUs stay usable. For whole-node
instances (the heads that block) every policy places on empty nodes, so this is the
policy's own choice; for smaller heads it is a model of it, and the next drain plans
again from the real state. A long job may use a reserved node only within that node's
*spare* (projected free minus reserved). Compact may still move an instance onto a
reserved node; the next drain then plans anew (policies that want to avoid it read
``reservation``).

Driver contract (the simulator, ``compass replay`` and the daemon drive this object
the same way; it does no I/O and reads no clock):

- Time is the driver's: every call that may start jobs takes ``now`` in seconds,
  never decreasing. Only ``backfill`` looks at it.
- ``submit(job, now, eligible, limit, managed)``: a pending job joins the queue at
  the lowest priority. ``eligible`` limits its nodes (partition, CPUs, memory);
  None means any node. ``managed=False``: the job is placed as Slurm itself would
  (``foreign``) and adopted pinned, as the daemon does with plain sbatch jobs.
- ``adopt(job, nodes, start, limit)``: a running job the scheduler did not start.
- ``requeue(entries)``: the queue from now on is exactly ``entries`` (``Entry``: job,
  eligible nodes, limit) in that order (the daemon passes Slurm's pending jobs in priority
  order each cycle); a job queued already as it was keeps its place, so a queue that hardly
  changed costs no submits.
- ``expect(ends)``: expected ends of every job the policy holds, replacing the earlier ones
  (the daemon keeps one policy and one scheduler across cycles and tells it Slurm's end times).
- ``finish(job_id)``: a running job ended; ``withdraw(job_id)``: a queued job left.
  Both return what the policy did in response (migrations), without starting anything.
- ``drain(now)``: runs the discipline once and returns a ``Step``: the decisions in
  the order made, and every migration (filler pulls and Compact's moves) in order.
- The migration budget (the driver's rate limit) is an argument: ``arrive``,
  ``depart``, ``finish`` and ``drain`` take ``budget`` (None: unlimited) and pass
  what is left of it to every ``place``, ``compact`` and ``blocked``; ``Step.spent``
  says what the call used.
- ``arrive`` = submit + drain and ``depart`` = finish/withdraw + drain: an event-driven
  driver (the simulator, replay) calls these once per event.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import compress
from operator import attrgetter, is_not

from .cluster import ClusterState
from .model import Decision, EngineError, Job, Migration
from .policies.base import Compaction, Policy
from .disciplines import DEFAULT_RESTART_S, EASY_SLACK, QUEUES, ROOM_GATE
from .rate_limit import remaining

#: How jobs the policy does not manage get their nodes (Slurm's own choice): node indexes or None.
Foreign = Callable[[ClusterState, Job, "frozenset[int] | None"], "list[int] | None"]


@dataclass
class Step:
    """What one call caused: placements made (in order) and migrations carried out."""

    decisions: list[Decision] = field(default_factory=list)
    migrations: list[Migration] = field(default_factory=list)
    #: migration budget the call used (moves planned, see policies.base.Compaction)
    spent: int = 0

    def extend(self, other: "Step") -> None:
        self.decisions.extend(other.decisions)
        self.migrations.extend(other.migrations)
        self.spent += other.spent


@dataclass(frozen=True, slots=True)
class Entry:
    """A queued job with what the queue needs to know about it."""

    job: Job
    eligible: frozenset[str] | None = None
    limit: float | None = None
    managed: bool = True


_ENTRY_ID = attrgetter("job.id")


@dataclass
class Reservation:
    """The blocked head's plan: when it fits, and which GPUs on which nodes it will use then."""

    job: str
    shadow: float
    #: node index -> GPUs the head will use there at the shadow time.
    nodes: dict[int, int]
    #: node index -> GPUs of a reserved node that a long job may still take (projected free - reserved).
    spare: dict[int, int]


class Scheduler:
    def __init__(
        self,
        policy: Policy,
        queue: str = "fifo",
        estimate_factor: float = 1.0,
        foreign: Foreign | None = None,
        *,
        explain: bool = False,
        on_start: Callable[[Decision], None] | None = None,
        slack: float = EASY_SLACK,
        restart_s: float = DEFAULT_RESTART_S,
    ) -> None:
        if queue not in QUEUES:
            raise EngineError(f"unknown queue {queue!r}; choose from: {', '.join(QUEUES)}")
        if not estimate_factor > 0 or math.isinf(estimate_factor):
            raise EngineError(f"estimate factor must be a positive number, got {estimate_factor!r}")
        self.policy = policy
        self.discipline = queue
        self.estimate_factor = estimate_factor
        if not slack >= 0 or math.isinf(slack):
            raise EngineError(f"slack must be a number >= 0 (times the head's estimate), got {slack!r}")
        self.slack = slack
        if not restart_s >= 0 or math.isinf(restart_s):
            raise EngineError(f"the restart cost must be a number of seconds >= 0, got {restart_s!r}")
        #: what one migration costs the migrated job: moves that make room for a blocked head must be worth it
        self.restart_s = restart_s
        #: queued single-node whole-node job -> the deadline its first reservation set (slack > 0)
        self._deadline: dict[str, float] = {}
        self.foreign = foreign
        #: record in each decision the nodes the policy chose among (for drivers that log them: it costs lookups)
        self.explain = explain
        #: called after each start and its Compact (the daemon measures fragmentation per decision)
        self.on_start = on_start
        #: a job's eligible nodes as they stand when it is placed (None: as queued): the daemon takes off those
        #: the jobs started before it in the drain left short of what the engine does not count (CPUs, memory)
        self.refine: Callable[[Job, frozenset[str] | None], frozenset[str] | None] | None = None
        self.queue: dict[str, Entry] = {}
        #: the latest drain's reservation (backfill with a blocked head), else None.
        self.reservation: Reservation | None = None
        self._budget: int | None = None  # the budget of the drain being run (its argument)
        #: (eligible, closed nodes) -> the nodes a job that ends after the shadow time may use, as last made
        self._outside: tuple[tuple[frozenset[str] | None, tuple[str, ...]], frozenset[str]] | None = None
        self._ends: dict[str, tuple[float, int]] = {}  # running job -> (expected end, tiebreak)
        self._by_end: list[tuple[float, int, str]] = []  # the same, sorted
        self._seq = 0
        self._shapes: Counter[tuple] = Counter()  # queued jobs per shape (what decides fit)
        #: per shape, a heap of (estimate, job) over its queued jobs; entries of jobs gone are skipped lazily
        self._shortest: dict[tuple, list[tuple[float, str]]] = {}

    @property
    def running(self) -> dict[str, Job]:
        return self.policy.cluster.jobs

    def knows(self, job_id: str) -> bool:
        return job_id in self.queue or job_id in self.running

    def expected_end(self, job_id: str) -> float:
        """When a running job is expected to end (inf: no estimate)."""
        return self._ends.get(job_id, (math.inf, 0))[0]

    # -- what the driver tells ---------------------------------------------------------------

    def submit(
        self,
        job: Job,
        eligible: Collection[str] | None = None,
        limit: float | None = None,
        managed: bool = True,
    ) -> None:
        if job.id in self.queue:
            raise EngineError(f"duplicate job id {job.id}")
        entry = Entry(job, None if eligible is None else frozenset(eligible), limit, managed)
        self._admit(entry)
        self.queue[job.id] = entry

    def requeue(self, entries: Iterable[Entry]) -> None:
        """The queue is ``entries`` in this order; queued jobs not named leave it.

        A job handed the same entry object as before keeps its place at no cost (the daemon hands the same
        objects for what did not change: the parsers' identity contract, slurm/translation_cache.py, tested in
        tests/slurm/test_job_identity.py); an equal new entry (same job, eligible nodes and limit) replaces it
        as cheaply; the others are queued anew.
        """
        entries = list(entries)
        ids = list(map(_ENTRY_ID, entries))
        queue = dict(zip(ids, entries))
        if len(queue) != len(entries):
            seen: set[str] = set()
            raise EngineError(f"duplicate job id {next(j for j in ids if j in seen or seen.add(j))}")
        old, self.queue = self.queue, queue
        # (maps and compress: a queue of 100,000 jobs that hardly changed costs a pass in C)
        for entry in list(compress(entries, map(is_not, map(old.get, ids), entries))):
            was = old.get(entry.job.id)
            if was is not None:
                if was.job is entry.job and was.limit == entry.limit and was.managed == entry.managed and (
                        was.eligible is entry.eligible or was.eligible == entry.eligible):
                    continue  # queued as it was: its place and its shape count stay
                self._unshape(was)
            self._admit(entry)
        for job_id in old.keys() - self.queue.keys():
            self._unshape(old[job_id])
            self._deadline.pop(job_id, None)
        # A queue kept for long: heaps that hold mostly jobs gone are rebuilt from the queue.
        for shape, heap in self._shortest.items():
            if len(heap) > 2 * self._shapes[shape] + 64:
                heap[:] = [(self._estimate(e), e.job.id) for e in self.queue.values() if _shape(e) == shape]
                heapq.heapify(heap)

    def _admit(self, entry: Entry) -> None:
        """Checks a job new to the queue and counts it in its shape (the caller puts it in the queue)."""
        job = entry.job
        if job.id in self.policy.cluster.jobs:
            raise EngineError(f"duplicate job id {job.id}")
        if job.gpus > self.policy.cluster.max_gpus:
            raise EngineError(
                f"job {job.id}: {job.gpus} GPUs per instance exceed the largest node ({self.policy.cluster.max_gpus})"
            )
        if entry.limit is not None and not entry.limit >= 0:
            raise EngineError(f"job {job.id}: time limit must be >= 0 seconds, got {entry.limit!r}")
        if self.discipline == "backfill":  # only the backfill walk reads shapes; fifo skips their upkeep
            shape = _shape(entry)
            self._shapes[shape] += 1
            heap = self._shortest.get(shape)
            if heap is None:
                heap = self._shortest[shape] = []
            heapq.heappush(heap, (self._estimate(entry), job.id))

    def adopt(self, job: Job, nodes: Sequence[str], start: float, limit: float | None = None,
              eligible: Collection[str] | None = None) -> None:
        """A job already running on ``nodes`` (instance i on nodes[i]) since ``start``; ``eligible``: the nodes it
        may run on (None: any)."""
        if self.knows(job.id):
            raise EngineError(f"duplicate job id {job.id}")
        self.policy.adopt(job, nodes, eligible)
        self._expect(job.id, start, limit)

    def expect(self, ends: Mapping[str, float | None]) -> None:
        """When the jobs the policy holds are expected to end (None: no estimate); earlier estimates go.

        For a driver that mirrors Slurm into the policy: the daemon tells its scheduler
        Slurm's end times (start + time limit) each cycle.
        """
        old, self._ends = self._ends, {}
        running = self.running
        added = []
        for job_id, end in ends.items():
            if job_id not in running:
                raise EngineError(f"an expected end for job {job_id}, which does not run")
            end = math.inf if end is None else end
            known = old.get(job_id)
            if known is None or known[0] != end:
                self._seq += 1
                known = (end, self._seq)
                added.append((end, self._seq, job_id))
            else:
                del old[job_id]
            self._ends[job_id] = known
        if self.discipline != "backfill":  # as in _expect: only reservations read the order
            return
        if 4 * (len(added) + len(old)) > len(self._by_end):
            self._by_end = sorted((end, seq, job_id) for job_id, (end, seq) in self._ends.items())
            return
        # a queue that hardly changed: take out the estimates gone or changed, put in the new ones
        by_end = self._by_end
        for job_id, (end, seq) in old.items():
            del by_end[bisect.bisect_left(by_end, (end, seq, job_id))]
        for item in added:
            bisect.insort(by_end, item)

    def finish(self, job_id: str, budget: int | None = None) -> list[Migration]:
        """A running job ended: free its GPUs and compact within ``budget``. Starts nothing (call ``drain``)."""
        return self._finish(job_id, budget).migrations

    def _finish(self, job_id: str, budget: int | None) -> Step:
        if job_id not in self.running:
            raise EngineError(f"departure of unknown job {job_id}")
        self._forget(job_id)
        step = Step(migrations=list(self.policy.remove(job_id)))
        _compacted(step, self.policy.compact(budget))
        return step

    def withdraw(self, job_id: str) -> None:
        """A queued job left the queue (cancelled, or Slurm started it elsewhere)."""
        entry = self.queue.pop(job_id, None)
        if entry is None:
            raise EngineError(f"job {job_id} is not queued")
        self._unshape(entry)
        self._deadline.pop(job_id, None)

    def arrive(
        self,
        job: Job,
        eligible: Collection[str] | None = None,
        *,
        now: float = 0.0,
        limit: float | None = None,
        managed: bool = True,
        budget: int | None = None,
    ) -> Step:
        """Queue ``job`` (behind anything already waiting) and start whatever now may start."""
        self.submit(job, eligible, limit, managed)
        return self.drain(now, budget)

    def depart(self, job_id: str, *, now: float = 0.0, budget: int | None = None) -> Step:
        """``job_id`` ended (or left the queue): free its GPUs, compact, start what now may start."""
        if job_id in self.queue:
            self.withdraw(job_id)
            return self.drain(now, budget)
        step = self._finish(job_id, budget)
        step.extend(self.drain(now, remaining(budget, step.spent)))
        return step

    # -- the disciplines ---------------------------------------------------------------------

    def drain(self, now: float = 0.0, budget: int | None = None) -> Step:
        step = Step()
        self._budget = budget
        self.reservation = None
        if self.discipline == "fifo":
            # Only the head can start, so never walk (or copy) the whole queue.
            while self.queue:
                head = next(iter(self.queue.values()))
                # fifo keeps no expected ends (no reservation): a blocked head's wait is not known
                if not (self._start(head, None, now, step) or (
                        head.managed and self._make_room(head, now, step, None))):
                    break
            else:
                self.policy.blocked(None)
            return step
        self._backfill(now, step)
        return step

    def _make_room(self, head: Entry, now: float, step: Step, reservation: Reservation | None) -> bool:
        """Tell the policy what is blocked; if it migrates to make room, try the head once more.

        Only for managed jobs: the policy does not place the others, Slurm does. What moves are worth is the
        head's expected wait by its ``reservation`` (None: no estimate says when it fits, any move is worth it)
        over ROOM_GATE restarts a move.
        """
        worth = math.inf
        if reservation is not None and self.restart_s > 0:
            worth = (reservation.shadow - now) / (ROOM_GATE * self.restart_s)
        done = self.policy.blocked(head.job, head.eligible, self._left(step), worth)
        _compacted(step, done)
        if not done.moves:
            return False
        return self._start(head, None, now, step)

    def _room_for(self, head: Entry, now: float, step: Step) -> tuple[bool, Reservation | None]:
        """Make room for a blocked head as its reservation says it is worth: whether it started, and if not its
        reservation (made again where the moves changed the layout)."""
        reservation, moved = self._reserve(head, now), len(step.migrations)
        if self._make_room(head, now, step, reservation):
            return True, None
        return False, reservation if len(step.migrations) == moved else self._reserve(head, now)

    def _backfill(self, now: float, step: Step) -> None:
        while self._walk(now, step):
            # a held head started on what the jobs that went first left it (no GPU idles for the
            # slack): the walk starts over behind it
            self.reservation = None

    def _walk(self, now: float, step: Step) -> bool:
        """One backfill walk down the queue; True when it ended by starting a held head (walk again)."""
        # A shape that found no place stays refused until something else starts (placing
        # only takes GPUs, but an ABS placement can open a vacancy), so a long queue of
        # blocked jobs costs one attempt per shape, and the walk ends once all are refused.
        refused: dict[tuple, bool] = {}  # shape -> refused even when short (True) or only when long
        head: Entry | None = None
        deadline: float | None = None  # the head's slack deadline, if it has one
        everywhere = 0  # shapes refused whatever the job's length
        held: Entry | None = None  # a head within its slack: 1-GPU jobs go first, then it
        for entry in list(self.queue.values()):
            shape = _shape(entry)
            if head is None:
                held = entry if self._holds(entry, now) else None
                if held is None and self._start(entry, None, now, step):
                    continue
                if held is None and entry.managed:
                    started, reservation = self._room_for(entry, now, step)
                    if started:
                        continue
                else:
                    reservation = self._reserve(entry, now)
                self.reservation = reservation
                refused[shape] = True
                everywhere += 1
                # A head that cannot be planned (no estimates) reserves nothing, as in Slurm:
                # the next blocked job may reserve instead.
                head = entry if self.reservation is not None else None
                deadline = self._slack_deadline(head)
                if everywhere == len(self._shapes):
                    break
                continue
            res = self.reservation
            # a 1-GPU job may delay a slack head up to its deadline; everything else up to the shadow time
            horizon = None if res is None else (
                max(res.shadow, deadline) if deadline is not None and _passes(shape) else res.shadow)
            short = horizon is None or now + self._estimate(entry) <= horizon
            seen = refused.get(shape)
            if seen or (seen is False and not short):
                continue
            moves = len(step.migrations)
            ok = self._start(entry, None, now, step) if short else self._start_outside(entry, now, step)
            if head is not None and (len(step.migrations) != moves or (
                    ok and short and horizon is not None and now + self._estimate(entry) > res.shadow)):
                # moves changed the layout, or a job within the slack took GPUs the head was to have
                self.reservation = self._reserve(head, now)
            if ok:
                if refused:
                    refused.clear()
                    everywhere = 0
                continue
            # A shape refused as long is refused everywhere once none of its jobs is short.
            refused[shape] = short or (horizon is not None and now + self._least_estimate(shape) > horizon)
            if refused[shape]:
                everywhere += 1
                if everywhere == len(self._shapes):
                    break
        if held is not None:
            if self._start(held, None, now, step):
                return True
            started, reservation = self._room_for(held, now, step)
            if started:
                return True
            if head is held:
                self.reservation = reservation
        elif head is None:
            self.policy.blocked(None)
        return False

    def _holds(self, entry: Entry, now: float) -> bool:
        """Whether a head that may fit now lets 1-GPU jobs go first: it has slack, and its deadline is ahead."""
        if not self._has_slack(entry):
            return False
        deadline = self._deadline.get(entry.job.id)
        return deadline is None or now < deadline

    def _has_slack(self, entry: Entry) -> bool:
        job = entry.job
        return bool(self.slack) and entry.managed and entry.limit is not None and job.instances == 1 and (
            job.gpus >= self.policy.cluster.max_gpus)

    def _slack_deadline(self, head: Entry | None) -> float | None:
        """A reserved head's slack deadline (set by its first reservation), or None: EASY's rule for it."""
        if head is None or not self._has_slack(head):
            return None
        res = self.reservation
        assert res is not None
        return self._deadline.setdefault(head.job.id, res.shadow + self.slack * self._estimate(head))

    def _start_outside(self, entry: Entry, now: float, step: Step) -> bool:
        """Start a job that ends after the shadow time only on GPUs the reservation does not need."""
        res = self.reservation
        assert res is not None
        c = self.policy.cluster
        g = entry.job.gpus
        # A reserved node matters only where more GPUs are free now than it can spare.
        tight = [i for i, spare in res.spare.items() if c.free_gpus(i) > spare]
        if not tight:
            return self._start(entry, None, now, step, res)
        closed = tuple(c.nodes[i].name for i in tight if res.spare[i] < g)
        allowed = None
        if closed:
            # The same set object while its inputs repeat (jobs that fail leave the layout as it was): the
            # policy keeps the node indexes of the last set it was handed, thousands of names at 16,384 nodes.
            key = (entry.eligible, closed)
            if self._outside is None or self._outside[0] != key:
                self._outside = key, frozenset(c.index if entry.eligible is None else entry.eligible).difference(closed)
            allowed = self._outside[1]
        return self._start(entry, allowed, now, step, res)

    def _start(
        self, entry: Entry, allowed: frozenset[str] | None, now: float, step: Step, res: Reservation | None = None
    ) -> bool:
        """Place one queued job; with ``res``, only within the reserved nodes' spare GPUs."""
        job = entry.job
        eligible = entry.eligible if allowed is None else allowed
        if self.refine is not None:
            eligible = self.refine(job, eligible)
        policy = self.policy
        if not entry.managed:
            return self._start_foreign(entry, eligible, now, step, res)
        candidates = policy.candidates(job, eligible) if self.explain else ()
        decision = policy.place(job, eligible, self._left(step))
        if decision is None:
            return False
        if candidates:
            decision = replace(decision, candidates=candidates)
        step.migrations.extend(decision.migrations)  # filler pulls happen before Compact's moves
        step.spent += len(decision.migrations)
        if res is not None and not self._within_spare(job.id, res):
            # The policy stacked instances beyond a reserved node's spare: not this job, not now.
            step.migrations.extend(policy.remove(job.id))
            return False
        self._dequeue(entry)
        step.decisions.append(decision)
        self._expect(job.id, now, entry.limit)
        _compacted(step, policy.compact(self._left(step)))
        if self.on_start is not None:
            self.on_start(decision)
        return True

    def _start_foreign(
        self, entry: Entry, eligible: frozenset[str] | None, now: float, step: Step, res: Reservation | None
    ) -> bool:
        c = self.policy.cluster
        if self.foreign is None:
            raise EngineError(f"job {entry.job.id} is not managed and no placement for such jobs is set")
        allowed = None if eligible is None else frozenset(c.index[n] for n in eligible if n in c.index)
        nodes = self.foreign(c, entry.job, allowed)
        if nodes is None:
            return False
        if res is not None:
            use = Counter(nodes)
            if any(use[i] * entry.job.gpus > res.spare[i] for i in use if i in res.spare):
                return False
        job = replace(entry.job, migratable=False)
        names = tuple(c.nodes[i].name for i in nodes)
        self.policy.adopt(job, names)
        self._dequeue(entry)
        step.decisions.append(Decision(job.id, names, job.gpus, "not managed: placed by Slurm, adopted pinned"))
        self._expect(job.id, now, entry.limit)
        _compacted(step, self.policy.compact(self._left(step)))
        if self.on_start is not None:
            self.on_start(step.decisions[-1])
        return True

    def _left(self, step: Step) -> int | None:
        """What is left of the drain's budget after what ``step`` spent."""
        return remaining(self._budget, step.spent)

    def _within_spare(self, job_id: str, res: Reservation) -> bool:
        c = self.policy.cluster
        use: Counter[int] = Counter()
        for key, i in c.instances_of(job_id):
            if i in res.spare:
                use[i] += c.gpus_of(key)
        ok = all(use[i] <= res.spare[i] for i in use)
        if ok:
            for i, gpus in use.items():
                res.spare[i] -= gpus
        return ok

    # -- the reservation ---------------------------------------------------------------------

    def _reserve(self, head: Entry, now: float) -> Reservation | None:
        """When and where the head fits on the projected free GPUs; None if never by any estimate."""
        c = self.policy.cluster
        job = head.job
        g, need, distinct = job.gpus, job.instances, job.distinct_nodes
        allowed = None if head.eligible is None else {c.index[n] for n in head.eligible if n in c.index}

        def usable(i: int) -> bool:
            return c.available[i] and (allowed is None or i in allowed)

        def room(free: int) -> int:
            return (1 if free >= g else 0) if distinct else max(free, 0) // g

        capacity = self._room_now(g, distinct, allowed)
        projected: dict[int, int] = {}  # node -> free GPUs at the time reached so far (touched nodes)
        shadow = now
        k = 0
        by_end = self._by_end
        while capacity < need:
            if k == len(by_end):
                return None
            end = by_end[k][0]
            if math.isinf(end):
                return None
            # every job expected to end at this instant releases its GPUs together
            while k < len(by_end) and by_end[k][0] == end:
                for key, i in c.instances_of(by_end[k][2]):
                    if not usable(i):
                        continue
                    before = projected.get(i, c.free_gpus(i))
                    after = before + c.gpus_of(key)
                    projected[i] = after
                    capacity += room(after) - room(before)
                k += 1
            shadow = max(end, now)
        # best fit on projected free GPUs, then the fewest free now
        cands = [(p, c.free_gpus(i), i) for i, p in projected.items() if p >= g]
        taken = 0
        for f in range(g, c.free.max_key + 1):
            if taken >= need:
                break
            for i in c.free.bucket(f):
                if i not in projected and usable(i):
                    cands.append((f, f, i))
                    taken += room(f)
                    if taken >= need:
                        break
        cands.sort()
        nodes: dict[int, int] = {}
        spare: dict[int, int] = {}
        left = need
        for p, _, i in cands:
            if left == 0:
                break
            n = min(room(p), left)
            nodes[i] = n * g
            spare[i] = p - n * g
            left -= n
        return Reservation(job.id, shadow, nodes, spare)

    def _room_now(self, g: int, distinct: bool, allowed: set[int] | None) -> int:
        """Instances of ``g`` GPUs the free GPUs hold now, node by node (a raw count)."""
        c = self.policy.cluster
        if allowed is None:
            free = c.free
            return sum((1 if distinct else f // g) * free.count(f) for f in range(g, free.max_key + 1))
        out = 0
        for i in allowed:
            f = c.free_gpus(i) if c.available[i] else 0
            out += (1 if f >= g else 0) if distinct else max(f, 0) // g
        return out

    # -- invariants ----------------------------------------------------------------------------

    def check(self) -> None:
        """Assert the queue's own bookkeeping and the reservation's promise (simulator debug mode)."""
        assert set(self._ends) <= set(self.running), "an expected end for a job that does not run"
        if self.discipline == "backfill":
            assert [e[2] for e in self._by_end] == sorted(self._ends, key=self._ends.__getitem__), "end order"
        assert not set(self.queue) & set(self.running), "a job is queued and running"
        if self.discipline == "backfill":
            assert self._shapes == Counter(_shape(e) for e in self.queue.values()), "shape counts"
        res = self.reservation
        if res is None:
            return
        assert res.job in self.queue, f"reservation for {res.job}, which is not queued"
        # What runs past the shadow time on a reserved node must leave the head its GPUs.
        c = self.policy.cluster
        for i, gpus in res.nodes.items():
            staying = sum(
                c.gpus_of(key) for key in c.on_node[i] if self.expected_end(key[0]) > res.shadow
            )
            assert c.capacity[i] - staying >= gpus, (
                f"node {c.nodes[i].name}: {staying} GPUs stay past the shadow time {res.shadow:g}, "
                f"{gpus} reserved for {res.job}"
            )

    # -- bookkeeping ---------------------------------------------------------------------------

    def _estimate(self, entry: Entry) -> float:
        return math.inf if entry.limit is None else entry.limit * self.estimate_factor

    def _expect(self, job_id: str, start: float, limit: float | None) -> None:
        end = math.inf if limit is None else start + limit * self.estimate_factor
        self._seq += 1
        self._ends[job_id] = (end, self._seq)
        if self.discipline == "backfill":  # only reservations read the order; fifo skips its upkeep
            bisect.insort(self._by_end, (end, self._seq, job_id))

    def _forget(self, job_id: str) -> None:
        # A job already in the policy when the scheduler came has no estimate.
        known = self._ends.pop(job_id, None)
        if known is not None and self.discipline == "backfill":
            k = bisect.bisect_left(self._by_end, (*known, job_id))
            del self._by_end[k]

    def _dequeue(self, entry: Entry) -> None:
        """A queued job starts."""
        del self.queue[entry.job.id]
        self._unshape(entry)
        self._deadline.pop(entry.job.id, None)

    def _unshape(self, entry: Entry) -> None:
        if self.discipline != "backfill":
            return
        shape = _shape(entry)
        self._shapes[shape] -= 1
        if not self._shapes[shape]:
            del self._shapes[shape]
            del self._shortest[shape]

    def _least_estimate(self, shape: tuple) -> float:
        """The shortest estimate among the queued jobs of ``shape``."""
        heap = self._shortest[shape]
        # skip jobs gone, and those requeued since with another limit or shape (their entry is new)
        while (entry := self.queue.get(heap[0][1])) is None or (
                self._estimate(entry) != heap[0][0] or _shape(entry) != shape):
            heapq.heappop(heap)
        return heap[0][0]


def _compacted(step: Step, done: Compaction) -> None:
    step.migrations.extend(done.moves)
    step.spent += done.spent


def _passes(shape: tuple) -> bool:
    """Whether jobs of ``shape`` may use a slack head's slack: one managed instance of one GPU."""
    instances, gpus, _, _, managed = shape
    return instances == 1 and gpus == 1 and managed


def _shape(entry: Entry) -> tuple:
    """What decides whether a job fits: two jobs of one shape fit or fail together."""
    job = entry.job
    return (job.instances, job.gpus, job.distinct_nodes, entry.eligible, entry.managed)
