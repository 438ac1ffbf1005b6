"""The decision log's backends for the store's tests (tests/dblogs.py): ``log_url`` is an empty log on SQLite,
MariaDB and PostgreSQL in turn; each server starts once per test run."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: dblogs.py
from dblogs import BACKENDS, DbServers, new_log, servers  # noqa: E402


@pytest.fixture(scope="session")
def db_servers() -> Iterator[DbServers]:
    with servers() as found:
        yield found


@pytest.fixture(params=BACKENDS)
def log_url(request, tmp_path: Path) -> Iterator[str]:
    """A URL of an empty decision log: a new SQLite file, or a new database on a test server."""
    servers = request.getfixturevalue("db_servers") if request.param != "sqlite" else None
    with new_log(servers, request.param, tmp_path) as url:
        yield url
