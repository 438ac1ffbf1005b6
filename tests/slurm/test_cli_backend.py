"""The CLI backend on output recorded from the dev cluster (tests/data/slurm/record.py), on every release recorded."""

import logging
import sys

import pytest

from compass_slurm.slurm.cli_backend import CliBackend
from compass_slurm.slurm.errors import SlurmCommandError, SlurmParseError

#: 26.05: which jobs are --exclusive, one line per array element
EXCLUSIVE = ["squeue", "--noheader", "--array", "--states=all", "--Format=JobArrayID:|,Exclusive:|"]
TOPOLOGY = ["scontrol", "show", "topology"]


def json_read(release: str) -> list[list[str]]:
    """One read's commands, jobs before nodes (Backend.read_state says why): 23.02 and later need --Node for one
    sinfo record per node, 26.05 asks squeue which jobs are --exclusive (its squeue --json no longer says)."""
    return [
        ["scontrol", "--version"],
        ["squeue", "--json"],
        *([EXCLUSIVE] if release >= "26.05" else []),
        ["sinfo", "--json"] if release == "22.05" else ["sinfo", "--Node", "--json"],
        ["scontrol", "show", "partition", "--oneliner"],
        ["scontrol", "show", "reservation", "--oneliner"],
        TOPOLOGY,
    ]


TEXT_READ = [
    ["scontrol", "show", "job", "--details", "--oneliner"],
    ["scontrol", "show", "node", "--details", "--oneliner"],
    ["scontrol", "show", "partition", "--oneliner"],
    ["scontrol", "show", "reservation", "--oneliner"],
    TOPOLOGY,
]


def test_one_call_per_kind_with_json(mixed):
    backend = CliBackend(runner=mixed)
    backend.read_state()
    assert mixed.calls == json_read(mixed.release)
    assert backend.text_reasons == {}
    mixed.calls.clear()
    backend.read_state()
    assert mixed.calls == json_read(mixed.release)[1:-1]  # the version is asked once, the topology once a minute


def test_text_fallback_reads_the_same_state(mixed):
    json_state = CliBackend(runner=mixed).read_state()
    mixed.calls.clear()
    text_state = CliBackend(runner=mixed, json=False).read_state()
    assert mixed.calls == [["scontrol", "--version"], *TEXT_READ]
    assert text_state.nodes == json_state.nodes
    assert text_state.jobs == json_state.jobs
    assert text_state.partitions == json_state.partitions


def test_versions_without_json_use_text(mixed):
    mixed.override["scontrol --version"] = (0, "slurm 20.11.9\n", "")
    backend = CliBackend(runner=mixed)
    state = backend.read_state()
    assert not backend.uses_json
    assert state.version == "20.11.9"
    assert mixed.calls[1:] == TEXT_READ


@pytest.mark.parametrize("use_json", [True, False])
def test_nodes(mixed, use_json):
    state = CliBackend(runner=mixed, json=use_json).read_state()
    assert state.version == {"22.05": "22.05.8", "23.11": "23.11.4", "24.11": "24.11.5", "25.11": "25.11.2",
                             "26.05": "26.05.5"}[mixed.release]
    assert [n.name for n in state.nodes] == [f"node{i:02d}" for i in range(1, 17)]
    assert all(n.gpus == 8 and n.cpus == 32 and n.memory_mb == 256000 for n in state.nodes)
    assert all(n.partitions == ("gpu",) for n in state.nodes)
    used = {n.name: n.gpus_used for n in state.nodes if n.gpus_used}
    assert used == {"node01": 8, "node02": 5, "node14": 1, "node16": 8}
    node01 = state.node("node01")
    assert (node01.state, node01.cpus_alloc, node01.memory_alloc_mb) == ("mixed", 7, 25000)
    drained, down, maint, draining = (state.node(n) for n in ("node10", "node11", "node12", "node14"))
    assert (drained.state, drained.flags) == ("idle", {"DRAIN"}) and drained.reason == "maintenance window"
    assert not drained.available
    assert down.state == "down" and down.reason == "broken" and not down.available
    assert {"MAINTENANCE", "RESERVED"} <= maint.flags and maint.reserved and not maint.available
    assert draining.state == "mixed" and draining.flags == {"DRAIN"} and not draining.available
    assert state.node("node13").available  # its reservation starts later
    assert state.node("node03").available and state.node("node03").gpus_free == 8


@pytest.mark.parametrize("use_json", [True, False])
def test_jobs(mixed, use_json):
    state = CliBackend(runner=mixed, json=use_json).read_state()
    jobs = {j.id: j for j in state.jobs}
    assert sorted(jobs) == sorted(["1", "2", "3", "4", "5", "6_1", "6_2", "7", "9", "10", "11_[1-3]"])
    two = jobs["1"]
    assert (two.state, two.user, two.partition, two.nodes) == ("RUNNING", "root", "gpu", ("node01",))
    assert two.gpus_alloc == {"node01": 2} and two.gpus_per_job == 2 and two.gpus_requested == 2
    multi = jobs["2"]
    assert multi.gpus_alloc == {"node01": 3, "node02": 3}
    # time limits (the backfill's run-time estimates): --time=365-00:00:00 on the running jobs, none pending
    assert {j.time_limit_s for j in jobs.values() if j.running} == {365 * 86400}
    assert two.start_time >= two.submit_time > 0 and jobs["9"].time_limit_s is None
    assert (multi.num_nodes, multi.gpus_per_node, multi.gpus_requested) == (2, 3, 6)
    marked = jobs["3"]
    assert marked.managed and marked.migratable and marked.comment == "compass:migratable"
    assert (marked.cpus, marked.memory_per_node_mb, marked.memory_per_cpu_mb) == (4, 1000, None)
    assert jobs["4"].required_nodes == ("node16",) and jobs["4"].gpus_alloc == {"node16": 8}
    assert jobs["5"].gpus_requested == 0 and jobs["5"].gpus_alloc == {}
    held = jobs["9"]
    assert held.pending and held.held and held.reason == "JobHeldUser" and held.nodes == ()
    assert held.managed and not held.migratable and held.gpus_requested == 8
    waiting = jobs["10"]
    # 23.11.4 without accounting storage: its main scheduler's association check fails ("has invalid account",
    # reason InvalidAccount) on every pass, which leaves the starting to the backfill; between them, None (read as "")
    assert waiting.pending and not waiting.held and waiting.reason == ("" if mixed.release == "23.11"
                                                                       else "Resources")
    array = jobs["11_[1-3]"]
    assert (array.gpus_per_task, array.tasks, array.gpus_requested, array.held) == (1, 2, 2, True)
    assert all(not j.managed for j in state.jobs if j.id not in ("3", "9"))


def test_partitions_and_reservations(mixed):
    state = CliBackend(runner=mixed).read_state()
    (gpu,) = state.partitions
    assert (gpu.name, gpu.state, gpu.default, len(gpu.nodes)) == ("gpu", "UP", True, 16)
    maint, later = state.reservations
    assert (maint.name, maint.nodes, maint.active, "MAINT" in maint.flags) == ("maint1", ("node12",), True, True)
    assert (later.name, later.nodes, later.active, later.users) == ("later", ("node13",), False, ("root",))


@pytest.mark.parametrize("use_json", [True, False])
def test_typed_gres(typed, use_json):
    state = CliBackend(runner=typed, json=use_json).read_state()
    assert {n.name: (n.gpus, n.gpus_used, n.gpu_type) for n in state.nodes} == {
        "node01": (4, 3, "a100"), "node02": (4, 2, "a100"), "node03": (4, 2, "a100"), "node04": (4, 0, "a100"),
    }
    one, two = state.jobs
    assert (one.gpu_type, one.gpus_per_job, one.gpus_alloc) == ("a100", 3, {"node01": 3})
    assert (two.gpu_type, two.gpus_per_node, two.gpus_alloc) == ("a100", 2, {"node02": 2, "node03": 2})


def test_job_state_polls_squeue(mixed):
    assert CliBackend(runner=mixed).job_state("1") == "RUNNING"
    assert mixed.calls == [["squeue", "--noheader", "--jobs=1", "--format=%T"]]
    assert CliBackend(runner=mixed).job_state("424242") is None


@pytest.mark.parametrize(
    "kind, output, message",
    [
        ("jobs", '{"jobs": [{"job_id": 1', "squeue --json: not JSON"),
        ("jobs", '{"meta": {}}', "no 'jobs' list"),
        ("jobs", '{"jobs": [{"job_id": "x"}]}', "field 'job_id' is not a number"),
        ("jobs", '{"jobs": [{"job_id": 5, "nodes": "n[1-"}]}', "job 5: hostlist 'n[1-'"),
        ("jobs", '{"jobs": [{"job_id": 5, "job_state": "RUNNING", "nodes": "n[1-2]",'
         ' "gres_detail": ["gpu:1"]}]}', "job 5: 1 gres_detail entries for 2 nodes"),
        ("jobs", '{"errors": [{"error": "boom"}], "jobs": []}', "Slurm reported errors"),
        ("nodes", '{"nodes": [{"name": "n1", "state": "sleepy", "cpus": 1}]}', "node n1: no base state in 'sleepy'"),
        ("nodes", '{"nodes": [{"name": "n1", "state": "idle", "cpus": 1, "gres": "gpu:x:y:z"}]}',
         "node n1: GRES 'gpu:x:y:z'"),
        ("nodes", '[1, 2]', "expected a JSON object"),
        ("nodes", '{"sinfo": [{"nodes": {"nodes": ["n1", "n2"]}, "node": {"state": ["MIXED"]},'
         ' "cpus": {"allocated": 3, "minimum": 8, "maximum": 8}}]}', "one record for 2 nodes with allocations"),
        ("nodes", '{"sideways": []}', "no 'nodes' list"),
    ],
)
def test_a_json_document_it_cannot_read_falls_back_to_text_for_that_command(mixed, caplog, kind, output, message):
    expected = CliBackend(runner=mixed).read_state()
    backend = CliBackend(runner=mixed)
    argv = backend.read_commands()[kind]
    mixed.override[" ".join(argv)] = (0, output, "")
    with caplog.at_level(logging.WARNING, logger="compass.slurm"):
        state = backend.read_state()
        mixed.calls.clear()
        backend.read_state()
    text = {"nodes": ["scontrol", "show", "node", "--details", "--oneliner"],
            "jobs": ["scontrol", "show", "job", "--details", "--oneliner"]}[kind]
    assert text in mixed.calls and argv not in mixed.calls  # the second read asks text only
    other = "jobs" if kind == "nodes" else "nodes"
    assert backend.read_commands()[other] == CliBackend(runner=mixed).read_commands()[other]  # the other kind keeps JSON
    assert state.nodes == expected.nodes and state.jobs == expected.jobs
    assert list(backend.text_reasons) == [kind] and message in backend.text_reasons[kind]
    (warning,) = [r.getMessage() for r in caplog.records]
    assert warning.startswith(f"cannot read {' '.join(argv)} (") and message in warning


@pytest.mark.parametrize(
    "command, output, message",
    [
        ("scontrol show partition --oneliner", "garbage here\n", "line 1 does not start with PartitionName="),
        ("scontrol --version", "slurm\n", "scontrol --version: cannot read"),
    ],
)
def test_text_it_cannot_read_raises_a_parse_error(mixed, command, output, message):
    mixed.override[command] = (0, output, "")
    with pytest.raises(SlurmParseError) as err:
        CliBackend(runner=mixed).read_state()
    assert message in str(err.value)


def test_truncated_text_names_the_line(mixed):
    lines = mixed.text("jobs.txt").splitlines()
    lines[2] = lines[2][:40]
    mixed.override["scontrol show job --details --oneliner"] = (0, "\n".join(lines), "")
    with pytest.raises(SlurmParseError, match="line 3 .*missing field 'JobState'"):
        CliBackend(runner=mixed, json=False).read_state()


def test_failing_command_raises_a_command_error(mixed):
    backend = CliBackend(runner=mixed)
    command = " ".join(backend.read_commands()["nodes"])
    mixed.override[command] = (1, "", "slurm_load_node error: Unable to contact slurm controller")
    with pytest.raises(SlurmCommandError, match=rf"{command}: exit 1: slurm_load_node error"):
        backend.read_state()
    assert backend.text_reasons == {}  # a failing command is no reason to leave JSON


def test_a_command_s_output_is_read_whole_and_as_printed():
    from compass_slurm.slurm.cli_backend import run_process

    # 1 MB through the file (not a pipe); a byte that is not UTF-8 (a comment in Latin-1) reads as U+FFFD
    # instead of failing the read, and a carriage return in a comment stays in its line (no newline translation)
    line = b"JobId=7 Comment=caf\xe9\rnext\n"
    code, out, err = run_process([sys.executable, "-c", f"import sys; sys.stdout.buffer.write({line!r} * 40000); "
                                                        "sys.stderr.buffer.write(b'warn \\xff'); sys.exit(3)"], 30)
    assert (code, err) == (3, "warn \ufffd")
    assert out == "JobId=7 Comment=caf\ufffd\rnext\n" * 40000
    assert out.split("\n")[1] == "JobId=7 Comment=caf\ufffd\rnext"


def test_missing_binary_and_timeout_are_command_errors():
    from compass_slurm.slurm.cli_backend import run_process

    with pytest.raises(SlurmCommandError, match="cannot run"):
        run_process(["/nonexistent/sinfo"], 1.0)
    with pytest.raises(SlurmCommandError, match="no answer within 0.1 s"):
        run_process(["sleep", "5"], 0.1)


def test_no_room_for_a_command_s_output_is_a_command_error(tmp_path, monkeypatch):
    from compass_slurm.slurm.cli_backend import run_process

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "gone"))
    with pytest.raises(SlurmCommandError, match=r"squeue: no temporary file for its output: .*gone"):
        run_process(["squeue"], 1.0)


#: ``squeue --noheader --states=PENDING,RUNNING,COMPLETING --format=%i %t %k`` on the dev cluster (22.05), with the hook
LOOK = "19 PD compass nightly\n20 PD compass:migratable\n22_[0-3] PD compass\n23 PD compass compass:requeue\n" \
       "24 PD a,compass;b\n21 PD (null)\n25 PD compass:requeue\n26 PD compassion\n30 R compass\n31 R (null)\n" \
       "22_4 CG compass\n"
LOOK_ARGV = ["squeue", "--noheader", "--states=PENDING,RUNNING,COMPLETING", "--format=%i %t %k"]
VERSION_ARGV = ["scontrol", "--version"]
#: the same jobs from 24.11 on: ``squeue --noheader --only-job-state --states=PENDING,RUNNING,COMPLETING
#: --format=%i %t`` (as on the dev cluster: no comment)
LOOK_STATES = "19 PD\n20 PD\n22_[0-3] PD\n23 PD\n24 PD\n21 PD\n25 PD\n26 PD\n30 R\n31 R\n22_4 CG\n"
LOOK_STATES_ARGV = ["squeue", "--noheader", "--only-job-state", "--states=PENDING,RUNNING,COMPLETING",
                    "--format=%i %t"]


def test_the_look_is_one_small_squeue(mixed):
    """Before 24.11 with the comments, whose marker tells the managed jobs; from 24.11 on ids and states alone
    (slurmctld sends them without packing each job whole): every pending job, which the daemon sorts out."""
    mixed.override[" ".join(LOOK_ARGV)] = (0, LOOK, "")
    mixed.override[" ".join(LOOK_STATES_ARGV)] = (0, LOOK_STATES, "")
    backend = CliBackend(runner=mixed)
    look, again = backend.look(), backend.look()
    states_only = mixed.release >= "24.11"
    argv = LOOK_STATES_ARGV if states_only else LOOK_ARGV
    assert mixed.calls == [VERSION_ARGV, argv, argv] and look == again  # the release asked once
    assert look.holding == {"30", "31", "22_4"}  # completing jobs still hold their GPUs
    if states_only:
        assert not look.comments and look.pending == {"19", "20", "21", "22_[0-3]", "23", "24", "25", "26"}
    else:
        assert look.comments and look.pending == {"19", "20", "22_[0-3]", "23", "24"}


def test_the_look_failing_is_a_command_error(mixed):
    with pytest.raises(SlurmCommandError, match="squeue --noheader (--only-job-state )?--states=PENDING,RUNNING,COM"):
        CliBackend(runner=mixed).look()


def test_doctor_says_which_commands_it_reads_with_and_why(mixed):
    from compass_slurm.cli.doctor import Doctor

    doctor = Doctor(None)
    doctor.backend = CliBackend(runner=mixed)
    doctor.backend.read_state()
    nodes = " ".join(doctor.backend.read_commands()["nodes"])
    version = doctor.backend.version()
    assert doctor.json_support() == f"JSON: nodes by {nodes}, jobs by squeue --json (Slurm {version})"
    if mixed.release < "24.11":
        doctor.backend = CliBackend(runner=mixed, lines=True)
        assert doctor.json_support() == (
            f"JSON: nodes by {nodes}, jobs by scontrol show job --details --oneliner, each line parsed once (squeue "
            f"--json in a cycle with a line it cannot trust) (Slurm {version})")
        broken = mixed.text("jobs.txt").replace(" Priority=", " Priority=x", 1)
        mixed.override["scontrol show job --details --oneliner"] = (0, broken, "")
        doctor.backend.read_state()
        assert doctor.json_support() == (
            f"JSON: nodes by {nodes}, jobs by squeue --json (not by line: {doctor.backend.lines_reason}) "
            f"(Slurm {version})")
        del mixed.override["scontrol show job --details --oneliner"]
    mixed.override["squeue --json"] = (0, '{"jobs": 7}', "")
    doctor.backend = CliBackend(runner=mixed)
    doctor.backend.read_state()
    assert doctor.json_support() == (
        f"JSON where readable: nodes by {nodes}, jobs by scontrol show job --details --oneliner (Slurm {version}; "
        "text because jobs: squeue --json: no 'jobs' list in the document)")


@pytest.mark.parametrize("mixed", ["26.05"], indirect=True)
def test_on_26_05_the_exclusive_jobs_come_from_squeue(mixed):
    mixed.override[" ".join(EXCLUSIVE)] = (0, "1|NO|\n2|NODE|\n11_1|NODE|\n11_2|NODE|\n11_3|NODE|\n6_1|USER|\n", "")
    jobs = {j.id: j for j in CliBackend(runner=mixed).read_state().jobs}
    assert {j for j, job in jobs.items() if job.exclusive} == {"2", "11_[1-3]"}
    mixed.override[" ".join(EXCLUSIVE)] = (0, "junk\n", "")
    with pytest.raises(SlurmParseError, match="line 1: cannot read 'junk'"):
        CliBackend(runner=mixed).read_state()


def test_on_26_05_an_exclusive_array_with_tasks_split_off_stays_exclusive(exclusive_arrays):
    # Recorded: array 1 (--exclusive, 4 of 6 tasks started, 1_[5-6] waiting), array 6 (--exclusive, held, task 2
    # changed: 6_2 and 6_[1,3]), array 8 (held, shares). Folded, squeue names them 1_[1-6] and 6_[1-3]: no record.
    slurm = exclusive_arrays
    jobs = {j.id: j for j in CliBackend(runner=slurm).read_jobs()}
    assert slurm.calls == [["scontrol", "--version"], ["squeue", "--json"], EXCLUSIVE]
    assert sorted(j for j, job in jobs.items() if job.exclusive) == ["1_1", "1_2", "1_3", "1_4", "1_[5-6]", "6_2",
                                                                     "6_[1,3]"]
    assert not jobs["8_[1-2]"].exclusive
