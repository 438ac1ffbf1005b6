"""The optional pyslurm backend: reads through pyslurm's Slurm API, changes jobs like the CLI backend.

Uses the current pyslurm API (23.2 and later): ``pyslurm.Nodes.load()``, ``pyslurm.Jobs.load()``,
``pyslurm.Partitions.load()`` and ``pyslurm.Reservations.load()``. Used only when ``import pyslurm``
works and pyslurm was built for the running Slurm (pyslurm's major.minor, e.g. 24.11, must match
Slurm's): a mismatched build reads memory layouts wrongly, so it is refused rather than tried.

Read on the dev cluster with pyslurm 24.11 (built from source) and 25.11 (PyPI's), field for field against
the CLI backend. 25.11 spells a GRES request's keys ``gres/gpu:a100`` and gives ``tres_per_task`` as a
TrackableResources object; objects of a shape this code does not know fail the read as a SlurmError (so
``auto`` takes the CLI), never as a traceback.

Two things pyslurm 24.11 and 25.11 do not say, and how the state gets them anyway:
- a node's GPUs in use (``allocated_gres`` comes from the node's TRES, which leave GPUs out unless the
  site accounts them): the sum of the GPUs that jobs hold on the node (each job's resource layout);
- a job's per-job GPU request (``--gpus=N``, TresPerJob) and its ``--mem-per-gpu`` (pyslurm's
  ``memory_per_gpu`` is None whenever a default memory per CPU applies), its ``--prefer`` and (25.11)
  ``--segment``: one ``squeue --Format`` per read;
- a node's shards in use: the sum of the shards jobs hold on it, as for GPUs; which GPUs they sit on is not
  said, so every shard in use is taken to hold a GPU of its own (``gpus_shared``, at most ``gpus``);
- the topology: ``scontrol show topology``, as in the CLI backend.
Every change goes through scontrol, as in the CLI backend, although pyslurm's own update (``Job.modify``) costs
slurmctld one RPC where scontrol's pin costs three (it reads the job, and the federation, before an update that
names nodes): on an update pyslurm sets no node count (``NumNodes``) and takes an empty value for none, so it
cannot clear ``TresPerJob`` or ``ReqNodeList`` either; the pin would not be the same
(tests/integration/test_pyslurm_live.py, docs/performance.md "What an update costs").
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from importlib import import_module
from types import ModuleType
from typing import Any

from . import gres
from .cli_backend import CliBackend, Runner, run_process
from .errors import SlurmError, SlurmParseError
from .hostlist import expand
from .state import SlurmJob, SlurmNode, SlurmPartition, SlurmReservation, SlurmState, memory_per_node
from .values import held, node_state, time_limit_s

#: what pyslurm's Job lacks (24.11, 25.11): per-job GPU requests, memory per GPU, --prefer (which may hold a '|':
#: last, the id after it) and from 25.05 --segment; "|" ends every field
JOB_TRES = ["squeue", "--noheader", "--states=all", "--Format=JobID:|,tres-per-job:|,mem-per-tres:|,Prefer:|,JobID:|"]
JOB_TRES_SEGMENT = [*JOB_TRES[:3], "--Format=JobID:|,tres-per-job:|,mem-per-tres:|,SegmentSize:|,Prefer:|,JobID:|"]
SEGMENT_SINCE = (25, 5)
#: pyslurm's ReservationFlags names -> scontrol's spelling, where they differ
_RESERVATION_FLAGS = {"MAINTENANCE": "MAINT", "IGNORE_RUNNING_JOBS": "IGNORE_JOBS", "STATIC_NODES": "STATIC",
                      "PARTITION_NODES_ONLY": "PART_NODES", "USER_DELETION": "USER_DELETE", "PURGE": "PURGE_COMP",
                      "SPECIFIC_NODES": "SPEC_NODES", "NO_JOB_HOLD_AFTER_END": "NO_HOLD_JOBS_AFTER_END"}
#: ended jobs, which pyslurm lists until MinJobAge passes and squeue leaves out (a COMPLETING one is listed)
_ENDED = frozenset({"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE",
                    "OUT_OF_MEMORY"})
#: job states whose resources are still held on their nodes
_HOLDING = frozenset({"RUNNING", "COMPLETING", "SUSPENDED", "CONFIGURING", "STAGE_OUT"})


class PyslurmUnavailable(SlurmError):
    """pyslurm is missing or built for another Slurm version."""


def load_pyslurm(slurm_version: str) -> ModuleType:
    try:
        pyslurm = import_module("pyslurm")
    except ImportError as err:
        raise PyslurmUnavailable(f"pyslurm is not installed ({err})") from None
    built_for = str(getattr(pyslurm, "__version__", "0.0")).split(".")[:2]
    major, minor = slurm_version.split(".")[:2]
    if built_for != [major, str(int(minor))] and built_for != [major, minor]:
        raise PyslurmUnavailable(
            f"pyslurm {getattr(pyslurm, '__version__', '?')} does not match Slurm {slurm_version}"
        )
    if not all(hasattr(pyslurm, kind) for kind in ("Nodes", "Jobs", "Partitions", "Reservations")):
        raise PyslurmUnavailable(f"pyslurm {pyslurm.__version__} has only the legacy API (pyslurm 23.2 or later needed)")
    return pyslurm


class PyslurmBackend(CliBackend):
    """Nodes, jobs, partitions and reservations from pyslurm; the version and every change through the CLI."""

    name = "pyslurm"

    def __init__(self, timeout: float = 30.0, runner: Runner = run_process) -> None:
        super().__init__(timeout, runner=runner)
        self.pyslurm = load_pyslurm(self.version())
        self.pyslurm_version = str(self.pyslurm.__version__)

    def read_state(self) -> SlurmState:
        read_at = time.time()
        try:  # jobs before nodes, as Backend.read_state says
            jobs = [job for job in self.pyslurm.Jobs.load().values() if job.state not in _ENDED]
            nodes = list(self.pyslurm.Nodes.load().values())
            partitions = list(self.pyslurm.Partitions.load().values())
            reservations = list(self.pyslurm.Reservations.load().values())
            layouts = {job.id: job.get_resource_layout_per_node() for job in jobs if job.state in _HOLDING}
        except Exception as err:  # pyslurm raises its own RPCError and ValueError kinds
            raise SlurmError(f"pyslurm: {type(err).__name__}: {err}") from None
        segment = self._release >= SEGMENT_SINCE
        tres = job_tres(self._run(JOB_TRES_SEGMENT if segment else JOB_TRES), segment)
        try:
            state = state_from_pyslurm(nodes, jobs, layouts, partitions, reservations, tres, self.version(), read_at)
        except (AttributeError, TypeError) as err:  # objects of a shape this code does not know: `auto` takes the CLI
            raise SlurmError(f"pyslurm {self.pyslurm_version}: unexpected objects: {type(err).__name__}: {err}") from None
        return replace(state, **self.read_topology(state.nodes, read_at))


@dataclass(frozen=True, slots=True)
class JobExtra:
    """What pyslurm's Job does not say (JOB_TRES): TresPerJob, MemPerTres, --prefer, --segment."""

    per_job: str = ""
    per_gpu: str = ""
    prefer: str = ""
    segment: int = 0


def job_tres(output: str, segment: bool = False) -> dict[int, JobExtra]:
    """job id -> its JobExtra from JOB_TRES's output (``segment``: JOB_TRES_SEGMENT's)."""
    command = " ".join(JOB_TRES_SEGMENT if segment else JOB_TRES)
    fixed = 4 if segment else 3
    found = {}
    for lineno, line in enumerate(output.splitlines(), 1):
        if not line.strip():
            continue
        fields = [part.strip() for part in line.strip().split("|", fixed)]
        job_id = fields[0]
        if len(fields) != fixed + 1 or not job_id.isdecimal() or not fields[-1].endswith(f"|{job_id}|"):
            raise SlurmParseError(f"{command}: line {lineno}: cannot read {line[:80]!r}")
        per_job, per_gpu, *size = ("" if v == "N/A" else v for v in fields[1:fixed])
        prefer = fields[-1].removesuffix(f"|{job_id}|").strip()
        prefer = "" if prefer == "(null)" else prefer
        if size and size[0] and not size[0].isdecimal():
            raise SlurmParseError(f"{command}: line {lineno}: SegmentSize is not a number: {size[0][:20]!r}")
        extra = JobExtra(per_job, per_gpu, prefer, int(size[0]) if size and size[0] else 0)
        if extra != JobExtra():
            found[int(job_id)] = extra
    return found


def _gres_text(request: Any) -> str:
    """A GRES string from pyslurm's GRES dict (``{"gpu:a100": 2}``; 25.11 spells the keys ``gres/gpu:a100``), its
    TrackableResources (25.11's ``tres_per_task``: ``.gres`` maps ``gpu:a100`` to an item with a ``count``) or a
    TRES string (``gres/gpu:2``)."""
    items = getattr(request, "gres", None)
    if items is not None:
        request = {name: item.count for name, item in items.items()}
    if not request:
        return ""
    return request if isinstance(request, str) else ",".join(f"{k}:{v}" for k, v in request.items())


def _gpus(request: Any, what: str) -> tuple[int | None, str | None]:
    """(count, type) of a GPU request (``_gres_text``'s shapes)."""
    text = _gres_text(request)
    try:
        return (gres.gpu_count(text) or None, gres.gpu_type(text)) if text else (None, None)
    except SlurmParseError as err:
        raise SlurmParseError(f"{what}: {err}") from None


def _node_gres(configured: Any, what: str) -> dict[str, Any]:
    try:
        return gres.node_gres(_gres_text(configured), None)
    except SlurmParseError as err:
        raise SlurmParseError(f"{what}: {err}") from None


def _nodes(text: str | None, what: str) -> tuple[str, ...]:
    try:
        return tuple(expand(text or ""))
    except SlurmParseError as err:
        raise SlurmParseError(f"{what}: {err}") from None


def _layout_gpus(layout: Mapping[str, Any], name: str = "gpu") -> dict[str, int]:
    """node -> GPUs (``name`` shard: shards) of one job's ``get_resource_layout_per_node()``
    (``{"gres": {"gpu:a100": {"count": 2}}}``)."""
    alloc = {}
    for node, resources in layout.items():
        count = sum(int(v.get("count", 0)) for k, v in (resources.get("gres") or {}).items()
                    if k.split(":")[0] == name)
        if count:
            alloc[node] = count
    return alloc


def _local_time(seconds: int | None) -> str:
    """Unix seconds as scontrol prints a time: local ISO without a zone."""
    return datetime.fromtimestamp(seconds).strftime("%Y-%m-%dT%H:%M:%S") if seconds else ""


def _job_id(job: Any) -> str:
    if job.array_id and job.array_task_id is not None:
        return f"{job.array_id}_{job.array_task_id}"
    if job.array_id and job.array_tasks_waiting:  # squeue's spelling keeps the throttle: 3_[1-5%2]
        throttle = f"%{job.array_tasks_parallel}" if job.array_tasks_parallel else ""
        return f"{job.array_id}_[{job.array_tasks_waiting}{throttle}]"
    return str(job.id)


def state_from_pyslurm(nodes: Iterable[Any], jobs: Iterable[Any], layouts: Mapping[int, Mapping[str, Any]],
                       partitions: Iterable[Any], reservations: Iterable[Any], tres: Mapping[int, JobExtra],
                       version: str, read_at: float) -> SlurmState:
    """The SlurmState the CLI backend would read, from pyslurm's objects (the same fields, the same spelling)."""
    out_jobs = []
    used: dict[str, int] = {}
    shards: dict[str, int] = {}
    for job in jobs:
        what = f"pyslurm job {job.id}"
        alloc = _layout_gpus(layouts.get(job.id, {}))
        for node, count in alloc.items():
            used[node] = used.get(node, 0) + count
        for node, count in _layout_gpus(layouts.get(job.id, {}), "shard").items():
            shards[node] = shards.get(node, 0) + count
        per_node, type_n = _gpus(job.gres_per_node, f"{what} gres_per_node")
        per_task, type_t = _gpus(job.tres_per_task, f"{what} tres_per_task")
        extra = tres.get(job.id, JobExtra())
        per_job_gpus, type_j = _gpus(extra.per_job, f"{what} TresPerJob")
        per_gpu_mb = _gpus(extra.per_gpu, f"{what} MemPerTres")[0]  # gres/gpu:1000: MB per GPU
        reason = "" if job.state_reason in (None, "None") else job.state_reason
        out_jobs.append(SlurmJob(
            id=_job_id(job),
            user=job.user_name or str(job.user_id),
            state=str(job.state),
            partition=job.partition or "",
            nodes=_nodes(job.allocated_nodes, what),
            gpus_alloc=alloc,
            num_nodes=job.num_nodes or 1,
            max_nodes=job.max_nodes or 0,
            gpus_per_node=per_node,
            gpus_per_job=per_job_gpus,
            gpus_per_task=per_task,
            tasks=job.ntasks or 1,
            tasks_per_node=job.ntasks_per_node or 0,
            gpu_type=type_n or type_j or type_t,
            cpus=job.cpus or 1,
            memory_per_node_mb=memory_per_node(job.memory_per_node, job.memory_per_cpu, per_gpu_mb),
            memory_per_cpu_mb=job.memory_per_cpu or None,
            memory_per_gpu_mb=per_gpu_mb,
            exclusive=str(job.resource_sharing).upper() == "NO",
            required_nodes=_nodes(job.required_nodes, what),
            excluded_nodes=_nodes(job.excluded_nodes, what),
            held=held(reason),
            reason=reason,
            comment=job.comment or "",
            reservation=job.reservation or "",
            priority=job.priority or 0,
            time_limit_s=time_limit_s(job.time_limit),  # minutes; None when unlimited
            start_time=job.start_time or 0,
            submit_time=job.submit_time or 0,
            eligible_time=job.eligible_time or 0,
            array_job=str(job.array_id) if job.array_id else "",
            array_pending=(job.array_tasks_waiting or "") if job.array_id and job.array_task_id is None else "",
            array_throttle=(job.array_tasks_parallel or 0) if job.array_id else 0,
            constraint=",".join(job.constraints or ()),  # (pyslurm splits it at commas)
            prefer=extra.prefer,
            contiguous=bool(job.requires_contiguous_nodes),
            switches=job.required_switches or 0,
            segment=extra.segment,
        ))
    out_nodes = []
    for node in nodes:
        state, flags = node_state([str(node.state)], node.name)
        kinds = _node_gres(node.configured_gres, f"pyslurm node {node.name} configured_gres")
        in_use = shards.get(node.name, 0)
        kinds |= {"gpus_used": used.get(node.name, 0), "shards_used": in_use,
                  "gpus_shared": min(in_use, kinds["gpus"])}
        out_nodes.append(SlurmNode(
            name=node.name,
            state=state,
            flags=flags,
            partitions=tuple(node.partitions or ()),
            features=frozenset(node.active_features or ()),
            **kinds,
            cpus=node.total_cpus or 0,
            cpus_alloc=node.allocated_cpus or 0,
            memory_mb=node.real_memory or 0,
            memory_alloc_mb=node.allocated_memory or 0,
            reason=node.reason or "",
        ))
    return SlurmState(
        nodes=tuple(out_nodes),
        jobs=tuple(out_jobs),
        partitions=tuple(SlurmPartition(name=p.name, nodes=_nodes(p.nodes, f"pyslurm partition {p.name}"),
                                        state=str(p.state), default=bool(p.is_default)) for p in partitions),
        reservations=tuple(SlurmReservation(
            name=r.name, nodes=_nodes(r.nodes, f"pyslurm reservation {r.name}"), start=_local_time(r.start_time),
            end=_local_time(r.end_time), active=bool(r.is_active),
            flags=frozenset(_RESERVATION_FLAGS.get(f.name, f.name) for f in (r.flags or ())),
            users=tuple(r.users or ())) for r in reservations),
        version=version,
        read_at=read_at,
    )
