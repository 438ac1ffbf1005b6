"""The admin commands through the real CLI: recorded snapshots, real SQLite logs, no site config."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from admin_cli import SNAPSHOTS

from compass_slurm.slurm import snapshot

sys.path.insert(0, str(SNAPSHOTS))
from make import large_state  # noqa: E402


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

