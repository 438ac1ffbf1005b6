"""``compass simulate --sweep``: the sweep file, the plan, local runs, collecting a partly failed sweep, sbatch lines."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from compass_slurm.cli import cli
from compass_slurm.cli.simulate import simulate_in_process
from compass_slurm.sim import sweep

POLICIES = ["best-fit", "compass", "first-fit"]

TRACE = """job_id,submit_time_s,duration_s,num_gpus
a,0,100,4
b,1,10,8
c,2,50,2
d,3,200,12
e,5,30,1
"""

GOOD = """
policies = ["best-fit", "compass"]
eta = [0.9, 1.0]
queue = "backfill"
migrations_per_hour = [0, "per-node"]
options = ["--migration-delay", "4"]

[[windows]]
trace = "t.csv"
name = "all"

[[windows]]
trace = "t.csv"
window = "1000d:1001d"
"""


@pytest.fixture
def sweep_dir(tmp_path):
    (tmp_path / "t.csv").write_text(TRACE)
    return tmp_path


def write(tmp_path, text: str):
    path = tmp_path / "s.toml"
    path.write_text(text)
    return path


def test_the_grid_is_every_combination_in_a_fixed_order(sweep_dir):
    plan = sweep.load(write(sweep_dir, GOOD), POLICIES)
    assert len(plan.tasks) == 2 * 2 * 2 * 1 * 2
    assert plan.output == sweep_dir / "s-results"
    first = plan.tasks[0]
    assert (first.window, first.policy, first.eta, first.queue, first.migrations_per_hour) == (
        "all", "best-fit", 0.9, "backfill", 0)
    # the slack and the burst cap always named: the daemon's defaults may change, a plan's runs must not
    assert first.argv == ("--trace", str(sweep_dir / "t.csv"), "--policy", "best-fit", "--eta", "0.9", "--queue",
                          "backfill", "--slack", "0", "--migrations-per-hour", "0", "--migrations-burst", "10%",
                          "--migration-delay", "4", "--json")
    assert plan.tasks[-1].window == "t 1000d:1001d" and "--window" in plan.tasks[-1].argv
    assert [t.index for t in plan.tasks] == list(range(16))
    assert {t.migrations_burst for t in plan.tasks} == {"10%"}  # the daemon's default


def test_the_burst_cap_is_a_coordinate_of_the_grid(sweep_dir):
    text = GOOD.replace('migrations_per_hour = [0, "per-node"]', 'migrations_per_hour = "per-node"\n'
                        'migrations_burst = ["unlimited", "50%", 3]')
    plan = sweep.load(write(sweep_dir, text), POLICIES)
    assert len(plan.tasks) == 2 * 2 * 2 * 3
    assert [t.migrations_burst for t in plan.tasks[:3]] == ["unlimited", "50%", 3]
    assert plan.tasks[0].argv[-6:] == ("per-node", "--migrations-burst", "unlimited", "--migration-delay", "4",
                                       "--json")
    assert plan.tasks[1].argv[-6:] == ("per-node", "--migrations-burst", "50%", "--migration-delay", "4", "--json")
    assert plan.tasks[2].label() == "all best-fit eta=0.9 backfill slack=0 budget=per-node burst=3"
    plan.save()
    assert sweep.Plan.load(plan.output / "plan.json") == plan
    result = CliRunner().invoke(cli, ["simulate", "--sweep", str(sweep_dir / "s.toml")])
    rows = json.loads((plan.output / "results.json").read_text())
    assert {(r["migrations_burst_setting"], r["migrations_burst"]) for r in rows} == {
        ("unlimited", None), ("50%", 6), (3, 3)}  # 50% of per-node's 12 on a few nodes
    assert all(r["migrations_burst_max"] <= (r["migrations_burst"] or r["migrations"]) for r in rows)
    table = (plan.output / "table.md").read_text()
    assert table.startswith("| window | policy | eta | queue | slack | budget/h | burst/5 min | nodes |"), result.output


def test_the_slack_is_a_coordinate_of_the_grid(sweep_dir):
    text = GOOD.replace('migrations_per_hour = [0, "per-node"]', 'migrations_per_hour = "per-node"\nslack = [0, 0.5]')
    plan = sweep.load(write(sweep_dir, text), POLICIES)
    assert len(plan.tasks) == 2 * 2 * 2 * 2
    assert [t.slack for t in plan.tasks[:2]] == [0.0, 0.5]
    assert plan.tasks[0].argv[-11:-3] == ("--queue", "backfill", "--slack", "0", "--migrations-per-hour", "per-node",
                                          "--migrations-burst", "10%")
    assert plan.tasks[1].argv[-11:-3] == ("--queue", "backfill", "--slack", "0.5", "--migrations-per-hour", "per-node",
                                          "--migrations-burst", "10%")
    assert plan.tasks[1].label() == "all best-fit eta=0.9 backfill slack=0.5 budget=per-node"
    plan.save()
    assert sweep.Plan.load(plan.output / "plan.json") == plan
    result = CliRunner().invoke(cli, ["simulate", "--sweep", str(sweep_dir / "s.toml")])
    rows = json.loads((plan.output / "results.json").read_text())
    assert {r["slack"] for r in rows} == {0.0, 0.5}
    table = (plan.output / "table.md").read_text()
    assert table.startswith("| window | policy | eta | queue | slack | budget/h | nodes |"), result.output

@pytest.mark.parametrize("text, message", [
    ("policies = [", "not TOML"),
    ('policies = ["best-fit"]\n', "at least one [[windows]]"),
    ('eta = 0.9\n[[windows]]\ntrace = "t.csv"\n', "'policies' is required"),
    ('policies = ["nope"]\n[[windows]]\ntrace = "t.csv"\n', "unknown policy 'nope'"),
    ('policies = "best-fit"\neta = 1.5\n[[windows]]\ntrace = "t.csv"\n', "eta 1.5 is not in (0, 1]"),
    ('policies = "best-fit"\neta = "high"\n[[windows]]\ntrace = "t.csv"\n', "'eta': 'high' is not an int or float"),
    ('policies = "best-fit"\nqueue = "lifo"\n[[windows]]\ntrace = "t.csv"\n', "unknown queue 'lifo'"),
    ('policies = "best-fit"\nslack = -1\n[[windows]]\ntrace = "t.csv"\n', "slack -1 is negative"),
    ('policies = "best-fit"\nslack = "lots"\n[[windows]]\ntrace = "t.csv"\n', "'slack': 'lots' is not an int or float"),
    ('policies = "best-fit"\noptions = ["--slack", "1"]\n[[windows]]\ntrace = "t.csv"\n', "may not set --slack"),
    ('policies = "best-fit"\nmigrations_per_hour = -1\n[[windows]]\ntrace = "t.csv"\n',
     "migrations_per_hour -1 is negative: give 0 (no migrations) or more"),
    ('policies = "best-fit"\nmigrations_per_hour = "lots"\n[[windows]]\ntrace = "t.csv"\n',
     "migrations_per_hour 'lots' is not a whole number >= 0, 'unlimited' or 'per-node'"),
    ('policies = "best-fit"\nmigrations_burst = "150%"\n[[windows]]\ntrace = "t.csv"\n',
     "migrations_burst '150%' is a share outside (0%, 100%]"),
    ('policies = "best-fit"\nmigrations_burst = "per-node"\n[[windows]]\ntrace = "t.csv"\n',
     "migrations_burst 'per-node' is not a whole number >= 0, 'unlimited' or a share"),
    ('policies = "best-fit"\noptions = ["--migrations-burst", "1"]\n[[windows]]\ntrace = "t.csv"\n',
     "may not set --migrations-burst"),
    ('policies = "best-fit"\npolicy = "x"\n[[windows]]\ntrace = "t.csv"\n', "unknown key 'policy'"),
    ('policies = "best-fit"\n[[windows]]\ntrace = "missing.csv"\n', "windows #1: trace missing.csv not found"),
    ('policies = "best-fit"\n[[windows]]\ntrace = "t.csv"\nwindow = "9d:2d"\n', "START must be before END"),
    ('policies = "best-fit"\n[[windows]]\ntrace = "t.csv"\nlimit = 0\n', "'limit' must be a whole number"),
    ('policies = "best-fit"\n[[windows]]\ntrace = "t.csv"\nsize = 3\n', "windows #1: unknown key 'size'"),
    ('policies = "best-fit"\noptions = ["--eta", "1"]\n[[windows]]\ntrace = "t.csv"\n', "may not set --eta"),
    ('policies = ["best-fit", "best-fit"]\n[[windows]]\ntrace = "t.csv"\n', "lists a value twice"),
    ('policies = "best-fit"\nperturb = [1, "x"]\n[[windows]]\ntrace = "t.csv"\n', "'perturb': 'x' is not an int"),
    ('policies = "best-fit"\noptions = ["--perturb", "1"]\n[[windows]]\ntrace = "t.csv"\n', "may not set --perturb"),
    ('policies = "best-fit"\n[[windows]]\ntrace = "t.csv"\n[[windows]]\ntrace = "t.csv"\n', "same name"),
    ('policies = "best-fit"\nwindows_from = "t.csv"\n', "windows_from 't.csv': cannot read"),
    ('policies = "best-fit"\nwindows_from = "w.toml"\n[[windows]]\ntrace = "t.csv"\n', "not both"),
    ('policies = "best-fit"\nmigratable = [0, 1.5]\n[[windows]]\ntrace = "t.csv"\n', "fractions in [0, 1]"),
    ('policies = "best-fit"\nmigration_delay = -8\n[[windows]]\ntrace = "t.csv"\n', "seconds >= 0"),
    ('policies = "best-fit"\nmigration_delay = 8\noptions = ["--migration-delay", "1"]\n[[windows]]\n'
     'trace = "t.csv"\n', "may not set --migration-delay"),
])
def test_a_malformed_sweep_file_exits_2_with_one_line(sweep_dir, text, message):
    path = write(sweep_dir, text)
    with pytest.raises(sweep.SweepError) as err:
        sweep.load(path, POLICIES)
    assert message in str(err.value)
    result = CliRunner().invoke(cli, ["simulate", "--sweep", str(path)])
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("compass: error: ") and message in lines[0]
    assert not (sweep_dir / "s-results").exists()


@pytest.mark.parametrize("options, message", [
    ('["--bogus"]', "'options': No such option '--bogus'"),
    ('["--nodes", "x"]', "'options': Invalid value for '--nodes': 'x' is not a valid integer range"),
])
@pytest.mark.parametrize("sbatch", [False, True])
def test_an_option_compass_simulate_refuses_exits_2_with_one_line_before_any_task(sweep_dir, options, message,
                                                                                 sbatch):
    path = write(sweep_dir, f'policies = "best-fit"\noptions = {options}\n[[windows]]\ntrace = "t.csv"\n')
    result = CliRunner().invoke(cli, ["simulate", "--sweep", str(path), *(["--sbatch"] if sbatch else [])])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [f"compass: error: {path}: {message}."]
    assert not (sweep_dir / "s-results").exists()


@pytest.mark.parametrize("options, message", [
    ('["--gpus-per-node", "abc"]', "bad --gpus-per-node 'abc'"),
    ('["--gpus-per-node", "0"]', "bad --gpus-per-node '0': must be 1 to 1024"),
    ('["--estimate-factor", "-1"]', "--estimate-factor '-1' must be a finite number > 0"),
    ('["--managed", "2"]', "--managed '2' is outside [0, 1]: give a fraction such as 0.5"),
    ('["--gpus-per-node", "8:2,2048:1"]', "bad node mix '8:2,2048:1': each part needs GPUS of 1 to 1024 and COUNT"
                                           " >= 1, e.g. 8:60"),
])
@pytest.mark.parametrize("sbatch", [False, True])
def test_a_value_compass_simulate_reads_itself_is_checked_before_any_task(sweep_dir, options, message, sbatch):
    """Values the command parses in its body (not click): refused for the sweep as a whole, not task by task."""
    path = write(sweep_dir, f'policies = "best-fit"\noptions = {options}\n[[windows]]\ntrace = "t.csv"\n')
    result = CliRunner().invoke(cli, ["simulate", "--sweep", str(path), *(["--sbatch"] if sbatch else [])])
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0] == f"compass: error: {path}: 'options': {message}"
    assert not (sweep_dir / "s-results").exists()


def test_sbatch_without_a_sweep_is_a_usage_error():
    result = CliRunner().invoke(cli, ["simulate", "--sbatch"])
    assert result.exit_code == 2 and "--sbatch needs --sweep" in result.stderr


def test_a_local_sweep_merges_what_ran_and_names_what_failed(sweep_dir):
    path = write(sweep_dir, GOOD)
    result = CliRunner().invoke(cli, ["simulate", "--sweep", str(path)])
    assert result.exit_code == 1, result.output
    out = sweep_dir / "s-results"
    rows = json.loads((out / "results.json").read_text())
    assert len(rows) == 8 and {r["window"] for r in rows} == {"all"}
    # the grid's coordinate is the setting; each row keeps what it came to (per-node: at least 12 on a few nodes)
    assert {(r["policy"], r["eta"], r["migrations_per_hour_setting"], r["migrations_per_hour"]) for r in rows} == {
        (p, e, *b) for p in ("best-fit", "compass") for e in (0.9, 1.0) for b in ((0, 0), ("per-node", 12))}
    assert all(r["jobs"] == 5 and r["queue"] == "backfill" for r in rows)
    failed = json.loads((out / "failed.json").read_text())
    assert [f["task"] for f in failed] == list(range(8, 16))
    assert all("no jobs to simulate" in f["reason"] for f in failed)
    errors = result.stderr.splitlines()
    assert errors[-1] == f"compass: 8 of 16 tasks failed; the others are merged in {out}"
    assert errors[0].startswith("compass: task 8 failed (t 1000d:1001d best-fit eta=0.9 backfill slack=0 budget=0): ")
    table = (out / "table.md").read_text()
    assert result.stdout == table and table.count("\n| all | ") == 8 and "failed: task 15 " in table
    assert (out / "sweep.png").stat().st_size > 0


def test_collect_reports_a_task_killed_without_output_and_merges_the_rest(sweep_dir):
    plan = sweep.load(write(sweep_dir, 'policies = ["best-fit", "compass"]\n[[windows]]\ntrace = "t.csv"\n'),
                      POLICIES)
    sweep.run_local(plan, simulate_in_process, workers=1)
    (plan.task_dir / "1.json").write_text('[{"policy": "compass", "ajct')  # killed while printing
    (plan.task_dir / "1.err").write_text("slurmstepd: error: *** JOB 7 ON node01 CANCELLED DUE TO TIME LIMIT ***\n")
    collected = sweep.collect(plan)
    assert [(r["policy"], r["task"], r["window"]) for r in collected.rows] == [("best-fit", 0, "t")]
    assert [(t.index, why) for t, why in collected.failed] == [
        (1, "slurmstepd: error: *** JOB 7 ON node01 CANCELLED DUE TO TIME LIMIT ***")]
    (plan.task_dir / "1.err").unlink()
    assert sweep.collect(plan).failed[0][1] == "no result (the task did not run or was killed)"


def test_sbatch_submits_an_array_and_a_collect_job_after_it(sweep_dir):
    text = GOOD + '\n[sbatch]\noptions = ["--partition=batch", "--time=30"]\n'
    plan = sweep.load(write(sweep_dir, text), POLICIES)
    calls = []

    def runner(argv, timeout):
        calls.append(argv)
        return 0, f"{100 + len(calls)}\n", ""

    assert sweep.submit(plan, runner, python="/opt/venv/bin/python") == ("101", "102")
    out = sweep_dir / "s-results"
    assert calls == [
        ["sbatch", "--parsable", "--array=0-15", "--job-name=compass-sweep", f"--output={out}/tasks/%a.json",
         f"--error={out}/tasks/%a.err", "--partition=batch", "--time=30", str(out / "task.sh")],
        ["sbatch", "--parsable", "--dependency=afterany:101", "--job-name=compass-sweep-collect",
         f"--output={out}/collect.log", "--partition=batch", "--time=30", str(out / "collect.sh")],
    ]
    script = (out / "task.sh").read_text().splitlines()
    assert script[2] == 'case "$SLURM_ARRAY_TASK_ID" in'
    assert script[3] == (f"0) exec /opt/venv/bin/compass simulate --trace {sweep_dir}/t.csv --policy best-fit "
                         "--eta 0.9 --queue backfill --slack 0 --migrations-per-hour 0 --migrations-burst 10% "
                         "--migration-delay 4 --json ;;  "
                         "# all best-fit eta=0.9 backfill slack=0 budget=0")
    assert len(script) == 3 + 16 + 2
    assert (out / "collect.sh").read_text() == (
        f"#!/bin/sh\nexec /opt/venv/bin/python -m compass_slurm.sim.sweep collect {out}/plan.json\n")
    assert sweep.Plan.load(out / "plan.json") == plan


def test_sbatch_refusing_is_one_line(sweep_dir):
    plan = sweep.load(write(sweep_dir, GOOD), POLICIES)
    with pytest.raises(sweep.SweepError, match="^sbatch refused the sweep: sbatch: error: invalid partition$"):
        sweep.submit(plan, lambda argv, timeout: (1, "", "sbatch: error: invalid partition\n"))


def test_the_module_entry_point_checks_its_arguments(capsys, tmp_path):
    assert sweep.main(["task", "plan.json", "0"]) == 2
    assert "usage:" in capsys.readouterr().err
    assert sweep.main(["collect", str(tmp_path / "none.json")]) == 2
    assert "not a sweep plan" in capsys.readouterr().err


def test_perturb_seeds_multiply_the_grid_and_name_each_run(sweep_dir):
    plan = sweep.load(write(sweep_dir, 'policies = "best-fit"\nperturb = [1, 2, 3]\n[[windows]]\ntrace = "t.csv"\n'),
                      POLICIES)
    assert [t.perturb for t in plan.tasks] == [1, 2, 3]
    assert all(t.argv[t.argv.index("--perturb") + 1] == str(t.perturb) for t in plan.tasks)
    assert plan.tasks[2].label().endswith(" perturb=3")


def test_migratable_shares_and_restart_delays_multiply_the_grid(sweep_dir):
    text = 'policies = "best-fit"\nmigratable = [0, 0.25]\nmigration_delay = [8, 120]\n[[windows]]\ntrace = "t.csv"\n'
    plan = sweep.load(write(sweep_dir, text), POLICIES)
    assert [(t.migratable, t.migration_delay) for t in plan.tasks] == [(0, 8), (0, 120), (0.25, 8), (0.25, 120)]
    assert plan.tasks[3].argv[-5:-1] == ("--migratable", "0.25", "--migration-delay", "120")
    assert plan.tasks[3].label().endswith(" migratable=0.25 delay=120")
    plan.save()
    assert sweep.Plan.load(plan.output / "plan.json") == plan


def test_a_sweep_runs_one_process_per_cpu_it_may_use(sweep_dir, monkeypatch):
    monkeypatch.setattr(sweep.os, "sched_getaffinity", lambda pid: {1})
    seen = []
    plan = sweep.load(write(sweep_dir, 'policies = ["best-fit", "compass"]\n[[windows]]\ntrace = "t.csv"\n'), POLICIES)
    sweep.run_local(plan, simulate_in_process, on_done=seen.append)  # one CPU: in this process, in order
    assert [t.index for t in seen] == [0, 1]


def test_windows_from_shares_another_files_slices_relative_to_it(sweep_dir):
    (sweep_dir / "protocol").mkdir()
    (sweep_dir / "protocol" / "slices.toml").write_text('[[windows]]\ntrace = "../t.csv"\nname = "all"\n')
    plan = sweep.load(write(sweep_dir, 'policies = "best-fit"\nwindows_from = "protocol/slices.toml"\n'), POLICIES)
    assert [t.window for t in plan.tasks] == ["all"]
    assert plan.tasks[0].argv[:2] == ("--trace", str(sweep_dir / "t.csv"))
    assert plan.output == sweep_dir / "s-results"


REPO = Path(__file__).resolve().parents[2]
#: every committed sweep under docs/results (a new one is covered by being there)
RESULTS = sorted(p.parent.name for p in (REPO / "docs" / "results").glob("*/sweep.toml"))


@pytest.mark.parametrize("name", RESULTS)
def test_every_committed_results_sweep_plans_what_its_results_were_measured_from(name):
    """docs/results regenerates from its sweep files: each still plans, and its plan.json is that plan's."""
    from compass_slurm.engine.policies.base import policy_names

    here = REPO / "docs" / "results" / name
    plan = sweep.load(here / "sweep.toml", policy_names())
    committed = json.loads((here / "results" / "plan.json").read_text())["tasks"]
    assert [t.label() for t in plan.tasks] == [sweep.Task(**{**t, "argv": tuple(t["argv"])}).label()
                                                for t in committed]


@pytest.mark.parametrize("name", RESULTS)
def test_every_committed_results_table_is_what_its_sweep_files_command_prints(name):
    """The summarize command a sweep file names, run from the repository, prints its table.md to the byte."""
    header = (REPO / "docs" / "results" / name / "sweep.toml").read_text()
    # the comment's command, its continuation lines joined: python3 SCRIPT DIR... > TABLE
    text = re.sub(r"\\\n#\s+", " ", header)
    line = next(ln for ln in text.splitlines() if ln.startswith("#   python3 "))
    argv = shlex.split(line[1:])
    table = argv[argv.index(">") + 1]
    out = subprocess.run([sys.executable, *argv[1:argv.index(">")]], cwd=REPO, capture_output=True, text=True,
                         check=True).stdout
    assert out == (REPO / table).read_text()
