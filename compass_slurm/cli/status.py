"""``compass status``: the GPU map, fragmentation against its bound (2/N per node group), blocked jobs, the jobs
the daemon is migrating and the latest decisions."""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import groupby
from typing import TYPE_CHECKING, Any

import click

from .common import CONTEXT_SETTINGS, SCHEMA_VERSION, UserError, console, emit_json, json_option
from .options import MAX_ROWS, db_option, read_slurm, settings, snapshot_option

if TYPE_CHECKING:
    from rich.console import RenderableType

    from ..service.status import NodeCell, Status
    from ..service.leader import Leader
    from ..service.store import DecisionRecord
    from ..slurm.state import SlurmState

#: kind -> (glyph, style): glyphs alone tell the kinds apart when colour is off (NO_COLOR, pipes)
CELLS = {
    "empty": (".", "bright_black"),
    "pool": ("p", "yellow"),
    "slotted": ("s", "cyan"),
    "partial": ("!", "bold red"),
    "full": ("#", "green"),
    "unavailable": ("x", "magenta"),
}
#: at most this many partial nodes and pending jobs are listed; --json has all of them
LIST_LIMIT = 12
#: at most this many characters of node names on one line
LIST_CHARS = 160
#: rows of one kind are folded into one line from this many on (whole racks full or empty)
FOLD_ROWS = 3


@click.command("status", context_settings=CONTEXT_SETTINGS)
@click.option("--partition", metavar="P", help="Only the nodes and jobs of partition P.")
@json_option
@snapshot_option
@db_option
@click.option("--decisions", "decision_count", type=click.IntRange(0, MAX_ROWS), default=5, show_default=True,
              help="Show the N latest decisions from the log (0: none).")
def command(partition: str | None, as_json: bool, snapshot: str | None, db: str | None, decision_count: int) -> None:
    """Show every GPU node as one cell, partial nodes, Phi*, SIF against 2/N, WCC and why pending jobs wait.

    Reads live Slurm unless --snapshot is given. The latest decisions come from the
    daemon's log when it can be read; without one that part is left out.
    """
    from ..engine.model import EngineError
    from ..native_stdout import native_stdout_silenced
    from ..service.status import StatusError, build_status

    config = settings(db=db)
    state = read_slurm(snapshot)
    decisions, note, leader, requeues = _from_log(config.db, decision_count, state)
    try:
        with native_stdout_silenced():  # the Phi* solver's native output stays out of --json
            status = build_status(state, partition, config.policy, config.migratable, config.queue, config.slack,
                                  config.migrations_per_hour, config.migrations_burst, config.partitions, requeues)
    except StatusError as err:
        raise UserError(str(err), hint=err.hint) from None
    except EngineError as err:
        raise UserError(f"cannot adopt the running jobs: {err}", hint="check the policy setting: `compass policies`") from None
    if as_json:
        emit_json({"schema_version": SCHEMA_VERSION, **status.as_json(),
                   "leader": None if leader is None else leader.as_json(),
                   "decisions": None if decisions is None else [d.as_json() for d in decisions],
                   "decisions_note": note})
        return
    out = console()
    for part in _render(status, decisions, note, leader, out.width):
        out.print(part)


def _from_log(db: str, count: int, state: SlurmState) -> tuple[list[DecisionRecord] | None, str, Leader | None,
                                                              dict[str, DecisionRecord] | None]:
    """The latest decisions, or None and why not; who leads (service/leader.py; None: no one, or no log); and the
    jobs of ``state`` the daemon is migrating (None: no log). Status works without a decision log."""
    from ..service.leader import Leader
    from ..service.status import logged_requeues
    from ..service.store import StoreError
    from .options import open_log

    try:
        with open_log(db) as store:
            leader, requeues = Leader.of(store.leader()), logged_requeues(state, store)
            if count == 0:
                return None, "not asked for", leader, requeues
            return store.decisions(limit=count), "", leader, requeues
    except StoreError as err:
        return None, "not asked for" if count == 0 else err.message, None, None




# -- rendering -----------------------------------------------------------------------------------


def _render(status: Status, decisions: list[DecisionRecord] | None, note: str, leader: Leader | None,
            width: int) -> list[RenderableType]:
    from rich.text import Text

    f = status.fragmentation
    read = datetime.fromtimestamp(status.read_at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    budget = budget_text(status.migrations_per_hour_setting, status.migrations_per_hour,
                         status.migrations_burst_setting, status.migrations_burst)
    parts: list[RenderableType] = [
        Text(f"Slurm {status.slurm_version} · policy {status.policy} · "
             f"queue {queue_text(status.queue, status.slack)} · {budget} · "
             f"partition {status.partition or 'all'} · read {read}", style="bold"),
        _summary_line(status),
        *_left_to_slurm(status),
        *([] if leader is None else [Text("leader: {host} pid {pid} since {since}, renewed {renewed}".format(
            **leader.as_json()), style="bright_black")]),
        _group_table(status),
        Text(),
        _legend(status),
        *_grid(status.cells, width),
        Text(),
    ]
    if len(status.partitions) > 1 or f.nodes > 64:
        parts += [_partition_table(status), Text()]
    parts += [*_partial_nodes(status), Text()]
    parts += _pending(status)
    parts += _requeued(status)
    if decisions is not None:
        parts += _decisions(decisions)
    elif note != "not asked for":
        parts.append(Text(f"decisions: not shown ({note})", style="bright_black"))
    return parts


def queue_text(queue: str, slack: float) -> str:
    """The queue discipline, with its slack where it acts (backfill): "backfill (slack 0.5)"."""
    return f"{queue} (slack {slack:g})" if slack and queue == "backfill" else queue


def budget_text(setting: int | str, per_hour: int | None, burst_setting: int | str = "unlimited",
                burst: int | None = None) -> str:
    """The migration budget as the admin set it and what it comes to, with its burst cap if any:
    "59 migrations/h (per-node), at most 6 in any 5 min (10%)"."""
    text = "unlimited migrations" if per_hour is None else (
        f"{per_hour} migrations/h" + (f" ({setting})" if setting != per_hour else ""))
    if burst is None:
        return text
    return f"{text}, at most {burst} in any 5 min" + (f" ({burst_setting})" if burst_setting != burst else "")


def _summary_line(status: Status) -> Any:
    from rich.text import Text

    f = status.fragmentation
    util = 100 * f.gpus_used / f.gpus
    line = Text(f"nodes {f.nodes}  GPUs {f.gpus_used}/{f.gpus} used ({util:.0f}%)")
    if status.stranded_gpus:
        line.append(f"  {status.stranded_gpus} GPUs stranded on partial nodes")
    line.append(f"\npartial {f.partial}  Phi* {f.phi_star}  SIF {f.sif:.3f} ")
    bound = f"{2 * max(1, len(f.groups))}/N"  # two per node group
    if f.within_bound:
        line.append(f"<= {bound} {f.sif_bound:.3f}", style="green")
    else:
        line.append(f"> {bound} {f.sif_bound:.3f}", style="bold red")
    line.append("  WCC ")
    line.append("holds" if f.wcc else "violated", style="green" if f.wcc else "yellow")
    return line


def _left_to_slurm(status: Status) -> list[Any]:
    """The GPU nodes compass places nothing on, as one hostlist (a count where that would run long)."""
    from rich.text import Text

    from ..slurm.hostlist import compress
    from ..slurm.translate import LEFT_TO_SLURM

    if not status.left_to_slurm:
        return []
    names = compress(status.left_to_slurm)
    if len(names) > LIST_CHARS:
        names = f"{len(status.left_to_slurm)} nodes (--json lists all)"
    return [Text(f"left to Slurm ({LEFT_TO_SLURM}): {names}", style="bright_black")]


def _group_table(status: Status) -> Any:
    """One row per node group (one capacity, one GPU type): where ABS and its 2/N bound apply."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    # collapsed padding: nine columns within 80
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True, title="node groups",
                  title_justify="left")
    table.add_column("GPU type")
    for name in ("GPUs", "nodes", "used/free", "partial", "Phi*", "SIF", "bound", "WCC"):
        table.add_column(name, justify="right")
    for g in status.fragmentation.groups:
        bound = Text("ok" if g.within_bound else "over", style="green" if g.within_bound else "bold red")
        wcc = Text("holds" if g.wcc else "violated", style="green" if g.wcc else "yellow")
        table.add_row(g.gpu_type or "-", str(g.capacity), str(g.nodes), f"{g.gpus_used}/{g.gpus - g.gpus_used}",
                      str(g.partial), str(g.phi_star), f"{g.sif:.3f}", bound, wcc)
    return table


def _legend(status: Status) -> Any:
    from rich.text import Text

    legend = Text()
    for kind, count in status.kinds().items():
        glyph, style = CELLS[kind]
        legend.append(glyph, style=style)
        legend.append(f" {kind} {count}  ")
    legend.rstrip()
    return legend


def _grid(cells: tuple[NodeCell, ...], width: int) -> list[Any]:
    """One character per node, as many per row as fit (a multiple of 10); runs of uniform rows folded."""
    from rich.text import Text

    label = max(len(c.name) for c in cells)
    per_row = max(10, min(100, (width - label - 2) // 10 * 10))
    rows = [cells[k:k + per_row] for k in range(0, len(cells), per_row)]

    def uniform(row: tuple[NodeCell, ...]) -> str | None:
        kinds = {c.kind for c in row}
        return kinds.pop() if len(kinds) == 1 else None

    out = []
    for kind, run in groupby(rows, key=uniform):
        run = list(run)
        if kind is not None and len(run) >= FOLD_ROWS:
            glyph, style = CELLS[kind]
            nodes = sum(len(r) for r in run)
            line = Text(f"{run[0][0].name:<{label}}  ")
            line.append(glyph * 10, style=style)
            line.append(f" ... {run[-1][-1].name}: {nodes} nodes, all {kind}")
            out.append(line)
            continue
        for row in run:
            line = Text(f"{row[0].name:<{label}}  ")
            for cell in row:
                glyph, style = CELLS[cell.kind]
                line.append(glyph, style=style)
            out.append(line)
    return out


def _partition_table(status: Status) -> Any:
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, title="partitions", title_justify="left")
    table.add_column("partition", overflow="fold")
    # Glyphs as headers keep the table within 80 columns; the legend above names them.
    for name in ("nodes", "GPUs used", *(glyph for glyph, _ in CELLS.values())):
        table.add_column(name, justify="right")
    for p in status.partitions:
        table.add_row(p.name, str(p.nodes), f"{p.gpus_used}/{p.gpus}", *(str(p.kinds.get(k, 0)) for k in CELLS))
    return table


def _partial_nodes(status: Status) -> list[Any]:
    from rich.text import Text

    partial = status.partial_cells
    if not partial:
        return [Text("no partial nodes")]
    out: list[Any] = [Text(f"partial nodes ({len(partial)}):", style="bold")]
    for cell in partial[:LIST_LIMIT]:
        flags = ", ".join(x for x in (cell.role, "pinned" if cell.pinned else "") if x)
        out.append(Text(f"  {cell.name}  {cell.gpus_used}/{cell.gpus}  {flags}" + (f"  {cell.note}" if cell.note else "")))
    if len(partial) > LIST_LIMIT:
        out.append(Text(f"  ... and {len(partial) - LIST_LIMIT} more (--json lists all)"))
    if status.orphans:
        out.append(Text(f"  {status.orphans} orphaned 1-GPU instances wait for a slot vacancy"))
    return out


def _pending(status: Status) -> list[Any]:
    from rich import box
    from rich.table import Table
    from rich.text import Text

    if not status.pending:
        return [Text("no pending GPU jobs")]
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, title=f"pending GPU jobs ({len(status.pending)})",
                  title_justify="left")
    for name in ("job", "user", "request"):
        table.add_column(name, no_wrap=True)
    table.add_column("what blocks it", no_wrap=True, overflow="ellipsis")  # one line per job; --json has all
    for job in status.pending[:LIST_LIMIT]:
        if job.migrating_to is not None:  # held by the daemon itself: it releases the job there
            why = Text(f"requeued: being migrated to {_nodes(job.migrating_to)}", style="cyan")
        elif job.blocked:
            why = Text(job.blocked, style="yellow")
        else:
            why = Text("GPUs are free" + (f"; Slurm: {job.slurm_reason}" if job.slurm_reason else ""))
        if job.held and job.migrating_to is None:
            why = Text("held; ") + why
        table.add_row(job.id, job.user, job.request, why)
    out: list[Any] = [table]
    if len(status.pending) > LIST_LIMIT:
        out.append(Text(f"... and {len(status.pending) - LIST_LIMIT} more (--json lists all)"))
    return out


def _requeued(status: Status) -> list[Any]:
    """The jobs the daemon is migrating (its job state ``requeued``): requeue-held, to be re-pinned and released."""
    from rich.text import Text

    if not status.requeued:
        return []
    out: list[Any] = [Text(f"requeued to be migrated ({len(status.requeued)}):", style="bold")]
    for job in status.requeued[:LIST_LIMIT]:
        out.append(Text(f"  job {job.id}  {job.user}  {_nodes(job.src) or '?'} -> {_nodes(job.nodes)}  "
                        f"Slurm: {job.slurm_state.lower()}", no_wrap=True, overflow="ellipsis"))
    if len(status.requeued) > LIST_LIMIT:
        out.append(Text(f"  ... and {len(status.requeued) - LIST_LIMIT} more (--json lists all)"))
    return [*out, Text()]


def _nodes(nodes: tuple[str, ...]) -> str:
    """Nodes in instance order, each once: "node05,node06"."""
    return ",".join(dict.fromkeys(nodes))


def _decisions(decisions: list[DecisionRecord]) -> list[Any]:
    from rich.text import Text

    if not decisions:
        return [Text("no decisions logged yet")]
    out: list[Any] = [Text(f"latest decisions ({len(decisions)}):", style="bold")]
    for d in decisions:
        nodes = " ".join(f"{n}:{g}" for n, g in d.gpus_per_node.items())
        out.append(Text(f"  {d.time:%m-%d %H:%M:%S}  job {d.job_id}  {d.request}  {d.action}  {nodes}  {d.rule}",
                        no_wrap=True, overflow="ellipsis"))  # one line each; `compass decisions --wide` has all
    return out

