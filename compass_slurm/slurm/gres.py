"""GRES and TRES strings as Slurm prints them, reduced to what placement needs: GPUs.

Accepted shapes (comma lists may mix them and other resources):

- node GRES: ``gpu:8``, ``gpu:a100:8``, ``gpu:a100:8(S:0-1)``, ``gpu`` (count 1)
- allocated GRES: ``gpu:a100:2(IDX:0-1)``, ``gpu:0``
- job requests: ``gres:gpu:2``, ``gres:gpu:a100:2``, ``gres/gpu:4``
- TRES: ``gres/gpu=4``, ``gres/gpu:a100=4``, ``cpu=1,mem=8000M,gres/gpu=2``
- sbatch's ``--gres`` and ``--gpus``: ``gpu:a100:2,nvme:1``, ``a100:2`` (``typed_count``)
- nothing: ``""``, ``(null)``, ``N/A``

A count is read as Slurm reads it (strtol): ``gpu:+1`` and ``gpu: 1`` are one GPU;
sbatch passes such requests through and slurmctld accepts them, so one of them
must not make the daemon skip its cycles.

Every reader of Slurm syntax goes through this module: the JSON and text parsers, the
sbatch wrapper's argument reader and the simulator's ``sacct`` loader.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

from .errors import SlurmParseError

_EMPTY = {"", "(null)", "n/a", "none"}
# name[:type][:count][(detail)] after an optional gres: / gres/ prefix
_ITEM = re.compile(
    r"(?:gres[:/])?(?P<name>[A-Za-z][\w.-]*)"
    r"(?::(?P<type>[A-Za-z_][\w.-]*|\d+[A-Za-z_][\w.-]*))?"
    r"(?:[:=]\s*\+?(?P<count>\d+)(?P<unit>[KMGTP]?))?"
    r"(?:\((?P<detail>[^()]*)\))?"
)
_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4, "P": 1024**5}


class GresError(SlurmParseError):
    """A GRES or TRES string we cannot read."""


@dataclass(frozen=True, slots=True)
class GresItem:
    """One resource of a GRES list: ``gpu:a100:2(IDX:0-1)`` -> name gpu, type a100, count 2."""

    name: str
    type: str | None
    count: int
    detail: str | None = None


def _split(text: str) -> list[str]:
    """Split on commas outside parentheses (``(S:0,1)`` keeps its comma)."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth < 0:
            raise GresError(f"GRES {text!r}: ')' without '(' at position {i}")
        if char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise GresError(f"GRES {text!r}: '(' is never closed")
    parts.append(text[start:])
    return parts


def parse(text: str | None) -> list[GresItem]:
    """Every resource named in a GRES or TRES string."""
    if text is None:
        return []
    return list(_parse(text))


@functools.lru_cache(maxsize=8192)
def _parse(text: str) -> tuple[GresItem, ...]:
    # Cached: a cluster's jobs and nodes repeat a handful of strings ("gres:gpu:1", "gpu:8") thousands of times.
    if text.strip().lower() in _EMPTY:
        return ()
    items = []
    for part in _split(text.strip()) if "(" in text or ")" in text else text.strip().split(","):
        part = part.strip()
        match = _ITEM.fullmatch(part)
        if not match:
            raise GresError(f"GRES {text!r}: cannot read {part!r}")
        count = match.group("count")
        items.append(
            GresItem(
                name=match.group("name"),
                type=match.group("type"),
                count=int(count) * _UNITS[match.group("unit")] if count is not None else 1,
                detail=match.group("detail"),
            )
        )
    return tuple(items)


def gpu_count(text: str | None) -> int:
    """Total GPUs in a GRES/TRES string: ``gpu:a100:2(IDX:0-1),gpu:v100:1`` -> 3."""
    return sum(item.count for item in parse(text) if item.name == "gpu")


def gpu_type(text: str | None) -> str | None:
    """The GPU type named in a GRES string, None when untyped (first one if several)."""
    return next((item.type for item in parse(text) if item.name == "gpu" and item.type), None)


def tres_gpus(text: str | None) -> int:
    """GPUs in a TRES list such as sacct's AllocTRES: ``cpu=4,mem=1G,gres/gpu=2,gres/gpu:a100=2`` -> 2.

    TRES names the total (``gres/gpu=N``) beside each type (``gres/gpu:TYPE=N``): the total
    when given, else the sum of the types. Only the GPU items are read.
    """
    gpus = [part.strip() for part in (text or "").split(",") if part.strip().startswith("gres/gpu")]
    items = [item for item in parse(",".join(gpus)) if item.name == "gpu"] if gpus else []
    total = [item.count for item in items if item.type is None]
    return total[-1] if total else sum(item.count for item in items)


def typed_count(text: str) -> tuple[int, str | None]:
    """``[type:]count[,...]`` (sbatch's --gpus, --gpus-per-node, --gpus-per-task): the count, and the type
    when exactly one is named."""
    total, types = 0, set()
    for part in text.split(","):
        part = part.strip()
        if not part.rpartition(":")[2].isdigit():
            raise GresError(f"{text!r} is not [type:]count")
        (item,) = parse(f"gpu:{part}")
        total += item.count
        types.add(item.type)
    return total, types.pop() if len(types) == 1 else None


def gpu_types(text: str | None) -> tuple[str, ...]:
    """Every GPU type a node's GRES names, in order, each once: ``gpu:1g.10gb:4,gpu:3g.40gb:1`` -> both."""
    return tuple(dict.fromkeys(item.type for item in parse(text) if item.name == "gpu" and item.type))


def node_gpu_type(types: tuple[str, ...]) -> str | None:
    """A node's one GPU type; None for none or several: a typed job could then not be told apart by the count
    alone (``gpus`` sums every type), so no typed job is matched with it."""
    return types[0] if len(types) == 1 else None


def shard_count(text: str | None) -> int:
    """Shards (gres/shard) in a GRES string: ``gpu:4,shard:16`` -> 16, ``shard:a100:6(2/4,0/4,4/4,0/4)`` -> 6
    (22.05's GresUsed: the GPUs holding shards, a lower bound: see shared_gpus)."""
    return sum(item.count for item in parse(text) if item.name == "shard")


def shared_gpus(used: str | None, gpus: int) -> int:
    """GPUs with a shard allocated, from a node's GresUsed. From 23.11 Slurm prints a shared GRES's count per GPU,
    allocated/configured, ``shard:a100:7(3/4,4/4,0/4,0/4)`` (2 here; 26.05 says ``-/4`` for a GPU a GPU job holds);
    22.05 the GPUs that hold shards, ``shard:a100:2(IDX:0-1)``. Where it prints no such detail (shards configured
    without File=), every allocated shard may sit on a GPU of its own: min(shards used, gpus)."""
    shared = 0
    for item in parse(used):
        if item.name != "shard" or not item.count:
            continue
        parts = (item.detail or "").split(",")
        if item.detail and item.detail.startswith("IDX:"):
            shared += item.count  # (22.05 counts the GPUs, not the shards)
        elif item.detail and all(_fraction(part) for part in parts):
            shared += sum(part.split("/")[0] not in ("0", "-") for part in parts)
        else:
            shared += item.count
    return min(gpus, shared)


def _fraction(part: str) -> bool:
    allocated, _, configured = part.partition("/")
    return (allocated.isdecimal() or allocated == "-") and configured.isdecimal()


def node_gres(total: str | None, used: str | None) -> dict[str, Any]:
    """A node's GPU and shard fields (SlurmNode's keywords) from its GRES and GRES in use, as every read prints
    them: ``gpu:a100:8,shard:16`` and ``gpu:a100:2(IDX:0-1),shard:a100:3(3/2,0/2,...)``."""
    types = gpu_types(total)
    gpus = gpu_count(total)
    return {"gpus": gpus, "gpus_used": gpu_count(used), "gpu_type": node_gpu_type(types), "gpu_types": types,
            "shards": shard_count(total), "shards_used": shard_count(used), "gpus_shared": shared_gpus(used, gpus)}
