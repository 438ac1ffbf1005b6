"""``compass simulate`` through the real CLI: the --json contract, --output files, bad input."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from compass_slurm.cli import cli

CONTRACT = {
    "policy", "nodes", "gpus_per_node", "jobs", "afr", "ajct_s", "agu", "max_sif", "sif_bound_frac",
    "wcc_frac", "migrations", "mean_wait_s", "p99_wait_s", "wall_s",
}

TRACE = """job_id,submit_time_s,duration_s,num_gpus
a,0,100,4
b,1,10,8
c,2,50,2
d,3,200,12
"""


def simulate(*args: str):
    return CliRunner().invoke(cli, ["simulate", *args])


@pytest.fixture
def trace(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(TRACE)
    return path


def test_json_has_the_contract_keys_per_policy(trace):
    result = simulate("--trace", str(trace), "--policy", "best-fit,compass", "--nodes", "2", "--json", "--check")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)  # nothing else on stdout
    assert [r["policy"] for r in rows] == ["best-fit", "compass"]
    for row in rows:
        assert CONTRACT <= row.keys()
        assert (row["nodes"], row["gpus_per_node"], row["jobs"]) == (2, 8, 4)
        assert row["instance_mapping"] == {"divisor": 1, "single": 3}  # 12 GPUs -> 2 x 6
        assert row["skipped_rows"] == 0


def test_output_dir_gets_timelines_summary_and_plot(trace, tmp_path):
    out = tmp_path / "out"
    result = simulate("--trace", str(trace), "--policy", "first-fit", "--output", str(out), "--backfill")
    assert result.exit_code == 0, result.output
    assert "first-fit" in result.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary[0]["policy"] == "first-fit" and summary[0]["backfill"] is True
    lines = (out / "timeline-first-fit.csv").read_text().splitlines()
    assert lines[0] == "time,queued,running,gpus_used,partial,phi_star,wcc,sif"
    assert (out / "comparison.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_synthetic_default_and_mixed_nodes():
    result = simulate("--synthetic", "gfs", "--limit", "200", "--gpus-per-node", "8:10,4:2", "--policy",
                      "best-fit", "--json", "--seed", "7")
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)
    assert (row["nodes"], row["gpus_per_node"], row["jobs"], row["trace"]) == (12, "8:10,4:2", 200, "synthetic:gfs")


def test_bad_row_stops_with_its_line_unless_skipped(trace):
    trace.write_text(TRACE + "e,4,-5,1\n")
    result = simulate("--trace", str(trace), "--policy", "first-fit", "--json")
    assert result.exit_code == 2
    assert "line 6: duration_s '-5' must be a finite number >= 0" in result.output
    result = simulate("--trace", str(trace), "--policy", "first-fit", "--json", "--skip-bad")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)[0]["skipped_rows"] == 1


@pytest.mark.parametrize(
    "args, message",
    [
        (["--policy", "nope"], "unknown policy nope"),
        (["--nodes", "1"], "job d needs 2 x 6 GPUs but the 1 nodes hold at most 1"),
        (["--window", "1d:2d"], "hint: no job matched --window / --cluster"),
        (["--gpus-per-node", "8:2", "--nodes", "3"], "--nodes cannot be combined with a node mix"),
        (["--synthetic", "gfs"], "give --trace or --synthetic, not both"),
    ],
)
def test_clear_errors(trace, args, message):
    result = simulate("--trace", str(trace), *args)
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output


def test_empty_trace(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("job_id,submit_time_s,duration_s,num_gpus\n")
    result = simulate("--trace", str(empty))
    assert result.exit_code == 2 and "no jobs to simulate" in result.output
    assert "hint: the trace holds no job rows" in result.output
