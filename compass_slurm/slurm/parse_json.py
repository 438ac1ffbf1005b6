"""Parsers for ``sinfo --json`` and ``squeue --json``.

Read from real output of Slurm 22.05 (openapi v0.0.38), 23.11 (data_parser v0.0.40),
24.11 (v0.0.42), 25.11 (v0.0.44) and 26.05 (v0.0.45): numbers wrapped as ``{"set": .., "number": ..}``,
states given as lists, the meta block's ``Slurm`` spelt ``slurm``, and from 23.02 on ``sinfo
--json`` printing a ``sinfo`` list of records that each group several nodes
(``nodes.nodes``) with shared ``node.state`` and ``gres.total``/``gres.used``.
Anything else unexpected raises SlurmParseError naming the field.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, TypedDict

from . import gres
from .errors import SlurmParseError
from .hostlist import compress, expand
from .state import SlurmJob, SlurmNode, memory_per_node
from .values import features, held, node_state, sluid, time_limit_s


#: Per command: the list it prints and every field of its entries that the parsers below read.
#: The fast loader keeps only these (anything else is skipped without being built); a parser
#: that reads a new field must name it here (tests/slurm/test_parse_json_fields.py checks it).
FIELDS: dict[str, tuple[str, frozenset[str]]] = {
    "sinfo --json": ("nodes", frozenset({
        "name", "state", "state_flags", "gres", "gres_used", "partitions", "cpus", "alloc_cpus", "real_memory",
        "alloc_memory", "reason", "active_features",
    })),
    "squeue --json": ("jobs", frozenset({
        "job_id", "array_job_id", "array_task_id", "array_task_string", "user_name", "user_id", "job_state",
        "partition", "nodes", "gres_detail", "node_count", "max_nodes", "tres_per_node", "tres_per_job",
        "tres_per_task", "tasks", "tasks_per_node", "cpus", "memory_per_node", "memory_per_cpu", "required_nodes",
        "excluded_nodes", "state_reason", "comment", "resv_name", "reservation", "priority", "submit_time",
        "eligible_time", "array_max_tasks", "memory_per_tres", "shared", "time_limit", "start_time", "features",
        "prefer", "contiguous", "minimum_switches", "required_switches", "segment_size", "step_id",
    })),
}
#: Fields of 23.02+'s grouped ``sinfo`` records, which the fast loader never sees (read by ``json``).
GROUPED_FIELDS = frozenset({"node", "memory", "features"})


def load(text: str, command: str) -> Mapping[str, Any]:
    """The JSON document a command printed; Slurm's own ``errors`` list becomes an exception.

    A large cluster's ``squeue --json`` is hundreds of megabytes, nearly all of it fields
    placement never reads: msgspec decodes only the fields in ``FIELDS``. Anything it
    does not accept (malformed JSON, NaN, other shapes) is read again by ``json``, so
    every document reads as before and every error keeps its message.
    """
    doc = _fast_load(text, command)
    if doc is None:
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


def _fast_load(text: str, command: str) -> dict[str, Any] | None:
    """The document with only the fields the parsers read, or None where msgspec declines it."""
    if command not in FIELDS:
        return None
    import msgspec

    try:
        doc = _decoder(command).decode(text)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None
    # Another shape (23.02+ groups sinfo's nodes under "sinfo"): the decoder dropped it, so read it all.
    return doc if FIELDS[command][0] in doc else None


@functools.cache
def _decoder(command: str) -> Any:
    import msgspec

    key, fields = FIELDS[command]
    entry = TypedDict(f"{key}_entry", {name: Any for name in sorted(fields)}, total=False)  # type: ignore[misc]
    doc = TypedDict(f"{key}_document", {"meta": Any, "errors": Any, key: list[entry]}, total=False)  # type: ignore
    return msgspec.json.Decoder(doc)


def version(doc: Mapping[str, Any]) -> str | None:
    """``22.05.8`` from a document's meta block (``Slurm`` up to 22.05, ``slurm`` since), None if absent."""
    meta = doc.get("meta")
    if not isinstance(meta, Mapping):
        return None
    block = meta.get("slurm", meta.get("Slurm"))
    release = block.get("release") if isinstance(block, Mapping) else None
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


class Memo:
    """The entries a parser built in earlier reads, by their fields.

    From one cycle to the next most jobs and nodes do not change: an entry whose fields
    equal those of an entry parsed before is the same value object, not parsed again.
    Entries no longer printed are dropped once they outnumber the live ones.
    """

    def __init__(self) -> None:
        import msgspec

        self._encode = msgspec.msgpack.Encoder().encode
        self._built: dict[Any, list[Any]] = {}  # key -> [value, the read that last saw it]
        self._read = 0
        self._seen = 0

    def map(self, entries: list[Any], build: Callable[[int, Any], Any]) -> list[Any]:
        """``build(i, entry)`` for each entry, or the value built before from equal fields.

        An entry's key is its MessagePack encoding: one C call, bytes the garbage collector
        never scans, and types kept apart (True is not 1, 1.0 is not 1, NaN is not null). An
        integer beyond 64 bits has none; its entry is built afresh every time.
        """
        if len(self._built) > 2 * self._seen + 1024:
            self._built = {k: v for k, v in self._built.items() if v[1] == self._read}
        self._read += 1
        self._seen = len(entries)
        encode, built, read = self._encode, self._built, self._read
        out = []
        for i, raw in enumerate(entries):
            try:
                key = encode(raw)
            except (TypeError, OverflowError):
                out.append(build(i, raw))
                continue
            found = built.get(key)
            if found is None:
                found = built[key] = [build(i, raw), read]
            else:
                found[1] = read
            out.append(found[0])
        return out


def nodes(doc: Mapping[str, Any], memo: Memo | None = None) -> list[SlurmNode]:
    """Flat ``nodes`` records (sinfo 22.05, scontrol show nodes --json) or 23.02+'s grouped ``sinfo`` records."""
    if "nodes" not in doc and isinstance(doc.get("sinfo"), list):
        return _grouped_nodes(doc["sinfo"])
    entries = _entries(doc, "nodes", "sinfo --json")
    return memo.map(entries, _node) if memo is not None else [_node(i, raw) for i, raw in enumerate(entries)]


def _node(i: int, raw: Any) -> SlurmNode:
    f = _Fields(raw, f"sinfo --json node #{i}")
    name = f.str("name", required=True)
    f.what = f"sinfo --json node {name}"
    state, flags = node_state([f.str("state", required=True), *map(str, f.list("state_flags"))], name)
    return SlurmNode(
        name=name,
        state=state,
        flags=flags,
        partitions=tuple(map(str, f.list("partitions"))),
        cpus=f.int("cpus", required=True),
        cpus_alloc=f.int("alloc_cpus"),
        memory_mb=f.int("real_memory"),
        memory_alloc_mb=f.int("alloc_memory"),
        reason=f.str("reason"),
        features=features(f.str("active_features")),  # (``features`` are the available ones)
        **_node_gres(f, f.str("gres"), f.str("gres_used")),
    )


def _node_gres(f: _Fields, total: str, used: str) -> dict[str, Any]:
    try:
        return gres.node_gres(total, used)
    except SlurmParseError as err:
        raise SlurmParseError(f"{f.what}: {err}") from None


def _natural(name: str) -> list[Any]:
    """node2 before node10, as Slurm's own node order has them."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def _grouped_nodes(records: list[Any]) -> list[SlurmNode]:
    """One SlurmNode per node of 23.02+'s ``sinfo`` records; a node in several partitions has one record in each.

    A record's ``cpus.allocated`` and ``memory.allocated`` are totals over its nodes, so only a record of one
    node (``sinfo --Node --json``), or of nodes with nothing allocated, says what each node has allocated.
    """
    found: dict[str, SlurmNode] = {}
    for i, raw in enumerate(records):
        f = _Fields(raw, f"sinfo --json record #{i}")
        names = [str(n) for n in _Fields(f.require("nodes"), f"{f.what} nodes").list("nodes")]
        f.what = f"sinfo --json record {compress(names) if names else f'#{i}'}"
        node = _Fields(f.require("node"), f"{f.what} node")
        cpus = _Fields(f.require("cpus"), f"{f.what} cpus")
        memory = _Fields(f.get("memory") or {}, f"{f.what} memory")
        gpus = _Fields(f.get("gres") or {}, f"{f.what} gres")
        reason = f.get("reason")
        reason = _Fields(reason, f"{f.what} reason").str("description") if isinstance(reason, Mapping) else f.str("reason")
        partition = f.get("partition")
        partition = _Fields(partition, f"{f.what} partition").str("name") if isinstance(partition, Mapping) else ""
        alloc_cpus, alloc_memory = cpus.int("allocated"), memory.int("allocated")
        if len(names) > 1 and (alloc_cpus or alloc_memory or cpus.int("minimum") != cpus.int("maximum")):
            raise SlurmParseError(f"{f.what}: one record for {len(names)} nodes with allocations, which it sums "
                                  "(sinfo --Node --json has one record per node)")
        state, flags = node_state([str(s) for s in node.list("state")] or [""], compress(names))
        kinds = _node_gres(f, gpus.str("total"), gpus.str("used"))
        active = features(_Fields(f.get("features") or {}, f"{f.what} features").str("active"))
        for name in names:
            if name in found:
                seen = found[name]
                if partition and partition not in seen.partitions:
                    found[name] = replace(seen, partitions=(*seen.partitions, partition))
                continue
            found[name] = SlurmNode(
                name=name,
                state=state,
                flags=flags,
                partitions=(partition,) if partition else (),
                cpus=cpus.int("maximum", required=True),
                cpus_alloc=alloc_cpus,
                memory_mb=memory.int("maximum"),
                memory_alloc_mb=alloc_memory,
                reason=reason,
                features=active,
                **kinds,
            )
    return [found[name] for name in sorted(found, key=_natural)]


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


def _job_state(states: str) -> str:
    """The job's state as squeue and scontrol name it: JSON lists flags after the base state (v0.0.39+), and a job
    requeued while its steps still end is PENDING with COMPLETING, which they show as COMPLETING: a StartTime given
    to it then is overwritten once they end (backend.py), so it is not pending yet."""
    base, *flags = states.split("+")
    return "COMPLETING" if "COMPLETING" in flags else base


def _memory_per_gpu(f: _Fields) -> int | None:
    """MB per GPU from ``memory_per_tres`` (``gres:gpu:102400``, from --mem-per-gpu)."""
    try:
        return gres.gpu_count(f.str("memory_per_tres")) or None
    except SlurmParseError as err:
        raise SlurmParseError(f"{f.what}: memory_per_tres: {err}") from None


def _exclusive(f: _Fields) -> bool:
    """--exclusive: ``shared`` "none" up to 25.11 ("user", "mcs", "oversubscribe" share); 26.05 leaves ``shared``
    empty for every job, and the CLI backend asks squeue instead."""
    return f.str("shared") == "none"


def jobs(doc: Mapping[str, Any], memo: Memo | None = None, sluids: bool = False) -> list[SlurmJob]:
    """squeue --json's jobs; ``sluids``: with each record's SLUID (``Backend.names_sluids``)."""
    entries = _entries(doc, "jobs", "squeue --json")
    build = functools.partial(_job, sluids=True) if sluids else _job
    return memo.map(entries, build) if memo is not None else [build(i, raw) for i, raw in enumerate(entries)]


def _job(i: int, raw: Any, sluids: bool = False) -> SlurmJob:
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
    per_cpu, per_gpu = f.int("memory_per_cpu", default=None) or None, _memory_per_gpu(f)
    reason = "" if f.str("state_reason") == "None" else f.str("state_reason")
    array, array_pending, throttle = _array(f)
    return SlurmJob(
        id=job_id,
        user=f.str("user_name") or str(f.int("user_id")),
        state=_job_state(f.str("job_state", required=True)),
        partition=f.str("partition"),
        nodes=tuple(node_names),
        gpus_alloc=alloc,
        num_nodes=f.int("node_count", default=1) or 1,
        max_nodes=f.int("max_nodes") or 0,
        gpus_per_node=per_node,
        gpus_per_job=per_job,
        gpus_per_task=per_task,
        tasks=f.int("tasks", default=1) or 1,
        tasks_per_node=f.int("tasks_per_node") or 0,
        gpu_type=type_n or type_j or type_t,
        cpus=f.int("cpus", default=1) or 1,
        memory_per_node_mb=memory_per_node(f.int("memory_per_node", default=None), per_cpu, per_gpu),
        memory_per_cpu_mb=per_cpu,
        memory_per_gpu_mb=per_gpu,
        exclusive=_exclusive(f),
        required_nodes=tuple(required),
        excluded_nodes=tuple(excluded),
        held=held(reason),
        reason=reason,
        comment=f.str("comment"),
        reservation=f.str("resv_name") or f.str("reservation"),
        priority=f.int("priority"),
        time_limit_s=time_limit_s(f.int("time_limit", default=None)),
        start_time=f.int("start_time"),
        submit_time=f.int("submit_time"),
        eligible_time=f.int("eligible_time"),
        array_job=array,
        array_pending=array_pending,
        array_throttle=throttle,
        constraint=f.str("features"),
        prefer=f.str("prefer"),
        contiguous=_flag(f, "contiguous"),
        # 23.11 says minimum_switches, 24.11 on required_switches; 22.05's squeue --json has neither
        switches=f.int("required_switches", default=None) or f.int("minimum_switches"),
        segment=f.int("segment_size"),  # 25.11 on
        # (the record of an array's tasks not split off yet is no one task's)
        sluid="" if array_pending or not sluids else sluid(_step(f).get("sluid"), f"{f.what}: step_id.sluid"),
    )


def _step(f: _Fields) -> Mapping[str, Any]:
    step = f.get("step_id")
    return step if isinstance(step, Mapping) else {}


def _flag(f: _Fields, key: str) -> bool:
    value = f.get(key)
    if value is not None and not isinstance(value, bool):
        raise SlurmParseError(f"{f.what}: field {key!r} is not true or false: {value!r}")
    return bool(value)
