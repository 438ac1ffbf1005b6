"""``compass submit [--migratable] SBATCH-ARGS...``: the sbatch wrapper (compass_slurm.submit.wrapper) as a subcommand."""

from __future__ import annotations

import sys

import click


@click.command(
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False, "help_option_names": []},
)
@click.argument("sbatch_args", nargs=-1, type=click.UNPROCESSED)
def command(sbatch_args: tuple[str, ...]) -> None:
    """Submit like sbatch; GPU jobs go through the compass daemon (every argument goes to sbatch)."""
    from ..submit.wrapper import main

    sys.exit(main(list(sbatch_args)))
