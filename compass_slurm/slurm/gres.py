"""GRES and TRES strings as Slurm prints them, reduced to what placement needs: GPUs.

Accepted shapes (comma lists may mix them and other resources):

- node GRES: ``gpu:8``, ``gpu:a100:8``, ``gpu:a100:8(S:0-1)``, ``gpu`` (count 1)
- allocated GRES: ``gpu:a100:2(IDX:0-1)``, ``gpu:0``
- job requests: ``gres:gpu:2``, ``gres:gpu:a100:2``, ``gres/gpu:4``
- TRES: ``gres/gpu=4``, ``gres/gpu:a100=4``, ``cpu=1,mem=8000M,gres/gpu=2``
- nothing: ``""``, ``(null)``, ``N/A``

A count is read as Slurm reads it (strtol): ``gpu:+1`` and ``gpu: 1`` are one GPU;
sbatch passes such requests through and slurmctld accepts them, so one of them
must not make the daemon skip its cycles.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

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
    if text is None or text.strip().lower() in _EMPTY:
        return []
    items = []
    for part in _split(text.strip()):
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
    return items


def gpu_count(text: str | None) -> int:
    """Total GPUs in a GRES/TRES string: ``gpu:a100:2(IDX:0-1),gpu:v100:1`` -> 3."""
    return sum(item.count for item in parse(text) if item.name == "gpu")


def gpu_type(text: str | None) -> str | None:
    """The GPU type named in a GRES string, None when untyped (first one if several)."""
    return next((item.type for item in parse(text) if item.name == "gpu" and item.type), None)
