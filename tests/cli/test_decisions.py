"""``compass decisions`` through the real CLI, on a real SQLite log."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from compass_slurm.cli import cli
from compass_slurm.engine.model import Decision, Job
from compass_slurm.service.store import DecisionRecord, Store

COMPASS = Path(sys.executable).parent / "compass"
NOW = datetime.now(UTC).replace(microsecond=0)
CONTRACT_KEYS = {"time", "job_id", "user", "nodes", "gpus_per_node", "policy", "sif_before", "sif_after", "reason"}
ALL_KEYS = CONTRACT_KEYS | {
    "schema_version", "id", "cycle", "rule", "action", "request", "request_raw", "candidates",
    "partial_before", "partial_after", "from",
}


def logged(job: str, minutes_ago: int, user: str, nodes: tuple[str, ...], gpus: int) -> DecisionRecord:
    return DecisionRecord.of(
        Decision(job, nodes, gpus, "pool", candidates=tuple(sorted(set(nodes)))),
        Job(job, len(nodes), gpus, user=user),
        "compass",
        time=NOW - timedelta(minutes=minutes_ago),
        sif_before=0.125,
        sif_after=0.0,
        reason=f"job {job} fits the pool",
    )


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    db_url = f"sqlite:///{tmp_path / 'compass.db'}"
    with Store.open(db_url) as store:
        store.record_decision(logged("101", 180, "alice", ("node01", "node02"), 8))
        store.record_decision(logged("102", 30, "bob", ("node03",), 2))
        store.record_decision(logged("101", 5, "alice", ("node04", "node04"), 4))
    return db_url


def run(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(cli, ["decisions", *args], env=env)


def as_json(*args: str, env: dict[str, str] | None = None) -> list[dict]:
    result = run(*args, "--json", env=env)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_json_has_the_contract_keys_and_values(db_url: str) -> None:
    docs = as_json("--db", db_url)
    assert [d["job_id"] for d in docs] == ["101", "102", "101"]
    assert all(set(d) == ALL_KEYS for d in docs)
    first = docs[0]
    assert {k: first[k] for k in CONTRACT_KEYS} == {
        "time": (NOW - timedelta(minutes=180)).isoformat(timespec="milliseconds"),
        "job_id": "101",
        "user": "alice",
        "nodes": ["node01", "node02"],
        "gpus_per_node": {"node01": 8, "node02": 8},
        "policy": "compass",
        "sif_before": 0.125,
        "sif_after": 0.0,
        "reason": "job 101 fits the pool",
    }
    assert (first["rule"], first["action"], first["request"], first["schema_version"]) == ("pool", "placed", "2x8", 1)
    assert datetime.fromisoformat(first["time"]).utcoffset() == timedelta(0)


def test_since_job_and_limit_filter(db_url: str) -> None:
    assert [d["job_id"] for d in as_json("--db", db_url, "--since", "1h")] == ["102", "101"]
    assert [d["nodes"] for d in as_json("--db", db_url, "--job", "101")] == [["node01", "node02"], ["node04", "node04"]]
    assert [d["job_id"] for d in as_json("--db", db_url, "--since", "10m", "--job", "101")] == ["101"]
    assert [d["job_id"] for d in as_json("--db", db_url, "--limit", "1")] == ["101"]
    assert len(as_json("--db", db_url, "--limit", "0")) == 3
    iso = (NOW - timedelta(minutes=31)).isoformat()
    assert [d["job_id"] for d in as_json("--db", db_url, "--since", iso)] == ["102", "101"]
    assert as_json("--db", db_url, "--job", "999") == []


def test_the_database_comes_from_compass_db_unless_db_is_given(db_url: str, tmp_path: Path) -> None:
    assert len(as_json(env={"COMPASS_DB": db_url})) == 3
    empty = f"sqlite:///{tmp_path / 'empty.db'}"
    Store.open(empty).close()
    assert as_json("--db", empty, env={"COMPASS_DB": db_url}) == []


def test_the_table_shows_each_decision(db_url: str) -> None:
    result = CliRunner().invoke(cli, ["decisions", "--db", db_url], env={"COLUMNS": "160", "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    assert "3 decisions by compass" in result.stdout
    assert "node01:8 node02:8" in result.stdout
    assert "0.125→0.000" in result.stdout
    assert result.stdout.count("alice") == 2


def test_a_narrow_table_keeps_one_line_per_decision_and_wide_shows_all(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'long.db'}"
    rule = "anchor slot on the best-fit slotted node; filler in a slot vacancy"
    with Store.open(url) as store:
        for k in range(13):
            nodes = tuple(f"node{n:02d}" for n in range(k, k + 4))
            store.record_decision(DecisionRecord.of(Decision(str(200 + k), nodes, 2, rule), Job(str(200 + k), 4, 2),
                                                    "compass", sif_before=0.1, sif_after=0.0))
    env = {"COLUMNS": "80", "NO_COLOR": "1"}
    narrow = CliRunner().invoke(cli, ["decisions", "--db", url], env=env).stdout.splitlines()
    rows = [line for line in narrow if line.strip().split(" ")[0].count(":") == 2]
    assert len(rows) == 13 and all(len(line) <= 80 for line in narrow)
    assert all("slot; vacancy" in row and "…" in row for row in rows)  # short rule names, nodes cut short
    wide = CliRunner().invoke(cli, ["decisions", "--db", url, "--wide"], env=env).stdout
    assert f"node00:2 node01:2 node02:2 node03:2  {rule}" in wide
    assert wide.count(rule) == 13


def test_an_empty_log_says_so(tmp_path: Path) -> None:
    empty = f"sqlite:///{tmp_path / 'empty.db'}"
    Store.open(empty).close()
    result = run("--db", empty, "--job", "7")
    assert result.exit_code == 0
    assert result.stdout.strip() == "no decisions logged matching these filters"


def test_a_missing_database_is_exit_2_with_a_hint_and_not_created(tmp_path: Path) -> None:
    missing = tmp_path / "absent" / "compass.db"
    result = run("--db", f"sqlite:///{missing}")
    assert result.exit_code == 2
    assert f"compass: error: no decision log at {missing}" in result.stderr
    assert "hint: is the daemon running? see `compass doctor`" in result.stderr
    assert "Traceback" not in result.output
    assert not missing.exists() and not missing.parent.exists()


@pytest.mark.parametrize("since", ["yesterday", "5 minutes", "2024-13-45", "-1h", "0001-01-01T00:00+01:00",
                                   "9999-12-31T23:59:59-10:00"])
def test_a_bad_since_is_exit_2_naming_the_value(db_url: str, since: str) -> None:
    result = run("--db", db_url, "--since", since)
    assert result.exit_code == 2
    assert f"invalid time {since!r}" in result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize("limit", ["-1", "1000000001", "9223372036854775808"])
def test_a_limit_past_its_range_is_exit_2_naming_the_option(db_url: str, limit: str) -> None:
    result = run("--db", db_url, "--limit", limit)
    assert result.exit_code == 2
    assert f"Invalid value for '--limit': {limit} is not in the range 0<=x<=1000000000." in result.stderr


@pytest.mark.parametrize(("table", "statement", "said"), [
    ("decisions", "UPDATE decisions SET time = 'notatime' WHERE job_id = '102'",
     "cannot read the decision log {path}: table decisions: time 'notatime' is not a time (seconds since 1970)"),
    ("decisions", "UPDATE decisions SET candidates = 'not json' WHERE job_id = '102'",
     "cannot read the decision log {path}: table decisions: candidates 'not json' is not JSON"),
    ("decisions", "UPDATE decisions SET candidates = '5' WHERE job_id = '102'",
     "cannot read the decision log {path}: table decisions: candidates 5 is not a list of names"),
    ("decisions", "UPDATE decisions SET gpus_per_node = '{\"node03\": \"two\"}' WHERE job_id = '102'",
     "cannot read the decision log {path}: table decisions: gpus_per_node {{'node03': 'two'}} is not whole numbers by "
     "name"),
    ("decisions", "UPDATE decisions SET cycle = 'abc' WHERE job_id = '102'",
     "cannot read the decision log {path}: table decisions: cycle 'abc' is not a whole number"),
    ("decisions", "UPDATE decisions SET sif_after = 'high' WHERE job_id = '102'",
     "cannot read the decision log {path}: table decisions: sif_after 'high' is not a number"),
    ("schema_version", "UPDATE schema_version SET version = 'abc'",
     "cannot open the decision log {path}: table schema_version: version 'abc' is not a whole number"),
])
def test_a_value_no_compass_wrote_is_exit_2_naming_the_table(db_url: str, table: str, statement: str,
                                                              said: str) -> None:
    path = db_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as conn:
        conn.execute(statement)
    result = run("--db", db_url)
    assert result.exit_code == 2 and "Traceback" not in result.output
    error, hint = result.stderr.splitlines()
    assert error == f"compass: error: {said.format(path=path)}"
    assert hint.startswith("hint: the log was changed outside compass")


def test_the_installed_command_prints_the_contract(db_url: str, tmp_path: Path) -> None:
    env = {**os.environ, "COMPASS_DB": db_url}
    done = subprocess.run([str(COMPASS), "decisions", "--json", "--job", "102"], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    (doc,) = json.loads(done.stdout)
    assert CONTRACT_KEYS <= set(doc)
    assert (doc["job_id"], doc["user"], doc["nodes"], doc["gpus_per_node"]) == ("102", "bob", ["node03"], {"node03": 2})

    missing = subprocess.run([str(COMPASS), "decisions", "--db", f"sqlite:///{tmp_path / 'no.db'}"],
                             capture_output=True, text=True, cwd=tmp_path, timeout=60, check=False)
    assert missing.returncode == 2
    assert missing.stderr.startswith("compass: error: no decision log at")
    assert "Traceback" not in missing.stderr
