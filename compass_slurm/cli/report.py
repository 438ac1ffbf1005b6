"""``compass report``: the fragmentation report that cron or a systemd timer runs, from the daemon's samples."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import click

from ..atomic import write_atomic
from ..service.report import FORMATS
from .common import CONTEXT_SETTINGS, SCHEMA_VERSION, UserError, json_option
from .options import SINCE, db_option, read_log


@click.command("report", context_settings=CONTEXT_SETTINGS)
@click.option("--since", type=SINCE, default="24h", show_default=True,
              help="Start of the period: 24h, 7d, ... or an ISO date.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default=None,
              help="text (the default), md, json or html.")
@json_option
@click.option("--output", metavar="FILE",
              help="Write here instead of stdout; strftime codes are expanded (reports/%Y-%m-%d.html).")
@db_option
def command(since: datetime, fmt: str | None, as_json: bool, output: str | None, db: str | None) -> None:
    """Report SIF over time, time above 2/N, partial nodes, GPU use, stranded GPU-hours, blocked jobs and causes.

    A period without samples (a new or stopped daemon) gives a report that says so,
    with exit code 0; a missing decision log is an error (exit 2).
    """
    if as_json and fmt not in (None, "json"):
        raise UserError(f"--json and --format {fmt} ask for two formats", hint="give one of them")
    fmt = "json" if as_json else fmt or "text"
    from ..service.report import build_report, render
    report = read_log(db, lambda store: build_report(store, since))
    text = render(report, fmt, schema_version=SCHEMA_VERSION)
    if output is None:
        click.echo(text, nl=False)
        return
    target = Path(datetime.now(UTC).astimezone().strftime(output))
    _not_a_database(target)
    try:
        write_atomic(target, text)
    except OSError as err:
        where = f" ({err.filename})" if err.filename and Path(err.filename) != target else ""
        raise UserError(f"cannot write the report to {target}: {err.strerror}{where}",
                        hint="choose a writable --output path") from None
    click.echo(f"wrote {target}" + (f" ({report.message})" if report.message else ""), err=True)


#: the first bytes of every SQLite database file
SQLITE_HEADER = b"SQLite format 3\x00"


def _not_a_database(target: Path) -> None:
    """A report never replaces a database: an ``--output`` naming the decision log would destroy it."""
    try:
        with target.open("rb") as existing:
            head = existing.read(len(SQLITE_HEADER))
    except OSError:  # none there (or not readable: the write says why)
        return
    if head == SQLITE_HEADER:
        raise UserError(f"--output {target} is an SQLite database (the decision log?): a report never replaces one",
                        hint="choose another --output path")
