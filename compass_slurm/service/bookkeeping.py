"""The daemon's bookkeeping: what one cycle saw and did (``CycleReport``), what the daemon remembers between
cycles (``Books``, ``Placed``), and the GPUs per node of a job as the policy holds it.

Shared by the cycle's steps, which are in daemon.py: sync (mirror Slurm into the policy),
decide, actuate (tell Slurm) and publish (log, metrics, anchors).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..engine.model import Decision, Job, Migration
from ..engine.policies.base import Policy
from ..engine.rate_limit import remaining
from .store import DecisionRecord, ErrorRecord, MigrationRecord, SampleRecord

log = logging.getLogger("compass.daemon")


@dataclass
class CycleReport:
    """What one cycle saw and did; ``skipped`` says why nothing was done."""

    cycle: int
    skipped: str | None = None
    decisions: list[DecisionRecord] = field(default_factory=list)
    migrations: list[MigrationRecord] = field(default_factory=list)
    adopted: list[str] = field(default_factory=list)
    departed: list[str] = field(default_factory=list)
    errors: list[ErrorRecord] = field(default_factory=list)
    sample: SampleRecord | None = None
    #: migrations the engine may still plan this cycle (None: unlimited): the rate limit's budget at the start,
    #: less what it spent
    budget: int | None = 0

    def error(self, kind: str, message: str) -> None:
        log.error("%s: %s", kind, message)
        self.errors.append(ErrorRecord(kind=kind, message=message))

    def compact(self, policy: Policy) -> tuple[Migration, ...]:
        """Compact within what is left of the cycle's migration budget."""
        moves, spent = policy.compact(self.budget)
        self.spend(spent)
        return moves

    def spend(self, spent: int) -> None:
        self.budget = remaining(self.budget, spent)


@dataclass
class Placed:
    """A decision Slurm has been told but not yet carried out."""

    decision: Decision
    job: Job
    at: float


@dataclass
class Books:
    """The daemon's memory beside the policy: what it told Slurm, what it checked, whose lease it renewed."""

    #: decided (or migrated) jobs Slurm has not started yet on their new nodes
    placed: dict[str, Placed] = field(default_factory=dict)
    #: per running job, the allocation last found equal to the policy's (unchanged ones are not re-checked)
    seen: dict[str, Mapping[str, int]] = field(default_factory=dict)
    #: per waiting managed job, when its lease was last renewed
    leases: dict[str, float] = field(default_factory=dict)
    #: jobs a failed migration may have left requeue-held (the release came too early): released once pending
    unreleased: set[str] = field(default_factory=set)
    #: decided jobs let go while Slurm held them back (a QOS or association limit reached meanwhile), still
    #: pinned to the decided nodes: that ReqNodeList is ours, not the user's, and must not tie them there
    pins: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: pending jobs whose logged decision no longer stands and that are not decided again yet (re-planned when
    #: no room was found in the same cycle; or Slurm never heard it, a daemon killed while telling it): their
    #: next decision is logged ``replanned``, not placed a second time
    replan: set[str] = field(default_factory=set)
    #: per pending job, the logged record of a place Slurm was never told (a daemon killed while telling it)
    #: and not decided again since: if Slurm starts the job by itself (its lease ran out), where it runs is
    #: checked against this record, so that the log's latest record names its nodes
    unheard: dict[str, DecisionRecord] = field(default_factory=dict)
    #: placed jobs whose nodes the last read found short of their CPUs or memory (re-planned if the next does)
    short: set[str] = field(default_factory=set)
    #: pending managed jobs left to Slurm for good, and why: a form the daemon cannot honour exactly, or a pin
    #: Slurm refused; never placed again while they wait, their lease lifted
    left: dict[str, str] = field(default_factory=dict)
    #: jobs to leave to Slurm this cycle (the acting step tells Slurm): why, and whether the node list the
    #: daemon set must be cleared
    leaving: dict[str, tuple[str, bool]] = field(default_factory=dict)

    def forget(self) -> None:
        """A rebuilt policy starts from Slurm alone."""
        self.placed.clear()
        self.seen.clear()
        self.unheard.clear()  # the take-over finds them again in the log


def per_node(policy: Policy, job_id: str) -> dict[str, int]:
    """GPUs per node of ``job_id`` as the policy holds it."""
    c = policy.cluster
    counts: Counter[str] = Counter()
    for key, i in c.instances_of(job_id):
        counts[c.nodes[i].name] += c.gpus_of(key)
    return dict(counts)


def counts(job: Job, nodes: tuple[str, ...]) -> dict[str, int]:
    """GPUs per node of ``job`` with one instance on each entry of ``nodes``."""
    out: Counter[str] = Counter()
    for name in nodes:
        out[name] += job.gpus
    return dict(out)


def fmt(gpus_per_node: Mapping[str, int]) -> str:
    return ",".join(f"{name}:{gpus}" for name, gpus in gpus_per_node.items())
