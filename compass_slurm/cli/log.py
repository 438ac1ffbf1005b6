"""``compass log``: upkeep of the decision log. ``compass log prune --before DATE`` deletes old records by hand,
as the daemon does between cycles with ``log_retention_days``."""

from __future__ import annotations

from datetime import UTC, datetime

import click

from .common import CONTEXT_SETTINGS, SCHEMA_VERSION, UserError, emit_json, json_option
from .options import SinceType, db_option, read_slurm, settings, snapshot_option


class BeforeType(SinceType):
    name = "DATE|AGE"


@click.group("log", context_settings=CONTEXT_SETTINGS)
def command() -> None:
    """Look after the decision log (the daemon prunes it by itself: log_retention_days)."""


@command.command("prune", context_settings=CONTEXT_SETTINGS)
@click.option("--before", type=BeforeType(), required=True,
              help="Delete what cycles logged before this: an ISO date or date-time (2024-05-01, "
                   "2024-05-01T12:00Z; local time without an offset) or an age (30d, 12h, 2w: that long ago).")
@json_option
@db_option
@snapshot_option
def prune(before: datetime, as_json: bool, db: str | None, snapshot: str | None) -> None:
    """Delete the decisions, migrations, errors, samples and cycles logged before DATE, in small batches, and
    print how many rows of each table went.

    Kept whatever their age: the latest record of where each job Slurm still has was placed (a daemon
    restart reads it: Slurm is read for the job list, or --snapshot FILE), the latest sample, and their cycles.
    """
    from ..service.store import Store, StoreError

    if before > datetime.now(UTC):
        raise UserError(f"--before {before.isoformat(timespec='seconds')} is in the future",
                        hint="give a past date or an age such as 30d")
    keep = [job.id for job in read_slurm(snapshot).jobs]  # before any deletion: no Slurm, nothing deleted
    try:
        with Store.open(settings(db=db).db or None, create=False) as store:
            pruned = store.prune(before, keep)
            name = store.name
    except StoreError as err:
        raise UserError(err.message, hint=err.hint) from None
    if as_json:
        emit_json({"schema_version": SCHEMA_VERSION, "database": name, "before": before.isoformat(),
                   "deleted": pruned.deleted, "kept_places": pruned.kept_places})
        return
    counts = ", ".join(f"{n} {table}" for table, n in pruned.deleted.items())
    click.echo(f"deleted {pruned.total} rows from {name} (before {before:%Y-%m-%d %H:%M:%S} UTC): {counts}; "
               f"kept the latest place of {pruned.kept_places} jobs Slurm has")
