"""The one interface to Slurm: read the state, and change pending jobs with scontrol.

Every change reaches Slurm through ``Backend.scontrol(argv)``, built by the
functions below from checked names, so the exact command lines are the same
for every backend and a dry run prints exactly what a live run would execute.

A migration is ``scontrol requeuehold``, waiting until the job is back to
PENDING (``StartTime=now`` given while it is still COMPLETING is overwritten by
Slurm's requeue delay of about two minutes), ``scontrol update ... ReqNodeList=
StartTime=now``, then ``scontrol release``.
"""

from __future__ import annotations

import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, TextIO

from . import names
from .errors import SlurmError
from .hostlist import compress
from .state import Look, SlurmJob, SlurmState

#: job states in which a requeued job is not yet back in the queue
_LEAVING = frozenset({"RUNNING", "COMPLETING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "SUSPENDED"})


def _job_list(job_ids: str | Sequence[str]) -> str:
    """One job id, or a comma list of them (``release`` and ``requeuehold`` take either)."""
    ids = [job_ids] if isinstance(job_ids, str) else list(job_ids)
    if not ids:
        raise SlurmError("a command on jobs needs at least one job")
    return ",".join(map(names.job_id, ids))


def release_argv(job_ids: str | Sequence[str]) -> list[str]:
    return ["scontrol", "release", _job_list(job_ids)]


def requeue_hold_argv(job_ids: str | Sequence[str]) -> list[str]:
    return ["scontrol", "requeuehold", _job_list(job_ids)]


def _gpu_gres(gpu_type: str | None) -> str:
    """``gpu`` or ``gpu:TYPE``, as TresPerNode= and TresPerJob= name the GPUs (the type checked first)."""
    return f"gpu:{names.gpu_type(gpu_type)}" if gpu_type is not None else "gpu"


def update_argv(
    job_id: str,
    nodes: Sequence[str] | None = None,
    gpus_per_node: int | None = None,
    gpu_type: str | None = None,
    start_now: bool = False,
    sluid: str = "",
) -> list[str]:
    """``scontrol update JobId=..`` pinning the job to ``nodes`` (as a compressed hostlist).

    With ``gpus_per_node`` the request becomes ``len(nodes)`` nodes with that many GPUs
    each (the per-job GPU count is cleared first: Slurm rejects having both). With ``sluid``
    (SlurmJob.sluid) the job is named by it.
    """
    argv = ["scontrol", "update", f"JobId={names.sluid(sluid) if sluid else names.job_id(job_id)}"]
    kind = _gpu_gres(gpu_type)
    if nodes is not None:
        node_list = names.node_names(nodes)
        argv.append(f"ReqNodeList={compress(node_list)}")
        if gpus_per_node is not None:
            if gpus_per_node < 1:
                raise SlurmError(f"job {job_id}: gpus per node must be at least 1, got {gpus_per_node}")
            argv += [f"NumNodes={len(set(node_list))}", "TresPerJob=", f"TresPerNode=gres:{kind}:{gpus_per_node}"]
    if start_now:
        argv.append("StartTime=now")
    if len(argv) == 3:
        raise SlurmError(f"job {job_id}: an update that changes nothing")
    return argv


def lease_argv(job_ids: Sequence[str], seconds: int) -> list[str]:
    """``scontrol update JobId=A,B,.. StartTime=now+S``: keep pending jobs from starting for S more seconds."""
    if not job_ids or seconds < 1:
        raise SlurmError("a lease needs at least one job and one second")
    return ["scontrol", "update", f"JobId={','.join(names.job_id(j) for j in job_ids)}", f"StartTime=now+{seconds}"]


@dataclass(frozen=True, slots=True)
class Asked:
    """A job's GPU request as its user gave it, before the daemon's first pin set its node count and GPUs per node
    (``update_argv``): what leaving it to Slurm puts back, since Slurm may refuse the pin's form for good (11 GPUs
    as 11 nodes of 1 beyond a partition's or a QOS's node limit)."""

    num_nodes: int
    gpus_per_job: int | None
    gpus_per_node: int | None
    gpu_type: str | None
    #: the most nodes it may take back: its own count, or as few as hold its GPUs, never the pin's spread
    most_nodes: int

    @classmethod
    def of(cls, job: SlurmJob, node_gpus: int) -> Asked:
        """``job`` as read before a pin; ``node_gpus``: the GPUs of the largest node it may use."""
        least = -(-job.gpus_requested // node_gpus)
        most = job.max_nodes or (job.num_nodes if job.gpus_per_node and not job.gpus_per_job
                                 else max(job.num_nodes, least))
        return cls(job.num_nodes, job.gpus_per_job, job.gpus_per_node, job.gpu_type, most)

    def argv(self) -> list[str]:
        """The update words that put the request back (per node, per job, or per task: TresPerTask, never
        changed by a pin, then holds its GPUs)."""
        kind = _gpu_gres(self.gpu_type)
        count = f"{self.num_nodes}-{self.most_nodes}" if self.most_nodes > self.num_nodes else str(self.num_nodes)
        if self.gpus_per_job:
            return [f"NumNodes={count}", "TresPerNode=", f"TresPerJob=gres:{kind}:{self.gpus_per_job}"]
        if self.gpus_per_node:
            return [f"NumNodes={count}", "TresPerJob=", f"TresPerNode=gres:{kind}:{self.gpus_per_node}"]
        return [f"NumNodes={count}", "TresPerJob=", "TresPerNode="]


def unpin_argv(job_id: str, asked: Asked | None, start_now: bool = False) -> list[str]:
    """``scontrol update JobId=J ReqNodeList= [NumNodes=.. TresPer..=] [StartTime=now]``: a pending job let go, its
    node list cleared and the request its pin changed put back, in one update (with ``start_now``, its lease lifted
    too). A job that started meanwhile refuses it whole: slurmctld takes the node list before the GPUs and the node
    count (job_mgr.c ``_update_job``, 22.05 to 26.05) and refuses an empty one for a running job, which ``NumNodes``
    alone would shrink. A node-list update names one job: scontrol refuses it for a list ("Invalid job ID A,B",
    update_job.c's ``_is_single_job``) without asking slurmctld."""
    return ["scontrol", "update", f"JobId={names.job_id(job_id)}", "ReqNodeList=", *(asked.argv() if asked else ()),
            *(["StartTime=now"] if start_now else [])]


def leave_argv(job_ids: Sequence[str]) -> list[str]:
    """``scontrol update JobId=A,B,.. StartTime=now``: jobs the daemon leaves to Slurm start as they would without it,
    its lease lifted (a job it had pinned is let go by ``unpin_argv`` instead)."""
    if not job_ids:
        raise SlurmError("leaving jobs to Slurm needs at least one job")
    return ["scontrol", "update", f"JobId={','.join(names.job_id(j) for j in job_ids)}", "StartTime=now"]


class Backend(ABC):
    """Reads Slurm's state and changes jobs. Implementations: cli, pyslurm, snapshot."""

    #: short name for logs and --json output
    name: str = "backend"
    #: why open_backend chose this one (shown by compass doctor)
    chosen_because: str = ""

    @abstractmethod
    def read_state(self) -> SlurmState:
        """One consistent-enough read of nodes, jobs, partitions and reservations.

        Jobs are read before nodes. The jobs most likely to start between the two reads are the ones the
        daemon has just pinned (Slurm starts them within a second of the update, when the next cycle reads):
        read first, such a job is pending on the nodes it is pinned to, and its CPUs and memory count there
        twice for one cycle (safe); read the other way, it ran on nodes whose allocation was read before it
        started, which looked free to the next job. A job Slurm starts on its own in between is not in the job
        read; its GPUs are in the node read, which makes its node crowded for a cycle (Translator.crowded)."""

    @abstractmethod
    def version(self) -> str:
        """Slurm's version, e.g. ``22.05.8``."""

    @abstractmethod
    def scontrol(self, argv: list[str]) -> None:
        """Carry out one scontrol command line built by the ``*_argv`` functions."""

    def scontrol_lines(self, lines: Sequence[list[str]]) -> list[str | None]:
        """Carry out several command lines built by the ``*_argv`` functions, in order; per line, None when it
        succeeded, else what Slurm said (as the SlurmError of that line run alone). Here: one run per line; the
        CLI backend runs them all through one scontrol."""
        return [_refusal(self.scontrol, argv) for argv in lines]

    @abstractmethod
    def job_state(self, job_id: str) -> str | None:
        """The job's state now (e.g. PENDING), None when Slurm no longer knows it."""

    def ran_on(self, job_ids: Sequence[str]) -> dict[str, tuple[str, ...]]:
        """The nodes each of ``job_ids`` runs or ran on, finished jobs too while Slurm still lists them
        (``MinJobAge``); pending and unknown jobs are left out."""
        wanted = set(job_ids)
        return {j.id: j.nodes for j in self.read_state().jobs if j.id in wanted and j.nodes and not j.pending}

    def look(self) -> Look | None:
        """The managed pending jobs and the jobs holding nodes, by a read far cheaper than read_state();
        None when this backend has none (the daemon then cycles on its interval and notices only)."""
        return None

    def release(self, job_ids: str | Sequence[str]) -> None:
        self.scontrol(release_argv(job_ids))

    def requeue_hold(self, job_ids: str | Sequence[str]) -> None:
        self.scontrol(requeue_hold_argv(job_ids))

    def set_nodes(
        self,
        job_id: str,
        nodes: Sequence[str],
        gpus_per_node: int | None = None,
        gpu_type: str | None = None,
        start_now: bool = False,
    ) -> None:
        self.scontrol(update_argv(job_id, nodes, gpus_per_node, gpu_type, start_now))

    def renew_lease(self, job_ids: Sequence[str], seconds: int) -> None:
        self.scontrol(lease_argv(job_ids, seconds))

    def migrate(self, job_id: str, nodes: Sequence[str], gpus_per_node: int | None = None,
                gpu_type: str | None = None, timeout: float = 30.0) -> None:
        """Restart a running job on ``nodes``: requeuehold, wait for PENDING, update with StartTime=now, release."""
        update = update_argv(job_id, nodes, gpus_per_node, gpu_type, start_now=True)  # check before acting
        self.requeue_hold(job_id)
        self.wait_requeued(job_id, timeout)
        self.scontrol(update)
        self.release(job_id)

    def wait_requeued(self, job_id: str, timeout: float, poll: float = 0.2) -> None:
        """Block until a requeued job is PENDING again (its old steps have ended)."""
        deadline = time.monotonic() + timeout
        while True:
            state = self.job_state(job_id)
            if state is None:
                raise SlurmError(f"job {job_id} vanished while being requeued")
            if state not in _LEAVING:
                return
            if time.monotonic() >= deadline:
                raise SlurmError(f"job {job_id} still {state} {timeout:.0f} s after requeuehold")
            time.sleep(poll)


def _refusal(run: Callable[[list[str]], None], argv: list[str]) -> str | None:
    try:
        run(argv)
    except SlurmError as err:
        return str(err)
    return None


#: print to whatever ``sys.stdout`` is when printing (a driver may re-point it), not at construction
STDOUT = "stdout"

Out = TextIO | None | Literal["stdout"]


class RecordingBackend(Backend, ABC):
    """Records (and prints to ``out``; None: silent) the scontrol commands it is asked to run instead of running them."""

    def __init__(self, out: Out = STDOUT, render: Callable[[list[str]], str] = " ".join) -> None:
        self.out = out
        self.render = render
        self.commands: list[list[str]] = []

    def scontrol(self, argv: list[str]) -> None:
        self.commands.append(list(argv))
        if self.out is not None:
            print(self.render(argv), file=sys.stdout if self.out == STDOUT else self.out)

    def wait_requeued(self, job_id: str, timeout: float, poll: float = 0.2) -> None:
        """Nothing was requeued, so nothing to wait for."""


class DryRunBackend(RecordingBackend):
    """Reads through ``inner``; changes are only printed (``--dry-run``)."""

    name = "dry-run"

    def __init__(self, inner: Backend, out: Out = STDOUT,
                 render: Callable[[list[str]], str] = " ".join) -> None:
        super().__init__(out, render)
        self.inner = inner

    def read_state(self) -> SlurmState:
        return self.inner.read_state()

    def version(self) -> str:
        return self.inner.version()

    def job_state(self, job_id: str) -> str | None:
        return self.inner.job_state(job_id)

    def ran_on(self, job_ids: Sequence[str]) -> dict[str, tuple[str, ...]]:
        return self.inner.ran_on(job_ids)

    def look(self) -> Look | None:
        return self.inner.look()
