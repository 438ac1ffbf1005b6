"""``compass explain`` and ``compass report`` on real SQLite logs filled through Store."""

from __future__ import annotations

import base64
import json
import re
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from admin_cli import invoke, json_of

from compass_slurm.cli.common import SCHEMA_VERSION
from compass_slurm.engine.model import Decision, Job, Migration
from compass_slurm.service.store import DecisionRecord, ErrorRecord, MigrationRecord, SampleRecord, Store

NOW = datetime.now(UTC).replace(microsecond=0)
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def log(tmp_path: Path) -> str:
    """Two cycles: job 42 placed (pulling a filler of job 7), then job 42 moved by Compact; six samples."""
    url = f"sqlite:///{tmp_path / 'compass.db'}"
    with Store.open(url) as store:
        with store.cycle():
            store.record_decision(DecisionRecord.of(
                Decision("42", ("node03", "node04"), 4, "anchor slot on the best-fit slotted node",
                         candidates=("node03", "node04", "node05")),
                Job("42", 2, 4, user="alice"), "compass", sif_before=0.125, sif_after=0.0625,
                partial_before=3, partial_after=2, reason="anchor slot on the best-fit slotted node"))
            store.record_migration(MigrationRecord.of(Migration("7", 0, "node09", "node03"), reason="compact",
                                                      status="done"))
        with store.cycle():
            store.record_migration(MigrationRecord.of(Migration("42", 1, "node04", "node05"), reason="compact",
                                                      status="failed"))
            store.record_error(ErrorRecord(kind="migration", message="job 42: Slurm refused"))
        # sif:  0, 1/16, 3/16 (WCC violated), 3/16 (2 foreign nodes), 1/16, 0; one minute apart
        for k, (sif, wcc, foreign) in enumerate([(0, True, 0), (1, True, 0), (3, False, 0), (3, True, 2),
                                                  (1, True, 0), (0, True, 0)]):
            store.record_sample(SampleRecord(
                nodes=16, gpus=128, gpus_used=64 + 8 * k, partial=sif + 1, phi_star=1, sif=sif / 16,
                sif_bound=0.125, wcc=wcc, queue_len=1, pending_gpus=16, abs_violations=foreign,
                duration=0.01 * (k + 1), time=NOW - timedelta(minutes=10 - k)))
    return url


def test_explain_json(log: str) -> None:
    doc = json_of("explain", "42", "--db", log)
    assert doc["schema_version"] == 1 and doc["job_id"] == "42"
    (d,) = doc["decisions"]
    assert (d["rule"], d["candidates"], d["sif_before"], d["sif_after"]) == (
        "anchor slot on the best-fit slotted node", ["node03", "node04", "node05"], 0.125, 0.0625)
    assert [(m["job_id"], m["src"], m["dst"]) for m in d["triggered"]] == [("7", "node09", "node03")]
    assert [(m["instance"], m["src"], m["dst"], m["status"]) for m in doc["suffered"]] == [(1, "node04", "node05", "failed")]


def test_explain_text(log: str) -> None:
    result = invoke("explain", "42", "--db", log, env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    assert "candidates  node03, node04, node05" in result.stdout
    assert "SIF         0.125 -> 0.062   partial nodes 3 -> 2" in result.stdout
    assert "job 7#0  node09 -> node03  done  compact" in result.stdout
    assert "job 42 was moved 1 time(s):" in result.stdout


def test_explain_shows_the_whole_history_with_migrations(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'moved.db'}"
    job = Job("50", 1, 4, user="bob")
    with Store.open(url) as store:
        with store.cycle():
            store.record_decision(DecisionRecord.of(Decision("50", ("node08",), 4, "anchor slot on a newly opened node"),
                                                    job, "compass", time=NOW - timedelta(minutes=5)))
        with store.cycle():
            store.record_decision(DecisionRecord.of(Decision("50", ("node03",), 4, "compact"), job, "compass",
                                                    action="migrated", from_nodes=("node08",),
                                                    reason="compact: requeued", time=NOW))
            store.record_migration(MigrationRecord.of(Migration("50", 0, "node08", "node03"), reason="compact",
                                                      time=NOW))
    doc = json_of("explain", "50", "--db", url)
    assert [(d["action"], d["nodes"], d["from"]) for d in doc["decisions"]] == [
        ("placed", ["node08"], []), ("migrated", ["node03"], ["node08"])]
    text = invoke("explain", "50", "--db", url, env={"COLUMNS": "120"}).stdout
    assert "from        node08" in text and "reason      compact: requeued" in text
    assert "latest decision migrated at" in text and text.index("placed at") < text.index("migrated at")
    assert "on node03:4" in text
    table = invoke("decisions", "--db", url, "--job", "50", env={"COLUMNS": "120", "NO_COLOR": "1"}).stdout
    assert "migrated" in table and "compact: requeued from node08" in table


def test_explain_unknown_job_exits_2_with_a_hint(log: str) -> None:
    result = invoke("explain", "999", "--db", log)
    assert result.exit_code == 2
    assert result.stderr.startswith("compass: error: no decision or migration logged for job 999\nhint: ")
    assert result.stdout == ""


def test_explain_without_a_log(tmp_path: Path) -> None:
    result = invoke("explain", "1", "--db", f"sqlite:///{tmp_path / 'missing.db'}")
    assert result.exit_code == 2 and "no decision log at" in result.stderr and "hint:" in result.stderr


def test_report_json_figures(log: str) -> None:
    doc = json.loads(invoke("report", "--since", "1h", "--format", "json", "--db", log).stdout)
    assert doc["schema_version"] == SCHEMA_VERSION  # as every JSON document of the CLI's
    assert doc["message"] is None and doc["samples"] == 6
    assert doc["hours_covered"] == pytest.approx(6 / 60)  # five gaps of a minute, the last sample a median gap
    assert doc["hours_above_bound"] == pytest.approx(2 / 60)
    assert doc["share_above_bound"] == pytest.approx(1 / 3)
    assert doc["sif"]["max"] == 3 / 16 and doc["sif"]["mean"] == pytest.approx(8 / 16 / 6)
    assert doc["partial"] == {"mean": pytest.approx(14 / 6), "max": 4, "last": 1}
    assert doc["gpu_utilisation"] == pytest.approx(sum(64 + 8 * k for k in range(6)) / 128 / 6)
    assert doc["causes_above_bound_hours"] == {"wcc_violated": pytest.approx(1 / 60),
                                               "foreign_placements": pytest.approx(1 / 60),
                                               "orphaned_fillers": 0, "pinned_or_rate_limit": 0}
    # 16 GPUs pending and at least 16 free in every sample: a whole-node job waited all along.
    assert doc["large_jobs_blocked_hours"] == pytest.approx(6 / 60)
    assert (doc["decisions"], doc["migrations"], doc["errors"]) == ({"placed": 1}, {"done": 1, "failed": 1},
                                                                     {"migration": 1})


def test_report_json_is_format_json_and_not_another_format_too(log: str) -> None:
    asked = invoke("report", "--since", "1h", "--format", "json", "--db", log).stdout
    assert invoke("report", "--since", "1h", "--json", "--db", log).stdout == asked
    assert invoke("report", "--since", "1h", "--json", "--format", "json", "--db", log).stdout == asked
    both = invoke("report", "--since", "1h", "--json", "--format", "md", "--db", log)
    assert (both.exit_code, both.stdout) == (2, "")
    assert both.stderr == "compass: error: --json and --format md ask for two formats\nhint: give one of them\n"


@pytest.mark.parametrize("fmt,needle", [("text", "time above 2/N"), ("md", "| time above 2/N | 0.03 h (33.3%) |")])
def test_report_text_and_markdown(log: str, fmt: str, needle: str) -> None:
    result = invoke("report", "--since", "1h", "--format", fmt, "--db", log)
    assert result.exit_code == 0, result.output
    assert needle in result.stdout
    assert "foreign placements" in result.stdout and "WCC violated" in result.stdout


def test_html_report_embeds_png_plots(log: str, tmp_path: Path) -> None:
    out = tmp_path / "reports" / "%Y.html"
    result = invoke("report", "--since", "1h", "--format", "html", "--output", str(out), "--db", log)
    assert result.exit_code == 0, result.output
    written = tmp_path / "reports" / f"{datetime.now().year}.html"  # strftime codes expanded
    assert result.stderr.startswith(f"wrote {written}")
    page = written.read_text()
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(images) == 3
    for k, data in enumerate(images):
        png = base64.b64decode(data)
        assert png.startswith(PNG) and len(png) > 5000
        (tmp_path / f"plot{k}.png").write_bytes(png)  # kept for a look: pytest --basetemp=DIR


def test_empty_period_says_so_and_exits_0(log: str) -> None:
    future = (NOW + timedelta(days=1)).isoformat()
    for fmt in ("text", "md", "html"):
        result = invoke("report", "--since", future, "--format", fmt, "--db", log)
        assert result.exit_code == 0 and "no samples between" in result.stdout
    doc = json.loads(invoke("report", "--since", future, "--format", "json", "--db", log).stdout)
    assert doc["message"].startswith("no samples between") and "samples" not in doc


def test_young_log_with_one_sample(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'young.db'}"
    with Store.open(url) as store:
        store.record_sample(SampleRecord(nodes=4, gpus=32, gpus_used=8, partial=1, phi_star=0, sif=0.25,
                                         sif_bound=0.5, wcc=True, queue_len=0, pending_gpus=0))
    result = invoke("report", "--format", "html", "--db", url)
    assert result.exit_code == 0 and "only one sample so far" in result.stdout and "data:image/png" not in result.stdout


def test_report_errors(tmp_path: Path, log: str) -> None:
    missing = invoke("report", "--db", f"sqlite:///{tmp_path / 'missing.db'}")
    assert missing.exit_code == 2 and "no decision log at" in missing.stderr and "hint:" in missing.stderr
    for since in ("yesterday", "0001-01-01T00:00+01:00", "9999-12-31T23:59:59-10:00"):
        bad = invoke("report", "--since", since, "--db", log)
        assert bad.exit_code == 2 and f"invalid time {since!r}" in bad.stderr
    unwritable = invoke("report", "--output", "/proc/nope/report.txt", "--db", log)
    assert unwritable.exit_code == 2 and "cannot write the report" in unwritable.stderr


def test_a_report_never_replaces_the_decision_log(log: str) -> None:
    path = Path(log.removeprefix("sqlite:///"))
    before = path.read_bytes()
    result = invoke("report", "--output", str(path), "--db", log)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.stderr.splitlines() == [f"compass: error: --output {path} is an SQLite database (the decision "
                                          "log?): a report never replaces one", "hint: choose another --output path"]
    assert path.read_bytes() == before


@pytest.mark.parametrize("column", ["nodes", "gpus"])
def test_a_sample_of_no_gpus_is_a_value_no_compass_wrote(log: str, column: str) -> None:
    """The daemon skips a cycle without GPU nodes: a sample of none was changed outside compass (the report would
    divide by it)."""
    path = log.removeprefix("sqlite:///")
    with sqlite3.connect(path) as conn:
        conn.execute(f"UPDATE samples SET {column} = 0")
    result = invoke("report", "--since", "1h", "--db", log)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.stderr.splitlines()[0] == (f"compass: error: cannot read the decision log {path}: table samples: "
                                             f"{column} 0 is not a whole number of at least 1")
