"""``compass status`` on the recorded 16-node snapshot and the synthetic 2,000-node one."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from admin_cli import MIXED, invoke, json_of

from compass_slurm.engine.model import Decision, Job
from compass_slurm.slurm import snapshot
from compass_slurm.service.store import DecisionRecord, Store

#: an SGR sequence that sets a foreground colour (30-38, 90-97)
COLOUR = re.compile(r"\x1b\[(?:[0-9;]*;)?(?:3[0-8]|9[0-7])[;m]")
CONTRACT = {"schema_version", "nodes", "gpus", "gpus_used", "partial", "phi_star", "sif", "sif_bound", "wcc"}


def test_json_on_the_recorded_16_node_cluster() -> None:
    doc = json_of("status", "--snapshot", str(MIXED))
    assert CONTRACT <= set(doc)
    assert {k: doc[k] for k in CONTRACT} == {
        "schema_version": 1, "nodes": 16, "gpus": 128, "gpus_used": 22, "partial": 2, "phi_star": 1,
        "sif": 0.0625, "sif_bound": 0.125, "wcc": True,
    }
    assert doc["partial_nodes"] == ["node02", "node14"]
    assert doc["kinds"] == {"empty": 9, "pool": 0, "slotted": 0, "partial": 1, "full": 2, "unavailable": 4}
    cells = {c["name"]: c for c in doc["node_map"]}
    assert len(cells) == 16
    assert (cells["node01"]["kind"], cells["node02"]["kind"], cells["node11"]["kind"]) == ("full", "partial", "unavailable")
    assert cells["node02"]["note"] == "orphaned fillers: 6_2#0 (1 GPU)"
    assert cells["node10"]["note"] == "idle+DRAIN: maintenance window"
    pending = {p["job"]: p for p in doc["pending"]}
    assert list(pending) == ["10", "9", "11_[1-3]"]  # Slurm's priority order
    assert pending["10"]["blocked"] == "needs 1 node with 4 free GPUs, 0 have"  # it asked for node16, which is full
    assert pending["9"] == {"job": "9", "user": "root", "partition": "gpu", "request": "1x8", "gpus": 8, "held": True,
                            "slurm_reason": "JobHeldUser", "blocked": None, "fits": True, "migrating_to": None}
    assert doc["decisions"] is None and doc["decisions_note"].startswith("no decision log at ")
    assert doc["requeued"] is None  # no log: which held jobs the daemon is migrating is not known


def test_status_says_the_migration_budget_and_what_it_comes_to(isolated: Path, large: Path) -> None:
    doc = json_of("status", "--snapshot", str(MIXED))
    assert (doc["migrations_per_hour_setting"], doc["migrations_per_hour"]) == ("per-node", 16)  # 16 GPU nodes
    assert "16 migrations/h (per-node)" in invoke("status", "--snapshot", str(MIXED), env={"COLUMNS": "200"}).stdout
    # --partition narrows the map, not the daemon's budget: it counts the GPU nodes the daemon manages
    doc = json_of("status", "--snapshot", str(large), "--partition", "h100")
    assert (doc["nodes"], doc["migrations_per_hour"]) == (500, 2000)
    isolated.write_text('[compass]\npartitions = ["h100"]\n')
    assert json_of("status", "--snapshot", str(large))["migrations_per_hour"] == 500
    isolated.write_text('[compass]\nmigrations_per_hour = "unlimited"\n')
    doc = json_of("status", "--snapshot", str(MIXED))
    assert (doc["migrations_per_hour_setting"], doc["migrations_per_hour"]) == ("unlimited", None)
    assert "unlimited migrations" in invoke("status", "--snapshot", str(MIXED), env={"COLUMNS": "200"}).stdout
    assert (doc["migrations_burst_setting"], doc["migrations_burst"]) == ("10%", None)  # a share of no limit: none


def test_status_says_the_burst_cap_beside_the_budget(isolated: Path) -> None:
    isolated.write_text('[compass]\nmigrations_burst = "25%"\n')
    doc = json_of("status", "--snapshot", str(MIXED))
    assert (doc["migrations_per_hour"], doc["migrations_burst_setting"], doc["migrations_burst"]) == (16, "25%", 4)
    header = invoke("status", "--snapshot", str(MIXED), env={"COLUMNS": "200"}).stdout.splitlines()[0]
    assert "16 migrations/h (per-node), at most 4 in any 5 min (25%)" in header
    isolated.write_text('[compass]\nmigrations_per_hour = "unlimited"\nmigrations_burst = 30\n')
    header = invoke("status", "--snapshot", str(MIXED), env={"COLUMNS": "200"}).stdout.splitlines()[0]
    assert "unlimited migrations, at most 30 in any 5 min ·" in header



def test_status_says_the_slack_beside_the_queue(isolated: Path) -> None:
    doc = json_of("status", "--snapshot", str(MIXED))
    assert (doc["queue"], doc["slack"]) == ("backfill", 0.0)  # the default: EASY's rule, nothing to say
    assert " · queue backfill · " in invoke("status", "--snapshot", str(MIXED), env={"COLUMNS": "200"}).stdout
    isolated.write_text('[compass]\nslack = 0.5\n')
    assert json_of("status", "--snapshot", str(MIXED))["slack"] == 0.5
    header = invoke("status", "--snapshot", str(MIXED), env={"COLUMNS": "200"}).stdout.splitlines()[0]
    assert " · queue backfill (slack 0.5) · " in header
    isolated.write_text('[compass]\nslack = 0.5\nqueue = "fifo"\n')  # slack acts under backfill only
    header = invoke("status", "--snapshot", str(MIXED), env={"COLUMNS": "200"}).stdout.splitlines()[0]
    assert " · queue fifo · " in header

def test_json_on_2000_nodes(large: Path) -> None:
    state = snapshot.load(large)
    doc = json_of("status", "--snapshot", str(large))
    used = sum(n.gpus_used for n in state.nodes)
    partial = sorted(n.name for n in state.nodes if 0 < n.gpus_used < n.gpus)
    assert (doc["nodes"], doc["gpus"], doc["gpus_used"]) == (2000, 16000, used)
    assert doc["partial_nodes"] == partial and doc["partial"] == len(partial) == 221
    # WCC holds and the running GPUs are not a multiple of 8: Phi* is 1 (spec section 2).
    assert used % 8 and (doc["wcc"], doc["phi_star"]) == (True, 1)
    assert doc["sif"] == (221 - 1) / 2000 and doc["sif_bound"] == 2 / 2000
    assert doc["within_bound"] is False
    empty_a100 = sum(1 for n in state.nodes if n.partitions == ("a100",) and n.available and n.gpus_used == 0)
    assert empty_a100 == 86
    blocked = {p["job"]: p["blocked"] for p in doc["pending"]}
    assert blocked == {
        "9001": "needs 700 empty nodes, 86 free",
        "9002": "needs 2 empty nodes, 1 free",
        "9003": None,
        "9004": None,
        "9005": "needs 3 empty nodes, 1 free",
    }


def test_partition_filter(large: Path) -> None:
    doc = json_of("status", "--snapshot", str(large), "--partition", "h100")
    assert (doc["nodes"], doc["partition"]) == (500, "h100")
    assert [p["name"] for p in doc["partitions"]] == ["h100"]
    assert {p["job"] for p in doc["pending"]} == {"9002", "9004", "9005"}
    assert all(c["partitions"] == ["h100"] for c in doc["node_map"])


def test_table_is_short_at_2000_nodes(large: Path) -> None:
    result = invoke("status", "--snapshot", str(large), env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert len(lines) < 80, "2,000 nodes must fit a couple of screens"
    assert "partial 221  Phi* 1  SIF 0.110 > 2/N 0.001  WCC holds" in result.stdout
    assert "needs 2 empty nodes, 1 free" in result.stdout
    assert "... and 209 more (--json lists all)" in result.stdout
    assert max(len(line) for line in lines) <= 80


def test_map_folds_uniform_rows(tmp_path: Path) -> None:
    """A rack of idle nodes is one line, not a screenful."""
    from compass_slurm.slurm.state import SlurmNode, SlurmPartition, SlurmState

    nodes = tuple(SlurmNode(f"n{k:04d}", "idle", partitions=("p",), gpus=8) for k in range(1, 1001))
    path = tmp_path / "idle.json"
    snapshot.save(SlurmState(nodes, (), (SlurmPartition("p", tuple(n.name for n in nodes)),), (), "23.02.1", 0.0), path)
    result = invoke("status", "--snapshot", str(path), env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert "n0001  .......... ... n1000: 1000 nodes, all empty" in result.stdout


def test_text_shows_map_legend_and_latest_decisions(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'log.db'}"
    with Store.open(db) as store:
        store.record_decision(DecisionRecord.of(Decision("77", ("node03",), 8, "anchor slot on a newly opened node"),
                                                Job("77", 1, 8), "compass"))
    result = invoke("status", "--snapshot", str(MIXED), "--db", db, env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "node01  #!.......xxx.x.#" in out
    assert ". empty 9  p pool 0  s slotted 0  ! partial 1  # full 2  x unavailable 4" in out
    assert "node02  5/8  slotted, pinned  orphaned fillers: 6_2#0 (1 GPU)" in out
    assert "job 77  1x8  placed  node03:8  anchor slot on a newly opened node" in out
    assert "\x1b[" not in out  # not a terminal: no colour codes


def test_a_job_being_migrated_shows_as_requeued_with_its_new_nodes(tmp_path: Path) -> None:
    """A job the daemon requeue-held to migrate it (its state ``requeued``): Slurm holds it, still completing on its
    old nodes or pending again, and its latest place in the log is the requeue's record, naming its new nodes."""
    from dataclasses import replace

    from compass_slurm.service.sync import REQUEUE

    state = snapshot.load(MIXED)
    requeued = {"3": replace(state.jobs[2], state="COMPLETING", held=True, reason="job_requeued_in_held_state"),
                "9": replace(state.jobs[8], reason="job_requeued_in_held_state")}
    assert [state.jobs[2].id, state.jobs[8].id] == ["3", "9"]
    path = tmp_path / "requeued.json"
    snapshot.save(replace(state, jobs=tuple(requeued.get(job.id, job) for job in state.jobs)), path)
    db = f"sqlite:///{tmp_path / 'log.db'}"
    with Store.open(db) as store:
        for job, src, dst, gpus in (("3", "node01", "node05", 3), ("9", "node03", "node06", 8),
                                    ("4", "node15", "node16", 8)):  # 4: migrated, released and running again
            store.record_decision(DecisionRecord.of(Decision(job, (dst,), gpus, "slot"), Job(job, 1, gpus), "compass",
                                                    action="migrated", from_nodes=(src,), reason=REQUEUE))
    doc = json_of("status", "--snapshot", str(path), "--db", db)
    assert [(r["job"], r["state"], r["slurm_state"], r["from"], r["to"], r["gpus_per_node"]) for r in doc["requeued"]] \
        == [("3", "requeued", "COMPLETING", ["node01"], ["node05"], {"node05": 3}),
            ("9", "requeued", "PENDING", ["node03"], ["node06"], {"node06": 8})]
    pending = {p["job"]: p for p in doc["pending"]}
    assert (pending["9"]["migrating_to"], pending["9"]["held"]) == (["node06"], True)
    assert pending["10"]["migrating_to"] is None
    out = invoke("status", "--snapshot", str(path), "--db", db, env={"COLUMNS": "120"}).stdout
    assert re.search(r"^ *9 +root +1x8 +requeued: being migrated to node06 *$", out, re.M), out
    assert "requeued to be migrated (2):" in out
    assert "  job 3  root  node01 -> node05  Slurm: completing" in out
    assert "  job 9  root  node03 -> node06  Slurm: pending" in out
    # the --partition filter holds for them too; an unknown partition is still one clear line
    assert json_of("status", "--snapshot", str(path), "--db", db, "--partition", "gpu")["requeued"][0]["job"] == "3"
    wrong = invoke("status", "--snapshot", str(path), "--db", db, "--partition", "cpu")
    assert wrong.exit_code == 2 and wrong.stderr.startswith("compass: error: no partition 'cpu'")


def test_no_color_is_respected_even_when_colour_is_forced() -> None:
    coloured = invoke("status", "--snapshot", str(MIXED), env={"FORCE_COLOR": "1", "TERM": "xterm"})
    assert COLOUR.search(coloured.stdout)  # the check below can fail
    plain = invoke("status", "--snapshot", str(MIXED), env={"FORCE_COLOR": "1", "TERM": "xterm", "NO_COLOR": "1"})
    assert plain.exit_code == 0 and not COLOUR.search(plain.stdout)  # bold and italic may stay, colours go


def test_unknown_partition_is_a_clear_error() -> None:
    result = invoke("status", "--snapshot", str(MIXED), "--partition", "cpu")
    assert result.exit_code == 2
    assert result.stderr.startswith("compass: error: no partition 'cpu' (partitions: gpu)\nhint: ")
    assert "Traceback" not in result.output


def test_a_decision_count_past_its_range_is_exit_2_naming_the_option() -> None:
    result = invoke("status", "--snapshot", str(MIXED), "--decisions", "99999999999999999999999")
    assert result.exit_code == 2
    assert "Invalid value for '--decisions': 99999999999999999999999 is not in the range 0<=x<=1000000000." \
        in result.stderr


def test_bad_snapshot_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    result = invoke("status", "--snapshot", str(bad))
    assert result.exit_code == 2
    assert "not JSON" in result.stderr and "hint: record one with `compass snapshot save FILE`" in result.stderr
    missing = invoke("status", "--snapshot", str(tmp_path / "missing.json"))
    assert missing.exit_code == 2 and "cannot read snapshot" in missing.stderr


@pytest.mark.parametrize(("content", "said"), [
    (b"\xff\xfe", "not a snapshot: not UTF-8 text (at byte 0)"),
    (("nodes", 0, "gpus", "eight"), 'state.nodes[0].gpus: expected a whole number, got "eight"'),
    (("nodes", 0, "gpus", 10**30), "state.nodes[0].gpus: 1000000000000000000000000000000 is out of range: "
                                   "Slurm's numbers fit in 64 bits"),
    (("jobs", 0, "id", 1), "state.jobs[0].id: expected a string, got 1"),
    (("jobs", 0, "priority", "high"), 'state.jobs[0].priority: expected a whole number, got "high"'),
    (("read_at", None, None, "nan"), 'state.read_at: expected a number, got "nan"'),
    # names a command line would carry: checked on loading, not in the daemon's scontrol line
    (("jobs", 0, "id", "10;rm"), "state.jobs[0].id: not a valid Slurm job id: '10;rm'"),
    (("jobs", 0, "id", "11_[1-3]"), "state.jobs[0].id: not a valid Slurm job id: '11_[1-3]'"),
    (("jobs", 0, "sluid", "s1"), "state.jobs[0].sluid: not a valid Slurm SLUID: 's1'"),
    (("jobs", 0, "gpu_type", "a100 x"), "state.jobs[0].gpu_type: not a valid Slurm GRES type: 'a100 x'"),
    (("nodes", 0, "name", "node01 Weight=1"), "state.nodes[0].name: not a valid Slurm node name: 'node01 Weight=1'"),
])
def test_a_snapshot_of_bad_bytes_or_types_is_one_line_naming_it(tmp_path: Path, content, said: str) -> None:
    path = tmp_path / "bad.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        doc = json.loads(MIXED.read_text())
        table, index, field, value = content
        if index is None:
            doc["state"][table] = value
        else:
            doc["state"][table][index][field] = value
        path.write_text(json.dumps(doc))
    result = invoke("status", "--snapshot", str(path))
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.stderr.splitlines() == [f"compass: error: {path}: {said}",
                                          "hint: record one with `compass snapshot save FILE`"]


def test_live_slurm_missing_is_a_clear_error(monkeypatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    result = invoke("status")
    assert result.exit_code == 2
    assert "cannot run" in result.stderr and "compass doctor" in result.stderr


def test_status_counts_the_tasks_of_a_pending_array() -> None:
    from compass_slurm.service.status import blocked_jobs
    from compass_slurm.slurm.state import SlurmJob, SlurmNode, SlurmPartition, SlurmState
    from compass_slurm.slurm.translate import Translator

    node = SlurmNode("n1", "idle", frozenset(), ("gpu",), 8, 0, None, 32, 0, 256000, 0)
    array = SlurmJob("7_[0-3%2]", "alice", "PENDING", "gpu", gpus_per_node=1, comment="compass", reason="BeginTime",
                     array_job="7", array_pending="0-3", array_throttle=2)
    state = SlurmState((node,), (array,), (SlurmPartition("gpu", ("n1",)),), (), "22.05.8", 1.0e9)
    [pending] = blocked_jobs(Translator(state))
    assert pending.request == "4 tasks of 1x1"


# -- node groups (one capacity, one GPU type) -----------------------------------------------------


def _recorded(name: str, tmp_path: Path) -> Path:
    """A snapshot of a recorded dev-cluster scenario (tests/data/slurm/NAME), as make.py writes mixed-16x8's."""
    import json

    from compass_slurm.slurm.cli_backend import CliBackend

    recorded = Path(__file__).resolve().parents[1] / "data" / "slurm" / name
    answers = json.loads((recorded / "commands.json").read_text())
    state = CliBackend(runner=lambda argv, timeout: (0, (recorded / answers[" ".join(argv)]).read_text(), "")).read_state()
    path = tmp_path / f"{name}.json"
    snapshot.save(state, path)
    return path


def test_a_uniform_cluster_shows_one_group(tmp_path: Path) -> None:
    doc = json_of("status", "--snapshot", str(MIXED))
    assert doc["groups"] == [{"gpu_type": None, "capacity": 8, "nodes": 16, "gpus": 128, "gpus_used": 22,
                              "partial": 2, "phi_star": 1, "sif": 0.0625, "sif_bound": 0.125, "wcc": True,
                              "gpus_free": 106, "within_bound": True}]
    typed = json_of("status", "--snapshot", str(_recorded("typed-4x4", tmp_path)))
    assert [(g["gpu_type"], g["capacity"], g["nodes"]) for g in typed["groups"]] == [("a100", 4, 4)]
    assert {k: typed["groups"][0][k] for k in ("gpus_used", "partial", "phi_star", "wcc")} == {
        k: typed[k] for k in ("gpus_used", "partial", "phi_star", "wcc")}
    out = invoke("status", "--snapshot", str(MIXED), env={"COLUMNS": "80"}).stdout
    assert re.search(r"^ -\s+8\s+16\s+22/106\s+2\s+1\s+0\.062\s+ok\s+holds\s*$", out, re.M), out
    assert re.search(r"GPU type +GPUs +nodes +used/free +partial +Phi\* +SIF +bound +WCC", out)  # whole at 80 columns


def test_two_gpu_types_show_a_row_each_and_the_bound_counts_both(tmp_path: Path) -> None:
    from dataclasses import replace

    state = snapshot.load(MIXED)
    h100 = {f"node{k:02d}" for k in range(9, 17)}
    nodes = tuple(replace(n, gpu_type="h100" if n.name in h100 else "a100") for n in state.nodes)
    path = tmp_path / "two-types.json"
    snapshot.save(replace(state, nodes=nodes), path)
    doc = json_of("status", "--snapshot", str(path))
    groups = {g["gpu_type"]: g for g in doc["groups"]}
    assert [g["gpu_type"] for g in doc["groups"]] == ["a100", "h100"]
    assert (groups["a100"]["nodes"], groups["a100"]["gpus_used"], groups["a100"]["partial"]) == (8, 13, 1)
    assert (groups["h100"]["nodes"], groups["h100"]["gpus_used"], groups["h100"]["partial"]) == (8, 9, 1)
    assert groups["h100"]["gpus_free"] == 55 and groups["a100"]["sif_bound"] == 2 / 8
    # the whole: sums of the groups, two partial nodes beyond Phi* per group (4/N)
    assert doc["phi_star"] == sum(g["phi_star"] for g in doc["groups"]) and doc["sif_bound"] == 4 / 16
    assert {k: doc[k] for k in ("nodes", "gpus_used", "partial")} == {"nodes": 16, "gpus_used": 22, "partial": 2}
    out = invoke("status", "--snapshot", str(path), env={"COLUMNS": "100"}).stdout
    assert "<= 4/N 0.250" in out
    assert re.search(r"^ a100\s+8\s+8\s+13/51\s+1\s", out, re.M) and re.search(r"^ h100\s+8\s+8\s+9/55\s+1\s", out, re.M)


def test_nodes_compass_leaves_to_slurm_are_named(tmp_path: Path) -> None:
    """A node the engine does not place on (gres/shard, several GPU types, more GPUs than it takes) is no cell of
    the map: status names it, not to drop it without a word."""
    from dataclasses import replace

    state = snapshot.load(MIXED)
    odd = {"node03": {"shards": 16}, "node04": {"gpu_types": ("1g.10gb", "3g.40gb")}, "node05": {"gpus": 2000}}
    path = tmp_path / "odd.json"
    snapshot.save(replace(state, nodes=tuple(replace(n, **odd.get(n.name, {})) for n in state.nodes)), path)
    doc = json_of("status", "--snapshot", str(path))
    assert doc["left_to_slurm"] == ["node03", "node04", "node05"] and doc["nodes"] == 13
    assert json_of("status", "--snapshot", str(MIXED))["left_to_slurm"] == []
    out = invoke("status", "--snapshot", str(path), env={"COLUMNS": "200"}).stdout
    assert "left to Slurm (gres/shard, several GPU types or more than 1024 GPUs): node[03-05]" in out
    shared = tmp_path / "shared.json"
    snapshot.save(replace(state, nodes=tuple(replace(n, shards=8) for n in state.nodes)), shared)
    result = invoke("status", "--snapshot", str(shared))
    assert result.exit_code == 2 and result.stderr == (
        "compass: error: the cluster has no node with GPUs compass places on: node[01-16] left to Slurm "
        "(gres/shard, several GPU types or more than 1024 GPUs)\n"
        "hint: Slurm places every job on such nodes; compass has nothing to show or place\n")
    # a partition shows its own nodes left to Slurm, not the others'
    split = replace(state, nodes=tuple(replace(n, shards=8) if n.name == "node03" else n for n in state.nodes),
                    partitions=(*state.partitions, replace(state.partitions[0], name="small",
                                                           nodes=("node01", "node02", "node03"))))
    path = tmp_path / "split.json"
    snapshot.save(split, path)
    assert json_of("status", "--snapshot", str(path), "--partition", "small")["left_to_slurm"] == ["node03"]
    snapshot.save(replace(split, partitions=(*state.partitions, replace(state.partitions[0], name="small",
                                                                          nodes=("node01", "node02")))), path)
    assert json_of("status", "--snapshot", str(path), "--partition", "small")["left_to_slurm"] == []
    shared_small = replace(split, nodes=tuple(replace(n, shards=8) for n in state.nodes))
    snapshot.save(shared_small, path)
    result = invoke("status", "--snapshot", str(path), "--partition", "small")
    assert result.exit_code == 2 and result.stderr.startswith(
        "compass: error: partition 'small' has no node with GPUs compass places on: node[01-03] left to Slurm")
