"""What Slurm checks for a GPU job, checked before it is pinned: constraints, typed GPUs on mixed node sizes,
--contiguous, --switches, blocks, --prefer; the forms the daemon cannot honour are left to Slurm."""

from __future__ import annotations

from dataclasses import replace

import pytest

from compass_slurm.slurm.nodesets import NodeSets, Spread, Unhonoured
from compass_slurm.slurm.state import SlurmBlock, SlurmJob, SlurmNode, SlurmPartition, SlurmState, SlurmSwitch
from compass_slurm.slurm.translate import Translator, engines
from compass_slurm.slurm.translation_cache import TranslationCache

NOW = 1.0e9
LEASE = 60


def node(name: str, gpus: int = 8, gpu_type: str | None = None, features: tuple[str, ...] = (),
         gpus_used: int = 0, **kw) -> SlurmNode:
    return SlurmNode(name, "mixed" if gpus_used else "idle", frozenset(), ("gpu",), gpus, gpus_used, gpu_type, 64,
                     0, 512000, 0, features=frozenset(features), gpu_types=(gpu_type,) if gpu_type else (), **kw)


def job(job_id: str = "1", partition: str = "gpu", **kw) -> SlurmJob:
    fields = {"comment": "compass", "reason": "BeginTime", "eligible_time": int(NOW) + LEASE, **kw}
    if "gpus_per_job" not in fields and "gpus_per_node" not in fields:
        fields["gpus_per_node"] = 1
    return SlurmJob(job_id, "alice", "PENDING", partition, **fields)


#: three GPU types, 8- and 4-GPU nodes, under three leaf switches (a1-a4, h1-h4, v1-v4)
SITE = ([node(f"a{i}", 8, "a100", ("a100", "80gb")) for i in range(1, 5)]
        + [node(f"h{i}", 8, "h100", ("h100", "80gb")) for i in range(1, 5)]
        + [node(f"v{i}", 4, "v100", ("v100", "32gb")) for i in range(1, 5)])
LEAVES = tuple(SlurmSwitch(f"leaf{k}", 0, tuple(f"{k}{i}" for i in range(1, 5))) for k in "ahv")


def observe(jobs: list[SlurmJob], nodes: list[SlurmNode] = SITE, partitions: tuple[SlurmPartition, ...] = (),
            **topology):
    state = SlurmState(tuple(nodes), tuple(jobs), partitions or (SlurmPartition("gpu", tuple(n.name for n in nodes)),),
                       (), "24.11.1", NOW, **topology)
    return Translator(state, lease=LEASE).observe()


def eligible(j: SlurmJob, nodes: list[SlurmNode] = SITE, partitions: tuple[SlurmPartition, ...] = (),
             **topology) -> frozenset[str] | None:
    obs = observe([j], nodes, partitions, **topology)
    assert not obs.left, obs.left
    (p,) = obs.pending
    return p.eligible


@pytest.mark.parametrize(("constraint", "nodes"), [
    ("a100", "a1 a2 a3 a4"),
    ("a100|v100", "a1 a2 a3 a4 v1 v2 v3 v4"),
    ("a100&80gb", "a1 a2 a3 a4"),
    ("80gb", "a1 a2 a3 a4 h1 h2 h3 h4"),
    ("(h100|v100)&32gb", "v1 v2 v3 v4"),
])
def test_a_constraint_narrows_the_eligible_nodes_to_those_with_the_features(constraint, nodes):
    assert eligible(job(constraint=constraint)) == frozenset(nodes.split())


def test_typed_gpus_take_the_size_of_their_type_s_nodes():
    # --gpus=v100:8: the v100 nodes hold 4, so two whole v100 nodes (an a100 node holds 8, but is no v100)
    obs = observe([job(gpus_per_job=8, gpu_type="v100")])
    (p,) = obs.pending
    assert (p.job.instances, p.job.gpus) == (2, 4) and p.eligible == frozenset({"v1", "v2", "v3", "v4"})
    # -N2 --gpus-per-node=8 -C h100: two of the h100 nodes
    (p,) = observe([job(num_nodes=2, gpus_per_node=8, constraint="h100")]).pending
    assert (p.job.instances, p.job.gpus) == (2, 8) and p.eligible == frozenset({"h1", "h2", "h3", "h4"})


def test_the_engine_nodes_carry_their_gpu_type():
    obs = observe([])
    assert {n.name: n.gpu_type for n in obs.nodes}["v3"] == "v100"


@pytest.mark.parametrize(("kw", "why"), [
    ({"constraint": "[a100|h100]"}, "asks about the job's set of nodes"),
    ({"constraint": "a100*2"}, "asks about the job's set of nodes"),
    ({"constraint": "a100|h100&80gb"}, "mixed without parentheses"),
    ({"constraint": "a100&&"}, "constraint"),
    ({"constraint": "p100"}, "no GPU node of partition gpu has constraint p100"),
    ({"gpu_type": "p100"}, "no GPU node of partition gpu has GPU type p100"),
    ({"num_nodes": 2, "gpus_per_node": 8, "segment": 2}, "--segment=2 is left to Slurm"),
    ({"reservation": "maint"}, "runs in reservation maint"),
])
def test_forms_the_daemon_cannot_honour_are_left_to_slurm(kw, why):
    obs = observe([job("7", **kw)])
    assert obs.pending == [] and why in obs.left["7"] and obs.skipped["7"] == obs.left["7"]


def test_contiguous_instances_that_may_share_a_node_are_left_to_slurm():
    with pytest.raises(Unhonoured, match="--contiguous with instances that may share a node"):
        NodeSets(("n1", "n2", "n3")).spread(2, whole=False, contiguous=True, switches=0, segment=0)
    # one GPU on each of two nodes is whole enough: a window of two
    (p,) = observe([job(num_nodes=2, gpus_per_node=1, contiguous=True)]).pending
    assert p.eligible == {"v1", "v2"}  # best fit: the window of the fewest free GPUs


def test_a_held_job_is_not_left_for_good_until_released():
    obs = observe([job("7", constraint="[a|b]", held=True)])
    assert obs.skipped == {"7": "held"} and obs.left == {}


def test_a_job_waiting_for_its_own_begin_is_left_only_once_it_comes():
    later = job("7", constraint="[a|b]", eligible_time=int(NOW) + 3600 + LEASE, submit_time=int(NOW) - 10)
    obs = observe([later])
    assert obs.left == {} and obs.skipped["7"].startswith("waits for its begin time")


def test_contiguous_takes_consecutive_nodes_in_slurm_s_order_with_room():
    busy = [replace(n, gpus_used=2) if n.name == "a2" else n for n in SITE]
    # a1-a2 is not free (a2 busy); the first window of room is a3-a4 (best fit among equals: the first)
    assert eligible(job(num_nodes=2, gpus_per_node=8, contiguous=True, constraint="a100"), busy) == {"a3", "a4"}
    assert eligible(job(num_nodes=3, gpus_per_node=4, contiguous=True, gpu_type="v100"), busy) == {"v1", "v2", "v3"}


def test_a_node_the_daemon_does_not_place_on_breaks_a_window():
    """A CPU node (or one of an unmanaged partition) between two GPU nodes: Slurm counts it in its node order."""
    cpu = replace(node("c1", 0), gpu_types=())
    order = [*SITE[:2], cpu, *SITE[2:]]  # a1 a2 c1 a3 a4 ...
    busy = [replace(n, gpus_used=8) if n.name == "a1" else n for n in order]
    # a2-a3 would be the first window of room among the GPU nodes alone
    assert eligible(job(num_nodes=2, gpus_per_node=8, contiguous=True, constraint="a100"), busy) == {"a3", "a4"}


def test_switches_keep_a_multi_node_job_under_one_leaf_best_fit():
    busy = [replace(n, gpus_used=4) if n.name in ("a1", "h1", "h2") else n for n in SITE]
    j = job(num_nodes=2, gpus_per_node=4, switches=1)
    # leaf a has 28 GPUs free, h 24, v 16: each holds 2 x 4; best fit is the leaf with the fewest free, v
    assert eligible(j, busy, switches=LEAVES) == {"v1", "v2", "v3", "v4"}
    # a single node job is under one switch whatever node it takes
    assert eligible(job(switches=1), busy, switches=LEAVES) is None
    # without topology/tree Slurm has no switches to count
    assert eligible(j, busy) is None


def test_a_job_no_leaf_can_ever_hold_is_left_to_slurm():
    obs = observe([job("9", num_nodes=5, gpus_per_node=8, switches=1)], switches=LEAVES)
    assert "no node set holds 5 x 8 GPUs as at most 1 leaf switches asks" in obs.left["9"]


def test_a_job_waits_in_the_leaf_closest_to_room_when_none_has_it():
    busy = [replace(n, gpus_used=8 if n.name[0] == "v" or n.name in ("a1", "a2", "a3", "h1", "h2", "h3") else 4)
            for n in SITE]
    # no leaf has two free 8-GPU nodes; leaves a and h each have one node with 4 free: the first of those, whole
    # (the engine sees which of its nodes are busy)
    assert eligible(job(num_nodes=2, gpus_per_node=8, switches=1), busy, switches=LEAVES) == {"a1", "a2", "a3", "a4"}


#: three partitions: the a100 nodes, the 8-GPU nodes (a100 and h100), the v100 nodes
PARTS = (SlurmPartition("a", ("a1", "a2", "a3", "a4")), SlurmPartition("big", tuple(f"{k}{i}" for k in "ah" for i in
                                                                                    range(1, 5))),
         SlurmPartition("v", ("v1", "v2", "v3", "v4")))


def test_a_job_of_several_partitions_is_placed_within_one_of_them():
    """Slurm runs a job in one of its partitions: a node list spanning two never starts."""
    # one v100 node and a1 have 4 GPUs free each: best fit over both partitions would take those two
    busy = [replace(n, gpus_used=4 if n.name == "a1" else n.gpus) if n.name[0] == "a" or n.name in ("v1", "v2", "v3")
            else n for n in SITE]
    j = job(partition="big,v", num_nodes=2, gpus_per_node=4)
    # big has room (a1, h1-h4), v one node short: big (the engine sees which of its nodes are busy)
    assert eligible(j, busy, PARTS) == {"a1", "a2", "a3", "a4", "h1", "h2", "h3", "h4"}
    # with v free, v is the best fit (16 GPUs free against 36)
    assert eligible(j, SITE, PARTS) == {"v1", "v2", "v3", "v4"}
    # a partition holding the others' GPU nodes is no restriction; nor is one node
    nodes_of = {p.name: frozenset(p.nodes) for p in PARTS}.__getitem__
    assert NodeSets().spread(2, whole=True, contiguous=False, switches=0, segment=0, partitions=["a", "big", "a"],
                             nodes_of=nodes_of) is None
    assert NodeSets().spread(2, whole=True, contiguous=False, switches=0, segment=0, partitions=["v", "a", "big"],
                             nodes_of=nodes_of) == Spread(partitions=("v", "big"))
    assert eligible(job(partition="big,v", gpus_per_node=4), busy, PARTS) is None
    # with no partition of room, the one closest to it, where the job waits
    full = [replace(n, gpus_used=n.gpus) if n.name != "a1" else replace(n, gpus_used=4) for n in SITE]
    assert eligible(j, full, PARTS) == {"a1", "a2", "a3", "a4", "h1", "h2", "h3", "h4"}
    # a job no one partition can ever hold is left to Slurm
    obs = observe([job("9", partition="a,v", num_nodes=6, gpus_per_node=4)], SITE, PARTS)
    assert obs.left["9"].startswith("6 x 4 GPUs on as many nodes is more than the nodes it may use in one partition")


def test_one_partition_and_one_leaf_both():
    busy = [replace(n, gpus_used=8) if n.name in ("h1", "h2", "h3") else n for n in SITE]
    # big's leaves: a (32 free) and h (8); v's: 16 free. Under one switch, within one partition: v is the best fit
    assert eligible(job(partition="big,v", num_nodes=2, gpus_per_node=4, switches=1), busy, PARTS,
                    switches=LEAVES) == {"v1", "v2", "v3", "v4"}


def test_blocks_keep_a_multi_node_job_in_one_block():
    blocks = (SlurmBlock("b1", ("a1", "a2", "h1", "h2")), SlurmBlock("b2", ("a3", "a4", "h3", "h4")))
    busy = [replace(n, gpus_used=8) if n.name in ("a1", "h3") else n for n in SITE]
    # b1 has 24 GPUs free, b2 24: each holds 3 x 8; the first of equals, whole (the engine sees a1 is busy)
    assert eligible(job(num_nodes=3, gpus_per_node=8), busy, blocks=blocks, block_sizes=(4,)) == {
        "a1", "a2", "h1", "h2"}


def test_prefer_is_a_preference_never_a_requirement():
    j = job(num_nodes=1, gpus_per_node=8, constraint="80gb", prefer="h100")
    assert eligible(j) == {"h1", "h2", "h3", "h4"}
    full = [replace(n, gpus_used=8) if n.name[0] == "h" else n for n in SITE]
    assert eligible(j, full) == {"a1", "a2", "a3", "a4", "h1", "h2", "h3", "h4"}
    # a preference the daemon cannot read is Slurm's alone: no restriction
    assert eligible(job(prefer="[a|b]")) is None


def test_nodes_that_share_gpus_out_or_have_several_types_are_slurm_s():
    shard = node("s1", 8, "a100", ("a100",), shards=32)
    mig = replace(node("m1", 7, None, ("a100",)), gpu_types=("1g.10gb", "3g.40gb"))
    migs = node("m2", 7, "1g.10gb", ("a100", "mig"))
    assert not engines(shard) and not engines(mig) and engines(migs)
    obs = observe([job(constraint="a100")], [shard, mig, migs, *SITE])
    assert {n.name for n in obs.nodes} == {"m2", *(n.name for n in SITE)}
    # a MIG profile is a GPU type of its own: a group of its own
    (p,) = observe([job(gpu_type="1g.10gb", gpus_per_node=2)], [migs, *SITE]).pending
    assert p.eligible == {"m2"}


@pytest.mark.parametrize(("kw", "nodes"), [
    ({}, None),                                                  # anywhere: no restriction
    ({"constraint": "a100"}, "a1 a2 a3 a4"),
    ({"constraint": "80gb", "excluded_nodes": ("a2", "h1")}, "a1 a3 a4 h2 h3 h4"),
    ({"gpu_type": "a100"}, "a1 a2 a3 a4"),
    ({"partition": "v,big"}, "a1 a2 a3 a4 h1 h2 h3 h4"),        # the partition it runs in
    ({"constraint": "[a100|h100]"}, "a1"),                      # a constraint the daemon cannot read: where it is
    ({"comment": "compass", "constraint": "a100"}, None),        # not movable: nothing to keep to
])
def test_a_running_job_may_be_moved_only_where_slurm_would_run_it(kw, nodes):
    fields = {"comment": "compass:migratable", "nodes": ("a1",), "gpus_alloc": {"a1": 4}, "gpus_per_node": 4, **kw}
    running = SlurmJob("5", "alice", "RUNNING", fields.pop("partition", "gpu"), **fields)
    state = SlurmState(tuple(SITE), (running,), PARTS if "," in running.partition else
                       (SlurmPartition("gpu", tuple(n.name for n in SITE)),), (), "24.11.1", NOW)
    obs = Translator(state, lease=LEASE).observe()
    assert obs.running["5"].eligible == (None if nodes is None else frozenset(nodes.split()))


def test_a_feature_taken_off_a_node_is_seen_by_the_running_jobs_that_asked_for_it():
    """The translation cache keeps a running job's translation while the job is unchanged: a change of the nodes'
    features starts it afresh, so where each running job may move follows what the nodes have now."""
    running = SlurmJob("5", "alice", "RUNNING", "gpu", comment="compass:migratable", nodes=("a1",),
                       gpus_alloc={"a1": 4}, gpus_per_node=4, constraint="a100")
    part = (SlurmPartition("gpu", tuple(n.name for n in SITE)),)
    known = TranslationCache()
    first = Translator(SlurmState(tuple(SITE), (running,), part, (), "24.11.1", NOW), lease=LEASE, known=known)
    assert first.observe().context_changed
    again = Translator(SlurmState(tuple(SITE), (running,), part, (), "24.11.1", NOW), lease=LEASE, known=known)
    assert not again.observe().context_changed
    lost = tuple(replace(n, features=frozenset({"80gb"})) if n.name == "a2" else n for n in SITE)
    obs = Translator(SlurmState(lost, (running,), part, (), "24.11.1", NOW), lease=LEASE, known=known).observe()
    assert obs.context_changed and obs.running["5"].eligible == frozenset({"a1", "a3", "a4"})
