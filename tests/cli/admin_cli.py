"""What the admin-command tests share: the real CLI run in-process, and the recorded mixed snapshot.

A module of its own name, not conftest: a test importing from ``conftest`` gets whichever conftest
was imported first under that name, so tests/cli could not be run beside tests/slurm.
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result

from compass_slurm.cli import cli

SNAPSHOTS = Path(__file__).resolve().parents[1] / "data" / "snapshots"
MIXED = SNAPSHOTS / "mixed-16x8.json"


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), env=env)


def json_of(*args: str) -> dict:
    result = invoke(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)
