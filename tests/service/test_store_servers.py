"""The test servers' own rule (tests/dblogs.py): a server that cannot start skips its backend's tests, except under
CI=true, where they fail; it is tried once per run. And scripts/dev-db's own promises."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from compass_slurm.service.store import ErrorRecord, Store, StoreError

DEV_DB = Path(__file__).resolve().parents[2] / "scripts" / "dev-db"


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


@pytest.mark.parametrize("kind", ["mariadb", "postgresql"])
def test_dev_db_keeps_its_data_across_a_stop(db_servers, kind: str) -> None:
    """scripts/dev-db as a developer runs it: the URL is the last line, a second start finds the data of the
    first, a start of a running server answers at once, stop stops it."""
    db_servers.url(kind)  # this backend's rule first: a server that cannot start here skips (fails on CI)
    root = Path(tempfile.mkdtemp(prefix="compass-dev-db-"))
    root.chmod(0o755)
    where = ["--dir", str(root / kind)]

    def dev_db(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, str(DEV_DB), *args, kind, *where], capture_output=True, text=True,
                              timeout=300)

    try:
        first = dev_db("start")
        assert first.returncode == 0, first.stderr
        url = first.stdout.splitlines()[-1]
        with Store.open(url) as log:
            log.record_error(ErrorRecord("test", "kept"))
        assert dev_db("start").stdout.splitlines()[-1] == url  # running: the same URL again
        stopped = dev_db("stop")
        assert stopped.returncode == 0 and f"{kind} stopped" in stopped.stderr
        with pytest.raises(StoreError):
            Store.open(url, create=False)
        again = dev_db("start")
        assert again.returncode == 0 and again.stdout.splitlines()[-1] == url, again.stderr
        assert "data directory made" not in again.stderr
        with Store.open(url, create=False) as log:
            assert [e.message for e in log.errors()] == ["kept"]
    finally:
        dev_db("stop")
        shutil.rmtree(root, ignore_errors=True)
