"""The helper daemon's cycle: observe Slurm, sync the engine, decide, act, record, publish.

One policy object lives across cycles and follows Slurm incrementally: jobs that
ended are removed, GPU allocations it did not make (foreign jobs, jobs that ran
before the daemon started) are adopted, node availability is mirrored. A restart
rebuilds everything from Slurm, so nothing is lost with the process.

Managed jobs are pending GPU jobs whose comment carries the compass marker; the
wrapper submits them with ``--begin=now+<lease>``, so if the daemon is gone Slurm
starts them itself after the lease. Each cycle, in Slurm's priority order, every
managed job that fits is placed and pinned to its nodes with ``scontrol update
JobId=.. ReqNodeList=.. NumNodes=.. TresPerNode=gres:gpu:g StartTime=now``; one
that does not fit stays pending, untouched but for its lease (``StartTime=now+
<lease>``, renewed every half lease). A placed job that has not started when its
nodes stop qualifying (or after ``stale_after`` seconds) is re-planned. Slurm
refusing an update undoes the decision (action ``failed``). Compact's migrations,
only of jobs marked ``compass:migratable`` and within ``migrations_per_hour`` over
a sliding hour, are requeues onto the new nodes.

Jobs are placed in Slurm's priority order, each where it fits (no head-of-line
blocking: without run-time estimates there is no safe backfill reservation). A
job is told to Slurm only after the whole pass, since Compact may still move
jobs placed earlier in the pass. The control socket's ``submitted`` wakes the
loop for an early cycle (``Daemon.handlers()``); the Prometheus textfile
(``metrics_textfile``) is rewritten every cycle.

A cycle whose Slurm read fails or cannot be parsed is skipped and the error
recorded: nothing is changed on a partial picture. A decision log that cannot be
written is reported on stderr and counted (an error of kind ``log``, written to the
log once it works again); placement carries on.

Anchors file (``Config.anchors``), replaced atomically every cycle, for submit hooks::

    # compass-anchors v1 generated=<epoch seconds> policy=<name> cycle=<n>
    <gpus> <node>

one line per instance size 1..G that has a place now: the node where the next
single instance of that size would go. Sizes with no place are omitted. In Lua:
``for gpus, node in text:gmatch("\\n(%d+) (%S+)") do ... end``.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from .config import Config
from .control import Handler, Peer, RequestError, require_owner
from .fragmentation import Fragmentation, measure
from .metrics import Totals, write_textfile
from .model import Decision, EngineError, Job, Migration, Node
from .policies.base import Policy, make_policy
from .slurm.backend import Backend
from .slurm.errors import SlurmError
from .store import DecisionRecord, ErrorRecord, MigrationRecord, SampleRecord, Store, StoreError
from .translate import Observation, Pending, Request, Translator, id_order

log = logging.getLogger("compass.daemon")

HOUR = 3600.0
#: job ids per lease-renewal command (scontrol takes a comma list)
LEASE_BATCH = 100
ANCHORS_HEADER = "# compass-anchors v1 generated={generated} policy={policy} cycle={cycle}"


class RateLimit:
    """At most ``per_hour`` events in any sliding hour."""

    def __init__(self, per_hour: int) -> None:
        self.per_hour = per_hour
        self.times: deque[float] = deque()

    def budget(self, now: float) -> int:
        while self.times and self.times[0] <= now - HOUR:
            self.times.popleft()
        return max(0, self.per_hour - len(self.times))

    def spend(self, now: float, n: int) -> None:
        self.times.extend([now] * n)


@dataclass
class CycleReport:
    """What one cycle saw and did; ``skipped`` says why nothing was done."""

    cycle: int
    skipped: str | None = None
    decisions: list[DecisionRecord] = field(default_factory=list)
    migrations: list[MigrationRecord] = field(default_factory=list)
    adopted: list[str] = field(default_factory=list)
    departed: list[str] = field(default_factory=list)
    errors: list[ErrorRecord] = field(default_factory=list)
    sample: SampleRecord | None = None

    def error(self, kind: str, message: str) -> None:
        log.error("%s: %s", kind, message)
        self.errors.append(ErrorRecord(kind=kind, message=message))


@dataclass
class _Placed:
    """A decision Slurm has been told but not yet carried out."""

    decision: Decision
    job: Job
    at: float


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
        self.placed: dict[str, _Placed] = {}
        #: per running job, the allocation last found equal to the policy's (unchanged ones are not re-checked)
        self.seen: dict[str, Mapping[str, int]] = {}
        self.leases: dict[str, float] = {}
        self.rate = RateLimit(config.migrations_per_hour)
        self.stale_after = max(30.0, 3 * config.interval)
        self.cycles = 0
        self.store_errors = 0
        #: the first log failure not yet in the log (written when the log works again)
        self.unlogged: ErrorRecord | None = None
        self.totals = Totals()
        #: the latest translated Slurm state, for the control socket's questions
        self.observation: Observation | None = None
        self.store: Store | None = None
        #: set to run the next cycle now (the control socket's "submitted"); ``stop`` ends run()
        self.wake = threading.Event()
        self.stop = threading.Event()

    # -- the loop ----------------------------------------------------------------------------

    def run(self, interval: float) -> None:
        """Cycle every ``interval`` seconds (sooner when woken) until ``stop`` is set."""
        while not self.stop.is_set():
            self.cycle()
            self.wake.wait(interval)
            self.wake.clear()
        self.close()

    def poke(self) -> None:
        self.wake.set()

    def shutdown(self) -> None:
        self.stop.set()
        self.wake.set()

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None

    def cycle(self) -> CycleReport:
        started = time.monotonic()
        self.cycles += 1
        report = CycleReport(self.cycles)
        try:
            translator = Translator(self.backend.read_state(), self.config.partitions)
            obs = translator.observe()
            if not obs.nodes:
                scope = ", ".join(self.config.partitions) or "all"
                raise SlurmError(f"no GPU nodes in the managed partitions ({scope})")
        except SlurmError as err:
            report.skipped = str(err)
            report.error("slurm", f"cycle {self.cycles} skipped: {err}")
            self._record(report)
            self._export_metrics(report)
            return report
        self.observation = obs
        now = self.clock()
        policy, moves = self._sync(obs, report, now)
        moves += self._decide(obs, translator, policy, report, now)
        self._migrate(obs, policy, moves, report, now)
        self._renew_leases(obs, report, now)
        report.sample = self._sample(obs, policy, report, time.monotonic() - started)
        self._record(report)
        self._export_metrics(report)
        if self.publish:
            self._publish_anchors(policy, now)
        return report

    # -- sync: make the policy match Slurm ---------------------------------------------------

    def _sync(self, obs: Observation, report: CycleReport, now: float) -> tuple[Policy, list[Migration]]:
        """Mirror Slurm in the policy; returns it and the migrations its Compact wants."""
        policy = self.policy
        if policy is None or _layout(policy.cluster.nodes) != _layout(obs.nodes):
            if policy is not None:
                log.warning("the GPU nodes changed: rebuilding the engine state from Slurm")
            policy = self.policy = make_policy(self.config.policy, obs.nodes)
            self.placed.clear()
            self.seen.clear()
            self._take_over(obs, policy, now)
        else:
            for node in obs.nodes:
                if policy.cluster.available[policy.cluster.index[node.name]] != node.available:
                    policy.set_available(node.name, node.available)
                    log.info("node %s %s", node.name, "is available again" if node.available else "takes no new work")
        policy.migration_budget = self.rate.budget(now)
        moves: list[Migration] = []
        pending = {p.job.id for p in obs.pending}
        for job_id in list(policy.cluster.jobs):
            if job_id in obs.running or (job_id in self.placed and job_id in pending):
                continue
            self.placed.pop(job_id, None)
            self.seen.pop(job_id, None)
            moves += policy.remove(job_id)
            report.departed.append(job_id)
        changed = [r.engine() for job_id, r in obs.running.items()
                   if job_id in self.placed or self.seen.get(job_id) != r.alloc]
        # Larger instances first, so adopted anchors get slots before 1-GPU instances fill nodes.
        for job, nodes in sorted(changed, key=lambda jn: -jn[0].gpus):
            job_id = job.id
            self.seen[job_id] = obs.running[job_id].alloc
            if job_id in policy.cluster.jobs:
                if _per_node(policy, job_id) == _counts(job, nodes):
                    self.placed.pop(job_id, None)
                    continue
                was = self.placed.pop(job_id, None)
                if was is not None:
                    report.error("mismatch", f"job {job_id} started on {_fmt(_counts(job, nodes))}, "
                                             f"not on {_fmt(was.decision.gpus_per_node())} as decided")
                policy.remove(job_id)
            try:
                policy.adopt(job, nodes)
            except EngineError as err:
                del self.seen[job_id]
                report.error("adopt", f"job {job_id}: {err}")
                continue
            report.adopted.append(job_id)
            log.info("adopted job %s (%dx%d, %s) on %s", job_id, job.instances, job.gpus,
                     "migratable" if job.migratable else "pinned", _fmt(_counts(job, nodes)))
        moves += policy.compact()
        return policy, moves

    def _take_over(self, obs: Observation, policy: Policy, now: float) -> None:
        """After a (re)start: pending jobs an earlier daemon already pinned are decisions, not new jobs.

        A job counts as pinned by us when its last logged decision names exactly the nodes
        in its ReqNodeList; placing it again would log a second decision and re-point a job
        that Slurm is about to start.
        """
        pinned = [p for p in obs.pending if p.slurm.required_nodes]
        if not pinned or self.db is None or self.dry_run:
            return
        try:
            if self.store is None:
                self.store = Store.open(self.db)
            last = {p.job.id: self.store.decisions(job=p.job.id, limit=1) for p in pinned}
        except StoreError as err:
            log.warning("earlier decisions unreadable (%s): pinned pending jobs are placed afresh", err.message)
            return
        for p in pinned:
            record = last[p.job.id][-1] if last[p.job.id] else None
            if (record is None or record.action not in ("placed", "replanned")
                    or len(record.nodes) != p.job.instances
                    or set(record.nodes) != set(p.slurm.required_nodes)):
                continue
            try:
                policy.adopt(p.job, record.nodes)
            except EngineError as err:
                log.warning("job %s: earlier decision not taken over: %s", p.job.id, err)
                continue
            self.placed[p.job.id] = _Placed(Decision(p.job.id, record.nodes, p.job.gpus, record.rule), p.job, now)
            log.info("job %s: taking over the earlier decision (%s)", p.job.id, _fmt(record.gpus_per_node))

    # -- decide and express ------------------------------------------------------------------

    def _decide(self, obs: Observation, translator: Translator, policy: Policy, report: CycleReport,
                now: float) -> list[Migration]:
        """Place the managed pending jobs that fit, in priority order, then tell Slurm.

        Slurm hears each job's place only after the whole pass, because Compact may still
        move a job placed earlier in the same pass (e.g. pull it as a filler); those moves
        cost no requeue and are not returned. Returns the other migrations made on the way.
        """
        moves: list[Migration] = []
        for why in obs.skipped.items():
            log.debug("job %s left to Slurm: %s", *why)
        frag = _measure(policy)
        fresh: list[tuple[Pending, Decision, str, Fragmentation | None, Fragmentation | None]] = []
        # Stale decisions leave first, so their GPUs (and any overcommit) are gone before placing.
        replanned = set()
        pending = list(obs.pending)
        for at, p in enumerate(pending):
            stale = self._stale(p, policy, now, translator) if p.job.id in self.placed else None
            if stale is not None:
                pending[at] = _unpinned(p, self.placed[p.job.id].decision, translator)
                policy.remove(p.job.id)
                del self.placed[p.job.id]
                replanned.add(p.job.id)
                log.info("job %s: re-planning, %s", p.job.id, stale)
        # Shapes that found no place since the last placement: placing nothing changes nothing,
        # so the same shape fails again (a long blocked queue costs one attempt per shape).
        blocked: set[tuple] = set()
        for p in pending:
            if p.job.id in policy.cluster.jobs:
                continue
            shape = (p.job.instances, p.job.gpus, p.job.distinct_nodes, p.eligible)
            if shape in blocked:
                continue
            try:
                candidates = policy.candidates(p.job, p.eligible)
                decision = policy.place(p.job, p.eligible)
            except EngineError as err:
                # The engine may be left half-changed: rebuild it from Slurm next cycle.
                report.error("engine", f"job {p.job.id}: {err}; rebuilding the engine state next cycle")
                self.policy = None
                break
            if decision is None:
                blocked.add(shape)
                continue
            blocked.clear()
            decision = replace(decision, candidates=candidates)
            moves += decision.migrations
            moves += policy.compact()
            after = _measure(policy)
            fresh.append((p, decision, "replanned" if p.job.id in replanned else "placed", frag, after))
            frag = after
        for p, decision, action, before, after in fresh:
            nodes = tuple(policy.cluster.nodes[i].name for _, i in policy.cluster.instances_of(p.job.id))
            decision = replace(decision, nodes=nodes)
            failure = self._express(p, decision)
            if failure is not None:
                policy.remove(p.job.id)
                action, after = "failed", _measure(policy)
            else:
                self.placed[p.job.id] = _Placed(decision, p.job, now)
                action = "dry-run" if self.dry_run else action
            record = DecisionRecord.of(
                decision, p.job, policy.name, sif_before=_sif(before), sif_after=_sif(after),
                partial_before=_partial(before), partial_after=_partial(after),
                reason=failure or decision.rule, action=action,
            )
            report.decisions.append(record)
            log.info("%s job %s (%s, %s) on %s: %s; SIF %s -> %s", action, p.job.id, record.request, record.user,
                     _fmt(record.gpus_per_node), record.reason, _num(record.sif_before), _num(record.sif_after))
        placed_now = {p.job.id for p, *_ in fresh}
        return [m for m in moves if m.job not in placed_now]

    def _stale(self, p: Pending, policy: Policy, now: float, translator: Translator) -> str | None:
        """Why a placed-but-pending job must be re-planned, or None while its decision still holds."""
        c = policy.cluster
        for name in dict.fromkeys(self.placed[p.job.id].decision.nodes):
            i = c.index[name]
            # "unknown": a restarted slurmctld has not heard from the node yet; give it until stale_after
            if not c.available[i] and translator.slurm_nodes[name].state != "unknown":
                return f"node {name} takes no new work"
            if p.eligible is not None and name not in p.eligible:
                return f"node {name} lacks the CPUs or memory it needs"
            if c.used[i] > c.capacity[i]:
                return f"node {name} was taken by other jobs"
        if now - self.placed[p.job.id].at > self.stale_after:
            return f"Slurm has not started it in {self.stale_after:.0f} s ({p.slurm.reason or 'no reason given'})"
        return None

    def _express(self, p: Pending, decision: Decision) -> str | None:
        """Pin the job to the decided nodes and start it now; returns why Slurm refused, or None."""
        per_node = decision.gpus_per_node()
        sizes = set(per_node.values())
        if len(sizes) != 1:
            return f"per-node GPU counts {_fmt(per_node)} differ; Slurm cannot express that"
        try:
            self.backend.set_nodes(p.job.id, list(per_node), gpus_per_node=sizes.pop(),
                                   gpu_type=p.slurm.gpu_type, start_now=True)
        except SlurmError as err:
            return f"Slurm refused: {err}"
        self.leases.pop(p.job.id, None)
        return None

    # -- migrations --------------------------------------------------------------------------

    def _migrate(self, obs: Observation, policy: Policy, moves: list[Migration], report: CycleReport,
                 now: float) -> None:
        """Requeue every moved running job onto its new nodes; a placed-but-pending one is re-pointed."""
        by_job: dict[str, list[Migration]] = {}
        for m in moves:
            if m.job in policy.cluster.jobs:
                by_job.setdefault(m.job, []).append(m)
        for job_id, job_moves in by_job.items():
            target = _per_node(policy, job_id)
            running = obs.running.get(job_id)
            if running is not None and dict(running.alloc) == target:
                continue  # moved and moved back within the cycle
            status, reason = "done", "compact"
            try:
                gpus = set(target.values())
                if len(gpus) != 1:
                    raise SlurmError(f"per-node GPU counts {_fmt(target)} differ; Slurm cannot express that")
                gpu_type = obs.slurm_jobs[job_id].gpu_type
                if job_id in self.placed:
                    self.backend.set_nodes(job_id, list(target), gpus_per_node=gpus.pop(), gpu_type=gpu_type,
                                           start_now=True)
                else:
                    self.backend.migrate(job_id, list(target), gpus_per_node=gpus.pop(), gpu_type=gpu_type)
                # Pending again until Slurm restarts it: keep its new place as a decision to verify.
                job = policy.cluster.jobs[job_id]
                nodes = tuple(policy.cluster.nodes[i].name for _, i in policy.cluster.instances_of(job_id))
                self.placed[job_id] = _Placed(Decision(job_id, nodes, job.gpus, "compact"), job, now)
            except SlurmError as err:
                status, reason = "failed", f"compact; Slurm refused: {err}"
                report.error("migration", f"job {job_id}: {err}")
                self.seen.pop(job_id, None)  # the policy moved it, Slurm did not: re-check next cycle
                if job_id not in self.placed:
                    self._release(job_id)
            self.rate.spend(now, len(job_moves))
            for m in job_moves:
                report.migrations.append(MigrationRecord.of(m, reason=reason, status=status))
            log.info("migrated job %s to %s: %s", job_id, _fmt(target), status)

    def _release(self, job_id: str) -> None:
        """A requeue that failed half-way must not leave the job held (releasing a job not held fails harmlessly)."""
        try:
            self.backend.release(job_id)
        except SlurmError as err:
            log.debug("release of job %s after a failed migration: %s", job_id, err)

    # -- leases ------------------------------------------------------------------------------

    def _renew_leases(self, obs: Observation, report: CycleReport, now: float) -> None:
        """Keep managed jobs the daemon has not placed from starting on Slurm's own, while it is alive."""
        lease = int(self.config.lease)
        waiting = {p.job.id for p in obs.pending if p.job.id not in self.placed}
        self.leases = {j: t for j, t in self.leases.items() if j in waiting}
        if lease < 1:
            return
        due = sorted((j for j in waiting if j not in self.leases or now - self.leases[j] >= lease / 2), key=id_order)
        for start in range(0, len(due), LEASE_BATCH):
            batch = due[start:start + LEASE_BATCH]
            try:
                self.backend.renew_lease(batch, lease)
            except SlurmError as err:
                report.error("lease", str(err))
                continue
            self.leases.update(dict.fromkeys(batch, now))

    # -- record and publish ------------------------------------------------------------------

    def _sample(self, obs: Observation, policy: Policy, report: CycleReport, duration: float) -> SampleRecord | None:
        frag = _measure(policy)
        if frag is None:
            report.error("engine", "fragmentation not measurable: running demand exceeds the nodes")
            return None
        orphans = getattr(policy, "orphans", lambda: 0)()
        return SampleRecord(
            nodes=frag.nodes, gpus=frag.gpus, gpus_used=frag.gpus_used, partial=frag.partial,
            phi_star=frag.phi_star, sif=frag.sif, sif_bound=frag.sif_bound, wcc=frag.wcc,
            queue_len=obs.queue_len, pending_gpus=obs.pending_gpus, orphans=orphans,
            abs_violations=len(policy.abs_violations()), errors=len(report.errors), duration=duration,
        )

    def _record(self, report: CycleReport) -> None:
        """Write the cycle in one transaction; a failing log is loud but never stops placement."""
        if self.db is None:
            return
        try:
            if self.store is None:
                self.store = Store.open(self.db)
            with self.store.cycle():
                if self.unlogged is not None:
                    self.store.record_error(replace(self.unlogged, message=f"{self.unlogged.message} "
                                                    f"(the log failed in {self.store_errors} cycles so far)"))
                for record in report.decisions:
                    self.store.record_decision(record)
                for record in report.migrations:
                    self.store.record_migration(record)
                for record in report.errors:
                    self.store.record_error(record)
                if report.sample is not None:
                    self.store.record_sample(report.sample)
            self.unlogged = None
        except StoreError as err:
            self.store_errors += 1
            log.error("DECISION LOG NOT WRITTEN (%d failures so far): %s%s", self.store_errors, err.message,
                      f"; hint: {err.hint}" if err.hint else "")
            # counted in compass_errors_total now, and written to the log once it works again
            report.errors.append(ErrorRecord(kind="log", message=err.message))
            self.unlogged = self.unlogged or ErrorRecord(kind="log", message=f"cycle {self.cycles}: {err.message}")

    def _export_metrics(self, report: CycleReport) -> None:
        failed = sum(1 for m in report.migrations if m.status == "failed")
        self.totals = self.totals.plus(len(report.decisions), len(report.migrations), failed, len(report.errors))
        if not self.config.metrics_textfile:
            return
        try:
            write_textfile(self.config.metrics_textfile, report.sample, self.totals, self.clock())
        except OSError as err:
            log.error("cannot write metrics to %s: %s", self.config.metrics_textfile, err)

    # -- the control socket's questions ------------------------------------------------------

    def handlers(self) -> dict[str, Handler]:
        """Answers for compass_slurm.control.ControlServer: ping, submitted (wakes a cycle), job."""
        return {
            "ping": lambda doc, peer: {"policy": self.config.policy, "cycle": self.cycles},
            "submitted": self._submitted,
            "job": self._job_status,
        }

    def _submitted(self, doc: dict, peer: Peer) -> dict:
        self.poke()
        return {"cycle": self.cycles}

    def _job_status(self, doc: dict, peer: Peer) -> dict:
        obs, job_id = self.observation, doc["job"]
        slurm = obs.slurm_jobs.get(job_id) if obs is not None else None
        if slurm is None:
            raise RequestError(f"job {job_id} is not a GPU job the daemon manages or has seen running")
        require_owner(peer, slurm.user)
        if job_id in obs.running:
            return {"job": job_id, "state": "running", "gpus_per_node": dict(obs.running[job_id].alloc)}
        placed = self.placed.get(job_id)
        if placed is not None:
            return {"job": job_id, "state": "placed", "gpus_per_node": placed.decision.gpus_per_node(),
                    "rule": placed.decision.rule}
        if job_id in obs.skipped:
            return {"job": job_id, "state": "left to Slurm", "reason": obs.skipped[job_id]}
        return {"job": job_id, "state": "waiting", "reason": "no place for it yet; its lease is renewed"}

    def _publish_anchors(self, policy: Policy, now: float) -> None:
        try:
            write_atomic(Path(self.config.anchors), anchors_text(policy, self.cycles, now))
        except OSError as err:
            log.error("cannot publish anchors to %s: %s", self.config.anchors, err)


def anchors_text(policy: Policy, cycle: int, now: float) -> str:
    lines = [ANCHORS_HEADER.format(generated=int(now), policy=policy.name, cycle=cycle)]
    for gpus in range(1, policy.cluster.max_gpus + 1):
        node = policy.anchor(gpus)
        if node is not None:
            lines.append(f"{gpus} {node}")
    return "\n".join(lines) + "\n"


def write_atomic(path: Path, text: str) -> None:
    """Readers see the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


# -- small helpers ------------------------------------------------------------------------------


def _unpinned(p: Pending, decision: Decision, translator: Translator) -> Pending:
    """The job as the user asked for it: Slurm's ReqNodeList is our own pin when it names the decided nodes,
    and must not keep the re-plan on them (a drained or lost node would hold the job forever)."""
    if set(p.slurm.required_nodes) != set(decision.nodes):
        return p
    slurm = replace(p.slurm, required_nodes=())
    req = Request(p.job.instances, p.job.gpus, p.job.distinct_nodes)
    return replace(p, slurm=slurm, eligible=translator.eligible(slurm, req))


def _layout(nodes: tuple[Node, ...]) -> list[tuple[str, int]]:
    return [(n.name, n.gpus) for n in nodes]


def _per_node(policy: Policy, job_id: str) -> dict[str, int]:
    c = policy.cluster
    counts: Counter[str] = Counter()
    for key, i in c.instances_of(job_id):
        counts[c.nodes[i].name] += c.gpus_of(key)
    return dict(counts)


def _counts(job: Job, nodes: tuple[str, ...]) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for name in nodes:
        counts[name] += job.gpus
    return dict(counts)


def _measure(policy: Policy) -> Fragmentation | None:
    try:
        return measure(policy)
    except EngineError:  # adopted allocations beyond capacity: no feasible placement to compare with
        return None


def _sif(frag: Fragmentation | None) -> float | None:
    return None if frag is None else frag.sif


def _partial(frag: Fragmentation | None) -> int | None:
    return None if frag is None else frag.partial


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _fmt(per_node: dict[str, int]) -> str:
    return ",".join(f"{name}:{gpus}" for name, gpus in per_node.items())
