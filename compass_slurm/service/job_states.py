"""What the daemon knows of each job beside the policy: one record per job, in one named state.

A job with no record is one the daemon holds nothing about (pending and never leased, or running on an
allocation not checked yet). ``JobBook.move`` makes every change of state, and only the moves in
``TRANSITIONS`` are made; docs/architecture.md has the table. Four things are not states but marks a
record carries through them, because they outlive the state they began in:

- the **lease** (``leases``): when the daemon last renewed the job's begin-time lease; any state a
  waiting job can be in keeps it, placing, leaving to Slurm or a start ends it;
- the **unstarted count** (``unstarted``): how many of a placed job's decisions in a row Slurm took and did not
  start; kept while it is re-planned (PLACED, PINNED), so that a job Slurm keeps off every choice is left to it;
- the **request asked** (``asked``): a decided job's GPU request before the daemon's first pin changed it,
  put back when the job is left to Slurm unpinned;
- the **release owed** (``release_due``): a failed migration may have left the job requeue-held, and
  the daemon releases it once Slurm shows it pending; the job may run meanwhile (the requeue came late). A
  migration whose re-pin Slurm took and whose release it refused owes one too, and is done when it is taken.

A migration of a running job spans cycles: the job is REQUEUED from the requeue until Slurm shows it pending,
then re-pinned to its new nodes and released (PLACED), so that no cycle waits for a job's steps to end.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass

from ..engine.model import Decision, Job
from ..slurm.backend import Asked
from .store import DecisionRecord

log = logging.getLogger("compass.daemon")


class JobState(enum.Enum):
    #: pending and managed, not decided: only its lease is the daemon's
    WAITING = "waiting"
    #: decided (or re-pointed by a migration) and told to Slurm, not started on those nodes yet
    PLACED = "placed"
    #: running on the allocation last found equal to the policy's (an unchanged one is not checked again)
    RUNNING = "running"
    #: decided before and not placed now (Slurm held it back, or it went stale), its ReqNodeList still the
    #: daemon's pin: the pin must not tie it there; its next decision is logged ``replanned``
    PINNED = "pinned"
    #: its logged place no longer stands (Slurm never heard it: a daemon killed while telling it, or someone else
    #: set its nodes); its next decision is logged ``replanned``, and while Slurm has not heard a place of it,
    #: where Slurm starts it by itself is checked against the record (``unheard``); Slurm may still hold an older
    #: pin of ours (``pin``, found in the log after a restart), which must not tie it either
    REPLANNED = "replanned"
    #: to be left to Slurm this cycle (the acting step tells Slurm), and whether the daemon's pin is cleared
    LEAVING = "leaving"
    #: left to Slurm for good while it waits (a form the daemon cannot honour, or a pin Slurm refused)
    LEFT = "left"
    #: requeue-held by a migration, the policy holding it on its new nodes: re-pinned there and released once
    #: Slurm shows it pending, released as it is if that takes too long or Slurm refuses the pin
    REQUEUED = "requeued"


W, P, R, PIN, RE, LV, LF, RQ = JobState
#: (from, to) -> why; None is "no record". A move to the same state renews its payload.
TRANSITIONS: dict[tuple[JobState | None, JobState | None], str] = {
    (None, W): "a managed pending job's lease renewed",
    (None, P): "decided, or re-pointed by a migration, and Slurm told; or an earlier daemon's pin taken over",
    (W, P): "decided and Slurm told",
    (PIN, P): "decided again and Slurm told",
    (RE, P): "decided again and Slurm told",
    (RQ, P): "migrated: re-pinned to its new nodes and released (or its release owed), once Slurm showed it pending",
    (P, P): "re-pointed by a migration before it started",
    (None, R): "its allocation checked against the policy's (adopted where it differed)",
    (W, R): "Slurm started it by itself (its lease ran out, or it was not the daemon's to place)",
    (P, R): "started: its allocation checked against the decision",
    (R, R): "its new allocation checked",
    (PIN, R): "Slurm started it",
    (RE, R): "Slurm started it",
    (LV, R): "Slurm started it before it was left",
    (LF, R): "Slurm started it",
    (P, PIN): "Slurm holds it back since it was decided, or its decision went stale",
    (None, PIN): "an earlier daemon's pin taken over while Slurm holds the job back",
    (W, PIN): "an earlier daemon's pin taken over while Slurm holds the job back",
    (RE, PIN): "an earlier daemon's pin taken over while Slurm holds the job back",
    (None, RE): "an earlier daemon's logged place that Slurm never heard",
    (W, RE): "an earlier daemon's logged place that Slurm never heard",
    (RE, RE): "the logged place forgotten with a rebuilt policy (the take-over finds it again), or an older pin "
              "of ours found in the log, or undone since",
    (PIN, RE): "someone else set its nodes since: the pin is no longer ours",
    (None, LV): "the daemon cannot honour it, or Slurm refused its decision for good",
    (W, LV): "the daemon cannot honour it, or Slurm refused its decision for good",
    (PIN, LV): "Slurm refused its pin, or the daemon cannot honour it any more",
    (P, LV): "Slurm took its pins and did not start it, time after time",
    (RE, LV): "the daemon cannot honour it, or Slurm refused its decision for good",
    (LV, LF): "Slurm lifted its lease (and the pin)",
    (LV, W): "Slurm refused to lift its lease: tried again while it is left",
    (R, RQ): "migrated: requeue-held, to be re-pinned to its new nodes once Slurm shows it pending",
    (RQ, RQ): "moved again by a migration before it was re-pinned",
    (None, RQ): "an earlier daemon's requeue taken over: Slurm holds the job, its migration logged, not re-pinned",
    (W, None): "no longer waiting: its lease ends",
    (P, None): "ended, cancelled, or not adoptable where Slurm started it; or the policy was rebuilt",
    (R, None): "ended; or a migration failed (checked again next cycle); or the policy was rebuilt",
    (PIN, None): "no longer pending",
    (RE, None): "no longer pending (where it ran is checked against the record)",
    (LV, None): "no longer pending",
    (LF, None): "no longer pending",
    (RQ, None): "its migration failed (released as it is), or someone else released it first, or Slurm forgot the job; "
                "or the policy was rebuilt (the take-over finds it again, else it is released)",
}
#: where the lease is kept: the states of a job that waits for the daemon to place it
LEASED = frozenset({W, PIN, RE, LV})
#: where the unstarted count is kept: a placed job and the same job re-planned
COUNTED = frozenset({P, PIN})
#: where a pin of the daemon's may stand on a pending job, and with it the request it changed (WAITING too: a first
#: pin that failed, or went unanswered, may have reached Slurm)
PINNABLE = frozenset({W, P, PIN, RE, LV})


class InvalidTransition(RuntimeError):
    """A move ``TRANSITIONS`` does not list: a bug in the daemon."""


@dataclass(slots=True)
class JobRecord:
    """One job as the daemon knows it; only the fields of its state are set."""

    id: str
    state: JobState
    #: PLACED: what Slurm was told, of which job, and when (a job told late in a long cycle is not stale);
    #: REQUEUED: its new place, of which job
    decision: Decision | None = None
    job: Job | None = None
    at: float = 0.0
    #: PLACED: the last read found its nodes short of its CPUs or memory (re-planned if the next one does too)
    short: bool = False
    #: RUNNING: the allocation last found equal to the policy's (the very object read: see sync.mirror)
    alloc: Mapping[str, int] | None = None
    #: PINNED (and REPLANNED, when Slurm still holds an older one): the nodes of the daemon's pin
    pin: tuple[str, ...] | None = None
    #: REPLANNED: the logged record of a place Slurm does not hold (never heard, or someone else set its nodes
    #: since; None: the record is forgotten)
    unheard: DecisionRecord | None = None
    #: PLACED and PINNED: the logged record of the decision Slurm holds (REPLANNED's ``unheard`` if it no longer
    #: does); REQUEUED: its migration's record
    logged: DecisionRecord | None = None
    #: LEAVING and LEFT: why it is left to Slurm; LEAVING: whether the daemon's pin is to be cleared
    why: str = ""
    unpin: bool = False


class JobBook:
    """Every job's record, indexed by state (the cycle's queries are set operations over 100,000 jobs)."""

    #: raise on a move TRANSITIONS does not list (tests); a daemon logs it and moves all the same
    strict = False

    def __init__(self) -> None:
        self._records: dict[str, JobRecord] = {}
        self._in: dict[JobState, dict[str, JobRecord]] = {s: {} for s in JobState}
        self._leases: dict[str, float] = {}
        #: RUNNING's allocations by job id (the very objects read: sync.mirror compares identities)
        self._allocs: dict[str, Mapping[str, int]] = {}
        #: the jobs whose release is owed, each with the migration done when it is taken (None: one that failed)
        self._release_due: dict[str, DecisionRecord | None] = {}
        #: how many of each placed job's decisions in a row went stale with Slurm not starting it (PLACED and PINNED)
        self._unstarted: dict[str, int] = {}
        #: each decided job's request before the daemon's first pin, while a pin may stand (PINNABLE): leaving it to
        #: Slurm puts the request back
        self._asked: dict[str, Asked] = {}

    # -- queries ----------------------------------------------------------------------------

    def state(self, job_id: str) -> JobState | None:
        r = self._records.get(job_id)
        return None if r is None else r.state

    def get(self, job_id: str) -> JobRecord | None:
        return self._records.get(job_id)

    def in_state(self, state: JobState) -> Mapping[str, JobRecord]:
        """The records in ``state`` by job id (a live view: do not change it)."""
        return self._in[state]

    @property
    def placed(self) -> Mapping[str, JobRecord]:
        return self._in[P]

    @property
    def allocs(self) -> Mapping[str, Mapping[str, int]]:
        return self._allocs

    @property
    def leases(self) -> Mapping[str, float]:
        """When each leased job's lease was last renewed."""
        return self._leases

    @property
    def release_due(self) -> Set[str]:
        return self._release_due.keys()

    def owed_migration(self, job_id: str) -> DecisionRecord | None:
        """The migration done when the job's owed release is taken (None: none)."""
        return self._release_due.get(job_id)

    def pinned(self) -> dict[str, tuple[str, ...]]:
        """The daemon's pins on pending jobs it does not place now: PINNED, and REPLANNED with an older pin."""
        pins = {j: r.pin for j, r in self._in[PIN].items()}
        pins.update((j, r.pin) for j, r in self._in[RE].items() if r.pin is not None)
        return pins

    def requeues(self) -> list[DecisionRecord]:
        """The migration records of the jobs the daemon requeue-held and has not released: REQUEUED, and those
        re-pinned whose release is owed."""
        return [r.logged for r in self._in[RQ].values()] + [m for m in self._release_due.values() if m is not None]

    def replanned(self) -> set[str]:
        """The jobs whose next decision is logged ``replanned``."""
        return self._in[PIN].keys() | self._in[RE].keys()

    def left_or_leaving(self) -> set[str]:
        return self._in[LF].keys() | self._in[LV].keys()

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self):
        return iter(self._records.values())

    # -- the one mutator of states ------------------------------------------------------------

    def move(self, job_id: str, to: JobState | None, *, decision: Decision | None = None, job: Job | None = None,
             at: float = 0.0, alloc: Mapping[str, int] | None = None, pin: tuple[str, ...] | None = None,
             unheard: DecisionRecord | None = None, logged: DecisionRecord | None = None, why: str = "",
             unpin: bool = False) -> None:
        """Put ``job_id`` in state ``to`` (None: forget it) with that state's payload; the lease survives only
        into a state of ``LEASED``, the unstarted count of ``COUNTED``, the request asked of ``PINNABLE``."""
        record = self._records.get(job_id)
        frm = None if record is None else record.state
        if (frm, to) not in TRANSITIONS:
            if self.strict:
                raise InvalidTransition(f"job {job_id}: {_name(frm)} -> {_name(to)}")
            log.error("job %s: unexpected move %s -> %s (a bug; made all the same)", job_id, _name(frm), _name(to))
        if record is not None:
            del self._in[frm][job_id]
            if frm is R:
                del self._allocs[job_id]
        # the marks end with the states they live in (None is in none of them)
        if to not in LEASED:
            self._leases.pop(job_id, None)
        if to not in COUNTED:
            self._unstarted.pop(job_id, None)
        if to not in PINNABLE:
            self._asked.pop(job_id, None)
        if to is None:
            if record is not None:
                del self._records[job_id]
            return
        record = self._records[job_id] = JobRecord(job_id, to, decision, job, at, False, alloc, pin, unheard, logged,
                                                   why, unpin)
        self._in[to][job_id] = record
        if to is R:
            self._allocs[job_id] = alloc

    def forget_many(self, job_ids: Iterable[str]) -> None:
        for job_id in list(job_ids):
            self.move(job_id, None)

    # -- the marks ----------------------------------------------------------------------------

    def renew(self, job_ids: Iterable[str], now: float) -> None:
        """Their leases were renewed at ``now``; a job with no record comes to be WAITING."""
        records, leases = self._records, self._leases
        for job_id in job_ids:
            if job_id not in records:
                self.move(job_id, W)
            leases[job_id] = now

    def end_leases(self, job_ids: Iterable[str]) -> None:
        """The leases of jobs no longer waiting end; a job that was only WAITING is forgotten."""
        waiting = self._in[W]
        for job_id in list(job_ids):
            if job_id in waiting:
                self.move(job_id, None)
            else:
                self._leases.pop(job_id, None)

    def ask(self, job_id: str, asked: Asked) -> None:
        """The job's request before the daemon's first pin (one set before stays: the pins since changed it)."""
        self._asked.setdefault(job_id, asked)

    def asked(self, job_id: str) -> Asked | None:
        return self._asked.get(job_id)

    def unstarted(self, job_id: str, again: bool) -> int:
        """The job's decision went stale, ``again`` with Slurm not starting it (else for its nodes: the count starts
        over); how many have in a row now."""
        count = self._unstarted[job_id] = self._unstarted.get(job_id, 0) + 1 if again else 0
        return count

    def set_short(self, short: Set[str]) -> None:
        """Which PLACED jobs' nodes the last read found short of their CPUs or memory."""
        for job_id, record in self._in[P].items():
            record.short = job_id in short

    def owe_release(self, job_ids: Iterable[str], migration: DecisionRecord | None = None) -> None:
        """Their release is owed; ``migration``: the one done when it is taken."""
        self._release_due.update(dict.fromkeys(job_ids, migration))

    def released(self, job_id: str) -> DecisionRecord | None:
        """The job's owed release was taken, or is no longer owed; returns the migration that is done with it."""
        return self._release_due.pop(job_id, None)

    # -- whole-book steps ---------------------------------------------------------------------

    def rebuilt(self) -> None:
        """A rebuilt policy starts from Slurm alone: the placed and running jobs are found again, and the
        unheard records and the requeues again in the log (the take-over). A release owed stays owed, but no
        migration waits on it: one taken over is done when re-pinned again."""
        self._release_due = dict.fromkeys(self._release_due)
        self.forget_many(self._in[P])
        self.forget_many(self._in[R])
        self.forget_many(self._in[RQ])
        for job_id in list(self._in[RE]):
            self.move(job_id, RE)

    def check(self) -> list[str]:
        """What breaks the book's own invariants (none: an empty list): the index agrees with the records,
        leases are only on waiting jobs, unstarted counts on placed or pinned ones, each state's payload is set."""
        bad = []
        for state, records in self._in.items():
            for job_id, r in records.items():
                if self._records.get(job_id) is not r or r.state is not state:
                    bad.append(f"job {job_id}: indexed as {state.value}, recorded as {r.state.value}")
        if sum(map(len, self._in.values())) != len(self._records) or self._allocs.keys() != self._in[R].keys():
            bad.append("a record outside the index")
        for job_id in self._leases:
            if self.state(job_id) not in LEASED:
                bad.append(f"job {job_id}: leased while {_name(self.state(job_id))}")
        for job_id in self._unstarted:
            if self.state(job_id) not in COUNTED:
                bad.append(f"job {job_id}: counted unstarted while {_name(self.state(job_id))}")
        for job_id in self._asked:
            if self.state(job_id) not in PINNABLE:
                bad.append(f"job {job_id}: its request kept while {_name(self.state(job_id))}")
        for r in self._records.values():
            if (r.state in (P, RQ)) != (r.decision is not None) or (r.state is R) != (r.alloc is not None) or (
                    r.state is PIN and r.pin is None) or (r.pin is not None and r.state not in (PIN, RE)):
                bad.append(f"job {r.id}: {r.state.value} with the payload of another state")
        return bad


def _name(state: JobState | None) -> str:
    return "none" if state is None else state.value
