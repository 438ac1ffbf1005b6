"""The ``compass`` command. Each subcommand lives in the module named after it.

Heavy imports (rich, numpy, SQLAlchemy) happen inside the commands, so that
``compass -h`` and the sbatch wrapper start fast.
"""

from __future__ import annotations

import importlib
import sys

import click

from .. import __version__
from .common import CONTEXT_SETTINGS, run_main

# name -> module below compass_slurm.cli that defines a click command called ``command``.
COMMANDS = {
    "config": "config_cmd",
    "daemon": "daemon",
    "decisions": "decisions",
    "doctor": "doctor",
    "explain": "explain",
    "log": "log",
    "policies": "policies",
    "replay": "replay",
    "report": "report",
    "simulate": "simulate",
    "submit": "submit",
    "snapshot": "snapshot",
    "status": "status",
}


class LazyGroup(click.Group):
    """Imports a subcommand's module only when that subcommand runs."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        module = COMMANDS.get(name)
        if module is None:
            return None
        return importlib.import_module(f"{__name__}.{module}").command


@click.group(cls=LazyGroup, context_settings=CONTEXT_SETTINGS)
# the package's own version, not the installed metadata's (an editable install's may be older)
@click.version_option(__version__, prog_name="compass", message="%(prog)s %(version)s")
def cli() -> None:
    """COMPASS-ABS fragmentation-aware GPU placement for Slurm."""


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["submit"]:  # sbatch's arguments as given: click would drop a "--", and check them as its own
        from ..submit.wrapper import main as submit

        sys.exit(submit(args[1:]))
    run_main(cli)
