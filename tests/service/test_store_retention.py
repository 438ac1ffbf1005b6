"""Retention on real databases (SQLite, MariaDB, PostgreSQL: ``log_url``, see tests/dblogs.py): Store.prune deletes
whole old cycles in bounded batches and keeps what a restart reads; the daemon's Pruner; the indexes it needs
reach an existing log."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, insert, inspect, select

from compass_slurm.engine.model import Decision, Job
from compass_slurm.service import store as store_module
from compass_slurm.service.store import (
    DecisionRecord,
    ErrorRecord,
    MigrationRecord,
    Pruner,
    SampleRecord,
    Store,
    cycles_table,
    metadata,
)

NOW = datetime.now(UTC)
OLD, NEW = NOW - timedelta(days=200), NOW - timedelta(days=1)
CUT = NOW - timedelta(days=180)
TABLES = ("decisions", "migrations", "errors", "samples", "cycles")


@pytest.fixture
def store(log_url: str):
    with Store.open(log_url) as opened:
        yield opened


def decision(job: str, nodes: tuple[str, ...] = ("n1",), action: str = "placed") -> DecisionRecord:
    return DecisionRecord.of(Decision(job, nodes, 2, "slot"), Job(job, len(nodes), 2, user="alice"), "compass",
                             action=action, reason="test")


def sample(**fields) -> SampleRecord:
    return SampleRecord(nodes=4, gpus=32, gpus_used=8, partial=1, phi_star=1, sif=0.1, sif_bound=0.5, wcc=True,
                        queue_len=0, pending_gpus=0, **fields)


def logged_cycle(store: Store, at: datetime, decisions: list[DecisionRecord] = (), migrations: int = 1,
                 errors: int = 1, sampled: bool = True) -> int:
    """One daemon cycle at ``at``, as the Recorder writes it: decisions, migrations, errors and a sample."""
    with store.engine.begin() as conn:  # a cycle row of the past (Store.cycle stamps it now)
        cycle = conn.execute(insert(cycles_table).values(time=at)).inserted_primary_key[0]
    with store.cycle(resume=cycle):
        for record in decisions:
            store.record_decision(replace(record, time=at))
        for k in range(migrations):
            store.record_migration(MigrationRecord("m", k, "n1", "n2", time=at))
        for _ in range(errors):
            store.record_error(ErrorRecord("slurm", "boom", time=at))
        if sampled:
            store.record_sample(sample(time=at))
    return cycle


def rows(store: Store) -> dict[str, int]:
    with store.engine.connect() as conn:
        return {name: conn.scalar(select(func.count()).select_from(metadata.tables[name])) for name in TABLES}


def test_old_cycles_go_whole_and_new_ones_stay(store: Store) -> None:
    for k in range(3):
        logged_cycle(store, OLD + timedelta(minutes=k), [decision(f"old{k}"), decision(f"gone{k}")])
    newer = logged_cycle(store, NEW, [decision("new")], migrations=2)
    pruned = store.prune(CUT)
    assert pruned.done
    assert pruned.deleted == {"decisions": 6, "migrations": 3, "errors": 3, "samples": 3, "cycles": 3}
    assert rows(store) == {"decisions": 1, "migrations": 2, "errors": 1, "samples": 1, "cycles": 1}
    assert [d.job_id for d in store.decisions()] == ["new"]
    assert {m.cycle for m in store.migrations()} == {newer}
    assert store.prune(CUT).total == 0  # nothing left to do


def test_the_latest_place_of_a_job_slurm_has_survives_with_its_cycle(store: Store) -> None:
    first = logged_cycle(store, OLD, [decision("7", ("n1",)), decision("8", ("n2",))])
    moved = logged_cycle(store, OLD + timedelta(hours=1), [decision("7", ("n3",), action="migrated"),
                                                           decision("7", ("n4",), action="failed")])
    logged_cycle(store, NEW, [decision("9")])
    before = store.latest_places(["7", "8", "9"])
    pruned = store.prune(CUT, keep=["7", "9"])  # job 8 has ended: Slurm no longer has it
    assert pruned.kept_places == 1  # job 7's: job 9's is not old enough to go
    after = store.latest_places(["7", "8", "9"])
    assert after == {"7": before["7"], "9": before["9"]}
    assert after["7"].nodes == ("n3",)
    (kept,) = store.decisions_with_ids([after["7"].id])
    assert kept.cycle == moved and kept.action == "migrated"
    assert [d.job_id for d in store.decisions()] == ["7", "9"]  # the older place and the failure went
    # its cycle stays (the record names it); that cycle's other rows went, and the first cycle entirely
    with store.engine.connect() as conn:
        cycles = set(conn.scalars(select(cycles_table.c.id)))
    assert moved in cycles and first not in cycles
    assert store.migrations(cycle=moved) == [] and len(store.decisions(cycle=moved)) == 1


def test_the_latest_sample_stays_so_a_restart_finds_the_last_cycle_that_ended(store: Store) -> None:
    logged_cycle(store, OLD, [decision("1")])
    last = logged_cycle(store, OLD + timedelta(minutes=1), [decision("2")])
    store.prune(NOW)
    assert [s.cycle for s in store.samples()] == [last]
    assert store.unfinished_cycle_jobs() == []  # no decision since the last ended cycle


def test_batches_are_bounded_and_a_cycle_goes_whole(store: Store) -> None:
    for k in range(12):
        logged_cycle(store, OLD + timedelta(minutes=k), [decision(f"{k}a"), decision(f"{k}b")], migrations=0,
                     errors=0)
    logged_cycle(store, OLD + timedelta(minutes=30), [decision(f"big{i}") for i in range(7)], migrations=0,
                 errors=0)
    # one batch only (a budget of 0 s stops after the first): at most 5 rows per table, whole cycles
    pruned = store.prune(CUT, batch=5, budget_s=0)
    assert not pruned.done
    assert pruned.deleted == {"decisions": 4, "migrations": 0, "errors": 0, "samples": 2, "cycles": 2}
    passes = [pruned]
    while not passes[-1].done:
        passes.append(store.prune(CUT, batch=5, budget_s=0))
    assert len(passes) == 7  # 12 cycles of 2 decisions, 2 cycles a batch; then the big one
    assert all(max(p.deleted.values()) <= 5 for p in passes[:-1])
    assert passes[-1].deleted["decisions"] == 7  # the big cycle, alone in its batch
    assert rows(store)["decisions"] == 0 and rows(store)["cycles"] == 1  # the latest sample's cycle


def test_records_outside_a_cycle_go_by_their_own_time(store: Store) -> None:
    store.record_error(ErrorRecord("store", "old", time=OLD))
    store.record_error(ErrorRecord("store", "new", time=NEW))
    store.record_decision(replace(decision("3"), time=OLD))
    store.record_decision(replace(decision("4"), time=OLD))
    pruned = store.prune(CUT, keep=["4"])
    assert pruned.deleted["errors"] == 1 and pruned.deleted["decisions"] == 1
    assert [e.message for e in store.errors()] == ["new"]
    assert [d.job_id for d in store.decisions()] == ["4"]


def test_the_daemons_pruner_runs_when_due_and_never_with_0_days(log_url: str) -> None:
    with Store.open(log_url) as store:
        logged_cycle(store, OLD, [decision("1")])
        logged_cycle(store, NEW, [decision("2")])
    now = [1000.0]
    never = Pruner(log_url, 0, clock=lambda: now[0])
    now[0] += 10 ** 6
    assert never.between_cycles(lambda: []) is None
    pruner = Pruner(log_url, 180, clock=lambda: now[0])
    assert pruner.between_cycles(lambda: pytest.fail("not due yet")) is None  # not in the first cycles
    now[0] += store_module.PRUNE_CATCH_UP_S
    pruned = pruner.between_cycles(lambda: ["2"])
    assert pruned is not None and pruned.done and pruned.deleted["decisions"] == 1
    assert pruner.between_cycles(lambda: pytest.fail("not due again")) is None
    now[0] += store_module.PRUNE_EVERY_S
    assert pruner.between_cycles(lambda: []).total == 0
    pruner.close()
    with Store.open(log_url, create=False) as store:
        assert [d.job_id for d in store.decisions()] == ["2"]


def test_an_existing_log_gets_the_retention_indexes_when_the_daemon_opens_it(store: Store, log_url: str) -> None:
    logged_cycle(store, OLD, [decision("1")])
    added = [index for table in metadata.sorted_tables for index in table.indexes
             if index.name in ("ix_cycles_time", "ix_decisions_time_action") or index.name.endswith("_cycle")]
    dropped = []
    for index in added:
        try:
            with store.engine.begin() as conn:
                index.drop(conn)
            dropped.append(index.name)
        except Exception:  # MariaDB keeps an index its foreign key needs
            assert store.engine.dialect.name in ("mysql", "mariadb")
    assert {"ix_cycles_time", "ix_decisions_time_action"} <= set(dropped)
    store.close()
    with Store.open(log_url, create=False) as reader:  # a reader changes nothing
        names = {i["name"] for t in TABLES for i in inspect(reader.engine).get_indexes(t)}
        assert not names & set(dropped)
    with Store.open(log_url) as writer:
        names = {i["name"] for t in TABLES for i in inspect(writer.engine).get_indexes(t)}
        assert set(dropped) <= names
        assert len(writer.decisions()) == 1


def test_the_daemon_prunes_between_cycles_and_keeps_the_place_of_a_running_job(tmp_path, monkeypatch) -> None:
    import threading
    import time

    from test_daemon_unit import cluster, daemon_for, nodes, running

    monkeypatch.setattr(store_module, "PRUNE_CATCH_UP_S", 0.0)  # the first pass after the first cycle
    daemon, _, _ = daemon_for(cluster(nodes(2), [running("5", {"n1": 2})]), tmp_path, log_retention_days=180)
    with Store.open(daemon.db) as store:
        logged_cycle(store, OLD, [decision("5", ("n1",)), decision("6", ("n2",))])
    loop = threading.Thread(target=daemon.run, args=(60.0,))
    loop.start()
    try:
        deadline = time.monotonic() + 20
        with Store.open(daemon.db, create=False) as store:
            while "6" in {d.job_id for d in store.decisions()} and time.monotonic() < deadline:
                time.sleep(0.05)
    finally:
        daemon.shutdown()
        loop.join(10)
    with Store.open(daemon.db, create=False) as store:
        jobs = [d.job_id for d in store.decisions()]
        assert "6" not in jobs and "5" in jobs  # job 5 still runs: its place stays
        assert store.samples()  # the daemon's own cycle
