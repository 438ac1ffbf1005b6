"""Parsers for ``sinfo --json`` and ``squeue --json``.

Written against Slurm 22.05 (openapi v0.0.38) and tolerant of the later shapes
(v0.0.39+): numbers wrapped as ``{"set": .., "number": ..}`` and states given as
lists. Anything else unexpected raises SlurmParseError naming the field.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from . import gres
from .errors import SlurmParseError
from .hostlist import expand
from .state import SlurmJob, SlurmNode
from .values import held, node_state


def load(text: str, command: str) -> Mapping[str, Any]:
    """The JSON document a command printed; Slurm's own ``errors`` list becomes an exception."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise SlurmParseError(f"{command}: not JSON ({err.msg} at line {err.lineno} column {err.colno})") from None
    except (ValueError, RecursionError) as err:  # a number too long for int(), nesting too deep
        raise SlurmParseError(f"{command}: unreadable JSON ({err})") from None
    if not isinstance(doc, Mapping):
        raise SlurmParseError(f"{command}: expected a JSON object, got {type(doc).__name__}")
    errors = doc.get("errors") or []
    if not isinstance(errors, list):
        raise SlurmParseError(f"{command}: field 'errors' is not a list: {errors!r}")
    errors = [e for e in errors if e]
    if errors:
        raise SlurmParseError(f"{command}: Slurm reported errors: {errors}")
    return doc


def version(doc: Mapping[str, Any]) -> str | None:
    """``22.05.8`` from a document's meta block, None if absent."""
    try:
        release = doc["meta"]["Slurm"]["release"]
    except (KeyError, TypeError):
        return None
    return str(release) if release else None


class _Fields:
    """Typed access to one JSON object, with errors that name the object and the field."""

    def __init__(self, obj: Any, what: str) -> None:
        if not isinstance(obj, Mapping):
            raise SlurmParseError(f"{what}: expected an object, got {type(obj).__name__}")
        self.obj = obj
        self.what = what

    def get(self, key: str, default: Any = None) -> Any:
        return self.obj.get(key, default)

    def require(self, key: str) -> Any:
        if key not in self.obj:
            raise SlurmParseError(f"{self.what}: missing field {key!r}")
        return self.obj[key]

    def int(self, key: str, default: int | None = 0, required: bool = False) -> int | None:
        value = self.require(key) if required else self.obj.get(key)
        if isinstance(value, Mapping):  # v0.0.39+: {"set": bool, "infinite": bool, "number": n}
            value = value.get("number") if value.get("set", True) and not value.get("infinite") else None
        if value is None:
            return default
        finite = not isinstance(value, float) or math.isfinite(value)  # json.loads reads NaN and Infinity
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not finite:
            raise SlurmParseError(f"{self.what}: field {key!r} is not a number: {value!r}")
        return int(value)

    def str(self, key: str, required: bool = False) -> str:
        value = self.require(key) if required else self.obj.get(key)
        if isinstance(value, Mapping) and not value.get("set", True):  # v0.0.39+ spells "unset" as a struct
            value = None
        if value is None:
            return ""
        if isinstance(value, list):  # v0.0.39+ states are lists
            return "+".join(str(v) for v in value)
        if not isinstance(value, str):
            raise SlurmParseError(f"{self.what}: field {key!r} is not text: {value!r}")
        return value

    def list(self, key: str) -> list[Any]:
        value = self.obj.get(key)
        if value is None:
            return []
        if isinstance(value, str):
            return [value] if value else []
        if not isinstance(value, list):
            raise SlurmParseError(f"{self.what}: field {key!r} is not a list: {value!r}")
        return value


def _entries(doc: Mapping[str, Any], key: str, command: str) -> list[Any]:
    entries = doc.get(key)
    if not isinstance(entries, list):
        raise SlurmParseError(f"{command}: no {key!r} list in the document")
    return entries


def nodes(doc: Mapping[str, Any]) -> list[SlurmNode]:
    out = []
    for i, raw in enumerate(_entries(doc, "nodes", "sinfo --json")):
        f = _Fields(raw, f"sinfo --json node #{i}")
        name = f.str("name", required=True)
        f.what = f"sinfo --json node {name}"
        state, flags = node_state([f.str("state", required=True), *map(str, f.list("state_flags"))], name)
        try:
            total, used, kind = gres.gpu_count(f.str("gres")), gres.gpu_count(f.str("gres_used")), gres.gpu_type(f.str("gres"))
        except SlurmParseError as err:
            raise SlurmParseError(f"{f.what}: {err}") from None
        out.append(
            SlurmNode(
                name=name,
                state=state,
                flags=flags,
                partitions=tuple(map(str, f.list("partitions"))),
                gpus=total,
                gpus_used=used,
                gpu_type=kind,
                cpus=f.int("cpus", required=True),
                cpus_alloc=f.int("alloc_cpus"),
                memory_mb=f.int("real_memory"),
                memory_alloc_mb=f.int("alloc_memory"),
                reason=f.str("reason"),
            )
        )
    return out


def _job_id(f: _Fields) -> str:
    job_id = f.int("job_id", required=True)
    task = f.int("array_task_id", default=None)
    array = f.int("array_job_id", default=0)
    if array and task is not None:
        return f"{array}_{task}"
    if array and f.str("array_task_string"):
        return f"{array}_[{f.str('array_task_string')}]"
    return str(job_id)


def _array(f: _Fields) -> tuple[str, str, int]:
    """(array job id, the task ids a not-yet-split record holds, throttle) of an array job."""
    array = f.int("array_job_id", default=0)
    if not array:
        return "", "", 0
    pending = f.str("array_task_string").split("%")[0] if f.int("array_task_id", default=None) is None else ""
    return str(array), pending, f.int("array_max_tasks", default=0) or 0


def _gpus_alloc(f: _Fields, node_names: list[str]) -> dict[str, int]:
    """Per-node GPU counts: ``gres_detail`` has one entry per allocated node, in hostlist order."""
    detail = f.list("gres_detail")
    if not detail:
        return {}
    if len(detail) != len(node_names):
        raise SlurmParseError(f"{f.what}: {len(detail)} gres_detail entries for {len(node_names)} nodes")
    alloc = {name: gres.gpu_count(str(d)) for name, d in zip(node_names, detail)}
    return {name: count for name, count in alloc.items() if count}


def _gpu_request(f: _Fields, key: str) -> tuple[int | None, str | None]:
    text = f.str(key)
    if not text:
        return None, None
    return gres.gpu_count(text) or None, gres.gpu_type(text)


def _memory_per_gpu(f: _Fields) -> int | None:
    """MB per GPU from ``memory_per_tres`` (``gres:gpu:102400``, from --mem-per-gpu)."""
    try:
        return gres.gpu_count(f.str("memory_per_tres")) or None
    except SlurmParseError as err:
        raise SlurmParseError(f"{f.what}: memory_per_tres: {err}") from None


def jobs(doc: Mapping[str, Any]) -> list[SlurmJob]:
    out = []
    for i, raw in enumerate(_entries(doc, "jobs", "squeue --json")):
        f = _Fields(raw, f"squeue --json job #{i}")
        job_id = _job_id(f)
        f.what = f"squeue --json job {job_id}"
        try:
            node_names = expand(f.str("nodes"))
            per_node, type_n = _gpu_request(f, "tres_per_node")
            per_job, type_j = _gpu_request(f, "tres_per_job")
            per_task, type_t = _gpu_request(f, "tres_per_task")
            alloc = _gpus_alloc(f, node_names)
            required, excluded = expand(f.str("required_nodes")), expand(f.str("excluded_nodes"))
        except SlurmParseError as err:
            raise SlurmParseError(f"{f.what}: {err}") from None
        reason = "" if f.str("state_reason") == "None" else f.str("state_reason")
        array, array_pending, throttle = _array(f)
        out.append(
            SlurmJob(
                id=job_id,
                user=f.str("user_name") or str(f.int("user_id")),
                state=f.str("job_state", required=True).split("+")[0],
                partition=f.str("partition"),
                nodes=tuple(node_names),
                gpus_alloc=alloc,
                num_nodes=f.int("node_count", default=1) or 1,
                gpus_per_node=per_node,
                gpus_per_job=per_job,
                gpus_per_task=per_task,
                tasks=f.int("tasks", default=1) or 1,
                gpu_type=type_n or type_j or type_t,
                cpus=f.int("cpus", default=1) or 1,
                memory_per_node_mb=f.int("memory_per_node", default=None),
                memory_per_cpu_mb=f.int("memory_per_cpu", default=None),
                memory_per_gpu_mb=_memory_per_gpu(f),
                exclusive=f.str("shared") == "none",  # --exclusive; "user", "mcs", "oversubscribe" share
                required_nodes=tuple(required),
                excluded_nodes=tuple(excluded),
                held=held(reason),
                reason=reason,
                comment=f.str("comment"),
                reservation=f.str("resv_name") or f.str("reservation"),
                priority=f.int("priority"),
                submit_time=f.int("submit_time"),
                eligible_time=f.int("eligible_time"),
                array_job=array,
                array_pending=array_pending,
                array_throttle=throttle,
            )
        )
    return out
