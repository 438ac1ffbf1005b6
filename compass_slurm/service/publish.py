"""The cycle's last step: what the daemon tells the world.

A sample of the cluster's fragmentation per cycle, and every decision, migration and
error, go to the decision log (``Recorder``): the cycle's placements in a transaction of
their own before Slurm hears of them (a daemon killed while telling Slurm leaves no job
running where the log does not say), the rest at the cycle's end under the same cycle.
A log that cannot be written is loud but never stops placement: what it cannot take goes to its spool
(spool.py) and reaches it later; only a spool full or failing too stops the daemon changing jobs. The
Prometheus textfile and the anchors
file for submit hooks are replaced atomically every cycle.

Anchors file (``Config.anchors``)::

    # compass-anchors v1 generated=<epoch seconds> policy=<name> cycle=<n>
    <gpus> <node>

one line per instance size 1..G that has a place now: the node where the next
single instance of that size would go. Sizes with no place are omitted. In Lua:
``for gpus, node in text:gmatch("\\n(%d+) (%S+)") do ... end``.
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from collections.abc import Iterable
from dataclasses import replace
from datetime import UTC, datetime

from ..atomic import write_atomic
from ..engine.fragmentation import Fragmentation, measure
from ..engine.model import EngineError
from ..engine.policies.base import Policy
from ..slurm.translate import Observation
from .bookkeeping import LOG, CycleReport, log
from .prometheus import Totals, write_textfile
from .spool import Entry, Spool
from .store import DecisionRecord, ErrorRecord, Place, SampleRecord, Store, StoreError

ANCHORS_HEADER = "# compass-anchors v1 generated={generated} policy={policy} cycle={cycle}"


def fragmentation(policy: Policy) -> Fragmentation | None:
    """The policy's fragmentation now; None when the adopted allocations exceed the nodes."""
    try:
        return measure(policy.cluster)
    except EngineError:  # no feasible placement to compare with
        return None


def sample(obs: Observation, policy: Policy, report: CycleReport, duration: float) -> SampleRecord | None:
    frag = fragmentation(policy)
    if frag is None:
        report.error("engine", "fragmentation not measurable: running demand exceeds the nodes")
        return None
    orphans = policy.orphans()
    return SampleRecord(
        nodes=frag.nodes, gpus=frag.gpus, gpus_used=frag.gpus_used, partial=frag.partial,
        phi_star=frag.phi_star, sif=frag.sif, sif_bound=frag.sif_bound, wcc=frag.wcc,
        queue_len=obs.queue_len, pending_gpus=obs.pending_gpus, orphans=orphans,
        abs_violations=len(policy.abs_violations()), errors=len(report.errors), duration=duration,
        actions=dict(Counter(d.action for d in report.decisions)),
    )


class Recorder:
    """The decision log of one daemon: opened on first use; a cycle writes its decisions ahead, the rest at its end.

    What the store cannot take goes to ``spool`` (see spool.py), and from there to the store, in order, before
    anything else once it is back; a spooled record counts as logged.
    """

    def __init__(self, db: str | None, spool: Spool | None = None) -> None:
        self.db = db
        self.spool = spool
        self.store: Store | None = None
        #: cycles whose records could not be written
        self.failures = 0
        #: the first log failure not yet in the log (written when the log works again)
        self.unlogged: ErrorRecord | None = None
        #: records lost: a full spool takes no samples or errors
        self.dropped = 0
        #: the daemon cycle whose decisions were written ahead, and its id in the log (for the rest of its records)
        self._begun: tuple[int, int] | None = None
        #: decisions written ahead that Slurm refused, not rewritten yet (the log failed meanwhile)
        self._refused: list[DecisionRecord] = []
        #: this process's part of the spool's batch keys (a restarted daemon counts its cycles from 1 again)
        self._token = uuid.uuid4().hex[:12]
        #: the daemon cycle that writes to the spool (it began to: the rest follows), why, and its decisions so far
        self._spooling: int | None = None
        self._why: StoreError | None = None
        self._positions = 0
        #: the spool's last append failed, and nothing was written since (each cycle's end tries again)
        self._spool_failed: str | None = None

    def _open(self) -> Store:
        if self.store is None:
            self.store = Store.open(self.db)
        return self.store

    def _ready(self) -> Store:
        """The store, with the spool written to it first (raises StoreError when either fails)."""
        store = self._open()
        spool = self.spool
        if spool is not None and spool.backlog.size:
            try:
                written = spool.flush(store)
            except OSError as err:
                raise StoreError(f"cannot read the decision log's spool {spool.path}: {err.strerror or err}",
                                 hint="the spool must be readable and writable by the daemon's account") from None
            log.warning("decision log %s back: %d spooled records written to it", store.name, written)
        return store

    def latest_places(self, jobs: Iterable[str]) -> dict[str, Place]:
        """Each job's latest record naming where it runs, in brief (raises StoreError when the log cannot be read)."""
        return self._ready().latest_places(jobs)

    def decisions_with_ids(self, ids: Iterable[int]) -> list[DecisionRecord]:
        """The decisions of these ids, oldest first (raises StoreError likewise)."""
        return self._ready().decisions_with_ids(ids)

    def decisions_of(self, job: str) -> list[DecisionRecord]:
        """One job's decisions, oldest first (raises StoreError likewise)."""
        return self._ready().decisions(job=job)

    def unfinished_cycle_jobs(self) -> list[str]:
        """The jobs placed by cycles cut short since the last one that ended (raises StoreError likewise)."""
        return self._ready().unfinished_cycle_jobs()

    def migration_times(self, since: float) -> list[float]:
        """When the instances moved by the migrations decided since ``since`` were moved, in seconds of the epoch,
        one time per instance as the budget counts them (raises StoreError likewise). A migration is logged
        ``migrated`` when decided, before Slurm hears of it; one Slurm refused is rewritten ``failed`` and not
        counted here, though its try was."""
        migrated = self._ready().decisions(since=datetime.fromtimestamp(since, UTC), action="migrated")
        return [d.time.timestamp() for d in migrated if d.time is not None
                for _ in range(sum((Counter(d.nodes) - Counter(d.from_nodes)).values()))]

    def may_change(self, report: CycleReport) -> bool:
        """Whether the cycle may change jobs: not while the store is down and the spool full or failing, since no
        decision is made without being logged (says so, once per cycle; the cycle's end tries both again)."""
        spool = self.spool
        if self.db is None or spool is None:
            return True
        if self._spool_failed is not None:
            report.error(LOG, f"neither the decision log nor its spool {spool.path} can be written "
                         f"({self._spool_failed}): no job is changed until one can; Slurm starts managed jobs "
                         "itself when their leases run out")
            return False
        if not spool.full:
            return True
        try:
            self._ready()
        except StoreError:
            pass
        else:  # the log is back and took the spool (an empty spool is still full where spool_max_mb is 0)
            return True
        report.error(LOG, f"the decision log cannot be written and its spool {spool.path} is full "
                     f"({spool.records} records, {spool.backlog.size / 2**20:.1f} MB): no job is changed until the "
                     "log is back; Slurm starts managed jobs itself when their leases run out")
        return False

    def ahead(self, report: CycleReport) -> bool:
        """Write the cycle's decisions so far, before Slurm hears of them; each record takes its id (below zero:
        spooled). False when neither the store nor the spool took them: Slurm must not hear of them."""
        if self.db is None or all(record.id is not None for record in report.decisions):
            return True
        if self._spooling != report.cycle:
            try:
                store = self._ready()
                with store.cycle(resume=self._resumed(report)) as begun:
                    new = iter(store.record_decisions([record for record in report.decisions if record.id is None]))
                    ids = [next(new) if record.id is None else record.id for record in report.decisions]
            except StoreError as err:
                self._why = err
            else:
                self._begun = (report.cycle, begun)
                report.decisions[:] = [replace(record, id=i, cycle=begun) for record, i in zip(report.decisions, ids)]
                return True
        return self._spool_ahead(report)

    def _spool_ahead(self, report: CycleReport) -> bool:
        if self.spool is None:
            return False
        if self._spooling != report.cycle:
            self._spooling, self._positions = report.cycle, 0
        ids = iter(range(-1 - self._positions, -1 - self._positions - len(report.decisions), -1))
        decisions = [record if record.id is not None else replace(record, id=next(ids))
                     for record in report.decisions]
        entries = [Entry("decision", d) for d, r in zip(decisions, report.decisions) if r.id is None]
        try:
            self.spool.append(self._key(report), self._resumed(report), entries)
        except OSError as err:
            self._spool_failed = str(err.strerror or err)
            log.error("DECISIONS NOT LOGGED, NOT TOLD TO SLURM: the log failed (%s) and so did its spool %s: %s",
                      self._why.message if self._why else "?", self.spool.path, self._spool_failed)
            return False
        self._spool_failed = None
        self._positions += len(entries)
        report.decisions[:] = decisions
        return True

    def _key(self, report: CycleReport) -> str:
        return f"{self._token}:{report.cycle}"

    def _resumed(self, report: CycleReport) -> int | None:
        """The log's id of ``report``'s cycle where its decisions were written ahead (none of a cycle cut short)."""
        return self._begun[1] if self._begun is not None and self._begun[0] == report.cycle else None

    def refused(self, record: DecisionRecord) -> None:
        """A decision written ahead that Slurm refused: rewritten now, so the log never says it stands."""
        if record.id is None:
            return  # not written ahead: the cycle's end writes it as it is
        if self._spooling is None:
            try:
                self._open().rewrite_decision(record)
                return
            except StoreError as err:
                self._why = err
        self._refused.append(record)  # the cycle's end tries again, or spools it

    def record(self, report: CycleReport) -> None:
        """Write the rest of the cycle in one transaction; a failing log is loud but never stops placement."""
        if self.db is None:
            return
        begun = self._resumed(report)
        self._begun = None
        refused, self._refused = self._refused, []
        spooling, self._spooling = self._spooling == report.cycle, None
        if not spooling:
            try:
                self._write(report, begun, refused)
                self.unlogged = self._spool_failed = None
                return
            except StoreError as err:
                self._why = err
        err = self._why or StoreError("the decision log failed")
        self.failures += 1
        # counted in compass_errors_total now, and written to the log with the rest
        report.errors.append(ErrorRecord(kind=LOG, message=err.message))
        where = self._spool_rest(report, begun, refused)
        log.log(logging.WARNING if where else logging.ERROR, "DECISION LOG NOT WRITTEN (%d failures so far): %s%s; %s",
                self.failures, err.message, f"; hint: {err.hint}" if err.hint else "",
                where or "the cycle's records are lost")
        if not where:
            self.unlogged = self.unlogged or ErrorRecord(kind=LOG, message=f"cycle {report.cycle}: {err.message}")

    def _write(self, report: CycleReport, begun: int | None, refused: list[DecisionRecord]) -> None:
        store = self._ready()
        with store.cycle(resume=begun):
            if self.unlogged is not None:
                store.record_error(self._unlogged_note())
            for record in refused:
                store.rewrite_decision(record)
            for record in report.decisions:
                if record.id is None:
                    store.record_decision(record)
            for record in report.migrations:
                store.record_migration(record)
            for record in report.errors:
                store.record_error(record)
            if report.sample is not None:
                store.record_sample(report.sample)

    def _unlogged_note(self) -> ErrorRecord:
        u = self.unlogged
        assert u is not None
        return replace(u, message=f"{u.message} (the log failed in {self.failures} cycles so far)")

    def _spool_rest(self, report: CycleReport, begun: int | None, refused: list[DecisionRecord]) -> str:
        """Spool what ``_write`` would have written; says where, or "" when the spool failed too. A full spool
        still takes decisions and migrations (few: a full spool lets no job change), not samples or errors."""
        spool = self.spool
        if spool is None:
            return ""
        entries = [Entry("rewrite", r) for r in refused]
        entries += [Entry("decision", r) for r in report.decisions if r.id is None]
        entries += [Entry("migration", r) for r in report.migrations]
        rest = [Entry("error", self._unlogged_note())] if self.unlogged is not None else []
        rest += [Entry("error", r) for r in report.errors]
        rest += [Entry("sample", report.sample)] if report.sample is not None else []
        full = spool.full
        if not full:
            entries += rest
        try:
            spool.append(self._key(report), begun, entries)
        except OSError as err:
            self._spool_failed = str(err.strerror or err)
            log.error("cannot write the decision log's spool %s: %s", spool.path, self._spool_failed)
            return ""
        self._spool_failed = None
        if full and rest:
            self.dropped += len(rest)
            self.unlogged = self.unlogged or ErrorRecord(
                kind=LOG, message=f"cycle {report.cycle}: samples and errors lost, the spool {spool.path} was full")
        else:
            self.unlogged = None
        return f"spooled to {spool.path} ({spool.records} records waiting)"

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None


class MetricsFile:
    """The Prometheus textfile: the latest sample and the totals since the daemon started."""

    def __init__(self, path: str | None, spool: Spool | None = None) -> None:
        self.path = path
        self.totals = Totals()
        #: the decision log's spool: its records waiting are a gauge
        self.spool = spool

    def export(self, report: CycleReport, now: float, leads: bool = True) -> None:
        failed = sum(1 for m in report.migrations if m.status == "failed")
        # migrations are counted apart; a job left to Slurm is no placement
        placements = sum(1 for d in report.decisions if not d.from_nodes and d.action != "left")
        self.totals = self.totals.plus(placements, len(report.migrations), failed, len(report.errors))
        if not self.path:
            return
        try:
            write_textfile(self.path, report.sample, self.totals, now,
                           spooled=None if self.spool is None else self.spool.records, leads=leads)
        except OSError as err:
            log.error("cannot write metrics to %s: %s", self.path, err)


def anchors_text(policy: Policy, cycle: int, now: float) -> str:
    lines = [ANCHORS_HEADER.format(generated=int(now), policy=policy.name, cycle=cycle)]
    for gpus in range(1, policy.cluster.max_gpus + 1):
        node = policy.anchor(gpus)
        if node is not None:
            lines.append(f"{gpus} {node}")
    return "\n".join(lines) + "\n"


def publish_anchors(path: str, policy: Policy, cycle: int, now: float) -> None:
    try:
        write_atomic(path, anchors_text(policy, cycle, now))
    except OSError as err:
        log.error("cannot publish anchors to %s: %s", path, err)
