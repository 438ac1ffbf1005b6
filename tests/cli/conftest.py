"""The admin commands through the real CLI: recorded snapshots, real SQLite logs, no site config."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from compass_slurm.cli import cli
from compass_slurm.slurm import snapshot

SNAPSHOTS = Path(__file__).resolve().parents[1] / "data" / "snapshots"
sys.path.insert(0, str(SNAPSHOTS))
from make import large_state  # noqa: E402

MIXED = SNAPSHOTS / "mixed-16x8.json"


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """No COMPASS_* from the environment and an empty config file, so the site's settings never leak in."""
    import os

    for var in [v for v in os.environ if v.startswith("COMPASS_")]:
        monkeypatch.delenv(var)
    config = tmp_path / "config.toml"
    config.write_text("[compass]\n")
    monkeypatch.setenv("COMPASS_CONFIG", str(config))
    monkeypatch.setenv("COMPASS_DB", f"sqlite:///{tmp_path / 'none.db'}")
    yield config


@pytest.fixture(scope="session")
def large(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The 2,000-node snapshot, written once per session."""
    path = tmp_path_factory.mktemp("snapshots") / "large-2000x8.json"
    snapshot.save(large_state(), path)
    return path


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), env=env)


def json_of(*args: str) -> dict:
    result = invoke(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)
