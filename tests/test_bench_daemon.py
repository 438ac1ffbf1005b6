"""benchmarks/bench_daemon.py's Slurm side: what the daemon asks is carried out as slurmctld would, and the
daemon's next cycle sees its moves done (no mismatch), so the benchmark's steady cycle is the churn's work."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from bench_daemon import Recorded, build, carry_out, churn, render, timed  # noqa: E402

import json  # noqa: E402
import subprocess  # noqa: E402
from collections import Counter  # noqa: E402

from compass_slurm.config import Config  # noqa: E402
from compass_slurm.service.daemon import Daemon  # noqa: E402
from compass_slurm.slurm.cli_backend import CliBackend  # noqa: E402
from compass_slurm.slurm.state import SlurmJob, SlurmNode, SlurmPartition, SlurmState  # noqa: E402


def _state(*jobs: SlurmJob) -> SlurmState:
    nodes = tuple(SlurmNode(n, "idle", frozenset(), ("gpu",), 8) for n in ("gpu0001", "gpu0002"))
    return SlurmState(nodes, jobs, (SlurmPartition("gpu", ("gpu0001", "gpu0002")),), (), "22.05.8", 0.0)


def test_a_requeued_job_runs_where_it_was_repinned_and_a_lease_keeps_a_job_waiting():
    state = _state(SlurmJob("1", "u", "RUNNING", "gpu", ("gpu0001",), {"gpu0001": 4}, gpus_per_node=4),
                   SlurmJob("2", "u", "PENDING", "gpu", gpus_per_job=8), SlurmJob("3", "u", "PENDING", "gpu"))
    changes = [["scontrol", "requeuehold", "1"],
               ["scontrol", "update", "JobId=1", "ReqNodeList=gpu0002", "NumNodes=1", "TresPerJob=",
                "TresPerNode=gres:gpu:4", "StartTime=now"],
               ["scontrol", "release", "1"],
               ["scontrol", "update", "JobId=2", "ReqNodeList=gpu0002", "NumNodes=1", "TresPerJob=",
                "TresPerNode=gres:gpu:8", "StartTime=now"],  # gpu0002 has 4 GPUs left: it waits
               ["scontrol", "update", "JobId=3", "StartTime=now+300"]]
    after, started, waiting = carry_out(state, changes, now=100.0)
    jobs = {j.id: j for j in after.jobs}
    assert (jobs["1"].state, jobs["1"].gpus_alloc, jobs["1"].start_time, jobs["1"].held) == (
        "RUNNING", {"gpu0002": 4}, 100, False)
    assert (jobs["2"].state, jobs["2"].required_nodes, jobs["2"].gpus_per_node) == ("PENDING", ("gpu0002",), 8)
    assert jobs["3"] == state.jobs[2]
    assert (started, waiting) == (1, 1)
    assert [(n.name, n.state, n.gpus_used) for n in after.nodes] == [("gpu0001", "idle", 0), ("gpu0002", "mixed", 4)]


def test_the_daemon_sees_its_placements_and_migrations_done():
    state = build(64, 320, 0.97, "first-fit", seed=1)
    runner = Recorded(render(state))
    now = [1_000_000.0]
    daemon = Daemon(Config(policy="compass", anchors=""), CliBackend(runner=runner, batch_runner=runner.batch), None,
                    clock=lambda: now[0])
    dump: list[str] = []
    first = timed(daemon, runner, dump)
    assert first.placed and first.migrated and first.requeues and not first.errors
    assert dump[0] == "# cycle 1" and first.requeues == sum(
        len(line.split()[2].split(",")) for line in dump if line.startswith("scontrol requeuehold "))
    decisions = [line for line in dump if line.startswith("{'job_id'") and "'instance':" not in line]
    assert len(decisions) == first.placed + first.migrated  # the rest of the records are migrations
    state, started, waiting = carry_out(state, runner.take(), now[0])
    assert (started, waiting) == (first.placed, 0)  # the requeued jobs wait, held, for the next cycle's re-pin
    requeued = {j.id for j in state.jobs if j.held}
    assert len(requeued) == first.requeues
    now[0] += 5
    runner.texts = render(state)
    # the read shows them requeue-held as Slurm does: the daemon re-pins and releases them, and Slurm starts them
    seen = {j.id: j for j in CliBackend(runner=runner).read_state().jobs}
    assert all(seen[j].held and seen[j].reason == "job_requeued_in_held_state" and seen[j].priority == 0
               for j in requeued)
    second = timed(daemon, runner)
    assert second.errors == Counter() and second.migrated == 0
    changes = runner.take()
    assert {line[2] for line in changes if line[1] == "release"} == requeued
    state, started, waiting = carry_out(state, changes, now[0])
    assert (started, waiting) == (second.placed + len(requeued), 0)
    assert not any(j.held for j in state.jobs) and all(j.running for j in state.jobs if j.id in requeued)
    now[0] += 5
    runner.texts = render(churn(state, 0.01, seed=2))
    third = daemon.cycle()
    assert third.errors == [] and third.adopted == []


def test_slurm_s_output_read_from_a_process_is_the_output_handed_over_in_memory(tmp_path):
    texts = render(build(64, 320, 0.97, "compass", seed=1))
    in_memory, through = Recorded(texts), Recorded(texts, folder=tmp_path, spawn=True)
    first, second = CliBackend(runner=in_memory).read_state(), CliBackend(runner=through).read_state()
    assert (second.nodes, second.jobs) == (first.nodes, first.jobs) and first.jobs
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"read{at}" for at in range(len(texts))]
    change = ["scontrol", "release", "7"]
    assert through(change, 5.0) == (0, "", "") and through.take() == [change]  # run as a process, and kept


def test_a_batch_of_changes_is_kept_line_by_line_and_costs_one_process(tmp_path):
    runner = Recorded({}, folder=tmp_path, spawn=True)
    text = "update JobId=7 StartTime=now+60\nrequeuehold 8,9\nrelease 8,9\n"
    assert runner.batch(["scontrol"], text, 5.0) == (0, "") and runner.processes == 1
    assert runner.take() == [["scontrol", "update", "JobId=7", "StartTime=now+60"], ["scontrol", "requeuehold", "8,9"],
                             ["scontrol", "release", "8,9"]]


def test_json_reports_a_sites_cycle_with_its_processes():
    """The default is a site's cycle: changes through processes, decisions logged to a SQLite file."""
    bench = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_daemon.py"
    out = subprocess.run([sys.executable, str(bench), "--nodes", "64", "--jobs", "320", "--repeat", "2", "--read",
                          "narrow", "--json"], capture_output=True, text=True, check=True).stdout
    figures = json.loads(out)
    assert set(figures) >= {"steady_s", "read_s", "cold_s", "processes_per_cycle", "changes_per_cycle", "read"}
    assert figures["read"] == "narrow" and figures["spawn"] and figures["db"] and not figures["in_memory"]
    assert 1 <= figures["processes_per_cycle"] <= 5 and figures["changes_per_cycle"] >= figures["processes_per_cycle"]
    assert len(figures["steady_cycles"]) == 2 and [figures["steady_s"], figures["changes_per_cycle"]] in (
        figures["steady_cycles"])
