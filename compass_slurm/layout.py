"""Cluster layouts: groups of identical nodes with their GPUs, features and switches, read from a TOML file.

    [[nodes]]                  # one table per group of identical nodes
    names = "node[01-04]"      # a Slurm hostlist (required)
    gpus = 8                   # GPUs per node (required; 0: a CPU-only group; at most 1024)
    gpu_type = "a100"          # typed GRES gpu:a100:8; MIG profile names such as "1g.10gb" are types too
    features = ["a100", "80gb"]
    cpus = 64                  # CPUs and RealMemory; unset: whoever builds the cluster decides
    memory_mb = 512000
    switch = "leaf1"           # a topology/tree leaf switch, or
    # block = "b1"             # a topology/block block (Slurm 23.11+)
    shards = 16                # gres/shard per node (shared GPUs)

    [[partitions]]             # optional; none: one default partition "gpu" of every node
    name = "big"
    nodes = "node[01-04]"
    default = true

One layout uses switches or blocks, never both, and then every group names one (a node
outside every switch or block could not be allocated with the others). Every error is a
LayoutError whose message names the file, the table and the key.

Standard library only (and compass_slurm.slurm's stdlib-only hostlist and names, and the engine's limits):
scripts/dev-cluster imports this with the system python3, before any virtualenv exists.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from dataclasses import dataclass
from typing import Any

from .engine.model import MAX_NODE_GPUS
from .slurm import hostlist, names as slurm_names
from .slurm.errors import SlurmError

#: the partition of a layout that names none (the dev cluster's partition)
DEFAULT_PARTITION = "gpu"
NODE_KEYS = ("names", "gpus", "gpu_type", "features", "cpus", "memory_mb", "switch", "block", "shards")
PARTITION_KEYS = ("name", "nodes", "default")
TOP_KEYS = ("nodes", "partitions")
# Slurm splits a constraint at & | , ( ) [ ] * and spaces; these characters alone make one feature
_FEATURE = re.compile(r"[A-Za-z0-9_.-]+")
# a switch, block or GRES type: one word of Slurm's config syntax (no '=', ',', ':', brackets or spaces)
_WORD = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,63}")


class LayoutError(ValueError):
    """A layout file that cannot be used; the message names the file, the table index and the key."""


@dataclass(frozen=True)
class NodeGroup:
    names: tuple[str, ...]
    gpus: int
    gpu_type: str | None = None
    features: tuple[str, ...] = ()
    cpus: int | None = None
    memory_mb: int | None = None
    switch: str | None = None
    block: str | None = None
    shards: int = 0


@dataclass(frozen=True)
class PartitionSpec:
    name: str
    nodes: tuple[str, ...]
    default: bool = False


@dataclass(frozen=True)
class Layout:
    groups: tuple[NodeGroup, ...]
    partitions: tuple[PartitionSpec, ...]

    @property
    def nodes(self) -> tuple[str, ...]:
        """Every node, in file order."""
        return tuple(name for group in self.groups for name in group.names)

    def topology(self) -> str | None:
        """The topology plugin the layout needs: "tree" (switches), "block" (blocks) or None."""
        if any(group.switch for group in self.groups):
            return "tree"
        if any(group.block for group in self.groups):
            return "block"
        return None


def load_layout(path: str | os.PathLike) -> Layout:
    """The layout in a TOML file; LayoutError names the file (as given) when it cannot be read or used."""
    source = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError) as err:
        raise LayoutError(f"{source}: cannot read: {getattr(err, 'strerror', None) or err}") from None
    return parse_layout(text, source)


def parse_layout(text: str, source: str = "layout") -> Layout:
    """The layout in TOML ``text``; ``source`` names it in errors."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise LayoutError(f"{source}: not valid TOML: {err}") from None
    _known(data, TOP_KEYS, source, "")
    if "nodes" not in data:
        raise LayoutError(f"{source}: nodes: missing: a layout needs at least one [[nodes]] table")
    groups = tuple(_group(table, f"nodes[{i}]", source)
                   for i, table in enumerate(_tables(data["nodes"], "nodes", source, empty_ok=False)))
    _check_unique_nodes(groups, source)
    _check_topology(groups, source)
    every = tuple(name for group in groups for name in group.names)
    partitions = tuple(_partition(table, f"partitions[{i}]", source, set(every))
                       for i, table in enumerate(_tables(data.get("partitions", []), "partitions", source)))
    _check_partitions(partitions, source)
    return Layout(groups, partitions or (PartitionSpec(DEFAULT_PARTITION, every, default=True),))


# ---------------------------------------------------------------- one table


def _group(table: dict[str, Any], where: str, source: str) -> NodeGroup:
    _known(table, NODE_KEYS, source, where)
    fail = _Fail(source, where)
    names = _hostlist(table, "names", fail)
    gpus = _integer(table, "gpus", fail, minimum=0, maximum=MAX_NODE_GPUS, required=True)
    group = NodeGroup(
        names=names,
        gpus=gpus,
        gpu_type=_word(table, "gpu_type", fail),
        features=_features(table, fail),
        cpus=_integer(table, "cpus", fail, minimum=1),
        memory_mb=_integer(table, "memory_mb", fail, minimum=1),
        switch=_word(table, "switch", fail),
        block=_word(table, "block", fail),
        shards=_integer(table, "shards", fail, minimum=0) or 0,
    )
    for key in ("gpu_type", "shards"):
        if table.get(key) and not gpus:
            raise fail(key, "set on a group without GPUs (gpus = 0)")
    for name in group.names:
        try:
            slurm_names.node_name(name)
        except SlurmError as err:
            raise fail("names", str(err)) from None
    return group


def _partition(table: dict[str, Any], where: str, source: str, known: set[str]) -> PartitionSpec:
    _known(table, PARTITION_KEYS, source, where)
    fail = _Fail(source, where)
    name = table.get("name")
    if name is None:
        raise fail("name", "missing")
    try:
        slurm_names.partition(name)
    except SlurmError:
        raise fail("name", f"must be a Slurm partition name (letters, digits, '_', '.', '-'), got {name!r}") from None
    nodes = _hostlist(table, "nodes", fail)
    for node in nodes:
        if node not in known:
            raise fail("nodes", f"{node} is no node of this layout")
    default = table.get("default", False)
    if not isinstance(default, bool):
        raise fail("default", f"must be true or false, got {default!r}")
    return PartitionSpec(name, nodes, default)


class _Fail:
    """Builds the LayoutError of one key of one table."""

    def __init__(self, source: str, where: str) -> None:
        self.source, self.where = source, where

    def __call__(self, key: str, message: str) -> LayoutError:
        return LayoutError(f"{self.source}: {self.where}.{key}: {message}")


def _known(table: dict[str, Any], keys: tuple[str, ...], source: str, where: str) -> None:
    for key in table:
        if key not in keys:
            at = f"{where}.{key}" if where else key
            raise LayoutError(f"{source}: {at}: unknown key (known: {', '.join(keys)})")


def _tables(value: Any, key: str, source: str, empty_ok: bool = True) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
        raise LayoutError(f"{source}: {key}: must be an array of tables ([[{key}]]), got {value!r}")
    if not value and not empty_ok:
        raise LayoutError(f"{source}: {key}: empty: a layout needs at least one [[{key}]] table")
    return value


def _integer(table: dict[str, Any], key: str, fail: _Fail, minimum: int, maximum: float = math.inf,
             required: bool = False) -> int | None:
    value = table.get(key)
    if value is None:
        if required:
            raise fail(key, "missing")
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        wanted = (f"an integer of {minimum} to {maximum}" if maximum < math.inf else
                  "a positive integer" if minimum == 1 else f"an integer of at least {minimum}")
        raise fail(key, f"must be {wanted}, got {value!r}")
    return value


def _word(table: dict[str, Any], key: str, fail: _Fail) -> str | None:
    value = table.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not _WORD.fullmatch(value):
        raise fail(key, f"must be one name of letters, digits, '_', '.', '-', got {value!r}")
    return value


def _features(table: dict[str, Any], fail: _Fail) -> tuple[str, ...]:
    value = table.get("features", [])
    if not isinstance(value, list):
        raise fail("features", f"must be a list of strings, got {value!r}")
    for feature in value:
        if not isinstance(feature, str) or not _FEATURE.fullmatch(feature):
            raise fail("features", f"{feature!r} is no Slurm feature name (letters, digits, '_', '.', '-')")
    if len(set(value)) < len(value):
        twice = next(f for f in value if value.count(f) > 1)
        raise fail("features", f"{twice!r} is listed twice")
    return tuple(value)


def _hostlist(table: dict[str, Any], key: str, fail: _Fail) -> tuple[str, ...]:
    value = table.get(key)
    if value is None:
        raise fail(key, "missing")
    if not isinstance(value, str):
        raise fail(key, f"must be a Slurm hostlist string such as \"node[01-04]\", got {value!r}")
    try:
        expanded = hostlist.expand(value)
    except SlurmError as err:
        raise fail(key, str(err)) from None
    if not expanded:
        raise fail(key, "names no node")
    return tuple(expanded)


# ---------------------------------------------------------------- the whole layout


def _check_unique_nodes(groups: tuple[NodeGroup, ...], source: str) -> None:
    seen: dict[str, int] = {}
    for index, group in enumerate(groups):
        for name in group.names:
            if name in seen:
                also = "earlier in this group" if seen[name] == index else f"also in nodes[{seen[name]}]"
                raise LayoutError(f"{source}: nodes[{index}].names: {name} is named twice ({also})")
            seen[name] = index


def _check_topology(groups: tuple[NodeGroup, ...], source: str) -> None:
    """Switches or blocks, not both; and then on every group."""
    first = {key: next((i for i, g in enumerate(groups) if getattr(g, key)), None) for key in ("switch", "block")}
    if None not in first.values():
        used, later = sorted(first, key=lambda key: (first[key], key == "block"))
        raise LayoutError(f"{source}: nodes[{first[later]}].{later}: this layout has switches and blocks "
                          f"(nodes[{first[used]}].{used}); one layout uses one or the other")
    for key, index in first.items():
        missing = next((i for i, g in enumerate(groups) if not getattr(g, key)), None) if index is not None else None
        if missing is not None:
            raise LayoutError(f"{source}: nodes[{missing}].{key}: missing: nodes[{index}] names a {key}, so every "
                              f"group must (a node outside them could not be allocated with the others)")


def _check_partitions(partitions: tuple[PartitionSpec, ...], source: str) -> None:
    first: dict[str, int] = {}
    default = None
    for index, partition in enumerate(partitions):
        if partition.name in first:
            raise LayoutError(f"{source}: partitions[{index}].name: {partition.name!r} is named twice "
                              f"(also partitions[{first[partition.name]}])")
        first[partition.name] = index
        if partition.default:
            if default is not None:
                raise LayoutError(f"{source}: partitions[{index}].default: partitions[{default}] is the default "
                                  "already; at most one partition may be")
            default = index
