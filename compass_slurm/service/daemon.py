"""The helper daemon: one cycle every ``interval`` seconds, or sooner when woken.

A cycle reads Slurm's state once and then runs four steps, each a method of Daemon that does only its own:

- sync (``_sync``, with ``sync.py``): remove ended jobs from the policy, adopt GPU allocations the
  daemon did not make (pinned, never moved), mirror node availability;
- decide (``_decide``): re-plan stale decisions; the managed pending jobs go to a Scheduler (``engine/scheduler.py``,
  discipline ``queue``: ``backfill`` by default, as the simulator's) in Slurm's priority order, with
  Slurm's time limits as run-time estimates: the highest-priority job that does not fit
  gets a reservation, and lower jobs start only where they do not delay it; it returns the decisions,
  and tells Slurm nothing;
- actuate (``_actuate``, with ``actuate.py``): log the decisions (moves included) before Slurm hears of
  them, so that no job runs where the log does not say, even if the daemon is killed half-way through
  telling it; pin each decision in Slurm (one it refuses is undone), requeue Compact's migrations
  (only ``--migratable`` jobs, at most ``migrations_per_hour`` in a sliding hour: by default one per
  managed GPU node, at least 12, re-resolved when the nodes change; and at most ``migrations_burst``
  in any 5 minutes, 10% of the hour's by default),
  renew the begin-time leases of managed jobs still waiting;
- publish (``_publish``, with ``publish.py``): log the rest (migrations, errors, a sample; a decision Slurm
  refused was rewritten as such when it refused) under the same cycle, rewrite the Prometheus
  textfile and the anchors file.

One policy object and its Scheduler live across cycles and follow Slurm incrementally; a restart
rebuilds them from Slurm, so nothing is lost with the process. Managed jobs are pending
GPU jobs whose comment carries the compass marker; the wrapper submits them with
``--begin=now+<lease>``, so if the daemon is gone Slurm starts them itself after the
lease. A placed job that has not started when its nodes stop qualifying (or after
``stale_after`` seconds) is re-planned; Slurm refusing an update undoes the decision
(action ``failed``). A cycle whose Slurm read fails or cannot be parsed is skipped and
the error recorded: nothing is changed on a partial picture. The control socket's
``submitted`` wakes the loop for an early cycle (``Daemon.handlers()``), and so does the
cheap look every ``watch`` seconds between cycles when it finds a managed pending job the
last cycle did not see, or that a GPU job the last cycle saw running has left its nodes
(its GPUs are free: handing them on need not wait for the next ``interval``). Cycles are
at least ``min_cycle_spacing`` apart whatever wakes them, and the spacing doubles (up to
``interval``) while more than one job piles up within it: a stream of submissions costs
slurmctld one read per interval, not one per job (``Daemon._wait``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Set
from dataclasses import dataclass, replace
from itertools import compress
from operator import attrgetter, not_

from .. import collector
from ..config import Config
from ..engine.fragmentation import Fragmentation
from ..engine.model import Decision, EngineError, Migration
from ..engine.policies.base import Policy, make_policy
from ..engine.rate_limit import HOUR, RateLimit
from ..engine.scheduler import Entry, Scheduler
from ..slurm import hostlist
from ..slurm.backend import Asked, Backend
from ..slurm.errors import SlurmError
from ..slurm.requests import Request, id_order
from ..slurm.state import SlurmJob
from ..slurm.translate import Observation, Pending, Translator
from ..slurm.translation_cache import TranslationCache
from .actuate import NOT_PENDING, Actuator, refused_for_good
from .control import Handler, Peer, RequestError, require_owner
from .bookkeeping import CycleReport, fmt, log
from .job_states import JobBook, JobRecord, JobState
from .leader import Leadership
from .publish import MetricsFile, Recorder, fragmentation, publish_anchors, sample
from .requeue_note import Noted, RequeueNote
from .spool import for_log
from .store import PINS, DecisionRecord, Pruner, StoreError
from .sync import (left_queue, mirror, pinned_by_us, pinned_to, ran_elsewhere, refused_pins, same_nodes, take_over,
                   take_over_requeues, waiting_ids)

#: a job whose pins Slurm took this many times in a row without starting it (each for ``stale_after``, 30 s at
#: least) is left to Slurm, unpinned: something the daemon does not read keeps it off the nodes it chooses (a
#: reservation yet to begin, ``--exclusive=user``, a limit), and it would choose them again
UNSTARTED_LIMIT = 3
#: why a decision is not told to Slurm when neither the log nor its spool could take it
UNLOGGED = "not told to Slurm: neither the decision log nor its spool could record it"
#: why a decision is not told to Slurm when this daemon's lead ran out while it decided
FENCED = "not told to Slurm: this daemon's lead ran out (service/leader.py)"
#: why a requeued job is released (its node list cleared) when the engine state is rebuilt without it (see _sync)
DROPPED = ("not re-pinned: this daemon's lead ran out, or its log could not say, or the nodes logged cannot take it, "
           "before Slurm showed it pending")
#: how often run() collects the reference cycles that cycles froze (a full collection: 0.3 s at 16,384 nodes)
SWEEP_EVERY_S = 3600.0
#: the most of the time looks may take: the next look waits this many times the last one's seconds, if longer than
#: ``watch`` (a look at 100,000 jobs costs slurmctld about 0.5 s, and the daemon a process and a parse; at 1,000 jobs
#: it takes milliseconds and ``watch`` rules; docs/performance.md "The look")
LOOK_SPACING_PER_S = 20.0


class Daemon:
    """Runs cycles against ``backend``; ``db`` is the decision log URL (None: no log)."""

    def __init__(self, config: Config, backend: Backend, db: str | None = None, *, dry_run: bool = False,
                 clock: Callable[[], float] = time.time, publish: bool = True) -> None:
        self.config = config
        self.backend = backend
        self.db = db
        self.dry_run = dry_run
        self.clock = clock
        self.publish = publish and bool(config.anchors)
        self.policy: Policy | None = None
        #: the queue in front of the policy, kept with it across cycles (only what changed is submitted)
        self.scheduler: Scheduler | None = None
        #: every job's record beside the policy, in its named state (job_states.py)
        self.book = JobBook()
        self.recorder = Recorder(db, for_log(db, config.log_spool, config.spool_max_mb))
        #: the daemon's own note of its requeues, for a restart whose log cannot be read (a dry run keeps none)
        self.note = RequeueNote.beside(None if dry_run else self.recorder.spool)
        self.actuator = Actuator(backend, config.lease, self.note)
        #: which of the daemons sharing the log changes jobs (without a log, or in a dry run: this one)
        self.leadership = Leadership(None if dry_run else db, config.leader_lease_s)
        self.metrics = MetricsFile(config.metrics_textfile, self.recorder.spool)
        self.rate = RateLimit(config.migrations_per_hour, burst=config.migrations_burst)
        self.stale_after = max(30.0, 3 * config.interval)
        self.cycles = 0
        #: looks run since the start (each costs slurmctld a read of every job, as a cycle's job read does)
        self.looks = 0
        #: the latest translated Slurm state, for the control socket's questions
        self.observation: Observation | None = None
        #: what unchanged jobs translated to last cycle (taken as it was, not worked out again)
        self.translation_cache = TranslationCache()
        #: managed pending jobs as of the last cycle, and the pending jobs of the last look: a look that finds
        #: others starts a cycle (once: the look after knows them)
        self.seen_pending: Set[str] = frozenset()
        self.looked_pending: frozenset[str] = frozenset()
        #: GPU jobs running at the last cycle, and the jobs holding nodes at the last look: one that was in
        #: both and is gone has ended (both, so that an id the look spells otherwise never wakes a cycle)
        self.seen_running: frozenset[str] = frozenset()
        self.looked_holding: frozenset[str] = frozenset()
        self.watching = True
        #: seconds the last look took (process, slurmctld's packing of every job, parse)
        self.look_s = 0.0
        #: the fewest seconds from this cycle's start to the next one's (``_wait``: doubled while jobs pile up)
        self.spacing = config.min_cycle_spacing
        #: pokes (a submitted job each) since the last cycle began: more than one means jobs pile up
        self.pokes = 0
        #: under a stream (no look before the cycle, see _wait): the managed pending jobs before that cycle, and how
        #: many it found that they did not hold (None: not counted)
        self.pending_before: frozenset[str] | None = None
        self.arrived: int | None = None
        #: set to run the next cycle now (the control socket's "submitted"); ``stop`` ends run()
        self.wake = threading.Event()
        self.stop = threading.Event()

    @property
    def placed(self) -> Mapping[str, JobRecord]:
        return self.book.placed

    @property
    def store_errors(self) -> int:
        return self.recorder.failures

    # -- the loop ----------------------------------------------------------------------------

    def run(self, interval: float) -> None:
        """Cycle every ``interval`` seconds until ``stop`` is set; sooner when woken, or when a look every
        ``watch`` seconds finds a managed pending job the last cycle did not see (a hook-marked job tells
        no one it was submitted) or a GPU job gone that the last cycle saw running."""
        swept = time.monotonic()
        pruner = Pruner(None if self.dry_run else self.db, self.config.log_retention_days)
        while not self.stop.is_set():
            started = time.monotonic()
            self.cycle()
            if time.monotonic() - swept >= SWEEP_EVERY_S:
                collector.sweep()  # between cycles: the reference cycles frozen since the last sweep
                swept = time.monotonic()
            if (obs := self.observation) is not None and self.leadership.leads:  # retention, between cycles;
                # the jobs Slurm has keep places
                pruner.between_cycles(lambda: obs.slurm_jobs.keys() | obs.running.keys())
            self._wait(interval, started + self.spacing)
            self.wake.clear()  # every poke until now is served by the next cycle: they coalesce
            self.pokes = 0
        pruner.close()
        self.close(unpin=True)

    def _wait(self, interval: float, earliest: float = 0.0) -> None:
        """Until ``interval`` seconds from now, or sooner when woken (a poke, or news the look finds); never before
        ``earliest`` (monotonic: the spacing of cycles), whatever woke it: only ``stop`` ends the wait then.

        No look inside the spacing: whatever it found could start no cycle sooner, and each look costs slurmctld
        a read of every job. News of more than one job waiting as the spacing ends (pokes, or what the look finds)
        means jobs come faster than cycles (a stream of submissions): the next spacing doubles, up to
        ``interval``, so a stream is served by one cycle per interval rather than one per job. News of one job
        at most brings it back to ``min_cycle_spacing``: a lone job, or a user submitting one job after another
        as each starts, still starts a cycle at once. Once the spacing is the interval no look comes before the
        cycle: the jobs that cycle's own read finds new set the spacing after it."""
        deadline = time.monotonic() + interval
        if self.stop.wait(max(0.0, earliest - time.monotonic())):
            return
        if not self.wake.is_set() and self.spacing >= interval and self._watch > 0:
            # A stream: the cycle due now reads every job itself, and a look first could start it only a cycle's
            # length sooner. The jobs the last cycle found new tell whether they still pile up (none counted yet:
            # the spacing came to the interval because they did).
            piling = self.arrived is None or self.arrived > 1
            self.pending_before, self.arrived = frozenset(self.seen_pending), None
            self.spacing = self._next_spacing(piling, interval)
            return
        self.arrived = None
        news = self.pokes if self.wake.is_set() else self._looked()
        self.spacing = self._next_spacing(news > 1, interval)
        busy = self.wake.is_set() or news > 0
        while not busy and (left := deadline - time.monotonic()) > 0:
            if not 0 < self._watch < left:  # no look, or none before the cycle that reads every job anyway
                self.wake.wait(left)
                return
            busy = self.wake.wait(self._watch) or self._looked() > 0

    def _next_spacing(self, piling: bool, interval: float) -> float:
        """The spacing after the next cycle: doubled while jobs pile up within it (at most ``interval``, at
        least ``min_cycle_spacing``), else ``min_cycle_spacing``."""
        least = self.config.min_cycle_spacing
        return max(least, min(2 * self.spacing, interval)) if piling else least

    @property
    def _watch(self) -> float:
        """Seconds between looks: ``watch``, or more where a look takes long (LOOK_SPACING_PER_S); 0: no look (none
        configured, or the backend has none)."""
        if not self.watching or self.config.watch <= 0:
            return 0.0
        return max(self.config.watch, LOOK_SPACING_PER_S * self.look_s)

    def _looked(self) -> int:
        """The jobs a look now (when looks are on) finds work for a cycle in (see ``_news``)."""
        return self._news() if self._watch > 0 else 0

    def _news(self) -> int:
        """The jobs the cheap look finds work for a cycle in: new managed pending jobs, and GPU jobs gone from
        their nodes (their GPUs are free); 0: nothing for a cycle."""
        self.looks += 1
        started = time.monotonic()
        try:
            look = self.backend.look()
        except SlurmError as err:
            log.debug("looking for new pending or ended jobs: %s", err)
            return 0
        finally:
            self.look_s = time.monotonic() - started
        if look is None:
            self.watching = False  # this backend has no cheap look
            return 0
        new = look.pending - self.seen_pending - self.looked_pending
        if new and not look.comments and (obs := self.observation) is not None:
            # a look that sees no marker: a job the last cycle read without it is not the daemon's
            new -= {job_id for job_id, job in obs.find(new).items() if not job.managed}
        ended = (self.seen_running & self.looked_holding) - look.holding
        self.looked_pending, self.looked_holding = look.pending, look.holding
        return len(new) + len(ended)

    def poke(self) -> None:
        self.pokes += 1
        self.wake.set()

    def shutdown(self) -> None:
        self.stop.set()
        self.wake.set()

    def close(self, unpin: bool = False) -> None:
        """``unpin``: the daemon stops running (not after one ``--once`` cycle), and clears its pins."""
        # a stopped daemon leaves no job held: its requeued jobs are released, unpinned (those Slurm refuses,
        # still completing, keep their requeue logged and noted, and the next daemon takes them over)
        kept = self.actuator.release_on_stop(self.book, self.recorder)
        if self.leadership.leads and (why := self.note.write(self.book, self.rate.spent(), kept)):
            log.error("%s", why)
        try:
            if unpin:
                self._unpin_on_stop()
        finally:
            self.leadership.close()
            self.recorder.close()

    def _unpin_on_stop(self) -> None:
        """Clear the pins while this daemon leads and no standby is there to take them over as its own: a pin does
        not expire, and one left on a job no daemon re-plans ties it to nodes that may never free (see
        Actuator.unpin_on_stop). Not in a dry run (its pins were never made), nor while the log cannot take the
        records."""
        obs, leadership = self.observation, self.leadership
        if self.dry_run or obs is None or not leadership.alone_now() or not leadership.may_act(renew=False):
            return
        report = CycleReport(self.cycles + 1)
        if not self.recorder.may_change(report):
            return
        self.actuator.unpin_on_stop(obs, self.book, report, self.policy.name if self.policy else self.config.policy)
        self.recorder.record(report)

    def cycle(self) -> CycleReport:
        # A cycle's temporaries (the parsed documents, the scheduler's queue of every pending job)
        # die by reference counting before it ends; collecting meanwhile would only age them, and what
        # survives is the kept state, which collections need not scan again (see collector.py).
        with collector.paused(freeze=True):
            return self._cycle()

    def _cycle(self) -> CycleReport:
        started = time.monotonic()
        self.cycles += 1
        report = CycleReport(self.cycles)
        if self.leadership.step():  # leading now, or no longer: the state is rebuilt from Slurm (and the log)
            self.policy = None
        try:
            state = self.backend.read_state()
            translator = Translator(state, self.config.partitions, self.config.lease,
                                    migratable=self.config.migratable, known=self.translation_cache)
            obs = translator.observe()
            if self.pending_before is not None:  # (see _wait)
                self.arrived, self.pending_before = len(obs.pending_managed - self.pending_before), None
            self.seen_pending = obs.pending_managed
            self.seen_running = frozenset(obs.running)
            if not obs.nodes:
                scope = ", ".join(self.config.partitions) or "all"
                raise SlurmError(f"no GPU nodes in the managed partitions ({scope})")
        except SlurmError as err:
            report.skipped = str(err)
            report.error("slurm", f"cycle {self.cycles} skipped: {err}")
            self._finish(report)
            return report
        self.observation = obs
        now = self.clock()
        policy, moves = self._sync(obs, translator, report, now)
        # Only the leader changes jobs, each step only while its lease lasts; and not while the log and its spool
        # are full (see Recorder.may_change)
        if self.leadership.may_act() and self.recorder.may_change(report):
            decided = self._decide(obs, translator, policy, report, now)
            self._actuate(obs, policy, decided, moves, report, now)
        # a standby's book holds none
        if self.leadership.leads and (why := self.note.write(self.book, self.rate.spent())):
            report.error("requeue", why)
        self._publish(obs, policy, report, time.monotonic() - started, now)
        return report

    def _publish(self, obs: Observation, policy: Policy, report: CycleReport, seconds: float, now: float) -> None:
        """Log the cycle (the decisions not logged yet, migrations, errors, its sample), export the metrics and
        rewrite the anchors file."""
        report.sample = sample(obs, policy, report, seconds)
        self._finish(report)
        if self.publish:
            publish_anchors(self.config.anchors, policy, self.cycles, now)

    def _finish(self, report: CycleReport) -> None:
        leads = self.leadership.leads
        if leads or report.decisions:  # a standby's cycles are not the log's; a lead lost mid-cycle is
            self.recorder.record(report)
        self.metrics.export(report, self.clock(), leads)

    def _sync(self, obs: Observation, translator: Translator, report: CycleReport,
              now: float) -> tuple[Policy, list[Migration]]:
        """Mirror Slurm in the policy (rebuilt when the GPU nodes changed); returns it and Compact's moves."""
        policy = self.policy
        if self.note.unsure and self._log_back(obs):
            policy = None  # rebuilt: the take-over asks the log which of the held jobs are requeues of ours
        if not same_nodes(policy, obs):
            if policy is not None:
                log.warning("the GPU nodes changed: rebuilding the engine state from Slurm")
            policy = self.policy = make_policy(self.config.policy, obs.nodes)
            self.rate.resize(len(obs.nodes))  # a per-node budget follows the GPU nodes managed
            requeued = list(self.book.in_state(JobState.REQUEUED).values())
            self.book.rebuilt()
            refused = self._take_over(obs, translator, policy, report, now)
            # no job is left held: the requeued ones the take-over did not find again (this daemon no longer leads,
            # or has no log, or cannot read it), or cannot hold where logged, are released, unpinned
            dropped = [r.logged for r in requeued if self.book.state(r.id) is not JobState.REQUEUED] + refused
            if dropped:
                self.actuator.release_requeued(dropped, self.book, report, self.recorder, DROPPED)
        report.budget = self.rate.budget(now)
        if self.book.in_state(JobState.REPLANNED) and (left := left_queue(obs, self.book)):
            report.decisions += ran_elsewhere(obs, policy, left, self._where(obs, [r.job_id for r in left]))
        moves = mirror(policy, obs, self.book, report, translator.movable_to)
        refused_pins(obs, self.book)
        return policy, moves

    def _take_over(self, obs: Observation, translator: Translator, policy: Policy, report: CycleReport,
                   now: float) -> list[DecisionRecord]:
        """Take over what the log says of the jobs Slurm has pending, running or requeue-held (see take_over and
        take_over_requeues), and log where the jobs of cycles cut short (a daemon killed while telling Slurm) run or
        ran when that is not where logged. Returns the records of the requeues it cannot take over, to release."""
        if self.db is None or self.dry_run or not self.leadership.leads:
            return []
        waiting, running = waiting_ids(obs), obs.running
        held = {job.id: job for job in obs.jobs if job.held}  # an earlier daemon's requeues among them
        pending = set(waiting)
        try:
            cut = self.recorder.unfinished_cycle_jobs()
            places = self.recorder.latest_places([*waiting, *running, *cut, *held])
            # whole records only where they are needed: a pending or held job's (taken over or re-planned), and those
            # of the jobs that may have run elsewhere: running on other nodes, or ended since a cycle cut short
            ended = {j for j in cut if j in places and j not in pending and j not in running}
            records = {r.job_id: r for r in self.recorder.decisions_with_ids(
                place.id for j, place in places.items() if j in pending or j in ended or j in held
                or (j in running and set(place.nodes) != set(running[j].alloc)))}
            # the budget counts the migrations of the hour before too: a restart (or a standby taking over) is no new
            # budget, and a daemon restarted again and again would otherwise move a burst each time
            self.rate.restore(self.recorder.migration_times(now - HOUR))
        except StoreError as err:
            log.warning("earlier decisions unreadable (%s): pending jobs are placed afresh", err.message)
            return self._take_over_noted(policy, held, translator, report)
        self.note.unsure = []
        requeued, refused = take_over_requeues(policy, self.book, held, records, translator.movable_to)
        self._owed(held, self._noted()[0])
        for job_id in take_over(obs, policy, self.book,
                                {j: records[j] for j in waiting if j in records and j not in requeued}, now):
            self._older_pin(obs, job_id)
        check = [records[j] for j in sorted(records.keys() - pending - requeued, key=id_order)]
        report.decisions += ran_elsewhere(obs, policy, check, self._where(obs, [r.job_id for r in check]))
        return refused

    def _take_over_noted(self, policy: Policy, held: Mapping[str, SlurmJob], translator: Translator,
                         report: CycleReport) -> list[DecisionRecord]:
        """The log cannot be read: take over the requeues of the daemon's own note (requeue_note.py) as the log's
        would be. The held jobs it may have requeued that no note accounts for (there is none, or it cannot be read)
        are left held, for an admin may have held them, and named loudly until the log can say (``_log_back``).
        Returns the records of the requeues to release, unpinned."""
        noted, why = self._noted()
        refused: list[DecisionRecord] = []
        if noted is None:
            unsure = [j for j, job in held.items() if job.may_migrate(self.config.migratable)]
        else:
            requeued, refused = take_over_requeues(policy, self.book, held, noted.requeues, translator.movable_to)
            owed = self._owed(held, noted)
            self.rate.restore(noted.spent)
            unsure = [j for j in noted.unsure if j in held and j not in requeued and j not in owed]
        self.note.unsure = sorted(unsure, key=id_order)
        if unsure:
            message = (f"held jobs {','.join(self.note.unsure)} may be requeues of this daemon's, which it cannot "
                       f"tell from an admin's hold: its decision log cannot be read and {why}; they stay held until "
                       "the log can say (release each one no admin held: scontrol release JOB)")
            report.error("requeue", message)
            log.error("REQUEUE-HELD JOBS LEFT HELD: %s", message)
        return refused

    def _noted(self) -> tuple[Noted | None, str]:
        """What the daemon's note says (None: there is none, or it cannot be read), and why not."""
        try:
            return self.note.read(), f"the daemon keeps no note of its requeues ({self.note.path})"
        except ValueError as err:
            return None, str(err)

    def _owed(self, held: Mapping[str, SlurmJob], noted: Noted | None) -> list[str]:
        """Owe again the releases the daemon before noted it owed, of the jobs Slurm still holds; returns those."""
        if noted is None:
            return []
        owed = [j for j in noted.owed if j in held]
        self.book.owe_release(owed)
        return owed

    def _log_back(self, obs: Observation) -> bool:
        """Whether the log can be read again while jobs the daemon could not account for are still held (the state
        is then rebuilt, and the take-over asks the log about them); those no longer held are forgotten."""
        held = obs.find(set(self.note.unsure))
        self.note.unsure = [j for j in self.note.unsure if (job := held.get(j)) is not None and job.held]
        if not self.note.unsure:
            return False
        try:
            self.recorder.latest_places(self.note.unsure)
        except StoreError:
            return False
        log.warning("the decision log can be read again: rebuilding the engine state, to tell whether held jobs %s "
                    "are requeues of this daemon's", ",".join(self.note.unsure))
        return True

    # -- decide ------------------------------------------------------------------------------

    def _decide(self, obs: Observation, translator: Translator, policy: Policy, report: CycleReport,
                now: float) -> Decided | None:
        """Give the managed pending jobs to the Scheduler (``queue``); their decisions join the report, and are
        returned for Slurm to hear of them (``_actuate``). None: the engine failed, and decided nothing.

        The queue is Slurm's priority order; run-time estimates are Slurm's time limits
        (running jobs end at their start time plus their limit). Slurm hears each job's place
        only after the whole drain, because Compact may still move a job placed earlier in
        the same drain (e.g. pull it as a filler); those moves cost no requeue and are not
        returned with the other migrations made on the way.
        """
        for why in obs.skipped.items():
            log.debug("job %s left to Slurm: %s", *why)
        if obs.crowded:
            log.debug("no new work this cycle on %s: Slurm counts GPUs in use there that no job read holds (a job "
                      "started between the reads)", hostlist.compress(obs.crowded))
        self._replan_stale(obs, policy, translator, now)
        pending = self._let_go(obs, translator)
        replanned = self.book.replanned()
        by_id = dict(zip(obs.pending_ids, pending))
        queue = self._queue(obs, pending, policy)
        measured = [fragmentation(policy)]  # before the drain, then after each start
        if self.scheduler is None or self.scheduler.policy is not policy:
            self.scheduler = Scheduler(policy, self.config.queue, explain=True, slack=self.config.slack,
                                       restart_s=self.config.migration_delay)
        scheduler = self.scheduler

        def started(decision: Decision) -> None:
            measured.append(fragmentation(policy))
            p, c = by_id[decision.job], policy.cluster  # its CPUs and memory, which the engine does not count
            translator.claims.decide(p.slurm, p.job, (c.nodes[i].name for _, i in c.instances_of(p.job.id)))

        scheduler.on_start = started
        scheduler.refine = lambda job, eligible: translator.claims.narrowed(by_id[job.id].slurm, job, eligible)
        try:
            scheduler.expect(self._expected_ends(obs, policy, now))
            scheduler.requeue(queue)
            step = scheduler.drain(now, report.budget)
        except EngineError as err:
            # The engine may be left half-changed: rebuild it from Slurm next cycle.
            report.error("engine", f"{err}; rebuilding the engine state next cycle")
            self.policy = None
            return None
        report.spend(step.spent)
        if scheduler.reservation is not None:
            res = scheduler.reservation
            log.info("job %s reserved: %s at %+.0f s", res.job,
                     fmt({policy.cluster.nodes[i].name: g for i, g in res.nodes.items()}), res.shadow - now)
        decided, first = [], len(report.decisions)
        for decision, before, after in zip(step.decisions, measured, measured[1:]):
            p = by_id[decision.job]
            nodes = tuple(policy.cluster.nodes[i].name for _, i in policy.cluster.instances_of(p.job.id))
            decision = replace(decision, nodes=nodes)
            decided.append((p, decision))
            report.decisions.append(DecisionRecord.of(
                decision, p.job, policy.name, sif_before=_sif(before), sif_after=_sif(after),
                partial_before=_partial(before), partial_after=_partial(after), reason=decision.rule,
                action="dry-run" if self.dry_run else "replanned" if p.job.id in replanned else "placed",
            ))
        placed_now = {d.job for d in step.decisions}
        return Decided(decided, first, [m for m in step.migrations if m.job not in placed_now])

    def _replan_stale(self, obs: Observation, policy: Policy, translator: Translator, now: float) -> None:
        """Stale decisions leave the policy first, so their GPUs (and any overcommit) are gone before placing;
        their jobs are re-planned."""
        # (Maps and compress: one pass in C over 100,000 pending jobs, the placed ones few.)
        short: set[str] = set()
        pending, ids, placed = obs.pending, obs.pending_ids, self.book.placed
        for at in compress(range(len(ids)), map(placed.__contains__, ids)):
            p, job_id = pending[at], ids[at]
            record = placed[job_id]
            stale = self._stale(p, record, policy, now, translator, short)
            if stale is None:
                continue
            policy.remove(job_id)
            why, unstarted = stale
            if self.book.unstarted(job_id, unstarted) >= UNSTARTED_LIMIT:
                self.book.move(job_id, JobState.LEAVING, unpin=True,
                               why=f"{why}, {UNSTARTED_LIMIT} times in a row: unpinned and left to Slurm")
                continue
            # Its pin is ours: it must not tie the job to those nodes in this cycle, nor in a later one if no
            # room is found now.
            self.book.move(job_id, JobState.PINNED, pin=record.decision.nodes, logged=record.logged)
            log.info("job %s: re-planning, %s", job_id, why)
        self.book.set_short(short)

    def _let_go(self, obs: Observation, translator: Translator) -> list[Pending]:
        """The pending jobs as the user asked for them where a pin of ours still names their nodes (see
        ``_unpinned``)."""
        pending, ids = obs.pending, obs.pending_ids
        if self.book.pinned():
            self._let_go_pins(obs)
            pinned = self.book.pinned()
            for at in compress(range(len(ids)), map(pinned.__contains__, ids)):
                if pending is obs.pending:
                    pending = list(pending)
                pending[at] = _unpinned(pending[at], pinned[ids[at]], translator)
        return pending

    def _queue(self, obs: Observation, pending: list[Pending], policy: Policy) -> list[Entry]:
        """The Scheduler's queue: the entries of the pending jobs the policy does not hold (a stale one no
        longer), but those left to Slurm, in Slurm's priority order."""
        # The identity contract: for a job that did not change, the parsers return the same SlurmJob and the
        # translation cache the same Pending (its engine job, eligible set and queue entry): the Scheduler keeps
        # the place of a job handed the same entry (Scheduler.requeue), the policy the node indexes of the same
        # eligible set. A new object for an unchanged job costs its work again; tests/slurm/test_job_identity.py.
        queue = list(compress(map(_ENTRY, pending), map(not_, map(policy.cluster.jobs.__contains__, obs.pending_ids))))
        left = self.book.left_or_leaving()
        if left:  # a pin Slurm refused: the job is Slurm's now, whatever it asks
            queue = [entry for entry in queue if entry.job.id not in left]
        return queue

    # -- actuate -----------------------------------------------------------------------------

    def _actuate(self, obs: Observation, policy: Policy, decided: Decided | None, moves: list[Migration],
                 report: CycleReport, now: float) -> None:
        """Tell Slurm: the decisions (those it refuses undone), the jobs left to it, the migrations (Compact's of
        ``moves`` and the drain's), the renewed leases; each only while this daemon may act."""
        acting = self.leadership.may_act
        if decided is not None:
            self._tell(obs, policy, decided, report)
            moves = moves + decided.migrations
        if acting():
            self.actuator.leave(obs, self.book, report, policy.name)
        if acting():
            self.actuator.release_left_held(obs, self.book, report)
        if acting():
            self.actuator.migrate(obs, policy, moves, self.book, self.rate, report, self.recorder, now,
                                  self.dry_run)
        if acting():
            self.actuator.renew_leases(obs, self.book, report, now)

    def _tell(self, obs: Observation, policy: Policy, decided: Decided, report: CycleReport) -> None:
        """Tell Slurm the decisions; a refused one is rewritten as ``failed`` and leaves the policy (where did it
        run, when Slurm started it first), the others are placed."""
        # logged (or spooled) before Slurm hears of them: see publish.py; a decision never goes unlogged
        self._ask(policy, decided)
        if not self.leadership.may_act():
            failures = [FENCED] * len(decided.decisions)
        elif self.recorder.ahead(report):
            failures = self.actuator.express_all(decided.decisions)  # one batch: see Actuator.express_all
        else:
            failures = [UNLOGGED] * len(decided.decisions)
        started_elsewhere, book = [], self.book
        first = decided.first
        for at, (p, decision), failure in zip(range(first, first + len(decided.decisions)), decided.decisions,
                                              failures):
            record = report.decisions[at]
            if failure is not None:
                if _refused_for_good(failure):
                    book.move(p.job.id, JobState.LEAVING, why=f"Slurm refused the decision ({failure}); left to Slurm",
                              unpin=not p.slurm.required_nodes or pinned_by_us(obs, book, p.job.id))
                policy.remove(p.job.id)
                after = fragmentation(policy)
                decided_record = record
                record = report.decisions[at] = replace(record, action="failed", reason=failure,
                                                        sif_after=_sif(after), partial_after=_partial(after))
                self.recorder.refused(record)
                if NOT_PENDING.search(failure):  # Slurm started it first (its lease ran out): where?
                    started_elsewhere += ran_elsewhere(obs, policy, [decided_record], self._ran_on([p.job.id]))
            else:
                # when Slurm was told, not when the cycle began: telling it hundreds of jobs takes a while,
                # and a job told late must not look stale (and be placed again) in the next cycle
                book.move(p.job.id, JobState.PLACED, decision=decision, job=p.job, at=self.clock(), logged=record)
            log.info("%s job %s (%s, %s) on %s: %s; SIF %s -> %s", record.action, p.job.id, record.request,
                     record.user, fmt(record.gpus_per_node), record.reason, _num(record.sif_before),
                     _num(record.sif_after))
        report.decisions += started_elsewhere

    def _ask(self, policy: Policy, decided: Decided) -> None:
        """Keep the request of each job about to be pinned for the first time, as its user gave it (a refused
        update may have changed it already: from 23.11 Slurm keeps what it set before the check that refused)."""
        book, c = self.book, policy.cluster
        for p, decision in decided.decisions:
            if not p.slurm.required_nodes and book.state(p.job.id) in (None, JobState.WAITING):
                book.ask(p.job.id, Asked.of(p.slurm, max(c.capacity[c.index[n]] for n in decision.nodes)))

    def _where(self, obs: Observation, job_ids: list[str]) -> dict[str, tuple[str, ...]]:
        """Where ``job_ids`` run (the read says) or ran (Slurm is asked about those not running when read)."""
        running = obs.running
        ran = {j: tuple(running[j].alloc) for j in job_ids if j in running}
        rest = [j for j in job_ids if j not in ran]
        return (ran | self._ran_on(rest)) if rest else ran

    def _ran_on(self, job_ids: list[str]) -> dict[str, tuple[str, ...]]:
        """Where Slurm says ``job_ids`` run or ran; none when it cannot say (then the log is not checked)."""
        try:
            return self.backend.ran_on(job_ids)
        except SlurmError as err:
            log.warning("where jobs %s ran is unknown (%s): not checked against the log", ",".join(job_ids), err)
            return {}

    def _let_go_pins(self, obs: Observation) -> None:
        """Forget the pins of jobs let go that Slurm started or forgot, or whose nodes someone else has set since."""
        book = self.book
        for job_id, pin in book.pinned().items():
            slurm, record = obs.slurm_jobs.get(job_id), book.get(job_id)
            if record.state is JobState.REPLANNED:  # one that Slurm no longer has pending: see left_queue
                if slurm is not None and slurm.pending and not pinned_to(slurm, pin):
                    book.move(job_id, JobState.REPLANNED, unheard=record.unheard)
            elif slurm is None or not slurm.pending:
                book.move(job_id, None)
            elif not pinned_to(slurm, pin):  # where Slurm starts it is checked against the place logged
                book.move(job_id, JobState.REPLANNED, unheard=record.logged)

    def _older_pin(self, obs: Observation, job_id: str) -> None:
        """A re-planned job whose ReqNodeList is the pin of an earlier decision of ours (the daemon killed while
        telling Slurm of a later one) keeps that pin as ours: it must not tie the job, nor stay if the job is left."""
        slurm, record = obs.slurm_jobs[job_id], self.book.get(job_id)
        try:
            history = self.recorder.decisions_of(job_id)
        except StoreError as err:
            log.warning("job %s: earlier decisions unreadable (%s): its node list is taken as its own", job_id,
                        err.message)
            return
        if any(d.action in PINS and pinned_to(slurm, d.nodes) for d in history):
            self.book.move(job_id, JobState.REPLANNED, unheard=record.unheard, pin=slurm.required_nodes)

    def _expected_ends(self, obs: Observation, policy: Policy, now: float) -> dict[str, float | None]:
        """When each job the policy holds will have ended by its time limit (None: unlimited or unknown).

        Running: its start time plus its limit. Decided but not started yet: it starts about now.
        """
        held = policy.cluster.jobs
        ends = dict(zip(held, map(obs.ends.get, held)))  # the running ones' (maps: tens of thousands of jobs)
        for job_id in held.keys() - obs.ends.keys():
            slurm = obs.slurm_jobs.get(job_id)
            limit = slurm.time_limit_s if slurm is not None else None
            ends[job_id] = None if limit is None else now + limit
        return ends

    def _stale(self, p: Pending, placed: JobRecord, policy: Policy, now: float, translator: Translator,
               short: set[str]) -> tuple[str, bool] | None:
        """Why a placed-but-pending job must be re-planned, and whether only because Slurm has not started it; None
        while its decision still holds. A node
        short of the job's CPUs or memory counts at the second read in a row that says so (the job joins
        ``short`` at the first): a job that started between the job read and the node read looks pending on a
        node whose allocation already holds it (see Backend.read_state), once."""
        c = policy.cluster
        if p.slurm.required_nodes and not pinned_to(p.slurm, placed.decision.nodes):
            return "someone else set its nodes since", False
        for name in dict.fromkeys(placed.decision.nodes):
            i = c.index[name]
            if not c.available[i]:
                if translator.slurm_nodes[name].state == "unknown":
                    continue  # a restarted slurmctld has not heard from the node yet; give it until stale_after
                return f"node {name} takes no new work", False
            if not translator.satisfies(p.slurm, name):
                return f"node {name} no longer has what it asks for (GPU type, features)", False
            if p.eligible is not None and name not in p.eligible:
                short.add(p.job.id)
                if placed.short:
                    return f"node {name} lacks the CPUs or memory it needs", False
            if c.used[i] > c.capacity[i]:
                return f"node {name} was taken by other jobs", False
        if now - placed.at > self.stale_after:
            return f"Slurm has not started it in {self.stale_after:.0f} s ({p.slurm.reason or 'no reason given'})", True
        return None

    # -- the control socket's questions ------------------------------------------------------

    def handlers(self) -> dict[str, Handler]:
        """Answers for compass_slurm.service.control.ControlServer: ping (with the cycles and looks run, which
        benchmarks/slurmctld_load.py reads, and the held jobs it cannot account for, which doctor names), submitted
        (wakes a cycle), job."""
        return {
            "ping": lambda doc, peer: {"policy": self.config.policy, "cycle": self.cycles, "looks": self.looks,
                                       "held_unknown": self.note.unsure, **self._role()},
            "submitted": self._submitted,
            "job": self._job_status,
        }

    def _role(self) -> dict:
        """This daemon's role and who leads (None: no one does), for ping and doctor."""
        leader = self.leadership.leader()
        return {"role": self.leadership.role, "leader": None if leader is None else leader.as_json()}

    def _submitted(self, doc: dict, peer: Peer) -> dict:
        self.poke()
        return {"cycle": self.cycles}

    def _job_status(self, doc: dict, peer: Peer) -> dict:
        obs, job_id = self.observation, doc["job"]
        slurm = obs.slurm_jobs.get(job_id) if obs is not None else None
        if slurm is None:
            raise RequestError(f"job {job_id} is not a GPU job the daemon manages or has seen running")
        require_owner(peer, slurm.user)
        if not self.leadership.leads:
            leader = self.leadership.leader()
            return {"job": job_id, "state": "running" if job_id in obs.running else "pending",
                    "reason": f"this daemon stands by; {'no daemon' if leader is None else leader.host} leads"}
        if job_id in obs.running:
            return {"job": job_id, "state": "running", "gpus_per_node": dict(obs.running[job_id].alloc)}
        placed = self.book.placed.get(job_id)
        if placed is not None:
            return {"job": job_id, "state": "placed", "gpus_per_node": placed.decision.gpus_per_node(),
                    "rule": placed.decision.rule}
        left = self.book.in_state(JobState.LEFT).get(job_id)
        why = left.why if left is not None else obs.skipped.get(job_id)
        if why is not None:
            return {"job": job_id, "state": "left to Slurm", "reason": why}
        if job_id in obs.waiting:
            return {"job": job_id, "state": "waiting", "reason": f"{obs.waiting[job_id]}; its lease is renewed"}
        return {"job": job_id, "state": "waiting", "reason": "no place for it yet; its lease is renewed"}


# -- small helpers ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Decided:
    """What decide made of the queue, for actuate: the decisions in the order taken, each with its job (their
    records are the report's decisions from ``first`` on), and the migrations made on the way."""

    decisions: list[tuple[Pending, Decision]]
    first: int
    migrations: list[Migration]


_ENTRY = attrgetter("entry")


def _unpinned(p: Pending, pinned: tuple[str, ...], translator: Translator) -> Pending:
    """The job as the user asked for it: Slurm's ReqNodeList is our own pin when it names the ``pinned`` nodes,
    and must not keep the re-plan on them (a drained or lost node would hold the job forever)."""
    if not pinned_to(p.slurm, pinned):
        return p
    slurm = replace(p.slurm, required_nodes=())
    req = Request(p.job.instances, p.job.gpus, p.job.distinct_nodes)
    return replace(p, slurm=slurm, eligible=translator.eligible(slurm, req))


def _sif(frag: Fragmentation | None) -> float | None:
    return None if frag is None else frag.sif


def _partial(frag: Fragmentation | None) -> int | None:
    return None if frag is None else frag.partial


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _refused_for_good(failure: str) -> bool:
    """Whether ``failure`` is Slurm's answer to a decision (refused_for_good), not ours (the log, the lead)."""
    return failure not in (UNLOGGED, FENCED) and refused_for_good(failure)
