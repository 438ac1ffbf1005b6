"""The exact scontrol command lines every backend runs, and the dry-run and snapshot backends."""

import io
import json
from dataclasses import replace
from pathlib import Path

import pytest

from compass_slurm.slurm.backend import DryRunBackend, update_argv
from compass_slurm.slurm.cli_backend import CliBackend
from compass_slurm.slurm.errors import SlurmError, SlurmParseError
from compass_slurm.slurm.snapshot import SnapshotBackend, dumps, load, loads, save
from compass_slurm.slurm.state import SlurmJob, marker_comment
from compass_slurm.slurm.translate import Translator


def test_action_command_lines(mixed):
    backend = CliBackend(runner=mixed)
    mixed.override.update({k: (0, "", "") for k in (
        "scontrol release 9", "scontrol requeuehold 3",
        "scontrol update JobId=9 ReqNodeList=node[05-06,09]",
        "scontrol update JobId=9 ReqNodeList=node[03-04] NumNodes=2 TresPerJob= TresPerNode=gres:gpu:4",
        "scontrol update JobId=9,10 StartTime=now+60",
    )})
    backend.set_nodes("9", ["node09", "node05", "node06"])
    backend.release("9")
    backend.requeue_hold("3")
    backend.set_nodes("9", ["node03", "node04"], gpus_per_node=4)
    backend.renew_lease(["9", "10"], 60)
    assert mixed.calls == [
        ["scontrol", "update", "JobId=9", "ReqNodeList=node[05-06,09]"],
        ["scontrol", "release", "9"],
        ["scontrol", "requeuehold", "3"],
        ["scontrol", "update", "JobId=9", "ReqNodeList=node[03-04]", "NumNodes=2", "TresPerJob=",
         "TresPerNode=gres:gpu:4"],
        ["scontrol", "update", "JobId=9,10", "StartTime=now+60"],
    ]


def test_typed_update_and_start_now():
    assert update_argv("7", ["n1"], gpus_per_node=2, gpu_type="a100", start_now=True) == [
        "scontrol", "update", "JobId=7", "ReqNodeList=n1", "NumNodes=1", "TresPerJob=",
        "TresPerNode=gres:gpu:a100:2", "StartTime=now",
    ]


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda b: b.release("9 Priority=1"), "not a valid Slurm job id"),
        (lambda b: b.set_nodes("9", ["node01,node02"]), "not a valid Slurm node name"),
        (lambda b: b.set_nodes("9", []), "empty node list"),
        (lambda b: b.set_nodes("9", ["n1"], gpu_type="a100 x=1"), "not a valid Slurm GRES type"),
        (lambda b: b.set_nodes("9", ["n1"], gpus_per_node=0), "gpus per node must be at least 1"),
        (lambda b: b.migrate("3", ["bad name"]), "not a valid Slurm node name"),
    ],
)
def test_bad_arguments_never_reach_slurm(mixed, call, message):
    with pytest.raises(SlurmError, match=message):
        call(CliBackend(runner=mixed))
    assert mixed.calls == []


def test_update_that_changes_nothing_is_refused():
    with pytest.raises(SlurmError, match="changes nothing"):
        update_argv("5")


def test_failed_scontrol_is_a_command_error(mixed):
    mixed.override["scontrol release 9"] = (1, "", "slurm_release_job error: Invalid job id specified")
    with pytest.raises(SlurmError, match="scontrol release 9: exit 1: slurm_release_job error"):
        CliBackend(runner=mixed).release("9")


def test_migrate_waits_for_pending_before_start_now(mixed):
    states = iter(["COMPLETING", "COMPLETING", "PENDING"])
    for command in ("scontrol requeuehold 3", "scontrol update JobId=3 ReqNodeList=node07 StartTime=now",
                    "scontrol release 3"):
        mixed.override[command] = (0, "", "")
    backend = CliBackend(runner=mixed)
    backend.job_state = lambda job_id: next(states)
    backend.wait_requeued = lambda job_id, timeout, poll=0.0: CliBackend.wait_requeued(backend, job_id, timeout, 0.0)
    backend.migrate("3", ["node07"])
    assert mixed.calls == [
        ["scontrol", "requeuehold", "3"],
        ["scontrol", "update", "JobId=3", "ReqNodeList=node07", "StartTime=now"],
        ["scontrol", "release", "3"],
    ]
    assert next(states, "drained") == "drained"


def test_migrate_gives_up_when_the_job_vanishes(mixed):
    mixed.override["scontrol requeuehold 3"] = (0, "", "")
    backend = CliBackend(runner=mixed)
    backend.job_state = lambda job_id: None
    with pytest.raises(SlurmError, match="job 3 vanished while being requeued"):
        backend.migrate("3", ["node07"])


def test_dry_run_prints_and_records_without_running(mixed):
    out = io.StringIO()
    dry = DryRunBackend(CliBackend(runner=mixed), out=out)
    dry.set_nodes("9", ["node05"], start_now=True)
    dry.migrate("3", ["node07", "node08"], gpus_per_node=1)
    assert out.getvalue().splitlines() == [
        "scontrol update JobId=9 ReqNodeList=node05 StartTime=now",
        "scontrol requeuehold 3",
        "scontrol update JobId=3 ReqNodeList=node[07-08] NumNodes=2 TresPerJob= TresPerNode=gres:gpu:1 StartTime=now",
        "scontrol release 3",
    ]
    assert dry.commands[0] == ["scontrol", "update", "JobId=9", "ReqNodeList=node05", "StartTime=now"]
    assert not any(c[0] == "scontrol" and c[1] != "--version" for c in mixed.calls)


def test_snapshot_round_trip(mixed, tmp_path):
    state = CliBackend(runner=mixed).read_state()
    path = tmp_path / "state.json"
    save(state, path)
    assert load(path) == state
    backend = SnapshotBackend.from_file(path, out=None)
    assert backend.read_state() == state and backend.version() == state.version
    assert backend.job_state("9") == "PENDING" and backend.job_state("999") is None
    backend.migrate("3", ["node05"])
    assert backend.commands[0] == ["scontrol", "requeuehold", "3"]


@pytest.mark.parametrize(
    "text, message",
    [
        ("{", "snap.json: not JSON"),
        ('{"kind": "other"}', "not a compass Slurm snapshot"),
        ('{"kind": "compass-slurm-snapshot", "schema": 99}', "snapshot schema 99, this version reads 1"),
        ('{"kind": "compass-slurm-snapshot", "schema": 1}', 'not a compass Slurm snapshot (no "state")'),
        ('{"kind": "compass-slurm-snapshot", "schema": 1, "state": {"nodes": []}}',
         "state: missing fields ['jobs', 'partitions', 'reservations', 'version', 'read_at'] (SlurmState)"),
        ('{"kind": "compass-slurm-snapshot", "schema": 1, "state": {"nodes": [{"name": "n", "x": 1}],'
         ' "jobs": [], "partitions": [], "reservations": [], "version": "1", "read_at": 0}}',
         "state.nodes[0]: unknown fields ['x'] (SlurmNode)"),
    ],
)
def test_bad_snapshots(text, message):
    with pytest.raises(SlurmError) as err:
        loads(text, "snap.json")
    assert message in str(err.value)


MIXED_SNAPSHOT = Path(__file__).resolve().parents[1] / "data" / "snapshots" / "mixed-16x8.json"
NEGATIVE = "is negative: Slurm's whole numbers (counts, sizes, times) are never below 0"


@pytest.mark.parametrize("field, value, message", [
    ("nodes.0.gpus", "eight", 'state.nodes[0].gpus: expected a whole number, got "eight"'),
    ("nodes.0.gpus", None, "state.nodes[0].gpus: expected a whole number, got null"),
    ("nodes.0.gpus", 8.5, "state.nodes[0].gpus: expected a whole number, got 8.5"),
    ("nodes.0.gpus", 10**30, "state.nodes[0].gpus: 1000000000000000000000000000000 is out of range: Slurm's "
                             "numbers fit in 64 bits"),
    ("nodes.0.gpus", -3, f"state.nodes[0].gpus: -3 {NEGATIVE}"),
    ("nodes.0.gpus_used", -1, f"state.nodes[0].gpus_used: -1 {NEGATIVE}"),
    ("jobs.0.gpus_alloc", {"node01": -2}, f"state.jobs[0].gpus_alloc.node01: -2 {NEGATIVE}"),
    ("jobs.0.start_time", -5, f"state.jobs[0].start_time: -5 {NEGATIVE}"),
    ("jobs.0.time_limit_s", -60, f"state.jobs[0].time_limit_s: -60 {NEGATIVE}"),
    ("jobs.0.priority", -1, f"state.jobs[0].priority: -1 {NEGATIVE}"),
    ("nodes.0.partitions", "gpu", 'state.nodes[0].partitions: expected a list, got "gpu"'),
    ("nodes.0.flags", [1], "state.nodes[0].flags[0]: expected a string, got 1"),
    ("jobs.0.id", 1, "state.jobs[0].id: expected a string, got 1"),
    ("jobs.0.priority", "high", 'state.jobs[0].priority: expected a whole number, got "high"'),
    ("jobs.0.held", 1, "state.jobs[0].held: expected true or false, got 1"),
    ("jobs.0.gpus_per_node", True, "state.jobs[0].gpus_per_node: expected a whole number, got true"),
    ("jobs.0.gpus_alloc", {"node01": "2"}, 'state.jobs[0].gpus_alloc.node01: expected a whole number, got "2"'),
    ("jobs.0", [], "state.jobs[0]: expected an object, got []"),
    ("version", None, "state.version: expected a string, got null"),
    ("read_at", "nan", 'state.read_at: expected a number, got "nan"'),
    ("read_at", 1e20, "state.read_at: 1e+20 is out of range: Slurm's numbers fit in 64 bits"),
    ("read_at", 1e15, "state.read_at: 1000000000000000.0 is not a time (seconds since 1970)"),
])
def test_a_snapshot_field_of_the_wrong_type_is_named(field, value, message):
    doc = json.loads(MIXED_SNAPSHOT.read_text())
    *path, last = field.split(".")
    target = doc["state"]
    for key in path:
        target = target[int(key) if key.isdigit() else key]
    target[int(last) if last.isdigit() else last] = value
    with pytest.raises(SlurmParseError) as err:
        loads(json.dumps(doc), "snap.json")
    assert str(err.value) == f"snap.json: {message}"


def test_a_snapshot_reads_whole_numbers_as_floats_and_nulls_where_a_field_takes_them():
    doc = json.loads(MIXED_SNAPSHOT.read_text())
    doc["state"]["read_at"] = 1700000000
    doc["state"]["jobs"][0]["time_limit_s"] = None
    state = loads(json.dumps(doc))
    assert state.read_at == 1700000000.0 and isinstance(state.read_at, float)
    assert state.jobs[0].time_limit_s is None


def test_a_state_that_would_not_load_back_is_not_saved(tmp_path):
    """A read the loader refuses (a negative priority no parser is known to give) is named, not written: a snapshot
    saved is one that loads."""
    state = load(MIXED_SNAPSHOT)
    path = tmp_path / "snap.json"
    with pytest.raises(SlurmParseError) as err:
        save(replace(state, jobs=(replace(state.jobs[0], priority=-1), *state.jobs[1:])), path)
    assert str(err.value) == f"the state read: state.jobs[0].priority: -1 {NEGATIVE}" and not path.exists()
    save(state, path)
    assert load(path) == state


def test_snapshot_file_missing(tmp_path):
    with pytest.raises(SlurmError, match="cannot read snapshot"):
        load(tmp_path / "nope.json")


def test_a_snapshot_not_in_utf8_is_named(tmp_path):
    path = tmp_path / "bin.json"
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(SlurmParseError) as err:
        load(path)
    assert str(err.value) == f"{path}: not a snapshot: not UTF-8 text (at byte 0)"


def test_snapshot_is_plain_sorted_json(mixed):
    text = dumps(CliBackend(runner=mixed).read_state())
    assert '"kind": "compass-slurm-snapshot"' in text and '"flags": [\n' in text


def test_marker_comment_keeps_the_users_comment():
    assert marker_comment(True, "my run") == "compass:migratable my run"
    assert marker_comment(False) == "compass"
    assert marker_comment(False, "x", requeue=True) == "compass compass:requeue x"
    assert marker_comment(False, "compass") == "compass"  # the user's own marker is not doubled
    assert marker_comment(True, "compass,nightly", leased=True) == "compass:migratable compass:leased compass,nightly"


@pytest.mark.parametrize("comment, modes", [
    ("compass", set()),
    ("compass:migratable run", {"marker", "requeue"}),
    ("compass compass:requeue", {"requeue"}),         # Slurm's own --requeue, as the hook or wrapper saw it
    ("compass:requeue", {"requeue"}),                 # not managed, but migratable where adopted
])
def test_which_jobs_may_migrate_under_each_mode(comment: str, modes: set[str]) -> None:
    job = SlurmJob(id="7", user="u", state="RUNNING", partition="gpu", comment=comment)
    assert {mode for mode in ("marker", "requeue", "never") if job.may_migrate(mode)} == modes
    assert job.managed == (comment != "compass:requeue")


def test_the_translator_applies_the_migratable_mode(mixed):
    state = CliBackend(runner=mixed).read_state()
    requeue = [replace(j, comment="compass compass:requeue") if j.pending else j for j in state.jobs]
    state = replace(state, jobs=tuple(requeue))
    for mode, expect in (("marker", False), ("requeue", True), ("never", False)):
        pending = Translator(state, migratable=mode).observe().pending
        assert pending and all(p.job.migratable is expect for p in pending), mode


def test_a_job_at_another_priority_is_the_same_job_but_its_priority():
    job = SlurmJob("7_2", "u", "PENDING", "gpu", ("n1",), {"n1": 2}, 2, gpus_per_node=1, comment="compass",
                   priority=5, time_limit_s=60, array_job="7", exclusive=True, required_nodes=("n1", "n2"))
    assert job.with_priority(9) == replace(job, priority=9) and job.priority == 5
