"""The cycle's acting step: tell Slurm what was decided.

A placement pins the job with ``scontrol update JobId=.. ReqNodeList=.. NumNodes=..
TresPerNode=gres:gpu:g StartTime=now``. A migration of a running job is a requeue onto
its new nodes over cycles: ``requeuehold`` in one, then, in the first cycle whose read shows
the job pending again (its steps ended), the update and ``release``; no cycle waits for it.
A decided job that has not started yet is simply re-pointed. Each migration is also a
decision (action ``migrated``: the new nodes, the ``from`` nodes, the reason), logged before
Slurm hears of it and rewritten as ``failed`` when Slurm refuses it, so a job's latest
decision always names where it runs. Managed jobs still waiting keep their begin-time lease
(``StartTime=now+<lease>``), renewed every half lease, so Slurm starts them itself
only if the daemon is gone. Every Slurm refusal is returned or recorded, never raised.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import compress

from ..engine.model import Decision, Migration
from ..engine.policies.base import Policy
from ..engine.rate_limit import RateLimit
from ..slurm.backend import Backend, lease_argv, leave_argv, release_argv, requeue_hold_argv, unpin_argv, update_argv
from ..slurm.errors import SlurmError
from ..slurm.requests import id_order
from ..slurm.state import SlurmJob
from ..slurm.translate import Observation, Pending
from .bookkeeping import CycleReport, fmt, log, per_node
from .job_states import JobBook, JobState
from .publish import Recorder
from .requeue_note import RequeueNote
from .store import DecisionRecord, MigrationRecord
from .sync import REQUEUE, pinned_by_us

#: Slurm's refusal of an update for a job it has started meanwhile (ESLURM_ALREADY_DONE, ESLURM_JOB_NOT_PENDING;
#: ESLURM_INVALID_NODE_NAME: a running job's node list may only shrink, and the nodes decided come from Slurm's read)
NOT_PENDING = re.compile(r"Job has already finished|Job is no longer pending|Invalid node name specified")
#: a decision Slurm did not answer, or could not take yet (no answer, not sent, slurmctld out of reach or busy, the
#: job in transition, scontrol not started), or whose job is gone: decided again next cycle if still pending. Any
#: other failure is Slurm's answer to it (a node configuration it lacks, a GRES form, a limit, no right to change
#: the job): decided again, it would be refused again and the job kept waiting on its lease for ever, so the job is
#: left to Slurm, its node list cleared (from 23.11 a refused update may keep the ReqNodeList it set before the
#: check that refused it).
UNANSWERED = re.compile(r"no answer within|: not sent: |cannot run: |no temporary file|Unable to contact slurm "
                        r"controller|Socket timed out|Zero Bytes were transmitted|Connection refused|"
                        r"[Cc]ommunication connection failure|temporarily unable|[Tt]ry again later|"
                        r"Resource temporarily unavailable|standby mode|Invalid job id specified")
#: job ids per lease-renewal command (scontrol takes a comma list)
LEASE_BATCH = 100
#: the reason of a migration's record that re-points a job placed but not started
REPOINTED = "compact: re-pointed before it started"
#: why a requeued job's earlier record is rewritten: moved again before Slurm heard of that place
SUPERSEDED = "compact: moved again before it was re-pinned there"
#: how Slurm hears of a job's move (``_Move.kind``): requeued (running), re-pointed (placed), re-pinned later (requeued)
_REQUEUE, _REPOINT, _AGAIN = "requeue", "re-point", "again"


class Actuator:
    """Carries decisions, migrations and leases to Slurm through ``backend``; ``note``: the daemon's own note of its
    requeues, written before Slurm hears of one."""

    def __init__(self, backend: Backend, lease: float, note: RequeueNote) -> None:
        self.backend = backend
        self.lease = int(lease)
        self.note = note

    def express_all(self, decided: Sequence[tuple[Pending, Decision]]) -> list[str | None]:
        """Pin each of ``decided`` to its nodes and start it now, all told Slurm in one go
        (``Backend.scontrol_lines``); per decision, why Slurm refused it (that decision's own words, no other's),
        or None."""
        failures: list[str | None] = [None] * len(decided)
        lines, at = [], []
        for k, (p, decision) in enumerate(decided):
            try:
                lines.append(self._pin_argv(p.slurm, decision.gpus_per_node()))
            except SlurmError as err:
                failures[k] = f"Slurm refused: {err}"
                continue
            at.append(k)
        for k, result in zip(at, self.backend.scontrol_lines(lines) if lines else ()):
            if result is not None:
                failures[k] = f"Slurm refused: {result}"
        return failures

    def _pin_argv(self, job: SlurmJob, gpus_per_node: Mapping[str, int]) -> list[str]:
        """The update that pins ``job`` to its nodes, the same GPUs on each, starting now (SlurmError: Slurm cannot be
        told that); by the job's SLUID where one was read (this cycle: a requeue changes it)."""
        sizes = set(gpus_per_node.values())
        if len(sizes) != 1:
            raise SlurmError(f"per-node GPU counts {fmt(gpus_per_node)} differ; Slurm cannot express that")
        return update_argv(job.id, list(gpus_per_node), sizes.pop(), job.gpu_type, start_now=True,
                           sluid=job.sluid)

    def migrate(self, obs: Observation, policy: Policy, moves: list[Migration], book: JobBook, rate: RateLimit,
                report: CycleReport, recorder: Recorder, now: float, dry_run: bool = False) -> None:
        """Carry the migrations on across cycles, all told Slurm in one go: every moved running job requeue-held by
        one command (REQUEUED: the policy holds it on its new nodes), a moved placed-but-pending one re-pointed, and
        the jobs requeued earlier that Slurm shows pending now re-pinned and released (see ``_requeued``). No cycle
        waits for a requeued job's steps to end. Each move's decision is logged before Slurm hears of it, and
        rewritten as failed where Slurm refuses; a requeued job whose migration fails is released as it is. A requeue
        is noted (requeue_note.py) before Slurm hears of it too, and not made when it cannot be."""
        planned = self._plan(obs, policy, moves, book, report, dry_run)
        recorder.ahead(report)
        for m in planned:
            rate.spend(now, m.count)
            if m.kind == _AGAIN:  # re-pinned where it goes now once Slurm shows it pending; the place before never was
                was = book.get(m.job)
                recorder.refused(replace(was.logged, action="failed", reason=SUPERSEDED))
                book.move(m.job, JobState.REQUEUED, decision=m.decision, job=policy.cluster.jobs[m.job],
                          logged=report.decisions[m.at])
        self._note_ahead(planned, book, report, rate.spent())
        due, lost = _requeued(obs, book)
        failures = _Failures(report, recorder, book)
        for job_id, why in lost.items():
            failures.add(book.get(job_id).logged, why)
        pins = self._pins(due, book, failures)
        lines = [line for job_id in pins for line in pins[job_id]]
        repoint = [m for m in planned if m.kind == _REPOINT and m.why is None]
        lines += [m.update for m in repoint]
        requeue = [m.job for m in planned if m.kind == _REQUEUE and m.why is None]
        if requeue:
            lines.append(requeue_hold_argv(requeue))
        results = iter(self.backend.scontrol_lines(lines) if lines else ())
        for job_id, job_lines in pins.items():
            self._repinned(job_id, [next(results) for _ in job_lines], book, report, failures, now)
        for m in repoint:
            self._repointed(m, next(results), policy, book, report, failures, now)
        refused = _refused(next(results), requeue) if requeue else {}
        for m in planned:
            if m.why is not None or m.job in refused:
                failures.add(report.decisions[m.at], m.why or refused[m.job], at=m.at, release=m.job in refused)
            elif m.kind == _REQUEUE:
                book.move(m.job, JobState.REQUEUED, decision=m.decision, job=policy.cluster.jobs[m.job],
                          logged=report.decisions[m.at])
                log.info("requeued job %s, to be re-pinned to %s", m.job, fmt(m.target))
        failures.settle(self._release)

    def _plan(self, obs: Observation, policy: Policy, moves: list[Migration], book: JobBook, report: CycleReport,
              dry_run: bool) -> list[_Move]:
        """This cycle's moves, one per job, each with its record in the report (not logged yet) and its kind: a
        running job is requeued, a placed-but-pending one re-pointed, a requeued one re-pinned elsewhere later."""
        by_job: dict[str, list[Migration]] = {}
        for m in moves:
            if m.job in policy.cluster.jobs:
                by_job.setdefault(m.job, []).append(m)
        requeued = book.in_state(JobState.REQUEUED)
        planned = []
        for job_id, job_moves in by_job.items():
            target = per_node(policy, job_id)
            was = requeued.get(job_id)
            running = obs.running.get(job_id)
            if (was.decision.gpus_per_node() if was is not None else running and dict(running.alloc)) == target:
                continue  # moved and moved back within the cycle
            kind = _REPOINT if job_id in book.placed else _REQUEUE if was is None else _AGAIN
            job = policy.cluster.jobs[job_id]
            nodes = tuple(policy.cluster.nodes[i].name for _, i in policy.cluster.instances_of(job_id))
            decision = Decision(job_id, nodes, job.gpus, "compact")
            planned.append(_Move(job_id, target, kind, decision, len(report.decisions), len(job_moves)))
            report.decisions.append(DecisionRecord.of(
                decision, job, policy.name, action="dry-run" if dry_run else "migrated",
                from_nodes=was.logged.from_nodes if was is not None else _left(nodes, job_moves),
                reason=REPOINTED if kind == _REPOINT else REQUEUE,
            ))
            if kind == _REPOINT:
                try:
                    planned[-1].update = self._pin_argv(obs.slurm_jobs[job_id], target)
                except SlurmError as err:
                    planned[-1].why = str(err)
        return planned

    def _note_ahead(self, planned: list[_Move], book: JobBook, report: CycleReport, spent: list[float]) -> None:
        """Note this cycle's requeues beside the daemon's others before Slurm hears of them; when the note cannot
        take them, none is made (a restart whose log cannot be read would not know them from an admin's holds)."""
        requeues = [m for m in planned if m.kind == _REQUEUE and m.why is None]
        why = self.note.write(book, spent, (report.decisions[m.at] for m in requeues)) if requeues else None
        for m in requeues if why is not None else ():
            m.why = f"not requeued: {why}"

    def _pins(self, due: Mapping[str, SlurmJob], book: JobBook, failures: _Failures) -> dict[str, list[list[str]]]:
        """The lines that re-pin each requeued job Slurm shows pending to its new nodes, then release it (when held:
        sent whatever the update's fate, since held is worse); one Slurm cannot be told of fails, and is released."""
        pins = {}
        for job_id, slurm in due.items():
            record = book.get(job_id)
            try:
                update = self._pin_argv(slurm, record.decision.gpus_per_node())
            except SlurmError as err:
                failures.add(record.logged, str(err), release=slurm.held, unpin=True)
                continue
            pins[job_id] = [update, release_argv(job_id)] if slurm.held else [update]
        return pins

    def _repinned(self, job_id: str, results: list[str | None], book: JobBook, report: CycleReport,
                  failures: _Failures, now: float) -> None:
        """A requeued job re-pinned and released (PLACED, its migration done), or re-pinned and its release refused
        (PLACED, the release owed: the migration is done when Slurm takes it), or its migration failed."""
        record = book.get(job_id)
        update, release = (*results, None)[:2]
        if update is not None:
            failures.add(record.logged, update, released=len(results) > 1 and release is None, release=len(results) > 1,
                         unpin=True)
            return
        book.move(job_id, JobState.PLACED, decision=record.decision, job=record.job, at=now, logged=record.logged)
        if release is not None:  # Slurm holds it on its new nodes: the migration stands, not done until released
            book.owe_release([job_id], record.logged)
            report.error("migration", f"job {job_id}: re-pinned, its release refused ({release}); released later")
            return
        report.migrations += _migrations(record.logged, "compact", "done")
        log.info("migrated job %s to %s: re-pinned and released", job_id, fmt(record.decision.gpus_per_node()))

    def _repointed(self, m: _Move, why: str | None, policy: Policy, book: JobBook, report: CycleReport,
                   failures: _Failures, now: float) -> None:
        """A placed job re-pointed before it started (PLACED on its new nodes, its migration done), or refused."""
        if why is not None:
            failures.add(report.decisions[m.at], why, at=m.at)
            return
        book.move(m.job, JobState.PLACED, decision=m.decision, job=policy.cluster.jobs[m.job], at=now,
                  logged=report.decisions[m.at])
        report.migrations += _migrations(report.decisions[m.at], "compact", "done")
        log.info("migrated job %s to %s: re-pointed before it started", m.job, fmt(m.target))

    def release_requeued(self, records: Sequence[DecisionRecord], book: JobBook, report: CycleReport,
                         recorder: Recorder, why: str) -> None:
        """Release, unpinned (``_release``), the requeued jobs of these migration ``records``, their migrations failed
        (``why``): a rebuilt engine state did not take them over (this daemon no longer leads, its log cannot say,
        or the nodes logged no longer hold the job)."""
        failures = _Failures(report, recorder, book)
        for record in records:
            failures.add(record, why, release=True)
        failures.settle(self._release)

    def release_on_stop(self, book: JobBook, recorder: Recorder) -> list[DecisionRecord]:
        """A daemon that stops releases its requeued jobs, unpinned, and those a failed migration left held; the
        record of each requeued one released is rewritten as failed, that of each Slurm refuses (still completing)
        kept, for the next daemon to take the requeue over. Returns those kept. (A job re-pinned whose release is
        owed stays held on its new nodes: its requeue is logged and noted, and the next daemon takes it over.)"""
        records = [r.logged for r in book.in_state(JobState.REQUEUED).values()]
        failed = [j for j in book.release_due if book.owed_migration(j) is None]
        refused = set(self._release([*(r.job_id for r in records), *failed]))
        for record in records:
            if record.job_id not in refused:
                recorder.refused(_failed(record, "the daemon stopped before it was re-pinned"))
        book.forget_many([r.job_id for r in records])
        return [r for r in records if r.job_id in refused]

    def unpin_on_stop(self, obs: Observation, book: JobBook, report: CycleReport, policy: str) -> None:
        """A daemon stopping with no standby to take its pins over lets go of the pending jobs it pinned, so that none
        waits on nodes no daemon re-plans: each one's node list cleared and the request its pin changed put back
        (``unpin_argv``; where Slurm will not take the request back, the node list alone), logged ``left``. Slurm
        starts each as it would have, once its lease (if it has one) runs out; one that started meanwhile runs on.
        A job re-pinned by a migration whose release is owed stays held there, for the next daemon to take over; a
        requeued job is released, unpinned (``release_on_stop``)."""
        pinned = sorted(_pinned(obs, book) - book.release_due, key=id_order)
        if not pinned:
            return
        why = "the daemon stopped: its pin lifted, left to Slurm"
        for job_id, result in self._unpin(pinned, book, report)[1].items():
            if result is not None:  # (most often: Slurm started it since the last read)
                log.debug("job %s kept its pin: %s", job_id, result)
                continue
            report.decisions.append(_left_record(obs.slurm_jobs.get(job_id), job_id, policy, why))
            log.info("job %s left to Slurm: %s", job_id, why)
        book.forget_many(pinned)

    def _unpin(self, job_ids: Sequence[str], book: JobBook, report: CycleReport, start_now: bool = False,
               before: Sequence[list[str]] = ()) -> tuple[list[str | None], dict[str, str | None]]:
        """Let go of pending jobs the daemon pinned (``unpin_argv``, with ``start_now`` their lease lifted too), sent
        in one go after the lines ``before``; where Slurm answers that it will not take a job's request back, its
        node list alone is cleared (reported: the job keeps its pin's form). Returns the results of ``before``, and
        per job why Slurm refused, or None."""
        lines = [*before, *(unpin_argv(j, book.asked(j), start_now) for j in job_ids)]
        sent = self.backend.scontrol_lines(lines) if lines else []
        results = dict(zip(job_ids, sent[len(before):]))
        again = [j for j, result in results.items()
                 if result is not None and book.asked(j) is not None and refused_for_good(result)]
        for job_id, result in zip(again, self.backend.scontrol_lines([unpin_argv(j, None, start_now) for j in again])):
            if result is None:
                report.error("leave", f"job {job_id}: its pin cleared, its request not put back ({results[job_id]})")
                results[job_id] = None
            else:
                results[job_id] = f"{results[job_id]}; its node list alone: {result}"
        return sent[:len(before)], results

    def _release(self, job_ids: list[str], unpin: Collection[str] | None = None) -> list[str]:
        """A requeue that failed half-way must not leave the job held (releasing a job not held fails harmlessly), nor
        pinned where it ran: the node list of each of ``unpin`` (None: of every one released) is cleared first, in
        the same go, so that the job is placed afresh instead of waiting for nodes the engine may have handed on since
        (a job not pending refuses the update whole). Returns the jobs Slurm refused to release, e.g. because a job
        was still completing and its hold is yet to come."""
        cleared = [unpin_argv(j, None) for j in (job_ids if unpin is None else unpin)]
        lines = [*cleared, release_argv(job_ids)] if job_ids else cleared
        results = self.backend.scontrol_lines(lines) if lines else []
        for argv, result in zip(cleared, results):
            if result is not None:
                log.debug("%s: %s", " ".join(argv), result)
        refused = _refused(results[-1], job_ids) if job_ids else {}
        for job_id, why in refused.items():
            log.debug("release of job %s after a failed migration: %s", job_id, why)
        return list(refused)

    def release_left_held(self, obs: Observation, book: JobBook, report: CycleReport) -> None:
        """Release the jobs whose release is owed (a failed migration left them held, or Slurm refused a re-pinned
        one's), once Slurm shows them pending; forget those gone. A migration owed its release is done once the job
        is released, by the daemon or by someone else."""
        due = []
        found = obs.find(book.release_due) if book.release_due else {}  # (one not managed is no slurm_jobs')
        for job_id in sorted(book.release_due, key=id_order):
            job = found.get(job_id)
            if job is not None and not job.pending and (job.held or book.owed_migration(job_id) is None):
                continue  # still completing: its hold comes when it is pending again
            if job is None:
                book.released(job_id)
            elif not job.held:
                _done_late(book.released(job_id), report)
            else:
                due.append(job_id)
        # a re-pinned job owed its release keeps its new pin: its migration stands
        refused = set(self._release(due, [j for j in due if book.owed_migration(j) is None]))
        for job_id in due:
            if job_id not in refused:
                log.info("released job %s, left held by a migration", job_id)
                _done_late(book.released(job_id), report)

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
        (LEAVING): their lease is lifted (and the refused pin cleared, the request it changed put back), so that
        they start as they would without the daemon; each is logged once, action ``left``. Jobs left that Slurm no
        longer has pending are forgotten."""
        left, leaving = book.in_state(JobState.LEFT), book.in_state(JobState.LEAVING)
        book.forget_many([j for j in left if (s := obs.slurm_jobs.get(j)) is None or not s.pending])
        for job_id in sorted(obs.left.keys() - left.keys() - leaving.keys(), key=id_order):
            # a job the daemon had pinned before it came to be left (its nodes lost what it asks): unpinned too
            book.move(job_id, JobState.LEAVING, why=obs.left[job_id], unpin=pinned_by_us(obs, book, job_id))
        kept, unpinned = (sorted((j for j, r in leaving.items() if r.unpin is unpin), key=id_order)
                          for unpin in (False, True))
        lists = [(leave_argv(batch), batch) for batch in _chunks(kept)]
        lifted, unpinned_results = self._unpin(unpinned, book, report, start_now=True, before=[a for a, _ in lists])
        done = self._done(lists, lifted, report, "leave")
        for job_id, result in unpinned_results.items():
            if result is None:
                done.append(job_id)
            else:
                report.error("leave", f"job {job_id}: Slurm refused its leave ({result})")
        for job_id in done:
            why = leaving[job_id].why
            book.move(job_id, JobState.LEFT, why=why)
            report.decisions.append(_left_record(obs.slurm_jobs.get(job_id), job_id, policy, why))
            log.info("job %s left to Slurm: %s", job_id, why)
        for job_id in list(leaving):  # Slurm kept its lease: the job waits on, and is left again next cycle
            book.move(job_id, JobState.WAITING)

    def _each(self, lists: list[tuple[list[str], list[str]]], report: CycleReport, kind: str) -> list[str]:
        """The jobs for which their list command (argv, its jobs) succeeded, all commands sent in one go."""
        return self._done(lists, self.backend.scontrol_lines([argv for argv, _ in lists]) if lists else [], report,
                          kind)

    @staticmethod
    def _done(lists: list[tuple[list[str], list[str]]], results: Sequence[str | None], report: CycleReport,
              kind: str) -> list[str]:
        """The jobs for which their list command (argv, its jobs) succeeded, by its ``results``; the others reported."""
        done: list[str] = []
        for (_, job_ids), result in zip(lists, results):
            if result is not None and not _named(result, job_ids):
                report.error(kind, result)
                continue
            refused = _refused(result, job_ids)
            for job_id, why in refused.items():
                report.error(kind, f"job {job_id}: Slurm refused its {kind} ({why})")
            done += [j for j in job_ids if j not in refused]
        return done


@dataclass(slots=True)
class _Move:
    """One job's moves of this cycle: its new GPUs per node, how Slurm hears of them (``kind``), the decision, its
    record's place in the report, how many instances moved, and the re-point's update or why it cannot be made."""

    job: str
    target: dict[str, int]
    kind: str
    decision: Decision
    at: int
    count: int
    update: list[str] | None = None
    why: str | None = None


class _Failures:
    """A cycle's failed migrations: each one's record rewritten as failed and its instances' migrations logged
    failed; the job forgotten where the policy moved it and Slurm did not (the next cycle checks it again); the jobs a
    requeue may have left held released, before the log says their migration failed (``settle``)."""

    def __init__(self, report: CycleReport, recorder: Recorder, book: JobBook) -> None:
        self.report, self.recorder, self.book = report, recorder, book
        self.unreleased: list[str] = []
        self.unpinned: list[str] = []
        self.rewrites: list[DecisionRecord] = []

    def add(self, record: DecisionRecord, why: str, at: int | None = None, release: bool = False,
            released: bool = False, unpin: bool = False) -> None:
        """``record`` (the report's ``at``-th, when this cycle's) failed for ``why``; with ``release`` the job may be
        held, and is released unless it was (``released``); with ``release`` or ``unpin`` its node list, where it
        ran or a pin the failure left half-made, is cleared."""
        job_id = record.job_id
        failed = _failed(record, f"Slurm refused: {why}")
        if at is not None:
            self.report.decisions[at] = failed
        self.rewrites.append(failed)
        self.report.error("migration", f"job {job_id}: {why}")
        self.report.migrations += _migrations(record, failed.reason, "failed")
        if self.book.state(job_id) in (JobState.RUNNING, JobState.REQUEUED):
            self.book.move(job_id, None)
        if release or unpin:
            self.unpinned.append(job_id)
        if release and not released:
            self.unreleased.append(job_id)
        log.info("migrated job %s to %s: failed", job_id, fmt(record.gpus_per_node))

    def settle(self, release: Callable[[list[str], list[str]], list[str]]) -> None:
        """Release the jobs that may be held (those Slurm refuses now are released once it shows them pending),
        then rewrite the records: a daemon killed in between finds a held job's requeue logged, and takes it over."""
        self.book.owe_release(release(self.unreleased, self.unpinned))
        for record in self.rewrites:
            self.recorder.refused(record)


def _failed(record: DecisionRecord, why: str) -> DecisionRecord:
    """A migration's ``record`` rewritten: it failed, for ``why``."""
    return replace(record, action="failed", reason=f"compact; {why}")


def _requeued(obs: Observation, book: JobBook) -> tuple[dict[str, SlurmJob], dict[str, str]]:
    """The jobs requeued in earlier cycles as the read shows them: pending (due: re-pinned and released now), and
    those whose migration is lost, with why: gone, or running again unheld (someone released it first). One still
    held and completing waits, however long its steps take to end: the policy keeps its new nodes meanwhile."""
    requeued = book.in_state(JobState.REQUEUED)
    found = obs.lookup(requeued.keys())  # (most are pending or completing: among the GPU jobs read)
    due, lost = {}, {}
    for job_id in sorted(requeued, key=id_order):
        slurm = found.get(job_id)
        if slurm is None:
            lost[job_id] = "Slurm no longer has the job"
        elif slurm.pending:
            due[job_id] = slurm
        elif not slurm.held:
            lost[job_id] = f"{slurm.state} again, released by someone else before it was re-pinned"
    return due, lost


def refused_for_good(failure: str) -> bool:
    """Whether ``failure`` is Slurm's answer to an update of a pending job (see UNANSWERED): not Slurm having started
    the job first (NOT_PENDING), not an update Slurm did not answer."""
    return not NOT_PENDING.search(failure) and not UNANSWERED.search(failure)


def _done_late(migration: DecisionRecord | None, report: CycleReport) -> None:
    """A re-pinned job's owed release is taken (None: it was owed by a failed migration): its migration is done."""
    if migration is not None:
        report.migrations += _migrations(migration, "compact", "done")
        log.info("migrated job %s to %s: released late", migration.job_id, fmt(migration.gpus_per_node))


def _migrations(record: DecisionRecord, reason: str, status: str) -> list[MigrationRecord]:
    """The instances a migration's ``record`` moves, each from where it was (``from_nodes``) to its new node."""
    return [MigrationRecord(job_id=record.job_id, instance=i, src=src, dst=dst, reason=reason, status=status)
            for i, (src, dst) in enumerate(zip(record.from_nodes, record.nodes)) if src != dst]


def _pinned(obs: Observation, book: JobBook) -> set[str]:
    """The pending jobs that may hold a pin of the daemon's: placed; let go with their pin as the last read showed it
    (not one someone else set since); waiting with the request of a first pin kept (one Slurm did not answer, or
    whose lease Slurm would not lift, may have reached it: their request was the user's, never a node list)."""
    waiting = book.in_state(JobState.WAITING)
    return (book.placed.keys() | {j for j in book.pinned() if pinned_by_us(obs, book, j)}
            | {j for j in waiting if book.asked(j) is not None})


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
