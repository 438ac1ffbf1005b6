"""``compass snapshot save FILE``: record Slurm's live state as JSON, for ``--snapshot FILE`` and tests."""

from __future__ import annotations

import click

from .common import CONTEXT_SETTINGS, UserError


@click.group("snapshot", context_settings=CONTEXT_SETTINGS)
def command() -> None:
    """Saved Slurm states: every live command replays one with --snapshot FILE."""


@command.command("save", context_settings=CONTEXT_SETTINGS)
@click.argument("file", metavar="FILE")
def save(file: str) -> None:
    """Read nodes, jobs, partitions and reservations from Slurm once and write them to FILE."""
    from ..slurm import SlurmError, open_backend
    from ..slurm.errors import SlurmParseError
    from ..slurm.snapshot import save as save_state

    try:
        state = open_backend().read_state()
    except SlurmError as err:
        raise UserError(str(err), hint="is Slurm reachable? (SLURM_CONF, `scontrol ping`)") from None
    try:
        save_state(state, file)
    except OSError as err:
        raise UserError(f"cannot write {file}: {err.strerror}") from None
    except SlurmParseError as err:
        raise UserError(f"not saved: {err}", hint="a snapshot holds what it can load back; report the field") from None
    click.echo(f"saved {len(state.nodes)} nodes, {len(state.jobs)} jobs (Slurm {state.version}) to {file}", err=True)
