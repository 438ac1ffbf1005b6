"""The decision log on real databases: round trips, atomicity and schema versions on SQLite, MariaDB and
PostgreSQL (``db``: see tests/dblogs.py); WAL, files, read-only and full logs on SQLite."""

from __future__ import annotations

import sqlite3
from dataclasses import fields, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import MetaData, String, create_engine, event, insert, inspect, text
from sqlalchemy.engine import make_url

from compass_slurm.service import store as store_module
from compass_slurm.engine.model import Decision, Job, Migration
from compass_slurm.service.store import (
    SCHEMA_VERSION,
    DatabaseMissing,
    DecisionRecord,
    ErrorRecord,
    MigrationRecord,
    Place,
    SampleRecord,
    SchemaTooNew,
    Store,
    StoreError,
    cycles_table,
    default_db_url,
    resolve_db_url,
)

T0 = datetime(2024, 5, 1, 12, 0, 0, 250000, tzinfo=UTC)


def url(path: Path) -> str:
    return f"sqlite:///{path}"


@pytest.fixture
def db(log_url: str) -> str:
    """The URL of an empty log on each backend."""
    return log_url


@pytest.fixture
def store(db: str):
    with Store.open(db) as opened:
        yield opened


@pytest.fixture
def path(tmp_path: Path) -> Path:
    """A SQLite log's file, for what only SQLite has (WAL, files, page limits)."""
    return tmp_path / "log" / "compass.db"


@pytest.fixture
def sqlite_store(path: Path):
    with Store.open(url(path)) as opened:
        yield opened


def sql(db: str, statement: str) -> list[tuple]:
    """Run one statement on the log behind ``db`` outside the Store; its rows, if it returns any."""
    engine = create_engine(db)
    try:
        with engine.begin() as conn:
            result = conn.execute(text(statement))
            return [tuple(row) for row in result] if result.returns_rows else []
    finally:
        engine.dispose()


def decision(job: str = "101", at: datetime = T0, **context) -> DecisionRecord:
    return DecisionRecord.of(
        Decision(job, ("node02", "node02", "node07"), 4, "slot", candidates=("node02", "node07", "node09")),
        Job(job, 3, 4, migratable=False, user="alice"),
        "compass",
        **{"time": at, "sif_before": 0.125, "sif_after": 0.0625, "partial_before": 2, "partial_after": 1,
           "reason": "fills slotted node02 first", **context},
    )


def sample(at: datetime = T0) -> SampleRecord:
    return SampleRecord(nodes=16, gpus=128, gpus_used=76, partial=1, phi_star=1, sif=0.0, sif_bound=0.125,
                        wcc=True, queue_len=3, pending_gpus=20, orphans=1, abs_violations=0, errors=2,
                        duration=0.042, time=at)


def count(db: str, table: str) -> int:
    return sql(db, f"SELECT count(*) FROM {table}")[0][0]


# -- round trips ----------------------------------------------------------------------------


def test_every_record_type_round_trips(store: Store) -> None:
    placed = decision()
    moved = MigrationRecord.of(Migration("88", 1, "node03", "node05"), reason="compact", time=T0)
    seen = sample()
    failed = ErrorRecord(kind="slurm-parse", message="squeue line 3: unknown field 'Foo'", time=T0)

    ids = [store.record_decision(placed), store.record_migration(moved), store.record_sample(seen),
           store.record_error(failed)]

    assert store.decisions() == [replace(placed, id=ids[0])]
    assert store.migrations() == [replace(moved, id=ids[1])]
    assert store.samples() == [replace(seen, id=ids[2])]
    assert store.errors() == [replace(failed, id=ids[3])]
    back = store.decisions()[0]
    assert back.nodes == ("node02", "node02", "node07")
    assert back.gpus_per_node == {"node02": 8, "node07": 4}
    assert back.request == "3x4"
    assert back.request_raw == {"instances": 3, "gpus": 4, "migratable": False, "distinct_nodes": False}
    assert back.time == T0 and back.time.tzinfo is not None


def test_nodes_are_a_comma_list_in_instance_order(store: Store, db: str) -> None:
    store.record_decision(decision())
    [(nodes, time)] = sql(db, "SELECT nodes, time FROM decisions")
    assert nodes == "node02,node02,node07"
    assert time == T0.timestamp()


def test_time_defaults_to_now_in_utc(store: Store) -> None:
    before = datetime.now(UTC)
    store.record_error(ErrorRecord(kind="store", message="x"))
    (logged,) = store.errors()
    assert before <= logged.time <= datetime.now(UTC)
    assert logged.cycle is None


def test_as_json_uses_iso_utc_and_lists(store: Store) -> None:
    store.record_decision(decision())
    doc = store.decisions()[0].as_json()
    assert doc["time"] == "2024-05-01T12:00:00.250+00:00"
    assert doc["nodes"] == ["node02", "node02", "node07"]
    assert doc["candidates"] == ["node02", "node07", "node09"]
    assert list(doc)[:2] == ["id", "time"]


def test_migration_status_says_whether_slurm_did_it(store: Store) -> None:
    store.record_migration(MigrationRecord.of(Migration("88", 0, "node03", "node05"), time=T0))
    store.record_migration(MigrationRecord.of(Migration("88", 1, "node03", "node06"), time=T0, status="failed"))
    assert [m.status for m in store.migrations(job="88")] == ["done", "failed"]
    with pytest.raises(ValueError, match="'lost'"):
        store.record_migration(MigrationRecord("88", 0, "a", "b", status="lost"))
    assert len(store.migrations(job="88")) == 2


def test_a_migrated_decision_names_both_places(store: Store) -> None:
    moved = decision("7", action="migrated", from_nodes=("node02",), reason="compact")
    store.record_decision(replace(moved, nodes=("node05",), gpus_per_node={"node05": 4}))
    (logged,) = store.decisions(job="7")
    assert (logged.action, logged.nodes, logged.from_nodes) == ("migrated", ("node05",), ("node02",))
    doc = logged.as_json()
    assert doc["from"] == ["node02"] and "from_nodes" not in doc


def test_a_long_rule_is_stored_and_read_back_whole(store: Store) -> None:
    """A multi-instance job's rules joined can be longer than 64 characters, the rule column's width before schema
    v4, which MariaDB and PostgreSQL enforced (the log cut the text): the column now takes any length."""
    long = "; ".join(["anchor slot on the best-fit slotted node", "1-GPU instance on a newly opened pool node",
                      "outside ABS: 1-GPU in slotted-node residue (work-conserving)"] * 10)
    user = "a.very.long.given-name.family-name@research.department.university.example"
    store.record_decision(replace(decision("9"), rule=long, user=user))
    (logged,) = store.decisions(job="9")
    assert len(long) > 1000 and (logged.rule, logged.user) == (long, user)
    store.rewrite_decision(replace(logged, rule=long + "; again", action="failed"))
    assert store.decisions(job="9")[0].rule == long + "; again"


def test_a_text_longer_than_its_column_is_cut_on_a_server_not_refused(store: Store) -> None:
    """What is left of the cut: a text longer than its column (none the daemon writes comes near one) is cut on
    MariaDB and PostgreSQL, which refuse it, and a record refused would hold back the spool behind it for good;
    SQLite keeps it whole."""
    absurd = "u" * 300
    store.record_decision(replace(decision("9"), user=absurd))
    (logged,) = store.decisions(job="9")
    width = store_module.decisions_table.c.user.type.length
    kept = absurd if store.engine.dialect.name == "sqlite" else absurd[:width - 1] + "\u2026"
    assert len(absurd) > width and logged.user == kept
    store.rewrite_decision(replace(logged, user=absurd, action="failed"))
    assert store.decisions(job="9")[0].user == kept


# -- queries --------------------------------------------------------------------------------


def test_decision_filters_and_latest(store: Store) -> None:
    for minutes, job in ((0, "101"), (10, "102"), (20, "101"), (30, "103")):
        store.record_decision(decision(job, T0 + timedelta(minutes=minutes)))

    assert [d.job_id for d in store.decisions()] == ["101", "102", "101", "103"]
    assert [d.job_id for d in store.decisions(since=T0 + timedelta(minutes=10))] == ["102", "101", "103"]
    assert [d.time for d in store.decisions(job="101")] == [T0, T0 + timedelta(minutes=20)]
    assert [d.job_id for d in store.decisions(limit=2)] == ["101", "103"]  # the latest two, oldest first
    assert store.decisions(since=T0 + timedelta(hours=1)) == []


def test_latest_places_are_each_job_s_last_record_naming_its_nodes(store: Store) -> None:
    store.record_decision(decision("101"))
    moved = store.record_decision(decision("101", action="migrated", from_nodes=("node01", "node02", "node07")))
    store.record_decision(decision("101", action="failed"))  # refused: names no place
    store.record_decision(decision("102", action="dry-run"))
    many = [str(n) for n in range(1000, 2200)]  # more ids than one query binds
    assert store.latest_places(["101", "102", "999", *many]) == {
        "101": Place(moved, ("node02", "node02", "node07"))}
    [record] = store.decisions_with_ids([moved])
    assert (record.id, record.action, record.from_nodes) == (moved, "migrated", ("node01", "node02", "node07"))
    ids = [store.record_decision(decision(job)) for job in many]
    assert [r.id for r in store.decisions_with_ids(reversed(ids))] == ids  # oldest first, over several queries


def test_unfinished_cycle_jobs_names_the_jobs_placed_since_the_last_cycle_that_ended(store: Store) -> None:
    with store.cycle():
        store.record_decision(decision("101", at=None))
        store.record_sample(sample(at=None))
    assert store.unfinished_cycle_jobs() == []
    with store.cycle():  # killed after writing its decisions ahead: no sample
        store.record_decision(decision("102", at=None))
        store.record_decision(decision("103", at=None, action="failed"))
        store.record_decision(decision("104", at=None))
    with store.cycle():  # the next daemon's first cycle, skipped: slurmctld away
        store.record_error(ErrorRecord("slurm", "cycle skipped"))
    assert store.unfinished_cycle_jobs() == ["102", "104"]
    with store.cycle():
        store.record_sample(sample(at=None))
    assert store.unfinished_cycle_jobs() == []


def test_samples_and_errors_filter_by_time(store: Store) -> None:
    for minutes in (0, 5, 10):
        store.record_sample(sample(T0 + timedelta(minutes=minutes)))
        store.record_error(ErrorRecord("slurm-parse", f"cycle {minutes}", time=T0 + timedelta(minutes=minutes)))
    assert len(store.samples(since=T0 + timedelta(minutes=5))) == 2
    assert [e.message for e in store.errors(since=T0 + timedelta(minutes=10))] == ["cycle 10"]


# -- cycles and atomicity -------------------------------------------------------------------


def test_a_cycle_commits_its_records_together_and_tags_them(store: Store) -> None:
    with store.cycle() as cycle_id:
        store.record_decision(decision())
        store.record_sample(sample())
    with store.cycle() as next_id:
        store.record_error(ErrorRecord("scontrol", "timeout", time=T0))
    assert next_id == cycle_id + 1
    assert store.decisions()[0].cycle == cycle_id
    assert store.samples()[0].cycle == cycle_id
    assert store.errors()[0].cycle == next_id


def test_decisions_written_together_take_ids_in_their_order(store: Store) -> None:
    first = store.record_decision(decision("100"))
    with store.cycle() as cycle_id:
        ids = store.record_decisions([replace(decision(str(job)), nodes=(f"n{job}", "n0")) for job in range(101, 141)])
    assert store.record_decisions([]) == []
    assert ids == sorted(ids) and len(set(ids)) == 40 and ids[0] > first
    got = {d.id: d for d in store.decisions()}
    assert [(got[i].job_id, got[i].nodes, got[i].cycle) for i in ids] == [
        (str(job), (f"n{job}", "n0"), cycle_id) for job in range(101, 141)]


def test_an_exception_in_a_cycle_leaves_no_rows(store: Store, db: str) -> None:
    store.record_decision(decision("100"))
    with pytest.raises(RuntimeError), store.cycle():
        store.record_decision(decision("101"))
        store.record_sample(sample())
        raise RuntimeError("slurm went away")
    assert [d.job_id for d in store.decisions()] == ["100"]
    assert store.samples() == []
    assert count(db, "cycles") == 0


def test_a_failing_write_raises_store_error_and_rolls_back_the_cycle(store: Store) -> None:
    store.record_decision(decision("100"))
    with pytest.raises(StoreError, match="cannot write to the decision log") as caught, store.cycle():
        store.record_decision(decision("101"))
        store.record_decision(replace(decision("102"), policy=None))  # NOT NULL violated
    assert "policy" in caught.value.message  # each server names the column in its own words
    assert [d.job_id for d in store.decisions()] == ["100"]


def test_cycles_do_not_nest(store: Store) -> None:
    with pytest.raises(StoreError, match="already open"), store.cycle(), store.cycle():
        pass


def test_a_read_only_database_raises_store_error_and_keeps_earlier_rows(sqlite_store: Store, path: Path) -> None:
    store = sqlite_store
    store.record_decision(decision("100"))
    # root ignores file modes, so ask SQLite itself for a read-only connection.
    with Store.open(f"sqlite:///file:{path}?mode=ro&uri=true") as read_only:
        assert [d.job_id for d in read_only.decisions()] == ["100"]
        with pytest.raises(StoreError, match="readonly") as caught:
            read_only.record_decision(decision("101"))
        assert "read-only" in caught.value.hint
        with pytest.raises(StoreError), read_only.cycle():
            read_only.record_sample(sample())
    assert [d.job_id for d in store.decisions()] == ["100"]
    assert count(url(path), "cycles") == 0


def test_a_full_disk_raises_store_error_and_keeps_earlier_rows(sqlite_store: Store) -> None:
    store = sqlite_store
    store.record_decision(decision("100"))
    pages = store.engine.connect().exec_driver_sql("PRAGMA page_count").scalar()
    store.engine.dispose()

    # SQLite's page limit makes the file "full" exactly as a full disk does.
    @event.listens_for(store.engine, "connect")
    def cap(dbapi_connection, _record) -> None:
        dbapi_connection.execute(f"PRAGMA max_page_count={pages}")

    with pytest.raises(StoreError, match="full") as caught, store.cycle():
        for n in range(50):
            store.record_decision(decision(str(n), reason="x" * 4000))
    assert "disk is full" in caught.value.hint
    assert [d.job_id for d in store.decisions()] == ["100"]
    assert store.integrity_check() == []


# -- schema ---------------------------------------------------------------------------------


def test_schema_version_is_stored(store: Store, db: str) -> None:
    assert store.schema_version() == SCHEMA_VERSION
    assert sql(db, "SELECT id, version FROM schema_version") == [(1, SCHEMA_VERSION)]
    tables = set(inspect(store.engine).get_table_names())
    assert {"schema_version", "cycles", "decisions", "migrations", "samples", "errors"} <= tables


def set_version(db: str, version: int) -> None:
    sql(db, f"UPDATE schema_version SET version = {version}")


@pytest.mark.parametrize("create", [True, False])
def test_a_newer_schema_is_refused(store: Store, db: str, create: bool) -> None:
    store.record_decision(decision())
    set_version(db, SCHEMA_VERSION + 1)
    with pytest.raises(SchemaTooNew, match=f"schema version {SCHEMA_VERSION + 1}, newer") as caught:
        Store.open(db, create=create)
    assert "upgrade compass_slurm" in caught.value.hint
    set_version(db, SCHEMA_VERSION)
    with Store.open(db) as again:
        assert len(again.decisions()) == 1  # untouched


def test_an_older_schema_is_migrated_by_the_writer_only(store: Store, db: str, monkeypatch) -> None:
    store.record_decision(decision())
    set_version(db, 0)
    with pytest.raises(StoreError, match="old schema version"):
        Store.open(db, create=False)
    with pytest.raises(StoreError, match="no migration from schema version 0"):
        Store.open(db)

    steps = []
    for version in range(SCHEMA_VERSION):
        monkeypatch.setitem(store_module.MIGRATIONS, version, lambda conn: steps.append(conn))
    with Store.open(db) as upgraded:
        assert upgraded.schema_version() == SCHEMA_VERSION
    assert len(steps) == SCHEMA_VERSION
    with Store.open(db, create=False) as reader:
        assert len(reader.decisions()) == 1


def test_a_version_1_log_is_upgraded_and_keeps_every_row(store: Store, db: str) -> None:
    """Schema 1 had no decisions.from_nodes (v2) nor the leader table (v3): the daemon adds them; old rows read
    back unchanged."""
    store.record_decision(decision())
    store.record_migration(MigrationRecord.of(Migration("101", 0, "node02", "node05"), time=T0))
    store.record_sample(sample())
    before = store.decisions()[0]
    store.close()
    sql(db, "ALTER TABLE decisions DROP COLUMN from_nodes")  # make it the version 1 log an older compass wrote
    sql(db, "DROP TABLE leader")  # (v3)
    sql(db, "ALTER TABLE samples DROP COLUMN actions")  # (v3)
    set_version(db, 1)
    with Store.open(db) as upgraded:
        assert upgraded.schema_version() == SCHEMA_VERSION
        assert upgraded.decisions() == [before]
        assert len(upgraded.migrations()) == 1 and len(upgraded.samples()) == 1
        upgraded.record_decision(decision("102", action="migrated", from_nodes=("node01",)))
        assert upgraded.decisions(job="102")[0].from_nodes == ("node01",)
        assert upgraded.integrity_check() in ([], None)  # None: a server, which has no such check


def v3_log(db: str, *records: DecisionRecord) -> None:
    """An empty log ``db`` made with schema v3's DDL (decisions.rule, decisions.user and both job_id columns of 64
    characters), holding ``records`` as v3 wrote them."""
    old = MetaData()
    for table in store_module.metadata.sorted_tables:
        table.to_metadata(old)
    for column in store_module.WIDENED:
        old.tables[column.table.name].c[column.name].type = String(64)
    if make_url(db).get_backend_name() == "sqlite":
        Path(make_url(db).database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(db)
    try:
        with engine.begin() as conn:
            old.create_all(conn)
            conn.execute(insert(old.tables["schema_version"]).values(id=1, version=3))
            for record in records:
                conn.execute(insert(old.tables["decisions"]).values(
                    {f.name: getattr(record, f.name) for f in fields(record) if f.name != "id"}))
    finally:
        engine.dispose()


def widths(db: str, table: str) -> dict[str, int | None]:
    """The declared width of each text column of ``table`` (None: any length); "null" lists the nullable ones."""
    engine = create_engine(db)
    try:
        found = inspect(engine).get_columns(table)
    finally:
        engine.dispose()
    return {**{c["name"]: getattr(c["type"], "length", None) for c in found if isinstance(c["type"], String)},
            "null": [c["name"] for c in found if c["nullable"]]}


def test_a_version_3_log_is_upgraded_and_then_keeps_long_texts_whole(db: str) -> None:
    """v4 widened the columns a server cut texts to (rule to any length, user and job ids to 255): a v3 log is
    altered in place, its rows kept. SQLite keeps any length in any column: its columns stay as declared."""
    old = replace(decision("101"), rule="anchor slot on the best-fit slotted node")
    v3_log(db, old)
    assert {k: widths(db, "decisions")[k] for k in ("job_id", "user", "rule")} == dict.fromkeys(
        ("job_id", "user", "rule"), 64)
    with pytest.raises(StoreError, match="old schema version 3"):
        Store.open(db, create=False)
    long_id, long_user = "4242_[" + ",".join(str(n) for n in range(1, 60, 2)) + "]", "søren." + "x" * 70
    long_rule = "; ".join(["anchor slot on the best-fit slotted node", "1-GPU instance on a newly opened pool node"])
    with Store.open(db) as upgraded:
        assert upgraded.schema_version() == SCHEMA_VERSION
        assert upgraded.decisions() == [replace(old, id=1)]
        upgraded.record_decision(replace(decision(long_id), rule=long_rule * 20, user=long_user))
        upgraded.record_migration(MigrationRecord.of(Migration(long_id, 0, "node02", "node05"), time=T0))
    with Store.open(db, create=False) as reader:
        (logged,) = reader.decisions(job=long_id)
        assert (logged.job_id, logged.user, logged.rule) == (long_id, long_user, long_rule * 20)
        assert [m.job_id for m in reader.migrations()] == [long_id]
        server = reader.engine.dialect.name != "sqlite"
    after = widths(db, "decisions")
    assert after["rule"] == (None if server else 64)
    assert (after["job_id"], after["user"], widths(db, "migrations")["job_id"]) == ((255,) * 3 if server else (64,) * 3)
    assert {"job_id", "rule"}.isdisjoint(after["null"]) and "user" in after["null"]
    with Store.open(db) as again:  # a v4 log opened again: nothing to do
        assert again.schema_version() == SCHEMA_VERSION


def test_a_record_naming_no_cycle_of_the_log_is_refused(store: Store) -> None:
    with pytest.raises(StoreError, match="(?i)foreign key"):
        store.record_error(ErrorRecord("x", "y", cycle=999))
    assert store.errors() == []


def test_sqlite_runs_in_wal_mode_with_foreign_keys(sqlite_store: Store, path: Path) -> None:
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    with sqlite_store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == store_module.BUSY_TIMEOUT_MS


def test_integrity_check_passes_on_a_fresh_log(store: Store) -> None:
    store.record_sample(sample())
    assert store.integrity_check() == ([] if store.engine.dialect.name == "sqlite" else None)


def test_long_texts_other_alphabets_and_64_bit_ids_round_trip(store: Store, db: str) -> None:
    """What only SQLite lets through unchecked: MySQL's TEXT ends at 64 KiB and its utf8 at 3 bytes a
    character, and a server's INTEGER at 2**31 (a log that grows for years)."""
    far = 3_000_000_000
    sql(db, f"INSERT INTO cycles (id, time) VALUES ({far}, 0)")
    many = tuple(f"gpu-node-{n:05d}" for n in range(6000))  # about 90 KB of nodes and candidates
    wide = replace(decision("4242_[1-100%5]", reason="placed ✓ " + "x" * 70_000), user="søren",
                   nodes=many, candidates=many, cycle=far)
    wide_id = store.record_decision(wide)
    store.record_error(ErrorRecord("slurm-parse", "line: Jöb 🚀 " + "y" * 70_000, cycle=far))
    assert store.decisions() == [replace(wide, id=wide_id)]
    assert store.decisions()[0].cycle == far
    [error] = store.errors()
    assert error.message.startswith("line: Jöb 🚀 ") and len(error.message) == 70_012


# -- concurrency ----------------------------------------------------------------------------


def test_readers_see_committed_rows_while_the_daemon_writes(store: Store, db: str) -> None:
    store.record_decision(decision("100"))
    reader = Store.open(db, create=False)
    with store.cycle():
        store.record_decision(decision("101"))
        assert [d.job_id for d in reader.decisions()] == ["100"]  # no wait, no uncommitted rows
    assert [d.job_id for d in reader.decisions()] == ["100", "101"]
    reader.close()


def test_a_writer_commits_while_a_reader_holds_a_snapshot(sqlite_store: Store, path: Path) -> None:
    store = sqlite_store
    store.record_decision(decision("100"))
    reader = sqlite3.connect(path, isolation_level=None, timeout=0)
    reader.execute("BEGIN")
    assert reader.execute("SELECT count(*) FROM decisions").fetchone() == (1,)
    # Without WAL this commit would wait for the reader's lock and fail after busy_timeout.
    store.record_decision(decision("101"))
    assert reader.execute("SELECT count(*) FROM decisions").fetchone() == (1,)  # its snapshot
    reader.execute("COMMIT")
    assert reader.execute("SELECT count(*) FROM decisions").fetchone() == (2,)
    reader.close()


# -- opening --------------------------------------------------------------------------------


def test_a_reader_does_not_create_a_missing_database(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "compass.db"
    with pytest.raises(DatabaseMissing, match=f"no decision log at {missing}") as caught:
        Store.open(url(missing), create=False)
    assert "compass doctor" in caught.value.hint
    assert not missing.parent.exists()


def test_the_writer_creates_the_directory(tmp_path: Path) -> None:
    nested = tmp_path / "a" / "b" / "compass.db"
    Store.open(url(nested)).close()
    assert nested.is_file()


def test_a_directory_that_is_a_file_is_a_store_error(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("")
    with pytest.raises(StoreError, match="cannot create the directory"):
        Store.open(url(tmp_path / "plain" / "compass.db"))


def test_a_file_that_is_not_a_database_is_a_store_error(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not sqlite at all" * 100)
    with pytest.raises(StoreError, match="not a database") as caught:
        Store.open(url(junk), create=False)
    assert "not a SQLite database" in caught.value.hint


def test_a_database_without_the_schema_is_refused_by_readers(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.close()
    with pytest.raises(StoreError, match="holds no compass decision log"):
        Store.open(url(other), create=False)


def test_the_log_is_not_made_among_another_program_s_tables_but_beside_its_own_half_made_ones(
        log_url: str, tmp_path: Path) -> None:
    (tmp_path / "log").mkdir(exist_ok=True)  # (a SQLite log's directory, which Store.open would make)
    engine = create_engine(log_url)
    try:
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE users (x INTEGER)"))
        with pytest.raises(StoreError, match=r"holds other tables \(users\) and no compass decision log") as caught:
            Store.open(log_url, create=True)
        assert "a database of its own" in caught.value.hint
        assert inspect(engine).get_table_names() == ["users"]  # nothing added among them
        with engine.begin() as conn:
            conn.execute(text("DROP TABLE users"))
        cycles_table.create(engine)  # ours, its creation cut short (DDL is not transactional on MariaDB)
        Store.open(log_url, create=True).close()
    finally:
        engine.dispose()


@pytest.mark.parametrize("table", ["decisions", "migrations", "samples", "errors"])
def test_a_time_no_compass_wrote_is_a_store_error_naming_the_table_and_the_value(sqlite_store: Store, path: Path,
                                                                                  table: str) -> None:
    """SQLite keeps whatever a hand or another program puts in a column; a reader says what, and changes nothing."""
    sqlite_store.record_decision(decision())
    sqlite_store.record_migration(MigrationRecord.of(Migration("88", 1, "node03", "node05"), reason="compact"))
    sqlite_store.record_sample(sample())
    sqlite_store.record_error(ErrorRecord(kind="slurm", message="x"))
    sql(url(path), f"UPDATE {table} SET time = 'notatime'")
    read = {"decisions": sqlite_store.decisions, "migrations": sqlite_store.migrations,
            "samples": sqlite_store.samples, "errors": sqlite_store.errors}[table]
    with pytest.raises(StoreError) as caught:
        read()
    assert caught.value.message == (f"cannot read the decision log {path}: table {table}: time 'notatime' is not a "
                                    "time (seconds since 1970)")
    assert caught.value.hint.startswith("the log was changed outside compass: correct that value")
    assert sql(url(path), f"SELECT time FROM {table}") == [("notatime",)]


@pytest.mark.parametrize("create", [True, False])
def test_a_schema_version_that_is_no_number_is_a_store_error(sqlite_store: Store, path: Path, create: bool) -> None:
    sqlite_store.record_decision(decision())
    sql(url(path), "UPDATE schema_version SET version = 'abc'")
    with pytest.raises(StoreError) as caught:
        Store.open(url(path), create=create)
    assert caught.value.message == (f"cannot open the decision log {path}: table schema_version: version 'abc' is "
                                    "not a whole number")
    assert sql(url(path), "SELECT version FROM schema_version") == [("abc",)]
    assert count(url(path), "decisions") == 1


@pytest.mark.parametrize(
    ("bad", "words"),
    [("no-scheme-here", "invalid database URL"), ("nosuchdb+driver://h/x", "cannot use database URL")],
)
def test_bad_urls_are_store_errors(bad: str, words: str) -> None:
    with pytest.raises(StoreError, match=words):
        Store.open(bad)


def test_url_resolution_order(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("COMPASS_DB", "sqlite:///from-env.db")
    assert resolve_db_url("sqlite:///explicit.db") == "sqlite:///explicit.db"
    assert resolve_db_url() == "sqlite:///from-env.db"
    monkeypatch.delenv("COMPASS_DB")
    assert resolve_db_url() == default_db_url()


def test_default_path_for_root_and_for_users(tmp_path: Path, monkeypatch) -> None:
    system = tmp_path / "var-lib-compass" / "compass.db"
    monkeypatch.setattr(store_module, "SYSTEM_DB", system)
    monkeypatch.setattr(store_module.os, "geteuid", lambda: 0)
    assert default_db_url() == f"sqlite:///{system}"

    # A plain user, who may not write /var/lib/compass (root may write anything).
    monkeypatch.setattr(store_module.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(store_module.os, "access", lambda path, mode: False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert default_db_url() == f"sqlite:///{tmp_path}/state/compass/compass.db"

    system.parent.mkdir()
    system.touch()  # a root daemon's log exists: users read that one
    assert default_db_url() == f"sqlite:///{system}"


def test_a_report_counts_decisions_per_cycle_from_the_samples_tallies_and_the_rest_one_by_one(store: Store) -> None:
    """count_actions: a cycle whose sample tallies its decisions is read from the tally alone; a cycle cut short
    (no sample), one of an older compass (a sample without tally) and records of no cycle are counted row by row;
    cycles that began outside the period are not counted."""
    from datetime import timedelta

    def cycle(at: datetime, actions: list[str], tally: bool | None) -> None:
        with store.cycle() as c:
            sql_time(store, c, at)
            for k, action in enumerate(actions):
                store.record_decision(decision(f"{c}-{k}", at=at, action=action))
            if tally is not None:
                counted = dict.fromkeys(actions, 0) if tally else None
                for action in actions if tally else ():
                    counted[action] += 1
                store.record_sample(replace(sample(at), actions=counted))

    hour = timedelta(hours=1)
    cycle(T0, ["placed", "placed", "failed"], tally=True)
    cycle(T0 + hour, ["placed", "replanned"], tally=None)  # cut short: no sample
    cycle(T0 + 2 * hour, ["migrated"], tally=False)  # an older compass's sample
    cycle(T0 - 5 * hour, ["placed"] * 4, tally=True)  # before the period
    store.record_decision(decision("loose", at=T0 + hour, action="adopted"))  # of no cycle
    assert store.count_actions(T0 - hour, T0 + 3 * hour) == {"placed": 3, "failed": 1, "replanned": 1, "migrated": 1,
                                                              "adopted": 1}
    assert store.count_actions(T0 - 6 * hour, T0 + 3 * hour)["placed"] == 7
    assert sorted(map(str, (s.actions for s in store.samples()))) == ["None", "{'placed': 2, 'failed': 1}",
                                                                       "{'placed': 4}"]  # read back as written


def sql_time(store: Store, cycle: int, at: datetime) -> None:
    """Backdate an open cycle (its row is written with the time it began)."""
    from sqlalchemy import update

    from compass_slurm.service.store import cycles_table

    store._conn.execute(update(cycles_table).where(cycles_table.c.id == cycle).values(time=at))
