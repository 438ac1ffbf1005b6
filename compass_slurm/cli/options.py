"""Options and settings the admin commands share: --db, --snapshot, the merged config, the decision log."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

import click

from ..timeparse import TimeParseError, parse_since
from .common import UserError

if TYPE_CHECKING:
    from ..config import Config
    from ..slurm.state import SlurmState
    from ..service.store import Store

T = TypeVar("T")

#: the most log rows an option may ask for: more than a log holds, and within the 64-bit integers SQL takes
MAX_ROWS = 1_000_000_000
CONFIG_HINT = "fix the value in the config file or the COMPASS_* variable (`compass config show` lists both)"
SLURM_HINT = ("check that the Slurm client commands are installed and can reach slurmctld (SLURM_CONF); "
              "`compass doctor` checks the setup, --snapshot FILE reads a saved state instead")


def refuse_empty(flag: str, value: str | None) -> None:
    """An option given as "" (a shell variable left empty, most likely) is a mistake, not the option left out."""
    if value == "":
        raise UserError(f"{flag} '' is empty", hint=f"give a value, or leave {flag} out for its default")


def not_empty(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    refuse_empty(param.opts[0], value)
    return value


def db_option(func: Callable) -> Callable:
    return click.option("--db", metavar="URL", callback=not_empty,
                        help="Decision log (SQLAlchemy URL); default: $COMPASS_DB, the config file, else the daemon's.")(func)


def snapshot_option(func: Callable) -> Callable:
    return click.option("--snapshot", metavar="FILE", type=click.Path(dir_okay=False), callback=not_empty,
                        help="Read a state saved by `compass snapshot save` instead of live Slurm.")(func)


def settings(config_file: str | None = None, **flags: Any) -> Config:
    """The merged configuration (defaults < file < COMPASS_* < flags), or a UserError naming the bad value."""
    from ..config import ConfigError, load_config

    try:
        return load_config(config_file, flags=flags)
    except ConfigError as err:
        raise UserError(str(err), hint=CONFIG_HINT) from None


def open_log(url: str | None) -> Store:
    """The decision log for reading; StoreError (with its hint) when there is none."""
    from ..service.store import Store

    return Store.open(url or None, create=False)


def read_log(db: str | None, read: Callable[[Store], T]) -> T:
    """``read`` on the decision log that --db, $COMPASS_DB or the config file names; errors become UserError."""
    from ..service.store import StoreError

    try:
        with open_log(settings(db=db).db) as store:
            return read(store)
    except StoreError as err:
        raise UserError(err.message, hint=err.hint) from None


def read_slurm(snapshot: str | None) -> SlurmState:
    """One read of live Slurm, or of a snapshot; Slurm failures become a UserError with a hint."""
    from ..slurm import SlurmError, open_backend

    try:
        return open_backend(snapshot=snapshot).read_state()
    except SlurmError as err:
        hint = "record one with `compass snapshot save FILE`" if snapshot else SLURM_HINT
        raise UserError(str(err), hint=hint) from None


class SinceType(click.ParamType):
    """A click parameter type for ``--since``: bad values exit with code 2 and name the value."""

    name = "DURATION|DATE"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> datetime:
        if isinstance(value, datetime):
            return value
        try:
            return parse_since(str(value))
        except TimeParseError as err:
            self.fail(str(err), param, ctx)


SINCE = SinceType()


class FiniteFloatRange(click.FloatRange):
    """click.FloatRange without nan and the infinities: nan passes every bound (each comparison with it is false),
    and neither is a number of seconds or a factor the engine can use."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number
