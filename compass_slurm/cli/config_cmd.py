"""``compass config show``: the merged settings and where each value came from."""

from __future__ import annotations

import click

from .common import CONTEXT_SETTINGS, SCHEMA_VERSION, console, emit_json, json_option
from .options import settings


@click.group("config", context_settings=CONTEXT_SETTINGS)
def command() -> None:
    """Inspect the settings: defaults < /etc/compass/config.toml < COMPASS_* variables < flags."""


@command.command("show", context_settings=CONTEXT_SETTINGS)
@click.option("--config", "config_file", metavar="FILE",
              help="Config file (default: $COMPASS_CONFIG, else /etc/compass/config.toml).")
@json_option
def show(config_file: str | None, as_json: bool) -> None:
    """Print every setting, its value and its source (default, the file, COMPASS_<NAME>)."""
    config = settings(config_file)
    values = config.as_dict()
    if as_json:
        emit_json({"schema_version": SCHEMA_VERSION,
                   "settings": {name: {"value": value, "source": config.sources[name]} for name, value in values.items()}})
        return
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for name in ("setting", "value", "source"):
        table.add_column(name, overflow="fold")
    for name, value in values.items():
        shown = ",".join(value) if isinstance(value, tuple) else str(value)
        table.add_row(name, shown or '""', config.sources[name])
    console().print(table)
