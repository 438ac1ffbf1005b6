"""A daemon given a decision log it cannot reach does not start: one error line naming the log without its
password, exit 2, through the real ``compass daemon`` (it stops before it reads Slurm, so none is needed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from compass_slurm.service.store import StoreError, probe, shown_url

COMPASS = Path(sys.executable).parent / "compass"
SECRET = "s3cret-pw"


def start_daemon(db: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(COMPASS), "daemon", "--once", "--config", "/dev/null", "--db", db],
                          capture_output=True, text=True, timeout=60)


def assert_refused(done: subprocess.CompletedProcess[str], named: str, words: str) -> None:
    assert done.returncode == 2, done.stderr
    error, *rest = done.stderr.splitlines()
    assert error.startswith(f"compass: error: ") and named in error and words in error, error
    assert all(line.startswith("hint: ") for line in rest), done.stderr
    assert SECRET not in done.stderr + done.stdout and "Traceback" not in done.stderr


@pytest.mark.parametrize("scheme", ["postgresql+psycopg", "mysql+pymysql"])
def test_a_server_that_does_not_answer_stops_the_start(scheme: str) -> None:
    # port 9 on the loopback: nothing listens there, so the connection is refused at once
    done = start_daemon(f"{scheme}://compass:{SECRET}@127.0.0.1:9/compass")
    assert_refused(done, f"{scheme}://compass:***@127.0.0.1:9/compass", "cannot connect to the decision log")


@pytest.mark.parametrize(("db", "named", "words"), [
    (f"postgresql://u:{SECRET}@host:port/x", "postgresql://u:***@host:port/x", "invalid database URL"),
    ("no-scheme-here", "no-scheme-here", "invalid database URL"),
    (f"mysql+pymysql//root:{SECRET}@dbhost/compass", "mysql+pymysql//root:***@dbhost/compass",
     "invalid database URL"),  # no ':' before '//'
    (f"nosuchdb+driver://u:{SECRET}@h/x", "nosuchdb+driver://u:***@h/x", "cannot use database URL"),
])
def test_a_wrong_url_stops_the_start(db: str, named: str, words: str) -> None:
    assert_refused(start_daemon(db), named, words)


@pytest.mark.parametrize("kind", ["mariadb", "postgresql"])
def test_a_database_the_server_does_not_have_stops_the_start(db_servers, kind: str) -> None:
    server = make_url(db_servers.url(kind))
    missing = server.set(database="no_such_log")
    done = start_daemon(missing.render_as_string(hide_password=False))
    assert_refused(done, missing.render_as_string(hide_password=True), "no_such_log")
    assert probe(server.render_as_string(hide_password=False)) == server.render_as_string(hide_password=True)


def test_mariadb_refuses_a_wrong_password(db_servers) -> None:
    wrong = make_url(db_servers.url("mariadb")).set(password=SECRET)
    done = start_daemon(wrong.render_as_string(hide_password=False))
    assert_refused(done, "mysql+pymysql://root:***@localhost/compass", "Access denied")


@pytest.mark.parametrize(("raw", "shown"), [
    (f"mysql+pymysql://cu:{SECRET}@localhost/pw?unix_socket=/run/m.sock",
     "mysql+pymysql://cu:***@localhost/pw?unix_socket=/run/m.sock"),  # the daemon's "started" line
    (f"postgresql://u:p@{SECRET}@h/x", "postgresql://u:***@h/x"),  # SQLAlchemy reads the password as "p"
    (f"mysql+pymysql:///root:{SECRET}@h", "mysql+pymysql:///root:***@h"),
    (f"postgresql://u@h/x?sslmode=require&password={SECRET}", "postgresql://u@h/x?sslmode=require&password=***"),
    (f"mysql+pymysql//root:{SECRET}@dbhost/compass", "mysql+pymysql//root:***@dbhost/compass"),
    (f"postgresql://u:{SECRET}/x@host:port/x", "postgresql://u:***@host:port/x"),  # a '/' in the password
    (f"mysql:root:{SECRET}@h", "mysql:***@h"),
    ("postgresql://u@h/x", "postgresql://u@h/x"),
    ("sqlite:////var/lib/compass/compass.db", "sqlite:////var/lib/compass/compass.db"),
])
def test_a_url_is_shown_without_its_password_parsed_or_not(raw: str, shown: str) -> None:
    assert shown_url(raw) == shown


def test_a_sqlite_file_is_left_to_the_daemon(tmp_path: Path) -> None:
    """A file's faults (full, read-only) are logged by a running daemon, which places jobs all the same."""
    nowhere = tmp_path / "file" / "compass.db"
    (tmp_path / "file").write_text("a file where the directory should be")
    assert probe(f"sqlite:///{nowhere}") == str(nowhere)
    with pytest.raises(StoreError, match="cannot connect"):
        probe("postgresql+psycopg://u@127.0.0.1:9/x")


def test_pymysql_on_a_local_socket_skips_tls_and_still_connects(db_servers) -> None:
    """PyMySQL's default tries TLS on every connection (30-50 ms to build its context, a CLI command's budget): on
    a local socket it is off; over TCP the driver's default stands."""
    from compass_slurm.service.store import _connect_args

    local = make_url(db_servers.url("mariadb"))
    assert "unix_socket" in local.query and _connect_args(local)["ssl_disabled"] is True
    assert "ssl_disabled" not in _connect_args(make_url("mysql+pymysql://u@db.example.org/compass"))
    assert probe(local.render_as_string(hide_password=False)) == local.render_as_string(hide_password=True)
