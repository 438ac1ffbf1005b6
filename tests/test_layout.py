"""Layout files (compass_slurm/layout.py) and what scripts/dev-cluster makes of them, without starting Slurm."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from compass_slurm.layout import (
    DEFAULT_PARTITION, Layout, LayoutError, NodeGroup, PartitionSpec, load_layout, parse_layout,
)

REPO = Path(__file__).resolve().parents[1]
LAYOUTS = REPO / "tests" / "data" / "layouts"
DEV_CLUSTER = REPO / "scripts" / "dev-cluster"
A100 = '[[nodes]]\nnames = "node[01-02]"\ngpus = 8\n'


def test_mixed_layout_reads_as_written():
    layout = load_layout(LAYOUTS / "mixed.toml")
    assert layout.groups[0] == NodeGroup(("node01", "node02"), 8, "a100", ("a100", "80gb"),
                                         cpus=64, memory_mb=512000, switch="leaf1")
    assert [(len(g.names), g.gpus, g.gpu_type, g.switch) for g in layout.groups] == [
        (2, 8, "a100", "leaf1"), (1, 0, None, "leaf1"), (2, 8, "a100", "leaf1"), (4, 8, "h100", "leaf2"),
        (4, 4, "v100", "leaf3")]
    gpu = tuple(f"node{i:02d}" for i in range(1, 13))
    assert layout.nodes == (*gpu[:2], "node02c", *gpu[2:])  # the file's order, Slurm's too (by name)
    assert layout.partitions == (PartitionSpec("gpu", gpu, default=True), PartitionSpec("big", gpu[:8]),
                                 PartitionSpec("v100", gpu[8:]), PartitionSpec("cpu", ("node02c",)))
    assert layout.topology() == "tree"


def test_shared_and_block_layouts():
    shared = load_layout(LAYOUTS / "shared.toml")
    assert [(g.gpu_type, g.gpus, g.shards) for g in shared.groups] == [("1g.10gb", 7, 0), ("a100", 4, 16),
                                                                       ("a100", 8, 0)]
    assert shared.topology() is None
    blocks = load_layout(LAYOUTS / "blocks.toml")
    assert [g.block for g in blocks.groups] == ["b1", "b2", "b3", "b4"] and blocks.topology() == "block"


def test_no_partitions_make_one_default_partition_of_every_node_in_file_order():
    layout = parse_layout('[[nodes]]\nnames = "b[2-3]x,a1"\ngpus = 0\n[[nodes]]\nnames = "r[1-2]n[01-02]"\n'
                          'gpus = 2\n')
    assert layout.nodes == ("b2x", "b3x", "a1", "r1n01", "r1n02", "r2n01", "r2n02")
    assert layout.partitions == (PartitionSpec(DEFAULT_PARTITION, layout.nodes, default=True),)
    assert DEFAULT_PARTITION == "gpu" and layout.topology() is None
    assert parse_layout("partitions = []\n" + A100).partitions[0].name == "gpu"


def test_a_layout_is_a_value():
    assert parse_layout(A100) == parse_layout("# the same\n" + A100) == Layout(
        (NodeGroup(("node01", "node02"), 8),), (PartitionSpec("gpu", ("node01", "node02"), True),))


@pytest.mark.parametrize(("text", "error"), [
    ("[[nodes]\n", "not valid TOML: "),
    (A100 + "gpu = 1\n", "nodes[0].gpu: unknown key (known: names, gpus, gpu_type, features, cpus, memory_mb, "
                         "switch, block, shards)"),
    ("racks = 1\n" + A100, "racks: unknown key (known: nodes, partitions)"),
    (A100 + '[[partitions]]\nname = "p"\nnodes = "node01"\nhidden = true\n',
     "partitions[0].hidden: unknown key (known: name, nodes, default)"),
    ("", "nodes: missing: a layout needs at least one [[nodes]] table"),
    ("nodes = []\n", "nodes: empty: a layout needs at least one [[nodes]] table"),
    ("nodes = 3\n", "nodes: must be an array of tables ([[nodes]]), got 3"),
    ("partitions = 'all'\n" + A100, "partitions: must be an array of tables ([[partitions]]), got 'all'"),
    ("[[nodes]]\ngpus = 8\n", "nodes[0].names: missing"),
    ("[[nodes]]\n", "nodes[0].names: missing"),
    ("[[nodes]]\nnames = 3\ngpus = 8\n",
     "nodes[0].names: must be a Slurm hostlist string such as \"node[01-04]\", got 3"),
    ('[[nodes]]\nnames = "node[01-"\ngpus = 8\n', "nodes[0].names: hostlist 'node[01-': '[' is never closed"),
    ('[[nodes]]\nnames = "node[3-1]"\ngpus = 8\n', "nodes[0].names: hostlist 'node[3-1]': range '3-1' runs backwards"),
    ('[[nodes]]\nnames = "(null)"\ngpus = 8\n', "nodes[0].names: names no node"),
    ('[[nodes]]\nnames = "node=1"\ngpus = 8\n', "nodes[0].names: not a valid Slurm node name: 'node=1'"),
    ('[[nodes]]\nnames = "node01"\n', "nodes[0].gpus: missing"),
    ('[[nodes]]\nnames = "node01"\ngpus = "x"\n', "nodes[0].gpus: must be an integer of 0 to 1024, got 'x'"),
    ('[[nodes]]\nnames = "node01"\ngpus = -1\n', "nodes[0].gpus: must be an integer of 0 to 1024, got -1"),
    ('[[nodes]]\nnames = "node01"\ngpus = true\n', "nodes[0].gpus: must be an integer of 0 to 1024, got True"),
    ('[[nodes]]\nnames = "node01"\ngpus = 2.5\n', "nodes[0].gpus: must be an integer of 0 to 1024, got 2.5"),
    ('[[nodes]]\nnames = "node01"\ngpus = 1025\n', "nodes[0].gpus: must be an integer of 0 to 1024, got 1025"),
    ('[[nodes]]\nnames = "node01"\ngpus = 9223372036854775807\n',
     "nodes[0].gpus: must be an integer of 0 to 1024, got 9223372036854775807"),
    (A100 + 'gpu_type = "a 100"\n', "nodes[0].gpu_type: must be one name of letters, digits, '_', '.', '-', "
                                    "got 'a 100'"),
    (A100 + 'gpu_type = "a100:2"\n', "nodes[0].gpu_type: must be one name of letters, digits, '_', '.', '-', "
                                     "got 'a100:2'"),
    ('[[nodes]]\nnames = "node01"\ngpus = 0\ngpu_type = "a100"\n',
     "nodes[0].gpu_type: set on a group without GPUs (gpus = 0)"),
    (A100 + 'features = "a100"\n', "nodes[0].features: must be a list of strings, got 'a100'"),
    (A100 + 'features = ["a100&b"]\n', "nodes[0].features: 'a100&b' is no Slurm feature name "
                                       "(letters, digits, '_', '.', '-')"),
    (A100 + 'features = ["a b"]\n',
     "nodes[0].features: 'a b' is no Slurm feature name (letters, digits, '_', '.', '-')"),
    (A100 + 'features = ["x", 1]\n', "nodes[0].features: 1 is no Slurm feature name (letters, digits, '_', '.', '-')"),
    (A100 + 'features = ["x", "y", "x"]\n', "nodes[0].features: 'x' is listed twice"),
    (A100 + "cpus = 0\n", "nodes[0].cpus: must be a positive integer, got 0"),
    (A100 + 'memory_mb = "lots"\n', "nodes[0].memory_mb: must be a positive integer, got 'lots'"),
    (A100 + 'switch = "leaf 1"\n', "nodes[0].switch: must be one name of letters, digits, '_', '.', '-', got 'leaf 1'"),
    (A100 + "shards = -4\n", "nodes[0].shards: must be an integer of at least 0, got -4"),
    ('[[nodes]]\nnames = "node01"\ngpus = 0\nshards = 4\n', "nodes[0].shards: set on a group without GPUs (gpus = 0)"),
    (A100 + '[[nodes]]\nnames = "node[03-04],node02"\ngpus = 4\n',
     "nodes[1].names: node02 is named twice (also in nodes[0])"),
    ('[[nodes]]\nnames = "node[01-02],node01"\ngpus = 4\n',
     "nodes[0].names: node01 is named twice (earlier in this group)"),
    (A100 + 'switch = "leaf1"\nblock = "b1"\n',
     "nodes[0].block: this layout has switches and blocks (nodes[0].switch); one layout uses one or the other"),
    (A100 + 'block = "b1"\n[[nodes]]\nnames = "node03"\ngpus = 1\n[[nodes]]\nnames = "node04"\ngpus = 1\n'
     'switch = "s"\n', "nodes[2].switch: this layout has switches and blocks (nodes[0].block); one layout uses one "
                       "or the other"),
    (A100 + '[[nodes]]\nnames = "node03"\ngpus = 1\nswitch = "leaf1"\n',
     "nodes[0].switch: missing: nodes[1] names a switch, so every group must (a node outside them could not be "
     "allocated with the others)"),
    (A100 + 'block = "b1"\n[[nodes]]\nnames = "node03"\ngpus = 1\n',
     "nodes[1].block: missing: nodes[0] names a block, so every group must (a node outside them could not be "
     "allocated with the others)"),
    (A100 + '[[partitions]]\nnodes = "node01"\n', "partitions[0].name: missing"),
    (A100 + '[[partitions]]\nname = "a b"\nnodes = "node01"\n',
     "partitions[0].name: must be a Slurm partition name (letters, digits, '_', '.', '-'), got 'a b'"),
    (A100 + '[[partitions]]\nname = "p"\n', "partitions[0].nodes: missing"),
    (A100 + '[[partitions]]\nname = "p"\nnodes = "node[01-03]"\n',
     "partitions[0].nodes: node03 is no node of this layout"),
    (A100 + '[[partitions]]\nname = "p"\nnodes = "node01"\ndefault = "yes"\n',
     "partitions[0].default: must be true or false, got 'yes'"),
    (A100 + '[[partitions]]\nname = "p"\nnodes = "node01"\n[[partitions]]\nname = "p"\nnodes = "node02"\n',
     "partitions[1].name: 'p' is named twice (also partitions[0])"),
    (A100 + '[[partitions]]\nname = "p"\nnodes = "node01"\ndefault = true\n'
     '[[partitions]]\nname = "q"\nnodes = "node02"\ndefault = true\n',
     "partitions[1].default: partitions[0] is the default already; at most one partition may be"),
])
def test_each_mistake_is_one_error_naming_the_file_table_and_key(text, error):
    with pytest.raises(LayoutError) as raised:
        parse_layout(text, "layout.toml")
    assert str(raised.value).startswith(f"layout.toml: {error}")
    assert "\n" not in str(raised.value)


def test_a_missing_file_is_a_layout_error_naming_it(tmp_path):
    with pytest.raises(LayoutError, match=r"^/nowhere/x\.toml: cannot read: No such file or directory$"):
        load_layout("/nowhere/x.toml")
    (tmp_path / "bad.toml").write_bytes(b'\xff[[nodes]]')
    with pytest.raises(LayoutError, match=r"bad\.toml: cannot read: .*utf-8"):
        load_layout(tmp_path / "bad.toml")


def test_importing_the_layout_loads_no_third_party_package():
    """scripts/dev-cluster imports it with the system python3, before any virtualenv exists."""
    code = ("import sys; import compass_slurm.layout; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'click', 'sqlalchemy', 'yaml')))")
    done = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert done.stdout == "[]\n"


# ---------------------------------------------------------------- scripts/dev-cluster


def dev_cluster(*args: str) -> subprocess.CompletedProcess[str]:
    """The script as CI runs it, with the system python3 where there is one; every case here fails before it needs
    root or Slurm."""
    python = ["/usr/bin/python3"] if Path("/usr/bin/python3").exists() else []
    return subprocess.run([*python, str(DEV_CLUSTER), *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(("body", "said"), [
    ('[[nodes]]\nnames = "node[01-02]"\ngpus = "x"\n', "nodes[0].gpus: must be an integer of 0 to 1024, got 'x'"),
    ('[[nodes]]\nnames = "node01"\ngpus = 2\nfeatures = ["a|b"]\n',
     "nodes[0].features: 'a|b' is no Slurm feature name (letters, digits, '_', '.', '-')"),
])
def test_start_with_a_bad_layout_exits_2_with_one_line_naming_the_key(tmp_path, body, said):
    bad = tmp_path / "bad.toml"
    bad.write_text(body)
    done = dev_cluster("--dir", str(tmp_path / "dir"), "start", "--layout", str(bad))
    assert (done.returncode, done.stdout, done.stderr) == (2, "", f"dev-cluster: error: {bad}: {said}\n")
    assert not (tmp_path / "dir").exists()


def test_start_refuses_a_layout_beside_the_uniform_options(tmp_path):
    done = dev_cluster("--dir", str(tmp_path), "start", "--layout", str(LAYOUTS / "mixed.toml"), "--nodes", "4",
                       "--gpu-type", "a100")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines()[-1] == ("dev-cluster: error: --layout and --nodes, --gpu-type: give a layout "
                                            "file or the uniform options, not both")


def test_a_block_layout_needs_23_11(tmp_path):
    done = dev_cluster("--dir", str(tmp_path), "start", "--slurm", "22.05", "--layout", str(LAYOUTS / "blocks.toml"))
    assert (done.returncode, done.stderr) == (2, f"dev-cluster: error: {LAYOUTS / 'blocks.toml'}: topology/block "
                                                 "needs Slurm 23.11 or later, not 22.05\n")


def test_23_11_needs_blocks_of_one_size(tmp_path):
    (tmp_path / "uneven.toml").write_text('[[nodes]]\nnames = "n[1-2]"\ngpus = 1\nblock = "b1"\n'
                                          '[[nodes]]\nnames = "n[3-5]"\ngpus = 1\nblock = "b2"\n')
    done = dev_cluster("--dir", str(tmp_path), "start", "--slurm", "23.11", "--layout", str(tmp_path / "uneven.toml"))
    assert (done.returncode, done.stderr) == (2, f"dev-cluster: error: {tmp_path / 'uneven.toml'}: Slurm 23.11's "
                                                 "topology/block needs blocks of one size, not b1 of 2, b2 of 3\n")


@pytest.fixture(scope="module")
def script():
    """scripts/dev-cluster as a module: its config writers run here without root or Slurm."""
    loader = importlib.machinery.SourceFileLoader("dev_cluster_script", str(DEV_CLUSTER))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    sys.modules[loader.name] = module  # its dataclasses look their module up
    loader.exec_module(module)
    yield module
    del sys.modules[loader.name]


def configs(script, tmp_path: Path, request, release: str = "22.05") -> dict[str, str]:
    paths = script.Paths(tmp_path)
    script.write_configs(paths, request, script.Slurm(release))
    return {p.name: p.read_text() for p in paths.etc.iterdir()}


def test_the_uniform_options_are_a_one_group_layout(script, tmp_path):
    request = script.Request.uniform(16, 8, "a100", slurm="22.05")
    assert request.layout.groups == (NodeGroup(tuple(f"node{i:02d}" for i in range(1, 17)), 8, "a100"),)
    written = configs(script, tmp_path, request)
    port = script.FIRST_NODE_PORT
    header = written["slurm.conf"].splitlines()[0]
    assert header == "# written by scripts/dev-cluster: 16 nodes x 8 a100 GPUs, Slurm 22.05"
    assert written["slurm.conf"].endswith(
        f"NodeName=node[01-16] NodeHostname=localhost NodeAddr=127.0.0.1 Port=[{port}-{port + 15}] CPUs=32 "
        "RealMemory=256000 Gres=gpu:a100:8 State=UNKNOWN\n"
        "PartitionName=gpu Nodes=node[01-16] Default=YES MaxTime=INFINITE State=UP\n")
    assert "TopologyPlugin" not in written["slurm.conf"] and "topology.conf" not in written
    assert written["gres.conf"] == f"NodeName=node[01-16] Name=gpu Type=a100 File={tmp_path}/dev/nvidia[0-7]\n"
    assert script.Request.uniform(1, 1, None).layout.nodes == ("node01",)
    assert script.Request.uniform(100, 1, None).layout.nodes[-1] == "node100"


def test_a_mixed_layout_writes_one_node_line_per_group_and_a_tree(script, tmp_path):
    text = (LAYOUTS / "mixed.toml").read_text()
    written = configs(script, tmp_path, script.Request(text, source="mixed.toml"))
    conf, port = written["slurm.conf"], script.FIRST_NODE_PORT
    assert "GresTypes=gpu\n" in conf and "DefMemPerCPU=8000\n" in conf
    assert "TopologyPlugin=topology/tree\n" in conf
    assert [line for line in conf.splitlines() if line.startswith(("NodeName", "PartitionName"))] == [
        f"NodeName=node[01-02] NodeHostname=localhost NodeAddr=127.0.0.1 Port=[{port}-{port + 1}] CPUs=64 "
        "RealMemory=512000 Gres=gpu:a100:8 Feature=a100,80gb State=UNKNOWN",
        f"NodeName=node02c NodeHostname=localhost NodeAddr=127.0.0.1 Port={port + 2} CPUs=32 RealMemory=256000 "
        "State=UNKNOWN",
        f"NodeName=node[03-04] NodeHostname=localhost NodeAddr=127.0.0.1 Port=[{port + 3}-{port + 4}] CPUs=64 "
        "RealMemory=512000 Gres=gpu:a100:8 Feature=a100,80gb State=UNKNOWN",
        f"NodeName=node[05-08] NodeHostname=localhost NodeAddr=127.0.0.1 Port=[{port + 5}-{port + 8}] CPUs=96 "
        "RealMemory=1024000 Gres=gpu:h100:8 Feature=h100,80gb State=UNKNOWN",
        f"NodeName=node[09-12] NodeHostname=localhost NodeAddr=127.0.0.1 Port=[{port + 9}-{port + 12}] CPUs=32 "
        "RealMemory=256000 Gres=gpu:v100:4 Feature=v100,32gb State=UNKNOWN",
        "PartitionName=gpu Nodes=node[01-12] Default=YES MaxTime=INFINITE State=UP",
        "PartitionName=big Nodes=node[01-08] Default=NO MaxTime=INFINITE State=UP",
        "PartitionName=v100 Nodes=node[09-12] Default=NO MaxTime=INFINITE State=UP",
        "PartitionName=cpu Nodes=node02c Default=NO MaxTime=INFINITE State=UP"]
    assert written["gres.conf"].splitlines() == [
        f"NodeName=node[01-02] Name=gpu Type=a100 File={tmp_path}/dev/nvidia[0-7]",
        f"NodeName=node[03-04] Name=gpu Type=a100 File={tmp_path}/dev/nvidia[0-7]",
        f"NodeName=node[05-08] Name=gpu Type=h100 File={tmp_path}/dev/nvidia[0-7]",
        f"NodeName=node[09-12] Name=gpu Type=v100 File={tmp_path}/dev/nvidia[0-3]"]
    assert written["topology.conf"].splitlines()[1:] == [
        "SwitchName=leaf1 Nodes=node02c,node[01-04]", "SwitchName=leaf2 Nodes=node[05-08]",
        "SwitchName=leaf3 Nodes=node[09-12]", "SwitchName=spine Switches=leaf1,leaf2,leaf3"]


def test_shards_cpu_only_nodes_and_a_leaf_named_spine(script, tmp_path):
    text = ('[[nodes]]\nnames = "g[1-2]"\ngpus = 4\nshards = 8\nswitch = "spine"\ncpus = 8\nmemory_mb = 32000\n'
            '[[nodes]]\nnames = "c1"\ngpus = 0\nswitch = "cpu"\n')
    written = configs(script, tmp_path, script.Request(text, source="s.toml"))
    assert "GresTypes=gpu,shard\n" in written["slurm.conf"] and "DefMemPerCPU=4000\n" in written["slurm.conf"]
    assert "Gres=gpu:4,shard:8 State" in written["slurm.conf"] and " CPUs=32 RealMemory=256000 State" in written["slurm.conf"]
    assert written["gres.conf"].splitlines() == [f"NodeName=g[1-2] Name=gpu File={tmp_path}/dev/nvidia[0-3]",
                                                 "NodeName=g[1-2] Name=shard Count=8"]
    assert written["topology.conf"].splitlines()[-1] == "SwitchName=spine0 Switches=spine,cpu"


@pytest.mark.parametrize(("release", "sizes"), [("23.11", []), ("24.11", ["BlockSizes=2,4,8"])])
def test_blocks_are_sized_as_each_release_reads_them(script, tmp_path, release, sizes):
    text = (LAYOUTS / "blocks.toml").read_text()
    written = configs(script, tmp_path, script.Request(text, source="blocks.toml", slurm=release), release)
    assert "TopologyPlugin=topology/block\n" in written["slurm.conf"]
    assert written["topology.conf"].splitlines()[1:] == [
        "BlockName=b1 Nodes=node[01-02]", "BlockName=b2 Nodes=node[03-04]", "BlockName=b3 Nodes=node[05-06]",
        "BlockName=b4 Nodes=node[07-08]", *sizes]


def test_the_recorded_request_holds_the_layout_text(script):
    """A running cluster is reused only for the same content: an edited file means a restart."""
    text = (LAYOUTS / "mixed.toml").read_text()
    assert script.Request(text, source="a.toml") == script.Request(text, source="b.toml")
    assert script.Request(text) != script.Request(text.replace("cpus = 64", "cpus = 48"))
    assert script.Request(text) != script.Request(text, job_submit_lua=True)
