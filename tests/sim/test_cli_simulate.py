"""``compass simulate`` through the real CLI: the --json contract, --output files, bad input."""

from __future__ import annotations

import csv
import json

import pytest
from click.testing import CliRunner

from compass_slurm.cli import cli

CONTRACT = {
    "policy", "nodes", "gpus_per_node", "jobs", "afr", "ajct_s", "agu", "max_sif", "sif_bound_frac",
    "wcc_frac", "migrations", "mean_wait_s", "p99_wait_s", "wall_s", "mean_wait_by_class_s",
    "p99_wait_by_class_s", "bounded_slowdown", "migrations_per_hour_max", "queue", "estimate_factor",
    "migrations_per_hour", "migrations_per_hour_setting", "migratable", "managed",
    "migrations_burst", "migrations_burst_setting", "migrations_burst_max",
}
CLASSES = {"1", "2-4", "5-7", "whole-node"}

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
        assert row["mean_wait_by_class_s"].keys() == row["p99_wait_by_class_s"].keys() == CLASSES
        # the daemon's defaults: backfill under EASY's rule (no slack), one migration per node per sliding hour
        # but at least 12 (2 nodes: 12), estimates as given
        assert (row["queue"], row["slack"], row["migrations_per_hour_setting"], row["migrations_per_hour"]) == (
            "backfill", 0.0, "per-node", 12)
        assert row["estimate_factor"] == 1.0
        assert (row["migratable"], row["managed"]) == (None, 1.0)
        assert (row["migrations_burst_setting"], row["migrations_burst"]) == ("10%", 2)  # a tenth of 12, rounded up


def test_queue_budget_and_shares_reach_the_simulation(trace):
    result = simulate("--trace", str(trace), "--policy", "compass", "--nodes", "2", "--json", "--check",
                      "--queue", "fifo", "--migrations-per-hour", "0", "--migratable", "0.5", "--managed", "0",
                      "--estimate-factor", "2")
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)
    assert (row["queue"], row["migrations_per_hour"], row["migratable"], row["managed"]) == ("fifo", 0, 0.5, 0.0)
    assert row["estimate_factor"] == 2.0 and row["migrations"] == 0 and row["migrations_per_hour_max"] == 0
    result = simulate("--trace", str(trace), "--policy", "compass", "--nodes", "2", "--json",
                      "--migrations-per-hour", "unlimited", "--backfill")
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)
    assert (row["migrations_per_hour_setting"], row["migrations_per_hour"]) == ("unlimited", None)


@pytest.mark.parametrize(("setting", "nodes", "parsed", "resolved"), [
    ("per-node", 3, "per-node", 12), ("per-node", 20, "per-node", 20), ("PER-NODE", 20, "per-node", 20),
    ("12", 20, 12, 12)])
def test_the_per_node_budget_is_resolved_on_the_simulated_cluster(tmp_path, setting, nodes, parsed, resolved):
    """What the JSON says the run used is what the simulation spent: never more in an hour."""
    rows = "".join(f"j{i},{i * 10},{100 + i % 7 * 50},{1 + i % 3}\n" for i in range(60))
    path = tmp_path / "many.csv"
    path.write_text("job_id,submit_time_s,duration_s,num_gpus\n" + rows)
    result = simulate("--trace", str(path), "--policy", "compass", "--nodes", str(nodes), "--json", "--check",
                      "--migrations-per-hour", setting)
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)
    assert row["migrations_per_hour"] == resolved and row["migrations_per_hour_max"] <= resolved
    assert row["migrations_per_hour_setting"] == parsed


@pytest.mark.parametrize(("hourly", "burst", "parsed", "resolved"), [
    ("unlimited", "2", 2, 2), ("per-node", "50%", "50%", 6), ("per-node", "unlimited", "unlimited", None),
    ("unlimited", "10%", "10%", None), ("unlimited", "0", 0, 0)])
def test_the_burst_cap_reaches_the_simulation_and_its_json(tmp_path, hourly, burst, parsed, resolved):
    """Never more in any 5 minutes than the JSON says the run allowed (--check holds the rate limit to it too)."""
    rows = "".join(f"j{i},{i * 10},{100 + i % 7 * 50},{1 + i % 3}\n" for i in range(60))
    path = tmp_path / "many.csv"
    path.write_text("job_id,submit_time_s,duration_s,num_gpus\n" + rows)
    result = simulate("--trace", str(path), "--policy", "compass", "--nodes", "3", "--json", "--check",
                      "--migrations-per-hour", hourly, "--migrations-burst", burst)
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)
    assert (row["migrations_burst_setting"], row["migrations_burst"]) == (parsed, resolved)
    if resolved is None:
        assert row["migrations_burst_max"] > 2  # uncapped, this workload bursts (13 in 5 minutes unlimited)
    else:
        assert row["migrations_burst_max"] <= resolved and row["migrations"] >= row["migrations_burst_max"]
    assert row["migrations_burst_max"] <= row["migrations_per_hour_max"] <= row["migrations"]


def test_a_burst_cap_is_named_in_the_tables_notes(trace):
    result = CliRunner().invoke(cli, ["simulate", "--trace", str(trace), "--policy", "compass", "--nodes", "2",
                                      "--migrations-burst", "50%"])
    assert result.exit_code == 0, result.output
    assert "12 migrations per hour (per-node), at most 6 in any 5 minutes (50%)" in " ".join(result.stderr.split())
    plain = CliRunner().invoke(cli, ["simulate", "--trace", str(trace), "--policy", "compass", "--nodes", "2"])
    assert "in any 5 minutes" not in plain.stderr


def test_the_table_shows_class_waits_partial_nodes_and_the_price_of_moving(trace):
    result = CliRunner().invoke(cli, ["simulate", "--trace", str(trace), "--policy", "compass", "--nodes", "2"])
    assert result.exit_code == 0, result.output
    words = set(result.stdout.split())  # a narrow column wraps its title: look for its words
    assert {"2-4", "5-7", "whole-node", "partial", "restart", "GPU-h", "whole-node"} <= words


def test_migratable_column_is_read_unless_a_share_is_given(tmp_path):
    from compass_slurm.sim.workloads import load, to_jobs

    path = tmp_path / "m.csv"
    path.write_text("job_id,submit_time_s,duration_s,num_gpus,migratable\na,0,1,1,1\nb,0,1,1,false\nc,0,1,1,\n")
    jobs, _ = to_jobs(load(path).records, 8)
    assert [sj.job.migratable for sj in jobs] == [True, False, True]
    jobs, _ = to_jobs(load(path).records, 8, migratable=0.0, managed=0.0)
    assert not any(sj.job.migratable or sj.managed for sj in jobs)
    path.write_text("job_id,submit_time_s,duration_s,num_gpus,migratable\na,0,1,1,maybe\n")
    result = simulate("--trace", str(path))
    assert result.exit_code == 2 and "migratable 'maybe' is not 1/0 or true/false" in result.output


def test_output_dir_gets_timelines_summary_and_plot(trace, tmp_path):
    out = tmp_path / "out"
    result = simulate("--trace", str(trace), "--policy", "first-fit", "--output", str(out), "--backfill")
    assert result.exit_code == 0, result.output
    assert "first-fit" in result.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary[0]["policy"] == "first-fit" and summary[0]["queue"] == "backfill"
    lines = (out / "timeline-first-fit.csv").read_text().splitlines()
    assert lines[0] == "time,queued,running,gpus_used,partial,phi_star,wcc,sif"
    assert (out / "comparison.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_output_dir_gets_each_job_s_times_which_make_the_summary_s_waits(tmp_path):
    out = tmp_path / "out"
    result = simulate("--synthetic", "gfs", "--limit", "300", "--policy", "compass-easy,best-fit", "--backfill",
                      "--migratable", "0.25", "--seed", "3", "--output", str(out))
    assert result.exit_code == 0, result.output
    summary = {row["policy"]: row for row in json.loads((out / "summary.json").read_text())}
    for policy, row in summary.items():
        with open(out / f"jobs-{policy}.csv", newline="") as fh:
            jobs = list(csv.DictReader(fh))
        assert list(jobs[0]) == ["job", "class", "instances", "gpus_per_instance", "migratable", "submit_s",
                                 "start_s", "end_s", "wait_s"]
        assert len(jobs) == row["jobs"] == len({j["job"] for j in jobs})
        assert all(float(j["submit_s"]) <= float(j["start_s"]) <= float(j["end_s"]) for j in jobs)
        assert all(float(j["wait_s"]) == float(j["start_s"]) - float(j["submit_s"]) for j in jobs)
        for name, mean in row["mean_wait_by_class_s"].items():
            waits = [float(j["wait_s"]) for j in jobs if j["class"] == name]
            assert (sum(waits) / len(waits) if waits else None) == pytest.approx(mean)
        assert {j["migratable"] for j in jobs} == {"0", "1"}


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
    assert "line 6: duration_s '-5' must be a number of seconds from 0 to 1e+11" in result.output
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
        (["--queue", "lifo"], "unknown --queue 'lifo': choose fifo or backfill"),
        (["--queue", "fifo", "--backfill"], "--backfill contradicts --queue fifo"),
        (["--migratable", "1.5"], "--migratable '1.5' is outside [0, 1]"),
        (["--managed", "-0.1"], "--managed '-0.1' is outside [0, 1]"),
        (["--migratable", "half"], "--migratable 'half' is not a number"),
        (["--migrations-per-hour", "-1"], "--migrations-per-hour '-1' is negative"),
        (["--migrations-per-hour", "lots"],
         "--migrations-per-hour 'lots' is not a whole number >= 0, 'unlimited' or 'per-node'"),
        (["--migrations-per-hour", "1.5"], "--migrations-per-hour '1.5' is not a whole number >= 0"),
        (["--estimate-factor", "0"], "--estimate-factor '0' must be a finite number > 0"),
        (["--migrations-burst", "-1"], "--migrations-burst '-1' is negative"),
        (["--migrations-burst", "per-node"],
         "--migrations-burst 'per-node' is not a whole number >= 0, 'unlimited' or a share of the hourly budget"),
        (["--migrations-burst", "150%"], "--migrations-burst '150%' is a share outside (0%, 100%]"),
        (["--perturb", "1.5"], "bad --perturb '1.5': not a whole number"),
        (["--perturb", "soon"], "bad --perturb 'soon': not a whole number"),
        (["--gpus-per-node", "99999999999999999999"], "bad --gpus-per-node '99999999999999999999': must be 1 to 1024"),
        (["--gpus-per-node", "8:99999999999999"],
         "node mix '8:99999999999999': 99,999,999,999,999 nodes, more than the 1,000,000 a simulation takes"),
        (["--gpus-per-node", "8:2,2048:1"], "bad node mix '8:2,2048:1': each part needs GPUS of 1 to 1024"),
    ],
)
def test_clear_errors(trace, args, message):
    result = simulate("--trace", str(trace), *args)
    assert result.exit_code == 2
    assert message in result.output


@pytest.mark.parametrize(("args", "message"), [
    (["--trace", ""], "--trace '' names no file"),  # not the synthetic workload
    # an empty value (a shell variable left empty) is not the option left out
    *([[flag, ""], f"{flag} '' is empty"] for flag in ("--synthetic", "--policy", "--layout", "--window", "--cluster",
                                                     "--output")),
    (["--sweep", ""], "--sweep '' names no file"),
    (["--cluster", "cluster04"], "--cluster cluster04 selects the rows of a trace; a synthetic workload has no"),
    # a sweep's runs take their options from its file: one given beside it would be ignored
    (["--sweep", "s.toml", "--trace", "t.csv", "--limit", "5"],
     "--trace, --limit with --sweep: a sweep's runs take their options from its file"),
    (["--limit", "1000001"], "--limit 1,000,001: a synthetic workload has at most 1,000,000 jobs"),
    (["--synthetic", "venus", "--limit", "10000000"], "--limit 10,000,000: a synthetic workload has at most"),
])
def test_a_workload_that_cannot_be_meant_is_refused_before_it_is_made(args, message):
    result = simulate(*args)
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith(f"compass: error: {message}")
    assert "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) <= 2  # the problem, and at most a hint


@pytest.mark.parametrize(("args", "message"), [
    (["--nodes", "999999999999"], "Invalid value for '--nodes': 999999999999 is not in the range 1<=x<=1000000."),
    (["--migration-delay", "nan"], "Invalid value for '--migration-delay': 'nan' is not a finite number."),
    (["--migration-delay", "inf"], "Invalid value for '--migration-delay': 'inf' is not a finite number."),
    (["--slack", "nan"], "Invalid value for '--slack': 'nan' is not a finite number."),
    (["--slack", "inf"], "Invalid value for '--slack': 'inf' is not a finite number."),
    (["--cycle-interval", "nan"], "Invalid value for '--cycle-interval': 'nan' is not a finite number."),
    (["--watch", "nan"], "Invalid value for '--watch': 'nan' is not a finite number."),
    (["--seed", "-1"], "Invalid value for '--seed': -1 is not in the range x>=0."),
])
def test_an_option_out_of_its_range_is_a_usage_error_naming_it(trace, args, message):
    """nan passes click's FloatRange (every comparison with it is false): it must not reach the engine."""
    result = simulate("--trace", str(trace), "--policy", "best-fit", *args)
    assert result.exit_code == 2
    assert message in result.stderr and "Traceback" not in result.output


def test_a_trace_with_a_byte_order_mark_reads_as_one_without(trace):
    """A spreadsheet's CSV export may begin with U+FEFF: the first column is job_id all the same."""
    def figures(result) -> list[dict]:
        assert result.exit_code == 0, result.output
        return [{k: v for k, v in row.items() if k not in ("wall_s", "events_per_s")}
                for row in json.loads(result.stdout)]

    plain = figures(simulate("--trace", str(trace), "--policy", "best-fit", "--json"))
    trace.write_bytes("\ufeff".encode() + TRACE.encode())
    assert figures(simulate("--trace", str(trace), "--policy", "best-fit", "--json")) == plain


def test_a_job_of_more_gpus_than_the_largest_cluster_is_a_bad_row(trace):
    trace.write_text(TRACE + "e,4,5,99999999999999999999\n")
    result = simulate("--trace", str(trace), "--policy", "first-fit", "--json")
    assert result.exit_code == 2
    assert ("line 6: num_gpus 99999999999999999999 is more than the 1,024,000,000 GPUs of the largest cluster a "
            "simulation takes (use --skip-bad to skip malformed rows)") in result.stderr
    trace.write_text(TRACE + "e,4,5,1024000000\n")  # fits the largest cluster, but not N(eta)'s on 8-GPU nodes
    result = simulate("--trace", str(trace), "--policy", "first-fit", "--json")
    assert result.exit_code == 2
    assert result.stderr == ("compass: error: N(0.9) of this workload on 8-GPU nodes: 128,000,000 nodes, more than "
                             "the 1,000,000 a simulation takes\n")


@pytest.mark.parametrize("seed", ["1.5", "soon"])
def test_a_perturb_seed_that_is_not_a_whole_number_is_one_line(trace, seed):
    result = simulate("--trace", str(trace), "--perturb", seed)
    assert result.exit_code == 2
    assert result.output.strip() == f"compass: error: bad --perturb '{seed}': not a whole number such as 1"


def test_empty_trace(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("job_id,submit_time_s,duration_s,num_gpus\n")
    result = simulate("--trace", str(empty))
    assert result.exit_code == 2 and "no jobs to simulate" in result.output
    assert "hint: the trace holds no job rows" in result.output


def test_an_engine_error_in_the_run_is_reported_as_our_bug_not_bad_input(trace, monkeypatch):
    from compass_slurm.engine.model import EngineError
    from compass_slurm.engine.scheduler import Scheduler

    def refuse(self, job_id, **kw):  # the engine refusing a call the simulation made: a bug of ours
        raise EngineError(f"departure of unknown job {job_id}")

    monkeypatch.setattr(Scheduler, "depart", refuse)
    result = simulate("--trace", str(trace), "--policy", "best-fit", "--nodes", "2", "--json")
    assert result.exit_code == 1, result.output
    assert result.stdout == ""
    [line] = result.stderr.splitlines()  # one line, no traceback
    assert line.startswith("compass: internal error (a bug in compass, not in your input): the engine refused a "
                           "step of the simulation: departure of unknown job ")
    assert line.endswith("please report it with the command line, `compass --version` and the input it read")
    # bad input keeps its exit code 2
    bad = simulate("--trace", str(trace), "--policy", "best-fit", "--gpus-per-node", "4", "--nodes", "1")
    assert bad.exit_code == 2 and "give more nodes" in bad.output
