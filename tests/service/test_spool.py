"""The decision log's spool: a log that cannot be written (a real SQLite file another connection holds locked, as
a database busy or restarting) never stops placement; what it could not take is written to it later, in order,
once each, and a full spool stops the daemon changing jobs."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest
from test_daemon_unit import Clock, Refusing, cluster, nodes, pending

from compass_slurm.config import Config
from compass_slurm.service import store as store_module
from compass_slurm.service.daemon import Daemon
from compass_slurm.service.prometheus import Totals, render
from compass_slurm.service.spool import Entry, Spool, read_backlog, spool_path
from compass_slurm.service.store import DecisionRecord, ErrorRecord, Store
from compass_slurm.slurm.snapshot import SnapshotBackend


@pytest.fixture(autouse=True)
def quick_busy_timeout(monkeypatch):
    # a locked log fails each write after SQLite's busy timeout: 5 s in the daemon, a blink here
    monkeypatch.setattr(store_module, "BUSY_TIMEOUT_MS", 20)


@contextmanager
def locked(db: Path) -> Iterator[None]:
    """Another connection holds the log's write lock: every write of the daemon fails, reads still work (WAL)."""
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("BEGIN EXCLUSIVE")
    try:
        yield
    finally:
        conn.execute("ROLLBACK")
        conn.close()


def make_daemon(tmp_path: Path, backend: SnapshotBackend, **config) -> Daemon:
    cfg = Config(anchors=str(tmp_path / "anchors"), metrics_textfile=str(tmp_path / "compass.prom"), **config)
    return Daemon(cfg, backend, f"sqlite:///{tmp_path / 'log.db'}", clock=Clock())


def created(tmp_path: Path) -> Path:
    db = tmp_path / "log.db"
    Store.open(f"sqlite:///{db}").close()
    return db


def placed(store: Store) -> list[tuple[str, str]]:
    return [(d.job_id, d.action) for d in store.decisions()]


def updates(backend: SnapshotBackend) -> list[str]:
    return [argv[2] for argv in backend.commands if argv[:2] == ["scontrol", "update"] and "ReqNodeList" in argv[3]]


def test_placement_goes_on_while_the_log_is_locked_and_the_spool_catches_up_in_order(tmp_path):
    db = created(tmp_path)
    backend = SnapshotBackend(cluster(nodes(4), [pending("10", gpus=4), pending("11", gpus=8)]), out=None)
    daemon = make_daemon(tmp_path, backend)
    spool = daemon.recorder.spool
    assert spool is not None and spool.path == Path(f"{db}.spool")
    with locked(db):
        first = daemon.cycle()
        assert [(d.job_id, d.action) for d in first.decisions] == [("10", "placed"), ("11", "placed")]
        assert updates(backend) == ["JobId=10", "JobId=11"]  # Slurm heard them: the spool logged them
        assert all(d.id is not None and d.id < 0 for d in first.decisions)
        backend.state = cluster(nodes(4), [pending("10", gpus=4), pending("11", gpus=8), pending("12", gpus=2)])
        daemon.cycle()
        assert updates(backend)[-1] == "JobId=12"
        assert stat.S_IMODE(os.stat(spool.path).st_mode) == 0o640
        backlog = read_backlog(spool.path)
        assert backlog.records == spool.records > 3 and backlog.oldest is not None
        assert f"compass_log_spooled_records {spool.records}" in (tmp_path / "compass.prom").read_text()
        with Store.open(f"sqlite:///{db}", create=False) as store:
            assert placed(store) == []  # nothing reached the log meanwhile
    daemon.cycle()  # the log is back: the spool first, then this cycle
    assert spool.records == 0 and spool.path.stat().st_size == 0
    assert "compass_log_spooled_records 0" in (tmp_path / "compass.prom").read_text()
    with Store.open(f"sqlite:///{db}", create=False) as store:
        decisions = store.decisions()
        assert [(d.job_id, d.action) for d in decisions] == [("10", "placed"), ("11", "placed"), ("12", "placed")]
        assert decisions[0].cycle == decisions[1].cycle < decisions[2].cycle  # each daemon cycle one log cycle
        samples = store.samples()
        assert [s.cycle for s in samples] == sorted(s.cycle for s in samples) and len(samples) == 3
        notes = [e for e in store.errors() if e.kind == "spool"]
        assert len(notes) == 2 and "daemon cycle 1 " in notes[0].message
        assert sum(1 for e in store.errors() if e.kind == "log") == 2  # each cycle's failure, in its cycle
    daemon.close()


def test_a_decision_slurm_refuses_while_spooled_reaches_the_log_as_refused_once(tmp_path):
    db = created(tmp_path)
    state = cluster(nodes(2), [pending("60", gpus=8, priority=9), pending("61", gpus=8, priority=1)])
    daemon = make_daemon(tmp_path, Refusing(state, "JobId=60", "Invalid job id specified"))
    with locked(db):
        report = daemon.cycle()
    assert [(d.job_id, d.action) for d in report.decisions] == [("60", "failed"), ("61", "placed")]
    daemon.cycle()
    with Store.open(f"sqlite:///{db}", create=False) as store:
        decisions = store.decisions()
        assert [(d.job_id, d.action) for d in decisions[:2]] == [("60", "failed"), ("61", "placed")]
        assert "Invalid job id specified" in decisions[0].reason
        assert decisions[0].cycle == decisions[1].cycle == store.samples()[0].cycle
    daemon.close()


def test_a_flush_cut_short_before_the_spool_is_emptied_writes_nothing_twice(tmp_path):
    db = created(tmp_path)
    spool = Spool(tmp_path / "spool.jsonl", 1 << 20)
    decision = DecisionRecord(job_id="7", request="1x2", nodes=("n1",), gpus_per_node={"n1": 2}, policy="compass",
                              rule="anchor", id=-1)
    spool.append("a:1", None, [Entry("decision", decision)])
    spool.append("a:1", None, [Entry("rewrite", replace(decision, action="failed", reason="refused"))])
    spool.append("a:2", None, [Entry("error", ErrorRecord(kind="slurm", message="second"))])
    saved = spool.path.read_bytes()
    with Store.open(f"sqlite:///{db}") as store:
        assert spool.flush(store) == 3
        # killed after the store took every batch, before the spool was emptied: the file is as it was
        spool.path.write_bytes(saved)
        spool.append("a:3", None, [Entry("error", ErrorRecord(kind="slurm", message="third"))])
        assert Spool(spool.path, 1 << 20).records == 4
        assert spool.flush(store) == 1  # only the batch not written yet
        assert placed(store) == [("7", "failed")]  # the rewrite applied before the decision reached the log
        assert [e.message for e in store.errors() if e.kind == "slurm"] == ["second", "third"]
        assert len([e for e in store.errors() if e.kind == "spool"]) == 3
    assert spool.records == 0


def test_a_torn_last_line_is_left_out(tmp_path):
    spool = Spool(tmp_path / "spool.jsonl", 1 << 20)
    spool.append("a:1", None, [Entry("error", ErrorRecord(kind="slurm", message="kept"))])
    with open(spool.path, "a") as f:
        f.write('{"key": "a:2", "at": 1')  # a crash mid-write: never fsync'd, so no cycle went on after it
    assert read_backlog(spool.path).records == 1


def test_a_full_spool_stops_the_daemon_changing_jobs_until_the_log_is_back(tmp_path, caplog):
    db = created(tmp_path)
    backend = SnapshotBackend(cluster(nodes(4), [pending("10", gpus=4)]), out=None)
    daemon = make_daemon(tmp_path, backend, spool_max_mb=0.001)  # about 1 KB: one cycle fills it
    spool = daemon.recorder.spool
    assert spool is not None
    with locked(db):
        daemon.cycle()
        assert updates(backend) == ["JobId=10"] and spool.full
        backend.state = cluster(nodes(4), [pending("10", gpus=4), pending("11", gpus=2)])
        before = len(backend.commands)
        caplog.clear()
        report = daemon.cycle()
        assert report.decisions == [] and backend.commands[before:] == []  # no pin, no lease renewal
        full = [r for r in caplog.records if "is full" in r.getMessage()]
        assert len(full) == 1 and full[0].levelname == "ERROR"
        assert daemon.recorder.dropped > 0  # samples and errors do not fit
    report = daemon.cycle()  # back: the spool flushed, then the cycle places again
    assert [d.job_id for d in report.decisions] == ["11"] and updates(backend)[-1] == "JobId=11"
    with Store.open(f"sqlite:///{db}", create=False) as store:
        assert placed(store) == [("10", "placed"), ("11", "placed")]
        assert any("was full" in e.message for e in store.errors())
    daemon.close()


def test_a_spool_of_0_mb_stops_the_daemon_only_from_the_cycle_after_the_log_failed(tmp_path, caplog):
    """An empty spool of 0 MB counts as full: while the log is written, that must stop no job."""
    db = created(tmp_path)
    backend = SnapshotBackend(cluster(nodes(4), [pending("10", gpus=4)]), out=None)
    daemon = make_daemon(tmp_path, backend, spool_max_mb=0)
    daemon.cycle()
    assert updates(backend) == ["JobId=10"] and not any("is full" in r.getMessage() for r in caplog.records)
    backend.state = cluster(nodes(4), [pending("10", gpus=4, required_nodes=("n1",)), pending("11", gpus=2)])
    with locked(db):
        daemon.cycle()  # its decision spooled, as a bigger spool takes it
        assert updates(backend)[-1] == "JobId=11"
        backend.state = cluster(nodes(4), [pending("10", gpus=4, required_nodes=("n1",)), pending("12", gpus=1)])
        before = len(backend.commands)
        assert daemon.cycle().decisions == [] and backend.commands[before:] == []
        assert sum("is full" in r.getMessage() for r in caplog.records) == 1
    daemon.cycle()  # back: the spool flushed, placing again
    assert updates(backend)[-1] == "JobId=12"
    with Store.open(f"sqlite:///{db}", create=False) as store:
        assert placed(store)[:3] == [("10", "placed"), ("11", "placed"), ("12", "placed")]
    daemon.close()


def test_no_decision_reaches_slurm_when_neither_the_log_nor_its_spool_takes_it(tmp_path, caplog):
    db = created(tmp_path)
    blocker = tmp_path / "blocker"
    blocker.write_text("")  # a file where the spool's directory should be: no spool can be made there
    backend = SnapshotBackend(cluster(nodes(4), [pending("10", gpus=4)]), out=None)
    daemon = make_daemon(tmp_path, backend, log_spool=str(blocker / "spool.jsonl"))
    with locked(db):
        report = daemon.cycle()
        assert updates(backend) == [] and [d.action for d in report.decisions] == ["failed"]
        assert "10" not in daemon.policy.cluster.jobs
        before = len(backend.commands)
        caplog.clear()
        assert daemon.cycle().decisions == [] and backend.commands[before:] == []  # no pin, no lease renewal
        assert sum("neither the decision log nor its spool" in r.getMessage() for r in caplog.records) == 1
        blocker.unlink()
        daemon.cycle()  # still nothing changed; its end spools again, and that works
        report = daemon.cycle()
        assert [d.action for d in report.decisions] == ["placed"] and updates(backend) == ["JobId=10"]
    daemon.close()


def test_a_restarted_daemon_flushes_the_spool_before_taking_over(tmp_path):
    db = created(tmp_path)
    state = cluster(nodes(4), [pending("10", gpus=4)])
    backend = SnapshotBackend(state, out=None)
    first = make_daemon(tmp_path, backend)
    with locked(db):
        first.cycle()
    first.close()  # killed with its spool not empty
    assert first.recorder.spool is not None and first.recorder.spool.records > 0
    # Slurm heard the pin (what the first daemon's update did): the job pending on n1
    again = SnapshotBackend(cluster(nodes(4), [pending("10", gpus=4, required_nodes=("n1",))]), out=None)
    second = make_daemon(tmp_path, again)
    report = second.cycle()
    assert report.decisions == [] and "10" in second.placed  # taken over from the spooled decision, not placed again
    assert updates(again) == []
    with Store.open(f"sqlite:///{db}", create=False) as store:
        assert placed(store) == [("10", "placed")]
    second.close()


def test_the_spool_lives_beside_a_sqlite_log_and_per_server_database_in_the_state_directory(tmp_path):
    assert spool_path("", f"sqlite:///{tmp_path}/x.db") == tmp_path / "x.db.spool"
    assert spool_path(str(tmp_path / "s"), "mysql+pymysql://u:pw@h/db") == tmp_path / "s"
    a = spool_path("", "mysql+pymysql://u:pw@h/db")
    assert a.name.startswith("spool-") and a == spool_path("", "mysql+pymysql://u:other@h/db")  # not the password
    assert a != spool_path("", "postgresql+psycopg://u@h/db")


def test_the_gauge_is_there_only_for_a_daemon_that_logs():
    assert "compass_log_spooled_records" not in render(None, Totals(), 1.0)
    assert "compass_log_spooled_records 5\n" in render(None, Totals(), 1.0, spooled=5)


def test_lines_are_json_with_their_key(tmp_path):
    spool = Spool(tmp_path / "spool.jsonl", 1 << 20)
    spool.append("k:1", 3, [Entry("error", ErrorRecord(kind="x", message="y"))], now=5.0)
    doc = json.loads(spool.path.read_text())
    assert doc["key"] == "k:1" and doc["resume"] == 3 and doc["at"] == 5.0
    assert doc["records"][0]["record"]["time"].startswith("1970-01-01T00:00:05")


# -- compass doctor -----------------------------------------------------------------------------


def doctor_log_check(monkeypatch, db: Path, spool: Path, **env: str) -> dict:
    from click.testing import CliRunner

    from compass_slurm.cli import cli, doctor

    # Slurm and the daemon cannot run here: those checks pass as on a healthy cluster
    for step in ("slurm_version", "backend_check", "json_support", "gpu_source", "daemon_socket"):
        monkeypatch.setattr(doctor.Doctor, step, lambda self: "fine")
    monkeypatch.setenv("COMPASS_DB", f"sqlite:///{db}")
    monkeypatch.setenv("COMPASS_LOG_SPOOL", str(spool))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    result = CliRunner().invoke(cli, ["doctor", "--json"])
    return {c["name"]: c for c in json.loads(result.stdout)["checks"]}["decision log"]


def test_doctor_says_how_far_the_log_is_behind(tmp_path, monkeypatch):
    db, path = created(tmp_path), tmp_path / "spool.jsonl"
    check = doctor_log_check(monkeypatch, db, path)
    assert check["level"] == "pass" and "nothing waits in its spool" in check["detail"]
    spool = Spool(path, 1 << 20)
    spool.append("a:1", None, [Entry("error", ErrorRecord(kind="x", message="y" * 2000))] * 2,
                 now=time.time() - 90)
    check = doctor_log_check(monkeypatch, db, path)
    assert check["level"] == "warn" and check["ok"] is True
    assert "2 records wait in its spool" in check["detail"] and "the oldest 9" in check["detail"]
    check = doctor_log_check(monkeypatch, db, path, COMPASS_SPOOL_MAX_MB="0.001")
    assert check["level"] == "fail" and "full" in check["detail"] and "spool_max_mb" in check["hint"]
