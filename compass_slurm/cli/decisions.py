"""``compass decisions``: the placements the daemon logged, as a table or as JSON."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

import click

from ..timeparse import SINCE
from .common import CONTEXT_SETTINGS, SCHEMA_VERSION, console, emit_json, json_option
from .options import db_option, read_log

if TYPE_CHECKING:
    from rich.table import Table

    from ..service.store import DecisionRecord


@click.command("decisions", context_settings=CONTEXT_SETTINGS)
@click.option("--since", type=SINCE, help="Only decisions after this: 90s, 30m, 1h, 7d, ... or an ISO date.")
@click.option("--job", "job_id", metavar="ID", help="Only decisions about job ID.")
@click.option("--limit", type=click.IntRange(min=0), default=100, show_default=True,
              help="Show the N latest matching decisions; 0 shows all.")
@json_option
@db_option
def command(since: datetime | None, job_id: str | None, limit: int, as_json: bool, db: str | None) -> None:
    """List placement decisions, oldest first: where each job went, by which rule, and why."""
    records = read_log(db, lambda store: store.decisions(since=since, job=job_id, limit=limit or None))

    if as_json:
        emit_json([{"schema_version": SCHEMA_VERSION, **record.as_json()} for record in records])
        return
    out = console()
    if not records:
        out.print("no decisions logged" + (" matching these filters" if since or job_id else ""))
        return
    out.print(_table(records))


def _table(records: list[DecisionRecord]) -> Table:
    from rich import box
    from rich.table import Table

    policies = ", ".join(sorted({r.policy for r in records}))
    table = Table(title=f"{len(records)} decisions by {policies}", title_justify="left",
                  box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for name in ("time UTC", "job", "user", "request", "SIF", "action"):
        table.add_column(name, no_wrap=True)
    # Nodes and the reason wrap at word boundaries, so the table fits 80 columns.
    table.add_column("nodes", overflow="fold")
    table.add_column("why", ratio=1)
    for r in records:
        # For a placement the reason is the rule that chose; otherwise say both.
        why = r.rule if r.reason in ("", r.rule) else f"{r.reason} ({r.rule})" if r.rule else r.reason
        table.add_row(
            r.time.strftime("%m-%d %H:%M:%S"),
            r.job_id,
            r.user or "-",
            r.request,
            f"{_sif(r.sif_before)}→{_sif(r.sif_after)}",
            r.action,
            " ".join(f"{node}:{gpus}" for node, gpus in r.gpus_per_node.items()),
            why,
        )
    return table


def _sif(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
