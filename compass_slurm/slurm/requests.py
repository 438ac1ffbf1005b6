"""Request mapping (spec section 1): what a Slurm job asks for, as the engine's w x g instances.

G is the largest GPU node of the job's partitions, k the job's GPUs in all, w Slurm's node count for it:

- ``--gpus-per-node=g`` on w nodes: w instances of g, on distinct nodes when w > 1 and g < G;
- k in all (``--gpus``, or ``--gpus-per-task`` times tasks): the engine's one rule for GPU
  counts (``engine/shape.py``, which the simulator uses too): w instances of k/w when w > 1
  divides k and k/w fits a node, else one instance of k <= G, else k/G whole nodes, else the
  largest divisor d <= G of k as k/d instances on distinct nodes (12 GPUs: 2 x 6, told to
  Slurm as ``NumNodes=2 TresPerNode=gres:gpu:6``).
- w > 1 nodes, more than k needs on the smallest of its nodes (``-N 2 --gpus=3``, or tasks per node): the
  user's own count, so w instances of k/w where that divides, else left to Slurm; the count Slurm gives k
  itself (``--gpus=9``: w = 2; ``--gpus=5`` where 4-GPU nodes are: 2) is no user's, and 9 GPUs become 3 x 3;
- a node count the user bounded (``-N 2``, ``-N 1-3``: Slurm's ``max_nodes``) is kept within its range, and no more
  nodes than the tasks the user asked for (``-n 2``: Slurm would add tasks), nor another count with
  ``--ntasks-per-node``; else left to Slurm;
- ``--gpus-per-task``: as k in all, where an instance's GPUs are a multiple of the task's; else left
  to Slurm (10 GPUs as 5 tasks of 2 on 8-GPU nodes: 2 x 5 would split a task).
- ``--exclusive``: each instance owns a whole node (Slurm gives it every GPU there), so the
  job is that many instances of G, on nodes where nothing else runs.

Arrays: the record of the tasks Slurm has not split off yet (``A_[0-5]``) stands for one
pending job per task (``A_0`` ... ``A_5``); placing a task splits it off in Slurm. Running
allocations become instances too (``observed``), and jobs are ordered as Slurm orders them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from ..engine.model import Job
from ..engine.shape import instance_shape
from .errors import SlurmParseError
from .hostlist import expand_ranges
from .state import SlurmJob


@dataclass(frozen=True, slots=True)
class Request:
    """What a job asks for in engine terms."""

    instances: int
    gpus: int
    distinct_nodes: bool


def request(job: SlurmJob, capacity: int, smallest: int | None = None) -> Request | None:
    """The job's w x g request on nodes of ``capacity`` GPUs, the largest of its nodes (``smallest``: the smallest,
    on which Slurm may count the nodes it needs; None: all of ``capacity``); None when it is not a GPU job or not
    expressible."""
    found = requested(job, capacity, smallest)
    return found if isinstance(found, Request) else None


def requested(job: SlurmJob, capacity: int, smallest: int | None = None) -> Request | str:
    """As :func:`request`, or why the job is no w x g request."""
    req = _shared_request(job, capacity, smallest or capacity)
    if isinstance(req, Request) and job.exclusive:
        return Request(req.instances, capacity, False)  # whole nodes, one per instance
    return req


def _shared_request(job: SlurmJob, capacity: int, smallest: int) -> Request | str:
    if job.gpus_per_node and not job.gpus_per_job:
        w, g = job.num_nodes, job.gpus_per_node
        return Request(w, g, w > 1 and g < capacity) if g <= capacity else f"{g} GPUs a node, more than {capacity}"
    k = job.gpus_requested
    if k <= 0 or capacity <= 0:
        return "no GPUs"
    shape = instance_shape(k, capacity, job.num_nodes)
    as_shape = f"{k} GPUs as {shape.instances} x {shape.gpus}"
    if job.num_nodes > -(-k // smallest) and shape.instances != job.num_nodes:
        # more nodes than the GPUs need even on the smallest nodes: the user's own (-N, or tasks per node), not
        # Slurm's count of the nodes it would take; a pin of another count would change the job (Slurm drops the
        # tasks it no longer has nodes for)
        return f"{k} GPUs on {job.num_nodes} node(s) is not w x g instances"
    if job.max_nodes and not job.num_nodes <= shape.instances <= job.max_nodes:
        # Slurm refuses such a pin ("Node count specification invalid")
        return f"{as_shape} is outside its node range {job.num_nodes}-{job.max_nodes} (-N)"
    if job.tasks > 1 and shape.instances > job.tasks and not (job.max_nodes and job.tasks == job.num_nodes):
        # a node per instance: Slurm would raise the user's task count to the node count (-N's own count, a task a
        # node, is Slurm's default, not the user's)
        return f"{as_shape} is more nodes than its {job.tasks} tasks"
    if job.tasks_per_node and shape.instances != job.num_nodes:
        # Slurm would give each node of the pin that many tasks
        return f"{as_shape} would change its {job.num_nodes} node(s) of --ntasks-per-node={job.tasks_per_node}"
    if job.gpus_per_task and shape.gpus % job.gpus_per_task:
        # a pin's TresPerNode must hold whole tasks' GPUs, or Slurm refuses it (and keeps the job)
        return f"{job.tasks} tasks of {job.gpus_per_task} GPUs make no w x g instances of whole tasks"
    return Request(shape.instances, shape.gpus, shape.distinct_nodes)


def engine_job(job: SlurmJob, req: Request, migratable: str = "marker") -> Job:
    """The job for the engine; ``migratable`` is the config's mode (see SlurmJob.may_migrate)."""
    return Job(job.id, req.instances, req.gpus, migratable=job.may_migrate(migratable),
               distinct_nodes=req.distinct_nodes, user=job.user or None)


def observed(job: SlurmJob, alloc: Mapping[str, int], capacity: int,
             migratable: str = "marker") -> tuple[Job, tuple[str, ...]]:
    """A running allocation as instances: the requested size when the per-node counts fit it, else their gcd. It
    may move only as one instance a node: a pin gives every node as many GPUs and keeps the node count, so an uneven
    allocation (4 + 2 GPUs, as Slurm gives ``-N 2 --gpus=6`` on mixed nodes) moved as 3 x 2 would change the job's
    node count, tasks and GPU request."""
    req = request(job, capacity)
    counts = list(alloc.values())
    if req is not None and all(n % req.gpus == 0 for n in counts):
        gpus = req.gpus
    else:
        gpus = math.gcd(*counts)
    nodes = tuple(name for name, n in alloc.items() for _ in range(n // gpus))
    distinct = req is not None and req.distinct_nodes and gpus == req.gpus and len(nodes) == len(alloc)
    movable = job.may_migrate(migratable) and len(nodes) == len(alloc)
    return Job(job.id, len(nodes), gpus, migratable=movable, distinct_nodes=distinct, user=job.user or None), nodes



def adoption_order(allocations: Iterable[tuple[Job, tuple[str, ...]]]) -> list[tuple[Job, tuple[str, ...]]]:
    """The order running allocations are adopted in: larger instances first, then by job id.

    Anchors get their slots before 1-GPU instances fill the nodes (which would make them
    outside ABS); the daemon's sync and ``compass status`` adopt in this one order.
    """
    return sorted(allocations, key=lambda jn: (-jn[0].gpus, id_order(jn[0].id)))


def priority_order(jobs: Iterable[SlurmJob]) -> list[SlurmJob]:
    """Slurm's order: highest priority first, then oldest submission, then lowest id."""
    return sorted(jobs, key=priority_key)


def priority_key(job: SlurmJob) -> tuple[int, int, tuple[int, int, str]]:
    return -job.priority, job.submit_time, id_order(job.id)


def id_order(job_id: str) -> tuple[int, int, str]:
    """Job ids in number order; the tasks of one array in task order."""
    head, _, task = job_id.partition("_")
    return (int(head) if head.isdigit() else 0, int(task) if task.isdigit() else -1, job_id)


def array_tasks(job: SlurmJob) -> list[SlurmJob]:
    """A pending array record that still holds several tasks, as one job per task (any other job as itself)."""
    if not job.array_pending:
        return [job]
    try:
        tasks = expand_ranges(job.array_pending)
    except SlurmParseError:
        return [job]  # not a task list we can read: the record stays one job, left to Slurm
    return [replace(job, id=f"{job.array_job}_{task}", array_pending="", sluid="") for task in tasks]
