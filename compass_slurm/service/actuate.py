"""The cycle's acting step: tell Slurm what was decided.

A placement pins the job with ``scontrol update JobId=.. ReqNodeList=.. NumNodes=..
TresPerNode=gres:gpu:g StartTime=now``. A migration of a running job is a requeue onto
its new nodes (``requeuehold``, update, ``release``); a decided job that has not started
yet is simply re-pointed. Each migration Slurm accepted is also a decision (action
``migrated``: the new nodes, the ``from`` nodes, the reason), so a job's latest decision
always names where it runs. Managed jobs still waiting keep their begin-time lease
(``StartTime=now+<lease>``), renewed every half lease, so Slurm starts them itself
only if the daemon is gone. Every Slurm refusal is returned or recorded, never raised.
"""

from __future__ import annotations

import re
from dataclasses import replace
from itertools import compress

from ..engine.model import Decision, Migration
from ..engine.policies.base import Policy
from ..engine.rate_limit import RateLimit
from ..slurm.backend import Backend
from ..slurm.errors import SlurmError
from ..slurm.state import SlurmJob
from ..slurm.translate import Observation, Pending, id_order
from .cycle import Books, CycleReport, Placed, fmt, log, per_node
from .publish import Recorder
from .store import DecisionRecord, MigrationRecord
from .sync import pinned_to

#: job ids per lease-renewal command (scontrol takes a comma list)
LEASE_BATCH = 100


class Actuator:
    """Carries decisions, migrations and leases to Slurm through ``backend``."""

    def __init__(self, backend: Backend, lease: float) -> None:
        self.backend = backend
        self.lease = int(lease)

    def express(self, p: Pending, decision: Decision) -> str | None:
        """Pin the job to the decided nodes and start it now; returns why Slurm refused, or None."""
        gpus_per_node = decision.gpus_per_node()
        sizes = set(gpus_per_node.values())
        if len(sizes) != 1:
            return f"per-node GPU counts {fmt(gpus_per_node)} differ; Slurm cannot express that"
        try:
            self.backend.set_nodes(p.job.id, list(gpus_per_node), gpus_per_node=sizes.pop(),
                                   gpu_type=p.slurm.gpu_type, start_now=True)
        except SlurmError as err:
            return f"Slurm refused: {err}"
        return None

    def migrate(self, obs: Observation, policy: Policy, moves: list[Migration], books: Books, rate: RateLimit,
                report: CycleReport, recorder: Recorder, now: float, dry_run: bool = False) -> None:
        """Requeue every moved running job onto its new nodes; a placed-but-pending one is re-pointed. Each
        move's decision is logged before Slurm hears of it, and rewritten as failed where Slurm refuses."""
        by_job: dict[str, list[Migration]] = {}
        for m in moves:
            if m.job in policy.cluster.jobs:
                by_job.setdefault(m.job, []).append(m)
        planned = []
        for job_id, job_moves in by_job.items():
            target = per_node(policy, job_id)
            running = obs.running.get(job_id)
            if running is not None and dict(running.alloc) == target:
                continue  # moved and moved back within the cycle
            repoint = job_id in books.placed
            job = policy.cluster.jobs[job_id]
            nodes = tuple(policy.cluster.nodes[i].name for _, i in policy.cluster.instances_of(job_id))
            decision = Decision(job_id, nodes, job.gpus, "compact")
            planned.append((job_moves, target, repoint, decision, len(report.decisions)))
            report.decisions.append(DecisionRecord.of(
                decision, job, policy.name, action="dry-run" if dry_run else "migrated",
                from_nodes=_left(nodes, job_moves),
                reason="compact: re-pointed before it started" if repoint else "compact: requeued",
            ))
        recorder.ahead(report)
        for job_moves, target, repoint, decision, at in planned:
            job_id = decision.job
            status, reason = "done", "compact"
            try:
                gpus = set(target.values())
                if len(gpus) != 1:
                    raise SlurmError(f"per-node GPU counts {fmt(target)} differ; Slurm cannot express that")
                gpu_type = obs.slurm_jobs[job_id].gpu_type
                if repoint:
                    self.backend.set_nodes(job_id, list(target), gpus_per_node=gpus.pop(), gpu_type=gpu_type,
                                           start_now=True)
                else:
                    self.backend.migrate(job_id, list(target), gpus_per_node=gpus.pop(), gpu_type=gpu_type)
                # Pending again until Slurm restarts it: keep its new place as a decision to verify.
                books.placed[job_id] = Placed(decision, policy.cluster.jobs[job_id], now)
            except SlurmError as err:
                status, reason = "failed", f"compact; Slurm refused: {err}"
                report.error("migration", f"job {job_id}: {err}")
                report.decisions[at] = replace(report.decisions[at], action="failed", reason=reason)
                recorder.refused(report.decisions[at])
                books.seen.pop(job_id, None)  # the policy moved it, Slurm did not: re-check next cycle
                if job_id not in books.placed and not self._release(job_id):
                    books.unreleased.add(job_id)
            rate.spend(now, len(job_moves))
            for m in job_moves:
                report.migrations.append(MigrationRecord.of(m, reason=reason, status=status))
            log.info("migrated job %s to %s: %s", job_id, fmt(target), status)

    def _release(self, job_id: str) -> bool:
        """A requeue that failed half-way must not leave the job held (releasing a job not held fails harmlessly);
        False when Slurm refused, e.g. because the job was still completing and its hold is yet to come."""
        try:
            self.backend.release(job_id)
        except SlurmError as err:
            log.debug("release of job %s after a failed migration: %s", job_id, err)
            return False
        return True

    def release_left_held(self, obs: Observation, books: Books) -> None:
        """Release the jobs a failed migration left held, once Slurm shows them pending; forget those gone."""
        for job_id in sorted(books.unreleased, key=id_order):
            job = obs.slurm_jobs.get(job_id)
            if job is not None and not job.pending:
                continue  # still completing: its hold comes when it is pending again
            if job is None or not job.held or self._release(job_id):
                books.unreleased.discard(job_id)
                if job is not None and job.held:
                    log.info("released job %s, left held by a failed migration", job_id)

    def renew_leases(self, obs: Observation, books: Books, report: CycleReport, now: float) -> None:
        """Keep managed jobs the daemon has not placed from starting on Slurm's own, while it is alive.

        Array tasks past their throttle are renewed too: Slurm would start them by itself when a slot
        frees. One bad job (one that ended meanwhile, say) never costs the others their lease.
        """
        waiting = set(obs.pending_ids)
        waiting -= books.placed.keys()
        waiting -= books.left.keys()
        waiting |= obs.waiting.keys()
        leases = books.leases
        for job_id in leases.keys() - waiting:
            del leases[job_id]
        lease = self.lease
        if lease < 1:
            return
        # Renewed at a few cycles' times: which of those are half a lease ago, then the jobs renewed then.
        old = {t for t in set(leases.values()) if now - t >= lease / 2}
        due = sorted(waiting - leases.keys() | set(compress(leases, map(old.__contains__, leases.values()))),
                     key=id_order)
        for start in range(0, len(due), LEASE_BATCH):
            renewed = _each(lambda batch: self.backend.renew_lease(batch, lease), due[start:start + LEASE_BATCH],
                            report, "lease")
            books.leases.update(dict.fromkeys(renewed, now))

    def leave(self, obs: Observation, books: Books, report: CycleReport, policy: str) -> None:
        """Leave to Slurm the jobs the daemon cannot honour (``obs.left``) and those whose pin Slurm refused
        (``books.leaving``): their lease is lifted (and the refused pin cleared), so that they start as they
        would without the daemon; each is logged once, action ``left``. Jobs left that Slurm no longer has
        pending are forgotten."""
        for job_id in [j for j in books.left if (s := obs.slurm_jobs.get(j)) is None or not s.pending]:
            del books.left[job_id]
        leaving = books.leaving
        for job_id in obs.left.keys() - books.left.keys() - leaving.keys():
            # a job the daemon had pinned before it came to be left (its nodes lost what it asks): unpinned too
            pinned = books.pins.pop(job_id, None)
            leaving[job_id] = (obs.left[job_id], pinned is not None and pinned_to(obs.slurm_jobs[job_id], pinned))
        for unpin in (False, True):
            due = sorted((j for j, (_, u) in leaving.items() if u is unpin), key=id_order)
            for start in range(0, len(due), LEASE_BATCH):
                for job_id in _each(lambda batch: self.backend.leave(batch, unpin), due[start:start + LEASE_BATCH],
                                    report, "leave"):
                    why = leaving[job_id][0]
                    books.left[job_id] = why
                    books.leases.pop(job_id, None)
                    report.decisions.append(_left_record(obs.slurm_jobs.get(job_id), job_id, policy, why))
                    log.info("job %s left to Slurm: %s", job_id, why)
        leaving.clear()


def _each(send, batch: list[str], report: CycleReport, kind: str, retry: bool = True) -> list[str]:
    """The jobs of ``batch`` for which ``send`` (one scontrol update of a job list) succeeded.

    scontrol updates every job of a list it can and names each one it cannot ("... for job
    N"), failing as a whole; the named ones are left out and the rest sent once more, so a
    batch is done whatever its bad jobs. A failure that names none of them (slurmctld
    unreachable) does nothing, and is not retried job by job.
    """
    try:
        send(batch)
    except SlurmError as err:
        text = str(err)
        refused = [j for j in batch if re.search(rf"\bjob {re.escape(j)}\b", text)]
        if not refused or not retry:
            report.error(kind, text)
            return []
        for job_id in refused:
            report.error(kind, f"job {job_id}: Slurm refused its {kind} ({_cause(text, job_id)})")
        rest = [j for j in batch if j not in refused]
        return _each(send, rest, report, kind, retry=False) if rest else []
    return batch


def _left_record(slurm: SlurmJob | None, job_id: str, policy: str, why: str) -> DecisionRecord:
    """The record of a job left to Slurm: no nodes, the reason."""
    return DecisionRecord(job_id=job_id, request=f"{slurm.gpus_requested if slurm else '?'} GPUs", nodes=(),
                          gpus_per_node={}, policy=policy, rule="left", user=slurm.user if slurm else None,
                          reason=why, action="left")


def _cause(text: str, job_id: str) -> str:
    """Slurm's words about one job in scontrol's complaint about a list of them."""
    match = re.search(rf"([^:\n]*?) for job {re.escape(job_id)}\b", text)
    return match.group(1).strip() if match else text


def _left(nodes: tuple[str, ...], moves: list[Migration]) -> tuple[str, ...]:
    """Where the job was before this cycle's moves: each moved instance's first source, in instance order."""
    before = list(nodes)
    for m in reversed(moves):  # an instance moved twice: its earlier move says where it came from
        before[m.instance] = m.src
    return tuple(before)
