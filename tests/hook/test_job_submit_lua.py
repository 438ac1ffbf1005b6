"""etc/slurm/job_submit.lua's rules, in a real Lua 5.1 against a fake ``slurm`` table (see conftest)."""

from __future__ import annotations

import pytest

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hookdriver import LUA, NOW, Hook  # noqa: E402  (no conftest here: other folders import theirs by name)

pytestmark = pytest.mark.lua


@pytest.fixture
def hook(tmp_path: Path) -> Hook:
    if not LUA:
        pytest.fail("lua5.1 is missing: run ./scripts/bootstrap (it installs Debian's lua5.1)")
    return Hook(tmp_path)

MANAGED = {"comment": "compass", "begin_time": str(NOW + 60)}


@pytest.mark.parametrize("fields", [
    {"tres_per_job": "gres:gpu:2"},                         # --gpus=2
    {"tres_per_node": "gres:gpu:1"},                        # --gres=gpu:1, --gpus-per-node=1
    {"tres_per_node": "gres:gpu"},                          # --gres=gpu
    {"tres_per_node": "gres:gpu:2,gres:gpu:1"},
    {"tres_per_node": "gres:nvme:1,gres:gpu:a100:2"},
    {"tres_per_task": "gres:gpu:1", "num_tasks": 2},        # --gpus-per-task
    {"tres_per_job": "gres:gpu:a100:2"},                    # --gpus=a100:2
    {"tres_per_job": "gres/gpu:4"},                         # 24.11 and 26.05 write gres/
    {"tres_per_task": "gres/gpu=1"},                        # 24.11: --gpus-per-task
    {"tres_per_task": "cpu=2,gres/gpu:a100=1"},
    {"tres_per_node": "gres:gpu:a100"},                     # a type alone: one GPU
    {"tres_per_job": "gres:gpu:1", "array_inx": "0-3"},     # arrays: every task
    {"tres_per_job": "gres:gpu:1", "priority": 0},          # --hold: runs when released
    {"tres_per_job": "gres:gpu:1", "shared": 0},            # --exclusive: a node of its own
    {"tres_per_job": "gres:gpu:1", "begin_time": NOW},      # --begin=now
    {"tres_per_job": "gres:gpu:1", "requeue": 0},           # --no-requeue
])
def test_every_form_of_gpu_request_is_managed(hook: Hook, fields: dict) -> None:
    call = hook.one(**fields)
    assert call.rc == 0 and call.sets == MANAGED
    assert len(call.logs) == 2 and call.logs[0] == "compass: daemon alive: GPU jobs are managed"
    assert call.logs[1].startswith("compass: job job of uid 1000 (") and call.logs[1].endswith(" managed: lease 60 s")


@pytest.mark.parametrize("fields", [{}, {"tres_per_node": "gres:gpu:0"}, {"tres_per_node": "gres:nvme:2"},
                                    {"tres_per_node": "gres:gpumem:4"}, {"tres_per_job": ""}])
def test_jobs_without_gpus_are_untouched_and_unlogged(hook: Hook, fields: dict) -> None:
    call = hook.one(**fields)
    assert (call.rc, call.opened, call.sets, call.logs) == (0, 0, {}, [])


@pytest.mark.parametrize("value", ["gres:gpu:+1", "gres:gpu:", "gres:gpu:1k", "gres:gpu:a:b:2", "gpu:x y:1",
                                   "gres/gpu=", "gres/gpu=x"])
def test_an_unreadable_gpu_request_is_left_unchanged_with_one_log_line(hook: Hook, value: str) -> None:
    call = hook.one(tres_per_node=value)
    assert call.rc == 0 and call.sets == {}
    assert call.logs == [f"compass: GPU request tres_per_node={value} not understood: job job left to Slurm unchanged"]


def test_the_users_comment_stays_after_the_marker(hook: Hook) -> None:
    call = hook.one(tres_per_job="gres:gpu:1", comment="nightly run")
    assert call.sets == {"comment": "compass nightly run", "begin_time": str(NOW + 60)}


def test_an_explicit_requeue_adds_the_requeue_token(hook: Hook) -> None:
    call = hook.one(tres_per_job="gres:gpu:1", requeue=1, comment="x")
    assert call.sets == {"comment": "compass compass:requeue x", "begin_time": str(NOW + 60)}


def test_a_comment_with_no_room_for_the_marker_is_left_to_slurm(hook: Hook) -> None:
    """Slurm refuses a comment past 1,024 bytes: the marker must not be what makes it so."""
    longest = "x" * (1024 - len("compass "))
    assert hook.one(tres_per_job="gres:gpu:1", comment=longest).sets["comment"] == "compass " + longest
    call = hook.one(tres_per_job="gres:gpu:1", comment=longest + "y")
    assert call.rc == 0 and call.sets == {}
    assert call.logs[-1] == ("compass: job job of uid 1000 (tres_per_job=gres:gpu:1) left to Slurm: its comment "
                             "leaves no room for the marker (Slurm takes 1024 bytes)")


def test_an_interactive_allocation_marked_by_hand_gets_the_lease_past_its_begin(hook: Hook) -> None:
    """The wrapper submits batch jobs only: a marked allocation's begin is the user's, whatever its distance."""
    call = hook.one(tres_per_job="gres:gpu:1", comment="compass", begin_time=NOW + 60, script=None)
    assert call.sets == {"begin_time": str(NOW + 120)}


@pytest.mark.parametrize("comment, begin, sets", [
    ("compass:migratable", NOW + 50, {}),                                       # the wrapper's job
    ("compass:migratable", NOW + 70, {}),                                       # its clock 10 s ahead
    ("compass compass:leased", NOW + 7200, {}),                    # the wrapper's, past the user's own begin
    ("compass mine", 0, {"begin_time": str(NOW + 60)}),                         # the user's own token
    ("a,compass:migratable", 0, {"begin_time": str(NOW + 60)}),
])
def test_an_already_marked_job_keeps_its_comment(hook: Hook, comment: str, begin: int, sets: dict) -> None:
    call = hook.one(tres_per_job="gres:gpu:1", comment=comment, begin_time=begin)
    assert call.sets == sets and call.logs[-1].endswith(", already marked")


@pytest.mark.parametrize(("comment", "later"), [("compass:migratable", 120), ("compass", 12), ("compass", 49)])
def test_a_later_begin_marked_by_hand_gets_the_lease_past_it(hook: Hook, comment: str, later: int) -> None:
    """The user's own marker and --begin: the daemon places a job from its begin time less the lease, so without
    the lease past it the job would start up to a lease before the user's begin."""
    call = hook.one(tres_per_job="gres:gpu:1", comment=comment, begin_time=NOW + later)
    assert call.sets == {"begin_time": str(NOW + later + 60)}
    assert call.logs[-1].endswith(f", after the user's begin in {later} s")


@pytest.mark.parametrize("fields, why", [
    ({"req_nodes": "node03"}, "user nodelist node03"),
    ({"reservation": "maint"}, "runs in reservation maint"),
    ({"het_job_offset": 0}, "heterogeneous job component"),
    ({"shared": 2}, "exclusive mode 2 (user, mcs or topo) depends on other jobs' owners"),
])
def test_rules_that_leave_a_gpu_job_to_slurm(hook: Hook, fields: dict, why: str) -> None:
    call = hook.one(tres_per_job="gres:gpu:2", **fields)
    assert call.rc == 0 and call.sets == {}
    assert call.logs[-1] == f"compass: job job of uid 1000 (tres_per_job=gres:gpu:2) left to Slurm: {why}"


@pytest.mark.parametrize("fields", [{"tres_per_socket": "gres:gpu:1"}, {"tres_per_socket": "gres/gpu=1"},
                                    {"tres_per_node": "gres:gpu:4", "tres_per_socket": "gres:gpu:2"}])
def test_gpus_per_socket_are_left_to_slurm(hook: Hook, fields: dict) -> None:
    """The daemon reads no sockets: marked, such a job would wait out its lease unplaced."""
    call = hook.one(**fields)
    assert call.rc == 0 and call.sets == {}
    assert call.logs[-1].endswith(" left to Slurm: --gpus-per-socket is Slurm's to place")


def test_interactive_allocations_get_the_short_lease(hook: Hook) -> None:
    call = hook.one(tres_per_job="gres:gpu:1", script=None, name="interactive")
    assert call.sets == {"comment": "compass", "begin_time": str(NOW + 4)}
    assert call.logs[-1].endswith("managed: lease 4 s, interactive")


def test_interactive_allocations_can_be_left_to_slurm(hook: Hook) -> None:
    files = {str(hook.config_path): hook.config(interactive="unmanaged"), str(hook.anchors_path): hook.anchors()}
    call = hook.run([{"job": {"tres_per_job": "gres:gpu:1", "script": None}}], files=files)[0]
    assert call.sets == {} and call.logs[-1].endswith("left to Slurm: interactive allocation (interactive = unmanaged)")


def test_partitions_limit_what_is_managed(hook: Hook) -> None:
    files = {str(hook.config_path): hook.config(partitions="gpu, a100"), str(hook.anchors_path): hook.anchors()}
    parts = {"cpu": {"flag_default": 1}, "gpu": {"flag_default": 0}}
    calls = hook.run([
        {"job": {"tres_per_job": "gres:gpu:1", "partition": "a100"}, "parts": parts},
        {"job": {"tres_per_job": "gres:gpu:1", "partition": "cpu,gpu"}, "parts": parts},
        {"job": {"tres_per_job": "gres:gpu:1", "partition": "cpu"}, "parts": parts},
        {"job": {"tres_per_job": "gres:gpu:1"}, "parts": parts},                      # the default: cpu
        {"job": {"tres_per_job": "gres:gpu:1"}, "parts": {"gpu": {"flag_default": 1}}},
    ], files=files)
    assert [bool(c.sets) for c in calls] == [True, True, False, False, True]
    assert calls[3].logs[-1].endswith("left to Slurm: partition default is not managed")


GPU = {"tres_per_job": "gres:gpu:1"}


@pytest.mark.parametrize("config, problem", [
    (None, "no usable config ("),
    ("anchors = /x\nstaleness 6\n", "line 2: not `key = value`: staleness 6"),
    ("anchors = /x\nstaleness = 6\nlease = 60\nmarker = compass\nspeed = 9\n", "line 5: unknown setting speed"),
    ("anchors = /x\nstaleness = soon\n", "line 2: staleness must be a number of seconds, got soon"),
    ("anchors = /x\nstaleness = 6\nlease = 60\n", "missing setting marker"),
    ("anchors = /x\nstaleness = 6\nlease = 60\nmarker = compass\ninteractive = maybe\n",
     "line 5: interactive must be managed or unmanaged, got maybe"),
])
def test_a_bad_config_changes_nothing_and_says_so_once(hook: Hook, config: str | None, problem: str) -> None:
    files = {str(hook.config_path): config if config is not None else False, str(hook.anchors_path): hook.anchors()}
    calls = hook.run([{"job": GPU}, {"job": GPU, "now": NOW + 1}, {"job": GPU, "now": NOW + 11}], files=files)
    assert all(c.rc == 0 and c.sets == {} for c in calls)
    logs = [line for c in calls for line in c.logs]
    assert len(logs) == 1 and problem in logs[0] and logs[0].endswith(": GPU jobs are left to Slurm unchanged")


@pytest.mark.parametrize("anchors, problem", [
    (False, "anchors file unreadable ("),
    ("", "is not a compass-anchors v1 file"),
    ("# compass-anchors v2 generated=1\n", "is not a compass-anchors v1 file"),
    ("garbage\n", "is not a compass-anchors v1 file"),
    (f"# compass-anchors v1 generated={NOW - 7} policy=compass cycle=1\n", "daemon not alive (anchors generated 7 s ago"),
    (f"# compass-anchors v1 generated={NOW + 60} policy=compass cycle=1\n", "daemon not alive (anchors generated -60 s"),
])
def test_without_a_live_daemon_nothing_changes_and_it_says_so_once(hook: Hook, anchors, problem: str) -> None:
    files = {str(hook.config_path): hook.config(), str(hook.anchors_path): anchors}
    calls = hook.run([{"job": GPU}, {"job": GPU}, {"job": {**GPU, "script": None}}], files=files)
    assert all(c.rc == 0 and c.sets == {} for c in calls)
    logs = [line for c in calls for line in c.logs]
    assert len(logs) == 1 and problem in logs[0], logs


def test_unreadable_anchors_a_directory(hook: Hook) -> None:
    hook.anchors_path.mkdir()
    calls = hook.run([{"job": GPU}, {"job": GPU}], files={str(hook.config_path): hook.config()})
    assert all(c.sets == {} for c in calls)
    assert [line for c in calls for line in c.logs] == [
        f"compass: anchors file unreadable ({hook.anchors_path}: Is a directory): GPU jobs are left to Slurm unchanged"]


def test_the_daemon_going_stale_and_coming_back(hook: Hook) -> None:
    path = str(hook.anchors_path)
    calls = hook.run([
        {"job": GPU, "now": NOW + 6},                                   # 6 s old: alive
        {"job": GPU, "now": NOW + 7},                                   # stale
        {"job": GPU, "now": NOW + 8},
        {"job": GPU, "now": NOW + 9, "files": {path: hook.anchors(NOW + 9)}},
    ])
    assert [bool(c.sets) for c in calls] == [True, False, False, True]
    assert calls[1].logs == ["compass: daemon not alive (anchors generated 7 s ago, staleness 6 s): "
                             "GPU jobs are left to Slurm unchanged"]
    assert calls[2].logs == [] and calls[3].logs[0] == "compass: daemon alive: GPU jobs are managed"


def test_at_most_one_file_read_per_submission_and_the_caches(hook: Hook) -> None:
    config, anchors = str(hook.config_path), str(hook.anchors_path)
    calls = hook.run([
        {"job": GPU},                                                   # both read when the script loaded
        {"job": GPU, "now": NOW + 1, "files": {config: hook.config(lease=30)}},  # anchors again, old config
        {"job": GPU, "now": NOW + 1},                                   # same second: nothing read
        {"job": GPU, "now": NOW + 10, "files": {anchors: hook.anchors(NOW + 10)}},  # the reading is too old
        {"job": GPU, "now": NOW + 10},                                  # config due: the new lease
        {"job": GPU, "now": NOW + 11, "files": {anchors: False}},       # the daemon is gone
        {"job": {}, "now": NOW + 12},                                   # no GPUs: reads nothing
    ])
    # the driver's own file writes do not count: they happen before each call
    assert [c.opened for c in calls] == [0, 1, 0, 1, 1, 1, 0]
    assert [c.sets.get("begin_time") for c in calls] == [
        str(NOW + 60), str(NOW + 61), str(NOW + 61), str(NOW + 70), str(NOW + 40), None, None]


def test_a_config_changed_while_the_daemon_is_not_alive_is_read_when_due(hook: Hook) -> None:
    """Its anchors path was wrong; the fixed config is read within CONFIG_TTL (it was never read again)."""
    bad, config = hook.root / "bad-anchors", str(hook.config_path)
    calls = hook.run([
        {"job": GPU},                                                   # both read at load: garbage anchors
        {"job": GPU, "now": NOW + 1, "files": {config: hook.config()}},  # not due: the old path's anchors
        {"job": GPU, "now": NOW + 10},                                  # config due: read, not the anchors
        {"job": GPU, "now": NOW + 11},                                  # the anchors of the fixed path
    ], files={config: hook.config(anchors=bad), str(bad): "garbage\n", str(hook.anchors_path): hook.anchors(NOW + 10)})
    assert [c.opened for c in calls] == [0, 1, 1, 1]
    assert [bool(c.sets) for c in calls] == [False, False, False, True]
    assert calls[3].logs[0] == "compass: daemon alive: GPU jobs are managed"


def test_a_config_that_appears_later_is_used_at_once(hook: Hook) -> None:
    config = str(hook.config_path)
    calls = hook.run([{"job": GPU}, {"job": GPU, "now": NOW + 1, "files": {config: hook.config()}}, {"job": GPU}],
                     files={str(hook.anchors_path): hook.anchors()})
    assert [c.opened for c in calls] == [0, 2, 0]  # the one submission that reads both files
    assert [bool(c.sets) for c in calls] == [False, True, True]


def test_an_internal_error_never_fails_the_submission(hook: Hook) -> None:
    call = hook.one(tres_per_job="gres:gpu:1", comment={"not": "a string"})
    assert call.rc == 0 and call.sets == {}
    assert call.logs[-1].startswith("compass: internal error (") and call.logs[-1].endswith(
        "): job left as it was submitted")


def test_the_config_compass_daemon_writes_is_one_the_hook_reads(hook: Hook) -> None:
    from compass_slurm.config import Config
    from compass_slurm.submit.hook import config_text

    text = config_text(Config(anchors=str(hook.anchors_path), lease=30, interval=2))
    files = {str(hook.config_path): text, str(hook.anchors_path): hook.anchors(NOW - 6)}
    calls = hook.run([{"job": GPU}, {"job": GPU, "now": NOW + 1}], files=files)
    assert calls[0].sets == {"comment": "compass", "begin_time": str(NOW + 30)}
    assert calls[1].sets == {}  # 7 s old: beyond 3 intervals of 2 s


@pytest.mark.parametrize("text", [
    "anchors = /x\nstaleness 6\n", "speed = 9\n", "anchors = /x\nstaleness = 0x10\n", "staleness = -1\n",
    "anchors = /x\nstaleness = 6\nlease = 60\n", "interactive = maybe\n", "marker = com pass\n",
    "anchors = /x\nstaleness = 6\nlease = 60\nmarker = compass\n",
])
def test_compass_doctor_reads_the_config_as_the_hook_does(hook: Hook, text: str) -> None:
    from compass_slurm.submit.hook import HookConfigError, parse_config

    try:
        parse_config(text)
        python = None
    except HookConfigError as err:
        python = str(err)
    files = {str(hook.config_path): text, str(hook.anchors_path): hook.anchors()}
    logs = hook.run([{"job": GPU}], files=files)[0].logs
    if python is None:
        assert not any("config" in line for line in logs), logs
    else:
        assert logs == [f"compass: config {hook.config_path} {python}: GPU jobs are left to Slurm unchanged"]


def test_log_lines_carry_no_control_characters_of_the_user(hook: Hook) -> None:
    call = hook.one(tres_per_job="gres:gpu:1", name="a\nlua: compass: forged")
    assert call.logs[-1].startswith("compass: job a?lua: compass: forged of uid 1000")


def test_a_users_later_begin_is_managed_from_its_begin_time(hook: Hook) -> None:
    call = hook.one(tres_per_job="gres:gpu:2", begin_time=NOW + 3600)
    assert call.sets == {"comment": "compass", "begin_time": str(NOW + 3660)}  # as the wrapper submits it
    assert call.logs[-1].endswith("managed: lease 3660 s, after the user's begin in 3600 s")

