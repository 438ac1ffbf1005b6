"""``compass log prune`` and the ``log_retention_days`` setting through the real CLI, on a real SQLite log."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from admin_cli import MIXED, invoke, json_of

from compass_slurm.engine.model import Decision, Job
from compass_slurm.service.store import DecisionRecord, SampleRecord, Store

NOW = datetime.now(UTC)


def placed(job: str, at: datetime) -> DecisionRecord:
    return replace(DecisionRecord.of(Decision(job, ("gpu01",), 2, "slot"), Job(job, 1, 2), "compass"), time=at)


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    """Two old cycles and a new one; job 1 (running in the MIXED snapshot) was last placed in the first."""
    db_url = f"sqlite:///{tmp_path / 'compass.db'}"
    with Store.open(db_url) as store:
        for job, days in (("1", 40), ("900", 40), ("901", 35), ("902", 1)):
            with store.cycle():
                store.record_decision(placed(job, NOW - timedelta(days=days)))
                store.record_sample(SampleRecord(4, 32, 8, 1, 1, 0.1, 0.5, True, 0, 0,
                                                 time=NOW - timedelta(days=days)))
    return db_url


def test_prune_deletes_what_is_older_and_keeps_the_place_of_a_job_slurm_has(db_url: str) -> None:
    # cycles are stamped when written (now): --before now takes every cycle but the latest sample's
    result = invoke("log", "prune", "--db", db_url, "--snapshot", str(MIXED), "--before", "0s")
    assert result.exit_code == 0, result.output
    said, counts = result.stdout.split(" UTC): ")
    assert said.startswith(f"deleted 8 rows from {db_url.removeprefix('sqlite:///')} (before {NOW:%Y-%m-%d}")
    assert counts == ("3 decisions, 0 migrations, 0 errors, 3 samples, 2 cycles; "
                      "kept the latest place of 1 jobs Slurm has\n")  # job 1's cycle and the latest sample's stay
    with Store.open(db_url, create=False) as store:
        assert [d.job_id for d in store.decisions()] == ["1"]
        assert len(store.samples()) == 1


def test_prune_json_counts_each_table(db_url: str) -> None:
    doc = json_of("log", "prune", "--db", db_url, "--snapshot", str(MIXED), "--before", "2000-01-01T01:00+02:00")
    assert doc["deleted"] == {"decisions": 0, "migrations": 0, "errors": 0, "samples": 0, "cycles": 0}
    assert doc["kept_places"] == 0 and doc["schema_version"] == 1 and doc["before"] == "1999-12-31T23:00:00+00:00"
    doc = json_of("log", "prune", "--db", db_url, "--snapshot", str(MIXED), "--before", "0s")
    assert doc["deleted"] == {"decisions": 3, "migrations": 0, "errors": 0, "samples": 3, "cycles": 2}


@pytest.mark.parametrize("before", ["yesterday", "2024-13-45", "-1d", "", "0001-01-01T00:00+01:00",
                                    "9999-12-31T23:59:59-10:00"])
def test_a_bad_date_is_one_line_and_exit_2(db_url: str, before: str) -> None:
    result = invoke("log", "prune", "--db", db_url, "--snapshot", str(MIXED), "--before", before)
    assert result.exit_code == 2
    assert f"invalid time {before!r}" in result.stderr and "Traceback" not in result.output


def test_a_future_date_and_a_missing_log_are_exit_2(db_url: str, tmp_path: Path) -> None:
    later = (NOW + timedelta(days=2)).date().isoformat()
    result = invoke("log", "prune", "--db", db_url, "--snapshot", str(MIXED), "--before", later)
    assert result.exit_code == 2 and "is in the future" in result.stderr
    missing = tmp_path / "absent.db"
    result = invoke("log", "prune", "--db", f"sqlite:///{missing}", "--snapshot", str(MIXED), "--before", "30d")
    assert result.exit_code == 2 and f"no decision log at {missing}" in result.stderr
    assert not missing.exists()
    result = invoke("log", "prune", "--db", db_url, "--before", "30d")  # no --before: required
    assert result.exit_code == 2


def test_help_says_the_date_forms() -> None:
    result = invoke("log", "prune", "-h")
    assert result.exit_code == 0 and "30d" in result.stdout and "2024-05-01" in result.stdout


def test_the_retention_setting_has_a_default_a_variable_and_a_key(isolated: Path) -> None:
    settings = json_of("config", "show")["settings"]
    assert settings["log_retention_days"] == {"value": 180, "source": "default"}
    shown = json.loads(invoke("config", "show", "--json", env={"COMPASS_LOG_RETENTION_DAYS": "0"}).stdout)
    assert shown["settings"]["log_retention_days"] == {"value": 0, "source": "COMPASS_LOG_RETENTION_DAYS"}
    isolated.write_text("[compass]\nlog_retention_days = 30\n")
    assert json_of("config", "show")["settings"]["log_retention_days"]["value"] == 30


@pytest.mark.parametrize("value", ["-1", "abc", "1.5", "true"])
def test_a_bad_retention_is_one_line_naming_it_and_exit_2(value: str) -> None:
    result = invoke("config", "show", env={"COMPASS_LOG_RETENTION_DAYS": value})
    assert result.exit_code == 2
    shown = value if value == "-1" else repr(value)  # a number is shown as read
    assert result.stderr.splitlines()[0] == (f"compass: error: log_retention_days = {shown} (from "
                                             "COMPASS_LOG_RETENTION_DAYS) is not a valid non-negative whole number")
    assert "Traceback" not in result.output


def test_a_negative_retention_in_the_file_is_exit_2(isolated: Path) -> None:
    isolated.write_text("[compass]\nlog_retention_days = -5\n")
    result = invoke("config", "show")
    assert result.exit_code == 2 and f"log_retention_days = -5 (from {isolated})" in result.stderr
