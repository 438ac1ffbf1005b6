"""Checks that a node name, job id or partition is plain Slurm syntax before it reaches a command line.

Arguments go to scontrol as an argument list (no shell), so the risk is not
shell injection but scontrol's own parser: a value with ``=``, spaces, commas
or brackets could smuggle in another field (``node01 Priority=1``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from .errors import SlurmNameError

_JOB_ID = re.compile(r"[1-9]\d{0,9}(?:_\d{1,10})?")
# a SLUID as Slurm prints it: 's' and 13 digits of Crockford's base 32 (src/common/sluid.c)
_SLUID = re.compile(r"s[0-9A-HJKMNP-TV-Z]{13}")
# Slurm node and partition names: letters, digits and a few joiners; no '=', ',', '[', space
_NODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_PARTITION = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,63}")


def _check(kind: str, pattern: re.Pattern[str], value: object) -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise SlurmNameError(f"not a valid Slurm {kind}: {value!r}")
    return value


def job_id(value: object) -> str:
    """``1234`` or an array task ``1234_5``."""
    return _check("job id", _JOB_ID, str(value) if isinstance(value, int) else value)


def sluid(value: object) -> str:
    """A job record's SLUID, ``s685M8Y3T4EB00``."""
    return _check("SLUID", _SLUID, value)


def node_name(value: object) -> str:
    return _check("node name", _NODE, value)


def partition(value: object) -> str:
    return _check("partition name", _PARTITION, value)


def gpu_type(value: object) -> str:
    """A GRES type such as ``a100`` or ``1g.10gb``."""
    return _check("GRES type", _PARTITION, value)


def node_names(values: Iterable[object]) -> list[str]:
    names = [node_name(v) for v in values]
    if not names:
        raise SlurmNameError("an empty node list")
    return names
