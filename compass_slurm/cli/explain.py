"""``compass explain JOBID``: why a job got its nodes, from the decision log."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from .common import CONTEXT_SETTINGS, SCHEMA_VERSION, UserError, console, emit_json, json_option
from .options import db_option, read_log

if TYPE_CHECKING:
    from ..service.store import DecisionRecord, MigrationRecord, Store



@click.command("explain", context_settings=CONTEXT_SETTINGS)
@click.argument("job_id", metavar="JOBID")
@json_option
@db_option
def command(job_id: str, as_json: bool, db: str | None) -> None:
    """Explain a job's whole history: each placement (candidates, the rule that chose, SIF before
    and after) and each migration (from where to where, and why), oldest first.

    "Triggered" lists the other jobs' migrations logged in the same daemon cycle as a
    decision about JOBID (Compact runs after each placement); "suffered" lists the
    moves of JOBID itself.
    """
    doc = read_log(db, lambda store: explain(store, job_id))
    if doc is None:
        raise UserError(f"no decision or migration logged for job {job_id}",
                        hint="`compass decisions` lists logged jobs; jobs submitted with plain sbatch are "
                             "adopted, not placed, and have no decision")
    if as_json:
        emit_json({"schema_version": SCHEMA_VERSION, **doc})
        return
    _render(doc)


def explain(store: Store, job_id: str) -> dict[str, Any] | None:
    """Everything the log says about ``job_id``; None when it says nothing."""
    decisions = store.decisions(job=job_id)
    suffered = store.migrations(job=job_id)
    if not decisions and not suffered:
        return None
    out = []
    for d in decisions:
        peers, triggered = _same_cycle(store, d) if d.cycle is not None else (0, [])
        out.append({**d.as_json(), "triggered": [m.as_json() for m in triggered if m.job_id != job_id],
                    "decisions_in_cycle": peers})
    return {"job_id": job_id, "decisions": out, "suffered": [m.as_json() for m in suffered]}


def _same_cycle(store: Store, d: DecisionRecord) -> tuple[int, list[MigrationRecord]]:
    """How many decisions ``d``'s cycle made, and its migrations: by the cycle index (a time window would read
    every record since the decision: a day at 16,384 nodes is millions)."""
    from ..service.store import DecisionRecord

    return sum(store.count(DecisionRecord, "cycle", cycle=d.cycle).values()), store.migrations(cycle=d.cycle)


def _render(doc: dict[str, Any]) -> None:
    out = console()
    job = doc["job_id"]
    for d in doc["decisions"]:
        out.print(f"job {job} ({d['request']}, user {d['user'] or '-'}): {d['action']} at "
                  f"{d['time']} by policy {d['policy']}, daemon cycle {d['cycle']}", markup=False, style="bold")
        nodes = " ".join(f"{n}:{g}" for n, g in d["gpus_per_node"].items()) or "- (left to Slurm)"
        out.print(f"  nodes       {nodes}", markup=False)
        if d["from"]:
            out.print(f"  from        {' '.join(dict.fromkeys(d['from']))}", markup=False)
        out.print(f"  rule        {d['rule']}", markup=False)
        if d["reason"] and d["reason"] != d["rule"]:
            out.print(f"  reason      {d['reason']}", markup=False)
        if not d["from"]:  # a migration has no candidates: Compact chose the move
            out.print(f"  candidates  {', '.join(d['candidates']) or '(not logged)'}", markup=False)
        out.print(f"  SIF         {_num(d['sif_before'])} -> {_num(d['sif_after'])}   "
                  f"partial nodes {_num(d['partial_before'])} -> {_num(d['partial_after'])}", markup=False)
        if d["triggered"]:
            shared = " (the cycle placed other jobs too)" if d["decisions_in_cycle"] > 1 else ""
            out.print(f"  triggered   {len(d['triggered'])} migration(s) in the same cycle{shared}:", markup=False)
            for m in d["triggered"]:
                out.print(f"    {_move(m)}", markup=False)
        out.print()
    if doc["decisions"]:
        last = doc["decisions"][-1]
        where = " ".join(f"{n}:{g}" for n, g in last["gpus_per_node"].items())
        where = f"on {where}" if where else "Slurm places it"
        out.print(f"job {job}: latest decision {last['action']} at {last['time']}, {where}", markup=False)
    if doc["suffered"]:
        out.print(f"job {job} was moved {len(doc['suffered'])} time(s):", markup=False)
        for m in doc["suffered"]:
            out.print(f"  {_move(m)}", markup=False)
    elif doc["decisions"]:
        out.print(f"job {job} was never migrated", markup=False)


def _move(m: dict[str, Any]) -> str:
    return f"{m['time']}  job {m['job_id']}#{m['instance']}  {m['src']} -> {m['dst']}  {m['status']}  {m['reason']}"


def _num(value: float | int | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if isinstance(value, float) else str(value)
