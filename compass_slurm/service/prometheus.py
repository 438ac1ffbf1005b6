"""Prometheus textfile export: the daemon writes the latest sample and its running totals every cycle.

node_exporter's textfile collector reads every ``*.prom`` file in its directory
(``--collector.textfile.directory``); set ``metrics_textfile`` to a file there.
The file is replaced atomically, so the collector never reads half of it.
Totals count from the daemon's start, as Prometheus counters do.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..atomic import write_atomic

if TYPE_CHECKING:
    from .store import SampleRecord

#: (metric, help, SampleRecord field): gauges from the latest sample
GAUGES = (
    ("compass_nodes", "GPU nodes the daemon manages", "nodes"),
    ("compass_gpus", "GPUs on those nodes", "gpus"),
    ("compass_gpus_used", "GPUs allocated", "gpus_used"),
    ("compass_partial_nodes", "nodes with some but not all GPUs allocated", "partial"),
    ("compass_phi_star", "fewest partial nodes any placement of the running jobs could have", "phi_star"),
    ("compass_sif", "scheduler-induced fragmentation (partial - Phi*) / N", "sif"),
    ("compass_sif_bound", "the bound on SIF while WCC holds: 2K/N over K node groups (2/N on a uniform cluster)", "sif_bound"),
    ("compass_wcc", "1 when the workload composition condition holds", "wcc"),
    ("compass_queue_length", "pending GPU jobs", "queue_len"),
    ("compass_pending_gpus", "GPUs the pending jobs ask for", "pending_gpus"),
    ("compass_orphans", "1-GPU instances outside a slot on slotted nodes", "orphans"),
    ("compass_abs_violations", "nodes whose jobs break the anchor-based space (foreign placements)", "abs_violations"),
    ("compass_cycle_duration_seconds", "wall time of the latest daemon cycle", "duration"),
)


@dataclass(frozen=True, slots=True)
class Totals:
    """Running counts since the daemon started; ``plus`` returns the next value."""

    cycles: int = 0
    decisions: int = 0
    migrations: int = 0
    migrations_failed: int = 0
    errors: int = 0

    def plus(self, decisions: int = 0, migrations: int = 0, migrations_failed: int = 0, errors: int = 0) -> Totals:
        return replace(self, cycles=self.cycles + 1, decisions=self.decisions + decisions,
                       migrations=self.migrations + migrations,
                       migrations_failed=self.migrations_failed + migrations_failed, errors=self.errors + errors)


COUNTERS = (
    ("compass_cycles_total", "daemon cycles run", "cycles"),
    ("compass_decisions_total", "placement decisions made", "decisions"),
    ("compass_migrations_total", "instance migrations (requeues) attempted", "migrations"),
    ("compass_migrations_failed_total", "instance migrations Slurm refused", "migrations_failed"),
    ("compass_errors_total", "errors recorded (Slurm output not understood, commands refused, log failures)", "errors"),
)


def render(sample: SampleRecord | None, totals: Totals, now: float, spooled: int | None = None,
           leads: bool = True) -> str:
    """The textfile's content; without a sample (a skipped cycle) only the counters and the timestamp;
    ``spooled``: the decision log's records waiting in its spool (None: the daemon keeps no log); ``leads``:
    whether this daemon leads (service/leader.py)."""
    out: list[str] = []

    def metric(name: str, kind: str, text: str, value: float) -> None:
        out.extend([f"# HELP {name} {text}", f"# TYPE {name} {kind}", f"{name} {_number(value)}"])

    if sample is not None:
        for name, text, attr in GAUGES:
            metric(name, "gauge", text, getattr(sample, attr))
    for name, text, attr in COUNTERS:
        metric(name, "counter", text, getattr(totals, attr))
    if spooled is not None:
        metric("compass_log_spooled_records", "gauge",
               "decision log records waiting in the local spool for the database (0: the log is up to date)", spooled)
    metric("compass_leader", "gauge", "1 while this daemon leads (changes jobs), 0 while it stands by", leads)
    metric("compass_last_cycle_timestamp_seconds", "gauge", "Unix time the latest cycle ended", now)
    return "\n".join(out) + "\n"


def _number(value: float | bool) -> str:
    if isinstance(value, bool | int):
        return str(int(value))
    return repr(float(value))


def write_textfile(path: str | os.PathLike[str], sample: SampleRecord | None, totals: Totals, now: float,
                   spooled: int | None = None, leads: bool = True) -> None:
    """Replace ``path`` atomically with the current metrics (raises OSError when it cannot)."""
    write_atomic(path, render(sample, totals, now, spooled, leads))
