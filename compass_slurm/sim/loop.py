"""The event loop: a virtual clock driving a Scheduler(policy), exactly as the daemon drives one.

Events are arrivals (at submit time) and completions (start + run time + the
migration pauses the job has accumulated), taken in time order. At equal
times completions come first, so a job submitted the second another ends can
use its GPUs; equal-time completions go in the order their jobs were started,
equal-time arrivals in trace order. With ``perturb`` (a seed) both ties are broken in a seeded random order
instead: every order is as defensible as the trace's, and on one window the choice alone moves the results
by tens of percent (issue 32), so a claim should hold over several.

Migrations: every migration pauses the migrated job for ``migration_delay``
seconds (checkpoint, requeue, restart), pushing its completion that much
later. A job is paused once per event even if several of its instances moved
in it (they restart together), and pauses from successive events add up.
The whole gang waits, so the GPU-seconds lost are delay x the job's GPUs.

The daemon in time (``cycle_interval``, ``watch``): arrivals are acted on at once (the
wrapper's notice, or the look that finds a new managed job, wakes a cycle), departures
at the daemon's next look (``watch``: its cheap look notices the job gone and starts a
cycle) or next cycle, whichever comes first; the cycle then sees every event so far.

The queue discipline is the Scheduler's (``fifo`` or ``backfill``, see
scheduler.py): the simulator only tells it the time, each job's run-time estimate
(its real duration; the Scheduler multiplies by ``estimate_factor``), and which jobs
it does not manage (placed as Slurm's defaults place them, adopted pinned). The
migration budget is the daemon's sliding-hour RateLimit (and its burst cap), spent by the same code.
"""

from __future__ import annotations

import heapq
import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ..engine.fragmentation import measure
from ..engine.model import Node
from ..engine.policies.base import make_policy
from ..engine.disciplines import EASY_SLACK, SIM_RESTART_S
from ..engine.policies.slurm_like import slurm_nodes
from ..engine.rate_limit import RateLimit, Setting
from ..engine.scheduler import Scheduler, Step
from ..native_stdout import native_stdout_silenced
from .metrics import Metrics, Timeline, summarize
from .workloads import SimJob

#: Progress is reported every this many events (and once at the end).
PROGRESS_EVERY = 4096


class InvariantError(AssertionError):
    """``check`` mode found the engine in a state it must never reach."""


@dataclass(frozen=True)
class SimConfig:
    policy: str
    nodes: tuple[Node, ...]
    migration_delay: float = SIM_RESTART_S
    queue: str = "fifo"
    check: bool = False
    keep_timeline: bool = True
    estimate_factor: float = 1.0
    #: the daemon's sliding-hour budget, a ``migrations_per_hour`` setting (engine/rate_limit.py); None: unlimited
    migrations_per_hour: Setting | None = None
    #: the daemon's burst cap, a ``migrations_burst`` setting (the most in any 5 minutes); None: unlimited
    migrations_burst: Setting | None = None
    #: the daemon's cycle: departures are acted on at the next multiple of this many seconds (0: at once);
    #: arrivals at once, as the wrapper's notice wakes the daemon
    cycle_interval: float = 0.0
    #: with a cycle: the daemon's look between cycles, every this many seconds, notices a departure and
    #: starts a cycle at once (the next multiple of it, when sooner than the next cycle; 0: no look)
    watch: float = 0.0
    #: backfill: 1-GPU jobs may delay a blocked one-node whole-node head up to this many times its
    #: estimate past its first reservation (engine/scheduler.py; 0: EASY's rule)
    slack: float = EASY_SLACK
    #: a seed: same-instant arrivals and same-instant completions in a seeded random order (None: trace order
    #: and start order)
    perturb: int | None = None


@dataclass(frozen=True)
class SimResult:
    policy: str
    metrics: Metrics
    events: int
    wall_s: float
    timeline: Timeline | None
    #: with the timeline: when each job started and ended (seconds, by job id)
    started: Mapping[str, float] | None = None
    ended: Mapping[str, float] | None = None


def simulate(jobs: Sequence[SimJob], config: SimConfig, progress: Callable[[int], None] | None = None) -> SimResult:
    """Run ``jobs`` (in submit order) through ``config.policy`` on ``config.nodes``."""
    with native_stdout_silenced():  # the Phi* solver's native output must not mix with a report on stdout
        return Simulation(jobs, config).run(progress)


def unplaceable(jobs: Sequence[SimJob], nodes: Sequence[Node]) -> str | None:
    """Why the first job that no empty cluster of ``nodes`` could hold cannot run, or None."""
    room: dict[tuple[int, bool], int] = {}
    for sj in jobs:
        job = sj.job
        key = (job.gpus, job.distinct_nodes)
        if key not in room:
            per_node = [n.gpus // job.gpus for n in nodes]
            room[key] = sum(min(p, 1) for p in per_node) if job.distinct_nodes else sum(per_node)
        if room[key] < job.instances:
            return (
                f"job {job.id} needs {job.instances} x {job.gpus} GPUs but the {len(nodes)} nodes "
                f"hold at most {room[key]} such instances"
            )
    return None


class Simulation:
    def __init__(self, jobs: Sequence[SimJob], config: SimConfig) -> None:
        if not jobs:
            raise ValueError("the workload is empty: no job to simulate")
        why = unplaceable(jobs, config.nodes)
        if why:
            raise ValueError(f"{why}; give more nodes (--nodes, or --eta to scale a --layout) or bigger ones "
                             "(--gpus-per-node)")
        self.tiebreak = random.Random(config.perturb).random if config.perturb is not None else None
        if self.tiebreak is not None:  # still in submit order
            keys = {id(sj): self.tiebreak() for sj in jobs}
            jobs = sorted(jobs, key=lambda sj: (sj.submit, keys[id(sj)]))
        self.jobs = jobs
        self.config = config
        self.policy = make_policy(config.policy, config.nodes)
        self.scheduler = Scheduler(self.policy, config.queue, config.estimate_factor, foreign=slurm_nodes,
                                   slack=config.slack, restart_s=config.migration_delay)
        self.rate = RateLimit(config.migrations_per_hour, len(config.nodes), config.migrations_burst)
        self.by_id = {sj.job.id: sj for sj in jobs}
        self.total_gpus = sum(n.gpus for n in config.nodes)
        self.now = 0.0
        self.end: dict[str, float] = {}  # running job -> expected completion
        #: (completion, start order or a perturbed tie-break, job); stale when end differs
        self.heap: list[tuple[float, float, str]] = []
        self.seq = 0
        self.used = 0
        self.events = 0
        self.arrived = 0
        self.done = 0
        self.started: dict[str, float] = {}
        self.ended: dict[str, float] = {}
        self.migrations = 0
        self.migration_times: list[float] = []
        self.migration_gpu_s = 0.0
        self.timeline = Timeline()
        #: job -> the shadow time of the first reservation made for it (what EASY promised)
        self.promised: dict[str, float] = {}

    # -- the loop ------------------------------------------------------------------------

    def run(self, progress: Callable[[int], None] | None = None) -> SimResult:
        started = time.perf_counter()
        jobs, heap, end = self.jobs, self.heap, self.end
        n, i = len(jobs), 0
        scheduler, check = self.scheduler, self.config.check
        completion = self._next_completion()
        cycle, tick = self.config.cycle_interval, math.inf  # tick: the next daemon cycle with work to do
        look = self.config.watch if 0 < self.config.watch < cycle else cycle
        while True:
            arrival = jobs[i].submit if i < n else math.inf
            if tick < min(completion, arrival):
                # the cycle sees every event up to now at once, as the daemon reads Slurm's state
                t = self.now = tick
                tick = math.inf
                step = scheduler.drain(t, self.rate.budget(t))
            elif completion <= arrival and completion < math.inf:
                t, _, job_id = heapq.heappop(heap)
                del end[job_id]
                self.now = t
                self._finished(job_id)
                if cycle:
                    step = Step(migrations=scheduler.finish(job_id, self.rate.budget(t)))
                    tick = min(tick, math.ceil(t / look) * look)
                else:
                    step = scheduler.depart(job_id, now=t, budget=self.rate.budget(t))
            elif i < n:
                sj = jobs[i]
                i += 1
                t = self.now = sj.submit
                self.arrived += 1
                step = scheduler.arrive(sj.job, sj.eligible, now=t, limit=sj.duration if sj.limit is None else sj.limit,
                                        managed=sj.managed, budget=self.rate.budget(t))
            else:
                break
            self._apply(step)
            res = scheduler.reservation
            if res is not None and res.job not in self.promised:
                self.promised[res.job] = res.shadow
            self.events += 1
            if check:
                self._check()
            completion = self._next_completion()
            if min(completion, jobs[i].submit if i < n else math.inf, tick) > t:
                self._sample()  # the last event at this instant: the state now holds for a while
            if progress is not None and self.events % PROGRESS_EVERY == 0:
                progress(self.events)
        if scheduler.queue:
            raise InvariantError(f"{len(scheduler.queue)} job(s) never started although the cluster emptied")
        if progress is not None:
            progress(self.events)
        metrics = summarize(
            self.timeline,
            self.jobs,
            self.started,
            self.ended,
            len(self.config.nodes),
            self.total_gpus,
            max(n.gpus for n in self.config.nodes),
            self.migration_times,
            self.migration_gpu_s,
            {g.label: len(g.members) for g in self.policy.cluster.groups},
        )
        wall = time.perf_counter() - started
        if not self.config.keep_timeline:
            return SimResult(self.config.policy, metrics, self.events, wall, None)
        return SimResult(self.config.policy, metrics, self.events, wall, self.timeline, self.started, self.ended)

    def _next_completion(self) -> float:
        """Time of the next real completion, dropping entries a migration pause superseded."""
        heap, end = self.heap, self.end
        while heap:
            t, _, job_id = heap[0]
            if end.get(job_id) == t:
                return t
            heapq.heappop(heap)
        return math.inf

    def _finished(self, job_id: str) -> None:
        sj = self.by_id[job_id]
        self.used -= sj.job.total_gpus
        self.done += 1
        self.ended[job_id] = self.now

    def _apply(self, step: Step) -> None:
        now, end, by_id = self.now, self.end, self.by_id
        for decision in step.decisions:
            sj = by_id[decision.job]
            self.used += sj.job.total_gpus
            self.started[decision.job] = now
            self._schedule(decision.job, now + sj.duration)
        if step.migrations:
            self.migrations += len(step.migrations)
            self.rate.spend(now, len(step.migrations))
            self.migration_times.extend([now] * len(step.migrations))
            delay = self.config.migration_delay
            for job_id in {m.job: None for m in step.migrations}:  # once per job, in a fixed order
                self.migration_gpu_s += delay * by_id[job_id].job.total_gpus
                if delay:
                    self._schedule(job_id, end[job_id] + delay)

    def _schedule(self, job_id: str, at: float) -> None:
        self.end[job_id] = at
        self.seq += 1
        heapq.heappush(self.heap, (at, self.seq if self.tiebreak is None else self.tiebreak(), job_id))

    def _sample(self) -> None:
        f = measure(self.policy.cluster)
        tl = self.timeline
        tl.time.append(self.now)
        tl.queued.append(len(self.scheduler.queue))
        tl.running.append(len(self.end))
        tl.gpus_used.append(self.used)
        tl.partial.append(f.partial)
        tl.phi_star.append(f.phi_star)
        tl.wcc.append(f.wcc)
        tl.group_partial.append(tuple(g.partial for g in f.groups))

    # -- debug mode ----------------------------------------------------------------------

    def _check(self) -> None:
        c = self.policy.cluster
        where = f"after event {self.events} at t={self.now:g}"
        for i, node in enumerate(c.nodes):
            if c.used[i] > c.capacity[i] or c.used[i] != sum(c.on_node[i].values()):
                raise InvariantError(f"{where}: node {node.name} holds {c.used[i]} of {c.capacity[i]} GPUs")
        for job_id, job in c.jobs.items():
            missing = [k for k in range(job.instances) if (job_id, k) not in c.location]
            if missing:
                raise InvariantError(f"{where}: job {job_id} runs without instance(s) {missing}")
            if job.distinct_nodes and len({c.location[(job_id, k)] for k in range(job.instances)}) < job.instances:
                raise InvariantError(f"{where}: job {job_id} asked for a node per instance and shares one")
            eligible = self.by_id[job_id].eligible
            # placed or moved, a job of a GPU type or constraint stays on its nodes (migrations stay in a group)
            outside = [] if eligible is None else [c.nodes[c.location[(job_id, k)]].name for k in range(job.instances)
                                                    if c.nodes[c.location[(job_id, k)]].name not in eligible]
            if outside:
                raise InvariantError(f"{where}: job {job_id} runs on {', '.join(outside)}, outside its eligible nodes")
        if set(c.jobs) != set(self.end):
            raise InvariantError(f"{where}: policy runs {sorted(set(c.jobs) ^ set(self.end))} unlike the simulator")
        if len(self.scheduler.queue) + len(c.jobs) + self.done != self.arrived:
            raise InvariantError(f"{where}: queued + running + done != arrived: a job was lost")
        if sum(c.used) != self.used:
            raise InvariantError(f"{where}: policy uses {sum(c.used)} GPUs, the simulator counts {self.used}")
        try:
            self.scheduler.check()
        except AssertionError as err:
            raise InvariantError(f"{where}: scheduler: {err}") from None
        overspent = self.rate.overspent(self.now)
        if overspent:
            raise InvariantError(f"{where}: {overspent}")
        try:
            self.policy.check()
        except AssertionError as err:
            raise InvariantError(f"{where}: {self.config.policy}: {err}") from None
