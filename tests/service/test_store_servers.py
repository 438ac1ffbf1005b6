"""The test servers' own rule (conftest.py): a server that cannot start skips its backend's tests, except under
CI=true, where they fail; it is tried once per run."""

from __future__ import annotations

from pathlib import Path

import pytest


def test_a_server_that_cannot_start_skips_its_tests_but_fails_them_on_ci(db_servers, monkeypatch,
                                                                          tmp_path: Path) -> None:
    servers = type(db_servers)
    broken = tmp_path / "dev-db"
    broken.write_text("import sys\nprint('dev-db: error: mariadbd not found', file=sys.stderr)\nsys.exit(2)\n")
    # the conftest's own globals: its module name, "conftest", may be another directory's in sys.modules
    monkeypatch.setitem(servers.url.__globals__, "DEV_DB", broken)
    monkeypatch.delenv("CI", raising=False)
    run = servers()
    try:
        with pytest.raises(pytest.skip.Exception, match="mariadb could not start: dev-db: error: mariadbd not found"):
            run.url("mariadb")
        broken.write_text("raise SystemExit('tried twice')\n")
        monkeypatch.setenv("CI", "true")
        with pytest.raises(pytest.fail.Exception, match=r"mariadbd not found \(CI=true"):
            run.url("mariadb")
    finally:
        run.stop()
