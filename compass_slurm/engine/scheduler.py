"""The queue in front of a policy: FIFO with an optional backfill test, Compact after every change.

Replay, the simulator and the daemon all drive a Scheduler; only they know about
time. The scheduler turns "a job arrived" / "a job ended" into placements and
migrations using the policy it was given.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from .model import Decision, EngineError, Job, Migration
from .policies.base import Policy

#: Given a queued job that is not at the head, may it start before the blocked head?
BackfillTest = Callable[[Job], bool]


@dataclass
class Step:
    """What one event caused: placements made (in order) and migrations carried out."""

    decisions: list[Decision] = field(default_factory=list)
    migrations: list[Migration] = field(default_factory=list)

    def extend(self, other: "Step") -> None:
        self.decisions.extend(other.decisions)
        self.migrations.extend(other.migrations)


class Scheduler:
    def __init__(self, policy: Policy, backfill: BackfillTest | None = None) -> None:
        self.policy = policy
        self.backfill = backfill
        self.queue: dict[str, Job] = {}
        self.eligible: dict[str, Collection[str] | None] = {}

    @property
    def running(self) -> dict[str, Job]:
        return self.policy.cluster.jobs

    def knows(self, job_id: str) -> bool:
        return job_id in self.queue or job_id in self.running

    def arrive(self, job: Job, eligible: Collection[str] | None = None) -> Step:
        """Queue ``job`` (behind anything already waiting) and start whatever now fits."""
        if self.knows(job.id):
            raise EngineError(f"duplicate job id {job.id}")
        if job.gpus > self.policy.cluster.max_gpus:
            raise EngineError(
                f"job {job.id}: {job.gpus} GPUs per instance exceed the largest node ({self.policy.cluster.max_gpus})"
            )
        self.queue[job.id] = job
        self.eligible[job.id] = eligible
        return self.drain()

    def depart(self, job_id: str) -> Step:
        """``job_id`` ended (or left the queue): free its GPUs, compact, start what now fits."""
        if job_id in self.queue:
            del self.queue[job_id]
            del self.eligible[job_id]
            return self.drain()
        if job_id not in self.running:
            raise EngineError(f"departure of unknown job {job_id}")
        step = Step(migrations=list(self.policy.remove(job_id)))
        step.migrations.extend(self.policy.compact())
        step.extend(self.drain())
        return step

    def drain(self) -> Step:
        """Start queued jobs in order; past a blocked job only those the backfill test allows."""
        step = Step()
        if self.backfill is None:
            # Strict FIFO: only the head can start, so never walk (or copy) the whole queue.
            while self.queue:
                job = next(iter(self.queue.values()))
                if not self._start(job, step):
                    break
            return step
        blocked = False
        for job in list(self.queue.values()):
            if blocked and not self.backfill(job):
                continue
            if not self._start(job, step):
                blocked = True
        return step

    def _start(self, job: Job, step: Step) -> bool:
        decision = self.policy.place(job, self.eligible[job.id])
        if decision is None:
            return False
        del self.queue[job.id]
        del self.eligible[job.id]
        step.decisions.append(decision)
        step.migrations.extend(decision.migrations)  # filler pulls happen before Compact's moves
        step.migrations.extend(self.policy.compact())
        return True
