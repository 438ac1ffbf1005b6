"""Request forms the translation must read as Slurm does: arrays, --exclusive, --mem-per-gpu, a later --begin."""

from __future__ import annotations

from dataclasses import replace

import pytest

from compass_slurm.slurm import translate
from compass_slurm.slurm.hostlist import HostlistError, expand_ranges
from compass_slurm.slurm.requests import Request, id_order, observed, request
from compass_slurm.slurm.state import SlurmJob, SlurmNode, SlurmPartition, SlurmState
from compass_slurm.slurm.translate import Translator

NOW = 1.0e9
LEASE = 60


def node(name: str, mem_alloc: int = 0, cpus_alloc: int = 0, gpus_used: int = 0) -> SlurmNode:
    return SlurmNode(name, "mixed" if cpus_alloc else "idle", frozenset(), ("gpu",), 8, gpus_used, None, 32,
                     cpus_alloc, 256000, mem_alloc)


def job(job_id: str, **kw) -> SlurmJob:
    fields = {"comment": "compass", "reason": "BeginTime", "gpus_per_node": 1, "eligible_time": int(NOW) + LEASE,
              "memory_per_cpu_mb": 8000, **kw}
    return SlurmJob(job_id, "alice", kw.pop("state", "PENDING"), "gpu", **{k: v for k, v in fields.items()
                                                                            if k != "state"})


def observe(jobs: list[SlurmJob], nodes: list[SlurmNode] | None = None) -> translate.Observation:
    nodes = nodes or [node(f"n{i}") for i in range(1, 5)]
    state = SlurmState(tuple(nodes), tuple(jobs), (SlurmPartition("gpu", tuple(n.name for n in nodes)),), (),
                       "22.05.8", NOW)
    return Translator(state, lease=LEASE).observe()


def test_a_pending_array_is_one_job_per_task():
    obs = observe([job("7_[0-2,5]", array_job="7", array_pending="0-2,5")])
    assert [p.job.id for p in obs.pending] == ["7_0", "7_1", "7_2", "7_5"]
    assert obs.queue_len == 4 and obs.pending_gpus == 4 and obs.skipped == {} and obs.waiting == {}


def test_tasks_split_off_by_slurm_and_those_still_in_the_array_record_all_count():
    jobs = [job("7_3", array_job="7"), job("7_[0-1]", array_job="7", array_pending="0-1")]
    assert sorted(p.job.id for p in translate.Translator(
        SlurmState((node("n1"),), tuple(jobs), (SlurmPartition("gpu", ("n1",)),), (), "22.05.8", NOW),
        lease=LEASE).observe().pending) == ["7_0", "7_1", "7_3"]


def test_a_throttled_array_places_only_its_free_slots_and_keeps_the_rest_leased():
    running = SlurmJob("7_0", "alice", "RUNNING", "gpu", nodes=("n1",), gpus_alloc={"n1": 1}, gpus_per_node=1,
                       comment="compass", array_job="7", array_throttle=2)
    obs = observe([running, job("7_[1-5]", array_job="7", array_pending="1-5", array_throttle=2,
                                reason="JobArrayTaskLimit")])
    assert [p.job.id for p in obs.pending] == ["7_1"]
    assert sorted(obs.waiting, key=id_order) == ["7_2", "7_3", "7_4", "7_5"]
    assert "at most 2 tasks of 7" in obs.waiting["7_2"]


def test_array_task_ranges():
    assert expand_ranges("0-3,7,10-16:3") == [0, 1, 2, 3, 7, 10, 13, 16]
    with pytest.raises(HostlistError):
        expand_ranges("5-1")
    assert id_order("7_10") > id_order("7_9") > id_order("7")


@pytest.mark.parametrize("kw, expected", [
    ({"gpus_per_node": 2}, Request(1, 8, False)),  # --exclusive --gres=gpu:2: Slurm gives it all 8
    ({"gpus_per_job": 2, "gpus_per_node": None}, Request(1, 8, False)),
    ({"gpus_per_node": 4, "num_nodes": 2}, Request(2, 8, False)),
    ({"gpus_per_job": 16, "gpus_per_node": None}, Request(2, 8, False)),
])
def test_an_exclusive_job_owns_whole_nodes(kw, expected):
    assert request(job("1", exclusive=True, **kw), 8) == expected


@pytest.mark.parametrize(("nodes", "gpus", "expected"), [
    (2, 3, None),  # -N 2 --gpus=3: a pin of 1 node would drop a node and its task
    (3, 4, None),
    (2, 4, Request(2, 2, True)),
    (2, 9, Request(3, 3, True)),  # --gpus=9: Slurm's own least count, 2 nodes; no user asked for it
    (2, 16, Request(2, 8, False)),
    (3, 16, None),  # 3 nodes for 16 GPUs: not 2 x 8
])
def test_a_node_count_beyond_what_the_gpus_need_is_the_users_and_kept(nodes, gpus, expected):
    asked = job("1", gpus_per_node=None, gpus_per_job=gpus, num_nodes=nodes)
    assert request(asked, 8) == expected
    if expected is None:
        obs = observe([asked])
        assert obs.pending == [] and f"{gpus} GPUs on {nodes} node(s) is not w x g instances" in obs.skipped["1"]


@pytest.mark.parametrize(("kw", "expected"), [
    # -N 2 --gpus=9: Slurm refuses a pin of 3 nodes (22.05)
    ({"num_nodes": 2, "max_nodes": 2}, "9 GPUs as 3 x 3 is outside its node range 2-2 (-N)"),
    ({"num_nodes": 2, "max_nodes": 3}, Request(3, 3, True)),  # -N 1-3 --gpus=9 (Slurm's least count: 2)
    ({"num_nodes": 2, "max_nodes": 3, "tasks": 2}, Request(3, 3, True)),  # -N 2-3: Slurm's default, a task a node
    # -n 2 --gpus=9: 3 nodes would take a third task (22.05)
    ({"num_nodes": 2, "tasks": 2}, "9 GPUs as 3 x 3 is more nodes than its 2 tasks"),
    ({"num_nodes": 3, "tasks": 3}, Request(3, 3, True)),  # -n 3, or a pin Slurm gave a task a node
    # 24.11 gives 3 nodes of 2 tasks 6 tasks
    ({"num_nodes": 2, "tasks": 4, "tasks_per_node": 2},
     "9 GPUs as 3 x 3 would change its 2 node(s) of --ntasks-per-node=2"),
    ({"num_nodes": 2}, Request(3, 3, True)),  # --gpus=9: Slurm's own count, no user's
])
def test_a_node_range_or_task_count_the_user_gave_bounds_the_shape(kw, expected):
    asked = job("1", gpus_per_node=None, gpus_per_job=9, **kw)
    assert request(asked, 8) == (expected if isinstance(expected, Request) else None)
    if not isinstance(expected, Request):
        obs = observe([asked])
        assert obs.pending == [] and obs.skipped["1"] == expected


def test_a_node_count_slurm_gave_on_smaller_nodes_is_not_the_users():
    """--gpus=5 where 4-GPU nodes stand beside 8-GPU ones: Slurm counts 2 nodes (on the 4-GPU ones); no user asked
    for them, and the job is placed as 1 x 5 on an 8-GPU node."""
    mixed = [node("n1"), node("n2"), replace(node("n3"), gpus=4), replace(node("n4"), gpus=4)]
    asked = job("1", gpus_per_node=None, gpus_per_job=5, num_nodes=2)
    [placed] = observe([asked], mixed).pending
    assert (placed.job.instances, placed.job.gpus) == (1, 5)
    assert request(asked, 8, 4) == Request(1, 5, False) and request(asked, 8) is None


def test_a_pinned_job_on_mixed_nodes_claims_its_nodes_in_the_shape_it_is_placed_in():
    """Pinned with -w n1,n2 --gpus=5 beside 4-GPU nodes, the job is read as 1 x 5 (as for its placement), and its
    pin claims the CPUs and memory of its nodes: read against the largest node only, it had no claim."""
    mixed = [node("n1"), node("n2"), replace(node("n3"), gpus=4), replace(node("n4"), gpus=4)]
    pinned = job("1", gpus_per_node=None, gpus_per_job=5, num_nodes=2, required_nodes=("n1", "n2"), reason="Resources")
    state = SlurmState(tuple(mixed), (pinned,), (SlurmPartition("gpu", tuple(n.name for n in mixed)),), (),
                       "22.05.8", NOW)
    translator = Translator(state, lease=LEASE)
    [placed] = translator.observe().pending
    assert (placed.job.instances, placed.job.gpus) == (1, 5)
    assert translator.claims.pins["1"][0] == frozenset({"n1", "n2"})


def test_a_marked_job_in_a_partition_the_daemon_does_not_manage_is_left_to_slurm():
    """The wrapper marks and leases a GPU job whatever its partition: one outside the managed partitions (or moved
    there) is left to Slurm, its lease lifted, and counts in no queue; an unmarked one is not the daemon's."""
    nodes = [node("n1"), node("n2")]
    partitions = (SlurmPartition("gpu", ("n1",)), SlurmPartition("other", ("n2",)))
    jobs = (replace(job("1"), partition="other"), replace(job("2", comment=""), partition="other"), job("3"))
    obs = Translator(SlurmState(tuple(nodes), jobs, partitions, (), "22.05.8", NOW), ["gpu"], lease=LEASE).observe()
    assert obs.left == {"1": "partition other is not managed"} and [p.job.id for p in obs.pending] == ["3"]
    assert obs.queue_len == 1 and obs.pending_gpus == 1


def test_a_shape_its_nodes_could_never_hold_is_left_to_slurm():
    """--gpus=5 on 4-GPU nodes is 5 x 1 on as many nodes (engine/shape.py): with 4 such nodes it waited for ever,
    its lease renewed, where Slurm runs it on 2 nodes (4 + 1). On 5 nodes it is placed."""
    small = [replace(node(f"n{i}"), gpus=4) for i in range(1, 5)]
    asked = job("1", gpus_per_node=None, gpus_per_job=5, num_nodes=2)
    obs = observe([asked], small)
    assert obs.pending == [] and obs.left["1"] == ("5 x 1 GPUs on as many nodes is more than the nodes it may use "
                                                   "in one partition could ever hold: Slurm places its 5 GPUs")
    assert [p.job.id for p in observe([asked], [*small, replace(node("n5"), gpus=4)]).pending] == ["1"]
    excluded = replace(asked, excluded_nodes=("n5",))  # the nodes it may use
    assert "1" in observe([excluded], [*small, replace(node("n5"), gpus=4)]).left
    # two partitions of the same four nodes: one partition holds the job or none does (a node counts once)
    state = SlurmState(tuple(small), (replace(asked, partition="a,b"),),
                       (SlurmPartition("a", ("n1", "n2", "n3", "n4")), SlurmPartition("b", ("n1", "n2", "n3", "n4"))),
                       (), "22.05.8", NOW)
    assert "1" in Translator(state, lease=LEASE).observe().left


def test_an_exclusive_job_on_nodes_of_several_sizes_is_left_to_slurm():
    """The engine's instance of an --exclusive job is a whole node of the largest size: on a partition with 4-GPU
    nodes beside 8-GPU ones, it waited for an 8-GPU node while Slurm would give it an idle 4-GPU one."""
    mixed = [node("n1"), replace(node("n2"), gpus=4)]
    obs = observe([job("1", exclusive=True, gpus_per_node=2)], mixed)
    assert obs.pending == [] and obs.left["1"].startswith("--exclusive on GPU nodes of different sizes")
    kept = observe([job("1", exclusive=True, gpus_per_node=2, excluded_nodes=("n2",))], mixed)  # -x the 4-GPU node
    assert [p.job.id for p in kept.pending] == ["1"]
    assert [p.job.id for p in observe([job("1", exclusive=True, gpus_per_node=2)]).pending] == ["1"]


@pytest.mark.parametrize(("alloc", "movable"), [
    ({"n1": 4, "n2": 2}, False),  # -N 2 --gpus=6 as Slurm split it: moved as 3 x 2 it would take 3 nodes
    ({"n1": 3, "n2": 3}, True),
    ({"n1": 6}, True),  # 1 x 6
])
def test_a_running_job_moves_only_as_one_instance_a_node(alloc, movable):
    running = SlurmJob("1", "alice", "RUNNING", "gpu", nodes=tuple(alloc), gpus_alloc=alloc, num_nodes=len(alloc),
                       max_nodes=2 if len(alloc) == 2 else 0, gpus_per_job=6, comment="compass:migratable")
    job_, nodes = observed(running, alloc, 4 if len(alloc) == 2 else 8)
    assert job_.migratable is movable and sorted(nodes) == sorted(n for n, c in alloc.items() for _ in
                                                                  range(c // job_.gpus))


@pytest.mark.parametrize("kw", [{"contiguous": True}, {"switches": 1}, {"segment": 2}])
def test_a_running_job_whose_nodes_form_one_set_stays_where_it_runs(kw):
    """A move takes instances one by one, to any node the job may use: it would not keep them contiguous, under its
    switches or in one segment. On one node it may move."""
    def running(nodes):
        return SlurmJob("1", "alice", "RUNNING", "gpu", nodes=nodes, gpus_alloc=dict.fromkeys(nodes, 4),
                        num_nodes=len(nodes), gpus_per_node=4, comment="compass:migratable", **kw)
    assert observe([running(("n1", "n2"))]).running["1"].eligible == frozenset({"n1", "n2"})
    assert observe([running(("n1",))]).running["1"].eligible is None


def test_a_node_list_naming_fewer_nodes_than_the_job_asks_for_is_left_to_slurm():
    """-w n1 -N 2: Slurm adds a node of its choice to n1; the daemon, taking the list for the whole set, would wait
    for ever for a second node in it."""
    partial = job("1", required_nodes=("n1",), num_nodes=2)
    whole = job("2", required_nodes=("n1", "n2"), num_nodes=2)
    obs = observe([partial, whole])
    assert [p.job.id for p in obs.pending] == ["2"]
    assert obs.skipped["1"] == "its node list names 1 of its 2 nodes: Slurm picks the others"


@pytest.mark.parametrize(("tasks", "per_task", "expected"), [
    (4, 2, Request(1, 8, False)),
    (8, 2, Request(2, 8, False)),
    (6, 1, Request(1, 6, False)),
    (3, 3, Request(3, 3, True)),  # 9 GPUs: 3 x 3, a task a node
    (5, 2, None),  # 10 GPUs: 2 x 5 would split a task; Slurm refuses TresPerNode=gpu:5 beside TresPerTask=gpu:2
    (3, 4, None),  # 12 GPUs: 2 x 6
])
def test_gpus_per_task_become_instances_of_whole_tasks_or_are_left_to_slurm(tasks, per_task, expected):
    asked = job("1", gpus_per_node=None, gpus_per_task=per_task, tasks=tasks)
    assert request(asked, 8) == expected
    if expected is None:
        obs = observe([asked])
        assert obs.pending == [] and "make no w x g instances of whole tasks" in obs.skipped["1"]


def test_an_exclusive_job_is_eligible_only_where_nothing_runs():
    nodes = [node("n1", cpus_alloc=1, mem_alloc=1000), node("n2"), node("n3", gpus_used=1, cpus_alloc=1)]
    [p] = observe([job("1", exclusive=True, gpus_per_node=2)], nodes).pending
    assert p.job.gpus == 8 and p.eligible == frozenset({"n2"})


def test_memory_per_gpu_counts_for_every_gpu_of_an_instance():
    """--gpus=2 --mem-per-gpu=100G needs 200 GB on its node; Slurm lists its default --mem-per-cpu beside it."""
    nodes = [node("n1", mem_alloc=100 * 1024), node("n2"), node("n3", mem_alloc=200 * 1024)]
    [p] = observe([job("1", gpus_per_node=None, gpus_per_job=2, memory_per_gpu_mb=102400)], nodes).pending
    assert p.eligible == frozenset({"n2"})


def test_a_begin_later_than_the_lease_waits_for_it_unleased():
    later = job("1", eligible_time=int(NOW) + 3600 + LEASE)  # --begin=now+1hour through the wrapper
    due = job("2", eligible_time=int(NOW) + LEASE)  # the usual lease
    obs = observe([later, due])
    assert [p.job.id for p in obs.pending] == ["2"]
    assert obs.skipped["1"].startswith("waits for its begin time") and obs.waiting == {}
    assert [p.job.id for p in observe([job("1", eligible_time=int(NOW) + LEASE - 1)]).pending] == ["1"]
    # submitted while the read ran: its lease starts just after read_at, and it is due all the same
    during = job("1", eligible_time=int(NOW) + LEASE + 3, submit_time=int(NOW) + 3)
    assert [p.job.id for p in observe([during]).pending] == ["1"]
    # a user's begin 3 s away is kept, not rounded down to "now"
    soon = job("1", eligible_time=int(NOW) + LEASE + 3, submit_time=int(NOW) - 10)
    assert observe([soon]).skipped["1"].startswith("waits for its begin time")



def test_invalid_account_keeps_a_job_pinned_to_its_nodes_placed_and_leaves_others_to_slurm():
    """23.11 without accounting storage: its main scheduler says InvalidAccount of every job it looks at, and its
    backfill starts a pinned job on its nodes all the same; the pin's GPUs must not be handed to another job."""
    pinned = job("1", reason="InvalidAccount", required_nodes=("n1",), num_nodes=1)
    unpinned = job("2", reason="InvalidAccount")
    other = job("3", reason="InvalidAccount", required_nodes=("n1", "n2"), num_nodes=1)  # may start on either
    obs = observe([pinned, unpinned, other])
    assert [p.job.id for p in obs.pending] == ["1"]
    assert obs.skipped == {"2": "Slurm holds it back: InvalidAccount", "3": "Slurm holds it back: InvalidAccount"}


def test_a_job_started_between_the_job_read_and_the_node_read_crowds_its_node_for_one_cycle():
    """Slurm counts GPUs in use on n1 that no job read holds: a job started after the job read (pending or not
    there when read). n2's are its running job's, n3's the pinned job's that started meanwhile: not crowded."""
    state = SlurmState(
        (node("n1", gpus_used=6), node("n2", gpus_used=2), node("n3", gpus_used=4), node("n4")),
        (SlurmJob("5", "bob", "RUNNING", "gpu", nodes=("n2",), gpus_alloc={"n2": 2}, gpus_per_job=2),
         job("6", gpus_per_node=4, required_nodes=("n3",), num_nodes=1, reason="Resources"), job("7")),
        (SlurmPartition("gpu", ("n1", "n2", "n3", "n4")),), (), "22.05.8", NOW)
    translator = Translator(state, lease=LEASE)
    obs = translator.observe()
    assert obs.crowded == frozenset({"n1"})
    seven = next(p for p in obs.pending if p.job.id == "7")
    assert seven.eligible is None  # as read: every node; the decision leaves n1 out
    claims = translator.claims
    narrowed = claims.narrowed(seven.slurm, seven.job, seven.eligible)
    assert narrowed == frozenset({"n2", "n3", "n4"})
    assert claims.narrowed(seven.slurm, seven.job, seven.eligible) is narrowed  # the policy keeps its indexes
    only_n1 = frozenset({"n1"})
    assert claims.narrowed(seven.slurm, seven.job, only_n1) == frozenset()
    # The next read sees the job running there: nothing is crowded.
    started = SlurmJob("8", "bob", "RUNNING", "gpu", nodes=("n1",), gpus_alloc={"n1": 6}, gpus_per_job=6)
    assert Translator(replace(state, jobs=(*state.jobs, started)), lease=LEASE).observe().crowded == frozenset()


def test_a_job_pinned_but_not_started_holds_its_memory_against_others():
    """The daemon pinned job 1 to n1 a cycle ago; Slurm has not started it: n1's 250 GB are 200 GB taken."""
    pinned = job("1", gpus_per_node=None, gpus_per_job=2, memory_per_gpu_mb=102400, required_nodes=("n1",),
                 reason="Resources")
    second = job("2", gpus_per_node=None, gpus_per_job=2, memory_per_gpu_mb=102400)
    obs = observe([pinned, second], [node("n1"), node("n2")])
    eligible = {p.job.id: p.eligible for p in obs.pending}
    assert eligible == {"1": frozenset({"n1"}), "2": frozenset({"n2"})}
