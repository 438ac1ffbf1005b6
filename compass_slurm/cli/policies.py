"""``compass policies``: the placement policies this compass knows, by name."""

from __future__ import annotations

import click

from .common import CONTEXT_SETTINGS, SCHEMA_VERSION, console, emit_json, json_option


@click.command("policies", context_settings=CONTEXT_SETTINGS)
@json_option
def command(as_json: bool) -> None:
    """List the registered placement policies with a one-line summary each."""
    from ..engine.policies.base import policy_class, policy_names

    rows = [(name, policy_class(name).summary) for name in policy_names()]
    if as_json:
        emit_json({"schema_version": SCHEMA_VERSION,
                   "policies": [{"name": name, "summary": summary} for name, summary in rows]})
        return
    out = console()
    width = max(len(name) for name, _ in rows)
    for name, summary in rows:
        out.print(f"{name:<{width}}  {summary}", markup=False)
