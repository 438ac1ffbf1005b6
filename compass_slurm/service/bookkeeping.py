"""The daemon's bookkeeping: what one cycle saw and did (``CycleReport``), and the GPUs per node of a job as the
policy holds it. What it remembers of each job between cycles is the JobBook (job_states.py).

Shared by the cycle's steps, which are in daemon.py: sync (mirror Slurm into the policy),
decide, actuate (tell Slurm) and publish (log, metrics, anchors).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..engine.model import Job, Migration
from ..engine.policies.base import Policy
from ..engine.rate_limit import remaining
from .store import DecisionRecord, ErrorRecord, MigrationRecord, SampleRecord

log = logging.getLogger("compass.daemon")

#: the kind of the errors the decision log's failures are recorded as
LOG = "log"


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

    @property
    def log_failed(self) -> bool:
        """Whether the decision log could not take the cycle (spooled or lost), or kept it from changing jobs."""
        return any(e.kind == LOG for e in self.errors)

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
