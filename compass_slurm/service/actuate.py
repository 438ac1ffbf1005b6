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
from collections.abc import Callable, Sequence
from itertools import compress

from ..engine.model import Decision, Migration
from ..engine.policies.base import Policy
from ..engine.rate_limit import RateLimit
from ..slurm.backend import Backend, lease_argv, leave_argv, release_argv, requeue_hold_argv, update_argv
from ..slurm.errors import SlurmError
from ..slurm.requests import id_order
from ..slurm.state import SlurmJob
from ..slurm.translate import Observation, Pending
from .bookkeeping import CycleReport, fmt, log, per_node
from .job_states import JobBook, JobState
from .publish import Recorder
from .store import DecisionRecord, MigrationRecord
from .sync import pinned_by_us

#: job ids per lease-renewal command (scontrol takes a comma list)
LEASE_BATCH = 100
#: seconds a requeued job may take to be pending again (its steps ending) before its migration fails
REQUEUE_WAIT_S = 30.0


class Actuator:
    """Carries decisions, migrations and leases to Slurm through ``backend``."""

    def __init__(self, backend: Backend, lease: float) -> None:
        self.backend = backend
        self.lease = int(lease)

    def express_all(self, decided: Sequence[tuple[Pending, Decision]]) -> list[str | None]:
        """Pin each of ``decided`` to its nodes and start it now, all told Slurm in one go
        (``Backend.scontrol_lines``); per decision, why Slurm refused it (that decision's own words, no other's),
        or None."""
        failures: list[str | None] = [None] * len(decided)
        lines, at = [], []
        for k, (p, decision) in enumerate(decided):
            gpus_per_node = decision.gpus_per_node()
            sizes = set(gpus_per_node.values())
            if len(sizes) != 1:
                failures[k] = f"per-node GPU counts {fmt(gpus_per_node)} differ; Slurm cannot express that"
                continue
            try:
                lines.append(update_argv(p.job.id, list(gpus_per_node), sizes.pop(), p.slurm.gpu_type,
                                         start_now=True))
            except SlurmError as err:
                failures[k] = f"Slurm refused: {err}"
                continue
            at.append(k)
        for k, result in zip(at, self.backend.scontrol_lines(lines) if lines else ()):
            if result is not None:
                failures[k] = f"Slurm refused: {result}"
        return failures

    def migrate(self, obs: Observation, policy: Policy, moves: list[Migration], book: JobBook, rate: RateLimit,
                report: CycleReport, recorder: Recorder, now: float, dry_run: bool = False,
                may_act: Callable[[], bool] = lambda: True) -> None:
        """Requeue every moved running job onto its new nodes; a placed-but-pending one is re-pointed. Each
        move's decision is logged before Slurm hears of it, and rewritten as failed where Slurm refuses.
        ``may_act`` is asked again after the requeues' waits: a daemon whose lead ran out meanwhile (see
        leader.py) does not re-point them, and only releases what it held, so that no job is left held."""
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
            repoint = job_id in book.placed
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
        failed: dict[int, str] = {}  # by place in ``planned``: why
        updates: dict[int, list[str]] = {}
        for k, (_, target, _, decision, _) in enumerate(planned):
            try:
                gpus = set(target.values())
                if len(gpus) != 1:
                    raise SlurmError(f"per-node GPU counts {fmt(target)} differ; Slurm cannot express that")
                updates[k] = update_argv(decision.job, list(target), gpus.pop(), obs.slurm_jobs[decision.job].gpu_type,
                                         start_now=True)  # checked before acting
            except SlurmError as err:
                failed[k] = str(err)
        # Every running job moved is requeued by one command, and waited for at once: the waits overlap.
        requeue = [k for k in updates if not planned[k][2]]
        if requeue:
            ids = [planned[k][3].job for k in requeue]
            refused = _refused(self.backend.scontrol_lines([requeue_hold_argv(ids)])[0], ids)
            for k in requeue:
                job_id = planned[k][3].job
                why = refused.get(job_id)
                if why is None:
                    try:
                        self.backend.wait_requeued(job_id, REQUEUE_WAIT_S)
                        continue
                    except SlurmError as err:
                        why = str(err)
                failed[k] = why
                del updates[k]
        if updates and not may_act():  # failed, so released below
            failed.update(dict.fromkeys(updates, "this daemon's lead ran out before the job was re-pointed"))
            updates = {}
        # The updates, each requeued job's followed by its release (sent whatever the update's fate: held is worse).
        sent = list(updates)
        lines = [line for k in sent for line in
                 ([updates[k]] if planned[k][2] else [updates[k], release_argv(planned[k][3].job)])]
        results = iter(self.backend.scontrol_lines(lines) if lines else ())
        released = set()
        for k in sent:
            why = next(results)
            if not planned[k][2]:
                release = next(results)
                if release is None:
                    released.add(k)
                why = why or release
            if why is not None:
                failed[k] = why
        unrelease: list[str] = []
        for k, (job_moves, target, repoint, decision, at) in enumerate(planned):
            job_id = decision.job
            status, reason = "done", "compact"
            if k in failed:
                err = failed[k]
                status, reason = "failed", f"compact; Slurm refused: {err}"
                report.error("migration", f"job {job_id}: {err}")
                report.decisions[at] = replace(report.decisions[at], action="failed", reason=reason)
                recorder.refused(report.decisions[at])
                if book.state(job_id) is JobState.RUNNING:  # the policy moved it, Slurm did not: re-check next cycle
                    book.move(job_id, None)
                if not repoint and k not in released:
                    unrelease.append(job_id)
            else:
                # Pending again until Slurm restarts it: keep its new place as a decision to verify.
                book.move(job_id, JobState.PLACED, decision=decision, job=policy.cluster.jobs[job_id], at=now,
                          logged=report.decisions[at])
            rate.spend(now, len(job_moves))
            for m in job_moves:
                report.migrations.append(MigrationRecord.of(m, reason=reason, status=status))
            log.info("migrated job %s to %s: %s", job_id, fmt(target), status)
        book.owe_release(self._release(unrelease))

    def _release(self, job_ids: list[str]) -> list[str]:
        """A requeue that failed half-way must not leave the job held (releasing a job not held fails harmlessly);
        returns the jobs Slurm refused to release, e.g. because a job was still completing and its hold is yet
        to come."""
        if not job_ids:
            return []
        refused = _refused(self.backend.scontrol_lines([release_argv(job_ids)])[0], job_ids)
        for job_id, why in refused.items():
            log.debug("release of job %s after a failed migration: %s", job_id, why)
        return list(refused)

    def release_left_held(self, obs: Observation, book: JobBook) -> None:
        """Release the jobs a failed migration left held, once Slurm shows them pending; forget those gone."""
        due = []
        for job_id in sorted(book.release_due, key=id_order):
            job = obs.slurm_jobs.get(job_id)
            if job is not None and not job.pending:
                continue  # still completing: its hold comes when it is pending again
            if job is None or not job.held:
                book.released(job_id)
            else:
                due.append(job_id)
        refused = set(self._release(due))
        for job_id in due:
            if job_id not in refused:
                book.released(job_id)
                log.info("released job %s, left held by a failed migration", job_id)

    def renew_leases(self, obs: Observation, book: JobBook, report: CycleReport, now: float) -> None:
        """Keep managed jobs the daemon has not placed from starting on Slurm's own, while it is alive.

        Array tasks past their throttle are renewed too: Slurm would start them by itself when a slot
        frees. One bad job (one that ended meanwhile, say) never costs the others their lease.
        """
        waiting = set(obs.pending_ids)
        waiting -= book.placed.keys()
        waiting -= book.in_state(JobState.LEFT).keys()
        waiting |= obs.waiting.keys()
        leases = book.leases
        book.end_leases(leases.keys() - waiting)
        lease = self.lease
        if lease < 1:
            return
        # Renewed at a few cycles' times: which of those are half a lease ago, then the jobs renewed then.
        old = {t for t in set(leases.values()) if now - t >= lease / 2}
        due = sorted(waiting - leases.keys() | set(compress(leases, map(old.__contains__, leases.values()))),
                     key=id_order)
        renewed = self._each([(lease_argv(batch, lease), batch) for batch in _chunks(due)], report, "lease")
        book.renew(renewed, now)

    def leave(self, obs: Observation, book: JobBook, report: CycleReport, policy: str) -> None:
        """Leave to Slurm the jobs the daemon cannot honour (``obs.left``) and those whose pin Slurm refused
        (LEAVING): their lease is lifted (and the refused pin cleared), so that they start as they
        would without the daemon; each is logged once, action ``left``. Jobs left that Slurm no longer has
        pending are forgotten."""
        left, leaving = book.in_state(JobState.LEFT), book.in_state(JobState.LEAVING)
        book.forget_many([j for j in left if (s := obs.slurm_jobs.get(j)) is None or not s.pending])
        for job_id in sorted(obs.left.keys() - left.keys() - leaving.keys(), key=id_order):
            # a job the daemon had pinned before it came to be left (its nodes lost what it asks): unpinned too
            book.move(job_id, JobState.LEAVING, why=obs.left[job_id], unpin=pinned_by_us(obs, book, job_id))
        lists = [(leave_argv(batch, unpin), batch) for unpin in (False, True)
                 for batch in _chunks(sorted((j for j, r in leaving.items() if r.unpin is unpin), key=id_order))]
        for job_id in self._each(lists, report, "leave"):
            why = leaving[job_id].why
            book.move(job_id, JobState.LEFT, why=why)
            report.decisions.append(_left_record(obs.slurm_jobs.get(job_id), job_id, policy, why))
            log.info("job %s left to Slurm: %s", job_id, why)
        for job_id in list(leaving):  # Slurm kept its lease: the job waits on, and is left again next cycle
            book.move(job_id, JobState.WAITING)

    def _each(self, lists: list[tuple[list[str], list[str]]], report: CycleReport, kind: str) -> list[str]:
        """The jobs for which their list command (argv, its jobs) succeeded, all commands sent in one go."""
        done: list[str] = []
        for (_, job_ids), result in zip(lists, self.backend.scontrol_lines([argv for argv, _ in lists]) if lists
                                        else ()):
            if result is not None and not _named(result, job_ids):
                report.error(kind, result)
                continue
            refused = _refused(result, job_ids)
            for job_id, why in refused.items():
                report.error(kind, f"job {job_id}: Slurm refused its {kind} ({why})")
            done += [j for j in job_ids if j not in refused]
        return done


def _chunks(job_ids: list[str]) -> list[list[str]]:
    return [job_ids[start:start + LEASE_BATCH] for start in range(0, len(job_ids), LEASE_BATCH)]


def _refused(result: str | None, job_ids: Sequence[str]) -> dict[str, str]:
    """The jobs of a list command that failed, by what Slurm said of each, from that line's ``result``.

    scontrol carries out the command for every job of a list it can and names each one it cannot ("... for
    job N"), failing as a whole; a failure that names none of them (slurmctld unreachable) is every job's.
    """
    if result is None:
        return {}
    return _named(result, job_ids) or dict.fromkeys(job_ids, result)


def _named(result: str, job_ids: Sequence[str]) -> dict[str, str]:
    return {j: _cause(result, j) for j in job_ids if re.search(rf"\bjob {re.escape(j)}\b", result)}


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
