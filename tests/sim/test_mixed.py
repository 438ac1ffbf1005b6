"""Mixed clusters in the simulator: layouts, GPU types and constraints, per-group metrics, through the real CLI."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from click.testing import CliRunner

from compass_slurm.cli import cli
from compass_slurm.engine.model import Job
from compass_slurm.layout import parse_layout
from compass_slurm.sim import mixed, workloads
from compass_slurm.sim.loop import SimConfig, simulate
from compass_slurm.sim.workloads import SimJob, TraceRecord

LAYOUT = """
[[nodes]]
names = "a[01-06]"
gpus = 8
gpu_type = "a100"
features = ["a100", "nvlink"]

[[nodes]]
names = "v[01-03]"
gpus = 4
gpu_type = "v100"
features = ["v100"]

[[nodes]]
names = "login01"
gpus = 0
"""


@pytest.fixture
def layout_file(tmp_path):
    path = tmp_path / "mixed.toml"
    path.write_text(LAYOUT)
    return path


def _jobs(sizes, **record):
    records = [TraceRecord(f"j{k}", float(k), 100.0, g, **record) for k, g in enumerate(sizes)]
    jobs, _ = workloads.to_jobs(records, 8)
    return jobs, records


def run(*args: str):
    return CliRunner().invoke(cli, ["simulate", *args])


# -- the nodes ------------------------------------------------------------------------------------


def test_a_layout_gives_its_gpu_nodes_as_written():
    cluster = mixed.from_layout(parse_layout(LAYOUT))
    assert [(n.name, n.gpus, n.gpu_type) for n in cluster.nodes][::3] == [
        ("a01", 8, "a100"), ("a04", 8, "a100"), ("v01", 4, "v100")]
    assert len(cluster.nodes) == 9  # the CPU-only login node is left out
    assert cluster.features["a02"] == {"a100", "nvlink"} and cluster.gpu_types == ("a100", "v100")


def test_eta_scales_every_group_by_one_factor_and_keeps_the_largest_job_fitting():
    # 24 GPUs busy all the time: p_eta = 24 of the layout's 60 GPUs, so 0.4 of every group
    jobs = [SimJob(0.0, 1000.0, Job(f"j{k}", 1, 8)) for k in range(3)]
    cluster = mixed.from_layout(parse_layout(LAYOUT), jobs, 0.9)
    assert mixed.scale_note(cluster) == "a100x8 6 -> 2, v100x4 3 -> 1"
    wide = [SimJob(0.0, 1000.0, Job("w", 5, 8))]  # five whole 8-GPU nodes: the groups grow until it fits
    grown = mixed.from_layout(parse_layout(LAYOUT), wide, 0.9)
    assert sum(1 for n in grown.nodes if n.gpus == 8) >= 5
    assert [n.name for n in grown.nodes if n.gpus == 8][-1].startswith("a0")
    small = mixed.from_layout(parse_layout(LAYOUT), [SimJob(0.0, 1.0, Job("m", 1, 8))], 0.9)
    assert len(small.nodes) == 2  # at least one node per group
    bigger = mixed._names(("a01", "a02"), 4)
    assert bigger == ["a01", "a02", "a02-1", "a02-2"]


def test_eta_scaling_stops_at_a_million_nodes():
    huge = [SimJob(0.0, 1000.0, Job("h", 10**8, 8))]  # grown until it fits: far past what the memory holds
    with pytest.raises(ValueError, match=r"^the layout's GPU nodes: [\d,]+ nodes, more than the 1,000,000 a "
                                         "simulation takes$"):
        mixed.from_layout(parse_layout(LAYOUT), huge, 0.9)


# -- eligible nodes -------------------------------------------------------------------------------


def test_trace_types_and_constraints_give_eligible_nodes():
    cluster = mixed.from_layout(parse_layout(LAYOUT))
    typed = [TraceRecord("t", 0.0, 1.0, 2, gpu_type="v100"), TraceRecord("c", 1.0, 1.0, 1, constraint="nvlink"),
             TraceRecord("o", 2.0, 1.0, 1, constraint="a100|v100"), TraceRecord("u", 3.0, 1.0, 1)]
    jobs, _ = workloads.to_jobs(typed, 8)
    kept, skipped = mixed.restrict(jobs, typed, cluster, None, 0)
    assert skipped == []
    assert kept[0].eligible == {"v01", "v02", "v03"}
    assert kept[1].eligible == {f"a0{k}" for k in range(1, 7)}
    assert kept[2].eligible is None and kept[3].eligible is None  # every node: no restriction carried


def test_typed_share_draws_types_in_proportion_to_their_gpus_and_only_where_the_job_fits():
    cluster = mixed.from_layout(parse_layout(LAYOUT))  # a100: 48 GPUs, v100: 12
    jobs, records = _jobs([1] * 2000 + [8] * 200)
    kept, skipped = mixed.restrict(jobs, records, cluster, 1.0, seed=3)
    assert skipped == []
    kinds = Counter("a100" if "a01" in sj.eligible else "v100" for sj in kept[:2000])
    assert 0.75 < kinds["a100"] / 2000 < 0.85
    assert all(sj.eligible == {f"a0{k}" for k in range(1, 7)} for sj in kept[2000:])  # no v100 node holds 8
    again, _ = mixed.restrict(jobs, records, cluster, 1.0, seed=3)
    assert [sj.eligible for sj in again] == [sj.eligible for sj in kept]  # seeded
    half, _ = mixed.restrict(jobs, records, cluster, 0.3, seed=3)
    assert 0.25 < sum(sj.eligible is not None for sj in half) / len(half) < 0.35


def test_a_job_its_nodes_could_never_hold_is_skipped_and_a_value_no_node_has_is_an_error():
    cluster = mixed.from_layout(parse_layout(LAYOUT))
    records = [TraceRecord("big", 0.0, 1.0, 16, gpu_type="v100"), TraceRecord("ok", 1.0, 1.0, 4, gpu_type="v100")]
    jobs, _ = workloads.to_jobs(records, 8)
    kept, skipped = mixed.restrict(jobs, records, cluster, None, 0)
    assert [sj.job.id for sj in kept] == ["ok"]
    assert skipped == ["job big (2 x 8 GPUs, GPU type v100): 3 node(s) match, room for 0 instance(s)"]
    with pytest.raises(ValueError, match="job x asks for GPU type b200, which no node has"):
        bad = [TraceRecord("x", 0.0, 1.0, 1, gpu_type="b200")]
        mixed.restrict(workloads.to_jobs(bad, 8)[0], bad, cluster, None, 0)


def test_the_csv_loader_reads_gpu_type_and_constraint_and_names_a_bad_constraint():
    trace = workloads.load_csv("job_id,submit_time_s,duration_s,num_gpus,gpu_type,constraint\n"
                               "a,0,10,1,a100,\nb,1,10,2,,a100&nvlink\n")
    assert [(r.gpu_type, r.constraint) for r in trace.records] == [("a100", None), (None, "a100&nvlink")]
    with pytest.raises(workloads.TraceError, match=r"line 2: constraint: .*\[rack1\|rack2\]"):
        workloads.load_csv("job_id,submit_time_s,duration_s,num_gpus,constraint\na,0,10,1,[rack1|rack2]\n")


# -- runs -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["compass", "compass-easy", "best-fit"])
def test_a_checked_run_keeps_typed_jobs_on_their_nodes_and_reports_every_group(policy):
    cluster = mixed.from_layout(parse_layout(LAYOUT))
    records = [TraceRecord(f"j{k}", k * 30.0, 600.0 + 50 * (k % 7), (1, 1, 2, 4, 1, 8, 3)[k % 7]) for k in range(150)]
    jobs, _ = workloads.to_jobs(records, 8)
    kept, _ = mixed.restrict(jobs, records, cluster, 0.5, seed=1)
    result = simulate(kept, SimConfig(policy, cluster.nodes, check=True, queue="backfill"))  # --check's invariants
    metrics = result.metrics
    assert metrics.groups == {"v100x4": 3, "a100x8": 6}
    assert set(metrics.mean_partial_by_group) == {"v100x4", "a100x8"}
    assert sum(metrics.mean_partial_by_group.values()) == pytest.approx(metrics.mean_partial_nodes)


def test_cli_layout_runs_with_typed_jobs_and_reports_groups(layout_file):
    result = run("--synthetic", "philly", "--limit", "200", "--layout", str(layout_file), "--typed", "0.3",
                 "--policy", "compass-easy,best-fit", "--check", "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    for row in rows:
        assert (row["nodes"], row["gpus_per_node"], row["layout"], row["typed"]) == (9, "layout", str(layout_file), 0.3)
        assert row["groups"] == {"v100x4": 3, "a100x8": 6} and row["eta"] is None and row["layout_scaled"] is None
        assert row["skipped_jobs"] == 0
    scaled = json.loads(run("--synthetic", "philly", "--limit", "200", "--layout", str(layout_file), "--eta", "0.5",
                            "--policy", "best-fit", "--json").stdout)[0]
    assert scaled["eta"] == 0.5 and scaled["layout_scaled"].startswith("a100x8 6 -> ")
    text = run("--synthetic", "philly", "--limit", "200", "--layout", str(layout_file), "--policy", "compass")
    assert "mean partial nodes per group: v100x4" in " ".join(text.output.split()) and "SIF<=4/N" in text.output


def test_cli_trace_types_skip_what_cannot_run(layout_file, tmp_path):
    trace = tmp_path / "typed.csv"
    trace.write_text("job_id,submit_time_s,duration_s,num_gpus,gpu_type\na,0,10,8,v100\nb,1,10,4,v100\nc,2,10,2,\n")
    result = run("--trace", str(trace), "--layout", str(layout_file), "--policy", "compass", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)[0]["skipped_jobs"] == 1
    text = run("--trace", str(trace), "--layout", str(layout_file), "--policy", "compass")
    assert "1 job(s) no eligible nodes could hold skipped, first: job a (1 x 8 GPUs, GPU type v100)" in " ".join(
        text.output.split())


@pytest.mark.parametrize(("args", "message"), [
    (["--nodes", "4"], "--layout cannot be combined with --nodes"),
    (["--gpus-per-node", "8"], "--layout cannot be combined with --gpus-per-node"),
    (["--typed", "half"], "--typed 'half' is not a number"),
    (["--typed", "1.5"], "--typed '1.5' is outside [0, 1]"),
])
def test_cli_conflicts_and_bad_values_are_one_line_and_exit_2(layout_file, args, message):
    result = run("--synthetic", "philly", "--limit", "20", "--layout", str(layout_file), *args)
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output


def test_cli_bad_layout_typed_without_layout_and_a_type_no_node_has(tmp_path, layout_file):
    bad = tmp_path / "bad.toml"
    bad.write_text('[[nodes]]\nnames = "n[1-2]"\ngpus = "eight"\n')
    result = run("--synthetic", "philly", "--limit", "20", "--layout", str(bad))
    assert result.exit_code == 2 and "nodes[0].gpus: must be" in result.output
    bad.write_text('[[nodes]]\nnames = "n[1-4]"\ngpus = 9223372036854775807\n')
    result = run("--synthetic", "philly", "--limit", "20", "--layout", str(bad))
    assert result.exit_code == 2
    assert result.stderr == (f"compass: error: {bad}: nodes[0].gpus: must be an integer of 0 to 1024, "
                             "got 9223372036854775807\n")
    result = run("--synthetic", "philly", "--limit", "20", "--typed", "0.3")
    assert result.exit_code == 2 and "--typed needs --layout" in result.output
    trace = tmp_path / "b200.csv"
    trace.write_text("job_id,submit_time_s,duration_s,num_gpus,gpu_type\na,0,10,1,b200\n")
    result = run("--trace", str(trace), "--layout", str(layout_file))
    assert result.exit_code == 2 and "job a asks for GPU type b200, which no node has" in result.output
    result = run("--trace", str(trace), "--nodes", "2")
    assert result.exit_code == 2 and "(the nodes have no GPU types: give --layout)" in result.output


def test_a_sweep_runs_layouts_typed_shares_and_seeds(tmp_path, layout_file):
    from compass_slurm.cli.simulate import simulate_in_process
    from compass_slurm.engine.policies.base import policy_names
    from compass_slurm.sim import sweep

    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_time_s,duration_s,num_gpus\n" + "".join(
        f"j{k},{k * 20},{300 + 40 * (k % 5)},{(1, 2, 4, 8, 1)[k % 5]}\n" for k in range(60)))
    (tmp_path / "s.toml").write_text(f"""
policies = ["compass-easy", "best-fit"]
seeds = [1, 2]
[[windows]]
trace = "t.csv"
layout = "{layout_file.name}"
typed = 0.5
name = "w"
""")
    plan = sweep.load(tmp_path / "s.toml", policy_names())
    assert [(t.policy, t.seed) for t in plan.tasks] == [("compass-easy", 1), ("compass-easy", 2), ("best-fit", 1),
                                                      ("best-fit", 2)]
    assert ("--layout", str(layout_file.resolve())) == plan.tasks[0].argv[2:4] and "--typed" in plan.tasks[0].argv
    sweep.run_local(plan, simulate_in_process, workers=1)
    collected = sweep.collect(plan)
    assert not collected.failed and [r["seed"] for r in collected.rows] == [1, 2, 1, 2]
    table = sweep.markdown(collected)
    assert "| seed |" in table and "partial per group" in table and "v100x4 " in table and "2K/N" in table
    (tmp_path / "bad.toml").write_text('policies = ["compass"]\n[[windows]]\ntrace = "t.csv"\ntyped = 0.5\n')
    with pytest.raises(sweep.SweepError, match="'typed' needs a 'layout'"):
        sweep.load(tmp_path / "bad.toml", policy_names())
