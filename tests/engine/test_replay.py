"""`compass replay`: the --states contract, the bundled example, and bad input (exit 2, line number, no traceback)."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from test_properties import streams

from compass_slurm.cli import cli
from compass_slurm.config import Config
from compass_slurm.engine.model import Node
from compass_slurm.engine.policies.base import policy_names
from compass_slurm.engine.replay import states as replay_states
from compass_slurm.engine.replay import summary as replay_summary

EXAMPLE = resources.files("compass_slurm") / "data" / "example-events.jsonl"
COMPASS = Path(sys.executable).parent / "compass"
STATE_KEYS = ["i", "t", "nodes", "pending", "migrations", "partial", "phi_star", "sif"]


def replay(events: str, *options: str):
    return CliRunner().invoke(cli, ["replay", "-", *options], input=events)


def lines(*events: dict | str) -> str:
    return "".join((e if isinstance(e, str) else json.dumps(e)) + "\n" for e in events)


def arrive(t: float, job: str, gpus: int, instances: int = 1, **flags) -> dict:
    return {"t": t, "event": "arrive", "job": job, "instances": instances, "gpus": gpus, **flags}


def depart(t: float, job: str) -> dict:
    return {"t": t, "event": "depart", "job": job}


def test_states_follow_the_contract_exactly():
    events = lines(
        arrive(0, "p", 1, instances=2),
        arrive(1, "t", 3),  # its slot pulls a filler from the pool: a migration
        arrive(2, "big", 8, instances=2),  # needs two empty nodes: queued
        "",  # blank lines are not events
        arrive(3.5, "s", 2, migratable=False),  # FIFO: waits behind big
        depart(4, "big"),  # a queued job leaving the queue lets s start
        depart(5, "t"),  # its filler goes back to the pool node
    )
    result = replay(events, "--nodes", "2", "--states", "--policy", "compass")
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    states = [json.loads(line) for line in result.stdout.splitlines()]
    pool = {"node0001": [["p", 0, 1], ["p", 1, 1]]}
    assert states == [
        {"i": 0, "t": 0.0, "nodes": pool, "pending": [], "migrations": [], "partial": 1, "phi_star": 1, "sif": 0.0},
        {
            "i": 1,
            "t": 1.0,
            "nodes": {"node0001": [["p", 1, 1]], "node0002": [["p", 0, 1], ["t", 0, 3]]},
            "pending": [],
            "migrations": [["p", 0, "node0001", "node0002"]],
            "partial": 2,
            "phi_star": 1,
            "sif": 0.5,
        },
        {
            "i": 2,
            "t": 2.0,
            "nodes": {"node0001": [["p", 1, 1]], "node0002": [["p", 0, 1], ["t", 0, 3]]},
            "pending": ["big"],
            "migrations": [],
            "partial": 2,
            "phi_star": 1,
            "sif": 0.5,
        },
        {
            "i": 3,
            "t": 3.5,
            "nodes": {"node0001": [["p", 1, 1]], "node0002": [["p", 0, 1], ["t", 0, 3]]},
            "pending": ["big", "s"],
            "migrations": [],
            "partial": 2,
            "phi_star": 1,
            "sif": 0.5,
        },
        {
            "i": 4,
            "t": 4.0,
            "nodes": {"node0001": [["p", 1, 1]], "node0002": [["p", 0, 1], ["s", 0, 2], ["t", 0, 3]]},
            "pending": [],
            "migrations": [],
            "partial": 2,
            "phi_star": 1,
            "sif": 0.5,
        },
        {
            "i": 5,
            "t": 5.0,
            "nodes": {"node0001": [["p", 0, 1], ["p", 1, 1]], "node0002": [["s", 0, 2]]},
            "pending": [],
            "migrations": [["p", 0, "node0002", "node0001"]],
            "partial": 2,
            "phi_star": 1,
            "sif": 0.5,
        },
    ]
    for line in result.stdout.splitlines():
        assert list(json.loads(line)) == STATE_KEYS  # key order too: the lines are read by eye as well


def test_pending_keeps_queue_order():
    events = lines(
        arrive(0, "fill", 8, instances=2),
        arrive(1, "c", 1),
        arrive(2, "a", 4),
        arrive(3, "b", 2),
        depart(4, "a"),
    )
    states = [json.loads(line) for line in replay(events, "--nodes", "2", "--states").stdout.splitlines()]
    assert [s["pending"] for s in states] == [[], ["c"], ["c", "a"], ["c", "a", "b"], ["c", "b"]]


def check_state_stream(states: list[dict], events: list[dict], nodes: int, gpus: int) -> None:
    """Re-check a --states stream from outside: types, one state per event, capacity, and that
    every instance that changed node did so through a listed migration."""
    assert [s["i"] for s in states] == list(range(len(events)))
    where: dict[tuple[str, int], str] = {}
    for state, event in zip(states, events):
        assert list(state) == STATE_KEYS
        assert state["t"] == float(event["t"]) and isinstance(state["t"], float)
        assert all(isinstance(x, int) and not isinstance(x, bool) for x in (state["i"], state["partial"], state["phi_star"]))
        assert isinstance(state["sif"], float)
        assert all(isinstance(j, str) for j in state["pending"])
        for job, k, src, dst in state["migrations"]:
            assert isinstance(job, str) and isinstance(k, int) and src != dst
            if (job, k) in where:  # an instance placed in this very step may move before it is listed
                assert where[(job, k)] == src, f"state {state['i']}: {job}#{k} migrates from where it is not"
            where[(job, k)] = dst
        now: dict[tuple[str, int], str] = {}
        for node, placed in state["nodes"].items():
            assert placed, "empty nodes are left out"
            assert sum(g for _, _, g in placed) <= gpus
            for job, k, g in placed:
                assert isinstance(job, str) and isinstance(k, int) and 1 <= g <= gpus
                now[(job, k)] = node
        for key, node in now.items():
            assert where.get(key, node) == node, f"state {state['i']}: {key} moved without a migration"
        gone = {job for job, _ in where} - {job for job, _ in now}
        assert gone <= ({event["job"]} if event["event"] == "depart" else set())
        assert not {job for job, _ in now} & set(state["pending"])
        where = now
        used = [sum(g for _, _, g in placed) for placed in state["nodes"].values()]
        assert state["partial"] == sum(1 for u in used if u < gpus)
        assert state["sif"] == pytest.approx((state["partial"] - state["phi_star"]) / nodes)


def example_events() -> list[dict]:
    return [json.loads(line) for line in EXAMPLE.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("policy", policy_names())
def test_the_bundled_example_replays_with_every_policy(policy):
    events = example_events()
    result = replay(EXAMPLE.read_text(), "--nodes", "8", "--policy", policy, "--states")
    assert result.exit_code == 0, result.output
    states = [json.loads(line) for line in result.stdout.splitlines()]
    check_state_stream(states, events, nodes=8, gpus=8)
    assert states[-1]["pending"] == []


def test_the_bundled_example_is_a_realistic_mix():
    events = example_events()
    arrivals = [e for e in events if e["event"] == "arrive"]
    assert 35 <= len(events) <= 50
    assert {e["gpus"] for e in arrivals} >= {1, 2, 3, 4, 8}
    assert any(e["instances"] > 1 for e in arrivals)
    assert sum(e["event"] == "depart" for e in events) >= 15
    assert any(e.get("distinct_nodes") for e in arrivals) and any(e.get("migratable") is False for e in arrivals)


def test_compass_keeps_fewer_partial_nodes_than_best_fit_on_the_example():
    def partial(policy: str) -> list[int]:
        out = replay(EXAMPLE.read_text(), "--nodes", "8", "--policy", policy, "--states").stdout
        return [json.loads(line)["partial"] for line in out.splitlines()]

    assert sum(partial("compass")) < sum(partial("best-fit"))


def test_without_states_a_summary_is_printed():
    result = replay(EXAMPLE.read_text(), "--nodes", "8")
    assert result.exit_code == 0
    summary = json.loads(result.stdout)
    assert summary["events"] == len(example_events())
    assert summary["policy"] == Config.policy  # the daemon's policy unless --policy says otherwise
    assert set(summary) == {
        "policy", "nodes", "gpus_per_node", "events", "migrations", "max_partial", "max_sif", "pending_at_end"
    }


@pytest.mark.parametrize("policy", ["compass", "best-fit", "buddy"])
@pytest.mark.parametrize("nodes", ["4", "8"])
def test_the_summary_equals_the_fold_over_the_states(policy, nodes):
    """The summary skips the node map and most Phi* computations; its totals must not change."""
    text = EXAMPLE.read_text()
    states = [json.loads(line) for line in replay(text, "--nodes", nodes, "--policy", policy, "--states").stdout.splitlines()]
    summary = json.loads(replay(text, "--nodes", nodes, "--policy", policy).stdout)
    assert summary == {
        "policy": policy, "nodes": int(nodes), "gpus_per_node": 8, "events": len(states),
        "migrations": sum(len(s["migrations"]) for s in states),
        "max_partial": max(s["partial"] for s in states), "max_sif": max(0.0, *(s["sif"] for s in states)),
        "pending_at_end": len(states[-1]["pending"]),
    }


@settings(max_examples=40, deadline=None)
@given(streams(pinned=True), st.integers(2, 6), st.sampled_from(["compass", "compass-wc", "first-fit"]))
def test_the_summary_equals_the_fold_on_random_streams(events, n, policy):
    arrivals, text = [], []
    for t, (kind, what) in enumerate(events):
        if kind == "arrive":
            arrivals.append(what)
            text.append(json.dumps(arrive(t, what.id, what.gpus, what.instances, migratable=what.migratable)))
        elif arrivals[what].id not in {json.loads(x)["job"] for x in text if '"depart"' in x}:
            text.append(json.dumps(depart(t, arrivals[what].id)))
    nodes = [Node(f"n{i}", 8) for i in range(n)]
    states = list(replay_states(text, nodes, policy))
    assert replay_summary(text, nodes, policy) == {
        "events": len(states), "migrations": sum(len(x["migrations"]) for x in states),
        "max_partial": max(x["partial"] for x in states), "max_sif": max(0.0, *(x["sif"] for x in states)),
        "pending_at_end": len(states[-1]["pending"]),
    }


def test_states_on_four_gpu_nodes():
    result = replay(lines(arrive(0, "a", 3), arrive(1, "b", 1)), "--nodes", "2", "--gpus-per-node", "4", "--states")
    assert json.loads(result.stdout.splitlines()[-1])["nodes"] == {"node0001": [["a", 0, 3], ["b", 0, 1]]}


GOOD = arrive(0, "a", 4)

BAD_INPUT = [
    ([GOOD, depart(1, "zz")], 2, "departure of unknown job zz"),
    ([GOOD, depart(1, "a"), depart(2, "a")], 3, "departure of unknown job a"),
    ([arrive(0, "a", 9)], 1, "gpus must be between 1 and 8 (GPUs per node), got 9"),
    ([GOOD, arrive(1, "b", 0)], 2, "gpus must be between 1 and 8 (GPUs per node), got 0"),
    ([GOOD, arrive(1, "b", 2.5)], 2, "'gpus' must be an integer, got 2.5"),
    ([GOOD, arrive(1, "b", "4")], 2, "'gpus' must be an integer, got '4'"),
    ([GOOD, arrive(1, "b", 2, instances=1.0)], 2, "'instances' must be an integer, got 1.0"),
    ([GOOD, arrive(1, "b", 2, instances=0)], 2, "instances must be at least 1, got 0"),
    ([GOOD, arrive(1, "a", 2)], 2, "duplicate job id a"),
    ([GOOD, depart(1, "a"), arrive(2, "a", 2)], 3, "duplicate job id a"),
    ([GOOD, '{"t": 1, "event": "arrive", "job": "b", "gpus": 2'], 2, "malformed JSON (Expecting ',' delimiter at column 50)"),
    ([GOOD, '{"t": 1,, "event": "depart"}'], 2, "malformed JSON (Expecting property name enclosed in double quotes at column 9)"),
    ([GOOD, "[1, 2]"], 2, "an event must be a JSON object"),
    ([GOOD, '{"t": 1, "event": "depart", "job": "a"}\r{"t": 2, "event": "depart", "job": "b"}'], 2,
     "a carriage return inside the line: end each event's line with \\n (or \\r\\n)"),
    ([GOOD, {"t": 1, "event": "arrive", "job": "b"}], 2, "missing field 'gpus'"),
    ([GOOD, {"event": "arrive", "job": "b", "gpus": 1}], 2, "missing field 't'"),
    ([GOOD, {"t": 1, "gpus": 1}], 2, "missing fields 'event', 'job'"),
    ([GOOD, {"t": "soon", "event": "depart", "job": "a"}], 2, "'t' must be a number, got 'soon'"),
    ([GOOD, {"t": 1, "event": "leave", "job": "a"}], 2, "'event' must be \"arrive\" or \"depart\", got 'leave'"),
    ([GOOD, arrive(1, "b", 2, migratable="yes")], 2, "'migratable' must be true or false, got 'yes'"),
]


@pytest.mark.parametrize(("events", "line", "problem"), BAD_INPUT)
def test_bad_input_stops_with_the_line_and_the_problem(events, line, problem):
    result = replay(lines(*events), "--nodes", "2", "--states")
    assert result.exit_code == 2
    assert result.stderr == f"compass: error: <stdin>: line {line}: {problem}\n"
    # The states of the good events before the bad line were already streamed; nothing after.
    out = result.stdout.splitlines()
    assert len(out) == line - 1
    assert all(json.loads(s)["i"] == i for i, s in enumerate(out))


def test_bad_input_without_states_prints_nothing_on_stdout():
    result = replay(lines(GOOD, depart(1, "zz")), "--nodes", "2")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "line 2: departure of unknown job zz" in result.stderr


def test_distinct_nodes_beyond_the_cluster_is_bad_input():
    result = replay(lines(arrive(0, "d", 2, instances=3, distinct_nodes=True)), "--nodes", "2", "--states")
    assert result.exit_code == 2
    assert "line 1: job d wants 3 distinct nodes of 2" in result.stderr


def test_bytes_that_are_not_utf8_are_a_bad_line(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(lines(GOOD).encode() + b'{"t": 1, "job": "\xff", "event": "depart"}\n')
    result = CliRunner().invoke(cli, ["replay", str(path), "--nodes", "2", "--states"])
    assert result.exit_code == 2
    assert result.stderr == f"compass: error: {path}: line 2: not UTF-8 text (byte 18 of the line)\n"
    assert [json.loads(state)["i"] for state in result.stdout.splitlines()] == [0]


@pytest.mark.parametrize(("option", "value", "most"), [
    ("--nodes", "99999999999999999999", "1000000"),
    ("--gpus-per-node", "99999999999999999999", "1024"),
    ("--gpus-per-node", "1025", "1024"),
])
def test_a_cluster_past_the_engines_limits_is_a_usage_error(option, value, most):
    result = replay(lines(GOOD), "--nodes", "2", option, value)
    assert result.exit_code == 2
    assert f"Invalid value for '{option}': {value} is not in the range 1<=x<={most}." in result.stderr


def test_unknown_policy_and_missing_file_are_usage_errors(tmp_path):
    result = CliRunner().invoke(cli, ["replay", str(EXAMPLE), "--nodes", "8", "--policy", "nope"])
    assert result.exit_code == 2
    assert "unknown policy 'nope'" in result.stderr and "compass" in result.stderr
    result = CliRunner().invoke(cli, ["replay", str(tmp_path / "missing.jsonl"), "--nodes", "8"])
    assert result.exit_code == 2


def test_the_installed_command_streams_clean_json(tmp_path):
    proc = subprocess.run(
        [str(COMPASS), "replay", str(EXAMPLE), "--nodes", "8", "--policy", "compass", "--states"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    states = [json.loads(line) for line in proc.stdout.splitlines()]
    check_state_stream(states, example_events(), nodes=8, gpus=8)


def test_the_installed_command_reports_bad_input_without_a_traceback(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text(lines(GOOD, arrive(1, "b", 3), arrive(2, "c", 9)))
    proc = subprocess.run(
        [str(COMPASS), "replay", str(path), "--nodes", "2", "--states"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert proc.stderr == f"compass: error: {path}: line 3: gpus must be between 1 and 8 (GPUs per node), got 9\n"
    assert "Traceback" not in proc.stderr
    assert [json.loads(line)["i"] for line in proc.stdout.splitlines()] == [0, 1]
