"""The cycle's last step: what the daemon tells the world.

A sample of the cluster's fragmentation per cycle, and every decision, migration and
error, go to the decision log (``Recorder``): the cycle's placements in a transaction of
their own before Slurm hears of them (a daemon killed while telling Slurm leaves no job
running where the log does not say), the rest at the cycle's end under the same cycle.
A log that cannot be written is loud but never stops placement. The Prometheus textfile and the anchors
file for submit hooks are replaced atomically every cycle.

Anchors file (``Config.anchors``)::

    # compass-anchors v1 generated=<epoch seconds> policy=<name> cycle=<n>
    <gpus> <node>

one line per instance size 1..G that has a place now: the node where the next
single instance of that size would go. Sizes with no place are omitted. In Lua:
``for gpus, node in text:gmatch("\\n(%d+) (%S+)") do ... end``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from ..atomic import write_atomic
from ..engine.fragmentation import Fragmentation, measure
from ..engine.model import EngineError
from ..engine.policies.base import Policy
from ..slurm.translate import Observation
from .cycle import CycleReport, log
from .prometheus import Totals, write_textfile
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
    )


class Recorder:
    """The decision log of one daemon: opened on first use; a cycle writes its decisions ahead, the rest at its end."""

    def __init__(self, db: str | None) -> None:
        self.db = db
        self.store: Store | None = None
        #: cycles whose records could not be written
        self.failures = 0
        #: the first log failure not yet in the log (written when the log works again)
        self.unlogged: ErrorRecord | None = None
        #: the daemon cycle whose decisions were written ahead, and its id in the log (for the rest of its records)
        self._begun: tuple[int, int] | None = None
        #: decisions written ahead that Slurm refused, not rewritten yet (the log failed meanwhile)
        self._refused: list[DecisionRecord] = []

    def _open(self) -> Store:
        if self.store is None:
            self.store = Store.open(self.db)
        return self.store

    def latest_places(self, jobs: Iterable[str]) -> dict[str, Place]:
        """Each job's latest record naming where it runs, in brief (raises StoreError when the log cannot be read)."""
        return self._open().latest_places(jobs)

    def decisions_with_ids(self, ids: Iterable[int]) -> list[DecisionRecord]:
        """The decisions of these ids, oldest first (raises StoreError likewise)."""
        return self._open().decisions_with_ids(ids)

    def cut_short(self) -> list[str]:
        """The jobs placed by cycles cut short since the last one that ended (raises StoreError likewise)."""
        return self._open().cut_short()

    def ahead(self, report: CycleReport) -> None:
        """Write the cycle's decisions so far, before Slurm hears of them; each record takes its id."""
        if self.db is None or all(record.id is not None for record in report.decisions):
            return
        try:
            store = self._open()
            with store.cycle(resume=self._resumed(report)) as begun:
                ids = [store.record_decision(record) if record.id is None else record.id
                       for record in report.decisions]
        except StoreError:
            return  # the cycle's end writes them with the rest, or says why it cannot
        self._begun = (report.cycle, begun)
        report.decisions[:] = [replace(record, id=i, cycle=begun) for record, i in zip(report.decisions, ids)]

    def _resumed(self, report: CycleReport) -> int | None:
        """The log's id of ``report``'s cycle where its decisions were written ahead (none of a cycle cut short)."""
        return self._begun[1] if self._begun is not None and self._begun[0] == report.cycle else None

    def refused(self, record: DecisionRecord) -> None:
        """A decision written ahead that Slurm refused: rewritten now, so the log never says it stands."""
        if record.id is None:
            return  # not written ahead: the cycle's end writes it as it is
        try:
            self._open().rewrite_decision(record)
        except StoreError:
            self._refused.append(record)  # the cycle's end tries again, or says why it cannot

    def record(self, report: CycleReport) -> None:
        """Write the rest of the cycle in one transaction; a failing log is loud but never stops placement."""
        if self.db is None:
            return
        begun = self._resumed(report)
        self._begun = None
        refused, self._refused = self._refused, []
        try:
            store = self._open()
            with store.cycle(resume=begun):
                if self.unlogged is not None:
                    store.record_error(replace(self.unlogged, message=f"{self.unlogged.message} "
                                               f"(the log failed in {self.failures} cycles so far)"))
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
            self.unlogged = None
        except StoreError as err:
            self.failures += 1
            log.error("DECISION LOG NOT WRITTEN (%d failures so far): %s%s", self.failures, err.message,
                      f"; hint: {err.hint}" if err.hint else "")
            # counted in compass_errors_total now, and written to the log once it works again
            report.errors.append(ErrorRecord(kind="log", message=err.message))
            self.unlogged = self.unlogged or ErrorRecord(kind="log", message=f"cycle {report.cycle}: {err.message}")

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None


class MetricsFile:
    """The Prometheus textfile: the latest sample and the totals since the daemon started."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.totals = Totals()

    def export(self, report: CycleReport, now: float) -> None:
        failed = sum(1 for m in report.migrations if m.status == "failed")
        # migrations are counted apart; a job left to Slurm is no placement
        placements = sum(1 for d in report.decisions if not d.from_nodes and d.action != "left")
        self.totals = self.totals.plus(placements, len(report.migrations), failed, len(report.errors))
        if not self.path:
            return
        try:
            write_textfile(self.path, report.sample, self.totals, now)
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
