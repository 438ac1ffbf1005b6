"""What Slurm checks for a GPU job beyond GPUs, read alike by every read, on output recorded on every release
(tests/data/slurm/record.py --only features): constraints, --prefer, --contiguous, --switches, --segment, typed
GPU requests; node features, GPU types, shards; the topology."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from compass_slurm.slurm import gres, parse_text, snapshot
from compass_slurm.slurm.cli_backend import TOPOLOGY, TOPOLOGY_EVERY_S, CliBackend
from compass_slurm.slurm.errors import SlurmParseError
from compass_slurm.slurm.state import SlurmBlock, SlurmState, SlurmSwitch

DATA = Path(__file__).resolve().parents[1] / "data"
RELEASES = ("22.05", "23.11", "24.11", "25.11", "26.05")

#: job id -> (constraint, prefer, contiguous, switches, segment, gpu_type), as submitted by record.py
EXPECTED = {
    "1": ("a100", "", False, 0, 0, None),  # running: -C a100 --gpus-per-node=1
    "2": ("a100&80gb", "80gb", True, 1, 0, None),  # --contiguous --switches=1 -N2 --gpus-per-node=2
    "3": ("a100|v100", "", False, 2, 0, "a100"),  # --switches=2@10:00 --gres=gpu:a100:1
    "4": ("[a100*2&v100*2]", "", False, 0, 0, "a100"),  # -N4 --gpus=a100:4
    "5": ("", "a100|v100", False, 0, 0, "a100"),  # --gpus-per-node=a100:2
    "6": ("", "", False, 0, 2, None),  # --segment=2 (25.05 on)
}
FEATURES = {"node01": {"v100"}, "node02": {"v100"}, "node03": {"a100", "80gb"}, "node04": {"a100", "80gb"}}


def reads(recorded, release: str, scenario: str = "features-4x8") -> dict[str, CliBackend]:
    """Every read the CLI backend has on ``release``, each on its own replay of the recording."""
    found = {"json": CliBackend(runner=recorded(scenario, release), narrow=False, lines=False),
             "text": CliBackend(runner=recorded(scenario, release), json=False)}
    if release >= "24.11":
        found["narrow"] = CliBackend(runner=recorded(scenario, release), narrow=True)
    else:
        found["lines"] = CliBackend(runner=recorded(scenario, release), lines=True)
    return found


def fields(job) -> tuple:
    return job.constraint, job.prefer, job.contiguous, job.switches, job.segment, job.gpu_type


@pytest.mark.parametrize("release", RELEASES)
def test_every_read_reads_what_the_jobs_asked(recorded, release):
    expected = {job_id: want for job_id, want in EXPECTED.items() if job_id != "6" or release >= "25.11"}
    for read, backend in reads(recorded, release).items():
        jobs = {job.id: fields(job) for job in backend.read_jobs()}
        if read == "json" and release == "22.05":  # its squeue --json has no --switches
            assert jobs == {job_id: (*want[:3], 0, *want[4:]) for job_id, want in expected.items()}
        else:
            assert jobs == expected, read


@pytest.mark.parametrize("release", RELEASES)
def test_every_read_reads_the_node_range_a_user_gave(recorded, release):
    """-N2 and -N4 bound a pending job's nodes (scontrol's NumNodes=2-2); a running job's count is no range; none
    asked --ntasks-per-node."""
    for read, backend in reads(recorded, release).items():
        jobs = {job.id: job.max_nodes for job in backend.read_jobs()}
        assert (jobs["1"], jobs["2"], jobs["4"]) == (0, 2, 4), read
        assert {job.tasks_per_node for job in backend.read_jobs()} == {0}, read


@pytest.mark.parametrize("release", RELEASES)
def test_every_read_of_a_release_agrees_on_the_whole_state(recorded, release):
    states = {read: backend.read_state() for read, backend in reads(recorded, release).items()}
    first = states.pop("text")
    for read, state in states.items():
        assert state.nodes == first.nodes, read
        if not (read == "json" and release == "22.05"):  # (no --switches)
            assert sorted(state.jobs, key=lambda j: j.id) == sorted(first.jobs, key=lambda j: j.id), read
        assert (state.switches, state.blocks, state.block_sizes) == ((), (), ())


@pytest.mark.parametrize("release", RELEASES)
def test_nodes_carry_their_active_features_and_gpu_type(recorded, release):
    for read, backend in reads(recorded, release).items():
        nodes = backend.read_nodes()
        assert {n.name: set(n.features) for n in nodes} == FEATURES, read  # v100,fast available, v100 active
        assert {(n.gpu_types, n.gpu_type, n.gpus, n.shards, n.gpus_shared) for n in nodes} == {
            (("a100",), "a100", 8, 0, 0)}


@pytest.mark.parametrize("release", ["24.11", "25.11", "26.05"])
def test_a_changed_constraint_shows_in_the_narrow_line(recorded, release):
    """The fields that may hold a '|' are each followed by the id: moving one between them changes the line."""
    queue = recorded("features-4x8", release)
    backend = CliBackend(runner=queue, narrow=True)
    backend.read_jobs()
    narrow = " ".join(backend.read_commands()["jobs"])
    lines = queue.text("narrow.txt")
    moved = lines.replace("|a100|v100|5|(null)|5|", "|a100|5|v100|5|")  # a100 | v100 as constraint a100, prefer v100
    assert moved != lines
    queue.override[narrow] = (0, moved, "")
    queue.override["squeue --json --jobs=5"] = (0, queue.text("jobs.json"), "")
    queue.calls.clear()
    backend.read_jobs()
    assert [call for call in queue.calls if "--json" in call] == [["squeue", "--json", "--jobs=5"]]


def test_a_node_of_several_gpu_types_has_none_for_its_type():
    """MIG profiles, or two kinds of cards: no one type stands for its GPUs, so no typed job is matched with it."""
    kinds = gres.node_gres("gpu:1g.10gb:4,gpu:3g.40gb:1", "gpu:1g.10gb:1(IDX:0),gpu:3g.40gb:0(IDX:N/A)")
    assert (kinds["gpu_types"], kinds["gpu_type"], kinds["gpus"], kinds["gpus_used"]) == (
        ("1g.10gb", "3g.40gb"), None, 5, 1)
    assert gres.node_gres("gpu:a100:4,gpu:a100:4(S:1)", None)["gpu_type"] == "a100"  # one type on two lines


@pytest.mark.parametrize("total, used, shards, in_use, shared", [
    ("gpu:4,shard:16", "gpu:0,shard:0", 16, 0, 0),
    ("gpu:a100:4,shard:a100:16", "gpu:a100:1(IDX:0),shard:a100:5(4/4,1/4,0/4,0/4)", 16, 5, 2),
    ("gpu:a100:4,shard:a100:16", "gpu:a100:1(IDX:2),shard:a100:7(3/4,4/4,-/4,0/4)", 16, 7, 2),  # 26.05
    ("gpu:a100:4,shard:a100:16", "gpu:a100:1(IDX:2),shard:a100:2(IDX:0-1)", 16, 2, 2),  # 22.05: GPUs, not shards
    ("gpu:4,shard:16", "gpu:1,shard:3", 16, 3, 3),  # no detail: every shard may hold a GPU of its own
    ("gpu:2,shard:16", "gpu:0,shard:9", 16, 9, 2),  # at most every GPU
    ("gpu:8", "gpu:8", 0, 0, 0),
])
def test_shards_and_the_gpus_they_hold(total, used, shards, in_use, shared):
    kinds = gres.node_gres(total, used)
    assert (kinds["shards"], kinds["shards_used"], kinds["gpus_shared"]) == (shards, in_use, shared)


def test_the_topology_of_a_tree_and_of_blocks():
    tree = ("SwitchName=s0 Level=0 LinkSpeed=1 Nodes=node[01-02]\nSwitchName=s1 Level=0 LinkSpeed=1 Nodes=node[03-04]\n"
            "SwitchName=top Level=1 LinkSpeed=1 Nodes=node[01-04] Switches=s[0-1]\n")
    assert parse_text.topology(tree) == ((
        SlurmSwitch("s0", 0, ("node01", "node02")), SlurmSwitch("s1", 0, ("node03", "node04")),
        SlurmSwitch("top", 1, ("node01", "node02", "node03", "node04"), ("s0", "s1"))), (), ())
    blocks = ("BlockName=b1 BlockIndex=0 Nodes=node[01-02] BlockSize=2\nBlockName=b2 BlockIndex=1 Nodes=node[03-04] "
              "BlockSize=2\nAggregatedBlock=b[1-2] BlockIndex=2 Nodes=node[01-04] BlockSize=4\n")
    assert parse_text.topology(blocks) == (
        (), (SlurmBlock("b1", ("node01", "node02")), SlurmBlock("b2", ("node03", "node04"))), (2, 4))
    assert parse_text.topology("BlockName=b1 BlockIndex=0 Nodes=node[01-02]\n")[2] == ()  # 23.11: no sizes
    with pytest.raises(SlurmParseError, match="line 1 is neither a switch nor a block"):
        parse_text.topology("TopoName=x\n")
    with pytest.raises(SlurmParseError, match="Level"):
        parse_text.topology("SwitchName=s0 Level=x Nodes=node01\n")


def test_the_topology_is_read_once_a_minute_or_when_the_nodes_change(recorded):
    queue = recorded("features-4x8", "25.11")
    queue.override[" ".join(TOPOLOGY)] = (0, "BlockName=b1 BlockIndex=0 Nodes=node[01-04] BlockSize=4\n", "")
    backend = CliBackend(runner=queue)
    nodes = backend.read_nodes()
    asked = lambda: queue.calls.count(TOPOLOGY)  # noqa: E731
    assert backend.read_topology(nodes, 100.0)["block_sizes"] == (4,) and asked() == 1
    backend.read_topology(nodes, 100.0 + TOPOLOGY_EVERY_S - 1)
    assert asked() == 1
    backend.read_topology(nodes[:3], 100.0 + TOPOLOGY_EVERY_S - 1)  # a node gone
    assert asked() == 2
    backend.read_topology(nodes[:3], 100.0 + 2 * TOPOLOGY_EVERY_S)
    assert asked() == 3


def test_no_topology_plugin_is_no_topology_whatever_the_exit(recorded):
    queue = recorded("features-4x8", "22.05")
    queue.override[" ".join(TOPOLOGY)] = (1, "", "scontrol: error: No topology information available\n")
    assert CliBackend(runner=queue).read_state().switches == ()


def test_snapshots_carry_the_new_fields_and_old_ones_still_load(recorded):
    state = CliBackend(runner=recorded("features-4x8", "25.11")).read_state()
    state = replace(state, switches=(SlurmSwitch("s0", 0, ("node01",)),), blocks=(SlurmBlock("b1", ("node01",)),),
                    block_sizes=(1, 4))
    assert snapshot.loads(snapshot.dumps(state)) == state
    old = json.loads((DATA / "snapshots" / "mixed-16x8.json").read_text())
    loaded = snapshot.loads(json.dumps(old))
    assert loaded.switches == () and all(job.constraint == "" for job in loaded.jobs)
    assert all(node.features == frozenset() for node in loaded.nodes)
    assert SlurmState.from_dict(state.to_dict()) == state


#: the layout clusters recorded (record.py --only layouts): tests/data/layouts/NAME.toml, blocks from 23.11
LAYOUTS = [(name, release) for name in ("mixed", "shared", "blocks") for release in RELEASES
           if name != "blocks" or release >= "23.11"]


def nodes_of(first: int, last: int) -> tuple[str, ...]:
    return tuple(f"node{i:02d}" for i in range(first, last + 1))


def unordered(nodes):
    return [replace(node, partitions=tuple(sorted(node.partitions))) for node in nodes]


@pytest.mark.parametrize("name, release", LAYOUTS)
def test_every_read_of_a_layout_cluster_agrees(recorded, name, release):
    """Typed GPUs of several kinds, MIG instances and shards, switches and blocks: the same state in every read."""
    states = {read: backend.read_state() for read, backend in reads(recorded, release, f"layout-{name}").items()}
    first = states.pop("text")
    assert first.jobs and any(job.running for job in first.jobs)
    for read, state in states.items():
        # (26.05's sinfo --json lists a node's partitions in another order than scontrol)
        assert unordered(state.nodes) == unordered(first.nodes), read
        assert (state.switches, state.blocks, state.block_sizes) == (first.switches, first.blocks, first.block_sizes)
        jobs = sorted(state.jobs, key=lambda j: j.id)
        if read == "json" and release == "22.05":  # (no --switches)
            jobs = [replace(job, switches=other.switches) for job, other in zip(jobs, sorted(first.jobs,
                                                                                             key=lambda j: j.id))]
        assert jobs == sorted(first.jobs, key=lambda j: j.id), read


@pytest.mark.parametrize("release", RELEASES)
def test_the_tree_of_the_mixed_layout(recorded, release):
    state = CliBackend(runner=recorded("layout-mixed", release), json=False).read_state()
    assert {s.name: (s.level, s.nodes, s.children) for s in state.switches} == {
        "leaf1": (0, nodes_of(1, 4), ()), "leaf2": (0, nodes_of(5, 8), ()), "leaf3": (0, nodes_of(9, 12), ()),
        "spine": (1, nodes_of(1, 12), ("leaf1", "leaf2", "leaf3"))}
    assert (state.blocks, state.block_sizes) == ((), ())
    by_type = {n.name: (n.gpu_type, n.gpu_types, n.gpus) for n in state.nodes}
    assert by_type["node01"] == ("a100", ("a100",), 8) and by_type["node12"] == ("v100", ("v100",), 4)
    assert {n.name: n.features for n in state.nodes}["node05"] == {"h100", "80gb"}
    jobs = {job.gpu_type: job for job in state.jobs if job.running}
    assert set(jobs) == {None, "h100", "v100"}  # -C a100 --gpus-per-node=8, --gpus=h100:2, --gres=gpu:v100:1
    assert (jobs[None].constraint, jobs[None].contiguous, jobs[None].switches) == ("a100", True, 1)
    assert len(set(jobs[None].nodes)) == 2 and set(jobs[None].nodes) <= set(nodes_of(1, 4))


@pytest.mark.parametrize("release", [r for r in RELEASES if r >= "23.11"])
def test_the_blocks_of_the_blocks_layout(recorded, release):
    state = CliBackend(runner=recorded("layout-blocks", release)).read_state()
    assert state.blocks == tuple(SlurmBlock(f"b{i}", nodes_of(2 * i - 1, 2 * i)) for i in range(1, 5))
    assert state.block_sizes == ((2, 4, 8) if release >= "24.11" else ())  # 23.11 prints no sizes
    assert state.switches == ()
    segment = [job.segment for job in state.jobs if job.segment]
    assert segment == ([2] if release >= "25.11" else [])


@pytest.mark.parametrize("release", RELEASES)
def test_mig_instances_and_shards_of_the_shared_layout(recorded, release):
    nodes = {n.name: n for n in CliBackend(runner=recorded("layout-shared", release)).read_nodes()}
    mig, sharded, whole = nodes["node01"], nodes["node03"], nodes["node05"]
    assert (mig.gpu_type, mig.gpu_types, mig.gpus, mig.shards) == ("1g.10gb", ("1g.10gb",), 7, 0)
    assert (sharded.gpus, sharded.shards, whole.shards, whole.gpus_shared) == (4, 16, 0, 0)
    # --gres=shard:3 and --gres=shard:4, on two of node03's GPUs (a third holds --gpus-per-node=a100:1): 23.11 on
    # print each GPU's shards, 22.05 only the GPUs that hold some
    used = {name: (n.shards_used, n.gpus_shared, n.gpus_used) for name, n in nodes.items() if n.shards_used}
    assert used == {"node03": (2 if release == "22.05" else 7, 2, 1)}
