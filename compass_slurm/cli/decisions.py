"""``compass decisions``: the placements the daemon logged, as a table or as JSON."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

import click

from .common import CONTEXT_SETTINGS, SCHEMA_VERSION, console, emit_json, json_option
from .options import MAX_ROWS, SINCE, db_option, read_log

if TYPE_CHECKING:
    from rich.table import Table

    from ..service.store import DecisionRecord


@click.command("decisions", context_settings=CONTEXT_SETTINGS)
@click.option("--since", type=SINCE, help="Only decisions after this: 90s, 30m, 1h, 7d, ... or an ISO date.")
@click.option("--job", "job_id", metavar="ID", help="Only decisions about job ID.")
@click.option("--limit", type=click.IntRange(0, MAX_ROWS), default=100, show_default=True,
              help="Show the N latest matching decisions; 0 shows all.")
@click.option("--wide", is_flag=True, help="Print every column in full, however wide (the table otherwise "
              "keeps one line per decision and shortens nodes and why to fit the terminal).")
@json_option
@db_option
def command(since: datetime | None, job_id: str | None, limit: int, wide: bool, as_json: bool,
            db: str | None) -> None:
    """List placement decisions, oldest first: where each job went, by which rule, and why.

    Compact's moves are decisions too (action migrated, with the nodes the job left), and
    so is a decided job Slurm started elsewhere (action adopted, from the nodes decided):
    the latest decision about a job names where it runs.
    """
    records = read_log(db, lambda store: store.decisions(since=since, job=job_id, limit=limit or None))

    if as_json:
        emit_json([{"schema_version": SCHEMA_VERSION, **record.as_json()} for record in records])
        return
    out = console()
    if not records:
        out.print("no decisions logged" + (" matching these filters" if since or job_id else ""))
        return
    table = _table(records, None if wide else out.width)
    if wide:  # as wide as the table, whatever the terminal
        out.width = max(out.width, table.__rich_measure__(out, out.options).maximum)
    out.print(table)


COLUMNS = ("time UTC", "job", "user", "request", "SIF", "action", "nodes", "why")
#: nodes and why never shrink below this
MIN_WIDTH = 8


def _table(records: list[DecisionRecord], width: int | None) -> Table:
    """The decisions as a table of at most ``width`` columns (None: as wide as they are).

    One line per decision: when the rows do not fit, the date moves to the title (all on
    one day), COMPASS rules go by their short names, and nodes and why share what is
    left, cut short with "…". ``--wide`` and ``--json`` show everything.
    """
    from rich import box
    from rich.table import Table

    one_day = len({r.time.date() for r in records}) == 1
    rows = [_row(r, "%m-%d %H:%M:%S", {}) for r in records]
    widths = _widths(rows)
    narrow = width is not None and sum(widths) + 2 * (len(COLUMNS) - 1) > width
    if narrow:
        rows = [_row(r, "%H:%M:%S" if one_day else "%m-%d %H:%M:%S", _short_rules()) for r in records]
        widths = _widths(rows)
        left = width - sum(widths[:-2]) - 2 * (len(COLUMNS) - 1)
        why = min(widths[-1], max(MIN_WIDTH, left * 2 // 3))
        widths[-2:] = [min(widths[-2], max(MIN_WIDTH, left - why - 2)), why]
    policies = ", ".join(sorted({r.policy for r in records}))
    when = f" on {records[0].time:%Y-%m-%d}" if narrow and one_day else ""
    table = Table(title=f"{len(records)} decisions by {policies}{when}", title_justify="left",
                  box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for name, w in zip(COLUMNS, widths):
        table.add_column(name, no_wrap=True, overflow="ellipsis", width=w)
    for row in rows:
        table.add_row(*row)
    return table


def _widths(rows: list[tuple[str, ...]]) -> list[int]:
    return [max(len(name), *(len(row[k]) for row in rows)) for k, name in enumerate(COLUMNS)]


def _short_rules() -> dict[str, str]:
    """COMPASS rule texts -> their short names (``filler in a slot vacancy`` -> ``vacancy``)."""
    from ..engine.policies.compass import Rule

    return {rule.value: rule.name.lower().replace("_", "-") for rule in Rule}


def _row(r: DecisionRecord, clock: str, short: dict[str, str]) -> tuple[str, ...]:
    rule = "; ".join(short.get(part, part) for part in r.rule.split("; "))
    if r.from_nodes:  # a migration: why, and where the job came from
        why = f"{r.reason} from {' '.join(dict.fromkeys(r.from_nodes))}"
    else:  # for a placement the reason is the rule that chose; otherwise say both
        why = rule if r.reason in ("", r.rule) else f"{r.reason} ({rule})" if rule else r.reason
    return (
        r.time.strftime(clock),
        r.job_id,
        r.user or "-",
        r.request,
        f"{_sif(r.sif_before)}→{_sif(r.sif_after)}",
        r.action,
        " ".join(f"{node}:{gpus}" for node, gpus in r.gpus_per_node.items()),
        why,
    )


def _sif(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
