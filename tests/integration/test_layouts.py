"""Heterogeneous dev clusters (`scripts/dev-cluster start --layout FILE`) as Slurm itself reports them.

tests/data/layouts/mixed.toml and shared.toml on every release, blocks.toml on 23.11 and later: one cluster start
per layout and release, its tests run on it together. The hook is installed (it changes nothing until a daemon
writes its config), so tests/integration/test_daemon_hetero.py runs on the same clusters.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator

import pytest
from devcluster import LAYOUTS, Layout, releases_under_test, session_layout_cluster, use_cluster

from compass_slurm.layout import load_layout
from compass_slurm.slurm.hostlist import expand

pytestmark = pytest.mark.slurm
MIXED, SHARED, BLOCKS = LAYOUTS / "mixed.toml", LAYOUTS / "shared.toml", LAYOUTS / "blocks.toml"
#: fixture -> its layout file
FILES = {"mixed": MIXED, "shared": SHARED, "blocks": BLOCKS}


def _layout_cluster(name: str, releases: list[str]):
    """A session fixture ``name``: FILES[name] running on each of ``releases``; its value is the release."""

    @pytest.fixture(scope="session", params=releases, name=name)
    def cluster(request: pytest.FixtureRequest) -> Iterator[str]:
        with session_layout_cluster(FILES[name], request.param, job_submit_lua=True):
            yield request.param

    return cluster


_mixed = _layout_cluster("mixed", releases_under_test())
_shared = _layout_cluster("shared", releases_under_test())
_blocks = _layout_cluster("blocks", [r for r in releases_under_test() if r >= "23.11"])


@pytest.fixture(autouse=True)
def _own_layout(request: pytest.FixtureRequest) -> None:
    """This test's layout running again when the other integration tests' cluster replaced it meanwhile."""
    for name in FILES.keys() & set(request.fixturenames):
        use_cluster(Layout.of_file(FILES[name], request.getfixturevalue(name), job_submit_lua=True))


class Jobs:
    """sbatch'ed sleeps, cancelled when the test ends."""

    def __init__(self) -> None:
        self.ids: list[str] = []

    def run(self, *args: str) -> tuple[str, ...]:
        """Submit, wait until it runs; its nodes."""
        job = subprocess.run(["sbatch", "--parsable", "--output=/dev/null", *args, "--wrap", "sleep 300"],
                             check=True, capture_output=True, text=True).stdout.strip().split(";")[0]
        self.ids.append(job)
        deadline, seen = time.monotonic() + 30, ""
        while time.monotonic() < deadline:
            seen = subprocess.run(["squeue", "--noheader", f"--jobs={job}", "--format=%T|%N"],
                                  capture_output=True, text=True).stdout.strip()
            if seen.startswith("RUNNING|"):
                return tuple(expand(seen.partition("|")[2]))
            time.sleep(0.2)
        raise AssertionError(f"job {job} ({' '.join(args)}) not running after 30 s (last: {seen!r})")

    def gres(self, job_index: int) -> str:
        """The job's per-node GRES as `scontrol show job -d` says it, e.g. ``gpu:a100:1``."""
        shown = scontrol("show", "job", "-d", self.ids[job_index])
        return re.search(r" GRES=(\S+?)\(", shown).group(1)


@pytest.fixture
def jobs() -> Iterator[Jobs]:
    helper = Jobs()
    yield helper
    if helper.ids:
        subprocess.run(["scancel", *helper.ids], check=False)


def scontrol(*args: str) -> str:
    return subprocess.run(["scontrol", *args], check=True, capture_output=True, text=True).stdout


def records(text: str, key: str) -> dict[str, dict[str, str]]:
    """`scontrol show ... --oneliner` style text: the value of ``key`` -> every KEY=VALUE of its line."""
    out = {}
    for line in text.splitlines():
        fields = dict(re.findall(r"(\w+)=(\S*)", line))
        if key in fields:
            out[fields[key]] = fields
    return out


def test_nodes_and_partitions_are_the_files(mixed):
    layout = load_layout(MIXED)
    nodes = records(scontrol("show", "node", "--oneliner"), "NodeName")
    seen = {name: (n["CPUTot"], n["RealMemory"], n["AvailableFeatures"], n["Gres"], n["Partitions"])
            for name, n in nodes.items()}
    wanted = {name: (str(g.cpus), str(g.memory_mb), ",".join(g.features) or "(null)",
                     f"gpu:{g.gpu_type}:{g.gpus}" if g.gpus else "(null)",
                     ",".join(p.name for p in layout.partitions if name in p.nodes))
              for g in layout.groups for name in g.names}
    assert seen == wanted
    partitions = records(scontrol("show", "partition", "--oneliner"), "PartitionName")
    assert {name: (tuple(expand(p["Nodes"])), p["Default"]) for name, p in partitions.items()} == {
        p.name: (p.nodes, "YES" if p.default else "NO") for p in layout.partitions}


def test_leaf_switches_under_one_spine_are_the_files(mixed):
    switches = records(scontrol("show", "topology"), "SwitchName")
    seen = {name: (s["Level"], set(expand(s["Nodes"])), s.get("Switches")) for name, s in switches.items()}
    leaves: dict[str, set[str]] = {}
    for group in load_layout(MIXED).groups:
        leaves.setdefault(group.switch, set()).update(group.names)
    assert seen == {**{leaf: ("0", names, None) for leaf, names in leaves.items()},
                    "spine": ("1", set(load_layout(MIXED).nodes), "leaf1,leaf2,leaf3")}


def test_a_constraint_or_a_type_picks_the_nodes_of_that_type(mixed, jobs):
    by_type: dict[str | None, list[str]] = {}
    for group in load_layout(MIXED).groups:
        by_type.setdefault(group.gpu_type, []).extend(group.names)
    a100, h100, v100 = by_type["a100"], by_type["h100"], by_type["v100"]
    assert set(jobs.run("-C", "a100", "--gres=gpu:1")) <= set(a100)
    assert jobs.gres(0) == "gpu:a100:1"
    assert set(jobs.run("--gres=gpu:v100:2")) <= set(v100)
    assert jobs.gres(1) == "gpu:v100:2"
    pair = jobs.run("-N2", "--gpus-per-node=8", "--contiguous", "--switches=1", "-C", "h100")
    assert len(pair) == 2 and set(pair) <= set(h100)


def test_mig_types_and_shards(shared, jobs):
    layout = load_layout(SHARED)
    gres = {name: n["Gres"] for name, n in records(scontrol("show", "node", "--oneliner"), "NodeName").items()}
    assert gres == {name: f"gpu:{g.gpu_type}:{g.gpus}" + (f",shard:{g.gpu_type}:{g.shards}" if g.shards else "")
                    for g in layout.groups for name in g.names}
    mig, sharded, _ = (g.names for g in layout.groups)
    assert set(jobs.run("--gres=gpu:1g.10gb:2")) <= set(mig)
    assert jobs.gres(0) == "gpu:1g.10gb:2"
    assert set(jobs.run("--gres=shard:3")) <= set(sharded)
    assert jobs.gres(1).startswith("shard:")  # 22.05 says shard:3, later releases shard:a100:3


def test_blocks_are_the_files_and_a_job_of_one_block_gets_one(blocks, jobs):
    layout = load_layout(BLOCKS)
    members: dict[str, list[str]] = {}
    for group in layout.groups:
        members.setdefault(group.block, []).extend(group.names)
    shown = records(scontrol("show", "topology"), "BlockName")
    assert {name: tuple(expand(b["Nodes"])) for name, b in shown.items()} == {b: tuple(n) for b, n in members.items()}
    if blocks >= "24.05":
        assert {b["BlockSize"] for b in shown.values()} == {"2"}
    pair = jobs.run("-N2", "--gres=gpu:8", "-C", "h100")
    assert list(pair) in [members["b1"], members["b2"]]
    assert set(jobs.run("-N4", "--gres=gpu:4", "-C", "a100")) == {*members["b3"], *members["b4"]}
