"""The decision log's backends for tests: SQLite files, and real MariaDB and PostgreSQL servers (scripts/dev-db).

Shared by tests/service and tests/faults (each puts tests/ on sys.path). Each server starts once per test run,
on first use, in a directory of this run, and stops at the end; each test gets a log of its own on it
(``new_log``), dropped afterwards. A server that cannot start skips its backend's tests with the reason, except
under CI=true, where they fail: CI must never skip them quietly.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

REPO = Path(__file__).resolve().parents[1]
DEV_DB = REPO / "scripts" / "dev-db"
BACKENDS = ("sqlite", "mariadb", "postgresql")
SERVERS = BACKENDS[1:]


class DbServers:
    """The servers of this test run: started on first use; a failure is kept, so it is tried once."""

    def __init__(self) -> None:
        # under /tmp and searchable: the servers run as their own accounts (mysql, postgres) when root
        self.root = Path(tempfile.mkdtemp(prefix="compass-test-db-"))
        self.root.chmod(0o755)
        self.urls: dict[str, str] = {}
        self.failed: dict[str, str] = {}
        self.started: list[str] = []

    def url(self, kind: str) -> str:
        if kind not in self.urls and kind not in self.failed:
            began = time.monotonic()
            done = subprocess.run([sys.executable, str(DEV_DB), "start", kind, "--dir", str(self.root / kind)],
                                  capture_output=True, text=True, timeout=600)
            if done.returncode == 0:
                self.urls[kind] = done.stdout.strip().splitlines()[-1]
                self.started.append(kind)
                print(f"\n{kind} started in {time.monotonic() - began:.1f} s", file=sys.stderr)
            else:
                said = (done.stderr or done.stdout).strip().splitlines()
                self.failed[kind] = f"{kind} could not start: {said[-1] if said else f'exit {done.returncode}'}"
        if kind in self.failed:
            if os.environ.get("CI") == "true":
                pytest.fail(f"{self.failed[kind]} (CI=true: a backend is never skipped there)", pytrace=False)
            pytest.skip(self.failed[kind])
        return self.urls[kind]

    def stop(self) -> None:
        for kind in self.started:
            subprocess.run([sys.executable, str(DEV_DB), "stop", kind, "--dir", str(self.root / kind)],
                           capture_output=True, timeout=120)
        shutil.rmtree(self.root, ignore_errors=True)


def _admin(url: str):
    """An engine on the server's own database that runs each statement by itself (CREATE DATABASE needs that)."""
    return create_engine(url, isolation_level="AUTOCOMMIT")



@contextmanager
def new_log(servers: DbServers, kind: str, tmp_path: Path) -> Iterator[str]:
    """The URL of an empty decision log of ``kind``: a new SQLite file, or a new database (MariaDB) or schema
    (PostgreSQL: a database each would cost it a checkpoint) on the run's server, dropped afterwards."""
    if kind == "sqlite":
        yield f"sqlite:///{tmp_path / 'log' / 'compass.db'}"
        return
    server = make_url(servers.url(kind))
    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = _admin(server)
    if kind == "postgresql":
        made, gone = f"CREATE SCHEMA {name}", f"DROP SCHEMA {name} CASCADE"
        url = server.update_query_dict({"options": f"-csearch_path={name}"})
    else:
        made, gone = f"CREATE DATABASE {name}", f"DROP DATABASE {name}"
        url = server.set(database=name)
    with admin.connect() as conn:
        conn.execute(text(made))
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(gone))
        admin.dispose()


@contextmanager
def servers() -> Iterator[DbServers]:
    """This run's servers, stopped at the end (a session fixture wraps it)."""
    found = DbServers()
    try:
        yield found
    finally:
        found.stop()
